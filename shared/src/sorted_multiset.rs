//! A multiset of `u64` that answers order statistics (k-th value, percentiles, max) exactly,
//! for a set that grows while it is asked: a live run's latencies, a class's waits.

use std::cell::{Ref, RefCell};

use crate::stats::nearest_rank;

/// Values kept for exact nearest-rank percentiles.
///
/// An insert is a push onto a pending list; the pending values are sorted and merged into the
/// ordered blocks when the set is next asked a question. So a run that asks once, at its end
/// (the command line), pays one sort, and the probe's collector does not walk the ordered
/// blocks per request on the measured CPU (where those cache misses cost the measured threads
/// about a tenth of their rate, pinned). A page that asks once per frame merges a frame's worth
/// of values at a time.
///
/// The ordered part is block-wise: a merged insert or a removal costs O(log n + BLOCK), a
/// binary search then moving at most 2 * BLOCK values inside one block; a merge of many values
/// at once rebuilds the blocks in O(n). The k-th value costs O(n / BLOCK): a walk over the
/// blocks' lengths (about 400 blocks for 100,000 values). A sorted `Vec` would move O(n) values
/// per insert, sorting on every question costs O(n log n), and a histogram would not give the
/// exact values the CLI prints.
///
/// The merge happens behind `&self` (a question), hence the cells. No borrow of the blocks
/// outlives a method, and values only become pending through `&mut self`, so the cells can
/// never be borrowed twice.
#[derive(Clone, Debug, Default)]
pub struct SortedMultiset {
    ordered: RefCell<Blocks>,
    pending: RefCell<Vec<u64>>,
}

#[derive(Clone, Debug, Default)]
struct Blocks {
    /// Each sorted and not empty; every value of a block is at most every value of the next.
    blocks: Vec<Vec<u64>>,
    /// The last (largest) value of each block, side by side: the search for a value's block
    /// reads this one array instead of one heap block per step.
    lasts: Vec<u64>,
    len: usize,
}

/// A block is split in two when it reaches twice this many values.
const BLOCK: usize = 256;

/// Pending values are merged one by one while they are fewer than the ordered values over
/// this; past it the blocks are rebuilt in one pass (a page asks once a frame, while a file's
/// chunks bring tens of thousands of requests at a time: one by one, those took main-thread
/// tasks of 50-100 ms).
const REBUILD_RATIO: usize = 16;

/// Blocks made by a rebuild hold this many values: room for inserts before they split.
const REBUILT_FILL: usize = BLOCK * 3 / 2;

/// A removal searches the pending values while they are at most this many (a few cache lines).
const PENDING_SEARCHED: usize = 32;

/// The pending list keeps its allocation across merges up to this many values; a larger one
/// (a whole run's latencies, asked for at its end) is given back.
const PENDING_KEPT: usize = 4096;

impl SortedMultiset {
    pub fn new() -> SortedMultiset {
        SortedMultiset::default()
    }

    pub fn len(&self) -> usize {
        self.ordered.borrow().len + self.pending.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn insert(&mut self, value: u64) {
        self.pending.get_mut().push(value);
    }

    /// Removes one `value`; false if there was none. A value still pending among a few (at
    /// most [`PENDING_SEARCHED`]) is taken from them: a request whose time is replaced again
    /// and again (a file that repeats a request's start) inserts and removes its latency each
    /// time, and merging each into the blocks to remove it there moved a block's values twice
    /// an event. Past that many the pending values are merged first: a search of them would
    /// cost O(pending) per removal, and a file that repeats every request's end (each repeat a
    /// removal) would make that quadratic.
    pub fn remove(&mut self, value: u64) -> bool {
        let pending = self.pending.get_mut();
        if pending.len() <= PENDING_SEARCHED {
            if let Some(at) = pending.iter().position(|&v| v == value) {
                pending.swap_remove(at);
                return true;
            }
        }
        self.merge_pending();
        self.ordered.get_mut().remove(value)
    }

    /// Merges the pending values now if they are enough to be merged by rebuilding the blocks
    /// ([`REBUILD_RATIO`]); fewer wait for the next question. For a caller that feeds values in
    /// batches and asks only at the end (a page reading a file): each rebuild is O(n), and the
    /// values held grow by a sixteenth between two, so in all a value is copied about 17 times,
    /// and the first question finds fewer than n / 16 pending. Merging every batch as it comes
    /// would insert each value on its own, which at a million values costs several times more
    /// (0.1-0.8 us each, measured natively, against a rebuild's 6 ns a value held).
    pub fn settle_if_many(&self) {
        let (pending, held) = (self.pending.borrow().len(), self.ordered.borrow().len);
        if pending.saturating_mul(REBUILD_RATIO) >= held {
            self.merge_pending();
        }
    }

    /// Merges every pending value now: for a caller that knows the next question is coming
    /// and wants its cost in a moment of its own choosing.
    pub fn settle(&self) {
        self.merge_pending();
    }

    /// The `k`-th smallest value, from 0.
    pub fn kth(&self, k: usize) -> Option<u64> {
        self.settled().kth(k)
    }

    pub fn max(&self) -> Option<u64> {
        self.settled().blocks.last().and_then(|block| block.last()).copied()
    }

    /// Every value, smallest first.
    pub fn to_vec(&self) -> Vec<u64> {
        self.settled().blocks.concat()
    }

    /// The `k`-th smallest value (from 0) of these values and `more` (sorted) together, without
    /// merging them: a binary search over how many of the first k + 1 come from `more`,
    /// O(log |more| * n / BLOCK).
    pub fn kth_with(&self, more: &[u64], k: usize) -> Option<u64> {
        let ordered = self.settled();
        let (n, m) = (ordered.len, more.len());
        let take = k.checked_add(1).filter(|&take| take <= n + m)?;
        // `j` values from `more` and `take - j` from here are the first `take` when neither side
        // gave a value greater than the other's next one.
        let (mut lo, mut hi) = (take.saturating_sub(n), take.min(m));
        loop {
            let j = lo + (hi - lo) / 2;
            let i = take - j;
            let here = |index: usize| ordered.kth(index).unwrap_or(u64::MAX);
            if i > 0 && j < m && here(i - 1) > more[j] {
                lo = j + 1;
            } else if j > 0 && i < n && more[j - 1] > here(i) {
                hi = j - 1;
            } else {
                let last_here = i.checked_sub(1).and_then(|index| ordered.kth(index));
                let last_more = j.checked_sub(1).map(|index| more[index]);
                return last_here.max(last_more);
            }
        }
    }

    /// Nearest-rank percentile, as [`crate::analysis::percentile`] of the sorted values; 0 when
    /// there are none.
    pub fn percentile(&self, pct: f64) -> u64 {
        self.percentile_with(&[], pct)
    }

    /// Nearest-rank percentile of these values and `more` (sorted) together.
    pub fn percentile_with(&self, more: &[u64], pct: f64) -> u64 {
        nearest_rank(self.len() + more.len(), pct)
            .and_then(|index| self.kth_with(more, index))
            .unwrap_or(0)
    }

    /// The ordered blocks with every pending value merged in.
    fn settled(&self) -> Ref<'_, Blocks> {
        self.merge_pending();
        self.ordered.borrow()
    }

    fn merge_pending(&self) {
        if !self.pending.borrow().is_empty() {
            let mut pending = self.pending.take();
            pending.sort_unstable();
            self.ordered.borrow_mut().merge(&pending);
            if pending.capacity() <= PENDING_KEPT {
                pending.clear();
                *self.pending.borrow_mut() = pending;
            }
        }
    }
}

impl PartialEq for SortedMultiset {
    fn eq(&self, other: &SortedMultiset) -> bool {
        self.len() == other.len() && self.to_vec() == other.to_vec()
    }
}

impl Eq for SortedMultiset {}

impl Blocks {
    /// The block where `value` goes or is: the first whose last value is at least `value` (if
    /// `value` is held, the first block holding it is that one), else the last block.
    fn block_of(&self, value: u64) -> usize {
        let first_not_below = self.lasts.partition_point(|&last| last < value);
        first_not_below.min(self.blocks.len().saturating_sub(1))
    }

    /// Merges `sorted` in: one by one while they are few against the values held, else by
    /// rebuilding the blocks from the two sorted sequences (each old block freed as it is
    /// read, so the rebuild holds little more than the values themselves).
    fn merge(&mut self, sorted: &[u64]) {
        if sorted.len().saturating_mul(REBUILD_RATIO) < self.len {
            // In order, so that consecutive values land in the same block while it is cached.
            sorted.iter().for_each(|&value| self.insert(value));
            return;
        }
        let mut held = std::mem::take(&mut self.blocks).into_iter().flatten().peekable();
        let mut new = sorted.iter().copied().peekable();
        let mut block = Vec::with_capacity(2 * BLOCK);
        loop {
            let next = match (held.peek(), new.peek()) {
                (Some(&a), Some(&b)) if a <= b => held.next(),
                (Some(_), Some(_)) | (None, Some(_)) => new.next(),
                (Some(_), None) => held.next(),
                (None, None) => break,
            };
            block.extend(next);
            if block.len() == REBUILT_FILL {
                self.blocks.push(std::mem::replace(&mut block, Vec::with_capacity(2 * BLOCK)));
            }
        }
        if !block.is_empty() {
            self.blocks.push(block);
        }
        self.lasts = self.blocks.iter().map(|block| block[block.len() - 1]).collect();
        self.len = self.blocks.iter().map(Vec::len).sum();
    }

    fn insert(&mut self, value: u64) {
        if self.blocks.is_empty() {
            self.blocks.push(Vec::with_capacity(2 * BLOCK));
            self.lasts.push(value);
        }
        let index = self.block_of(value);
        let block = &mut self.blocks[index];
        let at = block.partition_point(|&v| v <= value);
        block.insert(at, value);
        self.len += 1;
        if block.len() >= 2 * BLOCK {
            let mut upper = Vec::with_capacity(2 * BLOCK);
            upper.extend_from_slice(&block[BLOCK..]);
            block.truncate(BLOCK);
            let (lower_last, upper_last) = (block[BLOCK - 1], upper[upper.len() - 1]);
            self.blocks.insert(index + 1, upper);
            self.lasts[index] = lower_last;
            self.lasts.insert(index + 1, upper_last);
        } else {
            self.lasts[index] = block[block.len() - 1];
        }
    }

    fn remove(&mut self, value: u64) -> bool {
        if self.blocks.is_empty() {
            return false;
        }
        let index = self.block_of(value);
        let block = &mut self.blocks[index];
        let at = block.partition_point(|&v| v < value);
        if block.get(at) != Some(&value) {
            return false;
        }
        block.remove(at);
        self.len -= 1;
        match block.last() {
            Some(&last) => self.lasts[index] = last,
            None => {
                self.blocks.remove(index);
                self.lasts.remove(index);
            }
        }
        true
    }

    fn kth(&self, mut k: usize) -> Option<u64> {
        for block in &self.blocks {
            match block.get(k) {
                Some(&value) => return Some(value),
                None => k -= block.len(),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::batches::Rng;
    use crate::stats::percentile;

    /// Inserts, removals and questions interleaved at random, against a sorted `Vec`: values
    /// merged one by one and by rebuilding, removed while pending and once ordered.
    #[test]
    fn a_sorted_multiset_answers_as_a_sorted_vec() {
        let mut rng = Rng(7);
        let mut set = SortedMultiset::new();
        let mut reference: Vec<u64> = Vec::new();
        for step in 0..20_000 {
            // Few distinct values: duplicates across block boundaries.
            let value = rng.below(700) as u64 * 3;
            if rng.below(4) == 0 {
                let held = reference.iter().position(|&v| v == value);
                assert_eq!(set.remove(value), held.is_some());
                if let Some(at) = held {
                    reference.remove(at);
                }
            } else {
                set.insert(value);
                let at = reference.partition_point(|&v| v <= value);
                reference.insert(at, value);
            }
            assert_eq!(set.len(), reference.len());
            // Questions at irregular intervals: some merges are of a few values, some of many.
            if rng.below(40) == 0 || step % 997 == 0 {
                assert_eq!(set.to_vec(), reference);
                assert_eq!(set.max(), reference.last().copied());
                let ordered = set.ordered.borrow();
                let lasts: Vec<u64> =
                    ordered.blocks.iter().filter_map(|b| b.last().copied()).collect();
                assert_eq!(ordered.lasts, lasts, "the block index follows the blocks");
                assert!(ordered.blocks.iter().all(|b| !b.is_empty() && b.len() < 2 * BLOCK));
                drop(ordered);
                for k in (0..reference.len() + 2).step_by(13) {
                    assert_eq!(set.kth(k), reference.get(k).copied(), "k {k}");
                }
                let mut more: Vec<u64> =
                    (0..rng.below(9)).map(|_| rng.below(2200) as u64).collect();
                more.sort_unstable();
                let mut merged = [reference.as_slice(), more.as_slice()].concat();
                merged.sort_unstable();
                for k in (0..merged.len() + 2).step_by(7) {
                    assert_eq!(set.kth_with(&more, k), merged.get(k).copied(), "k {k} {more:?}");
                }
                for pct in [0.0, 1.0, 50.0, 99.0, 99.9, 100.0] {
                    assert_eq!(set.percentile_with(&more, pct), percentile(&merged, pct));
                }
            }
        }
        assert!(set.ordered.borrow().blocks.len() > 3, "the blocks were split");
        assert!(SortedMultiset::new().percentile_with(&[], 50.0) == 0);
        assert_eq!(SortedMultiset::new().kth_with(&[4, 9], 1), Some(9));
        assert!(!SortedMultiset::new().remove(3));
    }

    /// Batches settled as they come are merged only when a rebuild is due: the first question
    /// then finds fewer than a sixteenth of the values pending, and the answers are unchanged.
    #[test]
    fn batches_settle_by_rebuilding_only() {
        let mut rng = Rng(5);
        let mut set = SortedMultiset::new();
        let mut reference = Vec::new();
        let mut rebuilds = 0;
        for _ in 0..400 {
            for _ in 0..300 {
                let value = rng.below(1 << 20) as u64;
                set.insert(value);
                reference.push(value);
            }
            let pending_before = set.pending.borrow().len();
            set.settle_if_many();
            let (pending, held) = (set.pending.borrow().len(), set.ordered.borrow().len);
            if pending == 0 {
                rebuilds += 1;
                assert!(
                    pending_before * REBUILD_RATIO >= held - pending_before,
                    "a rebuild's worth"
                );
            } else {
                assert_eq!(pending, pending_before, "fewer wait for the next question");
                assert!(pending * REBUILD_RATIO < held);
            }
        }
        assert!(set.pending.borrow().len() * REBUILD_RATIO < set.ordered.borrow().len);
        // 120,000 values in batches of 300: a rebuild each time the set grew by a sixteenth.
        assert!((30..=90).contains(&rebuilds), "{rebuilds} rebuilds");
        reference.sort_unstable();
        assert_eq!(set.to_vec(), reference);
        assert_eq!(set.percentile(99.0), percentile(&reference, 99.0));
    }

    /// Values asked for once, at the end, are ordered then, in one pass (full blocks); a few
    /// more are merged into those blocks one by one.
    #[test]
    fn values_asked_for_once_are_ordered_once() {
        let mut rng = Rng(11);
        let mut set = SortedMultiset::new();
        let values: Vec<u64> = (0..100_000).map(|_| rng.below(1 << 30) as u64).collect();
        values.iter().for_each(|&v| set.insert(v));
        assert_eq!(set.ordered.borrow().len, 0, "nothing ordered before a question");
        let mut sorted = values.clone();
        sorted.sort_unstable();
        assert_eq!(set.percentile(50.0), percentile(&sorted, 50.0));
        assert_eq!(set.to_vec(), sorted);
        assert!(set.pending.borrow().is_empty());
        let blocks = 100_000_usize.div_ceil(REBUILT_FILL);
        assert_eq!(set.ordered.borrow().blocks.len(), blocks, "rebuilt in one pass");
        assert!(set.pending.borrow().capacity() <= PENDING_KEPT, "a whole run's list given back");
        for v in [0, 1 << 29, u64::MAX] {
            set.insert(v);
            sorted.insert(sorted.partition_point(|&s| s <= v), v);
        }
        assert_eq!(set.max(), Some(u64::MAX));
        assert_eq!(set.to_vec(), sorted);
        // As many again as are held: the two sequences are merged into new blocks.
        for _ in 0..sorted.len() {
            let v = rng.below(1 << 30) as u64;
            set.insert(v);
            sorted.insert(sorted.partition_point(|&s| s <= v), v);
        }
        assert_eq!(set.to_vec(), sorted);
        assert_eq!(set.percentile(99.0), percentile(&sorted, 99.0));
        assert!(set.ordered.borrow().blocks.iter().all(|b| b.len() <= REBUILT_FILL));
        // A value inserted and removed again among a few pending never reaches the blocks...
        let held = set.ordered.borrow().len;
        set.insert(7);
        assert!(set.remove(7));
        assert!(set.pending.borrow().is_empty());
        assert_eq!(set.ordered.borrow().len, held, "the blocks untouched");
        // ...among many, a removal merges what is pending and removes from the blocks: no scan
        // of a list that may hold a whole run.
        for v in 0..=PENDING_SEARCHED as u64 {
            set.insert(v);
            sorted.insert(sorted.partition_point(|&s| s <= v), v);
        }
        assert!(set.remove(0));
        sorted.remove(0);
        assert!(set.pending.borrow().is_empty(), "merged before the removal");
        assert_eq!(set.ordered.borrow().len, held + PENDING_SEARCHED);
        assert_eq!(set.to_vec(), sorted);
    }
}
