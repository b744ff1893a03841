//! The slowest requests and the longest waits of the run as tables: DOM a screen reader reads,
//! sortable by a click on a column's head, each row a way to that request.

use leptos::prelude::*;

use super::find::select_request;
use super::layout::class_word;
use super::model::{RowList, RunFacts};
use super::rows::{Filter, Wait};
use super::scale::format_duration;
use super::view::ViewState;
use crate::store::Store;

/// Rows each table lists.
pub const TABLE_ROWS: usize = 10;

/// How a table is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// Slowest (or longest) first.
    Time,
    /// By request number.
    Request,
}

#[derive(Clone, Debug, PartialEq)]
struct StallRow {
    req: u32,
    class: &'static str,
    name: &'static str,
    direction: String,
    wait_ns: u64,
}

impl StallRow {
    fn of(wait: &Wait) -> StallRow {
        StallRow {
            req: wait.req,
            class: class_word(wait.class),
            name: wait.class.name(),
            direction: format!("{}->{}", wait.from.name(), wait.to.name()),
            wait_ns: wait.wait_ns,
        }
    }
}

#[component]
pub fn Tables(
    store: Store,
    facts: Memo<Option<RunFacts>>,
    rows: Memo<RowList>,
    view: RwSignal<ViewState>,
    filter: RwSignal<Filter>,
    message: RwSignal<Option<String>>,
) -> impl IntoView {
    let slow_order = RwSignal::new(Order::Time);
    let stall_order = RwSignal::new(Order::Time);
    let slowest = Memo::new(move |_| {
        facts.with(|f| {
            f.as_ref().map_or_else(Vec::new, |f| {
                f.facts
                    .slowest(TABLE_ROWS)
                    .into_iter()
                    .map(|req| (req, f.facts.extent_of(req).unwrap_or(0)))
                    .collect::<Vec<_>>()
            })
        })
    });
    let stalls = Memo::new(move |_| {
        facts.with(|f| {
            let f = f.as_ref()?;
            // `facts` changes with the run's events; the attribution is cached in the run. The
            // facts keep the longest waits of the settled requests: only the last few requests'
            // stalls are looked at, not every stall of the run.
            store.read_untracked(|state| {
                let stalls = &state.run(f.key)?.attribution().stalls;
                let waits = f.facts.longest_waits(stalls, TABLE_ROWS);
                Some(waits.iter().map(StallRow::of).collect::<Vec<_>>())
            })
        })
    });
    let go = move |req: u32| select_request(facts, rows, view, filter, req, message);
    let slow_rows = move || {
        let mut list = slowest.get();
        if slow_order.get() == Order::Request {
            list.sort_by_key(|(req, _)| *req);
        }
        list.into_iter()
            .map(|(req, ns)| {
                view! {
                    <tr data-testid="slowest-row" data-req=req.to_string() on:click=move |_| go(req)>
                        <td class="num"><button type="button" class="link">{req}</button></td>
                        <td class="num">{format_duration(ns)}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    let stall_rows = move || {
        let mut list = stalls.get().unwrap_or_default();
        if stall_order.get() == Order::Request {
            list.sort_by_key(|row| row.req);
        }
        list.into_iter()
            .map(|row| {
                let req = row.req;
                view! {
                    <tr data-testid="stall-row" data-req=req.to_string() data-class=row.class on:click=move |_| go(req)>
                        <td class="num"><button type="button" class="link">{req}</button></td>
                        <td>{row.name}</td>
                        <td>{row.direction}</td>
                        <td class="num">{format_duration(row.wait_ns)}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    let head = move |order: RwSignal<Order>, which: Order, text: &'static str| {
        let sorted = move || if order.get() == which { "descending" } else { "none" };
        view! {
            <th aria-sort=move || if which == Order::Request && order.get() == which { "ascending" } else { sorted() }>
                <button type="button" class="link" on:click=move |_| order.set(which)>{text}</button>
            </th>
        }
    };
    view! {
        <div class="tables">
            <table class="find-table" data-testid="slowest-table">
                <caption>"slowest requests"</caption>
                <thead><tr>{head(slow_order, Order::Request, "request")}{head(slow_order, Order::Time, "latency")}</tr></thead>
                <tbody>{slow_rows}</tbody>
            </table>
            <table class="find-table" data-testid="stalls-table">
                <caption>"longest waits"</caption>
                <thead>
                    <tr>
                        {head(stall_order, Order::Request, "request")}
                        <th>"class"</th>
                        <th>"direction"</th>
                        {head(stall_order, Order::Time, "waited")}
                    </tr>
                </thead>
                <tbody>{stall_rows}</tbody>
            </table>
        </div>
    }
}
