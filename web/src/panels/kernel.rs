//! The kernel's view of the selected run: TCP_INFO over time for one connection, both sides,
//! one small chart per field ("kernel tracks"), and a bulk run's goodput over time with its
//! windows. What it shows is computed by [`crate::tracks`]; this module only draws it.

use std::time::Duration;

use leptos::prelude::*;

use crate::panels::px;
use crate::store::Store;
use crate::timeline::scale::Tick;
use crate::timeline::view::ViewState;
use crate::tracks::{
    Chart, GoodputChart, KernelView, Shown, YTick, GOODPUT_HEIGHT, GOODPUT_WIDTH, PLOT_HEIGHT,
    PLOT_WIDTH,
};

/// Room around a track's plot: value labels on the left, time labels below (the last one
/// centred on the right edge).
const LEFT: f64 = 58.0;
const RIGHT: f64 = 26.0;
const TOP: f64 = 6.0;
const BOTTOM: f64 = 18.0;
/// Room around the goodput plot: Mbit/s on the left, bytes on the right.
const G_LEFT: f64 = 78.0;
const G_RIGHT: f64 = 64.0;
const G_TOP: f64 = 8.0;
const G_BOTTOM: f64 = 34.0;

/// What the kernel panel shows: the tracks of the selected run around the selected request
/// ([`Shown::of`]).
pub fn shown(store: Store, view: RwSignal<ViewState>) -> Memo<Option<Shown>> {
    // The charts are the page's largest part (a third of its elements, thousands of points),
    // below the timeline: a newly selected run gets them a task after the rest of its view, so
    // that showing a big run is two shorter tasks, not one long one.
    let selected_run = Memo::new(move |_| store.read(|state| state.selected_key()));
    let run_a_task_ago = RwSignal::new(None);
    Effect::new(move |_| {
        let key = selected_run.get();
        set_timeout(move || run_a_task_ago.set(key), Duration::ZERO);
    });
    // A memo: a frame that brought nothing new for the shown range redraws nothing.
    let shown = Memo::new(move |_| {
        let selected = view.with(|v| v.selected);
        let key = run_a_task_ago.get().filter(|&key| Some(key) == selected_run.get())?;
        store.read(|state| state.run(key).map(|run| Shown::of(run, selected)))
    });
    shown
}

#[component]
pub fn KernelPanel(shown: Memo<Option<Shown>>) -> impl IntoView {
    move || shown.get().map(kernel_card)
}

/// A bulk run's goodput (its own card, first), then the kernel tracks or why there are none.
fn kernel_card(shown: Shown) -> impl IntoView {
    let Shown { tracks, goodput } = shown;
    let goodput = goodput.map(|chart| {
        view! {
            <section class="card kernel" aria-label="goodput over time">
                {goodput_figure(chart)}
            </section>
        }
    });
    let tracks = match tracks {
        Err(why) => view! {
            <section class="card kernel" aria-label="kernel tracks">
                <p class="hint" data-testid="no-kernel-tracks">{why}</p>
            </section>
        }
        .into_any(),
        Ok(tracks) => track_grid(tracks).into_any(),
    };
    view! { {goodput} {tracks} }
}

fn track_grid(tracks: KernelView) -> impl IntoView {
    let KernelView { conn, heading, range, x_ticks, charts, note } = tracks;
    let charts = charts.into_iter().map(|chart| track_figure(chart, &x_ticks)).collect_view();
    view! {
        <section
            class="card kernel"
            data-testid="kernel-tracks"
            data-conn=conn.to_string()
            aria-label="kernel tracks"
        >
            <h2>"Kernel: TCP_INFO over time " <span class="hint">{heading}</span></h2>
            <p class="hint range">{range}</p>
            {note.map(|note| view! { <p class="hint">{note}</p> })}
            <div class="kernel-grid">
                <h3 class="side-head">"client"</h3>
                <h3 class="side-head">"server"</h3>
                {charts}
            </div>
        </section>
    }
}

/// Grid lines and labels of a time axis under a plot `height` high.
fn time_axis(ticks: &[Tick], height: f64) -> impl IntoView {
    ticks
        .iter()
        .map(|tick| {
            let x = px(tick.x);
            view! {
                <line class="grid" x1=x.clone() x2=x.clone() y1="0" y2=px(height) />
                <text class="x-label" x=x y=px(height + 12.0)>{tick.label.clone()}</text>
            }
        })
        .collect_view()
}

/// Labels of a y axis, left of the plot (`at_x` 0) or right of it (`at_x` its width).
fn value_axis(ticks: Vec<YTick>, at_x: f64, class: &'static str) -> impl IntoView {
    let offset = if at_x == 0.0 { -4.0 } else { 4.0 };
    ticks
        .into_iter()
        .map(|tick| {
            view! { <text class=class x=px(at_x + offset) y=px(tick.y + 3.0)>{tick.label}</text> }
        })
        .collect_view()
}

fn track_figure(chart: Chart, x_ticks: &[Tick]) -> impl IntoView {
    let Chart { field, side, about, points, y_ticks, last, filled } = chart;
    let (width, height) = (LEFT + PLOT_WIDTH + RIGHT, TOP + PLOT_HEIGHT + BOTTOM);
    let line =
        (!points.is_empty()).then(|| view! { <polyline class="track-line" points=points /> });
    let empty = line.is_none();
    let bottom = px(PLOT_HEIGHT);
    view! {
        <figure
            class="kernel-track"
            data-testid="kernel-track"
            data-field=field
            data-side=side
            data-filled=filled.to_string()
        >
            <figcaption>
                <span class="field" title=about>{field}</span>
                <span class="last num">{last}</span>
            </figcaption>
            <svg
                width=px(width)
                height=px(height)
                viewBox=format!("0 0 {} {}", px(width), px(height))
                role="img"
                aria-label=format!("{field} of the {side}: {about}")
            >
                <g transform=format!("translate({} {})", px(LEFT), px(TOP))>
                    {time_axis(x_ticks, PLOT_HEIGHT)}
                    <line class="baseline" x1="0" x2=px(PLOT_WIDTH) y1=bottom.clone() y2=bottom />
                    {value_axis(y_ticks, 0.0, "y-label")}
                    {line}
                    {empty.then(|| view! {
                        <text class="empty" x=px(PLOT_WIDTH / 2.0) y=px(PLOT_HEIGHT / 2.0)>
                            "no samples"
                        </text>
                    })}
                </g>
            </svg>
        </figure>
    }
}

fn goodput_figure(chart: GoodputChart) -> impl IntoView {
    let GoodputChart { points, left_ticks, right_ticks, x_ticks, windows, ceiling, buckets } =
        chart;
    let (width, height) = (G_LEFT + GOODPUT_WIDTH + G_RIGHT, G_TOP + GOODPUT_HEIGHT + G_BOTTOM);
    let has_ceiling = !ceiling.is_empty();
    let (bottom, right_end) = (px(GOODPUT_HEIGHT), px(GOODPUT_WIDTH));
    let legend = windows
        .iter()
        .map(|line| {
            let swatch = format!("swatch {}", line.key);
            view! { <li><span class=swatch></span>{line.name}" (right axis)"</li> }
        })
        .collect_view();
    let right =
        (!windows.is_empty()).then(|| value_axis(right_ticks, GOODPUT_WIDTH, "y-label right"));
    let lines = windows
        .into_iter()
        .map(|line| {
            view! {
                <polyline
                    class=format!("window-line {}", line.key)
                    data-series=line.key
                    points=line.points
                />
            }
        })
        .collect_view();
    view! {
        <figure class="goodput" data-testid="goodput">
            <h2>"Goodput over time " <span class="hint">{buckets}</span></h2>
            <svg
                width=px(width)
                height=px(height)
                viewBox=format!("0 0 {} {}", px(width), px(height))
                role="img"
                aria-label="goodput over time, and the windows"
            >
                <g transform=format!("translate({} {})", px(G_LEFT), px(G_TOP))>
                    {time_axis(&x_ticks, GOODPUT_HEIGHT)}
                    <line class="baseline" x1="0" x2=right_end y1=bottom.clone() y2=bottom />
                    {value_axis(left_ticks, 0.0, "y-label")}
                    {right}
                    <text class="axis-title" x=px(GOODPUT_WIDTH / 2.0) y=px(GOODPUT_HEIGHT + 30.0)>
                        "run clock; left: bytes the server read, Mbit/s per bucket; right: window"
                    </text>
                    {lines}
                    {(!ceiling.is_empty()).then(|| view! {
                        <polyline class="ceiling-line" data-series="window-over-rtt" points=ceiling />
                    })}
                    <polyline class="goodput-line" data-series="goodput" points=points />
                </g>
            </svg>
            <ul class="goodput-legend">
                <li><span class="swatch goodput"></span>"goodput (left axis)"</li>
                {has_ceiling.then(|| view! {
                    <li><span class="swatch ceiling"></span>"server window / client RTT: what the window allows (left axis)"</li>
                })}
                {legend}
            </ul>
        </figure>
    }
}

#[cfg(all(test, target_arch = "wasm32"))]
mod tests {
    use ackscope_shared::wire::{Instruments, ToBrowser};
    use ackscope_shared::{
        BulkSpec, ConnId, Event, EventKind, ReqId, RrSpec, RunId, Scenario, Side, TcpInfoSample,
    };
    use leptos::mount::mount_to;
    use leptos::prelude::*;
    use wasm_bindgen::JsCast;
    use wasm_bindgen_test::wasm_bindgen_test;
    use web_sys::Element;

    use super::KernelPanel;
    use crate::fixtures::dom::{all, settle};
    use crate::fixtures::{hello, nagle_run, rr_started, MS};
    use crate::state::{apply, AppState};
    use crate::store::Store;
    use crate::timeline::view::ViewState;

    fn mount(store: Store, view: RwSignal<ViewState>) -> (Element, impl Sized) {
        let document = document();
        let root = document.create_element("div").expect("create a div");
        document.body().expect("a body").append_child(&root).expect("append");
        let mounted = mount_to(root.clone().unchecked_into(), move || {
            view! { <KernelPanel shown=super::shown(store, view) /> }
        });
        (root, mounted)
    }

    fn event(at_ns: u64, side: Side, kind: EventKind) -> Event {
        Event { at_ns, side, conn: ConnId(0), req: ReqId(0), kind }
    }

    fn tcp_info(at_ns: u64, side: Side, sample: TcpInfoSample) -> Event {
        event(at_ns, side, EventKind::TcpInfo(Box::new(sample)))
    }

    fn points(element: &Element) -> usize {
        let points = element.get_attribute("points").unwrap_or_default();
        points.split(' ').filter(|point| point.contains(',')).count()
    }

    #[wasm_bindgen_test]
    async fn a_selected_request_shows_its_connections_tcp_info_over_time() {
        let store = Store::new(AppState::default());
        store.update(|s| {
            apply(s, hello());
            apply(s, rr_started(1, RrSpec::default()));
            let mut events = nagle_run(3, 44 * MS);
            for ms in 0..200 {
                let cwnd = if ms == 120 { 40 } else { 10 };
                let sample = TcpInfoSample {
                    snd_cwnd: cwnd,
                    notsent_bytes: Some(2048),
                    ..Default::default()
                };
                events.push(tcp_info(ms * MS, Side::Client, sample.clone()));
                events.push(tcp_info(ms * MS, Side::Server, sample));
            }
            apply(s, ToBrowser::Events { run: RunId(1), events });
        });
        let view = RwSignal::new(ViewState { selected: Some(1), ..ViewState::default() });
        let (root, _mounted) = mount(store, view);
        settle().await;

        assert_eq!(all(&root, "[data-testid=kernel-tracks]").len(), 1);
        assert!(all(&root, "[data-testid=no-kernel-tracks]").is_empty());
        let cwnd = all(&root, "[data-testid=kernel-track][data-field=cwnd]");
        let sides: Vec<Option<String>> =
            cwnd.iter().map(|c| c.get_attribute("data-side")).collect();
        assert_eq!(sides, [Some("client".to_string()), Some("server".to_string())]);
        for chart in &cwnd {
            let line = chart.query_selector("polyline").ok().flatten().expect("a line");
            assert!(points(&line) > 2, "{:?}", line.get_attribute("points"));
        }
        let heading = all(&root, "[data-testid=kernel-tracks] h2").pop().expect("a heading");
        let heading = heading.text_content().unwrap_or_default();
        assert!(heading.contains("around request 1"), "{heading}");

        // Nothing selected: the whole run, where the spike at 120 ms is.
        view.update(|v| v.selected = None);
        settle().await;
        let heading = all(&root, "[data-testid=kernel-tracks] h2").pop().expect("a heading");
        let heading = heading.text_content().unwrap_or_default();
        assert!(heading.contains("the whole run"), "{heading}");
        let client = all(&root, "[data-field=cwnd][data-side=client] text.y-label");
        let labels: Vec<String> = client.iter().filter_map(|t| t.text_content()).collect();
        assert_eq!(labels, ["0 seg", "40 seg"], "the spike sets the scale");
        assert!(all(&root, "[data-testid=goodput]").is_empty(), "not a bulk run");
    }

    #[wasm_bindgen_test]
    async fn a_run_without_tcp_info_says_how_to_record_it() {
        let store = Store::new(AppState::default());
        store.update(|s| {
            apply(s, hello());
            let instruments = Instruments {
                tcp_info_at_syscalls: false,
                tcp_info_interval_us: 0,
                ..Instruments::default()
            };
            let spec = Scenario::Rr(RrSpec::default());
            apply(s, ToBrowser::RunStarted { run: RunId(1), spec, instruments });
            apply(s, ToBrowser::Events { run: RunId(1), events: nagle_run(2, 44 * MS) });
        });
        let (root, _mounted) = mount(store, RwSignal::new(ViewState::default()));
        settle().await;
        let note = all(&root, "[data-testid=no-kernel-tracks]").pop().expect("the note");
        let note = note.text_content().unwrap_or_default();
        assert!(note.contains("--no-tcp-info"), "{note}");
        assert!(all(&root, "[data-testid=kernel-track]").is_empty());
    }

    #[wasm_bindgen_test]
    async fn a_bulk_run_shows_goodput_over_time_with_the_window() {
        let store = Store::new(AppState::default());
        store.update(|s| {
            apply(s, hello());
            let spec = Scenario::Bulk(BulkSpec::default());
            let instruments = Instruments::default();
            apply(s, ToBrowser::RunStarted { run: RunId(1), spec, instruments });
            let mut events = vec![event(0, Side::Client, EventKind::RequestStart)];
            for ms in 1..=100u64 {
                // The window closes halfway: goodput falls with it.
                let (bytes, wnd) = if ms <= 50 { (125_000, 262_144) } else { (12_500, 16_384) };
                events.push(event(ms * MS - 1, Side::Server, EventKind::ReadDone { bytes }));
                let sample = TcpInfoSample { rcv_wnd: Some(wnd), ..Default::default() };
                events.push(tcp_info(ms * MS - 1, Side::Server, sample));
            }
            apply(s, ToBrowser::Events { run: RunId(1), events });
        });
        let (root, _mounted) = mount(store, RwSignal::new(ViewState::default()));
        settle().await;

        let figure = all(&root, "[data-testid=goodput]").pop().expect("the goodput chart");
        let goodput = figure.query_selector("polyline[data-series=goodput]").ok().flatten();
        let goodput = goodput.expect("the goodput line");
        assert!(points(&goodput) > 10, "{:?}", goodput.get_attribute("points"));
        let window = figure.query_selector("polyline[data-series=server-rcv_wnd]").ok().flatten();
        assert!(points(&window.expect("the server's window")) > 2);
        let labels: Vec<String> =
            all(&figure, "text.y-label").iter().filter_map(|t| t.text_content()).collect();
        assert!(labels.contains(&"1000 Mbit/s".to_string()), "{labels:?}");
        assert!(labels.contains(&"256 KiB".to_string()), "{labels:?}");
        // The kernel tracks of the bulk connection are there too.
        assert_eq!(all(&root, "[data-testid=kernel-track][data-field=rcv_wnd]").len(), 2);
    }
}
