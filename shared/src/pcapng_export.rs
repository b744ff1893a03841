//! A session's captured segments as pcapng for Wireshark: one interface per run, each stall's
//! explanation as the comment of the packet that ended it. Pure over the messages and any
//! `Write` (`ackscope export --pcapng` into a file, the page into a download), in one pass.
//!
//! A run's packets are written when it ends: its stalls from the syscalls come from the shared
//! reducer (each retired request's as it retires, the rest at the run's end), and the packet
//! rule is applied to its segments then. So what is held is the segments of the runs still
//! going (their events are not), not the session's.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::event::{ConnId, Event, EventKind, RunId, Side};
use crate::packet::{synthesize, Packet};
use crate::packet_stalls;
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
}

/// One followed run's segments and the stalls its syscalls showed so far.
#[derive(Default)]
struct RunPackets {
    segments: Vec<Event>,
    stalls: Vec<Stall>,
}

/// The file is written as it is made, this much at a time.
const FLUSH_BYTES: usize = 1 << 20;

/// Writes the pcapng of `messages` to `out`; returns what it wrote and the error that ended the
/// messages, if one did (everything before it is written).
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
                let segments = events.iter().filter(|e| matches!(e.kind, EventKind::Segment(_)));
                packets.segments.extend(segments.cloned());
            }
        }
        reducer.handle(&message, &mut steps);
        finished(&mut steps, &mut runs, &mut writer, out)?;
    }
    reducer.finish(&mut steps);
    finished(&mut steps, &mut runs, &mut writer, out)?;
    out.write_all(writer.bytes())?;
    writer.bytes().clear();
    Ok((written, error))
}

/// Writes one run's packets, each stall's explanation on the packet that ended it.
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
        // On the wire: headers plus the payload that the synthesized packet leaves out.
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

/// Each stall's explanation, by the index in `segments` of the segment that ended it: the
/// packet rule on the segments themselves, then the stalls found from the syscalls
/// (`syscall_stalls`) that a captured segment ended.
fn stalls_with_segments(segments: &[Event], syscall_stalls: Vec<Stall>) -> Vec<(usize, Stall)> {
    let mut found: Vec<(usize, Stall)> =
        packet_stalls::find(segments).into_iter().map(|s| (s.ended_by, s.stall)).collect();
    let mut taken: std::collections::HashSet<usize> = found.iter().map(|(i, _)| *i).collect();
    // Segments in time order, for each stall's window.
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

/// The segment that ended a stall found from syscalls: the last data segment from the writer on
/// the stall's connection within the stall (for Nagle x delayed ACK, the held data that followed
/// the delayed ACK). `by_time`: indices of `segments` in time order.
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
    use crate::spec::{RrSpec, Scenario};
    use crate::synthetic::Script;
    use crate::wire::{Instruments, RunOutcome};

    #[test]
    fn a_held_message_gets_its_explanation_on_the_packet_that_ended_it() {
        let mut script = Script::default();
        script.packets = true;
        let body_at = script.held_message(Side::Client, 0, 1_000_000, 44_000_000, 2048);
        let run = RunId(3);
        let messages = vec![
            ToBrowser::RunStarted {
                run,
                spec: Scenario::Rr(RrSpec::default()),
                instruments: Instruments::default(),
            },
            ToBrowser::Events { run, events: script.events.clone() },
            ToBrowser::RunFinished { run, outcome: RunOutcome::Completed },
        ];
        let mut out = Vec::new();
        let (written, error) = write_pcapng(messages.into_iter().map(Ok), &mut out).unwrap();
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
}
