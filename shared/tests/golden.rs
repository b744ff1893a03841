//! Freezes the session-file format: a small session built from fixed values must encode to the
//! checked-in bytes, and those bytes must decode to it. A change that breaks this test changes
//! the format: bump `PROTOCOL_VERSION`, describe the change in docs/FORMAT.md, and regenerate the
//! file with `ACKSCOPE_BLESS=1 cargo test -p ackscope-shared --test golden`.

use ackscope_shared::synthetic::{nagle_run, MS};
use ackscope_shared::wire::{
    self, FrameStream, Hello, HostFacts, Instruments, RunOutcome, ToBrowser, PROTOCOL_VERSION,
};
use ackscope_shared::{
    ConnId, Event, EventKind, ReqId, RrSpec, RunId, Scenario, Side, SockOpt, TcpInfoSample,
};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/session-v1.ackscope");

fn session() -> Vec<ToBrowser> {
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
    let run = RunId(1);
    vec![
        ToBrowser::Hello(Hello::current("0.1.0", host)),
        ToBrowser::RunStarted {
            run,
            spec: Scenario::Rr(RrSpec::default()),
            instruments: Instruments::default(),
        },
        ToBrowser::Events { run, events },
        ToBrowser::RunFinished { run, outcome: RunOutcome::Completed },
    ]
}

#[test]
fn the_session_format_is_frozen() {
    assert_eq!(PROTOCOL_VERSION, 1, "a new version needs a new golden file beside this one");
    let mut encoded = Vec::new();
    for message in session() {
        wire::write_frame(&message, &mut encoded);
    }
    if std::env::var_os("ACKSCOPE_BLESS").is_some() {
        std::fs::write(GOLDEN, &encoded).unwrap();
    }
    let golden = std::fs::read(GOLDEN).expect("the golden file is checked in");
    let mut reader = FrameStream::new();
    reader.push(&golden);
    let mut decoded = Vec::new();
    while let Some(message) = reader.next_message() {
        decoded.push(message.expect("the golden file decodes"));
    }
    assert_eq!(reader.finish(), None, "the golden file ends on a frame boundary");
    assert_eq!(decoded, session(), "the checked-in file decodes to the same session");
    assert_eq!(encoded, golden, "encoding the session gives the checked-in bytes");
}
