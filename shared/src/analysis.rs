//! Pure analysis of a run's events: per-request spans, stalls and the summary.
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

use crate::event::{tcp_flags, ConnId, Event, EventKind, ReqId, Segment, Side};
use crate::side_map::SideMap;
use crate::spec::MAX_REQUESTS;

/// Reads held longer than this are stalls (the summary's "reads blocked longer than 10 ms").
/// Far above a loopback round trip (tens of microseconds), far below a delayed ACK (40 ms).
pub const STALL_THRESHOLD_NS: u64 = 10_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpanKind {
    Connect,
    Write,
    Read,
}

/// One syscall (or the connect handshake) from start to return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub side: Side,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u32,
    /// For reads and writes: the stream offset (bytes this side had read or written on the
    /// connection) just after this call.
    pub stream_end: u64,
}

impl Span {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// Everything recorded for one request, both sides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestView {
    pub conn: Option<ConnId>,
    /// When the client began the request (before connecting, if it connected first).
    pub start_ns: Option<u64>,
    /// When the client had read the whole response.
    pub done_ns: Option<u64>,
    pub spans: Vec<Span>,
    /// TCP_INFO read while a call of this request was blocked (the kernel's view of a wait).
    pub kernel: Vec<KernelSample>,
    /// Captured segments of this request's connection while it was under way, in the order
    /// they arrived (empty without packet capture).
    pub segments: Vec<SegmentSample>,
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
    /// The delayed-ACK timeout in use.
    pub ato_us: u32,
    pub snd_mss: u32,
    /// The window the peer advertises.
    pub snd_wnd: Option<u32>,
}

impl RequestView {
    pub fn latency_ns(&self) -> Option<u64> {
        Some(self.done_ns?.saturating_sub(self.start_ns?))
    }
}

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

/// Incremental analysis of one run.
#[derive(Debug, Default)]
pub struct RunAnalysis {
    requests: Vec<RequestView>,
    /// The open syscall of each side of each connection (each side is one thread, so at most one).
    open: SideMap<(u64, SpanKind)>,
    /// Bytes read / written so far, per connection and side.
    read_offset: SideMap<u64>,
    write_offset: SideMap<u64>,
    /// Per connection and writing side: (stream offset after the write, when it returned).
    writes: SideMap<Vec<(u64, u64)>>,
    /// The latest send MSS TCP_INFO reported, per connection and side.
    mss: SideMap<u32>,
    /// The smallest RTT TCP_INFO reported, per connection and side.
    min_rtt_us: SideMap<u32>,
    /// The one-way delay of the path (an emulated link's RTT / 2): bytes need it to cross, so a
    /// read held that long is not stalled.
    path_delay_ns: u64,
    /// Events that named a request id beyond [`MAX_REQUESTS`]; they are not analysed.
    pub ignored_events: u64,
    /// Requests below this id were retired ([`RunAnalysis::retire`]); `requests[0]` is this one.
    base: u32,
    retired: Retired,
}

/// What the summary still needs of retired requests.
#[derive(Debug, Default)]
struct Retired {
    latencies: Vec<u64>,
    first_start: Option<u64>,
    last_done: Option<u64>,
    stalled_reads: u32,
}

impl RunAnalysis {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push_all<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for event in events {
            self.push(event);
        }
    }

    pub fn push(&mut self, event: &Event) {
        let key = (event.conn, event.side);
        match event.kind {
            EventKind::RequestStart => {
                if let Some(view) = self.request_mut(event.req) {
                    view.start_ns = Some(event.at_ns);
                    view.conn = Some(event.conn);
                }
            }
            EventKind::RequestDone => {
                if let Some(view) = self.request_mut(event.req) {
                    view.done_ns = Some(event.at_ns);
                }
            }
            EventKind::ConnectStart => {
                self.open.insert(key, (event.at_ns, SpanKind::Connect));
            }
            EventKind::WriteStart { .. } => {
                self.open.insert(key, (event.at_ns, SpanKind::Write));
            }
            EventKind::ReadStart { .. } => {
                self.open.insert(key, (event.at_ns, SpanKind::Read));
            }
            EventKind::Connected => {
                if let Some((start_ns, SpanKind::Connect)) = self.open.remove(&key) {
                    self.add_span(event, SpanKind::Connect, start_ns, 0, 0);
                }
            }
            EventKind::WriteDone { bytes } => {
                if let Some((start_ns, SpanKind::Write)) = self.open.remove(&key) {
                    let offset = self.write_offset.get_or_insert_with(key, || 0);
                    *offset += u64::from(bytes);
                    let stream_end = *offset;
                    self.writes.get_or_insert_with(key, Vec::new).push((stream_end, event.at_ns));
                    self.add_span(event, SpanKind::Write, start_ns, bytes, stream_end);
                }
            }
            EventKind::ReadDone { bytes } => {
                if let Some((start_ns, SpanKind::Read)) = self.open.remove(&key) {
                    let offset = self.read_offset.get_or_insert_with(key, || 0);
                    *offset += u64::from(bytes);
                    let stream_end = *offset;
                    // A zero-byte read is the peer closing: connection life, not a request's.
                    if bytes > 0 {
                        self.add_span(event, SpanKind::Read, start_ns, bytes, stream_end);
                    }
                }
            }
            EventKind::TcpInfo(ref info) => {
                self.mss.insert(key, info.snd_mss);
                if let Some(rtt) = info.min_rtt_us.filter(|&rtt| rtt > 0) {
                    let known = self.min_rtt_us.get_or_insert_with(key, || rtt);
                    *known = (*known).min(rtt);
                }
                if info.during_block {
                    let sample = KernelSample {
                        side: event.side,
                        at_ns: event.at_ns,
                        notsent_bytes: info.notsent_bytes,
                        unacked: info.unacked,
                        ato_us: info.ato_us,
                        snd_mss: info.snd_mss,
                        snd_wnd: info.snd_wnd,
                    };
                    if let Some(view) = self.request_mut(event.req) {
                        view.kernel.push(sample);
                    }
                }
            }
            EventKind::Segment(ref segment) => {
                let sample = SegmentSample::new(event.side, event.at_ns, segment);
                if let Some(view) = self.request_mut(event.req) {
                    view.segments.push(sample);
                }
            }
            EventKind::Accepted
            | EventKind::Closed
            | EventKind::SockOpt { .. }
            | EventKind::Buffers { .. }
            | EventKind::Link(_) => {}
        }
    }

    fn request_mut(&mut self, req: ReqId) -> Option<&mut RequestView> {
        // Past the limit, or an event of a request already retired (it arrived very late).
        if req.0 >= MAX_REQUESTS || req.0 < self.base {
            self.ignored_events += 1;
            return None;
        }
        let index = (req.0 - self.base) as usize;
        if index >= self.requests.len() {
            self.requests.resize_with(index + 1, RequestView::default);
        }
        Some(&mut self.requests[index])
    }

    fn add_span(&mut self, done: &Event, kind: SpanKind, start_ns: u64, bytes: u32, end: u64) {
        let span =
            Span { side: done.side, kind, start_ns, end_ns: done.at_ns, bytes, stream_end: end };
        if let Some(view) = self.request_mut(done.req) {
            view.spans.push(span);
        }
    }

    /// The send MSS of a side of a connection, if TCP_INFO was sampled.
    pub fn snd_mss(&self, conn: ConnId, side: Side) -> Option<u32> {
        self.mss.get(&(conn, side)).copied().filter(|&mss| mss > 0)
    }

    /// The smallest RTT a side of a connection measured, if TCP_INFO was sampled.
    pub fn min_rtt_ns(&self, conn: ConnId, side: Side) -> Option<u64> {
        self.min_rtt_us.get(&(conn, side)).map(|&us| u64::from(us) * 1000)
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
        if span.kind != SpanKind::Read || span.bytes == 0 {
            return None;
        }
        let writes = self.writes.get(&(conn, span.side.peer()))?;
        // The first peer write whose end lies past the read's last byte carried that byte.
        let index = writes.partition_point(|&(end, _)| end < span.stream_end);
        let &(_, written_ns) = writes.get(index)?;
        Some(span.end_ns.saturating_sub(span.start_ns.max(written_ns)))
    }

    /// The stall of a read: how long it stayed blocked beyond the path's one-way delay after
    /// the peer had written its bytes, if that is longer than [`STALL_THRESHOLD_NS`].
    pub fn stall_ns(&self, conn: ConnId, span: &Span) -> Option<u64> {
        self.held_ns(conn, span)
            .map(|held| held.saturating_sub(self.path_delay_ns))
            .filter(|&excess| excess > STALL_THRESHOLD_NS)
    }

    /// The id of `requests()[0]`: 0 unless requests were retired.
    pub fn first_request(&self) -> u32 {
        self.base
    }

    /// Bounds memory on long runs: hands every finished request older than the newest `keep` to
    /// `fold` (with its id), keeps only what the summary needs of it, and forgets its spans. A
    /// late event for a retired request is ignored (counted in `ignored_events`); keep enough
    /// requests that the other side's batches have arrived (they trail by one exchange).
    pub fn retire(&mut self, keep: usize, mut fold: impl FnMut(&RunAnalysis, ReqId, &RequestView)) {
        let candidates = self.requests.len().saturating_sub(keep);
        let count = self.requests[..candidates].iter().take_while(|r| r.done_ns.is_some()).count();
        if count == 0 {
            return;
        }
        let mut retired = std::mem::take(&mut self.retired);
        for (offset, view) in self.requests[..count].iter().enumerate() {
            fold(self, ReqId(self.base + offset as u32), view);
            retired.latencies.extend(view.latency_ns());
            retired.first_start = min_some(retired.first_start, view.start_ns);
            retired.last_done = retired.last_done.max(view.done_ns);
            retired.stalled_reads += self.stalled_reads_of(view);
        }
        self.retired = retired;
        self.requests.drain(..count);
        self.base += count as u32;
        // A read is carried by a write made during its own request: writes that ended before the
        // oldest request still held began are never needed again.
        let oldest = self.requests.iter().filter_map(|r| r.start_ns).min().unwrap_or(u64::MAX);
        for writes in self.writes.values_mut() {
            let stale = writes.partition_point(|&(_, done_ns)| done_ns < oldest);
            writes.drain(..stale);
        }
    }

    fn stalled_reads_of(&self, view: &RequestView) -> u32 {
        let Some(conn) = view.conn else { return 0 };
        view.spans.iter().filter(|span| self.stall_ns(conn, span).is_some()).count() as u32
    }

    /// Every completed request's latency (retired ones included), shortest first.
    pub fn latencies_ns(&self) -> Vec<u64> {
        let mut latencies: Vec<u64> = self.retired.latencies.clone();
        latencies.extend(self.requests.iter().filter_map(RequestView::latency_ns));
        latencies.sort_unstable();
        latencies
    }

    pub fn summary(&self) -> Summary {
        let latencies = self.latencies_ns();
        let first_start = min_some(
            self.retired.first_start,
            self.requests.iter().filter_map(|r| r.start_ns).min(),
        );
        let last_done =
            self.retired.last_done.max(self.requests.iter().filter_map(|r| r.done_ns).max());
        let duration_s = match (first_start, last_done) {
            (Some(start), Some(done)) => done.saturating_sub(start) as f64 / 1e9,
            _ => 0.0,
        };
        let requests = latencies.len() as u32;
        let stalled_reads = self.retired.stalled_reads
            + self.requests.iter().map(|view| self.stalled_reads_of(view)).sum::<u32>();
        Summary {
            requests,
            duration_s,
            rps: if duration_s > 0.0 { f64::from(requests) / duration_s } else { 0.0 },
            p50_ms: ns_to_ms(percentile(&latencies, 50.0)),
            p99_ms: ns_to_ms(percentile(&latencies, 99.0)),
            max_ms: ns_to_ms(latencies.last().copied().unwrap_or(0)),
            stalled_reads,
        }
    }
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Nearest-rank percentile of sorted values; 0 when there are none.
pub fn percentile(sorted: &[u64], pct: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::synthetic::{nagle_run, Script, MS, US};

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
            view.spans.iter().filter_map(|s| Some((s.side, analysis.stall_ns(conn, s)?))).collect();
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
            .spans
            .iter()
            .find(|s| s.side == Side::Client && s.kind == SpanKind::Read && s.bytes == 4)
            .unwrap();
        let held = analysis.held_ns(ConnId(0), client_len_read).unwrap();
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
            rolling.retire(10, |_, req, view| folded.push((req, view.spans.len())));
        }
        assert_eq!(rolling.summary(), whole.summary());
        assert_eq!(rolling.latencies_ns(), whole.latencies_ns(), "retired latencies stay");
        assert_eq!(whole.latencies_ns().len(), 100);
        assert!(whole.latencies_ns().windows(2).all(|w| w[0] <= w[1]), "shortest first");
        assert!(rolling.requests().len() <= 11, "{} kept", rolling.requests().len());
        assert_eq!(rolling.first_request() as usize + rolling.requests().len(), 100);
        assert_eq!(folded.first().map(|f| f.0), Some(ReqId(0)));
        assert!(folded.iter().all(|&(_, spans)| spans == 8), "each handed over whole");
        assert!(folded.windows(2).all(|w| w[1].0 .0 == w[0].0 .0 + 1), "in order, once each");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<u64> = (1..=200).collect();
        assert_eq!(percentile(&values, 50.0), 100);
        assert_eq!(percentile(&values, 99.0), 198);
        assert_eq!(percentile(&values, 100.0), 200);
        assert_eq!(percentile(&[7], 50.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
