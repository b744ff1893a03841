//! Every TCP socket of this network namespace as the kernel's socket diagnostics report it
//! (`NETLINK_SOCK_DIAG`, what `ss -ti` reads): its addresses, state, owner, congestion control
//! and `tcp_info`, for any process's sockets and without privileges.
//!
//! `getsockopt(TCP_INFO)` ([`crate::net::tcp_info::sample`]) needs a descriptor of the socket,
//! which only its owner has. sock_diag answers about every socket of the namespace, and its
//! `tcp_info` is the same struct, decoded by the same [`decode`] into a [`TcpInfoSample`].
//!
//! The protocol (linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h): one dump request per
//! address family, answered by datagrams of netlink messages, one message per socket (an
//! `inet_diag_msg`, then attributes), until an `NLMSG_DONE`. The messages are read by offset in
//! the host's byte order (ports and addresses in network order), and every length the kernel
//! gives is checked against what holds it before it is used:
//!
//! - a message whose length runs past its datagram, or is shorter than its own header, ends the
//!   listing with an error: the rest of the datagram cannot be found;
//! - a socket's message too short for its fixed part, or with an attribute running past the
//!   message's end or shorter than its own header, is skipped and counted
//!   ([`Listing::malformed`]).
//!
//! A dump walks the kernel's whole table of connected sockets (262,144 buckets on a host of
//! 24 GB, `net.ipv4.tcp_ehash_entries`), however few sockets there are: 1.8 ms of CPU a
//! dump. [`on_ports`] has the kernel filter the sockets it reports (`INET_DIAG_REQ_BYTECODE`),
//! which cuts the reading, not the walk; [`exact`] asks for sockets by their addresses, one hash
//! lookup each, without a dump (what a watch that follows its connections asks every 100 ms).
//! At most a given number of sockets are kept from a dump ([`Listing::left_out`] counts the
//! rest).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use ackscope_shared::tcp_info::decode;
use ackscope_shared::TcpInfoSample;

use crate::net::context;

/// The most sockets a caller should keep from one listing: 16,384 sockets with their
/// `tcp_info` are about 6 MB (a [`TcpSocket`] is 328 bytes and its congestion name).
pub const MAX_SOCKETS: usize = 16_384;

// linux/netlink.h: the message header and the control messages.
const NLMSG_HEADER_BYTES: usize = 16;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_ROOT | NLM_F_MATCH`: every socket, not one.
const NLM_F_DUMP: u16 = 0x300;
/// linux/sock_diag.h: the request, and each socket's message in the answer.
const SOCK_DIAG_BY_FAMILY: u16 = 20;

// linux/inet_diag.h.
/// `struct inet_diag_req_v2`: family, protocol, extensions, a pad byte, the states, and an
/// `inet_diag_sockid` (48 bytes) a dump leaves zero.
const DIAG_REQUEST_BYTES: usize = 56;
const REQUEST_BYTES: usize = NLMSG_HEADER_BYTES + DIAG_REQUEST_BYTES;
/// `struct inet_diag_msg`: family, state, timer, retransmits, the `inet_diag_sockid`, then
/// expires, rqueue, wqueue, uid, inode. Its attributes follow (72 is already 4-aligned).
const DIAG_MSG_BYTES: usize = 72;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CONG: u16 = 4;
/// The extensions asked for, as the request's bit mask (`1 << (attribute - 1)`).
const EXTENSIONS: u8 = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1));
/// The states asked for, one bit each: ESTABLISHED (1) to NEW_SYN_RECV (12). Not
/// BOUND_INACTIVE (13, Linux 6.7+): a socket only bound, neither listening nor connected,
/// carries no traffic to watch.
const STATES: u32 = ((1 << 13) - 1) & !1;
/// [`STATES`] less TIME_WAIT (6) and NEW_SYN_RECV (12): the sockets a watch samples, which
/// have a `tcp_info` (those two have none) and take room among the ones kept.
const LIVE_STATES: u32 = STATES & !(1 << 6) & !(1 << 12);
/// `INET_DIAG_REQ_BYTECODE`: the request's attribute that holds a filter the kernel runs on
/// each socket before it reports it.
const INET_DIAG_REQ_BYTECODE: u16 = 1;
/// Filter operations (linux/inet_diag.h): jump, source port equal, destination port equal.
const BC_JMP: u8 = 1;
const BC_S_EQ: u8 = 11;
const BC_D_EQ: u8 = 12;

/// An attribute's header (`struct rtattr`): its length including the header, its type.
const ATTR_HEADER_BYTES: usize = 4;
/// The type bits of an attribute's type (`NLA_TYPE_MASK`): the top two are flags.
const ATTR_TYPE_MASK: u16 = 0x3fff;
/// `TCP_CA_NAME_MAX`: the longest congestion-control name, with its NUL.
const CONGESTION_NAME_MAX: usize = 16;

/// Room for any datagram of a dump: the kernel fills them up to the reader's largest receive
/// buffer, at most 32 KiB (`netlink_recvmsg`), so a larger one means a changed kernel, reported
/// as such rather than read cut short.
const RECEIVE_BYTES: usize = 32 * 1024;
/// The kernel answers a dump at once; a listing that stalls this long is given up.
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A TCP socket's state (include/net/tcp_states.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpState {
    Established,
    SynSent,
    SynRecv,
    FinWait1,
    FinWait2,
    TimeWait,
    Close,
    CloseWait,
    LastAck,
    Listen,
    Closing,
    /// A connection request in a listener's queue, its handshake not yet complete.
    NewSynRecv,
    /// A number this code does not name (a newer kernel's).
    Other(u8),
}

impl TcpState {
    /// The state for the kernel's number (`TCP_ESTABLISHED` is 1).
    pub fn from_kernel(state: u8) -> TcpState {
        match state {
            1 => TcpState::Established,
            2 => TcpState::SynSent,
            3 => TcpState::SynRecv,
            4 => TcpState::FinWait1,
            5 => TcpState::FinWait2,
            6 => TcpState::TimeWait,
            7 => TcpState::Close,
            8 => TcpState::CloseWait,
            9 => TcpState::LastAck,
            10 => TcpState::Listen,
            11 => TcpState::Closing,
            12 => TcpState::NewSynRecv,
            other => TcpState::Other(other),
        }
    }
}

/// One TCP socket, as sock_diag reported it.
///
/// An IPv6 socket that accepted or made an IPv4 connection (a listener on `[::]`) has
/// IPv4-mapped addresses (`[::ffff:127.0.0.1]:8080`), as the kernel reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpSocket {
    pub local: SocketAddr,
    /// `0.0.0.0:0` (or `[::]:0`) for a listener.
    pub remote: SocketAddr,
    pub state: TcpState,
    /// The socket's inode, as `/proc/PID/fd/N` names it (`socket:[inode]`): how a socket is
    /// tied to its process. 0 for TIME_WAIT and NEW_SYN_RECV, which have no file.
    pub inode: u32,
    /// The owner's user id (0 for TIME_WAIT and NEW_SYN_RECV).
    pub uid: u32,
    /// Bytes received and not yet read by the application; for a listener, the connections
    /// waiting to be accepted.
    pub recv_queue: u32,
    /// Bytes sent and not yet acknowledged; for a listener, its backlog.
    pub send_queue: u32,
    /// The congestion control's name ("cubic", "bbr"), when the kernel gave one.
    pub congestion: Option<String>,
    /// The socket's `tcp_info` (`during_block` is false); `None` for TIME_WAIT and NEW_SYN_RECV,
    /// which the kernel gives none for, or if it gave fewer bytes than any kernel since 2.6.
    pub info: Option<TcpInfoSample>,
}

/// What one listing found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The sockets the filter kept, in the kernel's order (IPv4, then IPv6), at most the
    /// number asked for.
    pub sockets: Vec<TcpSocket>,
    /// Sockets the filter kept past that number: counted, not listed.
    pub left_out: usize,
    /// Messages skipped: too short, an attribute running past their end, not an IPv4 or IPv6
    /// socket, or not a socket of this dump.
    pub malformed: usize,
}

/// The TCP sockets whose local or remote port is one of `ports`, at most `max_sockets` of them
/// (see [`MAX_SOCKETS`]), without those in TIME_WAIT and NEW_SYN_RECV. Port 0 matches nothing:
/// a listener's remote port is 0.
///
/// The kernel picks them (a filter in the request, [`ports_filter`]): it reads the `tcp_info`
/// of the ports' sockets only, each under its socket's lock, not of every socket of the host.
/// The same test runs here too, for a kernel that would ignore the filter.
pub fn on_ports(ports: &[u16], max_sockets: usize) -> io::Result<Listing> {
    on_ports_of(BOTH_FAMILIES, ports, max_sockets)
}

/// [`on_ports`] of the IPv6 sockets alone (those of IPv4 connections among them have
/// IPv4-mapped addresses): one dump instead of two, for a watch whose packets are IPv4.
pub fn on_ports_ipv6(ports: &[u16], max_sockets: usize) -> io::Result<Listing> {
    on_ports_of(&BOTH_FAMILIES[1..], ports, max_sockets)
}

/// The dumps of a listing: their sequence numbers and address families, IPv4 then IPv6.
const BOTH_FAMILIES: &[(u32, libc::c_int)] = &[(1, libc::AF_INET), (2, libc::AF_INET6)];

fn on_ports_of(
    families: &[(u32, libc::c_int)],
    ports: &[u16],
    max_sockets: usize,
) -> io::Result<Listing> {
    let filter = ports_filter(ports);
    list_with(families, max_sockets, LIVE_STATES, &filter, |socket| {
        [socket.local.port(), socket.remote.port()].iter().any(|p| *p != 0 && ports.contains(p))
    })
}

/// Requests of [`exact`] sent together: the kernel answers each at once, into the socket's
/// receive buffer, where an answer takes about 1 KiB, and drops what does not fit.
const EXACT_BATCH: usize = 32;
/// The receive buffer [`exact`] asks for: room for a batch's answers twice over, whatever the
/// host's default (`net.core.rmem_default`; the kernel caps it at `net.core.rmem_max`).
const EXACT_RECEIVE_BUFFER: libc::c_int = 64 * 1024;
/// `INET_DIAG_NOCOOKIE`: a request's socket cookie that matches any socket.
const NO_COOKIE: [u8; 8] = [0xff; 8];

/// The socket of each `(local, remote)` pair, if this host has one in a state a watch samples
/// (not TIME_WAIT, NEW_SYN_RECV or a listener), in the order asked.
///
/// Each is asked by its addresses (no `NLM_F_DUMP`): the kernel looks the socket up in its
/// table, as for a packet, instead of walking the whole table, and answers with its
/// `tcp_info`, or with ENOENT. An IPv4 pair also finds an IPv6 socket's IPv4-mapped
/// connection (a server on `[::]`). A socket bound to an interface (SO_BINDTODEVICE) is not
/// found this way: the lookup names no interface.
pub fn exact(pairs: &[(SocketAddr, SocketAddr)]) -> io::Result<Vec<Option<TcpSocket>>> {
    let mut found = vec![None; pairs.len()];
    if pairs.is_empty() {
        return Ok(found);
    }
    let socket = DiagSocket::open()?;
    // A smaller buffer than asked is no error: the default holds a batch on any usual host.
    let room = EXACT_RECEIVE_BUFFER;
    let _ = crate::capture::set_int(socket.0.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, room);
    let mut buf = vec![0; RECEIVE_BYTES];
    for start in (0..pairs.len()).step_by(EXACT_BATCH) {
        let batch = start..(start + EXACT_BATCH).min(pairs.len());
        let mut requests = Vec::with_capacity(batch.len() * EXACT_REQUEST_BYTES);
        for index in batch.clone() {
            let (local, remote) = pairs[index];
            requests.extend_from_slice(&exact_request(exact_seq(index), local, remote));
        }
        socket.send(&requests)?;
        let mut answered = vec![false; batch.len()];
        while answered.contains(&false) {
            let len = socket.receive(&mut buf)?;
            exact_answers(&buf[..len], &batch, pairs, &mut answered, &mut found)?;
        }
    }
    Ok(found)
}

/// The sequence number of [`exact`]'s request for its `index`th pair (from 1: a reply of
/// sequence 0 is nobody's).
fn exact_seq(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

/// The netlink messages of `datagram`, each as its type, sequence number and payload, or the
/// error of one that does not fit what is left of the datagram (which ends the walk).
fn messages(datagram: &[u8]) -> impl Iterator<Item = Result<(u16, u32, &[u8]), ReplyError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= datagram.len() {
            return None;
        }
        let room = datagram.len() - at;
        let len = u32_at(datagram, at).map_or(0, |len| len as usize);
        if len < NLMSG_HEADER_BYTES || len > room {
            let error = ReplyError::Truncated { at, len, room };
            at = datagram.len();
            return Some(Err(error));
        }
        let message = &datagram[at..at + len];
        // Messages start 4-aligned; the last one's padding may be missing. `len <= room`, so
        // this stays within `datagram.len() + 3`.
        at += align4(len);
        let kind = u16_at(message, 4).unwrap_or_default();
        let seq = u32_at(message, 8).unwrap_or_default();
        Some(Ok((kind, seq, &message[NLMSG_HEADER_BYTES..])))
    })
}

/// Reads a datagram of answers to [`exact`]'s requests for the pairs of `batch`: each is a
/// socket's message, or an NLMSG_ERROR of ENOENT for none. An answer to no request of the batch
/// is passed over; any other error ends the call.
fn exact_answers(
    datagram: &[u8],
    batch: &std::ops::Range<usize>,
    pairs: &[(SocketAddr, SocketAddr)],
    answered: &mut [bool],
    found: &mut [Option<TcpSocket>],
) -> Result<(), ReplyError> {
    for message in messages(datagram) {
        let (kind, seq, payload) = message?;
        let Some(index) = (seq as usize).checked_sub(1).filter(|i| batch.contains(i)) else {
            continue;
        };
        match kind {
            SOCK_DIAG_BY_FAMILY => {
                let (local, remote) = pairs[index];
                // The lookup falls back to a listener on the local port: only the pair's own
                // socket is an answer.
                found[index] = parse_socket(payload).filter(|socket| {
                    same_endpoint(socket.local, local)
                        && same_endpoint(socket.remote, remote)
                        && is_sampled(socket.state)
                });
                answered[index - batch.start] = true;
            }
            NLMSG_ERROR => match i32_at(payload, 0) {
                // An acknowledgement, which these requests do not ask for: nothing to read.
                Some(0) => {}
                Some(error) if error.saturating_abs() == libc::ENOENT => {
                    answered[index - batch.start] = true;
                }
                Some(error) => return Err(ReplyError::Refused(error.saturating_abs())),
                None => return Err(ReplyError::ShortError { len: payload.len() }),
            },
            _ => {}
        }
    }
    Ok(())
}

/// Whether two socket addresses are the same address and port (IPv4-mapped IPv6 as IPv4; a
/// link-local scope is not compared).
fn same_endpoint(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical()
}

/// Whether a socket in `state` is one a watch samples: one of [`LIVE_STATES`], not a listener.
fn is_sampled(state: TcpState) -> bool {
    !matches!(
        state,
        TcpState::TimeWait | TcpState::NewSynRecv | TcpState::Listen | TcpState::Other(_)
    )
}

/// A filter for sockets whose local (source) or remote (destination) port is one of `ports`.
///
/// The kernel checks a filter by following each operation's `yes` jump from the start, and
/// every `no` jump must land on an operation that chain reaches (`inet_diag_bc_audit`), so
/// the tests are laid out in order, each `yes` to the next operation:
/// - each test but the last is 8 bytes (the operation, then the port in a second one's `no`)
///   and a 4-byte JMP: a test that holds goes on to its JMP, which jumps to the end (kept:
///   the kernel keeps a socket whose filter ends exactly there); one that fails skips its JMP
///   to the next test;
/// - the last test holds into the end, and fails 4 bytes past it (refused).
fn ports_filter(ports: &[u16]) -> Vec<u8> {
    let tests: Vec<(u8, u16)> = ports
        .iter()
        .filter(|p| **p != 0)
        .flat_map(|&port| [(BC_S_EQ, port), (BC_D_EQ, port)])
        .collect();
    let len = tests.len() * 12 - 4 * usize::from(!tests.is_empty());
    let mut filter = Vec::with_capacity(len);
    // `struct inet_diag_bc_op` { code, yes, no }.
    let op = |filter: &mut Vec<u8>, code: u8, yes: u8, no: u16| {
        filter.extend_from_slice(&[code, yes]);
        filter.extend_from_slice(&no.to_ne_bytes());
    };
    for (i, &(code, port)) in tests.iter().enumerate() {
        // Failed: past this test and its JMP, or, for the last test, 4 bytes past the end.
        op(&mut filter, code, 8, 12);
        op(&mut filter, 0, 0, port);
        if i + 1 < tests.len() {
            let jump_to_end = (len - filter.len()) as u16;
            op(&mut filter, BC_JMP, 4, jump_to_end);
        }
    }
    debug_assert_eq!(filter.len(), len);
    filter
}

/// The TCP sockets of this network namespace that `keep` keeps, at most `max_sockets` of them.
///
/// Two dumps, IPv4 then IPv6, on a netlink socket of its own; blocks until the kernel has
/// listed every socket (it answers at once; a wait of over 5 s is an error).
pub fn list(max_sockets: usize, keep: impl FnMut(&TcpSocket) -> bool) -> io::Result<Listing> {
    list_with(BOTH_FAMILIES, max_sockets, STATES, &[], keep)
}

/// [`list`] of the sockets of `families` in `states` that the kernel's `filter` keeps (none:
/// every one).
fn list_with(
    families: &[(u32, libc::c_int)],
    max_sockets: usize,
    states: u32,
    filter: &[u8],
    keep: impl FnMut(&TcpSocket) -> bool,
) -> io::Result<Listing> {
    let socket = DiagSocket::open()?;
    let mut reader = Reader::new(max_sockets, keep);
    let mut buf = vec![0; RECEIVE_BYTES];
    for &(seq, family) in families {
        socket.send(&request(family as u8, seq, states, filter))?;
        reader.seq = seq;
        loop {
            let len = socket.receive(&mut buf)?;
            if reader.datagram(&buf[..len])? == Reply::Done {
                break;
            }
        }
    }
    Ok(reader.listing)
}

/// The dump request for `family`'s TCP sockets in `states`, with their `tcp_info` and
/// congestion control's name, and the kernel's `filter` if there is one (a multiple of 4 bytes
/// long, as every filter operation is).
fn request(family: u8, seq: u32, states: u32, filter: &[u8]) -> Vec<u8> {
    let attribute = if filter.is_empty() { 0 } else { ATTR_HEADER_BYTES + filter.len() };
    let total = REQUEST_BYTES + attribute;
    let mut request = vec![0; REQUEST_BYTES];
    request[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
    request[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request[8..12].copy_from_slice(&seq.to_ne_bytes());
    // Bytes 12..16, the sender's port id: 0, the kernel fills it in.
    let diag = &mut request[NLMSG_HEADER_BYTES..];
    diag[0] = family;
    diag[1] = libc::IPPROTO_TCP as u8;
    diag[2] = EXTENSIONS;
    diag[4..8].copy_from_slice(&states.to_ne_bytes());
    // The socket id stays zero: zero ports match every socket.
    if !filter.is_empty() {
        request.extend_from_slice(&(attribute as u16).to_ne_bytes());
        request.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
        request.extend_from_slice(filter);
    }
    request
}

/// The bytes of [`exact_request`]'s request: a dump's, without a filter.
const EXACT_REQUEST_BYTES: usize = REQUEST_BYTES;

/// The request for the one TCP socket whose local address is `local` and remote one `remote`,
/// with its `tcp_info` and congestion control's name: no `NLM_F_DUMP`, and the socket's id
/// filled in (ports and addresses in network order, any interface, any cookie). A pair of an
/// IPv4 and an IPv6 address asks in IPv6, the IPv4 one mapped.
fn exact_request(seq: u32, local: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let mut request = vec![0; EXACT_REQUEST_BYTES];
    request[0..4].copy_from_slice(&(EXACT_REQUEST_BYTES as u32).to_ne_bytes());
    request[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    request[8..12].copy_from_slice(&seq.to_ne_bytes());
    // Addresses in the sockid's 16 bytes: IPv4 in the first 4, or IPv6 (an IPv4 one mapped).
    let (family, local_ip, remote_ip) =
        match (local.ip().to_canonical(), remote.ip().to_canonical()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                let v4 = |ip: Ipv4Addr| {
                    let mut bytes = [0; 16];
                    bytes[..4].copy_from_slice(&ip.octets());
                    bytes
                };
                (libc::AF_INET, v4(l), v4(r))
            }
            (l, r) => {
                let v6 = |ip: IpAddr| match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                    IpAddr::V6(v6) => v6.octets(),
                };
                (libc::AF_INET6, v6(l), v6(r))
            }
        };
    let diag = &mut request[NLMSG_HEADER_BYTES..];
    diag[0] = family as u8;
    diag[1] = libc::IPPROTO_TCP as u8;
    diag[2] = EXTENSIONS;
    diag[4..8].copy_from_slice(&LIVE_STATES.to_ne_bytes());
    // The `inet_diag_sockid` at 8: source (local) and destination ports, the addresses, the
    // interface (0: any), the cookie.
    let id = &mut diag[8..];
    id[0..2].copy_from_slice(&local.port().to_be_bytes());
    id[2..4].copy_from_slice(&remote.port().to_be_bytes());
    id[4..20].copy_from_slice(&local_ip);
    id[20..36].copy_from_slice(&remote_ip);
    id[40..48].copy_from_slice(&NO_COOKIE);
    request
}

/// A `NETLINK_SOCK_DIAG` socket, for one listing.
struct DiagSocket(OwnedFd);

impl DiagSocket {
    fn open() -> io::Result<DiagSocket> {
        // SAFETY: socket(2) with constant arguments; no memory is passed.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT) => io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "this kernel or sandbox offers no socket diagnostics (NETLINK_SOCK_DIAG, \
                         what `ss` reads): {err}; run on a Linux host or VM with CONFIG_INET_DIAG"
                    ),
                ),
                _ => context(err, "open a NETLINK_SOCK_DIAG socket to list TCP sockets"),
            });
        }
        // SAFETY: a descriptor the kernel has just returned to us and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let timeout = libc::timeval { tv_sec: RECEIVE_TIMEOUT.as_secs() as _, tv_usec: 0 };
        // SAFETY: `timeout` is a `timeval` that outlives the call, and its size is the one
        // passed; the kernel only reads it.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::from_ref(&timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let err = io::Error::last_os_error();
            return Err(context(err, "set a receive timeout on the NETLINK_SOCK_DIAG socket"));
        }
        Ok(DiagSocket(fd))
    }

    /// Sends `request` to the kernel: with no address, a netlink socket sends to it.
    fn send(&self, request: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `request` is readable for its length for the duration of the call.
            let sent = unsafe {
                libc::send(self.0.as_raw_fd(), request.as_ptr().cast(), request.len(), 0)
            };
            if sent >= 0 {
                // A datagram goes whole or not at all.
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(context(
                    err,
                    "send the TCP socket listing request (NETLINK_SOCK_DIAG)",
                ));
            }
        }
    }

    /// Receives the kernel's next datagram into `buf`: its length. Datagrams from other
    /// processes are passed over (any process can address a netlink socket; only the kernel's
    /// port id is 0).
    fn receive(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `sockaddr_nl` is integers only, for which zero bytes are a valid value.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: `buf` is writable for its length and the kernel writes at most that much
            // (MSG_TRUNC only makes it return the datagram's whole length); `from` is writable
            // for `from_len` bytes, and the kernel stores how many it wrote in `from_len`.
            let got = unsafe {
                libc::recvfrom(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                    std::ptr::from_mut(&mut from).cast(),
                    &mut from_len,
                )
            };
            if got < 0 {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "the kernel stopped listing TCP sockets (NETLINK_SOCK_DIAG) for \
                                 {} s; try again",
                                RECEIVE_TIMEOUT.as_secs()
                            ),
                        ))
                    }
                    _ => {
                        return Err(context(
                            err,
                            "receive the TCP socket listing (NETLINK_SOCK_DIAG)",
                        ))
                    }
                }
            }
            let got = got as usize;
            if got > buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the kernel sent a socket listing datagram of {got} bytes, more than the \
                         {} this reader takes: this kernel is newer than the reader; please \
                         report it with the output of `uname -r`",
                        buf.len()
                    ),
                ));
            }
            if from.nl_pid != 0 {
                continue;
            }
            return Ok(got);
        }
    }
}

/// Whether a dump goes on after a datagram.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    More,
    Done,
}

/// Why a datagram ended the listing.
#[derive(Debug, PartialEq, Eq)]
enum ReplyError {
    /// A message's length runs past its datagram (`room` bytes from `at`), or is shorter than
    /// the message header.
    Truncated { at: usize, len: usize, room: usize },
    /// An `NLMSG_ERROR` too short to hold its error number.
    ShortError { len: usize },
    /// The kernel refused the dump, or ended it with an error: the errno.
    Refused(i32),
}

impl From<ReplyError> for io::Error {
    fn from(error: ReplyError) -> io::Error {
        match error {
            ReplyError::Truncated { at, len, room } => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the kernel's TCP socket listing is malformed: the message at byte {at} of \
                     its datagram says it is {len} bytes long, and {room} bytes are left (a \
                     message takes at least {NLMSG_HEADER_BYTES}); please report it with the \
                     output of `uname -r`"
                ),
            ),
            ReplyError::ShortError { len } => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the kernel's TCP socket listing is malformed: an error message of {len} \
                     bytes, too short for its error number; please report it with the output of \
                     `uname -r`"
                ),
            ),
            ReplyError::Refused(libc::ENOENT) => io::Error::new(
                io::ErrorKind::NotFound,
                "the kernel has no TCP socket diagnostics loaded (NETLINK_SOCK_DIAG answered \
                 ENOENT): load them with `sudo modprobe tcp_diag`",
            ),
            ReplyError::Refused(errno) => context(
                io::Error::from_raw_os_error(errno),
                "the kernel refused to list TCP sockets (NETLINK_SOCK_DIAG)",
            ),
        }
    }
}

/// Reads a dump's datagrams into a [`Listing`].
struct Reader<F> {
    /// The sequence number of the dump being read.
    seq: u32,
    max_sockets: usize,
    keep: F,
    listing: Listing,
}

impl<F: FnMut(&TcpSocket) -> bool> Reader<F> {
    fn new(max_sockets: usize, keep: F) -> Reader<F> {
        Reader { seq: 0, max_sockets, keep, listing: Listing::default() }
    }

    /// Reads one datagram: its sockets go into the listing; `Done` once the dump has ended.
    fn datagram(&mut self, datagram: &[u8]) -> Result<Reply, ReplyError> {
        for message in messages(datagram) {
            let (kind, seq, payload) = message?;
            match kind {
                NLMSG_DONE => {
                    // Its payload, when there is one, is the dump's error number, or 0.
                    return match i32_at(payload, 0) {
                        Some(error) if error < 0 => {
                            Err(ReplyError::Refused(error.saturating_neg()))
                        }
                        _ => Ok(Reply::Done),
                    };
                }
                NLMSG_ERROR => match i32_at(payload, 0) {
                    // An acknowledgement, which a dump does not ask for: nothing to read.
                    Some(0) => {}
                    Some(error) => return Err(ReplyError::Refused(error.saturating_abs())),
                    None => return Err(ReplyError::ShortError { len: payload.len() }),
                },
                NLMSG_NOOP => {}
                SOCK_DIAG_BY_FAMILY if seq == self.seq => self.socket(payload),
                _ => self.listing.malformed += 1,
            }
        }
        Ok(Reply::More)
    }

    /// One socket's message (after the netlink header).
    fn socket(&mut self, payload: &[u8]) {
        let Some(socket) = parse_socket(payload) else {
            self.listing.malformed += 1;
            return;
        };
        if !(self.keep)(&socket) {
            return;
        }
        if self.listing.sockets.len() < self.max_sockets {
            self.listing.sockets.push(socket);
        } else {
            self.listing.left_out += 1;
        }
    }
}

/// An `inet_diag_msg` and its attributes; `None` if it is malformed.
fn parse_socket(payload: &[u8]) -> Option<TcpSocket> {
    let header = payload.get(..DIAG_MSG_BYTES)?;
    let (family, state) = (header[0], header[1]);
    // The inet_diag_sockid at 4: ports and addresses in network byte order, then the interface.
    let local_port = u16::from_be_bytes([header[4], header[5]]);
    let remote_port = u16::from_be_bytes([header[6], header[7]]);
    let interface = u32_at(header, 40)?;
    let local = address(family, &header[8..24], local_port, interface)?;
    let remote = address(family, &header[24..40], remote_port, interface)?;

    let (mut info, mut congestion) = (None, None);
    let mut attributes = &payload[DIAG_MSG_BYTES..];
    while attributes.len() >= ATTR_HEADER_BYTES {
        let len = usize::from(u16_at(attributes, 0)?);
        let kind = u16_at(attributes, 2)? & ATTR_TYPE_MASK;
        // `get` is `None` both for a length past the message and for one shorter than the
        // header (which would never advance).
        let value = attributes.get(ATTR_HEADER_BYTES..len)?;
        match kind {
            INET_DIAG_INFO => info = decode(value, false),
            INET_DIAG_CONG => congestion = congestion_name(value),
            _ => {}
        }
        // The last attribute's padding may be missing.
        attributes = attributes.get(align4(len)..).unwrap_or_default();
    }
    Some(TcpSocket {
        local,
        remote,
        state: TcpState::from_kernel(state),
        inode: u32_at(header, 68)?,
        uid: u32_at(header, 64)?,
        recv_queue: u32_at(header, 56)?,
        send_queue: u32_at(header, 60)?,
        congestion,
        info,
    })
}

/// An address of the inet_diag_sockid: 16 bytes, of which IPv4 uses the first 4. The
/// interface is a link-local IPv6 address's scope.
fn address(family: u8, bytes: &[u8], port: u16, interface: u32) -> Option<SocketAddr> {
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        libc::AF_INET6 => {
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
            let scope = if ip.is_unicast_link_local() { interface } else { 0 };
            Some(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)))
        }
        _ => None,
    }
}

/// `INET_DIAG_CONG`: a NUL-terminated name of at most [`CONGESTION_NAME_MAX`] bytes.
fn congestion_name(value: &[u8]) -> Option<String> {
    let name = value.split(|&byte| byte == 0).next()?;
    let name = &name[..name.len().min(CONGESTION_NAME_MAX)];
    (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
}

fn align4(len: usize) -> usize {
    (len + 3) & !3
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn i32_at(bytes: &[u8], at: usize) -> Option<i32> {
    u32_at(bytes, at).map(|value| value as i32)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::MetadataExt;
    use std::thread;
    use std::time::Instant;

    use super::*;
    use crate::net::tcp_info::sample;

    const SEQ: u32 = 7;
    const ESTABLISHED: u8 = 1;
    const LISTEN: u8 = 10;
    /// `NLM_F_MULTI`, which every message of a dump carries.
    const NLM_F_MULTI: u16 = 0x2;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    /// One netlink message: its header, `payload`, padding to 4 bytes.
    fn message(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = (NLMSG_HEADER_BYTES + payload.len()) as u32;
        let mut bytes = Vec::new();
        bytes.extend(len.to_ne_bytes());
        bytes.extend(kind.to_ne_bytes());
        bytes.extend(NLM_F_MULTI.to_ne_bytes());
        bytes.extend(seq.to_ne_bytes());
        bytes.extend(4242u32.to_ne_bytes());
        bytes.extend(payload);
        bytes.resize(align4(bytes.len()), 0);
        bytes
    }

    fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend(((ATTR_HEADER_BYTES + value.len()) as u16).to_ne_bytes());
        bytes.extend(kind.to_ne_bytes());
        bytes.extend(value);
        bytes.resize(align4(bytes.len()), 0);
        bytes
    }

    /// An attribute header claiming `len` bytes, whatever follows.
    fn attribute_header(len: u16, kind: u16) -> Vec<u8> {
        [len.to_ne_bytes(), kind.to_ne_bytes()].concat()
    }

    /// An `inet_diag_msg` for a socket from `local` to `remote`.
    fn diag_msg(state: u8, local: SocketAddr, remote: SocketAddr, uid: u32, inode: u32) -> Vec<u8> {
        fn ip(address: SocketAddr) -> [u8; 16] {
            match address {
                SocketAddr::V4(v4) => {
                    let mut bytes = [0; 16];
                    bytes[..4].copy_from_slice(&v4.ip().octets());
                    bytes
                }
                SocketAddr::V6(v6) => v6.ip().octets(),
            }
        }
        let mut bytes = vec![0; DIAG_MSG_BYTES];
        bytes[0] = if local.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 } as u8;
        bytes[1] = state;
        bytes[4..6].copy_from_slice(&local.port().to_be_bytes());
        bytes[6..8].copy_from_slice(&remote.port().to_be_bytes());
        bytes[8..24].copy_from_slice(&ip(local));
        bytes[24..40].copy_from_slice(&ip(remote));
        bytes[56..60].copy_from_slice(&3u32.to_ne_bytes());
        bytes[60..64].copy_from_slice(&5u32.to_ne_bytes());
        bytes[64..68].copy_from_slice(&uid.to_ne_bytes());
        bytes[68..72].copy_from_slice(&inode.to_ne_bytes());
        bytes
    }

    /// A `tcp_info` as Linux 6.18 returns it (280 bytes), with its state and bytes received
    /// (offset 128) set.
    fn tcp_info(state: u8, bytes_received: u64) -> Vec<u8> {
        let mut bytes = vec![0; 280];
        bytes[0] = state;
        bytes[128..136].copy_from_slice(&bytes_received.to_ne_bytes());
        bytes
    }

    /// A socket's message: its `inet_diag_msg`, then `attributes` as they are.
    fn socket_message(local: &str, remote: &str, attributes: &[Vec<u8>]) -> Vec<u8> {
        let mut payload = diag_msg(ESTABLISHED, addr(local), addr(remote), 1000, 77);
        payload.extend(attributes.concat());
        message(SOCK_DIAG_BY_FAMILY, SEQ, &payload)
    }

    fn done() -> Vec<u8> {
        message(NLMSG_DONE, SEQ, &0i32.to_ne_bytes())
    }

    /// The last datagram of a dump: an established IPv4 connection with its `tcp_info` and
    /// congestion control, an IPv6 listener with only its `tcp_info`, then `NLMSG_DONE`.
    fn well_formed() -> Vec<u8> {
        let mut connection = diag_msg(ESTABLISHED, addr("10.0.0.1:8080"), addr("10.0.0.2:5"), 7, 9);
        connection.extend(attribute(INET_DIAG_INFO, &tcp_info(ESTABLISHED, 10_000)));
        connection.extend(attribute(INET_DIAG_CONG, b"cubic\0"));
        let mut listener = diag_msg(LISTEN, addr("[::1]:8080"), addr("[::]:0"), 0, 11);
        listener.extend(attribute(INET_DIAG_INFO, &tcp_info(LISTEN, 0)));
        [
            message(SOCK_DIAG_BY_FAMILY, SEQ, &connection),
            message(SOCK_DIAG_BY_FAMILY, SEQ, &listener),
            done(),
        ]
        .concat()
    }

    /// Reads `datagram` as the dump numbered [`SEQ`], keeping every socket.
    fn read(datagram: &[u8]) -> (Result<Reply, ReplyError>, Listing) {
        let mut reader = Reader::new(MAX_SOCKETS, |_: &TcpSocket| true);
        reader.seq = SEQ;
        let reply = reader.datagram(datagram);
        (reply, reader.listing)
    }

    #[test]
    fn a_well_formed_reply_lists_each_socket_with_its_tcp_info() {
        let (reply, listing) = read(&well_formed());
        assert_eq!(reply, Ok(Reply::Done));
        let connection_info = decode(&tcp_info(ESTABLISHED, 10_000), false);
        assert_eq!(connection_info.as_ref().and_then(|info| info.bytes_received), Some(10_000));
        let expected = Listing {
            sockets: vec![
                TcpSocket {
                    local: addr("10.0.0.1:8080"),
                    remote: addr("10.0.0.2:5"),
                    state: TcpState::Established,
                    inode: 9,
                    uid: 7,
                    recv_queue: 3,
                    send_queue: 5,
                    congestion: Some("cubic".into()),
                    info: connection_info,
                },
                TcpSocket {
                    local: addr("[::1]:8080"),
                    remote: addr("[::]:0"),
                    state: TcpState::Listen,
                    inode: 11,
                    uid: 0,
                    recv_queue: 3,
                    send_queue: 5,
                    congestion: None,
                    info: decode(&tcp_info(LISTEN, 0), false),
                },
            ],
            left_out: 0,
            malformed: 0,
        };
        assert_eq!(listing, expected);
    }

    #[test]
    fn the_filter_picks_sockets_and_the_bound_counts_those_left_out() {
        let datagram = [
            socket_message("127.0.0.1:8080", "127.0.0.1:40000", &[]),
            socket_message("127.0.0.1:40001", "127.0.0.1:8080", &[]),
            socket_message("127.0.0.1:9090", "127.0.0.1:40002", &[]),
            socket_message("127.0.0.1:40000", "127.0.0.1:8080", &[]),
            done(),
        ]
        .concat();
        let mut reader = Reader::new(2, |socket: &TcpSocket| {
            socket.local.port() == 8080 || socket.remote.port() == 8080
        });
        reader.seq = SEQ;
        assert_eq!(reader.datagram(&datagram), Ok(Reply::Done));
        let kept: Vec<_> = reader.listing.sockets.iter().map(|s| (s.local, s.remote)).collect();
        assert_eq!(
            kept,
            [
                (addr("127.0.0.1:8080"), addr("127.0.0.1:40000")),
                (addr("127.0.0.1:40001"), addr("127.0.0.1:8080"))
            ]
        );
        assert_eq!((reader.listing.left_out, reader.listing.malformed), (1, 0));
    }

    #[test]
    fn a_message_running_past_its_datagram_ends_the_listing_with_an_error() {
        let first = socket_message("127.0.0.1:1", "127.0.0.1:2", &[]);
        let second = socket_message("127.0.0.1:3", "127.0.0.1:4", &[]);
        let datagram = [first.clone(), second.clone(), done()].concat();

        // The first message says it is longer than the whole datagram.
        let mut longer = datagram.clone();
        longer[..4].copy_from_slice(&(datagram.len() as u32 + 1).to_ne_bytes());
        let (reply, listing) = read(&longer);
        let len = datagram.len() + 1;
        assert_eq!(reply, Err(ReplyError::Truncated { at: 0, len, room: datagram.len() }));
        assert_eq!(listing, Listing::default());

        // The datagram ends in the middle of the second message: the first is read.
        let cut = &datagram[..first.len() + second.len() - 1];
        let (reply, listing) = read(cut);
        let (at, len) = (first.len(), second.len());
        assert_eq!(reply, Err(ReplyError::Truncated { at, len, room: len - 1 }));
        assert_eq!(listing.sockets.len(), 1);

        // A length shorter than the message header would never move on.
        let mut short = datagram.clone();
        short[..4].copy_from_slice(&8u32.to_ne_bytes());
        assert_eq!(read(&short).0, Err(ReplyError::Truncated { at: 0, len: 8, room: short.len() }));

        // Three bytes after the last message: no room for a length.
        let trailing = [first.clone(), vec![1, 2, 3]].concat();
        let at = first.len();
        assert_eq!(read(&trailing).0, Err(ReplyError::Truncated { at, len: 0, room: 3 }));

        let error = io::Error::from(ReplyError::Truncated { at: 96, len: 400, room: 100 });
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        let text = error.to_string();
        assert!(text.contains("byte 96") && text.contains("400 bytes long"), "{text}");
        assert!(text.contains("uname -r"), "says what to do: {text}");
    }

    #[test]
    fn an_attribute_running_past_its_message_skips_that_socket_and_counts_it() {
        // Claims 300 bytes; 8 follow its header.
        let overlong = [attribute_header(300, INET_DIAG_INFO), vec![0; 8]].concat();
        let datagram = [
            socket_message("127.0.0.1:1", "127.0.0.1:2", &[overlong]),
            socket_message("127.0.0.1:3", "127.0.0.1:4", &[]),
            done(),
        ]
        .concat();
        let (reply, listing) = read(&datagram);
        assert_eq!(reply, Ok(Reply::Done));
        assert_eq!(listing.malformed, 1);
        let kept: Vec<_> = listing.sockets.iter().map(|s| s.local).collect();
        assert_eq!(kept, [addr("127.0.0.1:3")]);
    }

    #[test]
    fn zero_length_attributes_never_loop_and_empty_values_read_as_absent() {
        // A length of 0 (or anything under the 4-byte header) would never advance.
        for len in [0, 3] {
            let datagram = [
                socket_message("127.0.0.1:1", "127.0.0.1:2", &[attribute_header(len, 9)]),
                socket_message("127.0.0.1:3", "127.0.0.1:4", &[]),
                done(),
            ]
            .concat();
            let (reply, listing) = read(&datagram);
            assert_eq!(reply, Ok(Reply::Done), "length {len}");
            assert_eq!((listing.sockets.len(), listing.malformed), (1, 1), "length {len}");
            assert_eq!(listing.sockets[0].local, addr("127.0.0.1:3"));
        }

        // Attributes of no value, or a tcp_info shorter than any kernel's: read as absent.
        for info in [attribute(INET_DIAG_INFO, &[]), attribute(INET_DIAG_INFO, &[1; 50])] {
            let attributes = [info, attribute(INET_DIAG_CONG, &[]), attribute(99, &[])];
            let datagram =
                [socket_message("127.0.0.1:1", "127.0.0.1:2", &attributes), done()].concat();
            let (reply, listing) = read(&datagram);
            assert_eq!(reply, Ok(Reply::Done));
            assert_eq!(listing.malformed, 0);
            let socket = &listing.sockets[0];
            assert_eq!((&socket.info, &socket.congestion), (&None, &None));
        }

        // A congestion name without its NUL is read to its end, one longer than the kernel's
        // longest is cut to that.
        let long = [b'x'; 40];
        for (name, read_as) in [(&b"bbr"[..], "bbr"), (&long[..], "xxxxxxxxxxxxxxxx")] {
            let attributes = [attribute(INET_DIAG_CONG, name)];
            let datagram =
                [socket_message("127.0.0.1:1", "127.0.0.1:2", &attributes), done()].concat();
            let (_, listing) = read(&datagram);
            assert_eq!(listing.sockets[0].congestion.as_deref(), Some(read_as));
        }
    }

    #[test]
    fn a_message_that_is_not_a_socket_of_this_dump_is_skipped_and_counted() {
        let mut unknown_family =
            diag_msg(ESTABLISHED, addr("127.0.0.1:1"), addr("127.0.0.1:2"), 0, 1);
        unknown_family[0] = libc::AF_UNIX as u8;
        let datagram = [
            // Too short for an inet_diag_msg.
            message(SOCK_DIAG_BY_FAMILY, SEQ, &[0; DIAG_MSG_BYTES - 1]),
            message(SOCK_DIAG_BY_FAMILY, SEQ, &unknown_family),
            // Another dump's.
            message(
                SOCK_DIAG_BY_FAMILY,
                SEQ + 1,
                &diag_msg(ESTABLISHED, addr("127.0.0.1:5"), addr("127.0.0.1:6"), 0, 1),
            ),
            // A type a dump does not send.
            message(0x99, SEQ, &[]),
            // Nothing, by design.
            message(NLMSG_NOOP, SEQ, &[]),
            socket_message("127.0.0.1:3", "127.0.0.1:4", &[]),
        ]
        .concat();
        let (reply, listing) = read(&datagram);
        assert_eq!(reply, Ok(Reply::More), "no NLMSG_DONE yet");
        assert_eq!((listing.sockets.len(), listing.malformed), (1, 4));
    }

    #[test]
    fn an_nlmsg_error_ends_the_listing_with_the_kernels_error_number() {
        let error = |errno: i32| message(NLMSG_ERROR, SEQ, &(-errno).to_ne_bytes());
        let first = socket_message("127.0.0.1:1", "127.0.0.1:2", &[]);

        let (reply, listing) = read(&[first.clone(), error(libc::EPERM), done()].concat());
        assert_eq!(reply, Err(ReplyError::Refused(libc::EPERM)));
        assert_eq!(listing.sockets.len(), 1);
        let text = io::Error::from(ReplyError::Refused(libc::EPERM)).to_string();
        assert!(text.contains("refused to list TCP sockets"), "{text}");
        assert!(text.contains(&io::Error::from_raw_os_error(libc::EPERM).to_string()), "{text}");

        let missing = io::Error::from(ReplyError::Refused(libc::ENOENT));
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        assert!(missing.to_string().contains("modprobe tcp_diag"), "{missing}");

        // An acknowledgement (error 0) is not an error.
        let (reply, listing) = read(&[error(0), first.clone(), done()].concat());
        assert_eq!((reply, listing.sockets.len()), (Ok(Reply::Done), 1));

        // Too short for its error number; the most negative number does not overflow.
        let short = message(NLMSG_ERROR, SEQ, &[0xff, 0xff]);
        assert_eq!(read(&short).0, Err(ReplyError::ShortError { len: 2 }));
        let extreme = message(NLMSG_ERROR, SEQ, &i32::MIN.to_ne_bytes());
        assert_eq!(read(&extreme).0, Err(ReplyError::Refused(i32::MAX)));
    }

    #[test]
    fn nlmsg_done_ends_the_dump_and_carries_its_error() {
        let first = socket_message("127.0.0.1:1", "127.0.0.1:2", &[]);
        let after = socket_message("127.0.0.1:3", "127.0.0.1:4", &[]);
        let (reply, listing) = read(&[first.clone(), done(), after].concat());
        assert_eq!(reply, Ok(Reply::Done));
        assert_eq!(listing.sockets.len(), 1, "what follows NLMSG_DONE is not read");

        let empty_done = message(NLMSG_DONE, SEQ, &[]);
        assert_eq!(read(&empty_done).0, Ok(Reply::Done));
        let failed = message(NLMSG_DONE, SEQ, &(-libc::ENOBUFS).to_ne_bytes());
        assert_eq!(read(&failed).0, Err(ReplyError::Refused(libc::ENOBUFS)));
    }

    /// Every cut of a reply, and every byte of it set to 0, 1, 4 or 0xff: an error or a
    /// listing, never a panic or more sockets than the reply holds.
    #[test]
    fn no_cut_or_corruption_of_a_reply_panics() {
        let reply = well_formed();
        let mut tries = 0;
        for cut in 0..=reply.len() {
            let (_, listing) = read(&reply[..cut]);
            assert!(listing.sockets.len() <= 2);
            tries += 1;
        }
        for at in 0..reply.len() {
            for value in [0, 1, 4, 0xff] {
                let mut corrupt = reply.clone();
                corrupt[at] = value;
                let (_, listing) = read(&corrupt);
                assert!(listing.sockets.len() <= 2, "byte {at} = {value}: {listing:?}");
                tries += 1;
            }
        }
        assert!(tries > 2000, "{tries}");
    }

    #[test]
    fn the_request_asks_for_every_tcp_socket_with_its_tcp_info_and_congestion_control() {
        let request = request(libc::AF_INET6 as u8, 3, STATES, &[]);
        assert_eq!(u32_at(&request, 0), Some(72), "nlmsg_len");
        assert_eq!(u16_at(&request, 4), Some(20), "SOCK_DIAG_BY_FAMILY");
        assert_eq!(u16_at(&request, 6), Some(0x301), "NLM_F_REQUEST | NLM_F_DUMP");
        assert_eq!(u32_at(&request, 8), Some(3), "seq");
        assert_eq!(&request[16..20], &[10, 6, 0b1010, 0], "AF_INET6, TCP, INFO and CONG");
        assert_eq!(u32_at(&request, 20), Some(0x1ffe), "ESTABLISHED to NEW_SYN_RECV");
        assert!(request[24..].iter().all(|&b| b == 0), "any socket");
        assert_eq!(request.len(), 72);
    }

    #[test]
    fn a_ports_request_carries_the_kernels_filter_as_its_attribute() {
        let request = request(libc::AF_INET as u8, 1, LIVE_STATES, &ports_filter(&[8080]));
        // Two tests of 8 bytes and a JMP between them, after the attribute's 4-byte header.
        assert_eq!(u32_at(&request, 0), Some(72 + 4 + 20), "nlmsg_len");
        assert_eq!(request.len(), 96);
        assert_eq!(u16_at(&request, 72), Some(24), "the attribute's length");
        assert_eq!(u16_at(&request, 74), Some(INET_DIAG_REQ_BYTECODE));
        // Source port 8080: on to the JMP, else past it to the next test.
        assert_eq!(&request[76..78], &[BC_S_EQ, 8]);
        assert_eq!(u16_at(&request, 78), Some(12));
        assert_eq!(u16_at(&request, 82), Some(8080));
        // The JMP to the end: kept.
        assert_eq!(&request[84..86], &[BC_JMP, 4]);
        assert_eq!(u16_at(&request, 86), Some(12));
        // Destination port 8080: into the end (kept), else 4 bytes past it (refused).
        assert_eq!(&request[88..90], &[BC_D_EQ, 8]);
        assert_eq!(u16_at(&request, 90), Some(12));
        assert_eq!(u16_at(&request, 94), Some(8080));
        assert_eq!(u32_at(&request, 20), Some(0x1ffe & !(1 << 6) & !(1 << 12)), "live states");
    }

    /// The kernel runs the filter itself: with nothing filtered here, only the port's
    /// sockets come back, both ends of a connection and its listener.
    #[test]
    fn the_kernel_filter_keeps_only_the_ports_sockets() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let at = listener.local_addr().expect("listener address");
        let _client = TcpStream::connect(at).expect("connect");
        let _served = listener.accept().expect("accept");
        let other = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind another");
        let filter = ports_filter(&[at.port()]);
        let listing =
            list_with(BOTH_FAMILIES, MAX_SOCKETS, LIVE_STATES, &filter, |_| true).expect("list");
        assert_eq!(listing.sockets.len(), 3, "{listing:#?}");
        assert!(listing
            .sockets
            .iter()
            .all(|s| s.local.port() == at.port() || s.remote.port() == at.port()));
        assert!(listing.sockets.iter().all(|s| s.local != other.local_addr().unwrap()));
        // Two ports: the filter's tests chained, each kept socket once.
        let both = ports_filter(&[at.port(), other.local_addr().unwrap().port()]);
        let listing =
            list_with(BOTH_FAMILIES, MAX_SOCKETS, LIVE_STATES, &both, |_| true).expect("list");
        assert_eq!(listing.sockets.len(), 4, "{listing:#?}");
    }

    /// One socket of `listing` that `pick` picks, and only one.
    fn one(listing: &Listing, what: &str, pick: impl Fn(&TcpSocket) -> bool) -> TcpSocket {
        let found: Vec<_> = listing.sockets.iter().filter(|s| pick(s)).collect();
        assert_eq!(found.len(), 1, "one {what} in {listing:#?}");
        found[0].clone()
    }

    /// The inode `/proc/self/fd` names for `socket`'s descriptor.
    fn inode_of(socket: &impl AsRawFd) -> String {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", socket.as_raw_fd()));
        link.expect("read /proc/self/fd").to_string_lossy().into_owned()
    }

    /// The real kernel, unprivileged: a listener and both ends of a connection that carried
    /// 10,000 bytes, found by the listener's port, with the same tcp_info the sockets'
    /// own descriptors give.
    #[test]
    fn the_kernel_lists_a_listener_and_both_ends_of_its_connection_with_their_tcp_info() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let at = listener.local_addr().expect("listener address");
        let mut client = TcpStream::connect(at).expect("connect");
        let (mut server, client_at) = listener.accept().expect("accept");
        client.write_all(&[0x5a; 10_000]).expect("client write");
        server.read_exact(&mut [0; 10_000]).expect("server read");

        // The client's bytes are acknowledged once the server's ACKs come (delayed ones within
        // 200 ms); bytes_acked counts the SYN too.
        let deadline = Instant::now() + Duration::from_secs(10);
        let listing = loop {
            let listing = on_ports(&[at.port()], MAX_SOCKETS).expect("list the port's sockets");
            let acked = listing
                .sockets
                .iter()
                .find(|s| s.local == client_at)
                .and_then(|s| s.info.as_ref()?.bytes_acked);
            if acked >= Some(10_001) {
                break listing;
            }
            assert!(Instant::now() < deadline, "not acknowledged in 10 s: {listing:#?}");
            thread::sleep(Duration::from_millis(1));
        };
        for s in &listing.sockets {
            let bytes = s.info.as_ref().map(|i| (i.bytes_received, i.bytes_acked));
            eprintln!(
                "{} -> {} {:?} inode {} (received, acked) {bytes:?}",
                s.local, s.remote, s.state, s.inode
            );
        }
        assert_eq!((listing.left_out, listing.malformed), (0, 0));

        let listening = one(&listing, "listener", |s| s.local == at && s.remote.port() == 0);
        let server_end = one(&listing, "server end", |s| s.local == at && s.remote == client_at);
        let client_end = one(&listing, "client end", |s| s.local == client_at && s.remote == at);
        assert_eq!(listening.state, TcpState::Listen);
        assert_eq!(listening.remote, addr("0.0.0.0:0"));
        assert_eq!(server_end.state, TcpState::Established);
        assert_eq!(client_end.state, TcpState::Established);

        let server_info = server_end.info.as_ref().expect("the server end's tcp_info");
        let client_info = client_end.info.as_ref().expect("the client end's tcp_info");
        assert_eq!(server_info.bytes_received, Some(10_000), "{server_info:?}");
        assert_eq!(client_info.bytes_sent, Some(10_000), "{client_info:?}");
        assert_eq!(client_info.bytes_acked, Some(10_001), "{client_info:?}");
        assert_eq!(server_end.recv_queue, 0, "the server read everything");
        // The same struct, decoded by the same code, as the descriptor's getsockopt gives.
        let direct = sample(&server, false).expect("getsockopt(TCP_INFO) on the server end");
        assert_eq!(
            (direct.state, direct.bytes_received, direct.bytes_acked),
            (server_info.state, server_info.bytes_received, server_info.bytes_acked)
        );

        // Whose they are: this process's user, and the inodes its descriptors name.
        let uid = std::fs::metadata("/proc/self").expect("stat /proc/self").uid();
        let default_congestion =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
                .expect("read the default congestion control");
        for (socket, fd) in [
            (&listening, inode_of(&listener)),
            (&server_end, inode_of(&server)),
            (&client_end, inode_of(&client)),
        ] {
            assert_eq!(fd, format!("socket:[{}]", socket.inode), "{socket:?}");
            assert_eq!(socket.uid, uid, "{socket:?}");
            assert_eq!(socket.congestion.as_deref(), Some(default_congestion.trim()));
        }

        // At most one kept: the other two counted.
        let ours = [at, client_at];
        let bounded = list(1, |s| ours.contains(&s.local)).expect("list with a bound");
        assert_eq!((bounded.sockets.len(), bounded.left_out), (1, 2), "{bounded:#?}");
    }

    #[test]
    fn the_kernel_lists_ipv6_sockets_too() {
        let listener = TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).expect("bind [::1]");
        let at = listener.local_addr().expect("listener address");
        let client = TcpStream::connect(at).expect("connect");
        let (_server, client_at) = listener.accept().expect("accept");
        let listing = on_ports(&[at.port()], MAX_SOCKETS).expect("list the port's sockets");
        let listening = one(&listing, "listener", |s| s.local == at && s.remote.port() == 0);
        assert_eq!((listening.state, listening.remote), (TcpState::Listen, addr("[::]:0")));
        let client_end = one(&listing, "client end", |s| s.local == client_at && s.remote == at);
        assert_eq!(client_end.state, TcpState::Established);
        assert_eq!(inode_of(&client), format!("socket:[{}]", client_end.inode));
        one(&listing, "server end", |s| s.local == at && s.remote == client_at);
    }

    #[test]
    fn a_port_nothing_uses_lists_no_socket() {
        // The port is held by a socket only bound, so no other test can take it meanwhile; such
        // a socket carries no traffic and is not asked for.
        let reserved = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        reserved.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).expect("bind");
        let port = reserved.local_addr().expect("address").as_socket().expect("inet").port();
        let listing = on_ports(&[port], MAX_SOCKETS).expect("list");
        assert_eq!(listing, Listing::default());

        // Port 0 is every listener's remote port, and matches nothing.
        let _listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        assert_eq!(on_ports(&[0], MAX_SOCKETS).expect("list"), Listing::default());
    }

    #[test]
    fn an_exact_request_names_one_socket_by_its_addresses_without_a_dump() {
        let request = exact_request(9, addr("127.0.0.1:40000"), addr("127.0.0.2:8080"));
        assert_eq!(request.len(), 72);
        assert_eq!(u32_at(&request, 0), Some(72), "nlmsg_len");
        assert_eq!(u16_at(&request, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(u16_at(&request, 6), Some(NLM_F_REQUEST), "no NLM_F_DUMP");
        assert_eq!(u32_at(&request, 8), Some(9), "seq");
        assert_eq!(&request[16..20], &[2, 6, 0b1010, 0], "AF_INET, TCP, INFO and CONG");
        // The sockid: source port 40000 and destination port 8080 in network order, then the
        // addresses (IPv4 in the first 4 of 16 bytes), any interface, any cookie.
        assert_eq!(&request[24..28], &[0x9c, 0x40, 0x1f, 0x90]);
        assert_eq!(&request[28..32], &[127, 0, 0, 1]);
        assert!(request[32..44].iter().all(|&b| b == 0));
        assert_eq!(&request[44..48], &[127, 0, 0, 2]);
        assert_eq!(u32_at(&request, 60), Some(0), "any interface");
        assert_eq!(&request[64..72], &[0xff; 8], "any cookie");

        // IPv6, and an IPv6 socket's IPv4-mapped pair asked in IPv4.
        let v6 = exact_request(1, addr("[::1]:1"), addr("[::2]:2"));
        assert_eq!(v6[16], libc::AF_INET6 as u8);
        assert_eq!(&v6[28..44], &"::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(&v6[44..60], &"::2".parse::<Ipv6Addr>().unwrap().octets());
        let mapped = exact_request(1, addr("[::ffff:127.0.0.1]:1"), addr("127.0.0.1:2"));
        assert_eq!((mapped[16], &mapped[28..32]), (libc::AF_INET as u8, &[127, 0, 0, 1][..]));
    }

    #[test]
    fn exact_answers_are_matched_to_their_requests_and_a_listener_is_no_answer() {
        let pairs = [
            (addr("127.0.0.1:40000"), addr("127.0.0.1:8080")),
            (addr("127.0.0.1:8080"), addr("127.0.0.1:40000")),
            (addr("127.0.0.1:8080"), addr("127.0.0.1:40001")),
            (addr("127.0.0.1:40002"), addr("127.0.0.1:8080")),
        ];
        let reply = |index: usize, state: u8, local: &str, remote: &str| {
            let mut payload = diag_msg(state, addr(local), addr(remote), 0, 1);
            payload.extend(attribute(INET_DIAG_INFO, &tcp_info(state, 5)));
            message(SOCK_DIAG_BY_FAMILY, exact_seq(index), &payload)
        };
        let enoent = |index: usize| message(NLMSG_ERROR, exact_seq(index), &(-2i32).to_ne_bytes());
        let datagram = [
            reply(0, ESTABLISHED, "127.0.0.1:40000", "127.0.0.1:8080"),
            // The lookup's fallback, the port's listener: not the pair's socket.
            reply(2, LISTEN, "127.0.0.1:8080", "0.0.0.0:0"),
            enoent(1),
            // An answer to no request of this batch is passed over.
            reply(9, ESTABLISHED, "127.0.0.1:1", "127.0.0.1:2"),
            message(NLMSG_ERROR, 0, &(-2i32).to_ne_bytes()),
        ]
        .concat();
        let mut answered = [false; 4];
        let mut found = vec![None; 4];
        let batch = 0..4;
        exact_answers(&datagram, &batch, &pairs, &mut answered, &mut found).expect("answers");
        assert_eq!(answered, [true, true, true, false]);
        let first = found[0].as_ref().expect("the first pair's socket");
        assert_eq!((first.local, first.remote), pairs[0]);
        assert_eq!(first.info.as_ref().and_then(|i| i.bytes_received), Some(5));
        assert!(found[1..].iter().all(Option::is_none), "{found:?}");

        // A socket in TIME_WAIT is no answer either: it has no tcp_info to sample.
        let time_wait = reply(3, 6, "127.0.0.1:40002", "127.0.0.1:8080");
        exact_answers(&time_wait, &batch, &pairs, &mut answered, &mut found).expect("answer");
        assert_eq!((answered[3], &found[3]), (true, &None));

        // Any other error ends the reading with it; a cut message too.
        let refused = message(NLMSG_ERROR, exact_seq(0), &(-libc::EPERM).to_ne_bytes());
        let error = exact_answers(&refused, &batch, &pairs, &mut answered, &mut found);
        assert_eq!(error, Err(ReplyError::Refused(libc::EPERM)));
        let cut = &reply(0, ESTABLISHED, "127.0.0.1:40000", "127.0.0.1:8080")[..40];
        let error = exact_answers(cut, &batch, &pairs, &mut answered, &mut found);
        assert!(matches!(error, Err(ReplyError::Truncated { .. })), "{error:?}");
    }

    /// The real kernel, unprivileged: each end of a connection found by its addresses alone,
    /// with the tcp_info its own descriptor gives; a pair no socket has, the port's listener
    /// and a closed connection's TIME_WAIT are not found; more pairs than a batch are asked.
    #[test]
    fn the_kernel_answers_an_exact_request_with_the_sockets_tcp_info() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let at = listener.local_addr().expect("listener address");
        let mut client = TcpStream::connect(at).expect("connect");
        let (mut server, client_at) = listener.accept().expect("accept");
        client.write_all(&[0x5a; 3000]).expect("client write");
        server.read_exact(&mut [0; 3000]).expect("server read");
        // A connection closed first by its client: the client's end is in TIME_WAIT.
        let closed = TcpStream::connect(at).expect("connect another");
        let closed_at = closed.local_addr().expect("its address");
        let (closed_server, _) = listener.accept().expect("accept another");
        drop(closed);
        drop(closed_server);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let listing = list(MAX_SOCKETS, |s| s.local == closed_at).expect("list");
            if listing.sockets.iter().any(|s| s.state == TcpState::TimeWait) {
                break;
            }
            assert!(Instant::now() < deadline, "no TIME_WAIT in 10 s: {listing:#?}");
            thread::sleep(Duration::from_millis(1));
        }
        let nobody = addr("127.0.0.1:9");

        let mut pairs = vec![(client_at, at), (at, client_at), (at, nobody), (closed_at, at)];
        // Past a batch: the same two ends again, further on.
        pairs.extend(std::iter::repeat_n((nobody, at), EXACT_BATCH + 3));
        pairs.push((client_at, at));
        let found = exact(&pairs).expect("ask for the sockets");
        assert_eq!(found.len(), pairs.len());
        let client_end = found[0].as_ref().expect("the client's end");
        let server_end = found[1].as_ref().expect("the server's end");
        assert_eq!((client_end.local, client_end.remote), (client_at, at));
        assert_eq!((server_end.local, server_end.remote), (at, client_at));
        assert_eq!(client_end.state, TcpState::Established);
        assert_eq!(inode_of(&client), format!("socket:[{}]", client_end.inode));
        assert_eq!(inode_of(&server), format!("socket:[{}]", server_end.inode));
        let server_info = server_end.info.as_ref().expect("the server end's tcp_info");
        assert_eq!(server_info.bytes_received, Some(3000), "{server_info:?}");
        let direct = sample(&server, false).expect("getsockopt(TCP_INFO) on the server end");
        assert_eq!(
            (direct.state, direct.bytes_received),
            (server_info.state, server_info.bytes_received)
        );
        assert!(found[2].is_none(), "the listener is not the pair's socket: {:?}", found[2]);
        assert!(found[3].is_none(), "a TIME_WAIT end is not sampled: {:?}", found[3]);
        assert!(found[4..pairs.len() - 1].iter().all(Option::is_none));
        let last = found[pairs.len() - 1].as_ref().expect("the client's end again");
        assert_eq!(last.inode, client_end.inode);
        assert_eq!(exact(&[]).expect("nothing asked"), Vec::new());
    }

    /// A server on `[::]` takes an IPv4 connection on an IPv6 socket: the IPv4 pair the
    /// packets show finds it (its addresses IPv4-mapped), as an IPv6 pair finds an IPv6 one.
    #[test]
    fn the_kernel_answers_for_ipv4_mapped_and_ipv6_sockets() {
        let listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0)).expect("bind [::]");
        let port = listener.local_addr().expect("address").port();
        let at = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let client = TcpStream::connect(at).expect("connect over IPv4");
        let (_server, _) = listener.accept().expect("accept");
        let client_at = client.local_addr().expect("client address");
        let found = exact(&[(at, client_at)]).expect("ask");
        let server_end = found[0].as_ref().expect("the server's IPv6 socket");
        assert_eq!(server_end.local, addr(&format!("[::ffff:127.0.0.1]:{port}")));

        let at6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
        let client6 = TcpStream::connect(at6).expect("connect over IPv6");
        let (_server6, _) = listener.accept().expect("accept");
        let client6_at = client6.local_addr().expect("client address");
        let found = exact(&[(client6_at, at6), (at6, client6_at)]).expect("ask");
        assert!(found.iter().all(Option::is_some), "{found:#?}");
    }
}
