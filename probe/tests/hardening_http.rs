//! The UI server's HTTP guard against hostile clients, through the real binary and raw sockets:
//! regression tests of the second hardening round's defects 2 and 6, each of which failed
//! before its fix.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::{Duration, Instant};

use ackscope_shared::wire::{ClassState, ClassView, ToBrowser, ToProbe};

mod common;

use common::{next_message, open_page, send_frame, start_class, text};

/// The UI server (`ackscope --port 0`), stopped when the value is dropped.
struct Ui {
    child: Child,
    addr: String,
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// On a port of the kernel's choosing: a port found free beforehand could be taken by then, by
/// the flood test's own connections.
fn start_ui() -> Ui {
    let (child, addr) = common::ui_server();
    Ui { child, addr }
}

/// A WebSocket handshake for `path` from `origin`, as a browser sends it.
fn upgrade_request(addr: &str, path: &str, origin: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Origin: {origin}\r\n\r\n"
    )
}

/// A raw connection to `addr` that gives up reading after `timeout`.
fn connect(addr: &str, timeout: Duration) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(timeout)).unwrap();
    stream
}

/// One response read off `stream`: its head (lower-cased) and its body (by its
/// Content-Length). The connection stays open for what comes next.
fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!("the response ended after {:?}: {other:?}", text(&head)),
        }
    }
    let head = text(&head).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |value| value.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    (head, text(&body))
}

/// How long after now the server closes `stream` (its read timeout, set by [`connect`], is the
/// most this waits); fails if the server sends anything more or the connection stays open.
fn closed_after(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "closed with nothing more: {}", text(&rest)),
        // The server closed it with bytes unread (a reset): closed too.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("still open {:?} later ({e})", started.elapsed()),
    }
    started.elapsed()
}

/// Defect 2: a request that asked for a WebSocket switched the header timeout off for good,
/// whatever the answer, so a refused upgrade kept its connection for ever. Now only a `101`
/// answer ends the deadlines: a connection whose upgrade was refused is closed 5 s after its
/// answer if it sends nothing, and 5 s after a next request's first byte if that request's
/// headers never end.
#[test]
fn a_connection_whose_upgrade_was_refused_is_still_closed_by_the_deadlines() {
    let class = start_class();
    let ui = start_ui();
    // Margins: the deadlines are 5 s; a loaded 2-core machine may take a few seconds more.
    let wait = Duration::from_secs(20);

    // No room code, to a class; then silence.
    let mut no_code = connect(&class.addr, wait);
    let origin = format!("http://{}", class.addr);
    no_code.write_all(upgrade_request(&class.addr, "/ws", &origin).as_bytes()).unwrap();
    // Another site's page, to the UI; then the start of a request whose headers never end.
    let mut bad_origin = connect(&ui.addr, wait);
    let request = upgrade_request(&ui.addr, "/ws", "http://evil.example");
    bad_origin.write_all(request.as_bytes()).unwrap();

    let (head, _) = read_response(&mut no_code);
    assert!(head.starts_with("http/1.1 403"), "{head}");
    let (head, _) = read_response(&mut bad_origin);
    assert!(head.starts_with("http/1.1 403"), "{head}");
    write!(bad_origin, "GET / HTTP/1.1\r\nHost: {}\r\n", ui.addr).unwrap();

    let silent = std::thread::spawn(move || closed_after(&mut no_code));
    let trickling = closed_after(&mut bad_origin);
    let silent = silent.join().unwrap();
    eprintln!("refused upgrades closed {silent:?} (silent) and {trickling:?} (half a request) on");
    assert!(silent < Duration::from_secs(12), "{silent:?}");
    assert!(trickling < Duration::from_secs(12), "{trickling:?}");
}

fn state(step: u32) -> ClassState {
    let view = ClassView { run_clock: true, window: Some((0, 5)), selected: Some(3) };
    ClassState { lesson: "forty-ms".into(), step, revealed: false, recording: false, view }
}

/// The descriptors this process may open, raised to what the flood needs (the servers it
/// starts inherit it); fails naming the fix if the hard limit is lower.
fn allow_descriptors(needed: u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < needed {
            assert!(
                limit.rlim_max >= needed,
                "this test opens {needed} descriptors; raise the hard limit (ulimit -Hn)"
            );
            limit.rlim_cur = needed;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
}

/// Defect 2: 1,030 connections asking for a WebSocket with no room code filled the 1,024
/// connections the UI served at once, for ever, and neither the presenter nor a student could
/// connect. Now connections not yet upgraded share a pool of their own in which a new one
/// closes the oldest: with 1,100 such connections held, a student and the presenter, who have
/// the code, still get in, and the presenter moves the room.
#[test]
fn a_flood_of_refused_upgrades_does_not_lock_the_class_out() {
    const FLOOD: usize = 1100;
    allow_descriptors(4096);
    let class = start_class();
    let origin = format!("http://{}", class.addr);
    let request = upgrade_request(&class.addr, "/ws", &origin);
    let started = Instant::now();
    let mut refused = 0;
    let flood: Vec<TcpStream> = (0..FLOOD)
        .filter_map(|_| {
            let mut stream = connect(&class.addr, Duration::from_secs(10));
            stream.write_all(request.as_bytes()).ok()?;
            // The answer: the server has read the request. Past the server's bound some are
            // closed instead.
            let mut answer = [0u8; 12];
            stream.read_exact(&mut answer).ok()?;
            refused += usize::from(answer.starts_with(b"HTTP/1.1 403"));
            Some(stream)
        })
        .collect();
    eprintln!(
        "{refused} of {FLOOD} upgrades refused in {:?}, {} held",
        started.elapsed(),
        flood.len()
    );
    assert!(refused > FLOOD / 2, "the flood's requests were answered: {refused}");

    let student_path = format!("/ws?room={}", class.code);
    let mut student = open_page(&class.addr, &student_path);
    student.get_ref().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(
        matches!(next_message(&mut student), ToBrowser::Hello(_)),
        "the student has the session"
    );
    let mut presenter = open_page(&class.addr, &student_path);
    presenter.get_ref().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(next_message(&mut presenter), ToBrowser::Hello(_)));
    send_frame(&mut presenter, &ToProbe::Present { secret: class.secret.clone() });
    send_frame(&mut presenter, &ToProbe::ClassState(state(3)));
    let moved = loop {
        if let ToBrowser::ClassState(state) = next_message(&mut student) {
            break state;
        }
    };
    assert_eq!(moved, state(3), "the presenter moved the room during the flood");
    drop(flood);
}

/// The security headers every response carries, as in a lower-cased head; the missing ones.
fn missing_security_headers(head: &str) -> Vec<&'static str> {
    let wanted = [
        "content-security-policy: default-src 'self'",
        "x-content-type-options: nosniff",
        "x-frame-options: sameorigin",
        "referrer-policy: no-referrer",
    ];
    wanted.into_iter().filter(|header| !head.lines().any(|line| line.starts_with(header))).collect()
}

/// The response to `request`, sent raw on a fresh connection.
fn answer_to(addr: &str, request: &[u8]) -> (String, String) {
    let mut stream = connect(addr, Duration::from_secs(10));
    stream.write_all(request).unwrap();
    read_response(&mut stream)
}

/// The HTTP library buffers up to about 400 KiB of a request's headers: across the places for
/// connections not yet upgraded, each held to its 5 s header deadline, that was 400 MiB. Headers
/// past 16 KiB now end their connection as they arrive, and the server answers the next one.
#[test]
fn request_headers_past_16_kib_end_their_connection_at_once() {
    let ui = start_ui();
    let mut big = connect(&ui.addr, Duration::from_secs(10));
    let filler = "a".repeat(64 * 1024);
    let request = format!("GET / HTTP/1.1\r\nHost: {}\r\nX-Filler: {filler}", ui.addr);
    // The server may close before it has read everything: a failed write is its answer.
    let _ = big.write_all(request.as_bytes());
    let took = closed_after(&mut big);
    eprintln!("closed {took:?} after 64 KiB of headers");
    assert!(took < Duration::from_secs(4), "closed as they came, not at the 5 s deadline");
    let (head, _) =
        answer_to(&ui.addr, format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", ui.addr).as_bytes());
    assert!(head.starts_with("http/1.1 200"), "{head}");
}

/// Defect 6: the answers to a request for another Host (421, from the server's own check), a
/// malformed request (400) and too many headers (431, both from the HTTP library before any
/// handler) carried no Content-Security-Policy, nosniff, frame or referrer policy, and the 421
/// repeated the Host it was sent in its body. Every answer carries them now, and none repeats
/// what the request said.
#[test]
fn every_answer_carries_the_security_headers_and_repeats_no_request_header() {
    let ui = start_ui();
    let addr = &ui.addr;
    let host = "rebound-name.example";
    let (head, body) =
        answer_to(addr, format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
    assert!(head.starts_with("http/1.1 421"), "{head}");
    assert_eq!(missing_security_headers(&head), Vec::<&str>::new(), "421: {head}");
    assert!(!body.contains(host) && !head.contains(host), "the Host repeated: {head}{body}");
    assert!(body.contains(&format!("http://{addr}")), "names the address to open: {body}");

    let malformed = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nno colon here\r\n\r\n");
    let (head, _) = answer_to(addr, malformed.as_bytes());
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert_eq!(missing_security_headers(&head), Vec::<&str>::new(), "400: {head}");

    let mut many = format!("GET / HTTP/1.1\r\nHost: {addr}\r\n");
    for i in 0..200 {
        many.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    many.push_str("\r\n");
    let (head, _) = answer_to(addr, many.as_bytes());
    assert!(head.starts_with("http/1.1 431"), "{head}");
    assert_eq!(missing_security_headers(&head), Vec::<&str>::new(), "431: {head}");

    let origin = "http://other-site.example";
    let (head, body) = answer_to(addr, upgrade_request(addr, "/ws", origin).as_bytes());
    assert!(head.starts_with("http/1.1 403"), "{head}");
    assert_eq!(missing_security_headers(&head), Vec::<&str>::new(), "403: {head}");
    assert!(!body.contains("other-site"), "the Origin repeated: {body}");

    let (head, _) = answer_to(addr, format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes());
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(missing_security_headers(&head), Vec::<&str>::new(), "200: {head}");
}
