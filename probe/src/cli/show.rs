//! `ackscope show FILE` and `ackscope export FILE --json`.

use std::io::{self, Write};
use std::path::Path;

use ackscope_shared::wire::{RunOutcome, ToBrowser, PROTOCOL_VERSION};
use ackscope_shared::Scenario;

use super::run::Tally;
use super::{Ended, Failure};
use crate::record;

/// One run as read from a file.
struct FileRun {
    scenario: Scenario,
    tally: Tally,
    outcome: Option<RunOutcome>,
}

pub fn show(path: &Path) -> Result<Ended, Failure> {
    let file = record::read(path)?;
    let mut out = io::stdout().lock();
    let mut runs: Vec<(ackscope_shared::RunId, FileRun)> = Vec::new();
    for message in &file.messages {
        match message {
            ToBrowser::Hello(hello) => {
                let h = &hello.host;
                let _ = writeln!(
                    out,
                    "session by ackscope {} on {} {} (congestion control {}, tcp_rmem {}, tcp_wmem {})",
                    hello.ackscope_version, h.os, h.kernel, h.congestion_control, h.tcp_rmem, h.tcp_wmem
                );
            }
            ToBrowser::RunStarted { run, spec, .. } => runs.push((
                *run,
                FileRun { scenario: spec.clone(), tally: Tally::new(spec), outcome: None },
            )),
            ToBrowser::Events { run, events } => {
                if let Some((_, r)) = runs.iter_mut().find(|(id, _)| id == run) {
                    r.tally.push(events);
                }
            }
            ToBrowser::RunFinished { run, outcome } => {
                if let Some((_, r)) = runs.iter_mut().find(|(id, _)| id == run) {
                    r.outcome = Some(outcome.clone());
                }
            }
            ToBrowser::Rejected { .. } => {}
        }
    }
    for (id, run) in &runs {
        let _ = write!(out, "run {} ", id.0);
        let outcome = run
            .outcome
            .clone()
            .unwrap_or(RunOutcome::Failed { error: "the file ends before the run did".into() });
        run.tally
            .print(&mut out, &run.scenario, &outcome)
            .map_err(|e| format!("writing the summary: {e}"))?;
    }
    match file.error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!(
            "{}: {error}; the summary above covers everything before that point",
            path.display()
        ))),
    }
}

/// The file's messages as one JSON document, written as they are read.
pub fn export_json(path: &Path) -> Result<Ended, Failure> {
    let file = record::read(path)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = (|| -> io::Result<()> {
        write!(out, "{{\"format\":\"ackscope-session\",\"protocol_version\":{PROTOCOL_VERSION},\"messages\":[")?;
        for (i, message) in file.messages.iter().enumerate() {
            if i > 0 {
                out.write_all(b",\n")?;
            }
            serde_json::to_writer(&mut out, message)?;
        }
        let error = file.error.as_ref().map(|e| e.to_string());
        write!(out, "],\"error\":{}}}", serde_json::to_string(&error)?)?;
        writeln!(out)?;
        out.flush()
    })();
    written.map_err(|e| format!("writing the export: {e}"))?;
    match file.error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!(
            "{}: {error}; everything before that point was exported",
            path.display()
        ))),
    }
}
