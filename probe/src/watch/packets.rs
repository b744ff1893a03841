//! The watched ports' TCP packets, on loopback and every other interface of this network
//! namespace: lo's ingress hook (root) or packet sockets (CAP_NET_RAW), with the run capture's
//! filters (one filter takes every watched port) and rings (`crate::capture`).
//!
//! What the kernel pays for a tap is paid in the watched programs' own system calls: every
//! packet a tap takes is filtered and copied as the program sends or receives it. So each
//! packet is handed to one tap, once:
//! - **lo**: lo hands every packet to its taps twice, as it sends it and as it receives it,
//!   and both copies are the same packet. As root, an eBPF program on lo's ingress hook (the
//!   run capture's, `capture::hook`) sees each once, as lo receives it, and copies its headers
//!   into a ring buffer with a CLOCK_MONOTONIC stamp, for less than a packet socket's tap
//!   costs. Otherwise (or with `ACKSCOPE_CAPTURE_VIA=socket`) a packet socket bound to lo
//!   ignores what lo sends (`PACKET_IGNORE_OUTGOING`, Linux 4.20), which saves the kernel a
//!   clone, a filter run and a copy a packet; on an older kernel the sent copy is taken and
//!   skipped here. docs/BENCHMARKS-LOG.md (`bench watch`) has what each costs.
//! - **every other interface** that is up and has Ethernet framing: a packet socket of its
//!   own, bound to it, keeping both directions (the host's own packets there show only as
//!   sent). A socket bound to one interface is never handed another's packets, so lo's traffic
//!   costs these nothing. The interfaces are listed again every second
//!   ([`PortTaps::refresh_interfaces`]): one that comes up gets a socket, one that goes away
//!   loses it. At most [`MAX_INTERFACES`] are taken, each with a 2 MiB ring (lo's is 8 MiB).
//! - The kernel drops packets for a full ring rather than wait: a watch that falls behind
//!   loses packets (counted, [`PortTaps::kernel_counts`]), never slows the watched program.
//! - The filters read Ethernet framing (lo's frames have it too); interfaces without it
//!   (tunnels), and IPv6, which the filters do not take, are not watched here.

use std::collections::HashSet;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::capture::{
    attach_ports_filter, set_int, Hook, Ring, RingPacket, Via, CAPTURE_VIA, MAX_FILTER_PORTS,
    MAX_HOOK_PORTS, PACKET_OUTGOING,
};

/// Ports a watch takes at once: every tap's filter compares with each of them.
pub const MAX_PORTS: usize = ackscope_shared::WatchSpec::MAX_PORTS;
const _: () = assert!(MAX_PORTS <= MAX_FILTER_PORTS && MAX_PORTS <= MAX_HOOK_PORTS);

/// Interfaces besides lo taken at once: with their 2 MiB rings, 128 MiB at most. Past it an
/// interface is left out, with a warning.
pub const MAX_INTERFACES: usize = 64;
/// The blocks of 128 KiB of an interface's ring besides lo's (lo's has 64, 8 MiB): 2 MiB, room
/// for about 9,000 packets, or 64 ms of a slow interface (a block is handed over 4 ms after its
/// first packet) while the watch is off the CPU.
const INTERFACE_RING_BLOCKS: u32 = 16;
/// How often the interfaces are listed again for [`PortTaps::refresh_interfaces`].
const LIST_INTERFACES_EVERY: Duration = Duration::from_secs(1);

/// `PACKET_STATISTICS` (linux/if_packet.h).
const PACKET_STATISTICS: libc::c_int = 6;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, since 4.20): the tap skips packets the host
/// sends.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `ARPHRD_ETHER` (linux/if_arp.h): an interface whose frames have an Ethernet header.
const ARPHRD_ETHER: u16 = 1;
/// How long [`PortTaps::wait`] waits for a block before it returns, and the longest a record
/// of lo's ingress hook waits to be read.
const POLL_TIMEOUT_MS: libc::c_int = 10;

/// Why the watched ports' packets cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("reading packets needs CAP_NET_RAW (opening a packet socket: {0})")]
    Permission(io::Error),
    #[error("{op}: {source}")]
    Io { op: &'static str, source: io::Error },
}

/// A packet socket bound to one interface, and its ring.
struct Tap {
    ifindex: i32,
    socket: Socket,
    ring: Ring,
    /// Whether the kernel hands it packets the host sends: on lo only without
    /// `PACKET_IGNORE_OUTGOING`, and then they are skipped.
    skip_outgoing: bool,
}

/// When a packet was taken, on the clock of its tap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// A packet socket's: CLOCK_REALTIME, nanoseconds.
    Realtime(i128),
    /// lo's ingress hook's: CLOCK_MONOTONIC, nanoseconds, the watch's own clock.
    Monotonic(u64),
}

/// How lo's packets are taken.
enum Lo {
    /// An eBPF program on lo's ingress hook (root): it sees each packet once, as lo receives
    /// it, and copies its headers into a ring buffer, read after each wait.
    Hook(Hook),
    Socket(Tap),
}

/// The taps of a watch: lo's, and one packet socket for each other interface.
pub struct PortTaps {
    ports: Vec<u16>,
    lo: Lo,
    lo_ifindex: i32,
    /// The other interfaces' taps.
    others: Vec<Tap>,
    /// When the interfaces were last listed, and whether the cap was said.
    listed: Instant,
    capped_said: bool,
    polls: Vec<libc::pollfd>,
    /// Packets the taps kept, and those the kernel dropped for a full ring, summed over the
    /// taps since the watch began (closed taps' included).
    kept: u64,
    dropped: u64,
}

impl PortTaps {
    /// Opens lo's tap (its ingress hook where this process may attach it, else a packet
    /// socket; [`CAPTURE_VIA`] chooses one, as for a run's capture) and one packet socket for
    /// each other interface up. Fails with [`TapError::Permission`] without CAP_NET_RAW.
    pub fn open(ports: &[u16]) -> Result<PortTaps, TapError> {
        PortTaps::open_choosing(ports, std::env::var(CAPTURE_VIA).ok().as_deref())
    }

    /// [`PortTaps::open`], lo's way in chosen by `via` (as [`CAPTURE_VIA`] says it).
    fn open_choosing(ports: &[u16], via: Option<&str>) -> Result<PortTaps, TapError> {
        if ports.len() > MAX_PORTS {
            // `WatchSpec::validate` refuses such a watch before it gets here.
            return Err(TapError::Io {
                op: "open the packet sockets",
                source: io::Error::other(format!("at most {MAX_PORTS} ports at once")),
            });
        }
        // SAFETY: a NUL-terminated name.
        let lo_ifindex = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if lo_ifindex == 0 {
            return Err(TapError::Io {
                op: "find the loopback interface (lo)",
                source: io::Error::last_os_error(),
            });
        }
        let lo_ifindex = i32::try_from(lo_ifindex).unwrap_or(i32::MAX);
        let lo = open_lo(lo_ifindex, ports, via)?;
        let mut taps = PortTaps {
            ports: ports.to_vec(),
            lo,
            lo_ifindex,
            others: Vec::new(),
            listed: Instant::now(),
            capped_said: false,
            polls: Vec::new(),
            kept: 0,
            dropped: 0,
        };
        taps.list_interfaces();
        Ok(taps)
    }

    /// How lo's packets are taken: its ingress hook, or a packet socket.
    pub fn lo_via(&self) -> Via {
        match self.lo {
            Lo::Hook(_) => Via::IngressHook,
            Lo::Socket(_) => Via::PacketSocket,
        }
    }

    /// The interfaces taken besides lo, by index.
    pub fn interfaces(&self) -> Vec<i32> {
        self.others.iter().map(|tap| tap.ifindex).collect()
    }

    /// Whether lo's tap takes each packet once, as lo receives it (its ingress hook, or a
    /// packet socket with `PACKET_IGNORE_OUTGOING`), rather than twice, skipping the sent copy.
    pub fn lo_takes_each_packet_once(&self) -> bool {
        match &self.lo {
            Lo::Hook(_) => true,
            Lo::Socket(tap) => !tap.skip_outgoing,
        }
    }

    /// Takes the packets of `ports` from now on (at most [`MAX_PORTS`]; a watched command's
    /// ports as they appear): every tap's filter is replaced, which the kernel does at once,
    /// and lo's hook is told.
    pub fn set_ports(&mut self, ports: &[u16]) -> io::Result<()> {
        match &self.lo {
            Lo::Hook(hook) => hook.keep_ports(ports)?,
            Lo::Socket(tap) => attach_ports_filter(tap.socket.as_raw_fd(), ports)?,
        }
        for tap in &self.others {
            attach_ports_filter(tap.socket.as_raw_fd(), ports)?;
        }
        self.ports = ports.to_vec();
        Ok(())
    }

    /// Lists the interfaces again if a second has passed since the last time: a tap for each
    /// new one up, none for one gone or down.
    pub fn refresh_interfaces(&mut self) {
        if self.listed.elapsed() >= LIST_INTERFACES_EVERY {
            self.list_interfaces();
        }
    }

    fn list_interfaces(&mut self) {
        self.listed = Instant::now();
        let interfaces = match ethernet_interfaces_up() {
            Ok(interfaces) => interfaces,
            Err(e) => {
                tracing::warn!("watch: listing the interfaces failed ({e}); trying again");
                return;
            }
        };
        let up: HashSet<i32> = interfaces.iter().copied().collect();
        let mut closed = Vec::new();
        self.others.retain(|tap| {
            let keep = up.contains(&tap.ifindex);
            if !keep {
                closed.push(tap.counts());
            }
            keep
        });
        for (kept, dropped) in closed {
            (self.kept, self.dropped) = (self.kept + kept, self.dropped + dropped);
        }
        for ifindex in interfaces {
            if ifindex == self.lo_ifindex || self.others.iter().any(|t| t.ifindex == ifindex) {
                continue;
            }
            if self.others.len() >= MAX_INTERFACES {
                if !self.capped_said {
                    self.capped_said = true;
                    tracing::warn!(
                        "watch: more than {MAX_INTERFACES} interfaces are up: the packets of \
                         those past them are not taken (lo's always are)"
                    );
                }
                break;
            }
            match Tap::open(ifindex, &self.ports, Some(INTERFACE_RING_BLOCKS), false) {
                Ok(tap) => self.others.push(tap),
                // Gone between the listing and the bind, or refused: tried again next time.
                Err(e) => tracing::debug!("watch: no tap on interface {ifindex}: {e}"),
            }
        }
    }

    /// Calls `each` with every packet the kernel has handed over since the last call: its
    /// frame (its headers, at least) and its stamp. Returns how many.
    pub fn take(&mut self, mut each: impl FnMut(&[u8], Stamp)) -> usize {
        let mut taken = 0;
        let sockets = match &mut self.lo {
            Lo::Hook(hook) => {
                let records = hook.take(|headers, monotonic_ns| {
                    each(headers, Stamp::Monotonic(monotonic_ns));
                });
                self.kept += records as u64;
                taken += records;
                None
            }
            Lo::Socket(tap) => Some(tap),
        };
        for tap in sockets.into_iter().chain(&mut self.others) {
            let skip_outgoing = tap.skip_outgoing;
            while let Some(_count) = tap.ring.take_block(|packet: RingPacket<'_>| {
                // lo's sent copy, on a kernel that cannot leave it out: its received copy
                // follows.
                if skip_outgoing && packet.pkttype == PACKET_OUTGOING {
                    return;
                }
                taken += 1;
                each(packet.frame, Stamp::Realtime(packet.realtime_ns));
            }) {}
        }
        taken
    }

    /// Waits up to 10 ms for a block of a packet socket. The records of lo's ingress hook wake
    /// no one: they are read after the wait, 10 ms at the latest after they were written (its
    /// ring holds 400 ms of a full-speed ping-pong). A shorter wait costs the watched programs
    /// more: each wake-up of the watch takes a CPU from them.
    pub fn wait(&mut self) {
        self.polls.clear();
        let lo_socket = match &self.lo {
            Lo::Hook(_) => None,
            Lo::Socket(tap) => Some(tap),
        };
        for tap in lo_socket.into_iter().chain(&self.others) {
            let fd = tap.socket.as_raw_fd();
            self.polls.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        // SAFETY: live pollfds (none: a sleep), and their number passed.
        let ready = unsafe {
            libc::poll(self.polls.as_mut_ptr(), self.polls.len() as libc::nfds_t, POLL_TIMEOUT_MS)
        };
        if ready <= 0 {
            return;
        }
        // An interface that went down leaves an error on its socket (ENETDOWN), which poll
        // reports until it is read: read, so the next poll waits again.
        for poll in self.polls.iter().filter(|p| p.revents & libc::POLLERR != 0) {
            let mut error: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: `error` is a live c_int and `len` its size.
            unsafe {
                libc::getsockopt(
                    poll.fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    std::ptr::from_mut(&mut error).cast(),
                    &mut len,
                )
            };
        }
    }

    /// Packets the taps kept (on a kernel without `PACKET_IGNORE_OUTGOING`, lo's counted
    /// twice, as sent and as received), and those of them dropped for a full ring, since the
    /// watch began.
    pub fn kernel_counts(&mut self) -> (u64, u64) {
        let lo_socket = match &mut self.lo {
            Lo::Hook(hook) => {
                // The records read are counted as they are taken.
                let dropped = hook.dropped_since();
                (self.kept, self.dropped) = (self.kept + dropped, self.dropped + dropped);
                None
            }
            Lo::Socket(tap) => Some(&*tap),
        };
        for tap in lo_socket.into_iter().chain(&self.others) {
            let (kept, dropped) = tap.counts();
            (self.kept, self.dropped) = (self.kept + kept, self.dropped + dropped);
        }
        (self.kept, self.dropped)
    }
}

/// lo's tap: its ingress hook where this process may attach it (root, Linux 6.6), else a
/// packet socket ignoring what lo sends; [`CAPTURE_VIA`] chooses one.
fn open_lo(lo_ifindex: i32, ports: &[u16], via: Option<&str>) -> Result<Lo, TapError> {
    let socket = || Tap::open(lo_ifindex, ports, None, true).map(Lo::Socket);
    let hook = || {
        let hook = Hook::attach()?;
        hook.keep_ports(ports)?;
        Ok::<_, io::Error>(Lo::Hook(hook))
    };
    match via {
        None | Some("") => {}
        Some("socket") => return socket(),
        Some("hook") => {
            return hook().map_err(|source| TapError::Io {
                op: "lo's ingress hook (eBPF; needs root and Linux 6.6 or later)",
                source,
            })
        }
        Some(other) => {
            return Err(TapError::Io {
                op: CAPTURE_VIA,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{other:?} is not a way to take lo's packets: use `hook` (lo's ingress \
                         hook), `socket` (a packet socket), or leave it unset for the first that \
                         works"
                    ),
                ),
            })
        }
    }
    hook().or_else(|e| {
        // Not root, a kernel before 6.6, or BPF turned off: the packet socket does the same,
        // at a higher cost to the watched programs.
        tracing::debug!("watch: lo's ingress hook is not available ({e}); a packet socket");
        socket()
    })
}

impl Tap {
    /// A packet socket on interface `ifindex` that takes the TCP packets of `ports`, with a
    /// ring of `blocks` (the default 8 MiB for `None`), ignoring what the host sends when
    /// `ignore_outgoing` and the kernel can.
    fn open(
        ifindex: i32,
        ports: &[u16],
        blocks: Option<u32>,
        ignore_outgoing: bool,
    ) -> Result<Tap, TapError> {
        let io = |op| move |source| TapError::Io { op, source };
        // No protocol yet: the socket takes nothing until it is bound, after its filter.
        let refused = |e: io::Error| match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => TapError::Permission(e),
            _ => TapError::Io { op: "AF_PACKET socket", source: e },
        };
        let socket = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(0)));
        let socket = socket.map_err(refused)?;
        let fd = socket.as_raw_fd();
        attach_ports_filter(fd, ports).map_err(io("SO_ATTACH_FILTER"))?;
        let ring = match blocks {
            None => Ring::map(fd),
            Some(blocks) => Ring::map_blocks(fd, blocks),
        }
        .map_err(io("PACKET_RX_RING (TPACKET_V3)"))?;
        // Kernels before 4.20 refuse the option: the sent copies come, and are skipped.
        let ignoring =
            ignore_outgoing && set_int(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1).is_ok();
        bind_to(fd, ifindex).map_err(io("bind the packet socket to its interface"))?;
        Ok(Tap { ifindex, socket, ring, skip_outgoing: ignore_outgoing && !ignoring })
    }

    /// Packets kept and dropped since the last call (each read resets the kernel's counts).
    fn counts(&self) -> (u64, u64) {
        let mut stats = [0u32; 3];
        let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
        // SAFETY: `stats` is a live struct tpacket_stats_v3 (three u32s) and `len` its size.
        let rc = unsafe {
            libc::getsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc == 0 {
            (u64::from(stats[0]), u64::from(stats[1]))
        } else {
            (0, 0)
        }
    }
}

/// The indexes of this namespace's interfaces that are up, not loopback, with Ethernet framing.
fn ethernet_interfaces_up() -> io::Result<Vec<i32>> {
    let mut first: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated into `first`, freed below.
    if unsafe { libc::getifaddrs(&mut first) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut at = first;
    while !at.is_null() {
        // SAFETY: `at` is an entry of the list getifaddrs made, which lives until freed.
        let entry = unsafe { &*at };
        at = entry.ifa_next;
        // Each interface has one AF_PACKET entry, whose address is its link's.
        let address = entry.ifa_addr;
        // SAFETY: a non-null address of getifaddrs' list starts with its family.
        if address.is_null() || i32::from(unsafe { (*address).sa_family }) != libc::AF_PACKET {
            continue;
        }
        // SAFETY: an AF_PACKET entry's address is a sockaddr_ll (getifaddrs(3)).
        let link = unsafe { &*address.cast::<libc::sockaddr_ll>() };
        let flags = entry.ifa_flags as libc::c_int;
        let up = flags & libc::IFF_UP != 0 && flags & libc::IFF_LOOPBACK == 0;
        if up && link.sll_hatype == ARPHRD_ETHER && !found.contains(&link.sll_ifindex) {
            found.push(link.sll_ifindex);
        }
    }
    // SAFETY: the list getifaddrs made, freed once, not used after.
    unsafe { libc::freeifaddrs(first) };
    Ok(found)
}

/// Binds a packet socket to interface `ifindex`, for every protocol (its filter chooses).
fn bind_to(fd: libc::c_int, ifindex: i32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value of it.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = ifindex;
    // SAFETY: `addr` is a live sockaddr_ll and the length passed is its size.
    let rc = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fs::File;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::process::Command;
    use std::thread;

    use ackscope_shared::event::tcp_flags;
    use ackscope_shared::packet::parse_ethernet;

    use super::*;

    fn require_root(what: &str) {
        // SAFETY: geteuid() cannot fail and has no side effects.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(root, "{what} needs root: run this test as root (cargo xtask test does)");
    }

    /// What the taps took of one direction of a connection: its data bytes, SYNs and FINs.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Direction {
        bytes: u64,
        syns: u32,
        fins: u32,
    }

    /// Takes packets until `done` says all came (or 10 s passed), counting each direction's
    /// by its sender.
    fn take_until(
        taps: &mut PortTaps,
        done: impl Fn(&HashMap<SocketAddr, Direction>) -> bool,
    ) -> HashMap<SocketAddr, Direction> {
        let mut seen: HashMap<SocketAddr, Direction> = HashMap::new();
        let count = |seen: &mut HashMap<SocketAddr, Direction>, frame: &[u8]| {
            let packet = parse_ethernet(frame).expect("the headers of a TCP segment");
            let from = seen.entry(SocketAddr::new(packet.src, packet.src_port)).or_default();
            from.bytes += u64::from(packet.segment.len);
            from.syns += u32::from(packet.segment.has(tcp_flags::SYN));
            from.fins += u32::from(packet.segment.has(tcp_flags::FIN));
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            taps.take(|frame, _| count(&mut seen, frame));
            if done(&seen) {
                break;
            }
            assert!(Instant::now() < deadline, "not every packet came in 10 s: {seen:?}");
            taps.wait();
        }
        // Whatever the kernel has handed over besides: a second copy of the last packets
        // would be there (on lo the sent copy comes before the received one).
        taps.take(|frame, _| count(&mut seen, frame));
        seen
    }

    /// `exchanges` requests of 100 bytes answered with 300, then both ends closed in turn:
    /// the client's data and FIN, the server's, then the client's last ACK.
    fn converse(client: &mut TcpStream, server: &mut TcpStream, exchanges: u64) {
        client.set_nodelay(true).unwrap();
        server.set_nodelay(true).unwrap();
        for _ in 0..exchanges {
            client.write_all(&[1; 100]).unwrap();
            server.read_exact(&mut [0; 100]).unwrap();
            server.write_all(&[2; 300]).unwrap();
            client.read_exact(&mut [0; 300]).unwrap();
        }
        client.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(server.read(&mut [0; 1]).unwrap(), 0);
        server.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(client.read(&mut [0; 1]).unwrap(), 0);
    }

    /// Each side's data, SYN and FIN, once each: what both directions of `exchanges` carry.
    fn both_once(exchanges: u64) -> [Direction; 2] {
        [
            Direction { bytes: 100 * exchanges, syns: 1, fins: 1 },
            Direction { bytes: 300 * exchanges, syns: 1, fins: 1 },
        ]
    }

    /// lo hands its taps every packet twice (as sent, as received): the watch takes each once,
    /// through lo's ingress hook and through a packet socket alike, on each of its ports and
    /// on no other, and the kernel kept no copy it did not hand over.
    #[test]
    #[ignore = "needs root (packet sockets, lo's ingress hook): cargo xtask test runs it as root"]
    fn a_watch_takes_each_segment_on_lo_once() {
        require_root("reading lo's packets");
        for via in ["socket", "hook"] {
            let listen = || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            let (first, second, unwatched) = (listen(), listen(), listen());
            let ports: Vec<u16> =
                [&first, &second].iter().map(|l| l.local_addr().unwrap().port()).collect();
            let mut taps = PortTaps::open_choosing(&ports, Some(via)).expect("the taps");
            assert!(taps.lo_takes_each_packet_once(), "{via}: Linux 4.20 or later");
            let exchanges = 200;
            let mut ends = Vec::new();
            for listener in [&first, &second, &unwatched] {
                let at = listener.local_addr().unwrap();
                let mut client = TcpStream::connect(at).unwrap();
                let (mut server, client_at) = listener.accept().unwrap();
                converse(&mut client, &mut server, exchanges);
                ends.push((client_at, at));
            }
            let watched = &ends[..2];
            let seen = take_until(&mut taps, |seen| {
                watched.iter().all(|(client, server)| {
                    [client, server].iter().all(|end| seen.get(end).is_some_and(|s| s.fins > 0))
                })
            });
            let [sent, answered] = both_once(exchanges);
            for (client_at, at) in watched {
                assert_eq!(seen.get(client_at), Some(&sent), "{via}: the client's, once each");
                assert_eq!(seen.get(at), Some(&answered), "{via}: the server's, once each");
            }
            assert_eq!(seen.len(), 4, "{via}: the watched ports' alone: {seen:?}");
            let (kept, dropped) = taps.kernel_counts();
            assert_eq!(dropped, 0, "{via}");
            // Each exchange is a request and an answer; the handshakes and the closes add a
            // few segments, their ACKs mostly carried by the next one.
            let segments = 2 * 2 * exchanges;
            assert!((segments..segments + 20).contains(&kept), "{via}: {kept} kept in the kernel");
        }
    }

    /// Runs `command` (an `ip` command line) in the calling thread's network namespace.
    fn ip(command: &str) {
        let out = Command::new("ip").args(command.split(' ')).output().expect("run ip");
        assert!(out.status.success(), "ip {command}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A network namespace of its own for the calling thread; the namespace's descriptor.
    fn new_namespace() -> File {
        // SAFETY: unshare(CLONE_NEWNET) changes only the calling thread's network namespace.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare(CLONE_NEWNET)");
        ip("link set lo up");
        File::open("/proc/thread-self/ns/net").expect("the namespace's descriptor")
    }

    /// An interface other than lo: a veth pair between two network namespaces, made for the
    /// test (nothing of the host's is touched). The watch's namespace comes up with the pair
    /// down; once it is up the next listing of the interfaces gives it a tap, which takes both
    /// directions of a connection to the other namespace, each segment once.
    #[test]
    #[ignore = "needs root (network namespaces, packet sockets): cargo xtask test runs it as root"]
    fn an_interface_that_comes_up_is_tapped_both_ways() {
        require_root("making network namespaces");
        // The server's namespace, kept by its descriptor.
        let server_ns = thread::spawn(new_namespace).join().unwrap();
        let server_ns_path = format!("/proc/{}/fd/{}", std::process::id(), server_ns.as_raw_fd());
        let enter = |ns: &File| {
            // SAFETY: setns with a network namespace's descriptor we own changes only the
            // calling thread's network namespace.
            assert_eq!(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
        };
        thread::scope(|scope| {
            scope
                .spawn(|| {
                    let _watch_ns = new_namespace();
                    ip(&format!("link add ackscope-va type veth peer name ackscope-vb netns {server_ns_path}"));
                    ip("addr add 10.203.0.1/24 dev ackscope-va");
                    // The server's end, in its namespace, from a thread of its own.
                    let listener = thread::scope(|inner| {
                        inner
                            .spawn(|| {
                                enter(&server_ns);
                                ip("addr add 10.203.0.2/24 dev ackscope-vb");
                                ip("link set ackscope-vb up");
                                TcpListener::bind((Ipv4Addr::new(10, 203, 0, 2), 0)).unwrap()
                            })
                            .join()
                            .unwrap()
                    });
                    let at = listener.local_addr().unwrap();
                    let mut taps = PortTaps::open(&[at.port()]).expect("the taps");
                    assert_eq!(taps.interfaces(), Vec::<i32>::new(), "the veth is down");
                    ip("link set ackscope-va up");
                    // SAFETY: a NUL-terminated name.
                    let va = unsafe { libc::if_nametoindex(c"ackscope-va".as_ptr()) } as i32;
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while !taps.interfaces().contains(&va) {
                        assert!(Instant::now() < deadline, "the veth up got no tap in 10 s");
                        taps.wait();
                        taps.refresh_interfaces();
                    }
                    let mut client = TcpStream::connect(at).unwrap();
                    let (mut server, client_at) = listener.accept().unwrap();
                    let exchanges = 50;
                    converse(&mut client, &mut server, exchanges);
                    let [sent, answered] = both_once(exchanges);
                    let seen = take_until(&mut taps, |seen| {
                        seen.get(&at).is_some_and(|s| s.fins > 0)
                            && seen.get(&client_at).is_some_and(|c| c.fins > 0)
                    });
                    // Sent by this namespace (outgoing on the veth) and received, once each.
                    assert_eq!(seen.get(&client_at), Some(&sent), "the client's");
                    assert_eq!(seen.get(&at), Some(&answered), "the server's");
                    assert_eq!(taps.kernel_counts().1, 0);
                })
                .join()
                .unwrap();
        });
    }
}
