//! Draws the selected run's timeline: data marks on one canvas, text and controls in the DOM.
//!
//! One file, though long: the timeline's component, its input handling and its painting share
//! one view state; what it shows is `model`, the geometry `scale` and `layout`, the marks' level
//! of detail `lod`.
//!
//! Only the visible page is laid out (twenty rows, or the visible lanes at two marks per pixel),
//! so the cost of a frame does not grow with the run. Rows and labels of the page are DOM
//! elements over the canvas: a person can select their text, a screen reader can read them and
//! a test can find them; the thousands of bars are canvas pixels. The overview strip above the
//! plot shows the whole row list, one column per share of it, and navigates on click or drag.

use std::sync::Arc;

use leptos::ev::{KeyboardEvent, PointerEvent, WheelEvent};
use leptos::html::{Canvas, Div};
use leptos::prelude::*;

use super::canvas::{fill_of, paint, Frame, Rect};
use super::clock::{layout_lanes, Lanes, LANE_ROW};
use super::find::{fit_selection, step_to_stall, FindBar};
use super::layout::{
    class_word, layout_page, Anchor, Label, LabelKind, Mark, RowLayout, ROW_HEIGHT,
};
use super::model::{
    Page, RowList, RunFacts, RunLanes, CANVAS_WIDTH, GUTTER, MAX_TICK_INTERVALS, PAGE_ROWS,
    PLOT_WIDTH,
};
use super::overview::{Overview, WholeRunStrip};
use super::png::export_png;
use super::rows::Filter;
use super::scale::{format_duration, Scale};
use super::tables::Tables;
use super::view::{key_action, Action, Mode, ViewState, KEY_HELP};
use crate::state::RunKey;
use crate::store::Store;

/// The selected run's facts, kept by the run ([`crate::state::Run::facts`]): brought up to date
/// only when its events change.
pub fn run_facts(store: Store) -> Memo<Option<RunFacts>> {
    Memo::new(move |previous: Option<&Option<RunFacts>>| {
        store.read(|state| {
            let key = state.selected_key()?;
            let run = state.run(key).filter(|run| run.has_rows())?;
            if let Some(Some(previous)) = previous {
                if previous.key == key && previous.events == run.events {
                    return Some(previous.clone());
                }
            }
            let facts = run.facts();
            let slowest = facts.longest_ns();
            Some(RunFacts { key, events: run.events, facts, home: Scale::fit(slowest, PLOT_WIDTH) })
        })
    })
}

/// The rows the filter keeps, rebuilt when the run's facts or the filter change.
pub fn row_list(facts: Memo<Option<RunFacts>>, filter: RwSignal<Filter>) -> Memo<RowList> {
    Memo::new(move |_| {
        let filter = filter.get();
        facts.with(|facts| match facts {
            Some(facts) => RowList {
                of: Some((facts.key, facts.events)),
                rows: facts.facts.rows(&filter),
                filter,
            },
            None => RowList::default(),
        })
    })
}

#[component]
pub fn Timeline(
    store: Store,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    /// A view to start the given run from (a link's), instead of the whole view.
    initial: RwSignal<Option<(RunKey, ViewState)>>,
) -> impl IntoView {
    let facts = run_facts(store);
    let rows = row_list(facts, filter);
    // A new run starts from its whole view, or from the view a link asked for.
    Effect::new(move |previous: Option<Option<RunKey>>| {
        let key = facts.with(|f| f.as_ref().map(|f| f.key));
        let linked =
            initial.with(|i| i.as_ref().filter(|(k, _)| Some(*k) == key).map(|(_, v)| v.clone()));
        if let Some(state) = linked {
            initial.set(None);
            let (position, total) = rows.with_untracked(|r| {
                (state.selected.and_then(|req| r.rows.position(req)), r.rows.len())
            });
            view.set(state);
            if let Some(position) = position {
                view.update(|v| v.reveal(position, total, PAGE_ROWS));
            }
        } else if previous.is_none_or(|previous| previous != key) {
            if previous.is_some() {
                view.update(|v| *v = ViewState { mode: v.mode, ..ViewState::default() });
            }
            // A file read from a request shows that request.
            let wanted = key.and_then(|key| {
                store.try_update_quietly(|state| state.take_wanted_request(key)).flatten()
            });
            if let Some(req) = wanted {
                let (position, total) =
                    rows.with_untracked(|r| (r.rows.position(req), r.rows.len()));
                view.update(|v| {
                    v.selected = Some(req);
                    if let Some(position) = position {
                        v.reveal(position, total, PAGE_ROWS);
                    }
                });
            }
        }
        key
    });
    // The run-clock lanes are built only when that view is shown.
    let lanes: Memo<Option<RunLanes>> = Memo::new(move |previous: Option<&Option<RunLanes>>| {
        if view.with(|v| v.mode) != Mode::RunClock {
            return None;
        }
        let (key, events) = facts.with(|f| f.as_ref().map(|f| (f.key, f.events)))?;
        if let Some(Some(previous)) = previous {
            if previous.key == key && previous.events == events {
                return Some(previous.clone());
            }
        }
        store.read_untracked(|state| {
            let run = state.run(key)?;
            let mut lanes = Lanes::of(&run.analysis, run.attribution());
            lanes.server_clock_uncertainty_ns = run.clock.map(|clock| clock.uncertainty_ns);
            let lanes = Arc::new(lanes);
            Some(RunLanes { key, events, lanes })
        })
    });
    let page: Memo<Page> = Memo::new(move |_| {
        let v = view.get();
        match v.mode {
            Mode::Aligned => aligned_page(store, facts, rows, &v),
            Mode::RunClock => lanes
                .with(|lanes| lanes.as_ref().map(|l| clock_page(&l.lanes, &v)).unwrap_or_default()),
        }
    });
    let canvas = NodeRef::<Canvas>::new();
    Effect::new(move |_| {
        let frame = page.with(|page| page.frame.clone());
        if let Some(canvas) = canvas.get() {
            paint(&canvas, &frame);
        }
    });

    let shown = move || facts.with(Option::is_some);
    // What the last search or step said ("no stall after this one").
    let message = RwSignal::new(None::<String>);
    view! {
        <Show when=shown>
            <section class="card timeline" aria-label="timeline">
                <div class="timeline-head">
                    <h2>"Timeline"</h2>
                    <ModeSwitch view />
                    <p class="hint">{move || match view.with(|v| v.mode) {
                        Mode::Aligned => "One row per request. x: time since that request began (every row starts at 0, so stalls line up as a column).",
                        Mode::RunClock => "One lane per connection and side, on the run's one clock: every syscall, and every wait in red or amber.",
                    }}</p>
                </div>
                <FindBar store facts rows view filter message />
                <Legend view />
                <WholeRunStrip store facts rows view filter message />
                <Overview facts rows view />
                <Plot page canvas view rows facts filter message store />
                <Tables store facts rows view filter message />
                <div class="timeline-foot">
                    <KeysHelp view />
                    <button
                        type="button"
                        class="button"
                        data-testid="export-png"
                        title="save what the plot shows, labels included, as a PNG image"
                        on:click=move |_| {
                            let shown = page.with_untracked(Clone::clone);
                            if let Some(canvas) = canvas.get_untracked() {
                                message.set(export_png(&shown, &canvas).err());
                            }
                        }
                    >
                        "save as PNG"
                    </button>
                </div>
            </section>
        </Show>
    }
}

fn aligned_page(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: &ViewState,
) -> Page {
    let Some(home) = facts.with(|f| f.as_ref().map(|f| f.home)) else {
        return Page::default();
    };
    let scale = view.scale(home);
    let list = rows.with(|rows| rows.rows.clone());
    let key = facts.with(|f| f.as_ref().map(|f| f.key));
    // The store is read without tracking: `facts` changes whenever the run's events do.
    let layout = store.read_untracked(|state| {
        let run = state.run(key?)?;
        Some(layout_page(&run.analysis, run.attribution(), &list, view.top, PAGE_ROWS, scale))
    });
    let Some(layout) = layout else { return Page::default() };
    let height = PAGE_ROWS as f64 * ROW_HEIGHT;
    let mut frame = Frame { width: CANVAS_WIDTH, height, ..Frame::default() };
    for row in &layout.rows {
        let fill = if row.req % 2 == 0 { "#ffffff" } else { "#f6f7f9" };
        let band = Rect { x: 0.0, y: row.y, width: CANVAS_WIDTH, height: ROW_HEIGHT, fill };
        frame.bands.push(band);
        if view.selected == Some(row.req) {
            let mark = Rect { x: 0.0, y: row.y, width: 4.0, height: ROW_HEIGHT, fill: "#1f5fbf" };
            frame.bands.push(mark);
        }
    }
    for tick in scale.ticks(MAX_TICK_INTERVALS) {
        frame.grid.push((GUTTER + tick.x, 0.0, height));
    }
    let (mut stalled_marks, mut waited_marks) = (0, 0);
    for row in &layout.rows {
        for bar in &row.bars {
            stalled_marks += usize::from(bar.mark == Mark::Stalled);
            waited_marks += usize::from(bar.mark == Mark::Waited);
            frame.marks.push(Rect {
                x: GUTTER + bar.x,
                y: row.y + bar.y,
                width: bar.width,
                height: bar.height,
                fill: fill_of(bar.mark),
            });
        }
        if let Some(x) = row.done_x {
            frame.ticks.push((GUTTER + x, row.y + 1.0, row.y + ROW_HEIGHT - 1.0));
        }
    }
    Page {
        frame,
        rows: layout.rows,
        lanes: Vec::new(),
        scale: Some(scale),
        home: Some(home),
        total: layout.total,
        top: view.top,
        stalled_marks,
        waited_marks,
        hits: Vec::new(),
    }
}

fn clock_page(lanes: &Lanes, view: &ViewState) -> Page {
    let home = Scale::fit(lanes.end_ns, PLOT_WIDTH);
    let scale = view.scale(home);
    let bars = layout_lanes(lanes, view.top, PAGE_ROWS, &scale);
    let shown = lanes.lanes.len().saturating_sub(view.top).min(PAGE_ROWS);
    let height = shown.max(1) as f64 * LANE_ROW;
    let mut frame = Frame { width: CANVAS_WIDTH, height, ..Frame::default() };
    let mut names = Vec::new();
    for (position, lane) in lanes.lanes.iter().skip(view.top).take(PAGE_ROWS).enumerate() {
        let y = position as f64 * LANE_ROW;
        let fill = if position % 2 == 0 { "#ffffff" } else { "#f6f7f9" };
        frame.bands.push(Rect { x: 0.0, y, width: CANVAS_WIDTH, height: LANE_ROW, fill });
        names.push((y, lane.label_with(lanes.server_clock_uncertainty_ns)));
    }
    for tick in scale.ticks(MAX_TICK_INTERVALS) {
        frame.grid.push((GUTTER + tick.x, 0.0, height));
    }
    let mut hits = Vec::with_capacity(bars.len());
    let (mut stalled_marks, mut waited_marks) = (0, 0);
    for bar in &bars {
        stalled_marks += usize::from(bar.mark == Mark::Stalled);
        waited_marks += usize::from(bar.mark == Mark::Waited);
        let rect = Rect {
            x: GUTTER + bar.x,
            y: bar.y,
            width: bar.width,
            height: bar.height,
            fill: fill_of(bar.mark),
        };
        frame.marks.push(rect);
        hits.push((rect, bar.req));
    }
    Page {
        frame,
        rows: Vec::new(),
        lanes: names,
        scale: Some(scale),
        home: Some(home),
        total: lanes.lanes.len(),
        top: view.top,
        stalled_marks,
        waited_marks,
        hits,
    }
}

#[component]
fn ModeSwitch(view: RwSignal<ViewState>) -> impl IntoView {
    let button = move |mode: Mode, text: &'static str, testid: &'static str| {
        view! {
            <button
                type="button"
                class="button mode"
                data-testid=testid
                aria-pressed=move || (view.with(|v| v.mode) == mode).to_string()
                on:click=move |_| view.update(|v| {
                    if v.mode != mode {
                        *v = ViewState { mode, selected: v.selected, ..ViewState::default() };
                    }
                })
            >
                {text}
            </button>
        }
    };
    view! {
        <div class="mode-switch" role="group" aria-label="layout">
            {button(Mode::Aligned, "aligned", "mode-aligned")}
            {button(Mode::RunClock, "run clock", "mode-run-clock")}
        </div>
    }
}

/// A drag in progress: where the pointer was last (x) and where the rows were anchored (y),
/// in client pixels, and how far it has moved in all.
#[derive(Clone, Copy, Debug)]
struct Drag {
    x: f64,
    y: f64,
    moved: f64,
}

/// A pointer that moves less than this between press and release clicked rather than dragged.
const CLICK_SLOP_PX: f64 = 4.0;

/// The plot: the axis, the canvas, and the page's rows and labels over it.
#[component]
fn Plot(
    page: Memo<Page>,
    canvas: NodeRef<Canvas>,
    view: RwSignal<ViewState>,
    rows: Memo<RowList>,
    facts: Memo<Option<RunFacts>>,
    filter: RwSignal<Filter>,
    message: RwSignal<Option<String>>,
    store: Store,
) -> impl IntoView {
    let cursor = RwSignal::new(None::<String>);
    let drag = RwSignal::new(None::<Drag>);
    let plot = NodeRef::<Div>::new();
    let home = move || page.with_untracked(|p| p.home);
    let count = move || page.with_untracked(|p| p.total);
    let act = move |action: Action| {
        let Some(home) = home() else { return };
        let total = count();
        let rest = view.try_update(|v| v.act(action, home, total, PAGE_ROWS)).flatten();
        match rest {
            Some(Action::NextStall) => {
                step_to_stall(store, facts, rows, view, filter, true, message)
            }
            Some(Action::PrevStall) => {
                step_to_stall(store, facts, rows, view, filter, false, message)
            }
            Some(Action::FitSelection) => fit_selection(store, facts, view, home),
            _ => {}
        }
    };
    let keydown = move |ev: KeyboardEvent| {
        if let Some(action) = key_action(&ev.code(), &ev.key()) {
            if ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
                return;
            }
            ev.prevent_default();
            act(action);
        }
    };
    let wheel = move |ev: WheelEvent| {
        let at = ((f64::from(ev.offset_x()) - GUTTER) / PLOT_WIDTH).clamp(0.0, 1.0);
        let (dx, dy) = (ev.delta_x(), ev.delta_y());
        ev.prevent_default();
        if ev.ctrl_key() || ev.meta_key() {
            // Ctrl+wheel, and a pinch (which browsers send as Ctrl+wheel): zoom at the cursor.
            act(Action::Zoom { factor: (dy / 300.0).exp(), at });
        } else if ev.shift_key() || dx.abs() > dy.abs() {
            let delta = if dx.abs() > dy.abs() { dx } else { dy };
            act(Action::Pan(delta / PLOT_WIDTH));
        } else {
            let rows = (dy / ROW_HEIGHT).round() as i64;
            act(Action::Scroll(if rows == 0 { dy.signum() as i64 } else { rows }));
        }
    };
    let pointerdown = move |ev: PointerEvent| {
        if let Some(plot) = plot.get() {
            let _ = plot.focus();
        }
        drag.set(Some(Drag {
            x: f64::from(ev.client_x()),
            y: f64::from(ev.client_y()),
            moved: 0.0,
        }));
    };
    let pointermove = move |ev: PointerEvent| {
        let x = f64::from(ev.offset_x()) - GUTTER;
        cursor.set(
            page.with_untracked(|p| p.scale).filter(|_| (0.0..=PLOT_WIDTH).contains(&x)).map(
                |scale| {
                    let at = scale.ns_at(x);
                    let origin = if view.with_untracked(|v| v.mode) == Mode::Aligned {
                        "since the request began"
                    } else {
                        "on the run clock"
                    };
                    format!("{} {origin}", format_duration(at))
                },
            ),
        );
        let Some(mut state) = drag.get_untracked() else { return };
        let (x, y) = (f64::from(ev.client_x()), f64::from(ev.client_y()));
        let (dx, dy) = (x - state.x, y - state.y);
        if state.moved + dx.abs() + dy.abs() < CLICK_SLOP_PX {
            return;
        }
        state.moved += dx.abs() + dy.abs();
        act(Action::Pan(-dx / PLOT_WIDTH));
        state.x = x;
        // Whole rows only; the rest of the way is kept for the next move, so a slow drag scrolls.
        let rows = (-dy / ROW_HEIGHT).trunc();
        if rows != 0.0 {
            act(Action::Scroll(rows as i64));
            state.y -= rows * ROW_HEIGHT;
        }
        drag.set(Some(state));
    };
    let pointerup = move |ev: PointerEvent| {
        let moved = drag.get_untracked().map_or(0.0, |d| d.moved);
        drag.set(None);
        if moved >= CLICK_SLOP_PX {
            return;
        }
        // A click: select what is under it.
        let (x, y) = (f64::from(ev.offset_x()), f64::from(ev.offset_y()));
        let req = page.with_untracked(|p| match view.with_untracked(|v| v.mode) {
            Mode::Aligned => {
                p.rows.iter().find(|row| y >= row.y && y < row.y + ROW_HEIGHT).map(|row| row.req)
            }
            Mode::RunClock => p
                .hits
                .iter()
                .rev()
                .find(|(r, _)| {
                    x >= r.x - 1.0
                        && x <= r.x + r.width + 1.0
                        && y >= r.y - 2.0
                        && y <= r.y + r.height + 2.0
                })
                .map(|(_, req)| *req),
        });
        if let Some(req) = req {
            view.update(|v| v.selected = Some(req));
        }
    };

    let ticks = move || {
        page.with(|p| p.scale.map(|s| s.ticks(MAX_TICK_INTERVALS)).unwrap_or_default())
            .into_iter()
            .map(|tick| view! { <span class="tick" style=format!("left:{}px", GUTTER + tick.x)>{tick.label}</span> })
            .collect_view()
    };
    let row_items = move || page.with(|p| p.rows.clone());
    let lane_items = move || page.with(|p| p.lanes.clone());
    let height = move || page.with(|p| p.frame.height);
    view! {
        <div class="axis" style=format!("width:{CANVAS_WIDTH}px")>{ticks}</div>
        <div
            class="plot"
            node_ref=plot
            tabindex="0"
            data-testid="plot"
            data-mode=move || view.with(|v| v.mode.word())
            data-window=move || page.with(|p| p.scale.map(|s| format!("{} {}", s.from_ns(), s.to_ns())).unwrap_or_default())
            data-stalled-marks=move || page.with(|p| p.stalled_marks.to_string())
            data-waited-marks=move || page.with(|p| p.waited_marks.to_string())
            data-marks=move || page.with(|p| p.frame.marks.len().to_string())
            style=move || format!("width:{CANVAS_WIDTH}px;height:{}px", height())
            on:keydown=keydown
            on:wheel=wheel
            on:pointerdown=pointerdown
            on:pointermove=pointermove
            on:pointerup=pointerup
            on:pointerleave=move |_| { cursor.set(None); drag.set(None); }
        >
            <canvas node_ref=canvas class="marks"></canvas>
            <For each=row_items key=|row| (row.req, row.y.to_bits(), row.fingerprint()) children=move |row| request_row(row, view) />
            <For each=lane_items key=|lane| (lane.0.to_bits(), lane.1.clone()) children=|(y, name)| view! {
                <div class="lane-name" data-testid="lane" style=format!("top:{y}px")>{name}</div>
            } />
        </div>
        <p class="cursor-time" data-testid="cursor-time">{move || cursor.get().unwrap_or_else(|| "hover the plot for the time under the cursor".into())}</p>
    }
}

fn request_row(row: RowLayout, view: RwSignal<ViewState>) -> impl IntoView {
    let RowLayout { req, y, labels, .. } = row;
    let selected = move || view.with(|v| v.selected == Some(req));
    view! {
        <div
            class="request-row"
            class:selected=selected
            data-testid="request-row"
            data-req=req.to_string()
            aria-selected=move || selected().to_string()
            style=format!("top:{y}px;height:{ROW_HEIGHT}px")
        >
            <span class="req-label">{req}</span>
            {labels.into_iter().map(label).collect_view()}
        </div>
    }
}

/// A stall's or a wait's text, with why it waited as its tooltip.
fn label(label: Label) -> impl IntoView {
    let Label { kind, x, y, anchor, text, ms, class, title } = label;
    let place = match anchor {
        Anchor::Inside => "inside",
        Anchor::After => "after",
        Anchor::Before => "before",
    };
    let class_name = class.map_or("", class_word);
    // Anchored at its right end when inside or before its bar.
    let style = match anchor {
        Anchor::After => format!("left:{}px;top:{}px", GUTTER + x, y - 9.0),
        _ => format!("right:{}px;top:{}px", CANVAS_WIDTH - GUTTER - x, y - 9.0),
    };
    match kind {
        LabelKind::Stall => view! {
            <span class=format!("stall-label {place}") data-testid="stall-label" data-stall-ms=ms data-class=class_name title=title style=style>
                {text}
            </span>
        }
        .into_any(),
        LabelKind::Wait => view! {
            <span class=format!("wait-label {place}") data-testid="wait-label" data-wait-ms=ms data-class=class_name title=title style=style>
                {text}
            </span>
        }
        .into_any(),
    }
}

#[component]
fn KeysHelp(view: RwSignal<ViewState>) -> impl IntoView {
    view! {
        <div class="keys">
            <button type="button" class="button" data-testid="keys-button" on:click=move |_| view.update(|v| v.help = !v.help)>
                "keys (?)"
            </button>
            <Show when=move || view.with(|v| v.help)>
                <dl class="keys-help" data-testid="keys-help">
                    {KEY_HELP.iter().map(|(keys, what)| view! { <div><dt>{*keys}</dt><dd>{*what}</dd></div> }).collect_view()}
                </dl>
            </Show>
        </div>
    }
}

#[component]
fn Legend(view: RwSignal<ViewState>) -> impl IntoView {
    let lanes = [
        ("client-write", "client write()"),
        ("client-read", "client read()"),
        ("server-read", "server read()"),
        ("server-write", "server write()"),
    ];
    view! {
        <ul class="legend" aria-label="legend">
            <li class="lanes-note">
                {move || match view.with(|v| v.mode) {
                    Mode::Aligned => "lanes of a row, top to bottom:",
                    Mode::RunClock => "colours of the calls:",
                }}
            </li>
            {lanes
                .into_iter()
                .map(|(class, text)| {
                    view! {
                        <li>
                            <span class=format!("swatch {class}")></span>
                            {text}
                        </li>
                    }
                })
                .collect_view()}
            <li><span class="swatch connect"></span>"connect()"</li>
            <li><span class="swatch stalled"></span>"read held > 10 ms by the kernel"</li>
            <li>
                <span class="swatch waited"></span>
                "waited > 10 ms for something else: server think time, connect, a blocked write"
            </li>
            <li><span class="swatch done"></span>"response read"</li>
            <li class="lanes-note">"hover a label for why; click a row for its ladder"</li>
        </ul>
    }
}
