//! The ladder diagram of one request: both sides' syscalls on two vertical time lines and, when
//! the run was captured, the packets between them. Pure geometry, no DOM.
//!
//! Time runs down, linearly from the request's start (a ladder that bent time would hide the
//! very wait it exists to show). Calls shorter than a few pixels keep a minimum height, so a
//! 5 µs write next to a 44 ms stall is still a visible tick.

use ackscope_shared::analysis::{RunAnalysis, SegmentSample, Span, SpanKind};
use ackscope_shared::attribution::Stall;
use ackscope_shared::{RequestView, Side};

use crate::timeline::layout::stalls_of_spans;
use crate::timeline::scale::format_duration;

pub const WIDTH: f64 = 640.0;
pub const CLIENT_X: f64 = 250.0;
pub const SERVER_X: f64 = 390.0;
const TOP: f64 = 28.0;
const PLOT_HEIGHT: f64 = 420.0;
const MIN_CALL_HEIGHT: f64 = 3.0;
/// A pure ACK this long after the data it acknowledges was held by the delayed-ACK timer
/// (Linux's minimum is 40 ms; anything past 20 ms is far beyond a loopback round trip). This
/// only decides how the packet is drawn; the stall's verdict is the attribution's.
const LATE_ACK_NS: u64 = 20_000_000;
/// The height of one line of a packet's text.
const LABEL_LINE: f64 = 11.0;

/// One call on a side's time line.
#[derive(Clone, Debug, PartialEq)]
pub struct LadderCall {
    pub side: Side,
    pub y: f64,
    pub height: f64,
    /// "write 4 B", "read 2048 B (held 43.7 ms)".
    pub text: String,
    /// The attribution named this call's wait: drawn red (held read) or amber.
    pub stalled: bool,
    pub waited: bool,
}

/// One captured segment, from its sender's line to the receiver's.
#[derive(Clone, Debug, PartialEq)]
pub struct LadderPacket {
    pub from: Side,
    pub y: f64,
    /// Where its text sits: just above the line, or lower when the packet before it is so close
    /// that their texts would overlap (a held body follows the delayed ACK by microseconds).
    pub label_y: f64,
    /// "4 B", "2048 B", "ACK", "delayed ACK +43.7 ms".
    pub text: String,
    pub pure_ack: bool,
    /// A pure ACK sent long after the data it acknowledges: the delayed ACK.
    pub late: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ladder {
    pub height: f64,
    pub calls: Vec<LadderCall>,
    pub packets: Vec<LadderPacket>,
    /// Time marks down the left edge: (y, "43.7 ms").
    pub marks: Vec<(f64, String)>,
}

/// The x of a side's time line.
pub fn line_x(side: Side) -> f64 {
    match side {
        Side::Client => CLIENT_X,
        Side::Server => SERVER_X,
    }
}

/// The ladder of `view` (request `req` of `analysis`), its waits named by `stalls`.
pub fn ladder(analysis: &RunAnalysis, view: &RequestView, stalls: &[Stall]) -> Option<Ladder> {
    let start = view.start_ns?;
    let end = view
        .done_ns
        .into_iter()
        .chain(view.spans().map(|span| span.end_ns))
        .chain(view.segments().iter().map(|segment| segment.at_ns))
        .max()?
        .max(start + 1);
    let extent = (end - start) as f64;
    let y = |at_ns: u64| TOP + at_ns.saturating_sub(start) as f64 / extent * PLOT_HEIGHT;
    let mut calls = Vec::new();
    let spans: Vec<Span> = view.spans().collect();
    // Which stall each call is: the timeline's rule (a watch's stall is the read that took its
    // held bytes).
    let (stall_of, _) = stalls_of_spans(&spans, stalls);
    for (span, why) in spans.into_iter().zip(stall_of) {
        if span.end_ns < start {
            continue;
        }
        let top = y(span.start_ns.max(start));
        let height = (y(span.end_ns) - top).max(MIN_CALL_HEIGHT);
        let why = why.map(|index| &stalls[index]);
        let held = view.conn.and_then(|conn| analysis.stall_ns(conn, &span));
        let mut text = match span.kind {
            SpanKind::Connect => "connect".to_string(),
            SpanKind::Write => format!("write {} B", span.bytes),
            SpanKind::Read => format!("read {} B", span.bytes),
        };
        // A held read says what was held (its duration is the bar); others, how long they took.
        match held {
            Some(held) => text.push_str(&format!(", held {}", format_duration(held))),
            None => text.push_str(&format!(" in {}", format_duration(span.duration_ns()))),
        }
        let stalled = why.is_some_and(|stall| stall.is_held_read()) || held.is_some();
        calls.push(LadderCall {
            side: span.side,
            y: top,
            height,
            text,
            stalled,
            waited: why.is_some() && !stalled,
        });
    }
    let mut packets: Vec<LadderPacket> = view
        .segments()
        .iter()
        .enumerate()
        .map(|(index, segment)| packet(&view.segments()[..index], segment, y(segment.at_ns)))
        .collect();
    let mut last_label = f64::NEG_INFINITY;
    for packet in &mut packets {
        packet.label_y = (packet.y - 2.0).max(last_label + LABEL_LINE);
        last_label = packet.label_y;
    }
    let marks = [0.0, 0.25, 0.5, 0.75, 1.0]
        .into_iter()
        .map(|share| {
            let at = (share * extent) as u64;
            let label = if at == 0 { "0".to_string() } else { format_duration(at) };
            (TOP + share * PLOT_HEIGHT, label)
        })
        .collect();
    Some(Ladder { height: TOP + PLOT_HEIGHT + 24.0, calls, packets, marks })
}

fn packet(earlier: &[SegmentSample], segment: &SegmentSample, y: f64) -> LadderPacket {
    let pure_ack = segment.is_pure_ack();
    // The data this ACK acknowledges: the peer's segment whose end it names.
    let acked = earlier
        .iter()
        .rev()
        .find(|data| data.side != segment.side && data.len > 0 && data.seq_end() == segment.ack);
    let delay = acked.map(|data| segment.at_ns.saturating_sub(data.at_ns));
    let late = pure_ack && delay.is_some_and(|delay| delay >= LATE_ACK_NS);
    let text = match (pure_ack, delay) {
        (true, Some(delay)) if late => {
            format!("delayed ACK +{}", format_duration(delay))
        }
        (true, _) => "ACK".to_string(),
        (false, _) => format!("{} B", segment.len),
    };
    LadderPacket { from: segment.side, y, label_y: y - 2.0, text, pure_ack, late }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::event::{tcp_flags, Segment};
    use ackscope_shared::{ConnId, Event, EventKind, ReqId, RrSpec};

    use super::*;
    use crate::fixtures::{nagle_run, MS, US};
    use crate::state::Attribution;

    #[test]
    fn a_nagle_request_has_both_sides_calls_and_its_held_reads_in_red() {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&nagle_run(3, 44 * MS));
        let why = Attribution::of(&analysis, Some(&RrSpec::default()));
        let view = &analysis.requests()[1];
        let ladder = ladder(&analysis, view, why.of_request(1)).expect("started");
        assert!(ladder.calls.iter().any(|c| c.side == Side::Client));
        assert!(ladder.calls.iter().any(|c| c.side == Side::Server));
        let stalled: Vec<&LadderCall> = ladder.calls.iter().filter(|c| c.stalled).collect();
        assert_eq!(stalled.len(), 2, "one held read per direction");
        assert!(stalled.iter().all(|c| c.text.ends_with(", held 44.0 ms") && c.height > 150.0));
        assert!(ladder.calls.iter().all(|c| c.height >= MIN_CALL_HEIGHT && c.y >= TOP));
        assert_eq!(ladder.marks.first().map(|m| m.1.as_str()), Some("0"));
        assert!(ladder.packets.is_empty(), "not captured");
    }

    #[test]
    fn the_late_pure_ack_is_drawn_as_the_delayed_ack() {
        let mut analysis = RunAnalysis::new();
        let mut events = nagle_run(2, 44 * MS);
        let start = analysis_start(&events);
        let segment = |at_ns, side, seq, ack, len, flags| Event {
            at_ns,
            side,
            conn: ConnId(0),
            req: ReqId(1),
            kind: EventKind::Segment(Segment {
                flags,
                seq,
                ack,
                len,
                window: 65_535,
                ..Segment::default()
            }),
        };
        let ack = tcp_flags::ACK;
        events.push(segment(start + 10 * US, Side::Client, 1000, 1, 4, ack | tcp_flags::PSH));
        events.push(segment(start + 44 * MS, Side::Server, 1, 1004, 0, ack));
        events.push(segment(start + 44 * MS + 20 * US, Side::Client, 1004, 1, 2048, ack));
        analysis.push_all(&events);
        let view = &analysis.requests()[1];
        let ladder = ladder(&analysis, view, &[]).expect("started");
        let labels: Vec<f64> = ladder.packets.iter().map(|p| p.label_y).collect();
        assert!(
            labels.windows(2).all(|w| w[1] - w[0] >= LABEL_LINE),
            "texts never overlap: {labels:?}"
        );
        let texts: Vec<(&str, bool)> =
            ladder.packets.iter().map(|p| (p.text.as_str(), p.late)).collect();
        assert_eq!(texts, [("4 B", false), ("delayed ACK +44.0 ms", true), ("2048 B", false)]);
    }

    fn analysis_start(events: &[Event]) -> u64 {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(events);
        analysis.requests()[1].start_ns.expect("request 1 started")
    }
}
