//! CI's smoke pass of the fuzz targets (`cargo xtask fuzz` runs them coverage-guided, on
//! nightly): every checked-in corpus input of every target, through the target's body, on
//! stable. An input that once crashed a target stays in its corpus, so this is also the
//! regression test of every fix a fuzzer found.
//!
//! `ACKSCOPE_BLESS=1 cargo test -p ackscope-shared --test fuzz_corpus` (re)writes the seeds made
//! from fixed values (`seed-*` files); the fuzzer's own finds are added with `cargo xtask fuzz
//! --keep`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use ackscope_shared::control::{ToClient, ToServer};
use ackscope_shared::event::tcp_flags;
use ackscope_shared::fuzzing::TARGETS;
use ackscope_shared::packet::{synthesize, Packet};
use ackscope_shared::pcap::PcapngWriter;
use ackscope_shared::synthetic::{nagle_run_with_packets, MS};
use ackscope_shared::wire::{self, Instruments, RunOutcome, ToBrowser, ToProbe};
use ackscope_shared::{BulkSpec, ConnId, RrSpec, RunId, Scenario, Segment};

fn corpus(target: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus")).join(target)
}

/// The seeds of each target, made from fixed values (as the golden file is).
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let run = RunId(1);
    let events = nagle_run_with_packets(3, 44 * MS);
    let mut session = Vec::new();
    let hello = wire::Hello::current("0.1.0", wire::HostFacts::default());
    let spec = Scenario::Rr(RrSpec::default());
    for message in [
        ToBrowser::Hello(hello),
        ToBrowser::RunStarted { run, spec: spec.clone(), instruments: Instruments::default() },
        ToBrowser::Events { run, events: events.clone() },
        ToBrowser::RunFinished { run, outcome: RunOutcome::Completed },
    ] {
        wire::write_frame(&message, &mut session);
    }
    // The same session as version 9 writes it: its events in a block of compressed columns.
    let mut blocks = Vec::new();
    let hello = wire::Hello::current("0.1.0", wire::HostFacts::default());
    wire::write_frame(&ToBrowser::Hello(hello), &mut blocks);
    let start =
        ToBrowser::RunStarted { run, spec: spec.clone(), instruments: Instruments::default() };
    wire::write_frame(&start, &mut blocks);
    let block = wire::encode_blocks(run, &events, &mut wire::zstd).remove(0);
    let mut index = wire::Indexer::default();
    index.note(run, blocks.len() as u64, block.payload.len(), block.contents);
    wire::write_payload(&block.payload, &mut blocks);
    wire::write_frame(&ToBrowser::RunFinished { run, outcome: RunOutcome::Completed }, &mut blocks);
    // Version 10 ends a finished file with the run's block index.
    let mut indexed = blocks.clone();
    wire::write_file_end(Vec::new(), &index, &mut indexed);
    let block = block.payload;
    let packet = Packet {
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        src_port: 40000,
        dst_port: 9000,
        segment: Segment {
            flags: tcp_flags::ACK | tcp_flags::PSH,
            seq: 1,
            ack: 1,
            len: 4,
            window: 512,
            mss: Some(1460),
            timestamps: Some((7, 9)),
            ..Segment::default()
        },
    };
    let ip = synthesize(&packet);
    let mut pcapng = Vec::new();
    let mut writer = PcapngWriter::new(&mut pcapng);
    let iface = writer.interface("lo", 101);
    writer.packet(iface, 1_000, &ip, Some("a comment"));
    writer.packet(iface, 44_000_000, &ip, None);
    let start_remote = ToProbe::StartRemoteRun {
        spec: spec.clone(),
        server: "10.0.0.2:7000".into(),
        token: "0123456789abcdef".into(),
    };
    let hello = ToServer::Hello {
        protocol_version: wire::PROTOCOL_VERSION,
        ackscope_version: "0.1.0".into(),
        token: "0123456789abcdef".into(),
    };
    let events_back = ToClient::Events { events: events.clone() };
    vec![
        ("session_frames", "seed-session", session.clone()),
        ("show_pipeline", "seed-session", session),
        ("session_frames", "seed-session-blocks", blocks.clone()),
        ("show_pipeline", "seed-session-blocks", blocks),
        ("event_blocks", "seed-block", block),
        ("session_frames", "seed-session-indexed", indexed.clone()),
        ("seek_request", "seed-session-indexed", indexed),
        ("compact_events", "seed-events", wire::encode(&ToBrowser::Events { run, events })),
        (
            "websocket_to_probe",
            "seed-start-run",
            wire::encode(&ToProbe::StartRun { spec: spec.clone() }),
        ),
        ("websocket_to_probe", "seed-start-remote-run", wire::encode(&start_remote)),
        ("websocket_to_probe", "seed-stop-run", wire::encode(&ToProbe::StopRun)),
        ("control_messages", "seed-hello", wire::encode(&hello)),
        (
            "control_messages",
            "seed-run",
            wire::encode(&ToServer::Run {
                spec: Scenario::Bulk(BulkSpec::default()),
                instruments: Instruments::default(),
            }),
        ),
        ("control_messages", "seed-events", wire::encode(&events_back)),
        (
            "control_messages",
            "seed-peer",
            wire::encode(&ToClient::Peer { conn: ConnId(3), client_port: 40000 }),
        ),
        ("pcap_import", "seed-pcapng", pcapng),
        ("ip_tcp", "seed-ipv4-tcp", ip),
        ("reducer_ops", "seed-past-every-bound", past_every_bound()),
    ]
}

/// A `reducer_ops` program past every bound the reducer keeps: 81,920 requests nobody
/// answers (the hold limit is 65,536), 8,192 TCP_INFO samples of one request (4,096 kept),
/// the first request's start repeated 4,096 times, a connection closed, and 1,024 runs started
/// that never end (1,000 followed), each with a request answered.
fn past_every_bound() -> Vec<u8> {
    let op = |what: u8, conn: u8, step: u8, log2_repeat: u8| [what, conn, step, log2_repeat];
    let mut program = Vec::new();
    program.extend(std::iter::repeat_n(op(0, 1, 1, 12), 20).flatten());
    program.extend(op(2, 1, 0, 12));
    program.extend(op(2, 1, 0, 12));
    program.extend(op(7, 1, 0, 12));
    program.extend(op(4, 1, 0, 0));
    for _ in 0..1024 {
        program.extend(op(5, 2, 0, 0));
        program.extend(op(1, 2, 1, 0));
    }
    program
}

#[test]
fn every_corpus_input_goes_through_its_target() {
    if std::env::var_os("ACKSCOPE_BLESS").is_some() {
        for (target, name, bytes) in seeds() {
            std::fs::create_dir_all(corpus(target)).unwrap();
            std::fs::write(corpus(target).join(name), bytes).unwrap();
        }
    }
    for (target, body) in TARGETS {
        let dir = corpus(target);
        let inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}; every target has a corpus", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        assert!(!inputs.is_empty(), "{target}: an empty corpus checks nothing");
        for input in inputs {
            body(&std::fs::read(&input).unwrap());
        }
    }
}

#[test]
fn the_seeds_are_what_the_corpus_holds() {
    for (target, name, bytes) in seeds() {
        let held = std::fs::read(corpus(target).join(name)).unwrap_or_default();
        assert!(held == bytes, "{target}/{name} is stale: bless it (see the module docs)");
    }
}
