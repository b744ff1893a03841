//! The page: what a user sees, wired to the state and the link.
//!
//! Data flow: the socket ([`crate::ws`]) decodes each message and [`crate::state::apply`]
//! applies it to the one [`AppState`] kept in a [`StoredValue`], outside the reactive graph. At
//! most once per animation frame a single version signal is bumped; every view reads the state
//! through [`Store::read`], which subscribes to that signal. A burst of thousands of events is
//! therefore one redraw, not thousands. Opened session files ([`crate::files`]) change the same
//! state through [`Store::update`].

use std::cell::Cell;
use std::rc::Rc;

use ackscope_shared::attribution::ClassSummary;
use ackscope_shared::bulk::BulkSummary;
use ackscope_shared::presets::{Preset, PRESETS};
use ackscope_shared::wire::{HostFacts, Instruments, ToBrowser, ToProbe, WireError};
use ackscope_shared::{PerSide, RrSpec, Scenario, Summary, WritePattern};
use leptos::ev::{DragEvent, Event, KeyboardEvent, SubmitEvent};
use leptos::prelude::*;
use web_sys::{FileList, HtmlInputElement};

use crate::files::{blob_of, open_blob, open_url, save, url_parameter};
use crate::form::{write_pattern, FieldError, FormFields};
use crate::session_file::DOWNLOAD_NAME;
use crate::state::{apply, AppState, FileId, Run, RunKey, Source};
use crate::timeline::layout::class_word;
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
        Store { state: StoredValue::new_local(state), version: RwSignal::new(0) }
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

    /// As [`Store::update`], for work that finishes later (a file read): by then the page may be
    /// gone, and then there is nothing to change.
    pub fn try_update(&self, f: impl FnOnce(&mut AppState)) {
        if self.state.try_update_value(f).is_some() {
            self.version.try_update(|version| *version += 1);
        }
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
        FrameBatch { store, scheduled: Rc::new(Cell::new(false)) }
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

/// Where the page's requests to the probe go: the probe's [`Link`] in the app; tests pass one
/// that keeps what was sent. `Err` says why it was not sent.
pub type Outbox = Rc<dyn Fn(&ToProbe) -> Result<(), String>>;

/// The app as served by the probe: connects to the page's own origin and shows what comes, and
/// opens the session file named by `?url=`, if any.
#[component]
pub fn App() -> impl IntoView {
    let store = Store::new(AppState::default());
    let link_status = RwSignal::new(LinkStatus::Connecting);
    let batch = FrameBatch::new(store);
    let outbox = probe_url_for_this_page().map(|url| {
        let link = Link::open(
            url,
            move |message| batch.apply(message),
            move |status| link_status.set(status),
        );
        // The outbox holds the link, and with it the socket, for as long as the page lives.
        Rc::new(move |message: &ToProbe| link.send(message)) as Outbox
    });
    let outbox = StoredValue::new_local(outbox);
    if let Some(url) = url_parameter() {
        open_url(store, url);
    }
    view! { <Page store link_status outbox /> }
}

/// Opens every file of a picker's or a drop's list.
fn open_files(store: Store, files: &FileList) {
    for file in (0..files.length()).filter_map(|i| files.get(i)) {
        open_blob(store, file.name(), file.into());
    }
}

/// The whole page over a given store and outbox (tests pass their own). A session file dropped
/// anywhere on it is opened.
#[component]
pub fn Page(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    outbox: StoredValue<Option<Outbox>, LocalStorage>,
) -> impl IntoView {
    let dragging = RwSignal::new(false);
    let drag_over = move |ev: DragEvent| {
        // Without this the browser would open the file itself instead of letting us drop it.
        ev.prevent_default();
        dragging.set(true);
    };
    let drop = move |ev: DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        if let Some(files) = ev.data_transfer().and_then(|data| data.files()) {
            open_files(store, &files);
        }
    };
    view! {
        <div
            class="app"
            class:dragging=move || dragging.get()
            on:dragover=drag_over
            on:dragleave=move |_| dragging.set(false)
            on:drop=drop
        >
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
                    <RunForm store link_status outbox />
                    <RunList store />
                    <OpenedFiles store />
                </aside>
                <section class="main">
                    <SummaryPanel store />
                    <NoTimeline store />
                    <Timeline store />
                </section>
            </main>
        </div>
    }
}

#[component]
fn ConnectionBadge(store: Store, link_status: RwSignal<LinkStatus>) -> impl IntoView {
    let version = move || store.read(|state| state.probe_version().map(str::to_string));
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
        store.read(|state| state.live.error.clone()).map(|error| {
            view! { <p class="banner error" role="alert" data-testid="protocol-error">{error}</p> }
        })
    }
}

/// The form's inputs, one signal each: typing in one field re-renders only that field.
#[derive(Clone, Copy)]
struct FormSignals {
    requests: RwSignal<String>,
    size_bytes: RwSignal<String>,
    response_bytes: RwSignal<String>,
    reconnect_every: RwSignal<String>,
    think_us: RwSignal<String>,
    write: PerSide<RwSignal<WritePattern>>,
    nodelay: PerSide<RwSignal<bool>>,
    cork: PerSide<RwSignal<bool>>,
    quickack: PerSide<RwSignal<bool>>,
    link: RwSignal<String>,
}

fn per_side<T: Copy + Send + Sync + 'static>(values: PerSide<T>) -> PerSide<RwSignal<T>> {
    PerSide { client: RwSignal::new(values.client), server: RwSignal::new(values.server) }
}

fn set_per_side<T: Send + Sync + 'static>(signals: PerSide<RwSignal<T>>, values: PerSide<T>) {
    signals.client.set(values.client);
    signals.server.set(values.server);
}

fn per_side_untracked<T: Clone + Send + Sync + 'static>(
    signals: PerSide<RwSignal<T>>,
) -> PerSide<T> {
    PerSide { client: signals.client.get_untracked(), server: signals.server.get_untracked() }
}

impl FormSignals {
    fn new(fields: FormFields) -> FormSignals {
        FormSignals {
            requests: RwSignal::new(fields.requests),
            size_bytes: RwSignal::new(fields.size_bytes),
            response_bytes: RwSignal::new(fields.response_bytes),
            reconnect_every: RwSignal::new(fields.reconnect_every),
            think_us: RwSignal::new(fields.think_us),
            write: per_side(fields.write),
            nodelay: per_side(fields.nodelay),
            cork: per_side(fields.cork),
            quickack: per_side(fields.quickack),
            link: RwSignal::new(fields.link),
        }
    }

    /// Fills every field from `fields` (a preset's).
    fn set(&self, fields: FormFields) {
        self.requests.set(fields.requests);
        self.size_bytes.set(fields.size_bytes);
        self.response_bytes.set(fields.response_bytes);
        self.reconnect_every.set(fields.reconnect_every);
        self.think_us.set(fields.think_us);
        set_per_side(self.write, fields.write);
        set_per_side(self.nodelay, fields.nodelay);
        set_per_side(self.cork, fields.cork);
        set_per_side(self.quickack, fields.quickack);
        self.link.set(fields.link);
    }

    /// The fields as typed, re-running the caller when any of them changes.
    fn tracked_fields(&self) -> FormFields {
        self.track();
        self.fields()
    }

    fn track(&self) {
        let texts = [
            self.requests,
            self.size_bytes,
            self.response_bytes,
            self.reconnect_every,
            self.think_us,
            self.link,
        ];
        texts.iter().for_each(Track::track);
        [self.write.client, self.write.server].iter().for_each(Track::track);
        for flags in [self.nodelay, self.cork, self.quickack] {
            flags.client.track();
            flags.server.track();
        }
    }

    fn fields(&self) -> FormFields {
        FormFields {
            requests: self.requests.get_untracked(),
            size_bytes: self.size_bytes.get_untracked(),
            response_bytes: self.response_bytes.get_untracked(),
            reconnect_every: self.reconnect_every.get_untracked(),
            think_us: self.think_us.get_untracked(),
            write: per_side_untracked(self.write),
            nodelay: per_side_untracked(self.nodelay),
            cork: per_side_untracked(self.cork),
            quickack: per_side_untracked(self.quickack),
            link: self.link.get_untracked(),
        }
    }
}

/// Whether the last error names `field` (the spec's name), as an `aria-invalid` value.
type Invalid = Callback<&'static str, String>;

fn number_field(
    label: &'static str,
    testid: &'static str,
    field: &'static str,
    value: RwSignal<String>,
    invalid: Invalid,
    placeholder: &'static str,
) -> impl IntoView {
    view! {
        <label>
            <span>{label}</span>
            <input
                type="number"
                min="0"
                inputmode="numeric"
                placeholder=placeholder
                data-testid=testid
                aria-invalid=move || invalid.run(field)
                prop:value=move || value.get()
                on:input=move |ev| value.set(event_target_value(&ev))
            />
        </label>
    }
}

fn side_checkbox(
    testid: &'static str,
    field: &'static str,
    label: String,
    checked: RwSignal<bool>,
    invalid: Invalid,
) -> impl IntoView {
    view! {
        <td>
            <input
                type="checkbox"
                data-testid=testid
                aria-label=label
                aria-invalid=move || invalid.run(field)
                prop:checked=move || checked.get()
                on:change=move |ev| checked.set(event_target_checked(&ev))
            />
        </td>
    }
}

fn write_select(
    side: &'static str,
    field: &'static str,
    pattern: RwSignal<WritePattern>,
    invalid: Invalid,
) -> impl IntoView {
    let options = [
        (WritePattern::Split, "split: length, then body"),
        (WritePattern::Single, "single: one write() of both"),
        (WritePattern::Writev, "writev: one writev() of both"),
    ];
    view! {
        <td>
            <select
                data-testid=format!("write-{side}")
                aria-label=format!("how the {side} writes a message")
                aria-invalid=move || invalid.run(field)
                prop:value=move || pattern.get().name()
                on:change=move |ev| pattern.set(write_pattern(&event_target_value(&ev)))
            >
                {options
                    .into_iter()
                    .map(|(option, title)| {
                        view! {
                            <option value=option.name() title=title selected=pattern.get_untracked() == option>
                                {option.name()}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
        </td>
    }
}

/// A row of the per-side table: one socket option, a checkbox per side.
fn option_row(
    name: &'static str,
    testids: [&'static str; 2],
    fields: [&'static str; 2],
    flags: PerSide<RwSignal<bool>>,
    invalid: Invalid,
) -> impl IntoView {
    view! {
        <tr>
            <th scope="row">{name}</th>
            {side_checkbox(testids[0], fields[0], format!("{name} on the client"), flags.client, invalid)}
            {side_checkbox(testids[1], fields[1], format!("{name} on the server"), flags.server, invalid)}
        </tr>
    }
}

/// The preset the form shows: the bulk preset chosen, else the request/response preset whose
/// spec the fields spell exactly (any edit makes the form "custom" again).
fn shown_preset(form: &FormFields, bulk: Option<&'static Preset>) -> Option<&'static Preset> {
    if bulk.is_some() {
        return bulk;
    }
    let scenario = form.to_scenario().ok()?;
    PRESETS.iter().find(|preset| (preset.build)() == scenario)
}

/// The `data-testid=preset` select and its preset's `about` line. Choosing a request/response
/// preset fills every field from its spec, requests included; choosing a bulk one sets the
/// fields aside and Run sends the preset as it is.
fn preset_picker(
    form: FormSignals,
    bulk: RwSignal<Option<&'static Preset>>,
    error: RwSignal<Option<FieldError>>,
) -> impl IntoView {
    let shown = move || shown_preset(&form.tracked_fields(), bulk.get());
    let choose = move |ev: Event| {
        let name = event_target_value(&ev);
        let preset = PRESETS.iter().find(|preset| preset.name == name);
        match preset.map(|preset| (preset, (preset.build)())) {
            Some((_, Scenario::Rr(spec))) => {
                bulk.set(None);
                form.set(FormFields::from_spec(&spec));
            }
            Some((preset, _)) => bulk.set(Some(preset)),
            None => bulk.set(None),
        }
        error.set(None);
        // "custom" while the fields still spell a preset is that preset: say so.
        let select: web_sys::HtmlSelectElement = event_target(&ev);
        select.set_value(shown_preset(&form.fields(), bulk.get_untracked()).map_or("", |p| p.name));
    };
    let option = |preset: &'static Preset| {
        view! {
            <option value=preset.name title=preset.about>
                {preset.name}
            </option>
        }
    };
    let is_rr = |preset: &&'static Preset| matches!((preset.build)(), Scenario::Rr(_));
    let about = move || match shown() {
        Some(preset) if bulk.get().is_some() => format!(
            "{}. Run starts it as it is; to change a bulk run use the command line: ackscope \
             run {} --print-spec > spec.json, edit it, then ackscope run --spec spec.json.",
            preset.about, preset.name
        ),
        Some(preset) => preset.about.to_string(),
        None => "your own settings; a preset sets every field, requests included".to_string(),
    };
    view! {
        <label class="preset">
            <span>"preset"</span>
            <select
                data-testid="preset"
                aria-describedby="preset-about"
                prop:value=move || shown().map_or("", |preset| preset.name)
                on:change=choose
            >
                <option value="">"custom"</option>
                <optgroup label="request/response">
                    {PRESETS.iter().filter(is_rr).map(option).collect_view()}
                </optgroup>
                <optgroup label="bulk">
                    {PRESETS.iter().filter(|p| !is_rr(p)).map(option).collect_view()}
                </optgroup>
            </select>
        </label>
        <p class="hint preset-about" id="preset-about" data-testid="preset-about">{about}</p>
    }
}

#[component]
fn RunForm(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    outbox: StoredValue<Option<Outbox>, LocalStorage>,
) -> impl IntoView {
    let form = FormSignals::new(FormFields::from_spec(&RrSpec::default()));
    let error = RwSignal::new(None::<FieldError>);
    // A bulk preset the user chose: Run sends it as it is, and the rr fields step aside.
    let bulk = RwSignal::new(None::<&'static Preset>);

    // Why Run cannot be pressed right now, if it cannot.
    let blocked = move || -> Option<&'static str> {
        if link_status.get() != LinkStatus::Connected {
            return Some("waiting for the probe");
        }
        store.read(|state| {
            if state.live.error.is_some() || !state.is_greeted() {
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
        let chosen = bulk.get_untracked().map(|preset| (preset.build)());
        let spec = match chosen.map_or_else(|| form.fields().to_scenario(), Ok) {
            Ok(spec) => spec,
            Err(invalid) => {
                error.set(Some(invalid));
                return;
            }
        };
        error.set(None);
        store.update(AppState::start_requested);
        let sent = outbox.with_value(|outbox| match outbox {
            Some(send) => send(&ToProbe::StartRun { spec }),
            None => Err("no probe to talk to: open this page from the URL ackscope prints".into()),
        });
        if let Err(reason) = sent {
            store.update(AppState::start_failed);
            error.set(Some(FieldError { field: None, message: reason }));
        }
    };

    let invalid = Callback::new(move |field: &'static str| {
        error.with(|e| e.as_ref().is_some_and(|e| e.field == Some(field))).to_string()
    });

    view! {
        <form class="card run-form" on:submit=submit novalidate=true>
            <h2>"New run"</h2>
            <p class="hint">"Story 1: a 4-byte length, then the body, each way."</p>
            {preset_picker(form, bulk, error)}
            <div class="rr-fields" prop:hidden=move || bulk.get().is_some()>
            {number_field("requests", "requests", "requests", form.requests, invalid, "")}
            {number_field("body size (bytes)", "size", "size_bytes", form.size_bytes, invalid, "")}
            {number_field(
                "response size (bytes)",
                "response-size",
                "response_bytes",
                form.response_bytes,
                invalid,
                "= request",
            )}
            <label>
                <span>"reconnect every"</span>
                <input
                    type="number"
                    min="0"
                    inputmode="numeric"
                    data-testid="reconnect-every"
                    aria-invalid=move || invalid.run("reconnect_every")
                    prop:value=move || form.reconnect_every.get()
                    on:input=move |ev| form.reconnect_every.set(event_target_value(&ev))
                />
                <small>"requests (0 = keep-alive)"</small>
            </label>
            {number_field("server think time (µs)", "think-us", "think_us", form.think_us, invalid, "")}
            <label>
                <span>"emulated link"</span>
                <input
                    type="text"
                    spellcheck="false"
                    placeholder="loopback"
                    data-testid="link"
                    aria-invalid=move || invalid.run("link")
                    prop:value=move || form.link.get()
                    on:input=move |ev| form.link.set(event_target_value(&ev))
                />
                <small>"e.g. rtt=40ms,rate=100mbit (docs/LINK.md)"</small>
            </label>
            <table class="per-side">
                <thead>
                    <tr>
                        <td></td>
                        <th scope="col">"client"</th>
                        <th scope="col">"server"</th>
                    </tr>
                </thead>
                <tbody>
                    <tr>
                        <th scope="row">"write()"</th>
                        {write_select("client", "write.client", form.write.client, invalid)}
                        {write_select("server", "write.server", form.write.server, invalid)}
                    </tr>
                    {option_row(
                        "TCP_NODELAY",
                        ["nodelay-client", "nodelay-server"],
                        ["nodelay.client", "nodelay.server"],
                        form.nodelay,
                        invalid,
                    )}
                    {option_row(
                        "TCP_CORK",
                        ["cork-client", "cork-server"],
                        ["cork.client", "cork.server"],
                        form.cork,
                        invalid,
                    )}
                    {option_row(
                        "TCP_QUICKACK",
                        ["quickack-client", "quickack-server"],
                        ["quickack.client", "quickack.server"],
                        form.quickack,
                        invalid,
                    )}
                </tbody>
            </table>
            </div>
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

/// One line of a run list, everything it shows (and its key: any change re-creates it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RunEntry {
    key: RunKey,
    describe: String,
    status_word: &'static str,
    status: String,
    /// "p50 1.23 ms" for request/response runs, bytes moved for bulk runs.
    figure: String,
    selected: bool,
}

impl RunEntry {
    fn of(source: Source, run: &Run, selected: Option<RunKey>) -> RunEntry {
        let key = RunKey { source, run: run.id };
        let figure = if let Some(bulk) = run.bulk_summary() {
            format!("{:.1} Mbit/s", bulk.goodput_mbps)
        } else if !run.is_rr() {
            format!("{} events", run.events)
        } else if run.summary().requests == 0 {
            "p50 –".into()
        } else {
            format!("p50 {:.2} ms", run.summary().p50_ms)
        };
        RunEntry {
            key,
            describe: run.spec.describe(),
            status_word: run.status.word(),
            status: run.status.label(),
            figure,
            selected: selected == Some(key),
        }
    }

    /// The entries of one session's runs, newest first: the run just started is where the eye is.
    fn list(state: &AppState, source: Source) -> Vec<RunEntry> {
        state.session(source).map_or_else(Vec::new, |session| {
            session
                .runs()
                .iter()
                .rev()
                .map(|run| RunEntry::of(source, run, state.selected_key()))
                .collect()
        })
    }
}

fn run_list(
    store: Store,
    entries: impl Fn() -> Vec<RunEntry> + Send + Sync + 'static,
) -> impl IntoView {
    let select = move |key: RunKey| store.update(|state| state.select(key));
    view! {
        <ul class="run-list" role="listbox" aria-label="runs">
            <For each=entries key=|entry| entry.clone() let(entry)>
                <li
                    class="run"
                    class:selected=entry.selected
                    role="option"
                    tabindex="0"
                    data-testid="run-entry"
                    data-run-id=entry.key.run.0.to_string()
                    data-source=entry.key.source.word()
                    aria-selected=entry.selected.to_string()
                    on:click=move |_| select(entry.key)
                    on:keydown=move |ev: KeyboardEvent| {
                        if ev.key() == "Enter" || ev.key() == " " {
                            ev.prevent_default();
                            select(entry.key);
                        }
                    }
                >
                    <div class="run-head">
                        <span class="run-id">"#" {entry.key.run.0}</span>
                        <span class="status" data-status=entry.status_word>
                            {entry.status.clone()}
                        </span>
                    </div>
                    <div class="run-spec">{entry.describe.clone()}</div>
                    <div class="run-figure num">{entry.figure.clone()}</div>
                </li>
            </For>
        </ul>
    }
}

/// The live session's runs, and the session-file actions: open one, save this one.
#[component]
fn RunList(store: Store) -> impl IntoView {
    let download_error = RwSignal::new(None::<String>);
    let can_download = move || store.read(|state| state.live.file_bytes().is_some());
    let download = move |_| {
        let blob = store.read_untracked(|state| state.live.file_bytes().map(blob_of));
        let saved = match blob {
            Some(Ok(blob)) => save(&blob, DOWNLOAD_NAME),
            Some(Err(error)) => Err(error),
            None => Ok(()),
        };
        download_error.set(saved.err());
    };
    let pick = move |ev: Event| {
        let input: HtmlInputElement = event_target(&ev);
        if let Some(files) = input.files() {
            open_files(store, &files);
        }
        // Picking the same file again is a change too.
        input.set_value("");
    };
    view! {
        <section class="card runs">
            <div class="runs-head">
                <h2>"Runs"</h2>
                <div class="session-actions">
                    <label class="button" title="open a session file (.ackscope); or drop one on the page">
                        "Open…"
                        <input
                            type="file"
                            accept=".ackscope,application/octet-stream"
                            multiple=true
                            data-testid="open-file"
                            on:change=pick
                        />
                    </label>
                    <button
                        type="button"
                        class="button"
                        data-testid="download"
                        title=format!("save every run of this probe session as {DOWNLOAD_NAME}")
                        disabled=move || !can_download()
                        on:click=download
                    >
                        "Download"
                    </button>
                </div>
            </div>
            {move || {
                download_error
                    .get()
                    .map(|error| view! { <p class="error" role="alert" data-testid="download-error">{error}</p> })
            }}
            <Show
                when=move || store.read(|state| !state.live.runs().is_empty())
                fallback=|| {
                    view! {
                        <p class="hint">
                            "No runs from the probe yet: press Run, or open a session file (or "
                            "drop one on the page)."
                        </p>
                    }
                }
            >
                {run_list(store, move || store.read(|state| RunEntry::list(state, Source::Live)))}
            </Show>
        </section>
    }
}

/// One card per opened session file: its runs, or why it could not be read (in full).
#[component]
fn OpenedFiles(store: Store) -> impl IntoView {
    let ids =
        move || store.read(|state| state.files().iter().map(|file| file.id).collect::<Vec<_>>());
    view! {
        <For each=ids key=|id| *id let(id)>
            <OpenedFile store id />
        </For>
    }
}

#[component]
fn OpenedFile(store: Store, id: FileId) -> impl IntoView {
    let name = store
        .read_untracked(|state| state.file(id).map(|file| file.name.clone()).unwrap_or_default());
    let error = move || store.read(|state| state.file(id).and_then(|file| file.error.clone()));
    let entries = move || store.read(|state| RunEntry::list(state, Source::File(id)));
    let close = move |_| store.update(|state| state.close_file(id));
    view! {
        <section class="card runs opened-file" data-testid="opened-file" data-file=name.clone()>
            <div class="runs-head">
                <h2>"from " <span class="file-name">{name.clone()}</span></h2>
                <button
                    type="button"
                    class="button close"
                    data-testid="close-file"
                    title="close this file"
                    aria-label=format!("close {name}")
                    on:click=close
                >
                    "×"
                </button>
            </div>
            {move || {
                error().map(|error| view! { <p class="error" role="alert" data-testid="file-error">{error}</p> })
            }}
            {run_list(store, entries)}
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

/// What a bulk run's summary can say so far: shared's bulk analysis, no per-request views.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkText {
    pub bytes: String,
    pub duration_ms: String,
    pub goodput_mbps: String,
    pub events: String,
    /// "client SO_SNDBUF 2626560 B, …": the buffers and windows the kernel reported, if any.
    pub kernel: Option<String>,
}

impl BulkText {
    pub fn of(summary: &BulkSummary, events: u64) -> BulkText {
        let facts = [
            ("client SO_SNDBUF", summary.client_sndbuf_bytes, " B"),
            ("server SO_RCVBUF", summary.server_rcvbuf_bytes, " B"),
            ("server window (median)", summary.server_rcv_wnd_bytes, " B"),
            ("client send window (median)", summary.client_snd_wnd_bytes, " B"),
            ("min RTT", summary.min_rtt_us, " µs"),
        ];
        let kernel = facts
            .into_iter()
            .filter_map(|(name, value, unit)| Some(format!("{name} {}{unit}", value?)))
            .collect::<Vec<_>>();
        BulkText {
            bytes: summary.bytes.to_string(),
            duration_ms: format!("{:.2}", summary.duration_s * 1e3),
            goodput_mbps: format!("{:.1}", summary.goodput_mbps),
            events: events.to_string(),
            kernel: (!kernel.is_empty()).then(|| kernel.join(", ")),
        }
    }
}

/// "recording: events, TCP_INFO at syscalls, TCP_INFO every 1 ms while blocked": what perturbed
/// the run.
pub fn describe_instruments(instruments: &Instruments) -> String {
    let mut parts = Vec::new();
    parts.push(if instruments.events { "events" } else { "no events" }.to_string());
    if instruments.tcp_info_at_syscalls {
        parts.push("TCP_INFO at syscalls".into());
    }
    match instruments.tcp_info_interval_us {
        0 => {}
        us if us % 1000 == 0 => {
            parts.push(format!("TCP_INFO every {} ms while blocked", us / 1000))
        }
        us if us > 1000 => {
            parts.push(format!("TCP_INFO every {:.1} ms while blocked", f64::from(us) / 1000.0))
        }
        us => parts.push(format!("TCP_INFO every {us} µs while blocked")),
    }
    if instruments.capture {
        parts.push("packets".into());
    }
    format!("recording: {}", parts.join(", "))
}

/// The host facts as (label, value) pairs; "unknown" where the probe could not tell.
pub fn host_rows(host: &HostFacts) -> Vec<(&'static str, String)> {
    let known = |value: &str| {
        if value.is_empty() {
            "unknown".to_string()
        } else {
            value.to_string()
        }
    };
    vec![
        ("OS", known(&host.os)),
        ("kernel", known(&host.kernel)),
        ("tcp_rmem", known(&host.tcp_rmem)),
        ("tcp_wmem", known(&host.tcp_wmem)),
        ("rmem_max", known(&host.rmem_max)),
        ("wmem_max", known(&host.wmem_max)),
        ("congestion control", known(&host.congestion_control)),
        ("packet capture", known(&host.capture)),
    ]
}

/// A details element, closed: "machine: linux 6.8.0, cubic", the rest on demand.
fn machine_line(host: HostFacts) -> impl IntoView {
    let short = [host.os.as_str(), host.kernel.as_str(), host.congestion_control.as_str()]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let short = if short.is_empty() { "unknown".to_string() } else { short };
    view! {
        <details class="machine" data-testid="machine">
            <summary>"machine: " {short}</summary>
            <dl>
                {host_rows(&host)
                    .into_iter()
                    .map(|(label, value)| view! { <dt>{label}</dt><dd>{value}</dd> })
                    .collect_view()}
            </dl>
        </details>
    }
}

/// Everything the summary card shows of the selected run.
#[derive(Clone, Debug, PartialEq)]
struct SelectedRun {
    id: u32,
    file: Option<String>,
    describe: String,
    status: String,
    instruments: String,
    host: Option<HostFacts>,
    numbers: Numbers,
}

#[derive(Clone, Debug, PartialEq)]
enum Numbers {
    /// The numbers, and why the calls that waited waited.
    Rr(SummaryText, Vec<ClassText>),
    Bulk(BulkText),
    /// A scenario the browser has no analysis for (the echo server alone).
    Events(u64),
}

impl SelectedRun {
    fn of(state: &AppState) -> Option<SelectedRun> {
        let key = state.selected_key()?;
        let run = state.run(key)?;
        let file = match key.source {
            Source::Live => None,
            Source::File(id) => state.file(id).map(|file| file.name.clone()),
        };
        Some(SelectedRun {
            id: run.id.0,
            file,
            describe: run.spec.describe(),
            status: run.status.label(),
            instruments: describe_instruments(&run.instruments),
            host: state.session(key.source).and_then(|s| s.host()).cloned(),
            numbers: match run.bulk_summary() {
                Some(bulk) => Numbers::Bulk(BulkText::of(bulk, run.events)),
                None if run.is_rr() => Numbers::Rr(
                    SummaryText::of(run.summary()),
                    run.attribution().classes.iter().map(ClassText::of).collect(),
                ),
                None => Numbers::Events(run.events),
            },
        })
    }
}

fn rr_numbers(text: SummaryText) -> impl IntoView {
    view! {
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
    }
}

/// One class of waits in one direction, as the summary prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassText {
    /// The serde name (`nagle_delayed_ack`), the `data-class` value.
    pub class: &'static str,
    pub count: u32,
    /// "client->server".
    pub direction: String,
    /// The CLI's line up to its fixes: "19 stalls: Nagle x delayed ACK, client->server, median
    /// 43.6 ms".
    pub sentence: String,
    pub fixes: Vec<String>,
    /// A held read (red, as on the timeline) rather than another wait (amber).
    pub held: bool,
}

impl ClassText {
    pub fn of(summary: &ClassSummary) -> ClassText {
        let line = summary.line();
        let sentence = line.split_once("; fixes: ").map_or(line.as_str(), |(head, _)| head);
        ClassText {
            class: class_word(summary.class),
            count: summary.count,
            direction: summary.direction.clone(),
            sentence: sentence.to_string(),
            fixes: summary.fixes.clone(),
            // Shared gives these two classes to held reads only.
            held: summary.class.is_held_read(),
        }
    }
}

fn class_lines(classes: Vec<ClassText>) -> impl IntoView {
    (!classes.is_empty()).then(|| {
        view! {
            <ul class="stall-classes" aria-label="why calls waited">
                {classes
                    .into_iter()
                    .map(|class| {
                        view! {
                            <li
                                class="stall-class"
                                class:held=class.held
                                data-testid="stall-class"
                                data-class=class.class
                                data-count=class.count.to_string()
                                data-direction=class.direction
                            >
                                <span class="sentence">{class.sentence}</span>
                                <span class="fixes-head">"fixes:"</span>
                                <ul class="fixes">
                                    {class.fixes.into_iter().map(|fix| view! { <li>{fix}</li> }).collect_view()}
                                </ul>
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
        }
    })
}

fn bulk_numbers(text: BulkText) -> impl IntoView {
    view! {
        <dl>
            <div><dt>"bytes read by the server"</dt><dd class="num" data-testid="summary-bytes">{text.bytes}</dd></div>
            <div><dt>"duration (ms)"</dt><dd class="num" data-testid="summary-duration-ms">{text.duration_ms}</dd></div>
            <div><dt>"goodput (Mbit/s)"</dt><dd class="num" data-testid="summary-goodput-mbps">{text.goodput_mbps}</dd></div>
            <div><dt>"events"</dt><dd class="num" data-testid="summary-events">{text.events}</dd></div>
        </dl>
        {text.kernel.map(|kernel| view! { <p class="kernel-facts" data-testid="summary-kernel">{kernel}</p> })}
    }
}

fn event_count(events: u64) -> impl IntoView {
    view! {
        <dl>
            <div><dt>"events"</dt><dd class="num" data-testid="summary-events">{events}</dd></div>
        </dl>
    }
}

#[component]
fn SummaryPanel(store: Store) -> impl IntoView {
    let selected = move || store.read(SelectedRun::of);
    let live_host = move || store.read(|state| state.live.host().cloned());
    move || {
        match selected() {
        None => view! {
            <section class="card summary empty">
                <p class="hint">
                    "Choose the knobs and press Run: each request becomes a row below, with every "
                    "read that the kernel held for more than 10 ms drawn in red."
                </p>
                {live_host().map(machine_line)}
            </section>
        }
        .into_any(),
        Some(run) => view! {
            <section class="card summary" aria-label="summary">
                <h2>
                    "Run #" {run.id}
                    {run.file.map(|name| view! { <span class="from-file" data-testid="summary-file">"from " {name}</span> })}
                    <span class="describe">{run.describe}</span>
                    <span class="status">{run.status}</span>
                </h2>
                <p class="instruments" data-testid="instruments">{run.instruments}</p>
                {run.host.map(machine_line)}
                {match run.numbers {
                    Numbers::Rr(text, classes) => {
                        view! { {rr_numbers(text)} {class_lines(classes)} }.into_any()
                    }
                    Numbers::Bulk(text) => bulk_numbers(text).into_any(),
                    Numbers::Events(events) => event_count(events).into_any(),
                }}
            </section>
        }
        .into_any(),
    }
    }
}

/// Where the timeline would be, for a run of another scenario: says there is none rather than
/// showing nothing.
#[component]
fn NoTimeline(store: Store) -> impl IntoView {
    let note = move || {
        store.read(|state| {
            state.selected().and_then(|run| match run.spec {
                Scenario::Rr(_) => None,
                Scenario::Bulk(_) => Some("Bulk runs have no per-request timeline yet."),
                _ => Some("This run has no per-request timeline."),
            })
        })
    };
    move || {
        note().map(|note| {
            view! {
                <section class="card timeline-note" data-testid="no-timeline">
                    <p class="hint">{note}</p>
                </section>
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::wire::RunOutcome;
    use ackscope_shared::BulkSpec;
    use ackscope_shared::{NoDelay, RunId};
    use js_sys::{Array, Uint8Array};
    use leptos::mount::mount_to;
    use wasm_bindgen::JsCast;
    use wasm_bindgen_test::wasm_bindgen_test;
    use web_sys::{
        DataTransfer, DragEvent, DragEventInit, Element, File, HtmlElement, HtmlInputElement,
        HtmlSelectElement,
    };

    use std::cell::RefCell;

    use super::*;
    use crate::fixtures::{hello, nagle_run, rr_started, MS, US};
    use crate::promise::tests::sleep;

    /// A fresh element in the body for one test's view.
    fn container() -> HtmlElement {
        let document = document();
        let element = document.create_element("div").expect("create a div");
        document.body().expect("a body").append_child(&element).expect("append");
        element.unchecked_into()
    }

    fn all(root: &Element, selector: &str) -> Vec<Element> {
        let list = root.query_selector_all(selector).expect("a valid selector");
        (0..list.length()).filter_map(|i| list.item(i)?.dyn_into().ok()).collect()
    }

    fn one(root: &Element, selector: &str) -> Element {
        root.query_selector(selector).expect("a valid selector").unwrap_or_else(|| {
            panic!("no {selector} in {}", root.inner_html());
        })
    }

    fn text(root: &Element, selector: &str) -> String {
        one(root, selector).text_content().unwrap_or_default()
    }

    /// The text a label renders (what WebDriver's `text()` reads): its own text, not its hidden
    /// `<title>` tooltip.
    fn shown_text(label: &Element) -> String {
        let nodes = label.child_nodes();
        let title = one(label, "title");
        let hidden = window()
            .get_computed_style(&title)
            .ok()
            .flatten()
            .map(|style| style.get_property_value("display").unwrap_or_default());
        assert_eq!(hidden.as_deref(), Some("none"), "the tooltip must not be rendered text");
        (0..nodes.length())
            .filter_map(|i| nodes.item(i))
            .filter(|node| node.node_type() == web_sys::Node::TEXT_NODE)
            .filter_map(|node| node.text_content())
            .collect()
    }

    /// The tooltip of an SVG element: its `<title>` child, in SVG's namespace (an HTML `title`
    /// there would show nothing).
    fn tooltip(element: &Element) -> String {
        let title = one(element, "title");
        assert_eq!(title.namespace_uri().as_deref(), Some("http://www.w3.org/2000/svg"));
        title.text_content().unwrap_or_default()
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
        assert!(matches!(link.as_deref(), Some("connecting" | "reconnecting")), "{link:?}");
        let value = |id: &str| {
            one(root, &format!("input[data-testid={id}]")).unchecked_into::<HtmlInputElement>()
        };
        assert_eq!(value("requests").value(), "200");
        assert_eq!(value("size").value(), "2048");
        assert_eq!(value("reconnect-every").value(), "0");
        assert!(!value("nodelay-client").checked());
        assert!(!value("nodelay-server").checked());
        assert_eq!(value("response-size").value(), "", "the same as the request");
        assert_eq!(value("think-us").value(), "0");
        for id in ["cork-client", "cork-server", "quickack-client", "quickack-server"] {
            assert!(!value(id).checked(), "{id}");
        }
        for id in ["write-client", "write-server"] {
            let select = one(root, &format!("select[data-testid={id}]"));
            assert_eq!(select.unchecked_into::<HtmlSelectElement>().value(), "split");
        }
        assert!(one(root, "input[type=file][data-testid=open-file]").has_attribute("multiple"));
        assert!(
            one(root, "button[data-testid=download]").has_attribute("disabled"),
            "nothing to download before the probe's Hello"
        );
        drop(mounted);
        assert!(body.query_selector("[data-testid=run]").ok().flatten().is_none(), "unmounted");
    }

    #[wasm_bindgen_test]
    async fn a_run_streams_into_rows_stall_labels_and_the_summary() {
        let store = Store::new(AppState::default());
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
        });
        let root: &Element = &root;
        store.update(|s| {
            apply(s, hello());
            apply(s, rr_started(1, RrSpec { requests: 3, ..RrSpec::default() }));
        });
        settle().await;
        assert_eq!(all(root, "[data-testid=run-entry]").len(), 1);
        assert!(one(root, "button[data-testid=run]").has_attribute("disabled"), "a run is going");

        // Half the run: the rows of requests begun so far appear before the run ends.
        let events = nagle_run(3, 43_700 * US);
        let (first, rest) = events.split_at(20);
        store.update(|s| apply(s, ToBrowser::Events { run: RunId(1), events: first.to_vec() }));
        settle().await;
        let reqs: Vec<String> = all(root, "[data-testid=request-row]")
            .iter()
            .filter_map(|row| row.get_attribute("data-req"))
            .collect();
        assert_eq!(reqs, ["0", "1"]);
        assert_eq!(text(root, "[data-testid=summary-requests]"), "1");

        store.update(|s| {
            apply(s, ToBrowser::Events { run: RunId(1), events: rest.to_vec() });
            apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
        });
        settle().await;
        assert_eq!(all(root, "[data-testid=request-row]").len(), 3);
        let labels = all(root, "[data-testid=stall-label]");
        assert_eq!(labels.len(), 4, "two per request after the first");
        for label in &labels {
            assert_eq!(label.get_attribute("data-stall-ms").as_deref(), Some("43.7"));
            assert_eq!(shown_text(label), "43.7 ms");
        }
        assert_eq!(all(root, "[data-req='0'] [data-testid=stall-label]").len(), 0);
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
            nodelay: NoDelay { client: true, server: true },
            ..RrSpec::default()
        };
        store.update(|s| {
            apply(s, rr_started(2, nodelay));
            apply(s, ToBrowser::Events { run: RunId(2), events: nagle_run(3, 30 * US) });
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
        assert_eq!(selected, [Some("2".to_string()), None], "newest first, newest selected");
        assert_eq!(all(root, "[data-testid=stall-label]").len(), 0);
        assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "0");

        // Back to the Nagle run by clicking it.
        let first_run = one(root, "[data-testid=run-entry][data-run-id='1']");
        first_run.unchecked_ref::<HtmlElement>().click();
        settle().await;
        let first_run = one(root, "[data-testid=run-entry][data-run-id='1']");
        assert_eq!(first_run.get_attribute("aria-selected").as_deref(), Some("true"));
        assert_eq!(all(root, "[data-testid=stall-label]").len(), 4);
        assert!(text(root, "[data-testid=summary-p50-ms]").starts_with("87."));
    }

    #[wasm_bindgen_test]
    async fn a_long_run_draws_the_first_thousand_rows_and_says_so() {
        let store = Store::new(AppState::default());
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
        });
        let spec = RrSpec { requests: 1005, ..RrSpec::default() };
        store.update(|s| {
            apply(s, hello());
            apply(s, rr_started(1, spec));
            apply(s, ToBrowser::Events { run: RunId(1), events: nagle_run(1005, 30 * US) });
        });
        settle().await;
        let root: &Element = &root;
        assert_eq!(all(root, "[data-testid=request-row]").len(), 1000);
        assert_eq!(text(root, "[data-testid=row-cap-note]"), "showing 1000 of 1005 requests");
        assert_eq!(text(root, "[data-testid=summary-requests]"), "1005");
    }

    #[wasm_bindgen_test]
    async fn the_form_names_a_bad_field_and_shows_a_refusal() {
        let store = Store::new(AppState::default());
        store.update(|s| apply(s, hello()));
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let _mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
        });
        let root: &Element = &root;
        let size = one(root, "input[data-testid=size]").unchecked_into::<HtmlInputElement>();
        size.set_value("0");
        let input = web_sys::Event::new("input").expect("an input event");
        size.dispatch_event(&input).expect("dispatch");
        one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
        settle().await;
        let error = one(root, "[data-testid=form-error]");
        assert_eq!(error.get_attribute("data-field").as_deref(), Some("size_bytes"));
        assert!(error
            .text_content()
            .unwrap_or_default()
            .starts_with("body size (bytes): must be between 1"));
        assert_eq!(size.get_attribute("aria-invalid").as_deref(), Some("true"));
        assert!(!store.read_untracked(|s| s.start_pending), "nothing was sent");

        store.update(|s| {
            apply(s, ToBrowser::Rejected { reason: "a run is already in progress".into() })
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
            view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
        });
        let newer = ackscope_shared::wire::Hello {
            protocol_version: 99,
            ackscope_version: "9.9.9".into(),
            host: Default::default(),
        };
        store.update(|s| apply(s, ToBrowser::Hello(newer)));
        settle().await;
        let root: &Element = &root;
        assert!(text(root, "[data-testid=protocol-error]").contains("version 99"));
        assert!(one(root, "button[data-testid=run]").has_attribute("disabled"));
    }

    /// The page over `store`, in a fresh element, with the probe connected.
    fn mount_page(store: Store) -> (HtmlElement, impl Sized) {
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status outbox=StoredValue::new_local(None) /> }
        });
        (root, mounted)
    }

    /// Waits (on the page's clock: file reads are tasks, not microtasks) until `selector` shows.
    async fn wait_for(root: &Element, selector: &str) -> Element {
        for _ in 0..250 {
            if let Some(found) = root.query_selector(selector).expect("a valid selector") {
                settle().await;
                return found;
            }
            sleep(20).await;
        }
        panic!("no {selector} after 5 s in {}", root.inner_html());
    }

    fn type_into(input: &HtmlInputElement, value: &str) {
        input.set_value(value);
        let event = web_sys::Event::new("input").expect("an input event");
        input.dispatch_event(&event).expect("dispatch");
    }

    /// A session file as Download saves it: story 1, three requests, every body held 43.7 ms.
    fn story1_file() -> Vec<u8> {
        let mut state = AppState::default();
        apply(&mut state, hello());
        apply(&mut state, rr_started(1, RrSpec { requests: 3, ..RrSpec::default() }));
        apply(&mut state, ToBrowser::Events { run: RunId(1), events: nagle_run(3, 43_700 * US) });
        apply(&mut state, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
        state.live.file_bytes().expect("a greeted session").to_vec()
    }

    fn file(bytes: &[u8], name: &str) -> File {
        let parts = Array::of1(&Uint8Array::from(bytes));
        File::new_with_u8_array_sequence(&parts, name).expect("a file")
    }

    fn transfer_of(file: &File) -> DataTransfer {
        let transfer = DataTransfer::new().expect("a DataTransfer");
        transfer.items().add_with_file(file).expect("add the file");
        transfer
    }

    #[wasm_bindgen_test]
    async fn the_form_caps_requests_for_the_browser_and_keeps_the_per_side_knobs() {
        let store = Store::new(AppState::default());
        store.update(|s| apply(s, hello()));
        let (root, _mounted) = mount_page(store);
        let root: &Element = &root;
        let input = |id: &str| {
            one(root, &format!("input[data-testid={id}]")).unchecked_into::<HtmlInputElement>()
        };
        let run = || one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();

        type_into(&input("requests"), "100001");
        run();
        settle().await;
        let error = one(root, "[data-testid=form-error]");
        assert_eq!(error.get_attribute("data-field").as_deref(), Some("requests"));
        let message = error.text_content().unwrap_or_default();
        assert!(message.starts_with("requests: "), "{message}");
        assert!(message.contains("at most 100000"), "{message}");
        assert_eq!(input("requests").get_attribute("aria-invalid").as_deref(), Some("true"));

        type_into(&input("requests"), "10");
        type_into(&input("think-us"), "20000000");
        run();
        settle().await;
        let error = one(root, "[data-testid=form-error]");
        assert_eq!(error.get_attribute("data-field").as_deref(), Some("think_us"));
        assert_eq!(input("think-us").get_attribute("aria-invalid").as_deref(), Some("true"));
        assert_eq!(input("requests").get_attribute("aria-invalid").as_deref(), Some("false"));

        // Every knob set and valid: the form gets as far as sending (there is no probe here).
        type_into(&input("think-us"), "500");
        type_into(&input("response-size"), "4");
        input("cork-client").click();
        input("quickack-server").click();
        let write =
            one(root, "select[data-testid=write-client]").unchecked_into::<HtmlSelectElement>();
        write.set_value("writev");
        write
            .dispatch_event(&web_sys::Event::new("change").expect("a change event"))
            .expect("dispatch");
        run();
        settle().await;
        let error = one(root, "[data-testid=form-error]");
        assert_eq!(error.get_attribute("data-field").as_deref(), Some(""));
        assert!(error.text_content().unwrap_or_default().starts_with("no probe to talk to"));
        assert!(input("cork-client").checked() && input("quickack-server").checked());
        assert_eq!(write.value(), "writev");
    }

    #[wasm_bindgen_test]
    async fn the_summary_names_instruments_and_machine_and_bulk_runs_are_listed() {
        let store = Store::new(AppState::default());
        let (root, _mounted) = mount_page(store);
        let root: &Element = &root;
        store.update(|s| {
            apply(s, hello());
            apply(s, rr_started(1, RrSpec::default()));
        });
        settle().await;
        assert_eq!(
            text(root, "[data-testid=instruments]"),
            "recording: events, TCP_INFO at syscalls, TCP_INFO every 1 ms while blocked"
        );
        let machine = one(root, "details[data-testid=machine]");
        assert!(!machine.has_attribute("open"), "unobtrusive: closed until asked");
        assert_eq!(text(root, "[data-testid=machine] summary"), "machine: linux 6.8.0-test cubic");
        let details = machine.text_content().unwrap_or_default();
        assert!(details.contains("4096 131072 6291456"), "{details}");
        assert!(details.contains("4096 16384 4194304"), "{details}");

        let bulk = BulkSpec::default();
        let quiet = Instruments {
            tcp_info_at_syscalls: false,
            tcp_info_interval_us: 0,
            ..Instruments::default()
        };
        let read = |at_ns| ackscope_shared::Event {
            at_ns,
            side: ackscope_shared::Side::Server,
            conn: ackscope_shared::ConnId(0),
            req: ackscope_shared::ReqId(0),
            kind: ackscope_shared::EventKind::ReadDone { bytes: 62_500 },
        };
        store.update(|s| {
            apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Interrupted });
            apply(
                s,
                ToBrowser::RunStarted {
                    run: RunId(2),
                    spec: Scenario::Bulk(bulk.clone()),
                    instruments: quiet,
                },
            );
            apply(
                s,
                ToBrowser::Events { run: RunId(2), events: vec![read(5 * MS), read(10 * MS)] },
            );
        });
        settle().await;
        let entry = one(root, "[data-testid=run-entry][data-run-id='2']");
        let listed = entry.text_content().unwrap_or_default();
        assert!(listed.contains(&bulk.describe()), "{listed}");
        assert!(listed.contains("100.0 Mbit/s"), "{listed}");
        let first = one(root, "[data-testid=run-entry][data-run-id='1'] .status");
        assert_eq!(first.get_attribute("data-status").as_deref(), Some("interrupted"));
        assert_eq!(text(root, "[data-testid=instruments]"), "recording: events");
        assert_eq!(
            text(root, "[data-testid=no-timeline]"),
            "Bulk runs have no per-request timeline yet."
        );
        assert!(all(root, "[data-testid=request-row]").is_empty());
        assert_eq!(text(root, "[data-testid=summary-bytes]"), "125000");
        assert_eq!(text(root, "[data-testid=summary-goodput-mbps]"), "100.0");
        assert_eq!(text(root, "[data-testid=summary-events]"), "2");
    }

    #[wasm_bindgen_test]
    async fn a_picked_file_shows_its_runs_beside_the_live_ones() {
        let store = Store::new(AppState::default());
        store.update(|s| {
            apply(s, hello());
            apply(s, rr_started(7, RrSpec::default()));
        });
        let (root, _mounted) = mount_page(store);
        let root: &Element = &root;
        assert!(!one(root, "button[data-testid=download]").has_attribute("disabled"));

        let picker = one(root, "input[data-testid=open-file]").unchecked_into::<HtmlInputElement>();
        let transfer = transfer_of(&file(&story1_file(), "story1.ackscope"));
        picker.set_files(transfer.files().as_ref());
        picker
            .dispatch_event(&web_sys::Event::new("change").expect("a change event"))
            .expect("dispatch");
        let opened = wait_for(root, "[data-testid=opened-file]").await;
        assert_eq!(opened.get_attribute("data-file").as_deref(), Some("story1.ackscope"));
        assert!(root.query_selector("[data-testid=file-error]").ok().flatten().is_none());
        let entry = one(&opened, "[data-testid=run-entry]");
        assert_eq!(entry.get_attribute("data-source").as_deref(), Some("file"));
        assert_eq!(entry.get_attribute("data-run-id").as_deref(), Some("1"));
        assert_eq!(entry.get_attribute("aria-selected").as_deref(), Some("true"));
        assert_eq!(text(root, "[data-testid=summary-file]"), "from story1.ackscope");
        assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
        assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "4");
        assert_eq!(all(root, "[data-testid=stall-label]").len(), 4);
        assert_eq!(all(root, "[data-testid=run-entry][data-source=live]").len(), 1);

        // The probe restarts: its Hello starts the live runs over and leaves the file's alone.
        store.update(|s| apply(s, hello()));
        settle().await;
        assert!(all(root, "[data-testid=run-entry][data-source=live]").is_empty());
        assert_eq!(all(root, "[data-testid=run-entry][data-source=file]").len(), 1);
        assert_eq!(text(root, "[data-testid=summary-requests]"), "3");

        one(root, "button[data-testid=close-file]").unchecked_into::<HtmlElement>().click();
        settle().await;
        assert!(all(root, "[data-testid=opened-file]").is_empty());
    }

    #[wasm_bindgen_test]
    async fn a_dropped_truncated_file_names_the_problem_and_keeps_the_runs_before_it() {
        let store = Store::new(AppState::default());
        let (root, _mounted) = mount_page(store);
        let root: &Element = &root;
        let whole = story1_file();
        // Cut inside the RunFinished frame: run 1 and all its events are before the cut.
        let transfer = transfer_of(&file(&whole[..whole.len() - 2], "cut.ackscope"));
        let init = DragEventInit::new();
        init.set_bubbles(true);
        init.set_cancelable(true);
        init.set_data_transfer(Some(&transfer));
        let drop = DragEvent::new_with_event_init_dict("drop", &init).expect("a drop event");
        // Dropped on a heading: anywhere on the page will do.
        one(root, "h1").dispatch_event(&drop).expect("dispatch");
        assert!(drop.default_prevented(), "the browser must not open the file itself");

        let error = wait_for(root, "[data-testid=file-error]").await;
        let error = error.text_content().unwrap_or_default();
        assert!(error.starts_with("cut.ackscope: stream ends inside a message at byte"), "{error}");
        assert!(error.contains("truncated"), "{error}");
        let entry = one(root, "[data-testid=opened-file] [data-testid=run-entry]");
        assert_eq!(entry.get_attribute("data-run-id").as_deref(), Some("1"));
        let status = one(&entry, ".status");
        assert_eq!(status.get_attribute("data-status").as_deref(), Some("incomplete"));
        assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
        assert_eq!(all(root, "[data-testid=request-row]").len(), 3);
    }

    #[wasm_bindgen_test]
    async fn a_file_of_a_newer_protocol_is_refused_by_name() {
        use ackscope_shared::wire::{write_frame, Hello, PROTOCOL_VERSION};

        let store = Store::new(AppState::default());
        let (root, _mounted) = mount_page(store);
        let root: &Element = &root;
        let mut bytes = Vec::new();
        let newer = Hello {
            protocol_version: PROTOCOL_VERSION + 1,
            ackscope_version: "9.0.0".into(),
            host: Default::default(),
        };
        write_frame(&ToBrowser::Hello(newer), &mut bytes);
        write_frame(&rr_started(1, RrSpec::default()), &mut bytes);
        crate::files::open_blob(
            store,
            "future.ackscope".into(),
            file(&bytes, "future.ackscope").into(),
        );

        let error = wait_for(root, "[data-testid=file-error]").await;
        let error = error.text_content().unwrap_or_default();
        assert!(error.starts_with("future.ackscope: "), "{error}");
        assert!(error.contains(&format!("protocol version {}", PROTOCOL_VERSION + 1)), "{error}");
        assert!(error.contains(&format!("reads version {PROTOCOL_VERSION}")), "{error}");
        assert!(all(root, "[data-testid=run-entry]").is_empty());
    }

    #[wasm_bindgen_test]
    async fn what_download_saves_opens_as_the_same_runs() {
        let store = Store::new(AppState::default());
        // A live session: story 1's messages as the probe streams them.
        let (messages, _) = crate::session_file::decode_session(&story1_file());
        store.update(|s| messages.into_iter().for_each(|message| apply(s, message)));
        let (root, _mounted) = mount_page(store);
        let root: &Element = &root;

        // What the Download button saves, read back through the same path as an opened file.
        let blob = store
            .read_untracked(|s| s.live.file_bytes().map(blob_of))
            .expect("a live session")
            .expect("a blob");
        crate::files::open_blob(store, DOWNLOAD_NAME.into(), blob);
        wait_for(root, &format!("[data-testid=opened-file][data-file='{DOWNLOAD_NAME}']")).await;
        store.read_untracked(|s| {
            let live = s.live.runs();
            let downloaded = &s.files().last().expect("opened").session;
            assert_eq!(downloaded.runs().len(), live.len());
            for (file_run, live_run) in downloaded.runs().iter().zip(live) {
                assert_eq!(file_run.spec, live_run.spec);
                assert_eq!(file_run.status, live_run.status);
                assert_eq!(file_run.summary(), live_run.summary());
            }
        });
        assert_eq!(text(root, "[data-testid=summary-requests]"), "3");
    }

    /// The page over `store` with an outbox that keeps every message Run sends.
    fn mount_recording(store: Store) -> (HtmlElement, impl Sized, Rc<RefCell<Vec<ToProbe>>>) {
        let sent = Rc::new(RefCell::new(Vec::new()));
        let keep = Rc::clone(&sent);
        let outbox: Outbox = Rc::new(move |message: &ToProbe| {
            keep.borrow_mut().push(message.clone());
            Ok(())
        });
        let root = container();
        let status = RwSignal::new(LinkStatus::Connected);
        let outbox = StoredValue::new_local(Some(outbox));
        let mounted = mount_to(root.clone(), move || {
            view! { <Page store link_status=status outbox /> }
        });
        (root, mounted, sent)
    }

    /// A live session with one finished rr run of `spec` made of `events`.
    fn one_run(spec: RrSpec, events: Vec<ackscope_shared::Event>) -> Store {
        let store = Store::new(AppState::default());
        store.update(|s| {
            apply(s, hello());
            apply(s, rr_started(1, spec));
            apply(s, ToBrowser::Events { run: RunId(1), events });
            apply(s, ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed });
        });
        store
    }

    /// (data-class, data-direction, data-count) of every class line.
    fn class_lines_of(root: &Element) -> Vec<(String, String, String)> {
        all(root, "[data-testid=stall-class]")
            .iter()
            .map(|line| {
                let attr = |name| line.get_attribute(name).unwrap_or_default();
                (attr("data-class"), attr("data-direction"), attr("data-count"))
            })
            .collect()
    }

    fn owned(lines: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        lines.iter().map(|&(a, b, c)| (a.into(), b.into(), c.into())).collect()
    }

    #[wasm_bindgen_test]
    async fn each_stall_is_named_under_the_summary_and_on_its_label() {
        let store =
            one_run(RrSpec { requests: 20, ..RrSpec::default() }, nagle_run(20, 43_600 * US));
        let (root, _mounted) = mount_page(store);
        let root: &Element = &root;
        settle().await;
        assert_eq!(
            class_lines_of(root),
            owned(&[
                ("nagle_delayed_ack", "client->server", "19"),
                ("nagle_delayed_ack", "server->client", "19"),
            ])
        );
        let line = one(root, "[data-testid=stall-class][data-direction='client->server']");
        assert_eq!(
            text(&line, ".sentence"),
            "19 stalls: Nagle x delayed ACK, client->server, median 43.6 ms"
        );
        let fixes: Vec<String> =
            all(&line, ".fixes li").iter().filter_map(|li| li.text_content()).collect();
        assert_eq!(fixes.len(), 4, "{fixes:?}");
        assert_eq!(fixes[0], "TCP_NODELAY on the client");
        assert!(fixes
            .iter()
            .any(|fix| fix == "TCP_QUICKACK on the server, set again after every read"));
        let answer = one(root, "[data-testid=stall-class][data-direction='server->client']");
        assert_eq!(text(&answer, ".fixes li"), "TCP_NODELAY on the server");

        let labels = all(root, "[data-testid=stall-label]");
        assert_eq!(labels.len(), 38);
        for label in &labels {
            assert_eq!(shown_text(label), "43.6 ms");
            assert_eq!(label.get_attribute("data-stall-ms").as_deref(), Some("43.6"));
            assert_eq!(label.get_attribute("data-class").as_deref(), Some("nagle_delayed_ack"));
            let why = tooltip(label);
            assert!(why.starts_with("Nagle x delayed ACK: the "), "{why}");
            assert!(why.contains("wrote 4 bytes, then 2048 bytes"), "{why}");
        }
        // The request's body, held on its way to the server: the client wrote it.
        let request_body = one(root, "[data-req='5'] rect.stalled");
        let bars = all(root, "[data-req='5'] rect.stalled");
        assert_eq!(bars.len(), 2);
        assert!(bars
            .iter()
            .any(|bar| tooltip(bar).contains("Nagle x delayed ACK: the client wrote")));
        assert!(tooltip(&request_body).contains("held 43."));
        assert!(all(root, "[data-testid=wait-label]").is_empty());
    }

    #[wasm_bindgen_test]
    async fn a_writer_with_nodelay_leaves_its_stalls_unexplained() {
        let spec = RrSpec {
            requests: 20,
            nodelay: NoDelay { client: true, server: false },
            ..RrSpec::default()
        };
        let (root, _mounted) = mount_page(one_run(spec, nagle_run(20, 43_600 * US)));
        let root: &Element = &root;
        settle().await;
        // Equal counts: shared orders the classes by name then.
        assert_eq!(
            class_lines_of(root),
            owned(&[
                ("nagle_delayed_ack", "server->client", "19"),
                ("unexplained", "client->server", "19"),
            ])
        );
        let line = one(root, "[data-testid=stall-class][data-class=unexplained]");
        assert!(text(&line, ".sentence").starts_with("19 stalls: unexplained, client->server"));
        assert_eq!(text(&line, ".fixes li"), "capture packets to see what the kernel did");

        let unexplained = all(root, "[data-testid=stall-label][data-class=unexplained]");
        assert_eq!(unexplained.len(), 19);
        for label in &unexplained {
            let why = tooltip(label);
            assert!(why.starts_with("unexplained: the server waited"), "{why}");
            assert!(why.contains("the client had TCP_NODELAY on"), "{why}");
            assert_eq!(shown_text(label), "43.6 ms");
        }
        let nagle = all(root, "[data-testid=stall-label][data-class=nagle_delayed_ack]");
        assert_eq!(nagle.len(), 19);
    }

    #[wasm_bindgen_test]
    async fn server_think_time_is_a_labelled_wait_not_nothing() {
        use ackscope_shared::synthetic::Script;
        use ackscope_shared::{EventKind, Side};
        // Keep-alive, no Nagle: the client writes, the server thinks 30 ms, then answers.
        let mut script = Script::default();
        for req in 0..3u32 {
            let t = u64::from(req) * 40 * MS;
            script.event(t, Side::Client, req, EventKind::RequestStart);
            script.write(Side::Client, req, t, t + 5 * US, 4);
            script.write(Side::Client, req, t + 6 * US, t + 10 * US, 100);
            script.read(Side::Server, req, t, t + 20 * US, 4);
            script.read(Side::Server, req, t + 21 * US, t + 30 * US, 100);
            let answer = t + 30 * MS;
            script.write(Side::Server, req, answer, answer + 5 * US, 4);
            script.write(Side::Server, req, answer + 6 * US, answer + 10 * US, 100);
            script.read(Side::Client, req, t + 11 * US, answer + 10 * US, 4);
            script.read(Side::Client, req, answer + 11 * US, answer + 20 * US, 100);
            script.event(answer + 21 * US, Side::Client, req, EventKind::RequestDone);
        }
        let spec = RrSpec {
            requests: 3,
            size_bytes: 100,
            think_us: 30_000,
            nodelay: NoDelay { client: true, server: true },
            ..RrSpec::default()
        };
        let (root, _mounted) = mount_page(one_run(spec, script.events));
        let root: &Element = &root;
        settle().await;
        assert_eq!(text(root, "[data-testid=summary-stalled-reads]"), "0", "no read was held");
        assert!(all(root, "[data-testid=stall-label]").is_empty());
        assert_eq!(class_lines_of(root), owned(&[("server_think_time", "server->client", "3")]));
        let line = one(root, "[data-testid=stall-class]");
        assert!(text(&line, ".sentence").starts_with("3 stalls: server think time"));
        assert_eq!(text(&line, ".fixes li"), "make the server answer faster");

        let waits = all(root, "[data-testid=wait-label]");
        assert_eq!(waits.len(), 3, "one per request");
        for wait in &waits {
            assert_eq!(wait.get_attribute("data-class").as_deref(), Some("server_think_time"));
            assert_eq!(shown_text(wait), "server think time 30.0 ms");
            assert_eq!(wait.get_attribute("data-wait-ms").as_deref(), Some("30.0"));
            let why = tooltip(wait);
            assert!(
                why.starts_with("server think time: the server read the whole request, then spent"),
                "{why}"
            );
        }
        assert_eq!(all(root, "rect.waited").len(), 3);
        assert!(all(root, "rect.stalled").is_empty());
    }

    #[wasm_bindgen_test]
    async fn a_preset_fills_every_field_and_run_sends_its_spec() {
        use ackscope_shared::presets::find;

        let store = Store::new(AppState::default());
        store.update(|s| apply(s, hello()));
        let (root, _mounted, sent) = mount_recording(store);
        let root: &Element = &root;
        let input = |id: &str| {
            one(root, &format!("input[data-testid={id}]")).unchecked_into::<HtmlInputElement>()
        };
        let select = one(root, "select[data-testid=preset]").unchecked_into::<HtmlSelectElement>();
        assert_eq!(select.value(), "", "the defaults are no preset (story1 makes 100 requests)");
        let names: Vec<String> = all(root, "select[data-testid=preset] option")
            .iter()
            .filter_map(|option| option.get_attribute("value"))
            .collect();
        // Request/response presets first, then the others (bulk).
        let is_rr = |preset: &&Preset| matches!((preset.build)(), Scenario::Rr(_));
        let mut expected = vec![String::new()];
        expected.extend(PRESETS.iter().filter(is_rr).map(|preset| preset.name.to_string()));
        expected.extend(PRESETS.iter().filter(|p| !is_rr(p)).map(|p| p.name.to_string()));
        assert_eq!(names, expected, "custom, then every preset");
        let choose = |name: &str| {
            select.set_value(name);
            select
                .dispatch_event(&web_sys::Event::new("change").expect("a change event"))
                .expect("dispatch");
        };

        // A bad field first: choosing a preset replaces it and clears the error.
        type_into(&input("size"), "0");
        one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
        settle().await;
        assert!(root.query_selector("[data-testid=form-error]").ok().flatten().is_some());

        let cork = find("story1-cork").expect("a preset");
        choose("story1-cork");
        settle().await;
        assert!(input("cork-client").checked() && input("cork-server").checked());
        assert!(!input("nodelay-client").checked() && !input("nodelay-server").checked());
        assert_eq!(input("requests").value(), "100", "the preset sets requests too");
        assert_eq!(input("size").value(), "2048");
        assert_eq!(text(root, "[data-testid=preset-about]"), cork.about);
        assert!(root.query_selector("[data-testid=form-error]").ok().flatten().is_none());
        assert_eq!(select.value(), "story1-cork");

        one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
        settle().await;
        assert_eq!(*sent.borrow(), [ToProbe::StartRun { spec: (cork.build)() }]);
        store.update(|s| s.start_failed());

        // An edit that spells another preset shows that one...
        input("cork-server").click();
        settle().await;
        assert_eq!(select.value(), "story1-cork-client");
        // ...and one that spells none makes the form the user's own.
        type_into(&input("requests"), "20");
        settle().await;
        assert_eq!(select.value(), "");
        assert!(text(root, "[data-testid=preset-about]").starts_with("your own settings"));
        choose("story1-cork");
        settle().await;
        assert_eq!(input("requests").value(), "100");

        // A bulk preset is sent as it is; the request/response fields step aside.
        let bulk = PRESETS
            .iter()
            .find(|preset| matches!((preset.build)(), Scenario::Bulk(_)))
            .expect("a bulk preset");
        choose(bulk.name);
        settle().await;
        assert!(one(root, ".rr-fields").has_attribute("hidden"));
        let about = text(root, "[data-testid=preset-about]");
        assert!(about.starts_with(bulk.about), "{about}");
        assert!(about.contains(&format!("ackscope run {} --print-spec", bulk.name)), "{about}");
        one(root, "button[data-testid=run]").unchecked_into::<HtmlElement>().click();
        settle().await;
        assert_eq!(sent.borrow().last(), Some(&ToProbe::StartRun { spec: (bulk.build)() }));
        store.update(|s| s.start_failed());

        // Back to custom: the fields are as they were.
        choose("");
        settle().await;
        assert!(!one(root, ".rr-fields").has_attribute("hidden"));
        assert_eq!(select.value(), "story1-cork", "the fields still spell story1-cork");
        assert!(input("cork-client").checked());
    }

    #[wasm_bindgen_test]
    fn instruments_read_as_a_sentence() {
        let text = |events, tcp_info_at_syscalls, tcp_info_interval_us| {
            describe_instruments(&Instruments {
                events,
                tcp_info_at_syscalls,
                tcp_info_interval_us,
                capture: false,
            })
        };
        assert_eq!(
            text(true, true, 1000),
            "recording: events, TCP_INFO at syscalls, TCP_INFO every 1 ms while blocked"
        );
        assert_eq!(text(false, false, 0), "recording: no events");
        assert_eq!(
            text(true, false, 1500),
            "recording: events, TCP_INFO every 1.5 ms while blocked"
        );
        assert_eq!(
            text(true, false, 250),
            "recording: events, TCP_INFO every 250 µs while blocked"
        );
        let unknown = host_rows(&HostFacts::default());
        assert!(unknown.iter().all(|(_, value)| value == "unknown"));
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
            [text.requests, text.rps, text.p50_ms, text.p99_ms, text.stalled_reads],
            ["200", "11.4", "88.12", "90.00", "398"].map(String::from)
        );
    }
}
