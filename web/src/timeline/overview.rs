//! The overview strip: the whole row list at a glance, and a way to any part of it.

use leptos::ev::PointerEvent;
use leptos::html::Canvas;
use leptos::prelude::*;

use super::canvas::{paint, Frame, Rect};
use super::lod::{overview, Bin};
use super::render::{RowList, RunFacts, CANVAS_WIDTH, GUTTER, PAGE_ROWS, PLOT_WIDTH};
use super::view::{Mode, ViewState};

const OVERVIEW_HEIGHT: f64 = 36.0;

/// The overview strip: the whole row list, one column per share of it, the tallest line the
/// slowest request of the share (red when any request of it stalled). Click or drag to go.
#[component]
pub(super) fn Overview(
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let bins: Memo<(Vec<Bin>, u64, Vec<u64>)> = Memo::new(move |_| {
        let list = rows.with(|r| r.rows.clone());
        facts.with(|f| {
            let Some(f) = f.as_ref() else { return (Vec::new(), 0, Vec::new()) };
            let (tree, stalled_before) = f.facts.tree(&list);
            let bins = overview(&tree, &stalled_before, PLOT_WIDTH as usize);
            let extents: Vec<u64> =
                bins.iter().map(|b| f.facts.extent_of(list[b.worst]).unwrap_or(0)).collect();
            let max = extents.iter().copied().max().unwrap_or(0);
            (bins, max, extents)
        })
    });
    Effect::new(move |_| {
        let Some(canvas) = canvas.get() else { return };
        let total = rows.with(|r| r.rows.len()).max(1);
        let (top, mode) = view.with(|v| (v.top, v.mode));
        let frame = bins.with(|(bins, max, extents)| {
            let mut frame =
                Frame { width: CANVAS_WIDTH, height: OVERVIEW_HEIGHT, ..Frame::default() };
            let columns = bins.len().max(1) as f64;
            let width = (PLOT_WIDTH / columns).max(1.0);
            for (index, bin) in bins.iter().enumerate() {
                let share = if *max == 0 { 0.0 } else { extents[index] as f64 / *max as f64 };
                let height = (share.sqrt() * (OVERVIEW_HEIGHT - 4.0)).max(1.0);
                let fill = if bin.stalled > 0 { "#d62828" } else { "#84b3ee" };
                let x = GUTTER + index as f64 * PLOT_WIDTH / columns;
                frame.marks.push(Rect { x, y: OVERVIEW_HEIGHT - height, width, height, fill });
            }
            if mode == Mode::Aligned {
                // Where the page is: a translucent band over the columns, so it shows on red too.
                let x = GUTTER + top as f64 / total as f64 * PLOT_WIDTH;
                let w = (PAGE_ROWS as f64 / total as f64 * PLOT_WIDTH).clamp(2.0, PLOT_WIDTH);
                let fill = "rgba(31, 95, 191, 0.35)";
                frame.marks.push(Rect { x, y: 0.0, width: w, height: OVERVIEW_HEIGHT, fill });
            }
            frame
        });
        paint(&canvas, &frame);
    });
    let dragging = RwSignal::new(false);
    let go = move |ev: &PointerEvent| {
        let x = f64::from(ev.offset_x()) - GUTTER;
        let total = rows.with_untracked(|r| r.rows.len());
        let position = ((x / PLOT_WIDTH).clamp(0.0, 1.0) * total as f64) as usize;
        view.update(|v| {
            v.mode = Mode::Aligned;
            v.top = 0;
            v.reveal(position.min(total.saturating_sub(1)), total, PAGE_ROWS);
            v.top = position.saturating_sub(PAGE_ROWS / 2).min(total.saturating_sub(PAGE_ROWS));
        });
    };
    let stalled_columns =
        move || bins.with(|(bins, _, _)| bins.iter().filter(|b| b.stalled > 0).count());
    view! {
        <div class="overview" title="the whole run: each column the slowest request of its share, red where one stalled; click or drag to go there">
            <canvas
                node_ref=canvas
                data-testid="overview"
                data-stalled-columns=move || stalled_columns().to_string()
                on:pointerdown=move |ev: PointerEvent| { dragging.set(true); go(&ev); }
                on:pointermove=move |ev: PointerEvent| if dragging.get_untracked() { go(&ev) }
                on:pointerup=move |_| dragging.set(false)
                on:pointerleave=move |_| dragging.set(false)
            ></canvas>
        </div>
    }
}
