//! A command the watch starts itself and watches (`ackscope watch -- COMMAND ARGS`,
//! docs/WATCH.md): its ports are found as its processes use them, and `--try` may change its
//! sockets without root, ackscope being their ancestor.
//!
//! - The command is ackscope's child, with ackscope's standard input, output and error, in its
//!   process group (a Ctrl-C at the terminal reaches both).
//! - Its ports: those of the sockets of its processes (the command and its descendants,
//!   [`process::Tree`]) by the rule of `--pid` ([`process::ports_of_sockets`]). Its
//!   descriptors are read every [`READ_EVERY`] and its sockets listed when they changed; its
//!   descendants are found, and its sockets listed anyway, every [`WALK_EVERY`] (a socket
//!   that connects after it was first seen keeps its inode). Each port found is watched from
//!   then on, up to the watch's 8; one past them is said, not watched.
//! - The watch ends when the command exits, and ackscope exits with its status ([`exit_code`]).
//!   When the watch ends first, every option tried is already back as it was
//!   ([`super::tune::Trials::finish`]); then, after Ctrl-C or SIGTERM, the command is given
//!   [`GRACE`] to end by itself (a Ctrl-C at the terminal reached it too) before ackscope
//!   passes the signal on to it ([`WatchedCommand::end_with_the_watch`]); after `--duration`
//!   or an error it runs on, unwatched, and ackscope waits for it ([`WatchedCommand::runs_on`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ackscope_shared::wire::RunOutcome;

use super::packets::MAX_PORTS;
use super::process::{self, Tree};
use super::tune::Scope;
use super::watcher::Watcher;

/// How often the command's processes' descriptors are read for new sockets.
pub const READ_EVERY: Duration = Duration::from_millis(100);
/// How often `/proc` is walked for the command's descendants (and its sockets listed whether
/// or not its descriptors changed), and for at most how long.
pub const WALK_EVERY: Duration = Duration::from_secs(1);
const WALK_WITHIN: Duration = Duration::from_millis(50);
/// After Ctrl-C or SIGTERM ends the watch, how long the command is given to end by itself
/// before ackscope passes the signal on, and how long after: both within the 1.7 s in which
/// an interrupted ackscope ends ([`crate::interrupt::FINISH_WITHIN`]).
pub const GRACE: Duration = Duration::from_millis(300);
const AFTER_PASSING_ON: Duration = Duration::from_millis(800);
/// How often the command is asked whether it exited while nothing else is done.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// Why the command could not be started: the exit code (126 found but not run, 127 not
/// found, as shells, `env` and `timeout` say) and what to do.
#[derive(Debug)]
pub struct NotStarted {
    pub code: u8,
    pub message: String,
}

/// The command ackscope started, and what the watch knows of it.
#[derive(Debug)]
pub struct WatchedCommand {
    child: Child,
    pub pid: u32,
    /// "python3 app.py --port 80", for what ackscope says (printed as data).
    pub words: String,
    tree: Tree,
    /// Ports named with `--port` or `--pid`, on which `--try` may change any program's socket.
    named_ports: Vec<u16>,
    read: Option<Instant>,
    walked: Option<Instant>,
    /// Its processes' socket inodes at the last read.
    inodes: HashSet<u32>,
    /// Its ports found so far, watched or past the cap.
    found: Vec<u16>,
    /// The ports the watch had at its last step, the command's and those given.
    watched: Vec<u16>,
    status: Option<ExitStatus>,
    /// The signal ackscope passed on to it, if it did.
    passed_on: Option<libc::c_int>,
    /// Whether the watch began ([`WatchedCommand::step`] was called): until then, a drop
    /// stops the command (see `Drop`).
    watching: bool,
}

impl WatchedCommand {
    /// Starts `words` (the command and its arguments) as ackscope's child, with ackscope's
    /// standard input, output and error. `named_ports`: the ports given with `--port` or
    /// `--pid` (see [`Scope`]).
    pub fn start(words: &[OsString], named_ports: &[u16]) -> Result<WatchedCommand, NotStarted> {
        let (program, args) = words.split_first().ok_or_else(|| NotStarted {
            code: 2,
            message: "-- needs a command after it: ackscope watch -- python3 app.py".into(),
        })?;
        let shown: Vec<String> = words.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        let shown = shown.join(" ");
        let mut command = std::process::Command::new(program);
        command.args(args);
        // SAFETY: the closure runs in the child between fork and exec, and calls only
        // signal(), which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                // ackscope ignores SIGXFSZ (a full file is an error it reports), and an ignored
                // signal stays ignored across exec: the command gets the default back.
                libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            let (code, hint) = match e.kind() {
                io::ErrorKind::NotFound => (127, "is it installed, and on PATH?"),
                io::ErrorKind::PermissionDenied => (126, "is it executable?"),
                _ => (126, "check the command"),
            };
            NotStarted { code, message: format!("cannot start `{shown}`: {e}: {hint}") }
        })?;
        let pid = child.id();
        Ok(WatchedCommand {
            child,
            pid,
            words: shown,
            tree: Tree::new(pid),
            named_ports: named_ports.to_vec(),
            read: None,
            walked: None,
            inodes: HashSet::new(),
            found: Vec::new(),
            watched: Vec::new(),
            status: None,
            passed_on: None,
            watching: false,
        })
    }

    /// Its exit status, once it exited (reaped then).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            match self.child.try_wait() {
                Ok(status) => self.status = status,
                // Only if it is not ackscope's child any more, which it always is.
                Err(e) => tracing::warn!("watch: asking whether the command exited: {e}"),
            }
        }
        self.status
    }

    /// The signal ackscope passed on to it, if it did.
    pub fn passed_on(&self) -> Option<libc::c_int> {
        self.passed_on
    }

    /// Waits until its processes use a TCP port, polling every [`READ_EVERY`]: the ports, or
    /// `None` if it exited first or `stop` was set (Ctrl-C, SIGTERM).
    pub fn first_ports(&mut self, stop: &AtomicBool) -> Option<Vec<u16>> {
        loop {
            if stop.load(Ordering::SeqCst) || self.exited().is_some() {
                return None;
            }
            let (ports, _) = self.new_ports();
            if !ports.is_empty() {
                return Some(ports);
            }
            std::thread::sleep(POLL_EVERY);
        }
    }

    /// The ports the watch had at its last step (sorted), for the summary: the session's header
    /// names those it began with.
    pub fn watched_ports(&self) -> &[u16] {
        &self.watched
    }

    /// The processes `--try` may change now ([`Scope`]).
    pub fn scope(&self) -> Scope {
        Scope {
            processes: self.tree.pids(),
            root: Some(self.pid),
            named_ports: self.named_ports.clone(),
        }
    }

    /// After each step of the watch ([`super::run_until`]): ends it when the command exited;
    /// watches the ports its processes use now (up to [`MAX_PORTS`] in all), saying each
    /// through `say`; keeps `--try` to its processes as they come and go.
    pub fn step(
        &mut self,
        watcher: &mut Watcher,
        say: &mut impl FnMut(String),
    ) -> Option<RunOutcome> {
        self.watching = true;
        if self.exited().is_some() {
            return Some(RunOutcome::Completed);
        }
        let (ports, tree_changed) = self.new_ports();
        for port in ports {
            if watcher.ports().contains(&port) {
                continue;
            }
            if watcher.ports().len() >= MAX_PORTS {
                say(format!(
                    "`{}` uses port {port} too: not watched, past the {MAX_PORTS} ports a watch \
                     takes (watch it in another: ackscope watch --port {port})",
                    self.words
                ));
                continue;
            }
            match watcher.add_port(port) {
                Ok(()) => say(format!("`{}` uses port {port} now: watching it too", self.words)),
                Err(e) => say(format!(
                    "`{}` uses port {port} now, but it cannot be watched ({e}): watch it in \
                     another (ackscope watch --port {port})",
                    self.words
                )),
            }
        }
        if tree_changed && !watcher.trials.is_empty() {
            watcher.trials.limit_to(self.scope());
        }
        if self.watched.len() != watcher.ports().len() {
            self.watched = watcher.ports().to_vec();
            self.watched.sort_unstable();
        }
        None
    }

    /// The ports its processes use that were not found before, and whether its processes
    /// changed, at most every [`READ_EVERY`].
    fn new_ports(&mut self) -> (Vec<u16>, bool) {
        if self.read.is_some_and(|at| at.elapsed() < READ_EVERY) {
            return (Vec::new(), false);
        }
        self.read = Some(Instant::now());
        let walk = self.walked.is_none_or(|at| at.elapsed() >= WALK_EVERY);
        let tree_changed = walk && {
            self.walked = Some(Instant::now());
            self.tree.refresh(WALK_WITHIN)
        };
        let inodes = self.tree.socket_inodes();
        let changed = inodes.iter().any(|inode| !self.inodes.contains(inode));
        self.inodes = inodes;
        if !changed && !walk {
            return (Vec::new(), tree_changed);
        }
        let ports = match process::ports_of_sockets(&self.inodes) {
            Ok(ports) => ports,
            Err(e) => {
                tracing::warn!("watch: listing the command's sockets failed ({e}); trying again");
                self.inodes.clear();
                return (Vec::new(), tree_changed);
            }
        };
        let new: Vec<u16> = ports.into_iter().filter(|p| !self.found.contains(p)).collect();
        self.found.extend(&new);
        (new, tree_changed)
    }

    /// The watch ended before the command, on Ctrl-C or SIGTERM (every option already put
    /// back): it is given [`GRACE`] to end by itself (a Ctrl-C at the terminal reached it
    /// too), then ackscope passes the signal on, as `strace` does to a command it started, and
    /// waits a little more. Its status, if it ended.
    pub fn end_with_the_watch(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.wait_for(GRACE) {
            return Some(status);
        }
        let signal = crate::interrupt::signal().unwrap_or(libc::SIGTERM);
        // SAFETY: kill() takes a pid and a signal; the pid is this process's unreaped child,
        // so it cannot have been given to another process.
        if unsafe { libc::kill(self.pid as libc::pid_t, signal) } == 0 {
            self.passed_on = Some(signal);
        }
        self.wait_for(AFTER_PASSING_ON)
    }

    /// The watch ended before the command by `--duration` or an error (every option already
    /// put back): it runs on, unwatched, and ackscope waits for it as its parent. Ctrl-C or
    /// SIGTERM meanwhile: as [`WatchedCommand::end_with_the_watch`]. Its status, if it ended.
    pub fn runs_on(&mut self, stop: &AtomicBool) -> Option<ExitStatus> {
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if stop.load(Ordering::SeqCst) {
                return self.end_with_the_watch();
            }
            std::thread::sleep(POLL_EVERY);
        }
    }

    fn wait_for(&mut self, time: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + time;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(POLL_EVERY);
        }
    }
}

impl Drop for WatchedCommand {
    /// ackscope ends between starting the command and the watch's beginning (a file that
    /// cannot be created, a listener that cannot bind): nothing was watched, so the command,
    /// just started, is stopped as `strace` stops one it started when it cannot go on (SIGTERM,
    /// 1 s to end) rather than left running without the watch it was started for. Once the
    /// watch began, its end decides (see the module's comment).
    fn drop(&mut self) {
        if self.watching || self.passed_on.is_some() || self.exited().is_some() {
            return;
        }
        // SAFETY: kill() takes a pid and a signal; the pid is this process's unreaped child.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        let ended = self.wait_for(Duration::from_secs(1));
        let how = match ended {
            Some(status) => format!("was stopped with SIGTERM and {}", status_words(status)),
            None => "is still running 1 s after SIGTERM: left running".into(),
        };
        // The log's writer prints the command's words as data.
        tracing::warn!("the watch could not begin: `{}` (pid {}) {how}", self.words, self.pid);
    }
}

/// The status ackscope exits with for a command's: its exit code, or 128 + the signal that
/// ended it, as a shell reports it (`time` and `strace` exit so too).
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

/// "exited with status 3", "was ended by signal 15 (SIGTERM)".
pub fn status_words(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was ended by signal {signal}{}", signal_name(signal)),
        (None, None) => "ended".into(),
    }
}

/// " (SIGTERM)" for the signals a user sends; empty for the others.
pub fn signal_name(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGHUP => " (SIGHUP)",
        libc::SIGINT => " (SIGINT)",
        libc::SIGQUIT => " (SIGQUIT)",
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGPIPE => " (SIGPIPE)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGABRT => " (SIGABRT)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(words: &[&str]) -> WatchedCommand {
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        WatchedCommand::start(&words, &[]).expect("started")
    }

    #[test]
    fn a_commands_status_is_its_exit_code_or_128_and_its_signal() {
        let mut exits = start(&["sh", "-c", "exit 3"]);
        let status = exits.runs_on(&AtomicBool::new(false)).expect("it exits");
        assert_eq!((exit_code(status), status_words(status)), (3, "exited with status 3".into()));
        let mut killed = start(&["sh", "-c", "kill -TERM $$"]);
        let status = killed.runs_on(&AtomicBool::new(false)).expect("it ends");
        assert_eq!(exit_code(status), 143);
        assert_eq!(status_words(status), "was ended by signal 15 (SIGTERM)");
    }

    #[test]
    fn a_command_that_cannot_start_says_why_with_the_shells_codes() {
        let words = [OsString::from("/nonexistent/ackscope-no-such-program")];
        let refused = WatchedCommand::start(&words, &[]).unwrap_err();
        assert_eq!(refused.code, 127, "{refused:?}");
        assert!(refused.message.contains("no-such-program") && refused.message.contains("PATH"));
        let refused = WatchedCommand::start(&[OsString::from("/")], &[]).unwrap_err();
        assert_eq!(refused.code, 126, "{refused:?}");
    }

    /// The port a command's descendant listens on is found, and the descendant is among the
    /// processes `--try` may change: a shell that starts a Python server.
    #[test]
    fn the_port_a_commands_descendant_listens_on_is_found() {
        let program = "import socket, time; l = socket.socket(); \
            l.bind(('127.0.0.1', 0)); l.listen(); time.sleep(60)";
        // The shell stays the command (not replaced by python3: another command follows).
        let mut command = start(&["sh", "-c", &format!("python3 -c \"{program}\"; exit 0")]);
        let found = command.first_ports(&AtomicBool::new(false)).expect("a port before it exits");
        assert_eq!(found.len(), 1, "the descendant's one listening port: {found:?}");
        let processes = command.scope().processes;
        assert!(processes.len() >= 2, "the shell and python3: {processes:?}");
        for pid in processes {
            // SAFETY: kill() takes a pid and a signal; these are this test's processes.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        assert!(command.runs_on(&AtomicBool::new(false)).is_some());
    }
}
