//! Paints data marks on a Canvas 2D: rectangles grouped by colour, so a frame sets each fill
//! style once (Perfetto found state changes, not rectangles, dominate a canvas frame).
//!
//! Canvas 2D rather than WebGL2: a page of the timeline is at most a few thousand rectangles
//! (two per pixel per lane, or twenty rows of a dozen calls), which Canvas 2D paints in well
//! under a millisecond; instancing would add a shader pipeline for no measurable gain.

use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

use super::layout::{Lane, Mark};

/// A mark's colour (the stylesheet's, so the legend's swatches match).
pub fn fill_of(mark: Mark) -> &'static str {
    match mark {
        Mark::Call(Lane::ClientWrite) => "#1f5fbf",
        Mark::Call(Lane::ClientRead) => "#84b3ee",
        Mark::Call(Lane::ServerRead) => "#7cc49a",
        Mark::Call(Lane::ServerWrite) => "#2b7f50",
        Mark::Connect => "#9b7fd1",
        Mark::Stalled => "#d62828",
        Mark::Waited => "#e89a0c",
    }
}

/// One rectangle in canvas (CSS pixel) coordinates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
    pub fill: &'static str,
}

/// What one frame paints, back to front: row bands, grid lines, marks, the response lines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub width: f64,
    pub height: f64,
    pub bands: Vec<Rect>,
    /// Vertical lines (x, y from, y to) in the grid colour.
    pub grid: Vec<(f64, f64, f64)>,
    pub marks: Vec<Rect>,
    /// Vertical lines (x, y from, y to) in ink: where a response was read.
    pub ticks: Vec<(f64, f64, f64)>,
}

/// Sizes the canvas for the screen's pixel density and paints `frame` on it.
pub fn paint(canvas: &HtmlCanvasElement, frame: &Frame) {
    let ratio = web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()).max(1.0);
    let (width, height) =
        ((frame.width * ratio).round() as u32, (frame.height * ratio).round() as u32);
    if canvas.width() != width || canvas.height() != height {
        canvas.set_width(width);
        canvas.set_height(height);
        let style = canvas.style();
        let _ = style.set_property("width", &format!("{}px", frame.width));
        let _ = style.set_property("height", &format!("{}px", frame.height));
    }
    let Some(context) = context_of(canvas) else { return };
    let performance = web_sys::window().and_then(|w| w.performance());
    let started = performance.as_ref().map(|p| p.now());
    let _ = context.set_transform(ratio, 0.0, 0.0, ratio, 0.0, 0.0);
    context.clear_rect(0.0, 0.0, frame.width, frame.height);
    fill_grouped(&context, &frame.bands);
    lines(&context, &frame.grid, "#dfe3e8");
    fill_grouped(&context, &frame.marks);
    lines(&context, &frame.ticks, "#1d232b");
    // What the drawing calls cost the page's thread, on the canvas for the viewer benchmark to
    // read: the measure behind choosing Canvas 2D (see the module's comment).
    if let (Some(performance), Some(started)) = (performance, started) {
        let _ =
            canvas.set_attribute("data-paint-ms", &format!("{:.2}", performance.now() - started));
    }
}

fn context_of(canvas: &HtmlCanvasElement) -> Option<CanvasRenderingContext2d> {
    canvas.get_context("2d").ok().flatten()?.dyn_into().ok()
}

/// Fills `rects` in order, switching fill style only when the colour changes (callers order
/// marks by what must paint on top, which groups colours well in practice).
fn fill_grouped(context: &CanvasRenderingContext2d, rects: &[Rect]) {
    let mut current = "";
    for rect in rects {
        if rect.fill != current {
            context.set_fill_style_str(rect.fill);
            current = rect.fill;
        }
        context.fill_rect(rect.x, rect.y, rect.width, rect.height);
    }
}

fn lines(context: &CanvasRenderingContext2d, lines: &[(f64, f64, f64)], stroke: &str) {
    if lines.is_empty() {
        return;
    }
    context.set_fill_style_str(stroke);
    for &(x, from, to) in lines {
        // A 1 px rectangle on the pixel grid is crisper than a stroked line.
        context.fill_rect(x.floor(), from, 1.0, to - from);
    }
}
