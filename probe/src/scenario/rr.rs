//! The request/response scenario: the probe's echo server and its client threads on loopback.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ackscope_shared::spec::MAX_BODY_BYTES;
use ackscope_shared::wire::{Instruments, RunOutcome};
use ackscope_shared::{Event, RrSpec, Side};

use super::{open_capture, outcome, Collector, RunNotes};
use crate::capture::{Capture, CaptureReport};
use crate::emulate::{Link, Placement};
use crate::net::client::{self, Shared};
use crate::net::echo::{EchoConfig, EchoServer, Tagging, RUN_MAX_CONNECTIONS};
use crate::net::options::SideOptions;
use crate::net::peers::Peers;

pub fn run(
    spec: &RrSpec,
    instruments: Instruments,
    user_stop: &AtomicBool,
    notes: &mut RunNotes,
    mut on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    // On the link the relay captures (it holds every packet already): no socket on lo.
    let on_lo = Instruments { capture: instruments.capture && spec.link.is_none(), ..instruments };
    let capture_socket = match open_capture(on_lo) {
        Ok(socket) => socket,
        Err(error) => return RunOutcome::Failed { error },
    };
    let (collector, batches) = Collector::new(instruments);
    let peers = Arc::new(Peers::default());
    let config = EchoConfig {
        opts: SideOptions::rr(spec, Side::Server),
        max_body_bytes: MAX_BODY_BYTES,
        response_bytes: spec.response_bytes,
        think: Duration::from_micros(u64::from(spec.think_us)),
        instruments,
        max_connections: RUN_MAX_CONNECTIONS,
        idle_timeout: None,
    };
    let link_capture = (instruments.capture && instruments.events).then(|| Arc::clone(&peers));
    let link = spec.link.map(|link| {
        let (client, server) = (collector.recorder(Side::Client), collector.recorder(Side::Server));
        Link::start_capturing(&link, collector.clock, client, server, link_capture)
            .map_err(|e| e.to_string())
    });
    let link = match link.transpose() {
        Ok(link) => link,
        Err(error) => return RunOutcome::Failed { error },
    };
    let placement = Placement::new(link.as_ref());
    let listen: SocketAddr = (placement.ip(Side::Server), 0).into();
    let tagging = Tagging::Run(Arc::clone(&peers));
    let (clock, sink) = (collector.clock, collector.sink());
    let started = placement
        .run_in(Side::Server, move || EchoServer::start(listen, config, clock, tagging, sink));
    let server = match started {
        Ok(server) => server,
        Err(e) => return RunOutcome::Failed { error: e.to_string() },
    };
    let capture = match collector.capture(capture_socket, server.addr().port(), &peers) {
        Ok(capture) => capture,
        Err(error) => return RunOutcome::Failed { error },
    };
    let first_error = Mutex::new(None);
    // Set by the first thread to fail: the others stop starting requests.
    let stop = AtomicBool::new(false);
    let shared = Shared {
        spec,
        server: server.addr(),
        bind: placement.ip(Side::Client),
        peers: &peers,
        next_req: AtomicU32::new(0),
        next_conn: AtomicU32::new(0),
        completed: AtomicU32::new(0),
        deadline: spec.duration_ms.map(|ms| Instant::now() + Duration::from_millis(u64::from(ms))),
        stop: &stop,
        user_stop,
        instruments,
    };
    let clients_started = Instant::now();
    thread::scope(|scope| {
        let mut clients = Vec::new();
        for _ in 0..spec.connections {
            let mut rec = collector.recorder(Side::Client);
            let (shared, first_error) = (&shared, &first_error);
            let client =
                thread::Builder::new().name("rr-client".into()).spawn_scoped(scope, move || {
                    let ran =
                        placement.enter(Side::Client).and_then(|()| client::run(shared, &mut rec));
                    if let Err(e) = ran {
                        shared.stop.store(true, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e.to_string());
                    }
                });
            match client {
                Ok(client) => clients.push(client),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    let mut first = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert(format!("could not start a client thread: {e}"));
                }
            }
        }
        // Every sender must be gone for the loop below to end: the collector's own, the client
        // threads' (when they end) and the server's (when it is shut down after them).
        let server_sink_owner = server;
        drop(collector);
        let (first_error, link) = (&first_error, &link);
        let completed = &shared.completed;
        scope.spawn(move || {
            for client in clients {
                let _ = client.join();
            }
            notes.clients_elapsed = clients_started.elapsed();
            notes.requests_completed = completed.load(Ordering::Relaxed);
            // The server wakes its accept() with a connection of its own: from its namespace.
            let _ = placement.enter(Side::Server);
            server_sink_owner.shutdown();
            // After the server: the last segments are in, and its sender goes.
            notes.capture = capture.map(Capture::stop);
            match link.as_ref().map(Link::stop_relay) {
                Some(Err(e)) => {
                    let mut first = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert(e.to_string());
                }
                // The relay stamps on the run's clock: no offset to measure, nothing dropped.
                Some(Ok(stats)) => {
                    if let Some(segments) = stats.captured_segments {
                        notes.capture = Some(CaptureReport { segments, ..Default::default() });
                    }
                }
                None => {}
            }
        });
        for batch in batches {
            on_events(batch);
        }
    });
    let error = first_error.into_inner().unwrap_or_else(|p| p.into_inner());
    outcome(error, user_stop)
}
