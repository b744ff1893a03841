//! The kernel side of the lo capture (and of a watch's packet sockets, `crate::watch::packets`):
//! a classic BPF filter that keeps only the run's own TCP port (or a watch's ports), and a
//! TPACKET_V3 ring the kernel fills with whole blocks of packets.
//!
//! Without them every loopback packet on the host is copied to the capture socket, one
//! `recvmsg` each. With them the kernel drops other traffic before copying anything, copies the
//! headers of each kept packet (at most 134 bytes) into a memory-mapped block, and hands a
//! block over when it is full or [`RETIRE_AFTER_MS`] after its first packet: one wake-up for
//! hundreds of packets.
//!
//! The structures are written out from linux/if_packet.h and linux/filter.h (they are uapi,
//! stable since 3.2) rather than taken from `libc`, which exposes them only for some targets.

use std::io;
use std::mem::size_of;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

/// A block is handed over this long after its first packet even if it is not full, so a live
/// view keeps up with a slow run.
pub const RETIRE_AFTER_MS: u32 = 4;
/// 64 blocks of 128 KiB: 8 MiB, room for about 35,000 packets while the thread is descheduled.
const BLOCK_BYTES: u32 = 128 << 10;
const BLOCKS: u32 = 64;
/// TPACKET_V3 frames have variable size; the kernel still wants a frame size that divides the
/// block (its minimum is the header plus a little).
const FRAME_BYTES: u32 = 2048;

const SO_ATTACH_FILTER: libc::c_int = 26;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;

/// `struct sock_filter`: one classic BPF instruction.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instruction {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct Program {
    len: u16,
    filter: *const Instruction,
}

// The classic BPF instructions the filter uses (linux/filter.h: class | size | mode).
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const LD_B_IND: u16 = 0x50;
const JSET_K: u16 = 0x45;
const ADD_K: u16 = 0x04;
const ADD_X: u16 = 0x0c;
const AND_K: u16 = 0x54;
const RSH_K: u16 = 0x74;
const RET_K: u16 = 0x06;
const RET_A: u16 = 0x16;

/// The filter for "IPv4 TCP to or from `port`", returning how many bytes to copy: the packet's
/// headers, Ethernet, IP and TCP, and none of its payload. It keeps what
/// `tcpdump -dd 'ip and tcp port PORT'` keeps on an Ethernet link (lo's frames have an Ethernet
/// header), refusing fragments after the first as they carry no TCP header, with two changes
/// for speed:
/// - An IP header without options (version 4, length 20: every packet of a loopback run) has
///   its ports and TCP header length read at fixed offsets. The kernel compiles a fixed-offset
///   load inline; a load after the header's variable length (tcpdump's only path, kept here
///   for IP options) is a call into the kernel.
/// - The length returned is the headers' own, 54 bytes to 134 (Ethernet 14, IP with the
///   longest options 60, TCP with the longest 60), not a fixed snap length: the payload is not
///   needed (lengths come from the IP header), and on loopback it sits in pages apart from the
///   headers, which a copy reaching into it maps and reads for every packet
///   (docs/BENCHMARKS-LOG.md, `bench capture`).
pub fn tcp_port_filter(port: u16) -> Vec<Instruction> {
    tcp_ports_filter(&[port])
}

/// [`tcp_port_filter`] for TCP to or from any of `ports` (at most [`MAX_FILTER_PORTS`]; none
/// keeps nothing): each port is one more comparison on each of the filter's two paths, so one
/// socket takes a watch's every port.
pub fn tcp_ports_filter(ports: &[u16]) -> Vec<Instruction> {
    let ports: Vec<u32> = match ports {
        // Port 0 is no TCP connection's.
        [] => vec![0],
        ports => ports.iter().take(MAX_FILTER_PORTS).map(|&p| u32::from(p)).collect(),
    };
    let n = ports.len();
    // Where the jumps go: the fixed-offset path's accept, the path for IP options, its accept,
    // and the refusal, the last instruction (n = 1 lays out as 12, 17, 22, 28).
    let accept_fixed = 10 + 2 * n;
    let options = accept_fixed + 5;
    let accept_options = options + 3 + 2 * n;
    let refuse = accept_options + 6;
    let mut program: Vec<Instruction> = Vec::with_capacity(refuse + 1);
    // A jump from the instruction about to be pushed to `to`, relative to the next one.
    let to = |program: &Vec<Instruction>, to: usize| (to - program.len() - 1) as u8;
    let push = |program: &mut Vec<Instruction>, code, jt, jf, k| {
        program.push(Instruction { code, jt, jf, k })
    };
    // Compares A with each port: a match jumps to `accept`, the last miss to the refusal when
    // `last`, else falls through to what follows.
    let compare = |program: &mut Vec<Instruction>, accept: usize, last: bool| {
        for (i, &port) in ports.iter().enumerate() {
            let jt = to(program, accept);
            let jf = if last && i + 1 == n { to(program, refuse) } else { 0 };
            push(program, JEQ_K, jt, jf, port);
        }
    };
    // The TCP header length is the high four bits of the byte 12 into the TCP header, in
    // 32-bit words: (byte >> 2) & 0x3c is it in bytes. The two paths end alike on purpose:
    // sharing one tail would make the common path's fixed-offset loads variable ones, each a
    // call.
    push(&mut program, LD_H_ABS, 0, 0, 12); // EtherType
    let jf = to(&program, refuse);
    push(&mut program, JEQ_K, 0, jf, 0x0800); // IPv4, else refuse
    push(&mut program, LD_B_ABS, 0, 0, 23); // IP protocol
    let jf = to(&program, refuse);
    push(&mut program, JEQ_K, 0, jf, 6); // TCP, else refuse
    push(&mut program, LD_H_ABS, 0, 0, 20); // flags and fragment offset
    let jt = to(&program, refuse);
    push(&mut program, JSET_K, jt, 0, 0x1fff); // a later fragment: refuse
    push(&mut program, LD_B_ABS, 0, 0, 14); // IP version and header length
    let jf = to(&program, options);
    push(&mut program, JEQ_K, 0, jf, 0x45); // no options: ports at fixed offsets
    push(&mut program, LD_H_ABS, 0, 0, 34); // TCP source port
    compare(&mut program, accept_fixed, false);
    push(&mut program, LD_H_ABS, 0, 0, 36); // TCP destination port
    compare(&mut program, accept_fixed, true);
    debug_assert_eq!(program.len(), accept_fixed);
    push(&mut program, LD_B_ABS, 0, 0, 46); // TCP header length
    push(&mut program, RSH_K, 0, 0, 2);
    push(&mut program, AND_K, 0, 0, 0x3c); // in bytes
    push(&mut program, ADD_K, 0, 0, 14 + 20); // after Ethernet and IP
    push(&mut program, RET_A, 0, 0, 0); // accept, the headers
    debug_assert_eq!(program.len(), options);
    push(&mut program, LDX_B_MSH, 0, 0, 14); // X = IP header length (with options)
    push(&mut program, LD_H_IND, 0, 0, 14); // TCP source port
    compare(&mut program, accept_options, false);
    push(&mut program, LD_H_IND, 0, 0, 16); // TCP destination port
    compare(&mut program, accept_options, true);
    debug_assert_eq!(program.len(), accept_options);
    push(&mut program, LD_B_IND, 0, 0, 26); // TCP header length
    push(&mut program, RSH_K, 0, 0, 2);
    push(&mut program, AND_K, 0, 0, 0x3c); // in bytes
    push(&mut program, ADD_X, 0, 0, 0); // after IP
    push(&mut program, ADD_K, 0, 0, 14); // after Ethernet
    push(&mut program, RET_A, 0, 0, 0); // accept, the headers
    debug_assert_eq!(program.len(), refuse);
    push(&mut program, RET_K, 0, 0, 0); // refuse
    program
}

/// The most ports one filter compares with: its jumps are a byte long, and the longest, from
/// the start to the refusal, passes 4 instructions a port.
pub const MAX_FILTER_PORTS: usize = 32;

/// Attaches [`tcp_port_filter`] to the packet socket `fd`.
pub fn attach_filter(fd: RawFd, port: u16) -> io::Result<()> {
    attach_program(fd, &tcp_port_filter(port))
}

/// Attaches [`tcp_ports_filter`] to the packet socket `fd`.
pub fn attach_ports_filter(fd: RawFd, ports: &[u16]) -> io::Result<()> {
    attach_program(fd, &tcp_ports_filter(ports))
}

/// Attaches the classic BPF `filter` to the socket `fd`, replacing any before it.
pub fn attach_program(fd: RawFd, filter: &[Instruction]) -> io::Result<()> {
    let len =
        u16::try_from(filter.len()).map_err(|_| io::Error::other("a BPF program too long"))?;
    let program = Program { len, filter: filter.as_ptr() };
    // SAFETY: `program` points at `filter`, both live for the call; the kernel copies the
    // program and checks every instruction before accepting it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_FILTER,
            (&program as *const Program).cast(),
            size_of::<Program>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct tpacket_req`: a ring's blocks and frames (TPACKET_V1 and V2 ask with it alone).
#[repr(C)]
pub struct TpacketReq {
    pub block_size: u32,
    pub block_nr: u32,
    pub frame_size: u32,
    pub frame_nr: u32,
}

/// `struct tpacket_req3`: `struct tpacket_req`'s fields, then V3's own.
#[repr(C)]
struct TpacketReq3 {
    ring: TpacketReq,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

// Offsets into `struct tpacket_block_desc` (version, offset_to_priv, then tpacket_hdr_v1).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
// Offsets into `struct tpacket3_hdr`.
const PKT_NEXT_OFFSET: usize = 0;
const PKT_SEC: usize = 4;
const PKT_NSEC: usize = 8;
const PKT_SNAPLEN: usize = 12;
const PKT_MAC: usize = 24;
/// `sizeof(struct tpacket3_hdr)`, aligned: the packet's `sockaddr_ll` follows it.
const PKT_HEADER_BYTES: usize = 48;
// The offset of the pkttype in the `sockaddr_ll` after it (family, protocol, ifindex, hatype,
// pkttype).
const LL_PKTTYPE: usize = PKT_HEADER_BYTES + 10;
/// The header and its `sockaddr_ll` up to the pkttype: what must lie in the block to read them.
const PKT_META_BYTES: usize = LL_PKTTYPE + 1;

/// The memory-mapped receive ring of a packet socket. Unmapped when dropped.
pub struct Ring {
    base: NonNull<u8>,
    /// Its blocks, of [`BLOCK_BYTES`] each.
    blocks: u32,
    next_block: u32,
}

// SAFETY: the mapping is owned by this value alone; the kernel's side of the sharing is by
// the block status words, read and written with fences below.
unsafe impl Send for Ring {}

/// Switches the packet socket `fd` to TPACKET `version`, asks for its receive ring with
/// `request` (the `tpacket_req` or `tpacket_req3` that version takes) and maps the ring's
/// `bytes`; with `lock`, locked in memory when RLIMIT_MEMLOCK allows it.
pub fn map_rx_ring<R>(
    fd: RawFd,
    version: libc::c_int,
    request: &R,
    bytes: usize,
    lock: bool,
) -> io::Result<NonNull<u8>> {
    super::set_int(fd, libc::SOL_PACKET, PACKET_VERSION, version)?;
    // SAFETY: `request` is a live ring request of the type `version` takes (the callers' part)
    // and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            PACKET_RX_RING,
            (request as *const R).cast(),
            size_of::<R>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let map = |flags| {
        // SAFETY: mapping the ring the kernel just allocated for `fd`, at a place of the
        // kernel's choosing, for its whole length; checked for failure below.
        unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | flags,
                fd,
                0,
            )
        }
    };
    let mut base = if lock { map(libc::MAP_LOCKED) } else { libc::MAP_FAILED };
    // MAP_LOCKED may be refused for a small RLIMIT_MEMLOCK: map without it then.
    if base == libc::MAP_FAILED {
        base = map(0);
    }
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(base.cast()).ok_or_else(|| io::Error::other("mmap gave null"))
}

/// One packet of a block: its first bytes, its kernel timestamp (CLOCK_REALTIME ns), and its
/// direction (the `sockaddr_ll` after the packet's header).
pub struct Packet<'a> {
    pub frame: &'a [u8],
    pub realtime_ns: i128,
    /// `sll_pkttype`: [`PACKET_OUTGOING`] for a packet this host sends.
    pub pkttype: u8,
}

/// `sll_pkttype` of a packet the host sends (linux/if_packet.h).
pub const PACKET_OUTGOING: u8 = 4;

impl Ring {
    /// Switches `fd` to TPACKET_V3 and maps its receive ring: 8 MiB.
    pub fn map(fd: RawFd) -> io::Result<Ring> {
        Ring::map_blocks(fd, BLOCKS)
    }

    /// [`Ring::map`] with `blocks` blocks of 128 KiB (at least 1): a smaller ring for a tap
    /// that is one of many.
    pub fn map_blocks(fd: RawFd, blocks: u32) -> io::Result<Ring> {
        let blocks = blocks.clamp(1, BLOCKS);
        let request = TpacketReq3 {
            ring: TpacketReq {
                block_size: BLOCK_BYTES,
                block_nr: blocks,
                frame_size: FRAME_BYTES,
                frame_nr: BLOCK_BYTES / FRAME_BYTES * blocks,
            },
            retire_blk_tov: RETIRE_AFTER_MS,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        let base = map_rx_ring(fd, TPACKET_V3, &request, (BLOCK_BYTES * blocks) as usize, true)?;
        Ok(Ring { base, blocks, next_block: 0 })
    }

    fn block(&self, index: u32) -> *mut u8 {
        // SAFETY (of the callers' dereferences): index < self.blocks, so the block lies within
        // the mapping of BLOCK_BYTES * self.blocks bytes.
        unsafe { self.base.as_ptr().add((index * BLOCK_BYTES) as usize) }
    }

    fn read_u32(block: *mut u8, offset: usize) -> u32 {
        // SAFETY: every offset passed is within the block (checked by the callers against
        // BLOCK_BYTES); the kernel may write concurrently, hence the volatile read.
        unsafe { std::ptr::read_volatile(block.add(offset).cast::<u32>()) }
    }

    /// Whether the next block has been handed over by the kernel.
    pub fn ready(&self) -> bool {
        let status = Ring::read_u32(self.block(self.next_block), BLOCK_STATUS);
        status & TP_STATUS_USER != 0
    }

    /// Calls `each` with every packet of the next block if the kernel has handed it over, then
    /// gives the block back. Returns the number of packets, `None` if the block is not ready.
    pub fn take_block(&mut self, mut each: impl FnMut(Packet<'_>)) -> Option<u32> {
        if !self.ready() {
            return None;
        }
        // The packets were written before the status: read them after it.
        fence(Ordering::Acquire);
        let block = self.block(self.next_block);
        let count = Ring::read_u32(block, BLOCK_NUM_PKTS);
        let mut offset = Ring::read_u32(block, BLOCK_FIRST_PKT) as usize;
        let end = BLOCK_BYTES as usize;
        for _ in 0..count {
            if offset + PKT_META_BYTES > end {
                break;
            }
            let mac = usize::from(Ring::read_u32(block, offset + PKT_MAC) as u16);
            let snap = Ring::read_u32(block, offset + PKT_SNAPLEN) as usize;
            let start = offset + mac;
            if start + snap <= end {
                let seconds = i128::from(Ring::read_u32(block, offset + PKT_SEC));
                let nanos = i128::from(Ring::read_u32(block, offset + PKT_NSEC));
                // SAFETY: start + snap is within the block (checked just above); the kernel
                // does not write a block it handed over until it gets it back.
                let frame = unsafe { std::slice::from_raw_parts(block.add(start), snap) };
                // SAFETY: within the block (offset + PKT_META_BYTES <= end, checked above).
                let pkttype = unsafe { std::ptr::read_volatile(block.add(offset + LL_PKTTYPE)) };
                let realtime_ns = seconds * 1_000_000_000 + nanos;
                each(Packet { frame, realtime_ns, pkttype });
            }
            let next = Ring::read_u32(block, offset + PKT_NEXT_OFFSET) as usize;
            if next == 0 {
                break;
            }
            offset += next;
        }
        // Everything read from the block is read before the kernel may reuse it.
        fence(Ordering::Release);
        // SAFETY: the status word is within the block; volatile, the kernel reads it.
        unsafe {
            std::ptr::write_volatile(block.add(BLOCK_STATUS).cast::<u32>(), TP_STATUS_KERNEL)
        };
        self.next_block = (self.next_block + 1) % self.blocks;
        Some(count)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`, which nothing uses after this.
        unsafe { libc::munmap(self.base.as_ptr().cast(), (BLOCK_BYTES * self.blocks) as usize) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest headers: Ethernet, IP with 40 bytes of options, TCP with 40.
    const SNAP_BYTES: u32 = 14 + 60 + 60;

    /// `tcpdump -dd 'ip and tcp port 5000'` (tcpdump 4.99, libpcap 1.10), accept length 262144.
    const TCPDUMP: [(u16, u8, u8, u32); 13] = [
        (0x28, 0, 0, 0x0000000c),
        (0x15, 0, 10, 0x00000800),
        (0x30, 0, 0, 0x00000017),
        (0x15, 0, 8, 0x00000006),
        (0x28, 0, 0, 0x00000014),
        (0x45, 6, 0, 0x00001fff),
        (0xb1, 0, 0, 0x0000000e),
        (0x48, 0, 0, 0x0000000e),
        (0x15, 2, 0, 0x00001388),
        (0x48, 0, 0, 0x00000010),
        (0x15, 0, 1, 0x00001388),
        (0x6, 0, 0, 0x00040000),
        (0x6, 0, 0, 0x00000000),
    ];

    /// Runs a classic BPF program of the instructions the filters use on `frame`, as the
    /// kernel does: a load beyond the frame refuses it.
    fn run(program: &[Instruction], frame: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let byte = |at: usize| frame.get(at).map(|&b| u32::from(b));
        let half = |at: usize| Some(byte(at)? << 8 | byte(at + 1)?);
        loop {
            let Instruction { code, jt, jf, k } = program[pc];
            let k_at = k as usize;
            pc += 1;
            let loaded = match code {
                LD_H_ABS => half(k_at),
                LD_B_ABS => byte(k_at),
                LD_H_IND => half(x as usize + k_at),
                LD_B_IND => byte(x as usize + k_at),
                LDX_B_MSH => {
                    x = byte(k_at).map_or(0, |b| (b & 0xf) * 4);
                    continue;
                }
                JEQ_K => {
                    pc += usize::from(if a == k { jt } else { jf });
                    continue;
                }
                JSET_K => {
                    pc += usize::from(if a & k != 0 { jt } else { jf });
                    continue;
                }
                RSH_K => Some(a >> k),
                AND_K => Some(a & k),
                ADD_K => Some(a.wrapping_add(k)),
                ADD_X => Some(a.wrapping_add(x)),
                RET_K => return k,
                RET_A => return a,
                other => panic!("instruction {other:#x} not in the filters"),
            };
            match loaded {
                Some(value) => a = value,
                None => return 0,
            }
        }
    }

    /// An Ethernet frame of IPv4 with `options` bytes of IP options, `protocol`, the fragment
    /// field `fragment`, then a TCP header with the ports and `tcp_options` bytes of options,
    /// and 100 bytes of payload.
    fn frame(protocol: u8, options: usize, fragment: u16, src: u16, dst: u16) -> Vec<u8> {
        frame_with(protocol, options, fragment, src, dst, 0)
    }

    fn frame_with(
        protocol: u8,
        options: usize,
        fragment: u16,
        src: u16,
        dst: u16,
        tcp_options: usize,
    ) -> Vec<u8> {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        let header = 20 + options;
        let mut ip = vec![0u8; header];
        ip[0] = 0x40 | (header / 4) as u8;
        ip[6..8].copy_from_slice(&fragment.to_be_bytes());
        ip[9] = protocol;
        // Options that read as port 5000 where the ports would be without them.
        for chunk in ip[20..].chunks_mut(2) {
            chunk.copy_from_slice(&5000u16.to_be_bytes()[..chunk.len()]);
        }
        frame.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 20 + tcp_options];
        tcp[0..2].copy_from_slice(&src.to_be_bytes());
        tcp[2..4].copy_from_slice(&dst.to_be_bytes());
        tcp[12] = (((20 + tcp_options) / 4) << 4) as u8;
        frame.extend_from_slice(&tcp);
        frame.extend_from_slice(&[0xaa; 100]);
        frame
    }

    #[test]
    fn the_filter_keeps_what_tcpdump_keeps_and_copies_the_headers_alone() {
        let tcpdump: Vec<Instruction> =
            TCPDUMP.iter().map(|&(code, jt, jf, k)| Instruction { code, jt, jf, k }).collect();
        let ours = tcp_port_filter(5000);
        let mut ipv6 = frame(6, 0, 0, 5000, 40000);
        ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
        // (name, frame, the headers' length when kept, 0 when refused)
        let cases = [
            ("to our port", frame(6, 0, 0, 40000, 5000), 14 + 20 + 20),
            ("from our port", frame(6, 0, 0, 5000, 40000), 14 + 20 + 20),
            ("TCP options", frame_with(6, 0, 0, 40000, 5000, 12), 14 + 20 + 32),
            ("the longest headers", frame_with(6, 40, 0, 5000, 40000, 40), SNAP_BYTES),
            ("another port", frame(6, 0, 0, 40000, 5001), 0),
            ("UDP on our port", frame(17, 0, 0, 40000, 5000), 0),
            ("IPv6", ipv6, 0),
            ("a later fragment", frame(6, 0, 0x0010, 40000, 5000), 0),
            ("a first fragment", frame(6, 0, 0x2000, 40000, 5000), 14 + 20 + 20),
            ("IP options, to our port", frame(6, 8, 0, 40000, 5000), 14 + 28 + 20),
            ("IP options and TCP's", frame_with(6, 8, 0, 40000, 5000, 12), 14 + 28 + 32),
            ("IP options, another port", frame(6, 4, 0, 40000, 5001), 0),
            ("cut short", frame(6, 0, 0, 40000, 5000)[..36].to_vec(), 0),
        ];
        for (name, frame, headers) in cases {
            let want = if headers > 0 { 262_144 } else { 0 };
            assert_eq!(run(&tcpdump, &frame), want, "tcpdump's program, {name}");
            assert_eq!(run(&ours, &frame), headers, "our filter, {name}");
            assert!(headers <= SNAP_BYTES, "{name}: no more than the longest headers");
        }
        // One difference, for a frame no link delivers: cut short inside its TCP header (the
        // ports there, the header's length not), tcpdump keeps what there is, the filter
        // refuses it: it holds no segment to record.
        let cut = frame(6, 0, 0, 40000, 5000)[..40].to_vec();
        assert_eq!(run(&tcpdump, &cut), 262_144);
        assert_eq!(run(&ours, &cut), 0);
    }

    #[test]
    fn a_filter_of_several_ports_keeps_each_of_them_both_ways_and_no_other() {
        let ports = [5000, 6001, 7002, 65535];
        let filter = tcp_ports_filter(&ports);
        assert_eq!(filter.len(), 25 + 4 * ports.len());
        for port in ports {
            for options in [0, 8] {
                let headers = 14 + 20 + options + 20;
                let to = frame(6, options, 0, 40000, port);
                let from = frame(6, options, 0, port, 40000);
                assert_eq!(run(&filter, &to), headers as u32, "to {port}, {options} option bytes");
                assert_eq!(run(&filter, &from), headers as u32, "from {port}, {options}");
                assert_eq!(run(&filter, &frame(17, options, 0, 40000, port)), 0, "UDP {port}");
                assert_eq!(run(&filter, &frame(6, options, 0x0010, port, 40000)), 0, "fragment");
            }
        }
        for other in [4999, 5001, 6000, 7003, 1] {
            for options in [0, 8] {
                assert_eq!(run(&filter, &frame(6, options, 0, 40000, other)), 0, "port {other}");
                assert_eq!(run(&filter, &frame(6, options, 0, other, 40000)), 0, "port {other}");
            }
        }
        // One port lays out as the capture's own filter; no port keeps nothing.
        assert_eq!(tcp_ports_filter(&[5000]), tcp_port_filter(5000));
        assert_eq!(tcp_port_filter(5000).len(), 29);
        assert_eq!(run(&tcp_ports_filter(&[]), &frame(6, 0, 0, 40000, 5000)), 0);
        // The most ports a filter takes: every jump still fits its byte.
        let most: Vec<u16> = (1..=MAX_FILTER_PORTS as u16).map(|i| 1000 + i).collect();
        let filter = tcp_ports_filter(&most);
        for &port in &most {
            assert_eq!(run(&filter, &frame(6, 8, 0, port, 40000)), 14 + 28 + 20);
        }
        assert_eq!(run(&filter, &frame(6, 8, 0, 2000, 40000)), 0);
    }
}
