//! The runs of this probe's session, kept so that every browser tab (and a reloaded one) sees
//! all of them, and streamed to each tab from where it is.
//!
//! A run is kept as the encoded WebSocket messages pages are sent, once: every page is handed
//! the same reference-counted buffers ([`Bytes`]), a few at a time, so a page costs its cursor
//! and the message on its way, never a copy of the session. A page that does not read waits on
//! its message; nothing more is made for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

use ackscope_shared::tried::OptionTried;
use ackscope_shared::wire::{
    self, Instruments, ResumePoint, RunOutcome, ToBrowser, EVENTS_PER_MESSAGE,
};
use ackscope_shared::{Event, RunId, Scenario};
use axum::body::Bytes;
use tokio::sync::watch;

use super::limits;
use crate::watch::tune::Try;

/// One run, as the messages a page is sent: `RunStarted`, its events' `Events` messages, and
/// `RunFinished` once it ended.
struct RunRecord {
    id: RunId,
    /// `RunStarted`, encoded.
    started: Bytes,
    /// The run's events up to `open`, as encoded `Events` messages of at most
    /// [`EVENTS_PER_MESSAGE`] events each, in order.
    chunks: Vec<Chunk>,
    /// The newest events, not yet in a chunk: no page has been sent them. They become one when
    /// they fill it, when a page asks for them, or when the run ends.
    open: Vec<Event>,
    /// The events in `chunks`.
    sealed: usize,
    /// `RunFinished`, encoded, once the run ended.
    finished: Option<Bytes>,
    /// Set to stop the run early (a page's Stop button).
    stop: Arc<AtomicBool>,
    /// A watch's record of options tried on its programs ([`ToBrowser::OptionsTried`]), the
    /// newest in full, encoded, and how many times it changed: a page is sent the newest
    /// whenever it has not had it.
    tried: Option<(Bytes, u32)>,
    /// A running watch: where the options a page tries go ([`Session::try_on_watch`]).
    tries: Option<WatchTries>,
    /// A watch's run that ended where a tried option went into force: the run it goes on in
    /// (a try asked of it goes there).
    continued: Option<RunId>,
}

/// The way into a running watch for the options pages try, and what they asked so far.
struct WatchTries {
    send: Sender<Try>,
    asked: Vec<Try>,
}

/// One encoded `ToBrowser::Events` message of a run, shared by every page it is sent to.
struct Chunk {
    /// The run's events before this message's.
    first: usize,
    payload: Bytes,
}

impl RunRecord {
    fn new(id: RunId, spec: Scenario, instruments: Instruments, stop: Arc<AtomicBool>) -> Self {
        RunRecord {
            id,
            started: encoded(&ToBrowser::RunStarted { run: id, spec, instruments }),
            chunks: Vec::new(),
            open: Vec::new(),
            sealed: 0,
            finished: None,
            stop,
            tried: None,
            tries: None,
            continued: None,
        }
    }

    /// The run's events so far: those of `chunks` and `open`.
    fn events(&self) -> usize {
        self.sealed + self.open.len()
    }

    /// Appends `events`, making a chunk of every [`EVENTS_PER_MESSAGE`] of them.
    fn push(&mut self, events: Vec<Event>) {
        if self.open.is_empty() && events.len() < EVENTS_PER_MESSAGE {
            // The usual batch, a thousand events or so: kept as it came.
            self.open = events;
            return;
        }
        let mut events = events.into_iter();
        while events.len() > 0 {
            let room = EVENTS_PER_MESSAGE - self.open.len();
            self.open.extend(events.by_ref().take(room));
            if self.open.len() == EVENTS_PER_MESSAGE {
                self.seal();
            }
        }
    }

    /// Makes the open events a chunk, encoded once for every page.
    fn seal(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let events = std::mem::take(&mut self.open);
        let (first, count) = (self.sealed, events.len());
        let message = ToBrowser::Events { run: self.id, events };
        self.chunks.push(Chunk { first, payload: encoded(&message) });
        self.sealed += count;
    }

    /// The next message of a page that has had `sent` of the run's events (fewer than
    /// [`RunRecord::events`]), and how many events it carries. A page that was sent whole
    /// messages is handed the shared one; one that resumed inside a message gets that message's
    /// tail, encoded for it.
    fn events_from(&mut self, sent: usize) -> (Bytes, usize) {
        if sent >= self.sealed {
            self.seal();
        }
        let index = self.chunks.partition_point(|chunk| chunk.first <= sent) - 1;
        let chunk = &self.chunks[index];
        let end = self.chunks.get(index + 1).map_or(self.sealed, |next| next.first);
        if chunk.first == sent {
            return (chunk.payload.clone(), end - sent);
        }
        let Ok(ToBrowser::Events { run, mut events }) = wire::decode(&chunk.payload) else {
            unreachable!("a chunk is an Events message this session encoded")
        };
        events.drain(..sent - chunk.first);
        (encoded(&ToBrowser::Events { run, events }), end - sent)
    }
}

/// `message` encoded, in a buffer of its own size (it is kept for as long as its run).
fn encoded(message: &ToBrowser) -> Bytes {
    Bytes::from(wire::encode(message).into_boxed_slice())
}

/// Events the session keeps in memory across its runs: room for the largest browser run
/// ([`limits::MAX_EVENTS`]) beside the runs before it. They are kept encoded, about 10 bytes a
/// syscall event (more for TCP_INFO samples and captured segments), so about 100 MB of a
/// syscall-only session. Starting a run drops the oldest finished runs' events until the new
/// run has that room.
pub const MAX_KEPT_EVENTS: usize = 2 * limits::MAX_EVENTS as usize;
/// Runs the session keeps, however small (each costs its spec and bookkeeping).
pub const MAX_KEPT_RUNS: usize = 1000;
/// The most messages one [`Session::catch_up`] hands out: a page far behind takes the backlog
/// this many shared buffers at a time, each sent before the next are asked for.
pub const MESSAGES_PER_CATCH_UP: usize = 16;

/// Append-only store of runs, but for the oldest, dropped past [`MAX_KEPT_EVENTS`] or
/// [`MAX_KEPT_RUNS`]; a watch channel says "something was appended".
pub struct Session {
    runs: Mutex<Runs>,
    changed: watch::Sender<u64>,
    /// Tells this probe's stream from another's (a restarted probe numbers its runs from 1
    /// again): a page resumes only the stream it was cut from.
    id: u64,
}

/// How far one WebSocket has been sent, run by run.
#[derive(Default)]
pub struct Cursor {
    runs: Vec<Sent>,
    /// The dropped runs this page has been told about: a run dropped while the page was still
    /// being sent it gets its end, saying so, once.
    reconciled: usize,
}

/// What a page was sent of one run: its events, the changes of its record of options tried,
/// and whether its end.
#[derive(Clone, Copy, Default)]
struct Sent {
    events: usize,
    tried: u32,
    finished: bool,
}

impl Sent {
    /// All of a run that ended, or that the page will never get.
    const WHOLE: Sent = Sent { events: 0, tried: u32::MAX, finished: true };
}

/// The runs kept, after the `dropped` oldest: the run at `kept[i]` is the stream's run number
/// `dropped + i + 1`.
#[derive(Default)]
struct Runs {
    dropped: usize,
    kept: Vec<RunRecord>,
}

impl Runs {
    /// A new run, after making room for it; its id.
    fn push(&mut self, spec: Scenario, instruments: Instruments, stop: Arc<AtomicBool>) -> RunId {
        self.make_room();
        let id = RunId((self.dropped + self.kept.len()) as u32 + 1);
        self.kept.push(RunRecord::new(id, spec, instruments, stop));
        id
    }

    /// Drops the oldest finished runs until a new run has room for the largest browser run's
    /// events and is within the count. Tabs that had them keep them; a tab that opens later
    /// starts from the first run kept.
    fn make_room(&mut self) {
        let mut events: usize = self.kept.iter().map(|r| r.events()).sum();
        let full = |events: usize, runs: usize| {
            events + limits::MAX_EVENTS as usize > MAX_KEPT_EVENTS || runs >= MAX_KEPT_RUNS
        };
        while full(events, self.kept.len())
            && self.kept.first().is_some_and(|r| r.finished.is_some())
        {
            let oldest = self.kept.remove(0);
            events -= oldest.events();
            self.dropped += 1;
            tracing::warn!(
                "run {} ({} events) dropped from the probe's memory to make room for the next \
                 run; pages that have it keep it",
                oldest.id.0,
                oldest.events()
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
            && usize::try_from(point.events).is_ok_and(|events| events <= last.events())
            && (!point.finished || last.finished.is_some())
            && runs.kept[..index].iter().all(|run| run.finished.is_some());
        possible.then(|| Cursor {
            reconciled: runs.dropped,
            // The record of options tried is sent again: each entry replaces its own.
            runs: std::iter::repeat_n(Sent::WHOLE, runs.dropped)
                .chain(
                    runs.kept[..index]
                        .iter()
                        .map(|run| Sent { events: run.events(), ..Sent::WHOLE }),
                )
                .chain([Sent {
                    events: point.events as usize,
                    // A run the page had whole had its record before its end.
                    tried: if point.finished { u32::MAX } else { 0 },
                    finished: point.finished,
                }])
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
        if let Some(running) = runs.kept.iter().find(|r| r.finished.is_none()) {
            return Err(format!(
                "run {} is still going; wait for it to finish, then press Run again",
                running.id.0
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let id = runs.push(spec, instruments, Arc::clone(&stop));
        drop(runs);
        self.notify();
        Ok((id, stop))
    }

    /// Makes the running watch `run` take the options pages try ([`Session::try_on_watch`]):
    /// they come out of the receiver.
    pub fn take_tries(&self, run: RunId) -> Receiver<Try> {
        let (send, tries) = std::sync::mpsc::channel();
        if let Some(record) = self.lock().kept.iter_mut().find(|r| r.id == run) {
            record.tries = Some(WatchTries { send, asked: Vec::new() });
        }
        tries
    }

    /// Asks the running watch `run` to try `option`; refused, saying why, when `run` is no
    /// running watch or has tried it already.
    pub fn try_on_watch(&self, run: RunId, option: Try) -> Result<(), String> {
        let mut runs = self.lock();
        // A page that had not yet heard that its watch went on in a new run asks the run it
        // shows: the try goes to the run the watch goes on in.
        let mut asked = run;
        while let Some(next) = runs.kept.iter().find(|r| r.id == asked).and_then(|r| r.continued) {
            asked = next;
        }
        let record = runs.kept.iter_mut().find(|r| r.id == asked).ok_or_else(|| {
            format!("run {} is not in this probe's session; start a watch to try an option", run.0)
        })?;
        if record.finished.is_some() {
            return Err(format!(
                "run {} has ended: options are tried on a running watch; start one",
                asked.0
            ));
        }
        let Some(tries) = &mut record.tries else {
            return Err(format!(
                "run {} is not a watch: options are tried on the programs a watch watches",
                run.0
            ));
        };
        if option.sides_beyond(&tries.asked).next().is_none() {
            return Err(format!(
                "{} on {} was asked for already in this watch",
                option.knob.name(),
                option.sides.words()
            ));
        }
        tries.send.send(option).map_err(|_| format!("run {} is ending", run.0))?;
        tries.asked.push(option);
        Ok(())
    }

    /// The running watch `run` put a group of tried options into force: `run` ends there,
    /// completed, and the run that goes on (returned) is of the programs with them, the same
    /// watch, stopped by the same Stop, with the record of what was tried.
    pub fn split_run(
        &self,
        run: RunId,
        spec: Scenario,
        instruments: Instruments,
        tried: Vec<OptionTried>,
    ) -> RunId {
        let mut runs = self.lock();
        let Some(record) = runs.kept.iter_mut().find(|r| r.id == run) else { return run };
        record.seal();
        let outcome = RunOutcome::Completed;
        record.finished = Some(encoded(&ToBrowser::RunFinished { run, outcome }));
        let (stop, tries) = (Arc::clone(&record.stop), record.tries.take());
        // No room made: the watch's events are bounded as one run's, across its runs, and the
        // room was made when it began.
        let next = RunId((runs.dropped + runs.kept.len()) as u32 + 1);
        let mut record = RunRecord::new(next, spec, instruments, stop);
        record.tries = tries;
        record.tried = Some((encoded(&ToBrowser::OptionsTried { run: next, tried }), 1));
        runs.kept.push(record);
        if let Some(ended) = runs.kept.iter_mut().find(|r| r.id == run) {
            ended.continued = Some(next);
        }
        drop(runs);
        self.notify();
        next
    }

    /// Whether a running watch has options tried on the watched programs (to put back when
    /// it ends).
    pub fn tries_in_force(&self) -> bool {
        let runs = self.lock();
        let running = runs.kept.iter().filter(|r| r.finished.is_none());
        running.filter_map(|r| r.tries.as_ref()).any(|tries| !tries.asked.is_empty())
    }

    /// The running watch `run`'s options reached more sockets: its record, in full.
    pub fn tried(&self, run: RunId, tried: Vec<OptionTried>) {
        if let Some(record) = self.lock().kept.iter_mut().find(|r| r.id == run) {
            let changes = record.tried.as_ref().map_or(0, |(_, changes)| *changes) + 1;
            record.tried = Some((encoded(&ToBrowser::OptionsTried { run, tried }), changes));
        }
        self.notify();
    }

    /// Asks the run that is going to stop; an error if none is.
    pub fn stop_running(&self) -> Result<RunId, String> {
        let runs = self.lock();
        let running = runs.kept.iter().find(|r| r.finished.is_none()).ok_or("no run is going")?;
        running.stop.store(true, Ordering::Relaxed);
        Ok(running.id)
    }

    pub fn append(&self, run: RunId, events: Vec<Event>) {
        if let Some(record) = self.lock().kept.iter_mut().find(|r| r.id == run) {
            record.push(events);
        }
        self.notify();
    }

    pub fn finish(&self, run: RunId, outcome: RunOutcome) {
        if let Some(record) = self.lock().kept.iter_mut().find(|r| r.id == run) {
            record.seal();
            record.finished = Some(encoded(&ToBrowser::RunFinished { run, outcome }));
            record.tries = None;
        }
        self.notify();
    }

    /// The next messages a WebSocket at `cursor` has not been sent, at most
    /// [`MESSAGES_PER_CATCH_UP`] of them, advancing the cursor: none when it has had
    /// everything. Each is the session's own buffer, shared, not a copy.
    pub fn catch_up(&self, cursor: &mut Cursor) -> Vec<Bytes> {
        let mut runs = self.lock();
        let mut messages = Vec::new();
        let dropped = runs.dropped;
        // A run dropped while this page was still being sent it (a slow page, a run the size of
        // the session): its end says what the page will never get, so the run does not look
        // as if it were still going.
        for index in cursor.reconciled..dropped.min(cursor.runs.len()) {
            let Sent { events: sent, finished, .. } = &mut cursor.runs[index];
            if !*finished {
                let error = format!(
                    "dropped from the probe's memory to make room for later runs before this \
                     page had all of it ({sent} events sent); the command line's -o keeps whole \
                     runs"
                );
                let run = RunId(index as u32 + 1);
                let end = ToBrowser::RunFinished { run, outcome: RunOutcome::Failed { error } };
                messages.push(encoded(&end));
                *finished = true;
            }
        }
        cursor.reconciled = dropped;
        // Runs dropped before this page had them: it never will.
        if cursor.runs.len() < dropped {
            cursor.runs.resize(dropped, Sent::WHOLE);
        }
        for (offset, record) in runs.kept.iter_mut().enumerate() {
            if messages.len() >= MESSAGES_PER_CATCH_UP {
                break;
            }
            let index = dropped + offset;
            if index == cursor.runs.len() {
                cursor.runs.push(Sent::default());
                messages.push(record.started.clone());
            }
            let Sent { events: sent, tried, finished } = &mut cursor.runs[index];
            if let Some((message, changes)) = &record.tried {
                if *tried < *changes && messages.len() < MESSAGES_PER_CATCH_UP {
                    messages.push(message.clone());
                    *tried = *changes;
                }
            }
            while *sent < record.events() && messages.len() < MESSAGES_PER_CATCH_UP {
                let (message, events) = record.events_from(*sent);
                messages.push(message);
                *sent += events;
            }
            let all_sent = *sent == record.events() && messages.len() < MESSAGES_PER_CATCH_UP;
            if let (Some(end), true, false) = (&record.finished, all_sent, *finished) {
                messages.push(end.clone());
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

    /// Every message not yet sent at `cursor`, as a page would read them.
    fn catch_up_all(session: &Session, cursor: &mut Cursor) -> Vec<ToBrowser> {
        let mut all = Vec::new();
        loop {
            let messages = session.catch_up(cursor);
            assert!(messages.len() <= MESSAGES_PER_CATCH_UP, "{} at once", messages.len());
            if messages.is_empty() {
                return all;
            }
            all.extend(messages.iter().map(|bytes| wire::decode::<ToBrowser>(bytes).unwrap()));
        }
    }

    fn events_of(messages: &[ToBrowser]) -> Vec<Event> {
        let batches = messages.iter().filter_map(|m| match m {
            ToBrowser::Events { events, .. } => Some(events.clone()),
            _ => None,
        });
        batches.flatten().collect()
    }

    #[test]
    fn a_late_tab_gets_everything_and_a_live_tab_only_what_is_new() {
        let session = Session::new();
        let run =
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()).unwrap();
        session.append(run, vec![event(1), event(2)]);
        let mut live = Cursor::default();
        assert_eq!(catch_up_all(&session, &mut live).len(), 2, "RunStarted + one Events");
        session.append(run, vec![event(3)]);
        session.finish(run, RunOutcome::Completed);
        let new = catch_up_all(&session, &mut live);
        assert!(matches!(&new[0], ToBrowser::Events { events, .. } if events == &[event(3)]));
        assert!(matches!(&new[1], ToBrowser::RunFinished { .. }));
        assert!(session.catch_up(&mut live).is_empty());

        let mut late = Cursor::default();
        assert_eq!(events_of(&catch_up_all(&session, &mut late)), [event(1), event(2), event(3)]);
    }

    /// Pages are handed the session's own buffers, not copies, a bounded number at a time; the
    /// events come in messages of at most EVENTS_PER_MESSAGE, in order, and a page that resumes
    /// inside a message gets exactly the rest.
    #[test]
    fn every_page_shares_the_sessions_messages_and_takes_them_a_few_at_a_time() {
        let session = Session::new();
        let run =
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()).unwrap();
        let all: Vec<Event> = (0..20 * EVENTS_PER_MESSAGE as u64 + 5).map(event).collect();
        for batch in all.chunks(3000) {
            session.append(run, batch.to_vec());
        }
        session.finish(run, RunOutcome::Completed);

        let (mut first, mut second) = (Cursor::default(), Cursor::default());
        let (a, b) = (session.catch_up(&mut first), session.catch_up(&mut second));
        assert_eq!(a.len(), MESSAGES_PER_CATCH_UP, "a bounded number at once");
        for (a, b) in a.iter().zip(&b) {
            assert_eq!(a.as_ptr(), b.as_ptr(), "one buffer for both pages");
        }
        let messages = catch_up_all(&session, &mut first);
        assert!(matches!(messages.last(), Some(ToBrowser::RunFinished { .. })));
        assert_eq!(events_of(&messages).len(), all.len() - 15 * EVENTS_PER_MESSAGE);
        for message in &messages {
            if let ToBrowser::Events { events, .. } = message {
                assert!(events.len() <= EVENTS_PER_MESSAGE, "{} events", events.len());
            }
        }

        let inside = ResumePoint { stream: session.id(), run, events: 12_345, finished: false };
        let mut resumed = session.cursor_at(inside).unwrap();
        assert_eq!(events_of(&catch_up_all(&session, &mut resumed)), all[12_345..]);
    }

    /// A live page is sent the events as they come, each once, whatever their batches.
    #[test]
    fn a_live_page_gets_each_event_once_as_it_comes() {
        let session = Session::new();
        let run =
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()).unwrap();
        let mut live = Cursor::default();
        let mut got = Vec::new();
        let all: Vec<Event> = (0..5 * EVENTS_PER_MESSAGE as u64).map(event).collect();
        // Between two looks, a full message's worth arrives and more: the page is behind the
        // full messages while newer events wait beyond them.
        for (i, batch) in all.chunks(1000).enumerate() {
            session.append(run, batch.to_vec());
            if i % 10 == 0 {
                got.extend(events_of(&catch_up_all(&session, &mut live)));
            }
        }
        session.finish(run, RunOutcome::Completed);
        got.extend(events_of(&catch_up_all(&session, &mut live)));
        assert_eq!(got, all);
        let mut late = Cursor::default();
        assert_eq!(events_of(&catch_up_all(&session, &mut late)), all);
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
        let _ = catch_up_all(&session, &mut live);
        let second = session.begin_run(spec(), Instruments::default()).unwrap();
        assert_eq!(second, RunId(2), "numbers go on");
        assert_eq!(started(&catch_up_all(&session, &mut Cursor::default())), [2], "run 1 dropped");
        assert_eq!(started(&catch_up_all(&session, &mut live)), [2], "a live page just goes on");
        let resume = ResumePoint { stream: session.id(), run: first, events: 1, finished: true };
        assert!(session.cursor_at(resume).is_none(), "a page cut off in run 1 starts over");
        session.finish(second, RunOutcome::Completed);

        // And by count: small runs, at most MAX_KEPT_RUNS of them kept.
        for _ in 0..MAX_KEPT_RUNS {
            let run = session.begin_run(spec(), Instruments::default()).unwrap();
            session.append(run, vec![event(2)]);
            session.finish(run, RunOutcome::Completed);
        }
        let late = started(&catch_up_all(&session, &mut Cursor::default()));
        assert_eq!(late.len(), MAX_KEPT_RUNS);
        assert_eq!((late[0], late[late.len() - 1]), (3, MAX_KEPT_RUNS as u32 + 2));
        let resume =
            ResumePoint { stream: session.id(), run: RunId(500), events: 1, finished: true };
        let mut cursor = session.cursor_at(resume).expect("a kept run resumes");
        assert_eq!(started(&catch_up_all(&session, &mut cursor))[0], 501, "from where it was");
    }

    /// A page still being sent a run when the run is dropped gets the run's end, saying what
    /// it missed, instead of a run that looks as if it were still going.
    #[test]
    fn a_page_behind_a_dropped_run_is_told_it_ends_there() {
        let session = Session::new();
        let spec = || Scenario::Rr(RrSpec::default());
        let first = session.begin_run(spec(), Instruments::default()).unwrap();
        session.append(first, vec![event(1); 40 * EVENTS_PER_MESSAGE]);
        session.finish(first, RunOutcome::Completed);
        // A slow page: one call's worth of the run so far.
        let mut slow = Cursor::default();
        assert_eq!(session.catch_up(&mut slow).len(), MESSAGES_PER_CATCH_UP);
        for _ in 0..MAX_KEPT_RUNS {
            let run = session.begin_run(spec(), Instruments::default()).unwrap();
            session.finish(run, RunOutcome::Completed);
        }
        let rest = catch_up_all(&session, &mut slow);
        let ToBrowser::RunFinished { run, outcome: RunOutcome::Failed { error } } = &rest[0] else {
            panic!("the dropped run's end first: {:?}", rest.first());
        };
        assert_eq!(*run, first);
        assert!(error.starts_with("dropped from the probe's memory"), "{error}");
        let ends = rest.iter().filter(|m| matches!(m, ToBrowser::RunFinished { .. })).count();
        assert_eq!(ends, 1 + MAX_KEPT_RUNS, "each run's end once, the dropped one's too");
        assert!(session.catch_up(&mut slow).is_empty());
    }

    /// A page's watch that tries a fix: the probe's session ends the watch's run where the
    /// option went into force and goes on in a new run with its record; every page, a late
    /// one too, gets the record after the new run's start and before its events, and a
    /// change of it again; the same fix twice, or on a run that is no running watch, is
    /// refused by name.
    #[test]
    fn a_watch_that_tries_a_fix_splits_and_every_page_gets_the_record() {
        use crate::watch::tune::{Knob, Sides};
        use ackscope_shared::tried::OptionTried;
        use ackscope_shared::WatchSpec;
        let session = Session::new();
        let spec = Scenario::Watch(WatchSpec { ports: vec![8080], ..WatchSpec::default() });
        let (run, stop) =
            session.begin_stoppable_run(spec.clone(), Instruments::default()).unwrap();
        let tries = session.take_tries(run);
        let server = Try { knob: Knob::NoDelay, sides: Sides::Server };
        session.try_on_watch(run, server).unwrap();
        assert_eq!(tries.try_recv(), Ok(server), "the watch is handed the try");
        let again = session.try_on_watch(run, server).unwrap_err();
        assert!(again.contains("asked for already"), "{again}");
        let mut live = Cursor::default();
        session.append(run, vec![event(1)]);
        let _ = catch_up_all(&session, &mut live);

        let entry = |sockets| OptionTried {
            option: Knob::NoDelay,
            side: Side::Server,
            pid: 4711,
            command: "python3".into(),
            sockets,
            already_on: 0,
        };
        let after = session.split_run(run, spec.clone(), Instruments::default(), vec![entry(1)]);
        assert_eq!(after, RunId(2));
        session.append(after, vec![event(2)]);
        let messages = catch_up_all(&session, &mut live);
        assert!(
            matches!(&messages[0], ToBrowser::RunFinished { run: r, outcome: RunOutcome::Completed } if *r == run)
        );
        assert!(matches!(&messages[1], ToBrowser::RunStarted { run, .. } if *run == after));
        assert!(
            matches!(&messages[2], ToBrowser::OptionsTried { run, tried } if *run == after && tried == &[entry(1)])
        );
        assert_eq!(events_of(&messages[3..]), [event(2)]);
        // The same Stop ends the run that goes on; the watch takes the other side's try still.
        assert_eq!(session.stop_running(), Ok(after));
        assert!(stop.load(Ordering::Relaxed));
        // A page that had not heard of the split asks run 1: the try goes on with the watch.
        let client = Try { knob: Knob::NoDelay, sides: Sides::Both };
        assert!(session.tries_in_force());
        session.try_on_watch(run, client).unwrap();
        assert_eq!(tries.try_recv(), Ok(client));
        let refused = session.try_on_watch(after, client).unwrap_err();
        assert!(refused.contains("asked for already"), "{refused}");

        session.tried(after, vec![entry(3)]);
        let messages = catch_up_all(&session, &mut live);
        assert!(
            matches!(&messages[..], [ToBrowser::OptionsTried { tried, .. }] if tried == &[entry(3)])
        );
        session.finish(after, RunOutcome::Interrupted);
        assert!(!session.tries_in_force(), "the watch ended: put back");
        let refused = session.try_on_watch(run, server).unwrap_err();
        assert!(refused.contains("run 2 has ended"), "{refused}");
        let late = catch_up_all(&session, &mut Cursor::default());
        let tried: Vec<&ToBrowser> =
            late.iter().filter(|m| matches!(m, ToBrowser::OptionsTried { .. })).collect();
        assert!(
            matches!(&tried[..], [ToBrowser::OptionsTried { tried, .. }] if tried == &[entry(3)]),
            "the newest, once"
        );

        let rr =
            session.begin_run(Scenario::Rr(RrSpec::default()), Instruments::default()).unwrap();
        let not_a_watch = session.try_on_watch(rr, server).unwrap_err();
        assert!(not_a_watch.contains("is not a watch"), "{not_a_watch}");
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
