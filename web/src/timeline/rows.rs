//! Which requests are rows, and the facts that order and find them: pure, no DOM.
//!
//! [`Facts`] holds, per request of a run, what finding things needs (its extent, its worst
//! wait, the classes of its stalls) in flat columns, so filtering and searching a million
//! requests is a scan of a few megabytes, not of the analysis' nested spans.

use std::cmp::Reverse;
use std::ops::Range;
use std::sync::Arc;

use ackscope_shared::analysis::{RequestView, RunAnalysis};
use ackscope_shared::attribution::{Stall, StallClass};

use ackscope_shared::overview::{extent_ns, key, Overview, Priority};
use ackscope_shared::Side;

/// Every class, in a fixed order: bit `i` of a class mask is `CLASSES[i]`.
pub const CLASSES: [StallClass; StallClass::ALL.len()] = StallClass::ALL;

/// One bit per class of a request's stalls.
type ClassMask = u16;
const _: () =
    assert!(CLASSES.len() <= ClassMask::BITS as usize, "more classes than bits in a class mask");

fn class_bit(class: StallClass) -> ClassMask {
    let index = CLASSES.iter().position(|&c| c == class).unwrap_or(CLASSES.len() - 1);
    1 << index
}

/// What the user asked to see.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// Only requests with a stall or another named wait.
    pub only_stalled: bool,
    /// Only requests with a wait of this class.
    pub class: Option<StallClass>,
    /// Only requests at least this slow.
    pub min_latency_ns: u64,
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }
}

/// The requests a filter keeps (request ids, in order): with no filter every request of the
/// run, a range that costs nothing to make (a list of a million ids was 4 MB written in the
/// task that first showed a big file); otherwise the list of them, shared.
#[derive(Clone, Debug, PartialEq)]
pub enum RowSet {
    All(Range<u32>),
    Some(Arc<Vec<u32>>),
}

impl Default for RowSet {
    fn default() -> Self {
        RowSet::All(0..0)
    }
}

impl RowSet {
    pub fn len(&self) -> usize {
        match self {
            RowSet::All(range) => range.len(),
            RowSet::Some(list) => list.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where request `req` is in the set, if it is in it.
    pub fn position(&self, req: u32) -> Option<usize> {
        match self {
            RowSet::All(range) => range.contains(&req).then(|| (req - range.start) as usize),
            RowSet::Some(list) => list.binary_search(&req).ok(),
        }
    }

    /// The requests from position `from` on, in order.
    pub fn from(&self, from: usize) -> Box<dyn Iterator<Item = u32> + '_> {
        match self {
            RowSet::All(range) => Box::new(range.clone().skip(from)),
            RowSet::Some(list) => Box::new(list.iter().skip(from).copied()),
        }
    }

    #[cfg(test)]
    fn to_vec(&self) -> Vec<u32> {
        self.from(0).collect()
    }
}

/// Per request (index = request id - `first`), what finding and ordering needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// The request id of index 0 (requests before it were retired by the analysis).
    pub first: u32,
    /// Latency if done, else how far it got; 0 while its start is unknown.
    pub extent_ns: Vec<u64>,
    pub done: Vec<bool>,
    /// Bits of [`CLASSES`] for the waits the attribution named in the request.
    pub classes: Vec<ClassMask>,
    /// The worst wait of the request.
    pub worst: Vec<Priority>,
    /// The overview of the first `settled_rows` requests, every one a row (no filter): their
    /// facts no longer change ([`Settled`]), so it grows with the run, a row at a time.
    settled_overview: Overview,
    settled_rows: usize,
    /// Of those, the [`SLOWEST_KEPT`] slowest finished ones (slowest first, as
    /// [`Facts::slowest`] orders them), and the longest extent of any.
    settled_slowest: Vec<usize>,
    settled_longest_ns: u64,
    /// The [`SLOWEST_KEPT`] longest waits of those requests (longest first, ties: the earlier
    /// wait first), so that the table of the longest waits needs no pass over every stall.
    settled_waits: Vec<Wait>,
}

/// One named wait, as the table of the longest waits lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub req: u32,
    pub class: StallClass,
    pub from: Side,
    pub to: Side,
    pub wait_ns: u64,
}

impl Wait {
    fn of(stall: &Stall) -> Wait {
        let Stall { req, class, from, to, wait_ns, .. } = *stall;
        Wait { req: req.0, class, from, to, wait_ns }
    }
}

/// How many of the slowest settled requests the facts keep: [`Facts::slowest`] of at most this
/// many needs no pass over the run.
pub const SLOWEST_KEPT: usize = 64;

/// Which requests' facts can no longer change: the attribution's settled requests
/// (shared's `attribution::Incremental`). A settled request is done, and every event and
/// TCP_INFO sample its attribution reads has arrived; one that arrives late unsettles it, and
/// `changed_from` says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    /// Requests below this id are settled.
    pub below: u32,
    /// The first request that was settled at the previous update and may have changed since
    /// (`u32::MAX` if none).
    pub changed_from: u32,
}

impl Settled {
    /// Every request: the facts of a run that has ended, made at once.
    pub const ALL: Settled = Settled { below: u32::MAX, changed_from: u32::MAX };
}

impl Facts {
    /// The facts of every request of a run no more events come to. `stalls`: the run's, in
    /// request order ([`crate::state::Attribution::stalls`]).
    pub fn of(analysis: &RunAnalysis, stalls: &[Stall]) -> Facts {
        Facts::default().updated(analysis, stalls, Settled::ALL)
    }

    /// These facts brought up to date with `analysis`: the settled requests' facts are kept
    /// and only the rest are made again, so a live run's batch, or a file's, costs in proportion
    /// to the requests not settled yet (about a hundred, in a file whose blocks bring one side's
    /// events ahead of the other's), not to the run. Everything is made again if the analysis
    /// retired requests.
    pub fn updated(mut self, analysis: &RunAnalysis, stalls: &[Stall], settled: Settled) -> Facts {
        self.update(analysis, stalls, settled);
        self
    }

    /// [`Facts::updated`], in place.
    pub fn update(&mut self, analysis: &RunAnalysis, stalls: &[Stall], settled: Settled) {
        let requests = analysis.requests();
        let first = analysis.first_request();
        let rows_below = |req: u32| (req.saturating_sub(first) as usize).min(requests.len());
        let still_settled = rows_below(settled.changed_from.min(settled.below));
        let keep = if self.first == first { self.settled_rows.min(still_settled) } else { 0 };
        self.first = first;
        self.extent_ns.truncate(keep);
        self.done.truncate(keep);
        self.classes.truncate(keep);
        self.worst.truncate(keep);
        // Room for every request at once: a whole run's facts (a file's, when it is first shown)
        // would otherwise grow each column by doubling, copying it a few times over.
        let more = requests.len() - keep;
        self.extent_ns.reserve(more);
        self.done.reserve(more);
        self.classes.reserve(more);
        self.worst.reserve(more);
        for view in &requests[keep..] {
            self.extent_ns.push(extent_ns(view).unwrap_or(0));
            self.done.push(view.done_ns.is_some());
            self.classes.push(0);
            self.worst.push(Priority::Call);
        }
        // Stalls come in request order: only those of the rebuilt requests are looked at.
        let from = stalls.partition_point(|stall| stall.req.0 < first + keep as u32);
        for stall in &stalls[from..] {
            let Some(index) = stall.req.0.checked_sub(first).map(|i| i as usize) else {
                continue;
            };
            if index < requests.len() {
                self.classes[index] |= class_bit(stall.class);
                self.worst[index] = self.worst[index].max(Priority::of(stall));
            }
        }
        if self.settled_rows > keep {
            // Requests it held were made again (a late event unsettled them, or retired
            // requests moved the first): start it again.
            (self.settled_overview, self.settled_rows) = (Overview::default(), 0);
            (self.settled_slowest, self.settled_longest_ns) = (Vec::new(), 0);
            self.settled_waits.clear();
        }
        let settled = rows_below(settled.below);
        let stalls_of = |rows: usize| stalls.partition_point(|s| s.req.0 < first + rows as u32);
        for stall in &stalls[stalls_of(self.settled_rows)..stalls_of(settled)] {
            // After the equally long ones already kept: those are of earlier requests.
            let at = self.settled_waits.partition_point(|kept| kept.wait_ns >= stall.wait_ns);
            if at < SLOWEST_KEPT {
                self.settled_waits.insert(at, Wait::of(stall));
                self.settled_waits.truncate(SLOWEST_KEPT);
            }
        }
        for index in self.settled_rows..settled {
            let (key, stalled) = self.row(index);
            self.settled_overview.push(key, stalled);
            self.settled_longest_ns = self.settled_longest_ns.max(self.extent_ns[index]);
            if self.done[index] {
                let rank = self.rank(index);
                let at = self.settled_slowest.partition_point(|&i| self.rank(i) > rank);
                if at < SLOWEST_KEPT {
                    self.settled_slowest.insert(at, index);
                    self.settled_slowest.truncate(SLOWEST_KEPT);
                }
            }
        }
        self.settled_rows = settled;
    }

    /// The order of [`Facts::slowest`]: the larger, the slower (ties: the earlier request).
    fn rank(&self, index: usize) -> (u64, Reverse<usize>) {
        (self.extent_ns[index], Reverse(index))
    }

    /// The longest extent of any request (0 for none).
    pub fn longest_ns(&self) -> u64 {
        let unsettled = self.extent_ns[self.settled_rows.min(self.len())..].iter().copied().max();
        unsettled.unwrap_or(0).max(self.settled_longest_ns)
    }

    /// Request `index`'s row of the overview: its key (its worst wait, then its extent) and
    /// whether that wait is a stall (as the probe ranks them for the overview it writes in a
    /// file).
    fn row(&self, index: usize) -> (u64, bool) {
        let worst = self.worst[index];
        (key(worst, self.extent_ns[index]), worst == Priority::Stalled)
    }

    pub fn len(&self) -> usize {
        self.extent_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.extent_ns.is_empty()
    }

    fn index(&self, req: u32) -> Option<usize> {
        let index = req.checked_sub(self.first)? as usize;
        (index < self.len()).then_some(index)
    }

    pub fn extent_of(&self, req: u32) -> Option<u64> {
        self.index(req).map(|i| self.extent_ns[i])
    }

    fn keeps(&self, index: usize, filter: &Filter) -> bool {
        (!filter.only_stalled || self.classes[index] != 0)
            && filter.class.is_none_or(|class| self.classes[index] & class_bit(class) != 0)
            && self.extent_ns[index] >= filter.min_latency_ns
    }

    /// The request ids the filter keeps, in request order.
    pub fn rows(&self, filter: &Filter) -> RowSet {
        if filter.is_empty() {
            // Every request: known in size, no test per row.
            return RowSet::All(self.first..self.first + self.len() as u32);
        }
        let kept = (0..self.len()).filter(|&index| self.keeps(index, filter));
        RowSet::Some(Arc::new(kept.map(|index| self.first + index as u32).collect()))
    }

    /// The `count` slowest finished requests, slowest first (ties: the earlier request first).
    pub fn slowest(&self, count: usize) -> Vec<u32> {
        // The slowest settled ones kept as the run grew, and the few requests after them; past
        // as many as are kept (no view asks for that many), every finished request.
        let from = if count <= SLOWEST_KEPT { self.settled_rows.min(self.len()) } else { 0 };
        let kept = if from > 0 { self.settled_slowest.as_slice() } else { &[] };
        let rest = (from..self.len()).filter(|&i| self.done[i]);
        let mut candidates: Vec<usize> = kept.iter().copied().chain(rest).collect();
        candidates.sort_unstable_by_key(|&index| Reverse(self.rank(index)));
        candidates.truncate(count);
        candidates.into_iter().map(|index| self.first + index as u32).collect()
    }

    /// The `count` longest waits of `stalls` (the run's, in request order, as the facts were
    /// updated with), longest first (ties: the earlier wait first): those kept of the settled
    /// requests and the few stalls after them; past as many as are kept, every stall.
    pub fn longest_waits(&self, stalls: &[Stall], count: usize) -> Vec<Wait> {
        let settled = if count <= SLOWEST_KEPT { self.settled_rows.min(self.len()) } else { 0 };
        let kept = if settled > 0 { self.settled_waits.as_slice() } else { &[] };
        let tail_from = stalls.partition_point(|s| s.req.0 < self.first + settled as u32);
        let mut waits: Vec<Wait> =
            kept.iter().copied().chain(stalls[tail_from..].iter().map(Wait::of)).collect();
        // Stable: equally long waits stay in request order.
        waits.sort_by_key(|wait| Reverse(wait.wait_ns));
        waits.truncate(count);
        waits
    }

    /// The finished request that comes after `after` in slowest-first order (the slowest when
    /// `after` is `None` or the last): a scan, so no sorted copy of a million latencies is kept.
    ///
    /// One plain loop over the columns, the slowest of all found on the way: at ten million
    /// requests (a whole run's, [`crate::state::Ranks`]) the chain of iterators it replaced was a
    /// task of over 50 ms.
    pub fn next_slowest(&self, after: Option<u32>) -> Option<u32> {
        let bound = after.and_then(|req| self.index(req)).map(|index| self.rank(index));
        // The slowest ranked below the bound, and the slowest of all (past the fastest, the next
        // is the slowest again); of equal extents the earliest, as indexes only grow.
        let mut next: Option<(u64, usize)> = None;
        let mut slowest: Option<(u64, usize)> = None;
        for (index, (&extent, &done)) in self.extent_ns.iter().zip(&self.done).enumerate() {
            if !done {
                continue;
            }
            if slowest.is_none_or(|(ns, _)| extent > ns) {
                slowest = Some((extent, index));
            }
            let below = bound.is_none_or(|bound| (extent, Reverse(index)) < bound);
            if below && next.is_none_or(|(ns, _)| extent > ns) {
                next = Some((extent, index));
            }
        }
        next.or(slowest).map(|(_, index)| self.first + index as u32)
    }

    /// Appends request `req`'s facts, from its view and its stalls, for facts made a request
    /// at a time by a reader that lets requests go (a pass over the whole run of a file the
    /// page holds in part): requests come in order, those skipped are held as never started,
    /// and one already held is left as it is.
    pub fn push_request(&mut self, req: u32, view: &RequestView, stalls: &[Stall]) {
        let Some(index) = req.checked_sub(self.first).map(|index| index as usize) else { return };
        if index < self.len() {
            return;
        }
        while self.len() < index {
            self.extent_ns.push(0);
            self.done.push(false);
            self.classes.push(0);
            self.worst.push(Priority::Call);
        }
        self.extent_ns.push(extent_ns(view).unwrap_or(0));
        self.done.push(view.done_ns.is_some());
        self.classes.push(stalls.iter().fold(0, |mask, stall| mask | class_bit(stall.class)));
        self.worst.push(Priority::worst_of(stalls));
    }

    /// Whether request `req` is held and the filter keeps it.
    pub fn keeps_request(&self, req: u32, filter: &Filter) -> bool {
        self.index(req).is_some_and(|index| self.keeps(index, filter))
    }

    /// Room for `requests` in all, at once.
    pub fn reserve(&mut self, requests: usize) {
        let more = requests.saturating_sub(self.len());
        self.extent_ns.reserve_exact(more);
        self.done.reserve_exact(more);
        self.classes.reserve_exact(more);
        self.worst.reserve_exact(more);
    }

    /// The overview of the rows ([`Facts::row`] each).
    pub fn overview(&self, rows: &RowSet) -> Overview {
        Overview::of(rows.from(0).map(|req| self.row(self.index(req).unwrap_or_default())))
    }

    /// The overview of every request, as [`Facts::overview`] of them all: the part kept as the
    /// run grew, and the last few requests added to a copy of it (a few thousand columns at
    /// most), instead of a pass over a million.
    pub fn overview_of_all(&self) -> Overview {
        let mut overview = self.settled_overview.clone();
        for index in self.settled_rows..self.len() {
            let (key, stalled) = self.row(index);
            overview.push(key, stalled);
        }
        overview
    }
}

/// The next (or previous, `forward == false`) stall after the one at `current` that the filter
/// keeps, as an index into `stalls` (in request order). `None` when there is none that way.
pub fn step_stall(
    stalls: &[Stall],
    facts: &Facts,
    filter: &Filter,
    current: Option<usize>,
    forward: bool,
) -> Option<usize> {
    let kept = |index: &usize| {
        let stall = &stalls[*index];
        filter.class.is_none_or(|class| stall.class == class)
            && facts.index(stall.req.0).is_some_and(|i| facts.keeps(i, filter))
    };
    match (current, forward) {
        (None, true) => (0..stalls.len()).find(kept),
        (None, false) => (0..stalls.len()).rev().find(kept),
        (Some(at), true) => (at + 1..stalls.len()).find(kept),
        (Some(at), false) => (0..at.min(stalls.len())).rev().find(kept),
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::attribution::{Incremental, SETTLE_AFTER};
    use ackscope_shared::overview::Overview;
    use ackscope_shared::{Event, RrSpec};

    use super::*;
    use crate::fixtures::{nagle_run, MS, US};
    use crate::state::Attribution;

    fn run(requests: u32, hold_ns: u64) -> (RunAnalysis, Attribution) {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&nagle_run(requests, hold_ns));
        let why = Attribution::of(&analysis, Some(&RrSpec::default()));
        (analysis, why)
    }

    #[test]
    fn a_range_of_rows_finds_and_walks_as_the_list_of_them_does() {
        // Requests 100..600 (the analysis retired the first 100).
        let range = RowSet::All(100..600);
        let list = RowSet::Some(Arc::new((100..600).collect()));
        assert_eq!((range.len(), list.len()), (500, 500));
        for req in [0, 99, 100, 101, 350, 599, 600, u32::MAX] {
            assert_eq!(range.position(req), list.position(req), "request {req}");
        }
        assert_eq!(range.position(350), Some(250));
        for from in [0, 1, 499, 500, 501] {
            assert!(range.from(from).eq(list.from(from)), "from {from}");
        }
        assert!(RowSet::default().is_empty());
    }

    #[test]
    fn filters_keep_stalled_requests_a_class_or_the_slow_ones() {
        let (analysis, why) = run(6, 44 * MS);
        let facts = Facts::of(&analysis, &why.stalls);
        assert_eq!(facts.rows(&Filter::default()).to_vec(), [0, 1, 2, 3, 4, 5]);
        // The first request of a connection is in quick-ACK mode: no stall.
        let stalled = Filter { only_stalled: true, ..Filter::default() };
        assert_eq!(facts.rows(&stalled).to_vec(), [1, 2, 3, 4, 5]);
        let nagle = Filter { class: Some(StallClass::NagleDelayedAck), ..Filter::default() };
        assert_eq!(facts.rows(&nagle).to_vec(), [1, 2, 3, 4, 5]);
        let think = Filter { class: Some(StallClass::ServerThinkTime), ..Filter::default() };
        assert!(facts.rows(&think).is_empty());
        let slow = Filter { min_latency_ns: 50 * MS, ..Filter::default() };
        assert_eq!(facts.rows(&slow).to_vec(), [1, 2, 3, 4, 5]);
        assert_eq!(facts.extent_of(0).map(|ns| ns < MS), Some(true));
        assert_eq!(facts.extent_of(9), None);
    }

    /// One rule, one place: the strip the viewer draws from its rows once a file is read is the
    /// one the probe writes at the file's end from its own attribution (shown while it loads).
    #[test]
    fn the_rows_overview_is_the_one_the_probe_writes() {
        let (analysis, why) = run(6, 44 * MS);
        let facts = Facts::of(&analysis, &why.stalls);
        let drawn = facts.overview(&facts.rows(&Filter::default()));
        let spec = RrSpec::default();
        let written = Overview::of(analysis.requests().iter().enumerate().map(|(req, view)| {
            let req = ackscope_shared::ReqId(req as u32);
            let stalls =
                ackscope_shared::attribution::attribute_request(&analysis, req, view, Some(&spec));
            ackscope_shared::overview::row(view, &stalls)
        }));
        assert_eq!(drawn, written);
        assert_eq!(drawn.stalled(), 5, "every request after the first stalled");
        assert!(drawn.slowest_ns() > 44 * MS);
    }

    #[test]
    fn the_slowest_are_those_of_a_sort_with_ties_to_the_earlier_request() {
        let len = 500;
        let facts = Facts {
            first: 100,
            // Few distinct extents (ties), every seventh request unfinished.
            extent_ns: (0..len).map(|i| (i * 7919 % 13) as u64).collect(),
            done: (0..len).map(|i| i % 7 != 3).collect(),
            classes: vec![0; len],
            worst: vec![Priority::Call; len],
            ..Facts::default()
        };
        let mut reference: Vec<usize> = (0..len).filter(|&i| facts.done[i]).collect();
        reference.sort_by_key(|&i| (Reverse(facts.extent_ns[i]), i));
        let ids = |indices: &[usize]| indices.iter().map(|&i| 100 + i as u32).collect::<Vec<_>>();
        for count in [0, 1, 5, 20, 428, 429, 1000] {
            let expected = ids(&reference[..count.min(reference.len())]);
            assert_eq!(facts.slowest(count), expected, "count {count}");
        }
        assert_eq!(facts.rows(&Filter::default()).to_vec(), (100..600).collect::<Vec<u32>>());
    }

    #[test]
    fn slowest_first_and_next_slowest_walks_the_same_order() {
        let (analysis, why) = run(5, 30 * US);
        let facts = Facts::of(&analysis, &why.stalls);
        let order = facts.slowest(10);
        assert_eq!(order.len(), 5);
        let extents: Vec<u64> = order.iter().filter_map(|&r| facts.extent_of(r)).collect();
        assert!(extents.windows(2).all(|w| w[0] >= w[1]), "{extents:?}");
        assert_eq!(facts.slowest(2), order[..2]);
        let mut walked = Vec::new();
        let mut at = None;
        for _ in 0..5 {
            at = facts.next_slowest(at);
            walked.extend(at);
        }
        assert_eq!(walked, order, "next-slowest visits requests in slowest-first order");
        assert_eq!(facts.next_slowest(at), order.first().copied(), "then starts over");
    }

    #[test]
    fn stepping_through_stalls_follows_request_order_and_the_filter() {
        let (analysis, why) = run(4, 44 * MS);
        let facts = Facts::of(&analysis, &why.stalls);
        let all = Filter::default();
        let stalls = &why.stalls;
        assert_eq!(stalls.len(), 6, "two per request after the first");
        let first = step_stall(stalls, &facts, &all, None, true);
        assert_eq!(first, Some(0));
        assert_eq!(step_stall(stalls, &facts, &all, Some(5), true), None);
        assert_eq!(step_stall(stalls, &facts, &all, Some(3), false), Some(2));
        assert_eq!(step_stall(stalls, &facts, &all, None, false), Some(5));
        let only_slow = Filter { min_latency_ns: u64::MAX, ..Filter::default() };
        assert_eq!(step_stall(stalls, &facts, &only_slow, None, true), None);
    }

    /// Feeds `batches` to an analysis and its incremental attribution as the page does, and
    /// checks after each that the facts kept up to date are those made from the whole analysis.
    fn facts_kept_batch_by_batch(batches: &[Vec<Event>]) -> Facts {
        let spec = RrSpec::default();
        let mut analysis = RunAnalysis::new();
        let mut incremental = Incremental::new();
        let mut settled_stalls = Vec::new();
        let mut facts = Facts::default();
        for batch in batches {
            analysis.push_all(batch);
            incremental.push(&analysis, Some(&spec), batch, &mut settled_stalls);
            let mut stalls = settled_stalls.clone();
            stalls.extend(incremental.tail(&analysis, Some(&spec)));
            assert_eq!(stalls, Attribution::of(&analysis, Some(&spec)).stalls);
            let changed_from = incremental.take_unsettled_from().unwrap_or(u32::MAX);
            let settled = Settled { below: incremental.next(), changed_from };
            facts = facts.updated(&analysis, &stalls, settled);
            let whole = Facts::of(&analysis, &stalls);
            assert_eq!(facts.extent_ns, whole.extent_ns);
            assert_eq!(facts.done, whole.done);
            assert_eq!(facts.classes, whole.classes);
            assert_eq!(facts.worst, whole.worst);
            // The list of every row, walked row by row.
            let all = RowSet::Some(Arc::new((0..facts.len() as u32).collect()));
            assert_eq!(
                facts.overview_of_all(),
                whole.overview(&all),
                "the overview kept as it grew"
            );
            for count in [1, 5, SLOWEST_KEPT, SLOWEST_KEPT + 1] {
                assert_eq!(facts.slowest(count), whole.slowest(count), "count {count}");
            }
            assert_eq!(facts.longest_ns(), whole.extent_ns.iter().copied().max().unwrap_or(0));
            // The longest waits: a sort of every stall, longest first, ties in request order.
            let mut every: Vec<Wait> = stalls.iter().map(Wait::of).collect();
            every.sort_by_key(|wait| Reverse(wait.wait_ns));
            for count in [1, 10, SLOWEST_KEPT, SLOWEST_KEPT + 1] {
                let expected = &every[..count.min(every.len())];
                assert_eq!(facts.longest_waits(&stalls, count), expected, "count {count}");
            }
        }
        facts
    }

    #[test]
    fn facts_updated_batch_by_batch_equal_facts_of_the_whole_run() {
        let events = nagle_run(150, 44 * MS);
        let batches: Vec<Vec<Event>> = events.chunks(13).map(<[Event]>::to_vec).collect();
        let facts = facts_kept_batch_by_batch(&batches);
        assert_eq!(facts.len(), 150);
        let settled = 150 - SETTLE_AFTER as usize;
        assert_eq!(facts.settled_rows, settled, "all but the last requests settled");
        assert_eq!(facts.settled_slowest.len(), SLOWEST_KEPT, "more settled than kept");
        assert_eq!(facts.settled_waits.len(), SLOWEST_KEPT, "more waits settled than kept");
    }

    /// A file's blocks may bring one side's events far ahead of the other's: a request first
    /// seen by its server's events, its client's (its start and end) coming batches later, gets
    /// its extent then, not 0 for good.
    #[test]
    fn facts_follow_a_side_whose_events_come_far_behind_the_others() {
        const BEHIND: u32 = 40;
        for late in [Side::Client, Side::Server] {
            let mut events = nagle_run(150, 44 * MS);
            // Each side's events keep their order; the late side's come 40 requests behind.
            events.sort_by_key(|event| {
                let behind = if event.side == late { BEHIND } else { 0 };
                (event.req.0 + behind, event.side == late)
            });
            let batches: Vec<Vec<Event>> = events.chunks(13).map(<[Event]>::to_vec).collect();
            let facts = facts_kept_batch_by_batch(&batches);
            assert_eq!(facts.len(), 150);
            assert!(facts.extent_ns.iter().all(|&extent| extent > 0), "{late:?} late");
        }
    }
}
