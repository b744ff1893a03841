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

pub mod calls;
pub mod child;
pub mod kernel;
pub mod metrics;
pub mod packets;
pub mod process;
pub mod sock_diag;
pub mod sockops;
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

/// What a watch hands over as it goes, in order.
#[derive(Debug)]
pub enum Handed {
    /// A batch of events, at most [`EVENTS_PER_MESSAGE`].
    Events(Vec<Event>),
    /// What the tries changed on which process, in full, whenever it changed. With `split`, a
    /// group of tries (the `--try` flags, or one a page added) went into force: the events
    /// that follow are of the programs with it, those before were handed over first. Without,
    /// the options reached more sockets.
    Tried { tried: Vec<OptionTried>, split: bool },
}

/// Watches until `stop` is set or `spec.duration_ms` has passed, handing over [`Handed`]
/// values as they come (events in batches of at most [`EVENTS_PER_MESSAGE`]), and what the
/// tries did to `on_note` as it happens; calls `each_step` with the watcher after every step:
/// it may change the watch (a watched command's new ports, [`child`]; a page's added try) and
/// end it with an outcome (the command exited). Returns how the watch ended and what it
/// counted (every option tried is put back by then). `on_handed` may set `stop` (a file that
/// cannot be written).
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
    // What `--try` changed, and when, until the step after it has read the packets sent
    // before the change.
    let mut changed: Option<(Vec<OptionTried>, bool, u64)> = None;
    let outcome = loop {
        if stop.load(Ordering::SeqCst) {
            break RunOutcome::Interrupted;
        }
        if until.is_some_and(|until| Instant::now() >= until) {
            break RunOutcome::Completed;
        }
        watcher.step(&mut batch);
        watcher.take_notes().into_iter().for_each(&mut on_note);
        // An option is set at the end of a step, after its packets were read; packets sent
        // while it was being set (the walk of /proc for the sockets' processes takes up to
        // tens of milliseconds) are read by the next step. The split waits for that step and
        // goes by time: what was stamped before the change is of the programs as they were.
        if let Some(change) = changed.take() {
            hand_over_split(&mut batch, change, &mut on_handed);
            handed_over = Instant::now();
        }
        if let Some((tried, split)) = watcher.trials.take_record() {
            changed = Some((tried, split, watcher.tried_at_ns()));
        }
        if let Some(ended) = each_step(&mut watcher) {
            break ended;
        }
        // While a split waits for the next step, the batch waits with it: the change may be
        // stamped before some of the packets this step read (a first byte set in the kernel).
        let full = batch.len() >= EVENTS_PER_MESSAGE;
        if full || (changed.is_none() && handed_over.elapsed() >= HAND_OVER_EVERY) {
            if let Some(change) = changed.take() {
                hand_over_split(&mut batch, change, &mut on_handed);
            }
            if !batch.is_empty() {
                let events = std::mem::replace(&mut batch, Vec::with_capacity(EVENTS_PER_MESSAGE));
                on_handed(Handed::Events(events));
            }
            handed_over = Instant::now();
        }
    };
    let counts = watcher.finish(&mut batch);
    if let Some(change) = changed {
        hand_over_split(&mut batch, change, &mut on_handed);
    }
    if !batch.is_empty() {
        on_handed(Handed::Events(batch));
    }
    (outcome, counts)
}

/// Hands over the events of `batch` stamped before the change (up to the first stamped at or
/// after it), then what was tried; the rest stays in `batch`, for the run after the change.
fn hand_over_split(
    batch: &mut Vec<Event>,
    (tried, split, at_ns): (Vec<OptionTried>, bool, u64),
    on_handed: &mut impl FnMut(Handed),
) {
    let after = batch.iter().position(|e| e.at_ns >= at_ns).unwrap_or(batch.len());
    let later = batch.split_off(after);
    let before = std::mem::replace(batch, later);
    if !before.is_empty() {
        on_handed(Handed::Events(before));
    }
    on_handed(Handed::Tried { tried, split });
}

#[cfg(test)]
mod tests {
    use ackscope_shared::tried::TriedOption;
    use ackscope_shared::{ConnId, EventKind, ReqId, Side};

    use super::*;

    /// The packets read in the step after an option was set are split by their stamps: those
    /// sent before the change are the run before's.
    #[test]
    fn the_events_stamped_before_the_change_go_before_what_was_tried() {
        let event = |at_ns| Event {
            at_ns,
            side: Side::Client,
            conn: ConnId(1),
            req: ReqId(0),
            kind: EventKind::Closed,
        };
        let mut batch: Vec<Event> = [10, 20, 30, 40].into_iter().map(event).collect();
        let tried = OptionTried {
            option: TriedOption::NoDelay,
            side: Side::Server,
            pid: 1,
            command: "server".into(),
            sockets: 1,
            already_on: 0,
        };
        let mut handed = Vec::new();
        hand_over_split(&mut batch, (vec![tried.clone()], true, 25), &mut |h| handed.push(h));
        let [Handed::Events(before), Handed::Tried { tried: what, split: true }] = &handed[..]
        else {
            panic!("{handed:?}")
        };
        assert_eq!(before.iter().map(|e| e.at_ns).collect::<Vec<_>>(), [10, 20]);
        assert_eq!(what, std::slice::from_ref(&tried));
        assert_eq!(batch.iter().map(|e| e.at_ns).collect::<Vec<_>>(), [30, 40], "run 2's");
        // Nothing before the change: no empty batch, only what was tried.
        let mut handed = Vec::new();
        hand_over_split(&mut batch, (vec![tried], false, 5), &mut |h| handed.push(h));
        assert!(matches!(&handed[..], [Handed::Tried { split: false, .. }]), "{handed:?}");
        assert_eq!(batch.len(), 2);
    }
}
