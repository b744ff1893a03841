//! A file's events in blocks of columns (protocol version 9, docs/FORMAT.md "Blocks"): how a
//! session file is a fifth of the size its rows took.
//!
//! A row of today's `Events` message interleaves an event's time, side, connection, request and
//! kind. Here each of those is a column of like numbers, and each column is compressed alone
//! (zstd): a column of small differences compresses to a fraction of a byte an event, and the
//! times, nearly all of what is left, compress best split by the event's kind and side (a
//! write's return comes microseconds after its start, a read's after a wait; docs/SMALL-FILES.md
//! measured each choice).
//!
//! A block holds up to [`BLOCK_EVENTS`] events of one run and decodes on its own: its times,
//! connections and requests are differences from the previous event of the same side in the
//! block (the first from zero), and its TCP_INFO samples from the previous sample of the same
//! connection and side in the block. Only files hold blocks; the live stream keeps its batches.

use std::io::Read;

use super::by_hand::kind_by_hand;
use super::index::BlockContents;
use super::{Expander, Previous, SpareSamples, FIELDS, PREALLOCATE_EVENTS};
use crate::event::{ConnId, Event, EventKind, ReqId, RunId, Side};
use crate::varint::{put_varint, put_zigzag, unzigzag, zigzag, Bytes};

/// The first byte of a block's frame: the tag after `ToBrowser`'s last variant. A block is not
/// a message of its own: a reader hands its events on as `Events` messages.
pub(crate) const BLOCK: u8 = 12;

/// At most this many events in a block.
pub const BLOCK_EVENTS: usize = 65_536;

/// At most this many bytes in a block's columns before compression (a block of syscalls takes
/// about 6 bytes an event): what a reader may have to hold to decode one, checked before it
/// decodes anything. A writer splits a block that would take more.
pub const BLOCK_COLUMN_BYTES: usize = 4 << 20;

/// A block's frame is at most its columns (packed no longer than raw) and its directory (a few
/// bytes for each of at most [`column::COUNT`] columns): what an index may say a block takes.
pub(crate) const MAX_BLOCK_FRAME_BYTES: usize = BLOCK_COLUMN_BYTES + 4096;

/// [`EventKind`]'s variants, each numbered as `serde` numbers it (its index).
const KINDS_OF_EVENT: usize = 19;
/// The variant index of `EventKind::TcpInfo`.
const SAMPLE: u8 = 12;

/// The columns, by their number in a block's directory.
mod column {
    /// An event's side: 0 for the client, 1 for the server, a byte.
    pub const SIDES: usize = 0;
    /// The kinds of each side's events, a byte each (its variant's index): `KINDS + side`. A
    /// side's kinds follow a pattern (a request's syscalls in their order), which the two
    /// sides' interleaving would break.
    pub const KINDS: usize = 1;
    /// TCP_INFO samples: whether taken while blocked, then the mask of the fields that changed
    /// since the connection side's last sample and their differences.
    pub const SAMPLES: usize = 3;
    /// Then six columns for each kind and side ([`of`]): the events of one kind and side
    /// differ from the event before them alike (a write's return comes microseconds after its
    /// start, a read's after a wait; a request's first event starts the next request), and a
    /// column of like values compresses to little.
    const BY_KIND: usize = 4;
    /// The connection and the request, as differences from the previous event of the side.
    pub const CONN: usize = 0;
    pub const REQ: usize = 1;
    /// The time's difference from the previous event of the side, nanoseconds (zigzag): its
    /// lowest byte, its second, and the rest as a varint. The low bytes are the syscalls' own
    /// jitter, near random, the second byte a few values: apart, each compresses as far as it
    /// goes (docs/SMALL-FILES.md measured 15% less than the whole as varints).
    pub const TIME_LOW: usize = 2;
    pub const TIME_SECOND: usize = 3;
    pub const TIME_REST: usize = 4;
    /// The kind's fields (for every kind but a sample), as an `Events` row writes them.
    pub const FIELDS: usize = 5;
    const PER_KIND: usize = 6;
    pub const COUNT: usize = BY_KIND + 2 * super::KINDS_OF_EVENT * PER_KIND;

    /// The number of column `which` of the events of `kind` on side `side`.
    pub fn of(kind: u8, side: usize, which: usize) -> usize {
        BY_KIND + (usize::from(kind) * 2 + side) * PER_KIND + which
    }
}

/// Compresses a column into a zstd frame: [`zstd`] for every file; the golden file stores its
/// columns as they are (`|raw| raw.to_vec()`), freezing their layout and not zstd's choices.
pub type Compress<'a> = &'a mut dyn FnMut(&[u8]) -> Vec<u8>;

/// A column as a zstd frame, by `ruzstd`'s encoder at its fastest level (about zstd's level 1):
/// pure Rust, so that the page could write blocks too. C zstd's level 3 takes a fifth less on
/// the same columns (measured: 18 bytes a request against 23), at the cost of a C toolchain in
/// every build of the probe.
pub fn zstd(raw: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(raw, ruzstd::encoding::CompressionLevel::Fastest)
}

/// A block as a file holds it: its frame's payload, and what its run's index says of it.
#[derive(Debug)]
pub struct EncodedBlock {
    pub payload: Vec<u8>,
    pub contents: BlockContents,
}

/// `events` of `run` as blocks: one, or more where the events are more than a block holds.
pub fn encode_blocks(run: RunId, events: &[Event], compress: Compress<'_>) -> Vec<EncodedBlock> {
    let mut blocks = Vec::new();
    for chunk in events.chunks(BLOCK_EVENTS) {
        encode_within_bounds(run, chunk, compress, &mut blocks);
    }
    blocks
}

/// Appends `events` as one block, or as halves of them where their columns would take more than
/// [`BLOCK_COLUMN_BYTES`] (events of every field at its widest).
fn encode_within_bounds(
    run: RunId,
    events: &[Event],
    compress: Compress<'_>,
    blocks: &mut Vec<EncodedBlock>,
) {
    let columns = columns_of(events);
    let bytes: usize = columns.iter().map(Vec::len).sum();
    if bytes > BLOCK_COLUMN_BYTES && events.len() > 1 {
        let (first, second) = events.split_at(events.len() / 2);
        encode_within_bounds(run, first, compress, blocks);
        encode_within_bounds(run, second, compress, blocks);
        return;
    }
    assert!(bytes <= BLOCK_COLUMN_BYTES, "one event takes a few hundred bytes at most");
    let payload = pack(run, events.len(), &columns, compress);
    blocks.push(EncodedBlock { payload, contents: BlockContents::of(events) });
}

/// What the previous event of a side in the block was.
#[derive(Clone, Copy, Default)]
struct Last {
    at_ns: u64,
    conn: u32,
    req: u32,
}

/// The columns of `events`, not yet compressed.
fn columns_of(events: &[Event]) -> [Vec<u8>; column::COUNT] {
    let mut columns: [Vec<u8>; column::COUNT] = std::array::from_fn(|_| Vec::new());
    let mut previous = Previous::default();
    let mut last = [Last::default(); 2];
    let mut row = Vec::new();
    for event in events {
        let side = event.side.index();
        let kind = match &event.kind {
            EventKind::TcpInfo(sample) => {
                let (changed, deltas) = previous.differences((event.conn, event.side), sample);
                let samples = &mut columns[column::SAMPLES];
                samples.push(u8::from(sample.during_block));
                put_varint(samples, changed.into());
                for &delta in deltas.as_slice() {
                    put_zigzag(samples, delta);
                }
                SAMPLE
            }
            other => {
                // A kind as a row writes it: its variant's index (one byte: there are fewer
                // than 128), then its fields.
                row.clear();
                row = postcard::to_extend(other, row).expect("encoding into a Vec cannot fail");
                let (&kind, fields) = row.split_first().expect("a kind starts with its index");
                assert!(
                    usize::from(kind) < KINDS_OF_EVENT,
                    "a kind of event added to EventKind needs a place in KINDS_OF_EVENT"
                );
                columns[column::of(kind, side, column::FIELDS)].extend_from_slice(fields);
                kind
            }
        };
        let before = &mut last[side];
        columns[column::SIDES].push(side as u8);
        columns[column::KINDS + side].push(kind);
        let of = |which| column::of(kind, side, which);
        let conn = event.conn.0.wrapping_sub(before.conn) as i32;
        put_zigzag(&mut columns[of(column::CONN)], conn.into());
        let req = event.req.0.wrapping_sub(before.req) as i32;
        put_zigzag(&mut columns[of(column::REQ)], req.into());
        let time = zigzag(event.at_ns.wrapping_sub(before.at_ns) as i64);
        columns[of(column::TIME_LOW)].push(time as u8);
        columns[of(column::TIME_SECOND)].push((time >> 8) as u8);
        put_varint(&mut columns[of(column::TIME_REST)], time >> 16);
        *before = Last { at_ns: event.at_ns, conn: event.conn.0, req: event.req.0 };
    }
    columns
}

/// A block's frame payload: `BLOCK`, the run, the event count, the directory (for each column
/// that holds anything, in order: its number, its length, its length packed), then each
/// column packed.
fn pack(run: RunId, events: usize, columns: &[Vec<u8>], compress: Compress<'_>) -> Vec<u8> {
    let mut packed = Vec::new();
    let mut directory = Vec::new();
    for (number, raw) in columns.iter().enumerate().filter(|(_, raw)| !raw.is_empty()) {
        let compressed = compress(raw);
        // Stored as it is when compressing did not make it smaller: its two lengths are equal.
        let column = if compressed.len() < raw.len() { &compressed[..] } else { &raw[..] };
        directory.push((number, raw.len(), column.len()));
        packed.extend_from_slice(column);
    }
    let mut out = vec![BLOCK];
    put_varint(&mut out, run.0.into());
    put_varint(&mut out, events as u64);
    put_varint(&mut out, directory.len() as u64);
    for (number, raw, packed) in directory {
        put_varint(&mut out, number as u64);
        put_varint(&mut out, raw as u64);
        put_varint(&mut out, packed as u64);
    }
    out.extend_from_slice(&packed);
    out
}

/// A block's events as a reader hands them on: in batches of at most the events of one `Events`
/// message (the messages a file of rows would have held), each made when it is asked for. The
/// block's columns are decompressed when it is read; its events are made a batch at a time, so
/// that a reader (the page) can give its thread back between batches.
pub(crate) struct Unpacked {
    pub(crate) run: RunId,
    /// The block's columns, decompressed (a stored one copied), one after the other: one
    /// buffer, kept for the next block, so that what a reader holds is bounded by the largest
    /// block ([`BLOCK_COLUMN_BYTES`]), not by the largest of each column over a file.
    columns: Vec<u8>,
    /// Where each column is in `columns`.
    ranges: [std::ops::Range<usize>; column::COUNT],
    /// How far each column has been read.
    read: [usize; column::COUNT],
    /// Events not yet made.
    left: usize,
    /// The previous event of each side, and the previous sample of each connection side.
    last: [Last; 2],
    expander: Expander,
    decoder: Option<Box<ruzstd::decoding::FrameDecoder>>,
}

impl Default for Unpacked {
    fn default() -> Self {
        Unpacked {
            run: RunId(0),
            columns: Vec::new(),
            ranges: std::array::from_fn(|_| 0..0),
            read: [0; column::COUNT],
            left: 0,
            last: Default::default(),
            expander: Expander::default(),
            decoder: None,
        }
    }
}

impl std::fmt::Debug for Unpacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Unpacked {{ run: {:?}, events left: {} }}", self.run, self.left)
    }
}

impl Unpacked {
    /// Reads the block in `payload` (a frame's, its first byte [`BLOCK`]): its directory, every
    /// claim of which is checked before a column is decompressed, then its columns. Its events
    /// are then made by [`Unpacked::next_batch`]. The error says what does not hold.
    pub(crate) fn read(&mut self, payload: &[u8]) -> Result<(), String> {
        self.left = 0;
        let mut bytes = Bytes(payload);
        if bytes.byte() != Some(BLOCK) {
            return Err("not a block of events".into());
        }
        let cut = || "a block of events ends inside its directory".to_string();
        let run = RunId(bytes.u32().ok_or_else(cut)?);
        let count = bytes.usize().ok_or_else(cut)?;
        if count == 0 || count > BLOCK_EVENTS {
            return Err(format!("a block of {count} events (1 to {BLOCK_EVENTS})"));
        }
        let listed = bytes.usize().ok_or_else(cut)?;
        if listed > column::COUNT {
            return Err(format!("a block of {listed} columns (at most {})", column::COUNT));
        }
        let mut directory = [(0usize, 0usize); column::COUNT];
        let mut present = [false; column::COUNT];
        let (mut raw_total, mut packed_total, mut next) = (0usize, 0usize, 0usize);
        for _ in 0..listed {
            let number = bytes.usize().ok_or_else(cut)?;
            let raw = bytes.usize().ok_or_else(cut)?;
            let packed = bytes.usize().ok_or_else(cut)?;
            if number < next || number >= column::COUNT {
                return Err(format!("a block names column {number} out of order or unknown"));
            }
            if packed > raw || raw == 0 {
                return Err(format!("a block's column {number} of {raw} bytes packed in {packed}"));
            }
            raw_total = raw_total.saturating_add(raw);
            packed_total = packed_total.saturating_add(packed);
            if raw_total > BLOCK_COLUMN_BYTES {
                return Err(format!("a block's columns over {BLOCK_COLUMN_BYTES} bytes"));
            }
            directory[number] = (raw, packed);
            present[number] = true;
            next = number + 1;
        }
        if packed_total != bytes.0.len() {
            return Err(format!(
                "a block's columns take {packed_total} bytes, and {} follow its directory",
                bytes.0.len()
            ));
        }
        self.columns.clear();
        let mut rest = bytes.0;
        for (number, range) in self.ranges.iter_mut().enumerate() {
            let start = self.columns.len();
            if present[number] {
                let (raw, packed) = directory[number];
                let (bytes, after) = rest.split_at(packed);
                rest = after;
                if packed == raw {
                    self.columns.extend_from_slice(bytes);
                } else {
                    let decoder = self.decoder.get_or_insert_with(Default::default);
                    unpack(bytes, raw, decoder, &mut self.columns)
                        .map_err(|why| format!("a block's column {number}: {why}"))?;
                }
            }
            *range = start..self.columns.len();
        }
        self.run = run;
        self.read = [0; column::COUNT];
        self.left = count;
        self.last = Default::default();
        self.expander =
            Expander { spare: std::mem::take(&mut self.expander.spare), ..Expander::default() };
        Ok(())
    }

    /// Whether the block read last has events not yet made.
    pub(crate) fn has_events_left(&self) -> bool {
        self.left > 0
    }

    /// The block's next `batch_events` events (fewer at its end), the samples in `spare`'s
    /// boxes first; `None` once all are made. An error ends the block (the batches before it
    /// were whole).
    pub(crate) fn next_batch(
        &mut self,
        spare: &mut SpareSamples,
        batch_events: usize,
    ) -> Option<Result<Vec<Event>, String>> {
        let mut events = Vec::new();
        Some(self.next_batch_into(spare, batch_events, &mut events)?.map(|()| events))
    }

    /// [`Unpacked::next_batch`] into `events` (emptied first, its allocation kept): a reader
    /// that lets each batch go makes the next in the same list.
    pub(crate) fn next_batch_into(
        &mut self,
        spare: &mut SpareSamples,
        batch_events: usize,
        events: &mut Vec<Event>,
    ) -> Option<Result<(), String>> {
        if self.left == 0 {
            return None;
        }
        events.clear();
        let count = self.left.min(batch_events);
        let mut columns: [Bytes<'_>; column::COUNT] = std::array::from_fn(|i| {
            Bytes(&self.columns[self.ranges[i].start + self.read[i]..self.ranges[i].end])
        });
        std::mem::swap(&mut self.expander.spare, spare);
        let made = make_events(&mut columns, count, &mut self.last, &mut self.expander, events);
        std::mem::swap(&mut self.expander.spare, spare);
        for (read, (range, left)) in self.read.iter_mut().zip(self.ranges.iter().zip(&columns)) {
            *read = range.len() - left.0.len();
        }
        self.left -= count;
        let made = made.map_err(String::from).and_then(|()| {
            let ended = self.left == 0;
            if ended && columns.iter().any(|column| !column.0.is_empty()) {
                return Err("a column holds more than the block's events".to_string());
            }
            Ok(())
        });
        if made.is_err() {
            self.left = 0;
        }
        Some(made)
    }
}

/// The largest zstd window a column's frame may name: what `ruzstd`'s encoder writes. The
/// decoder sets the window aside as it reads the frame's header, before anything is decoded,
/// so a larger one would cost its size for a few bytes of header.
pub const MAX_WINDOW_BYTES: u64 = 128 * 1024;

/// Decompresses the zstd frame `packed` onto the end of `out`, where it must come to `raw`
/// bytes. The frame's header is checked first (its window: [`MAX_WINDOW_BYTES`]).
fn unpack(
    packed: &[u8],
    raw: usize,
    decoder: &mut ruzstd::decoding::FrameDecoder,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let window = frame_window(packed).ok_or("not a zstd frame of a column's size")?;
    if window > MAX_WINDOW_BYTES {
        return Err(format!("a zstd window of {window} bytes (at most {MAX_WINDOW_BYTES})"));
    }
    let start = out.len();
    let mut source = packed;
    {
        let stream = ruzstd::decoding::StreamingDecoder::new_with_decoder(&mut source, decoder)
            .map_err(|e| format!("zstd: {e}"))?;
        // Grown as it decodes, never past one byte more than the directory says.
        stream.take(raw as u64 + 1).read_to_end(out).map_err(|e| format!("zstd: {e}"))?;
    }
    let decoded = out.len() - start;
    if decoded != raw || !source.is_empty() {
        return Err(format!("decodes to {decoded} bytes, not the {raw} its directory says"));
    }
    Ok(())
}

/// The window a zstd frame's header names (RFC 8878, 3.1.1): the frame's content size for a
/// frame in one segment, else its window descriptor's; `None` for anything but a frame
/// without a dictionary.
fn frame_window(frame: &[u8]) -> Option<u64> {
    let (magic, rest) = frame.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*magic) != 0xFD2F_B528 {
        return None;
    }
    let (&descriptor, rest) = rest.split_first()?;
    let single_segment = descriptor & 0x20 != 0;
    if descriptor & 0x03 != 0 {
        return None;
    }
    if !single_segment {
        let exponent = u64::from(rest.first()? >> 3);
        let mantissa = u64::from(rest.first()? & 7);
        let base = 1u64 << (10 + exponent);
        return Some(base + base / 8 * mantissa);
    }
    let size = match descriptor >> 6 {
        0 => u64::from(*rest.first()?),
        1 => u64::from(u16::from_le_bytes(*rest.first_chunk::<2>()?)) + 256,
        2 => u64::from(u32::from_le_bytes(*rest.first_chunk::<4>()?)),
        _ => u64::from_le_bytes(*rest.first_chunk::<8>()?),
    };
    Some(size)
}

/// The next `count` events of a block's `columns`, read from where they were left.
fn make_events(
    columns: &mut [Bytes<'_>; column::COUNT],
    count: usize,
    last: &mut [Last; 2],
    expander: &mut Expander,
    events: &mut Vec<Event>,
) -> Result<(), &'static str> {
    events.reserve(count.min(PREALLOCATE_EVENTS));
    for _ in 0..count {
        let side = match columns[column::SIDES].byte() {
            Some(side @ (0 | 1)) => usize::from(side),
            Some(_) => return Err("a side other than 0 and 1"),
            None => return Err("the sides column ends early"),
        };
        let kind = columns[column::KINDS + side].byte().ok_or("a kinds column ends early")?;
        if usize::from(kind) >= KINDS_OF_EVENT {
            return Err("an unknown kind of event");
        }
        let cut = "a column of a kind of event ends early";
        let of = |which| column::of(kind, side, which);
        let conn = columns[of(column::CONN)].i64().ok_or(cut)? as u32;
        let req = columns[of(column::REQ)].i64().ok_or(cut)? as u32;
        let low = columns[of(column::TIME_LOW)].byte().ok_or(cut)?;
        let second = columns[of(column::TIME_SECOND)].byte().ok_or(cut)?;
        let rest = columns[of(column::TIME_REST)].u64().ok_or(cut)?;
        let time = unzigzag((rest << 16) | u64::from(second) << 8 | u64::from(low));
        let before = &mut last[side];
        let (conn, req) = (before.conn.wrapping_add(conn), before.req.wrapping_add(req));
        let at_ns = before.at_ns.wrapping_add(time as u64);
        *before = Last { at_ns, conn, req };
        let (side, conn) = (if side == 0 { Side::Client } else { Side::Server }, ConnId(conn));
        let kind = if kind == SAMPLE {
            let samples = &mut columns[column::SAMPLES];
            let during_block = samples.bool().ok_or("the samples end early")?;
            let changed = samples.u32().ok_or("the samples end early")?;
            let mut deltas = [0; FIELDS];
            let deltas =
                deltas.get_mut(..changed.count_ones() as usize).ok_or("a sample's mask")?;
            for delta in deltas.iter_mut() {
                *delta = samples.i64().ok_or("the samples end early")?;
            }
            EventKind::TcpInfo(expander.sample((conn, side), during_block, changed, deltas)?)
        } else {
            let fields = &mut columns[column::of(kind, side.index(), column::FIELDS)];
            kind_by_hand(kind.into(), fields).ok_or("a kind's fields do not decode")?
        };
        events.push(Event { at_ns, side, conn, req: ReqId(req), kind });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{every_kind, with_samples};
    use super::*;
    use crate::analysis::batches::Rng;
    use crate::synthetic::{nagle_run, MS};

    fn stored(raw: &[u8]) -> Vec<u8> {
        raw.to_vec()
    }

    /// Every kind of event, at times, connections and requests that move both ways, and many
    /// of them: the columns' differences wrap, and a block holds several batches.
    fn events(rng: &mut Rng) -> Vec<Event> {
        let mut events = Vec::new();
        for round in 0..40u64 {
            for mut event in every_kind(rng).into_iter().chain(with_samples()) {
                event.at_ns = match rng.below(5) {
                    0 => u64::MAX - rng.below(1000) as u64,
                    1 => 0,
                    _ => round * 1_000_000 + rng.below(1_000_000) as u64,
                };
                event.conn = ConnId(if rng.below(9) == 0 { u32::MAX } else { rng.below(5) as u32 });
                event.req = ReqId(rng.below(3) as u32 * 1000 + round as u32);
                events.push(event);
            }
        }
        events
    }

    fn decoded(payload: &[u8], batch_events: usize) -> Result<(RunId, Vec<Vec<Event>>), String> {
        let mut unpacked = Unpacked::default();
        unpacked.read(payload)?;
        let mut spare = SpareSamples::default();
        let batches = std::iter::from_fn(|| unpacked.next_batch(&mut spare, batch_events));
        let batches = batches.collect::<Result<Vec<_>, _>>()?;
        Ok((unpacked.run, batches))
    }

    #[test]
    fn every_kind_of_event_comes_back_from_a_block_in_batches_of_the_size_asked() {
        let mut rng = Rng(0x5eed);
        let events = events(&mut rng);
        for compress in [zstd as fn(&[u8]) -> Vec<u8>, stored] {
            let blocks = encode_blocks(RunId(7), &events, &mut { compress });
            assert_eq!(blocks.len(), 1);
            let (run, batches) = decoded(&blocks[0].payload, 100).expect("the block decodes");
            assert_eq!(run, RunId(7));
            assert_eq!(blocks[0].contents, BlockContents::of(&events));
            assert_eq!(blocks[0].contents.events as usize, events.len());
            assert!(batches.iter().all(|batch| !batch.is_empty() && batch.len() <= 100));
            assert_eq!(batches.len(), events.len().div_ceil(100));
            assert_eq!(batches.concat(), events);
        }
    }

    #[test]
    fn a_block_of_a_run_is_a_fraction_of_its_rows() {
        let events = nagle_run(2_000, 44 * MS);
        let rows = crate::wire::encode(&crate::wire::ToBrowser::Events {
            run: RunId(1),
            events: events.clone(),
        });
        let blocks = encode_blocks(RunId(1), &events, &mut zstd);
        let packed: usize = blocks.iter().map(|block| block.payload.len()).sum();
        assert!(packed * 3 < rows.len(), "{packed} bytes in blocks, {} in rows", rows.len());
        let (_, batches) = decoded(&blocks[0].payload, BLOCK_EVENTS).unwrap();
        assert_eq!(batches.concat(), events);
    }

    #[test]
    fn more_events_than_a_block_holds_make_more_blocks() {
        let events: Vec<Event> =
            nagle_run(1, 44 * MS).into_iter().cycle().take(BLOCK_EVENTS * 2 + 5).collect();
        let blocks = encode_blocks(RunId(1), &events, &mut zstd);
        assert_eq!(blocks.len(), 3);
        let mut back = Vec::new();
        for block in &blocks {
            back.extend(decoded(&block.payload, BLOCK_EVENTS).unwrap().1.concat());
        }
        assert_eq!(back, events);
        let counts: Vec<u32> = blocks.iter().map(|block| block.contents.events).collect();
        assert_eq!(counts, [BLOCK_EVENTS as u32, BLOCK_EVENTS as u32, 5]);
    }

    /// Samples whose every field changes by the most each time take hundreds of bytes each:
    /// a block of them is cut where its columns would pass the bound a reader holds to.
    #[test]
    fn events_whose_columns_would_pass_the_bound_are_split_into_blocks_within_it() {
        let mut rng = Rng(3);
        let kinds = every_kind(&mut rng);
        let wide: Vec<Event> = (0..BLOCK_EVENTS)
            .map(|i| {
                let mut event =
                    kinds.iter().find(|e| matches!(e.kind, EventKind::TcpInfo(_))).unwrap().clone();
                if let EventKind::TcpInfo(sample) = &mut event.kind {
                    let big = if i % 2 == 0 { u32::MAX } else { 0 };
                    sample.rto_us = big;
                    sample.ato_us = big;
                    sample.snd_mss = big;
                    sample.rcv_mss = big;
                    sample.unacked = big;
                    sample.lost = big;
                    sample.retrans = big;
                    sample.rtt_us = big;
                    sample.rttvar_us = big;
                    sample.snd_cwnd = big;
                    sample.rcv_space = big;
                    sample.total_retrans = big;
                    sample.bytes_acked = Some(u64::from(big) << 31);
                    sample.bytes_received = Some(u64::from(big) << 31);
                }
                event
            })
            .collect();
        let blocks = encode_blocks(RunId(1), &wide, &mut stored);
        assert!(blocks.len() > 1, "{} block", blocks.len());
        let mut back = Vec::new();
        for block in &blocks {
            assert!(block.payload.len() <= BLOCK_COLUMN_BYTES + 1024);
            back.extend(decoded(&block.payload, BLOCK_EVENTS).unwrap().1.concat());
        }
        assert_eq!(back, wide);
    }

    /// A block cut anywhere, or with any byte changed, is refused with a reason or decodes to
    /// events; it never panics, and a cut block is never taken whole.
    #[test]
    fn a_cut_or_damaged_block_is_refused_or_decodes_never_panics() {
        let mut rng = Rng(11);
        let events: Vec<Event> = events(&mut rng).into_iter().take(300).collect();
        for compress in [zstd as fn(&[u8]) -> Vec<u8>, stored] {
            let block = encode_blocks(RunId(1), &events, &mut { compress }).remove(0).payload;
            for len in 0..block.len() {
                assert!(decoded(&block[..len], 64).is_err(), "cut at {len} of {}", block.len());
            }
            for at in 0..block.len() {
                for flip in [1u8, 0x80, 0xff] {
                    let mut damaged = block.clone();
                    damaged[at] ^= flip;
                    let _ = decoded(&damaged, 64);
                }
            }
        }
    }

    /// A block's events are made a batch at a time: one whose columns go wrong only at its end
    /// hands on its whole batches before it says what is wrong.
    #[test]
    fn a_block_that_goes_wrong_at_its_end_hands_on_its_batches_before() {
        let events = nagle_run(30, 44 * MS);
        assert!(events.len() > 300, "{} events", events.len());
        let mut columns = columns_of(&events);
        columns[column::SIDES].push(0);
        let block = pack(RunId(1), events.len(), &columns, &mut zstd);
        let mut unpacked = Unpacked::default();
        unpacked.read(&block).expect("its directory holds");
        let mut spare = SpareSamples::default();
        let batches: Vec<_> = std::iter::from_fn(|| unpacked.next_batch(&mut spare, 100)).collect();
        let (last, whole) = batches.split_last().unwrap();
        let error = last.as_ref().expect_err("the last batch finds the extra byte");
        assert!(error.contains("more than the block's events"), "{error}");
        let whole: Vec<Event> = whole.iter().flat_map(|b| b.clone().unwrap()).collect();
        assert_eq!(whole.len(), events.len() / 100 * 100);
        assert_eq!(whole, events[..whole.len()]);
    }

    /// The frames the probe writes name a window the reader takes, however long the column
    /// (a block's columns reach 4 MiB together).
    #[test]
    fn the_encoders_frames_name_a_window_the_reader_takes() {
        for len in [10, 1000, 200_000, BLOCK_COLUMN_BYTES] {
            let column: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let window = frame_window(&zstd(&column)).expect("a zstd frame");
            assert!(window <= MAX_WINDOW_BYTES, "{window} for {len} bytes");
        }
    }

    fn directory(count: u64, columns: &[(u64, u64, u64)]) -> Vec<u8> {
        let mut out = vec![BLOCK];
        put_varint(&mut out, 1);
        put_varint(&mut out, count);
        put_varint(&mut out, columns.len() as u64);
        for &(number, raw, packed) in columns {
            put_varint(&mut out, number);
            put_varint(&mut out, raw);
            put_varint(&mut out, packed);
        }
        out
    }

    /// A crafted directory is refused by what it claims, before a column is decoded or
    /// anything the size of its claims is allocated.
    #[test]
    fn a_lying_directory_is_refused_before_anything_is_allocated() {
        let refused = |payload: Vec<u8>, why: &str| {
            let error = decoded(&payload, 64).expect_err(why);
            assert!(error.contains(why), "{error:?} should say {why:?}");
        };
        refused(directory(u64::MAX, &[]), "events (1 to 65536)");
        refused(directory(0, &[]), "a block of 0 events");
        refused(directory(1, &[(0, 1, 1); 300]), "a block of 300 columns");
        refused(directory(1, &[(1, 1, 1), (0, 1, 1)]), "out of order or unknown");
        refused(directory(1, &[(0, 1, 1), (0, 1, 1)]), "out of order or unknown");
        refused(directory(1, &[(999, 1, 1)]), "out of order or unknown");
        refused(directory(1, &[(0, 10, 20)]), "of 10 bytes packed in 20");
        refused(directory(1, &[(0, 3 << 20, 1), (1, 3 << 20, 1)]), "over 4194304 bytes");
        // Lengths that say more, or less, than follows.
        let mut short = directory(1, &[(0, 1 << 20, 5)]);
        short.extend([1, 2]);
        refused(short, "take 5 bytes, and 2 follow");
        // A zstd frame that names a window beyond the bound, or is no frame.
        let mut window = directory(1, &[(0, 100, 6)]);
        window.extend([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xff]);
        refused(window, "a zstd window of");
        let mut junk = directory(1, &[(0, 100, 6)]);
        junk.extend([1, 2, 3, 4, 5, 6]);
        refused(junk, "not a zstd frame");
        // A frame that decodes to more than its column's length is cut at one byte more.
        let mut more = directory(1, &[(0, 30, 0)]);
        let frame = zstd(&[7; 5000]);
        assert!(frame.len() < 30, "{} bytes", frame.len());
        more.truncate(more.len() - 1);
        put_varint(&mut more, frame.len() as u64);
        more.extend(&frame);
        refused(more, "decodes to 31 bytes, not the 30");
    }
}
