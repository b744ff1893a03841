//! Level of detail: when many marks fall into one pixel, keep the worst of them, so a stall can
//! never disappear at any zoom.
//!
//! As in Perfetto's mipmaps, each mark has a key (a stall outranks any other call, then the
//! longer wins) and a segment tree answers "the mark with the greatest key among these" for any
//! index range in O(log n). The view asks about two buckets per pixel: per bucket, the greatest
//! mark that starts in it. Building the tree is O(n) and it holds one index per node.

use std::ops::Range;

// The ranking is shared with the probe, which ranks a run's requests the same way for the
// overview it writes at the end of a file.
pub use ackscope_shared::overview::{key, Priority};

/// For any range of marks, the one with the greatest key.
#[derive(Clone, Debug, Default)]
pub struct MaxTree {
    /// Leaves start here: leaf `i` is node `size + i`.
    size: usize,
    keys: Vec<u64>,
    /// Per node, the index of the greatest key below it (`u32::MAX` for an empty leaf).
    nodes: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl MaxTree {
    pub fn new(keys: Vec<u64>) -> MaxTree {
        let size = keys.len().next_power_of_two().max(1);
        let mut nodes = vec![NONE; 2 * size];
        for (index, slot) in nodes[size..size + keys.len()].iter_mut().enumerate() {
            *slot = index as u32;
        }
        let mut tree = MaxTree { size, keys, nodes };
        for node in (1..size).rev() {
            tree.nodes[node] = tree.better(tree.nodes[2 * node], tree.nodes[2 * node + 1]);
        }
        tree
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn key_of(&self, index: usize) -> u64 {
        self.keys[index]
    }

    fn better(&self, a: u32, b: u32) -> u32 {
        match (a, b) {
            (NONE, other) | (other, NONE) => other,
            // Ties go to the earlier mark, so the answer does not depend on the tree's shape.
            (a, b) => {
                let (ka, kb) = (self.keys[a as usize], self.keys[b as usize]);
                if kb > ka || kb == ka && b < a {
                    b
                } else {
                    a
                }
            }
        }
    }

    /// The index of the greatest key in `range`, or `None` if the range is empty.
    pub fn argmax(&self, range: Range<usize>) -> Option<usize> {
        let (mut lo, mut hi) = (range.start + self.size, range.end.min(self.len()) + self.size);
        let mut best = NONE;
        while lo < hi {
            if lo & 1 == 1 {
                best = self.better(best, self.nodes[lo]);
                lo += 1;
            }
            if hi & 1 == 1 {
                hi -= 1;
                best = self.better(best, self.nodes[hi]);
            }
            lo /= 2;
            hi /= 2;
        }
        (best != NONE).then_some(best as usize)
    }
}

/// The marks to draw of one lane in the window `from_ns .. to_ns` cut into `buckets` equal
/// buckets: per bucket, the greatest mark that starts in it (`starts` sorted, one per mark of
/// `tree`). The mark that began before the window and reaches into it comes first, so that a
/// long call is never cut off by the window's edge (a lane is one thread: its calls do not
/// overlap, so at most one can).
pub fn pick(
    starts: &[u64],
    ends: &[u64],
    tree: &MaxTree,
    from_ns: u64,
    to_ns: u64,
    buckets: usize,
) -> Vec<usize> {
    let mut picked = Vec::with_capacity(buckets + 1);
    let first = starts.partition_point(|&start| start < from_ns);
    if let Some(before) = first.checked_sub(1) {
        if ends[before] >= from_ns {
            picked.push(before);
        }
    }
    let width = to_ns.saturating_sub(from_ns).max(1) as f64;
    let mut lo = first;
    for bucket in 0..buckets.max(1) {
        let edge = from_ns + (width * (bucket + 1) as f64 / buckets.max(1) as f64) as u64;
        let hi = lo + starts[lo..].partition_point(|&start| start < edge);
        if bucket + 1 == buckets.max(1) {
            // The last bucket includes the window's end itself.
            let hi = lo + starts[lo..].partition_point(|&start| start <= to_ns);
            picked.extend(tree.argmax(lo..hi));
            break;
        }
        picked.extend(tree.argmax(lo..hi));
        lo = hi;
    }
    picked
}

#[cfg(test)]
mod tests {
    use ackscope_shared::synthetic::Lcg;

    use super::*;

    #[test]
    fn argmax_is_the_greatest_key_of_any_range() {
        let mut random = Lcg(7);
        for len in [0usize, 1, 2, 3, 5, 8, 13, 100] {
            let keys: Vec<u64> = (0..len).map(|_| random.next(50)).collect();
            let tree = MaxTree::new(keys.clone());
            for start in 0..=len {
                for end in start..=len {
                    let expected = (start..end).max_by_key(|&i| (keys[i], std::cmp::Reverse(i)));
                    assert_eq!(tree.argmax(start..end), expected, "{keys:?} {start}..{end}");
                }
            }
        }
    }

    /// The property the view relies on: in every pixel, the greatest mark that starts there is
    /// drawn, at any zoom, so the longest interval of a pixel (and any stall) never disappears.
    #[test]
    fn the_greatest_mark_of_every_bucket_is_drawn_at_any_zoom() {
        let mut random = Lcg(42);
        for _ in 0..50 {
            let count = 1 + random.next(3000) as usize;
            let (mut starts, mut ends, mut keys) = (Vec::new(), Vec::new(), Vec::new());
            let mut at = 0;
            for _ in 0..count {
                at += random.next(5_000);
                let duration = random.next(20_000);
                let priority =
                    if random.next(100) == 0 { Priority::Stalled } else { Priority::Call };
                starts.push(at);
                ends.push(at + duration);
                keys.push(key(priority, duration));
                at += duration;
            }
            let tree = MaxTree::new(keys.clone());
            let end = at.max(1);
            let from = random.next(end);
            let to = from + 1 + random.next(end - from);
            let buckets = 1 + random.next(400) as usize;
            let picked = pick(&starts, &ends, &tree, from, to, buckets);
            assert!(picked.len() <= buckets + 1, "at most one mark per bucket, plus the edge");
            let width = (to - from) as f64;
            for bucket in 0..buckets {
                let lo = from + (width * bucket as f64 / buckets as f64) as u64;
                let hi = from + (width * (bucket + 1) as f64 / buckets as f64) as u64;
                let last = bucket + 1 == buckets;
                let inside =
                    |i: &usize| starts[*i] >= lo && (starts[*i] < hi || last && starts[*i] <= to);
                let best = (0..count).filter(inside).map(|i| keys[i]).max();
                if let Some(best) = best {
                    assert!(
                        picked.iter().any(|&i| inside(&i) && keys[i] == best),
                        "bucket {bucket} of {buckets} lost its greatest mark"
                    );
                }
            }
            // The call running across the window's left edge is drawn too.
            if let Some(before) = starts.partition_point(|&s| s < from).checked_sub(1) {
                if ends[before] >= from {
                    assert!(picked.contains(&before));
                }
            }
        }
    }
}
