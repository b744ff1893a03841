//! Flags that change a spec: each overrides one field of the preset, spec file or default.

use ackscope_shared::spec::LinkSpec;
use ackscope_shared::{PerSide, Scenario, WritePattern};
use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Sides {
    None,
    Client,
    Server,
    Both,
}

impl Sides {
    fn flags(self) -> PerSide<bool> {
        PerSide {
            client: matches!(self, Sides::Client | Sides::Both),
            server: matches!(self, Sides::Server | Sides::Both),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    Split,
    Single,
    Writev,
}

impl From<Pattern> for WritePattern {
    fn from(pattern: Pattern) -> Self {
        match pattern {
            Pattern::Split => WritePattern::Split,
            Pattern::Single => WritePattern::Single,
            Pattern::Writev => WritePattern::Writev,
        }
    }
}

/// A duration such as "10s", "500ms" or "2m", in milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u32, String> {
    let (number, unit) =
        text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let value: u64 =
        number.parse().map_err(|_| format!("{text:?} is not a duration like 10s or 500ms"))?;
    let ms = match unit {
        "ms" => value,
        "s" | "" => value * 1000,
        "m" => value * 60_000,
        _ => return Err(format!("{text:?}: use ms, s or m")),
    };
    u32::try_from(ms).map_err(|_| format!("{text:?} is too long"))
}

#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Request/response (rr)")]
pub struct RrKnobs {
    /// Number of requests [default: 200]
    #[arg(long, value_name = "N")]
    pub count: Option<u32>,
    /// Body size of each request, in bytes [default: 2048]
    #[arg(long, value_name = "BYTES")]
    pub size: Option<u32>,
    /// Body size of each answer [default: the request's size]
    #[arg(long, value_name = "BYTES")]
    pub response_size: Option<u32>,
    /// Open a new connection every N requests [default: keep the connection]
    #[arg(long, value_name = "N")]
    pub reconnect_every: Option<u32>,
    /// Concurrent connections, each with its own client and server thread [default: 1]
    #[arg(long, value_name = "N")]
    pub connections: Option<u32>,
    /// Server think time between reading a request and answering it, in microseconds
    #[arg(long, value_name = "US")]
    pub think_us: Option<u32>,
    /// TCP_NODELAY (Nagle's algorithm off) on these sides
    #[arg(long, value_enum, value_name = "SIDES")]
    pub nodelay: Option<Sides>,
    /// TCP_CORK around each message (cork, write, uncork) on these sides
    #[arg(long, value_enum, value_name = "SIDES")]
    pub cork: Option<Sides>,
    /// TCP_QUICKACK, re-armed after every read, on these sides
    #[arg(long, value_enum, value_name = "SIDES")]
    pub quickack: Option<Sides>,
    /// How both sides write a message: split (length, then body), single (one write), writev
    #[arg(long, value_enum, value_name = "PATTERN")]
    pub write: Option<Pattern>,
    /// How the client writes a message
    #[arg(long, value_enum, value_name = "PATTERN")]
    pub client_write: Option<Pattern>,
    /// How the server writes a message
    #[arg(long, value_enum, value_name = "PATTERN")]
    pub server_write: Option<Pattern>,
}

#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Bulk transfer (bulk)")]
pub struct BulkKnobs {
    /// Bytes to send [default: 104857600]
    #[arg(long, value_name = "BYTES")]
    pub bytes: Option<u64>,
    /// The application's buffer for each write and read [default: 65536]
    #[arg(long, value_name = "BYTES")]
    pub app_buffer: Option<u32>,
    /// A slow reader: the server pauses this long before each read, in microseconds
    /// [default: 0]
    #[arg(long, value_name = "MICROSECONDS")]
    pub read_pause_us: Option<u32>,
}

#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Both scenarios")]
pub struct CommonKnobs {
    /// Stop starting requests (or sending) after this long: 500ms, 10s, 2m
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub duration: Option<u32>,
    /// SO_SNDBUF on both sides, in bytes (turns auto-tuning off)
    #[arg(long, value_name = "BYTES")]
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF on both sides, in bytes (turns auto-tuning off)
    #[arg(long, value_name = "BYTES")]
    pub rcvbuf: Option<u32>,
    /// SO_SNDBUF on the client
    #[arg(long, value_name = "BYTES")]
    pub client_sndbuf: Option<u32>,
    /// SO_SNDBUF on the server
    #[arg(long, value_name = "BYTES")]
    pub server_sndbuf: Option<u32>,
    /// SO_RCVBUF on the client
    #[arg(long, value_name = "BYTES")]
    pub client_rcvbuf: Option<u32>,
    /// SO_RCVBUF on the server
    #[arg(long, value_name = "BYTES")]
    pub server_rcvbuf: Option<u32>,
    /// TCP_CONGESTION on both sides (e.g. cubic, reno, bbr)
    #[arg(long, value_name = "NAME")]
    pub cc: Option<String>,
    /// Run over an emulated link: rtt=40ms[,rate=100mbit][,mtu=1500][,queue=1000][,loss=0.1%]
    /// (docs/LINK.md; without root, in a user namespace)
    #[arg(long, value_name = "SPEC", value_parser = LinkSpec::parse)]
    pub link: Option<LinkSpec>,
}

/// A flag given for a scenario it does not apply to.
pub struct NotApplicable(pub &'static str);

fn set_sides<T: Clone>(
    target: &mut PerSide<T>,
    both: Option<T>,
    client: Option<T>,
    server: Option<T>,
) {
    if let Some(value) = both {
        *target = PerSide::both(value);
    }
    if let Some(value) = client {
        target.client = value;
    }
    if let Some(value) = server {
        target.server = value;
    }
}

/// Applies the flags to `scenario`.
pub fn apply(
    scenario: &mut Scenario,
    rr: &RrKnobs,
    bulk: &BulkKnobs,
    common: &CommonKnobs,
) -> Result<(), NotApplicable> {
    let some = |o: Option<u32>| o.map(Some);
    match scenario {
        // An imported capture is read and a watch observes, not run: nothing to change.
        Scenario::Import(_) | Scenario::Watch(_) => return Err(NotApplicable("a knob")),
        Scenario::Rr(spec) | Scenario::Server(spec) => {
            if bulk.bytes.is_some() {
                return Err(NotApplicable("--bytes"));
            }
            if bulk.app_buffer.is_some() {
                return Err(NotApplicable("--app-buffer"));
            }
            if bulk.read_pause_us.is_some() {
                return Err(NotApplicable("--read-pause-us"));
            }
            spec.requests = rr.count.unwrap_or(spec.requests);
            spec.size_bytes = rr.size.unwrap_or(spec.size_bytes);
            spec.response_bytes = rr.response_size.or(spec.response_bytes);
            spec.reconnect_every = rr.reconnect_every.unwrap_or(spec.reconnect_every);
            spec.connections = rr.connections.unwrap_or(spec.connections);
            spec.think_us = rr.think_us.unwrap_or(spec.think_us);
            spec.duration_ms = common.duration.or(spec.duration_ms);
            spec.link = common.link.or(spec.link);
            if let Some(sides) = rr.nodelay {
                spec.nodelay = sides.flags();
            }
            if let Some(sides) = rr.cork {
                spec.cork = sides.flags();
            }
            if let Some(sides) = rr.quickack {
                spec.quickack = sides.flags();
            }
            set_sides(
                &mut spec.write,
                rr.write.map(Into::into),
                rr.client_write.map(Into::into),
                rr.server_write.map(Into::into),
            );
            apply_buffers(&mut spec.sndbuf, &mut spec.rcvbuf, &mut spec.congestion, common, some);
        }
        Scenario::Bulk(spec) => {
            let rr_flags = [
                (rr.count.is_some(), "--count"),
                (rr.size.is_some(), "--size"),
                (rr.response_size.is_some(), "--response-size"),
                (rr.reconnect_every.is_some(), "--reconnect-every"),
                (rr.connections.is_some(), "--connections"),
                (rr.think_us.is_some(), "--think-us"),
                (rr.nodelay.is_some(), "--nodelay"),
                (rr.cork.is_some(), "--cork"),
                (rr.quickack.is_some(), "--quickack"),
                (rr.write.is_some(), "--write"),
                (rr.client_write.is_some(), "--client-write"),
                (rr.server_write.is_some(), "--server-write"),
            ];
            if let Some((_, flag)) = rr_flags.iter().find(|(given, _)| *given) {
                return Err(NotApplicable(flag));
            }
            spec.bytes = bulk.bytes.unwrap_or(spec.bytes);
            spec.app_buffer_bytes = bulk.app_buffer.unwrap_or(spec.app_buffer_bytes);
            spec.read_pause_us = bulk.read_pause_us.unwrap_or(spec.read_pause_us);
            spec.duration_ms = common.duration.or(spec.duration_ms);
            spec.link = common.link.or(spec.link);
            apply_buffers(&mut spec.sndbuf, &mut spec.rcvbuf, &mut spec.congestion, common, some);
        }
    }
    Ok(())
}

fn apply_buffers(
    sndbuf: &mut PerSide<Option<u32>>,
    rcvbuf: &mut PerSide<Option<u32>>,
    congestion: &mut PerSide<Option<String>>,
    common: &CommonKnobs,
    some: impl Fn(Option<u32>) -> Option<Option<u32>>,
) {
    set_sides(sndbuf, some(common.sndbuf), some(common.client_sndbuf), some(common.server_sndbuf));
    set_sides(rcvbuf, some(common.rcvbuf), some(common.client_rcvbuf), some(common.server_rcvbuf));
    if let Some(name) = &common.cc {
        *congestion = PerSide::both(Some(name.clone()));
    }
}

/// The flag behind a spec field, for messages about a bad value.
pub fn flag_of(field: &str) -> String {
    let flag = match field {
        "requests" => "count",
        "size_bytes" => "size",
        "response_bytes" => "response-size",
        "duration_ms" => "duration",
        "think_us" => "think-us",
        "app_buffer_bytes" => "app-buffer",
        "read_pause_us" => "read-pause-us",
        "sndbuf.client" => "client-sndbuf",
        "sndbuf.server" => "server-sndbuf",
        "rcvbuf.client" => "client-rcvbuf",
        "rcvbuf.server" => "server-rcvbuf",
        "congestion.client" | "congestion.server" => "cc",
        link if link.starts_with("link.") => "link",
        other => return format!("--{}", other.replace('_', "-")),
    };
    format!("--{flag}")
}
