//! ackscope's web app: shows, per request, where each side's `recv()` blocked and why.
//!
//! Layers:
//! - [`ws`]: the WebSocket to the probe (decode, reconnect); no state of its own.
//! - [`state`]: [`state::AppState`] (the live session and every opened file's) and the pure
//!   reducer every message goes through, whichever its source.
//! - [`session_file`]: session files to messages (pure); [`files`]: moving them in and out of
//!   the page (file picker, drop, `?url=`, download), with [`promise`] to await the browser.
//! - [`form`]: the run form's fields to a checked scenario.
//! - [`timeline`]: the per-request timeline, pure geometry apart from its rendering.
//! - [`app`]: the page, wired to the state through one version signal per animation frame.
#![forbid(unsafe_code)]

pub mod app;
pub mod files;
pub mod form;
pub mod promise;
pub mod session_file;
pub mod state;
pub mod timeline;
pub mod ws;

#[cfg(test)]
mod fixtures;

#[cfg(test)]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
