//! `ackscope watch` against programs ackscope did not write (Python's standard library, in
//! `watched/pair.py`): their waits named live, as a run's are, with the numbers the programs
//! measured themselves.
//!
//! Reading another program's packets takes CAP_NET_RAW: these tests are marked ignored, by
//! name, and `cargo xtask test` runs them as root (as CI does).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use ackscope_shared::report::RunReport;
use ackscope_shared::Side;
use common::{require_root, temp};

/// What a client of `pair.py` measured of its own requests.
#[derive(Debug, serde::Deserialize)]
struct Measured {
    requests: u32,
    p50_ms: f64,
}

use common::Reaped;

/// Runs `pair.py ROLE ARGS` as a client to completion; returns what it measured.
fn run_client(role: &str, port: u16, args: &[&str]) -> Measured {
    let out = common::pair_py()
        .arg(role)
        .args(["--port", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "pair.py {role}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A running `ackscope watch --port PORT --json`, once it said it watches.
struct Watch {
    child: Reaped,
}

impl Watch {
    fn start(port: u16, more: &[&str]) -> Watch {
        Watch::start_as(Command::new(env!("CARGO_BIN_EXE_ackscope")), port, more).0
    }

    /// `ackscope watch --port PORT --json MORE`, run by `command` (the binary, maybe behind a
    /// change of user); returns the watch and what it said on standard error before it watched.
    fn start_as(command: Command, port: u16, more: &[&str]) -> (Watch, Vec<String>) {
        let port = port.to_string();
        let args: Vec<&str> =
            ["--port", &port, "--json"].into_iter().chain(more.iter().copied()).collect();
        Watch::start_with(command, &args)
    }

    /// `ackscope watch ARGS`, run by `command`.
    fn start_with(command: Command, args: &[&str]) -> (Watch, Vec<String>) {
        let (child, before) = common::start_watch(command, args);
        (Watch { child: Reaped(child) }, before)
    }

    /// Ctrl-C, then the report it printed.
    fn stop(self) -> RunReport {
        common::report_line(&self.stop_printing())
    }

    /// Ctrl-C, then what it printed.
    fn stop_printing(mut self) -> String {
        common::stop_watch(&mut self.child.0)
    }
}

/// The stalls of `class` in `direction` the watch named: (count, median ms, fixes).
fn stalls_of(report: &RunReport, class: &str, direction: &str) -> Option<(u32, f64, Vec<String>)> {
    report
        .stalls
        .iter()
        .flatten()
        .find(|s| s.class.code() == class && s.direction == direction)
        .map(|s| (s.count, s.median_ms, s.fixes.clone()))
}

const REQUESTS: u32 = 20;

#[test]
#[ignore = "needs root (reading another program's packets): cargo xtask test runs it as root"]
fn a_standard_library_pair_writing_in_two_writes_shows_both_nagle_stalls_live() {
    require_root("watching another program's packets");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let file = temp("watch", "pair.ackscope");
    let watch = Watch::start(port, &["-o", common::s(&file)]);
    let measured = run_client("client", port, &["--requests", &REQUESTS.to_string(), "--split"]);
    let report = watch.stop();

    assert_eq!(report.scenario, "watch");
    let rr = report.rr().expect("a watch reports its exchanges as requests");
    assert_eq!(rr.requests, measured.requests, "one exchange per request the client made");
    for direction in ["client->server", "server->client"] {
        let (count, median, _) = stalls_of(&report, "nagle_delayed_ack", direction)
            .unwrap_or_else(|| panic!("no Nagle x delayed ACK stall {direction}: {report:?}"));
        // The first exchanges of a connection are acknowledged at once (quick ACKs); most of
        // the rest wait for the 40 ms delayed-ACK timer.
        assert!(count >= REQUESTS / 2, "{count} stalls {direction} of {REQUESTS} requests");
        assert!((30.0..300.0).contains(&median), "median {median} ms {direction}");
    }
    // The wire's view of an exchange and the client's own clock agree: each request waits two
    // 40 ms timers, and the client's calls add microseconds.
    let p50 = rr.p50_ms.expect("timed exchanges");
    assert!(
        (p50 - measured.p50_ms).abs() <= (measured.p50_ms * 0.2).max(5.0),
        "the watch's p50 {p50:.2} ms, the client's {:.2} ms",
        measured.p50_ms
    );
    assert!(measured.p50_ms > 60.0, "two delayed ACKs a request: {measured:?}");

    // The file reads back to the same report.
    let out = common::ackscope(&["export", common::s(&file), "--json"]);
    assert!(out.status.success());
    let export: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let from_file: RunReport =
        serde_json::from_value(export["runs"][0]["summary"].clone()).unwrap();
    assert_eq!(from_file.rr(), report.rr(), "the file's exchanges");
    assert_eq!(from_file.stalls, report.stalls, "the file's stalls");
}

/// As root the watch also sees the kernel's delayed-ACK timer fire on the watched sockets
/// (an eBPF program): the timer that sent each held ACK is named, for most of the stalls, and
/// the session's header says the timer was watched. It also sees where the programs' calls
/// slept (eBPF programs on the socket calls' return and the scheduler's switch): the receiving
/// program's recv() sleeping until the held bytes came is named for most of the stalls.
#[test]
#[ignore = "needs root (an eBPF program on the kernel's timers): cargo xtask test runs it as root"]
fn as_root_the_kernels_delayed_ack_timer_and_the_programs_sleeping_recv_are_seen() {
    require_root("an eBPF program on the kernel's timers");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let ackscope = Command::new(env!("CARGO_BIN_EXE_ackscope"));
    let (watch, _) = Watch::start_with(ackscope, &["--port", &port.to_string()]);
    let measured = run_client("client", port, &["--requests", &REQUESTS.to_string(), "--split"]);
    let summary = watch.stop_printing();
    assert!(summary.contains(&format!("exchanges      {} in", measured.requests)), "{summary}");
    let line = summary
        .lines()
        .find(|l| l.trim_start().starts_with("kernel "))
        .unwrap_or_else(|| panic!("a line for the kernel's timer: {summary}"));
    let numbers: Vec<u32> =
        line.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect();
    let [sent, confirmed, 1, slept, in_recv] = numbers[..] else {
        panic!("the timer's two counts, then the calls' (slept 1 ms or more): {line}")
    };
    // Two held ACKs a request (one each way) once the connection left its quick ACKs.
    assert!(sent >= REQUESTS, "{sent} ACKs sent by the timer for {REQUESTS} requests: {line}");
    assert!(confirmed >= REQUESTS, "{confirmed} stalls' ACKs seen sent by it: {line}");
    let stalls: u32 = summary
        .lines()
        .filter(|l| l.contains("Nagle x delayed ACK"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u32>().ok())
        .sum();
    assert!(confirmed <= stalls, "{confirmed} confirmed of {stalls} stalls: {summary}");
    // Each held request and answer keeps its reader's recv() asleep some 40 ms.
    assert!(slept >= REQUESTS, "{slept} calls slept for {REQUESTS} requests: {line}");
    assert!(in_recv >= REQUESTS, "{in_recv} stalls' reads seen sleeping: {line}");
    assert!(in_recv <= stalls, "{in_recv} of {stalls} stalls: {summary}");
    assert!(summary.contains("where the watched programs' calls slept (eBPF)"), "{summary}");
}

/// `--try nodelay=both` on a pair ackscope did not write, writing its messages in two writes
/// with Nagle on: once the option is on both sockets (within a sample or two of the
/// connection's first packets), the client's own clock sees no 40 ms wait, and each change is
/// said as it is made and put back at the end.
#[test]
#[ignore = "needs root (pidfd_getfd on another program's socket): cargo xtask test runs it as root"]
fn try_nodelay_on_both_sides_removes_the_pairs_stalls_and_names_each_change() {
    require_root("changing another program's socket");
    let (server, port) = common::start_pair_server("server", &["--split"]);
    let ackscope = Command::new(env!("CARGO_BIN_EXE_ackscope"));
    let port_text = port.to_string();
    let (watch, _) = Watch::start_with(ackscope, &["--port", &port_text, "--try", "nodelay=both"]);
    let measured = run_client("client", port, &["--requests", &REQUESTS.to_string(), "--split"]);
    let summary = watch.stop_printing();
    // Without the option each request waits for two delayed ACKs (about 88 ms, the test
    // above); with it on, most take microseconds.
    assert!(measured.p50_ms < 1.0, "the client's p50 with TCP_NODELAY tried: {measured:?}");
    let server_pid = server.0.id();
    // The summary: the programs as they were, then with the option, each side's change named.
    let before = summary.find("run 1, before the options were tried").expect(&summary);
    let after = summary.find("run 2, with the options tried").expect(&summary);
    assert!(before < after, "{summary}");
    let tried = |side: &str| format!("tried          TCP_NODELAY on the {side}: off -> on");
    assert!(summary[after..].contains(&tried("client")), "{summary}");
    let server_line = format!(
        "{}{}",
        tried("server"),
        format_args!(" (applied to the running process {server_pid}, python3)")
    );
    assert!(summary[after..].contains(&server_line), "{summary}");
    // The client exited: its socket, and the server's end once it read the FIN, are closed,
    // with nothing left to put back; a socket still open is put back (the commands' tests
    // show the option off again on the program's own socket after the watch).
    let restores: Vec<&str> = summary.lines().filter(|l| l.contains("put back")).collect();
    assert!(restores.len() <= 2, "{summary}");
}

/// `--try nodelay=server` on a keep-alive pair writing in two writes, Nagle on: the session
/// splits where the option went into force; the run after it has the client's stalls (its
/// socket was left alone) and none of the server's, and says what was changed on which
/// process; the run before is kept beside it.
#[test]
#[ignore = "needs root (pidfd_getfd on another program's socket): cargo xtask test runs it as root"]
fn try_nodelay_on_the_server_splits_the_session_and_removes_only_the_servers_stalls() {
    require_root("changing another program's socket");
    let (server, port) = common::start_pair_server("server", &["--split"]);
    let file = temp("watch", "tried.ackscope");
    let watch = Watch::start(port, &["--try", "nodelay=server", "-o", common::s(&file)]);
    let requests = (2 * REQUESTS).to_string();
    let measured = run_client("client", port, &["--requests", &requests, "--split"]);
    let report = watch.stop();

    let tried = match &report.tried[..] {
        [tried] => tried,
        other => panic!("one change, on the server's process: {other:?}"),
    };
    assert_eq!((tried.side, tried.pid), (Side::Server, server.0.id()), "{tried:?}");
    assert_eq!((tried.sockets, tried.already_on), (1, 0), "{tried:?}");
    assert_eq!(tried.command, "python3");
    let before = report.before.as_deref().expect("the run before the option is kept");
    assert!(before.tried.is_empty(), "the programs as they were: {before:?}");
    let counted = |r: &RunReport| r.rr().map_or(0, |rr| rr.requests);
    // The exchange under way at the split may be cut in two, one part in each run.
    let counted = counted(before) + counted(&report);
    assert!(counted.abs_diff(measured.requests) <= 1, "{counted} of {measured:?}");
    // The client's socket kept Nagle: its small writes still wait for the server's timer.
    let (count, median, _) = stalls_of(&report, "nagle_delayed_ack", "client->server")
        .unwrap_or_else(|| panic!("the client's stalls remain: {report:?}"));
    assert!(count >= REQUESTS / 2, "{count} client->server stalls after the change");
    assert!((30.0..300.0).contains(&median), "median {median} ms");
    assert_eq!(stalls_of(&report, "nagle_delayed_ack", "server->client"), None, "{report:?}");

    // The file holds both runs, the second with its record, and `show` names the change.
    let out = common::ackscope(&["show", common::s(&file)]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    let line = format!(
        "tried          TCP_NODELAY on the server: off -> on (applied to the running process {}, \
         python3)",
        server.0.id()
    );
    assert!(shown.contains(&line), "{shown}");
    assert!(shown.contains("run 1 ") && shown.contains("run 2 "), "{shown}");
}

/// `--try-after 1s`: one command watches the programs as they are, then tries the fix on them:
/// run 1 has the Nagle x delayed ACK stalls of both directions, run 2 (TCP_NODELAY on both
/// sides) none but an exchange cut by the change, and the client's own clock sees both.
#[test]
#[ignore = "needs root (pidfd_getfd on another program's socket): cargo xtask test runs it as root"]
fn try_after_a_baseline_shows_the_stalls_before_and_their_absence_after() {
    require_root("changing another program's socket");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let watch = Watch::start(port, &["--try", "nodelay=both", "--try-after", "1500ms"]);
    // About 88 ms a request without the option: 40 requests outlast the baseline.
    let measured = run_client("client", port, &["--requests", "40", "--split"]);
    let after = watch.stop();
    let before = after.before.as_deref().expect("run 1, the programs as they were");
    for direction in ["client->server", "server->client"] {
        let (count, median, _) = stalls_of(before, "nagle_delayed_ack", direction)
            .unwrap_or_else(|| panic!("run 1 has the stalls {direction}: {before:?}"));
        assert!(count >= 5, "{count} stalls {direction} in the 1.5 s before the change");
        assert!((30.0..300.0).contains(&median), "median {median} ms {direction}");
        let left = stalls_of(&after, "nagle_delayed_ack", direction).map_or(0, |s| s.0);
        assert!(left <= 1, "{left} stalls {direction} with TCP_NODELAY on both sides: {after:?}");
    }
    assert_eq!(after.tried.len(), 2, "the client's process and the server's: {:?}", after.tried);
    let counted = |r: &RunReport| r.rr().map_or(0, |rr| rr.requests);
    let counted = counted(before) + counted(&after);
    assert!(counted.abs_diff(measured.requests) <= 1, "{counted} of {measured:?}");
}

/// A program whose socket had an option tried closes it as it would have: the watch keeps no
/// copy of the socket (a copy would keep it open, no FIN would leave, and the peer would wait
/// for ever), so the connection is gone from the kernel's table while the watch goes on.
#[test]
#[ignore = "needs root (pidfd_getfd on another program's socket): cargo xtask test runs it as root"]
fn a_connection_whose_option_was_tried_still_closes_when_its_program_closes_it() {
    require_root("changing another program's socket");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let watch = Watch::start(port, &["--try", "nodelay=both"]);
    let measured = run_client("client", port, &["--requests", &REQUESTS.to_string(), "--split"]);
    assert!(measured.p50_ms < 5.0, "the option was applied: {measured:?}");
    // The client exited: both ends must leave ESTABLISHED (the client's FIN went out, the
    // server's thread read it and closed its end) within a few round trips.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut open = established_on(port);
    while open > 0 && Instant::now() < deadline {
        std::thread::park_timeout(Duration::from_millis(20));
        open = established_on(port);
    }
    assert_eq!(open, 0, "sockets still established on port {port} after the client exited");
    let report = watch.stop();
    assert_eq!(report.tried.len(), 2, "the client's and the server's: {:?}", report.tried);
}

/// The kernel's established IPv4 TCP sockets with `port` at either end (/proc/net/tcp).
fn established_on(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of = |address: &str| {
        address.rsplit(':').next().and_then(|hex| u16::from_str_radix(hex, 16).ok())
    };
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[3] == "01"
                && (port_of(fields[1]) == Some(port) || port_of(fields[2]) == Some(port))
        })
        .count()
}

#[test]
#[ignore = "needs root (reading another program's packets): cargo xtask test runs it as root"]
fn a_pair_that_sets_tcp_nodelay_shows_no_nagle_stall() {
    require_root("watching another program's packets");
    let (_server, port) = common::start_pair_server("server", &["--split", "--nodelay"]);
    let watch = Watch::start(port, &[]);
    let args = ["--requests", &REQUESTS.to_string(), "--split", "--nodelay"];
    let measured = run_client("client", port, &args);
    let report = watch.stop();
    assert_eq!(report.rr().map(|rr| rr.requests), Some(measured.requests));
    let nagle: Vec<_> =
        report.stalls.iter().flatten().filter(|s| s.class.code() == "nagle_delayed_ack").collect();
    assert!(nagle.is_empty(), "TCP_NODELAY on both sides: {nagle:?}");
    assert!(measured.p50_ms < 20.0, "no 40 ms timer: {measured:?}");
}

#[test]
#[ignore = "needs root (reading another program's packets): cargo xtask test runs it as root"]
fn a_client_reconnecting_every_request_shows_no_nagle_stall() {
    require_root("watching another program's packets");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let watch = Watch::start(port, &[]);
    let args = ["--requests", &REQUESTS.to_string(), "--split", "--reconnect"];
    let measured = run_client("client", port, &args);
    let report = watch.stop();
    // A new connection acknowledges its first segments at once: nothing waits for a timer.
    assert_eq!(report.rr().map(|rr| rr.requests), Some(measured.requests));
    let nagle: Vec<_> =
        report.stalls.iter().flatten().filter(|s| s.class.code() == "nagle_delayed_ack").collect();
    assert!(nagle.is_empty(), "fresh connections quick-ACK: {nagle:?}");
}

#[test]
#[ignore = "needs root (reading another program's packets): cargo xtask test runs it as root"]
fn a_keep_alive_http_server_writing_headers_then_body_is_named_with_its_fix() {
    require_root("watching another program's packets");
    let (_server, port) = common::start_pair_server("http-server", &[]);
    let watch = Watch::start(port, &[]);
    let measured = run_client("http-client", port, &["--requests", &REQUESTS.to_string()]);
    let report = watch.stop();
    assert_eq!(report.rr().map(|rr| rr.requests), Some(measured.requests));
    let (count, median, fixes) = stalls_of(&report, "nagle_delayed_ack", "server->client")
        .unwrap_or_else(|| panic!("the server's stall is not named: {report:?}"));
    assert!(count >= REQUESTS / 2, "{count} of {REQUESTS}");
    assert!((30.0..300.0).contains(&median), "median {median} ms");
    assert!(
        fixes.iter().any(|f| f.contains("TCP_NODELAY on the server")),
        "the fix is the server's: {fixes:?}"
    );
}

/// With CAP_NET_RAW alone (what `setcap cap_net_raw+ep` gives): packets, so exchanges and
/// stalls, but not the kernel's delayed-ACK timer, which the session's evidence says needs root.
#[test]
#[ignore = "needs root (switching to an unprivileged uid): cargo xtask test runs it as root"]
fn with_cap_net_raw_alone_the_watch_reads_packets_and_names_what_the_timer_needs() {
    require_root("switching to an unprivileged uid");
    let (with_net_raw, _dir) =
        common::as_nobody(&["--inh-caps=+net_raw", "--ambient-caps=+net_raw"]);

    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let (watch, _) = Watch::start_as(with_net_raw, port, &[]);
    let measured = run_client("client", port, &["--requests", "5", "--split"]);
    let report = watch.stop();
    assert_eq!(report.rr().map(|rr| rr.requests), Some(measured.requests), "{report:?}");
    let spec = report.spec().expect("a watch's spec");
    let ackscope_shared::Scenario::Watch(spec) = spec else { panic!("{spec:?}") };
    assert!(
        spec.evidence.starts_with("packets and TCP_INFO; not the kernel's delayed-ACK timer")
            && spec.evidence.contains("CAP_BPF"),
        "{spec:?}"
    );
}

#[test]
#[ignore = "needs root (switching to an unprivileged uid): cargo xtask test runs it as root"]
fn without_privileges_the_watch_records_tcp_info_and_names_what_it_lacks() {
    require_root("switching to an unprivileged uid");
    let (as_nobody, _dir) = common::as_nobody(&[]);

    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let (watch, said) = Watch::start_as(as_nobody, port, &[]);
    let measured = run_client("client", port, &["--requests", "10", "--split"]);
    assert_eq!(measured.requests, 10);
    let report = watch.stop();

    let said = said.join("\n");
    assert!(
        said.contains("TCP_INFO only") && said.contains("CAP_NET_RAW") && said.contains("setcap"),
        "one line names the capability that would add packets: {said}"
    );
    assert_eq!(report.scenario, "watch");
    // No packets: no exchanges claimed, and no capture; the sockets' TCP_INFO was recorded.
    assert_eq!(report.rr(), None, "{report:?}");
    assert!(report.capture.is_none(), "{report:?}");
    assert!(report.events > 0, "TCP_INFO samples of the pair's sockets: {report:?}");
    // The exchanges bounded from the sockets' counters: 10 requests and 10 answers, each a
    // length and a body (104 bytes) in two segments. Sampled every 100 ms, the watch may miss
    // what a side sent before its connection's first sample and after its last (about a
    // request at each end, at 88 ms a request), so at least 16 of the 20 data segments each
    // side sent are seen: at least the 10 exchanges, at most the 20 segments.
    let estimated = report.estimated.as_ref().expect("an estimate from the counters");
    assert!((10..=20).contains(&estimated.exchanges_at_most), "{estimated:?}");
    assert_eq!(estimated.connections, 1, "{estimated:?}");
    for bytes in [estimated.bytes_to_server, estimated.bytes_to_client] {
        assert!((520..=1040).contains(&bytes), "{estimated:?}");
    }
    let spec = report.spec().expect("a watch's spec");
    let ackscope_shared::Scenario::Watch(spec) = spec else { panic!("{spec:?}") };
    assert!(spec.evidence.starts_with("TCP_INFO only"), "{spec:?}");
}

#[test]
fn a_port_nothing_listens_on_gets_a_clear_line_and_the_watch_goes_on() {
    // A port the kernel just gave out and took back: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (watch, said) = Watch::start_as(Command::new(env!("CARGO_BIN_EXE_ackscope")), port, &[]);
    let said = said.join("\n");
    assert!(said.contains(&format!("nothing on this host listens on port {port}")), "{said}");
    // Still watching: Ctrl-C ends it with a report of nothing seen.
    let report = watch.stop();
    assert_eq!(report.scenario, "watch");
    assert_eq!(report.rr(), None, "no exchange claimed: {report:?}");
}

#[test]
#[ignore = "needs root (reading another program's packets): cargo xtask test runs it as root"]
fn a_process_is_watched_by_its_pid_and_its_connections_name_their_processes() {
    require_root("watching another program's packets");
    let (server, port) = common::start_pair_server("server", &["--split"]);
    let pid = server.0.id().to_string();
    let ackscope = Command::new(env!("CARGO_BIN_EXE_ackscope"));
    let (watch, said) = Watch::start_with(ackscope, &["--pid", &pid]);
    let said = said.join("\n");
    assert!(said.contains(&format!("process {pid} (python3) uses port {port}")), "{said}");
    let measured = run_client("client", port, &["--requests", "5", "--split"]);
    let summary = watch.stop_printing();
    assert!(summary.contains(&format!("exchanges      {} in", measured.requests)), "{summary}");
    // The server's side is named with its process; the client, gone by now, may not be.
    assert!(summary.contains(&format!("server 127.0.0.1:{port} (pid {pid} python3)")), "{summary}");
}

#[test]
fn a_pid_without_tcp_sockets_is_refused_with_what_to_do() {
    // A process with no socket at all (not this test's, whose other threads may open some).
    let sleeper = Reaped(Command::new("sleep").arg("60").spawn().unwrap());
    let out = common::ackscope(&["watch", "--pid", &sleeper.0.id().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = common::text(&out.stderr);
    assert!(stderr.contains("no TCP socket") && stderr.contains("port by number"), "{stderr}");
}

/// Each request's time, as a client of `pair.py` measured it.
#[derive(Debug, serde::Deserialize)]
struct EachRequest {
    ms: Vec<f64>,
}

/// `pair.py client ARGS` to port `port`: each request's time, in milliseconds.
fn each_request(port: u16, args: &[&str]) -> Vec<f64> {
    let out = common::pair_py()
        .args(["client", "--port", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "pair.py client: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<EachRequest>(&out.stdout).unwrap().ms
}

/// A connection of this process's to `port`: whether its socket has TCP_NODELAY on as soon as
/// connect() returns (a program that changes new connections did it from their first byte).
fn connects_with_nodelay(port: u16) -> (std::net::TcpStream, bool) {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let on = stream.nodelay().unwrap();
    (stream, on)
}

/// Waits until new connections to `port` get TCP_NODELAY from their first byte (a watch's
/// first step attaches the program that does); returns the connection that showed it.
fn until_new_connections_get_nodelay(port: u16) -> std::net::TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (stream, on) = connects_with_nodelay(port);
        if on {
            return stream;
        }
        assert!(Instant::now() < deadline, "new connections to {port} never got TCP_NODELAY");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

/// The requests slower than a delayed-ACK stall could be missed by: a stall waits for the
/// 40 ms timer, a request without one takes well under a millisecond (Python's calls
/// included), so 20 ms leaves room for a busy host either way.
fn stalled(times: &[f64]) -> usize {
    times.iter().filter(|&&ms| ms > 20.0).count()
}

/// A client that reconnects every 5 requests, both sides writing in two writes with Nagle on:
/// unwatched, every request after a connection's first waits for a delayed ACK (the first is
/// quick-ACKed); with `--try nodelay=both` as root, each new connection has the option from its
/// first byte (a cgroup sock_ops program), so none waits, and the session's record counts every
/// socket, under the client's process and the server's, none on before.
#[test]
#[ignore = "needs root (a cgroup sock_ops program): cargo xtask test runs it as root"]
fn a_client_reconnecting_every_few_requests_gets_nodelay_from_each_connections_first_byte() {
    require_root("a cgroup sock_ops program");
    let (server, port) = common::start_pair_server("server", &["--split"]);
    let args = ["--requests", "40", "--split", "--reconnect-every", "5"];
    let unwatched = each_request(port, &args);
    assert!(stalled(&unwatched) >= 20, "without --try the client stalls: {unwatched:?}");

    let watch = Watch::start(port, &["--try", "nodelay=both"]);
    drop(until_new_connections_get_nodelay(port));
    let tried = each_request(port, &args);
    let report = watch.stop();
    assert_eq!(stalled(&tried), 0, "with TCP_NODELAY from the first byte: {tried:?}");
    // The client's process, not this test's (whose own connections waited for the program
    // above). Its command may read "?": a client that ends within a step or two of its last
    // connection is gone before the watch reads its name.
    let client =
        report.tried.iter().find(|t| t.side == Side::Client && t.pid != std::process::id());
    let client = client.unwrap_or_else(|| panic!("the client's process: {:?}", report.tried));
    assert_eq!((client.sockets, client.already_on), (8, 0), "one socket a connection: {client:?}");
    let server_entry = report.tried.iter().find(|t| t.side == Side::Server);
    let server_entry = server_entry.unwrap_or_else(|| panic!("the server's: {:?}", report.tried));
    assert_eq!(server_entry.pid, server.0.id(), "{server_entry:?}");
    // The 8 connections' and the probes' (the test's own connections that waited for the
    // program), each off before.
    assert!(server_entry.sockets >= 8 && server_entry.already_on == 0, "{server_entry:?}");
}

/// The program goes with the watch: after Ctrl-C, a connection made during the watch and still
/// open has TCP_NODELAY off again (the program's change, put back through a copy of the
/// socket), and a new connection gets nothing.
#[test]
#[ignore = "needs root (a cgroup sock_ops program): cargo xtask test runs it as root"]
fn after_the_watch_new_connections_get_no_option_and_open_ones_are_put_back() {
    require_root("a cgroup sock_ops program");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let watch = Watch::start(port, &["--try", "nodelay=client"]);
    let during = until_new_connections_get_nodelay(port);
    let summary = watch.stop_printing();
    assert!(!during.nodelay().unwrap(), "put back as it was when it connected: {summary}");
    let (_after, on) = connects_with_nodelay(port);
    assert!(!on, "a connection after the watch gets no option");
}

/// A SIGKILL of ackscope runs nothing of its own, but the kernel closes its descriptors, the
/// program's link among them: new connections get nothing from then on. The sockets it changed
/// keep the option until they close (docs/WATCH.md says so).
#[test]
#[ignore = "needs root (a cgroup sock_ops program): cargo xtask test runs it as root"]
fn after_a_sigkill_of_the_watch_new_connections_get_no_option() {
    require_root("a cgroup sock_ops program");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let mut watch = Watch::start(port, &["--try", "nodelay=client"]);
    let during = until_new_connections_get_nodelay(port);
    watch.child.0.kill().unwrap();
    watch.child.0.wait().unwrap();
    let (_after, on) = connects_with_nodelay(port);
    assert!(!on, "the link closed with the killed process: no option on new connections");
    assert!(during.nodelay().unwrap(), "what the program set stays until the socket closes");
}
