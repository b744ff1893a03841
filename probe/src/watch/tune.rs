//! Trying a socket option on another program's running sockets, without touching its code
//! (`watch --try nodelay=server`), and putting it back.
//!
//! `pidfd_getfd` (Linux 5.6) gives this process its own descriptor of a socket another process
//! holds: the same socket, so `setsockopt` on the copy changes the program's socket. It needs
//! the right to ptrace the program: root or CAP_SYS_PTRACE, or, for a command ackscope started
//! (`watch -- COMMAND`, [`Scope`]), being its ancestor as the same user, where Yama's
//! `ptrace_scope` is at most 1 ([`ptrace_scope`]). Every change is
//! kept with what the option was ([`Changed`]), and put back when the [`Tuner`] is dropped:
//! when the watch ends by Ctrl-C, `--duration`, an error or a panic. A SIGKILL of ackscope ends
//! it before anything can run: the options then stay as tried, on sockets the program keeps
//! (`docs/WATCH.md` says so).
//!
//! Only options that stay set are tried: TCP_NODELAY. TCP_QUICKACK does not stay (the kernel
//! leaves quick-ACK mode again by itself, so the program would have to set it after every
//! read), and TCP_CORK set from outside would hold the program's data until it uncorked,
//! which it never does: both are refused with that reason.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use ackscope_shared::exchange::Conversations;
use ackscope_shared::tried::{OptionTried, TriedRecord};
use ackscope_shared::{ConnId, Side};

use super::process;
use super::sock_diag::TcpSocket;
use super::sockops::NewConnections;

/// A socket option a watch may try: the session's own name for it, so that what a file
/// records as tried is the option that was set.
pub use ackscope_shared::tried::TriedOption as Knob;

/// The option's level and name for `getsockopt` and `setsockopt`.
fn level_and_name(knob: Knob) -> (libc::c_int, libc::c_int) {
    match knob {
        Knob::NoDelay => (libc::IPPROTO_TCP, libc::TCP_NODELAY),
    }
}

/// Which side's sockets an option is tried on: the session's own, as a page asks for it.
pub use ackscope_shared::tried::Sides;

/// One `--try`: an option, on one side's sockets or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Try {
    pub knob: Knob,
    pub sides: Sides,
}

impl std::str::FromStr for Try {
    type Err = String;

    /// "nodelay=server"; a refusal says why and what would do.
    fn from_str(text: &str) -> Result<Try, String> {
        let (option, sides) = text.split_once('=').ok_or_else(|| {
            format!("{text:?}: write OPTION=SIDE, for instance nodelay=server (SIDE: client, server or both)")
        })?;
        let sides = match sides {
            "client" => Sides::Client,
            "server" => Sides::Server,
            "both" => Sides::Both,
            other => {
                return Err(format!("{other:?} is not a side: client, server or both"));
            }
        };
        let knob = match option {
            "nodelay" => Knob::NoDelay,
            "quickack" => {
                return Err("quickack does not apply from outside: the kernel clears TCP_QUICKACK \
                            as it leaves quick-ACK mode, so the program itself has to set it again \
                            after every read (the stall's fixes say where)"
                    .into())
            }
            "cork" => {
                return Err(
                    "cork does not apply from outside: TCP_CORK set on a running program's \
                            socket holds its data until the program uncorks, which it never does"
                        .into(),
                )
            }
            other => return Err(format!("{other:?} is not an option a watch can try: nodelay")),
        };
        Ok(Try { knob, sides })
    }
}

impl Try {
    /// The sides this try names that none of `tried` covers for its option: what it adds.
    pub fn sides_beyond(self, tried: &[Try]) -> impl Iterator<Item = Side> + '_ {
        let covered =
            move |side: Side| tried.iter().any(|t| t.knob == self.knob && t.sides.includes(side));
        self.sides.each().filter(move |side| !covered(*side))
    }
}

impl std::fmt::Display for Try {
    /// "nodelay=server", as it is written on the command line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let option = match self.knob {
            Knob::NoDelay => "nodelay",
        };
        let sides = match self.sides {
            Sides::Client => "client",
            Sides::Server => "server",
            Sides::Both => "both",
        };
        write!(f, "{option}={sides}")
    }
}

/// A socket whose option was changed: which, where, what it was. No copy of the socket is
/// kept: a copy held here would keep the socket open after the program closed it (no FIN would
/// leave, its peer would wait), so the restore takes a new copy of the same descriptor and
/// checks that it is still the same socket (its inode).
#[derive(Debug)]
pub struct Changed {
    pub pid: u32,
    pub command: String,
    /// The program's descriptor number of the socket.
    pub fd: RawFd,
    /// The socket's inode: the descriptor number may name another socket later.
    pub inode: u64,
    pub knob: Knob,
    pub was: bool,
}

impl std::fmt::Display for Changed {
    /// "TCP_NODELAY off -> on on fd 5 of pid 4711 (python3)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let onoff = |on: bool| if on { "on" } else { "off" };
        write!(
            f,
            "{} {} -> on on fd {} of pid {} ({})",
            self.knob.name(),
            onoff(self.was),
            self.fd,
            self.pid,
            self.command
        )
    }
}

/// Why an option could not be tried on a socket.
#[derive(Debug)]
pub enum Refused {
    /// The process may not be touched by this one: what would allow it.
    NoRight(String),
    /// The process or the descriptor went away meanwhile.
    Gone(io::Error),
    Other(io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NoRight(why) => f.write_str(why),
            Refused::Gone(e) => write!(f, "gone meanwhile ({e})"),
            Refused::Other(e) => write!(f, "{e}"),
        }
    }
}

/// The changes made, put back on drop.
#[derive(Debug, Default)]
pub struct Tuner {
    changed: Vec<Changed>,
}

impl Tuner {
    /// Turns `knob` on for descriptor `fd` of process `pid`, keeping what it was; the copy of
    /// the socket it is set through is closed before this returns.
    pub fn apply(
        &mut self,
        pid: u32,
        command: &str,
        fd: RawFd,
        knob: Knob,
    ) -> Result<&Changed, Refused> {
        let copy = copy_of(pid, fd).map_err(|e| refusal(pid, command, e))?;
        let inode = inode_of(&copy).map_err(Refused::Other)?;
        let was = get(&copy, knob).map_err(Refused::Other)?;
        set(&copy, knob, true).map_err(Refused::Other)?;
        let command = command.to_string();
        self.changed.push(Changed { pid, command, fd, inode, knob, was });
        Ok(self.changed.last().expect("just pushed"))
    }

    /// Keeps descriptor `fd` of process `pid` for the restore if the first-byte program turned
    /// `knob` on for it (`new`), with what it was before the program did: the option reads as
    /// on now, whatever it was. Returns whether it did; a socket it did not is left alone.
    pub fn take_over(
        &mut self,
        pid: u32,
        command: &str,
        fd: RawFd,
        knob: Knob,
        new: &NewConnections,
    ) -> Result<bool, Refused> {
        let copy = copy_of(pid, fd).map_err(|e| refusal(pid, command, e))?;
        let Some(was) = new.set_by_program(&copy) else { return Ok(false) };
        let inode = inode_of(&copy).map_err(Refused::Other)?;
        let command = command.to_string();
        self.changed.push(Changed { pid, command, fd, inode, knob, was });
        Ok(true)
    }

    /// The changes in force.
    pub fn changed(&self) -> &[Changed] {
        &self.changed
    }

    /// Forgets the changes made on the socket `inode`: the program closed it (the watch
    /// retired its connection), so there is nothing to put back, and a watch that runs for days
    /// keeps only the changes on sockets still open.
    pub fn forget(&mut self, inode: u64) {
        self.changed.retain(|changed| changed.inode != inode);
    }

    /// Puts every option back as it was; returns each change with how its restore went (a
    /// socket the program closed meanwhile took the change with it).
    pub fn restore(&mut self) -> Vec<(Changed, io::Result<()>)> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .map(|changed| {
                let result = put_back(&changed);
                (changed, result)
            })
            .collect()
    }
}

/// Sets `changed`'s option back through a new copy of its descriptor, if that is still its
/// socket.
fn put_back(changed: &Changed) -> io::Result<()> {
    let copy = copy_of(changed.pid, changed.fd)?;
    if inode_of(&copy)? != changed.inode {
        return Err(io::Error::other("its descriptor now names another socket"));
    }
    set(&copy, changed.knob, changed.was)
}

/// The inode of the socket `fd` is a descriptor of.
fn inode_of(fd: &OwnedFd) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::File::from(fd.try_clone()?).metadata().map(|m| m.ino())
}

impl Drop for Tuner {
    fn drop(&mut self) {
        for (changed, result) in self.restore() {
            if let Err(e) = result {
                tracing::warn!("putting back {changed}: {e}");
            }
        }
    }
}

/// Which processes a watch of a command (`watch -- COMMAND`) may change: the command's own
/// (it and its descendants, which ackscope, their ancestor, may change without root), and any
/// on a port named with `--port` or `--pid`, as without a command. Other programs on a port
/// that only the command's connections brought are left alone.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// The command, and its descendants found so far.
    pub processes: HashSet<u32>,
    /// The command: a process not among `processes` that descends from it now is its too.
    pub root: Option<u32>,
    pub named_ports: Vec<u16>,
}

impl Scope {
    /// Whether a socket of process `pid` on a connection to `server_port` may be changed.
    fn allows(&self, pid: u32, server_port: u16) -> bool {
        self.processes.contains(&pid)
            || self.named_ports.contains(&server_port)
            || self.root.is_some_and(|root| process::descends_from(pid, root))
    }
}

/// The watch's `--try` options and what they changed: each followed connection's local socket
/// on a tried side gets the option once, as soon as the watch finds its process.
#[derive(Debug, Default)]
pub struct Trials {
    tries: Vec<Try>,
    tuner: Tuner,
    /// Sockets (inodes) already tried, changed or refused: each once.
    done: HashSet<u32>,
    /// Processes refused, with why: said once each.
    refused: HashMap<u32, String>,
    /// `watch -- COMMAND`: the processes that may be changed; `None`, any of a watched
    /// connection's.
    scope: Option<Scope>,
    /// Sockets left alone as outside the scope, by inode, with their process: tried again if
    /// the process joins it (found among the command's descendants later).
    outside: HashMap<u32, u32>,
    /// Processes said to be outside the scope: once each.
    outside_said: HashSet<u32>,
    /// When `/proc` was last walked for the sockets' processes.
    sought: Option<Instant>,
    /// `--try-after`: nothing is changed before this.
    not_before: Option<Instant>,
    /// The sockets (inodes) tried of each followed connection, forgotten with it
    /// ([`Trials::forget_connection`]): a watch that runs for days keeps the open ones.
    of_connection: HashMap<ConnId, Vec<u32>>,
    /// Whether an option was applied on the client's side, on the server's.
    applied: [bool; 2],
    /// What was changed per option, side and process: the session's record of what was tried
    /// ([`Trials::take_record`]).
    record: TriedRecord,
    /// Whether `record` changed since it was last taken.
    record_changed: bool,
    /// As root, the option on new connections from their first byte ([`NewConnections`]),
    /// started at the watch's first step ([`Trials::new_connections`]).
    new_connections: Option<NewConnections>,
    new_connections_begun: bool,
    /// When the first change since the record was last taken was made, when it was not just
    /// now (the program's, on CLOCK_MONOTONIC): where the session splits.
    changed_at_ns: Option<u64>,
    /// The watched ports: where the sockets still open at the end are looked for.
    ports: Vec<u16>,
    /// The options and sides of each group of tries not yet applied to any socket: the
    /// command line's `--try` flags are one group, each try a page adds ([`Trials::add`])
    /// another. The first change a group makes splits the session there ([`Trials::take_record`]).
    fresh: Vec<Vec<(Knob, Side)>>,
    /// A group made its first change since the record was last taken.
    split: bool,
}

/// `/proc` is walked for the sockets to change at most this often, for at most this long: a
/// new connection gets the option within about [`SOUGHT_EVERY`] of its first packet.
const SOUGHT_EVERY: Duration = Duration::from_millis(100);
const SOUGHT_WITHIN: Duration = Duration::from_millis(50);

impl Trials {
    pub fn new(tries: Vec<Try>) -> Trials {
        let group: Vec<(Knob, Side)> =
            tries.iter().flat_map(|t| t.sides.each().map(move |side| (t.knob, side))).collect();
        let fresh = if group.is_empty() { Vec::new() } else { vec![group] };
        Trials { tries, fresh, ..Trials::default() }
    }

    /// Tries `added` too, from now on (a page's "try" button on its running watch): its first
    /// change splits the session again. Refused when every side it names is tried already.
    pub fn add(&mut self, added: Try) -> Result<(), String> {
        let group: Vec<(Knob, Side)> =
            added.sides_beyond(&self.tries).map(|side| (added.knob, side)).collect();
        if group.is_empty() {
            return Err(format!(
                "{} is tried on {} already in this watch",
                added.knob.name(),
                added.sides.words()
            ));
        }
        self.tries.push(added);
        self.fresh.push(group);
        if let Some(new) = &mut self.new_connections {
            if let Err(e) = new.widen(added.sides, &self.ports) {
                tracing::warn!(
                    "watch: new connections get {} on {} within a sample, not from their first \
                     byte ({e})",
                    added.knob.name(),
                    added.sides.words()
                );
            }
        }
        Ok(())
    }

    /// `knob` was applied to a socket on `side`: the first such change of a fresh group of
    /// tries splits the session.
    fn changed(&mut self, knob: Knob, side: Side) {
        if let Some(at) = self.fresh.iter().position(|group| group.contains(&(knob, side))) {
            self.fresh.remove(at);
            self.split = true;
        }
    }

    /// The options go into force only from `at` on (`--try-after`): the watch's first run is
    /// the programs as they were for that long, the one after it with the options.
    pub fn not_before(&mut self, at: Instant) {
        self.not_before = Some(at);
    }

    /// Whether the options are to go into force now (`--try-after` has passed, or none given).
    fn due(&self) -> bool {
        self.not_before.is_none_or(|at| Instant::now() >= at)
    }

    pub fn is_empty(&self) -> bool {
        self.tries.is_empty()
    }

    /// Limits the changes to `scope` from now on (`watch -- COMMAND`; called again as the
    /// command's processes change). A socket left alone before is tried again if its process
    /// is in the scope now.
    pub fn limit_to(&mut self, scope: Scope) {
        let done = &mut self.done;
        self.outside.retain(|inode, pid| {
            let joined = scope.processes.contains(pid);
            if joined {
                done.remove(inode);
            }
            !joined
        });
        self.scope = Some(scope);
    }

    /// Tries the options on `sockets` (a listing of the watched ports' sockets) that belong to
    /// a followed connection, on a tried side, and were not tried yet; returns what to say:
    /// each change and each process refused.
    pub fn step(&mut self, sockets: &[TcpSocket], conversations: &Conversations) -> Vec<String> {
        let mut said = Vec::new();
        let soon = self.sought.is_some_and(|at| at.elapsed() < SOUGHT_EVERY);
        if self.tries.is_empty() || soon || !self.due() {
            return said;
        }
        // inode -> (connection, side, the options for it, its server port).
        let mut wanted: HashMap<u32, (ConnId, Side, Vec<Knob>, u16)> = HashMap::new();
        for socket in sockets.iter().filter(|s| s.inode != 0 && !self.done.contains(&s.inode)) {
            let local = (socket.local.ip().to_canonical(), socket.local.port());
            let remote = (socket.remote.ip().to_canonical(), socket.remote.port());
            let Some(c) = conversations.find(local, remote) else { continue };
            let side = c.side_of(local);
            let knobs: Vec<Knob> =
                self.tries.iter().filter(|t| t.sides.includes(side)).map(|t| t.knob).collect();
            if !knobs.is_empty() {
                wanted.insert(socket.inode, (c.id, side, knobs, c.server.1));
            }
        }
        if wanted.is_empty() {
            return said;
        }
        self.sought = Some(Instant::now());
        let inodes: HashSet<u32> = wanted.keys().copied().collect();
        for (inode, owner) in process::owners(&inodes, SOUGHT_WITHIN) {
            self.done.insert(inode);
            self.of_connection.entry(wanted[&inode].0).or_default().push(inode);
            let (conn, side, knobs, server_port) = &wanted[&inode];
            if let Some(scope) = &self.scope {
                if !scope.allows(owner.pid, *server_port) {
                    self.outside.insert(inode, owner.pid);
                    if self.outside_said.insert(owner.pid) {
                        said.push(format!(
                            "not tried on pid {} ({}), the {} of conn {}: not a process of the \
                             command, on port {server_port}, which only the command's \
                             connections brought; name it with --port to try the option there \
                             too (another program's socket needs root or CAP_SYS_PTRACE)",
                            owner.pid,
                            owner.command,
                            side.name(),
                            conn.0
                        ));
                    }
                    continue;
                }
            }
            for knob in knobs {
                // Set from its first byte by the program, and counted then: kept for the
                // restore, with what it was before.
                if let Some(new) = &self.new_connections {
                    let pid = owner.pid;
                    if let Ok(true) =
                        self.tuner.take_over(pid, &owner.command, owner.fd, *knob, new)
                    {
                        self.applied[usize::from(*side == Side::Server)] = true;
                        continue;
                    }
                }
                match self.tuner.apply(owner.pid, &owner.command, owner.fd, *knob) {
                    Ok(changed) => {
                        let line = format!("{changed}, the {} of conn {}", side.name(), conn.0);
                        said.push(line);
                        self.applied[usize::from(*side == Side::Server)] = true;
                        let was = changed.was;
                        self.record.count(*knob, *side, owner.pid, &owner.command, was);
                        self.changed(*knob, *side);
                        if !self.record_changed {
                            // Set now.
                            self.changed_at_ns = None;
                        }
                        self.record_changed = true;
                    }
                    Err(Refused::Gone(_)) => {}
                    Err(why) => {
                        if self.refused.insert(owner.pid, why.to_string()).is_none() {
                            said.push(format!("not tried on pid {}: {why}", owner.pid));
                        }
                    }
                }
            }
        }
        said
    }

    /// The watch forgot `conn` (closed, and past its linger): its sockets are closed, so what
    /// was done to them is forgotten too.
    pub fn forget_connection(&mut self, conn: ConnId) {
        for inode in self.of_connection.remove(&conn).unwrap_or_default() {
            self.done.remove(&inode);
            self.outside.remove(&inode);
            self.tuner.forget(u64::from(inode));
        }
    }

    /// As root, new connections get the options from their first byte: at the first call the
    /// program is attached for `ports` (a watch of a command keeps to its processes, which the
    /// program cannot tell apart, so it goes without); at every call what it did is counted in
    /// the record. Returns what to say: once, how new connections get the options, and each
    /// process whose new connections got them.
    pub fn new_connections(&mut self, ports: &[u16]) -> Vec<String> {
        if self.tries.is_empty() || !self.due() {
            return Vec::new();
        }
        if !std::mem::replace(&mut self.new_connections_begun, true) {
            self.ports = ports.to_vec();
            let sides = match self.tries.iter().fold((false, false), |(client, server), t| {
                (client || t.sides.includes(Side::Client), server || t.sides.includes(Side::Server))
            }) {
                (true, true) => Sides::Both,
                (true, false) => Sides::Client,
                _ => Sides::Server,
            };
            let started = match self.scope {
                Some(_) => Err("a command's watch changes its own processes' sockets only, \
                                which a program on the ports' connections cannot tell apart"
                    .to_string()),
                None => NewConnections::start(ports, sides),
            };
            let line = match &started {
                Ok(new) => format!(
                    "TCP_NODELAY on {} of new connections from their first byte: a sock_ops \
                     program on cgroup {} (all of this host's, its watched ports only), \
                     detached when the watch ends",
                    sides.words(),
                    new.cgroup().display()
                ),
                Err(why) => format!(
                    "TCP_NODELAY on new connections within a sample of their first packets, not \
                     from their first byte ({why})"
                ),
            };
            self.new_connections = started.ok();
            return vec![line];
        }
        let Some(new) = &mut self.new_connections else { return Vec::new() };
        let (said, changed_at) = new.take(&mut self.record);
        if let Some(at_ns) = changed_at {
            // The session splits where the first change not yet handed over was made.
            self.changed_at_ns = match self.record_changed {
                true => self.changed_at_ns.map(|before| before.min(at_ns)),
                false => Some(at_ns),
            };
            self.record_changed = true;
            let counts = new.changed;
            for (side, count) in [Side::Client, Side::Server].into_iter().zip(counts) {
                self.applied[usize::from(side == Side::Server)] |= count > 0;
                if count > 0 {
                    self.changed(Knob::NoDelay, side);
                }
            }
        }
        said
    }

    /// New connections on `port` get the options from their first byte too.
    pub fn add_port(&mut self, port: u16) {
        self.ports.push(port);
        if let Some(new) = &self.new_connections {
            if let Err(e) = new.add_port(port) {
                tracing::warn!(
                    "watch: port {port}'s new connections get the option within a sample, not \
                     from their first byte ({e})"
                );
            }
        }
    }

    /// What was changed on which process so far, per option, side and process, if that changed
    /// since the last call, and whether a group of tries made its first change meanwhile (the
    /// watch splits its session there: the `--try` flags', each try a page added); otherwise
    /// the options reached more sockets.
    pub fn take_record(&mut self) -> Option<(Vec<OptionTried>, bool)> {
        std::mem::take(&mut self.record_changed)
            .then(|| (self.record.entries().to_vec(), std::mem::take(&mut self.split)))
    }

    /// When the changes of the record [`Trials::take_record`] returned began (CLOCK_MONOTONIC),
    /// if not when it was taken: the program changes new connections before the watch reads
    /// what it did.
    pub fn changed_at_ns(&self) -> Option<u64> {
        self.changed_at_ns
    }

    /// The watch ends: every option is put back; returns the lines that say so.
    pub fn finish(&mut self) -> Vec<String> {
        // The program goes first, so that no new connection gets the option meanwhile; then
        // the sockets it changed that are still open are taken for the restore.
        let mut first_byte = None;
        if let Some(mut new) = self.new_connections.take() {
            let knob = Knob::NoDelay;
            for owner in new.end(&self.ports, &self.done).into_values() {
                let _ = self.tuner.take_over(owner.pid, &owner.command, owner.fd, knob, &new);
            }
            let [client, server] = new.changed;
            let lost = match new.lost() {
                0 => String::new(),
                lost => format!("; {lost} not counted in the record (its ring was full)"),
            };
            first_byte = Some(format!(
                "from the first byte: TCP_NODELAY on {client} client and {server} server sockets \
                 of new connections{lost}; the sock_ops program is detached"
            ));
        }
        let mut said: Vec<String> = self
            .tuner
            .restore()
            .into_iter()
            .map(|(changed, result)| match result {
                Ok(()) => format!("put back: {changed}"),
                Err(e) => {
                    format!("nothing to put back ({e}: the program closed it): {changed}")
                }
            })
            .collect();
        for t in &self.tries {
            let applied = [Side::Client, Side::Server].into_iter().any(|side| {
                t.sides.includes(side) && self.applied[usize::from(side == Side::Server)]
            });
            if !applied && self.refused.is_empty() {
                let place = match self.scope {
                    Some(_) => "among the command's processes, or on a port named with --port",
                    None => "on this host",
                };
                said.push(format!(
                    "{} on {}: nothing to apply it to (no socket of {} of the watched \
                     connections was found {place})",
                    t.knob.name(),
                    t.sides.words(),
                    t.sides.words()
                ));
            }
        }
        said.extend(first_byte);
        said
    }
}

fn refusal(pid: u32, command: &str, e: io::Error) -> Refused {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => Refused::NoRight(format!(
            "process {pid} ({command}) may not be changed by this one: taking a copy of its \
             socket (pidfd_getfd) needs the right to ptrace it: root or CAP_SYS_PTRACE; without \
             them, ackscope as its ancestor (`ackscope watch -- COMMAND`), the same user, and a \
             program that may be traced (not setuid, no file capabilities, not made \
             undumpable){}",
            yama_words(ptrace_scope())
        )),
        Some(libc::ESRCH) | Some(libc::EBADF) => Refused::Gone(e),
        _ => Refused::Other(e),
    }
}

/// CAP_SYS_PTRACE's bit in a capability set.
const CAP_SYS_PTRACE: u32 = 19;

/// Whether this process may try options on the sockets of any program it watches (a page's
/// "try" buttons): with CAP_SYS_PTRACE in its effective set (root has it), which
/// `pidfd_getfd` needs on another user's process. The error says what it lacks and how to get
/// it.
pub fn rights() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    if ptrace_scope() == Some(3) {
        return Err("trying a fix on a watched program's running sockets needs the right to \
                    ptrace it, which this kernel gives nobody (Yama's ptrace_scope is 3, until \
                    the next boot)"
            .into());
    }
    if effective & (1 << CAP_SYS_PTRACE) != 0 {
        return Ok(());
    }
    Err("trying a fix on a watched program's running sockets needs the right to ptrace it, \
         which this probe lacks (CAP_SYS_PTRACE): start ackscope as root (sudo ackscope), or give \
         it the capability (sudo setcap cap_sys_ptrace,cap_net_raw+ep $(which ackscope)); a \
         program ackscope starts itself can be tried on without either: ackscope watch --try \
         nodelay=server -- COMMAND"
        .into())
}

/// Yama's `ptrace_scope` (`/proc/sys/kernel/yama/ptrace_scope`), if the kernel has Yama.
pub fn ptrace_scope() -> Option<u8> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?.trim().parse().ok()
}

/// What Yama's `ptrace_scope` adds to a refusal: 0 (or no Yama) adds nothing, 1 lets only a
/// process's ancestors (ackscope's own command), 2 only CAP_SYS_PTRACE, 3 nobody.
fn yama_words(scope: Option<u8>) -> &'static str {
    match scope {
        None | Some(0) => "",
        Some(1) => "; here Yama's ptrace_scope is 1: only a process's ancestors may",
        Some(2) => {
            "; here Yama's ptrace_scope is 2: only with CAP_SYS_PTRACE, the command ackscope \
             started included: run ackscope as root"
        }
        Some(_) => {
            "; here Yama's ptrace_scope is 3: no process may, root included, until the host \
             restarts"
        }
    }
}

/// This process's own descriptor of descriptor `fd` of process `pid` (the same socket).
fn copy_of(pid: u32, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number and flags (0), and returns a new
    // descriptor or -1.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(copy as RawFd) })
}

fn get(socket: &OwnedFd, knob: Knob) -> io::Result<bool> {
    let (level, name) = level_and_name(knob);
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value != 0)
}

fn set(socket: &OwnedFd, knob: Knob, on: bool) -> io::Result<()> {
    let (level, name) = level_and_name(knob);
    let value = libc::c_int::from(on);
    // SAFETY: the kernel reads `len` bytes from `value`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    #[test]
    fn tries_are_read_and_the_ones_that_cannot_apply_say_why() {
        assert_eq!("nodelay=server".parse(), Ok(Try { knob: Knob::NoDelay, sides: Sides::Server }));
        assert_eq!("nodelay=both".parse::<Try>().map(|t| t.sides), Ok(Sides::Both));
        let refused = |text: &str| text.parse::<Try>().unwrap_err();
        assert!(refused("quickack=client").contains("set it again after every read"));
        assert!(refused("cork=server").contains("holds its data"));
        assert!(refused("nodelay").contains("OPTION=SIDE"));
        assert!(refused("nodelay=left").contains("client, server or both"));
        assert!(refused("nagle=server").contains("nodelay"));
        assert!(Sides::Both.includes(Side::Client) && !Sides::Server.includes(Side::Client));
    }

    /// The `--try` flags are one group, each try a page adds another: the first change of a
    /// group splits the session, later changes of it do not; a try already in force is refused.
    #[test]
    fn each_group_of_tries_splits_the_session_at_its_first_change() {
        let server = Try { knob: Knob::NoDelay, sides: Sides::Server };
        let mut trials = Trials::new(vec![server]);
        trials.changed(Knob::NoDelay, Side::Server);
        assert!(std::mem::take(&mut trials.split), "the flags' first change splits");
        trials.changed(Knob::NoDelay, Side::Server);
        assert!(!trials.split, "more sockets: no split");
        let again = trials.add(server).unwrap_err();
        assert!(again.contains("tried on the server already"), "{again}");
        // Both sides, the server's in force: the client's first change is the split.
        trials.add(Try { knob: Knob::NoDelay, sides: Sides::Both }).unwrap();
        trials.changed(Knob::NoDelay, Side::Server);
        assert!(!trials.split);
        trials.changed(Knob::NoDelay, Side::Client);
        assert!(trials.split);
        // A page's watch starts with none.
        assert!(Trials::default().fresh.is_empty() && Trials::new(Vec::new()).fresh.is_empty());
    }

    #[test]
    fn a_try_reads_back_as_written_and_yamas_rule_is_named_in_a_refusal() {
        for text in ["nodelay=client", "nodelay=server", "nodelay=both"] {
            assert_eq!(text.parse::<Try>().unwrap().to_string(), text);
        }
        assert_eq!(yama_words(None), "");
        assert_eq!(yama_words(Some(0)), "");
        assert!(yama_words(Some(1)).contains("ancestors"));
        assert!(
            yama_words(Some(2)).contains("CAP_SYS_PTRACE") && yama_words(Some(2)).contains("root")
        );
        assert!(yama_words(Some(3)).contains("no process may"));
        let refused = refusal(4711, "python3", io::Error::from_raw_os_error(libc::EPERM));
        let words = refused.to_string();
        assert!(words.contains("process 4711 (python3)") && words.contains("watch -- COMMAND"));
    }

    /// A command's scope: its processes, a descendant not yet found by a walk, and any process
    /// on a port named with --port; nothing else.
    #[test]
    fn a_commands_scope_takes_its_processes_and_the_named_ports() {
        let child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let scope = Scope {
            processes: HashSet::from([4242]),
            root: Some(std::process::id()),
            named_ports: vec![8080],
        };
        assert!(scope.allows(4242, 9000), "one of the command's processes");
        assert!(scope.allows(child.id(), 9000), "a descendant not walked yet");
        assert!(scope.allows(1, 8080), "a port named with --port");
        assert!(!scope.allows(1, 9000), "another program, on the command's port only");
        let mut child = child;
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A program ackscope did not write (Python) holds a connected socket: TCP_NODELAY set on
    /// its copy is the program's own socket's (the program reads it back), and the restore puts
    /// it back as the program had it.
    #[test]
    #[ignore = "needs root (pidfd_getfd on another process): cargo xtask test runs it as root"]
    fn an_option_tried_on_a_programs_socket_is_the_programs_and_is_put_back() {
        // SAFETY: geteuid() cannot fail and has no side effects.
        assert_eq!(unsafe { libc::geteuid() }, 0, "run as root (cargo xtask test does)");
        let program = "import socket, sys\n\
            l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()\n\
            c = socket.create_connection(l.getsockname()); s, _ = l.accept()\n\
            print(s.fileno(), flush=True)\n\
            for line in sys.stdin:\n\
            \x20   print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), flush=True)\n";
        let mut child = Command::new("python3")
            .args(["-c", program])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stdin = child.stdin.take().unwrap();
        let fd: RawFd = lines.next().unwrap().unwrap().trim().parse().unwrap();
        let mut ask = move || {
            writeln!(stdin, "?").unwrap();
            lines.next().unwrap().unwrap().trim().to_string()
        };
        assert_eq!(ask(), "0", "Nagle on, as the program opened it");
        let mut tuner = Tuner::default();
        let changed = tuner.apply(child.id(), "python3", fd, Knob::NoDelay).expect("root may");
        assert!(!changed.was);
        assert_eq!(
            changed.to_string(),
            format!("TCP_NODELAY off -> on on fd {fd} of pid {} (python3)", child.id())
        );
        assert_ne!(ask(), "0", "the program's own socket has TCP_NODELAY now");
        drop(tuner);
        assert_eq!(ask(), "0", "put back as the program had it");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
