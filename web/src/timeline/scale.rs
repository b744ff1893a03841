//! Time to pixels: the one mapping every mark of the timeline goes through, and its axis ticks.
//!
//! Times here are offsets from a request's own start (see `layout.rs` for why), in nanoseconds.

const NS_PER_MS: u64 = 1_000_000;

/// The shortest domain the axis shows: a run of fast requests still gets a readable 0-1 ms axis
/// instead of stretching microseconds over the whole width.
pub const MIN_DOMAIN_NS: u64 = NS_PER_MS;

/// Maps `0..=domain_ns` onto `0..=width_px`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    domain_ns: u64,
    width_px: f64,
}

/// One labelled mark on the axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub x: f64,
    /// "0", "20 ms", "0.4 ms".
    pub label: String,
}

impl Scale {
    /// A scale whose domain covers `extent_ns`, rounded up to a round number (so the axis ends on
    /// a tick) and at least [`MIN_DOMAIN_NS`].
    ///
    /// Rounding also keeps the scale still while a live run's maximum creeps up: every mark
    /// depends on the scale, so a scale that changed with each new request would redraw every
    /// row each frame.
    pub fn fit(extent_ns: u64, width_px: f64) -> Scale {
        Scale { domain_ns: nice_ceil_ns(extent_ns.max(MIN_DOMAIN_NS)), width_px }
    }

    pub fn domain_ns(&self) -> u64 {
        self.domain_ns
    }

    pub fn width_px(&self) -> f64 {
        self.width_px
    }

    /// The x of an offset, clamped to the plot: a span of a request still in flight may run past
    /// the domain until the next rescale.
    pub fn x(&self, offset_ns: u64) -> f64 {
        let fraction = offset_ns.min(self.domain_ns) as f64 / self.domain_ns as f64;
        fraction * self.width_px
    }

    /// Evenly spaced ticks from 0 to the end of the domain, at most `max_intervals` intervals
    /// of 1, 2 or 5 x 10^k ns each.
    pub fn ticks(&self, max_intervals: u64) -> Vec<Tick> {
        let step_ns = tick_step_ns(self.domain_ns, max_intervals.max(1));
        let decimals = decimals_for_step(step_ns);
        (0..=self.domain_ns / step_ns)
            .map(|i| {
                let at_ns = i * step_ns;
                let label = if at_ns == 0 {
                    "0".to_string()
                } else {
                    format!("{:.*} ms", decimals, at_ns as f64 / NS_PER_MS as f64)
                };
                Tick { x: self.x(at_ns), label }
            })
            .collect()
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

/// Enough decimals to tell neighbouring ticks apart, no more.
fn decimals_for_step(step_ns: u64) -> usize {
    match step_ns {
        s if s >= NS_PER_MS => 0,
        s if s >= NS_PER_MS / 10 => 1,
        s if s >= NS_PER_MS / 100 => 2,
        _ => 3,
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
}
