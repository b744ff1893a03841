//! The bodies of the fuzz targets (`fuzz/`, `cargo xtask fuzz`): every decoder of bytes that come
//! from a file or the network. (The whole read-back pipeline, `ackscope show` and `export`, is
//! fuzzed through the probe's own code: `ackscope_probe::fuzzing`.) Each takes arbitrary bytes
//! and must neither panic nor take memory or time out of proportion to them (libFuzzer's limits,
//! set by `cargo xtask fuzz`, fail a target that does). They live here, behind the `fuzzing`
//! feature, so that a plain `cargo test` replays the checked-in corpora through them on stable
//! Rust (`shared/tests/fuzz_corpus.rs`): the smoke pass of CI.

use crate::control::{ToClient, ToServer};
use crate::event::RunId;
use crate::wire::{self, FrameStream, ToBrowser, ToProbe};

/// A target's body: arbitrary bytes in, no panic out.
pub type Target = fn(&[u8]);

/// Every target, by name: the fuzz crate's binaries and the corpus folders are named alike.
/// (The tenth, `show_pipeline`, runs the probe's own `show` and `export --json`:
/// `ackscope_probe::fuzzing`.)
pub const TARGETS: [(&str, Target); 9] = [
    ("session_frames", session_frames),
    ("compact_events", compact_events),
    ("event_blocks", event_blocks),
    ("seek_request", seek_request),
    ("websocket_to_probe", websocket_to_probe),
    ("control_messages", control_messages),
    ("pcap_import", pcap_import),
    ("ip_tcp", ip_tcp),
    ("reducer_ops", reducer_ops),
];

/// A session file's framing, fed in uneven pieces as a file or socket delivers them. The
/// messages `show` and `export` look at in place (`with_next_message`, a run's start decoded
/// by hand) are the messages decoded whole, errors included.
pub fn session_frames(data: &[u8]) {
    let mut stream = FrameStream::new();
    let mut in_place = FrameStream::new();
    let split = data.first().map_or(1, |&b| usize::from(b).max(1));
    for chunk in data.chunks(split) {
        stream.push(chunk);
        in_place.push(chunk);
        loop {
            let message = stream.next_message();
            let seen = in_place.with_next_message(|seen| seen.cloned());
            assert_eq!(seen, message, "a message looked at in place is the one decoded whole");
            match message {
                Some(Ok(_)) => {}
                Some(Err(_)) => return,
                None => break,
            }
        }
    }
    assert_eq!(in_place.finish(), stream.finish());
}

/// One message as the browser decodes it, the compact event encoding included.
pub fn compact_events(data: &[u8]) {
    if let Ok(ToBrowser::Events { events, .. }) = wire::decode::<ToBrowser>(data) {
        // What came out encodes again and decodes to the same.
        let again = wire::encode(&ToBrowser::Events { run: RunId(0), events: events.clone() });
        match wire::decode::<ToBrowser>(&again) {
            Ok(ToBrowser::Events { events: back, .. }) => assert_eq!(back, events),
            other => panic!("re-encoded events do not decode: {other:?}"),
        }
    }
}

/// A block of a file's events (version 9), as every reader decodes it: what decodes encodes
/// again, its columns compressed or stored, and decodes to the same events.
pub fn event_blocks(data: &[u8]) {
    if data.first() != Some(&12) {
        return;
    }
    if let Ok(ToBrowser::Events { run, events }) = wire::decode_block(data) {
        let stored: wire::Compress<'_> = &mut |raw| raw.to_vec();
        for compress in [stored, &mut wire::zstd] {
            let mut back = Vec::new();
            for block in wire::encode_blocks(run, &events, compress) {
                match wire::decode_block(&block.payload) {
                    Ok(ToBrowser::Events { events, .. }) => back.extend(events),
                    other => panic!("a block encoded again does not decode: {other:?}"),
                }
            }
            assert_eq!(back, events);
        }
    }
}

/// A whole file, as `show --request` reads it (version 10): its trailer, its end, then the
/// blocks its index names for a few requests of every run indexed. Whatever the index claims,
/// what is read stays within the file and what it says is checked.
pub fn seek_request(data: &[u8]) {
    let mut read_at = |at: u64, len: usize| {
        let at = usize::try_from(at).map_err(|e| e.to_string())?;
        let end = at.checked_add(len).ok_or("past the end")?;
        data.get(at..end).map(<[u8]>::to_vec).ok_or_else(|| "past the end".to_string())
    };
    let Ok(Some(seeker)) = wire::seek::Seeker::open(data.len() as u64, &mut read_at) else {
        return;
    };
    let runs: Vec<(RunId, u64)> =
        seeker.runs().map(|index| (index.run, index.requests())).collect();
    for (run, requests) in runs {
        for request in [0, requests / 2, requests.saturating_sub(1)] {
            let request = u32::try_from(request).unwrap_or(u32::MAX);
            if let Some(Ok(found)) = seeker.request(run, request, 1000, &mut read_at) {
                assert!(found.events.iter().all(|event| event.req.0 == request));
                assert!(found.events.len() <= 1000);
                assert!(found.blocks_read <= found.blocks);
            }
        }
    }
}

/// What a page sends the probe, as the probe decodes and checks it before acting.
pub fn websocket_to_probe(data: &[u8]) {
    if let Ok(ToProbe::StartRun { spec } | ToProbe::StartRemoteRun { spec, .. }) =
        wire::decode::<ToProbe>(data)
    {
        let _ = spec.validate();
        let _ = spec.describe();
    }
}

/// Both directions of a control connection between two probes.
pub fn control_messages(data: &[u8]) {
    let _ = wire::peek_version(data);
    if let Ok(ToServer::Run { spec, .. }) = wire::decode::<ToServer>(data) {
        let _ = spec.validate();
    }
    let _ = wire::decode::<ToClient>(data);
}

/// A pcap or pcapng file as `ackscope import` reads it, every packet parsed.
pub fn pcap_import(data: &[u8]) {
    let mut reader = crate::pcap::CaptureReader::new(data);
    while let Some(packet) = reader.next_packet() {
        let _ = crate::pcap::parse_link(packet.linktype, packet.data);
    }
}

/// IP and TCP headers, as capture and import parse them (Ethernet first when the first byte says
/// so, else raw IP).
pub fn ip_tcp(data: &[u8]) {
    let _ = crate::packet::parse_ip(data);
    let _ = crate::packet::parse_ethernet(data);
    if let Some((&linktype, rest)) = data.split_first() {
        let _ = crate::pcap::parse_link(u16::from(linktype), rest);
    }
}

/// The session reducer (`reduce::SessionReducer`, what `show` and every export read runs with)
/// driven by a program that a few bytes expand into millions of events, so that an input of
/// libFuzzer's size reaches past every bound it keeps, which raw session bytes of 64 KiB never
/// would. Each 4-byte op is (what, connection, request step, repeat: 2^0 to 2^12 times):
/// requests that finish unanswered or answered, TCP_INFO samples and segments of the current
/// request, closed connections, runs started and finished, the first request's start repeated.
/// After every batch the bounds are asserted: runs followed, requests held, samples per request.
/// At most [`MAX_OPS_EVENTS`] events an input.
pub fn reducer_ops(data: &[u8]) {
    use crate::analysis::{MAX_HELD, MAX_SAMPLES_PER_REQUEST};
    use crate::event::{ConnId, Event, EventKind, ReqId, Side, TcpInfoSample};
    use crate::reduce::{RunAnalyses, SessionReducer, MAX_OPEN_RUNS};
    use crate::spec::{RrSpec, Scenario};
    use crate::wire::{Instruments, RunOutcome, EVENTS_PER_MESSAGE};

    let mut reducer = SessionReducer::hand_out_stalls();
    let mut outputs = Vec::new();
    let (mut run, mut req, mut at_ns, mut made) = (RunId(0), 0u32, 0u64, 0usize);
    let mut batch: Vec<Event> = Vec::new();
    let mut handle = |reducer: &mut SessionReducer, message: ToBrowser| {
        reducer.handle(&message, &mut outputs);
        outputs.clear();
        assert!(reducer.open_runs().count() <= MAX_OPEN_RUNS, "runs followed past the bound");
        for followed in reducer.open_runs() {
            let RunAnalyses::Rr(rr) = &followed.tally.analysis else { continue };
            let held = rr.analysis().requests();
            assert!(held.len() <= MAX_HELD, "{} requests held", held.len());
            for view in held {
                let most = [view.kernel().len(), view.segments().len(), view.run_delays().len()];
                assert!(most.iter().all(|&n| n <= MAX_SAMPLES_PER_REQUEST), "{most:?} samples");
            }
        }
    };
    let start = |run: RunId| ToBrowser::RunStarted {
        run,
        spec: Scenario::Rr(RrSpec::default()),
        instruments: Instruments::default(),
    };
    handle(&mut reducer, start(run));
    for op in data.chunks_exact(4) {
        let (what, conn, step, repeat) = (op[0] % 8, ConnId(u32::from(op[1])), op[2], op[3]);
        for _ in 0..1u32 << (repeat % 13) {
            if made >= MAX_OPS_EVENTS {
                break;
            }
            at_ns += 1_000;
            let mut event = |side: Side, req: u32, kind: EventKind| {
                batch.push(Event { at_ns, side, conn, req: ReqId(req), kind });
                made += 1;
            };
            match what {
                0 | 1 => {
                    req = req.saturating_add(u32::from(step).max(1));
                    event(Side::Client, req, EventKind::RequestStart);
                    if what == 1 {
                        event(Side::Server, req, EventKind::WriteStart { len_bytes: 8 });
                        event(Side::Server, req, EventKind::WriteDone { bytes: 8 });
                    }
                    event(Side::Client, req, EventKind::RequestDone);
                }
                2 => {
                    let info = TcpInfoSample { during_block: true, ..TcpInfoSample::default() };
                    event(Side::Client, req, EventKind::TcpInfo(Box::new(info)));
                }
                3 => {
                    event(Side::Client, req, EventKind::Segment(Default::default()));
                }
                4 => {
                    event(Side::Client, req, EventKind::Closed);
                    event(Side::Server, req, EventKind::Closed);
                }
                7 => event(Side::Client, 0, EventKind::RequestStart),
                _ => {}
            }
            if batch.len() >= EVENTS_PER_MESSAGE || matches!(what, 5 | 6) {
                let events = std::mem::take(&mut batch);
                handle(&mut reducer, ToBrowser::Events { run, events });
            }
            match what {
                5 => {
                    run = RunId(run.0.wrapping_add(1));
                    req = 0;
                    handle(&mut reducer, start(run));
                }
                6 => {
                    let outcome = RunOutcome::Completed;
                    handle(&mut reducer, ToBrowser::RunFinished { run, outcome });
                }
                _ => {}
            }
        }
    }
    let events = std::mem::take(&mut batch);
    handle(&mut reducer, ToBrowser::Events { run, events });
    reducer.finish(&mut Vec::new());
}

/// The most events one input of [`reducer_ops`] makes: past every hold limit, within
/// libFuzzer's 10 s.
pub const MAX_OPS_EVENTS: usize = 2_000_000;
