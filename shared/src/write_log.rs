//! Where each write of one side of a connection ended in its stream, and when: what a read's
//! hold is measured from ([`crate::analysis::RunAnalysis::held_ns`]).
//!
//! A run of a million requests writes millions of times, and a page that keeps the whole run
//! keeps every write. In one `Vec` each doubling copied tens of megabytes into memory the page
//! had never touched (a 60-90 ms task in the browser, and twice the log's size at that
//! moment); in chunks the log grows a chunk at a time, and moves at most a chunk's worth.

/// Entries per chunk: 256 KiB, small enough that growing one is never a pause.
const CHUNK: usize = 16 * 1024;

/// `(stream_end, done_ns)` of every write, in stream order (writes only append).
#[derive(Clone, Debug, Default)]
pub struct WriteLog {
    /// In stream order; only the last one grows, and only the first is ever partly forgotten.
    chunks: Vec<Vec<(u64, u64)>>,
}

impl WriteLog {
    pub fn push(&mut self, stream_end: u64, done_ns: u64) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push((stream_end, done_ns)),
            // A chunk grows as a Vec does up to its size: a connection of a few writes (a run
            // may open one per request) holds a few entries, not a whole chunk.
            _ => self.chunks.push(vec![(stream_end, done_ns)]),
        }
    }

    /// When the first write whose end lies at or past `stream_end` was done: the write that
    /// carried the byte just before `stream_end`. `None` while no write has reached it.
    pub fn carrier_done_ns(&self, stream_end: u64) -> Option<u64> {
        // The chunks are in order: the carrier is in the first whose last write reaches it.
        let at = self
            .chunks
            .partition_point(|chunk| chunk.last().is_some_and(|&(end, _)| end < stream_end));
        let chunk = self.chunks.get(at)?;
        let index = chunk.partition_point(|&(end, _)| end < stream_end);
        chunk.get(index).map(|&(_, done_ns)| done_ns)
    }

    /// Forgets the writes done before `oldest_ns` (none is needed again: see
    /// [`crate::analysis::RunAnalysis::retire`]). Writes are done in time order too.
    pub fn forget_before(&mut self, oldest_ns: u64) {
        let whole = self
            .chunks
            .partition_point(|chunk| chunk.last().is_some_and(|&(_, done_ns)| done_ns < oldest_ns));
        self.chunks.drain(..whole);
        if let Some(first) = self.chunks.first_mut() {
            let stale = first.partition_point(|&(_, done_ns)| done_ns < oldest_ns);
            first.drain(..stale);
            if first.is_empty() && self.chunks.len() > 1 {
                self.chunks.remove(0);
            }
        }
    }

    /// Writes held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
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
}
