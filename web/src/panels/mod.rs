//! One module per panel of the page. Each reads the state through [`crate::store::Store`].

pub mod compare;
pub mod kernel;
pub mod lesson;
pub mod run_form;
pub mod runs;
pub mod selection;
pub mod summary;

/// SVG coordinates, rounded: a tenth of a pixel is below what anyone sees, and keeps the DOM
/// small.
fn px(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    format!("{rounded}")
}
