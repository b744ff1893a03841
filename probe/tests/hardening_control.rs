//! Regression tests of the third hardening round's defects 1 and 9: the control port of
//! `ackscope server` (docs/REMOTE.md) before the token is checked, the echo server's idle
//! timeout on a connection's first bytes, and its accept loop out of descriptors. Through the
//! real binary over raw sockets; each failed before its fix.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackscope_shared::control::{ToClient, ToServer, CONTROL_MAGIC};
use ackscope_shared::wire::{self, PROTOCOL_VERSION};

/// `ackscope server` on loopback, its log collected as it comes; killed if a test fails first.
struct Server {
    child: Option<Child>,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ackscope"));
        command.args(["server", "--listen", "127.0.0.1:0"]).args(args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let into = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                into.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line.split_whitespace().find(|w| w.starts_with("127.0.0.1:")).expect(&line);
        let addr = addr.to_string();
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        Server { child: Some(child), addr, log }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Ctrl-C, then what it logged.
    fn stop(mut self) -> String {
        let mut child = self.child.take().unwrap();
        common::interrupt(child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "Ctrl-C did not stop the server");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The log's reader ends with the process: give it a moment to take the last lines.
        let until = Instant::now() + Duration::from_secs(2);
        while Arc::strong_count(&self.log) > 1 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.log()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `/proc/PID/status` field in kB (`VmRSS:`, `VmHWM:`).
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix(field)).unwrap();
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// Starts `VmHWM` (the peak resident memory) again from the present `VmRSS`.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .expect("resetting the peak RSS (/proc/PID/clear_refs, Linux 4.0 and later)");
}

/// One framed control message.
fn frame<T: serde::Serialize>(message: &T) -> Vec<u8> {
    let mut bytes = Vec::new();
    wire::write_frame(message, &mut bytes);
    bytes
}

/// Whether the server has closed `stream`, waiting at most `wait`; what it said before is added
/// to `said`.
fn closed_within(stream: &mut TcpStream, wait: Duration, said: &mut Vec<u8>) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk) {
        Ok(0) => true,
        Ok(n) => {
            said.extend_from_slice(&chunk[..n]);
            false
        }
        Err(e) => {
            !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
        }
    }
}

/// Everything the server says on `stream` until it closes it (at most 10 s).
fn everything_said(stream: &mut TcpStream) -> Vec<u8> {
    let mut said = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !closed_within(stream, Duration::from_millis(100), &mut said) {
        assert!(Instant::now() < deadline, "not closed: {}", String::from_utf8_lossy(&said));
    }
    said
}

/// The reason of the `Refused` frame that opens `said`.
fn refusal(said: &[u8]) -> String {
    let (len, payload) = said.split_first_chunk::<4>().expect("a frame");
    let payload = &payload[..u32::from_le_bytes(*len) as usize];
    match wire::decode::<ToClient>(payload).unwrap() {
        ToClient::Refused { reason } => reason,
        other => panic!("not a refusal: {other:?}"),
    }
}

/// Defect 1: a control connection's whole first frame (up to
/// 16 MiB) was read before its token was checked: 24 unauthenticated connections added 387 MB.
/// Now the first frame is at most a few hundred bytes, refused past that before any is read.
/// 100 connections that each announce 16 MiB and send 1 MiB of it would hold at least 100 MB
/// buffered; without buffering they hold their threads' few pages.
#[test]
fn unauthenticated_connections_announcing_16_mib_are_not_buffered() {
    let server = Server::start(&[]);
    let pid = server.pid();
    let before = status_kb(pid, "VmRSS:");
    reset_peak(pid);
    let mut opening = CONTROL_MAGIC.to_vec();
    opening.extend_from_slice(&(16u32 << 20).to_le_bytes());
    let part = vec![7u8; 1 << 20];
    let mut connections: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut control = TcpStream::connect(&server.addr).unwrap();
            control.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
            // Refused at the length, the rest of the writes fail: that is fine.
            let _ = control.write_all(&opening).and_then(|()| control.write_all(&part));
            control
        })
        .collect();
    // Buffered or not, each connection ends: refused, or (buffered) at the handshake's timeout.
    let deadline = Instant::now() + Duration::from_secs(30);
    for control in &mut connections {
        while !closed_within(control, Duration::from_millis(100), &mut Vec::new()) {
            assert!(Instant::now() < deadline, "a connection still open after 30 s");
        }
    }
    let peak = status_kb(pid, "VmHWM:");
    let added_mb = peak.saturating_sub(before) / 1024;
    eprintln!(
        "server RSS {} MB before, peak {} MB with 100 x 1 MiB sent",
        before / 1024,
        peak / 1024
    );
    assert!(added_mb < 30, "{added_mb} MB added by 100 unauthenticated connections");
    let log = server.stop();
    assert!(log.contains("16777216"), "the refusal names the length: {log}");
}

/// Defect 1: "the handshake within 10 s" was a timeout on each read: a hello trickled a byte
/// every few seconds was still open after 33 s. Now the handshake has 10 s in all.
#[test]
fn a_handshake_trickled_a_byte_a_second_is_cut_at_its_deadline() {
    let server = Server::start(&[]);
    let mut control = TcpStream::connect(&server.addr).unwrap();
    let mut opening = CONTROL_MAGIC.to_vec();
    opening.extend_from_slice(&400u32.to_le_bytes());
    control.write_all(&opening).unwrap();
    let began = Instant::now();
    let mut said = Vec::new();
    // A byte a second: 400 s for the whole hello, each read well within any per-read timeout.
    loop {
        if control.write_all(b"x").is_err() {
            break;
        }
        if closed_within(&mut control, Duration::from_secs(1), &mut said) {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(20), "still open after 20 s");
    }
    let took = began.elapsed();
    eprintln!("closed after {took:?}");
    assert!(took < Duration::from_secs(15), "closed at the 10 s deadline: {took:?}");
    assert!(took > Duration::from_secs(8), "not before it: {took:?}");
    let reason = refusal(&said);
    assert!(reason.contains("within 10 s"), "{reason}");
    server.stop();
}

/// The opening of a handshake trickled before the control port's deadline begins: its magic
/// and an echo client's token line a byte every 4 s, each within the idle timeout. Each byte
/// got the whole idle timeout (300 s by default), so a peer held a thread and a connection's
/// place for hours; now the opening has 10 s from its first byte.
#[test]
fn a_magic_and_token_line_trickled_a_byte_at_a_time_are_cut_at_the_opening_deadline() {
    let server = Server::start(&["--idle-timeout", "30"]);
    for opening in [CONTROL_MAGIC.as_slice(), b"ACKT a-token-line-that-never-ends"] {
        let mut peer = TcpStream::connect(&server.addr).unwrap();
        let began = Instant::now();
        let mut said = Vec::new();
        let mut closed = false;
        for byte in opening {
            if peer.write_all(std::slice::from_ref(byte)).is_err() {
                closed = true;
                break;
            }
            if closed_within(&mut peer, Duration::from_secs(4), &mut said) {
                closed = true;
                break;
            }
            assert!(began.elapsed() < Duration::from_secs(20), "still open after 20 s");
        }
        let took = began.elapsed();
        eprintln!("{:?}: closed after {took:?}", String::from_utf8_lossy(opening));
        assert!(closed && took < Duration::from_secs(15), "cut near 10 s: {took:?}");
    }
    server.stop();
}

/// Defect 1: the version was checked before the token, and the refusal named this server's
/// version to anyone: a wrong token is now told only that, whatever the hello says it is.
#[test]
fn a_wrong_token_is_told_nothing_about_the_server() {
    let server = Server::start(&[]);
    let ours = env!("CARGO_PKG_VERSION");
    let hellos = [
        // Another version, a wrong token: the old server named both versions.
        frame(&ToServer::Hello {
            protocol_version: 99,
            ackscope_version: "9.9.9".into(),
            token: "not-the-token".into(),
        }),
        // This version, a wrong token.
        frame(&ToServer::Hello {
            protocol_version: PROTOCOL_VERSION,
            ackscope_version: ours.into(),
            token: "not-the-token".into(),
        }),
        // A hello whose version is readable and nothing else: no token at all.
        [4u32.to_le_bytes().as_slice(), &[0, 99, 0xff, 0xff]].concat(),
    ];
    for hello in hellos {
        let mut control = TcpStream::connect(&server.addr).unwrap();
        control.write_all(&CONTROL_MAGIC).unwrap();
        control.write_all(&hello).unwrap();
        let said = everything_said(&mut control);
        let reason = refusal(&said);
        eprintln!("refused: {reason}");
        assert!(reason.contains("token"), "says what is missing: {reason}");
        let said = String::from_utf8_lossy(&said);
        assert!(!said.contains(ours), "no version of the server: {said}");
        assert!(!said.contains("protocol"), "no protocol number: {said}");
    }
    server.stop();
}

/// Defect 9: a connection that sent 3 bytes of a length prefix, then nothing, was closed after
/// twice the idle timeout (once waiting for the opening's 4 bytes, once more for the prefix).
#[test]
fn three_bytes_of_a_length_prefix_then_silence_is_closed_at_the_idle_timeout() {
    let server = Server::start(&["--idle-timeout", "3"]);
    let mut client = TcpStream::connect(&server.addr).unwrap();
    client.write_all(&[0, 0, 0]).unwrap();
    let began = Instant::now();
    let mut said = Vec::new();
    while !closed_within(&mut client, Duration::from_millis(100), &mut said) {
        assert!(began.elapsed() < Duration::from_secs(10), "still open after 10 s");
    }
    let took = began.elapsed();
    eprintln!("closed after {took:?}");
    // The 3 s timeout and a scheduling delay at most: twice it is 6 s.
    assert!(took > Duration::from_millis(2800), "not before the timeout: {took:?}");
    assert!(took < Duration::from_millis(4500), "at the idle timeout, not twice it: {took:?}");
    server.stop();
}

/// Defect 9: out of descriptors, the accept loop logged a line for each connection it had to
/// drop, 10 ms apart, and never waited longer: an accept that succeeded (taking the last
/// descriptor) reset its back-off, though the connection could not be served (its second
/// descriptor could not be had). Now the waits double, to a second, until a connection is served
/// again, and the episode is logged once.
#[test]
fn out_of_descriptors_the_accept_loop_backs_off_and_logs_once() {
    let server = Server::start(&[]);
    // One descriptor to spare: each accept takes it, and the connection, which needs a second,
    // is dropped. The limit bounds descriptor numbers: it is the second number not in use.
    let pid = server.pid();
    let in_use: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    let free = (0..).filter(|fd| !in_use.contains(fd)).nth(1).unwrap();
    let limit = libc::rlimit { rlim_cur: free, rlim_max: free };
    // SAFETY: prlimit reads `limit` and writes nothing (the old limit is not asked for).
    let set = unsafe {
        libc::prlimit(pid as libc::pid_t, libc::RLIMIT_NOFILE, &limit, std::ptr::null_mut())
    };
    assert_eq!(set, 0, "prlimit: {}", std::io::Error::last_os_error());
    let began = Instant::now();
    let mut held: Vec<TcpStream> =
        (0..20).map(|_| TcpStream::connect(&server.addr).unwrap()).collect();
    let mut dropped = 0;
    let mut open = vec![true; held.len()];
    let deadline = Instant::now() + Duration::from_secs(20);
    while dropped < 8 {
        assert!(Instant::now() < deadline, "only {dropped} dropped in 20 s");
        for (stream, open) in held.iter_mut().zip(&mut open) {
            if *open && closed_within(stream, Duration::from_millis(1), &mut Vec::new()) {
                *open = false;
                dropped += 1;
            }
        }
    }
    let took = began.elapsed();
    let during = server.log();
    drop(held);
    let log = server.stop();
    let lines = during.matches("accept failed").count();
    eprintln!("8 connections dropped in {took:?}, {lines} log lines:\n{during}");
    // Each drop comes after a wait: 10 ms, 20, 40 ... 1 s, 2.27 s in all for eight; 80 ms before.
    assert!(took > Duration::from_secs(1), "no growing back-off: {took:?}");
    assert!(lines == 1, "one line for the episode, not one a connection: {during}");
    assert!(log.contains("accept failed"), "{log}");
}
