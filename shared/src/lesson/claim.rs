//! What a lesson says its step's run shows, as data (`expect: p50_ms > 80`): checked against the
//! step's recording by `ackscope lesson check` and the tests, so that a lesson's words and its
//! recordings cannot drift apart unseen.

use crate::report::RunReport;
use crate::stall::StallClass;

/// One `expect:` line: a figure of the run's report and the bound it must keep.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub figure: Figure,
    pub bound: Bound,
    /// The lesson file's line it was written on.
    pub line: usize,
}

/// A figure of a run's report, by the name `run --json` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    P50Ms,
    P99Ms,
    MaxMs,
    StalledReads,
    Requests,
    GoodputMbps,
    /// A bulk run's time the client waited for the server's window, and its zero-window probes.
    RwndLimitedMs,
    ZeroWindowProbes,
    /// Stalls of one class, every direction together.
    Stalls(StallClass),
}

/// Where a figure must be. `Between` is half open: `35..60` holds 35 and not 60.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    Below(f64),
    Above(f64),
    Equal(f64),
    Between(f64, f64),
}

/// How an `expect:` line is written, for errors.
pub const USAGE: &str = "expect: FIGURE < N | > N | = N | LOW..HIGH, FIGURE one of p50_ms, \
                         p99_ms, max_ms, stalled_reads, requests, goodput_mbps, \
                         client_rwnd_limited_ms, zero_window_probes, stalls CLASS";

impl Claim {
    /// `p50_ms > 80`, `stalls nagle_delayed_ack > 10`, `goodput_mbps 25..80`.
    pub fn parse(value: &str, line: usize) -> Result<Claim, String> {
        let words: Vec<&str> = value.split_whitespace().collect();
        let (figure, rest) = match words.as_slice() {
            ["stalls", code, rest @ ..] => {
                let class =
                    StallClass::ALL.iter().find(|c| c.code() == *code).ok_or_else(|| {
                        let codes: Vec<&str> = StallClass::ALL.iter().map(|c| c.code()).collect();
                        format!("no stall class {code:?}; the classes are {}", codes.join(", "))
                    })?;
                (Figure::Stalls(*class), rest)
            }
            [name, rest @ ..] => {
                let figure = match *name {
                    "p50_ms" => Figure::P50Ms,
                    "p99_ms" => Figure::P99Ms,
                    "max_ms" => Figure::MaxMs,
                    "stalled_reads" => Figure::StalledReads,
                    "requests" => Figure::Requests,
                    "goodput_mbps" => Figure::GoodputMbps,
                    "client_rwnd_limited_ms" => Figure::RwndLimitedMs,
                    "zero_window_probes" => Figure::ZeroWindowProbes,
                    _ => return Err(format!("no figure {name:?}; {USAGE}")),
                };
                (figure, rest)
            }
            [] => return Err(format!("an empty claim; {USAGE}")),
        };
        let number = |text: &str| {
            text.parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .ok_or_else(|| format!("{text:?} is not a number; {USAGE}"))
        };
        let bound = match rest {
            ["<", n] => Bound::Below(number(n)?),
            [">", n] => Bound::Above(number(n)?),
            ["=", n] => Bound::Equal(number(n)?),
            [range] if range.contains("..") => {
                let (low, high) = range.split_once("..").unwrap_or_default();
                let (low, high) = (number(low)?, number(high)?);
                if low >= high {
                    return Err(format!("{range}: the low end comes first; {USAGE}"));
                }
                Bound::Between(low, high)
            }
            _ => return Err(format!("no bound in {value:?}; {USAGE}")),
        };
        Ok(Claim { figure, bound, line })
    }

    /// The figure's value in `report`, if the report has it (a bulk run has no p50).
    pub fn value(&self, report: &RunReport) -> Option<f64> {
        let (rr, bulk) = (report.rr(), report.bulk());
        match self.figure {
            Figure::P50Ms => rr?.p50_ms,
            Figure::P99Ms => rr?.p99_ms,
            Figure::MaxMs => rr?.max_ms,
            Figure::StalledReads => rr?.stalled_reads.map(f64::from),
            Figure::Requests => rr.map(|rr| f64::from(rr.requests)),
            Figure::GoodputMbps => bulk.map(|bulk| bulk.goodput_mbps),
            Figure::RwndLimitedMs => bulk?.client_rwnd_limited_ms.map(f64::from),
            Figure::ZeroWindowProbes => bulk?.zero_window_probes.map(f64::from),
            Figure::Stalls(class) => {
                let stalls = report.stalls.as_ref()?;
                let count =
                    stalls.iter().filter(|s| s.class == class).map(|s| s.count).sum::<u32>();
                Some(f64::from(count))
            }
        }
    }

    /// Whether `value` of the claim's figure is within its bound.
    pub fn holds(&self, value: f64) -> bool {
        match self.bound {
            Bound::Below(n) => value < n,
            Bound::Above(n) => value > n,
            Bound::Equal(n) => value == n,
            Bound::Between(low, high) => (low..high).contains(&value),
        }
    }

    /// Whether `report` keeps the claim: its value, or what it shows instead.
    pub fn check(&self, report: &RunReport) -> Result<f64, String> {
        let value = self.value(report).ok_or_else(|| {
            format!("the recording's run ({}) has no {}", report.scenario, self.figure.name())
        })?;
        match self.holds(value) {
            true => Ok(value),
            false => {
                Err(format!("the recording shows {} {value:.2}, not {}", self.figure.name(), self))
            }
        }
    }
}

impl Figure {
    pub fn name(self) -> String {
        match self {
            Figure::P50Ms => "p50_ms".into(),
            Figure::P99Ms => "p99_ms".into(),
            Figure::MaxMs => "max_ms".into(),
            Figure::StalledReads => "stalled_reads".into(),
            Figure::Requests => "requests".into(),
            Figure::GoodputMbps => "goodput_mbps".into(),
            Figure::RwndLimitedMs => "client_rwnd_limited_ms".into(),
            Figure::ZeroWindowProbes => "zero_window_probes".into(),
            Figure::Stalls(class) => format!("stalls {}", class.code()),
        }
    }
}

impl std::fmt::Display for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.figure.name();
        match self.bound {
            Bound::Below(n) => write!(f, "{name} < {n}"),
            Bound::Above(n) => write!(f, "{name} > {n}"),
            Bound::Equal(n) => write!(f, "{name} = {n}"),
            Bound::Between(low, high) => write!(f, "{name} {low}..{high}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ReportFigures, RrFigures};

    #[test]
    fn claims_read_as_written_and_say_what_is_wrong() {
        let claim = Claim::parse("p50_ms > 80", 7).unwrap();
        assert_eq!((claim.figure, claim.bound, claim.line), (Figure::P50Ms, Bound::Above(80.0), 7));
        assert_eq!(claim.to_string(), "p50_ms > 80");
        let range = Claim::parse("goodput_mbps 25..80", 1).unwrap();
        assert_eq!(range.bound, Bound::Between(25.0, 80.0));
        let stalls = Claim::parse("stalls nagle_delayed_ack > 10", 1).unwrap();
        assert_eq!(stalls.figure, Figure::Stalls(StallClass::NagleDelayedAck));
        assert_eq!(stalls.to_string(), "stalls nagle_delayed_ack > 10");
        for (bad, says) in [
            ("p51_ms > 3", "no figure \"p51_ms\""),
            ("p50_ms >", "no bound"),
            ("p50_ms > many", "\"many\" is not a number"),
            ("p50_ms 60..35", "the low end comes first"),
            ("stalls slow > 1", "no stall class \"slow\""),
            ("p50_ms > NaN", "not a number"),
        ] {
            let error = Claim::parse(bad, 1).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    /// A request/response run's report with this p50 and these stalled reads.
    fn report(p50_ms: f64, stalled_reads: u32) -> RunReport {
        let figures = ReportFigures::Rr(RrFigures {
            requests: 20,
            duration_s: 1.0,
            rps: 20.0,
            p50_ms: Some(p50_ms),
            p99_ms: Some(p50_ms),
            max_ms: Some(p50_ms),
            stalled_reads: Some(stalled_reads),
        });
        RunReport::with_figures("rr", figures)
    }

    #[test]
    fn a_bound_is_kept_or_the_value_is_named() {
        let report = report(44.0, 7);
        assert_eq!(Claim::parse("p50_ms 35..60", 1).unwrap().check(&report), Ok(44.0));
        let missed = Claim::parse("p50_ms < 5", 1).unwrap().check(&report).unwrap_err();
        assert_eq!(missed, "the recording shows p50_ms 44.00, not p50_ms < 5");
        assert!(Claim::parse("p50_ms 44..60", 1).unwrap().check(&report).is_ok(), "half open");
        assert!(Claim::parse("p50_ms 30..44", 1).unwrap().check(&report).is_err());
        assert_eq!(Claim::parse("stalled_reads = 7", 1).unwrap().check(&report), Ok(7.0));
        let none = Claim::parse("goodput_mbps > 1", 1).unwrap().check(&report).unwrap_err();
        assert!(none.contains("has no goodput_mbps"), "{none}");
    }
}
