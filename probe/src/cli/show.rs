//! `ackscope show FILE` and `ackscope export FILE --json | --pcapng OUT`.

use std::io::{self, Read, Seek, Write};
use std::path::Path;

use ackscope_shared::export_json::JsonExport;
use ackscope_shared::import::unnamed_note;
use ackscope_shared::pcapng_export::{self, MAX_KEPT_STALLS};
use ackscope_shared::reduce::{
    FollowedRun, ImportedTally, Output, RunAnalyses, SessionReducer, MAX_OPEN_RUNS,
};
use ackscope_shared::report::unfinished_outcome;
use ackscope_shared::wire::{self, ToBrowser, WireError};
use ackscope_shared::{EventKind, ImportedConnection, Scenario};

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
    // Each message is looked at where it was decoded, not copied out (`with_next_into`).
    while let Some(shown) = reader.with_next_into(&mut file_error, |message| {
        if let ToBrowser::Hello(hello) = message {
            let h = &hello.host;
            let _ =
                writeln!(
                out,
                "session by ackscope {} on {} {} (congestion control {}, tcp_rmem {}, tcp_wmem {})",
                hello.ackscope_version, h.os, h.kernel, h.congestion_control, h.tcp_rmem, h.tcp_wmem
            );
        }
        reducer.handle(message, &mut steps);
        print_ended(out, &mut steps)
    }) {
        shown?;
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
    let mut out = io::BufWriter::with_capacity(OUTPUT_CHUNK_BYTES, Printable::json(stdout_fd()));
    let file_error =
        export_json_from(reader, &mut out).map_err(|e| format!("writing the export: {e}"))?;
    ended(path, file_error, "everything before that point was exported")
}

/// What a document is written to standard output in: large writes, each a system call.
const OUTPUT_CHUNK_BYTES: usize = 64 * 1024;

/// Standard output's file itself, for a document written in large chunks of its own: `stdout()`
/// is line-buffered, and looked for the last newline of every chunk and copied what followed
/// it (a tenth of the CPU of exporting TCP_INFO samples). Standard output as it is when its
/// descriptor cannot be had (it is closed: `stdout()` then takes the writes and drops them).
fn stdout_fd() -> Box<dyn Write> {
    use std::os::fd::AsFd;
    let stdout = io::stdout();
    let _ = stdout.lock().flush();
    match stdout.as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(stdout.lock()),
    }
}

/// `export --json` of what `reader` reads, into `out` (`ackscope_shared::export_json`, the
/// page's JSON export too): the error that ended the file early, if one did. Each message is
/// written where it was decoded, not copied out (`with_next_into`).
pub(crate) fn export_json_from<R: Read>(
    mut reader: record::SessionReader<R>,
    out: &mut impl Write,
) -> io::Result<Option<WireError>> {
    let mut file_error = None;
    let mut export = JsonExport::start(out)?;
    while let Some(written) =
        reader.with_next_into(&mut file_error, |message| export.message(message, out))
    {
        written?;
    }
    export.finish(file_error.as_ref(), out)?;
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

/// `ackscope export FILE --rows OUT`: the session as version 8 wrote it, for builds older than
/// version 9 (docs/FORMAT.md, "Versions"): its Hello says version 8 and its events are rows,
/// each batch as a reader hands it on. Every other message is written as it is: version 9 added
/// only blocks, so a version 8 reader takes all of them. Read and written a message at a time.
pub fn export_rows(path: &Path, out_path: &Path) -> Result<Ended, Failure> {
    let mut reader = record::SessionReader::open(path)?;
    let write_error = |e: io::Error| format!("cannot write {}: {e}", out_path.display());
    let mut file = io::BufWriter::new(std::fs::File::create(out_path).map_err(write_error)?);
    let (mut frame, mut events, mut file_error) = (Vec::new(), 0u64, None);
    // Events of kinds appended after version 8, which its readers cannot decode.
    let mut left_out = 0u64;
    // The bytes of the overviews just written: the trailer counts those (the block indexes
    // after them are not written, there being no blocks).
    let mut end_bytes = 0u64;
    while let Some(message) = reader.next_message() {
        let message = match message {
            Ok(ToBrowser::Hello(hello)) => {
                ToBrowser::Hello(wire::Hello { protocol_version: ROWS_VERSION, ..hello })
            }
            Ok(ToBrowser::Trailer(_)) => ToBrowser::Trailer(wire::Trailer::new(end_bytes)),
            Ok(ToBrowser::Events { run, events: mut batch }) => {
                let before = batch.len();
                batch.retain(|event| held_by_rows(&event.kind));
                left_out += (before - batch.len()) as u64;
                ToBrowser::Events { run, events: batch }
            }
            Ok(message) => message,
            Err(e) => {
                file_error = Some(e);
                break;
            }
        };
        if let ToBrowser::Events { events: batch, .. } = &message {
            events += batch.len() as u64;
        }
        frame.clear();
        wire::write_frame(&message, &mut frame);
        file.write_all(&frame).map_err(write_error)?;
        match message {
            ToBrowser::Overview { .. } => end_bytes += frame.len() as u64,
            _ => end_bytes = 0,
        }
    }
    file.flush().map_err(write_error)?;
    let mut out = Printable::terminal(io::stdout().lock());
    let _ = write!(
        out,
        "wrote {events} events as rows (protocol version {ROWS_VERSION}) to {}",
        out_path.display()
    );
    let _ = match left_out {
        0 => writeln!(out),
        n => writeln!(
            out,
            "; left out {n} events a version {ROWS_VERSION} reader cannot read (a watched \
             program's reads that slept, recorded since version 11)"
        ),
    };
    ended(path, file_error, "everything before that point was exported")
}

/// The last version whose files hold their events as rows only.
const ROWS_VERSION: u16 = 8;

/// Whether a version [`ROWS_VERSION`] reader decodes an event of this kind: every kind but
/// those appended since.
fn held_by_rows(kind: &EventKind) -> bool {
    !matches!(kind, EventKind::BlockedCall { .. })
}

/// `ackscope export FILE --pcapng OUT`: the captured segments of every run as pcapng, one
/// interface per run, each stall's explanation as the comment of the packet that ended it
/// (`ackscope_shared::pcapng_export`, which reads the file three times: it keeps the stalls, not
/// the segments).
pub fn export_pcapng(path: &Path, out_path: &Path) -> Result<Ended, Failure> {
    // The file is checked as every reader checks it (its size, its Hello) before OUT is made.
    drop(record::SessionReader::open(path)?);
    let name = path.display().to_string();
    let input = std::fs::File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    // Every pass reads the bytes the file has now, even if it grows meanwhile (a session still
    // being recorded): the passes see the same messages.
    let size = input.metadata().map_err(|e| format!("cannot read {name}: {e}"))?.len();
    let from_start = || {
        (&input)
            .rewind()
            .map_err(|e| format!("cannot read {name} again from its start: {e}"))
            .and_then(|()| record::SessionReader::from_reader(&input, size, &name))
    };
    let read = || {
        let (reader, failed) = match from_start() {
            Ok(reader) => (Some(reader), None),
            Err(e) => (None, Some(Err(WireError::Malformed(e)))),
        };
        reader
            .into_iter()
            .flat_map(|mut r| std::iter::from_fn(move || r.next_message()))
            .chain(failed)
    };
    let write_error = |e: io::Error| format!("cannot write {}: {e}", out_path.display());
    let mut file = io::BufWriter::new(std::fs::File::create(out_path).map_err(write_error)?);
    let (written, file_error) = pcapng_export::write_pcapng(read, &mut file)
        .and_then(|written| file.flush().map(|()| written))
        .map_err(write_error)?;
    let left_out = match written.stalls_left_out {
        0 => String::new(),
        n => format!("; {n} more stalls not kept, past the first {}", MAX_KEPT_STALLS),
    };
    let _ = writeln!(
        Printable::terminal(io::stdout().lock()),
        "wrote {} packets ({} with a stall's explanation{left_out}) to {}",
        written.packets,
        written.comments,
        out_path.display()
    );
    ended(path, file_error, "everything before that point was exported")
}
