//! One path from a stream of messages to runs, their analysis and their stalls, for every reader
//! that keeps to bounded memory: `run`'s summary, `show`, every `export`, and the next source.
//!
//! In the spirit of quinn-proto's `Connection`: [`SessionReducer::handle`] takes one message,
//! holds what is still open, and says what changed through [`Output`]s; it does no IO and reads
//! no clock. The bounds live here and nowhere else:
//! - at most [`MAX_OPEN_RUNS`] runs followed at once (a crafted file could start any number and
//!   never end them); the rest are counted;
//! - a run holds its newest requests only: finished ones are attributed and folded into totals
//!   once settled ([`RunStalls`]), and per-connection state goes with its connection
//!   ([`RunAnalysis::retire`]);
//! - a request keeps at most [`crate::analysis::MAX_SAMPLES_PER_REQUEST`] samples of each kind.
//!
//! The page keeps every request of a run to draw it, so it reads the same [`RunAnalysis`] and
//! attribution without retiring ([`crate::attribution::Incremental`]); which classes a spec
//! rules out is decided for both by [`stall_spec`].
//!
//! One file, though long: the reducer and the tallies of each kind of run it keeps are one
//! set of bounds, read together.

use crate::analysis::{RequestView, RunAnalysis, Summary, MAX_HELD};
use crate::attribution::{self, ClassSummary, Stall, StallTally};
use crate::bulk::{BulkAnalysis, BulkSummary};
use crate::control::ClockSync;
use crate::estimate::{CounterEstimate, EstimatedExchanges};
use crate::event::{ConnId, Event, EventKind, ReqId, RunId};
use crate::exchange::ExchangeTally;
use crate::keyed_hash::KeyedMap;
use crate::overview::{self, Overview};
use crate::packet_stalls;
use crate::spec::{ImportedConnection, RrSpec, Scenario};
use crate::tried::TriedRecord;
use crate::watch_rows::WatchRows;
use crate::wire::{Hello, RunOutcome, ToBrowser};

/// Runs going at once that a reader follows. A recorded file has one at a time (each run's end
/// comes before the next run's start); past this bound a run is counted, not summarized.
pub const MAX_OPEN_RUNS: usize = 1000;

/// Past this many requests held, a run's oldest finished (and settled) ones are retired...
///
/// A run that opens a connection per request holds the state of every held request's
/// connection: at 8,192 its map of connection sides grew past the CPU's caches (16,000 sides
/// in a table of 32,768 slots) and the lookups of each event missed them, a fifth of reading
/// such a run. Retiring once twice `KEEP_RECENT` are held costs a look at the held requests
/// every thousand requests, which a run kept alive does not notice.
pub const RETIRE_ABOVE: usize = 2048;
/// ...keeping the newest, whose other side's events may still be on their way.
pub const KEEP_RECENT: usize = 1024;
/// Retirement is looked at once this many events have come since it was last looked at: a
/// file of one or two events a message (a hostile writer's, or a slow server's) would
/// otherwise look at its held requests' settlement at every message, a tenth of reading it.
/// Past [`RETIRE_ABOVE`] by at most this many requests, memory does not notice.
const RETIRE_LOOK_EVERY: usize = 64;

/// For a run of requests and answers, the spec that rules stall classes out (no Nagle stall
/// from a writer with TCP_NODELAY): a run's own, or none for a standalone server's session (its
/// knobs do not say how the outside client writes). `None` for scenarios whose stalls are not
/// found from syscalls (bulk transfers; imported captures, whose packets are read instead).
pub fn stall_spec(scenario: &Scenario) -> Option<Option<&RrSpec>> {
    match scenario {
        Scenario::Rr(spec) => Some(Some(spec)),
        Scenario::Server(_) => Some(None),
        Scenario::Bulk(_) | Scenario::Import(_) | Scenario::Watch(_) => None,
    }
}

/// The one retire-and-attribute loop: a request/response run's analysis, whose requests are
/// attributed and forgotten once settled and enough of them pile up.
#[derive(Debug)]
pub struct RunStalls {
    analysis: RunAnalysis,
    spec: Option<RrSpec>,
    /// Events pushed since retirement was last looked at ([`RETIRE_LOOK_EVERY`]).
    unlooked: usize,
}

impl RunStalls {
    pub fn new(spec: Option<RrSpec>) -> RunStalls {
        let mut analysis = RunAnalysis::of_rr(spec.as_ref());
        // A request/response run of ackscope's records its server too; a standalone server's
        // session (no spec) has only its server's events, waited for once they come.
        analysis.retire_when_settled(spec.is_some());
        RunStalls { analysis, spec, unlooked: 0 }
    }

    /// Takes a batch of events; `retired` gets each request retired to keep memory bounded,
    /// with its stalls.
    pub fn push(
        &mut self,
        events: &[Event],
        mut retired: impl FnMut(ReqId, &RequestView, Vec<Stall>),
    ) {
        self.analysis.push_all(events);
        self.unlooked += events.len();
        let held = self.analysis.requests().len();
        if held > RETIRE_ABOVE && (self.unlooked >= RETIRE_LOOK_EVERY || held > MAX_HELD) {
            self.unlooked = 0;
            let spec = self.spec.as_ref();
            self.analysis.retire(KEEP_RECENT, |analysis, req, view| {
                retired(req, view, attribution::attribute_request(analysis, req, view, spec));
            });
        }
    }

    pub fn analysis(&self) -> &RunAnalysis {
        &self.analysis
    }

    pub fn spec(&self) -> Option<&RrSpec> {
        self.spec.as_ref()
    }

    /// The stalls of the requests still held.
    pub fn held_stalls(&self) -> Vec<Stall> {
        attribution::attribute(&self.analysis, self.spec.as_ref())
    }
}

/// A request/response run's summary as its events go by: the retire loop, with the stalls and
/// overview rows of what it retired folded into totals.
#[derive(Debug)]
pub struct RrTally {
    stalls: RunStalls,
    retired_stalls: StallTally,
    /// The retired requests, for the overview written at the end of a file.
    retired_overview: Overview,
}

impl RrTally {
    pub fn new(spec: Option<RrSpec>) -> RrTally {
        RrTally {
            stalls: RunStalls::new(spec),
            retired_stalls: StallTally::default(),
            retired_overview: Overview::default(),
        }
    }

    /// Takes a batch; `found` gets the stalls of the requests it retired, when a reader wants
    /// each stall as it is decided (the Perfetto export).
    pub fn push(&mut self, events: &[Event], found: Option<&mut Vec<Stall>>) {
        let (tally, rows) = (&mut self.retired_stalls, &mut self.retired_overview);
        let mut found = found;
        self.stalls.push(events, |_, view, stalls| {
            stalls.iter().for_each(|stall| tally.add(stall));
            let (key, stalled) = overview::row(view, &stalls);
            rows.push(key, stalled);
            if let Some(found) = found.as_deref_mut() {
                found.extend(stalls);
            }
        });
    }

    pub fn analysis(&self) -> &RunAnalysis {
        self.stalls.analysis()
    }

    /// The stalls of the requests still held (each retired one was handed out by `push`).
    pub fn held_stalls(&self) -> Vec<Stall> {
        self.stalls.held_stalls()
    }

    /// Every request of the run, retired or not, in the overview's columns.
    pub fn overview(&self) -> Overview {
        let mut overview = self.retired_overview.clone();
        let analysis = self.stalls.analysis();
        let first = analysis.first_request();
        for (index, view) in analysis.requests().iter().enumerate() {
            let req = ReqId(first + index as u32);
            let stalls = attribution::attribute_request(analysis, req, view, self.stalls.spec());
            let (key, stalled) = overview::row(view, &stalls);
            overview.push(key, stalled);
        }
        overview
    }

    /// Stalls grouped by class and direction, retired and held.
    pub fn stall_classes(&self) -> Vec<ClassSummary> {
        self.retired_stalls.summaries_with(&self.held_stalls())
    }

    pub fn summary(&self) -> Summary {
        self.stalls.analysis().summary()
    }
}

/// A connection of an imported run: its id, its segments, its payload bytes each way.
pub type ConnRow = (ConnId, u32, [u64; 2]);

/// An imported capture's run: each connection's segments and bytes, and the stalls its packets
/// show, found as the events go by (the finder holds only each connection's undecided window).
pub struct ImportedTally {
    /// In the order connections first appear; `row_of` finds a connection's row in O(1).
    rows: Vec<ConnRow>,
    row_of: KeyedMap<ConnId, usize>,
    /// The connection of the last segment and its row: a capture's segments come in runs of
    /// one connection, and looking each one up was a twentieth of reading a capture.
    last_row: Option<(ConnId, usize)>,
    /// Stalls without their evidence in words: only the tally reads them.
    finder: packet_stalls::StallFinder,
    stalls: StallTally,
}

impl Default for ImportedTally {
    fn default() -> Self {
        ImportedTally {
            rows: Vec::new(),
            row_of: KeyedMap::default(),
            last_row: None,
            finder: packet_stalls::StallFinder::without_evidence(),
            stalls: StallTally::default(),
        }
    }
}

impl std::fmt::Debug for ImportedTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedTally").field("connections", &self.rows.len()).finish()
    }
}

impl ImportedTally {
    pub fn push(&mut self, events: &[Event]) {
        for e in events {
            let EventKind::Segment(s) = &e.kind else { continue };
            let i = match self.last_row {
                Some((conn, i)) if conn == e.conn => i,
                _ => {
                    let rows = &mut self.rows;
                    let i = *self.row_of.entry(e.conn).or_insert_with(|| {
                        rows.push((e.conn, 0, [0, 0]));
                        rows.len() - 1
                    });
                    self.last_row = Some((e.conn, i));
                    i
                }
            };
            self.rows[i].1 += 1;
            self.rows[i].2[e.side.index()] += u64::from(s.len);
            self.finder.push(e, ());
        }
        self.finder.take_found().iter().for_each(|(stall, ())| self.stalls.add(stall));
    }

    /// The stream ended: every candidate still open is decided.
    pub fn decide_all(&mut self) {
        let finder =
            std::mem::replace(&mut self.finder, packet_stalls::StallFinder::without_evidence());
        finder.finish().iter().for_each(|(stall, ())| self.stalls.add(stall));
    }

    /// The connections (id, segments, payload bytes client to server and back), in the order
    /// they first appeared.
    pub fn rows(&self) -> &[ConnRow] {
        &self.rows
    }

    /// Each connection as `show` and the page list it: "conn 1: client A -> server B 13
    /// segments, 4104 bytes client->server, 4104 bytes server->client". `connections`: the
    /// import's spec, whose addresses are numbered from 1 as the connection ids are.
    pub fn connection_lines(&self, connections: &[ImportedConnection]) -> Vec<String> {
        self.rows
            .iter()
            .map(|(conn, segments, bytes)| {
                let addresses = (conn.0 as usize)
                    .checked_sub(1)
                    .and_then(|i| connections.get(i))
                    .map(|c| format!(" client {} -> server {}", c.client, c.server))
                    .unwrap_or_default();
                format!(
                    "conn {}:{addresses} {segments} segments, {} bytes client->server, {} bytes \
                     server->client",
                    conn.0, bytes[0], bytes[1]
                )
            })
            .collect()
    }

    /// The stall classes decided so far (all of them once [`ImportedTally::decide_all`] ran).
    pub fn classes(&self) -> Vec<ClassSummary> {
        self.stalls.summaries_with(&[])
    }
}

/// A watched application's run (`ackscope watch`): the stalls its packets show (the packet
/// rule, as for an imported capture), and its exchanges timed ([`ExchangeTally`]), which stand
/// for requests in its summary. A connection's state is freed when it closes: a watch of a
/// busy service holds its open connections, its latencies and its stalls' durations.
#[derive(Default)]
pub struct WatchTally {
    /// Each segment tagged with its exchange's row, when the tally keeps rows.
    finder: packet_stalls::StallFinder<Option<u32>>,
    /// The watch's exchanges as a run's requests, for a reader that draws them (the page):
    /// [`WatchTally::with_rows`].
    rows: Option<WatchRows>,
    stalls: StallTally,
    /// Segments seen: none means the watch read no packet (it had no CAP_NET_RAW).
    pub segments: u64,
    pub exchanges: ExchangeTally,
    /// ACKs the watched sockets' delayed-ACK timers were seen to send (a watch as root).
    pub delayed_acks: u64,
    /// The watched programs' socket calls seen returning after their thread slept 1 ms or
    /// more (a watch as root).
    pub slept_calls: u64,
    /// Each stall found since [`WatchTally::drain_stalls`], with its row when rows are kept,
    /// once a reader asked for them ([`WatchTally::hand_out_stalls`]: a watch's metrics, which
    /// count them by port; the page, which draws them in their rows).
    found: Option<Vec<(Stall, Option<u32>)>>,
    /// The exchanges bounded from the sockets' counters, for a watch that read no packet.
    counters: CounterEstimate,
}

impl std::fmt::Debug for WatchTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchTally")
            .field("segments", &self.segments)
            .field("exchanges", &self.exchanges.answered())
            .finish()
    }
}

impl WatchTally {
    /// A tally that also keeps the watch's exchanges as a run's requests ([`WatchRows`]), for
    /// [`WatchTally::push_rows`], and hands out its stalls with their rows.
    pub fn with_rows() -> WatchTally {
        let mut tally = WatchTally { rows: Some(WatchRows::default()), ..WatchTally::default() };
        tally.hand_out_stalls();
        tally
    }

    pub fn push(&mut self, events: &[Event]) {
        self.push_rows(events, &mut Vec::new());
    }

    /// [`WatchTally::push`], appending to `out` the run's events of the exchanges' rows (with
    /// [`WatchTally::with_rows`]; nothing without).
    pub fn push_rows(&mut self, events: &[Event], out: &mut Vec<Event>) {
        for e in events {
            let row = self.rows.as_mut().and_then(|rows| rows.push(e, out));
            match e.kind {
                EventKind::Segment(_) => {}
                EventKind::TcpInfo(_) | EventKind::Connected | EventKind::Accepted => {
                    self.counters.push(e);
                    continue;
                }
                EventKind::DelayedAck => {
                    self.delayed_acks += 1;
                    self.finder.push(e, row);
                    continue;
                }
                EventKind::BlockedCall { .. } => {
                    self.slept_calls += 1;
                    self.finder.push(e, row);
                    continue;
                }
                _ => continue,
            }
            self.segments += 1;
            self.finder.push(e, row);
            if let Some(closed) = self.exchanges.push(e) {
                self.finder.end_connection(closed);
            }
        }
        if let Some(rows) = &mut self.rows {
            rows.end_batch(out);
        }
        self.take_found();
    }

    /// The exchanges as rows, with [`WatchTally::with_rows`].
    pub fn rows(&self) -> Option<&WatchRows> {
        self.rows.as_ref()
    }

    /// The stream ended: every candidate stall is decided, every answered exchange counted.
    pub fn finish(&mut self) {
        self.finder.end_all();
        self.take_found();
        self.exchanges.finish();
    }

    fn take_found(&mut self) {
        for (stall, row) in self.finder.take_found() {
            self.stalls.add(&stall);
            if let Some(found) = &mut self.found {
                found.push((stall, row));
            }
        }
    }

    /// From now on, each stall found is also kept until [`WatchTally::drain_stalls`] takes it:
    /// a reader that takes them after every batch holds a batch's worth.
    pub fn hand_out_stalls(&mut self) {
        self.found.get_or_insert_with(Vec::new);
    }

    /// The stalls found since the last call (with [`WatchTally::hand_out_stalls`] on), in the
    /// order they were found.
    pub fn drain_stalls(&mut self, mut each: impl FnMut(Stall)) {
        self.drain_stalls_in_rows(|stall, _| each(stall));
    }

    /// [`WatchTally::drain_stalls`], each stall with the row of the segment that ended it (the
    /// row of its exchange; `None` without rows, or for an exchange begun before the watch).
    pub fn drain_stalls_in_rows(&mut self, mut each: impl FnMut(Stall, Option<u32>)) {
        if let Some(found) = &mut self.found {
            found.drain(..).for_each(|(stall, row)| each(stall, row));
        }
    }

    /// Of the stalls found, those whose ACK the kernel's delayed-ACK timer was seen to send.
    pub fn confirmed_by_timer(&self) -> u64 {
        self.finder.confirmed_by_timer()
    }

    /// Of the stalls found, those whose held bytes the receiving program's `recv()` was seen
    /// sleeping for.
    pub fn waited_in_recv(&self) -> u64 {
        self.finder.waited_in_recv()
    }

    /// Whether the kernel's own evidence was seen: the delayed-ACK timer, the programs' calls.
    pub fn kernel_seen(&self) -> bool {
        self.delayed_acks > 0 || self.slept_calls > 0
    }

    /// What the kernel was seen doing, for the command line and the page: "the delayed-ACK
    /// timer sent 38 ACKs of the watched connections; it sent the ACK of 38 of the Nagle x
    /// delayed ACK stalls; the watched programs' calls slept 1 ms or more 80 times; the
    /// receiving program's recv() slept until the held bytes came in 38 of those stalls".
    pub fn kernel_words(&self) -> String {
        let mut words = format!(
            "the delayed-ACK timer sent {} ACKs of the watched connections; it sent the ACK of \
             {} of the Nagle x delayed ACK stalls",
            self.delayed_acks,
            self.confirmed_by_timer()
        );
        if self.slept_calls > 0 {
            words.push_str(&format!(
                "; the watched programs' calls slept 1 ms or more {} times; the receiving \
                 program's recv() slept until the held bytes came in {} of those stalls",
                self.slept_calls,
                self.waited_in_recv()
            ));
        }
        words
    }

    /// The stall classes decided so far (all of them once [`WatchTally::finish`] ran).
    pub fn classes(&self) -> Vec<ClassSummary> {
        self.stalls.summaries_with(&[])
    }

    /// A watch that read no packet: the exchanges bounded from its sockets' counters
    /// (`crate::estimate`), if any moved. `None` once a packet was read: they are counted.
    pub fn estimated(&self) -> Option<EstimatedExchanges> {
        if self.segments > 0 {
            return None;
        }
        self.counters.estimate()
    }

    /// The exchanges as requests; the stalled count is the waits the packets named. `None`
    /// when no packet was seen (a watch without CAP_NET_RAW): no figures, rather than zeros
    /// that read as measured ([`WatchTally::estimated`] bounds them instead).
    pub fn summary(&self) -> Option<Summary> {
        if self.segments == 0 {
            return None;
        }
        let stalled: u32 = self.classes().iter().map(|c| c.count).sum();
        Some(self.exchanges.summary(stalled))
    }
}

/// What a run's summary is computed from, chosen once from its scenario.
#[derive(Debug)]
pub enum RunAnalyses {
    Rr(Box<RrTally>),
    Bulk(Box<BulkAnalysis>),
    Imported(Box<ImportedTally>),
    Watched(Box<WatchTally>),
}

/// One run's counts and analysis, as its events go by.
#[derive(Debug)]
pub struct RunTally {
    pub analysis: RunAnalyses,
    pub events: u64,
    pub requests_done: u64,
    pub bytes_read: u64,
    /// A run against a remote server: how its clock was matched to this run's.
    pub clock: Option<ClockSync>,
    /// A watch's run: the socket options it tried on the watched programs
    /// ([`ToBrowser::OptionsTried`]).
    pub tried: TriedRecord,
}

impl RunTally {
    pub fn new(scenario: &Scenario) -> RunTally {
        let analysis = match (scenario, stall_spec(scenario)) {
            (_, Some(spec)) => RunAnalyses::Rr(Box::new(RrTally::new(spec.cloned()))),
            (Scenario::Import(_), None) => RunAnalyses::Imported(Box::default()),
            (Scenario::Watch(_), None) => RunAnalyses::Watched(Box::default()),
            (_, None) => RunAnalyses::Bulk(Box::new(BulkAnalysis::new())),
        };
        RunTally {
            analysis,
            events: 0,
            requests_done: 0,
            bytes_read: 0,
            clock: None,
            tried: TriedRecord::default(),
        }
    }

    /// Takes a batch; `found` as for [`RrTally::push`].
    pub fn push(&mut self, events: &[Event], found: Option<&mut Vec<Stall>>) {
        self.events += events.len() as u64;
        for event in events {
            match event.kind {
                EventKind::RequestDone => self.requests_done += 1,
                EventKind::ReadDone { bytes } => self.bytes_read += u64::from(bytes),
                EventKind::ClockSync { offset_ns, uncertainty_ns, rtt_ns } => {
                    self.clock = Some(ClockSync { offset_ns, uncertainty_ns, rtt_ns })
                }
                _ => {}
            }
        }
        match &mut self.analysis {
            RunAnalyses::Rr(rr) => rr.push(events, found),
            RunAnalyses::Bulk(bulk) => bulk.push_all(events),
            RunAnalyses::Imported(imported) => imported.push(events),
            RunAnalyses::Watched(watched) => watched.push(events),
        }
    }

    /// The overview of the run's requests (request/response runs only).
    pub fn overview(&self) -> Option<Overview> {
        match &self.analysis {
            RunAnalyses::Rr(rr) => Some(rr.overview()),
            _ => None,
        }
    }

    /// Stalls grouped by class and direction (request/response runs, and watched exchanges).
    pub fn stall_classes(&self) -> Option<Vec<ClassSummary>> {
        match &self.analysis {
            RunAnalyses::Rr(rr) => Some(rr.stall_classes()),
            RunAnalyses::Watched(watched) => Some(watched.classes()),
            _ => None,
        }
    }

    /// A watch that read no packet: its exchanges bounded from the sockets' counters.
    pub fn estimated_exchanges(&self) -> Option<EstimatedExchanges> {
        match &self.analysis {
            RunAnalyses::Watched(watched) => watched.estimated(),
            _ => None,
        }
    }

    /// The headline figures of a request/response run or a bulk transfer.
    pub fn figures(&self) -> Option<Figures> {
        match &self.analysis {
            RunAnalyses::Rr(rr) => Some(Figures::Rr(rr.summary())),
            RunAnalyses::Bulk(bulk) => Some(Figures::Bulk(bulk.summary())),
            RunAnalyses::Imported(_) => None,
            RunAnalyses::Watched(watched) => watched.summary().map(Figures::Rr),
        }
    }

    /// Events left out because their request had been summarized already (or a broken file
    /// named one far ahead), and samples thinned on requests that had too many.
    pub fn left_out(&self) -> (u64, u64) {
        match &self.analysis {
            RunAnalyses::Rr(rr) => (rr.analysis().ignored_events, rr.analysis().thinned_samples),
            _ => (0, 0),
        }
    }
}

/// A run's headline numbers.
#[derive(Clone, Debug, PartialEq)]
pub enum Figures {
    Rr(Summary),
    Bulk(BulkSummary),
}

/// A run a reader followed, handed over at its end (or when the stream ended before it did).
#[derive(Debug)]
pub struct FollowedRun {
    pub run: RunId,
    pub scenario: Scenario,
    pub tally: RunTally,
    /// `None`: the stream ended before the run did.
    pub outcome: Option<RunOutcome>,
}

/// What [`SessionReducer::handle`] changed.
#[derive(Debug)]
pub enum Output {
    /// A run began and is followed.
    Started(RunId),
    /// Stalls of requests a run retired (only when asked for: [`SessionReducer::hand_out_stalls`]).
    Stalls(RunId, Vec<Stall>),
    /// A run ended (or its id started again, or the stream ended): everything about it, with
    /// the stalls of the requests it still held when `hand_out_stalls` is on.
    Ended(Box<FollowedRun>, Vec<Stall>),
}

/// The runs of a session as its messages go by.
#[derive(Debug, Default)]
pub struct SessionReducer {
    /// The runs still going, each with its place in the stream (the order they are handed
    /// over in when the stream ends before they do).
    open: KeyedMap<RunId, (u64, FollowedRun)>,
    started: u64,
    /// Runs started while [`MAX_OPEN_RUNS`] were going: counted, not followed.
    not_followed: u64,
    hello: Option<Hello>,
    hand_out_stalls: bool,
}

impl SessionReducer {
    pub fn new() -> SessionReducer {
        SessionReducer::default()
    }

    /// A reducer that hands out each stall as it is decided ([`Output::Stalls`], and the held
    /// ones with [`Output::Ended`]), for a reader that writes them as it goes.
    pub fn hand_out_stalls() -> SessionReducer {
        SessionReducer { hand_out_stalls: true, ..SessionReducer::default() }
    }

    /// The session's Hello, once read.
    pub fn hello(&self) -> Option<&Hello> {
        self.hello.as_ref()
    }

    /// Whether events of `run` are followed (it started, has not ended, and was within the
    /// bound when it started).
    pub fn follows(&self, run: RunId) -> bool {
        self.open.contains_key(&run)
    }

    /// Takes one message; `out` gets what it changed.
    pub fn handle(&mut self, message: &ToBrowser, out: &mut Vec<Output>) {
        match message {
            ToBrowser::Hello(hello) => self.hello = Some(hello.clone()),
            ToBrowser::RunStarted { run, spec, .. } => {
                // An id started again (only a crafted file does that): the earlier run is
                // handed over as far as it went.
                if let Some((_, earlier)) = self.open.remove(run) {
                    self.ended(earlier, out);
                }
                if self.open.len() >= MAX_OPEN_RUNS {
                    self.not_followed += 1;
                    return;
                }
                let followed = FollowedRun {
                    run: *run,
                    scenario: spec.clone(),
                    tally: RunTally::new(spec),
                    outcome: None,
                };
                self.open.insert(*run, (self.started, followed));
                self.started += 1;
                out.push(Output::Started(*run));
            }
            ToBrowser::Events { run, events } => {
                let Some((_, followed)) = self.open.get_mut(run) else { return };
                if self.hand_out_stalls {
                    let mut found = Vec::new();
                    followed.tally.push(events, Some(&mut found));
                    if !found.is_empty() {
                        out.push(Output::Stalls(*run, found));
                    }
                } else {
                    followed.tally.push(events, None);
                }
            }
            ToBrowser::OptionsTried { run, tried } => {
                if let Some((_, followed)) = self.open.get_mut(run) {
                    followed.tally.tried.take(tried);
                }
            }
            ToBrowser::RunFinished { run, outcome } => {
                if let Some((_, mut followed)) = self.open.remove(run) {
                    followed.outcome = Some(outcome.clone());
                    self.ended(followed, out);
                }
            }
            // Refusals answer a tab; overviews and the trailer repeat what the events say.
            ToBrowser::Rejected { .. }
            | ToBrowser::Overview { .. }
            | ToBrowser::Trailer(_)
            | ToBrowser::ClassState(_)
            | ToBrowser::Stream { .. }
            | ToBrowser::TryRights { .. }
            | ToBrowser::ClassVotes(_) => {}
        }
    }

    fn ended(&self, mut followed: FollowedRun, out: &mut Vec<Output>) {
        if let RunAnalyses::Watched(watched) = &mut followed.tally.analysis {
            watched.finish();
        }
        let held = match (&followed.tally.analysis, self.hand_out_stalls) {
            (RunAnalyses::Rr(rr), true) => rr.held_stalls(),
            _ => Vec::new(),
        };
        out.push(Output::Ended(Box::new(followed), held));
    }

    /// The stream has ended: hands over the runs still going, in the order they started.
    pub fn finish(&mut self, out: &mut Vec<Output>) {
        let mut unfinished: Vec<(u64, FollowedRun)> = self.open.drain().map(|(_, v)| v).collect();
        unfinished.sort_by_key(|(order, _)| *order);
        for (_, followed) in unfinished {
            self.ended(followed, out);
        }
    }

    /// The runs followed now, not yet ended.
    pub fn open_runs(&self) -> impl Iterator<Item = &FollowedRun> {
        self.open.values().map(|(_, followed)| followed)
    }

    /// Runs started while [`MAX_OPEN_RUNS`] were going, not followed.
    pub fn not_followed(&self) -> u64 {
        self.not_followed
    }
}

#[cfg(test)]
mod tests {

    /// A long watch of a service whose clients each connect, ask, and close holds its open
    /// connections only: each closed one's state goes, here and in the packet rule's windows.
    #[test]
    fn a_watch_frees_each_connection_as_it_closes() {
        use crate::event::{tcp_flags, Segment};
        let mut watched = WatchTally::default();
        let connections = 20_000u32;
        for conn in 1..=connections {
            let at = u64::from(conn) * 1_000_000;
            let segment = |side, flags, seq, len, dt| Event {
                at_ns: at + dt,
                side,
                conn: ConnId(conn),
                req: ReqId(0),
                kind: EventKind::Segment(Segment { flags, seq, len, ..Segment::default() }),
            };
            let (ack, fin) = (tcp_flags::ACK, tcp_flags::FIN | tcp_flags::ACK);
            watched.push(&[
                segment(Side::Client, ack, 1, 10, 0),
                segment(Side::Server, ack, 1, 10, 100),
                segment(Side::Client, fin, 11, 0, 200),
                segment(Side::Server, fin, 11, 0, 300),
            ]);
        }
        assert_eq!(watched.finder.connections(), 0, "every closed connection's window freed");
        assert_eq!(watched.summary().map(|s| s.requests), Some(connections));
    }
    use super::*;
    use crate::event::Side;
    use crate::wire::Instruments;

    fn started(run: u32) -> ToBrowser {
        let spec = Scenario::Rr(RrSpec::default());
        ToBrowser::RunStarted { run: RunId(run), spec, instruments: Instruments::default() }
    }

    #[test]
    fn runs_are_handed_over_at_their_end_and_past_the_bound_only_counted() {
        let mut reducer = SessionReducer::new();
        let mut out = Vec::new();
        for run in 0..(MAX_OPEN_RUNS as u32 + 5) {
            reducer.handle(&started(run), &mut out);
        }
        assert_eq!(reducer.not_followed(), 5);
        assert!(reducer.follows(RunId(0)) && !reducer.follows(RunId(MAX_OPEN_RUNS as u32)));
        out.clear();
        let finished = ToBrowser::RunFinished { run: RunId(7), outcome: RunOutcome::Completed };
        reducer.handle(&finished, &mut out);
        assert!(matches!(&out[..], [Output::Ended(run, _)] if run.run == RunId(7)
            && run.outcome == Some(RunOutcome::Completed)));
        out.clear();
        reducer.finish(&mut out);
        let order: Vec<u32> = out
            .iter()
            .map(|o| match o {
                Output::Ended(run, _) => run.run.0,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(order.len(), MAX_OPEN_RUNS - 1);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "in the order they started");
    }

    #[test]
    fn a_watch_run_carries_what_was_tried_into_its_report() {
        use crate::report::{LiveFacts, RunReport};
        use crate::tried::{OptionTried, TriedOption};
        use crate::WatchSpec;
        let mut reducer = SessionReducer::new();
        let mut out = Vec::new();
        let spec = Scenario::Watch(WatchSpec { ports: vec![8080], ..WatchSpec::default() });
        let run = RunId(2);
        reducer.handle(
            &ToBrowser::RunStarted { run, spec, instruments: Instruments::default() },
            &mut out,
        );
        let tried = |sockets| OptionTried {
            option: TriedOption::NoDelay,
            side: Side::Server,
            pid: 4711,
            command: "python3".into(),
            sockets,
            already_on: 0,
        };
        // A later message of the same change (a new connection of the process) replaces it.
        reducer.handle(&ToBrowser::OptionsTried { run, tried: vec![tried(1)] }, &mut out);
        reducer.handle(&ToBrowser::OptionsTried { run, tried: vec![tried(3)] }, &mut out);
        out.clear();
        reducer.handle(&ToBrowser::RunFinished { run, outcome: RunOutcome::Interrupted }, &mut out);
        let [Output::Ended(ended, _)] = &out[..] else { panic!("{out:?}") };
        assert_eq!(ended.tally.tried.entries(), [tried(3)]);
        let outcome = RunOutcome::Interrupted;
        let report = RunReport::of(&ended.tally, &ended.scenario, &outcome, LiveFacts::default());
        assert_eq!(report.tried, [tried(3)]);
    }

    #[test]
    fn the_spec_rules_classes_out_for_request_response_runs_only() {
        let rr = RrSpec::default();
        assert_eq!(stall_spec(&Scenario::Rr(rr.clone())), Some(Some(&rr)));
        assert_eq!(stall_spec(&Scenario::Server(rr)), Some(None));
        assert_eq!(stall_spec(&Scenario::Bulk(Default::default())), None);
    }
}
