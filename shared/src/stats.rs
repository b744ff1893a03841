//! Order statistics over nanosecond values: nearest-rank percentiles, the unit the summaries
//! print, and the buckets a tally keeps past its exact values. A leaf: it depends on nothing
//! else of the crate.

/// Nearest-rank percentile of sorted values; 0 when there are none.
pub fn percentile(sorted: &[u64], pct: f64) -> u64 {
    nearest_rank(sorted.len(), pct).map_or(0, |index| sorted[index])
}

/// The index (from 0) of the nearest-rank `pct` percentile among `len` sorted values.
pub(crate) fn nearest_rank(len: usize, pct: f64) -> Option<usize> {
    let rank = ((pct / 100.0) * len as f64).ceil() as usize;
    (len > 0).then(|| rank.clamp(1, len) - 1)
}

pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Counts of values by bucket: below 128 one bucket per value, above it 64 buckets per power
/// of two, so a bucket is at most 1/64 of its values wide (about 3,800 buckets, 30 KB, for any
/// u64). A value is read back as its bucket's middle. What a tally keeps in place of every
/// value once there are too many to keep (a watch that runs for days).
#[derive(Clone, Debug)]
pub(crate) struct Buckets {
    counts: Vec<u64>,
    count: u64,
    max: u64,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets { counts: vec![0; Buckets::index(u64::MAX) + 1], count: 0, max: 0 }
    }
}

impl Buckets {
    fn index(value: u64) -> usize {
        if value < 128 {
            return value as usize;
        }
        let power = 63 - value.leading_zeros() as usize; // 7 and up
        let within = ((value >> (power - 6)) & 63) as usize;
        128 + (power - 7) * 64 + within
    }

    /// The middle of bucket `index`'s values.
    fn middle(index: usize) -> u64 {
        if index < 128 {
            return index as u64;
        }
        let (power, within) = ((index - 128) / 64 + 7, ((index - 128) % 64) as u64);
        let low = (64 + within) << (power - 6);
        let width = 1u64 << (power - 6);
        low + width / 2
    }

    pub(crate) fn add(&mut self, value: u64) {
        self.counts[Buckets::index(value)] += 1;
        self.count += 1;
        self.max = self.max.max(value);
    }

    /// Takes back a value added; false if its bucket is empty. The largest value stays as it
    /// was (a bucket does not know which of its values went).
    pub(crate) fn remove(&mut self, value: u64) -> bool {
        let slot = &mut self.counts[Buckets::index(value)];
        if *slot == 0 {
            return false;
        }
        *slot -= 1;
        self.count -= 1;
        true
    }

    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    /// The nearest-rank percentile (as [`percentile`]), to its bucket.
    pub(crate) fn percentile(&self, pct: f64) -> u64 {
        self.percentile_with(&[], pct)
    }

    /// The nearest-rank percentile of these values and `more` (sorted) together, to its bucket.
    pub(crate) fn percentile_with(&self, more: &[u64], pct: f64) -> u64 {
        let total = self.count + more.len() as u64;
        let max = self.max.max(more.last().copied().unwrap_or(0));
        let Some(rank) = nearest_rank(usize::try_from(total).unwrap_or(usize::MAX), pct) else {
            return 0;
        };
        let (mut seen, mut next) = (0, 0);
        for (index, &n) in self.counts.iter().enumerate() {
            seen += n as usize;
            while next < more.len() && Buckets::index(more[next]) == index {
                seen += 1;
                next += 1;
            }
            if seen > rank {
                return Buckets::middle(index).min(max);
            }
        }
        max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<u64> = (1..=200).collect();
        assert_eq!(percentile(&values, 50.0), 100);
        assert_eq!(percentile(&values, 99.0), 198);
        assert_eq!(percentile(&values, 100.0), 200);
        assert_eq!(percentile(&[7], 50.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn buckets_read_percentiles_back_within_a_sixty_fourth() {
        let mut buckets = Buckets::default();
        let values: Vec<u64> = (1..=100_000u64).map(|i| i * 7_919).collect();
        values.iter().for_each(|&v| buckets.add(v));
        for pct in [1.0, 50.0, 99.0, 100.0] {
            let exact = percentile(&values, pct);
            let read = buckets.percentile(pct);
            let error = (read as f64 - exact as f64).abs() / exact as f64;
            assert!(error <= 1.0 / 64.0, "p{pct}: {read} against {exact}");
        }
        assert_eq!(buckets.max(), 100_000 * 7_919);
        // Every u64 has a bucket, and small values their own.
        assert_eq!(Buckets::middle(Buckets::index(5)), 5);
        assert!(Buckets::index(u64::MAX) < buckets.counts.len());
    }

    #[test]
    fn buckets_with_more_values_and_removals_read_as_the_values_together() {
        // Below 128 a bucket is one value: read back exactly.
        let mut buckets = Buckets::default();
        (1..=100u64).for_each(|v| buckets.add(v));
        let more: Vec<u64> = (101..=127).collect();
        let all: Vec<u64> = (1..=127).collect();
        for pct in [1.0, 25.0, 50.0, 99.0, 100.0] {
            assert_eq!(buckets.percentile_with(&more, pct), percentile(&all, pct), "p{pct}");
        }
        assert!(buckets.remove(50) && !buckets.remove(100_000));
        assert_eq!(buckets.count(), 99);
        assert_eq!(buckets.percentile(50.0), 51, "the 50th of 1..=100 without 50");
        assert_eq!(Buckets::default().percentile_with(&[], 50.0), 0);
    }
}
