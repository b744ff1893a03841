//! Pages of the UI server that do not read, through the real binary: the session is kept once,
//! however many pages are open.

use std::time::{Duration, Instant};

use ackscope_shared::wire::{ToBrowser, ToProbe};
use ackscope_shared::{PerSide, RrSpec, Scenario};

mod common;

use common::{open_page, start_from_a_page, ui_server, Page};

/// Pages opened that never read a byte.
const IDLE_PAGES: u64 = 10;
/// What one page may cost the server, generously: its task, its cursor and one message on its
/// way (a WebSocket message holds at most 8,192 events, about 100 KB).
const PER_PAGE_KB: u64 = 5 * 1024;

/// Defect 3 of the second hardening round: every page got a deep copy of the session's
/// messages. After a 100,000-request run, 10 pages that never read took the UI server from
/// about 100 MB to 842 MB. Each now reads the one encoded copy the session keeps, and a page
/// that does not read is paused, not given its own copy; a page that reads still gets every
/// event while they wait.
#[test]
fn pages_that_never_read_cost_the_server_little_and_share_one_session() {
    let (mut ui, addr) = ui_server();
    let pid = ui.id();
    // About 1.5 million events (some tens of MB in the session), in 10 to 20 s.
    let spec = Scenario::Rr(RrSpec {
        requests: 100_000,
        size_bytes: 64,
        nodelay: PerSide::both(true),
        ..RrSpec::default()
    });
    let mut starter = start_from_a_page(&addr, &ToProbe::StartRun { spec });
    starter.get_ref().set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let (events, stream_bytes) = read_until_finished(&mut starter);
    drop(starter);
    eprintln!("the run: {events} events, {} MB on the WebSocket", stream_bytes >> 20);
    assert!(events > 1_000_000, "the run recorded {events} events");

    let before = settled_rss_kb(pid);
    let idle: Vec<Page> = (0..IDLE_PAGES).map(|_| open_page(&addr, "/ws")).collect();
    let after = settled_rss_kb(pid);
    let grew = after.saturating_sub(before);
    eprintln!(
        "UI server RSS {} MB, then {} MB with {IDLE_PAGES} pages that never read ({} kB a page)",
        before >> 10,
        after >> 10,
        grew / IDLE_PAGES
    );

    // A page opened beside them gets the whole run: they hold nobody up.
    let mut reader = open_page(&addr, "/ws");
    reader.get_ref().set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (read, _) = read_until_finished(&mut reader);
    drop((reader, idle));
    let _ = ui.kill();
    let _ = ui.wait();
    assert_eq!(read, events, "a page that reads gets every event while others do not read");
    // A copy per page is at least the stream's size each: a page must cost far less.
    assert!(
        grew < IDLE_PAGES * PER_PAGE_KB,
        "{IDLE_PAGES} idle pages grew the server by {} MB (from {} to {} MB), past {} MB",
        grew >> 10,
        before >> 10,
        after >> 10,
        (IDLE_PAGES * PER_PAGE_KB) >> 10
    );
}

/// The events of the stream's first run and the bytes of every message until it ended.
fn read_until_finished(page: &mut Page) -> (u64, u64) {
    let (mut events, mut bytes) = (0u64, 0u64);
    loop {
        let tungstenite::Message::Binary(payload) = page.read().unwrap() else { continue };
        bytes += payload.len() as u64;
        match ackscope_shared::wire::decode(&payload).unwrap() {
            ToBrowser::Events { events: batch, .. } => events += batch.len() as u64,
            ToBrowser::RunFinished { .. } => return (events, bytes),
            _ => {}
        }
    }
}

/// The process's resident memory once it has stopped moving: no more than 1 MB apart over the
/// last 2 s (at most 30 s of waiting; the last reading then).
fn settled_rss_kb(pid: u32) -> u64 {
    let started = Instant::now();
    let mut readings = Vec::new();
    loop {
        readings.push(rss_kb(pid));
        let last = &readings[readings.len().saturating_sub(10)..];
        let spread = last.iter().max().unwrap() - last.iter().min().unwrap();
        if (last.len() == 10 && spread < 1024) || started.elapsed() > Duration::from_secs(30) {
            return *readings.last().unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `VmRSS` of /proc/PID/status, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
