//! Runs bounded by the memory they need (the second hardening round, defect 4), through the real
//! binary: a run's worst-case buffer memory is computed from its spec before it starts and
//! refused above a limit, in the same words from the browser and the command line. On the main
//! branch before the fix, 64 connections of 4 MiB messages took 1.0 GB, and 64 MiB ones were
//! accepted (16-20 GB).

use std::time::{Duration, Instant};

use ackscope_shared::wire::{ToBrowser, ToProbe};
use ackscope_shared::{RrSpec, Scenario};

mod common;

use common::{ackscope, next_message, start_from_a_page, text, ui_server};

/// 64 connections of 64 MiB requests and answers: 32 GiB of buffers at worst.
fn huge() -> RrSpec {
    RrSpec { requests: 64, connections: 64, size_bytes: 64 << 20, ..RrSpec::default() }
}

#[test]
fn the_command_line_refuses_a_run_whose_buffers_exceed_its_limit_naming_the_flags() {
    let started = Instant::now();
    let refused =
        ackscope(&["run", "rr", "--count", "64", "--connections", "64", "--size", "67108864"]);
    let err = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "a usage error: {err}");
    assert!(
        err.contains("could take 32 GiB")
            && err.contains("at most 8 GiB")
            && err.contains("lower --connections, --size or --response-size"),
        "{err}"
    );
    // Refused before anything ran (a run would take seconds and gigabytes).
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    // Within the limit, the same flags run.
    let ran = ackscope(&["run", "rr", "--count", "4", "--connections", "4", "--size", "65536"]);
    assert!(ran.status.success(), "{}", text(&ran.stderr));
}

#[test]
fn the_browser_refuses_a_run_whose_buffers_exceed_its_limit_in_the_same_words() {
    let (mut ui, addr) = ui_server();
    let spec = Scenario::Rr(huge());
    let mut page = start_from_a_page(&addr, &ToProbe::StartRun { spec });
    let refusal = loop {
        match next_message(&mut page) {
            ToBrowser::Rejected { reason } => break reason,
            ToBrowser::RunStarted { .. } => panic!("the run started"),
            _ => {}
        }
    };
    assert!(
        refusal.contains("could take 32 GiB")
            && refusal.contains("a run started from the browser may take at most 1 GiB")
            && refusal.contains("lower connections, size_bytes or response_bytes"),
        "{refusal}"
    );
    // 8 connections of 4 MiB messages (256 MiB) are within it.
    let within = RrSpec { requests: 8, connections: 8, size_bytes: 4 << 20, ..RrSpec::default() };
    common::send_frame(&mut page, &ToProbe::StartRun { spec: Scenario::Rr(within) });
    loop {
        match next_message(&mut page) {
            ToBrowser::RunStarted { .. } => break,
            ToBrowser::Rejected { reason } => panic!("refused: {reason}"),
            _ => {}
        }
    }
    let _ = ui.kill();
    let _ = ui.wait();
}
