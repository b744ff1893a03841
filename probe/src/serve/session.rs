//! The runs of this probe's session, kept so that every browser tab (and a reloaded one) sees
//! all of them, and streamed to each tab from where it is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ackscope_shared::wire::{Instruments, RunOutcome, ToBrowser, EVENTS_PER_MESSAGE};
use ackscope_shared::{Event, RunId, Scenario};
use tokio::sync::watch;

pub struct RunRecord {
    pub id: RunId,
    pub spec: Scenario,
    pub instruments: Instruments,
    pub events: Vec<Event>,
    pub outcome: Option<RunOutcome>,
    /// Set to stop the run early (a page's Stop button).
    pub stop: Arc<AtomicBool>,
}

/// Append-only store of runs; a watch channel says "something was appended".
pub struct Session {
    runs: Mutex<Vec<RunRecord>>,
    changed: watch::Sender<u64>,
    /// Tells this probe's stream from another's (a restarted probe numbers its runs from 1
    /// again): a page resumes only the stream it was cut from.
    id: u64,
}

/// Where a page's stream was cut: the last run it had begun receiving, how many of that run's
/// events it had, and whether it had its end. Every earlier run it had whole: one run goes at a
/// time, and each run's end is sent before the next run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumePoint {
    pub stream: u64,
    pub run: RunId,
    pub events: usize,
    pub finished: bool,
}

impl ResumePoint {
    /// `ID.RUN.EVENTS.FINISHED` (FINISHED 0 or 1), as the page puts it in `/ws?resume=`.
    pub fn parse(text: &str) -> Option<ResumePoint> {
        let mut parts = text.split('.');
        let mut next = || parts.next()?.parse::<u64>().ok();
        let (stream, run, events, finished) = (next()?, next()?, next()?, next()?);
        Some(ResumePoint {
            stream,
            run: RunId(u32::try_from(run).ok()?),
            events: usize::try_from(events).ok()?,
            finished: match finished {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }
}

/// How far one WebSocket has been sent: per run, events sent and whether the end was sent.
#[derive(Default)]
pub struct Cursor {
    runs: Vec<(usize, bool)>,
}

impl Session {
    pub fn new() -> Arc<Session> {
        Arc::new(Session {
            runs: Mutex::new(Vec::new()),
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
        let index = (point.run.0 as usize).checked_sub(1)?;
        let last = runs.get(index)?;
        let possible = point.stream == self.id
            && last.id == point.run
            && point.events <= last.events.len()
            && (!point.finished || last.outcome.is_some())
            && runs[..index].iter().all(|run| run.outcome.is_some());
        possible.then(|| Cursor {
            runs: runs[..index]
                .iter()
                .map(|run| (run.events.len(), true))
                .chain([(point.events, point.finished)])
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
        if let Some(running) = runs.iter().find(|r| r.outcome.is_none()) {
            return Err(format!(
                "run {} is still going; wait for it to finish, then press Run again",
                running.id.0
            ));
        }
        let id = RunId(runs.len() as u32 + 1);
        let stop = Arc::new(AtomicBool::new(false));
        let record = RunRecord {
            id,
            spec,
            instruments,
            events: Vec::new(),
            outcome: None,
            stop: Arc::clone(&stop),
        };
        runs.push(record);
        drop(runs);
        self.notify();
        Ok((id, stop))
    }

    /// Asks the run that is going to stop; an error if none is.
    pub fn stop_running(&self) -> Result<RunId, String> {
        let runs = self.lock();
        let running = runs.iter().find(|r| r.outcome.is_none()).ok_or("no run is going")?;
        running.stop.store(true, Ordering::Relaxed);
        Ok(running.id)
    }

    pub fn append(&self, run: RunId, events: Vec<Event>) {
        if let Some(record) = self.lock().iter_mut().find(|r| r.id == run) {
            record.events.extend(events);
        }
        self.notify();
    }

    pub fn finish(&self, run: RunId, outcome: RunOutcome) {
        if let Some(record) = self.lock().iter_mut().find(|r| r.id == run) {
            record.outcome = Some(outcome);
        }
        self.notify();
    }

    /// The messages a WebSocket at `cursor` has not been sent yet, advancing the cursor.
    pub fn catch_up(&self, cursor: &mut Cursor) -> Vec<ToBrowser> {
        let runs = self.lock();
        let mut messages = Vec::new();
        for (index, record) in runs.iter().enumerate() {
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

    fn lock(&self) -> MutexGuard<'_, Vec<RunRecord>> {
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
