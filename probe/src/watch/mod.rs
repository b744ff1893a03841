//! Watching the sockets of processes ackscope did not start: a service on this host, its
//! clients, whatever owns a port (`ackscope watch`, docs/WATCH.md).
//!
//! A run measures its own sockets through their descriptors (`net`); a watched process's
//! descriptors are not ours, so what the kernel says about them comes from interfaces that
//! answer for any socket of the network namespace:
//! - [`sock_diag`]: every TCP socket's addresses, state, owner and `tcp_info`, without
//!   privileges;
//! - [`packets`]: the watched ports' packets on every interface (CAP_NET_RAW);
//! - [`process`]: which process owns a socket (`/proc`), to name a connection's sides and to
//!   find a process's ports (`--pid`);
//! - [`child`]: a command the watch starts and watches (`watch -- COMMAND`), its ports found
//!   as they appear;
//! - [`metrics`]: `--metrics`, the watch's counts in Prometheus's text format over HTTP;
//! - [`watcher`]: the loop that makes both a session's events, through the shared exchange
//!   rule (`ackscope_shared::exchange`), for the one session reducer every run goes through.

pub mod child;
pub mod kernel;
pub mod metrics;
pub mod packets;
pub mod process;
pub mod sock_diag;
pub mod tune;
pub mod watcher;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ackscope_shared::tried::OptionTried;
use ackscope_shared::wire::{RunOutcome, EVENTS_PER_MESSAGE};
use ackscope_shared::{Event, WatchSpec};

use watcher::{WatchCounts, Watcher};

/// Batches of events are handed over at least this often, so a live view keeps up.
const HAND_OVER_EVERY: Duration = Duration::from_millis(50);

/// Watches until `stop` is set or `spec.duration_ms` has passed, handing the events to
/// `on_events` in batches (at most [`EVENTS_PER_MESSAGE`] each) as they come, and what its
/// `--try` options did to `on_note` as it happens; returns how the watch ended and what it
/// counted (every option tried is put back by then). `on_events` may set `stop` (a file that
/// cannot be written).
pub fn run(
    watcher: Watcher,
    spec: &WatchSpec,
    stop: &AtomicBool,
    mut on_events: impl FnMut(Vec<Event>),
    on_note: impl FnMut(String),
) -> (RunOutcome, WatchCounts) {
    let on_handed = |handed| match handed {
        Handed::Events(events) => on_events(events),
        // Without `--try` (the page's watch) nothing is tried.
        Handed::Tried(_) => {}
    };
    run_until(watcher, spec, stop, on_handed, on_note, |_| None)
}

/// What a watch hands over as it goes, in order.
#[derive(Debug)]
pub enum Handed {
    /// A batch of events, at most [`EVENTS_PER_MESSAGE`].
    Events(Vec<Event>),
    /// What `--try` changed on which process, in full, whenever it changed: the first time, the
    /// options went into force, and the events that follow are of the programs with them (the
    /// events before were handed over first); later, the options reached more sockets.
    Tried(Vec<OptionTried>),
}

/// [`run`], handing over [`Handed`] values, and calling `each_step` with the watcher after
/// every step: it may change the watch (a watched command's new ports, [`child`]) and end it
/// with an outcome (the command exited).
pub fn run_until(
    mut watcher: Watcher,
    spec: &WatchSpec,
    stop: &AtomicBool,
    mut on_handed: impl FnMut(Handed),
    mut on_note: impl FnMut(String),
    mut each_step: impl FnMut(&mut Watcher) -> Option<RunOutcome>,
) -> (RunOutcome, WatchCounts) {
    let started = Instant::now();
    let until = spec.duration_ms.map(|ms| started + Duration::from_millis(u64::from(ms)));
    let mut batch: Vec<Event> = Vec::with_capacity(EVENTS_PER_MESSAGE);
    let mut handed_over = Instant::now();
    let outcome = loop {
        if stop.load(Ordering::SeqCst) {
            break RunOutcome::Interrupted;
        }
        if until.is_some_and(|until| Instant::now() >= until) {
            break RunOutcome::Completed;
        }
        watcher.step(&mut batch);
        watcher.take_notes().into_iter().for_each(&mut on_note);
        // An option is set at the end of a step, after its packets were read: they, and every
        // event before, are of the programs as they were.
        if let Some(tried) = watcher.trials.take_record() {
            if !batch.is_empty() {
                let events = std::mem::replace(&mut batch, Vec::with_capacity(EVENTS_PER_MESSAGE));
                on_handed(Handed::Events(events));
            }
            on_handed(Handed::Tried(tried));
            handed_over = Instant::now();
        }
        if let Some(ended) = each_step(&mut watcher) {
            break ended;
        }
        if batch.len() >= EVENTS_PER_MESSAGE || handed_over.elapsed() >= HAND_OVER_EVERY {
            if !batch.is_empty() {
                let events = std::mem::replace(&mut batch, Vec::with_capacity(EVENTS_PER_MESSAGE));
                on_handed(Handed::Events(events));
            }
            handed_over = Instant::now();
        }
    };
    let counts = watcher.finish(&mut batch);
    if !batch.is_empty() {
        on_handed(Handed::Events(batch));
    }
    (outcome, counts)
}
