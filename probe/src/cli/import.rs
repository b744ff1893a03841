//! `ackscope import CAPTURE [-o FILE]`: a tcpdump or Wireshark capture of any TCP conversation
//! turned into a session of `Segment` events, with the stalls its packets show.
//!
//! - Connections are told apart by 4-tuple, numbered from 1 in the order they first appear. The
//!   side that sent the SYN (without ACK) is the client; the one that sent SYN+ACK is the server;
//!   with neither captured, the endpoint with the higher port is the client (ephemeral ports are
//!   high), and on equal ports the one that sent first.
//! - `req` counts request-like exchanges per connection: it starts at 0 and goes up by one each
//!   time the client sends data after the server has sent some.
//! - Times are nanoseconds since the first TCP packet of the capture.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ackscope_shared::attribution::summarize;
use ackscope_shared::packet::Packet;
use ackscope_shared::pcap;
use ackscope_shared::wire::{
    Hello, HostFacts, Instruments, RunOutcome, ToBrowser, EVENTS_PER_MESSAGE,
};
use ackscope_shared::{
    packet_stalls, ConnId, Event, EventKind, ImportSpec, ImportedConnection, ReqId, RunId,
    Scenario, Side,
};

use super::{Ended, Failure};
use crate::record::{SessionWriter, MAX_FILE_BYTES};

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A pcap or pcapng file (tcpdump -w, Wireshark, dumpcap)
    capture: PathBuf,
    /// The session file to write [default: CAPTURE with the extension .ackscope]
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

type Endpoint = (IpAddr, u16);

/// One connection as found in the capture.
pub struct Connection {
    pub client: Endpoint,
    pub server: Endpoint,
    /// How the client was told: "SYN", "SYN+ACK" or "higher port".
    pub told_by: &'static str,
    pub segments: u32,
    /// Payload bytes, client to server and server to client.
    pub bytes: [u64; 2],
}

/// What an import produced.
pub struct Imported {
    pub connections: Vec<Connection>,
    pub events: Vec<Event>,
    /// Packets read, and those of them that were not TCP over IP (or not readable as such).
    pub packets: usize,
    pub skipped: usize,
    pub error: Option<pcap::CaptureError>,
}

/// Turns a capture's bytes into connections and events. Pure: the caller reads and writes files.
pub fn import_bytes(bytes: &[u8]) -> Imported {
    let capture = pcap::read(bytes);
    let mut parsed: Vec<(u64, Packet)> = Vec::new();
    let mut skipped = 0;
    for p in &capture.packets {
        match pcap::parse_link(p.linktype, p.data) {
            Ok(packet) => parsed.push((p.ts_ns, packet)),
            Err(_) => skipped += 1,
        }
    }
    // Pass 1: which connection each packet belongs to, and who the client is.
    let key = |p: &Packet| {
        let (a, b) = ((p.src, p.src_port), (p.dst, p.dst_port));
        if a <= b {
            (a, b)
        } else {
            (b, a)
        }
    };
    let mut index: HashMap<(Endpoint, Endpoint), usize> = HashMap::new();
    let mut connections: Vec<Connection> = Vec::new();
    for (_, p) in &parsed {
        let n = connections.len();
        let i = *index.entry(key(p)).or_insert(n);
        if i == n {
            let (first, second) = ((p.src, p.src_port), (p.dst, p.dst_port));
            let (client, server) =
                if second.1 > first.1 { (second, first) } else { (first, second) };
            connections.push(Connection {
                client,
                server,
                told_by: "higher port",
                segments: 0,
                bytes: [0, 0],
            });
        }
        let c = &mut connections[i];
        let syn = p.segment.has(ackscope_shared::event::tcp_flags::SYN);
        let ack = p.segment.has(ackscope_shared::event::tcp_flags::ACK);
        if syn && c.told_by != "SYN" {
            let (sender, receiver) = ((p.src, p.src_port), (p.dst, p.dst_port));
            (c.client, c.server, c.told_by) =
                if ack { (receiver, sender, "SYN+ACK") } else { (sender, receiver, "SYN") };
        }
    }
    // Pass 2: the events.
    let start_ns = parsed.first().map_or(0, |(ts, _)| *ts);
    let mut req = vec![(0u32, false); connections.len()];
    let mut events = Vec::with_capacity(parsed.len());
    for (ts_ns, p) in parsed.iter() {
        let i = index[&key(p)];
        let c = &mut connections[i];
        let side = if (p.src, p.src_port) == c.client { Side::Client } else { Side::Server };
        c.segments += 1;
        c.bytes[usize::from(side == Side::Server)] += u64::from(p.segment.len);
        let (count, server_spoke) = &mut req[i];
        if p.segment.len > 0 {
            match side {
                Side::Client if *server_spoke => {
                    *count += 1;
                    *server_spoke = false;
                }
                Side::Client => {}
                Side::Server => *server_spoke = true,
            }
        }
        events.push(Event {
            // A capture's clock may step back (merged files): never below the start.
            at_ns: ts_ns.saturating_sub(start_ns),
            side,
            conn: ConnId(i as u32 + 1),
            req: ReqId(*count),
            kind: EventKind::Segment(p.segment.clone()),
        });
    }
    Imported { connections, events, packets: capture.packets.len(), skipped, error: capture.error }
}

/// What the session says about where its packets came from.
pub fn import_spec(source: &Path, connections: &[Connection]) -> ImportSpec {
    ImportSpec {
        source: source.display().to_string(),
        connections: connections
            .iter()
            .map(|c| ImportedConnection {
                client: endpoint(c.client),
                server: endpoint(c.server),
                client_by: c.told_by.to_string(),
            })
            .collect(),
    }
}

/// The session's messages for an import: one run, no syscall events, packets captured.
pub fn session_messages(spec: ImportSpec, events: Vec<Event>) -> Vec<ToBrowser> {
    let run = RunId(1);
    let mut messages = vec![
        ToBrowser::Hello(Hello::current(env!("CARGO_PKG_VERSION"), HostFacts::default())),
        ToBrowser::RunStarted {
            run,
            spec: Scenario::Import(spec),
            instruments: imported_instruments(),
        },
    ];
    for batch in events.chunks(EVENTS_PER_MESSAGE) {
        messages.push(ToBrowser::Events { run, events: batch.to_vec() });
    }
    messages.push(ToBrowser::RunFinished { run, outcome: RunOutcome::Completed });
    messages
}

/// The instruments of an imported run: packets only.
pub fn imported_instruments() -> Instruments {
    Instruments {
        events: false,
        tcp_info_at_syscalls: false,
        tcp_info_interval_us: 0,
        capture: true,
    }
}

pub fn import(args: &ImportArgs) -> Result<Ended, Failure> {
    let path = &args.capture;
    let size =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?.len();
    if size > MAX_FILE_BYTES {
        return Err(Failure::Run(format!(
            "{} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit",
            path.display()
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let imported = import_bytes(&bytes);
    if imported.packets == 0 {
        if let Some(error) = &imported.error {
            return Err(Failure::Run(format!("{}: {error}", path.display())));
        }
    }
    let output = args.output.clone().unwrap_or_else(|| default_output(path));
    if is_same_file(&output, path) {
        return Err(Failure::Usage(format!(
            "{}: the session would be written over the capture it is read from; name another \
             file with -o",
            output.display()
        )));
    }
    let stalls: Vec<_> =
        packet_stalls::find(&imported.events).into_iter().map(|s| s.stall).collect();
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "imported {} of {} packets from {} (a packet capture: no syscalls, no TCP_INFO){}",
        imported.packets - imported.skipped,
        imported.packets,
        path.display(),
        if imported.skipped > 0 {
            format!("; {} not TCP over IP, skipped", imported.skipped)
        } else {
            String::new()
        }
    );
    print_connections(&mut out, &imported.connections);
    print_stalls(&mut out, &stalls);
    let events = imported.events.len();
    let mut writer = SessionWriter::create(&output).map_err(|e| e.to_string())?;
    let spec = import_spec(path, &imported.connections);
    for message in session_messages(spec, imported.events) {
        writer.write(&message).map_err(|e| e.to_string())?;
    }
    let _ = writeln!(out, "wrote {events} segments to {}", output.display());
    match imported.error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!(
            "{}: {error}; the {} packets before it were imported",
            path.display(),
            imported.packets
        ))),
    }
}

/// `CAPTURE.ackscope` beside the capture, or `CAPTURE.imported.ackscope` when the capture is
/// itself named `.ackscope`: the default never names the input.
fn default_output(capture: &Path) -> PathBuf {
    if capture.extension().is_some_and(|ext| ext == "ackscope") {
        capture.with_extension("imported.ackscope")
    } else {
        capture.with_extension("ackscope")
    }
}

/// Whether `a` and `b` are one file (a link or another spelling of the path included); a path
/// that does not exist yet is no existing file.
fn is_same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

pub fn print_connections(out: &mut impl Write, connections: &[Connection]) {
    for (i, c) in connections.iter().enumerate() {
        let _ = writeln!(
            out,
            "conn {}: client {} -> server {} (client by {}), {} segments, {} bytes client->server, \
             {} bytes server->client",
            i + 1,
            endpoint(c.client),
            endpoint(c.server),
            c.told_by,
            c.segments,
            c.bytes[0],
            c.bytes[1]
        );
    }
}

pub fn print_stalls(out: &mut impl Write, stalls: &[ackscope_shared::attribution::Stall]) {
    if stalls.is_empty() {
        let _ = writeln!(out, "no stalls seen in the packets");
        return;
    }
    for class in summarize(stalls) {
        let _ = writeln!(out, "{}", class.line());
    }
}

fn endpoint((addr, port): Endpoint) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackscope_shared::event::tcp_flags::{ACK, PSH, SYN};
    use ackscope_shared::packet::synthesize;
    use ackscope_shared::pcap::{linktype, PcapngWriter};
    use ackscope_shared::Segment;
    use std::net::Ipv4Addr;

    fn raw(from_client: bool, flags: u8, seq: u32, ack: u32, len: u32) -> Vec<u8> {
        let (c, s) =
            ((IpAddr::V4(Ipv4Addr::LOCALHOST), 50000), (IpAddr::V4(Ipv4Addr::LOCALHOST), 7));
        let ((src, sp), (dst, dp)) = if from_client { (c, s) } else { (s, c) };
        let segment = Segment { flags, seq, ack, len, ..Segment::default() };
        synthesize(&Packet { src, dst, src_port: sp, dst_port: dp, segment })
    }

    #[test]
    fn a_nagle_exchange_imports_with_its_stall() {
        let mut file = Vec::new();
        let mut w = PcapngWriter::new(&mut file);
        let lo = w.interface("lo", linktype::RAW);
        let t = 1_000_000_000;
        w.packet(lo, t, &raw(true, SYN, 0, 0, 0), None);
        w.packet(lo, t + 10_000, &raw(false, SYN | ACK, 0, 1, 0), None);
        w.packet(lo, t + 20_000, &raw(true, ACK, 1, 1, 0), None);
        w.packet(lo, t + 100_000, &raw(true, PSH | ACK, 1, 1, 4), None);
        w.packet(lo, t + 43_700_000, &raw(false, ACK, 1, 5, 0), None);
        w.packet(lo, t + 43_730_000, &raw(true, PSH | ACK, 5, 1, 2048), None);
        w.packet(lo, t + 43_800_000, &raw(false, PSH | ACK, 1, 2053, 4), None);
        w.packet(lo, t + 43_900_000, &raw(true, PSH | ACK, 2053, 5, 4), None);
        let imported = import_bytes(&file);
        assert_eq!(imported.error, None);
        assert_eq!(imported.connections.len(), 1);
        assert_eq!(imported.connections[0].client.1, 50000);
        assert_eq!(imported.connections[0].told_by, "SYN");
        assert_eq!(imported.connections[0].bytes, [2056, 4]);
        let reqs: Vec<u32> = imported.events.iter().map(|e| e.req.0).collect();
        assert_eq!(reqs, [0, 0, 0, 0, 0, 0, 0, 1]);
        let stalls = packet_stalls::find(&imported.events);
        assert_eq!(stalls.len(), 1);
        assert_eq!(stalls[0].stall.from, Side::Client);
        assert_eq!(stalls[0].ended_by, 5);
    }

    #[test]
    fn without_a_syn_the_higher_port_is_the_client() {
        let mut file = Vec::new();
        let mut w = PcapngWriter::new(&mut file);
        let lo = w.interface("lo", linktype::RAW);
        w.packet(lo, 5, &raw(false, PSH | ACK, 1, 1, 10), None);
        let imported = import_bytes(&file);
        assert_eq!(imported.connections[0].told_by, "higher port");
        assert_eq!(imported.events[0].side, Side::Server);
    }

    #[test]
    fn a_truncated_capture_keeps_what_was_read() {
        let mut file = Vec::new();
        let mut w = PcapngWriter::new(&mut file);
        let lo = w.interface("lo", linktype::RAW);
        w.packet(lo, 5, &raw(true, SYN, 0, 0, 0), None);
        w.packet(lo, 6, &raw(false, SYN | ACK, 0, 1, 0), None);
        file.truncate(file.len() - 3);
        let imported = import_bytes(&file);
        assert_eq!(imported.events.len(), 1);
        assert!(imported.error.is_some());
    }
}
