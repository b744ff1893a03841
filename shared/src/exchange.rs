//! Exchanges of a conversation whose protocol ackscope does not know, from its packets alone:
//! the unit a watched service's requests are counted and timed in (`ackscope watch`).
//!
//! The rule, in one place (an imported capture numbers its requests by it too):
//! - a connection's exchange 0 begins with its first data;
//! - each time the client sends data after the server has sent some, the next exchange begins:
//!   a request is the client's data up to the server's first answer bytes, and an exchange ends
//!   where the next request begins. An idle gap after an answer is not part of either exchange;
//!   pipelined requests sent before any answer are one exchange (the direction never changed).
//! - an exchange's time is from its first request byte on the wire to its last answer byte:
//!   what the client waits, less its own write and read calls (a few microseconds each).
//!   An exchange the server never answered (the connection closed, the watch ended) has no time
//!   and is not counted.
//!
//! [`Conversations`] turns live packets into a session's `Segment` events: connections numbered
//! as they appear, sides told by the watched ports, each segment numbered with its exchange.
//! [`ExchangeTally`] reads those events back (from the watch itself, a file, or the page) into
//! the exchanges' count and latencies. Both hold only what is open: a connection is forgotten
//! once it closes, and at most [`MAX_OPEN_CONNECTIONS`] are followed at once.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::analysis::Summary;
use crate::event::{tcp_flags, ConnId, Event, EventKind, ReqId, Side};
use crate::keyed_hash::KeyedMap;
use crate::packet::Packet;
use crate::sorted_multiset::SortedMultiset;
use crate::stats::ns_to_ms;

/// Connections followed at once, by a watch and by a reader of its events. A connection is
/// a few dozen bytes here, so this bounds either at a few MB; past it, the packets of new
/// connections are counted and left out (a watch) or the oldest open exchange is settled
/// (a reader), never an unbounded table.
pub const MAX_OPEN_CONNECTIONS: usize = 65_536;

/// A closed connection is kept this long after its close, so that the last ACKs of its
/// teardown still find it, then forgotten.
pub const LINGER_NS: u64 = 2_000_000_000;

/// An address and port.
pub type Endpoint = (IpAddr, u16);

/// Where one connection is in its exchanges: the numbering rule of the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExchangeRule {
    req: u32,
    server_spoke: bool,
}

impl ExchangeRule {
    /// The exchange a segment of `len` payload bytes sent by `side` belongs to.
    pub fn on_segment(&mut self, side: Side, len: u32) -> ReqId {
        if len > 0 {
            match side {
                Side::Client if self.server_spoke => {
                    self.req += 1;
                    self.server_spoke = false;
                }
                Side::Client => {}
                Side::Server => self.server_spoke = true,
            }
        }
        ReqId(self.req)
    }

    /// The exchange the connection is in now.
    pub fn current(&self) -> ReqId {
        ReqId(self.req)
    }
}

/// One watched connection.
#[derive(Clone, Debug)]
pub struct Conversation {
    pub id: ConnId,
    /// The side that connected to a watched port, and the side listening on it.
    pub client: Endpoint,
    pub server: Endpoint,
    rule: ExchangeRule,
    /// FINs seen from the client and from the server; an RST ends both.
    fins: [bool; 2],
    closed_at_ns: Option<u64>,
}

impl Conversation {
    /// The exchange the connection is in now.
    pub fn exchange(&self) -> ReqId {
        self.rule.current()
    }

    /// The side that owns `local`, an endpoint of this connection.
    pub fn side_of(&self, local: Endpoint) -> Side {
        if local == self.server {
            Side::Server
        } else {
            Side::Client
        }
    }
}

/// A packet of a watched connection, as the session records it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub event: Event,
    /// The packet began a connection not seen before: its client and server.
    pub opened: Option<(Endpoint, Endpoint)>,
}

/// The connections to or from the watched ports, from their packets as they arrive.
#[derive(Debug)]
pub struct Conversations {
    server_ports: Vec<u16>,
    /// Keyed by the two endpoints in one order, whichever way the packet went.
    open: HashMap<(Endpoint, Endpoint), Conversation>,
    next_id: u32,
    /// Packets of new connections left out while [`MAX_OPEN_CONNECTIONS`] were followed.
    pub left_out: u64,
}

impl Conversations {
    /// Follows the connections to or from `server_ports`: the side on one of them is the server.
    pub fn new(server_ports: &[u16]) -> Conversations {
        Conversations {
            server_ports: server_ports.to_vec(),
            open: HashMap::new(),
            next_id: 1,
            left_out: 0,
        }
    }

    /// Connections followed now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// The event of `packet`, sent at `at_ns`, if it belongs to a watched port's connection.
    pub fn packet(&mut self, at_ns: u64, packet: &Packet) -> Option<Seen> {
        let from = (packet.src, packet.src_port);
        let to = (packet.dst, packet.dst_port);
        let to_server = self.server_ports.contains(&packet.dst_port);
        let from_server = self.server_ports.contains(&packet.src_port);
        if !to_server && !from_server {
            return None;
        }
        let key = if from <= to { (from, to) } else { (to, from) };
        let mut opened = None;
        if !self.open.contains_key(&key) {
            if self.open.len() >= MAX_OPEN_CONNECTIONS {
                self.left_out += 1;
                return None;
            }
            let syn = packet.segment.has(tcp_flags::SYN);
            let ack = packet.segment.has(tcp_flags::ACK);
            // The sender is the client when it sends to a watched port; when both ports are
            // watched the handshake says, and without one the higher (ephemeral) port.
            let sender_is_client = match (to_server, from_server) {
                (true, false) => true,
                (false, true) => false,
                _ if syn => !ack,
                _ => packet.src_port > packet.dst_port,
            };
            let (client, server) = if sender_is_client { (from, to) } else { (to, from) };
            self.begin(key, client, server);
            opened = Some((client, server));
        }
        let conversation = self.open.get_mut(&key).expect("inserted above");
        let side = if from == conversation.client { Side::Client } else { Side::Server };
        let segment = &packet.segment;
        let req = conversation.rule.on_segment(side, segment.len);
        if segment.has(tcp_flags::FIN) {
            conversation.fins[usize::from(side == Side::Server)] = true;
        }
        let closed = segment.has(tcp_flags::RST) || conversation.fins == [true, true];
        if closed && conversation.closed_at_ns.is_none() {
            conversation.closed_at_ns = Some(at_ns);
        }
        let event = Event {
            at_ns,
            side,
            conn: conversation.id,
            req,
            kind: EventKind::Segment(segment.clone()),
        };
        Some(Seen { event, opened })
    }

    /// The connection of a socket found without its packets (sock_diag), followed from now on
    /// if it is a watched port's and there is room: the side on a watched port is the server.
    /// Also says whether it was new, with its client and server.
    #[allow(clippy::type_complexity)]
    pub fn socket(
        &mut self,
        local: Endpoint,
        remote: Endpoint,
    ) -> Option<(&Conversation, Option<(Endpoint, Endpoint)>)> {
        let key = if local <= remote { (local, remote) } else { (remote, local) };
        let mut opened = None;
        if !self.open.contains_key(&key) {
            let (client, server) = if self.server_ports.contains(&local.1) {
                (remote, local)
            } else if self.server_ports.contains(&remote.1) {
                (local, remote)
            } else {
                return None;
            };
            if self.open.len() >= MAX_OPEN_CONNECTIONS {
                self.left_out += 1;
                return None;
            }
            self.begin(key, client, server);
            opened = Some((client, server));
        }
        self.open.get(&key).map(|c| (c, opened))
    }

    fn begin(&mut self, key: (Endpoint, Endpoint), client: Endpoint, server: Endpoint) {
        let id = ConnId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let conversation = Conversation {
            id,
            client,
            server,
            rule: ExchangeRule::default(),
            fins: [false; 2],
            closed_at_ns: None,
        };
        self.open.insert(key, conversation);
    }

    /// The connection between `local` and `remote`, either way round.
    pub fn find(&self, local: Endpoint, remote: Endpoint) -> Option<&Conversation> {
        let key = if local <= remote { (local, remote) } else { (remote, local) };
        self.open.get(&key)
    }

    /// Forgets the connections closed more than [`LINGER_NS`] before `now_ns`; returns them.
    pub fn retire(&mut self, now_ns: u64) -> Vec<ConnId> {
        let mut retired = Vec::new();
        self.open.retain(|_, c| {
            let keep = c.closed_at_ns.is_none_or(|at| now_ns.saturating_sub(at) < LINGER_NS);
            if !keep {
                retired.push(c.id);
            }
            keep
        });
        retired
    }
}

/// One connection's exchange still open in a reader.
#[derive(Clone, Copy, Debug)]
struct OpenExchange {
    req: ReqId,
    /// Its first request byte, and its last answer byte so far.
    start_ns: Option<u64>,
    last_answer_ns: Option<u64>,
    fins: [bool; 2],
}

/// The exchanges of a run's `Segment` events: how many were answered and how long each took.
/// Memory: one entry per open connection (at most [`MAX_OPEN_CONNECTIONS`]), and one latency
/// per exchange (8 bytes, as a run keeps one per request).
#[derive(Debug, Default)]
pub struct ExchangeTally {
    open: KeyedMap<ConnId, OpenExchange>,
    latencies: SortedMultiset,
    first_start_ns: Option<u64>,
    last_answer_ns: Option<u64>,
    /// Exchanges whose request was never answered.
    pub unanswered: u64,
}

impl ExchangeTally {
    pub fn push(&mut self, event: &Event) {
        let EventKind::Segment(segment) = &event.kind else { return };
        let fresh =
            OpenExchange { req: event.req, start_ns: None, last_answer_ns: None, fins: [false; 2] };
        if !self.open.contains_key(&event.conn) {
            // A bare ACK of a connection not followed (the last of a teardown) opens nothing,
            // so a closed connection is not held again by its final ACK.
            if segment.len == 0 && !segment.has(tcp_flags::SYN) {
                return;
            }
        }
        if !self.open.contains_key(&event.conn) && self.open.len() >= MAX_OPEN_CONNECTIONS {
            // A hostile or enormous file: the bound holds by settling some open exchange.
            if let Some(&conn) = self.open.keys().next() {
                let oldest = self.open.remove(&conn).expect("a key just listed");
                self.settle(oldest);
            }
        }
        let open = self.open.entry(event.conn).or_insert(fresh);
        if open.req != event.req {
            let done = std::mem::replace(open, OpenExchange { fins: open.fins, ..fresh });
            self.settle(done);
        }
        let open = self.open.get_mut(&event.conn).expect("present");
        if segment.len > 0 {
            match event.side {
                Side::Client => {
                    open.start_ns.get_or_insert(event.at_ns);
                }
                // Answer bytes before any request byte (a server that speaks first, a watch
                // that began mid-exchange) time nothing.
                Side::Server if open.start_ns.is_some() => open.last_answer_ns = Some(event.at_ns),
                Side::Server => {}
            }
        }
        if segment.has(tcp_flags::FIN) {
            open.fins[usize::from(event.side == Side::Server)] = true;
        }
        if segment.has(tcp_flags::RST) || open.fins == [true, true] {
            let done = self.open.remove(&event.conn).expect("present");
            self.settle(done);
        }
    }

    /// The stream ended: every open exchange that was answered counts.
    pub fn finish(&mut self) {
        for (_, open) in std::mem::take(&mut self.open) {
            self.settle(open);
        }
    }

    fn settle(&mut self, exchange: OpenExchange) {
        match (exchange.start_ns, exchange.last_answer_ns) {
            (Some(start), Some(end)) => {
                self.latencies.insert(end.saturating_sub(start));
                self.first_start_ns = Some(self.first_start_ns.map_or(start, |s| s.min(start)));
                self.last_answer_ns = Some(self.last_answer_ns.map_or(end, |e| e.max(end)));
            }
            (Some(_), None) => self.unanswered += 1,
            _ => {}
        }
    }

    /// Exchanges answered so far.
    pub fn answered(&self) -> usize {
        self.latencies.len()
    }

    /// The exchanges as a run's summary: `requests` counts answered exchanges, the latencies
    /// are theirs, and `stalled` is the waits the caller named (from packets).
    pub fn summary(&self, stalled: u32) -> Summary {
        let duration_s = match (self.first_start_ns, self.last_answer_ns) {
            (Some(start), Some(end)) => end.saturating_sub(start) as f64 / 1e9,
            _ => 0.0,
        };
        let requests = u32::try_from(self.latencies.len()).unwrap_or(u32::MAX);
        Summary {
            requests,
            duration_s,
            rps: if duration_s > 0.0 { f64::from(requests) / duration_s } else { 0.0 },
            p50_ms: ns_to_ms(self.latencies.percentile(50.0)),
            p99_ms: ns_to_ms(self.latencies.percentile(99.0)),
            max_ms: ns_to_ms(self.latencies.max().unwrap_or(0)),
            stalled_reads: stalled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Segment;
    use std::net::Ipv4Addr;

    const CLIENT: Endpoint = (IpAddr::V4(Ipv4Addr::LOCALHOST), 51000);
    const SERVER: Endpoint = (IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);

    fn packet(from: Endpoint, to: Endpoint, flags: u8, len: u32) -> Packet {
        Packet {
            src: from.0,
            dst: to.0,
            src_port: from.1,
            dst_port: to.1,
            segment: Segment { flags, len, ..Segment::default() },
        }
    }

    const ACK: u8 = tcp_flags::ACK;
    const PSH_ACK: u8 = tcp_flags::PSH | tcp_flags::ACK;

    /// A keep-alive conversation: handshake, two exchanges (the first with its request in two
    /// segments, the second after an idle second), then the close.
    fn conversation() -> Vec<(u64, Packet)> {
        let ms = 1_000_000;
        vec![
            (0, packet(CLIENT, SERVER, tcp_flags::SYN, 0)),
            (1, packet(SERVER, CLIENT, tcp_flags::SYN | ACK, 0)),
            (2, packet(CLIENT, SERVER, ACK, 0)),
            (ms, packet(CLIENT, SERVER, PSH_ACK, 4)),
            (41 * ms, packet(SERVER, CLIENT, ACK, 0)),
            (41 * ms + 10, packet(CLIENT, SERVER, PSH_ACK, 100)),
            (42 * ms, packet(SERVER, CLIENT, PSH_ACK, 4)),
            (43 * ms, packet(SERVER, CLIENT, PSH_ACK, 100)),
            (1_043 * ms, packet(CLIENT, SERVER, PSH_ACK, 104)),
            (1_044 * ms, packet(SERVER, CLIENT, PSH_ACK, 104)),
            (1_045 * ms, packet(CLIENT, SERVER, tcp_flags::FIN | ACK, 0)),
            (1_046 * ms, packet(SERVER, CLIENT, tcp_flags::FIN | ACK, 0)),
            (1_047 * ms, packet(CLIENT, SERVER, ACK, 0)),
        ]
    }

    #[test]
    fn a_watched_port_is_the_server_and_each_answer_then_request_starts_an_exchange() {
        let mut conversations = Conversations::new(&[8080]);
        let mut events = Vec::new();
        for (at, p) in conversation() {
            let seen = conversations.packet(at, &p).expect("to the watched port");
            if at == 0 {
                assert_eq!(seen.opened, Some((CLIENT, SERVER)));
            } else {
                assert_eq!(seen.opened, None);
            }
            events.push(seen.event);
        }
        let reqs: Vec<u32> = events.iter().map(|e| e.req.0).collect();
        assert_eq!(reqs, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
        let sides: Vec<Side> = events.iter().map(|e| e.side).collect();
        assert_eq!(sides[..3], [Side::Client, Side::Server, Side::Client]);
        assert!(events.iter().all(|e| e.conn == ConnId(1)));

        // Other ports are not watched.
        let other = packet((CLIENT.0, 40000), (SERVER.0, 9999), ACK, 10);
        assert!(conversations.packet(5, &other).is_none());

        // Closed by both FINs: kept through the linger, then forgotten.
        assert!(conversations.retire(1_047_000_000 + LINGER_NS / 2).is_empty());
        assert_eq!(conversations.retire(1_047_000_000 + LINGER_NS), vec![ConnId(1)]);
        assert!(conversations.is_empty());

        let mut tally = ExchangeTally::default();
        events.iter().for_each(|e| tally.push(e));
        // Both exchanges settled at the close, with nothing held.
        assert_eq!(tally.answered(), 2);
        assert!(tally.open.is_empty());
        let summary = tally.summary(0);
        assert_eq!(summary.requests, 2);
        // 1 ms to 43 ms, and 1,043 ms to 1,044 ms: the idle second is in neither.
        assert!((summary.max_ms - 42.0).abs() < 1e-6, "{summary:?}");
        assert!((summary.p50_ms - 1.0).abs() < 1e-6, "{summary:?}");
    }

    #[test]
    fn a_connection_seen_mid_stream_is_sided_by_the_port_and_unanswered_requests_do_not_count() {
        let mut conversations = Conversations::new(&[8080]);
        // The answer is the first thing seen: it times nothing.
        let answer = conversations.packet(0, &packet(SERVER, CLIENT, PSH_ACK, 50)).unwrap();
        assert_eq!(answer.event.side, Side::Server);
        assert_eq!(answer.opened, Some((CLIENT, SERVER)));
        let request = conversations.packet(10, &packet(CLIENT, SERVER, PSH_ACK, 5)).unwrap();
        assert_eq!(request.event.req, ReqId(1));
        let mut tally = ExchangeTally::default();
        tally.push(&answer.event);
        tally.push(&request.event);
        tally.finish();
        assert_eq!(tally.answered(), 0);
        assert_eq!(tally.unanswered, 1);
        assert_eq!(tally.summary(0).requests, 0);
    }

    #[test]
    fn new_connections_past_the_bound_are_counted_not_followed() {
        let mut conversations = Conversations::new(&[8080]);
        for port in 0..MAX_OPEN_CONNECTIONS as u32 + 10 {
            let client = (IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + port)), 40000);
            conversations.packet(u64::from(port), &packet(client, SERVER, tcp_flags::SYN, 0));
        }
        assert_eq!(conversations.len(), MAX_OPEN_CONNECTIONS);
        assert_eq!(conversations.left_out, 10);
    }

    #[test]
    fn a_reader_holds_at_most_the_bound_of_open_connections() {
        let mut tally = ExchangeTally::default();
        let n = MAX_OPEN_CONNECTIONS as u32 + 100;
        for conn in 1..=n {
            for (side, at) in [(Side::Client, 0), (Side::Server, 5)] {
                tally.push(&Event {
                    at_ns: u64::from(conn) * 10 + at,
                    side,
                    conn: ConnId(conn),
                    req: ReqId(0),
                    kind: EventKind::Segment(Segment {
                        flags: PSH_ACK,
                        len: 1,
                        ..Segment::default()
                    }),
                });
            }
        }
        assert_eq!(tally.open.len(), MAX_OPEN_CONNECTIONS);
        // The ones settled to make room still count.
        assert_eq!(tally.answered(), 100);
        tally.finish();
        assert_eq!(tally.answered(), n as usize);
    }
}
