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

use std::collections::hash_map::Entry;
use std::net::IpAddr;

use crate::analysis::Summary;
use crate::event::{tcp_flags, ConnId, Event, EventKind, ReqId, Segment, Side};
use crate::keyed_hash::KeyedMap;
use crate::packet::Packet;
use crate::packet_stalls::seq_ge;
use crate::sorted_multiset::SortedMultiset;
use crate::stats::{ns_to_ms, Buckets};

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

/// A connection's key: its two endpoints in one order, whichever way a packet went.
pub fn connection_key(a: Endpoint, b: Endpoint) -> (Endpoint, Endpoint) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Where one connection is in its exchanges: the numbering rule of the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExchangeRule {
    req: u32,
    server_spoke: bool,
    /// Each side's highest sequence number sent so far (the end of its data), once it sent
    /// some: a retransmission or a duplicate copy carries no new bytes and moves nothing.
    sent_to: [Option<u32>; 2],
}

impl ExchangeRule {
    /// The exchange `segment`, sent by `side`, belongs to.
    pub fn on_segment(&mut self, side: Side, segment: &Segment) -> ReqId {
        if segment.len > 0 && self.carries_new_bytes(side, segment) {
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

    /// Whether `segment` carries bytes past the highest its sender sent before (and notes its
    /// end). Data bytes only: a SYN's or a FIN's sequence number is not data.
    fn carries_new_bytes(&mut self, side: Side, segment: &Segment) -> bool {
        let end = segment.seq.wrapping_add(segment.len);
        let sent_to = &mut self.sent_to[side.index()];
        match *sent_to {
            Some(before) if seq_ge(before, end) => false,
            _ => {
                *sent_to = Some(end);
                true
            }
        }
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
    /// Its last packet's time, and how many listings of this host's sockets in a row did not
    /// have it ([`Conversations::sweep`]).
    last_ns: u64,
    missing: u8,
}

impl Conversation {
    fn new(id: ConnId, client: Endpoint, server: Endpoint, at_ns: u64) -> Conversation {
        Conversation {
            id,
            client,
            server,
            rule: ExchangeRule::default(),
            fins: [false; 2],
            closed_at_ns: None,
            last_ns: at_ns,
            missing: 0,
        }
    }

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

    /// Whether it closed (both FINs, an RST, or its socket gone): it lingers, then is forgotten.
    pub fn is_closed(&self) -> bool {
        self.closed_at_ns.is_some()
    }
}

/// The next connection's number from `next` (from 1, 0 skipped when it wraps), and `next` moved
/// on.
fn next_id(next: &mut u32) -> ConnId {
    let id = ConnId(*next);
    *next = next.wrapping_add(1).max(1);
    id
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
    /// Keyed by the two endpoints in one order, whichever way the packet went. The keys are
    /// peers' addresses and ports, which a peer chooses: the hash is keyed
    /// ([`crate::keyed_hash`]), and cheaper than SipHash on every packet.
    open: KeyedMap<(Endpoint, Endpoint), Conversation>,
    next_id: u32,
    /// Packets of new connections left out while [`MAX_OPEN_CONNECTIONS`] were followed.
    pub left_out: u64,
}

impl Conversations {
    /// Follows the connections to or from `server_ports`: the side on one of them is the server.
    pub fn new(server_ports: &[u16]) -> Conversations {
        Conversations {
            server_ports: server_ports.to_vec(),
            open: KeyedMap::default(),
            next_id: 1,
            left_out: 0,
        }
    }

    /// Follows the connections to or from `port` too from now on (a watched command's port,
    /// found after the watch began).
    pub fn add_server_port(&mut self, port: u16) {
        if !self.server_ports.contains(&port) {
            self.server_ports.push(port);
        }
    }

    /// Connections followed now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// The connections followed now, closed ones within their linger included.
    pub fn iter(&self) -> impl Iterator<Item = &Conversation> {
        self.open.values()
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
        let key = connection_key(from, to);
        let syn = packet.segment.has(tcp_flags::SYN);
        let ack = packet.segment.has(tcp_flags::ACK);
        // The sender is the client when it sends to a watched port; when both ports are
        // watched the handshake says, and without one the higher (ephemeral) port.
        let sender_is_client = || match (to_server, from_server) {
            (true, false) => true,
            (false, true) => false,
            _ if syn => !ack,
            _ => packet.src_port > packet.dst_port,
        };
        let ends = |sender_is_client: bool| if sender_is_client { (from, to) } else { (to, from) };
        // One lookup a packet: the entry is the connection's, followed or new.
        let followed = self.open.len();
        let mut opened = None;
        let conversation = match self.open.entry(key) {
            Entry::Occupied(entry) => {
                let conversation = entry.into_mut();
                if syn && !ack && conversation.closed_at_ns.is_some() {
                    // The same addresses and ports again, soon after a close (a client that
                    // binds its port, or a quick reuse of TIME_WAIT): a new connection, not the
                    // old one's tail.
                    let (client, server) = ends(sender_is_client());
                    *conversation =
                        Conversation::new(next_id(&mut self.next_id), client, server, at_ns);
                    opened = Some((client, server));
                }
                conversation
            }
            Entry::Vacant(entry) => {
                if followed >= MAX_OPEN_CONNECTIONS {
                    self.left_out += 1;
                    return None;
                }
                let (client, server) = ends(sender_is_client());
                opened = Some((client, server));
                entry.insert(Conversation::new(next_id(&mut self.next_id), client, server, at_ns))
            }
        };
        conversation.last_ns = at_ns;
        let side = if from == conversation.client { Side::Client } else { Side::Server };
        let segment = &packet.segment;
        let req = conversation.rule.on_segment(side, segment);
        if segment.has(tcp_flags::FIN) {
            conversation.fins[side.index()] = true;
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
        let key = connection_key(local, remote);
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
            self.begin(key, client, server, 0);
            opened = Some((client, server));
        }
        self.open.get(&key).map(|c| (c, opened))
    }

    fn begin(&mut self, key: (Endpoint, Endpoint), client: Endpoint, server: Endpoint, at_ns: u64) {
        let conversation = Conversation::new(next_id(&mut self.next_id), client, server, at_ns);
        self.open.insert(key, conversation);
    }

    /// The connection between `local` and `remote`, either way round.
    pub fn find(&self, local: Endpoint, remote: Endpoint) -> Option<&Conversation> {
        let key = connection_key(local, remote);
        self.open.get(&key)
    }

    /// After a complete listing of this host's sockets at `now_ns`: a connection whose socket
    /// `listed` does not have, in two listings in a row, and that has been quiet for
    /// [`LINGER_NS`], ended without a FIN or RST being seen (its process was killed, the close
    /// was lost for a full ring, or the watch began after it and it ended quietly): it is
    /// closed now, and forgotten after the linger. Without this a watch of a busy service would
    /// fill with dead connections and stop following new ones.
    pub fn sweep(&mut self, now_ns: u64, listed: impl Fn(Endpoint, Endpoint) -> bool) {
        for conversation in self.open.values_mut() {
            if conversation.closed_at_ns.is_some() {
                continue;
            }
            if listed(conversation.client, conversation.server) {
                conversation.missing = 0;
                continue;
            }
            conversation.missing = conversation.missing.saturating_add(1);
            let quiet = now_ns.saturating_sub(conversation.last_ns) >= LINGER_NS;
            if conversation.missing >= 2 && quiet {
                conversation.closed_at_ns = Some(now_ns);
            }
        }
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

/// Exchanges whose latencies are kept exactly (32 MB of them); past this many, every latency
/// goes into [`Buckets`] instead, and the percentiles are read from them, to 1/64 of their
/// value: a watch of a busy service for hours holds kilobytes, not gigabytes.
pub const MAX_EXACT_LATENCIES: usize = 4_000_000;
/// Points of [`ExchangeTally::latencies_ns`] once the latencies are in buckets.
pub const LATENCY_QUANTILES: usize = 1000;

/// The exchanges of a run's `Segment` events: how many were answered and how long each took.
/// Memory: one entry per open connection (at most [`MAX_OPEN_CONNECTIONS`]), and one latency
/// per exchange (8 bytes, as a run keeps one per request) up to [`MAX_EXACT_LATENCIES`], then
/// a fixed number of buckets.
#[derive(Debug, Default)]
pub struct ExchangeTally {
    open: KeyedMap<ConnId, OpenExchange>,
    latencies: SortedMultiset,
    /// Every latency once there were more than [`MAX_EXACT_LATENCIES`] (`latencies` is then
    /// empty), and the largest, exactly.
    buckets: Option<Buckets>,
    first_start_ns: Option<u64>,
    last_answer_ns: Option<u64>,
    /// Exchanges whose request was never answered.
    pub unanswered: u64,
    /// Each answered exchange settled since [`ExchangeTally::drain_settled`], with its
    /// connection, once a reader asked for them ([`ExchangeTally::hand_out_settled`]: a
    /// watch's metrics, which count them by port as they come).
    settled: Option<Vec<(ConnId, u64)>>,
}

impl ExchangeTally {
    /// Takes an event; returns its connection if this segment closed it (both FINs, or an RST):
    /// the connection's state here is freed, and the caller may free its own.
    pub fn push(&mut self, event: &Event) -> Option<ConnId> {
        let EventKind::Segment(segment) = &event.kind else { return None };
        let fresh =
            OpenExchange { req: event.req, start_ns: None, last_answer_ns: None, fins: [false; 2] };
        // A bare ACK of a connection not followed (the last of a teardown) opens nothing, so a
        // closed connection is not held again by its final ACK.
        let opens = segment.len > 0 || segment.has(tcp_flags::SYN);
        if opens && self.open.len() >= MAX_OPEN_CONNECTIONS && !self.open.contains_key(&event.conn)
        {
            // A hostile or enormous file: the bound holds by settling some open exchange.
            if let Some(&conn) = self.open.keys().next() {
                let oldest = self.open.remove(&conn).expect("a key just listed");
                self.settle(conn, oldest);
            }
        }
        // One lookup an event on the common path: the connection's open exchange.
        let open = match self.open.entry(event.conn) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(_) if !opens => return None,
            Entry::Vacant(entry) => entry.insert(fresh),
        };
        let mut done = None;
        if open.req != event.req {
            done = Some(std::mem::replace(open, OpenExchange { fins: open.fins, ..fresh }));
        }
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
            open.fins[event.side.index()] = true;
        }
        let closed = segment.has(tcp_flags::RST) || open.fins == [true, true];
        // The exchange this event ended first, then the connection's last if it closed.
        if let Some(done) = done {
            self.settle(event.conn, done);
        }
        if closed {
            let last = self.open.remove(&event.conn).expect("present");
            self.settle(event.conn, last);
            return Some(event.conn);
        }
        None
    }

    /// The stream ended: every open exchange that was answered counts.
    pub fn finish(&mut self) {
        for (conn, open) in std::mem::take(&mut self.open) {
            self.settle(conn, open);
        }
    }

    /// From now on, each answered exchange is also kept, with its connection and latency, until
    /// [`ExchangeTally::drain_settled`] takes it: a reader that takes them after every batch
    /// holds a batch's worth.
    pub fn hand_out_settled(&mut self) {
        self.settled.get_or_insert_with(Vec::new);
    }

    /// The answered exchanges settled since the last call (with [`ExchangeTally::hand_out_settled`]
    /// on): each one's connection and latency in nanoseconds, oldest first.
    pub fn drain_settled(&mut self, mut each: impl FnMut(ConnId, u64)) {
        if let Some(settled) = &mut self.settled {
            settled.drain(..).for_each(|(conn, latency_ns)| each(conn, latency_ns));
        }
    }

    fn settle(&mut self, conn: ConnId, exchange: OpenExchange) {
        match (exchange.start_ns, exchange.last_answer_ns) {
            (Some(start), Some(end)) => {
                let latency_ns = end.saturating_sub(start);
                self.record(latency_ns);
                if let Some(settled) = &mut self.settled {
                    settled.push((conn, latency_ns));
                }
                self.first_start_ns = Some(self.first_start_ns.map_or(start, |s| s.min(start)));
                self.last_answer_ns = Some(self.last_answer_ns.map_or(end, |e| e.max(end)));
            }
            (Some(_), None) => self.unanswered += 1,
            _ => {}
        }
    }

    fn record(&mut self, latency_ns: u64) {
        if let Some(buckets) = &mut self.buckets {
            buckets.add(latency_ns);
            return;
        }
        self.latencies.insert(latency_ns);
        if self.latencies.len() > MAX_EXACT_LATENCIES {
            let mut buckets = Buckets::default();
            std::mem::take(&mut self.latencies).to_vec().into_iter().for_each(|v| buckets.add(v));
            self.buckets = Some(buckets);
        }
    }

    /// Exchanges answered so far.
    pub fn answered(&self) -> usize {
        match &self.buckets {
            Some(buckets) => usize::try_from(buckets.count()).unwrap_or(usize::MAX),
            None => self.latencies.len(),
        }
    }

    fn percentile(&self, pct: f64) -> u64 {
        match &self.buckets {
            Some(buckets) => buckets.percentile(pct),
            None => self.latencies.percentile(pct),
        }
    }

    fn max(&self) -> u64 {
        match &self.buckets {
            Some(buckets) => buckets.max(),
            None => self.latencies.max().unwrap_or(0),
        }
    }

    /// The answered exchanges' latencies, shortest first, for a curve of them (the page's
    /// Compare view): each one while they are kept exactly; past [`MAX_EXACT_LATENCIES`],
    /// [`LATENCY_QUANTILES`] evenly spaced percentiles of them, which draw the same curve.
    pub fn latencies_ns(&self) -> Vec<u64> {
        match &self.buckets {
            None => self.latencies.to_vec(),
            Some(buckets) => (1..=LATENCY_QUANTILES)
                .map(|i| buckets.percentile(100.0 * i as f64 / LATENCY_QUANTILES as f64))
                .collect(),
        }
    }

    /// The exchanges as a run's summary: `requests` counts answered exchanges, the latencies
    /// are theirs, and `stalled` is the waits the caller named (from packets).
    pub fn summary(&self, stalled: u32) -> Summary {
        let duration_s = match (self.first_start_ns, self.last_answer_ns) {
            (Some(start), Some(end)) => end.saturating_sub(start) as f64 / 1e9,
            _ => 0.0,
        };
        let requests = u32::try_from(self.answered()).unwrap_or(u32::MAX);
        Summary {
            requests,
            duration_s,
            rps: if duration_s > 0.0 { f64::from(requests) / duration_s } else { 0.0 },
            p50_ms: ns_to_ms(self.percentile(50.0)),
            p99_ms: ns_to_ms(self.percentile(99.0)),
            max_ms: ns_to_ms(self.max()),
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
        sent(from, to, flags, 0, len)
    }

    /// A segment with `len` bytes from sequence number `seq`.
    fn sent(from: Endpoint, to: Endpoint, flags: u8, seq: u32, len: u32) -> Packet {
        Packet {
            src: from.0,
            dst: to.0,
            src_port: from.1,
            dst_port: to.1,
            segment: Segment { flags, seq, len, ..Segment::default() },
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
            (ms, sent(CLIENT, SERVER, PSH_ACK, 1, 4)),
            (41 * ms, packet(SERVER, CLIENT, ACK, 0)),
            (41 * ms + 10, sent(CLIENT, SERVER, PSH_ACK, 5, 100)),
            (42 * ms, sent(SERVER, CLIENT, PSH_ACK, 1, 4)),
            (43 * ms, sent(SERVER, CLIENT, PSH_ACK, 5, 100)),
            (1_043 * ms, sent(CLIENT, SERVER, PSH_ACK, 105, 104)),
            (1_044 * ms, sent(SERVER, CLIENT, PSH_ACK, 105, 104)),
            (1_045 * ms, sent(CLIENT, SERVER, tcp_flags::FIN | ACK, 209, 0)),
            (1_046 * ms, sent(SERVER, CLIENT, tcp_flags::FIN | ACK, 209, 0)),
            (1_047 * ms, sent(CLIENT, SERVER, ACK, 210, 0)),
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
        events.iter().for_each(|e| {
            tally.push(e);
        });
        // Both exchanges settled at the close, with nothing held.
        assert_eq!(tally.answered(), 2);
        assert!(tally.open.is_empty());
        let summary = tally.summary(0);
        assert_eq!(summary.requests, 2);
        // 1 ms to 43 ms, and 1,043 ms to 1,044 ms: the idle second is in neither.
        assert!((summary.max_ms - 42.0).abs() < 1e-6, "{summary:?}");
        assert!((summary.p50_ms - 1.0).abs() < 1e-6, "{summary:?}");
    }

    /// A reader that asked for them gets each answered exchange as it settles, with its
    /// connection and latency, once; a tally nobody asked keeps none.
    #[test]
    fn settled_exchanges_are_handed_out_once_when_asked_for() {
        let mut conversations = Conversations::new(&[8080]);
        let events: Vec<Event> = conversation()
            .iter()
            .map(|(at, p)| conversations.packet(*at, p).expect("watched").event)
            .collect();
        let mut asked = ExchangeTally::default();
        asked.hand_out_settled();
        let mut settled = Vec::new();
        // The first exchange settles when the second begins; the second at the close.
        for event in &events[..9] {
            asked.push(event);
        }
        asked.drain_settled(|conn, latency_ns| settled.push((conn, latency_ns)));
        assert_eq!(settled, [(ConnId(1), 42_000_000)]);
        for event in &events[9..] {
            asked.push(event);
        }
        asked.drain_settled(|conn, latency_ns| settled.push((conn, latency_ns)));
        assert_eq!(settled, [(ConnId(1), 42_000_000), (ConnId(1), 1_000_000)]);
        asked.drain_settled(|_, _| panic!("each is handed out once"));

        let mut not_asked = ExchangeTally::default();
        events.iter().for_each(|e| {
            not_asked.push(e);
        });
        assert!(not_asked.settled.is_none());
        assert_eq!(not_asked.answered(), asked.answered());
    }

    #[test]
    fn a_connection_seen_mid_stream_is_sided_by_the_port_and_unanswered_requests_do_not_count() {
        let mut conversations = Conversations::new(&[8080]);
        // The answer is the first thing seen: it times nothing.
        let answer = conversations.packet(0, &sent(SERVER, CLIENT, PSH_ACK, 1000, 50)).unwrap();
        assert_eq!(answer.event.side, Side::Server);
        assert_eq!(answer.opened, Some((CLIENT, SERVER)));
        let request = conversations.packet(10, &sent(CLIENT, SERVER, PSH_ACK, 2000, 5)).unwrap();
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

    #[test]
    fn a_retransmitted_request_is_not_a_new_exchange() {
        let mut conversations = Conversations::new(&[8080]);
        let mut reqs = Vec::new();
        let mut at = 0;
        for p in [
            sent(CLIENT, SERVER, PSH_ACK, 1, 10),
            sent(SERVER, CLIENT, PSH_ACK, 1, 1000),
            // The request again (its ACK was lost), as the answer goes on.
            sent(CLIENT, SERVER, PSH_ACK, 1, 10),
            sent(SERVER, CLIENT, PSH_ACK, 1001, 1000),
            // The next request.
            sent(CLIENT, SERVER, PSH_ACK, 11, 10),
        ] {
            at += 1;
            reqs.push(conversations.packet(at, &p).unwrap().event.req.0);
        }
        assert_eq!(reqs, [0, 0, 0, 0, 1]);
    }

    #[test]
    fn the_same_four_tuple_soon_after_a_close_is_a_new_connection() {
        let mut conversations = Conversations::new(&[8080]);
        let first = conversations.packet(0, &packet(CLIENT, SERVER, tcp_flags::SYN, 0)).unwrap();
        conversations.packet(1, &sent(CLIENT, SERVER, tcp_flags::RST, 1, 0));
        // Within the linger: a new handshake from the same port.
        let again = conversations.packet(2, &packet(CLIENT, SERVER, tcp_flags::SYN, 0)).unwrap();
        assert_ne!(again.event.conn, first.event.conn);
        assert_eq!(again.opened, Some((CLIENT, SERVER)));
        // And it is not retired with the old one's close.
        assert!(conversations.retire(1 + LINGER_NS).is_empty());
    }

    #[test]
    fn a_connection_whose_socket_is_gone_without_a_close_is_forgotten() {
        let mut conversations = Conversations::new(&[8080]);
        conversations.packet(0, &sent(CLIENT, SERVER, PSH_ACK, 1, 10)).unwrap();
        // Listed: kept however long it is quiet.
        conversations.sweep(10 * LINGER_NS, |_, _| true);
        conversations.sweep(11 * LINGER_NS, |_, _| true);
        assert!(conversations.retire(20 * LINGER_NS).is_empty());
        // Gone from one listing: kept (a listing may race a new connection's handshake).
        conversations.sweep(21 * LINGER_NS, |_, _| false);
        assert!(conversations.retire(30 * LINGER_NS).is_empty());
        // Gone from two in a row, and quiet: closed, then forgotten after the linger.
        conversations.sweep(31 * LINGER_NS, |_, _| false);
        assert!(conversations.retire(31 * LINGER_NS).is_empty());
        assert_eq!(conversations.retire(32 * LINGER_NS), vec![ConnId(1)]);
    }
}
