//! The selected request's details: its ladder diagram, and each of its waits with its evidence
//! and fixes in the words the command line uses.

use ackscope_shared::attribution::Stall;
use ackscope_shared::Side;
use leptos::prelude::*;

use crate::ladder::{ladder, line_x, Ladder, CLIENT_X, SERVER_X, WIDTH};
use crate::state::AppState;
use crate::timeline::layout::class_word;
use crate::timeline::scale::format_duration;

/// Everything the panel shows, computed from the state in one read.
#[derive(Clone, Debug, PartialEq)]
pub struct Selected {
    req: u32,
    conn: Option<u32>,
    latency: Option<String>,
    latency_ns: Option<u64>,
    ladder: Option<Ladder>,
    stalls: Vec<Stall>,
}

impl Selected {
    /// Request `req` of the selected run, if that is a request/response run and has it.
    pub fn of(state: &AppState, req: u32) -> Option<Selected> {
        let run = state.selected().filter(|run| run.has_rows())?;
        let index = req.checked_sub(run.analysis.first_request())? as usize;
        let request = run.analysis.requests().get(index)?;
        let stalls = run.attribution().of_request(req);
        Some(Selected {
            req,
            conn: request.conn.map(|conn| conn.0),
            latency: request.latency_ns().map(format_duration),
            latency_ns: request.latency_ns(),
            ladder: ladder(&run.analysis, request, stalls),
            stalls: stalls.to_vec(),
        })
    }
}

/// The selected request ([`Selected::of`] the request the view selects).
#[component]
pub fn SelectionPanel(selected: Memo<Option<Selected>>) -> impl IntoView {
    move || {
        selected.get().map(|selected| {
            let Selected { req, conn, latency, latency_ns, ladder, stalls } = selected;
            let heading = format!(
                "Request {req}{}{}",
                conn.map(|c| format!(", connection {c}")).unwrap_or_default(),
                latency.map(|l| format!(": {l}")).unwrap_or_else(|| ": in flight".into())
            );
            view! {
                <section class="card selection" data-testid="selection" data-request=req.to_string() data-latency-ns=latency_ns.map(|ns| ns.to_string()) aria-label="selected request">
                    <h2>{heading}</h2>
                    <div class="selection-body">
                        {ladder.map(ladder_svg)}
                        <div class="waits">
                            {if stalls.is_empty() {
                                view! { <p class="hint">"No call of this request waited more than 10 ms."</p> }.into_any()
                            } else {
                                view! { <ul class="wait-list">{stalls.into_iter().map(wait_item).collect_view()}</ul> }.into_any()
                            }}
                        </div>
                    </div>
                </section>
            }
        })
    }
}

fn wait_item(stall: Stall) -> impl IntoView {
    let held = stall.is_held_read();
    let fixes = stall.class.fixes(stall.from, stall.to);
    let headline = format!(
        "{}, {}->{}: {}",
        stall.class.name(),
        stall.from.name(),
        stall.to.name(),
        format_duration(stall.wait_ns)
    );
    view! {
        <li class="wait" class:held=held data-testid="selection-stall" data-class=class_word(stall.class)>
            <p class="headline">{headline}</p>
            <p class="evidence">{stall.evidence}</p>
            <span class="fixes-head">"fixes:"</span>
            <ul class="fixes">{fixes.into_iter().map(|fix| view! { <li>{fix}</li> }).collect_view()}</ul>
        </li>
    }
}

fn ladder_svg(ladder: Ladder) -> impl IntoView {
    let height = ladder.height;
    let bottom = height - 20.0;
    let lines = [(Side::Client, "client"), (Side::Server, "server")].map(|(side, name)| {
        let x = line_x(side);
        view! {
            <g class="side-line">
                <text class="side-name" x=x y="14">{name}</text>
                <line x1=x x2=x y1="22" y2=bottom />
            </g>
        }
    });
    let marks = ladder
        .marks
        .into_iter()
        .map(|(y, label)| view! { <text class="time-mark" x="4" y=y + 3.0>{label}</text> })
        .collect_view();
    let calls = ladder
        .calls
        .into_iter()
        .map(|call| {
            let x = line_x(call.side) - 4.0;
            let class = if call.stalled {
                "call stalled"
            } else if call.waited {
                "call waited"
            } else {
                "call"
            };
            let text_x = match call.side {
                Side::Client => CLIENT_X - 10.0,
                Side::Server => SERVER_X + 10.0,
            };
            let anchor = match call.side {
                Side::Client => "end",
                Side::Server => "start",
            };
            let label = (call.height >= 10.0 || call.stalled).then(|| {
                view! { <text class="call-text" x=text_x y=call.y + 9.0 text-anchor=anchor>{call.text.clone()}</text> }
            });
            view! {
                <g>
                    <rect class=class x=x y=call.y width="8" height=call.height><title>{call.text.clone()}</title></rect>
                    {label}
                </g>
            }
        })
        .collect_view();
    let packets = ladder
        .packets
        .into_iter()
        .map(|packet| {
            let (x1, x2) = match packet.from {
                Side::Client => (CLIENT_X + 5.0, SERVER_X - 5.0),
                Side::Server => (SERVER_X - 5.0, CLIENT_X + 5.0),
            };
            let class = match (packet.late, packet.pure_ack) {
                (true, _) => "packet late",
                (false, true) => "packet ack",
                (false, false) => "packet data",
            };
            view! {
                <g class=class data-testid="ladder-packet" data-late=packet.late.to_string()>
                    <line x1=x1 x2=x2 y1=packet.y y2=packet.y + 6.0 />
                    <text x=(x1 + x2) / 2.0 y=packet.label_y text-anchor="middle">{packet.text}</text>
                </g>
            }
        })
        .collect_view();
    view! {
        <svg class="ladder" data-testid="ladder" width=WIDTH height=height role="img" aria-label="ladder diagram of the selected request">
            {lines}
            {marks}
            {packets}
            {calls}
        </svg>
    }
}
