//! The page: what a user sees, wired to the state and the link.
//!
//! Data flow: the socket ([`crate::ws`]) decodes each message and [`crate::state::apply`]
//! applies it to the one [`AppState`] kept in a [`StoredValue`], outside the reactive graph. At
//! most once per animation frame a single version signal is bumped; every view reads the state
//! through [`Store::read`], which subscribes to that signal. A burst of thousands of events is
//! therefore one redraw, not thousands.

use std::cell::Cell;
use std::rc::Rc;

use ackscope_shared::wire::{ToBrowser, ToProbe, WireError};
use ackscope_shared::{RrSpec, RunId, Summary};
use leptos::ev::{KeyboardEvent, SubmitEvent};
use leptos::prelude::*;

use crate::form::{FieldError, FormFields};
use crate::state::{apply, AppState, Run};
use crate::timeline::render::Timeline;
use crate::ws::{probe_url_for_this_page, Link, LinkStatus};

/// The app's state and the signal that says it changed. Copy, so every closure can hold one.
#[derive(Clone, Copy)]
pub struct Store {
    state: StoredValue<AppState, LocalStorage>,
    version: RwSignal<u64>,
}

impl Store {
    pub fn new(state: AppState) -> Store {
        Store {
            state: StoredValue::new_local(state),
            version: RwSignal::new(0),
        }
    }

    /// Reads the state and re-runs the calling view when it changes.
    pub fn read<T>(&self, f: impl FnOnce(&AppState) -> T) -> T {
        self.version.track();
        self.state.with_value(f)
    }

    /// Reads the state without subscribing: for event handlers and tests.
    pub fn read_untracked<T>(&self, f: impl FnOnce(&AppState) -> T) -> T {
        self.state.with_value(f)
    }

    /// Changes the state and redraws now: for the user's own actions, which are rare.
    pub fn update(&self, f: impl FnOnce(&mut AppState)) {
        self.state.update_value(f);
        self.changed();
    }

    /// Changes the state without redrawing; the caller redraws later (see [`FrameBatch`]).
    fn update_quietly(&self, f: impl FnOnce(&mut AppState)) {
        self.state.update_value(f);
    }

    fn changed(&self) {
        self.version.update(|version| *version += 1);
    }
}

/// Coalesces redraws: however many messages arrive between two frames, the views run once.
#[derive(Clone)]
struct FrameBatch {
    store: Store,
    scheduled: Rc<Cell<bool>>,
}

impl FrameBatch {
    fn new(store: Store) -> FrameBatch {
        FrameBatch {
            store,
            scheduled: Rc::new(Cell::new(false)),
        }
    }

    fn apply(&self, message: Result<ToBrowser, WireError>) {
        self.store.update_quietly(|state| match message {
            Ok(message) => apply(state, message),
            Err(error) => state.bad_message(&error),
        });
        if self.scheduled.replace(true) {
            return;
        }
        let batch = self.clone();
        request_animation_frame(move || {
            batch.scheduled.set(false);
            batch.store.changed();
        });
    }
}

/// The app as served by the probe: connects to the page's own origin and shows what comes.
#[component]
pub fn App() -> impl IntoView {
    let store = Store::new(AppState::default());
    let link_status = RwSignal::new(LinkStatus::Connecting);
    let batch = FrameBatch::new(store);
    let link = probe_url_for_this_page().map(|url| {
        Link::open(
            url,
            move |message| batch.apply(message),
            move |status| link_status.set(status),
        )
    });
    let link = StoredValue::new_local(link);
    view! { <Page store link_status link /> }
}

/// The whole page over a given store and link (tests pass their own).
#[component]
pub fn Page(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    link: StoredValue<Option<Link>, LocalStorage>,
) -> impl IntoView {
    view! {
        <div class="app">
            <header class="top">
                <div>
                    <h1>"ackscope"</h1>
                    <p class="tagline">
                        "Where each recv() blocked, and why: bytes the kernel held back (Nagle, "
                        "delayed ACK) or a peer that had not written yet."
                    </p>
                </div>
                <ConnectionBadge store link_status />
            </header>
            <ProtocolError store />
            <main class="layout">
                <aside class="side">
                    <RunForm store link_status link />
                    <RunList store />
                </aside>
                <section class="main">
                    <SummaryPanel store />
                    <Timeline store />
                </section>
            </main>
        </div>
    }
}

#[component]
fn ConnectionBadge(store: Store, link_status: RwSignal<LinkStatus>) -> impl IntoView {
    let version = move || store.read(|state| state.probe_version.clone());
    view! {
        <div class="connection" data-testid="connection" data-state=move || link_status.get().word()>
            <span class="dot"></span>
            <span>{move || link_status.get().word()}</span>
            {move || {
                (link_status.get() == LinkStatus::Connected)
                    .then(version)
                    .flatten()
                    .map(|version| view! { <span class="probe-version">" to ackscope " {version}</span> })
            }}
        </div>
    }
}

#[component]
fn ProtocolError(store: Store) -> impl IntoView {
    move || {
        store.read(|state| state.protocol_error.clone()).map(|error| {
            view! { <p class="banner error" role="alert" data-testid="protocol-error">{error}</p> }
        })
    }
}

#[component]
fn RunForm(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    link: StoredValue<Option<Link>, LocalStorage>,
) -> impl IntoView {
    let defaults = FormFields::from_spec(&RrSpec::default());
    let requests = RwSignal::new(defaults.requests);
    let size_bytes = RwSignal::new(defaults.size_bytes);
    let reconnect_every = RwSignal::new(defaults.reconnect_every);
    let nodelay_client = RwSignal::new(defaults.nodelay_client);
    let nodelay_server = RwSignal::new(defaults.nodelay_server);
    let error = RwSignal::new(None::<FieldError>);

    // Why Run cannot be pressed right now, if it cannot.
    let blocked = move || -> Option<&'static str> {
        if link_status.get() != LinkStatus::Connected {
            return Some("waiting for the probe");
        }
        store.read(|state| {
            if state.protocol_error.is_some() || !state.is_greeted() {
                Some("the probe's stream cannot be read")
            } else if state.is_running() {
                Some("a run is in progress")
            } else if state.start_pending {
                Some("starting…")
            } else {
                None
            }
        })
    };

    let submit = move |event: SubmitEvent| {
        event.prevent_default();
        let fields = FormFields {
            requests: requests.get_untracked(),
            size_bytes: size_bytes.get_untracked(),
            reconnect_every: reconnect_every.get_untracked(),
            nodelay_client: nodelay_client.get_untracked(),
            nodelay_server: nodelay_server.get_untracked(),
        };
        let spec = match fields.to_spec() {
            Ok(spec) => spec,
            Err(invalid) => {
                error.set(Some(invalid));
                return;
            }
        };
        error.set(None);
        store.update(AppState::start_requested);
        let sent = link.with_value(|link| match link {
            Some(link) => link.send(&ToProbe::StartRun { spec }),
            None => Err("no probe to talk to: open this page from the URL ackscope prints".into()),
        });
        if let Err(reason) = sent {
            store.update(AppState::start_failed);
            error.set(Some(FieldError {
                field: None,
                message: reason,
            }));
        }
    };

    let invalid = move |field: &'static str| {
        move || {
            error
                .with(|e| e.as_ref().is_some_and(|e| e.field == Some(field)))
                .to_string()
        }
    };

    view! {
        <form class="card run-form" on:submit=submit novalidate=true>
            <h2>"New run"</h2>
            <p class="hint">"Story 1: a 4-byte length, then the body, each way."</p>
            <label>
                <span>"requests"</span>
                <input
                    type="number"
                    min="1"
                    inputmode="numeric"
                    data-testid="requests"
                    aria-invalid=invalid("requests")
                    prop:value=move || requests.get()
                    on:input=move |ev| requests.set(event_target_value(&ev))
                />
            </label>
            <label>
                <span>"body size (bytes)"</span>
                <input
                    type="number"
                    min="1"
                    inputmode="numeric"
                    data-testid="size"
                    aria-invalid=invalid("size_bytes")
                    prop:value=move || size_bytes.get()
                    on:input=move |ev| size_bytes.set(event_target_value(&ev))
                />
            </label>
            <label>
                <span>"reconnect every"</span>
                <input
                    type="number"
                    min="0"
                    inputmode="numeric"
                    data-testid="reconnect-every"
                    aria-invalid=invalid("reconnect_every")
                    prop:value=move || reconnect_every.get()
                    on:input=move |ev| reconnect_every.set(event_target_value(&ev))
                />
                <small>"requests (0 = keep-alive)"</small>
            </label>
            <label class="check">
                <input
                    type="checkbox"
                    data-testid="nodelay-client"
                    prop:checked=move || nodelay_client.get()
                    on:change=move |ev| nodelay_client.set(event_target_checked(&ev))
                />
                <span>"TCP_NODELAY on the client"</span>
            </label>
            <label class="check">
                <input
                    type="checkbox"
                    data-testid="nodelay-server"
                    prop:checked=move || nodelay_server.get()
                    on:change=move |ev| nodelay_server.set(event_target_checked(&ev))
                />
                <span>"TCP_NODELAY on the server"</span>
            </label>
            <div class="actions">
                <button type="submit" data-testid="run" disabled=move || blocked().is_some()>
                    "Run"
                </button>
                <span class="why">{blocked}</span>
            </div>
            {move || {
                error
                    .get()
                    .map(|e| {
                        view! {
                            <p
                                class="error"
                                role="alert"
                                data-testid="form-error"
                                data-field=e.field.unwrap_or("")
                            >
                                {e.message}
                            </p>
                        }
                    })
            }}
            {move || {
                store
                    .read(|state| state.rejected.clone())
                    .map(|reason| {
                        view! {
                            <p class="error" role="alert" data-testid="rejected">
                                "The probe refused: "
                                {reason}
                            </p>
                        }
                    })
            }}
        </form>
    }
}

/// One line of the run list, everything it shows (and its key: any change re-creates it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RunEntry {
    id: u32,
    describe: String,
    status_word: &'static str,
    status: String,
    p50: String,
    selected: bool,
}

impl RunEntry {
    fn of(run: &Run, selected: bool) -> RunEntry {
        let summary = run.summary();
        RunEntry {
            id: run.id.0,
            describe: run.spec.describe(),
            status_word: run.status.word(),
            status: run.status.label(),
            p50: if summary.requests == 0 {
                "–".into()
            } else {
                format!("{:.2} ms", summary.p50_ms)
            },
            selected,
        }
    }
}

#[component]
fn RunList(store: Store) -> impl IntoView {
    // Newest first: the run just started is where the eye is.
    let entries = move || {
        store.read(|state| {
            let selected = state.selected_id();
            state
                .runs()
                .iter()
                .rev()
                .map(|run| RunEntry::of(run, Some(run.id) == selected))
                .collect::<Vec<_>>()
        })
    };
    let select = move |id: u32| store.update(|state| state.select(RunId(id)));
    view! {
        <section class="card runs">
            <h2>"Runs"</h2>
            <Show
                when=move || store.read(|state| !state.runs().is_empty())
                fallback=|| view! { <p class="hint">"No runs yet: press Run."</p> }
            >
                <ul class="run-list" role="listbox" aria-label="runs">
                    <For each=entries key=|entry| entry.clone() let(entry)>
                        <li
                            class="run"
                            class:selected=entry.selected
                            role="option"
                            tabindex="0"
                            data-testid="run-entry"
                            data-run-id=entry.id.to_string()
                            aria-selected=entry.selected.to_string()
                            on:click=move |_| select(entry.id)
                            on:keydown=move |ev: KeyboardEvent| {
                                if ev.key() == "Enter" || ev.key() == " " {
                                    ev.prevent_default();
                                    select(entry.id);
                                }
                            }
                        >
                            <div class="run-head">
                                <span class="run-id">"#" {entry.id}</span>
                                <span class="status" data-status=entry.status_word>
                                    {entry.status.clone()}
                                </span>
                            </div>
                            <div class="run-spec">{entry.describe.clone()}</div>
                            <div class="run-p50">"p50 " <span class="num">{entry.p50.clone()}</span></div>
                        </li>
                    </For>
                </ul>
            </Show>
        </section>
    }
}

/// The summary's numbers as the page prints them.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryText {
    pub requests: String,
    pub rps: String,
    pub p50_ms: String,
    pub p99_ms: String,
    pub max_ms: String,
    pub stalled_reads: String,
    /// Red only when there is something to see.
    pub any_stalls: bool,
}

impl SummaryText {
    pub fn of(summary: &Summary) -> SummaryText {
        SummaryText {
            requests: summary.requests.to_string(),
            rps: format!("{:.1}", summary.rps),
            p50_ms: format!("{:.2}", summary.p50_ms),
            p99_ms: format!("{:.2}", summary.p99_ms),
            max_ms: format!("{:.2}", summary.max_ms),
            stalled_reads: summary.stalled_reads.to_string(),
            any_stalls: summary.stalled_reads > 0,
        }
    }
}

#[component]
fn SummaryPanel(store: Store) -> impl IntoView {
    let selected = move || {
        store.read(|state| {
            state.selected().map(|run| {
                (
                    run.id.0,
                    run.spec.describe(),
                    run.status.label(),
                    SummaryText::of(run.summary()),
                )
            })
        })
    };
    move || {
        match selected() {
        None => view! {
            <section class="card summary empty">
                <p class="hint">
                    "Choose the knobs and press Run: each request becomes a row below, with every "
                    "read that the kernel held for more than 10 ms drawn in red."
                </p>
            </section>
        }
        .into_any(),
        Some((id, describe, status, text)) => view! {
            <section class="card summary" aria-label="summary">
                <h2>
                    "Run #" {id} <span class="describe">{describe}</span>
                    <span class="status">{status}</span>
                </h2>
                <dl>
                    <div><dt>"requests"</dt><dd class="num" data-testid="summary-requests">{text.requests}</dd></div>
                    <div><dt>"requests/s"</dt><dd class="num" data-testid="summary-rps">{text.rps}</dd></div>
                    <div><dt>"p50 (ms)"</dt><dd class="num" data-testid="summary-p50-ms">{text.p50_ms}</dd></div>
                    <div><dt>"p99 (ms)"</dt><dd class="num" data-testid="summary-p99-ms">{text.p99_ms}</dd></div>
                    <div><dt>"max (ms)"</dt><dd class="num" data-testid="summary-max-ms">{text.max_ms}</dd></div>
                    <div>
                        <dt>"stalled reads"</dt>
                        <dd class="num" class:stalls=text.any_stalls data-testid="summary-stalled-reads">
                            {text.stalled_reads}
                        </dd>
                    </div>
                </dl>
            </section>
        }
        .into_any(),
    }
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::wire::RunOutcome;
    use ackscope_shared::NoDelay;
    use leptos::mount::mount_to;
    use wasm_bindgen::JsCast;
    use wasm_bindgen_test::wasm_bindgen_test;
    use web_sys::{Element, HtmlElement, HtmlInputElement};

    use super::*;
    use crate::fixtures::{hello, nagle_run, US};

    /// A fresh element in the body for one test's view.
    fn container() -> HtmlElement {
        let document = document();
        let element = document.create_element("div").expect("create a div");
        document
            .body()
            .expect("a body")
            .append_child(&element)
            .expect("append");
        element.unchecked_into()
    }

    fn all(root: &Element, selector: &str) -> Vec<Element> {
        let list = root.query_selector_all(selector).expect("a valid selector");
        (0..list.length())
            .filter_map(|i| list.item(i)?.dyn_into().ok())
            .collect()
    }

    fn one(root: &Element, selector: &str) -> Element {
        root.query_selector(selector)
            .expect("a valid selector")
            .unwrap_or_else(|| {
                panic!("no {selector} in {}", root.inner_html());
            })
    }

    fn text(root: &Element, selector: &str) -> String {
        one(root, selector).text_content().unwrap_or_default()
    }

    /// Lets Leptos run the effects a signal change queued.
    async fn settle() {
        for _ in 0..3 {
            leptos::task::tick().await;
        }
    }

    #[wasm_bindgen_test]
    async fn the_real_app_mounts_with_its_form_and_run_button() {
        let body = document().body().expect("a body");
        let mounted = mount_to(body.clone(), App);
        settle().await;
        let root: &Element = &body;
        assert_eq!(text(root, "h1"), "ackscope");
        let run = one(root, "button[data-testid=run]");
        assert_eq!(run.text_content().as_deref().map(str::trim), Some("Run"));
        // No probe behind the test server: Run waits for one.
        assert!(run.has_attribute("disabled"));
        let link = one(root, "[data-testid=connection]").get_attribute("data-state");
        assert!(
            matches!(link.as_deref(), Some("connecting" | "reconnecting")),
            "{link:?}"
        );
        let value = |id: &str| {
            one(root, &format!("input[data-testid={id}]")).unchecked_into::<HtmlInputElement>()
        };
        assert_eq!(value("requests").value(), "200");
        assert_eq!(value("size").value(), "2048");
        assert_eq!(value("reconnect-every").value(), "0");
        assert!(!value("nodelay-client").checked());
        assert!(!value("nodelay-server").checked());
        drop(mounted);
        assert!(
            body.query_selector("[data-testid=run]")
                .ok()
                .flatten()
                .is_none(),
            "unmounted"
        );
    }

    #[wasm_bindgen_test]
    async fn a_run_streams_into_rows_stall_labels_and_the_summary() {
        let store = Store::new(AppState::default());
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status link=StoredValue::new_local(None) /> }
        });
        let root: &Element = &root;
        store.update(|s| {
            apply(s, hello());
            apply(
                s,
                ToBrowser::RunStarted {
                    run: RunId(1),
                    spec: RrSpec {
                        requests: 3,
                        ..RrSpec::default()
                    },
                },
            );
        });
        settle().await;
        assert_eq!(all(root, "[data-testid=run-entry]").len(), 1);
        assert!(
            one(root, "button[data-testid=run]").has_attribute("disabled"),
            "a run is going"
        );

        // Half the run: the rows of requests begun so far appear before the run ends.
        let events = nagle_run(3, 43_700 * US);
        let (first, rest) = events.split_at(20);
        store.update(|s| {
            apply(
                s,
                ToBrowser::Events {
                    run: RunId(1),
                    events: first.to_vec(),
                },
            )
        });
        settle().await;
        let reqs: Vec<String> = all(root, "[data-testid=request-row]")
            .iter()
            .filter_map(|row| row.get_attribute("data-req"))
            .collect();
        assert_eq!(reqs, ["0", "1"]);
        assert_eq!(text(root, "[data-testid=summary-requests]"), "1");

        store.update(|s| {
            apply(
                s,
                ToBrowser::Events {
                    run: RunId(1),
                    events: rest.to_vec(),
                },
            );
            apply(
                s,
                ToBrowser::RunFinished {
                    run: RunId(1),
                    outcome: RunOutcome::Completed,
                },
            );
        });
        settle().await;
        assert_eq!(all(root, "[data-testid=request-row]").len(), 3);
        let labels = all(root, "[data-testid=stall-label]");
        assert_eq!(labels.len(), 4, "two per request after the first");
        for label in &labels {
            assert_eq!(
                label.get_attribute("data-stall-ms").as_deref(),
                Some("43.7")
            );
            assert_eq!(label.text_content().as_deref(), Some("43.7 ms"));
        }
        assert_eq!(
            all(root, "[data-req='0'] [data-testid=stall-label]").len(),
            0
        );
        assert_eq!(all(root, "rect.stalled").len(), 4);
        assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
        assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "4");
        assert_eq!(text(root, "[data-testid=summary-max-ms]"), "87.43");
        let rps = text(root, "[data-testid=summary-rps]");
        assert!(
            rps.parse::<f64>().is_ok() && rps.split('.').nth(1).map(str::len) == Some(1),
            "{rps}"
        );
        let entry = one(root, "[data-testid=run-entry]");
        assert!(entry.text_content().unwrap_or_default().contains("done"));
        assert!(!one(root, "button[data-testid=run]").has_attribute("disabled"));

        // A second run with TCP_NODELAY on both sides: selected, and no stall anywhere.
        let nodelay = RrSpec {
            requests: 3,
            nodelay: NoDelay {
                client: true,
                server: true,
            },
            ..RrSpec::default()
        };
        store.update(|s| {
            apply(
                s,
                ToBrowser::RunStarted {
                    run: RunId(2),
                    spec: nodelay,
                },
            );
            apply(
                s,
                ToBrowser::Events {
                    run: RunId(2),
                    events: nagle_run(3, 30 * US),
                },
            );
        });
        settle().await;
        let selected: Vec<Option<String>> = all(root, "[data-testid=run-entry]")
            .iter()
            .map(|e| {
                e.get_attribute("aria-selected")
                    .filter(|s| s == "true")
                    .and(e.get_attribute("data-run-id"))
            })
            .collect();
        assert_eq!(
            selected,
            [Some("2".to_string()), None],
            "newest first, newest selected"
        );
        assert_eq!(all(root, "[data-testid=stall-label]").len(), 0);
        assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "0");

        // Back to the Nagle run by clicking it.
        let first_run = one(root, "[data-testid=run-entry][data-run-id='1']");
        first_run.unchecked_ref::<HtmlElement>().click();
        settle().await;
        let first_run = one(root, "[data-testid=run-entry][data-run-id='1']");
        assert_eq!(
            first_run.get_attribute("aria-selected").as_deref(),
            Some("true")
        );
        assert_eq!(all(root, "[data-testid=stall-label]").len(), 4);
        assert!(text(root, "[data-testid=summary-p50-ms]").starts_with("87."));
    }

    #[wasm_bindgen_test]
    async fn a_long_run_draws_the_first_thousand_rows_and_says_so() {
        let store = Store::new(AppState::default());
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status link=StoredValue::new_local(None) /> }
        });
        let spec = RrSpec {
            requests: 1005,
            ..RrSpec::default()
        };
        store.update(|s| {
            apply(s, hello());
            apply(
                s,
                ToBrowser::RunStarted {
                    run: RunId(1),
                    spec,
                },
            );
            apply(
                s,
                ToBrowser::Events {
                    run: RunId(1),
                    events: nagle_run(1005, 30 * US),
                },
            );
        });
        settle().await;
        let root: &Element = &root;
        assert_eq!(all(root, "[data-testid=request-row]").len(), 1000);
        assert_eq!(
            text(root, "[data-testid=row-cap-note]"),
            "showing 1000 of 1005 requests"
        );
        assert_eq!(text(root, "[data-testid=summary-requests]"), "1005");
    }

    #[wasm_bindgen_test]
    async fn the_form_names_a_bad_field_and_shows_a_refusal() {
        let store = Store::new(AppState::default());
        store.update(|s| apply(s, hello()));
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status link=StoredValue::new_local(None) /> }
        });
        let root: &Element = &root;
        let size = one(root, "input[data-testid=size]").unchecked_into::<HtmlInputElement>();
        size.set_value("0");
        let input = web_sys::Event::new("input").expect("an input event");
        size.dispatch_event(&input).expect("dispatch");
        one(root, "button[data-testid=run]")
            .unchecked_into::<HtmlElement>()
            .click();
        settle().await;
        let error = one(root, "[data-testid=form-error]");
        assert_eq!(
            error.get_attribute("data-field").as_deref(),
            Some("size_bytes")
        );
        assert!(error
            .text_content()
            .unwrap_or_default()
            .starts_with("body size (bytes): must be between 1"));
        assert_eq!(size.get_attribute("aria-invalid").as_deref(), Some("true"));
        assert!(
            !store.read_untracked(|s| s.start_pending),
            "nothing was sent"
        );

        store.update(|s| {
            apply(
                s,
                ToBrowser::Rejected {
                    reason: "a run is already in progress".into(),
                },
            )
        });
        settle().await;
        assert_eq!(
            text(root, "[data-testid=rejected]"),
            "The probe refused: a run is already in progress"
        );
    }

    #[wasm_bindgen_test]
    async fn a_probe_of_another_version_is_named() {
        let store = Store::new(AppState::default());
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status link=StoredValue::new_local(None) /> }
        });
        let newer = ackscope_shared::wire::Hello {
            protocol_version: 99,
            ackscope_version: "9.9.9".into(),
        };
        store.update(|s| apply(s, ToBrowser::Hello(newer)));
        settle().await;
        let root: &Element = &root;
        assert!(text(root, "[data-testid=protocol-error]").contains("version 99"));
        assert!(one(root, "button[data-testid=run]").has_attribute("disabled"));
    }

    #[wasm_bindgen_test]
    fn summary_numbers_have_fixed_decimals() {
        let summary = Summary {
            requests: 200,
            duration_s: 17.5,
            rps: 11.428_571,
            p50_ms: 88.123_4,
            p99_ms: 90.0,
            max_ms: 91.005,
            stalled_reads: 398,
        };
        let text = SummaryText::of(&summary);
        assert_eq!(
            [
                text.requests,
                text.rps,
                text.p50_ms,
                text.p99_ms,
                text.stalled_reads
            ],
            ["200", "11.4", "88.12", "90.00", "398"].map(String::from)
        );
    }
}
