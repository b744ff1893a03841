//! Where the watched programs' socket calls blocked, seen from inside the kernel (root: CAP_BPF
//! and CAP_PERFMON), without a tracepoint on every system call.
//!
//! Two small eBPF programs share a table of the watched programs' threads (an array indexed by
//! the thread id's low bits, [`MAX_THREADS`] slots: the thread's id and the time it went to
//! sleep):
//!
//! - On `sock_recv_length` and `sock_send_length` (every socket read and write of the host
//!   returns through them, `sock_recvmsg` and `sock_sendmsg`), a call on a watched socket (its
//!   local port a watched one, a server's, or its remote port, a client's) puts its thread in
//!   the table, or, when it is there and went to sleep since its last such call, writes a
//!   record (the thread, the socket, what the call returned, when it slept) and clears its time.
//! - On `sched_switch`, a thread of the table that leaves the CPU to sleep (not preempted) has
//!   the time noted, the first time since its last call.
//!
//! So a record says: this thread called `recv()` (or `send()`) on a watched socket, and between
//! its previous call on one and this one's return it slept from then. For a thread that blocks
//! in `recv()` that is the wait in it; for one that waits in `epoll_wait()` first, the wait for
//! the socket to be readable. Only sleeps of [`MIN_SLEEP_NS`] or more are written: a stall is
//! milliseconds, and a busy service's calls that do not wait write nothing.
//!
//! Why these tracepoints and not `sys_enter`/`sys_exit`: those put every system call of every
//! process on the host on the kernel's slow path while attached; these run only at a socket
//! call's return and at a context switch, a few dozen instructions each (a map lookup for the
//! switch of a thread that is not a watched one). And not BPF trampolines on `tcp_recvmsg`:
//! some kernels refuse them to root (docs/WATCH.md).
//!
//! A thread's first call on a watched socket only puts it in the table: its wait before that is
//! not known. A thread that sleeps for another reason between its calls (a lock, a disk read, a
//! timer) has that sleep counted as its next call's.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use ackscope_shared::exchange::Endpoint;
use ackscope_shared::Call;

use super::kernel::{read_kernel, Layout, SOCKET_BYTES};
use crate::bpf::*;

/// The tracepoints (include/trace/events/sock.h, Linux 6.3 and later; sched.h):
/// `sock_recv_length(struct sock *sk, int ret, int flags)`, the same for sends, and
/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)`, which runs on `prev`, the thread leaving the CPU.
const RECV_RETURNS: &std::ffi::CStr = c"sock_recv_length";
const SEND_RETURNS: &std::ffi::CStr = c"sock_send_length";
const SWITCH: &std::ffi::CStr = c"sched_switch";

/// Slots of the threads' table, a power of two: a thread's is its id's low bits, and two
/// watched threads whose ids share them take it in turn (each call of one loses the other's
/// sleep). 16 bytes a slot, 1 MiB.
pub const MAX_THREADS: u32 = 1 << 16;
/// Sleeps shorter than this are not written.
pub const MIN_SLEEP_NS: i32 = 1_000_000;
/// The ring's data: 256 KiB, 5,461 records while the watch is off the CPU; at most one a
/// millisecond per watched thread. Records that do not fit are counted ([`CallTaps::lost`]).
const RING_BYTES: u32 = 256 << 10;

/// A record: where the program writes each field and [`parse`] reads it.
const RECORD_BYTES: usize = 48;
const AT_RETURNED: i16 = 0;
const AT_SLEPT: i16 = 8;
/// The local and remote addresses as they lie in memory (network order).
const AT_LOCAL_ADDR: i16 = 16;
const AT_REMOTE_ADDR: i16 = 20;
/// The local port in host order (`skc_num`), the remote one in network order (`skc_dport`).
const AT_LOCAL_PORT: i16 = 24;
const AT_REMOTE_PORT: i16 = 26;
/// What the call returned: bytes, or a negative errno.
const AT_RESULT: i16 = 28;
/// `bpf_get_current_pid_tgid()`: the thread in the low half, the process in the high.
const AT_PID_TGID: i16 = 32;
/// Which call: 0 a read ([`Call::Recv`]), 1 a write; then four spare bytes, zero.
const AT_CALL: i16 = 40;
const AT_SPARE: i16 = 44;

/// One record: a watched program's call on a watched socket returned at CLOCK_MONOTONIC
/// `returned_ns`, its thread having slept from `slept_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedCall {
    pub call: Call,
    pub returned_ns: u64,
    pub slept_ns: u64,
    pub local: Endpoint,
    pub remote: Endpoint,
    /// Bytes, or a negative errno.
    pub result: i32,
    pub pid: u32,
    pub tid: u32,
}

/// The programs, attached, the threads' table and the ring they write.
pub struct CallTaps {
    /// Both calls' programs write here; a record says which call it is.
    ring: Ring,
    drops: OwnedFd,
    threads: OwnedFd,
    _switch: (OwnedFd, OwnedFd),
    calls: [(OwnedFd, OwnedFd); 2],
    unreadable: u64,
    layout: Layout,
}

impl CallTaps {
    /// Loads and attaches the programs for the sockets of `ports`. Fails without CAP_BPF and
    /// CAP_PERFMON, or on a kernel without the tracepoints (before Linux 6.3).
    pub(super) fn attach(ports: &[u16], layout: Layout) -> io::Result<CallTaps> {
        // The programs read both ports in one word (`skc_portpair`, as every kernel lays it).
        if layout.num != layout.dport + 2 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this kernel's sock_common does not hold its ports side by side, as the programs \
                 of the watched programs' calls read them",
            ));
        }
        let ring = Ring::create(RING_BYTES)?;
        let drops = map_create(MAP_TYPE_ARRAY, 4, 8, 1)?;
        let threads = map_create(MAP_TYPE_ARRAY, 4, SLOT_BYTES, MAX_THREADS)?;
        let kind = raw_tracepoint_program();
        let switch = load(&kind, &switch_program(threads.as_raw_fd()))
            .map_err(|e| io::Error::new(e.kind(), format!("loading the threads' program: {e}")))?;
        let switch_attached = raw_tracepoint(&switch, SWITCH)?;
        let calls = attach_calls(ports, &layout, &ring, &drops, &threads)?;
        Ok(CallTaps {
            ring,
            drops,
            threads,
            _switch: (switch, switch_attached),
            calls,
            unreadable: 0,
            layout,
        })
    }

    /// Keeps the sockets of `ports` from now on: new programs attached, then the old ones
    /// detached (a call returning in between may be seen by both: recorded twice at most).
    pub fn set_ports(&mut self, ports: &[u16]) -> io::Result<()> {
        self.calls = attach_calls(ports, &self.layout, &self.ring, &self.drops, &self.threads)?;
        Ok(())
    }

    /// Records lost so far: not written for a full ring, or unreadable.
    pub fn lost(&self) -> u64 {
        map_lookup(&self.drops, 0).unwrap_or(0) + self.unreadable
    }

    /// Calls `each` with every record written since the last call.
    pub fn take(&mut self, mut each: impl FnMut(BlockedCall)) {
        let mut unreadable = 0;
        self.ring.take(|bytes| match parse(bytes) {
            Some(record) => each(record),
            None => unreadable += 1,
        });
        self.unreadable += unreadable;
    }
}

fn raw_tracepoint_program() -> ProgramKind {
    ProgramKind { prog_type: PROG_TYPE_RAW_TRACEPOINT, expected_attach_type: 0, attach_btf_id: 0 }
}

/// The reads' and the writes' programs for `ports`, loaded and attached.
fn attach_calls(
    ports: &[u16],
    layout: &Layout,
    ring: &Ring,
    drops: &OwnedFd,
    threads: &OwnedFd,
) -> io::Result<[(OwnedFd, OwnedFd); 2]> {
    let fds = Fds { ring: ring.fd(), drops: drops.as_raw_fd(), threads: threads.as_raw_fd() };
    let one = |call: Call, tracepoint: &std::ffi::CStr| -> io::Result<(OwnedFd, OwnedFd)> {
        let code = call_program(call, ports, layout, fds);
        let program = load(&raw_tracepoint_program(), &code).map_err(|e| {
            io::Error::new(e.kind(), format!("loading the program of the {}: {e}", call.name()))
        })?;
        let attached = raw_tracepoint(&program, tracepoint)?;
        Ok((program, attached))
    };
    Ok([one(Call::Recv, RECV_RETURNS)?, one(Call::Send, SEND_RETURNS)?])
}

/// A record's bytes, as the program writes them (the `AT_*` offsets).
fn parse(bytes: &[u8]) -> Option<BlockedCall> {
    let bytes: &[u8; RECORD_BYTES] = bytes.try_into().ok()?;
    let field = |at: i16, len: usize| &bytes[at as usize..at as usize + len];
    let u64_at = |at| u64::from_ne_bytes(field(at, 8).try_into().expect("8 bytes"));
    let ip_at =
        |at: i16| IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(field(at, 4)).expect("4 bytes")));
    let [local_port, remote_port] =
        [AT_LOCAL_PORT, AT_REMOTE_PORT].map(|at| <[u8; 2]>::try_from(field(at, 2)).expect("2"));
    let result = i32::from_ne_bytes(field(AT_RESULT, 4).try_into().expect("4 bytes"));
    let call = match bytes[AT_CALL as usize] {
        0 => Call::Recv,
        1 => Call::Send,
        _ => return None,
    };
    let pid_tgid = u64_at(AT_PID_TGID);
    let (returned_ns, slept_ns) = (u64_at(AT_RETURNED), u64_at(AT_SLEPT));
    if slept_ns > returned_ns {
        return None;
    }
    Some(BlockedCall {
        call,
        returned_ns,
        slept_ns,
        local: (ip_at(AT_LOCAL_ADDR), u16::from_ne_bytes(local_port)),
        remote: (ip_at(AT_REMOTE_ADDR), u16::from_be_bytes(remote_port)),
        result,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    /// The socket is a watched one.
    Watched,
    /// The thread's slot holds another thread (or none).
    Untracked,
    /// The ring is full: count the record lost.
    Full,
    /// Done: the program returns.
    Exit,
}

/// The maps a call's program uses.
#[derive(Clone, Copy)]
struct Fds {
    ring: RawFd,
    drops: RawFd,
    threads: RawFd,
}

/// A slot of the threads' table: the thread's id, then the time it went to sleep (0: not since
/// its last call).
const SLOT_BYTES: u32 = 16;
const SLOT_TID: i16 = 0;
const SLOT_SLEPT: i16 = 8;

// Registers kept past helper calls: r6 the tracepoint's arguments, r7 the socket (later the
// time now, then the time the thread slept), r8 the thread's slot, r9 the record.
const ARGS: u8 = 6;
const SK: u8 = 7;
const NOW: u8 = 7;
const SLEPT: u8 = 7;
const SLOT: u8 = 8;
const RECORD: u8 = 9;
/// Stack slots: the table's key, the socket's ports (its `skc_dport` and `skc_num`, one 4-byte
/// word), `pid_tgid`, the time it slept, the socket's first bytes (read only for a record).
const KEY_AT: i16 = -8;
const PORTS_AT: i16 = -16;
const PID_TGID_AT: i16 = -24;
const SLEPT_AT: i16 = -32;
const COPY_AT: i16 = -32 - SOCKET_BYTES as i16;

/// The program on `sched_switch`: the thread leaving the CPU, when it goes to sleep (not
/// preempted, a state other than running) and its slot is its own with no sleep noted since
/// its last call, has the time noted.
fn switch_program(threads: RawFd) -> Vec<Insn> {
    let mut a = Assembler::new();
    a.op(MOV_X, ARGS, 1, 0, 0);
    // `preempt`, then `prev_state`: a preempted thread is still runnable.
    a.op(LDX_DW, 1, ARGS, 0, 0);
    a.jump(JNE_K, 1, 0, 0, Label::Exit);
    a.op(LDX_DW, 1, ARGS, 24, 0);
    a.jump(JEQ_K, 1, 0, 0, Label::Exit);
    a.op(CALL, 0, 0, 0, FN_GET_CURRENT_PID_TGID);
    a.op(MOV_X, ARGS, 0, 0, 0);
    lookup_slot(&mut a, threads);
    a.op(LDX_W, 1, SLOT, SLOT_TID, 0);
    a.op(MOV32_X, 2, ARGS, 0, 0);
    a.jump(JNE_X, 1, 2, 0, Label::Exit);
    // Its first sleep since its last call is kept.
    a.op(LDX_DW, 1, SLOT, SLOT_SLEPT, 0);
    a.jump(JNE_K, 1, 0, 0, Label::Exit);
    a.op(CALL, 0, 0, 0, FN_KTIME_GET_NS);
    a.op(STX_DW, SLOT, 0, SLOT_SLEPT, 0);
    let exit = a.here();
    a.op(MOV_K, 0, 0, 0, 0);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish(|label| match label {
        Label::Exit => exit,
        _ => unreachable!("the switch's program jumps only to its exit"),
    })
}

/// r8 = the slot in `threads` of the thread whose `pid_tgid` is in r0 (its id's low bits index
/// the table), or a jump to the exit (never: the index is masked). The table is an array, whose
/// lookup the kernel inlines: the switch's program runs at every context switch.
fn lookup_slot(a: &mut Assembler<Label>, threads: RawFd) {
    a.op(MOV32_X, 2, 0, 0, 0);
    a.op(AND_K, 2, 0, 0, (MAX_THREADS - 1) as i32);
    a.op(STX_W, 10, 2, KEY_AT, 0);
    a.op(MOV_X, 2, 10, 0, 0);
    a.op(ADD_K, 2, 0, 0, i32::from(KEY_AT));
    a.map(1, threads);
    a.op(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM);
    a.jump(JEQ_K, 0, 0, 0, Label::Exit);
    a.op(MOV_X, SLOT, 0, 0, 0);
}

/// The program on a call's return (`sock_recv_length` or `sock_send_length`): keeps the
/// sockets whose local port is a watched one or whose remote port is; makes the calling
/// thread's slot its own, or takes its sleep from it and, when it slept [`MIN_SLEEP_NS`] or
/// more, writes a record. Every read of the socket goes through the helper, which cannot
/// fault; only its ports are read for a call that writes no record.
fn call_program(call: Call, ports: &[u16], layout: &Layout, fds: Fds) -> Vec<Insn> {
    let mut a = Assembler::new();
    a.op(MOV_X, ARGS, 1, 0, 0);
    a.op(LDX_DW, SK, ARGS, 0, 0);
    // The ports, zeroed first: a failed read leaves zeros, no port.
    a.op(ST_W, 10, 0, PORTS_AT, 0);
    read_kernel(&mut a, PORTS_AT, 4, SK, layout.dport);
    a.op(LDX_H, 2, 10, PORTS_AT + (layout.num - layout.dport) as i16, 0);
    for &port in ports {
        a.jump(JEQ_K, 2, 0, i32::from(port), Label::Watched);
    }
    a.op(LDX_H, 2, 10, PORTS_AT, 0);
    for &port in ports {
        // As it lies in memory: network order.
        a.jump(JEQ_K, 2, 0, i32::from(u16::from_ne_bytes(port.to_be_bytes())), Label::Watched);
    }
    a.jump(JA, 0, 0, 0, Label::Exit);
    let watched = a.here();
    a.op(CALL, 0, 0, 0, FN_GET_CURRENT_PID_TGID);
    a.op(STX_DW, 10, 0, PID_TGID_AT, 0);
    lookup_slot(&mut a, fds.threads);
    a.op(LDX_W, 1, SLOT, SLOT_TID, 0);
    a.op(LDX_DW, 2, 10, PID_TGID_AT, 0);
    a.op(MOV32_X, 2, 2, 0, 0);
    a.jump(JNE_X, 1, 2, 0, Label::Untracked);
    // Its sleep, taken: the next call counts from this one.
    a.op(LDX_DW, 1, SLOT, SLOT_SLEPT, 0);
    a.op(STX_DW, 10, 1, SLEPT_AT, 0);
    a.op(MOV_K, 2, 0, 0, 0);
    a.op(STX_DW, SLOT, 2, SLOT_SLEPT, 0);
    a.jump(JEQ_K, 1, 0, 0, Label::Exit);
    a.op(CALL, 0, 0, 0, FN_KTIME_GET_NS);
    a.op(MOV_X, NOW, 0, 0, 0);
    a.op(LDX_DW, 1, 10, SLEPT_AT, 0);
    a.op(MOV_X, 2, NOW, 0, 0);
    a.op(SUB_X, 2, 1, 0, 0);
    a.jump(JLT_K, 2, 0, MIN_SLEEP_NS, Label::Exit);
    // A record: the socket's addresses now (the socket is the tracepoint's argument still).
    a.op(LDX_DW, SK, ARGS, 0, 0);
    a.op(MOV_K, 1, 0, 0, 0);
    for slot in (0..SOCKET_BYTES as i16).step_by(8) {
        a.op(STX_DW, 10, 1, COPY_AT + slot, 0);
    }
    read_kernel(&mut a, COPY_AT, SOCKET_BYTES, SK, 0);
    a.op(LDX_DW, SLEPT, 10, SLEPT_AT, 0);
    a.reserve(fds.ring, RECORD_BYTES, Label::Full);
    a.op(MOV_X, RECORD, 0, 0, 0);
    // The time now, again: r7 held the socket for the read.
    a.op(CALL, 0, 0, 0, FN_KTIME_GET_NS);
    a.op(STX_DW, RECORD, 0, AT_RETURNED, 0);
    a.op(STX_DW, RECORD, SLEPT, AT_SLEPT, 0);
    for (from, size, to) in [
        (layout.rcv_saddr, LDX_W, AT_LOCAL_ADDR),
        (layout.daddr, LDX_W, AT_REMOTE_ADDR),
        (layout.num, LDX_H, AT_LOCAL_PORT),
        (layout.dport, LDX_H, AT_REMOTE_PORT),
    ] {
        a.op(size, 1, 10, COPY_AT + from as i16, 0);
        a.op(if size == LDX_W { STX_W } else { STX_H }, RECORD, 1, to, 0);
    }
    // `ret`, an int in the arguments' second 64-bit slot.
    a.op(LDX_DW, 1, ARGS, 8, 0);
    a.op(STX_W, RECORD, 1, AT_RESULT, 0);
    a.op(LDX_DW, 1, 10, PID_TGID_AT, 0);
    a.op(STX_DW, RECORD, 1, AT_PID_TGID, 0);
    a.op(ST_W, RECORD, 0, AT_CALL, call_number(call));
    a.op(ST_W, RECORD, 0, AT_SPARE, 0);
    a.submit(RECORD);
    a.jump(JA, 0, 0, 0, Label::Exit);
    // Another thread's slot, or none: this thread's from now on, with no sleep noted.
    let untracked = a.here();
    a.op(STX_W, SLOT, 2, SLOT_TID, 0);
    a.op(MOV_K, 1, 0, 0, 0);
    a.op(STX_DW, SLOT, 1, SLOT_SLEPT, 0);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let (full, exit) = a.full_and_exit(fds.drops, KEY_AT, 0);
    a.finish(|label| match label {
        Label::Watched => watched,
        Label::Untracked => untracked,
        Label::Full => full,
        Label::Exit => exit,
    })
}

fn call_number(call: Call) -> i32 {
    match call {
        Call::Recv => 0,
        Call::Send => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    fn layout() -> Layout {
        Layout {
            timer_function: 24,
            delack_timer: 800,
            ack_pending: 1000,
            daddr: 0,
            rcv_saddr: 4,
            dport: 12,
            num: 14,
        }
    }

    /// Every jump of `code` lands inside it, after the jump, and it ends returning 0.
    fn jumps_stay_inside(code: &[Insn]) {
        for (at, insn) in code.iter().enumerate() {
            if JUMPS.contains(&insn.code) {
                let to = at as isize + 1 + isize::from(insn.off);
                assert!(to > at as isize && (to as usize) < code.len(), "jump at {at} to {to}");
            }
        }
        let n = code.len();
        assert_eq!((code[n - 2].code, code[n - 2].imm), (MOV_K, 0));
        assert_eq!(code[n - 1].code, EXIT);
    }

    #[test]
    fn the_programs_jump_only_inside_themselves_and_write_every_byte_of_a_record() {
        jumps_stay_inside(&switch_program(3));
        let ports = [8080, 9090];
        for call in [Call::Recv, Call::Send] {
            let code = call_program(call, &ports, &layout(), Fds { ring: 4, drops: 5, threads: 3 });
            jumps_stay_inside(&code);
            let compared: Vec<i32> =
                code.iter().filter(|i| i.code == JEQ_K).map(|i| i.imm).collect();
            for port in ports {
                assert!(compared.contains(&i32::from(port)));
                assert!(compared.contains(&i32::from(u16::from_ne_bytes(port.to_be_bytes()))));
            }
            // The stores through the record's register cover 0..RECORD_BYTES once.
            let mut written = [0u8; RECORD_BYTES];
            for insn in code.iter().filter(|i| i.regs & 0x0f == RECORD) {
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
            assert_eq!(written, [1; RECORD_BYTES], "each byte of the record written once");
            let numbered = code.iter().find(|i| i.code == ST_W && i.off == AT_CALL).unwrap();
            assert_eq!(numbered.imm, call_number(call));
        }
    }

    #[test]
    fn a_record_reads_back_as_the_program_writes_it() {
        let mut bytes = [0u8; RECORD_BYTES];
        let mut put = |at: i16, value: &[u8]| {
            bytes[at as usize..at as usize + value.len()].copy_from_slice(value)
        };
        put(AT_RETURNED, &45_000_000u64.to_ne_bytes());
        put(AT_SLEPT, &1_000_000u64.to_ne_bytes());
        put(AT_LOCAL_ADDR, &[127, 0, 0, 1]);
        put(AT_REMOTE_ADDR, &[127, 0, 0, 2]);
        put(AT_LOCAL_PORT, &8080u16.to_ne_bytes());
        put(AT_REMOTE_PORT, &51_000u16.to_be_bytes());
        put(AT_RESULT, &100i32.to_ne_bytes());
        put(AT_PID_TGID, &((4711u64 << 32) | 4712).to_ne_bytes());
        put(AT_CALL, &1u32.to_ne_bytes());
        let localhost = |last| IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
        let expected = BlockedCall {
            call: Call::Send,
            returned_ns: 45_000_000,
            slept_ns: 1_000_000,
            local: (localhost(1), 8080),
            remote: (localhost(2), 51_000),
            result: 100,
            pid: 4711,
            tid: 4712,
        };
        assert_eq!(parse(&bytes), Some(expected));
        assert_eq!(parse(&bytes[..40]), None, "a short record");
        let mut unknown = bytes;
        unknown[AT_CALL as usize] = 7;
        assert_eq!(parse(&unknown), None, "a call the program does not write");
        let mut backwards = bytes;
        backwards[AT_SLEPT as usize..][..8].copy_from_slice(&50_000_000u64.to_ne_bytes());
        assert_eq!(parse(&backwards), None, "a sleep after the return");
    }

    /// On this kernel, as root: a server whose client writes each request in two writes with
    /// Nagle on waits in `recv()` for the second part about 40 ms (the delayed ACK), and the
    /// wait is recorded on the server's thread with what the call returned; with TCP_NODELAY
    /// no such wait is.
    #[test]
    #[ignore = "needs root (eBPF programs on kernel tracepoints): cargo xtask test runs it as root"]
    fn a_servers_recv_that_waited_for_a_nagled_request_is_recorded_on_its_thread() {
        // SAFETY: geteuid() cannot fail and has no side effects.
        assert_eq!(unsafe { libc::geteuid() }, 0, "run as root (cargo xtask test does)");
        let btf = crate::bpf::btf::Btf::vmlinux().unwrap();
        let layout = Layout::of(&btf).unwrap();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut taps = CallTaps::attach(&[port], layout).expect("root may attach the programs");
        let exchanges = |nodelay: bool, taps: &mut CallTaps| {
            let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
            client.set_nodelay(nodelay).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            let client_port = client.local_addr().unwrap().port();
            let serving = std::thread::spawn(move || {
                // SAFETY: gettid() cannot fail and has no side effects.
                let tid = unsafe { libc::gettid() } as u32;
                let mut buf = [0u8; 200];
                while server.read_exact(&mut buf).is_ok() {
                    server.write_all(&buf).unwrap();
                }
                tid
            });
            let mut buf = [0u8; 200];
            for _ in 0..10 {
                client.write_all(&buf[..100]).unwrap();
                client.write_all(&buf[100..]).unwrap();
                client.read_exact(&mut buf).unwrap();
            }
            drop(client);
            let server_tid = serving.join().unwrap();
            let mut seen = Vec::new();
            taps.take(|record| {
                if record.remote.1 == client_port && record.call == Call::Recv {
                    seen.push(record);
                }
            });
            (seen, server_tid)
        };
        let (seen, server_tid) = exchanges(false, &mut taps);
        let waits: Vec<Duration> =
            seen.iter().map(|r| Duration::from_nanos(r.returned_ns - r.slept_ns)).collect();
        // The first request only puts the server's thread in the table; nine of the ten
        // second parts are held for the delayed ACK, some 40 ms each.
        let held = waits.iter().filter(|w| **w >= Duration::from_millis(30)).count();
        eprintln!("the server's recv() waits with Nagle: {waits:?}");
        assert!(held >= 5, "the server's recv() waited for the held parts: {waits:?}");
        for record in &seen {
            assert_eq!(record.local.1, port, "{record:?}");
            assert_eq!(record.tid, server_tid, "the server's thread: {record:?}");
            assert_eq!(record.pid, std::process::id(), "{record:?}");
            assert!(record.result == 100 || record.result == 200, "{record:?}");
        }
        let (seen, _) = exchanges(true, &mut taps);
        let long: Vec<_> =
            seen.iter().filter(|r| r.returned_ns - r.slept_ns >= 30_000_000).collect();
        assert!(long.is_empty(), "nothing held with TCP_NODELAY: {long:?}");
        assert_eq!(taps.lost(), 0);
    }
}
