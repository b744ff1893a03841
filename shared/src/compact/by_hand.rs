//! A batch's compact events decoded without `serde` ([`decode_into_by_hand`]), for the readers
//! that decode every batch of a file or stream: the same values as [`super::deserialize`], or
//! `None` where it does not take a batch whole, for `serde` to decode it (or say why not).

use serde::Deserialize;

use super::{Expander, SpareSamples, FIELDS, PREALLOCATE_EVENTS};
use crate::event::{ConnId, Event, EventKind, ReqId, Segment, Side};
use crate::varint::Bytes;

/// [`deserialize`] without `serde`, into `events` (emptied first, its allocation kept) with its
/// samples in `spare`'s boxes first, from `bytes` (a message's, after its run id): `None`
/// where it does not take the events whole, to the same values, for `serde` to decode them (or
/// say why not). Through `serde`, a captured segment's ten fields were a third of the CPU of
/// reading a capture.
pub(crate) fn decode_into_by_hand(
    bytes: &mut Bytes<'_>,
    events: &mut Vec<Event>,
    spare: &mut SpareSamples,
) -> Option<()> {
    events.clear();
    let count = bytes.usize()?;
    events.reserve(count.min(PREALLOCATE_EVENTS).min(bytes.0.len()));
    let mut expander = Expander { spare: std::mem::take(spare), ..Expander::default() };
    let decoded = (0..count).try_for_each(|_| {
        let event = event_by_hand(bytes, &mut expander)?;
        events.push(event);
        Some(())
    });
    *spare = expander.spare;
    decoded
}

/// One event of [`decode_into_by_hand`], as [`EventSeed`] decodes it.
#[inline]
fn event_by_hand(bytes: &mut Bytes<'_>, expander: &mut Expander) -> Option<Event> {
    let dt_ns = bytes.i64()?;
    let side = match bytes.u32()? {
        0 => Side::Client,
        1 => Side::Server,
        _ => return None,
    };
    let conn = ConnId(bytes.u32()?);
    let req = ReqId(bytes.u32()?);
    let kind = match bytes.u32()? {
        0 => plain_kind_by_hand(bytes)?,
        // `WireKind::TcpInfo { during_block, changed, deltas }`.
        1 => {
            let during_block = bytes.bool()?;
            let changed = bytes.u32()?;
            let len = bytes.usize()?;
            let mut deltas = [0; FIELDS];
            let deltas = deltas.get_mut(..len)?;
            for delta in deltas.iter_mut() {
                *delta = bytes.i64()?;
            }
            let sample = expander.sample((conn, side), during_block, changed, deltas).ok()?;
            EventKind::TcpInfo(sample)
        }
        _ => return None,
    };
    Some(Event { at_ns: expander.time(dt_ns), side, conn, req, kind })
}

/// `WireKind::Plain`'s kind: by hand, but for the nested enums of the rare kinds (a socket
/// option, a link event), which `serde` decodes where they are. Each variant is built with its
/// fields named: a field added to one does not build until it is read here too (a kind added
/// at the end is left to `serde`, through the whole message, until it is).
#[inline]
fn plain_kind_by_hand(bytes: &mut Bytes<'_>) -> Option<EventKind> {
    let variant = bytes.u32()?;
    kind_by_hand(variant, bytes)
}

/// The kind of [`EventKind`]'s variant `variant` (its index, as `serde` numbers them), its
/// fields read from `bytes`; `None` for a sample (never in this form) or an unknown variant.
#[inline(always)]
pub(super) fn kind_by_hand(variant: u32, bytes: &mut Bytes<'_>) -> Option<EventKind> {
    Some(match variant {
        0 => EventKind::ConnectStart,
        1 => EventKind::Connected,
        2 => EventKind::Accepted,
        3 => EventKind::Closed,
        4 => EventKind::RequestStart,
        5 => EventKind::RequestDone,
        6 => EventKind::WriteStart { len_bytes: bytes.u32()? },
        7 => EventKind::WriteDone { bytes: bytes.u32()? },
        8 => EventKind::ReadStart { len_bytes: bytes.u32()? },
        9 => EventKind::ReadDone { bytes: bytes.u32()? },
        11 => EventKind::Buffers { sndbuf_bytes: bytes.u32()?, rcvbuf_bytes: bytes.u32()? },
        // A sample outside its compact form is refused.
        12 => return None,
        13 => EventKind::Segment(segment_by_hand(bytes)?),
        15 => EventKind::RunDelay { since_ns: bytes.u64()?, waited_ns: bytes.u64()? },
        16 => EventKind::ClockSync {
            offset_ns: bytes.i64()?,
            uncertainty_ns: bytes.u64()?,
            rtt_ns: bytes.u64()?,
        },
        17 => EventKind::DelayedAck,
        18 => {
            let call = by_serde(bytes)?;
            EventKind::BlockedCall { call, since_ns: bytes.u64()?, bytes: bytes.u32()? }
        }
        10 => {
            let opt = by_serde(bytes)?;
            EventKind::SockOpt { opt, value: bytes.u32()? }
        }
        14 => EventKind::Link(by_serde(bytes)?),
        _ => return None,
    })
}

/// A value decoded by `serde` from the start of `bytes`, which are then the bytes after it.
fn by_serde<'de, T: Deserialize<'de>>(bytes: &mut Bytes<'de>) -> Option<T> {
    let mut decoder = postcard::Deserializer::from_bytes(bytes.0);
    let value = T::deserialize(&mut decoder).ok()?;
    bytes.0 = decoder.finalize().ok()?;
    Some(value)
}

/// A segment's fields in their declared order, each named, so that a field added to
/// [`Segment`] does not build until it is read here too.
#[inline]
fn segment_by_hand(bytes: &mut Bytes<'_>) -> Option<Segment> {
    let flags = bytes.byte()?;
    let seq = bytes.u32()?;
    let ack = bytes.u32()?;
    let len = bytes.u32()?;
    let window = bytes.u16()?;
    let mss = bytes.option(Bytes::u16)?;
    let wscale = bytes.option(Bytes::byte)?;
    let sack_permitted = bytes.bool()?;
    let sack_blocks = bytes.byte()?;
    let timestamps = bytes.option(|b| Some((b.u32()?, b.u32()?)))?;
    Some(Segment {
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
    })
}
