//! The attribution of a run whose events are still arriving (the page), kept batch by batch:
//! [`Incremental`].

use super::*;
use crate::analysis::{request_touched, RequestView, RunAnalysis, Span, SpanKind};
use crate::event::{ConnId, Event, EventKind, ReqId, Side};
use crate::keyed_hash::KeyedMap;
use crate::spec::RrSpec;
use crate::stall::Stall;

/// How many later requests the client must have started before a done request is settled (see
/// [`Incremental`]).
pub const SETTLE_AFTER: u32 = 2;

/// The attribution of a run whose events are still arriving, kept batch by batch so that a batch
/// costs in proportion to the requests it concerns, not to the run: each request is attributed
/// once, when it is settled, and only the requests not settled yet (the tail, a few requests)
/// are attributed again when the whole answer is asked for. At every point the settled stalls
/// followed by [`Incremental::tail`] are exactly [`attribute`] of the whole analysis, and
/// [`Incremental::classes_with`] of the tail is exactly [`summarize`] of that.
///
/// **Settled.** Request `r` is settled when (1) the client is done with it (`RequestDone`, its
/// last event of `r`), (2) the client has started request `r + SETTLE_AFTER` or a later one (the
/// client starts requests in id order), and
/// (3) every read of `r` is matched to the peer's write that carried its last byte (so the
/// other side's events of `r` have arrived up to its answer: each side's events arrive in the
/// order it recorded them). Requests settle in id order: the settled ones are a prefix.
///
/// The rule only decides when to do the work; correctness does not rest on it. Batches of the
/// other side, of the TCP_INFO sampler or of the packet capture trail by an exchange or more
/// (the probe hands a thread's events over every 256 events or 10 ms), so an event can still
/// arrive for a settled request. Everything a request's attribution reads is watched: an event
/// of a settled request (see [`request_touched`]), a TCP_INFO sample that changes the MSS or
/// long RTT of a connection settled requests used, or a different path delay, unsettles the
/// requests from there on, and they are attributed again when they settle again. The peer write
/// that carried a read never changes once known (condition 3: writes only append). After the
/// run ends no batch comes: the answer asked then (settled stalls and the tail, once) is final.
///
/// The settled stalls are kept by the caller, in one `Vec` passed to every call (the first
/// [`Incremental::settled_stalls`] of it), so that a caller can lend them out without copying
/// them, as the web app's cached answer does.
#[derive(Debug, Default)]
pub struct Incremental {
    /// Requests below this id are settled.
    next: u32,
    /// How many of the caller's stalls are of settled requests.
    settled_stalls: usize,
    /// Their waits per class and direction.
    tally: StallTally,
    /// How many of them are held reads (what [`crate::Summary::stalled_reads`] counts).
    held_reads: u32,
    /// Per connection of settled requests: the first of them, and the facts of each side as
    /// writer that they were attributed with.
    connections: KeyedMap<ConnId, Settled>,
    /// The path delay the settled requests were attributed with.
    path_delay_ns: u64,
    /// The first request forgotten since [`Incremental::take_unsettled_from`] was last called:
    /// for a caller that keeps something of each settled request (the page's facts of it).
    unsettled_from: Option<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Settled {
    first: u32,
    /// By writer: the client's, then the server's.
    facts: [WriterFacts; 2],
}

impl Settled {
    fn facts(&self, writer: Side) -> WriterFacts {
        self.facts[usize::from(writer == Side::Server)]
    }
}

impl Incremental {
    pub fn new() -> Incremental {
        Incremental::default()
    }

    /// Brings the settled part up to date after `events` were pushed into `analysis`:
    /// unsettles what they changed, then attributes the requests that settled. `stalls` is the
    /// caller's list of settled stalls (anything after them, a tail, is dropped). Every batch
    /// pushed into `analysis` since the first call must be passed to one; batches before it need
    /// not (nothing was settled then).
    pub fn push(
        &mut self,
        analysis: &RunAnalysis,
        spec: Option<&RrSpec>,
        events: &[Event],
        stalls: &mut Vec<Stall>,
    ) {
        stalls.truncate(self.settled_stalls);
        let mut from = (analysis.path_delay_ns() != self.path_delay_ns).then_some(0);
        self.path_delay_ns = analysis.path_delay_ns();
        // The connections and sides the batch has TCP_INFO samples of, each once: a long run's
        // batches are mostly samples of one or two.
        let mut sampled: Vec<(ConnId, Side)> = Vec::new();
        for event in events {
            let touched = request_touched(event).map(|req| req.0).filter(|&req| req < self.next);
            from = earliest(from, touched);
            if let EventKind::TcpInfo(_) = &event.kind {
                if sampled.last() != Some(&(event.conn, event.side)) {
                    sampled.push((event.conn, event.side));
                }
            }
        }
        sampled.sort_unstable_by_key(|&(conn, side)| (conn, side == Side::Server));
        sampled.dedup();
        for (conn, side) in sampled {
            // The analysis holds the batch's last sample: compare with what was used.
            let changed = self
                .connections
                .get(&conn)
                .filter(|settled| settled.facts(side) != WriterFacts::of(analysis, conn, side));
            from = earliest(from, changed.map(|settled| settled.first));
        }
        if let Some(from) = from {
            self.unsettle(from, stalls);
        }
        self.settle(analysis, spec, stalls);
    }

    /// Forgets what was settled from request `from` on.
    fn unsettle(&mut self, from: u32, stalls: &mut Vec<Stall>) {
        let cut = stalls.partition_point(|stall| stall.req.0 < from);
        for stall in stalls.drain(cut..) {
            self.tally.remove(&stall);
            self.held_reads = self.held_reads.saturating_sub(u32::from(stall.is_held_read()));
        }
        self.settled_stalls = stalls.len();
        if from < self.next {
            self.unsettled_from = earliest(self.unsettled_from, Some(from));
        }
        self.next = self.next.min(from);
        self.connections.retain(|_, settled| settled.first < from);
    }

    fn settle(&mut self, analysis: &RunAnalysis, spec: Option<&RrSpec>, stalls: &mut Vec<Stall>) {
        let first = analysis.first_request();
        // Requests retired from the analysis before they settled cannot be attributed any more.
        self.next = self.next.max(first);
        let requests = analysis.requests();
        // Requests start in id order: the newest started is one of the last views.
        let newest_started = requests.iter().rposition(|view| view.start_ns.is_some());
        let newest_started = newest_started.map(|index| first + index as u32);
        while let Some(view) = requests.get((self.next - first) as usize) {
            if !is_settled(analysis, self.next, view, newest_started) {
                break;
            }
            for stall in attribute_request(analysis, ReqId(self.next), view, spec) {
                self.tally.add(&stall);
                // A held read is exactly a read `stall_ns` reports, as `stalled_reads_of` counts.
                self.held_reads += u32::from(stall.is_held_read());
                stalls.push(stall);
            }
            if let Some(conn) = view.conn {
                let facts =
                    [Side::Client, Side::Server].map(|w| WriterFacts::of(analysis, conn, w));
                self.connections.entry(conn).or_insert(Settled { first: self.next, facts });
            }
            self.next += 1;
        }
        self.settled_stalls = stalls.len();
    }

    /// The first request not settled.
    pub fn next(&self) -> u32 {
        self.next
    }

    /// The first request that was settled and no longer is, since the last call (`None` if
    /// none): what a caller kept of the settled requests from there on may have changed. The
    /// settled requests may go back and forward again within one [`Incremental::push`], so
    /// [`Incremental::next`] alone does not tell.
    pub fn take_unsettled_from(&mut self) -> Option<u32> {
        self.unsettled_from.take()
    }

    /// How many of the caller's stalls are settled.
    pub fn settled_stalls(&self) -> usize {
        self.settled_stalls
    }

    /// The settled held reads ([`crate::Summary::stalled_reads`] of the settled requests).
    pub fn held_reads(&self) -> u32 {
        self.held_reads
    }

    fn tail_views<'a>(
        &self,
        analysis: &'a RunAnalysis,
    ) -> impl Iterator<Item = (u32, &'a RequestView)> {
        let first = analysis.first_request();
        let skip = self.next.saturating_sub(first) as usize;
        let views = analysis.requests().iter().enumerate().skip(skip);
        views.map(move |(index, view)| (first + index as u32, view))
    }

    /// The stalls of the requests not settled, in request order.
    pub fn tail(&self, analysis: &RunAnalysis, spec: Option<&RrSpec>) -> Vec<Stall> {
        let tail = self.tail_views(analysis);
        tail.flat_map(|(req, view)| attribute_request(analysis, ReqId(req), view, spec)).collect()
    }

    /// The held reads of the requests not settled.
    pub fn tail_held_reads(&self, analysis: &RunAnalysis) -> u32 {
        self.tail_views(analysis).map(|(_, view)| analysis.stalled_reads_of(view)).sum()
    }

    /// [`summarize`] of the settled stalls followed by `tail`.
    pub fn classes_with(&self, tail: &[Stall]) -> Vec<ClassSummary> {
        self.tally.summaries_with(tail)
    }
}

/// [`Incremental`]'s rule: done, [`SETTLE_AFTER`] later requests started, every read matched.
fn is_settled(
    analysis: &RunAnalysis,
    req: u32,
    view: &RequestView,
    newest_started: Option<u32>,
) -> bool {
    let later_started =
        newest_started.is_some_and(|newest| newest >= req.saturating_add(SETTLE_AFTER));
    let reads_matched = view.conn.is_none_or(|conn| {
        let read = |span: &Span| span.kind == SpanKind::Read;
        view.spans().filter(read).all(|span| analysis.held_ns(conn, &span).is_some())
    });
    view.done_ns.is_some() && later_started && reads_matched
}
