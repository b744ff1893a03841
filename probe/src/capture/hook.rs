//! The lo capture through the kernel's ingress hook (tcx, Linux 6.6 and later): a small eBPF
//! program on lo's ingress copies the headers of each of the run's TCP segments, with a
//! CLOCK_MONOTONIC stamp, into a BPF ring buffer the capture thread reads without a system call.
//!
//! One file, though long: the program's instructions, the bpf(2) attributes with their layout
//! checks and the ring's reader must agree byte for byte, so they are read together.
//!
//! Why not only the packet socket ([`super::ring`]): on loopback every packet the tap copies is
//! paid for by the sending thread, and a packet socket's tap is long (the socket's filter, its
//! room check, its lock and block lock, the address field's header parse, a realtime clock
//! read, three indirect calls, each a retpoline on mitigated CPUs). The hook runs one program
//! that filters and copies in a few dozen instructions: pinned to one CPU, a captured
//! ping-pong keeps 0.916-0.927 of its rate this way, 0.889-0.897 with the packet socket
//! (docs/BENCHMARKS-LOG.md, `bench capture`). The hook needs CAP_BPF and CAP_NET_ADMIN (root); where it is refused,
//! or on an older kernel, the capture falls back to the packet socket.
//!
//! The program is written out here in eBPF instructions (linux/bpf.h, stable uapi): no compiler,
//! no loader library. It keeps what the packet socket's filter keeps: IPv4 TCP to or from the
//! run's port (or a watch's ports, up to [`MAX_PORTS`]), first fragments only, headers and no
//! payload. The ports are read from a map the capture sets once the run's server has one;
//! until then they are 0, which no segment carries.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::bpf::*;

const PROG_TYPE_SCHED_CLS: u32 = 3;
const ATTACH_TCX_INGRESS: u32 = 46;

/// The ring buffer's data: a power of two of pages. 8 MiB, room for 52,000 segments while the
/// capture thread is off the CPU.
const RING_BYTES: u32 = 8 << 20;
/// The longest headers kept: Ethernet 14, IP with the longest options 60, TCP with the longest 60.
const MAX_HEADERS: usize = 134;
/// A record: the stamp (8 bytes), the header bytes copied (4), 4 spare, then room for the
/// longest headers, to a multiple of 8 (the ring's own alignment).
const RECORD_HEADERS_AT: usize = 16;
const RECORD_BYTES: usize = RECORD_HEADERS_AT + MAX_HEADERS.next_multiple_of(8);
/// Slots of the settings map: the ports kept, four to a slot (each in network order), and
/// segments dropped for a full ring.
const SLOT_PORTS: u32 = 0;
const SLOT_DROPS: u32 = 1;
const SLOT_MORE_PORTS: u32 = 2;
/// The most ports the program keeps: four in each of the two slots.
pub const MAX_PORTS: usize = 8;
/// Where the program copies the two port slots on its stack.
const PORTS_AT: [(u32, i16); 2] = [(SLOT_PORTS, -16), (SLOT_MORE_PORTS, -24)];
/// How often the capture thread reads the ring (records do not wake it: a wake-up per record
/// would cost the run a context switch per segment).
pub const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(2);

/// `TCX_NEXT`: the packet goes on to the next program on the hook, or on its way.
const TCX_NEXT: i32 = -1;
/// `struct __sk_buff` fields: the packet's first byte and the end of its linear part.
const SKB_DATA: i16 = 76;
const SKB_DATA_END: i16 = 80;

/// Where a jump goes, patched once the program is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    /// A segment of the run's: copy it.
    Keep,
    /// The ring is full: count it.
    Dropped,
    /// Not the run's (or done with): on its way.
    Pass,
}

/// The program (see the module docs). Registers: r6 the packet's `__sk_buff`, r7 its first
/// byte, r8 the end of its linear part (the headers on loopback), r9 the length of the
/// headers; r1-r5 are the helpers' arguments and scratch, r0 their result. The ports kept are
/// copied to the stack (16 bytes below its top) before the packet is read.
fn program(settings: RawFd, ring: RawFd) -> Vec<Insn> {
    // Packet fields are loaded as they lie in memory, and the constants they are compared with
    // are written the same way (the instructions themselves are packed for little-endian
    // hosts: [`Hook::attach`]).
    let ipv4 = i32::from(u16::from_ne_bytes([0x08, 0x00]));
    let later_fragment = i32::from(u16::from_ne_bytes([0x1f, 0xff]));
    let mut a = Assembler::new();
    a.op(MOV_X, 6, 1, 0, 0);
    // The ports kept (0 until the run's port is known: no segment matches), each slot's four
    // copied to the stack.
    for (slot, at) in PORTS_AT {
        a.op(ST_W, 10, 0, -4, slot as i32);
        a.op(MOV_X, 2, 10, 0, 0);
        a.op(ADD_K, 2, 0, 0, -4);
        a.map(1, settings);
        a.op(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM);
        a.jump(JEQ_K, 0, 0, 0, Label::Pass);
        a.op(LDX_DW, 1, 0, 0, 0);
        a.op(STX_DW, 10, 1, at, 0);
    }
    a.op(LDX_W, 7, 6, SKB_DATA, 0);
    a.op(LDX_W, 8, 6, SKB_DATA_END, 0);
    // Ethernet and a minimal IP header are there.
    a.op(MOV_X, 2, 7, 0, 0);
    a.op(ADD_K, 2, 0, 0, 14 + 20);
    a.jump(JGT_X, 2, 8, 0, Label::Pass);
    a.op(LDX_H, 2, 7, 12, 0);
    a.jump(JNE_K, 2, 0, ipv4, Label::Pass);
    a.op(LDX_B, 2, 7, 23, 0);
    a.jump(JNE_K, 2, 0, 6, Label::Pass);
    a.op(LDX_H, 2, 7, 20, 0);
    a.op(AND_K, 2, 0, 0, later_fragment);
    a.jump(JNE_K, 2, 0, 0, Label::Pass);
    // The IP header's length (20 to 60 bytes), version 4.
    a.op(LDX_B, 2, 7, 14, 0);
    a.op(MOV_X, 3, 2, 0, 0);
    a.op(RSH_K, 3, 0, 0, 4);
    a.jump(JNE_K, 3, 0, 4, Label::Pass);
    a.op(AND_K, 2, 0, 0, 0x0f);
    a.op(LSH_K, 2, 0, 0, 2);
    a.jump(JLT_K, 2, 0, 20, Label::Pass);
    // r4: the TCP header; its first 20 bytes are there.
    a.op(MOV_X, 4, 7, 0, 0);
    a.op(ADD_K, 4, 0, 0, 14);
    a.op(ADD_X, 4, 2, 0, 0);
    a.op(MOV_X, 3, 4, 0, 0);
    a.op(ADD_K, 3, 0, 0, 20);
    a.jump(JGT_X, 3, 8, 0, Label::Pass);
    // Either port (source, then destination) is one kept.
    for field in [0, 2] {
        a.op(LDX_H, 3, 4, field, 0);
        for (_, at) in PORTS_AT {
            for place in 0..4 {
                a.op(LDX_H, 5, 10, at + 2 * place, 0);
                a.jump(JEQ_X, 3, 5, 0, Label::Keep);
            }
        }
    }
    a.jump(JA, 0, 0, 0, Label::Pass);
    let keep = a.here();
    // r9: the headers' length: Ethernet, IP, TCP (its data offset, in words, high nibble).
    a.op(LDX_B, 9, 4, 12, 0);
    a.op(RSH_K, 9, 0, 0, 2);
    a.op(AND_K, 9, 0, 0, 0x3c);
    a.op(ADD_K, 9, 0, 0, 14);
    a.op(ADD_X, 9, 2, 0, 0);
    a.reserve(ring, RECORD_BYTES, Label::Dropped);
    a.op(MOV_X, 7, 0, 0, 0);
    a.op(CALL, 0, 0, 0, FN_KTIME_GET_NS);
    a.op(STX_DW, 7, 0, 0, 0);
    a.op(STX_W, 7, 9, 8, 0);
    a.op(MOV_X, 1, 6, 0, 0);
    a.op(MOV_K, 2, 0, 0, 0);
    a.op(MOV_X, 3, 7, 0, 0);
    a.op(ADD_K, 3, 0, 0, RECORD_HEADERS_AT as i32);
    a.op(MOV_X, 4, 9, 0, 0);
    a.op(CALL, 0, 0, 0, FN_SKB_LOAD_BYTES);
    // Headers the packet does not have (a TCP length past its end): an empty record.
    a.op(JEQ_K, 0, 0, 1, 0);
    a.op(ST_W, 7, 0, 8, 0);
    a.submit(7);
    a.jump(JA, 0, 0, 0, Label::Pass);
    let dropped = a.here();
    a.count(settings, SLOT_DROPS, -4);
    let pass = a.here();
    a.op(MOV_K, 0, 0, 0, TCX_NEXT);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish(|label| match label {
        Label::Keep => keep,
        Label::Dropped => dropped,
        Label::Pass => pass,
    })
}

/// The program on lo's ingress hook and the ring buffer it fills. Dropping it detaches the
/// program (the link is this process's: nothing is left on lo if it exits or crashes).
pub struct Hook {
    settings: OwnedFd,
    _link: OwnedFd,
    _program: OwnedFd,
    ring: Ring,
    /// Drops already reported by [`Hook::dropped_since`].
    dropped_reported: u64,
    /// Records read without headers since the last [`Hook::dropped_since`].
    unreadable: u64,
}

impl Hook {
    /// Loads the program and attaches it to lo's ingress, keeping nothing until
    /// [`Hook::keep_port`].
    pub fn attach() -> io::Result<Hook> {
        supported()?;
        let ring = Ring::create(RING_BYTES)?;
        let settings = map_create(MAP_TYPE_ARRAY, 4, 8, 3)?;
        let kind = ProgramKind {
            prog_type: PROG_TYPE_SCHED_CLS,
            expected_attach_type: ATTACH_TCX_INGRESS,
            attach_btf_id: 0,
        };
        let program = load(&kind, &program(settings.as_raw_fd(), ring.fd()))?;
        // SAFETY: the argument is a NUL-terminated string.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if lo == 0 {
            return Err(io::Error::last_os_error());
        }
        let link = link(&program, lo, ATTACH_TCX_INGRESS)?;
        Ok(Hook {
            settings,
            _link: link,
            _program: program,
            ring,
            dropped_reported: 0,
            unreadable: 0,
        })
    }

    /// Keeps the TCP segments to or from `port` from now on.
    pub fn keep_port(&self, port: u16) -> io::Result<()> {
        self.keep_ports(&[port])
    }

    /// Keeps the TCP segments to or from any of `ports` (one to [`MAX_PORTS`]) from now on.
    pub fn keep_ports(&self, ports: &[u16]) -> io::Result<()> {
        let Some(&first) = ports.first().filter(|_| ports.len() <= MAX_PORTS) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("lo's ingress hook keeps 1 to {MAX_PORTS} ports, not {}", ports.len()),
            ));
        };
        // Places past the ports repeat the first: a 0 would keep segments of port 0.
        let slot = |from: usize| {
            let mut bytes = [0u8; 8];
            for (place, chunk) in bytes.chunks_mut(2).enumerate() {
                let port = ports.get(from + place).copied().unwrap_or(first);
                chunk.copy_from_slice(&port.to_be_bytes());
            }
            u64::from_ne_bytes(bytes)
        };
        map_update(&self.settings, SLOT_PORTS, slot(0))?;
        map_update(&self.settings, SLOT_MORE_PORTS, slot(4))
    }

    /// Segments the program could not write for a full ring, or wrote without their headers,
    /// since the last call.
    pub fn dropped_since(&mut self) -> u64 {
        let total = map_lookup(&self.settings, SLOT_DROPS).unwrap_or(0);
        let new = total.saturating_sub(self.dropped_reported);
        self.dropped_reported = total;
        new + std::mem::take(&mut self.unreadable)
    }

    /// Calls `each` with the headers and CLOCK_MONOTONIC stamp of every record written since
    /// the last call, then gives their room back. Returns how many it called `each` with; a
    /// record without headers (the kernel could not copy them) is counted with the drops
    /// ([`Hook::dropped_since`]).
    pub fn take(&mut self, mut each: impl FnMut(&[u8], u64)) -> usize {
        let (mut records, mut unreadable) = (0, 0);
        self.ring.take(|record| {
            let copied = match record.get(..RECORD_HEADERS_AT) {
                Some(head) if record.len() == RECORD_BYTES => {
                    u32::from_ne_bytes(head[8..12].try_into().expect("4 bytes")) as usize
                }
                _ => 0,
            };
            let copied = copied.min(MAX_HEADERS);
            if copied == 0 {
                unreadable += 1;
                return;
            }
            let stamp = u64::from_ne_bytes(record[..8].try_into().expect("8 bytes"));
            each(&record[RECORD_HEADERS_AT..RECORD_HEADERS_AT + copied], stamp);
            records += 1;
        });
        self.unreadable += unreadable;
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackscope_shared::packet::parse_ethernet;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    /// Nothing reads the ring while a ping-pong sends more segments than it holds: the program
    /// keeps what fits, counts the rest as dropped (none is lost uncounted), and once read the
    /// ring keeps segments again.
    #[test]
    #[ignore = "needs root (lo's ingress hook): cargo xtask test runs it as root"]
    fn a_full_ring_counts_what_it_could_not_keep_and_keeps_the_rest() {
        // SAFETY: geteuid() cannot fail and has no side effects.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "lo's ingress hook needs root: run this test as root (cargo xtask test does)"
        );
        let mut hook = Hook::attach().expect("root may attach to lo's ingress");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        hook.keep_port(port).unwrap();
        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.set_nodelay(true).unwrap();
        server.set_nodelay(true).unwrap();
        // 8 MiB of 160-byte records hold 52,428: 40,000 exchanges send 80,000 segments (and
        // the handshake's three), each carrying its ACK.
        let exchanges = 40_000u64;
        let mut buf = [7u8; 64];
        let mut exchange = |client: &mut TcpStream, server: &mut TcpStream| {
            client.write_all(&buf).unwrap();
            server.read_exact(&mut buf).unwrap();
            server.write_all(&buf).unwrap();
            client.read_exact(&mut buf).unwrap();
        };
        for _ in 0..exchanges {
            exchange(&mut client, &mut server);
        }
        let (mut kept, mut ours) = (0u64, 0u64);
        let records = hook.take(|headers, stamp| {
            kept += 1;
            let packet = parse_ethernet(headers).expect("the headers of a TCP segment");
            ours += u64::from((packet.src_port == port || packet.dst_port == port) && stamp > 0);
        });
        let dropped = hook.dropped_since();
        eprintln!("{records} records read, {dropped} dropped");
        assert_eq!(records as u64, kept);
        assert_eq!(ours, kept, "every record is one of the run's segments, stamped");
        assert!(kept >= 50_000 && dropped >= 20_000, "{kept} kept, {dropped} dropped");
        // Each segment kept or counted: the exchanges' and the handshake's, and the few pure
        // ACKs the kernel sends besides (a delayed ACK that fired before the answer).
        let sent = 2 * exchanges + 3;
        assert!((sent..sent + 100).contains(&(kept + dropped)), "{kept} + {dropped} of {sent}");
        // Read, the ring has room again.
        exchange(&mut client, &mut server);
        assert_eq!(hook.take(|_, _| {}), 2);
        assert_eq!(hook.dropped_since(), 0);
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_by_passing_the_packet_on() {
        let code = program(3, 4);
        crate::bpf::checks::jumps_forward_inside(&code);
        crate::bpf::checks::ends_returning(&code, TCX_NEXT);
        // Each map is named by its descriptor, in a two-instruction immediate.
        let maps: Vec<i32> = code.iter().filter(|i| i.code == LD_IMM_DW).map(|i| i.imm).collect();
        assert_eq!(maps, [3, 3, 4, 3]);
    }
}
