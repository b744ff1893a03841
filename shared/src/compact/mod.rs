//! How a batch of events is encoded in the stream and in session files: smaller than the events
//! themselves, and still decodable message by message.
//!
//! Within one `Events` message:
//! - each event's time is the difference from the previous event's (a few microseconds take two
//!   or three bytes where an absolute time takes five or six);
//! - a TCP_INFO sample lists only the fields that changed since the previous sample of the same
//!   connection and side in the message, as differences, behind a bit mask. The first sample of
//!   each connection and side in a message is complete (its differences are from zero).
//!
//! Nothing refers to another message, so a reader can start at any message boundary. Readable
//! formats (the JSON export) get the events as they are, not this encoding.

use serde::de::{
    DeserializeSeed, EnumAccess, Error as _, SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::event::{ConnId, Event, EventKind, ReqId, Side, TcpInfoSample};

mod by_hand;
pub(crate) mod columns;
pub(crate) mod index;
pub(crate) use by_hand::decode_into_by_hand;

/// As it is encoded, decoded whole: the reference the tests hold the reader's decoding
/// ([`EventSeed`]) to, and write crafted messages with. Written as [`WireEventRef`].
#[cfg(test)]
#[derive(Serialize, Deserialize)]
struct WireEvent {
    /// Nanoseconds since the previous event of the message (the first: since the run started).
    dt_ns: i64,
    side: Side,
    conn: ConnId,
    req: ReqId,
    kind: WireKind,
}

/// A [`WireEvent`] as it is written: the same fields, encoded the same, with every kind but
/// TCP_INFO borrowed from its event instead of copied (the writer's hot path: every event of
/// every file and stream goes through it).
#[derive(Serialize)]
struct WireEventRef<'a> {
    dt_ns: i64,
    side: Side,
    conn: ConnId,
    req: ReqId,
    kind: WireKindRef<'a>,
}

#[cfg(test)]
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize)]
enum WireKind {
    /// Every kind but `TcpInfo`, as it is.
    Plain(EventKind),
    /// `changed` has bit i set for each field i (in [`TcpInfoSample::to_values`] order) that
    /// differs from the previous sample; `deltas` holds their differences, in field order.
    TcpInfo { during_block: bool, changed: u32, deltas: Deltas },
}

/// [`WireKind`] as it is written: the variants in the same order, so they encode the same.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize)]
enum WireKindRef<'a> {
    Plain(&'a EventKind),
    TcpInfo { during_block: bool, changed: u32, deltas: Deltas },
}

/// A sample's differences: at most one per field, so they fit in a fixed array. Encoded as a
/// sequence of integers, exactly as a `Vec<i64>` is; decoding needs no allocation per sample
/// (a million-request file holds millions of samples) and refuses more than [`FIELDS`] values.
struct Deltas {
    values: [i64; FIELDS],
    len: usize,
}

impl Deltas {
    #[cfg(test)]
    fn of(values: &[i64]) -> Deltas {
        let mut deltas = Deltas { values: [0; FIELDS], len: values.len() };
        deltas.values[..values.len()].copy_from_slice(values);
        deltas
    }

    fn as_slice(&self) -> &[i64] {
        &self.values[..self.len]
    }
}

impl Serialize for Deltas {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(serializer)
    }
}

#[cfg(test)]
impl<'de> Deserialize<'de> for Deltas {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Deltas, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Deltas;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "at most {FIELDS} TCP_INFO differences")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Deltas, A::Error> {
                let mut deltas = Deltas { values: [0; FIELDS], len: 0 };
                while let Some(value) = seq.next_element::<i64>()? {
                    if deltas.len == FIELDS {
                        return Err(A::Error::custom("more TCP_INFO differences than fields"));
                    }
                    deltas.values[deltas.len] = value;
                    deltas.len += 1;
                }
                Ok(deltas)
            }
        }
        deserializer.deserialize_seq(Visitor)
    }
}

const FIELDS: usize = 31;

impl TcpInfoSample {
    /// Every field but `during_block` as a number; an absent field is 0, a present one its
    /// value + 1.
    fn to_values(&self) -> [u64; FIELDS] {
        let o32 = |v: Option<u32>| v.map_or(0, |v| u64::from(v) + 1);
        let o64 = |v: Option<u64>| v.map_or(0, |v| v.saturating_add(1));
        [
            self.state.into(),
            self.ca_state.into(),
            self.rto_us.into(),
            self.ato_us.into(),
            self.snd_mss.into(),
            self.rcv_mss.into(),
            self.unacked.into(),
            self.lost.into(),
            self.retrans.into(),
            self.last_data_sent_ms.into(),
            self.last_ack_recv_ms.into(),
            self.last_data_recv_ms.into(),
            self.rtt_us.into(),
            self.rttvar_us.into(),
            self.snd_cwnd.into(),
            self.rcv_space.into(),
            self.total_retrans.into(),
            o64(self.bytes_acked),
            o64(self.bytes_received),
            o32(self.segs_out),
            o32(self.segs_in),
            o32(self.notsent_bytes),
            o32(self.min_rtt_us),
            o64(self.delivery_rate_bytes_per_s),
            o64(self.bytes_sent),
            o32(self.snd_wnd),
            o32(self.rcv_wnd),
            o32(self.data_segs_out),
            o64(self.rwnd_limited_us),
            o64(self.sndbuf_limited_us),
            0, // spare: keeps room for one more field without changing the mask's width
        ]
    }

    /// The sample of `to_values`'s values, boxed as an event keeps it, in `spare`'s last box
    /// if it has one (see [`Expander::spare`]): every value is checked to fit its field first,
    /// so that the sample is built in one go where it is kept (built field by field, each
    /// fallible, it was made on the stack and copied twice to get there).
    fn from_values(
        during_block: bool,
        v: &[u64; FIELDS],
        spare: &mut SpareSamples,
    ) -> Option<Box<TcpInfoSample>> {
        const U8: u64 = u8::MAX as u64;
        const U32: u64 = u32::MAX as u64;
        // The fields of 8 and 32 bits, and the optional ones of 32 (absent 0, else value + 1).
        let fits = v[..2].iter().all(|&x| x <= U8)
            && v[2..17].iter().all(|&x| x <= U32)
            && [19, 20, 21, 22, 25, 26, 27].iter().all(|&i| v[i] <= U32 + 1);
        if !fits {
            return None;
        }
        let o32 = |x: u64| x.checked_sub(1).map(|x| x as u32);
        let o64 = |x: u64| x.checked_sub(1);
        let sample = TcpInfoSample {
            during_block,
            state: v[0] as u8,
            ca_state: v[1] as u8,
            rto_us: v[2] as u32,
            ato_us: v[3] as u32,
            snd_mss: v[4] as u32,
            rcv_mss: v[5] as u32,
            unacked: v[6] as u32,
            lost: v[7] as u32,
            retrans: v[8] as u32,
            last_data_sent_ms: v[9] as u32,
            last_ack_recv_ms: v[10] as u32,
            last_data_recv_ms: v[11] as u32,
            rtt_us: v[12] as u32,
            rttvar_us: v[13] as u32,
            snd_cwnd: v[14] as u32,
            rcv_space: v[15] as u32,
            total_retrans: v[16] as u32,
            bytes_acked: o64(v[17]),
            bytes_received: o64(v[18]),
            segs_out: o32(v[19]),
            segs_in: o32(v[20]),
            notsent_bytes: o32(v[21]),
            min_rtt_us: o32(v[22]),
            delivery_rate_bytes_per_s: o64(v[23]),
            bytes_sent: o64(v[24]),
            snd_wnd: o32(v[25]),
            rcv_wnd: o32(v[26]),
            data_segs_out: o32(v[27]),
            rwnd_limited_us: o64(v[28]),
            sndbuf_limited_us: o64(v[29]),
        };
        Some(match spare.0.pop() {
            Some(mut kept) => {
                *kept = sample;
                kept
            }
            None => Box::new(sample),
        })
    }
}

/// The previous sample's values per connection and side, within one message. The first
/// [`FEW_SIDES`] connection sides a message names are looked for in a list (a message's samples
/// are nearly always of one connection's two sides, and hashing each key was a tenth of reading
/// a file of samples); the rest in a map, made when first needed, so that a lookup stays O(1)
/// however many connections a message names (one naming 100,000 took 25 s to expand with a
/// list alone).
#[derive(Default)]
struct Previous {
    few: Vec<((ConnId, Side), [u64; FIELDS])>,
    more: Option<crate::keyed_hash::KeyedMap<(ConnId, Side), [u64; FIELDS]>>,
}

/// Connection sides a message's [`Previous`] keeps in its list.
const FEW_SIDES: usize = 4;

impl Previous {
    fn get(&mut self, key: (ConnId, Side)) -> &mut [u64; FIELDS] {
        let at = match self.few.iter().position(|(side, _)| *side == key) {
            Some(at) => at,
            None if self.few.len() < FEW_SIDES => {
                self.few.push((key, [0; FIELDS]));
                self.few.len() - 1
            }
            None => {
                let more = self.more.get_or_insert_with(Default::default);
                return more.entry(key).or_insert([0; FIELDS]);
            }
        };
        &mut self.few[at].1
    }

    /// How `sample` differs from the previous sample of its connection and side (which it then
    /// becomes): a bit set in the mask for each field that changed, and the differences of
    /// those fields, in field order.
    fn differences(&mut self, key: (ConnId, Side), sample: &TcpInfoSample) -> (u32, Deltas) {
        let values = sample.to_values();
        let before = self.get(key);
        let mut changed = 0u32;
        let mut deltas = Deltas { values: [0; FIELDS], len: 0 };
        for (i, (now, then)) in values.iter().zip(before.iter()).enumerate() {
            if now != then {
                changed |= 1 << i;
                deltas.values[deltas.len] = now.wrapping_sub(*then) as i64;
                deltas.len += 1;
            }
        }
        *before = values;
        (changed, deltas)
    }
}

/// The wire form of each event of a message, in order, made as they are written.
fn wire_events(events: &[Event]) -> impl ExactSizeIterator<Item = WireEventRef<'_>> {
    let mut previous = Previous::default();
    let mut last_ns = 0u64;
    events.iter().map(move |event| {
        let dt_ns = event.at_ns.wrapping_sub(last_ns) as i64;
        last_ns = event.at_ns;
        let kind = match &event.kind {
            EventKind::TcpInfo(sample) => {
                let (changed, deltas) = previous.differences((event.conn, event.side), sample);
                WireKindRef::TcpInfo { during_block: sample.during_block, changed, deltas }
            }
            other => WireKindRef::Plain(other),
        };
        WireEventRef { dt_ns, side: event.side, conn: event.conn, req: event.req, kind }
    })
}

/// The wire events of a message as a reader decodes them (the tests look at them).
#[cfg(test)]
fn compress(events: &[Event]) -> Vec<WireEvent> {
    let wire: Vec<WireEventRef> = wire_events(events).collect();
    postcard::from_bytes(&postcard::to_allocvec(&wire).unwrap()).unwrap()
}

/// Turns wire events back into events, one at a time, in the order of their message.
#[derive(Default)]
struct Expander {
    previous: Previous,
    at_ns: u64,
    /// Boxes of samples a reader has let go, taken before new ones are allocated
    /// ([`decode_into_by_hand`]): a message of samples allocated a box for each and freed them
    /// all together, more than the allocator keeps at hand, and allocating and freeing them
    /// was a quarter of the CPU of reading a file of samples.
    spare: SpareSamples,
}

const OUTSIDE_COMPACT_FORM: &str = "a TCP_INFO sample outside its compact form";

impl Expander {
    /// The time of the event `dt_ns` after the one before it.
    fn time(&mut self, dt_ns: i64) -> u64 {
        self.at_ns = self.at_ns.wrapping_add(dt_ns as u64);
        self.at_ns
    }

    /// The sample whose fields set in `changed` differ by `deltas` from the previous sample of
    /// its connection and side in the message.
    fn sample(
        &mut self,
        (conn, side): (ConnId, Side),
        during_block: bool,
        changed: u32,
        deltas: &[i64],
    ) -> Result<Box<TcpInfoSample>, &'static str> {
        if changed.count_ones() as usize != deltas.len() || changed >> FIELDS != 0 {
            return Err("a TCP_INFO sample's field mask does not match its values");
        }
        let values = self.previous.get((conn, side));
        // Only the fields that changed are visited (a sample taken during a wait changes a
        // few of its 28), lowest bit first, as the deltas were written.
        let mut mask = changed;
        for delta in deltas {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            values[i] = values[i].wrapping_add(*delta as u64);
        }
        TcpInfoSample::from_values(during_block, values, &mut self.spare)
            .ok_or("a TCP_INFO field is out of range")
    }

    /// The event of a wire event decoded whole (the reference for [`EventSeed`]).
    #[cfg(test)]
    fn expand(&mut self, w: WireEvent) -> Result<Event, String> {
        let at_ns = self.time(w.dt_ns);
        let kind = match w.kind {
            WireKind::Plain(EventKind::TcpInfo(_)) => return Err(OUTSIDE_COMPACT_FORM.into()),
            WireKind::Plain(kind) => kind,
            WireKind::TcpInfo { during_block, changed, deltas } => {
                let key = (w.conn, w.side);
                EventKind::TcpInfo(self.sample(key, during_block, changed, deltas.as_slice())?)
            }
        };
        Ok(Event { at_ns, side: w.side, conn: w.conn, req: w.req, kind })
    }
}

#[cfg(test)]
fn expand(wire: Vec<WireEvent>) -> Result<Vec<Event>, String> {
    let mut expander = Expander::default();
    wire.into_iter().map(|w| expander.expand(w)).collect()
}

/// Events allocated ahead of a message's declared count: a hostile count costs no more.
const PREALLOCATE_EVENTS: usize = 16_384;

/// Reads a message's events and expands each as it is read: no intermediate list of wire
/// events (on a million-request file that list alone was gigabytes of memory traffic).
struct EventsVisitor;

impl<'de> Visitor<'de> for EventsVisitor {
    type Value = Vec<Event>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sequence of compact events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Event>, A::Error> {
        let mut events = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(PREALLOCATE_EVENTS));
        let mut expander = Expander::default();
        while let Some(event) = seq.next_element_seed(EventSeed(&mut expander))? {
            events.push(event);
        }
        Ok(events)
    }
}

/// The reference [`EventsVisitor`] is held to: each wire event decoded whole, then expanded.
#[cfg(test)]
struct WholeEventsVisitor;

#[cfg(test)]
impl<'de> Visitor<'de> for WholeEventsVisitor {
    type Value = Vec<Event>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sequence of compact events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Event>, A::Error> {
        let mut events = Vec::new();
        let mut expander = Expander::default();
        while let Some(wire) = seq.next_element::<WireEvent>()? {
            events.push(expander.expand(wire).map_err(A::Error::custom)?);
        }
        Ok(events)
    }
}

/// Decodes one event as a [`WireEvent`] is encoded and expands it as it goes, the same values
/// taken and refused in the same order, without making the wire event: one is 300 bytes (room
/// for every difference a TCP_INFO sample may carry), and moving each through the decoder's
/// calls was a third of the CPU of reading a file of samples.
struct EventSeed<'a>(&'a mut Expander);

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = Event;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Event, D::Error> {
        const FIELDS: &[&str] = &["dt_ns", "side", "conn", "req", "kind"];
        deserializer.deserialize_struct("WireEvent", FIELDS, self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = Event;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("struct WireEvent")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Event, A::Error> {
        let missing = |at| A::Error::invalid_length(at, &"struct WireEvent with 5 elements");
        let dt_ns: i64 = seq.next_element()?.ok_or_else(|| missing(0))?;
        let side: Side = seq.next_element()?.ok_or_else(|| missing(1))?;
        let conn: ConnId = seq.next_element()?.ok_or_else(|| missing(2))?;
        let req: ReqId = seq.next_element()?.ok_or_else(|| missing(3))?;
        let kind = KindSeed { expander: &mut *self.0, key: (conn, side) };
        let kind = seq.next_element_seed(kind)?.ok_or_else(|| missing(4))?;
        Ok(Event { at_ns: self.0.time(dt_ns), side, conn, req, kind })
    }
}

/// A [`WireKind`] decoded into the event's kind: a TCP_INFO sample's differences are read
/// into an array on the stack and applied to the previous sample of `key`.
struct KindSeed<'a> {
    expander: &'a mut Expander,
    key: (ConnId, Side),
}

impl<'de> DeserializeSeed<'de> for KindSeed<'_> {
    type Value = EventKind;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<EventKind, D::Error> {
        deserializer.deserialize_enum("WireKind", &["Plain", "TcpInfo"], self)
    }
}

impl<'de> Visitor<'de> for KindSeed<'_> {
    type Value = EventKind;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("enum WireKind")
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<EventKind, A::Error> {
        let (variant, access) = data.variant::<u32>()?;
        match variant {
            0 => match access.newtype_variant::<EventKind>()? {
                EventKind::TcpInfo(_) => Err(A::Error::custom(OUTSIDE_COMPACT_FORM)),
                kind => Ok(kind),
            },
            1 => access.struct_variant(&["during_block", "changed", "deltas"], self),
            other => Err(A::Error::invalid_value(
                Unexpected::Unsigned(other.into()),
                &"variant index 0 <= i < 2",
            )),
        }
    }

    /// `WireKind::TcpInfo { during_block, changed, deltas }`.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EventKind, A::Error> {
        let missing =
            |at| A::Error::invalid_length(at, &"struct variant WireKind::TcpInfo with 3 elements");
        let during_block: bool = seq.next_element()?.ok_or_else(|| missing(0))?;
        let changed: u32 = seq.next_element()?.ok_or_else(|| missing(1))?;
        let mut deltas = [0; FIELDS];
        let len = seq.next_element_seed(DeltasSeed(&mut deltas))?.ok_or_else(|| missing(2))?;
        let sample = self.expander.sample(self.key, during_block, changed, &deltas[..len]);
        Ok(EventKind::TcpInfo(sample.map_err(A::Error::custom)?))
    }
}

/// A sample's differences read into `self.0`, as [`Deltas`] decodes them: how many there were.
struct DeltasSeed<'a>(&'a mut [i64; FIELDS]);

impl<'de> DeserializeSeed<'de> for DeltasSeed<'_> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DeltasSeed<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "at most {FIELDS} TCP_INFO differences")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut len = 0;
        while let Some(value) = seq.next_element::<i64>()? {
            let Some(slot) = self.0.get_mut(len) else {
                return Err(A::Error::custom("more TCP_INFO differences than fields"));
            };
            *slot = value;
            len += 1;
        }
        Ok(len)
    }
}

/// `#[serde(with = "crate::compact")]` for a `Vec<Event>` field.
pub fn serialize<S: Serializer>(events: &Vec<Event>, serializer: S) -> Result<S::Ok, S::Error> {
    if serializer.is_human_readable() {
        events.serialize(serializer)
    } else {
        serializer.collect_seq(wire_events(events))
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Event>, D::Error> {
    if deserializer.is_human_readable() {
        Vec::<Event>::deserialize(deserializer)
    } else {
        deserializer.deserialize_seq(EventsVisitor)
    }
}

/// Boxes of TCP_INFO samples a reader let go, for the next message's samples
/// ([`decode_into_by_hand`]): at most [`PREALLOCATE_EVENTS`], what a batch is given ahead.
#[derive(Debug, Default)]
pub(crate) struct SpareSamples(
    // The boxes themselves are what is kept: each becomes an event's sample again as it is.
    #[allow(clippy::vec_box)] Vec<Box<TcpInfoSample>>,
);

impl SpareSamples {
    /// Boxes kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Empties `events`, keeping the boxes of their samples in `spare` for
/// [`decode_into_by_hand`].
pub(crate) fn recycle(events: &mut Vec<Event>, spare: &mut SpareSamples) {
    for event in events.drain(..) {
        if let EventKind::TcpInfo(sample) = event.kind {
            if spare.0.len() < PREALLOCATE_EVENTS {
                spare.0.push(sample);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Call, LinkAction, LinkEvent, Segment, SockOpt};
    use crate::synthetic::{nagle_run, MS};
    use crate::varint::Bytes;

    fn sample(bytes_acked: u64, rtt_us: u32, notsent: Option<u32>) -> TcpInfoSample {
        TcpInfoSample {
            state: 1,
            rto_us: 204_000,
            ato_us: 40_000,
            snd_mss: 65_483,
            rtt_us,
            bytes_acked: Some(bytes_acked),
            notsent_bytes: notsent,
            snd_wnd: Some(u32::MAX),
            ..TcpInfoSample::default()
        }
    }

    pub(super) fn with_samples() -> Vec<Event> {
        let mut events = nagle_run(3, 44 * MS);
        let at = |i: usize| events[i].at_ns;
        let samples = [
            (at(3), Side::Client, sample(2052, 17, Some(2048))),
            (at(4), Side::Server, sample(7, 12, None)),
            (at(5), Side::Client, sample(4104, 15, Some(0))),
            (at(6), Side::Client, sample(4104, 900_000, Some(0))),
            (at(7), Side::Client, sample(3, 1, Some(u32::MAX))),
        ];
        for (at_ns, side, sample) in samples {
            let kind = EventKind::TcpInfo(Box::new(sample));
            events.push(Event { at_ns, side, conn: ConnId(0), req: ReqId(1), kind });
        }
        events
    }

    /// Issue 11, defect 6: 100,000 TCP_INFO samples on distinct connections in one message
    /// (1 MB) took 25 s to expand, each looking its connection up in a list. Linear now: in a
    /// debug build this takes well under a second; the list took minutes.
    #[test]
    fn a_message_naming_100000_connections_expands_in_linear_time() {
        let events: Vec<Event> = (0..100_000u32)
            .map(|conn| Event {
                at_ns: u64::from(conn),
                side: Side::Client,
                conn: ConnId(conn),
                req: ReqId(0),
                kind: EventKind::TcpInfo(Box::new(sample(u64::from(conn), 10, Some(0)))),
            })
            .collect();
        let started = std::time::Instant::now();
        let expanded = expand(compress(&events)).unwrap();
        let took = started.elapsed();
        assert_eq!(expanded, events);
        assert!(took < std::time::Duration::from_secs(10), "{took:?} for 100,000 connections");
    }

    /// Every kind of event, TCP_INFO samples of two connections and sides among them.
    pub(super) fn every_kind(rng: &mut crate::analysis::batches::Rng) -> Vec<Event> {
        let mut number = |max: u64| match rng.below(4) {
            0 => 0,
            1 => max,
            _ => (rng.below(1 << 31) as u64 * rng.below(1 << 31) as u64).min(max),
        };
        let segment = Segment {
            flags: number(255) as u8,
            seq: number(u64::from(u32::MAX)) as u32,
            ack: number(u64::from(u32::MAX)) as u32,
            len: number(65_535) as u32,
            window: number(65_535) as u16,
            // Each option present or absent, drawn.
            mss: (number(1) == 1).then(|| number(65_535) as u16),
            wscale: (number(1) == 1).then(|| number(14) as u8),
            sack_permitted: number(1) == 1,
            sack_blocks: number(4) as u8,
            timestamps: (number(1) == 1).then(|| (number(u64::from(u32::MAX)) as u32, 7)),
        };
        let action = [LinkAction::Enqueued, LinkAction::Delivered, LinkAction::Dropped];
        let link = LinkEvent {
            action: action[number(2) as usize],
            packet: number(1000) as u32,
            bytes: 1448,
            queued_bytes: number(1 << 20) as u32,
        };
        let kinds = [
            EventKind::ConnectStart,
            EventKind::Connected,
            EventKind::Accepted,
            EventKind::Closed,
            EventKind::RequestStart,
            EventKind::RequestDone,
            EventKind::WriteStart { len_bytes: number(1 << 20) as u32 },
            EventKind::WriteDone { bytes: number(1 << 20) as u32 },
            EventKind::ReadStart { len_bytes: number(1 << 20) as u32 },
            EventKind::ReadDone { bytes: number(1 << 20) as u32 },
            EventKind::SockOpt { opt: SockOpt::QuickAck, value: 1 },
            EventKind::SockOpt { opt: SockOpt::Cork, value: number(1) as u32 },
            EventKind::Buffers { sndbuf_bytes: 4096, rcvbuf_bytes: number(1 << 30) as u32 },
            EventKind::Segment(segment),
            EventKind::Link(link),
            EventKind::RunDelay { since_ns: number(u64::MAX), waited_ns: number(1 << 40) },
            EventKind::ClockSync { offset_ns: -5, uncertainty_ns: 100, rtt_ns: 200 },
            EventKind::DelayedAck,
            EventKind::BlockedCall { call: Call::Recv, since_ns: number(1 << 40), bytes: 100 },
            EventKind::BlockedCall { call: Call::Send, since_ns: 0, bytes: number(1 << 20) as u32 },
        ];
        let samples =
            with_samples().into_iter().filter(|e| matches!(e.kind, EventKind::TcpInfo(_)));
        let mut events: Vec<Event> = samples.collect();
        for (i, kind) in kinds.into_iter().enumerate() {
            let side = if i % 2 == 0 { Side::Client } else { Side::Server };
            let at_ns = 1_000 * i as u64;
            events.push(Event { at_ns, side, conn: ConnId(i as u32 % 3), req: ReqId(9), kind });
            let sample = sample(number(1 << 40), number(1 << 20) as u32, Some(i as u32));
            let kind = EventKind::TcpInfo(Box::new(sample));
            events.push(Event { at_ns, side, conn: ConnId(i as u32 % 2), req: ReqId(9), kind });
        }
        events
    }

    /// A message's encoded events as the readers decode them.
    fn decoded(bytes: &[u8]) -> Result<Vec<Event>, String> {
        let mut decoder = postcard::Deserializer::from_bytes(bytes);
        deserialize(&mut decoder).map_err(|e| e.to_string())
    }

    /// The same by [`decode_into_by_hand`] (`None`: refused), its boxes handed back to `spare`.
    fn decoded_by_hand(bytes: &[u8], spare: &mut SpareSamples) -> Option<Vec<Event>> {
        let mut events = Vec::new();
        let taken = decode_into_by_hand(&mut Bytes(bytes), &mut events, spare);
        let copy = taken.map(|()| events.clone());
        recycle(&mut events, spare);
        copy
    }

    /// The same, each wire event decoded whole and then expanded.
    fn decoded_whole(bytes: &[u8]) -> Result<Vec<Event>, String> {
        let mut decoder = postcard::Deserializer::from_bytes(bytes);
        decoder.deserialize_seq(WholeEventsVisitor).map_err(|e| e.to_string())
    }

    /// The readers decode each event where it is read, never making its wire event: what they
    /// take and what they refuse (with the same error) is what decoding the wire events whole
    /// took and refused, for every kind of event and in messages damaged at random; and the
    /// decoding by hand takes and refuses the same.
    #[test]
    fn events_decode_as_their_wire_events_decoded_whole_even_damaged() {
        let mut rng = crate::analysis::batches::Rng(41);
        // The boxes of every message decoded by hand are used again by the next.
        let mut spare = SpareSamples::default();
        for _ in 0..50 {
            let events = every_kind(&mut rng);
            let wire: Vec<WireEventRef> = wire_events(&events).collect();
            let bytes = postcard::to_allocvec(&wire).unwrap();
            assert_eq!(decoded(&bytes), Ok(events.clone()));
            assert_eq!(decoded_by_hand(&bytes, &mut spare), Some(events.clone()));
            assert_eq!(decoded_whole(&bytes), Ok(events));
            let (mut took, mut refused) = (0, 0);
            for _ in 0..400 {
                let mut damaged = bytes.clone();
                for _ in 0..=rng.below(3) {
                    let at = rng.below(damaged.len());
                    damaged[at] = rng.below(256) as u8;
                }
                damaged.truncate(damaged.len() - rng.below(4));
                let read = decoded(&damaged);
                assert_eq!(read, decoded_whole(&damaged));
                let by_hand = decoded_by_hand(&damaged, &mut spare);
                assert_eq!(by_hand.ok_or(()), read.clone().map_err(drop), "{damaged:x?}");
                if read.is_ok() {
                    took += 1;
                } else {
                    refused += 1;
                }
            }
            assert!(took > 0 && refused > 0, "{took} damaged messages taken, {refused} refused");
        }
    }

    /// Each field takes every value its type holds, and refuses the next: a byte, 32 bits, an
    /// optional 32 bits (0 absent, else the value + 1), or an optional 64 bits.
    #[test]
    fn each_field_takes_the_values_that_fit_it_and_no_more() {
        const U32: u64 = u32::MAX as u64;
        for field in 0..FIELDS - 1 {
            let max = match field {
                0 | 1 => 255,
                2..=16 => U32,
                19..=22 | 25..=27 => U32 + 1,
                _ => u64::MAX,
            };
            for value in [0, 1, max - 1, max] {
                let mut values = [0; FIELDS];
                values[field] = value;
                let sample =
                    TcpInfoSample::from_values(false, &values, &mut SpareSamples::default())
                        .expect("fits");
                assert_eq!(sample.to_values(), values, "field {field}: {value}");
            }
            if max < u64::MAX {
                let mut values = [0; FIELDS];
                values[field] = max + 1;
                assert_eq!(
                    TcpInfoSample::from_values(false, &values, &mut SpareSamples::default()),
                    None,
                    "field {field}"
                );
            }
        }
    }

    #[test]
    fn a_batch_round_trips_exactly() {
        let events = with_samples();
        assert_eq!(expand(compress(&events)).unwrap(), events);
        let bytes = postcard::to_allocvec(&compress(&events)).unwrap();
        let wire: Vec<WireEvent> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(expand(wire).unwrap(), events);
    }

    /// A reader that hands each message's boxes back gets the same events from the next
    /// message as one that decodes it afresh: every field of a reused box is written.
    #[test]
    fn samples_decoded_into_recycled_boxes_are_the_messages_own() {
        let mut rng = crate::analysis::batches::Rng(7);
        let (first, second) = (every_kind(&mut rng), every_kind(&mut rng));
        let encode = |events: &Vec<Event>| {
            postcard::to_allocvec(&wire_events(events).collect::<Vec<_>>()).unwrap()
        };
        let (mut events, mut spare) = (Vec::new(), SpareSamples::default());
        let (first_bytes, second_bytes) = (encode(&first), encode(&second));
        decode_into_by_hand(&mut Bytes(&first_bytes), &mut events, &mut spare).unwrap();
        assert_eq!(events, first);
        recycle(&mut events, &mut spare);
        let samples = first.iter().filter(|e| matches!(e.kind, EventKind::TcpInfo(_))).count();
        assert!(samples > 0 && spare.len() == samples, "{} of {samples}", spare.len());
        decode_into_by_hand(&mut Bytes(&second_bytes), &mut events, &mut spare).unwrap();
        assert_eq!(events, second);
        assert_eq!(decoded(&second_bytes).unwrap(), second);
    }

    #[test]
    fn unchanged_samples_and_close_times_are_small() {
        // A sample that repeats the previous one costs its header and an empty mask.
        let sample = with_samples().into_iter().find(|e| matches!(e.kind, EventKind::TcpInfo(_)));
        let one = vec![sample.unwrap()];
        let mut two = one.clone();
        two.push(one[0].clone());
        let size = |events: &Vec<Event>| postcard::to_allocvec(&compress(events)).unwrap().len();
        assert!(size(&two) - size(&one) <= 8, "{} bytes for a repeat", size(&two) - size(&one));
        let syscalls = nagle_run(50, 44 * MS);
        let per_event = postcard::to_allocvec(&compress(&syscalls)).unwrap().len() / syscalls.len();
        assert!(per_event <= 9, "{per_event} bytes per syscall event");
    }

    #[test]
    fn a_bad_mask_is_an_error_not_a_panic() {
        let wire = vec![WireEvent {
            dt_ns: 1,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(0),
            kind: WireKind::TcpInfo {
                during_block: false,
                changed: 0b111,
                deltas: Deltas::of(&[1]),
            },
        }];
        assert!(expand(wire).is_err());
        let out_of_range = vec![WireEvent {
            dt_ns: 1,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(0),
            kind: WireKind::TcpInfo {
                during_block: false,
                changed: 1,
                deltas: Deltas::of(&[1 << 40]),
            },
        }];
        assert!(expand(out_of_range).is_err());
    }

    #[test]
    fn deltas_encode_as_a_vec_does_and_refuse_more_than_one_per_field() {
        let deltas = Deltas::of(&[3, -7, 1 << 40]);
        let as_vec: Vec<i64> = vec![3, -7, 1 << 40];
        assert_eq!(crate::wire::encode(&deltas), crate::wire::encode(&as_vec));
        let back: Deltas = crate::wire::decode(&crate::wire::encode(&as_vec)).expect("decodes");
        assert_eq!(back.as_slice(), as_vec.as_slice());
        let too_many: Vec<i64> = vec![1; FIELDS + 1];
        assert!(crate::wire::decode::<Deltas>(&crate::wire::encode(&too_many)).is_err());
    }
}
