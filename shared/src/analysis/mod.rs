//! Pure analysis of a run's events: per-request spans, stalls and the summary.
//!
//! One file, though long: [`RunAnalysis::push`] and [`RunAnalysis::retire`] are one state
//! machine over the same per-connection maps; a request's lists (`request`) and the settlement
//! rule (`settlement`) are files of their own.
//!
//! [`RunAnalysis`] is fed events in any batch order (each side's events in the order that side
//! recorded them) and answers questions at any point, so the browser can show a run while it is
//! still going.
//!
//! A **stall** is a read that stayed blocked more than [`STALL_THRESHOLD_NS`] after the peer had
//! already written the bytes it was waiting for: the data sat in the kernel (Nagle's algorithm
//! holding a small segment, a delayed ACK, a full window), not in the peer application. A read
//! that waits for the peer to *produce* its bytes is waiting, not stalled. The two are told apart
//! by matching stream offsets: both ends of a local run share one clock, so the peer's write that
//! carried the last byte a read returned has a known completion time.

use serde::{Deserialize, Serialize};

use crate::event::{ConnId, Event, EventKind, ReqId, Side};
use crate::keyed_hash::{KeyedHash, KeyedMap};
use crate::side_map::SideMap;
pub use crate::sorted_multiset::SortedMultiset;
pub use crate::span::{Span, SpanKind};
pub use crate::span_list::Spans;
use crate::spec::{RrSpec, MAX_REQUESTS};
pub use crate::stats::{ns_to_ms, percentile};
use crate::write_log::WriteLog;
use std::cell::Cell;
use std::collections::HashSet;

/// Reads held longer than this are stalls (the summary's "reads blocked longer than 10 ms").
/// Far above a loopback round trip (tens of microseconds), far below a delayed ACK (40 ms).
pub const STALL_THRESHOLD_NS: u64 = 10_000_000;

/// What "stalled reads" counts, against the waits listed beside it: one sentence, printed by
/// the command line and shown on the page, so the two numbers are never read as the same thing.
pub const STALLED_READS_MEANING: &str = "stalled reads: reads the kernel held over 10 ms \
    after the peer had written; the waits listed are each classified, and include waits for \
    something else (think time, a connect, a full buffer), so the two counts can differ";

mod request;
mod settlement;

use request::{push_capped, MAX_SPARE_VIEWS};
pub use request::{
    KernelSample, RequestView, RunDelaySample, SegmentSample, MAX_SAMPLES_PER_REQUEST,
};
use settlement::Settlement;

/// The headline numbers of a run. Field names are part of the CLI's JSON interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Requests completed.
    pub requests: u32,
    /// From the first request's start to the last request's end.
    pub duration_s: f64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Reads held longer than [`STALL_THRESHOLD_NS`] (see the module docs).
    pub stalled_reads: u32,
}

/// What is known of one side of one connection while it is open.
#[derive(Debug, Default)]
struct SideState {
    /// The syscall going on (each side is one thread, so at most one): when and what.
    open: Option<(u64, SpanKind)>,
    /// Bytes read and written so far.
    read_offset: u64,
    write_offset: u64,
    /// Its writes: (stream offset after the write, when it returned).
    writes: WriteLog,
    /// The latest send MSS TCP_INFO reported.
    mss: Option<u32>,
    /// The smallest RTT TCP_INFO reported.
    min_rtt_us: Option<u32>,
}

impl SideState {
    /// This state made empty for a side of another connection, keeping its write log's
    /// allocation: `None` if the log grew large (a long connection's), which is not kept.
    fn emptied(self) -> Option<SideState> {
        // Every field named, so that a new one cannot be carried over to another connection.
        let SideState { open: _, read_offset: _, write_offset: _, writes, mss: _, min_rtt_us: _ } =
            self;
        Some(SideState { writes: writes.emptied()?, ..SideState::default() })
    }
}

/// Emptied connection sides kept for the next connections: as many as a retirement forgets at
/// once in a run that opens a connection per request (two sides a request retired).
const MAX_SPARE_SIDES: usize = 2 * MAX_SPARE_VIEWS;

/// Incremental analysis of one run.
#[derive(Debug, Default)]
pub struct RunAnalysis {
    requests: Vec<RequestView>,
    /// What is known of each side of each connection, in one map: an event looks its side up
    /// once (a run that opens a connection per request has ids past the map's vector, and each
    /// lookup hashes).
    sides: SideMap<SideState>,
    /// The one-way delay of the path (an emulated link's RTT / 2): bytes need it to cross, so a
    /// read held that long is not stalled.
    path_delay_ns: u64,
    /// Events that named a request id beyond [`MAX_REQUESTS`], more than [`MAX_REQUESTS_AHEAD`]
    /// past the newest request held, or of a request already retired; they are not analysed.
    pub ignored_events: u64,
    /// Samples a request had more of than [`MAX_SAMPLES_PER_REQUEST`], thinned out.
    pub thinned_samples: u64,
    /// Requests below this id were retired ([`RunAnalysis::retire`]); `requests[0]` is this one.
    base: u32,
    /// The held requests below this id have their spans packed ([`RunAnalysis::pack_settled`]).
    packed_until: u32,
    retired: Retired,
    /// How many of the held requests, from the oldest, are known to be settled: where the
    /// next [`RunAnalysis::retire`] goes on looking.
    settled_prefix: usize,
    /// Connections a side closed, with the latest request a side closed them in: their state is
    /// forgotten once that request is retired and no held request is on them.
    closed: KeyedMap<ConnId, u32>,
    /// [`RunAnalysis::forget_closed_connections`]'s working sets, kept for their allocations.
    in_use: HashSet<ConnId, KeyedHash>,
    forgotten: Vec<ConnId>,
    /// Views of retired requests, emptied, for the next requests: their lists keep their
    /// allocations, so a long run's collector does not allocate and free a request's lists
    /// for every request (on the CPU it measures).
    spare: Vec<RequestView>,
    /// Sides of forgotten connections, emptied, for the next connections: a run that opens a
    /// connection per request otherwise allocates and frees each side's write log once a
    /// request (a fifth of reading such a run went to the allocator).
    spare_sides: Vec<SideState>,
    /// Where [`RunAnalysis::pack_settled`] encodes a request's spans before they are boxed at
    /// their exact size.
    pack_scratch: Vec<u8>,
    /// Every completed request's latency, retired ones included, for the summary's exact
    /// percentiles: ordered when the summary is asked for, not on every request.
    latencies: SortedMultiset,
    /// The earliest start and the latest done of every request, retired ones included.
    first_start: Cell<Option<u64>>,
    last_done: Cell<Option<u64>>,
    /// A repeated start or done (a broken or hostile file) replaced one of those two extremes:
    /// they are found again when next asked for, once, not on every repeat.
    extremes_stale: Cell<bool>,
    /// How far the run's event producers have got, for a reader that retires requests only
    /// once all their events are in ([`RunAnalysis::retire_when_settled`]); `None`: any
    /// finished request may be retired.
    settlement: Option<Box<Settlement>>,
}

/// What the summary still needs of retired requests.
#[derive(Debug, Default)]
struct Retired {
    /// Their earliest start and latest done: `first_start` and `last_done` are found again from
    /// these and the requests held when a repeated event replaces the extreme one.
    first_start: Option<u64>,
    last_done: Option<u64>,
    stalled_reads: u32,
}

/// How far past the newest request held an event's request id may be. The probe hands over a
/// thread's events at least every 1,024 events, and the other side's trail by an exchange or
/// so: a real run stays within a few thousand.
pub const MAX_REQUESTS_AHEAD: usize = 16_384;

/// The most requests [`RunAnalysis::retire`] holds back while waiting for their events
/// ([`RunAnalysis::retire_when_settled`]): a few hundred bytes each, tens of megabytes in all.
pub const MAX_HELD: usize = 65_536;

/// Which of a request's times an event sets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Time {
    Start,
    Done,
}

impl RunAnalysis {
    pub fn new() -> Self {
        Self::default()
    }

    /// The analysis of a request/response run of `spec` (`None`: a spec of no such run). Over
    /// an emulated link bytes need its one-way delay to cross it: that much of a read's wait is
    /// the path, not a stall. Every reader of a run starts its analysis here.
    pub fn of_rr(spec: Option<&RrSpec>) -> Self {
        let mut analysis = Self::new();
        if let Some(link) = spec.and_then(|spec| spec.link) {
            analysis.set_path_delay_ns(link.one_way_delay_ns());
        }
        analysis
    }

    /// Holds requests from id `first` on, for a reader that reads a run from its middle (a file's
    /// blocks from the one that holds `first`): events of earlier requests are left out, as a
    /// retired request's are. Only before any request is held; later it changes nothing.
    pub fn start_at(&mut self, first: u32) {
        if self.requests.is_empty() && self.base == 0 {
            (self.base, self.packed_until) = (first, first);
        }
    }

    /// Lets up to `requests` of the held requests go, the newest first, for a reader giving a
    /// big run's memory back a piece at a time (millions of requests are millions of
    /// allocations, freed at once a task of over 100 ms in the browser). False once none is held.
    pub fn release_some(&mut self, requests: usize) -> bool {
        self.requests.truncate(self.requests.len().saturating_sub(requests));
        self.spare.clear();
        !self.requests.is_empty()
    }

    /// Room for `requests` requests in all, when a reader knows how many are coming (a file's
    /// overview says so): the list then never doubles, which for a million requests would copy
    /// a hundred megabytes at once. The caller bounds `requests` by what its input can hold.
    pub fn reserve_requests(&mut self, requests: usize) {
        self.requests.reserve_exact(requests.saturating_sub(self.requests.len()));
    }

    pub fn push_all<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for event in events {
            self.push(event);
        }
    }

    /// What is known of a side of a connection, made empty on its first event.
    fn side(&mut self, key: (ConnId, Side)) -> &mut SideState {
        let spare = &mut self.spare_sides;
        self.sides.get_or_insert_with(key, || spare.pop().unwrap_or_default())
    }

    pub fn push(&mut self, event: &Event) {
        let key = (event.conn, event.side);
        match event.kind {
            EventKind::RequestStart => {
                if let Some(settlement) = &mut self.settlement {
                    settlement.started(event);
                }
                self.set_time(event, Time::Start)
            }
            EventKind::RequestDone => self.set_time(event, Time::Done),
            EventKind::ConnectStart => {
                self.side(key).open = Some((event.at_ns, SpanKind::Connect));
            }
            EventKind::WriteStart { .. } => {
                self.side(key).open = Some((event.at_ns, SpanKind::Write));
            }
            EventKind::ReadStart { .. } => {
                self.side(key).open = Some((event.at_ns, SpanKind::Read));
            }
            EventKind::Connected => {
                let open = self.sides.get_mut(&key).and_then(|state| state.open.take());
                if let Some((start_ns, SpanKind::Connect)) = open {
                    self.add_span(event, SpanKind::Connect, start_ns, 0, 0);
                }
            }
            EventKind::WriteDone { bytes } => {
                if let Some(settlement) = &mut self.settlement {
                    settlement.wrote(event, false);
                }
                let state = self.side(key);
                if let Some((start_ns, SpanKind::Write)) = state.open.take() {
                    state.write_offset += u64::from(bytes);
                    let stream_end = state.write_offset;
                    state.writes.push(stream_end, event.at_ns);
                    self.add_span(event, SpanKind::Write, start_ns, bytes, stream_end);
                }
            }
            EventKind::ReadDone { bytes } => {
                let state = self.side(key);
                if let Some((start_ns, SpanKind::Read)) = state.open.take() {
                    state.read_offset += u64::from(bytes);
                    let stream_end = state.read_offset;
                    // A zero-byte read is the peer closing: connection life, not a request's.
                    if bytes > 0 {
                        self.add_span(event, SpanKind::Read, start_ns, bytes, stream_end);
                    }
                }
            }
            EventKind::TcpInfo(ref info) => {
                let state = self.side(key);
                state.mss = Some(info.snd_mss);
                if let Some(rtt) = info.min_rtt_us.filter(|&rtt| rtt > 0) {
                    state.min_rtt_us = Some(state.min_rtt_us.map_or(rtt, |known| known.min(rtt)));
                }
                if info.during_block {
                    let sample = KernelSample {
                        side: event.side,
                        at_ns: event.at_ns,
                        notsent_bytes: info.notsent_bytes,
                        unacked: info.unacked,
                        in_flight_bytes: info
                            .bytes_sent
                            .zip(info.bytes_acked)
                            .map(|(sent, acked)| sent.saturating_sub(acked)),
                        ato_us: info.ato_us,
                        snd_mss: info.snd_mss,
                        snd_wnd: info.snd_wnd,
                        snd_cwnd: info.snd_cwnd,
                    };
                    if let Some(view) = self.request_mut(event.req) {
                        let thinned = push_capped(&mut view.evidence_mut().kernel, sample);
                        self.thinned_samples += thinned;
                    }
                }
            }
            EventKind::Segment(ref segment) => {
                if let Some(settlement) = &mut self.settlement {
                    settlement.segment(event);
                }
                let sample = SegmentSample::new(event.side, event.at_ns, segment);
                if let Some(view) = self.request_mut(event.req) {
                    let thinned = push_capped(&mut view.evidence_mut().segments, sample);
                    self.thinned_samples += thinned;
                }
            }
            EventKind::RunDelay { since_ns, waited_ns } => {
                let sample =
                    RunDelaySample { side: event.side, since_ns, at_ns: event.at_ns, waited_ns };
                if let Some(view) = self.request_mut(event.req) {
                    let thinned = push_capped(&mut view.evidence_mut().run_delays, sample);
                    self.thinned_samples += thinned;
                }
            }
            EventKind::Closed => {
                if let Some(settlement) = &mut self.settlement {
                    settlement.wrote(event, true);
                }
                let latest = self.closed.entry(event.conn).or_insert(event.req.0);
                *latest = (*latest).max(event.req.0);
            }
            EventKind::Accepted
            | EventKind::SockOpt { .. }
            | EventKind::Buffers { .. }
            | EventKind::Link(_)
            | EventKind::DelayedAck
            | EventKind::BlockedCall { .. } => {}
            EventKind::ClockSync { uncertainty_ns, rtt_ns, .. } => {
                // Across a real path a read waits half the round trip for the bytes to cross,
                // and the two sides' times are known only to within the clock's uncertainty:
                // neither is a stall.
                let margin = rtt_ns / 2 + uncertainty_ns;
                self.path_delay_ns = self.path_delay_ns.max(margin);
            }
        }
    }

    /// Sets a request's start (and connection) or done time, and keeps what the summary reads of
    /// every request up to date: the latency index, the first start and the last done.
    fn set_time(&mut self, event: &Event, time: Time) {
        let Some(view) = self.request_mut(event.req) else { return };
        let latency_before = view.latency_ns();
        let replaced = match time {
            Time::Start => {
                view.conn = Some(event.conn);
                view.start_ns.replace(event.at_ns)
            }
            Time::Done => view.done_ns.replace(event.at_ns),
        };
        let latency_after = view.latency_ns();
        if latency_before != latency_after {
            if let Some(before) = latency_before {
                self.latencies.remove(before);
            }
            if let Some(after) = latency_after {
                self.latencies.insert(after);
            }
        }
        // The probe sends one start and one done per request. A repeated one (a broken or
        // hostile file) that replaces the run's extreme may move it inward: it is found again
        // when the summary asks, so that a file of repeats costs one scan, not one per repeat.
        match time {
            Time::Start if replaced.is_some_and(|old| Some(old) == self.first_start.get()) => {
                self.extremes_stale.set(true);
            }
            Time::Start => {
                self.first_start.set(min_some(self.first_start.get(), Some(event.at_ns)));
            }
            Time::Done if replaced.is_some_and(|old| Some(old) == self.last_done.get()) => {
                self.extremes_stale.set(true);
            }
            Time::Done => self.last_done.set(self.last_done.get().max(Some(event.at_ns))),
        }
    }

    /// The earliest start and the latest done of every request, retired ones included.
    fn extremes(&self) -> (Option<u64>, Option<u64>) {
        if self.extremes_stale.replace(false) {
            let held_starts = self.requests.iter().filter_map(|r| r.start_ns).min();
            self.first_start.set(min_some(self.retired.first_start, held_starts));
            let held_dones = self.requests.iter().filter_map(|r| r.done_ns).max();
            self.last_done.set(self.retired.last_done.max(held_dones));
        }
        (self.first_start.get(), self.last_done.get())
    }

    fn request_mut(&mut self, req: ReqId) -> Option<&mut RequestView> {
        // Past the limit, an event of a request already retired (it arrived very late), or one
        // too far ahead of every request held (a broken or hostile file: a single event naming
        // request 999,999 would otherwise make a million empty views).
        let index = req.0.checked_sub(self.base).map(|index| index as usize);
        let too_far = index.is_none_or(|index| index >= self.requests.len() + MAX_REQUESTS_AHEAD);
        if req.0 >= MAX_REQUESTS || too_far {
            self.ignored_events += 1;
            return None;
        }
        let index = (req.0 - self.base) as usize;
        if index >= self.requests.len() {
            let spare = &mut self.spare;
            self.requests.resize_with(index + 1, || spare.pop().unwrap_or_default());
        }
        Some(&mut self.requests[index])
    }

    fn add_span(&mut self, done: &Event, kind: SpanKind, start_ns: u64, bytes: u32, end: u64) {
        let span =
            Span { side: done.side, kind, start_ns, end_ns: done.at_ns, bytes, stream_end: end };
        if let Some(view) = self.request_mut(done.req) {
            let was_packed = view.spans.is_packed();
            view.spans.push(span);
            if was_packed {
                // A late span of a settled request: pack it again when it settles again.
                self.packed_until = self.packed_until.min(done.req.0);
            }
        }
    }

    /// Packs the spans of the requests before id `before` that are not packed yet (about 12
    /// bytes a span instead of 32: `span_list`). For a reader that keeps every request (the
    /// browser) and calls it with the requests that settled, which rarely change again; a
    /// later span of one unpacks it. Costs what it packs: requests packed before are skipped.
    pub fn pack_settled(&mut self, before: u32) {
        let held = self.base..self.base + self.requests.len() as u32;
        let from = self.packed_until.clamp(held.start, held.end);
        let to = before.clamp(from, held.end);
        let (scratch, spare) = (&mut self.pack_scratch, &mut self.spare);
        for view in &mut self.requests[(from - held.start) as usize..(to - held.start) as usize] {
            // The list's allocation goes to a later request, in a spare view.
            let list = view.spans.pack_reusing(scratch);
            if spare.len() < MAX_SPARE_VIEWS {
                spare.extend(list.and_then(RequestView::with_spans));
            }
        }
        self.packed_until = self.packed_until.max(to);
    }

    /// The send MSS of a side of a connection, if TCP_INFO was sampled.
    pub fn snd_mss(&self, conn: ConnId, side: Side) -> Option<u32> {
        self.sides.get(&(conn, side))?.mss.filter(|&mss| mss > 0)
    }

    /// The smallest RTT a side of a connection measured, if TCP_INFO was sampled.
    pub fn min_rtt_ns(&self, conn: ConnId, side: Side) -> Option<u64> {
        self.sides.get(&(conn, side))?.min_rtt_us.map(|us| u64::from(us) * 1000)
    }

    /// Runs over a path with a known one-way delay (an emulated link): a read held no longer
    /// than the bytes need to cross it is not stalled.
    pub fn set_path_delay_ns(&mut self, one_way_ns: u64) {
        self.path_delay_ns = one_way_ns;
    }

    pub fn path_delay_ns(&self) -> u64 {
        self.path_delay_ns
    }

    /// All requests seen so far, indexed by request id.
    pub fn requests(&self) -> &[RequestView] {
        &self.requests
    }

    /// How long a read stayed blocked after the peer had written the last byte it returned.
    /// `None` for other spans, or while the peer's write is not known yet.
    pub fn held_ns(&self, conn: ConnId, span: &Span) -> Option<u64> {
        let written_ns = self.written_ns(conn, span)?;
        Some(span.end_ns.saturating_sub(span.start_ns.max(written_ns)))
    }

    /// When the peer's write that carried the read's last byte was made.
    fn written_ns(&self, conn: ConnId, span: &Span) -> Option<u64> {
        if span.kind != SpanKind::Read || span.bytes == 0 {
            return None;
        }
        let writes = &self.sides.get(&(conn, span.side.peer()))?.writes;
        // The first peer write whose end lies past the read's last byte carried that byte.
        writes.carrier_done_ns(span.stream_end)
    }

    /// The stall of a read: how long it stayed blocked after its last byte could have arrived
    /// (the peer's write of it, plus the path's one-way delay), if that is longer than
    /// [`STALL_THRESHOLD_NS`]. A read that began before the bytes could arrive waited for the
    /// path until then, not for the kernel; one that began later waited for the kernel all
    /// along.
    pub fn stall_ns(&self, conn: ConnId, span: &Span) -> Option<u64> {
        // The excess is at most the read's whole duration: most reads end there, without the
        // search for the write that carried their bytes (this runs for every retired read).
        if span.duration_ns() <= STALL_THRESHOLD_NS {
            return None;
        }
        let could_arrive = self.written_ns(conn, span)?.saturating_add(self.path_delay_ns);
        let excess = span.end_ns.saturating_sub(span.start_ns.max(could_arrive));
        (excess > STALL_THRESHOLD_NS).then_some(excess)
    }

    /// The id of `requests()[0]`: 0 unless requests were retired.
    pub fn first_request(&self) -> u32 {
        self.base
    }

    /// Retires a request only once all its events are in (see [`Settlement`]): its server
    /// thread has written a later request's answer or closed the connection, and the
    /// capture, once it has handed segments over, has handed over some sent after a later
    /// request on its connection began (after the last, 200 ms after it finished). `server_recorded`: the run records its server's events, so they are waited for
    /// even before the first arrives. For readers that retire; the default retires any
    /// finished request.
    pub fn retire_when_settled(&mut self, server_recorded: bool) {
        self.settlement =
            Some(Box::new(Settlement { server_seen: server_recorded, ..Settlement::default() }));
    }

    /// Bounds memory on long runs: hands every finished (with [`RunAnalysis::retire_when_settled`],
    /// settled) request older than the newest `keep` to `fold` (with its id), keeps only what
    /// the summary needs of it, and forgets its spans. A late event for a retired request is
    /// ignored (counted in `ignored_events`).
    pub fn retire(&mut self, keep: usize, mut fold: impl FnMut(&RunAnalysis, ReqId, &RequestView)) {
        let candidates = self.requests.len().saturating_sub(keep);
        // Requests settle in order, and a settled one stays settled: the walk goes on from
        // where the last one stopped, so each request is looked at about once.
        let known = self.settled_prefix.min(candidates);
        let settled = known
            + self.requests[known..candidates]
                .iter()
                .enumerate()
                .take_while(|&(offset, view)| {
                    let Some(done_ns) = view.done_ns else { return false };
                    self.settlement.as_ref().is_none_or(|settlement| {
                        let req = ReqId(self.base + (known + offset) as u32);
                        settlement.settled(req, view.conn, done_ns)
                    })
                })
                .count();
        self.settled_prefix = settled;
        // A producer that never catches up (a thread stopped, a broken file) must not hold
        // every later request: past MAX_HELD the oldest go anyway, finished or not, half of
        // the limit at a time. A retirement looks at every request held (and moves the rest
        // down), so each request held is looked at about once, not eight times as when an
        // eighth went at a time (a third of reading a file that never settles).
        let forced = match self.requests.len() {
            held if held > MAX_HELD => (held - MAX_HELD / 2).min(candidates),
            _ => 0,
        };
        let count = settled.max(forced);
        // Each retirement looks at every request held (`oldest`, below). While they settle a
        // few at a time (a slow server), waiting for an eighth of them keeps that to a few
        // looks per request retired, not tens of thousands per batch.
        if count == 0 || (forced == 0 && count * 8 < candidates) {
            return;
        }
        let mut retired = std::mem::take(&mut self.retired);
        for (offset, view) in self.requests[..count].iter().enumerate() {
            fold(self, ReqId(self.base + offset as u32), view);
            // Their latencies stay in `latencies`, their times in `first_start` / `last_done`.
            retired.first_start = min_some(retired.first_start, view.start_ns);
            retired.last_done = retired.last_done.max(view.done_ns);
            retired.stalled_reads += self.stalled_reads_of(view);
        }
        self.retired = retired;
        for view in self.requests.drain(..count) {
            if self.spare.len() < MAX_SPARE_VIEWS {
                self.spare.extend(view.emptied());
            }
        }
        self.base += count as u32;
        self.settled_prefix = self.settled_prefix.saturating_sub(count);
        self.forget_closed_connections();
        // A read is carried by a write made during its own request: writes that ended before the
        // oldest request still held began are never needed again.
        let oldest = self.requests.iter().filter_map(|r| r.start_ns).min().unwrap_or(u64::MAX);
        for state in self.sides.values_mut() {
            state.writes.forget_before(oldest);
        }
    }

    /// Forgets what is kept per connection (offsets, writes, the open call, MSS, RTT, how far
    /// its server has got) for the closed connections whose requests are all retired: a run that
    /// opens a connection per request holds the state of the connections still in use, not of
    /// every connection it ever made. The request a side closed the connection in must be
    /// retired too, not only the requests held: the server's close can arrive before the
    /// client's start of that request (each side's events come in batches of their own), and
    /// forgetting then would lose what the request's settlement waits for. An event that comes
    /// for a forgotten connection later starts its state afresh.
    fn forget_closed_connections(&mut self) {
        if self.closed.is_empty() {
            return;
        }
        // Both sets are kept between calls, emptied: this runs at every retirement, and
        // allocating them each time was a tenth of reading a reconnecting run.
        let mut in_use = std::mem::take(&mut self.in_use);
        in_use.clear();
        in_use.extend(self.requests.iter().filter_map(|r| r.conn));
        let mut forgotten = std::mem::take(&mut self.forgotten);
        forgotten.clear();
        let base = self.base;
        self.closed.retain(|conn, latest| {
            let keep = in_use.contains(conn) || *latest >= base;
            if !keep {
                forgotten.push(*conn);
            }
            keep
        });
        for &conn in &forgotten {
            for side in [Side::Client, Side::Server] {
                let forgotten = self.sides.remove(&(conn, side));
                if self.spare_sides.len() < MAX_SPARE_SIDES {
                    self.spare_sides.extend(forgotten.and_then(SideState::emptied));
                }
            }
            if let Some(settlement) = &mut self.settlement {
                settlement.forget(conn);
            }
        }
        (self.in_use, self.forgotten) = (in_use, forgotten);
    }

    /// The reads of one request held longer than [`STALL_THRESHOLD_NS`] (what
    /// [`Summary::stalled_reads`] counts), as the analysis knows them now.
    pub fn stalled_reads_of(&self, view: &RequestView) -> u32 {
        let Some(conn) = view.conn else { return 0 };
        view.spans().filter(|span| self.stall_ns(conn, span).is_some()).count() as u32
    }

    /// Puts the latencies recorded since the last question in order now if there are many
    /// ([`SortedMultiset::settle_if_many`]), so that the next summary has few to merge.
    pub fn settle_latencies(&self) {
        self.latencies.settle_if_many();
    }

    /// Puts every latency recorded since the last question in order now.
    pub fn order_latencies(&self) {
        self.latencies.settle();
    }

    /// Every completed request's latency (retired ones included), shortest first.
    pub fn latencies_ns(&self) -> Vec<u64> {
        self.latencies.to_vec()
    }

    /// Every completed request's latency (retired ones included), in order: for percentiles
    /// without copying them.
    pub fn latencies(&self) -> &SortedMultiset {
        &self.latencies
    }

    /// The headline numbers. The latencies are ordered when first asked for since they last
    /// grew ([`SortedMultiset`]); the stalled reads are counted over every span held, O(spans).
    pub fn summary(&self) -> Summary {
        let stalled_reads = self.retired.stalled_reads
            + self.requests.iter().map(|view| self.stalled_reads_of(view)).sum::<u32>();
        self.summary_with_stalled_reads(stalled_reads)
    }

    /// [`RunAnalysis::summary`] with the stalled reads counted by the caller, who keeps them as
    /// requests settle (`attribution::Incremental`: the browser asks once per frame while a run
    /// streams in). Costs O(n / 256), three order statistics of the latencies, once the
    /// latencies that came since the last question are merged in.
    pub fn summary_with_stalled_reads(&self, stalled_reads: u32) -> Summary {
        let duration_s = match self.extremes() {
            (Some(start), Some(done)) => done.saturating_sub(start) as f64 / 1e9,
            _ => 0.0,
        };
        let requests = self.latencies.len() as u32;
        Summary {
            requests,
            duration_s,
            rps: if duration_s > 0.0 { f64::from(requests) / duration_s } else { 0.0 },
            p50_ms: ns_to_ms(self.latencies.percentile(50.0)),
            p99_ms: ns_to_ms(self.latencies.percentile(99.0)),
            max_ms: ns_to_ms(self.latencies.max().unwrap_or(0)),
            stalled_reads,
        }
    }
}

/// The request whose view (times, spans, TCP_INFO samples, segments) `event` may change when
/// pushed, if any: for callers that keep what they derived from settled requests and must know
/// when one changed after all (`attribution::Incremental`). Kept next to [`RunAnalysis::push`],
/// whose cases it follows: it may name a request an event turns out not to change (a done
/// without its start, a zero-byte read), never miss one that it does.
pub fn request_touched(event: &Event) -> Option<ReqId> {
    match &event.kind {
        EventKind::RequestStart
        | EventKind::RequestDone
        | EventKind::Connected
        | EventKind::WriteDone { .. }
        | EventKind::Segment(_)
        | EventKind::RunDelay { .. } => Some(event.req),
        EventKind::ReadDone { bytes } if *bytes > 0 => Some(event.req),
        EventKind::TcpInfo(info) if info.during_block => Some(event.req),
        // A zero-byte read is the peer closing (no span); a TCP_INFO sample at a syscall
        // changes the connection's MSS and RTT, not a request.
        EventKind::ReadDone { .. }
        | EventKind::TcpInfo(_)
        | EventKind::ConnectStart
        | EventKind::WriteStart { .. }
        | EventKind::ReadStart { .. }
        | EventKind::Accepted
        | EventKind::Closed
        | EventKind::SockOpt { .. }
        | EventKind::Buffers { .. }
        | EventKind::Link(_)
        | EventKind::ClockSync { .. }
        | EventKind::DelayedAck
        | EventKind::BlockedCall { .. } => None,
    }
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Random batches of a run's events, for the property tests of what is kept incrementally.
#[cfg(test)]
pub(crate) mod batches {
    use crate::event::{Event, EventKind};

    /// xorshift64*: deterministic, no dependency.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
        }
    }

    /// The thread that records an event at the probe: each side's syscalls, the TCP_INFO
    /// sampler's samples during blocked calls, the packet capture's segments (both sides).
    fn stream(event: &Event) -> usize {
        match &event.kind {
            EventKind::Segment(_) => 4,
            EventKind::TcpInfo(info) if info.during_block => 2 + event.side.index(),
            _ => event.side.index(),
        }
    }

    /// `events` as the browser may get them: every stream in its own order, the streams
    /// interleaved at random in chunks of 1 to `chunk` events, grouped into batches of 1 to 3
    /// chunks.
    pub fn random_batches(events: &[Event], seed: u64, chunk: usize) -> Vec<Vec<Event>> {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut streams: Vec<std::collections::VecDeque<Event>> = vec![Default::default(); 5];
        for event in events {
            streams[stream(event)].push_back(event.clone());
        }
        let mut batches = Vec::new();
        while streams.iter().any(|s| !s.is_empty()) {
            let mut batch = Vec::new();
            for _ in 0..=rng.below(3) {
                let open: Vec<usize> =
                    (0..streams.len()).filter(|&i| !streams[i].is_empty()).collect();
                let Some(&from) = open.get(rng.below(open.len())) else { break };
                let take = (1 + rng.below(chunk)).min(streams[from].len());
                batch.extend(streams[from].drain(..take));
            }
            batches.push(batch);
        }
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::batches::random_batches;
    use super::*;

    use crate::synthetic::{nagle_run, nagle_run_with_packets, Script, MS, US};

    #[test]
    fn a_request_is_retired_once_its_server_events_and_segments_are_in() {
        // The probe's threads hand their events over in batches: a server's can arrive long
        // after its client finished the requests they belong to, and the capture's segments
        // in between. Here every client event comes first.
        let events = nagle_run_with_packets(40, 44 * MS);
        let (client, others): (Vec<&Event>, Vec<&Event>) = events
            .iter()
            .partition(|e| e.side == Side::Client && !matches!(e.kind, EventKind::Segment(_)));
        let late: Vec<Event> = client.into_iter().chain(others).cloned().collect();
        let mut whole = RunAnalysis::new();
        whole.push_all(&events);
        assert_eq!(whole.summary().stalled_reads, 78, "two a request but the first");

        let retire_in_chunks = |mut rolling: RunAnalysis| {
            let mut folded = Vec::new();
            for chunk in late.chunks(16) {
                rolling.push_all(chunk);
                rolling.retire(2, |_, req, view| folded.push((req, view.clone())));
            }
            (rolling, folded)
        };
        // Retired as soon as finished, the server's reads and the segments are lost.
        let (hasty, _) = retire_in_chunks(RunAnalysis::new());
        assert!(hasty.ignored_events > 100, "{}", hasty.ignored_events);
        assert!(hasty.summary().stalled_reads < 78);

        let mut settling = RunAnalysis::new();
        settling.retire_when_settled(true);
        let (settled, folded) = retire_in_chunks(settling);
        assert_eq!(settled.ignored_events, 0);
        assert!(
            folded.len() >= 30,
            "requests were retired as their events came in: {}",
            folded.len()
        );
        assert_eq!(settled.summary(), whole.summary());
        // The same spans and segments as with every event in order (spans in arrival order).
        let content = |view: &RequestView| {
            let mut spans: Vec<Span> = view.spans().collect();
            spans.sort_by_key(|s| (s.start_ns, s.side == Side::Server));
            (view.conn, view.start_ns, view.done_ns, spans, view.segments().to_vec())
        };
        let held = settled.requests().iter().enumerate();
        let kept = held.map(|(i, view)| (ReqId(settled.first_request() + i as u32), view.clone()));
        for (req, view) in folded.into_iter().chain(kept) {
            assert_eq!(content(&view), content(&whole.requests()[req.0 as usize]), "{req:?}");
        }
    }

    /// A run read from its 60th request, the events of earlier ones left out (a file's blocks
    /// read from the one that holds it): those requests' times, spans and stalls are the whole
    /// run's, though its byte offsets count from there.
    #[test]
    fn a_run_read_from_its_middle_holds_those_requests_as_the_whole_does() {
        let events = nagle_run(100, 44 * MS);
        let mut whole = RunAnalysis::new();
        whole.push_all(&events);
        let mut middle = RunAnalysis::new();
        middle.start_at(60);
        middle.push_all(events.iter().filter(|event| event.req.0 >= 60));
        assert_eq!((middle.first_request(), middle.requests().len()), (60, 40));
        assert_eq!(middle.ignored_events, 0);
        let stalls = |analysis: &RunAnalysis, req: u32| {
            let view = &analysis.requests()[(req - analysis.first_request()) as usize];
            let stalls = crate::attribution::attribute_request(analysis, ReqId(req), view, None);
            let waits: Vec<_> = stalls.iter().map(|s| (s.class, s.side, s.wait_ns)).collect();
            let spans: Vec<_> =
                view.spans().map(|s| (s.side, s.kind, s.start_ns, s.end_ns, s.bytes)).collect();
            (view.start_ns, view.done_ns, spans, waits)
        };
        for req in 60..100 {
            assert_eq!(stalls(&middle, req), stalls(&whole, req), "request {req}");
        }
        assert!(!stalls(&middle, 70).3.is_empty(), "a stalled request of the middle");
        assert_eq!(middle.summary().requests, 40);
        // Once requests are held, where it starts stays.
        middle.start_at(10);
        assert_eq!(middle.first_request(), 60);
    }

    #[test]
    fn nagle_run_counts_one_stall_per_direction_per_request() {
        // The first request on a connection is quick-ACKed; later ones stall 44 ms.
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&nagle_run(10, 44 * MS));
        let summary = analysis.summary();
        assert_eq!(summary.requests, 10);
        assert_eq!(summary.stalled_reads, 18, "two per stalled request, none in the first");
        assert!((88.0..89.0).contains(&summary.p50_ms), "{}", summary.p50_ms);
        assert!(summary.rps > 10.0 && summary.rps < 13.0, "{}", summary.rps);

        // The stall is the body read, held ~44 ms after the peer wrote it.
        let view = &analysis.requests()[3];
        let conn = view.conn.unwrap();
        let stalls: Vec<(Side, u64)> =
            view.spans().filter_map(|s| Some((s.side, analysis.stall_ns(conn, &s)?))).collect();
        assert_eq!(stalls.len(), 2);
        assert!(stalls.iter().all(|&(_, held)| (43 * MS..45 * MS).contains(&held)));
        assert!(stalls.iter().any(|&(side, _)| side == Side::Server));
        assert!(stalls.iter().any(|&(side, _)| side == Side::Client));
    }

    #[test]
    fn a_read_waiting_for_the_peer_to_write_is_not_a_stall() {
        let mut script = Script::default();
        script.exchange(0, 0, 0, 50 * US);
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&script.events);
        let view = &analysis.requests()[0];
        let client_len_read = view
            .spans()
            .find(|s| s.side == Side::Client && s.kind == SpanKind::Read && s.bytes == 4)
            .unwrap();
        let held = analysis.held_ns(ConnId(0), &client_len_read).unwrap();
        assert!(held < 20 * US, "held {held} ns");
        assert_eq!(analysis.summary().stalled_reads, 0);
    }

    #[test]
    fn batches_in_any_order_give_the_same_answer() {
        let mut script = Script::default();
        let mut t = 0;
        for req in 0..4 {
            t = script.exchange(req, t, t, 44 * MS);
        }
        // Server events first, client events later: as the probe's threads may deliver them.
        let (server, client): (Vec<Event>, Vec<Event>) =
            script.events.iter().cloned().partition(|e| e.side == Side::Server);
        let mut split = RunAnalysis::new();
        split.push_all(&server);
        split.push_all(&client);
        let mut whole = RunAnalysis::new();
        whole.push_all(&script.events);
        assert_eq!(split.summary(), whole.summary());
        assert_eq!(whole.summary().stalled_reads, 8);
    }

    #[test]
    fn unfinished_and_hostile_input_is_bounded() {
        let mut analysis = RunAnalysis::new();
        let far = Event {
            at_ns: 1,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(u32::MAX),
            kind: EventKind::RequestStart,
        };
        analysis.push(&far);
        assert_eq!(analysis.ignored_events, 1);
        assert!(analysis.requests().is_empty());
        // A done without a start, and a request never finished, do not count.
        let stray = Event { kind: EventKind::ReadDone { bytes: 9 }, req: ReqId(0), ..far };
        analysis.push(&stray);
        let start = Event { req: ReqId(1), ..far };
        analysis.push(&start);
        let summary = analysis.summary();
        assert_eq!(summary.requests, 0);
        assert_eq!(summary.p99_ms, 0.0);
    }

    #[test]
    fn retiring_requests_keeps_the_summary_and_frees_their_spans() {
        let events = nagle_run(100, 44 * MS);
        let mut whole = RunAnalysis::new();
        whole.push_all(&events);
        let mut rolling = RunAnalysis::new();
        let mut folded = Vec::new();
        for chunk in events.chunks(50) {
            rolling.push_all(chunk);
            rolling.retire(10, |_, req, view| folded.push((req, view.clone())));
        }
        // Views of retired requests are reused: every one, handed over or kept, is what the
        // analysis that retired nothing has for that request, nothing carried over.
        let held = rolling.requests().iter().enumerate();
        let kept = held.map(|(i, view)| (ReqId(rolling.first_request() + i as u32), view.clone()));
        for (req, view) in folded.iter().cloned().chain(kept) {
            assert_eq!(view, whole.requests()[req.0 as usize], "request {}", req.0);
        }
        assert_eq!(rolling.summary(), whole.summary());
        assert_eq!(rolling.latencies_ns(), whole.latencies_ns(), "retired latencies stay");
        assert_eq!(whole.latencies_ns().len(), 100);
        assert!(whole.latencies_ns().windows(2).all(|w| w[0] <= w[1]), "shortest first");
        assert!(rolling.requests().len() <= 11, "{} kept", rolling.requests().len());
        assert_eq!(rolling.first_request() as usize + rolling.requests().len(), 100);
        assert_eq!(folded.first().map(|f| f.0), Some(ReqId(0)));
        assert!(folded.iter().all(|(_, view)| view.span_count() == 8), "each handed over whole");
        assert!(folded.windows(2).all(|w| w[1].0 .0 == w[0].0 .0 + 1), "in order, once each");
    }

    /// The summary as it was computed before the latencies were kept in order: a scan of every
    /// request held and a sort (for analyses that retired nothing).
    fn summary_by_sorting(analysis: &RunAnalysis) -> Summary {
        let requests = analysis.requests();
        let mut latencies: Vec<u64> = requests.iter().filter_map(RequestView::latency_ns).collect();
        latencies.sort_unstable();
        let first_start = requests.iter().filter_map(|r| r.start_ns).min();
        let last_done = requests.iter().filter_map(|r| r.done_ns).max();
        let duration_s = match (first_start, last_done) {
            (Some(start), Some(done)) => done.saturating_sub(start) as f64 / 1e9,
            _ => 0.0,
        };
        let count = latencies.len() as u32;
        Summary {
            requests: count,
            duration_s,
            rps: if duration_s > 0.0 { f64::from(count) / duration_s } else { 0.0 },
            p50_ms: ns_to_ms(percentile(&latencies, 50.0)),
            p99_ms: ns_to_ms(percentile(&latencies, 99.0)),
            max_ms: ns_to_ms(latencies.last().copied().unwrap_or(0)),
            stalled_reads: requests.iter().map(|view| analysis.stalled_reads_of(view)).sum(),
        }
    }

    #[test]
    fn the_summary_equals_a_full_sort_at_every_step_of_any_split() {
        // Holds of different lengths, so that the percentiles move as requests complete.
        let mut script = Script::default();
        let mut t = 0;
        for req in 0..300 {
            let hold = [30 * US, 44 * MS, 12 * MS, 200 * MS, 3 * MS][req as usize % 5];
            t = script.exchange(req, t, t.saturating_sub(40 * US), hold + u64::from(req) * US)
                + 50 * US;
        }
        // A broken stream: repeated starts and dones, one replacing the run's first start and
        // one its last done, one moving a latency.
        let mut events = script.events.clone();
        let repeat = |e: &Event, req: u32, kind: &EventKind| e.req == ReqId(req) && e.kind == *kind;
        let first = events.iter().find(|e| repeat(e, 0, &EventKind::RequestStart)).cloned();
        let last = events.iter().rev().find(|e| repeat(e, 299, &EventKind::RequestDone)).cloned();
        let middle = events.iter().find(|e| repeat(e, 150, &EventKind::RequestDone)).cloned();
        for (event, shift) in [(first, 7 * MS), (last, 0), (middle, 5 * MS)] {
            let mut event = event.expect("in the script");
            event.at_ns = if shift == 0 { event.at_ns - MS } else { event.at_ns + shift };
            events.push(event);
        }
        for seed in 0..6 {
            let mut analysis = RunAnalysis::new();
            for batch in random_batches(&events, seed, 40) {
                analysis.push_all(&batch);
                assert_eq!(analysis.summary(), summary_by_sorting(&analysis), "seed {seed}");
                assert_eq!(analysis.latencies_ns().len(), analysis.latencies().len());
            }
            let summary = analysis.summary();
            assert_eq!(summary.requests, 300);
            assert!(summary.p99_ms > 200.0, "{summary:?}");
        }
    }

    /// Issue 11, defect 5: one event naming request 999,999 (594 bytes of file) made a million
    /// empty request views, 112 MB, per run.
    #[test]
    fn a_request_id_far_ahead_of_the_others_is_ignored_not_allocated() {
        let event = |req, kind| Event {
            at_ns: 1,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(req),
            kind,
        };
        let mut analysis = RunAnalysis::new();
        analysis.push(&event(0, EventKind::RequestStart));
        analysis.push(&event(999_999, EventKind::RequestStart));
        assert_eq!(analysis.requests().len(), 1, "no views for the requests in between");
        assert_eq!(analysis.ignored_events, 1);
        // A run's own ids stay close together: the next ones are kept.
        analysis.push(&event(1_000, EventKind::RequestStart));
        assert_eq!(analysis.requests().len(), 1_001);
    }
}
