//! What the app knows, and the pure functions that change it.
//!
//! A [`Stream`] is one stream of messages as the probe sends them: the live one from the probe's
//! WebSocket, or one per opened session file. Every message of either goes through
//! [`Stream::apply`], so a file shows exactly what the live view showed. [`apply`] is the live
//! stream's entry point: it adds what only the live link has (a refusal, the pending Run button,
//! following the newest run). Nothing here touches the DOM or the socket, so these rules are
//! tested without a browser page or a probe.
//!
//! This state lives outside Leptos' fine-grained reactivity: a run can bring thousands of events
//! per second, and one signal per event would re-render per event. The app keeps one
//! [`AppState`] and bumps a single version signal per animation frame (see `app.rs`).

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use ackscope_shared::analysis::{RunAnalysis, Summary};
use ackscope_shared::attribution::{attribute, summarize, ClassSummary, Incremental, Stall};
use ackscope_shared::bulk::{BulkAnalysis, BulkSummary};
use ackscope_shared::control::ClockSync;
use ackscope_shared::kernel::KernelTracks;
use ackscope_shared::overview::Overview;
use ackscope_shared::reduce::{stall_spec, ImportedTally};
use ackscope_shared::wire::{
    check_hello, write_frame, ClassState, Hello, HostFacts, Instruments, ResumePoint, RunOutcome,
    ToBrowser, WireError,
};
use ackscope_shared::{Event, EventKind, RrSpec, RunId, Scenario};

use crate::session_file::SessionDecoder;
use crate::timeline::rows::Facts;

/// Where a run is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Running,
    Done,
    Failed {
        error: String,
    },
    /// Stopped by the user at the probe (Ctrl-C); what was recorded before is kept.
    Interrupted,
    /// A file that ends before the run did (saved while it ran, or cut short).
    Incomplete,
}

impl RunStatus {
    /// The word the run list shows, also used as a `data-status` value.
    pub fn word(&self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed { .. } => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Incomplete => "incomplete",
        }
    }

    /// For people: "running", "done", "failed: <the probe's error>".
    pub fn label(&self) -> String {
        match self {
            RunStatus::Failed { error } => format!("failed: {error}"),
            RunStatus::Incomplete => "incomplete: the file ends before the run did".to_string(),
            other => other.word().to_string(),
        }
    }
}

/// One run as received: its spec, where it is, and the analysis of every event so far.
#[derive(Debug)]
pub struct Run {
    pub id: RunId,
    pub spec: Scenario,
    /// What the probe recorded during the run (each instrument costs time on the measured path).
    pub instruments: Instruments,
    pub status: RunStatus,
    /// Per-request spans and stalls; fed by request/response runs only.
    pub analysis: RunAnalysis,
    /// Goodput and buffers; `Some` for bulk runs only.
    pub bulk: Option<BulkAnalysis>,
    /// An imported capture's connections and the stalls its packets show (the same tally as
    /// `ackscope import` and `show`); `Some` for imported runs only.
    pub imported: Option<ImportedTally>,
    /// Every TCP_INFO sample over time per connection and side (any scenario), bounded.
    kernel: KernelTracks,
    pub events: u64,
    /// A run against a remote server: how its clock was matched to the client's (its
    /// `ClockSync` event, the run's first).
    pub clock: Option<ClockSync>,
    /// Computed at most once per batch, not per read. The request/response summary costs
    /// O(n / 512) plus the unsettled requests' reads (the analysis keeps the latencies in order,
    /// `attributed` counts the settled stalled reads).
    summary: OnceCell<Summary>,
    bulk_summary: OnceCell<BulkSummary>,
    /// The attribution of the settled requests (shared's `attribution::Incremental`): each
    /// request is attributed once, when its events have all arrived, so a batch costs in
    /// proportion to the requests it concerns, not to the run. Kept from the first time the
    /// attribution is asked for (`watched`): a run nobody looks at (a replayed run, another run
    /// of a file) keeps no stalls, and its first answer attributes it whole, once.
    attributed: Incremental,
    watched: Cell<bool>,
    /// The settled stalls, in request order, while no answer is cached. A cached answer holds
    /// them as the start of its `stalls` (moved there, not copied) and `push` takes them back.
    settled_stalls: RefCell<Vec<Stall>>,
    /// Why each wait happened: the settled stalls and the unsettled requests' (a few, attributed
    /// again when asked after a batch), cached until the next batch.
    attribution: OnceCell<Attribution>,
    /// Every request's latency, sorted (the Compare view's CDF): cached like the summary.
    latencies: OnceCell<Vec<u64>>,
    /// The timeline's per-request facts ([`Run::facts`]) and the event count they are of. A
    /// watched run's are brought up to date with each batch while no view holds them (a file
    /// being read), so that showing the run reads them instead of building a million at once.
    facts: RefCell<(Arc<Facts>, u64)>,
}

/// Every wait of a run with its class and evidence (shared's [`attribute`]), and the waits
/// grouped by class and direction as the CLI prints them ([`summarize`]).
#[derive(Debug, Default, PartialEq)]
pub struct Attribution {
    /// In request order (then in the order of the request's spans).
    pub stalls: Vec<Stall>,
    /// Most frequent first.
    pub classes: Vec<ClassSummary>,
}

impl Attribution {
    pub fn of(analysis: &RunAnalysis, spec: Option<&RrSpec>) -> Attribution {
        let stalls = attribute(analysis, spec);
        let classes = summarize(&stalls);
        Attribution { stalls, classes }
    }

    /// The stalls of request `req` (an id, as in the analysis).
    pub fn of_request(&self, req: u32) -> &[Stall] {
        let from = self.stalls.partition_point(|stall| stall.req.0 < req);
        let to = self.stalls.partition_point(|stall| stall.req.0 <= req);
        &self.stalls[from..to]
    }
}

impl Run {
    fn new(id: RunId, spec: Scenario, instruments: Instruments) -> Run {
        let bulk = matches!(spec, Scenario::Bulk(_)).then(BulkAnalysis::new);
        let imported = matches!(spec, Scenario::Import(_)).then(ImportedTally::default);
        let analysis = RunAnalysis::of_rr(spec.rr());
        Run {
            id,
            spec,
            instruments,
            status: RunStatus::Running,
            analysis,
            bulk,
            imported,
            kernel: KernelTracks::new(),
            events: 0,
            clock: None,
            summary: OnceCell::new(),
            bulk_summary: OnceCell::new(),
            attributed: Incremental::new(),
            watched: Cell::new(false),
            settled_stalls: RefCell::new(Vec::new()),
            attribution: OnceCell::new(),
            latencies: OnceCell::new(),
            facts: RefCell::new((Arc::new(Facts::default()), 0)),
        }
    }

    fn push(&mut self, events: &[Event]) {
        if self.clock.is_none() && self.events == 0 {
            // Recorded first, by the client side, before any request.
            self.clock = events.iter().take(16).find_map(|event| match event.kind {
                EventKind::ClockSync { offset_ns, uncertainty_ns, rtt_ns } => {
                    Some(ClockSync { offset_ns, uncertainty_ns, rtt_ns })
                }
                _ => None,
            });
        }
        self.events += events.len() as u64;
        self.kernel.push_all(events);
        // The settled stalls, from the cached answer if there is one (see `settled_stalls`).
        let mut stalls = match self.attribution.take() {
            Some(answer) => answer.stalls,
            None => std::mem::take(self.settled_stalls.get_mut()),
        };
        if let Some(bulk) = &mut self.bulk {
            bulk.push_all(events);
        } else if let Some(imported) = &mut self.imported {
            imported.push(events);
        } else if let Some(spec) = stall_spec(&self.spec) {
            self.analysis.push_all(events);
            if self.watched.get() {
                self.attributed.push(&self.analysis, spec, events, &mut stalls);
                // A settled request rarely changes again: its spans take a third of the memory
                // packed (a million requests: about 150 MB less).
                self.analysis.pack_settled(self.attributed.next());
                // Someone will ask for the summary: merge the pending latencies whenever a
                // rebuild is due, so that the first answer (a whole file's, at its end) does not
                // sort them all at once.
                self.analysis.settle_latencies();
            }
        }
        *self.settled_stalls.get_mut() = stalls;
        self.summary = OnceCell::new();
        self.bulk_summary = OnceCell::new();
        self.latencies = OnceCell::new();
        // Only while nothing else holds them: a view's copy would make this a copy of them all.
        let unshared = Arc::get_mut(&mut self.facts.get_mut().0).is_some();
        if self.watched.get() && unshared && self.is_rr() {
            self.facts();
        }
    }

    /// The timeline's facts of every request (empty for other scenarios), up to date with the
    /// events so far: only the requests since the last call are built (and the last few again,
    /// [`Facts::update`]), in place unless a caller still holds the previous answer.
    pub fn facts(&self) -> Arc<Facts> {
        let mut cell = self.facts.borrow_mut();
        if cell.1 != self.events && self.is_rr() {
            let why = self.attribution();
            Arc::make_mut(&mut cell.0).update(&self.analysis, &why.stalls);
            cell.1 = self.events;
        }
        Arc::clone(&cell.0)
    }

    /// From now on every batch is attributed as it arrives (see `attributed`): for a run that
    /// will be shown, so that its first answer does not attribute the whole run in one task.
    fn watch(&self) {
        self.watched.set(true);
    }

    /// Makes now what showing a watched run reads first (its ordered latencies, summary,
    /// attribution and facts, each cached until the next batch), so that showing it is only
    /// the view's own work. For a run no more batches will come to: a file read to its end.
    fn prepare(&self) {
        if !self.watched.get() || !self.is_rr() {
            return;
        }
        self.analysis.order_latencies();
        self.summary();
        self.attribution();
        self.facts();
    }

    /// The request/response summary (all zeros for a run of another scenario): equal to
    /// `self.analysis.summary()`, without counting the settled requests' stalled reads again.
    pub fn summary(&self) -> &Summary {
        self.summary.get_or_init(|| {
            let stalled_reads =
                self.attributed.held_reads() + self.attributed.tail_held_reads(&self.analysis);
            self.analysis.summary_with_stalled_reads(stalled_reads)
        })
    }

    /// Why each wait of the whole run happened, with the spec ruling classes out (no Nagle
    /// stall from a writer with TCP_NODELAY): always equal to [`Attribution::of`] the analysis,
    /// at the cost of the requests not settled yet. Empty for a run of another scenario. Once the
    /// run has ended (finished, or its file ended) no batch comes, so this answer is final.
    pub fn attribution(&self) -> &Attribution {
        self.attribution.get_or_init(|| match stall_spec(&self.spec) {
            Some(spec) => {
                self.watched.set(true);
                let mut stalls = self.settled_stalls.take();
                let tail = self.attributed.tail(&self.analysis, spec);
                let classes = self.attributed.classes_with(&tail);
                stalls.extend(tail);
                Attribution { stalls, classes }
            }
            None => Attribution::default(),
        })
    }

    /// Every completed request's latency in ns, shortest first (empty for other scenarios).
    pub fn latencies_ns(&self) -> &[u64] {
        self.latencies.get_or_init(|| self.analysis.latencies_ns())
    }

    /// What a bulk run moved so far; `None` for other scenarios.
    pub fn bulk_summary(&self) -> Option<&BulkSummary> {
        let bulk = self.bulk.as_ref()?;
        Some(self.bulk_summary.get_or_init(|| bulk.summary()))
    }

    /// The run's TCP_INFO samples over time, per connection and side.
    pub fn kernel(&self) -> &KernelTracks {
        &self.kernel
    }

    /// Whether the per-request views apply (a bulk run has no requests; a standalone server's
    /// session has, as the server saw them).
    pub fn is_rr(&self) -> bool {
        stall_spec(&self.spec).is_some()
    }

    /// No more events come: an imported run's last undecided packets are decided.
    fn ended(&mut self) {
        if let Some(imported) = &mut self.imported {
            imported.decide_all();
        }
    }
}

/// One stream of messages since its Hello: the probe's live one, or an opened file's.
#[derive(Debug, Default)]
pub struct Stream {
    /// In the order the probe started them (oldest first).
    runs: Vec<Run>,
    /// Where each run is in `runs`: a file of many runs, their events in any order, is read in
    /// time proportional to its size, not to its runs times its messages.
    index: HashMap<RunId, usize>,
    /// The most runs kept (a file's session): past it a run's messages are counted, not kept.
    max_runs: Option<usize>,
    /// Runs started past `max_runs`.
    runs_not_kept: u64,
    /// The stream's Hello, readable or not (it names the probe's version either way).
    hello: Option<Hello>,
    /// Whether this stream began with a Hello we can read. Until it has, nothing else is applied:
    /// a stream of another version could decode as garbage that looks valid.
    greeted: bool,
    /// A stream this build cannot read (another protocol version, a malformed message).
    pub error: Option<String>,
    /// Every message applied since the Hello, framed as in a session file, for the live session
    /// (what Download saves); `None` for a file's session, whose file the user already has.
    record: Option<Vec<u8>>,
}

impl Stream {
    /// The probe's stream: recorded so that it can be downloaded.
    pub fn live() -> Stream {
        Stream { record: Some(Vec::new()), ..Stream::default() }
    }

    /// An opened file's stream. A file is whatever anyone sends: it keeps at most
    /// [`MAX_FILE_RUNS`] runs, so that a file of many tiny runs cannot cost the page more
    /// memory than a run's worth each (a run's analysis is a few KB before its first event).
    pub fn file() -> Stream {
        Stream { max_runs: Some(MAX_FILE_RUNS), ..Stream::default() }
    }

    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    pub fn run(&self, id: RunId) -> Option<&Run> {
        self.index.get(&id).map(|&at| &self.runs[at])
    }

    pub fn hello(&self) -> Option<&Hello> {
        self.hello.as_ref()
    }

    /// The machine the runs were made on, once the stream is readable.
    pub fn host(&self) -> Option<&HostFacts> {
        self.greeted.then_some(self.hello.as_ref()).flatten().map(|hello| &hello.host)
    }

    /// Whether the stream so far is one we can read and act on.
    pub fn is_greeted(&self) -> bool {
        self.greeted
    }

    pub fn is_running(&self) -> bool {
        self.runs.iter().any(|run| run.status == RunStatus::Running)
    }

    /// The session as a session file (Hello and every run's messages, each framed), if this
    /// session is recorded and readable.
    pub fn file_bytes(&self) -> Option<&[u8]> {
        self.record.as_deref().filter(|_| self.greeted)
    }

    /// Applies one message; returns the run it started, if it started one.
    pub fn apply(&mut self, message: ToBrowser) -> Option<RunId> {
        if let ToBrowser::Hello(hello) = &message {
            // A Hello starts a stream: after it the probe replays every run it has, so what we
            // held is either stale or about to arrive again. Start from nothing.
            *self = Stream {
                hello: Some(hello.clone()),
                record: self.record.take().map(|_| Vec::new()),
                max_runs: self.max_runs,
                ..Stream::default()
            };
            match check_hello(&message) {
                Ok(()) => self.greeted = true,
                Err(error) => self.error = Some(error.to_string()),
            }
        }
        // A refusal answers one tab's request; it is no part of the session.
        if !self.greeted || matches!(message, ToBrowser::Rejected { .. }) {
            return None;
        }
        if let Some(record) = &mut self.record {
            write_frame(&message, record);
        }
        match message {
            // A file's overviews and trailer repeat what its events say (they are read from
            // the file's end before the events: see `AppState::preview_file`).
            ToBrowser::Hello(_)
            | ToBrowser::Rejected { .. }
            | ToBrowser::Overview { .. }
            | ToBrowser::Trailer(_)
            | ToBrowser::ClassState(_)
            | ToBrowser::Stream { .. } => None,
            ToBrowser::RunStarted { run, spec, instruments } => {
                // An id started again (only a crafted file does that) replaces its run where it
                // was.
                match self.index.get(&run) {
                    Some(&at) => self.runs[at] = Run::new(run, spec, instruments),
                    None if self.max_runs.is_some_and(|most| self.runs.len() >= most) => {
                        self.runs_not_kept += 1;
                        return None;
                    }
                    None => {
                        let started = Run::new(run, spec, instruments);
                        self.index.insert(run, self.runs.len());
                        self.runs.push(started);
                    }
                }
                Some(run)
            }
            ToBrowser::Events { run, events } => {
                if let Some(run) = self.run_mut(run) {
                    run.push(&events);
                }
                None
            }
            ToBrowser::RunFinished { run, outcome } => {
                if let Some(run) = self.run_mut(run) {
                    run.status = match outcome {
                        RunOutcome::Completed => RunStatus::Done,
                        RunOutcome::Failed { error } => RunStatus::Failed { error },
                        RunOutcome::Interrupted => RunStatus::Interrupted,
                    };
                    run.ended();
                }
                None
            }
        }
    }

    /// The stream ended for good (a file's last frame): a run still going never finished.
    fn end(&mut self) {
        for run in &mut self.runs {
            if run.status == RunStatus::Running {
                run.status = RunStatus::Incomplete;
                run.ended();
            }
        }
    }

    fn run_mut(&mut self, id: RunId) -> Option<&mut Run> {
        self.index.get(&id).map(|&at| &mut self.runs[at])
    }
}

/// An opened session file, numbered in the order the user opened them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

/// Where a run came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Live,
    File(FileId),
}

impl Source {
    /// The `data-source` value of a run entry.
    pub fn word(self) -> &'static str {
        match self {
            Source::Live => "live",
            Source::File(_) => "file",
        }
    }
}

/// A run in one of the sessions: run ids repeat between the live session and files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunKey {
    pub source: Source,
    pub run: RunId,
}

impl RunKey {
    pub fn live(run: RunId) -> RunKey {
        RunKey { source: Source::Live, run }
    }
}

/// A session file the user opened: its runs, and what was wrong with it, if anything.
#[derive(Debug)]
pub struct OpenedFile {
    pub id: FileId,
    pub name: String,
    pub session: Stream,
    /// Names the file and the problem; the runs read before the problem are still shown.
    pub error: Option<String>,
    /// While the file is being read: its decoder, the bytes fed so far and the file's size.
    loading: Option<Loading>,
}

/// The most runs a file's session keeps (see [`Stream::file`]): far more than a sweep, a lesson
/// or a day of runs from the page hold, and at most a few tens of MB however small the runs.
pub const MAX_FILE_RUNS: usize = 1000;

/// No request takes fewer bytes of a session file than this (its start and end events alone
/// take more; a recorded one takes hundreds): what bounds a file's claim of how many it holds.
const MIN_FILE_BYTES_PER_REQUEST: u64 = 16;

/// A file being read chunk by chunk.
#[derive(Debug)]
struct Loading {
    decoder: SessionDecoder,
    read_bytes: u64,
    total_bytes: u64,
    newest: Option<RunId>,
    /// The runs' overviews from the file's end, shown until the file is read.
    overviews: Vec<(RunId, Overview)>,
}

impl OpenedFile {
    /// `(bytes read, bytes in the file)` while the file is being read.
    pub fn progress(&self) -> Option<(u64, u64)> {
        self.loading.as_ref().map(|loading| (loading.read_bytes, loading.total_bytes))
    }
}

/// The live session, the opened files, and which run the user is looking at.
#[derive(Debug)]
pub struct AppState {
    pub live: Stream,
    /// In the order they were opened.
    files: Vec<OpenedFile>,
    next_file: u32,
    selected: Option<RunKey>,
    /// The runs marked for the Compare view, in the order they were marked (the first is the
    /// one the others are compared with).
    compared: Vec<RunKey>,
    /// In a class: where the presenter is, as the room last said.
    pub class: Option<ClassState>,
    /// Why the probe refused the last run the user asked for; cleared by the next request.
    pub rejected: Option<String>,
    /// The user asked for a run and the probe has not answered yet: keeps Run from being pressed
    /// twice.
    pub start_pending: bool,
    /// A live run a link asked for: shown when it arrives (the probe replays its runs after
    /// its Hello), and kept shown while the rest of the replay comes in.
    follow: Option<RunKey>,
    /// The probe's live stream, once it said which (`ToBrowser::Stream`): a reconnect asks to
    /// resume it ([`AppState::resume_query`]).
    live_stream: Option<u64>,
    /// A reconnect's Hello, held until the probe says whether the stream resumes (keep what the
    /// page has) or starts over (start from it).
    pending_hello: Option<ToBrowser>,
}

impl Default for AppState {
    fn default() -> Self {
        AppState {
            live: Stream::live(),
            files: Vec::new(),
            next_file: 0,
            selected: None,
            compared: Vec::new(),
            class: None,
            rejected: None,
            start_pending: false,
            follow: None,
            live_stream: None,
            pending_hello: None,
        }
    }
}

impl AppState {
    pub fn files(&self) -> &[OpenedFile] {
        &self.files
    }

    pub fn file(&self, id: FileId) -> Option<&OpenedFile> {
        self.files.iter().find(|file| file.id == id)
    }

    pub fn session(&self, source: Source) -> Option<&Stream> {
        match source {
            Source::Live => Some(&self.live),
            Source::File(id) => self.file(id).map(|file| &file.session),
        }
    }

    pub fn run(&self, key: RunKey) -> Option<&Run> {
        self.session(key.source)?.run(key.run)
    }

    pub fn selected(&self) -> Option<&Run> {
        self.run(self.selected?)
    }

    pub fn selected_key(&self) -> Option<RunKey> {
        self.selected
    }

    /// Shows `key` if there is such a run; otherwise keeps the current choice.
    pub fn select(&mut self, key: RunKey) {
        if self.run(key).is_some() {
            self.selected = Some(key);
            self.follow = None;
        }
    }

    /// Shows the newest live run (a class's student, when the presenter runs one live).
    pub fn show_newest_live(&mut self) {
        if let Some(run) = self.live.runs().last() {
            self.selected = Some(RunKey::live(run.id));
            self.follow = None;
        }
    }

    /// Shows the live run `key` now if it is there, else as soon as it arrives; until the user
    /// chooses another run or presses Run, newer runs do not take its place.
    pub fn follow(&mut self, key: RunKey) {
        self.follow = Some(key);
        if self.run(key).is_some() {
            self.selected = Some(key);
        }
    }

    /// Whether the probe is still running one of our runs (it runs one at a time).
    pub fn is_running(&self) -> bool {
        self.live.is_running()
    }

    /// Whether the live stream so far is one we can read and act on.
    pub fn is_greeted(&self) -> bool {
        self.live.is_greeted()
    }

    /// The probe's own version, from its Hello.
    pub fn probe_version(&self) -> Option<&str> {
        self.live.hello().map(|hello| hello.ackscope_version.as_str())
    }

    /// The user pressed Run and the request is on its way.
    pub fn start_requested(&mut self) {
        self.rejected = None;
        self.start_pending = true;
        self.follow = None;
    }

    /// The request never left (no connection): nothing to wait for.
    pub fn start_failed(&mut self) {
        self.start_pending = false;
    }

    /// A message that did not decode: show it rather than drop it silently.
    pub fn bad_message(&mut self, error: &WireError) {
        self.live.error = Some(format!("could not read a message from the probe: {error}"));
    }

    /// Opens a session file's bytes as a session of its own and shows its newest run. A bad
    /// frame ends the file: the runs before it stay, and the error names the file and the
    /// problem.
    pub fn open_file(&mut self, name: &str, bytes: &[u8]) -> FileId {
        let id = self.begin_file(name, bytes.len() as u64);
        self.feed_file(id, bytes);
        self.end_file(id);
        id
    }

    /// Starts reading a file of `total_bytes` that arrives in pieces ([`AppState::feed_file`],
    /// then [`AppState::end_file`]). It is listed at once, with its progress.
    pub fn begin_file(&mut self, name: &str, total_bytes: u64) -> FileId {
        let id = self.add_file(name, Stream::file(), None);
        if let Some(file) = self.files.last_mut() {
            let decoder = SessionDecoder::default();
            file.loading = Some(Loading {
                decoder,
                read_bytes: 0,
                total_bytes,
                newest: None,
                overviews: Vec::new(),
            });
        }
        id
    }

    /// The next piece of a file begun with [`AppState::begin_file`]: its whole messages are
    /// applied to the file's session now, so its runs fill in as it loads.
    pub fn feed_file(&mut self, id: FileId, bytes: &[u8]) {
        let Some(file) = self.files.iter_mut().find(|file| file.id == id) else { return };
        let Some(loading) = &mut file.loading else { return };
        let session = &mut file.session;
        let (newest, overviews) = (&mut loading.newest, &loading.overviews);
        // Believed only as far as the file could hold that many requests.
        let most = usize::try_from(loading.total_bytes / MIN_FILE_BYTES_PER_REQUEST).unwrap_or(0);
        loading.decoder.feed(bytes, |message| {
            let started = session.apply(message);
            if let Some(run) = started.and_then(|run| session.run_mut(run)) {
                // The file's end said how many requests this run has: room for them at once.
                let rows = overviews.iter().find(|(id, _)| *id == run.id).map(|(_, o)| o.rows);
                if let Some(rows) = rows {
                    run.analysis.reserve_requests((rows as usize).min(most));
                }
                // A file's runs are what its reader came to see: each is attributed as its
                // pieces arrive, so reading the last piece costs what any piece does (attributing
                // the million-request file whole at its end was most of a 390-620 ms task).
                run.watch();
            }
            *newest = started.or(*newest);
        });
        loading.read_bytes += bytes.len() as u64;
    }

    /// The overviews written at the end of a file being read (`wire::read_overviews`): shown
    /// while the events are decoded.
    pub fn preview_file(&mut self, id: FileId, overviews: Vec<(RunId, Overview)>) {
        let file = self.files.iter_mut().find(|file| file.id == id);
        if let Some(loading) = file.and_then(|file| file.loading.as_mut()) {
            loading.overviews = overviews;
        }
    }

    /// The newest file being read that has an overview, with its name and its last run's
    /// overview (the run it will show when read).
    pub fn loading_overview(&self) -> Option<(&str, &Overview)> {
        self.files.iter().rev().find_map(|file| {
            let (_, overview) = file.loading.as_ref()?.overviews.last()?;
            Some((file.name.as_str(), overview))
        })
    }

    /// `(bytes read, bytes in the file)` of the newest file being read.
    pub fn loading_progress(&self) -> Option<(u64, u64)> {
        self.files.iter().rev().find_map(OpenedFile::progress)
    }

    /// The file has been read: runs still going never finished, the problem (if any) is named,
    /// and its newest run is shown.
    pub fn end_file(&mut self, id: FileId) {
        let Some(file) = self.files.iter_mut().find(|file| file.id == id) else { return };
        let Some(mut loading) = file.loading.take() else { return };
        file.session.end();
        let name = &file.name;
        let problem = loading.decoder.finish().map(|problem| match file.session.runs().len() {
            0 => format!("{name}: {problem}"),
            1 => format!("{name}: {problem}; the run read before it is shown"),
            n => format!("{name}: {problem}; the {n} runs read before it are shown"),
        });
        let not_kept = file.session.runs_not_kept;
        let too_many = (not_kept > 0).then(|| {
            format!(
                "{name}: the file holds {} runs; a page keeps the first {MAX_FILE_RUNS} of a \
                 file, and those are shown (`ackscope show` reads them all)",
                MAX_FILE_RUNS as u64 + not_kept
            )
        });
        file.error = match (problem, too_many) {
            (Some(problem), Some(too_many)) => Some(format!("{problem}. {too_many}")),
            (problem, too_many) => problem.or(too_many),
        };
        if let Some(run) = loading.newest {
            self.selected = Some(RunKey { source: Source::File(id), run });
        }
    }

    /// The last step of reading a file before [`AppState::end_file`], a moment of its own: its
    /// runs make what showing them reads ([`Run::prepare`]), so that the task that first shows
    /// the newest one is only the view's work (together they were a 70-105 ms task at a
    /// million requests).
    pub fn prepare_file(&self, id: FileId) {
        let Some(file) = self.files.iter().find(|file| file.id == id) else { return };
        for run in file.session.runs() {
            run.prepare();
        }
    }

    /// A file that was not read at all (too large, unreadable): listed with the reason only.
    pub fn refuse_file(&mut self, name: &str, reason: String) -> FileId {
        self.add_file(name, Stream::file(), Some(format!("{name}: {reason}")))
    }

    /// Forgets an opened file (and stops showing or comparing its runs).
    pub fn close_file(&mut self, id: FileId) {
        self.files.retain(|file| file.id != id);
        if self.selected.is_some_and(|key| key.source == Source::File(id)) {
            self.selected = None;
        }
        self.compared.retain(|key| key.source != Source::File(id));
    }

    /// Marks a request/response run for comparison, or unmarks it. Other runs have no
    /// latencies to compare, and an unknown run changes nothing.
    pub fn toggle_compare(&mut self, key: RunKey) {
        if let Some(at) = self.compared.iter().position(|&marked| marked == key) {
            self.compared.remove(at);
        } else if self.run(key).is_some_and(Run::is_rr) {
            self.compared.push(key);
        }
    }

    pub fn is_compared(&self, key: RunKey) -> bool {
        self.compared.contains(&key)
    }

    /// The runs marked for comparison, in the order they were marked.
    pub fn compared(&self) -> Vec<RunKey> {
        // Filtered too: a RunStarted that reuses an id replaces the run, maybe with a bulk one.
        self.compared.iter().copied().filter(|&key| self.run(key).is_some_and(Run::is_rr)).collect()
    }

    /// What a reconnecting page asks the probe for in `/ws?resume=` (`wire::ResumePoint`): its
    /// stream, its newest run, how many of that run's events it has and whether it has its end;
    /// `None` before the probe named its stream or while the page has no run (nothing to
    /// resume).
    pub fn resume_query(&self) -> Option<String> {
        let stream = self.live_stream?;
        let run = self.live.runs().last()?;
        let finished = run.status != RunStatus::Running;
        Some(ResumePoint { stream, run: run.id, events: run.events, finished }.to_string())
    }

    /// Unmarks every run.
    pub fn clear_compare(&mut self) {
        self.compared.clear();
    }

    fn add_file(&mut self, name: &str, session: Stream, error: Option<String>) -> FileId {
        let id = FileId(self.next_file);
        self.next_file += 1;
        self.files.push(OpenedFile { id, name: name.to_string(), session, error, loading: None });
        id
    }
}

/// A Hello of a new stream: the live session starts over; the probe replays every run after it.
fn start_live_over(state: &mut AppState, hello: ToBrowser) {
    state.rejected = None;
    state.start_pending = false;
    if state.selected.is_some_and(|key| key.source == Source::Live) {
        state.selected = None;
    }
    // The live runs are replayed as new runs after the Hello: what was marked is gone.
    state.compared.retain(|key| key.source != Source::Live);
    state.live.apply(hello);
}

/// Applies one message from the probe's live stream. Opened files are never touched: a Hello
/// starts only the live session over.
pub fn apply(state: &mut AppState, message: ToBrowser) {
    match message {
        // A reconnect: the probe says next whether it resumes the stream the page had.
        ToBrowser::Hello(_) if state.live_stream.is_some() => {
            state.rejected = None;
            state.start_pending = false;
            state.pending_hello = Some(message);
        }
        ToBrowser::Hello(_) => start_live_over(state, message),
        ToBrowser::Stream { id, resumed } => {
            let hello = state.pending_hello.take();
            match (resumed && state.live_stream == Some(id), hello) {
                // Resumed: what the page has stays; the rest of the stream follows.
                (true, _) => {}
                (false, Some(hello)) => start_live_over(state, hello),
                (false, None) => {}
            }
            state.live_stream = Some(id);
        }
        ToBrowser::Rejected { reason } => {
            if state.live.is_greeted() {
                state.rejected = Some(reason);
                state.start_pending = false;
            }
        }
        // The room's state is the page's business, not the session's (files never hold it).
        ToBrowser::ClassState(class) => state.class = Some(class),
        message => {
            if let Some(run) = state.live.apply(message) {
                // The newest run is the one the user just asked for (or the latest of a replay),
                // unless the user is reading a file and did not ask for it.
                let reading_file =
                    state.selected.is_some_and(|key| matches!(key.source, Source::File(_)));
                let key = RunKey::live(run);
                // A run a link asked for; else the user's own; else (no link waiting) the newest.
                let followed = state.follow == Some(key);
                if followed || state.start_pending || !reading_file && state.follow.is_none() {
                    state.selected = Some(key);
                }
                state.start_pending = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::wire::PROTOCOL_VERSION;
    use ackscope_shared::{BulkSpec, EventKind, RrSpec, Side};

    use super::*;
    use crate::fixtures::{hello, host, nagle_run, rr_started, MS};
    use crate::session_file::decode_session;

    fn started(state: &mut AppState, id: u32) {
        if !state.is_greeted() {
            apply(state, hello());
        }
        apply(state, rr_started(id, RrSpec::default()));
    }

    fn events(id: u32, events: Vec<Event>) -> ToBrowser {
        ToBrowser::Events { run: RunId(id), events }
    }

    fn finished(id: u32, outcome: RunOutcome) -> ToBrowser {
        ToBrowser::RunFinished { run: RunId(id), outcome }
    }

    #[test]
    fn hello_starts_over() {
        let mut state = AppState::default();
        started(&mut state, 1);
        apply(&mut state, events(1, nagle_run(3, 44 * MS)));
        state.live.error = Some("old".into());
        assert_eq!(state.live.runs().len(), 1);

        apply(&mut state, hello());
        assert!(state.live.runs().is_empty());
        assert!(state.selected().is_none());
        assert!(state.live.error.is_none());
        assert!(state.is_greeted());
        assert_eq!(state.probe_version(), Some("0.1.0"));
        assert_eq!(state.live.host(), Some(&host()));
    }

    #[test]
    fn a_resumed_stream_keeps_what_the_page_has_and_a_new_one_starts_over() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        assert_eq!(state.resume_query(), None, "the probe has not named its stream");
        apply(&mut state, ToBrowser::Stream { id: 7, resumed: false });
        assert_eq!(state.resume_query(), None, "no run: nothing to resume");
        started(&mut state, 1);
        let all = nagle_run(4, 44 * MS);
        let (first, rest) = all.split_at(all.len() / 2);
        apply(&mut state, events(1, first.to_vec()));
        assert_eq!(state.resume_query(), Some(format!("7.1.{}.0", first.len())));

        // The socket was cut; the probe resumes: the run goes on where it was.
        apply(&mut state, hello());
        apply(&mut state, ToBrowser::Stream { id: 7, resumed: true });
        apply(&mut state, events(1, rest.to_vec()));
        assert_eq!(state.live.runs().len(), 1);
        assert_eq!(state.live.runs()[0].events, all.len() as u64, "every event, once");
        apply(&mut state, finished(1, RunOutcome::Completed));
        assert_eq!(state.resume_query(), Some(format!("7.1.{}.1", all.len())));

        // Another stream (a restarted probe): the page starts over and takes its replay.
        apply(&mut state, hello());
        apply(&mut state, ToBrowser::Stream { id: 8, resumed: false });
        assert!(state.live.runs().is_empty(), "the old stream's runs are gone");
        assert!(state.is_greeted());
    }

    #[test]
    fn events_update_the_summary_and_finish_sets_the_status() {
        let mut state = AppState::default();
        started(&mut state, 1);
        assert_eq!(state.selected().map(|run| run.status.clone()), Some(RunStatus::Running));
        assert!(state.is_running());

        let all = nagle_run(5, 44 * MS);
        let (first, rest) = all.split_at(all.len() / 2);
        apply(&mut state, events(1, first.to_vec()));
        let partial = state.selected().map(|run| run.summary().requests);
        apply(&mut state, events(1, rest.to_vec()));
        let run = state.selected().expect("run 1 is selected");
        // The cached summary was dropped when more events came.
        assert!(partial < Some(5), "{partial:?}");
        assert_eq!(run.summary().requests, 5);
        assert_eq!(run.summary().stalled_reads, 8, "two per request after the first");
        assert!(run.summary().max_ms > 88.0, "{}", run.summary().max_ms);
        assert_eq!(run.events, all.len() as u64);
        assert!(run.bulk_summary().is_none());
        assert_eq!(run.instruments, Instruments::default());

        let failed = RunOutcome::Failed { error: "connection reset".into() };
        apply(&mut state, finished(1, failed));
        let status = &state.live.runs()[0].status;
        assert_eq!(status.label(), "failed: connection reset");
        assert!(!state.is_running());

        started(&mut state, 2);
        apply(&mut state, finished(2, RunOutcome::Interrupted));
        assert_eq!(state.live.runs()[1].status.word(), "interrupted");
    }

    #[test]
    fn attribution_follows_the_events_and_the_spec() {
        use ackscope_shared::attribution::StallClass;

        let mut state = AppState::default();
        started(&mut state, 1);
        let all = nagle_run(5, 44 * MS);
        let (first, rest) = all.split_at(all.len() / 2);
        apply(&mut state, events(1, first.to_vec()));
        let partial = state.selected().map(|run| run.attribution().stalls.len());
        apply(&mut state, events(1, rest.to_vec()));
        let run = state.selected().expect("run 1 is selected");
        // The cached attribution was dropped when more events came.
        assert!(partial < Some(8), "{partial:?}");
        let attribution = run.attribution();
        assert_eq!(attribution.stalls.len(), 8, "two per request after the first");
        assert!(attribution.stalls.iter().all(|s| s.class == StallClass::NagleDelayedAck));
        assert_eq!(attribution.classes.len(), 2, "one line per direction");
        assert!(std::ptr::eq(attribution, run.attribution()), "computed once, then cached");
        assert!(attribution.of_request(0).is_empty());
        let second = attribution.of_request(2);
        assert_eq!(second.len(), 2);
        assert!(second.iter().all(|s| s.req.0 == 2));
        assert!(attribution.of_request(9).is_empty());

        // The spec rules Nagle out for a writer with TCP_NODELAY.
        let client_nodelay = RrSpec {
            nodelay: ackscope_shared::PerSide { client: true, server: false },
            ..RrSpec::default()
        };
        apply(&mut state, rr_started(2, client_nodelay));
        apply(&mut state, events(2, nagle_run(5, 44 * MS)));
        let run = state.selected().expect("run 2 is selected");
        let classes: Vec<(StallClass, &str, u32)> = run
            .attribution()
            .classes
            .iter()
            .map(|c| (c.class, c.direction.as_str(), c.count))
            .collect();
        assert_eq!(
            classes,
            [
                (StallClass::NagleDelayedAck, "server->client", 4),
                (StallClass::Unexplained, "client->server", 4)
            ]
        );
    }

    #[test]
    fn a_standalone_servers_session_is_analysed_from_the_server_alone() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(
            &mut state,
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: Scenario::Server(RrSpec::default()),
                instruments: Instruments::default(),
            },
        );
        let event = |at_ns, kind| Event {
            at_ns,
            side: Side::Server,
            conn: ackscope_shared::ConnId(0),
            req: ackscope_shared::ReqId(0),
            kind,
        };
        // The client's 4-byte length arrived alone; its 2048-byte body 44 ms later.
        let events_of_one_request = vec![
            event(0, EventKind::ReadStart { len_bytes: 4096 }),
            event(MS, EventKind::ReadDone { bytes: 4 }),
            event(MS, EventKind::RequestStart),
            event(MS + 1000, EventKind::ReadStart { len_bytes: 4092 }),
            event(45 * MS, EventKind::ReadDone { bytes: 2048 }),
            event(45 * MS + 1000, EventKind::WriteStart { len_bytes: 4 }),
            event(45 * MS + 2000, EventKind::WriteDone { bytes: 4 }),
            event(45 * MS + 3000, EventKind::RequestDone),
        ];
        apply(&mut state, events(1, events_of_one_request));
        let run = state.selected().expect("the server's run is shown");
        assert!(run.is_rr(), "its requests have a timeline");
        assert_eq!(run.summary().requests, 1);
        let stalls = &run.attribution().stalls;
        assert_eq!(stalls.len(), 1, "{stalls:?}");
        assert_eq!(
            stalls[0].class,
            ackscope_shared::attribution::StallClass::NagleDelayedAck,
            "{}",
            stalls[0].evidence
        );
        assert_eq!((stalls[0].from, stalls[0].to), (Side::Client, Side::Server));
    }

    #[test]
    fn a_bulk_run_gets_the_bulk_analysis() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(
            &mut state,
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: Scenario::Bulk(BulkSpec::default()),
                instruments: Instruments::default(),
            },
        );
        let event = |at_ns, side, kind| Event {
            at_ns,
            side,
            conn: ackscope_shared::ConnId(0),
            req: ackscope_shared::ReqId(0),
            kind,
        };
        let read = |at_ns| event(at_ns, Side::Server, EventKind::ReadDone { bytes: 62_500 });
        let start = event(0, Side::Client, EventKind::RequestStart);
        apply(&mut state, events(1, vec![start, read(MS), read(10 * MS)]));
        let run = state.selected().expect("the bulk run is shown");
        assert!(!run.is_rr());
        assert_eq!(run.events, 3);
        assert!(run.analysis.requests().is_empty(), "no per-request analysis");
        let bulk = run.bulk_summary().expect("a bulk summary");
        assert_eq!(bulk.bytes, 125_000);
        // 1 Mbit in 10 ms.
        assert!((bulk.goodput_mbps - 100.0).abs() < 1e-6, "{}", bulk.goodput_mbps);
    }

    #[test]
    fn the_newest_run_is_selected_and_the_user_can_go_back() {
        let mut state = AppState::default();
        started(&mut state, 1);
        apply(&mut state, finished(1, RunOutcome::Completed));
        started(&mut state, 2);
        assert_eq!(state.selected_key(), Some(RunKey::live(RunId(2))));
        state.select(RunKey::live(RunId(1)));
        assert_eq!(state.selected_key(), Some(RunKey::live(RunId(1))));
        state.select(RunKey::live(RunId(9)));
        assert_eq!(
            state.selected_key(),
            Some(RunKey::live(RunId(1))),
            "an unknown run changes nothing"
        );
        // Events for a run we never heard of are dropped, not attributed elsewhere.
        apply(&mut state, events(7, nagle_run(2, MS)));
        assert!(state.live.runs().iter().all(|run| run.analysis.requests().is_empty()));
    }

    #[test]
    fn a_followed_run_is_shown_when_the_replay_brings_it_and_stays_shown() {
        let mut state = AppState::default();
        state.follow(RunKey::live(RunId(1)));
        assert!(state.selected().is_none(), "not there yet");
        started(&mut state, 1);
        started(&mut state, 2);
        assert_eq!(
            state.selected_key(),
            Some(RunKey::live(RunId(1))),
            "the replay's newer run does not take over"
        );
        state.start_requested();
        apply(&mut state, rr_started(3, RrSpec::default()));
        assert_eq!(state.selected_key(), Some(RunKey::live(RunId(3))), "the user's own run does");
    }

    #[test]
    fn rejected_keeps_the_reason_until_the_next_request() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        state.start_requested();
        assert!(state.start_pending);
        let reason = "a run is already in progress: wait for run 3 to finish".to_string();
        apply(&mut state, ToBrowser::Rejected { reason: reason.clone() });
        assert_eq!(state.rejected.as_ref(), Some(&reason));
        assert!(!state.start_pending);
        state.start_requested();
        assert!(state.rejected.is_none());
    }

    #[test]
    fn another_protocol_version_is_shown_and_nothing_after_it_applies() {
        let mut state = AppState::default();
        let newer = Hello {
            protocol_version: PROTOCOL_VERSION + 1,
            ackscope_version: "9.0.0".into(),
            host: HostFacts::default(),
        };
        apply(&mut state, ToBrowser::Hello(newer));
        let error = state.live.error.clone().expect("a version error");
        assert!(error.contains(&format!("version {}", PROTOCOL_VERSION + 1)), "{error}");
        assert!(!state.is_greeted());
        assert!(state.live.host().is_none());
        assert!(state.live.file_bytes().is_none(), "nothing to download");
        apply(&mut state, rr_started(1, RrSpec::default()));
        assert!(state.live.runs().is_empty());

        // Messages before any Hello are refused the same way.
        let mut fresh = AppState::default();
        apply(&mut fresh, rr_started(1, RrSpec::default()));
        assert!(fresh.live.runs().is_empty());
    }

    #[test]
    fn an_undecodable_message_is_reported() {
        let mut state = AppState::default();
        let error = ackscope_shared::wire::decode::<ToBrowser>(&[0xff, 0xff]).unwrap_err();
        state.bad_message(&error);
        let shown = state.live.error.expect("an error to show");
        assert!(shown.starts_with("could not read a message from the probe"), "{shown}");
    }

    /// A live session with a finished Nagle run and a second run still going.
    fn two_runs() -> AppState {
        let mut state = AppState::default();
        started(&mut state, 1);
        apply(&mut state, events(1, nagle_run(4, 44 * MS)));
        apply(&mut state, finished(1, RunOutcome::Completed));
        apply(&mut state, ToBrowser::Rejected { reason: "busy".into() });
        started(&mut state, 2);
        apply(&mut state, events(2, nagle_run(2, 30 * MS)));
        state
    }

    #[test]
    fn the_downloaded_session_opens_as_the_same_runs() {
        let mut state = two_runs();
        let bytes = state.live.file_bytes().expect("a greeted live session").to_vec();
        let (messages, problem) = decode_session(&bytes);
        assert_eq!(problem, None);
        assert_eq!(messages.len(), 6, "Hello, 2 starts, 2 batches, 1 finish; no refusal");

        let id = state.open_file("saved.ackscope", &bytes);
        let file = state.file(id).expect("opened");
        assert_eq!(file.error, None);
        assert_eq!(file.session.host(), Some(&host()));
        let live = &state.live;
        assert_eq!(file.session.runs().len(), live.runs().len());
        for (opened, original) in file.session.runs().iter().zip(live.runs()) {
            assert_eq!(opened.id, original.id);
            assert_eq!(opened.spec, original.spec);
            assert_eq!(opened.summary(), original.summary());
            assert_eq!(opened.events, original.events);
        }
        assert_eq!(file.session.runs()[0].status, RunStatus::Done);
        assert_eq!(
            file.session.runs()[1].status,
            RunStatus::Incomplete,
            "saved while run 2 was going"
        );
        assert_eq!(
            state.selected_key(),
            Some(RunKey { source: Source::File(id), run: RunId(2) }),
            "the file's newest run is shown"
        );
    }

    #[test]
    fn the_live_stream_leaves_opened_files_alone() {
        let mut state = two_runs();
        let bytes = state.live.file_bytes().expect("recorded").to_vec();
        let id = state.open_file("a.ackscope", &bytes);
        let file_run = RunKey { source: Source::File(id), run: RunId(1) };
        state.select(file_run);

        // The probe restarts: its Hello resets only the live runs.
        apply(&mut state, hello());
        assert!(state.live.runs().is_empty());
        assert_eq!(state.file(id).map(|f| f.session.runs().len()), Some(2));
        assert_eq!(state.selected_key(), Some(file_run));
        assert_eq!(
            state.live.file_bytes().map(<[u8]>::len),
            decode_hello_len(),
            "the live record starts over with the new Hello"
        );

        // A replayed or foreign run does not pull the user away from the file...
        apply(&mut state, rr_started(5, RrSpec::default()));
        assert_eq!(state.selected_key(), Some(file_run));
        // ...but the run the user asked for does.
        state.start_requested();
        apply(&mut state, rr_started(6, RrSpec::default()));
        assert_eq!(state.selected_key(), Some(RunKey::live(RunId(6))));

        state.select(file_run);
        state.close_file(id);
        assert!(state.files().is_empty());
        assert!(state.selected().is_none());
    }

    fn decode_hello_len() -> Option<usize> {
        let mut bytes = Vec::new();
        write_frame(&hello(), &mut bytes);
        Some(bytes.len())
    }

    #[test]
    fn a_truncated_file_keeps_the_runs_before_the_cut_and_names_the_problem() {
        let full = two_runs().live.file_bytes().expect("recorded").to_vec();
        // Cut inside the last message (run 2's events): run 1 is whole, run 2 has begun.
        let mut state = AppState::default();
        let id = state.open_file("cut.ackscope", &full[..full.len() - 5]);
        let file = state.file(id).expect("opened");
        let error = file.error.clone().expect("an error");
        assert!(error.starts_with("cut.ackscope: stream ends inside a message"), "{error}");
        assert!(error.contains("truncated"), "{error}");
        assert!(error.ends_with("the 2 runs read before it are shown"), "{error}");
        let runs = file.session.runs();
        assert_eq!(runs[0].summary().requests, 4);
        assert_eq!(runs[0].status, RunStatus::Done);
        assert_eq!(runs[1].summary().requests, 0, "its events were in the cut frame");
    }

    #[test]
    fn a_file_fed_in_pieces_opens_as_the_same_runs_and_reports_its_progress() {
        let bytes = two_runs().live.file_bytes().expect("recorded").to_vec();
        let mut whole = AppState::default();
        let whole_id = whole.open_file("a.ackscope", &bytes);
        let mut state = AppState::default();
        let id = state.begin_file("a.ackscope", bytes.len() as u64);
        assert_eq!(state.file(id).and_then(OpenedFile::progress), Some((0, bytes.len() as u64)));
        for piece in bytes.chunks(7) {
            state.feed_file(id, piece);
        }
        assert_eq!(
            state.file(id).and_then(OpenedFile::progress),
            Some((bytes.len() as u64, bytes.len() as u64))
        );
        assert!(state.selected().is_none(), "its run is shown once it is read");
        state.end_file(id);
        let (file, reference) =
            (state.file(id).expect("opened"), whole.file(whole_id).expect("opened"));
        assert_eq!(file.progress(), None);
        assert_eq!(file.error, None);
        assert_eq!(file.session.runs().len(), reference.session.runs().len());
        for (a, b) in file.session.runs().iter().zip(reference.session.runs()) {
            assert_eq!((a.id, a.events, &a.status), (b.id, b.events, &b.status));
            assert_eq!(a.summary(), b.summary());
        }
        assert_eq!(state.selected_key(), Some(RunKey { source: Source::File(id), run: RunId(2) }));
    }

    #[test]
    fn a_files_run_is_attributed_while_it_is_read_not_all_at_its_end() {
        // A Nagle run of 40 requests in 8 batches: a file of several messages.
        let mut live = AppState::default();
        started(&mut live, 1);
        for batch in nagle_run(40, 44 * MS).chunks(40) {
            apply(&mut live, events(1, batch.to_vec()));
        }
        apply(&mut live, finished(1, RunOutcome::Completed));
        let bytes = live.live.file_bytes().expect("recorded").to_vec();

        let mut state = AppState::default();
        let id = state.begin_file("nagle.ackscope", bytes.len() as u64);
        let (most, rest) = bytes.split_at(bytes.len() * 3 / 4);
        state.feed_file(id, most);
        let run = &state.file(id).expect("opened").session.runs()[0];
        assert!(
            run.attributed.next() > 10,
            "requests were attributed as their batches arrived: {} settled",
            run.attributed.next()
        );
        let (facts, of_events) = run.facts.borrow().clone();
        assert_eq!((facts.len(), of_events), (run.analysis.requests().len(), run.events));
        state.feed_file(id, rest);
        state.end_file(id);
        let run = state.selected().expect("its run is shown");
        let whole = Attribution::of(&run.analysis, run.spec.rr());
        assert_eq!(run.attribution(), &whole, "the same answer as attributing it whole");
        assert_eq!(*run.facts(), Facts::of(&run.analysis, &whole.stalls), "and the same facts");
        assert_eq!(
            run.attribution().stalls.len(),
            2 * 39,
            "two stalls per request after the first"
        );
        assert_eq!(run.summary(), &run.analysis.summary());
    }

    #[test]
    fn a_files_overview_shows_while_it_is_read_and_goes_when_it_is() {
        use ackscope_shared::overview::{key, Priority};
        let bytes = two_runs().live.file_bytes().expect("recorded").to_vec();
        let mut state = AppState::default();
        let id = state.begin_file("big.ackscope", bytes.len() as u64);
        assert!(state.loading_overview().is_none(), "nothing until the file's end is read");
        let overview = Overview::of([(key(Priority::Stalled, 44 * MS), true)]);
        state.preview_file(id, vec![(RunId(2), overview.clone())]);
        assert_eq!(state.loading_overview(), Some(("big.ackscope", &overview)));
        state.feed_file(id, &bytes);
        assert_eq!(state.loading_progress(), Some((bytes.len() as u64, bytes.len() as u64)));
        state.end_file(id);
        assert_eq!(state.loading_overview(), None, "the rows' own strip takes over");
        assert_eq!(state.loading_progress(), None);

        // An overview claiming four billion requests makes room only for what the file's bytes
        // could hold (reserving for the claim would abort the page).
        let mut state = AppState::default();
        let id = state.begin_file("lying.ackscope", bytes.len() as u64);
        let lying = Overview { rows: u32::MAX, ..overview };
        state.preview_file(id, vec![(RunId(1), lying.clone()), (RunId(2), lying)]);
        state.feed_file(id, &bytes);
        state.end_file(id);
        let runs = state.file(id).expect("opened").session.runs();
        assert_eq!(runs.len(), 2, "both runs read, whatever the overview claimed");
        assert_eq!(runs[0].summary().requests, 4);
    }

    #[test]
    fn a_file_of_a_newer_version_is_refused_by_name() {
        let mut bytes = Vec::new();
        let newer = Hello {
            protocol_version: PROTOCOL_VERSION + 1,
            ackscope_version: "9.0.0".into(),
            host: HostFacts::default(),
        };
        write_frame(&ToBrowser::Hello(newer), &mut bytes);
        write_frame(&rr_started(1, RrSpec::default()), &mut bytes);
        let mut state = AppState::default();
        let id = state.open_file("new.ackscope", &bytes);
        let file = state.file(id).expect("listed");
        let error = file.error.clone().expect("refused");
        assert!(error.starts_with("new.ackscope: "), "{error}");
        assert!(error.contains(&format!("protocol version {}", PROTOCOL_VERSION + 1)), "{error}");
        assert!(error.contains(&format!("reads version {PROTOCOL_VERSION}")), "{error}");
        assert!(file.session.runs().is_empty());
        assert!(state.selected().is_none());
    }

    #[test]
    fn runs_marked_for_comparison_keep_their_order_until_their_session_goes() {
        let mut state = two_runs();
        let bytes = state.live.file_bytes().expect("recorded").to_vec();
        let file = state.open_file("a.ackscope", &bytes);
        let (live1, live2) = (RunKey::live(RunId(1)), RunKey::live(RunId(2)));
        let file1 = RunKey { source: Source::File(file), run: RunId(1) };
        let selected = state.selected_key();

        state.toggle_compare(live2);
        state.toggle_compare(file1);
        state.toggle_compare(live1);
        assert_eq!(state.compared(), [live2, file1, live1], "in the order marked");
        assert!(state.is_compared(file1));
        assert_eq!(state.selected_key(), selected, "marking does not select");
        state.toggle_compare(file1);
        assert_eq!(state.compared(), [live2, live1], "a second toggle unmarks");
        state.toggle_compare(file1);
        assert_eq!(state.compared(), [live2, live1, file1], "marked again: last");

        // Unknown runs and runs without requests are not marked.
        state.toggle_compare(RunKey::live(RunId(9)));
        apply(
            &mut state,
            ToBrowser::RunStarted {
                run: RunId(3),
                spec: Scenario::Bulk(BulkSpec::default()),
                instruments: Instruments::default(),
            },
        );
        state.toggle_compare(RunKey::live(RunId(3)));
        assert_eq!(state.compared(), [live2, live1, file1]);

        // The probe's Hello starts the live session over: its marks go, the file's stay.
        apply(&mut state, hello());
        assert_eq!(state.compared(), [file1]);
        apply(&mut state, rr_started(1, RrSpec::default()));
        assert_eq!(state.compared(), [file1], "a replayed run is not marked again");

        state.toggle_compare(RunKey::live(RunId(1)));
        state.close_file(file);
        assert_eq!(state.compared(), [RunKey::live(RunId(1))], "the file's runs go with it");
        state.clear_compare();
        assert!(state.compared().is_empty());
    }

    #[test]
    fn latencies_are_sorted_and_follow_the_events() {
        let mut state = AppState::default();
        started(&mut state, 1);
        let all = nagle_run(5, 44 * MS);
        let (first, rest) = all.split_at(all.len() / 2);
        apply(&mut state, events(1, first.to_vec()));
        let partial = state.selected().map(|run| run.latencies_ns().len());
        apply(&mut state, events(1, rest.to_vec()));
        let run = state.selected().expect("run 1 is selected");
        assert!(partial < Some(5), "{partial:?}");
        let latencies = run.latencies_ns();
        assert_eq!(latencies.len(), 5);
        assert!(latencies.windows(2).all(|w| w[0] <= w[1]), "shortest first");
        assert!(latencies[0] < MS, "the first exchange is quick");
        assert!(latencies[4] > 88 * MS, "{}", latencies[4]);
    }

    /// Random batches of `events`: each side's events in order, the sides interleaved in
    /// chunks of 1 to 40 events (the other side trailing or leading by up to a few exchanges).
    fn random_batches(events: &[Event], seed: u64) -> Vec<Vec<Event>> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut below = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut client, mut server): (Vec<Event>, Vec<Event>) =
            events.iter().cloned().partition(|e| e.side == Side::Client);
        let mut batches = Vec::new();
        while !client.is_empty() || !server.is_empty() {
            let side = if server.is_empty() || !client.is_empty() && below(2) == 0 {
                &mut client
            } else {
                &mut server
            };
            let take = (1 + below(40)).min(side.len());
            batches.push(side.drain(..take).collect());
        }
        batches
    }

    #[test]
    fn a_streamed_run_is_attributed_and_summarized_as_the_whole_run_after_every_batch() {
        let client_nodelay = RrSpec {
            nodelay: ackscope_shared::PerSide { client: true, server: false },
            ..RrSpec::default()
        };
        let runs = [
            (RrSpec::default(), nagle_run(60, 44 * MS)),
            (client_nodelay, nagle_run(60, 44 * MS)),
            (RrSpec::default(), ackscope_shared::synthetic::nagle_run_with_packets(30, 44 * MS)),
        ];
        for (spec, all) in runs {
            for seed in 0..5 {
                let mut state = AppState::default();
                apply(&mut state, hello());
                apply(&mut state, rr_started(1, spec.clone()));
                // Asked from the first batch, or only from a later one (the run was shown then).
                for (step, batch) in random_batches(&all, seed).into_iter().enumerate() {
                    apply(&mut state, events(1, batch));
                    let run = state.selected().expect("run 1 is selected");
                    if step >= 5 * seed as usize {
                        let whole = Attribution::of(&run.analysis, Some(&spec));
                        assert_eq!(*run.attribution(), whole, "seed {seed}, batch {step}");
                    }
                    assert_eq!(*run.summary(), run.analysis.summary(), "seed {seed}, batch {step}");
                }
                apply(&mut state, finished(1, RunOutcome::Completed));
                let run = state.selected().expect("run 1 is selected");
                let whole = Attribution::of(&run.analysis, Some(&spec));
                assert_eq!(*run.attribution(), whole);
                assert_eq!(run.attribution().stalls.len(), whole.stalls.len());
                assert!(!whole.stalls.is_empty());
                assert_eq!(*run.summary(), run.analysis.summary());
                assert_eq!(run.summary().requests as usize, run.analysis.requests().len());
            }
        }
    }

    /// Batches of a streamed run: `per_batch` requests' client events, with the server's events
    /// of the batch before (the other side's batches trail, as the probe's threads send them).
    fn trailing_batches(events: &[Event], per_batch: u32) -> Vec<Vec<Event>> {
        let group = |event: &Event| event.req.0 / per_batch;
        let groups = events.iter().map(group).max().map_or(0, |last| last + 1);
        let mut batches: Vec<Vec<Event>> = (0..=groups).map(|_| Vec::new()).collect();
        for event in events {
            let trail = u32::from(event.side == Side::Server);
            batches[(group(event) + trail) as usize].push(event.clone());
        }
        batches
    }

    /// A long live run asked for its summary and attribution after every batch of 100 requests,
    /// as the page does once per frame, ends with the whole run's answer; and it prints what that
    /// cost (timings are printed, not asserted: `cargo test --release -p ackscope-web timing --
    /// --nocapture` runs 100,000 requests).
    #[test]
    fn timing_a_live_run_asked_after_every_batch() {
        let requests = if cfg!(debug_assertions) { 2_000 } else { 100_000 };
        let batches = trailing_batches(&nagle_run(requests, 44 * MS), 100);
        let mut state = AppState::default();
        started(&mut state, 1);
        let count = batches.len();
        let mut took = Vec::with_capacity(count);
        let mut stalls = 0;
        for batch in batches {
            let began = std::time::Instant::now();
            apply(&mut state, events(1, batch));
            let run = state.selected().expect("run 1 is selected");
            stalls = run.attribution().stalls.len() + run.summary().requests as usize;
            took.push(began.elapsed().as_secs_f64());
        }
        let run = state.selected().expect("run 1 is selected");
        assert_eq!(run.summary().requests, requests);
        assert_eq!(
            run.attribution().stalls.len() as u32,
            2 * (requests - 1),
            "two per request after the first"
        );
        let ms = |batches: &[f64]| batches.iter().sum::<f64>() * 1e3;
        println!(
            "timing: {requests} requests in {count} batches of 100, summary and attribution after \
             each: {:.1} ms in all; the first 100 batches {:.2} ms, the last 100 {:.2} ms \
             ({stalls})",
            ms(&took),
            ms(&took[..100.min(count)]),
            ms(&took[count.saturating_sub(100)..]),
        );
    }

    /// A file of many runs, each with one exchange, whose events come newest run first.
    fn many_runs_file(runs: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        ackscope_shared::wire::write_frame(&hello(), &mut bytes);
        for id in 1..=runs {
            ackscope_shared::wire::write_frame(&rr_started(id, RrSpec::default()), &mut bytes);
        }
        for id in (1..=runs).rev() {
            ackscope_shared::wire::write_frame(&events(id, nagle_run(1, 44 * MS)), &mut bytes);
        }
        bytes
    }

    /// Issue 11, defects 5 and 6, in the page: each message found its run by a search through
    /// every run, so 100,000 runs whose events came in reverse order took the square of that
    /// (now an index), and nothing bounded how many runs a file could make the page keep (each
    /// costs a few KB of analysis: 100,000 one-request runs, 20 MB of file, took 700 MB).
    #[test]
    fn a_file_of_many_runs_keeps_the_first_thousand_and_says_so() {
        let runs = 100_000;
        let mut state = AppState::default();
        let id = state.open_file("many.ackscope", &many_runs_file(runs));
        let file = state.file(id).expect("opened");
        let kept = file.session.runs();
        assert_eq!(kept.len(), MAX_FILE_RUNS);
        assert_eq!((kept[0].id, kept[MAX_FILE_RUNS - 1].id), (RunId(1), RunId(1000)));
        assert!(
            kept.iter().all(|run| run.summary().requests == 1),
            "every kept run has its events"
        );
        let note = file.error.as_deref().expect("a note that runs were not kept");
        assert!(note.contains("holds 100000 runs") && note.contains("first 1000"), "{note}");
        assert!(note.contains("the first 1000 of a file, and those are shown"), "{note}");
    }

    #[test]
    fn a_run_started_again_replaces_itself_in_place() {
        let mut state = AppState::default();
        started(&mut state, 1);
        started(&mut state, 2);
        apply(&mut state, events(1, nagle_run(3, 44 * MS)));
        started(&mut state, 1);
        let ids: Vec<RunId> = state.live.runs().iter().map(|run| run.id).collect();
        assert_eq!(ids, [RunId(1), RunId(2)]);
        assert_eq!(state.live.runs()[0].events, 0, "the run starts over");
        apply(&mut state, events(2, nagle_run(2, 44 * MS)));
        assert_eq!(state.live.run(RunId(2)).map(|run| run.summary().requests), Some(2));
    }
}
