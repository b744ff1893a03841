//! `cargo xtask bench remote`: a run against a remote `ackscope server` compared with the same
//! run against the probe's own server, and how well the clock offset is estimated.
//!
//! Two network namespaces joined by a veth pair (no delay) stand for the two hosts: the server
//! process in one, the client in the other. The local run is the same `ackscope run rr` in the
//! client's namespace with its own server across the same veth pair (`--server-netns`): the
//! same path, so the ratio is the remote mode's own cost. The same two on loopback, and
//! sockperf on both paths, say what the path itself costs. Rounds alternate their order.
//! Both namespaces read the one host's CLOCK_MONOTONIC, so the true offset between the two
//! probes' clocks is known (the JSON's `remote.same_host_offset_ns`), and the estimate's error
//! is measured, not computed by the estimator about itself.
//!
//! Like the other benchmarks this measures: a missed target is printed, the exit code stays 0.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::bench::{checked_output, median, met_or_missed};
use crate::steps::Steps;
use crate::{cli, json, setup};

pub(crate) const USAGE: &str =
    "usage: cargo xtask bench remote [--rounds N] [--count N] [--pin CPU]";

const RATIO_TARGET: f64 = 0.9;
const OFFSET_ERR_TARGET_US: f64 = 50.0;
/// As `bench rr` runs ackscope: one write per message, recording on.
const RR_ARGS: [&str; 7] = ["--size", "2048", "--nodelay", "both", "--write", "single", "--json"];
const CLIENT_IP: &str = "10.66.0.1";
const SERVER_IP: &str = "10.66.0.2";
const SERVER_PORT: &str = "7700";
/// Fixed, so the rounds need not read it from the server's output; never used off this host.
const TOKEN: &str = "bench-remote-token-0000";

/// `bench remote FLAGS...`.
pub fn run(args: &[String]) -> Result<(), String> {
    options(args).and_then(|(rounds, count, pin)| remote(rounds, count, pin))
}

/// `bench remote`'s flags: (rounds, requests a run, CPU to pin to).
fn options(args: &[String]) -> Result<(u32, u32, u32), String> {
    let (mut rounds, mut count, mut pin) = (5, 50_000, 0);
    let flags = &mut [("--rounds", &mut rounds), ("--count", &mut count), ("--pin", &mut pin)];
    cli::numbers(args, USAGE, flags)?;
    if rounds == 0 || !(1..=1_000_000).contains(&count) {
        return Err(format!("--rounds at least 1, --count 1 to 1000000\n{USAGE}"));
    }
    Ok((rounds, count, pin))
}

/// Two named network namespaces and the veth pair between them, deleted when dropped.
struct Namespaces {
    client: String,
    server: String,
}

impl Namespaces {
    fn create() -> Result<Namespaces, String> {
        let id = std::process::id();
        let made = Namespaces {
            client: format!("ackscope-bench-a-{id}"),
            server: format!("ackscope-bench-b-{id}"),
        };
        let ip = |args: &[&str]| -> Result<(), String> {
            checked_output(setup::tool_command("ip").args(args)).map(|_| ())
        };
        let (a, b) = (made.client.as_str(), made.server.as_str());
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&[
            "link", "add", "veth-a", "netns", a, "type", "veth", "peer", "name", "veth-b", "netns",
            b,
        ])?;
        for (ns, dev, addr) in [(a, "veth-a", CLIENT_IP), (b, "veth-b", SERVER_IP)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(made)
    }

    /// The probe in namespace `ns`, pinned to `pin` if given.
    fn command(ns: &str, pin: Option<u32>) -> Command {
        Namespaces::program(ns, pin, setup::probe_binary())
    }

    fn program(ns: &str, pin: Option<u32>, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = setup::tool_command("ip");
        command.args(["netns", "exec", ns]);
        if let Some(cpu) = pin {
            command.args(["taskset", "-c", &cpu.to_string()]);
        }
        command.arg(program);
        command
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in [&self.client, &self.server] {
            let _ = setup::tool_command("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// The remote server, killed when dropped.
struct Server(Child);

impl Server {
    /// `ackscope server` in namespace `ns`, on `listen`.
    fn start(ns: &str, listen: &str, pin: Option<u32>) -> Result<Server, String> {
        let mut command = Namespaces::command(ns, pin);
        command.args(["server", "--listen", listen]);
        command.args(["--token", TOKEN]).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = command.spawn().map_err(|e| format!("ackscope server: {e}"))?;
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line).map_err(|e| e.to_string())?;
        if !line.starts_with("ackscope echo server on") {
            let _ = child.kill();
            return Err(format!("ackscope server did not start: {line:?}"));
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Ok(Server(child))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One round: every rate in requests (transactions) per second.
struct Round {
    /// `ackscope run rr` with its own server in the server's namespace, across the veth pair:
    /// the headline's denominator.
    local: f64,
    /// `ackscope run rr` with its own server on loopback.
    local_lo: f64,
    /// Against `ackscope server` in the same namespace, on loopback: two processes, the
    /// server's events streamed back, the same path as `local_lo`.
    remote_lo: f64,
    /// Against `ackscope server` across the veth pair: the headline's numerator.
    remote_veth: f64,
    /// sockperf's ping-pong on loopback and across the veth pair: what the path alone costs
    /// the same two programs.
    sockperf_lo: f64,
    sockperf_veth: f64,
    offset_err_us: f64,
    uncertainty_us: f64,
}

fn remote(rounds: u32, count: u32, pin: u32) -> Result<(), String> {
    if !is_root() {
        return Err("bench remote makes network namespaces and a veth pair: run it as root".into());
    }
    let placements = [Some(pin), None];
    let mut steps = Steps::new(7 + placements.len() * rounds as usize);
    setup::ensure_build_tools(&mut steps)?;
    steps.start("Debian packages: sockperf (the path's own cost)");
    setup::ensure_apt_packages(&mut steps, &["sockperf"])?;
    crate::build_web(&mut steps)?;
    crate::build_probe(&mut steps)?;
    steps.start("two network namespaces joined by a veth pair");
    let ns = Namespaces::create()?;
    steps.done(&format!("{CLIENT_IP} and {SERVER_IP}"));
    let mut medians = Vec::new();
    for placement in placements {
        let across = Server::start(&ns.server, &format!("{SERVER_IP}:{SERVER_PORT}"), placement)?;
        let beside = Server::start(&ns.client, &format!("127.0.0.1:{SERVER_PORT}"), placement)?;
        let mut results = Vec::new();
        for round in 1..=rounds {
            let what = match placement {
                Some(cpu) => format!("round {round}/{rounds}, pinned to CPU {cpu}"),
                None => format!("round {round}/{rounds}, not pinned"),
            };
            steps.start(&what);
            let result = one_round(&ns, count, placement, round % 2 == 0)?;
            steps.done(&format!(
                "across veth: local {:.0}, remote {:.0}; on lo: local {:.0}, remote {:.0}; \
                 sockperf lo {:.0}, veth {:.0} (rps); offset error {:.1} us (+/- {:.1} us)",
                result.local,
                result.remote_veth,
                result.local_lo,
                result.remote_lo,
                result.sockperf_lo,
                result.sockperf_veth,
                result.offset_err_us,
                result.uncertainty_us
            ));
            results.push(result);
        }
        drop((across, beside));
        medians.push((placement, results));
    }
    println!(
        "\nmedians over {rounds} rounds of {count} requests (ackscope: clients.rps, recording on; \
         sockperf: ping-pong transactions/s, 2048-byte messages, TCP_NODELAY)"
    );
    for (placement, results) in &medians {
        let m = |f: fn(&Round) -> f64| median(results.iter().map(f));
        let (local, local_lo, remote_lo, remote_veth) =
            (m(|r| r.local), m(|r| r.local_lo), m(|r| r.remote_lo), m(|r| r.remote_veth));
        let (sockperf_lo, sockperf_veth) = (m(|r| r.sockperf_lo), m(|r| r.sockperf_veth));
        let error = m(|r| r.offset_err_us);
        let worst = results.iter().map(|r| r.offset_err_us.abs()).fold(0.0, f64::max);
        let ratio = remote_veth / local;
        let prefix = match placement {
            Some(cpu) => {
                println!("pinned: every program (client, server) on CPU {cpu}:");
                ""
            }
            None => {
                println!("not pinned:");
                "unpinned "
            }
        };
        let verdicts = match placement {
            Some(_) => format!(
                "  {} (>= {RATIO_TARGET}), {} (|E| <= {OFFSET_ERR_TARGET_US} us, worst {worst:.1})",
                met_or_missed(ratio >= RATIO_TARGET),
                met_or_missed(worst <= OFFSET_ERR_TARGET_US)
            ),
            None => format!("  (worst |E| {worst:.1} us)"),
        };
        println!(
            "{prefix}remote rr_vs_local ratio={ratio:.3} offset_err_us={error:.1}  (across the \
             veth pair: remote {remote_veth:.0} rps / local {local:.0} rps){verdicts}"
        );
        println!(
            "{prefix}  the path alone: sockperf veth_vs_lo ratio={:.3} ({sockperf_veth:.0} / \
             {sockperf_lo:.0})",
            sockperf_veth / sockperf_lo
        );
        println!(
            "{prefix}  on loopback: remote_on_lo_vs_local_on_lo ratio={:.3} ({remote_lo:.0} / \
             {local_lo:.0}: two processes, the server's events streamed back)",
            remote_lo / local_lo
        );
        println!(
            "{prefix}  the path alone, ackscope's local run: local veth_vs_lo ratio={:.3} \
             ({local:.0} / {local_lo:.0})",
            local / local_lo
        );
        println!(
            "{prefix}  across the veth pair: remote_vs_sockperf ratio={:.3} ({remote_veth:.0} / \
             {sockperf_veth:.0})",
            remote_veth / sockperf_veth
        );
    }
    Ok(())
}

/// Every measurement of a round, in an order that is reversed every other round, so that a
/// machine that speeds up or slows down during the rounds affects all of them alike.
fn one_round(
    ns: &Namespaces,
    count: u32,
    pin: Option<u32>,
    reversed: bool,
) -> Result<Round, String> {
    let mut round = Round {
        local: 0.0,
        local_lo: 0.0,
        remote_lo: 0.0,
        remote_veth: 0.0,
        sockperf_lo: 0.0,
        sockperf_veth: 0.0,
        offset_err_us: 0.0,
        uncertainty_us: 0.0,
    };
    let mut order: Vec<u8> = (0..6).collect();
    if reversed {
        order.reverse();
    }
    for which in order {
        match which {
            0 => round.local = rr(ns, count, pin, ServerSide::LocalAcross)?.0,
            1 => round.local_lo = rr(ns, count, pin, ServerSide::LocalOnLo)?.0,
            2 => round.remote_lo = rr(ns, count, pin, ServerSide::Remote("127.0.0.1"))?.0,
            3 => {
                let (rps, clock) = rr(ns, count, pin, ServerSide::Remote(SERVER_IP))?;
                round.remote_veth = rps;
                (round.offset_err_us, round.uncertainty_us) = clock.unwrap_or_default();
            }
            4 => round.sockperf_lo = sockperf(ns, &ns.client, "127.0.0.1", pin)?,
            _ => round.sockperf_veth = sockperf(ns, &ns.server, SERVER_IP, pin)?,
        }
    }
    Ok(round)
}

/// Where a round's `ackscope run rr` has its server side.
#[derive(Clone, Copy)]
enum ServerSide<'a> {
    /// Its own, in the server's namespace, across the veth pair (`--server-netns`).
    LocalAcross,
    /// Its own, on loopback.
    LocalOnLo,
    /// The `ackscope server` at this address.
    Remote(&'a str),
}

/// `ackscope run rr` in the client's namespace, with its server side at `server`: its rate
/// and, for a remote one, the offset's error and uncertainty (us).
fn rr(
    ns: &Namespaces,
    count: u32,
    pin: Option<u32>,
    server: ServerSide,
) -> Result<(f64, Option<(f64, f64)>), String> {
    let mut command = Namespaces::command(&ns.client, pin);
    command.args(["run", "rr", "--count", &count.to_string()]).args(RR_ARGS);
    let remote = match server {
        ServerSide::LocalAcross => {
            command.args(["--server-netns", &ns.server, "--server-ip", SERVER_IP]);
            None
        }
        ServerSide::LocalOnLo => None,
        ServerSide::Remote(ip) => {
            command.args(["--remote", &format!("{ip}:{SERVER_PORT}"), "--token", TOKEN]);
            Some(ip)
        }
    };
    let report = json::summary(&checked_output(&mut command)?)?;
    let rps = json::clients(&report)?.rps;
    if remote.is_none() {
        return Ok((rps, None));
    }
    let clock = report.clock.ok_or("no `clock` in a remote run's report")?;
    let truth = report.remote.as_ref().ok_or("no `remote` in a remote run's report")?;
    let error = (clock.offset_ns - truth.same_host_offset_ns) as f64;
    Ok((rps, Some((error / 1e3, clock.uncertainty_ns as f64 / 1e3))))
}

/// sockperf's ping-pong from the client's namespace to a sockperf server in `server_ns` on `ip`.
fn sockperf(ns: &Namespaces, server_ns: &str, ip: &str, pin: Option<u32>) -> Result<f64, String> {
    let port = "11711";
    let mut server = Namespaces::program(server_ns, pin, "sockperf")
        .args(["server", "--tcp", "-i", ip, "-p", port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("sockperf server: {e}"))?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let output = checked_output(Namespaces::program(&ns.client, pin, "sockperf").args([
        "ping-pong",
        "--tcp",
        "-i",
        ip,
        "-p",
        port,
        "-m",
        "2048",
        "-t",
        "3",
    ]));
    let _ = server.kill();
    let _ = server.wait();
    let output = output?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    crate::bench::parse_ping_pong(&text).map(|p| p.tps)
}

/// Whether this process runs as root (its effective uid, from /proc: xtask has no libc).
fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find_map(|line| line.strip_prefix("Uid:"));
    uid.and_then(|ids| ids.split_whitespace().nth(1)) == Some("0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    #[test]
    fn remote_flags() {
        assert_eq!(options(&[]), Ok((5, 50_000, 0)));
        assert_eq!(options(&args("--pin 1 --count 1000000 --rounds 2")), Ok((2, 1_000_000, 1)));
        assert!(options(&args("--count 1000001")).unwrap_err().contains("--count 1 to 1000000"));
        assert!(options(&args("--rounds 0")).unwrap_err().contains("--rounds at least 1"));
        let error = options(&args("--count 5k")).unwrap_err();
        assert_eq!(error, format!("--count needs a whole number, not `5k`\n{USAGE}"));
        let error = options(&args("--seconds 3")).unwrap_err();
        assert_eq!(error, format!("unknown option `--seconds`\n{USAGE}"));
    }
}
