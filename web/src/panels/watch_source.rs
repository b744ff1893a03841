//! The watch source: another program's connections on this host, watched from the page as
//! `ackscope watch` watches them (docs/WATCH.md). The field takes a port, a few, or `pid:N`;
//! the probe finds a process's ports, says what it can see (packets need CAP_NET_RAW) and runs
//! the watch as a run: the run form's Stop ends it, the summary shows its exchanges and stalls.
//! The field's text to a spec is [`watch_spec`] (pure).

use ackscope_shared::wire::ToProbe;
use ackscope_shared::{Scenario, WatchSpec};
use leptos::ev::SubmitEvent;
use leptos::prelude::*;

use super::run_form::{refusal, start_blocked};
use crate::state::{AppState, RunStatus};
use crate::store::Store;
use crate::ws::{LinkStatus, Outbox};

/// Ports one watch takes at once: each is more comparisons in every packet filter of the watch
/// (`WatchSpec::MAX_PORTS`, the one rule, which the probe checks again).
pub const MAX_PORTS: usize = ackscope_shared::WatchSpec::MAX_PORTS;

/// What the field says, as the examples the messages give.
const FORMS: &str = "a port (8080), up to 8 ports (8080,8443), or pid:N for a process's ports";

/// The watch the field `text` asks for: ports, or a process whose ports the probe finds (`pid:N`
/// is sent with no ports). The error names what is wrong and what to type instead.
pub fn watch_spec(text: &str) -> Result<WatchSpec, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("watch: type {FORMS}"));
    }
    let spec = |ports, pid| WatchSpec { ports, pid, duration_ms: None, evidence: String::new() };
    let pid_part = text.get(..4).filter(|head| head.eq_ignore_ascii_case("pid:"));
    if let Some(head) = pid_part {
        let number = text[head.len()..].trim();
        return match number.parse::<u32>() {
            Ok(pid) if pid > 0 => Ok(spec(Vec::new(), Some(pid))),
            _ => Err(format!(
                "watch: {text:?} is not a process: give its id as a whole number after pid:, \
                 e.g. pid:4242 (see `pgrep NAME`)"
            )),
        };
    }
    let mut ports: Vec<u16> = Vec::new();
    for part in text.split([',', ' ']).map(str::trim).filter(|part| !part.is_empty()) {
        if part.to_ascii_lowercase().starts_with("pid:") {
            return Err(
                "watch: either ports or one pid:N, not both; watch the process alone, or its \
                 ports by number"
                    .into(),
            );
        }
        match part.parse::<u16>() {
            Ok(port) if port > 0 => ports.push(port),
            _ => {
                return Err(format!(
                    "watch: {part:?} is not a port: a port is a number from 1 to 65535; type \
                     {FORMS}"
                ))
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() {
        return Err(format!("watch: no port in {text:?}; type {FORMS}"));
    }
    if ports.len() > MAX_PORTS {
        return Err(format!(
            "watch: {} ports, and a watch takes at most {MAX_PORTS} at once; remove some, or \
             watch the others from the command line (ackscope watch --port ...)",
            ports.len()
        ));
    }
    Ok(spec(ports, None))
}

/// The "watch a port" card, beside the run form. `asked`: the last start came from here, so
/// the probe's refusal of it is shown here (the run form shows the others).
#[component]
pub fn WatchSource(
    store: Store,
    link_status: RwSignal<LinkStatus>,
    outbox: StoredValue<Option<Outbox>, LocalStorage>,
    asked: RwSignal<bool>,
) -> impl IntoView {
    let target = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let blocked = move || start_blocked(store, link_status);
    // The watch that is going, in the probe's words ("watching port 8080 on this host (...)").
    let watching = move || {
        store.read(|state| {
            state.live.runs().iter().find_map(|run| match &run.spec {
                Scenario::Watch(spec) if run.status == RunStatus::Running => Some(format!(
                    "watching {}; Stop ends it, keeping what it saw",
                    spec.ports_text()
                )),
                _ => None,
            })
        })
    };
    let submit = move |event: SubmitEvent| {
        event.prevent_default();
        let spec = match watch_spec(&target.get_untracked()) {
            Ok(spec) => spec,
            Err(invalid) => {
                error.set(Some(invalid));
                return;
            }
        };
        error.set(None);
        asked.set(true);
        store.update(AppState::start_requested);
        let message = ToProbe::StartRun { spec: Scenario::Watch(spec) };
        let sent = outbox.with_value(|outbox| match outbox {
            Some(send) => send(&message),
            None => Err("no probe to talk to: open this page from the URL ackscope prints".into()),
        });
        if let Err(reason) = sent {
            store.update(AppState::start_failed);
            error.set(Some(reason));
        }
    };
    view! {
        <form class="card watch-source" on:submit=submit novalidate=true>
            <h2>"Watch a port"</h2>
            <p class="hint">
                "Another program's connections on this host, as ackscope watch sees them: its \
                 exchanges and the stalls its packets show."
            </p>
            <label>
                <span>"port or process"</span>
                <input
                    type="text"
                    spellcheck="false"
                    autocomplete="off"
                    placeholder="8080 or pid:4242"
                    data-testid="watch-port"
                    aria-invalid=move || error.with(Option::is_some).to_string()
                    prop:value=move || target.get()
                    on:input=move |ev| target.set(event_target_value(&ev))
                />
                <small>"a port, up to 8 (8080,8443), or pid:N: the ports of that process"</small>
            </label>
            <div class="actions">
                <button type="submit" data-testid="watch-start" disabled=move || blocked().is_some()>
                    "Watch"
                </button>
                <span class="why" data-testid="watch-status">
                    {move || watching().or_else(|| blocked().map(str::to_string))}
                </span>
            </div>
            {move || {
                error
                    .get()
                    .map(|message| {
                        view! {
                            <p class="error" role="alert" data-testid="watch-error">
                                {message}
                            </p>
                        }
                    })
            }}
            {move || refusal(store, asked.get())}
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(ports: &[u16]) -> WatchSpec {
        WatchSpec { ports: ports.to_vec(), ..WatchSpec::default() }
    }

    #[test]
    fn ports_and_a_pid_become_the_spec_the_probe_completes() {
        assert_eq!(watch_spec("8080"), Ok(ports(&[8080])));
        assert_eq!(watch_spec(" 8443, 8080 "), Ok(ports(&[8080, 8443])));
        assert_eq!(watch_spec("8080 8443 8080"), Ok(ports(&[8080, 8443])));
        let eight = "1,2,3,4,5,6,7,65535";
        assert_eq!(watch_spec(eight), Ok(ports(&[1, 2, 3, 4, 5, 6, 7, 65535])));
        // A process's ports are the probe's to find: none are sent.
        let pid = WatchSpec { ports: vec![], pid: Some(4242), ..WatchSpec::default() };
        assert_eq!(watch_spec("pid:4242"), Ok(pid.clone()));
        assert_eq!(watch_spec(" PID: 4242 "), Ok(pid));
        // The duration is the page's Stop, the evidence the probe's to say.
        let spec = watch_spec("8080").unwrap();
        assert_eq!((spec.duration_ms, spec.evidence.as_str()), (None, ""));
    }

    #[test]
    fn what_is_not_a_watch_is_named_with_what_to_type() {
        let refused = |text: &str| watch_spec(text).unwrap_err();
        for empty in ["", "  ", ","] {
            assert!(refused(empty).contains("pid:N"), "{empty:?}: {}", refused(empty));
        }
        for not_a_port in ["0", "65536", "http", "80a", "-1", "8080;8443"] {
            let message = refused(not_a_port);
            assert!(
                message.contains("is not a port") && message.contains("1 to 65535"),
                "{message}"
            );
        }
        let nine = refused("1,2,3,4,5,6,7,8,9");
        assert!(nine.contains("9 ports") && nine.contains("at most 8"), "{nine}");
        for not_a_pid in ["pid:", "pid:0", "pid:abc", "pid:-4", "pid:99999999999"] {
            let message = refused(not_a_pid);
            assert!(message.contains("not a process") && message.contains("pid:4242"), "{message}");
        }
        let both = refused("8080,pid:4242");
        assert!(both.contains("not both"), "{both}");
    }
}
