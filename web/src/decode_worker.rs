//! A big file's decoding, beside the page's thread: a Web Worker runs a second instance of this
//! app's wasm (`decode-worker.js`, written by `cargo xtask build`), decodes the file's blocks
//! there (zstd, then the columns) and hands the page its messages in a form read back without
//! decoding again ([`crate::handoff`]). The page then only applies them, while the worker
//! decodes the pieces after: on two cores the two halves of the work run at once.
//!
//! The worker is one per file read, stopped when the read ends (its memory goes with it), and
//! the page keeps at most [`IN_FLIGHT`] pieces with it, so what waits between the two is
//! bounded. Where no worker can start (a page opened from disk, a browser without module
//! workers) or it fails before its first batch, the page decodes on its own thread, as it
//! always could.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use ackscope_shared::RunId;
use js_sys::{Array, ArrayBuffer, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::handoff;
use crate::session_file::{Problem, SessionDecoder};

/// The worker's script, beside the page.
const WORKER_URL: &str = "./decode-worker.js";

/// Pieces of the file sent to the worker and not yet handed back decoded: enough that the
/// worker always has the next piece while the page applies one, and a bound on what waits (a
/// piece of [`PIECE_BYTES`] decodes to about 4 MB of messages).
pub const IN_FLIGHT: usize = 8;

/// The bytes of the file in each piece sent: a batch of about 190,000 events back, a few
/// slices of the page's applying.
pub const PIECE_BYTES: u32 = 256 * 1024;

/// The worker's end of the work: a file's decoder, exported to `decode-worker.js`.
#[wasm_bindgen]
pub struct WorkerDecoder {
    decoder: SessionDecoder,
    too_many: bool,
}

#[wasm_bindgen]
impl WorkerDecoder {
    /// A decoder that stops after `max_events` events; with `from_run`, of a file read from
    /// request `from_first` of that run ([`SessionDecoder::reading_from`]).
    #[wasm_bindgen(constructor)]
    pub fn new(max_events: f64, from_run: Option<u32>, from_first: u32) -> WorkerDecoder {
        let max_events = max_events as u64;
        let decoder = match from_run {
            Some(run) => SessionDecoder::reading_from(max_events, RunId(run), from_first),
            None => SessionDecoder::with_max_events(max_events),
        };
        WorkerDecoder { decoder, too_many: false }
    }

    /// Every whole message in `bytes` (with what came before), as one batch for the page.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut batch = Vec::new();
        self.decoder.feed(bytes, |message| handoff::write(&message, &mut batch));
        batch
    }

    /// Whether the decoder has stopped (a bad frame, or a file past a page's events): the page
    /// sends no more of the file.
    #[wasm_bindgen(getter)]
    pub fn stopped(&self) -> bool {
        self.decoder.stopped()
    }

    /// The file ended: what was wrong with it, if anything.
    pub fn finish(&mut self) -> Option<String> {
        let problem = self.decoder.finish().map(Problem::from)?;
        self.too_many = problem.too_many;
        Some(problem.text)
    }

    /// Whether [`WorkerDecoder::finish`]'s problem was a file past a page's events.
    #[wasm_bindgen(getter, js_name = tooMany)]
    pub fn too_many(&self) -> bool {
        self.too_many
    }
}

/// What the worker hands back, in the order the pieces went.
pub enum Reply {
    /// The messages of the next piece sent, and whether the decoder has stopped (it hands on
    /// nothing more: the rest of the file need not be sent).
    Batch { messages: Uint8Array, stopped: bool },
    /// The file ended (after [`DecodeWorker::end`]): what was wrong with it, if anything.
    Ended(Option<Problem>),
    /// The worker failed: it could not start, or threw.
    Failed(String),
}

#[derive(Default)]
struct Inbox {
    replies: VecDeque<Reply>,
    /// Resolves the promise [`DecodeWorker::next`] waits on.
    wake: Option<js_sys::Function>,
}

impl Inbox {
    fn push(inbox: &RefCell<Inbox>, reply: Reply) {
        let wake = {
            let mut inbox = inbox.borrow_mut();
            inbox.replies.push_back(reply);
            inbox.wake.take()
        };
        if let Some(wake) = wake {
            let _ = wake.call0(&JsValue::NULL);
        }
    }
}

/// The page's end: one worker decoding one file.
pub struct DecodeWorker {
    worker: web_sys::Worker,
    inbox: Rc<RefCell<Inbox>>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

impl DecodeWorker {
    /// Starts a worker decoding a file of at most `max_events` events (read from request
    /// `from.1` of run `from.0`); `None` where the page cannot start one (opened from disk).
    pub fn start(max_events: u64, from: Option<(RunId, u32)>) -> Option<DecodeWorker> {
        let window = web_sys::window()?;
        // A page opened from disk has no origin to load a worker's module from.
        if window.location().protocol().ok()? == "file:" {
            return None;
        }
        let options = web_sys::WorkerOptions::new();
        options.set_type(web_sys::WorkerType::Module);
        let worker = web_sys::Worker::new_with_options(WORKER_URL, &options).ok()?;
        let inbox = Rc::new(RefCell::new(Inbox::default()));
        let on_message = {
            let inbox = Rc::clone(&inbox);
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
                Inbox::push(&inbox, reply(&event.data()));
            })
        };
        let on_error = {
            let inbox = Rc::clone(&inbox);
            Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
                let said = event
                    .dyn_ref::<web_sys::ErrorEvent>()
                    .map(|e| e.message())
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "its script did not load".into());
                Inbox::push(&inbox, Reply::Failed(said));
            })
        };
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        let start = Object::new();
        let _ = Reflect::set(&start, &"maxEvents".into(), &(max_events as f64).into());
        if let Some((run, first)) = from {
            let _ = Reflect::set(&start, &"fromRun".into(), &run.0.into());
            let _ = Reflect::set(&start, &"fromFirst".into(), &first.into());
        }
        let worker = DecodeWorker { worker, inbox, _on_message: on_message, _on_error: on_error };
        worker.post("start", &start, None);
        Some(worker)
    }

    /// Sends the next piece of the file, handing its buffer over (it is the worker's after).
    pub fn send(&self, piece: &ArrayBuffer) {
        self.post("bytes", piece, Some(piece));
    }

    /// Says the file has no more pieces: the worker answers with [`Reply::Ended`].
    pub fn end(&self) {
        self.post("end", &JsValue::TRUE, None);
    }

    fn post(&self, what: &str, value: &JsValue, transfer: Option<&ArrayBuffer>) {
        let message = Object::new();
        let _ = Reflect::set(&message, &what.into(), value);
        let sent = match transfer {
            Some(buffer) => self.worker.post_message_with_transfer(&message, &Array::of1(buffer)),
            None => self.worker.post_message(&message),
        };
        if let Err(error) = sent {
            Inbox::push(&self.inbox, Reply::Failed(crate::js::describe(&error)));
        }
    }

    /// The worker's next reply, when it comes.
    pub async fn next(&self) -> Reply {
        loop {
            if let Some(reply) = self.inbox.borrow_mut().replies.pop_front() {
                return reply;
            }
            let inbox = Rc::clone(&self.inbox);
            let woken = Promise::new(&mut |resolve, _| inbox.borrow_mut().wake = Some(resolve));
            let _ = JsFuture::from(woken).await;
        }
    }
}

impl Drop for DecodeWorker {
    fn drop(&mut self) {
        self.worker.terminate();
    }
}

/// A message from the worker: `{batch, stopped}`, `{end: {problem, tooMany, memoryBytes}}` or
/// `{failed}`.
fn reply(data: &JsValue) -> Reply {
    let get = |name: &str| Reflect::get(data, &name.into()).ok().filter(|v| !v.is_undefined());
    if let Some(batch) = get("batch").and_then(|b| b.dyn_into::<ArrayBuffer>().ok()) {
        let stopped = get("stopped").and_then(|s| s.as_bool()).unwrap_or(false);
        return Reply::Batch { messages: Uint8Array::new(&batch), stopped };
    }
    if let Some(end) = get("end") {
        let field = |name: &str| Reflect::get(&end, &name.into()).ok();
        let text = field("problem").and_then(|p| p.as_string());
        let too_many = field("tooMany").and_then(|t| t.as_bool()).unwrap_or(false);
        if let Some(bytes) = field("memoryBytes").and_then(|b| b.as_f64()) {
            note_memory(bytes);
        }
        return Reply::Ended(text.map(|text| Problem { text, too_many }));
    }
    let said = get("failed").and_then(|f| f.as_string());
    Reply::Failed(said.unwrap_or_else(|| "it answered with something else".into()))
}

/// The most memory a decoder's worker held (its own wasm memory, apart from the page's), in
/// `window.ackscopeWorkerWasmBytes`: the page's own is `window.ackscopeWasmMemory`, and `cargo
/// xtask bench viewer` reads both from outside.
fn note_memory(bytes: f64) {
    let Some(window) = web_sys::window() else { return };
    let key = JsValue::from_str("ackscopeWorkerWasmBytes");
    let most = Reflect::get(&window, &key).ok().and_then(|m| m.as_f64()).unwrap_or(0.0);
    let _ = Reflect::set(&window, &key, &most.max(bytes).into());
}
