//! A watch's exchanges as a request/response run's requests, so that the page draws each
//! exchange as a row, as it draws a request: the same analysis ([`RunAnalysis`]) fed with the
//! events a run would have recorded for it, where the watch saw them.
//!
//! - An exchange becomes a request (a row) at its client's first data segment, the request's
//!   start; its done is its server's last answer segment so far, as `ExchangeTally` times it.
//!   Rows are numbered across the run in the order the exchanges began: a watch numbers the
//!   exchanges of each connection from 0 (`exchange::ExchangeRule`).
//! - Its segments are the request's (the ladder draws them).
//! - A watched program's call that slept ([`EventKind::BlockedCall`], a watch as root) becomes
//!   the call's span, from when its thread went to sleep to its return: the only calls of the
//!   watched programs ackscope sees, so a row has these and no others.
//! - A stall the packets show ([`crate::packet_stalls`]) is put in the row of the segment that
//!   ended it: the watch's tally tags each segment with its row as it goes
//!   (`reduce::WatchTally::with_rows`), so a stall decided many exchanges later still finds it.
//!
//! Nothing here is made up: a row has what the watch saw of its exchange and nothing else. What
//! comes before an exchange's first client data (a handshake, a server that speaks first) and
//! what comes of a connection past [`MAX_CONNECTIONS`] followed at once is in no row.

use std::collections::VecDeque;

use crate::event::{tcp_flags, Call, ConnId, Event, EventKind, ReqId, Side};
use crate::keyed_hash::KeyedMap;

/// Connections followed at once: a watch follows at most as many
/// ([`crate::exchange::MAX_OPEN_CONNECTIONS`]).
pub const MAX_CONNECTIONS: usize = crate::exchange::MAX_OPEN_CONNECTIONS;
/// A connection's exchanges whose rows are remembered: a stall is decided within a few
/// exchanges of its own (at most half a second after it), and names its exchange.
const RECENT: usize = 8;

/// One connection's latest exchanges and their rows, newest last; and each side's FIN.
#[derive(Default)]
struct Connection {
    recent: VecDeque<(ReqId, u32)>,
    fins: [bool; 2],
    /// Closed in the batch being turned: in no row still open.
    closed: bool,
}

/// Turns a watch's events into a request/response run's, exchange by exchange.
#[derive(Default)]
pub struct WatchRows {
    connections: KeyedMap<ConnId, Connection>,
    next_row: u32,
    /// The latest answer segment of each row that had one in the batch being turned: one
    /// `RequestDone` a row a batch, not one a segment.
    answered: Vec<(u32, ConnId, u64)>,
    /// Connections that closed in the last batch: forgotten at the next, so that the stalls
    /// their close decided find their rows ([`WatchRows::row_of`]) after the batch.
    closed: Vec<ConnId>,
    /// Connections not followed, past [`MAX_CONNECTIONS`].
    pub connections_left_out: u64,
}

impl std::fmt::Debug for WatchRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchRows")
            .field("connections", &self.connections.len())
            .field("rows", &self.next_row)
            .finish()
    }
}

impl WatchRows {
    /// Appends to `out` the run's events of the watch's `events`, in order: a batch.
    pub fn push_all(&mut self, events: &[Event], out: &mut Vec<Event>) {
        self.begin_batch();
        for event in events {
            self.push(event, out);
        }
        self.end_batch(out);
    }

    /// A batch begins: the connections that closed in the last are forgotten.
    pub fn begin_batch(&mut self) {
        for conn in self.closed.drain(..) {
            self.connections.remove(&conn);
        }
    }

    /// The batch ends: each row answered in it gets its done, its latest answer.
    pub fn end_batch(&mut self, out: &mut Vec<Event>) {
        for (row, conn, at_ns) in self.answered.drain(..) {
            out.push(Event {
                at_ns,
                side: Side::Client,
                conn,
                req: ReqId(row),
                kind: EventKind::RequestDone,
            });
        }
    }

    /// Appends to `out` the run's events of `event` (between [`WatchRows::begin_batch`] and
    /// [`WatchRows::end_batch`]); returns the row it is in, if any.
    pub fn push(&mut self, event: &Event, out: &mut Vec<Event>) -> Option<u32> {
        let as_row = |row: u32, at_ns: u64, kind: EventKind| Event {
            at_ns,
            side: event.side,
            conn: event.conn,
            req: ReqId(row),
            kind,
        };
        match &event.kind {
            EventKind::Segment(segment) => {
                let row = match self.row_of(event.conn, event.req) {
                    Some(row) => Some(row),
                    // An exchange begins at its client's first data.
                    None if segment.len > 0 && event.side == Side::Client => {
                        let row = self.begin(event.conn, event.req);
                        if let Some(row) = row {
                            out.push(as_row(row, event.at_ns, EventKind::RequestStart));
                        }
                        row
                    }
                    None => None,
                };
                if let Some(row) = row {
                    out.push(as_row(row, event.at_ns, event.kind.clone()));
                    if segment.len > 0 && event.side == Side::Server {
                        self.answered_at(row, event.conn, event.at_ns);
                    }
                }
                self.close_on(event, segment.flags);
                row
            }
            EventKind::BlockedCall { call, since_ns, bytes } => {
                let row = self.row_of(event.conn, event.req)?;
                let (start, done) = match call {
                    Call::Recv => (
                        EventKind::ReadStart { len_bytes: *bytes },
                        EventKind::ReadDone { bytes: *bytes },
                    ),
                    Call::Send => (
                        EventKind::WriteStart { len_bytes: *bytes },
                        EventKind::WriteDone { bytes: *bytes },
                    ),
                };
                out.push(as_row(row, (*since_ns).min(event.at_ns), start));
                out.push(as_row(row, event.at_ns, done));
                Some(row)
            }
            _ => None,
        }
    }

    /// The row of exchange `req` of connection `conn`, if it began lately.
    pub fn row_of(&self, conn: ConnId, req: ReqId) -> Option<u32> {
        let connection = self.connections.get(&conn)?;
        connection.recent.iter().rev().find(|(exchange, _)| *exchange == req).map(|&(_, row)| row)
    }

    /// The first row that may still change: the oldest of the rows the open connections are
    /// in (every later row may yet get a segment or a call), or the next row when none is open.
    /// A stall decided later than that names an earlier row ([`WatchRows::row_of`]).
    pub fn open_from(&self) -> u32 {
        let open = self.connections.values().filter(|c| !c.closed);
        let rows = open.filter_map(|c| c.recent.back().map(|&(_, row)| row));
        rows.min().unwrap_or(self.next_row)
    }

    fn begin(&mut self, conn: ConnId, req: ReqId) -> Option<u32> {
        if !self.connections.contains_key(&conn) && self.connections.len() >= MAX_CONNECTIONS {
            self.connections_left_out += 1;
            return None;
        }
        let row = self.next_row;
        self.next_row = self.next_row.checked_add(1)?;
        let connection = self.connections.entry(conn).or_default();
        if connection.recent.len() == RECENT {
            connection.recent.pop_front();
        }
        connection.recent.push_back((req, row));
        Some(row)
    }

    fn answered_at(&mut self, row: u32, conn: ConnId, at_ns: u64) {
        match self.answered.iter_mut().find(|(answered, ..)| *answered == row) {
            Some(latest) => latest.2 = latest.2.max(at_ns),
            None => self.answered.push((row, conn, at_ns)),
        }
    }

    /// Forgets a connection once both its sides sent a FIN, or either an RST: at the next
    /// batch.
    fn close_on(&mut self, event: &Event, flags: u8) {
        let Some(connection) = self.connections.get_mut(&event.conn) else { return };
        if flags & tcp_flags::FIN != 0 {
            connection.fins[event.side.index()] = true;
        }
        if !connection.closed && (flags & tcp_flags::RST != 0 || connection.fins == [true, true]) {
            connection.closed = true;
            self.closed.push(event.conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tcp_flags::{ACK, FIN, PSH};
    use crate::event::Segment;

    const MS: u64 = 1_000_000;

    fn segment(at_ns: u64, side: Side, conn: u32, req: u32, len: u32, flags: u8) -> Event {
        let segment = Segment { flags, len, ..Segment::default() };
        Event {
            at_ns,
            side,
            conn: ConnId(conn),
            req: ReqId(req),
            kind: EventKind::Segment(segment),
        }
    }

    fn slept(at_ns: u64, side: Side, conn: u32, req: u32, since_ns: u64) -> Event {
        let kind = EventKind::BlockedCall { call: Call::Recv, since_ns, bytes: 100 };
        Event { at_ns, side, conn: ConnId(conn), req: ReqId(req), kind }
    }

    /// Two connections' exchanges, interleaved: each becomes a row in the order they began,
    /// starting at its client's first data and done at its server's last answer; a call that
    /// slept is its span; the handshake before the first data is in no row.
    #[test]
    fn each_exchange_is_a_row_in_the_order_they_began() {
        use Side::{Client, Server};
        let events = [
            segment(0, Client, 1, 0, 0, 0x02),
            segment(MS, Client, 1, 0, 4, PSH | ACK),
            segment(2 * MS, Client, 2, 0, 4, PSH | ACK),
            segment(44 * MS, Server, 1, 0, 0, ACK),
            segment(45 * MS, Client, 1, 0, 100, PSH | ACK),
            slept(45 * MS + 20_000, Server, 1, 0, MS + 50_000),
            segment(46 * MS, Server, 1, 0, 4, PSH | ACK),
            segment(47 * MS, Server, 2, 0, 104, PSH | ACK),
            segment(90 * MS, Server, 1, 0, 100, PSH | ACK),
            segment(91 * MS, Client, 1, 1, 104, PSH | ACK),
        ];
        let mut rows = WatchRows::default();
        let mut out = Vec::new();
        rows.push_all(&events, &mut out);
        let kinds: Vec<(u32, u32, &str, u64)> = out
            .iter()
            .map(|e| {
                let name = match &e.kind {
                    EventKind::RequestStart => "start",
                    EventKind::RequestDone => "done",
                    EventKind::Segment(_) => "segment",
                    EventKind::ReadStart { .. } => "read",
                    EventKind::ReadDone { .. } => "read done",
                    other => panic!("{other:?}"),
                };
                (e.conn.0, e.req.0, name, e.at_ns)
            })
            .collect();
        assert_eq!(
            kinds,
            [
                (1, 0, "start", MS),
                (1, 0, "segment", MS),
                (2, 1, "start", 2 * MS),
                (2, 1, "segment", 2 * MS),
                (1, 0, "segment", 44 * MS),
                (1, 0, "segment", 45 * MS),
                (1, 0, "read", MS + 50_000),
                (1, 0, "read done", 45 * MS + 20_000),
                (1, 0, "segment", 46 * MS),
                (2, 1, "segment", 47 * MS),
                (1, 0, "segment", 90 * MS),
                (1, 2, "start", 91 * MS),
                (1, 2, "segment", 91 * MS),
                // One done a row a batch: its latest answer.
                (1, 0, "done", 90 * MS),
                (2, 1, "done", 47 * MS),
            ]
        );
        assert_eq!(
            (rows.row_of(ConnId(1), ReqId(0)), rows.row_of(ConnId(2), ReqId(0))),
            (Some(0), Some(1))
        );
        assert_eq!(rows.open_from(), 1, "connection 2 is still in row 1");
        // Connection 2 closes: its row is no longer open.
        let mut out = Vec::new();
        rows.push_all(
            &[
                segment(100 * MS, Client, 2, 0, 0, FIN | ACK),
                segment(101 * MS, Server, 2, 0, 0, FIN | ACK),
            ],
            &mut out,
        );
        assert_eq!(rows.open_from(), 2);
        assert_eq!(rows.row_of(ConnId(2), ReqId(0)), Some(1), "its close's stalls find its row");
        rows.push_all(&[], &mut out);
        assert_eq!(rows.row_of(ConnId(2), ReqId(0)), None, "then it is forgotten");
    }

    /// Past the connections it follows, a new connection's exchanges are in no row, and
    /// counted.
    #[test]
    fn connections_past_the_bound_are_counted_not_kept() {
        let mut rows = WatchRows::default();
        let mut out = Vec::new();
        let events: Vec<Event> = (0..MAX_CONNECTIONS as u32 + 3)
            .map(|conn| segment(u64::from(conn), Side::Client, conn, 0, 4, PSH | ACK))
            .collect();
        rows.push_all(&events, &mut out);
        assert_eq!(rows.connections_left_out, 3);
        assert_eq!(rows.next_row, MAX_CONNECTIONS as u32);
    }
}
