//! A watch started from the page (the watch source beside the run form), over the real
//! WebSocket: the probe finds a process's ports, refuses what `ackscope watch` would refuse,
//! with its words, before anything is announced, and records what the watch really is.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use ackscope_shared::wire::{RunOutcome, ToBrowser, ToProbe};
use ackscope_shared::{Scenario, WatchSpec};
use common::{is_root, next_message, send_frame, start_from_a_page, ui_server, Page};

/// A child process stopped (and reaped) when dropped, even when the test fails.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the page sends for `ports`, or for `pid:N` (no ports: the probe finds them).
fn page_watch(ports: &[u16], pid: Option<u32>) -> ToProbe {
    let spec = WatchSpec { ports: ports.to_vec(), pid, duration_ms: None, evidence: String::new() };
    ToProbe::StartRun { spec: Scenario::Watch(spec) }
}

/// The probe's answer to a start: the refusal, or the announced run's spec and instruments.
fn answer(page: &mut Page) -> Result<ToBrowser, String> {
    loop {
        match next_message(page) {
            ToBrowser::Rejected { reason } => return Err(reason),
            started @ ToBrowser::RunStarted { .. } => return Ok(started),
            _ => {}
        }
    }
}

#[test]
fn a_pages_watch_of_a_process_without_sockets_is_refused_with_what_to_do() {
    let (ui, addr) = ui_server();
    let _ui = Reaped(ui);
    // A process with no socket at all.
    let sleeper = Reaped(Command::new("sleep").arg("60").spawn().unwrap());
    let mut page = start_from_a_page(&addr, &page_watch(&[], Some(sleeper.0.id())));
    let refusal = answer(&mut page).expect_err("a process without sockets has nothing to watch");
    assert!(
        refusal.contains(&sleeper.0.id().to_string())
            && refusal.contains("no TCP socket")
            && refusal.contains("watch its port by number"),
        "{refusal}"
    );
}

#[test]
fn a_pages_watch_of_nine_ports_or_none_is_refused_before_it_starts() {
    let (ui, addr) = ui_server();
    let _ui = Reaped(ui);
    let nine: Vec<u16> = (40001..=40009).collect();
    let mut page = start_from_a_page(&addr, &page_watch(&nine, None));
    let refusal = answer(&mut page).expect_err("nine ports are one too many");
    assert!(refusal.contains("at most 8 ports") && refusal.contains("(9 given"), "{refusal}");
    send_frame(&mut page, &page_watch(&[], None));
    let refusal = answer(&mut page).expect_err("a watch of nothing");
    assert!(refusal.contains("at least one port") && refusal.contains("pid"), "{refusal}");
    // The same port twice is one port, and a remote server has no ports of this host.
    let remote = ToProbe::StartRemoteRun {
        spec: Scenario::Watch(WatchSpec { ports: vec![40001], ..WatchSpec::default() }),
        server: "192.0.2.1:7000".into(),
        token: "t".into(),
    };
    send_frame(&mut page, &remote);
    let refusal = answer(&mut page).expect_err("a remote watch");
    assert!(refusal.contains("this host's ports"), "{refusal}");
}

/// With or without CAP_NET_RAW: the session says which (the run itself is `ackscope watch`'s,
/// tested in `watch.rs` and in the browser by the end-to-end tests).
#[test]
fn a_pages_watch_of_a_process_records_its_ports_and_what_it_sees_and_stops_as_interrupted() {
    let (ui, addr) = ui_server();
    let _ui = Reaped(ui);
    let mut server = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/watched/pair.py"))
        .arg("server")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let server = Reaped(server);
    let port: u16 = line.trim().strip_prefix("port ").and_then(|p| p.parse().ok()).expect(&line);
    let pid = server.0.id();

    let mut page = start_from_a_page(&addr, &page_watch(&[], Some(pid)));
    let Ok(ToBrowser::RunStarted { run, spec, instruments }) = answer(&mut page) else {
        panic!("the watch of pid {pid} did not start");
    };
    let Scenario::Watch(watch) = spec else { panic!("announced as {spec:?}") };
    assert_eq!((watch.ports.as_slice(), watch.pid), ([port].as_slice(), Some(pid)));
    assert_eq!(watch.duration_ms, None, "the page's Stop ends it");
    // What it sees is what this process may read: as root packets and the kernel's
    // delayed-ACK timer, else TCP_INFO alone.
    assert_eq!(instruments.capture, is_root(), "{}", watch.evidence);
    let expected = if is_root() {
        "packets, TCP_INFO and the kernel's delayed-ACK timer"
    } else {
        "TCP_INFO only"
    };
    assert!(watch.evidence.starts_with(expected), "{}", watch.evidence);
    assert!(!instruments.tcp_info_at_syscalls, "a watch makes no syscalls of its own to sample");

    send_frame(&mut page, &ToProbe::StopRun);
    let outcome = loop {
        match next_message(&mut page) {
            ToBrowser::RunFinished { run: finished, outcome } if finished == run => break outcome,
            ToBrowser::Rejected { reason } => panic!("Stop refused: {reason}"),
            _ => {}
        }
    };
    assert_eq!(outcome, RunOutcome::Interrupted);
}
