//! Regression tests of issue 11's defects, through the real binary: each failed on the main
//! branch before its fix.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ackscope_shared::report::RunReport;

mod common;

use common::{
    ackscope, next_message, open_page, s, send_frame, start_from_a_page, text, ui_server, Page,
};

fn temp(name: &str) -> common::Scratch {
    common::temp("hardening", name)
}

/// Defect 2: with 300 idle connections, Ctrl-C left `ackscope server` running forever (its
/// connection threads waited to hand events to the loop that was waiting to join them).
#[test]
fn ctrl_c_stops_a_server_with_300_idle_connections_within_2_s() {
    let file = temp("idle.ackscope");
    let (mut child, addr) = common::recording_server(&file);
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

/// Whoever starts `ackscope server` may stop reading its output once it has the address (a
/// script, or a test reading the first line): the server printed its next lines into a closed
/// pipe and died of it. It serves on, and records, as if the lines had been read.
#[test]
fn a_server_whose_output_nobody_reads_serves_on_and_records() {
    let file = temp("unread.ackscope");
    // A port that was free a moment ago: the server's own address line goes unread here.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["server", "--listen", &addr, "-o", s(&file)])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Closed before the server has printed anything.
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut client = loop {
        match TcpStream::connect(&addr) {
            Ok(client) => break client,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("the server never listened on {addr}: {e}"),
        }
    };
    client.write_all(&[0, 0, 0, 2, b'h', b'i']).unwrap();
    client.read_exact(&mut [0u8; 6]).unwrap();
    assert!(child.try_wait().unwrap().is_none(), "the server died of its unread output");
    drop(client);
    std::thread::sleep(Duration::from_millis(200));
    common::interrupt(child.id());
    let asked = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(asked.elapsed() < Duration::from_secs(2), "still running 2 s after Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    }
    let shown = text(&ackscope(&["show", s(&file)]).stdout);
    assert!(shown.contains("requests       1 in"), "the exchange is recorded: {shown}");
}

/// Defect 9 (second half): on a full disk `run -o` exited 1 with "File too large" and printed
/// neither its summary nor that the file was incomplete. A file-size limit stands in for the
/// full disk. A write error now ends the run within 2 s, as Ctrl-C does: a million requests
/// (over a minute here) stop soon after the first 64 KiB.
#[test]
fn a_full_disk_stops_the_run_and_keeps_the_summary_and_the_prefix_and_says_so() {
    let file = temp("full.ackscope");
    let mut command = Command::new(env!("CARGO_BIN_EXE_ackscope"));
    command.args(["run", "rr", "--count", "1000000", "--nodelay", "both", "-o", s(&file)]);
    command.arg("--json");
    limit(&mut command, libc::RLIMIT_FSIZE, 64 << 10);
    let started = Instant::now();
    let output = command.output().unwrap();
    let took = started.elapsed();
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(6), "the run stopped at the error: {took:?}");
    assert!(err.contains("incomplete") && err.contains(s(&file)), "{err}");
    let summary: RunReport = serde_json::from_slice(&output.stdout).expect(&err);
    let requests = summary.rr().unwrap_or_else(|| panic!("no requests in {summary:?}")).requests;
    assert!(requests > 0 && requests < 1_000_000, "the summary covers what ran: {summary:?}");
    let error = summary.error.as_deref().unwrap_or_default();
    assert!(error.contains("writing the session file"), "{summary:?}");
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size > 0 && size <= 64 << 10, "{size} bytes");
    let shown = ackscope(&["show", s(&file)]);
    assert!(text(&shown.stdout).contains("rr:"), "the prefix is readable");
}

/// Runs `command` with `resource` limited to `value` (setrlimit in the child): RLIMIT_FSIZE
/// makes a write past it fail with EFBIG, as one on a full disk fails with ENOSPC;
/// RLIMIT_NOFILE makes the descriptors run out.
fn limit(command: &mut Command, resource: libc::__rlimit_resource_t, value: u64) {
    // SAFETY: setrlimit in the child between fork and exec touches only the child.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
            if libc::setrlimit(resource, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The same for `ackscope server -o`: it served on with nothing recorded; now it stops within
/// 2 s of the failed write, says the file is incomplete, and the prefix reads.
#[test]
fn a_full_disk_stops_a_recording_server_and_keeps_the_prefix() {
    let file = temp("server-full.ackscope");
    // NODELAY: its answers are not held by Nagle, so 64 KiB of events come within a second.
    let args = ["--nodelay", "server", "-o", s(&file)];
    let (mut server, addr) = server_with(&args, Some((libc::RLIMIT_FSIZE, 64 << 10)));
    // An outside client's requests until the server closes the connection: each is recorded.
    let mut client = TcpStream::connect(&addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut answered = 0u32;
    let body = [7u8; 1000];
    loop {
        let mut request = 1000u32.to_be_bytes().to_vec();
        request.extend_from_slice(&body);
        let mut answer = [0u8; 1004];
        if client.write_all(&request).is_err() || client.read_exact(&mut answer).is_err() {
            break;
        }
        answered += 1;
        assert!(started.elapsed() < Duration::from_secs(30), "still serving: {answered}");
    }
    let status = server.wait().unwrap();
    let took = started.elapsed();
    let mut err = String::new();
    server.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(answered > 0, "{err}");
    assert!(took < Duration::from_secs(10), "stopped soon after the error: {took:?} {err}");
    assert!(err.contains("incomplete") && err.contains(s(&file)), "{err}");
    let shown = ackscope(&["show", s(&file)]);
    assert!(text(&shown.stdout).contains("session by ackscope"), "the prefix is readable");
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
    let (mut child, addr) = common::recording_server(&file);
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

/// Defects 5 and 6: `show` held every run of a file until its end, each with its analysis, so
/// 100,000 runs that never end (20 MB) took 680 MB. Now a run is summarized when its end is
/// read and forgotten, and at most 1000 runs still going are followed at once.
#[test]
fn show_summarizes_each_run_at_its_end_and_follows_a_bounded_number_at_once() {
    use ackscope_shared::wire::{self, Hello, HostFacts, Instruments, RunOutcome, ToBrowser};
    use ackscope_shared::{RrSpec, RunId, Scenario};

    let started = |id: u32| ToBrowser::RunStarted {
        run: RunId(id),
        spec: Scenario::Rr(RrSpec::default()),
        instruments: Instruments::default(),
    };
    let mut bytes = Vec::new();
    wire::write_frame(&ToBrowser::Hello(Hello::current("0.1.0", HostFacts::default())), &mut bytes);
    for id in 1..=3 {
        wire::write_frame(&started(id), &mut bytes);
        let finished = ToBrowser::RunFinished { run: RunId(id), outcome: RunOutcome::Completed };
        wire::write_frame(&finished, &mut bytes);
    }
    // Then 3000 runs that all start and never end.
    for id in 4..3004 {
        wire::write_frame(&started(id), &mut bytes);
    }
    let file = temp("open-runs.ackscope");
    std::fs::write(&file, bytes).unwrap();
    let shown = ackscope(&["show", s(&file)]);
    let out = text(&shown.stdout);
    let at = |needle: &str| out.find(needle).unwrap_or_else(|| panic!("{needle:?} in {out}"));
    assert!(at("run 1 rr") < at("run 2 rr") && at("run 2 rr") < at("run 3 rr"), "{out}");
    assert_eq!(out.matches("the file ends before the run did").count(), 1000, "{out}");
    assert!(at("run 1003 rr") < at("2000 more runs were started while 1000 were still going"));
    assert!(!out.contains("run 1004 rr"), "past the bound a run is counted, not summarized");
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
    let (mut ui, addr) = ui_server();

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

/// `ackscope server ARGS` on a free port, with a resource limited ([`limit`]) if asked, and its
/// address; its standard error is piped.
fn server_with(
    args: &[&str],
    limited: Option<(libc::__rlimit_resource_t, u64)>,
) -> (std::process::Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ackscope"));
    command.args(["server", "--listen", "127.0.0.1:0"]).args(args);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some((resource, value)) = limited {
        limit(&mut command, resource, value);
    }
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let addr = line.split_whitespace().find(|w| w.starts_with("127.0.0.1:")).expect(&line);
    (child, addr.to_string())
}

/// Whether the server answers one request on `stream` within 5 s.
fn answers(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if stream.write_all(&[0, 0, 0, 1, b'x']).is_err() {
        return false;
    }
    let mut answer = [0u8; 5];
    stream.read_exact(&mut answer).is_ok()
}

fn stop(child: std::process::Child) -> String {
    common::interrupt(child.id());
    let output = child.wait_with_output().unwrap();
    text(&output.stderr)
}

/// Defect 1: one thread per connection with no limit: ~370 hostile connections would take
/// 24 GB. Past `--max-connections` a connection is closed at once, and the log says why.
#[test]
fn connections_past_the_cap_are_closed_and_the_others_served() {
    let (child, addr) = server_with(&["--max-connections", "5"], None);
    let mut served: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    assert!(served.iter_mut().all(answers), "the first five are served");
    let mut extra = TcpStream::connect(&addr).unwrap();
    assert!(!answers(&mut extra), "the sixth is closed");
    assert!(answers(&mut served[0]), "and the others still are");
    drop(served);
    std::thread::sleep(Duration::from_millis(300));
    let mut later = TcpStream::connect(&addr).unwrap();
    assert!(answers(&mut later), "a place freed is served again");
    let log = stop(child);
    assert!(log.contains("--max-connections 5"), "{log}");
}

/// Defect 1: no idle timeout: a client that connects and goes quiet holds a thread for ever.
#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (child, addr) = server_with(&["--idle-timeout", "1"], None);
    let mut idle = TcpStream::connect(&addr).unwrap();
    assert!(answers(&mut idle));
    let quiet = Instant::now();
    let mut rest = Vec::new();
    let closed = idle.read_to_end(&mut rest);
    let after = quiet.elapsed();
    assert!(closed.is_ok() && rest.is_empty(), "closed by the server: {closed:?}");
    assert!(after >= Duration::from_millis(900) && after < Duration::from_secs(4), "{after:?}");
    let log = stop(child);
    assert!(log.is_empty() || !log.contains("error"), "{log}");
}

/// Defect 1: an `accept()` error (EMFILE: out of descriptors) made the accept loop spin.
#[test]
fn running_out_of_descriptors_does_not_spin_the_server() {
    let (child, addr) = server_with(&[], Some((libc::RLIMIT_NOFILE, 40)));
    // More connections than the server has descriptors for: its accepts fail with EMFILE.
    let held: Vec<TcpStream> = (0..60).filter_map(|_| TcpStream::connect(&addr).ok()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let cpu_ticks = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let before = cpu_ticks(child.id());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(child.id()) - before;
    eprintln!("{} connections held; the server used {used} ticks in 1 s", held.len());
    // A spinning accept loop uses the whole second (100 ticks); waiting, almost none.
    assert!(used < 20, "{used} ticks of CPU in 1 s");
    drop(held);
    let log = stop(child);
    // Out of descriptors at the accept or just after it: either way it waited, and said so.
    assert!(log.contains("accept failed"), "{log}");
}

/// Faults: 1,000 concurrent connections to `ackscope server` are all served, in bounded memory.
#[test]
fn a_thousand_concurrent_connections_are_served_in_bounded_memory() {
    let file = temp("thousand.ackscope");
    let (child, addr) = server_with(&["-o", s(&file)], None);
    let mut clients: Vec<TcpStream> =
        (0..1000).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let served = clients.iter_mut().map(answers).filter(|&ok| ok).count();
    let rss_kb = rss_kb(child.id());
    eprintln!("{served} of 1000 served; server RSS {} MB", rss_kb / 1024);
    assert_eq!(served, 1000);
    assert!(rss_kb < 200 * 1024, "{rss_kb} kB");
    drop(clients);
    stop(child);
    let shown = ackscope(&["show", s(&file)]);
    assert!(text(&shown.stdout).contains("requests       1000 in"), "{}", text(&shown.stdout));
}

/// A process's resident memory, in kB (`VmRSS` of /proc/PID/status).
fn rss_kb(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:").unwrap()
}

/// A `/proc/PID/status` field in KB (`VmRSS:`, `VmHWM:`); `None` once the process is gone.
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(field))?.split_whitespace().next()?.parse().ok()
}

/// A standalone server's connection kept the largest message it ever got (and its answer) for
/// as long as it stayed open: three clients that each sent 48 MiB once, then waited, held
/// about 300 MB. Past 1 MiB the buffers are given back after the answer.
#[test]
fn a_connection_gives_back_a_large_messages_memory_after_answering_it() {
    let (child, addr) = server_with(&[], None);
    let before = rss_kb(child.id());
    let len = 48u32 << 20;
    let mut clients: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    for client in &mut clients {
        client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        client.write_all(&len.to_be_bytes()).unwrap();
        client.write_all(&vec![1u8; len as usize]).unwrap();
        let mut answer = vec![0u8; 4 + len as usize];
        client.read_exact(&mut answer).unwrap();
        assert!(answers(client), "the connection is still served after it");
    }
    let after = rss_kb(child.id());
    eprintln!("server RSS {} MB before, {} MB after 3 x 48 MiB", before / 1024, after / 1024);
    assert!(after < before + 100 * 1024, "{before} kB before, {after} kB after");
    drop(clients);
    stop(child);
}

/// Defect 4: Ctrl-C on the UI server did not exit while a browser run was going, even twice.
#[test]
fn ctrl_c_ends_the_ui_server_during_a_browser_run() {
    use ackscope_shared::wire::ToProbe;
    use ackscope_shared::{BulkSpec, Scenario};
    let (mut ui, addr) = ui_server();
    // A minute-long bulk run, started as the page starts one.
    let spec = Scenario::Bulk(BulkSpec {
        bytes: 8 << 30,
        duration_ms: Some(60_000),
        ..BulkSpec::default()
    });
    let _page = start_from_a_page(&addr, &ToProbe::StartRun { spec });
    std::thread::sleep(Duration::from_millis(800));
    common::interrupt(ui.id());
    // The promise: within 2 s under any load (the server's own fallback is 1.5 s).
    let took = ends_within(&mut ui, Duration::from_secs(2));
    eprintln!("the UI server ended {took:?} after Ctrl-C, a run going");
}

/// How long `child` takes to end; fails past `limit`.
fn ends_within(child: &mut std::process::Child, limit: Duration) -> Duration {
    let asked = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(asked.elapsed() < limit, "still running {limit:?} after Ctrl-C");
        std::thread::sleep(Duration::from_millis(10));
    }
    asked.elapsed()
}

/// A second Ctrl-C ends the UI server at once. With a request still coming in, the first waits
/// for it (up to its 1.5 s fallback); the second does not.
#[test]
fn a_second_ctrl_c_ends_the_ui_server_at_once() {
    let (mut ui, addr) = ui_server();
    let mut coming = TcpStream::connect(&addr).unwrap();
    coming.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    common::interrupt(ui.id());
    std::thread::sleep(Duration::from_millis(500));
    assert!(ui.try_wait().unwrap().is_none(), "the first Ctrl-C waits for the request");
    common::interrupt(ui.id());
    // The first Ctrl-C's own fallback would end it 1 s from now.
    let took = ends_within(&mut ui, Duration::from_millis(600));
    eprintln!("the UI server ended {took:?} after the second Ctrl-C");
}

/// Defect 3: 500 idle connections grew the file by about 1 MB/s (TCP_INFO every millisecond
/// of every idle connection's wait for its next request). A wait between requests is not
/// sampled now.
#[test]
fn idle_connections_do_not_grow_the_file() {
    let file = temp("idle-growth.ackscope");
    let (child, addr) = server_with(&["-o", s(&file)], None);
    let mut idle: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    // Each has made one request, then waits: now between requests.
    assert!(idle.iter_mut().all(answers));
    std::thread::sleep(Duration::from_millis(500));
    let before = std::fs::metadata(&file).unwrap().len();
    std::thread::sleep(Duration::from_secs(2));
    let grew = std::fs::metadata(&file).unwrap().len() - before;
    eprintln!("300 idle connections: the file grew {grew} bytes in 2 s");
    // At 1 ms samples it would be over 1 MB; a few boundary samples are all that may come.
    assert!(grew < 64 << 10, "{grew} bytes in 2 s");
    drop(idle);
    stop(child);
}

/// Defect 4: browser runs had no Stop. The page's Stop ends the run after its current step; the
/// run is marked interrupted and keeps what it recorded.
#[test]
fn stop_from_a_page_ends_the_run_and_keeps_its_events() {
    use ackscope_shared::wire::{RunOutcome, ToBrowser, ToProbe};
    use ackscope_shared::{BulkSpec, Scenario};
    let (mut ui, addr) = ui_server();
    let spec = Scenario::Bulk(BulkSpec {
        bytes: 8 << 30,
        duration_ms: Some(60_000),
        ..BulkSpec::default()
    });
    let mut page = start_from_a_page(&addr, &ToProbe::StartRun { spec });
    page.get_ref().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let asked = Instant::now();
    send_frame(&mut page, &ToProbe::StopRun);
    let mut events = 0;
    let outcome = loop {
        match next_message(&mut page) {
            ToBrowser::Events { events: batch, .. } => events += batch.len(),
            ToBrowser::RunFinished { outcome, .. } => break outcome,
            _ => {}
        }
    };
    eprintln!("stopped {:?} after Stop, {events} events kept", asked.elapsed());
    assert_eq!(outcome, RunOutcome::Interrupted);
    assert!(asked.elapsed() < Duration::from_secs(5), "{:?}", asked.elapsed());
    assert!(events > 100, "what the run recorded reached the page: {events} events");
    common::interrupt(ui.id());
    let _ = ui.wait();
}

/// Defect 8: no header-read timeout: 1,000 half-open connections were held by the UI server.
/// A connection that sends no request within 5 s is closed; one that sends its request is
/// served.
#[test]
fn the_ui_closes_connections_that_send_no_request() {
    let (mut ui, addr) = ui_server();

    let opened = Instant::now();
    let mut silent: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    // Half a request: the headers never end.
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    assert!(get_with_host(&addr, &addr).starts_with("http/1.1 200"), "a real request is served");
    for stream in silent.iter_mut().chain(std::iter::once(&mut slow)) {
        stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut rest = Vec::new();
        let ended = stream.read_to_end(&mut rest);
        assert!(ended.is_ok() || rest.is_empty(), "closed by the server: {ended:?}");
    }
    let closed_after = opened.elapsed();
    eprintln!("201 connections without a request closed after {closed_after:?}");
    assert!(closed_after >= Duration::from_secs(4), "{closed_after:?}");
    assert!(closed_after < Duration::from_secs(12), "{closed_after:?}");
    common::interrupt(ui.id());
    let _ = ui.wait();
}

/// The header timeout holds for every request of a kept-alive connection, not only its first:
/// one that sends a request, then trickles the next one's headers, is closed 5 s after their
/// first byte. A WebSocket is not HTTP after its handshake: a page silent for longer is kept.
#[test]
fn a_kept_alive_connection_must_send_each_requests_headers_in_time_but_a_websocket_may_be_silent() {
    use ackscope_shared::wire::{ToBrowser, ToProbe};
    use ackscope_shared::{PerSide, RrSpec, Scenario};
    let (mut ui, addr) = ui_server();
    let mut page = common::open_page(&addr, "/ws");
    let page_opened = Instant::now();

    let mut kept = TcpStream::connect(&addr).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(kept, "GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        kept.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = text(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    kept.read_exact(&mut vec![0u8; length]).unwrap();
    // The first request was answered and the connection kept; now half of a second one.
    write!(kept, "GET / HTTP/1.1\r\nHost: {addr}\r\n").unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let ended = kept.read_to_end(&mut rest);
    let closed_after = started.elapsed();
    assert!(ended.is_ok() && rest.is_empty(), "closed with no answer: {ended:?} {rest:?}");
    assert!(closed_after >= Duration::from_secs(4), "{closed_after:?}");
    assert!(closed_after < Duration::from_secs(12), "{closed_after:?}");

    // The page has sent nothing since its handshake, longer than the header timeout.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(page_opened.elapsed()));
    let spec =
        Scenario::Rr(RrSpec { requests: 3, nodelay: PerSide::both(true), ..RrSpec::default() });
    common::send_frame(&mut page, &ToProbe::StartRun { spec });
    page.get_ref().set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    while !matches!(common::next_message(&mut page), ToBrowser::RunStarted { .. }) {}
    common::interrupt(ui.id());
    let _ = ui.wait();
}

/// Faults: `kill -9` in the middle of a run leaves a file whose prefix reads: `show` prints what
/// was written and says that the file ends before the run did.
#[test]
fn a_killed_run_leaves_a_readable_prefix() {
    let file = temp("killed.ackscope");
    let mut run = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["run", "story1", "--count", "1000", "-o", s(&file)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // About 88 ms per request: a dozen requests are in the file after a second.
    std::thread::sleep(Duration::from_millis(1200));
    run.kill().unwrap();
    run.wait().unwrap();
    let shown = ackscope(&["show", s(&file)]);
    let out = text(&shown.stdout);
    assert!(out.contains("session by ackscope"), "{out}");
    assert!(out.contains("Nagle x delayed ACK"), "the requests written are analysed: {out}");
    assert!(out.contains("the file ends before the run did"), "{out}");
}

/// A page whose socket is cut mid-run reconnects where it was: the events it had and the rest
/// the probe sends after the resume are exactly the run's, none lost, none twice.
#[test]
fn a_page_cut_off_mid_run_resumes_where_it_was_and_loses_no_event() {
    use ackscope_shared::wire::{ToBrowser, ToProbe};
    use ackscope_shared::{Event, PerSide, RrSpec, Scenario};
    let (mut ui, addr) = ui_server();
    let spec = Scenario::Rr(RrSpec {
        requests: 20_000,
        nodelay: PerSide::both(true),
        ..RrSpec::default()
    });
    let mut page = start_from_a_page(&addr, &ToProbe::StartRun { spec });
    page.get_ref().set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let stream_id = loop {
        if let ToBrowser::Stream { id, resumed } = next_message(&mut page) {
            assert!(!resumed, "a first connection starts from the beginning");
            break id;
        }
    };
    let (mut first, mut run) = (Vec::<Event>::new(), None);
    while first.len() < 3000 {
        match next_message(&mut page) {
            ToBrowser::RunStarted { run: started, .. } => run = Some(started),
            ToBrowser::Events { events, .. } => first.extend(events),
            // Live only, about this probe: no part of the run.
            ToBrowser::TryRights { .. } => {}
            other => panic!("before 3000 events: {other:?}"),
        }
    }
    drop(page);
    let run = run.expect("the run started");
    let point = ackscope_shared::wire::ResumePoint {
        stream: stream_id,
        run,
        events: first.len() as u64,
        finished: false,
    };
    let path = format!("/ws?resume={point}");
    let mut page = open_page(&addr, &path);
    page.get_ref().set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert!(matches!(next_message(&mut page), ToBrowser::Hello(_)));
    assert_eq!(next_message(&mut page), ToBrowser::Stream { id: stream_id, resumed: true });
    let rest = events_until_finished(&mut page);
    // A page that opens now gets the whole run: the truth to compare with.
    let mut fresh = open_page(&addr, "/ws");
    fresh.get_ref().set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let whole = events_until_finished(&mut fresh);
    let _ = ui.kill();
    let _ = ui.wait();
    assert!(whole.len() > first.len() + 1000, "cut mid-run: {} of {}", first.len(), whole.len());
    first.extend(rest);
    assert_eq!(first.len(), whole.len(), "no event lost or repeated");
    assert!(first == whole, "the same events in the same order");
}

/// Every event of the stream's runs until its first run ends.
fn events_until_finished(page: &mut Page) -> Vec<ackscope_shared::Event> {
    use ackscope_shared::wire::ToBrowser;
    let mut events = Vec::new();
    loop {
        match next_message(page) {
            ToBrowser::Events { events: batch, .. } => events.extend(batch),
            ToBrowser::RunFinished { .. } => return events,
            _ => {}
        }
    }
}

/// `ackscope import` read the whole capture into memory and built every event before writing
/// one: its memory grew with the file. Now it reads the capture twice, one packet at a time,
/// and writes the events as it makes them: a 130 MB capture imports in a few MB, and `show` of
/// the session follows its packets' stalls in as little.
#[test]
fn a_large_capture_imports_and_shows_in_memory_that_does_not_grow_with_it() {
    use ackscope_shared::event::tcp_flags::{ACK, PSH};
    use ackscope_shared::packet::{synthesize, Packet};
    use ackscope_shared::pcap::{linktype, PcapngWriter};
    use ackscope_shared::Segment;
    use std::net::{IpAddr, Ipv4Addr};

    let capture = temp("large.pcapng");
    // Written to the file as it is made: the test's own memory stays small, and a child's
    // peak RSS starts from its parent's at the fork.
    let mut file = std::fs::File::create(&capture).unwrap();
    let mut bytes = Vec::new();
    {
        let mut w = PcapngWriter::new(&mut bytes);
        let lo = w.interface("lo", linktype::RAW);
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        // 100,000 full segments one way and their ACKs, over 50 connections.
        for i in 0..100_000u32 {
            let conn = 40_000 + (i % 50) as u16;
            let (seq, ack) = (1 + (i / 50) * 1200, 1);
            let data = Segment { flags: PSH | ACK, seq, ack, len: 1200, ..Segment::default() };
            let back = Segment { flags: ACK, seq: ack, ack: seq + 1200, ..Segment::default() };
            let t = 1_000_000_000 + u64::from(i) * 10_000;
            let out = Packet { src: ip, dst: ip, src_port: conn, dst_port: 7, segment: data };
            let ret = Packet { src: ip, dst: ip, src_port: 7, dst_port: conn, segment: back };
            // The headers say 1200 bytes of payload; the capture holds them all (no snaplen).
            let mut full = synthesize(&out);
            full.resize(full.len() + 1200, 0);
            w.packet(lo, t, &full, None);
            w.packet(lo, t + 5_000, &synthesize(&ret), None);
            if i % 1000 == 999 {
                file.write_all(w.bytes()).unwrap();
                w.bytes().clear();
            }
        }
        file.write_all(w.bytes()).unwrap();
    }
    drop(file);
    let file_mb = std::fs::metadata(&capture).unwrap().len() >> 20;
    assert!(file_mb >= 120, "the capture is {file_mb} MB");

    let session = temp("large.ackscope");
    // The child's own high-water mark (VmHWM, which starts afresh at exec; a fork's rusage
    // would count the test process's memory too), read until it exits.
    let peak_mb = |args: &[&str]| -> (u64, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).unwrap();
            text
        });
        let mut peak_kb = 0;
        while child.try_wait().unwrap().is_none() {
            peak_kb = peak_kb.max(status_kb(child.id(), "VmHWM:").unwrap_or(0));
            std::thread::sleep(Duration::from_millis(5));
        }
        let stdout = reader.join().unwrap();
        assert!(child.wait().unwrap().success(), "ackscope {args:?} failed: {stdout}");
        assert!(peak_kb > 0, "read the peak of ackscope {args:?}");
        (peak_kb / 1024, stdout)
    };
    let (import_mb, said) = peak_mb(&["import", s(&capture), "-o", s(&session)]);
    assert!(said.contains("imported 200000 of 200000 packets"), "{said}");
    assert!(said.contains("wrote 200000 segments"), "{said}");
    let (show_mb, shown) = peak_mb(&["show", s(&session)]);
    assert!(shown.contains("conn 50:"), "every connection shown: {shown}");
    eprintln!("capture {file_mb} MB: import peak {import_mb} MB, show peak {show_mb} MB");
    // Before, the import held the file and every event: more than the file's size.
    assert!(import_mb < 40, "import peaked at {import_mb} MB for a {file_mb} MB capture");
    assert!(show_mb < 40, "show peaked at {show_mb} MB");
    let _ = std::fs::remove_file(&capture);
    let _ = std::fs::remove_file(&session);
}
