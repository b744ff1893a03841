//! Packet capture (`--capture`): story 1 on the wire, the packet stamps against the syscalls',
//! and the message without CAP_NET_RAW. Needs root (CI runs as root); skipped otherwise.

mod common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant, SystemTime};

use ackscope_probe::capture::CAPTURE_VIA;
use ackscope_shared::analysis::RunAnalysis;
use ackscope_shared::attribution::{self, Stall, StallClass};
use ackscope_shared::event::tcp_flags;
use ackscope_shared::packet_stalls;
use ackscope_shared::report::{CaptureFigures, RunReport};
use ackscope_shared::{ConnId, Event, EventKind, RrSpec, Segment, Side};
use common::ackscope;

/// The largest step of CLOCK_REALTIME against the monotonic clock seen in `window`, sampled
/// every half millisecond (std's `SystemTime` and `Instant` read those two clocks).
fn realtime_steps_ns(window: Duration) -> i64 {
    let offset = |start: Instant, epoch: SystemTime| {
        let mono = start.elapsed().as_nanos() as i128;
        let real = SystemTime::now().duration_since(epoch).map_or(0, |d| d.as_nanos() as i128);
        real - mono
    };
    let (start, epoch) = (Instant::now(), SystemTime::now());
    let mut previous = offset(start, epoch);
    let mut largest = 0i128;
    while start.elapsed() < window {
        std::thread::sleep(Duration::from_micros(500));
        let now = offset(start, epoch);
        largest = largest.max((now - previous).abs());
        previous = now;
    }
    i64::try_from(largest).unwrap_or(i64::MAX)
}

/// `ackscope run rr` as a ping-pong (TCP_NODELAY, one write a message) with `--capture` and
/// `--json`, and `args`.
fn captured_ping_pong(args: &[&str]) -> std::process::Output {
    let common = ["run", "rr", "--nodelay", "both", "--write", "single", "--capture", "--json"];
    ackscope(&[&common[..], args].concat())
}

/// [`captured_ping_pong`], capturing the way `via` names ([`CAPTURE_VIA`]).
fn captured_ping_pong_via(via: &str, args: &[&str]) -> std::process::Output {
    let common = ["run", "rr", "--nodelay", "both", "--write", "single", "--capture", "--json"];
    ackscope_via(via, &[&common[..], args].concat())
}

/// `ackscope ARGS` with [`CAPTURE_VIA`] set to `via`.
fn ackscope_via(via: &str, args: &[&str]) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(args)
        .env(CAPTURE_VIA, via)
        .output()
        .unwrap();
    eprintln!(
        "$ {CAPTURE_VIA}={via} ackscope {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// How a run's packet capture went, from its summary.
fn capture_of(summary: &RunReport) -> &CaptureFigures {
    summary.capture.as_ref().unwrap_or_else(|| panic!("no capture in {summary:?}"))
}

fn segments(events: &[Event]) -> Vec<(&Event, &Segment)> {
    let mut segments: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Segment(segment) => Some((e, segment)),
            _ => None,
        })
        .collect();
    segments.sort_by_key(|(e, _)| e.at_ns);
    segments
}

#[test]
#[ignore = "needs root (packet capture): cargo xtask test runs it as root"]
fn story_1_on_the_wire_small_segment_delayed_pure_ack_then_the_body() {
    common::require_root("packet capture");
    let dir = common::temp_folder("capture");
    let file = dir.join("story1.ackscope");
    let file = file.to_str().unwrap();
    let run = ackscope(&["run", "story1", "--count", "10", "--capture", "--json", "-o", file]);
    assert!(run.status.success());
    let summary = common::report_of(&run);
    let capture = capture_of(&summary);
    assert!(capture.segments >= 60, "{capture:?}");
    assert!(capture.offset_uncertainty_ns < 10_000, "{capture:?}");
    // The offset moves only if something steps the realtime clock (time sync on some VMs steps
    // it by 0.5 ms every 100 ms): then by no more than the clock itself is seen to step.
    let steps = realtime_steps_ns(Duration::from_millis(300));
    let drift = capture.drift_ns.abs();
    assert!(drift < 100_000 + steps, "{capture:?}; the realtime clock steps by {steps} ns here");

    let events: Vec<Event> = common::exported_events(file);
    let segments = segments(&events);
    // Every request after the first (a new connection ACKs at once) stalls client->server.
    for req in 1..10 {
        let of_req: Vec<_> = segments.iter().filter(|(e, _)| e.req.0 == req).collect();
        let from = |side: Side| of_req.iter().filter(move |(e, _)| e.side == side);
        let (length_at, length) = from(Side::Client)
            .find(|(_, s)| s.len == 4)
            .map(|(e, s)| (e.at_ns, *s))
            .unwrap_or_else(|| panic!("request {req}: no 4-byte segment: {of_req:#?}"));
        let (ack_at, _) = from(Side::Server)
            .find(|(e, s)| {
                s.is_pure_ack() && s.ack == length.seq.wrapping_add(4) && e.at_ns > length_at
            })
            .map(|(e, s)| (e.at_ns, *s))
            .unwrap_or_else(|| panic!("request {req}: no pure ACK of it: {of_req:#?}"));
        let delay = ack_at - length_at;
        assert!((30_000_000..60_000_000).contains(&delay), "request {req}: ACK after {delay} ns");
        let (body_at, _) = from(Side::Client)
            .find(|(e, s)| s.len == 2048 && e.at_ns >= ack_at)
            .map(|(e, s)| (e.at_ns, *s))
            .unwrap_or_else(|| panic!("request {req}: no body after the ACK: {of_req:#?}"));
        assert!(body_at - ack_at < 5_000_000, "request {req}: body {} ns after", body_at - ack_at);
        assert!(length.has(tcp_flags::ACK));
    }
}

/// A write's stream offsets before and after it, and when it started.
type Write = (u64, u64, u64);

/// `ackscope run rr --capture -o F --json` of 10 requests, capturing the way `via` names
/// ([`CAPTURE_VIA`]): the summary's `capture` object and the recorded events.
fn captured_run_via(via: &str) -> (CaptureFigures, Vec<Event>) {
    let dir = common::temp_folder("capture");
    let file = dir.join("run.ackscope");
    let file = file.to_str().unwrap();
    let output =
        ackscope_via(via, &["run", "rr", "--count", "10", "--capture", "--json", "-o", file]);
    assert!(output.status.success());
    let summary = common::report_of(&output);
    (capture_of(&summary).clone(), common::exported_events(file))
}

/// Both ways in stamp each segment between the start of the write that sent its bytes and the
/// return of the peer's read that took them, within the clock offset's uncertainty (the
/// packet socket's stamps are realtime, converted) plus 2 us.
#[test]
#[ignore = "needs root (packet capture): cargo xtask test runs it as root"]
fn packet_stamps_fall_between_the_write_and_the_peers_read() {
    common::require_root("packet capture");
    for (via, name) in [("hook", "ingress hook"), ("socket", "packet socket")] {
        let (report, events) = captured_run_via(via);
        assert_eq!(report.via.as_deref(), Some(name), "{report:?}");
        assert_eq!(report.dropped, 0, "{report:?}");
        let offset = report.offset_uncertainty_ns;
        let drift = report.drift_ns.unsigned_abs();
        if via == "hook" {
            assert_eq!((offset, drift), (0, 0), "the hook stamps on the run's clock: {report:?}");
        }
        stamps_fall_between_the_write_and_the_peers_read(&events, offset + drift + 2_000, via);
    }
}

/// Each captured data segment of `events` is stamped after the write that gave its first byte
/// started, and before the peer's read of its last byte returned, within `slack`: packet and
/// syscall stamps agree.
fn stamps_fall_between_the_write_and_the_peers_read(events: &[Event], slack: u64, via: &str) {
    // Each side's stream: (offset after the call, start of the write / end of the read).
    let mut writes: HashMap<(ConnId, Side), Vec<Write>> = HashMap::new();
    let mut reads: HashMap<(ConnId, Side), Vec<(u64, u64)>> = HashMap::new();
    let mut open: HashMap<(ConnId, Side), u64> = HashMap::new();
    for e in events {
        let key = (e.conn, e.side);
        match e.kind {
            EventKind::WriteStart { .. } | EventKind::ReadStart { .. } => {
                open.insert(key, e.at_ns);
            }
            EventKind::WriteDone { bytes } => {
                let list = writes.entry(key).or_default();
                let start = list.last().map_or(0, |w| w.1);
                list.push((start, start + u64::from(bytes), open[&key]));
            }
            EventKind::ReadDone { bytes } => {
                let list = reads.entry(key).or_default();
                let end = list.last().map_or(0, |r| r.0) + u64::from(bytes);
                list.push((end, e.at_ns));
            }
            _ => {}
        }
    }
    let segments = segments(events);
    let isn: HashMap<(ConnId, Side), u32> = segments
        .iter()
        .filter(|(_, s)| s.has(tcp_flags::SYN))
        .map(|(e, s)| ((e.conn, e.side), s.seq))
        .collect();
    let (mut checked, mut min_after_write, mut min_before_read) = (0, u64::MAX, u64::MAX);
    for (e, s) in segments.iter().filter(|(_, s)| s.len > 0) {
        let first = u64::from(s.seq.wrapping_sub(isn[&(e.conn, e.side)]).wrapping_sub(1));
        let last = first + u64::from(s.len);
        let write = writes[&(e.conn, e.side)].iter().find(|w| w.0 <= first && first < w.1);
        let read = reads[&(e.conn, e.side.peer())].iter().find(|r| r.0 >= last);
        let (Some(&(_, _, write_start)), Some(&(_, read_done))) = (write, read) else {
            panic!("segment {s:?} at {} has no write or read", e.at_ns);
        };
        assert!(
            e.at_ns + slack >= write_start && e.at_ns <= read_done + slack,
            "{} bytes stamped {} ns: the write started at {write_start}, the read returned at \
             {read_done} (slack {slack} ns)",
            s.len,
            e.at_ns
        );
        min_after_write = min_after_write.min(e.at_ns.saturating_sub(write_start));
        min_before_read = min_before_read.min(read_done.saturating_sub(e.at_ns));
        checked += 1;
    }
    assert!(checked >= 30, "{checked} data segments checked");
    eprintln!(
        "{via}: {checked} data segments; closest to their write's start: {min_after_write} ns \
         after; closest to the peer's read: {min_before_read} ns before"
    );
}

#[test]
#[ignore = "needs root (packet capture): cargo xtask test runs it as root"]
fn without_cap_net_raw_capture_fails_before_starting_and_plain_runs_work() {
    common::require_root("packet capture");
    let drop_to_nobody: Vec<&str> = if Path::new("/usr/bin/setpriv").exists()
        || Command::new("setpriv").arg("--version").output().is_ok()
    {
        vec!["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    } else {
        vec!["runuser", "-u", "nobody", "--"]
    };
    // A copy the unprivileged user can reach and run.
    let dir = common::temp_folder("capture");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = dir.join("ackscope");
    std::fs::copy(env!("CARGO_BIN_EXE_ackscope"), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = drop_to_nobody[1..].to_vec();
        args.push(binary.to_str().unwrap());
        args.extend(["run", "story1-nodelay", "--count", "3"]);
        args.extend(extra);
        let output =
            Command::new(drop_to_nobody[0]).args(&args).current_dir(&dir).output().unwrap();
        eprintln!(
            "$ {} {}\n{}{}",
            drop_to_nobody[0],
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    };
    let refused = run(&["--capture"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("CAP_NET_RAW") && stderr.contains("setcap cap_net_raw+ep"), "{stderr}");
    assert!(stderr.lines().count() == 1, "one message: {stderr}");
    assert!(refused.stdout.is_empty(), "nothing ran");
    let plain = run(&[]);
    assert!(plain.status.success());
}

/// One rule for Nagle x delayed ACK on packets: a live capture's attribution (syscalls and
/// segments) and the import of the same packets (segments alone, through pcapng) reach the same
/// verdict on each stall: the same class in the same direction, the import's held segment inside
/// the live stall's blocked read, one for one.
#[test]
#[ignore = "needs root (packet capture): cargo xtask test runs it as root"]
fn a_live_capture_and_its_import_agree_on_every_nagle_stall() {
    common::require_root("packet capture");
    let dir = common::temp_folder("capture");
    let (file, pcapng, imported) =
        (dir.join("live.ackscope"), dir.join("live.pcapng"), dir.join("imported.ackscope"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let run = ackscope(&["run", "story1", "--count", "8", "--capture", "--json", "-o", &s(&file)]);
    assert!(run.status.success());
    let summary = common::report_of(&run);
    assert!(ackscope(&["export", &s(&file), "--pcapng", &s(&pcapng)]).status.success());
    let import = ackscope(&["import", &s(&pcapng), "-o", &s(&imported)]);
    assert!(import.status.success());
    let out = String::from_utf8_lossy(&import.stdout).to_string();

    // The live verdicts: the recorded events through the attribution the run itself used.
    let live_events = common::exported_events(&s(&file));
    let mut analysis = RunAnalysis::new();
    analysis.push_all(&live_events);
    // story1 is the default knobs (Nagle on both sides, length and body written apart).
    let spec = RrSpec::default();
    let live = attribution::attribute(&analysis, Some(&spec));
    // The import's: the packets alone, as `show` and `import` find them.
    let imported_events = common::exported_events(&s(&imported));
    let from_packets: Vec<Stall> =
        packet_stalls::find(&imported_events).into_iter().map(|p| p.stall).collect();
    // The two files' clocks differ by a constant: the first captured segment is the same
    // packet in both.
    let first = |events: &[Event]| segments(events).first().map(|(e, _)| e.at_ns).unwrap();
    let shift = |at_ns: u64| at_ns + first(&live_events) - first(&imported_events);

    for (from, to) in [(Side::Client, Side::Server), (Side::Server, Side::Client)] {
        let direction = format!("{}->{}", from.name(), to.name());
        let nagle = |stalls: &[Stall]| -> Vec<Stall> {
            let mut these: Vec<Stall> = stalls
                .iter()
                .filter(|x| x.class == StallClass::NagleDelayedAck && (x.from, x.to) == (from, to))
                .cloned()
                .collect();
            these.sort_by_key(|x| x.end_ns);
            these
        };
        let (live, imported) = (nagle(&live), nagle(&from_packets));
        // Every request after the first stalls each way (the first is in quick-ACK mode).
        assert_eq!(live.len(), 7, "live {direction}: {live:#?}");
        assert_eq!(imported.len(), live.len(), "{direction}: {imported:#?}\n{out}");
        for (live, imported) in live.iter().zip(&imported) {
            // The held segment arrived while the reader was blocked on it (1 ms of slack for
            // the pcapng timestamps' microseconds and the read's return).
            let held_at = shift(imported.end_ns);
            assert!(
                live.start_ns <= held_at + 1_000_000 && held_at <= live.end_ns + 1_000_000,
                "{direction}: the import's held segment at {held_at} ns is outside the live \
                 stall {}..{} ns\nlive: {live:#?}\nimported: {imported:#?}",
                live.start_ns,
                live.end_ns
            );
        }
        // And the summary the run printed counts the same stalls.
        let counted: u64 = summary
            .stalls
            .as_deref()
            .unwrap_or_else(|| panic!("no stalls in {summary:?}"))
            .iter()
            .filter(|x| x.class == StallClass::NagleDelayedAck && x.direction == direction)
            .map(|x| u64::from(x.count))
            .sum();
        assert_eq!(counted, live.len() as u64, "{direction}: {summary:?}");
    }
}

/// The kernel keeps the host's other loopback traffic out of the capture, by either way in (the
/// hook's program, the packet socket's filter): what it passes to the capture is the run's own
/// segments, however busy loopback is.
#[test]
#[ignore = "needs root (packet capture): cargo xtask test runs it as root"]
fn other_loopback_traffic_is_not_copied_to_the_capture() {
    common::require_root("packet capture");
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    // Someone else's ping-pong on loopback, for as long as the run lasts.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    client.set_nodelay(true).unwrap();
    server.set_nodelay(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let exchanged = Arc::new(AtomicU64::new(0));
    let noise = {
        let (stop, exchanged) = (Arc::clone(&stop), Arc::clone(&exchanged));
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                client.write_all(&buf).unwrap();
                server.read_exact(&mut buf).unwrap();
                server.write_all(&buf).unwrap();
                client.read_exact(&mut buf).unwrap();
                exchanged.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Both ways in, one after the other, while the other pair goes on.
    let mut runs = Vec::new();
    for via in ["hook", "socket"] {
        let before = exchanged.load(Ordering::Relaxed);
        let output = captured_ping_pong_via(via, &["--count", "3000"]);
        runs.push((via, output, exchanged.load(Ordering::Relaxed) - before));
    }
    stop.store(true, Ordering::Relaxed);
    noise.join().unwrap();
    for (via, output, exchanges) in runs {
        assert!(output.status.success());
        let v = common::report_of(&output);
        let segments = capture_of(&v).segments;
        let passed = capture_of(&v).kernel_packets;
        eprintln!(
            "{via}: {segments} segments recorded, {passed} packets kept by the kernel, \
             {exchanges} other exchanges"
        );
        assert!(exchanges >= 1000, "{via}: the other traffic ran alongside: {exchanges} exchanges");
        assert!(segments >= 6000, "{via}: every request and answer was captured: {segments}");
        // The run's own packets; none of the other ping-pong's (at least 2 packets per
        // exchange).
        assert!(
            passed <= segments + segments / 100 + 100,
            "{via}: {passed} packets passed for {segments}"
        );
    }
}

/// Several connections' segments interleave on the wire. Each connection's request lookup goes
/// on from its own place; it used to restart from the connection's first request whenever
/// another connection's segment came between, a walk through its whole history for each
/// segment, and the capture thread fell so far behind that the kernel dropped most packets for
/// a full ring (60-80% of them in this run).
#[test]
#[ignore = "needs root (packet capture): cargo xtask test runs it as root"]
fn a_capture_of_several_connections_keeps_every_segment() {
    common::require_root("packet capture");
    let requests = 200_000u64;
    let output = captured_ping_pong(&["--count", &requests.to_string(), "--connections", "4"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let v = common::report_of(&output);
    let capture = capture_of(&v);
    let (segments, passed, dropped) = (capture.segments, capture.kernel_packets, capture.dropped);
    eprintln!("{segments} segments recorded, {passed} passed by the filter, {dropped} dropped");
    assert_eq!(dropped, 0, "the capture kept up: no packet dropped for a full ring");
    assert_eq!(segments, passed, "every packet the filter passed was recorded");
    assert!(segments >= 2 * requests, "a request and an answer each: {segments}");
}

/// The printed summary says how the segments were captured and whether any were dropped.
#[test]
#[ignore = "needs root (packet capture): cargo xtask test runs it as root"]
fn the_summary_names_the_way_in_and_what_was_dropped() {
    common::require_root("packet capture");
    for (via, way) in [("hook", "through lo's ingress hook"), ("socket", "through a packet socket")]
    {
        let output = ackscope_via(via, &["run", "rr", "--count", "20", "--capture"]);
        assert!(output.status.success());
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout
            .lines()
            .find(|line| line.trim_start().starts_with("capture "))
            .unwrap_or_else(|| panic!("{via}: no capture line in\n{stdout}"));
        let segments: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(segments >= 40, "{via}: 20 requests and their answers: {line}");
        assert!(line.ends_with(&format!("segments {way}, none dropped")), "{via}: {line}");
    }
}
