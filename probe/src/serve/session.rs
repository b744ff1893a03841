//! The runs of this probe's session, kept so that every browser tab (and a reloaded one) sees
//! all of them, and streamed to each tab from where it is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ackscope_shared::wire::{Instruments, ResumePoint, RunOutcome, ToBrowser, EVENTS_PER_MESSAGE};
use ackscope_shared::{Event, RunId, Scenario};
use tokio::sync::watch;

use super::limits;

pub struct RunRecord {
    pub id: RunId,
    pub spec: Scenario,
    pub instruments: Instruments,
    pub events: Vec<Event>,
    pub outcome: Option<RunOutcome>,
    /// Set to stop the run early (a page's Stop button).
    pub stop: Arc<AtomicBool>,
}

/// Events the session keeps in memory across its runs, about 320 MB: room for the largest
/// browser run ([`limits::MAX_EVENTS`]) beside the runs before it. Starting a run drops the
/// oldest finished runs' events until the new run has that room.
pub const MAX_KEPT_EVENTS: usize = 2 * limits::MAX_EVENTS as usize;
/// Runs the session keeps, however small (each costs its spec and bookkeeping).
pub const MAX_KEPT_RUNS: usize = 1000;

/// Append-only store of runs, but for the oldest, dropped past [`MAX_KEPT_EVENTS`] or
/// [`MAX_KEPT_RUNS`]; a watch channel says "something was appended".
pub struct Session {
    runs: Mutex<Runs>,
    changed: watch::Sender<u64>,
    /// Tells this probe's stream from another's (a restarted probe numbers its runs from 1
    /// again): a page resumes only the stream it was cut from.
    id: u64,
}

/// How far one WebSocket has been sent: per run, events sent and whether the end was sent.
#[derive(Default)]
pub struct Cursor {
    runs: Vec<(usize, bool)>,
}

/// The runs kept, after the `dropped` oldest: the run at `kept[i]` is the stream's run number
/// `dropped + i + 1`.
#[derive(Default)]
struct Runs {
    dropped: usize,
    kept: Vec<RunRecord>,
}

impl Runs {
    /// Drops the oldest finished runs until a new run has room for the largest browser run's
    /// events and is within the count. Tabs that had them keep them; a tab that opens later
    /// starts from the first run kept.
    fn make_room(&mut self) {
        let mut events: usize = self.kept.iter().map(|r| r.events.len()).sum();
        let full = |events: usize, runs: usize| {
            events + limits::MAX_EVENTS as usize > MAX_KEPT_EVENTS || runs >= MAX_KEPT_RUNS
        };
        while full(events, self.kept.len())
            && self.kept.first().is_some_and(|r| r.outcome.is_some())
        {
            let oldest = self.kept.remove(0);
            events -= oldest.events.len();
            self.dropped += 1;
            tracing::warn!(
                "run {} ({} events) dropped from the probe's memory to make room for the next \
                 run; pages that have it keep it",
                oldest.id.0,
                oldest.events.len()
            );
        }
    }
}

impl Session {
    pub fn new() -> Arc<Session> {
        Arc::new(Session {
            runs: Mutex::new(Runs::default()),
            changed: watch::channel(0).0,
            id: stream_id(),
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The cursor of a page that had everything up to `point`, if `point` is a place in this
    /// stream (else the page starts over).
    pub fn cursor_at(&self, point: ResumePoint) -> Option<Cursor> {
        let runs = self.lock();
        // A run dropped since the page had it: the page starts over from the runs kept.
        let index = (point.run.0 as usize).checked_sub(1 + runs.dropped)?;
        let last = runs.kept.get(index)?;
        let possible = point.stream == self.id
            && last.id == point.run
            && usize::try_from(point.events).is_ok_and(|events| events <= last.events.len())
            && (!point.finished || last.outcome.is_some())
            && runs.kept[..index].iter().all(|run| run.outcome.is_some());
        possible.then(|| Cursor {
            runs: std::iter::repeat_n((0, true), runs.dropped)
                .chain(runs.kept[..index].iter().map(|run| (run.events.len(), true)))
                .chain([(point.events as usize, point.finished)])
                .collect(),
        })
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Starts recording a new run, unless one is still going: runs share the machine, and two at
    /// once would disturb each other's timings.
    pub fn begin_run(&self, spec: Scenario, instruments: Instruments) -> Result<RunId, String> {
        self.begin_stoppable_run(spec, instruments).map(|(id, _)| id)
    }

    /// [`Session::begin_run`], with the flag that [`Session::stop_running`] sets.
    pub fn begin_stoppable_run(
        &self,
        spec: Scenario,
        instruments: Instruments,
    ) -> Result<(RunId, Arc<AtomicBool>), String> {
        let mut runs = self.lock();
        if let Some(running) = runs.kept.iter().find(|r| r.outcome.is_none()) {
            return Err(format!(
                "run {} is still going; wait for it to finish, then press Run again",
                running.id.0
            ));
        }
        runs.make_room();
        let id = RunId((runs.dropped + runs.kept.len()) as u32 + 1);
        let stop = Arc::new(AtomicBool::new(false));
        let record = RunRecord {
            id,
            spec,
            instruments,
            events: Vec::new(),
            outcome: None,
            stop: Arc::clone(&stop),
        };
        runs.kept.push(record);
        drop(runs);
        self.notify();
        Ok((id, stop))
    }

    /// Asks the run that is going to stop; an error if none is.
    pub fn stop_running(&self) -> Result<RunId, String> {
        let runs = self.lock();
        let running = runs.kept.iter().find(|r| r.outcome.is_none()).ok_or("no run is going")?;
        running.stop.store(true, Ordering::Relaxed);
        Ok(running.id)
    }

    pub fn append(&self, run: RunId, events: Vec<Event>) {
        if let Some(record) = self.lock().kept.iter_mut().find(|r| r.id == run) {
            record.events.extend(events);
        }
        self.notify();
    }

    pub fn finish(&self, run: RunId, outcome: RunOutcome) {
        if let Some(record) = self.lock().kept.iter_mut().find(|r| r.id == run) {
            record.outcome = Some(outcome);
        }
        self.notify();
    }

    /// The messages a WebSocket at `cursor` has not been sent yet, advancing the cursor.
    pub fn catch_up(&self, cursor: &mut Cursor) -> Vec<ToBrowser> {
        let runs = self.lock();
        let mut messages = Vec::new();
        // Runs dropped before this page had them: it never will.
        if cursor.runs.len() < runs.dropped {
            cursor.runs.resize(runs.dropped, (0, true));
        }
        for (offset, record) in runs.kept.iter().enumerate() {
            let index = runs.dropped + offset;
            if index == cursor.runs.len() {
                cursor.runs.push((0, false));
                messages.push(ToBrowser::RunStarted {
                    run: record.id,
                    spec: record.spec.clone(),
                    instruments: record.instruments,
                });
            }
            let (sent, finished) = &mut cursor.runs[index];
            for chunk in record.events[*sent..].chunks(EVENTS_PER_MESSAGE) {
                messages.push(ToBrowser::Events { run: record.id, events: chunk.to_vec() });
            }
            *sent = record.events.len();
            if let (Some(outcome), false) = (&record.outcome, *finished) {
                messages.push(ToBrowser::RunFinished { run: record.id, outcome: outcome.clone() });
                *finished = true;
            }
        }
        messages
    }

    fn notify(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    fn lock(&self) -> MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A stream id no other start of a probe is likely to have had: the clock's nanoseconds mixed
/// with the process id (not a secret: it only tells streams apart).
fn stream_id() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now ^ u64::from(std::process::id()).rotate_left(32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackscope_shared::{ConnId, EventKind, ReqId, RrSpec, Side};

    fn event(at_ns: u64) -> Event {
        Event {
            at_ns,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(0),
            kind: EventKind::RequestStart,
        }
    }

    #[test]
    fn a_late_tab_gets_everything_and_a_live_tab_only_what_is_new() {
        let session = Session::new();
        let run =
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()).unwrap();
        session.append(run, vec![event(1), event(2)]);
        let mut live = Cursor::default();
        assert_eq!(session.catch_up(&mut live).len(), 2, "RunStarted + one Events");
        session.append(run, vec![event(3)]);
        session.finish(run, RunOutcome::Completed);
        let new = session.catch_up(&mut live);
        assert!(matches!(&new[0], ToBrowser::Events { events, .. } if events == &[event(3)]));
        assert!(matches!(&new[1], ToBrowser::RunFinished { .. }));
        assert!(session.catch_up(&mut live).is_empty());

        let mut late = Cursor::default();
        let all = session.catch_up(&mut late);
        let replayed: usize = all
            .iter()
            .map(|m| if let ToBrowser::Events { events, .. } = m { events.len() } else { 0 })
            .sum();
        assert_eq!(replayed, 3);
    }

    fn started(messages: &[ToBrowser]) -> Vec<u32> {
        let ids = messages.iter().filter_map(|m| match m {
            ToBrowser::RunStarted { run, .. } => Some(run.0),
            _ => None,
        });
        ids.collect()
    }

    /// The probe's memory is bounded across runs, not only within one: the oldest finished
    /// runs are dropped to make room, and run numbers go on from where they were.
    #[test]
    fn the_oldest_runs_are_dropped_past_the_sessions_bounds() {
        let session = Session::new();
        let spec = || Scenario::Rr(RrSpec::default());
        let mut live = Cursor::default();
        let first = session.begin_run(spec(), Instruments::default()).unwrap();
        // One run with more events than leave the next one its room.
        session.append(first, vec![event(1); limits::MAX_EVENTS as usize + 1]);
        session.finish(first, RunOutcome::Completed);
        let _ = session.catch_up(&mut live);
        let second = session.begin_run(spec(), Instruments::default()).unwrap();
        assert_eq!(second, RunId(2), "numbers go on");
        assert_eq!(started(&session.catch_up(&mut Cursor::default())), [2], "run 1 dropped");
        assert_eq!(started(&session.catch_up(&mut live)), [2], "a live page just goes on");
        let resume = ResumePoint { stream: session.id(), run: first, events: 1, finished: true };
        assert!(session.cursor_at(resume).is_none(), "a page cut off in run 1 starts over");
        session.finish(second, RunOutcome::Completed);

        // And by count: small runs, at most MAX_KEPT_RUNS of them kept.
        for _ in 0..MAX_KEPT_RUNS {
            let run = session.begin_run(spec(), Instruments::default()).unwrap();
            session.append(run, vec![event(2)]);
            session.finish(run, RunOutcome::Completed);
        }
        let late = started(&session.catch_up(&mut Cursor::default()));
        assert_eq!(late.len(), MAX_KEPT_RUNS);
        assert_eq!((late[0], late[late.len() - 1]), (3, MAX_KEPT_RUNS as u32 + 2));
        let resume =
            ResumePoint { stream: session.id(), run: RunId(500), events: 1, finished: true };
        let mut cursor = session.cursor_at(resume).expect("a kept run resumes");
        assert_eq!(started(&session.catch_up(&mut cursor))[0], 501, "from where it was");
    }

    #[test]
    fn one_run_at_a_time() {
        let session = Session::new();
        let first =
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()).unwrap();
        let refused =
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()).unwrap_err();
        assert!(refused.contains("still going"), "{refused}");
        session.finish(first, RunOutcome::Completed);
        assert_eq!(
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()),
            Ok(RunId(2))
        );
    }
}
