//! One run as the page keeps it: every request (it draws them), its analysis and attribution
//! brought up to date as batches arrive, and the answers the views ask for, cached per batch.

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;

use ackscope_shared::analysis::{RunAnalysis, Summary};
use ackscope_shared::attribution::{attribute, summarize, ClassSummary, Incremental, Stall};
use ackscope_shared::bulk::{BulkAnalysis, BulkSummary};
use ackscope_shared::control::ClockSync;
use ackscope_shared::kernel::KernelTracks;
use ackscope_shared::reduce::{stall_spec, ImportedTally, WatchTally};
use ackscope_shared::tried::TriedRecord;
use ackscope_shared::watch_rows::WatchRows;
use ackscope_shared::wire::Instruments;
use ackscope_shared::{Event, EventKind, ReqId, RrSpec, RunId, Scenario};

use crate::timeline::rows::{Facts, Settled};

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
    /// A watched application's exchanges and the stalls its packets show (the same tally as
    /// `ackscope watch` and `show`); `Some` for watches only.
    pub watch: Option<WatchTally>,
    /// An imported capture's connections and the stalls its packets show (the same tally as
    /// `ackscope import` and `show`); `Some` for imported runs only.
    pub imported: Option<ImportedTally>,
    /// Every TCP_INFO sample over time per connection and side (any scenario), bounded.
    kernel: KernelTracks,
    pub events: u64,
    /// A run against a remote server: how its clock was matched to the client's (its
    /// `ClockSync` event, the run's first).
    pub clock: Option<ClockSync>,
    /// The socket options a watch tried on the watched programs during this run (`watch
    /// --try`): what the run after a change ran with, compared with the run before it.
    pub tried: TriedRecord,
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
    pub(super) attributed: Incremental,
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
    pub(super) facts: RefCell<(Arc<Facts>, u64)>,
    /// The first request that was settled when the facts were last brought up to date and
    /// has been unsettled since (`u32::MAX` if none): its facts, and those after it, are made
    /// again.
    facts_unsettled_from: Cell<u32>,
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
    pub(super) fn new(id: RunId, spec: Scenario, instruments: Instruments) -> Run {
        let bulk = matches!(spec, Scenario::Bulk(_)).then(BulkAnalysis::new);
        let imported = matches!(spec, Scenario::Import(_)).then(ImportedTally::default);
        // Its exchanges are rows, and each stall it finds is kept in its exchange's row too
        // (the timeline's, and the Compare view's waits by class).
        let watch = matches!(spec, Scenario::Watch(_)).then(WatchTally::with_rows);
        let analysis = RunAnalysis::of_rr(spec.rr());
        Run {
            id,
            spec,
            instruments,
            status: RunStatus::Running,
            analysis,
            bulk,
            imported,
            watch,
            kernel: KernelTracks::new(),
            events: 0,
            clock: None,
            tried: TriedRecord::default(),
            summary: OnceCell::new(),
            bulk_summary: OnceCell::new(),
            attributed: Incremental::new(),
            watched: Cell::new(false),
            settled_stalls: RefCell::new(Vec::new()),
            attribution: OnceCell::new(),
            latencies: OnceCell::new(),
            facts: RefCell::new((Arc::new(Facts::default()), 0)),
            facts_unsettled_from: Cell::new(u32::MAX),
        }
    }

    pub(super) fn push(&mut self, events: &[Event]) {
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
        } else if let Some(watch) = &mut self.watch {
            // Its exchanges as requests (none without packets, and no stalls either).
            let open_from = watch.rows().map_or(u32::MAX, WatchRows::open_from);
            let mut as_run = Vec::new();
            watch.push_rows(events, &mut as_run);
            self.analysis.push_all(&as_run);
            place_in_rows(watch, &mut stalls, open_from, &self.facts_unsettled_from);
        } else if let Some(spec) = stall_spec(&self.spec) {
            self.analysis.push_all(events);
            if self.watched.get() {
                self.attributed.push(&self.analysis, spec, events, &mut stalls);
                if let Some(from) = self.attributed.take_unsettled_from() {
                    self.facts_unsettled_from.set(self.facts_unsettled_from.get().min(from));
                }
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

    /// Lets up to `budget` of its requests, and as many of its stalls, go (the newest first):
    /// a closed file's run gives its memory back a piece at a time. False once nothing big is
    /// left.
    pub(super) fn release_some(&mut self, budget: usize) -> bool {
        let stalls = self.settled_stalls.get_mut();
        if let Some(answer) = self.attribution.take() {
            *stalls = answer.stalls;
        }
        stalls.truncate(stalls.len().saturating_sub(budget));
        let stalls_left = !stalls.is_empty();
        self.analysis.release_some(budget) || stalls_left
    }

    /// The timeline's facts of every request (empty for other scenarios), up to date with the
    /// events so far: only the requests not settled at the last call are made again
    /// ([`Facts::update`]), in place unless a caller still holds the previous answer.
    pub fn facts(&self) -> Arc<Facts> {
        let mut cell = self.facts.borrow_mut();
        if cell.1 != self.events && self.has_rows() {
            let why = self.attribution();
            let changed_from = self.facts_unsettled_from.replace(u32::MAX);
            let below = match self.watch.as_ref().and_then(WatchTally::rows) {
                Some(rows) => rows.open_from(),
                None => self.attributed.next(),
            };
            let settled = Settled { below, changed_from };
            Arc::make_mut(&mut cell.0).update(&self.analysis, &why.stalls, settled);
            cell.1 = self.events;
        }
        Arc::clone(&cell.0)
    }

    /// From now on every batch is attributed as it arrives (see `attributed`): for a run that
    /// will be shown, so that its first answer does not attribute the whole run in one task.
    pub(super) fn watch(&self) {
        self.watched.set(true);
    }

    /// Makes now what showing a watched run reads first (its ordered latencies, summary,
    /// attribution and facts, each cached until the next batch), so that showing it is only
    /// the view's own work. For a run no more batches will come to: a file read to its end.
    pub(super) fn prepare(&self) {
        if !self.watched.get() || !self.has_rows() {
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
            // A watch's requests are its exchanges, as `ackscope watch` counts them.
            if let Some(summary) = self.watch.as_ref().and_then(WatchTally::summary) {
                return summary;
            }
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
            // A watch's stalls, found from its packets as they came (the tally's, handed out).
            None => match &self.watch {
                Some(watch) => {
                    Attribution { stalls: self.settled_stalls.take(), classes: watch.classes() }
                }
                None => Attribution::default(),
            },
        })
    }

    /// Every completed request's latency in ns, shortest first (empty for other scenarios).
    pub fn latencies_ns(&self) -> &[u64] {
        self.latencies.get_or_init(|| match &self.watch {
            Some(watch) => watch.exchanges.latencies_ns(),
            None => self.analysis.latencies_ns(),
        })
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

    /// Whether the run has requests to draw as rows: a request/response run's, or a watch's
    /// exchanges (when it read packets: without them it has none, only their bound).
    pub fn has_rows(&self) -> bool {
        self.is_rr() || (self.watch.is_some() && self.instruments.capture)
    }

    /// Whether the run has latencies and stall classes to compare: a request/response run's
    /// requests, or a watch's exchanges (a watch before and after `--try`, or a watch and a
    /// run of ackscope's own that reproduces it).
    pub fn is_comparable(&self) -> bool {
        self.is_rr() || self.watch.is_some()
    }

    /// No more events come: an imported run's or a watch's last undecided packets are decided
    /// (and a watch's last exchanges counted).
    pub(super) fn ended(&mut self) {
        if let Some(imported) = &mut self.imported {
            imported.decide_all();
        }
        if let Some(watch) = &mut self.watch {
            // Its last candidates decided: the answers so far are stale.
            let mut stalls = match self.attribution.take() {
                Some(answer) => answer.stalls,
                None => std::mem::take(self.settled_stalls.get_mut()),
            };
            watch.finish();
            place_in_rows(watch, &mut stalls, u32::MAX, &self.facts_unsettled_from);
            *self.settled_stalls.get_mut() = stalls;
            self.facts.get_mut().1 = u64::MAX;
            self.summary = OnceCell::new();
            self.latencies = OnceCell::new();
        }
    }
}

/// A watch's stalls found since the last call, each put in its exchange's row (left out if
/// its exchange has none: begun before the watch, or past the rows' bounds; the summary still
/// counts it), among `stalls` in request order (the order a run's attribution lists them in).
/// A stall is decided after its exchange (up to half a second): one of a row below
/// `open_from`, which the facts may hold as settled, makes them again from it.
fn place_in_rows(
    watch: &mut WatchTally,
    stalls: &mut Vec<Stall>,
    open_from: u32,
    unsettled_from: &Cell<u32>,
) {
    watch.drain_stalls_in_rows(|mut stall, row| {
        let Some(row) = row else { return };
        stall.req = ReqId(row);
        // Stalls are decided in about the order their exchanges began: at or near the end.
        let at = stalls.len() - stalls.iter().rev().take_while(|s| s.req.0 > row).count();
        stalls.insert(at, stall);
        if row < open_from {
            unsettled_from.set(unsettled_from.get().min(row));
        }
    });
}
