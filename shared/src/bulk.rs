//! Analysis of a bulk transfer: goodput over time, the buffers the kernel set, the windows.
//!
//! Goodput over time is kept two ways: per 100 ms from the start for the summary
//! ([`BulkSummary::goodput_series_mbps`]), and as the bytes the server had read by each of its
//! reads, for a chart over any time range ([`goodput_over_time`], which adds the windows from
//! the run's [`KernelTracks`]). The second is bounded like a kernel track (see `kernel.rs`): at
//! most [`MAX_READ_SAMPLES`] reads of 16 bytes each (3.2 MB); when full, every other read is
//! forgotten and only every second one kept from then on. Each kept read carries the total
//! read by then, so no byte is lost by thinning: the bytes of forgotten reads are counted in
//! the bucket of the next kept one.

use serde::{Deserialize, Serialize};

use crate::event::{ConnId, Event, EventKind, Side};
use crate::kernel::{keep_every_other, Field, KernelTracks, Place, Thinning, Window};

/// Goodput is reported per interval of this length.
pub const GOODPUT_INTERVAL_NS: u64 = 100_000_000;

/// The headline numbers of a bulk run. Field names are part of the CLI's JSON interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BulkSummary {
    /// Bytes the server read.
    pub bytes: u64,
    /// From the client's start to the server's last read.
    pub duration_s: f64,
    pub goodput_mbps: f64,
    /// Goodput per 100 ms, in Mbit/s, from the start.
    pub goodput_series_mbps: Vec<f64>,
    /// What getsockopt said each side's buffers were (Linux doubles what was asked).
    pub client_sndbuf_bytes: Option<u32>,
    pub server_rcvbuf_bytes: Option<u32>,
    /// The median window the server advertised (TCP_INFO rcv_wnd), if sampled.
    pub server_rcv_wnd_bytes: Option<u32>,
    /// The median send window the client saw (TCP_INFO snd_wnd), if sampled.
    pub client_snd_wnd_bytes: Option<u32>,
    /// The smallest RTT the client measured (TCP_INFO min_rtt), if sampled.
    pub min_rtt_us: Option<u32>,
    /// How long the client had data to send and the server's window would not take it
    /// (TCP_INFO `tcpi_rwnd_limited`, its newest sample), if sampled.
    #[serde(default)]
    pub client_rwnd_limited_ms: Option<u32>,
    /// Segments the client sent without data, less its handshake's two (SYN and ACK), by its
    /// TCP_INFO (`segs_out - data_segs_out`, the most a sample showed while bytes waited to be
    /// sent). A bulk client receives no data and so has no ACK to send: what else it sends
    /// empty while it has bytes to send are its probes of a closed window (RFC 9293's
    /// zero-window probes, Linux's persist timer).
    #[serde(default)]
    pub zero_window_probes: Option<u32>,
}

#[derive(Debug, Default)]
pub struct BulkAnalysis {
    start_ns: Option<u64>,
    last_read_ns: u64,
    bytes: u64,
    per_interval: Vec<u64>,
    client_sndbuf: Option<u32>,
    server_rcvbuf: Option<u32>,
    rcv_wnd: Vec<u32>,
    snd_wnd: Vec<u32>,
    min_rtt_us: Option<u32>,
    client_rwnd_limited_us: Option<u64>,
    /// The most segments without data the client had sent, by any of its samples.
    client_empty_segments: Option<u32>,
    /// The connection the server read from (a bulk run has one).
    conn: Option<ConnId>,
    reads: Reads,
}

/// At most this many reads are kept for [`goodput_over_time`] (see the module docs).
pub const MAX_READ_SAMPLES: usize = 200_000;

/// The bytes the server had read by each kept read: a step function of time, thinned.
#[derive(Debug)]
struct Reads {
    at_ns: Vec<u64>,
    /// Bytes read up to and including the read at the same index.
    total: Vec<u64>,
    thinning: Thinning,
    cap: usize,
}

impl Default for Reads {
    fn default() -> Self {
        Reads::with_cap(MAX_READ_SAMPLES)
    }
}

impl Reads {
    fn with_cap(cap: usize) -> Reads {
        Reads { at_ns: Vec::new(), total: Vec::new(), thinning: Thinning::new(1), cap: cap.max(4) }
    }

    fn push(&mut self, at_ns: u64, total: u64) {
        // The server reads on one thread, in order; a stamp out of order is held at the newest
        // so the series stays sorted (its total is right either way).
        let at_ns = self.at_ns.last().map_or(at_ns, |&newest| at_ns.max(newest));
        match self.thinning.place(false, self.at_ns.is_empty()) {
            Place::ReplaceLast => {
                let last = self.at_ns.len() - 1;
                self.at_ns[last] = at_ns;
                self.total[last] = total;
            }
            Place::Append | Place::Insert => {
                self.at_ns.push(at_ns);
                self.total.push(total);
            }
            Place::Drop => {}
        }
        if self.at_ns.len() >= self.cap {
            let before = self.at_ns.len();
            keep_every_other(&mut self.at_ns);
            keep_every_other(&mut self.total);
            self.thinning.halved(before);
        }
    }

    /// Bytes read before `at_ns` (by the kept reads' totals).
    fn before(&self, at_ns: u64) -> u64 {
        let index = self.at_ns.partition_point(|&t| t < at_ns);
        index.checked_sub(1).map_or(0, |i| self.total[i])
    }
}

/// Goodput over a time range in equal buckets, with the windows over the same buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct GoodputSeries {
    pub from_ns: u64,
    pub to_ns: u64,
    /// Per bucket: bytes the server read in it, in Mbit/s of the bucket's length.
    pub mbps: Vec<f64>,
    /// The window the server advertised (its TCP_INFO `rcv_wnd`); `None` if never reported.
    pub server_rcv_wnd: Option<Window>,
    /// The window the client was sending into (its TCP_INFO `snd_wnd`).
    pub client_snd_wnd: Option<Window>,
    /// Per bucket, the most the window allows: the server's advertised window over the client's
    /// smoothed RTT, in Mbit/s, as in effect at the bucket's end (story 2's "throughput is at
    /// most window / RTT"). `None` where either is not known yet.
    pub window_over_rtt_mbps: Vec<Option<f64>>,
}

/// The bulk run's goodput over `from_ns ..= to_ns` (run clock) in `buckets` equal buckets (at
/// least one), and the windows from `kernel` over the same buckets: story 2 over time.
pub fn goodput_over_time(
    bulk: &BulkAnalysis,
    kernel: &KernelTracks,
    from_ns: u64,
    to_ns: u64,
    buckets: usize,
) -> GoodputSeries {
    let count = buckets.max(1);
    let to_ns = to_ns.max(from_ns);
    let span = u128::from((to_ns - from_ns).max(1));
    // Bucket i covers edge(i) .. edge(i + 1); the last one includes `to_ns`.
    let edge = |i: usize| from_ns + (span * i as u128 / count as u128) as u64;
    let mbps = (0..count)
        .map(|i| {
            let (start, end) = (edge(i), edge(i + 1));
            let upto = if i + 1 == count { end.saturating_add(1) } else { end };
            let bytes = bulk.reads.before(upto) - bulk.reads.before(start);
            let ns = end - start;
            if ns == 0 {
                0.0
            } else {
                // bytes * 8 bits / ns = Gbit/s; times 1000: Mbit/s.
                bytes as f64 * 8.0 * 1000.0 / ns as f64
            }
        })
        .collect();
    let window = |side: Side, field: Field| {
        let track = match bulk.conn {
            Some(conn) => kernel.track(conn, side),
            None => kernel.tracks().iter().find(|track| track.side == side),
        }?;
        track.reports(field).then(|| track.window(field, from_ns, to_ns, count))
    };
    let server_rcv_wnd = window(Side::Server, Field::RcvWnd);
    let rtt_us = window(Side::Client, Field::Rtt);
    let window_over_rtt_mbps = match (&server_rcv_wnd, &rtt_us) {
        (Some(wnd), Some(rtt)) => wnd
            .held()
            .into_iter()
            .zip(rtt.held())
            .map(|(wnd, rtt)| match (wnd, rtt) {
                // bytes * 8 / us = Mbit/s.
                (Some(wnd), Some(rtt)) if rtt > 0 => Some(f64::from(wnd) * 8.0 / f64::from(rtt)),
                _ => None,
            })
            .collect(),
        _ => vec![None; count],
    };
    GoodputSeries {
        from_ns,
        to_ns,
        mbps,
        server_rcv_wnd,
        client_snd_wnd: window(Side::Client, Field::SndWnd),
        window_over_rtt_mbps,
    }
}

/// At most this many intervals are kept (an hour at 100 ms): bounds memory for hostile input.
const MAX_INTERVALS: usize = 36_000;

impl BulkAnalysis {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push_all<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for event in events {
            self.push(event);
        }
    }

    pub fn push(&mut self, event: &Event) {
        match (&event.kind, event.side) {
            (EventKind::RequestStart, Side::Client) => self.start_ns = Some(event.at_ns),
            (EventKind::ReadDone { bytes }, Side::Server) if *bytes > 0 => {
                self.bytes += u64::from(*bytes);
                self.conn.get_or_insert(event.conn);
                self.reads.push(event.at_ns, self.bytes);
                self.last_read_ns = self.last_read_ns.max(event.at_ns);
                let since = event.at_ns.saturating_sub(self.start_ns.unwrap_or(0));
                let interval = (since / GOODPUT_INTERVAL_NS) as usize;
                if interval < MAX_INTERVALS {
                    if interval >= self.per_interval.len() {
                        self.per_interval.resize(interval + 1, 0);
                    }
                    self.per_interval[interval] += u64::from(*bytes);
                }
            }
            (EventKind::Buffers { sndbuf_bytes, .. }, Side::Client) => {
                self.client_sndbuf = Some(*sndbuf_bytes)
            }
            (EventKind::Buffers { rcvbuf_bytes, .. }, Side::Server) => {
                self.server_rcvbuf = Some(*rcvbuf_bytes)
            }
            (EventKind::TcpInfo(info), Side::Server) => {
                if let Some(wnd) = info.rcv_wnd {
                    self.rcv_wnd.push(wnd);
                }
            }
            (EventKind::TcpInfo(info), Side::Client) => {
                if let Some(wnd) = info.snd_wnd {
                    self.snd_wnd.push(wnd);
                }
                if let Some(rtt) = info.min_rtt_us.filter(|&rtt| rtt > 0) {
                    self.min_rtt_us = Some(self.min_rtt_us.map_or(rtt, |m| m.min(rtt)));
                }
                // Both only grow over a connection's life: the most is the newest.
                if let Some(limited) = info.rwnd_limited_us {
                    self.client_rwnd_limited_us =
                        Some(self.client_rwnd_limited_us.map_or(limited, |m| m.max(limited)));
                }
                // Counted only while bytes wait to be sent, as probes are: the client's FIN
                // goes out alone only once nothing is left to send, and is not a probe.
                if let (Some(segs), Some(data)) = (info.segs_out, info.data_segs_out) {
                    let empty = match info.notsent_bytes {
                        Some(waiting) if waiting > 0 => segs.saturating_sub(data),
                        _ => HANDSHAKE_EMPTY_SEGMENTS,
                    };
                    self.client_empty_segments =
                        Some(self.client_empty_segments.map_or(empty, |m| m.max(empty)));
                }
            }
            _ => {}
        }
    }

    /// Bytes the server read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// When the client started (0 until it has) and when the server last read, run clock.
    pub fn span_ns(&self) -> (u64, u64) {
        let start = self.start_ns.unwrap_or(0);
        (start, self.last_read_ns.max(start))
    }

    pub fn summary(&self) -> BulkSummary {
        let duration_ns = self.last_read_ns.saturating_sub(self.start_ns.unwrap_or(0));
        let duration_s = duration_ns as f64 / 1e9;
        let mbps = |bytes: u64, secs: f64| {
            if secs > 0.0 {
                bytes as f64 * 8.0 / secs / 1e6
            } else {
                0.0
            }
        };
        let interval_s = GOODPUT_INTERVAL_NS as f64 / 1e9;
        BulkSummary {
            bytes: self.bytes,
            duration_s,
            goodput_mbps: mbps(self.bytes, duration_s),
            goodput_series_mbps: self.per_interval.iter().map(|&b| mbps(b, interval_s)).collect(),
            client_sndbuf_bytes: self.client_sndbuf,
            server_rcvbuf_bytes: self.server_rcvbuf,
            server_rcv_wnd_bytes: median(&self.rcv_wnd),
            client_snd_wnd_bytes: median(&self.snd_wnd),
            min_rtt_us: self.min_rtt_us,
            client_rwnd_limited_ms: self
                .client_rwnd_limited_us
                .map(|us| u32::try_from(us / 1000).unwrap_or(u32::MAX)),
            zero_window_probes: self
                .client_empty_segments
                .map(|empty| empty.saturating_sub(HANDSHAKE_EMPTY_SEGMENTS)),
        }
    }
}

impl BulkSummary {
    /// How long the client waited for the server's window, and its zero-window probes, each
    /// only if there was any: what the summaries say of a window that closed (one that never
    /// did is not news).
    pub fn closed_window(&self) -> (Option<u32>, Option<u32>) {
        let some = |value: Option<u32>| value.filter(|&value| value > 0);
        (some(self.client_rwnd_limited_ms), some(self.zero_window_probes))
    }
}

/// A client's segments without data in its handshake: its SYN and the ACK of the server's.
const HANDSHAKE_EMPTY_SEGMENTS: u32 = 2;

fn median(values: &[u32]) -> Option<u32> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len().checked_sub(1)? / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ConnId, ReqId};

    fn ev(at_ns: u64, side: Side, kind: EventKind) -> Event {
        Event { at_ns, side, conn: ConnId(0), req: ReqId(0), kind }
    }

    #[test]
    fn goodput_comes_from_what_the_server_read() {
        let mut analysis = BulkAnalysis::new();
        analysis.push(&ev(0, Side::Client, EventKind::RequestStart));
        // 1.25 MB per 100 ms for a second: 100 Mbit/s.
        for i in 1..=10 {
            analysis.push(&ev(
                i * 100_000_000 - 1,
                Side::Server,
                EventKind::ReadDone { bytes: 1_250_000 },
            ));
        }
        analysis.push(&ev(
            5,
            Side::Server,
            EventKind::Buffers { sndbuf_bytes: 1, rcvbuf_bytes: 131072 },
        ));
        let summary = analysis.summary();
        assert_eq!(summary.bytes, 12_500_000);
        assert!((summary.goodput_mbps - 100.0).abs() < 0.1, "{}", summary.goodput_mbps);
        assert_eq!(summary.goodput_series_mbps.len(), 10);
        assert!(summary.goodput_series_mbps.iter().all(|&m| (m - 100.0).abs() < 0.1));
        assert_eq!(summary.server_rcvbuf_bytes, Some(131072));
        assert_eq!(summary.server_rcv_wnd_bytes, None, "no TCP_INFO samples, no window");
    }

    fn window_sample(at_ns: u64, side: Side, wnd: u32) -> Event {
        let info = crate::event::TcpInfoSample {
            rcv_wnd: Some(wnd),
            snd_wnd: Some(wnd + 1),
            rtt_us: 20_000,
            ..crate::event::TcpInfoSample::default()
        };
        ev(at_ns, side, EventKind::TcpInfo(Box::new(info)))
    }

    #[test]
    fn goodput_over_time_follows_the_reads_with_the_window_over_the_same_buckets() {
        let (mut analysis, mut kernel) = (BulkAnalysis::new(), KernelTracks::new());
        let mut push = |event: Event| {
            analysis.push(&event);
            kernel.push(&event);
        };
        push(ev(0, Side::Client, EventKind::RequestStart));
        // 125 kB every 10 ms for 100 ms (100 Mbit/s), then 12.5 kB every 10 ms (10 Mbit/s)
        // after the server's window shrank from 256 KiB to 16 KiB.
        for i in 1..=20u64 {
            let bytes = if i <= 10 { 125_000 } else { 12_500 };
            push(ev(i * 10_000_000 - 1, Side::Server, EventKind::ReadDone { bytes }));
        }
        push(window_sample(5_000_000, Side::Server, 262_144));
        push(window_sample(105_000_000, Side::Server, 16_384));
        push(window_sample(5_000_000, Side::Client, 262_144));
        assert_eq!(analysis.span_ns(), (0, 200_000_000 - 1));

        let series = goodput_over_time(&analysis, &kernel, 0, 200_000_000, 2);
        assert_eq!(series.mbps.len(), 2);
        assert!((series.mbps[0] - 100.0).abs() < 1e-3, "{:?}", series.mbps);
        assert!((series.mbps[1] - 10.0).abs() < 1e-3, "{:?}", series.mbps);
        let server = series.server_rcv_wnd.expect("the server reported rcv_wnd");
        assert_eq!(server.held(), [Some(262_144), Some(16_384)]);
        let client = series.client_snd_wnd.expect("the client reported snd_wnd");
        assert_eq!(client.held(), [Some(262_145), Some(262_145)], "held from its one sample");
        // The ceiling: the server's window over the client's 20 ms RTT, bucket by bucket.
        let ceiling: Vec<f64> = series.window_over_rtt_mbps.iter().map(|m| m.unwrap()).collect();
        assert!((ceiling[0] - 262_144.0 * 8.0 / 20_000.0).abs() < 1e-9, "{ceiling:?}");
        assert!((ceiling[1] - 16_384.0 * 8.0 / 20_000.0).abs() < 1e-9, "{ceiling:?}");

        // Finer buckets than the reads: a bucket without a read is 0, and the bytes add up.
        let fine = goodput_over_time(&analysis, &kernel, 0, 200_000_000, 400);
        assert_eq!(fine.mbps.iter().filter(|&&m| m > 0.0).count(), 20);
        let bucket_s = 0.2 / 400.0;
        let bytes: f64 = fine.mbps.iter().map(|m| m * 1e6 * bucket_s / 8.0).sum();
        assert!((bytes - analysis.bytes() as f64).abs() < 1.0, "{bytes}");
    }

    #[test]
    fn goodput_without_tcp_info_has_no_window() {
        let mut analysis = BulkAnalysis::new();
        analysis.push(&ev(0, Side::Client, EventKind::RequestStart));
        analysis.push(&ev(MS_100, Side::Server, EventKind::ReadDone { bytes: 1_250_000 }));
        let series = goodput_over_time(&analysis, &KernelTracks::new(), 0, MS_100, 1);
        assert!((series.mbps[0] - 100.0).abs() < 1e-6, "{:?}", series.mbps);
        assert_eq!((series.server_rcv_wnd, series.client_snd_wnd), (None, None));
        assert_eq!(series.window_over_rtt_mbps, [None], "no window, no ceiling");
        let empty = goodput_over_time(&BulkAnalysis::new(), &KernelTracks::new(), 0, 0, 0);
        assert_eq!(empty.mbps, [0.0], "one bucket at least, nothing read");
    }

    const MS_100: u64 = 100_000_000;

    #[test]
    fn thinned_reads_lose_no_byte() {
        let mut analysis = BulkAnalysis { reads: Reads::with_cap(64), ..BulkAnalysis::default() };
        analysis.push(&ev(0, Side::Client, EventKind::RequestStart));
        // 10,000 reads of 1000 bytes, one per 10 us: 100 ms at 800 Mbit/s.
        for i in 1..=10_000u64 {
            analysis.push(&ev(i * 10_000, Side::Server, EventKind::ReadDone { bytes: 1000 }));
        }
        assert!(analysis.reads.at_ns.len() < 64, "{}", analysis.reads.at_ns.len());
        assert_eq!(analysis.reads.at_ns.last(), Some(&100_000_000), "the newest read is kept");
        let series = goodput_over_time(&analysis, &KernelTracks::new(), 0, MS_100, 4);
        let total: f64 = series.mbps.iter().map(|m| m * 1e6 * 0.025 / 8.0).sum();
        assert!((total - 10_000_000.0).abs() < 1.0, "{total}");
        // Thinned, the reads are still spread over the whole run: each quarter near 800.
        assert!(series.mbps.iter().all(|&m| (m - 800.0).abs() < 800.0 * 0.2), "{:?}", series.mbps);
    }
}
