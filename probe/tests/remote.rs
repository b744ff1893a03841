//! Two hosts: `ackscope server` on one, `ackscope run --remote` on the other, as separate
//! processes of the real binary. Across a real delay they are two network namespaces joined by
//! `ackscope link` (this kernel has no netem); the rest runs on loopback.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use ackscope_shared::attribution::StallClass;
use ackscope_shared::control::{ClockSync, ToClient, ToServer, CONTROL_MAGIC};
use ackscope_shared::report::{RemoteFigures, ReportOutcome, RunReport};
use ackscope_shared::wire::{self, PROTOCOL_VERSION};
use common::{ackscope, interrupt, require_root, s, temp, text};

const BIN: &str = env!("CARGO_BIN_EXE_ackscope");

/// A started process and the lines it printed first, read until `until` has been seen; the
/// rest of its output is read on a thread of its own, so that it never blocks on a full pipe.
fn start(command: Command, until: &str) -> (Guard, Vec<String>) {
    let (child, lines, mut out) = start_reading(command, until);
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (Guard(Some(child)), lines)
}

fn start_reading(
    mut command: Command,
    until: &str,
) -> (Child, Vec<String>, BufReader<ChildStdout>) {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lines.iter().any(|l: &String| l.starts_with(until)) {
        assert!(Instant::now() < deadline, "no {until:?} line: {lines:?}");
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("the process ended before printing {until:?}: {lines:?}");
        }
        lines.push(line.trim_end().to_string());
    }
    (child, lines, out)
}

/// A child process that is killed if the test ends first (a failed assertion must not leave a
/// server running, holding the test's output open).
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The word after `prefix` on the line that starts with it.
fn field(lines: &[String], prefix: &str, index: usize) -> String {
    let line = lines.iter().find(|l| l.starts_with(prefix)).unwrap();
    line.split_whitespace().nth(index).unwrap().to_string()
}

/// `ackscope server` on loopback: the process, its address and its token.
fn server(extra: &[&str]) -> (Guard, String, String) {
    let mut command = Command::new(BIN);
    command.args(["server", "--listen", "127.0.0.1:0"]).args(extra);
    let (child, lines) = start(command, "token ");
    let addr = field(&lines, "ackscope echo server on", 4);
    (child, addr, field(&lines, "token ", 1))
}

fn stop(mut guard: Guard) {
    let mut child = guard.0.take().unwrap();
    interrupt(child.id());
    let deadline = Instant::now() + Duration::from_secs(5);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "Ctrl-C did not stop pid {}", child.id());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An echo client in Python: sends `OPENING` (if any), then one 5-byte message; prints
/// "answered N bytes", or "closed: " and what the server said before closing.
const ECHO_CLIENT: &str = r#"
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(sys.argv[3].encode().replace(b"\\n", b"\n") + struct.pack(">I", 5) + b"hello")
got = b""
while True:
    try:
        chunk = s.recv(65536)
    except ConnectionResetError:
        break
    if not chunk:
        break
    got += chunk
    if len(got) >= 9 and struct.unpack(">I", got[:4])[0] == len(got) - 4:
        print("answered %d bytes" % (len(got) - 4))
        sys.exit(0)
print("closed: " + got.decode(errors="replace"))
"#;

/// `ackscope link rtt=20ms`: the process, and its client and server namespaces' paths.
fn link_20_ms() -> (Guard, String, String) {
    let mut link = Command::new(BIN);
    link.args(["link", "rtt=20ms"]);
    let (link, lines) = start(link, "server namespace");
    (link, field(&lines, "client namespace", 2), field(&lines, "server namespace", 2))
}

/// Requests a request/response run's summary counts.
fn requests_of(summary: &RunReport) -> u32 {
    summary.rr().unwrap_or_else(|| panic!("no requests in {summary:?}")).requests
}

/// The stalls per class and direction a request/response run's summary names.
fn stalls(summary: &RunReport) -> &[ackscope_shared::attribution::ClassSummary] {
    summary.stalls.as_deref().unwrap_or_else(|| panic!("no stalls in {summary:?}"))
}

/// How the summary's run matched its server's clock.
fn clock(summary: &RunReport) -> ClockSync {
    summary.clock.unwrap_or_else(|| panic!("no clock in {summary:?}"))
}

/// The remote server's side, as a summary of a run against one reports it.
fn remote(summary: &RunReport) -> &RemoteFigures {
    summary.remote.as_ref().unwrap_or_else(|| panic!("no remote in {summary:?}"))
}

/// Story 1 (1000-byte bodies) across `ackscope link rtt=20ms`, from its summary: Nagle x
/// delayed ACK named in both directions, and the path's round trip recorded as about 20 ms.
fn assert_story_1_across_the_20_ms_path(summary: &RunReport) {
    let stalls = stalls(summary);
    for direction in ["client->server", "server->client"] {
        let named = stalls
            .iter()
            .find(|c| c.class == StallClass::NagleDelayedAck && c.direction == direction);
        let named =
            named.unwrap_or_else(|| panic!("no Nagle x delayed ACK {direction}: {stalls:?}"));
        // ~40 ms of the timer and part of the path: far from the 10 ms of the path's half RTT.
        let median = named.median_ms;
        assert!((30.0..120.0).contains(&median), "{direction}: {median} ms");
    }
    let rtt = clock(summary).rtt_ns;
    assert!((19_000_000..40_000_000).contains(&rtt), "the path's round trip: {rtt} ns");
}

#[test]
#[ignore = "needs root (joining namespaces): cargo xtask test runs it as root"]
fn story_1_across_a_20_ms_path_names_the_stalls_on_both_sides() {
    require_root("joining namespaces");
    let (link, client_ns, server_ns) = link_20_ms();
    let mut server = Command::new("nsenter");
    server.arg(format!("--net={server_ns}")).args([BIN, "server", "--listen", "10.44.0.2:7000"]);
    let (server, lines) = start(server, "token ");
    let token = field(&lines, "token ", 1);
    // 1000-byte bodies fit one segment: Nagle holds each body for the peer's delayed ACK of
    // the 4-byte length before it (2048 bytes would leave a full segment first on this MTU).
    let run = Command::new("nsenter")
        .arg(format!("--net={client_ns}"))
        .args([BIN, "run", "story1", "--size", "1000", "--count", "8", "--json"])
        .args(["--remote", "10.44.0.2:7000", "--token", &token])
        .output()
        .unwrap();
    eprintln!("{}{}", text(&run.stdout), text(&run.stderr));
    // The server is not on loopback: an echo client from the other host needs the token too.
    let echo = |opening: &str| -> String {
        let output = Command::new("nsenter")
            .arg(format!("--net={client_ns}"))
            .args(["python3", "-c", ECHO_CLIENT, "10.44.0.2", "7000", opening])
            .output()
            .expect("python3 (installed by cargo xtask test's set-up)");
        text(&output.stdout)
    };
    let without = echo("");
    let wrong = echo("ACKT0000000000000000\n");
    let with = echo(&format!("ACKT{token}\n"));
    stop(server);
    stop(link);
    assert!(
        without.contains(
            "closed: ackscope: this server is not on loopback: open the connection \
         with ACKT, the token"
        ),
        "no token: {without}"
    );
    assert!(wrong.contains("closed: ackscope: wrong token"), "a wrong token: {wrong}");
    assert_eq!(with.trim(), "answered 5 bytes", "the token, then an echo message");
    assert!(run.status.success());
    let summary = common::report_of(&run);
    assert_story_1_across_the_20_ms_path(&summary);
    let clock = clock(&summary);
    let uncertainty = clock.uncertainty_ns;
    assert!(uncertainty < 1_000_000, "the offset is known within {uncertainty} ns");
    // Both namespaces read one clock: the estimate's true error is known here.
    let error = clock.offset_ns - remote(&summary).same_host_offset_ns;
    assert!(error.unsigned_abs() < 1_000_000, "estimated offset off by {error} ns");
    assert_eq!(remote(&summary).server_outcome, ReportOutcome::Completed);
}

/// `--server-netns`: a local run whose server is in another namespace crosses the real path
/// between them, both sides in one process, on one clock. Story 1 over the link's 20 ms round
/// trip: the stalls are named in both directions, and the path's round trip is measured and left
/// out of them, in the summary and in `show` of the file.
#[test]
#[ignore = "needs root (entering namespaces): cargo xtask test runs it as root"]
fn a_local_run_with_its_server_in_another_namespace_crosses_the_path_between() {
    require_root("entering namespaces");
    let (link, client_ns, server_ns) = link_20_ms();
    let file = temp("remote", "server-netns.ackscope");
    let run = Command::new("nsenter")
        .arg(format!("--net={client_ns}"))
        .args([BIN, "run", "story1", "--size", "1000", "--count", "8", "--json", "-o", s(&file)])
        .args(["--server-netns", &server_ns, "--server-ip", "10.44.0.2"])
        .output()
        .unwrap();
    eprintln!("{}{}", text(&run.stdout), text(&run.stderr));
    let show = ackscope(&["show", s(&file)]);
    stop(link);
    assert!(run.status.success());
    let summary = common::report_of(&run);
    let place =
        summary.server_netns.as_ref().unwrap_or_else(|| panic!("no server_netns in {summary:?}"));
    assert_eq!(place.name, server_ns);
    assert_eq!(place.ip, "10.44.0.2");
    // The round trip measured by TCP handshakes before the run: the link's 20 ms.
    assert_story_1_across_the_20_ms_path(&summary);
    assert_eq!(clock(&summary).offset_ns, 0, "one process, one clock");
    assert!(show.status.success());
    let shown = text(&show.stdout);
    assert!(shown.contains("Nagle"), "show names the stalls: {shown}");
    assert!(shown.contains("in another network namespace, on this run's clock"), "{shown}");
}

/// Two namespaces made with `ip netns add` and joined by a veth pair, deleted when dropped.
/// Their `lo` is left down, as `ip netns add` leaves it.
struct IpNetns {
    client: String,
    server: String,
}

impl IpNetns {
    fn create(client_ip: &str, server_ip: &str) -> IpNetns {
        let id = std::process::id();
        let made = IpNetns {
            client: format!("ackscope-test-a-{id}"),
            server: format!("ackscope-test-b-{id}"),
        };
        let ip = |args: &[&str]| {
            let status = Command::new("ip").args(args).status().expect("ip (iproute2)");
            assert!(status.success(), "ip {args:?}");
        };
        let (a, b) = (made.client.as_str(), made.server.as_str());
        ip(&["netns", "add", a]);
        ip(&["netns", "add", b]);
        ip(&["link", "add", "veth-a", "netns", a, "type", "veth", "peer", "name", "veth-b"]);
        ip(&["link", "set", "veth-b", "netns", b]);
        for (ns, dev, addr) in [(a, "veth-a", client_ip), (b, "veth-b", server_ip)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        made
    }
}

impl Drop for IpNetns {
    fn drop(&mut self) {
        for ns in [&self.client, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// As a user sets it up: the server's namespace has its `lo` down, so nothing in it can connect
/// to its own address. The run still ends (its server's accept() is woken without a connection)
/// and names the stalls.
#[test]
#[ignore = "needs root (making namespaces): cargo xtask test runs it as root"]
fn a_run_into_a_namespace_made_with_ip_netns_ends_though_its_lo_is_down() {
    require_root("making namespaces");
    let ns = IpNetns::create("10.78.0.1", "10.78.0.2");
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.client, BIN, "run", "story1", "--size", "1000"])
        .args(["--count", "4", "--json", "--server-netns", &ns.server, "--server-ip", "10.78.0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Four requests of about 90 ms: far less than this, unless the run hangs at its end.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the run did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stdout));
    let summary = common::report_of(&output);
    assert_eq!(requests_of(&summary), 4);
    let stalls = stalls(&summary);
    assert!(
        stalls.iter().any(|c| c.class == StallClass::NagleDelayedAck),
        "story 1 across the veth pair: {stalls:?}"
    );
}

/// What `--server-netns` cannot do is refused before anything runs, each saying what to do.
#[test]
fn a_server_namespace_that_is_not_there_or_cannot_serve_the_run_is_refused_clearly() {
    let refused = |args: &[&str], says: &str| {
        let output = ackscope(args);
        assert!(!output.status.success(), "{args:?} must fail");
        let said = text(&output.stderr);
        assert!(said.contains(says), "{args:?}: {said}");
        assert!(text(&output.stdout).is_empty(), "{args:?}: no summary of a run that never ran");
    };
    let missing = "ackscope-no-such-namespace";
    refused(
        &["run", "story1", "--server-netns", missing, "--server-ip", "10.9.0.2"],
        &format!("make it with `ip netns add {missing}`"),
    );
    refused(
        &["run", "story1", "--server-netns", "/nonexistent/ns/net", "--server-ip", "10.9.0.2"],
        "/proc/PID/ns/net",
    );
    refused(
        &["run", "story1", "--server-netns", missing, "--server-ip", "10.9.0.2", "--capture"],
        "--capture watches lo",
    );
    refused(&["run", "bulk", "--server-netns", missing, "--server-ip", "10.9.0.2"], "only rr runs");
    refused(&["run", "story1", "--server-netns", missing], "--server-ip");
}

#[test]
fn a_wrong_token_gets_one_clear_refusal_and_runs_past_the_limits_are_refused() {
    let (server, addr, token) = server(&[]);
    let wrong =
        ackscope(&["run", "rr", "--count", "5", "--remote", &addr, "--token", "not-the-token"]);
    assert_eq!(wrong.status.code(), Some(1));
    let said = text(&wrong.stderr);
    assert_eq!(said.matches("wrong token").count(), 1, "said once: {said}");
    assert!(said.contains("the token this `ackscope server` printed"), "{said}");
    assert!(wrong.stdout.is_empty(), "no summary of a run that never started");

    let huge = ackscope(&[
        "run", "rr", "--count", "1000000", "--size", "65536", "--remote", &addr, "--token", &token,
    ]);
    assert_eq!(huge.status.code(), Some(1));
    assert!(text(&huge.stderr).contains("a remote run moves at most"), "names the limit");

    let fine =
        ackscope(&["run", "rr", "--count", "5", "--remote", &addr, "--token", &token, "--json"]);
    assert!(fine.status.success(), "the right token runs");
    let summary = common::report_of(&fine);
    assert_eq!(requests_of(&summary), 5);
    stop(server);
}

/// `ackscope server --max-run S`: a run that asks for longer is refused up front, naming the
/// limit; one that goes on longer (a count of requests, no duration) is stopped at the limit, and
/// both files keep what was recorded and say why it ended.
#[test]
fn a_remote_run_is_held_to_the_servers_longest_run() {
    let server_file = temp("remote", "max-run-server.ackscope");
    let (server, addr, token) = server(&["--max-run", "2", "-o", s(&server_file)]);
    let long = ackscope(&["run", "rr", "--duration", "5s", "--remote", &addr, "--token", &token]);
    assert_eq!(long.status.code(), Some(1));
    let said = text(&long.stderr);
    assert!(said.contains("a remote run lasts at most 2 s on this server"), "{said}");
    assert!(said.contains("--max-run"), "names the server's option: {said}");

    // Story 1 waits about 88 ms a request (Nagle x delayed ACK): 100 requests take 8.8 s at the
    // least, so a run that ends within 6 s was stopped by the server's 2 s limit.
    let client_file = temp("remote", "max-run-client.ackscope");
    let began = Instant::now();
    let stopped = ackscope(&[
        "run",
        "story1",
        "--count",
        "100",
        "--json",
        "--remote",
        &addr,
        "--token",
        &token,
        "-o",
        s(&client_file),
    ]);
    let took = began.elapsed();
    stop(server);
    assert!(took < Duration::from_secs(6), "stopped at the limit, not after the run: {took:?}");
    assert_eq!(stopped.status.code(), Some(1), "{}", text(&stopped.stderr));
    let summary = common::report_of(&stopped);
    assert_eq!(summary.outcome, ReportOutcome::Failed);
    let error = summary.error.as_deref().unwrap_or_else(|| panic!("no error in {summary:?}"));
    assert!(error.contains("server side: stopped after 2 s"), "{error}");
    let requests = requests_of(&summary);
    assert!((5..100).contains(&requests), "what ran before the limit is kept: {requests}");
    let shown = text(&ackscope(&["show", s(&server_file)]).stdout);
    assert!(shown.contains("stopped after 2 s"), "the server's file says so too: {shown}");
    let shown = text(&ackscope(&["show", s(&client_file)]).stdout);
    assert!(shown.contains("stopped after 2 s"), "and the client's: {shown}");
}

/// One remote run at a time on a server (two would measure each other): a second probe asking
/// while a run is going gets one clear refusal, and the first run is not disturbed.
#[test]
fn a_second_remote_run_while_one_is_going_is_refused() {
    let (server, addr, token) = server(&[]);
    // About 88 ms a request (Nagle x delayed ACK on both sides): 30 of them take over 2 s.
    let first = Command::new(BIN)
        .args(["run", "story1", "--count", "30", "--json", "--remote", &addr, "--token", &token])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let second = ackscope(&["run", "rr", "--count", "5", "--remote", &addr, "--token", &token]);
    let first = first.wait_with_output().unwrap();
    stop(server);
    assert_eq!(second.status.code(), Some(1));
    let said = text(&second.stderr);
    assert!(said.contains("another remote run is going on this server"), "{said}");
    assert!(first.status.success(), "{}", text(&first.stderr));
    let summary = common::report_of(&first);
    assert_eq!(requests_of(&summary), 30, "the first run went on whole");
}

/// One framed control message, as a probe of another version would send it.
fn frame<T: serde::Serialize>(message: &T) -> Vec<u8> {
    let mut bytes = Vec::new();
    wire::write_frame(message, &mut bytes);
    bytes
}

#[test]
fn a_peer_of_another_version_is_refused_with_both_version_numbers() {
    let (server, addr, token) = server(&[]);
    let mut control = TcpStream::connect(&addr).unwrap();
    control.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = ToServer::Hello { protocol_version: 99, ackscope_version: "9.9.9".into(), token };
    control.write_all(&CONTROL_MAGIC).unwrap();
    control.write_all(&frame(&hello)).unwrap();
    let mut len = [0u8; 4];
    control.read_exact(&mut len).unwrap();
    let mut payload = vec![0u8; u32::from_le_bytes(len) as usize];
    control.read_exact(&mut payload).unwrap();
    let ToClient::Refused { reason } = wire::decode(&payload).unwrap() else {
        panic!("not refused")
    };
    assert!(reason.contains("9.9.9") && reason.contains("protocol 99"), "theirs: {reason}");
    let ours = format!("protocol {PROTOCOL_VERSION}");
    assert!(reason.contains(env!("CARGO_PKG_VERSION")) && reason.contains(&ours), "ours: {reason}");
    // And the connection is closed after it (a read that times out is not a close).
    assert_eq!(control.read(&mut [0u8; 1]).expect("closed, not silent"), 0);
    stop(server);
}

/// A host that answers with terminal commands in its refusal (a hostile or broken server): the
/// driving probe prints them as data. Without this, the reason below would clear the screen of
/// whoever ran `ackscope run --remote`.
#[test]
fn a_remote_refusal_is_printed_as_data_not_as_terminal_commands() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let host = std::thread::spawn(move || {
        let (mut control, _) = listener.accept().unwrap();
        control.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut magic = [0u8; 4];
        control.read_exact(&mut magic).unwrap();
        assert_eq!(magic, CONTROL_MAGIC, "the probe opens with the control magic");
        let reason = "bad token\x1b[2J\x1b]0;pwned\x07".to_string();
        control.write_all(&frame(&ToClient::Refused { reason })).unwrap();
    });
    let out = ackscope(&["run", "rr", "--remote", &addr.to_string(), "--token", &"t".repeat(16)]);
    host.join().unwrap();
    assert!(!out.status.success(), "a refused run fails");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("refused: bad token"), "the reason is shown: {stderr}");
    assert!(!stderr.contains('\x1b') && !stderr.contains('\x07'), "no raw escape: {stderr:?}");
    assert!(stderr.contains("\\u{1b}[2J"), "shown as an escape: {stderr}");
}

fn kill_9(guard: &mut Guard) {
    let mut child = guard.0.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_dropped_control_connection_leaves_each_side_what_it_recorded_and_how_it_ended() {
    // The client dies mid-run: the server's file says its side lost the control connection.
    let server_file = temp("remote", "server.ackscope");
    let (server, addr, token) = server(&["-o", s(&server_file)]);
    let client = Command::new(BIN)
        .args(["run", "rr", "--count", "1000000", "--nodelay", "both"])
        .args(["--remote", &addr, "--token", &token])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut client = Guard(Some(client));
    std::thread::sleep(Duration::from_millis(1500));
    kill_9(&mut client);
    std::thread::sleep(Duration::from_millis(500));
    stop(server);
    let shown = ackscope(&["show", s(&server_file)]);
    let shown = text(&shown.stdout);
    assert!(shown.contains("run 2 server"), "the remote run is in the server's file: {shown}");
    assert!(
        shown.contains("control connection from") && shown.contains("closed mid-run"),
        "{shown}"
    );
    let requests: u64 = shown
        .lines()
        .filter(|l| l.trim_start().starts_with("requests"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .max()
        .unwrap();
    assert!(requests > 100, "what the server recorded before is kept: {requests} requests");

    // The server dies mid-run: the client's file keeps both sides so far and says so.
    let client_file = temp("remote", "client.ackscope");
    let mut server = server_with_token(&token);
    let addr = listen_addr(&mut server);
    let client = Command::new(BIN)
        .args(["run", "rr", "--count", "1000000", "--nodelay", "both", "--json"])
        .args(["--remote", &addr, "--token", &token, "-o", s(&client_file)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    kill_9(&mut server);
    let ended = client.wait_with_output().unwrap();
    assert_eq!(ended.status.code(), Some(1), "{}", text(&ended.stderr));
    let summary = common::report_of(&ended);
    assert_eq!(summary.outcome, ReportOutcome::Failed);
    let error = summary.error.as_deref().unwrap_or_else(|| panic!("no error in {summary:?}"));
    assert!(error.contains("server side"), "names the side: {error}");
    assert!(requests_of(&summary) > 100);
    let events = common::exported_events(s(&client_file));
    let server_reads = events
        .iter()
        .filter(|e| e.side == ackscope_shared::Side::Server)
        .filter(|e| matches!(e.kind, ackscope_shared::EventKind::ReadDone { .. }))
        .count();
    assert!(server_reads > 100, "the server's events from before are kept: {server_reads}");
}

/// `ackscope server` on loopback with a token of our choosing, so a second one can be started
/// for the same client arguments.
fn server_with_token(token: &str) -> Guard {
    let child = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--token", token])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    Guard(Some(child))
}

fn listen_addr(server: &mut Guard) -> String {
    let mut out = BufReader::new(server.0.as_mut().unwrap().stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line.split_whitespace().nth(4).unwrap().to_string();
    // Keep reading its output elsewhere so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    addr
}

#[test]
fn a_page_starts_a_run_against_a_remote_server_and_sees_both_sides() {
    use ackscope_shared::wire::{RunOutcome, ToBrowser, ToProbe};
    use ackscope_shared::{EventKind, RrSpec, Scenario, Side};
    let (server, addr, token) = server(&[]);
    let (ui, ui_addr) = common::ui_server();
    let ui = Guard(Some(ui));
    let spec = Scenario::Rr(RrSpec { requests: 20, ..RrSpec::default() });
    let start = ToProbe::StartRemoteRun { spec, server: addr, token };
    let mut page = common::start_from_a_page(&ui_addr, &start);
    page.get_ref().set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (mut clock, mut server_reads, mut done) = (None, 0, 0);
    let outcome = loop {
        match common::next_message(&mut page) {
            ToBrowser::Events { events, .. } => {
                for event in events {
                    match event.kind {
                        EventKind::ClockSync { uncertainty_ns, .. } => clock = Some(uncertainty_ns),
                        EventKind::ReadDone { .. } if event.side == Side::Server => {
                            server_reads += 1
                        }
                        EventKind::RequestDone => done += 1,
                        _ => {}
                    }
                }
            }
            ToBrowser::RunFinished { outcome, .. } => break outcome,
            ToBrowser::Rejected { reason } => panic!("refused: {reason}"),
            _ => {}
        }
    };
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(done, 20, "the client's side of every request");
    assert!(server_reads >= 40, "the remote server's side: {server_reads} reads");
    assert!(clock.is_some(), "the page is told how the clocks were matched");
    drop(ui);
    stop(server);
}

#[test]
fn a_bulk_run_reads_on_the_remote_server_with_its_buffer_set_there() {
    let (server, addr, token) = server(&[]);
    let run = ackscope(&[
        "run",
        "bulk",
        "--bytes",
        "20000000",
        "--server-rcvbuf",
        "65536",
        "--remote",
        &addr,
        "--token",
        &token,
        "--json",
    ]);
    stop(server);
    assert!(run.status.success());
    let summary = common::report_of(&run);
    let bulk = summary.bulk().unwrap_or_else(|| panic!("not a bulk report: {summary:?}"));
    assert_eq!(bulk.bytes, 20_000_000, "the server read every byte");
    // Linux doubles what was asked: the server side's option was set on the server's host.
    let rcvbuf = bulk.server_rcvbuf_bytes.unwrap_or_else(|| panic!("{summary:?}"));
    assert!((65_536..=262_144).contains(&rcvbuf), "server rcvbuf {rcvbuf}");
    // The clocks were matched: an uncertainty_ns (a number, by its type) comes with it.
    assert!(summary.clock.is_some(), "{summary:?}");
    assert_eq!(remote(&summary).server_outcome, ReportOutcome::Completed);
}

/// Ctrl-C on a run whose remote reader pauses 10 s before each read ends within 2 s, and the
/// server is free for the next run at once: its reader stops pausing when told the run
/// stopped, instead of draining the buffers a read every 10 s.
#[test]
fn ctrl_c_ends_a_remote_slow_readers_run_and_frees_the_server() {
    let (server, addr, token) = server(&[]);
    let server_pid = server.0.as_ref().unwrap().id();
    let mut run = Command::new(BIN)
        .args(["run", "bulk", "--bytes", "104857600", "--app-buffer", "16384"])
        .args(["--read-pause-us", "10000000", "--json", "--remote", &addr, "--token", &token])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !common::pausing(server_pid) {
        assert!(Instant::now() < deadline, "the remote reader never paused");
        assert!(run.try_wait().unwrap().is_none(), "the run ended before its reader paused");
        std::thread::sleep(Duration::from_millis(20));
    }
    interrupt(run.id());
    let status = common::ends_within(&mut run, Duration::from_secs(2), "Ctrl-C in a remote pause");
    let mut err = String::new();
    run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    // The server is free again within 5 s, not after a read every 10 s of what the buffers
    // hold (megabytes, 16 KiB a read: hours).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let next = ackscope(&["run", "rr", "--count", "5", "--remote", &addr, "--token", &token]);
        if next.status.success() {
            break;
        }
        let said = text(&next.stderr);
        assert!(said.contains("another remote run is going"), "{said}");
        assert!(Instant::now() < deadline, "the server still held the stopped run: {said}");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(server);
}
