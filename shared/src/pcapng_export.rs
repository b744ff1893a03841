//! A session's captured segments as pcapng for Wireshark: one interface per run, each stall's
//! explanation as the comment of the packet that ended it. Pure over the messages and any
//! `Write` (`ackscope export --pcapng` into a file, the page into a download).
//!
//! Memory holds the stalls, never the segments, whatever the length of a run. A stall is known
//! only after the packet that ended it went by: one found from the syscalls when its request
//! retires (thousands of requests later) or at the run's end, one found in the packets once its
//! window is decided. So the session is read three times, each from its start (`messages` gives
//! the stream anew: the command line reads its file again, the page its bytes):
//! 1. the reducer and the packet rule: each run's stalls, those found in the packets with the
//!    segment that ended them (its ordinal among the run's segments), at most
//!    [`MAX_KEPT_STALLS`] in all (the rest counted in [`Written::stalls_left_out`]); a run that
//!    captured no segment keeps none;
//! 2. only when a run has stalls found from the syscalls: the segment that ended each, the last
//!    data segment from the writer on the stall's connection within the stall, found as the
//!    segments go by (see [`Claims`]), unless a packet stall has that segment already;
//! 3. the packets, written as they come, each with its stall's explanation.
//!
//! (Holding a window of segments until no stall could claim them any more was the other way:
//! but a request's stalls come out when it retires, 2,048 requests on, or at the run's end if
//! it never settles, so the window would need a cap that loses comments on ordinary runs. The
//! passes are exact and cost two more reads, which decode but do not analyse.)
//!
//! The output: one interface per run followed, described when the run starts, and the packets
//! in the order the session holds them. A recorded session has one run at a time, so each
//! run's packets come together, in the order the runs ended; runs that overlap (only a crafted
//! file has them) have their packets interleaved. The packet rule takes each connection's
//! segments in the order the session holds them, as `show` does for an imported capture: for a
//! capture that is their time order.

use std::collections::{HashSet, VecDeque};
use std::io::{self, Write};

use crate::event::{ConnId, Event, EventKind, RunId, Side};
use crate::keyed_hash::KeyedMap;
use crate::packet::{synthesize, Packet};
use crate::packet_stalls::StallFinder;
use crate::pcap::{linktype, PcapngWriter};
use crate::reduce::{Output, SessionReducer};
use crate::stall::{Stall, StallClass};
use crate::wire::{ToBrowser, WireError};

/// What was written, for the closing line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub packets: u64,
    /// Packets that carry a stall's explanation.
    pub comments: u64,
    /// Stalls of runs with packets whose explanation was not kept: those past
    /// [`MAX_KEPT_STALLS`].
    pub stalls_left_out: u64,
}

/// Stalls kept from the first pass to the last, all runs together (about 200 bytes each, their
/// evidence included): a session with more has the rest's explanations left out, and counted.
/// Story 1 captured has four a request (two from the packets, two from the syscalls), so this
/// is 16,000 requests of it.
pub const MAX_KEPT_STALLS: usize = 65_536;

/// The file is written as it is made, this much at a time.
const FLUSH_BYTES: usize = 1 << 20;

/// Writes the pcapng of the session that `messages` reads (each call gives its messages from
/// the start, the same each time) to `out`; returns what it wrote and the error that ended the
/// messages, if one did (everything before it is written).
pub fn write_pcapng<I>(
    messages: impl FnMut() -> I,
    out: &mut impl Write,
) -> io::Result<(Written, Option<WireError>)>
where
    I: Iterator<Item = Result<ToBrowser, WireError>>,
{
    write_keeping(messages, out, MAX_KEPT_STALLS)
}

/// [`write_pcapng`] keeping at most `max_kept` stalls.
fn write_keeping<I>(
    mut messages: impl FnMut() -> I,
    out: &mut impl Write,
    max_kept: usize,
) -> io::Result<(Written, Option<WireError>)>
where
    I: Iterator<Item = Result<ToBrowser, WireError>>,
{
    let (mut stalls, stalls_left_out) = find_stalls(messages(), max_kept);
    if stalls.values().any(|run| !run.from_syscalls.is_empty()) {
        claim_segments(messages(), &mut stalls);
    }
    let (mut written, error) = write_packets(messages(), stalls, out)?;
    written.stalls_left_out = stalls_left_out;
    Ok((written, error))
}

/// A followed run's number: the runs the reducer follows, counted in the order they started.
/// The same in every pass (an id may start again; a number is never reused).
type RunNumber = u64;

/// What [`follow`] reports of the runs the reducer follows.
enum Seen<'a> {
    Started(RunNumber, RunId),
    /// A captured segment of a followed run, with its ordinal among the run's segments.
    Segment(RunNumber, u64, &'a Event),
    /// A delayed-ACK timer seen firing (a watch as root): the packet rule cites it.
    Timer(RunNumber, &'a Event),
    /// Stalls the reducer handed out (when asked to analyse): as requests retire, and those of
    /// the requests still held just before the run's end.
    Stalls(RunNumber, Vec<Stall>),
    Ended(RunNumber),
}

/// One pass over `messages`, following runs as the reducer does: `seen` is told each followed
/// run's start, segments, stalls (only when `analyse`) and end. Without `analyse` the events go
/// to no analysis: which runs are followed depends on their starts and ends alone. Returns the
/// error that ended the messages, if one did.
fn follow(
    messages: impl Iterator<Item = Result<ToBrowser, WireError>>,
    analyse: bool,
    mut seen: impl FnMut(Seen<'_>) -> io::Result<()>,
) -> io::Result<Option<WireError>> {
    let mut reducer =
        if analyse { SessionReducer::hand_out_stalls() } else { SessionReducer::new() };
    let mut open: KeyedMap<RunId, (RunNumber, u64)> = KeyedMap::default();
    let mut started: RunNumber = 0;
    let mut steps = Vec::new();
    let mut error = None;
    let mut changed = |steps: &mut Vec<Output>,
                       open: &mut KeyedMap<RunId, (RunNumber, u64)>,
                       seen: &mut dyn FnMut(Seen<'_>) -> io::Result<()>|
     -> io::Result<()> {
        for step in steps.drain(..) {
            match step {
                Output::Started(run) => {
                    open.insert(run, (started, 0));
                    seen(Seen::Started(started, run))?;
                    started += 1;
                }
                Output::Stalls(run, stalls) => {
                    if let Some(&(number, _)) = open.get(&run) {
                        seen(Seen::Stalls(number, stalls))?;
                    }
                }
                Output::Ended(ended, held) => {
                    let Some((number, _)) = open.remove(&ended.run) else { continue };
                    if !held.is_empty() {
                        seen(Seen::Stalls(number, held))?;
                    }
                    seen(Seen::Ended(number))?;
                }
            }
        }
        Ok(())
    };
    for message in messages {
        let message = match message {
            Ok(message) => message,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        if let ToBrowser::Events { run, events } = &message {
            if let Some((number, segments)) = open.get_mut(run) {
                for event in events {
                    match event.kind {
                        EventKind::Segment(_) => {
                            seen(Seen::Segment(*number, *segments, event))?;
                            *segments += 1;
                        }
                        EventKind::DelayedAck => seen(Seen::Timer(*number, event))?,
                        _ => {}
                    }
                }
            }
            if !analyse {
                // Events neither start nor end a run.
                continue;
            }
        }
        reducer.handle(&message, &mut steps);
        changed(&mut steps, &mut open, &mut seen)?;
    }
    reducer.finish(&mut steps);
    changed(&mut steps, &mut open, &mut seen)?;
    Ok(error)
}

/// A run's stalls, from the first pass to the last.
#[derive(Default)]
struct RunStalls {
    /// Stalls with the ordinal of the segment that ended each (found in the packets, and after
    /// the second pass those found from the syscalls that a segment ended).
    by_segment: Vec<(u64, Stall)>,
    /// Stalls found from the syscalls, in the order the reducer handed them out, until the
    /// second pass finds their segments.
    from_syscalls: Vec<Stall>,
}

/// The first pass: every followed run's stalls, at most `max_kept` in all; with the number of
/// stalls past that bound in runs that have segments.
fn find_stalls(
    messages: impl Iterator<Item = Result<ToBrowser, WireError>>,
    max_kept: usize,
) -> (KeyedMap<RunNumber, RunStalls>, u64) {
    /// A run still going: its packet rule, its stalls so far, and those not kept.
    struct Open {
        finder: StallFinder<u64>,
        segments: u64,
        stalls: RunStalls,
        left_out: u64,
    }
    let mut open: KeyedMap<RunNumber, Open> = KeyedMap::default();
    let mut kept_runs: KeyedMap<RunNumber, RunStalls> = KeyedMap::default();
    let (mut kept, mut left_out) = (0usize, 0u64);
    // Keeps a stall if the bound allows.
    let keep = |kept: &mut usize, run: &mut Open, stall: Stall, segment: Option<u64>| {
        if *kept >= max_kept {
            run.left_out += 1;
            return;
        }
        *kept += 1;
        match segment {
            Some(segment) => run.stalls.by_segment.push((segment, stall)),
            None => run.stalls.from_syscalls.push(stall),
        }
    };
    // (The error that ended the messages is the last pass's to report.)
    let _ = follow(messages, true, |seen| {
        match seen {
            Seen::Started(number, _) => {
                let finder = StallFinder::default();
                let stalls = RunStalls::default();
                open.insert(number, Open { finder, segments: 0, stalls, left_out: 0 });
            }
            Seen::Segment(number, ordinal, event) => {
                let Some(run) = open.get_mut(&number) else { return Ok(()) };
                run.finder.push(event, ordinal);
                run.segments += 1;
                for (stall, ended_by) in run.finder.take_found() {
                    keep(&mut kept, run, stall, Some(ended_by));
                }
            }
            Seen::Timer(number, event) => {
                // Not a segment: its tag never comes back with a stall.
                if let Some(run) = open.get_mut(&number) {
                    run.finder.push(event, u64::MAX);
                }
            }
            Seen::Stalls(number, stalls) => {
                let Some(run) = open.get_mut(&number) else { return Ok(()) };
                for stall in stalls {
                    keep(&mut kept, run, stall, None);
                }
            }
            Seen::Ended(number) => {
                let Some(mut run) = open.remove(&number) else { return Ok(()) };
                let finder = std::mem::take(&mut run.finder);
                for (stall, ended_by) in finder.finish() {
                    keep(&mut kept, &mut run, stall, Some(ended_by));
                }
                if run.segments == 0 {
                    // No packet to carry them.
                    kept -= run.stalls.by_segment.len() + run.stalls.from_syscalls.len();
                } else {
                    left_out += run.left_out;
                    kept_runs.insert(number, run.stalls);
                }
            }
        }
        Ok(())
    });
    (kept_runs, left_out)
}

/// The second pass: the segment that ended each stall found from the syscalls, by the rule of
/// [`Claims`]; a segment carries one stall, and one found in the packets comes first.
fn claim_segments(
    messages: impl Iterator<Item = Result<ToBrowser, WireError>>,
    runs: &mut KeyedMap<RunNumber, RunStalls>,
) {
    let mut open: KeyedMap<RunNumber, Claims> = KeyedMap::default();
    let _ = follow(messages, false, |seen| {
        match seen {
            Seen::Started(number, _) => {
                let Some(run) = runs.get_mut(&number) else { return Ok(()) };
                if !run.from_syscalls.is_empty() {
                    open.insert(number, Claims::new(std::mem::take(&mut run.from_syscalls)));
                }
            }
            Seen::Segment(number, ordinal, event) => {
                if let Some(claims) = open.get_mut(&number) {
                    claims.segment(ordinal, event);
                }
            }
            Seen::Stalls(..) | Seen::Timer(..) => {}
            Seen::Ended(number) => {
                let (Some(claims), Some(run)) = (open.remove(&number), runs.get_mut(&number))
                else {
                    return Ok(());
                };
                let mut taken: HashSet<u64> = run.by_segment.iter().map(|(i, _)| *i).collect();
                for (stall, segment) in claims.ended() {
                    if let Some(segment) = segment.filter(|&i| taken.insert(i)) {
                        run.by_segment.push((segment, stall));
                    }
                }
            }
        }
        Ok(())
    });
}

/// Finds, for each stall found from the syscalls, the last data segment from the writer on its
/// connection within the stall (for Nagle x delayed ACK, the held data that followed the
/// delayed ACK), "last" by time, then by order in the run. The segments go by once, in any
/// order, and are not kept: per connection and direction the stalls are sorted by their end, a
/// segment is kept in the slot of the first stall ending at or after it (the latest there), and
/// at the run's end a running maximum over the slots gives each stall the latest segment up to
/// its end, which ended it if it is not before its start.
struct Claims {
    stalls: Vec<Stall>,
    by_direction: KeyedMap<(ConnId, Side), Slots>,
}

/// One connection and direction's stalls, by their end.
#[derive(Default)]
struct Slots {
    /// Each stall's end and index, in order.
    ends: Vec<(u64, usize)>,
    /// The latest segment (time, ordinal) of each slot.
    latest: Vec<Option<(u64, u64)>>,
}

impl Claims {
    fn new(stalls: Vec<Stall>) -> Claims {
        let mut by_direction: KeyedMap<(ConnId, Side), Slots> = KeyedMap::default();
        for (index, stall) in stalls.iter().enumerate() {
            by_direction
                .entry((stall.conn, stall.from))
                .or_default()
                .ends
                .push((stall.end_ns, index));
        }
        for slots in by_direction.values_mut() {
            slots.ends.sort_unstable();
            slots.latest = vec![None; slots.ends.len()];
        }
        Claims { stalls, by_direction }
    }

    fn segment(&mut self, ordinal: u64, event: &Event) {
        let EventKind::Segment(segment) = &event.kind else { return };
        if segment.len == 0 {
            return;
        }
        let Some(slots) = self.by_direction.get_mut(&(event.conn, event.side)) else { return };
        let slot = slots.ends.partition_point(|&(end, _)| end < event.at_ns);
        if let Some(latest) = slots.latest.get_mut(slot) {
            *latest = (*latest).max(Some((event.at_ns, ordinal)));
        }
    }

    /// Each stall, in the order given, with the ordinal of the segment that ended it.
    fn ended(self) -> Vec<(Stall, Option<u64>)> {
        let mut ended_by = vec![None; self.stalls.len()];
        for slots in self.by_direction.values() {
            let mut latest = None;
            for (&(_, index), &here) in slots.ends.iter().zip(&slots.latest) {
                latest = latest.max(here);
                let start = self.stalls[index].start_ns;
                ended_by[index] = latest.filter(|&(at, _)| at >= start).map(|(_, ordinal)| ordinal);
            }
        }
        self.stalls.into_iter().zip(ended_by).collect()
    }
}

/// The last pass: every followed run's packets as they come, each stall's explanation on the
/// packet that ended it.
fn write_packets(
    messages: impl Iterator<Item = Result<ToBrowser, WireError>>,
    mut runs: KeyedMap<RunNumber, RunStalls>,
    out: &mut impl Write,
) -> io::Result<(Written, Option<WireError>)> {
    /// A run being written: its interface and its comments to come, by segment ordinal.
    struct Open {
        iface: u32,
        comments: VecDeque<(u64, Stall)>,
    }
    let mut bytes = Vec::new();
    let mut writer = PcapngWriter::new(&mut bytes);
    let mut open: KeyedMap<RunNumber, Open> = KeyedMap::default();
    let mut written = Written::default();
    let error = follow(messages, false, |seen| {
        match seen {
            Seen::Started(number, run) => {
                let iface = writer.interface(&format!("ackscope run {}", run.0), linktype::RAW);
                let mut stalls = runs.remove(&number).unwrap_or_default().by_segment;
                stalls.sort_by_key(|(segment, _)| *segment);
                open.insert(number, Open { iface, comments: stalls.into() });
            }
            Seen::Segment(number, ordinal, e) => {
                let Some(run) = open.get_mut(&number) else { return Ok(()) };
                let EventKind::Segment(segment) = &e.kind else { return Ok(()) };
                // (A comment for an earlier segment could be left only by a stream that
                // changed between the passes: skipped, not stuck on.)
                while run.comments.front().is_some_and(|(at, _)| *at < ordinal) {
                    run.comments.pop_front();
                }
                let stall = match run.comments.front() {
                    Some((at, _)) if *at == ordinal => run.comments.pop_front().map(|(_, s)| s),
                    _ => None,
                };
                let comment = stall.as_ref().map(comment_of);
                let packet = Packet { segment: segment.clone(), ..endpoints(e.conn, e.side) };
                let headers = synthesize(&packet);
                // On the wire: headers plus the payload that the synthesized packet leaves out.
                let on_the_wire = (headers.len() as u32).saturating_add(segment.len);
                writer.packet_with_len(
                    run.iface,
                    e.at_ns,
                    &headers,
                    on_the_wire,
                    comment.as_deref(),
                );
                written.packets += 1;
                written.comments += u64::from(comment.is_some());
                if writer.bytes().len() >= FLUSH_BYTES {
                    out.write_all(writer.bytes())?;
                    writer.bytes().clear();
                }
            }
            Seen::Stalls(..) | Seen::Timer(..) => {}
            Seen::Ended(number) => {
                open.remove(&number);
            }
        }
        Ok(())
    })?;
    out.write_all(writer.bytes())?;
    writer.bytes().clear();
    Ok((written, error))
}

/// Addresses for synthesized headers: a session keeps no addresses, so every connection is
/// shown between 127.0.0.1 ports (client 49152 + conn id, server 7, the echo port).
fn endpoints(conn: ConnId, side: Side) -> Packet {
    let client_port = 49152 + (conn.0 % 16384) as u16;
    let (src_port, dst_port) = match side {
        Side::Client => (client_port, 7),
        Side::Server => (7, client_port),
    };
    let lo = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    Packet { src: lo, dst: lo, src_port, dst_port, segment: Default::default() }
}

/// "stall: Nagle x delayed ACK, client->server, 43.6 ms wait: 4-byte segment at ..."
pub fn comment_of(stall: &Stall) -> String {
    let class = stall.class.name();
    let fix = stall.class.fixes(stall.from, stall.to).into_iter().next();
    let mut comment = format!(
        "stall: {class}, {}->{}, {:.1} ms wait",
        stall.from.name(),
        stall.to.name(),
        stall.wait_ns as f64 / 1e6
    );
    if !stall.evidence.is_empty() {
        comment.push_str(": ");
        comment.push_str(&stall.evidence);
    }
    if let (Some(fix), false) = (fix, stall.class == StallClass::Unexplained) {
        comment.push_str("; fix: ");
        comment.push_str(&fix);
    }
    comment
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap;
    use crate::reduce::RETIRE_ABOVE;
    use crate::spec::{BulkSpec, ImportSpec, RrSpec, Scenario};
    use crate::synthetic::{nagle_run_with_packets, Lcg, Script, MS, US};
    use crate::wire::{Instruments, RunOutcome};

    fn started(run: u32, spec: Scenario) -> ToBrowser {
        ToBrowser::RunStarted { run: RunId(run), spec, instruments: Instruments::default() }
    }

    fn finished(run: u32) -> ToBrowser {
        ToBrowser::RunFinished { run: RunId(run), outcome: RunOutcome::Completed }
    }

    /// `events` as the probe hands them over: in batches, here of random sizes.
    fn batches(run: u32, events: &[Event], lcg: &mut Lcg) -> Vec<ToBrowser> {
        let mut messages = Vec::new();
        let mut rest = events;
        while !rest.is_empty() {
            let (batch, after) = rest.split_at((1 + lcg.next(2000) as usize).min(rest.len()));
            messages.push(ToBrowser::Events { run: RunId(run), events: batch.to_vec() });
            rest = after;
        }
        messages
    }

    /// Exports `messages` and checks the file against the whole-run export this one replaced
    /// (`reference`), byte for byte.
    fn same_as_whole_runs(messages: &[Result<ToBrowser, WireError>]) -> Written {
        let read = || messages.iter().cloned();
        let mut streamed = Vec::new();
        let (written, error) = write_pcapng(read, &mut streamed).unwrap();
        let mut whole = Vec::new();
        let (expected, expected_error) = reference::write_pcapng(read(), &mut whole).unwrap();
        assert_eq!(error, expected_error);
        assert_eq!((written.packets, written.comments), (expected.packets, expected.comments));
        let differ = streamed.iter().zip(&whole).position(|(a, b)| a != b);
        assert!(
            streamed.len() == whole.len() && differ.is_none(),
            "{} bytes, {} expected; first difference at byte {differ:?}",
            streamed.len(),
            whole.len()
        );
        assert_eq!(written.stalls_left_out, 0);
        written
    }

    #[test]
    fn a_held_message_gets_its_explanation_on_the_packet_that_ended_it() {
        let mut script = Script::default();
        script.packets = true;
        let body_at = script.held_message(Side::Client, 0, 1_000_000, 44_000_000, 2048);
        let run = RunId(3);
        let messages = [
            ToBrowser::RunStarted {
                run,
                spec: Scenario::Rr(RrSpec::default()),
                instruments: Instruments::default(),
            },
            ToBrowser::Events { run, events: script.events.clone() },
            ToBrowser::RunFinished { run, outcome: RunOutcome::Completed },
        ];
        let mut out = Vec::new();
        let read = || messages.iter().cloned().map(Ok);
        let (written, error) = write_pcapng(read, &mut out).unwrap();
        assert_eq!(error, None);
        assert_eq!(written.packets, script.events.len() as u64);
        assert_eq!(written.comments, 1, "one hold, one explanation");
        let capture = pcap::read(&out);
        assert_eq!(capture.error, None);
        assert_eq!(capture.packets.len(), script.events.len());
        let text = String::from_utf8_lossy(&out);
        let at = text.find("stall: Nagle x delayed ACK, client->server").expect("the comment");
        // The comment is an option of the held body's block, which carries its timestamp.
        let word = |i: usize| u32::from_le_bytes(out[i..i + 4].try_into().unwrap());
        let mut block = 0;
        while block + word(block + 4) as usize <= at {
            block += word(block + 4) as usize;
        }
        assert_eq!(word(block), 6, "an enhanced packet block");
        let ts = (u64::from(word(block + 12)) << 32) | u64::from(word(block + 16));
        assert_eq!(ts, body_at, "on the held body, not on the small segment before it");
    }

    /// Story 1 captured: each held body is the packet stall's and the syscalls' stall's, and
    /// the packet stall's explanation wins it, as before. Past the retire bound the syscalls'
    /// stalls come out as requests retire, long after their packets went by.
    #[test]
    fn a_captured_story1_run_is_written_as_the_whole_run_export_wrote_it() {
        let mut lcg = Lcg(7);
        for requests in [50, RETIRE_ABOVE as u32 + 500] {
            let events = nagle_run_with_packets(requests, 44 * MS);
            let mut messages = vec![started(1, Scenario::Rr(RrSpec::default()))];
            messages.extend(batches(1, &events, &mut lcg));
            messages.push(finished(1));
            let messages: Vec<_> = messages.into_iter().map(Ok).collect();
            let written = same_as_whole_runs(&messages);
            // Every request after the first is held both ways.
            assert_eq!(written.comments, 2 * (u64::from(requests) - 1), "{requests} requests");
        }
    }

    /// Random sessions: runs one after another of every kind, each with one or two connections
    /// of story-1 exchanges held or not (some holds too short or too long for the delayed-ACK
    /// timer, some reads held with no packet to show it), extra pure ACKs, a run that starts
    /// its id again, a run the file ends in, a file cut by a bad frame.
    #[test]
    fn random_sessions_are_written_as_the_whole_run_export_wrote_them() {
        let mut lcg = Lcg(42);
        let mut comments = 0;
        for case in 0..24 {
            let mut messages = Vec::new();
            let runs = 1 + lcg.next(4) as u32;
            for run in 1..=runs {
                let spec = match lcg.next(4) {
                    0 => Scenario::Bulk(BulkSpec::default()),
                    1 => Scenario::Import(ImportSpec::default()),
                    _ => Scenario::Rr(RrSpec::default()),
                };
                messages.push(Ok(started(run, spec)));
                let mut events = Vec::new();
                for conn in 0..1 + lcg.next(2) as u32 {
                    let mut script = Script::default();
                    script.packets = lcg.next(4) > 0;
                    let mut t = u64::from(conn) * 7 * US;
                    for req in 0..lcg.next(40) as u32 {
                        let hold = [30 * US, 5 * MS, 25 * MS, 44 * MS, 200 * MS, 600 * MS]
                            [lcg.next(6) as usize];
                        t = script.exchange(req, t, t.saturating_sub(40 * US), hold) + 50 * US;
                        if lcg.next(5) == 0 {
                            // A pure ACK from either side, now and then.
                            let side = if lcg.next(2) == 0 { Side::Client } else { Side::Server };
                            let ack = crate::event::tcp_flags::ACK;
                            let segment =
                                crate::event::Segment { flags: ack, ..Default::default() };
                            script.segment(t, side, req, segment);
                        }
                    }
                    for mut event in script.events {
                        event.conn = ConnId(conn);
                        events.push(event);
                    }
                }
                // The two connections' events interleaved in time, each in its own order.
                events.sort_by_key(|e| e.at_ns);
                messages.extend(batches(run, &events, &mut lcg).into_iter().map(Ok));
                match lcg.next(6) {
                    // The id starts again: the run so far is handed over as it is (and the
                    // new one ends at once: runs one at a time).
                    0 => {
                        messages.push(Ok(started(run, Scenario::Rr(RrSpec::default()))));
                        messages.push(Ok(finished(run)));
                    }
                    1 if run == runs => {}
                    _ => messages.push(Ok(finished(run))),
                }
            }
            if lcg.next(4) == 0 {
                messages.push(Err(WireError::Truncated { offset: 1234 }));
                messages.push(Ok(started(99, Scenario::Rr(RrSpec::default()))));
            }
            let written = same_as_whole_runs(&messages);
            comments += written.comments;
            assert!(written.packets > 0 || case > 0 || runs > 0);
        }
        assert!(comments > 100, "the cases had stalls to place: {comments}");
    }

    /// A watch as root recorded the delayed-ACK timer that sent each held ACK: the packets'
    /// explanations say so, as the watch's summary does.
    #[test]
    fn a_delayed_ack_timer_recorded_with_the_packets_is_cited_in_their_explanations() {
        let mut events = Vec::new();
        for event in nagle_run_with_packets(6, 44 * MS) {
            // Each pure ACK sent 40 ms or more after its peer's last data: the timer's.
            if let EventKind::Segment(segment) = &event.kind {
                let sent_by_timer = segment.len == 0
                    && events
                        .iter()
                        .rev()
                        .find_map(|e: &Event| match &e.kind {
                            EventKind::Segment(s) if e.side != event.side && s.len > 0 => {
                                Some(e.at_ns)
                            }
                            _ => None,
                        })
                        .is_some_and(|data_ns| event.at_ns - data_ns >= 40 * MS);
                if sent_by_timer {
                    let timer = Event {
                        at_ns: event.at_ns - 10_000,
                        kind: EventKind::DelayedAck,
                        ..event.clone()
                    };
                    events.push(timer);
                }
            }
            events.push(event);
        }
        let timers = events.iter().filter(|e| e.kind == EventKind::DelayedAck).count();
        assert!(timers >= 5, "{timers} timers");
        let messages = [
            started(1, Scenario::Import(ImportSpec::default())),
            ToBrowser::Events { run: RunId(1), events },
            finished(1),
        ];
        let mut out = Vec::new();
        let (written, error) = write_pcapng(|| messages.iter().cloned().map(Ok), &mut out).unwrap();
        assert_eq!(error, None);
        let cited =
            String::from_utf8_lossy(&out).matches("delayed-ACK timer sent that ACK").count();
        assert!(cited >= 5 && cited as u64 <= written.comments, "{cited} of {}", written.comments);
    }

    /// Past the bound of stalls kept, the rest are counted, not explained; every packet is
    /// written all the same.
    #[test]
    fn stalls_past_the_bound_are_counted_and_every_packet_still_written() {
        let events = nagle_run_with_packets(40, 44 * MS);
        let mut messages = vec![started(1, Scenario::Import(ImportSpec::default()))];
        messages.push(ToBrowser::Events { run: RunId(1), events: events.clone() });
        messages.push(finished(1));
        let read = || messages.iter().cloned().map(Ok);
        let (all, _) = write_pcapng(read, &mut Vec::new()).unwrap();
        let stalls = all.comments;
        assert_eq!(stalls, 2 * 39, "an import's stalls are the packets' alone");
        let mut out = Vec::new();
        let (written, error) = write_keeping(read, &mut out, 10).unwrap();
        assert_eq!(error, None);
        assert_eq!(written.comments, 10);
        assert_eq!(written.stalls_left_out, stalls - 10);
        let segments = events.iter().filter(|e| matches!(e.kind, EventKind::Segment(_)));
        assert_eq!(written.packets, segments.count() as u64);
        assert_eq!(pcap::read(&out).packets.len() as u64, written.packets);
    }

    /// A run without segments keeps no stalls: a session of many stalled requests and no
    /// capture does not fill the bound for a later run that has packets.
    #[test]
    fn a_run_without_packets_keeps_none_of_its_stalls() {
        let mut messages = vec![started(1, Scenario::Rr(RrSpec::default()))];
        messages.push(ToBrowser::Events { run: RunId(1), events: nagle_run(40) });
        messages.push(finished(1));
        messages.push(started(2, Scenario::Import(ImportSpec::default())));
        let events = nagle_run_with_packets(6, 44 * MS);
        messages.push(ToBrowser::Events { run: RunId(2), events });
        messages.push(finished(2));
        let read = || messages.iter().cloned().map(Ok);
        let (written, _) = write_keeping(read, &mut Vec::new(), 10).unwrap();
        assert_eq!((written.comments, written.stalls_left_out), (10, 0));
    }

    fn nagle_run(requests: u32) -> Vec<Event> {
        crate::synthetic::nagle_run(requests, 44 * MS)
    }

    /// Runs that overlap (a crafted file) have their packets in the session's order; each is
    /// written once, with the same explanations as before.
    #[test]
    fn overlapping_runs_keep_every_packet_and_explanation() {
        let (a, b) = (nagle_run_with_packets(20, 44 * MS), nagle_run_with_packets(30, 44 * MS));
        let mut messages = vec![started(1, Scenario::Rr(RrSpec::default()))];
        messages.push(started(2, Scenario::Rr(RrSpec::default())));
        for (x, y) in a.chunks(50).zip(b.chunks(50)) {
            messages.push(ToBrowser::Events { run: RunId(1), events: x.to_vec() });
            messages.push(ToBrowser::Events { run: RunId(2), events: y.to_vec() });
        }
        messages.push(finished(2));
        messages.push(finished(1));
        let messages: Vec<_> = messages.into_iter().map(Ok).collect();
        let read = || messages.iter().cloned();
        let mut out = Vec::new();
        let (written, _) = write_pcapng(read, &mut out).unwrap();
        let mut whole = Vec::new();
        let (expected, _) = reference::write_pcapng(read(), &mut whole).unwrap();
        assert_eq!((written.packets, written.comments), (expected.packets, expected.comments));
        let explanations = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes).into_owned();
            let mut found: Vec<String> = text
                .split("stall: ")
                .skip(1)
                .map(|s| s.split('\0').next().unwrap().into())
                .collect();
            found.sort();
            found
        };
        assert_eq!(explanations(&out), explanations(&whole));
        assert_eq!(pcap::read(&out).packets.len() as u64, written.packets);
    }

    /// The export this module's passes replaced, which held each run's segments until it
    /// ended: what they must write, byte for byte, for runs one at a time.
    mod reference {
        use std::collections::HashMap;

        use super::super::{comment_of, endpoints, Written, FLUSH_BYTES};
        use super::*;
        use crate::packet_stalls;

        #[derive(Default)]
        struct RunPackets {
            segments: Vec<Event>,
            stalls: Vec<Stall>,
        }

        pub fn write_pcapng(
            messages: impl Iterator<Item = Result<ToBrowser, WireError>>,
            out: &mut impl Write,
        ) -> io::Result<(Written, Option<WireError>)> {
            let mut reducer = SessionReducer::hand_out_stalls();
            let mut runs: HashMap<RunId, RunPackets> = HashMap::new();
            let mut steps = Vec::new();
            let mut bytes = Vec::new();
            let mut writer = PcapngWriter::new(&mut bytes);
            let mut written = Written::default();
            let mut error = None;
            let mut finished = |steps: &mut Vec<Output>,
                                runs: &mut HashMap<RunId, RunPackets>,
                                writer: &mut PcapngWriter<'_>,
                                out: &mut dyn Write|
             -> io::Result<()> {
                for step in steps.drain(..) {
                    match step {
                        Output::Started(run) => {
                            runs.insert(run, RunPackets::default());
                        }
                        Output::Stalls(run, stalls) => {
                            if let Some(packets) = runs.get_mut(&run) {
                                packets.stalls.extend(stalls);
                            }
                        }
                        Output::Ended(ended, held) => {
                            let Some(mut packets) = runs.remove(&ended.run) else { continue };
                            packets.stalls.extend(held);
                            write_run(ended.run, packets, writer, out, &mut written)?;
                        }
                    }
                }
                Ok(())
            };
            for message in messages {
                let message = match message {
                    Ok(message) => message,
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                };
                if let ToBrowser::Events { run, events } = &message {
                    if let Some(packets) = runs.get_mut(run) {
                        let segments =
                            events.iter().filter(|e| matches!(e.kind, EventKind::Segment(_)));
                        packets.segments.extend(segments.cloned());
                    }
                }
                reducer.handle(&message, &mut steps);
                finished(&mut steps, &mut runs, &mut writer, out)?;
            }
            reducer.finish(&mut steps);
            finished(&mut steps, &mut runs, &mut writer, out)?;
            out.write_all(writer.bytes())?;
            Ok((written, error))
        }

        fn write_run(
            run: RunId,
            packets: RunPackets,
            writer: &mut PcapngWriter<'_>,
            out: &mut dyn Write,
            written: &mut Written,
        ) -> io::Result<()> {
            let iface = writer.interface(&format!("ackscope run {}", run.0), linktype::RAW);
            let RunPackets { segments, stalls } = packets;
            let mut comments: HashMap<usize, String> = stalls_with_segments(&segments, stalls)
                .into_iter()
                .map(|(i, stall)| (i, comment_of(&stall)))
                .collect();
            for (i, e) in segments.iter().enumerate() {
                let EventKind::Segment(segment) = &e.kind else { continue };
                let packet = Packet { segment: segment.clone(), ..endpoints(e.conn, e.side) };
                let comment = comments.remove(&i);
                let headers = synthesize(&packet);
                let on_the_wire = (headers.len() as u32).saturating_add(segment.len);
                writer.packet_with_len(iface, e.at_ns, &headers, on_the_wire, comment.as_deref());
                written.packets += 1;
                written.comments += u64::from(comment.is_some());
                if writer.bytes().len() >= FLUSH_BYTES {
                    out.write_all(writer.bytes())?;
                    writer.bytes().clear();
                }
            }
            Ok(())
        }

        fn stalls_with_segments(
            segments: &[Event],
            syscall_stalls: Vec<Stall>,
        ) -> Vec<(usize, Stall)> {
            let mut found: Vec<(usize, Stall)> =
                packet_stalls::find(segments).into_iter().map(|s| (s.ended_by, s.stall)).collect();
            let mut taken: HashSet<usize> = found.iter().map(|(i, _)| *i).collect();
            let mut by_time: Vec<usize> = (0..segments.len()).collect();
            by_time.sort_by_key(|&i| (segments[i].at_ns, i));
            for stall in syscall_stalls {
                if let Some(i) = ending_segment(segments, &by_time, &stall) {
                    if taken.insert(i) {
                        found.push((i, stall));
                    }
                }
            }
            found
        }

        fn ending_segment(segments: &[Event], by_time: &[usize], stall: &Stall) -> Option<usize> {
            let from = by_time.partition_point(|&i| segments[i].at_ns < stall.start_ns);
            let to = by_time.partition_point(|&i| segments[i].at_ns <= stall.end_ns);
            by_time[from..to].iter().rev().copied().find(|&i| {
                let e = &segments[i];
                e.conn == stall.conn
                    && e.side == stall.from
                    && matches!(&e.kind, EventKind::Segment(s) if s.len > 0)
            })
        }
    }
}
