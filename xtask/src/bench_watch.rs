//! `cargo xtask bench watch`: what `ackscope watch` costs the service it watches, measured on
//! a request/response service that ackscope does not drive (sockperf's TCP ping-pong server and
//! client), against the same service unwatched and the same service under `tcpdump -w`.
//!
//! Each round runs the service for the same time in six configurations: unwatched, watched by
//! `ackscope watch --port P`, under `tcpdump -i any -w FILE 'tcp port P'`, watched by `ackscope
//! watch --port P --try nodelay=both --metrics 127.0.0.1:0` with its `/metrics` scraped every
//! second (as Prometheus would), watched without the program of the watched programs' reads
//! (`ACKSCOPE_WATCH_CALLS=off`: beside the plain watch, what they cost), and unwatched again
//! (the middle four take turns in each place, round by round). A round's ratios divide by the mean of its two unwatched runs, which bracket
//! the others so that drift during the round shows and favours none. First every program on one
//! CPU (the headline: CPU time, what a busy server pays for being watched), then not pinned.
//!
//! Like `bench rr`, this measures: a missed target is printed, and the exit code stays 0.
//! What it measures and the figures of one machine: docs/BENCHMARKS.md.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStderr, Output, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ackscope_shared::report::RunReport;

use crate::bench::{command, median, met_or_missed, prepare, sockperf_ping_pong, SockperfServer};
use crate::bench_capture::{Tcpdump, TcpdumpCounts};
use crate::steps::Steps;
use crate::{cli, json, setup};

pub(crate) const USAGE: &str =
    "usage: cargo xtask bench watch [--rounds N] [--seconds S] [--pin CPU]";

/// The watched service's ratio to the unwatched one, at least (and at least tcpdump's); the same
/// with `--try` and `--metrics` scraped.
const WATCH_TARGET: f64 = 0.9;
/// The options the watch tries on the service in the third configuration: sockperf sets
/// TCP_NODELAY itself, so the service runs as it would without them, and what is measured is
/// what trying them (and serving the metrics) costs.
const TRIED: [&str; 4] = ["--try", "nodelay=both", "--metrics", "127.0.0.1:0"];
/// The watch without the program of the watched programs' reads (the probe's
/// `watch::kernel::WATCH_CALLS`).
const CALLS_OFF: (&str, &str) = ("ACKSCOPE_WATCH_CALLS", "off");
/// How often the metrics are scraped while the service runs under the third configuration.
const SCRAPE_EVERY: Duration = Duration::from_secs(1);
/// The watch says where its metrics are with this, on standard error, before it watches.
const METRICS_AT: &str = "ackscope: metrics at ";
/// The request and answer body, in bytes: `bench rr`'s, so that the rates compare with its
/// sockperf figures.
/// `bench rr`'s message size, which `sockperf_ping_pong` sends.
const SIZE_BYTES: u32 = 2048;
/// The watch says this on standard error once it takes packets (`ackscope watch`).
const WATCHING: &str = "ackscope: watching port";
/// `ackscope watch` ends with this code on Ctrl-C (SIGINT), as a shell reports 128 + 2.
const INTERRUPTED_EXIT: i32 = 130;

/// `bench watch FLAGS...`.
pub fn run(args: &[String]) -> Result<(), String> {
    let (rounds, seconds, pin) = options(args)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Err(format!(
            "`cargo xtask bench watch` needs root (running as uid {uid}): the watch's packet \
             sockets and tcpdump need CAP_NET_RAW, and both run under taskset as this user; run \
             it as root (`sudo -E cargo xtask bench watch`)"
        ));
    }
    watch(rounds, seconds, pin)
}

/// `bench watch`'s flags: (rounds, seconds a configuration runs, CPU to pin to).
fn options(args: &[String]) -> Result<(u32, u32, u32), String> {
    let (mut rounds, mut seconds, mut pin) = (4, 5, 0);
    let flags = &mut [("--rounds", &mut rounds), ("--seconds", &mut seconds), ("--pin", &mut pin)];
    cli::numbers(args, USAGE, flags)?;
    if rounds == 0 || seconds == 0 {
        return Err(format!("--rounds and --seconds must be at least 1\n{USAGE}"));
    }
    Ok((rounds, seconds, pin))
}

/// What the watch said of its packets in its report.
#[derive(Clone, Debug, Default, PartialEq)]
struct WatchCounts {
    /// How it took lo's packets: "ingress hook" (root) or "packet socket".
    via: Option<String>,
    /// Packets it turned into segments.
    segments: u64,
    /// Packets the kernel dropped for a full ring: the watch fell behind.
    dropped: u64,
    /// Exchanges (request and answer) it found, when its report has them.
    exchanges: Option<u32>,
}

/// One round: the service's transactions per second in each configuration.
#[derive(Clone, Default)]
struct Round {
    before: f64,
    watched: f64,
    tcpdump: f64,
    /// Watched with `--try nodelay=both` and `--metrics`, scraped every second.
    tried: f64,
    /// Watched without the program of the watched programs' reads (`ACKSCOPE_WATCH_CALLS=off`):
    /// beside `watched`, what those programs cost, like for like.
    without_calls: f64,
    after: f64,
    watch: WatchCounts,
    tcpdump_counts: TcpdumpCounts,
    tried_watch: WatchCounts,
    scrapes: Scrapes,
}

/// The scrapes of `/metrics` during a configuration: answered with the metrics, or not.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Scrapes {
    answered: u32,
    failed: u32,
}

impl Round {
    /// The unwatched rate the round's others are divided by: the mean of the runs that bracket
    /// them.
    fn unwatched(&self) -> f64 {
        (self.before + self.after) / 2.0
    }

    fn watched_ratio(&self) -> f64 {
        self.watched / self.unwatched()
    }

    fn tcpdump_ratio(&self) -> f64 {
        self.tcpdump / self.unwatched()
    }

    fn tried_ratio(&self) -> f64 {
        self.tried / self.unwatched()
    }

    fn without_calls_ratio(&self) -> f64 {
        self.without_calls / self.unwatched()
    }

    /// The watch with its reads' program over the watch without it: its share.
    fn calls_ratio(&self) -> f64 {
        self.watched / self.without_calls
    }
}

/// The configurations of a round, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Config {
    Before,
    Watched,
    Tcpdump,
    Tried,
    /// Watched with `ACKSCOPE_WATCH_CALLS=off`.
    WithoutCalls,
    After,
}

impl Config {
    fn describe(self) -> &'static str {
        match self {
            Config::Before => "unwatched",
            Config::Watched => "watched by ackscope watch",
            Config::Tcpdump => "under tcpdump -w",
            Config::Tried => "watched, --try, --metrics",
            Config::WithoutCalls => "watched, no reads' program",
            Config::After => "unwatched again",
        }
    }
}

/// The configurations between the unwatched runs of a round.
const MIDDLE: [Config; 4] = [Config::Watched, Config::Tcpdump, Config::Tried, Config::WithoutCalls];

/// The order of round `round` (from 1): unwatched first and last, the others between, each in
/// another place each round (four rounds put each in every place), so that drift within a
/// round favours none.
fn order(round: u32) -> [Config; 6] {
    let mut middle = MIDDLE;
    let turn = round.saturating_sub(1) as usize % middle.len();
    middle.rotate_left(turn);
    [Config::Before, middle[0], middle[1], middle[2], middle[3], Config::After]
}

fn watch(rounds: u32, seconds: u32, pin: u32) -> Result<(), String> {
    let placements = [Some(pin), None];
    let mut steps = prepare(placements.len() * (1 + rounds as usize), &["sockperf", "tcpdump"])?;
    let mut summary = Vec::new();
    for placement in placements {
        let results = rounds_of(&mut steps, placement, rounds, seconds)?;
        print_rounds(placement, seconds, &results);
        summary.push((placement, results));
    }
    println!(
        "\nmedians over {rounds} rounds of each round's ratio: its watched (or tcpdump's) rate \
         over the mean of its two unwatched runs; dropped: packets the kernel dropped for the \
         watch's full ring, summed over the rounds"
    );
    for (placement, results) in &summary {
        let ratio = median(results.iter().map(Round::watched_ratio));
        let tcpdump_ratio = median(results.iter().map(Round::tcpdump_ratio));
        let tried_ratio = median(results.iter().map(Round::tried_ratio));
        let without_calls_ratio = median(results.iter().map(Round::without_calls_ratio));
        let calls_ratio = median(results.iter().map(Round::calls_ratio));
        let tried_dropped: u64 = results.iter().map(|r| r.tried_watch.dropped).sum();
        let answered: u32 = results.iter().map(|r| r.scrapes.answered).sum();
        let failed: u32 = results.iter().map(|r| r.scrapes.failed).sum();
        let dropped: u64 = results.iter().map(|r| r.watch.dropped).sum();
        let segments: u64 = results.iter().map(|r| r.watch.segments).sum();
        let via = results.first().map_or_else(|| "-".to_string(), |r| lo_via(&r.watch));
        let tcpdump_dropped: u64 = results.iter().map(|r| r.tcpdump_counts.dropped).sum();
        println!("{}:", describe(*placement));
        let prefix = if placement.is_some() { "" } else { "unpinned " };
        println!(
            "{prefix}watch service_vs_unwatched ratio={ratio:.3} tcpdump_vs_unwatched \
             ratio={tcpdump_ratio:.3} dropped={dropped}"
        );
        println!(
            "{prefix}watch_try_metrics service_vs_unwatched ratio={tried_ratio:.3} \
             dropped={tried_dropped} scrapes={answered} failed_scrapes={failed}"
        );
        println!(
            "{prefix}watch_without_calls service_vs_unwatched ratio={without_calls_ratio:.3} \
             watch_vs_without_calls ratio={calls_ratio:.3} (what the program of the watched \
             programs' reads costs, like for like)"
        );
        if placement.is_some() {
            println!(
                "  service_vs_unwatched >= {WATCH_TARGET}:{}",
                met_or_missed(ratio >= WATCH_TARGET)
            );
            println!(
                "  service_vs_unwatched >= tcpdump_vs_unwatched:{}",
                met_or_missed(ratio >= tcpdump_ratio)
            );
            println!(
                "  watch_try_metrics service_vs_unwatched >= {WATCH_TARGET}:{}",
                met_or_missed(tried_ratio >= WATCH_TARGET)
            );
        }
        println!(
            "  transactions/s: unwatched {:.0}, watched {:.0}, under tcpdump {:.0}, watched with \
             --try and --metrics {:.0} (medians); the watch took {segments} segments ({via}), \
             tcpdump's kernel dropped {tcpdump_dropped}",
            median(results.iter().map(Round::unwatched)),
            median(results.iter().map(|r| r.watched)),
            median(results.iter().map(|r| r.tcpdump)),
            median(results.iter().map(|r| r.tried)),
        );
    }
    Ok(())
}

/// How the watch took lo's packets, as the summary says it: "lo's packets through VIA".
fn lo_via(watch: &WatchCounts) -> String {
    format!("lo's packets through {}", watch.via.as_deref().unwrap_or("an unnamed tap"))
}

fn describe(pin: Option<u32>) -> String {
    match pin {
        Some(cpu) => format!("pinned: server, client, watch and tcpdump on CPU {cpu}"),
        None => "not pinned".to_string(),
    }
}

/// A warm-up, then `rounds` rounds of the four configurations.
fn rounds_of(
    steps: &mut Steps,
    pin: Option<u32>,
    rounds: u32,
    seconds: u32,
) -> Result<Vec<Round>, String> {
    let placement = describe(pin);
    steps.start(&format!("sockperf server on 127.0.0.1 (TCP), {placement}"));
    let server = SockperfServer::start(pin)?;
    // A first client run warms the caches and the CPU's clock; it is not counted.
    let warm_up = ping_pong(server.port, 1, pin)?;
    steps.done(&format!("port {}, warm-up {warm_up:.0} transactions/s", server.port));
    let pcap =
        std::env::temp_dir().join(format!("ackscope-bench-watch-{}.pcap", std::process::id()));
    let mut results = Vec::new();
    for round in 1..=rounds {
        steps.start(&format!("round {round} of {rounds}, {placement}"));
        let mut result = Round::default();
        for config in order(round) {
            let tps = match config {
                Config::Before => {
                    result.before = ping_pong(server.port, seconds, pin)?;
                    result.before
                }
                Config::After => {
                    result.after = ping_pong(server.port, seconds, pin)?;
                    result.after
                }
                Config::WithoutCalls => {
                    let watch = Watch::start_with(server.port, pin, &[], &[CALLS_OFF])?;
                    let tps = ping_pong(server.port, seconds, pin);
                    watch.stop()?;
                    result.without_calls = tps?;
                    result.without_calls
                }
                Config::Watched => {
                    let watch = Watch::start(server.port, pin, &[])?;
                    let tps = ping_pong(server.port, seconds, pin);
                    result.watch = watch.stop()?;
                    result.watched = tps?;
                    result.watched
                }
                Config::Tried => {
                    let watch = Watch::start(server.port, pin, &TRIED)?;
                    let scraper = Scraper::start(watch.metrics_url()?);
                    let tps = ping_pong(server.port, seconds, pin);
                    result.scrapes = scraper.stop();
                    result.tried_watch = watch.stop()?;
                    result.tried = tps?;
                    result.tried
                }
                Config::Tcpdump => {
                    let tcpdump = under_tcpdump(server.port, seconds, pin, &pcap);
                    let _ = fs::remove_file(&pcap);
                    (result.tcpdump, result.tcpdump_counts) = tcpdump?;
                    result.tcpdump
                }
            };
            let extra = match config {
                Config::Watched => format!(
                    "; the watch took {} segments ({}), {} dropped",
                    result.watch.segments,
                    lo_via(&result.watch),
                    result.watch.dropped
                ),
                Config::Tcpdump => format!(
                    "; tcpdump captured {}, its kernel dropped {}",
                    result.tcpdump_counts.captured, result.tcpdump_counts.dropped
                ),
                Config::Tried => format!(
                    "; the watch took {} segments, {} dropped; {} scrapes answered, {} failed",
                    result.tried_watch.segments,
                    result.tried_watch.dropped,
                    result.scrapes.answered,
                    result.scrapes.failed
                ),
                _ => String::new(),
            };
            steps.note(&format!("{:<26} {tps:>9.0} transactions/s{extra}", config.describe()));
        }
        steps.done(&format!(
            "watched/unwatched {:.3}, tcpdump/unwatched {:.3}, with --try and --metrics {:.3}, \
             without the reads' program {:.3}",
            result.watched_ratio(),
            result.tcpdump_ratio(),
            result.tried_ratio(),
            result.without_calls_ratio()
        ));
        results.push(result);
    }
    Ok(results)
}

/// The service for `seconds` under `tcpdump -i any -w PCAP 'tcp port P'`: its rate and
/// tcpdump's counts.
fn under_tcpdump(
    port: u16,
    seconds: u32,
    pin: Option<u32>,
    pcap: &Path,
) -> Result<(f64, TcpdumpCounts), String> {
    let file = pcap.to_string_lossy();
    let filter = format!("tcp port {port}");
    let tcpdump = Tcpdump::start(pin, &["-i", "any", "-w", &file, &filter])?;
    let tps = ping_pong(port, seconds, pin);
    let counts = tcpdump.stop()?;
    Ok((tps?, counts))
}

fn print_rounds(pin: Option<u32>, seconds: u32, results: &[Round]) {
    println!(
        "\nsockperf ping-pong on loopback, {SIZE_BYTES}-byte messages, {seconds} s a \
         configuration, {}; transactions/s",
        describe(pin)
    );
    println!(
        "{:>5}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>12}  {:>12}  {:>12}  {:>12}  {:>9}  \
         {:>7}  {:>9}",
        "round",
        "unwatched",
        "watched",
        "tcpdump",
        "tried",
        "no calls",
        "again",
        "after/before",
        "watched/unw",
        "tcpdump/unw",
        "tried/unw",
        "segments",
        "dropped",
        "exchanges"
    );
    for (index, r) in results.iter().enumerate() {
        let exchanges = r.watch.exchanges.map_or_else(|| "-".to_string(), |n| n.to_string());
        println!(
            "{:>5}  {:>9.0}  {:>9.0}  {:>9.0}  {:>9.0}  {:>9.0}  {:>9.0}  {:>12.3}  {:>12.3}  \
             {:>12.3}  {:>12.3}  {:>9}  {:>7}  {:>9}",
            index + 1,
            r.before,
            r.watched,
            r.tcpdump,
            r.tried,
            r.without_calls,
            r.after,
            r.after / r.before,
            r.watched_ratio(),
            r.tcpdump_ratio(),
            r.tried_ratio(),
            r.watch.segments,
            r.watch.dropped,
            exchanges
        );
    }
    println!(
        "(tried: watched with {}, its metrics scraped every {} s)",
        TRIED.join(" "),
        SCRAPE_EVERY.as_secs()
    );
}

/// sockperf's ping-pong client for `seconds` (`bench rr`'s, the same 2,048-byte messages): the
/// service's transactions per second.
fn ping_pong(port: u16, seconds: u32, pin: Option<u32>) -> Result<f64, String> {
    Ok(sockperf_ping_pong(port, seconds, pin)?.tps)
}

/// `ackscope watch --port P --json MORE`, started and stopped with SIGINT as a user would;
/// stopped the same way when dropped (also when a round fails).
struct Watch {
    child: Child,
    /// What it printed on standard error until it was watching.
    started: String,
    /// Reads the rest of its standard error, so that it never fills the pipe.
    rest: Option<JoinHandle<String>>,
}

impl Watch {
    /// Starts the watch (pinned to a CPU if `pin`) with `more` flags and returns once it takes
    /// packets.
    fn start(port: u16, pin: Option<u32>, more: &[&str]) -> Result<Watch, String> {
        Watch::start_with(port, pin, more, &[])
    }

    /// [`Watch::start`] with environment variables `env` set.
    fn start_with(
        port: u16,
        pin: Option<u32>,
        more: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Watch, String> {
        let mut command = command(setup::probe_binary(), pin);
        command.args(["watch", "--port", &port.to_string(), "--json"]).args(more);
        command.envs(env.iter().copied());
        let shown = crate::steps::shown(&command);
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start `{shown}`: {e}"))?;
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr was piped"));
        let mut watch = Watch { child, started: String::new(), rest: None };
        loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).map_err(|e| e.to_string())?;
            watch.started.push_str(&line);
            if line.starts_with(WATCHING) {
                break;
            }
            if read == 0 {
                return Err(format!("`{shown}` ended before it was watching:\n{}", watch.started));
            }
        }
        watch.rest = Some(thread::spawn(move || drain(stderr)));
        Ok(watch)
    }

    /// Where its metrics are served (`--metrics`), as it said before it watched.
    fn metrics_url(&self) -> Result<String, String> {
        let said = self.started.lines().find_map(|line| line.strip_prefix(METRICS_AT));
        said.map(str::to_string).ok_or_else(|| {
            format!("the watch did not say where its metrics are:\n{}", self.started)
        })
    }

    /// Stops it with SIGINT and reads its report: the packets it took (none is an error).
    fn stop(mut self) -> Result<WatchCounts, String> {
        self.interrupt();
        let mut stdout = Vec::new();
        if let Some(mut out) = self.child.stdout.take() {
            out.read_to_end(&mut stdout).map_err(|e| format!("reading the watch's report: {e}"))?;
        }
        let status = self.child.wait().map_err(|e| format!("waiting for the watch: {e}"))?;
        let rest = self.rest.take().and_then(|reader| reader.join().ok()).unwrap_or_default();
        let stderr = format!("{}{rest}", self.started);
        if !(status.success() || status.code() == Some(INTERRUPTED_EXIT)) {
            return Err(format!(
                "ackscope watch failed ({status}):\n{}{stderr}",
                String::from_utf8_lossy(&stdout)
            ));
        }
        let report = json::summary(&Output { status, stdout, stderr: Vec::new() })
            .map_err(|e| format!("{e}\nits standard error:\n{stderr}"))?;
        watch_counts(&report)
    }

    fn interrupt(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: a plain signal to our own child, which has not been waited for yet (its
            // PID cannot have been reused).
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.interrupt();
            let _ = self.child.wait();
        }
    }
}

/// A thread that scrapes the watch's `/metrics` every [`SCRAPE_EVERY`] as Prometheus would (a
/// new connection each time, the whole answer read), until stopped.
struct Scraper {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Scrapes>,
}

impl Scraper {
    fn start(url: String) -> Scraper {
        let (stop, stopped) = mpsc::channel();
        let thread = thread::spawn(move || {
            let mut scrapes = Scrapes::default();
            loop {
                match scrape(&url) {
                    Ok(()) => scrapes.answered += 1,
                    Err(e) => {
                        scrapes.failed += 1;
                        eprintln!("bench watch: scraping {url}: {e}");
                    }
                }
                match stopped.recv_timeout(SCRAPE_EVERY) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return scrapes,
                }
            }
        });
        Scraper { stop, thread }
    }

    fn stop(self) -> Scrapes {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

/// One `GET` of `url` (`http://HOST:PORT/metrics`): `Ok` if it was answered 200 with the
/// watch's metrics.
fn scrape(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("not an http URL: {url}"))?;
    let (host, path) = rest.split_once('/').ok_or_else(|| format!("no path in {url}"))?;
    let mut stream = TcpStream::connect(host).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    let ok = answer.starts_with("HTTP/1.1 200")
        && answer.contains("ackscope_watch_exchange_seconds_count");
    if ok {
        Ok(())
    } else {
        Err(format!("answered {:?}", answer.lines().next().unwrap_or("nothing")))
    }
}

fn drain(mut stderr: BufReader<ChildStderr>) -> String {
    let mut rest = String::new();
    let _ = stderr.read_to_string(&mut rest);
    rest
}

/// The watch's packets from its report's `capture` object. A watch that took no packets did
/// not watch: that is an error, not a ratio.
fn watch_counts(report: &RunReport) -> Result<WatchCounts, String> {
    let capture = report.capture.as_ref().ok_or_else(|| {
        format!(
            "ackscope watch's report has no `capture`: it read no packets (it needs root or \
             CAP_NET_RAW for them), so it did not watch what this benchmark measures: {report:?}"
        )
    })?;
    if capture.segments == 0 {
        return Err(format!(
            "ackscope watch took no packets of the service, so it watched nothing (is the \
             service on the watched port?): {report:?}"
        ));
    }
    Ok(WatchCounts {
        via: capture.via.clone(),
        segments: capture.segments,
        dropped: u64::from(capture.dropped),
        exchanges: report.rr().map(|rr| rr.requests),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    #[test]
    fn watch_flags() {
        assert_eq!(options(&[]), Ok((4, 5, 0)));
        assert_eq!(options(&args("--rounds 5 --seconds 2 --pin 1")), Ok((5, 2, 1)));
        let error = options(&args("--rounds 0")).unwrap_err();
        assert_eq!(error, format!("--rounds and --seconds must be at least 1\n{USAGE}"));
        let error = options(&args("--count 3")).unwrap_err();
        assert_eq!(error, format!("unknown option `--count`\n{USAGE}"));
    }

    #[test]
    fn unwatched_runs_bracket_the_others_and_the_middle_four_take_turns() {
        for round in 1..=5 {
            let order = order(round);
            assert_eq!((order[0], order[5]), (Config::Before, Config::After), "round {round}");
            for config in MIDDLE {
                assert!(order.contains(&config), "round {round}: {order:?}");
            }
        }
        // Four rounds put each of the middle four in each place once.
        for place in 1..=4 {
            let there: Vec<Config> = (1..=4).map(|round| order(round)[place]).collect();
            for config in MIDDLE {
                assert!(there.contains(&config), "place {place}: {there:?}");
            }
        }
        assert_eq!(order(1), order(5));
    }

    #[test]
    fn ratios_divide_by_the_mean_of_the_bracketing_runs() {
        let round = Round {
            before: 100.0,
            watched: 90.0,
            tcpdump: 60.0,
            tried: 81.0,
            after: 80.0,
            ..Round::default()
        };
        assert_eq!(round.unwatched(), 90.0);
        assert_eq!(round.watched_ratio(), 1.0);
        assert_eq!(round.tcpdump_ratio(), 60.0 / 90.0);
        assert_eq!(round.tried_ratio(), 0.9);
    }

    /// The report `ackscope watch --json` prints (its fields as the probe writes them).
    fn report(capture: &str) -> RunReport {
        let json = format!(
            r#"{{"ackscope_version":"0.1.0","config":{{"duration_ms":null,"evidence":"packets and TCP_INFO","ports":[5001]}},"duration_s":4.9,"error":null,"events":500000,"max_ms":1.2,"outcome":"interrupted","p50_ms":0.02,"p99_ms":0.05,"requests":240000,"rps":48979.5,"scenario":"watch","stalled_reads":0,"stalls":[]{capture}}}"#
        );
        serde_json::from_str(&json).expect("a watch's report")
    }

    #[test]
    fn reads_the_watchs_packets_and_refuses_a_watch_without_them() {
        let capture = r#","capture":{"via":"packet_socket","segments":480000,"offset_uncertainty_ns":0,"drift_ns":0,"dropped":12,"kernel_packets":960012}"#;
        let counts = watch_counts(&report(capture)).expect("a watch with packets");
        assert_eq!(
            counts,
            WatchCounts {
                via: Some("packet_socket".into()),
                segments: 480_000,
                dropped: 12,
                exchanges: Some(240_000)
            }
        );
        let none = watch_counts(&report("")).unwrap_err();
        assert!(none.contains("no `capture`") && none.contains("CAP_NET_RAW"), "{none}");
        let empty = capture.replace("480000", "0");
        let empty = watch_counts(&report(&empty)).unwrap_err();
        assert!(empty.contains("took no packets"), "{empty}");
    }
}
