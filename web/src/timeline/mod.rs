//! The timeline: one row per request, four lanes per row, stalls in red.
//!
//! - [`scale`]: time to pixels and the axis ticks.
//! - [`layout`]: which bars and labels each request produces (pure, tested without a DOM).
//! - [`render`]: turns the layout into SVG elements, re-creating only the rows that changed.

pub mod layout;
pub mod render;
pub mod scale;
