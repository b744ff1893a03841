//! Packet capture of a run's own connections, on the run's clock.
//!
//! One file, though long: the capture thread, its stamps and its report are one pipeline whose
//! rules (never wait on the collector, keep each sender's order) are kept in one place; each way
//! in has its own file.
//!
//! The kernel sees every segment of the run's connections as loopback delivers it, and keeps
//! those to or from the echo server's port, headers only, in a memory-mapped ring the capture
//! thread reads in batches. Two ways in, the first that this host permits ([`open`]):
//! - [`hook`]: an eBPF program on lo's ingress hook (tcx, Linux 6.6; CAP_BPF and
//!   CAP_NET_ADMIN), stamping each segment on CLOCK_MONOTONIC, the run's own clock. It costs
//!   the run about 70% of what the packet socket does (docs/BENCHMARKS.md).
//! - [`ring`]: an AF_PACKET socket on lo (CAP_NET_RAW, which a user namespace grants) with a
//!   classic BPF filter and a TPACKET_V3 ring. Its stamps are CLOCK_REALTIME, taken by the tap
//!   as it copies the packet, so the offset between the two clocks ([`ClockOffset`]) is
//!   measured when the capture starts and again as each block is read, and each stamp is
//!   converted with the offset of its own read: a realtime clock that time sync steps (seen:
//!   +0.5 ms every 100 ms) moves only the stamps of packets that waited across a step to be
//!   read, not every stamp after it.
//!
//! docs/CAPTURE.md has the measured agreement with the syscalls and the permissions.
//!
//! On the emulated link (`--link`) there is no tap: the link's relay already holds every
//! packet and stamps it on the run's clock, and tags it with a [`Tagger`] as this module does.
//!
//! Every `unsafe` of the capture is in this module, `hook` and `ring`.

mod hook;
mod ring;

pub(crate) use hook::{Hook, MAX_PORTS as MAX_HOOK_PORTS};

pub(crate) use ring::{
    attach_ports_filter, attach_program, map_rx_ring, Instruction, Packet as RingPacket, Ring,
    TpacketReq, MAX_FILTER_PORTS, PACKET_OUTGOING,
};

use std::collections::HashMap;
use std::io;
use std::mem::{size_of, size_of_val};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ackscope_shared::packet::parse_ethernet;
use ackscope_shared::{Event, EventKind, ReqId, Segment, Side};
use socket2::{Domain, Protocol, Socket, Type};

use crate::net::peers::{ConnTag, Peers};
use crate::net::record::{Clock, Recorder};

/// `PACKET_STATISTICS`: packets seen and dropped for a full ring since the last read.
const PACKET_STATISTICS: libc::c_int = 6;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, since 4.20): the tap skips packets the host sends.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// How long the thread waits for a block before it looks at its stop flag.
const POLL_TIMEOUT_MS: libc::c_int = 10;
/// Captured segments are sent on at least this often, so a live view keeps up.
const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// After the stop flag, blocks are taken until none has come for this long, counted from the
/// stop at the earliest: the kernel hands the last, partly filled block over
/// [`ring::RETIRE_AFTER_MS`] after its first packet.
const DRAIN_FOR: Duration = Duration::from_millis(4 * ring::RETIRE_AFTER_MS as u64);
/// Segments kept while the collector has no room for them, before the thread waits for it (and
/// its ring fills): 16 MiB. Waiting on a collector that many busy threads starve of CPU, the
/// thread used to spend most of a run blocked (64 connections on 2 CPUs: 1.5-2.2 s of 2-2.5 s)
/// while the kernel dropped packets for a full ring.
const PENDING_EVENTS: usize = 256 * 1024;
/// Segments sent before their connection's first request was announced (the handshake) wait
/// this long for it before they are dropped.
const PENDING_FOR: Duration = Duration::from_secs(1);

/// Why the capture could not be started.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(
        "packet capture (--capture) needs root, or at least the CAP_NET_RAW capability, which \
         this process does not have (opening an AF_PACKET socket: {0}); run ackscope as root, \
         or give it the capability once with `sudo setcap cap_net_raw+ep $(which ackscope)`, \
         or run it in a user namespace with its own network namespace (`unshare -rn sh -c 'ip \
         link set lo up; ackscope run ... --capture'`); runs without --capture need none of this"
    )]
    Permission(io::Error),
    #[error("packet capture: {op}: {source}")]
    Io { op: &'static str, source: io::Error },
    #[error(
        "packet capture: {CAPTURE_VIA}={0:?} is not a way to capture: use `hook` (lo's ingress \
         hook), `socket` (a packet socket), or leave it unset for the first that works"
    )]
    Via(String),
}

/// Chooses the capture's way in instead of the first that works: `hook` or `socket` (to compare
/// the two, or to keep to the packet socket where a kernel's hook misbehaves).
pub const CAPTURE_VIA: &str = "ACKSCOPE_CAPTURE_VIA";

fn io_error(op: &'static str) -> impl FnOnce(io::Error) -> CaptureError {
    move |source| CaptureError::Io { op, source }
}

/// The capture's tap on lo, opened before the run starts (a run without the permission fails
/// before anything runs), not yet read. Until [`Capture::start`] gives it the run's port it
/// keeps nothing.
pub struct CaptureTap {
    source: Source,
}

enum Source {
    /// An eBPF program on lo's ingress hook, writing into a BPF ring buffer.
    Hook(hook::Hook),
    /// A packet socket on lo, its filter and its TPACKET_V3 ring.
    Socket { socket: Socket, ring: ring::Ring },
}

impl CaptureTap {
    /// How this tap captures, for the run's report.
    pub fn via(&self) -> Via {
        self.source.via()
    }
}

/// How a run's segments were captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// lo's ingress hook: stamps on the run's clock, no offset to report.
    IngressHook,
    PacketSocket,
    /// `--link`: the link's relay recorded the packets it carried, on the run's clock.
    LinkRelay,
}

impl Via {
    /// The summary JSON's `capture.via` (docs/CAPTURE.md).
    pub fn name(self) -> &'static str {
        match self {
            Via::IngressHook => "ingress hook",
            Via::PacketSocket => "packet socket",
            Via::LinkRelay => "link relay",
        }
    }

    /// The printed summary's words for it.
    pub fn describe(self) -> &'static str {
        match self {
            Via::IngressHook => "through lo's ingress hook",
            Via::PacketSocket => "through a packet socket",
            Via::LinkRelay => "by the link's relay",
        }
    }
}

/// Opens the capture's tap (see the module docs): lo's ingress hook where this process may
/// load and attach it, else a packet socket ([`CAPTURE_VIA`] chooses one). Fails with
/// [`CaptureError::Permission`] without either permission.
pub fn open() -> Result<CaptureTap, CaptureError> {
    let open_hook = || hook::Hook::attach().map(|hook| CaptureTap { source: Source::Hook(hook) });
    match std::env::var(CAPTURE_VIA).ok().as_deref() {
        None | Some("") => {}
        Some("socket") => return open_socket(),
        Some("hook") => {
            return open_hook()
                .map_err(io_error("lo's ingress hook (eBPF; needs root and Linux 6.6 or later)"))
        }
        Some(other) => return Err(CaptureError::Via(other.into())),
    }
    open_hook().or_else(|e| {
        // Not root, a kernel before 6.6, or BPF turned off: the packet socket does the same.
        // Anything else is worth a word: the hook should have worked.
        let expected = matches!(
            e.raw_os_error(),
            Some(libc::EPERM | libc::EACCES | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
        ) || e.kind() == io::ErrorKind::Unsupported;
        if expected {
            tracing::debug!("capture: lo's ingress hook is not available ({e}); a packet socket");
        } else {
            tracing::warn!(
                "capture: lo's ingress hook failed ({e}); capturing through a packet socket \
                     instead, which costs the run more"
            );
        }
        open_socket()
    })
}

/// Opens the capture's packet socket. Fails with [`CaptureError::Permission`] without
/// CAP_NET_RAW.
///
/// What the kernel pays for it, per packet of the host, is kept small (docs/BENCHMARKS-LOG.md,
/// `bench capture`):
/// - The socket takes every protocol (ETH_P_ALL) on lo, and ignores the packets lo sends
///   (PACKET_IGNORE_OUTGOING): each packet is tapped once, as lo receives it, before IP sees it.
///   An IPv4 tap (ETH_P_IP) would be called after IP instead, which then has to clone every
///   packet, as it finds it shared with the tap; without PACKET_IGNORE_OUTGOING every packet
///   would be cloned and filtered a second time as lo sends it.
/// - No SO_TIMESTAMPNS: the ring stamps each packet it keeps anyway, and the option would turn on
///   a timestamp for every packet the host receives, and TCP's receive-timestamp work in every
///   read of every socket.
/// - The socket is made with no protocol, so it takes nothing until it is bound to lo, and its
///   filter refuses every packet until the run's port is known.
fn open_socket() -> Result<CaptureTap, CaptureError> {
    let socket = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(0))).map_err(|e| {
        match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => CaptureError::Permission(e),
            _ => CaptureError::Io { op: "AF_PACKET socket", source: e },
        }
    })?;
    let fd = socket.as_raw_fd();
    // Port 0 is no TCP connection's: nothing is copied before the run's port is known.
    ring::attach_filter(fd, 0).map_err(io_error("SO_ATTACH_FILTER"))?;
    let ring = ring::Ring::map(fd).map_err(io_error("PACKET_RX_RING (TPACKET_V3)"))?;
    // Kernels before 4.20 have no PACKET_IGNORE_OUTGOING: there the IPv4 tap sees each packet
    // once, at the price of IP's clone.
    let protocol = match set_int(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1) {
        Ok(()) => libc::ETH_P_ALL,
        Err(_) => libc::ETH_P_IP,
    };
    bind_to_loopback(fd, protocol as u16)?;
    Ok(CaptureTap { source: Source::Socket { socket, ring } })
}

/// "available", or why packets cannot be captured here (for the session's host facts).
pub fn availability() -> String {
    match open() {
        Ok(tap) => format!("available ({})", tap.via().name()),
        Err(CaptureError::Permission(e)) => format!("not permitted: needs CAP_NET_RAW ({e})"),
        Err(e) => format!("unavailable: {e}"),
    }
}

/// Sets an integer socket option.
pub(crate) fn set_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn bind_to_loopback(fd: RawFd, protocol: u16) -> Result<(), CaptureError> {
    bind_to_device(fd, c"lo", protocol).map_err(io_error("bind to lo"))
}

/// Binds the packet socket `fd` to the device `name` of the calling thread's namespace, for
/// `protocol` (an ETH_P_ value).
pub(crate) fn bind_to_device(fd: RawFd, name: &std::ffi::CStr, protocol: u16) -> io::Result<()> {
    // SAFETY: the argument is a NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value of it.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = i32::try_from(ifindex).unwrap_or(i32::MAX);
    // SAFETY: `addr` is a live sockaddr_ll and the length passed is its size.
    let rc = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Source {
    fn via(&self) -> Via {
        match self {
            Source::Hook(_) => Via::IngressHook,
            Source::Socket { .. } => Via::PacketSocket,
        }
    }

    /// Keeps only TCP segments to or from `port` from now on.
    fn keep_port(&self, port: u16) -> io::Result<()> {
        match self {
            Source::Hook(hook) => hook.keep_port(port),
            Source::Socket { socket, .. } => ring::attach_filter(socket.as_raw_fd(), port),
        }
    }

    /// Waits for more segments: up to [`POLL_TIMEOUT_MS`] for the kernel to hand a block of the
    /// packet socket's ring over; [`hook::POLL_EVERY`] for the hook, whose records wake no one.
    fn wait(&self) {
        let socket = match self {
            Source::Hook(_) => return thread::sleep(hook::POLL_EVERY),
            Source::Socket { socket, .. } => socket,
        };
        let mut poll = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        // SAFETY: one live pollfd, and the count passed is one.
        unsafe { libc::poll(&mut poll, 1, POLL_TIMEOUT_MS) };
    }

    /// Packets the filter let through and packets dropped for a full ring since the last call
    /// (the packet socket's statistics; for the hook, only the drops: the thread counts the
    /// records it reads).
    fn stats(&mut self) -> (u64, u32) {
        let socket = match self {
            Source::Hook(hook) => {
                let drops = u32::try_from(hook.dropped_since()).unwrap_or(u32::MAX);
                return (u64::from(drops), drops);
            }
            Source::Socket { socket, .. } => socket,
        };
        let mut stats = [0u32; 3];
        let mut len = size_of_val(&stats) as libc::socklen_t;
        // SAFETY: `stats` is a live struct tpacket_stats_v3 (three u32s) and `len` its size.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc == 0 {
            (u64::from(stats[0]), stats[1])
        } else {
            (0, 0)
        }
    }
}

/// CLOCK_REALTIME minus the run's clock, as measured by reading both back to back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockOffset {
    pub realtime_minus_run_ns: i128,
    /// Half the gap between the two reads of the run's clock around the realtime read: the
    /// offset is right to within this.
    pub uncertainty_ns: u64,
}

impl ClockOffset {
    /// The tightest of several back-to-back readings (a preemption between two reads only
    /// widens that one reading).
    pub fn measure(clock: &Clock) -> ClockOffset {
        ClockOffset::measure_with(clock, 32)
    }

    /// [`ClockOffset::measure`] with `readings` readings (4 take well under a microsecond).
    pub(crate) fn measure_with(clock: &Clock, readings: usize) -> ClockOffset {
        (0..readings)
            .map(|_| {
                let before = clock.now_ns();
                let real = realtime_ns();
                let after = clock.now_ns();
                let gap = after.saturating_sub(before);
                ClockOffset {
                    realtime_minus_run_ns: real - i128::from(before) - i128::from(gap / 2),
                    uncertainty_ns: gap.div_ceil(2),
                }
            })
            .min_by_key(|offset| offset.uncertainty_ns)
            .expect("at least one reading")
    }

    /// A realtime stamp on the run's clock (0 for a stamp before the run started).
    pub fn to_run_ns(&self, realtime_ns: i128) -> u64 {
        u64::try_from((realtime_ns - self.realtime_minus_run_ns).max(0)).unwrap_or(u64::MAX)
    }
}

fn realtime_ns() -> i128 {
    // A clock before 1970 reads as 1970: the offset is then wrong, and the drift says so.
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// How a capture went: what the run's summary and its log report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureReport {
    /// How the segments were captured (`None`: the capture thread panicked). The offset fields
    /// below are 0 but for the packet socket, whose stamps are realtime.
    pub via: Option<Via>,
    /// Segments of the run's connections recorded.
    pub segments: u64,
    /// The larger of the start and end offsets' uncertainties.
    pub offset_uncertainty_ns: u64,
    /// The most the offset moved between two of its measurements (one per packet read): how far
    /// beyond the uncertainty a stamp of a packet that waited across that move to be read can
    /// be off. 0 unless the realtime clock was stepped or slewed apart from the monotonic one.
    pub drift_ns: i64,
    /// The offset at the end minus the offset at the start (the log says it; stamps were not
    /// converted with one offset for the whole run, so this is not their error).
    pub total_drift_ns: i64,
    /// Packets the kernel dropped because the capture's ring was full.
    pub dropped: u32,
    /// Packets the kernel's filter let through to the capture (the run's own port only; other
    /// loopback traffic is not copied).
    pub kernel_packets: u64,
}

/// A running capture. [`Capture::stop`] ends it and drops its channel sender.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<CaptureReport>,
}

impl Capture {
    /// Captures the segments to or from `server_port` on its own thread, recording them for the
    /// connection whose client port `peers` knows.
    pub fn start(
        tap: CaptureTap,
        server_port: u16,
        peers: Arc<Peers>,
        clock: Clock,
        sink: SyncSender<Vec<Event>>,
    ) -> io::Result<Capture> {
        let source = tap.source;
        source.keep_port(server_port)?;
        let stop = Arc::new(AtomicBool::new(false));
        let offset = ClockOffset::measure(&clock);
        let reader = Reader {
            server_port,
            offset,
            rec: Recorder::new(clock, Side::Client, sink).waiting_past(PENDING_EVENTS),
            tagger: Tagger::new(peers),
            block: Vec::new(),
            kernel_packets: 0,
            dropped: 0,
        };
        let stopping = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("capture".into())
            .spawn(move || reader.run(source, &stopping))?;
        Ok(Capture { stop, thread })
    }

    /// Reads what is still queued, then ends; returns how it went.
    pub fn stop(self) -> CaptureReport {
        self.stop.store(true, Ordering::SeqCst);
        let report = self.thread.join().unwrap_or_else(|_| {
            tracing::warn!("the capture thread panicked; its segments are incomplete");
            CaptureReport::default()
        });
        tracing::info!(
            via = report.via.map(Via::name),
            segments = report.segments,
            offset_uncertainty_ns = report.offset_uncertainty_ns,
            drift_ns = report.drift_ns,
            dropped = report.dropped,
            "capture ({:?}): {} segments; packet stamps agree with the run's clock to within {} ns \
             (clock offset uncertainty), plus at most {} ns the offset moved between two \
             measurements; it moved {} ns over the run",
            report.via,
            report.segments,
            report.offset_uncertainty_ns,
            report.drift_ns,
            report.total_drift_ns
        );
        if report.dropped > 0 {
            tracing::warn!(
                "capture: the kernel dropped {} packets for a full ring: the capture thread fell \
                 behind the run (more busy threads than the CPUs could serve: run fewer \
                 connections, or on more CPUs)",
                report.dropped
            );
        }
        report
    }
}

/// Past this many records in one read of the hook's ring the thread reads again at once: it is
/// behind, and waiting would let the ring fill.
const HOOK_BEHIND: usize = 8192;

/// The capture thread's state.
struct Reader {
    server_port: u16,
    /// The packet socket's realtime stamps are converted with this (unused for the hook).
    offset: ClockOffset,
    /// Records for both sides ([`Recorder::record_as`]).
    rec: Recorder,
    tagger: Tagger,
    /// The segments of the batch being read, tagged together (kept for its allocation).
    block: Vec<Captured>,
    /// Packets the kernel kept for the capture, and those of them it dropped for a full ring.
    kernel_packets: u64,
    dropped: u32,
}

impl Reader {
    fn run(mut self, mut source: Source, stop: &AtomicBool) -> CaptureReport {
        let mut flushed = Instant::now();
        let start = self.offset;
        let (mut largest_step, mut widest) = (0i128, start.uncertainty_ns);
        // When a batch last came, or the stop, whichever is later.
        let mut quiet_since = Instant::now();
        let mut stop_seen = false;
        loop {
            // Once stopping, what is still in the ring is read: the last FINs are in it. The
            // quiet time counts from the stop, not from the last batch: a run whose last block
            // came long before its last packets (story 1 sends every 44 ms) still has them in a
            // block the kernel has not handed over yet.
            let stopping = stop.load(Ordering::SeqCst);
            if stopping && !stop_seen {
                stop_seen = true;
                quiet_since = Instant::now();
            }
            let taken = match &mut source {
                Source::Hook(hook) => {
                    let epoch = self.rec.clock().epoch_monotonic_ns();
                    // Stamped on CLOCK_MONOTONIC, the run's own clock.
                    let records = hook.take(|headers, monotonic_ns| {
                        self.parse(headers, monotonic_ns.saturating_sub(epoch))
                    });
                    self.kernel_packets += records as u64;
                    (records > 0).then_some(records < HOOK_BEHIND)
                }
                Source::Socket { ring, .. } if ring.ready() => {
                    // The offset of the moment the block is read, so a step of the realtime
                    // clock since the last block does not move its packets.
                    self.remeasure(&mut largest_step, &mut widest);
                    let offset = self.offset;
                    ring.take_block(|packet| {
                        self.parse(packet.frame, offset.to_run_ns(packet.realtime_ns))
                    });
                    // A block is a batch: the next one may be ready too.
                    Some(false)
                }
                Source::Socket { .. } => None,
            };
            match taken {
                Some(then_wait) => {
                    self.tagger.record_all(&mut self.rec, &self.block);
                    // Handshake segments waiting for their connection's first request go with
                    // the batch that found it announced, in order with the segments after them
                    // (a summary holds a request until segments sent after it are in).
                    self.tagger.resolve_pending(&mut self.rec, false);
                    self.block.clear();
                    self.rec.hand_over_without_waiting();
                    quiet_since = Instant::now();
                    if then_wait {
                        source.wait();
                    }
                }
                None if stopping && quiet_since.elapsed() >= DRAIN_FOR => break,
                None => source.wait(),
            }
            if flushed.elapsed() >= FLUSH_EVERY {
                self.tagger.resolve_pending(&mut self.rec, false);
                self.rec.try_flush();
                self.count_kernel_stats(&mut source);
                flushed = Instant::now();
            }
        }
        self.tagger.resolve_pending(&mut self.rec, true);
        self.rec.flush();
        self.count_kernel_stats(&mut source);
        self.tagger.log_unmatched();
        let mut report = CaptureReport {
            via: Some(source.via()),
            segments: self.tagger.segments(),
            dropped: self.dropped,
            kernel_packets: self.kernel_packets,
            ..CaptureReport::default()
        };
        // The hook's stamps are on the run's clock: no offset to report.
        if let Source::Socket { .. } = source {
            let end = ClockOffset::measure(&self.rec.clock());
            let last_step = end.realtime_minus_run_ns - self.offset.realtime_minus_run_ns;
            largest_step = largest_step.max(last_step.abs());
            let total = end.realtime_minus_run_ns - start.realtime_minus_run_ns;
            report.offset_uncertainty_ns = widest.max(end.uncertainty_ns);
            report.drift_ns = i64::try_from(largest_step).unwrap_or(i64::MAX);
            report.total_drift_ns = i64::try_from(total).unwrap_or(i64::MAX);
        }
        report
    }

    /// Adds the kernel's counts since the last call.
    fn count_kernel_stats(&mut self, source: &mut Source) {
        let (packets, drops) = source.stats();
        self.kernel_packets += packets;
        self.dropped = self.dropped.saturating_add(drops);
    }

    /// Measures the clock offset again (a few readings, well under a microsecond) and keeps
    /// the largest change and the widest uncertainty seen.
    fn remeasure(&mut self, largest_step: &mut i128, widest: &mut u64) {
        let now = ClockOffset::measure_with(&self.rec.clock(), 4);
        let step = now.realtime_minus_run_ns - self.offset.realtime_minus_run_ns;
        *largest_step = (*largest_step).max(step.abs());
        *widest = (*widest).max(now.uncertainty_ns);
        self.offset = now;
    }

    /// Parses a packet of the batch being read, sent at `at_ns` on the run's clock, into
    /// [`Reader::block`].
    fn parse(&mut self, frame: &[u8], at_ns: u64) {
        let Ok(packet) = parse_ethernet(frame) else { return };
        let (side, client_port) = match (packet.src_port, packet.dst_port) {
            (src, dst) if src == self.server_port => (Side::Server, dst),
            (src, dst) if dst == self.server_port => (Side::Client, src),
            _ => return,
        };
        self.block.push(Captured { side, client_port, at_ns, segment: packet.segment });
    }
}

/// A captured segment, not yet given its request: sent by `side` at `at_ns` on the connection
/// from `client_port`.
pub struct Captured {
    pub side: Side,
    pub client_port: u16,
    pub at_ns: u64,
    pub segment: Segment,
}

impl Captured {
    fn is_syn(&self) -> bool {
        self.segment.has(ackscope_shared::event::tcp_flags::SYN)
    }
}

/// Gives captured segments their connection and request, and records them: the lo capture's
/// reader and the emulated link's relay share it.
pub struct Tagger {
    peers: Arc<Peers>,
    /// Each connection seen, by client port, and where its request lookup ended: the segments
    /// of several connections interleave, and each goes on from its own place. Looked up again
    /// on a SYN (a new connection may reuse a closed one's port). At most one per port.
    known: HashMap<u16, (ConnTag, usize)>,
    /// Handshake segments, waiting for their connection's first request id.
    pending: Vec<(Instant, ConnTag, Event)>,
    /// The requests of a run of segments (kept for its allocation).
    requests: Vec<Option<ReqId>>,
    segments: u64,
    unmatched: u64,
}

impl Tagger {
    /// Tags segments of the connections whose client ports `peers` knows.
    pub fn new(peers: Arc<Peers>) -> Tagger {
        Tagger {
            peers,
            known: HashMap::new(),
            pending: Vec::new(),
            requests: Vec::new(),
            segments: 0,
            unmatched: 0,
        }
    }

    /// Records `segment`, sent by `side` at `at_ns` on the connection from `client_port`, for
    /// the request the client announced last before `at_ns` (handshake segments wait for the
    /// connection's first request: [`Tagger::resolve_pending`]). Segments of a connection the
    /// run did not make (another program's, to the server's port) are only counted.
    pub fn record(
        &mut self,
        rec: &mut Recorder,
        side: Side,
        client_port: u16,
        at_ns: u64,
        segment: Segment,
    ) {
        self.record_all(rec, &[Captured { side, client_port, at_ns, segment }]);
    }

    /// [`Tagger::record`] for each of `captured`, in time order, with one lock of a
    /// connection's request list for each run of its segments: a ping-pong sends two packets
    /// a request, and the client announces each request under that lock too.
    pub fn record_all(&mut self, rec: &mut Recorder, captured: &[Captured]) {
        let mut rest = captured;
        while let Some(first) = rest.first() {
            // A SYN may open a new connection from a port a closed one used (loopback reuses
            // ports in TIME_WAIT): it starts a run of its own, and its port is looked up again.
            let same = |c: &&Captured| c.client_port == first.client_port && !c.is_syn();
            let (run, tail) = rest.split_at(1 + rest[1..].iter().take_while(same).count());
            rest = tail;
            if first.is_syn() || !self.known.contains_key(&first.client_port) {
                let Some(tag) = self.peers.lookup(first.client_port) else {
                    self.unmatched += run.len() as u64;
                    continue;
                };
                self.known.insert(first.client_port, (tag, 0));
            }
            let (tag, cursor) = self.known.get_mut(&first.client_port).expect("just inserted");
            // The lock is let go before recording: a full collector may make a record wait,
            // and the client must not wait on that to announce its next request.
            let requests = tag.requests();
            self.requests.clear();
            self.requests.extend(run.iter().map(|c| requests.before_from(c.at_ns, cursor)));
            drop(requests);
            for (c, req) in run.iter().zip(&self.requests) {
                let kind = EventKind::Segment(c.segment.clone());
                match *req {
                    Some(req) => {
                        rec.record_as(c.side, c.at_ns, tag.conn, req, kind);
                        self.segments += 1;
                    }
                    None => {
                        let event = Event {
                            at_ns: c.at_ns,
                            side: c.side,
                            conn: tag.conn,
                            req: ReqId(0),
                            kind,
                        };
                        self.pending.push((Instant::now(), tag.clone(), event));
                    }
                }
            }
        }
    }

    /// Handshake segments belong to the first request on their connection, once announced;
    /// those still without one after [`PENDING_FOR`] (or at the end, `last`) are dropped.
    pub fn resolve_pending(&mut self, rec: &mut Recorder, last: bool) {
        if self.pending.is_empty() {
            return;
        }
        for (since, tag, event) in std::mem::take(&mut self.pending) {
            match tag.request_at(0) {
                Some(req) => {
                    rec.record_as(event.side, event.at_ns, tag.conn, req, event.kind);
                    self.segments += 1;
                }
                None if last || since.elapsed() > PENDING_FOR => {}
                None => self.pending.push((since, tag, event)),
            }
        }
    }

    /// Segments recorded so far.
    pub fn segments(&self) -> u64 {
        self.segments
    }

    pub fn log_unmatched(&self) {
        if self.unmatched > 0 {
            tracing::debug!("capture: {} segments of connections not the run's", self.unmatched);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_offset_is_tight_and_converts_both_ways() {
        let clock = Clock::start();
        let offset = ClockOffset::measure(&clock);
        assert!(offset.uncertainty_ns < 50_000, "{offset:?}");
        let now_run = clock.now_ns();
        let converted = offset.to_run_ns(realtime_ns());
        let after = clock.now_ns();
        let slack = offset.uncertainty_ns + 1;
        assert!(
            converted + slack >= now_run && converted <= after + slack,
            "{now_run} <= {converted} <= {after} (+- {slack})"
        );
        assert_eq!(offset.to_run_ns(0), 0, "before the run: clamped to its start");
    }
}
