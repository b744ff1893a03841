//! Recorded events: the raw material of every view and every analysis.

use serde::{Deserialize, Serialize};

/// A run within a session (the probe numbers them from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RunId(pub u32);

/// A TCP connection within a run. Both ends of one connection carry the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConnId(pub u32);

/// A request within a run, numbered from 0 in the order the client sends them. Server events of
/// the same exchange carry the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReqId(pub u32);

/// Which end of the experiment recorded an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Side {
    Client,
    Server,
}

impl Side {
    pub fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

/// One recorded step.
///
/// `at_ns` counts nanoseconds since the run started, on one monotonic clock shared by every
/// side of a local run, taken immediately before (`*Start`) or after (`*Done`) the syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub at_ns: u64,
    pub side: Side,
    pub conn: ConnId,
    pub req: ReqId,
    pub kind: EventKind,
}

/// What happened. New kinds (TCP_INFO samples, captured segments, link events) are appended at
/// the end so that the encoded tags of existing kinds never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// The client is about to call `connect()`.
    ConnectStart,
    /// `connect()` returned: the handshake completed.
    Connected,
    /// The server's `accept()` returned this connection.
    Accepted,
    /// This side closed the connection, or saw the peer close it.
    Closed,
    /// The client starts a request: the first syscall of the exchange follows.
    RequestStart,
    /// The client has read the whole response.
    RequestDone,
    /// About to call `write()`/`send()` with `len_bytes`.
    WriteStart { len_bytes: u32 },
    /// The write returned having accepted `bytes` into the socket buffer.
    WriteDone { bytes: u32 },
    /// About to call `read()`/`recv()` asking for up to `len_bytes`.
    ReadStart { len_bytes: u32 },
    /// The read returned `bytes` (0: the peer closed).
    ReadDone { bytes: u32 },
}
