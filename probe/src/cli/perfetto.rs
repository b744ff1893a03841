//! `ackscope export FILE --perfetto OUT.json`: the session file streamed through
//! `ackscope_shared::perfetto` into a Chrome trace-event file for ui.perfetto.dev.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use ackscope_shared::perfetto::{write_trace, TraceBuilder};

use super::terminal::Printable;
use super::{Ended, Failure};
use crate::record::SessionReader;

/// `ackscope export FILE --perfetto OUT`.
pub fn export(path: &Path, out_path: &Path) -> Result<Ended, Failure> {
    let mut reader = SessionReader::open(path)?;
    if let (Ok(a), Ok(b)) = (path.canonicalize(), out_path.canonicalize()) {
        if a == b {
            return Err(Failure::Usage(format!(
                "--perfetto {} would overwrite the session file it reads; name another file",
                out_path.display()
            )));
        }
    }
    let file = File::create(out_path).map_err(|e| {
        format!("cannot create {}: {e}; give --perfetto a path you can write", out_path.display())
    })?;
    // The file's strings (a host's facts, an error) written as JSON escapes: the trace stays
    // valid JSON, and a terminal it is printed on obeys none of them.
    let mut out = BufWriter::new(Printable::json(file));
    let mut trace = TraceBuilder::new();
    let messages = std::iter::from_fn(|| reader.next_message());
    let error = write_trace(messages, &path.display().to_string(), &mut trace, &mut out)
        .and_then(|error| out.flush().map(|()| error))
        .map_err(|e| format!("writing {}: {e}", out_path.display()))?;
    let c = trace.counts;
    let _ = writeln!(
        Printable::terminal(io::stdout().lock()),
        "wrote {} syscalls, {} stalls and {} TCP_INFO counter values of {} run{} to {} \
         (open it in ui.perfetto.dev or chrome://tracing)",
        c.syscalls,
        c.stalls,
        c.counters,
        c.runs,
        if c.runs == 1 { "" } else { "s" },
        out_path.display()
    );
    match error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!(
            "{}: {error}; everything before that point was exported",
            path.display()
        ))),
    }
}
