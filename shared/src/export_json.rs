//! A session as one JSON document: what `ackscope export FILE --json` prints and the page's
//! "export JSON" downloads, the same bytes from the same messages.
//!
//! `{"format":"ackscope-session","protocol_version":N,"messages":[...],"runs":[...],
//! "runs_not_summarized":N,"error":...}`: every message as it was read, then each run's summary
//! (docs/CLI.md). The messages are written as they are read, and a run is summarized and
//! forgotten once it ends ([`SessionReducer`]): a file of any size exports in the memory of its
//! largest message, its runs still going, and its runs' summaries.

use std::io::{self, Write};

use crate::reduce::{FollowedRun, Output, RunAnalyses, SessionReducer};
use crate::report::RunReport;
use crate::spec::Scenario;
use crate::wire::{ToBrowser, WireError, PROTOCOL_VERSION};

/// Runs whose summaries the export keeps for the end of its document (each a few KB); a
/// session with more has the rest counted in `runs_not_summarized` (`show` prints them all).
pub const MAX_EXPORTED_SUMMARIES: usize = 10_000;

/// What [`write_export_json`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exported {
    /// Messages in `messages`.
    pub messages: u64,
    /// Runs in `runs`.
    pub runs: usize,
}

/// Writes the JSON document of `messages` to `out`; returns what it wrote and the error that
/// ended the messages, if one did (everything before it is exported, and the document's
/// `error` says it).
pub fn write_export_json(
    messages: impl Iterator<Item = Result<ToBrowser, WireError>>,
    out: &mut impl Write,
) -> io::Result<(Exported, Option<WireError>)> {
    let mut file_error = None;
    let mut export = JsonExport::start(out)?;
    for message in messages {
        match message {
            Ok(message) => export.message(&message, out)?,
            Err(e) => {
                // Nothing after a bad frame can be trusted to be where it says it is.
                file_error = Some(e);
                break;
            }
        }
    }
    let written = export.finish(file_error.as_ref(), out)?;
    Ok((written, file_error))
}

/// The JSON document of a session, written as its messages are handed over one at a time by
/// reference ([`write_export_json`] over an iterator of them): a reader hands each message
/// over where it decoded it, without copying it out.
pub struct JsonExport {
    reducer: SessionReducer,
    steps: Vec<Output>,
    summaries: Vec<serde_json::Value>,
    not_summarized: u64,
    written: Exported,
    /// The document's bytes not yet written ([`crate::event_json::write_message`]).
    json: Vec<u8>,
}

impl JsonExport {
    /// Writes the document's start.
    pub fn start(out: &mut impl Write) -> io::Result<JsonExport> {
        write!(
            out,
            "{{\"format\":\"ackscope-session\",\"protocol_version\":{PROTOCOL_VERSION},\"messages\":["
        )?;
        Ok(JsonExport {
            reducer: SessionReducer::new(),
            steps: Vec::new(),
            summaries: Vec::new(),
            not_summarized: 0,
            written: Exported::default(),
            json: Vec::with_capacity(2 * crate::event_json::CHUNK_BYTES),
        })
    }

    /// Writes one message of `messages` and follows it in its run.
    pub fn message(&mut self, message: &ToBrowser, out: &mut impl Write) -> io::Result<()> {
        if self.written.messages > 0 {
            self.json.extend_from_slice(b",\n");
        }
        self.written.messages += 1;
        // Byte for byte what `serde_json::to_writer` writes, several times faster.
        crate::event_json::write_message(message, &mut self.json, out)?;
        self.reducer.handle(message, &mut self.steps);
        self.summarize();
        Ok(())
    }

    /// Ends the document: each run's summary, and `file_error`, the error that ended the
    /// messages if one did.
    pub fn finish(
        mut self,
        file_error: Option<&WireError>,
        out: &mut impl Write,
    ) -> io::Result<Exported> {
        self.reducer.finish(&mut self.steps);
        self.summarize();
        let not_followed = self.reducer.not_followed();
        out.write_all(&self.json)?;
        write!(out, "],\n\"runs\":")?;
        serde_json::to_writer(&mut *out, &self.summaries)?;
        self.written.runs = self.summaries.len();
        let not_summarized = self.not_summarized + not_followed;
        let error = file_error.map(|e| e.to_string());
        write!(
            out,
            ",\"runs_not_summarized\":{not_summarized},\"error\":{}}}",
            serde_json::to_string(&error)?
        )?;
        writeln!(out)?;
        out.flush()?;
        Ok(self.written)
    }

    /// Keeps the summary of each run the last message ended.
    fn summarize(&mut self) {
        for step in self.steps.drain(..) {
            let Output::Ended(run, _) = step else { continue };
            if self.summaries.len() < MAX_EXPORTED_SUMMARIES {
                self.summaries.push(run_summary(*run));
            } else {
                self.not_summarized += 1;
            }
        }
    }
}

/// One run's entry in the document's `runs`: the report `run --json` prints for it
/// ([`RunReport::of`], with nothing a file does not hold), or an imported capture's
/// connections and the stall classes found in its packets.
fn run_summary(run: FollowedRun) -> serde_json::Value {
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
    let report = RunReport::of_file_run(&run);
    // Through a `Value`: its fields in the order `run --json` prints them (sorted by name).
    let report = serde_json::to_value(report).expect("a report is plain data");
    serde_json::json!({ "run": id.0, "summary": report })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::RunId;
    use crate::report::LiveFacts;
    use crate::spec::RrSpec;
    use crate::synthetic::{nagle_run, MS};
    use crate::wire::RunOutcome;
    use crate::wire::{Hello, HostFacts, Instruments};

    fn session(requests: u32, finished: bool) -> Vec<ToBrowser> {
        let run = RunId(1);
        let spec = RrSpec { requests, ..RrSpec::default() };
        let mut messages = vec![
            ToBrowser::Hello(Hello::current("0.1.0", HostFacts::default())),
            ToBrowser::RunStarted {
                run,
                spec: Scenario::Rr(spec),
                instruments: Instruments::default(),
            },
            ToBrowser::Events { run, events: nagle_run(requests, 40 * MS) },
        ];
        if finished {
            messages.push(ToBrowser::RunFinished { run, outcome: RunOutcome::Completed });
        }
        messages
    }

    fn exported(messages: Vec<Result<ToBrowser, WireError>>) -> (serde_json::Value, Exported) {
        let mut out = Vec::new();
        let (written, _) = write_export_json(messages.into_iter(), &mut out).unwrap();
        assert!(out.ends_with(b"}\n"), "one document, one line's end");
        (serde_json::from_slice(&out).expect("valid JSON"), written)
    }

    #[test]
    fn every_message_is_exported_and_each_run_has_the_report_its_tally_makes() {
        let messages = session(5, true);
        let mut reducer = SessionReducer::new();
        let mut steps = Vec::new();
        for message in &messages {
            reducer.handle(message, &mut steps);
        }
        let Some(Output::Ended(run, _)) = steps.pop() else { panic!("the run ended") };
        let report =
            RunReport::of(&run.tally, &run.scenario, &RunOutcome::Completed, LiveFacts::default());
        let requests = report.rr().map(|rr| rr.requests);
        assert_eq!(requests, Some(5), "{report:?}");
        assert!(report.stalls.as_ref().is_some_and(|s| !s.is_empty()), "{report:?}");

        let (document, written) = exported(messages.iter().cloned().map(Ok).collect());
        assert_eq!(written, Exported { messages: messages.len() as u64, runs: 1 });
        assert_eq!(document["format"], "ackscope-session");
        assert_eq!(document["protocol_version"], PROTOCOL_VERSION);
        assert_eq!(document["messages"].as_array().map(Vec::len), Some(messages.len()));
        assert_eq!(document["runs"][0]["run"], 1);
        let summary: RunReport =
            serde_json::from_value(document["runs"][0]["summary"].clone()).unwrap();
        assert_eq!(summary, report);
        assert_eq!(document["runs_not_summarized"], 0);
        assert_eq!(document["error"], serde_json::Value::Null);
    }

    #[test]
    fn a_session_cut_short_keeps_what_came_before_and_says_why() {
        let mut messages: Vec<_> = session(3, false).into_iter().map(Ok).collect();
        let cut = WireError::Truncated { offset: 1234 };
        messages.push(Err(cut.clone()));
        let (document, written) = exported(messages);
        assert_eq!(written.messages, 3);
        assert_eq!(document["error"], cut.to_string());
        let summary = &document["runs"][0]["summary"];
        assert_eq!(summary["outcome"], "failed");
        assert_eq!(summary["error"], "the file ends before the run did");
    }
}
