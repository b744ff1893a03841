//! What the Compare view shows of the runs marked for comparison: their latency CDFs on one
//! scale, their waits by class side by side, and what each one's spec changed from the first
//! one's. Pure (the state in, numbers and words out), tested natively.
//!
//! The x axis is logarithmic, in whole decades: a loopback run of 0.05 ms requests and a Nagle
//! run of 88 ms ones are both readable on it, where a linear axis would squash the fast run
//! against 0. The y axis is the fraction of the run's requests, 0 to 1, linear.

use ackscope_shared::analysis::percentile;
use ackscope_shared::attribution::StallClass;
use ackscope_shared::spec::changes;
use ackscope_shared::tried;

use crate::state::{AppState, Attribution, Run, RunKey, Source};
use crate::text::ClassText;

/// The most points one run's line has: enough for a smooth curve at the plot's width, few
/// enough that a 100,000-request run stays a small DOM.
pub const MAX_POINTS: usize = 500;
/// The plot area, in SVG pixels (the axes are drawn around it).
pub const PLOT_WIDTH: f64 = 640.0;
pub const PLOT_HEIGHT: f64 = 220.0;
/// Latencies below this are drawn at it: a microsecond is below what the probe resolves on
/// loopback, and a log scale has no 0.
pub const MIN_MS: f64 = 0.001;
/// Distinct line colours (`series-0` …): a sixth run reuses the first colour.
pub const SERIES: usize = 6;
/// Minor ticks (2 and 5 x 10^k) are labelled when a decade is at least this wide: their labels
/// then do not run into each other.
const LABEL_MINOR_DECADE_PX: f64 = 120.0;
/// The axis a plot without any request yet shows.
const EMPTY_DOMAIN_MS: (f64, f64) = (0.1, 100.0);

/// One point of a CDF: `fraction` of the run's requests took at most `ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CdfPoint {
    pub ms: f64,
    pub fraction: f64,
}

/// The index in a sorted list of `len` values of the nearest-rank percentile `pct`: the one
/// shared's `analysis::percentile` returns, so that the line passes through the summary's p50
/// and p99.
fn rank_index(len: usize, pct: f64) -> usize {
    let rank = ((pct / 100.0) * len as f64).ceil() as usize;
    rank.clamp(1, len) - 1
}

/// The CDF of sorted latencies, downsampled to at most `max_points` points (at least the four
/// below): evenly spaced ranks plus the exact first, p50, p99 and last requests, so that the
/// line starts and ends where the run did and passes through the numbers the summary prints.
pub fn cdf_points(sorted_ns: &[u64], max_points: usize) -> Vec<CdfPoint> {
    let len = sorted_ns.len();
    if len == 0 {
        return Vec::new();
    }
    let kept = [0, rank_index(len, 50.0), rank_index(len, 99.0), len - 1];
    let indices: Vec<usize> = if len <= max_points.max(kept.len()) {
        (0..len).collect()
    } else {
        let spread = max_points.saturating_sub(kept.len());
        // `len - 1 > spread + 1` here, so these are distinct and strictly inside the list.
        let mut indices: Vec<usize> = (1..=spread).map(|k| k * (len - 1) / (spread + 1)).collect();
        indices.extend(kept);
        indices.sort_unstable();
        indices.dedup();
        indices
    };
    indices
        .into_iter()
        .map(|i| CdfPoint { ms: sorted_ns[i] as f64 / 1e6, fraction: (i + 1) as f64 / len as f64 })
        .collect()
}

/// Milliseconds to x on a log scale whose ends are powers of ten.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogScale {
    /// The axis runs from 10^lo to 10^hi ms.
    lo: i32,
    hi: i32,
    width_px: f64,
}

/// One mark on an axis; unlabelled ones are grid lines only.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisTick {
    /// x for the latency axis, y for the fraction axis, in plot pixels.
    pub at: f64,
    pub label: Option<String>,
}

impl LogScale {
    /// The whole decades around `min_ms..=max_ms` (at least one).
    pub fn fit(min_ms: f64, max_ms: f64, width_px: f64) -> LogScale {
        // The slack keeps an exact power of ten (log10 gives 1.9999999 for some) on its decade.
        let lo = (min_ms.max(MIN_MS).log10() + 1e-9).floor() as i32;
        let hi = (max_ms.max(MIN_MS).log10() - 1e-9).ceil() as i32;
        LogScale { lo, hi: hi.max(lo + 1), width_px }
    }

    /// The x of a latency, clamped to the axis.
    pub fn x(&self, ms: f64) -> f64 {
        let decades = f64::from(self.hi - self.lo);
        let at = (ms.max(MIN_MS).log10() - f64::from(self.lo)) / decades;
        at.clamp(0.0, 1.0) * self.width_px
    }

    /// The axis's ends in ms.
    pub fn domain_ms(&self) -> (f64, f64) {
        (10f64.powi(self.lo), 10f64.powi(self.hi))
    }

    /// 1, 2 and 5 x 10^k ms across the axis; the powers of ten are labelled, the others when
    /// their decade is wide enough.
    pub fn ticks(&self) -> Vec<AxisTick> {
        let decade_px = self.width_px / f64::from(self.hi - self.lo);
        let label_minor = decade_px >= LABEL_MINOR_DECADE_PX;
        let mut ticks = Vec::new();
        for exp in self.lo..=self.hi {
            for mantissa in [1.0, 2.0, 5.0] {
                if exp == self.hi && mantissa > 1.0 {
                    break;
                }
                let ms = mantissa * 10f64.powi(exp);
                let labelled = mantissa == 1.0 || label_minor;
                ticks.push(AxisTick {
                    at: self.x(ms),
                    label: labelled.then(|| ms_label(mantissa, exp)),
                });
            }
        }
        ticks
    }
}

/// "0.05", "2", "100": `mantissa x 10^exp` ms with no more decimals than it has.
fn ms_label(mantissa: f64, exp: i32) -> String {
    let decimals = usize::try_from(-exp).unwrap_or(0);
    format!("{:.*}", decimals, mantissa * 10f64.powi(exp))
}

/// The fraction axis: quarters, from 0 at the bottom to 1 at the top of the plot.
pub fn fraction_ticks(height_px: f64) -> Vec<AxisTick> {
    ["0", "0.25", "0.5", "0.75", "1"]
        .iter()
        .enumerate()
        .map(|(i, label)| AxisTick {
            at: fraction_y(i as f64 / 4.0, height_px),
            label: Some(label.to_string()),
        })
        .collect()
}

fn fraction_y(fraction: f64, height_px: f64) -> f64 {
    (1.0 - fraction) * height_px
}

/// A polyline's `points`: the CDF in plot pixels, rising from the x axis at the fastest
/// request (a CDF is 0 left of it).
pub fn polyline(points: &[CdfPoint], scale: &LogScale, height_px: f64) -> String {
    let xy = |ms: f64, fraction: f64| {
        format!("{},{}", round(scale.x(ms)), round(fraction_y(fraction, height_px)))
    };
    points
        .first()
        .map(|first| xy(first.ms, 0.0))
        .into_iter()
        .chain(points.iter().map(|point| xy(point.ms, point.fraction)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A tenth of a pixel: below what anyone sees, and it keeps the DOM small.
fn round(px: f64) -> f64 {
    (px * 10.0).round() / 10.0
}

/// The "what changed" line: the spec differences joined by "; ".
pub fn what_changed(changes: &[String]) -> String {
    if changes.is_empty() {
        "no change in the spec".to_string()
    } else {
        changes.join("; ")
    }
}

/// "live", or "from NAME" for a file's run.
pub fn source_text(state: &AppState, source: Source) -> String {
    match source {
        Source::Live => "live".to_string(),
        Source::File(id) => {
            let name = state.file(id).map_or("a closed file", |file| file.name.as_str());
            format!("from {name}")
        }
    }
}

/// One run's cell of the waits table.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassCell {
    pub count: u32,
    /// "43.6" (one decimal, as the summary's lines); `None` without any wait of the class.
    pub median_ms: Option<String>,
    /// The summary's lines of this class, one per direction ("4 stalls: Nagle x delayed ACK,
    /// client->server, median 43.6 ms"): the cell's tooltip.
    pub title: String,
}

/// One class of waits across the compared runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRow {
    pub class: StallClass,
    /// One per compared run, in their order.
    pub cells: Vec<ClassCell>,
}

/// The waits of each run by class: one row per class that any run has, in the order shared
/// declares the classes. The summary's lines are per class and direction; here the directions
/// are added up, and the median is over the class's waits in both (nearest-rank, as the
/// summary's).
pub fn class_rows(runs: &[&Attribution]) -> Vec<ClassRow> {
    let mut classes: Vec<StallClass> =
        runs.iter().flat_map(|run| run.classes.iter().map(|summary| summary.class)).collect();
    classes.sort_unstable();
    classes.dedup();
    classes
        .into_iter()
        .map(|class| ClassRow {
            class,
            cells: runs.iter().map(|run| class_cell(class, run)).collect(),
        })
        .collect()
}

/// A class's count is its summary lines' (every wait, a watch's too, whether in a row or
/// not); its median is over the waits the run lists.
fn class_cell(class: StallClass, run: &Attribution) -> ClassCell {
    let mut waits: Vec<u64> =
        run.stalls.iter().filter(|stall| stall.class == class).map(|stall| stall.wait_ns).collect();
    waits.sort_unstable();
    let count: u32 =
        run.classes.iter().filter(|summary| summary.class == class).map(|s| s.count).sum();
    let median_ms =
        (!waits.is_empty()).then(|| format!("{:.1}", percentile(&waits, 50.0) as f64 / 1e6));
    let lines: Vec<String> = run
        .classes
        .iter()
        .filter(|summary| summary.class == class)
        .map(|summary| ClassText::of(summary).sentence)
        .collect();
    let title =
        if lines.is_empty() { format!("no waits: {}", class.name()) } else { lines.join("\n") };
    ClassCell { count, median_ms, title }
}

/// One compared run as the view shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ComparedRun {
    pub key: RunKey,
    /// "#2"
    pub name: String,
    /// `Scenario::describe`.
    pub describe: String,
    /// "live" or "from NAME".
    pub from: String,
    /// "p50 0.06 ms, p99 0.08 ms" (two decimals, as the summary), or "no requests yet".
    pub figures: String,
    /// The line's colour class: "series-0" ….
    pub series: String,
    /// The polyline's `points`, in plot pixels.
    pub points: String,
    /// For every run after the first: "#1 vs #2" and what its spec changed from the first's.
    pub changes: Option<(String, String)>,
}

/// Everything the Compare view draws.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub runs: Vec<ComparedRun>,
    pub x_ticks: Vec<AxisTick>,
    pub y_ticks: Vec<AxisTick>,
    pub classes: Vec<ClassRow>,
}

impl Comparison {
    /// The runs marked for comparison, if there are two or more of them.
    pub fn of(state: &AppState) -> Option<Comparison> {
        let keys = state.compared();
        let runs: Vec<(RunKey, &Run)> =
            keys.iter().filter_map(|&key| Some((key, state.run(key)?))).collect();
        let (&(first_key, first), _) = runs.split_first().filter(|_| runs.len() >= 2)?;

        let curves: Vec<Vec<CdfPoint>> = runs
            .iter()
            // One point goes to the line's start on the x axis.
            .map(|(_, run)| cdf_points(run.latencies_ns(), MAX_POINTS - 1))
            .collect();
        let fastest = curves.iter().filter_map(|c| c.first()).map(|p| p.ms).reduce(f64::min);
        let slowest = curves.iter().filter_map(|c| c.last()).map(|p| p.ms).reduce(f64::max);
        let (min_ms, max_ms) = fastest.zip(slowest).unwrap_or(EMPTY_DOMAIN_MS);
        let scale = LogScale::fit(min_ms, max_ms, PLOT_WIDTH);

        let name_in = |key: RunKey, mixed: bool| {
            let name = format!("#{}", key.run.0);
            if mixed {
                format!("{name} ({})", source_text(state, key.source))
            } else {
                name
            }
        };
        let compared = runs
            .iter()
            .zip(&curves)
            .enumerate()
            .map(|(i, (&(key, run), curve))| {
                let summary = run.summary();
                let figures = if summary.requests == 0 {
                    "no requests yet".to_string()
                } else {
                    format!("p50 {:.2} ms, p99 {:.2} ms", summary.p50_ms, summary.p99_ms)
                };
                let changes = (i > 0).then(|| {
                    let mixed = key.source != first_key.source;
                    // The runs in the order they are compared, as the values are: the first
                    // marked's, then this one's.
                    let vs = format!("{} vs {}", name_in(first_key, mixed), name_in(key, mixed));
                    // A watch's run after `--try` differs from the one before in what was
                    // changed on the running program, not in its spec.
                    let mut changed = changes(&first.spec, &run.spec);
                    changed.extend(tried::changes(first.tried.entries(), run.tried.entries()));
                    (vs, what_changed(&changed))
                });
                ComparedRun {
                    key,
                    name: format!("#{}", key.run.0),
                    describe: run.spec.describe(),
                    from: source_text(state, key.source),
                    figures,
                    series: format!("series-{}", i % SERIES),
                    points: polyline(curve, &scale, PLOT_HEIGHT),
                    changes,
                }
            })
            .collect();
        let attributions: Vec<&Attribution> =
            runs.iter().map(|(_, run)| run.attribution()).collect();
        Some(Comparison {
            runs: compared,
            x_ticks: scale.ticks(),
            y_ticks: fraction_ticks(PLOT_HEIGHT),
            classes: class_rows(&attributions),
        })
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::analysis::{percentile, RunAnalysis};
    use ackscope_shared::tried::{OptionTried, TriedOption};
    use ackscope_shared::wire::{Instruments, RunOutcome, ToBrowser};
    use ackscope_shared::{NoDelay, RrSpec, RunId, Scenario, Side, WatchSpec};

    use super::*;
    use crate::fixtures::{hello, nagle_run, rr_started, MS, US};
    use crate::state::apply;

    #[test]
    fn a_short_cdf_keeps_every_request() {
        let points = cdf_points(&[MS, 2 * MS, 4 * MS], 500);
        assert_eq!(
            points,
            [
                CdfPoint { ms: 1.0, fraction: 1.0 / 3.0 },
                CdfPoint { ms: 2.0, fraction: 2.0 / 3.0 },
                CdfPoint { ms: 4.0, fraction: 1.0 },
            ]
        );
        assert!(cdf_points(&[], 500).is_empty());
    }

    #[test]
    fn a_long_cdf_is_downsampled_through_its_first_p50_p99_and_last() {
        // 100,000 distinct latencies, 1 us apart.
        let sorted: Vec<u64> = (1..=100_000).map(|i| i * US).collect();
        let points = cdf_points(&sorted, 500);
        assert!(points.len() <= 500 && points.len() > 490, "{}", points.len());
        assert!(points.windows(2).all(|w| w[0].ms < w[1].ms && w[0].fraction < w[1].fraction));
        let first = points.first().copied();
        let last = points.last().copied();
        assert_eq!(first, Some(CdfPoint { ms: 0.001, fraction: 1e-5 }));
        assert_eq!(last, Some(CdfPoint { ms: 100.0, fraction: 1.0 }));
        for pct in [50.0, 99.0] {
            let ms = percentile(&sorted, pct) as f64 / 1e6;
            let at = points.iter().find(|p| p.ms == ms).expect("the exact percentile is a point");
            assert!((at.fraction - pct / 100.0).abs() < 1e-9, "{pct}: {at:?}");
        }
        // Even a tiny budget keeps the four that matter.
        assert_eq!(cdf_points(&sorted, 2).len(), 4);
    }

    #[test]
    fn the_log_scale_spans_whole_decades_with_labelled_powers_of_ten() {
        let scale = LogScale::fit(0.05, 88.0, 600.0);
        assert_eq!(scale.domain_ms(), (0.01, 100.0));
        assert_eq!(scale.x(0.01), 0.0);
        assert_eq!(scale.x(100.0), 600.0);
        assert!((scale.x(1.0) - 300.0).abs() < 1e-9);
        assert_eq!(scale.x(1e6), 600.0, "clamped");
        assert_eq!(scale.x(0.0), 0.0, "0 is drawn at the left edge");
        let ticks = scale.ticks();
        let labels: Vec<&str> = ticks.iter().filter_map(|tick| tick.label.as_deref()).collect();
        assert_eq!(
            labels,
            ["0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50", "100"]
        );
        assert_eq!(ticks.len(), 13);

        // Narrow decades label their powers of ten only.
        let wide = LogScale::fit(0.001, 1000.0, 600.0);
        let ticks = wide.ticks();
        let labels: Vec<&str> = ticks.iter().filter_map(|tick| tick.label.as_deref()).collect();
        assert_eq!(labels, ["0.001", "0.01", "0.1", "1", "10", "100", "1000"]);
        // An exact power of ten stays on its decade; one value still gets a decade.
        assert_eq!(LogScale::fit(1.0, 100.0, 1.0).domain_ms(), (1.0, 100.0));
        assert_eq!(LogScale::fit(3.0, 3.0, 1.0).domain_ms(), (1.0, 10.0));
    }

    #[test]
    fn lines_start_on_the_x_axis_and_fractions_go_up() {
        let scale = LogScale::fit(1.0, 10.0, 100.0);
        let points = [CdfPoint { ms: 1.0, fraction: 0.5 }, CdfPoint { ms: 10.0, fraction: 1.0 }];
        assert_eq!(polyline(&points, &scale, 200.0), "0,200 0,100 100,0");
        assert_eq!(polyline(&[], &scale, 200.0), "");
        let ticks = fraction_ticks(200.0);
        assert_eq!(ticks.first().map(|t| t.at), Some(200.0));
        assert_eq!(ticks.last().map(|t| (t.at, t.label.clone())), Some((0.0, Some("1".into()))));
    }

    #[test]
    fn waits_are_tallied_per_class_over_both_directions() {
        let spec = RrSpec::default();
        let mut nagle = RunAnalysis::new();
        nagle.push_all(&nagle_run(5, 44 * MS));
        let nagle = Attribution::of(&nagle, Some(&spec));
        let mut quick = RunAnalysis::new();
        quick.push_all(&nagle_run(5, 30 * US));
        let quick = Attribution::of(&quick, Some(&spec));

        let rows = class_rows(&[&nagle, &quick]);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].class, StallClass::NagleDelayedAck);
        let [held, none] = [&rows[0].cells[0], &rows[0].cells[1]];
        assert_eq!(held.count, 8, "four each way");
        assert_eq!(held.median_ms.as_deref(), Some("44.0"));
        assert_eq!(held.title.lines().count(), 2, "{}", held.title);
        assert!(
            held.title.contains("4 stalls: Nagle x delayed ACK, client->server"),
            "{}",
            held.title
        );
        assert_eq!((none.count, none.median_ms.as_deref()), (0, None));
        assert_eq!(none.title, "no waits: Nagle x delayed ACK");
        assert!(class_rows(&[&quick, &quick]).is_empty());
    }

    #[test]
    fn the_comparison_of_a_nagle_and_a_nodelay_run() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(&mut state, rr_started(1, RrSpec { requests: 20, ..RrSpec::default() }));
        apply(&mut state, ToBrowser::Events { run: RunId(1), events: nagle_run(20, 44 * MS) });
        apply(&mut state, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
        let nodelay = RrSpec {
            requests: 20,
            nodelay: NoDelay { client: true, server: true },
            ..RrSpec::default()
        };
        apply(&mut state, rr_started(2, nodelay));
        apply(&mut state, ToBrowser::Events { run: RunId(2), events: nagle_run(20, 30 * US) });

        state.toggle_compare(RunKey::live(RunId(1)));
        assert_eq!(Comparison::of(&state), None, "one run is no comparison");
        state.toggle_compare(RunKey::live(RunId(2)));
        let comparison = Comparison::of(&state).expect("two runs");
        let [nagle, nodelay] = [&comparison.runs[0], &comparison.runs[1]];
        assert_eq!(nagle.name, "#1");
        assert_eq!(nagle.from, "live");
        assert_eq!(nagle.describe, "20 x 2048 B, keep-alive, Nagle on both sides");
        assert_eq!(nagle.changes, None, "the first is what the others are compared with");
        assert_eq!(
            nodelay.changes,
            Some(("#1 vs #2".to_string(), "TCP_NODELAY: both sides off -> on".to_string()))
        );
        // Marked the other way round, it reads the other way round: runs and values alike.
        state.clear_compare();
        state.toggle_compare(RunKey::live(RunId(2)));
        state.toggle_compare(RunKey::live(RunId(1)));
        let reversed = Comparison::of(&state).expect("two runs");
        assert_eq!(
            reversed.runs[1].changes,
            Some(("#2 vs #1".to_string(), "TCP_NODELAY: both sides on -> off".to_string()))
        );
        state.clear_compare();
        state.toggle_compare(RunKey::live(RunId(1)));
        state.toggle_compare(RunKey::live(RunId(2)));
        let comparison = Comparison::of(&state).expect("two runs");
        let [nagle, nodelay] = [&comparison.runs[0], &comparison.runs[1]];
        assert_eq!([nagle.series.as_str(), nodelay.series.as_str()], ["series-0", "series-1"]);
        assert!(nagle.figures.starts_with("p50 88."), "{}", nagle.figures);
        // 0.05 ms to 88 ms: four decades, both lines inside them.
        let labels: Vec<&str> =
            comparison.x_ticks.iter().filter_map(|tick| tick.label.as_deref()).collect();
        assert_eq!(labels.first(), Some(&"0.01"));
        assert_eq!(labels.last(), Some(&"100"));
        assert_eq!(nagle.points.split(' ').count(), 21, "the start and one point per request");
        let start = nodelay.points.split(' ').next().unwrap_or_default();
        assert!(start.ends_with(",220"), "rises from the x axis: {}", nodelay.points);

        assert_eq!(comparison.classes.len(), 1);
        let counts: Vec<u32> = comparison.classes[0].cells.iter().map(|cell| cell.count).collect();
        assert_eq!(counts, [38, 0], "two per request after the first; none without Nagle");
    }

    #[test]
    fn a_watch_split_by_a_tried_option_names_what_was_applied_to_which_process() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        let watch = || Scenario::Watch(WatchSpec { ports: vec![8080], ..WatchSpec::default() });
        let started = |run| ToBrowser::RunStarted {
            run: RunId(run),
            spec: watch(),
            instruments: Instruments::default(),
        };
        // The programs as they were: the packets of Nagle x delayed ACK exchanges, both ways.
        let segments = |requests| -> Vec<_> {
            ackscope_shared::synthetic::nagle_run_with_packets(requests, 44 * MS)
                .into_iter()
                .filter(|e| matches!(e.kind, ackscope_shared::EventKind::Segment(_)))
                .collect()
        };
        apply(&mut state, started(1));
        apply(&mut state, ToBrowser::Events { run: RunId(1), events: segments(5) });
        apply(&mut state, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
        apply(&mut state, started(2));
        let tried = OptionTried {
            option: TriedOption::NoDelay,
            side: Side::Server,
            pid: 4711,
            command: "python3".into(),
            sockets: 1,
            already_on: 0,
        };
        apply(&mut state, ToBrowser::OptionsTried { run: RunId(2), tried: vec![tried] });
        state.toggle_compare(RunKey::live(RunId(1)));
        state.toggle_compare(RunKey::live(RunId(2)));
        let comparison = Comparison::of(&state).expect("two runs");
        assert_eq!(
            comparison.runs[1].changes,
            Some((
                "#1 vs #2".to_string(),
                "TCP_NODELAY on the server: off -> on (applied to the running process 4711, \
                 python3)"
                    .to_string()
            ))
        );
        // The waits by class are the watch's stalls, found from its packets: run 1's, none yet
        // in run 2.
        let [row] = &comparison.classes[..] else { panic!("{:?}", comparison.classes) };
        assert_eq!(row.class, StallClass::NagleDelayedAck);
        assert!(row.cells[0].count >= 4, "{row:?}");
        assert_eq!(row.cells[0].median_ms.as_deref(), Some("44.0"), "{row:?}");
        assert_eq!(row.cells[1].count, 0, "{row:?}");
    }

    #[test]
    fn runs_of_a_file_are_named_by_their_source() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(&mut state, rr_started(1, RrSpec { requests: 3, ..RrSpec::default() }));
        apply(&mut state, ToBrowser::Events { run: RunId(1), events: nagle_run(3, 44 * MS) });
        let bytes = state.live.file_bytes().expect("recorded").to_vec();
        let file = state.open_file("story1.ackscope", &bytes);
        let file_run = RunKey { source: Source::File(file), run: RunId(1) };
        state.toggle_compare(file_run);
        state.toggle_compare(RunKey::live(RunId(1)));
        let comparison = Comparison::of(&state).expect("two runs");
        assert_eq!(comparison.runs[0].from, "from story1.ackscope");
        assert_eq!(
            comparison.runs[1].changes,
            Some((
                "#1 (from story1.ackscope) vs #1 (live)".to_string(),
                "no change in the spec".to_string()
            ))
        );
        assert_eq!(what_changed(&["a".into(), "b".into()]), "a; b");
    }
}
