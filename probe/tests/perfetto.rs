//! `ackscope export FILE --perfetto OUT.json` on a real story-1 session: the Chrome trace-event
//! file that ui.perfetto.dev and chrome://tracing open.
//!
//! Margins are physical: a Nagle x delayed ACK stall is 40 ms or more on Linux and far below
//! 60 ms on loopback, so its slice is asserted between 30 and 60 ms.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

mod common;

use common::{ackscope, exported_events, s, text};

fn temp(name: &str) -> common::Scratch {
    common::temp("perfetto", name)
}

/// A story-1 session of `count` requests (Nagle on both sides: two stalls per request after the
/// first).
fn story1(name: &str, count: &str) -> common::Scratch {
    let file = temp(name);
    assert!(ackscope(&["run", "story1", "--count", count, "-o", s(&file)]).status.success());
    file
}

fn export(file: &Path, out: &Path) -> std::process::Output {
    ackscope(&["export", s(file), "--perfetto", s(out)])
}

/// Nanoseconds from a trace time in microseconds (the file keeps them as decimals).
fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

#[test]
fn a_story1_session_exports_threads_syscalls_stalls_and_counters() {
    let file = story1("story1.ackscope", "6");
    let out = temp("story1.json");
    let exported = export(&file, &out);
    assert!(exported.status.success());
    assert!(text(&exported.stdout).contains("ui.perfetto.dev"), "says what to open it with");
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["displayTimeUnit"], "ns");
    let events = doc["traceEvents"].as_array().expect("traceEvents");

    let process = events.iter().find(|e| e["name"] == "process_name").unwrap();
    assert_eq!(process["pid"], 2, "run 1 is pid 2");
    let process_name = process["args"]["name"].as_str().unwrap();
    assert!(process_name.starts_with("run 1: rr: 6 x 2048 B"), "{process_name}");
    assert!(process_name.contains("Nagle on both sides"), "{process_name}");

    let threads: HashMap<u64, String> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap().to_string()))
        .collect();
    let side_of = |e: &Value| threads[&e["tid"].as_u64().expect("X events have a tid")].clone();

    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(slices.iter().all(|e| e["pid"] == 2 && ns(&e["ts"]) >= 0 && ns(&e["dur"]) >= 0));
    let syscalls: Vec<&Value> = slices.iter().copied().filter(|e| e["cat"] == "syscall").collect();
    for side in ["client", "server"] {
        for call in ["read ", "write "] {
            let found = syscalls.iter().any(|e| {
                e["name"].as_str().unwrap().starts_with(call) && side_of(e).ends_with(side)
            });
            assert!(found, "a {call}slice on the {side} thread");
        }
    }
    let read = syscalls.iter().find(|e| e["name"] == "read 2048 B").unwrap();
    assert_eq!(read["args"]["bytes"], 2048);
    assert!(read["args"]["req"].is_u64(), "{read}");

    // Each thread's syscalls come in the order they ran.
    let mut last: HashMap<u64, i64> = HashMap::new();
    for e in &syscalls {
        let previous = last.insert(e["tid"].as_u64().unwrap(), ns(&e["ts"]));
        assert!(previous.is_none_or(|p| p <= ns(&e["ts"])), "{e}");
    }

    // Nagle x delayed ACK: ~40-44 ms each, nested in the read that waited.
    let stalls: Vec<&Value> = slices
        .iter()
        .copied()
        .filter(|e| e["cat"] == "stall" && e["name"] == "Nagle x delayed ACK")
        .collect();
    assert!(!stalls.is_empty(), "Nagle on both sides stalls");
    for stall in &stalls {
        let dur_us = stall["dur"].as_f64().unwrap();
        assert!((30_000.0..60_000.0).contains(&dur_us), "{stall}");
        assert_eq!(stall["args"]["class"], "nagle_delayed_ack");
        assert!(stall["args"]["evidence"].as_str().unwrap().contains("Nagle"), "{stall}");
        assert!(stall["args"]["fixes"][0].as_str().unwrap().starts_with("TCP_NODELAY"));
        assert!(stall["args"]["held_ms"].as_f64().unwrap() >= 30.0, "{stall}");
        let (start, end) = (ns(&stall["ts"]), ns(&stall["ts"]) + ns(&stall["dur"]));
        let inside = syscalls.iter().any(|call| {
            call["tid"] == stall["tid"]
                && call["name"].as_str().unwrap().starts_with("read ")
                && ns(&call["ts"]) <= start
                && end <= ns(&call["ts"]) + ns(&call["dur"])
        });
        assert!(inside, "nested in a read on its thread: {stall}");
    }
    assert!(stalls.iter().any(|e| side_of(e).ends_with("client")));
    assert!(stalls.iter().any(|e| side_of(e).ends_with("server")));

    // On every thread, slices nest or are disjoint (what both viewers need to draw them).
    let mut by_thread: HashMap<u64, Vec<(i64, i64)>> = HashMap::new();
    for e in &slices {
        let (ts, dur) = (ns(&e["ts"]), ns(&e["dur"]));
        by_thread.entry(e["tid"].as_u64().unwrap()).or_default().push((ts, ts + dur));
    }
    for (tid, mut spans) in by_thread {
        spans.sort_by_key(|&(start, end)| (start, std::cmp::Reverse(end)));
        let mut open: Vec<i64> = Vec::new();
        for (start, end) in spans {
            while open.last().is_some_and(|&parent_end| parent_end <= start) {
                open.pop();
            }
            if let Some(&parent_end) = open.last() {
                assert!(end <= parent_end, "thread {tid}: [{start}, {end}] crosses its parent");
            }
            open.push(end);
        }
    }

    // TCP_INFO, when it was recorded, as counters per connection side.
    let sampled = exported_events(s(&file))
        .iter()
        .any(|e| matches!(e.kind, ackscope_shared::EventKind::TcpInfo(_)));
    let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    if sampled {
        assert!(counters.iter().any(|e| {
            let name = e["name"].as_str().unwrap();
            name.starts_with("conn ")
                && name.ends_with(" unacked")
                && e["args"]["segments"].is_u64()
        }));
        assert!(counters.iter().any(|e| e["name"].as_str().unwrap().contains(" server ")));
        assert!(counters.iter().all(|e| ns(&e["ts"]) >= 0 && e["args"].is_object()));
    } else {
        eprintln!("no TCP_INFO in the session: counters not checked");
    }
}

#[test]
fn a_cut_session_exports_what_it_holds_and_says_where_it_ends() {
    let file = story1("cut-source.ackscope", "3");
    let bytes = std::fs::read(&file).unwrap();
    // Cut inside the frame after the first that holds events (a block of them: a reader opens
    // a cut file up to its last whole block).
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        frames.push((at, bytes[at + 4]));
        at += 4 + len;
    }
    let events = frames.iter().position(|&(_, tag)| tag == 2 || tag == 12).unwrap();
    let (next, _) = frames[events + 1];
    let cut = temp("cut.ackscope");
    std::fs::write(&cut, &bytes[..next + 6]).unwrap();
    let out = temp("cut.json");
    let exported = export(&cut, &out);
    assert_eq!(exported.status.code(), Some(1));
    let stderr = text(&exported.stderr);
    assert!(stderr.contains("cut.ackscope") && stderr.contains("truncated"), "{stderr}");
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(doc["otherData"]["error"].as_str().unwrap().contains("truncated"));
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["cat"] == "syscall"), "the prefix is exported");
}

#[test]
fn bad_arguments_name_the_file_or_the_flag() {
    let missing = temp("missing.ackscope");
    let out = temp("never.json");
    let refused = export(&missing, &out);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("missing.ackscope"));
    assert!(!out.exists(), "nothing is written for a file that cannot be read");

    let garbage = temp("garbage.ackscope");
    std::fs::write(&garbage, b"this is not a session file at all").unwrap();
    let refused = export(&garbage, &out);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("garbage.ackscope"));

    let file = story1("args.ackscope", "1");
    let unwritable = temp("no-such-dir").join("out.json");
    let refused = export(&file, &unwritable);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("out.json"), "names the output");

    let over_itself = export(&file, &file);
    assert_eq!(over_itself.status.code(), Some(2));
    assert!(text(&over_itself.stderr).contains("--perfetto"));
    assert!(std::fs::read(&file).unwrap().len() > 100, "the session is left as it was");

    let two = ackscope(&["export", s(&file), "--json", "--perfetto", s(&out)]);
    assert_eq!(two.status.code(), Some(2), "one format at a time");
}
