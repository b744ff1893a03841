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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use ackscope_shared::{ConnId, ReqId};

/// What both ends of a connection share.
#[derive(Clone, Debug)]
pub struct ConnTag {
    pub conn: ConnId,
    requests: Arc<Mutex<Vec<ReqId>>>,
}

impl ConnTag {
    pub fn new(conn: ConnId) -> ConnTag {
        ConnTag { conn, requests: Arc::default() }
    }

    /// Client: request `req` is the next one on this connection.
    pub fn announce(&self, req: ReqId) {
        lock(&self.requests).push(req);
    }

    /// Server: the id of the `index`-th request on this connection (from 0), if announced.
    pub fn request_at(&self, index: usize) -> Option<ReqId> {
        lock(&self.requests).get(index).copied()
    }
}

#[derive(Debug, Default)]
pub struct Peers {
    by_port: Mutex<HashMap<u16, ConnTag>>,
}

impl Peers {
    pub fn register(&self, local_port: u16, tag: ConnTag) {
        lock(&self.by_port).insert(local_port, tag);
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
