//! A session's messages as JSON, byte for byte the text `serde_json` writes for them, with the
//! events written by hand: they are nearly every byte of a large export (a TCP_INFO sample is
//! about 600 bytes of JSON, most of it field names), and through `serde_json` each field name
//! was escaped, quoted and written in five calls. Here a name, its quotes and colon are one
//! constant copy: `export --json` of a file of samples took a third of the CPU it did.
//!
//! The other messages (a run's start and end, the file's Hello, overviews) are rare and go
//! through `serde_json` as before. The events' types are taken apart field by field with no
//! `..`, and every enum matched with no catch-all: a field or a kind added to them does not
//! build until it is written here too, and the tests compare every kind with `serde_json`'s
//! text.

use std::io::{self, Write};

use crate::event::{
    Event, EventKind, LinkAction, LinkEvent, Segment, Side, SockOpt, TcpInfoSample,
};
use crate::wire::ToBrowser;

/// The JSON is gathered here and handed to the writer in pieces about this large.
const CHUNK_BYTES: usize = 64 * 1024;

/// Writes `message` as `serde_json::to_writer` does.
pub fn write_message(message: &ToBrowser, out: &mut impl Write) -> io::Result<()> {
    let ToBrowser::Events { run, events } = message else {
        return serde_json::to_writer(out, message).map_err(io::Error::from);
    };
    let mut json = Vec::with_capacity(CHUNK_BYTES.min(64 + 128 * events.len()));
    json.extend_from_slice(b"{\"Events\":{\"run\":");
    run.0.write_json(&mut json);
    json.extend_from_slice(b",\"events\":[");
    for (index, event) in events.iter().enumerate() {
        if index > 0 {
            json.push(b',');
        }
        write_event(event, &mut json);
        if json.len() >= CHUNK_BYTES {
            out.write_all(&json)?;
            json.clear();
        }
    }
    json.extend_from_slice(b"]}}");
    out.write_all(&json)
}

/// Appends `{"name":value,...}`: each name with its quotes and colon (and the comma before it)
/// is one constant, in the order the fields are declared (the order `serde` writes them).
macro_rules! object {
    ($json:expr, $first:ident $(, $rest:ident)* $(,)?) => {{
        $json.extend_from_slice(concat!("{\"", stringify!($first), "\":").as_bytes());
        $first.write_json($json);
        $(
            $json.extend_from_slice(concat!(",\"", stringify!($rest), "\":").as_bytes());
            $rest.write_json($json);
        )*
        $json.push(b'}');
    }};
}

/// Appends `{"Variant":{"name":value,...}}`: a struct variant, as `serde` writes one.
macro_rules! variant {
    ($json:expr, $variant:ident { $($field:ident),+ $(,)? }) => {{
        $json.extend_from_slice(concat!("{\"", stringify!($variant), "\":").as_bytes());
        object!($json, $($field),+);
        $json.push(b'}');
    }};
}

/// Appends one event's JSON to `json`.
pub fn write_event(event: &Event, json: &mut Vec<u8>) {
    let Event { at_ns, side, conn, req, kind } = event;
    let (conn, req) = (conn.0, req.0);
    object!(json, at_ns, side, conn, req, kind);
}

/// A value's JSON, appended to a buffer.
trait WriteJson {
    fn write_json(&self, json: &mut Vec<u8>);
}

impl WriteJson for u64 {
    #[inline]
    fn write_json(&self, json: &mut Vec<u8>) {
        // Most of an event's numbers are a digit or two (flags, counters, zeros): those skip
        // the loop.
        let mut value = *self;
        if value < 10 {
            json.push(b'0' + value as u8);
            return;
        }
        // Two digits a division, from the right.
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        while value >= 100 {
            let pair = (value % 100) as usize * 2;
            value /= 100;
            at -= 2;
            digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        }
        if value >= 10 {
            let pair = value as usize * 2;
            at -= 2;
            digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        } else {
            at -= 1;
            digits[at] = b'0' + value as u8;
        }
        json.extend_from_slice(&digits[at..]);
    }
}

/// "00" to "99", each pair's two digits.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

impl WriteJson for i64 {
    fn write_json(&self, json: &mut Vec<u8>) {
        if *self < 0 {
            json.push(b'-');
        }
        self.unsigned_abs().write_json(json);
    }
}

impl WriteJson for u32 {
    fn write_json(&self, json: &mut Vec<u8>) {
        u64::from(*self).write_json(json);
    }
}

impl WriteJson for u16 {
    fn write_json(&self, json: &mut Vec<u8>) {
        u64::from(*self).write_json(json);
    }
}

impl WriteJson for u8 {
    fn write_json(&self, json: &mut Vec<u8>) {
        u64::from(*self).write_json(json);
    }
}

impl WriteJson for bool {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.extend_from_slice(if *self { b"true" } else { b"false" });
    }
}

impl<T: WriteJson> WriteJson for Option<T> {
    fn write_json(&self, json: &mut Vec<u8>) {
        match self {
            Some(value) => value.write_json(json),
            None => json.extend_from_slice(b"null"),
        }
    }
}

impl<T: WriteJson> WriteJson for &T {
    fn write_json(&self, json: &mut Vec<u8>) {
        (*self).write_json(json);
    }
}

/// A pair is a JSON array of two.
impl<A: WriteJson, B: WriteJson> WriteJson for (A, B) {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.push(b'[');
        self.0.write_json(json);
        json.push(b',');
        self.1.write_json(json);
        json.push(b']');
    }
}

impl WriteJson for Side {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.extend_from_slice(match self {
            Side::Client => b"\"Client\"",
            Side::Server => b"\"Server\"",
        });
    }
}

impl WriteJson for SockOpt {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.extend_from_slice(match self {
            SockOpt::Cork => b"\"Cork\"".as_slice(),
            SockOpt::QuickAck => b"\"QuickAck\"",
        });
    }
}

impl WriteJson for LinkAction {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.extend_from_slice(match self {
            LinkAction::Enqueued => b"\"Enqueued\"".as_slice(),
            LinkAction::Delivered => b"\"Delivered\"",
            LinkAction::Dropped => b"\"Dropped\"",
        });
    }
}

impl WriteJson for EventKind {
    fn write_json(&self, json: &mut Vec<u8>) {
        let unit = |json: &mut Vec<u8>, name: &[u8]| json.extend_from_slice(name);
        match self {
            EventKind::ConnectStart => unit(json, b"\"ConnectStart\""),
            EventKind::Connected => unit(json, b"\"Connected\""),
            EventKind::Accepted => unit(json, b"\"Accepted\""),
            EventKind::Closed => unit(json, b"\"Closed\""),
            EventKind::RequestStart => unit(json, b"\"RequestStart\""),
            EventKind::RequestDone => unit(json, b"\"RequestDone\""),
            EventKind::WriteStart { len_bytes } => variant!(json, WriteStart { len_bytes }),
            EventKind::WriteDone { bytes } => variant!(json, WriteDone { bytes }),
            EventKind::ReadStart { len_bytes } => variant!(json, ReadStart { len_bytes }),
            EventKind::ReadDone { bytes } => variant!(json, ReadDone { bytes }),
            EventKind::SockOpt { opt, value } => variant!(json, SockOpt { opt, value }),
            EventKind::Buffers { sndbuf_bytes, rcvbuf_bytes } => {
                variant!(json, Buffers { sndbuf_bytes, rcvbuf_bytes })
            }
            EventKind::TcpInfo(sample) => {
                json.extend_from_slice(b"{\"TcpInfo\":");
                sample.as_ref().write_json(json);
                json.push(b'}');
            }
            EventKind::Segment(segment) => {
                json.extend_from_slice(b"{\"Segment\":");
                segment.write_json(json);
                json.push(b'}');
            }
            EventKind::Link(link) => {
                json.extend_from_slice(b"{\"Link\":");
                link.write_json(json);
                json.push(b'}');
            }
            EventKind::RunDelay { since_ns, waited_ns } => {
                variant!(json, RunDelay { since_ns, waited_ns })
            }
            EventKind::ClockSync { offset_ns, uncertainty_ns, rtt_ns } => {
                variant!(json, ClockSync { offset_ns, uncertainty_ns, rtt_ns })
            }
            EventKind::DelayedAck => unit(json, b"\"DelayedAck\""),
        }
    }
}

impl WriteJson for TcpInfoSample {
    fn write_json(&self, json: &mut Vec<u8>) {
        let TcpInfoSample {
            during_block,
            state,
            ca_state,
            rto_us,
            ato_us,
            snd_mss,
            rcv_mss,
            unacked,
            lost,
            retrans,
            last_data_sent_ms,
            last_ack_recv_ms,
            last_data_recv_ms,
            rtt_us,
            rttvar_us,
            snd_cwnd,
            rcv_space,
            total_retrans,
            bytes_acked,
            bytes_received,
            segs_out,
            segs_in,
            notsent_bytes,
            min_rtt_us,
            delivery_rate_bytes_per_s,
            bytes_sent,
            snd_wnd,
            rcv_wnd,
            data_segs_out,
            rwnd_limited_us,
            sndbuf_limited_us,
        } = self;
        object!(
            json,
            during_block,
            state,
            ca_state,
            rto_us,
            ato_us,
            snd_mss,
            rcv_mss,
            unacked,
            lost,
            retrans,
            last_data_sent_ms,
            last_ack_recv_ms,
            last_data_recv_ms,
            rtt_us,
            rttvar_us,
            snd_cwnd,
            rcv_space,
            total_retrans,
            bytes_acked,
            bytes_received,
            segs_out,
            segs_in,
            notsent_bytes,
            min_rtt_us,
            delivery_rate_bytes_per_s,
            bytes_sent,
            snd_wnd,
            rcv_wnd,
            data_segs_out,
            rwnd_limited_us,
            sndbuf_limited_us,
        );
    }
}

impl WriteJson for Segment {
    fn write_json(&self, json: &mut Vec<u8>) {
        let Segment {
            flags,
            seq,
            ack,
            len,
            window,
            mss,
            wscale,
            sack_permitted,
            sack_blocks,
            timestamps,
        } = self;
        object!(
            json,
            flags,
            seq,
            ack,
            len,
            window,
            mss,
            wscale,
            sack_permitted,
            sack_blocks,
            timestamps
        );
    }
}

impl WriteJson for LinkEvent {
    fn write_json(&self, json: &mut Vec<u8>) {
        let LinkEvent { action, packet, bytes, queued_bytes } = self;
        object!(json, action, packet, bytes, queued_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::batches::Rng;
    use crate::event::{ConnId, ReqId, RunId};
    use crate::spec::{RrSpec, Scenario};
    use crate::wire::{Hello, HostFacts, Instruments, RunOutcome};

    fn json_of(message: &ToBrowser) -> String {
        let mut out = Vec::new();
        write_message(message, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    const U32: u64 = u32::MAX as u64;

    /// A value up to `max` drawn so that the extremes come up: 0, `max`, and between.
    fn draw(rng: &mut Rng, max: u64) -> u64 {
        match rng.below(4) {
            0 => 0,
            1 => max,
            _ => {
                let wide = rng.below(1 << 31) as u64 * rng.below(1 << 31) as u64;
                (wide + rng.below(1000) as u64).min(max)
            }
        }
    }

    /// `None` one time in four, else a value as [`draw`] makes it.
    fn maybe(rng: &mut Rng, max: u64) -> Option<u64> {
        (rng.below(4) > 0).then(|| draw(rng, max))
    }

    fn sample(rng: &mut Rng) -> TcpInfoSample {
        TcpInfoSample {
            during_block: rng.below(2) == 1,
            state: draw(rng, 255) as u8,
            ca_state: draw(rng, 255) as u8,
            rto_us: draw(rng, U32) as u32,
            ato_us: draw(rng, U32) as u32,
            snd_mss: draw(rng, U32) as u32,
            rcv_mss: draw(rng, U32) as u32,
            unacked: draw(rng, U32) as u32,
            lost: draw(rng, U32) as u32,
            retrans: draw(rng, U32) as u32,
            last_data_sent_ms: draw(rng, U32) as u32,
            last_ack_recv_ms: draw(rng, U32) as u32,
            last_data_recv_ms: draw(rng, U32) as u32,
            rtt_us: draw(rng, U32) as u32,
            rttvar_us: draw(rng, U32) as u32,
            snd_cwnd: draw(rng, U32) as u32,
            rcv_space: draw(rng, U32) as u32,
            total_retrans: draw(rng, U32) as u32,
            bytes_acked: maybe(rng, u64::MAX),
            bytes_received: maybe(rng, u64::MAX),
            segs_out: maybe(rng, U32).map(|v| v as u32),
            segs_in: maybe(rng, U32).map(|v| v as u32),
            notsent_bytes: maybe(rng, U32).map(|v| v as u32),
            min_rtt_us: maybe(rng, U32).map(|v| v as u32),
            delivery_rate_bytes_per_s: maybe(rng, u64::MAX),
            bytes_sent: maybe(rng, u64::MAX),
            snd_wnd: maybe(rng, U32).map(|v| v as u32),
            rcv_wnd: maybe(rng, U32).map(|v| v as u32),
            data_segs_out: maybe(rng, U32).map(|v| v as u32),
            rwnd_limited_us: maybe(rng, u64::MAX),
            sndbuf_limited_us: maybe(rng, u64::MAX),
        }
    }

    /// Every kind of event, with values drawn at random.
    fn every_kind(rng: &mut Rng) -> Vec<EventKind> {
        let segment = Segment {
            flags: draw(rng, 255) as u8,
            seq: draw(rng, U32) as u32,
            ack: draw(rng, U32) as u32,
            len: draw(rng, U32) as u32,
            window: draw(rng, 65_535) as u16,
            mss: maybe(rng, 65_535).map(|v| v as u16),
            wscale: maybe(rng, 255).map(|v| v as u8),
            sack_permitted: rng.below(2) == 1,
            sack_blocks: draw(rng, 255) as u8,
            timestamps: maybe(rng, U32).map(|v| (v as u32, draw(rng, U32) as u32)),
        };
        let actions = [LinkAction::Enqueued, LinkAction::Delivered, LinkAction::Dropped];
        let link = LinkEvent {
            action: actions[rng.below(3)],
            packet: draw(rng, U32) as u32,
            bytes: draw(rng, U32) as u32,
            queued_bytes: draw(rng, U32) as u32,
        };
        vec![
            EventKind::ConnectStart,
            EventKind::Connected,
            EventKind::Accepted,
            EventKind::Closed,
            EventKind::RequestStart,
            EventKind::RequestDone,
            EventKind::WriteStart { len_bytes: draw(rng, U32) as u32 },
            EventKind::WriteDone { bytes: draw(rng, U32) as u32 },
            EventKind::ReadStart { len_bytes: draw(rng, U32) as u32 },
            EventKind::ReadDone { bytes: draw(rng, U32) as u32 },
            EventKind::SockOpt { opt: SockOpt::Cork, value: draw(rng, U32) as u32 },
            EventKind::SockOpt { opt: SockOpt::QuickAck, value: draw(rng, U32) as u32 },
            EventKind::Buffers {
                sndbuf_bytes: draw(rng, U32) as u32,
                rcvbuf_bytes: draw(rng, U32) as u32,
            },
            EventKind::TcpInfo(Box::new(sample(rng))),
            EventKind::Segment(segment),
            EventKind::Link(link),
            EventKind::RunDelay { since_ns: draw(rng, u64::MAX), waited_ns: draw(rng, u64::MAX) },
            EventKind::ClockSync {
                offset_ns: draw(rng, u64::MAX) as i64,
                uncertainty_ns: draw(rng, u64::MAX),
                rtt_ns: draw(rng, u64::MAX),
            },
            EventKind::ClockSync { offset_ns: i64::MIN, uncertainty_ns: 0, rtt_ns: 1 },
            EventKind::DelayedAck,
        ]
    }

    #[test]
    fn every_kind_of_event_is_written_as_serde_json_writes_it() {
        let mut rng = Rng(17);
        let mut events = Vec::new();
        for round in 0..300u64 {
            for kind in every_kind(&mut rng) {
                let side = if rng.below(2) == 0 { Side::Client } else { Side::Server };
                let at_ns = draw(&mut rng, u64::MAX);
                let (conn, req) = (ConnId(draw(&mut rng, U32) as u32), ReqId(round as u32));
                events.push(Event { at_ns, side, conn, req, kind });
            }
        }
        for event in &events {
            let mut json = Vec::new();
            write_event(event, &mut json);
            let expected = serde_json::to_string(event).unwrap();
            assert_eq!(String::from_utf8(json).unwrap(), expected);
        }
        // A message larger than a chunk, and one with no events.
        for events in [events, Vec::new()] {
            let message = ToBrowser::Events { run: RunId(u32::MAX), events };
            assert_eq!(json_of(&message), serde_json::to_string(&message).unwrap());
        }
    }

    #[test]
    fn numbers_are_written_in_every_width() {
        let powers = (0..20).map(|exp| 10u64.pow(exp));
        let edges = powers.flat_map(|p| [p - 1, p, p + 1]);
        for value in (0..100_000).chain(edges).chain([u64::MAX, u64::MAX - 1]) {
            let mut json = Vec::new();
            value.write_json(&mut json);
            assert_eq!(String::from_utf8(json).unwrap(), value.to_string());
        }
        for value in [i64::MIN, i64::MIN + 1, -100, -10, -9, -1, 0, 1, 99, i64::MAX] {
            let mut json = Vec::new();
            value.write_json(&mut json);
            assert_eq!(String::from_utf8(json).unwrap(), value.to_string());
        }
    }

    #[test]
    fn the_other_messages_are_serde_jsons() {
        let hello = Hello::current("1.2.3 \"quoted\"", HostFacts::default());
        let spec = Scenario::Rr(RrSpec::default());
        let messages = [
            ToBrowser::Hello(hello),
            ToBrowser::RunStarted { run: RunId(3), spec, instruments: Instruments::default() },
            ToBrowser::RunFinished { run: RunId(3), outcome: RunOutcome::Completed },
            ToBrowser::Rejected { reason: "busy\n\u{1b}".into() },
        ];
        for message in &messages {
            assert_eq!(json_of(message), serde_json::to_string(message).unwrap());
        }
    }
}
