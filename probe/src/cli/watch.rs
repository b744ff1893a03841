//! `ackscope watch --port PORT`: another program's connections to or from a port of this host,
//! explained as they run, without touching the program (docs/WATCH.md).
//!
//! The watch is a source like a run: its events (`crate::watch::watcher`) go through the same
//! tally as a run's and the same session file, so `show`, `export` and the page read a watch's
//! file as they read a run's. It ends on Ctrl-C or after `--duration`.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ackscope_shared::reduce::RunAnalyses;
use ackscope_shared::wire::{Hello, RunOutcome, ToBrowser};
use ackscope_shared::{RunId, Scenario, WatchSpec};

use super::knobs::parse_duration_ms;
use super::run::{finish_file, keep_events, print_summary, write_to, Tally};
use super::terminal::Printable;
use super::{Ended, Failure};
use crate::capture::CaptureReport;
use crate::net::record::Clock;
use crate::record::SessionWriter;
use crate::watch::process;
use crate::watch::sock_diag::{self, TcpState};
use crate::watch::tune::{Trials, Try};
use crate::watch::watcher::{Evidence, WatchCounts, Watcher};
use crate::{host, interrupt};

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// A port of this host to watch: every connection to or from it, in both directions (the
    /// side on the port is the server). Repeat for up to 8 ports.
    #[arg(long = "port", value_name = "PORT", required_unless_present = "pid",
          value_parser = clap::value_parser!(u16).range(1..))]
    ports: Vec<u16>,
    /// Watch the ports of a process's TCP sockets now: those it listens on, and the server
    /// ports of the connections it made (other programs' connections on those ports are
    /// watched too). Another user's process needs root.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// End the watch after this long (500ms, 10s, 2m) [default: on Ctrl-C]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    duration: Option<u32>,
    /// Write the session to FILE, for `ackscope show`, `export` and the web app
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Print the summary as one JSON object (the `run --json` object, docs/CLI.md)
    #[arg(long)]
    json: bool,
    /// Try a socket option on the watched programs' sockets while watching, put back when the
    /// watch ends: nodelay=client, nodelay=server or nodelay=both (repeatable; root, or
    /// CAP_SYS_PTRACE)
    #[arg(long = "try", value_name = "OPTION=SIDE", value_parser = parse_try)]
    tries: Vec<Try>,
}

fn parse_try(text: &str) -> Result<Try, String> {
    text.parse()
}

pub fn watch(args: &WatchArgs) -> Result<Ended, Failure> {
    let mut ports = args.ports.clone();
    if let Some(pid) = args.pid {
        let of_process = process::ports_of(pid).map_err(Failure::Run)?;
        // A process names itself: printed as data.
        let _ = writeln!(
            Printable::terminal(io::stderr().lock()),
            "ackscope: process {pid} ({}) uses {}",
            process::command_of(pid),
            ports_text(&of_process)
        );
        ports.extend(of_process);
    }
    ports.sort_unstable();
    ports.dedup();
    let checked = WatchSpec { ports: ports.clone(), ..WatchSpec::default() }.validate();
    checked.map_err(|e| Failure::Usage(format!("--port: {}", e.problem)))?;
    let clock = Clock::start();
    let mut watcher = Watcher::open(&ports, clock).map_err(|e| Failure::Run(e.to_string()))?;
    watcher.trials = Trials::new(args.tries.clone());
    if let Evidence::TcpInfoOnly { .. } = &watcher.evidence {
        eprintln!("ackscope: watching with {}", watcher.evidence.describe());
    }
    say_what_listens(&ports);
    let spec = WatchSpec {
        ports: ports.clone(),
        pid: args.pid,
        duration_ms: args.duration,
        evidence: watcher.evidence.describe(),
    };
    let scenario = Scenario::Watch(spec.clone());
    let instruments = watcher.evidence.instruments();
    let evidence = watcher.evidence.clone();
    let mut file = match &args.output {
        Some(path) => Some(SessionWriter::create(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let run = RunId(1);
    write_to(
        &mut file,
        &ToBrowser::Hello(Hello::current(env!("CARGO_PKG_VERSION"), host::facts())),
    )?;
    write_to(&mut file, &ToBrowser::RunStarted { run, spec: scenario.clone(), instruments })?;
    // Ctrl-C is the watch's end from the moment it says it watches, never the default kill.
    let stop = interrupt::install();
    // On standard error with --json too: the moment packets are taken, for scripts to wait on.
    eprintln!(
        "ackscope: watching {} on this host; Ctrl-C ends the watch and prints its summary",
        ports_text(&ports)
    );

    let mut tally = Tally::new(&scenario);
    let mut progress = Progress::new(args.json);
    let has_packets = watcher.has_packets();
    let packets_via = watcher.packets_via();
    let mut write_error: Option<String> = None;
    let (outcome, counts) = crate::watch::run(
        watcher,
        &spec,
        stop,
        |events| {
            tally.push(&events);
            progress.update(&tally);
            keep_events(&mut file, &mut write_error, run, events, stop);
        },
        |note| {
            // A process names itself: printed as data.
            let _ = writeln!(Printable::terminal(io::stderr().lock()), "ackscope: tried {note}");
        },
    );
    progress.finish();
    let mut timer = String::new();
    if let RunAnalyses::Watched(watched) = &mut tally.run.analysis {
        watched.finish();
        timer = watched.timer_words();
    }
    if counts.dropped > 0 {
        eprintln!(
            "ackscope: the kernel dropped {} of the ports' packets for a full ring: the watch fell \
             behind (the watched programs were not slowed); exchanges and stalls around them may \
             be missing",
            counts.dropped
        );
    }
    if has_packets {
        // The summary's capture line and `capture` object, as a run's: how many, any dropped.
        tally.capture = Some(CaptureReport {
            via: packets_via,
            segments: counts.packets,
            dropped: u32::try_from(counts.dropped).unwrap_or(u32::MAX),
            kernel_packets: counts.kernel_packets,
            ..CaptureReport::default()
        });
    }
    let outcome = match (&write_error, outcome) {
        (Some(error), _) => {
            RunOutcome::Failed { error: format!("writing the session file: {error}") }
        }
        (None, outcome) => outcome,
    };
    let write_error = finish_file(file.take(), write_error, run, &outcome, &tally);
    print_summary(&tally, &scenario, &outcome, args.json)?;
    if !args.json {
        let timer =
            matches!(&evidence, Evidence::PacketsAndTcpInfo { timer: Ok(()) }).then_some(timer);
        print_counts(&mut Printable::terminal(io::stdout().lock()), &counts, timer)
            .map_err(|e| Failure::Run(format!("writing the summary: {e}")))?;
    }
    if let (Some(message), Some(path)) = (write_error, &args.output) {
        return Err(Failure::Run(format!(
            "the watch stopped: its file is incomplete: {message}; the summary above covers what \
             was watched, and {} holds every message written before the error (free some space, \
             or write to another disk with -o)",
            path.display()
        )));
    }
    match outcome {
        RunOutcome::Completed => Ok(Ended::Ok),
        RunOutcome::Interrupted => Ok(Ended::Interrupted),
        RunOutcome::Failed { error } => Err(Failure::Run(format!("the watch stopped: {error}"))),
    }
}

/// One line per watched port that nothing on this host listens on: the watch goes on (the
/// service may start later, or be on another host with its clients here).
fn say_what_listens(ports: &[u16]) {
    let Ok(listing) = sock_diag::on_ports(ports, sock_diag::MAX_SOCKETS) else { return };
    for port in ports {
        let listens =
            listing.sockets.iter().any(|s| s.state == TcpState::Listen && s.local.port() == *port);
        if !listens {
            eprintln!(
                "ackscope: nothing on this host listens on port {port} now; watching it anyway \
                 (a service that starts later, or clients here of a server elsewhere, show up)"
            );
        }
    }
}

fn ports_text(ports: &[u16]) -> String {
    WatchSpec { ports: ports.to_vec(), ..WatchSpec::default() }.ports_text()
}

/// What only the watch knows, after the summary: its connections, its packets, and with the
/// kernel's delayed-ACK timer watched, what it did (`timer`).
fn print_counts(
    out: &mut impl Write,
    counts: &WatchCounts,
    timer: Option<String>,
) -> io::Result<()> {
    writeln!(out, "  connections    {}", counts.connections)?;
    for line in &counts.named {
        writeln!(out, "    {line}")?;
    }
    if counts.connections > counts.named.len() as u64 {
        writeln!(out, "    ... and {} more", counts.connections - counts.named.len() as u64)?;
    }
    writeln!(out, "  TCP_INFO       {} samples", counts.samples)?;
    for line in &counts.tried {
        writeln!(out, "  tried          {line}")?;
    }
    if let Some(timer) = timer {
        writeln!(out, "  kernel         {timer}")?;
        if counts.timer_records_lost > 0 {
            writeln!(
                out,
                "                 {} of the timer's records were lost for a full ring: the \
                 counts above are short by as many",
                counts.timer_records_lost
            )?;
        }
    }
    if counts.ipv6_connections > 0 {
        writeln!(
            out,
            "  IPv6           {} connections, TCP_INFO only (the packet filter takes IPv4)",
            counts.ipv6_connections
        )?;
    }
    if counts.sockets_left_out > 0 {
        writeln!(
            out,
            "  left out       up to {} sockets a listing, past the {} kept (their TCP_INFO)",
            counts.sockets_left_out,
            crate::watch::sock_diag::MAX_SOCKETS
        )?;
    }
    if counts.connections_left_out > 0 {
        writeln!(
            out,
            "  left out       {} packets or samples of connections past the {} followed at once",
            counts.connections_left_out,
            ackscope_shared::exchange::MAX_OPEN_CONNECTIONS
        )?;
    }
    Ok(())
}

/// A progress line on the terminal (never when standard error is not one, or with --json).
struct Progress {
    enabled: bool,
    started: Instant,
    drawn: Option<Instant>,
}

impl Progress {
    fn new(json: bool) -> Progress {
        Progress {
            enabled: !json && io::stderr().is_terminal(),
            started: Instant::now(),
            drawn: None,
        }
    }

    fn update(&mut self, tally: &Tally) {
        if !self.enabled || self.drawn.is_some_and(|at| at.elapsed() < Duration::from_millis(200)) {
            return;
        }
        self.drawn = Some(Instant::now());
        let exchanges = match &tally.run.analysis {
            RunAnalyses::Watched(watched) => watched.exchanges.answered(),
            _ => 0,
        };
        eprint!(
            "\r\x1b[2K{exchanges} exchanges, {} events ({:.0} s)",
            tally.run.events,
            self.started.elapsed().as_secs_f64()
        );
    }

    fn finish(&self) {
        if self.enabled && self.drawn.is_some() {
            eprint!("\r\x1b[2K");
        }
    }
}
