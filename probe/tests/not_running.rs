//! A wait that is the scheduler's, not the network's: the run's threads share one CPU with a
//! real-time busy loop that takes it for 30 ms at a time. Those waits are named "thread not
//! running" with the run-queue delay as evidence, not "send-buffer limited" or "unexplained".
//! Needs root for SCHED_FIFO (CI runs as root); skipped otherwise.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ackscope_probe::scenario;
use ackscope_shared::analysis::RunAnalysis;
use ackscope_shared::attribution::{self, StallClass};
use ackscope_shared::wire::{Instruments, RunOutcome};
use ackscope_shared::{EventKind, PerSide, RrSpec, Scenario, WritePattern};

/// Pins the calling thread (and the threads it starts afterwards) to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write within it; pid 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0);
    }
}

/// On `cpu`, as a SCHED_FIFO thread: busy for 30 ms, then asleep for 70 ms, until `stop`.
fn hog(cpu: usize, stop: &AtomicBool) -> u32 {
    pin_to(cpu);
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: a valid policy and parameter for this thread (pid 0).
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
    let mut bursts = 0;
    while !stop.load(Ordering::Relaxed) {
        let burst = Instant::now();
        while burst.elapsed() < Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        bursts += 1;
        std::thread::sleep(Duration::from_millis(70));
    }
    bursts
}

#[test]
#[ignore = "needs root (a SCHED_FIFO busy loop): cargo xtask test runs it as root"]
fn waits_for_a_cpu_are_named_as_such() {
    common::require_root("a SCHED_FIFO busy loop");
    // TCP_NODELAY and one write per message: nothing in the network makes these requests wait.
    let spec = RrSpec {
        requests: 1_000_000,
        duration_ms: Some(1500),
        size_bytes: 2048,
        nodelay: PerSide::both(true),
        write: PerSide::both(WritePattern::Single),
        ..RrSpec::default()
    };
    let stop = AtomicBool::new(false);
    let mut events = Vec::new();
    let (outcome, bursts) = std::thread::scope(|scope| {
        let hog = scope.spawn(|| hog(0, &stop));
        let run = scope.spawn(|| {
            pin_to(0);
            let never = AtomicBool::new(false);
            let mut events = Vec::new();
            let outcome = scenario::run(
                &Scenario::Rr(spec.clone()),
                Instruments::default(),
                &never,
                |batch| events.extend(batch),
            )
            .expect("a valid spec");
            (outcome, events)
        });
        let (outcome, recorded) = run.join().unwrap();
        events = recorded;
        stop.store(true, Ordering::Relaxed);
        (outcome, hog.join().unwrap())
    });
    assert_eq!(outcome, RunOutcome::Completed);
    let delays = events.iter().filter(|e| matches!(e.kind, EventKind::RunDelay { .. })).count();

    let mut analysis = RunAnalysis::new();
    analysis.push_all(&events);
    let stalls = attribution::attribute(&analysis, Some(&spec));
    let named = |class| stalls.iter().filter(|s| s.class == class).count();
    let not_running = named(StallClass::NotRunning);
    for stall in stalls.iter().take(5) {
        eprintln!("{:?} {:.1} ms: {}", stall.class, stall.wait_ns as f64 / 1e6, stall.evidence);
    }
    eprintln!(
        "{bursts} bursts, {} requests, {delays} run-delay readings, {} stalls, {not_running} \
         named thread not running",
        analysis.summary().requests,
        stalls.len()
    );
    assert!(bursts >= 10, "the busy loop ran: {bursts} bursts");
    // Each 30 ms burst stops the exchange under way: most bursts show as a stall.
    assert!(not_running >= bursts as usize / 2, "{not_running} for {bursts} bursts: {stalls:#?}");
    assert!(
        not_running * 10 >= stalls.len() * 9,
        "{not_running} of {} stalls named not running: {stalls:#?}",
        stalls.len()
    );
    let example = stalls.iter().find(|s| s.class == StallClass::NotRunning).unwrap();
    assert!(example.evidence.contains("runnable but not running"), "{}", example.evidence);
}
