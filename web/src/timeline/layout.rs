//! Which marks each request produces: pure geometry, no DOM.
//!
//! Each request is one row of four lanes: the client's writes and reads, then the server's reads
//! and writes, all on the one clock the probe records both sides with.
//!
//! Every row is aligned at its own request's start, not at the run's clock: the x axis is "ms
//! since this request began". A Nagle x delayed-ACK stall happens at the same point of every
//! exchange, so aligned rows stack the stalls into one red column that is obvious at a glance,
//! where a run-clock axis would scatter them along a diagonal too long to read.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use ackscope_shared::analysis::{RunAnalysis, Span, SpanKind};
use ackscope_shared::{RequestView, Side};

use super::scale::Scale;

/// Rows drawn at most; the rest are counted in a note. Beyond this, SVG's DOM cost grows faster
/// than what a person can read from more rows.
pub const MAX_ROWS: usize = 1000;

pub const LANE_HEIGHT: f64 = 5.0;
pub const LANE_GAP: f64 = 1.0;
pub const ROW_PAD_TOP: f64 = 3.0;
pub const ROW_PAD_BOTTOM: f64 = 4.0;
pub const ROW_HEIGHT: f64 = ROW_PAD_TOP + 4.0 * LANE_HEIGHT + 3.0 * LANE_GAP + ROW_PAD_BOTTOM;
/// A stalled read stands out of its lane by this much above and below.
pub const STALL_OVERHANG: f64 = 2.0;
/// Marks shorter than this are widened to it, so a 5 µs write on a 100 ms axis stays visible.
pub const MIN_BAR_WIDTH: f64 = 1.0;
/// Rough width of one label character at the timeline's font size, to decide whether a label
/// fits inside its bar.
const LABEL_CHAR_WIDTH: f64 = 6.0;

/// The four lanes of a row, top to bottom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    ClientWrite,
    ClientRead,
    ServerRead,
    ServerWrite,
}

impl Lane {
    pub const ALL: [Lane; 4] =
        [Lane::ClientWrite, Lane::ClientRead, Lane::ServerRead, Lane::ServerWrite];

    fn index(self) -> usize {
        match self {
            Lane::ClientWrite => 0,
            Lane::ClientRead => 1,
            Lane::ServerRead => 2,
            Lane::ServerWrite => 3,
        }
    }

    /// Top of the lane within its row.
    pub fn y(self) -> f64 {
        ROW_PAD_TOP + self.index() as f64 * (LANE_HEIGHT + LANE_GAP)
    }

    /// A CSS class, also the legend's.
    pub fn class(self) -> &'static str {
        match self {
            Lane::ClientWrite => "client-write",
            Lane::ClientRead => "client-read",
            Lane::ServerRead => "server-read",
            Lane::ServerWrite => "server-write",
        }
    }

    /// The connect handshake is the client's first step before its writes, so it shares their
    /// lane in a colour of its own.
    fn of(span: &Span) -> Lane {
        match (span.side, span.kind) {
            (Side::Client, SpanKind::Read) => Lane::ClientRead,
            (Side::Client, _) => Lane::ClientWrite,
            (Side::Server, SpanKind::Write) => Lane::ServerWrite,
            (Side::Server, _) => Lane::ServerRead,
        }
    }
}

/// How a bar is painted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mark {
    /// A syscall, coloured by its lane.
    Call(Lane),
    Connect,
    /// A read the kernel held past the stall threshold after the peer had written its bytes.
    Stalled,
}

impl Mark {
    pub fn class(self) -> &'static str {
        match self {
            Mark::Call(lane) => lane.class(),
            Mark::Connect => "connect",
            Mark::Stalled => "stalled",
        }
    }
}

/// One rectangle, in row coordinates (x from the plot's left edge, y from the row's top).
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub mark: Mark,
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
    /// Hover text: what the call was and how long it took.
    pub title: String,
}

/// The held time printed next to a stalled read.
#[derive(Clone, Debug, PartialEq)]
pub struct StallLabel {
    /// Where the text anchors: the bar's right end, inside or just past it.
    pub x: f64,
    /// The text's baseline.
    pub y: f64,
    /// Inside the bar (white, anchored at its end) or just right of it (red, anchored at start).
    pub inside: bool,
    /// "43.7 ms".
    pub text: String,
    /// "43.7": the same number, for machines.
    pub ms: String,
}

/// Everything one request draws.
#[derive(Clone, Debug, PartialEq)]
pub struct RowLayout {
    pub req: u32,
    /// Top of the row within the plot.
    pub y: f64,
    pub bars: Vec<Bar>,
    pub stalls: Vec<StallLabel>,
    /// Where the client had read the whole response, if it has.
    pub done_x: Option<f64>,
}

impl RowLayout {
    /// Changes whenever anything drawn changes: the view re-creates a row only then.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.req.hash(&mut hasher);
        self.y.to_bits().hash(&mut hasher);
        self.done_x.map(f64::to_bits).hash(&mut hasher);
        for bar in &self.bars {
            bar.mark.hash(&mut hasher);
            for value in [bar.x, bar.y, bar.width, bar.height] {
                value.to_bits().hash(&mut hasher);
            }
            bar.title.hash(&mut hasher);
        }
        for label in &self.stalls {
            label.x.to_bits().hash(&mut hasher);
            label.text.hash(&mut hasher);
            label.inside.hash(&mut hasher);
        }
        hasher.finish()
    }
}

/// The rows to draw for a run, and how many requests there are in all.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineLayout {
    pub scale: Scale,
    pub rows: Vec<RowLayout>,
    /// Requests seen so far (drawn or not).
    pub total: usize,
    /// Rows the plot makes room for: `min(total, MAX_ROWS)`.
    pub shown: usize,
}

impl TimelineLayout {
    pub fn height(&self) -> f64 {
        self.shown as f64 * ROW_HEIGHT
    }
}

/// How far past its start a request reaches: its latency if done, else its latest mark so far.
pub fn extent_ns(view: &RequestView) -> Option<u64> {
    let start = view.start_ns?;
    let last_span = view.spans.iter().map(|span| span.end_ns).max();
    let end = view.done_ns.into_iter().chain(last_span).max()?;
    Some(end.saturating_sub(start))
}

/// Lays out the first [`MAX_ROWS`] requests of a run on a plot `width_px` wide, the scale fitted
/// to the slowest request of the whole run.
pub fn layout_run(analysis: &RunAnalysis, width_px: f64) -> TimelineLayout {
    let requests = analysis.requests();
    let slowest = requests.iter().filter_map(extent_ns).max().unwrap_or(0);
    let scale = Scale::fit(slowest, width_px);
    let shown = requests.len().min(MAX_ROWS);
    let rows = requests[..shown]
        .iter()
        .enumerate()
        .filter_map(|(index, view)| {
            let req = u32::try_from(index).ok()?;
            layout_row(analysis, req, view, &scale)
        })
        .collect();
    TimelineLayout { scale, rows, total: requests.len(), shown }
}

/// The marks of one request, or `None` while its start is unknown (the client's events of it
/// have not arrived yet: there is nothing to align it on).
pub fn layout_row(
    analysis: &RunAnalysis,
    req: u32,
    view: &RequestView,
    scale: &Scale,
) -> Option<RowLayout> {
    let start_ns = view.start_ns?;
    let mut bars = Vec::with_capacity(view.spans.len());
    let mut stalls = Vec::new();
    for span in &view.spans {
        // A server read that began before the request (the server idling for the next
        // request) is drawn from the request's start: before it, nothing of this request
        // existed to wait for.
        if span.end_ns < start_ns {
            continue;
        }
        let from_ns = span.start_ns.max(start_ns) - start_ns;
        let to_ns = span.end_ns - start_ns;
        let x = scale.x(from_ns);
        let width = (scale.x(to_ns) - x).max(MIN_BAR_WIDTH);
        let lane = Lane::of(span);
        let stall_ns = view.conn.and_then(|conn| analysis.stall_ns(conn, span));
        let title = describe_span(span, stall_ns);
        match stall_ns {
            Some(held_ns) => {
                let ms = format!("{:.1}", held_ns as f64 / 1e6);
                let text = format!("{ms} ms");
                let inside = width >= text.len() as f64 * LABEL_CHAR_WIDTH + 6.0;
                stalls.push(StallLabel {
                    x: if inside { x + width - 3.0 } else { x + width + 3.0 },
                    y: lane.y() + LANE_HEIGHT + 1.0,
                    inside,
                    text,
                    ms,
                });
                bars.push(Bar {
                    mark: Mark::Stalled,
                    x,
                    y: lane.y() - STALL_OVERHANG,
                    width,
                    height: LANE_HEIGHT + 2.0 * STALL_OVERHANG,
                    title,
                });
            }
            None => {
                let mark =
                    if span.kind == SpanKind::Connect { Mark::Connect } else { Mark::Call(lane) };
                bars.push(Bar { mark, x, y: lane.y(), width, height: LANE_HEIGHT, title });
            }
        }
    }
    // Stalled bars go last so that they paint over any neighbour they overhang.
    bars.sort_by_key(|bar| bar.mark == Mark::Stalled);
    let done_x = view.done_ns.map(|done| scale.x(done.saturating_sub(start_ns)));
    Some(RowLayout { req, y: f64::from(req) * ROW_HEIGHT, bars, stalls, done_x })
}

/// "server read 2048 B in 43.712 ms, held 43.689 ms by the kernel".
fn describe_span(span: &Span, stall_ns: Option<u64>) -> String {
    let took = format_ms(span.duration_ns());
    let what = match span.kind {
        SpanKind::Connect => return format!("{} connect in {took}", span.side.name()),
        SpanKind::Write => "write",
        SpanKind::Read => "read",
    };
    let mut text = format!("{} {what} {} B in {took}", span.side.name(), span.bytes);
    if let Some(held_ns) = stall_ns {
        text.push_str(&format!(", held {} by the kernel", format_ms(held_ns)));
    }
    text
}

fn format_ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use ackscope_shared::analysis::RunAnalysis;
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use crate::fixtures::{nagle_run, MS, US};

    fn analysed(requests: u32, hold: u64) -> RunAnalysis {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&nagle_run(requests, hold));
        analysis
    }

    #[wasm_bindgen_test]
    fn a_stalled_read_is_a_tall_red_bar_labelled_with_its_held_time() {
        let analysis = analysed(3, 43_700 * US);
        let layout = layout_run(&analysis, 800.0);
        assert_eq!((layout.total, layout.shown, layout.rows.len()), (3, 3, 3));
        // 43.7 ms held each way: ~87.5 ms per request, fitted to a 100 ms axis.
        assert_eq!(layout.scale.domain_ns(), 100 * MS);

        let row = &layout.rows[1];
        assert_eq!(row.req, 1);
        assert_eq!(row.y, ROW_HEIGHT);
        let stalled: Vec<&Bar> = row.bars.iter().filter(|b| b.mark == Mark::Stalled).collect();
        assert_eq!(stalled.len(), 2, "one per direction");
        assert!(stalled.iter().all(|b| b.height > LANE_HEIGHT));
        // The server's body read: from 21 µs to 43.71 ms after the request began.
        let server_y = Lane::ServerRead.y() - STALL_OVERHANG;
        let server = stalled.iter().find(|b| b.y == server_y).expect("a server stall");
        assert!((server.x - 0.168).abs() < 0.01, "{}", server.x);
        assert!((server.width - 349.5).abs() < 0.1, "{}", server.width);
        assert!(server.title.contains("held 43.689 ms"), "{}", server.title);

        let labels: Vec<(&str, &str)> =
            row.stalls.iter().map(|l| (l.text.as_str(), l.ms.as_str())).collect();
        assert_eq!(labels, [("43.7 ms", "43.7"), ("43.7 ms", "43.7")]);
        // Wide bars carry their label inside, at their right end.
        assert!(row.stalls.iter().all(|l| l.inside));
        assert!(row.stalls.iter().any(|l| (l.x - (server.x + server.width - 3.0)).abs() < 1e-9));
        // The stalled bars are painted last, over their neighbours.
        assert!(row.bars.iter().rev().take(2).all(|b| b.mark == Mark::Stalled));
    }

    #[wasm_bindgen_test]
    fn the_first_request_of_a_connection_and_a_nodelay_run_have_no_stall() {
        let analysis = analysed(2, 44 * MS);
        let layout = layout_run(&analysis, 800.0);
        assert!(layout.rows[0].stalls.is_empty());
        assert!(layout.rows[0].bars.iter().all(|b| b.mark != Mark::Stalled));

        // Every body held 30 µs: TCP_NODELAY on both sides.
        let fast = analysed(50, 30 * US);
        let layout = layout_run(&fast, 800.0);
        assert_eq!(layout.scale.domain_ns(), MS);
        assert_eq!(layout.rows.len(), 50);
        assert!(layout.rows.iter().all(|row| row.stalls.is_empty()));
        assert!(layout.rows.iter().flat_map(|row| &row.bars).all(|bar| bar.mark != Mark::Stalled));
        // Each exchange: 2 writes and 2 reads per side, all in the right lanes.
        let row = &layout.rows[7];
        assert_eq!(row.bars.len(), 8);
        for lane in Lane::ALL {
            let in_lane = row.bars.iter().filter(|b| b.mark == Mark::Call(lane)).count();
            assert_eq!(in_lane, 2, "{lane:?}");
            assert!(row
                .bars
                .iter()
                .filter(|b| b.mark == Mark::Call(lane))
                .all(|b| b.y == lane.y()));
        }
    }

    #[wasm_bindgen_test]
    fn spans_before_the_request_start_are_clipped_to_it() {
        let analysis = analysed(3, 30 * US);
        let scale = Scale::fit(MS, 1000.0);
        let view = &analysis.requests()[2];
        // The server sat in read() for this request's length since 40 µs before it began.
        let early = view.spans.iter().filter(|s| s.start_ns < view.start_ns.unwrap_or(0)).count();
        assert_eq!(early, 1);
        let row = layout_row(&analysis, 2, view, &scale).expect("the request has started");
        let length_read = row
            .bars
            .iter()
            .find(|b| b.mark == Mark::Call(Lane::ServerRead) && b.x == 0.0)
            .expect("the clipped read starts at 0");
        assert!((length_read.width - 20.0).abs() < 1e-9, "ends 20 µs in: {}", length_read.width);
        assert!(row.bars.iter().all(|b| b.x >= 0.0));
        assert!(row.done_x.is_some());
    }

    #[wasm_bindgen_test]
    fn a_request_in_flight_is_drawn_and_rows_are_capped() {
        let events = nagle_run(2, 44 * MS);
        // Only the first half of the second request has arrived.
        let cut = events.len() - 8;
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&events[..cut]);
        let layout = layout_run(&analysis, 800.0);
        assert_eq!(layout.rows.len(), 2);
        assert!(layout.rows[1].done_x.is_none());
        assert!(!layout.rows[1].bars.is_empty());

        let many = analysed(1005, 30 * US);
        let layout = layout_run(&many, 800.0);
        assert_eq!((layout.total, layout.shown, layout.rows.len()), (1005, MAX_ROWS, MAX_ROWS));
        assert_eq!(layout.height(), MAX_ROWS as f64 * ROW_HEIGHT);
    }

    #[wasm_bindgen_test]
    fn the_fingerprint_follows_what_is_drawn() {
        let analysis = analysed(2, 44 * MS);
        let scale = Scale::fit(100 * MS, 800.0);
        let view = &analysis.requests()[1];
        let row = layout_row(&analysis, 1, view, &scale).expect("started");
        let same = layout_row(&analysis, 1, view, &scale).expect("started");
        assert_eq!(row.fingerprint(), same.fingerprint());
        let rescaled = layout_row(&analysis, 1, view, &Scale::fit(200 * MS, 800.0));
        assert_ne!(rescaled.map(|r| r.fingerprint()), Some(row.fingerprint()));
    }
}
