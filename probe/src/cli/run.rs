//! `ackscope run`: one experiment, headless, with its summary on standard output.
//!
//! One file, though long: the command's flags, its summary's words (printed and `--json`) and its
//! progress line are one command's; what it counts is shared's (`reduce::RunTally`).

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ackscope_shared::attribution::ClassSummary;
use ackscope_shared::budget;
use ackscope_shared::bulk::BulkSummary;
use ackscope_shared::overview::Overview;
use ackscope_shared::presets::{self, PRESETS};
use ackscope_shared::reduce::{Figures, RunAnalyses, RunTally};
use ackscope_shared::report::{
    CaptureFigures, ClientCount, LiveFacts, NetnsPlace, RemoteFigures, ReportOutcome, RunReport,
};
use ackscope_shared::wire::{Hello, Instruments, RunOutcome, ToBrowser};
use ackscope_shared::{BulkSpec, Event, RrSpec, RunId, Scenario, Summary};

use super::knobs::{self, BulkKnobs, CommonKnobs, RrKnobs};
use super::sweep;
use super::terminal::Printable;
use super::{Ended, Failure};
use crate::capture::{CaptureReport, Via};
use crate::record::SessionWriter;
use crate::{emulate, host, interrupt, scenario};

/// Spec files are small; anything bigger is not one.
const MAX_SPEC_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// rr, bulk, or a preset (story1, story1-nodelay, ...: see --list)
    #[arg(value_name = "SCENARIO", required_unless_present_any = ["spec", "list"])]
    scenario: Option<String>,
    /// Run the spec in this JSON file (as printed by --print-spec); flags still override it
    #[arg(long, value_name = "FILE", conflicts_with = "scenario")]
    spec: Option<PathBuf>,
    /// Print the spec as JSON instead of running it
    #[arg(long)]
    print_spec: bool,
    /// List the presets
    #[arg(long)]
    list: bool,
    #[command(flatten)]
    rr: RrKnobs,
    #[command(flatten)]
    bulk: BulkKnobs,
    #[command(flatten)]
    common: CommonKnobs,
    /// Print one JSON object instead of the table (fields: docs/CLI.md)
    #[arg(long, help_heading = "Output")]
    json: bool,
    /// Write the session to FILE while it runs (docs/FORMAT.md)
    #[arg(short = 'o', long = "output", value_name = "FILE", help_heading = "Output")]
    output: Option<PathBuf>,
    /// Do not record events (only to measure what recording costs; the summary is then empty)
    #[arg(long, help_heading = "Instruments")]
    no_events: bool,
    /// Do not read TCP_INFO at syscalls or while blocked
    #[arg(long, help_heading = "Instruments")]
    no_tcp_info: bool,
    /// How often TCP_INFO is read while a call is blocked, in microseconds; 0: never
    #[arg(long, value_name = "US", default_value_t = 1000, help_heading = "Instruments")]
    tcp_info_interval_us: u32,
    /// Bulk only: one run per server SO_RCVBUF in LIST (16k,64k,256k,1m,auto) and a table of
    /// asked, getsockopt, window, window/RTT and measured goodput (story 2)
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = sweep::parse_size,
          help_heading = "Bulk transfer (bulk)")]
    sweep_rcvbuf: Option<Vec<Option<u32>>>,
    /// Capture the run's packets: on lo (AF_PACKET; needs CAP_NET_RAW), or with --link at the
    /// link's relay (docs/CAPTURE.md)
    #[arg(long, help_heading = "Instruments")]
    capture: bool,
    /// Run the server side on the `ackscope server` at HOST:PORT (another host), with the
    /// server-side knobs applied there (docs/REMOTE.md)
    #[arg(long, value_name = "HOST:PORT", requires = "token", help_heading = "Two hosts")]
    remote: Option<String>,
    /// The token that `ackscope server` printed
    #[arg(long, value_name = "TOKEN", requires = "remote", help_heading = "Two hosts")]
    token: Option<String>,
    /// rr only: put the server's sockets in network namespace NAME (made with `ip netns add`,
    /// or a path such as /proc/PID/ns/net; needs root), so the run crosses the real path to it
    /// (a veth pair, with or without tc netem); both sides stay in this process, on one clock
    /// (docs/REMOTE.md)
    #[arg(
        long,
        value_name = "NAME",
        requires = "server_ip",
        conflicts_with = "remote",
        help_heading = "Two namespaces"
    )]
    server_netns: Option<String>,
    /// The address in NAME that the server listens on and the client connects to
    #[arg(long, value_name = "IPV4", requires = "server_netns", help_heading = "Two namespaces")]
    server_ip: Option<std::net::Ipv4Addr>,
}

impl RunArgs {
    fn instruments(&self) -> Instruments {
        Instruments {
            events: !self.no_events,
            tcp_info_at_syscalls: !self.no_tcp_info,
            tcp_info_interval_us: if self.no_tcp_info { 0 } else { self.tcp_info_interval_us },
            capture: self.capture,
        }
    }

    /// Where the server side runs: `--remote` only for what can run across hosts.
    fn target(
        &self,
        scenario: &Scenario,
        instruments: Instruments,
    ) -> Result<scenario::Target, Failure> {
        if let (Some(name), Some(ip)) = (&self.server_netns, self.server_ip) {
            if let Some(refusal) = scenario::server_netns_refusal(scenario, instruments) {
                return Err(Failure::Usage(refusal.into()));
            }
            // Whether the namespace is there, may be entered and reaches `ip` is found as the
            // run starts, which then ends with that one error (below, in `run`).
            return Ok(scenario::Target::ServerNetns { name: name.clone(), ip });
        }
        let (Some(server), Some(token)) = (&self.remote, &self.token) else {
            return Ok(scenario::Target::Local);
        };
        let refuse = |why: &str| Err(Failure::Usage(format!("--remote: {why}")));
        if self.sweep_rcvbuf.is_some() {
            return refuse(
                "--sweep-rcvbuf runs each size locally; give one --server-rcvbuf per remote run",
            );
        }
        match scenario {
            Scenario::Rr(RrSpec { link: Some(_), .. })
            | Scenario::Bulk(BulkSpec { link: Some(_), .. }) => return refuse(
                "--link emulates a path on this host; across hosts the path is the real network",
            ),
            Scenario::Rr(_) | Scenario::Bulk(_) => {}
            _ => return refuse("only rr and bulk runs have a remote server side"),
        }
        if instruments.capture {
            return refuse("--capture is not available across hosts yet; capture with tcpdump on each host and `ackscope import` the files");
        }
        Ok(scenario::Target::Remote { server: server.clone(), token: token.clone() })
    }

    /// The spec to run: the preset, spec file or default, with the flags applied and checked.
    fn scenario(&self) -> Result<Scenario, Failure> {
        let mut scenario = match (&self.spec, self.scenario.as_deref()) {
            (Some(path), _) => read_spec(path)?,
            (None, Some("rr")) => Scenario::Rr(RrSpec::default()),
            (None, Some("bulk")) => Scenario::Bulk(BulkSpec::default()),
            (None, Some(name)) => match presets::find(name) {
                Some(preset) => (preset.build)(),
                None => {
                    return Err(Failure::Usage(format!(
                        "unknown scenario {name:?}: choose rr, bulk or a preset ({}); \
                         `ackscope run --list` describes them",
                        PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
                    )))
                }
            },
            (None, None) => {
                return Err(Failure::Usage("name a scenario, or give --spec FILE".into()))
            }
        };
        knobs::apply(&mut scenario, &self.rr, &self.bulk, &self.common).map_err(|flag| {
            Failure::Usage(format!(
                "{} does not apply to {} runs; see `ackscope run --help`",
                flag.0,
                scenario.name()
            ))
        })?;
        scenario.validate().map_err(|e| {
            let source = match &self.spec {
                Some(path) => format!("field {} in {}", e.field, path.display()),
                None => knobs::flag_of(e.field),
            };
            Failure::Usage(format!("{source}: {}", e.problem))
        })?;
        // Its buffers, before anything is allocated: the same words as a page's run, with the
        // command line's larger limit.
        let name = |field: &str| match &self.spec {
            Some(_) => field.to_string(),
            None => knobs::flag_of(field),
        };
        budget::check(&scenario, budget::COMMAND_LINE_LIMIT_BYTES, "a run", name)
            .map_err(Failure::Usage)?;
        Ok(scenario)
    }
}

fn read_spec(path: &Path) -> Result<Scenario, Failure> {
    let usage = |message: String| Failure::Usage(message);
    let size = std::fs::metadata(path)
        .map_err(|e| usage(format!("--spec {}: {e}", path.display())))?
        .len();
    if size > MAX_SPEC_FILE_BYTES {
        return Err(usage(format!(
            "--spec {}: {size} bytes is too large for a spec file",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--spec {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "--spec {}: {e}; print a valid one with `ackscope run story1 --print-spec`",
            path.display()
        ))
    })
}

pub fn run(args: &RunArgs) -> Result<Ended, Failure> {
    if args.list {
        for preset in PRESETS {
            println!("{:<26} {}", preset.name, preset.about);
        }
        return Ok(Ended::Ok);
    }
    let scenario = args.scenario()?;
    if args.print_spec {
        let json = serde_json::to_string_pretty(&scenario).expect("a spec is plain data");
        // A spec read with --spec carries the file's strings: printed as data.
        let _ = writeln!(Printable::json(io::stdout().lock()), "{json}");
        return Ok(Ended::Ok);
    }
    if scenario.link().is_some() {
        // Before any thread exists: a user namespace is refused to a multithreaded process.
        emulate::privilege::ensure_link_privileges().map_err(|e| Failure::Run(e.to_string()))?;
    }
    let instruments = args.instruments();
    let target = args.target(&scenario, instruments)?;
    if instruments.capture {
        check_capture(&scenario, instruments)?;
    }
    if let Some(sizes) = &args.sweep_rcvbuf {
        let Scenario::Bulk(base) = &scenario else {
            return Err(Failure::Usage("--sweep-rcvbuf applies to bulk runs".into()));
        };
        if args.output.is_some() {
            return Err(Failure::Usage("--sweep-rcvbuf makes several runs: leave out -o".into()));
        }
        return sweep::sweep(base, sizes, instruments, interrupt::install(), args.json);
    }
    let mut file = match &args.output {
        Some(path) => Some(SessionWriter::create(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let run = RunId(1);
    let header = [
        ToBrowser::Hello(Hello::current(env!("CARGO_PKG_VERSION"), host::facts())),
        ToBrowser::RunStarted { run, spec: scenario.clone(), instruments },
    ];
    for message in &header {
        write_to(&mut file, message)?;
    }
    let stop = interrupt::install();
    let mut tally = Tally::new(&scenario);
    let mut progress = Progress::new(&scenario, args.json);
    let mut write_error: Option<String> = None;
    let mut notes = scenario::RunNotes::default();
    let outcome =
        scenario::run_against(&scenario, instruments, &target, stop, &mut notes, |events| {
            tally.push(&events);
            progress.update(&tally);
            keep_events(&mut file, &mut write_error, run, events, stop);
        })
        .map_err(|e| Failure::Usage(format!("{}: {}", knobs::flag_of(e.field), e.problem)))?;
    progress.finish();
    let never_started = match &target {
        scenario::Target::Remote { .. } => notes.remote.is_none(),
        // Its clients never ran: the run ended as it placed the server.
        scenario::Target::ServerNetns { .. } => notes.clients_elapsed.is_zero(),
        scenario::Target::Local => false,
    };
    if let (true, RunOutcome::Failed { error }) = (never_started, &outcome) {
        // The remote server never started the run (refused, unreachable), or the namespace
        // could not take the server: one clear error, no summary of nothing.
        return Err(Failure::Run(error.clone()));
    }
    {
        let (late, _) = tally.run.left_out();
        if late > 0 {
            // Requests are retired only once their events are in, so this takes a producer
            // held so far behind that 65,536 requests waited for it, or a segment of a
            // connection's last request sent over 200 ms after it ended.
            let (events, were) = if late == 1 { ("event", "was") } else { ("events", "were") };
            tracing::warn!(
                "{late} {events} arrived after the request they belong to had been summarized \
                 and {were} left out of the counts below (a thread of the run was held off the \
                 CPU for long); a session file (-o) keeps every event"
            );
        }
    }
    tally.capture = notes.capture;
    tally.remote = notes.remote;
    if let scenario::Target::ServerNetns { name, ip } = &target {
        tally.server_netns = Some((name.clone(), *ip));
    }
    if matches!(scenario, Scenario::Rr(_)) {
        tally.clients = Some((notes.requests_completed, notes.clients_elapsed));
        tally.events_recorded = instruments.events;
    }
    let outcome = match (&write_error, outcome) {
        (Some(error), RunOutcome::Completed | RunOutcome::Interrupted) => {
            RunOutcome::Failed { error: format!("writing the session file: {error}") }
        }
        (_, outcome) => outcome,
    };
    let write_error = finish_file(file.take(), write_error, run, &outcome, &tally);
    // The summary is printed whatever happened to the file.
    print_summary(&tally, &scenario, &outcome, args.json)?;
    if let (Some(message), Some(path)) = (write_error, &args.output) {
        return Err(Failure::Run(format!(
            "the run stopped: its file is incomplete: {message}; the summary above covers what \
             ran, and {} holds every message written before the error (free some space, or \
             write to another disk with -o)",
            path.display()
        )));
    }
    match outcome {
        RunOutcome::Completed => Ok(Ended::Ok),
        RunOutcome::Interrupted => {
            eprintln!("ackscope: interrupted; the summary covers what ran");
            Ok(Ended::Interrupted)
        }
        RunOutcome::Failed { error } => {
            Err(Failure::Run(format!("the run stopped early: {error}")))
        }
    }
}

/// Ends a run's file: its `RunFinished`, then the overview behind the trailer a viewer finds
/// from the file's end. A file that already failed a write is left as it is (a full disk fails
/// again). Returns the write error, the earlier one or this one, if any.
pub(super) fn finish_file(
    file: Option<SessionWriter>,
    write_error: Option<String>,
    run: RunId,
    outcome: &RunOutcome,
    tally: &Tally,
) -> Option<String> {
    let (None, Some(mut writer)) = (&write_error, file) else { return write_error };
    let finished =
        writer.write(&ToBrowser::RunFinished { run, outcome: outcome.clone() }).and_then(|()| {
            let overview = tally.overview().map(|overview| (run, overview));
            writer.finish(overview.into_iter().collect())
        });
    finished.err().map(|e| e.to_string())
}

/// Prints a run's summary on standard output: the table, or with `json` the object of
/// docs/CLI.md.
pub(super) fn print_summary(
    tally: &Tally,
    scenario: &Scenario,
    outcome: &RunOutcome,
    json: bool,
) -> Result<(), Failure> {
    // A remote run's summary quotes the other host (its facts, why its side failed): as data,
    // escaped as JSON escapes in `--json` so that it stays valid JSON.
    let printed = if json {
        writeln!(Printable::json(io::stdout().lock()), "{}", tally.json(scenario, outcome))
    } else {
        tally.print(&mut Printable::terminal(io::stdout().lock()), scenario, outcome)
    };
    printed.map_err(|e| Failure::Run(format!("writing the summary: {e}")))
}

/// Packet capture is possible for this run: it fails here, before anything starts, if not.
/// On the emulated link the relay records the packets it moves, so no capture socket (and no
/// CAP_NET_RAW) is needed; on loopback one must open.
fn check_capture(scenario: &Scenario, instruments: Instruments) -> Result<(), Failure> {
    let on_link = match scenario {
        Scenario::Rr(spec) => spec.link.is_some(),
        _ => {
            return Err(Failure::Usage(format!(
                "--capture applies to request/response runs, not {} runs",
                scenario.name()
            )))
        }
    };
    if !instruments.events {
        return Err(Failure::Usage(
            "--capture records segments as events: leave out --no-events".into(),
        ));
    }
    if on_link {
        return Ok(());
    }
    match crate::capture::open() {
        Ok(_) => Ok(()),
        Err(e) => Err(Failure::Run(e.to_string())),
    }
}

/// Writes a batch of a run's (or a watch's) events to its file, if it has one and no write
/// failed before. A failure is kept in `write_error` and sets `stop`: what is recorded can no
/// longer be kept (a full disk), so the run stops as on Ctrl-C, within a step, instead of going
/// on unrecorded.
pub(super) fn keep_events(
    file: &mut Option<SessionWriter>,
    write_error: &mut Option<String>,
    run: RunId,
    events: Vec<Event>,
    stop: &std::sync::atomic::AtomicBool,
) {
    if let (None, Some(writer)) = (&*write_error, file) {
        *write_error = writer.write_events(run, events).err().map(|e| e.to_string());
        if write_error.is_some() {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

pub(super) fn write_to(
    file: &mut Option<SessionWriter>,
    message: &ToBrowser,
) -> Result<(), Failure> {
    match file {
        Some(writer) => writer.write(message).map_err(|e| Failure::Run(e.to_string())),
        None => Ok(()),
    }
}

/// A run's summary as events arrive: the shared reducer's tally of the run, and what only
/// the command that ran it knows.
pub struct Tally {
    /// Counts and analysis, the same as every reader of the run's file computes.
    pub run: RunTally,
    /// How the packet capture went, when there was one.
    pub capture: Option<CaptureReport>,
    /// Request/response runs: requests the client threads answered and how long they ran,
    /// counted by the threads themselves whether or not events are recorded.
    pub clients: Option<(u32, std::time::Duration)>,
    /// Whether the run recorded events (with `--no-events` the summary comes from `clients`).
    pub events_recorded: bool,
    /// A run against a remote server, as the run saw it (not in files).
    pub remote: Option<scenario::RemoteNotes>,
    /// `--server-netns`: the namespace and address of the server (not in files, whose
    /// connections show the address).
    pub server_netns: Option<(String, std::net::Ipv4Addr)>,
}

impl Tally {
    pub fn new(scenario: &Scenario) -> Tally {
        Tally::of(RunTally::new(scenario))
    }

    /// The summary of `run` as the reducer tallied it (a file's run: nothing else is known).
    pub fn of(run: RunTally) -> Tally {
        Tally {
            run,
            capture: None,
            clients: None,
            events_recorded: true,
            remote: None,
            server_netns: None,
        }
    }

    pub fn push(&mut self, events: &[Event]) {
        self.run.push(events, None);
    }

    /// The overview of the run's requests (request/response runs only).
    pub fn overview(&self) -> Option<Overview> {
        self.run.overview()
    }

    /// Stalls grouped by class and direction (request/response runs only).
    pub fn stall_classes(&self) -> Option<Vec<ClassSummary>> {
        self.run.stall_classes()
    }

    /// The documented JSON summary (docs/CLI.md): scripts rely on these names.
    pub fn json(&self, scenario: &Scenario, outcome: &RunOutcome) -> serde_json::Value {
        serde_json::to_value(self.report(scenario, outcome)).expect("a report is plain data")
    }

    /// The run's report: the `--json` contract, typed (`ackscope_shared::report`): the shared
    /// report of its tally, with what only this process knows of the run.
    pub fn report(&self, scenario: &Scenario, outcome: &RunOutcome) -> RunReport {
        let clients = self.clients.map(|(requests, elapsed)| {
            // The same window with recording on or off: from starting the client threads to
            // joining them.
            ClientCount::new(requests, elapsed.as_secs_f64())
        });
        let capture = self.capture.as_ref().map(|capture| CaptureFigures {
            via: capture.via.map(|via| via.name().to_string()),
            segments: capture.segments,
            offset_uncertainty_ns: capture.offset_uncertainty_ns,
            drift_ns: capture.drift_ns,
            dropped: capture.dropped,
            kernel_packets: capture.kernel_packets,
        });
        let remote = self.remote.as_ref().map(|remote| {
            let (server_outcome, server_error) = ReportOutcome::of(&remote.server_outcome);
            RemoteFigures {
                server: remote.server.clone(),
                same_host_offset_ns: remote.same_host_offset_ns,
                server_outcome,
                server_error,
                unmatched_events: remote.unmatched_events,
            }
        });
        let server_netns = self
            .server_netns
            .as_ref()
            .map(|(name, ip)| NetnsPlace { name: name.clone(), ip: ip.to_string() });
        let live =
            LiveFacts { clients, no_events: !self.events_recorded, capture, remote, server_netns };
        RunReport::of(&self.run, scenario, outcome, live)
    }

    pub fn print(
        &self,
        out: &mut impl Write,
        scenario: &Scenario,
        outcome: &RunOutcome,
    ) -> io::Result<()> {
        writeln!(out, "{}: {}", scenario.name(), scenario.describe())?;
        match self.run.figures() {
            Some(Figures::Rr(summary)) if matches!(scenario, Scenario::Watch(_)) => {
                print_rr(out, &summary, &WATCH_WORDS)?
            }
            Some(Figures::Rr(summary)) => print_rr(out, &summary, &RUN_WORDS)?,
            Some(Figures::Bulk(summary)) => print_bulk(out, &summary)?,
            None if matches!(scenario, Scenario::Watch(_)) => {
                match self.run.estimated_exchanges() {
                    Some(estimated) => writeln!(out, "  exchanges      {}", estimated.line())?,
                    None => writeln!(
                        out,
                        "  exchanges      none: no packet of the watched ports was read"
                    )?,
                }
            }
            None => {}
        }
        for class in self.stall_classes().unwrap_or_default() {
            writeln!(out, "  {}", class.line())?;
        }
        // A watch's run after `--try`: what it ran with, as the file records it.
        for tried in self.run.tried.entries() {
            writeln!(out, "  tried          {}", tried.describe())?;
        }
        if let Some(capture) = &self.capture {
            let way = capture.via.map_or("", Via::describe);
            let dropped = match capture.dropped {
                0 => "none dropped".to_string(),
                n => format!("{n} dropped for a full ring (see the warning above)"),
            };
            writeln!(out, "  capture        {} segments {way}, {dropped}", capture.segments)?;
        }
        if let Some(clock) = &self.run.clock {
            let place = match (&self.remote, &self.server_netns) {
                (Some(remote), _) => Some(remote.server.clone()),
                (None, Some((name, ip))) => Some(format!("in network namespace `{name}` at {ip}")),
                (None, None) => None,
            };
            writeln!(out, "  server         {}", clock.describe(place.as_deref()))?;
        }
        if let Some(remote) = &self.remote {
            if remote.unmatched_events > 0 {
                writeln!(
                    out,
                    "  unmatched      {} server events from connections this host did not \
                     make (NAT between the hosts?)",
                    remote.unmatched_events
                )?;
            }
        }
        match outcome {
            RunOutcome::Completed => Ok(()),
            RunOutcome::Interrupted => writeln!(out, "  interrupted    (Ctrl-C)"),
            RunOutcome::Failed { error } => writeln!(out, "  failed         {error}"),
        }
    }
}

/// The words of a request/response summary: a run's requests and stalled reads, or a watch's
/// exchanges (`ackscope_shared::exchange`, timed from packets) and the stalls its packets show.
struct RrWords {
    requests: &'static str,
    stalled: &'static str,
    meaning: &'static str,
}

const RUN_WORDS: RrWords = RrWords {
    requests: "requests",
    stalled: "stalled reads",
    meaning: ackscope_shared::analysis::STALLED_READS_MEANING,
};

const WATCH_WORDS: RrWords = RrWords {
    requests: "exchanges",
    stalled: "stalls",
    meaning: "an exchange: the client's request up to the server's last answer byte, on the \
              wire; stalls: waits the packets show, by the packet rule",
};

fn print_rr(out: &mut impl Write, s: &Summary, words: &RrWords) -> io::Result<()> {
    let RrWords { requests, stalled, meaning } = words;
    writeln!(
        out,
        "  {requests:<14} {} in {:.2} s ({:.1} {requests}/s)",
        s.requests, s.duration_s, s.rps
    )?;
    writeln!(
        out,
        "  latency        p50 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        s.p50_ms, s.p99_ms, s.max_ms
    )?;
    writeln!(out, "  {stalled:<14} {}", s.stalled_reads)?;
    writeln!(out, "  ({meaning})")
}

fn print_bulk(out: &mut impl Write, s: &BulkSummary) -> io::Result<()> {
    writeln!(out, "  transferred    {} bytes in {:.2} s", s.bytes, s.duration_s)?;
    writeln!(out, "  goodput        {:.1} Mbit/s", s.goodput_mbps)?;
    let bytes = |v: Option<u32>| v.map_or("not sampled".to_string(), |b| format!("{b} bytes"));
    writeln!(out, "  client sndbuf  {} (getsockopt)", bytes(s.client_sndbuf_bytes))?;
    writeln!(out, "  server rcvbuf  {} (getsockopt)", bytes(s.server_rcvbuf_bytes))?;
    writeln!(
        out,
        "  window         {} advertised by the server (TCP_INFO, median)",
        bytes(s.server_rcv_wnd_bytes)
    )?;
    let (waited_ms, probes) = s.closed_window();
    if let Some(ms) = waited_ms {
        writeln!(
            out,
            "  window-limited {:.2} s of the client's sending waited for the server's window \
             (TCP_INFO rwnd_limited)",
            f64::from(ms) / 1e3
        )?;
    }
    match probes {
        Some(probes) => writeln!(
            out,
            "  probes         {probes} zero-window probes from the client (TCP_INFO: segments \
             without data)"
        ),
        None => Ok(()),
    }
}

/// `[#########.....................]`: how much of `total` is done.
fn bar(done: u64, total: u64) -> String {
    let filled = (done.min(total) as u128 * BAR_WIDTH as u128 / u128::from(total.max(1))) as usize;
    format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled))
}

/// A progress line on the terminal for runs longer than a second (never when the output is
/// not a terminal, or with --json).
struct Progress {
    enabled: bool,
    started: Instant,
    last_drawn: Option<Instant>,
    /// Requests (rr) or bytes (bulk) the run will make at most, and their unit.
    total: u64,
    unit: &'static str,
}

/// Characters of the bar.
const BAR_WIDTH: usize = 30;

impl Progress {
    fn new(scenario: &Scenario, json: bool) -> Progress {
        let (total, unit) = match scenario {
            Scenario::Rr(spec) | Scenario::Server(spec) => (u64::from(spec.requests), "requests"),
            Scenario::Bulk(spec) => (spec.bytes, "bytes"),
            Scenario::Import(_) | Scenario::Watch(_) => (0, "segments"),
        };
        let enabled = !json && io::stderr().is_terminal();
        Progress { enabled, started: Instant::now(), last_drawn: None, total, unit }
    }

    fn update(&mut self, tally: &Tally) {
        let now = Instant::now();
        let due = self.last_drawn.is_none_or(|t| now - t >= Duration::from_millis(200));
        if !self.enabled || now - self.started < Duration::from_secs(1) || !due {
            return;
        }
        self.last_drawn = Some(now);
        let done = match tally.run.analysis {
            RunAnalyses::Bulk(_) => tally.run.bytes_read,
            _ => tally.run.requests_done,
        };
        eprint!(
            "\r\x1b[2K{} {done} of {} {} ({:.0} s)",
            bar(done, self.total),
            self.total,
            self.unit,
            self.started.elapsed().as_secs_f64()
        );
    }

    fn finish(&self) {
        if self.last_drawn.is_some() {
            eprint!("\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bar;

    #[test]
    fn the_progress_bar_fills_with_the_run() {
        assert_eq!(bar(0, 200), format!("[{}]", ".".repeat(30)));
        assert_eq!(bar(100, 200), format!("[{}{}]", "#".repeat(15), ".".repeat(15)));
        assert_eq!(bar(500, 200), format!("[{}]", "#".repeat(30)));
    }
}
