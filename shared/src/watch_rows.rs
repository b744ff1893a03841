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
//!   ended it: the watch's tally tags each segment with the row [`WatchRows::push`] returns
//!   (`reduce::WatchTally::with_rows`), so a stall decided many exchanges later still finds it,
//!   and a connection holds only the row it is in.
//!
//! Nothing here is made up: a row has what the watch saw of its exchange and nothing else. What
//! comes before an exchange's first client data (a handshake, a server that speaks first) and
//! what comes of a connection past [`MAX_CONNECTIONS`] followed at once is in no row.

use crate::event::{tcp_flags, Call, ConnId, Event, EventKind, ReqId, Side};
use crate::keyed_hash::KeyedMap;

/// Connections followed at once: a watch follows at most as many
/// ([`crate::exchange::MAX_OPEN_CONNECTIONS`]).
pub const MAX_CONNECTIONS: usize = crate::exchange::MAX_OPEN_CONNECTIONS;

/// One connection: the exchange it is in and that exchange's row, the latest answer not yet
/// given as the row's done, and each side's FIN.
struct Connection {
    exchange: ReqId,
    row: u32,
    answered_ns: Option<u64>,
    fins: [bool; 2],
}

/// Turns a watch's events into a request/response run's, exchange by exchange.
#[derive(Default)]
pub struct WatchRows {
    connections: KeyedMap<ConnId, Connection>,
    next_row: u32,
    /// Connections answered in the batch being turned, whose row gets its done at the batch's
    /// end: one `RequestDone` a row a batch, not one an answer segment.
    answered: Vec<ConnId>,
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
        for event in events {
            self.push(event, out);
        }
        self.end_batch(out);
    }

    /// The batch ends: each row answered in it gets its done, its latest answer.
    pub fn end_batch(&mut self, out: &mut Vec<Event>) {
        for conn in self.answered.drain(..) {
            if let Some(connection) = self.connections.get_mut(&conn) {
                give_done(conn, connection, out);
            }
        }
    }

    /// Appends to `out` the run's events of `event` (a batch ends with
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
                        let row = self.begin(event.conn, event.req, out);
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
                        self.answered_at(event.conn, event.at_ns);
                    }
                }
                self.close_on(event, segment.flags, out);
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

    /// The row of exchange `req` of connection `conn`: the exchange it is in now.
    pub fn row_of(&self, conn: ConnId, req: ReqId) -> Option<u32> {
        let connection = self.connections.get(&conn)?;
        (connection.exchange == req).then_some(connection.row)
    }

    /// The first row that may still change: the oldest of the rows the open connections are
    /// in (every later row may yet get a segment or a call), or the next row when none is open.
    pub fn open_from(&self) -> u32 {
        self.connections.values().map(|c| c.row).min().unwrap_or(self.next_row)
    }

    /// Exchange `req` of `conn` begins, in a new row (the connection's last row given its
    /// done first), unless the connection is past [`MAX_CONNECTIONS`].
    fn begin(&mut self, conn: ConnId, req: ReqId, out: &mut Vec<Event>) -> Option<u32> {
        if !self.connections.contains_key(&conn) && self.connections.len() >= MAX_CONNECTIONS {
            self.connections_left_out += 1;
            return None;
        }
        let row = self.next_row;
        self.next_row = self.next_row.checked_add(1)?;
        let connection = self.connections.entry(conn).or_insert(Connection {
            exchange: req,
            row,
            answered_ns: None,
            fins: [false; 2],
        });
        give_done(conn, connection, out);
        (connection.exchange, connection.row) = (req, row);
        Some(row)
    }

    fn answered_at(&mut self, conn: ConnId, at_ns: u64) {
        let Some(connection) = self.connections.get_mut(&conn) else { return };
        if connection.answered_ns.is_none() {
            self.answered.push(conn);
        }
        connection.answered_ns = Some(connection.answered_ns.map_or(at_ns, |ns| ns.max(at_ns)));
    }

    /// Forgets a connection once both its sides sent a FIN, or either an RST, its last row
    /// given its done.
    fn close_on(&mut self, event: &Event, flags: u8, out: &mut Vec<Event>) {
        let Some(connection) = self.connections.get_mut(&event.conn) else { return };
        if flags & tcp_flags::FIN != 0 {
            connection.fins[event.side.index()] = true;
        }
        if flags & tcp_flags::RST != 0 || connection.fins == [true, true] {
            give_done(event.conn, connection, out);
            self.connections.remove(&event.conn);
        }
    }
}

/// The connection's row gets its done, its latest answer, if it has one not yet given.
fn give_done(conn: ConnId, connection: &mut Connection, out: &mut Vec<Event>) {
    if let Some(at_ns) = connection.answered_ns.take() {
        let req = ReqId(connection.row);
        out.push(Event { at_ns, side: Side::Client, conn, req, kind: EventKind::RequestDone });
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
                // One done a row: its latest answer, as its connection's next exchange begins
                // or the batch ends.
                (1, 0, "done", 90 * MS),
                (1, 2, "start", 91 * MS),
                (1, 2, "segment", 91 * MS),
                (2, 1, "done", 47 * MS),
            ]
        );
        assert_eq!(
            (rows.row_of(ConnId(1), ReqId(1)), rows.row_of(ConnId(2), ReqId(0))),
            (Some(2), Some(1))
        );
        assert_eq!(rows.open_from(), 1, "connection 2 is still in row 1");
        // Connection 2 closes: its row is no longer open, and the connection is forgotten.
        let mut out = Vec::new();
        rows.push_all(
            &[
                segment(100 * MS, Client, 2, 0, 0, FIN | ACK),
                segment(101 * MS, Server, 2, 0, 0, FIN | ACK),
            ],
            &mut out,
        );
        assert_eq!(rows.open_from(), 2);
        assert_eq!(rows.row_of(ConnId(2), ReqId(0)), None, "a closed connection is forgotten");
        assert_eq!(out.len(), 2, "its FINs, in its row, and no second done: {out:?}");
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
