//! Where each block of a run is in a file (protocol version 10, docs/FORMAT.md "The block
//! index"): a reader that wants one request of ten million reads the index at the file's end
//! and then only the blocks that may hold it, not the gigabyte before them.
//!
//! The index is written with a run's overview at the file's end, inside the range the trailer
//! names. It only repeats what the blocks say: a reader that decodes the whole file skips it,
//! and a file without one (cut short, a run with more blocks than [`MAX_INDEXED_BLOCKS`]) is
//! read whole.

use super::columns::{BLOCK_EVENTS, MAX_BLOCK_FRAME_BYTES};
use crate::event::{Event, RunId};
use crate::spec::MAX_REQUESTS;
use crate::varint::{put_varint, put_zigzag, Bytes};

/// The first byte of an index's frame: the tag after a block's. Like a block, not a message.
pub(crate) const BLOCK_INDEX: u8 = 13;

/// At most this many blocks indexed in a file, all runs together (a few MB of index, 48 bytes
/// each in memory): a run of ten million requests takes about 4,000 blocks, a week's idle
/// watch (a block a second) 600,000. Past it, the run that would go over it gets no index and
/// is read whole; a reader refuses a file's end that lists more.
pub const MAX_INDEXED_BLOCKS: usize = 1 << 18;

/// The least an entry of the index takes: eight varints of a byte each.
const MIN_ENTRY_BYTES: usize = 8;

/// What a block holds, as its index lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockContents {
    pub events: u32,
    /// Whether it holds events of request 0, which is also the number of the events that
    /// belong to no request (a connection accepted, its buffers, a packet through the emulated
    /// link, a segment not matched): were 0 in the range below, nearly every block of such a run
    /// would seem to hold every request.
    pub request_zero: bool,
    /// The lowest and the highest request number of its events, of those from 1 to
    /// [`MAX_REQUESTS`] - 1 (a server's event it could match to no request carries `u32::MAX`);
    /// both 0 when it holds none.
    pub first_request: u32,
    pub last_request: u32,
    /// The earliest and the latest time of its events (nanoseconds since the run started).
    pub first_ns: u64,
    pub last_ns: u64,
}

impl BlockContents {
    /// What `events` (a block's, at least one) hold.
    pub(crate) fn of(events: &[Event]) -> BlockContents {
        let mut contents = BlockContents {
            events: events.len() as u32,
            request_zero: false,
            first_request: u32::MAX,
            last_request: 0,
            first_ns: u64::MAX,
            last_ns: 0,
        };
        for event in events {
            match event.req.0 {
                0 => contents.request_zero = true,
                req if req < MAX_REQUESTS => {
                    contents.first_request = contents.first_request.min(req);
                    contents.last_request = contents.last_request.max(req);
                }
                _ => {}
            }
            contents.first_ns = contents.first_ns.min(event.at_ns);
            contents.last_ns = contents.last_ns.max(event.at_ns);
        }
        if contents.first_request > contents.last_request {
            (contents.first_request, contents.last_request) = (0, 0);
        }
        contents
    }
}

/// A block of a run, where the file holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexedBlock {
    /// The file offset of the block's frame (its 4-byte length first).
    pub offset: u64,
    /// The frame's length (what its first 4 bytes say).
    pub frame_bytes: u32,
    pub contents: BlockContents,
}

impl IndexedBlock {
    /// The bytes of the file its frame takes, its 4-byte length first.
    pub fn frame_range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + 4 + u64::from(self.frame_bytes)
    }
}

/// Where a run's blocks are, in the order the file holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockIndex {
    pub run: RunId,
    pub blocks: Vec<IndexedBlock>,
}

impl BlockIndex {
    /// The frame's payload: `13  run  blocks  (gap  frame_bytes  events  request_zero
    /// first_request  requests  first_ns  span_ns)*`, each a varint, `gap` being the bytes
    /// between the end of the previous block's frame (or the file's start) and this one's, so
    /// that blocks in order and apart are the only ones it can say; `request_zero` 0 or 1;
    /// `requests` is `last_request - first_request`, `first_ns` the zigzagged difference from
    /// the previous block's (the first's from 0) and `span_ns` `last_ns - first_ns`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![BLOCK_INDEX];
        put_varint(&mut out, self.run.0.into());
        put_varint(&mut out, self.blocks.len() as u64);
        let (mut end, mut first_ns) = (0u64, 0u64);
        for block in &self.blocks {
            let contents = &block.contents;
            put_varint(&mut out, block.offset - end);
            put_varint(&mut out, block.frame_bytes.into());
            put_varint(&mut out, contents.events.into());
            put_varint(&mut out, u64::from(contents.request_zero));
            put_varint(&mut out, contents.first_request.into());
            put_varint(&mut out, (contents.last_request - contents.first_request).into());
            put_zigzag(&mut out, contents.first_ns.wrapping_sub(first_ns) as i64);
            put_varint(&mut out, contents.last_ns - contents.first_ns);
            end = block.frame_range().end;
            first_ns = contents.first_ns;
        }
        out
    }

    /// Reads an index's frame payload (its first byte [`BLOCK_INDEX`]) of a file whose blocks all
    /// end by `blocks_end` (where the file's end, the overviews and the indexes, starts). Every
    /// claim is checked, and the count before anything is allocated: at most
    /// [`MAX_INDEXED_BLOCKS`] and no more than the payload's bytes could list. The error says
    /// what does not hold.
    pub fn read(payload: &[u8], blocks_end: u64) -> Result<BlockIndex, String> {
        let mut bytes = Bytes(payload);
        if bytes.byte() != Some(BLOCK_INDEX) {
            return Err("not a block index".into());
        }
        let cut = || "a block index ends inside an entry".to_string();
        let run = RunId(bytes.u32().ok_or_else(cut)?);
        let count = bytes.usize().ok_or_else(cut)?;
        if count == 0 || count > MAX_INDEXED_BLOCKS || count > bytes.0.len() / MIN_ENTRY_BYTES {
            return Err(format!(
                "a block index of {count} blocks in {} bytes (1 to {MAX_INDEXED_BLOCKS}, \
                 {MIN_ENTRY_BYTES} bytes each at least)",
                bytes.0.len()
            ));
        }
        let mut blocks = Vec::with_capacity(count);
        let (mut end, mut first_ns) = (0u64, 0u64);
        for _ in 0..count {
            let gap = bytes.u64().ok_or_else(cut)?;
            let frame_bytes = bytes.u32().ok_or_else(cut)?;
            let events = bytes.u32().ok_or_else(cut)?;
            let request_zero =
                bytes.bool().ok_or("a block index's flag of request 0 not 0 or 1")?;
            let first_request = bytes.u32().ok_or_else(cut)?;
            let requests = bytes.u32().ok_or_else(cut)?;
            let first = first_ns.wrapping_add(bytes.i64().ok_or_else(cut)? as u64);
            let span_ns = bytes.u64().ok_or_else(cut)?;
            let offset = end.checked_add(gap);
            let frame_end = offset.and_then(|o| o.checked_add(4 + u64::from(frame_bytes)));
            let (Some(offset), Some(frame_end)) = (offset, frame_end) else {
                return Err("a block index names a block past any file's end".into());
            };
            if frame_end > blocks_end {
                return Err(format!(
                    "a block index names a block at bytes {offset}..{frame_end}, past the \
                     blocks' end at {blocks_end}"
                ));
            }
            if frame_bytes as usize > MAX_BLOCK_FRAME_BYTES
                || events == 0
                || events as usize > BLOCK_EVENTS
            {
                return Err(format!(
                    "a block index names a block of {events} events in {frame_bytes} bytes"
                ));
            }
            let (Some(last_request), Some(last_ns)) =
                (first_request.checked_add(requests), first.checked_add(span_ns))
            else {
                return Err("a block index names requests or times past their range".into());
            };
            if last_request >= MAX_REQUESTS {
                return Err(format!("a block index names request {last_request}"));
            }
            let contents = BlockContents {
                events,
                request_zero,
                first_request,
                last_request,
                first_ns: first,
                last_ns,
            };
            blocks.push(IndexedBlock { offset, frame_bytes, contents });
            (end, first_ns) = (frame_end, first);
        }
        if !bytes.0.is_empty() {
            return Err(format!("a block index followed by {} bytes", bytes.0.len()));
        }
        Ok(BlockIndex { run, blocks })
    }

    /// The blocks that may hold events of request `request`, in file order.
    pub fn holding_request(&self, request: u32) -> impl Iterator<Item = &IndexedBlock> {
        self.blocks.iter().filter(move |block| {
            let contents = &block.contents;
            match request {
                0 => contents.request_zero,
                _ => (contents.first_request..=contents.last_request).contains(&request),
            }
        })
    }

    /// The blocks a reader of the run from request `first` on leaves unread: those that hold
    /// no event of `first` or a later request (events of no request and of earlier ones only).
    pub fn before_request(&self, first: u32) -> impl Iterator<Item = &IndexedBlock> {
        self.blocks.iter().filter(move |block| block.contents.last_request < first)
    }

    /// Where a reader starts so that it holds request `request` and up to `before_events` of the
    /// run's events before it (a page that holds a few million events: half of those, for the
    /// requests around it; none, to read from the request itself): the first request wholly in
    /// the blocks it reads from there (0 from the run's first). A request past the run's blocks
    /// is treated as its last.
    pub fn start_holding(&self, request: u32, before_events: u64) -> u32 {
        let holding = self.blocks.iter().position(|block| block.contents.last_request >= request);
        let Some(holding) = holding.or(self.blocks.len().checked_sub(1)) else { return 0 };
        let mut before = 0u64;
        let mut start = holding;
        while let Some(earlier) = start.checked_sub(1) {
            before += u64::from(self.blocks[earlier].contents.events);
            if before > before_events {
                break;
            }
            start = earlier;
        }
        match start.checked_sub(1) {
            None => 0,
            // A request whose events begin in the block before would need that block read too:
            // the reader starts at the first request wholly in the blocks it reads.
            Some(before) => {
                let first = self.blocks[start].contents.first_request;
                first.max(self.blocks[before].contents.last_request.saturating_add(1))
            }
        }
    }

    /// How many requests the run holds: one past the highest request number of its blocks.
    pub fn requests(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.contents.last_request) + 1).max().unwrap_or(0)
    }
}

/// The indexes of a file being written: each block noted where it was written, each run's
/// index written at the file's end (`wire::write_file_end`). Bounded by
/// [`MAX_INDEXED_BLOCKS`], all runs together: a run that would go over it gets no index.
#[derive(Debug, Default)]
pub struct Indexer {
    runs: Vec<BlockIndex>,
    /// Runs that went over the bound: their blocks are no longer noted.
    unindexed: Vec<RunId>,
    noted: usize,
}

impl Indexer {
    /// Notes a block of `run` whose frame, `frame_bytes` long after its length, was written at
    /// `offset`.
    pub fn note(&mut self, run: RunId, offset: u64, frame_bytes: usize, contents: BlockContents) {
        if self.unindexed.contains(&run) {
            return;
        }
        if self.noted >= MAX_INDEXED_BLOCKS {
            if let Some(at) = self.runs.iter().position(|index| index.run == run) {
                self.noted -= self.runs.remove(at).blocks.len();
            }
            self.unindexed.push(run);
            return;
        }
        let block = IndexedBlock { offset, frame_bytes: frame_bytes as u32, contents };
        match self.runs.iter_mut().find(|index| index.run == run) {
            Some(index) => index.blocks.push(block),
            None => self.runs.push(BlockIndex { run, blocks: vec![block] }),
        }
        self.noted += 1;
    }

    /// Each run's index, in the order the runs first had a block.
    pub fn indexes(&self) -> &[BlockIndex] {
        &self.runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(first_request: u32) -> BlockContents {
        BlockContents {
            events: 100,
            request_zero: first_request == 0,
            first_request,
            last_request: first_request + 9,
            first_ns: u64::from(first_request) * 1000,
            last_ns: u64::from(first_request) * 1000 + 500,
        }
    }

    fn index() -> BlockIndex {
        let blocks = (0..5)
            .map(|i| IndexedBlock {
                offset: 100 + i * 1000,
                frame_bytes: 900,
                contents: contents(i as u32 * 10),
            })
            .collect();
        BlockIndex { run: RunId(3), blocks }
    }

    /// An index reads back as it was written, and names the blocks of a request.
    #[test]
    fn an_index_reads_back_and_finds_a_request() {
        let index = index();
        let read = BlockIndex::read(&index.encode(), 5004).expect("a good index");
        assert_eq!(read, index);
        let holding: Vec<u64> = read.holding_request(23).map(|b| b.offset).collect();
        assert_eq!(holding, [2100]);
        let holding: Vec<u64> = read.holding_request(0).map(|b| b.offset).collect();
        assert_eq!(holding, [100], "only the block that holds request 0");
        assert_eq!(read.holding_request(50).count(), 0);
        assert_eq!(read.requests(), 50);
    }

    /// A reader from a request leaves the blocks wholly before it, and starts far enough back to
    /// hold up to half its events before the request it wants.
    #[test]
    fn a_reader_from_a_request_skips_the_blocks_before_it() {
        let index = index();
        let skipped: Vec<u64> = index.before_request(23).map(|b| b.offset).collect();
        assert_eq!(skipped, [100, 1100], "requests 0-19");
        assert_eq!(index.before_request(0).count(), 0);
        assert_eq!(index.before_request(u32::MAX).count(), 5);
        // Blocks of 100 events: room for 250 before it holds the two blocks before 43's.
        assert_eq!(index.start_holding(43, 250), 20);
        assert_eq!(index.start_holding(43, 0), 40, "from the request: its own block");
        assert_eq!(index.start_holding(43, 10_000), 0, "room for the whole run");
        assert_eq!(index.start_holding(5, 0), 0);
        assert_eq!(index.start_holding(1_000, 0), 40, "past the end: the last block");
        assert_eq!(BlockIndex { run: RunId(1), blocks: Vec::new() }.start_holding(7, 10), 0);
        // A request in two blocks (its request in one, its answer in the next): the reader
        // starts after it, and leaves the block before unread.
        let mut shared = index;
        shared.blocks[3].contents.last_request = 40;
        assert_eq!(shared.start_holding(43, 0), 41);
        assert_eq!(shared.before_request(41).count(), 4);
    }

    /// A block past where the blocks end, a count the bytes cannot hold, and a count past the
    /// bound are refused, the counts before anything is allocated.
    #[test]
    fn a_lying_index_is_refused() {
        let encoded = index().encode();
        let past = BlockIndex::read(&encoded, 5003).unwrap_err();
        assert!(past.contains("past the blocks' end at 5003"), "{past}");

        let mut huge = vec![BLOCK_INDEX, 3];
        put_varint(&mut huge, u64::MAX >> 1);
        let refused = BlockIndex::read(&huge, 1 << 40).unwrap_err();
        assert!(refused.contains("block index of"), "{refused}");

        let mut over = vec![BLOCK_INDEX, 3];
        put_varint(&mut over, MAX_INDEXED_BLOCKS as u64 + 1);
        over.resize(over.len() + (MAX_INDEXED_BLOCKS + 1) * MIN_ENTRY_BYTES, 1);
        assert!(BlockIndex::read(&over, 1 << 40).unwrap_err().contains("block index of"));

        let mut trailing = encoded.clone();
        trailing.push(0);
        assert!(BlockIndex::read(&trailing, 5100).unwrap_err().contains("followed by 1 bytes"));
        for cut in 1..encoded.len() {
            assert!(BlockIndex::read(&encoded[..cut], 5100).is_err(), "cut at {cut}");
        }
    }

    /// The events of no request (numbered 0, or `u32::MAX` on a server that could not match
    /// them) leave a block's range of requests alone: a run through the emulated link has them
    /// in every block.
    #[test]
    fn events_of_no_request_leave_the_range_alone() {
        use crate::event::{ConnId, EventKind, ReqId, Side};
        let event = |req, at_ns| Event {
            at_ns,
            side: Side::Server,
            conn: ConnId(1),
            req: ReqId(req),
            kind: EventKind::Accepted,
        };
        let events = [event(0, 10), event(7, 20), event(u32::MAX, 5), event(9, 30)];
        let contents = BlockContents::of(&events);
        assert!(contents.request_zero);
        assert_eq!((contents.first_request, contents.last_request), (7, 9));
        assert_eq!((contents.first_ns, contents.last_ns), (5, 30));
        let none = BlockContents::of(&[event(0, 1), event(u32::MAX, 2)]);
        assert_eq!((none.first_request, none.last_request, none.request_zero), (0, 0, true));
        let index = BlockIndex {
            run: RunId(1),
            blocks: vec![IndexedBlock { offset: 0, frame_bytes: 10, contents: none }],
        };
        let read = BlockIndex::read(&index.encode(), 14).unwrap();
        assert_eq!(read.holding_request(0).count(), 1);
        assert_eq!(read.holding_request(1).count(), 0, "no request but 0 in it");
    }

    /// Past the bound, the run that would go over it loses its index; the others keep theirs.
    #[test]
    fn the_indexer_is_bounded() {
        let mut indexer = Indexer::default();
        indexer.note(RunId(1), 0, 10, contents(0));
        for i in 0..MAX_INDEXED_BLOCKS as u64 {
            indexer.note(RunId(2), 14 + i * 14, 10, contents(0));
        }
        indexer.note(RunId(1), 1 << 30, 10, contents(1));
        let runs: Vec<(RunId, usize)> =
            indexer.indexes().iter().map(|index| (index.run, index.blocks.len())).collect();
        assert_eq!(runs, [(RunId(1), 2)], "run 2 went over the bound");
        indexer.note(RunId(2), 1 << 31, 10, contents(2));
        assert_eq!(indexer.indexes().len(), 1, "run 2 stays unindexed");
    }
}
