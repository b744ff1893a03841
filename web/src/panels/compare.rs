//! The Compare card: the runs marked with "compare" in the run lists (live runs, files' runs, or
//! both), once there are two or more. What it shows is computed by [`crate::compare`]; this
//! module only draws it.

use leptos::prelude::*;

use crate::compare::{AxisTick, ClassRow, ComparedRun, Comparison, PLOT_HEIGHT, PLOT_WIDTH};
use crate::panels::px;

/// Room around the plot: fraction labels on the left, latency labels and the axis title below.
const LEFT: f64 = 44.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 38.0;
const SVG_WIDTH: f64 = LEFT + PLOT_WIDTH + RIGHT;
const SVG_HEIGHT: f64 = TOP + PLOT_HEIGHT + BOTTOM;

/// The runs marked to compare (`Comparison::of` the state: a memo, so a frame that changed
/// nothing compared, another run streaming, redraws nothing); `clear` unmarks them all.
#[component]
pub fn ComparePanel(comparison: Memo<Option<Comparison>>, clear: Callback<()>) -> impl IntoView {
    move || comparison.get().map(|comparison| compare_card(clear, comparison))
}

fn compare_card(clear: Callback<()>, comparison: Comparison) -> impl IntoView {
    let Comparison { runs, x_ticks, y_ticks, classes } = comparison;
    let clear = move |_| clear.run(());
    view! {
        <section class="card compare" data-testid="compare" aria-label="compare runs">
            <div class="runs-head">
                <h2>"Compare " <span class="hint">{runs.len()} " runs"</span></h2>
                <button type="button" class="button" title="unmark every run" on:click=clear>
                    "clear"
                </button>
            </div>
            {what_changed(&runs)}
            {legend(&runs)}
            {cdf(&runs, x_ticks, y_ticks)}
            {class_table(&runs, classes)}
        </section>
    }
}

/// One line per run after the first: "#1 vs #2: TCP_NODELAY: both sides off -> on", the runs
/// and the values in the order they are compared.
fn what_changed(runs: &[ComparedRun]) -> impl IntoView {
    let lines = runs
        .iter()
        .filter_map(|run| {
            let (vs, changes) = run.changes.clone()?;
            Some(view! {
                <li>
                    <span class="vs">{vs} ": "</span>
                    <span
                        data-testid="what-changed"
                        data-run-id=run.key.run.0.to_string()
                        data-source=run.key.source.word()
                    >
                        {changes}
                    </span>
                </li>
            })
        })
        .collect_view();
    view! { <ul class="what-changed" aria-label="what changed">{lines}</ul> }
}

fn legend(runs: &[ComparedRun]) -> impl IntoView {
    let entries = runs
        .iter()
        .map(|run| {
            view! {
                <li>
                    <span class=format!("swatch {}", run.series)></span>
                    <span class="run-id">{run.name.clone()}</span>
                    <span class="describe">{run.describe.clone()}</span>
                    <span class="source">{run.from.clone()}</span>
                    <span class="figures num">{run.figures.clone()}</span>
                </li>
            }
        })
        .collect_view();
    view! { <ul class="compare-legend" aria-label="compared runs">{entries}</ul> }
}

/// The CDFs: one polyline per run over one log-scale latency axis.
fn cdf(runs: &[ComparedRun], x_ticks: Vec<AxisTick>, y_ticks: Vec<AxisTick>) -> impl IntoView {
    let bottom = px(PLOT_HEIGHT);
    let grid_x = x_ticks
        .iter()
        .map(|tick| {
            let x = px(tick.at);
            view! { <line x1=x.clone() x2=x y1="0" y2=bottom.clone() /> }
        })
        .collect_view();
    let grid_y = y_ticks
        .iter()
        .map(|tick| {
            let y = px(tick.at);
            view! { <line x1="0" x2=px(PLOT_WIDTH) y1=y.clone() y2=y /> }
        })
        .collect_view();
    let labels_x = x_ticks
        .into_iter()
        .filter_map(|tick| {
            let label = tick.label?;
            let x = px(tick.at);
            Some(view! {
                <line x1=x.clone() x2=x.clone() y1=px(PLOT_HEIGHT) y2=px(PLOT_HEIGHT + 4.0) />
                <text x=x y=px(PLOT_HEIGHT + 15.0)>{label}</text>
            })
        })
        .collect_view();
    let labels_y = y_ticks
        .into_iter()
        .filter_map(|tick| {
            let label = tick.label?;
            Some(view! { <text class="fraction" x="-6" y=px(tick.at + 3.0)>{label}</text> })
        })
        .collect_view();
    let lines = runs
        .iter()
        .map(|run| {
            view! {
                <polyline
                    class=format!("cdf-line {}", run.series)
                    data-run-id=run.key.run.0.to_string()
                    data-source=run.key.source.word()
                    points=run.points.clone()
                />
            }
        })
        .collect_view();
    view! {
        <svg
            class="cdf"
            data-testid="cdf"
            width=px(SVG_WIDTH)
            height=px(SVG_HEIGHT)
            viewBox=format!("0 0 {} {}", px(SVG_WIDTH), px(SVG_HEIGHT))
            role="img"
            aria-label="latency CDF of each compared run"
        >
            <g transform=format!("translate({} {})", px(LEFT), px(TOP))>
                <g class="grid">{grid_x} {grid_y}</g>
                <g class="axis">
                    <line x1="0" x2=px(PLOT_WIDTH) y1=px(PLOT_HEIGHT) y2=px(PLOT_HEIGHT) />
                    {labels_x}
                    {labels_y}
                </g>
                <text class="axis-title" x=px(PLOT_WIDTH / 2.0) y=px(PLOT_HEIGHT + 32.0)>
                    "request latency (ms, log scale); y: fraction of the run's requests"
                </text>
                <g class="lines">{lines}</g>
            </g>
        </svg>
    }
}

/// Waits by class, one column per run: count and median.
fn class_table(runs: &[ComparedRun], classes: Vec<ClassRow>) -> impl IntoView {
    let head = runs
        .iter()
        .map(|run| {
            view! {
                <th scope="col" data-run-id=run.key.run.0.to_string() title=run.from.clone()>
                    <span class=format!("swatch {}", run.series)></span>
                    {run.name.clone()}
                </th>
            }
        })
        .collect_view();
    let keys: Vec<_> = runs.iter().map(|run| run.key).collect();
    let none = classes.is_empty().then(|| {
        let zeros = keys.iter().map(|_| view! { <td class="num">"0"</td> }).collect_view();
        view! { <tr><th scope="row">"no call waited over 10 ms"</th>{zeros}</tr> }
    });
    let rows = classes
        .into_iter()
        .map(|row| {
            let cells = row
                .cells
                .into_iter()
                .zip(&keys)
                .map(|(cell, key)| {
                    let median_ms = cell.median_ms.clone().unwrap_or_default();
                    view! {
                        <td
                            class="num"
                            class:none=cell.count == 0
                            data-run-id=key.run.0.to_string()
                            data-count=cell.count.to_string()
                            data-median-ms=median_ms
                            title=cell.title
                        >
                            <span class="count">{cell.count}</span>
                            {cell.median_ms.map(|ms| view! { <span class="median">{ms} " ms"</span> })}
                        </td>
                    }
                })
                .collect_view();
            view! {
                <tr class="class-row" class:held=row.class.is_held_read() data-class=row.class.code()>
                    <th scope="row">{row.class.name()}</th>
                    {cells}
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="compare-classes" data-testid="compare-classes">
            <thead>
                <tr>
                    <th scope="col">"waits by class (count, median)"</th>
                    {head}
                </tr>
            </thead>
            <tbody>{none} {rows}</tbody>
        </table>
    }
}

#[cfg(all(test, target_arch = "wasm32"))]
mod tests {
    use ackscope_shared::wire::{RunOutcome, ToBrowser};
    use ackscope_shared::{NoDelay, RrSpec, RunId};
    use leptos::mount::mount_to;
    use leptos::prelude::*;
    use wasm_bindgen::JsCast;
    use wasm_bindgen_test::wasm_bindgen_test;
    use web_sys::{HtmlElement, HtmlInputElement};

    use crate::app::Page;
    use crate::fixtures::dom::{all, settle};
    use crate::fixtures::{hello, nagle_run, rr_started, MS, US};
    use crate::state::{apply, AppState, RunKey};
    use crate::store::Store;
    use crate::ws::LinkStatus;

    #[wasm_bindgen_test]
    async fn marking_a_nagle_and_a_nodelay_run_compares_them() {
        let store = Store::new(AppState::default());
        store.update(|s| {
            apply(s, hello());
            apply(s, rr_started(1, RrSpec { requests: 10, ..RrSpec::default() }));
            apply(s, ToBrowser::Events { run: RunId(1), events: nagle_run(10, 44 * MS) });
            apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
            let nodelay = RrSpec {
                requests: 10,
                nodelay: NoDelay { client: true, server: false },
                ..RrSpec::default()
            };
            apply(s, rr_started(2, nodelay));
            apply(s, ToBrowser::Events { run: RunId(2), events: nagle_run(10, 30 * US) });
            apply(s, ToBrowser::RunFinished { run: RunId(2), outcome: RunOutcome::Completed });
        });
        let document = document();
        let root = document.create_element("div").expect("create a div");
        document.body().expect("a body").append_child(&root).expect("append");
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone().unchecked_into(), move || {
            view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
        });
        settle().await;
        assert!(all(&root, "[data-testid=compare]").is_empty(), "nothing marked yet");
        let selected = store.read_untracked(AppState::selected_key);

        // The Nagle run first: it is what the other is compared with.
        for id in ["1", "2"] {
            let selector =
                format!("[data-testid=run-entry][data-run-id='{id}'] [data-testid=compare-toggle]");
            let toggle = all(&root, &selector).pop().expect("a compare checkbox per run");
            toggle.unchecked_ref::<HtmlElement>().click();
            settle().await;
        }
        assert_eq!(
            store.read_untracked(AppState::compared),
            [RunKey::live(RunId(1)), RunKey::live(RunId(2))]
        );
        assert_eq!(store.read_untracked(AppState::selected_key), selected, "not selected");
        let checked = all(&root, "[data-testid=compare-toggle]")
            .into_iter()
            .filter(|toggle| toggle.unchecked_ref::<HtmlInputElement>().checked())
            .count();
        assert_eq!(checked, 2);

        assert_eq!(all(&root, "[data-testid=compare]").len(), 1);
        let changed = all(&root, "[data-testid=what-changed]");
        assert_eq!(changed.len(), 1, "one line per run after the first");
        assert_eq!(changed[0].get_attribute("data-run-id").as_deref(), Some("2"));
        let text = changed[0].text_content().unwrap_or_default();
        assert!(text.contains("TCP_NODELAY") && text.contains("off -> on"), "{text}");
        assert_eq!(text, "TCP_NODELAY: client off -> on");

        let lines = all(&root, "[data-testid=cdf] polyline");
        let ids: Vec<Option<String>> =
            lines.iter().map(|line| line.get_attribute("data-run-id")).collect();
        assert_eq!(ids, [Some("1".to_string()), Some("2".to_string())]);
        for line in &lines {
            let points = line.get_attribute("points").unwrap_or_default();
            assert_eq!(points.split(' ').count(), 11, "the start and one per request: {points}");
        }
        let cells = all(&root, "[data-testid=compare-classes] [data-class=nagle_delayed_ack] td");
        let counts: Vec<Option<String>> =
            cells.iter().map(|cell| cell.get_attribute("data-count")).collect();
        assert_eq!(counts, [Some("18".to_string()), Some("0".to_string())]);

        // Unmarking one leaves nothing to compare.
        let toggle = all(&root, "[data-run-id='2'] [data-testid=compare-toggle]").pop();
        toggle.expect("the checkbox").unchecked_ref::<HtmlElement>().click();
        settle().await;
        assert!(all(&root, "[data-testid=compare]").is_empty());
    }
}
