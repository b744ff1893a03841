//! Stall attribution: why a read stayed blocked or a write was held, with the evidence, and what
//! fixes it. Pure: the CLI and the browser call the same functions on the same events.
//!
//! A class is given only when the evidence for it is there; otherwise the stall is
//! `Unexplained`. Never guess: an unexplained stall tells the user to look closer, a wrong
//! class sends them to the wrong fix.

use crate::analysis::{
    RequestView, RunAnalysis, SegmentSample, Span, SpanKind, STALL_THRESHOLD_NS,
};
use crate::event::{ConnId, ReqId, Side};
use crate::packet_stalls::{self, seq_ge, DELAYED_ACK_NS};
use crate::spec::RrSpec;
pub use crate::stall::{Stall, StallClass};

mod incremental;
mod summary;

pub use incremental::{Incremental, SETTLE_AFTER};
#[cfg(test)]
use summary::group_key;
pub use summary::{summarize, ClassSummary, StallTally};

/// The smallest MSS any TCP path uses (RFC 9293, 3.7.1): a write this small is sub-MSS on any
/// path, so Nagle holds what follows it until it is acknowledged.
const MIN_MSS: u32 = 536;

/// Classifies every wait longer than [`STALL_THRESHOLD_NS`] in the run. `spec`, when known,
/// rules classes out (no Nagle stall from a writer with TCP_NODELAY).
pub fn attribute(analysis: &RunAnalysis, spec: Option<&RrSpec>) -> Vec<Stall> {
    let first = analysis.first_request();
    let requests = analysis.requests().iter().enumerate();
    requests
        .flat_map(|(index, view)| {
            attribute_request(analysis, ReqId(first + index as u32), view, spec)
        })
        .collect()
}

/// The stalls of one request (for requests being retired from a long run's analysis).
pub fn attribute_request(
    analysis: &RunAnalysis,
    req: ReqId,
    view: &RequestView,
    spec: Option<&RrSpec>,
) -> Vec<Stall> {
    let Some(conn) = view.conn else { return Vec::new() };
    // A handshake takes one round trip of the path.
    let handshake_ns = 2 * analysis.path_delay_ns();
    let classify = |span: &Span| match span.kind {
        SpanKind::Connect
            if span.duration_ns().saturating_sub(handshake_ns) > STALL_THRESHOLD_NS =>
        {
            Some(Stall {
                req,
                conn,
                side: span.side,
                from: Side::Client,
                to: Side::Server,
                start_ns: span.start_ns,
                end_ns: span.end_ns,
                wait_ns: span.duration_ns(),
                class: StallClass::ConnectionSetup,
                evidence: format!("connect() took {:.1} ms", ms(span.duration_ns())),
            })
        }
        SpanKind::Read => read_stall(analysis, view, conn, req, span, spec),
        SpanKind::Write if span.duration_ns() > STALL_THRESHOLD_NS => {
            Some(write_stall(view, conn, req, span, spec))
        }
        _ => None,
    };
    view.spans().filter_map(|span| classify(&span)).map(|stall| not_running(view, stall)).collect()
}

/// A stall whose wait was mostly a thread waiting for a CPU becomes [`StallClass::NotRunning`],
/// with the run-queue delay as evidence: the waiting side's thread, or its peer's (whose data
/// or answer it waited for). Nagle's classes keep theirs: their evidence is the segments and
/// the timer, which a busy CPU does not produce.
fn not_running(view: &RequestView, stall: Stall) -> Stall {
    if matches!(stall.class, StallClass::NagleDelayedAck | StallClass::NagleRoundTrip) {
        return stall;
    }
    let delayed = |side: Side| -> u64 {
        let samples = view.run_delays().iter().filter(|d| d.side == side);
        samples.map(|d| d.at_least_within(stall.start_ns, stall.end_ns)).sum()
    };
    let (side, waited) = [stall.side, stall.side.peer()]
        .into_iter()
        .map(|side| (side, delayed(side)))
        .max_by_key(|&(_, waited)| waited)
        .expect("two sides");
    if waited * 2 < stall.wait_ns {
        return stall;
    }
    let evidence = format!(
        "the {} thread was runnable but not running for at least {:.1} ms of this {:.1} ms wait \
         (the kernel's run-queue delay); without it: {}",
        side.name(),
        ms(waited),
        ms(stall.wait_ns),
        stall.evidence
    );
    Stall { class: StallClass::NotRunning, evidence, ..stall }
}

fn read_stall(
    analysis: &RunAnalysis,
    view: &RequestView,
    conn: ConnId,
    req: ReqId,
    read: &Span,
    spec: Option<&RrSpec>,
) -> Option<Stall> {
    let writer = read.side.peer();
    let stall = |wait_ns, class, evidence| Stall {
        req,
        conn,
        side: read.side,
        from: writer,
        to: read.side,
        start_ns: read.start_ns,
        end_ns: read.end_ns,
        wait_ns,
        class,
        evidence,
    };
    if let Some(held) = analysis.stall_ns(conn, read) {
        let (class, evidence) = held_read(analysis, view, conn, read, held, spec);
        return Some(stall(held, class, evidence));
    }
    if read.side == Side::Server && !view.spans().any(|s| s.side == Side::Client) {
        let (wait_ns, class, evidence) = server_only_read(analysis, view, read)?;
        return Some(stall(wait_ns, class, evidence));
    }
    // Waiting for the server to answer: think time, if the server was busy and not blocked.
    let blocked = read.duration_ns();
    if read.side != Side::Client || blocked <= STALL_THRESHOLD_NS {
        return None;
    }
    let server = |kind| view.spans().filter(move |s| s.side == Side::Server && s.kind == kind);
    let last_read =
        server(SpanKind::Read).filter(|s| s.end_ns <= read.end_ns).map(|s| s.end_ns).max()?;
    let first_write = server(SpanKind::Write).map(|s| s.start_ns).min()?;
    let gap = first_write.saturating_sub(last_read);
    if first_write > read.start_ns && gap > STALL_THRESHOLD_NS {
        let evidence = format!(
            "the server read the whole request, then spent {:.1} ms before writing the answer",
            ms(gap)
        );
        return Some(stall(gap, StallClass::ServerThinkTime, evidence));
    }
    // Otherwise the server was itself waiting (its own stall is counted where it happened).
    None
}

/// A read of a session where only the server was recorded (`ackscope server` and an outside
/// client): the client's writes are not seen, so the read is judged from what the server saw.
/// The server reads a message as its bytes come. When the first part of a message came alone
/// and small, and the read for the rest waited over 10 ms, the client sent the message in
/// pieces that far apart; a wait in the delayed-ACK timer's range (or of one RTT) is what
/// Nagle's algorithm on the client does to a message written in two parts. The first read of a
/// message is the client's own time between requests, never a stall.
fn server_only_read(
    analysis: &RunAnalysis,
    view: &RequestView,
    read: &Span,
) -> Option<(u64, StallClass, String)> {
    let waited = read.duration_ns();
    if waited <= STALL_THRESHOLD_NS {
        return None;
    }
    let earlier: u64 = view
        .spans()
        .filter(|s| s.side == Side::Server && s.kind == SpanKind::Read && s.end_ns <= read.start_ns)
        .map(|s| u64::from(s.bytes))
        .sum();
    if earlier == 0 {
        return None;
    }
    let parts = format!(
        "the client's message reached the server in parts: {earlier} bytes, then {} bytes {:.1} ms \
         later (seen from the server alone: the client is not recorded)",
        read.bytes,
        ms(waited)
    );
    let unexplained = |why: &str| (waited, StallClass::Unexplained, format!("{parts}; {why}"));
    if earlier >= u64::from(MIN_MSS) {
        return Some(unexplained("the first part was not a small segment"));
    }
    let timer = view
        .kernel()
        .iter()
        .filter(|k| k.side == Side::Server && k.at_ns >= read.start_ns && k.at_ns <= read.end_ns)
        .map(|k| k.ato_us)
        .max()
        .filter(|&ato| ato > 0)
        .map(|ato| {
            format!(
                "; TCP_INFO on the server during the wait: delayed-ACK timeout {} ms",
                ato / 1000
            )
        })
        .unwrap_or_default();
    let facts = WriterFacts::of(analysis, view.conn?, Side::Server);
    if let Some(rtt) = facts.rtt_ns {
        let apart = waited + analysis.path_delay_ns();
        if apart * 4 >= rtt * 3 && apart * 4 <= rtt * 5 {
            let evidence = format!(
                "{parts}, one round trip ({:.1} ms): the client wrote it in two parts, and \
                 Nagle held the later one until the ACK of the first came back{timer}",
                ms(rtt)
            );
            return Some((waited, StallClass::NagleRoundTrip, evidence));
        }
    }
    if !DELAYED_ACK_NS.contains(&waited) {
        return Some(unexplained("the wait is outside the delayed-ACK timer's range"));
    }
    let evidence = format!(
        "{parts}, within the delayed-ACK timer's range: the client wrote it in two parts, and \
         Nagle held the later one until the server's delayed ACK of the first{timer}"
    );
    Some((waited, StallClass::NagleDelayedAck, evidence))
}

/// A read held after the peer wrote: Nagle x delayed ACK if the evidence says so.
fn held_read(
    analysis: &RunAnalysis,
    view: &RequestView,
    conn: ConnId,
    read: &Span,
    held: u64,
    spec: Option<&RrSpec>,
) -> (StallClass, String) {
    let writer = read.side.peer();
    let (w, r) = (writer.name(), read.side.name());
    let unexplained = |why: String| {
        (
            StallClass::Unexplained,
            format!("the {r} waited {:.1} ms for data the {w} had written; {why}", ms(held)),
        )
    };
    if let Some(spec) = spec {
        if *spec.nodelay.get(writer) {
            return unexplained(format!("the {w} had TCP_NODELAY on, so Nagle did not hold it"));
        }
        if *spec.cork.get(writer) {
            return unexplained(format!("the {w} corks its messages"));
        }
    }
    let facts = WriterFacts::of(analysis, conn, writer);
    let writes: Vec<Span> =
        view.spans().filter(|s| s.side == writer && s.kind == SpanKind::Write).collect();
    // The write that carried the read's last byte, and the write just before it.
    let Some(carrier) = writes.iter().position(|s| s.stream_end >= read.stream_end) else {
        return unexplained("the write that carried the data is not in this request".into());
    };
    let Some(small) = carrier.checked_sub(1).map(|i| writes[i]) else {
        return unexplained("no smaller write came before it in this request".into());
    };
    let body = writes[carrier];
    let mss = facts.mss;
    // The small write's bytes reached the reader before the body's did.
    let small_arrived = view.spans().any(|s| {
        s.side == read.side
            && s.kind == SpanKind::Read
            && s.stream_end >= small.stream_end
            && s.stream_end < read.stream_end
            && s.end_ns < read.end_ns
    });
    if small.bytes >= mss || !small_arrived {
        return unexplained(format!(
            "the write before it ({} bytes) was not a small segment that arrived first",
            small.bytes
        ));
    }
    // On a path with a real RTT, Nagle may wait for an ACK that was not delayed at all: the
    // earlier small segment's, one round trip after it left. From the reader's side the tail
    // arrives one RTT after the head did, and `held` counts from the head's arrival (the tail
    // could have come with it).
    if let Some(rtt) = facts.rtt_ns {
        let waited = held;
        if waited * 4 >= rtt * 3 && waited * 4 <= rtt * 5 {
            let mut evidence = format!(
                "the {w} wrote {} bytes, then {} bytes; Nagle held the tail of the {} bytes until the ACK \
                 of the earlier small segment came back, {:.1} ms later (the RTT is {:.1} ms)",
                small.bytes,
                body.bytes,
                body.bytes,
                ms(waited),
                ms(rtt)
            );
            if let Some(packets) = round_trip_on_the_wire(view, read, small.bytes, writer) {
                evidence.push_str(&format!("; on the wire: {packets}"));
            }
            return (StallClass::NagleRoundTrip, evidence);
        }
    }
    if !DELAYED_ACK_NS.contains(&held) {
        return unexplained(format!(
            "the wait is outside the delayed-ACK timer's range ({:.0}-{:.0} ms)",
            ms(*DELAYED_ACK_NS.start()),
            ms(*DELAYED_ACK_NS.end())
        ));
    }
    let mut evidence = format!(
        "the {w} wrote {} bytes, then {} bytes; the {} bytes arrived at once, the {} bytes {:.1} ms \
         later: Nagle held them until the {r}'s delayed ACK of the first segment",
        small.bytes,
        body.bytes,
        small.bytes,
        body.bytes,
        ms(held)
    );
    if view.segments().iter().any(|s| s.side == writer) {
        match on_the_wire(view, read, small.bytes, writer, analysis.path_delay_ns()) {
            Ok(packets) => evidence.push_str(&format!("; on the wire: {packets}")),
            Err(why) => return unexplained(format!("the packets contradict Nagle: {why}")),
        }
    }
    let during = view
        .kernel()
        .iter()
        .filter(|k| k.side == writer && k.at_ns >= read.start_ns && k.at_ns <= read.end_ns);
    if let Some(sample) = during.max_by_key(|k| k.notsent_bytes) {
        if let Some(notsent) = sample.notsent_bytes {
            if notsent == 0 {
                return unexplained(format!("TCP_INFO on the {w} showed nothing held back"));
            }
            evidence.push_str(&format!(
                "; TCP_INFO on the {w} during the wait: {notsent} bytes not sent, {} segment(s) unacknowledged",
                sample.unacked
            ));
        }
    }
    (StallClass::NagleDelayedAck, evidence)
}

/// The earlier of two requests, either of which may be absent.
fn earliest(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the attribution of a held read takes from its connection rather than from its own
/// request's events: the writer's MSS as TCP_INFO reported it last, and its smallest RTT when it
/// is long enough to explain a stall. [`Incremental`] compares them to know when a settled
/// request's attribution changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WriterFacts {
    mss: u32,
    rtt_ns: Option<u64>,
}

impl WriterFacts {
    fn of(analysis: &RunAnalysis, conn: ConnId, writer: Side) -> WriterFacts {
        WriterFacts {
            mss: analysis.snd_mss(conn, writer).unwrap_or(MIN_MSS).max(MIN_MSS),
            rtt_ns: analysis.min_rtt_ns(conn, writer).filter(|&rtt| rtt >= STALL_THRESHOLD_NS),
        }
    }
}

/// The captured segments of a Nagle x delayed ACK hold: the small segment, the reader's pure
/// ACK of it, then the held data right after that ACK, by the one packet rule
/// ([`packet_stalls::nagle_hold`], which imported captures use too). `Err` says what the packets
/// show instead.
fn on_the_wire(
    view: &RequestView,
    read: &Span,
    small_bytes: u32,
    writer: Side,
    path_delay_ns: u64,
) -> Result<String, String> {
    let (w, r) = (writer.name(), writer.peer().name());
    let mut segments = view.segments().to_vec();
    segments.sort_by_key(|s| s.at_ns);
    let small = segments
        .iter()
        .position(|s| s.side == writer && s.len == small_bytes && s.at_ns <= read.end_ns)
        .ok_or_else(|| format!("no {small_bytes}-byte segment from the {w} went out on its own"))?;
    let hold = packet_stalls::nagle_hold(&segments, small, path_delay_ns)?;
    let (small, ack, held) = (segments[hold.small], segments[hold.ack], segments[hold.held]);
    let release = (held.at_ns - ack.at_ns).saturating_sub(path_delay_ns);
    Ok(format!(
        "the {small_bytes}-byte segment at {:.3} ms, the {r}'s pure ACK {:.1} ms later, the {} \
         bytes {} us after that ACK",
        ms(small.at_ns),
        ms(ack.at_ns - small.at_ns),
        held.len,
        release / 1_000
    ))
}

/// The captured segments of a round-trip Nagle hold, if they were captured: the small segment,
/// the reader's ACK of it, and the writer's last data before the read ended (the held tail).
fn round_trip_on_the_wire(
    view: &RequestView,
    read: &Span,
    small_bytes: u32,
    writer: Side,
) -> Option<String> {
    let from_writer = |s: &&SegmentSample| s.side == writer && s.len > 0 && s.at_ns <= read.end_ns;
    let small = view.segments().iter().filter(from_writer).find(|s| s.len == small_bytes)?;
    let tail = view.segments().iter().filter(from_writer).max_by_key(|s| s.at_ns)?;
    let ack = view
        .segments()
        .iter()
        .filter(|s| s.side == writer.peer() && s.at_ns >= small.at_ns && s.at_ns <= tail.at_ns)
        .find(|s| seq_ge(s.ack, small.seq_end()))?;
    Some(format!(
        "the {small_bytes}-byte segment at {:.3} ms, the {}'s ACK of it {:.1} ms later, the last {} \
         bytes {:.1} ms after the small segment",
        ms(small.at_ns),
        writer.peer().name(),
        ms(ack.at_ns - small.at_ns),
        tail.len,
        ms(tail.at_ns - small.at_ns)
    ))
}

/// A write that blocked. Two causes leave evidence in TCP_INFO taken during the wait: a peer
/// window under two segments (receive-window limited), or a send queue (bytes not sent, plus
/// bytes sent and not acknowledged) as large as a send buffer holds (send-buffer limited: the
/// write waits for the queue to drain). A full queue that could not drain because the
/// congestion window was full (as many segments in flight as it allows, bytes waiting unsent)
/// is the congestion window's (slow start, or a window cut after a loss): the buffer only held
/// what the window would not send. A write that blocked with less queued, or with no TCP_INFO
/// during the wait, was held by something else (the scheduler, see [`not_running`]):
/// unexplained, never guessed by elimination.
fn write_stall(
    view: &RequestView,
    conn: ConnId,
    req: ReqId,
    write: &Span,
    spec: Option<&RrSpec>,
) -> Stall {
    let (writer, reader) = (write.side, write.side.peer());
    let (w, r) = (writer.name(), reader.name());
    let blocked = ms(write.duration_ns());
    let during: Vec<_> = view
        .kernel()
        .iter()
        .filter(|k| k.side == writer && k.at_ns >= write.start_ns && k.at_ns <= write.end_ns)
        .collect();
    let small_window = during
        .iter()
        .filter_map(|k| k.snd_wnd.map(|wnd| (wnd, k.snd_mss)))
        .any(|(wnd, mss)| wnd < 2 * mss.max(MIN_MSS));
    let full = full_queue_bytes(spec.and_then(|spec| *spec.sndbuf.get(writer)));
    let queued = during.iter().filter_map(|k| Some((k.queued_bytes()?, *k))).max_by_key(|q| q.0);
    // A sample with the congestion window full (segments in flight at the window, which is
    // known) and bytes waiting unsent: the window, not the buffer, held them.
    let cwnd_full = during
        .iter()
        .find(|k| k.snd_cwnd > 0 && k.unacked >= k.snd_cwnd && k.notsent_bytes.unwrap_or(0) > 0)
        .copied();
    let (class, evidence) = match (queued, cwnd_full) {
        _ if small_window => (
            StallClass::ReceiveWindowLimited,
            format!("write() blocked {blocked:.1} ms while the {r} advertised a window under two segments"),
        ),
        (Some((bytes, _)), Some(k)) if bytes >= full => (
            StallClass::CongestionWindowLimited,
            format!(
                "write() blocked {blocked:.1} ms with the send buffer full ({bytes} bytes queued) \
                 and the congestion window full: TCP_INFO on the {w} during the wait showed {} \
                 segments in flight of a window of {}, and {} bytes not sent",
                k.unacked,
                k.snd_cwnd,
                k.notsent_bytes.unwrap_or(0)
            ),
        ),
        (Some((bytes, k)), _) if bytes >= full => (
            StallClass::SendBufferLimited,
            format!(
                "write() blocked {blocked:.1} ms with the send buffer full: TCP_INFO on the {w} \
                 during the wait showed {bytes} bytes queued ({} not sent, the rest waiting for \
                 the {r}'s ACK)",
                k.notsent_bytes.unwrap_or(0)
            ),
        ),
        (Some((bytes, _)), _) => (
            StallClass::Unexplained,
            format!(
                "write() blocked {blocked:.1} ms, but TCP_INFO on the {w} during the wait showed \
                 only {bytes} bytes queued, less than a send buffer holds ({full}): not a full \
                 send buffer"
            ),
        ),
        (None, _) => (
            StallClass::Unexplained,
            format!(
                "write() blocked {blocked:.1} ms with no TCP_INFO during the wait to say why (the \
                 sampler off, or no send queue in what the kernel reports)"
            ),
        ),
    };
    Stall {
        req,
        conn,
        side: writer,
        from: writer,
        to: reader,
        start_ns: write.start_ns,
        end_ns: write.end_ns,
        wait_ns: write.duration_ns(),
        class,
        evidence,
    }
}

/// The fewest bytes queued in a full send buffer. Linux doubles the SO_SNDBUF asked for, and
/// half the buffer's memory goes to bookkeeping, so a buffer set to `n` bytes is full at about
/// `n` bytes queued: a quarter of that leaves room for the overhead of small segments. Left to
/// auto-tuning, a buffer starts at `tcp_wmem`'s default (16 KiB of memory by default) and only
/// grows, so it holds at least 4 KiB.
fn full_queue_bytes(sndbuf: Option<u32>) -> u64 {
    const AUTO_TUNED_AT_LEAST: u64 = 4096;
    sndbuf.map_or(AUTO_TUNED_AT_LEAST, |asked| u64::from(asked) / 4)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, TcpInfoSample};
    use crate::spec::PerSide;
    use crate::synthetic::{
        nagle_run, nagle_run_with_packets, think_time_exchange, Script, MS, US,
    };

    fn analysed(events: &[crate::event::Event]) -> RunAnalysis {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(events);
        analysis
    }

    #[test]
    fn class_codes_are_the_json_names() {
        for class in StallClass::ALL {
            let json = serde_json::to_value(class).unwrap();
            assert_eq!(json, class.code(), "{class:?}");
        }
    }

    #[test]
    fn story_1_is_nagle_times_delayed_ack_in_both_directions() {
        let analysis = analysed(&nagle_run(20, 43_600 * US));
        let stalls = attribute(&analysis, Some(&RrSpec::default()));
        assert_eq!(stalls.len(), 38, "two per request after the first");
        assert!(stalls.iter().all(|s| s.class == StallClass::NagleDelayedAck), "{stalls:#?}");
        let summary = summarize(&stalls);
        assert_eq!(summary.len(), 2);
        let line = summary.iter().find(|s| s.direction == "client->server").unwrap().line();
        assert!(
            line.starts_with("19 stalls: Nagle x delayed ACK, client->server, median 43.6 ms"),
            "{line}"
        );
        assert!(
            line.contains("TCP_NODELAY on the client")
                && line.contains("TCP_QUICKACK on the server"),
            "{line}"
        );
        assert!(
            stalls[0].evidence.contains("wrote 4 bytes, then 2048 bytes"),
            "{}",
            stalls[0].evidence
        );
    }

    #[test]
    fn tcp_info_during_the_wait_is_cited_or_contradicts() {
        let mut events = nagle_run(3, 44 * MS);
        let during_wait = events_time(&events, 1) + 20 * MS;
        let holding = |notsent| crate::event::Event {
            at_ns: during_wait,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(1),
            kind: EventKind::TcpInfo(Box::new(TcpInfoSample {
                during_block: true,
                unacked: 1,
                notsent_bytes: Some(notsent),
                snd_mss: 65483,
                ..TcpInfoSample::default()
            })),
        };
        events.push(holding(2048));
        let stalls = attribute(&analysed(&events), None);
        let cited = stalls.iter().find(|s| s.req == ReqId(1) && s.to == Side::Server).unwrap();
        assert_eq!(cited.class, StallClass::NagleDelayedAck);
        assert!(
            cited.evidence.contains("2048 bytes not sent, 1 segment(s) unacknowledged"),
            "{}",
            cited.evidence
        );

        let mut events = nagle_run(3, 44 * MS);
        events.push(holding(0));
        let stalls = attribute(&analysed(&events), None);
        let contradicted =
            stalls.iter().find(|s| s.req == ReqId(1) && s.to == Side::Server).unwrap();
        assert_eq!(contradicted.class, StallClass::Unexplained, "{}", contradicted.evidence);
    }

    fn events_time(events: &[crate::event::Event], req: u32) -> u64 {
        events
            .iter()
            .find(|e| e.req == ReqId(req) && e.kind == EventKind::RequestStart)
            .unwrap()
            .at_ns
    }

    #[test]
    fn captured_segments_are_cited_as_evidence() {
        let analysis = analysed(&nagle_run_with_packets(4, 43_600 * US));
        let stalls = attribute(&analysis, None);
        assert_eq!(stalls.len(), 6);
        assert!(stalls.iter().all(|s| s.class == StallClass::NagleDelayedAck), "{stalls:#?}");
        let to_server = stalls.iter().find(|s| s.req == ReqId(1) && s.to == Side::Server).unwrap();
        let evidence = &to_server.evidence;
        assert!(
            evidence.contains("on the wire: the 4-byte segment at ")
                && evidence.contains("the server's pure ACK 43.6 ms later")
                && evidence.contains("the 2048 bytes 29 us after that ACK"),
            "{evidence}"
        );
        let to_client = stalls.iter().find(|s| s.req == ReqId(1) && s.to == Side::Client).unwrap();
        assert!(to_client.evidence.contains("the client's pure ACK"), "{}", to_client.evidence);
    }

    #[test]
    fn packets_without_a_pure_ack_before_the_held_data_contradict_nagle() {
        use crate::event::Event;
        let mut events = nagle_run_with_packets(3, 44 * MS);
        let is_servers_ack = |e: &Event| {
            e.side == Side::Server
                && e.req == ReqId(1)
                && matches!(&e.kind, EventKind::Segment(s) if s.is_pure_ack())
        };
        events.retain(|e| !is_servers_ack(e));
        let stalls = attribute(&analysed(&events), None);
        let to_server = stalls.iter().find(|s| s.req == ReqId(1) && s.to == Side::Server).unwrap();
        assert_eq!(to_server.class, StallClass::Unexplained, "{}", to_server.evidence);
        assert!(
            to_server.evidence.contains("sent more data before the server acknowledged"),
            "{}",
            to_server.evidence
        );
        // The other direction's packets still tell the Nagle story.
        let to_client = stalls.iter().find(|s| s.req == ReqId(1) && s.to == Side::Client).unwrap();
        assert_eq!(to_client.class, StallClass::NagleDelayedAck);

        // Length and body in one segment: Nagle held nothing.
        let mut events = nagle_run_with_packets(3, 44 * MS);
        for event in &mut events {
            if let EventKind::Segment(segment) = &mut event.kind {
                if event.side == Side::Client && segment.len == 4 && event.req == ReqId(2) {
                    segment.len = 2052;
                }
            }
        }
        let stalls = attribute(&analysed(&events), None);
        let merged = stalls.iter().find(|s| s.req == ReqId(2) && s.to == Side::Server).unwrap();
        assert_eq!(merged.class, StallClass::Unexplained, "{}", merged.evidence);
        assert!(merged.evidence.contains("no 4-byte segment"), "{}", merged.evidence);
    }

    #[test]
    fn a_writer_with_nodelay_is_not_blamed_on_nagle() {
        let analysis = analysed(&nagle_run(5, 44 * MS));
        let spec = RrSpec { nodelay: PerSide { client: true, server: false }, ..RrSpec::default() };
        let stalls = attribute(&analysis, Some(&spec));
        let from_client: Vec<_> = stalls.iter().filter(|s| s.from == Side::Client).collect();
        assert!(from_client.iter().all(|s| s.class == StallClass::Unexplained));
        assert!(from_client[0].evidence.contains("TCP_NODELAY on"), "{}", from_client[0].evidence);
        let from_server = stalls.iter().filter(|s| s.from == Side::Server);
        assert!(
            from_server.clone().count() == 4
                && from_server.clone().all(|s| s.class == StallClass::NagleDelayedAck)
        );
    }

    /// Story 3 on a 40 ms link: the client writes 4 bytes, then 2048; the 4 bytes and a full
    /// 1448-byte segment leave at once, Nagle holds the 600-byte tail until the ACK of the small
    /// segment returns one RTT later. The server reads the head after the path's 20 ms, the tail
    /// 40 ms after that.
    fn split_over_a_link() -> RunAnalysis {
        use Side::{Client, Server};
        let mut script = Script::default();
        script.event(0, Client, 0, EventKind::RequestStart);
        script.write(Client, 0, 0, 5 * US, 4);
        script.write(Client, 0, 6 * US, 10 * US, 2048);
        script.events.push(crate::event::Event {
            at_ns: 11 * US,
            side: Client,
            conn: ConnId(0),
            req: ReqId(0),
            kind: EventKind::TcpInfo(Box::new(TcpInfoSample {
                snd_mss: 1448,
                min_rtt_us: Some(40_000),
                ..TcpInfoSample::default()
            })),
        });
        script.read(Server, 0, 0, 20 * MS, 4);
        script.read(Server, 0, 20 * MS + 5 * US, 20 * MS + 10 * US, 1448);
        script.read(Server, 0, 20 * MS + 11 * US, 60 * MS, 600);
        let mut analysis = analysed(&script.events);
        analysis.set_path_delay_ns(20 * MS);
        analysis
    }

    #[test]
    fn on_a_link_nagle_may_wait_one_round_trip_and_the_path_delay_is_not_a_stall() {
        let analysis = split_over_a_link();
        let stalls = attribute(&analysis, Some(&RrSpec::default()));
        assert_eq!(stalls.len(), 1, "the 20 ms crossing of the head is not a stall: {stalls:#?}");
        let tail = &stalls[0];
        assert_eq!(tail.class, StallClass::NagleRoundTrip, "{}", tail.evidence);
        assert!(
            tail.evidence.contains("one round trip") || tail.evidence.contains("came back"),
            "{}",
            tail.evidence
        );
        assert!(tail.evidence.contains("the RTT is 40.0 ms"), "{}", tail.evidence);
        // Sent at once, the tail would have arrived with the head, 20 ms in: the whole round
        // trip it waited after that is Nagle's.
        assert!(
            (39 * MS..41 * MS).contains(&tail.wait_ns),
            "one round trip after it could have arrived: {}",
            tail.wait_ns
        );
        let fixes = tail.class.fixes(Side::Client, Side::Server).join("; ");
        assert!(!fixes.contains("QUICKACK"), "no delayed ACK to avoid: {fixes}");
        // Without the path delay, the head's crossing would count too.
        let mut loopback_view = split_over_a_link();
        loopback_view.set_path_delay_ns(0);
        assert_eq!(loopback_view.summary().stalled_reads, 2);
        assert_eq!(analysis.summary().stalled_reads, 1);
    }

    #[test]
    fn a_hold_far_beyond_the_delayed_ack_timer_is_unexplained() {
        let stalls = attribute(&analysed(&nagle_run(3, 900 * MS)), None);
        assert!(!stalls.is_empty());
        assert!(stalls.iter().all(|s| s.class == StallClass::Unexplained));
    }

    #[test]
    fn a_write_blocked_behind_a_closed_window_is_receive_window_limited() {
        use Side::{Client, Server};
        let mut script = Script::default();
        script.event(0, Client, 0, EventKind::RequestStart);
        // A 1 MB request whose write blocks 30 ms while the server advertises almost nothing.
        script.write(Client, 0, 0, 5 * US, 4);
        script.write(Client, 0, 6 * US, 30 * MS, 1_000_000);
        script.events.push(crate::event::Event {
            at_ns: 10 * MS,
            side: Client,
            conn: ConnId(0),
            req: ReqId(0),
            kind: EventKind::TcpInfo(Box::new(TcpInfoSample {
                during_block: true,
                snd_mss: 1448,
                snd_wnd: Some(0),
                notsent_bytes: Some(600_000),
                ..TcpInfoSample::default()
            })),
        });
        script.read(Server, 0, 0, 31 * MS, 4);
        script.event(32 * MS, Client, 0, EventKind::RequestDone);
        let stalls = attribute(&analysed(&script.events), None);
        let blocked = stalls.iter().find(|s| s.side == Client).expect("the blocked write");
        assert_eq!(blocked.class, StallClass::ReceiveWindowLimited, "{}", blocked.evidence);
        assert_eq!((blocked.from, blocked.to), (Client, Server));
        assert!(blocked.evidence.contains("window under two segments"), "{}", blocked.evidence);
        let fixes = blocked.class.fixes(Client, Server).join("; ");
        assert!(fixes.contains("SO_RCVBUF on the server"), "{fixes}");
    }

    #[test]
    fn a_wait_the_thread_spent_waiting_for_a_cpu_is_not_running() {
        use Side::{Client, Server};
        let mut script = Script::default();
        script.event(0, Client, 0, EventKind::RequestStart);
        // A 2 KB write on loopback that took 20 ms, of which the thread waited 18 ms for a CPU
        // (read 1 ms before the write began, and right after it). TCP_INFO during the write
        // shows one message in flight: nothing that fills a send buffer.
        script.write(Client, 0, MS, 21 * MS, 2048);
        let one_message = crate::event::TcpInfoSample {
            during_block: true,
            snd_mss: 65_483,
            snd_wnd: Some(4_000_000),
            notsent_bytes: Some(0),
            unacked: 1,
            bytes_sent: Some(2052),
            bytes_acked: Some(0),
            ..Default::default()
        };
        script.event(5 * MS, Client, 0, EventKind::TcpInfo(Box::new(one_message)));
        let delay = |at_ns, since_ns, waited_ns| crate::event::Event {
            at_ns,
            side: Client,
            conn: ConnId(0),
            req: ReqId(0),
            kind: EventKind::RunDelay { since_ns, waited_ns },
        };
        script.read(Server, 0, 0, 22 * MS, 2048);
        script.event(23 * MS, Client, 0, EventKind::RequestDone);
        let with_delay = |delay_event| {
            let mut events = script.events.clone();
            events.push(delay_event);
            let stalls = attribute(&analysed(&events), None);
            stalls.into_iter().find(|s| s.side == Client).expect("the slow write")
        };
        let write = with_delay(delay(21 * MS, 0, 18 * MS));
        assert_eq!(write.class, StallClass::NotRunning, "{}", write.evidence);
        // Of the 18 ms between readings 21 ms apart, at most 1 ms fell before the write.
        assert!(
            write
                .evidence
                .contains("client thread was runnable but not running for at least 17.0 ms"),
            "{}",
            write.evidence
        );
        assert!(
            write.evidence.contains("2052 bytes queued"),
            "keeps what it saw: {}",
            write.evidence
        );
        assert!(!write.is_held_read());

        // The same 18 ms read over a window of 61 ms may all have fallen outside the write's
        // 20 ms: not blamed on the scheduler.
        let write = with_delay(delay(61 * MS, 0, 18 * MS));
        assert_ne!(write.class, StallClass::NotRunning, "{}", write.evidence);
        // A delay too short for the wait leaves it unexplained: one message queued does not
        // fill a send buffer, and nothing is guessed.
        let write = with_delay(delay(21 * MS, 0, 5 * MS));
        assert_eq!(write.class, StallClass::Unexplained, "{}", write.evidence);
        assert!(write.evidence.contains("not a full send buffer"), "{}", write.evidence);
        assert!(!write.is_held_read(), "an unexplained write is not a stalled read");
    }

    #[test]
    fn think_time_slow_connects_and_blocked_writes() {
        let stalls = attribute(&analysed(&think_time_exchange()), None);
        let classes: Vec<StallClass> = stalls.iter().map(|s| s.class).collect();
        assert!(classes.contains(&StallClass::ConnectionSetup), "{classes:?}");
        assert!(classes.contains(&StallClass::ServerThinkTime), "{classes:?}");
        assert!(classes.contains(&StallClass::SendBufferLimited), "{classes:?}");
        let think = stalls.iter().find(|s| s.class == StallClass::ServerThinkTime).unwrap();
        assert!((29 * MS..31 * MS).contains(&think.wait_ns), "{}", think.wait_ns);
    }

    /// The blocked write of [`think_time_exchange`] with its TCP_INFO's congestion window set:
    /// full (as many segments in flight as the window, bytes unsent), the window held the send
    /// buffer full; with room in the window, the buffer was the limit.
    #[test]
    fn a_full_send_buffer_behind_a_full_congestion_window_is_the_windows() {
        let with_cwnd = |snd_cwnd: u32| {
            let mut events = think_time_exchange();
            for event in &mut events {
                if let EventKind::TcpInfo(info) = &mut event.kind {
                    info.snd_cwnd = snd_cwnd;
                }
            }
            let stalls = attribute(&analysed(&events), None);
            stalls.into_iter().find(|s| s.side == Side::Server && !s.is_held_read()).unwrap()
        };
        let slow_start = with_cwnd(10);
        assert_eq!(
            slow_start.class,
            StallClass::CongestionWindowLimited,
            "{}",
            slow_start.evidence
        );
        assert!(
            slow_start.evidence.contains("10 segments in flight of a window of 10"),
            "{}",
            slow_start.evidence
        );
        let roomy = with_cwnd(40);
        assert_eq!(roomy.class, StallClass::SendBufferLimited, "{}", roomy.evidence);
    }

    /// Feeds `batches` to an analysis and an [`Incremental`] and checks, after every batch, that
    /// the settled stalls and the tail are the whole run's attribution, its class lines and its
    /// stalled reads. Returns the analysis and the last request settled before the end.
    fn incremental_matches_at_every_step(
        batches: &[Vec<crate::event::Event>],
        spec: Option<&RrSpec>,
        path_delay_ns: u64,
    ) -> (RunAnalysis, u32) {
        let mut analysis = RunAnalysis::new();
        analysis.set_path_delay_ns(path_delay_ns);
        let mut incremental = Incremental::new();
        let mut stalls = Vec::new();
        // The same batches into an analysis that packs what settles, as the browser's does:
        // it must answer every question the same.
        let mut packed = RunAnalysis::new();
        packed.set_path_delay_ns(path_delay_ns);
        for (step, batch) in batches.iter().enumerate() {
            analysis.push_all(batch);
            incremental.push(&analysis, spec, batch, &mut stalls);
            packed.push_all(batch);
            packed.pack_settled(incremental.next());
            assert_eq!(stalls.len(), incremental.settled_stalls());
            let tail = incremental.tail(&analysis, spec);
            let whole = attribute(&analysis, spec);
            assert_eq!(attribute(&packed, spec), whole, "packed, step {step}");
            assert_eq!(packed.requests(), analysis.requests(), "packed, step {step}");
            assert_eq!(packed.summary(), analysis.summary(), "packed, step {step}");
            assert_eq!([stalls.as_slice(), tail.as_slice()].concat(), whole, "step {step}");
            assert_eq!(incremental.classes_with(&tail), summarize(&whole), "step {step}");
            let held = incremental.held_reads() + incremental.tail_held_reads(&analysis);
            assert_eq!(held, analysis.summary().stalled_reads, "step {step}");
            // A caller's tail left in the list is dropped by the next push.
            stalls.extend(tail);
        }
        let settled = (incremental.next() - packed.first_request()) as usize;
        let with_spans =
            |views: &[RequestView]| views.iter().filter(|v| v.span_count() > 0).count();
        let packed_views = packed.requests().iter().filter(|view| view.spans_packed()).count();
        assert_eq!(packed_views, with_spans(&packed.requests()[..settled]), "every settled one");
        (analysis, incremental.next())
    }

    #[test]
    fn incremental_attribution_equals_the_whole_runs_at_every_step() {
        use crate::analysis::batches::random_batches;
        let nodelay =
            RrSpec { nodelay: PerSide { client: true, server: false }, ..RrSpec::default() };
        let runs: [(&str, Vec<crate::event::Event>, Option<&RrSpec>); 4] = [
            ("nagle", nagle_run(40, 44 * MS), Some(&RrSpec::default())),
            ("packets", nagle_run_with_packets(40, 43_600 * US), None),
            ("nodelay", nagle_run(40, 44 * MS), Some(&nodelay)),
            ("think time", think_time_exchange(), None),
        ];
        for (name, events, spec) in &runs {
            for seed in 0..8 {
                for chunk in [3, 25] {
                    let batches = random_batches(events, seed, chunk);
                    let (analysis, settled) = incremental_matches_at_every_step(&batches, *spec, 0);
                    if analysis.requests().len() > 10 {
                        assert!(settled > 30, "{name}: only {settled} settled, seed {seed}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_late_event_or_a_new_rtt_unsettles_what_it_changes() {
        use crate::event::Event;
        let sample = |at_ns, req, during_block, min_rtt_us, notsent| Event {
            at_ns,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(req),
            kind: EventKind::TcpInfo(Box::new(TcpInfoSample {
                during_block,
                unacked: 1,
                notsent_bytes: notsent,
                snd_mss: 65483,
                min_rtt_us,
                ..TcpInfoSample::default()
            })),
        };
        let events = nagle_run(30, 44 * MS);
        let chunks = || events.chunks(16).map(<[Event]>::to_vec).collect::<Vec<_>>();
        // The sampler's sample of request 3's wait arrives when request 25 is going, long after
        // request 3 settled: it contradicts Nagle (nothing held back).
        let mut batches = chunks();
        let late_at = batches.len() - 8;
        let during_wait = events_time(&events, 3) + 20 * MS;
        batches.insert(late_at, vec![sample(during_wait, 3, true, None, Some(0))]);
        let (before, settled) = incremental_matches_at_every_step(&batches[..late_at], None, 0);
        assert!(settled > 3 && before.requests().len() < 30, "{settled} settled");
        let (analysis, _) = incremental_matches_at_every_step(&batches, None, 0);
        let stalls = attribute(&analysis, None);
        let late = stalls.iter().find(|s| s.req == ReqId(3) && s.to == Side::Server).unwrap();
        assert_eq!(late.class, StallClass::Unexplained, "{}", late.evidence);

        // A 44 ms RTT turns every settled Nagle x delayed ACK into one round trip, and a
        // slightly shorter one changes every such stall's evidence.
        let mut batches = chunks();
        let rtt = |req, us| vec![sample(events_time(&events, req), req, false, Some(us), None)];
        batches.insert(batches.len() - 4, rtt(27, 44_000));
        batches.insert(batches.len() - 2, rtt(28, 43_900));
        let (analysis, _) = incremental_matches_at_every_step(&batches, None, 0);
        let stalls = attribute(&analysis, None);
        let round_trip =
            stalls.iter().find(|s| s.req == ReqId(10) && s.to == Side::Server).unwrap();
        assert_eq!(round_trip.class, StallClass::NagleRoundTrip, "{}", round_trip.evidence);
        assert!(round_trip.evidence.contains("the RTT is 43.9 ms"), "{}", round_trip.evidence);

        // The path delay is read at every push: a different one starts over.
        let mut analysis = RunAnalysis::new();
        let mut incremental = Incremental::new();
        let mut stalls = Vec::new();
        analysis.push_all(&events);
        incremental.push(&analysis, None, &events, &mut stalls);
        assert!(incremental.next() > 20);
        analysis.set_path_delay_ns(40 * MS);
        incremental.push(&analysis, None, &[], &mut stalls);
        let tail = incremental.tail(&analysis, None);
        assert_eq!([stalls, tail].concat(), attribute(&analysis, None));
    }

    #[test]
    fn a_tally_takes_stalls_back_and_keeps_summarizes_order() {
        let analysis = analysed(&think_time_exchange());
        let mut stalls = attribute(&analysis, None);
        stalls.extend(attribute(&analysed(&nagle_run(4, 44 * MS)), None));
        let mut tally = StallTally::default();
        stalls.iter().for_each(|stall| tally.add(stall));
        assert_eq!(tally.summaries_with(&[]), summarize(&stalls));
        // Taking back every stall of the first group, then adding them again, moves the group
        // after the others, as a recount of the stalls in that order would.
        let first = group_key(&stalls[0]);
        let (moved, kept): (Vec<Stall>, Vec<Stall>) =
            stalls.iter().cloned().partition(|stall| group_key(stall) == first);
        assert!(moved.iter().all(|stall| tally.remove(stall)));
        assert!(!tally.remove(&moved[0]), "already taken back");
        assert_eq!(tally.summaries_with(&moved), summarize(&[kept, moved].concat()));
    }
}
