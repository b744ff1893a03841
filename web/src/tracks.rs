//! What the kernel panel shows: which connection over which time, one small chart per TCP_INFO
//! field and side ("kernel tracks"), and a bulk run's goodput over time with its windows. Pure
//! (a run in, points and words out), tested natively; `panels/kernel.rs` draws it.
//!
//! Each chart asks shared's `kernel::Track::window` for [`BUCKETS`] buckets of min, max and
//! last, about one per pixel, so a chart costs the same for ten samples or a million and a spike
//! inside a bucket still reaches its max. Between samples a counter holds its value, so lines
//! are steps.

use std::fmt::Write;

use ackscope_shared::bulk::goodput_over_time;
use ackscope_shared::kernel::{Field, KernelTracks, Unit, Window};
use ackscope_shared::wire::Instruments;
use ackscope_shared::{ConnId, Scenario, Side};

use crate::state::{Run, RunStatus};
use crate::timeline::scale::{format_duration, nice_ceil_ns, Scale, Tick};

/// Buckets per chart: one per pixel of [`PLOT_WIDTH`].
pub const BUCKETS: usize = 300;
/// One kernel track's plot area, in SVG pixels (its axes are drawn around it).
pub const PLOT_WIDTH: f64 = 300.0;
pub const PLOT_HEIGHT: f64 = 56.0;
/// The goodput chart's plot area.
pub const GOODPUT_WIDTH: f64 = 600.0;
pub const GOODPUT_HEIGHT: f64 = 160.0;
/// Goodput buckets: coarser than the kernel tracks' (a bucket holds several reads of the
/// application's buffer), and never under a millisecond.
const GOODPUT_BUCKETS: u64 = 200;
const MIN_GOODPUT_BUCKET_NS: u64 = 1_000_000;
/// Intervals of the time axis: 4 labels fit under a 300-pixel chart.
const X_TICKS: u64 = 4;
/// The margin around a selected request: a tenth of its length on each side, as the
/// timeline's "fit" frames it.
const MARGIN_DIVISOR: u64 = 10;

/// What the panel shows of the selected run.
#[derive(Clone, Debug, PartialEq)]
pub struct Shown {
    /// `Err`: the run has no TCP_INFO sample; why, and how to record them.
    pub tracks: Result<KernelView, String>,
    /// A bulk run's goodput over time (with or without TCP_INFO).
    pub goodput: Option<GoodputChart>,
}

/// The kernel tracks of one connection over one time range, and a bulk run's goodput.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelView {
    pub conn: u32,
    /// "connection 0 around request 3 (44.1 ms)", "connection 0, the whole run".
    pub heading: String,
    /// "43.2 ms to 92.8 ms on the run clock".
    pub range: String,
    /// Ticks of the time axis every chart shares.
    pub x_ticks: Vec<Tick>,
    /// In [`Field::ALL`] order, the client's chart then the server's; fields neither side
    /// reported (an older kernel's) are left out.
    pub charts: Vec<Chart>,
    /// Something the charts do not say by themselves (no samples for this connection).
    pub note: Option<String>,
}

/// One field of one side over the range.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// [`Field::name`]: "cwnd", "notsent", …
    pub field: &'static str,
    /// "client" or "server".
    pub side: &'static str,
    pub about: &'static str,
    /// SVG points in plot pixels, "x,y x,y …"; empty when there is no line to draw (no
    /// sample in or before the range).
    pub points: String,
    /// The bottom (0) and the top of the y axis, labelled with the unit.
    pub y_ticks: Vec<YTick>,
    /// The value in effect at the end of the range ("10 seg"), if any.
    pub last: Option<String>,
    /// Buckets with at least one sample.
    pub filled: usize,
}

/// One labelled mark on a y axis, in plot pixels.
#[derive(Clone, Debug, PartialEq)]
pub struct YTick {
    pub y: f64,
    pub label: String,
}

/// A bulk run's goodput over time, the windows on a second axis.
#[derive(Clone, Debug, PartialEq)]
pub struct GoodputChart {
    /// Mbit/s per bucket as steps, in plot pixels.
    pub points: String,
    /// Left axis, Mbit/s.
    pub left_ticks: Vec<YTick>,
    /// Right axis, bytes.
    pub right_ticks: Vec<YTick>,
    pub x_ticks: Vec<Tick>,
    /// One line per window TCP_INFO reported.
    pub windows: Vec<WindowLine>,
    /// The server's window over the client's RTT, on the left axis (clipped at its top): what
    /// the window allows. Empty without both.
    pub ceiling: String,
    /// "200 buckets of 5.0 ms".
    pub buckets: String,
}

/// A window on the goodput chart's second axis.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowLine {
    /// "server rcv_wnd".
    pub name: &'static str,
    /// A `data-series` value: "server-rcv_wnd".
    pub key: &'static str,
    pub points: String,
}

impl Shown {
    /// The kernel view of `run`: the connection of the selected request `selected` around its
    /// time, or (nothing selected, or a bulk run) the first sampled connection over the whole
    /// run.
    pub fn of(run: &Run, selected: Option<u32>) -> Shown {
        let kernel = run.kernel();
        let tracks = if kernel.is_empty() {
            Err(no_samples(run))
        } else {
            Ok(KernelView::of(run, selected))
        };
        Shown { tracks, goodput: goodput_chart(run) }
    }
}

impl KernelView {
    fn of(run: &Run, selected: Option<u32>) -> KernelView {
        let kernel = run.kernel();
        let focus = selected
            .filter(|_| run.has_rows())
            .and_then(|req| request_focus(run, req))
            .unwrap_or_else(|| whole_run(run));
        let scale = focus.scale;
        let (from_ns, to_ns) = (scale.from_ns(), scale.to_ns());
        let charts = charts(kernel, focus.conn, from_ns, to_ns);
        let note = charts
            .is_empty()
            .then(|| format!("No TCP_INFO sample of connection {} in this range.", focus.conn.0));
        KernelView {
            conn: focus.conn.0,
            heading: focus.heading,
            range: format!("{} to {} on the run clock", at(from_ns), at(to_ns)),
            x_ticks: scale.ticks(X_TICKS),
            charts,
            note,
        }
    }
}

/// Where the charts look.
struct Focus {
    conn: ConnId,
    scale: Scale,
    heading: String,
}

/// The selected request's connection, over the request and a margin.
fn request_focus(run: &Run, req: u32) -> Option<Focus> {
    let index = req.checked_sub(run.analysis.first_request())? as usize;
    let request = run.analysis.requests().get(index)?;
    let conn = request.conn?;
    let start = request.start_ns?;
    // A request in flight: up to its latest call or sample.
    let end = request.done_ns.unwrap_or_else(|| {
        let spans = request.spans().map(|span| span.end_ns);
        let samples = [Side::Client, Side::Server]
            .into_iter()
            .filter_map(|side| run.kernel().track(conn, side)?.span_ns().map(|(_, end)| end));
        spans.chain(samples).max().unwrap_or(start).max(start)
    });
    let span = (end - start).max(1);
    let margin = span / MARGIN_DIVISOR;
    // The run clock starts at 0: a request at its start gets no margin before it.
    let from = start.saturating_sub(margin);
    let scale = Scale::window(from, end + margin - from, PLOT_WIDTH);
    let took = request.latency_ns().map(|ns| format!(" ({})", format_duration(ns)));
    let heading = format!(
        "connection {} around request {req}{}",
        conn.0,
        took.unwrap_or_else(|| " (in flight)".to_string())
    );
    Some(Focus { conn, scale, heading })
}

/// The first sampled connection from the run's start to its last sample or read, on an axis
/// that ends on a round number.
fn whole_run(run: &Run) -> Focus {
    let kernel = run.kernel();
    let conn = kernel.tracks().first().map_or(ConnId(0), |track| track.conn);
    let read_end = run.bulk.as_ref().map_or(0, |bulk| bulk.span_ns().1);
    let end = kernel.end_ns().unwrap_or(0).max(read_end);
    let many = kernel.tracks().iter().any(|track| track.conn != conn);
    let heading = if many && run.has_rows() {
        format!("connection {}, the whole run (select a request to see its connection)", conn.0)
    } else {
        format!("connection {}, the whole run", conn.0)
    };
    Focus { conn, scale: Scale::fit(end, PLOT_WIDTH), heading }
}

/// A moment on the run clock: "0", "43.7 ms".
fn at(ns: u64) -> String {
    if ns == 0 {
        "0".to_string()
    } else {
        format_duration(ns)
    }
}

/// One chart per field and side, the two sides of a field on one y scale.
fn charts(kernel: &KernelTracks, conn: ConnId, from_ns: u64, to_ns: u64) -> Vec<Chart> {
    let sides = [Side::Client, Side::Server].map(|side| (side, kernel.track(conn, side)));
    if sides.iter().all(|(_, track)| track.is_none()) {
        return Vec::new();
    }
    let mut charts = Vec::new();
    for field in Field::ALL {
        if !sides.iter().any(|(_, track)| track.is_some_and(|t| t.reports(field))) {
            continue;
        }
        let windows = sides.map(|(side, track)| {
            (side, track.map(|track| track.window(field, from_ns, to_ns, BUCKETS)))
        });
        let top = windows.iter().filter_map(|(_, w)| w.as_ref()?.max()).max().unwrap_or(0);
        let y_max = axis_max(u64::from(top), field.unit());
        for (side, window) in windows {
            let (points, last, filled) = match &window {
                Some(window) => (
                    line(&counter_points(window, y_max, PLOT_WIDTH, PLOT_HEIGHT)),
                    window.held().last().copied().flatten().or(window.before),
                    window.filled(),
                ),
                None => (String::new(), None, 0),
            };
            charts.push(Chart {
                field: field.name(),
                side: side.name(),
                about: field.about(),
                points,
                y_ticks: y_ticks(y_max, field.unit(), PLOT_HEIGHT),
                last: last.map(|value| value_label(u64::from(value), field.unit())),
                filled,
            });
        }
    }
    charts
}

/// The top of a y axis: a round number at or above `top`: binary for bytes (64 KiB, 96 KiB,
/// 128 KiB: buffers and windows are powers of two), decimal otherwise (1, 1.2, 1.5, 2 … x 10^k).
pub fn axis_max(top: u64, unit: Unit) -> u64 {
    match unit {
        Unit::Bytes => {
            let power = top.max(1).checked_next_power_of_two().unwrap_or(u64::MAX);
            // 1.5 x 2^k between two powers wastes at most a third of the height, not half.
            let between = power / 4 * 3;
            if between >= top && power >= 4 {
                between
            } else {
                power
            }
        }
        Unit::Segments | Unit::Micros => nice_ceil_ns(top).max(1),
    }
}

fn y_ticks(y_max: u64, unit: Unit, height: f64) -> Vec<YTick> {
    vec![
        YTick { y: height, label: value_label(0, unit) },
        YTick { y: 0.0, label: value_label(y_max, unit) },
    ]
}

/// A value with its unit, short enough for an axis: "10 seg", "64 KiB", "1.5 MiB", "8.3 ms".
pub fn value_label(value: u64, unit: Unit) -> String {
    match unit {
        Unit::Segments => format!("{value} seg"),
        Unit::Bytes => bytes_label(value),
        Unit::Micros if value == 0 => "0 µs".to_string(),
        Unit::Micros => format_duration(value.saturating_mul(1000)),
    }
}

fn bytes_label(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    let scaled = |per: u64, unit: &str| {
        let value = bytes as f64 / per as f64;
        if (value - value.round()).abs() < 0.05 {
            format!("{} {unit}", value.round())
        } else {
            format!("{value:.1} {unit}")
        }
    };
    match bytes {
        b if b >= MIB => scaled(MIB, "MiB"),
        b if b >= KIB => scaled(KIB, "KiB"),
        b => format!("{b} B"),
    }
}

/// A counter's line through a window's buckets, in plot pixels (y down, `y_max` at the top):
/// the value before the window from the left edge, then per bucket with samples a step to it,
/// its min and max at the bucket's left edge (the nearer one first) and its last value at the
/// bucket's right edge; held to the right edge when the track goes on after the window.
pub fn counter_points(window: &Window, y_max: u64, width: f64, height: f64) -> Vec<(f64, f64)> {
    let count = window.buckets.len().max(1) as f64;
    let y_of = |value: u32| height - (f64::from(value) / y_max.max(1) as f64).min(1.0) * height;
    let mut points = Vec::new();
    let mut held = window.before;
    if let Some(value) = held {
        points.push((0.0, y_of(value)));
    }
    for (i, bucket) in window.buckets.iter().enumerate() {
        let Some(bucket) = bucket else { continue };
        let (left, right) = (i as f64 / count * width, (i + 1) as f64 / count * width);
        if let Some(value) = held {
            points.push((left, y_of(value)));
        }
        let from_above = held.is_some_and(|value| {
            u64::from(value) * 2 > u64::from(bucket.min) + u64::from(bucket.max)
        });
        let (first, second) =
            if from_above { (bucket.max, bucket.min) } else { (bucket.min, bucket.max) };
        points.push((left, y_of(first)));
        points.push((left, y_of(second)));
        points.push((right, y_of(bucket.last)));
        held = Some(bucket.last);
    }
    if let (true, Some(value)) = (window.continues, held) {
        points.push((width, y_of(value)));
    }
    points.dedup();
    points
}

/// A line's points, or nothing for a single point (no line to see).
fn line(points: &[(f64, f64)]) -> String {
    if points.len() < 2 {
        String::new()
    } else {
        format_points(points)
    }
}

/// "x,y x,y …", a tenth of a pixel being below what anyone sees. Written as whole tenths into
/// one string: the kernel panel's charts hold about 20,000 points, and formatting each as a
/// float into a string of its own was a tenth of the task that first shows a big run.
pub fn format_points(points: &[(f64, f64)]) -> String {
    let mut text = String::with_capacity(points.len() * 12);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        push_tenths(&mut text, x);
        text.push(',');
        push_tenths(&mut text, y);
    }
    text
}

/// `value` rounded to a tenth: "90", "12.5", "-0.5" (as `{}` prints the rounded float).
fn push_tenths(text: &mut String, value: f64) {
    let tenths = (value * 10.0).round() as i64;
    if tenths < 0 {
        text.push('-');
    }
    let (whole, tenth) = (tenths.unsigned_abs() / 10, tenths.unsigned_abs() % 10);
    let _ = write!(text, "{whole}");
    if tenth != 0 {
        let _ = write!(text, ".{tenth}");
    }
}

/// A bulk run's goodput over the whole run, with the windows: `None` for other scenarios.
fn goodput_chart(run: &Run) -> Option<GoodputChart> {
    let bulk = run.bulk.as_ref()?;
    let (_, end) = bulk.span_ns();
    let scale = Scale::fit(end, GOODPUT_WIDTH);
    let (from_ns, to_ns) = (scale.from_ns(), scale.to_ns());
    let buckets = (scale.domain_ns() / MIN_GOODPUT_BUCKET_NS).clamp(1, GOODPUT_BUCKETS);
    let series = goodput_over_time(bulk, run.kernel(), from_ns, to_ns, buckets as usize);

    let peak = series.mbps.iter().copied().fold(0.0, f64::max);
    let mbps_max = nice_ceil_ns(peak.ceil() as u64).max(1);
    let count = series.mbps.len().max(1) as f64;
    let y_of = |mbps: f64| GOODPUT_HEIGHT - (mbps / mbps_max as f64).min(1.0) * GOODPUT_HEIGHT;
    let mut points = Vec::new();
    for (i, &mbps) in series.mbps.iter().enumerate() {
        let y = y_of(mbps);
        points.push((i as f64 / count * GOODPUT_WIDTH, y));
        points.push(((i + 1) as f64 / count * GOODPUT_WIDTH, y));
    }
    points.dedup();
    let mut ceiling = Vec::new();
    for (i, mbps) in series.window_over_rtt_mbps.iter().enumerate() {
        if let Some(mbps) = mbps {
            let y = y_of(*mbps);
            ceiling.push((i as f64 / count * GOODPUT_WIDTH, y));
            ceiling.push(((i + 1) as f64 / count * GOODPUT_WIDTH, y));
        }
    }
    ceiling.dedup();

    let windows = [
        ("server rcv_wnd", "server-rcv_wnd", series.server_rcv_wnd),
        ("client snd_wnd", "client-snd_wnd", series.client_snd_wnd),
    ];
    let top = windows.iter().filter_map(|(_, _, w)| w.as_ref()?.max()).max().unwrap_or(0);
    let wnd_max = axis_max(u64::from(top), Unit::Bytes);
    let windows = windows
        .into_iter()
        .filter_map(|(name, key, window)| {
            let points = counter_points(&window?, wnd_max, GOODPUT_WIDTH, GOODPUT_HEIGHT);
            Some(WindowLine { name, key, points: format_points(&points) })
        })
        .collect();
    let mbps_label = |mbps: u64| format!("{mbps} Mbit/s");
    Some(GoodputChart {
        points: format_points(&points),
        left_ticks: vec![
            YTick { y: GOODPUT_HEIGHT, label: mbps_label(0) },
            YTick { y: GOODPUT_HEIGHT / 2.0, label: mbps_label(mbps_max / 2) },
            YTick { y: 0.0, label: mbps_label(mbps_max) },
        ],
        right_ticks: y_ticks(wnd_max, Unit::Bytes, GOODPUT_HEIGHT),
        x_ticks: scale.ticks(6),
        windows,
        ceiling: line(&ceiling),
        buckets: format!("{buckets} buckets of {}", format_duration(scale.domain_ns() / buckets)),
    })
}

/// Why a run has no TCP_INFO sample, and how to record them (docs/CLI.md's flags).
fn no_samples(run: &Run) -> String {
    let Instruments { events, tcp_info_at_syscalls, tcp_info_interval_us, .. } = run.instruments;
    let how = "TCP_INFO is read at every syscall, and every --tcp-info-interval-us (1000 by \
               default) while a call is blocked, unless the run is recorded with --no-tcp-info";
    if matches!(run.spec, Scenario::Import(_)) {
        "No TCP_INFO samples: an imported capture has only packets; `ackscope run` records the \
         kernel's view."
            .to_string()
    } else if !events {
        format!("No TCP_INFO samples: this run was recorded with --no-events. {how}.")
    } else if !tcp_info_at_syscalls && tcp_info_interval_us == 0 {
        format!("No TCP_INFO samples: this run was recorded with --no-tcp-info. {how}.")
    } else if run.status == RunStatus::Running {
        "No TCP_INFO samples yet.".to_string()
    } else {
        format!("No TCP_INFO samples in this run. {how}.")
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::kernel::Bucket;
    use ackscope_shared::wire::ToBrowser;
    use ackscope_shared::{BulkSpec, Event, EventKind, ReqId, RrSpec, RunId, TcpInfoSample};

    use super::*;
    use crate::fixtures::{hello, nagle_run, rr_started, MS};
    use crate::state::{apply, AppState};

    fn info(at_ns: u64, side: Side, req: u32, cwnd: u32, notsent: u32) -> Event {
        let sample = TcpInfoSample {
            snd_cwnd: cwnd,
            notsent_bytes: Some(notsent),
            rtt_us: 8300,
            snd_wnd: Some(65_536),
            rcv_wnd: None,
            ..TcpInfoSample::default()
        };
        Event {
            at_ns,
            side,
            conn: ConnId(0),
            req: ReqId(req),
            kind: EventKind::TcpInfo(Box::new(sample)),
        }
    }

    /// A Nagle run of 3 requests with TCP_INFO samples every millisecond on both sides.
    fn sampled_run() -> AppState {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(&mut state, rr_started(1, RrSpec::default()));
        let mut events = nagle_run(3, 44 * MS);
        for ms in 0..200 {
            let notsent = if (50..90).contains(&ms) { 2048 } else { 0 };
            events.push(info(ms * MS, Side::Client, 0, 10, notsent));
            events.push(info(ms * MS, Side::Server, 0, 12, 0));
        }
        apply(&mut state, ToBrowser::Events { run: RunId(1), events });
        state
    }

    fn tracks(state: &AppState, selected: Option<u32>) -> KernelView {
        let run = state.selected().expect("a run");
        Shown::of(run, selected).tracks.unwrap_or_else(|why| panic!("no samples: {why}"))
    }

    #[test]
    fn the_selected_request_frames_its_connection_with_a_margin() {
        let state = sampled_run();
        let run = state.selected().expect("a run");
        let request = &run.analysis.requests()[1];
        let (start, done) = (request.start_ns.unwrap_or(0), request.done_ns.unwrap_or(0));
        let view = tracks(&state, Some(1));
        assert!(view.heading.starts_with("connection 0 around request 1 ("), "{}", view.heading);
        let margin = (done - start) / 10;
        let (from, to) = (start.saturating_sub(margin), done + margin);
        assert_eq!(view.range, format!("{} to {} on the run clock", at(from), at(to)));
        // rcv_wnd was never reported: 8 fields, both sides each.
        let fields: Vec<&str> = view.charts.iter().map(|c| c.field).step_by(2).collect();
        assert_eq!(
            fields,
            ["unacked", "notsent", "cwnd", "snd_wnd", "rcv_space", "rtt", "ato", "retrans"]
        );
        let cwnd: Vec<&Chart> = view.charts.iter().filter(|c| c.field == "cwnd").collect();
        assert_eq!(cwnd.iter().map(|c| c.side).collect::<Vec<_>>(), ["client", "server"]);
        assert_eq!(cwnd[0].last.as_deref(), Some("10 seg"));
        assert_eq!(cwnd[1].last.as_deref(), Some("12 seg"));
        // Both sides on one scale, to a round number above the larger.
        assert_eq!(cwnd[0].y_ticks[1].label, "12 seg");
        assert!(cwnd[0].filled > 40, "a sample per ms over ~110 ms: {}", cwnd[0].filled);
        assert!(!cwnd[0].points.is_empty());
        let rtt = view.charts.iter().find(|c| c.field == "rtt").expect("rtt");
        assert_eq!(rtt.last.as_deref(), Some("8.3 ms"));
        let ms = |tick: &Tick| tick.label == "0" || tick.label.ends_with(" ms");
        assert!(view.x_ticks.len() >= 3 && view.x_ticks.iter().all(ms), "{:?}", view.x_ticks);
    }

    #[test]
    fn nothing_selected_shows_the_whole_run() {
        let state = sampled_run();
        let view = tracks(&state, None);
        assert_eq!(view.heading, "connection 0, the whole run");
        assert!(view.range.starts_with("0 to 200.0 ms"), "{}", view.range);
        let notsent = view.charts.iter().find(|c| c.field == "notsent").expect("notsent");
        assert_eq!(notsent.y_ticks[1].label, "2 KiB", "the held body");
        // A request that is not in the analysis falls back to the whole run too.
        assert_eq!(tracks(&state, Some(99)).heading, "connection 0, the whole run");
    }

    #[test]
    fn a_run_without_tcp_info_says_how_to_record_it() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(
            &mut state,
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: Scenario::Rr(RrSpec::default()),
                instruments: Instruments {
                    tcp_info_at_syscalls: false,
                    tcp_info_interval_us: 0,
                    ..Instruments::default()
                },
            },
        );
        apply(&mut state, ToBrowser::Events { run: RunId(1), events: nagle_run(2, 44 * MS) });
        let run = state.selected().expect("a run");
        let shown = Shown::of(run, Some(1));
        assert_eq!(shown.goodput, None, "not a bulk run");
        let why = shown.tracks.expect_err("no samples");
        assert!(why.contains("--no-tcp-info"), "{why}");
        assert!(why.contains("--tcp-info-interval-us"), "{why}");
    }

    #[test]
    fn a_bulk_run_gets_goodput_and_its_windows() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(
            &mut state,
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: Scenario::Bulk(BulkSpec::default()),
                instruments: Instruments::default(),
            },
        );
        let event = |at_ns, side, kind| Event { at_ns, side, conn: ConnId(0), req: ReqId(0), kind };
        let mut events = vec![event(0, Side::Client, EventKind::RequestStart)];
        for ms in 1..=100u64 {
            let read = EventKind::ReadDone { bytes: 125_000 };
            events.push(event(ms * MS - 1, Side::Server, read));
            let wnd = TcpInfoSample {
                rcv_wnd: Some(262_144),
                snd_wnd: Some(262_144),
                ..Default::default()
            };
            events.push(event(ms * MS, Side::Server, EventKind::TcpInfo(Box::new(wnd.clone()))));
            events.push(event(ms * MS, Side::Client, EventKind::TcpInfo(Box::new(wnd))));
        }
        apply(&mut state, ToBrowser::Events { run: RunId(1), events });
        let shown = Shown::of(state.selected().expect("a run"), None);
        let goodput = shown.goodput.expect("a bulk run's goodput");
        // 125 kB per ms is 1000 Mbit/s.
        assert_eq!(goodput.left_ticks[2].label, "1000 Mbit/s");
        assert_eq!(goodput.right_ticks[1].label, "256 KiB");
        let names: Vec<&str> = goodput.windows.iter().map(|line| line.name).collect();
        assert_eq!(names, ["server rcv_wnd", "client snd_wnd"]);
        assert_eq!(goodput.buckets, "100 buckets of 1.0 ms");
        assert!(goodput.points.split(' ').count() > 10, "{}", goodput.points);
        let view = shown.tracks.expect("TCP_INFO samples");
        assert!(view.charts.iter().any(|c| c.field == "rcv_wnd" && c.side == "server"));
    }

    #[test]
    fn a_counter_line_keeps_a_spike_and_holds_between_samples() {
        let window = Window {
            from_ns: 0,
            to_ns: 4,
            before: Some(10),
            buckets: vec![
                None,
                Some(Bucket { min: 10, max: 100, last: 10 }),
                None,
                Some(Bucket { min: 50, max: 50, last: 50 }),
            ],
            continues: true,
        };
        let points = counter_points(&window, 100, 40.0, 100.0);
        assert_eq!(
            points,
            [
                (0.0, 90.0),
                (10.0, 90.0),
                (10.0, 0.0),
                (20.0, 90.0),
                (30.0, 90.0),
                (30.0, 50.0),
                (40.0, 50.0),
            ]
        );
        assert_eq!(format_points(&points[..2]), "0,90 10,90");
    }

    #[test]
    fn points_are_written_to_a_tenth_as_floats_print() {
        let values = [0.0, 0.04, 0.05, 0.96, 1.0, 12.34, 12.35, 299.99, 300.0, 55.55, -0.5, -3.26];
        for x in values {
            for y in values {
                let tenth = |value: f64| (value * 10.0).round() / 10.0;
                let float = format!("{},{}", tenth(x), tenth(y));
                assert_eq!(format_points(&[(x, y)]), float, "({x}, {y})");
            }
        }
        assert_eq!(format_points(&[(1.0, 2.0), (3.5, 4.25), (5.0, 6.0)]), "1,2 3.5,4.3 5,6");
        assert_eq!(format_points(&[]), "");
    }

    #[test]
    fn values_carry_their_unit() {
        assert_eq!(value_label(10, Unit::Segments), "10 seg");
        assert_eq!(value_label(2048, Unit::Bytes), "2 KiB");
        assert_eq!(value_label(1536, Unit::Bytes), "1.5 KiB");
        assert_eq!(value_label(536, Unit::Bytes), "536 B");
        assert_eq!(value_label(6 * 1024 * 1024, Unit::Bytes), "6 MiB");
        assert_eq!(value_label(40_000, Unit::Micros), "40.0 ms");
        assert_eq!(value_label(0, Unit::Micros), "0 µs");
        assert_eq!(axis_max(2048, Unit::Bytes), 2048);
        assert_eq!(axis_max(2049, Unit::Bytes), 3072);
        assert_eq!(axis_max(100_000, Unit::Bytes), 131_072);
        assert_eq!(axis_max(0, Unit::Bytes), 1);
        assert_eq!(axis_max(3, Unit::Bytes), 3);
        assert_eq!(axis_max(12, Unit::Segments), 12);
        assert_eq!(axis_max(8300, Unit::Micros), 10_000);
    }
}
