//! A session's messages as JSON, byte for byte the text `serde_json` writes for them, with the
//! events and each run's start written by hand: they are nearly every byte of a large export
//! (a TCP_INFO sample is about 600 bytes of JSON, most of it field names; a run's start 750
//! bytes for its spec), and through `serde_json` each field name was escaped, quoted and
//! written in five calls. Here a name, its quotes and colon are one constant copy: `export
//! --json` of a file of samples took a third of the CPU it did, and a file of runs that never
//! end (a start for every two events) half.
//!
//! The other messages (a run's end, the file's Hello, overviews) are rare and go through
//! `serde_json` as before. The types written here are taken apart field by field with no `..`,
//! and every enum matched with no catch-all: a field or a kind added to them does not build
//! until it is written here too, and the tests compare every kind with `serde_json`'s text.

use std::io::{self, Write};

use crate::event::{
    Call, Event, EventKind, LinkAction, LinkEvent, RunId, Segment, Side, SockOpt, TcpInfoSample,
};
use crate::spec::{
    BulkSpec, ImportSpec, ImportedConnection, LinkSpec, PerSide, RrSpec, Scenario, WatchSpec,
    WritePattern,
};
use crate::wire::{Instruments, ToBrowser};

/// The JSON is gathered and handed to the writer in pieces about this large.
pub const CHUNK_BYTES: usize = 64 * 1024;

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

/// Appends struct `$value`, of type `$type`, as an object of all its fields, each named once:
/// the destructuring has no `..`, so a field added to the type does not build until it is
/// written here too.
macro_rules! fields {
    ($json:expr, $value:expr, $type:ident { $($field:ident),+ $(,)? }) => {{
        let $type { $($field),+ } = $value;
        object!($json, $($field),+);
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

/// Appends `message` to `json` as `serde_json::to_writer` writes it, and hands `json` to `out`
/// (then empties it) whenever it holds [`CHUNK_BYTES`] or more: `json` holds what is not yet
/// written, for the caller to write at its end.
pub fn write_message(
    message: &ToBrowser,
    json: &mut Vec<u8>,
    out: &mut impl Write,
) -> io::Result<()> {
    match message {
        ToBrowser::Events { run, events } => {
            json.extend_from_slice(b"{\"Events\":{\"run\":");
            run.write_json(json);
            json.extend_from_slice(b",\"events\":[");
            for (index, event) in events.iter().enumerate() {
                if index > 0 {
                    json.push(b',');
                }
                write_event(event, json);
                if json.len() >= CHUNK_BYTES {
                    out.write_all(json)?;
                    json.clear();
                }
            }
            json.extend_from_slice(b"]}}");
        }
        ToBrowser::RunStarted { run, spec, instruments } => {
            variant!(json, RunStarted { run, spec, instruments });
        }
        _ => serde_json::to_writer(&mut *json, message).map_err(io::Error::from)?,
    }
    if json.len() >= CHUNK_BYTES {
        out.write_all(json)?;
        json.clear();
    }
    Ok(())
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
        // Most of an event's numbers are a digit (flags, counters, zeros): one byte, inline.
        match *self {
            digit @ 0..=9 => json.push(b'0' + digit as u8),
            value => write_digits(value, json),
        }
    }
}

/// Appends `value`'s decimal digits, two a division from the right, into 20 bytes appended
/// and cut back to the digits: a copy of a length known only at run time is a call to
/// `memcpy`, and a number in a TCP_INFO sample cost more in that call than in its digits.
fn write_digits(mut value: u64, json: &mut Vec<u8>) {
    let count = value.checked_ilog10().unwrap_or(0) as usize + 1;
    let start = json.len();
    json.extend_from_slice(&[0; 20]);
    let digits = &mut json[start..start + count];
    let mut at = count;
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        digits[..2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        digits[0] = b'0' + value as u8;
    }
    json.truncate(start + count);
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

impl WriteJson for Call {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.extend_from_slice(match self {
            Call::Recv => b"\"Recv\"".as_slice(),
            Call::Send => b"\"Send\"",
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
            EventKind::BlockedCall { call, since_ns, bytes } => {
                variant!(json, BlockedCall { call, since_ns, bytes })
            }
        }
    }
}

impl WriteJson for TcpInfoSample {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(
            json,
            self,
            TcpInfoSample {
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
            }
        );
    }
}

impl WriteJson for Segment {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(
            json,
            self,
            Segment {
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
            }
        );
    }
}

impl WriteJson for LinkEvent {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(json, self, LinkEvent { action, packet, bytes, queued_bytes });
    }
}

impl WriteJson for RunId {
    fn write_json(&self, json: &mut Vec<u8>) {
        self.0.write_json(json);
    }
}

/// A string as `serde_json` quotes it: `"` and `\` escaped with a backslash, the control
/// characters below U+0020 as `\b`, `\t`, `\n`, `\f`, `\r` or `\u00xx`; everything else
/// (DEL, all of Unicode) as it is.
impl WriteJson for str {
    fn write_json(&self, json: &mut Vec<u8>) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        json.push(b'"');
        let bytes = self.as_bytes();
        let mut plain_from = 0;
        for (at, &byte) in bytes.iter().enumerate() {
            let escape = match byte {
                b'"' => b'"',
                b'\\' => b'\\',
                0x08 => b'b',
                b'\t' => b't',
                b'\n' => b'n',
                0x0c => b'f',
                b'\r' => b'r',
                0..=0x1f => b'u',
                _ => continue,
            };
            json.extend_from_slice(&bytes[plain_from..at]);
            json.extend_from_slice(&[b'\\', escape]);
            if escape == b'u' {
                let (high, low) = (HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]);
                json.extend_from_slice(&[b'0', b'0', high, low]);
            }
            plain_from = at + 1;
        }
        json.extend_from_slice(&bytes[plain_from..]);
        json.push(b'"');
    }
}

impl WriteJson for String {
    fn write_json(&self, json: &mut Vec<u8>) {
        self.as_str().write_json(json);
    }
}

impl<T: WriteJson> WriteJson for Vec<T> {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.push(b'[');
        for (index, value) in self.iter().enumerate() {
            if index > 0 {
                json.push(b',');
            }
            value.write_json(json);
        }
        json.push(b']');
    }
}

impl<T: WriteJson> WriteJson for PerSide<T> {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(json, self, PerSide { client, server });
    }
}

impl WriteJson for WritePattern {
    fn write_json(&self, json: &mut Vec<u8>) {
        json.extend_from_slice(match self {
            WritePattern::Split => b"\"split\"".as_slice(),
            WritePattern::Single => b"\"single\"",
            WritePattern::Writev => b"\"writev\"",
        });
    }
}

impl WriteJson for LinkSpec {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(json, self, LinkSpec { rtt_us, rate_bps, mtu, queue_packets, loss_ppm });
    }
}

impl WriteJson for RrSpec {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(
            json,
            self,
            RrSpec {
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
            }
        );
    }
}

impl WriteJson for BulkSpec {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(
            json,
            self,
            BulkSpec {
                bytes,
                duration_ms,
                app_buffer_bytes,
                read_pause_us,
                sndbuf,
                rcvbuf,
                congestion,
                link,
            }
        );
    }
}

impl WriteJson for ImportedConnection {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(json, self, ImportedConnection { client, server, client_by });
    }
}

impl WriteJson for ImportSpec {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(json, self, ImportSpec { source, connections });
    }
}

impl WriteJson for WatchSpec {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(json, self, WatchSpec { ports, pid, duration_ms, evidence });
    }
}

/// `{"rr":{...}}`: the variants' names in snake case, as the type's `serde` attribute says.
impl WriteJson for Scenario {
    fn write_json(&self, json: &mut Vec<u8>) {
        match self {
            Scenario::Rr(rr) => object!(json, rr),
            Scenario::Bulk(bulk) => object!(json, bulk),
            Scenario::Server(server) => object!(json, server),
            Scenario::Import(import) => object!(json, import),
            Scenario::Watch(watch) => object!(json, watch),
        }
    }
}

impl WriteJson for Instruments {
    fn write_json(&self, json: &mut Vec<u8>) {
        fields!(
            json,
            self,
            Instruments { events, tcp_info_at_syscalls, tcp_info_interval_us, capture }
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::batches::Rng;
    use crate::event::{ConnId, ReqId, RunId};
    use crate::spec::{RrSpec, Scenario};
    use crate::wire::{Hello, HostFacts, Instruments, RunOutcome};

    /// `message` as [`write_message`] writes it: what it handed to the writer, then what it left
    /// in the buffer.
    fn json_of(message: &ToBrowser) -> String {
        let (mut out, mut json) = (Vec::new(), Vec::new());
        write_message(message, &mut json, &mut out).unwrap();
        out.extend_from_slice(&json);
        String::from_utf8(out).unwrap()
    }

    const U32: u64 = u32::MAX as u64;

    /// A value up to `max` drawn so that the extremes come up: 0, `max`, and between.
    pub(crate) fn draw(rng: &mut Rng, max: u64) -> u64 {
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
            EventKind::BlockedCall {
                call: Call::Recv,
                since_ns: draw(rng, u64::MAX),
                bytes: draw(rng, U32) as u32,
            },
            EventKind::BlockedCall { call: Call::Send, since_ns: 0, bytes: u32::MAX },
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

    /// A string of up to 12 pieces: every character `serde_json` escapes, DEL, quotes and
    /// backslashes, letters, and characters of two to four bytes (a bidi override among them).
    fn text(rng: &mut Rng) -> String {
        let pieces = ["a", "Z", " ", "\"", "\\", "/", "\u{7f}", "é", "\u{2028}", "\u{202e}", "𝄞"];
        (0..rng.below(13))
            .map(|_| match rng.below(3) {
                0 => char::from(rng.below(0x20) as u8).to_string(),
                _ => pieces[rng.below(pieces.len())].to_string(),
            })
            .collect()
    }

    fn per_side<T>(mut value: impl FnMut() -> T) -> PerSide<T> {
        PerSide { client: value(), server: value() }
    }

    fn link(rng: &mut Rng) -> Option<LinkSpec> {
        (rng.below(2) == 1).then(|| LinkSpec {
            rtt_us: draw(rng, U32) as u32,
            rate_bps: maybe(rng, u64::MAX),
            mtu: draw(rng, U32) as u32,
            queue_packets: draw(rng, U32) as u32,
            loss_ppm: draw(rng, U32) as u32,
        })
    }

    /// Every kind of run, with values drawn at random.
    pub(crate) fn every_scenario(rng: &mut Rng) -> Vec<Scenario> {
        let patterns = [WritePattern::Split, WritePattern::Single, WritePattern::Writev];
        let mut rr = || RrSpec {
            requests: draw(rng, U32) as u32,
            duration_ms: maybe(rng, U32).map(|v| v as u32),
            size_bytes: draw(rng, U32) as u32,
            response_bytes: maybe(rng, U32).map(|v| v as u32),
            reconnect_every: draw(rng, U32) as u32,
            connections: draw(rng, U32) as u32,
            think_us: draw(rng, U32) as u32,
            write: per_side(|| patterns[rng.below(3)]),
            nodelay: per_side(|| rng.below(2) == 1),
            cork: per_side(|| rng.below(2) == 1),
            quickack: per_side(|| rng.below(2) == 1),
            sndbuf: per_side(|| maybe(rng, U32).map(|v| v as u32)),
            rcvbuf: per_side(|| maybe(rng, U32).map(|v| v as u32)),
            congestion: per_side(|| (rng.below(2) == 1).then(|| text(rng))),
            link: link(rng),
        };
        let (client, server) = (rr(), rr());
        let bulk = BulkSpec {
            bytes: draw(rng, u64::MAX),
            duration_ms: maybe(rng, U32).map(|v| v as u32),
            app_buffer_bytes: draw(rng, U32) as u32,
            read_pause_us: if rng.below(2) == 1 { draw(rng, U32) as u32 } else { 0 },
            sndbuf: per_side(|| maybe(rng, U32).map(|v| v as u32)),
            rcvbuf: per_side(|| maybe(rng, U32).map(|v| v as u32)),
            congestion: per_side(|| (rng.below(2) == 1).then(|| text(rng))),
            link: link(rng),
        };
        let connections = (0..rng.below(4))
            .map(|_| ImportedConnection {
                client: text(rng),
                server: text(rng),
                client_by: text(rng),
            })
            .collect();
        let import = ImportSpec { source: text(rng), connections };
        let watch = WatchSpec {
            ports: (0..rng.below(4)).map(|_| draw(rng, 65_535) as u16).collect(),
            pid: maybe(rng, U32).map(|v| v as u32),
            duration_ms: maybe(rng, U32).map(|v| v as u32),
            evidence: text(rng),
        };
        vec![
            Scenario::Rr(client),
            Scenario::Bulk(bulk),
            Scenario::Server(server),
            Scenario::Import(import),
            Scenario::Watch(watch),
        ]
    }

    #[test]
    fn every_kind_of_run_start_is_written_as_serde_json_writes_it() {
        let mut rng = Rng(23);
        for round in 0..300 {
            for spec in every_scenario(&mut rng) {
                let instruments = Instruments {
                    events: rng.below(2) == 1,
                    tcp_info_at_syscalls: rng.below(2) == 1,
                    tcp_info_interval_us: draw(&mut rng, U32) as u32,
                    capture: rng.below(2) == 1,
                };
                let message = ToBrowser::RunStarted { run: RunId(round), spec, instruments };
                assert_eq!(json_of(&message), serde_json::to_string(&message).unwrap());
            }
        }
    }

    #[test]
    fn every_character_of_a_string_is_written_as_serde_json_writes_it() {
        let every_ascii: String = (0..=0x7fu8).map(char::from).collect();
        let strings = [String::new(), every_ascii, "é\u{2028}\u{202e}𝄞\u{10ffff}".into()];
        for string in strings {
            let mut json = Vec::new();
            string.write_json(&mut json);
            assert_eq!(String::from_utf8(json).unwrap(), serde_json::to_string(&string).unwrap());
        }
    }

    #[test]
    fn what_is_left_unwritten_is_under_a_chunk_and_written_in_order() {
        let mut rng = Rng(29);
        let events: Vec<Event> = (0..2_000u32)
            .map(|i| Event {
                at_ns: u64::from(i),
                side: Side::Client,
                conn: ConnId(0),
                req: ReqId(i),
                kind: EventKind::TcpInfo(Box::new(sample(&mut rng))),
            })
            .collect();
        let spec = every_scenario(&mut rng).remove(0);
        let messages = [
            ToBrowser::RunStarted { run: RunId(1), spec, instruments: Instruments::default() },
            ToBrowser::Events { run: RunId(1), events },
            ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed },
        ];
        let (mut out, mut json) = (Vec::new(), Vec::new());
        let mut expected = Vec::new();
        for message in &messages {
            write_message(message, &mut json, &mut out).unwrap();
            assert!(json.len() < CHUNK_BYTES, "{} bytes left unwritten", json.len());
            serde_json::to_writer(&mut expected, message).unwrap();
        }
        assert!(out.len() > CHUNK_BYTES, "the samples were written in chunks");
        out.extend_from_slice(&json);
        assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(expected).unwrap());
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
