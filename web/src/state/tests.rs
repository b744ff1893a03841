use ackscope_shared::wire::{
    self, write_frame, Hello, HostFacts, Instruments, RunOutcome, ToBrowser, PROTOCOL_VERSION,
};
use ackscope_shared::{BulkSpec, Event, EventKind, RrSpec, Scenario, Side};

use super::*;
use crate::fixtures::{hello, host, nagle_run, rr_started, MS};
use crate::session_file::decode_session;
use crate::timeline::rows::{Facts, Filter};

fn started(state: &mut AppState, id: u32) {
    if !state.is_greeted() {
        apply(state, hello());
    }
    apply(state, rr_started(id, RrSpec::default()));
}

fn events(id: u32, events: Vec<Event>) -> ToBrowser {
    ToBrowser::Events { run: RunId(id), events }
}

fn finished(id: u32, outcome: RunOutcome) -> ToBrowser {
    ToBrowser::RunFinished { run: RunId(id), outcome }
}

#[test]
fn hello_starts_over() {
    let mut state = AppState::default();
    started(&mut state, 1);
    apply(&mut state, events(1, nagle_run(3, 44 * MS)));
    state.live.error = Some("old".into());
    assert_eq!(state.live.runs().len(), 1);

    apply(&mut state, hello());
    assert!(state.live.runs().is_empty());
    assert!(state.selected().is_none());
    assert!(state.live.error.is_none());
    assert!(state.is_greeted());
    assert_eq!(state.probe_version(), Some("0.1.0"));
    assert_eq!(state.live.host(), Some(&host()));
}

#[test]
fn a_resumed_stream_keeps_what_the_page_has_and_a_new_one_starts_over() {
    let mut state = AppState::default();
    apply(&mut state, hello());
    assert_eq!(state.resume_query(), None, "the probe has not named its stream");
    apply(&mut state, ToBrowser::Stream { id: 7, resumed: false });
    assert_eq!(state.resume_query(), None, "no run: nothing to resume");
    started(&mut state, 1);
    let all = nagle_run(4, 44 * MS);
    let (first, rest) = all.split_at(all.len() / 2);
    apply(&mut state, events(1, first.to_vec()));
    assert_eq!(state.resume_query(), Some(format!("7.1.{}.0", first.len())));

    // The socket was cut; the probe resumes: the run goes on where it was.
    apply(&mut state, hello());
    apply(&mut state, ToBrowser::Stream { id: 7, resumed: true });
    apply(&mut state, events(1, rest.to_vec()));
    assert_eq!(state.live.runs().len(), 1);
    assert_eq!(state.live.runs()[0].events, all.len() as u64, "every event, once");
    apply(&mut state, finished(1, RunOutcome::Completed));
    assert_eq!(state.resume_query(), Some(format!("7.1.{}.1", all.len())));

    // Another stream (a restarted probe): the page starts over and takes its replay.
    apply(&mut state, hello());
    apply(&mut state, ToBrowser::Stream { id: 8, resumed: false });
    assert!(state.live.runs().is_empty(), "the old stream's runs are gone");
    assert!(state.is_greeted());
}

#[test]
fn events_update_the_summary_and_finish_sets_the_status() {
    let mut state = AppState::default();
    started(&mut state, 1);
    assert_eq!(state.selected().map(|run| run.status.clone()), Some(RunStatus::Running));
    assert!(state.is_running());

    let all = nagle_run(5, 44 * MS);
    let (first, rest) = all.split_at(all.len() / 2);
    apply(&mut state, events(1, first.to_vec()));
    let partial = state.selected().map(|run| run.summary().requests);
    apply(&mut state, events(1, rest.to_vec()));
    let run = state.selected().expect("run 1 is selected");
    // The cached summary was dropped when more events came.
    assert!(partial < Some(5), "{partial:?}");
    assert_eq!(run.summary().requests, 5);
    assert_eq!(run.summary().stalled_reads, 8, "two per request after the first");
    assert!(run.summary().max_ms > 88.0, "{}", run.summary().max_ms);
    assert_eq!(run.events, all.len() as u64);
    assert!(run.bulk_summary().is_none());
    assert_eq!(run.instruments, Instruments::default());

    let failed = RunOutcome::Failed { error: "connection reset".into() };
    apply(&mut state, finished(1, failed));
    let status = &state.live.runs()[0].status;
    assert_eq!(status.label(), "failed: connection reset");
    assert!(!state.is_running());

    started(&mut state, 2);
    apply(&mut state, finished(2, RunOutcome::Interrupted));
    assert_eq!(state.live.runs()[1].status.word(), "interrupted");
}

#[test]
fn attribution_follows_the_events_and_the_spec() {
    use ackscope_shared::attribution::StallClass;

    let mut state = AppState::default();
    started(&mut state, 1);
    let all = nagle_run(5, 44 * MS);
    let (first, rest) = all.split_at(all.len() / 2);
    apply(&mut state, events(1, first.to_vec()));
    let partial = state.selected().map(|run| run.attribution().stalls.len());
    apply(&mut state, events(1, rest.to_vec()));
    let run = state.selected().expect("run 1 is selected");
    // The cached attribution was dropped when more events came.
    assert!(partial < Some(8), "{partial:?}");
    let attribution = run.attribution();
    assert_eq!(attribution.stalls.len(), 8, "two per request after the first");
    assert!(attribution.stalls.iter().all(|s| s.class == StallClass::NagleDelayedAck));
    assert_eq!(attribution.classes.len(), 2, "one line per direction");
    assert!(std::ptr::eq(attribution, run.attribution()), "computed once, then cached");
    assert!(attribution.of_request(0).is_empty());
    let second = attribution.of_request(2);
    assert_eq!(second.len(), 2);
    assert!(second.iter().all(|s| s.req.0 == 2));
    assert!(attribution.of_request(9).is_empty());

    // The spec rules Nagle out for a writer with TCP_NODELAY.
    let client_nodelay = RrSpec {
        nodelay: ackscope_shared::PerSide { client: true, server: false },
        ..RrSpec::default()
    };
    apply(&mut state, rr_started(2, client_nodelay));
    apply(&mut state, events(2, nagle_run(5, 44 * MS)));
    let run = state.selected().expect("run 2 is selected");
    let classes: Vec<(StallClass, &str, u32)> = run
        .attribution()
        .classes
        .iter()
        .map(|c| (c.class, c.direction.as_str(), c.count))
        .collect();
    assert_eq!(
        classes,
        [
            (StallClass::NagleDelayedAck, "server->client", 4),
            (StallClass::Unexplained, "client->server", 4)
        ]
    );
}

#[test]
fn a_standalone_servers_session_is_analysed_from_the_server_alone() {
    let mut state = AppState::default();
    apply(&mut state, hello());
    apply(
        &mut state,
        ToBrowser::RunStarted {
            run: RunId(1),
            spec: Scenario::Server(RrSpec::default()),
            instruments: Instruments::default(),
        },
    );
    let event = |at_ns, kind| Event {
        at_ns,
        side: Side::Server,
        conn: ackscope_shared::ConnId(0),
        req: ackscope_shared::ReqId(0),
        kind,
    };
    // The client's 4-byte length arrived alone; its 2048-byte body 44 ms later.
    let events_of_one_request = vec![
        event(0, EventKind::ReadStart { len_bytes: 4096 }),
        event(MS, EventKind::ReadDone { bytes: 4 }),
        event(MS, EventKind::RequestStart),
        event(MS + 1000, EventKind::ReadStart { len_bytes: 4092 }),
        event(45 * MS, EventKind::ReadDone { bytes: 2048 }),
        event(45 * MS + 1000, EventKind::WriteStart { len_bytes: 4 }),
        event(45 * MS + 2000, EventKind::WriteDone { bytes: 4 }),
        event(45 * MS + 3000, EventKind::RequestDone),
    ];
    apply(&mut state, events(1, events_of_one_request));
    let run = state.selected().expect("the server's run is shown");
    assert!(run.is_rr(), "its requests have a timeline");
    assert_eq!(run.summary().requests, 1);
    let stalls = &run.attribution().stalls;
    assert_eq!(stalls.len(), 1, "{stalls:?}");
    assert_eq!(
        stalls[0].class,
        ackscope_shared::attribution::StallClass::NagleDelayedAck,
        "{}",
        stalls[0].evidence
    );
    assert_eq!((stalls[0].from, stalls[0].to), (Side::Client, Side::Server));
}

#[test]
fn a_bulk_run_gets_the_bulk_analysis() {
    let mut state = AppState::default();
    apply(&mut state, hello());
    apply(
        &mut state,
        ToBrowser::RunStarted {
            run: RunId(1),
            spec: Scenario::Bulk(BulkSpec::default()),
            instruments: Instruments::default(),
        },
    );
    let event = |at_ns, side, kind| Event {
        at_ns,
        side,
        conn: ackscope_shared::ConnId(0),
        req: ackscope_shared::ReqId(0),
        kind,
    };
    let read = |at_ns| event(at_ns, Side::Server, EventKind::ReadDone { bytes: 62_500 });
    let start = event(0, Side::Client, EventKind::RequestStart);
    apply(&mut state, events(1, vec![start, read(MS), read(10 * MS)]));
    let run = state.selected().expect("the bulk run is shown");
    assert!(!run.is_rr());
    assert_eq!(run.events, 3);
    assert!(run.analysis.requests().is_empty(), "no per-request analysis");
    let bulk = run.bulk_summary().expect("a bulk summary");
    assert_eq!(bulk.bytes, 125_000);
    // 1 Mbit in 10 ms.
    assert!((bulk.goodput_mbps - 100.0).abs() < 1e-6, "{}", bulk.goodput_mbps);
}

#[test]
fn the_newest_run_is_selected_and_the_user_can_go_back() {
    let mut state = AppState::default();
    started(&mut state, 1);
    apply(&mut state, finished(1, RunOutcome::Completed));
    started(&mut state, 2);
    assert_eq!(state.selected_key(), Some(RunKey::live(RunId(2))));
    state.select(RunKey::live(RunId(1)));
    assert_eq!(state.selected_key(), Some(RunKey::live(RunId(1))));
    state.select(RunKey::live(RunId(9)));
    assert_eq!(
        state.selected_key(),
        Some(RunKey::live(RunId(1))),
        "an unknown run changes nothing"
    );
    // Events for a run we never heard of are dropped, not attributed elsewhere.
    apply(&mut state, events(7, nagle_run(2, MS)));
    assert!(state.live.runs().iter().all(|run| run.analysis.requests().is_empty()));
}

#[test]
fn a_followed_run_is_shown_when_the_replay_brings_it_and_stays_shown() {
    let mut state = AppState::default();
    state.follow(RunKey::live(RunId(1)));
    assert!(state.selected().is_none(), "not there yet");
    started(&mut state, 1);
    started(&mut state, 2);
    assert_eq!(
        state.selected_key(),
        Some(RunKey::live(RunId(1))),
        "the replay's newer run does not take over"
    );
    state.start_requested();
    apply(&mut state, rr_started(3, RrSpec::default()));
    assert_eq!(state.selected_key(), Some(RunKey::live(RunId(3))), "the user's own run does");
}

#[test]
fn rejected_keeps_the_reason_until_the_next_request() {
    let mut state = AppState::default();
    apply(&mut state, hello());
    state.start_requested();
    assert!(state.start_pending);
    let reason = "a run is already in progress: wait for run 3 to finish".to_string();
    apply(&mut state, ToBrowser::Rejected { reason: reason.clone() });
    assert_eq!(state.rejected.as_ref(), Some(&reason));
    assert!(!state.start_pending);
    state.start_requested();
    assert!(state.rejected.is_none());
}

#[test]
fn another_protocol_version_is_shown_and_nothing_after_it_applies() {
    let mut state = AppState::default();
    let newer = Hello {
        protocol_version: PROTOCOL_VERSION + 1,
        ackscope_version: "9.0.0".into(),
        host: HostFacts::default(),
    };
    apply(&mut state, ToBrowser::Hello(newer));
    let error = state.live.error.clone().expect("a version error");
    assert!(error.contains(&format!("version {}", PROTOCOL_VERSION + 1)), "{error}");
    assert!(!state.is_greeted());
    assert!(state.live.host().is_none());
    assert!(state.live.file_bytes().is_none(), "nothing to download");
    apply(&mut state, rr_started(1, RrSpec::default()));
    assert!(state.live.runs().is_empty());

    // Messages before any Hello are refused the same way.
    let mut fresh = AppState::default();
    apply(&mut fresh, rr_started(1, RrSpec::default()));
    assert!(fresh.live.runs().is_empty());
}

#[test]
fn an_undecodable_message_is_reported() {
    let mut state = AppState::default();
    let error = ackscope_shared::wire::decode::<ToBrowser>(&[0xff, 0xff]).unwrap_err();
    state.bad_message(&error);
    let shown = state.live.error.expect("an error to show");
    assert!(shown.starts_with("could not read a message from the probe"), "{shown}");
}

/// A live session with a finished Nagle run and a second run still going.
fn two_runs() -> AppState {
    let mut state = AppState::default();
    started(&mut state, 1);
    apply(&mut state, events(1, nagle_run(4, 44 * MS)));
    apply(&mut state, finished(1, RunOutcome::Completed));
    apply(&mut state, ToBrowser::Rejected { reason: "busy".into() });
    started(&mut state, 2);
    apply(&mut state, events(2, nagle_run(2, 30 * MS)));
    state
}

#[test]
fn the_downloaded_session_opens_as_the_same_runs() {
    let mut state = two_runs();
    let bytes = state.live.file_bytes().expect("a greeted live session").to_vec();
    let (messages, problem) = decode_session(&bytes);
    assert_eq!(problem, None);
    assert_eq!(messages.len(), 6, "Hello, 2 starts, 2 batches, 1 finish; no refusal");

    let id = state.open_file("saved.ackscope", &bytes);
    let file = state.file(id).expect("opened");
    assert_eq!(file.error, None);
    assert_eq!(file.session.host(), Some(&host()));
    let live = &state.live;
    assert_eq!(file.session.runs().len(), live.runs().len());
    for (opened, original) in file.session.runs().iter().zip(live.runs()) {
        assert_eq!(opened.id, original.id);
        assert_eq!(opened.spec, original.spec);
        assert_eq!(opened.summary(), original.summary());
        assert_eq!(opened.events, original.events);
    }
    assert_eq!(file.session.runs()[0].status, RunStatus::Done);
    assert_eq!(file.session.runs()[1].status, RunStatus::Incomplete, "saved while run 2 was going");
    assert_eq!(
        state.selected_key(),
        Some(RunKey { source: Source::File(id), run: RunId(2) }),
        "the file's newest run is shown"
    );
}

#[test]
fn the_live_stream_leaves_opened_files_alone() {
    let mut state = two_runs();
    let bytes = state.live.file_bytes().expect("recorded").to_vec();
    let id = state.open_file("a.ackscope", &bytes);
    let file_run = RunKey { source: Source::File(id), run: RunId(1) };
    state.select(file_run);

    // The probe restarts: its Hello resets only the live runs.
    apply(&mut state, hello());
    assert!(state.live.runs().is_empty());
    assert_eq!(state.file(id).map(|f| f.session.runs().len()), Some(2));
    assert_eq!(state.selected_key(), Some(file_run));
    assert_eq!(
        state.live.file_bytes().map(<[u8]>::len),
        decode_hello_len(),
        "the live record starts over with the new Hello"
    );

    // A replayed or foreign run does not pull the user away from the file...
    apply(&mut state, rr_started(5, RrSpec::default()));
    assert_eq!(state.selected_key(), Some(file_run));
    // ...but the run the user asked for does.
    state.start_requested();
    apply(&mut state, rr_started(6, RrSpec::default()));
    assert_eq!(state.selected_key(), Some(RunKey::live(RunId(6))));

    state.select(file_run);
    state.close_file(id);
    assert!(state.files().is_empty());
    assert!(state.selected().is_none());
}

fn decode_hello_len() -> Option<usize> {
    let mut bytes = Vec::new();
    write_frame(&hello(), &mut bytes);
    Some(bytes.len())
}

#[test]
fn a_truncated_file_keeps_the_runs_before_the_cut_and_names_the_problem() {
    let full = two_runs().live.file_bytes().expect("recorded").to_vec();
    // Cut inside the last message (run 2's events): run 1 is whole, run 2 has begun.
    let mut state = AppState::default();
    let id = state.open_file("cut.ackscope", &full[..full.len() - 5]);
    let file = state.file(id).expect("opened");
    let error = file.error.clone().expect("an error");
    assert!(error.starts_with("cut.ackscope: stream ends inside a message"), "{error}");
    assert!(error.contains("truncated"), "{error}");
    assert!(error.ends_with("the 2 runs read before it are shown"), "{error}");
    let runs = file.session.runs();
    assert_eq!(runs[0].summary().requests, 4);
    assert_eq!(runs[0].status, RunStatus::Done);
    assert_eq!(runs[1].summary().requests, 0, "its events were in the cut frame");
}

#[test]
fn a_file_fed_in_pieces_opens_as_the_same_runs_and_reports_its_progress() {
    let bytes = two_runs().live.file_bytes().expect("recorded").to_vec();
    let mut whole = AppState::default();
    let whole_id = whole.open_file("a.ackscope", &bytes);
    let mut state = AppState::default();
    let id = state.begin_file("a.ackscope", bytes.len() as u64);
    assert_eq!(state.file(id).and_then(OpenedFile::progress), Some((0, bytes.len() as u64)));
    for piece in bytes.chunks(7) {
        state.feed_file(id, piece);
    }
    assert_eq!(
        state.file(id).and_then(OpenedFile::progress),
        Some((bytes.len() as u64, bytes.len() as u64))
    );
    assert!(state.selected().is_none(), "its run is shown once it is read");
    state.end_file(id);
    let (file, reference) =
        (state.file(id).expect("opened"), whole.file(whole_id).expect("opened"));
    assert_eq!(file.progress(), None);
    assert_eq!(file.error, None);
    assert_eq!(file.session.runs().len(), reference.session.runs().len());
    for (a, b) in file.session.runs().iter().zip(reference.session.runs()) {
        assert_eq!((a.id, a.events, &a.status), (b.id, b.events, &b.status));
        assert_eq!(a.summary(), b.summary());
    }
    assert_eq!(state.selected_key(), Some(RunKey { source: Source::File(id), run: RunId(2) }));
}

/// A file of compressed blocks (version 9) opens as the same run as its rows, fed a batch of
/// events at a time: the page applies a block of 65,536 events over several slices.
#[test]
fn a_file_of_blocks_is_applied_a_batch_at_a_time_and_opens_as_its_rows_do() {
    let mut live = AppState::default();
    started(&mut live, 1);
    let nagle = nagle_run(3000, 44 * MS);
    for batch in nagle.chunks(8192) {
        apply(&mut live, events(1, batch.to_vec()));
    }
    apply(&mut live, finished(1, RunOutcome::Completed));
    let rows = live.live.file_bytes().expect("recorded").to_vec();
    // The same messages, the events as one block.
    let mut blocks = Vec::new();
    let (messages, _) = decode_session(&rows);
    for message in messages {
        match message {
            ToBrowser::Events { .. } => {}
            ToBrowser::RunFinished { .. } => {
                wire::write_blocks(
                    RunId(1),
                    &nagle,
                    &mut wire::zstd,
                    &mut blocks,
                    &mut Default::default(),
                );
                write_frame(&message, &mut blocks);
            }
            other => write_frame(&other, &mut blocks),
        }
    }
    assert!(
        blocks.len() * 3 < rows.len(),
        "{} bytes of blocks, {} of rows",
        blocks.len(),
        rows.len()
    );

    let mut state = AppState::default();
    let id = state.begin_file("blocks.ackscope", blocks.len() as u64);
    let mut calls = 1;
    let mut more = state.feed_file_some(id, &blocks, 8192);
    while more {
        let run = &state.file(id).expect("opened").session.runs()[0];
        assert!(run.events <= calls * 8192, "{} events after {calls} calls", run.events);
        more = state.feed_file_some(id, &[], 8192);
        calls += 1;
    }
    assert_eq!(calls as usize, nagle.len().div_ceil(8192), "a batch of events a call");
    state.end_file(id);
    let mut whole = AppState::default();
    let whole_id = whole.open_file("rows.ackscope", &rows);
    let (a, b) = (state.file(id).unwrap(), whole.file(whole_id).unwrap());
    assert_eq!(a.error, None);
    let (a, b) = (&a.session.runs()[0], &b.session.runs()[0]);
    assert_eq!((a.events, &a.status), (b.events, &b.status));
    assert_eq!(a.summary(), b.summary());
    assert_eq!(a.attribution(), b.attribution());
}

/// A file decoded by the worker (its decoder's messages handed over as `handoff` batches, a
/// piece at a time) opens as the same runs as one the page decodes itself, the problem named
/// alike: the lessons' recordings, and a file cut short.
#[test]
fn a_file_decoded_beside_the_page_opens_as_the_same_runs() {
    let cut = two_runs().live.file_bytes().expect("recorded").to_vec();
    let cut = cut[..cut.len() - 5].to_vec();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lessons/recordings");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the lessons' recordings")
        .map(|entry| std::fs::read(entry.expect("an entry").path()).expect("a recording"))
        .take(6)
        .collect();
    files.push(cut);
    for bytes in &files {
        let mut here = AppState::default();
        let here_id = here.open_file("f.ackscope", bytes);
        let mut beside = AppState::default();
        let id = beside.begin_file("f.ackscope", bytes.len() as u64);
        let mut worker = crate::decode_worker::WorkerDecoder::new(1e9, None, 0);
        for piece in bytes.chunks(4096) {
            let batch = worker.feed(piece);
            let mut messages = crate::handoff::Messages::new(&batch);
            while beside.apply_file_messages(id, &mut messages, 100).expect("the batch reads") {}
            beside.file_read(id, piece.len() as u64);
        }
        assert_eq!(
            beside.file(id).and_then(OpenedFile::progress),
            Some((bytes.len() as u64, bytes.len() as u64))
        );
        let problem = worker.finish().map(|text| Problem { text, too_many: worker.too_many() });
        beside.file_decoded_elsewhere(id, problem);
        beside.end_file(id);
        let (a, b) = (beside.file(id).unwrap(), here.file(here_id).unwrap());
        assert_eq!(a.error, b.error);
        assert_eq!(a.session.runs().len(), b.session.runs().len());
        assert!(!a.session.runs().is_empty());
        for (a, b) in a.session.runs().iter().zip(b.session.runs()) {
            assert_eq!((a.id, a.events, &a.status), (b.id, b.events, &b.status));
            assert_eq!(a.summary(), b.summary());
            assert_eq!(a.attribution(), b.attribution());
        }
        assert_eq!(beside.selected_key().map(|k| k.run), here.selected_key().map(|k| k.run));
    }
}

#[test]
fn a_files_run_is_attributed_while_it_is_read_not_all_at_its_end() {
    // A Nagle run of 40 requests in 8 batches: a file of several messages.
    let mut live = AppState::default();
    started(&mut live, 1);
    for batch in nagle_run(40, 44 * MS).chunks(40) {
        apply(&mut live, events(1, batch.to_vec()));
    }
    apply(&mut live, finished(1, RunOutcome::Completed));
    let bytes = live.live.file_bytes().expect("recorded").to_vec();

    let mut state = AppState::default();
    let id = state.begin_file("nagle.ackscope", bytes.len() as u64);
    let (most, rest) = bytes.split_at(bytes.len() * 3 / 4);
    state.feed_file(id, most);
    let run = &state.file(id).expect("opened").session.runs()[0];
    assert!(
        run.attributed.next() > 10,
        "requests were attributed as their batches arrived: {} settled",
        run.attributed.next()
    );
    let (facts, of_events) = run.facts.borrow().clone();
    assert_eq!((facts.len(), of_events), (run.analysis.requests().len(), run.events));
    state.feed_file(id, rest);
    state.end_file(id);
    let run = state.selected().expect("its run is shown");
    let whole = Attribution::of(&run.analysis, run.spec.rr());
    assert_eq!(run.attribution(), &whole, "the same answer as attributing it whole");
    let (facts, made_whole) = (run.facts(), Facts::of(&run.analysis, &whole.stalls));
    assert_eq!(facts.first, made_whole.first);
    assert_eq!(facts.extent_ns, made_whole.extent_ns, "and the same facts");
    assert_eq!(facts.done, made_whole.done);
    assert_eq!((&facts.classes, &facts.worst), (&made_whole.classes, &made_whole.worst));
    assert_eq!(facts.overview_of_all(), made_whole.overview_of_all());
    assert_eq!(run.attribution().stalls.len(), 2 * 39, "two stalls per request after the first");
    assert_eq!(run.summary(), &run.analysis.summary());
}

#[test]
fn a_files_overview_shows_while_it_is_read_and_goes_when_it_is() {
    use ackscope_shared::overview::{key, Priority};
    let bytes = two_runs().live.file_bytes().expect("recorded").to_vec();
    let mut state = AppState::default();
    let id = state.begin_file("big.ackscope", bytes.len() as u64);
    assert!(state.loading_overview().is_none(), "nothing until the file's end is read");
    let overview = Overview::of([(key(Priority::Stalled, 44 * MS), true)]);
    state.preview_file(id, vec![(RunId(2), overview.clone())]);
    assert_eq!(state.loading_overview(), Some(("big.ackscope", &overview)));
    state.feed_file(id, &bytes);
    assert_eq!(state.loading_progress(), Some((bytes.len() as u64, bytes.len() as u64)));
    state.end_file(id);
    assert_eq!(state.loading_overview(), None, "the rows' own strip takes over");
    assert_eq!(state.loading_progress(), None);

    // An overview claiming four billion requests makes room only for what the file's bytes
    // could hold (reserving for the claim would abort the page).
    let mut state = AppState::default();
    let id = state.begin_file("lying.ackscope", bytes.len() as u64);
    let lying = Overview { rows: u32::MAX, ..overview };
    state.preview_file(id, vec![(RunId(1), lying.clone()), (RunId(2), lying)]);
    state.feed_file(id, &bytes);
    state.end_file(id);
    let runs = state.file(id).expect("opened").session.runs();
    assert_eq!(runs.len(), 2, "both runs read, whatever the overview claimed");
    assert_eq!(runs[0].summary().requests, 4);
}

#[test]
fn a_file_of_a_newer_version_is_refused_by_name() {
    let mut bytes = Vec::new();
    let newer = Hello {
        protocol_version: PROTOCOL_VERSION + 1,
        ackscope_version: "9.0.0".into(),
        host: HostFacts::default(),
    };
    write_frame(&ToBrowser::Hello(newer), &mut bytes);
    write_frame(&rr_started(1, RrSpec::default()), &mut bytes);
    let mut state = AppState::default();
    let id = state.open_file("new.ackscope", &bytes);
    let file = state.file(id).expect("listed");
    let error = file.error.clone().expect("refused");
    assert!(error.starts_with("new.ackscope: "), "{error}");
    assert!(error.contains(&format!("protocol version {}", PROTOCOL_VERSION + 1)), "{error}");
    assert!(error.contains(&format!("reads version {PROTOCOL_VERSION}")), "{error}");
    assert!(file.session.runs().is_empty());
    assert!(state.selected().is_none());
}

#[test]
fn runs_marked_for_comparison_keep_their_order_until_their_session_goes() {
    let mut state = two_runs();
    let bytes = state.live.file_bytes().expect("recorded").to_vec();
    let file = state.open_file("a.ackscope", &bytes);
    let (live1, live2) = (RunKey::live(RunId(1)), RunKey::live(RunId(2)));
    let file1 = RunKey { source: Source::File(file), run: RunId(1) };
    let selected = state.selected_key();

    state.toggle_compare(live2);
    state.toggle_compare(file1);
    state.toggle_compare(live1);
    assert_eq!(state.compared(), [live2, file1, live1], "in the order marked");
    assert!(state.is_compared(file1));
    assert_eq!(state.selected_key(), selected, "marking does not select");
    state.toggle_compare(file1);
    assert_eq!(state.compared(), [live2, live1], "a second toggle unmarks");
    state.toggle_compare(file1);
    assert_eq!(state.compared(), [live2, live1, file1], "marked again: last");

    // Unknown runs and runs without requests are not marked.
    state.toggle_compare(RunKey::live(RunId(9)));
    apply(
        &mut state,
        ToBrowser::RunStarted {
            run: RunId(3),
            spec: Scenario::Bulk(BulkSpec::default()),
            instruments: Instruments::default(),
        },
    );
    state.toggle_compare(RunKey::live(RunId(3)));
    assert_eq!(state.compared(), [live2, live1, file1]);

    // The probe's Hello starts the live session over: its marks go, the file's stay.
    apply(&mut state, hello());
    assert_eq!(state.compared(), [file1]);
    apply(&mut state, rr_started(1, RrSpec::default()));
    assert_eq!(state.compared(), [file1], "a replayed run is not marked again");

    state.toggle_compare(RunKey::live(RunId(1)));
    state.close_file(file);
    assert_eq!(state.compared(), [RunKey::live(RunId(1))], "the file's runs go with it");
    state.clear_compare();
    assert!(state.compared().is_empty());
}

#[test]
fn latencies_are_sorted_and_follow_the_events() {
    let mut state = AppState::default();
    started(&mut state, 1);
    let all = nagle_run(5, 44 * MS);
    let (first, rest) = all.split_at(all.len() / 2);
    apply(&mut state, events(1, first.to_vec()));
    let partial = state.selected().map(|run| run.latencies_ns().len());
    apply(&mut state, events(1, rest.to_vec()));
    let run = state.selected().expect("run 1 is selected");
    assert!(partial < Some(5), "{partial:?}");
    let latencies = run.latencies_ns();
    assert_eq!(latencies.len(), 5);
    assert!(latencies.windows(2).all(|w| w[0] <= w[1]), "shortest first");
    assert!(latencies[0] < MS, "the first exchange is quick");
    assert!(latencies[4] > 88 * MS, "{}", latencies[4]);
}

/// Random batches of `events`: each side's events in order, the sides interleaved in
/// chunks of 1 to 40 events (the other side trailing or leading by up to a few exchanges).
fn random_batches(events: &[Event], seed: u64) -> Vec<Vec<Event>> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut below = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let (mut client, mut server): (Vec<Event>, Vec<Event>) =
        events.iter().cloned().partition(|e| e.side == Side::Client);
    let mut batches = Vec::new();
    while !client.is_empty() || !server.is_empty() {
        let side = if server.is_empty() || !client.is_empty() && below(2) == 0 {
            &mut client
        } else {
            &mut server
        };
        let take = (1 + below(40)).min(side.len());
        batches.push(side.drain(..take).collect());
    }
    batches
}

#[test]
fn a_streamed_run_is_attributed_and_summarized_as_the_whole_run_after_every_batch() {
    let client_nodelay = RrSpec {
        nodelay: ackscope_shared::PerSide { client: true, server: false },
        ..RrSpec::default()
    };
    let runs = [
        (RrSpec::default(), nagle_run(60, 44 * MS)),
        (client_nodelay, nagle_run(60, 44 * MS)),
        (RrSpec::default(), ackscope_shared::synthetic::nagle_run_with_packets(30, 44 * MS)),
    ];
    for (spec, all) in runs {
        for seed in 0..5 {
            let mut state = AppState::default();
            apply(&mut state, hello());
            apply(&mut state, rr_started(1, spec.clone()));
            // Asked from the first batch, or only from a later one (the run was shown then).
            for (step, batch) in random_batches(&all, seed).into_iter().enumerate() {
                apply(&mut state, events(1, batch));
                let run = state.selected().expect("run 1 is selected");
                if step >= 5 * seed as usize {
                    let whole = Attribution::of(&run.analysis, Some(&spec));
                    assert_eq!(*run.attribution(), whole, "seed {seed}, batch {step}");
                }
                assert_eq!(*run.summary(), run.analysis.summary(), "seed {seed}, batch {step}");
            }
            apply(&mut state, finished(1, RunOutcome::Completed));
            let run = state.selected().expect("run 1 is selected");
            let whole = Attribution::of(&run.analysis, Some(&spec));
            assert_eq!(*run.attribution(), whole);
            assert_eq!(run.attribution().stalls.len(), whole.stalls.len());
            assert!(!whole.stalls.is_empty());
            assert_eq!(*run.summary(), run.analysis.summary());
            assert_eq!(run.summary().requests as usize, run.analysis.requests().len());
        }
    }
}

/// Batches of a streamed run: `per_batch` requests' client events, with the server's events
/// of the batch before (the other side's batches trail, as the probe's threads send them).
fn trailing_batches(events: &[Event], per_batch: u32) -> Vec<Vec<Event>> {
    let group = |event: &Event| event.req.0 / per_batch;
    let groups = events.iter().map(group).max().map_or(0, |last| last + 1);
    let mut batches: Vec<Vec<Event>> = (0..=groups).map(|_| Vec::new()).collect();
    for event in events {
        let trail = u32::from(event.side == Side::Server);
        batches[(group(event) + trail) as usize].push(event.clone());
    }
    batches
}

/// A long live run asked for its summary and attribution after every batch of 100 requests,
/// as the page does once per frame, ends with the whole run's answer; and it prints what that
/// cost (timings are printed, not asserted: `cargo test --release -p ackscope-web timing --
/// --nocapture` runs 100,000 requests).
#[test]
fn timing_a_live_run_asked_after_every_batch() {
    let requests = if cfg!(debug_assertions) { 2_000 } else { 100_000 };
    let batches = trailing_batches(&nagle_run(requests, 44 * MS), 100);
    let mut state = AppState::default();
    started(&mut state, 1);
    let count = batches.len();
    let mut took = Vec::with_capacity(count);
    let mut stalls = 0;
    for batch in batches {
        let began = std::time::Instant::now();
        apply(&mut state, events(1, batch));
        let run = state.selected().expect("run 1 is selected");
        stalls = run.attribution().stalls.len() + run.summary().requests as usize;
        took.push(began.elapsed().as_secs_f64());
    }
    let run = state.selected().expect("run 1 is selected");
    assert_eq!(run.summary().requests, requests);
    assert_eq!(
        run.attribution().stalls.len() as u32,
        2 * (requests - 1),
        "two per request after the first"
    );
    let ms = |batches: &[f64]| batches.iter().sum::<f64>() * 1e3;
    println!(
        "timing: {requests} requests in {count} batches of 100, summary and attribution after \
         each: {:.1} ms in all; the first 100 batches {:.2} ms, the last 100 {:.2} ms \
         ({stalls})",
        ms(&took),
        ms(&took[..100.min(count)]),
        ms(&took[count.saturating_sub(100)..]),
    );
}

/// A file of many runs, each with one exchange, whose events come newest run first.
fn many_runs_file(runs: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    ackscope_shared::wire::write_frame(&hello(), &mut bytes);
    for id in 1..=runs {
        ackscope_shared::wire::write_frame(&rr_started(id, RrSpec::default()), &mut bytes);
    }
    for id in (1..=runs).rev() {
        ackscope_shared::wire::write_frame(&events(id, nagle_run(1, 44 * MS)), &mut bytes);
    }
    bytes
}

/// Issue 11, defects 5 and 6, in the page: each message found its run by a search through
/// every run, so 100,000 runs whose events came in reverse order took the square of that
/// (now an index), and nothing bounded how many runs a file could make the page keep (each
/// costs a few KB of analysis: 100,000 one-request runs, 20 MB of file, took 700 MB).
#[test]
fn a_file_of_many_runs_keeps_the_first_thousand_and_says_so() {
    let runs = 100_000;
    let mut state = AppState::default();
    let id = state.open_file("many.ackscope", &many_runs_file(runs));
    let file = state.file(id).expect("opened");
    let kept = file.session.runs();
    assert_eq!(kept.len(), MAX_FILE_RUNS);
    assert_eq!((kept[0].id, kept[MAX_FILE_RUNS - 1].id), (RunId(1), RunId(1000)));
    assert!(kept.iter().all(|run| run.summary().requests == 1), "every kept run has its events");
    let note = file.error.as_deref().expect("a note that runs were not kept");
    assert!(note.contains("holds 100000 runs") && note.contains("first 1000"), "{note}");
    assert!(note.contains("the first 1000 of a file, and those are shown"), "{note}");
}

#[test]
fn a_run_started_again_replaces_itself_in_place() {
    let mut state = AppState::default();
    started(&mut state, 1);
    started(&mut state, 2);
    apply(&mut state, events(1, nagle_run(3, 44 * MS)));
    started(&mut state, 1);
    let ids: Vec<RunId> = state.live.runs().iter().map(|run| run.id).collect();
    assert_eq!(ids, [RunId(1), RunId(2)]);
    assert_eq!(state.live.runs()[0].events, 0, "the run starts over");
    apply(&mut state, events(2, nagle_run(2, 44 * MS)));
    assert_eq!(state.live.run(RunId(2)).map(|run| run.summary().requests), Some(2));
}

/// A session file as the probe writes one: two runs of the same requests, each opened by its
/// clocks matched (`ClockSync`, as a run against another host or namespace records it), their
/// events in compressed blocks, and its end indexing them.
fn indexed_file(requests: u32) -> Vec<u8> {
    let mut live = AppState::default();
    for run in [1, 2] {
        started(&mut live, run);
        apply(&mut live, finished(run, RunOutcome::Completed));
    }
    let (messages, _) = decode_session(live.live.file_bytes().expect("recorded"));
    let mut file = Vec::new();
    let mut indexer = wire::Indexer::default();
    let clocks = Event {
        at_ns: 0,
        side: Side::Client,
        conn: ackscope_shared::ConnId(0),
        req: ackscope_shared::ReqId(0),
        kind: EventKind::ClockSync { offset_ns: 0, uncertainty_ns: 1_000, rtt_ns: 200_000 },
    };
    let nagle: Vec<Event> = std::iter::once(clocks).chain(nagle_run(requests, 44 * MS)).collect();
    let mut overviews = Vec::new();
    for message in messages {
        if let ToBrowser::RunFinished { run, .. } = message {
            wire::write_blocks(run, &nagle, &mut wire::zstd, &mut file, &mut indexer);
            let mut tally = ackscope_shared::reduce::RrTally::new(None);
            tally.push(&nagle, None);
            overviews.push((run, tally.overview()));
        }
        write_frame(&message, &mut file);
    }
    wire::write_file_end(overviews, &indexer, &mut file);
    file
}

/// The end of `file` (its overviews and block indexes), as the page reads it before its events.
fn end_of(file: &[u8]) -> wire::FileEnd {
    let range = wire::Trailer::file_end_in(file, file.len() as u64).expect("an end");
    wire::read_file_end(&file[range.start as usize..range.end as usize], range.start)
}

/// Reads `file` as the page does, leaving out the plan's ranges.
fn read_as_planned(
    state: &mut AppState,
    name: &str,
    file: &[u8],
    plan: Option<&ReadPlan>,
) -> FileId {
    let skipped = plan.map_or(&[][..], |plan| &plan.skipped[..]);
    let mut kept = Vec::new();
    let mut at = 0;
    for range in skipped {
        kept.extend_from_slice(&file[at..range.start as usize]);
        at = range.end as usize;
    }
    kept.extend_from_slice(&file[at..]);
    let id = state.begin_file_from(name, kept.len() as u64, plan.map(|plan| plan.from));
    let end = end_of(file);
    state.preview_file(id, end.overviews);
    state.index_file(id, end.indexes);
    for piece in kept.chunks(64 * 1024) {
        state.feed_file(id, piece);
    }
    state.end_file(id);
    id
}

/// A file of more events than the page holds says it can be read from a request; read from
/// one, it holds that request (the blocks wholly before it unread), with the times and stalls
/// the whole file gives it.
#[test]
fn a_file_past_what_the_page_holds_is_read_from_a_request() {
    let file = indexed_file(20_000);
    let mut whole = AppState::default();
    let whole_id = read_as_planned(&mut whole, "soak.ackscope", &file, None);
    let whole_run = &whole.file(whole_id).expect("opened").session.runs()[0];
    assert_eq!(whole_run.summary().requests, 20_000, "the whole file fits the page's bound");
    let events = whole_run.events;

    let mut state = AppState::default();
    // Room for a third of its events: two of its six blocks.
    state.cap_file_events(events / 3);
    let id = read_as_planned(&mut state, "soak.ackscope", &file, None);
    let cut = state.file(id).expect("opened");
    let note = cut.error.as_deref().expect("a note that the page holds only part of it");
    assert!(note.contains("read from a request"), "{note}");
    assert!(cut.session.runs()[0].summary().requests < 10_000, "a third of its events");

    let plan =
        state.read_plan(id, Some(RunId(1)), 18_000, Reach::Around).expect("its blocks are indexed");
    // A link to request 18,000, or "go to request": the file is read again around it.
    let cut_key = RunKey { source: Source::File(id), run: RunId(1) };
    assert_eq!(state.read_to_show(cut_key, 18_000), Some((id, plan.from.first)));
    assert_eq!(state.read_to_show(cut_key, 10), None, "held");
    assert_eq!(state.read_to_show(cut_key, 20_000), None, "no block holds it");
    assert_eq!((plan.from.run, plan.from.wanted), (RunId(1), 18_000));
    assert!(plan.from.first > 10_000 && plan.from.first <= 18_000, "{:?}", plan.from);
    assert!(!plan.skipped.is_empty() && plan.skipped.windows(2).all(|w| w[0].end <= w[1].start));
    let read_id = read_as_planned(&mut state, "soak.ackscope", &file, Some(&plan));
    let read = state.file(read_id).expect("opened");
    assert_eq!(read.session.runs().len(), 1, "the run read for, not the other");
    assert_eq!(state.selected_key().map(|key| key.run), Some(RunId(1)));
    let note = read.read_from_note().expect("says where it was read from");
    assert!(note.contains(&format!("from request {}", plan.from.first)), "{note}");
    let run = &read.session.runs()[0];
    assert_eq!(run.analysis.first_request(), plan.from.first);
    assert_eq!(run.analysis.ignored_events, 0, "the earlier requests' events were left out");
    assert!(run.clock.is_some(), "the clocks matched, from the run's first block, are kept");
    assert_eq!(run.analysis.path_delay_ns(), whole_run.analysis.path_delay_ns());
    assert!(run.analysis.path_delay_ns() > 0);
    assert_eq!(read.error, None, "from there the rest of the file fits");
    let held = plan.from.first..plan.from.first + run.analysis.requests().len() as u32;
    assert!(held.contains(&18_000) && held.contains(&19_999), "{held:?}");
    let read_key = RunKey { source: Source::File(read_id), run: RunId(1) };
    assert_eq!(state.read_to_show(read_key, 18_000), None, "held now");
    assert_eq!(state.read_to_show(read_key, 10), Some((read_id, 0)), "not held any more");
    let facts = |run: &Run, req: u32| {
        let view = &run.analysis.requests()[(req - run.analysis.first_request()) as usize];
        let stalls = run.attribution().of_request(req);
        (
            view.start_ns,
            view.done_ns,
            stalls.iter().map(|s| (s.class, s.wait_ns)).collect::<Vec<_>>(),
        )
    };
    for req in [held.start, held.start + 1, 18_000, 19_999] {
        assert_eq!(facts(run, req), facts(whole_run, req), "request {req}");
    }
    assert_eq!(facts(run, 18_000).2.len(), 2, "a Nagle request's two stalls");

    // The whole run's strip: from the file's end, with the part held, for both holds.
    let key = |id| RunKey { source: Source::File(id), run: RunId(1) };
    let strip = state.whole_run(key(read_id)).expect("held in part");
    assert_eq!((strip.overview.rows, strip.held.clone()), (20_000, held.clone()));
    assert_eq!(Some(&strip.overview.slowest_ns()), whole_run.latencies_ns().last());
    let cut_held = state.whole_run(key(id)).expect("the first hold, too").held;
    assert_eq!(cut_held.start, 0);
    assert!(whole.whole_run(key(whole_id)).is_none(), "a file held whole has no such strip");

    // The second run, read from a request: only it is read and shown.
    let second = state.read_plan(id, Some(RunId(2)), 19_000, Reach::From).expect("indexed");
    assert_eq!((second.from.run, second.from.wanted), (RunId(2), 19_000));
    let second_id = read_as_planned(&mut state, "soak.ackscope", &file, Some(&second));
    let runs = state.file(second_id).expect("opened").session.runs();
    assert_eq!(runs.iter().map(|run| run.id).collect::<Vec<_>>(), [RunId(2)]);
    assert!(runs[0].analysis.first_request() > 15_000, "read from its request's block");
    assert_eq!(state.selected_key().map(|key| key.run), Some(RunId(2)));
    let key2 = RunKey { source: Source::File(second_id), run: RunId(2) };
    assert_eq!(state.take_wanted_request(key2), Some(19_000));
    assert_eq!(state.take_wanted_request(key2), None, "selected once, not each time it shows");

    let past = state.read_plan(id, None, 20_000, Reach::From).unwrap_err();
    assert!(past.contains("no run of soak.ackscope holds request 20000"), "{past}");
    assert!(past.contains("from 0 to 19999"), "{past}");
    let rows = state.open_file("rows.ackscope", whole.live.file_bytes().unwrap_or_default());
    let unindexed = state.read_plan(rows, None, 5, Reach::From).unwrap_err();
    assert!(unindexed.contains("does not index its blocks"), "{unindexed}");
}

/// A closed file goes from the page at once, and is handed back to be let go of a piece at a
/// time: each step lets a bounded number of requests go, until none is left.
#[test]
fn a_closed_file_is_let_go_of_a_piece_at_a_time() {
    let file = indexed_file(3_000);
    let mut state = AppState::default();
    let id = read_as_planned(&mut state, "soak.ackscope", &file, None);
    state.select(RunKey { source: Source::File(id), run: RunId(1) });
    let mut closed = state.close_file(id).expect("the file is handed back");
    assert!(state.files().is_empty() && state.selected().is_none());
    let held = |file: &OpenedFile| -> usize {
        file.session.runs().iter().map(|run| run.analysis.requests().len()).sum()
    };
    assert_eq!(held(&closed), 2 * 3_000, "two runs of 3,000");
    let stalls = closed.session.runs()[0].attribution().stalls.len();
    assert_eq!(stalls, 2 * 2_999, "two stalls a request after the first");
    let (mut steps, mut before) = (0, held(&closed));
    while closed.release_some(1_000) {
        steps += 1;
        let now = held(&closed);
        assert!(now <= before && before - now <= 1_000, "{before} then {now}: a thousand a step");
        before = now;
    }
    assert_eq!(steps, 2 * (stalls.div_ceil(1_000) - 1), "as many steps as the stalls take");
    assert!(closed.session.runs().is_empty(), "every run went");
    assert!(state.close_file(id).is_none(), "closed once");
}

/// The pass over the whole run of a file held in part gives every request the facts the whole
/// file read gives it: "next slowest" and the steps from stall to stall find the same requests.
#[test]
fn a_pass_over_the_whole_run_finds_what_the_whole_file_read_finds() {
    let file = indexed_file(6_000);
    let mut whole = AppState::default();
    let whole_id = read_as_planned(&mut whole, "soak.ackscope", &file, None);
    let run = &whole.file(whole_id).expect("opened").session.runs()[0];
    let expected = run.facts();

    let mut state = AppState::default();
    state.cap_file_events(40_000);
    let id = read_as_planned(&mut state, "soak.ackscope", &file, None);
    let key = RunKey { source: Source::File(id), run: RunId(1) };
    assert!(state.whole_run(key).is_some(), "held in part");
    assert_eq!(state.begin_ranking(id, file.len() as u64), Some(0));
    let (first_half, second_half) = file.split_at(file.len() / 2);
    let feed = |state: &mut AppState, id, bytes: &[u8]| {
        for piece in bytes.chunks(64 * 1024) {
            let mut fed: &[u8] = piece;
            while state.feed_ranking(id, fed, 8192) == Some(true) {
                fed = &[];
            }
        }
    };
    feed(&mut state, id, first_half);
    assert!(state.ranking_progress(key).is_some());
    // The file read again from a request halfway: the pass goes on with it, from where it was.
    let ranking = state.take_ranks(id, RunId(1));
    assert!(ranking.0.is_none() && ranking.1.is_some(), "a pass going, nothing ranked yet");
    let plan = state.read_plan(id, Some(RunId(1)), 5_000, Reach::From).expect("indexed");
    let id = read_as_planned(&mut state, "soak.ackscope", &file, Some(&plan));
    let key = RunKey { source: Source::File(id), run: RunId(1) };
    state.give_ranks(id, ranking);
    assert_eq!(state.begin_ranking(id, file.len() as u64), Some(first_half.len() as u64));
    feed(&mut state, id, second_half);
    state.end_ranking(id);
    let ranks = state.ranks_of(key).expect("every request ranked");
    assert_eq!(ranks.facts.len(), expected.len());
    for req in (0..6_000).step_by(97).chain([5_999]) {
        assert_eq!(ranks.facts.extent_of(req), expected.extent_of(req), "request {req}");
    }
    let mut slowest = (None, None);
    for _ in 0..50 {
        slowest = (ranks.next_slowest(slowest.0), expected.next_slowest(slowest.1));
        assert_eq!(slowest.0, slowest.1);
    }
    // From any request, kept among the slowest or not (the scan past them), and past the
    // fastest (back to the slowest).
    for req in (0..6_000).step_by(61).chain([0, 5_999]) {
        assert_eq!(ranks.next_slowest(Some(req)), expected.next_slowest(Some(req)), "{req}");
    }
    let filter = Filter { only_stalled: true, ..Filter::default() };
    assert_eq!(ranks.next_stalled(Some(10), true, &filter), Some(11));
    assert_eq!(ranks.next_stalled(Some(10), false, &filter), Some(9));
    assert_eq!(ranks.next_stalled(None, true, &filter), Some(1), "request 0 is not stalled");
    assert!(state.ranks_of(RunKey { run: RunId(2), ..key }).is_none(), "of the run passed");
    assert_eq!(state.begin_ranking(id, file.len() as u64), None, "ranked already");
}

/// What a watch of story 1's pair sees: its packets (each exchange numbered on its
/// connection), and as root (`calls`) the reads that slept 1 ms or more, as `BlockedCall`s.
fn watched_story_one(requests: u32, calls: bool) -> Vec<Event> {
    let mut watched = Vec::new();
    let mut reading = std::collections::HashMap::new();
    for event in ackscope_shared::synthetic::nagle_run_with_packets(requests, 44 * MS) {
        match event.kind {
            EventKind::Segment(_) => watched.push(event),
            EventKind::ReadStart { .. } => {
                reading.insert(event.side, event.at_ns);
            }
            EventKind::ReadDone { bytes } if calls => {
                let since_ns = reading[&event.side];
                if event.at_ns - since_ns >= MS {
                    let call = ackscope_shared::Call::Recv;
                    watched.push(Event {
                        kind: EventKind::BlockedCall { call, since_ns, bytes },
                        ..event
                    });
                }
            }
            _ => {}
        }
    }
    watched.sort_by_key(|event| event.at_ns);
    watched
}

fn watch_started(state: &mut AppState, capture: bool) {
    apply(state, hello());
    apply(
        state,
        ToBrowser::RunStarted {
            run: RunId(1),
            spec: Scenario::Watch(ackscope_shared::WatchSpec::default()),
            instruments: Instruments { capture, ..Instruments::default() },
        },
    );
}

/// A watch's exchanges are rows, as a run's requests are: each held message's reader's read,
/// seen sleeping until the held bytes came (root), is drawn as the stall, with its wait; the
/// first exchange (quick ACKs) has none.
#[test]
fn a_watchs_exchanges_are_rows_whose_sleeping_reads_are_the_stalls() {
    use crate::timeline::layout::{layout_row, Mark};
    use crate::timeline::scale::Scale;
    let mut state = AppState::default();
    watch_started(&mut state, true);
    apply(&mut state, events(1, watched_story_one(5, true)));
    apply(&mut state, finished(1, RunOutcome::Interrupted));
    let run = state.selected().expect("the watch is shown");
    assert!(run.has_rows(), "a watch that read packets has rows");
    assert_eq!(run.facts().len(), 5, "one row per exchange");
    let why = run.attribution();
    assert!(why.of_request(0).is_empty(), "{:?}", why.of_request(0));
    let scale = Scale::fit(100 * MS, 800.0);
    for row in 1..5u32 {
        let stalls = why.of_request(row);
        assert_eq!(stalls.len(), 2, "row {row}: one stall each way: {stalls:?}");
        let view = &run.analysis.requests()[row as usize];
        let laid = layout_row(&run.analysis, row, view, stalls, &scale).expect("a row");
        let stalled: Vec<_> = laid.bars.iter().filter(|b| b.mark == Mark::Stalled).collect();
        assert_eq!(stalled.len(), 2, "row {row}: both sleeping reads are the stalls");
        assert!(stalled.iter().all(|b| b.title.contains("read 2048 B")), "{stalled:?}");
        let labels: Vec<&str> = laid.labels.iter().map(|l| l.text.as_str()).collect();
        assert!(
            labels.iter().all(|l| l.starts_with("44.0") || l.starts_with("43.9")),
            "{labels:?}"
        );
    }
    assert!(no_timeline_note_of(&state).is_none(), "no note: it has a timeline");
    // The run-clock view draws the same reads as the stalls, on the connection's lanes.
    assert_eq!(stalled_on_the_run_clock(run), 8);

    // A file's batch holds many exchanges of a connection, each stall decided after its own:
    // every one still finds its row.
    let mut state = AppState::default();
    watch_started(&mut state, true);
    apply(&mut state, events(1, watched_story_one(40, true)));
    apply(&mut state, finished(1, RunOutcome::Interrupted));
    let run = state.selected().expect("the watch is shown");
    let why = run.attribution();
    let counted: u32 = why.classes.iter().map(|class| class.count).sum();
    assert_eq!((why.stalls.len(), counted), (78, 78), "two a request but the first's");
    assert!((1..40).all(|row| why.of_request(row).len() == 2));
}

fn stalled_on_the_run_clock(run: &Run) -> usize {
    let lanes = crate::timeline::clock::Lanes::of(&run.analysis, run.attribution());
    lanes.lanes.iter().map(|lane| lane.stalled()).sum()
}

/// Without its programs' calls (CAP_NET_RAW, not root), a watch's rows draw the waits the
/// packets show, on the reader's lane; without packets it has no rows, and says why.
#[test]
fn a_watch_without_calls_draws_the_packets_waits_and_one_without_packets_has_no_rows() {
    use crate::timeline::layout::{layout_row, Mark};
    use crate::timeline::scale::Scale;
    let mut state = AppState::default();
    watch_started(&mut state, true);
    apply(&mut state, events(1, watched_story_one(3, false)));
    apply(&mut state, finished(1, RunOutcome::Interrupted));
    let run = state.selected().expect("the watch is shown");
    let why = run.attribution();
    let view = &run.analysis.requests()[1];
    let laid = layout_row(&run.analysis, 1, view, why.of_request(1), &Scale::fit(100 * MS, 800.0))
        .expect("a row");
    let stalled: Vec<_> = laid.bars.iter().filter(|b| b.mark == Mark::Stalled).collect();
    assert_eq!(stalled.len(), 2, "{:?}", laid.bars);
    assert!(stalled.iter().all(|b| b.title.contains("the wait the packets show")));
    assert_eq!(stalled_on_the_run_clock(run), 4, "two exchanges held each way");

    let mut state = AppState::default();
    watch_started(&mut state, false);
    let run = state.selected().expect("the watch is shown");
    assert!(!run.has_rows());
    assert!(no_timeline_note_of(&state).is_some_and(|note| note.contains("without packets")));
}

fn no_timeline_note_of(state: &AppState) -> Option<&'static str> {
    crate::panels::summary::no_timeline_note(state)
}
