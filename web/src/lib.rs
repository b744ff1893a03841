//! ackscope's web app: shows, per request, where each side's `recv()` blocked and why.
//!
//! The folder follows the page. Data flows one way: the probe's socket or a file gives
//! messages, the reducer applies them to the state, the store tells the views, the views draw.
//! - [`ws`]: the WebSocket to the probe (decode, reconnect); no state of its own.
//! - [`state`]: [`state::AppState`] (the live session and every opened file's) and the pure
//!   reducer every message goes through, whichever its source.
//! - [`store`]: the state behind one version signal, bumped at most once per animation frame.
//! - [`session_file`]: session files to messages (pure); [`files`]: moving them in and out of
//!   the page (file picker, drop, `?url=`, download); [`js`]: awaiting the browser.
//! - [`app`]: the page, composed of [`panels`] (the run form, the watch source, the run lists,
//!   the summary, the comparison of marked runs, the kernel tracks) and the [`timeline`].
//! - Pure modules, tested natively without a browser: [`form`] (the form's fields to a checked
//!   scenario), [`text`] (the summary's words), [`compare`] (the Compare view's curves, waits and
//!   spec changes), [`tracks`] (the kernel tracks' and goodput's charts), [`timeline`]'s `scale`
//!   and `layout`, [`state`].
#![forbid(unsafe_code)]

pub mod app;
pub mod classroom;
pub mod compare;
pub mod decode_worker;
pub mod files;
pub mod form;
pub mod handoff;
pub mod js;
pub mod ladder;
pub mod lessons;
pub mod panels;
pub mod session_file;
pub mod state;
pub mod store;
pub mod text;
pub mod timeline;
pub mod tracks;
pub mod url_state;
pub mod vm;
pub mod ws;

#[cfg(test)]
mod fixtures;

#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
