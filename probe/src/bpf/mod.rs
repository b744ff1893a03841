//! The kernel's eBPF interface, as the probe uses it: `bpf(2)` commands with their attributes'
//! layouts checked at build time, a small assembler for the programs (written out in
//! instructions: no compiler, no loader library), and the reader of a BPF ring buffer. Its
//! users write the programs: lo's ingress hook for a run's capture (`capture::hook`) and the
//! kernel functions a watch traces (`watch::kernel`), whose ids come from the kernel's own
//! type information ([`btf`]).
//!
//! Everything here is stable uapi (linux/bpf.h). The instructions' register fields are packed
//! as a little-endian kernel reads them, and the ring's positions are read as 64-bit words:
//! [`supported`] says so on other hosts.

pub mod btf;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_BTF_LOAD: libc::c_long = 18;
const BPF_LINK_CREATE: libc::c_long = 28;
pub const PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
pub const PROG_TYPE_SOCK_OPS: u32 = 13;
/// `BPF_CGROUP_SOCK_OPS`: a `sock_ops` program on a cgroup.
pub const ATTACH_CGROUP_SOCK_OPS: u32 = 3;
pub const MAP_TYPE_HASH: u32 = 1;
pub const MAP_TYPE_ARRAY: u32 = 2;
pub const MAP_TYPE_RINGBUF: u32 = 27;
/// `BPF_MAP_TYPE_SK_STORAGE`: a value per socket, freed with the socket; user space reads a
/// socket's by its descriptor.
pub const MAP_TYPE_SK_STORAGE: u32 = 24;
/// `BPF_F_NO_PREALLOC`, which socket storage requires.
const F_NO_PREALLOC: u32 = 1;
/// `BPF_OBJ_NAME_LEN`: the room for a map's or a program's name.
const OBJ_NAME_LEN: usize = 16;

// Helper functions programs call (linux/bpf.h, `___BPF_FUNC_MAPPER`).
pub const FN_MAP_LOOKUP_ELEM: i32 = 1;
pub const FN_MAP_UPDATE_ELEM: i32 = 2;
pub const FN_MAP_DELETE_ELEM: i32 = 3;
pub const FN_PROBE_READ_KERNEL: i32 = 113;
pub const FN_KTIME_GET_NS: i32 = 5;
pub const FN_GET_CURRENT_PID_TGID: i32 = 14;
pub const FN_GET_CURRENT_TASK: i32 = 35;
pub const FN_SKB_LOAD_BYTES: i32 = 26;
pub const FN_RINGBUF_RESERVE: i32 = 131;
pub const FN_RINGBUF_SUBMIT: i32 = 132;
pub const FN_SETSOCKOPT: i32 = 49;
pub const FN_GETSOCKOPT: i32 = 57;
pub const FN_SK_STORAGE_GET: i32 = 107;
/// `BPF_SK_STORAGE_GET_F_CREATE`: the socket's storage, created (zeroed) if it has none.
pub const SK_STORAGE_CREATE: i32 = 1;
/// `BPF_RB_NO_WAKEUP`: the reader is not woken per record; it reads on its own schedule.
pub const RB_NO_WAKEUP: i32 = 1;

/// The ring buffer's own record header (`BPF_RINGBUF_HDR_SZ`) and its flag bits.
const RINGBUF_HEADER: usize = 8;
const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;

/// Whether this host is one the instructions and the ring reader are built for (64-bit,
/// little-endian); the error to give otherwise.
pub fn supported() -> io::Result<()> {
    if cfg!(target_endian = "big") || cfg!(not(target_pointer_width = "64")) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the probe's eBPF programs are built for 64-bit little-endian hosts only",
        ));
    }
    Ok(())
}

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// Destination register in the low four bits, source in the high four.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// Instruction codes (class | size or operation | source), linux/bpf.h and linux/bpf_common.h.
pub const LDX_W: u8 = 0x61;
pub const LDX_H: u8 = 0x69;
pub const LDX_B: u8 = 0x71;
pub const LDX_DW: u8 = 0x79;
pub const STX_H: u8 = 0x6b;
pub const STX_W: u8 = 0x63;
pub const STX_DW: u8 = 0x7b;
pub const ST_W: u8 = 0x62;
pub const ATOMIC_ADD_DW: u8 = 0xdb;
pub const LD_IMM_DW: u8 = 0x18;
pub const MOV_X: u8 = 0xbf;
/// `BPF_ALU | BPF_MOV | BPF_X`: the low 32 bits of the source, the destination's high bits
/// zeroed.
pub const MOV32_X: u8 = 0xbc;
pub const MOV_K: u8 = 0xb7;
pub const ADD_K: u8 = 0x07;
pub const ADD_X: u8 = 0x0f;
pub const SUB_X: u8 = 0x1f;
pub const AND_K: u8 = 0x57;
pub const AND_X: u8 = 0x5f;
pub const LSH_K: u8 = 0x67;
pub const RSH_K: u8 = 0x77;
pub const OR_K: u8 = 0x47;
/// `BPF_ALU | BPF_END | BPF_TO_BE`: to network order (a swap on this little-endian host), of
/// the immediate's width in bits.
pub const END_TO_BE: u8 = 0xdc;
pub const JA: u8 = 0x05;
pub const JEQ_K: u8 = 0x15;
pub const JNE_K: u8 = 0x55;
pub const JEQ_X: u8 = 0x1d;
pub const JNE_X: u8 = 0x5d;
pub const JGT_X: u8 = 0x2d;
pub const JLT_K: u8 = 0xa5;
pub const CALL: u8 = 0x85;
pub const EXIT: u8 = 0x95;
/// `BPF_PSEUDO_MAP_FD`: a 64-bit immediate that is a map's file descriptor.
pub const PSEUDO_MAP_FD: u8 = 1;

/// Writes a program out instruction by instruction, with jumps to labels of the caller's
/// (`L`) patched once the program is laid out.
pub struct Assembler<L> {
    code: Vec<Insn>,
    jumps: Vec<(usize, L)>,
}

impl<L: Copy> Assembler<L> {
    pub fn new() -> Assembler<L> {
        Assembler { code: Vec::new(), jumps: Vec::new() }
    }

    pub fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn { code, regs: (src << 4) | dst, off, imm });
    }

    pub fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: L) {
        self.jumps.push((self.code.len(), to));
        self.op(code, dst, src, 0, imm);
    }

    /// `dst` = `value`, a 64-bit immediate (two instructions).
    pub fn imm64(&mut self, dst: u8, value: u64) {
        self.op(LD_IMM_DW, dst, 0, 0, value as u32 as i32);
        self.op(0, 0, 0, 0, (value >> 32) as u32 as i32);
    }

    /// `dst` = the map `fd` (a two-instruction immediate the kernel resolves at load).
    pub fn map(&mut self, dst: u8, fd: RawFd) {
        self.op(LD_IMM_DW, dst, PSEUDO_MAP_FD, 0, fd);
        self.op(0, 0, 0, 0, 0);
    }

    /// r0 = a record of `bytes` reserved in the ring buffer `ring`, or a jump to `full` when it
    /// has no room (r1-r5 are the helper's).
    pub fn reserve(&mut self, ring: RawFd, bytes: usize, full: L) {
        self.map(1, ring);
        self.op(MOV_K, 2, 0, 0, i32::try_from(bytes).expect("a record's size"));
        self.op(MOV_K, 3, 0, 0, 0);
        self.op(CALL, 0, 0, 0, FN_RINGBUF_RESERVE);
        self.jump(JEQ_K, 0, 0, 0, full);
    }

    /// Submits the reserved record `record` points at, waking no reader (readers poll).
    pub fn submit(&mut self, record: u8) {
        self.op(MOV_X, 1, record, 0, 0);
        self.op(MOV_K, 2, 0, 0, RB_NO_WAKEUP);
        self.op(CALL, 0, 0, 0, FN_RINGBUF_SUBMIT);
    }

    /// Adds one to slot `slot` of the array map `map` (8-byte values), its key written at
    /// `r10 + key_at`: how a program counts what it could not keep.
    pub fn count(&mut self, map: RawFd, slot: u32, key_at: i16) {
        self.op(ST_W, 10, 0, key_at, slot as i32);
        self.op(MOV_X, 2, 10, 0, 0);
        self.op(ADD_K, 2, 0, 0, i32::from(key_at));
        self.map(1, map);
        self.op(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM);
        // No slot (it always has one): nothing to add to.
        self.op(JEQ_K, 0, 0, 2, 0);
        self.op(MOV_K, 1, 0, 0, 1);
        self.op(ATOMIC_ADD_DW, 0, 1, 0, 0);
    }

    /// The end a program that writes to a ring shares: where [`Assembler::reserve`] goes when
    /// the ring is full (`full`: the record counted in slot 0 of `drops`, its key at
    /// `r10 + key_at`), then the exit (`exit`: the program returns `returns`). Returns
    /// `(full, exit)`, for the labels.
    pub fn full_and_exit(&mut self, drops: RawFd, key_at: i16, returns: i32) -> (usize, usize) {
        let full = self.here();
        self.count(drops, 0, key_at);
        let exit = self.here();
        self.op(MOV_K, 0, 0, 0, returns);
        self.op(EXIT, 0, 0, 0, 0);
        (full, exit)
    }

    pub fn here(&self) -> usize {
        self.code.len()
    }

    pub fn finish(mut self, labels: impl Fn(L) -> usize) -> Vec<Insn> {
        for (at, label) in std::mem::take(&mut self.jumps) {
            // Jumps count from the next instruction.
            let offset = labels(label) as isize - at as isize - 1;
            self.code[at].off = i16::try_from(offset).expect("a short program");
        }
        self.code
    }
}

impl<L: Copy> Default for Assembler<L> {
    fn default() -> Self {
        Assembler::new()
    }
}

/// The jump instructions, for checks that every jump of a program lands inside it.
pub const JUMPS: [u8; 7] = [JA, JEQ_K, JNE_K, JEQ_X, JNE_X, JGT_X, JLT_K];

/// What the programs' unit tests check of the instructions they write (the kernel's verifier
/// checks the rest when a root test loads them).
#[cfg(test)]
pub mod checks {
    use super::*;

    /// Every jump lands inside the program, after itself.
    pub fn jumps_forward_inside(code: &[Insn]) {
        for (at, insn) in code.iter().enumerate() {
            if JUMPS.contains(&insn.code) {
                let to = at as isize + 1 + isize::from(insn.off);
                assert!(to > at as isize && (to as usize) < code.len(), "jump at {at} to {to}");
            }
        }
    }

    /// The program ends returning `value`.
    pub fn ends_returning(code: &[Insn], value: i32) {
        let n = code.len();
        assert_eq!((code[n - 2].code, code[n - 2].imm), (MOV_K, value));
        assert_eq!(code[n - 1].code, EXIT);
    }

    /// Each of `ports` is compared with, as a host-order and as a network-order port.
    pub fn compares_each_port_both_ways(code: &[Insn], ports: &[u16]) {
        let compared: Vec<i32> = code.iter().filter(|i| i.code == JEQ_K).map(|i| i.imm).collect();
        for &port in ports {
            assert!(compared.contains(&i32::from(port)), "{port}");
            assert!(compared.contains(&i32::from(u16::from_ne_bytes(port.to_be_bytes()))));
        }
    }

    /// The stores through register `record` (a reserved ring record) write each of its `bytes`
    /// once: every field, where the reader reads it.
    pub fn writes_each_byte_once(code: &[Insn], record: u8, bytes: usize) {
        let mut written = vec![0u8; bytes];
        for insn in code.iter().filter(|i| i.regs & 0x0f == record) {
            let size = match insn.code {
                STX_DW => 8,
                STX_W | ST_W => 4,
                STX_H => 2,
                _ => continue,
            };
            for byte in &mut written[insn.off as usize..insn.off as usize + size] {
                *byte += 1;
            }
        }
        assert_eq!(written, vec![1; bytes], "each byte of the record written once");
    }
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

pub fn map_create(kind: u32, key: u32, value: u32, entries: u32) -> io::Result<OwnedFd> {
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

/// What a program is and where it may attach, for [`load`].
pub struct ProgramKind {
    pub prog_type: u32,
    pub expected_attach_type: u32,
    /// The kernel function a tracing program attaches to: its id in the kernel's BTF
    /// ([`btf`]); 0 for other programs.
    pub attach_btf_id: u32,
}

/// Loads `code` as a program of `kind`, with the verifier's log in the error if it refuses it.
/// The log is asked for only then, as libbpf does: a log too long for its buffer fails a load
/// the verifier accepted.
pub fn load(kind: &ProgramKind, code: &[Insn]) -> io::Result<OwnedFd> {
    load_with_log(kind, code, None).map_err(|e| {
        let mut log = vec![0u8; 64 * 1024];
        match load_with_log(kind, code, Some(&mut log)) {
            // Refused again, as it should be: say why.
            Err(again) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                match verdict(&String::from_utf8_lossy(&log[..end])) {
                    "" => again,
                    log => {
                        io::Error::new(again.kind(), format!("{again}; the verifier said: {log}"))
                    }
                }
            }
            Ok(_) => e,
        }
    })
}

/// The end of a verifier's log, where its verdict is: at most its last 2,000 bytes, from a
/// line's start.
fn verdict(log: &str) -> &str {
    let log = log.trim();
    if log.len() <= 2000 {
        return log;
    }
    let mut cut = log.len() - 2000;
    while !log.is_char_boundary(cut) {
        cut += 1;
    }
    let tail = &log[cut..];
    tail.find('\n').map_or(tail, |i| &tail[i + 1..])
}

fn load_with_log(kind: &ProgramKind, code: &[Insn], log: Option<&mut [u8]>) -> io::Result<OwnedFd> {
    let license = c"Dual MIT/GPL";
    let (log_level, log_size, log_buf) = match log {
        Some(log) => (1, log.len() as u32, AlignedU64::address(log.as_mut_ptr())),
        None => (0, 0, AlignedU64::default()),
    };
    let mut attr = ProgLoadAttr {
        prog_type: kind.prog_type,
        insn_cnt: code.len() as u32,
        insns: AlignedU64::address(code.as_ptr()),
        license: AlignedU64::address(license.as_ptr()),
        log_level,
        log_size,
        log_buf,
        expected_attach_type: kind.expected_attach_type,
        attach_btf_id: kind.attach_btf_id,
        ..ProgLoadAttr::default()
    };
    // SAFETY: the kernel reads `code`'s instructions and the NUL-terminated license, and
    // writes at most `log_size` bytes of log into the log buffer, all of which outlive the
    // call.
    unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.map(owned)
}

/// Attaches `program` where its kind says: `target` is an interface's index for a tcx hook,
/// 0 for a tracing program (its kernel function was given at load). The link is this
/// process's: dropping it, or the process ending however it ends, detaches the program.
pub fn link(program: &OwnedFd, target: u32, attach_type: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: program.as_raw_fd() as u32,
        target_ifindex: target,
        attach_type,
        ..LinkCreateAttr::default()
    };
    // SAFETY: the member has no addresses.
    unsafe { bpf(BPF_LINK_CREATE, &mut attr) }.map(owned)
}

/// `BPF_RAW_TRACEPOINT_OPEN`'s member (`raw_tracepoint`), as far as Linux 5.2 has it.
#[repr(C)]
#[derive(Default)]
struct RawTracepointAttr {
    name: AlignedU64,
    prog_fd: u32,
    /// C's padding after the last field, to the union's 8-byte alignment.
    _pad: u32,
}

layout!(RawTracepointAttr, 16, { name: 0, prog_fd: 8, _pad: 12 });

// SAFETY: `#[repr(C)]`, of integer fields alone, which `layout!` shows fill it.
unsafe impl Attr for RawTracepointAttr {}

/// Attaches a raw-tracepoint program to the kernel's tracepoint `name` (`c"timer_expire_entry"`).
/// Like [`link`], the returned descriptor is the attachment, this process's.
/// `code`, a raw tracepoint program, loaded and attached to the tracepoint `name`: the program
/// and its attachment (both this process's: the program goes when it does). A refusal names
/// `what` the program is.
pub fn load_on_raw_tracepoint(
    code: &[Insn],
    name: &std::ffi::CStr,
    what: &str,
) -> io::Result<(OwnedFd, OwnedFd)> {
    let kind = ProgramKind {
        prog_type: PROG_TYPE_RAW_TRACEPOINT,
        expected_attach_type: 0,
        attach_btf_id: 0,
    };
    let program =
        load(&kind, code).map_err(|e| io::Error::new(e.kind(), format!("loading {what}: {e}")))?;
    let attached = raw_tracepoint(&program, name)?;
    Ok((program, attached))
}

pub fn raw_tracepoint(program: &OwnedFd, name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    let mut attr = RawTracepointAttr {
        name: AlignedU64::address(name.as_ptr()),
        prog_fd: program.as_raw_fd() as u32,
        _pad: 0,
    };
    // SAFETY: the kernel reads the NUL-terminated name, which outlives the call.
    unsafe { bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr) }.map(owned)
}

/// Sets `key`'s value in the map `fd` (an array's slot, or a hash's entry).
pub fn map_update(fd: &OwnedFd, key: u32, value: u64) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        key: AlignedU64::address(&key),
        value: AlignedU64::address(&value),
        ..MapElemAttr::default()
    };
    // SAFETY: the kernel reads the map's 4-byte key and 8-byte value from `key` and `value`,
    // which outlive the call.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
}

/// `key`'s value in the map `fd` of 4-byte keys and 8-byte values, if it has one.
pub fn map_lookup(fd: &OwnedFd, key: u32) -> Option<u64> {
    let mut value = 0u64;
    let mut attr = MapElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        key: AlignedU64::address(&key),
        value: AlignedU64::address(&mut value as *mut u64),
        ..MapElemAttr::default()
    };
    // SAFETY: the kernel reads the map's 4-byte key from `key` and writes its 8-byte value
    // into `value`, both of which outlive the call.
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }.ok().map(|_| value)
}

/// `BPF_BTF_LOAD`'s member, as far as Linux 5.2 has it.
#[repr(C)]
#[derive(Default)]
struct BtfLoadAttr {
    btf: AlignedU64,
    btf_log_buf: AlignedU64,
    btf_size: u32,
    btf_log_size: u32,
    btf_log_level: u32,
    /// C's padding after the last field, to the union's 8-byte alignment.
    _pad: u32,
}

layout!(BtfLoadAttr, 32, {
    btf: 0,
    btf_log_buf: 8,
    btf_size: 16,
    btf_log_size: 20,
    btf_log_level: 24,
    _pad: 28,
});

// SAFETY: `#[repr(C)]`, of integer fields alone, which `layout!` shows fill it.
unsafe impl Attr for BtfLoadAttr {}

/// The type information of socket storage's key and value, which the kernel requires of such a
/// map: type 1 `int` (the key, a socket's descriptor from user space), type 2 an 8-byte integer
/// (the value). A BTF blob (linux/btf.h): header, two `BTF_KIND_INT` types, their names.
fn storage_btf() -> Vec<u8> {
    const KIND_INT: u32 = 1 << 24;
    const SIGNED: u32 = 1 << 24;
    let names = b"\0int\0u64\0";
    let types: [[u32; 4]; 2] = [
        // name offset, kind, size in bytes, encoding and bits.
        [1, KIND_INT, 4, SIGNED | 32],
        [5, KIND_INT, 8, 64],
    ];
    let types_len = (types.len() * 16) as u32;
    let mut blob = Vec::new();
    blob.extend_from_slice(&0xeb9f_u16.to_ne_bytes());
    blob.extend_from_slice(&[1, 0]); // version, flags
    for word in [24, 0, types_len, types_len, names.len() as u32] {
        blob.extend_from_slice(&u32::to_ne_bytes(word));
    }
    for word in types.iter().flatten() {
        blob.extend_from_slice(&word.to_ne_bytes());
    }
    blob.extend_from_slice(names);
    blob
}

/// A socket storage map (`BPF_MAP_TYPE_SK_STORAGE`) of 8-byte values: a program keeps a value
/// on a socket, freed when the socket is, and [`map_lookup`] reads a socket's through a
/// descriptor of it (the key).
pub fn socket_storage() -> io::Result<OwnedFd> {
    let blob = storage_btf();
    let mut attr = BtfLoadAttr {
        btf: AlignedU64::address(blob.as_ptr()),
        btf_size: blob.len() as u32,
        ..BtfLoadAttr::default()
    };
    // SAFETY: the kernel reads `btf_size` bytes of `blob`, which outlives the call.
    let btf = unsafe { bpf(BPF_BTF_LOAD, &mut attr) }.map(owned)?;
    let mut attr = MapCreateAttr {
        map_type: MAP_TYPE_SK_STORAGE,
        key_size: 4,
        value_size: 8,
        map_flags: F_NO_PREALLOC,
        btf_fd: btf.as_raw_fd() as u32,
        btf_key_type_id: 1,
        btf_value_type_id: 2,
        ..MapCreateAttr::default()
    };
    // SAFETY: the member has no addresses.
    unsafe { bpf(BPF_MAP_CREATE, &mut attr) }.map(owned)
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

/// A BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`) and this process's mappings of it: programs
/// reserve and submit records, [`Ring::take`] reads them without a system call.
pub struct Ring {
    fd: OwnedFd,
    /// The consumer's position (one page, read-write), then the producer's position and the
    /// data, mapped twice in a row so that a record at the end reads on without wrapping.
    consumer: Mapping,
    producer: Mapping,
    page: usize,
    bytes: u32,
}

// SAFETY: the mappings belong to this value alone; it is moved to a reading thread whole.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of `bytes` of data: a power of two of pages.
    pub fn create(bytes: u32) -> io::Result<Ring> {
        supported()?;
        let fd = map_create(MAP_TYPE_RINGBUF, 0, 0, bytes)?;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::other("no page size"))?;
        let data = bytes as usize;
        let consumer = Mapping::new(fd.as_raw_fd(), page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = Mapping::new(fd.as_raw_fd(), page + 2 * data, libc::PROT_READ, page)?;
        Ok(Ring { fd, consumer, producer, page, bytes })
    }

    /// The map's descriptor, for a program's instructions ([`Assembler::map`]).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// [`Ring::take`], each record read by `parse` (a program's own layout) and handed to
    /// `each`; returns how many `parse` refused (a length that is not a record's).
    pub fn take_parsed<T>(
        &mut self,
        parse: impl Fn(&[u8]) -> Option<T>,
        mut each: impl FnMut(T),
    ) -> u64 {
        let mut unreadable = 0;
        self.take(|bytes| match parse(bytes) {
            Some(record) => each(record),
            None => unreadable += 1,
        });
        unreadable
    }

    /// Calls `each` with every record submitted since the last call (a discarded one is
    /// skipped), then gives their room back. Returns how many records it passed.
    pub fn take(&mut self, mut each: impl FnMut(&[u8])) -> usize {
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
        let mask = u64::from(self.bytes) - 1;
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
            // A record is never longer than the ring; a length past it is not the kernel's.
            let len = ((header & !(BUSY_BIT | DISCARD_BIT)) as usize).min(self.bytes as usize);
            if header & DISCARD_BIT == 0 {
                // SAFETY: the record (at most the ring's size after its header) lies within
                // the data's two copies: no wrap to handle.
                let record =
                    unsafe { std::slice::from_raw_parts(data.add(at + RINGBUF_HEADER), len) };
                each(record);
                records += 1;
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
