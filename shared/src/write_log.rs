//! Where each write of one side of a connection ended in its stream, and when: what a read's
//! hold is measured from ([`crate::analysis::RunAnalysis::held_ns`]).
//!
//! A run of a million requests writes millions of times, and a page that keeps the whole run
//! keeps every write. In one `Vec` each doubling copied tens of megabytes into memory the page
//! had never touched (a 60-90 ms task in the browser, and twice the log's size at that
//! moment); in chunks the log grows a chunk at a time, and moves at most a chunk's worth. Each
//! write is kept as two 32-bit offsets from its chunk's first write: 8 bytes, not 16.

use std::cell::Cell;

/// Entries per chunk: 128 KiB, small enough that growing one is never a pause.
const CHUNK: usize = 16 * 1024;

/// `(stream_end, done_ns)` of every write, in stream order (writes only append).
#[derive(Clone, Debug, Default)]
pub struct WriteLog {
    /// In stream order; only the last one grows, and only the first is ever partly forgotten.
    chunks: Vec<Chunk>,
    /// Where the last carrier was found (chunk, entry): reads are looked up in stream order, so
    /// the next read's carrier is almost always that write or one of the few after it. A
    /// search of a page's log of millions of writes missed the caches at each step, a twelfth
    /// of loading a file.
    last_found: Cell<(usize, usize)>,
}

/// Writes as offsets from the chunk's first: 8 bytes each instead of 16. A write more than 4 GiB
/// or 4.29 s past the chunk's first starts a chunk of its own.
#[derive(Clone, Debug)]
struct Chunk {
    base_end: u64,
    base_done_ns: u64,
    /// `(stream_end - base_end, done_ns - base_done_ns)`.
    entries: Vec<(u32, u32)>,
}

impl Chunk {
    fn end(&self, index: usize) -> u64 {
        self.base_end + u64::from(self.entries[index].0)
    }

    fn done_ns(&self, index: usize) -> u64 {
        self.base_done_ns + u64::from(self.entries[index].1)
    }

    /// The entry of a write relative to this chunk, if it fits in one.
    fn entry(&self, stream_end: u64, done_ns: u64) -> Option<(u32, u32)> {
        let end = u32::try_from(stream_end.checked_sub(self.base_end)?).ok()?;
        let done = u32::try_from(done_ns.checked_sub(self.base_done_ns)?).ok()?;
        Some((end, done))
    }
}

/// An emptied log is kept for another connection while its one chunk holds at most this many
/// entries' room: a connection of a few writes' (one a request), not a long one's.
const SPARE_ENTRIES: usize = 64;

/// Writes after the last carrier found that are looked at before the log is searched.
const LOOK_AHEAD: usize = 4;

impl WriteLog {
    pub fn push(&mut self, stream_end: u64, done_ns: u64) {
        if let Some(chunk) = self.chunks.last_mut().filter(|chunk| chunk.entries.len() < CHUNK) {
            if chunk.entries.is_empty() {
                // Emptied (every write forgotten, or the log reused): its first write is its
                // base again.
                (chunk.base_end, chunk.base_done_ns) = (stream_end, done_ns);
            }
            if let Some(entry) = chunk.entry(stream_end, done_ns) {
                chunk.entries.push(entry);
                return;
            }
        }
        // A chunk grows as a Vec does up to its size: a connection of a few writes (a run may
        // open one per request) holds a few entries, not a whole chunk.
        self.chunks.push(Chunk {
            base_end: stream_end,
            base_done_ns: done_ns,
            entries: vec![(0, 0)],
        });
    }

    /// When the first write whose end lies at or past `stream_end` was done: the write that
    /// carried the byte just before `stream_end`. `None` while no write has reached it.
    pub fn carrier_done_ns(&self, stream_end: u64) -> Option<u64> {
        if let Some((at, index)) = self.carrier_near_last_found(stream_end) {
            self.last_found.set((at, index));
            return Some(self.chunks[at].done_ns(index));
        }
        // The chunks are in order: the carrier is in the first whose last write reaches it.
        let at = self.chunks.partition_point(|chunk| {
            chunk.entries.len().checked_sub(1).is_some_and(|last| chunk.end(last) < stream_end)
        });
        let chunk = self.chunks.get(at)?;
        let index =
            chunk.entries.partition_point(|&(end, _)| chunk.base_end + u64::from(end) < stream_end);
        if index < chunk.entries.len() {
            self.last_found.set((at, index));
        }
        (index < chunk.entries.len()).then(|| chunk.done_ns(index))
    }

    /// The carrier's place when it is the write found last or one of the [`LOOK_AHEAD`] after
    /// it in its chunk; `None` when it may be elsewhere.
    fn carrier_near_last_found(&self, stream_end: u64) -> Option<(usize, usize)> {
        let (at, from) = self.last_found.get();
        let chunk = self.chunks.get(at).filter(|chunk| from < chunk.entries.len())?;
        // The write before the first looked at must end before `stream_end`.
        let before_ends = match from.checked_sub(1) {
            Some(before) => chunk.end(before),
            None => {
                let previous = at.checked_sub(1).and_then(|at| self.chunks.get(at));
                previous.and_then(|p| p.entries.len().checked_sub(1).map(|last| p.end(last)))?
            }
        };
        if before_ends >= stream_end {
            return None;
        }
        let until = chunk.entries.len().min(from + LOOK_AHEAD);
        (from..until).find(|&index| chunk.end(index) >= stream_end).map(|index| (at, index))
    }

    /// Forgets the writes done before `oldest_ns` (none is needed again: see
    /// [`crate::analysis::RunAnalysis::retire`]). Writes are done in time order too.
    pub fn forget_before(&mut self, oldest_ns: u64) {
        let whole = self.chunks.partition_point(|chunk| {
            chunk.entries.len().checked_sub(1).is_some_and(|last| chunk.done_ns(last) < oldest_ns)
        });
        self.chunks.drain(..whole);
        self.last_found.set((0, 0));
        if let Some(first) = self.chunks.first_mut() {
            let base = first.base_done_ns;
            let stale =
                first.entries.partition_point(|&(_, done)| base + u64::from(done) < oldest_ns);
            first.entries.drain(..stale);
            if first.entries.is_empty() && self.chunks.len() > 1 {
                self.chunks.remove(0);
            }
        }
    }

    /// This log with no writes, keeping its allocation for another connection's: `None` if it
    /// holds more than [`SPARE_ENTRIES`] entries' room, which is not worth keeping.
    pub fn emptied(mut self) -> Option<WriteLog> {
        if self.chunks.len() > 1
            || self.chunks.first().is_some_and(|chunk| chunk.entries.capacity() > SPARE_ENTRIES)
        {
            return None;
        }
        if let Some(chunk) = self.chunks.first_mut() {
            chunk.entries.clear();
        }
        self.last_found.set((0, 0));
        Some(self)
    }

    /// Writes held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.chunks.iter().map(|chunk| chunk.entries.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes of 1..=n bytes each, the k-th done at 10 * k ns.
    fn log_of(n: u64) -> (WriteLog, Vec<(u64, u64)>) {
        let mut log = WriteLog::default();
        let mut all = Vec::new();
        let mut end = 0;
        for k in 1..=n {
            end += k % 7 + 1;
            log.push(end, 10 * k);
            all.push((end, 10 * k));
        }
        (log, all)
    }

    /// The answer of a single sorted list, the log's own before it was chunked.
    fn carrier_in(all: &[(u64, u64)], stream_end: u64) -> Option<u64> {
        let index = all.partition_point(|&(end, _)| end < stream_end);
        all.get(index).map(|&(_, done)| done)
    }

    /// Every byte of a log of two chunks, asked in stream order (where the last carrier found
    /// is the place to look), backwards, and in a scattered order: the answers are the sorted
    /// list's whatever was asked before.
    #[test]
    fn the_carrier_of_every_byte_in_any_order_is_the_sorted_lists() {
        for extra in [1, 3, LOOK_AHEAD as u64 + 1, 100] {
            let (log, all) = log_of(CHUNK as u64 + extra);
            assert_eq!(log.chunks.len(), 2);
            let bytes: Vec<u64> = (0..=all.last().unwrap().0 + 2).collect();
            let scattered = bytes.iter().map(|&b| b.wrapping_mul(7919) % bytes.len() as u64);
            let orders: [Vec<u64>; 3] =
                [bytes.clone(), bytes.iter().rev().copied().collect(), scattered.collect()];
            for order in orders {
                for &stream_end in &order {
                    assert_eq!(
                        log.carrier_done_ns(stream_end),
                        carrier_in(&all, stream_end),
                        "byte {stream_end} of {extra} writes past a chunk"
                    );
                }
            }
        }
    }

    /// Forgetting and emptying move or remove the writes the last carrier was found among: the
    /// next answers are still the sorted list's, and nothing reads past the log.
    #[test]
    fn the_last_carrier_found_does_not_outlive_forgetting_or_emptying() {
        let (mut log, all) = log_of(2 * CHUNK as u64 + 10);
        let late = all[2 * CHUNK + 5].0;
        assert_eq!(log.carrier_done_ns(late), carrier_in(&all, late));
        let oldest = all[CHUNK + 100].1;
        log.forget_before(oldest);
        let kept: Vec<_> = all.iter().copied().filter(|&(_, done)| done >= oldest).collect();
        for &(end, _) in kept.iter().rev().take(50).chain(kept.iter().take(50)) {
            assert_eq!(log.carrier_done_ns(end), carrier_in(&kept, end), "byte {end}");
        }

        let (mut small, writes) = log_of(20);
        assert_eq!(small.carrier_done_ns(writes[15].0), Some(writes[15].1));
        let mut emptied = small.clone().emptied().expect("a small log is kept");
        assert_eq!(emptied.carrier_done_ns(1), None);
        emptied.push(3, 7);
        assert_eq!(emptied.carrier_done_ns(2), Some(7));
        small.push(writes[19].0 + 1, 999);
        assert_eq!(small.carrier_done_ns(writes[19].0 + 1), Some(999));
    }

    #[test]
    fn the_carrier_of_any_byte_is_found_across_chunks() {
        let (log, all) = log_of(3 * CHUNK as u64 + 5);
        assert_eq!(log.chunks.len(), 4);
        assert_eq!(log.len(), all.len());
        let last = all.last().unwrap().0;
        // Every chunk's edges, and past the last write (not written yet: no carrier).
        let edges = (0..4).flat_map(|c| [c * CHUNK, c * CHUNK + 1]).flat_map(|i| {
            let end = all.get(i).map_or(last, |&(end, _)| end);
            [end.saturating_sub(1), end, end + 1]
        });
        for stream_end in edges.chain([0, 1, last, last + 1, last + 100]) {
            assert_eq!(
                log.carrier_done_ns(stream_end),
                carrier_in(&all, stream_end),
                "{stream_end}"
            );
        }
        assert_eq!(log.carrier_done_ns(last + 1), None);
    }

    #[test]
    fn writes_far_apart_in_bytes_or_time_start_chunks_and_are_found() {
        // 5 GiB in one write, then 10 s of silence, then small writes: each jump past what an
        // offset of 32 bits holds begins a chunk.
        let writes = [
            (100, 1_000),
            (5 << 30, 2_000),
            (5 << 30 | 7, 10_000_002_000),
            (6 << 30, 10_000_002_100),
        ];
        let mut log = WriteLog::default();
        for (end, done) in writes {
            log.push(end, done);
        }
        assert_eq!(log.chunks.len(), 3);
        for stream_end in
            [0, 100, 101, 5 << 30, (5 << 30) + 1, 5 << 30 | 7, (5 << 30 | 7) + 1, 6 << 30]
        {
            assert_eq!(
                log.carrier_done_ns(stream_end),
                carrier_in(&writes, stream_end),
                "{stream_end}"
            );
        }
        assert_eq!(log.carrier_done_ns((6 << 30) + 1), None);
    }

    #[test]
    fn forgetting_keeps_every_later_write() {
        let (mut log, all) = log_of(2 * CHUNK as u64 + 10);
        // Inside the second chunk: the first chunk goes whole, the second in part.
        let oldest = all[CHUNK + 100].1;
        log.forget_before(oldest);
        let kept: Vec<_> = all.iter().copied().filter(|&(_, done)| done >= oldest).collect();
        assert_eq!(log.len(), kept.len());
        for &(end, done) in &kept {
            assert_eq!(log.carrier_done_ns(end), Some(done));
        }
        // Writes go on after a forget.
        log.push(kept.last().unwrap().0 + 5, u64::MAX);
        assert_eq!(log.carrier_done_ns(kept.last().unwrap().0 + 1), Some(u64::MAX));
        log.forget_before(u64::MAX);
        assert_eq!(log.len(), 1);
        log.forget_before(u64::MAX - 1);
        assert_eq!(log.len(), 1);
    }

    /// A short connection's log, emptied, serves the next connection as a new log would, in
    /// the allocation it had; a long connection's is not kept.
    #[test]
    fn an_emptied_log_is_a_new_one_in_the_old_allocation() {
        let (short, _) = log_of(20);
        let mut reused = short.emptied().expect("a few writes' log is kept");
        assert_eq!(reused.len(), 0);
        assert_eq!(reused.carrier_done_ns(1), None);
        let room = reused.chunks[0].entries.capacity();
        // The next connection's stream starts again at 0, earlier than the old writes ended.
        let (mut new, _) = log_of(0);
        for (end, done) in [(4, 7), (2052, 90), (2056, 5_000_000_000)] {
            reused.push(end, done);
            new.push(end, done);
        }
        for end in 0..2060 {
            assert_eq!(reused.carrier_done_ns(end), new.carrier_done_ns(end), "byte {end}");
        }
        assert_eq!(reused.chunks[0].entries.capacity(), room, "no new allocation");
        assert_eq!(reused.chunks.len(), new.chunks.len());
        assert!(log_of(SPARE_ENTRIES as u64 + 1).0.emptied().is_none());
        assert!(log_of(CHUNK as u64 + 1).0.emptied().is_none());
        assert!(WriteLog::default().emptied().is_some());
    }
}
