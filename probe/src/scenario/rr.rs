//! The request/response scenario: the probe's echo server and client on loopback.

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::thread;

use ackscope_shared::spec::MAX_BODY_BYTES;
use ackscope_shared::wire::RunOutcome;
use ackscope_shared::{Event, RrSpec, Side, SpecError};

use crate::net::echo::{EchoConfig, EchoServer};
use crate::net::peers::Peers;
use crate::net::record::{Clock, Recorder};
use crate::net::{self};

/// Batches in flight between the experiment threads and the collector. Each is one exchange (a
/// dozen events) or at most a few thousand events; this bounds memory if the collector lags.
const CHANNEL_BATCHES: usize = 1024;

/// Runs `spec` and hands every batch of events to `on_events` as it arrives, from the calling
/// thread. Returns how the run ended; a failed run keeps every event recorded before the failure.
pub fn run(spec: &RrSpec, mut on_events: impl FnMut(Vec<Event>)) -> Result<RunOutcome, SpecError> {
    spec.validate()?;
    let clock = Clock::start();
    let (sink, batches) = sync_channel(CHANNEL_BATCHES);
    let peers = Arc::new(Peers::default());
    let config = EchoConfig {
        nodelay: spec.nodelay.server,
        max_body_bytes: MAX_BODY_BYTES,
    };
    let server = match EchoServer::start(config, clock, Arc::clone(&peers), sink.clone()) {
        Ok(server) => server,
        Err(e) => {
            return Ok(RunOutcome::Failed {
                error: e.to_string(),
            })
        }
    };
    let spec_for_client = spec.clone();
    let client_sink = sink;
    // The client runs on its own thread; when it ends, the server is shut down, which joins the
    // server's threads. Then every sender is gone and the loop below ends.
    let finisher = thread::spawn(move || {
        let mut rec = Recorder::new(clock, Side::Client, client_sink);
        let result = net::client::run(&spec_for_client, server.addr(), &peers, &mut rec);
        drop(rec);
        server.shutdown();
        result
    });
    for batch in batches {
        on_events(batch);
    }
    let outcome = match finisher.join() {
        Ok(Ok(())) => RunOutcome::Completed,
        Ok(Err(e)) => RunOutcome::Failed {
            error: e.to_string(),
        },
        Err(_) => RunOutcome::Failed {
            error: "the client thread panicked".into(),
        },
    };
    Ok(outcome)
}
