//! The overview strip: the whole row list at a glance, and a way to any part of it. While a big
//! file loads, [`FilePreview`] paints the same strip from the overview the probe wrote at the
//! file's end, before any event is decoded.

use ackscope_shared::overview::Column;
use leptos::ev::{MouseEvent, PointerEvent};
use leptos::html::Canvas;
use leptos::prelude::*;

use super::canvas::{paint, Frame, Rect};
use super::find::go_anywhere;
use super::model::{RowList, RunFacts, CANVAS_WIDTH, GUTTER, PAGE_ROWS, PLOT_WIDTH};
use super::rows::Filter;
use super::scale::format_duration;
use super::view::{Mode, ViewState};
use crate::store::Store;

const OVERVIEW_HEIGHT: f64 = 42.0;
/// The band along the top that shows how densely each share stalled.
const DENSITY_HEIGHT: f64 = 6.0;

/// How densely a share of the rows stalled, as a shade of red: darker the larger the part of
/// its requests that stalled; the faintest shade for a single stall among any number, so that
/// one is never lost; `None` for none.
fn density_fill(stalled: u32, rows: u32) -> Option<&'static str> {
    const SHADES: [&str; 4] = ["#f4c4c4", "#ea8f8f", "#e05a5a", "#d62828"];
    if stalled == 0 {
        return None;
    }
    let part = f64::from(stalled) / f64::from(rows.max(stalled));
    Some(SHADES[((part * SHADES.len() as f64).ceil() as usize).clamp(1, SHADES.len()) - 1])
}

/// The strip's marks: one column per share of the rows. Along the top, how densely the share
/// stalled ([`density_fill`]); below it, a line as tall as the slowest request of the share (red
/// when any request of it stalled). `band` is where the page is, if anywhere.
fn strip(columns: &[Column], band: Option<(f64, f64)>) -> Frame {
    let mut frame = Frame { width: CANVAS_WIDTH, height: OVERVIEW_HEIGHT, ..Frame::default() };
    let max = columns.iter().map(|c| c.slowest_ns).max().unwrap_or(0);
    let count = columns.len().max(1) as f64;
    let width = (PLOT_WIDTH / count).max(1.0);
    let bars = OVERVIEW_HEIGHT - DENSITY_HEIGHT - 2.0;
    for (index, column) in columns.iter().enumerate() {
        let x = GUTTER + index as f64 * PLOT_WIDTH / count;
        if let Some(fill) = density_fill(column.stalled, column.rows) {
            frame.marks.push(Rect { x, y: 0.0, width, height: DENSITY_HEIGHT, fill });
        }
        let share = if max == 0 { 0.0 } else { column.slowest_ns as f64 / max as f64 };
        let height = (share.sqrt() * (bars - 2.0)).max(1.0);
        let fill = if column.stalled > 0 { "#d62828" } else { "#84b3ee" };
        frame.marks.push(Rect { x, y: OVERVIEW_HEIGHT - height, width, height, fill });
    }
    if let Some((x, width)) = band {
        // A translucent band over the columns, so it shows on red too.
        let fill = "rgba(31, 95, 191, 0.35)";
        frame.marks.push(Rect { x, y: 0.0, width, height: OVERVIEW_HEIGHT, fill });
    }
    frame
}

/// The overview strip of the shown rows. Click or drag to go.
#[component]
pub(super) fn Overview(
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let columns: Memo<Vec<Column>> = Memo::new(move |_| {
        let (list, every_row) = rows.with(|r| (r.rows.clone(), r.filter.is_empty()));
        facts.with(|f| match f.as_ref() {
            // No filter: the overview the facts kept as the run grew, not a pass over every row.
            Some(f) if every_row => f.facts.overview_of_all().resample(PLOT_WIDTH as usize),
            Some(f) => f.facts.overview(&list).resample(PLOT_WIDTH as usize),
            None => Vec::new(),
        })
    });
    Effect::new(move |_| {
        let Some(canvas) = canvas.get() else { return };
        let total = rows.with(|r| r.rows.len()).max(1);
        let (top, mode) = view.with(|v| (v.top, v.mode));
        let band = (mode == Mode::Aligned).then(|| {
            let x = GUTTER + top as f64 / total as f64 * PLOT_WIDTH;
            (x, (PAGE_ROWS as f64 / total as f64 * PLOT_WIDTH).clamp(2.0, PLOT_WIDTH))
        });
        columns.with(|columns| paint(&canvas, &strip(columns, band)));
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
    let stalled_columns = move || columns.with(|c| c.iter().filter(|c| c.stalled > 0).count());
    view! {
        <div class="overview" title="the whole run: each column the slowest request of its share, red where one stalled; the band along the top darker where more of them stalled; click or drag to go there">
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

/// What the whole-run strip of a run held in part shows.
#[derive(Clone, Debug, PartialEq)]
struct Whole {
    rows: u32,
    slowest_ns: u64,
    held: (u32, u32),
    columns: Vec<Column>,
}

/// For a run of a file of which the page holds only part (past the events it holds, or read
/// from a request): the whole run's strip from the file's end, where the part held is shaded.
/// A click reads the file around the worst request of the column under it (the worst wait
/// first, then the slowest), or selects it if it is held: any of ten million requests' worst,
/// one click away.
#[component]
pub(super) fn WholeRunStrip(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    message: RwSignal<Option<String>>,
) -> impl IntoView {
    let whole: Memo<Option<Whole>> = Memo::new(move |_| {
        let key = facts.with(|f| f.as_ref().map(|f| f.key))?;
        store.read(|state| {
            let whole = state.whole_run(key)?;
            Some(Whole {
                rows: whole.overview.rows,
                slowest_ns: whole.overview.slowest_ns(),
                held: (whole.held.start, whole.held.end),
                columns: whole.overview.resample(PLOT_WIDTH as usize),
            })
        })
    });
    // The pass over the whole file that ranks every request: how far, or done.
    let ranked: Memo<Option<Result<(), u32>>> = Memo::new(move |_| {
        let key = facts.with(|f| f.as_ref().map(|f| f.key))?;
        store.read(|state| match state.ranking_progress(key) {
            Some((read, total)) => Some(Err((read * 100 / total.max(1)) as u32)),
            None => state.ranks_of(key).map(|_| Ok(())),
        })
    });
    let canvas = NodeRef::<Canvas>::new();
    Effect::new(move |_| {
        let Some(canvas) = canvas.get() else { return };
        whole.with(|whole| {
            let Some(whole) = whole else { return };
            let rows = f64::from(whole.rows.max(1));
            let x = GUTTER + f64::from(whole.held.0) / rows * PLOT_WIDTH;
            let width = f64::from(whole.held.1 - whole.held.0) / rows * PLOT_WIDTH;
            paint(&canvas, &strip(&whole.columns, Some((x, width.max(2.0)))));
        });
    });
    let go = move |ev: MouseEvent| {
        let Some(whole) = whole.get_untracked() else { return };
        let x = f64::from(ev.offset_x()) - GUTTER;
        let count = whole.columns.len().max(1);
        let index = ((x / PLOT_WIDTH).clamp(0.0, 1.0) * count as f64) as usize;
        let Some(column) = whole.columns.get(index.min(count - 1)) else { return };
        go_anywhere(store, facts, rows, view, filter, column.worst_row, message);
    };
    move || {
        whole.get().map(|whole| {
            let note = format!(
                "The whole run: {} requests; the page holds {}-{} (shaded). Click a column to go to \
                 its worst request: the file is read around it.",
                whole.rows,
                whole.held.0,
                whole.held.1.saturating_sub(1)
            );
            let status = move || match ranked.get() {
                Some(Ok(())) => "Every request is ranked: next slowest and n/p reach them all.".to_string(),
                Some(Err(percent)) => format!("Ranking every request for next slowest and n/p: {percent}%."),
                None => String::new(),
            };
            view! {
                <div
                    class="whole-run"
                    data-testid="whole-run"
                    data-requests=whole.rows.to_string()
                    data-slowest-ns=whole.slowest_ns.to_string()
                    data-held-from=whole.held.0.to_string()
                    data-held-to=whole.held.1.to_string()
                    data-ranked=move || matches!(ranked.get(), Some(Ok(()))).to_string()
                >
                    <p class="hint">{note} " " {status}</p>
                    <div class="overview">
                        <canvas node_ref=canvas data-testid="whole-run-strip" on:click=go></canvas>
                    </div>
                </div>
            }
        })
    }
}

/// What the preview of a loading file shows.
#[derive(Clone, Debug, PartialEq)]
struct Preview {
    name: String,
    rows: u32,
    stalled: u32,
    slowest_ns: u64,
    columns: Vec<Column>,
}

/// While a file is read: the overview of its run from the file's end (see
/// `wire::Trailer`), so a million requests' strip is on the screen in well under a second,
/// long before every request is decoded and reachable. Gone once the file is read.
#[component]
pub fn FilePreview(store: Store) -> impl IntoView {
    let preview: Memo<Option<Preview>> = Memo::new(move |_| {
        store.read(|state| {
            let (name, overview) = state.loading_overview()?;
            Some(Preview {
                name: name.to_string(),
                rows: overview.rows,
                stalled: overview.stalled(),
                slowest_ns: overview.slowest_ns(),
                columns: overview.resample(PLOT_WIDTH as usize),
            })
        })
    });
    let canvas = NodeRef::<Canvas>::new();
    let painted = RwSignal::new(false);
    Effect::new(move |_| {
        if preview.with(Option::is_none) {
            painted.set(false);
            return;
        }
        let Some(canvas) = canvas.get() else { return };
        preview.with(|preview| {
            if let Some(preview) = preview {
                paint(&canvas, &strip(&preview.columns, None));
                painted.set(true);
            }
        });
    });
    let progress = move || {
        store.read(|state| state.loading_overview().and(state.loading_progress()).unwrap_or((0, 1)))
    };
    move || {
        preview.with(|preview| preview.clone()).map(|preview| {
            let note = format!(
                "{}: {} requests, {} stalled, the slowest {}. Every request can be reached once \
                 the file is read.",
                preview.name,
                preview.rows,
                preview.stalled,
                format_duration(preview.slowest_ns)
            );
            view! {
                <section class="card file-preview" data-testid="file-preview">
                    <h2>"Opening a session"</h2>
                    <p class="hint">{note}</p>
                    <progress
                        data-testid="preview-progress"
                        max=move || progress().1.max(1).to_string()
                        value=move || progress().0.to_string()
                    ></progress>
                    <div class="overview" title="the whole run, from the overview the probe wrote at the file's end: each column the slowest request of its share, red where one stalled">
                        <canvas
                            node_ref=canvas
                            data-testid="preview-overview"
                            data-requests=preview.rows.to_string()
                            data-slowest-ns=preview.slowest_ns.to_string()
                            data-painted=move || painted.get().to_string()
                        ></canvas>
                    </div>
                </section>
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_density_darkens_with_the_share_that_stalled_and_never_hides_one() {
        assert_eq!(density_fill(0, 1000), None);
        let faintest = density_fill(1, 1_000_000).expect("one stall in a million is shown");
        let half = density_fill(500, 1000).expect("shown");
        let all = density_fill(1000, 1000).expect("shown");
        assert_ne!(faintest, half);
        assert_ne!(half, all);
        assert_eq!(all, "#d62828", "every request stalled: the stall colour itself");
        // A merged column can never say more stalled than it has rows; if it did, it is all.
        assert_eq!(density_fill(7, 3), Some(all));
    }

    #[test]
    fn the_strip_marks_density_only_where_requests_stalled() {
        let column =
            |rows, stalled| Column { rows, stalled, slowest_ns: 1000, ..Column::default() };
        let frame = strip(&[column(10, 0), column(10, 1), column(10, 10)], None);
        let density: Vec<&str> = frame
            .marks
            .iter()
            .filter(|mark| mark.y == 0.0 && mark.height == DENSITY_HEIGHT)
            .map(|mark| mark.fill)
            .collect();
        assert_eq!(density.len(), 2, "the column with no stall has no density mark");
        assert_ne!(density[0], density[1], "1 of 10 and 10 of 10 are told apart");
    }
}
