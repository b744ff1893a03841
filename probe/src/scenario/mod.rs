//! Scenarios: what a run does. Each one starts the threads of its experiment, gathers their
//! events on the calling thread and reports how the run ended.

pub mod bulk;
pub mod rr;

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use ackscope_shared::spec::LinkSpec;
use ackscope_shared::wire::{Instruments, RunOutcome};
use ackscope_shared::{Event, Scenario, Side, SpecError};

use crate::capture::{self, Capture, CaptureReport, CaptureTap};
use crate::emulate::Link;
use crate::net::peers::Peers;
use crate::net::record::{Clock, Recorder};
use crate::remote::drive::{Remote, ServerEnd, Started};
use crate::watch::tune::Try;
use crate::watch::Handed;

/// Batches in flight between the experiment threads and the collector. Each is one exchange (a
/// dozen events) or at most a few thousand events; this bounds memory if the collector lags.
const CHANNEL_BATCHES: usize = 1024;

/// Runs `scenario`, handing every batch of events to `on_events` as it arrives, on the calling
/// thread. `stop` ends the run early (Ctrl-C): the outcome is then `Interrupted`. A failed run
/// keeps every event recorded before the failure.
pub fn run(
    scenario: &Scenario,
    instruments: Instruments,
    stop: &AtomicBool,
    on_events: impl FnMut(Vec<Event>),
) -> Result<RunOutcome, SpecError> {
    run_noting(scenario, instruments, stop, &mut RunNotes::default(), on_events)
}

/// What a run measured about its own instruments, besides its events.
#[derive(Debug, Default)]
pub struct RunNotes {
    /// How the packet capture went (`Instruments.capture`, request/response runs).
    pub capture: Option<CaptureReport>,
    /// Requests answered and how long the client threads ran (request/response runs): the
    /// throughput when events are not recorded.
    pub requests_completed: u32,
    pub clients_elapsed: Duration,
    /// Runs against a remote server: its clock and how its side ended.
    pub remote: Option<RemoteNotes>,
}

/// What a run against a remote server learned about it.
#[derive(Debug)]
pub struct RemoteNotes {
    pub server: String,
    /// The offset if both probes share one host's clock (see `remote::drive::Started`).
    pub same_host_offset_ns: i64,
    pub server_outcome: RunOutcome,
    pub unmatched_events: u64,
}

impl RemoteNotes {
    pub(crate) fn of(server: &str, end: ServerEnd) -> RemoteNotes {
        RemoteNotes {
            server: server.to_string(),
            same_host_offset_ns: end.same_host_offset_ns,
            server_outcome: end.outcome,
            unmatched_events: end.unmatched_events,
        }
    }
}

/// Connects to the remote `ackscope server` and starts the server side of `scenario` there;
/// with it, the `ClockSync` event that opens the run's events (none when recording is off).
pub(crate) fn start_remote(
    scenario: &Scenario,
    instruments: Instruments,
    server: &str,
    token: &str,
    collector: &Collector,
) -> Result<(Started, Vec<Event>), String> {
    let started = Remote::connect(server, token)
        .and_then(|remote| remote.start(scenario, instruments, collector.clock))?;
    let clock_event = match instruments.events {
        true => vec![started.sync.event(collector.clock.now_ns())],
        false => Vec::new(),
    };
    Ok((started, clock_event))
}

/// The error of a run against a remote server, each side's end named: a server that went away
/// also makes the client's calls fail.
pub(crate) fn remote_error(
    client_error: Option<String>,
    server_outcome: Option<&RunOutcome>,
) -> Option<String> {
    let server_error = match server_outcome {
        Some(RunOutcome::Failed { error }) => Some(error.clone()),
        Some(RunOutcome::Interrupted) => Some("server side: stopped on its host (Ctrl-C)".into()),
        _ => None,
    };
    match (client_error, server_error) {
        (Some(client), Some(server)) => Some(format!("client side: {client}; {server}")),
        (Some(client), None) => Some(format!("client side: {client}")),
        (None, server) => server,
    }
}

/// [`run`], also filling in `notes`.
pub fn run_noting(
    scenario: &Scenario,
    instruments: Instruments,
    stop: &AtomicBool,
    notes: &mut RunNotes,
    on_events: impl FnMut(Vec<Event>),
) -> Result<RunOutcome, SpecError> {
    run_against(scenario, instruments, &Target::Local, stop, notes, on_events)
}

/// Where a run's server side runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// In this process, on loopback or across the emulated link.
    #[default]
    Local,
    /// In this process, the server's sockets in the network namespace `name` (`ip netns add`),
    /// listening on its address `ip`: the run crosses the path the user made (a veth pair,
    /// with or without `tc netem`), both sides on one clock.
    ServerNetns { name: String, ip: std::net::Ipv4Addr },
    /// On the `ackscope server` at `server` (host:port), which printed `token`.
    Remote { server: String, token: String },
}

/// Why `scenario` cannot have its server in a user's namespace (`--server-netns`); `None` if
/// it can. The path is then the namespaces' own: only rr runs, without an emulated link or the
/// capture on lo.
pub fn server_netns_refusal(scenario: &Scenario, instruments: Instruments) -> Option<&'static str> {
    match scenario {
        Scenario::Rr(spec) if spec.link.is_some() => Some(
            "--server-netns: --link makes namespaces of its own; the path to NAME is the one \
             you made (add delay to it with `tc qdisc add dev VETH root netem delay 10ms`)",
        ),
        Scenario::Rr(_) if instruments.capture => Some(
            "--server-netns: --capture watches lo, which the run no longer crosses; capture on \
             the veth with tcpdump and `ackscope import` the file",
        ),
        Scenario::Rr(_) => None,
        _ => Some("--server-netns: only rr runs place their server in a namespace"),
    }
}

/// [`run_noting`], with the server side at `target`.
pub fn run_against(
    scenario: &Scenario,
    instruments: Instruments,
    target: &Target,
    stop: &AtomicBool,
    notes: &mut RunNotes,
    on_events: impl FnMut(Vec<Event>),
) -> Result<RunOutcome, SpecError> {
    scenario.validate()?;
    if let (Target::ServerNetns { .. }, Some(error)) =
        (target, server_netns_refusal(scenario, instruments))
    {
        return Ok(RunOutcome::Failed { error: error.into() });
    }
    Ok(match (scenario, target) {
        (Scenario::Rr(spec), _) => rr::run(spec, instruments, target, stop, notes, on_events),
        (Scenario::Bulk(spec), Target::Remote { server, token }) => {
            bulk::run_remote(spec, instruments, server, token, stop, notes, on_events)
        }
        (Scenario::Bulk(spec), Target::Local) => bulk::run(spec, instruments, stop, on_events),
        (Scenario::Bulk(_), Target::ServerNetns { .. }) => {
            unreachable!("server_netns_refusal refuses bulk runs, above")
        }
        (Scenario::Server(_), _) => RunOutcome::Failed {
            error: "a standalone echo server is run with `ackscope server`, not as a run".into(),
        },
        (Scenario::Import(_), _) => RunOutcome::Failed {
            error: "an imported capture is read with `ackscope show`, not run".into(),
        },
        (Scenario::Watch(spec), Target::Local) => watch_events(spec, stop, on_events),
        (Scenario::Watch(_), _) => RunOutcome::Failed {
            error: "a watch is of this host's ports: it has no server elsewhere".into(),
        },
    })
}

/// A watch started like a run (the page's watch source): the same source as `ackscope watch`
/// ([`crate::watch::run_until`]). Without CAP_NET_RAW it records TCP_INFO only, as the command
/// does. Its events only: a page's watch that tries options is [`watch_for_a_page`]'s.
fn watch_events(
    spec: &ackscope_shared::WatchSpec,
    stop: &AtomicBool,
    mut on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    let (_no_tries, tries) = std::sync::mpsc::channel();
    watch_for_a_page(spec, stop, &tries, |handed| match handed {
        Handed::Events(events) => on_events(events),
        Handed::Tried { .. } => unreachable!("nothing is tried without a try"),
    })
}

/// A page's watch: [`watch_events`], trying each option `tries` brings on the programs'
/// sockets from then on (a stall's fix, tried from the page), and handing over what it
/// changed ([`Handed::Tried`]) for the page's run to split there. Every option tried is put
/// back when it ends; what the tries did is logged, naming each process changed.
pub fn watch_for_a_page(
    spec: &ackscope_shared::WatchSpec,
    stop: &AtomicBool,
    tries: &Receiver<Try>,
    on_handed: impl FnMut(Handed),
) -> RunOutcome {
    let clock = crate::net::record::Clock::start();
    let watcher = match crate::watch::watcher::Watcher::open(&spec.ports, clock) {
        Ok(watcher) => watcher,
        Err(e) => return RunOutcome::Failed { error: e.to_string() },
    };
    // What was changed on another program, for the operator, as `ackscope watch` says it.
    let log = |line: &str| tracing::warn!("watch: {}", one_line(line));
    let each_step = |watcher: &mut crate::watch::watcher::Watcher| {
        while let Ok(added) = tries.try_recv() {
            if let Err(why) = watcher.trials.add(added) {
                log(&why);
            }
        }
        None
    };
    let note = |note: String| log(&format!("tried {note}"));
    let (outcome, counts) =
        crate::watch::run_until(watcher, spec, stop, on_handed, note, each_step);
    counts.tried.iter().for_each(|line| log(line));
    outcome
}

/// `text` as one line of a log, its control characters escaped: a process names itself, and
/// its name is printed as data.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// Where the experiment threads' events go.
pub(crate) struct Collector {
    pub clock: Clock,
    pub instruments: Instruments,
    sink: SyncSender<Vec<Event>>,
}

impl Collector {
    pub fn new(instruments: Instruments) -> (Collector, Receiver<Vec<Event>>) {
        let (sink, batches) = sync_channel(CHANNEL_BATCHES);
        (Collector { clock: Clock::start(), instruments, sink }, batches)
    }

    /// A recorder for one thread; a discarding one when event recording is off.
    pub fn recorder(&self, side: Side) -> Recorder {
        match self.instruments.events {
            true => Recorder::new(self.clock, side, self.sink.clone()),
            false => Recorder::discarding(self.clock, side),
        }
    }

    pub fn sink(&self) -> Option<SyncSender<Vec<Event>>> {
        self.instruments.events.then(|| self.sink.clone())
    }

    /// Starts capturing the segments to and from `server_port` with `tap` (opened with
    /// [`open_capture`] before anything else started).
    pub fn capture(
        &self,
        tap: Option<CaptureTap>,
        server_port: u16,
        peers: &Arc<Peers>,
    ) -> Result<Option<Capture>, String> {
        let (Some(tap), Some(sink)) = (tap, self.sink()) else { return Ok(None) };
        Capture::start(tap, server_port, Arc::clone(peers), self.clock, sink)
            .map(Some)
            .map_err(|e| format!("packet capture thread: {e}"))
    }
}

/// The capture's tap when the instruments ask for one: a run without the permission fails
/// before it starts.
pub(crate) fn open_capture(instruments: Instruments) -> Result<Option<CaptureTap>, String> {
    instruments.capture.then(capture::open).transpose().map_err(|e| e.to_string())
}

/// The outcome from the first error, if any, given the stop flag.
pub(crate) fn outcome(first_error: Option<String>, stop: &AtomicBool) -> RunOutcome {
    match first_error {
        Some(error) => RunOutcome::Failed { error },
        None if stop.load(std::sync::atomic::Ordering::Relaxed) => RunOutcome::Interrupted,
        None => RunOutcome::Completed,
    }
}

/// The emulated link of a run, its relay recording on the run's clock.
pub(crate) fn start_link(link: &LinkSpec, collector: &Collector) -> Result<Link, String> {
    let (client, server) = (collector.recorder(Side::Client), collector.recorder(Side::Server));
    Link::start(link, collector.clock, client, server).map_err(|e| e.to_string())
}
