//! The overview of a run: its requests in order, cut into columns, each column keeping its worst
//! request, so a stall can never disappear from the whole-run strip at any size.
//!
//! One rule for both places that make it: the probe builds it while it records (and writes it
//! at the end of a session file, so a viewer can paint a million requests' overview before it
//! has decoded them), and the web app builds it from the rows it shows. Both rank requests with
//! [`key`], so the two pictures of one run agree.
//!
//! Memory is bounded whatever the run's length: at most [`MAX_COLUMNS`] columns are kept; when
//! they are full, neighbours merge in pairs and each column stands for twice as many requests
//! (a merge keeps the worse of the two, so the worst request of any range of columns survives).

use serde::{Deserialize, Serialize};

use crate::analysis::RequestView;
use crate::stall::Stall;

/// Columns kept at most: more than any strip draws (the web app's is 720 pixels wide), few
/// enough that the overview of any run is a message of some tens of kilobytes.
pub const MAX_COLUMNS: usize = 4096;

/// What kind of wait a request (or a mark) holds, in the order it wins a pixel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    #[default]
    Call = 0,
    /// A call that waited for something other than held bytes (think time, a full buffer).
    Waited = 1,
    /// A read the kernel held.
    Stalled = 2,
}

impl Priority {
    /// How a named wait ranks.
    pub fn of(stall: &Stall) -> Priority {
        if stall.is_held_read() {
            Priority::Stalled
        } else {
            Priority::Waited
        }
    }

    /// The worst of a request's waits.
    pub fn worst_of<'a>(stalls: impl IntoIterator<Item = &'a Stall>) -> Priority {
        stalls.into_iter().map(Priority::of).max().unwrap_or(Priority::Call)
    }
}

const DURATION_BITS: u32 = 56;

/// How much a mark matters when it has to share a pixel: its class first, then its duration.
pub fn key(priority: Priority, duration_ns: u64) -> u64 {
    (priority as u64) << DURATION_BITS | duration_ns.min((1 << DURATION_BITS) - 1)
}

/// The duration part of a [`key`].
pub fn duration_of_key(key: u64) -> u64 {
    key & ((1 << DURATION_BITS) - 1)
}

/// How long a request took (its latency, as the summary's max counts it), or, unanswered, how
/// far it got: from its start to its last call. A call of the other side that returns after the
/// answer was read (a server thread stamped late) does not make the request slower. `None`
/// while its start is unknown.
pub fn extent_ns(view: &RequestView) -> Option<u64> {
    let start = view.start_ns?;
    let end = match view.done_ns {
        Some(done) => done,
        None => view.spans().map(|span| span.end_ns).max()?,
    };
    Some(end.saturating_sub(start))
}

/// A request's row of the overview, from its events and its stalls: its key (its worst wait,
/// then its extent) and whether that wait is a stall.
pub fn row(view: &RequestView, stalls: &[Stall]) -> (u64, bool) {
    let worst = Priority::worst_of(stalls);
    (key(worst, extent_ns(view).unwrap_or(0)), worst == Priority::Stalled)
}

/// Consecutive rows of the overview.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Rows it stands for.
    pub rows: u32,
    /// The row (position in the row list, from 0) with the greatest key, and that key.
    pub worst_row: u32,
    pub worst_key: u64,
    /// The longest extent of its rows, whatever their waits (the worst row may be a shorter
    /// stall).
    pub slowest_ns: u64,
    /// Rows whose worst wait is a stall.
    pub stalled: u32,
}

impl Column {
    fn merge(self, later: Column) -> Column {
        // Ties go to the earlier row, as in the view's level of detail.
        let (worst_row, worst_key) = if later.worst_key > self.worst_key {
            (later.worst_row, later.worst_key)
        } else {
            (self.worst_row, self.worst_key)
        };
        Column {
            rows: self.rows + later.rows,
            worst_row,
            worst_key,
            slowest_ns: self.slowest_ns.max(later.slowest_ns),
            stalled: self.stalled + later.stalled,
        }
    }

    /// The worst row's extent in nanoseconds.
    pub fn worst_ns(&self) -> u64 {
        duration_of_key(self.worst_key)
    }
}

/// Rows in order, in at most [`MAX_COLUMNS`] columns of `per_column` rows (the last may hold
/// fewer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    pub rows: u32,
    pub per_column: u32,
    pub columns: Vec<Column>,
}

impl Default for Overview {
    fn default() -> Self {
        Overview { rows: 0, per_column: 1, columns: Vec::new() }
    }
}

impl Overview {
    /// The overview of rows given in order as `(key, stalled)`.
    pub fn of(rows: impl IntoIterator<Item = (u64, bool)>) -> Overview {
        let mut overview = Overview::default();
        for (key, stalled) in rows {
            overview.push(key, stalled);
        }
        overview
    }

    /// Appends the next row. Amortized O(1): a merge of all columns halves them.
    pub fn push(&mut self, key: u64, stalled: bool) {
        let row = Column {
            rows: 1,
            worst_row: self.rows,
            worst_key: key,
            slowest_ns: duration_of_key(key),
            stalled: u32::from(stalled),
        };
        self.rows += 1;
        match self.columns.last_mut() {
            Some(last) if last.rows < self.per_column => *last = last.merge(row),
            _ => {
                if self.columns.len() == MAX_COLUMNS {
                    self.halve();
                    if let Some(last) = self.columns.last_mut().filter(|c| c.rows < self.per_column)
                    {
                        *last = last.merge(row);
                        return;
                    }
                }
                self.columns.push(row);
            }
        }
    }

    fn halve(&mut self) {
        self.per_column *= 2;
        let merged: Vec<Column> = self
            .columns
            .chunks(2)
            .map(|pair| pair.iter().copied().reduce(Column::merge).unwrap_or_default())
            .collect();
        self.columns = merged;
    }

    /// The overview in `count` columns (fewer when there are fewer kept columns): column `j`
    /// merges the kept columns whose first row falls in its equal share of the rows, so every
    /// kept column, and its worst row, lands in exactly one.
    pub fn resample(&self, count: usize) -> Vec<Column> {
        if count == 0 || self.columns.is_empty() {
            return Vec::new();
        }
        if self.columns.len() <= count {
            return self.columns.clone();
        }
        let rows = u64::from(self.rows.max(1));
        let mut out: Vec<(usize, Column)> = Vec::with_capacity(count);
        let mut first_row = 0u64;
        for column in &self.columns {
            let share = (first_row * count as u64 / rows) as usize;
            match out.last_mut() {
                Some((at, merged)) if *at == share => *merged = merged.merge(*column),
                _ => out.push((share, *column)),
            }
            first_row += u64::from(column.rows);
        }
        out.into_iter().map(|(_, column)| column).collect()
    }

    /// The longest extent of any row (the slowest request's latency, when all are done).
    pub fn slowest_ns(&self) -> u64 {
        self.columns.iter().map(|c| c.slowest_ns).max().unwrap_or(0)
    }

    /// The stalled rows in all.
    pub fn stalled(&self) -> u32 {
        self.columns.iter().map(|c| c.stalled).sum()
    }
}

#[cfg(test)]
mod tests {
    use crate::synthetic::Lcg;

    use super::*;

    #[test]
    fn a_stall_outranks_any_longer_call() {
        assert!(key(Priority::Stalled, 11_000_000) > key(Priority::Call, 900_000_000_000));
        assert!(key(Priority::Waited, 1) > key(Priority::Call, u64::MAX));
        assert!(key(Priority::Call, 2) > key(Priority::Call, 1));
        assert_eq!(duration_of_key(key(Priority::Stalled, 43_600_000)), 43_600_000);
    }

    fn rows(count: usize, seed: u64) -> Vec<(u64, bool)> {
        let mut random = Lcg(seed);
        (0..count)
            .map(|_| {
                let stalled = random.next(50_000) == 0;
                let priority = if stalled { Priority::Stalled } else { Priority::Call };
                (key(priority, 50_000 + random.next(30_000_000)), stalled)
            })
            .collect()
    }

    /// The property the strip relies on: whatever the run's length and the strip's width, every
    /// row is in one column, every stalled row is counted, and each column keeps the greatest
    /// key of its rows (so a column with a stall shows the stall).
    #[test]
    fn every_row_lands_in_one_column_which_keeps_its_worst() {
        for (count, width) in [(1_000_003, 720), (5000, 720), (4097, 4096), (700, 720), (3, 100)] {
            let rows = rows(count, count as u64);
            let overview = Overview::of(rows.iter().copied());
            assert!(overview.columns.len() <= MAX_COLUMNS);
            assert_eq!(overview.rows as usize, count);
            let columns = overview.resample(width);
            assert!(columns.len() <= width && !columns.is_empty());
            assert_eq!(columns.iter().map(|c| c.rows as usize).sum::<usize>(), count);
            let stalled = rows.iter().filter(|(_, s)| *s).count();
            assert_eq!(columns.iter().map(|c| c.stalled as usize).sum::<usize>(), stalled);
            let slowest = rows.iter().map(|(k, _)| duration_of_key(*k)).max().unwrap();
            assert_eq!(overview.slowest_ns(), slowest);
            let mut first = 0usize;
            for column in &columns {
                let span = &rows[first..first + column.rows as usize];
                let best = span.iter().map(|(k, _)| *k).max().unwrap();
                assert_eq!(column.worst_key, best, "a column lost its worst row");
                assert_eq!(rows[column.worst_row as usize].0, best, "the worst row is named");
                assert_eq!(column.stalled > 0, rows[column.worst_row as usize].1);
                let slowest = span.iter().map(|(k, _)| duration_of_key(*k)).max().unwrap();
                assert_eq!(column.slowest_ns, slowest, "a column lost its slowest row");
                first += column.rows as usize;
            }
        }
    }

    #[test]
    fn a_short_run_is_one_column_per_row_and_a_long_one_spreads_evenly() {
        let short = Overview::of(rows(3, 1));
        assert_eq!(short.resample(100).len(), 3);
        let long = Overview::of(rows(1_000_000, 2));
        let columns = long.resample(720);
        assert_eq!(columns.len(), 720);
        // Each share is about 1/720 of the rows: within one kept column of it.
        let share = 1_000_000 / 720;
        for column in &columns {
            assert!(column.rows.abs_diff(share) <= long.per_column, "{} rows", column.rows);
        }
    }
}
