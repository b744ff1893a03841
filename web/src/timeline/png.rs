//! "Save as PNG": the visible view as one image, as the screen shows it.

use wasm_bindgen::JsCast;

use super::layout::{Anchor, LabelKind};
use super::model::{Page, GUTTER, MAX_TICK_INTERVALS};

/// Saves the visible view as a PNG: the axis, the canvas's marks, and the page's text (request
/// numbers, lane names, stall labels) painted over them, as the screen shows them.
pub(super) fn export_png(page: &Page, canvas: &web_sys::HtmlCanvasElement) -> Result<(), String> {
    const AXIS: f64 = 18.0;
    let failed = |what: &str| format!("could not save the view: {what}");
    let document =
        web_sys::window().and_then(|w| w.document()).ok_or_else(|| failed("no document"))?;
    let out: web_sys::HtmlCanvasElement =
        document.create_element("canvas").map_err(|_| failed("no canvas"))?.unchecked_into();
    let (width, height) = (page.frame.width, page.frame.height + AXIS);
    out.set_width(width as u32);
    out.set_height(height as u32);
    let context: web_sys::CanvasRenderingContext2d = out
        .get_context("2d")
        .ok()
        .flatten()
        .ok_or_else(|| failed("no 2d context"))?
        .unchecked_into();
    context.set_fill_style_str("#ffffff");
    context.fill_rect(0.0, 0.0, width, height);
    context
        .draw_image_with_html_canvas_element_and_dw_and_dh(
            canvas,
            0.0,
            AXIS,
            width,
            page.frame.height,
        )
        .map_err(|_| failed("could not copy the plot"))?;
    context.set_font("10px monospace");
    context.set_fill_style_str("#5f6b7a");
    context.set_text_align("center");
    for tick in page.scale.map(|s| s.ticks(MAX_TICK_INTERVALS)).unwrap_or_default() {
        let _ = context.fill_text(&tick.label, GUTTER + tick.x, AXIS - 5.0);
    }
    context.set_text_align("left");
    for row in &page.rows {
        let _ = context.fill_text(&row.req.to_string(), 6.0, AXIS + row.y + 17.0);
    }
    for (y, name) in &page.lanes {
        let _ = context.fill_text(name, 6.0, AXIS + y + 12.0);
    }
    context.set_font("bold 10px monospace");
    for row in &page.rows {
        for label in &row.labels {
            let inside = label.anchor == Anchor::Inside;
            context.set_fill_style_str(match (label.kind, inside) {
                (_, true) => "#ffffff",
                (LabelKind::Stall, false) => "#d62828",
                (LabelKind::Wait, false) => "#8a5300",
            });
            context.set_text_align(if label.anchor == Anchor::After { "left" } else { "right" });
            let _ = context.fill_text(&label.text, GUTTER + label.x, AXIS + row.y + label.y);
        }
    }
    let url = out.to_data_url_with_type("image/png").map_err(|_| failed("the browser refused"))?;
    let link: web_sys::HtmlAnchorElement =
        document.create_element("a").map_err(|_| failed("no link"))?.unchecked_into();
    link.set_href(&url);
    link.set_download("ackscope-view.png");
    link.click();
    Ok(())
}
