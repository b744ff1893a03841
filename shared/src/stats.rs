//! Order statistics over nanosecond values: nearest-rank percentiles and the unit the summaries
//! print. A leaf: it depends on nothing else of the crate.

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
}
