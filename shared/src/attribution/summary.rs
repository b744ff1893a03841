//! Stalls grouped by class and direction, as every summary prints them: [`ClassSummary`],
//! [`summarize`] for a list, and [`StallTally`] for stalls counted as they are found.

use serde::{Deserialize, Serialize};

use crate::analysis::SortedMultiset;
use crate::event::Side;
use crate::stall::{Stall, StallClass};
use crate::stats::{ns_to_ms, Buckets};

/// Stalls of one class in one direction: the CLI's one line and the JSON's `stalls` entries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassSummary {
    pub class: StallClass,
    /// "client->server": where the waited-for data was going.
    pub direction: String,
    pub count: u32,
    pub median_ms: f64,
    pub fixes: Vec<String>,
}

/// "client->server": a direction as the summaries name it, from where the data came to where
/// it went ([`ClassSummary::writer`] reads it back).
fn direction(from: Side, to: Side) -> String {
    format!("{}->{}", from.name(), to.name())
}

impl ClassSummary {
    /// The side whose data waited, the direction's first: where a fix on the writer goes.
    pub fn writer(&self) -> Option<Side> {
        let (from, _) = self.direction.split_once("->")?;
        [Side::Client, Side::Server].into_iter().find(|side| side.name() == from)
    }

    /// "199 stalls: Nagle x delayed ACK, client->server, median 43.6 ms; fixes: ..."
    pub fn line(&self) -> String {
        format!(
            "{} stall{}: {}, {}, median {:.1} ms; fixes: {}",
            self.count,
            if self.count == 1 { "" } else { "s" },
            self.class.name(),
            self.direction,
            self.median_ms,
            self.fixes.join("; ")
        )
    }
}

/// Groups stalls by class and direction, most frequent first.
pub fn summarize(stalls: &[Stall]) -> Vec<ClassSummary> {
    let mut tally = StallTally::default();
    stalls.iter().for_each(|stall| tally.add(stall));
    tally.summaries()
}

/// A class and direction: what a [`ClassSummary`] line groups.
pub(super) type GroupKey = (StallClass, Side, Side);

pub(super) fn group_key(stall: &Stall) -> GroupKey {
    (stall.class, stall.from, stall.to)
}

/// Stalls counted as they are found, keeping only their waits (for the medians), in order: a
/// median is an order statistic, not a sort of every wait on every question.
#[derive(Debug, Default)]
pub struct StallTally {
    /// In the order of their first stall counted (still held): [`summarize`]'s order, which the
    /// summaries keep between lines of equal count and class.
    groups: Vec<(GroupKey, Waits)>,
}

/// A group's waits kept exactly (8 bytes each) up to this many; past it, in [`Buckets`] (30 KB,
/// medians to 1/64 of their value): a watch of a busy service that stalls both ways for days
/// holds kilobytes, not gigabytes.
pub const MAX_EXACT_WAITS: usize = 1_000_000;

/// One group's waits: exactly, or past [`MAX_EXACT_WAITS`] by bucket.
#[derive(Debug)]
enum Waits {
    Exact(SortedMultiset),
    Buckets(Box<Buckets>),
}

impl Waits {
    fn insert(&mut self, wait_ns: u64) {
        match self {
            Waits::Exact(waits) if waits.len() >= MAX_EXACT_WAITS => {
                let mut buckets = Box::<Buckets>::default();
                waits.to_vec().into_iter().for_each(|wait| buckets.add(wait));
                buckets.add(wait_ns);
                *self = Waits::Buckets(buckets);
            }
            Waits::Exact(waits) => waits.insert(wait_ns),
            Waits::Buckets(buckets) => buckets.add(wait_ns),
        }
    }

    fn remove(&mut self, wait_ns: u64) -> bool {
        match self {
            Waits::Exact(waits) => waits.remove(wait_ns),
            Waits::Buckets(buckets) => buckets.remove(wait_ns),
        }
    }

    fn len(&self) -> usize {
        match self {
            Waits::Exact(waits) => waits.len(),
            Waits::Buckets(buckets) => usize::try_from(buckets.count()).unwrap_or(usize::MAX),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn percentile_with(&self, more: &[u64], pct: f64) -> u64 {
        match self {
            Waits::Exact(waits) => waits.percentile_with(more, pct),
            Waits::Buckets(buckets) => buckets.percentile_with(more, pct),
        }
    }
}

impl StallTally {
    pub fn add(&mut self, stall: &Stall) {
        let key = group_key(stall);
        match self.groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, waits)) => waits.insert(stall.wait_ns),
            None => {
                let mut waits = Waits::Exact(SortedMultiset::new());
                waits.insert(stall.wait_ns);
                self.groups.push((key, waits));
            }
        }
    }

    /// Takes back a stall counted with [`StallTally::add`]; false if there was none like it. A
    /// group left empty goes, so that it comes back in the order of its next stall.
    pub fn remove(&mut self, stall: &Stall) -> bool {
        let key = group_key(stall);
        let Some(at) = self.groups.iter().position(|(k, _)| *k == key) else { return false };
        let removed = self.groups[at].1.remove(stall.wait_ns);
        if self.groups[at].1.is_empty() {
            self.groups.remove(at);
        }
        removed
    }

    /// The groups so far, with these stalls added (for requests not yet counted), as
    /// [`summarize`] of the counted stalls followed by `more` gives them. Costs O(|more| log
    /// |more|) and an order statistic per group, not a copy of the counted waits.
    pub fn summaries_with(&self, more: &[Stall]) -> Vec<ClassSummary> {
        // `more`'s waits per group, in the order of their first stall.
        let mut extra: Vec<(GroupKey, Vec<u64>)> = Vec::new();
        for stall in more {
            let key = group_key(stall);
            match extra.iter_mut().find(|(k, _)| *k == key) {
                Some((_, waits)) => waits.push(stall.wait_ns),
                None => extra.push((key, vec![stall.wait_ns])),
            }
        }
        extra.iter_mut().for_each(|(_, waits)| waits.sort_unstable());
        let no_waits = Waits::Exact(SortedMultiset::new());
        let counted = self.groups.iter().map(|(key, waits)| {
            let more = extra.iter().find(|(k, _)| k == key).map_or(&[][..], |(_, w)| w);
            (*key, waits, more)
        });
        let only_more = extra
            .iter()
            .filter(|(key, _)| self.groups.iter().all(|(k, _)| k != key))
            .map(|(key, more)| (*key, &no_waits, more.as_slice()));
        let mut summaries: Vec<ClassSummary> = counted
            .chain(only_more)
            .map(|((class, from, to), waits, more)| ClassSummary {
                class,
                direction: direction(from, to),
                count: (waits.len() + more.len()) as u32,
                median_ms: ns_to_ms(waits.percentile_with(more, 50.0)),
                fixes: class.fixes(from, to),
            })
            .collect();
        // Stable: equal lines keep the groups' order.
        summaries.sort_by(|a, b| b.count.cmp(&a.count).then(a.class.cmp(&b.class)));
        summaries
    }

    pub fn summaries(self) -> Vec<ClassSummary> {
        self.summaries_with(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ConnId, ReqId};

    /// A tally past [`MAX_EXACT_WAITS`] stalls of a group keeps buckets, not every wait: its
    /// count stays exact, its median within a sixty-fourth.
    #[test]
    fn a_group_past_its_exact_waits_keeps_buckets_and_its_count() {
        let stall = |wait_ns| Stall {
            req: ReqId(0),
            conn: ConnId(0),
            side: Side::Server,
            from: Side::Client,
            to: Side::Server,
            start_ns: 0,
            end_ns: wait_ns,
            wait_ns,
            class: StallClass::NagleDelayedAck,
            evidence: String::new(),
        };
        let mut tally = StallTally::default();
        let total = MAX_EXACT_WAITS + 1000;
        for i in 0..total {
            tally.add(&stall(40_000_000 + (i % 1000) as u64 * 1000));
        }
        assert!(matches!(tally.groups[0].1, Waits::Buckets(_)), "bucketed past the bound");
        assert!(tally.remove(&stall(40_000_000)));
        let [line] = &tally.summaries()[..] else { panic!("one group") };
        assert_eq!(line.count as usize, total - 1);
        assert!((line.median_ms - 40.5).abs() < 40.5 / 64.0, "{}", line.median_ms);
        assert_eq!(line.writer(), Some(Side::Client), "the data came from the client");
    }

    #[test]
    fn a_directions_writer_is_read_back_from_its_words() {
        for (from, to) in [(Side::Client, Side::Server), (Side::Server, Side::Client)] {
            let line = ClassSummary {
                class: StallClass::NagleDelayedAck,
                direction: direction(from, to),
                count: 1,
                median_ms: 40.0,
                fixes: Vec::new(),
            };
            assert_eq!(line.writer(), Some(from), "{}", line.direction);
        }
        let odd = ClassSummary { direction: "sideways".into(), ..summary_of_nothing() };
        assert_eq!(odd.writer(), None, "a file's odd words name no side");
    }

    fn summary_of_nothing() -> ClassSummary {
        ClassSummary {
            class: StallClass::Unexplained,
            direction: String::new(),
            count: 0,
            median_ms: 0.0,
            fixes: Vec::new(),
        }
    }
}
