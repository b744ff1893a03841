//! One stream of messages since its Hello (the probe's live one, or an opened file's): its runs,
//! in the order they started, each message applied as it comes.

use std::collections::HashMap;

use ackscope_shared::wire::{check_hello, write_frame, Hello, HostFacts, RunOutcome, ToBrowser};
use ackscope_shared::RunId;

use super::run::{Run, RunStatus};
use super::MAX_FILE_RUNS;

/// One stream of messages since its Hello: the probe's live one, or an opened file's.
#[derive(Debug, Default)]
pub struct Stream {
    /// In the order the probe started them (oldest first).
    runs: Vec<Run>,
    /// Where each run is in `runs`: a file of many runs, their events in any order, is read in
    /// time proportional to its size, not to its runs times its messages.
    index: HashMap<RunId, usize>,
    /// The most runs kept (a file's session): past it a run's messages are counted, not kept.
    max_runs: Option<usize>,
    /// Runs started past `max_runs`.
    pub(super) runs_not_kept: u64,
    /// The stream's Hello, readable or not (it names the probe's version either way).
    hello: Option<Hello>,
    /// Whether this stream began with a Hello we can read. Until it has, nothing else is applied:
    /// a stream of another version could decode as garbage that looks valid.
    greeted: bool,
    /// A stream this build cannot read (another protocol version, a malformed message).
    pub error: Option<String>,
    /// Every message applied since the Hello, framed as in a session file, for the live session
    /// (what Download saves); `None` for a file's session, whose file the user already has.
    record: Option<Vec<u8>>,
}

impl Stream {
    /// Lets up to `budget` requests of its runs go, the newest run first (see
    /// [`Run::release_some`]); false once they all went.
    pub(super) fn release_some(&mut self, budget: usize) -> bool {
        while let Some(run) = self.runs.last_mut() {
            if run.release_some(budget) {
                return true;
            }
            self.runs.pop();
        }
        self.index.clear();
        false
    }

    /// The probe's stream: recorded so that it can be downloaded.
    pub fn live() -> Stream {
        Stream { record: Some(Vec::new()), ..Stream::default() }
    }

    /// An opened file's stream. A file is whatever anyone sends: it keeps at most
    /// [`MAX_FILE_RUNS`] runs, so that a file of many tiny runs cannot cost the page more
    /// memory than a run's worth each (a run's analysis is a few KB before its first event).
    pub fn file() -> Stream {
        Stream { max_runs: Some(MAX_FILE_RUNS), ..Stream::default() }
    }

    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    pub fn run(&self, id: RunId) -> Option<&Run> {
        self.index.get(&id).map(|&at| &self.runs[at])
    }

    pub fn hello(&self) -> Option<&Hello> {
        self.hello.as_ref()
    }

    /// The machine the runs were made on, once the stream is readable.
    pub fn host(&self) -> Option<&HostFacts> {
        self.greeted.then_some(self.hello.as_ref()).flatten().map(|hello| &hello.host)
    }

    /// Whether the stream so far is one we can read and act on.
    pub fn is_greeted(&self) -> bool {
        self.greeted
    }

    pub fn is_running(&self) -> bool {
        self.runs.iter().any(|run| run.status == RunStatus::Running)
    }

    /// The session as a session file (Hello and every run's messages, each framed), if this
    /// session is recorded and readable.
    pub fn file_bytes(&self) -> Option<&[u8]> {
        self.record.as_deref().filter(|_| self.greeted)
    }

    /// Applies one message; returns the run it started, if it started one.
    pub fn apply(&mut self, message: ToBrowser) -> Option<RunId> {
        if let ToBrowser::Hello(hello) = &message {
            // A Hello starts a stream: after it the probe replays every run it has, so what we
            // held is either stale or about to arrive again. Start from nothing.
            *self = Stream {
                hello: Some(hello.clone()),
                record: self.record.take().map(|_| Vec::new()),
                max_runs: self.max_runs,
                ..Stream::default()
            };
            match check_hello(&message) {
                Ok(()) => self.greeted = true,
                Err(error) => self.error = Some(error.to_string()),
            }
        }
        // A refusal answers one tab's request; it is no part of the session.
        if !self.greeted || matches!(message, ToBrowser::Rejected { .. }) {
            return None;
        }
        if let Some(record) = &mut self.record {
            write_frame(&message, record);
        }
        match message {
            // A file's overviews and trailer repeat what its events say (they are read from
            // the file's end before the events: see `AppState::preview_file`).
            ToBrowser::Hello(_)
            | ToBrowser::Rejected { .. }
            | ToBrowser::Overview { .. }
            | ToBrowser::Trailer(_)
            | ToBrowser::ClassState(_)
            | ToBrowser::Stream { .. }
            | ToBrowser::TryRights { .. }
            | ToBrowser::ClassVotes(_) => None,
            ToBrowser::RunStarted { run, spec, instruments } => {
                // An id started again (only a crafted file does that) replaces its run where it
                // was.
                match self.index.get(&run) {
                    Some(&at) => self.runs[at] = Run::new(run, spec, instruments),
                    None if self.max_runs.is_some_and(|most| self.runs.len() >= most) => {
                        self.runs_not_kept += 1;
                        return None;
                    }
                    None => {
                        let started = Run::new(run, spec, instruments);
                        self.index.insert(run, self.runs.len());
                        self.runs.push(started);
                    }
                }
                Some(run)
            }
            ToBrowser::Events { run, events } => {
                if let Some(run) = self.run_mut(run) {
                    run.push(&events);
                }
                None
            }
            ToBrowser::OptionsTried { run, tried } => {
                if let Some(run) = self.run_mut(run) {
                    run.tried.take(&tried);
                }
                None
            }
            ToBrowser::RunFinished { run, outcome } => {
                if let Some(run) = self.run_mut(run) {
                    run.status = match outcome {
                        RunOutcome::Completed => RunStatus::Done,
                        RunOutcome::Failed { error } => RunStatus::Failed { error },
                        RunOutcome::Interrupted => RunStatus::Interrupted,
                    };
                    run.ended();
                }
                None
            }
        }
    }

    /// The stream ended for good (a file's last frame): a run still going never finished.
    pub(super) fn end(&mut self) {
        for run in &mut self.runs {
            if run.status == RunStatus::Running {
                run.status = RunStatus::Incomplete;
                run.ended();
            }
        }
    }

    pub(super) fn run_mut(&mut self, id: RunId) -> Option<&mut Run> {
        self.index.get(&id).map(|&at| &mut self.runs[at])
    }
}
