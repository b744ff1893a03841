//! Draws the selected run's timeline as SVG.
//!
//! SVG rather than canvas so that labels and rows are real elements a person can select and a
//! test can find. Rows are keyed by what they draw (request id and layout fingerprint): while a
//! run streams in, only the rows that changed are re-created, not all of them each frame.

use leptos::prelude::*;

use super::layout::{
    class_word, layout_run, Anchor, Label, LabelKind, RowLayout, TimelineLayout, RIGHT_MARGIN,
    ROW_HEIGHT,
};
use super::scale::Tick;
use crate::store::Store;

/// Room left of the plot for the request number.
const GUTTER: f64 = 40.0;
/// The plot itself: time maps onto this many pixels.
const PLOT_WIDTH: f64 = 752.0;
const SVG_WIDTH: f64 = GUTTER + PLOT_WIDTH + RIGHT_MARGIN;
const AXIS_HEIGHT: f64 = 22.0;
const MAX_TICK_INTERVALS: u64 = 6;

/// One row as the keyed list sees it.
#[derive(Clone)]
struct RowItem {
    key: (u32, u64),
    row: RowLayout,
}

#[component]
pub fn Timeline(store: Store) -> impl IntoView {
    let layout: Memo<Option<TimelineLayout>> = Memo::new(move |_| {
        store.read(|state| {
            state
                .selected()
                .filter(|run| run.is_rr())
                .map(|run| layout_run(&run.analysis, run.attribution(), PLOT_WIDTH))
        })
    });
    let ticks = move || {
        layout.with(|layout| {
            layout.as_ref().map(|l| l.scale.ticks(MAX_TICK_INTERVALS)).unwrap_or_default()
        })
    };
    let height = move || layout.with(|l| l.as_ref().map_or(0.0, TimelineLayout::height));
    let rows = move || {
        layout.with(|layout| {
            layout
                .iter()
                .flat_map(|l| &l.rows)
                .map(|row| RowItem { key: (row.req, row.fingerprint()), row: row.clone() })
                .collect::<Vec<_>>()
        })
    };
    let cap_note = move || {
        layout.with(|layout| {
            layout.as_ref().filter(|l| l.total > l.shown).map(|l| {
                let text = format!("showing {} of {} requests", l.shown, l.total);
                view! { <p class="cap-note" data-testid="row-cap-note">{text}</p> }
            })
        })
    };

    view! {
        <Show when=move || layout.with(Option::is_some)>
            <section class="card timeline" aria-label="timeline">
                <div class="timeline-head">
                    <h2>"Timeline"</h2>
                    <p class="hint">
                        "One row per request. x: ms since that request began (every row starts at "
                        "0, so stalls line up as a column); the scale fits the slowest request."
                    </p>
                </div>
                <Legend />
                {cap_note}
                <svg class="axis" width=px(SVG_WIDTH) height=px(AXIS_HEIGHT) role="presentation">
                    {move || ticks().into_iter().map(axis_tick).collect_view()}
                </svg>
                <div class="timeline-scroll">
                    <svg class="rows" width=px(SVG_WIDTH) height=move || px(height())>
                        <g class="grid">
                            {move || {
                                let height = px(height());
                                ticks()
                                    .into_iter()
                                    .map(|tick| {
                                        let x = px(GUTTER + tick.x);
                                        view! { <line x1=x.clone() x2=x y1="0" y2=height.clone() /> }
                                    })
                                    .collect_view()
                            }}
                        </g>
                        <For each=rows key=|item| item.key children=|item| request_row(item.row) />
                    </svg>
                </div>
            </section>
        </Show>
    }
}

fn axis_tick(tick: Tick) -> impl IntoView {
    let x = GUTTER + tick.x;
    view! {
        <g class="tick">
            <line x1=px(x) x2=px(x) y1=px(AXIS_HEIGHT - 5.0) y2=px(AXIS_HEIGHT) />
            <text x=px(x) y=px(AXIS_HEIGHT - 8.0)>{tick.label}</text>
        </g>
    }
}

fn request_row(row: RowLayout) -> impl IntoView {
    let RowLayout { req, y, bars, labels, done_x } = row;
    let parity = if req % 2 == 0 { "row even" } else { "row odd" };
    let bars = bars
        .into_iter()
        .map(|bar| {
            view! {
                <rect
                    class=format!("bar {}", bar.mark.class())
                    x=px(bar.x)
                    y=px(bar.y)
                    width=px(bar.width)
                    height=px(bar.height)
                >
                    <title>{bar.title}</title>
                </rect>
            }
        })
        .collect_view();
    let done = done_x.map(|x| {
        view! { <line class="done" x1=px(x) x2=px(x) y1="1" y2=px(ROW_HEIGHT - 1.0) /> }
    });
    let labels = labels.into_iter().map(label).collect_view();
    view! {
        <g
            class=parity
            data-testid="request-row"
            data-req=req.to_string()
            transform=format!("translate(0 {})", px(y))
        >
            <rect class="row-bg" x="0" y="0" width=px(SVG_WIDTH) height=px(ROW_HEIGHT) />
            <text class="req-label" x=px(GUTTER - 6.0) y=px(ROW_HEIGHT / 2.0 + 3.0)>
                {req}
            </text>
            <g transform=format!("translate({} 0)", px(GUTTER))>{bars} {done} {labels}</g>
        </g>
    }
}

/// A stall's or a wait's text, with why it waited as its hover text.
///
/// The `<title>` child is SVG's tooltip. It is hidden (`display: none`) so that the label's
/// rendered text, what a person or a WebDriver `text()` reads, stays "43.7 ms"; browsers show
/// the tooltip from the element, not from its rendering.
fn label(label: Label) -> impl IntoView {
    let Label { kind, x, y, anchor, text, ms, class, title } = label;
    let place = match anchor {
        Anchor::Inside => " inside",
        Anchor::After => "",
        Anchor::Before => " before",
    };
    let class_name = class.map_or("", class_word);
    match kind {
        LabelKind::Stall => view! {
            <text
                class=format!("stall-label{place}")
                data-testid="stall-label"
                data-stall-ms=ms
                data-class=class_name
                x=px(x)
                y=px(y)
            >
                {text}
                {svg_title(title)}
            </text>
        }
        .into_any(),
        LabelKind::Wait => view! {
            <text
                class=format!("wait-label{place}")
                data-testid="wait-label"
                data-wait-ms=ms
                data-class=class_name
                x=px(x)
                y=px(y)
            >
                {text}
                {svg_title(title)}
            </text>
        }
        .into_any(),
    }
}

/// A hidden SVG `<title>`. Built by hand: `view!` makes a `title` that is one of several
/// children an HTML element, which shows no tooltip inside SVG.
fn svg_title(text: String) -> impl IntoView {
    leptos::tachys::svg::title().attr("style", "display: none").child(text)
}

#[component]
fn Legend() -> impl IntoView {
    let lanes = [
        ("client-write", "client write()"),
        ("client-read", "client read()"),
        ("server-read", "server read()"),
        ("server-write", "server write()"),
    ];
    view! {
        <ul class="legend" aria-label="legend">
            <li class="lanes-note">"lanes, top to bottom:"</li>
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
            <li class="lanes-note">"hover a label or a bar for why"</li>
        </ul>
    }
}

/// SVG coordinates, rounded: a tenth of a pixel is below what anyone sees and keeps the DOM small.
fn px(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    format!("{rounded}")
}
