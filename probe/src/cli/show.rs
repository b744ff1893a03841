//! `ackscope show FILE` and `ackscope export FILE --json | --pcapng OUT`.

use std::io::{self, Read, Write};
use std::path::Path;

use ackscope_shared::import::unnamed_note;
use ackscope_shared::pcapng_export;
use ackscope_shared::reduce::{
    FollowedRun, ImportedTally, Output, RunAnalyses, SessionReducer, MAX_OPEN_RUNS,
};
use ackscope_shared::wire::{RunOutcome, ToBrowser, WireError, PROTOCOL_VERSION};
use ackscope_shared::{ImportedConnection, Scenario};

use super::run::Tally;
use super::terminal::Printable;
use super::{Ended, Failure};
use crate::record;

pub fn show(path: &Path) -> Result<Ended, Failure> {
    let reader = record::SessionReader::open(path)?;
    // Every string of the file goes through this: a crafted one cannot command the terminal.
    let mut out = Printable::terminal(io::stdout().lock());
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
    if let RunAnalyses::Imported(mut imported) = run.tally.analysis {
        // The connections seen: an import names at most `MAX_NAMED_CONNECTIONS` of them.
        let named = match &run.scenario {
            Scenario::Import(spec) => spec.connections.len(),
            _ => 0,
        };
        let connections = named.max(imported.rows().len());
        imported.decide_all();
        let stalls = imported.classes();
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
    // The file's strings are escaped as JSON escapes: the document stays valid JSON, and a
    // terminal it is printed on obeys none of them.
    let mut out = io::BufWriter::new(Printable::json(io::stdout().lock()));
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
fn print_imported(
    out: &mut impl Write,
    connections: &[ImportedConnection],
    mut run: ImportedTally,
) {
    run.decide_all();
    for line in run.connection_lines(connections) {
        let _ = writeln!(out, "{line}");
    }
    let unnamed = run.rows().iter().filter(|(conn, ..)| conn.0 as usize > connections.len());
    let unnamed = unnamed.count();
    if unnamed > 0 {
        let _ = writeln!(out, "{}", unnamed_note(connections.len(), unnamed));
    }
    super::import::print_summaries(out, &run.classes());
}

/// `ackscope export FILE --pcapng OUT`: the captured segments of every run as pcapng, one
/// interface per run, each stall's explanation as the comment of the packet that ended it
/// (`ackscope_shared::pcapng_export`, one pass over the file).
pub fn export_pcapng(path: &Path, out_path: &Path) -> Result<Ended, Failure> {
    let mut reader = record::SessionReader::open(path)?;
    let write_error = |e: io::Error| format!("cannot write {}: {e}", out_path.display());
    let mut file = io::BufWriter::new(std::fs::File::create(out_path).map_err(write_error)?);
    let messages = std::iter::from_fn(|| reader.next_message());
    let (written, file_error) = pcapng_export::write_pcapng(messages, &mut file)
        .and_then(|written| file.flush().map(|()| written))
        .map_err(write_error)?;
    let _ = writeln!(
        Printable::terminal(io::stdout().lock()),
        "wrote {} packets ({} with a stall's explanation) to {}",
        written.packets,
        written.comments,
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
