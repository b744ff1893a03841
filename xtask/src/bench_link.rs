//! `cargo xtask bench link`: the emulated link, measured through the release binary
//! (`ackscope run`, `ackscope export`).
//!
//! The relay's throughput with no rate limit (TCP goodput of a bulk run over `--link rtt=1ms`),
//! and how late packets arrive against the link's model, from the `Link` events of a
//! rate-limited bulk run's session file and from taps outside the relay.
//!
//! Like `bench rr`, this measures: a missed target is printed and the exit code stays 0.
//! What it measures and the figures of one machine: docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ackscope_shared::event::{Event, EventKind, LinkAction, LinkEvent, Side};

use crate::bench::{checked_output, median, met_or_missed, prepare};
use crate::link_taps::{Crossing, Tapped, Taps};
use crate::{cli, json, setup};

pub(crate) const USAGE: &str = "usage: cargo xtask bench link [--rounds N]";

/// The throughput runs: a short RTT and no rate, so the relay is the only limit.
const THROUGHPUT_LINK: &str = "rtt=1ms";
const THROUGHPUT_SECONDS: u32 = 5;
/// Enough bytes that the throughput run stops at its duration, not at its byte count (the
/// largest count ackscope accepts: 1 TiB).
const THROUGHPUT_BYTES: u64 = 1 << 40;
/// The delay run: a rate-limited link that a bulk transfer keeps queueing.
const DELAY_RTT_NS: u64 = 40_000_000;
const DELAY_RATE_BPS: u64 = 100_000_000;
const DELAY_LINK: &str = "rtt=40ms,rate=100mbit";
const DELAY_SECONDS: u32 = 3;
/// The measured link rate leaves out the first second of deliveries (slow start).
const RATE_SKIP_NS: u64 = 1_000_000_000;

const GBPS_TARGET: f64 = 5.0;
const DELAY_ERR_P99_TARGET_MS: f64 = 1.0;

/// `bench link FLAGS...`.
pub fn run(args: &[String]) -> Result<(), String> {
    options(args).and_then(link)
}

/// `bench link`'s flag: the throughput rounds.
fn options(args: &[String]) -> Result<u32, String> {
    let mut rounds = 3;
    cli::numbers(args, USAGE, &mut [("--rounds", &mut rounds)])?;
    if rounds == 0 {
        return Err(format!("--rounds must be at least 1\n{USAGE}"));
    }
    Ok(rounds)
}

fn link(rounds: u32) -> Result<(), String> {
    // iperf3: the loopback peer of the relay's goodput.
    let mut steps = prepare(rounds as usize + 2, &["iperf3"])?;
    let mut gbps = Vec::new();
    for round in 1..=rounds {
        steps.start(&format!(
            "round {round} of {rounds}: ackscope run bulk --link {THROUGHPUT_LINK} --duration \
             {THROUGHPUT_SECONDS}s"
        ));
        let output = checked_output(Command::new(setup::probe_binary()).args([
            "run",
            "bulk",
            "--link",
            THROUGHPUT_LINK,
            "--duration",
            &format!("{THROUGHPUT_SECONDS}s"),
            "--bytes",
            &THROUGHPUT_BYTES.to_string(),
            "--json",
        ]))?;
        let round_gbps = json::goodput_mbps(&json::summary(&output)?)? / 1000.0;
        steps.done(&format!("{round_gbps:.3} Gbit/s TCP goodput"));
        gbps.push(round_gbps);
    }

    steps.start(&format!(
        "iperf3 over plain loopback for {THROUGHPUT_SECONDS} s (the peer of the relay's goodput)"
    ));
    let iperf3_gbps = iperf3_loopback_gbps(THROUGHPUT_SECONDS)?;
    steps.done(&format!("{iperf3_gbps:.2} Gbit/s"));

    steps.start(&format!(
        "ackscope run bulk --link {DELAY_LINK} --duration {DELAY_SECONDS}s -o FILE, tapped from \
         outside in both namespaces; then ackscope export FILE --json"
    ));
    let dir = std::env::temp_dir().join(format!("ackscope-bench-link-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let measured = delay_run(&dir.join("link.session"));
    let _ = fs::remove_dir_all(&dir);
    let (events, goodput_mbps, tapped) = measured?;
    let own = Lateness::from_events(&events, DELAY_RATE_BPS, DELAY_RTT_NS / 2)?;
    let outside = tapped.as_ref().map(|t| Lateness::from_taps(t, DELAY_RATE_BPS, DELAY_RTT_NS / 2));
    let outside = outside.transpose()?;
    steps.done(&format!(
        "{} Link events; {} packets tapped across the link; TCP goodput {goodput_mbps:.1} Mbit/s",
        events.len(),
        outside.as_ref().map_or(0, |o| o.errors_ns.len()),
    ));

    let gbps_median = median(gbps.iter().copied());
    let rounds_text: Vec<String> = gbps.iter().map(|g| format!("{g:.3}")).collect();
    println!(
        "\nthroughput: TCP goodput of `ackscope run bulk --link {THROUGHPUT_LINK}` (no rate \
         limit) through the relay, whose own packet rate is the limit; Gbit/s by round: {}; \
         iperf3 over plain loopback in the same run: {iperf3_gbps:.2}",
        rounds_text.join(", ")
    );
    println!(
        "delay error: arrival - due time per packet, over `--link {DELAY_LINK}` under a bulk \
         load, both directions; due = max(sent, previous packet's serialization end) + \
         bytes*8/rate + rtt/2 (probe/src/emulate/queue.rs)"
    );
    let describe = |lateness: &Lateness| {
        format!(
            "{} packets: min {:.3} ms, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; {} sent \
             packets not delivered (dropped by the queue, or held at the end)",
            lateness.errors_ns.len(),
            lateness.errors_ns.first().map_or(0.0, |&ns| ns as f64 / 1e6),
            lateness.percentile_ms(0.50),
            lateness.percentile_ms(0.99),
            lateness.percentile_ms(1.0),
            lateness.undelivered
        )
    };
    match &outside {
        Some(outside) => println!(
            "  outside (kernel packet taps in both namespaces: sent as the sender's kernel handed \
             it to its TUN device, arrived as the receiver's kernel took it in): {}",
            describe(outside)
        ),
        None => println!(
            "  outside: skipped: joining the probe's network namespaces needs root (CI runs as \
             root)"
        ),
    }
    println!("  the relay's own bookkeeping (each packet's entry time, as its kernel stamped it, and its write time): {}", describe(&own));
    let (rate, rate_source) = match &outside {
        Some(outside) => (outside.client_rate_bps, "IP bytes arriving in the server's namespace"),
        None => (own.client_rate_bps, "IP bytes the relay delivered client to server"),
    };
    let rate_ratio = rate / DELAY_RATE_BPS as f64;
    println!(
        "link_rate measured_vs_configured ratio={rate_ratio:.3} measured_mbps={:.2} \
         configured_mbps={:.0}  ({rate_source}, after the first second)",
        rate / 1e6,
        DELAY_RATE_BPS as f64 / 1e6
    );
    println!("\nmedian over {rounds} throughput rounds, p99 over one delay run:");
    let relay_vs_iperf3 = gbps_median / iperf3_gbps;
    println!(
        "link relay_vs_iperf3 ratio={relay_vs_iperf3:.3} relay_gbps={gbps_median:.3} \
         iperf3_gbps={iperf3_gbps:.2}"
    );
    println!(
        "  relay_gbps >= {GBPS_TARGET} (TCP goodput through the relay):{}",
        met_or_missed(gbps_median >= GBPS_TARGET)
    );
    match &outside {
        Some(outside) => {
            let p99 = outside.percentile_ms(0.99);
            println!("link delay_err_p99_ms={p99:.3}  (outside)");
            println!(
                "  delay_err_p99_ms <= {DELAY_ERR_P99_TARGET_MS}:{}",
                met_or_missed(p99 <= DELAY_ERR_P99_TARGET_MS)
            );
        }
        None => println!("link delay_err_p99_ms=skipped  (the outside measurement needs root)"),
    }
    Ok(())
}

/// The delay run's `Link` events (from its exported session), its TCP goodput, and, as root,
/// what taps in its two namespaces saw (`None` otherwise).
fn delay_run(file: &Path) -> Result<(Vec<Linked>, f64, Option<Tapped>), String> {
    let mut command = Command::new(setup::probe_binary());
    command.args(["run", "bulk", "--link", DELAY_LINK, "--duration"]);
    command.arg(format!("{DELAY_SECONDS}s")).arg("-o").arg(file).arg("--json");
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let shown = crate::steps::shown(&command);
    let child = command.spawn().map_err(|e| format!("could not start `{shown}`: {e}"))?;
    // SAFETY: geteuid() cannot fail and has no side effects.
    let root = unsafe { libc::geteuid() } == 0;
    let taps = if root { Some(Taps::attach(child.id(), Duration::from_secs(10))) } else { None };
    let output = child.wait_with_output().map_err(|e| format!("waiting for `{shown}`: {e}"))?;
    let tapped = taps.map(|taps| taps.and_then(Taps::finish)).transpose()?;
    if !output.status.success() {
        return Err(format!(
            "`{shown}` failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let goodput_mbps = json::goodput_mbps(&json::summary(&output)?)?;
    let mut command = Command::new(setup::probe_binary());
    command.arg("export").arg(file).arg("--json");
    let export = checked_output(&mut command)?;
    let events = link_events(&String::from_utf8_lossy(&export.stdout))?;
    if events.is_empty() {
        return Err("the exported session has no Link events".to_string());
    }
    Ok((events, goodput_mbps, tapped))
}

/// TCP goodput of iperf3 over 127.0.0.1 for `seconds`, in Gbit/s (its receiver's figure).
fn iperf3_loopback_gbps(seconds: u32) -> Result<f64, String> {
    let port = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("binding a free port: {e}"))?;
        listener.local_addr().map_err(|e| e.to_string())?.port()
    };
    let mut server = Command::new("iperf3")
        .args(["--server", "--one-off", "--bind", "127.0.0.1", "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("could not start `iperf3 --server`: {e}"))?;
    let mut client = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let output = Command::new("iperf3")
            .args(["--client", "127.0.0.1", "--port", &port.to_string(), "--json"])
            .args(["--time", &seconds.to_string()])
            .output()
            .map_err(|e| format!("could not start `iperf3 --client`: {e}"))?;
        if output.status.success() {
            client = Some(output);
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    let output = client.ok_or("iperf3's client could not reach its server on 127.0.0.1")?;
    let report = json::parse(&String::from_utf8_lossy(&output.stdout))?;
    let bps = json::number(&report["end"]["sum_received"], "bits_per_second")?;
    Ok(bps / 1e9)
}

/// One `Link` event of an exported session: when, and what the link did with which packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Linked {
    at_ns: u64,
    /// The side that sent the packet: each side's packets are numbered on their own.
    client: bool,
    link: LinkEvent,
}

/// Every `Link` event in `ackscope export --json` output, whose events look like
/// `{"at_ns":2126088,"side":"Client","conn":0,"req":0,"kind":{"Link":{"action":"Enqueued",
/// "packet":0,"bytes":60,"queued_bytes":60}}}`: each one read back as the `Event` the probe
/// wrote. Events of other kinds are passed over unread.
fn link_events(export: &str) -> Result<Vec<Linked>, String> {
    let export = json::parse(export)?;
    let messages = export["messages"].as_array().ok_or("the export has no `messages`")?;
    let events = messages.iter().filter_map(|m| m["Events"]["events"].as_array()).flatten();
    let mut found = Vec::new();
    for event in events.filter(|event| event["kind"].get("Link").is_some()) {
        let read = serde_json::from_value::<Event>(event.clone())
            .map_err(|e| format!("a Link event does not parse ({e}): {event}"))?;
        if let EventKind::Link(link) = read.kind {
            found.push(Linked { at_ns: read.at_ns, client: read.side == Side::Client, link });
        }
    }
    Ok(found)
}

/// Delivery time minus due time of every delivered packet, sorted, and the link's rate.
struct Lateness {
    errors_ns: Vec<i64>,
    undelivered: usize,
    /// IP bytes per second delivered client to server after the first [`RATE_SKIP_NS`].
    client_rate_bps: f64,
}

impl Lateness {
    /// Replays each direction's serializer as `Direction::handle_packet` does: packets in their
    /// number order (the order they arrived), a dropped packet takes no serializer time, and
    /// `sent = max(serializer free, enqueued) + bytes * 8 / rate` (whole nanoseconds, rounded
    /// down), `due = sent + delay`. Times are the relay's own.
    fn from_events(events: &[Linked], rate_bps: u64, delay_ns: u64) -> Result<Lateness, String> {
        let mut packets = Vec::new();
        for client in [true, false] {
            let side = events.iter().filter(|e| e.client == client);
            let mut enqueued: Vec<&Linked> =
                side.clone().filter(|e| e.link.action == LinkAction::Enqueued).collect();
            enqueued.sort_by_key(|e| e.link.packet);
            let delivered: HashMap<u32, u64> = side
                .filter(|e| e.link.action == LinkAction::Delivered)
                .map(|e| (e.link.packet, e.at_ns))
                .collect();
            let direction: Vec<(i128, u32, Option<i128>)> = enqueued
                .iter()
                .map(|p| {
                    let arrived = delivered.get(&p.link.packet).map(|&t| i128::from(t));
                    (i128::from(p.at_ns), p.link.bytes, arrived)
                })
                .collect();
            packets.push(direction);
        }
        Lateness::replay(&packets, rate_bps, delay_ns, client_rate_bps(events))
    }

    /// The same replay from outside: each packet's sending and arrival as the two namespaces'
    /// kernels stamped them (`link_taps`), not the relay's times. A packet that never arrived
    /// takes no serializer time, as a dropped one does.
    fn from_taps(tapped: &Tapped, rate_bps: u64, delay_ns: u64) -> Result<Lateness, String> {
        let (crossings, lost) = tapped.crossings();
        let mut packets = Vec::new();
        for client in [true, false] {
            let mut direction: Vec<(i128, u32, Option<i128>)> = crossings
                .iter()
                .filter(|c| c.client_to_server == client)
                .map(|c| (c.sent_ns, c.bytes, Some(c.arrived_ns)))
                .collect();
            // Each direction is FIFO: packets leave in the order the serializer took them, which
            // their arrivals show. The sending stamps can be out of that order by microseconds
            // when two CPUs transmit on one device at once (the sending thread, and a softirq
            // answering an ACK); replayed in stamp order, a swapped pair put a packet a whole
            // serialization time (0.12 ms for 1500 bytes at 100 Mbit/s) ahead of the relay's
            // order, and it then seemed to arrive before it was due.
            direction.sort_by_key(|p| p.2);
            // Packets that never arrived take no serializer time: where they go does not matter.
            direction.extend(
                lost.iter()
                    .filter(|s| s.client_to_server == client)
                    .map(|s| (s.at_ns, s.bytes, None)),
            );
            packets.push(direction);
        }
        let rate = receiver_rate_bps(&crossings);
        Lateness::replay(&packets, rate_bps, delay_ns, rate)
    }

    /// `packets`: per direction, in the order the link's serializer took them: (entered, IP
    /// bytes, arrived if it did).
    fn replay(
        packets: &[Vec<(i128, u32, Option<i128>)>],
        rate_bps: u64,
        delay_ns: u64,
        client_rate_bps: f64,
    ) -> Result<Lateness, String> {
        let mut errors_ns = Vec::new();
        let mut undelivered = 0;
        for direction in packets {
            let mut free_ns = i128::MIN;
            for &(entered_ns, bytes, arrived) in direction {
                let Some(arrived_ns) = arrived else {
                    undelivered += 1;
                    continue;
                };
                let serialize_ns =
                    (u128::from(bytes) * 8 * 1_000_000_000 / u128::from(rate_bps)) as i128;
                let sent_ns = free_ns.max(entered_ns) + serialize_ns;
                free_ns = sent_ns;
                let due_ns = sent_ns + i128::from(delay_ns);
                errors_ns.push((arrived_ns - due_ns) as i64);
            }
        }
        if errors_ns.is_empty() {
            return Err("no packet that entered the link was seen leaving it".into());
        }
        errors_ns.sort_unstable();
        Ok(Lateness { errors_ns, undelivered, client_rate_bps })
    }

    /// The `q` quantile (nearest rank), in milliseconds.
    fn percentile_ms(&self, q: f64) -> f64 {
        let rank = (q * self.errors_ns.len() as f64).ceil() as usize;
        self.errors_ns[rank.clamp(1, self.errors_ns.len()) - 1] as f64 / 1e6
    }
}

/// IP bytes per second arriving in the server's namespace (client to server), after the first
/// [`RATE_SKIP_NS`] of arrivals.
fn receiver_rate_bps(crossings: &[Crossing]) -> f64 {
    let mut arrivals: Vec<(i128, u32)> =
        crossings.iter().filter(|c| c.client_to_server).map(|c| (c.arrived_ns, c.bytes)).collect();
    arrivals.sort_unstable();
    let (Some(first), Some(last)) = (arrivals.first(), arrivals.last()) else { return 0.0 };
    let from_ns = first.0 + i128::from(RATE_SKIP_NS);
    if last.0 <= from_ns {
        return 0.0;
    }
    let bytes: u64 = arrivals.iter().filter(|a| a.0 > from_ns).map(|a| u64::from(a.1)).sum();
    bytes as f64 * 8.0 * 1e9 / (last.0 - from_ns) as f64
}

fn client_rate_bps(events: &[Linked]) -> f64 {
    let mut delivered: Vec<&Linked> =
        events.iter().filter(|e| e.client && e.link.action == LinkAction::Delivered).collect();
    delivered.sort_by_key(|e| e.at_ns);
    let (Some(first), Some(last)) = (delivered.first(), delivered.last()) else {
        return 0.0;
    };
    let from_ns = first.at_ns + RATE_SKIP_NS;
    if last.at_ns <= from_ns {
        return 0.0;
    }
    let bytes: u64 =
        delivered.iter().filter(|e| e.at_ns > from_ns).map(|e| u64::from(e.link.bytes)).sum();
    bytes as f64 * 8.0 * 1e9 / (last.at_ns - from_ns) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link_taps;

    const EXPORT: &str = r#"{"format":"ackscope-session","messages":[
{"Events":{"run":1,"events":[{"at_ns":1000,"side":"Client","conn":0,"req":0,"kind":{"Link":{"action":"Enqueued","packet":0,"bytes":1500,"queued_bytes":1500}}},{"at_ns":1000,"side":"Client","conn":0,"req":0,"kind":{"Link":{"action":"Enqueued","packet":1,"bytes":1500,"queued_bytes":3000}}}]}},
{"Events":{"run":1,"events":[{"at_ns":1000,"side":"Client","conn":0,"req":0,"kind":{"Link":{"action":"Dropped","packet":2,"bytes":1500,"queued_bytes":3000}}},{"at_ns":5,"side":"Server","conn":0,"req":0,"kind":"RequestStart"}]}},
{"Events":{"run":1,"events":[{"at_ns":21001000,"side":"Client","conn":0,"req":0,"kind":{"Link":{"action":"Delivered","packet":0,"bytes":1500,"queued_bytes":1500}}},{"at_ns":22001500,"side":"Client","conn":0,"req":0,"kind":{"Link":{"action":"Delivered","packet":1,"bytes":1500,"queued_bytes":0}}}]}}
]}"#;

    #[test]
    fn reads_link_events_only() {
        let events = link_events(EXPORT).unwrap();
        assert_eq!(events.len(), 5);
        assert_eq!(
            events[1],
            Linked {
                at_ns: 1000,
                client: true,
                link: LinkEvent {
                    action: LinkAction::Enqueued,
                    packet: 1,
                    bytes: 1500,
                    queued_bytes: 3000
                }
            }
        );
        assert_eq!(events[2].link.action, LinkAction::Dropped);
        assert_eq!(events[4].at_ns, 22_001_500);
        let unknown = EXPORT.replace("\"Dropped\"", "\"Lost\"");
        let error = link_events(&unknown).unwrap_err();
        assert!(error.contains("a Link event does not parse") && error.contains("Lost"), "{error}");
    }

    #[test]
    fn link_flags() {
        use crate::cli::args;
        assert_eq!(options(&[]), Ok(3));
        assert_eq!(options(&args("--rounds 1")), Ok(1));
        assert!(options(&args("--rounds 0"))
            .unwrap_err()
            .starts_with("--rounds must be at least 1\n"));
        let error = options(&args("--rounds three")).unwrap_err();
        assert_eq!(error, format!("--rounds needs a whole number, not `three`\n{USAGE}"));
        let error = options(&args("--seconds 3")).unwrap_err();
        assert_eq!(error, format!("unknown option `--seconds`\n{USAGE}"));
    }

    #[test]
    fn the_outside_replay_takes_packets_in_the_order_they_left_the_link() {
        // 1500 bytes at 12 Mbit/s: 1 ms each, then 20 ms. Seq 200 was stamped 1 us before seq
        // 100 (two CPUs sending), but 100 went first: both left exactly when due.
        let (ms, us) = (1_000_000, 1_000);
        let tapped = Tapped {
            sent: vec![link_taps::seen(10 * us, 100), link_taps::seen(9 * us, 200)],
            arrived: vec![
                link_taps::seen(21 * ms + 10 * us, 100),
                link_taps::seen(22 * ms + 10 * us, 200),
            ],
        };
        let lateness = Lateness::from_taps(&tapped, 12_000_000, 20_000_000).unwrap();
        assert_eq!(lateness.errors_ns, vec![0, 0], "in stamp order one would be 1 ms early");
    }

    #[test]
    fn due_times_follow_the_serializer() {
        // 1500 bytes at 12 Mbit/s: 1 ms each, back to back, then 20 ms: due at 21.001 ms and
        // 22.001 ms; the second is delivered 500 ns late. The dropped third takes no time.
        let events = link_events(EXPORT).unwrap();
        let lateness = Lateness::from_events(&events, 12_000_000, 20_000_000).unwrap();
        assert_eq!(lateness.errors_ns, vec![0, 500]);
        assert_eq!(lateness.undelivered, 0);
        assert_eq!(lateness.percentile_ms(0.99), 0.0005);
        assert_eq!(lateness.percentile_ms(0.5), 0.0);
    }

    #[test]
    fn reads_the_capture_of_a_summary() {
        let json = json::parse(
            r#"{"capture":{"drift_ns":0,"dropped":3,"segments":4009},"error":null,"rps":2.5}"#,
        )
        .unwrap();
        assert_eq!(json::number(&json, "rps"), Ok(2.5));
        assert_eq!(json["capture"]["dropped"].as_u64(), Some(3));
    }
}
