//! Where the watched programs' reads blocked, seen from inside the kernel (root: CAP_BPF and
//! CAP_PERFMON), without a tracepoint on every system call and without a program on every
//! context switch.
//!
//! One small eBPF program runs where every socket read of the host returns (the
//! `sock_recv_length` tracepoint, in `sock_recvmsg`: `recv()`, `read()`, `recvmsg()` alike,
//! Linux 6.3 and later). For a read on a watched socket (its local port a watched one, a
//! server's, or its remote port, a client's) it reads the calling thread's own accounting from
//! the kernel: how long it has run (`se.sum_exec_runtime`) and waited for a CPU
//! (`sched_info.run_delay`). A table of the watched programs' threads (an array indexed by the
//! thread id's low bits, [`MAX_THREADS`] slots) keeps each thread's last read's time and its
//! figures as last read, which is at most [`MIN_SLEEP_NS`] before its last read: a thread whose
//! reads come faster has them read once a millisecond, not at every read. The time since its
//! figures were read, less what it ran and waited for a CPU since, is what it slept; when this
//! read came [`MIN_SLEEP_NS`] or more after its last one and it slept that long, the program
//! writes a record: the thread and its process, the socket, what the read returned, and when
//! its sleep began had it slept once, at the end (this return less the sleep). The sleep
//! counted is this read's wait and less than [`MIN_SLEEP_NS`] of earlier ones.
//!
//! So a record says: this thread's read on a watched socket returned having slept so long since
//! its last one. For a thread that blocks in `recv()` that is its wait in it; for one that
//! waits in `epoll_wait()` first, its wait for the socket to become readable. A thread that
//! sleeps for another reason between two reads (a lock, a disk read, a timer, a blocked write)
//! has that sleep counted as its next read's, as if it came last. A thread's first read only
//! gives it its slot; two watched threads whose ids share their low bits take the slot in
//! turn, each read of one losing the other's figures.
//!
//! Why so, and not `sys_enter`/`sys_exit` tracepoints: those put every system call of every
//! process on the host on the kernel's slow path while attached. Nor a program on
//! `sched_switch` noting when each thread goes to sleep: it ran at every context switch of the
//! host, and with a program on every write's return too it cost a ping-pong service 5.6
//! points of its rate, where this costs it about a third of that (`cargo xtask bench watch`,
//! docs/BENCHMARKS.md). Nor
//! BPF trampolines on `tcp_recvmsg`: some kernels refuse them to root (docs/WATCH.md). Writes
//! are not watched: a write blocks only on a full send buffer, and a program on a call's
//! return costs every such call of the host.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use ackscope_shared::exchange::Endpoint;

use super::kernel::{endpoints, jump_if_watched, read_kernel, Layout, SOCKET_BYTES};
use crate::bpf::*;

/// The tracepoint (include/trace/events/sock.h, Linux 6.3 and later):
/// `sock_recv_length(struct sock *sk, int ret, int flags)`.
const RECV_RETURNS: &std::ffi::CStr = c"sock_recv_length";

/// Slots of the threads' table, a power of two: a thread's is its id's low bits. 32 bytes a
/// slot, 2 MiB.
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
/// Eight spare bytes, zero.
const AT_SPARE: i16 = 40;

/// One record: a watched program's read on a watched socket returned at CLOCK_MONOTONIC
/// `returned_ns`, its thread having slept from `slept_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SleptRead {
    pub returned_ns: u64,
    pub slept_ns: u64,
    pub local: Endpoint,
    pub remote: Endpoint,
    /// Bytes, or a negative errno.
    pub result: i32,
    pub pid: u32,
    pub tid: u32,
}

/// The program, attached, the threads' table and the ring it writes.
pub struct CallTaps {
    ring: Ring,
    drops: OwnedFd,
    threads: OwnedFd,
    _reads: (OwnedFd, OwnedFd),
    unreadable: u64,
    layout: Layout,
    task: TaskLayout,
}

/// Where a thread's own accounting lies in its `task_struct`, from the kernel's BTF.
#[derive(Clone, Copy, Debug)]
struct TaskLayout {
    /// `se.sum_exec_runtime`: nanoseconds it ran (brought up to date as it leaves the CPU).
    ran: i32,
    /// `sched_info.run_delay`: nanoseconds it waited for a CPU (as it gets one).
    waited: i32,
}

impl TaskLayout {
    fn of(btf: &crate::bpf::btf::Btf) -> io::Result<TaskLayout> {
        let field = |path: &[&str]| {
            let member = btf.member("task_struct", path).filter(|m| m.size == 8);
            member.map(|m| m.offset as i32).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "this kernel's BTF has no task_struct member {} (CONFIG_SCHED_INFO), which \
                         the program of the watched programs' reads reads",
                        path.join(".")
                    ),
                )
            })
        };
        let ran = field(&["se", "sum_exec_runtime"])?;
        Ok(TaskLayout { ran, waited: field(&["sched_info", "run_delay"])? })
    }
}

impl CallTaps {
    /// Loads and attaches the program for the sockets of `ports`. Fails without CAP_BPF and
    /// CAP_PERFMON, or on a kernel without the tracepoint (before Linux 6.3).
    pub(super) fn attach(
        ports: &[u16],
        layout: Layout,
        btf: &crate::bpf::btf::Btf,
    ) -> io::Result<CallTaps> {
        // The programs read both ports in one word (`skc_portpair`, as every kernel lays it).
        if layout.num != layout.dport + 2 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this kernel's sock_common does not hold its ports side by side, as the programs \
                 of the watched programs' calls read them",
            ));
        }
        let task = TaskLayout::of(btf)?;
        let ring = Ring::create(RING_BYTES)?;
        let drops = map_create(MAP_TYPE_ARRAY, 4, 8, 1)?;
        let threads = map_create(MAP_TYPE_ARRAY, 4, SLOT_BYTES, MAX_THREADS)?;
        let fds = Fds { ring: ring.fd(), drops: drops.as_raw_fd(), threads: threads.as_raw_fd() };
        let reads = attach_reads(ports, &layout, &task, fds)?;
        Ok(CallTaps { ring, drops, threads, _reads: reads, unreadable: 0, layout, task })
    }

    /// Keeps the sockets of `ports` from now on: a new program attached, then the old one
    /// detached (a read returning in between may be seen by both: recorded twice at most).
    pub fn set_ports(&mut self, ports: &[u16]) -> io::Result<()> {
        let fds = Fds {
            ring: self.ring.fd(),
            drops: self.drops.as_raw_fd(),
            threads: self.threads.as_raw_fd(),
        };
        self._reads = attach_reads(ports, &self.layout, &self.task, fds)?;
        Ok(())
    }

    /// Records lost so far: not written for a full ring, or unreadable.
    pub fn lost(&self) -> u64 {
        map_lookup(&self.drops, 0).unwrap_or(0) + self.unreadable
    }

    /// Calls `each` with every record written since the last call.
    pub fn take(&mut self, each: impl FnMut(SleptRead)) {
        self.unreadable += self.ring.take_parsed(parse, each);
    }
}

/// The reads' program for `ports`, loaded and attached.
fn attach_reads(
    ports: &[u16],
    layout: &Layout,
    task: &TaskLayout,
    fds: Fds,
) -> io::Result<(OwnedFd, OwnedFd)> {
    let code = read_program(ports, layout, task, fds);
    load_on_raw_tracepoint(&code, RECV_RETURNS, "the program of the watched programs' reads")
}

/// A record's bytes, as the program writes them (the `AT_*` offsets).
fn parse(bytes: &[u8]) -> Option<SleptRead> {
    let bytes: &[u8; RECORD_BYTES] = bytes.try_into().ok()?;
    let field = |at: i16, len: usize| &bytes[at as usize..at as usize + len];
    let u64_at = |at| u64::from_ne_bytes(field(at, 8).try_into().expect("8 bytes"));
    let (local, remote) =
        endpoints(bytes, [AT_LOCAL_ADDR, AT_REMOTE_ADDR], [AT_LOCAL_PORT, AT_REMOTE_PORT]);
    let result = i32::from_ne_bytes(field(AT_RESULT, 4).try_into().expect("4 bytes"));
    if field(AT_SPARE, 8) != [0; 8] {
        return None;
    }
    let pid_tgid = u64_at(AT_PID_TGID);
    let (returned_ns, slept_ns) = (u64_at(AT_RETURNED), u64_at(AT_SLEPT));
    if slept_ns > returned_ns {
        return None;
    }
    Some(SleptRead {
        returned_ns,
        slept_ns,
        local,
        remote,
        result,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    /// The socket is a watched one.
    Watched,
    /// The thread's slot is its own.
    Tracked,
    /// The thread's accounting is read.
    Accounting,
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

/// A slot of the threads' table: the thread's id; its last read's time; and its figures at a
/// read at most a millisecond or so before that (the last time they were read): the time, how
/// long it had run and waited for a CPU.
const SLOT_BYTES: u32 = 40;
const SLOT_TID: i16 = 0;
const SLOT_LAST: i16 = 8;
const SLOT_AT: i16 = 16;
const SLOT_RAN: i16 = 24;
const SLOT_WAITED: i16 = 32;

// Registers kept past helper calls: r6 the tracepoint's arguments, r7 the socket, then the
// thread's task, then the time it slept; r8 the thread's slot; r9 the record.
const ARGS: u8 = 6;
const SK: u8 = 7;
const TASK: u8 = 7;
const SLEPT: u8 = 7;
const SLOT: u8 = 8;
const RECORD: u8 = 9;
/// Stack slots: the table's key, the socket's ports (its `skc_dport` and `skc_num`, one 4-byte
/// word), `pid_tgid`, the time now, the time since the thread's last read, how long it ran and
/// waited, the socket's first bytes (read only for a record).
const KEY_AT: i16 = -8;
const PORTS_AT: i16 = -16;
const PID_TGID_AT: i16 = -24;
const NOW_AT: i16 = -32;
const GAP_AT: i16 = -40;
const RAN_AT: i16 = -48;
const WAITED_AT: i16 = -56;
const COPY_AT: i16 = -56 - SOCKET_BYTES as i16;
/// The figures read now, kept in the slot for later reads.
const KEPT: [(i16, i16); 3] = [(NOW_AT, SLOT_AT), (RAN_AT, SLOT_RAN), (WAITED_AT, SLOT_WAITED)];

/// r8 = the slot in `threads` of the thread whose `pid_tgid` is in r0 (its id's low bits index
/// the table), or a jump to the exit (never: the index is masked). The table is an array,
/// whose lookup the kernel inlines.
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

/// The program on a read's return (`sock_recv_length`): keeps the sockets whose local port is a
/// watched one or whose remote port is; makes the thread's slot its own, or notes the time
/// since its last read. The thread's accounting is read only when its figures in the slot are
/// [`MIN_SLEEP_NS`] old or more (a busy thread's reads, microseconds apart, cost no more than
/// a lookup): how long it slept since they were taken is then worked out, and when this read
/// itself came [`MIN_SLEEP_NS`] or more after the last and the thread slept that long, a record
/// is written. The figures were taken less than [`MIN_SLEEP_NS`] before the last read, so the
/// sleep counted is this read's and at most that much of earlier ones. Every read of the
/// kernel's memory goes through the helper, which cannot fault.
fn read_program(ports: &[u16], layout: &Layout, task: &TaskLayout, fds: Fds) -> Vec<Insn> {
    let mut a = Assembler::new();
    a.op(MOV_X, ARGS, 1, 0, 0);
    a.op(LDX_DW, SK, ARGS, 0, 0);
    // The ports, zeroed first: a failed read leaves zeros, no port.
    a.op(ST_W, 10, 0, PORTS_AT, 0);
    read_kernel(&mut a, PORTS_AT, 4, SK, layout.dport);
    let local_at = PORTS_AT + (layout.num - layout.dport) as i16;
    jump_if_watched(&mut a, ports, (10, local_at, PORTS_AT), Label::Watched);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let watched = a.here();
    a.op(CALL, 0, 0, 0, FN_KTIME_GET_NS);
    a.op(STX_DW, 10, 0, NOW_AT, 0);
    a.op(CALL, 0, 0, 0, FN_GET_CURRENT_PID_TGID);
    a.op(STX_DW, 10, 0, PID_TGID_AT, 0);
    lookup_slot(&mut a, fds.threads);
    a.op(LDX_W, 1, SLOT, SLOT_TID, 0);
    a.op(LDX_DW, 2, 10, PID_TGID_AT, 0);
    a.op(MOV32_X, 2, 2, 0, 0);
    a.jump(JEQ_X, 1, 2, 0, Label::Tracked);
    // Another thread's slot, or none: this thread's from now on, its figures read now.
    a.op(STX_W, SLOT, 2, SLOT_TID, 0);
    a.op(LDX_DW, 1, 10, NOW_AT, 0);
    a.op(STX_DW, SLOT, 1, SLOT_LAST, 0);
    a.op(ST_W, 10, 0, GAP_AT, 0);
    a.op(ST_W, 10, 0, GAP_AT + 4, 0);
    a.jump(JA, 0, 0, 0, Label::Accounting);
    let tracked = a.here();
    // The time since its last read, and this read's time kept.
    a.op(LDX_DW, 1, 10, NOW_AT, 0);
    a.op(LDX_DW, 2, SLOT, SLOT_LAST, 0);
    a.op(STX_DW, SLOT, 1, SLOT_LAST, 0);
    a.op(SUB_X, 1, 2, 0, 0);
    a.op(STX_DW, 10, 1, GAP_AT, 0);
    // Figures younger than the least sleep written: nothing to work out.
    a.op(LDX_DW, 1, 10, NOW_AT, 0);
    a.op(LDX_DW, 2, SLOT, SLOT_AT, 0);
    a.op(SUB_X, 1, 2, 0, 0);
    a.jump(JLT_K, 1, 0, MIN_SLEEP_NS, Label::Exit);
    let accounting = a.here();
    // The thread's accounting, zeroed first.
    a.op(CALL, 0, 0, 0, FN_GET_CURRENT_TASK);
    a.op(MOV_X, TASK, 0, 0, 0);
    a.op(MOV_K, 1, 0, 0, 0);
    a.op(STX_DW, 10, 1, RAN_AT, 0);
    a.op(STX_DW, 10, 1, WAITED_AT, 0);
    read_kernel(&mut a, RAN_AT, 8, TASK, task.ran);
    read_kernel(&mut a, WAITED_AT, 8, TASK, task.waited);
    // slept = (now - then) - (ran - ran then) - (waited - waited then).
    a.op(LDX_DW, SLEPT, 10, NOW_AT, 0);
    a.op(LDX_DW, 1, SLOT, SLOT_AT, 0);
    a.op(SUB_X, SLEPT, 1, 0, 0);
    a.op(LDX_DW, 2, 10, RAN_AT, 0);
    a.op(LDX_DW, 1, SLOT, SLOT_RAN, 0);
    a.op(SUB_X, 2, 1, 0, 0);
    a.op(LDX_DW, 3, 10, WAITED_AT, 0);
    a.op(LDX_DW, 1, SLOT, SLOT_WAITED, 0);
    a.op(SUB_X, 3, 1, 0, 0);
    a.op(ADD_X, 2, 3, 0, 0);
    for (from, to) in KEPT {
        a.op(LDX_DW, 1, 10, from, 0);
        a.op(STX_DW, SLOT, 1, to, 0);
    }
    // This read came soon after the last (or is the thread's first): none of its own.
    a.op(LDX_DW, 1, 10, GAP_AT, 0);
    a.jump(JLT_K, 1, 0, MIN_SLEEP_NS, Label::Exit);
    // Its own time more than the time between (its accounting lags a little): no sleep.
    a.jump(JGT_X, 2, SLEPT, 0, Label::Exit);
    a.op(SUB_X, SLEPT, 2, 0, 0);
    a.jump(JLT_K, SLEPT, 0, MIN_SLEEP_NS, Label::Exit);
    // A record: the socket's addresses now (the socket is the tracepoint's argument still).
    a.op(LDX_DW, 3, ARGS, 0, 0);
    a.op(MOV_K, 1, 0, 0, 0);
    for slot in (0..SOCKET_BYTES as i16).step_by(8) {
        a.op(STX_DW, 10, 1, COPY_AT + slot, 0);
    }
    read_kernel(&mut a, COPY_AT, SOCKET_BYTES, 3, 0);
    a.reserve(fds.ring, RECORD_BYTES, Label::Full);
    a.op(MOV_X, RECORD, 0, 0, 0);
    a.op(LDX_DW, 1, 10, NOW_AT, 0);
    a.op(STX_DW, RECORD, 1, AT_RETURNED, 0);
    // When the sleep began, had it come last: this return less the sleep.
    a.op(SUB_X, 1, SLEPT, 0, 0);
    a.op(STX_DW, RECORD, 1, AT_SLEPT, 0);
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
    a.op(ST_W, RECORD, 0, AT_SPARE, 0);
    a.op(ST_W, RECORD, 0, AT_SPARE + 4, 0);
    a.submit(RECORD);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let (full, exit) = a.full_and_exit(fds.drops, KEY_AT, 0);
    a.finish(|label| match label {
        Label::Watched => watched,
        Label::Tracked => tracked,
        Label::Accounting => accounting,
        Label::Full => full,
        Label::Exit => exit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::checks;
    use crate::watch::kernel::tests::layout;
    use std::io::{Read, Write};
    use std::net::{IpAddr, Ipv4Addr};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    #[test]
    fn the_program_jumps_only_inside_itself_and_writes_every_byte_of_a_record() {
        let ports = [8080, 9090];
        let task = TaskLayout { ran: 200, waited: 3000 };
        let code = read_program(&ports, &layout(), &task, Fds { ring: 4, drops: 5, threads: 3 });
        checks::jumps_forward_inside(&code);
        checks::ends_returning(&code, 0);
        checks::compares_each_port_both_ways(&code, &ports);
        checks::writes_each_byte_once(&code, RECORD, RECORD_BYTES);
        // The thread's accounting is read where the kernel keeps it.
        let offsets: Vec<i32> = code.iter().filter(|i| i.code == ADD_K).map(|i| i.imm).collect();
        assert!(offsets.contains(&200) && offsets.contains(&3000), "{offsets:?}");
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
        let localhost = |last| IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
        let expected = SleptRead {
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
        unknown[AT_SPARE as usize] = 7;
        assert_eq!(parse(&unknown), None, "bytes the program does not write");
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
        let mut taps =
            CallTaps::attach(&[port], layout, &btf).expect("root may attach the program");
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
                if record.remote.1 == client_port {
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
