//! The timeline: the selected run's requests, every one reachable, stalls in red.
//!
//! Pure, tested natively without a browser:
//! - [`scale`]: time to pixels for the visible window, zoom and pan, and the axis ticks.
//! - [`layout`]: which bars and labels each request of the visible page produces.
//! - [`clock`]: the run-clock view's lanes per connection and side.
//! - [`lod`]: level of detail: the worst mark of every pixel is kept.
//! - [`rows`]: which requests are rows (filters), and finding the slowest and the stalls.
//! - [`view`]: the view state and what each key does to it.
//! - [`model`]: what the panel is computed from and shows (the run's facts, the row list, a page
//!   of the plot) and the plot's sizes; every part of the panel reads it, none of them it.
//!
//! In the browser: [`canvas`] paints the marks, [`render`] is the panel (canvas plus DOM), with
//! `find` (filters, go to, next slowest, stall steps), `overview` (the strip of the whole run),
//! `png` (save the view) and [`tables`] (the slowest requests and the longest waits).

pub mod canvas;
pub mod clock;
mod find;
pub mod layout;
pub mod lod;
pub mod model;
pub mod overview;
mod png;
pub mod render;
pub mod rows;
pub mod scale;
pub mod tables;
pub mod view;
