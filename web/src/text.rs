//! The summary's words and numbers, as the page prints them: pure, tested natively.

use ackscope_shared::attribution::ClassSummary;
use ackscope_shared::bulk::BulkSummary;
use ackscope_shared::tried::TriedOption;
use ackscope_shared::wire::{HostFacts, Instruments};
use ackscope_shared::Side;
use ackscope_shared::Summary;

use crate::timeline::layout::class_word;

/// The summary's numbers as the page prints them.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryText {
    pub requests: String,
    pub rps: String,
    pub p50_ms: String,
    pub p99_ms: String,
    pub max_ms: String,
    pub stalled_reads: String,
    /// Red only when there is something to see.
    pub any_stalls: bool,
}

impl SummaryText {
    pub fn of(summary: &Summary) -> SummaryText {
        SummaryText {
            requests: summary.requests.to_string(),
            rps: format!("{:.1}", summary.rps),
            p50_ms: format!("{:.2}", summary.p50_ms),
            p99_ms: format!("{:.2}", summary.p99_ms),
            max_ms: format!("{:.2}", summary.max_ms),
            stalled_reads: summary.stalled_reads.to_string(),
            any_stalls: summary.stalled_reads > 0,
        }
    }
}

/// What a bulk run's summary can say so far: shared's bulk analysis, no per-request views.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkText {
    pub bytes: String,
    pub duration_ms: String,
    pub goodput_mbps: String,
    pub events: String,
    /// "client SO_SNDBUF 2626560 B, …": the buffers and windows the kernel reported, if any.
    pub kernel: Option<String>,
}

impl BulkText {
    pub fn of(summary: &BulkSummary, events: u64) -> BulkText {
        let (waited_ms, probes) = summary.closed_window();
        let facts = [
            ("client SO_SNDBUF", summary.client_sndbuf_bytes, " B"),
            ("server SO_RCVBUF", summary.server_rcvbuf_bytes, " B"),
            ("server window (median)", summary.server_rcv_wnd_bytes, " B"),
            ("client send window (median)", summary.client_snd_wnd_bytes, " B"),
            ("min RTT", summary.min_rtt_us, " µs"),
            ("client limited by the server's window", waited_ms, " ms"),
            ("zero-window probes", probes, ""),
        ];
        let kernel = facts
            .into_iter()
            .filter_map(|(name, value, unit)| Some(format!("{name} {}{unit}", value?)))
            .collect::<Vec<_>>();
        BulkText {
            bytes: summary.bytes.to_string(),
            duration_ms: format!("{:.2}", summary.duration_s * 1e3),
            goodput_mbps: format!("{:.1}", summary.goodput_mbps),
            events: events.to_string(),
            kernel: (!kernel.is_empty()).then(|| kernel.join(", ")),
        }
    }
}

/// "recording: events, TCP_INFO at syscalls, TCP_INFO every 1 ms while blocked": what perturbed
/// the run. A watch's TCP_INFO is sampled from outside, not while its own calls block:
/// "recording: events, TCP_INFO of the sockets every 100 ms, packets".
pub fn describe_watch_instruments(instruments: &Instruments) -> String {
    let mut parts = vec!["events".to_string()];
    if instruments.tcp_info_interval_us > 0 {
        let ms = f64::from(instruments.tcp_info_interval_us) / 1000.0;
        parts.push(format!("TCP_INFO of the sockets every {ms} ms"));
    }
    if instruments.capture {
        parts.push("packets".into());
    }
    format!("recording: {}", parts.join(", "))
}

/// See [`describe_watch_instruments`].
pub fn describe_instruments(instruments: &Instruments) -> String {
    let mut parts = Vec::new();
    parts.push(if instruments.events { "events" } else { "no events" }.to_string());
    if instruments.tcp_info_at_syscalls {
        parts.push("TCP_INFO at syscalls".into());
    }
    match instruments.tcp_info_interval_us {
        0 => {}
        us if us % 1000 == 0 => {
            parts.push(format!("TCP_INFO every {} ms while blocked", us / 1000))
        }
        us if us > 1000 => {
            parts.push(format!("TCP_INFO every {:.1} ms while blocked", f64::from(us) / 1000.0))
        }
        us => parts.push(format!("TCP_INFO every {us} µs while blocked")),
    }
    if instruments.capture {
        parts.push("packets".into());
    }
    format!("recording: {}", parts.join(", "))
}

/// The host facts as (label, value) pairs; "unknown" where the probe could not tell.
pub fn host_rows(host: &HostFacts) -> Vec<(&'static str, String)> {
    let known = |value: &str| {
        if value.is_empty() {
            "unknown".to_string()
        } else {
            value.to_string()
        }
    };
    vec![
        ("OS", known(&host.os)),
        ("kernel", known(&host.kernel)),
        ("tcp_rmem", known(&host.tcp_rmem)),
        ("tcp_wmem", known(&host.tcp_wmem)),
        ("rmem_max", known(&host.rmem_max)),
        ("wmem_max", known(&host.wmem_max)),
        ("congestion control", known(&host.congestion_control)),
        ("packet capture", known(&host.capture)),
    ]
}

/// One class of waits in one direction, as the summary prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassText {
    /// The serde name (`nagle_delayed_ack`), the `data-class` value.
    pub class: &'static str,
    pub count: u32,
    /// "client->server".
    pub direction: String,
    /// The CLI's line up to its fixes: "19 stalls: Nagle x delayed ACK, client->server, median
    /// 43.6 ms".
    pub sentence: String,
    pub fixes: Vec<String>,
    /// A held read (red, as on the timeline) rather than another wait (amber).
    pub held: bool,
    /// The fix a watch can try on the running programs, and the side it goes on (the writer).
    pub live_fix: Option<(TriedOption, Side)>,
}

impl ClassText {
    pub fn of(summary: &ClassSummary) -> ClassText {
        let line = summary.line();
        let sentence = line.split_once("; fixes: ").map_or(line.as_str(), |(head, _)| head);
        ClassText {
            class: class_word(summary.class),
            count: summary.count,
            direction: summary.direction.clone(),
            sentence: sentence.to_string(),
            fixes: summary.fixes.clone(),
            // Shared gives these two classes to held reads only.
            held: summary.class.is_held_read(),
            live_fix: summary.class.live_fix().zip(summary.writer()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruments_read_as_a_sentence() {
        let text = |events, tcp_info_at_syscalls, tcp_info_interval_us| {
            describe_instruments(&Instruments {
                events,
                tcp_info_at_syscalls,
                tcp_info_interval_us,
                capture: false,
            })
        };
        assert_eq!(
            text(true, true, 1000),
            "recording: events, TCP_INFO at syscalls, TCP_INFO every 1 ms while blocked"
        );
        assert_eq!(text(false, false, 0), "recording: no events");
        assert_eq!(
            text(true, false, 1500),
            "recording: events, TCP_INFO every 1.5 ms while blocked"
        );
        assert_eq!(
            text(true, false, 250),
            "recording: events, TCP_INFO every 250 µs while blocked"
        );
        let unknown = host_rows(&HostFacts::default());
        assert!(unknown.iter().all(|(_, value)| value == "unknown"));
    }

    #[test]
    fn a_watch_says_its_tcp_info_is_sampled_from_outside() {
        let watch = Instruments {
            events: true,
            tcp_info_at_syscalls: false,
            tcp_info_interval_us: 100_000,
            capture: true,
        };
        assert_eq!(
            describe_watch_instruments(&watch),
            "recording: events, TCP_INFO of the sockets every 100 ms, packets"
        );
    }

    #[test]
    fn summary_numbers_have_fixed_decimals() {
        let summary = Summary {
            requests: 200,
            duration_s: 17.5,
            rps: 11.428_571,
            p50_ms: 88.123_4,
            p99_ms: 90.0,
            max_ms: 91.005,
            stalled_reads: 398,
        };
        let text = SummaryText::of(&summary);
        assert_eq!(
            [text.requests, text.rps, text.p50_ms, text.p99_ms, text.stalled_reads],
            ["200", "11.4", "88.12", "90.00", "398"].map(String::from)
        );
    }
}
