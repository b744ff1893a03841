//! The emulated link seen from outside the relay, for `cargo xtask bench link`: this process
//! joins the probe's two network namespaces and opens a packet tap (`AF_PACKET`) in each. The
//! sending namespace's tap sees each packet as its kernel hands it to the TUN device (before the
//! relay reads it); the receiving namespace's tap sees it as that kernel takes it in from its TUN
//! device (after the relay wrote it). The difference of the two kernel timestamps is the packet's
//! delay through the link, measured without the relay's clock or bookkeeping.
//!
//! Needs root: joining another process's network namespace takes CAP_SYS_ADMIN over it.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io;
use std::mem::{size_of, size_of_val};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ackscope_shared::packet;

/// The client namespace's address (probe/src/emulate/mod.rs `CLIENT_IP`).
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 44, 0, 1);

/// One TCP/IPv4 packet as a tap saw it.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    /// CLOCK_MONOTONIC nanoseconds (the kernel's realtime stamp, converted with the offset
    /// measured as it was read).
    pub at_ns: i128,
    pub client_to_server: bool,
    /// The IP packet's length (what the link's serializer counts).
    pub bytes: u32,
    key: Key,
}

/// What tells two copies of one packet apart from every other: addresses, IP id, TCP sequence
/// and acknowledgement numbers, length and flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    id: u16,
    seq: u32,
    ack: u32,
    len: u16,
    flags: u8,
}

/// What the taps saw: packets leaving a namespace (`sent`) and entering one (`arrived`).
#[derive(Default)]
pub struct Tapped {
    pub sent: Vec<Seen>,
    pub arrived: Vec<Seen>,
}

/// A sent packet and its arrival, in monotonic nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Crossing {
    pub client_to_server: bool,
    pub sent_ns: i128,
    pub arrived_ns: i128,
    pub bytes: u32,
}

impl Tapped {
    /// Pairs each arrival with the earliest unpaired sending of the same packet. Returns the
    /// crossings in sending order and the packets sent that never arrived (dropped by the
    /// link's queue or still in it at the end).
    pub fn crossings(&self) -> (Vec<Crossing>, Vec<Seen>) {
        let mut sent: Vec<Seen> = self.sent.clone();
        sent.sort_by_key(|s| s.at_ns);
        let mut waiting: HashMap<Key, VecDeque<usize>> = HashMap::new();
        for (index, seen) in sent.iter().enumerate() {
            waiting.entry(seen.key).or_default().push_back(index);
        }
        let mut arrived_at: Vec<Option<i128>> = vec![None; sent.len()];
        let mut arrived: Vec<Seen> = self.arrived.clone();
        arrived.sort_by_key(|s| s.at_ns);
        for seen in &arrived {
            if let Some(index) = waiting.get_mut(&seen.key).and_then(VecDeque::pop_front) {
                arrived_at[index] = Some(seen.at_ns);
            }
        }
        let mut crossings = Vec::new();
        let mut lost = Vec::new();
        for (seen, arrived) in sent.iter().zip(arrived_at) {
            match arrived {
                Some(arrived_ns) => crossings.push(Crossing {
                    client_to_server: seen.client_to_server,
                    sent_ns: seen.at_ns,
                    arrived_ns,
                    bytes: seen.bytes,
                }),
                None => lost.push(*seen),
            }
        }
        (crossings, lost)
    }
}

/// Taps running in the namespaces of one probe process.
pub struct Taps {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<Tapped>>>,
}

impl Taps {
    /// Waits (up to `within`) for the probe `pid` to have threads in two network namespaces
    /// other than this process's, and opens a tap in each.
    pub fn attach(pid: u32, within: Duration) -> Result<Taps, String> {
        let own =
            fs::read_link("/proc/self/ns/net").map_err(|e| format!("/proc/self/ns/net: {e}"))?;
        let deadline = Instant::now() + within;
        let namespaces = loop {
            let found = namespaces_of(pid, &own);
            if found.len() >= 2 {
                break found;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the probe (pid {pid}) made no two network namespaces within {within:?}"
                ));
            }
            thread::sleep(Duration::from_micros(500));
        };
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for path in namespaces.into_values() {
            let file = fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let stop = Arc::clone(&stop);
            let (ready, started) = std::sync::mpsc::channel();
            threads.push(thread::spawn(move || tap(file, &stop, ready)));
            started
                .recv()
                .map_err(|_| "a tap thread ended before it started".to_string())?
                .map_err(|e| format!("opening a tap in {}: {e}", path.display()))?;
        }
        Ok(Taps { stop, threads })
    }

    /// Stops the taps and returns what they saw.
    pub fn finish(self) -> Result<Tapped, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Tapped::default();
        for thread in self.threads {
            let tapped = thread
                .join()
                .map_err(|_| "a tap thread panicked".to_string())?
                .map_err(|e| format!("a tap stopped early: {e}"))?;
            all.sent.extend(tapped.sent);
            all.arrived.extend(tapped.arrived);
        }
        Ok(all)
    }
}

/// Network namespaces that `pid` holds, other than `own`, by namespace (`net:[inode]`), each
/// with a path that opens it: the probe keeps a descriptor of each of its link's namespaces
/// (its threads only pass through them), so they are found among its open files.
fn namespaces_of(pid: u32, own: &PathBuf) -> HashMap<PathBuf, PathBuf> {
    let mut found = HashMap::new();
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { return found };
    for fd in fds.flatten() {
        let path = fd.path();
        if let Ok(target) = fs::read_link(&path) {
            if target.to_string_lossy().starts_with("net:[") && &target != own {
                found.entry(target).or_insert(path);
            }
        }
    }
    found
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

fn set_int(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, (&value as *const i32).cast(), size_of::<i32>() as u32)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error())
    }
}

/// The tap thread: joins the namespace `file` names, opens a packet socket there and reads
/// until `stop`. Says on `ready` whether the socket opened.
fn tap(
    file: fs::File,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<io::Result<()>>,
) -> io::Result<Tapped> {
    let opened = (|| {
        // SAFETY: setns on a descriptor of a network namespace moves only this thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(last_error());
        }
        let all = i32::from((libc::ETH_P_ALL as u16).to_be());
        // SAFETY: plain socket creation; the descriptor is owned right after.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, all) };
        if fd < 0 {
            return Err(last_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 64 << 20);
        Ok(socket)
    })();
    let socket = match opened {
        Ok(socket) => {
            let _ = ready.send(Ok(()));
            socket
        }
        Err(e) => {
            let _ = ready.send(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    let mut tapped = Tapped::default();
    let mut batch = Batch::new();
    while !stop.load(Ordering::Relaxed) {
        let received = batch.receive(socket.as_raw_fd())?;
        if received == 0 {
            // The kernel has stamped the packets already: waking for each one would take the
            // CPU the relay needs (on two cores it made the relay's own p99 lateness 7 times
            // worse). Drain, then sleep.
            thread::sleep(DRAINED_SLEEP);
            continue;
        }
        let offset = realtime_minus_monotonic_ns();
        for index in 0..received {
            let Some((from, frame, realtime_ns)) = batch.get(index) else { continue };
            let Some(seen) = parse(frame, realtime_ns - offset) else { continue };
            if from.sll_hatype == libc::ARPHRD_LOOPBACK {
                continue;
            }
            // `sll_pkttype`: sent by this namespace, or addressed to it.
            match from.sll_pkttype {
                libc::PACKET_OUTGOING => tapped.sent.push(seen),
                libc::PACKET_HOST => tapped.arrived.push(seen),
                _ => {}
            }
        }
    }
    Ok(tapped)
}

/// How long a drained tap sleeps before it reads again.
const DRAINED_SLEEP: Duration = Duration::from_millis(2);
/// Frames read by one `recvmmsg`.
const BATCH: usize = 64;
/// Bytes of each frame kept: the IP and TCP headers.
const SNAP: usize = 128;

/// Room for [`BATCH`] frames, their addresses and timestamps, for one `recvmmsg`.
struct Batch {
    frames: Box<[[u8; SNAP]; BATCH]>,
    from: Box<[libc::sockaddr_ll; BATCH]>,
    control: Box<[[u64; 8]; BATCH]>,
    headers: Vec<libc::mmsghdr>,
    iovecs: Vec<libc::iovec>,
}

// SAFETY (of the raw pointers in `headers` and `iovecs`): they point into the boxes, which
// never move while the batch lives, and are rebuilt before every call.
unsafe impl Send for Batch {}

impl Batch {
    fn new() -> Batch {
        // SAFETY: sockaddr_ll, mmsghdr and iovec are plain data; all zeroes is valid for each.
        let (from, header, iovec) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
        Batch {
            frames: Box::new([[0; SNAP]; BATCH]),
            from: Box::new([from; BATCH]),
            control: Box::new([[0; 8]; BATCH]),
            headers: vec![header; BATCH],
            iovecs: vec![iovec; BATCH],
        }
    }

    /// Reads what is queued, up to [`BATCH`] frames, without waiting; how many.
    fn receive(&mut self, fd: i32) -> io::Result<usize> {
        for index in 0..BATCH {
            self.iovecs[index] =
                libc::iovec { iov_base: self.frames[index].as_mut_ptr().cast(), iov_len: SNAP };
            let header = &mut self.headers[index].msg_hdr;
            header.msg_name = (&mut self.from[index] as *mut libc::sockaddr_ll).cast();
            header.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
            header.msg_iov = &mut self.iovecs[index];
            header.msg_iovlen = 1;
            header.msg_control = self.control[index].as_mut_ptr().cast();
            header.msg_controllen = size_of_val(&self.control[index]) as _;
            header.msg_flags = 0;
            self.headers[index].msg_len = 0;
        }
        // SAFETY: every header points at live buffers of the stated lengths (set just above).
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.headers.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = last_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(n as usize)
    }

    /// Frame `index` of the last [`Batch::receive`]: where it came from, its first bytes and its
    /// kernel timestamp (realtime ns), if it has one.
    fn get(&self, index: usize) -> Option<(libc::sockaddr_ll, &[u8], i128)> {
        let header = &self.headers[index];
        let len = (header.msg_len as usize).min(SNAP);
        let mut stamp = None;
        // SAFETY: the header was filled by recvmmsg; the macros stay within msg_controllen.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&header.msg_hdr) };
        while !cmsg.is_null() {
            // SAFETY: a non-null header from CMSG_FIRSTHDR/NXTHDR is complete.
            let control = unsafe { &*cmsg };
            if control.cmsg_level == libc::SOL_SOCKET && control.cmsg_type == libc::SCM_TIMESTAMPNS
            {
                // SAFETY: SCM_TIMESTAMPNS carries one timespec; read without assuming alignment.
                let ts: libc::timespec =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
                stamp = Some(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec));
            }
            // SAFETY: as above.
            cmsg = unsafe { libc::CMSG_NXTHDR(&header.msg_hdr, cmsg) };
        }
        Some((self.from[index], &self.frames[index][..len], stamp?))
    }
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    // SAFETY: timespec is plain data, and clock_gettime writes one.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a live timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC now: a stamp is converted with the offset of the moment
/// it is read, so a step of the realtime clock moves only stamps read across it. Of three
/// readings, the one whose realtime read is bracketed most tightly by monotonic reads:
/// a thread preempted between two reads (tens of microseconds here) would shift a whole batch.
fn realtime_minus_monotonic_ns() -> i128 {
    (0..3)
        .map(|_| {
            let before = clock_ns(libc::CLOCK_MONOTONIC);
            let real = clock_ns(libc::CLOCK_REALTIME);
            let after = clock_ns(libc::CLOCK_MONOTONIC);
            (after - before, real - (before + after) / 2)
        })
        .min_by_key(|&(bracket, _)| bracket)
        .map_or(0, |(_, offset)| offset)
}

/// A TCP/IPv4 packet of the link (a TUN device: the frame is the IP packet), read by the parser
/// the probe's capture uses (`ackscope_shared::packet`). Its IP id and total length (what tells copies apart, and what the link's
/// serializer counts) are not in a [`packet::Packet`]: they are read from the IPv4 header that
/// the parser has checked is there.
fn parse(frame: &[u8], at_ns: i128) -> Option<Seen> {
    let packet = packet::parse_ip(frame).ok()?;
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (packet.src, packet.dst) else { return None };
    let len = u16::from_be_bytes([frame[2], frame[3]]);
    let segment = &packet.segment;
    let key = Key {
        src,
        dst,
        id: u16::from_be_bytes([frame[4], frame[5]]),
        seq: segment.seq,
        ack: segment.ack,
        len,
        flags: segment.flags,
    };
    Some(Seen { at_ns, client_to_server: src == CLIENT_IP, bytes: u32::from(len), key })
}

/// A 1500-byte client-to-server data packet with sequence number `seq`, seen at `at_ns` (for
/// tests here and of the replay).
#[cfg(test)]
pub fn seen(at_ns: i128, seq: u32) -> Seen {
    let server = Ipv4Addr::new(10, 44, 0, 2);
    let flags = ackscope_shared::event::tcp_flags::ACK;
    let key = Key { src: CLIENT_IP, dst: server, id: 7, seq, ack: 1, len: 1500, flags };
    Seen { at_ns, client_to_server: true, bytes: 1500, key }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_pair_with_their_own_sending_and_the_rest_is_lost() {
        let tapped = Tapped {
            // Two copies of seq 100 (a retransmission), one of 200 never arrives.
            sent: vec![seen(10, 100), seen(20, 200), seen(30, 100)],
            arrived: vec![seen(25, 100), seen(45, 100)],
        };
        let (crossings, lost) = tapped.crossings();
        let pairs: Vec<(i128, i128)> =
            crossings.iter().map(|c| (c.sent_ns, c.arrived_ns)).collect();
        assert_eq!(pairs, [(10, 25), (30, 45)]);
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].key.seq, 200);
    }

    #[test]
    fn parses_a_tcp_packet_and_refuses_others() {
        use ackscope_shared::event::{tcp_flags, Segment};
        let tcp = |src: IpAddr, dst: IpAddr| {
            let segment = Segment { flags: tcp_flags::ACK, seq: 9, ack: 3, ..Segment::default() };
            let packet = packet::Packet { src, dst, src_port: 40000, dst_port: 80, segment };
            packet::synthesize(&packet)
        };
        let server = Ipv4Addr::new(10, 44, 0, 2);
        let mut frame = tcp(CLIENT_IP.into(), server.into());
        frame[4..6].copy_from_slice(&77u16.to_be_bytes());
        let seen = parse(&frame, 5).expect("a TCP packet");
        assert!(seen.client_to_server);
        assert_eq!((seen.at_ns, seen.bytes), (5, 40));
        let key = Key {
            src: CLIENT_IP,
            dst: server,
            id: 77,
            seq: 9,
            ack: 3,
            len: 40,
            flags: tcp_flags::ACK,
        };
        assert_eq!(seen.key, key);
        assert!(!parse(&tcp(server.into(), CLIENT_IP.into()), 5).unwrap().client_to_server);
        frame[9] = 17;
        assert!(parse(&frame, 5).is_none(), "UDP is not the link's TCP");
        let v6 = tcp(CLIENT_IP.to_ipv6_mapped().into(), server.to_ipv6_mapped().into());
        assert!(parse(&v6, 5).is_none(), "the link is IPv4");
    }
}
