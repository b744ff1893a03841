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
//! run's port, first fragments only, headers and no payload. The port is read from a map the
//! capture sets once the run's server has one; until then it is 0, which no segment carries.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const MAP_TYPE_ARRAY: u32 = 2;
const MAP_TYPE_RINGBUF: u32 = 27;
const PROG_TYPE_SCHED_CLS: u32 = 3;
const ATTACH_TCX_INGRESS: u32 = 46;
/// `BPF_OBJ_NAME_LEN`: the room for a map's or a program's name.
const OBJ_NAME_LEN: usize = 16;

// Helper functions the program calls (linux/bpf.h, `___BPF_FUNC_MAPPER`).
const FN_MAP_LOOKUP_ELEM: i32 = 1;
const FN_KTIME_GET_NS: i32 = 5;
const FN_SKB_LOAD_BYTES: i32 = 26;
const FN_RINGBUF_RESERVE: i32 = 131;
const FN_RINGBUF_SUBMIT: i32 = 132;
/// `BPF_RB_NO_WAKEUP`: the reader is not woken per record; it reads every [`POLL_EVERY`].
const RB_NO_WAKEUP: i32 = 1;

/// The ring buffer's data: a power of two of pages. 8 MiB, room for 52,000 segments while the
/// capture thread is off the CPU.
const RING_BYTES: u32 = 8 << 20;
/// The longest headers kept: Ethernet 14, IP with the longest options 60, TCP with the longest 60.
const MAX_HEADERS: usize = 134;
/// A record: the stamp (8 bytes), the header bytes copied (4), 4 spare, then room for the
/// longest headers, to a multiple of 8 (the ring's own alignment).
const RECORD_HEADERS_AT: usize = 16;
const RECORD_BYTES: usize = RECORD_HEADERS_AT + MAX_HEADERS.next_multiple_of(8);
/// The ring buffer's own record header (`BPF_RINGBUF_HDR_SZ`) and its flag bits.
const RINGBUF_HEADER: usize = 8;
const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
/// Slots of the settings map: the run's port, and segments dropped for a full ring.
const SLOT_PORT: u32 = 0;
const SLOT_DROPS: u32 = 1;
/// How often the capture thread reads the ring (records do not wake it: a wake-up per record
/// would cost the run a context switch per segment).
pub const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(2);

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Insn {
    code: u8,
    /// Destination register in the low four bits, source in the high four.
    regs: u8,
    off: i16,
    imm: i32,
}

// Instruction codes (class | size or operation | source), linux/bpf.h and linux/bpf_common.h.
const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const LDX_DW: u8 = 0x79;
const STX_W: u8 = 0x63;
const STX_DW: u8 = 0x7b;
const ST_W: u8 = 0x62;
const ATOMIC_ADD_DW: u8 = 0xdb;
const LD_IMM_DW: u8 = 0x18;
const MOV_X: u8 = 0xbf;
const MOV_K: u8 = 0xb7;
const ADD_K: u8 = 0x07;
const ADD_X: u8 = 0x0f;
const AND_K: u8 = 0x57;
const LSH_K: u8 = 0x67;
const RSH_K: u8 = 0x77;
const JA: u8 = 0x05;
const JEQ_K: u8 = 0x15;
const JNE_K: u8 = 0x55;
const JEQ_X: u8 = 0x1d;
const JNE_X: u8 = 0x5d;
const JGT_X: u8 = 0x2d;
const JLT_K: u8 = 0xa5;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
/// `BPF_PSEUDO_MAP_FD`: a 64-bit immediate that is a map's file descriptor.
const PSEUDO_MAP_FD: u8 = 1;
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

struct Assembler {
    code: Vec<Insn>,
    jumps: Vec<(usize, Label)>,
}

impl Assembler {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn { code, regs: (src << 4) | dst, off, imm });
    }

    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.jumps.push((self.code.len(), to));
        self.op(code, dst, src, 0, imm);
    }

    fn map(&mut self, dst: u8, fd: RawFd) {
        self.op(LD_IMM_DW, dst, PSEUDO_MAP_FD, 0, fd);
        self.op(0, 0, 0, 0, 0);
    }

    fn here(&self) -> usize {
        self.code.len()
    }

    fn finish(mut self, labels: impl Fn(Label) -> usize) -> Vec<Insn> {
        for (at, label) in std::mem::take(&mut self.jumps) {
            // Jumps count from the next instruction.
            let offset = labels(label) as isize - at as isize - 1;
            self.code[at].off = i16::try_from(offset).expect("a short program");
        }
        self.code
    }
}

/// The program (see the module docs). Registers: r6 the packet's `__sk_buff`, r7 its first
/// byte, r8 the end of its linear part (the headers on loopback), r9 the run's port and later
/// the length of the headers; r1-r5 are the helpers' arguments and scratch, r0 their result.
fn program(settings: RawFd, ring: RawFd) -> Vec<Insn> {
    // Packet fields are loaded as they lie in memory, and the constants they are compared with
    // are written the same way (the instructions themselves are packed for little-endian
    // hosts: [`Hook::attach`]).
    let ipv4 = i32::from(u16::from_ne_bytes([0x08, 0x00]));
    let later_fragment = i32::from(u16::from_ne_bytes([0x1f, 0xff]));
    let mut a = Assembler { code: Vec::new(), jumps: Vec::new() };
    a.op(MOV_X, 6, 1, 0, 0);
    // The run's port (0 until it is known: no segment matches).
    a.op(ST_W, 10, 0, -4, SLOT_PORT as i32);
    a.op(MOV_X, 2, 10, 0, 0);
    a.op(ADD_K, 2, 0, 0, -4);
    a.map(1, settings);
    a.op(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM);
    a.jump(JEQ_K, 0, 0, 0, Label::Pass);
    a.op(LDX_DW, 9, 0, 0, 0);
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
    // Either port is the run's.
    a.op(LDX_H, 3, 4, 0, 0);
    a.jump(JEQ_X, 3, 9, 0, Label::Keep);
    a.op(LDX_H, 3, 4, 2, 0);
    a.jump(JNE_X, 3, 9, 0, Label::Pass);
    let keep = a.here();
    // r9: the headers' length: Ethernet, IP, TCP (its data offset, in words, high nibble).
    a.op(LDX_B, 9, 4, 12, 0);
    a.op(RSH_K, 9, 0, 0, 2);
    a.op(AND_K, 9, 0, 0, 0x3c);
    a.op(ADD_K, 9, 0, 0, 14);
    a.op(ADD_X, 9, 2, 0, 0);
    a.map(1, ring);
    a.op(MOV_K, 2, 0, 0, RECORD_BYTES as i32);
    a.op(MOV_K, 3, 0, 0, 0);
    a.op(CALL, 0, 0, 0, FN_RINGBUF_RESERVE);
    a.jump(JEQ_K, 0, 0, 0, Label::Dropped);
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
    a.op(MOV_X, 1, 7, 0, 0);
    a.op(MOV_K, 2, 0, 0, RB_NO_WAKEUP);
    a.op(CALL, 0, 0, 0, FN_RINGBUF_SUBMIT);
    a.jump(JA, 0, 0, 0, Label::Pass);
    let dropped = a.here();
    a.op(ST_W, 10, 0, -4, SLOT_DROPS as i32);
    a.op(MOV_X, 2, 10, 0, 0);
    a.op(ADD_K, 2, 0, 0, -4);
    a.map(1, settings);
    a.op(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM);
    a.op(JEQ_K, 0, 0, 2, 0);
    a.op(MOV_K, 1, 0, 0, 1);
    a.op(ATOMIC_ADD_DW, 0, 1, 0, 0);
    let pass = a.here();
    a.op(MOV_K, 0, 0, 0, TCX_NEXT);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish(|label| match label {
        Label::Keep => keep,
        Label::Dropped => dropped,
        Label::Pass => pass,
    })
}

// The members of the kernel's `union bpf_attr` (linux/bpf.h, stable uapi) that the commands
// here take, one `#[repr(C)]` struct each. Each has its member's fields as far as Linux 6.6
// has them, the first kernel with tcx, which the hook needs: later kernels add fields at the
// end, and read as zero those past the size a program passes, which is what they must be here.
// Where C pads before an 8-aligned field, the struct has a `_pad` field instead, so that every
// byte passed is a field, zero unless set: the kernel refuses a command whose unused bytes are
// not zero, and padding's bytes are undefined. `__aligned_u64` fields are [`AlignedU64`], plain
// `__u64` ones `u64`. [`layout!`] fails the build unless each field lies at its offset in the
// kernel's layout and the fields fill the struct.

/// `__aligned_u64`: a 64-bit field (an address, here) that is 8-aligned on every host, as the
/// kernel lays it out.
#[repr(C, align(8))]
#[derive(Default)]
struct AlignedU64(u64);

impl AlignedU64 {
    /// The address the kernel reads or writes through.
    fn address<T>(pointer: *const T) -> AlignedU64 {
        AlignedU64(pointer as u64)
    }
}

const _: () = assert!(std::mem::size_of::<AlignedU64>() == 8);
const _: () = assert!(std::mem::align_of::<AlignedU64>() == 8);

/// Fails the build unless `$attr` is `$size` bytes with each field at its offset, and its
/// fields, every one listed, add up to its size: no padding.
macro_rules! layout {
    ($attr:ident, $size:literal, { $($field:ident: $offset:literal),+ $(,)? }) => {
        const _: () = assert!(std::mem::size_of::<$attr>() == $size);
        $(const _: () = assert!(std::mem::offset_of!($attr, $field) == $offset);)+
        const _: () = assert!(0 $(+ field_size(|attr: &$attr| &attr.$field))+ == $size);
    };
}

/// The size of a struct's field, for [`layout!`]'s check that the fields leave no padding.
const fn field_size<S, F>(_: fn(&S) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// `BPF_MAP_CREATE`'s member.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [libc::c_char; OBJ_NAME_LEN],
    map_ifindex: u32,
    btf_fd: u32,
    btf_key_type_id: u32,
    btf_value_type_id: u32,
    btf_vmlinux_value_type_id: u32,
    map_extra: u64,
}

layout!(MapCreateAttr, 72, {
    map_type: 0,
    key_size: 4,
    value_size: 8,
    max_entries: 12,
    map_flags: 16,
    inner_map_fd: 20,
    numa_node: 24,
    map_name: 28,
    map_ifindex: 44,
    btf_fd: 48,
    btf_key_type_id: 52,
    btf_value_type_id: 56,
    btf_vmlinux_value_type_id: 60,
    map_extra: 64,
});

/// The member `BPF_MAP_LOOKUP_ELEM` and `BPF_MAP_UPDATE_ELEM` take: the map, and the addresses
/// of a key and of a value the kernel reads (update) or writes (lookup).
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    /// C's padding before the 8-aligned `key`.
    _pad: u32,
    key: AlignedU64,
    /// `value`, or `next_key` in the same place for `BPF_MAP_GET_NEXT_KEY`.
    value: AlignedU64,
    flags: u64,
}

layout!(MapElemAttr, 32, { map_fd: 0, _pad: 4, key: 8, value: 16, flags: 24 });

/// `BPF_PROG_LOAD`'s member.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: AlignedU64,
    license: AlignedU64,
    log_level: u32,
    log_size: u32,
    log_buf: AlignedU64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [libc::c_char; OBJ_NAME_LEN],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: AlignedU64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: AlignedU64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    /// `attach_prog_fd`, or `attach_btf_obj_fd` in the same place.
    attach_prog_fd: u32,
    core_relo_cnt: u32,
    fd_array: AlignedU64,
    core_relos: AlignedU64,
    core_relo_rec_size: u32,
    /// Written by the kernel: the length the verifier's log needed (Linux 6.4 and later).
    log_true_size: u32,
}

layout!(ProgLoadAttr, 144, {
    prog_type: 0,
    insn_cnt: 4,
    insns: 8,
    license: 16,
    log_level: 24,
    log_size: 28,
    log_buf: 32,
    kern_version: 40,
    prog_flags: 44,
    prog_name: 48,
    prog_ifindex: 64,
    expected_attach_type: 68,
    prog_btf_fd: 72,
    func_info_rec_size: 76,
    func_info: 80,
    func_info_cnt: 88,
    line_info_rec_size: 92,
    line_info: 96,
    line_info_cnt: 104,
    attach_btf_id: 108,
    attach_prog_fd: 112,
    core_relo_cnt: 116,
    fd_array: 120,
    core_relos: 128,
    core_relo_rec_size: 136,
    log_true_size: 140,
});

/// `BPF_LINK_CREATE`'s member (`link_create`): its common fields, then the tcx part of the
/// union of the attach types' parts that follows them (the union's first 16 of 48 bytes).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    /// `prog_fd`, or `map_fd` in the same place.
    prog_fd: u32,
    /// `target_ifindex`, or `target_fd` in the same place.
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    /// `tcx.relative_fd`, or `tcx.relative_id` in the same place: the program to go before or
    /// after (none: the hook's last).
    tcx_relative_fd: u32,
    /// C's padding before the 8-aligned `tcx.expected_revision`.
    _pad: u32,
    /// `tcx.expected_revision`: 0, attach whatever programs the hook has.
    tcx_expected_revision: u64,
}

layout!(LinkCreateAttr, 32, {
    prog_fd: 0,
    target_ifindex: 4,
    attach_type: 8,
    flags: 12,
    tcx_relative_fd: 16,
    _pad: 20,
    tcx_expected_revision: 24,
});

/// A `union bpf_attr` member, for [`bpf`].
///
/// # Safety
///
/// The type is `#[repr(C)]` and all of its bytes are integer fields: no padding (whose bytes
/// are undefined, and the kernel reads every byte passed), and any bytes the kernel writes
/// back make a valid value.
unsafe trait Attr {}

// SAFETY: each is `#[repr(C)]`, of integer fields alone, which `layout!` shows fill it.
unsafe impl Attr for MapCreateAttr {}
// SAFETY: as above.
unsafe impl Attr for MapElemAttr {}
// SAFETY: as above.
unsafe impl Attr for ProgLoadAttr {}
// SAFETY: as above.
unsafe impl Attr for LinkCreateAttr {}

/// Calls `bpf(cmd, attr)`, with `attr`'s own size: the kernel reads as zero the fields past it.
///
/// # Safety
///
/// Every address in `attr` is of memory that is live for the call, as long as `attr` says,
/// and writable where `cmd` writes through it.
unsafe fn bpf<A: Attr>(cmd: libc::c_long, attr: &mut A) -> io::Result<RawFd> {
    // SAFETY: `attr` is a live `union bpf_attr` member of the size passed, every byte of it a
    // field (`Attr`); the kernel reads it, writes back only within that size (`BPF_PROG_LOAD`'s
    // `log_true_size`), and goes through its addresses, which the caller vouches for.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr), std::mem::size_of::<A>())
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as RawFd)
    }
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: a descriptor the kernel has just returned to us and nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn map_create(kind: u32, key: u32, value: u32, entries: u32) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: kind,
        key_size: key,
        value_size: value,
        max_entries: entries,
        ..MapCreateAttr::default()
    };
    // SAFETY: the member has no addresses.
    unsafe { bpf(BPF_MAP_CREATE, &mut attr) }.map(owned)
}

/// Loads `code` for lo's ingress hook, with the verifier's log in the error if it refuses it.
fn load(code: &[Insn]) -> io::Result<OwnedFd> {
    let license = c"Dual MIT/GPL";
    let mut log = vec![0u8; 16 * 1024];
    let mut attr = ProgLoadAttr {
        prog_type: PROG_TYPE_SCHED_CLS,
        insn_cnt: code.len() as u32,
        insns: AlignedU64::address(code.as_ptr()),
        license: AlignedU64::address(license.as_ptr()),
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: AlignedU64::address(log.as_mut_ptr()),
        expected_attach_type: ATTACH_TCX_INGRESS,
        ..ProgLoadAttr::default()
    };
    // SAFETY: the kernel reads `code`'s instructions and the NUL-terminated license, and
    // writes at most `log.len()` bytes of log into `log`, all of which outlive the call.
    let loaded = unsafe { bpf(BPF_PROG_LOAD, &mut attr) };
    loaded.map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]);
        match log.trim() {
            "" => e,
            log => io::Error::new(e.kind(), format!("{e}; the verifier said: {log}")),
        }
    })
}

/// A shared mapping of the ring buffer `fd`, unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(fd: RawFd, len: usize, prot: libc::c_int, offset: usize) -> io::Result<Mapping> {
        // SAFETY: a new mapping of `len` bytes of `fd` at a page-aligned offset; the kernel
        // checks both against the ring buffer's layout.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, offset as libc::off_t)
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Mapping { base, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly this mapping, which nothing uses after this.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// The program on lo's ingress hook and the ring buffer it fills. Dropping it detaches the
/// program (the link is this process's: nothing is left on lo if it exits or crashes).
pub struct Hook {
    settings: OwnedFd,
    _link: OwnedFd,
    _program: OwnedFd,
    /// The consumer's position (one page, read-write), then the producer's position and the
    /// data, mapped twice in a row so that a record at the end reads on without wrapping.
    consumer: Mapping,
    producer: Mapping,
    _ring: OwnedFd,
    page: usize,
    /// Drops already reported by [`Hook::dropped_since`].
    dropped_reported: u64,
    /// Records read without headers since the last [`Hook::dropped_since`].
    unreadable: u64,
}

// SAFETY: the mappings belong to this value alone; it is moved to the capture thread whole.
unsafe impl Send for Hook {}

impl Hook {
    /// Loads the program and attaches it to lo's ingress, keeping nothing until
    /// [`Hook::keep_port`].
    pub fn attach() -> io::Result<Hook> {
        // The instructions' register fields are packed as a little-endian kernel reads them,
        // and the ring's positions are read as 64-bit words (the kernel's `unsigned long`).
        if cfg!(target_endian = "big") || cfg!(not(target_pointer_width = "64")) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the ingress hook is built for 64-bit little-endian hosts only",
            ));
        }
        let ring = map_create(MAP_TYPE_RINGBUF, 0, 0, RING_BYTES)?;
        let settings = map_create(MAP_TYPE_ARRAY, 4, 8, 2)?;
        let program = load(&program(settings.as_raw_fd(), ring.as_raw_fd()))?;
        // SAFETY: the argument is a NUL-terminated string.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if lo == 0 {
            return Err(io::Error::last_os_error());
        }
        let mut attr = LinkCreateAttr {
            prog_fd: program.as_raw_fd() as u32,
            target_ifindex: lo,
            attach_type: ATTACH_TCX_INGRESS,
            ..LinkCreateAttr::default()
        };
        // SAFETY: the member has no addresses.
        let link = unsafe { bpf(BPF_LINK_CREATE, &mut attr) }.map(owned)?;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::other("no page size"))?;
        let data = RING_BYTES as usize;
        let consumer = Mapping::new(ring.as_raw_fd(), page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = Mapping::new(ring.as_raw_fd(), page + 2 * data, libc::PROT_READ, page)?;
        Ok(Hook {
            settings,
            _link: link,
            _program: program,
            consumer,
            producer,
            _ring: ring,
            page,
            dropped_reported: 0,
            unreadable: 0,
        })
    }

    /// Keeps the TCP segments to or from `port` from now on.
    pub fn keep_port(&self, port: u16) -> io::Result<()> {
        let value = u64::from(u16::from_ne_bytes(port.to_be_bytes()));
        self.set(SLOT_PORT, value)
    }

    fn set(&self, slot: u32, value: u64) -> io::Result<()> {
        let mut attr = MapElemAttr {
            map_fd: self.settings.as_raw_fd() as u32,
            key: AlignedU64::address(&slot),
            value: AlignedU64::address(&value),
            ..MapElemAttr::default()
        };
        // SAFETY: the kernel reads the settings map's 4-byte key and 8-byte value from `slot`
        // and `value`, which outlive the call.
        unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
    }

    /// Segments the program could not write for a full ring, or wrote without their headers,
    /// since the last call.
    pub fn dropped_since(&mut self) -> u64 {
        let total = self.dropped_total();
        let new = total.saturating_sub(self.dropped_reported);
        self.dropped_reported = total;
        new + std::mem::take(&mut self.unreadable)
    }

    fn dropped_total(&self) -> u64 {
        let mut value = 0u64;
        let mut attr = MapElemAttr {
            map_fd: self.settings.as_raw_fd() as u32,
            key: AlignedU64::address(&SLOT_DROPS),
            value: AlignedU64::address(&mut value as *mut u64),
            ..MapElemAttr::default()
        };
        // SAFETY: the kernel reads the settings map's 4-byte key from `SLOT_DROPS` (promoted to
        // a static) and writes its 8-byte value into `value`, which outlives the call.
        match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
            Ok(_) => value,
            Err(_) => 0,
        }
    }

    /// Calls `each` with the headers and CLOCK_MONOTONIC stamp of every record written since
    /// the last call, then gives their room back. Returns how many it called `each` with; a
    /// record without headers (the kernel could not copy them) is counted with the drops
    /// ([`Hook::dropped_since`]).
    pub fn take(&mut self, mut each: impl FnMut(&[u8], u64)) -> usize {
        // SAFETY: the two positions are the first words of their pages, which stay mapped
        // while `self` lives; the kernel writes the producer's and reads the consumer's.
        let (consumer, producer) = unsafe {
            (
                &*self.consumer.base.as_ptr().cast::<AtomicU64>(),
                &*self.producer.base.as_ptr().cast::<AtomicU64>(),
            )
        };
        // SAFETY: the data follows the producer's page within its mapping.
        let data = unsafe { self.producer.base.as_ptr().add(self.page) };
        let mask = u64::from(RING_BYTES) - 1;
        let mut position = consumer.load(Ordering::Relaxed);
        // The records are written before the producer's position moves past them.
        let written = producer.load(Ordering::Acquire);
        let mut records = 0;
        while position < written {
            let at = (position & mask) as usize;
            // SAFETY: `at` is within the first copy of the data; the header is a u32 the
            // kernel sets (busy, then length) with release order.
            let header = unsafe { &*data.add(at).cast::<AtomicU32>() }.load(Ordering::Acquire);
            if header & BUSY_BIT != 0 {
                break;
            }
            let len = (header & !(BUSY_BIT | DISCARD_BIT)) as usize;
            let mut read = false;
            if header & DISCARD_BIT == 0 && len == RECORD_BYTES {
                // SAFETY: the record (at most RECORD_BYTES after its header) lies within the
                // data's second copy, which follows the first: no wrap to handle.
                let record = unsafe {
                    std::slice::from_raw_parts(data.add(at + RINGBUF_HEADER), RECORD_BYTES)
                };
                let stamp = u64::from_ne_bytes(record[..8].try_into().expect("8 bytes"));
                let copied = u32::from_ne_bytes(record[8..12].try_into().expect("4 bytes"));
                let copied = (copied as usize).min(MAX_HEADERS);
                if copied > 0 {
                    each(&record[RECORD_HEADERS_AT..RECORD_HEADERS_AT + copied], stamp);
                    records += 1;
                    read = true;
                }
            }
            if !read {
                self.unreadable += 1;
            }
            // Records are 8-byte aligned, their header included. Never past what the kernel
            // wrote: a consumer ahead of the producer would make every later record look as
            // if it did not fit.
            position = position
                .saturating_add((RINGBUF_HEADER + len).next_multiple_of(8) as u64)
                .min(written);
        }
        // Everything read is read before the kernel may write over it.
        consumer.store(position, Ordering::Release);
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
        let jumps = [JA, JEQ_K, JNE_K, JEQ_X, JNE_X, JGT_X, JLT_K];
        for (at, insn) in code.iter().enumerate() {
            if jumps.contains(&insn.code) {
                let to = at as isize + 1 + isize::from(insn.off);
                assert!(to > at as isize && (to as usize) < code.len(), "jump at {at} to {to}");
            }
        }
        let n = code.len();
        assert_eq!(code[n - 1].code, EXIT);
        assert_eq!((code[n - 2].code, code[n - 2].imm), (MOV_K, TCX_NEXT));
        // Each map is named by its descriptor, in a two-instruction immediate.
        let maps: Vec<i32> = code.iter().filter(|i| i.code == LD_IMM_DW).map(|i| i.imm).collect();
        assert_eq!(maps, [3, 4, 3]);
    }
}
