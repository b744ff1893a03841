//! The run form: the knobs of a request/response run (or a preset), checked as the probe checks
//! them, and the Run button. The fields' text to a scenario is [`crate::form`]'s (pure).

use ackscope_shared::presets::{Preset, PRESETS};
use ackscope_shared::wire::ToProbe;
use ackscope_shared::{PerSide, RrSpec, Scenario, WritePattern};
use leptos::ev::{Event, SubmitEvent};
use leptos::prelude::*;

use crate::form::{write_pattern, FieldError, FormFields};
use crate::state::AppState;
use crate::store::Store;
use crate::ws::LinkStatus;
use crate::ws::Outbox;

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

/// Why a run (or a watch) cannot be started right now, if it cannot.
pub fn start_blocked(store: Store, link_status: RwSignal<LinkStatus>) -> Option<&'static str> {
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
}

/// The run form. `watch_asked`: the last start came from the watch card beside it, which then
/// shows the probe's refusal of it instead of this form.
#[component]
pub fn RunForm(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    outbox: StoredValue<Option<Outbox>, LocalStorage>,
    watch_asked: RwSignal<bool>,
) -> impl IntoView {
    let form = FormSignals::new(FormFields::from_spec(&RrSpec::default()));
    let error = RwSignal::new(None::<FieldError>);
    // Where the server side runs: empty for this probe, else an `ackscope server`'s HOST:PORT
    // and the token it printed (never part of the spec: the file keeps no token).
    let server = RwSignal::new(String::new());
    let token = RwSignal::new(String::new());
    // A bulk preset the user chose: Run sends it as it is, and the rr fields step aside.
    let bulk = RwSignal::new(None::<&'static Preset>);

    let blocked = move || start_blocked(store, link_status);

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
        let message = match remote_or_local(spec, &server.get_untracked(), &token.get_untracked()) {
            Ok(message) => message,
            Err(invalid) => {
                error.set(Some(invalid));
                return;
            }
        };
        error.set(None);
        watch_asked.set(false);
        store.update(AppState::start_requested);
        let sent = outbox.with_value(|outbox| match outbox {
            Some(send) => send(&message),
            None => Err("no probe to talk to: open this page from the URL ackscope prints".into()),
        });
        if let Err(reason) = sent {
            store.update(AppState::start_failed);
            error.set(Some(FieldError { field: None, message: reason }));
        }
    };

    // Stop: the run that is going ends after its current step, keeping what it recorded.
    let running = move || store.read(AppState::is_running);
    let stop = move |_| {
        let sent = outbox.with_value(|outbox| match outbox {
            Some(send) => send(&ToProbe::StopRun),
            None => Err("no probe to talk to: open this page from the URL ackscope prints".into()),
        });
        if let Err(reason) = sent {
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
            <label>
                <span>"server"</span>
                <input
                    type="text"
                    spellcheck="false"
                    placeholder="local"
                    data-testid="server"
                    aria-invalid=move || invalid.run("server")
                    prop:value=move || server.get()
                    on:input=move |ev| server.set(event_target_value(&ev))
                />
                <small>"local, or HOST:PORT of an ackscope server on another host (docs/REMOTE.md)"</small>
            </label>
            <label prop:hidden=move || server.get().trim().is_empty()>
                <span>"token"</span>
                <input
                    type="password"
                    autocomplete="off"
                    data-testid="server-token"
                    aria-invalid=move || invalid.run("token")
                    prop:value=move || token.get()
                    on:input=move |ev| token.set(event_target_value(&ev))
                />
                <small>"the token that ackscope server printed"</small>
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
                <button
                    type="button"
                    data-testid="stop-run"
                    hidden=move || !running()
                    title="end the run now, keeping what it recorded"
                    on:click=stop
                >
                    "Stop"
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
            {move || refusal(store, !watch_asked.get())}
        </form>
    }
}

/// The probe's refusal of the last start, if `here` is where that start was asked (the run form
/// or the watch card: one refusal is on the page at a time).
pub fn refusal(store: Store, here: bool) -> Option<impl IntoView> {
    let reason = store.read(|state| state.rejected.clone()).filter(|_| here)?;
    Some(view! {
        <p class="error" role="alert" data-testid="rejected">
            "The probe refused: "
            {reason}
        </p>
    })
}

/// The message that starts `spec`: on this probe's own server, or with a `server` address on
/// that `ackscope server`, which needs its `token`. Request/response and bulk runs go remote.
fn remote_or_local(spec: Scenario, server: &str, token: &str) -> Result<ToProbe, FieldError> {
    let server = server.trim();
    if server.is_empty() {
        return Ok(ToProbe::StartRun { spec });
    }
    let invalid = |field, message: &str| FieldError { field: Some(field), message: message.into() };
    let link = match &spec {
        Scenario::Rr(rr) => rr.link.is_some(),
        Scenario::Bulk(bulk) => bulk.link.is_some(),
        _ => {
            return Err(invalid(
                "server",
                "server: only rr and bulk runs have a remote server side",
            ))
        }
    };
    if link {
        return Err(invalid(
            "link",
            "emulated link: leave it empty with a remote server; across hosts the path is the real \
             network",
        ));
    }
    if !server.contains(':') {
        return Err(invalid("server", "server: give HOST:PORT as `ackscope server` printed it"));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(invalid("token", "token: give the token that `ackscope server` printed"));
    }
    Ok(ToProbe::StartRemoteRun { spec, server: server.into(), token: token.into() })
}

#[cfg(test)]
mod remote_tests {
    use super::*;

    #[test]
    fn an_empty_server_runs_locally_and_a_remote_one_needs_its_token() {
        let spec = Scenario::Rr(RrSpec::default());
        assert_eq!(
            remote_or_local(spec.clone(), "  ", ""),
            Ok(ToProbe::StartRun { spec: spec.clone() })
        );
        let no_token = remote_or_local(spec.clone(), "10.0.0.2:7000", "").unwrap_err();
        assert_eq!(no_token.field, Some("token"));
        let remote = remote_or_local(spec.clone(), " 10.0.0.2:7000 ", "t0k3n").unwrap();
        assert_eq!(
            remote,
            ToProbe::StartRemoteRun { spec, server: "10.0.0.2:7000".into(), token: "t0k3n".into() }
        );
        let bulk = Scenario::Bulk(Default::default());
        assert!(matches!(remote_or_local(bulk, "h:1", "t"), Ok(ToProbe::StartRemoteRun { .. })));
        let server = Scenario::Server(RrSpec::default());
        assert_eq!(remote_or_local(server, "h:1", "t").unwrap_err().field, Some("server"));
        let linked = Scenario::Rr(RrSpec {
            link: Some(ackscope_shared::spec::LinkSpec::parse("rtt=40ms").unwrap()),
            ..RrSpec::default()
        });
        assert_eq!(remote_or_local(linked, "h:1", "t").unwrap_err().field, Some("link"));
    }
}
