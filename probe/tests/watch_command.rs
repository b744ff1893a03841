//! `ackscope watch -- COMMAND`: ackscope starts a program it did not write (Python's standard
//! library, `watched/duo.py`: a client and the `pair.py` server it starts, writing a length and
//! then a body with Nagle on), watches it, and tries TCP_NODELAY on it as its ancestor, without
//! root. The program measures its own requests and reads its own socket's option, so the tests
//! see what its user would: the 40 ms waits gone while the option is tried, back once it is put
//! back, and ackscope's status the program's.
//!
//! The tests that need no privilege run as whoever runs them; run as root (as CI does), they
//! switch ackscope and the program to the unprivileged user nobody, which is the case they are
//! about.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use common::{interrupt, is_root, require_root, Scratch};

/// How long anything a test waits for may take: the option is tried within a few hundred
/// milliseconds of the program's first connection, on a loaded machine within seconds.
const DEADLINE: Duration = Duration::from_secs(60);

use common::Reaped;

/// A folder nobody can read, with `duo.py` and `pair.py`, and with `binary` a copy of ackscope
/// when `unprivileged` (the test binary's own may be out of that user's reach). Python writes
/// no bytecode beside them (`duo.py` says so), so nothing is written into the repository.
fn scripts(unprivileged: bool) -> Scratch {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::temp_folder("watch-command");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let watched = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/watched");
    let mut files = vec![(watched.join("duo.py"), "duo.py"), (watched.join("pair.py"), "pair.py")];
    if unprivileged {
        files.push((env!("CARGO_BIN_EXE_ackscope").into(), "ackscope"));
    }
    for (from, name) in files {
        std::fs::copy(&from, dir.join(name)).unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// `ackscope` as a user without privileges: as root, the copy in `dir` run as nobody with no
/// capability at all (setpriv); otherwise this test's own user, already without them.
fn unprivileged_ackscope(dir: &Path) -> Command {
    if !is_root() {
        return Command::new(env!("CARGO_BIN_EXE_ackscope"));
    }
    let mut command = Command::new("setpriv");
    command.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
    command.arg(dir.join("ackscope"));
    command
}

/// One request of `duo.py`'s, as it printed it.
#[derive(Clone, Copy, Debug)]
struct Request {
    ms: f64,
    /// TCP_NODELAY of the client's own socket, as the program read it after the answer.
    nodelay: bool,
}

/// A running `ackscope watch ARGS -- python3 duo.py MORE`: the program's requests as it prints
/// them, ackscope's lines on standard error as they come, the rest of standard output (the
/// summary) kept.
struct Watched {
    ackscope: Reaped,
    stdin: Option<ChildStdin>,
    requests: Receiver<Request>,
    stderr: Receiver<String>,
    said: Vec<String>,
    /// Standard output's lines other than the requests, once it closed.
    other: Receiver<Vec<String>>,
    server_pid: Receiver<u32>,
}

impl Watched {
    fn start(mut ackscope: Command, dir: &Path, args: &[&str], more: &[&str]) -> Watched {
        let mut child = ackscope
            .arg("watch")
            .args(args)
            .arg("--")
            .arg("python3")
            .arg(dir.join("duo.py"))
            .args(more)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (requests_to, requests) = mpsc::channel();
        let (other_to, other) = mpsc::channel();
        let (server_to, server_pid) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut other = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words[..] {
                    ["request", _, "ms", ms, "nodelay", nodelay] => {
                        let request = Request { ms: ms.parse().unwrap(), nodelay: nodelay == "1" };
                        let _ = requests_to.send(request);
                    }
                    ["server", "pid", pid] => {
                        let _ = server_to.send(pid.parse().unwrap());
                    }
                    _ => other.push(line),
                }
            }
            let _ = other_to.send(other);
        });
        let (stderr_to, stderr) = mpsc::channel();
        let errors = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(errors).lines().map_while(Result::ok) {
                eprintln!("watch: {line}");
                let _ = stderr_to.send(line);
            }
        });
        let stdin = child.stdin.take();
        Watched {
            ackscope: Reaped(child),
            stdin,
            requests,
            stderr,
            said: Vec::new(),
            other,
            server_pid,
        }
    }

    /// The next request the program made, within the deadline.
    fn next_request(&self, seen: &[Request]) -> Request {
        self.requests.recv_timeout(DEADLINE).unwrap_or_else(|_| {
            panic!("no request from duo.py in {DEADLINE:?}; the last: {:?}", last(seen, 20))
        })
    }

    /// Reads ackscope's standard error until a line contains `text`; returns it.
    fn wait_said(&mut self, text: &str) -> String {
        if let Some(line) = self.said.iter().find(|l| l.contains(text)) {
            return line.clone();
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    self.said.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!("ackscope did not say {text:?} in {DEADLINE:?}: {:?}", self.said),
            }
        }
    }

    /// Closes the program's standard input (it stops at once), then waits for ackscope to
    /// exit; returns its status, the rest of its standard output, and all it said.
    fn finish(mut self) -> (ExitStatus, Vec<String>, Vec<String>) {
        drop(self.stdin.take());
        let status = wait_within(&mut self.ackscope.0);
        let other = self.other.recv_timeout(DEADLINE).expect("standard output closed");
        while let Ok(line) = self.stderr.try_recv() {
            self.said.push(line);
        }
        (status, other, std::mem::take(&mut self.said))
    }
}

fn last(requests: &[Request], n: usize) -> &[Request] {
    &requests[requests.len().saturating_sub(n)..]
}

fn median(requests: &[Request]) -> f64 {
    let mut ms: Vec<f64> = requests.iter().map(|r| r.ms).collect();
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

/// Waits (polling) for `child` to exit, within the deadline.
fn wait_within(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "ackscope did not exit within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Requests in a row with TCP_NODELAY on, read as the option's steady effect.
const STEADY: usize = 50;

/// `watch --try nodelay=both -- python3 duo.py` run by `ackscope`: the program's own requests
/// drop below 1 ms once the option is on both sockets (each waited for a 40 ms delayed ACK,
/// twice, before), ackscope says what it applied to which process and that it put it back, and
/// exits with the program's status when the program ends. Returns what ackscope said.
fn try_nodelay_on_the_command(ackscope: Command, dir: &Path) -> Vec<String> {
    let mut watched = Watched::start(ackscope, dir, &["--try", "nodelay=both"], &[]);
    let server_pid = watched.server_pid.recv_timeout(DEADLINE).expect("duo.py's server pid");
    let started = watched.wait_said("started `python3");
    let duo_pid: u32 = started
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the command's pid in {started:?}"));
    let client = watched.wait_said("the client of conn");
    let server = watched.wait_said("the server of conn");
    assert!(
        client.contains("tried TCP_NODELAY off -> on on fd")
            && client.contains(&format!("of pid {duo_pid} (python3)")),
        "the client's socket is the program's: {client}"
    );
    assert!(server.contains(&format!("of pid {server_pid} (python3)")), "{server}");

    let mut seen = Vec::new();
    while seen.len() < STEADY || !last(&seen, STEADY).iter().all(|r| r.nodelay) {
        seen.push(watched.next_request(&seen));
    }
    let steady = median(last(&seen, STEADY));
    assert!(
        steady < 1.0,
        "the program's median of {STEADY} requests with TCP_NODELAY tried: {steady:.3} ms \
         (microseconds expected; 40 ms and more without it): {:?}",
        last(&seen, STEADY)
    );

    let (status, summary, said) = watched.finish();
    assert_eq!(status.code(), Some(0), "the program's status, 0: {summary:?}");
    let summary = summary.join("\n");
    // The program ended the watch by exiting: its sockets closed with it, so each change is
    // named with nothing left to put back (a socket still open would be put back).
    let restores: Vec<&str> = summary
        .lines()
        .filter(|l| l.contains("put back") && l.contains("TCP_NODELAY off -> on on fd"))
        .collect();
    for pid in [duo_pid, server_pid] {
        let of_pid = format!("of pid {pid} (python3)");
        assert!(restores.iter().any(|l| l.contains(&of_pid)), "pid {pid}'s socket: {summary}");
    }
    assert_eq!(restores.len(), 2, "{summary}");
    said
}

#[test]
fn without_root_trying_nodelay_on_a_started_command_takes_its_latency_below_a_millisecond() {
    let dir = scripts(is_root());
    let said = try_nodelay_on_the_command(unprivileged_ackscope(&dir), &dir);
    // Without privileges indeed: no packets, so TCP_INFO only, and the option tried anyway.
    let said = said.join("\n");
    assert!(said.contains("TCP_INFO only") && said.contains("CAP_NET_RAW"), "{said}");
}

#[test]
#[ignore = "needs root (packets and the kernel's timer): cargo xtask test runs it as root"]
fn as_root_trying_nodelay_on_a_started_command_takes_its_latency_below_a_millisecond() {
    require_root("reading the program's packets");
    let dir = scripts(false);
    let said = try_nodelay_on_the_command(Command::new(env!("CARGO_BIN_EXE_ackscope")), &dir);
    let said = said.join("\n");
    assert!(!said.contains("TCP_INFO only"), "with packets: {said}");
}

/// `--duration` ends the watch, not the program: every option is put back (the program reads
/// TCP_NODELAY off again on its own socket, and its 40 ms waits come back), it runs on, and
/// ackscope waits for it and exits with its status.
#[test]
fn after_duration_the_command_runs_on_with_its_option_put_back_and_its_waits_back() {
    let dir = scripts(is_root());
    let mut watched = Watched::start(
        unprivileged_ackscope(&dir),
        &dir,
        &["--try", "nodelay=both", "--duration", "5s"],
        &["--exit", "5"],
    );
    let mut seen = Vec::new();
    // On, for a while: the option was tried within the watch's 5 s.
    while seen.iter().filter(|r: &&Request| r.nodelay).count() < STEADY {
        seen.push(watched.next_request(&seen));
    }
    let tried: Vec<Request> = seen.iter().filter(|r| r.nodelay).copied().collect();
    assert!(median(last(&tried, STEADY)) < 1.0, "with the option: {:?}", last(&tried, STEADY));
    // Off again: put back when the watch ended; 10 requests after that.
    let mut after = Vec::new();
    while after.len() < 10 {
        let request = watched.next_request(&seen);
        seen.push(request);
        if !request.nodelay {
            after.push(request);
        } else {
            assert!(after.is_empty(), "TCP_NODELAY on again after it was put back: {seen:?}");
        }
    }
    let back = median(&after);
    assert!(back > 30.0, "the delayed-ACK waits are back once it is put back: {after:?}");
    watched.wait_said("runs on, unwatched, every option tried on it put back");
    assert!(watched.ackscope.0.try_wait().unwrap().is_none(), "ackscope waits for the program");
    let (status, summary, _) = watched.finish();
    assert_eq!(status.code(), Some(5), "the program's status: {summary:?}");
    assert_eq!(summary.join("\n").matches("put back: TCP_NODELAY").count(), 2, "{summary:?}");
}

/// Ctrl-C for ackscope alone (`kill -INT`, not the terminal's, which reaches both): the
/// options are put back, and ackscope passes the signal on to the program, which ends of it;
/// ackscope exits with its status, 130.
#[test]
fn ctrl_c_puts_the_options_back_and_is_passed_on_to_the_command() {
    let dir = scripts(false);
    let ackscope = Command::new(env!("CARGO_BIN_EXE_ackscope"));
    let mut watched = Watched::start(ackscope, &dir, &["--try", "nodelay=both"], &[]);
    let server_pid = watched.server_pid.recv_timeout(DEADLINE).expect("duo.py's server pid");
    watched.wait_said("the client of conn");
    let mut seen = Vec::new();
    while !seen.iter().any(|r: &Request| r.nodelay) {
        seen.push(watched.next_request(&seen));
    }
    interrupt(watched.ackscope.0.id());
    let status = wait_within(&mut watched.ackscope.0);
    assert_eq!(status.code(), Some(130), "128 + SIGINT, the program's");
    let said = watched.wait_said("after ackscope passed signal 2 (SIGINT) on to it");
    assert!(said.contains("was ended by signal 2 (SIGINT)"), "{said}");
    let (_, summary, _) = watched.finish();
    assert_eq!(summary.join("\n").matches("put back: TCP_NODELAY").count(), 2, "{summary:?}");
    // The program stopped its server on its way out.
    let deadline = Instant::now() + DEADLINE;
    while Path::new(&format!("/proc/{server_pid}")).exists() {
        assert!(Instant::now() < deadline, "duo.py's server {server_pid} still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// ackscope's status is the command's: its exit code, 128 + the signal that ended it, 127 for
/// a command not found; a command that never used a TCP port is said to have been watched for
/// nothing.
#[test]
fn ackscope_exits_with_the_commands_status() {
    let dir = scripts(false);
    let watch = |command: &[&str]| {
        let mut args = vec!["watch", "--"];
        args.extend(command);
        let out = common::ackscope(&args);
        (out.status.code(), common::text(&out.stdout), common::text(&out.stderr))
    };
    let (code, _, stderr) = watch(&["sh", "-c", "exit 3"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("exited with status 3 before it used a TCP port"), "{stderr}");
    let (code, _, stderr) = watch(&["sh", "-c", "kill -TERM $$"]);
    assert_eq!(code, Some(143), "{stderr}");
    assert!(stderr.contains("was ended by signal 15 (SIGTERM)"), "{stderr}");
    let (code, _, stderr) = watch(&["/nonexistent/ackscope-test-command"]);
    assert_eq!(code, Some(127), "{stderr}");
    assert!(stderr.contains("cannot start `/nonexistent/ackscope-test-command`"), "{stderr}");

    // A program watched to its end: the summary, then its status.
    let duo = dir.join("duo.py");
    let (code, stdout, stderr) =
        watch(&["python3", common::s(&duo), "--requests", "10", "--exit", "7"]);
    assert_eq!(code, Some(7), "{stderr}");
    assert!(stderr.contains("exited with status 7"), "{stderr}");
    assert!(stdout.contains("watch: watching port"), "the summary: {stdout}");
}

#[test]
fn a_try_with_nothing_to_apply_it_to_and_too_many_ports_are_refused_with_the_fix() {
    let out = common::ackscope(&["watch", "--try", "nodelay=both"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = common::text(&out.stderr);
    assert!(
        stderr.contains("--try nodelay=both has nothing to apply it to")
            && stderr.contains("--port 8080")
            && stderr.contains("ackscope watch -- python3 app.py"),
        "{stderr}"
    );
    let mut args = vec!["watch"];
    for port in ["1", "2", "3", "4", "5", "6", "7", "8", "9"] {
        args.extend(["--port", port]);
    }
    args.extend(["--", "true"]);
    let out = common::ackscope(&args);
    assert_eq!(out.status.code(), Some(2));
    let stderr = common::text(&out.stderr);
    assert!(stderr.contains("at most 8 ports"), "{stderr}");
}

/// A port given with --port, and the command's own found once it uses it: added to the watch
/// as it runs, with its packets (its exchanges and stalls counted) and the kernel's
/// delayed-ACK timer on its sockets.
#[test]
#[ignore = "needs root (packets and the kernel's timer): cargo xtask test runs it as root"]
fn as_root_a_commands_port_found_after_the_watch_began_is_watched_with_its_packets() {
    require_root("reading the program's packets");
    let dir = scripts(false);
    // A port the kernel just gave out and took back: nothing uses it.
    let given = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let given = given.to_string();
    let mut watched = Watched::start(
        Command::new(env!("CARGO_BIN_EXE_ackscope")),
        &dir,
        &["--port", &given],
        &["--requests", "30"],
    );
    let added = watched.wait_said("now: watching it too");
    let mut seen = Vec::new();
    while seen.len() < 30 {
        seen.push(watched.next_request(&seen));
    }
    let (status, summary, _) = watched.finish();
    assert_eq!(status.code(), Some(0));
    let summary = summary.join("\n");
    let port = added.split("uses port ").nth(1).and_then(|rest| rest.split(' ').next()).unwrap();
    assert!(
        summary.contains(&format!("ports {given}, {port}"))
            || summary.contains(&format!("ports {port}, {given}")),
        "both ports: {summary}"
    );
    // Most of the 30 requests, each held twice by a delayed ACK, after the port was added.
    let exchanges: u32 = summary
        .lines()
        .find_map(|l| l.trim().strip_prefix("exchanges")?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("an exchanges line: {summary}"));
    assert!(exchanges >= 15, "{exchanges} exchanges of 30 requests: {summary}");
    assert!(summary.contains("stalls: Nagle x delayed ACK"), "{summary}");
    let kernel = summary.lines().find(|l| l.trim_start().starts_with("kernel ")).unwrap();
    let sent: u32 = kernel
        .split("sent ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{kernel}"));
    assert!(sent >= 10, "the timer's program took the added port: {kernel}");
}
