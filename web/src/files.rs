//! Session files in the browser: open a `File` (picker or drop; a pcap or pcapng capture is made
//! into a session first), fetch one from `?url=`, save the live session as a download, export a
//! session for Perfetto, as pcapng or as JSON. Decoding itself is [`crate::session_file`]'s,
//! applying it [`crate::state::AppState::open_file`]'s; this module only moves bytes in and out
//! of the page.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::time::Duration;

use ackscope_shared::export_json::write_export_json;
use ackscope_shared::pcapng_export::write_pcapng;
use ackscope_shared::perfetto::{write_trace, TraceBuilder};
use ackscope_shared::wire::{
    self, FileEnd, FrameStream, ToBrowser, Trailer, WireError, TRAILER_FRAME_BYTES,
};
use ackscope_shared::RunId;
use js_sys::{Array, ArrayBuffer, Uint8Array};
use leptos::prelude::{set_timeout, RwSignal, Set};
use leptos::task::spawn_local;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Blob, BlobPropertyBag, FileList, HtmlAnchorElement, Response, Url};

use crate::decode_worker::{self, DecodeWorker, Reply};
use crate::handoff::Messages;
use crate::js::{describe, settle, yield_now};
use crate::session_file::{capture_to_session, is_capture, name_of_url, refuse_size, Problem};
use crate::state::{AppState, FileId, OpenedFile, Ranking, Reach, ReadPlan, Source};
use crate::store::Store;

/// Opens every file of a picker's or a drop's list.
pub fn open_files(store: Store, files: &FileList) {
    for file in (0..files.length()).filter_map(|i| files.get(i)) {
        open_blob(store, file.name(), file.into());
    }
}

/// Bytes read from a file at a time: big enough that reading is not the cost, small enough
/// that the page never holds more than a few of them besides the decoded session. They stay the
/// browser's (an `ArrayBuffer`): only one piece at a time is copied into the app's memory.
const READ_CHUNK_BYTES: f64 = 8.0 * 1024.0 * 1024.0;
/// Bytes copied into the app and decoded between two looks at the clock: a slice ends at most
/// one piece's work after [`SLICE_MS`]. (A whole chunk copied at once made the first slice a
/// 60-110 ms task: the app's memory grew by the chunk's 8 MiB before anything was decoded.
/// Pieces of 64 KiB still made one of the first slices 54-63 ms about one load in five, with or
/// without the file's overview, in the first slices; most likely the first pieces run before
/// the browser has finished optimizing the app's code, slower than later ones.)
const DECODE_PIECE_BYTES: u32 = 16 * 1024;
/// Events applied between two looks at the clock: a piece of a file of blocks may complete a
/// block of 65,536 events, which applied at once was a task of 50-80 ms.
const FEED_EVENTS: usize = 8192;
/// The page's thread is given back after this long, so input and painting go on while a big
/// file loads (a task over 50 ms is one a person notices). Each slice costs about 3.6 ms more
/// (the progress shown, the browser's turn): a million-request file loaded in 2.9 s in slices of
/// 20 ms, 2.7 s in slices of 40. A slice ends one feed (up to 8,192 events, a few ms) after it,
/// so 30 keeps that margin below 50 while the code is still cold. (With the worker decoding,
/// slices of 40 loaded the file in 1.41-1.49 s instead of 1.46-1.59, and made a task of 51-59
/// ms one load in two; ending a slice early when the feed before it had been slow did not
/// prevent that.)
const SLICE_MS: f64 = 30.0;

/// Reads `blob` (a `File` from the picker or a drop) and opens it as a session of its own, in
/// chunks: the file is listed at once with its progress, decoding yields to the page every
/// [`SLICE_MS`], and nothing holds the whole file. Too large a file is refused before a byte
/// is read.
pub fn open_blob(store: Store, name: String, blob: Blob) {
    let size = blob.size();
    if let Some(reason) = refuse_size(size as u64) {
        store.try_update(|state| {
            state.refuse_file(&name, reason);
        });
        return;
    }
    spawn_local(async move {
        // A capture (tcpdump, Wireshark) becomes the session `ackscope import` writes for it.
        let Some(blob) = session_blob(store, &name, blob, size).await else { return };
        load(store, name, blob, None, Ranking::default()).await;
    });
}

/// Reads file `id` again from request `request` (its [`AppState::read_plan`]): the blocks
/// wholly before it are left unread, so a file past what the page holds shows any part of it.
/// The file takes the place of the one read before; a file that cannot be read so says why.
pub fn read_from_request(store: Store, id: FileId, run: Option<RunId>, request: u32, reach: Reach) {
    let blob = OPENED.with(|opened| opened.borrow().get(&id).cloned());
    let plan = store.read_untracked(|state| state.read_plan(id, run, request, reach));
    let name = store.read_untracked(|state| state.file(id).map(|file| file.name.clone()));
    let (Some(blob), Some(name)) = (blob, name) else { return };
    match plan {
        Ok(plan) => {
            // The whole run's ranks, or the pass making them, stay with the file read again
            // for the same run.
            let run = plan.from.run;
            let ranking = store.try_update_quietly(|state| state.take_ranks(id, run));
            let before = take_file(store, id);
            spawn_local(async move {
                // What the page held goes first, so that the memory it gives back holds what
                // is read next (ten million requests' holds, one after the other, stay in
                // the memory of one).
                if let Some(before) = before {
                    let_go(before).await;
                }
                load(store, name, blob, Some(plan), ranking.unwrap_or_default()).await;
            });
        }
        Err(reason) => store.update(|state| state.file_note(id, reason)),
    }
}

/// Requests let go of between two turns of the page when a file is closed: a few milliseconds.
const RELEASE_REQUESTS: usize = 100_000;

/// Closes file `id`: it leaves the page at once, and its memory is given back a piece at a
/// time (a file of millions of requests is millions of allocations: given back at once, a
/// task of over 100 ms).
pub fn close_file(store: Store, id: FileId) {
    if let Some(file) = take_file(store, id) {
        spawn_local(let_go(file));
    }
}

/// File `id`, out of the page (closed), for its memory to be let go of.
fn take_file(store: Store, id: FileId) -> Option<OpenedFile> {
    OPENED.with(|opened| opened.borrow_mut().remove(&id));
    store.try_update_with(|state| state.close_file(id)).flatten()
}

/// Lets a closed file's memory go, [`RELEASE_REQUESTS`] at a time with a turn of the page
/// between.
async fn let_go(mut file: OpenedFile) {
    while file.release_some(RELEASE_REQUESTS) {
        yield_now().await;
    }
}

/// Reads `blob`, a session file, as a session of its own, in chunks (leaving out the plan's
/// byte ranges, if it has one): the file is listed at once with its progress, decoding yields
/// to the page every [`SLICE_MS`], and nothing holds the whole file.
async fn load(store: Store, name: String, blob: Blob, plan: Option<ReadPlan>, ranking: Ranking) {
    let size = blob.size();
    let skipped = plan.as_ref().map_or(&[][..], |plan| &plan.skipped[..]);
    let read = kept_ranges(size as u64, skipped);
    let read_bytes = read.iter().map(|range| range.end - range.start).sum();
    let from = plan.as_ref().map(|plan| plan.from);
    let Some(id) = store.try_update_with(|state| state.begin_file_from(&name, read_bytes, from))
    else {
        return;
    };
    OPENED.with(|opened| opened.borrow_mut().insert(id, blob.clone()));
    // The overview the probe wrote at the file's end comes first: a few kilobytes that paint
    // the whole run before its events are decoded. Its block indexes come with it.
    let end = read_end(&blob, size).await;
    if let Some(end) = end {
        store.try_update(|state| {
            state.preview_file(id, end.overviews);
            state.index_file(id, end.indexes);
        });
        yield_now().await;
    }
    // A big file's decoder starts beside the page once the overview is painted (started before,
    // the compiling of its wasm delayed the painting).
    let worker = match read_bytes >= WORKER_MIN_BYTES {
        true => store.try_update_quietly(|state| state.file_event_cap()).and_then(|max_events| {
            DecodeWorker::start(max_events, from.map(|from| (from.run, from.first)))
        }),
        false => None,
    };
    let in_worker = match worker {
        Some(worker) => decode_in_worker(store, id, &blob, &read, worker).await,
        None => None,
    };
    let fed = match in_worker {
        Some(fed) => fed,
        None => {
            let feed = |state: &mut AppState, bytes: &[u8]| {
                let open = state.file(id).is_some();
                open.then(|| state.feed_file_some(id, bytes, FEED_EVENTS))
            };
            feed_blob(store, &blob, read, feed).await
        }
    };
    match fed {
        Fed::All => {}
        Fed::Stopped => return, // the page is gone, or the file was closed
        Fed::Unreadable(error) => {
            store.try_update(|state| {
                state.end_file(id);
                state.refuse_file(&name, format!("could not read the file: {}", describe(&error)));
            });
            return;
        }
    };
    // The first whole view of the run is a task of its own, not the end of a decoding slice,
    // and what it reads is made in one before it.
    store.try_update(|_| {});
    yield_now().await;
    store.try_update_quietly(|state| state.prepare_file(id));
    yield_now().await;
    store.try_update(|state| {
        state.end_file(id);
        state.give_ranks(id, ranking);
    });
    rank(store, id, blob).await;
}

/// Files this big or bigger are decoded in a worker beside the page's thread
/// ([`crate::decode_worker`]); smaller ones on the page's, where they take less than the
/// worker's start (a second instance of the app's wasm, compiled again).
const WORKER_MIN_BYTES: u64 = 4 * 1024 * 1024;

/// Decodes `ranges` of `blob` in a worker and applies what it hands back, in slices as
/// [`feed_blob`] does; `None` when no worker could decode it (none could start, or it failed
/// before handing anything back), for the page to decode it itself.
async fn decode_in_worker(
    store: Store,
    id: FileId,
    blob: &Blob,
    ranges: &[Range<u64>],
    worker: DecodeWorker,
) -> Option<Fed> {
    let mut pieces = Pieces::new(blob, ranges);
    // The length of each piece with the worker, oldest first: its batch comes back in order.
    let mut with_worker = VecDeque::new();
    let mut applied_any = false;
    // Once the worker's decoder has stopped, the rest of the file is not read.
    let mut stopped_decoding = false;
    let mut ended = false;
    let mut slice_start = now_ms();
    let decoded = |problem: Option<Problem>| {
        store.try_update_quietly(|state| state.file_decoded_elsewhere(id, problem));
        Some(Fed::All)
    };
    let stopped = |reason: String| {
        decoded(Some(Problem { text: format!("decoding stopped: {reason}"), too_many: false }))
    };
    loop {
        while with_worker.len() < decode_worker::IN_FLIGHT && !stopped_decoding {
            match pieces.next().await {
                Some(Ok(piece)) => {
                    with_worker.push_back(u64::from(piece.byte_length()));
                    worker.send(&piece);
                }
                Some(Err(error)) => return Some(Fed::Unreadable(error)),
                None => break,
            }
        }
        if with_worker.is_empty() && !ended {
            worker.end();
            ended = true;
        }
        let batch = match worker.next().await {
            Reply::Batch { messages, stopped } => {
                stopped_decoding |= stopped;
                messages.to_vec()
            }
            Reply::Ended(problem) => return decoded(problem),
            // Nothing applied yet: the page decodes the file itself, from its start, as where
            // no worker can start (a browser without module workers, a script not served).
            Reply::Failed(_) if !applied_any => return None,
            Reply::Failed(reason) => {
                return stopped(format!("the decoder's worker failed: {reason}"))
            }
        };
        let Some(piece_bytes) = with_worker.pop_front() else {
            return stopped("the decoder's worker answered a piece never sent".into());
        };
        let mut messages = Messages::new(&batch);
        loop {
            let applied = store.try_update_quietly(|state| {
                let open = state.file(id).is_some();
                open.then(|| state.apply_file_messages(id, &mut messages, FEED_EVENTS))
            });
            let more = match applied {
                Some(Some(Ok(more))) => more,
                Some(Some(Err(reason))) => return stopped(reason),
                _ => return Some(Fed::Stopped), // the page is gone, or the file was closed
            };
            applied_any = true;
            give_turn_when_due(store, &mut slice_start).await;
            if !more {
                break;
            }
        }
        store.try_update_quietly(|state| state.file_read(id, piece_bytes));
    }
}

/// For a file the page holds in part: a pass over the whole file, in slices as a read is, that
/// gives every request of the run held in part its facts ([`crate::state::WholePass`]), so that
/// "next slowest" and the steps from stall to stall reach all of them. Nothing if the page holds
/// it whole, or the facts were made before.
async fn rank(store: Store, id: FileId, blob: Blob) {
    let size = blob.size();
    let Some(Some(resume)) = store.try_update_with(|state| state.begin_ranking(id, size as u64))
    else {
        return;
    };
    // A pass carried from the file read before hands on what it still holds of the bytes it
    // read with the next piece, or when it finishes.
    let feed = |state: &mut AppState, bytes: &[u8]| state.feed_ranking(id, bytes, FEED_EVENTS);
    match feed_blob(store, &blob, std::iter::once(resume..size as u64), feed).await {
        Fed::All => store.try_update(|state| state.end_ranking(id)),
        Fed::Unreadable(_) => store.try_update(|state| state.abandon_ranking(id)),
        Fed::Stopped => {} // the page is gone, or the file was closed
    }
}

/// Once the slice that started at `slice_start` has run [`SLICE_MS`]: shows the progress, lets
/// the page paint and take input, and starts the next slice.
async fn give_turn_when_due(store: Store, slice_start: &mut f64) {
    if now_ms() - *slice_start > SLICE_MS {
        store.try_update(|_| {});
        yield_now().await;
        *slice_start = now_ms();
    }
}

/// The pieces of [`decode_worker::PIECE_BYTES`] sent to the worker, each its own buffer (handed
/// over with it), cut from chunks of [`READ_CHUNK_BYTES`] read from the file: a read of the
/// file takes milliseconds, however small.
struct Pieces<'a> {
    blob: &'a Blob,
    chunks: Box<dyn Iterator<Item = (f64, f64)> + 'a>,
    chunk: Option<ArrayBuffer>,
    at: u32,
    /// The read of the chunk after, started when the one before was taken: the browser reads
    /// it while the page applies.
    reading: Option<Result<js_sys::Promise, JsValue>>,
}

impl<'a> Pieces<'a> {
    fn new(blob: &'a Blob, ranges: &'a [Range<u64>]) -> Pieces<'a> {
        let chunks = Box::new(chunks(ranges.iter().cloned()));
        let mut pieces = Pieces { blob, chunks, chunk: None, at: 0, reading: None };
        pieces.read_next();
        pieces
    }

    fn read_next(&mut self) {
        self.reading = self.chunks.next().map(|(at, end)| {
            self.blob.slice_with_f64_and_f64(at, end).map(|chunk| chunk.array_buffer())
        });
    }

    async fn next(&mut self) -> Option<Result<ArrayBuffer, JsValue>> {
        loop {
            if let Some(chunk) = &self.chunk {
                if self.at < chunk.byte_length() {
                    let end = chunk.byte_length().min(self.at + decode_worker::PIECE_BYTES);
                    let piece = chunk.slice_with_end(self.at, end);
                    self.at = end;
                    return Some(Ok(piece));
                }
            }
            let read = match self.reading.take()? {
                Ok(reading) => settle(&reading).await,
                Err(error) => Err(error),
            };
            match read.and_then(|buffer| buffer.dyn_into::<ArrayBuffer>()) {
                Ok(chunk) => (self.chunk, self.at) = (Some(chunk), 0),
                Err(error) => return Some(Err(error)),
            }
            self.read_next();
        }
    }
}

/// The chunks of [`READ_CHUNK_BYTES`] (at most) that `ranges` of a file are read in: `(start,
/// end)`, as a `Blob` slices.
fn chunks(ranges: impl IntoIterator<Item = Range<u64>>) -> impl Iterator<Item = (f64, f64)> {
    ranges.into_iter().flat_map(|range| {
        let starts = (range.start..range.end).step_by(READ_CHUNK_BYTES as usize);
        starts.map(move |at| (at as f64, (at + READ_CHUNK_BYTES as u64).min(range.end) as f64))
    })
}

/// How feeding a file's bytes to the page's state ended.
enum Fed {
    All,
    /// The one fed is gone (the page, or the file closed).
    Stopped,
    Unreadable(JsValue),
}

/// Feeds the bytes of `ranges` of `blob` to `feed`, in order, a piece at a time: each piece is
/// copied into the app's memory (the chunk read stays the browser's), and fed until `feed`
/// says no whole message is left (it stops each call after a batch of events). The page gets
/// its turn, its progress shown, every [`SLICE_MS`]. `feed` answers `None` when there is no one
/// to feed any more.
async fn feed_blob(
    store: Store,
    blob: &Blob,
    ranges: impl IntoIterator<Item = Range<u64>>,
    mut feed: impl FnMut(&mut AppState, &[u8]) -> Option<bool>,
) -> Fed {
    let mut slice_start = now_ms();
    // The one buffer pieces are copied into: the app's memory holds a piece, not a chunk.
    let mut piece = vec![0u8; DECODE_PIECE_BYTES as usize];
    for (at, end) in chunks(ranges) {
        let chunk = match blob.slice_with_f64_and_f64(at, end) {
            Ok(chunk) => settle(&chunk.array_buffer()).await,
            Err(error) => Err(error),
        };
        let chunk = match chunk {
            Ok(buffer) => Uint8Array::new(&buffer),
            Err(error) => return Fed::Unreadable(error),
        };
        let mut from = 0;
        while from < chunk.length() {
            let to = chunk.length().min(from + DECODE_PIECE_BYTES);
            let bytes = &mut piece[..(to - from) as usize];
            chunk.subarray(from, to).copy_to(bytes);
            from = to;
            let mut fed: &[u8] = bytes;
            loop {
                let Some(Some(more)) = store.try_update_quietly(|state| feed(state, fed)) else {
                    return Fed::Stopped;
                };
                give_turn_when_due(store, &mut slice_start).await;
                if !more {
                    break;
                }
                fed = &[];
            }
        }
    }
    Fed::All
}

/// The byte ranges of a file of `size` bytes left once `skipped` (in order, not overlapping) are
/// taken out.
fn kept_ranges(size: u64, skipped: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut kept = Vec::new();
    let mut at = 0;
    for range in skipped {
        let start = range.start.min(size);
        if start > at {
            kept.push(at..start);
        }
        at = at.max(range.end.min(size));
    }
    if at < size {
        kept.push(at..size);
    }
    kept
}

thread_local! {
    /// Each opened file's session, the browser's bytes (a picked file, or the session a capture
    /// was made into): the exports read it again rather than the page keeping a copy.
    static OPENED: RefCell<HashMap<FileId, Blob>> = RefCell::new(HashMap::new());
}

/// `blob` itself when it is a session file; the session made from it when it is a capture
/// (read whole: a capture is read twice, once for its connections, once for its packets);
/// `None`, with the file refused and why, when it is a capture that cannot be read.
async fn session_blob(store: Store, name: &str, blob: Blob, size: f64) -> Option<Blob> {
    let first = read_range(&blob, 0.0, size.min(4.0)).await.unwrap_or_default();
    if !is_capture(&first) {
        return Some(blob);
    }
    let made = match read_range(&blob, 0.0, size).await {
        Some(capture) => capture_to_session(name, &capture).and_then(|session| blob_of(&session)),
        None => Err(format!("{name}: the browser could not read the file")),
    };
    match made {
        Ok(session) => Some(session),
        Err(reason) => {
            store.try_update(|state| {
                state.refuse_file(name, reason);
            });
            None
        }
    }
}

/// What the page exports, in the formats `ackscope export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Export {
    /// A Chrome trace-event file for ui.perfetto.dev: syscalls, stalls, TCP_INFO.
    Perfetto,
    /// The captured packets, each stall's explanation on the packet that ended it.
    Pcapng,
    /// Every message and each run's report, as `ackscope export FILE --json` prints them.
    Json,
}

/// Exports the session that `source` is (the live one, or an opened file) as a download;
/// `status` says what was written, or why nothing was.
pub fn export(store: Store, source: Source, kind: Export, status: RwSignal<Option<String>>) {
    let (bytes, name) = store.read_untracked(|state| match source {
        Source::Live => {
            (state.live.file_bytes().map(|bytes| bytes.to_vec()), "ackscope-session".to_string())
        }
        Source::File(id) => (None, state.file(id).map_or("session".into(), |f| f.name.clone())),
    });
    let stem = name.rsplit_once('.').map_or(name.as_str(), |(stem, _)| stem).to_string();
    spawn_local(async move {
        let bytes = match (bytes, source) {
            (Some(bytes), _) => Some(bytes),
            (None, Source::File(id)) => {
                match OPENED.with(|opened| opened.borrow().get(&id).cloned()) {
                    Some(blob) => read_range(&blob, 0.0, blob.size()).await,
                    None => None,
                }
            }
            (None, Source::Live) => None,
        };
        let Some(bytes) = bytes else {
            status.set(Some("nothing to export: the session's bytes are not here".into()));
            return;
        };
        let messages = session_messages(&bytes);
        let mut out = Vec::new();
        let (file_name, said) = match kind {
            Export::Perfetto => {
                let mut trace = TraceBuilder::new();
                let written = write_trace(messages, &name, &mut trace, &mut out);
                let c = trace.counts;
                let said = format!(
                    "{} syscalls, {} stalls and {} TCP_INFO counter values",
                    c.syscalls, c.stalls, c.counters
                );
                (format!("{stem}.perfetto.json"), written.map(|_| said))
            }
            Export::Pcapng => {
                // Three passes over the bytes: memory holds the stalls, not the segments.
                let written = write_pcapng(|| session_messages(&bytes), &mut out);
                let said = written.map(|(w, _)| {
                    let left_out = match w.stalls_left_out {
                        0 => String::new(),
                        n => format!("; {n} more stalls not kept"),
                    };
                    format!(
                        "{} packets ({} with a stall's explanation{left_out})",
                        w.packets, w.comments
                    )
                });
                (format!("{stem}.pcapng"), said)
            }
            Export::Json => {
                let written = write_export_json(messages, &mut out);
                let said = written.map(|(w, _)| {
                    let runs = if w.runs == 1 { "run's report" } else { "runs' reports" };
                    format!("{} messages and {} {runs}", w.messages, w.runs)
                });
                (format!("{stem}.json"), said)
            }
        };
        let saved = said
            .map_err(|e| e.to_string())
            .and_then(|said| blob_of(&out).and_then(|blob| save(&blob, &file_name)).map(|()| said));
        status.set(Some(match saved {
            Ok(said) => format!("wrote {said} to {file_name}"),
            Err(reason) => format!("could not export: {reason}"),
        }));
    });
}

/// The messages of a session file's bytes, decoded a piece at a time as they are read: the
/// bytes are not copied whole, and an export may read them again from the start.
fn session_messages(bytes: &[u8]) -> impl Iterator<Item = Result<ToBrowser, WireError>> + '_ {
    const PIECE_BYTES: usize = 64 * 1024;
    let mut stream = FrameStream::new();
    let mut pieces = bytes.chunks(PIECE_BYTES);
    std::iter::from_fn(move || loop {
        if let Some(message) = stream.next_message() {
            return Some(message);
        }
        stream.push(pieces.next()?);
    })
}

/// The overviews and block indexes at the end of a finished session file (`wire::Trailer`);
/// `None` when the file has no trailer (cut short, or older), or it cannot be read (then the
/// full read says why).
async fn read_end(blob: &Blob, size: f64) -> Option<FileEnd> {
    let tail_bytes = TRAILER_FRAME_BYTES as f64;
    if size < tail_bytes {
        return None;
    }
    let tail = read_range(blob, size - tail_bytes, size).await?;
    let range = Trailer::file_end_in(&tail, size as u64)?;
    let bytes = read_range(blob, range.start as f64, range.end as f64).await?;
    Some(wire::read_file_end(&bytes, range.start))
}

/// Bytes `from .. to` of `blob`, or `None` if the browser cannot read them.
async fn read_range(blob: &Blob, from: f64, to: f64) -> Option<Vec<u8>> {
    let slice = blob.slice_with_f64_and_f64(from, to).ok()?;
    let buffer = settle(&slice.array_buffer()).await.ok()?;
    Some(Uint8Array::new(&buffer).to_vec())
}

/// The page's clock in milliseconds (`performance.now()`), for time slices.
fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Fetches a session file from `url` and opens it, as [`open_blob`] does.
pub fn open_url(store: Store, url: String) {
    let name = name_of_url(&url);
    spawn_local(async move {
        match fetch_blob(&url).await {
            // A Blob is the browser's: decoding it in slices, as a picked file is, keeps only a
            // chunk at a time in the page's memory.
            Ok(blob) => open_blob(store, name, blob),
            Err(reason) => store.try_update(|state| {
                state.refuse_file(&name, format!("could not open {url}: {reason}"));
            }),
        }
    });
}

async fn fetch_blob(url: &str) -> Result<Blob, String> {
    let window = web_sys::window().ok_or("no window to fetch from")?;
    let response: Response = settle(&window.fetch_with_str(url))
        .await
        .map_err(|error| {
            format!(
                "{} (a server on another origin must allow this page with CORS)",
                describe(&error)
            )
        })?
        .dyn_into()
        .map_err(|_| "fetch did not answer with a response".to_string())?;
    if !response.ok() {
        return Err(format!(
            "the server answered {} {}",
            response.status(),
            response.status_text()
        ));
    }
    // Refused before the body is read when the server says how long it is; after, when not
    // (open_blob checks the size again).
    let declared = response
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|len| len.parse::<u64>().ok());
    if let Some(reason) = declared.and_then(refuse_size) {
        return Err(reason);
    }
    let body = response.blob().map_err(|error| describe(&error))?;
    settle(&body)
        .await
        .map_err(|error| describe(&error))?
        .dyn_into()
        .map_err(|_| "the body is not a blob".into())
}

/// A recording carried inside the page itself (`window.ackscopeRecordings`, base64 by file name:
/// the single-file offline build, opened from disk, where nothing can be fetched), as a Blob.
pub fn carried_recording(name: &str) -> Option<Blob> {
    let window = web_sys::window()?;
    let carried = js_sys::Reflect::get(&window, &JsValue::from_str("ackscopeRecordings")).ok()?;
    if carried.is_undefined() {
        return None;
    }
    let text = js_sys::Reflect::get(&carried, &JsValue::from_str(name)).ok()?.as_string()?;
    let binary = window.atob(&text).ok()?;
    // atob gives one char per byte.
    let bytes: Vec<u8> = binary.chars().map(|c| c as u32 as u8).collect();
    blob_of(&bytes).ok()
}

/// `bytes` as a binary Blob (copied once, into the browser's memory).
pub fn blob_of(bytes: &[u8]) -> Result<Blob, String> {
    let parts = Array::of1(&Uint8Array::from(bytes));
    let options = BlobPropertyBag::new();
    options.set_type("application/octet-stream");
    Blob::new_with_u8_array_sequence_and_options(&parts, &options)
        .map_err(|error| format!("could not make the file: {}", describe(&error)))
}

/// Offers `blob` as a download named `name`, through a temporary `<a download>`.
pub fn save(blob: &Blob, name: &str) -> Result<(), String> {
    let failed = |error: JsValue| format!("could not save the file: {}", describe(&error));
    let document =
        web_sys::window().and_then(|window| window.document()).ok_or("no document to save from")?;
    let body = document.body().ok_or("no body to save from")?;
    let url = Url::create_object_url_with_blob(blob).map_err(failed)?;
    let link: HtmlAnchorElement = document.create_element("a").map_err(failed)?.unchecked_into();
    link.set_href(&url);
    link.set_download(name);
    link.set_hidden(true);
    body.append_child(&link).map_err(failed)?;
    link.click();
    link.remove();
    // The download reads the URL after this returns; free it once it surely has.
    set_timeout(
        move || {
            let _ = Url::revoke_object_url(&url);
        },
        Duration::from_secs(60),
    );
    Ok(())
}

#[cfg(all(test, target_arch = "wasm32"))]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    #[wasm_bindgen_test]
    async fn a_blob_holds_exactly_the_bytes() {
        let bytes: Vec<u8> = (0..=255).cycle().take(70_000).collect();
        let blob = blob_of(&bytes).expect("a blob");
        assert_eq!(blob.size() as usize, bytes.len());
        let buffer = settle(&blob.array_buffer()).await.expect("readable");
        assert_eq!(Uint8Array::new(&buffer).to_vec(), bytes);
    }
}
