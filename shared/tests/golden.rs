//! Freezes the session-file format: a small session built from fixed values must encode to the
//! checked-in bytes, and those bytes must decode to it, for every version this build reads. A
//! change that breaks this test changes the format: bump `PROTOCOL_VERSION`, describe the change
//! in docs/FORMAT.md, add a golden file beside the others and write it with
//! `ACKSCOPE_BLESS=1 cargo test -p ackscope-shared --test golden` (which writes only the newest).

use ackscope_shared::overview::{key, Overview, Priority};
use ackscope_shared::synthetic::{nagle_run, MS};
use ackscope_shared::tried::{OptionTried, TriedOption};
use ackscope_shared::wire::{
    self, FrameStream, Hello, HostFacts, Instruments, RunOutcome, ToBrowser, Trailer,
    OLDEST_READABLE_VERSION, PROTOCOL_VERSION,
};
use ackscope_shared::{
    BulkSpec, Call, ConnId, Event, EventKind, PerSide, ReqId, RrSpec, RunId, Scenario, Side,
    SockOpt, TcpInfoSample, WatchSpec,
};

fn golden(version: u16) -> std::path::PathBuf {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    std::path::Path::new(dir).join(format!("session-v{version}.ackscope"))
}

/// The session as a build of `version` wrote it.
fn session(version: u16) -> Vec<ToBrowser> {
    let host = HostFacts {
        os: "linux".into(),
        kernel: "6.18.0".into(),
        tcp_rmem: "4096 131072 6291456".into(),
        tcp_wmem: "4096 16384 4194304".into(),
        rmem_max: "4194304".into(),
        wmem_max: "4194304".into(),
        congestion_control: "bbr".into(),
        capture: "not attempted".into(),
    };
    let mut events = nagle_run(2, 44 * MS);
    let extra =
        |at_ns, kind| Event { at_ns, side: Side::Client, conn: ConnId(0), req: ReqId(1), kind };
    events.push(extra(1, EventKind::Buffers { sndbuf_bytes: 2_626_560, rcvbuf_bytes: 131_072 }));
    events.push(extra(2, EventKind::SockOpt { opt: SockOpt::QuickAck, value: 1 }));
    events.push(extra(
        3,
        EventKind::TcpInfo(Box::new(TcpInfoSample {
            during_block: true,
            state: 1,
            ato_us: 40_000,
            snd_mss: 65_483,
            unacked: 1,
            notsent_bytes: Some(2048),
            rcv_wnd: Some(65_483),
            ..TcpInfoSample::default()
        })),
    ));
    if version >= 3 {
        // A thread that waited for a CPU.
        events.push(extra(4, EventKind::RunDelay { since_ns: 1, waited_ns: 150_000 }));
    }
    if version >= 4 {
        // A run against a remote server: how its clock was matched to the client's.
        let sync =
            EventKind::ClockSync { offset_ns: -1_234_567, uncertainty_ns: 21_000, rtt_ns: 42_000 };
        events.push(extra(5, sync));
    }
    if version >= 5 {
        // A watch as root: the kernel's delayed-ACK timer sent an ACK.
        events.push(extra(6, EventKind::DelayedAck));
    }
    if version >= 11 {
        // A watch as root: the watched program's recv() slept 43 ms.
        let call = EventKind::BlockedCall { call: Call::Recv, since_ns: 7, bytes: 100 };
        events.push(extra(43_000_007, call));
    }
    let run = RunId(1);
    let hello = Hello { protocol_version: version, ..Hello::current("0.1.0", host) };
    let mut messages = vec![
        ToBrowser::Hello(hello),
        ToBrowser::RunStarted {
            run,
            spec: Scenario::Rr(RrSpec::default()),
            instruments: Instruments::default(),
        },
        ToBrowser::Events { run, events },
        ToBrowser::RunFinished { run, outcome: RunOutcome::Completed },
    ];
    if version >= 6 {
        // A watch that tried TCP_NODELAY on the server: the run after the change, with its
        // record of what was changed on which process.
        let watch = RunId(2);
        let spec = WatchSpec {
            ports: vec![8080],
            pid: None,
            duration_ms: Some(10_000),
            evidence: "packets and TCP_INFO".into(),
        };
        let tried = OptionTried {
            option: TriedOption::NoDelay,
            side: Side::Server,
            pid: 4711,
            command: "python3".into(),
            sockets: 1,
            already_on: 0,
        };
        messages.extend([
            ToBrowser::RunStarted {
                run: watch,
                spec: Scenario::Watch(spec),
                instruments: Instruments::default(),
            },
            ToBrowser::OptionsTried { run: watch, tried: vec![tried] },
            ToBrowser::RunFinished { run: watch, outcome: RunOutcome::Interrupted },
        ]);
    }
    // Version 7 added only live messages (a class's votes): its files are version 6's, but
    // for the version in their Hello. Version 9 wrote the same messages, its events in blocks,
    // and version 10 the blocks' index at the end.
    if version >= 8 {
        // A bulk run whose server pauses before each read (a slow reader), and one that does
        // not, which is written as every version before wrote it.
        for (id, read_pause_us) in [(3, 250_000), (4, 0)] {
            let run = RunId(id);
            let spec = BulkSpec {
                bytes: 1 << 20,
                app_buffer_bytes: 4096,
                read_pause_us,
                rcvbuf: PerSide { client: None, server: Some(8192) },
                ..BulkSpec::default()
            };
            messages.extend([
                ToBrowser::RunStarted {
                    run,
                    spec: Scenario::Bulk(spec),
                    instruments: Instruments::default(),
                },
                ToBrowser::RunFinished { run, outcome: RunOutcome::Completed },
            ]);
        }
    }
    if version >= 2 {
        // The file's end: the run's overview behind the trailer that finds it.
        let overview = Overview::of([
            (key(Priority::Call, 310_000), false),
            (key(Priority::Stalled, 44 * MS), true),
        ]);
        let message = ToBrowser::Overview { run, overview };
        let bytes = wire::encode(&message).len() as u64 + 4;
        messages.push(message);
        messages.push(ToBrowser::Trailer(Trailer::new(bytes)));
    }
    messages
}

#[test]
fn the_session_format_is_frozen() {
    assert_eq!(PROTOCOL_VERSION, 11, "a new version needs a new golden file beside these");
    for version in OLDEST_READABLE_VERSION..=PROTOCOL_VERSION {
        let mut encoded = Vec::new();
        let mut index = wire::Indexer::default();
        let mut overviews = Vec::new();
        for message in session(version) {
            match message {
                // Version 9 writes a file's events in blocks of columns. The golden file keeps
                // its columns stored as they are: it freezes their layout, not zstd's choices
                // (the blocks' tests and every recorded file decode compressed columns).
                ToBrowser::Events { run, events } if version >= 9 => {
                    wire::write_blocks(run, &events, &mut |raw| raw.to_vec(), &mut encoded, {
                        &mut index
                    });
                }
                // Version 10 ends a file with each run's block index after the overviews,
                // which the trailer counts too.
                ToBrowser::Overview { run, overview } if version >= 10 => {
                    overviews.push((run, overview));
                }
                ToBrowser::Trailer(_) if version >= 10 => {
                    wire::write_file_end(std::mem::take(&mut overviews), &index, &mut encoded);
                }
                message => wire::write_frame(&message, &mut encoded),
            }
        }
        if version == PROTOCOL_VERSION && std::env::var_os("ACKSCOPE_BLESS").is_some() {
            std::fs::write(golden(version), &encoded).unwrap();
        }
        let golden = std::fs::read(golden(version)).expect("the golden file is checked in");
        let mut reader = FrameStream::new();
        reader.push(&golden);
        let mut decoded = Vec::new();
        while let Some(message) = reader.next_message() {
            decoded.push(message.expect("the golden file decodes"));
        }
        assert_eq!(reader.finish(), None, "version {version} ends on a frame boundary");
        let mut expected = session(version);
        if version >= 10 {
            // The index is not a message: readers of every message pass it by, and the trailer
            // counts its bytes with the overview's.
            let range = Trailer::file_end_in(&golden, golden.len() as u64).expect("a trailer");
            let end = wire::read_file_end(&golden[range.start as usize..], range.start);
            assert_eq!(end.indexes, index.indexes(), "version {version}: the index reads back");
            assert_eq!(end.indexes.len(), 1, "the one run with events has an index");
            let bytes = range.end - range.start;
            *expected.last_mut().unwrap() = ToBrowser::Trailer(Trailer::new(bytes));
        }
        assert_eq!(decoded, expected, "version {version} decodes to its session");
        assert_eq!(encoded, golden, "version {version}: encoding gives the checked-in bytes");
    }
}
