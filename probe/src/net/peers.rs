//! Matching the two ends of a connection.
//!
//! The client binds its socket before connecting and registers the local port with the
//! connection id and first request id it will use; the server looks the peer port up on accept.
//! Registering before `connect()` means the entry exists before the SYN leaves, so the lookup
//! cannot race the handshake.

use std::collections::HashMap;
use std::sync::Mutex;

use ackscope_shared::{ConnId, ReqId};

/// What the server needs to tag a connection's events like the client does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnTag {
    pub conn: ConnId,
    /// The id of the first request the client sends on this connection; later ones follow.
    pub first_req: ReqId,
}

impl ConnTag {
    /// For connections the run did not make; their recorder discards everything anyway.
    pub const UNKNOWN: ConnTag = ConnTag {
        conn: ConnId(u32::MAX),
        first_req: ReqId(0),
    };
}

#[derive(Debug, Default)]
pub struct Peers {
    by_port: Mutex<HashMap<u16, ConnTag>>,
}

impl Peers {
    pub fn register(&self, local_port: u16, tag: ConnTag) {
        self.lock().insert(local_port, tag);
    }

    /// The tag of the connection from `peer_port`, or `None` for a connection this run did not
    /// make (it is still served, but not recorded).
    pub fn take(&self, peer_port: u16) -> Option<ConnTag> {
        self.lock().remove(&peer_port)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u16, ConnTag>> {
        // A panic while holding this lock leaves a plain map behind: still usable.
        self.by_port
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
