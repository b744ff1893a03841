//! Host A: a run whose server side is a remote `ackscope server`. A connects its control
//! connection, sends the spec, estimates B's clock against its own, and while its clients run,
//! gives each of B's events A's clock, connection id and request id before it joins A's own.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpStream, ToSocketAddrs};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ackscope_shared::control::{
    ClockSync, Exchange, ToClient, ToServer, CLOCK_EXCHANGES, CONTROL_MAGIC, MAX_TOKEN_BYTES,
};
use ackscope_shared::wire::{self, Instruments, RunOutcome};
use ackscope_shared::{ConnId, Event, EventKind, ReqId, Scenario};

use super::{receive, send, versions_differ, FrameReader};
use crate::net::peers::{ConnTag, Peers};
use crate::net::record::Clock;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the server may take to answer the handshake, the spec and each clock exchange.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The clock exchanges stop early after this long (a long path), with at least a few done.
const CLOCK_BUDGET: Duration = Duration::from_secs(2);
const MIN_CLOCK_EXCHANGES: usize = 4;
/// After A says stop, how long B may take to send the rest and say how its side ended.
const FINISH_TIMEOUT: Duration = Duration::from_secs(5);
/// The same after Ctrl-C or SIGTERM: short enough that the run's file is finished, its outcome
/// written, before the interrupt's own limit ([`crate::interrupt::FINISH_WITHIN`]) ends the
/// process.
const FINISH_AFTER_INTERRUPT: Duration = Duration::from_secs(1);

/// A control connection that passed the handshake.
pub struct Remote {
    control: TcpStream,
    /// As the user wrote it, for messages.
    name: String,
}

impl Remote {
    /// Connects to `server` (host:port), checks both versions and presents `token`.
    pub fn connect(server: &str, token: &str) -> Result<Remote, String> {
        // The server reads at most a few hundred bytes before it has checked the token.
        if token.len() > MAX_TOKEN_BYTES {
            return Err(format!(
                "--token: {} characters; a token is at most {MAX_TOKEN_BYTES}: give the one \
                 `ackscope server` printed",
                token.len()
            ));
        }
        let addr = resolve(server)?;
        let mut control = TcpStream::connect_timeout(&addr.into(), CONNECT_TIMEOUT)
            .map_err(|e| format!("--remote {server}: cannot connect ({e}); is `ackscope server --listen` running there?"))?;
        // Clock exchanges are single small messages: they must not wait for Nagle.
        let _ = control.set_nodelay(true);
        let _ = control.set_read_timeout(Some(ANSWER_TIMEOUT));
        let name = server.to_string();
        let fail = |e: std::io::Error| format!("--remote {name}: control connection: {e}");
        let hello = ToServer::Hello {
            protocol_version: wire::PROTOCOL_VERSION,
            ackscope_version: env!("CARGO_PKG_VERSION").into(),
            token: token.into(),
        };
        let mut opening = CONTROL_MAGIC.to_vec();
        wire::write_frame(&hello, &mut opening);
        control.write_all(&opening).map_err(fail)?;
        match receive::<ToClient>(&mut control).map_err(fail)? {
            ToClient::Welcome { protocol_version, ackscope_version } => {
                if let Some(mismatch) =
                    versions_differ((protocol_version, &ackscope_version), "server runs")
                {
                    return Err(format!("--remote {name}: {mismatch}"));
                }
            }
            ToClient::Refused { reason } => {
                return Err(format!("--remote {name} refused: {reason}"))
            }
            other => return Err(format!("--remote {name}: unexpected answer {other:?}")),
        }
        Ok(Remote { control, name })
    }

    /// Asks B to run the server side of `spec`, then estimates its clock against `clock`.
    pub fn start(
        mut self,
        spec: &Scenario,
        instruments: Instruments,
        clock: Clock,
    ) -> Result<Started, String> {
        let name = self.name.clone();
        let fail = |e: std::io::Error| format!("--remote {name}: control connection: {e}");
        let run = ToServer::Run { spec: spec.clone(), instruments };
        send(&mut self.control, &run).map_err(fail)?;
        let (port, server_epoch) = match receive::<ToClient>(&mut self.control).map_err(fail)? {
            ToClient::Ready { port, clock_monotonic_ns } => (port, clock_monotonic_ns),
            ToClient::Refused { reason } => {
                return Err(format!("--remote {name} refused the run: {reason}"))
            }
            other => return Err(format!("--remote {name}: unexpected answer {other:?}")),
        };
        let began = Instant::now();
        let mut exchanges = Vec::with_capacity(CLOCK_EXCHANGES);
        while exchanges.len() < CLOCK_EXCHANGES
            && (exchanges.len() < MIN_CLOCK_EXCHANGES || began.elapsed() < CLOCK_BUDGET)
        {
            let t1_ns = clock.now_ns();
            send(&mut self.control, &ToServer::Clock { t1_ns }).map_err(fail)?;
            let answer = receive::<ToClient>(&mut self.control).map_err(fail)?;
            let t4_ns = clock.now_ns();
            match answer {
                ToClient::Clock { t1_ns: echoed, t2_ns, t3_ns } if echoed == t1_ns => {
                    exchanges.push(Exchange { t1_ns, t2_ns, t3_ns, t4_ns })
                }
                other => return Err(format!("--remote {name}: unexpected answer {other:?}")),
            }
        }
        let sync = ClockSync::estimate(&exchanges).expect("at least one exchange was made");
        let server_ip = match self.control.peer_addr().map_err(fail)? {
            SocketAddr::V4(v4) => *v4.ip(),
            SocketAddr::V6(_) => return Err(format!("--remote {name}: IPv4 addresses only")),
        };
        Ok(Started {
            remote: self,
            server: SocketAddrV4::new(server_ip, port).into(),
            sync,
            same_host_offset_ns: clock.epoch_monotonic_ns() as i64 - server_epoch as i64,
        })
    }
}

/// A run B has started: where A's clients connect, and B's clock.
pub struct Started {
    remote: Remote,
    pub server: SocketAddr,
    pub sync: ClockSync,
    /// What the offset is if both probes read one host's CLOCK_MONOTONIC (two namespaces of one
    /// machine): the benchmark's truth. Meaningless across machines.
    pub same_host_offset_ns: i64,
}

impl Started {
    /// Takes B's events from here on, each given A's ids (from `peers`, where A's clients
    /// register their connections) and A's clock, into `sink` (`None`: recording off).
    pub fn stream(self, peers: Arc<Peers>, sink: Option<SyncSender<Vec<Event>>>) -> Streaming {
        let Started { remote, sync, same_host_offset_ns, .. } = self;
        let name = remote.name.clone();
        let writer = remote.control.try_clone();
        let give_up_at = Arc::new(Mutex::new(None));
        let reader = {
            let give_up_at = Arc::clone(&give_up_at);
            std::thread::Builder::new()
                .name("control-events".into())
                .spawn(move || take_events(remote.control, &peers, sync, sink, &give_up_at))
        };
        Streaming { name, writer, reader, give_up_at, same_host_offset_ns }
    }
}

/// B's events flowing in while A's clients run.
pub struct Streaming {
    name: String,
    writer: std::io::Result<TcpStream>,
    reader: std::io::Result<JoinHandle<(RunOutcome, u64)>>,
    give_up_at: Arc<Mutex<Option<Instant>>>,
    same_host_offset_ns: i64,
}

/// How B's side of the run ended.
#[derive(Debug)]
pub struct ServerEnd {
    /// As B said, or how its control connection failed.
    pub outcome: RunOutcome,
    /// B's events whose connection A could not match to one of its own (NAT between the hosts
    /// changes the client ports): not kept.
    pub unmatched_events: u64,
    /// See [`Started::same_host_offset_ns`].
    pub same_host_offset_ns: i64,
}

impl Streaming {
    /// Tells B that A's clients are done and waits (at most [`FINISH_TIMEOUT`], or
    /// [`FINISH_AFTER_INTERRUPT`] after Ctrl-C) for the rest of its events and how its side
    /// ended.
    pub fn finish(self) -> ServerEnd {
        let lost = |error: String| (RunOutcome::Failed { error }, 0);
        let within = match crate::interrupt::interrupted() {
            true => FINISH_AFTER_INTERRUPT,
            false => FINISH_TIMEOUT,
        };
        *self.give_up_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + within);
        if let Ok(mut writer) = self.writer {
            // If this fails the reader sees the connection gone too.
            let _ = send(&mut writer, &ToServer::Stop);
        }
        let (outcome, unmatched_events) = match self.reader {
            Ok(reader) => {
                reader.join().unwrap_or_else(|_| lost("the events thread panicked".into()))
            }
            Err(e) => {
                lost(format!("--remote {}: no thread for the server's events: {e}", self.name))
            }
        };
        ServerEnd { outcome, unmatched_events, same_host_offset_ns: self.same_host_offset_ns }
    }
}

fn take_events(
    mut control: TcpStream,
    peers: &Peers,
    sync: ClockSync,
    sink: Option<SyncSender<Vec<Event>>>,
    give_up_at: &Mutex<Option<Instant>>,
) -> (RunOutcome, u64) {
    // Short timeouts, so that a server that stops answering is given up on once A is done.
    let _ = control.set_read_timeout(Some(Duration::from_millis(250)));
    let mut conns: HashMap<ConnId, Mapped> = HashMap::new();
    let mut unmatched_events = 0u64;
    let mut frames = FrameReader::default();
    let outcome = loop {
        match frames.next::<ToClient>(&mut control) {
            Ok(ToClient::Peer { conn, client_port }) => {
                conns.insert(conn, Mapped { tag: peers.lookup(client_port), last: None });
            }
            Ok(ToClient::Events { mut events }) => {
                events.retain_mut(|event| {
                    // The server's own marks of each request: here the client's are the truth.
                    if matches!(event.kind, EventKind::RequestStart | EventKind::RequestDone) {
                        return false;
                    }
                    match conns.get_mut(&event.conn) {
                        Some(mapped) if mapped.tag.is_some() => {
                            mapped.onto_client(event, sync);
                            true
                        }
                        _ => {
                            unmatched_events += 1;
                            false
                        }
                    }
                });
                if let (Some(sink), false) = (&sink, events.is_empty()) {
                    if sink.send(events).is_err() {
                        break RunOutcome::Failed { error: "the run's collector went away".into() };
                    }
                }
            }
            Ok(ToClient::Finished { outcome }) => break outcome,
            Ok(other) => {
                break RunOutcome::Failed {
                    error: format!("server side: unexpected message {other:?}"),
                }
            }
            Err(e) if is_timeout(&e) => {
                let deadline = *give_up_at.lock().unwrap_or_else(|p| p.into_inner());
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break RunOutcome::Failed {
                        error: format!(
                            "server side: no word from the server {} s after the run ({} s \
                             after Ctrl-C); its events since are lost",
                            FINISH_TIMEOUT.as_secs(),
                            FINISH_AFTER_INTERRUPT.as_secs()
                        ),
                    };
                }
            }
            Err(e) => {
                break RunOutcome::Failed {
                    error: format!(
                        "server side: the control connection closed mid-run ({e}); the events \
                         it sent before are kept"
                    ),
                }
            }
        }
    };
    let _ = control.shutdown(Shutdown::Both);
    (outcome, unmatched_events)
}

/// One of B's connections, as A knows it.
struct Mapped {
    /// A's tag of the connection from the client port B saw (`None`: not one A made).
    tag: Option<ConnTag>,
    /// The last request index asked for and A's id for it: a connection's events come request
    /// after request, so this spares a lookup (and a lock) per event.
    last: Option<(u32, ReqId)>,
}

impl Mapped {
    /// One of B's events with A's connection id, A's request id and A's clock.
    fn onto_client(&mut self, event: &mut Event, sync: ClockSync) {
        let Some(tag) = &self.tag else { return };
        event.conn = tag.conn;
        // B's request id is the request's index on its connection.
        let index = event.req.0;
        event.req = match self.last {
            Some((last, req)) if last == index => req,
            _ => {
                let req = tag.request_at(index as usize).unwrap_or(ReqId(u32::MAX));
                self.last = Some((index, req));
                req
            }
        };
        event.at_ns = sync.to_client_ns(event.at_ns);
        if let EventKind::RunDelay { since_ns, .. } = &mut event.kind {
            *since_ns = sync.to_client_ns(*since_ns);
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

/// The IPv4 address of `server` (host:port).
fn resolve(server: &str) -> Result<SocketAddrV4, String> {
    let addrs = server.to_socket_addrs().map_err(|e| {
        format!("--remote {server}: {e}; give HOST:PORT as `ackscope server` printed it")
    })?;
    let mut v4 = addrs.filter_map(|a| match a {
        SocketAddr::V4(v4) => Some(v4),
        SocketAddr::V6(_) => None,
    });
    v4.next()
        .ok_or_else(|| format!("--remote {server}: no IPv4 address (IPv6 is not supported yet)"))
}

/// Client sockets of a remote run bind here: any local address, as the route to B chooses.
pub const CLIENT_BIND: Ipv4Addr = Ipv4Addr::UNSPECIFIED;
