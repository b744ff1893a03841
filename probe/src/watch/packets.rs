//! The watched ports' TCP packets, on loopback and every other interface of this network
//! namespace, through packet sockets (CAP_NET_RAW): the same filter and memory-mapped ring as a
//! run's capture (`crate::capture`), bound to no interface instead of lo.
//!
//! - One packet socket per watched port, each with the run capture's classic BPF filter for its
//!   port (IPv4 TCP to or from it, headers only): at most [`MAX_PORTS`], so at most that many
//!   8 MiB rings.
//! - A socket bound to no interface sees a loopback packet twice, as lo sends it and as lo
//!   receives it; the sending copy is skipped, so each packet counts once. On other interfaces
//!   both directions are kept: the host's own packets only show as sent.
//! - The kernel drops packets for a full ring rather than wait: a watch that falls behind
//!   loses packets (counted, [`PortTaps::dropped`]), never slows the watched program.
//! - The filter reads Ethernet framing (lo's frames have it too); interfaces without it
//!   (tunnels, IPv6, which the filter does not take) are not watched here.

use std::io;
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

use crate::capture::{attach_filter, Ring, RingPacket, PACKET_OUTGOING};

/// Ports a watch takes at once: each is a packet socket with its own ring.
pub const MAX_PORTS: usize = ackscope_shared::WatchSpec::MAX_PORTS;

/// `PACKET_STATISTICS` (linux/if_packet.h).
const PACKET_STATISTICS: libc::c_int = 6;
/// How long [`PortTaps::wait`] waits for a block before it returns.
const POLL_TIMEOUT_MS: libc::c_int = 10;

/// Why the watched ports' packets cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("reading packets needs CAP_NET_RAW (opening a packet socket: {0})")]
    Permission(io::Error),
    #[error("{op}: {source}")]
    Io { op: &'static str, source: io::Error },
}

struct PortTap {
    socket: Socket,
    ring: Ring,
}

/// The packet sockets of a watch, one per port.
pub struct PortTaps {
    taps: Vec<PortTap>,
    lo_ifindex: i32,
    /// Packets the filters let through, and those the kernel dropped for a full ring, summed
    /// over the taps since the watch began.
    kept: u64,
    dropped: u64,
}

impl PortTaps {
    /// Opens one packet socket per port. Fails with [`TapError::Permission`] without
    /// CAP_NET_RAW.
    pub fn open(ports: &[u16]) -> Result<PortTaps, TapError> {
        let io = |op| move |source| TapError::Io { op, source };
        if ports.len() > MAX_PORTS {
            // `WatchSpec::validate` refuses such a watch before it gets here.
            return Err(io("open the packet sockets")(io::Error::other(format!(
                "at most {MAX_PORTS} ports at once"
            ))));
        }
        let mut taps = Vec::with_capacity(ports.len());
        for &port in ports {
            // No protocol yet: the socket takes nothing until it is bound, after its filter.
            let socket = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(0))).map_err(
                |e| match e.raw_os_error() {
                    Some(libc::EPERM | libc::EACCES) => TapError::Permission(e),
                    _ => TapError::Io { op: "AF_PACKET socket", source: e },
                },
            )?;
            let fd = socket.as_raw_fd();
            attach_filter(fd, port).map_err(io("SO_ATTACH_FILTER"))?;
            let ring = Ring::map(fd).map_err(io("PACKET_RX_RING (TPACKET_V3)"))?;
            bind_everywhere(fd).map_err(io("bind the packet socket"))?;
            taps.push(PortTap { socket, ring });
        }
        // SAFETY: a NUL-terminated name.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        Ok(PortTaps { taps, lo_ifindex: i32::try_from(lo).unwrap_or(0), kept: 0, dropped: 0 })
    }

    /// Calls `each` with every packet the kernel has handed over since the last call: its
    /// frame and its CLOCK_REALTIME stamp. Returns how many.
    pub fn take(&mut self, mut each: impl FnMut(&[u8], i128)) -> usize {
        let lo = self.lo_ifindex;
        let mut taken = 0;
        for tap in &mut self.taps {
            while let Some(_count) = tap.ring.take_block(|packet: RingPacket<'_>| {
                if packet.ifindex == lo && packet.pkttype == PACKET_OUTGOING {
                    return;
                }
                taken += 1;
                each(packet.frame, packet.realtime_ns);
            }) {}
        }
        taken
    }

    /// Waits up to 10 ms for a block on any tap.
    pub fn wait(&self) {
        let mut polls: Vec<libc::pollfd> = self
            .taps
            .iter()
            .map(|tap| libc::pollfd {
                fd: tap.socket.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            })
            .collect();
        // SAFETY: live pollfds, and their number passed.
        unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, POLL_TIMEOUT_MS) };
    }

    /// Packets the filters kept (loopback's counted twice, as sent and as received), and those
    /// of them dropped for a full ring, since the watch began.
    pub fn kernel_counts(&mut self) -> (u64, u64) {
        for tap in &self.taps {
            let mut stats = [0u32; 3];
            let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
            // SAFETY: `stats` is a live struct tpacket_stats_v3 (three u32s) and `len` its size.
            let rc = unsafe {
                libc::getsockopt(
                    tap.socket.as_raw_fd(),
                    libc::SOL_PACKET,
                    PACKET_STATISTICS,
                    stats.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            if rc == 0 {
                // Each read resets the kernel's counts.
                self.kept += u64::from(stats[0]);
                self.dropped += u64::from(stats[1]);
            }
        }
        (self.kept, self.dropped)
    }
}

/// Binds a packet socket to every interface (index 0), for every protocol (its filter chooses).
fn bind_everywhere(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value of it.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = 0;
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
