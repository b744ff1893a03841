//! Analysis of a bulk transfer: goodput over time, the buffers the kernel set, the windows.

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventKind, Side};

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
            }
            _ => {}
        }
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
        }
    }
}

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
}
