//! Which process owns a socket, from `/proc`: a socket's file is a link `socket:[INODE]` among
//! its process's descriptors (`/proc/PID/fd`), and sock_diag gives each socket's inode.
//!
//! Reading another user's `/proc/PID/fd` needs root (or CAP_SYS_PTRACE); without it those
//! processes are not found and their sockets stay unnamed. Every walk is bounded: at most
//! [`MAX_PROCESSES`] processes and [`MAX_FDS`] descriptors each.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;

use super::sock_diag::{self, TcpState};

/// Processes looked at in one walk of `/proc`.
pub const MAX_PROCESSES: usize = 65_536;
/// Descriptors looked at per process.
pub const MAX_FDS: usize = 1 << 20;

/// A process, as a connection's summary names it: "pid 4242 python3"; and its descriptor of
/// the socket it was found by (the first, if it holds several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub command: String,
    pub fd: i32,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} {}", self.pid, self.command)
    }
}

/// The socket inodes among process `pid`'s descriptors.
pub fn socket_inodes(pid: u32) -> io::Result<HashSet<u32>> {
    Ok(socket_descriptors(pid)?.into_keys().collect())
}

/// The sockets among process `pid`'s descriptors: each socket's inode, with the first
/// descriptor found for it.
pub fn socket_descriptors(pid: u32) -> io::Result<HashMap<u32, i32>> {
    let mut sockets = HashMap::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd"))?.take(MAX_FDS) {
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(inode) = fs::read_link(entry.path()).ok().and_then(|l| socket_inode(&l)) {
            sockets.entry(inode).or_insert(fd);
        }
    }
    Ok(sockets)
}

/// The owners of the socket `inodes` that this process may see, by inode, found `within` this
/// long (what is not found by then stays unnamed). This process is never one: the copies of a
/// program's sockets it holds (`--try`) are the program's.
pub fn owners(inodes: &HashSet<u32>, within: std::time::Duration) -> HashMap<u32, Owner> {
    let mut found = HashMap::new();
    let deadline = std::time::Instant::now() + within;
    let Ok(processes) = fs::read_dir("/proc") else { return found };
    for entry in processes.take(MAX_PROCESSES) {
        if std::time::Instant::now() >= deadline {
            break;
        }
        let Some(pid) = entry.ok().and_then(|e| e.file_name().to_str()?.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        // Gone since the listing, or another user's: skipped.
        let Ok(theirs) = socket_descriptors(pid) else { continue };
        let mut command = None;
        for (inode, fd) in theirs.iter().filter(|(inode, _)| inodes.contains(inode)) {
            let command = command.get_or_insert_with(|| command_of(pid));
            found.entry(*inode).or_insert(Owner { pid, command: command.clone(), fd: *fd });
        }
        if found.len() == inodes.len() {
            break;
        }
    }
    found
}

/// `/proc/PID/comm`, without its newline; "?" if the process is gone. At most 16 bytes (the
/// kernel's TASK_COMM_LEN), printed as data by the terminal's sanitiser.
pub fn command_of(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The ports process `pid` is watched by (`--pid`): those it listens on, and the server ports
/// of the connections it made (a connection from a port it listens on is one it accepted).
/// The error says what to do.
pub fn ports_of(pid: u32) -> Result<Vec<u16>, String> {
    let inodes = socket_inodes(pid).map_err(|e| {
        format!(
            "process {pid}: its descriptors cannot be read ({e}): is it running? Another \
             user's process needs root"
        )
    })?;
    let ports = ports_of_sockets(&inodes)
        .map_err(|e| format!("process {pid}: listing its sockets: {e}"))?;
    if ports.is_empty() {
        return Err(format!(
            "process {pid} ({}): no TCP socket listening or connected now; start its server \
             or its connections first, or watch its port by number",
            command_of(pid)
        ));
    }
    Ok(ports)
}

/// The ports the TCP sockets of `inodes` (one process's, or a process tree's) are watched by,
/// sorted: those they listen on, and the server ports of their connections (a connection from
/// a port one of them listens on is one accepted, and a connection still connecting has its
/// server port already).
pub fn ports_of_sockets(inodes: &HashSet<u32>) -> io::Result<Vec<u16>> {
    if inodes.is_empty() {
        return Ok(Vec::new());
    }
    let listing = sock_diag::list(sock_diag::MAX_SOCKETS, |s| inodes.contains(&s.inode))?;
    let listens: Vec<u16> = listing
        .sockets
        .iter()
        .filter(|s| s.state == TcpState::Listen)
        .map(|s| s.local.port())
        .collect();
    let mut ports = listens.clone();
    for socket in listing.sockets.iter().filter(|s| s.state != TcpState::Listen) {
        if !listens.contains(&socket.local.port()) && socket.remote.port() != 0 {
            ports.push(socket.remote.port());
        }
    }
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

/// A process and its descendants (`watch -- COMMAND`: the command and what it started), found
/// through each process's parent in `/proc/PID/stat`. Each is known by its start time too, so
/// that a pid the kernel gives again to an unrelated process is not taken for it. A descendant
/// whose parent exits is given to another parent (init): it stays in the tree if it was found
/// before, and is not found otherwise.
#[derive(Debug)]
pub struct Tree {
    /// pid -> start time (clock ticks after boot).
    known: HashMap<u32, u64>,
}

impl Tree {
    /// The tree of process `root`, which is all of it until [`Tree::refresh`].
    pub fn new(root: u32) -> Tree {
        let known = stat_of(root).map(|(_, started)| HashMap::from([(root, started)]));
        Tree { known: known.unwrap_or_default() }
    }

    /// The processes of the tree now.
    pub fn pids(&self) -> HashSet<u32> {
        self.known.keys().copied().collect()
    }

    /// Walks `/proc` for the tree as it is now, for at most `within` (at most
    /// [`MAX_PROCESSES`] processes); returns whether it changed. Gone processes leave it; one
    /// not reached before the deadline is found at a later walk.
    pub fn refresh(&mut self, within: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        let before = self.pids();
        // The known ones still the same processes.
        self.known.retain(|&pid, started| stat_of(pid).is_some_and(|(_, now)| now == *started));
        let Ok(processes) = fs::read_dir("/proc") else { return self.pids() != before };
        // parent -> its children, with their start times.
        let mut children: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
        for entry in processes.take(MAX_PROCESSES) {
            if std::time::Instant::now() >= deadline {
                break;
            }
            let Some(pid) = entry.ok().and_then(|e| e.file_name().to_str()?.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some((parent, started)) = stat_of(pid) {
                children.entry(parent).or_default().push((pid, started));
            }
        }
        let mut queue: Vec<u32> = self.known.keys().copied().collect();
        while let Some(parent) = queue.pop() {
            for &(pid, started) in children.get(&parent).into_iter().flatten() {
                if self.known.insert(pid, started).is_none() {
                    queue.push(pid);
                }
            }
        }
        self.pids() != before
    }

    /// Whether `pid` is the tree's root or was found among its descendants (and has not
    /// exited since the last walk).
    pub fn contains(&self, pid: u32) -> bool {
        self.known.contains_key(&pid)
    }

    /// The socket inodes among the tree's processes' descriptors (a process gone meanwhile has
    /// none).
    pub fn socket_inodes(&self) -> HashSet<u32> {
        self.known.keys().filter_map(|&pid| socket_inodes(pid).ok()).flatten().collect()
    }
}

/// Whether process `pid` descends from process `ancestor` now, following each parent up
/// `/proc` (at most 64 generations): a descendant of a watched command found before the next
/// walk of its [`Tree`].
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut at = pid;
    for _ in 0..64 {
        let Some((parent, _)) = stat_of(at) else { return false };
        if parent == ancestor {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        at = parent;
    }
    false
}

/// A process's parent and start time (clock ticks after boot), from `/proc/PID/stat`; `None`
/// if it is gone. The command's name, in parentheses, may hold spaces and parentheses itself:
/// the fields are read after its last `)`.
fn stat_of(pid: u32) -> Option<(u32, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, fields) = stat.rsplit_once(')')?;
    let mut fields = fields.split_whitespace();
    // state, ppid, then 17 more before starttime (proc_pid_stat(5)).
    let parent = fields.nth(1)?.parse().ok()?;
    let started = fields.nth(17)?.parse().ok()?;
    Some((parent, started))
}

/// The inode of a descriptor's link `socket:[12345]`.
fn socket_inode(link: &std::path::Path) -> Option<u32> {
    let text = link.to_str()?;
    text.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program holding a socket is named as its owner, with its descriptor; this process,
    /// holding a socket too, never is.
    #[test]
    fn a_program_owns_its_socket_and_is_named_and_this_process_never_is() {
        use std::io::{BufRead, BufReader};
        use std::os::fd::AsRawFd;
        let program = "import socket, sys\n\
            l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()\n\
            print(l.fileno(), flush=True)\n\
            sys.stdin.read()\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", program])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let fd: i32 = line.trim().parse().unwrap();
        let pid = child.id();
        let theirs = socket_descriptors(pid).unwrap();
        let (&inode, _) = theirs.iter().find(|(_, &f)| f == fd).expect("its listener");
        let ours = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let link = fs::read_link(format!("/proc/self/fd/{}", ours.as_raw_fd())).unwrap();
        let our_inode = socket_inode(&link).expect("a socket's link");
        let found = owners(&HashSet::from([inode, our_inode]), std::time::Duration::from_secs(10));
        let owner = found.get(&inode).expect("the program's listener's owner found");
        assert_eq!((owner.pid, owner.fd, owner.command.as_str()), (pid, fd, "python3"));
        assert!(!found.contains_key(&our_inode), "this process is never an owner: {found:?}");
        drop(child.stdin.take());
        child.wait().unwrap();
    }

    #[test]
    fn only_socket_links_have_inodes() {
        assert_eq!(socket_inode(std::path::Path::new("socket:[4026]")), Some(4026));
        assert_eq!(socket_inode(std::path::Path::new("pipe:[4026]")), None);
        assert_eq!(socket_inode(std::path::Path::new("/dev/null")), None);
    }
}
