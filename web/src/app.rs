//! The page: the header, the panels, and the probe's link. Each panel is a module of
//! [`crate::panels`] (or [`crate::timeline`]) and reads the state through [`Store`].

use std::rc::Rc;

use ackscope_shared::wire::ToProbe;
use leptos::ev::DragEvent;
use leptos::prelude::*;

use crate::files::{open_files, open_url, url_parameter};
use crate::panels::compare::ComparePanel;
use crate::panels::run_form::RunForm;
use crate::panels::runs::{OpenedFiles, RunList};
use crate::panels::selection::SelectionPanel;
use crate::panels::summary::{NoTimeline, SummaryPanel};
use crate::state::AppState;
use crate::store::{FrameBatch, Store};
use crate::timeline::render::Timeline;
use crate::timeline::rows::Filter;
use crate::timeline::view::ViewState;
use crate::ws::{probe_url_for_this_page, Link, LinkStatus};

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

/// The whole page over a given store and outbox (tests pass their own). A session file dropped
/// anywhere on it is opened.
#[component]
pub fn Page(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    outbox: StoredValue<Option<Outbox>, LocalStorage>,
) -> impl IntoView {
    // Where the user is looking in the timeline, shared with the selection's details.
    let view = RwSignal::new(ViewState::default());
    let filter = RwSignal::new(Filter::default());
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
                    <ComparePanel store />
                    <NoTimeline store />
                    <Timeline store view filter />
                    <SelectionPanel store view />
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

#[cfg(all(test, target_arch = "wasm32"))]
mod tests;
