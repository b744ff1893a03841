//! `cargo xtask bench`: measurements that print ratios against a peer measured in the same run.
//!
//! One file, though long: `rr` and `memory` share their rounds, their peers' set-up and their
//! report; the other benchmarks have files of their own.
//!
//! - `rr`: ackscope's request/response loop against sockperf's TCP ping-pong on loopback, and
//!   ackscope with its recording on against off. Rounds alternate the programs so that a machine
//!   that speeds up or slows down during the run affects all of them alike.
//! - `memory`: a 1,000,000-request run's peak RSS and session-file size; then `show` and
//!   `export --json` of it, of a 1,000,000-request reconnect-every-1 session and of a crafted
//!   session for each bound the readers keep (`ackscope_shared::crafted`), each crafted one
//!   about as many events as the keep-alive recording: each one's peak RSS and CPU per event
//!   (user and system CPU under `/usr/bin/time`, as `wait4` reports it to the microsecond, the
//!   least of three runs, over the session's events). `memory --hostile`: the UI server's and
//!   the control port's RSS with peers that never read (`bench_hostile`).
//!
//! These are measurements, not tests: a missed target is printed, and the exit code stays 0.
//! What they measure and the figures of one machine: docs/BENCHMARKS.md.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ackscope_shared::crafted::Crafted;
use ackscope_shared::report::RunReport;

use crate::steps::Steps;
use crate::{
    bench_capture, bench_hostile, bench_link, bench_remote, bench_setup, bench_viewer, bench_watch,
    cli, json, setup,
};

const USAGE: &str = "usage: cargo xtask bench rr [--rounds N] [--seconds S] [--pin CPU]\n       \
                     cargo xtask bench memory [--count N] [--hostile]";

/// The request and answer body of every rr benchmark run, in bytes.
const SIZE_BYTES: u32 = 2048;
/// ackscope accepts at most this many requests per run.
const MAX_COUNT: u32 = 1_000_000;

const RR_TARGET: f64 = 0.9;
const RECORDING_TARGET: f64 = 0.9;
const PEAK_RSS_TARGET_MB: f64 = 200.0;
/// `show` and `export --json` of the run's file (issue 11).
const READ_BACK_TARGET_MB: f64 = 200.0;
const FILE_BYTES_PER_EVENT_TARGET: f64 = 24.0;

/// `bench NAME FLAGS...`: the benchmark `NAME` (this module's or another's).
pub fn run(args: &[String]) -> Result<(), String> {
    let Some((which, rest)) = args.split_first() else {
        return Err(format!("which benchmark?\n{}", all_usage()));
    };
    match which.as_str() {
        "rr" => rr_options(rest).and_then(|(rounds, seconds, pin)| rr(rounds, seconds, pin)),
        "memory" => memory_options(rest).and_then(|memory_bench| match memory_bench {
            MemoryBench::Run(count) => memory(count),
            MemoryBench::Hostile(count) => bench_hostile::run(count),
        }),
        "link" => bench_link::run(rest),
        "capture" => bench_capture::run(rest),
        "remote" => bench_remote::run(rest),
        "setup" => bench_setup::run(rest),
        "viewer" => bench_viewer::run(rest),
        "watch" => bench_watch::run(rest),
        other => Err(format!("unknown benchmark `{other}`\n{}", all_usage())),
    }
}

/// Every benchmark's usage, one a line.
fn all_usage() -> String {
    let every = [
        USAGE,
        bench_link::USAGE,
        bench_capture::USAGE,
        bench_remote::USAGE,
        bench_setup::USAGE,
        bench_viewer::USAGE,
        bench_watch::USAGE,
    ];
    let lines: Vec<&str> =
        every.iter().map(|usage| usage.strip_prefix("usage: ").unwrap_or(usage)).collect();
    format!("usage: {}", lines.join("\n       "))
}

/// `bench rr`'s flags: (rounds, seconds, CPU to pin to).
fn rr_options(args: &[String]) -> Result<(u32, u32, u32), String> {
    let (mut rounds, mut seconds, mut pin) = (5, 3, 0);
    let flags = &mut [("--rounds", &mut rounds), ("--seconds", &mut seconds), ("--pin", &mut pin)];
    cli::numbers(args, USAGE, flags)?;
    if rounds == 0 || seconds == 0 {
        return Err(format!("--rounds and --seconds must be at least 1\n{USAGE}"));
    }
    Ok((rounds, seconds, pin))
}

/// Which `bench memory`, with its run's request count.
#[derive(Debug, PartialEq)]
enum MemoryBench {
    /// A recording's peak RSS and file size, then its readers'.
    Run(u32),
    /// `--hostile`: the servers' RSS with peers that never read (see `bench_hostile`).
    Hostile(u32),
}

/// `bench memory`'s flags: the request count and `--hostile`. A hostile run is started from a
/// page, so it makes at most the requests a page may ask for, and 100,000 unless told.
fn memory_options(args: &[String]) -> Result<MemoryBench, String> {
    let mut flags = cli::Flags::new(args, USAGE);
    let (mut count, mut hostile) = (None, false);
    while let Some(flag) = flags.next()? {
        match flag.as_str() {
            "--count" => count = Some(flags.number::<u32>(&flag)?),
            "--hostile" => hostile = true,
            _ => return Err(flags.unknown(&flag)),
        }
    }
    let most = if hostile { bench_hostile::MAX_COUNT } else { MAX_COUNT };
    let count = count.unwrap_or(most);
    if !(1..=most).contains(&count) {
        let which = if hostile { " with --hostile (a run started from a page)" } else { "" };
        return Err(flags.error(&format!("--count must be 1 to {most}{which}")));
    }
    Ok(if hostile { MemoryBench::Hostile(count) } else { MemoryBench::Run(count) })
}

/// `program`, under `taskset -c CPU` when pinned to a CPU.
pub(crate) fn command(program: impl AsRef<OsStr>, pin: Option<u32>) -> Command {
    match pin {
        Some(cpu) => {
            let mut command = setup::tool_command("taskset");
            command.arg("-c").arg(cpu.to_string()).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Install what is missing (with the Debian `packages` a benchmark runs beside ackscope) and
/// build the release probe; `more` steps follow.
pub(crate) fn prepare(more: usize, packages: &[&str]) -> Result<Steps, String> {
    let mut steps = Steps::new(6 + more);
    setup::ensure_build_tools(&mut steps)?;
    steps.start(&format!("Debian packages: {}", packages.join(", ")));
    setup::ensure_apt_packages(&mut steps, packages)?;
    crate::build_web(&mut steps)?;
    crate::build_probe(&mut steps)?;
    Ok(steps)
}

/// Where the programs of a round run.
#[derive(Clone, Copy, PartialEq)]
enum Placement {
    /// Every program on this one CPU: throughput measures CPU time per transaction, what a
    /// busy server pays. The headline.
    Pinned(u32),
    /// Wherever the scheduler puts them: mostly the time to wake an idle vCPU (see
    /// docs/BENCHMARKS.md).
    Unpinned,
}

impl Placement {
    fn cpu(self) -> Option<u32> {
        match self {
            Placement::Pinned(cpu) => Some(cpu),
            Placement::Unpinned => None,
        }
    }

    fn describe(self) -> String {
        match self {
            Placement::Pinned(cpu) => format!("pinned: every program on CPU {cpu}"),
            Placement::Unpinned => "not pinned".to_string(),
        }
    }
}

/// One round's transactions (a request and its answer) per second, by program.
#[derive(Clone, Copy, Default)]
struct Round {
    sockperf_tps: f64,
    sockperf_half_rtt_us: f64,
    /// ackscope's `clients.rps`, recording on and off: requests its client threads answered
    /// over the time from starting them to joining them, the same window in both.
    on_tps: f64,
    off_tps: f64,
}

#[derive(Clone, Copy)]
enum Program {
    Sockperf,
    RecordingOn,
    RecordingOff,
}

/// The medians of one placement's rounds.
struct Medians {
    sockperf_tps: f64,
    on_tps: f64,
    off_tps: f64,
}

fn rr(rounds: u32, seconds: u32, pin: u32) -> Result<(), String> {
    let placements = [Placement::Pinned(pin), Placement::Unpinned];
    let mut steps = prepare(2 * (2 + rounds as usize), &["sockperf"])?;
    let ticks_before = cpu_ticks();
    let mut medians = Vec::new();
    for placement in placements {
        let results = rr_rounds(&mut steps, placement, rounds, seconds)?;
        print_rounds(placement, &results);
        medians.push(Medians {
            sockperf_tps: median(results.iter().map(|r| r.sockperf_tps)),
            on_tps: median(results.iter().map(|r| r.on_tps)),
            off_tps: median(results.iter().map(|r| r.off_tps)),
        });
    }
    let others_busy =
        ticks_before.zip(cpu_ticks()).map(|(before, after)| after.others_busy_since(&before));
    if let Some(share) = others_busy {
        let warning = if share > OTHERS_BUSY_LIMIT {
            ": the figures may be disturbed; run again on an idle machine"
        } else {
            ""
        };
        println!(
            "\nother processes kept the CPUs {:.0}% busy during the rounds{warning}",
            share * 100.0
        );
    }
    println!(
        "\nmedians over {rounds} rounds; ackscope's figure is its JSON's clients.rps (requests \
         its client threads answered over their run), recording on (every event, TCP_INFO) or off"
    );
    for (placement, m) in placements.iter().zip(&medians) {
        let prefix = match placement {
            Placement::Pinned(_) => "",
            Placement::Unpinned => "unpinned ",
        };
        println!("{}:", placement.describe());
        let ratio = m.on_tps / m.sockperf_tps;
        let headline = matches!(placement, Placement::Pinned(_));
        let target = |met: bool, target: f64| {
            if headline {
                verdict(met, &format!(">= {target}"))
            } else {
                String::new()
            }
        };
        println!(
            "{prefix}rr_vs_sockperf ratio={ratio:.3} ackscope_tps={:.0} sockperf_tps={:.0}  \
             (ackscope recording on / sockperf){}",
            m.on_tps,
            m.sockperf_tps,
            target(ratio >= RR_TARGET, RR_TARGET)
        );
        let ratio = m.on_tps / m.off_tps;
        println!(
            "{prefix}recording_on_vs_off ratio={ratio:.3} on_tps={:.0} off_tps={:.0}  \
             (recording on / off){}",
            m.on_tps,
            m.off_tps,
            target(ratio >= RECORDING_TARGET, RECORDING_TARGET)
        );
    }
    Ok(())
}

/// A calibration run, then `rounds` rounds of sockperf and ackscope recording on and off.
fn rr_rounds(
    steps: &mut Steps,
    placement: Placement,
    rounds: u32,
    seconds: u32,
) -> Result<Vec<Round>, String> {
    let pin = placement.cpu();
    let where_ = placement.describe();
    steps.start(&format!("sockperf server on 127.0.0.1 (TCP), {where_}"));
    let server = SockperfServer::start(pin)?;
    steps.done(&format!("listening on port {}", server.port));

    steps.start(&format!("calibrating ackscope's request count to last about {seconds} s"));
    // A short run with recording on (the slower mode) also warms up the binary and the caches.
    let rps = ackscope_rr(10_000, true, pin)?;
    let count = ((rps * f64::from(seconds) / 1000.0).round() as u32 * 1000).clamp(1000, MAX_COUNT);
    steps.done(&format!("{rps:.0} requests/s with recording on: --count {count}"));

    let mut results = Vec::new();
    for round in 1..=rounds {
        steps.start(&format!("round {round} of {rounds}, {where_}"));
        // Every other round runs the programs in reverse order, so that drift during the
        // benchmark (CPU frequency, other load) does not favour whichever always runs first.
        let mut order = [Program::Sockperf, Program::RecordingOn, Program::RecordingOff];
        if round % 2 == 0 {
            order.reverse();
        }
        let mut result = Round::default();
        for program in order {
            match program {
                Program::Sockperf => {
                    let ping_pong = sockperf_ping_pong(server.port, seconds, pin)?;
                    result.sockperf_tps = ping_pong.tps;
                    result.sockperf_half_rtt_us = ping_pong.half_rtt_us;
                }
                Program::RecordingOn => result.on_tps = ackscope_rr(count, true, pin)?,
                Program::RecordingOff => result.off_tps = ackscope_rr(count, false, pin)?,
            }
        }
        steps.done(&format!(
            "sockperf {:.0}; ackscope recording on {:.0}, off {:.0} transactions/s",
            result.sockperf_tps, result.on_tps, result.off_tps
        ));
        results.push(result);
    }
    Ok(results)
}

fn print_rounds(placement: Placement, results: &[Round]) {
    println!(
        "\nrr on loopback, {SIZE_BYTES}-byte request and answer, TCP_NODELAY on both sides, \
         {}; transactions/s\n",
        placement.describe()
    );
    println!(
        "{:>5}  {:>9}  {:>14}  {:>9}  {:>9}  {:>12}  {:>6}",
        "round", "sockperf", "sockperf RTT/2", "on", "off", "on/sockperf", "on/off"
    );
    for (index, r) in results.iter().enumerate() {
        println!(
            "{:>5}  {:>9.0}  {:>11.2} us  {:>9.0}  {:>9.0}  {:>12.3}  {:>6.3}",
            index + 1,
            r.sockperf_tps,
            r.sockperf_half_rtt_us,
            r.on_tps,
            r.off_tps,
            r.on_tps / r.sockperf_tps,
            r.on_tps / r.off_tps
        );
    }
}

/// CPU time of the whole machine and of this process's waited-for children, in clock ticks.
struct CpuTicks {
    busy: u64,
    total: u64,
    children: u64,
}

/// Above this share of the machine's CPU time used by others, a run's figures are not trusted.
const OTHERS_BUSY_LIMIT: f64 = 0.05;

impl CpuTicks {
    /// The share of all CPU time since `before` that went to processes other than the
    /// benchmarked ones (this process's children: sockperf, ackscope).
    fn others_busy_since(&self, before: &CpuTicks) -> f64 {
        let total = self.total.saturating_sub(before.total).max(1);
        let busy = self.busy.saturating_sub(before.busy);
        let ours = self.children.saturating_sub(before.children);
        busy.saturating_sub(ours) as f64 / total as f64
    }
}

/// From /proc/stat (`cpu user nice system idle iowait irq softirq steal ...`) and
/// /proc/self/stat (cutime and cstime, fields 16 and 17); `None` where /proc is not Linux's.
fn cpu_ticks() -> Option<CpuTicks> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let machine: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .take(8)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    let total: u64 = machine.iter().sum();
    let idle = machine.get(3)? + machine.get(4)?;
    let own = fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may hold spaces; the first of them is field 3.
    let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    let children = fields.get(13)?.parse::<u64>().ok()? + fields.get(14)?.parse::<u64>().ok()?;
    Some(CpuTicks { busy: total - idle, total, children })
}

fn verdict(met: bool, target: &str) -> String {
    if met {
        format!("  (target {target})")
    } else {
        format!("  target missed ({target})")
    }
}

pub(crate) fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// One `ackscope run rr --json`: its `clients.rps`.
fn ackscope_rr(count: u32, recording: bool, pin: Option<u32>) -> Result<f64, String> {
    let mut command = command(setup::probe_binary(), pin);
    command.args(["run", "rr", "--count", &count.to_string()]);
    command.args(["--size", &SIZE_BYTES.to_string(), "--nodelay", "both", "--json"]);
    // sockperf sends each message with one call; so does ackscope here, so that the ratio is
    // the probe's own cost, not story 1's length-then-body protocol (which doubles the segments).
    command.args(["--write", "single"]);
    if !recording {
        command.args(["--no-events", "--no-tcp-info"]);
    }
    let output = checked_output(&mut command)?;
    let report = json::summary(&output)?;
    let clients = json::clients(&report)?;
    if clients.requests < count {
        return Err(format!(
            "ackscope answered {} of {count} requests: {report:?}",
            clients.requests
        ));
    }
    Ok(clients.rps)
}

/// Runs to completion capturing the output; an error shows the command and what it printed.
pub(crate) fn checked_output(command: &mut Command) -> Result<Output, String> {
    let shown = crate::steps::shown(command);
    let output = command.output().map_err(|e| format!("could not start `{shown}`: {e}"))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!(
            "`{shown}` failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `sockperf server`, killed (by its PID, which `Child` holds) when this is dropped, also when
/// a round fails.
pub(crate) struct SockperfServer {
    child: Child,
    pub(crate) port: u16,
}

impl SockperfServer {
    pub(crate) fn start(pin: Option<u32>) -> Result<SockperfServer, String> {
        let port = free_port()?;
        let child = command("sockperf", pin)
            .args(["server", "-i", "127.0.0.1", "-p", &port.to_string(), "--tcp"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("could not start `sockperf server`: {e}"))?;
        let mut server = SockperfServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            let exited = server.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                return Err(format!(
                    "sockperf server did not start listening on 127.0.0.1:{port}; run \
                     `sockperf server -i 127.0.0.1 -p {port} --tcp` to see why"
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }
}

impl Drop for SockperfServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("binding a free port on 127.0.0.1: {e}"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| format!("reading the free port on 127.0.0.1: {e}"))
}

pub(crate) struct PingPong {
    pub tps: f64,
    half_rtt_us: f64,
}

/// sockperf's ping-pong client: one message, wait for the answer, the next message.
/// TCP_NODELAY is sockperf's default (only `--tcp-avoid-nodelay` turns it off), as with
/// ackscope's `--nodelay both`.
pub(crate) fn sockperf_ping_pong(
    port: u16,
    seconds: u32,
    pin: Option<u32>,
) -> Result<PingPong, String> {
    let output = checked_output(command("sockperf", pin).args([
        "ping-pong",
        "-i",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "--tcp",
        "-m",
        &SIZE_BYTES.to_string(),
        "-t",
        &seconds.to_string(),
    ]))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    parse_ping_pong(&text)
}

/// Transactions per second from sockperf's report, for example (sockperf 3.7, `-t 2`):
///
/// ```text
/// sockperf: [Total Run] RunTime=2.001 sec; Warm up time=400 msec; SentMessages=88285; ...
/// sockperf: [Valid Duration] RunTime=1.549 sec; SentMessages=77916; ReceivedMessages=77916
/// sockperf: ====> avg-latency=9.923 (std-dev=43.722)
/// sockperf: Summary: Latency is 9.923 usec
/// ```
///
/// In ping-pong mode every message sent is a request that the server answers, and the next one
/// leaves only when the answer is in, so one received message is one transaction (request plus
/// answer), like one of ackscope's `requests`: tps = ReceivedMessages / RunTime of the valid
/// duration (the warm-up is excluded): 77916 / 1.549 = 50,301 here. Its "latency" is half a
/// round trip (RTT / 2, in microseconds), kept for the table: 1e6 / (2 x latency) = 50,388 is an
/// upper bound on the tps, as the client's own time between an answer and the next request is
/// not in it.
pub(crate) fn parse_ping_pong(text: &str) -> Result<PingPong, String> {
    let valid = text
        .lines()
        .find(|line| line.contains("[Valid Duration]"))
        .ok_or_else(|| format!("sockperf printed no `[Valid Duration]` line:\n{text}"))?;
    let run_time_s = sockperf_number(valid, "RunTime=", text)?;
    let received = sockperf_number(valid, "ReceivedMessages=", text)?;
    let half_rtt_us = sockperf_number(text, "avg-latency=", text)?;
    if run_time_s <= 0.0 || received <= 0.0 {
        return Err(format!("sockperf measured nothing:\n{text}"));
    }
    Ok(PingPong { tps: received / run_time_s, half_rtt_us })
}

fn sockperf_number(haystack: &str, label: &str, whole: &str) -> Result<f64, String> {
    let start = haystack
        .find(label)
        .ok_or_else(|| format!("sockperf's report has no `{label}`:\n{whole}"))?
        + label.len();
    let digits: String =
        haystack[start..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    digits
        .parse()
        .map_err(|_| format!("sockperf's `{label}` is not followed by a number:\n{whole}"))
}

fn memory(count: u32) -> Result<(), String> {
    let mut steps = prepare(3, &["time"])?;
    let dir = std::env::temp_dir().join(format!("ackscope-bench-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let measured = memory_in(&mut steps, count, &dir);
    let _ = fs::remove_dir_all(&dir);
    measured
}

/// A file the readers are measured on: its name, path and events.
struct ReadCase {
    name: String,
    file: std::path::PathBuf,
    events: u64,
}

fn memory_in(steps: &mut Steps, count: u32, dir: &Path) -> Result<(), String> {
    steps.start(&format!("ackscope run rr --count {count}, keep-alive and reconnecting"));
    steps.note(
        "1,000,000 requests take about a minute kept alive, several reconnecting (a connection \
         each: 5 to 50 minutes, as busy as the machine is)",
    );
    let keep_alive = dir.join("keep-alive.session");
    let (report, peak_rss_kb, file_bytes) = measure_memory(count, &keep_alive, &[])?;
    let reconnecting = dir.join("reconnect-every-1.session");
    let (reconnect_report, _, _) =
        measure_memory(count, &reconnecting, &["--reconnect-every", "1"])?;
    steps.done("recorded");

    let requests = json::rr(&report)?.requests;
    let peak_rss_mb = peak_rss_kb / 1024.0;
    let per_event = file_bytes as f64 / (report.events as f64).max(1.0);
    println!(
        "\nmemory peak_rss_mb={peak_rss_mb:.1} requests={requests} file_bytes={file_bytes} \
         events={} file_bytes_per_event={per_event:.1}",
        report.events
    );
    println!(
        "  peak RSS < {PEAK_RSS_TARGET_MB} MB:{}",
        met_or_missed(peak_rss_mb < PEAK_RSS_TARGET_MB)
    );
    println!(
        "  file bytes per event <= {FILE_BYTES_PER_EVENT_TARGET}:{}",
        met_or_missed(per_event <= FILE_BYTES_PER_EVENT_TARGET)
    );

    steps.start("crafted sessions, one for each bound the readers keep");
    let mut cases = vec![
        ReadCase { name: "keep-alive".into(), file: keep_alive, events: report.events },
        ReadCase {
            name: "reconnect-every-1".into(),
            file: reconnecting,
            events: reconnect_report.events,
        },
    ];
    for crafted in Crafted::ALL {
        let units = crafted_units(crafted, report.events);
        let file = dir.join(format!("{}.session", crafted.name()));
        let mut out = io::BufWriter::new(
            fs::File::create(&file).map_err(|e| format!("creating {}: {e}", file.display()))?,
        );
        let events = crafted
            .write(units, &mut out)
            .and_then(|events| out.flush().map(|()| events))
            .map_err(|e| format!("writing {}: {e}", file.display()))?;
        cases.push(ReadCase { name: format!("{} ({units})", crafted.name()), file, events });
    }
    steps.done(&format!("{} files", cases.len()));

    steps.start(&format!(
        "show and export --json of each under /usr/bin/time -v, in {READER_RUNS} rounds"
    ));
    // Each round reads every session once, so that a slow spell of the machine falls on every
    // session alike, not on the ones read during it; each keeps its least CPU.
    let mut rows = Vec::new();
    for case in &cases {
        for args in [&["show"][..], &["export", "--json"][..]] {
            rows.push((case, args, Cost { peak_rss_kb: 0.0, cpu_s: f64::MAX }));
        }
    }
    for _ in 0..READER_RUNS {
        for (case, args, best) in &mut rows {
            let cost = cost_of(args, &case.file)?;
            best.cpu_s = best.cpu_s.min(cost.cpu_s);
            best.peak_rss_kb = best.peak_rss_kb.max(cost.peak_rss_kb);
        }
    }
    let rows: Vec<_> =
        rows.into_iter().map(|(case, args, cost)| (case, args.join(" "), cost)).collect();
    steps.done("read");
    println!(
        "\n{:<40} {:<14} {:>10} {:>10} {:>10} {:>14}",
        "session", "command", "events", "peak MB", "cpu ms", "cpu ns/event"
    );
    for (case, command, cost) in &rows {
        let per_event = cost.cpu_s * 1e9 / (case.events as f64).max(1.0);
        println!(
            "{:<40} {command:<14} {:>10} {:>10.1} {:>10.1} {per_event:>14.0}",
            case.name,
            case.events,
            cost.peak_rss_kb / 1024.0,
            cost.cpu_s * 1e3
        );
    }
    let peak_mb = rows.iter().map(|(_, _, cost)| cost.peak_rss_kb / 1024.0).fold(0.0, f64::max);
    println!("memory readers_max_peak_mb={peak_mb:.1}");
    println!(
        "  every reader's peak under {READ_BACK_TARGET_MB} MB:{}",
        met_or_missed(peak_mb < READ_BACK_TARGET_MB)
    );
    for command in ["show", "export --json"] {
        let per_event: Vec<f64> = rows
            .iter()
            .filter(|(_, c, _)| c == command)
            .map(|(case, _, cost)| cost.cpu_s * 1e9 / (case.events as f64).max(1.0))
            .collect();
        let (low, high) =
            per_event.iter().fold((f64::MAX, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
        let spread = high / low.max(1e-9);
        let name = if command == "show" { "show" } else { "export_json" };
        println!("memory {name}_cpu_per_event_spread={spread:.2}");
        println!(
            "  {command}: CPU per event within 2x across the sessions:{}",
            met_or_missed(spread <= 2.0)
        );
    }
    Ok(())
}

/// How big each crafted session is: about as many events as the keep-alive recording
/// (`events`), so that each reader works as long on every session and its start-up and the
/// summaries of its last runs are as small a share of each (at 100,000 requests the runs that
/// never end were 50,000 events, 20 ms of CPU, half of it start-up and summaries). From
/// 100,000 requests up every session is past the bound it is named for.
fn crafted_units(crafted: Crafted, events: u64) -> u64 {
    match crafted {
        // A sample an event.
        Crafted::SamplesOfOneOpenRequest => events,
        // A start and a done each.
        Crafted::UnsettledRequests => events / 2,
        // 60,000 requests held first (120,000 events), then an event a repeat.
        Crafted::RepeatedFirstStart => events.saturating_sub(120_000).max(1),
        // 17 events a connection.
        Crafted::ConnectionPerRequest => events / 17,
        // A start and a read each.
        Crafted::OpenRuns => events / 2,
        // A segment an event.
        Crafted::CapturedSegments => events,
    }
}

pub(crate) fn met_or_missed(met: bool) -> &'static str {
    if met {
        " met"
    } else {
        " target missed"
    }
}

/// What one reader cost: its peak RSS and its CPU time (user and system).
pub(crate) struct Cost {
    pub(crate) peak_rss_kb: f64,
    pub(crate) cpu_s: f64,
}

/// Rounds in which each reader runs on each session: the least CPU of them is kept (other
/// processes on a shared machine only ever add to a run's CPU time, through the caches and the
/// CPUs' other threads), and the largest peak.
const READER_RUNS: usize = 5;

/// The cost of `ackscope ARGS... FILE` (the file goes after the first argument), its standard
/// output thrown away.
pub(crate) fn cost_of(args: &[&str], file: &Path) -> Result<Cost, String> {
    let mut command = Command::new("/usr/bin/time");
    command.arg("-v").arg(setup::probe_binary()).arg(args[0]).arg(file).args(&args[1..]);
    timed_cost(&mut command)
}

/// Runs `command`, a program under `/usr/bin/time -v` (its standard output thrown away): its
/// peak RSS as `time` reports it, and its CPU as `wait4` reports it when `time` is reaped, to
/// the microsecond (`time -v` prints hundredths of a second: the grain was half the CPU of the
/// smallest sessions). `wait4` counts the CPU of `time` and of the program it waited for;
/// `time`'s own is about a millisecond. The program's peak cannot come from `wait4` too: a
/// child's peak starts at its parent's RSS when it is started (here this benchmark's, tens of
/// megabytes); `time`'s is a few megabytes.
fn timed_cost(command: &mut Command) -> Result<Cost, String> {
    let shown = crate::steps::shown(command);
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|e| format!("could not start `{shown}`: {e}"))?;
    // Read to its end before reaping: the pipe closes when the child exits.
    let mut report = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = io::Read::read_to_string(&mut stderr, &mut report);
    }
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of a plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes; the child is ours and not yet
        // reaped (`Child` only reaps in `wait`, which is never called on it).
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            break;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(format!("waiting for `{shown}`: {error}"));
        }
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("`{shown}` failed (wait status {status}):\n{report}"));
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    Ok(Cost { peak_rss_kb: peak_rss_kb(&report)?, cpu_s })
}

fn peak_rss_kb(report: &str) -> Result<f64, String> {
    let label = "Maximum resident set size (kbytes):";
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .ok_or_else(|| format!("/usr/bin/time -v printed no `{label}`:\n{report}"))
}

/// ackscope's report, its peak RSS in KiB and the size of its session file, for a run of
/// `count` requests with `more` arguments.
fn measure_memory(count: u32, file: &Path, more: &[&str]) -> Result<(RunReport, f64, u64), String> {
    let mut command = Command::new("/usr/bin/time");
    command.arg("-v").arg(setup::probe_binary());
    command.args(["run", "rr", "--count", &count.to_string(), "--nodelay", "both"]);
    command.args(more).arg("-o").arg(file).arg("--json");
    let output = checked_output(&mut command)?;
    let report = json::summary(&output)?;
    let peak_rss_kb = peak_rss_kb(&String::from_utf8_lossy(&output.stderr))?;
    let file_bytes = fs::metadata(file)
        .map_err(|e| format!("ackscope wrote no session file {}: {e}", file.display()))?
        .len();
    Ok((report, peak_rss_kb, file_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    #[test]
    fn rr_and_memory_flags() {
        assert_eq!(rr_options(&[]), Ok((5, 3, 0)));
        assert_eq!(rr_options(&args("--pin 1 --seconds 2 --rounds 9")), Ok((9, 2, 1)));
        let error = rr_options(&args("--rounds 0")).unwrap_err();
        assert_eq!(error, format!("--rounds and --seconds must be at least 1\n{USAGE}"));
        let error = rr_options(&args("--seconds ten")).unwrap_err();
        assert_eq!(error, format!("--seconds needs a whole number, not `ten`\n{USAGE}"));
        let error = rr_options(&args("--count 5")).unwrap_err();
        assert_eq!(error, format!("unknown option `--count`\n{USAGE}"));
        assert_eq!(memory_options(&[]), Ok(MemoryBench::Run(MAX_COUNT)));
        assert_eq!(memory_options(&args("--count 1000")), Ok(MemoryBench::Run(1000)));
        assert_eq!(memory_options(&args("--hostile")), Ok(MemoryBench::Hostile(100_000)));
        let hostile = memory_options(&args("--hostile --count 100001")).unwrap_err();
        assert!(hostile.starts_with("--count must be 1 to 100000 with --hostile"), "{hostile}");
        let error = memory_options(&args("--count 1000001")).unwrap_err();
        assert_eq!(error, format!("--count must be 1 to {MAX_COUNT}\n{USAGE}"));
        assert!(memory_options(&args("--count 0")).is_err());
        let error = memory_options(&args("--rounds 2")).unwrap_err();
        assert_eq!(error, format!("unknown option `--rounds`\n{USAGE}"));
    }

    #[test]
    fn an_unknown_or_missing_benchmark_lists_every_benchmark() {
        let error = run(&args("nonsense --rounds 2")).unwrap_err();
        assert!(error.starts_with("unknown benchmark `nonsense`\nusage: "), "{error}");
        let usage = run(&[]).unwrap_err();
        assert!(usage.starts_with("which benchmark?\nusage: "), "{usage}");
        for name in ["rr", "memory", "link", "capture", "remote", "setup", "viewer", "watch"] {
            let line = format!("cargo xtask bench {name} ");
            assert!(error.contains(&line) && usage.contains(&line), "{name}: {usage}");
        }
        assert_eq!(usage.matches("usage: ").count(), 1, "{usage}");
    }

    #[test]
    fn converts_sockperf_messages_to_transactions() {
        let report = "sockperf: [Total Run] RunTime=3.100 sec; Warm up time=400 msec; \
                      SentMessages=100; ReceivedMessages=100\n\
                      sockperf: [Valid Duration] RunTime=2.000 sec; SentMessages=50000; \
                      ReceivedMessages=50000\n\
                      sockperf: ====> avg-latency=9.500 (std-dev=1.0)\n";
        let ping_pong = parse_ping_pong(report).expect("a complete report");
        assert_eq!(ping_pong.tps, 25000.0);
        assert_eq!(ping_pong.half_rtt_us, 9.5);
        assert!(parse_ping_pong("sockperf: error").is_err());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
    }
}
