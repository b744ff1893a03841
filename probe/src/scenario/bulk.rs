//! The bulk scenario: one connection, bytes one way, on loopback.

use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::{Duration, Instant};

use ackscope_shared::wire::{Instruments, RunOutcome};
use ackscope_shared::{BulkSpec, Event, Side};

use super::{outcome, Collector};
use crate::net::bulk;

pub fn run(
    spec: &BulkSpec,
    instruments: Instruments,
    stop: &AtomicBool,
    mut on_events: impl FnMut(Vec<Event>),
) -> RunOutcome {
    let (collector, batches) = Collector::new(instruments);
    let setup = bulk::listen(spec).and_then(|listener| {
        let server = listener.local_addr()?;
        let (socket, port) = bulk::client_socket(spec)?;
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
    let (sent, received) = thread::scope(|scope| {
        let receiver = scope
            .spawn(move || bulk::serve(spec, instruments, listener, client_port, &mut server_rec));
        let sender = scope.spawn(move || {
            bulk::send(spec, instruments, socket, server, deadline, stop, &mut client_rec)
        });
        for batch in batches {
            on_events(batch);
        }
        (join(sender), join(receiver))
    });
    let error = match (sent, received) {
        (Err(e), _) | (_, Err(e)) => Some(e),
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
