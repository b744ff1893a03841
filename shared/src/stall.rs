//! The stall vocabulary: the classes of wait, what each is called, and how to fix it; and one
//! stall as every reader shows it. A leaf above [`crate::event`]: the attribution from syscalls
//! and the packet rule both speak it.

use serde::{Deserialize, Serialize};

use crate::event::{ConnId, ReqId, Side};

/// Why a call waited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StallClass {
    /// The writer's Nagle algorithm held a segment until the ACK of the previous small one,
    /// which the reader's delayed-ACK timer held back.
    NagleDelayedAck,
    /// The writer's Nagle algorithm held a small tail until the ACK of an earlier small segment
    /// came back, one round trip later (the reader did not delay it).
    NagleRoundTrip,
    /// The connect handshake took long.
    ConnectionSetup,
    /// The server took long between reading the request and answering it.
    ServerThinkTime,
    /// The writer waited for the peer to open its receive window.
    ReceiveWindowLimited,
    /// The write waited for room in its own send buffer.
    SendBufferLimited,
    /// A thread of the exchange was runnable but not running: it waited for a CPU (the
    /// kernel's run-queue delay covers most of the wait).
    NotRunning,
    /// None of the above fits the evidence.
    Unexplained,
    /// The write waited for room in its send buffer, which stayed full because the congestion
    /// window was: as many segments in flight as it allowed, the rest not sent (a new
    /// connection's slow start, or a window cut after a loss). Last, so that the classes
    /// before it keep their place in every order already written down.
    CongestionWindowLimited,
}

impl StallClass {
    /// Every class, in a fixed order.
    pub const ALL: [StallClass; 9] = [
        StallClass::NagleDelayedAck,
        StallClass::NagleRoundTrip,
        StallClass::ConnectionSetup,
        StallClass::ServerThinkTime,
        StallClass::ReceiveWindowLimited,
        StallClass::SendBufferLimited,
        StallClass::CongestionWindowLimited,
        StallClass::NotRunning,
        StallClass::Unexplained,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StallClass::NagleDelayedAck => "Nagle x delayed ACK",
            StallClass::NagleRoundTrip => "Nagle, one round trip",
            StallClass::ConnectionSetup => "connection set-up",
            StallClass::ServerThinkTime => "server think time",
            StallClass::ReceiveWindowLimited => "receive-window limited",
            StallClass::SendBufferLimited => "send-buffer limited",
            StallClass::CongestionWindowLimited => "congestion-window limited",
            StallClass::NotRunning => "thread not running",
            StallClass::Unexplained => "unexplained",
        }
    }

    /// The class's name in JSON (its serde name): "nagle_delayed_ack".
    pub fn code(self) -> &'static str {
        match self {
            StallClass::NagleDelayedAck => "nagle_delayed_ack",
            StallClass::NagleRoundTrip => "nagle_round_trip",
            StallClass::ConnectionSetup => "connection_setup",
            StallClass::ServerThinkTime => "server_think_time",
            StallClass::ReceiveWindowLimited => "receive_window_limited",
            StallClass::SendBufferLimited => "send_buffer_limited",
            StallClass::CongestionWindowLimited => "congestion_window_limited",
            StallClass::NotRunning => "not_running",
            StallClass::Unexplained => "unexplained",
        }
    }

    /// Whether stalls of this class are reads the kernel held after the peer had written
    /// (rather than waits for the peer, a handshake or buffer room).
    pub fn is_held_read(self) -> bool {
        matches!(
            self,
            StallClass::NagleDelayedAck | StallClass::NagleRoundTrip | StallClass::Unexplained
        )
    }

    /// The fix of this class that can be tried on running programs from outside (a page's
    /// "try" button on a watch): TCP_NODELAY on the writer, where Nagle held the data. The
    /// others need the program's code (one write), stay set only inside it (TCP_QUICKACK), or
    /// are not socket options.
    pub fn live_fix(self) -> Option<crate::tried::TriedOption> {
        match self {
            StallClass::NagleDelayedAck | StallClass::NagleRoundTrip => {
                Some(crate::tried::TriedOption::NoDelay)
            }
            _ => None,
        }
    }

    /// What removes stalls of this class. `writer` and `reader` are the sides involved.
    pub fn fixes(self, writer: Side, reader: Side) -> Vec<String> {
        let (w, r) = (writer.name(), reader.name());
        match self {
            StallClass::NagleDelayedAck => vec![
                format!("TCP_NODELAY on the {w}"),
                format!("one write (or writev) for the length and the body on the {w}"),
                format!("TCP_CORK around each message on the {w}"),
                format!("TCP_QUICKACK on the {r}, set again after every read"),
            ],
            StallClass::NagleRoundTrip => vec![
                format!("TCP_NODELAY on the {w}"),
                format!("one write (or writev) for the length and the body on the {w}"),
                format!("TCP_CORK around each message on the {w}"),
            ],
            StallClass::ConnectionSetup => vec![
                "keep connections open instead of reconnecting".into(),
                "look at the accept queue and SYN handling on the server".into(),
            ],
            StallClass::ServerThinkTime => vec!["make the server answer faster".into()],
            StallClass::ReceiveWindowLimited => vec![
                format!("a larger SO_RCVBUF on the {r} (or leave auto-tuning on)"),
                format!("read faster on the {r}"),
            ],
            StallClass::SendBufferLimited => vec![
                format!("a larger SO_SNDBUF on the {w} (or leave auto-tuning on)"),
                "a faster path or peer: the buffer drains at the connection's rate".into(),
            ],
            StallClass::CongestionWindowLimited => vec![
                "keep the connection open: a warm connection's congestion window has grown, a new one starts at ten segments and doubles each round trip".into(),
                format!("a larger initial congestion window on the {w}'s route (`ip route change ... initcwnd N`)"),
                "fewer bytes per answer, or a shorter path: the window opens by round trips".into(),
            ],
            StallClass::NotRunning => vec![
                "fewer busy threads on the machine, or more CPUs: the thread was ready and had none".into(),
                "keep the measured threads on CPUs apart from the load (taskset, cgroups cpusets)".into(),
            ],
            StallClass::Unexplained => vec!["capture packets to see what the kernel did".into()],
        }
    }
}

/// One stall: who waited, for how long, why, and the evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    pub req: ReqId,
    pub conn: ConnId,
    /// The side whose call waited.
    pub side: Side,
    /// Where the data that was waited for came from and went to.
    pub from: Side,
    pub to: Side,
    pub start_ns: u64,
    pub end_ns: u64,
    /// How long the wait that counts lasted (for a read: after the peer had written the data).
    pub wait_ns: u64,
    pub class: StallClass,
    pub evidence: String,
}

impl Stall {
    /// Whether this is a read the kernel held after the peer had written (what "stalled reads"
    /// counts): a held-read class on a call that waited for the other side's data. An
    /// unexplained write is not one.
    pub fn is_held_read(&self) -> bool {
        self.class.is_held_read() && self.from != self.side
    }
}
