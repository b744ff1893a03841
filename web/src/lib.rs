//! ackscope's web app: shows, per request, where each side's `recv()` blocked and why.
//!
//! Layers:
//! - [`ws`]: the WebSocket to the probe (decode, reconnect); no state of its own.
//! - [`state`]: [`state::AppState`] and [`state::apply`], the pure reducer every message goes
//!   through.
//! - [`form`]: the run form's fields to a checked spec.
//! - [`timeline`]: the per-request timeline, pure geometry apart from its rendering.
//! - [`app`]: the page, wired to the state through one version signal per animation frame.
#![forbid(unsafe_code)]

pub mod app;
pub mod form;
pub mod state;
pub mod timeline;
pub mod ws;

#[cfg(test)]
mod fixtures;

#[cfg(test)]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
