//! The run lists: the live session's runs with Open and Download, and one card per opened file.

use leptos::ev::{Event, KeyboardEvent, MouseEvent};
use leptos::prelude::*;
use web_sys::HtmlInputElement;

use crate::files::{blob_of, close_file, open_files, read_from_request, save};
use crate::session_file::DOWNLOAD_NAME;
use crate::state::{AppState, FileId, Reach, Run, RunKey, Source};
use crate::store::Store;

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
    /// Request/response runs and watches can be marked for the Compare view (others have no
    /// latencies).
    comparable: bool,
    /// Events received so far (`data-events`: what a benchmark counts to see nothing was lost).
    events: u64,
}

impl RunEntry {
    fn of(source: Source, run: &Run, selected: Option<RunKey>) -> RunEntry {
        let key = RunKey { source, run: run.id };
        let figure = if let Some(bulk) = run.bulk_summary() {
            format!("{:.1} Mbit/s", bulk.goodput_mbps)
        } else if !run.is_comparable() {
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
            comparable: run.is_comparable(),
            events: run.events,
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
                    data-events=entry.events.to_string()
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
                    <div class="run-foot">
                        <span class="run-figure num">{entry.figure.clone()}</span>
                        {entry.comparable.then(|| compare_toggle(store, entry.key))}
                    </div>
                </li>
            </For>
        </ul>
    }
}

/// The "compare" checkbox of a run entry. The entry selects its run on a click or a key: the
/// checkbox's events stop at its label, so that marking a run does not also show it.
fn compare_toggle(store: Store, key: RunKey) -> impl IntoView {
    view! {
        <label
            class="compare-toggle"
            title="compare this run with the other marked runs"
            on:click=|ev: MouseEvent| ev.stop_propagation()
            on:keydown=|ev: KeyboardEvent| ev.stop_propagation()
        >
            <input
                type="checkbox"
                data-testid="compare-toggle"
                prop:checked=move || store.read(|state| state.is_compared(key))
                on:change=move |_| store.update(|state| state.toggle_compare(key))
            />
            "compare"
        </label>
    }
}

/// The live session's runs, and the session-file actions: open one, save this one.
#[component]
pub fn RunList(
    store: Store,
    /// A student's page in a class: it starts no runs, the presenter's come to it.
    student: bool,
) -> impl IntoView {
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
                fallback=move || {
                    let how = match student {
                        true => "the presenter's runs appear here as they run",
                        false => "press Run",
                    };
                    view! {
                        <p class="hint" data-testid="runs-empty">
                            {format!("No runs from the probe yet: {how}, or open a session file (or drop one on the page).")}
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
pub fn OpenedFiles(store: Store) -> impl IntoView {
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
    let progress = move || store.read(|state| state.file(id).and_then(|file| file.progress()));
    // While the file loads its runs are not listed: a run entry's figures sort every latency,
    // which would cost the page a frame at every step of a big file.
    let entries = move || {
        store.read(|state| match state.file(id).and_then(|file| file.progress()) {
            Some(_) => Vec::new(),
            None => RunEntry::list(state, Source::File(id)),
        })
    };
    let close = move |_| close_file(store, id);
    let read_from_note = move || store.read(|state| state.file(id)?.read_from_note());
    // A file whose end indexes its blocks can be read from any request: the way into a file
    // past what the page holds.
    let readable = move || {
        store.read(|state| {
            state
                .file(id)
                .is_some_and(|file| file.reads_from_a_request() && file.progress().is_none())
        })
    };
    let request = RwSignal::new(String::new());
    let read_from = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        match request.get_untracked().trim().parse::<u32>() {
            Ok(req) => read_from_request(store, id, None, req, Reach::From),
            Err(_) => store.update(|state| {
                state.file_note(
                    id,
                    format!("\"{}\" is not a request number", request.get_untracked()),
                )
            }),
        }
    };
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
            {move || {
                read_from_note().map(|note| view! { <p class="hint" data-testid="file-read-from-note">{note}</p> })
            }}
            {move || {
                readable().then(|| view! {
                    <details class="read-from" data-testid="file-read-from">
                        <summary>"read from a request"</summary>
                        <form on:submit=read_from>
                            <input
                                type="number"
                                min="0"
                                placeholder="request"
                                aria-label="the request to read the file from"
                                data-testid="file-read-from-request"
                                bind:value=request
                            />
                            <button type="submit" class="button" data-testid="file-read-from-go">
                                "read"
                            </button>
                        </form>
                        <p class="hint">
                            "Reads the run's blocks from the one that holds it, not the file's start: any part of a file past what the page holds."
                        </p>
                    </details>
                })
            }}
            {move || {
                progress().map(|(read, total)| {
                    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
                    let text = format!("reading {:.0} of {:.0} MiB", mib(read), mib(total));
                    view! {
                        <div class="loading" data-testid="load-progress" data-read=read.to_string() data-total=total.to_string()>
                            <progress max=total.max(1).to_string() value=read.to_string()></progress>
                            <span>{text}</span>
                        </div>
                    }
                })
            }}
            {run_list(store, entries)}
        </section>
    }
}
