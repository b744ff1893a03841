//! Stalls seen in packets alone, for captures that have no syscall events (an imported
//! tcpdump file) and for exporting a session's captured segments with explanations.
//!
//! The one pattern recognised is Nagle x delayed ACK: a data segment, then nothing more from its
//! sender until the peer's pure ACK for it arrives 20-500 ms later (the delayed-ACK timer), then
//! the next bytes within [`NAGLE_RELEASE_NS`] of that ACK: the sender had them all along and
//! Nagle held them until the small segment was acknowledged (RFC 896; RFC 9293 section 3.7.4).
//! Anything less conclusive is left out: a stall is only claimed with its evidence.

use crate::analysis::SegmentSample;
use crate::event::{Call, ConnId, Event, EventKind, ReqId, Side};
use crate::stall::{Stall, StallClass};

/// The delayed-ACK timer's range: Linux runs it between its minimum (40 ms with HZ >= 100; the
/// stall table measured 43-44 ms) and its maximum (200 ms); room is left on both ends.
pub const DELAYED_ACK_NS: std::ops::RangeInclusive<u64> = 20_000_000..=500_000_000;
/// Nagle sends the held data as soon as the ACK is processed (tens of microseconds on loopback):
/// data later than this after the ACK was not released by it.
pub const NAGLE_RELEASE_NS: u64 = 5_000_000;

/// A stall and the event (an index into the slice given to [`find`]) that ended it: the held
/// data segment.
#[derive(Clone, Debug, PartialEq)]
pub struct PacketStall {
    pub stall: Stall,
    pub ended_by: usize,
}

/// `a` is at or after `b` in sequence space (RFC 9293 section 3.4: arithmetic modulo 2^32).
pub fn seq_ge(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) as i32 >= 0
}

/// A Nagle x delayed ACK hold in one connection's segments: indexes of the small segment, the
/// reader's ACK of it and the held data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub small: usize,
    pub ack: usize,
    pub held: usize,
}

/// The one packet rule for Nagle x delayed ACK, for live captures (the attribution, with the
/// syscalls naming the small write) and for imported captures (every data segment a candidate).
///
/// `segments` are one connection's, both directions, in time order, each stamped as its sender
/// sent it; `small` is a data segment from `writer`. The hold is: no more data from the writer,
/// then the reader's first segment that acknowledges all of the small one (`ack` at or past its
/// end, in sequence space), which is a pure ACK (an answer carrying the ACK was not delayed)
/// sent within [`DELAYED_ACK_NS`] of the small segment's arrival; then the writer's next data,
/// starting where the small segment ended, within [`NAGLE_RELEASE_NS`] of that ACK's arrival.
/// `path_delay_ns` is the one-way delay of an emulated link (0 on loopback or for an import).
/// `Err` says what the packets show instead.
pub fn nagle_hold(
    segments: &[SegmentSample],
    small: usize,
    path_delay_ns: u64,
) -> Result<Hold, String> {
    hold_so_far(segments, small, path_delay_ns).map_err(|miss| match miss {
        Miss::No(why) | Miss::NotYet(why) => why.to_string(),
    })
}

/// Why [`nagle_hold`] found no hold: the packets show none, or they ran out before saying.
enum Miss {
    No(Why),
    /// More segments could still make it a hold.
    NotYet(Why),
}

/// What the packets showed instead of a hold, as data: put into words only when
/// [`nagle_hold`] is asked (the [`StallFinder`] asks again at each segment while a candidate
/// waits, and a capture's every data segment is one: formatting the answer each time was a
/// quarter of reading a capture).
struct Why {
    /// The side that sent the small segment.
    writer: Side,
    /// The small segment's bytes.
    len: u32,
    what: WhyNot,
}

enum WhyNot {
    NoAck,
    MoreDataFirst,
    AnsweredFirst,
    AckOnAnswer,
    AckOutsideTimer { delay_ns: u64 },
    NextDataElsewhere,
    ReleasedLate { held_len: u32, release_ns: u64 },
    NothingAfterAck,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (w, r, len) = (self.writer.name(), self.writer.peer().name(), self.len);
        match self.what {
            WhyNot::NoAck => write!(f, "no ACK from the {r} of the {len}-byte segment"),
            WhyNot::MoreDataFirst => write!(
                f,
                "the {w} sent more data before the {r} acknowledged the {len}-byte segment"
            ),
            WhyNot::AnsweredFirst => {
                write!(f, "the {r} answered before it acknowledged the {len}-byte segment")
            }
            WhyNot::AckOnAnswer => {
                write!(f, "the {r}'s ACK of the {len}-byte segment rode on its answer: not delayed")
            }
            WhyNot::AckOutsideTimer { delay_ns } => write!(
                f,
                "the {r} acknowledged the {len}-byte segment after {:.1} ms, outside the \
                 delayed-ACK timer's {:.0}-{:.0} ms",
                delay_ns as f64 / 1e6,
                *DELAYED_ACK_NS.start() as f64 / 1e6,
                *DELAYED_ACK_NS.end() as f64 / 1e6,
            ),
            WhyNot::NextDataElsewhere => {
                write!(f, "the {w}'s next data did not start where the small segment ended")
            }
            WhyNot::ReleasedLate { held_len, release_ns } => write!(
                f,
                "the held {held_len} bytes left {:.1} ms after the {r}'s ACK, not at once",
                release_ns as f64 / 1e6
            ),
            WhyNot::NothingAfterAck => {
                write!(f, "nothing from the {w} followed the {r}'s ACK of the {len}-byte segment")
            }
        }
    }
}

/// [`nagle_hold`], telling "no" from "not yet": what [`StallFinder`] needs to decide a
/// candidate only once its packets are in.
fn hold_so_far(segments: &[SegmentSample], small: usize, path_delay_ns: u64) -> Result<Hold, Miss> {
    let first = segments[small];
    let writer = first.side;
    let why = |what| Why { writer, len: first.len, what };
    let end = first.seq_end();
    let mut rest = segments.iter().enumerate().skip(small + 1);
    let ack = loop {
        let Some((index, s)) = rest.next() else {
            return Err(Miss::NotYet(why(WhyNot::NoAck)));
        };
        if s.side == writer {
            if s.len > 0 {
                return Err(Miss::No(why(WhyNot::MoreDataFirst)));
            }
            continue;
        }
        if s.len > 0 && !seq_ge(s.ack, end) {
            return Err(Miss::No(why(WhyNot::AnsweredFirst)));
        }
        if s.flags & crate::event::tcp_flags::ACK == 0 || !seq_ge(s.ack, end) {
            continue;
        }
        if !s.is_pure_ack() {
            return Err(Miss::No(why(WhyNot::AckOnAnswer)));
        }
        let delay = s.at_ns.saturating_sub(first.at_ns).saturating_sub(path_delay_ns);
        if !DELAYED_ACK_NS.contains(&delay) {
            return Err(Miss::No(why(WhyNot::AckOutsideTimer { delay_ns: delay })));
        }
        break index;
    };
    for (index, s) in rest {
        if s.side != writer || s.len == 0 {
            continue;
        }
        if s.seq != end {
            return Err(Miss::No(why(WhyNot::NextDataElsewhere)));
        }
        let release = s.at_ns.saturating_sub(segments[ack].at_ns).saturating_sub(path_delay_ns);
        if release > NAGLE_RELEASE_NS {
            let held = WhyNot::ReleasedLate { held_len: s.len, release_ns: release };
            return Err(Miss::No(why(held)));
        }
        return Ok(Hold { small, ack, held: index });
    }
    Err(Miss::NotYet(why(WhyNot::NothingAfterAck)))
}

/// Finds the Nagle x delayed ACK stalls among `events`' [`EventKind::Segment`]s (other kinds are
/// ignored; `side` is the sender), by [`nagle_hold`] with every data segment a candidate. Stalls
/// come out in time order. The whole-slice form of [`StallFinder`], which it uses: one rule.
pub fn find(events: &[Event]) -> Vec<PacketStall> {
    let mut segments: Vec<(usize, &Event)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.kind, EventKind::Segment(_)))
        .collect();
    segments.sort_by_key(|(i, e)| (e.conn, e.at_ns, *i));
    let mut finder = StallFinder::default();
    for (i, event) in segments {
        finder.push(event, i);
    }
    let mut stalls: Vec<PacketStall> = finder
        .finish()
        .into_iter()
        .map(|(stall, ended_by)| PacketStall { stall, ended_by })
        .collect();
    stalls.sort_by_key(|s| (s.stall.start_ns, s.stall.conn));
    stalls
}

/// Segments a connection's window keeps past its oldest undecided candidate: past this, that
/// candidate is given up (no stall claimed), so a hostile capture costs bounded memory and time.
/// A real hold is decided within a handful of segments (the reader's next segment either is the
/// pure ACK or says it is not).
pub const MAX_WINDOW: usize = 1024;

/// How long after a small segment its hold is decided, whatever came: the latest delayed ACK and
/// the release after it.
const DECIDED_AFTER_NS: u64 = *DELAYED_ACK_NS.end() + NAGLE_RELEASE_NS;

/// Finds Nagle x delayed ACK holds as segments come, holding only each connection's segments
/// since its oldest candidate not yet decided (at most [`MAX_WINDOW`]): an import of any size
/// streams through it. Each segment carries a `T` (an index, for [`find`]) that comes back with
/// the stall its segment ended. A connection's segments must come in time order.
pub struct StallFinder<T = ()> {
    windows: crate::keyed_hash::KeyedMap<ConnId, Window<T>>,
    decided: Decided<T>,
}

/// What [`decide`] writes, whatever the window: the stalls found, and what the kernel's own
/// evidence confirmed of them.
struct Decided<T> {
    found: Vec<(Stall, T)>,
    /// Whether each stall found says its evidence in words ([`Stall::evidence`]).
    evidence: bool,
    /// Stalls found whose ACK the kernel's delayed-ACK timer was seen to send
    /// ([`EventKind::DelayedAck`], a watch as root).
    confirmed_by_timer: u64,
    /// Stalls found whose held bytes a `recv()` of the receiving program was seen sleeping for
    /// ([`EventKind::BlockedCall`], a watch as root).
    waited_in_recv: u64,
    /// Whether any such `recv()` was seen: the source records them (a watch as root), so a
    /// hold waits a little for its reader's, which returns just after the held bytes came.
    reads_seen: bool,
}

impl<T> Default for StallFinder<T> {
    fn default() -> Self {
        let decided = Decided {
            found: Vec::new(),
            evidence: true,
            confirmed_by_timer: 0,
            waited_in_recv: 0,
            reads_seen: false,
        };
        StallFinder { windows: Default::default(), decided }
    }
}

impl<T> StallFinder<T> {
    /// A finder whose stalls have an empty [`Stall::evidence`], for a tally that keeps only
    /// each stall's class, direction and wait (`show` of a capture): putting the evidence into
    /// words was a third of the CPU of reading a capture, for text nobody read.
    pub fn without_evidence() -> Self {
        let mut finder = Self::default();
        finder.decided.evidence = false;
        finder
    }

    /// Of the stalls found, those whose ACK the kernel's delayed-ACK timer was seen to send.
    pub fn confirmed_by_timer(&self) -> u64 {
        self.decided.confirmed_by_timer
    }

    /// Of the stalls found, those whose held bytes the receiving program's `recv()` was seen
    /// sleeping for.
    pub fn waited_in_recv(&self) -> u64 {
        self.decided.waited_in_recv
    }
}

/// One connection's segments from its oldest undecided candidate on, and the times its
/// delayed-ACK timers fired since then (at most [`MAX_TIMERS`]).
///
/// The segments are `samples[start..]` (and their tags `tags[start..]`): decided ones are
/// passed over by moving `start`, and dropped once they are as many as those held and at least
/// [`PASSED_KEPT`], so the held segments are always one slice for [`hold_so_far`] and each is
/// moved a bounded number of times (a ring that wrapped had to be made one slice again, and
/// that was a tenth of the CPU of reading a capture).
struct Window<T> {
    samples: Vec<SegmentSample>,
    tags: Vec<(ReqId, T)>,
    start: usize,
    timers: std::collections::VecDeque<(Side, u64)>,
    /// The receiving programs' `recv()` calls that returned after a sleep (at most
    /// [`MAX_CALLS`]).
    reads: std::collections::VecDeque<SleptRead>,
}

impl<T> Default for Window<T> {
    fn default() -> Self {
        Window {
            samples: Vec::new(),
            tags: Vec::new(),
            start: 0,
            timers: Default::default(),
            reads: Default::default(),
        }
    }
}

/// A `recv()` of a watched program that returned at `at_ns` on `side`, its thread asleep from
/// `since_ns` ([`EventKind::BlockedCall`]).
#[derive(Clone, Copy, Debug)]
struct SleptRead {
    side: Side,
    since_ns: u64,
    at_ns: u64,
}

/// Decided segments a window may keep before it drops them (see [`Window::drop_passed`]): a
/// few hundred bytes a connection, for a watch that follows tens of thousands.
const PASSED_KEPT: usize = 8;

impl<T> Window<T> {
    /// The segments held.
    fn held(&self) -> &[SegmentSample] {
        &self.samples[self.start..]
    }

    /// Drops the segments before `start` once they are at least half of those kept, and at
    /// least [`PASSED_KEPT`] (a connection holds two or three segments most of the time:
    /// dropped one at a time, they were moved at every segment). What a window keeps is then at
    /// most twice what it holds, or [`PASSED_KEPT`] more.
    fn drop_passed(&mut self) {
        if self.start >= PASSED_KEPT.max(self.samples.len() / 2) {
            self.samples.drain(..self.start);
            self.tags.drain(..self.start);
            self.start = 0;
        }
    }
}

/// Timer firings a window keeps: a hold needs the one of its ACK, and a connection's timer
/// fires at most once per 40 ms.
const MAX_TIMERS: usize = 16;
/// How far apart the timer's firing and the ACK it sent may be stamped: the ACK leaves within
/// microseconds, and the two stamps come from two clocks (the kernel's monotonic one and the
/// packet's realtime stamp moved onto it), aligned to well within this.
const TIMER_TO_ACK_NS: u64 = 2_000_000;
/// `recv()` calls a window keeps: a hold needs the one its reader woke from.
const MAX_CALLS: usize = 16;
/// How long after the held bytes' arrival the `recv()` that took them may return: the reader
/// wakes within microseconds of the bytes on an idle host, a few milliseconds later on a busy
/// one (the thread waits for a CPU), and the stamps come from two clocks, as
/// [`TIMER_TO_ACK_NS`] says.
pub const DATA_TO_READ_NS: u64 = 10_000_000;

/// Whether a read that returned at `returned_ns`, its thread asleep from `since_ns`, is the one
/// that took bytes held until `held_ns`: asleep from before they came, returning as they did.
/// The one rule of the packet rule's evidence and the page's rows.
pub fn took_held_bytes(since_ns: u64, returned_ns: u64, held_ns: u64) -> bool {
    since_ns < held_ns
        && returned_ns.saturating_add(TIMER_TO_ACK_NS) >= held_ns
        && returned_ns <= held_ns.saturating_add(DATA_TO_READ_NS)
}

impl<T: Clone> StallFinder<T> {
    /// Adds a segment event, or notes a delayed-ACK timer's firing or a `recv()` that slept on
    /// a connection with segments held (any other kind is ignored).
    pub fn push(&mut self, event: &Event, tag: T) {
        let segment = match &event.kind {
            EventKind::Segment(segment) => segment,
            EventKind::DelayedAck => {
                if let Some(window) = self.windows.get_mut(&event.conn) {
                    if window.timers.len() == MAX_TIMERS {
                        window.timers.pop_front();
                    }
                    window.timers.push_back((event.side, event.at_ns));
                }
                return;
            }
            EventKind::BlockedCall { call: Call::Recv, since_ns, .. } => {
                if let Some(window) = self.windows.get_mut(&event.conn) {
                    if window.reads.len() == MAX_CALLS {
                        window.reads.pop_front();
                    }
                    let read =
                        SleptRead { side: event.side, since_ns: *since_ns, at_ns: event.at_ns };
                    window.reads.push_back(read);
                    self.decided.reads_seen = true;
                    // A hold waiting for its reader's call is decided now.
                    decide(event.conn, window, false, &mut self.decided);
                }
                return;
            }
            _ => return,
        };
        // A segment without data starts no candidate: one with no window open (the last ACK
        // of a teardown, after `end_connection`) would be dropped at once by `decide`, and its
        // connection held again, empty, for ever.
        let window = match self.windows.get_mut(&event.conn) {
            Some(window) => window,
            None if segment.len == 0 => return,
            None => self.windows.entry(event.conn).or_default(),
        };
        window.samples.push(SegmentSample::new(event.side, event.at_ns, segment));
        window.tags.push((event.req, tag));
        decide(event.conn, window, false, &mut self.decided);
    }

    /// Connections with a window held (an entry each, empty or not).
    pub fn connections(&self) -> usize {
        self.windows.len()
    }

    /// Segments kept, all connections together (those held and those passed over, not yet
    /// dropped): what the finder costs in memory.
    pub fn held_segments(&self) -> usize {
        self.windows.values().map(|w| w.samples.len()).sum()
    }

    /// The stalls decided so far, taken.
    pub fn take_found(&mut self) -> Vec<(Stall, T)> {
        std::mem::take(&mut self.decided.found)
    }

    /// `conn` has ended (a watched connection closed): its candidates are decided on what came
    /// and its window is freed, so a long watch holds only its open connections.
    pub fn end_connection(&mut self, conn: ConnId) {
        if let Some(mut window) = self.windows.remove(&conn) {
            decide(conn, &mut window, true, &mut self.decided);
        }
    }

    /// The capture has ended: every candidate is decided on what came, and the stalls not yet
    /// taken are returned.
    pub fn finish(mut self) -> Vec<(Stall, T)> {
        self.end_all();
        self.decided.found
    }

    /// Every connection has ended: their candidates are decided on what came (for
    /// [`StallFinder::take_found`]) and their windows freed.
    pub fn end_all(&mut self) {
        for (conn, mut window) in std::mem::take(&mut self.windows) {
            decide(conn, &mut window, true, &mut self.decided);
        }
    }
}

/// Decides `window`'s candidates in order while they can be (all of them when `at_end`), then
/// drops the segments before the first one left.
fn decide<T: Clone>(conn: ConnId, window: &mut Window<T>, at_end: bool, decided: &mut Decided<T>) {
    let newest_read = window.reads.back().map_or(0, |r| r.at_ns);
    let newest = window.samples.last().map_or(0, |s| s.at_ns).max(newest_read);
    loop {
        let Some(small) = window.held().iter().position(|s| s.len > 0) else {
            window.samples.clear();
            window.tags.clear();
            window.start = 0;
            return;
        };
        window.start += small;
        let first = window.samples[window.start];
        // A timer that fired before this candidate's segment sent no ACK of it.
        while window.timers.front().is_some_and(|&(_, at)| at < first.at_ns) {
            window.timers.pop_front();
        }
        // Nor did a read that returned before it take its held bytes.
        while window.reads.front().is_some_and(|r| r.at_ns < first.at_ns) {
            window.reads.pop_front();
        }
        let samples = window.held();
        let over = samples.len() > MAX_WINDOW;
        let final_ = at_end || over || newest > first.at_ns.saturating_add(DECIDED_AFTER_NS);
        match hold_so_far(samples, 0, 0) {
            Ok(hold) => {
                let (ack, held) = (samples[hold.ack], samples[hold.held]);
                let tags = &window.tags[window.start..];
                let (req, _) = &tags[0];
                let ended_by = tags[hold.held].1.clone();
                // The reader's timer, fired as its ACK left.
                let timer = window.timers.iter().find(|&&(side, at)| {
                    side == ack.side && at.abs_diff(ack.at_ns) <= TIMER_TO_ACK_NS
                });
                let timer = timer.map(|&(_, at)| at);
                // The reader's recv() that slept until the held bytes came: from before they
                // came, returning as they did.
                let read = window.reads.iter().find(|r| {
                    r.side == held.side.peer() && took_held_bytes(r.since_ns, r.at_ns, held.at_ns)
                });
                let read = read.copied();
                // Where the reader's calls are seen (a watch as root), a hold whose read has
                // not come yet waits for it, a little.
                let read_due = decided.reads_seen
                    && read.is_none()
                    && newest < held.at_ns.saturating_add(DATA_TO_READ_NS);
                if read_due && !at_end && !over {
                    window.drop_passed();
                    return;
                }
                decided.confirmed_by_timer += u64::from(timer.is_some());
                decided.waited_in_recv += u64::from(read.is_some());
                let mut stall = nagle_stall(conn, *req, first, held);
                if decided.evidence {
                    stall.evidence = nagle_evidence(first, ack, held, timer, read);
                }
                decided.found.push((stall, ended_by));
            }
            Err(Miss::NotYet(_)) if !final_ => {
                window.drop_passed();
                return;
            }
            Err(_) => {}
        }
        // This candidate is decided: the next data segment is the next candidate.
        window.start += 1;
    }
}

/// The stall of a hold (the small segment and the held data), its evidence not yet put into
/// words ([`nagle_evidence`]).
fn nagle_stall(conn: ConnId, req: ReqId, small: SegmentSample, held: SegmentSample) -> Stall {
    let sender = small.side;
    let receiver = sender.peer();
    Stall {
        req,
        conn,
        side: receiver,
        from: sender,
        to: receiver,
        start_ns: small.at_ns,
        end_ns: held.at_ns,
        wait_ns: held.at_ns - small.at_ns,
        class: StallClass::NagleDelayedAck,
        evidence: String::new(),
    }
}

/// A hold's evidence in words; `timer`: when the reader's delayed-ACK timer fired, if seen.
fn nagle_evidence(
    small: SegmentSample,
    ack: SegmentSample,
    held: SegmentSample,
    timer: Option<u64>,
    read: Option<SleptRead>,
) -> String {
    let receiver = small.side.peer();
    // "4-byte segment at 0.010000 s, pure ACK 43.6 ms later, 2048 bytes 30 us after it", put
    // together piece by piece: a capture has a stall every few segments, and `format!` made
    // this line a third of the CPU of reading one.
    let mut text = Vec::with_capacity(96);
    push_digits(&mut text, u64::from(small.len));
    text.extend_from_slice(b"-byte segment at ");
    Fixed { ns: small.at_ns, unit_ns: 1_000_000_000, decimals: 6 }.push_to(&mut text);
    text.extend_from_slice(b" s, pure ACK ");
    Duration(ack.at_ns - small.at_ns).push_to(&mut text);
    text.extend_from_slice(b" later, ");
    push_digits(&mut text, u64::from(held.len));
    text.extend_from_slice(b" bytes ");
    Duration(held.at_ns - ack.at_ns).push_to(&mut text);
    text.extend_from_slice(b" after it");
    let mut evidence = String::from_utf8(text).expect("digits and words are ASCII");
    if let Some(at_ns) = timer {
        evidence.push_str(&format!(
            "; the {}'s delayed-ACK timer sent that ACK, firing {} after the segment (seen in \
             the kernel)",
            receiver.name(),
            Duration(at_ns.saturating_sub(small.at_ns)),
        ));
    }
    if let Some(read) = read {
        evidence.push_str(&format!(
            "; the {}'s recv() slept {} until the held bytes came (seen in the kernel)",
            receiver.name(),
            Duration(read.at_ns.saturating_sub(read.since_ns)),
        ));
    }
    evidence
}

/// "43.6 ms", "30 us".
struct Duration(u64);

impl Duration {
    /// Appends what `Display` writes.
    fn push_to(&self, out: &mut Vec<u8>) {
        match self.0 {
            ns if ns >= 1_000_000 => {
                Fixed { ns, unit_ns: 1_000_000, decimals: 1 }.push_to(out);
                out.extend_from_slice(b" ms");
            }
            ns => {
                push_digits(out, ns / 1000);
                out.extend_from_slice(b" us");
            }
        }
    }
}

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = Vec::new();
        self.push_to(&mut text);
        f.write_str(std::str::from_utf8(&text).expect("ASCII"))
    }
}

/// Appends `value` in decimal, as `Display` writes it: two digits a division, from the right.
fn push_digits(out: &mut Vec<u8>, mut value: u64) {
    const PAIRS: &[u8; 200] = b"\
        0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while value >= 10 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    // A digit left (or the one digit of 0): a last pair taken had no leading zero.
    if value > 0 || at == digits.len() {
        at -= 1;
        digits[at] = b'0' + value as u8;
    }
    out.extend_from_slice(&digits[at..]);
}

/// `ns` in units of `unit_ns` with `decimals` places: exactly what
/// `format!("{:.decimals$}", ns as f64 / unit_ns as f64)` writes, worked out in integers. Every
/// stall found in a capture says when it started and how long its parts took, and the float
/// formatting of those three numbers was most of the cost of finding it.
///
/// Why it is exact: with `step = unit_ns / 10^decimals`, the float formatting rounds
/// `q = ns / unit_ns` (one correctly rounded division of exact operands below 2^53) to the
/// nearest multiple of 10^-decimals, which is `ns / step` rounded to an integer. `q` is within
/// a relative 2^-53 of the true quotient: less than `1 / step` of a last place. Unless
/// `ns % step` is exactly half a step, the true quotient is at least `1 / step` of a last place
/// from the halfway point, so `q` rounds the same way as the true quotient, which is what the
/// integers compute. That half (a decimal tie, where the float's own error decides) and values
/// past 2^53 are left to the float formatting.
struct Fixed {
    ns: u64,
    unit_ns: u64,
    decimals: u32,
}

impl Fixed {
    /// Appends what `Display` writes: the digits by hand, a decimal tie and values past 2^53
    /// through the float formatting.
    fn push_to(&self, out: &mut Vec<u8>) {
        let places = self.decimals as usize;
        let scale = 10u64.pow(self.decimals);
        let step = self.unit_ns / scale;
        let whole_steps = step >= 2 && step % 2 == 0 && step * scale == self.unit_ns;
        if !whole_steps || self.ns >= 1 << 53 || self.ns % step == step / 2 {
            let value = self.ns as f64 / self.unit_ns as f64;
            out.extend_from_slice(format!("{value:.places$}").as_bytes());
            return;
        }
        let rounded = self.ns / step + u64::from(self.ns % step > step / 2);
        push_digits(out, rounded / scale);
        if places > 0 {
            out.push(b'.');
            let fraction = rounded % scale;
            // Zeros first, to `places` digits in all.
            let width = fraction.checked_ilog10().map_or(1, |log| log as usize + 1);
            out.extend((width..places).map(|_| b'0'));
            push_digits(out, fraction);
        }
    }
}

impl std::fmt::Display for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = Vec::new();
        self.push_to(&mut text);
        f.write_str(std::str::from_utf8(&text).expect("ASCII"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::summarize;
    use crate::event::tcp_flags::{ACK, PSH};
    use crate::event::{ConnId, ReqId, Segment, Side};

    const MS: u64 = 1_000_000;

    fn seg(at_ns: u64, side: Side, seq: u32, ack: u32, len: u32, flags: u8) -> Event {
        Event {
            at_ns,
            side,
            conn: ConnId(1),
            req: ReqId(0),
            kind: EventKind::Segment(Segment { flags, seq, ack, len, ..Segment::default() }),
        }
    }

    /// One request of story 1: the client writes 4 bytes then 2048; the server answers the same.
    fn nagle_exchange(t: u64, cseq: u32, sseq: u32) -> Vec<Event> {
        use Side::{Client, Server};
        vec![
            seg(t, Client, cseq, sseq, 4, PSH | ACK),
            seg(t + 43_600_000, Server, sseq, cseq.wrapping_add(4), 0, ACK),
            seg(t + 43_630_000, Client, cseq.wrapping_add(4), sseq, 2048, PSH | ACK),
            seg(t + 43_700_000, Server, sseq, cseq.wrapping_add(2052), 4, PSH | ACK),
            seg(t + 87_300_000, Client, cseq.wrapping_add(2052), sseq.wrapping_add(4), 0, ACK),
            seg(
                t + 87_330_000,
                Server,
                sseq.wrapping_add(4),
                cseq.wrapping_add(2052),
                2048,
                PSH | ACK,
            ),
            seg(t + 87_400_000, Client, cseq.wrapping_add(2052), sseq.wrapping_add(2052), 0, ACK),
        ]
    }

    /// A finder without evidence finds the same stalls, field for field, their words left out:
    /// what a tally keeps (class, direction, wait) is the same either way.
    #[test]
    fn without_evidence_finds_the_same_stalls() {
        let mut events = Vec::new();
        for i in 0..20u32 {
            events.extend(nagle_exchange(
                u64::from(i) * 200 * MS,
                1000 + i * 4096,
                5000 + i * 4096,
            ));
        }
        let mut worded = StallFinder::default();
        let mut bare = StallFinder::without_evidence();
        for (i, event) in events.iter().enumerate() {
            worded.push(event, i);
            bare.push(event, i);
        }
        let (worded, bare) = (worded.finish(), bare.finish());
        assert_eq!(worded.len(), 40);
        assert_eq!(bare.len(), worded.len());
        for ((w, w_end), (b, b_end)) in worded.iter().zip(&bare) {
            assert!(w.evidence.contains("pure ACK"), "{}", w.evidence);
            assert_eq!(b.evidence, "");
            assert_eq!(Stall { evidence: String::new(), ..w.clone() }, *b);
            assert_eq!(w_end, b_end);
        }
    }

    /// A watch ends a connection at its second FIN; the last ACK of its teardown comes after.
    /// That ACK holds nothing to decide, and must not open a window again: a watch of a service
    /// whose clients reconnect would otherwise keep one for every connection it ever saw.
    #[test]
    fn the_last_ack_after_a_connection_ended_keeps_nothing() {
        use crate::event::tcp_flags::FIN;
        let mut finder = StallFinder::without_evidence();
        for conn in 1..=100 {
            let mut teardown = nagle_exchange(0, 1000, 5000);
            teardown.push(seg(90 * MS, Side::Client, 3052, 2052, 0, FIN | ACK));
            teardown.push(seg(91 * MS, Side::Server, 2052, 3053, 0, FIN | ACK));
            let mut last_ack = seg(92 * MS, Side::Client, 3053, 2053, 0, ACK);
            for event in teardown.iter_mut().chain(std::iter::once(&mut last_ack)) {
                event.conn = ConnId(conn);
            }
            teardown.iter().for_each(|e| finder.push(e, ()));
            finder.end_connection(ConnId(conn));
            finder.push(&last_ack, ());
        }
        assert_eq!(finder.take_found().len(), 200, "both stalls of each connection");
        assert_eq!(finder.connections(), 0, "no window left for a connection that ended");
    }

    #[test]
    fn nagle_both_ways() {
        let events = nagle_exchange(10 * MS, 1000, 5000);
        let found = find(&events);
        assert_eq!(found.len(), 2);
        let s = &found[0];
        assert_eq!((s.stall.from, s.stall.to), (Side::Client, Side::Server));
        assert_eq!(s.ended_by, 2);
        assert_eq!(s.stall.wait_ns, 43_630_000);
        assert_eq!(
            s.stall.evidence,
            "4-byte segment at 0.010000 s, pure ACK 43.6 ms later, 2048 bytes 30 us after it"
        );
        assert_eq!((found[1].stall.from, found[1].ended_by), (Side::Server, 5));
        let lines: Vec<String> =
            summarize(&found.iter().map(|s| s.stall.clone()).collect::<Vec<_>>())
                .iter()
                .map(|c| c.line())
                .collect();
        assert!(
            lines[0].starts_with("1 stall: Nagle x delayed ACK, client->server, median 43.6 ms"),
            "{lines:?}"
        );
    }

    /// What the packets show instead of a hold, in the words `nagle_hold` has always used.
    #[test]
    fn each_miss_is_said_in_its_words() {
        use Side::{Client, Server};
        let why = |events: &[Event]| {
            let samples: Vec<SegmentSample> = events
                .iter()
                .map(|e| match &e.kind {
                    EventKind::Segment(s) => SegmentSample::new(e.side, e.at_ns, s),
                    other => panic!("{other:?}"),
                })
                .collect();
            nagle_hold(&samples, 0, 0).unwrap_err()
        };
        let exchange = nagle_exchange(0, 1, 1);
        assert_eq!(why(&exchange[..1]), "no ACK from the server of the 4-byte segment");
        let mut more = exchange.clone();
        more[1] = seg(MS, Client, 5, 1, 10, PSH | ACK);
        assert_eq!(
            why(&more[..2]),
            "the client sent more data before the server acknowledged the 4-byte segment"
        );
        let answered = [exchange[0].clone(), seg(MS, Server, 1, 1, 4, PSH | ACK)];
        assert_eq!(why(&answered), "the server answered before it acknowledged the 4-byte segment");
        let riding = [exchange[0].clone(), seg(MS, Server, 1, 5, 4, PSH | ACK)];
        assert_eq!(
            why(&riding),
            "the server's ACK of the 4-byte segment rode on its answer: not delayed"
        );
        let mut quick = exchange.clone();
        quick[1].at_ns = 1_260_000;
        assert_eq!(
            why(&quick[..2]),
            "the server acknowledged the 4-byte segment after 1.3 ms, outside the delayed-ACK \
             timer's 20-500 ms"
        );
        assert_eq!(
            why(&exchange[..2]),
            "nothing from the client followed the server's ACK of the 4-byte segment"
        );
        let mut elsewhere = exchange.clone();
        if let EventKind::Segment(s) = &mut elsewhere[2].kind {
            s.seq = 1;
        }
        assert_eq!(
            why(&elsewhere[..3]),
            "the client's next data did not start where the small segment ended"
        );
        let mut late = exchange.clone();
        late[2].at_ns = late[1].at_ns + 20_050_001;
        assert_eq!(
            why(&late[..3]),
            "the held 2048 bytes left 20.1 ms after the server's ACK, not at once"
        );
    }

    /// The integer formatting of a stall's times writes what the float formatting wrote, on
    /// either side of every rounding point, at the decimal ties (left to the float) and past
    /// 2^53.
    #[test]
    fn fixed_point_is_what_the_float_formatting_writes() {
        let mut rng = crate::analysis::batches::Rng(3);
        for (unit_ns, decimals) in [(1_000_000_000, 6), (1_000_000, 1), (1_000_000, 0)] {
            let step = unit_ns / 10u64.pow(decimals);
            let mut values = vec![0, 1, step / 2, step - 1, step, (1 << 53) - 1, 1 << 53, u64::MAX];
            for _ in 0..20_000 {
                let at = rng.below(1 << 30) as u64 * rng.below(1 << 22) as u64;
                let tie = at - at % step + step / 2;
                values.extend([at, tie, tie - 1, tie + 1]);
            }
            for ns in values {
                let float = format!("{:.*}", decimals as usize, ns as f64 / unit_ns as f64);
                let fixed = Fixed { ns, unit_ns, decimals }.to_string();
                assert_eq!(fixed, float, "{ns} ns in units of {unit_ns} ns, {decimals} places");
            }
        }
        assert_eq!(Duration(43_649_999).to_string(), "43.6 ms");
        assert_eq!(Duration(999_999).to_string(), "999 us");
        let powers = (0..20).map(|exp| 10u64.pow(exp));
        for value in powers.flat_map(|p| [p - 1, p, p + 1]).chain(0..1000).chain([u64::MAX]) {
            let mut digits = Vec::new();
            push_digits(&mut digits, value);
            assert_eq!(digits, value.to_string().as_bytes());
        }
        // Either side of the millisecond, and far past it: the words `format!` wrote.
        for _ in 0..20_000 {
            let ns = (rng.below(1 << 30) as u64 * rng.below(1 << 12) as u64) >> rng.below(40);
            let float = match ns {
                0..=999_999 => format!("{} us", ns / 1000),
                _ => format!("{:.1} ms", ns as f64 / 1e6),
            };
            assert_eq!(Duration(ns).to_string(), float, "{ns} ns");
        }
    }

    #[test]
    fn a_quick_ack_or_an_answer_is_no_stall() {
        let mut quick = nagle_exchange(0, 1, 1);
        // The ACK comes after 1 ms: no delayed-ACK timer involved.
        quick[1].at_ns = MS;
        quick[2].at_ns = MS + 30_000;
        assert_eq!(find(&quick[..3]).len(), 0);
        // The next bytes come 20 ms after the ACK: not released by it.
        let mut late = nagle_exchange(0, 1, 1);
        late[2].at_ns = late[1].at_ns + 20 * MS;
        assert_eq!(find(&late[..3]).len(), 0);
        // A retransmission of the small segment is not the held data.
        let mut retrans = nagle_exchange(0, 1, 1);
        if let EventKind::Segment(s) = &mut retrans[2].kind {
            s.seq = 1;
        }
        assert_eq!(find(&retrans[..3]).len(), 0);
    }

    /// The server's delayed-ACK timer seen firing as its ACK left (a watch as root): the stall
    /// says so, and is counted as confirmed. A timer on the other side, or one far from the
    /// ACK, confirms nothing.
    #[test]
    fn a_delayed_ack_timer_seen_firing_with_the_ack_is_named_in_the_evidence() {
        let timer = |at_ns: u64, side: Side| Event {
            at_ns,
            side,
            conn: ConnId(1),
            req: ReqId(0),
            kind: EventKind::DelayedAck,
        };
        let stalls_with = |timers: Vec<Event>| {
            let events = nagle_exchange(10 * MS, 1000, 5000);
            let mut finder = StallFinder::default();
            finder.push(&events[0], ());
            for t in &timers {
                finder.push(t, ());
            }
            for event in &events[1..] {
                finder.push(event, ());
            }
            let confirmed = finder.confirmed_by_timer();
            let mut found = finder.take_found();
            found.extend(finder.finish());
            (found.into_iter().map(|(stall, ())| stall).collect::<Vec<_>>(), confirmed)
        };
        // The server's ACK of the client's 4 bytes is at 10 + 43.6 ms.
        let (stalls, confirmed) = stalls_with(vec![timer(10 * MS + 43_590_000, Side::Server)]);
        assert_eq!((stalls.len(), confirmed), (2, 1));
        let to_server = &stalls[0];
        assert_eq!(to_server.to, Side::Server);
        assert!(
            to_server.evidence.ends_with(
                "; the server's delayed-ACK timer sent that ACK, firing 43.6 ms after the segment \
                 (seen in the kernel)"
            ),
            "{}",
            to_server.evidence
        );
        assert!(!stalls[1].evidence.contains("timer"), "{}", stalls[1].evidence);
        for miss in
            [timer(10 * MS + 43_590_000, Side::Client), timer(10 * MS + 30 * MS, Side::Server)]
        {
            let (stalls, confirmed) = stalls_with(vec![miss]);
            assert_eq!((stalls.len(), confirmed), (2, 0));
            assert!(stalls.iter().all(|s| !s.evidence.contains("timer")));
        }
    }

    /// The receiving program's `recv()` seen sleeping until the held bytes came (a watch as
    /// root): the stall says so, and is counted. Once such calls are seen, a hold whose read
    /// has not come yet waits for it (the read returns just after the bytes it took came), and
    /// is decided without it once later events pass; a read on the other side, or one that
    /// slept only after the bytes came, is no such read.
    #[test]
    fn a_recv_seen_sleeping_until_the_held_bytes_came_is_named_in_the_evidence() {
        let read = |since_ns: u64, at_ns: u64, side: Side| Event {
            at_ns,
            side,
            conn: ConnId(1),
            req: ReqId(0),
            kind: EventKind::BlockedCall { call: Call::Recv, since_ns, bytes: 2048 },
        };
        let t = 10 * MS;
        // An earlier exchange's read: this finder's source records them.
        let earlier = read(MS, 2 * MS, Side::Server);
        let stalls_with = |reads: Vec<(usize, Event)>| {
            let events = nagle_exchange(t, 1000, 5000);
            let mut finder = StallFinder::default();
            finder.push(&events[0], ());
            finder.push(&earlier, ());
            let mut decided_at = Vec::new();
            for (i, event) in events.iter().enumerate().skip(1) {
                finder.push(event, ());
                for (after, read) in &reads {
                    if *after == i {
                        finder.push(read, ());
                    }
                }
                decided_at.extend(finder.take_found().into_iter().map(|(stall, ())| (i, stall)));
            }
            let in_recv = finder.waited_in_recv();
            decided_at.extend(finder.finish().into_iter().map(|(stall, ())| (usize::MAX, stall)));
            (decided_at, in_recv)
        };
        // The server's recv() slept from just after the 4 bytes came until the 2048 came
        // (events[2], at t + 43.63 ms), and returned after that segment was seen.
        let server_read = read(t + 50_000, t + 43_650_000, Side::Server);
        let (stalls, in_recv) = stalls_with(vec![(2, server_read.clone())]);
        assert_eq!((stalls.len(), in_recv), (2, 1));
        let (decided, to_server) = &stalls[0];
        assert_eq!(to_server.to, Side::Server);
        assert_eq!(*decided, 2, "decided as its read came, not before");
        assert!(
            to_server.evidence.ends_with(
                "; the server's recv() slept 43.6 ms until the held bytes came (seen in the kernel)"
            ),
            "{}",
            to_server.evidence
        );
        // The other stall's read never came: decided once the events passed its bytes by more
        // than the wait (here: at the end), without it.
        assert!(!stalls[1].1.evidence.contains("recv()"), "{}", stalls[1].1.evidence);
        // No read for the first hold either: decided without one once an event 2 ms past its
        // bytes came (the server's answer at +43.70 ms is not; the client's ACK at +87.3 is).
        let (stalls, in_recv) = stalls_with(vec![]);
        assert_eq!((stalls.len(), in_recv), (2, 0));
        assert_eq!(stalls[0].0, 4, "{stalls:?}");
        for miss in [
            read(t + 50_000, t + 43_650_000, Side::Client),
            read(t + 43_640_000, t + 43_650_000, Side::Server),
        ] {
            let (stalls, in_recv) = stalls_with(vec![(2, miss)]);
            assert_eq!((stalls.len(), in_recv), (2, 0));
            assert!(stalls.iter().all(|(_, s)| !s.evidence.contains("recv()")));
        }
    }

    /// Story 1 exchanges one after another, fed one segment at a time: the stalls come out as
    /// they are decided, the same as the whole-slice `find`, with a window of a few segments.
    #[test]
    fn streamed_segments_give_the_stalls_of_the_whole_capture_in_a_small_window() {
        let mut events = Vec::new();
        for i in 0..1000u32 {
            let t = u64::from(i) * 100 * MS;
            events.extend(nagle_exchange(t, 1000 + i * 2052, 5000 + i * 2052));
        }
        let mut finder = StallFinder::default();
        let (mut streamed, mut most_held) = (Vec::new(), 0);
        for (i, event) in events.iter().enumerate() {
            finder.push(event, i);
            most_held = most_held.max(finder.held_segments());
            streamed.extend(finder.take_found());
        }
        streamed.extend(finder.finish());
        let whole = find(&events);
        assert_eq!(whole.len(), 2000);
        let whole: Vec<(Stall, usize)> = whole.into_iter().map(|s| (s.stall, s.ended_by)).collect();
        assert_eq!(streamed, whole);
        assert!(most_held <= 8 + PASSED_KEPT, "held {most_held} segments at most");
    }

    /// A small segment never acknowledged, then thousands of segments that never decide it: the
    /// window stops at its bound and the candidate is given up, not held for ever.
    #[test]
    fn an_undecided_candidate_is_given_up_at_the_window_bound() {
        use Side::Client;
        let mut finder = StallFinder::default();
        finder.push(&seg(0, Client, 1, 1, 4, PSH | ACK), ());
        for i in 0..10 * MAX_WINDOW as u64 {
            // Pure ACKs from the writer itself, microseconds apart: nothing that decides it.
            finder.push(&seg(i * 1000, Client, 5, 1, 0, ACK), ());
            assert!(finder.held_segments() <= 2 * (MAX_WINDOW + 1) + PASSED_KEPT);
        }
        assert!(finder.finish().is_empty());
    }

    #[test]
    fn sequence_numbers_wrap() {
        let events = nagle_exchange(0, u32::MAX - 1, 7);
        assert_eq!(find(&events).len(), 2);
    }

    #[test]
    fn connections_are_kept_apart_and_other_kinds_ignored() {
        let mut events = nagle_exchange(0, 1, 1);
        for e in &mut events[3..] {
            e.conn = ConnId(2);
        }
        events.insert(
            0,
            Event {
                at_ns: 0,
                side: Side::Client,
                conn: ConnId(1),
                req: ReqId(0),
                kind: EventKind::Connected,
            },
        );
        let found = find(&events);
        let got: Vec<(ConnId, usize)> = found.iter().map(|s| (s.stall.conn, s.ended_by)).collect();
        assert_eq!(got, [(ConnId(1), 3), (ConnId(2), 6)]);
    }
}
