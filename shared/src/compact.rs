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

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::event::{ConnId, Event, EventKind, ReqId, Side, TcpInfoSample};

/// As a reader decodes it (written as [`WireEventRef`]; the tests write these too).
#[cfg_attr(test, derive(Serialize))]
#[derive(Deserialize)]
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

// A wire event lives on the stack, one at a time, while a message is expanded: boxing the large
// variant would allocate per TCP_INFO sample, which `Deltas` exists to avoid.
#[allow(clippy::large_enum_variant)]
#[cfg_attr(test, derive(Serialize))]
#[derive(Deserialize)]
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

    fn from_values(during_block: bool, v: &[u64; FIELDS]) -> Option<TcpInfoSample> {
        let u8_ = |x: u64| u8::try_from(x).ok();
        let u32_ = |x: u64| u32::try_from(x).ok();
        let o32 = |x: u64| if x == 0 { Some(None) } else { u32::try_from(x - 1).ok().map(Some) };
        let o64 = |x: u64| if x == 0 { None } else { Some(x - 1) };
        Some(TcpInfoSample {
            during_block,
            state: u8_(v[0])?,
            ca_state: u8_(v[1])?,
            rto_us: u32_(v[2])?,
            ato_us: u32_(v[3])?,
            snd_mss: u32_(v[4])?,
            rcv_mss: u32_(v[5])?,
            unacked: u32_(v[6])?,
            lost: u32_(v[7])?,
            retrans: u32_(v[8])?,
            last_data_sent_ms: u32_(v[9])?,
            last_ack_recv_ms: u32_(v[10])?,
            last_data_recv_ms: u32_(v[11])?,
            rtt_us: u32_(v[12])?,
            rttvar_us: u32_(v[13])?,
            snd_cwnd: u32_(v[14])?,
            rcv_space: u32_(v[15])?,
            total_retrans: u32_(v[16])?,
            bytes_acked: o64(v[17]),
            bytes_received: o64(v[18]),
            segs_out: o32(v[19])?,
            segs_in: o32(v[20])?,
            notsent_bytes: o32(v[21])?,
            min_rtt_us: o32(v[22])?,
            delivery_rate_bytes_per_s: o64(v[23]),
            bytes_sent: o64(v[24]),
            snd_wnd: o32(v[25])?,
            rcv_wnd: o32(v[26])?,
            data_segs_out: o32(v[27])?,
            rwnd_limited_us: o64(v[28]),
            sndbuf_limited_us: o64(v[29]),
        })
    }
}

/// The previous sample's values per connection and side, within one message: a lookup is O(1),
/// however many connections a message names (a message naming 100,000 took 25 s to expand
/// with a list). The map is made at the message's first sample: most messages have none, and
/// a map's secret keys cost more to draw than a small message takes to expand.
#[derive(Default)]
struct Previous(Option<crate::keyed_hash::KeyedMap<(ConnId, Side), [u64; FIELDS]>>);

impl Previous {
    fn get(&mut self, key: (ConnId, Side)) -> &mut [u64; FIELDS] {
        self.0.get_or_insert_with(Default::default).entry(key).or_insert([0; FIELDS])
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
                let values = sample.to_values();
                let before = previous.get((event.conn, event.side));
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
}

impl Expander {
    fn expand(&mut self, w: WireEvent) -> Result<Event, String> {
        self.at_ns = self.at_ns.wrapping_add(w.dt_ns as u64);
        let kind = match w.kind {
            WireKind::Plain(EventKind::TcpInfo(_)) => {
                return Err("a TCP_INFO sample outside its compact form".to_string())
            }
            WireKind::Plain(kind) => kind,
            WireKind::TcpInfo { during_block, changed, deltas } => {
                if changed.count_ones() as usize != deltas.len || changed >> FIELDS != 0 {
                    return Err("a TCP_INFO sample's field mask does not match its values".into());
                }
                let values = self.previous.get((w.conn, w.side));
                let mut deltas = deltas.as_slice().iter();
                for (i, value) in values.iter_mut().enumerate() {
                    if changed & (1 << i) != 0 {
                        let delta = deltas.next().expect("as many deltas as mask bits");
                        *value = value.wrapping_add(*delta as u64);
                    }
                }
                let sample = TcpInfoSample::from_values(during_block, values)
                    .ok_or("a TCP_INFO field is out of range")?;
                EventKind::TcpInfo(Box::new(sample))
            }
        };
        Ok(Event { at_ns: self.at_ns, side: w.side, conn: w.conn, req: w.req, kind })
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

impl<'de> serde::de::Visitor<'de> for EventsVisitor {
    type Value = Vec<Event>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sequence of compact events")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Event>, A::Error> {
        let mut events = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(PREALLOCATE_EVENTS));
        let mut expander = Expander::default();
        while let Some(wire) = seq.next_element::<WireEvent>()? {
            events.push(expander.expand(wire).map_err(A::Error::custom)?);
        }
        Ok(events)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{nagle_run, MS};

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

    fn with_samples() -> Vec<Event> {
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

    #[test]
    fn a_batch_round_trips_exactly() {
        let events = with_samples();
        assert_eq!(expand(compress(&events)).unwrap(), events);
        let bytes = postcard::to_allocvec(&compress(&events)).unwrap();
        let wire: Vec<WireEvent> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(expand(wire).unwrap(), events);
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
