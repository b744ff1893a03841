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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub at_ns: u64,
    pub side: Side,
    pub conn: ConnId,
    pub req: ReqId,
    pub kind: EventKind,
}

/// What happened. New kinds (captured segments, link events) are appended at the end so that the
/// encoded tags of existing kinds never change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A socket option set during the run (TCP_CORK on and off, TCP_QUICKACK re-armed).
    SockOpt { opt: SockOpt, value: u32 },
    /// The socket buffers the kernel actually gave this side's socket (getsockopt after
    /// set-up; Linux doubles what was asked and caps it at rmem_max/wmem_max).
    Buffers { sndbuf_bytes: u32, rcvbuf_bytes: u32 },
    /// The kernel's view of the connection (struct tcp_info), sampled at a syscall boundary or
    /// while a call is blocked.
    TcpInfo(Box<TcpInfoSample>),
}

/// Socket options whose changes during a run are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SockOpt {
    Cork,
    QuickAck,
}

/// A decoded subset of Linux's `struct tcp_info` (see `tcp_info`). Fields the kernel did not
/// return (older kernels return fewer bytes) are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpInfoSample {
    /// Why it was taken: at a syscall boundary, or while a call was blocked.
    pub during_block: bool,
    pub state: u8,
    pub ca_state: u8,
    pub rto_us: u32,
    /// The delayed-ACK timeout the receiver is using (40000 us while delaying).
    pub ato_us: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    /// Segments sent and not yet acknowledged.
    pub unacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub last_data_sent_ms: u32,
    pub last_ack_recv_ms: u32,
    pub last_data_recv_ms: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_cwnd: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub segs_out: Option<u32>,
    pub segs_in: Option<u32>,
    /// Bytes written by the application and not yet sent (held by Nagle, cork or the window).
    pub notsent_bytes: Option<u32>,
    pub min_rtt_us: Option<u32>,
    pub delivery_rate_bytes_per_s: Option<u64>,
    pub bytes_sent: Option<u64>,
    /// The peer's advertised window, and ours.
    pub snd_wnd: Option<u32>,
    pub rcv_wnd: Option<u32>,
    /// Data segments sent: with `segs_out`, tells a pure ACK from data.
    pub data_segs_out: Option<u32>,
    /// Time the sender was limited by the peer's receive window, and by its own send buffer.
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
}
