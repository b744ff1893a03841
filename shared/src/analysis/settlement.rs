//! When a request's events are all in, for a reader that retires requests: [`Settlement`].

use crate::event::{ConnId, Event, ReqId, Side};
use crate::side_map::SideMap;

/// How far the producers of a run's events have got. The probe's threads hand their events
/// over in batches (a thousand events, or 10 ms), one producer at a time: with several
/// connections the server's events of a request can arrive after thousands of other requests
/// have finished, and a request retired before them would be summarized without its server
/// side's reads.
#[derive(Debug, Default)]
pub(super) struct Settlement {
    /// Per connection, the highest request id the server's own thread has finished a write for
    /// (its answer's last event but the boundary samples after it); `u32::MAX` once it closed
    /// the connection. Its events arrive in the order it recorded them: once a later
    /// request's write is in, all of an earlier request's events are.
    pub(super) server: SideMap<u32>,
    /// Whether the run records its server's events (a run of ackscope's own client and server:
    /// then from the start, before the first arrives), or a server event has arrived. A
    /// recording with no server side has none to wait for.
    pub(super) server_seen: bool,
    /// The latest captured segment's time, per sending side (client, server), once one has
    /// arrived: a run without capture has none to wait for. The capture hands its segments
    /// over in the order they were sent.
    pub(super) segments_ns: [Option<u64>; 2],
    /// Per connection, the latest request its client began, and when. A segment belongs to
    /// the request begun last before it was sent, so every segment of an earlier request was
    /// sent before that time.
    pub(super) started: SideMap<(u32, u64)>,
}

/// For a connection's last request (no later one begun), how long after its end segments of it
/// may still be sent: Linux's longest delayed ACK (TCP_DELACK_MAX, 200 ms).
pub(super) const SEGMENTS_AFTER_NS: u64 = 200_000_000;

impl Settlement {
    /// A write returned (`closed`: the side closed the connection). Only the server's are
    /// counted: a client's part of a request ends with its own `RequestDone`. Noted for these
    /// two events alone, so that every other event's path costs what it did.
    pub(super) fn wrote(&mut self, event: &Event, closed: bool) {
        if event.side != Side::Server {
            return;
        }
        self.server_seen = true;
        let progress = self.server.get_or_insert_with((event.conn, Side::Server), || 0);
        *progress = if closed { u32::MAX } else { (*progress).max(event.req.0) };
    }

    /// A client began request `event.req`.
    pub(super) fn started(&mut self, event: &Event) {
        let latest = self.started.get_or_insert_with((event.conn, Side::Client), || (0, 0));
        if event.req.0 >= latest.0 {
            *latest = (event.req.0, event.at_ns);
        }
    }

    /// A segment `event` was captured.
    pub(super) fn segment(&mut self, event: &Event) {
        let latest = &mut self.segments_ns[event.side.index()];
        *latest = Some(latest.map_or(event.at_ns, |at| at.max(event.at_ns)));
    }

    /// Whether every event of request `req`, finished at `done_ns` on connection `conn`, has
    /// arrived.
    pub(super) fn settled(&self, req: ReqId, conn: Option<ConnId>, done_ns: u64) -> bool {
        let server_in = !self.server_seen
            || conn
                .and_then(|conn| self.server.get(&(conn, Side::Server)))
                .is_some_and(|&at| at > req.0);
        // Segments of this request were all sent before a later one began on its connection;
        // after the last, the delayed ACK's longest wait bounds them.
        let later_start = conn
            .and_then(|conn| self.started.get(&(conn, Side::Client)))
            .filter(|&&(latest, _)| latest > req.0)
            .map(|&(_, at)| at);
        let after = later_start.unwrap_or(done_ns.saturating_add(SEGMENTS_AFTER_NS));
        let segments_in = self.segments_ns.iter().all(|at| at.is_none_or(|at| at >= after));
        server_in && segments_in
    }

    /// Forgets a closed connection that no held request is on.
    pub(super) fn forget(&mut self, conn: ConnId) {
        for side in [Side::Client, Side::Server] {
            self.server.remove(&(conn, side));
            self.started.remove(&(conn, side));
        }
    }
}
