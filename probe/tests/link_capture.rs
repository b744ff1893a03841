//! `--capture` with `--link`: the relay records each packet it reads from a TUN device as a
//! segment of its sender, stamped as the sender's kernel sent it. Needs root or a user namespace
//! for the link (CI runs as root); skipped otherwise.

mod common;

use ackscope_shared::analysis::RunAnalysis;
use ackscope_shared::attribution;
use ackscope_shared::event::tcp_flags;
use ackscope_shared::report::ReportOutcome;
use ackscope_shared::{Event, EventKind, LinkAction, RrSpec, Segment, Side};
use common::ackscope;

/// A story-3 split write over a 40 ms link (the rr defaults: length then a 2048-byte body,
/// Nagle on both sides, MTU 1500), captured at the relay.
#[test]
#[ignore = "needs root (the link capture test): cargo xtask test runs it as root"]
fn the_relay_captures_both_directions_on_the_run_clock_and_stalls_cite_the_packets() {
    common::require_root("the link capture test");
    let file = common::temp("link-capture", "run.ackscope");
    let file = file.to_str().unwrap();
    let args = ["run", "rr", "--link", "rtt=40ms", "--count", "6", "--capture", "-o", file];
    let run = ackscope(&[&args[..], &["--json"]].concat());
    assert!(run.status.success());
    let summary = common::report_of(&run);
    assert_eq!(summary.outcome, ReportOutcome::Completed);
    let capture = summary.capture.as_ref().unwrap_or_else(|| panic!("no capture in {summary:?}"));
    let captured = capture.segments;
    assert!(captured >= 50, "{capture:?}");
    let spec: RrSpec = serde_json::from_value(summary.config.clone()).unwrap();

    let events: Vec<Event> = common::exported_events(file);
    let _ = std::fs::remove_file(file);
    let mut segments: Vec<(&Event, &Segment)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Segment(s) => Some((e, s)),
            _ => None,
        })
        .collect();
    segments.sort_by_key(|(e, _)| e.at_ns);
    assert_eq!(segments.len() as u64, captured, "every recorded segment is in the file");
    let syn = |side: Side| segments.iter().any(|(e, s)| e.side == side && s.has(tcp_flags::SYN));
    assert!(syn(Side::Client) && syn(Side::Server), "the handshake, both ways, is tagged");

    // When the link delivered the packet `side` sent at `at_ns`: its Enqueued event has the
    // segment's stamp, its Delivered event the same packet number.
    let delivered = |side: Side, at_ns: u64| {
        let link = |e: &Event| match &e.kind {
            EventKind::Link(link) if e.side == side => Some(*link),
            _ => None,
        };
        let packet = events
            .iter()
            .filter(|e| e.at_ns == at_ns)
            .filter_map(link)
            .find(|l| l.action == LinkAction::Enqueued)
            .unwrap_or_else(|| panic!("no Enqueued link event at {at_ns} for {side:?}"))
            .packet;
        events
            .iter()
            .filter(|e| {
                link(e).is_some_and(|l| l.packet == packet && l.action == LinkAction::Delivered)
            })
            .map(|e| e.at_ns)
            .next()
            .unwrap_or_else(|| panic!("packet {packet} from {side:?} never delivered"))
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    for req in 1..6 {
        let data = |side: Side| {
            segments
                .iter()
                .filter(move |(e, s)| e.req.0 == req && e.side == side && s.len > 0)
                .copied()
                .collect::<Vec<_>>()
        };
        let (request, answer) = (data(Side::Client), data(Side::Server));
        let bytes = |list: &[(&Event, &Segment)]| list.iter().map(|(_, s)| s.len).sum::<u32>();
        assert_eq!(bytes(&request), 2052, "request {req}: the length and body: {request:?}");
        assert_eq!(bytes(&answer), 2052, "request {req}: the echo: {answer:?}");
        // The segment that completed the request, and the first of the answer.
        let (last, _) = request.last().unwrap();
        let (first, _) = answer[0];
        let sent = first.at_ns - last.at_ns;
        let arrived = delivered(Side::Server, first.at_ns) - last.at_ns;
        eprintln!(
            "request {req}: answer sent {:.2} ms, delivered {:.2} ms after the request's last \
             segment",
            ms(sent),
            ms(arrived)
        );
        assert!((15_000_000..35_000_000).contains(&sent), "half an RTT: {sent} ns");
        assert!((35_000_000..60_000_000).contains(&arrived), "one RTT: {arrived} ns");
    }

    let mut analysis = RunAnalysis::new();
    // As the CLI does for a link: half the RTT is the path, not a stall.
    analysis.set_path_delay_ns(20_000_000);
    analysis.push_all(&events);
    let stalls = attribution::attribute(&analysis, Some(&spec));
    for stall in &stalls {
        eprintln!("{:?} {:.1} ms: {}", stall.class, ms(stall.wait_ns), stall.evidence);
    }
    // Story 3: Nagle holds the 600-byte tail until the 4-byte segment's ACK is back, one RTT.
    assert!(!stalls.is_empty());
    for stall in &stalls {
        assert_eq!(stall.class, attribution::StallClass::NagleRoundTrip, "{}", stall.evidence);
        assert!(
            stall.evidence.contains("the 4-byte segment at"),
            "cites the packets: {}",
            stall.evidence
        );
    }
}
