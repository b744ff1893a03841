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

    /// 0 for the client, 1 for the server: where a side's entry is in a pair kept per side.
    pub fn index(self) -> usize {
        match self {
            Side::Client => 0,
            Side::Server => 1,
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
    /// A TCP segment seen on the wire (packet capture). `side` is the side that sent it. Held
    /// inline, not boxed: a capture makes two or more per exchange, and an allocation on the
    /// capture thread freed on the collector's cost more than the 8 bytes it saves every event.
    Segment(Segment),
    /// A packet in the emulated link's relay. `side` is the side that sent it.
    Link(LinkEvent),
    /// This side's thread was runnable but not running (waiting for a CPU) for `waited_ns` in
    /// all between `since_ns` and this event: the kernel's run-queue delay (`run_delay` of
    /// /proc/thread-self/schedstat), read after calls of 1 ms or more and at the boundary
    /// samples. Recorded when it grew by 100 us or more.
    RunDelay { since_ns: u64, waited_ns: u64 },
    /// The run's server was another host (`--remote`): its events were stamped on that host's
    /// clock and moved onto this run's clock by subtracting `offset_ns` (the server's clock
    /// minus the client's), which is known to within `uncertainty_ns` either way. `rtt_ns` is
    /// the shortest round trip of the exchanges that estimated it: the path between the hosts.
    /// Recorded once, first, by the client side (version 4). A run whose server was in another
    /// network namespace of the same process (`--server-netns`) records it too, with offset and
    /// uncertainty 0 (one clock) and the path's round trip from TCP handshakes.
    ClockSync { offset_ns: i64, uncertainty_ns: u64, rtt_ns: u64 },
    /// This side's delayed-ACK timer fired with an ACK due: the ACK that follows on the wire was
    /// held until then (a watch as root sees it through an eBPF program on the kernel's
    /// `timer_expire_entry` tracepoint, for timers whose callback is `tcp_delack_timer`; a
    /// run's own sockets cannot see it).
    DelayedAck,
    /// A watched program's `call` on this side's socket returned `bytes` at `at_ns`, its thread
    /// having slept `at_ns - since_ns` in all since its previous such call (the time between,
    /// less what the kernel counted it running and waiting for a CPU): where the program's
    /// `recv()` blocked, and for how long, `since_ns` being when the sleep began had it come
    /// last. A watch as root sees reads through an eBPF program on the kernel's
    /// `sock_recv_length` tracepoint; only calls whose thread slept 1 ms or more are recorded
    /// (version 11).
    BlockedCall { call: Call, since_ns: u64, bytes: u32 },
}

/// Which of a watched program's socket calls returned ([`EventKind::BlockedCall`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Call {
    /// `recv()`, `read()` or any call that reads a socket (`sock_recvmsg`).
    Recv,
    /// `send()`, `write()` or any call that writes one (`sock_sendmsg`).
    Send,
}

impl Call {
    /// As a program's source names it: "recv()", "send()".
    pub fn name(self) -> &'static str {
        match self {
            Call::Recv => "recv()",
            Call::Send => "send()",
        }
    }
}

/// TCP header flags, as the bits of the header's flags byte.
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// One captured TCP segment: what a reader of a tcpdump line needs to follow the exchange.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// [`tcp_flags`] bits.
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// Payload bytes, from the IP header's length (loopback hands over segmentation-offload
    /// super-packets far larger than the MTU).
    pub len: u32,
    /// The window field as sent (unscaled; the scale is in the SYN's `wscale`).
    pub window: u16,
    /// Options that matter, when present.
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    /// SACK blocks carried (0 when none).
    pub sack_blocks: u8,
    /// TSval and TSecr.
    pub timestamps: Option<(u32, u32)>,
}

impl Segment {
    #[inline]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// An ACK carrying no data and no SYN, FIN or RST: what a delayed ACK looks like.
    pub fn is_pure_ack(&self) -> bool {
        self.len == 0
            && self.flags & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST) == 0
            && self.has(tcp_flags::ACK)
    }
}

/// What the emulated link did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEvent {
    pub action: LinkAction,
    /// The packet's number in its direction, from 0, to follow it from queue to delivery.
    pub packet: u32,
    /// IP packet bytes.
    pub bytes: u32,
    /// Bytes waiting in the direction's queue after the action.
    pub queued_bytes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LinkAction {
    /// Entered the drop-tail queue.
    Enqueued,
    /// Left the far end after its serialization time and the fixed delay.
    Delivered,
    /// Dropped: the queue was full, or by the configured loss.
    Dropped,
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
