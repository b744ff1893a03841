//! A watch's one loop: the watched ports' packets and their sockets' `tcp_info`, as a session's
//! events on the watch's clock.
//!
//! - Packets ([`PortTaps`], CAP_NET_RAW) become `Segment` events through
//!   [`Conversations`] (`ackscope_shared::exchange`): connections numbered as they appear, the
//!   side on a watched port the server, each segment numbered with its exchange.
//! - Every [`SAMPLE_EVERY`], sock_diag reads the `tcp_info` of the followed connections'
//!   sockets (no privilege needed); a socket whose counters moved since its last sample gets a
//!   `TcpInfo` event on its side. With packets it asks for each socket by its addresses, a
//!   lookup in the kernel's table (up to [`EXACT_UP_TO`] connections), and lists the ports'
//!   IPv6 sockets every [`DISCOVER_EVERY`] for the connections the packets do not show; without
//!   packets (or past that many connections) it lists the ports' sockets every time, which
//!   walks the kernel's whole table, and sock_diag alone finds the connections.
//! - As root, the watched sockets' delayed-ACK timers ([`KernelTaps`]): each that fires with
//!   an ACK due becomes a `DelayedAck` event on its side, which the packet rule cites as the
//!   sender of the held ACK.
//! - Closed connections are forgotten after a linger; at most
//!   `exchange::MAX_OPEN_CONNECTIONS` are followed, and sock_diag lists at most
//!   [`MAX_SOCKETS`] sockets: what is past either is counted, not kept.
//!
//! Nothing here can hold the watched program up: packets are read from a ring the kernel
//! fills without waiting (a full ring drops, counted), and sock_diag answers from the kernel's
//! tables.
//!
//! One file, though long: the packets, the samples and the connections' processes share the
//! watch's connections and its clock, and each step reads them in one order.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::sock_diag::TcpSocket;

use ackscope_shared::exchange::{connection_key, Conversations, Endpoint};
use ackscope_shared::packet::parse_ethernet;
use ackscope_shared::wire::Instruments;
use ackscope_shared::{Call, ConnId, Event, EventKind, Side};

use super::calls::SleptRead;
use super::kernel::KernelTaps;
use super::packets::{PortTaps, Stamp, TapError};
use super::process::{self, Owner};
use super::sock_diag::{self, MAX_SOCKETS};
use super::tune::Trials;
use crate::capture::ClockOffset;
use crate::net::record::Clock;

/// `/proc` is walked for the processes of new connections at most this often, for at most
/// this long (the walk is on the watch's loop: a host of many processes must not hold it).
const OWNERS_EVERY: Duration = Duration::from_secs(1);
const OWNERS_WITHIN: Duration = Duration::from_millis(50);
/// A packet ring hands over a block this long after its first packet at the latest (a few
/// milliseconds: `capture`'s ring retires blocks after 4 ms), so the last packets are read.
const RETIRE_AFTER: Duration = Duration::from_millis(10);
/// How often the ports' sockets are listed for their `tcp_info`.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Followed connections whose sockets are asked for by their addresses, with packets: each is
/// two lookups (its two ends), a few microseconds, where a listing walks the kernel's whole
/// table of connected sockets (about 1.8 ms on a host of 24 GB). Past this many, the listing.
pub const EXACT_UP_TO: usize = 256;
/// With packets, how often the ports' IPv6 sockets are listed for connections the packets do
/// not show (the packet filter takes IPv4).
pub const DISCOVER_EVERY: Duration = Duration::from_secs(1);
/// The realtime-to-watch clock offset is measured again this often (a stepped realtime clock
/// moves the stamps of packets read after the step, not of every packet after it).
const REMEASURE_EVERY: Duration = Duration::from_secs(1);
/// Connections named in the summary (the rest are counted).
pub const NAMED_CONNECTIONS: usize = 32;

/// What the watch could see, and why not more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// Packets and TCP_INFO; and the kernel's delayed-ACK timer ([`KernelTaps`], root), or
    /// why not; and where the watched programs' calls slept (`calls`, root), or why not.
    PacketsAndTcpInfo { timer: Result<(), String>, calls: Result<(), String> },
    /// No packets: why (the missing capability).
    TcpInfoOnly { why: String },
}

impl Evidence {
    /// What a watch records, as a session's header says it: sock_diag's samples every
    /// [`SAMPLE_EVERY`], no syscalls of the watched programs, and packets when they are read.
    pub fn instruments(&self) -> Instruments {
        Instruments {
            events: true,
            tcp_info_at_syscalls: false,
            tcp_info_interval_us: u32::try_from(SAMPLE_EVERY.as_micros()).unwrap_or(u32::MAX),
            capture: matches!(self, Evidence::PacketsAndTcpInfo { .. }),
        }
    }

    /// For the session's spec and the summary.
    pub fn describe(&self) -> String {
        match self {
            Evidence::PacketsAndTcpInfo { timer: Ok(()), calls: Ok(()) } => {
                "packets, TCP_INFO, the kernel's delayed-ACK timer and where the watched \
                 programs' calls slept (eBPF)"
                    .into()
            }
            Evidence::PacketsAndTcpInfo { timer: Ok(()), calls: Err(why) } => format!(
                "packets, TCP_INFO and the kernel's delayed-ACK timer (eBPF); not where the \
                 watched programs' calls slept ({why})"
            ),
            Evidence::PacketsAndTcpInfo { timer: Err(why), .. } => format!(
                "packets and TCP_INFO; not the kernel's delayed-ACK timer nor where the watched \
                 programs' calls slept ({why}), which confirm each Nagle x delayed ACK stall \
                 from inside the kernel"
            ),
            Evidence::TcpInfoOnly { why } => format!(
                "TCP_INFO only, through sock_diag; {why}: run as root or give the binary the \
                 capability (`sudo setcap cap_net_raw+ep $(which ackscope)`) to add packets, \
                 which exchanges and stalls are found from"
            ),
        }
    }
}

/// What a socket's TCP_INFO says moved: bytes acked and received, segments out and in,
/// unacked, retransmissions, state.
type Moved = (u64, u64, (u32, u32), (u32, u32, u8));

/// Counts for the summary.
#[derive(Clone, Debug, Default)]
pub struct WatchCounts {
    pub packets: u64,
    /// Packets of the ports the kernel's filters kept, and those it dropped for a full ring.
    pub kernel_packets: u64,
    pub dropped: u64,
    /// Packets of new connections left out past the bound of followed connections.
    pub connections_left_out: u64,
    /// Sockets sock_diag listed past its bound.
    pub sockets_left_out: usize,
    /// Connections followed through sock_diag alone while packets were read: IPv6 ones.
    pub ipv6_connections: u64,
    pub samples: u64,
    /// Records of the delayed-ACK timer's program lost (a full ring, or unreadable).
    pub timer_records_lost: u64,
    /// `--try`: each option put back (or why not), and each that had nothing to apply to.
    pub tried: Vec<String>,
    pub connections: u64,
    /// The first connections seen, with their processes once found.
    pub named: Vec<NamedConnection>,
}

/// A connection as the summary names it.
#[derive(Clone, Debug)]
pub struct NamedConnection {
    pub conn: ConnId,
    pub client: Endpoint,
    pub server: Endpoint,
    /// The processes of the client's and the server's sockets, when they are on this host and
    /// this process may see them ([`process`]).
    pub owners: [Option<Owner>; 2],
}

impl std::fmt::Display for NamedConnection {
    /// "conn 1: client 127.0.0.1:51000 (pid 42 curl) -> server 127.0.0.1:8080 (pid 7 nginx)"
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |(ip, port): Endpoint, owner: &Option<Owner>| {
            let place = SocketAddr::new(ip, port);
            match owner {
                Some(owner) => format!("{place} ({owner})"),
                None => place.to_string(),
            }
        };
        write!(
            f,
            "conn {}: client {} -> server {}",
            self.conn.0,
            show(self.client, &self.owners[0]),
            show(self.server, &self.owners[1])
        )
    }
}

/// The watch's sources and its connection table.
pub struct Watcher {
    ports: Vec<u16>,
    taps: Option<PortTaps>,
    /// The delayed-ACK timer's program (root).
    kernel: Option<KernelTaps>,
    pub evidence: Evidence,
    conversations: Conversations,
    clock: Clock,
    offset: ClockOffset,
    measured: Instant,
    sampled: Option<Instant>,
    /// When the ports' IPv6 sockets were last listed (with packets: [`DISCOVER_EVERY`]).
    discovered: Option<Instant>,
    /// Each followed socket's counters at its last sample, to sample only what moved.
    last_sample: HashMap<(ConnId, Side), Moved>,
    /// The ports whose sockets a complete listing has read: a connection found on one of them
    /// later opened while watched (when no listing since left sockets out).
    listed_ports: HashSet<u16>,
    /// The connections that opened while watched: each side's first sample is announced
    /// (`Connected`, `Accepted`), so that its counters count from zero
    /// (`ackscope_shared::estimate`).
    opened_while_watched: HashSet<ConnId>,
    /// When `/proc` was last walked for owners, and the inodes sought so far: each is sought
    /// once (another user's process stays unnamed without root), at most two per named
    /// connection.
    owners_sought: Option<Instant>,
    inodes_sought: HashSet<u32>,
    pub counts: WatchCounts,
    /// `--try`: the options tried on the watched programs' sockets, put back at the end.
    pub trials: Trials,
    /// What the trials did since [`Watcher::take_notes`], to be said as it happens.
    notes: Vec<String>,
    /// `--metrics`: told each connection's port as it is followed, its retirement, and the
    /// watch's losses at each sample.
    pub metrics: Option<std::sync::Arc<super::metrics::Metrics>>,
}

impl Watcher {
    /// Now, on the watch's clock (its events' `at_ns`).
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// When the options of the record just taken (`trials.take_record()`) went into force, on
    /// the watch's clock: the packets stamped before are of the programs as they were.
    pub fn tried_at_ns(&self) -> u64 {
        match self.trials.changed_at_ns() {
            Some(monotonic) => monotonic.saturating_sub(self.clock.epoch_monotonic_ns()),
            None => self.clock.now_ns(),
        }
    }

    /// Watches `ports` on the watch's `clock`: with packets when this process may read them.
    pub fn open(ports: &[u16], clock: Clock) -> Result<Watcher, TapError> {
        let (taps, evidence) = match PortTaps::open(ports) {
            Ok(taps) => (Some(taps), Evidence::PacketsAndTcpInfo { timer: Ok(()), calls: Ok(()) }),
            Err(TapError::Permission(e)) => {
                (None, Evidence::TcpInfoOnly { why: format!("no CAP_NET_RAW for packets ({e})") })
            }
            Err(e) => return Err(e),
        };
        // The timer confirms what the packets show: without them there is nothing to confirm.
        let (kernel, evidence) = match evidence {
            Evidence::PacketsAndTcpInfo { .. } => match KernelTaps::attach(ports) {
                Ok(kernel) => {
                    let calls = kernel.calls();
                    (Some(kernel), Evidence::PacketsAndTcpInfo { timer: Ok(()), calls })
                }
                Err(e) => {
                    let why = match e.kind() {
                        std::io::ErrorKind::PermissionDenied => {
                            format!("an eBPF program needs root, CAP_BPF and CAP_PERFMON: {e}")
                        }
                        _ => e.to_string(),
                    };
                    let calls = Err(why.clone());
                    (None, Evidence::PacketsAndTcpInfo { timer: Err(why), calls })
                }
            },
            other => (None, other),
        };
        Ok(Watcher {
            ports: ports.to_vec(),
            taps,
            kernel,
            evidence,
            conversations: Conversations::new(ports),
            offset: ClockOffset::measure(&clock),
            clock,
            measured: Instant::now(),
            sampled: None,
            discovered: None,
            last_sample: HashMap::new(),
            listed_ports: HashSet::new(),
            opened_while_watched: HashSet::new(),
            owners_sought: None,
            inodes_sought: HashSet::new(),
            counts: WatchCounts::default(),
            trials: Trials::default(),
            notes: Vec::new(),
            metrics: None,
        })
    }

    /// Waits up to 10 ms for packets, then appends to `out` the events of what came, and of
    /// the sockets' samples when they are due.
    pub fn step(&mut self, out: &mut Vec<Event>) {
        if self.measured.elapsed() >= REMEASURE_EVERY {
            self.offset = ClockOffset::measure_with(&self.clock, 4);
            self.measured = Instant::now();
        }
        match &mut self.taps {
            Some(taps) => {
                taps.wait();
                let mut calls = Vec::new();
                if let Some(kernel) = &mut self.kernel {
                    // The timers that fired before the packets read now: a timer's record
                    // comes at once, the ACK it sent a few milliseconds later through the
                    // ring, so the connection is still in the exchange the ACK held.
                    take_timers(kernel, &self.conversations, &self.clock, out);
                    // The programs' reads that returned so far, oldest first: each goes among
                    // the packets where its time puts it, so that it is in the exchange its
                    // connection was in when it returned (a server's read that waited for the
                    // next request is that request's), and comes just after the held bytes it
                    // took, where the packet rule looks for it.
                    kernel.take_calls(|call| calls.push(call));
                }
                calls.sort_by_key(|call| call.returned_ns);
                let mut calls = calls.into_iter().peekable();
                let packets_from = out.len();
                let (offset, conversations, counts) =
                    (self.offset, &mut self.conversations, &mut self.counts);
                let epoch_ns = self.clock.epoch_monotonic_ns();
                let metrics = self.metrics.as_deref();
                taps.take(|frame, stamp| {
                    let Ok(packet) = parse_ethernet(frame) else { return };
                    let at_ns = match stamp {
                        Stamp::Realtime(ns) => offset.to_run_ns(ns),
                        // lo's ingress hook stamps on the watch's own clock.
                        Stamp::Monotonic(ns) => ns.saturating_sub(epoch_ns),
                    };
                    while let Some(call) =
                        calls.next_if(|call| call.returned_ns.saturating_sub(epoch_ns) <= at_ns)
                    {
                        out.extend(call_event(&call, conversations, epoch_ns));
                    }
                    if let Some(seen) = conversations.packet(at_ns, &packet) {
                        counts.packets += 1;
                        if let Some((client, server)) = seen.opened {
                            name_connection(counts, metrics, seen.event.conn, client, server);
                        }
                        out.push(seen.event);
                    }
                });
                self.counts.connections_left_out = self.conversations.left_out;
                // A timer that fired while the packets were read may have sent an ACK among
                // them: its record was written before that ACK existed, so it is in the ring
                // now. It goes before the packets, where the packet rule looks for it.
                if let Some(kernel) = &mut self.kernel {
                    let mut late = Vec::new();
                    take_timers(kernel, &self.conversations, &self.clock, &mut late);
                    out.splice(packets_from..packets_from, late);
                }
                // The calls that returned after the last packet read, and while they were read.
                let epoch_ns = self.clock.epoch_monotonic_ns();
                let mut late = calls.collect::<Vec<_>>();
                if let Some(kernel) = &mut self.kernel {
                    kernel.take_calls(|call| late.push(call));
                }
                late.sort_by_key(|call| call.returned_ns);
                out.extend(
                    late.iter().filter_map(|c| call_event(c, &self.conversations, epoch_ns)),
                );
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
        // `--try` as root: new connections get the options from their first byte (the program
        // starts at the first step), and what it changed is counted as it comes: after the
        // packets, so that each packet read of a connection it changed comes with the change.
        let said = self.trials.new_connections(&self.ports);
        self.notes.extend(said);
        if self.sampled.is_none_or(|at| at.elapsed() >= SAMPLE_EVERY) {
            self.sampled = Some(Instant::now());
            if let Some(taps) = &mut self.taps {
                taps.refresh_interfaces();
            }
            self.count_kernel_packets();
            self.sample(out);
            for conn in self.conversations.retire(self.clock.now_ns()) {
                self.opened_while_watched.remove(&conn);
                self.last_sample.remove(&(conn, Side::Client));
                self.last_sample.remove(&(conn, Side::Server));
                self.trials.forget_connection(conn);
                if let Some(metrics) = &self.metrics {
                    metrics.connection_retired(conn);
                }
            }
            if let Some(metrics) = &self.metrics {
                let timer_records_lost = self.kernel.as_ref().map_or(0, KernelTaps::lost);
                metrics.watch_counts(&self.counts, timer_records_lost);
            }
        }
    }

    /// The watch ends: the packets the kernel still holds in a block it has not handed over
    /// (it does within [`RETIRE_AFTER`]) are read into `out`; returns the counts.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> WatchCounts {
        if self.taps.is_some() {
            std::thread::sleep(RETIRE_AFTER);
            self.step(out);
        }
        self.count_kernel_packets();
        if let Some(kernel) = &self.kernel {
            self.counts.timer_records_lost = kernel.lost();
        }
        // Every option tried is put back before the watch says it ended.
        self.counts.tried = self.trials.finish();
        self.counts.clone()
    }

    /// The ports watched now.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Watches `port` too from now on (a watched command's port, found after the watch began;
    /// at most [`super::packets::MAX_PORTS`] in all, which the caller keeps to): its packets,
    /// its sockets, its delayed-ACK timers. On a failure it is not watched (a tap that took its
    /// packets already hands them over, and they are left out as another port's).
    pub fn add_port(&mut self, port: u16) -> std::io::Result<()> {
        if self.ports.contains(&port) {
            return Ok(());
        }
        let mut ports = self.ports.clone();
        ports.push(port);
        if let Some(taps) = &mut self.taps {
            taps.set_ports(&ports)?;
        }
        if let Some(kernel) = &mut self.kernel {
            // Without it the packets still show the stalls: the timer confirms fewer of them.
            if let Err(e) = kernel.set_ports(&ports) {
                tracing::warn!(
                    "watch: the delayed-ACK timer's program could not take port {port} ({e}); \
                     its stalls are found from the packets alone"
                );
            }
        }
        self.conversations.add_server_port(port);
        self.trials.add_port(port);
        if let Some(metrics) = &self.metrics {
            metrics.watch_port(port);
        }
        self.ports = ports;
        Ok(())
    }

    /// What the trials did since the last call.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Whether packets are read (CAP_NET_RAW).
    pub fn has_packets(&self) -> bool {
        self.taps.is_some()
    }

    /// How lo's packets are taken (its ingress hook, or a packet socket), when packets are.
    pub fn packets_via(&self) -> Option<crate::capture::Via> {
        self.taps.as_ref().map(PortTaps::lo_via)
    }

    /// The ports' sockets' `tcp_info`: a `TcpInfo` event for each followed socket whose
    /// counters moved, and the connections sock_diag finds that the packets do not show.
    fn sample(&mut self, out: &mut Vec<Event>) {
        let Some(found) = self.read_sockets() else { return };
        self.counts.sockets_left_out = self.counts.sockets_left_out.max(found.left_out);
        let at_ns = self.clock.now_ns();
        if let Some(listed) = &found.listed {
            // A complete reading: connections whose socket is gone end (see `sweep`).
            self.conversations
                .sweep(at_ns, |client, server| listed.contains(&connection_key(client, server)));
        }
        if !self.trials.is_empty() {
            let said = self.trials.step(&found.sockets, &self.conversations);
            self.notes.extend(said);
        }
        self.seek_owners(&found.sockets);
        for socket in found.sockets {
            let Some(info) = socket.info else { continue };
            // A listener has no peer; IPv4-mapped addresses are the packets' IPv4 ones.
            if socket.remote.port() == 0 {
                continue;
            }
            let (local, remote) = (endpoint(socket.local), endpoint(socket.remote));
            // IPv6 connections have no packets here (the filter takes IPv4).
            let without_packets = self.taps.is_none() || !local.0.is_ipv4();
            let (conn, side, req) = match self.conversations.find(local, remote) {
                Some(c) => (c.id, c.side_of(local), c.exchange()),
                // Without packets, sock_diag finds the connections.
                None if without_packets => match self.conversations.socket(local, remote) {
                    Some((c, opened)) => {
                        let found = (c.id, c.side_of(local), c.exchange());
                        if let Some((client, server)) = opened {
                            let metrics = self.metrics.as_deref();
                            name_connection(&mut self.counts, metrics, found.0, client, server);
                            if self.taps.is_some() {
                                self.note_ipv6();
                            }
                            // Not in a complete listing of its port before: it opened
                            // while watched.
                            let complete = self.counts.sockets_left_out == 0
                                && self.conversations.left_out == 0;
                            if complete && self.listed_ports.contains(&server.1) {
                                self.opened_while_watched.insert(found.0);
                            }
                        }
                        found
                    }
                    None => continue,
                },
                // Its packets have not come yet (or it closed before the watch began).
                None => continue,
            };
            // What moves when anything happens: bytes, segments (a connection stuck in its
            // retransmission backoff moves only these), retransmissions, its state.
            let moved = (
                info.bytes_acked.unwrap_or(0),
                info.bytes_received.unwrap_or(0),
                (info.segs_out.unwrap_or(0), info.segs_in.unwrap_or(0)),
                (info.unacked, info.total_retrans, info.state),
            );
            let before = self.last_sample.insert((conn, side), moved);
            if before == Some(moved) {
                continue;
            }
            if before.is_none() && self.opened_while_watched.contains(&conn) {
                let kind = match side {
                    Side::Client => EventKind::Connected,
                    Side::Server => EventKind::Accepted,
                };
                out.push(Event { at_ns, side, conn, req, kind });
            }
            self.counts.samples += 1;
            out.push(Event { at_ns, side, conn, req, kind: EventKind::TcpInfo(Box::new(info)) });
        }
        if found.listed.is_some() && found.left_out == 0 {
            self.listed_ports.extend(self.ports.iter().copied());
        }
        self.counts.connections_left_out = self.conversations.left_out;
    }

    /// One reading of the ports' sockets for [`Watcher::sample`]; `None` if sock_diag failed
    /// (said, and tried again at the next sample).
    ///
    /// With packets and at most [`EXACT_UP_TO`] connections followed, each followed
    /// connection's two ends are asked for by their addresses, and every [`DISCOVER_EVERY`] the
    /// ports' IPv6 sockets are listed for the connections the packets do not show (all the
    /// ports' sockets when an open connection was not found by its addresses: the listing
    /// says whether it is gone). Otherwise the ports' sockets are listed.
    fn read_sockets(&mut self) -> Option<Found> {
        let warn = |e: std::io::Error| {
            tracing::warn!("watch: reading the ports' sockets failed ({e}); trying again");
        };
        if self.taps.is_none() || self.conversations.len() > EXACT_UP_TO {
            let listing = sock_diag::on_ports(&self.ports, MAX_SOCKETS).map_err(warn).ok()?;
            let listed = (listing.left_out == 0).then(|| connections_of(&listing.sockets));
            return Some(Found { sockets: listing.sockets, left_out: listing.left_out, listed });
        }
        let address = |(ip, port): Endpoint| SocketAddr::new(ip, port);
        let pairs: Vec<(SocketAddr, SocketAddr)> = self
            .conversations
            .iter()
            .flat_map(|c| [(c.client, c.server), (c.server, c.client)])
            .map(|(local, remote)| (address(local), address(remote)))
            .collect();
        let mut sockets: Vec<TcpSocket> =
            sock_diag::exact(&pairs).map_err(warn).ok()?.into_iter().flatten().collect();
        let found = connections_of(&sockets);
        // An open connection neither of whose ends was found: gone (a killed process), or a
        // socket the lookup cannot name (one bound to an interface), or not this host's (a
        // routed peer's packets). Only a listing tells, once a second.
        let missing = self
            .conversations
            .iter()
            .any(|c| !c.is_closed() && !found.contains(&connection_key(c.client, c.server)));
        let mut left_out = 0;
        let mut listed = (!missing).then(|| found.clone());
        if self.discovered.is_none_or(|at| at.elapsed() >= DISCOVER_EVERY) {
            self.discovered = Some(Instant::now());
            let listing = if missing {
                sock_diag::on_ports(&self.ports, MAX_SOCKETS)
            } else {
                sock_diag::on_ports_ipv6(&self.ports, MAX_SOCKETS)
            };
            if let Ok(listing) = listing.map_err(warn) {
                left_out = listing.left_out;
                if missing && listing.left_out == 0 {
                    let mut all = connections_of(&listing.sockets);
                    all.extend(found.iter().copied());
                    listed = Some(all);
                }
                // The connections read by their addresses were sampled from those answers.
                sockets.extend(listing.sockets.into_iter().filter(|s| {
                    !found.contains(&connection_key(endpoint(s.local), endpoint(s.remote)))
                }));
            }
        }
        Some(Found { sockets, left_out, listed })
    }
}

/// What one reading of the ports' sockets found.
struct Found {
    sockets: Vec<TcpSocket>,
    /// Sockets past the bound of a listing.
    left_out: usize,
    /// The connections whose socket (either end) a complete reading found, for `sweep`; `None`
    /// when the reading left some out.
    listed: Option<HashSet<(Endpoint, Endpoint)>>,
}

/// The connections of `sockets`, by key.
fn connections_of(sockets: &[TcpSocket]) -> HashSet<(Endpoint, Endpoint)> {
    sockets.iter().map(|s| connection_key(endpoint(s.local), endpoint(s.remote))).collect()
}

impl Watcher {
    /// An IPv6 connection, followed through TCP_INFO only: said once, counted always.
    fn note_ipv6(&mut self) {
        if self.counts.ipv6_connections == 0 {
            tracing::warn!(
                "watch: an IPv6 connection on a watched port: recorded through TCP_INFO only \
                 (the packet filter takes IPv4), so its exchanges and stalls are not counted"
            );
        }
        self.counts.ipv6_connections += 1;
    }

    /// Reads the kernel's packet counts (each read resets its own, kept here in u64s), and
    /// says so the first time it dropped packets for a full ring.
    fn count_kernel_packets(&mut self) {
        let Some(taps) = &mut self.taps else { return };
        let before = self.counts.dropped;
        (self.counts.kernel_packets, self.counts.dropped) = taps.kernel_counts();
        if before == 0 && self.counts.dropped > 0 {
            tracing::warn!(
                "watch: the kernel dropped packets of the watched ports for a full ring: the \
                 watch is falling behind (the watched programs are not slowed); exchanges and \
                 stalls around them may be missing"
            );
        }
    }

    /// Names the processes of the named connections' sockets not yet named, walking `/proc`
    /// at most every [`OWNERS_EVERY`] and only when one is missing.
    fn seek_owners(&mut self, sockets: &[sock_diag::TcpSocket]) {
        if self.owners_sought.is_some_and(|at| at.elapsed() < OWNERS_EVERY) {
            return;
        }
        // (named index, side) of each socket still unnamed, by inode.
        let mut wanted: HashMap<u32, (usize, usize)> = HashMap::new();
        for socket in sockets.iter().filter(|s| s.inode != 0 && s.remote.port() != 0) {
            let (local, remote) = (endpoint(socket.local), endpoint(socket.remote));
            let found = self.counts.named.iter().position(|n| {
                (n.client, n.server) == (local, remote) || (n.server, n.client) == (local, remote)
            });
            let Some(i) = found else { continue };
            let side = usize::from(self.counts.named[i].server == local);
            if self.counts.named[i].owners[side].is_none()
                && self.inodes_sought.insert(socket.inode)
            {
                wanted.insert(socket.inode, (i, side));
            }
        }
        if wanted.is_empty() {
            return;
        }
        self.owners_sought = Some(Instant::now());
        let inodes = wanted.keys().copied().collect();
        for (inode, owner) in process::owners(&inodes, OWNERS_WITHIN) {
            let (i, side) = wanted[&inode];
            self.counts.named[i].owners[side] = Some(owner);
        }
    }
}

/// The delayed-ACK timers' records read now, as `DelayedAck` events of their connections, in
/// the exchange each connection is in. A socket not followed (no packets of its yet, or IPv6)
/// has no stall to confirm.
fn take_timers(
    kernel: &mut KernelTaps,
    conversations: &Conversations,
    clock: &Clock,
    out: &mut Vec<Event>,
) {
    kernel.take(|fired| {
        let Some(c) = conversations.find(fired.local, fired.remote) else { return };
        out.push(Event {
            at_ns: fired.at_ns.saturating_sub(clock.epoch_monotonic_ns()),
            side: c.side_of(fired.local),
            conn: c.id,
            req: c.exchange(),
            kind: EventKind::DelayedAck,
        });
    });
}

/// A watched program's read that slept, as a `BlockedCall` event of its connection, in the
/// exchange the connection is in now; none for a connection not followed, or a call that failed
/// (a negative result: it took no bytes).
fn call_event(returned: &SleptRead, conversations: &Conversations, epoch_ns: u64) -> Option<Event> {
    let c = conversations.find(returned.local, returned.remote)?;
    let bytes = u32::try_from(returned.result).ok()?;
    Some(Event {
        at_ns: returned.returned_ns.saturating_sub(epoch_ns),
        side: c.side_of(returned.local),
        conn: c.id,
        req: c.exchange(),
        kind: EventKind::BlockedCall {
            call: Call::Recv,
            since_ns: returned.slept_ns.saturating_sub(epoch_ns),
            bytes,
        },
    })
}

fn name_connection(
    counts: &mut WatchCounts,
    metrics: Option<&super::metrics::Metrics>,
    conn: ConnId,
    client: Endpoint,
    server: Endpoint,
) {
    counts.connections += 1;
    if let Some(metrics) = metrics {
        metrics.connection_opened(conn, server.1);
    }
    if counts.named.len() < NAMED_CONNECTIONS {
        counts.named.push(NamedConnection { conn, client, server, owners: [None, None] });
    }
}

/// A socket address as the packets name it (IPv4-mapped IPv6 as IPv4).
fn endpoint(addr: SocketAddr) -> Endpoint {
    (addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};

    use super::*;

    /// The `tcp_info` samples in `events` of connection `conn`'s `side`: its bytes received.
    fn received(events: &[Event], conn: ConnId, side: Side) -> Vec<u64> {
        events
            .iter()
            .filter(|e| e.conn == conn && e.side == side)
            .filter_map(|e| match &e.kind {
                EventKind::TcpInfo(info) => info.bytes_received,
                _ => None,
            })
            .collect()
    }

    /// With packets, the followed connection's two ends are read by their addresses (no
    /// listing of the host's sockets), and both are sampled as their counters move; an IPv6
    /// connection, which the packets do not show, is found by the listing of IPv6 sockets
    /// and followed through its samples alone.
    #[test]
    #[ignore = "needs root (packet sockets): cargo xtask test runs it as root"]
    fn both_ends_of_a_followed_connection_are_sampled_and_an_ipv6_one_is_found() {
        // SAFETY: geteuid() cannot fail and has no side effects.
        assert_eq!(unsafe { libc::geteuid() }, 0, "reading packets needs root");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let listener6 = TcpListener::bind((Ipv6Addr::LOCALHOST, port)).unwrap();
        let mut watcher = Watcher::open(&[port], Clock::start()).expect("a watch");
        assert!(watcher.has_packets());
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let client6 = TcpStream::connect(listener6.local_addr().unwrap()).unwrap();
        let (_server6, _) = listener6.accept().unwrap();
        let mut events = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut conn = None;
        loop {
            client.write_all(&[1; 100]).unwrap();
            server.read_exact(&mut [0; 100]).unwrap();
            server.write_all(&[2; 300]).unwrap();
            client.read_exact(&mut [0; 300]).unwrap();
            watcher.step(&mut events);
            let segment = |e: &&Event| matches!(e.kind, EventKind::Segment(_));
            conn = conn.or_else(|| events.iter().find(segment).map(|e| e.conn));
            let sampled = conn.is_some_and(|conn| {
                received(&events, conn, Side::Server).iter().any(|&b| b >= 100)
                    && received(&events, conn, Side::Client).iter().any(|&b| b >= 300)
            });
            if sampled && watcher.counts.ipv6_connections == 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "in 10 s: conn {conn:?}, {:?}, {} samples",
                watcher.counts,
                events.iter().filter(|e| matches!(e.kind, EventKind::TcpInfo(_))).count()
            );
        }
        drop(client6);
        let named = &watcher.counts.named;
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named.iter().any(|n| n.server.0.is_ipv6()), "the IPv6 connection: {named:?}");
        assert_eq!(watcher.counts.sockets_left_out, 0);
    }

    /// A connection whose sockets are bound to an interface (SO_BINDTODEVICE) is not found by
    /// its addresses: the listing once a second finds it, samples it, and keeps it followed
    /// through a quiet spell longer than the one after which a gone connection is closed.
    #[test]
    #[ignore = "needs root (packet sockets, SO_BINDTODEVICE): cargo xtask test runs it as root"]
    fn a_connection_bound_to_an_interface_is_sampled_and_kept_through_a_quiet_spell() {
        use socket2::{Domain, Socket, Type};
        // SAFETY: geteuid() cannot fail and has no side effects.
        assert_eq!(unsafe { libc::geteuid() }, 0, "reading packets needs root");
        let bound = || {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            socket.bind_device(Some(b"lo")).unwrap();
            socket
        };
        let listener = bound();
        listener.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).unwrap();
        listener.listen(1).unwrap();
        let at = listener.local_addr().unwrap().as_socket().unwrap();
        let mut watcher = Watcher::open(&[at.port()], Clock::start()).expect("a watch");
        let client = bound();
        client.connect(&at.into()).unwrap();
        let mut client: TcpStream = client.into();
        let (server, _) = listener.accept().unwrap();
        let mut server: TcpStream = server.into();
        let client_at = client.local_addr().unwrap();
        let asked = sock_diag::exact(&[(client_at, at), (at, client_at)]).expect("ask");
        assert!(asked.iter().all(Option::is_none), "not found by its addresses: {asked:?}");

        let mut exchange = |events: &mut Vec<Event>, watcher: &mut Watcher| {
            client.write_all(&[1; 100]).unwrap();
            server.read_exact(&mut [0; 100]).unwrap();
            server.write_all(&[2; 300]).unwrap();
            client.read_exact(&mut [0; 300]).unwrap();
            watcher.step(events);
        };
        let mut events = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let conn = loop {
            exchange(&mut events, &mut watcher);
            let conn = events.iter().find(|e| matches!(e.kind, EventKind::Segment(_)));
            if let Some(conn) = conn.map(|e| e.conn) {
                if !received(&events, conn, Side::Server).is_empty()
                    && !received(&events, conn, Side::Client).is_empty()
                {
                    break conn;
                }
            }
            assert!(Instant::now() < deadline, "no samples in 10 s: {:?}", watcher.counts);
        };
        // Quiet for longer than a gone connection is given (two listings, 2 s without packets).
        let quiet_from = Instant::now();
        let quiet = Duration::from_nanos(ackscope_shared::exchange::LINGER_NS) * 3 / 2;
        while quiet_from.elapsed() < quiet {
            watcher.step(&mut events);
        }
        events.clear();
        exchange(&mut events, &mut watcher);
        let after: Vec<ConnId> = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Segment(_)))
            .map(|e| e.conn)
            .collect();
        assert!(!after.is_empty() && after.iter().all(|c| *c == conn), "{conn:?}: {after:?}");
        assert_eq!(watcher.counts.connections, 1);
    }
}
