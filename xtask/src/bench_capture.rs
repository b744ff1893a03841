//! `cargo xtask bench capture`: what `--capture` costs a request/response run, measured through
//! the release binary, against the same run without it and against the same run watched by
//! tcpdump, a C capture tool.
//!
//! Like `bench rr`, this measures: a missed target is printed and the exit code stays 0.
//! What it measures and the figures of one machine: docs/BENCHMARKS.md.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::thread;
use std::time::Duration;

use crate::bench::{checked_output, command, median, prepare};
use crate::{cli, json, setup};

pub(crate) const USAGE: &str = "usage: cargo xtask bench capture [--rounds N] [--seconds S]";

const CAPTURE_TARGET: f64 = 0.9;
/// The rr runs, as `bench rr` runs ackscope with recording on.
const RR_ARGS: [&str; 7] = ["--size", "2048", "--nodelay", "both", "--write", "single", "--json"];
const MAX_COUNT: u32 = 1_000_000;
/// The peer: tcpdump on lo keeping what `--capture` keeps. `-Q in`: loopback delivers each
/// packet twice, as lo sends it and as lo receives it, and the capture keeps the second only.
/// `-s 134`: the longest headers, the most the capture copies. `ip and tcp`: the run's port is
/// not known before it starts; on a host with no other loopback TCP, these are its packets
/// (the `kept` column shows it). `-w /dev/null`: tcpdump's cheapest output.
const TCPDUMP_ARGS: [&str; 9] =
    ["-i", "lo", "-Q", "in", "-s", "134", "-w", "/dev/null", "ip and tcp"];

/// tcpdump's read timeout (tcpdump.c), which its TPACKET_V3 ring takes as the time a block is
/// handed over after its first packet.
const TCPDUMP_BLOCK_TIMEOUT: Duration = Duration::from_secs(1);

/// `bench capture FLAGS...`.
pub fn run(args: &[String]) -> Result<(), String> {
    options(args).and_then(|(rounds, seconds)| capture(rounds, seconds))
}

/// `bench capture`'s flags: (rounds, seconds a run lasts).
fn options(args: &[String]) -> Result<(u32, u32), String> {
    let (mut rounds, mut seconds) = (5, 3);
    cli::numbers(args, USAGE, &mut [("--rounds", &mut rounds), ("--seconds", &mut seconds)])?;
    if rounds == 0 || seconds == 0 {
        return Err(format!("--rounds and --seconds must be at least 1\n{USAGE}"));
    }
    Ok((rounds, seconds))
}

/// One `ackscope run rr --json`, as its summary tells it.
#[derive(Clone, Default)]
struct RrRun {
    /// `clients.rps`: requests the client threads answered over their own run, the same window
    /// with capture on and off.
    rps: f64,
    segments: u64,
    kernel_packets: u64,
    dropped: u64,
    /// `capture.via`: how the run captured ("ingress hook", "packet socket").
    via: String,
}

/// What tcpdump said as it ended.
#[derive(Clone, Copy, Default)]
pub(crate) struct TcpdumpCounts {
    pub captured: u64,
    pub dropped: u64,
}

/// One round: the run with capture, without, and (pinned only) with capture through the packet
/// socket, and without, beside tcpdump.
struct Round {
    on: RrRun,
    off: RrRun,
    socket: Option<RrRun>,
    tcpdump: Option<(RrRun, TcpdumpCounts)>,
}

/// The variable that makes a run capture through its packet socket, where it would take lo's
/// ingress hook (docs/CAPTURE.md).
const VIA_SOCKET: (&str, &str) = ("ACKSCOPE_CAPTURE_VIA", "socket");

fn capture(rounds: u32, seconds: u32) -> Result<(), String> {
    // tcpdump: the C tool the capture is compared with.
    let mut steps = prepare(1 + 2 * (1 + rounds as usize), &["tcpdump"])?;

    steps.start("can this user capture? (ackscope run rr --capture --count 100)");
    let uid = Command::new("id").arg("-u").output().ok().map_or_else(
        || "unknown".to_string(),
        |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
    );
    let probe = rr(Length::count(100), Capture::Default, None);
    if let Err(error) = &probe {
        steps.done("no");
        let why = if uid == "0" {
            "running as root, yet ackscope could not capture".to_string()
        } else {
            format!(
                "not root (uid {uid}): --capture needs CAP_NET_RAW (docs/CAPTURE.md, \
                 Permissions)"
            )
        };
        println!("\ncapture_vs_off skipped: {why}\n{error}");
        return Ok(());
    }
    let via = probe.map(|run| run.via).unwrap_or_default();
    steps.done(&format!("yes (uid {uid}), through the {via}"));

    // Pinned first: every thread on CPU 0, so what the capture costs is CPU time, the headline.
    // The tcpdump peer runs there too, where the target is.
    let placements = [(Some(0), "pinned: every thread on CPU 0"), (None, "not pinned")];
    let mut summary = Vec::new();
    for (pin, placement) in placements {
        let length = if pin.is_some() {
            steps.start(&format!(
                "calibrating the request count to last about {seconds} s, {placement}"
            ));
            let rps = rr(Length::count(10_000), Capture::Default, pin)?.rps;
            let count =
                ((rps * f64::from(seconds) / 1000.0).round() as u32 * 1000).clamp(1000, MAX_COUNT);
            steps.done(&format!("{rps:.0} requests/s with capture on: --count {count}"));
            Length::count(count)
        } else {
            // Not pinned, a short calibration run keeps its threads on one CPU and runs at the
            // pinned rate, while a long run crosses CPUs at a tenth of it: a calibrated count
            // made each round last a minute or more. Each run lasts `seconds` instead, with
            // capture and without: the same window.
            Length { count: MAX_COUNT, seconds: Some(seconds) }
        };
        let mut results = Vec::new();
        for round in 1..=rounds {
            steps.start(&format!("round {round} of {rounds}, {placement}"));
            let result = one_round(round, length, pin)?;
            let mut peer = String::new();
            if let Some(run) = &result.socket {
                peer += &format!(", capture through the packet socket {:.0}", run.rps);
            }
            if let Some((run, _)) = &result.tcpdump {
                peer += &format!(", off beside tcpdump {:.0}", run.rps);
            }
            steps.done(&format!(
                "capture on {:.0}, off {:.0}{peer} requests/s; {} segments captured, {} dropped",
                result.on.rps, result.off.rps, result.on.segments, result.on.dropped
            ));
            results.push(result);
        }
        print_rounds(length, placement, &results);
        summary.push((placement, results));
    }
    println!("\nmedians over {rounds} rounds:");
    for (index, (placement, results)) in summary.iter().enumerate() {
        let on = median(results.iter().map(|r| r.on.rps));
        let off = median(results.iter().map(|r| r.off.rps));
        let dropped: u64 = results.iter().map(|r| r.on.dropped).sum();
        let ratio = on / off;
        let (prefix, verdict) = if index == 0 {
            let verdict = if ratio >= CAPTURE_TARGET {
                format!("(target >= {CAPTURE_TARGET})")
            } else {
                format!("target missed (>= {CAPTURE_TARGET})")
            };
            ("", verdict)
        } else {
            ("unpinned ", String::new())
        };
        println!(
            "{prefix}capture_vs_off ratio={ratio:.3} capture_rps={on:.0} off_rps={off:.0} \
             dropped={dropped} via={via:?}  ({placement}; capture on / off) {verdict}"
        );
        let socket: Vec<&RrRun> = results.iter().filter_map(|r| r.socket.as_ref()).collect();
        if !socket.is_empty() && via != "packet socket" {
            let rps = median(socket.iter().map(|run| run.rps));
            let dropped: u64 = socket.iter().map(|run| run.dropped).sum();
            println!(
                "socket_capture_vs_off ratio={:.3} capture_rps={rps:.0} off_rps={off:.0} \
                 dropped={dropped}  ({placement}; capture through the packet socket \
                 ({}={}) / off: the way in where the hook is not permitted)",
                rps / off,
                VIA_SOCKET.0,
                VIA_SOCKET.1
            );
        }
        let peer: Vec<&(RrRun, TcpdumpCounts)> =
            results.iter().filter_map(|r| r.tcpdump.as_ref()).collect();
        if !peer.is_empty() {
            let beside = median(peer.iter().map(|p| p.0.rps));
            let dropped: u64 = peer.iter().map(|p| p.1.dropped).sum();
            println!(
                "tcpdump_vs_off ratio={:.3} tcpdump_rps={beside:.0} off_rps={off:.0} \
                 dropped={dropped}  ({placement}; off beside `tcpdump {}` / off: what a C \
                 capture tool costs, for comparison)",
                beside / off,
                shell_words(&TCPDUMP_ARGS)
            );
            println!(
                "capture_vs_tcpdump ratio={:.3}  ({placement}; capture on / off beside tcpdump: \
                 above 1, ackscope's capture, recording and analysis included, costs the run \
                 less than tcpdump writing to /dev/null)",
                on / beside
            );
        }
    }
    Ok(())
}

/// The runs of one round, their order turned by one each round so that drift favours none.
fn one_round(round: u32, length: Length, pin: Option<u32>) -> Result<Round, String> {
    let mut result =
        Round { on: RrRun::default(), off: RrRun::default(), socket: None, tcpdump: None };
    let runs = if pin.is_some() { 4 } else { 2 };
    for turn in 0..runs {
        match (round + turn) % runs {
            0 => result.off = rr(length, Capture::Off, pin)?,
            1 => result.on = rr(length, Capture::Default, pin)?,
            2 => result.socket = Some(rr(length, Capture::Socket, pin)?),
            _ => {
                let cpu = pin.expect("the peer runs pinned only");
                let tcpdump = Tcpdump::start(Some(cpu), &TCPDUMP_ARGS)?;
                let run = rr(length, Capture::Off, pin);
                let counts = tcpdump.stop()?;
                result.tcpdump = Some((run?, counts));
            }
        }
    }
    Ok(result)
}

fn print_rounds(length: Length, placement: &str, results: &[Round]) {
    println!(
        "\nackscope run rr {} {} [--capture] on loopback, {placement}; \
         requests/s (clients.rps: the client threads' own count over their run)",
        length.args().join(" "),
        RR_ARGS.join(" ")
    );
    if let Some(first) = results.first() {
        println!("capture: through the {}", first.on.via);
    }
    let socket = results.iter().any(|r| r.socket.is_some());
    if socket {
        println!(
            "socket: the run with --capture through the packet socket ({}={})",
            VIA_SOCKET.0, VIA_SOCKET.1
        );
    }
    let peer = results.iter().any(|r| r.tcpdump.is_some());
    if peer {
        println!(
            "tcpdump: the run without --capture, beside `tcpdump {}` on the same CPU; kept and \
             dropped are tcpdump's own counts",
            shell_words(&TCPDUMP_ARGS)
        );
    }
    println!();
    let mut header = format!(
        "{:>5}  {:>10}  {:>10}  {:>6}  {:>9}  {:>14}  {:>7}",
        "round", "capture", "off", "ratio", "segments", "kernel passed", "dropped"
    );
    if socket {
        header += &format!("  {:>10}  {:>10}  {:>7}", "socket", "socket/off", "dropped");
    }
    if peer {
        header +=
            &format!("  {:>10}  {:>11}  {:>9}  {:>7}", "tcpdump", "tcpdump/off", "kept", "dropped");
    }
    println!("{header}");
    for (index, r) in results.iter().enumerate() {
        let mut row = format!(
            "{:>5}  {:>10.0}  {:>10.0}  {:>6.3}  {:>9}  {:>14}  {:>7}",
            index + 1,
            r.on.rps,
            r.off.rps,
            r.on.rps / r.off.rps,
            r.on.segments,
            r.on.kernel_packets,
            r.on.dropped
        );
        if let Some(run) = &r.socket {
            row +=
                &format!("  {:>10.0}  {:>10.3}  {:>7}", run.rps, run.rps / r.off.rps, run.dropped);
        }
        if let Some((run, counts)) = &r.tcpdump {
            row += &format!(
                "  {:>10.0}  {:>11.3}  {:>9}  {:>7}",
                run.rps,
                run.rps / r.off.rps,
                counts.captured,
                counts.dropped
            );
        }
        println!("{row}");
    }
}

/// How long each run of a round is: a request count, and a time limit as well when not pinned.
#[derive(Clone, Copy)]
struct Length {
    count: u32,
    seconds: Option<u32>,
}

impl Length {
    fn count(count: u32) -> Length {
        Length { count, seconds: None }
    }

    fn args(&self) -> Vec<String> {
        let mut args = vec!["--count".to_string(), self.count.to_string()];
        if let Some(seconds) = self.seconds {
            args.extend(["--duration".to_string(), format!("{seconds}s")]);
        }
        args
    }
}

/// Whether a run captures, and how.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Capture {
    Off,
    /// `--capture`, the first way in this host permits (lo's ingress hook as root).
    Default,
    /// `--capture` through the packet socket.
    Socket,
}

fn rr(length: Length, capture: Capture, pin: Option<u32>) -> Result<RrRun, String> {
    let mut command = command(setup::probe_binary(), pin);
    command.args(["run", "rr"]).args(length.args()).args(RR_ARGS);
    if capture != Capture::Off {
        command.arg("--capture");
    }
    if capture == Capture::Socket {
        command.env(VIA_SOCKET.0, VIA_SOCKET.1);
    }
    let report = json::summary(&checked_output(&mut command)?)?;
    let capture = report.capture.as_ref();
    Ok(RrRun {
        rps: json::clients(&report)?.rps,
        segments: capture.map_or(0, |c| c.segments),
        kernel_packets: capture.map_or(0, |c| c.kernel_packets),
        dropped: capture.map_or(0, |c| u64::from(c.dropped)),
        via: capture.and_then(|c| c.via.clone()).unwrap_or_default(),
    })
}

fn shell_words(args: &[&str]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a.to_string() })
        .collect();
    quoted.join(" ")
}

/// The counts tcpdump prints as it ends: "N packets captured", "N packets dropped by kernel".
fn counts(said: &str) -> Option<TcpdumpCounts> {
    let count = |what: &str| {
        said.lines().find_map(|line| line.strip_suffix(what)?.trim().parse::<u64>().ok())
    };
    Some(TcpdumpCounts {
        captured: count(" packets captured")?,
        dropped: count(" packets dropped by kernel")?,
    })
}

/// tcpdump capturing, on one CPU or not pinned; stopped with SIGINT, as a user stops it, when
/// this is stopped or dropped (also when a round fails).
pub(crate) struct Tcpdump {
    child: Child,
    stderr: BufReader<ChildStderr>,
    /// What it printed before it was capturing, for an error.
    started: String,
}

impl Tcpdump {
    /// Starts `tcpdump ARGS...` (pinned to a CPU if `pin`), and returns once it says it is
    /// listening.
    pub(crate) fn start(pin: Option<u32>, args: &[&str]) -> Result<Tcpdump, String> {
        let mut command = command("tcpdump", pin);
        command.args(args);
        let shown = crate::steps::shown(&command);
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start `{shown}`: {e}"))?;
        let stderr = child.stderr.take().expect("stderr was piped");
        let mut tcpdump = Tcpdump { child, stderr: BufReader::new(stderr), started: String::new() };
        // tcpdump says "listening on lo, ..." once its socket, ring and filter are in place,
        // or says why not and exits (end of its stderr).
        loop {
            let mut line = String::new();
            let read = tcpdump.stderr.read_line(&mut line).map_err(|e| e.to_string())?;
            tcpdump.started.push_str(&line);
            if line.contains("listening on") {
                return Ok(tcpdump);
            }
            if read == 0 {
                return Err(format!(
                    "`{shown}` did not start capturing (run it as root to see why):\n{}",
                    tcpdump.started
                ));
            }
        }
    }

    /// Stops it and reads its counts: "N packets captured", "N packets dropped by kernel".
    pub(crate) fn stop(mut self) -> Result<TcpdumpCounts, String> {
        // Its ring hands a block over when full or a second after the block's first packet
        // (tcpdump's timeout): wait for the run's last block, so that it counts every packet.
        thread::sleep(TCPDUMP_BLOCK_TIMEOUT + Duration::from_millis(200));
        self.interrupt();
        let mut said = String::new();
        let _ = self.stderr.read_to_string(&mut said);
        let _ = self.child.wait();
        counts(&said)
            .ok_or_else(|| format!("tcpdump ended without its counts:\n{}{said}", self.started))
    }

    fn interrupt(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: a plain signal to our own child, which has not been waited for yet (its
            // PID cannot have been reused).
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.interrupt();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    #[test]
    fn capture_flags() {
        assert_eq!(options(&[]), Ok((5, 3)));
        assert_eq!(options(&args("--seconds 10 --rounds 2")), Ok((2, 10)));
        assert!(options(&args("--seconds 0")).unwrap_err().contains("must be at least 1"));
        let error = options(&args("--rounds")).unwrap_err();
        assert_eq!(error, format!("--rounds needs a number\n{USAGE}"));
        let error = options(&args("--pin 1")).unwrap_err();
        assert_eq!(error, format!("unknown option `--pin`\n{USAGE}"));
    }

    #[test]
    fn reads_tcpdumps_counts_as_it_prints_them() {
        // tcpdump 4.99's last words on SIGINT (and a first line that is not a count).
        let said = "tcpdump: listening on lo, link-type EN10MB (Ethernet), snapshot length 134 \
                    bytes\n1104010 packets captured\n2208020 packets received by filter\n\
                    7 packets dropped by kernel\n";
        let read = counts(said).expect("both counts");
        assert_eq!((read.captured, read.dropped), (1_104_010, 7));
        assert!(
            counts("tcpdump: lo: You don't have permission to capture on that device\n").is_none()
        );
    }
}
