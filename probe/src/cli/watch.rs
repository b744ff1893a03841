//! `ackscope watch --port PORT`: another program's connections to or from a port of this host,
//! explained as they run, without touching the program (docs/WATCH.md).
//!
//! The watch is a source like a run: its events (`crate::watch::watcher`) go through the same
//! tally as a run's and the same session file, so `show`, `export` and the page read a watch's
//! file as they read a run's. It ends on Ctrl-C or after `--duration`.

use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
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
use crate::watch::child::{self, WatchedCommand};
use crate::watch::metrics::{self, Published};
use crate::watch::process;
use crate::watch::sock_diag::{self, TcpState};
use crate::watch::tune::{Trials, Try};
use crate::watch::watcher::{Evidence, WatchCounts, Watcher};
use crate::watch::Handed;
use crate::{host, interrupt};

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// A port of this host to watch: every connection to or from it, in both directions (the
    /// side on the port is the server). Repeat for up to 8 ports.
    #[arg(long = "port", value_name = "PORT",
          value_parser = clap::value_parser!(u16).range(1..))]
    ports: Vec<u16>,
    /// Watch the ports of a process's TCP sockets now: those it listens on, and the server
    /// ports of the connections it made (other programs' connections on those ports are
    /// watched too). Another user's process needs root.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// End the watch after this long (500ms, 10s, 2m); a command started with `--` runs on,
    /// unwatched, and ackscope exits with its status when it ends [default: on Ctrl-C, or when
    /// the command exits]
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
    /// CAP_SYS_PTRACE; on a command started with `--`, no privilege)
    #[arg(long = "try", value_name = "OPTION=SIDE", value_parser = parse_try)]
    tries: Vec<Try>,
    /// Watch the programs as they are for this long (500ms, 10s, 2m) before the --try options
    /// go into force: run 1 of the session is the programs without them, run 2 with them
    /// [default: at once]
    #[arg(long, value_name = "DURATION", requires = "tries", value_parser = parse_duration_ms)]
    try_after: Option<u32>,
    /// Start COMMAND with its ARGS as ackscope's child and watch the ports its processes use
    /// as they use them (added to any --port or --pid). The watch ends when it exits, and
    /// ackscope exits with its status (128 + N if signal N ended it); `--try` changes its
    /// sockets without root. On Ctrl-C or SIGTERM, ackscope passes the signal on to it if it
    /// has not ended 0.3 s later; after --duration it runs on (docs/WATCH.md)
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
    /// Serve the watch's stalls, exchanges and losses in Prometheus's text format at
    /// http://ADDR/metrics while it runs: PORT (on 127.0.0.1), or ADDR:PORT; off loopback,
    /// scrapes need the token (docs/WATCH.md)
    #[arg(long, value_name = "ADDR", value_parser = metrics::parse_addr)]
    metrics: Option<std::net::SocketAddr>,
    /// The token /metrics requires off loopback, as `Authorization: Bearer TOKEN`; 16 to 128
    /// printable characters [default: a fresh random one, printed at start]
    #[arg(long, value_name = "TOKEN", requires = "metrics", value_parser = metrics::parse_token)]
    metrics_token: Option<String>,
}

fn parse_try(text: &str) -> Result<Try, String> {
    text.parse()
}

pub fn watch(args: &WatchArgs) -> Result<Ended, Failure> {
    if args.ports.is_empty() && args.pid.is_none() && args.command.is_empty() {
        let what = match args.tries.first() {
            Some(first) => format!("--try {first} has nothing to apply it to"),
            None => "nothing to watch".into(),
        };
        return Err(Failure::Usage(format!(
            "{what}: give a port (--port 8080), a process (--pid 4242), or a command to start \
             and watch (ackscope watch -- python3 app.py)"
        )));
    }
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
    // A command's ports come as it uses them: none given is no problem then.
    if !ports.is_empty() || args.command.is_empty() {
        checked.map_err(|e| Failure::Usage(format!("--port: {}", e.problem)))?;
    }
    // What can fail before the watch is made first: a command is not started for a watch that
    // cannot begin (an unwritable file, a port in use).
    let mut file = match &args.output {
        Some(path) => Some(SessionWriter::create(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let mut metrics = match args.metrics {
        Some(addr) => Some(Published::start(addr, args.metrics_token.as_deref(), &ports)?),
        None => None,
    };
    let mut command = match start_command(args, &mut ports) {
        Started::Watching(command) => command,
        Started::Ended(ended) => {
            // Nothing was watched: no file is left behind, empty, for it.
            if let (Some(writer), Some(path)) = (file.take(), &args.output) {
                drop(writer);
                let _ = std::fs::remove_file(path);
            }
            return Ok(ended);
        }
    };
    let clock = Clock::start();
    let mut watcher = Watcher::open(&ports, clock).map_err(|e| Failure::Run(e.to_string()))?;
    watcher.trials = Trials::new(args.tries.clone());
    if let Some(ms) = args.try_after {
        watcher.trials.not_before(Instant::now() + Duration::from_millis(u64::from(ms)));
    }
    if let Some(command) = &command {
        watcher.trials.limit_to(command.scope());
    }
    if let Some(published) = &metrics {
        // The command's ports found before the watch began, at zero from now on.
        ports.iter().for_each(|&port| {
            published.metrics.watch_port(port);
        });
    }
    watcher.metrics = metrics.as_ref().map(|published| std::sync::Arc::clone(&published.metrics));
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
    let mut run = RunId(1);
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
    if let Some(published) = &mut metrics {
        published.feed.attach(&mut tally.run);
    }
    let mut progress = Progress::new(args.json);
    let has_packets = watcher.has_packets();
    let packets_via = watcher.packets_via();
    let mut write_error: Option<String> = None;
    // `--try`: the run before the options went into force, once they did (the session splits
    // there, docs/WATCH.md).
    let mut before: Option<Tally> = None;
    let (outcome, counts) = crate::watch::run_until(
        watcher,
        &spec,
        stop,
        |handed| match handed {
            Handed::Events(events) => {
                tally.push(&events);
                if let Some(published) = &mut metrics {
                    published.feed.push(&events, &mut tally.run);
                }
                progress.update(&tally);
                keep_events(&mut file, &mut write_error, run, events, stop);
            }
            // The `--try` flags are one group: its first record is the split, the only one.
            Handed::Tried { tried, .. } => {
                if before.is_none() {
                    // The programs as they were end here; the run that follows has the options.
                    let finished = ToBrowser::RunFinished { run, outcome: RunOutcome::Completed };
                    keep_message(&mut file, &mut write_error, &finished, stop);
                    run = RunId(run.0 + 1);
                    let spec = scenario.clone();
                    let started = ToBrowser::RunStarted { run, spec, instruments };
                    keep_message(&mut file, &mut write_error, &started, stop);
                    let mut after = Tally::new(&scenario);
                    if let Some(published) = &mut metrics {
                        published.feed.attach(&mut after.run);
                    }
                    let mut ended = std::mem::replace(&mut tally, after);
                    if let RunAnalyses::Watched(watched) = &mut ended.run.analysis {
                        watched.finish();
                    }
                    if let Some(published) = &mut metrics {
                        published.feed.carry_over(&mut ended.run);
                    }
                    before = Some(ended);
                }
                tally.run.tried.take(&tried);
                let message = ToBrowser::OptionsTried { run, tried };
                keep_message(&mut file, &mut write_error, &message, stop);
            }
        },
        |note| {
            // A process names itself: printed as data.
            let _ = writeln!(Printable::terminal(io::stderr().lock()), "ackscope: tried {note}");
        },
        |watcher| command.as_mut()?.step(watcher, &mut |line| say(&line)),
    );
    progress.finish();
    let mut timer = String::new();
    if let RunAnalyses::Watched(watched) = &mut tally.run.analysis {
        watched.finish();
        timer = watched.kernel_words();
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
    let scenario = match (&mut command, scenario) {
        (Some(command), Scenario::Watch(spec)) => {
            command_after_watch(command, &outcome);
            // The ports found after the watch began too (the file's header names those it
            // began with).
            let ports = command.watched_ports().to_vec();
            Scenario::Watch(if ports.is_empty() { spec } else { WatchSpec { ports, ..spec } })
        }
        (_, scenario) => scenario,
    };
    print_runs(before.as_ref(), &tally, &scenario, &outcome, args.json)?;
    if !args.json {
        let timer =
            matches!(&evidence, Evidence::PacketsAndTcpInfo { timer: Ok(()), .. }).then_some(timer);
        print_counts(&mut Printable::terminal(io::stdout().lock()), &counts, timer)
            .map_err(|e| Failure::Run(format!("writing the summary: {e}")))?;
    }
    let status = command.as_mut().and_then(|command| command_ends(command, stop));
    if let (Some(message), Some(path)) = (write_error, &args.output) {
        return Err(Failure::Run(format!(
            "the watch stopped: its file is incomplete: {message}; the summary above covers what \
             was watched, and {} holds every message written before the error (free some space, \
             or write to another disk with -o)",
            path.display()
        )));
    }
    match outcome {
        _ if status.is_some() && !matches!(outcome, RunOutcome::Failed { .. }) => {
            Ok(Ended::Status(status.map_or(1, child::exit_code)))
        }
        RunOutcome::Completed => Ok(Ended::Ok),
        RunOutcome::Interrupted => Ok(Ended::Interrupted),
        RunOutcome::Failed { error } => Err(Failure::Run(format!("the watch stopped: {error}"))),
    }
}

/// The watch's summary: of its one run, or with `--try` of the run before the options went
/// into force and of the run with them. `--json` prints one object then too: the run after,
/// with the run before as its `before`.
fn print_runs(
    before: Option<&Tally>,
    after: &Tally,
    scenario: &Scenario,
    outcome: &RunOutcome,
    json: bool,
) -> Result<(), Failure> {
    let Some(before) = before else { return print_summary(after, scenario, outcome, json) };
    let printed = if json {
        let mut report = after.report(scenario, outcome);
        report.before = Some(Box::new(before.report(scenario, &RunOutcome::Completed)));
        let report = serde_json::to_value(report).expect("a report is plain data");
        writeln!(Printable::json(io::stdout().lock()), "{report}")
    } else {
        let mut out = Printable::terminal(io::stdout().lock());
        writeln!(out, "run 1, before the options were tried")
            .and_then(|()| before.print(&mut out, scenario, &RunOutcome::Completed))
            .and_then(|()| writeln!(out, "run 2, with the options tried"))
            .and_then(|()| after.print(&mut out, scenario, outcome))
    };
    printed.map_err(|e| Failure::Run(format!("writing the summary: {e}")))
}

/// Writes `message` to the session file, as [`keep_events`] writes events: a failed write is
/// kept in `write_error` and stops the watch, and nothing more is written.
fn keep_message(
    file: &mut Option<SessionWriter>,
    write_error: &mut Option<String>,
    message: &ToBrowser,
    stop: &AtomicBool,
) {
    if let (None, Some(writer)) = (&*write_error, file) {
        *write_error = writer.write(message).err().map(|e| e.to_string());
        if write_error.is_some() {
            stop.store(true, Ordering::SeqCst);
        }
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

/// A line on standard error; a command's words are printed as data.
fn say(line: &str) {
    let _ = writeln!(Printable::terminal(io::stderr().lock()), "ackscope: {line}");
}

/// What starting `watch -- COMMAND` came to.
enum Started {
    /// The watch goes on: with the command, if one was given.
    Watching(Option<Box<WatchedCommand>>),
    /// The command could not start, or ended before it used a TCP port (or Ctrl-C came
    /// first): nothing was watched, and ackscope ends so.
    Ended(Ended),
}

/// `watch -- COMMAND`: starts the command and, when no port was given, waits until its
/// processes use one, adding what it found to `ports` (up to the watch's 8).
fn start_command(args: &WatchArgs, ports: &mut Vec<u16>) -> Started {
    if args.command.is_empty() {
        return Started::Watching(None);
    }
    // Ctrl-C is the watch's from the moment the command runs: the command's status is
    // ackscope's, and ackscope is there to report it.
    let stop = interrupt::install();
    let mut command = match WatchedCommand::start(&args.command, ports) {
        Ok(command) => command,
        Err(refused) => {
            say(&refused.message);
            return Started::Ended(Ended::Status(refused.code));
        }
    };
    say(&format!(
        "started `{}` (pid {}); watching the ports its processes use as they use them",
        command.words, command.pid
    ));
    if !ports.is_empty() {
        return Started::Watching(Some(Box::new(command)));
    }
    let Some(found) = command.first_ports(stop) else {
        let status = match command.exited() {
            Some(status) => Some(status),
            None => command.end_with_the_watch(),
        };
        return Started::Ended(match status {
            Some(status) => {
                say(&format!(
                    "`{}` {} before it used a TCP port: nothing was watched",
                    command.words,
                    child::status_words(status)
                ));
                Ended::Status(child::exit_code(status))
            }
            None => {
                say(&left_running(&command));
                Ended::Interrupted
            }
        });
    };
    for port in found {
        if ports.len() < WatchSpec::MAX_PORTS {
            ports.push(port);
        } else {
            say(&format!(
                "`{}` uses port {port} too: not watched, past the {} ports a watch takes (watch \
                 it in another: ackscope watch --port {port})",
                command.words,
                WatchSpec::MAX_PORTS
            ));
        }
    }
    say(&format!("`{}` (pid {}) uses {}", command.words, command.pid, ports_text(ports)));
    Started::Watching(Some(Box::new(command)))
}

/// The watch ended, every option put back, the file finished: on Ctrl-C or SIGTERM the
/// command is ended too (given 0.3 s, then the signal passed on); how it ended is said.
fn command_after_watch(command: &mut WatchedCommand, outcome: &RunOutcome) {
    if matches!(outcome, RunOutcome::Interrupted) && command.exited().is_none() {
        command.end_with_the_watch();
    }
    if let Some(status) = command.exited() {
        say(&ended_words(command, status));
    }
}

/// After the summary: the command's status, waiting for it if the watch ended first by
/// `--duration` or an error (it runs on, unwatched); `None` if ackscope leaves it running.
fn command_ends(command: &mut WatchedCommand, stop: &AtomicBool) -> Option<ExitStatus> {
    if let Some(status) = command.exited() {
        return Some(status);
    }
    if command.passed_on().is_some() || interrupt::signal().is_some() {
        say(&left_running(command));
        return None;
    }
    // The watch was stopped by a file it could not write, not by a signal: the command runs
    // on, waited for, until it ends or a Ctrl-C comes.
    stop.store(false, Ordering::SeqCst);
    say(&format!(
        "the watch ended; `{}` (pid {}) runs on, unwatched, every option tried on it put back: \
         ackscope exits with its status when it ends (Ctrl-C ends both)",
        command.words, command.pid
    ));
    let status = command.runs_on(stop);
    match status {
        Some(status) => say(&ended_words(command, status)),
        None => say(&left_running(command)),
    }
    status
}

/// "`python3 app.py` (pid 4242) exited with status 0", and the signal ackscope passed on.
fn ended_words(command: &WatchedCommand, status: ExitStatus) -> String {
    let passed_on = command.passed_on().map_or(String::new(), |signal| {
        format!(", after ackscope passed signal {signal}{} on to it", child::signal_name(signal))
    });
    format!("`{}` (pid {}) {}{passed_on}", command.words, command.pid, child::status_words(status))
}

fn left_running(command: &WatchedCommand) -> String {
    let signal = command.passed_on().map_or(String::new(), |signal| {
        format!(" after signal {signal}{}", child::signal_name(signal))
    });
    format!(
        "`{}` (pid {}) is still running{signal}: left running, no longer watched; every option \
         tried on it was put back",
        command.words, command.pid
    )
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
