//! The selected run's session exported as `ackscope export` writes it: a Perfetto trace
//! (syscalls, stalls, TCP_INFO), JSON (every message and each run's report, as `export --json`
//! prints them) and, for a run with packets, pcapng with each stall's explanation on the packet
//! that ended it. The formats are shared's; the bytes move in [`crate::files::export`].

use ackscope_shared::Scenario;
use leptos::prelude::*;

use crate::files::{export, Export};
use crate::state::{AppState, Source};
use crate::store::Store;

/// What the export buttons need of the selected run: its session, and whether it has packets.
fn target(state: &AppState) -> Option<(Source, bool)> {
    let key = state.selected_key()?;
    let run = state.run(key)?;
    let packets = run.instruments.capture || matches!(run.spec, Scenario::Import(_));
    Some((key.source, packets))
}

#[component]
pub fn ExportButtons(store: Store) -> impl IntoView {
    let status = RwSignal::new(None::<String>);
    let target = store.memo(target);
    move || {
        target.get().map(|(source, packets)| {
            let to_perfetto = move |_| export(store, source, Export::Perfetto, status);
            let to_pcapng = move |_| export(store, source, Export::Pcapng, status);
            let to_json = move |_| export(store, source, Export::Json, status);
            view! {
                <p class="card exports" aria-label="export">
                    <button data-testid="export-perfetto" on:click=to_perfetto
                        title="the session as a trace for ui.perfetto.dev: syscalls, stalls, TCP_INFO">
                        "export for Perfetto"
                    </button>
                    <button data-testid="export-json" on:click=to_json
                        title="the session as JSON, as `ackscope export FILE --json` prints it: every message and each run's report">
                        "export JSON"
                    </button>
                    {packets.then(|| view! {
                        <button data-testid="export-pcapng" on:click=to_pcapng
                            title="the session's packets for Wireshark, each stall's explanation on the packet that ended it">
                            "export pcapng"
                        </button>
                    })}
                    {move || status.get().map(|said| view! {
                        <span class="export-status" data-testid="export-status">{said}</span>
                    })}
                </p>
            }
        })
    }
}
