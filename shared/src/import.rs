//! A tcpdump or Wireshark capture of any TCP conversation as a session's messages: each TCP
//! packet a `Segment` event of its connection. Pure over any `Read` (a file in the command
//! line, the bytes of a dropped file in the page), in two passes that hold one packet at a time.
//!
//! - Connections are told apart by 4-tuple, numbered from 1 in the order they first appear. The
//!   side that sent the SYN (without ACK) is the client; the one that sent SYN+ACK is the server;
//!   with neither captured, the endpoint with the higher port is the client (ephemeral ports are
//!   high), and on equal ports the one that sent first.
//! - `req` counts request-like exchanges per connection: it starts at 0 and goes up by one each
//!   time the client sends data after the server has sent some ([`ExchangeRule`], the rule a
//!   watch numbers its exchanges by).
//! - Times are nanoseconds since the first TCP packet of the capture.

use std::collections::HashMap;
use std::io::Read;
use std::net::IpAddr;

use crate::event::{ConnId, Event, EventKind, Side};
use crate::exchange::ExchangeRule;
use crate::packet::Packet;
use crate::packet_stalls;
use crate::pcap;
use crate::spec::{ImportSpec, ImportedConnection};
use crate::wire::{Instruments, EVENTS_PER_MESSAGE};

/// An address and port.
pub type Endpoint = (IpAddr, u16);

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

/// The connections of a capture, from a first pass over it: who the client is in each needs
/// the whole capture (a SYN may come late in a merged file), before any event is written.
pub struct Scan {
    pub connections: Vec<Connection>,
    index: HashMap<(Endpoint, Endpoint), usize>,
    /// The first TCP packet's time: the session's zero.
    start_ns: u64,
    /// Packets read, and those of them that were not TCP over IP (or not readable as such).
    pub packets: usize,
    pub skipped: usize,
    pub error: Option<pcap::CaptureError>,
}

/// A connection's key: its two endpoints, in one order whichever way the packet went.
fn key(p: &Packet) -> (Endpoint, Endpoint) {
    let (a, b) = ((p.src, p.src_port), (p.dst, p.dst_port));
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Pass 1: every packet of the capture read once, one at a time, for its connection.
pub fn scan(src: impl Read) -> Scan {
    let mut reader = pcap::CaptureReader::new(src);
    let mut scan = Scan {
        connections: Vec::new(),
        index: HashMap::new(),
        start_ns: 0,
        packets: 0,
        skipped: 0,
        error: None,
    };
    while let Some(captured) = reader.next_packet() {
        scan.packets += 1;
        let Ok(p) = pcap::parse_link(captured.linktype, captured.data) else {
            scan.skipped += 1;
            continue;
        };
        if scan.packets - scan.skipped == 1 {
            scan.start_ns = captured.ts_ns;
        }
        let n = scan.connections.len();
        let i = *scan.index.entry(key(&p)).or_insert(n);
        if i == n {
            let (first, second) = ((p.src, p.src_port), (p.dst, p.dst_port));
            let (client, server) =
                if second.1 > first.1 { (second, first) } else { (first, second) };
            scan.connections.push(Connection {
                client,
                server,
                told_by: "higher port",
                segments: 0,
                bytes: [0, 0],
            });
        }
        let c = &mut scan.connections[i];
        let syn = p.segment.has(crate::event::tcp_flags::SYN);
        let ack = p.segment.has(crate::event::tcp_flags::ACK);
        if syn && c.told_by != "SYN" {
            let (sender, receiver) = ((p.src, p.src_port), (p.dst, p.dst_port));
            (c.client, c.server, c.told_by) =
                if ack { (receiver, sender, "SYN+ACK") } else { (sender, receiver, "SYN") };
        }
    }
    scan.error = reader.into_error();
    // Who sent what is known once the clients are: counted in the second pass.
    scan
}

/// Pass 2: the capture read again, each TCP packet an event of its connection, handed to
/// `batch` [`EVENTS_PER_MESSAGE`] at a time and to `finder`. Returns the events made. Only the
/// batch and the finder's windows are held, whatever the size of the capture.
pub fn events(
    src: impl Read,
    scan: &mut Scan,
    finder: &mut packet_stalls::StallFinder,
    mut batch: impl FnMut(Vec<Event>) -> Result<(), String>,
) -> Result<u64, String> {
    let mut reader = pcap::CaptureReader::new(src);
    let mut exchanges = vec![ExchangeRule::default(); scan.connections.len()];
    let mut pending = Vec::with_capacity(EVENTS_PER_MESSAGE);
    let mut made = 0u64;
    while let Some(captured) = reader.next_packet() {
        let Ok(p) = pcap::parse_link(captured.linktype, captured.data) else { continue };
        // A packet the first pass did not see (the file grew in between) is left out.
        let Some(&i) = scan.index.get(&key(&p)) else { continue };
        let c = &mut scan.connections[i];
        let side = if (p.src, p.src_port) == c.client { Side::Client } else { Side::Server };
        c.segments += 1;
        c.bytes[usize::from(side == Side::Server)] += u64::from(p.segment.len);
        let req = exchanges[i].on_segment(side, &p.segment);
        let event = Event {
            // A capture's clock may step back (merged files): never below the start.
            at_ns: captured.ts_ns.saturating_sub(scan.start_ns),
            side,
            conn: ConnId(i as u32 + 1),
            req,
            kind: EventKind::Segment(p.segment),
        };
        finder.push(&event, ());
        pending.push(event);
        made += 1;
        if pending.len() == EVENTS_PER_MESSAGE {
            batch(std::mem::replace(&mut pending, Vec::with_capacity(EVENTS_PER_MESSAGE)))?;
        }
    }
    if !pending.is_empty() {
        batch(pending)?;
    }
    Ok(made)
}

/// What an import of a capture held in memory produced (the tests' form of `scan` and
/// `events`).
#[cfg(test)]
pub struct Imported {
    pub connections: Vec<Connection>,
    pub events: Vec<Event>,
    pub error: Option<pcap::CaptureError>,
}

#[cfg(test)]
pub fn import_bytes(bytes: &[u8]) -> Imported {
    let mut scan = scan(bytes);
    let mut all = Vec::new();
    let mut finder = packet_stalls::StallFinder::default();
    events(bytes, &mut scan, &mut finder, |batch| {
        all.extend(batch);
        Ok(())
    })
    .expect("collecting cannot fail");
    Imported { connections: scan.connections, events: all, error: scan.error }
}

/// At most this many connections are named (their addresses) in an import's spec. The spec
/// travels in the session's one `RunStarted` message, which a reader takes only up to
/// [`MAX_MESSAGE_BYTES`](crate::wire::MAX_MESSAGE_BYTES) (16 MiB); a connection's entry is at
/// most 108 bytes (two bracketed IPv6 endpoints of 47 characters and "higher port", each with
/// its length), so 100,000 of them take at most 10.8 MB and leave room for the capture's name.
/// Connections past these keep their events and their numbers, and every reader shows them by
/// number ([`unnamed_note`] says why): a capture of any number of connections imports to a
/// file that reads back whole.
pub const MAX_NAMED_CONNECTIONS: usize = 100_000;

/// What the session says about where its packets came from: the first
/// [`MAX_NAMED_CONNECTIONS`] connections' addresses.
pub fn import_spec(source: &str, connections: &[Connection]) -> ImportSpec {
    ImportSpec {
        source: source.to_string(),
        connections: connections
            .iter()
            .take(MAX_NAMED_CONNECTIONS)
            .map(|c| ImportedConnection {
                client: endpoint(c.client),
                server: endpoint(c.server),
                client_by: c.told_by.to_string(),
            })
            .collect(),
    }
}

/// The line that says why `unnamed` connections after the first `named` are shown by number
/// only (see [`MAX_NAMED_CONNECTIONS`]).
pub fn unnamed_note(named: usize, unnamed: usize) -> String {
    format!(
        "the session holds the addresses of the first {named} connections only ({} at most, to \
         keep its header readable); the other {unnamed} are listed by number",
        MAX_NAMED_CONNECTIONS
    )
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

/// `127.0.0.1:7`, `[::1]:7`.
pub fn endpoint((addr, port): Endpoint) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tcp_flags::{ACK, PSH, SYN};
    use crate::event::Segment;
    use crate::packet::synthesize;
    use crate::pcap::{linktype, PcapngWriter};
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
    fn the_named_connections_of_the_longest_addresses_fit_in_one_message() {
        use crate::spec::Scenario;
        use crate::wire::{encode, ToBrowser, MAX_MESSAGE_BYTES};
        use std::net::Ipv6Addr;
        // Every endpoint as long as one can be: eight four-digit groups and a five-digit port.
        let longest = (
            IpAddr::V6(Ipv6Addr::new(
                0xfd12, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff,
            )),
            65535,
        );
        assert_eq!(endpoint(longest).len(), 47);
        let one = Connection {
            client: longest,
            server: longest,
            told_by: "higher port",
            segments: 1,
            bytes: [0, 0],
        };
        let connections: Vec<Connection> =
            (0..MAX_NAMED_CONNECTIONS + 10).map(|_| Connection { ..one }).collect();
        // The longest path Linux opens.
        let source = "x".repeat(4096);
        let spec = import_spec(&source, &connections);
        assert_eq!(spec.connections.len(), MAX_NAMED_CONNECTIONS);
        let started = ToBrowser::RunStarted {
            run: crate::event::RunId(1),
            spec: Scenario::Import(spec),
            instruments: imported_instruments(),
        };
        let len = encode(&started).len();
        assert!(len <= 108 * MAX_NAMED_CONNECTIONS + 4200, "{len} bytes");
        assert!(len < MAX_MESSAGE_BYTES, "{len} bytes");
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
