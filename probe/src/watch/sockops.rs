//! `--try nodelay=...` from a new connection's first byte (root): a cgroup `sock_ops` program
//! turns TCP_NODELAY on for each new connection of the watched ports on a tried side as it is
//! established, before the program that owns the socket can write to it. The `pidfd_getfd`
//! path ([`super::tune`]) reaches a connection only once the watch has found its process, a
//! sample or two after its first packets: a client that reconnects every few requests would
//! stall on each new connection before the option got there.
//!
//! - The program runs for every TCP socket of the cgroup it is attached to, and keeps to the
//!   watched ports: a server's socket is one established passively on a watched local port, a
//!   client's one established actively to a watched remote port. The ports and the sides tried
//!   are in a map, so a port found later is added without reloading.
//! - It is attached at the root of the cgroup v2 hierarchy (its mount found in
//!   `/proc/self/mounts`): a socket is its creator's cgroup's, and the clients of a watched
//!   port, like a server a `--port` watch has not seen yet, may be in any cgroup. The port
//!   check is what keeps it to the watched connections.
//! - On each socket it changes it keeps, in the socket's own storage (a `sk_storage` map,
//!   freed with the socket), what the option was: the restore reads it back through the
//!   watch's copy of the socket, where the option, set by the program, would read as already
//!   on. For a client's socket it also keeps the process that connected (the connect call runs
//!   in that process), and each change is written to a ring for the session's record.
//! - The attachment is a BPF link, this process's: closing it (the watch ending, or the
//!   process ending however it ends, SIGKILL included) detaches the program, and new
//!   connections get no option from then on.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use ackscope_shared::tried::{TriedOption, TriedRecord};
use ackscope_shared::Side;

use super::process::{self, Owner};
use super::sock_diag;
use super::tune::Sides;
use crate::bpf::*;

/// The kernel's `struct bpf_sock_ops` (linux/bpf.h, stable uapi): the fields the program
/// reads. `remote_port` is the port in network order in its upper 16 bits (on a little-endian
/// host, as read), `local_port` the port in host order; `sk` is the socket, or null.
const OP_AT: i16 = 0;
const REMOTE_PORT_AT: i16 = 64;
const LOCAL_PORT_AT: i16 = 68;
const SK_AT: i16 = 184;
/// The callbacks (`BPF_SOCK_OPS_*`): a connect call (the caller's process runs it), and a
/// connection established actively (a client's socket) or passively (a server's).
const TCP_CONNECT: i32 = 3;
const ACTIVE_ESTABLISHED: i32 = 4;
const PASSIVE_ESTABLISHED: i32 = 5;
/// `SOL_TCP` and `TCP_NODELAY` for the program's `bpf_getsockopt` and `bpf_setsockopt`.
const SOL_TCP: i32 = 6;
const TCP_NODELAY: i32 = 1;
/// The ports map's values: which sides of a port's connections get the option.
const CLIENT: i32 = 1;
const SERVER: i32 = 2;
/// A socket's storage: the connecting process (clients) in its low 32 bits, then its state:
/// [`SET`] when the program turned the option on, [`WAS_ON`] when it was on before.
const STORED_PID_AT: i16 = 0;
const STORED_STATE_AT: i16 = 4;
const SET: u32 = 1;
const WAS_ON: u32 = 2;
/// The ring's records: the client's process (0 for a server's socket), the server port, the
/// side (0 client, 1 server) and whether the option was on before (the next byte), and when
/// (CLOCK_MONOTONIC).
const RECORD_BYTES: usize = 16;
const RECORD_PID_AT: i16 = 0;
const RECORD_PORT_AT: i16 = 4;
const RECORD_SIDE_AT: i16 = 6;
const RECORD_STAMP_AT: i16 = 8;
/// 64 KiB: about 4,000 records between two reads of the watch (every 10 ms or so).
const RING_BYTES: u32 = 64 << 10;
/// The ports a watch takes, and room to spare.
const MAX_PORTS: u32 = 64;

/// A new connection that got the option from its first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetOn {
    pub side: Side,
    /// The watched port of its connection.
    pub server_port: u16,
    /// A client's process, the one that connected; a server's socket is the listener's.
    pub pid: Option<u32>,
    /// The option was on already (set on the listener, or before connect).
    pub was_on: bool,
    /// When, on CLOCK_MONOTONIC.
    pub at_ns: u64,
}

/// The ports map's value for `sides`.
fn side_bits(sides: Sides) -> u64 {
    let bits = match sides {
        Sides::Client => CLIENT,
        Sides::Server => SERVER,
        Sides::Both => CLIENT | SERVER,
    };
    bits as u64
}

/// The `sock_ops` program, attached, with its maps.
pub struct FirstByte {
    ports: OwnedFd,
    storage: OwnedFd,
    ring: Ring,
    drops: OwnedFd,
    sides: u64,
    _program: OwnedFd,
    link: Option<OwnedFd>,
    /// Where it is attached: the cgroup v2 hierarchy's root.
    pub cgroup: PathBuf,
    unreadable: u64,
}

impl FirstByte {
    /// Loads the program for `ports` and `sides` and attaches it. Fails without root
    /// (`PermissionDenied`: CAP_BPF and CAP_NET_ADMIN), without cgroup v2 (`NotFound`), or
    /// when the kernel refuses the program (its verifier's words).
    pub fn attach(ports: &[u16], sides: Sides) -> io::Result<FirstByte> {
        supported()?;
        let sides = side_bits(sides);
        let port_map = map_create(MAP_TYPE_HASH, 4, 8, MAX_PORTS)?;
        for &port in ports {
            map_update(&port_map, u32::from(port), sides)?;
        }
        let storage = socket_storage()?;
        let ring = Ring::create(RING_BYTES)?;
        let drops = map_create(MAP_TYPE_ARRAY, 4, 8, 1)?;
        let code = program(port_map.as_raw_fd(), storage.as_raw_fd(), ring.fd(), drops.as_raw_fd());
        let kind = ProgramKind {
            prog_type: PROG_TYPE_SOCK_OPS,
            expected_attach_type: ATTACH_CGROUP_SOCK_OPS,
            attach_btf_id: 0,
        };
        let program = load(&kind, &code).map_err(|e| {
            io::Error::new(e.kind(), format!("loading the new connections' sock_ops program: {e}"))
        })?;
        let cgroup = cgroup_v2_root()?;
        let directory = std::fs::File::open(&cgroup)?;
        let link =
            link(&program, directory.as_raw_fd() as u32, ATTACH_CGROUP_SOCK_OPS).map_err(|e| {
                io::Error::new(e.kind(), format!("attaching to {}: {e}", cgroup.display()))
            })?;
        Ok(FirstByte {
            ports: port_map,
            storage,
            ring,
            drops,
            sides,
            _program: program,
            link: Some(link),
            cgroup,
            unreadable: 0,
        })
    }

    /// New connections on `port` get the option too from now on.
    pub fn add_port(&self, port: u16) -> io::Result<()> {
        map_update(&self.ports, u32::from(port), self.sides)
    }

    /// New connections on `ports` get the option on `sides` too from now on (a try added to a
    /// running watch).
    pub fn widen(&mut self, sides: Sides, ports: &[u16]) -> io::Result<()> {
        self.sides |= side_bits(sides);
        ports.iter().try_for_each(|&port| self.add_port(port))
    }

    /// Calls `each` with every connection the program changed since the last call.
    pub fn take(&mut self, each: impl FnMut(SetOn)) {
        self.unreadable += self.ring.take_parsed(parse, each);
    }

    /// Changes lost for the session's record (a full ring, or unreadable): the sockets got the
    /// option all the same.
    pub fn lost(&self) -> u64 {
        map_lookup(&self.drops, 0).unwrap_or(0) + self.unreadable
    }

    /// Whether the program turned the option on for `socket` (a copy of a watched program's
    /// socket), and if so whether it was on before: what to put back.
    pub fn set_by_program(&self, socket: &OwnedFd) -> Option<bool> {
        let stored = map_lookup(&self.storage, socket.as_raw_fd() as u32)?;
        let state = (stored >> 32) as u32;
        (state & SET != 0).then_some(state & WAS_ON != 0)
    }

    /// New connections get no option from now on (the sockets' storage stays readable).
    pub fn detach(&mut self) {
        self.link = None;
    }
}

/// The `/proc` walk for a listener's process (a server's socket is counted as its), and for
/// the sockets still open at the end of the watch, at most this long.
const LISTENER_WITHIN: Duration = Duration::from_millis(50);
const LEFT_OPEN_WITHIN: Duration = Duration::from_millis(500);

/// A watch's new connections with `--try nodelay=...`, as root: the program, and what it did,
/// for the session's record and the restore.
pub struct NewConnections {
    program: FirstByte,
    /// The process listening on each watched port, once looked for (`None`: not found).
    listeners: HashMap<u16, Option<(u32, String)>>,
    /// Processes (and sides) said once each.
    said: HashSet<(Side, u32)>,
    /// Sockets changed, per side (client, server).
    pub changed: [u64; 2],
}

impl std::fmt::Debug for NewConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewConnections")
            .field("cgroup", &self.program.cgroup)
            .field("changed", &self.changed)
            .finish_non_exhaustive()
    }
}

impl NewConnections {
    /// Attaches the program for `ports` and `sides`; the error says why new connections get
    /// the option within a sample instead, for a line of the watch's.
    pub fn start(ports: &[u16], sides: Sides) -> Result<NewConnections, String> {
        let program = FirstByte::attach(ports, sides).map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => {
                format!("a cgroup sock_ops program needs root (CAP_BPF and CAP_NET_ADMIN): {e}")
            }
            _ => e.to_string(),
        })?;
        Ok(NewConnections {
            program,
            listeners: HashMap::new(),
            said: HashSet::new(),
            changed: [0; 2],
        })
    }

    /// Where the program is attached.
    pub fn cgroup(&self) -> &std::path::Path {
        &self.program.cgroup
    }

    pub fn add_port(&self, port: u16) -> io::Result<()> {
        self.program.add_port(port)
    }

    /// See [`FirstByte::widen`].
    pub fn widen(&mut self, sides: Sides, ports: &[u16]) -> io::Result<()> {
        self.program.widen(sides, ports)
    }

    /// Counts in `record` the sockets the program changed since the last call, each under its
    /// process: a client's, the one that connected; a server's, the one listening on the port.
    /// Returns what to say (a process's first socket) and, if `record` changed, when the first
    /// of these changes was made (CLOCK_MONOTONIC).
    pub fn take(&mut self, record: &mut TriedRecord) -> (Vec<String>, Option<u64>) {
        let mut sets = Vec::new();
        self.program.take(|set| sets.push(set));
        let mut said = Vec::new();
        let changed = sets.iter().map(|set| set.at_ns).min();
        for set in sets {
            self.changed[usize::from(set.side == Side::Server)] += 1;
            let owner = match set.pid {
                Some(pid) => Some((pid, process::command_of(pid))),
                None => self.listener(set.server_port),
            };
            // Not found (another namespace's): the socket got the option, the record cannot
            // name whose it was.
            let Some((pid, command)) = owner else { continue };
            record.count(TriedOption::NoDelay, set.side, pid, &command, set.was_on);
            if self.said.insert((set.side, pid)) {
                said.push(format!(
                    "TCP_NODELAY {} -> on from the first byte of each new connection of pid \
                     {pid} ({command}), the {} on port {}",
                    if set.was_on { "on" } else { "off" },
                    set.side.name(),
                    set.server_port
                ));
            }
        }
        (said, changed)
    }

    /// The process listening on `port`, looked for once.
    fn listener(&mut self, port: u16) -> Option<(u32, String)> {
        self.listeners
            .entry(port)
            .or_insert_with(|| {
                let listing = sock_diag::on_ports(&[port], sock_diag::MAX_SOCKETS).ok()?;
                let inodes: HashSet<u32> = listing
                    .sockets
                    .iter()
                    .filter(|s| s.state == sock_diag::TcpState::Listen && s.local.port() == port)
                    .map(|s| s.inode)
                    .collect();
                let owner = process::owners(&inodes, LISTENER_WITHIN).into_values().next()?;
                Some((owner.pid, owner.command))
            })
            .clone()
    }

    /// Whether the program turned the option on for `socket`, and what it was before.
    pub fn set_by_program(&self, socket: &OwnedFd) -> Option<bool> {
        self.program.set_by_program(socket)
    }

    /// The watch ends: new connections get nothing from now on. Returns the sockets of `ports`
    /// still open, not among `reached` (inodes), with their processes: the restore takes those
    /// the program changed.
    pub fn end(&mut self, ports: &[u16], reached: &HashSet<u32>) -> HashMap<u32, Owner> {
        self.program.detach();
        let Ok(listing) = sock_diag::on_ports(ports, sock_diag::MAX_SOCKETS) else {
            return HashMap::new();
        };
        let open: HashSet<u32> = listing
            .sockets
            .iter()
            .filter(|s| s.inode != 0 && s.remote.port() != 0 && !reached.contains(&s.inode))
            .map(|s| s.inode)
            .collect();
        process::owners(&open, LEFT_OPEN_WITHIN)
    }

    /// Changes the session's record could not count (a full ring).
    pub fn lost(&self) -> u64 {
        self.program.lost()
    }
}

/// The root of the cgroup v2 hierarchy, where `/proc/self/mounts` says it is mounted (a
/// hybrid layout mounts it beside the v1 controllers, at `/sys/fs/cgroup/unified` for one).
fn cgroup_v2_root() -> io::Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    mounts
        .lines()
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .find(|fields| fields.len() > 2 && fields[2] == "cgroup2")
        .map(|fields| PathBuf::from(unescape_mount_path(fields[1])))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup v2 is mounted (/proc/self/mounts has no cgroup2), which a sock_ops \
                 program attaches to",
            )
        })
}

/// A mount point as `/proc/self/mounts` writes it: space, tab, newline and backslash as octal
/// escapes (`\040`).
fn unescape_mount_path(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(digits)) => {
                out.push(digits.iter().fold(0u8, |n, d| n.wrapping_mul(8) + (d - b'0')));
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse(bytes: &[u8]) -> Option<SetOn> {
    let bytes: &[u8; RECORD_BYTES] = bytes.try_into().ok()?;
    let at = |at: i16| at as usize;
    let pid = u32::from_ne_bytes(bytes[at(RECORD_PID_AT)..at(RECORD_PID_AT) + 4].try_into().ok()?);
    let server_port =
        u16::from_ne_bytes(bytes[at(RECORD_PORT_AT)..at(RECORD_PORT_AT) + 2].try_into().ok()?);
    let side = match bytes[at(RECORD_SIDE_AT)] {
        0 => Side::Client,
        1 => Side::Server,
        _ => return None,
    };
    Some(SetOn {
        side,
        server_port,
        pid: (side == Side::Client && pid != 0).then_some(pid),
        was_on: bytes[at(RECORD_SIDE_AT) + 1] != 0,
        at_ns: u64::from_ne_bytes(bytes[at(RECORD_STAMP_AT)..].try_into().ok()?),
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Client,
    Server,
    Ports,
    Established,
    Off,
    Set,
    Full,
    Exit,
}

// Registers kept past helper calls: r6 the context (then the ring's record), r7 the callback,
// r8 the side wanted then whether the option was on, r9 the socket's storage.
const CTX: u8 = 6;
const RECORD: u8 = 6;
const OP: u8 = 7;
const SIDE_OR_WAS: u8 = 8;
const STORED: u8 = 9;
/// Stack slots: the port (the ports map's key, then the record's), the option's value.
const PORT_AT: i16 = -4;
const VALUE_AT: i16 = -8;

/// `bpf_getsockopt` or `bpf_setsockopt(ctx, SOL_TCP, TCP_NODELAY, r10 + VALUE_AT, 4)`.
fn sockopt(a: &mut Assembler<Label>, helper: i32) {
    a.op(MOV_X, 1, CTX, 0, 0);
    a.op(MOV_K, 2, 0, 0, SOL_TCP);
    a.op(MOV_K, 3, 0, 0, TCP_NODELAY);
    a.op(MOV_X, 4, 10, 0, 0);
    a.op(ADD_K, 4, 0, 0, i32::from(VALUE_AT));
    a.op(MOV_K, 5, 0, 0, 4);
    a.op(CALL, 0, 0, 0, helper);
}

/// The program: on a connect to a watched port (client side tried), keeps the connecting
/// process in the socket's storage; on a connection established on a tried side of a watched
/// port, reads TCP_NODELAY, keeps it in the storage, turns it on, and writes a record.
fn program(ports: RawFd, storage: RawFd, ring: RawFd, drops: RawFd) -> Vec<Insn> {
    let mut a = Assembler::new();
    a.op(MOV_X, CTX, 1, 0, 0);
    a.op(LDX_W, OP, CTX, OP_AT, 0);
    a.jump(JEQ_K, OP, 0, TCP_CONNECT, Label::Client);
    a.jump(JEQ_K, OP, 0, ACTIVE_ESTABLISHED, Label::Client);
    a.jump(JEQ_K, OP, 0, PASSIVE_ESTABLISHED, Label::Server);
    a.jump(JA, 0, 0, 0, Label::Exit);
    // A client's socket: the remote port is the watched one.
    let client = a.here();
    a.op(LDX_W, 2, CTX, REMOTE_PORT_AT, 0);
    a.op(RSH_K, 2, 0, 0, 16);
    a.op(END_TO_BE, 2, 0, 0, 16);
    a.op(MOV_K, SIDE_OR_WAS, 0, 0, CLIENT);
    a.jump(JA, 0, 0, 0, Label::Ports);
    // A server's socket: the local port.
    let server = a.here();
    a.op(LDX_W, 2, CTX, LOCAL_PORT_AT, 0);
    a.op(MOV_K, SIDE_OR_WAS, 0, 0, SERVER);
    let ports_at = a.here();
    a.op(STX_W, 10, 2, PORT_AT, 0);
    a.op(MOV_X, 2, 10, 0, 0);
    a.op(ADD_K, 2, 0, 0, i32::from(PORT_AT));
    a.map(1, ports);
    a.op(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM);
    a.jump(JEQ_K, 0, 0, 0, Label::Exit);
    a.op(LDX_DW, 1, 0, 0, 0);
    a.op(AND_X, 1, SIDE_OR_WAS, 0, 0);
    a.jump(JEQ_K, 1, 0, 0, Label::Exit);
    // The socket's storage, created on its first use.
    a.op(LDX_DW, 2, CTX, SK_AT, 0);
    a.jump(JEQ_K, 2, 0, 0, Label::Exit);
    a.map(1, storage);
    a.op(MOV_K, 3, 0, 0, 0);
    a.op(MOV_K, 4, 0, 0, SK_STORAGE_CREATE);
    a.op(CALL, 0, 0, 0, FN_SK_STORAGE_GET);
    a.jump(JEQ_K, 0, 0, 0, Label::Exit);
    a.op(MOV_X, STORED, 0, 0, 0);
    a.jump(JNE_K, OP, 0, TCP_CONNECT, Label::Established);
    // connect() runs in the connecting process: its pid is the client's.
    a.op(CALL, 0, 0, 0, FN_GET_CURRENT_PID_TGID);
    a.op(RSH_K, 0, 0, 0, 32);
    a.op(STX_W, STORED, 0, STORED_PID_AT, 0);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let established = a.here();
    a.op(ST_W, 10, 0, VALUE_AT, 0);
    sockopt(&mut a, FN_GETSOCKOPT);
    // Not known as it was: left alone (the pidfd path reads it itself).
    a.jump(JNE_K, 0, 0, 0, Label::Exit);
    a.op(LDX_W, SIDE_OR_WAS, 10, VALUE_AT, 0);
    a.jump(JEQ_K, SIDE_OR_WAS, 0, 0, Label::Off);
    a.op(MOV_K, SIDE_OR_WAS, 0, 0, 1);
    let off = a.here();
    // What it was is kept before it changes: whoever reads it on, reads this too.
    a.op(MOV_X, 1, SIDE_OR_WAS, 0, 0);
    a.op(LSH_K, 1, 0, 0, 1);
    a.op(OR_K, 1, 0, 0, SET as i32);
    a.op(STX_W, STORED, 1, STORED_STATE_AT, 0);
    a.op(ST_W, 10, 0, VALUE_AT, 1);
    sockopt(&mut a, FN_SETSOCKOPT);
    a.jump(JEQ_K, 0, 0, 0, Label::Set);
    a.op(ST_W, STORED, 0, STORED_STATE_AT, 0);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let set = a.here();
    a.reserve(ring, RECORD_BYTES, Label::Full);
    // The context is not read again: its register keeps the record past the clock's call.
    a.op(MOV_X, RECORD, 0, 0, 0);
    a.op(CALL, 0, 0, 0, FN_KTIME_GET_NS);
    a.op(STX_DW, RECORD, 0, RECORD_STAMP_AT, 0);
    a.op(LDX_W, 1, STORED, STORED_PID_AT, 0);
    a.op(STX_W, RECORD, 1, RECORD_PID_AT, 0);
    a.op(LDX_W, 1, 10, PORT_AT, 0);
    a.op(STX_H, RECORD, 1, RECORD_PORT_AT, 0);
    // The side in the low byte (1, a server's), whether it was on in the next.
    a.op(MOV_X, 1, SIDE_OR_WAS, 0, 0);
    a.op(LSH_K, 1, 0, 0, 8);
    a.op(JNE_K, OP, 0, 1, PASSIVE_ESTABLISHED);
    a.op(OR_K, 1, 0, 0, 1);
    a.op(STX_H, RECORD, 1, RECORD_SIDE_AT, 0);
    a.submit(RECORD);
    a.jump(JA, 0, 0, 0, Label::Exit);
    let (full, exit) = a.full_and_exit(drops, VALUE_AT, 1);
    a.finish(|label| match label {
        Label::Client => client,
        Label::Server => server,
        Label::Ports => ports_at,
        Label::Established => established,
        Label::Off => off,
        Label::Set => set,
        Label::Full => full,
        Label::Exit => exit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_jumps_only_inside_itself_and_records_read_back() {
        let code = program(3, 4, 5, 6);
        crate::bpf::checks::jumps_forward_inside(&code);
        let mut record = [0u8; RECORD_BYTES];
        record[..4].copy_from_slice(&4711u32.to_ne_bytes());
        record[4..6].copy_from_slice(&8080u16.to_ne_bytes());
        record[6] = 0;
        record[7] = 1;
        record[8..].copy_from_slice(&42u64.to_ne_bytes());
        let set = parse(&record).unwrap();
        let client = SetOn {
            side: Side::Client,
            server_port: 8080,
            pid: Some(4711),
            was_on: true,
            at_ns: 42,
        };
        assert_eq!(set, client);
        record[6] = 1;
        assert_eq!(parse(&record).unwrap().pid, None, "a server's socket: the listener's");
        record[6] = 2;
        assert_eq!(parse(&record), None);
        assert_eq!(parse(&record[..4]), None);
    }

    fn monotonic_ns() -> u64 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: the kernel writes the time into `now`, which outlives the call.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
    }

    #[test]
    fn a_mount_point_reads_with_its_escapes() {
        assert_eq!(unescape_mount_path("/sys/fs/cgroup/unified"), "/sys/fs/cgroup/unified");
        assert_eq!(unescape_mount_path("/mnt/my\\040cgroups"), "/mnt/my cgroups");
        assert_eq!(unescape_mount_path("/a\\\\b\\04"), "/a\\\\b\\04");
    }

    /// As root: the program loads and attaches, and a connection to a watched port has
    /// TCP_NODELAY on both its sockets as soon as connect() and accept() return, kept in
    /// their storage as off before; a port not watched is left alone; detached, new
    /// connections get nothing.
    #[test]
    #[ignore = "needs root (a cgroup sock_ops program): cargo xtask test runs it as root"]
    fn new_connections_of_a_watched_port_get_nodelay_from_their_first_byte() {
        use std::net::{TcpListener, TcpStream};
        // SAFETY: geteuid() cannot fail and has no side effects.
        assert_eq!(unsafe { libc::geteuid() }, 0, "run as root (cargo xtask test does)");
        let watched = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = watched.local_addr().unwrap().port();
        let mut first_byte = FirstByte::attach(&[port], Sides::Both).expect("root may");
        let nodelay = |s: &TcpStream| s.nodelay().unwrap();
        let client = TcpStream::connect(watched.local_addr().unwrap()).unwrap();
        let (server, _) = watched.accept().unwrap();
        assert!(nodelay(&client) && nodelay(&server), "on from the first byte");
        let own = |s: &TcpStream| OwnedFd::from(s.try_clone().unwrap());
        assert_eq!(first_byte.set_by_program(&own(&client)), Some(false));
        assert_eq!(first_byte.set_by_program(&own(&server)), Some(false));
        let mut seen = Vec::new();
        first_byte.take(|set| seen.push(set));
        seen.sort_by_key(|set| set.side == Side::Server);
        let me = std::process::id();
        let now = monotonic_ns();
        assert!(seen.iter().all(|set| set.at_ns <= now && now - set.at_ns < 10_000_000_000));
        let seen: Vec<_> = seen.into_iter().map(|set| SetOn { at_ns: 0, ..set }).collect();
        assert_eq!(
            seen,
            [
                SetOn {
                    side: Side::Client,
                    server_port: port,
                    pid: Some(me),
                    was_on: false,
                    at_ns: 0
                },
                SetOn { side: Side::Server, server_port: port, pid: None, was_on: false, at_ns: 0 },
            ]
        );
        let elsewhere = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!nodelay(&elsewhere), "a port not watched is left alone");
        assert_eq!(first_byte.set_by_program(&own(&elsewhere)), None);
        first_byte.detach();
        let after = TcpStream::connect(watched.local_addr().unwrap()).unwrap();
        assert!(!nodelay(&after), "detached: nothing on new connections");
        assert_eq!(first_byte.lost(), 0);
    }
}
