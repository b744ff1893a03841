//! Stalls seen in packets alone, for captures that have no syscall events (an imported
//! tcpdump file) and for exporting a session's captured segments with explanations.
//!
//! The one pattern recognised is Nagle x delayed ACK: a data segment, then nothing more from its
//! sender until the peer's pure ACK for it arrives 20-500 ms later (the delayed-ACK timer), then
//! the next bytes within [`HELD_AFTER_ACK_NS`] of that ACK: the sender had them all along and
//! Nagle held them until the small segment was acknowledged (RFC 896; RFC 9293 section 3.7.4).
//! Anything less conclusive is left out: a stall is only claimed with its evidence.

use crate::attribution::{Stall, StallClass};
use crate::event::{ConnId, Event, EventKind, Segment, Side};

/// The delayed-ACK timer's range (Linux: 40 ms minimum, 200 ms maximum), with room both ends.
pub const DELAYED_ACK_NS: std::ops::RangeInclusive<u64> = 20_000_000..=500_000_000;
/// How soon after the ACK the held bytes must leave to count as released by it.
pub const HELD_AFTER_ACK_NS: u64 = 5_000_000;

/// A stall and the event (an index into the slice given to [`find`]) that ended it: the held
/// data segment.
#[derive(Clone, Debug, PartialEq)]
pub struct PacketStall {
    pub stall: Stall,
    pub ended_by: usize,
}

/// `a` is at or after `b` in sequence space (RFC 9293 section 3.4: arithmetic modulo 2^32).
fn seq_ge(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) as i32 >= 0
}

/// Finds the Nagle x delayed ACK stalls among `events`' [`EventKind::Segment`]s (other kinds are
/// ignored; `side` is the sender). Stalls come out in time order.
pub fn find(events: &[Event]) -> Vec<PacketStall> {
    let mut segments: Vec<(usize, &Event, &Segment)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.kind {
            EventKind::Segment(s) => Some((i, e, &**s)),
            _ => None,
        })
        .collect();
    segments.sort_by_key(|(i, e, _)| (e.conn, e.at_ns, *i));
    let mut stalls = Vec::new();
    for conn in segments.chunk_by(|a, b| a.1.conn == b.1.conn) {
        for (k, &(_, small_event, small)) in conn.iter().enumerate() {
            if small.len == 0 {
                continue;
            }
            if let Some(stall) = held_after(conn, k, small_event.conn, small_event.side) {
                stalls.push(stall);
            }
        }
    }
    stalls.sort_by_key(|s| (s.stall.start_ns, s.stall.conn));
    stalls
}

/// Whether the data segment `conn[k]` from `sender` was followed by a delayed pure ACK and then,
/// at once, by the next bytes.
fn held_after(
    conn: &[(usize, &Event, &Segment)],
    k: usize,
    conn_id: ConnId,
    sender: Side,
) -> Option<PacketStall> {
    let (_, first, small) = conn[k];
    let end = small.seq.wrapping_add(small.len);
    let t0 = first.at_ns;
    let mut ack_at = None;
    for &(index, e, s) in &conn[k + 1..] {
        match ack_at {
            None => {
                if e.at_ns - t0 > *DELAYED_ACK_NS.end() {
                    return None;
                }
                if s.len > 0 {
                    // More data from the sender before the ACK: not held. Data from the peer:
                    // an answer, whose ACK rides along (not delayed).
                    return None;
                }
                if e.side != sender && s.has(crate::event::tcp_flags::ACK) && seq_ge(s.ack, end) {
                    if !s.is_pure_ack() || !DELAYED_ACK_NS.contains(&(e.at_ns - t0)) {
                        return None;
                    }
                    ack_at = Some(e.at_ns);
                }
            }
            Some(t1) => {
                if e.at_ns - t1 > HELD_AFTER_ACK_NS {
                    return None;
                }
                if s.len == 0 {
                    continue;
                }
                if e.side != sender || s.seq != end {
                    return None;
                }
                let receiver = sender.peer();
                let evidence = format!(
                    "{}-byte segment at {:.6} s, pure ACK {} later, {} bytes {} after it",
                    small.len,
                    t0 as f64 / 1e9,
                    duration(t1 - t0),
                    s.len,
                    duration(e.at_ns - t1),
                );
                let stall = Stall {
                    req: first.req,
                    conn: conn_id,
                    side: receiver,
                    from: sender,
                    to: receiver,
                    start_ns: t0,
                    end_ns: e.at_ns,
                    wait_ns: e.at_ns - t0,
                    class: StallClass::NagleDelayedAck,
                    evidence,
                };
                return Some(PacketStall { stall, ended_by: index });
            }
        }
    }
    None
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
    use crate::event::ReqId;

    const MS: u64 = 1_000_000;

    fn seg(at_ns: u64, side: Side, seq: u32, ack: u32, len: u32, flags: u8) -> Event {
        Event {
            at_ns,
            side,
            conn: ConnId(1),
            req: ReqId(0),
            kind: EventKind::Segment(Box::new(Segment {
                flags,
                seq,
                ack,
                len,
                ..Segment::default()
            })),
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
