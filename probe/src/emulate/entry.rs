//! When each packet entered the link: the moment the sending namespace's kernel handed it to
//! the TUN device, as that kernel stamped it.
//!
//! The relay reads a packet some time after that: at once when it is running, but on a busy
//! machine it can be kept off the CPU for a few milliseconds (on a kernel without full
//! preemption even a real-time thread waits for another thread's system call to finish). Timed
//! by that read, a packet that found the link idle starts its serialization late, and on a
//! saturated link every packet queued behind it inherits the delay until the queue next drains:
//! one late read made every packet of a bulk run 1.4 ms late (docs/BENCHMARKS-LOG.md, "The
//! relay's entry times"). Timed by the kernel's stamp, the link's queue and delay run from when
//! the packet really arrived; a late read delays only the packets already due while the relay
//! was away.
//!
//! Only links with a rate have the taps: without a serializer a packet read late is only itself
//! late, and the taps cost the relay a fifth of its top rate of plain packets (every packet
//! sent is copied into a ring, every packet written runs the filter), which buys less there.
//!
//! The stamps come from a packet tap on the TUN device (`AF_PACKET` with a `TPACKET_V2` ring):
//! the kernel stamps each packet and copies its first bytes into the ring just before it puts
//! the packet in the device's queue, so a packet the relay reads always has its stamp waiting.
//! A classic BPF filter keeps only the packets the namespace sends, and only their headers.
//! A ring, not a socket queue: the kernel writes each stamp straight into memory the relay
//! reads, with no buffer kept per packet and no system call to fetch it, and it stamps only
//! what it copies, where `SO_TIMESTAMPNS` would have every packet the host receives stamped (as
//! a queued socket the taps took a third of a fast link's goodput, as a ring a fifth:
//! docs/BENCHMARKS-LOG.md, "The relay's entry times"). `TPACKET_V2`, not V3: each frame is the
//! relay's as soon as it is written, where V3 hands over whole blocks, up to its timeout after
//! their first packet.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

use crate::capture::{
    attach_program, bind_to_device, map_rx_ring, ClockOffset, Instruction, TpacketReq,
};
use crate::net::record::Clock;

/// The bytes of a packet that pair a stamp with the packet read: the IP header without options
/// and the TCP ports and sequence number (a packet's IP id, length and checksum alone already
/// tell packets apart; the rest makes a mistake impossible in practice).
const KEY_BYTES: usize = 28;
/// The ring: frames of 128 bytes (the frame header, the address, and [`KEY_BYTES`] of the
/// packet fit), 32 to a page, 4,096 in all (512 KiB): room for the stamps of milliseconds of
/// a saturated link's packets while the relay is away. A stamp that finds the ring full is
/// lost, and its packet is timed by its read.
const FRAME_BYTES: u32 = 128;
const BLOCK_BYTES: u32 = 4096;
const FRAMES: u32 = 4096;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
// Offsets into `struct tpacket2_hdr`.
const FRAME_STATUS: usize = 0;
const FRAME_SNAPLEN: usize = 8;
const FRAME_MAC: usize = 12;
const FRAME_SEC: usize = 16;
const FRAME_NSEC: usize = 20;
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
    /// Kept open: the ring lives as long as the socket.
    _socket: OwnedFd,
    ring: Ring,
    pending: Pending,
}

/// The tap's memory-mapped ring of [`FRAMES`] frames; unmapped when dropped.
struct Ring {
    base: NonNull<u8>,
    next: u32,
}

// SAFETY: the mapping is owned by this value alone; the kernel's side of the sharing is by each
// frame's status word, read and written with fences.
unsafe impl Send for Ring {}

impl Ring {
    fn map(fd: RawFd) -> io::Result<Ring> {
        let request = TpacketReq {
            block_size: BLOCK_BYTES,
            block_nr: FRAMES * FRAME_BYTES / BLOCK_BYTES,
            frame_size: FRAME_BYTES,
            frame_nr: FRAMES,
        };
        let base = map_rx_ring(fd, TPACKET_V2, &request, (FRAMES * FRAME_BYTES) as usize, false)?;
        Ok(Ring { base, next: 0 })
    }

    fn read_u32(frame: *const u8, offset: usize) -> u32 {
        // SAFETY: every offset passed is within the frame's header; the kernel may write the
        // frame concurrently until it hands it over, hence the volatile read.
        unsafe { std::ptr::read_volatile(frame.add(offset).cast::<u32>()) }
    }

    /// Calls `each` with the first bytes and the realtime stamp of every frame the kernel has
    /// handed over since the last call, in order, and gives the frames back.
    fn take(&mut self, mut each: impl FnMut(&[u8], i128)) {
        for _ in 0..FRAMES {
            // SAFETY: next < FRAMES, so the frame lies within the mapping.
            let frame = unsafe { self.base.as_ptr().add((self.next * FRAME_BYTES) as usize) };
            if Ring::read_u32(frame, FRAME_STATUS) & TP_STATUS_USER == 0 {
                return;
            }
            // The frame was written before its status: read it after.
            fence(Ordering::Acquire);
            let mac = usize::from(Ring::read_u32(frame, FRAME_MAC) as u16);
            let snap = Ring::read_u32(frame, FRAME_SNAPLEN) as usize;
            if mac + snap <= FRAME_BYTES as usize {
                let seconds = i128::from(Ring::read_u32(frame, FRAME_SEC));
                let nanos = i128::from(Ring::read_u32(frame, FRAME_NSEC));
                // SAFETY: mac + snap is within the frame (checked just above); the kernel does
                // not write a frame it handed over until it gets it back.
                let bytes = unsafe { std::slice::from_raw_parts(frame.add(mac), snap) };
                each(bytes, seconds * 1_000_000_000 + nanos);
            }
            // Everything read from the frame is read before the kernel may reuse it.
            fence(Ordering::Release);
            // SAFETY: the status word is the frame's first; volatile, the kernel reads it.
            unsafe { std::ptr::write_volatile(frame.cast::<u32>(), TP_STATUS_KERNEL) };
            self.next = (self.next + 1) % FRAMES;
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`, which nothing uses after this.
        unsafe { libc::munmap(self.base.as_ptr().cast(), (FRAMES * FRAME_BYTES) as usize) };
    }
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
        let ring = Ring::map(fd)?;
        bind_to_device(fd, device, libc::ETH_P_ALL as u16)?;
        Ok(EntryTap { _socket: socket, ring, pending: Pending::default() })
    }

    /// When the kernel handed `packet` (its IP bytes, as read from the device) to the device,
    /// on the run's clock; `None` if the tap has no stamp of it.
    pub fn entered(&mut self, packet: &[u8], clock: &Clock) -> Option<u64> {
        self.pending.claim(packet).or_else(|| {
            self.read_stamps(clock);
            self.pending.claim(packet)
        })
    }

    /// Moves the stamps in the ring to `pending`, on the run's clock: converted with the offset
    /// of the moment they are read, so a step of the realtime clock moves only the stamps taken
    /// before it and read after it (by at most that step).
    fn read_stamps(&mut self, clock: &Clock) {
        let offset = ClockOffset::measure_with(clock, 4);
        let pending = &mut self.pending;
        self.ring.take(|first_bytes, realtime_ns| {
            pending.push(first_bytes, offset.to_run_ns(realtime_ns));
        });
    }
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
