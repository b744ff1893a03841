//! Host B: the `ackscope server` a remote probe drives. Each control connection carries one run:
//! the server side of it happens here, on a listener of its own with the spec's server options,
//! and its events go back to the driving probe as they are recorded (and into this server's
//! file, with `-o`, so that each host keeps what it recorded whatever happens to the other).

use std::io::{self, Read};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackscope_shared::budget;
use ackscope_shared::control::{ToClient, ToServer, MAX_HELLO_BYTES};
use ackscope_shared::wire::{self, Instruments, RunOutcome, ToBrowser, EVENTS_PER_MESSAGE};
use ackscope_shared::{ConnId, Event, RunId, Scenario, Side};

use super::{receive, receive_hello, send, token_matches, versions_differ, Deadline, HelloError};
use crate::net::bulk;
use crate::net::echo::{ControlHandler, EchoConfig, EchoServer, Tagging};
use crate::net::record::{Clock, Recorder};
use crate::record::SharedWriter;

/// How long a new control connection may take, in all, to say who it is and what to run: a peer
/// that trickles its bytes is cut off at this all the same.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// A remote run ends after this long, keeping what it recorded, unless the server is started
/// with another `--max-run`.
pub const MAX_RUN: Duration = Duration::from_secs(600);
/// The longest `--max-run` may be: a spec's longest duration.
pub const MAX_RUN_LIMIT: Duration =
    Duration::from_millis(ackscope_shared::spec::MAX_DURATION_MS as u64);
/// Bytes a remote run may move: requests x (request + answer), or a bulk transfer's.
pub const MAX_RUN_BYTES: u64 = 16 << 30;
/// A remote bulk run's smallest read buffer: each read is two events sent to the client.
pub const MIN_APP_BUFFER_BYTES: u32 = 1024;

/// What every control connection of one server shares.
pub struct ControlHost {
    token: String,
    file: Arc<SharedWriter>,
    /// The file's run ids: 1 is the server's own (its outside clients).
    next_run: AtomicU32,
    /// One remote run at a time: two would measure each other.
    busy: AtomicBool,
    /// Set when the server stops: a run going ends, as interrupted.
    stopping: Arc<AtomicBool>,
    /// How long a remote run may last ([`MAX_RUN`] unless `--max-run` says otherwise).
    max_run: Duration,
}

impl ControlHost {
    pub fn new(
        token: String,
        file: Arc<SharedWriter>,
        stopping: Arc<AtomicBool>,
        max_run: Duration,
    ) -> ControlHost {
        ControlHost {
            token,
            file,
            next_run: AtomicU32::new(2),
            busy: AtomicBool::new(false),
            stopping,
            max_run,
        }
    }

    /// The echo server's hook for connections that open with the control magic.
    pub fn handler(self: Arc<Self>) -> ControlHandler {
        Arc::new(move |stream, peer| self.serve(stream, peer))
    }

    fn serve(&self, mut stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        // The echo server holds a clone of the socket (to close it when it stops): dropping ours
        // would not close it, so however this ends, this shuts it down.
        match self.admit(&stream) {
            Ok((spec, instruments)) => {
                let closer = stream.try_clone();
                self.run(stream, peer, spec, instruments);
                self.busy.store(false, Ordering::SeqCst);
                if let Ok(closer) = closer {
                    let _ = closer.shutdown(Shutdown::Both);
                }
            }
            Err(Refusal::Tell(reason)) => {
                tracing::warn!("remote probe {peer} refused: {reason}");
                let _ = send(&mut stream, &ToClient::Refused { reason });
                let _ = stream.shutdown(Shutdown::Both);
            }
            Err(Refusal::Gone(e)) => {
                tracing::warn!("control connection from {peer} ended before a run: {e}");
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// The handshake and the run's spec, or why not. Marks the host busy when it admits a run.
    ///
    /// Until the token has been checked, a connection costs this host the hello's few hundred
    /// bytes at most, its reads share one deadline, and nothing about this host, its version
    /// included, is said to it.
    fn admit(&self, stream: &TcpStream) -> Result<(Scenario, Instruments), Refusal> {
        let handshake = &mut Deadline::new(stream, HANDSHAKE_DEADLINE);
        let mut magic = [0u8; 4];
        handshake.read_exact(&mut magic)?;
        let mut hello = [0u8; MAX_HELLO_BYTES];
        let hello = match receive_hello(handshake, &mut hello) {
            Ok(payload) => super::decode::<ToServer>(payload),
            Err(HelloError::TooLong(len)) => {
                return Err(Refusal::Tell(format!(
                    "the control connection's first message is {len} bytes; it must be the \
                     Hello with the token, at most {MAX_HELLO_BYTES} bytes: connect with \
                     `ackscope run --remote HOST:PORT --token TOKEN`"
                )))
            }
            Err(HelloError::Io(e)) => return Err(e.into()),
        };
        let Ok(ToServer::Hello { protocol_version, ackscope_version, token }) = hello else {
            return Err(Refusal::Tell(
                "the control connection must open with the Hello that gives the token this \
                 `ackscope server` printed: connect with `ackscope run --remote HOST:PORT \
                 --token TOKEN`, the same ackscope version on both hosts"
                    .into(),
            ));
        };
        if !token_matches(&token, &self.token) {
            return Err(Refusal::Tell(
                "wrong token: give --token the token this `ackscope server` printed when it \
                 started"
                    .into(),
            ));
        }
        // Only now, to a peer that gave the token: both versions, if they differ.
        if let Some(mismatch) =
            versions_differ((protocol_version, &ackscope_version), "client runs")
        {
            return Err(Refusal::Tell(mismatch));
        }
        let mut writer = stream;
        send(
            &mut writer,
            &ToClient::Welcome {
                protocol_version: wire::PROTOCOL_VERSION,
                ackscope_version: env!("CARGO_PKG_VERSION").into(),
            },
        )?;
        let ToServer::Run { spec, instruments } = receive(handshake)? else {
            return Err(Refusal::Tell("expected the run's spec after Hello".into()));
        };
        if !matches!(spec, Scenario::Rr(_) | Scenario::Bulk(_)) {
            return Err(Refusal::Tell(format!(
                "{} runs are not run against a remote server; rr and bulk runs are",
                spec.name()
            )));
        }
        spec.validate().map_err(|e| Refusal::Tell(e.to_string()))?;
        if let Some(limit) = beyond_limits(&spec, instruments, self.max_run) {
            return Err(Refusal::Tell(limit));
        }
        if self.busy.swap(true, Ordering::SeqCst) {
            return Err(Refusal::Tell(
                "another remote run is going on this server; try again when it ends".into(),
            ));
        }
        Ok((spec, instruments))
    }

    /// Runs the server side of `spec` until the driving probe says stop, its control connection
    /// drops, the run lasts `max_run` or this server stops.
    fn run(&self, stream: TcpStream, peer: SocketAddr, spec: Scenario, instruments: Instruments) {
        let run = RunId(self.next_run.fetch_add(1, Ordering::Relaxed));
        let clock = Clock::start();
        let (sink, batches) = sync_channel(1024);
        let introductions = Arc::new(Mutex::new(Vec::new()));
        let ip = match stream.local_addr() {
            Ok(local) => local.ip(),
            Err(e) => return tracing::warn!("control connection from {peer}: {e}"),
        };
        // Held until the server's threads are gone: then the loop below sees the channel close
        // once it has taken every batch, events on or off.
        let mut own_sink = Some(sink.clone());
        let sink = instruments.events.then_some(sink);
        let mut writer = stream;
        let started =
            RunServer::start(&spec, instruments, (ip, peer.ip()), clock, sink, &introductions);
        let server = match started {
            Ok(server) => server,
            Err(e) => {
                let reason = format!("the server could not open the run's listener: {e}");
                let _ = send(&mut writer, &ToClient::Refused { reason });
                return;
            }
        };
        let ready =
            ToClient::Ready { port: server.port(), clock_monotonic_ns: clock.epoch_monotonic_ns() };
        let reader = match writer.try_clone() {
            Ok(reader) => reader,
            Err(e) => return tracing::warn!("control connection from {peer}: {e}"),
        };
        if send(&mut writer, &ready).is_err() {
            return;
        }
        // This host's file holds its own view, as `ackscope server` records outside clients.
        let file_spec = match &spec {
            Scenario::Rr(rr) => Scenario::Server(rr.clone()),
            other => other.clone(),
        };
        self.file.write(&ToBrowser::RunStarted { run, spec: file_spec, instruments });
        let mut file_ids = FileIds::default();
        tracing::info!(
            "remote run {} from {peer}: {}, server side on port {}",
            run.0,
            spec.describe(),
            server.port()
        );
        let writer = Arc::new(Mutex::new(writer));
        let ended = Arc::new(Ended::default());
        let listening = {
            let (writer, ended) = (Arc::clone(&writer), Arc::clone(&ended));
            std::thread::Builder::new()
                .name("control-read".into())
                .spawn(move || listen_to_client(reader, clock, &writer, &ended))
        };
        let started = Instant::now();
        let mut server = Some(server);
        let mut stopping: Option<std::thread::JoinHandle<()>> = None;
        let mut timed_out = false;
        let mut sent_conns = 0;
        loop {
            match batches.recv_timeout(Duration::from_millis(50)) {
                Ok(mut events) => {
                    if !ended.dropped.load(Ordering::SeqCst) {
                        let sent;
                        (events, sent) = forward(&writer, &introductions, &mut sent_conns, events);
                        if sent.is_err() {
                            ended.dropped.store(true, Ordering::SeqCst);
                        }
                    }
                    let events = file_ids.renumber(events);
                    if let Some(error) = self.file.write_events(run, events) {
                        // The server's own loop sees the failure and stops the server. The log
                        // goes through the one sanitiser: the error names a path.
                        tracing::error!("{error}; stopping");
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let over = started.elapsed() >= self.max_run;
            let stop = ended.stop.load(Ordering::SeqCst)
                || ended.dropped.load(Ordering::SeqCst)
                || self.stopping.load(Ordering::SeqCst)
                || over;
            if stop {
                if let Some(server) = server.take() {
                    timed_out = over;
                    // Shutting down joins the connection threads, which may wait on this loop
                    // to take their events: elsewhere, while this loop drains.
                    stopping = Some(std::thread::spawn(move || server.shutdown()));
                }
            }
            if stopping.as_ref().is_some_and(|s| s.is_finished()) {
                drop(own_sink.take());
            }
        }
        if let Some(stopping) = stopping {
            let _ = stopping.join();
        }
        // Ctrl-C here also closes the control connection (with every connection of the
        // server): the stop comes first, so the file says the run was interrupted, not dropped.
        let outcome = if self.stopping.load(Ordering::SeqCst) && !ended.stop.load(Ordering::SeqCst)
        {
            RunOutcome::Interrupted
        } else if ended.dropped.load(Ordering::SeqCst) {
            RunOutcome::Failed {
                error: format!(
                    "server side: the control connection from {peer} closed mid-run; this side \
                     kept what it recorded"
                ),
            }
        } else if timed_out {
            RunOutcome::Failed {
                error: format!(
                    "server side: stopped after {} s, the longest a remote run lasts on this \
                     server (its --max-run); what it recorded is kept",
                    self.max_run.as_secs()
                ),
            }
        } else {
            RunOutcome::Completed
        };
        {
            let mut writer = lock(&writer);
            let _ = send(&mut *writer, &ToClient::Finished { outcome: outcome.clone() });
            // Unblocks the reading thread.
            let _ = writer.shutdown(Shutdown::Both);
        }
        if let Ok(listening) = listening {
            let _ = listening.join();
        }
        self.file.write(&ToBrowser::RunFinished { run, outcome: outcome.clone() });
        tracing::info!("remote run {} from {peer} ended: {outcome:?}", run.0);
    }
}

/// Request ids for this host's file: the ids sent to the driving probe are each request's index
/// on its connection, which repeat across connections; the file numbers them in the order they
/// first appear, as `ackscope server` numbers its outside clients' requests.
#[derive(Default)]
struct FileIds {
    /// Each connection's latest index and the id it was given (a connection's requests come
    /// one after another, so only the latest is asked for again).
    latest: std::collections::HashMap<ConnId, (u32, u32)>,
    next: u32,
}

impl FileIds {
    fn renumber(&mut self, mut events: Vec<Event>) -> Vec<Event> {
        for event in &mut events {
            let latest = self.latest.get(&event.conn).copied();
            let id = match latest {
                Some((index, id)) if index == event.req.0 => id,
                _ => {
                    let id = self.next;
                    self.next += 1;
                    self.latest.insert(event.conn, (event.req.0, id));
                    id
                }
            };
            event.req = ackscope_shared::ReqId(id);
        }
        events
    }
}

/// Why a control connection gets no run.
enum Refusal {
    /// Told to the peer, then closed.
    Tell(String),
    /// The connection failed: nobody to tell.
    Gone(io::Error),
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Refusal {
        match e.kind() {
            // The handshake's deadline passed: the peer is told, in case it is a probe on a
            // path too slow for it.
            io::ErrorKind::TimedOut => Refusal::Tell(format!(
                "{e}: connect again and send the hello and the run at once, as `ackscope run \
                 --remote` does"
            )),
            _ => Refusal::Gone(e),
        }
    }
}

/// How the driving probe ended the run, as the reading thread saw it.
#[derive(Default)]
struct Ended {
    /// It said stop: its clients are done.
    stop: AtomicBool,
    /// Its control connection closed or failed before saying so.
    dropped: AtomicBool,
}

/// Answers clock exchanges at once and notes the end of the run. B's times are stamped as close
/// to the socket as this thread gets: `t2` right after the frame is read, `t3` right before the
/// answer is written.
fn listen_to_client(mut reader: TcpStream, clock: Clock, writer: &Mutex<TcpStream>, ended: &Ended) {
    // The run can be long and quiet: the run's own limit ends it, not a read timeout.
    let _ = reader.set_read_timeout(None);
    loop {
        let message = receive::<ToServer>(&mut reader);
        let t2_ns = clock.now_ns();
        match message {
            Ok(ToServer::Clock { t1_ns }) => {
                let mut writer = lock(writer);
                let t3_ns = clock.now_ns();
                if send(&mut *writer, &ToClient::Clock { t1_ns, t2_ns, t3_ns }).is_err() {
                    ended.dropped.store(true, Ordering::SeqCst);
                    return;
                }
            }
            Ok(ToServer::Stop) => {
                ended.stop.store(true, Ordering::SeqCst);
                return;
            }
            Ok(_) => {}
            Err(_) => {
                ended.dropped.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// Sends a batch of B's events: first the connections not yet introduced, then the events in
/// messages of at most [`EVENTS_PER_MESSAGE`]. The events come back for this host's file,
/// whether or not they could be sent.
fn forward(
    writer: &Mutex<TcpStream>,
    introductions: &Mutex<Vec<(ConnId, u16)>>,
    sent: &mut usize,
    events: Vec<Event>,
) -> (Vec<Event>, io::Result<()>) {
    let mut writer = lock(writer);
    let new: Vec<(ConnId, u16)> = lock(introductions)[*sent..].to_vec();
    for (conn, client_port) in new {
        if let Err(e) = send(&mut *writer, &ToClient::Peer { conn, client_port }) {
            return (events, Err(e));
        }
        *sent += 1;
    }
    if events.len() <= EVENTS_PER_MESSAGE {
        // A batch (at most 1024 events from a recorder) goes as it is, lent to the message.
        let message = ToClient::Events { events };
        let result = send(&mut *writer, &message);
        let ToClient::Events { events } = message else { unreachable!("built just above") };
        return (events, result);
    }
    let result = events
        .chunks(EVENTS_PER_MESSAGE)
        .try_for_each(|chunk| send(&mut *writer, &ToClient::Events { events: chunk.to_vec() }));
    (events, result)
}

/// Why a remote run is refused, naming the limit; `None` within them all.
fn beyond_limits(spec: &Scenario, instruments: Instruments, max_run: Duration) -> Option<String> {
    let (bytes, link, duration_ms) = match spec {
        Scenario::Rr(rr) => {
            let per_request = u64::from(rr.size_bytes) + u64::from(rr.response_size());
            (u64::from(rr.requests) * per_request, rr.link.is_some(), rr.duration_ms)
        }
        Scenario::Bulk(bulk) => {
            if bulk.app_buffer_bytes < MIN_APP_BUFFER_BYTES {
                return Some(format!(
                    "app buffer: a remote bulk run reads at least {MIN_APP_BUFFER_BYTES} bytes at \
                     a time (each read is two events, streamed to the client)"
                ));
            }
            (bulk.bytes, bulk.link.is_some(), bulk.duration_ms)
        }
        _ => (0, false, None),
    };
    if let Some(ms) = duration_ms.filter(|&ms| u128::from(ms) > max_run.as_millis()) {
        return Some(format!(
            "the run asks for {} s; a remote run lasts at most {} s on this server (its \
             --max-run)",
            f64::from(ms) / 1000.0,
            max_run.as_secs()
        ));
    }
    if bytes > MAX_RUN_BYTES {
        return Some(format!(
            "the run moves {bytes} bytes; a remote run moves at most {MAX_RUN_BYTES} ({} GiB)",
            MAX_RUN_BYTES >> 30
        ));
    }
    if link {
        return Some(
            "--link emulates a path on one host; across hosts the path is the real network".into(),
        );
    }
    // The client checked its own limit; this host allocates its side's buffers too, so it
    // checks the same figure against the same limit (a client of another build could skip it).
    let limit = budget::COMMAND_LINE_LIMIT_BYTES;
    if let Err(refusal) =
        budget::check(spec, limit, "a remote run on this server", crate::cli::flag_of)
    {
        return Some(refusal);
    }
    if instruments.capture {
        return Some(
            "--capture is not available across hosts yet: capture on each host with tcpdump \
             and `ackscope import` the files"
                .into(),
        );
    }
    None
}

/// The server side of one remote run, on a listener of its own.
enum RunServer {
    Rr(EchoServer),
    Bulk(BulkServer),
}

/// A bulk run's receiving end: one connection, read on a thread until the client closes.
struct BulkServer {
    port: u16,
    /// A clone of the listener, to wake an `accept()` that no client will answer.
    listener: TcpListener,
    /// A clone of the accepted connection, to end a read that would wait for ever.
    accepted: Arc<Mutex<Option<TcpStream>>>,
    /// Set when the run ends: a reader that pauses stops pausing.
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl RunServer {
    /// The run's listener on `ip`, serving connections from `from` (the driving probe's
    /// address) only.
    fn start(
        spec: &Scenario,
        instruments: Instruments,
        (ip, from): (IpAddr, IpAddr),
        clock: Clock,
        sink: Option<SyncSender<Vec<Event>>>,
        introductions: &Arc<Mutex<Vec<(ConnId, u16)>>>,
    ) -> io::Result<RunServer> {
        match spec {
            Scenario::Bulk(bulk) => {
                let IpAddr::V4(ip) = ip else {
                    return Err(io::Error::other("bulk runs across hosts are IPv4 only"));
                };
                let listener = bulk::listen(bulk, ip)?;
                let port = listener.local_addr()?.port();
                let (watch, accepted) = (listener.try_clone()?, Arc::new(Mutex::new(None)));
                let stop = Arc::new(AtomicBool::new(false));
                let (spec, slot, introductions, stopping) = (
                    bulk.clone(),
                    Arc::clone(&accepted),
                    Arc::clone(introductions),
                    Arc::clone(&stop),
                );
                let thread =
                    std::thread::Builder::new().name("bulk-remote".into()).spawn(move || {
                        let mut rec = match sink {
                            Some(sink) => Recorder::new(clock, Side::Server, sink),
                            None => Recorder::discarding(clock, Side::Server),
                        };
                        // The run's one connection: from the driving probe's address, any
                        // other closed (it would take the run's place).
                        let (stream, peer) = loop {
                            let Ok((stream, peer)) = listener.accept() else { return };
                            if peer.ip() == from {
                                break (stream, peer);
                            }
                            tracing::warn!(
                                "remote bulk run: closed a connection from {peer}: this port \
                                 serves the run driven from {from} only"
                            );
                        };
                        lock(&introductions).push((bulk::CONN, peer.port()));
                        *lock(&slot) = stream.try_clone().ok();
                        let served =
                            bulk::serve_accepted(&spec, instruments, stream, &stopping, &mut rec);
                        if let Err(e) = served {
                            tracing::warn!("remote bulk run from {peer}: {e}");
                        }
                    })?;
                Ok(RunServer::Bulk(BulkServer { port, listener: watch, accepted, stop, thread }))
            }
            Scenario::Rr(rr) => {
                let config = EchoConfig::for_run(rr, instruments);
                let tagging = Tagging::Remote {
                    from,
                    next_conn: AtomicU32::new(0),
                    introductions: Arc::clone(introductions),
                };
                let listen = SocketAddr::new(ip, 0);
                EchoServer::start(listen, config, clock, tagging, sink).map(RunServer::Rr)
            }
            _ => Err(io::Error::other("only rr and bulk runs have a remote server side")),
        }
    }

    fn port(&self) -> u16 {
        match self {
            RunServer::Rr(server) => server.addr().port(),
            RunServer::Bulk(bulk) => bulk.port,
        }
    }

    /// Closes the run's connections and joins its threads: their events have all been sent to
    /// the channel then.
    fn shutdown(self) {
        match self {
            RunServer::Rr(server) => server.shutdown(),
            RunServer::Bulk(bulk) => {
                bulk.stop.store(true, Ordering::Relaxed);
                // Shutting a listening socket down wakes a thread blocked in its accept(), as
                // the echo server's stop does.
                let _ = socket2::SockRef::from(&bulk.listener).shutdown(Shutdown::Both);
                if let Some(stream) = lock(&bulk.accepted).as_ref() {
                    let _ = stream.shutdown(Shutdown::Both);
                }
                let _ = bulk.thread.join();
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackscope_shared::RrSpec;

    #[test]
    fn a_remote_run_whose_buffers_exceed_the_limit_is_refused_by_the_server_too() {
        let max_run = Duration::from_secs(600);
        let fine = Scenario::Rr(RrSpec::default());
        assert_eq!(beyond_limits(&fine, Instruments::default(), max_run), None);
        // 64 connections of 64 MiB messages: 32 GiB of buffers at worst, with few bytes moved.
        let huge = Scenario::Rr(RrSpec {
            requests: 64,
            connections: 64,
            size_bytes: 64 << 20,
            ..RrSpec::default()
        });
        let refusal = beyond_limits(&huge, Instruments::default(), max_run).unwrap();
        assert!(
            refusal.contains("could take 32 GiB")
                && refusal.contains("a remote run on this server may take at most 8 GiB")
                && refusal.contains("lower --connections, --size or --response-size"),
            "{refusal}"
        );
    }
}
