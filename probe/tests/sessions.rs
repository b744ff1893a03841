//! Session files, spec files, the standalone server and Ctrl-C, through the real binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ackscope_shared::report::ReportOutcome;

mod common;

use common::{ackscope, interrupt, s, text};

fn temp(name: &str) -> common::Scratch {
    common::temp("test", name)
}

#[test]
fn a_session_file_is_written_shown_and_exported() {
    let file = temp("rr.ackscope");
    let run =
        ackscope(&["run", "rr", "--count", "30", "--nodelay", "both", "-o", s(&file), "--json"]);
    assert!(run.status.success());
    let summary = common::report_of(&run);
    let events = summary.events;
    assert!(events > 30 * 8, "{summary:?}");

    let shown = ackscope(&["show", s(&file)]);
    assert!(shown.status.success());
    let shown = text(&shown.stdout);
    assert!(shown.contains("30 x 2048 B, keep-alive, TCP_NODELAY on both sides"), "{shown}");
    assert!(shown.contains("requests       30"), "{shown}");

    let exported = ackscope(&["export", s(&file), "--json"]);
    assert!(exported.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&exported.stdout).unwrap();
    let messages = doc["messages"].as_array().unwrap();
    assert!(messages[0]["Hello"]["host"]["kernel"].is_string(), "{}", messages[0]);
    let exported_events: usize =
        messages.iter().filter_map(|m| m["Events"]["events"].as_array()).map(Vec::len).sum();
    assert_eq!(exported_events as u64, events, "the file holds every event");
    assert_eq!(doc["error"], serde_json::Value::Null);
}

/// The frames of a session file: each one's first byte (its message's tag; 12 for a block).
fn frame_tags(bytes: &[u8]) -> Vec<u8> {
    let mut tags = Vec::new();
    let mut at = 0;
    while at + 4 < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        tags.push(bytes[at + 4]);
        at += 4 + len;
    }
    assert_eq!(at, bytes.len(), "the file ends on a frame's end");
    tags
}

/// A run's events are written in compressed blocks of columns (version 9); `export --rows`
/// writes the same session as version 8 did, for builds that read rows only, and both show the
/// same.
#[test]
fn a_file_of_blocks_is_exported_as_rows_for_older_readers_and_shows_the_same() {
    let file = temp("blocks.ackscope");
    let rows = temp("rows.ackscope");
    assert!(ackscope(&["run", "story1", "--count", "6", "-o", s(&file)]).status.success());
    let blocks = std::fs::read(&file).unwrap();
    let tags = frame_tags(&blocks);
    assert!(tags.contains(&12) && !tags.contains(&2), "events in blocks, none in rows: {tags:?}");
    assert!(tags.contains(&13), "the blocks' index at the end: {tags:?}");

    let exported = ackscope(&["export", s(&file), "--rows", s(&rows)]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    assert!(text(&exported.stdout).contains("as rows (protocol version 8)"));
    let old = std::fs::read(&rows).unwrap();
    let tags = frame_tags(&old);
    assert!(tags.contains(&2) && !tags.contains(&12), "events in rows, no block: {tags:?}");
    assert!(!tags.contains(&13), "no block, no index: {tags:?}");
    // Its trailer counts the overview alone, which a viewer still finds.
    let range = ackscope_shared::wire::Trailer::file_end_in(&old, old.len() as u64).unwrap();
    let end = ackscope_shared::wire::read_file_end(&old[range.start as usize..], range.start);
    assert_eq!((end.overviews.len(), end.indexes.len(), end.error), (1, 0, None));
    // The Hello's version, the varint after its tag: 8.
    assert_eq!(old[4..6], [0, 8], "a version 8 Hello");
    // Six requests: the parts every file has (the Hello, the run's start, its overview) are a
    // good share of both, so the rows are not the five times larger a long run's are (the
    // blocks' own tests hold the lessons' recordings to that).
    assert!(
        old.len() * 2 > blocks.len() * 3,
        "{} bytes of rows, {} of blocks",
        old.len(),
        blocks.len()
    );

    let shown = |path: &common::Scratch| text(&ackscope(&["show", s(path)]).stdout);
    assert_eq!(shown(&rows), shown(&file));
    assert!(shown(&file).contains("requests       6"), "{}", shown(&file));
}

/// `show --request N` prints one request's events through the file's block index: story 1's
/// request waits for two delayed ACKs (~40 ms each, against well under a millisecond of work),
/// and the same file as rows, which has no index, or with an index that lies, is read whole for
/// the same lines.
#[test]
fn show_request_prints_one_requests_events_through_the_index() {
    use ackscope_shared::wire;
    let file = temp("request.ackscope");
    let rows = temp("request-rows.ackscope");
    assert!(ackscope(&["run", "story1", "--count", "8", "-o", s(&file)]).status.success());
    let shown = ackscope(&["show", s(&file), "--request", "5"]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    let out = text(&shown.stdout);
    let (head, lines) = out.split_once('\n').unwrap();
    assert!(head.starts_with("run 1, request 5: ") && head.contains("through the file's index"));
    let done = lines.lines().find(|l| l.ends_with("RequestDone")).expect("the request's end");
    let done_ms: f64 = done.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(done_ms > 60.0, "two delayed ACKs of ~40 ms: {out}");
    for kind in ["RequestStart", "WriteStart", "ReadDone", "TCP_INFO while blocked"] {
        assert!(lines.contains(kind), "{kind} in {out}");
    }

    assert!(ackscope(&["export", s(&file), "--rows", s(&rows)]).status.success());
    let whole = ackscope(&["show", s(&rows), "--request", "5"]);
    let whole = text(&whole.stdout);
    let (whole_head, whole_lines) = whole.split_once('\n').unwrap();
    assert!(whole_head.contains("no block index"), "{whole_head}");
    assert_eq!(whole_lines, lines, "the same events, indexed or read whole");

    // An index whose first block is said to start a byte early: refused when the block is read,
    // and the file read whole for the same lines.
    let lying = temp("request-lying.ackscope");
    let bytes = std::fs::read(&file).unwrap();
    let range = wire::Trailer::file_end_in(&bytes, bytes.len() as u64).unwrap();
    let mut end = wire::read_file_end(&bytes[range.start as usize..], range.start);
    end.indexes[0].blocks[0].offset -= 1;
    let mut damaged = bytes[..range.start as usize].to_vec();
    let mut index = Vec::new();
    for (run, overview) in end.overviews {
        wire::write_frame(&wire::ToBrowser::Overview { run, overview }, &mut index);
    }
    wire::write_payload(&end.indexes[0].encode(), &mut index);
    wire::write_frame(
        &wire::ToBrowser::Trailer(wire::Trailer::new(index.len() as u64)),
        &mut index,
    );
    damaged.extend(index);
    std::fs::write(&lying, damaged).unwrap();
    let refused = text(&ackscope(&["show", s(&lying), "--request", "5"]).stdout);
    let (refused_head, refused_lines) = refused.split_once('\n').unwrap();
    assert!(refused_head.contains("is not a frame of that length: read whole"), "{refused_head}");
    assert_eq!(refused_lines, lines);

    let missing = ackscope(&["show", s(&file), "--request", "800"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("holds no event of request 800"));
}

/// A finished file ends with its run's overview and block index behind a fixed-size trailer, so
/// a viewer can paint the whole run from the file's last bytes: the probe's overview counts
/// every request and marks story 1's Nagle stalls (~40 ms each, against well under a
/// millisecond of work), and the index says where its requests' events are.
#[test]
fn a_finished_file_ends_with_its_overview_and_index_behind_a_trailer() {
    use ackscope_shared::wire::{read_file_end, Trailer};
    let file = temp("overview.ackscope");
    assert!(ackscope(&["run", "story1", "--count", "8", "-o", s(&file)]).status.success());
    let bytes = std::fs::read(&file).unwrap();
    let range = Trailer::file_end_in(&bytes, bytes.len() as u64).expect("a trailer at the end");
    let end = read_file_end(&bytes[range.start as usize..range.end as usize], range.start);
    assert_eq!(end.error, None);
    let overviews = end.overviews;
    assert_eq!(overviews.len(), 1, "one run, one overview");
    assert_eq!(end.indexes.len(), 1, "one run, one index");
    assert_eq!(end.indexes[0].run, overviews[0].0);
    assert!(end.indexes[0].requests() >= 8, "every request is indexed: {:?}", end.indexes[0]);
    let overview = &overviews[0].1;
    assert_eq!(overview.rows, 8, "every request is a row");
    assert!(overview.stalled() >= 6, "story 1 stalls nearly every request: {overview:?}");
    for column in overview.columns.iter().filter(|c| c.stalled > 0) {
        assert!(column.worst_ns() > 30_000_000, "a stalled request waited ~40 ms: {column:?}");
    }
    // The events are all still there: show reads the file whole, overview and all.
    let shown = ackscope(&["show", s(&file)]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(text(&shown.stdout).contains("requests       8"), "{}", text(&shown.stdout));
}

#[test]
fn a_truncated_file_shows_its_valid_prefix_and_says_what_is_wrong() {
    let file = temp("whole.ackscope");
    assert!(ackscope(&["run", "rr", "--count", "50", "--nodelay", "both", "-o", s(&file)])
        .status
        .success());
    let bytes = std::fs::read(&file).unwrap();
    let cut = temp("cut.ackscope");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let shown = ackscope(&["show", s(&cut)]);
    assert_eq!(shown.status.code(), Some(1));
    let stdout = text(&shown.stdout);
    assert!(stdout.contains("50 x 2048 B"), "the run is still shown: {stdout}");
    let stderr = text(&shown.stderr);
    assert!(stderr.contains("truncated") && stderr.contains("cut.ackscope"), "{stderr}");

    let garbage = temp("garbage.ackscope");
    std::fs::write(&garbage, b"this is not a session file at all").unwrap();
    let refused = ackscope(&["show", s(&garbage)]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("garbage.ackscope"), "names the file");
}

#[test]
fn a_printed_spec_runs_from_a_file_and_bad_specs_name_the_field() {
    let printed = ackscope(&["run", "story1-cork", "--print-spec"]);
    assert!(printed.status.success());
    let spec: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(spec["rr"]["cork"], serde_json::json!({"client": true, "server": true}));

    let mut edited = spec.clone();
    edited["rr"]["requests"] = 5.into();
    let file = temp("cork.json");
    std::fs::write(&file, edited.to_string()).unwrap();
    let run = ackscope(&["run", "--spec", s(&file), "--json"]);
    assert!(run.status.success());
    let v = common::report_of(&run);
    assert_eq!(v.rr().map(|rr| rr.requests), Some(5), "{v:?}");
    assert_eq!(v.config["cork"]["client"], true);

    edited["rr"]["size_bytes"] = 0.into();
    std::fs::write(&file, edited.to_string()).unwrap();
    let bad = ackscope(&["run", "--spec", s(&file)]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("size_bytes"), "names the field");

    std::fs::write(
        &file,
        r#"{"rr": {"requests": 5, "size_bytes": 10, "nodelay": {"clinet": true}}}"#,
    )
    .unwrap();
    let typo = ackscope(&["run", "--spec", s(&file)]);
    assert_eq!(typo.status.code(), Some(2));
    assert!(text(&typo.stderr).contains("clinet"), "names the unknown field");

    let misplaced = ackscope(&["run", "bulk", "--nodelay", "both"]);
    assert_eq!(misplaced.status.code(), Some(2));
    assert!(text(&misplaced.stderr).contains("--nodelay does not apply to bulk"));
}

#[test]
fn bulk_reports_goodput_and_the_buffers_the_kernel_set() {
    let run =
        ackscope(&["run", "bulk", "--bytes", "50000000", "--server-rcvbuf", "65536", "--json"]);
    assert!(run.status.success());
    let v = common::report_of(&run);
    let bulk = v.bulk().unwrap_or_else(|| panic!("not a bulk report: {v:?}"));
    assert_eq!(bulk.bytes, 50_000_000);
    assert!(bulk.goodput_mbps > 10.0, "{v:?}");
    // Linux doubles what was asked.
    assert_eq!(bulk.server_rcvbuf_bytes, Some(131_072), "{v:?}");
    assert_eq!(v.config["rcvbuf"]["server"], 65_536);
}

/// A slow reader (`--read-pause-us`): the server's window closes, the client's sending waits
/// on it (TCP_INFO's rwnd_limited) and it probes the closed window, while the same copy read
/// as fast as it comes takes a few milliseconds and never waits the 200 ms minimum
/// retransmission timeout that a probe needs.
#[test]
fn a_slow_reader_closes_the_window_and_the_client_probes_it() {
    let file = temp("slow-reader.ackscope");
    let copy = ["run", "bulk", "--bytes", "131072", "--app-buffer", "16384"];
    let buffer = ["--server-rcvbuf", "32768", "--json"];
    let slow =
        ackscope(&[&copy[..], &buffer, &["--read-pause-us", "300000", "-o", s(&file)]].concat());
    assert!(slow.status.success(), "{}", text(&slow.stderr));
    let slow = common::report_of(&slow);
    assert_eq!(slow.config["read_pause_us"], 300_000, "the spec says the reader paused");
    let fast = common::report_of(&ackscope(&[&copy[..], &buffer].concat()));
    let (slow, fast) = (slow.bulk().unwrap().clone(), fast.bulk().unwrap().clone());
    // Seven pauses of 300 ms: at least 2.1 s, against milliseconds.
    assert!(slow.duration_s > 2.0, "{slow:?}");
    assert!(fast.goodput_mbps > 10.0 * slow.goodput_mbps, "{fast:?} against {slow:?}");
    let waited_ms = f64::from(slow.client_rwnd_limited_ms.expect("TCP_INFO sampled"));
    assert!(waited_ms > slow.duration_s * 1000.0 / 2.0, "most of the copy: {slow:?}");
    assert!(slow.zero_window_probes.is_some_and(|probes| probes >= 1), "{slow:?}");
    assert_eq!(fast.zero_window_probes, Some(0), "{fast:?}");
    // The file says the same, and names the pause.
    let shown = ackscope(&["show", s(&file)]);
    let shown = text(&shown.stdout);
    assert!(shown.contains("the server pauses 300 ms before each read"), "{shown}");
    assert!(shown.contains("zero-window probes from the client"), "{shown}");
}

/// A reader that pauses 10 s before each read does not hold Ctrl-C: the pause ends at once.
#[test]
fn ctrl_c_ends_a_slow_readers_pause_within_2_s() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["run", "bulk", "--bytes", "1048576", "--app-buffer", "16384"])
        .args(["--read-pause-us", "10000000", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !common::pausing(child.id()) {
        assert!(Instant::now() < deadline, "the reader never paused");
        std::thread::sleep(Duration::from_millis(20));
    }
    interrupt(child.id());
    let status = common::ends_within(&mut child, Duration::from_secs(2), "Ctrl-C in a pause");
    assert_eq!(status.code(), Some(130));
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    assert_eq!(common::report(stdout.as_bytes()).outcome, ReportOutcome::Interrupted);
}

/// `--duration` holds for a slow reader too: a 500 ms run whose reader pauses 10 s ends long
/// before one pause would.
#[test]
fn a_slow_readers_run_ends_at_its_duration() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["run", "bulk", "--bytes", "104857600", "--app-buffer", "16384"])
        .args(["--read-pause-us", "10000000", "--duration", "500ms", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::ends_within(&mut child, Duration::from_secs(8), "a 500 ms run");
    assert!(status.success(), "{status:?}");
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let report = common::report(stdout.as_bytes());
    assert_eq!(report.outcome, ReportOutcome::Completed);
    // What the buffers held when the client stopped, not the 100 MiB asked for.
    let bulk = report.bulk().expect("a bulk report");
    assert!(bulk.bytes > 0 && bulk.bytes < 100 << 20, "{bulk:?}");
}

#[test]
fn ctrl_c_finishes_the_file_and_marks_the_run_interrupted() {
    let file = temp("interrupted.ackscope");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["run", "story1", "--count", "1000", "-o", s(&file), "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // ~88 ms per request: after a second, a dozen requests are done and 900 are not.
    std::thread::sleep(Duration::from_millis(1000));
    interrupt(child.id());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let v = common::report(stdout.as_bytes());
    assert_eq!(v.outcome, ReportOutcome::Interrupted);
    let done = v.rr().unwrap_or_else(|| panic!("no requests in {v:?}")).requests;
    assert!((3..100).contains(&done), "{v:?}");
    let shown = ackscope(&["show", s(&file)]);
    assert!(shown.status.success(), "the file is complete");
    assert!(text(&shown.stdout).contains("interrupted"));
}

#[test]
fn the_standalone_server_records_any_client_and_saves_on_ctrl_c() {
    let file = temp("server.ackscope");
    let mut server = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["server", "--listen", "127.0.0.1:0", "-o", s(&file)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr =
        line.split_whitespace().find(|w| w.starts_with("127.0.0.1:")).expect(&line).to_string();
    // A client of our own, speaking the documented protocol by hand.
    let mut client = TcpStream::connect(&addr).unwrap();
    client.set_nodelay(true).unwrap();
    for _ in 0..3 {
        let mut message = 5u32.to_be_bytes().to_vec();
        message.extend_from_slice(b"hello");
        client.write_all(&message).unwrap();
        let mut answer = [0u8; 9];
        client.read_exact(&mut answer).unwrap();
        assert_eq!(&answer[..4], &5u32.to_be_bytes());
        assert_eq!(answer[4], b'h' ^ 0x5a);
    }
    drop(client);
    std::thread::sleep(Duration::from_millis(200));
    interrupt(server.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server stops on Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    }
    let exported = ackscope(&["export", s(&file), "--json"]);
    assert!(exported.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&exported.stdout).unwrap();
    let read_bytes: u64 = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["Events"]["events"].as_array())
        .flatten()
        .filter_map(|e| e["kind"]["ReadDone"]["bytes"].as_u64())
        .sum();
    // Three messages of a 4-byte length and a 5-byte body.
    assert_eq!(read_bytes, 27, "the server's side of three exchanges is recorded");
}

/// A watch's file whose reads slept (a watch as root, version 11's `BlockedCall`) is exported
/// as rows without them, which a version 8 reader could not decode, and says how many it left
/// out; everything else comes through.
#[test]
fn rows_for_older_readers_leave_out_the_event_kinds_they_cannot_read() {
    use ackscope_shared::wire::{self, Hello, HostFacts, RunOutcome, ToBrowser};
    use ackscope_shared::{Call, ConnId, Event, EventKind, ReqId, RunId, Scenario, Side};
    let file = temp("watch-reads.ackscope");
    let rows = temp("watch-reads-rows.ackscope");
    let run = RunId(1);
    let event =
        |at_ns, kind| Event { at_ns, side: Side::Server, conn: ConnId(1), req: ReqId(0), kind };
    let messages = [
        ToBrowser::Hello(Hello::current("test", HostFacts::default())),
        ToBrowser::RunStarted {
            run,
            spec: Scenario::Watch(ackscope_shared::WatchSpec::default()),
            instruments: wire::Instruments::default(),
        },
        ToBrowser::Events {
            run,
            events: vec![
                event(1_000, EventKind::DelayedAck),
                event(
                    44_000_000,
                    EventKind::BlockedCall { call: Call::Recv, since_ns: 1, bytes: 9 },
                ),
            ],
        },
        ToBrowser::RunFinished { run, outcome: RunOutcome::Completed },
    ];
    let mut bytes = Vec::new();
    for message in &messages {
        wire::write_frame(message, &mut bytes);
    }
    std::fs::write(&file, &bytes).unwrap();

    let exported = ackscope(&["export", s(&file), "--rows", s(&rows)]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let said = text(&exported.stdout);
    assert!(said.contains("wrote 1 events as rows (protocol version 8)"), "{said}");
    assert!(said.contains("left out 1 events a version 8 reader cannot read"), "{said}");
    let old = std::fs::read(&rows).unwrap();
    let mut frames = wire::FrameStream::default();
    frames.push(&old);
    let mut kinds = Vec::new();
    while let Some(message) = frames.next_message() {
        if let ToBrowser::Events { events, .. } = message.unwrap() {
            kinds.extend(events.into_iter().map(|e| e.kind));
        }
    }
    assert_eq!(kinds, [EventKind::DelayedAck], "the timer kept, the read left out");
}
