//! Stalls seen in packets alone, for captures that have no syscall events (an imported
//! tcpdump file) and for exporting a session's captured segments with explanations.
//!
//! The one pattern recognised is Nagle x delayed ACK: a data segment, then nothing more from its
//! sender until the peer's pure ACK for it arrives 20-500 ms later (the delayed-ACK timer), then
//! the next bytes within [`NAGLE_RELEASE_NS`] of that ACK: the sender had them all along and
//! Nagle held them until the small segment was acknowledged (RFC 896; RFC 9293 section 3.7.4).
//! Anything less conclusive is left out: a stall is only claimed with its evidence.

use crate::analysis::SegmentSample;
use crate::attribution::{Stall, StallClass};
use crate::event::{Event, EventKind};

/// The delayed-ACK timer's range: Linux runs it between its minimum (40 ms with HZ >= 100; the
/// stall table measured 43-44 ms) and its maximum (200 ms); room is left on both ends.
pub const DELAYED_ACK_NS: std::ops::RangeInclusive<u64> = 20_000_000..=500_000_000;
/// Nagle sends the held data as soon as the ACK is processed (tens of microseconds on loopback):
/// data later than this after the ACK was not released by it.
pub const NAGLE_RELEASE_NS: u64 = 5_000_000;

/// A stall and the event (an index into the slice given to [`find`]) that ended it: the held
/// data segment.
#[derive(Clone, Debug, PartialEq)]
pub struct PacketStall {
    pub stall: Stall,
    pub ended_by: usize,
}

/// `a` is at or after `b` in sequence space (RFC 9293 section 3.4: arithmetic modulo 2^32).
pub fn seq_ge(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) as i32 >= 0
}

/// A Nagle x delayed ACK hold in one connection's segments: indexes of the small segment, the
/// reader's ACK of it and the held data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub small: usize,
    pub ack: usize,
    pub held: usize,
}

/// The one packet rule for Nagle x delayed ACK, for live captures (the attribution, with the
/// syscalls naming the small write) and for imported captures (every data segment a candidate).
///
/// `segments` are one connection's, both directions, in time order, each stamped as its sender
/// sent it; `small` is a data segment from `writer`. The hold is: no more data from the writer,
/// then the reader's first segment that acknowledges all of the small one (`ack` at or past its
/// end, in sequence space), which is a pure ACK (an answer carrying the ACK was not delayed)
/// sent within [`DELAYED_ACK_NS`] of the small segment's arrival; then the writer's next data,
/// starting where the small segment ended, within [`NAGLE_RELEASE_NS`] of that ACK's arrival.
/// `path_delay_ns` is the one-way delay of an emulated link (0 on loopback or for an import).
/// `Err` says what the packets show instead.
pub fn nagle_hold(
    segments: &[SegmentSample],
    small: usize,
    path_delay_ns: u64,
) -> Result<Hold, String> {
    let first = segments[small];
    let writer = first.side;
    let (w, r) = (writer.name(), writer.peer().name());
    let end = first.seq_end();
    let mut rest = segments.iter().enumerate().skip(small + 1);
    let ack = loop {
        let Some((index, s)) = rest.next() else {
            return Err(format!("no ACK from the {r} of the {}-byte segment", first.len));
        };
        if s.side == writer {
            if s.len > 0 {
                return Err(format!(
                    "the {w} sent more data before the {r} acknowledged the {}-byte segment",
                    first.len
                ));
            }
            continue;
        }
        if s.len > 0 && !seq_ge(s.ack, end) {
            return Err(format!(
                "the {r} answered before it acknowledged the {}-byte segment",
                first.len
            ));
        }
        if s.flags & crate::event::tcp_flags::ACK == 0 || !seq_ge(s.ack, end) {
            continue;
        }
        if !s.is_pure_ack() {
            return Err(format!(
                "the {r}'s ACK of the {}-byte segment rode on its answer: not delayed",
                first.len
            ));
        }
        let delay = s.at_ns.saturating_sub(first.at_ns).saturating_sub(path_delay_ns);
        if !DELAYED_ACK_NS.contains(&delay) {
            return Err(format!(
                "the {r} acknowledged the {}-byte segment after {:.1} ms, outside the \
                 delayed-ACK timer's {:.0}-{:.0} ms",
                first.len,
                delay as f64 / 1e6,
                *DELAYED_ACK_NS.start() as f64 / 1e6,
                *DELAYED_ACK_NS.end() as f64 / 1e6,
            ));
        }
        break index;
    };
    for (index, s) in rest {
        if s.side != writer || s.len == 0 {
            continue;
        }
        if s.seq != end {
            return Err(format!("the {w}'s next data did not start where the small segment ended"));
        }
        let release = s.at_ns.saturating_sub(segments[ack].at_ns).saturating_sub(path_delay_ns);
        if release > NAGLE_RELEASE_NS {
            return Err(format!(
                "the held {} bytes left {:.1} ms after the {r}'s ACK, not at once",
                s.len,
                release as f64 / 1e6
            ));
        }
        return Ok(Hold { small, ack, held: index });
    }
    Err(format!("nothing from the {w} followed the {r}'s ACK of the {}-byte segment", first.len))
}

/// Finds the Nagle x delayed ACK stalls among `events`' [`EventKind::Segment`]s (other kinds are
/// ignored; `side` is the sender), by [`nagle_hold`] with every data segment a candidate. Stalls
/// come out in time order.
pub fn find(events: &[Event]) -> Vec<PacketStall> {
    let mut segments: Vec<(usize, &Event, SegmentSample)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.kind {
            EventKind::Segment(s) => Some((i, e, SegmentSample::new(e.side, e.at_ns, s))),
            _ => None,
        })
        .collect();
    segments.sort_by_key(|(i, e, _)| (e.conn, e.at_ns, *i));
    let mut stalls = Vec::new();
    for conn in segments.chunk_by(|a, b| a.1.conn == b.1.conn) {
        let samples: Vec<SegmentSample> = conn.iter().map(|(_, _, s)| *s).collect();
        for (k, &(_, first, small)) in conn.iter().enumerate() {
            if small.len == 0 {
                continue;
            }
            let Ok(hold) = nagle_hold(&samples, k, 0) else { continue };
            let (ack, held) = (samples[hold.ack], samples[hold.held]);
            let sender = small.side;
            let receiver = sender.peer();
            let evidence = format!(
                "{}-byte segment at {:.6} s, pure ACK {} later, {} bytes {} after it",
                small.len,
                small.at_ns as f64 / 1e9,
                duration(ack.at_ns - small.at_ns),
                held.len,
                duration(held.at_ns - ack.at_ns),
            );
            let stall = Stall {
                req: first.req,
                conn: first.conn,
                side: receiver,
                from: sender,
                to: receiver,
                start_ns: small.at_ns,
                end_ns: held.at_ns,
                wait_ns: held.at_ns - small.at_ns,
                class: StallClass::NagleDelayedAck,
                evidence,
            };
            stalls.push(PacketStall { stall, ended_by: conn[hold.held].0 });
        }
    }
    stalls.sort_by_key(|s| (s.stall.start_ns, s.stall.conn));
    stalls
}

/// "43.6 ms", "30 us".
fn duration(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{} us", ns / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::summarize;
    use crate::event::tcp_flags::{ACK, PSH};
    use crate::event::{ConnId, ReqId, Segment, Side};

    const MS: u64 = 1_000_000;

    fn seg(at_ns: u64, side: Side, seq: u32, ack: u32, len: u32, flags: u8) -> Event {
        Event {
            at_ns,
            side,
            conn: ConnId(1),
            req: ReqId(0),
            kind: EventKind::Segment(Segment { flags, seq, ack, len, ..Segment::default() }),
        }
    }

    /// One request of story 1: the client writes 4 bytes then 2048; the server answers the same.
    fn nagle_exchange(t: u64, cseq: u32, sseq: u32) -> Vec<Event> {
        use Side::{Client, Server};
        vec![
            seg(t, Client, cseq, sseq, 4, PSH | ACK),
            seg(t + 43_600_000, Server, sseq, cseq.wrapping_add(4), 0, ACK),
            seg(t + 43_630_000, Client, cseq.wrapping_add(4), sseq, 2048, PSH | ACK),
            seg(t + 43_700_000, Server, sseq, cseq.wrapping_add(2052), 4, PSH | ACK),
            seg(t + 87_300_000, Client, cseq.wrapping_add(2052), sseq.wrapping_add(4), 0, ACK),
            seg(
                t + 87_330_000,
                Server,
                sseq.wrapping_add(4),
                cseq.wrapping_add(2052),
                2048,
                PSH | ACK,
            ),
            seg(t + 87_400_000, Client, cseq.wrapping_add(2052), sseq.wrapping_add(2052), 0, ACK),
        ]
    }

    #[test]
    fn nagle_both_ways() {
        let events = nagle_exchange(10 * MS, 1000, 5000);
        let found = find(&events);
        assert_eq!(found.len(), 2);
        let s = &found[0];
        assert_eq!((s.stall.from, s.stall.to), (Side::Client, Side::Server));
        assert_eq!(s.ended_by, 2);
        assert_eq!(s.stall.wait_ns, 43_630_000);
        assert_eq!(
            s.stall.evidence,
            "4-byte segment at 0.010000 s, pure ACK 43.6 ms later, 2048 bytes 30 us after it"
        );
        assert_eq!((found[1].stall.from, found[1].ended_by), (Side::Server, 5));
        let lines: Vec<String> =
            summarize(&found.iter().map(|s| s.stall.clone()).collect::<Vec<_>>())
                .iter()
                .map(|c| c.line())
                .collect();
        assert!(
            lines[0].starts_with("1 stall: Nagle x delayed ACK, client->server, median 43.6 ms"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_quick_ack_or_an_answer_is_no_stall() {
        let mut quick = nagle_exchange(0, 1, 1);
        // The ACK comes after 1 ms: no delayed-ACK timer involved.
        quick[1].at_ns = MS;
        quick[2].at_ns = MS + 30_000;
        assert_eq!(find(&quick[..3]).len(), 0);
        // The next bytes come 20 ms after the ACK: not released by it.
        let mut late = nagle_exchange(0, 1, 1);
        late[2].at_ns = late[1].at_ns + 20 * MS;
        assert_eq!(find(&late[..3]).len(), 0);
        // A retransmission of the small segment is not the held data.
        let mut retrans = nagle_exchange(0, 1, 1);
        if let EventKind::Segment(s) = &mut retrans[2].kind {
            s.seq = 1;
        }
        assert_eq!(find(&retrans[..3]).len(), 0);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let events = nagle_exchange(0, u32::MAX - 1, 7);
        assert_eq!(find(&events).len(), 2);
    }

    #[test]
    fn connections_are_kept_apart_and_other_kinds_ignored() {
        let mut events = nagle_exchange(0, 1, 1);
        for e in &mut events[3..] {
            e.conn = ConnId(2);
        }
        events.insert(
            0,
            Event {
                at_ns: 0,
                side: Side::Client,
                conn: ConnId(1),
                req: ReqId(0),
                kind: EventKind::Connected,
            },
        );
        let found = find(&events);
        let got: Vec<(ConnId, usize)> = found.iter().map(|s| (s.stall.conn, s.ended_by)).collect();
        assert_eq!(got, [(ConnId(1), 3), (ConnId(2), 6)]);
    }
}
