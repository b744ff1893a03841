//! Time to pixels: the one mapping every mark of the timeline goes through, and its axis ticks.
//!
//! Times are nanoseconds: offsets from a request's own start in the aligned view (see
//! `layout.rs` for why), the run's clock in the run-clock view. A [`Scale`] shows a window of
//! them, `from_ns .. from_ns + domain_ns`: the whole fitted domain at first, a part of it once
//! the user zooms. Times stay integers here; only pixels are floats.

const NS_PER_US: u64 = 1_000;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;

/// The shortest domain a fitted axis shows: a run of fast requests still gets a readable 0-1 ms
/// axis instead of stretching microseconds over the whole width.
pub const MIN_DOMAIN_NS: u64 = NS_PER_MS;

/// The narrowest window zooming reaches: 1 µs across the plot is below a syscall's own cost.
pub const MIN_WINDOW_NS: u64 = NS_PER_US;

/// Maps `from_ns ..= from_ns + domain_ns` onto `0 ..= width_px`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    from_ns: u64,
    domain_ns: u64,
    width_px: f64,
}

/// One labelled mark on the axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub x: f64,
    /// "0", "20 ms", "0.4 ms", "350 µs".
    pub label: String,
}

impl Scale {
    /// A scale from 0 whose domain covers `extent_ns`, rounded up to a round number (so the
    /// axis ends on a tick) and at least [`MIN_DOMAIN_NS`].
    ///
    /// Rounding also keeps the scale still while a live run's maximum creeps up: every mark
    /// depends on the scale, so a scale that changed with each new request would redraw every
    /// row each frame.
    pub fn fit(extent_ns: u64, width_px: f64) -> Scale {
        Scale { from_ns: 0, domain_ns: nice_ceil_ns(extent_ns.max(MIN_DOMAIN_NS)), width_px }
    }

    /// A window `from_ns .. from_ns + domain_ns` (at least [`MIN_WINDOW_NS`] wide).
    pub fn window(from_ns: u64, domain_ns: u64, width_px: f64) -> Scale {
        Scale { from_ns, domain_ns: domain_ns.max(MIN_WINDOW_NS), width_px }
    }

    pub fn from_ns(&self) -> u64 {
        self.from_ns
    }

    pub fn to_ns(&self) -> u64 {
        self.from_ns.saturating_add(self.domain_ns)
    }

    pub fn domain_ns(&self) -> u64 {
        self.domain_ns
    }

    pub fn width_px(&self) -> f64 {
        self.width_px
    }

    /// Nanoseconds per pixel.
    pub fn ns_per_px(&self) -> f64 {
        self.domain_ns as f64 / self.width_px.max(1.0)
    }

    /// The x of a time, clamped to the plot: a span of a request still in flight may run past
    /// the domain until the next rescale, and a zoomed window cuts spans at its edges.
    pub fn x(&self, at_ns: u64) -> f64 {
        let inside = at_ns.clamp(self.from_ns, self.to_ns()) - self.from_ns;
        inside as f64 / self.domain_ns as f64 * self.width_px
    }

    /// The time under pixel `x` (clamped to the plot).
    pub fn ns_at(&self, x: f64) -> u64 {
        let fraction = (x / self.width_px.max(1.0)).clamp(0.0, 1.0);
        self.from_ns + (fraction * self.domain_ns as f64).round() as u64
    }

    /// Whether any of `start_ns ..= end_ns` is in the window.
    pub fn overlaps(&self, start_ns: u64, end_ns: u64) -> bool {
        end_ns >= self.from_ns && start_ns <= self.to_ns()
    }

    /// The window `factor` times as wide (below 1: zoom in), keeping the time under pixel
    /// `anchor_x` where it is, kept inside `0 ..= limit_ns`.
    pub fn zoomed(&self, factor: f64, anchor_x: f64, limit_ns: u64) -> Scale {
        let anchor_ns = self.ns_at(anchor_x) as f64;
        let fraction = (anchor_x / self.width_px.max(1.0)).clamp(0.0, 1.0);
        let domain = (self.domain_ns as f64 * factor).round() as u64;
        let domain = domain.clamp(MIN_WINDOW_NS, limit_ns.max(MIN_WINDOW_NS));
        let from = (anchor_ns - fraction * domain as f64).max(0.0) as u64;
        Scale::window(from, domain, self.width_px).clamped(limit_ns)
    }

    /// The window moved by `dx_px` pixels (positive: later), kept inside `0 ..= limit_ns`.
    pub fn panned(&self, dx_px: f64, limit_ns: u64) -> Scale {
        let shift = dx_px * self.ns_per_px();
        let from = (self.from_ns as f64 + shift).max(0.0) as u64;
        Scale::window(from, self.domain_ns, self.width_px).clamped(limit_ns)
    }

    /// Moved back inside `0 ..= limit_ns` if it ran past its end.
    fn clamped(self, limit_ns: u64) -> Scale {
        let from = self.from_ns.min(limit_ns.saturating_sub(self.domain_ns));
        Scale { from_ns: from, ..self }
    }

    /// Evenly spaced ticks over the window, at most `max_intervals` intervals of 1, 2 or 5 x
    /// 10^k ns each, labelled in the unit that suits the step.
    pub fn ticks(&self, max_intervals: u64) -> Vec<Tick> {
        let step_ns = tick_step_ns(self.domain_ns, max_intervals.max(1));
        let first = self.from_ns.div_ceil(step_ns);
        let last = self.to_ns() / step_ns;
        (first..=last)
            .map(|i| {
                let at_ns = i * step_ns;
                Tick { x: self.x(at_ns), label: time_label(at_ns, step_ns) }
            })
            .collect()
    }
}

/// `at_ns` in the unit of `step_ns`, with just enough decimals to tell neighbouring ticks apart:
/// "0", "20 ms", "0.4 ms", "350 µs", "1.5 s".
pub fn time_label(at_ns: u64, step_ns: u64) -> String {
    if at_ns == 0 {
        return "0".to_string();
    }
    let (unit, per) = match step_ns {
        s if s >= NS_PER_S => ("s", NS_PER_S),
        s if s >= 100 * NS_PER_US => ("ms", NS_PER_MS),
        s if s >= 10 => ("µs", NS_PER_US),
        _ => ("ns", 1),
    };
    let decimals = match step_ns / per.max(1) {
        0 if step_ns * 10 >= per => 1,
        0 if step_ns * 100 >= per => 2,
        0 => 3,
        _ => 0,
    };
    format!("{:.*} {unit}", decimals, at_ns as f64 / per as f64)
}

/// A duration for people, in the unit that reads best: "43.7 ms", "350 µs", "1.25 s", "80 ns".
pub fn format_duration(ns: u64) -> String {
    match ns {
        n if n >= NS_PER_S => format!("{:.2} s", n as f64 / NS_PER_S as f64),
        n if n >= NS_PER_MS => format!("{:.1} ms", n as f64 / NS_PER_MS as f64),
        n if n >= NS_PER_US => format!("{:.1} µs", n as f64 / NS_PER_US as f64),
        n => format!("{n} ns"),
    }
}

/// The smallest round number >= `ns`: one of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k.
/// The steps are close enough that at most a fifth of the width is wasted.
pub fn nice_ceil_ns(ns: u64) -> u64 {
    const MANTISSAS: [u64; 10] = [10, 12, 15, 20, 25, 30, 40, 50, 60, 80];
    let mut decade: u64 = 1;
    loop {
        for mantissa in MANTISSAS {
            let candidate = mantissa.saturating_mul(decade) / 10;
            if candidate >= ns && candidate > 0 {
                return candidate;
            }
        }
        match decade.checked_mul(10) {
            Some(next) => decade = next,
            None => return ns,
        }
    }
}

fn tick_step_ns(domain_ns: u64, max_intervals: u64) -> u64 {
    let mut decade: u64 = 1;
    loop {
        for mantissa in [1, 2, 5] {
            let step = mantissa * decade;
            if domain_ns / step <= max_intervals {
                return step;
            }
        }
        match decade.checked_mul(10) {
            Some(next) => decade = next,
            None => return domain_ns.max(1),
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::fixtures::{MS, US};

    #[test]
    fn offsets_map_linearly_onto_the_width_and_clamp() {
        let scale = Scale::fit(100 * MS, 800.0);
        assert_eq!(scale.domain_ns(), 100 * MS);
        assert_eq!(scale.x(0), 0.0);
        assert_eq!(scale.x(25 * MS), 200.0);
        assert_eq!(scale.x(100 * MS), 800.0);
        assert_eq!(scale.x(250 * MS), 800.0, "past the domain stays on the plot");
    }

    #[test]
    fn the_domain_rounds_up_and_never_goes_below_one_millisecond() {
        // Story 1's keep-alive run: 88 ms per request.
        assert_eq!(Scale::fit(88 * MS + 300 * US, 800.0).domain_ns(), 100 * MS);
        assert_eq!(Scale::fit(44 * MS, 800.0).domain_ns(), 50 * MS);
        assert_eq!(Scale::fit(101 * MS, 800.0).domain_ns(), 120 * MS);
        // TCP_NODELAY on both sides: 70 µs per request still gets a 1 ms axis.
        assert_eq!(Scale::fit(70 * US, 800.0).domain_ns(), MS);
        assert_eq!(Scale::fit(0, 800.0).domain_ns(), MS);
        assert_eq!(nice_ceil_ns(1), 1);
        assert_eq!(nice_ceil_ns(MS), MS);
        assert_eq!(nice_ceil_ns(u64::MAX), u64::MAX);
    }

    #[test]
    fn ticks_are_round_and_labelled_in_milliseconds() {
        let ticks = Scale::fit(88 * MS, 800.0).ticks(6);
        let labels: Vec<&str> = ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["0", "20 ms", "40 ms", "60 ms", "80 ms", "100 ms"]);
        let xs: Vec<f64> = ticks.iter().map(|t| t.x).collect();
        assert_eq!(xs, [0.0, 160.0, 320.0, 480.0, 640.0, 800.0]);

        let fast = Scale::fit(70 * US, 500.0).ticks(6);
        let labels: Vec<&str> = fast.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["0", "0.2 ms", "0.4 ms", "0.6 ms", "0.8 ms", "1.0 ms"]);
        assert_eq!(fast.last().map(|t| t.x), Some(500.0));
    }

    #[test]
    fn a_zoom_keeps_the_time_under_the_cursor_and_stays_inside_the_run() {
        let home = Scale::fit(100 * MS, 1000.0);
        let zoomed = home.zoomed(0.5, 250.0, home.domain_ns());
        assert_eq!(zoomed.domain_ns(), 50 * MS);
        assert_eq!(zoomed.ns_at(250.0), home.ns_at(250.0), "the anchor stays put");
        // Zooming out past the whole run stops at the whole run.
        let out = zoomed.zoomed(10.0, 500.0, home.domain_ns());
        assert_eq!((out.from_ns(), out.domain_ns()), (0, 100 * MS));
        // Zooming in stops at a microsecond across the plot.
        let deep = home.zoomed(1e-9, 0.0, home.domain_ns());
        assert_eq!(deep.domain_ns(), MIN_WINDOW_NS);
        // Panning moves by pixels and never leaves the run.
        let panned = zoomed.panned(100.0, home.domain_ns());
        assert_eq!(panned.from_ns(), zoomed.from_ns() + 5 * MS);
        assert_eq!(zoomed.panned(1e9, home.domain_ns()).to_ns(), 100 * MS);
        assert_eq!(zoomed.panned(-1e9, home.domain_ns()).from_ns(), 0);
    }

    #[test]
    fn a_zoomed_window_clips_and_ticks_in_the_unit_that_suits_it() {
        let window = Scale::window(43 * MS, 500 * US, 500.0);
        assert_eq!(window.x(0), 0.0, "before the window: its left edge");
        assert_eq!(window.x(43 * MS + 250 * US), 250.0);
        assert_eq!(window.x(90 * MS), 500.0);
        assert!(window.overlaps(40 * MS, 43 * MS + 1));
        assert!(!window.overlaps(0, 42 * MS));
        let labels: Vec<String> = window.ticks(5).into_iter().map(|t| t.label).collect();
        assert_eq!(labels, ["43.0 ms", "43.1 ms", "43.2 ms", "43.3 ms", "43.4 ms", "43.5 ms"]);
        let micro = Scale::window(2 * US, 50 * US, 500.0);
        let labels: Vec<String> = micro.ticks(5).into_iter().map(|t| t.label).collect();
        assert_eq!(labels, ["10 µs", "20 µs", "30 µs", "40 µs", "50 µs"]);
        assert_eq!(format_duration(43_712 * US), "43.7 ms");
        assert_eq!(format_duration(350 * US), "350.0 µs");
        assert_eq!(format_duration(80), "80 ns");
        assert_eq!(format_duration(1_250 * MS), "1.25 s");
    }
}
