//! Finding things: the filters, "go to request", "next slowest" and the steps from stall to
//! stall. Each ends by selecting a request and bringing it into view.

use std::sync::Arc;

use ackscope_shared::attribution::Stall;
use leptos::ev::KeyboardEvent;
use leptos::prelude::*;
use web_sys::HtmlInputElement;

use ackscope_shared::overview::extent_ns;

use super::layout::class_word;
use super::model::{RowList, RunFacts, PAGE_ROWS};
use super::rows::{step_stall, Filter, CLASSES};
use super::scale::Scale;
use super::view::{Mode, ViewState};
use crate::files::read_from_request;
use crate::state::{Ranks, Reach};
use crate::store::Store;

/// Filters, go-to, next-slowest and the stall steps.
#[component]
pub(super) fn FindBar(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    message: RwSignal<Option<String>>,
) -> impl IntoView {
    let select_req = move |req: u32| select_request(facts, rows, view, filter, req, message);
    let goto = move |ev: KeyboardEvent| {
        if ev.key() != "Enter" {
            return;
        }
        let input: HtmlInputElement = event_target(&ev);
        match input.value().trim().parse::<u32>() {
            Ok(req) if read_file_from(store, facts, req, message) => {}
            Ok(req) => select_req(req),
            Err(_) => message.set(Some(format!("\"{}\" is not a request number", input.value()))),
        }
    };
    let next_slowest = move |_| {
        let selected = view.with_untracked(|v| v.selected);
        // A run held in part, every request of it ranked: the next slowest of them all.
        if let Some(ranks) = whole_ranks(store, facts) {
            if let Some(req) = ranks.next_slowest(selected) {
                go_anywhere(store, facts, rows, view, filter, req, message);
            }
            return;
        }
        let next =
            facts.with_untracked(|f| f.as_ref().and_then(|f| f.facts.next_slowest(selected)));
        if let Some(req) = next {
            select_req(req);
        }
    };
    let step =
        move |forward: bool| step_to_stall(store, facts, rows, view, filter, forward, message);
    let class_options = CLASSES
        .iter()
        .map(|class| view! { <option value=class_word(*class)>{class.name()}</option> })
        .collect_view();
    let range = move || {
        let total = rows.with(|r| r.rows.len());
        let top = view.with(|v| v.top);
        let mode = view.with(|v| v.mode);
        match mode {
            Mode::Aligned if total == 0 => "no request matches".to_string(),
            Mode::Aligned => format!(
                "requests {}-{} of {} shown{}",
                top + 1,
                (top + PAGE_ROWS).min(total),
                total,
                if filter.with(Filter::is_empty) { String::new() } else { " (filtered)".into() }
            ),
            Mode::RunClock => "all requests on the run's clock".to_string(),
        }
    };
    view! {
        <div class="find-bar">
            <label class="check">
                <input
                    type="checkbox"
                    data-testid="only-stalled"
                    prop:checked=move || filter.with(|f| f.only_stalled)
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        filter.update(|f| f.only_stalled = on);
                        view.update(|v| v.top = 0);
                    }
                />
                "only requests that waited"
            </label>
            <label>
                "class "
                <select
                    data-testid="class-filter"
                    // Also set from outside (a lesson's step points at a class).
                    prop:value=move || filter.with(|f| f.class.map(class_word).unwrap_or_default())
                    on:change=move |ev| {
                        let value = event_target_value(&ev);
                        let class = CLASSES.iter().copied().find(|c| class_word(*c) == value);
                        filter.update(|f| f.class = class);
                        view.update(|v| v.top = 0);
                    }
                >
                    <option value="">"any"</option>
                    {class_options}
                </select>
            </label>
            <label>
                "at least "
                <input
                    type="number"
                    min="0"
                    step="any"
                    class="num short"
                    data-testid="min-latency-ms"
                    placeholder="0"
                    on:change=move |ev| {
                        let ms = event_target_value(&ev).trim().parse::<f64>().unwrap_or(0.0).max(0.0);
                        filter.update(|f| f.min_latency_ns = (ms * 1e6) as u64);
                        view.update(|v| v.top = 0);
                    }
                />
                " ms"
            </label>
            <label>
                "go to request "
                <input
                    type="text"
                    inputmode="numeric"
                    class="num short"
                    data-testid="goto-request"
                    placeholder="N"
                    on:keydown=goto
                />
            </label>
            <button type="button" class="button" data-testid="next-slowest" on:click=next_slowest>
                "next slowest"
            </button>
            <button type="button" class="button" data-testid="prev-stall" title="previous stall (p)" on:click=move |_| step(false)>
                "◀ stall"
            </button>
            <button type="button" class="button" data-testid="next-stall" title="next stall (n)" on:click=move |_| step(true)>
                "stall ▶"
            </button>
            <span class="row-range" data-testid="row-range">{range}</span>
            {move || message.get().map(|m| view! { <p class="find-message" role="status" data-testid="find-message">{m}</p> })}
        </div>
    }
}

/// Selects `req`, scrolls to it and, if it is outside a zoomed window, fits the window to it.
pub(crate) fn select_request(
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    req: u32,
    message: RwSignal<Option<String>>,
) {
    let known = facts.with_untracked(|f| f.as_ref().and_then(|f| f.facts.extent_of(req)));
    if known.is_none() {
        let (first, count) =
            facts.with_untracked(|f| f.as_ref().map_or((0, 0), |f| (f.facts.first, f.facts.len())));
        message.set(Some(format!(
            "no request {req}: this run has requests {first}-{}",
            (first as usize + count).saturating_sub(1)
        )));
        return;
    }
    // A request the filter hides is shown by clearing the filter: the user asked for it.
    if rows.with_untracked(|r| r.rows.position(req).is_none()) {
        filter.set(Filter::default());
    }
    message.set(None);
    let position = rows.with_untracked(|r| r.rows.position(req));
    let total = rows.with_untracked(|r| r.rows.len());
    view.update(|v| {
        v.selected = Some(req);
        if v.mode == Mode::Aligned {
            if let Some(position) = position {
                v.reveal(position, total, PAGE_ROWS);
            }
        }
    });
}

/// "Go to request" of a request that a file's run holds and the page did not read (the file
/// was past what the page holds, or read from another request): reads the file from it, and
/// says so. False when the request is read, or the run is not of such a file.
fn read_file_from(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    req: u32,
    message: RwSignal<Option<String>>,
) -> bool {
    let Some(key) = facts.with_untracked(|f| f.as_ref().map(|f| f.key)) else {
        return false;
    };
    match store.read_untracked(|state| state.read_to_show(key, req)) {
        Some((file, first)) => {
            message.set(Some(format!(
                "request {req} was not read: reading the file from request {first}"
            )));
            read_from_request(store, file, Some(key.run), req, Reach::Around);
            true
        }
        None => false,
    }
}

/// The facts of every request of the shown run, when the page holds it in part and a pass
/// over the whole file made them.
fn whole_ranks(store: Store, facts: Memo<Option<RunFacts>>) -> Option<Arc<Ranks>> {
    let key = facts.with_untracked(|f| f.as_ref().map(|f| f.key))?;
    store.read_untracked(|state| state.ranks_of(key))
}

/// Selects request `req`, reading the file around it first if the page does not hold it.
pub(super) fn go_anywhere(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    req: u32,
    message: RwSignal<Option<String>>,
) {
    if !read_file_from(store, facts, req, message) {
        select_request(facts, rows, view, filter, req, message);
    }
}

/// Where `n` / `p` step from: the stall last stepped to while its request is still the selected
/// one; else the selected request (the next stall after it, or the previous before it); else
/// the start. `stalls` are in request order.
fn from_here(
    stalls: &[Stall],
    stepped: Option<usize>,
    selected: Option<u32>,
    forward: bool,
) -> Option<usize> {
    match (stepped, selected) {
        (Some(index), Some(req)) if stalls.get(index).is_some_and(|s| s.req.0 == req) => {
            Some(index)
        }
        (_, Some(req)) if forward => stalls.partition_point(|s| s.req.0 <= req).checked_sub(1),
        (_, Some(req)) => Some(stalls.partition_point(|s| s.req.0 < req)),
        (_, None) => None,
    }
}

/// `n` / `p`: the next or previous stall the filter keeps; selects its request and fits it.
pub(super) fn step_to_stall(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    forward: bool,
    message: RwSignal<Option<String>>,
) {
    let Some(key) = facts.with_untracked(|f| f.as_ref().map(|f| f.key)) else { return };
    let (stepped, selected) = view.with_untracked(|v| (v.stall, v.selected));
    // A run held in part, every request of it ranked: from request to request with a stall,
    // through all of them, reading the file where the next is not held.
    if let Some(ranks) = whole_ranks(store, facts) {
        match filter.with_untracked(|filter| ranks.next_stalled(selected, forward, filter)) {
            Some(req) => go_anywhere(store, facts, rows, view, filter, req, message),
            None => message.set(Some(match forward {
                true => "no stall after this one in the whole run".into(),
                false => "no stall before this one in the whole run".into(),
            })),
        }
        return;
    }
    let found = store.read_untracked(|state| {
        let run = state.run(key)?;
        let stalls = &run.attribution().stalls;
        let current = from_here(stalls, stepped, selected, forward);
        let index = facts.with_untracked(|f| {
            let f = f.as_ref()?;
            filter.with_untracked(|filter| step_stall(stalls, &f.facts, filter, current, forward))
        })?;
        let stall = &stalls[index];
        let start = run
            .analysis
            .requests()
            .get(stall.req.0.checked_sub(run.analysis.first_request())? as usize)?
            .start_ns?;
        Some((
            index,
            stall.req.0,
            stall.start_ns.saturating_sub(start),
            stall.end_ns.saturating_sub(start),
        ))
    });
    let Some((index, req, _, _)) = found else {
        message.set(Some(if forward {
            "no stall after this one".into()
        } else {
            "no stall before this one".into()
        }));
        return;
    };
    select_request(facts, rows, view, filter, req, message);
    view.update(|v| v.stall = Some(index));
}

/// `f`: fits the window to the selected request (aligned: its own extent; run clock: its
/// place on the run's clock).
pub(super) fn fit_selection(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    view: RwSignal<ViewState>,
    home: Scale,
) {
    let Some(req) = view.with_untracked(|v| v.selected) else { return };
    let Some(key) = facts.with_untracked(|f| f.as_ref().map(|f| f.key)) else { return };
    let mode = view.with_untracked(|v| v.mode);
    let span = store.read_untracked(|state| {
        let run = state.run(key)?;
        let index = req.checked_sub(run.analysis.first_request())? as usize;
        let request = run.analysis.requests().get(index)?;
        let start = request.start_ns?;
        let end = extent_ns(request)? + start;
        Some(match mode {
            Mode::Aligned => (0, end - start),
            Mode::RunClock => (start, end),
        })
    });
    if let Some((from, to)) = span {
        view.update(|v| v.fit(from, to, home));
    }
}
