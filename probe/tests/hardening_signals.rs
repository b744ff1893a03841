//! Signals, through the real binary (the second hardening round): SIGTERM is Ctrl-C, a stop
//! ends within 2 s even when the output blocks, and the servers exit 130 when interrupted. Each
//! test failed on the main branch before its fix.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{ackscope, s, text, ui_server};

fn temp(name: &str) -> common::Scratch {
    common::temp("signals", name)
}

/// Sends `signal` (by name, as `kill -NAME` takes it) to `pid`.
fn signal(pid: u32, name: &str) {
    let status = Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{name} {pid}");
}

/// Waits for `child` to end; fails past `limit`. Returns how long it took and its exit code.
fn ends_within(child: &mut Child, limit: Duration) -> (Duration, Option<i32>) {
    let asked = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (asked.elapsed(), status.code());
        }
        if asked.elapsed() > limit {
            let _ = child.kill();
            panic!("still running {limit:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `condition` every 20 ms for up to 30 s (a loaded machine is slow to start a run).
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process this test started, killed if the test ends first (a failed assertion must not
/// leave a run blocked on a FIFO behind it).
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A long run (500,000 requests on loopback, tens of seconds) recording to `file`.
fn long_run(file: &std::path::Path) -> Started {
    let child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["run", "rr", "--count", "500000", "--nodelay", "both", "-o", s(file)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Started(child)
}

/// Defect 8a: with the session file a FIFO whose reader stopped reading, Ctrl-C left the
/// process running (blocked in a write that never returns).
#[test]
fn ctrl_c_ends_a_run_within_2_s_when_its_output_blocks_and_says_the_file_may_be_incomplete() {
    let dir = common::temp_folder("signals");
    let fifo = dir.join("session.fifo");
    let path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path; mkfifo creates the node.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    // The reader opens first (without waiting for a writer) and then never reads.
    // SAFETY: a valid path; the descriptor is closed below.
    let reader = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0, "opening the FIFO's read end");
    let mut started = long_run(&fifo);
    let run = &mut started.0;
    // The run has filled the pipe: one of its threads waits in the kernel's pipe write.
    let pid = run.id();
    wait_for("a write to the FIFO to block", || {
        blocked_in_pipe_write(pid) || run.try_wait().unwrap().is_some()
    });
    assert!(run.try_wait().unwrap().is_none(), "the run is still going, its output blocked");
    signal(run.id(), "INT");
    let (took, code) = ends_within(run, Duration::from_secs(2));
    let mut err = String::new();
    run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    eprintln!("the blocked run ended {took:?} after Ctrl-C: {err}");
    assert_eq!(code, Some(130), "an interrupted run exits 130");
    assert!(err.contains("may be incomplete"), "it says what it left: {err}");
    // SAFETY: ours, opened above.
    unsafe { libc::close(reader) };
}

/// Whether a thread of `pid` waits in the kernel's pipe write (its `wchan`).
fn blocked_in_pipe_write(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("wchan")).is_ok_and(|w| w.contains("pipe_write"))
    })
}

/// Defect 8b: SIGTERM (what `kill` and service managers send) ended a run at once, with no
/// `RunFinished` in its file.
#[test]
fn sigterm_finishes_a_runs_file_as_ctrl_c_does() {
    let file = temp("term.ackscope");
    let mut started = long_run(&file);
    let run = &mut started.0;
    wait_for("the run to record", || std::fs::metadata(&file).is_ok_and(|m| m.len() > 64 * 1024));
    signal(run.id(), "TERM");
    let (took, code) = ends_within(run, Duration::from_secs(2));
    eprintln!("the run ended {took:?} after SIGTERM");
    assert_eq!(code, Some(130), "SIGTERM is an interrupt: exit 130");
    let shown = ackscope(&["show", s(&file)]);
    let out = text(&shown.stdout);
    assert!(shown.status.success(), "the file is complete: {}", text(&shown.stderr));
    assert!(out.contains("interrupted"), "the file says how the run ended: {out}");
}

/// Defect 8c: `ackscope server` exited 0 on Ctrl-C, and SIGTERM ended it with its file
/// unfinished.
#[test]
fn the_server_exits_130_on_ctrl_c_and_finishes_its_file_on_sigterm() {
    for name in ["INT", "TERM"] {
        let file = temp(&format!("server-{name}.ackscope"));
        let mut child = Started(common::recording_server(&file).0);
        signal(child.0.id(), name);
        let (took, code) = ends_within(&mut child.0, Duration::from_secs(2));
        eprintln!("the server ended {took:?} after SIG{name}");
        assert_eq!(code, Some(130), "SIG{name}: an interrupted server exits 130");
        let shown = ackscope(&["show", s(&file)]);
        assert!(shown.status.success(), "SIG{name}: the file is complete");
        assert!(text(&shown.stdout).contains("interrupted"), "SIG{name}");
    }
}

/// SIGTERM stops the UI server as Ctrl-C does, and it exits 130.
#[test]
fn sigterm_stops_the_ui_server_with_130() {
    let mut ui = Started(ui_server().0);
    signal(ui.0.id(), "TERM");
    let (took, code) = ends_within(&mut ui.0, Duration::from_secs(2));
    eprintln!("the UI server ended {took:?} after SIGTERM");
    assert_eq!(code, Some(130));
}
