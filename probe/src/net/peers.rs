//! Matching the two ends of a connection, and the requests on it.
//!
//! The client binds its socket before connecting and registers the local port with the
//! connection's id; the server looks the peer port up on accept. Registering before `connect()`
//! means the entry exists before the SYN leaves, so the lookup cannot race the handshake.
//!
//! Request ids are global to a run while concurrent clients take them in any order, so the server
//! cannot count them itself: before sending its k-th request on a connection, the client appends
//! the request's id to the connection's list; the server reads entry k once it has read that
//! request's length prefix (the bytes cannot arrive before the entry was written).
//!
//! Packet capture reads the same tags by port without taking them ([`Peers::lookup`]): a
//! segment belongs to the connection of its client port and to the request announced last
//! before it was sent (the capture reads segments a little later than they were sent, when the
//! client may have announced the next request already).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use ackscope_shared::{ConnId, ReqId};

/// What both ends of a connection share.
#[derive(Clone, Debug)]
pub struct ConnTag {
    pub conn: ConnId,
    /// Each request on the connection, and when the client began it, on the run's clock
    /// (the time its `RequestStart` event has: no clock read of its own).
    requests: Arc<Mutex<Vec<(ReqId, u64)>>>,
}

impl ConnTag {
    pub fn new(conn: ConnId) -> ConnTag {
        ConnTag { conn, requests: Arc::default() }
    }

    /// Client: request `req`, begun at `started_ns` on the run's clock, is the next one on
    /// this connection. Announced before its first byte is written.
    pub fn announce(&self, req: ReqId, started_ns: u64) {
        lock(&self.requests).push((req, started_ns));
    }

    /// Server: the id of the `index`-th request on this connection (from 0), if announced.
    pub fn request_at(&self, index: usize) -> Option<ReqId> {
        lock(&self.requests).get(index).map(|&(req, _)| req)
    }

    /// The request announced last on this connection, if any (packet capture: a segment belongs
    /// to the exchange under way when it was sent).
    pub fn latest(&self) -> Option<ReqId> {
        lock(&self.requests).last().map(|&(req, _)| req)
    }

    /// The request list, locked until the value is dropped: packet capture tags a block of
    /// segments under one lock, not one lock each (the client announces under the same lock).
    pub fn requests(&self) -> Requests<'_> {
        Requests(lock(&self.requests))
    }
}

/// A connection's request list, locked ([`ConnTag::requests`]).
pub struct Requests<'a>(MutexGuard<'a, Vec<(ReqId, u64)>>);

impl Requests<'_> {
    /// The request begun last at or before `at_ns` (on the run's clock), if any, starting from
    /// where the previous call ended (`cursor`, updated). Packet capture asks in time order, so
    /// this mostly walks a step or two; a time before the cursor, or far past it (a cursor not
    /// used for a while), is found by binary search, so no call walks the connection's history.
    pub fn before_from(&self, at_ns: u64, cursor: &mut usize) -> Option<ReqId> {
        /// Steps walked from the cursor before searching instead.
        const WALK: usize = 8;
        let requests = &self.0;
        let started_by = |index: usize| requests.get(index).is_some_and(|&(_, s)| s <= at_ns);
        let mut after = (*cursor).min(requests.len());
        let behind = after > 0 && !started_by(after - 1);
        if behind || started_by(after + WALK) {
            after = requests.partition_point(|&(_, started)| started <= at_ns);
        } else {
            while started_by(after) {
                after += 1;
            }
        }
        *cursor = after;
        after.checked_sub(1).map(|index| requests[index].0)
    }
}

#[derive(Debug, Default)]
pub struct Peers {
    /// Taken once by the server's accept.
    by_port: Mutex<HashMap<u16, ConnTag>>,
    /// Every client port's latest connection, kept for lookups (bounded by the port space; a
    /// port reused by a later connection points at the later one).
    known: Mutex<HashMap<u16, ConnTag>>,
}

impl Peers {
    pub fn register(&self, local_port: u16, tag: ConnTag) {
        lock(&self.known).insert(local_port, tag.clone());
        lock(&self.by_port).insert(local_port, tag);
    }

    /// The tag of the connection from client port `port`, left in place (for packet capture,
    /// which sees every segment of a connection, before and after the server's accept).
    pub fn lookup(&self, port: u16) -> Option<ConnTag> {
        lock(&self.known).get(&port).cloned()
    }

    /// The tag of the connection from `peer_port`, or `None` for a connection this run did not
    /// make (it is still served, but not recorded).
    pub fn take(&self, peer_port: u16) -> Option<ConnTag> {
        lock(&self.by_port).remove(&peer_port)
    }
}

/// A panic while holding one of these locks leaves plain data behind: still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lookup_leaves_the_tag_for_the_server_and_sees_the_latest_request() {
        let peers = Peers::default();
        let tag = ConnTag::new(ConnId(7));
        peers.register(40_000, tag.clone());
        let seen = peers.lookup(40_000).expect("registered");
        assert_eq!(seen.conn, ConnId(7));
        assert_eq!(seen.latest(), None, "nothing announced yet");
        tag.announce(ReqId(3), 10);
        tag.announce(ReqId(9), 20);
        assert_eq!(seen.latest(), Some(ReqId(9)), "the lookup shares the request list");
        assert_eq!(peers.take(40_000).map(|t| t.conn), Some(ConnId(7)));
        assert!(peers.take(40_000).is_none(), "taken once");
        assert!(peers.lookup(40_000).is_some(), "still known to the capture");
        assert!(peers.lookup(40_001).is_none());
    }

    #[test]
    fn a_segment_belongs_to_the_request_announced_before_it() {
        let tag = ConnTag::new(ConnId(0));
        let (before_any, during_4, later) = (99, 150, 300);
        tag.announce(ReqId(4), 100);
        tag.announce(ReqId(5), 200);
        let before = |at_ns| tag.requests().before_from(at_ns, &mut 0);
        assert_eq!(before(before_any), None);
        assert_eq!(before(100), Some(ReqId(4)), "a segment at the request's start");
        assert_eq!(before(during_4), Some(ReqId(4)));
        assert_eq!(before(later), Some(ReqId(5)));
        // From a cursor, forwards and then back in time, as a capture may ask.
        let (requests, mut cursor) = (tag.requests(), 0);
        assert_eq!(requests.before_from(during_4, &mut cursor), Some(ReqId(4)));
        assert_eq!(requests.before_from(later, &mut cursor), Some(ReqId(5)));
        assert_eq!(requests.before_from(during_4, &mut cursor), Some(ReqId(4)));
        assert_eq!(requests.before_from(before_any, &mut cursor), None);
    }

    #[test]
    fn a_cursor_far_behind_or_ahead_still_finds_the_request() {
        let tag = ConnTag::new(ConnId(0));
        for id in 0..1000 {
            tag.announce(ReqId(id), u64::from(id) * 10);
        }
        let requests = tag.requests();
        for (cursor, at_ns, expected) in [
            (0, 9_995, 999),    // far behind: a connection not seen for a while
            (0, 35, 3),         // a few steps ahead
            (990, 125, 12),     // far ahead: an earlier time
            (5000, 9_999, 999), // past the end
            (500, 5_000, 500),  // exactly at a start
        ] {
            let mut cursor = cursor;
            assert_eq!(requests.before_from(at_ns, &mut cursor), Some(ReqId(expected)));
            assert_eq!(cursor, expected as usize + 1, "the cursor is left after the request");
        }
    }
}
