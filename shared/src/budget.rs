//! What a run's own buffers may take at once, computed from its spec before it starts, and the
//! limits on it. A run started from the browser and one from the command line are refused above
//! their limits in the same words, naming what to lower; only the limit differs (the command
//! line's user chose the run on their own machine, a page's run shares the UI server).
//!
//! The figure is a worst case of the buffers the probe allocates for the run's messages, not
//! of the kernel's socket buffers or the recorded events (bounded elsewhere):
//! - request/response: per connection, the client holds the request as written and the answer
//!   it expects, and reads the answer into a buffer of its own; the server reads the request
//!   into a buffer and writes its answer from another, each grown as bytes arrive, so to at
//!   most twice what it holds. That is 4 x (size + response size) per connection. (Measured:
//!   64 connections of 4 MiB messages peaked at 1.0 GB, 8 MiB at 2.5 GB: 2 to 2.5 times.)
//! - bulk: the sender's and the receiver's application buffer;
//! - an emulated link: its queue, full, in both directions (queue x MTU x 2).

use crate::spec::{LinkSpec, Scenario};

/// The most a run started from the browser may take in buffers: the UI server shares the
/// machine with the browser and every page it serves.
pub const BROWSER_LIMIT_BYTES: u64 = 1 << 30;
/// The most a run from the command line may take: far more than any story needs, and still
/// short of what a laptop has.
pub const COMMAND_LINE_LIMIT_BYTES: u64 = 8 << 30;

/// A run's worst-case buffer memory, and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferMemory {
    pub bytes: u64,
    /// How `bytes` is made, in the spec's field names: "64 connections x 4 x (size_bytes +
    /// response_bytes)".
    pub formula: String,
    /// The spec fields that lower it, largest effect first.
    pub lower: Vec<&'static str>,
}

/// The worst-case buffer memory of running `spec` (zero for a spec that runs nothing of ours:
/// a standalone server's connections are bounded by its own limits, an import reads a file, a
/// watch observes another program).
pub fn buffer_memory(spec: &Scenario) -> BufferMemory {
    let (mut memory, link) = match spec {
        Scenario::Rr(rr) => {
            let per_message = u64::from(rr.size_bytes) + u64::from(rr.response_size());
            let memory = BufferMemory {
                bytes: u64::from(rr.connections) * 4 * per_message,
                formula: format!(
                    "{} connection{} x 4 x (size_bytes + response_bytes)",
                    rr.connections,
                    if rr.connections == 1 { "" } else { "s" }
                ),
                lower: vec!["connections", "size_bytes", "response_bytes"],
            };
            (memory, rr.link.as_ref())
        }
        Scenario::Bulk(bulk) => {
            let memory = BufferMemory {
                bytes: 2 * u64::from(bulk.app_buffer_bytes),
                formula: "2 x app_buffer_bytes".into(),
                lower: vec!["app_buffer_bytes"],
            };
            (memory, bulk.link.as_ref())
        }
        Scenario::Server(_) | Scenario::Import(_) | Scenario::Watch(_) => {
            (BufferMemory { bytes: 0, formula: "nothing".into(), lower: Vec::new() }, None)
        }
    };
    if let Some(link) = link {
        memory.bytes += link_queues(link);
        memory.formula.push_str(" + 2 x link.queue_packets x link.mtu");
        memory.lower.push("link.queue_packets");
    }
    memory
}

/// Both directions' queues of an emulated link, full.
fn link_queues(link: &LinkSpec) -> u64 {
    2 * u64::from(link.queue_packets) * u64::from(link.mtu)
}

/// Refuses `spec` if its buffers could take more than `limit`. `whose` names the limit ("a
/// run started from the browser"); `name` turns a spec field into what the user sets (a flag
/// on the command line, the field itself in a spec).
pub fn check(
    spec: &Scenario,
    limit: u64,
    whose: &str,
    name: impl Fn(&str) -> String,
) -> Result<(), String> {
    let memory = buffer_memory(spec);
    if memory.bytes <= limit {
        return Ok(());
    }
    let lower: Vec<String> = memory.lower.iter().map(|field| name(field)).collect();
    let lower = match lower.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    };
    Err(format!(
        "this run's buffers could take {} at once ({}); {whose} may take at most {}: lower {lower}",
        bytes_text(memory.bytes),
        memory.formula,
        bytes_text(limit)
    ))
}

/// "2.5 GiB", "640 MiB", "12 KiB", "100 bytes".
fn bytes_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            return match value.fract() == 0.0 {
                true => format!("{value:.0} {unit}"),
                false => format!("{value:.1} {unit}"),
            };
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{BulkSpec, RrSpec};

    #[test]
    fn the_defaults_and_the_stories_are_far_within_the_browsers_limit() {
        for spec in [Scenario::Rr(RrSpec::default()), Scenario::Bulk(BulkSpec::default())] {
            assert!(check(&spec, BROWSER_LIMIT_BYTES, "a run", str::to_string).is_ok());
        }
        for preset in crate::presets::PRESETS {
            let memory = buffer_memory(&(preset.build)());
            assert!(memory.bytes < BROWSER_LIMIT_BYTES / 4, "{}: {memory:?}", preset.name);
        }
    }

    #[test]
    fn a_run_of_large_messages_on_many_connections_is_refused_naming_what_to_lower() {
        // The review's case: 64 connections of 64 MiB messages (16-20 GB measured to need).
        let huge = Scenario::Rr(RrSpec {
            connections: 64,
            size_bytes: 64 << 20,
            requests: 100,
            ..RrSpec::default()
        });
        assert_eq!(buffer_memory(&huge).bytes, 64 * 4 * (128 << 20));
        let browser =
            check(&huge, BROWSER_LIMIT_BYTES, "a run started from the browser", |f| f.to_string())
                .unwrap_err();
        assert_eq!(
            browser,
            "this run's buffers could take 32 GiB at once (64 connections x 4 x (size_bytes + \
             response_bytes)); a run started from the browser may take at most 1 GiB: lower \
             connections, size_bytes or response_bytes"
        );
        let flags = |f: &str| format!("--{}", f.replace('_', "-"));
        let cli = check(&huge, COMMAND_LINE_LIMIT_BYTES, "a run", flags).unwrap_err();
        assert!(cli.contains("at most 8 GiB: lower --connections, --size-bytes"), "{cli}");
        // Just within: 64 connections of 1 MiB messages take 512 MiB.
        let within =
            Scenario::Rr(RrSpec { connections: 64, size_bytes: 1 << 20, ..RrSpec::default() });
        assert_eq!(buffer_memory(&within).bytes, 512 << 20);
        assert!(check(&within, BROWSER_LIMIT_BYTES, "a run", str::to_string).is_ok());
    }

    #[test]
    fn a_links_queue_counts_in_both_directions() {
        let mut bulk = BulkSpec { app_buffer_bytes: 1 << 20, ..BulkSpec::default() };
        bulk.link = Some(LinkSpec {
            rtt_us: 40_000,
            rate_bps: None,
            mtu: 9000,
            queue_packets: 1_000_000,
            loss_ppm: 0,
        });
        let memory = buffer_memory(&Scenario::Bulk(bulk));
        assert_eq!(memory.bytes, (2 << 20) + 2 * 1_000_000 * 9000);
        assert_eq!(memory.lower, ["app_buffer_bytes", "link.queue_packets"]);
        assert_eq!(bytes_text(memory.bytes), "16.8 GiB");
    }
}
