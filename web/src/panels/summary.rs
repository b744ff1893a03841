//! The summary card of the selected run: what it was, what recorded it, its numbers and why its
//! calls waited; and the note that stands where a timeline cannot be drawn.

use ackscope_shared::analysis::STALLED_READS_MEANING;
use ackscope_shared::control::ClockSync;
use ackscope_shared::tried::{Sides, TriedOption};
use ackscope_shared::wire::HostFacts;
use ackscope_shared::{RunId, Scenario, Side};
use leptos::prelude::*;

use crate::state::{AppState, RunStatus, Source};
use crate::text::{
    describe_instruments, describe_watch_instruments, host_rows, BulkText, ClassText, SummaryText,
};

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
pub struct SelectedRun {
    id: u32,
    file: Option<String>,
    describe: String,
    status: String,
    instruments: String,
    host: Option<HostFacts>,
    /// A run against a remote server: its clock, as a sentence.
    clock: Option<String>,
    /// A run of the Linux in this tab: what ran it, the emulated machine.
    emulated: Option<String>,
    numbers: Numbers,
    /// A running watch of this probe's: the fixes it can try on the watched programs.
    live_try: Option<LiveTry>,
}

/// What a running watch of this probe's can try on the programs it watches, for the "try"
/// buttons beside its stalls' fixes (docs/WATCH.md, "Trying a fix from the page").
#[derive(Clone, Debug, PartialEq)]
pub struct LiveTry {
    run: RunId,
    /// The probe may, or what it lacks.
    rights: Result<(), String>,
    /// The options in force on each side in this run (tried before it began).
    in_force: Vec<(TriedOption, Side)>,
    /// Asked for in this run, not yet in force: the run splits when a socket has it.
    asked: Vec<Sides>,
    /// The probe's refusal of what was asked.
    refused: Option<String>,
}

impl LiveTry {
    fn of(state: &AppState, run: &crate::state::Run) -> Option<LiveTry> {
        let running = run.status == RunStatus::Running;
        let rights = state.try_rights.clone().filter(|_| running)?;
        let Scenario::Watch(_) = run.spec else { return None };
        let in_force = run.tried.entries().iter().map(|entry| (entry.option, entry.side)).collect();
        let asked = state.try_asked.iter().filter(|(asked, _)| *asked == run.id);
        Some(LiveTry {
            run: run.id,
            rights,
            in_force,
            asked: asked.map(|(_, sides)| *sides).collect(),
            refused: state.try_refused.clone(),
        })
    }
}

/// Asks the running watch to try a fix: its run, the option, the sides.
pub type TryFix = Callback<(RunId, TriedOption, Sides)>;

#[derive(Clone, Debug, PartialEq)]
enum Numbers {
    /// The numbers, and why the calls that waited waited.
    Rr(SummaryText, Vec<ClassText>),
    /// A watch's exchanges, in the same fields (and test ids) as a run's requests, why its
    /// packets waited, and what the kernel's delayed-ACK timer was seen doing (a watch as root).
    Watched(SummaryText, Vec<ClassText>, Option<String>),
    Bulk(BulkText),
    /// An imported capture: its conversations, and why its packets waited.
    Imported(Vec<String>, Vec<ClassText>),
    /// A scenario the browser has no analysis for (the echo server alone).
    Events(u64),
    /// A watch that read no packet: its event count, and its exchanges bounded from the
    /// sockets' counters, in the words `ackscope watch` prints.
    Estimated(u64, String),
}

impl SelectedRun {
    pub fn of(state: &AppState) -> Option<SelectedRun> {
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
            instruments: match run.spec {
                Scenario::Watch(_) => describe_watch_instruments(&run.instruments),
                _ => describe_instruments(&run.instruments),
            },
            host: state.session(key.source).and_then(|s| s.host()).cloned(),
            clock: run.clock.map(|clock| clock_line(&clock)),
            emulated: state.emulated(key).map(str::to_string),
            live_try: match key.source {
                Source::Live => LiveTry::of(state, run),
                Source::File(_) => None,
            },
            numbers: match run.bulk_summary() {
                Some(bulk) => Numbers::Bulk(BulkText::of(bulk, run.events)),
                None if run.watch.is_some() => watch_numbers(run),
                None if run.imported.is_some() => imported_numbers(run),
                None if run.is_rr() => Numbers::Rr(
                    SummaryText::of(run.summary()),
                    run.attribution().classes.iter().map(ClassText::of).collect(),
                ),
                None => Numbers::Events(run.events),
            },
        })
    }
}

/// A watch's exchanges as requests and its stall classes, as `ackscope watch` and `show` print
/// them; its event count and the exchanges its counters bound when it read no packet.
fn watch_numbers(run: &crate::state::Run) -> Numbers {
    let Some(watch) = &run.watch else { return Numbers::Events(run.events) };
    match watch.summary() {
        Some(summary) => Numbers::Watched(
            SummaryText::of(&summary),
            watch.classes().iter().map(ClassText::of).collect(),
            watch.kernel_seen().then(|| watch.kernel_words()),
        ),
        None => match watch.estimated() {
            Some(estimated) => Numbers::Estimated(run.events, estimated.line()),
            None => Numbers::Events(run.events),
        },
    }
}

/// An imported run's conversations as `ackscope show` lists them, and its stall classes.
fn imported_numbers(run: &crate::state::Run) -> Numbers {
    let Some(imported) = &run.imported else { return Numbers::Events(run.events) };
    let connections = match &run.spec {
        Scenario::Import(spec) => spec.connections.as_slice(),
        _ => &[],
    };
    let lines = imported.connection_lines(connections);
    Numbers::Imported(lines, imported.classes().iter().map(ClassText::of).collect())
}

fn imported_lines(connections: Vec<String>, classes: Vec<ClassText>) -> impl IntoView {
    let none = classes.is_empty();
    view! {
        <ul class="connections" aria-label="conversations">
            {connections
                .into_iter()
                .map(|line| view! { <li data-testid="imported-connection">{line}</li> })
                .collect_view()}
        </ul>
        {none.then(|| view! { <p class="hint" data-testid="no-stalls">"no stalls seen in the packets"</p> })}
        {class_lines(classes, None)}
    }
}

/// Where the server was and how its clock was matched to this run's, as the CLI says it.
fn clock_line(clock: &ClockSync) -> String {
    format!("server {}", clock.describe(None))
}

/// The words of a run's numbers, or of a watch's (its requests are exchanges, its stalls are
/// the packets' waits, not reads the kernel held).
struct Labels {
    requests: &'static str,
    rate: &'static str,
    stalled: &'static str,
    meaning: &'static str,
}

const RUN_LABELS: Labels = Labels {
    requests: "requests",
    rate: "requests/s",
    stalled: "stalled reads",
    meaning: STALLED_READS_MEANING,
};

const WATCH_LABELS: Labels = Labels {
    requests: "exchanges",
    rate: "exchanges/s",
    stalled: "stalls",
    meaning: "exchanges: a client's request up to the server's last answer byte, found from the \
              packets' direction; stalls: the waits the packets show (Nagle holding data for a \
              delayed ACK), each classified below",
};

fn rr_numbers(text: SummaryText, labels: &'static Labels) -> impl IntoView {
    view! {
        <dl>
            <div><dt>{labels.requests}</dt><dd class="num" data-testid="summary-requests">{text.requests}</dd></div>
            <div><dt>{labels.rate}</dt><dd class="num" data-testid="summary-rps">{text.rps}</dd></div>
            <div><dt>"p50 (ms)"</dt><dd class="num" data-testid="summary-p50-ms">{text.p50_ms}</dd></div>
            <div><dt>"p99 (ms)"</dt><dd class="num" data-testid="summary-p99-ms">{text.p99_ms}</dd></div>
            <div><dt>"max (ms)"</dt><dd class="num" data-testid="summary-max-ms">{text.max_ms}</dd></div>
            <div title=labels.meaning>
                <dt>{labels.stalled}</dt>
                <dd class="num" class:stalls=text.any_stalls data-testid="summary-stalled-reads">
                    {text.stalled_reads}
                </dd>
            </div>
        </dl>
    }
}

/// A run's or a watch's numbers, what they mean, and the classes of its waits, with the fixes
/// a running watch can try (`live`).
fn numbers(
    text: SummaryText,
    classes: Vec<ClassText>,
    labels: &'static Labels,
    live: Option<(LiveTry, TryFix)>,
) -> impl IntoView {
    let tryable = classes.iter().any(|class| class.live_fix.is_some());
    let live = live.filter(|_| tryable);
    let note = live.as_ref().and_then(|(live, _)| try_note(live));
    view! {
        {rr_numbers(text, labels)}
        <p class="hint" data-testid="stalled-reads-meaning">{labels.meaning}</p>
        {class_lines(classes, live)}
        {note}
    }
}

/// Under the classes: what the probe lacks to try a fix, or why it refused the one asked.
fn try_note(live: &LiveTry) -> Option<impl IntoView> {
    let (testid, words) = match (&live.rights, &live.refused) {
        (Err(lacks), _) => ("try-rights", lacks.clone()),
        (Ok(()), Some(refused)) => ("try-refused", format!("The probe refused: {refused}")),
        (Ok(()), None) => return None,
    };
    Some(view! { <p class="try-note" role="status" data-testid=testid>{words}</p> })
}

/// Beside a class's fixes, in a running watch the probe may change: its live fix as a button
/// ("try TCP_NODELAY on the server's sockets"), or that it is asked for, or in force.
fn try_button(fix: (TriedOption, Side), live: &LiveTry, act: TryFix) -> Option<impl IntoView> {
    let (option, side) = fix;
    live.rights.as_ref().ok()?;
    let (name, whose) = (option.name(), side.name());
    let state = if live.in_force.contains(&fix) {
        Err(format!("{name} is on on the {whose}'s sockets in this run"))
    } else if live.asked.iter().any(|asked| asked.includes(side)) {
        Err(format!("asked: the run splits when the {whose}'s first socket has {name}"))
    } else {
        Ok(())
    };
    let run = live.run;
    Some(match state {
        Ok(()) => view! {
            <button
                type="button"
                class="try-fix"
                data-testid="try-fix"
                data-side=whose
                on:click=move |_| act.run((run, option, Sides::of(side)))
            >
                {format!("try {name} on the {whose}'s sockets")}
            </button>
        }
        .into_any(),
        Err(words) => {
            view! { <span class="try-state" data-testid="try-state" data-side=whose>{words}</span> }
                .into_any()
        }
    })
}

fn class_lines(classes: Vec<ClassText>, live: Option<(LiveTry, TryFix)>) -> impl IntoView {
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
                                {class.live_fix.zip(live.as_ref()).and_then(|(fix, (live, act))| try_button(fix, live, *act))}
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

/// The summary of the selected run, or, with none, what to do and the probe's machine.
#[component]
pub fn SummaryPanel(
    selected: Memo<Option<SelectedRun>>,
    live_host: Memo<Option<HostFacts>>,
    try_fix: TryFix,
) -> impl IntoView {
    let selected = move || selected.get();
    let live_host = move || live_host.get();
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
                {run.emulated.map(|label| view! { <p class="kernel-facts emulated" data-testid="summary-kernel">{label}</p> })}
                {run.host.map(machine_line)}
                {run.clock.map(|line| view! { <p class="clock" data-testid="summary-clock">{line}</p> })}
                {match run.numbers {
                    Numbers::Rr(text, classes) => numbers(text, classes, &RUN_LABELS, None).into_any(),
                    Numbers::Watched(text, classes, timer) => view! {
                        {numbers(text, classes, &WATCH_LABELS, run.live_try.map(|live| (live, try_fix)))}
                        {timer.map(|words| view! {
                            <p class="kernel-timer" data-testid="watch-kernel-timer">
                                "kernel: " {words}
                            </p>
                        })}
                    }
                    .into_any(),
                    Numbers::Bulk(text) => bulk_numbers(text).into_any(),
                    Numbers::Imported(connections, classes) => {
                        imported_lines(connections, classes).into_any()
                    }
                    Numbers::Events(events) => event_count(events).into_any(),
                    Numbers::Estimated(events, line) => view! {
                        {event_count(events)}
                        <p class="estimate" data-testid="watch-estimate">"exchanges: " {line}</p>
                    }
                    .into_any(),
                }}
            </section>
        }
        .into_any(),
    }
    }
}

/// Why the selected run has no timeline, if it has none: [`NoTimeline`]'s model.
pub fn no_timeline_note(state: &AppState) -> Option<&'static str> {
    state.selected().and_then(|run| match run.spec {
        _ if run.has_rows() => None,
        Scenario::Bulk(_) => Some("Bulk runs have no per-request timeline yet."),
        Scenario::Import(_) => Some(
            "An imported capture has packets, not syscalls: it has no per-request timeline. \
             Its conversations and the stalls its packets show are in the summary above.",
        ),
        Scenario::Watch(_) => Some(
            "A watch without packets (no CAP_NET_RAW) cannot tell its exchanges apart: it has \
             no per-exchange timeline. The bound its sockets' counters give is in the summary \
             above.",
        ),
        _ => Some("This run has no per-request timeline."),
    })
}

/// Where the timeline would be, for a run of another scenario: says there is none rather than
/// showing nothing.
#[component]
pub fn NoTimeline(note: Memo<Option<&'static str>>) -> impl IntoView {
    move || {
        note.get().map(|note| {
            view! {
                <section class="card timeline-note" data-testid="no-timeline">
                    <p class="hint">{note}</p>
                </section>
            }
        })
    }
}
