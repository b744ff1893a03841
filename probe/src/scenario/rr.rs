//! The request/response scenario: the probe's echo server and its client threads, on loopback,
//! across the emulated link, in the user's namespaces, or with the server on another host.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use ackscope_shared::control::ClockSync;
use ackscope_shared::wire::{Instruments, RunOutcome};
use ackscope_shared::{Event, RrSpec, Scenario, Side};

use super::{
    open_capture, outcome, remote_error, start_remote, Collector, RemoteNotes, RunNotes, Target,
};
use crate::capture::{Capture, CaptureReport, Via};
use crate::emulate::{Link, Placement, ServerNamespace};
use crate::net::client::{self, Shared};
use crate::net::echo::{EchoConfig, EchoServer, Tagging};
use crate::net::peers::Peers;
use crate::remote::drive::CLIENT_BIND;

pub fn run(
    spec: &RrSpec,
    instruments: Instruments,
    target: &Target,
    user_stop: &AtomicBool,
    notes: &mut RunNotes,
    on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    match target {
        Target::Local => run_local(spec, instruments, None, user_stop, notes, on_events),
        Target::ServerNetns { name, ip } => match ServerNamespace::open(name, *ip) {
            Ok(server) => run_local(spec, instruments, Some(&server), user_stop, notes, on_events),
            Err(error) => RunOutcome::Failed { error: format!("--server-netns: {error}") },
        },
        Target::Remote { server, token } => {
            run_remote(spec, instruments, server, token, user_stop, notes, on_events)
        }
    }
}

/// Both sides in this process: the echo server on loopback, across the emulated link, or in the
/// user's network namespace `server_in` (never with a link or capture on lo:
/// [`super::server_netns_refusal`]).
fn run_local(
    spec: &RrSpec,
    instruments: Instruments,
    server_in: Option<&ServerNamespace>,
    user_stop: &AtomicBool,
    notes: &mut RunNotes,
    mut on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    // On the link the relay captures (it holds every packet already): no socket on lo.
    let on_lo = Instruments { capture: instruments.capture && spec.link.is_none(), ..instruments };
    let capture_tap = match open_capture(on_lo) {
        Ok(socket) => socket,
        Err(error) => return RunOutcome::Failed { error },
    };
    let (collector, batches) = Collector::new(instruments);
    let peers = Arc::new(Peers::default());
    let config = EchoConfig::for_run(spec, instruments);
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
    let placement = match server_in {
        Some(server_in) => Placement::ServerIn(server_in),
        None => Placement::new(link.as_ref()),
    };
    if let Some(server_in) = server_in {
        // Across the namespaces' path a read waits half its round trip for the bytes: measured
        // here, and told to the analysis as a remote run's is, so that it is not called a stall.
        match server_in.path_rtt_ns() {
            Ok(rtt_ns) if instruments.events => {
                on_events(vec![ClockSync::same_clock(rtt_ns).event(collector.clock.now_ns())])
            }
            Ok(_) => {}
            Err(error) => return RunOutcome::Failed { error: format!("--server-netns: {error}") },
        }
    }
    let listen: SocketAddr = (placement.ip(Side::Server), 0).into();
    let tagging = Tagging::Run(Arc::clone(&peers));
    let (clock, sink) = (collector.clock, collector.sink());
    let started = placement
        .run_in(Side::Server, move || EchoServer::start(listen, config, clock, tagging, sink));
    let server = match started {
        Ok(server) => server,
        Err(e) => return RunOutcome::Failed { error: e.to_string() },
    };
    let capture = match collector.capture(capture_tap, server.addr().port(), &peers) {
        Ok(capture) => capture,
        Err(error) => return RunOutcome::Failed { error },
    };
    let first_error = Mutex::new(None);
    // Set by the first thread to fail: the others stop starting requests.
    let stop = AtomicBool::new(false);
    let bind = placement.ip(Side::Client);
    let shared = Shared::new(spec, server.addr(), bind, &peers, &stop, user_stop, instruments);
    let link = &link;
    let first = &first_error;
    let after_clients = move |_: &mut RunNotes| {
        server.shutdown();
        // After the server: the last segments are in, and its sender goes.
        let mut capture = capture.map(Capture::stop);
        match link.as_ref().map(Link::stop_relay) {
            Some(Err(e)) => note_error(first, e.to_string()),
            // The relay stamps on the run's clock: no offset to measure, nothing dropped.
            Some(Ok(stats)) => {
                if let Some(segments) = stats.captured_segments {
                    capture = Some(CaptureReport {
                        via: Some(Via::LinkRelay),
                        segments,
                        ..Default::default()
                    });
                }
            }
            None => {}
        }
        capture
    };
    let capture = drive_clients(
        &shared,
        collector,
        batches,
        &first_error,
        placement,
        notes,
        after_clients,
        on_events,
    );
    notes.capture = capture;
    let error = first_error.into_inner().unwrap_or_else(|p| p.into_inner());
    outcome(error, user_stop)
}

/// The server side on another host's `ackscope server`: it runs there with the spec's server
/// options, and its events come back over the control connection onto this run's clock.
fn run_remote(
    spec: &RrSpec,
    instruments: Instruments,
    server: &str,
    token: &str,
    user_stop: &AtomicBool,
    notes: &mut RunNotes,
    mut on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    let (collector, batches) = Collector::new(instruments);
    let scenario = Scenario::Rr(spec.clone());
    let started = match start_remote(&scenario, instruments, server, token, &collector) {
        Ok((started, clock_event)) => {
            on_events(clock_event);
            started
        }
        Err(error) => return RunOutcome::Failed { error },
    };
    let peers = Arc::new(Peers::default());
    let first_error = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let shared =
        Shared::new(spec, started.server, CLIENT_BIND, &peers, &stop, user_stop, instruments);
    let streaming = started.stream(Arc::clone(&peers), collector.sink());
    let after_clients = move |notes: &mut RunNotes| {
        notes.remote = Some(RemoteNotes::of(server, streaming.finish()));
        None
    };
    drive_clients(
        &shared,
        collector,
        batches,
        &first_error,
        Placement::new(None),
        notes,
        after_clients,
        on_events,
    );
    let client_error = first_error.into_inner().unwrap_or_else(|p| p.into_inner());
    let server_outcome = notes.remote.as_ref().map(|r| &r.server_outcome);
    outcome(remote_error(client_error, server_outcome), user_stop)
}

fn note_error(first_error: &Mutex<Option<String>>, error: String) {
    first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(error);
}

/// Runs a client thread per connection and hands every batch of events to `on_events` on this
/// thread until the last sender is gone: the collector's own goes at once, the client threads'
/// when they end, and the server side's in `after_clients`, which runs once every client has
/// ended and returns the capture's report.
#[allow(clippy::too_many_arguments)]
fn drive_clients(
    shared: &Shared,
    collector: Collector,
    batches: Receiver<Vec<Event>>,
    first_error: &Mutex<Option<String>>,
    placement: Placement,
    notes: &mut RunNotes,
    after_clients: impl FnOnce(&mut RunNotes) -> Option<CaptureReport> + Send,
    mut on_events: impl FnMut(Vec<Event>),
) -> Option<CaptureReport> {
    let clients_started = Instant::now();
    thread::scope(|scope| {
        let mut clients = Vec::new();
        for _ in 0..shared.spec.connections {
            let mut rec = collector.recorder(Side::Client);
            let client =
                thread::Builder::new().name("rr-client".into()).spawn_scoped(scope, move || {
                    let ran =
                        placement.enter(Side::Client).and_then(|()| client::run(shared, &mut rec));
                    if let Err(e) = ran {
                        shared.stop.store(true, Ordering::Relaxed);
                        note_error(first_error, e.to_string());
                    }
                });
            match client {
                Ok(client) => clients.push(client),
                Err(e) => {
                    shared.stop.store(true, Ordering::Relaxed);
                    note_error(first_error, format!("could not start a client thread: {e}"));
                }
            }
        }
        drop(collector);
        let completed = &shared.completed;
        let ended = scope.spawn(move || {
            for client in clients {
                let _ = client.join();
            }
            notes.clients_elapsed = clients_started.elapsed();
            notes.requests_completed = completed.load(Ordering::Relaxed);
            let capture = after_clients(notes);
            (notes, capture)
        });
        for batch in batches {
            on_events(batch);
        }
        ended.join().map(|(_, capture)| capture).unwrap_or(None)
    })
}
