//! What the app knows, and the pure functions that change it.
//!
//! A [`Stream`] is one stream of messages as the probe sends them: the live one from the probe's
//! WebSocket, or one per opened session file. Every message of either goes through
//! [`Stream::apply`], so a file shows exactly what the live view showed. [`apply`] is the live
//! stream's entry point: it adds what only the live link has (a refusal, the pending Run button,
//! following the newest run). Nothing here touches the DOM or the socket, so these rules are
//! tested without a browser page or a probe.
//!
//! This state lives outside Leptos' fine-grained reactivity: a run can bring thousands of events
//! per second, and one signal per event would re-render per event. The app keeps one
//! [`AppState`] and bumps a single version signal per animation frame (see `app.rs`).
//!
//! - [`run`]: one run, its analysis and the answers the views read;
//! - [`stream`]: one stream of messages and its runs;
//! - here: every stream the page has (the live one, the opened files), what is selected and
//!   compared, and [`apply`].

mod run;
mod stream;
mod whole;

pub use run::{Attribution, Run, RunStatus};
pub use stream::Stream;
pub use whole::{Ranks, WholePass};

use std::ops::{Not, Range};
use std::sync::Arc;

use ackscope_shared::overview::Overview;
use ackscope_shared::spec::MAX_REQUESTS;
use ackscope_shared::tried::Sides;
use ackscope_shared::wire::{
    BlockIndex, ClassState, ClassVotes, IndexedBlock, ResumePoint, ToBrowser, WireError,
};
use ackscope_shared::{RunId, Scenario};

use crate::session_file::{Problem, SessionDecoder, MAX_FILE_EVENTS};

/// Where the page reads a file's run from when it does not read the file from its start: its
/// run `run` from request `first` on (the blocks wholly before it are left unread, the events of
/// earlier requests in the blocks read are left out), chosen to hold request `wanted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadFrom {
    pub run: RunId,
    pub first: u32,
    pub wanted: u32,
    /// The timeline has selected `wanted` once.
    pub wanted_shown: bool,
}

/// What a read of a file for a request reads: from the request on (the block that holds it
/// first), or around it (up to half of what the page holds before it, for the requests that
/// led up to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    From,
    Around,
}

/// How to read a file from a request: where, and the byte ranges of the file left unread (in
/// file order, each a block's frame).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    pub from: ReadFrom,
    pub skipped: Vec<Range<u64>>,
}

/// An opened session file, numbered in the order the user opened them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

/// Where a run came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Live,
    File(FileId),
}

impl Source {
    /// The `data-source` value of a run entry.
    pub fn word(self) -> &'static str {
        match self {
            Source::Live => "live",
            Source::File(_) => "file",
        }
    }
}

/// A run in one of the sessions: run ids repeat between the live session and files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunKey {
    pub source: Source,
    pub run: RunId,
}

impl RunKey {
    pub fn live(run: RunId) -> RunKey {
        RunKey { source: Source::Live, run }
    }
}

/// A session file the user opened: its runs, and what was wrong with it, if anything.
#[derive(Debug)]
pub struct OpenedFile {
    pub id: FileId,
    pub name: String,
    pub session: Stream,
    /// Names the file and the problem; the runs read before the problem are still shown.
    pub error: Option<String>,
    /// While the file is being read: its decoder, the bytes fed so far and the file's size.
    loading: Option<Loading>,
    /// Its runs' block indexes, from its end (none for a file cut short or older than version
    /// 10): what reading it from a request needs.
    indexes: Vec<BlockIndex>,
    /// Where it was read from, when not from its start.
    pub read_from: Option<ReadFrom>,
    /// Its runs' overviews from its end: shown while it is read, and for a run the page holds
    /// only part of.
    overviews: Vec<(RunId, Overview)>,
    /// For a run it holds in part: the facts of every request of that run, once a pass over
    /// the whole file has made them (kept when the file is read again from a request), and the
    /// pass while it goes.
    ranks: Option<(RunId, Arc<Ranks>)>,
    ranking: Option<WholePass>,
    /// A session the Linux in this tab recorded (docs/IN-BROWSER.md): what ran it, said with
    /// every figure of it ("in-browser Linux 6.1.192, emulated by v86 ...").
    pub emulated: Option<String>,
}

/// What a file has of a run's ranks: made ([`AppState::ranks_of`]), or the pass making them.
pub type Ranking = (Option<(RunId, Arc<Ranks>)>, Option<WholePass>);

/// A run of which the page holds only part ([`AppState::whole_run`]).
#[derive(Debug)]
pub struct WholeRun<'a> {
    /// Its requests in order, from request 0, as the file's end has them.
    pub overview: &'a Overview,
    /// The requests the page holds.
    pub held: Range<u32>,
}

/// The most runs a file's session keeps (see [`Stream::file`]): far more than a sweep, a lesson
/// or a day of runs from the page hold, and at most a few tens of MB however small the runs.
pub const MAX_FILE_RUNS: usize = 1000;

/// No request takes fewer bytes of a session file of rows than this (its start and end events
/// alone take more; a recorded one takes hundreds): what bounds a file's claim of how many it
/// holds, for the room made for them up front. In compressed blocks (version 9) a request may
/// take fewer (a recorded one about 24): room is then made as they come.
const MIN_FILE_BYTES_PER_REQUEST: u64 = 16;

/// A file being read chunk by chunk.
#[derive(Debug)]
struct Loading {
    decoder: SessionDecoder,
    read_bytes: u64,
    total_bytes: u64,
    newest: Option<RunId>,
    /// Set once the file was decoded elsewhere (the decoder's worker), whose decoder found this
    /// wrong with it, if anything: then `decoder`, never fed, has nothing to say.
    decoded_elsewhere: Option<Option<Problem>>,
}

/// Where a file's messages go as they are read: its session, and what each run it starts is
/// given from the file's end (its room, where it was read from). One place for the page's own
/// decoder and the worker's.
struct FileInto<'a> {
    session: &'a mut Stream,
    newest: &'a mut Option<RunId>,
    overviews: &'a [(RunId, Overview)],
    from: Option<ReadFrom>,
    /// Believed only as far as the file could hold that many requests.
    most: usize,
}

impl<'a> FileInto<'a> {
    fn new(
        session: &'a mut Stream,
        newest: &'a mut Option<RunId>,
        total_bytes: u64,
        overviews: &'a [(RunId, Overview)],
        from: Option<ReadFrom>,
    ) -> FileInto<'a> {
        let most = usize::try_from(total_bytes / MIN_FILE_BYTES_PER_REQUEST).unwrap_or(0);
        FileInto { session, newest, overviews, from, most }
    }

    fn apply(&mut self, message: ToBrowser) {
        let started = self.session.apply(message);
        if let Some(run) = started.and_then(|run| self.session.run_mut(run)) {
            let first = self.from.filter(|from| from.run == run.id).map_or(0, |from| from.first);
            run.analysis.start_at(first);
            // The file's end said how many requests this run has: room for them at once.
            let rows = self.overviews.iter().find(|(id, _)| *id == run.id).map(|(_, o)| o.rows);
            if let Some(rows) = rows {
                let rows = (rows as usize).saturating_sub(first as usize);
                run.analysis.reserve_requests(rows.min(self.most));
            }
            // A file's runs are what its reader came to see: each is attributed as its pieces
            // arrive, so reading the last piece costs what any piece does (attributing the
            // million-request file whole at its end was most of a 390-620 ms task).
            run.watch();
        }
        *self.newest = started.or(*self.newest);
    }
}

impl OpenedFile {
    /// `(bytes read, bytes in the file)` while the file is being read.
    pub fn progress(&self) -> Option<(u64, u64)> {
        self.loading.as_ref().map(|loading| (loading.read_bytes, loading.total_bytes))
    }

    /// Lets up to `budget` of its runs' requests go; false once its runs are all gone. A file of
    /// millions of requests is freed in steps of a few milliseconds, not one task of over 100.
    pub fn release_some(&mut self, budget: usize) -> bool {
        self.session.release_some(budget)
    }

    /// What a file read from a request holds, for people.
    pub fn read_from_note(&self) -> Option<String> {
        let ReadFrom { run, first, wanted, .. } = self.read_from?;
        Some(match first {
            0 => format!("run {} read from its start, to hold request {wanted}", run.0),
            _ => format!(
                "run {} read from request {first}, to hold request {wanted}: the blocks before \
                 it were left unread",
                run.0
            ),
        })
    }

    /// Whether it can be read from any request (its end indexes its blocks).
    pub fn reads_from_a_request(&self) -> bool {
        !self.indexes.is_empty()
    }
}

/// The live session, the opened files, and which run the user is looking at.
#[derive(Debug)]
pub struct AppState {
    pub live: Stream,
    /// In the order they were opened.
    files: Vec<OpenedFile>,
    next_file: u32,
    selected: Option<RunKey>,
    /// The runs marked for the Compare view, in the order they were marked (the first is the
    /// one the others are compared with).
    compared: Vec<RunKey>,
    /// In a class: where the presenter is, as the room last said.
    pub class: Option<ClassState>,
    /// In a class: how the room voted on the presenter's question, as the room last said.
    pub class_votes: Option<ClassVotes>,
    /// Why the probe refused the last run the user asked for; cleared by the next request.
    pub rejected: Option<String>,
    /// The user asked for a run and the probe has not answered yet: keeps Run from being pressed
    /// twice.
    pub start_pending: bool,
    /// A live run a link asked for: shown when it arrives (the probe replays its runs after
    /// its Hello), and kept shown while the rest of the replay comes in.
    follow: Option<RunKey>,
    /// The probe's live stream, once it said which (`ToBrowser::Stream`): a reconnect asks to
    /// resume it ([`AppState::resume_query`]).
    live_stream: Option<u64>,
    /// A reconnect's Hello, held until the probe says whether the stream resumes (keep what the
    /// page has) or starts over (start from it).
    pending_hello: Option<ToBrowser>,
    /// Whether the probe may try a stall's fix on the programs its watch watches, or what it
    /// lacks (`ToBrowser::TryRights`); `None` until it said.
    pub try_rights: Option<Result<(), String>>,
    /// The fixes the user asked the running watch to try, by the run they were asked of: their
    /// buttons wait for the run to split.
    pub try_asked: Vec<(RunId, Sides)>,
    /// A try is on its way and the probe has not answered: a refusal now is the try's, shown
    /// beside its buttons ([`AppState::try_refused`]), not the run form's.
    try_pending: bool,
    /// Why the probe refused the last fix asked for.
    pub try_refused: Option<String>,
    /// The most events the page reads of a file ([`MAX_FILE_EVENTS`]; less in tests).
    file_event_cap: u64,
}

impl Default for AppState {
    fn default() -> Self {
        AppState {
            live: Stream::live(),
            files: Vec::new(),
            next_file: 0,
            selected: None,
            compared: Vec::new(),
            class: None,
            class_votes: None,
            rejected: None,
            start_pending: false,
            follow: None,
            live_stream: None,
            pending_hello: None,
            try_rights: None,
            try_asked: Vec::new(),
            try_pending: false,
            try_refused: None,
            file_event_cap: MAX_FILE_EVENTS,
        }
    }
}

impl AppState {
    /// Reads at most `events` events of a file: a small file then stands for one past what
    /// the page holds.
    #[cfg(test)]
    pub fn cap_file_events(&mut self, events: u64) {
        self.file_event_cap = events;
    }

    pub fn files(&self) -> &[OpenedFile] {
        &self.files
    }

    pub fn file(&self, id: FileId) -> Option<&OpenedFile> {
        self.files.iter().find(|file| file.id == id)
    }

    fn file_mut(&mut self, id: FileId) -> Option<&mut OpenedFile> {
        self.files.iter_mut().find(|file| file.id == id)
    }

    pub fn session(&self, source: Source) -> Option<&Stream> {
        match source {
            Source::Live => Some(&self.live),
            Source::File(id) => self.file(id).map(|file| &file.session),
        }
    }

    pub fn run(&self, key: RunKey) -> Option<&Run> {
        self.session(key.source)?.run(key.run)
    }

    pub fn selected(&self) -> Option<&Run> {
        self.run(self.selected?)
    }

    pub fn selected_key(&self) -> Option<RunKey> {
        self.selected
    }

    /// Shows `key` if there is such a run; otherwise keeps the current choice.
    pub fn select(&mut self, key: RunKey) {
        if self.run(key).is_some() {
            self.selected = Some(key);
            self.follow = None;
        }
    }

    /// Shows the newest live run (a class's student, when the presenter runs one live).
    pub fn show_newest_live(&mut self) {
        if let Some(run) = self.live.runs().last() {
            self.selected = Some(RunKey::live(run.id));
            self.follow = None;
        }
    }

    /// Shows the live run `key` now if it is there, else as soon as it arrives; until the user
    /// chooses another run or presses Run, newer runs do not take its place.
    pub fn follow(&mut self, key: RunKey) {
        self.follow = Some(key);
        if self.run(key).is_some() {
            self.selected = Some(key);
        }
    }

    /// Whether the probe is still running one of our runs (it runs one at a time).
    pub fn is_running(&self) -> bool {
        self.live.is_running()
    }

    /// Whether the live stream so far is one we can read and act on.
    pub fn is_greeted(&self) -> bool {
        self.live.is_greeted()
    }

    /// The probe's own version, from its Hello.
    pub fn probe_version(&self) -> Option<&str> {
        self.live.hello().map(|hello| hello.ackscope_version.as_str())
    }

    /// The user pressed Run and the request is on its way.
    pub fn start_requested(&mut self) {
        self.rejected = None;
        self.start_pending = true;
        self.follow = None;
        self.try_pending = false;
        self.try_asked.clear();
    }

    /// The user asked the running watch `run` to try a fix on `sides`, and the request is on
    /// its way. What was asked of earlier runs is done with (the watch split since, or ended).
    pub fn try_requested(&mut self, run: RunId, sides: Sides) {
        self.try_refused = None;
        self.try_pending = true;
        self.try_asked.retain(|(asked, _)| *asked == run);
        self.try_asked.push((run, sides));
    }

    /// The try never left (no connection), or the probe refused it: said beside the buttons,
    /// and the side is no longer asked.
    pub fn try_failed(&mut self, reason: String) {
        self.try_pending = false;
        self.try_refused = Some(reason);
        self.try_asked.pop();
    }

    /// The request never left (no connection): nothing to wait for.
    pub fn start_failed(&mut self) {
        self.start_pending = false;
    }

    /// A message that did not decode: show it rather than drop it silently.
    pub fn bad_message(&mut self, error: &WireError) {
        self.live.error = Some(format!("could not read a message from the probe: {error}"));
    }

    /// Opens a session file's bytes as a session of its own and shows its newest run. A bad
    /// frame ends the file: the runs before it stay, and the error names the file and the
    /// problem.
    pub fn open_file(&mut self, name: &str, bytes: &[u8]) -> FileId {
        let id = self.begin_file(name, bytes.len() as u64);
        self.feed_file(id, bytes);
        self.end_file(id);
        id
    }

    /// Opens the session the Linux in this tab recorded and sent (`bytes`, a session file),
    /// with `emulated` saying what ran it; its run is shown.
    pub fn open_emulated(&mut self, name: &str, bytes: &[u8], emulated: String) -> FileId {
        let id = self.open_file(name, bytes);
        if let Some(file) = self.file_mut(id) {
            file.emulated = Some(emulated);
        }
        id
    }

    /// The most events a file read from now on may hand the page.
    pub fn file_event_cap(&self) -> u64 {
        self.file_event_cap
    }

    /// Starts reading a file of `total_bytes` that arrives in pieces ([`AppState::feed_file`],
    /// then [`AppState::end_file`]). It is listed at once, with its progress.
    pub fn begin_file(&mut self, name: &str, total_bytes: u64) -> FileId {
        self.begin_file_from(name, total_bytes, None)
    }

    /// [`AppState::begin_file`] of a file read from a request (`from`, of its
    /// [`AppState::read_plan`]): `total_bytes` are the bytes that will be read.
    pub fn begin_file_from(
        &mut self,
        name: &str,
        total_bytes: u64,
        from: Option<ReadFrom>,
    ) -> FileId {
        let id = self.add_file(name, Stream::file(), None);
        if let Some(file) = self.files.last_mut() {
            let decoder = match from {
                Some(from) => {
                    SessionDecoder::reading_from(self.file_event_cap, from.run, from.first)
                }
                None => SessionDecoder::with_max_events(self.file_event_cap),
            };
            file.loading = Some(Loading {
                decoder,
                read_bytes: 0,
                total_bytes,
                newest: None,
                decoded_elsewhere: None,
            });
            file.read_from = from;
        }
        id
    }

    /// The next piece of a file begun with [`AppState::begin_file`]: its whole messages are
    /// applied to the file's session now, so its runs fill in as it loads.
    pub fn feed_file(&mut self, id: FileId, bytes: &[u8]) {
        // No budget: every whole message is applied, and none is left for a next call.
        self.feed_file_some(id, bytes, usize::MAX);
    }

    /// [`AppState::feed_file`], stopping once `events` events are applied: true if whole
    /// messages are left for the next call (`SessionDecoder::feed_some`), which the page makes
    /// in a slice of its own.
    pub fn feed_file_some(&mut self, id: FileId, bytes: &[u8], events: usize) -> bool {
        let Some(file) = self.file_mut(id) else { return false };
        let Some(loading) = &mut file.loading else { return false };
        let Loading { decoder, read_bytes, total_bytes, newest, .. } = loading;
        let (overviews, from) = (&file.overviews, file.read_from);
        let mut into = FileInto::new(&mut file.session, newest, *total_bytes, overviews, from);
        let more = decoder.feed_some(bytes, events, |message| into.apply(message));
        *read_bytes += bytes.len() as u64;
        more
    }

    /// Messages of a file decoded elsewhere (the decoder's worker: [`crate::decode_worker`]),
    /// applied as [`AppState::feed_file_some`] applies its own, stopping once `events` events
    /// are applied: `Ok(true)` if messages are left for the next call. A message that does not
    /// read ends the batch with its error.
    pub fn apply_file_messages(
        &mut self,
        id: FileId,
        messages: &mut crate::handoff::Messages<'_>,
        events: usize,
    ) -> Result<bool, String> {
        let Some(file) = self.file_mut(id) else { return Ok(false) };
        let Some(loading) = &mut file.loading else { return Ok(false) };
        let (overviews, from) = (&file.overviews, file.read_from);
        let (newest, total_bytes) = (&mut loading.newest, loading.total_bytes);
        let mut into = FileInto::new(&mut file.session, newest, total_bytes, overviews, from);
        let mut applied = 0;
        for message in messages.by_ref() {
            let message = message?;
            if let ToBrowser::Events { events, .. } = &message {
                applied += events.len();
            }
            into.apply(message);
            if applied >= events {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `bytes` more of a file decoded elsewhere have been applied: its progress.
    pub fn file_read(&mut self, id: FileId, bytes: u64) {
        if let Some(loading) = self.file_mut(id).and_then(|file| file.loading.as_mut()) {
            loading.read_bytes += bytes;
        }
    }

    /// A file decoded elsewhere has been decoded whole, and its decoder found `problem`: what
    /// [`AppState::end_file`] then names.
    pub fn file_decoded_elsewhere(&mut self, id: FileId, problem: Option<Problem>) {
        if let Some(loading) = self.file_mut(id).and_then(|file| file.loading.as_mut()) {
            loading.decoded_elsewhere = Some(problem);
        }
    }

    /// The overviews written at the end of a file being read (`wire::read_file_end`): shown
    /// while the events are decoded (not for a file read from a request, which shows what it
    /// reads), and kept for the whole run's strip when the page holds part of it.
    pub fn preview_file(&mut self, id: FileId, overviews: Vec<(RunId, Overview)>) {
        if let Some(file) = self.file_mut(id) {
            file.overviews = overviews;
        }
    }

    /// For a run of a file of which the page holds only part (past what it holds, or read from
    /// a request): the whole run's overview from the file's end, and the requests held.
    pub fn whole_run(&self, key: RunKey) -> Option<WholeRun<'_>> {
        let Source::File(id) = key.source else { return None };
        let file = self.file(id).filter(|file| file.loading.is_none())?;
        let (_, overview) = file.overviews.iter().find(|(run, _)| *run == key.run)?;
        let run = file.session.run(key.run)?;
        let first = run.analysis.first_request();
        let held = first..first.saturating_add(run.analysis.requests().len() as u32);
        let partial = held.start > 0 || held.end < overview.rows;
        partial.then_some(WholeRun { overview, held })
    }

    /// How to read file `id` so that it holds request `request` ([`Reach`]): its first run that
    /// holds that request. Refused, saying why, when its blocks are not indexed or no run holds
    /// the request.
    pub fn read_plan(
        &self,
        id: FileId,
        run: Option<RunId>,
        request: u32,
        reach: Reach,
    ) -> Result<ReadPlan, String> {
        let file = self.file(id).ok_or("the file was closed")?;
        let name = &file.name;
        if file.indexes.is_empty() {
            return Err(format!(
                "{name} cannot be read from a request: its end does not index its blocks (it was \
                 cut short, or written by a build before protocol version 10); it is read from \
                 its start"
            ));
        }
        let holds = |index: &&BlockIndex| index.requests() > u64::from(request);
        let Some(index) =
            file.indexes.iter().filter(|i| run.is_none_or(|run| i.run == run)).find(holds)
        else {
            let runs = file.indexes.iter().filter(|i| run.is_none_or(|run| i.run == run));
            let most = runs.map(BlockIndex::requests).max().unwrap_or(0);
            let which = match run {
                Some(run) => format!("run {} of {name} does not hold", run.0),
                None => format!("no run of {name} holds"),
            };
            return Err(format!(
                "{which} request {request}: its requests are numbered from 0 to {}",
                most.saturating_sub(1)
            ));
        };
        let before = match reach {
            Reach::From => 0,
            Reach::Around => self.file_event_cap / 2,
        };
        let first = index.start_holding(request, before);
        // Left unread: the run's blocks before `first` but its first (which opens the run: the
        // clocks matched, `ClockSync`), and every other run's (a read from a request holds one
        // run).
        let first_block = index.blocks.first().map(|block| block.offset);
        let before_first = index.before_request(first).filter(|b| Some(b.offset) != first_block);
        let others = file.indexes.iter().filter(|other| other.run != index.run);
        let mut skipped: Vec<Range<u64>> = before_first
            .chain(others.flat_map(|other| other.blocks.iter()))
            .map(IndexedBlock::frame_range)
            .collect();
        skipped.sort_unstable_by_key(|range| range.start);
        let from = ReadFrom { run: index.run, first, wanted: request, wanted_shown: false };
        Ok(ReadPlan { from, skipped })
    }

    /// The request a file read from a request was read to hold, when `key` is that file's run
    /// and it was not shown yet: the timeline selects it when it first shows the run, once.
    pub fn take_wanted_request(&mut self, key: RunKey) -> Option<u32> {
        let Source::File(id) = key.source else { return None };
        let file = self.file_mut(id)?;
        let from = file.read_from.as_mut().filter(|from| from.run == key.run)?;
        from.wanted_shown.not().then(|| {
            from.wanted_shown = true;
            from.wanted
        })
    }

    /// What ran run `key`, when it was the Linux in this tab ([`OpenedFile::emulated`]).
    pub fn emulated(&self, key: RunKey) -> Option<&str> {
        let Source::File(id) = key.source else { return None };
        self.file(id)?.emulated.as_deref()
    }

    /// The file of a run of a file, if that file can be read from a request.
    pub fn readable_file_of(&self, key: RunKey) -> Option<FileId> {
        let Source::File(id) = key.source else { return None };
        self.file(id).filter(|file| file.reads_from_a_request()).map(|file| file.id)
    }

    /// For run `key` to show request `req` when the page does not hold it (a file held in
    /// part): its file, to read again around it, and the request that read would start from.
    /// `None` when the run holds the request, or its file cannot be read from a request, or no
    /// block of the run holds it.
    pub fn read_to_show(&self, key: RunKey, req: u32) -> Option<(FileId, u32)> {
        let analysis = &self.run(key)?.analysis;
        let first = analysis.first_request();
        let held = req >= first && ((req - first) as usize) < analysis.requests().len();
        if held {
            return None;
        }
        let file = self.readable_file_of(key)?;
        let plan = self.read_plan(file, Some(key.run), req, Reach::Around).ok()?;
        Some((file, plan.from.first))
    }

    /// Where the pass over the whole of file `id` (of `total_bytes`) goes on from: 0 for a pass
    /// begun now (the file holds a run in part and has no facts of it yet), the bytes it had
    /// read for one carried from the same file read before ([`AppState::take_ranks`]);
    /// `None` when there is nothing to do.
    pub fn begin_ranking(&mut self, id: FileId, total_bytes: u64) -> Option<u64> {
        let file = self.file(id)?;
        if let Some(pass) = &file.ranking {
            return Some(pass.read_bytes);
        }
        // Only where the page can read what it ranks (the file's blocks indexed).
        if file.loading.is_some() || !file.reads_from_a_request() {
            return None;
        }
        let partial = file
            .session
            .runs()
            .iter()
            .map(|run| run.id)
            .find(|&run| self.whole_run(RunKey { source: Source::File(id), run }).is_some());
        let run = partial?;
        if file.ranks.as_ref().is_some_and(|(ranked, _)| *ranked == run) {
            return None;
        }
        let file = self.file_mut(id)?;
        // Room for the run's requests as its file's end counts them, believed as far as the
        // file's bytes could hold that many.
        let rows = file.overviews.iter().find(|(id, _)| *id == run).map_or(0, |(_, o)| o.rows);
        let most = usize::try_from(total_bytes / MIN_FILE_BYTES_PER_REQUEST).unwrap_or(0);
        let rows = (rows as usize).min(most).min(MAX_REQUESTS as usize);
        file.ranking = Some(WholePass::new(run, total_bytes, rows));
        Some(0)
    }

    /// What file `id` has ranked of run `run`, or the pass ranking it, taken to go on with the
    /// same file read again from a request for that run ([`AppState::give_ranks`]).
    pub fn take_ranks(&mut self, id: FileId, run: RunId) -> Ranking {
        let Some(file) = self.file_mut(id) else { return (None, None) };
        let ranks = file.ranks.take().filter(|(ranked, _)| *ranked == run);
        (ranks, file.ranking.take().filter(|pass| pass.run == run))
    }

    /// The pass over file `id` stopped (the file could not be read): no ranks are made of it.
    pub fn abandon_ranking(&mut self, id: FileId) {
        if let Some(file) = self.file_mut(id) {
            file.ranking = None;
        }
    }

    /// The next piece of the file for its pass: true if whole messages are left for the next
    /// call; `None` once the file was closed or has no pass going.
    pub fn feed_ranking(&mut self, id: FileId, bytes: &[u8], events: usize) -> Option<bool> {
        let file = self.file_mut(id)?;
        Some(file.ranking.as_mut()?.feed_some(bytes, events))
    }

    /// The file has been read for its pass: its run's facts are kept (none if it did not read).
    pub fn end_ranking(&mut self, id: FileId) {
        let Some(file) = self.file_mut(id) else { return };
        if let Some(pass) = file.ranking.take() {
            let run = pass.run;
            file.ranks = pass.finish().map(|ranks| (run, Arc::new(ranks)));
        }
    }

    /// Facts of every request of file `id`'s run made by a pass before, or the pass still going,
    /// carried to the same file read again from a request.
    pub fn give_ranks(&mut self, id: FileId, (ranks, ranking): Ranking) {
        if let Some(file) = self.file_mut(id) {
            (file.ranks, file.ranking) = (ranks, ranking);
        }
    }

    /// The facts of every request of `key`'s run, when the page holds it in part and a pass
    /// made them.
    pub fn ranks_of(&self, key: RunKey) -> Option<Arc<Ranks>> {
        let Source::File(id) = key.source else { return None };
        let (run, facts) = self.file(id)?.ranks.as_ref()?;
        (*run == key.run).then(|| Arc::clone(facts))
    }

    /// `(bytes read, bytes in the file)` of the pass over `key`'s run while it goes.
    pub fn ranking_progress(&self, key: RunKey) -> Option<(u64, u64)> {
        let Source::File(id) = key.source else { return None };
        let pass = self.file(id)?.ranking.as_ref().filter(|pass| pass.run == key.run)?;
        Some((pass.read_bytes, pass.total_bytes))
    }

    /// Says why something asked of file `id` could not be done, in place of its last note.
    pub fn file_note(&mut self, id: FileId, note: String) {
        if let Some(file) = self.file_mut(id) {
            file.error = Some(note);
        }
    }

    /// The block indexes at the end of a file (`wire::read_file_end`): it can then be read
    /// from any request ([`AppState::read_plan`]).
    pub fn index_file(&mut self, id: FileId, indexes: Vec<BlockIndex>) {
        if let Some(file) = self.file_mut(id) {
            file.indexes = indexes;
        }
    }

    /// The newest file being read that has an overview, with its name and its last run's
    /// overview (the run it will show when read).
    pub fn loading_overview(&self) -> Option<(&str, &Overview)> {
        self.files.iter().rev().find_map(|file| {
            file.loading.as_ref().filter(|_| file.read_from.is_none())?;
            let (_, overview) = file.overviews.last()?;
            Some((file.name.as_str(), overview))
        })
    }

    /// `(bytes read, bytes in the file)` of the newest file being read.
    pub fn loading_progress(&self) -> Option<(u64, u64)> {
        self.files.iter().rev().find_map(OpenedFile::progress)
    }

    /// The file has been read: runs still going never finished, the problem (if any) is named,
    /// and its newest run is shown.
    pub fn end_file(&mut self, id: FileId) {
        let Some(file) = self.file_mut(id) else { return };
        let Some(mut loading) = file.loading.take() else { return };
        let problem = match loading.decoded_elsewhere.take() {
            Some(problem) => problem,
            None => loading.decoder.finish().map(Problem::from),
        };
        file.session.end();
        let name = &file.name;
        // A file past what the page holds can be read from any request when its blocks are
        // indexed: the note says so.
        let readable_from_any = file.read_from.is_none() && file.reads_from_a_request();
        let problem = problem.map(|Problem { text: problem, too_many }| {
            let said = match file.session.runs().len() {
                0 => format!("{name}: {problem}"),
                1 => format!("{name}: {problem}; the run read before it is shown"),
                n => format!("{name}: {problem}; the {n} runs read before it are shown"),
            };
            match too_many && readable_from_any {
                true => format!(
                    "{said}. Its blocks are indexed: \"read from a request\" reads it from the \
                     part you want to see"
                ),
                false => said,
            }
        });
        let not_kept = file.session.runs_not_kept;
        let too_many = (not_kept > 0).then(|| {
            format!(
                "{name}: the file holds {} runs; a page keeps the first {MAX_FILE_RUNS} of a \
                 file, and those are shown (`ackscope show` reads them all)",
                MAX_FILE_RUNS as u64 + not_kept
            )
        });
        file.error = match (problem, too_many) {
            (Some(problem), Some(too_many)) => Some(format!("{problem}. {too_many}")),
            (problem, too_many) => problem.or(too_many),
        };
        // A file read from a request shows the run it was read for.
        let shown = file.read_from.map(|from| from.run).or(loading.newest);
        if let Some(run) = shown {
            self.selected = Some(RunKey { source: Source::File(id), run });
        }
    }

    /// The last step of reading a file before [`AppState::end_file`], a moment of its own: its
    /// runs make what showing them reads ([`Run::prepare`]), so that the task that first shows
    /// the newest one is only the view's work (together they were a 70-105 ms task at a
    /// million requests).
    pub fn prepare_file(&self, id: FileId) {
        let Some(file) = self.files.iter().find(|file| file.id == id) else { return };
        for run in file.session.runs() {
            run.prepare();
        }
    }

    /// A file that was not read at all (too large, unreadable): listed with the reason only.
    pub fn refuse_file(&mut self, name: &str, reason: String) -> FileId {
        self.add_file(name, Stream::file(), Some(format!("{name}: {reason}")))
    }

    /// Forgets an opened file (and stops showing or comparing its runs): the file is handed
    /// back, for its memory to be let go of a piece at a time ([`OpenedFile::release_some`]).
    pub fn close_file(&mut self, id: FileId) -> Option<OpenedFile> {
        let at = self.files.iter().position(|file| file.id == id);
        let file = at.map(|at| self.files.remove(at));
        if self.selected.is_some_and(|key| key.source == Source::File(id)) {
            self.selected = None;
        }
        self.compared.retain(|key| key.source != Source::File(id));
        file
    }

    /// Marks a request/response run for comparison, or unmarks it. Other runs have no
    /// latencies to compare, and an unknown run changes nothing.
    pub fn toggle_compare(&mut self, key: RunKey) {
        if let Some(at) = self.compared.iter().position(|&marked| marked == key) {
            self.compared.remove(at);
        } else if self.run(key).is_some_and(Run::is_comparable) {
            self.compared.push(key);
        }
    }

    pub fn is_compared(&self, key: RunKey) -> bool {
        self.compared.contains(&key)
    }

    /// The runs marked for comparison, in the order they were marked.
    pub fn compared(&self) -> Vec<RunKey> {
        // Filtered too: a RunStarted that reuses an id replaces the run, maybe with a bulk one.
        let comparable = |key: RunKey| self.run(key).is_some_and(Run::is_comparable);
        self.compared.iter().copied().filter(|&key| comparable(key)).collect()
    }

    /// What a reconnecting page asks the probe for in `/ws?resume=` (`wire::ResumePoint`): its
    /// stream, its newest run, how many of that run's events it has and whether it has its end;
    /// `None` before the probe named its stream or while the page has no run (nothing to
    /// resume).
    pub fn resume_query(&self) -> Option<String> {
        let stream = self.live_stream?;
        let run = self.live.runs().last()?;
        let finished = run.status != RunStatus::Running;
        Some(ResumePoint { stream, run: run.id, events: run.events, finished }.to_string())
    }

    /// Unmarks every run.
    pub fn clear_compare(&mut self) {
        self.compared.clear();
    }

    fn add_file(&mut self, name: &str, session: Stream, error: Option<String>) -> FileId {
        let id = FileId(self.next_file);
        self.next_file += 1;
        let name = name.to_string();
        let (loading, indexes, read_from, overviews) = (None, Vec::new(), None, Vec::new());
        let (ranks, ranking, emulated) = (None, None, None);
        let file = OpenedFile {
            id,
            name,
            session,
            error,
            loading,
            indexes,
            read_from,
            overviews,
            ranks,
            ranking,
            emulated,
        };
        self.files.push(file);
        id
    }
}

/// A Hello of a new stream: the live session starts over; the probe replays every run after it.
fn start_live_over(state: &mut AppState, hello: ToBrowser) {
    state.rejected = None;
    state.start_pending = false;
    // Another stream: its runs are not the ones the fixes were asked of.
    state.try_asked.clear();
    state.try_pending = false;
    state.try_refused = None;
    if state.selected.is_some_and(|key| key.source == Source::Live) {
        state.selected = None;
    }
    // The live runs are replayed as new runs after the Hello: what was marked is gone.
    state.compared.retain(|key| key.source != Source::Live);
    state.live.apply(hello);
}

/// Applies one message from the probe's live stream. Opened files are never touched: a Hello
/// starts only the live session over.
pub fn apply(state: &mut AppState, message: ToBrowser) {
    match message {
        // A reconnect: the probe says next whether it resumes the stream the page had.
        ToBrowser::Hello(_) if state.live_stream.is_some() => {
            state.rejected = None;
            state.start_pending = false;
            state.pending_hello = Some(message);
        }
        ToBrowser::Hello(_) => start_live_over(state, message),
        ToBrowser::Stream { id, resumed } => {
            let hello = state.pending_hello.take();
            match (resumed && state.live_stream == Some(id), hello) {
                // Resumed: what the page has stays; the rest of the stream follows.
                (true, _) => {}
                (false, Some(hello)) => start_live_over(state, hello),
                (false, None) => {}
            }
            state.live_stream = Some(id);
        }
        ToBrowser::Rejected { reason } if state.try_pending => state.try_failed(reason),
        ToBrowser::Rejected { reason } => {
            if state.live.is_greeted() {
                state.rejected = Some(reason);
                state.start_pending = false;
            }
        }
        // The room's state is the page's business, not the session's (files never hold it).
        ToBrowser::ClassState(class) => state.class = Some(class),
        // Counts only, never who voted; kept off the session like the room's state.
        ToBrowser::ClassVotes(votes) => state.class_votes = Some(votes),
        // The probe's, not the session's: a file never holds it.
        ToBrowser::TryRights { refused } => state.try_rights = Some(refused.map_or(Ok(()), Err)),
        message => {
            // A run that starts or ends answered a try, if one was on its way (the split, or
            // the watch's end): a refusal after it is not the try's.
            if matches!(message, ToBrowser::RunStarted { .. } | ToBrowser::RunFinished { .. }) {
                state.try_pending = false;
            }
            // A watch that goes on in a new run (a try went into force) still has the sides
            // asked of it that are not in force yet: they stay asked, in the new run.
            if let ToBrowser::RunStarted { run, spec: Scenario::Watch(_), .. } = &message {
                state.try_asked.iter_mut().for_each(|(asked, _)| *asked = *run);
            }
            if let Some(run) = state.live.apply(message) {
                // The newest run is the one the user just asked for (or the latest of a replay),
                // unless the user is reading a file and did not ask for it.
                let reading_file =
                    state.selected.is_some_and(|key| matches!(key.source, Source::File(_)));
                let key = RunKey::live(run);
                // A run a link asked for; else the user's own; else (no link waiting) the newest.
                let followed = state.follow == Some(key);
                if followed || state.start_pending || !reading_file && state.follow.is_none() {
                    state.selected = Some(key);
                }
                state.start_pending = false;
            }
        }
    }
}

#[cfg(test)]
mod tests;
