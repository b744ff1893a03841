//! The page: the header, the panels, and the probe's link. Each panel is a module of
//! [`crate::panels`] (or [`crate::timeline`]) and reads the state through [`Store`].

use std::rc::Rc;

use ackscope_shared::wire::ToProbe;
use leptos::ev::DragEvent;
use leptos::prelude::*;

use ackscope_shared::RunId;

use crate::classroom::ClassRole;
use crate::compare::Comparison;
use crate::files::{open_files, open_url, read_from_request};
use crate::js::Debounce;
use crate::panels::compare::ComparePanel;
use crate::panels::exports::ExportButtons;
use crate::panels::kernel::{self, KernelPanel};
use crate::panels::lesson::{LessonPanel, LessonState};
use crate::panels::run_form::RunForm;
use crate::panels::runs::{OpenedFiles, RunList};
use crate::panels::selection::{Selected, SelectionPanel};
use crate::panels::summary::{no_timeline_note, NoTimeline, SelectedRun, SummaryPanel};
use crate::panels::watch_source::WatchSource;
use crate::session_file::name_of_url;
use crate::state::{AppState, Reach, RunKey, Source};
use crate::store::{FrameBatch, Store};
use crate::timeline::overview::FilePreview;
use crate::timeline::render::Timeline;
use crate::timeline::rows::Filter;
use crate::timeline::view::ViewState;
use crate::url_state::{is_embed, relink, UrlView};
use crate::ws::{probe_url_for_this_page, Link, LinkStatus, Outbox};

/// The app as served by the probe: connects to the page's own origin and shows what comes, and
/// opens the session file named by `?url=`, if any.
#[component]
pub fn App() -> impl IntoView {
    let store = Store::new(AppState::default());
    let link_status = RwSignal::new(LinkStatus::Connecting);
    let batch = FrameBatch::new(store);
    let location = web_sys::window().map(|w| w.location());
    let hash = location.as_ref().and_then(|l| l.hash().ok()).unwrap_or_default();
    let search = location.as_ref().and_then(|l| l.search().ok()).unwrap_or_default();
    // A class's link: the room's code goes with the socket, the presenter's secret never does.
    let class = ClassRole::of(&search, &hash);
    let outbox = probe_url_for_this_page().map(|url| {
        let url = class.as_ref().map_or(url.clone(), |role| role.socket_url(&url));
        let link = Link::open(
            url,
            move || store.read_untracked(AppState::resume_query),
            move |message| batch.apply(message),
            move |status| link_status.set(status),
        );
        // The outbox holds the link, and with it the socket, for as long as the page lives.
        Rc::new(move |message: &ToProbe| link.send(message)) as Outbox
    });
    if outbox.is_none() {
        link_status.set(LinkStatus::Reconnecting);
    }
    let outbox = StoredValue::new_local(outbox);
    let link = UrlView::parse(&search);
    if let Some(url) = link.url.clone() {
        open_url(store, url);
    }
    match class {
        Some(class) => view! { <Page store link_status outbox link class /> }.into_any(),
        None => view! { <Page store link_status outbox link /> }.into_any(),
    }
}

/// The whole page over a given store and outbox (tests pass their own). A session file dropped
/// anywhere on it is opened. With a `link` (the page's URL, parsed), the page opens the view it
/// names and keeps the URL in step with the view, so that the address bar is a link to it.
#[component]
pub fn Page(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    outbox: StoredValue<Option<Outbox>, LocalStorage>,
    #[prop(optional)] link: Option<UrlView>,
    /// In a class: who this page is (from `?room=` and the fragment).
    #[prop(optional)]
    class: Option<ClassRole>,
) -> impl IntoView {
    // Where the user is looking in the timeline, shared with the selection's details.
    let view = RwSignal::new(ViewState::default());
    let filter = RwSignal::new(Filter::default());
    // The view a link asks for, handed to the timeline once its run is shown.
    let initial = RwSignal::new(None::<(RunKey, ViewState)>);
    // Where the class is in the lessons (presenter mode enlarges the whole page).
    let lesson = RwSignal::new(LessonState::default());
    let student = class.as_ref().is_some_and(|role| !role.is_presenter());
    // `?embed=1`: only the timeline, for a course's page (with a lesson's step, or a file).
    let embed = web_sys::window()
        .and_then(|w| w.location().search().ok())
        .is_some_and(|search| is_embed(&search));
    if let Some(link) = link {
        follow_link(store, link.clone(), initial);
        keep_link(store, view, link.url);
    }
    // What each panel that only shows reads, derived here: a panel gets its own model, not the
    // store, and redraws when that changed. (The form, the run lists, the lessons and the
    // timeline also act on the state: they get the store.)
    let summary = store.memo(SelectedRun::of);
    let live_host = store.memo(|state| state.live.host().cloned());
    let comparison = store.memo(Comparison::of);
    let clear_compare = Callback::new(move |()| store.update(AppState::clear_compare));
    // A stall's fix tried on the programs a running watch watches: the run splits when it is
    // in force (or the probe says why not, beside the buttons).
    let try_fix = Callback::new(move |(run, option, sides)| {
        store.update(|state| state.try_requested(run, sides));
        let message = ToProbe::TryOnWatch { run, option, sides };
        let sent = outbox.with_value(|outbox| match outbox {
            Some(send) => send(&message),
            None => Err("no probe to talk to: open this page from the URL ackscope prints".into()),
        });
        if let Err(reason) = sent {
            store.update(|state| state.try_failed(reason));
        }
    });
    let no_timeline = store.memo(no_timeline_note);
    let selected = Memo::new(move |_| {
        let req = view.with(|v| v.selected)?;
        store.read(|state| Selected::of(state, req))
    });
    let kernel = kernel::shown(store, view);
    let version = store.memo(|state| state.probe_version().map(str::to_string));
    let protocol_error = store.memo(|state| state.live.error.clone());
    let dragging = RwSignal::new(false);
    // Whether the last start came from the watch card (its refusal is shown there).
    let watch_asked = RwSignal::new(false);
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
            class:presenter=move || lesson.with(|s| s.presenter)
            class:embed=embed
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
                <ConnectionBadge version link_status />
            </header>
            <ProtocolError error=protocol_error />
            <main class="layout">
                <aside class="side">
                    // A student's page follows the presenter's runs and explores files: it
                    // starts none, so it has no run form.
                    {(!student).then(|| view! {
                        <RunForm store link_status outbox watch_asked />
                        <WatchSource store link_status outbox asked=watch_asked />
                    })}
                    <RunList store student />
                    <OpenedFiles store />
                </aside>
                <section class="main">
                    <LessonPanel store lesson view filter link_status outbox class embed />
                    <FilePreview store />
                    <SummaryPanel selected=summary live_host try_fix />
                    <ExportButtons store />
                    <ComparePanel comparison clear=clear_compare />
                    <NoTimeline note=no_timeline />
                    <Timeline store view filter initial />
                    <SelectionPanel selected />
                    <KernelPanel shown=kernel />
                </section>
            </main>
        </div>
    }
}

#[component]
fn ConnectionBadge(
    version: Memo<Option<String>>,
    link_status: RwSignal<LinkStatus>,
) -> impl IntoView {
    let version = move || version.get();
    view! {
        <div
            class="connection"
            data-testid="connection"
            data-state=move || link_status.get().word()
            title=move || (link_status.get() != LinkStatus::Connected).then_some(
                "no probe answers here: lessons play their recordings and files open; for live \
                 runs, open the URL `cargo xtask run` (or `ackscope`) prints",
            )
        >
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
fn ProtocolError(error: Memo<Option<String>>) -> impl IntoView {
    move || {
        error.get().map(|error| {
            view! { <p class="banner error" role="alert" data-testid="protocol-error">{error}</p> }
        })
    }
}

#[cfg(all(test, target_arch = "wasm32"))]
mod tests;

/// Shows the run a link names with the link's view: a live run as soon as the probe's replay
/// brings it, a file's run once the file has been read. A link to a request the page did not
/// read (a file held in part) reads the file again around it first, once.
fn follow_link(store: Store, link: UrlView, initial: RwSignal<Option<(RunKey, ViewState)>>) {
    let Some(run) = link.run else { return };
    let Some(url) = link.url.clone() else {
        let key = RunKey::live(RunId(run));
        initial.set(Some((key, link.view_state())));
        store.update(|state| state.follow(key));
        return;
    };
    let pending = StoredValue::new(true);
    let read_again = StoredValue::new(false);
    Effect::new(move |_| {
        if !pending.get_value() {
            return;
        }
        let key = store.read(|state| {
            let name = name_of_url(&url);
            let file = state.files().iter().find(|f| f.name == name)?;
            // Its runs are listed (and selectable) once it has been read.
            let source = file.progress().is_none().then_some(Source::File(file.id))?;
            let key = RunKey { source, run: RunId(run) };
            state.run(key).map(|_| key)
        });
        if let Some(key) = key {
            let unread = link.req.filter(|_| !read_again.get_value()).and_then(|req| {
                let (file, _) = store.read_untracked(|state| state.read_to_show(key, req))?;
                Some((file, req))
            });
            if let Some((file, req)) = unread {
                // The file read from the request is followed as this one was.
                read_again.set_value(true);
                read_from_request(store, file, Some(key.run), req, Reach::Around);
                return;
            }
            pending.set_value(false);
            initial.set(Some((key, link.view_state())));
            store.update(|state| state.select(key));
        }
    });
}

/// Writes the shown view into the address bar (without a new history entry), a quarter of a
/// second after it stops changing: browsers throttle a page that rewrites its URL every frame.
fn keep_link(store: Store, view: RwSignal<ViewState>, linked_file: Option<String>) {
    let debounce = Debounce::new(std::time::Duration::from_millis(250));
    Effect::new(move |_| {
        let state = view.get();
        let Some(key) = store.read(|s| s.selected_key()) else { return };
        let url = match key.source {
            Source::Live => None,
            // A file the link opened can be linked to again; a picked file has no address.
            Source::File(id) => {
                let name = store.read_untracked(|s| s.file(id).map(|f| f.name.clone()));
                match &linked_file {
                    Some(url) if name.as_deref() == Some(name_of_url(url).as_str()) => {
                        Some(url.clone())
                    }
                    _ => return,
                }
            }
        };
        let query = UrlView::of(url, Some(key.run.0), &state).query();
        debounce.call(move || {
            let Some(window) = web_sys::window() else { return };
            let location = window.location();
            let path = location.pathname().unwrap_or_default();
            // The page's own parameters (a class's room, a lesson's step) and its fragment
            // (a presenter's secret) stay: only the view's part of the address changes.
            let search = relink(&location.search().unwrap_or_default(), &query);
            let hash = location.hash().unwrap_or_default();
            if let Ok(history) = window.history() {
                let _ = history.replace_state_with_url(
                    &wasm_bindgen::JsValue::NULL,
                    "",
                    Some(&format!("{path}{search}{hash}")),
                );
            }
        });
    });
}
