//! `ackscope show FILE` and `ackscope export FILE --json | --pcapng OUT`.

use std::io::{self, Read, Write};
use std::path::Path;

use ackscope_shared::attribution::{self, ClassSummary, Stall, StallClass, StallTally};
use ackscope_shared::packet::{synthesize, Packet};
use ackscope_shared::pcap::{linktype, PcapngWriter};
use ackscope_shared::wire::{RunOutcome, ToBrowser, WireError, PROTOCOL_VERSION};
use ackscope_shared::{
    packet_stalls, ConnId, Event, EventKind, ImportedConnection, RrSpec, RunId, Scenario, Side,
};

use super::run::{retiring_analysis, Tally, KEEP_RECENT, RETIRE_ABOVE};
use super::terminal::Printable;
use super::{Ended, Failure};
use crate::record;

/// One run as read from a file.
struct FileRun {
    scenario: Scenario,
    tally: Tally,
    outcome: Option<RunOutcome>,
    /// An imported capture (see `import`): shown as connections and packet stalls.
    imported: Option<ImportedRun>,
}

/// Runs going at once that `show` follows. A recorded file has one at a time (each run's end
/// comes before the next run's start); a crafted one could start any number and never end
/// them, each costing a run's analysis (a few KB). Past this bound a run is counted, not
/// summarized.
const MAX_OPEN_RUNS: usize = 1000;

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
    let mut runs = FileRuns::default();
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
        runs.follow(message, |id, run| print_run(out, id, run))?;
    }
    let not_followed = runs.finish(|id, run| print_run(out, id, run))?;
    if not_followed > 0 {
        let _ = writeln!(out, "{}", not_followed_note(not_followed));
    }
    Ok(file_error)
}

fn not_followed_note(count: u64) -> String {
    format!(
        "{count} more runs were started while {MAX_OPEN_RUNS} were still going, more than `show` \
         and `export` follow at once (a recorded file has one at a time): not summarized"
    )
}

/// The runs of a file as its messages go by, each handed over (to be printed or summarized)
/// when its end is read, or when the file ends before it does: what `show` and `export --json`
/// both read a file's runs with.
#[derive(Default)]
struct FileRuns {
    /// The runs still going, each with its place in the file (the order they are handed over
    /// in when the file ends before they do).
    open: std::collections::HashMap<RunId, (u64, FileRun)>,
    started: u64,
    /// Runs started while [`MAX_OPEN_RUNS`] were going: counted, not followed.
    not_followed: u64,
}

impl FileRuns {
    /// Follows `message`; `ended` gets each run whose end (or whose id started again) it is.
    fn follow<E>(
        &mut self,
        message: ToBrowser,
        mut ended: impl FnMut(RunId, FileRun) -> Result<(), E>,
    ) -> Result<(), E> {
        match message {
            ToBrowser::RunStarted { run, spec, .. } => {
                // An id started again (only a crafted file does that): the earlier run is
                // handed over as far as it went.
                if let Some((_, earlier)) = self.open.remove(&run) {
                    ended(run, earlier)?;
                }
                if self.open.len() >= MAX_OPEN_RUNS {
                    self.not_followed += 1;
                    return Ok(());
                }
                let file_run = FileRun {
                    tally: Tally::new(&spec),
                    outcome: None,
                    imported: matches!(spec, Scenario::Import(_)).then(ImportedRun::default),
                    scenario: spec,
                };
                self.open.insert(run, (self.started, file_run));
                self.started += 1;
            }
            ToBrowser::Events { run, events } => {
                if let Some((_, r)) = self.open.get_mut(&run) {
                    match &mut r.imported {
                        Some(imported) => imported.push(&events),
                        None => r.tally.push(&events),
                    }
                }
            }
            ToBrowser::RunFinished { run, outcome } => {
                if let Some((_, mut r)) = self.open.remove(&run) {
                    r.outcome = Some(outcome);
                    ended(run, r)?;
                }
            }
            // Refusals answer a tab; overviews and the trailer repeat what the events say.
            ToBrowser::Hello(_)
            | ToBrowser::Rejected { .. }
            | ToBrowser::Overview { .. }
            | ToBrowser::Trailer(_)
            | ToBrowser::ClassState(_)
            | ToBrowser::Stream { .. } => {}
        }
        Ok(())
    }

    /// The file has ended: hands over the runs still going, in the order they started, and
    /// returns how many runs were not followed.
    fn finish<E>(self, mut ended: impl FnMut(RunId, FileRun) -> Result<(), E>) -> Result<u64, E> {
        let mut unfinished: Vec<(RunId, (u64, FileRun))> = self.open.into_iter().collect();
        unfinished.sort_by_key(|(_, (order, _))| *order);
        for (id, (_, run)) in unfinished {
            ended(id, run)?;
        }
        Ok(self.not_followed)
    }
}

/// One run's entry in `export --json`'s `runs`: the summary `run --json` prints for it (an
/// imported capture's: its connections and the stall classes found in its packets).
fn run_json(id: RunId, run: FileRun) -> serde_json::Value {
    if let Some(imported) = run.imported {
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
    serde_json::json!({ "run": id.0, "summary": run.tally.json(&run.scenario, &outcome) })
}

fn unfinished_outcome() -> RunOutcome {
    RunOutcome::Failed { error: "the file ends before the run did".into() }
}

/// One run's summary (an imported capture's connections and packet stalls).
fn print_run(out: &mut impl Write, id: RunId, run: FileRun) -> Result<(), String> {
    if let Some(imported) = run.imported {
        let _ =
            writeln!(out, "run {}: an imported packet capture (no syscalls, no TCP_INFO)", id.0);
        let connections = match &run.scenario {
            Scenario::Import(spec) => spec.connections.as_slice(),
            _ => &[],
        };
        print_imported(out, connections, imported);
        return Ok(());
    }
    let _ = write!(out, "run {} ", id.0);
    let outcome = run.outcome.unwrap_or_else(unfinished_outcome);
    run.tally.print(out, &run.scenario, &outcome).map_err(|e| format!("writing the summary: {e}"))
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
    let mut runs = FileRuns::default();
    let mut summaries = Vec::new();
    let mut not_summarized = 0u64;
    let mut summarize = |id: RunId, run: FileRun| -> io::Result<()> {
        if summaries.len() < MAX_EXPORTED_SUMMARIES {
            summaries.push(run_json(id, run));
        } else {
            not_summarized += 1;
        }
        Ok(())
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
        runs.follow(message, &mut summarize)?;
    }
    let not_followed = runs.finish(&mut summarize)?;
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

/// A connection of an imported run: its id, its segments, its payload bytes each way.
type ConnRow = (ConnId, u32, [u64; 2]);

/// An imported capture's run as `show` and `export` follow it: each connection's segments and
/// bytes, and the stalls its packets show, found as the events go by (the finder holds only each
/// connection's undecided window, as the import did).
#[derive(Default)]
struct ImportedRun {
    /// Connection, segments, bytes each way: in the order they first appear; `row_of` finds a
    /// connection's row in O(1), so a capture of many connections is not quadratic.
    rows: Vec<ConnRow>,
    row_of: std::collections::HashMap<ConnId, usize>,
    finder: packet_stalls::StallFinder,
    stalls: StallTally,
}

impl ImportedRun {
    fn push(&mut self, events: &[Event]) {
        for e in events {
            let EventKind::Segment(s) = &e.kind else { continue };
            let rows = &mut self.rows;
            let i = *self.row_of.entry(e.conn).or_insert_with(|| {
                rows.push((e.conn, 0, [0, 0]));
                rows.len() - 1
            });
            self.rows[i].1 += 1;
            self.rows[i].2[usize::from(e.side == Side::Server)] += u64::from(s.len);
            self.finder.push(e, ());
        }
        self.finder.take_found().iter().for_each(|(stall, ())| self.stalls.add(stall));
    }

    /// The connections' rows and the stall classes, every candidate decided.
    fn finish(mut self) -> (Vec<ConnRow>, Vec<ClassSummary>) {
        self.finder.finish().iter().for_each(|(stall, ())| self.stalls.add(stall));
        (self.rows, self.stalls.summaries())
    }
}

/// An imported run's connections and packet stalls.
fn print_imported(out: &mut impl Write, connections: &[ImportedConnection], run: ImportedRun) {
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
    let mut analysis = retiring_analysis(spec);
    let mut stalls = Vec::new();
    // The first pass has reported a bad frame already; this one stops at it.
    while let Some(message) = reader.next_into(&mut None) {
        let ToBrowser::Events { run: of, events } = message else { continue };
        if of != run {
            continue;
        }
        analysis.push_all(&events);
        if analysis.requests().len() > RETIRE_ABOVE {
            analysis.retire(KEEP_RECENT, |analysis, req, view| {
                stalls.extend(attribution::attribute_request(analysis, req, view, spec));
            });
        }
    }
    stalls.extend(attribution::attribute(&analysis, spec));
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
