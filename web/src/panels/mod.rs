//! One module per panel of the page. A panel that only shows gets its model (a memo the page
//! derives from the state: `Store::memo` of the panel's own `of`), not the store; the panels
//! that also act on the state (the run form, the watch source, the run lists, the lessons) get
//! the store.

pub mod class_answers;
pub mod compare;
pub mod exports;
pub mod kernel;
pub mod lesson;
pub mod run_form;
pub mod runs;
pub mod selection;
pub mod summary;
pub mod watch_source;

/// SVG coordinates, rounded: a tenth of a pixel is below what anyone sees, and keeps the DOM
/// small.
fn px(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    format!("{rounded}")
}
