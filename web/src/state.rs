//! What the app knows, and the one pure function that changes it: [`apply`].
//!
//! Every message from the probe goes through [`apply`]; the view only reads. Nothing here touches
//! the DOM or the socket, so the rules below (a Hello starts over, nothing counts before a readable
//! Hello, the newest run is shown) are tested without a browser page or a probe.
//!
//! This state lives outside Leptos' fine-grained reactivity: a run can bring thousands of events
//! per second, and one signal per event would re-render per event. The app keeps one
//! [`AppState`] and bumps a single version signal per animation frame (see `app.rs`).

use std::cell::OnceCell;

use ackscope_shared::analysis::{RunAnalysis, Summary};
use ackscope_shared::wire::{check_hello, RunOutcome, ToBrowser, WireError};
use ackscope_shared::{RrSpec, RunId};

/// Where a run is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Running,
    Done,
    Failed { error: String },
}

impl RunStatus {
    /// The word the run list shows, also used as a `data-status` value.
    pub fn word(&self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed { .. } => "failed",
        }
    }

    /// For people: "running", "done", "failed: <the probe's error>".
    pub fn label(&self) -> String {
        match self {
            RunStatus::Failed { error } => format!("failed: {error}"),
            other => other.word().to_string(),
        }
    }
}

/// One run as received: its spec, where it is, and the analysis of every event so far.
#[derive(Debug)]
pub struct Run {
    pub id: RunId,
    pub spec: RrSpec,
    pub status: RunStatus,
    pub analysis: RunAnalysis,
    /// The summary sorts every latency: computed at most once per change, not once per read.
    summary: OnceCell<Summary>,
}

impl Run {
    fn new(id: RunId, spec: RrSpec) -> Run {
        Run {
            id,
            spec,
            status: RunStatus::Running,
            analysis: RunAnalysis::new(),
            summary: OnceCell::new(),
        }
    }

    pub fn summary(&self) -> &Summary {
        self.summary.get_or_init(|| self.analysis.summary())
    }
}

/// Everything the probe told us since its last Hello, plus which run the user is looking at.
#[derive(Debug, Default)]
pub struct AppState {
    /// In the order the probe started them (oldest first).
    runs: Vec<Run>,
    selected: Option<RunId>,
    /// Why the probe refused the last run the user asked for; cleared by the next request.
    pub rejected: Option<String>,
    /// A stream this build cannot read (another protocol version, a malformed message).
    pub protocol_error: Option<String>,
    /// The probe's own version, from its Hello.
    pub probe_version: Option<String>,
    /// The user asked for a run and the probe has not answered yet: keeps Run from being pressed
    /// twice.
    pub start_pending: bool,
    /// Whether this stream began with a Hello we can read. Until it has, nothing else is applied:
    /// a stream of another version could decode as garbage that looks valid.
    greeted: bool,
}

impl AppState {
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    pub fn run(&self, id: RunId) -> Option<&Run> {
        self.runs.iter().find(|run| run.id == id)
    }

    pub fn selected(&self) -> Option<&Run> {
        self.run(self.selected?)
    }

    pub fn selected_id(&self) -> Option<RunId> {
        self.selected
    }

    /// Shows `id` if there is such a run; otherwise keeps the current choice.
    pub fn select(&mut self, id: RunId) {
        if self.run(id).is_some() {
            self.selected = Some(id);
        }
    }

    /// Whether the probe is still running one of our runs (it runs one at a time).
    pub fn is_running(&self) -> bool {
        self.runs.iter().any(|run| run.status == RunStatus::Running)
    }

    /// Whether the stream so far is one we can read and act on.
    pub fn is_greeted(&self) -> bool {
        self.greeted
    }

    /// The user pressed Run and the request is on its way.
    pub fn start_requested(&mut self) {
        self.rejected = None;
        self.start_pending = true;
    }

    /// The request never left (no connection): nothing to wait for.
    pub fn start_failed(&mut self) {
        self.start_pending = false;
    }

    /// A message that did not decode: show it rather than drop it silently.
    pub fn bad_message(&mut self, error: &WireError) {
        self.protocol_error = Some(format!("could not read a message from the probe: {error}"));
    }

    fn run_mut(&mut self, id: RunId) -> Option<&mut Run> {
        // The live run is the newest, so search from the end.
        self.runs.iter_mut().rev().find(|run| run.id == id)
    }
}

/// Applies one message from the probe.
pub fn apply(state: &mut AppState, message: ToBrowser) {
    match message {
        ToBrowser::Hello(ref hello) => {
            // A Hello starts a stream: after it the probe replays every run it has, so what we
            // held is either stale or about to arrive again. Start from nothing.
            *state = AppState {
                probe_version: Some(hello.ackscope_version.clone()),
                ..AppState::default()
            };
            match check_hello(&message) {
                Ok(()) => state.greeted = true,
                Err(error) => state.protocol_error = Some(error.to_string()),
            }
        }
        _ if !state.greeted => {}
        ToBrowser::RunStarted { run, spec } => {
            state.runs.retain(|existing| existing.id != run);
            state.runs.push(Run::new(run, spec));
            // The newest run is the one the user just asked for (or the latest of a replay).
            state.selected = Some(run);
            state.start_pending = false;
        }
        ToBrowser::Events { run, events } => {
            if let Some(run) = state.run_mut(run) {
                run.analysis.push_all(&events);
                run.summary = OnceCell::new();
            }
        }
        ToBrowser::RunFinished { run, outcome } => {
            if let Some(run) = state.run_mut(run) {
                run.status = match outcome {
                    RunOutcome::Completed => RunStatus::Done,
                    RunOutcome::Failed { error } => RunStatus::Failed { error },
                };
            }
        }
        ToBrowser::Rejected { reason } => {
            state.rejected = Some(reason);
            state.start_pending = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::wire::{Hello, PROTOCOL_VERSION};
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use crate::fixtures::{hello, nagle_run, MS};

    fn started(state: &mut AppState, id: u32) {
        if !state.is_greeted() {
            apply(state, hello());
        }
        apply(
            state,
            ToBrowser::RunStarted {
                run: RunId(id),
                spec: RrSpec::default(),
            },
        );
    }

    #[wasm_bindgen_test]
    fn hello_starts_over() {
        let mut state = AppState::default();
        started(&mut state, 1);
        apply(
            &mut state,
            ToBrowser::Events {
                run: RunId(1),
                events: nagle_run(3, 44 * MS),
            },
        );
        state.protocol_error = Some("old".into());
        assert_eq!(state.runs().len(), 1);

        apply(&mut state, hello());
        assert!(state.runs().is_empty());
        assert!(state.selected().is_none());
        assert!(state.protocol_error.is_none());
        assert!(state.is_greeted());
        assert_eq!(state.probe_version.as_deref(), Some("0.1.0"));
    }

    #[wasm_bindgen_test]
    fn events_update_the_summary_and_finish_sets_the_status() {
        let mut state = AppState::default();
        started(&mut state, 1);
        assert_eq!(
            state.selected().map(|run| run.status.clone()),
            Some(RunStatus::Running)
        );
        assert!(state.is_running());

        let events = nagle_run(5, 44 * MS);
        let (first, rest) = events.split_at(events.len() / 2);
        apply(
            &mut state,
            ToBrowser::Events {
                run: RunId(1),
                events: first.to_vec(),
            },
        );
        let partial = state.selected().map(|run| run.summary().requests);
        apply(
            &mut state,
            ToBrowser::Events {
                run: RunId(1),
                events: rest.to_vec(),
            },
        );
        let run = state.selected().expect("run 1 is selected");
        // The cached summary was dropped when more events came.
        assert!(partial < Some(5), "{partial:?}");
        assert_eq!(run.summary().requests, 5);
        assert_eq!(
            run.summary().stalled_reads,
            8,
            "two per request after the first"
        );
        assert!(run.summary().max_ms > 88.0, "{}", run.summary().max_ms);

        let failed = RunOutcome::Failed {
            error: "connection reset".into(),
        };
        apply(
            &mut state,
            ToBrowser::RunFinished {
                run: RunId(1),
                outcome: failed,
            },
        );
        let status = &state.runs()[0].status;
        assert_eq!(status.label(), "failed: connection reset");
        assert!(!state.is_running());
    }

    #[wasm_bindgen_test]
    fn the_newest_run_is_selected_and_the_user_can_go_back() {
        let mut state = AppState::default();
        started(&mut state, 1);
        apply(
            &mut state,
            ToBrowser::RunFinished {
                run: RunId(1),
                outcome: RunOutcome::Completed,
            },
        );
        started(&mut state, 2);
        assert_eq!(state.selected_id(), Some(RunId(2)));
        state.select(RunId(1));
        assert_eq!(state.selected_id(), Some(RunId(1)));
        state.select(RunId(9));
        assert_eq!(
            state.selected_id(),
            Some(RunId(1)),
            "an unknown run changes nothing"
        );
        // Events for a run we never heard of are dropped, not attributed elsewhere.
        apply(
            &mut state,
            ToBrowser::Events {
                run: RunId(7),
                events: nagle_run(2, MS),
            },
        );
        assert!(state
            .runs()
            .iter()
            .all(|run| run.analysis.requests().is_empty()));
    }

    #[wasm_bindgen_test]
    fn rejected_keeps_the_reason_until_the_next_request() {
        let mut state = AppState::default();
        apply(&mut state, hello());
        state.start_requested();
        assert!(state.start_pending);
        let reason = "a run is already in progress: wait for run 3 to finish".to_string();
        apply(
            &mut state,
            ToBrowser::Rejected {
                reason: reason.clone(),
            },
        );
        assert_eq!(state.rejected.as_ref(), Some(&reason));
        assert!(!state.start_pending);
        state.start_requested();
        assert!(state.rejected.is_none());
    }

    #[wasm_bindgen_test]
    fn another_protocol_version_is_shown_and_nothing_after_it_applies() {
        let mut state = AppState::default();
        let newer = Hello {
            protocol_version: PROTOCOL_VERSION + 1,
            ackscope_version: "9.0.0".into(),
        };
        apply(&mut state, ToBrowser::Hello(newer));
        let error = state.protocol_error.clone().expect("a version error");
        assert!(
            error.contains(&format!("version {}", PROTOCOL_VERSION + 1)),
            "{error}"
        );
        assert!(!state.is_greeted());
        apply(
            &mut state,
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: RrSpec::default(),
            },
        );
        assert!(state.runs().is_empty());

        // Messages before any Hello are refused the same way.
        let mut fresh = AppState::default();
        apply(
            &mut fresh,
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: RrSpec::default(),
            },
        );
        assert!(fresh.runs().is_empty());
    }

    #[wasm_bindgen_test]
    fn an_undecodable_message_is_reported() {
        let mut state = AppState::default();
        let error = ackscope_shared::wire::decode::<ToBrowser>(&[0xff, 0xff]).unwrap_err();
        state.bad_message(&error);
        let shown = state.protocol_error.expect("an error to show");
        assert!(
            shown.starts_with("could not read a message from the probe"),
            "{shown}"
        );
    }
}
