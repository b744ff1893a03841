//! The lesson panel: a story told step by step (the lessons of `lessons/`, bundled by
//! [`crate::lessons`]). Each step tells, asks the class to predict, then shows the kernel's
//! answer: a live run when a probe is there, else the step's recording. Presenter mode is the
//! same panel in large type, driven by the keyboard.

use ackscope_shared::lesson::{Lesson, Look, Step};
use ackscope_shared::overview::extent_ns;
use ackscope_shared::wire::{ClassState, ClassVotes, ToProbe};
use ackscope_shared::Scenario;
use leptos::ev::KeyboardEvent;
use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::classroom::ClassRole;
use crate::files::{carried_recording, open_blob, open_url};
use crate::js::Debounce;
use crate::lessons::{self, recording_name, recording_url};
use crate::panels::class_answers::ClassAnswers;
use crate::state::{AppState, Run, RunKey};
use crate::store::Store;
use crate::timeline::model::PLOT_WIDTH;
use crate::timeline::rows::Filter;
use crate::timeline::scale::Scale;
use crate::timeline::view::{Mode, ViewState};
use crate::vm::{Vm, VmStatus};
use crate::ws::{LinkStatus, Outbox};

/// How long the presenter's timeline must stay still before the room is told what it shows:
/// short beside the second a student may wait, long beside a frame, so that a pan or a zoom is
/// one message when it ends, not sixty a second.
const VIEW_SETTLE_MS: u64 = 150;

/// Where the class is in the lessons.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LessonState {
    /// Index into [`lessons::all`].
    pub lesson: Option<usize>,
    /// From 0.
    pub step: usize,
    /// The choice made for the step's question.
    pub chosen: Option<usize>,
    /// In a class: the vote round the choice was sent in ([`ClassVotes::round`]); a choice of
    /// an ended round is cleared.
    pub vote_round: Option<u32>,
    /// The step's answer is shown (its run started or its recording opened).
    pub revealed: bool,
    /// It was shown by opening the step's recording (not a live run).
    pub recording: bool,
    /// Large type, keys to move.
    pub presenter: bool,
}

impl LessonState {
    /// Moves to step `step` of the lesson (clamped), with nothing chosen or revealed.
    pub fn go(&mut self, step: usize, steps: usize) {
        self.step = step.min(steps.saturating_sub(1));
        self.chosen = None;
        self.vote_round = None;
        self.revealed = false;
        self.recording = false;
    }

    /// A link's `?lesson=ID&step=K` (K from 1), if it names a lesson.
    pub fn from_query(search: &str, lessons: &[Lesson]) -> Option<LessonState> {
        let param = |key: &str| {
            search.trim_start_matches('?').split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == key).then(|| v.to_string())
            })
        };
        let lesson = lessons.iter().position(|l| Some(&l.id) == param("lesson").as_ref())?;
        let step = param("step").and_then(|s| s.parse::<usize>().ok()).unwrap_or(1);
        let mut state = LessonState { lesson: Some(lesson), ..LessonState::default() };
        state.go(step.saturating_sub(1), lessons[lesson].steps.len());
        Some(state)
    }
}

/// What a key does in presenter mode, by `KeyboardEvent.key`.
pub fn key_step(key: &str, step: usize, steps: usize) -> Option<usize> {
    match key {
        "ArrowRight" | "ArrowDown" | " " | "PageDown" => Some((step + 1).min(steps - 1)),
        "ArrowLeft" | "ArrowUp" | "PageUp" => Some(step.saturating_sub(1)),
        "Home" => Some(0),
        "End" => Some(steps - 1),
        _ => None,
    }
}

/// The kernel's answer in numbers, from a run of the step's scenario.
pub fn kernel_answer(run: &Run) -> String {
    if let Some(bulk) = run.bulk_summary() {
        let mut answer = format!("goodput {:.1} Mbit/s", bulk.goodput_mbps);
        let (waited_ms, probes) = bulk.closed_window();
        if let Some(ms) = waited_ms {
            answer += &format!(", the client waited {ms} ms for the server's window");
        }
        if let Some(probes) = probes {
            answer += &format!(", zero-window probes {probes}");
        }
        return answer;
    }
    let summary = run.summary();
    format!(
        "{} requests, p50 {:.2} ms, max {:.2} ms, {} stalled reads",
        summary.requests, summary.p50_ms, summary.max_ms, summary.stalled_reads
    )
}

/// The selected run, if it is a run of `scenario` (a live run of it, or its recording).
fn run_of<'a>(state: &'a AppState, scenario: &Scenario) -> Option<&'a Run> {
    state.selected().filter(|run| &run.spec == scenario)
}

#[component]
pub fn LessonPanel(
    store: Store,
    lesson: RwSignal<LessonState>,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    link_status: RwSignal<LinkStatus>,
    outbox: StoredValue<Option<Outbox>, LocalStorage>,
    /// In a class: who this page is.
    class: Option<ClassRole>,
    /// Embedded in a course's page: a linked step shows its recording at once (no question).
    embed: bool,
) -> impl IntoView {
    let problems: Vec<String> =
        lessons::all().iter().filter_map(|l| l.as_ref().err().map(ToString::to_string)).collect();
    // Parsed once for the page (lessons::playable); nothing here copies them.
    let list = StoredValue::new(lessons::playable());
    let student = class.as_ref().is_some_and(|role| !role.is_presenter());
    let in_class = class.is_some();
    let presenting = class.as_ref().is_some_and(ClassRole::is_presenter);
    // A student follows the presenter until it moves on its own.
    let follow = RwSignal::new(student);
    if let Some(linked) = web_sys::window()
        .and_then(|w| w.location().search().ok())
        .and_then(|search| list.with_value(|l| LessonState::from_query(&search, l)))
    {
        if embed {
            let (index, step) = (linked.lesson.unwrap_or_default(), linked.step);
            let id = list.with_value(|l| {
                l.get(index).filter(|l| l.steps[step].run.is_some()).map(|l| l.id.clone())
            });
            if let Some(id) = id {
                play_recording(store, &id, step);
            }
        }
        lesson.set(linked);
    }
    let current = move || -> Option<(Lesson, usize)> {
        let state = lesson.get();
        let index = state.lesson?;
        list.with_value(|l| l.get(index).cloned()).map(|l| (l, state.step))
    };
    let step_of = move || current().and_then(|(l, s)| l.steps.get(s).cloned());

    // The step's look, applied once its run is the one shown.
    let applied = StoredValue::new(None::<(usize, usize)>);
    Effect::new(move |_| {
        let state = lesson.get();
        let (Some(index), Some(step)) = (state.lesson, step_of()) else { return };
        let Some(scenario) = step.run.as_ref().and_then(|r| r.scenario()) else { return };
        let shown = store.read(|s| run_of(s, &scenario).is_some_and(|run| run.events > 0));
        let key = (index, state.step);
        if !shown || applied.get_value() == Some(key) {
            return;
        }
        applied.set_value(Some(key));
        // How long a highlighted request took, and the run's fitted scale: its look zooms to it.
        let extent = move |req: u32| {
            store.read_untracked(|s| {
                let run = run_of(s, &scenario)?;
                let index = req.checked_sub(run.analysis.first_request())? as usize;
                let extent = extent_ns(run.analysis.requests().get(index)?)?;
                Some((extent, Scale::fit(run.facts().longest_ns(), PLOT_WIDTH)))
            })
        };
        apply_look(&step, view, filter, extent);
    });
    // Moving to another step drops what the last one's look set.
    Effect::new(move |previous: Option<(Option<usize>, usize)>| {
        let now = lesson.with(|s| (s.lesson, s.step));
        if previous.is_some_and(|p| p != now) {
            filter.set(Filter::default());
        }
        now
    });

    // The kernel's answer: the numbers of the shown run, when it is a run of this step.
    let kernel_numbers = Memo::new(move |_| {
        let scenario = step_of()?.run.as_ref()?.scenario()?;
        store.read(|s| {
            let run = run_of(s, &scenario).filter(|run| run.events > 0)?;
            let emulated = s.selected_key().and_then(|key| s.emulated(key)).is_some();
            Some((kernel_answer(run), emulated))
        })
    });
    // The Linux in this tab, when the site carries one (`cargo xtask build-vm`).
    let vm = Vm::beside_page();
    let steps = move || current().map_or(1, |(l, _)| l.steps.len()).max(1);
    let go = move |to: usize| {
        // Read before the update: the signal cannot be read while it is being written.
        let steps = steps();
        follow.set(false);
        lesson.update(|s| s.go(to, steps));
    };
    // Presenter mode: keys move through the steps, unless typing or steering the plot.
    let keys = window_event_listener(leptos::ev::keydown, move |ev: KeyboardEvent| {
        if !lesson.with_untracked(|s| s.presenter && s.lesson.is_some()) {
            return;
        }
        // A choice just clicked (a radio button) keeps the focus: the arrows still move the
        // steps then, not the choice.
        let typing =
            ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()).is_some_and(|el| {
                let choice =
                    matches!(el.get_attribute("type").as_deref(), Some("radio" | "checkbox"));
                (matches!(el.tag_name().as_str(), "INPUT" | "SELECT" | "TEXTAREA") && !choice)
                    || el.closest("[data-testid=plot]").ok().flatten().is_some()
            });
        if typing {
            return;
        }
        let step = lesson.with_untracked(|s| s.step);
        if let Some(to) = key_step(&ev.key(), step, steps()) {
            ev.prevent_default();
            go(to);
        }
    });
    on_cleanup(move || keys.remove());

    let connected = move || link_status.get() == LinkStatus::Connected;
    let run_live = move |step: &Step| {
        let Some(spec) = step.run.as_ref().and_then(|r| r.scenario()) else { return };
        store.update(AppState::start_requested);
        let sent = outbox.with_value(|o| match o {
            Some(send) => send(&ToProbe::StartRun { spec }),
            None => Err("no probe".into()),
        });
        if sent.is_err() {
            store.update(AppState::start_failed);
        }
        lesson.update(|s| {
            s.revealed = true;
            s.recording = false;
        });
    };
    let play = move |id: &str, step: usize| {
        play_recording(store, id, step);
        lesson.update(|s| {
            s.revealed = true;
            s.recording = true;
        });
    };

    // The presenter's page tells the room where it is, whenever that changes: its step at once,
    // what its timeline shows once it stops moving for a moment (a pan redraws every frame;
    // the room takes a few messages a second). Each message holds the whole state, so a page
    // that joins late is where the room is with the first one it gets.
    if let Some(ClassRole::Presenter { secret, .. }) = class.clone() {
        let secret = StoredValue::new(secret);
        let tell_room = move || {
            // The secret first, every time, and as soon as the page is connected, lesson or
            // not: after a reconnect the probe knows the page again, and a full room lets the
            // presenter in only if its first message proves it is.
            let present = ToProbe::Present { secret: secret.get_value() };
            let state = lesson.get_untracked();
            let id = state.lesson.and_then(|i| list.with_value(|l| l.get(i).map(|l| l.id.clone())));
            let message = id.map(|id| {
                ToProbe::ClassState(ClassState {
                    lesson: id,
                    step: state.step as u32,
                    revealed: state.revealed,
                    recording: state.recording,
                    view: view.with_untracked(ViewState::class_view),
                })
            });
            outbox.with_value(|o| {
                o.as_ref().map(|send| {
                    send(&present).and_then(|()| message.as_ref().map_or(Ok(()), |m| send(m)))
                })
            });
        };
        Effect::new(move |_| {
            lesson.track();
            if connected() {
                tell_room();
            }
        });
        let shown = Memo::new(move |_| view.with(ViewState::class_view));
        let debounce = Debounce::new(std::time::Duration::from_millis(VIEW_SETTLE_MS));
        Effect::new(move |first: Option<()>| {
            // Read, not only tracked: a memo never read is never computed, and never hears of
            // the view changing.
            shown.with(|_| ());
            if first.is_none() {
                return; // the step's message above carries it
            }
            debounce.call(move || {
                if connected() {
                    tell_room();
                }
            });
        });
    }
    // A page takes the room's state: a student's while it follows, the step and what the
    // presenter shows (its recording is opened here too; a live run streams here by itself);
    // the presenter's when it has no lesson of its own (a room opened on a lesson, `ackscope
    // class --lesson ID`, or the presenter's page reloaded mid-class), and from then on it
    // moves the room itself.
    if class.is_some() {
        let played = StoredValue::new(None::<(String, u32)>);
        // Memos, so that the effect runs when the room or the newest live run changes, not on
        // every batch of a live run (and not again for its own `show_newest_live`, which it
        // would if it read the whole store: a page that redrew itself without end).
        let room = Memo::new(move |_| store.read(|s| s.class.clone()));
        let newest_live = Memo::new(move |_| {
            store.read(|s| s.live.runs().last().map(|run| RunKey::live(run.id)))
        });
        Effect::new(move |_| {
            let Some(room) = room.get() else { return };
            let takes = match student {
                true => follow.get(),
                false => lesson.with_untracked(|s| s.lesson.is_none()),
            };
            if !takes {
                return;
            }
            let Some(index) = list.with_value(|l| l.iter().position(|l| l.id == room.lesson))
            else {
                return;
            };
            lesson.update(|s| {
                // Another step: choose afresh ("vote again" on the same step clears the choice
                // by its round, below).
                if (s.lesson, s.step) != (Some(index), room.step as usize) {
                    s.chosen = None;
                    s.vote_round = None;
                }
                s.lesson = Some(index);
                s.step = room.step as usize;
                s.revealed = room.revealed;
                s.recording = room.recording;
            });
            // What the presenter's timeline shows: the layout, the zoom, the selected request.
            if view.with_untracked(ViewState::class_view) != room.view {
                view.update(|v| v.follow(room.view));
            }
            let key = (room.lesson.clone(), room.step);
            if room.revealed && room.recording && played.get_value().as_ref() != Some(&key) {
                played.set_value(Some(key));
                play_recording(store, &room.lesson, room.step as usize);
            }
            let newest = newest_live.get();
            if room.revealed
                && !room.recording
                && newest.is_some()
                && store.read_untracked(AppState::selected_key) != newest
            {
                store.update(AppState::show_newest_live);
            }
        });
    }

    // A student's answer goes to the room while the room's round on that step is open (a
    // student exploring another step answers only for themselves).
    let open_round = move |id: &str, step: usize| {
        store.read_untracked(|s| {
            let votes = s.class_votes.as_ref()?;
            (votes.lesson == id && votes.step as usize == step && !votes.revealed)
                .then_some(votes.round)
        })
    };
    let vote = move |id: &str, step: usize, choice: usize| {
        let Some(round) = open_round(id, step).filter(|_| student) else { return };
        lesson.update(|s| s.vote_round = Some(round));
        // A refusal of an earlier vote no longer stands.
        store.update(|s| s.rejected = None);
        let message = ToProbe::Vote {
            lesson: id.to_string(),
            step: step as u32,
            round,
            choice: choice.min(u8::MAX.into()) as u8,
        };
        outbox.with_value(|o| o.as_ref().map(|send| send(&message)));
    };
    // The room's votes, as a memo: what shows them is redrawn when they change, not at every
    // batch of a live run.
    let votes_now = Memo::new(move |_| store.read(|s| s.class_votes.clone()));
    if student {
        let id_of = move |index: usize| list.with_value(|l| l.get(index).map(|l| l.id.clone()));
        // A new round of the question this page shows ("vote again", or the room back on the
        // step): a choice sent in another round is cleared, to be made again.
        Effect::new(move |_| {
            let Some(ClassVotes { lesson: id, step, round, .. }) = votes_now.get() else { return };
            let (index, here, sent) = lesson.with_untracked(|s| (s.lesson, s.step, s.vote_round));
            let on_it = index.and_then(id_of).is_some_and(|i| i == id) && here == step as usize;
            if on_it && sent.is_some_and(|sent| sent != round) {
                lesson.update(|s| {
                    s.chosen = None;
                    s.vote_round = None;
                });
            }
        });
        // A page that reconnects has a new place in the room, without its vote: it sends its
        // choice again while its round is open.
        Effect::new(move |_| {
            if !connected() {
                return;
            }
            let state = lesson.get_untracked();
            let (Some(index), Some(choice), Some(sent)) =
                (state.lesson, state.chosen, state.vote_round)
            else {
                return;
            };
            let Some(id) = id_of(index) else { return };
            if open_round(&id, state.step) == Some(sent) {
                vote(&id, state.step, choice);
            }
        });
    }
    // The room's votes on the step this page shows, if the room is on it.
    let votes_here = move |id: &str, step: usize| {
        votes_now.get().filter(|v| v.lesson == id && v.step as usize == step)
    };

    let picker = move |ev: leptos::ev::Event| {
        let value = event_target_value(&ev);
        follow.set(false);
        lesson.update(|s| {
            s.lesson = value.parse().ok();
            s.go(0, 1);
        });
    };
    let options = list.with_value(|l| {
        l.iter()
            .enumerate()
            .map(
                |(i, lesson)| view! { <option value=i.to_string()>{lesson.title.clone()}</option> },
            )
            .collect_view()
    });
    let selected_value =
        move || lesson.with(|s| s.lesson.map(|i| i.to_string()).unwrap_or_default());

    let body = move || {
        let (lesson_now, index) = current()?;
        let step = lesson_now.steps.get(index)?.clone();
        let count = lesson_now.steps.len();
        let id = lesson_now.id.clone();
        let state = lesson.get();
        // The presenter of a class does not answer: the class does.
        let must_choose = step.question.is_some() && state.chosen.is_none() && !presenting;
        let busy = move || store.read(|s| s.is_running() || s.start_pending);
        // Read in the closures below, not here: the step's DOM is not rebuilt on every batch of
        // a live run, only the numbers are.
        let numbers = move || match kernel_numbers.get() {
            None => "The kernel's numbers appear here once the run is shown.".to_string(),
            Some((numbers, false)) => format!("What this kernel did: {numbers}."),
            Some((numbers, true)) => {
                format!("What the Linux in this tab did (an emulated machine): {numbers}.")
            }
        };
        let question = step.question.clone().map(|question| {
            let choices = question
                .choices
                .iter()
                .enumerate()
                .map(|(i, choice)| {
                    let class = match (state.revealed, i == question.answer, state.chosen == Some(i)) {
                        (true, true, _) => "choice answer",
                        (true, false, true) => "choice wrong",
                        _ => "choice",
                    };
                    view! {
                        <label class=class>
                            <input
                                type="radio"
                                name="lesson-choice"
                                data-testid="lesson-choice"
                                data-choice=i.to_string()
                                prop:checked={state.chosen == Some(i)}
                                prop:disabled=state.revealed
                                on:change={
                                    let id = id.clone();
                                    move |_| {
                                        lesson.update(|s| s.chosen = Some(i));
                                        vote(&id, index, i);
                                    }
                                }
                            />
                            {choice.clone()}
                        </label>
                    }
                })
                .collect_view();
            let revealed = state.revealed.then(|| {
                view! {
                    <div class="lesson-answer" data-testid="lesson-answer" role="status">
                        <p><strong>{format!("The answer: {}.", question.choices[question.answer])}</strong>" "{question.reveal.clone()}</p>
                        <p class="kernel" data-testid="lesson-kernel">{numbers}</p>
                    </div>
                }
            });
            // In a class: how the room answered (the presenter's page also sees, before the
            // reveal, how many have), and the presenter's reveal and "vote again".
            let answers = in_class.then(|| {
                let (id, question) = (id.clone(), question.clone());
                move || {
                    votes_here(&id, index)
                        .filter(|votes| presenting || !votes.rounds.is_empty())
                        .map(|votes| {
                            let question = question.clone();
                            view! { <ClassAnswers votes question presenter=presenting /> }
                        })
                }
            });
            let room_controls = presenting.then(|| match state.revealed {
                false => view! {
                    <button
                        type="button"
                        data-testid="lesson-reveal"
                        title="show every page the answer and how the class voted"
                        on:click=move |_| lesson.update(|s| s.revealed = true)
                    >"Reveal the answer"</button>
                }
                .into_any(),
                true => view! {
                    <button
                        type="button"
                        data-testid="lesson-vote-again"
                        title="hide the answer and let the class vote again, after discussing; both votes stay shown"
                        on:click=move |_| lesson.update(|s| {
                            s.revealed = false;
                            s.recording = false;
                            s.chosen = None;
                        })
                    >"Vote again"</button>
                }
                .into_any(),
            });
            view! {
                <fieldset class="lesson-question" data-testid="lesson-question">
                    <legend>{question.ask.clone()}</legend>
                    {choices}
                </fieldset>
                {answers}
                {room_controls.map(|button| view! { <div class="lesson-actions">{button}</div> })}
                {revealed}
            }
        });
        let no_question_numbers = (step.question.is_none() && state.revealed).then(|| {
            view! { <p class="kernel" data-testid="lesson-kernel">{numbers}</p> }
        });
        let actions = step.run.clone().map(|_| {
            let (live_step, rec_id) = (step.clone(), id.clone());
            let (vm_step, vm_name) = (step.clone(), format!("{id}-step-{} in this tab", index + 1));
            let in_tab = move |_| {
                let Some(spec) = vm_step.run.as_ref().and_then(|r| r.scenario()) else { return };
                vm.run(store, &spec, vm_name.clone());
                lesson.update(|s| {
                    s.revealed = true;
                    s.recording = false;
                });
            };
            let vm_absent = move || vm.status.with(|s| *s == VmStatus::Absent);
            let vm_busy = move || !vm.status.with(VmStatus::takes_runs);
            view! {
                <div class="lesson-actions">
                    <button
                        hidden=student
                        type="button"
                        data-testid="lesson-run"
                        prop:disabled=move || must_choose || !connected() || busy()
                        title=move || if must_choose { "choose an answer first" } else if connected() { "run this step on this machine's kernel" } else { "no probe: play the recording instead" }
                        on:click=move |_| run_live(&live_step)
                    >"Run it live"</button>
                    <button
                        type="button"
                        data-testid="lesson-recording"
                        prop:disabled=must_choose
                        title=move || if must_choose { "choose an answer first" } else { "the run recorded for this lesson by ackscope's probe" }
                        on:click=move |_| play(&rec_id, index)
                    >"Play the recording"</button>
                    <button
                        hidden=move || student || vm_absent()
                        type="button"
                        data-testid="lesson-run-vm"
                        prop:disabled=move || must_choose || vm_busy()
                        title="run this step on a Linux kernel emulated in this tab (v86): no probe needed"
                        on:click=in_tab
                    >"Run it on the Linux in this tab"</button>
                    {must_choose.then(|| view! { <span class="hint">"Predict first: choose an answer."</span> })}
                    {move || vm.status.with(VmStatus::sentence).map(|s| view! { <span class="hint" data-testid="lesson-vm-status" role="status">{s}</span> })}
                    {move || vm.note.get().map(|s| view! { <span class="error" data-testid="lesson-vm-note" role="status">{s}</span> })}
                </div>
            }
        });
        let paragraphs = step.text.iter().map(|p| view! { <p>{p.clone()}</p> }).collect_view();
        Some(view! {
            <div class="lesson-step" data-testid="lesson-step" data-lesson=id.clone() data-step=(index + 1).to_string() data-steps=count.to_string()>
                <p class="lesson-count" data-testid="lesson-count">{format!("{} · step {} of {count}", lesson_now.title, index + 1)}</p>
                <h3>{step.title.clone()}</h3>
                {paragraphs}
                {question}
                {no_question_numbers}
                {actions}
                <div class="lesson-nav">
                    <button type="button" data-testid="lesson-prev" prop:disabled={index == 0} on:click=move |_| go(index.saturating_sub(1))>"Back"</button>
                    <button type="button" data-testid="lesson-next" prop:disabled={index + 1 >= count} on:click=move |_| go(index + 1)>"Next"</button>
                </div>
            </div>
        })
    };
    let problems = (!problems.is_empty()).then(|| {
        view! { <p class="error" data-testid="lesson-error">{problems.join("; ")}</p> }
    });
    view! {
        <section class="card lesson" data-testid="lesson-panel">
            <div class="lesson-head">
                <h2>"Lessons"</h2>
                <select data-testid="lesson-picker" prop:value=selected_value on:change=picker>
                    <option value="">"Choose a lesson…"</option>
                    {options}
                </select>
                <button
                    type="button"
                    data-testid="lesson-present"
                    aria-pressed=move || lesson.with(|s| s.presenter).to_string()
                    title="large type; the arrow keys, space, Home and End move through the steps"
                    on:click=move |_| lesson.update(|s| s.presenter = !s.presenter)
                >"Presenter mode"</button>
            </div>
            {problems}
            {class.clone().filter(|_| student).map(|role| view! {
                <div class="class-bar" data-testid="class-bar">
                    <span>{format!("Class {}", role.code())}</span>
                    <label>
                        <input
                            type="checkbox"
                            data-testid="class-follow"
                            prop:checked=move || follow.get()
                            on:change=move |ev| follow.set(event_target_checked(&ev))
                        />
                        " follow the presenter (off: explore freely)"
                    </label>
                    {move || store.read(|s| s.rejected.clone()).map(|reason| view! {
                        <span class="error" data-testid="class-refused" role="status">{reason}</span>
                    })}
                    <button type="button" data-testid="class-back" prop:disabled=move || follow.get() on:click=move |_| follow.set(true)>
                        "Back to the presenter"
                    </button>
                </div>
            })}
            {class.clone().filter(|_| presenting).map(|role| view! {
                <p class="class-bar" data-testid="class-bar">{format!("Presenting to class {}: every student's page follows this one.", role.code())}</p>
            })}
            {body}
        </section>
    }
}

/// Opens step `step`'s recording of lesson `id` (a copy opened before goes, so the list holds
/// one per step).
fn play_recording(store: Store, id: &str, step: usize) {
    let name = recording_name(id, step);
    store.update(|state| {
        let stale: Vec<_> = state.files().iter().filter(|f| f.name == name).map(|f| f.id).collect();
        for id in stale {
            state.close_file(id);
        }
    });
    match carried_recording(&name) {
        Some(blob) => open_blob(store, name, blob),
        None => open_url(store, recording_url(id, step)),
    }
}

/// Points the view at what a step names.
/// Shows what a step highlights: a class filtered, a request selected with the timeline zoomed
/// to it (`extent`: how long it took and the run's fitted scale, if known), a time range, or
/// the run-clock lanes.
fn apply_look(
    step: &Step,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    extent: impl Fn(u32) -> Option<(u64, Scale)>,
) {
    for look in &step.look {
        match *look {
            Look::Class(class) => filter.set(Filter { class: Some(class), ..Filter::default() }),
            Look::Request(req) => view.update(|v| {
                v.mode = Mode::Aligned;
                v.selected = Some(req);
                v.top = (req as usize).saturating_sub(2);
                if let Some((extent, home)) = extent(req) {
                    v.fit(0, extent, home);
                }
            }),
            Look::Range { from_ns, to_ns } => {
                view.update(|v| v.window = Some((from_ns, to_ns - from_ns)))
            }
            Look::Lane { .. } => view.update(|v| v.mode = Mode::RunClock),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_move_through_the_steps_and_stop_at_the_ends() {
        assert_eq!(key_step("ArrowRight", 0, 5), Some(1));
        assert_eq!(key_step(" ", 4, 5), Some(4), "the last step stays the last");
        assert_eq!(key_step("ArrowLeft", 0, 5), Some(0));
        assert_eq!(key_step("End", 1, 5), Some(4));
        assert_eq!(key_step("Home", 3, 5), Some(0));
        assert_eq!(key_step("x", 3, 5), None);
    }

    #[test]
    fn a_link_names_a_lesson_and_a_step_from_one() {
        let list: Vec<Lesson> = lessons::all().into_iter().map(Result::unwrap).collect();
        let state = LessonState::from_query("?lesson=reconnect&step=2", &list).unwrap();
        assert_eq!(list[state.lesson.unwrap()].id, "reconnect");
        assert_eq!(state.step, 1);
        let clamped = LessonState::from_query("?step=99&lesson=forty-ms", &list).unwrap();
        assert_eq!(clamped.step, list[clamped.lesson.unwrap()].steps.len() - 1);
        assert_eq!(LessonState::from_query("?lesson=nope", &list), None);
    }
}
