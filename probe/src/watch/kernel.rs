//! What the watched sockets' kernel does that no packet shows, seen from inside it (root:
//! CAP_BPF and CAP_PERFMON): the **delayed-ACK timer**. A small eBPF program on the kernel's
//! `timer_expire_entry` tracepoint (every timer that expires passes it) keeps the timers whose
//! callback is a socket's delayed-ACK timer (`tcp_delack_timer`), finds their socket, and when
//! it is a watched one with an ACK due on the timer, writes a record to a ring buffer: the
//! kernel held that ACK until now. A timer that finds the ACK already sent (it rode on data)
//! writes nothing. The packets then show the ACK leaving; this says why it left when it did.
//!
//! A socket is a watched one when its local port is a watched port (a server's) or its remote
//! port is (a client's); the ports are written into the program's instructions. Where the
//! kernel's structs lie comes from its own BTF ([`crate::bpf::btf`]), and the callback's
//! address from `/proc/kallsyms`.
//!
//! Beside it, the same attachment holds the program that records where the watched programs'
//! reads slept ([`super::calls`]); a kernel without its tracepoint keeps the timer.
//!
//! Why a tracepoint and not BPF trampolines (fentry on `tcp_delack_timer_handler`, or on
//! `tcp_recvmsg` for the calls that blocked): some kernels refuse trampolines to root after the
//! verifier accepted the program (`EPERM`; docs/WATCH.md), and a tracepoint program runs on
//! every kernel with BPF. Nagle itself has no function to attach to (`tcp_nagle_check` is
//! inlined): held data is read, as without root, from the packets.
//!
//! Nothing here can hold the watched programs up: the program runs in the timer's softirq, a
//! few dozen instructions, and drops (and counts) its record when the ring is full; the
//! attachment is this process's, so the program goes when it does, however it ends.

use std::io::{self, BufRead, Read};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use ackscope_shared::exchange::Endpoint;

use super::calls::{CallTaps, SleptRead};
use crate::bpf::btf::Btf;
use crate::bpf::*;

/// `ICSK_ACK_SCHED | ICSK_ACK_TIMER` (include/net/inet_connection_sock.h, unchanged since
/// Linux 2.6): an ACK is due, and the delayed-ACK timer is what will send it.
const ACK_DUE_ON_TIMER: i32 = 1 | 2;
/// The timer callback of a socket's delayed-ACK timer (net/ipv4/tcp_timer.c).
const DELACK_TIMER_FUNCTION: &str = "tcp_delack_timer";
/// The tracepoint every expiring timer of the kernel passes (include/trace/events/timer.h):
/// `timer_expire_entry(struct timer_list *timer, unsigned long baseclk)`.
const TIMER_EXPIRES: &std::ffi::CStr = c"timer_expire_entry";

/// The ring's data: 256 KiB, 8,192 records (each 24 bytes and the ring's 8-byte header) while
/// the watch is off the CPU: a record is a delayed ACK the timer sent, at most 25 a second a
/// connection. Records that do not fit are counted ([`KernelTaps::lost`]).
const RING_BYTES: u32 = 256 << 10;
/// A record: where the program writes each field and [`parse`] reads it.
const RECORD_BYTES: usize = 24;
const AT_STAMP: i16 = 0;
/// The local and remote addresses as they lie in memory (network order).
const AT_LOCAL_ADDR: i16 = 8;
const AT_REMOTE_ADDR: i16 = 12;
/// The local port in host order (the kernel's `skc_num`), the remote one in network order
/// (`skc_dport`).
const AT_LOCAL_PORT: i16 = 16;
const AT_REMOTE_PORT: i16 = 18;
const AT_SPARE: i16 = 20;
/// `off` leaves out the program of the watched programs' reads ([`super::calls`]), which runs
/// at every socket read's return on the host: to measure what it costs (`cargo xtask bench
/// watch`), or to keep a busy host's reads free of it.
pub const WATCH_CALLS: &str = "ACKSCOPE_WATCH_CALLS";
/// `/proc/kallsyms` lines are short; one past this is not a symbol line.
const MAX_SYMBOL_LINE: usize = 512;

/// One record of the program's: a watched socket's delayed-ACK timer fired with an ACK due,
/// at CLOCK_MONOTONIC `at_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayedAck {
    pub at_ns: u64,
    pub local: Endpoint,
    pub remote: Endpoint,
}

/// Where the program reads the kernel's structs, from the running kernel's BTF.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    /// `timer_list.function`.
    pub(super) timer_function: i32,
    /// `inet_connection_sock.icsk_delack_timer`: the socket is this far before its timer.
    pub(super) delack_timer: i32,
    /// `inet_connection_sock.icsk_ack.pending`.
    pub(super) ack_pending: i32,
    /// The addresses and ports (`sock_common`'s `skc_daddr`, `skc_rcv_saddr`, `skc_dport`,
    /// `skc_num`), from the socket's start; the program copies them in one read.
    pub(super) daddr: i32,
    pub(super) rcv_saddr: i32,
    pub(super) dport: i32,
    pub(super) num: i32,
}

/// The bytes the program copies from the socket's start for its addresses and ports.
pub(super) const SOCKET_BYTES: i32 = 64;

impl Layout {
    pub(super) fn of(btf: &Btf) -> io::Result<Layout> {
        let field = |strukt: &str, path: &[&str], size: u32| {
            btf.member(strukt, path)
                .filter(|m| m.size == size)
                .map(|m| m.offset as i32)
                .ok_or_else(|| missing(&format!("struct {strukt} member {}", path.join("."))))
        };
        let common = |name: &str, size: u32| field("sock", &["__sk_common", name], size);
        let layout = Layout {
            timer_function: field("timer_list", &["function"], 8)?,
            delack_timer: btf
                .member("inet_connection_sock", &["icsk_delack_timer"])
                .map(|m| m.offset as i32)
                .ok_or_else(|| missing("struct inet_connection_sock member icsk_delack_timer"))?,
            ack_pending: field("inet_connection_sock", &["icsk_ack", "pending"], 1)?,
            daddr: common("skc_daddr", 4)?,
            rcv_saddr: common("skc_rcv_saddr", 4)?,
            dport: common("skc_dport", 2)?,
            num: common("skc_num", 2)?,
        };
        let fields = [layout.daddr, layout.rcv_saddr, layout.dport, layout.num];
        if fields.iter().any(|&at| !(0..SOCKET_BYTES - 4).contains(&at)) {
            return Err(missing("sock_common's addresses and ports in its first 64 bytes"));
        }
        Ok(layout)
    }
}

fn missing(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("this kernel's BTF has no {what}, which the watch's eBPF program reads"),
    )
}

/// The address of the kernel function `name`, from `/proc/kallsyms` (root sees the
/// addresses; others see zeros, which is refused).
fn kernel_symbol(name: &str) -> io::Result<u64> {
    let file = std::fs::File::open("/proc/kallsyms")?;
    let mut reader = io::BufReader::new(file);
    let mut line = String::new();
    loop {
        line.clear();
        let read = (&mut reader).take(MAX_SYMBOL_LINE as u64).read_line(&mut line)?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("/proc/kallsyms has no {name}, whose timer the watch's eBPF program knows"),
            ));
        }
        let mut fields = line.split_whitespace();
        let (Some(address), Some(kind), Some(symbol)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if symbol == name && kind.eq_ignore_ascii_case("t") {
            let address = u64::from_str_radix(address, 16).unwrap_or(0);
            if address == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "/proc/kallsyms hides the kernel's addresses from this process: it needs root \
                     (and kernel.kptr_restrict below 2)",
                ));
            }
            return Ok(address);
        }
    }
}

/// The program, attached, and the ring it writes.
pub struct KernelTaps {
    ring: Ring,
    /// One slot: the records the program could not write for a full ring.
    drops: OwnedFd,
    _program: OwnedFd,
    _attached: OwnedFd,
    /// Records that could not be read (a length that is not a record's).
    unreadable: u64,
    /// What the program is made of besides its ports, for [`KernelTaps::set_ports`].
    layout: Layout,
    callback: u64,
    /// Where the watched programs' calls slept ([`CallTaps`]), or why not: the timer is kept
    /// on a kernel without their tracepoints.
    calls: Result<CallTaps, String>,
}

impl KernelTaps {
    /// Loads and attaches the program for the sockets of `ports`. Fails without CAP_BPF and
    /// CAP_PERFMON (`PermissionDenied`), or on a kernel without BTF or without the timer.
    pub fn attach(ports: &[u16]) -> io::Result<KernelTaps> {
        supported()?;
        // First what needs the privilege, so that its lack is what the error says.
        let ring = Ring::create(RING_BYTES)?;
        let drops = map_create(MAP_TYPE_ARRAY, 4, 8, 1)?;
        let btf = Btf::vmlinux()?;
        let layout = Layout::of(&btf)?;
        let callback = kernel_symbol(DELACK_TIMER_FUNCTION)?;
        let (program, attached) = load_and_attach(ports, &layout, callback, &ring, &drops)?;
        // A bad value of the variable leaves the calls out and says so, keeping the timer.
        let calls = match std::env::var(WATCH_CALLS).as_deref() {
            Ok("on") | Err(std::env::VarError::NotPresent) => {
                CallTaps::attach(ports, layout, &btf).map_err(|e| e.to_string())
            }
            Ok("off") => Err(format!("left out: {WATCH_CALLS}=off")),
            Ok(other) => Err(format!(
                "{WATCH_CALLS}={other:?} is not a choice: use `off` to leave them out or `on`, or \
                 leave it unset"
            )),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("{WATCH_CALLS} is not UTF-8: use `off` or `on`, or leave it unset"))
            }
        };
        Ok(KernelTaps {
            ring,
            drops,
            _program: program,
            _attached: attached,
            unreadable: 0,
            layout,
            callback,
            calls,
        })
    }

    /// Whether the watched programs' calls are recorded too, or why not.
    pub fn calls(&self) -> Result<(), String> {
        self.calls.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Keeps the sockets of `ports` from now on (a watched command's ports as they appear):
    /// the ports are in the program's instructions, so a new program writing to the same ring
    /// is attached, then the old one detached (a timer expiring in between may be recorded
    /// twice, by both).
    pub fn set_ports(&mut self, ports: &[u16]) -> io::Result<()> {
        let (program, attached) =
            load_and_attach(ports, &self.layout, self.callback, &self.ring, &self.drops)?;
        self._attached = attached;
        self._program = program;
        if let Ok(calls) = &mut self.calls {
            calls.set_ports(ports)?;
        }
        Ok(())
    }

    /// Records lost so far, the timer's and the calls': not written for a full ring, or
    /// unreadable.
    pub fn lost(&self) -> u64 {
        let calls = self.calls.as_ref().map_or(0, CallTaps::lost);
        map_lookup(&self.drops, 0).unwrap_or(0) + self.unreadable + calls
    }

    /// Calls `each` with every call of a watched program recorded since the last call.
    pub fn take_calls(&mut self, each: impl FnMut(SleptRead)) {
        if let Ok(calls) = &mut self.calls {
            calls.take(each);
        }
    }

    /// Calls `each` with every record written since the last call.
    pub fn take(&mut self, each: impl FnMut(DelayedAck)) {
        self.unreadable += self.ring.take_parsed(parse, each);
    }
}

/// The program for `ports`, loaded and attached to the timers' tracepoint.
fn load_and_attach(
    ports: &[u16],
    layout: &Layout,
    callback: u64,
    ring: &Ring,
    drops: &OwnedFd,
) -> io::Result<(OwnedFd, OwnedFd)> {
    let code = program(ports, layout, callback, ring.fd(), drops.as_raw_fd());
    load_on_raw_tracepoint(&code, TIMER_EXPIRES, "the delayed-ACK timer's program")
}

/// A record's bytes, as the program writes them (the `AT_*` offsets).
fn parse(bytes: &[u8]) -> Option<DelayedAck> {
    let bytes: &[u8; RECORD_BYTES] = bytes.try_into().ok()?;
    let (local, remote) =
        endpoints(bytes, [AT_LOCAL_ADDR, AT_REMOTE_ADDR], [AT_LOCAL_PORT, AT_REMOTE_PORT]);
    Some(DelayedAck {
        at_ns: u64::from_ne_bytes(bytes[AT_STAMP as usize..][..8].try_into().expect("8 bytes")),
        local,
        remote,
    })
}

/// A socket's two ends as the watch's programs copy them into a record: the local and remote
/// addresses at `addrs` (as they lie in memory: network order), the local port in host order
/// (`skc_num`) and the remote one in network order (`skc_dport`) at `ports`. The offsets are
/// inside `bytes` (the caller's record, of a fixed size).
pub(super) fn endpoints(bytes: &[u8], addrs: [i16; 2], ports: [i16; 2]) -> (Endpoint, Endpoint) {
    let field = |at: i16, len: usize| &bytes[at as usize..at as usize + len];
    let ip_at =
        |at: i16| IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(field(at, 4)).expect("4 bytes")));
    let [local_port, remote_port] =
        ports.map(|at| <[u8; 2]>::try_from(field(at, 2)).expect("2 bytes"));
    (
        (ip_at(addrs[0]), u16::from_ne_bytes(local_port)),
        (ip_at(addrs[1]), u16::from_be_bytes(remote_port)),
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    /// The timer is a socket's delayed-ACK timer.
    DelayedAckTimer,
    /// The socket is a watched one.
    Watched,
    /// The ring is full: count the record lost.
    Full,
    /// Done: the program returns.
    Exit,
}

// Registers the program keeps past its helper calls: r6 the timer, r7 its socket, r8 the
// copy of the socket's first bytes on the stack.
const TIMER: u8 = 6;
const SK: u8 = 7;
const COPY: u8 = 8;
/// Stack slots: the timer's callback, the ACK state byte, the socket's first bytes.
const CALLBACK_AT: i16 = -8;
const PENDING_AT: i16 = -16;
const COPY_AT: i16 = -16 - SOCKET_BYTES as i16;

/// Jumps to `watched` when a socket is a watched one: its local port (`skc_num`, host order, at
/// `r<base> + local_at`) is one of `ports` (a server's socket), or its remote port (`skc_dport`,
/// network order, at `r<base> + remote_at`) is (a client's). The one rule of the watch's
/// programs ([`super::calls`] too); uses r2.
pub(super) fn jump_if_watched<L: Copy>(
    a: &mut Assembler<L>,
    ports: &[u16],
    (base, local_at, remote_at): (u8, i16, i16),
    watched: L,
) {
    a.op(LDX_H, 2, base, local_at, 0);
    for &port in ports {
        a.jump(JEQ_K, 2, 0, i32::from(port), watched);
    }
    a.op(LDX_H, 2, base, remote_at, 0);
    for &port in ports {
        // As it lies in memory: network order.
        a.jump(JEQ_K, 2, 0, i32::from(u16::from_ne_bytes(port.to_be_bytes())), watched);
    }
}

/// `bpf_probe_read_kernel(r10 + to, len, r<from> + offset)`.
pub(super) fn read_kernel<L: Copy>(a: &mut Assembler<L>, to: i16, len: i32, from: u8, offset: i32) {
    a.op(MOV_X, 1, 10, 0, 0);
    a.op(ADD_K, 1, 0, 0, i32::from(to));
    a.op(MOV_K, 2, 0, 0, len);
    a.op(MOV_X, 3, from, 0, 0);
    a.op(ADD_K, 3, 0, 0, offset);
    a.op(CALL, 0, 0, 0, FN_PROBE_READ_KERNEL);
}

/// The program on `timer_expire_entry`: when the expiring timer's callback is the delayed-ACK
/// timer's, finds its socket, keeps it if its local port is a watched one (a server's socket)
/// or its remote port is (a client's), and writes a record if an ACK is due on the timer.
/// Pointers are the tracepoint's plain arguments here, so every read of the kernel's memory
/// goes through the helper, which cannot fault.
fn program(ports: &[u16], layout: &Layout, callback: u64, ring: RawFd, drops: RawFd) -> Vec<Insn> {
    let mut a = Assembler::new();
    a.op(LDX_DW, TIMER, 1, 0, 0);
    a.op(MOV_K, 1, 0, 0, 0);
    a.op(STX_DW, 10, 1, CALLBACK_AT, 0);
    read_kernel(&mut a, CALLBACK_AT, 8, TIMER, layout.timer_function);
    a.op(LDX_DW, 1, 10, CALLBACK_AT, 0);
    a.imm64(2, callback);
    a.jump(JEQ_X, 1, 2, 0, Label::DelayedAckTimer);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let delayed_ack_timer = a.here();
    a.op(MOV_X, SK, TIMER, 0, 0);
    a.op(ADD_K, SK, 0, 0, -layout.delack_timer);
    // The socket's addresses and ports, zeroed first: a failed read leaves zeros, no port.
    a.op(MOV_K, 1, 0, 0, 0);
    for slot in (0..SOCKET_BYTES as i16).step_by(8) {
        a.op(STX_DW, 10, 1, COPY_AT + slot, 0);
    }
    read_kernel(&mut a, COPY_AT, SOCKET_BYTES, SK, 0);
    a.op(MOV_X, COPY, 10, 0, 0);
    a.op(ADD_K, COPY, 0, 0, i32::from(COPY_AT));
    let (local_at, remote_at) = (layout.num as i16, layout.dport as i16);
    jump_if_watched(&mut a, ports, (COPY, local_at, remote_at), Label::Watched);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let watched = a.here();
    a.op(MOV_K, 1, 0, 0, 0);
    a.op(STX_DW, 10, 1, PENDING_AT, 0);
    read_kernel(&mut a, PENDING_AT, 1, SK, layout.ack_pending);
    a.op(LDX_B, 1, 10, PENDING_AT, 0);
    a.op(AND_K, 1, 0, 0, ACK_DUE_ON_TIMER);
    a.jump(JNE_K, 1, 0, ACK_DUE_ON_TIMER, Label::Exit);
    a.reserve(ring, RECORD_BYTES, Label::Full);
    a.op(MOV_X, 9, 0, 0, 0);
    a.op(CALL, 0, 0, 0, FN_KTIME_GET_NS);
    a.op(STX_DW, 9, 0, AT_STAMP, 0);
    for (from, size, to) in [
        (layout.rcv_saddr, LDX_W, AT_LOCAL_ADDR),
        (layout.daddr, LDX_W, AT_REMOTE_ADDR),
        (layout.num, LDX_H, AT_LOCAL_PORT),
        (layout.dport, LDX_H, AT_REMOTE_PORT),
    ] {
        a.op(size, 1, COPY, from as i16, 0);
        a.op(if size == LDX_W { STX_W } else { STX_H }, 9, 1, to, 0);
    }
    a.op(ST_W, 9, 0, AT_SPARE, 0);
    a.submit(9);
    a.jump(JA, 0, 0, 0, Label::Exit);
    // The ring is full: counted in the drops map's one slot.
    let (full, exit) = a.full_and_exit(drops, PENDING_AT, 0);
    a.finish(|label| match label {
        Label::DelayedAckTimer => delayed_ack_timer,
        Label::Watched => watched,
        Label::Full => full,
        Label::Exit => exit,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::bpf::checks;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    /// A layout of the kernel's structs for the programs' tests (the running kernel's comes
    /// from its BTF).
    pub(in crate::watch) fn layout() -> Layout {
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

    #[test]
    fn the_program_jumps_only_inside_itself_and_compares_each_port_both_ways() {
        let ports = [8080, 9090];
        let code = program(&ports, &layout(), 0xffff_ffff_8208_3350, 4, 5);
        checks::jumps_forward_inside(&code);
        checks::ends_returning(&code, 0);
        checks::compares_each_port_both_ways(&code, &ports);
        // The callback's address, whole, in a two-instruction immediate.
        let at = code.iter().position(|i| i.code == LD_IMM_DW && i.regs == 2).unwrap();
        assert_eq!((code[at].imm as u32, code[at + 1].imm as u32), (0x8208_3350, 0xffff_ffff));
        // The record's every byte is written, each field where `parse` reads it: the stores
        // through r9 (the reserved record).
        checks::writes_each_byte_once(&code, 9, RECORD_BYTES);
    }

    /// This kernel's BTF has every member the program reads, where it has BTF at all.
    #[test]
    fn this_kernels_btf_has_every_member_the_program_reads() {
        if !std::path::Path::new(crate::bpf::btf::VMLINUX).exists() {
            eprintln!("skipped this_kernels_btf_has_every_member_the_program_reads: no BTF");
            return;
        }
        let layout = Layout::of(&Btf::vmlinux().unwrap()).expect("every member the program reads");
        assert!(layout.delack_timer > 0 && layout.ack_pending > 0, "{layout:?}");
    }

    #[test]
    fn a_record_reads_back_as_the_program_writes_it() {
        let mut bytes = [0u8; RECORD_BYTES];
        let mut put = |at: i16, value: &[u8]| {
            bytes[at as usize..at as usize + value.len()].copy_from_slice(value)
        };
        put(AT_STAMP, &41_000_000u64.to_ne_bytes());
        put(AT_LOCAL_ADDR, &[127, 0, 0, 1]);
        put(AT_REMOTE_ADDR, &[127, 0, 0, 2]);
        put(AT_LOCAL_PORT, &8080u16.to_ne_bytes());
        put(AT_REMOTE_PORT, &51_000u16.to_be_bytes());
        let localhost = |last| IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
        assert_eq!(
            parse(&bytes),
            Some(DelayedAck {
                at_ns: 41_000_000,
                local: (localhost(1), 8080),
                remote: (localhost(2), 51_000)
            })
        );
        assert_eq!(parse(&bytes[..20]), None, "a short record");
    }

    /// On this kernel, as root: a client that writes its request in two writes with Nagle on
    /// meets the server's delayed-ACK timer, which is recorded as it fires, on the server's
    /// socket, about 40 ms after the first write; with TCP_NODELAY it never fires.
    #[test]
    #[ignore = "needs root (an eBPF program on a kernel tracepoint): cargo xtask test runs it as root"]
    fn the_servers_delayed_ack_timer_is_recorded_when_it_holds_a_nagled_request() {
        // SAFETY: geteuid() cannot fail and has no side effects.
        assert_eq!(unsafe { libc::geteuid() }, 0, "run as root (cargo xtask test does)");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut taps = KernelTaps::attach(&[port]).expect("root may attach the program");
        let exchanges = |nodelay: bool, taps: &mut KernelTaps| {
            let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
            client.set_nodelay(nodelay).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            let client_port = client.local_addr().unwrap().port();
            let serving = std::thread::spawn(move || {
                let mut buf = [0u8; 200];
                while server.read_exact(&mut buf).is_ok() {
                    server.write_all(&buf).unwrap();
                }
            });
            let (mut fired, mut slowest) = (Vec::new(), Duration::ZERO);
            let mut buf = [0u8; 200];
            for _ in 0..10 {
                let sent = Instant::now();
                client.write_all(&buf[..100]).unwrap();
                client.write_all(&buf[100..]).unwrap();
                client.read_exact(&mut buf).unwrap();
                slowest = slowest.max(sent.elapsed());
            }
            drop(client);
            serving.join().unwrap();
            // The ring is read once the timers that fired are in it: it is filled as they
            // fire, before the exchange they held ends.
            taps.take(|record| {
                if record.remote.1 == client_port || record.local.1 == client_port {
                    fired.push(record);
                }
            });
            (fired, slowest, client_port)
        };
        let (fired, slowest, client_port) = exchanges(false, &mut taps);
        assert!(slowest >= Duration::from_millis(30), "Nagle held a write: {slowest:?}");
        assert!(!fired.is_empty(), "the server's timer fired for the held write");
        for record in &fired {
            assert_eq!((record.local.1, record.remote.1), (port, client_port), "{record:?}");
        }
        let (fired, slowest, _) = exchanges(true, &mut taps);
        assert!(slowest < Duration::from_millis(30), "nothing held with TCP_NODELAY: {slowest:?}");
        assert!(fired.is_empty(), "no delayed ACK held a request: {fired:?}");
        assert_eq!(taps.lost(), 0);
    }
}
