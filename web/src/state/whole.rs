//! A pass over the whole run of a file the page holds in part: every request's facts (its
//! extent, its stalls' classes), made through the retire-and-attribute loop `show` reads a file
//! with (shared's `RunStalls`, bounded), so that "next slowest" and the steps from stall to
//! stall reach every request of the run, not only those held.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use ackscope_shared::analysis::RequestView;
use ackscope_shared::attribution::Stall;
use ackscope_shared::reduce::{stall_spec, RunStalls};
use ackscope_shared::wire::ToBrowser;
use ackscope_shared::RunId;

use crate::session_file::SessionDecoder;
use crate::timeline::rows::{Facts, Filter};

/// The slowest requests a pass keeps in order: "next slowest" among them answers at once; past
/// them it is a scan of every request. (Fewer in tests, whose runs then go past them.)
const SLOWEST_KEPT: usize = if cfg!(test) { 1_000 } else { 10_000 };

/// A finished request as "next slowest" ranks it: the longer first, then the earlier.
type Slow = Reverse<(u64, Reverse<u32>)>;

/// Every request of a run: its facts, the slowest in order, and the ones that stalled.
#[derive(Debug, Default)]
pub struct Ranks {
    pub facts: Facts,
    /// The [`SLOWEST_KEPT`] slowest finished requests, slowest first (ties: the earlier first).
    slowest: Vec<u32>,
    /// The requests with a stall, in order.
    stalled: Vec<u32>,
}

impl Ranks {
    /// The finished request after `after` in slowest-first order (the slowest with none), as
    /// [`Facts::next_slowest`] finds it: among the slowest kept at once, past them by its loop.
    pub fn next_slowest(&self, after: Option<u32>) -> Option<u32> {
        let Some(after) = after else { return self.slowest.first().copied() };
        match self.slowest.iter().position(|&req| req == after) {
            Some(at) if at + 1 < self.slowest.len() => Some(self.slowest[at + 1]),
            _ => self.facts.next_slowest(Some(after)),
        }
    }

    /// The request after `from` (before it, `forward == false`; from the start or the end
    /// without one) with a stall the filter keeps, through the list of them.
    pub fn next_stalled(&self, from: Option<u32>, forward: bool, filter: &Filter) -> Option<u32> {
        let kept = |req: &u32| self.facts.keeps_request(*req, filter);
        match (from, forward) {
            (None, true) => self.stalled.iter().copied().find(kept),
            (None, false) => self.stalled.iter().rev().copied().find(kept),
            (Some(from), true) => {
                let at = self.stalled.partition_point(|&req| req <= from);
                self.stalled[at..].iter().copied().find(kept)
            }
            (Some(from), false) => {
                let at = self.stalled.partition_point(|&req| req < from);
                self.stalled[..at].iter().rev().copied().find(kept)
            }
        }
    }
}

/// The pass over one run of a file, fed its bytes from the start in pieces.
#[derive(Debug)]
pub struct WholePass {
    pub run: RunId,
    decoder: SessionDecoder,
    /// From the run's start on (`None` for a run whose stalls are not found from its calls).
    stalls: Option<RunStalls>,
    ranked: Ranked,
    pub read_bytes: u64,
    pub total_bytes: u64,
}

/// What the pass has made so far.
#[derive(Debug)]
struct Ranked {
    facts: Facts,
    /// The slowest finished requests so far, the fastest of them on top.
    slowest: BinaryHeap<Slow>,
    stalled: Vec<u32>,
}

impl WholePass {
    /// `requests`: how many the run holds, as its file's end says (bounded by the caller):
    /// room for their facts at once, not by doubling (ten million requests' columns copied).
    pub fn new(run: RunId, total_bytes: u64, requests: usize) -> WholePass {
        let mut facts = Facts::default();
        facts.reserve(requests);
        WholePass {
            run,
            // Every event of the run (a pass keeps none of them), none of the other runs.
            decoder: SessionDecoder::reading_from(u64::MAX, run, 0),
            stalls: None,
            ranked: Ranked { facts, slowest: BinaryHeap::new(), stalled: Vec::new() },
            read_bytes: 0,
            total_bytes,
        }
    }

    /// Takes the next piece of the file, stopping after `events` events: true if whole
    /// messages are left for the next call (as `SessionDecoder::feed_some`).
    pub fn feed_some(&mut self, bytes: &[u8], events: usize) -> bool {
        self.read_bytes += bytes.len() as u64;
        let (stalls, ranked) = (&mut self.stalls, &mut self.ranked);
        self.decoder.feed_some(bytes, events, |message| match message {
            ToBrowser::RunStarted { spec, .. } => {
                *stalls = stall_spec(&spec).map(|spec| RunStalls::new(spec.cloned()));
            }
            ToBrowser::Events { events, .. } => {
                if let Some(stalls) = stalls {
                    stalls.push(&events, |req, view, found| ranked.add(req.0, view, &found));
                }
            }
            _ => {}
        })
    }

    /// Every request ranked once the file is read (up to where it stops holding, if it was cut
    /// short), the requests still held attributed as `show` attributes them at a file's end;
    /// `None` for a run of another kind.
    pub fn finish(mut self) -> Option<Ranks> {
        // The messages of the bytes fed that are still whole in the decoder (each call stops
        // after a batch of events).
        self.feed_some(&[], usize::MAX);
        let stalls = self.stalls?;
        let held = stalls.held_stalls();
        let analysis = stalls.analysis();
        let first = analysis.first_request();
        for (index, view) in analysis.requests().iter().enumerate() {
            let req = first + index as u32;
            let from = held.partition_point(|stall| stall.req.0 < req);
            let to = held.partition_point(|stall| stall.req.0 <= req);
            self.ranked.add(req, view, &held[from..to]);
        }
        let Ranked { facts, slowest, stalled } = self.ranked;
        // The heap sorted fastest last (its entries reversed): slowest first.
        let slowest = slowest.into_sorted_vec().into_iter().map(|Reverse((_, Reverse(req)))| req);
        Some(Ranks { facts, slowest: slowest.collect(), stalled })
    }
}

impl Ranked {
    /// One request's facts, and its place among the slowest and the stalled.
    fn add(&mut self, req: u32, view: &RequestView, stalls: &[Stall]) {
        // A request ranked already (a crafted file starting the run again) stays as it was.
        if req < self.facts.len() as u32 {
            return;
        }
        self.facts.push_request(req, view, stalls);
        if !stalls.is_empty() && self.stalled.last().is_none_or(|&last| last < req) {
            self.stalled.push(req);
        }
        let Some(extent) = view.done_ns.and(self.facts.extent_of(req)) else { return };
        let entry = Reverse((extent, Reverse(req)));
        if self.slowest.len() < SLOWEST_KEPT {
            self.slowest.push(entry);
        } else if self.slowest.peek().is_some_and(|fastest| entry < *fastest) {
            self.slowest.pop();
            self.slowest.push(entry);
        }
    }
}
