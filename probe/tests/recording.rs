//! What recording costs on the measured path, as a user of a busy server would notice it: one
//! read per message when the message is already there, TCP_INFO at boundaries at a bounded rate,
//! and a sampler thread that does not wake while nothing is blocked. The tests take turns
//! ([`one_at_a_time`]): the sampler thread is the process's, and one test counts its wake-ups.

use std::fs;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ackscope_probe::net::endpoint::SLOW_CALL;
use ackscope_probe::scenario;
use ackscope_shared::wire::Instruments;
use ackscope_shared::{Event, EventKind, PerSide, RrSpec, Scenario, Side, WritePattern};

/// Held by each test for its whole run.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A keep-alive ping-pong of `requests` single-write messages, TCP_NODELAY on both sides: every
/// message leaves in one segment, so it is all there when its reader looks.
fn ping_pong(requests: u32) -> Vec<Event> {
    let spec = RrSpec {
        requests,
        size_bytes: 2048,
        nodelay: PerSide::both(true),
        write: PerSide::both(WritePattern::Single),
        ..RrSpec::default()
    };
    let mut events = Vec::new();
    let outcome = scenario::run(
        &Scenario::Rr(spec),
        Instruments::default(),
        &AtomicBool::new(false),
        |batch| events.extend(batch),
    )
    .expect("a valid spec");
    assert_eq!(outcome, ackscope_shared::wire::RunOutcome::Completed);
    events
}

fn reads_of(events: &[Event], side: Side) -> usize {
    events
        .iter()
        .filter(|e| e.side == side && matches!(e.kind, EventKind::ReadDone { bytes } if bytes > 0))
        .count()
}

#[test]
fn a_message_that_is_already_there_takes_one_read() {
    let _turn = one_at_a_time();
    let requests = 2000;
    let events = ping_pong(requests);
    let (client, server) = (reads_of(&events, Side::Client), reads_of(&events, Side::Server));
    eprintln!("{requests} requests: {client} client reads, {server} server reads");
    // A length prefix and a body read apart would be 2 per message. A reader can still find
    // part of a message on rare occasions (a segment split by the kernel): allow 5%.
    let most = requests as usize * 105 / 100;
    assert!(client <= most, "{client} client reads for {requests} answers");
    assert!(server <= most, "{server} server reads for {requests} requests");
    assert!(client >= requests as usize && server >= requests as usize);
}

#[test]
fn tcp_info_at_boundaries_is_rate_limited_per_connection() {
    let _turn = one_at_a_time();
    let events = ping_pong(5000);
    let span_ns = events.iter().map(|e| e.at_ns).max().unwrap()
        - events.iter().map(|e| e.at_ns).min().unwrap();
    let boundary = |side| {
        events
            .iter()
            .filter(|e| {
                e.side == side && matches!(&e.kind, EventKind::TcpInfo(info) if !info.during_block)
            })
            .count()
    };
    let calls = events.iter().filter(|e| matches!(e.kind, EventKind::ReadDone { .. })).count();
    // Calls of 1 ms or more: rare on loopback, but a busy machine makes some, each followed by
    // a sample of its own.
    let slow_calls = |side| {
        let mut started = None;
        let slow = SLOW_CALL.as_nanos() as u64;
        let mut count = 0;
        for e in events.iter().filter(|e| e.side == side) {
            match e.kind {
                EventKind::ReadStart { .. } | EventKind::WriteStart { .. } => {
                    started = Some(e.at_ns)
                }
                EventKind::ReadDone { .. } | EventKind::WriteDone { .. } => {
                    count += usize::from(started.take().is_some_and(|s| e.at_ns - s >= slow));
                }
                _ => {}
            }
        }
        count
    };
    for side in [Side::Client, Side::Server] {
        // One every 10 ms per side, the first call's, and one after each slow call.
        let allowed = (span_ns / 10_000_000) as usize + 1 + slow_calls(side);
        let samples = boundary(side);
        eprintln!(
            "{side:?}: {samples} boundary samples over {} ms, {calls} reads",
            span_ns / 1_000_000
        );
        assert!(samples >= 1, "the first call is sampled: the MSS and RTT are known");
        assert!(samples <= allowed, "{samples} boundary samples, at most {allowed} expected");
    }
}

/// Voluntary context switches of this process's TCP_INFO sampler thread, by name.
fn sampler_switches() -> Option<u64> {
    for task in fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        if fs::read_to_string(path.join("comm")).ok()?.trim() != "tcp-info" {
            continue;
        }
        let status = fs::read_to_string(path.join("status")).ok()?;
        return status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse().ok());
    }
    None
}

#[test]
fn the_sampler_sleeps_while_nothing_is_blocked() {
    let _turn = one_at_a_time();
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::sync::mpsc::sync_channel;

    use ackscope_probe::net::record::{Clock, Recorder};
    use ackscope_probe::net::tcp_info::BlockSampler;
    use ackscope_shared::{ConnId, ReqId};

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let (sink, samples) = sync_channel(64);
    let interval = Duration::from_millis(1);
    let clock = Clock::start();
    // The measuring thread's recorder, which takes the call's last samples as it returns.
    let mut rec = Recorder::new(clock, Side::Client, sink.clone());
    let sampler = BlockSampler::start(
        client.try_clone().unwrap(),
        interval,
        clock,
        Side::Client,
        ConnId(0),
        sink,
    )
    .unwrap();
    // One long block, so the thread runs and then goes idle.
    let answer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        server.write_all(b"x").unwrap();
        server
    });
    sampler.blocked(ReqId(0));
    client.read_exact(&mut [0]).unwrap();
    sampler.unblocked(&mut rec);
    drop(rec);
    let _server = answer.join().unwrap();
    std::thread::sleep(Duration::from_millis(20));

    let before = sampler_switches().expect("a thread named tcp-info");
    std::thread::sleep(Duration::from_millis(300));
    let after = sampler_switches().unwrap();
    eprintln!("sampler: {} wake-ups in 300 ms with nothing blocked", after - before);
    // Waking every interval would be 300.
    assert!(after - before <= 2, "{} wake-ups in 300 ms idle", after - before);
    drop(sampler);
    let sampled = samples.try_iter().flatten().count();
    assert!(sampled >= 5, "the 30 ms block was sampled: {sampled} samples");
}
