//! The kernel's view over time: every TCP_INFO sample of a run, per connection and side
//! ("kernel tracks"), kept column-wise so that a chart reads one field without the others.
//!
//! [`KernelTracks::push`] takes every event of a run (it keeps only `EventKind::TcpInfo`) in
//! O(1) for samples in time order. A side's samples arrive from two threads (the syscall
//! thread's boundary samples, the sampler's samples while blocked), each in order but handed
//! over in batches, so a sample may be older than the newest kept one: it is inserted in place,
//! which moves the few newer samples of the batch it trails.
//!
//! **Memory is bounded.** A kept sample costs [`SAMPLE_BYTES`] (44 bytes: its time and one
//! `u32` per [`Field`]). A track keeps at most [`MAX_TRACK_SAMPLES`] (8.8 MB when full): when
//! full it keeps every other sample (and its newest), and from then on only every second
//! sample that arrives, so the whole run stays covered at half the density, rather than the
//! end being cut off. A run keeps at most [`MAX_RUN_SAMPLES`] over all its tracks (44 MB): when
//! they are reached every track is halved the same way. A run of so many tiny tracks that
//! halving cannot free a quarter (hundreds of thousands of connections) keeps what it has and
//! drops later samples ([`KernelTracks::dropped`] counts them). Thinning keeps whole samples,
//! so a spike that lasted a single sample can be lost once a track is thinned; until then
//! (200,000 samples: 200 s of a side blocked at the default 1 ms interval) every sample is kept.
//!
//! **Drawing** asks a track for a [`Window`]: per bucket of a time range the min, max and last
//! value of one field, as Perfetto's counter tracks draw from their min/max/last mipmaps. A
//! spike inside a bucket stays visible as the bucket's max, however wide the bucket.

use std::collections::hash_map::Entry;

use crate::event::{ConnId, Event, EventKind, Side, TcpInfoSample};
use crate::keyed_hash::KeyedMap;

/// The most samples one track keeps (see the module docs for what happens past it).
pub const MAX_TRACK_SAMPLES: usize = 200_000;
/// The most samples one run keeps over all its tracks.
pub const MAX_RUN_SAMPLES: usize = 1_000_000;
/// The fields a track keeps per sample.
pub const FIELDS: usize = 9;
/// What one kept sample costs: its time (u64) and one u32 per field.
pub const SAMPLE_BYTES: usize = 8 + 4 * FIELDS;
/// Stored for a field the kernel did not report (an older kernel's shorter struct). A reported
/// value is capped one below it: no field read here comes near (windows stop at 1 GiB).
pub const UNKNOWN: u32 = u32::MAX;

/// The TCP_INFO fields a track keeps: the ones that explain waits and throughput, named as
/// `ackscope export --perfetto` names its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    Unacked,
    Notsent,
    Cwnd,
    SndWnd,
    RcvWnd,
    RcvSpace,
    Rtt,
    Ato,
    Retrans,
}

/// What a field counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    Segments,
    Bytes,
    Micros,
}

impl Field {
    pub const ALL: [Field; FIELDS] = [
        Field::Unacked,
        Field::Notsent,
        Field::Cwnd,
        Field::SndWnd,
        Field::RcvWnd,
        Field::RcvSpace,
        Field::Rtt,
        Field::Ato,
        Field::Retrans,
    ];

    /// The short name (a `data-field` value, the Perfetto counter's name).
    pub fn name(self) -> &'static str {
        match self {
            Field::Unacked => "unacked",
            Field::Notsent => "notsent",
            Field::Cwnd => "cwnd",
            Field::SndWnd => "snd_wnd",
            Field::RcvWnd => "rcv_wnd",
            Field::RcvSpace => "rcv_space",
            Field::Rtt => "rtt",
            Field::Ato => "ato",
            Field::Retrans => "retrans",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Field::Unacked | Field::Cwnd | Field::Retrans => Unit::Segments,
            Field::Notsent | Field::SndWnd | Field::RcvWnd | Field::RcvSpace => Unit::Bytes,
            Field::Rtt | Field::Ato => Unit::Micros,
        }
    }

    /// What the field says, in a few words (docs/TCP_INFO.md has the details).
    pub fn about(self) -> &'static str {
        match self {
            Field::Unacked => "segments sent and not yet acknowledged",
            Field::Notsent => "bytes written and not yet sent (Nagle, cork, window)",
            Field::Cwnd => "congestion window",
            Field::SndWnd => "the window the peer advertises",
            Field::RcvWnd => "the window this side advertises",
            Field::RcvSpace => "receive-buffer auto-tuning's estimate",
            Field::Rtt => "smoothed round-trip time",
            Field::Ato => "delayed-ACK timeout",
            Field::Retrans => "segments retransmitted so far",
        }
    }

    /// The field's value in a sample; `None` when the kernel did not report it.
    pub fn of(self, info: &TcpInfoSample) -> Option<u32> {
        match self {
            Field::Unacked => Some(info.unacked),
            Field::Notsent => info.notsent_bytes,
            Field::Cwnd => Some(info.snd_cwnd),
            Field::SndWnd => info.snd_wnd,
            Field::RcvWnd => info.rcv_wnd,
            Field::RcvSpace => Some(info.rcv_space),
            Field::Rtt => Some(info.rtt_us),
            Field::Ato => Some(info.ato_us),
            Field::Retrans => Some(info.total_retrans),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Where the next sample of a bounded series goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Append,
    /// Over the newest, which was kept only for being the newest.
    ReplaceLast,
    /// In time order before the newest (a late sample on the stride).
    Insert,
    Drop,
}

/// Which samples a bounded series keeps: every `stride`-th one in arrival order, and always the
/// newest (held provisionally until the next one takes its place), so a chart of a live run
/// reaches the latest value.
#[derive(Clone, Debug)]
pub(crate) struct Thinning {
    stride: u64,
    seen: u64,
    /// The newest kept sample is off the stride: the next one replaces it.
    provisional: bool,
}

impl Thinning {
    pub(crate) fn new(stride: u64) -> Thinning {
        Thinning { stride: stride.max(1), seen: 0, provisional: false }
    }

    /// Where the next sample goes; `late`: it is older than the newest kept one.
    pub(crate) fn place(&mut self, late: bool, empty: bool) -> Place {
        let on_stride = self.seen % self.stride == 0;
        self.seen += 1;
        if late && !empty {
            // Late samples never become the newest, so they are kept on the stride only.
            return if on_stride { Place::Insert } else { Place::Drop };
        }
        let place = if self.provisional && !empty { Place::ReplaceLast } else { Place::Append };
        self.provisional = !on_stride;
        place
    }

    /// The series was halved by [`keep_every_other`] from `len_before` samples: from now on
    /// every second sample of the old stride is kept.
    pub(crate) fn halved(&mut self, len_before: usize) {
        self.stride = self.stride.saturating_mul(2);
        // An even count's newest sat at an odd index: it was kept only for being the newest.
        if len_before % 2 == 0 {
            self.provisional = true;
        }
    }

    pub(crate) fn stride(&self) -> u64 {
        self.stride
    }

    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }
}

/// Keeps the samples at even indices, and the newest: the first and last moments stay covered.
pub(crate) fn keep_every_other<T>(column: &mut Vec<T>) {
    let last = column.len().saturating_sub(1);
    let mut index = 0;
    column.retain(|_| {
        let keep = index % 2 == 0 || index == last;
        index += 1;
        keep
    });
}

/// One field's samples in one bucket of a [`Window`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub min: u32,
    pub max: u32,
    /// The value of the bucket's latest sample: where the line leaves the bucket.
    pub last: u32,
}

/// One field of one track over `from_ns ..= to_ns`, cut into equal buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub from_ns: u64,
    pub to_ns: u64,
    /// The value in effect as the window begins: the latest reported sample before it.
    pub before: Option<u32>,
    /// `None`: no reported sample in that bucket (the value held from the one before).
    pub buckets: Vec<Option<Bucket>>,
    /// The track has samples after the window: the last value holds to its right edge.
    pub continues: bool,
}

impl Window {
    /// The largest value the window shows (the one before it included).
    pub fn max(&self) -> Option<u32> {
        let inside = self.buckets.iter().flatten().map(|bucket| bucket.max);
        inside.chain(self.before).max()
    }

    /// The value in effect at the end of each bucket: its last sample, else the one before.
    pub fn held(&self) -> Vec<Option<u32>> {
        let mut value = self.before;
        self.buckets
            .iter()
            .map(|bucket| {
                if let Some(bucket) = bucket {
                    value = Some(bucket.last);
                }
                value
            })
            .collect()
    }

    /// Buckets with at least one sample.
    pub fn filled(&self) -> usize {
        self.buckets.iter().flatten().count()
    }
}

/// Every kept TCP_INFO sample of one side of one connection, in time order, column-wise.
#[derive(Clone, Debug)]
pub struct Track {
    pub conn: ConnId,
    pub side: Side,
    at_ns: Vec<u64>,
    /// One column per [`Field`] (in `Field::ALL` order), [`UNKNOWN`] where not reported.
    columns: [Vec<u32>; FIELDS],
    /// Reported values kept, per field: a field nobody reported is never searched.
    reported: [usize; FIELDS],
    thinning: Thinning,
}

impl Track {
    fn new(conn: ConnId, side: Side, stride: u64) -> Track {
        Track {
            conn,
            side,
            at_ns: Vec::new(),
            columns: Default::default(),
            reported: [0; FIELDS],
            thinning: Thinning::new(stride),
        }
    }

    /// Samples kept.
    pub fn len(&self) -> usize {
        self.at_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at_ns.is_empty()
    }

    /// Samples pushed, kept or not.
    pub fn seen(&self) -> u64 {
        self.thinning.seen()
    }

    /// 1 until the track was thinned; then it keeps one sample in `stride`.
    pub fn stride(&self) -> u64 {
        self.thinning.stride()
    }

    /// The kept samples' times, oldest first.
    pub fn times(&self) -> &[u64] {
        &self.at_ns
    }

    /// One field's kept values, in the order of [`Track::times`] ([`UNKNOWN`]: not reported).
    pub fn values(&self, field: Field) -> &[u32] {
        &self.columns[field.index()]
    }

    /// The first and the last sample's time.
    pub fn span_ns(&self) -> Option<(u64, u64)> {
        Some((*self.at_ns.first()?, *self.at_ns.last()?))
    }

    /// Whether the kernel reported `field` in any kept sample.
    pub fn reports(&self, field: Field) -> bool {
        self.reported[field.index()] > 0
    }

    /// Pushes one sample: `values` in `Field::ALL` order.
    fn push(&mut self, at_ns: u64, values: [u32; FIELDS]) {
        let newest = self.at_ns.last().copied();
        let late = newest.is_some_and(|newest| at_ns < newest);
        match self.thinning.place(late, self.at_ns.is_empty()) {
            Place::Append => {
                self.at_ns.push(at_ns);
                for (column, value) in self.columns.iter_mut().zip(values) {
                    column.push(value);
                }
                self.count(&values, 1);
            }
            Place::ReplaceLast => {
                let last = self.at_ns.len() - 1;
                let old: [u32; FIELDS] = std::array::from_fn(|i| self.columns[i][last]);
                self.count(&old, -1);
                self.at_ns[last] = at_ns;
                for (column, value) in self.columns.iter_mut().zip(values) {
                    column[last] = value;
                }
                self.count(&values, 1);
            }
            Place::Insert => {
                // After samples of the same time: the order they arrived in is kept.
                let at = self.at_ns.partition_point(|&t| t <= at_ns);
                self.at_ns.insert(at, at_ns);
                for (column, value) in self.columns.iter_mut().zip(values) {
                    column.insert(at, value);
                }
                self.count(&values, 1);
            }
            Place::Drop => {}
        }
    }

    fn count(&mut self, values: &[u32; FIELDS], by: isize) {
        for (reported, &value) in self.reported.iter_mut().zip(values) {
            if value != UNKNOWN {
                *reported = reported.saturating_add_signed(by);
            }
        }
    }

    /// Keeps every other sample (and the newest); returns how many went.
    fn halve(&mut self) -> usize {
        let before = self.len();
        keep_every_other(&mut self.at_ns);
        for (field, column) in self.columns.iter_mut().enumerate() {
            keep_every_other(column);
            self.reported[field] = column.iter().filter(|&&value| value != UNKNOWN).count();
        }
        self.thinning.halved(before);
        before - self.len()
    }

    /// `field` over `from_ns ..= to_ns` in `buckets` equal buckets (at least one): per bucket
    /// the min, max and last reported value. Costs a binary search per bucket and one look at
    /// each sample inside the window.
    pub fn window(&self, field: Field, from_ns: u64, to_ns: u64, buckets: usize) -> Window {
        let count = buckets.max(1);
        let to_ns = to_ns.max(from_ns);
        let span = u128::from((to_ns - from_ns).max(1));
        let column = &self.columns[field.index()];
        let start = self.at_ns.partition_point(|&t| t < from_ns);
        let end = self.at_ns.partition_point(|&t| t <= to_ns);
        let mut window = Window {
            from_ns,
            to_ns,
            before: None,
            buckets: vec![None; count],
            continues: end < self.at_ns.len(),
        };
        if !self.reports(field) {
            return window;
        }
        // A field is reported by every sample of a kernel or by none: this stops at once.
        window.before = column[..start].iter().rev().find(|&&v| v != UNKNOWN).copied();
        // Bucket i holds the samples with floor((t - from) * count / span) == i: those from
        // `from + ceil(i * span / count)` on. The last one also holds `to_ns` itself.
        let mut first = start;
        for (i, slot) in window.buckets.iter_mut().enumerate() {
            let next = if i + 1 == count {
                end
            } else {
                let edge = from_ns + ((i as u128 + 1) * span).div_ceil(count as u128) as u64;
                first + self.at_ns[first..end].partition_point(|&t| t < edge)
            };
            let values = column[first..next].iter().copied().filter(|&v| v != UNKNOWN);
            *slot = values.fold(None, |bucket, value| {
                Some(match bucket {
                    None => Bucket { min: value, max: value, last: value },
                    Some(b) => Bucket { min: b.min.min(value), max: b.max.max(value), last: value },
                })
            });
            first = next;
        }
        window
    }
}

/// Every TCP_INFO sample of a run, one [`Track`] per connection and side (see the module docs
/// for the bounds).
#[derive(Clone, Debug)]
pub struct KernelTracks {
    /// In the order their first sample arrived.
    tracks: Vec<Track>,
    index: KeyedMap<(ConnId, Side), usize>,
    kept: usize,
    seen: u64,
    dropped: u64,
    /// The stride a new track starts with: doubled with every halving of the whole run, so new
    /// connections are kept as densely as the old ones.
    stride: u64,
    track_cap: usize,
    run_cap: usize,
    /// Halving the run no longer frees enough: later samples are dropped.
    saturated: bool,
}

impl Default for KernelTracks {
    fn default() -> Self {
        KernelTracks::new()
    }
}

impl KernelTracks {
    pub fn new() -> KernelTracks {
        KernelTracks::with_caps(MAX_TRACK_SAMPLES, MAX_RUN_SAMPLES)
    }

    /// Other bounds than the defaults (tests, or a caller with less memory). A track keeps at
    /// least 4 samples, a run at least one track's worth.
    pub fn with_caps(track_cap: usize, run_cap: usize) -> KernelTracks {
        let track_cap = track_cap.max(4);
        KernelTracks {
            tracks: Vec::new(),
            index: KeyedMap::default(),
            kept: 0,
            seen: 0,
            dropped: 0,
            stride: 1,
            track_cap,
            run_cap: run_cap.max(track_cap),
            saturated: false,
        }
    }

    pub fn push_all<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for event in events {
            self.push(event);
        }
    }

    /// Keeps a TCP_INFO sample; every other event is ignored. O(1) for samples in time order
    /// (amortized over the halvings, each of which follows at least as many pushes as it costs).
    pub fn push(&mut self, event: &Event) {
        let EventKind::TcpInfo(info) = &event.kind else { return };
        self.seen += 1;
        if self.saturated {
            self.dropped += 1;
            return;
        }
        let values = Field::ALL.map(|field| field.of(info).map_or(UNKNOWN, |v| v.min(UNKNOWN - 1)));
        let index = match self.index.entry((event.conn, event.side)) {
            Entry::Occupied(entry) => *entry.get(),
            Entry::Vacant(entry) => {
                self.tracks.push(Track::new(event.conn, event.side, self.stride));
                *entry.insert(self.tracks.len() - 1)
            }
        };
        let track = &mut self.tracks[index];
        let before = track.len();
        track.push(event.at_ns, values);
        if track.len() >= self.track_cap {
            track.halve();
        }
        self.kept = self.kept - before + track.len();
        if self.kept >= self.run_cap {
            self.halve_all();
        }
    }

    /// Halves every track that can shrink and doubles every track's stride.
    fn halve_all(&mut self) {
        for track in &mut self.tracks {
            if track.len() > 2 {
                track.halve();
            } else {
                track.thinning.stride = track.thinning.stride.saturating_mul(2);
            }
        }
        self.stride = self.stride.saturating_mul(2);
        self.kept = self.tracks.iter().map(Track::len).sum();
        // Too many tiny tracks to free a quarter: halving again would cost the whole run for
        // little, and do so ever more often.
        if self.kept.saturating_mul(4) > self.run_cap.saturating_mul(3) {
            self.saturated = true;
        }
    }

    /// The track of one side of one connection, once it has a sample.
    pub fn track(&self, conn: ConnId, side: Side) -> Option<&Track> {
        self.index.get(&(conn, side)).map(|&index| &self.tracks[index])
    }

    /// In the order their first sample arrived.
    pub fn tracks(&self) -> &[Track] {
        &self.tracks
    }

    /// Whether no TCP_INFO sample arrived at all.
    pub fn is_empty(&self) -> bool {
        self.seen == 0
    }

    /// Samples kept over all tracks.
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// TCP_INFO samples pushed, kept or not.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Samples not kept because the run's bound was reached (see the module docs).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// What the kept samples take ([`SAMPLE_BYTES`] each; the vectors' spare capacity aside).
    pub fn bytes(&self) -> usize {
        self.kept * SAMPLE_BYTES
    }

    /// The latest sample's time over all tracks.
    pub fn end_ns(&self) -> Option<u64> {
        self.tracks.iter().filter_map(|track| track.at_ns.last().copied()).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ReqId;

    const MS: u64 = 1_000_000;

    fn sample(conn: u32, side: Side, at_ns: u64, cwnd: u32) -> Event {
        let info = TcpInfoSample {
            snd_cwnd: cwnd,
            unacked: cwnd / 2,
            rtt_us: 50,
            notsent_bytes: Some(cwnd * 100),
            snd_wnd: Some(65_536),
            rcv_wnd: None,
            ..TcpInfoSample::default()
        };
        Event {
            at_ns,
            side,
            conn: ConnId(conn),
            req: ReqId(0),
            kind: EventKind::TcpInfo(Box::new(info)),
        }
    }

    fn cwnd_series(tracks: &mut KernelTracks, points: &[(u64, u32)]) {
        for &(at_ns, cwnd) in points {
            tracks.push(&sample(0, Side::Client, at_ns, cwnd));
        }
    }

    #[test]
    fn a_window_has_min_max_and_last_per_bucket() {
        let mut tracks = KernelTracks::new();
        cwnd_series(&mut tracks, &[(MS, 10), (2 * MS, 12), (3 * MS, 11), (7 * MS, 20)]);
        let track = tracks.track(ConnId(0), Side::Client).expect("a track");
        assert_eq!(track.len(), 4);
        // Two buckets of 5 ms over 0..=10 ms.
        let window = track.window(Field::Cwnd, 0, 10 * MS, 2);
        assert_eq!(
            window.buckets,
            [
                Some(Bucket { min: 10, max: 12, last: 11 }),
                Some(Bucket { min: 20, max: 20, last: 20 })
            ]
        );
        assert_eq!(window.before, None);
        assert!(!window.continues);
        assert_eq!(window.max(), Some(20));
        // Other fields come from the same samples.
        let unacked = track.window(Field::Unacked, 0, 10 * MS, 1);
        assert_eq!(unacked.buckets, [Some(Bucket { min: 5, max: 10, last: 10 })]);
    }

    #[test]
    fn a_spike_inside_a_bucket_is_kept_by_max() {
        let mut tracks = KernelTracks::new();
        // cwnd 10 every 1 ms for a second, with one sample of 500 in the middle.
        let points: Vec<(u64, u32)> =
            (0..1000).map(|i| (i * MS, if i == 437 { 500 } else { 10 })).collect();
        cwnd_series(&mut tracks, &points);
        let track = tracks.track(ConnId(0), Side::Client).expect("a track");
        // 3 buckets of about 333 ms: the spike's bucket shows it, the others do not.
        let window = track.window(Field::Cwnd, 0, 999 * MS, 3);
        let maxima: Vec<u32> = window.buckets.iter().flatten().map(|b| b.max).collect();
        assert_eq!(maxima, [10, 500, 10]);
        let last: Vec<u32> = window.buckets.iter().flatten().map(|b| b.last).collect();
        assert_eq!(last, [10, 10, 10], "the line leaves each bucket where the samples were");
        assert_eq!(window.buckets[1].map(|b| b.min), Some(10));
    }

    #[test]
    fn the_value_before_a_window_holds_into_it_and_empty_buckets_hold_too() {
        let mut tracks = KernelTracks::new();
        cwnd_series(&mut tracks, &[(MS, 10), (5 * MS, 14), (20 * MS, 30)]);
        let track = tracks.track(ConnId(0), Side::Client).expect("a track");
        let window = track.window(Field::Cwnd, 2 * MS, 10 * MS, 4);
        assert_eq!(window.before, Some(10));
        assert!(window.continues, "a sample after the window");
        assert_eq!(window.filled(), 1);
        assert_eq!(window.held(), [Some(10), Some(14), Some(14), Some(14)]);
        // A window after every sample holds the last one throughout.
        let after = track.window(Field::Cwnd, 30 * MS, 40 * MS, 2);
        assert_eq!((after.before, after.filled(), after.continues), (Some(30), 0, false));
        // An empty or reversed range is one instant.
        let instant = track.window(Field::Cwnd, 5 * MS, MS, 3);
        assert_eq!(instant.to_ns, 5 * MS);
        assert_eq!(instant.buckets[0], Some(Bucket { min: 14, max: 14, last: 14 }));
    }

    #[test]
    fn fields_the_kernel_did_not_report_are_unknown_not_zero() {
        let mut tracks = KernelTracks::new();
        cwnd_series(&mut tracks, &[(MS, 10), (2 * MS, 12)]);
        let track = tracks.track(ConnId(0), Side::Client).expect("a track");
        assert!(track.reports(Field::SndWnd));
        assert!(!track.reports(Field::RcvWnd), "rcv_wnd was None (a 6.1 kernel)");
        assert_eq!(track.values(Field::RcvWnd), [UNKNOWN, UNKNOWN]);
        let window = track.window(Field::RcvWnd, 0, 3 * MS, 3);
        assert_eq!((window.before, window.filled(), window.max()), (None, 0, None));
        assert_eq!(track.values(Field::Notsent), [1000, 1200]);
    }

    #[test]
    fn tracks_are_per_connection_and_side_and_other_events_are_ignored() {
        let mut tracks = KernelTracks::new();
        assert!(tracks.is_empty());
        let read = Event {
            at_ns: 0,
            side: Side::Server,
            conn: ConnId(0),
            req: ReqId(0),
            kind: EventKind::ReadDone { bytes: 4 },
        };
        tracks.push(&read);
        assert!(tracks.is_empty());
        tracks.push_all(&[
            sample(0, Side::Client, MS, 10),
            sample(0, Side::Server, MS, 11),
            sample(1, Side::Client, 2 * MS, 12),
            sample(0, Side::Client, 3 * MS, 13),
        ]);
        let keys: Vec<(u32, Side, usize)> =
            tracks.tracks().iter().map(|t| (t.conn.0, t.side, t.len())).collect();
        assert_eq!(keys, [(0, Side::Client, 2), (0, Side::Server, 1), (1, Side::Client, 1)]);
        assert_eq!((tracks.kept(), tracks.seen(), tracks.dropped()), (4, 4, 0));
        assert_eq!(tracks.bytes(), 4 * 44);
        assert_eq!(tracks.end_ns(), Some(3 * MS));
        assert!(tracks.track(ConnId(1), Side::Server).is_none());
    }

    #[test]
    fn a_late_sample_goes_in_time_order() {
        let mut tracks = KernelTracks::new();
        // The syscall thread's batch (1, 4 ms) arrives after the sampler's (2, 3 ms)... or not.
        cwnd_series(&mut tracks, &[(2 * MS, 20), (3 * MS, 30), (MS, 10), (4 * MS, 40)]);
        cwnd_series(&mut tracks, &[(3 * MS, 31)]);
        let track = tracks.track(ConnId(0), Side::Client).expect("a track");
        assert_eq!(track.times(), [MS, 2 * MS, 3 * MS, 3 * MS, 4 * MS]);
        assert_eq!(track.values(Field::Cwnd), [10, 20, 30, 31, 40], "equal times: in arrival");
    }

    #[test]
    fn a_full_track_is_thinned_and_still_covers_the_whole_run() {
        let mut tracks = KernelTracks::with_caps(100, 10_000);
        let total = 1000u64;
        let points: Vec<(u64, u32)> = (0..total).map(|i| (i * MS, i as u32)).collect();
        cwnd_series(&mut tracks, &points);
        let track = tracks.track(ConnId(0), Side::Client).expect("a track");
        assert!(track.len() < 100 && track.len() >= 50, "{}", track.len());
        assert_eq!(track.seen(), total);
        assert_eq!(track.stride(), 16, "halved 4 times: 1000 samples in under 100");
        let times = track.times();
        assert_eq!(times.first(), Some(&0), "the start of the run is kept");
        assert_eq!(times.last(), Some(&((total - 1) * MS)), "and the newest sample");
        assert!(times.windows(2).all(|w| w[0] < w[1]));
        // Evenly spread: no gap wider than two strides.
        let widest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        assert!(widest <= 2 * 16 * MS, "{widest}");
        // Kept values are the samples' own.
        let values = track.values(Field::Cwnd);
        assert!(times.iter().zip(values).all(|(&t, &v)| u64::from(v) * MS == t));
        assert_eq!(tracks.kept(), track.len());
    }

    #[test]
    fn the_newest_sample_is_always_kept_however_thin_the_track() {
        let mut tracks = KernelTracks::with_caps(8, 1000);
        for i in 0..101u64 {
            tracks.push(&sample(0, Side::Client, i * MS, i as u32));
            let track = tracks.track(ConnId(0), Side::Client).expect("a track");
            assert_eq!(track.times().last(), Some(&(i * MS)), "after sample {i}");
            assert!(track.len() < 8);
        }
    }

    #[test]
    fn a_run_is_bounded_over_all_its_tracks() {
        let mut tracks = KernelTracks::with_caps(1000, 2000);
        // 40 connections of 100 samples each, one after the other.
        for conn in 0..40u32 {
            for i in 0..100u64 {
                let at = (u64::from(conn) * 100 + i) * MS;
                tracks.push(&sample(conn, Side::Client, at, i as u32));
            }
        }
        assert!(tracks.kept() < 2000, "{}", tracks.kept());
        assert_eq!(tracks.kept(), tracks.tracks().iter().map(Track::len).sum::<usize>());
        assert_eq!(tracks.dropped(), 0);
        // Every connection is still there, the first as well as the last.
        assert_eq!(tracks.tracks().len(), 40);
        assert!(tracks.tracks().iter().all(|t| t.len() >= 10), "thinned, not cut");

        // Single-sample connections cannot be halved: past the bound they are dropped.
        let mut tiny = KernelTracks::with_caps(4, 100);
        for conn in 0..150u32 {
            tiny.push(&sample(conn, Side::Client, u64::from(conn) * MS, 1));
        }
        assert_eq!(tiny.kept(), 100);
        assert_eq!(tiny.dropped(), 50);
        assert_eq!(tiny.seen(), 150);
    }

    #[test]
    fn buckets_match_the_definition_for_any_window() {
        // A small xorshift generator: deterministic irregular times without a dependency.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut tracks = KernelTracks::new();
        let mut at = 0;
        for _ in 0..2000 {
            at += next() % 3000;
            tracks.push(&sample(0, Side::Client, at, (next() % 1000) as u32));
        }
        let track = tracks.track(ConnId(0), Side::Client).expect("a track");
        let (times, values) = (track.times(), track.values(Field::Cwnd));
        for _ in 0..200 {
            let from = next() % at;
            let to = from + next() % (at - from + 1);
            let count = (next() % 400 + 1) as usize;
            let window = track.window(Field::Cwnd, from, to, count);
            // The definition, sample by sample.
            let span = u128::from((to - from).max(1));
            let mut expected: Vec<Option<Bucket>> = vec![None; count];
            for (&t, &v) in times.iter().zip(values).filter(|(&t, _)| t >= from && t <= to) {
                let i = ((u128::from(t - from) * count as u128 / span) as usize).min(count - 1);
                expected[i] = Some(match expected[i] {
                    None => Bucket { min: v, max: v, last: v },
                    Some(b) => Bucket { min: b.min.min(v), max: b.max.max(v), last: v },
                });
            }
            assert_eq!(window.buckets, expected, "{from}..={to} in {count}");
        }
    }

    #[test]
    fn keep_every_other_keeps_the_ends() {
        let mut v: Vec<u32> = (0..6).collect();
        keep_every_other(&mut v);
        assert_eq!(v, [0, 2, 4, 5]);
        let mut v: Vec<u32> = (0..5).collect();
        keep_every_other(&mut v);
        assert_eq!(v, [0, 2, 4]);
        let mut one = vec![7];
        keep_every_other(&mut one);
        assert_eq!(one, [7]);
        let mut none: Vec<u32> = Vec::new();
        keep_every_other(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn a_sample_is_44_bytes() {
        assert_eq!(SAMPLE_BYTES, 44);
        assert_eq!(MAX_TRACK_SAMPLES * SAMPLE_BYTES, 8_800_000);
    }
}
