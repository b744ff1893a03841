//! The bulk scenario: one connection, bytes one way, on loopback, across the emulated link, or
//! to a remote `ackscope server`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ackscope_shared::wire::{Instruments, RunOutcome};
use ackscope_shared::{BulkSpec, Event, Scenario, Side};

use super::{outcome, remote_error, start_link, start_remote, Collector, RemoteNotes, RunNotes};
use crate::emulate::Placement;
use crate::net::bulk;
use crate::net::peers::{ConnTag, Peers};
use crate::remote::drive::CLIENT_BIND;

pub fn run(
    spec: &BulkSpec,
    instruments: Instruments,
    stop: &AtomicBool,
    mut on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    let (collector, batches) = Collector::new(instruments);
    let link = match spec.link.map(|link| start_link(&link, &collector)).transpose() {
        Ok(link) => link,
        Err(error) => return RunOutcome::Failed { error },
    };
    // Sockets stay in the namespace they were made in: only their creation needs placing.
    let placement = Placement::new(link.as_ref());
    let (server_ip, client_ip) = (placement.ip(Side::Server), placement.ip(Side::Client));
    let setup =
        placement.run_in(Side::Server, || bulk::listen(spec, server_ip)).and_then(|listener| {
            let server = listener.local_addr()?;
            let (socket, port) =
                placement.run_in(Side::Client, || bulk::client_socket(spec, client_ip))?;
            Ok((listener, server, socket, port))
        });
    let (listener, server, socket, client_port) = match setup {
        Ok(parts) => parts,
        Err(e) => return RunOutcome::Failed { error: e.to_string() },
    };
    let deadline = spec.duration_ms.map(|ms| Instant::now() + Duration::from_millis(u64::from(ms)));
    let mut server_rec = collector.recorder(Side::Server);
    let mut client_rec = collector.recorder(Side::Client);
    drop(collector);
    let link = &link;
    let (sent, received, relayed) = thread::scope(|scope| {
        let receiver = scope.spawn(move || {
            bulk::serve(spec, instruments, listener, client_port, stop, &mut server_rec)
        });
        let sender = scope.spawn(move || {
            bulk::send(spec, instruments, socket, server, deadline, stop, &mut client_rec)
        });
        // The relay records too: the events end when it stops, after both ends are done.
        let ends = scope.spawn(move || {
            let ends = (join(sender), join(receiver));
            let relayed = link.as_ref().map_or(Ok(()), |l| l.stop_relay().map(drop));
            (ends.0, ends.1, relayed.map_err(|e| e.to_string()))
        });
        for batch in batches {
            on_events(batch);
        }
        ends.join().expect("the thread joining the ends does not panic")
    });
    let error = match (sent, received) {
        (Err(e), _) | (_, Err(e)) => Some(e),
        _ if relayed.is_err() => relayed.err(),
        (Ok(sent), Ok(received)) if sent != received => {
            Some(format!("the client sent {sent} bytes but the server read {received}"))
        }
        _ => None,
    };
    outcome(error, stop)
}

fn join(handle: thread::ScopedJoinHandle<'_, std::io::Result<u64>>) -> Result<u64, String> {
    match handle.join() {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("a bulk thread panicked".into()),
    }
}

/// The receiving end on another host's `ackscope server` (docs/REMOTE.md): its events come back
/// over the control connection onto this run's clock.
pub fn run_remote(
    spec: &BulkSpec,
    instruments: Instruments,
    server: &str,
    token: &str,
    stop: &AtomicBool,
    notes: &mut RunNotes,
    mut on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    let (collector, batches) = Collector::new(instruments);
    let scenario = Scenario::Bulk(spec.clone());
    let (started, clock_event) =
        match start_remote(&scenario, instruments, server, token, &collector) {
            Ok(started) => started,
            Err(error) => return RunOutcome::Failed { error },
        };
    let (socket, client_port) = match bulk::client_socket(spec, CLIENT_BIND) {
        Ok(parts) => parts,
        Err(e) => return RunOutcome::Failed { error: e.to_string() },
    };
    on_events(clock_event);
    // The server names the connection by the client port it saw: the transfer's one.
    let peers = Arc::new(Peers::default());
    let tag = ConnTag::new(bulk::CONN);
    // The one transfer is under way from the run's start.
    tag.announce(bulk::TRANSFER, 0);
    peers.register(client_port, tag);
    let server_addr = started.server;
    let streaming = started.stream(peers, collector.sink());
    let deadline = spec.duration_ms.map(|ms| Instant::now() + Duration::from_millis(u64::from(ms)));
    let mut client_rec = collector.recorder(Side::Client);
    drop(collector);
    let sent = thread::scope(|scope| {
        let ends = scope.spawn(move || {
            let sender = thread::scope(|inner| {
                join(inner.spawn(|| {
                    bulk::send(
                        spec,
                        instruments,
                        socket,
                        server_addr,
                        deadline,
                        stop,
                        &mut client_rec,
                    )
                }))
            });
            drop(client_rec);
            (sender, streaming.finish())
        });
        for batch in batches {
            on_events(batch);
        }
        ends.join().expect("the thread joining the ends does not panic")
    });
    let (sent, end) = sent;
    let remote = RemoteNotes::of(server, end);
    let error = remote_error(sent.err(), Some(&remote.server_outcome));
    notes.remote = Some(remote);
    outcome(error, stop)
}
