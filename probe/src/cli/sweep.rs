//! `ackscope run bulk --sweep-rcvbuf 16k,64k,256k,1m,auto`: story 2's table, buffer = bandwidth x
//! delay, measured. One bulk run per receive-buffer size on the server; for each, what was asked,
//! what getsockopt said, the window the server advertised (TCP_INFO), the goodput measured, and
//! the window / RTT formula it should match when the window is what limits the transfer.

use std::io::{self, Write};
use std::sync::atomic::AtomicBool;

use ackscope_shared::bulk::{BulkAnalysis, BulkSummary};
use ackscope_shared::wire::{Instruments, RunOutcome};
use ackscope_shared::{BulkSpec, Scenario};

use super::terminal::Printable;
use super::{Ended, Failure};
use crate::scenario;

/// A buffer size from the sweep list: "16k", "1m", "65536", or "auto" (not set).
pub fn parse_size(text: &str) -> Result<Option<u32>, String> {
    if text == "auto" {
        return Ok(None);
    }
    let lower = text.to_ascii_lowercase();
    let (number, scale) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1024),
        Some('m') => (&lower[..lower.len() - 1], 1024 * 1024),
        _ => (lower.as_str(), 1),
    };
    let value: u64 = number.parse().map_err(|_| format!("{text:?}: use bytes, 16k, 1m or auto"))?;
    u32::try_from(value * scale).map(Some).map_err(|_| format!("{text:?} is too large"))
}

/// One row of the table.
#[derive(serde::Serialize)]
pub struct Row {
    pub asked_bytes: Option<u32>,
    pub getsockopt_bytes: Option<u32>,
    pub window_bytes: Option<u32>,
    pub min_rtt_us: Option<u32>,
    pub goodput_mbps: f64,
    /// Window / RTT: what the window allows.
    pub window_limit_mbps: Option<f64>,
    /// Whether the window, not the link's rate, is what limits the transfer.
    pub window_limited: bool,
    /// Goodput / window limit, for window-limited rows.
    pub ratio: Option<f64>,
}

impl Row {
    fn of(asked: Option<u32>, summary: &BulkSummary, link_mbps: Option<f64>) -> Row {
        let window_limit_mbps = match (summary.server_rcv_wnd_bytes, summary.min_rtt_us) {
            (Some(wnd), Some(rtt)) if rtt > 0 => Some(f64::from(wnd) * 8.0 / f64::from(rtt)),
            _ => None,
        };
        // The window limits when it allows clearly less than the link carries.
        let window_limited = match (window_limit_mbps, link_mbps) {
            (Some(limit), Some(link)) => limit < 0.9 * link,
            (Some(_), None) => true,
            _ => false,
        };
        Row {
            asked_bytes: asked,
            getsockopt_bytes: summary.server_rcvbuf_bytes,
            window_bytes: summary.server_rcv_wnd_bytes,
            min_rtt_us: summary.min_rtt_us,
            goodput_mbps: summary.goodput_mbps,
            window_limit_mbps,
            window_limited,
            ratio: window_limit_mbps
                .filter(|_| window_limited)
                .map(|limit| summary.goodput_mbps / limit),
        }
    }
}

pub fn sweep(
    base: &BulkSpec,
    sizes: &[Option<u32>],
    instruments: Instruments,
    stop: &AtomicBool,
    json: bool,
) -> Result<Ended, Failure> {
    let link_mbps = base.link.and_then(|link| link.rate_bps).map(|bps| bps as f64 / 1e6);
    let mut rows = Vec::new();
    for &asked in sizes {
        let mut spec = base.clone();
        spec.rcvbuf.server = asked;
        let mut analysis = BulkAnalysis::new();
        let outcome = scenario::run(&Scenario::Bulk(spec.clone()), instruments, stop, |events| {
            analysis.push_all(&events)
        })
        .map_err(|e| {
            Failure::Usage(format!("{}: {}", super::knobs::flag_of(e.field), e.problem))
        })?;
        match outcome {
            RunOutcome::Completed => rows.push(Row::of(asked, &analysis.summary(), link_mbps)),
            RunOutcome::Interrupted => return Ok(Ended::Interrupted),
            RunOutcome::Failed { error } => {
                return Err(Failure::Run(format!(
                    "the run with SO_RCVBUF {asked:?} failed: {error}"
                )))
            }
        }
    }
    // The spec's strings (a congestion control's name) are the user's: printed as data.
    let printed = if json {
        let document = serde_json::json!({ "scenario": "bulk", "config": base, "rows": rows });
        writeln!(Printable::json(io::stdout().lock()), "{document}")
    } else {
        print_table(&mut Printable::terminal(io::stdout().lock()), base, &rows)
    };
    printed.map_err(|e| format!("writing the table: {e}"))?;
    Ok(Ended::Ok)
}

fn print_table(out: &mut impl Write, base: &BulkSpec, rows: &[Row]) -> io::Result<()> {
    writeln!(out, "bulk: {} (SO_RCVBUF on the server, swept)", base.describe())?;
    writeln!(
        out,
        "  {:>10} {:>12} {:>10} {:>9} {:>12} {:>11} {:>7}",
        "asked", "getsockopt", "window", "min RTT", "window/RTT", "measured", "ratio"
    )?;
    let bytes = |v: Option<u32>| v.map_or("auto".to_string(), |b| b.to_string());
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |b| b.to_string());
    for row in rows {
        writeln!(
            out,
            "  {:>10} {:>12} {:>10} {:>9} {:>12} {:>11} {:>7}",
            bytes(row.asked_bytes),
            opt(row.getsockopt_bytes),
            opt(row.window_bytes),
            row.min_rtt_us.map_or("-".into(), |us| format!("{:.1} ms", f64::from(us) / 1000.0)),
            row.window_limit_mbps.map_or("-".into(), |m| format!("{m:.2} Mbit/s")),
            format!("{:.2} Mbit/s", row.goodput_mbps),
            match (row.window_limited, row.ratio) {
                (true, Some(ratio)) => format!("{ratio:.2}"),
                _ => "link".to_string(),
            }
        )?;
    }
    writeln!(out, "  (ratio: measured / window/RTT for rows the window limits; \"link\": the link's rate limits)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_the_story_writes_them() {
        assert_eq!(parse_size("16k"), Ok(Some(16 * 1024)));
        assert_eq!(parse_size("1M"), Ok(Some(1024 * 1024)));
        assert_eq!(parse_size("65536"), Ok(Some(65536)));
        assert_eq!(parse_size("auto"), Ok(None));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("9999999m").is_err());
    }

    #[test]
    fn a_window_limited_row_compares_goodput_with_window_over_rtt() {
        let summary = BulkSummary {
            goodput_mbps: 15.4,
            server_rcv_wnd_bytes: Some(80_480),
            min_rtt_us: Some(40_000),
            ..BulkSummary::default()
        };
        let row = Row::of(Some(65536), &summary, Some(100.0));
        assert!((row.window_limit_mbps.unwrap() - 16.096).abs() < 0.01);
        assert!(row.window_limited);
        assert!((row.ratio.unwrap() - 0.957).abs() < 0.01);
        let wide = BulkSummary { server_rcv_wnd_bytes: Some(10_000_000), ..summary };
        let row = Row::of(None, &wide, Some(100.0));
        assert!(!row.window_limited && row.ratio.is_none(), "the link limits, not the window");
    }
}
