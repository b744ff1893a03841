//! The run-clock view: one lane per connection and side, every syscall and every blocked
//! interval on the run's one clock. Pure, no DOM.
//!
//! A lane of a million requests holds millions of calls; at most two per pixel are drawn, the
//! greatest of each bucket by [`lod`](super::lod)'s key, so a stall stays visible at any zoom.

use std::collections::HashMap;

use ackscope_shared::analysis::{RunAnalysis, Span, SpanKind};
use ackscope_shared::{ConnId, Side};

use super::layout::{stalls_of_spans, Lane as RowLane, Mark};
use super::lod::{key, pick, MaxTree, Priority};
use super::scale::Scale;
use crate::state::Attribution;

/// Height of one lane of the run-clock view, gap included.
pub const LANE_ROW: f64 = 18.0;
const BAR_HEIGHT: f64 = 10.0;
const BAR_TOP: f64 = 4.0;
/// Buckets per pixel: two, as Perfetto asks for, so neighbouring marks stay apart.
const BUCKETS_PER_PX: f64 = 2.0;

/// Every call of one side of one connection, sorted by start.
#[derive(Debug)]
pub struct ClockLane {
    pub conn: ConnId,
    pub side: Side,
    starts: Vec<u64>,
    ends: Vec<u64>,
    marks: Vec<Mark>,
    reqs: Vec<u32>,
    tree: MaxTree,
}

impl ClockLane {
    pub fn label(&self) -> String {
        format!("conn {} {}", self.conn.0, self.side.name())
    }

    /// The label, with how far a remote server's times may be off on this run's clock.
    pub fn label_with(&self, server_clock_uncertainty_ns: Option<u64>) -> String {
        match (self.side, server_clock_uncertainty_ns) {
            (Side::Server, Some(ns)) => format!("{} ±{:.0} µs", self.label(), ns as f64 / 1e3),
            _ => self.label(),
        }
    }

    pub fn calls(&self) -> usize {
        self.starts.len()
    }

    /// How many of its calls are drawn as stalls.
    pub fn stalled(&self) -> usize {
        self.marks.iter().filter(|&&mark| mark == Mark::Stalled).count()
    }
}

/// One call while lanes are gathered: start, end, mark, request, LOD key.
type Call = (u64, u64, Mark, u32, u64);

/// The lanes of a run and the extent of its clock.
#[derive(Debug, Default)]
pub struct Lanes {
    pub lanes: Vec<ClockLane>,
    /// The last moment any call ended (the run clock starts at 0).
    pub end_ns: u64,
    /// A run against a remote server: how far its side's times may be off on this clock.
    pub server_clock_uncertainty_ns: Option<u64>,
}

impl Lanes {
    pub fn of(analysis: &RunAnalysis, why: &Attribution) -> Lanes {
        let first = analysis.first_request();
        let mut calls: HashMap<(ConnId, Side), Vec<Call>> = HashMap::new();
        let mut end_ns = 0;
        let mut spans: Vec<Span> = Vec::new();
        for (index, view) in analysis.requests().iter().enumerate() {
            let Some(conn) = view.conn else { continue };
            let req = first + index as u32;
            // The attribution names the waits; each is found by the call it is (most
            // requests have none: nothing to look up, nothing allocated).
            let stalls = why.of_request(req);
            spans.clear();
            spans.extend(view.spans());
            let (stall_of, taken) = if stalls.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                stalls_of_spans(&spans, stalls)
            };
            // A watch's stall no call is: the wait the packets show, on the reader's lane.
            for (stall, _) in stalls.iter().zip(&taken).filter(|(_, taken)| !**taken) {
                let rank = key(Priority::Stalled, stall.wait_ns);
                let call = (stall.start_ns, stall.end_ns, Mark::Stalled, req, rank);
                calls.entry((conn, stall.side)).or_default().push(call);
                end_ns = end_ns.max(stall.end_ns);
            }
            for (i, &span) in spans.iter().enumerate() {
                let stall = stall_of.get(i).copied().flatten();
                let priority = stall.map_or(Priority::Call, |index| Priority::of(&stalls[index]));
                let mark = match (priority, span.kind) {
                    (Priority::Stalled, _) => Mark::Stalled,
                    (Priority::Waited, _) => Mark::Waited,
                    (Priority::Call, SpanKind::Connect) => Mark::Connect,
                    (Priority::Call, _) => Mark::Call(RowLane::of(&span)),
                };
                let rank = key(priority, span.duration_ns());
                calls.entry((conn, span.side)).or_default().push((
                    span.start_ns,
                    span.end_ns,
                    mark,
                    req,
                    rank,
                ));
                end_ns = end_ns.max(span.end_ns);
            }
        }
        let mut keys: Vec<(ConnId, Side)> = calls.keys().copied().collect();
        keys.sort_by_key(|&(conn, side)| (conn, side == Side::Server));
        let lanes = keys
            .into_iter()
            .map(|(conn, side)| {
                let mut list = calls.remove(&(conn, side)).unwrap_or_default();
                list.sort_by_key(|call| call.0);
                ClockLane {
                    conn,
                    side,
                    starts: list.iter().map(|c| c.0).collect(),
                    ends: list.iter().map(|c| c.1).collect(),
                    marks: list.iter().map(|c| c.2).collect(),
                    reqs: list.iter().map(|c| c.3).collect(),
                    tree: MaxTree::new(list.iter().map(|c| c.4).collect()),
                }
            })
            .collect();
        Lanes { lanes, end_ns, server_clock_uncertainty_ns: None }
    }
}

/// One drawn call of the run-clock view, in plot coordinates.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockBar {
    pub req: u32,
    pub mark: Mark,
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
    /// How long the call took.
    pub duration_ns: u64,
}

/// The bars of lanes `top .. top + page` in `scale`'s window: per lane, the greatest call of
/// each half pixel (and the call that reaches in from the left).
pub fn layout_lanes(lanes: &Lanes, top: usize, page: usize, scale: &Scale) -> Vec<ClockBar> {
    let buckets = (scale.width_px() * BUCKETS_PER_PX).ceil().max(1.0) as usize;
    let mut bars = Vec::new();
    for (position, lane) in lanes.lanes.iter().skip(top).take(page).enumerate() {
        let y = position as f64 * LANE_ROW;
        let picked =
            pick(&lane.starts, &lane.ends, &lane.tree, scale.from_ns(), scale.to_ns(), buckets);
        for index in picked {
            let (start, end) = (lane.starts[index], lane.ends[index]);
            let x = scale.x(start);
            let width = (scale.x(end) - x).max(1.0);
            let mark = lane.marks[index];
            let tall = matches!(mark, Mark::Stalled | Mark::Waited);
            let (bar_y, height) = if tall {
                (y + BAR_TOP - 2.0, BAR_HEIGHT + 4.0)
            } else {
                (y + BAR_TOP, BAR_HEIGHT)
            };
            bars.push(ClockBar {
                req: lane.reqs[index],
                mark,
                x,
                y: bar_y,
                width,
                height,
                duration_ns: end - start,
            });
        }
    }
    // Stalls paint over their neighbours.
    bars.sort_by_key(|bar| matches!(bar.mark, Mark::Stalled | Mark::Waited));
    bars
}

#[cfg(test)]
mod tests {
    use ackscope_shared::RrSpec;

    use super::*;
    use crate::fixtures::{nagle_run, MS, US};

    fn lanes(requests: u32, hold_ns: u64) -> Lanes {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&nagle_run(requests, hold_ns));
        let why = Attribution::of(&analysis, Some(&RrSpec::default()));
        Lanes::of(&analysis, &why)
    }

    #[test]
    fn one_lane_per_connection_side_with_every_call_in_time_order() {
        let lanes = lanes(5, 44 * MS);
        let labels: Vec<String> = lanes.lanes.iter().map(ClockLane::label).collect();
        assert_eq!(labels, ["conn 0 client", "conn 0 server"]);
        // A remote server's lane says how far its times may be off on this clock.
        let remote: Vec<String> =
            lanes.lanes.iter().map(|lane| lane.label_with(Some(12_400))).collect();
        assert_eq!(remote, ["conn 0 client", "conn 0 server ±12 µs"]);
        for lane in &lanes.lanes {
            assert!(lane.calls() >= 5 * 2, "{} calls", lane.calls());
            assert!(lane.starts.windows(2).all(|w| w[0] <= w[1]));
        }
        assert!(lanes.end_ns > 4 * 88 * MS, "{}", lanes.end_ns);
    }

    #[test]
    fn every_stall_survives_the_widest_zoom() {
        // 2000 requests of ~88 ms on an 800 px plot: hundreds of calls per pixel.
        let lanes = lanes(2000, 44 * MS);
        let scale = Scale::fit(lanes.end_ns, 800.0);
        let bars = layout_lanes(&lanes, 0, 10, &scale);
        let stalled = bars.iter().filter(|bar| bar.mark == Mark::Stalled).count();
        assert!(
            bars.len() <= 2 * (1600 + 1),
            "{} bars: at most two per pixel per lane",
            bars.len()
        );
        // Each bucket of the run's part of the axis (the fitted axis is rounded up) starts at
        // least one stall on each lane, and shows it.
        let covered = (lanes.end_ns as f64 / scale.domain_ns() as f64 * 1600.0) as usize;
        assert!(stalled + 4 >= 2 * covered, "{stalled} stalls drawn, {covered} buckets per lane");
        // Zoomed into one request, every call is drawn.
        let one = Scale::window(10 * 88 * MS, 88 * MS, 800.0);
        let close = layout_lanes(&lanes, 0, 10, &one);
        assert!(close.iter().filter(|bar| bar.mark == Mark::Stalled).count() >= 2);
        assert!(close.iter().all(|bar| bar.x >= 0.0 && bar.x + bar.width <= 801.0));
    }

    #[test]
    fn a_fast_run_has_no_stalls_to_draw() {
        let lanes = lanes(50, 30 * US);
        let scale = Scale::fit(lanes.end_ns, 800.0);
        let bars = layout_lanes(&lanes, 0, 10, &scale);
        assert!(!bars.is_empty());
        assert!(bars.iter().all(|bar| bar.mark != Mark::Stalled));
    }
}
