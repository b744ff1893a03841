//! `ackscope show FILE` and `ackscope export FILE --json | --pcapng OUT`.

use std::io::{self, Read, Write};
use std::path::Path;

use ackscope_shared::attribution::{Stall, StallClass};
use ackscope_shared::packet::{synthesize, Packet};
use ackscope_shared::pcap::{linktype, PcapngWriter};
use ackscope_shared::reduce::{
    FollowedRun, ImportedTally, Output, RunAnalyses, RunStalls, SessionReducer, MAX_OPEN_RUNS,
};
use ackscope_shared::wire::{RunOutcome, ToBrowser, WireError, PROTOCOL_VERSION};
use ackscope_shared::{packet_stalls, ConnId, Event, EventKind, ImportedConnection, RrSpec, RunId};
use ackscope_shared::{Scenario, Side};

use super::run::Tally;
use super::terminal::Printable;
use super::{Ended, Failure};
use crate::record;

pub fn show(path: &Path) -> Result<Ended, Failure> {
    let reader = record::SessionReader::open(path)?;
    // Every string of the file goes through this: a crafted one cannot command the terminal.
    let mut out = Printable(io::stdout().lock());
    let file_error = show_from(reader, &mut out)?;
    ended(path, file_error, "the summary above covers everything before that point")
}

/// How a command that read `path` to its end (or to the bad frame `file_error`) ended: a damaged
/// file is an error that says what was `kept` of it.
fn ended(path: &Path, file_error: Option<WireError>, kept: &str) -> Result<Ended, Failure> {
    match file_error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!("{}: {error}; {kept}", path.display()))),
    }
}

/// `show` of what `reader` reads, into `out`: the error that ended the file early, if one did.
/// (The fuzz target runs this on arbitrary bytes: `crate::fuzzing`.)
pub(crate) fn show_from<R: Read>(
    mut reader: record::SessionReader<R>,
    out: &mut impl Write,
) -> Result<Option<WireError>, String> {
    // One message in memory at a time; each run's analysis retires what it has summarized, and
    // a run is summarized and forgotten once its end is read: only the runs still going are held.
    let mut file_error = None;
    let mut reducer = SessionReducer::new();
    let mut steps = Vec::new();
    while let Some(message) = reader.next_into(&mut file_error) {
        if let ToBrowser::Hello(hello) = &message {
            let h = &hello.host;
            let _ =
                writeln!(
                out,
                "session by ackscope {} on {} {} (congestion control {}, tcp_rmem {}, tcp_wmem {})",
                hello.ackscope_version, h.os, h.kernel, h.congestion_control, h.tcp_rmem, h.tcp_wmem
            );
        }
        reducer.handle(&message, &mut steps);
        print_ended(out, &mut steps)?;
    }
    reducer.finish(&mut steps);
    print_ended(out, &mut steps)?;
    let not_followed = reducer.not_followed();
    if not_followed > 0 {
        let _ = writeln!(out, "{}", not_followed_note(not_followed));
    }
    Ok(file_error)
}

/// Prints the summary of each run that `steps` says ended.
fn print_ended(out: &mut impl Write, steps: &mut Vec<Output>) -> Result<(), String> {
    for step in steps.drain(..) {
        if let Output::Ended(run, _) = step {
            print_run(out, *run)?;
        }
    }
    Ok(())
}

fn not_followed_note(count: u64) -> String {
    format!(
        "{count} more runs were started while {MAX_OPEN_RUNS} were still going, more than `show` \
         and `export` follow at once (a recorded file has one at a time): not summarized"
    )
}

/// One run's entry in `export --json`'s `runs`: the summary `run --json` prints for it (an
/// imported capture's: its connections and the stall classes found in its packets).
fn run_json(run: FollowedRun) -> serde_json::Value {
    let id = run.run;
    if let RunAnalyses::Imported(imported) = run.tally.analysis {
        let connections = match &run.scenario {
            Scenario::Import(spec) => spec.connections.len(),
            _ => 0,
        };
        let (_, stalls) = imported.finish();
        return serde_json::json!({
            "run": id.0,
            "imported": { "connections": connections, "stalls": stalls },
        });
    }
    let outcome = run.outcome.unwrap_or_else(unfinished_outcome);
    let tally = Tally::of(run.tally);
    serde_json::json!({ "run": id.0, "summary": tally.json(&run.scenario, &outcome) })
}

fn unfinished_outcome() -> RunOutcome {
    RunOutcome::Failed { error: "the file ends before the run did".into() }
}

/// One run's summary (an imported capture's connections and packet stalls).
fn print_run(out: &mut impl Write, run: FollowedRun) -> Result<(), String> {
    let id = run.run;
    if let RunAnalyses::Imported(imported) = run.tally.analysis {
        let _ =
            writeln!(out, "run {}: an imported packet capture (no syscalls, no TCP_INFO)", id.0);
        let connections = match &run.scenario {
            Scenario::Import(spec) => spec.connections.as_slice(),
            _ => &[],
        };
        print_imported(out, connections, *imported);
        return Ok(());
    }
    let _ = write!(out, "run {} ", id.0);
    let outcome = run.outcome.unwrap_or_else(unfinished_outcome);
    Tally::of(run.tally)
        .print(out, &run.scenario, &outcome)
        .map_err(|e| format!("writing the summary: {e}"))
}

/// The file's messages as one JSON document, written as they are read, then each run's summary.
pub fn export_json(path: &Path) -> Result<Ended, Failure> {
    let reader = record::SessionReader::open(path)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    let file_error =
        export_json_from(reader, &mut out).map_err(|e| format!("writing the export: {e}"))?;
    ended(path, file_error, "everything before that point was exported")
}

/// Runs whose summaries `export --json` keeps for the end of its document (each a few KB); a
/// file with more has the rest counted in `runs_not_summarized` (`show` prints them all).
const MAX_EXPORTED_SUMMARIES: usize = 10_000;

/// `export --json` of what `reader` reads, into `out`: the error that ended the file early, if
/// one did.
pub(crate) fn export_json_from<R: Read>(
    mut reader: record::SessionReader<R>,
    out: &mut impl Write,
) -> io::Result<Option<WireError>> {
    // One message in memory at a time, and the analysis of the runs still going: a file of any
    // size exports in the memory of its largest message and its runs' summaries.
    let mut file_error = None;
    let mut reducer = SessionReducer::new();
    let mut steps = Vec::new();
    let mut summaries = Vec::new();
    let mut not_summarized = 0u64;
    let mut summarize = |steps: &mut Vec<Output>| {
        for step in steps.drain(..) {
            let Output::Ended(run, _) = step else { continue };
            if summaries.len() < MAX_EXPORTED_SUMMARIES {
                summaries.push(run_json(*run));
            } else {
                not_summarized += 1;
            }
        }
    };
    write!(
        out,
        "{{\"format\":\"ackscope-session\",\"protocol_version\":{PROTOCOL_VERSION},\"messages\":["
    )?;
    let mut first = true;
    while let Some(message) = reader.next_into(&mut file_error) {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &message)?;
        reducer.handle(&message, &mut steps);
        summarize(&mut steps);
    }
    reducer.finish(&mut steps);
    summarize(&mut steps);
    let not_followed = reducer.not_followed();
    write!(out, "],\n\"runs\":")?;
    serde_json::to_writer(&mut *out, &summaries)?;
    let not_summarized = not_summarized + not_followed;
    let error = file_error.as_ref().map(|e| e.to_string());
    write!(
        out,
        ",\"runs_not_summarized\":{not_summarized},\"error\":{}}}",
        serde_json::to_string(&error)?
    )?;
    writeln!(out)?;
    out.flush()?;
    Ok(file_error)
}

/// An imported run's connections and packet stalls.
fn print_imported(out: &mut impl Write, connections: &[ImportedConnection], run: ImportedTally) {
    let (rows, stalls) = run.finish();
    for (conn, segments, bytes) in &rows {
        // Connection ids of an import count from 1.
        let addresses = (conn.0 as usize)
            .checked_sub(1)
            .and_then(|i| connections.get(i))
            .map(|c| format!(" client {} -> server {}", c.client, c.server))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "conn {}:{addresses} {segments} segments, {} bytes client->server, {} bytes \
             server->client",
            conn.0, bytes[0], bytes[1]
        );
    }
    super::import::print_summaries(out, &stalls);
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

/// The stalls of one run with the index (into `events`) of the segment that ended each: from the
/// syscall analysis when the run has syscall events, and from the packets alone otherwise.
/// Each stall's explanation, by the index in `segments` of the segment that ended it: the
/// packet rule on the segments themselves, then the stalls found from the syscalls
/// (`syscall_stalls`) that a captured segment ended.
fn stalls_with_segments(segments: &[Event], syscall_stalls: Vec<Stall>) -> Vec<(usize, Stall)> {
    let mut found: Vec<(usize, Stall)> =
        packet_stalls::find(segments).into_iter().map(|s| (s.ended_by, s.stall)).collect();
    // Segments in time order, for each stall's window.
    let mut by_time: Vec<usize> = (0..segments.len()).collect();
    by_time.sort_by_key(|&i| (segments[i].at_ns, i));
    for stall in syscall_stalls {
        if let Some(i) = ending_segment(segments, &by_time, &stall) {
            if !found.iter().any(|(j, _)| *j == i) {
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

/// The stalls of `run` found from its syscalls, by a streaming pass over the file with an
/// analysis that retires what it has attributed (memory bounded as for `show`).
fn syscall_stalls(path: &Path, run: RunId, spec: Option<&RrSpec>) -> Result<Vec<Stall>, Failure> {
    let mut reader = record::SessionReader::open(path)?;
    let mut analysis = RunStalls::new(spec.cloned());
    let mut stalls = Vec::new();
    // The first pass has reported a bad frame already; this one stops at it.
    while let Some(message) = reader.next_into(&mut None) {
        let ToBrowser::Events { run: of, events } = message else { continue };
        if of == run {
            analysis.push(&events, |_, _, retired| stalls.extend(retired));
        }
    }
    stalls.extend(analysis.held_stalls());
    Ok(stalls)
}

/// `ackscope export FILE --pcapng OUT`: the captured segments of every run as pcapng, one
/// interface per run, each stall's explanation as the comment of the packet that ended it.
pub fn export_pcapng(path: &Path, out_path: &Path) -> Result<Ended, Failure> {
    // First pass: each run and its captured segments, the only events exported; one message in
    // memory at a time.
    let mut reader = record::SessionReader::open(path)?;
    let mut file_error = None;
    let mut runs: Vec<(RunId, Scenario, Vec<Event>)> = Vec::new();
    let mut index: std::collections::HashMap<RunId, usize> = Default::default();
    while let Some(message) = reader.next_into(&mut file_error) {
        match message {
            ToBrowser::RunStarted { run, spec, .. } => {
                index.insert(run, runs.len());
                runs.push((run, spec, Vec::new()));
            }
            ToBrowser::Events { run, events } => {
                if let Some(&i) = index.get(&run) {
                    let segments =
                        events.into_iter().filter(|e| matches!(e.kind, EventKind::Segment(_)));
                    runs[i].2.extend(segments);
                }
            }
            _ => {}
        }
    }
    let write_error = |e: io::Error| format!("cannot write {}: {e}", out_path.display());
    let mut file = io::BufWriter::new(std::fs::File::create(out_path).map_err(write_error)?);
    let mut bytes = Vec::new();
    let mut writer = PcapngWriter::new(&mut bytes);
    let (mut packets, mut comments) = (0usize, 0usize);
    for (run, scenario, segments) in &runs {
        let iface = writer.interface(&format!("ackscope run {}", run.0), linktype::RAW);
        // Stalls from the syscalls, for runs that have both (a second pass over the file).
        let syscalls = match scenario {
            Scenario::Rr(spec) if !segments.is_empty() => syscall_stalls(path, *run, Some(spec))?,
            Scenario::Server(_) if !segments.is_empty() => syscall_stalls(path, *run, None)?,
            _ => Vec::new(),
        };
        let stalls = stalls_with_segments(segments, syscalls);
        for (i, e) in segments.iter().enumerate() {
            let EventKind::Segment(segment) = &e.kind else { continue };
            let packet = Packet { segment: segment.clone(), ..endpoints(e.conn, e.side) };
            let comment = stalls.iter().find(|(j, _)| *j == i).map(|(_, s)| comment_of(s));
            writer.packet_with_len(
                iface,
                e.at_ns,
                &synthesize(&packet),
                // On the wire: headers plus the payload that the synthesized packet leaves out.
                (synthesize(&packet).len() as u32).saturating_add(segment.len),
                comment.as_deref(),
            );
            packets += 1;
            comments += usize::from(comment.is_some());
            // The file is written as it is made, a megabyte at a time.
            if writer.bytes().len() >= 1 << 20 {
                file.write_all(writer.bytes()).map_err(write_error)?;
                writer.bytes().clear();
            }
        }
    }
    file.write_all(writer.bytes()).and_then(|()| file.flush()).map_err(write_error)?;
    println!(
        "wrote {packets} packets ({comments} with a stall's explanation) to {}",
        out_path.display()
    );
    match file_error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!(
            "{}: {error}; everything before that point was exported",
            path.display()
        ))),
    }
}

/// "stall: Nagle x delayed ACK, client->server, 43.6 ms wait: 4-byte segment at ..."
fn comment_of(stall: &Stall) -> String {
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
