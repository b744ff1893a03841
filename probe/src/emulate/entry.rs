//! When each packet entered the link: the moment the sending namespace's kernel handed it to
//! the TUN device, as that kernel stamped it.
//!
//! The relay reads a packet some time after that: at once when it is running, but on a busy
//! machine it can be kept off the CPU for a few milliseconds (on a kernel without full
//! preemption even a real-time thread waits for another thread's system call to finish). Timed
//! by that read, a packet that found the link idle starts its serialization late, and on a
//! saturated link every packet queued behind it inherits the delay until the queue next drains:
//! one late read made every packet of a bulk run 1.4 ms late (docs/BENCHMARKS.md, "The
//! relay's entry times"). Timed by the kernel's stamp, the link's queue and delay run from when
//! the packet really arrived; a late read delays only the packets already due while the relay
//! was away.
//!
//! The stamps come from a packet tap on the TUN device (`AF_PACKET`, `SO_TIMESTAMPNS`): the
//! kernel stamps and queues a copy of each packet's first bytes for the tap just before it puts
//! the packet in the device's queue, so a packet the relay reads always has its stamp waiting.
//! A classic BPF filter keeps only the packets the namespace sends, and only their headers.

use std::collections::VecDeque;
use std::io;
use std::mem::size_of_val;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::capture::{attach_program, bind_to_device, set_int, ClockOffset, Instruction};
use crate::net::record::Clock;

/// The bytes of a packet that pair a stamp with the packet read: the IP header without options
/// and the TCP ports and sequence number (a packet's IP id, length and checksum alone already
/// tell packets apart; the rest makes a mistake impossible in practice).
const KEY_BYTES: usize = 28;
/// Stamps read by one `recvmmsg`.
const BATCH: usize = 64;
/// Stamps kept while no packet read claims them: a packet the device dropped (its queue full)
/// leaves one behind, which a later packet read then skips. Beyond this the oldest go.
const MAX_PENDING: usize = 4096;
/// `PACKET_OUTGOING` (linux/if_packet.h): a packet this host sends.
const PACKET_OUTGOING: u32 = 4;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE` (linux/filter.h): classic BPF's load of the packet's type.
const LOAD_PACKET_TYPE: u32 = 0xFFFF_F000 + 4;

/// A stamp waiting for its packet to be read.
struct Stamp {
    key: [u8; KEY_BYTES],
    len: usize,
    /// On the run's clock.
    at_ns: u64,
}

/// The entry tap of one TUN device (see the module docs).
pub struct EntryTap {
    socket: OwnedFd,
    pending: Pending,
}

/// Stamps read from the tap and not yet claimed by a packet read from the device, in the order
/// the kernel handed the packets over (the device's queue keeps that order).
#[derive(Default)]
struct Pending(VecDeque<Stamp>);

impl Pending {
    fn push(&mut self, first_bytes: &[u8], at_ns: u64) {
        if self.0.len() == MAX_PENDING {
            self.0.pop_front();
        }
        let len = first_bytes.len().min(KEY_BYTES);
        let mut key = [0; KEY_BYTES];
        key[..len].copy_from_slice(&first_bytes[..len]);
        self.0.push_back(Stamp { key, len, at_ns });
    }

    /// The stamp of `packet`, taken with those before it (packets the device dropped, or sent
    /// as something the relay does not read); none taken if none is its.
    fn claim(&mut self, packet: &[u8]) -> Option<u64> {
        let len = packet.len().min(KEY_BYTES);
        let index = self
            .0
            .iter()
            .position(|stamp| stamp.len == len && stamp.key[..len] == packet[..len])?;
        self.0.drain(..=index).next_back().map(|stamp| stamp.at_ns)
    }
}

impl EntryTap {
    /// Opens the tap on the TUN device called `device` in the calling thread's namespace.
    pub fn open(device: &std::ffi::CStr) -> io::Result<EntryTap> {
        let all = i32::from((libc::ETH_P_ALL as u16).to_be());
        // SAFETY: plain socket creation; the descriptor is owned right after.
        let fd =
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, all) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        // The filter first: packets that arrive before it are not the namespace's sends alone.
        attach_outgoing_filter(fd)?;
        set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        // Room for a few thousand stamps while the relay is away. Forcing it needs root; in a
        // user namespace the host's net.core.rmem_max caps it (a few hundred stamps, enough for
        // milliseconds at a saturated link's packet rate; a stamp lost is a packet timed by its
        // read).
        if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 4 << 20).is_err() {
            set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20)?;
        }
        bind_to_device(fd, device, libc::ETH_P_ALL as u16)?;
        Ok(EntryTap { socket, pending: Pending::default() })
    }

    /// When the kernel handed `packet` (its IP bytes, as read from the device) to the device,
    /// on the run's clock; `None` if the tap has no stamp of it.
    pub fn entered(&mut self, packet: &[u8], clock: &Clock) -> Option<u64> {
        self.pending.claim(packet).or_else(|| {
            self.read_stamps(clock);
            self.pending.claim(packet)
        })
    }

    /// Moves the stamps queued on the socket to `pending`, on the run's clock: converted with
    /// the offset of the moment they are read, so a step of the realtime clock moves only the
    /// stamps taken before it and read after it (by at most that step).
    fn read_stamps(&mut self, clock: &Clock) {
        let mut frames = [[0u8; KEY_BYTES]; BATCH];
        let mut control = [[0u64; 8]; BATCH];
        // SAFETY: mmsghdr and iovec are plain data; all zeroes is valid for each.
        let mut headers: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut iovecs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        loop {
            for index in 0..BATCH {
                iovecs[index] =
                    libc::iovec { iov_base: frames[index].as_mut_ptr().cast(), iov_len: KEY_BYTES };
                let header = &mut headers[index].msg_hdr;
                header.msg_iov = &mut iovecs[index];
                header.msg_iovlen = 1;
                header.msg_control = control[index].as_mut_ptr().cast();
                header.msg_controllen = size_of_val(&control[index]) as _;
                header.msg_flags = 0;
                headers[index].msg_len = 0;
            }
            // SAFETY: every header points at live buffers of the stated lengths (set above).
            let n = unsafe {
                libc::recvmmsg(
                    self.socket.as_raw_fd(),
                    headers.as_mut_ptr(),
                    BATCH as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            // Nothing queued (EAGAIN) or an error: the packets read are timed by the read.
            let Ok(n) = usize::try_from(n) else { return };
            let offset = ClockOffset::measure_with(clock, 4);
            for (index, header) in headers.iter().enumerate().take(n) {
                let Some(realtime_ns) = timestamp(&header.msg_hdr) else { continue };
                // The filter keeps KEY_BYTES of each packet; a shorter packet, all of it.
                let len = (header.msg_len as usize).min(KEY_BYTES);
                self.pending.push(&frames[index][..len], offset.to_run_ns(realtime_ns));
            }
            if n < BATCH {
                return;
            }
        }
    }
}

/// The SCM_TIMESTAMPNS of a received message (CLOCK_REALTIME ns), if it carries one.
fn timestamp(header: &libc::msghdr) -> Option<i128> {
    // SAFETY: the header was filled by recvmmsg; the macros stay within msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(header) };
    while !cmsg.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/NXTHDR is complete.
        let control = unsafe { &*cmsg };
        if control.cmsg_level == libc::SOL_SOCKET && control.cmsg_type == libc::SCM_TIMESTAMPNS {
            // SAFETY: SCM_TIMESTAMPNS carries one timespec; read without assuming alignment.
            let ts: libc::timespec =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
            return Some(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec));
        }
        // SAFETY: as above.
        cmsg = unsafe { libc::CMSG_NXTHDR(header, cmsg) };
    }
    None
}

/// Keeps the packets the namespace sends, [`KEY_BYTES`] of each; refuses the ones it receives
/// (the relay's own writes).
fn attach_outgoing_filter(fd: RawFd) -> io::Result<()> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    attach_program(
        fd,
        &[
            Instruction { code: LD_W_ABS, jt: 0, jf: 0, k: LOAD_PACKET_TYPE },
            Instruction { code: JEQ_K, jt: 0, jf: 1, k: PACKET_OUTGOING },
            Instruction { code: RET_K, jt: 0, jf: 0, k: KEY_BYTES as u32 },
            Instruction { code: RET_K, jt: 0, jf: 0, k: 0 },
        ],
    )
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The first bytes of an IPv4 packet: its IP id and a TCP sequence number tell it apart.
    fn packet(id: u16, seq: u32) -> Vec<u8> {
        let mut bytes = vec![0x45, 0, 0, 40];
        bytes.extend_from_slice(&id.to_be_bytes());
        bytes.extend_from_slice(&[0x40, 0, 64, 6, 0, 0, 10, 44, 0, 1, 10, 44, 0, 2, 0, 80, 0, 81]);
        bytes.extend_from_slice(&seq.to_be_bytes());
        bytes.extend_from_slice(&[0; 12]);
        bytes
    }

    #[test]
    fn each_packet_read_takes_its_own_stamp_and_skips_those_of_packets_never_read() {
        let mut pending = Pending::default();
        let (a, dropped, b) = (packet(1, 1000), packet(2, 2448), packet(3, 3896));
        pending.push(&a[..KEY_BYTES], 10);
        pending.push(&dropped[..KEY_BYTES], 20);
        pending.push(&b[..KEY_BYTES], 30);
        assert_eq!(pending.claim(&a), Some(10));
        // The device dropped the second packet: the third's read passes its stamp by.
        assert_eq!(pending.claim(&b), Some(30));
        assert!(pending.0.is_empty());
        // A packet with no stamp (the tap fell behind) takes none, and leaves the rest.
        pending.push(&a[..KEY_BYTES], 40);
        assert_eq!(pending.claim(&packet(4, 1)), None);
        assert_eq!(pending.claim(&a), Some(40));
        // Same IP id, another segment: not the same packet.
        pending.push(&packet(5, 1)[..KEY_BYTES], 50);
        assert_eq!(pending.claim(&packet(5, 2)), None);
    }

    #[test]
    fn short_packets_pair_on_all_their_bytes_and_the_oldest_stamps_go_first() {
        let mut pending = Pending::default();
        let short = [0x45, 0, 0, 20, 0, 9];
        pending.push(&short, 1);
        assert_eq!(pending.claim(&short[..5]), None, "a different length is another packet");
        assert_eq!(pending.claim(&short), Some(1));
        for n in 0..MAX_PENDING + 1 {
            pending.push(&packet(n as u16, n as u32)[..KEY_BYTES], n as u64);
        }
        assert_eq!(pending.0.len(), MAX_PENDING);
        assert_eq!(pending.claim(&packet(0, 0)), None, "the oldest went");
        assert_eq!(pending.claim(&packet(1, 1)), Some(1));
    }
}
