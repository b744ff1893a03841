//! One request of a finished file, read through its block index (docs/FORMAT.md, "The block
//! index"): the file's last bytes, its end, then only the blocks that may hold the request. Sans
//! IO: the caller reads the bytes asked for, from a file or anything else that seeks.

use super::{decode_block, read_file_end, BlockIndex, FileEnd, ToBrowser, Trailer};
use super::{IndexedBlock, TRAILER_FRAME_BYTES};
use crate::event::{Event, RunId};

/// Reads `len` bytes at `offset` of the file, or says why it cannot.
pub type ReadAt<'a> = &'a mut dyn FnMut(u64, usize) -> Result<Vec<u8>, String>;

/// A finished file's block indexes, read from its end.
#[derive(Debug)]
pub struct Seeker {
    indexes: Vec<BlockIndex>,
}

/// What [`Seeker::request`] found.
#[derive(Debug, PartialEq)]
pub struct Found {
    pub run: RunId,
    /// The request's events, in the order the file holds them: the first `limit` of them.
    pub events: Vec<Event>,
    /// Its events past `limit` (only a crafted file has more than a few hundred).
    pub beyond: u64,
    /// Blocks read to find them, and the run's blocks in all.
    pub blocks_read: usize,
    pub blocks: usize,
}

impl Found {
    /// Nothing yet of `run`'s request.
    pub fn of(run: RunId) -> Found {
        Found { run, events: Vec::new(), beyond: 0, blocks_read: 0, blocks: 0 }
    }

    /// Keeps `event` while fewer than `limit` are kept, else counts it.
    pub fn keep(&mut self, event: Event, limit: usize) {
        if self.events.len() < limit {
            self.events.push(event);
        } else {
            self.beyond += 1;
        }
    }
}

impl Seeker {
    /// Reads the indexes at the end of a file of `file_bytes`: `Ok(None)` when it has none (it
    /// was cut short, its events are rows, or a build before version 10 wrote it), an error
    /// when its end is there and does not hold.
    pub fn open(file_bytes: u64, read_at: ReadAt<'_>) -> Result<Option<Seeker>, String> {
        let Some(tail_at) = file_bytes.checked_sub(TRAILER_FRAME_BYTES as u64) else {
            return Ok(None);
        };
        let tail = read_at(tail_at, TRAILER_FRAME_BYTES)?;
        let Some(range) = Trailer::file_end_in(&tail, file_bytes) else { return Ok(None) };
        // Bounded by the trailer's check (`MAX_END_BYTES`).
        let bytes = read_at(range.start, (range.end - range.start) as usize)?;
        let FileEnd { indexes, error, .. } = read_file_end(&bytes, range.start);
        if let Some(error) = error {
            return Err(format!("the file's end does not hold: {error}"));
        }
        Ok((!indexes.is_empty()).then_some(Seeker { indexes }))
    }

    /// The runs indexed, in file order.
    pub fn runs(&self) -> impl Iterator<Item = &BlockIndex> {
        self.indexes.iter()
    }

    /// The events of request `request` of `run`, at most `limit` of them, read from the blocks
    /// its index names: each checked to be the block the index says (its length, its run, its
    /// events) before its events are taken. `None` when the run has no index.
    pub fn request(
        &self,
        run: RunId,
        request: u32,
        limit: usize,
        read_at: ReadAt<'_>,
    ) -> Option<Result<Found, String>> {
        let index = self.indexes.iter().find(|index| index.run == run)?;
        let mut found = Found { blocks: index.blocks.len(), ..Found::of(index.run) };
        for block in index.holding_request(request) {
            let events = match read_block(index.run, block, read_at) {
                Ok(events) => events,
                Err(why) => return Some(Err(why)),
            };
            found.blocks_read += 1;
            for event in events.into_iter().filter(|event| event.req.0 == request) {
                found.keep(event, limit);
            }
        }
        Some(Ok(found))
    }
}

/// The events of the block `block` of `run` names, refused unless the file holds that block
/// there: a frame of its length, a block of its run and its count of events.
fn read_block(run: RunId, block: &IndexedBlock, read_at: ReadAt<'_>) -> Result<Vec<Event>, String> {
    let (at, frame) = (block.offset, block.frame_range());
    let frame = read_at(at, (frame.end - frame.start) as usize)?;
    let lying = |what: &str| format!("the block index names a block at byte {at} that {what}");
    let Some((len, payload)) = frame.split_first_chunk::<4>() else {
        return Err(lying("the file does not hold"));
    };
    if u32::from_le_bytes(*len) != block.frame_bytes || payload.len() != block.frame_bytes as usize
    {
        return Err(lying("is not a frame of that length"));
    }
    match decode_block(payload) {
        Ok(ToBrowser::Events { run: found, events })
            if found == run && events.len() == block.contents.events as usize =>
        {
            Ok(events)
        }
        Ok(_) => Err(lying("is of another run or holds another count of events")),
        Err(e) => Err(lying(&format!("does not decode: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{nagle_run, MS};
    use crate::wire::{write_blocks, write_file_end, write_frame, zstd, Hello, HostFacts, Indexer};

    /// A file of two runs whose events take several blocks each.
    fn file() -> (Vec<u8>, Vec<Event>) {
        let events = nagle_run(20_000, 44 * MS);
        assert!(events.len() > 2 * crate::wire::BLOCK_EVENTS, "{} events", events.len());
        let mut file = Vec::new();
        write_frame(&ToBrowser::Hello(Hello::current("0.1.0", HostFacts::default())), &mut file);
        let mut index = Indexer::default();
        for run in [RunId(1), RunId(2)] {
            write_blocks(run, &events, &mut zstd, &mut file, &mut index);
        }
        write_file_end(Vec::new(), &index, &mut file);
        (file, events)
    }

    fn reader(file: &[u8]) -> impl FnMut(u64, usize) -> Result<Vec<u8>, String> + '_ {
        |at, len| {
            let at = usize::try_from(at).map_err(|e| e.to_string())?;
            file.get(at..at + len).map(<[u8]>::to_vec).ok_or_else(|| "past the end".into())
        }
    }

    /// A request is found through the index, its events those the whole file holds for it,
    /// from a block or two of the run's.
    #[test]
    fn a_request_is_read_from_its_blocks_alone() {
        let (file, events) = file();
        let seeker = Seeker::open(file.len() as u64, &mut reader(&file)).unwrap().unwrap();
        assert_eq!(seeker.runs().count(), 2);
        for request in [0, 9_999, 19_999] {
            let found = seeker.request(RunId(2), request, usize::MAX, &mut reader(&file)).unwrap();
            let found = found.unwrap();
            let expected: Vec<Event> =
                events.iter().filter(|e| e.req.0 == request).cloned().collect();
            assert!(!expected.is_empty());
            assert_eq!(found.events, expected, "request {request}");
            assert!(found.blocks_read <= 2 && found.blocks >= 3, "{found:?}");
        }
        assert!(seeker.request(RunId(3), 0, 10, &mut reader(&file)).is_none());
    }

    /// A file cut short has no index; one whose index names a place that holds no such block
    /// is refused, by what does not hold.
    #[test]
    fn a_cut_file_has_no_index_and_a_lying_one_is_refused() {
        let (file, _) = file();
        let cut = &file[..file.len() - 1];
        assert!(Seeker::open(cut.len() as u64, &mut reader(cut)).unwrap().is_none());

        // The first run's first block, said to start a byte before it does.
        let range = Trailer::file_end_in(&file, file.len() as u64).unwrap();
        let mut end = read_file_end(&file[range.start as usize..range.end as usize], range.start);
        end.indexes[0].blocks[0].offset -= 1;
        let mut lying = file[..range.start as usize].to_vec();
        for index in &end.indexes {
            crate::wire::write_payload(&index.encode(), &mut lying);
        }
        let bytes = lying.len() as u64 - range.start;
        write_frame(&ToBrowser::Trailer(Trailer::new(bytes)), &mut lying);
        let seeker = Seeker::open(lying.len() as u64, &mut reader(&lying)).unwrap().unwrap();
        let refused = seeker.request(RunId(1), 0, 10, &mut reader(&lying)).unwrap();
        assert!(refused.unwrap_err().contains("is not a frame of that length"));
    }
}
