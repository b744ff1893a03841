//! What the analysis keeps of one request: its spans and the evidence of its waits (TCP_INFO
//! during a wait, captured segments, run-queue delays), each list bounded.

use crate::event::{tcp_flags, ConnId, Segment, Side};
use crate::span::Span;
use crate::span_list::SpanList;
pub use crate::span_list::Spans;

/// Everything recorded for one request, both sides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestView {
    pub conn: Option<ConnId>,
    /// When the client began the request (before connecting, if it connected first).
    pub start_ns: Option<u64>,
    /// When the client had read the whole response.
    pub done_ns: Option<u64>,
    /// Packed once the request has settled, in a reader that keeps requests
    /// ([`RunAnalysis::pack_settled`]).
    pub(super) spans: SpanList,
    /// What only some requests have, behind one pointer: a page that keeps a million requests
    /// pays 4 bytes for each that has none, not three empty lists (36 bytes).
    pub(super) evidence: Option<Box<Evidence>>,
}

/// The kernel's and the scheduler's evidence of one request's waits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Evidence {
    /// TCP_INFO read while a call of this request was blocked (the kernel's view of a wait).
    pub(super) kernel: Vec<KernelSample>,
    /// Captured segments of this request's connection while it was under way, in the order
    /// they arrived (empty without packet capture).
    pub(super) segments: Vec<SegmentSample>,
    /// Times a thread of this request was runnable but not running ([`EventKind::RunDelay`]).
    pub(super) run_delays: Vec<RunDelaySample>,
}

/// A thread waited `waited_ns` for a CPU in all between `since_ns` and `at_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunDelaySample {
    pub side: Side,
    pub since_ns: u64,
    pub at_ns: u64,
    pub waited_ns: u64,
}

impl RunDelaySample {
    /// How much of the delay fell within `start_ns..end_ns`, at the least. Two readings say only
    /// that `waited_ns` accrued somewhere between `since_ns` and `at_ns`; as much of it as fits
    /// outside `start_ns..end_ns` is taken to be outside, so a wait is never blamed on the
    /// scheduler for a delay that could have come before or after it.
    pub fn at_least_within(&self, start_ns: u64, end_ns: u64) -> u64 {
        let overlap = self.at_ns.min(end_ns).saturating_sub(self.since_ns.max(start_ns));
        let outside = self.at_ns.saturating_sub(self.since_ns).saturating_sub(overlap);
        self.waited_ns.saturating_sub(outside).min(overlap)
    }
}

/// The part of a captured segment that explains waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSample {
    /// The side that sent it.
    pub side: Side,
    pub at_ns: u64,
    /// [`tcp_flags`] bits.
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// Payload bytes.
    pub len: u32,
}

impl SegmentSample {
    pub fn new(side: Side, at_ns: u64, segment: &Segment) -> SegmentSample {
        let Segment { flags, seq, ack, len, .. } = *segment;
        SegmentSample { side, at_ns, flags, seq, ack, len }
    }

    /// An ACK carrying no data and no SYN, FIN or RST: what a delayed ACK looks like.
    pub fn is_pure_ack(&self) -> bool {
        self.len == 0
            && self.flags & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST) == 0
            && self.flags & tcp_flags::ACK != 0
    }

    /// The sequence number just past this segment's payload (what acknowledges all of it).
    pub fn seq_end(&self) -> u32 {
        self.seq.wrapping_add(self.len)
    }
}

/// The part of a TCP_INFO sample taken during a blocked call that explains waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSample {
    pub side: Side,
    pub at_ns: u64,
    /// Written by the application, not yet sent.
    pub notsent_bytes: Option<u32>,
    /// Segments sent and not yet acknowledged.
    pub unacked: u32,
    /// Bytes sent and not yet acknowledged (`bytes_sent - bytes_acked`, Linux 4.19 or later).
    pub in_flight_bytes: Option<u64>,
    /// The delayed-ACK timeout in use.
    pub ato_us: u32,
    pub snd_mss: u32,
    /// The window the peer advertises.
    pub snd_wnd: Option<u32>,
    /// The congestion window, in segments.
    pub snd_cwnd: u32,
}

impl KernelSample {
    /// The bytes in the send queue: written and not sent, plus sent and not acknowledged;
    /// `None` where the kernel reports neither.
    pub fn queued_bytes(&self) -> Option<u64> {
        match (self.notsent_bytes, self.in_flight_bytes) {
            (None, None) => None,
            (notsent, in_flight) => Some(u64::from(notsent.unwrap_or(0)) + in_flight.unwrap_or(0)),
        }
    }
}

impl RequestView {
    /// Every syscall of this request, both sides, in the order they were recorded.
    pub fn spans(&self) -> Spans<'_> {
        self.spans.iter()
    }

    pub fn span_count(&self) -> usize {
        self.spans.len()
    }

    #[cfg(test)]
    pub(crate) fn spans_packed(&self) -> bool {
        self.spans.is_packed()
    }

    pub fn latency_ns(&self) -> Option<u64> {
        Some(self.done_ns?.saturating_sub(self.start_ns?))
    }

    /// TCP_INFO read while a call of this request was blocked (the kernel's view of a wait).
    pub fn kernel(&self) -> &[KernelSample] {
        self.evidence.as_ref().map_or(&[], |evidence| &evidence.kernel)
    }

    /// Captured segments of this request's connection while it was under way, in the order
    /// they arrived (none without packet capture).
    pub fn segments(&self) -> &[SegmentSample] {
        self.evidence.as_ref().map_or(&[], |evidence| &evidence.segments)
    }

    /// Times a thread of this request was runnable but not running ([`EventKind::RunDelay`]).
    pub fn run_delays(&self) -> &[RunDelaySample] {
        self.evidence.as_ref().map_or(&[], |evidence| &evidence.run_delays)
    }

    pub(super) fn evidence_mut(&mut self) -> &mut Evidence {
        self.evidence.get_or_insert_with(Box::default)
    }

    /// This view with nothing in it but its lists' allocations, to be used for another
    /// request; `None` if a list grew large (a bulk transfer's thousands of writes), whose
    /// memory should not outlive it.
    /// A view of no request yet, whose spans will go in `spans` (an emptied list's allocation),
    /// if that list is small enough to be worth keeping.
    pub(super) fn with_spans(spans: Vec<Span>) -> Option<RequestView> {
        debug_assert!(spans.is_empty());
        (spans.capacity() <= SPARE_LIST_CAPACITY)
            .then(|| RequestView { spans: SpanList::Open(spans), ..RequestView::default() })
    }

    pub(super) fn emptied(self) -> Option<RequestView> {
        // Every field named, so that a new one cannot be carried over to another request.
        let RequestView { conn: _, start_ns: _, done_ns: _, spans, evidence } = self;
        // No list of the capacities: this runs for every request the command line retires.
        let small_list = |capacity: usize| capacity <= SPARE_LIST_CAPACITY;
        let small = small_list(spans.capacity())
            && evidence.as_deref().is_none_or(|Evidence { kernel, segments, run_delays }| {
                [kernel.capacity(), segments.capacity(), run_delays.capacity()]
                    .into_iter()
                    .all(small_list)
            });
        small.then(|| RequestView {
            conn: None,
            start_ns: None,
            done_ns: None,
            spans: SpanList::Open(spans.into_open_capacity()),
            // Emptied in its box: no free and allocation per request.
            evidence: evidence.map(|mut evidence| {
                let Evidence { kernel, segments, run_delays } = &mut *evidence;
                kernel.clear();
                segments.clear();
                run_delays.clear();
                evidence
            }),
        })
    }
}

/// The most samples of one kind (TCP_INFO, segments, run-queue delays) one request keeps. The
/// probe spaces its samples out as a wait goes on, so a real request has tens to hundreds; a
/// request that never ends, in a broken or hostile file, could bring millions.
pub const MAX_SAMPLES_PER_REQUEST: usize = 4096;

/// Adds `sample` to one of a request's evidence lists, kept to [`MAX_SAMPLES_PER_REQUEST`]: once
/// full, the first half stays as it is (the start of a wait is where its cause shows: the small
/// segment, its ACK, the held data) and every other sample of the second half goes, so the
/// list still spans the whole wait. Returns how many samples went. Each thinning costs the
/// list's length and frees a quarter of it: O(1) a sample over a long run.
pub(super) fn push_capped<T>(list: &mut Vec<T>, sample: T) -> u64 {
    let mut thinned = 0;
    if list.len() >= MAX_SAMPLES_PER_REQUEST {
        let before = list.len();
        let kept_whole = MAX_SAMPLES_PER_REQUEST / 2;
        let mut index = 0;
        list.retain(|_| {
            index += 1;
            index <= kept_whole || (index - kept_whole) % 2 == 0
        });
        thinned = (before - list.len()) as u64;
    }
    list.push(sample);
    thinned
}

/// Emptied views kept for the next requests: as many as a retirement hands back at once.
pub(super) const MAX_SPARE_VIEWS: usize = 8192;
/// A list longer than this is not kept for another request.
pub(super) const SPARE_LIST_CAPACITY: usize = 32;
