//! Scenario specs: everything needed to run an experiment again.
//!
//! One file, though long: every knob's field, default, bounds (`validate`) and words (`describe`)
//! sit together, so a new knob is added in one place.
//!
//! A spec never names a network address: the probe runs it against its own echo server. That is
//! what lets the browser start experiments without being able to aim the probe at anything else.
//!
//! Specs are plain data: the CLI builds them from flags, presets are specs (`--print-spec`), and a
//! spec file is one of these in JSON (`--spec FILE`). Field names are part of the CLI's JSON
//! interface (docs/CLI.md); new fields get defaults so older spec files keep working.

use serde::{Deserialize, Serialize};

use crate::event::Side;

/// The largest body the echo protocol accepts by default (the server's length-prefix cap).
pub const MAX_BODY_BYTES: u32 = 64 * 1024 * 1024;
/// The most requests one run may make: a soak run of ten million, hunting the one slow request,
/// is a real use. A run's memory does not follow it (its readers retire what they summarized,
/// and its file is written as it goes); a reader ignores request ids past it.
pub const MAX_REQUESTS: u32 = 10_000_000;
/// The most requests of a run started from the browser: keeps a browser session's memory modest
/// (the probe keeps every run's events for tabs that connect later).
pub const MAX_BROWSER_REQUESTS: u32 = 100_000;
/// The most concurrent connections of one run: one thread per side and connection.
pub const MAX_CONNECTIONS: u32 = 64;
/// The longest think time, and the longest run by duration (an hour).
pub const MAX_THINK_US: u32 = 10_000_000;
pub const MAX_DURATION_MS: u32 = 3_600_000;
/// Socket buffers above this are refused: the kernel caps them far lower anyway.
pub const MAX_SOCKET_BUFFER_BYTES: u32 = 1 << 30;
/// The most bytes one bulk run may move (1 TiB) and the largest application buffer.
pub const MAX_BULK_BYTES: u64 = 1 << 40;
pub const MAX_APP_BUFFER_BYTES: u32 = 64 * 1024 * 1024;

mod encoding;

/// What to run. In JSON a kind of run is named (`{"rr": {...}}`); the session's binary encoding
/// is in `encoding`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Request/response over the echo protocol.
    Rr(RrSpec),
    /// Bytes one way, as fast as the connection takes them.
    Bulk(BulkSpec),
    /// The echo server alone (`ackscope server`), serving any client that speaks the protocol,
    /// with the server-side fields of this spec; its client-side fields are unused.
    Server(RrSpec),
    /// A packet capture made by another tool (`ackscope import`): not run, only read.
    Import(ImportSpec),
    /// Another program's connections, watched as they run (`ackscope watch`): not run by
    /// ackscope, only observed.
    Watch(WatchSpec),
}

/// What `ackscope watch` watched: the connections to or from these ports on this host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchSpec {
    /// The side on one of these ports is the server; the other side is the client.
    pub ports: Vec<u16>,
    /// `--pid`: the process whose sockets' ports were watched, if one was named.
    pub pid: Option<u32>,
    /// `--duration`: the watch ends after this long (else on Ctrl-C). Always written: the
    /// session's binary encoding has no field names, so a field left out shifts the rest.
    pub duration_ms: Option<u32>,
    /// What the watch could see, in words ("packets and TCP_INFO", "TCP_INFO only: ...").
    pub evidence: String,
}

impl WatchSpec {
    /// Ports watched at once: each is two more comparisons in every packet filter of the watch.
    pub const MAX_PORTS: usize = 8;

    /// The one rule for a watch's ports, wherever it is started (the command line, the page).
    pub fn validate(&self) -> Result<(), SpecError> {
        let problem = if self.ports.is_empty() {
            "a watch needs at least one port: give a port (8080) or a process (its pid)".into()
        } else if self.ports.contains(&0) {
            "port 0 is not a port; ports are 1 to 65535".into()
        } else if self.ports.len() > WatchSpec::MAX_PORTS {
            format!(
                "at most {} ports at once ({} given: {}); watch the others in another watch",
                WatchSpec::MAX_PORTS,
                self.ports.len(),
                self.ports_text()
            )
        } else {
            return Ok(());
        };
        Err(SpecError { field: "ports", problem })
    }

    /// "port 8080" or "ports 8080, 8443".
    pub fn ports_text(&self) -> String {
        let list: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        let word = if self.ports.len() == 1 { "port" } else { "ports" };
        format!("{word} {}", list.join(", "))
    }
}

/// Where an imported capture came from, and the connections found in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportSpec {
    /// The capture file's name, as given to `ackscope import`.
    pub source: String,
    /// Connection `i` of the session's events is `connections[i - 1]`.
    pub connections: Vec<ImportedConnection>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportedConnection {
    /// "192.0.2.1:51234".
    pub client: String,
    pub server: String,
    /// How the client was told apart: "SYN", "SYN+ACK" or "higher port".
    pub client_by: String,
}

/// A value per side of the connection. Serialized as `{"client": .., "server": ..}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerSide<T> {
    pub client: T,
    pub server: T,
}

impl<T> PerSide<T> {
    pub fn both(value: T) -> Self
    where
        T: Clone,
    {
        PerSide { client: value.clone(), server: value }
    }

    pub fn get(&self, side: Side) -> &T {
        match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        }
    }
}

/// TCP_NODELAY per side (the shape of issue-1-era specs: `{"client": bool, "server": bool}`).
pub type NoDelay = PerSide<bool>;

/// How a side writes one message (a 4-byte length and a body).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WritePattern {
    /// Two `write()` calls: the length, then the body (story 1's client and server).
    #[default]
    Split,
    /// One `write()` of length and body copied into one buffer.
    Single,
    /// One `writev()` of the two buffers.
    Writev,
}

impl WritePattern {
    pub fn name(self) -> &'static str {
        match self {
            WritePattern::Split => "split",
            WritePattern::Single => "single",
            WritePattern::Writev => "writev",
        }
    }
}

/// Request/response over the length-prefixed echo protocol (docs/PROTOCOL.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RrSpec {
    /// How many requests the client makes (with `duration_ms`: at most this many).
    pub requests: u32,
    /// Stop starting new requests after this long.
    #[serde(default)]
    pub duration_ms: Option<u32>,
    /// Body size of each request, in bytes.
    pub size_bytes: u32,
    /// Body size of each response; `None`: the same as the request.
    #[serde(default)]
    pub response_bytes: Option<u32>,
    /// Open a new connection after this many requests; 0 keeps one connection per client thread.
    #[serde(default)]
    pub reconnect_every: u32,
    /// Concurrent connections, each with its own client thread and server thread.
    #[serde(default = "one")]
    pub connections: u32,
    /// The server waits this long between reading a request and answering it.
    #[serde(default)]
    pub think_us: u32,
    /// How each side writes a message.
    #[serde(default)]
    pub write: PerSide<WritePattern>,
    /// TCP_NODELAY: Nagle's algorithm off.
    #[serde(default)]
    pub nodelay: PerSide<bool>,
    /// TCP_CORK around each message: cork, write, uncork.
    #[serde(default)]
    pub cork: PerSide<bool>,
    /// TCP_QUICKACK, set again after every read (the kernel clears it).
    #[serde(default)]
    pub quickack: PerSide<bool>,
    /// SO_SNDBUF to ask for; `None` leaves the kernel's auto-tuning on.
    #[serde(default)]
    pub sndbuf: PerSide<Option<u32>>,
    /// SO_RCVBUF to ask for; `None` leaves the kernel's auto-tuning on.
    #[serde(default)]
    pub rcvbuf: PerSide<Option<u32>>,
    /// TCP_CONGESTION per socket (e.g. "cubic", "reno", "bbr"); `None`: the system default.
    #[serde(default)]
    pub congestion: PerSide<Option<String>>,
    /// Run over an emulated link instead of loopback.
    #[serde(default)]
    pub link: Option<LinkSpec>,
}

/// An emulated link between client and server: per direction a drop-tail queue, a rate and a
/// fixed delay (the Mahimahi design), between two network namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Round-trip time the link adds (half in each direction), in microseconds.
    pub rtt_us: u32,
    /// Bits per second in each direction; `None`: as fast as the relay goes.
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// MTU of the link's devices.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Drop-tail queue length per direction, in packets.
    #[serde(default = "default_queue")]
    pub queue_packets: u32,
    /// Random loss per direction, in parts per million.
    #[serde(default)]
    pub loss_ppm: u32,
}

impl LinkSpec {
    /// What the link delays each packet by in each direction: half its RTT.
    pub fn one_way_delay_ns(&self) -> u64 {
        u64::from(self.rtt_us) * 1000 / 2
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        in_range("link.rtt_us", self.rtt_us, 0, 10_000_000, " us")?;
        if let Some(bps) = self.rate_bps {
            in_range("link.rate_bps", bps, 8_000, 100_000_000_000, " bit/s")?;
        }
        in_range("link.mtu", self.mtu, 576, 9000, " bytes")?;
        in_range("link.queue_packets", self.queue_packets, 1, 1_000_000, " packets")?;
        in_range("link.loss_ppm", self.loss_ppm, 0, 1_000_000, " ppm")
    }

    /// "a 40 ms, 100 Mbit/s, MTU 1500 link".
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("{} ms", f64::from(self.rtt_us) / 1000.0)];
        if let Some(bps) = self.rate_bps {
            parts.push(format!("{} Mbit/s", bps as f64 / 1e6));
        }
        parts.push(format!("MTU {}", self.mtu));
        if self.loss_ppm > 0 {
            parts.push(format!("{}% loss", f64::from(self.loss_ppm) / 10_000.0));
        }
        format!("over a {} link", parts.join(", "))
    }

    /// The form [`LinkSpec::parse`] reads: `rtt=40ms,rate=100mbit,mtu=1500,queue=1000`.
    pub fn to_cli(&self) -> String {
        let mut parts = vec![if self.rtt_us % 1000 == 0 {
            format!("rtt={}ms", self.rtt_us / 1000)
        } else {
            format!("rtt={}us", self.rtt_us)
        }];
        if let Some(bps) = self.rate_bps {
            let unit = [(1_000_000_000, "gbit"), (1_000_000, "mbit"), (1_000, "kbit")]
                .into_iter()
                .find(|(scale, _)| bps % scale == 0);
            parts.push(match unit {
                Some((scale, name)) => format!("rate={}{name}", bps / scale),
                None => format!("rate={bps}bit"),
            });
        }
        parts.push(format!("mtu={}", self.mtu));
        parts.push(format!("queue={}", self.queue_packets));
        if self.loss_ppm > 0 {
            parts.push(format!("loss={}%", f64::from(self.loss_ppm) / 10_000.0));
        }
        parts.join(",")
    }

    /// Parses the CLI's `rtt=40ms,rate=100mbit,mtu=1500,queue=1000,loss=0.1%`. `rtt` is
    /// required; the error names the part that is wrong and the form it should take.
    pub fn parse(text: &str) -> Result<LinkSpec, String> {
        let mut link = LinkSpec {
            rtt_us: u32::MAX,
            rate_bps: None,
            mtu: default_mtu(),
            queue_packets: default_queue(),
            loss_ppm: 0,
        };
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: write name=value, e.g. rtt=40ms"))?;
            let bad = |form: &str| format!("{part:?}: {key} takes {form}");
            match key {
                "rtt" => {
                    link.rtt_us =
                        parse_time_us(value).ok_or_else(|| bad("a time such as 40ms or 500us"))?
                }
                "rate" => {
                    link.rate_bps = Some(
                        parse_rate(value)
                            .ok_or_else(|| bad("a rate such as 100mbit, 1gbit or 500kbit"))?,
                    )
                }
                "mtu" => link.mtu = value.parse().map_err(|_| bad("bytes, e.g. 1500"))?,
                "queue" => {
                    link.queue_packets = value.parse().map_err(|_| bad("packets, e.g. 1000"))?
                }
                "loss" => {
                    link.loss_ppm =
                        parse_percent_ppm(value).ok_or_else(|| bad("a percentage such as 0.1%"))?
                }
                _ => return Err(format!("{part:?}: unknown; use rtt, rate, mtu, queue and loss")),
            }
        }
        if link.rtt_us == u32::MAX {
            return Err("give the round-trip time, e.g. rtt=40ms".into());
        }
        link.validate().map_err(|e| e.to_string())?;
        Ok(link)
    }
}

fn parse_time_us(text: &str) -> Option<u32> {
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1000.0)
    } else if let Some(n) = text.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    let us = number.parse::<f64>().ok()? * scale;
    (us.is_finite() && (0.0..=f64::from(u32::MAX - 1)).contains(&us)).then_some(us.round() as u32)
}

fn parse_rate(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let (number, scale) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(unit, scale)| lower.strip_suffix(unit).map(|n| (n.to_string(), *scale)))?;
    let bps = number.parse::<f64>().ok()? * scale;
    (bps.is_finite() && (1.0..1e12).contains(&bps)).then_some(bps.round() as u64)
}

fn parse_percent_ppm(text: &str) -> Option<u32> {
    let percent: f64 = text.strip_suffix('%')?.parse().ok()?;
    (0.0..=100.0).contains(&percent).then_some((percent * 10_000.0).round() as u32)
}

fn default_mtu() -> u32 {
    1500
}

fn default_queue() -> u32 {
    1000
}

fn one() -> u32 {
    1
}

/// Bulk transfer: the client writes bytes, the server reads and discards them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkSpec {
    /// Bytes to send (with `duration_ms`: at most this many).
    pub bytes: u64,
    #[serde(default)]
    pub duration_ms: Option<u32>,
    /// The application's buffer for each `write()` and `read()`.
    pub app_buffer_bytes: u32,
    /// The server's pause before each `read()` after the first: a slow reader, whose receive
    /// window fills and closes. 0 reads as fast as the data comes.
    #[serde(default)]
    pub read_pause_us: u32,
    #[serde(default)]
    pub sndbuf: PerSide<Option<u32>>,
    #[serde(default)]
    pub rcvbuf: PerSide<Option<u32>>,
    #[serde(default)]
    pub congestion: PerSide<Option<String>>,
    /// Run over an emulated link instead of loopback.
    #[serde(default)]
    pub link: Option<LinkSpec>,
}

impl Default for RrSpec {
    /// Story 1 as the seed measured it: Nagle on both sides, keep-alive, 2048-byte bodies.
    fn default() -> Self {
        RrSpec {
            requests: 200,
            duration_ms: None,
            size_bytes: 2048,
            response_bytes: None,
            reconnect_every: 0,
            connections: 1,
            think_us: 0,
            write: PerSide::default(),
            nodelay: PerSide::default(),
            cork: PerSide::default(),
            quickack: PerSide::default(),
            sndbuf: PerSide::default(),
            rcvbuf: PerSide::default(),
            congestion: PerSide::default(),
            link: None,
        }
    }
}

impl Default for BulkSpec {
    fn default() -> Self {
        BulkSpec {
            bytes: 100 * 1024 * 1024,
            duration_ms: None,
            app_buffer_bytes: 64 * 1024,
            read_pause_us: 0,
            sndbuf: PerSide::default(),
            rcvbuf: PerSide::default(),
            congestion: PerSide::default(),
            link: None,
        }
    }
}

/// A spec field out of range. `field` is the spec's field name (`nodelay.client` for a side).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SpecError {
    pub field: &'static str,
    pub problem: String,
}

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    field: &'static str,
    value: T,
    low: T,
    high: T,
    unit: &str,
) -> Result<(), SpecError> {
    if value < low || value > high {
        return Err(SpecError {
            field,
            problem: format!("must be between {low} and {high}{unit}, got {value}"),
        });
    }
    Ok(())
}

fn check_buffers(
    sndbuf: &PerSide<Option<u32>>,
    rcvbuf: &PerSide<Option<u32>>,
) -> Result<(), SpecError> {
    let fields = [
        ("sndbuf.client", sndbuf.client),
        ("sndbuf.server", sndbuf.server),
        ("rcvbuf.client", rcvbuf.client),
        ("rcvbuf.server", rcvbuf.server),
    ];
    for (field, value) in fields {
        if let Some(bytes) = value {
            in_range(field, bytes, 1, MAX_SOCKET_BUFFER_BYTES, " bytes")?;
        }
    }
    Ok(())
}

fn check_congestion(congestion: &PerSide<Option<String>>) -> Result<(), SpecError> {
    for (field, name) in
        [("congestion.client", &congestion.client), ("congestion.server", &congestion.server)]
    {
        if let Some(name) = name {
            // TCP_CA_NAME_MAX is 16 including the terminating NUL.
            let plausible = !name.is_empty()
                && name.len() < 16
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !plausible {
                return Err(SpecError {
                    field,
                    problem: format!(
                        "{name:?} is not a congestion control name (such as cubic, reno, bbr)"
                    ),
                });
            }
        }
    }
    Ok(())
}

impl RrSpec {
    /// Checks every field's range; the error names the first bad field.
    pub fn validate(&self) -> Result<(), SpecError> {
        in_range("requests", self.requests, 1, MAX_REQUESTS, "")?;
        if let Some(ms) = self.duration_ms {
            in_range("duration_ms", ms, 1, MAX_DURATION_MS, " ms")?;
        }
        in_range("size_bytes", self.size_bytes, 1, MAX_BODY_BYTES, " bytes (64 MiB)")?;
        if let Some(bytes) = self.response_bytes {
            in_range("response_bytes", bytes, 1, MAX_BODY_BYTES, " bytes (64 MiB)")?;
        }
        in_range("connections", self.connections, 1, MAX_CONNECTIONS, "")?;
        in_range("think_us", self.think_us, 0, MAX_THINK_US, " us")?;
        check_buffers(&self.sndbuf, &self.rcvbuf)?;
        check_congestion(&self.congestion)?;
        self.link.as_ref().map_or(Ok(()), LinkSpec::validate)
    }

    /// The response body size the client expects.
    pub fn response_size(&self) -> u32 {
        self.response_bytes.unwrap_or(self.size_bytes)
    }

    /// Whether a client's `index`-th request on its thread (from 0) opens a new connection.
    pub fn connects_before(&self, index: u32) -> bool {
        index == 0 || (self.reconnect_every != 0 && index % self.reconnect_every == 0)
    }

    /// One line for people: "200 x 2048 B, keep-alive, Nagle on both sides".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let count = match self.duration_ms {
            Some(ms) => format!("up to {} requests in {ms} ms", self.requests),
            None => format!("{} x {} B", self.requests, self.size_bytes),
        };
        parts.push(count);
        if self.duration_ms.is_some() {
            parts.push(format!("{} B", self.size_bytes));
        }
        if let Some(bytes) = self.response_bytes {
            parts.push(format!("{bytes} B answers"));
        }
        parts.push(match self.reconnect_every {
            0 => "keep-alive".to_string(),
            1 => "reconnect before every request".to_string(),
            n => format!("reconnect every {n} requests"),
        });
        if self.connections > 1 {
            parts.push(format!("{} connections", self.connections));
        }
        if self.think_us > 0 {
            parts.push(format!("server thinks {} us", self.think_us));
        }
        parts.push(
            match (self.nodelay.client, self.nodelay.server) {
                (false, false) => "Nagle on both sides",
                (true, false) => "TCP_NODELAY on the client only",
                (false, true) => "TCP_NODELAY on the server only",
                (true, true) => "TCP_NODELAY on both sides",
            }
            .to_string(),
        );
        for (name, flags) in [("TCP_CORK", self.cork), ("TCP_QUICKACK", self.quickack)] {
            if let Some(sides) = sides_phrase(flags) {
                parts.push(format!("{name} on {sides}"));
            }
        }
        if self.write != PerSide::default() {
            if self.write.client == self.write.server {
                parts.push(format!("{} writes", self.write.client.name()));
            } else {
                parts.push(format!(
                    "client {} writes, server {} writes",
                    self.write.client.name(),
                    self.write.server.name()
                ));
            }
        }
        parts.extend(describe_buffers(&self.sndbuf, &self.rcvbuf, &self.congestion));
        parts.extend(self.link.map(|link| link.describe()));
        parts.join(", ")
    }
}

impl RrSpec {
    /// The server side's settings only, for a standalone server.
    pub fn describe_server(&self) -> String {
        let mut parts =
            vec![if self.nodelay.server { "TCP_NODELAY" } else { "Nagle on" }.to_string()];
        if self.cork.server {
            parts.push("TCP_CORK".into());
        }
        if self.quickack.server {
            parts.push("TCP_QUICKACK".into());
        }
        parts.push(format!("{} writes", self.write.server.name()));
        if let Some(bytes) = self.response_bytes {
            parts.push(format!("{bytes} B answers"));
        }
        if self.think_us > 0 {
            parts.push(format!("thinks {} us", self.think_us));
        }
        parts.join(", ")
    }
}

fn sides_phrase(flags: PerSide<bool>) -> Option<&'static str> {
    match (flags.client, flags.server) {
        (false, false) => None,
        (true, false) => Some("the client"),
        (false, true) => Some("the server"),
        (true, true) => Some("both sides"),
    }
}

fn describe_buffers(
    sndbuf: &PerSide<Option<u32>>,
    rcvbuf: &PerSide<Option<u32>>,
    congestion: &PerSide<Option<String>>,
) -> Vec<String> {
    let mut parts = Vec::new();
    for (name, side, value) in [
        ("SO_SNDBUF", "client", sndbuf.client),
        ("SO_SNDBUF", "server", sndbuf.server),
        ("SO_RCVBUF", "client", rcvbuf.client),
        ("SO_RCVBUF", "server", rcvbuf.server),
    ] {
        if let Some(bytes) = value {
            parts.push(format!("{name} {bytes} on the {side}"));
        }
    }
    for (side, name) in [("client", &congestion.client), ("server", &congestion.server)] {
        if let Some(name) = name {
            parts.push(format!("{name} on the {side}"));
        }
    }
    parts
}

impl BulkSpec {
    pub fn validate(&self) -> Result<(), SpecError> {
        in_range("bytes", self.bytes, 1, MAX_BULK_BYTES, " bytes")?;
        if let Some(ms) = self.duration_ms {
            in_range("duration_ms", ms, 1, MAX_DURATION_MS, " ms")?;
        }
        in_range("app_buffer_bytes", self.app_buffer_bytes, 1, MAX_APP_BUFFER_BYTES, " bytes")?;
        in_range("read_pause_us", self.read_pause_us, 0, MAX_THINK_US, " us")?;
        check_buffers(&self.sndbuf, &self.rcvbuf)?;
        check_congestion(&self.congestion)?;
        self.link.as_ref().map_or(Ok(()), LinkSpec::validate)
    }

    pub fn describe(&self) -> String {
        let mut parts = vec![match self.duration_ms {
            Some(ms) => format!("bulk for {ms} ms (at most {} bytes)", self.bytes),
            None => format!("bulk {} bytes", self.bytes),
        }];
        parts.push(format!("{} B application buffer", self.app_buffer_bytes));
        match self.read_pause_us {
            0 => {}
            us if us % 1000 == 0 => {
                parts.push(format!("the server pauses {} ms before each read", us / 1000))
            }
            us => parts.push(format!("the server pauses {us} us before each read")),
        }
        parts.extend(describe_buffers(&self.sndbuf, &self.rcvbuf, &self.congestion));
        parts.extend(self.link.map(|link| link.describe()));
        parts.join(", ")
    }
}

impl Scenario {
    /// The spec as one line of JSON: what `ackscope run --spec FILE` reads (and `--print-spec`
    /// prints, spread over lines).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            Scenario::Rr(spec) => spec.validate(),
            Scenario::Bulk(spec) => spec.validate(),
            Scenario::Server(spec) => spec.validate(),
            Scenario::Import(_) => Ok(()),
            Scenario::Watch(spec) => spec.validate(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Scenario::Rr(spec) => spec.describe(),
            Scenario::Bulk(spec) => spec.describe(),
            Scenario::Server(spec) => format!("echo server: {}", spec.describe_server()),
            Scenario::Import(spec) => format!(
                "imported from {}: {} connection{}",
                spec.source,
                spec.connections.len(),
                if spec.connections.len() == 1 { "" } else { "s" }
            ),
            Scenario::Watch(spec) => {
                format!("watching {} on this host ({})", spec.ports_text(), spec.evidence)
            }
        }
    }

    /// A request/response run's own spec; `None` for every other scenario.
    /// The emulated link a run goes over, if any (request/response and bulk runs).
    pub fn link(&self) -> Option<&LinkSpec> {
        match self {
            Scenario::Rr(rr) => rr.link.as_ref(),
            Scenario::Bulk(bulk) => bulk.link.as_ref(),
            _ => None,
        }
    }

    pub fn rr(&self) -> Option<&RrSpec> {
        match self {
            Scenario::Rr(rr) => Some(rr),
            _ => None,
        }
    }

    /// The scenario's name in the CLI and the JSON summary: "rr" or "bulk".
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Rr(_) => "rr",
            Scenario::Bulk(_) => "bulk",
            Scenario::Server(_) => "server",
            Scenario::Import(_) => "import",
            Scenario::Watch(_) => "watch",
        }
    }
}

/// What changed from one scenario to another, for people comparing runs: one entry per spec
/// field that differs, in the spec's field order ("requests: 100 -> 200", "TCP_NODELAY: client
/// off -> on"). Per-side fields name the side that changed, or "both sides" when both went
/// from the same value to the same value. Scenarios of different kinds differ in kind only
/// ("scenario: rr -> bulk"): their fields do not line up. Empty when nothing differs.
pub fn changes(from: &Scenario, to: &Scenario) -> Vec<String> {
    let mut changes = Changes::default();
    match (from, to) {
        (Scenario::Rr(a), Scenario::Rr(b)) | (Scenario::Server(a), Scenario::Server(b)) => {
            changes.rr(a, b)
        }
        (Scenario::Bulk(a), Scenario::Bulk(b)) => changes.bulk(a, b),
        (Scenario::Import(a), Scenario::Import(b)) => changes.import(a, b),
        _ => changes.field("scenario", &from.name(), &to.name(), |name| name.to_string()),
    }
    changes.0
}

/// The lines of [`changes`] so far.
#[derive(Default)]
struct Changes(Vec<String>);

fn on_off(on: &bool) -> String {
    if *on { "on" } else { "off" }.to_string()
}

fn bytes_or(unset: &'static str) -> impl Fn(&Option<u32>) -> String {
    move |bytes| bytes.map_or_else(|| unset.to_string(), |bytes| format!("{bytes} B"))
}

impl Changes {
    fn field<T: PartialEq>(&mut self, name: &str, from: &T, to: &T, show: impl Fn(&T) -> String) {
        if from != to {
            self.0.push(format!("{name}: {} -> {}", show(from), show(to)));
        }
    }

    /// "TCP_NODELAY: client off -> on", "… both sides off -> on", or each side that changed.
    fn per_side<T: PartialEq>(
        &mut self,
        name: &str,
        from: &PerSide<T>,
        to: &PerSide<T>,
        show: impl Fn(&T) -> String,
    ) {
        let change = |side: &str, a: &T, b: &T| format!("{side} {} -> {}", show(a), show(b));
        let (client, server) = (from.client != to.client, from.server != to.server);
        let parts = if client && server && from.client == from.server && to.client == to.server {
            vec![change("both sides", &from.client, &to.client)]
        } else {
            let mut parts = Vec::new();
            if client {
                parts.push(change("client", &from.client, &to.client));
            }
            if server {
                parts.push(change("server", &from.server, &to.server));
            }
            parts
        };
        if !parts.is_empty() {
            self.0.push(format!("{name}: {}", parts.join(", ")));
        }
    }

    fn duration(&mut self, from: &Option<u32>, to: &Option<u32>) {
        self.field("duration", from, to, |ms| {
            ms.map_or_else(|| "no limit".to_string(), |ms| format!("{ms} ms"))
        });
    }

    fn buffers_and_path(
        &mut self,
        (sndbuf, rcvbuf, congestion, link): BuffersAndPath,
        to: BuffersAndPath,
    ) {
        self.per_side("SO_SNDBUF", sndbuf, to.0, bytes_or("auto"));
        self.per_side("SO_RCVBUF", rcvbuf, to.1, bytes_or("auto"));
        self.per_side("congestion control", congestion, to.2, |name| {
            name.clone().unwrap_or_else(|| "default".to_string())
        });
        self.field("link", link, to.3, |link| {
            link.as_ref().map_or_else(|| "loopback".to_string(), LinkSpec::to_cli)
        });
    }

    fn rr(&mut self, from: &RrSpec, to: &RrSpec) {
        // Destructured without `..`: a new spec field does not compile until it is compared.
        let RrSpec {
            requests,
            duration_ms,
            size_bytes,
            response_bytes,
            reconnect_every,
            connections,
            think_us,
            write,
            nodelay,
            cork,
            quickack,
            sndbuf,
            rcvbuf,
            congestion,
            link,
        } = from;
        self.field("requests", requests, &to.requests, u32::to_string);
        self.duration(duration_ms, &to.duration_ms);
        self.field("request size", size_bytes, &to.size_bytes, |bytes| format!("{bytes} B"));
        self.field("response size", response_bytes, &to.response_bytes, bytes_or("as the request"));
        self.field("reconnect", reconnect_every, &to.reconnect_every, |every| match every {
            0 => "never (keep-alive)".to_string(),
            1 => "before every request".to_string(),
            n => format!("every {n} requests"),
        });
        self.field("connections", connections, &to.connections, u32::to_string);
        self.field("server think time", think_us, &to.think_us, |us| format!("{us} us"));
        self.per_side("write pattern", write, &to.write, |pattern| pattern.name().to_string());
        self.per_side("TCP_NODELAY", nodelay, &to.nodelay, on_off);
        self.per_side("TCP_CORK", cork, &to.cork, on_off);
        self.per_side("TCP_QUICKACK", quickack, &to.quickack, on_off);
        self.buffers_and_path(
            (sndbuf, rcvbuf, congestion, link),
            (&to.sndbuf, &to.rcvbuf, &to.congestion, &to.link),
        );
    }

    fn bulk(&mut self, from: &BulkSpec, to: &BulkSpec) {
        // As in `rr`: every field, so that a new one must be added here.
        let BulkSpec {
            bytes,
            duration_ms,
            app_buffer_bytes,
            read_pause_us,
            sndbuf,
            rcvbuf,
            congestion,
            link,
        } = from;
        self.field("bytes", bytes, &to.bytes, |bytes| format!("{bytes} B"));
        self.duration(duration_ms, &to.duration_ms);
        self.field("application buffer", app_buffer_bytes, &to.app_buffer_bytes, |bytes| {
            format!("{bytes} B")
        });
        self.field("server's pause before each read", read_pause_us, &to.read_pause_us, |us| {
            format!("{us} us")
        });
        self.buffers_and_path(
            (sndbuf, rcvbuf, congestion, link),
            (&to.sndbuf, &to.rcvbuf, &to.congestion, &to.link),
        );
    }

    fn import(&mut self, from: &ImportSpec, to: &ImportSpec) {
        let ImportSpec { source, connections } = from;
        self.field("source", source, &to.source, String::clone);
        if connections.len() != to.connections.len() {
            self.field("connections", &connections.len(), &to.connections.len(), usize::to_string);
        } else if connections != &to.connections {
            self.0.push("connections: other addresses".to_string());
        }
    }
}

/// The fields request/response and bulk specs share, borrowed.
type BuffersAndPath<'a> = (
    &'a PerSide<Option<u32>>,
    &'a PerSide<Option<u32>>,
    &'a PerSide<Option<String>>,
    &'a Option<LinkSpec>,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_bad_field() {
        let zero = RrSpec { requests: 0, ..RrSpec::default() };
        assert_eq!(zero.validate().unwrap_err().field, "requests");
        let huge = RrSpec { size_bytes: MAX_BODY_BYTES + 1, ..RrSpec::default() };
        assert_eq!(huge.validate().unwrap_err().field, "size_bytes");
        let buffer =
            RrSpec { rcvbuf: PerSide { client: None, server: Some(0) }, ..RrSpec::default() };
        assert_eq!(buffer.validate().unwrap_err().field, "rcvbuf.server");
        let cc = RrSpec {
            congestion: PerSide { client: Some("cubic; rm".into()), server: None },
            ..RrSpec::default()
        };
        assert_eq!(cc.validate().unwrap_err().field, "congestion.client");
        let many = RrSpec { connections: MAX_CONNECTIONS + 1, ..RrSpec::default() };
        assert_eq!(many.validate().unwrap_err().field, "connections");
        assert!(RrSpec::default().validate().is_ok());
        let bulk = BulkSpec { app_buffer_bytes: 0, ..BulkSpec::default() };
        assert_eq!(bulk.validate().unwrap_err().field, "app_buffer_bytes");
    }

    #[test]
    fn reconnect_plan() {
        let keep = RrSpec { requests: 5, ..RrSpec::default() };
        let opens: Vec<bool> = (0..5).map(|i| keep.connects_before(i)).collect();
        assert_eq!(opens, [true, false, false, false, false]);
        let every2 = RrSpec { requests: 5, reconnect_every: 2, ..RrSpec::default() };
        let opens: Vec<bool> = (0..5).map(|i| every2.connects_before(i)).collect();
        assert_eq!(opens, [true, false, true, false, true]);
    }

    #[test]
    fn json_field_names_are_the_documented_ones() {
        let spec = RrSpec { nodelay: PerSide { client: true, server: false }, ..RrSpec::default() };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["nodelay"], serde_json::json!({"client": true, "server": false}));
        assert_eq!(json["size_bytes"], 2048);
        assert_eq!(json["write"], serde_json::json!({"client": "split", "server": "split"}));
        assert_eq!(json["sndbuf"], serde_json::json!({"client": null, "server": null}));
        let typo = r#"{"requests": 1, "size_bytes": 1, "nodelay": {"clinet": true}}"#;
        assert!(serde_json::from_str::<RrSpec>(typo).is_err());
    }

    #[test]
    fn a_minimal_spec_file_gets_defaults() {
        let minimal = r#"{"rr": {"requests": 10, "size_bytes": 100}}"#;
        let Scenario::Rr(spec) = serde_json::from_str::<Scenario>(minimal).unwrap() else {
            panic!("an rr spec")
        };
        assert_eq!(spec.connections, 1);
        assert_eq!(spec.write.client, WritePattern::Split);
        assert_eq!(spec.response_size(), 100);
    }

    #[test]
    fn link_specs_parse_from_the_command_line_form() {
        let link = LinkSpec::parse("rtt=40ms,rate=100mbit,mtu=1500,queue=64,loss=0.5%").unwrap();
        assert_eq!(
            link,
            LinkSpec {
                rtt_us: 40_000,
                rate_bps: Some(100_000_000),
                mtu: 1500,
                queue_packets: 64,
                loss_ppm: 5000
            }
        );
        assert_eq!(LinkSpec::parse("rtt=500us").unwrap().rate_bps, None);
        assert_eq!(LinkSpec::parse("rtt=1s,rate=1Gbit").unwrap().rate_bps, Some(1_000_000_000));
        for (bad, says) in [
            ("rate=100mbit", "rtt=40ms"),
            ("rtt=40", "a time such as 40ms"),
            ("rtt=40ms,rate=fast", "rate such as 100mbit"),
            ("rtt=40ms,jitter=5ms", "unknown"),
            ("rtt=40ms,mtu=100", "link.mtu"),
            ("rtt=40ms,loss=200%", "percentage"),
        ] {
            let err = LinkSpec::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert_eq!(LinkSpec::parse(&link.to_cli()), Ok(link), "{}", link.to_cli());
        let odd = LinkSpec { rtt_us: 1500, rate_bps: Some(12_345), ..link };
        assert_eq!(LinkSpec::parse(&odd.to_cli()), Ok(odd), "{}", odd.to_cli());
        let spec = RrSpec { link: Some(link), ..RrSpec::default() };
        assert!(
            spec.describe().ends_with("over a 40 ms, 100 Mbit/s, MTU 1500, 0.5% loss link"),
            "{}",
            spec.describe()
        );
    }

    #[test]
    fn descriptions_name_what_differs_from_story_1() {
        assert_eq!(RrSpec::default().describe(), "200 x 2048 B, keep-alive, Nagle on both sides");
        let tuned = RrSpec {
            cork: PerSide::both(true),
            write: PerSide { client: WritePattern::Writev, server: WritePattern::Split },
            rcvbuf: PerSide { client: None, server: Some(65536) },
            ..RrSpec::default()
        };
        let text = tuned.describe();
        assert!(text.contains("TCP_CORK on both sides"), "{text}");
        assert!(text.contains("client writev writes, server split writes"), "{text}");
        assert!(text.contains("SO_RCVBUF 65536 on the server"), "{text}");
    }

    #[test]
    fn changes_name_the_field_and_the_side() {
        let rr = |spec: RrSpec| Scenario::Rr(spec);
        let nagle = RrSpec { requests: 100, ..RrSpec::default() };
        let client_nodelay =
            RrSpec { nodelay: PerSide { client: true, server: false }, ..nagle.clone() };
        assert_eq!(
            changes(&rr(nagle.clone()), &rr(client_nodelay)),
            ["TCP_NODELAY: client off -> on"]
        );
        let both = RrSpec { nodelay: PerSide::both(true), ..nagle.clone() };
        assert_eq!(changes(&rr(nagle.clone()), &rr(both)), ["TCP_NODELAY: both sides off -> on"]);
        let crossed = RrSpec { nodelay: PerSide { client: true, server: false }, ..nagle.clone() };
        let swapped = RrSpec { nodelay: PerSide { client: false, server: true }, ..nagle.clone() };
        assert_eq!(
            changes(&rr(crossed), &rr(swapped)),
            ["TCP_NODELAY: client on -> off, server off -> on"]
        );

        let split_server = RrSpec {
            write: PerSide { client: WritePattern::Single, server: WritePattern::Split },
            ..nagle.clone()
        };
        let more = RrSpec {
            requests: 200,
            write: PerSide { client: WritePattern::Single, server: WritePattern::Single },
            ..nagle.clone()
        };
        assert_eq!(
            changes(&rr(split_server), &rr(more)),
            ["requests: 100 -> 200", "write pattern: server split -> single"]
        );
        assert!(changes(&rr(nagle.clone()), &rr(nagle.clone())).is_empty());
        let bulk = Scenario::Bulk(BulkSpec::default());
        assert_eq!(changes(&rr(nagle.clone()), &bulk), ["scenario: rr -> bulk"]);
        assert_eq!(changes(&bulk, &Scenario::Server(nagle)), ["scenario: bulk -> server"]);
    }

    #[test]
    fn changes_cover_every_field() {
        let from = RrSpec::default();
        let link = LinkSpec::parse("rtt=40ms,rate=100mbit").unwrap();
        let to = RrSpec {
            requests: 10,
            duration_ms: Some(5000),
            size_bytes: 100,
            response_bytes: Some(4096),
            reconnect_every: 1,
            connections: 4,
            think_us: 30_000,
            write: PerSide::both(WritePattern::Writev),
            nodelay: PerSide { client: false, server: true },
            cork: PerSide { client: true, server: false },
            quickack: PerSide::both(true),
            sndbuf: PerSide { client: Some(65536), server: None },
            rcvbuf: PerSide { client: None, server: Some(4096) },
            congestion: PerSide { client: None, server: Some("bbr".into()) },
            link: Some(link),
        };
        let lines = changes(&Scenario::Rr(from.clone()), &Scenario::Rr(to.clone()));
        assert_eq!(
            lines,
            [
                "requests: 200 -> 10",
                "duration: no limit -> 5000 ms",
                "request size: 2048 B -> 100 B",
                "response size: as the request -> 4096 B",
                "reconnect: never (keep-alive) -> before every request",
                "connections: 1 -> 4",
                "server think time: 0 us -> 30000 us",
                "write pattern: both sides split -> writev",
                "TCP_NODELAY: server off -> on",
                "TCP_CORK: client off -> on",
                "TCP_QUICKACK: both sides off -> on",
                "SO_SNDBUF: client auto -> 65536 B",
                "SO_RCVBUF: server auto -> 4096 B",
                "congestion control: server default -> bbr",
                "link: loopback -> rtt=40ms,rate=100mbit,mtu=1500,queue=1000",
            ]
        );
        // The other way round reads the same fields backwards.
        let back = changes(&Scenario::Rr(to), &Scenario::Rr(from));
        assert_eq!(back.len(), lines.len());
        assert_eq!(back[0], "requests: 10 -> 200");
        assert_eq!(back[4], "reconnect: before every request -> never (keep-alive)");

        let bulk = BulkSpec::default();
        let bigger = BulkSpec {
            bytes: 1024,
            app_buffer_bytes: 4096,
            read_pause_us: 300_000,
            congestion: PerSide::both(Some("reno".into())),
            ..bulk.clone()
        };
        assert_eq!(
            changes(&Scenario::Bulk(bulk), &Scenario::Bulk(bigger.clone())),
            [
                "bytes: 104857600 B -> 1024 B",
                "application buffer: 65536 B -> 4096 B",
                "server's pause before each read: 0 us -> 300000 us",
                "congestion control: both sides default -> reno",
            ]
        );
        assert!(bigger.describe().contains("the server pauses 300 ms before each read"));
    }

    #[test]
    fn a_readers_pause_is_bounded_like_a_think_time() {
        let slow = BulkSpec { read_pause_us: MAX_THINK_US, ..BulkSpec::default() };
        assert!(slow.validate().is_ok());
        let slower = BulkSpec { read_pause_us: MAX_THINK_US + 1, ..BulkSpec::default() };
        assert_eq!(slower.validate().unwrap_err().field, "read_pause_us");
    }
}
