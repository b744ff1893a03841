//! Synthetic event streams shaped like story 1's exchanges, for tests of the analysis and of the
//! views. They are never shown as measurements. Compiled for this crate's tests and, through the
//! `synthetic` feature, for other crates' tests.

use crate::event::{tcp_flags, ConnId, Event, EventKind, ReqId, Segment, Side};

/// A small deterministic generator: the property tests need many shapes, not a crate.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next number below `below` (at least 1).
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below.max(1)
    }
}

pub const US: u64 = 1_000;
pub const MS: u64 = 1_000_000;

/// Builds the events of request/response exchanges on connection 0 as the probe records them.
#[derive(Debug, Default)]
pub struct Script {
    pub events: Vec<Event>,
    /// Also emit the segments a capture would see ([`Script::exchange`]).
    pub packets: bool,
    /// The next sequence number of each side's stream.
    client_seq: u32,
    server_seq: u32,
}

impl Script {
    pub fn event(&mut self, at_ns: u64, side: Side, req: u32, kind: EventKind) {
        let (conn, req) = (ConnId(0), ReqId(req));
        self.events.push(Event { at_ns, side, conn, req, kind });
    }

    pub fn write(&mut self, side: Side, req: u32, start: u64, end: u64, bytes: u32) {
        self.event(start, side, req, EventKind::WriteStart { len_bytes: bytes });
        self.event(end, side, req, EventKind::WriteDone { bytes });
    }

    pub fn read(&mut self, side: Side, req: u32, start: u64, end: u64, bytes: u32) {
        self.event(start, side, req, EventKind::ReadStart { len_bytes: bytes });
        self.event(end, side, req, EventKind::ReadDone { bytes });
    }

    /// A captured segment sent by `side`.
    pub fn segment(&mut self, at_ns: u64, side: Side, req: u32, segment: Segment) {
        self.event(at_ns, side, req, EventKind::Segment(segment));
    }

    /// The packets of one message held by Nagle x delayed ACK as the capture sees them: the
    /// 4-byte length at `length_at`, the reader's pure ACK of it at `ack_at`, the body 29 us
    /// later. Returns when the body was sent.
    pub fn held_message(
        &mut self,
        writer: Side,
        req: u32,
        length_at: u64,
        ack_at: u64,
        body: u32,
    ) -> u64 {
        let (seq, peer_seq) = match writer {
            Side::Client => (self.client_seq, self.server_seq),
            Side::Server => (self.server_seq, self.client_seq),
        };
        let (ack, psh) = (tcp_flags::ACK, tcp_flags::ACK | tcp_flags::PSH);
        // A quick exchange's ACK still comes after the segment it acknowledges.
        let ack_at = ack_at.max(length_at + 2 * US);
        let segment = |flags, seq, ack, len| Segment {
            flags,
            seq,
            ack,
            len,
            window: 512,
            ..Segment::default()
        };
        self.segment(length_at, writer, req, segment(psh, seq, peer_seq, 4));
        self.segment(ack_at, writer.peer(), req, segment(ack, peer_seq, seq.wrapping_add(4), 0));
        let body_at = ack_at + 29 * US;
        self.segment(body_at, writer, req, segment(psh, seq.wrapping_add(4), peer_seq, body));
        let next = seq.wrapping_add(4 + body);
        match writer {
            Side::Client => self.client_seq = next,
            Side::Server => self.server_seq = next,
        }
        body_at
    }

    /// One length+body exchange of 2048 bytes starting at `t`, whose body is held `hold` in each
    /// direction after being written. The server sat in `read()` for the length since
    /// `server_idle_from` (a real server waits there for the next request). Returns the time the
    /// request was done.
    pub fn exchange(&mut self, req: u32, t: u64, server_idle_from: u64, hold: u64) -> u64 {
        use Side::{Client, Server};
        self.event(t, Client, req, EventKind::RequestStart);
        self.write(Client, req, t, t + 5 * US, 4);
        self.write(Client, req, t + 6 * US, t + 10 * US, 2048);
        // The server gets the length at once, but the body only after the hold.
        self.read(Server, req, server_idle_from, t + 20 * US, 4);
        let body = t + 10 * US + hold;
        self.read(Server, req, t + 21 * US, body, 2048);
        if self.packets {
            self.held_message(Client, req, t + 3 * US, body - 40 * US, 2048);
        }
        self.write(Server, req, body + 5 * US, body + 10 * US, 4);
        self.write(Server, req, body + 11 * US, body + 15 * US, 2048);
        // The client waits for the length while the server is held: waiting, not held itself.
        self.read(Client, req, t + 11 * US, body + 20 * US, 4);
        let end = body + 15 * US + hold;
        self.read(Client, req, body + 21 * US, end, 2048);
        if self.packets {
            self.held_message(Server, req, body + 7 * US, end - 40 * US, 2048);
        }
        self.event(end + US, Client, req, EventKind::RequestDone);
        end + US
    }
}

/// `requests` exchanges on one keep-alive connection, 50 us apart. The first is quick (a new
/// connection ACKs at once); every later body is held `hold` in both directions, as Nagle x
/// delayed ACK holds it.
pub fn nagle_run(requests: u32, hold: u64) -> Vec<Event> {
    nagle_script(requests, hold, false).events
}

/// [`nagle_run`] with the segments a packet capture records.
pub fn nagle_run_with_packets(requests: u32, hold: u64) -> Vec<Event> {
    nagle_script(requests, hold, true).events
}

fn nagle_script(requests: u32, hold: u64, packets: bool) -> Script {
    let mut script = Script { packets, ..Script::default() };
    let mut t: u64 = 0;
    for req in 0..requests {
        let this_hold = if req == 0 { 30 * US } else { hold };
        let server_idle_from = t.saturating_sub(40 * US);
        t = script.exchange(req, t, server_idle_from, this_hold) + 50 * US;
    }
    script
}

/// One exchange of 100-byte messages with three waits that are not held reads: a 25 ms connect,
/// the server thinking 30 ms between reading the request and answering, and the answer's body
/// write blocked 15 ms (a full send buffer: TCP_INFO during it shows 60,000 bytes queued).
pub fn think_time_exchange() -> Vec<Event> {
    use Side::{Client, Server};
    let mut script = Script::default();
    script.event(0, Client, 0, EventKind::RequestStart);
    script.event(0, Client, 0, EventKind::ConnectStart);
    script.event(25 * MS, Client, 0, EventKind::Connected);
    let t = 25 * MS;
    script.write(Client, 0, t, t + 5 * US, 4);
    script.write(Client, 0, t + 6 * US, t + 10 * US, 100);
    script.read(Server, 0, t, t + 20 * US, 4);
    script.read(Server, 0, t + 21 * US, t + 30 * US, 100);
    let answer = t + 30 * MS;
    script.write(Server, 0, answer, answer + 5 * US, 4);
    script.write(Server, 0, answer + 6 * US, answer + 15 * MS, 100);
    let queued = crate::event::TcpInfoSample {
        during_block: true,
        snd_mss: 1448,
        snd_wnd: Some(65_535),
        notsent_bytes: Some(60_000),
        unacked: 10,
        ..Default::default()
    };
    script.event(answer + 5 * MS, Server, 0, EventKind::TcpInfo(Box::new(queued)));
    script.read(Client, 0, t + 11 * US, answer + 10 * US, 4);
    script.read(Client, 0, answer + 11 * US, answer + 15 * MS + 10 * US, 100);
    script.event(answer + 16 * MS, Client, 0, EventKind::RequestDone);
    script.events
}

/// A pcapng capture of one conversation (client 127.0.0.1:50000, server 127.0.0.1:8080) with
/// `exchanges` Nagle x delayed ACK holds on the wire, as tcpdump would write it of a client
/// that sends a 4-byte length, then a 2048-byte body: the body leaves right after the server's
/// delayed ACK of the length, 43.6 ms later; then the 2052-byte answer and its ACK. The SYN
/// handshake first: 3 + 5 x `exchanges` packets.
pub fn nagle_capture(exchanges: u32) -> Vec<u8> {
    use crate::event::tcp_flags::{ACK, PSH, SYN};
    use crate::packet::{synthesize, Packet};
    use crate::pcap::{linktype, PcapngWriter};
    use std::net::{IpAddr, Ipv4Addr};
    let raw = |from_client: bool, flags: u8, seq: u32, ack: u32, len: u32| {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (src_port, dst_port) = if from_client { (50000, 8080) } else { (8080, 50000) };
        let segment = Segment { flags, seq, ack, len, ..Segment::default() };
        synthesize(&Packet { src: lo, dst: lo, src_port, dst_port, segment })
    };
    let mut file = Vec::new();
    let mut w = PcapngWriter::new(&mut file);
    let lo = w.interface("lo", linktype::RAW);
    let mut t = 1_000_000_000;
    w.packet(lo, t, &raw(true, SYN, 0, 0, 0), None);
    w.packet(lo, t + 10_000, &raw(false, SYN | ACK, 0, 1, 0), None);
    w.packet(lo, t + 20_000, &raw(true, ACK, 1, 1, 0), None);
    let (mut c, mut s) = (1u32, 1u32);
    for _ in 0..exchanges {
        t += 1_000_000;
        w.packet(lo, t, &raw(true, PSH | ACK, c, s, 4), None);
        w.packet(lo, t + 43_600_000, &raw(false, ACK, s, c + 4, 0), None);
        w.packet(lo, t + 43_630_000, &raw(true, PSH | ACK, c + 4, s, 2048), None);
        c += 2052;
        w.packet(lo, t + 43_700_000, &raw(false, PSH | ACK, s, c, 2052), None);
        s += 2052;
        w.packet(lo, t + 43_750_000, &raw(true, ACK, c, s, 0), None);
        t += 50_000_000;
    }
    file
}
