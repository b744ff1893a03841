//! Regression tests of issue 11's defects, through the real binary: each failed on the main
//! branch before its fix.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{ackscope, s, text};

fn temp(name: &str) -> PathBuf {
    common::temp("hardening", name)
}

/// `ackscope server -o FILE` on a free port, and its address.
fn server(file: &std::path::Path) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["server", "--listen", "127.0.0.1:0", "-o", s(file)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let addr = line.split_whitespace().find(|w| w.starts_with("127.0.0.1:")).expect(&line);
    (child, addr.to_string())
}

/// Defect 2: with 300 idle connections, Ctrl-C left `ackscope server` running forever (its
/// connection threads waited to hand events to the loop that was waiting to join them).
#[test]
fn ctrl_c_stops_a_server_with_300_idle_connections_within_2_s() {
    let file = temp("idle.ackscope");
    let (mut child, addr) = server(&file);
    let idle: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    // One answered request, so the file has something to show.
    let mut client = TcpStream::connect(&addr).unwrap();
    client.write_all(&[0, 0, 0, 2, b'h', b'i']).unwrap();
    client.read_exact(&mut [0u8; 6]).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let asked = Instant::now();
    common::interrupt(child.id());
    while child.try_wait().unwrap().is_none() {
        assert!(asked.elapsed() < Duration::from_secs(2), "still running 2 s after Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("stopped {:?} after Ctrl-C with {} idle connections", asked.elapsed(), idle.len());
    let shown = ackscope(&["show", s(&file)]);
    assert!(shown.status.success(), "the file is complete");
    let shown = text(&shown.stdout);
    assert!(shown.contains("requests       1 in"), "{shown}");
    assert!(shown.contains("interrupted"), "the file says how the run ended: {shown}");
}

/// Defect 9 (second half): on a full disk `run -o` exited 1 with "File too large" and printed
/// neither its summary nor that the file was incomplete. A file-size limit stands in for the
/// full disk.
#[test]
fn a_full_disk_keeps_the_summary_and_the_prefix_and_says_so() {
    let file = temp("full.ackscope");
    let mut command = Command::new(env!("CARGO_BIN_EXE_ackscope"));
    command.args(["run", "rr", "--count", "2000", "--nodelay", "both", "-o", s(&file), "--json"]);
    // SAFETY: setrlimit in the child between fork and exec touches only the child.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: 64 << 10, rlim_max: 64 << 10 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().unwrap();
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("incomplete") && err.contains(s(&file)), "{err}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).expect(&err);
    assert_eq!(summary["requests"], 2000, "the summary covers the whole run: {summary}");
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size > 0 && size <= 64 << 10, "{size} bytes");
    let shown = ackscope(&["show", s(&file)]);
    assert!(text(&shown.stdout).contains("rr:"), "the prefix is readable");
}

/// Defect 10: CLI-written bulk files carried 16,384-event messages where PROTOCOL.md and
/// `EVENTS_PER_MESSAGE` say 8,192.
#[test]
fn no_message_of_a_file_holds_more_events_than_the_protocol_says() {
    let file = temp("bulk.ackscope");
    let run = ackscope(&[
        "run",
        "bulk",
        "--bytes",
        "50000000",
        "--app-buffer",
        "1024",
        "-o",
        s(&file),
        "--json",
    ]);
    assert!(run.status.success());
    let exported = ackscope(&["export", s(&file), "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&exported.stdout).unwrap();
    let sizes: Vec<usize> = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["Events"]["events"].as_array().map(Vec::len))
        .collect();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let total: usize = sizes.iter().sum();
    eprintln!("{total} events in {} messages, the largest {largest}", sizes.len());
    assert!(total > 20_000, "enough events to fill messages: {total}");
    assert!(largest <= ackscope_shared::wire::EVENTS_PER_MESSAGE, "a message of {largest}");
}

/// Defect 1 (its allocation): a 4-byte length prefix of 64 MiB made the echo server allocate
/// and zero 64 MiB before any body byte came. Ten such connections took it from 5 to 646 MB.
#[test]
fn hostile_length_prefixes_cost_the_server_nothing_until_bytes_come() {
    let file = temp("hostile.ackscope");
    let (mut child, addr) = server(&file);
    let rss_kb = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_kb(child.id());
    let hostile: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut stream = TcpStream::connect(&addr).unwrap();
            stream.write_all(&(64u32 << 20).to_be_bytes()).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kb(child.id());
    eprintln!("server RSS {before} kB, then {after} kB with {} hostile prefixes", hostile.len());
    assert!(after < before + 20 * 1024, "RSS grew from {before} to {after} kB");
    common::interrupt(child.id());
    let _ = child.wait();
}

/// Defect 7: `show` printed strings from the file raw: a crafted version string cleared the
/// screen.
#[test]
fn show_prints_a_files_strings_as_data_not_terminal_commands() {
    use ackscope_shared::wire::{self, Hello, HostFacts, Instruments, RunOutcome, ToBrowser};
    use ackscope_shared::{RrSpec, RunId, Scenario};

    let hostile = "0.1.0\x1b[2J\x1b]0;owned\x07";
    let host = HostFacts { kernel: "6.18\x1b[31m".into(), ..HostFacts::default() };
    let run = RunId(1);
    let mut bytes = Vec::new();
    for message in [
        ToBrowser::Hello(Hello::current(hostile, host)),
        ToBrowser::RunStarted {
            run,
            spec: Scenario::Rr(RrSpec::default()),
            instruments: Instruments::default(),
        },
        ToBrowser::RunFinished { run, outcome: RunOutcome::Failed { error: "\x1b[1Aup".into() } },
    ] {
        wire::write_frame(&message, &mut bytes);
    }
    let file = temp("escapes.ackscope");
    std::fs::write(&file, bytes).unwrap();
    let shown = ackscope(&["show", s(&file)]);
    assert!(
        !shown.stdout.iter().any(|&b| b == 0x1b || b == 0x07),
        "no escape reaches the terminal"
    );
    let out = text(&shown.stdout);
    assert!(out.contains("0.1.0\\u{1b}[2J"), "shown, escaped: {out}");
    assert!(out.contains("\\u{1b}[1Aup"), "the run's error too: {out}");
}

/// One HTTP/1.1 GET of `/` with `host` as its Host header; the response's head, lower-cased.
fn get_with_host(addr: &str, host: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = text(&response);
    response.split("\r\n\r\n").next().unwrap_or_default().to_lowercase()
}

/// Defect 8: `Host: evil.example` got 200 (a page on a rebinding name could read the probe's
/// pages), and no response carried a Content-Security-Policy, nosniff or frame-ancestors.
#[test]
fn the_ui_refuses_other_hosts_and_sends_its_security_headers() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut ui = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ui.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).expect(&line);
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();

    let refused = get_with_host(&addr, "evil.example");
    assert!(refused.starts_with("http/1.1 421"), "{refused}");
    let own = get_with_host(&addr, &addr);
    assert!(own.starts_with("http/1.1 200"), "{own}");
    assert!(own.contains("x-content-type-options: nosniff"), "{own}");
    let policy = own.lines().find(|l| l.starts_with("content-security-policy:")).expect(&own);
    assert!(policy.contains("frame-ancestors 'self'"), "{policy}");
    assert!(policy.contains("script-src 'self' 'wasm-unsafe-eval'"), "{policy}");
    let localhost =
        get_with_host(&addr, &format!("localhost:{}", addr.rsplit(':').next().unwrap()));
    assert!(localhost.starts_with("http/1.1 200"), "localhost is this probe too: {localhost}");
    common::interrupt(ui.id());
    let _ = ui.wait();
}
