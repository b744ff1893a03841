//! `ackscope watch --metrics ADDR`: the watch's stalls, exchanges and losses in Prometheus's
//! text exposition format at `http://ADDR/metrics`, for the monitoring a fleet already scrapes
//! (docs/WATCH.md names every metric).
//!
//! Where the numbers come from:
//! - exchanges and their latencies: the watch's tally, the one the summary, the session file
//!   and the page read (`WatchTally`), whose exchange tally hands each exchange over as it
//!   settles ([`ExchangeTally::hand_out_settled`]); its segments and the ACKs the delayed-ACK
//!   timer sent, from the same tally;
//! - stalls: each one the same tally found, with its connection and wait
//!   ([`WatchTally::hand_out_stalls`]): the one packet rule, run once;
//! - the port of each connection, and the watch's own losses: the watcher
//!   ([`Metrics::connection_opened`], [`Metrics::connection_retired`],
//!   [`Metrics::watch_counts`]).
//!
//! `prometheus-client`, the Prometheus project's Rust client, writes the format, by its
//! conventions: every name begins `ackscope_watch_`, counters end `_total`, times are in
//! seconds and sizes in bytes.
//!
//! A watch with metrics may run for days, so everything here is bounded: the label sets are a
//! fixed set of classes and directions for each of at most [`WatchSpec::MAX_PORTS`] ports, made
//! at zero when the port is first watched (so that `increase()` counts the first stall too); a
//! connection's state here (its port) goes when the watcher retires
//! the connection; and what passes from the watcher to the tally's side waits at most one batch.
//!
//! [`ExchangeTally::hand_out_settled`]: ackscope_shared::exchange::ExchangeTally::hand_out_settled
//! [`WatchTally::hand_out_stalls`]: ackscope_shared::reduce::WatchTally::hand_out_stalls

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use ackscope_shared::reduce::{RunAnalyses, RunTally};
use ackscope_shared::stall::{Stall, StallClass};
use ackscope_shared::{ConnId, Event, EventKind, Side, WatchSpec};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::watcher::WatchCounts;
use crate::net::echo::EchoAccess;
use crate::serve::guard::{self, GuardedListener, SecurityHeaders};

/// The bounds of the exchange-latency histogram's buckets, in seconds: loopback's tens of
/// microseconds up to ten seconds, with bounds either side of the delayed-ACK timer's 40 ms (an
/// exchange it held took 40 ms or more; one held each way, 80 ms or more).
pub const LATENCY_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// The policy sent with the UI's security headers: for text that loads nothing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; frame-ancestors 'self'";

/// A stall's labels: its class (`nagle_delayed_ack`, as the JSON summary's `class`), the way
/// the data it waited for went (`client->server`, as the summary's `direction`), and the
/// watched port of its connection.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StallLabels {
    class: &'static str,
    direction: &'static str,
    port: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLabels {
    port: u16,
}

/// Bytes' labels: the way they went, and the watched port of their connection.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    direction: &'static str,
    port: u16,
}

/// The way data went, as the summaries say it.
fn direction(from: Side) -> &'static str {
    match from {
        Side::Client => "client->server",
        Side::Server => "server->client",
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// What the watcher tells the tally's side: a connection's port, and its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Opened(ConnId, u16),
    Retired(ConnId),
}

/// The metrics of one watch: written by the watch's loop, read by the server's thread.
pub struct Metrics {
    registry: Registry,
    stalls: Family<StallLabels, Counter>,
    stall_seconds: Family<StallLabels, Counter<f64, AtomicU64>>,
    exchange_seconds: Family<PortLabels, Histogram, fn() -> Histogram>,
    bytes: Family<FlowLabels, Counter>,
    connections: Family<PortLabels, Counter>,
    segments: Counter,
    delayed_acks: Counter,
    packets_dropped: Counter,
    timer_records_lost: Counter,
    connections_left_out: Counter,
    /// The ports whose label sets are made (at most [`WatchSpec::MAX_PORTS`]).
    ports: Mutex<Vec<u16>>,
    /// From the watcher, until the tally's side takes them (after each batch of events).
    changes: Mutex<Vec<Change>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Raises a counter of something the watcher counts itself to the watcher's total.
fn raise_to(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

impl Metrics {
    /// The metrics of a watch of `ports` (more may come: [`Metrics::connection_opened`]).
    pub fn new(ports: &[u16]) -> Metrics {
        let mut registry = Registry::with_prefix("ackscope_watch");
        let stalls = Family::default();
        registry.register(
            "stalls",
            "Stalls the watch named, by class, by the way the data waited for went, and by the \
             watched port of its connection",
            stalls.clone(),
        );
        let stall_seconds = Family::default();
        registry.register_with_unit(
            "stall",
            "The time the stalls made their reader wait, in all",
            Unit::Seconds,
            stall_seconds.clone(),
        );
        let exchange_seconds = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "exchange",
            "Exchanges answered (a request and its answer, from the request's first byte on the \
             wire to the answer's last), by their latency",
            Unit::Seconds,
            exchange_seconds.clone(),
        );
        let bytes = Family::default();
        registry.register_with_unit(
            "payload",
            "TCP payload the watched connections carried, retransmissions included",
            Unit::Bytes,
            bytes.clone(),
        );
        let connections = Family::default();
        registry.register("connections", "Connections the watch followed", connections.clone());
        let segments = Counter::default();
        registry.register("segments", "TCP segments of the watched ports read", segments.clone());
        let delayed_acks = Counter::default();
        registry.register(
            "delayed_acks",
            "ACKs the watched sockets' delayed-ACK timers sent (seen as root only)",
            delayed_acks.clone(),
        );
        let packets_dropped = Counter::default();
        registry.register(
            "packets_dropped",
            "Packets of the watched ports the kernel dropped for the watch's full ring: the \
             watch fell behind, and may have missed exchanges and stalls (the watched programs \
             were not slowed)",
            packets_dropped.clone(),
        );
        let timer_records_lost = Counter::default();
        registry.register(
            "timer_records_lost",
            "Records of the delayed-ACK timer's eBPF program lost for a full ring",
            timer_records_lost.clone(),
        );
        let connections_left_out = Counter::default();
        registry.register(
            "connections_left_out",
            "Packets and samples of new connections left out past the connections followed at \
             once",
            connections_left_out.clone(),
        );
        let metrics = Metrics {
            registry,
            stalls,
            stall_seconds,
            exchange_seconds,
            bytes,
            connections,
            segments,
            delayed_acks,
            packets_dropped,
            timer_records_lost,
            connections_left_out,
            ports: Mutex::new(Vec::new()),
            changes: Mutex::new(Vec::new()),
        };
        for &port in ports {
            metrics.watch_port(port);
        }
        metrics
    }

    /// Makes `port`'s label sets, at zero (a port the watch found after it began, too: its
    /// first stall then counts in `increase()`); false past [`WatchSpec::MAX_PORTS`] ports.
    pub fn watch_port(&self, port: u16) -> bool {
        let mut ports = lock(&self.ports);
        if ports.contains(&port) {
            return true;
        }
        if ports.len() >= WatchSpec::MAX_PORTS {
            return false;
        }
        ports.push(port);
        // Each series made, at zero (the guards `get_or_create` returns are not needed).
        for class in StallClass::ALL {
            for from in [Side::Client, Side::Server] {
                let labels = StallLabels { class: class.code(), direction: direction(from), port };
                let _ = self.stalls.get_or_create(&labels);
                let _ = self.stall_seconds.get_or_create(&labels);
            }
        }
        for from in [Side::Client, Side::Server] {
            let _ = self.bytes.get_or_create(&FlowLabels { direction: direction(from), port });
        }
        let _ = self.exchange_seconds.get_or_create(&PortLabels { port });
        let _ = self.connections.get_or_create(&PortLabels { port });
        true
    }

    /// The watcher follows a new connection `conn`, whose server side is on `port`.
    pub fn connection_opened(&self, conn: ConnId, port: u16) {
        if self.watch_port(port) {
            self.connections.get_or_create(&PortLabels { port }).inc();
            lock(&self.changes).push(Change::Opened(conn, port));
        }
    }

    /// The watcher forgot `conn` (closed, and past its linger).
    pub fn connection_retired(&self, conn: ConnId) {
        lock(&self.changes).push(Change::Retired(conn));
    }

    /// What the watcher counted of its own losses so far (`timer_records_lost`: the
    /// delayed-ACK timer's program's, which the watcher reads apart).
    pub fn watch_counts(&self, counts: &WatchCounts, timer_records_lost: u64) {
        raise_to(&self.packets_dropped, counts.dropped);
        raise_to(&self.connections_left_out, counts.connections_left_out);
        raise_to(&self.timer_records_lost, timer_records_lost);
    }

    /// Every metric in Prometheus's text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)
            .expect("writing into a String does not fail");
        text
    }

    fn take_changes(&self) -> Vec<Change> {
        std::mem::take(&mut *lock(&self.changes))
    }
}

/// The tally's side of the metrics: fed each batch of events after the tally took it.
pub struct MetricsFeed {
    metrics: Arc<Metrics>,
    /// Each followed connection's watched port, until the watcher retires it.
    port_of: HashMap<ConnId, u16>,
    /// The last connection looked up: a batch's segments come in runs of one connection.
    last: Option<(ConnId, u16)>,
    /// The segments and timer ACKs of the runs before this one (`watch --try` splits the
    /// session): the tally of each run counts from zero, the metrics over the whole watch.
    carried: (u64, u64),
}

impl MetricsFeed {
    pub fn new(metrics: Arc<Metrics>) -> MetricsFeed {
        MetricsFeed { metrics, port_of: HashMap::new(), last: None, carried: (0, 0) }
    }

    /// Asks `run`, the watch's tally, to hand each exchange over as it settles and each stall
    /// as it is found: before its first batch, or those of it are not counted here.
    pub fn attach(&mut self, run: &mut RunTally) {
        if let RunAnalyses::Watched(watched) = &mut run.analysis {
            watched.exchanges.hand_out_settled();
            watched.hand_out_stalls();
        }
    }

    /// Takes a batch of `events` that `run` (a watch's tally, [`MetricsFeed::attach`]ed) has
    /// just taken.
    pub fn push(&mut self, events: &[Event], run: &mut RunTally) {
        let changes = self.metrics.take_changes();
        for change in &changes {
            if let Change::Opened(conn, port) = *change {
                self.port_of.insert(conn, port);
            }
        }
        // Bytes by port and direction, added once a batch.
        let mut bytes: Vec<(u16, [u64; 2])> = Vec::new();
        for event in events {
            let EventKind::Segment(segment) = &event.kind else { continue };
            if segment.len == 0 {
                continue;
            }
            if let Some(port) = self.port(event.conn) {
                let at = match bytes.iter().position(|(p, _)| *p == port) {
                    Some(at) => at,
                    None => {
                        bytes.push((port, [0, 0]));
                        bytes.len() - 1
                    }
                };
                bytes[at].1[usize::from(event.side == Side::Server)] += u64::from(segment.len);
            }
        }
        for (port, [to_server, to_client]) in bytes {
            let flow = |from| FlowLabels { direction: direction(from), port };
            self.metrics.bytes.get_or_create(&flow(Side::Client)).inc_by(to_server);
            self.metrics.bytes.get_or_create(&flow(Side::Server)).inc_by(to_client);
        }
        if let RunAnalyses::Watched(watched) = &mut run.analysis {
            let (metrics, port_of) = (&self.metrics, &self.port_of);
            // The stalls the tally found in this batch: the one packet rule, counted by port.
            watched.drain_stalls(|stall| {
                if let Some(&port) = port_of.get(&stall.conn) {
                    count_stall(metrics, &stall, port);
                }
            });
            watched.exchanges.drain_settled(|conn, latency_ns| {
                if let Some(&port) = port_of.get(&conn) {
                    let histogram = metrics.exchange_seconds.get_or_create(&PortLabels { port });
                    histogram.observe(latency_ns as f64 / 1e9);
                }
            });
            let (segments, acks) = self.carried;
            raise_to(&self.metrics.segments, segments + watched.segments);
            raise_to(&self.metrics.delayed_acks, acks + watched.delayed_acks);
        }
        // A retired connection is forgotten here too (after its stalls of this batch counted).
        for change in changes {
            if let Change::Retired(conn) = change {
                self.port_of.remove(&conn);
                if self.last.is_some_and(|(last, _)| last == conn) {
                    self.last = None;
                }
            }
        }
    }

    fn port(&mut self, conn: ConnId) -> Option<u16> {
        match self.last {
            Some((last, port)) if last == conn => Some(port),
            _ => {
                let port = *self.port_of.get(&conn)?;
                self.last = Some((conn, port));
                Some(port)
            }
        }
    }

    /// `run`'s tally ended (finished: its last stalls and exchanges decided) and the watch
    /// goes on with another's (`watch --try` splits the session): what it found last is
    /// counted, and its totals carried into the counters of the whole watch.
    pub fn carry_over(&mut self, run: &mut RunTally) {
        self.push(&[], run);
        if let RunAnalyses::Watched(watched) = &run.analysis {
            self.carried.0 += watched.segments;
            self.carried.1 += watched.delayed_acks;
        }
    }

    /// Connections followed here now (each until the watcher retires it).
    pub fn connections(&self) -> usize {
        self.port_of.len()
    }
}

fn count_stall(metrics: &Metrics, stall: &Stall, port: u16) {
    let labels = StallLabels { class: stall.class.code(), direction: direction(stall.from), port };
    metrics.stalls.get_or_create(&labels).inc();
    metrics.stall_seconds.get_or_create(&labels).inc_by(stall.wait_ns as f64 / 1e9);
}

/// `--metrics PORT` or `--metrics ADDR:PORT`: a port alone is on loopback.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)));
    }
    text.parse().map_err(|_| {
        "give a port (on 127.0.0.1), or an address and port: 127.0.0.1:9464, [::1]:9464, \
         0.0.0.0:9464 (port 0: any free one)"
            .to_string()
    })
}

/// `--metrics-token`: the rule of every ackscope listener's token.
pub fn parse_token(text: &str) -> Result<String, String> {
    crate::remote::check_token(text).map(|()| text.to_string())
}

/// `--metrics` of a watch: the metrics, served until dropped, and their feed.
pub struct Published {
    pub metrics: Arc<Metrics>,
    pub feed: MetricsFeed,
    /// Held, not read: dropping it stops the server.
    _server: MetricsServer,
}

impl Published {
    /// Serves the metrics of a watch of `ports` on `addr` and says where on standard error; off
    /// loopback with the token `token`, or a fresh one, said too.
    pub fn start(
        addr: SocketAddr,
        token: Option<&str>,
        ports: &[u16],
    ) -> Result<Published, String> {
        if let Some(token) = token {
            crate::remote::check_token(token).map_err(|e| format!("--metrics-token: {e}"))?;
        }
        let listener = std::net::TcpListener::bind(addr).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "--metrics: {addr} is in use; choose another port, or port 0 for any free one"
            ),
            _ => format!("--metrics: cannot listen on {addr}: {e}"),
        })?;
        let bound = listener.local_addr().map_err(|e| format!("--metrics: {e}"))?;
        let given = match token {
            Some(token) => Some(Arc::from(token)),
            None if bound.ip().is_loopback() => None,
            None => Some(Arc::from(
                crate::remote::new_token().map_err(|e| format!("making a token: {e}"))?,
            )),
        };
        let required = match EchoAccess::for_listener(bound, given) {
            EchoAccess::Token(token) => Some(token),
            EchoAccess::Open(_) => None,
        };
        let metrics = Arc::new(Metrics::new(ports));
        let server = MetricsServer::start(listener, Arc::clone(&metrics), required.clone())?;
        eprintln!("ackscope: metrics at http://{bound}/metrics");
        if let (Some(required), None) = (&required, token) {
            eprintln!(
                "ackscope: /metrics requires the token {required}: send it as `Authorization: \
                 Bearer {required}` (Prometheus: `authorization: {{credentials: ...}}`)"
            );
        }
        let feed = MetricsFeed::new(Arc::clone(&metrics));
        Ok(Published { metrics, feed, _server: server })
    }
}

/// The HTTP server of `/metrics`, on a thread of its own until dropped.
///
/// It is the UI server's listener ([`GuardedListener`]: a deadline on every request, bounded
/// connections, the security headers on every answer, those the HTTP library makes itself
/// too) on axum and tokio, which the probe has already: a blocking listener would be simpler
/// to start, but would need its own copy of those bounds to face a network for days. A runtime
/// of one thread is plenty for a scrape every few seconds, and takes no CPU between them.
struct MetricsServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What every request is checked against.
struct Access {
    metrics: Arc<Metrics>,
    /// Off loopback: the token every request must carry (`Authorization: Bearer TOKEN`).
    token: Option<Arc<str>>,
    /// On loopback: the host names a request may name (a page that resolved another name to
    /// 127.0.0.1 is refused, as the UI refuses it).
    own_hosts: Option<Vec<String>>,
    security_headers: SecurityHeaders,
}

impl MetricsServer {
    fn start(
        listener: std::net::TcpListener,
        metrics: Arc<Metrics>,
        token: Option<Arc<str>>,
    ) -> Result<MetricsServer, String> {
        let addr = listener.local_addr().map_err(|e| format!("--metrics: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| format!("--metrics: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("--metrics: starting the async runtime: {e}"))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let access = Arc::new(Access {
            metrics,
            token,
            own_hosts: addr.ip().is_loopback().then(|| crate::serve::own_hosts(addr)),
            security_headers: guard::security_headers(CONTENT_SECURITY_POLICY),
        });
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => return tracing::warn!("--metrics: serving on {addr}: {e}"),
                    };
                    let headers = Arc::clone(&access.security_headers);
                    let router = Router::new()
                        .route("/metrics", get(scrape))
                        .fallback(not_found)
                        .layer(axum::middleware::from_fn_with_state(Arc::clone(&access), check))
                        .with_state(access);
                    let serving = axum::serve(GuardedListener::new(listener, headers), router);
                    // The watch has ended: a scrape under way is cut, as the process ends.
                    tokio::select! {
                        _ = serving => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(|e| format!("--metrics: starting its thread: {e}"))?;
        Ok(MetricsServer { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Every request: refused without the token off loopback, or with another host's name on
/// loopback; every answer, a refusal too: the security headers. No answer repeats what the
/// request said.
async fn check(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    let mut response = match refusal(&access, request.headers()) {
        Some(refused) => refused,
        None => next.run(request).await,
    };
    for (name, value) in access.security_headers.iter() {
        response.headers_mut().insert(name, value.clone());
    }
    response
}

fn refusal(access: &Access, headers: &HeaderMap) -> Option<Response> {
    if let Some(own) = &access.own_hosts {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        let name = host.map(crate::serve::host_name);
        if !name.is_some_and(|name| own.iter().any(|o| o.eq_ignore_ascii_case(name))) {
            tracing::warn!("--metrics: refused a request for Host {:?}", host.unwrap_or("(none)"));
            let reason = "ackscope: this request's Host is not this watch's address; scrape \
                          127.0.0.1 or localhost\n";
            return Some((StatusCode::MISDIRECTED_REQUEST, reason).into_response());
        }
    }
    let token = access.token.as_deref()?;
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|presented| crate::remote::token_matches(presented, token)) {
        return None;
    }
    tracing::warn!("--metrics: refused a request without the token");
    let reason = "ackscope: /metrics needs the watch's token, as `Authorization: Bearer TOKEN` \
                  (Prometheus: `authorization: {credentials: TOKEN}` in the scrape config)\n";
    let mut refused = (StatusCode::UNAUTHORIZED, reason).into_response();
    refused
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"ackscope\""));
    Some(refused)
}

async fn scrape(State(access): State<Arc<Access>>) -> Response {
    let headers = [
        (header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE),
        (header::CACHE_CONTROL, "no-store"),
    ];
    (headers, access.metrics.render()).into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "ackscope: the watch's metrics are at /metrics\n").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackscope_shared::event::tcp_flags::{ACK, FIN, PSH};
    use ackscope_shared::{ReqId, Scenario, Segment};

    const MS: u64 = 1_000_000;
    const PORT: u16 = 8080;

    fn seg(at_ns: u64, side: Side, req: u32, seq: u32, ack: u32, len: u32, flags: u8) -> Event {
        Event {
            at_ns,
            side,
            conn: ConnId(1),
            req: ReqId(req),
            kind: EventKind::Segment(Segment { flags, seq, ack, len, ..Segment::default() }),
        }
    }

    /// Exchange `req` of a pair writing length then body with Nagle on both ways: the body
    /// waits for the peer's delayed ACK of the length, each way (43.6 ms twice).
    fn nagle_exchange(req: u32, t: u64, c: u32, s: u32) -> Vec<Event> {
        use Side::{Client, Server};
        let seg =
            |dt, side, seq: u32, ack: u32, len, flags| seg(t + dt, side, req, seq, ack, len, flags);
        vec![
            seg(0, Client, c, s, 4, PSH | ACK),
            seg(43_600_000, Server, s, c + 4, 0, ACK),
            seg(43_630_000, Client, c + 4, s, 2048, PSH | ACK),
            seg(43_700_000, Server, s, c + 2052, 4, PSH | ACK),
            seg(87_300_000, Client, c + 2052, s + 4, 0, ACK),
            seg(87_330_000, Server, s + 4, c + 2052, 2048, PSH | ACK),
            seg(87_400_000, Client, c + 2052, s + 2052, 0, ACK),
        ]
    }

    /// A watch's tally and the metrics' feed, given `events` as the watch's loop gives them.
    fn watched(metrics: &Arc<Metrics>, batches: &[Vec<Event>]) -> (RunTally, MetricsFeed) {
        let mut run = RunTally::new(&Scenario::Watch(WatchSpec::default()));
        let mut feed = MetricsFeed::new(Arc::clone(metrics));
        feed.attach(&mut run);
        for events in batches {
            run.push(events, None);
            feed.push(events, &mut run);
        }
        (run, feed)
    }

    /// `name{labels} value` lines of `text`, by the whole of what precedes the value.
    fn value(text: &str, series: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.rsplit_once(' ').is_some_and(|(s, _)| s == series))
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    }

    #[test]
    fn every_metric_is_named_and_typed_by_prometheus_conventions_from_the_start() {
        let text = Metrics::new(&[PORT]).render();
        for (name, kind) in [
            ("ackscope_watch_stalls_total", "counter"),
            ("ackscope_watch_stall_seconds_total", "counter"),
            ("ackscope_watch_exchange_seconds", "histogram"),
            ("ackscope_watch_payload_bytes_total", "counter"),
            ("ackscope_watch_connections_total", "counter"),
            ("ackscope_watch_segments_total", "counter"),
            ("ackscope_watch_delayed_acks_total", "counter"),
            ("ackscope_watch_packets_dropped_total", "counter"),
            ("ackscope_watch_timer_records_lost_total", "counter"),
            ("ackscope_watch_connections_left_out_total", "counter"),
        ] {
            assert!(text.contains(&format!("\n# TYPE {name} {kind}\n")), "{name}:\n{text}");
            assert!(text.contains(&format!("# HELP {name} ")), "{name}:\n{text}");
        }
        // Every class each way on the port, at zero before any stall: `increase()` then counts
        // the first one.
        for class in StallClass::ALL {
            for way in ["client->server", "server->client"] {
                let labels =
                    format!("{{class=\"{}\",direction=\"{way}\",port=\"{PORT}\"}}", class.code());
                assert_eq!(value(&text, &format!("ackscope_watch_stalls_total{labels}")), 0.0);
                assert_eq!(
                    value(&text, &format!("ackscope_watch_stall_seconds_total{labels}")),
                    0.0
                );
            }
        }
        let buckets =
            format!("ackscope_watch_exchange_seconds_bucket{{port=\"{PORT}\",le=\"0.035\"}}");
        assert_eq!(value(&text, &buckets), 0.0, "the bucket below the 40 ms timer");
        let inf = format!("ackscope_watch_exchange_seconds_bucket{{port=\"{PORT}\",le=\"+Inf\"}}");
        assert_eq!(value(&text, &inf), 0.0);
    }

    #[test]
    fn the_stalls_exchanges_and_bytes_are_the_tallys_by_port() {
        let metrics = Arc::new(Metrics::new(&[PORT]));
        metrics.connection_opened(ConnId(1), PORT);
        let mut batches: Vec<Vec<Event>> = (0..20u32)
            .map(|i| nagle_exchange(i, u64::from(i) * 200 * MS, 1000 + i * 4096, 5000 + i * 4096))
            .collect();
        // The first batch settles an exchange too (the first, as the second begins).
        let second = batches.remove(1);
        batches[0].extend(second);
        let (mut run, mut feed) = watched(&metrics, &batches);
        let text = metrics.render();
        let RunAnalyses::Watched(tally) = &mut run.analysis else { panic!("a watch's tally") };
        let summaries = tally.classes();
        for way in ["client->server", "server->client"] {
            let labels =
                format!("{{class=\"nagle_delayed_ack\",direction=\"{way}\",port=\"{PORT}\"}}");
            let counted = value(&text, &format!("ackscope_watch_stalls_total{labels}"));
            let summary = summaries.iter().find(|c| c.direction == way).expect("stalls each way");
            assert_eq!(counted, f64::from(summary.count), "{way}: the tally's count");
            assert_eq!(counted, 20.0, "{way}");
            let seconds = value(&text, &format!("ackscope_watch_stall_seconds_total{labels}"));
            assert!((seconds - 20.0 * 0.04363).abs() < 0.01, "{way}: {seconds} s");
        }
        // The last exchange settles at the connection's close or the watch's end: 19 so far,
        // as the tally's own count.
        let count = format!("ackscope_watch_exchange_seconds_count{{port=\"{PORT}\"}}");
        assert_eq!(value(&text, &count), 19.0);
        assert_eq!(tally.exchanges.answered(), 19);
        let below =
            format!("ackscope_watch_exchange_seconds_bucket{{port=\"{PORT}\",le=\"0.075\"}}");
        assert_eq!(value(&text, &below), 0.0, "each exchange waited two timers");
        let flow = |way| {
            format!("ackscope_watch_payload_bytes_total{{direction=\"{way}\",port=\"{PORT}\"}}")
        };
        assert_eq!(value(&text, &flow("client->server")), 20.0 * 2052.0);
        assert_eq!(value(&text, &flow("server->client")), 20.0 * 2052.0);
        assert_eq!(
            value(&text, &format!("ackscope_watch_connections_total{{port=\"{PORT}\"}}")),
            1.0
        );
        assert_eq!(value(&text, "ackscope_watch_segments_total"), 140.0);
        assert_eq!(feed.connections(), 1);

        // Closed, then retired by the watcher: nothing of it is kept here.
        let close = vec![
            seg(5000 * MS, Side::Client, 20, 1, 1, 0, FIN | ACK),
            seg(5001 * MS, Side::Server, 20, 1, 2, 0, FIN | ACK),
            seg(5002 * MS, Side::Client, 20, 2, 2, 0, ACK),
        ];
        metrics.connection_retired(ConnId(1));
        run.push(&close, None);
        feed.push(&close, &mut run);
        assert_eq!(feed.connections(), 0);
        assert_eq!(value(&metrics.render(), &count), 20.0, "settled at the close");
    }

    /// `watch --try` splits the session: the run after the change has a tally of its own,
    /// counting from zero, and the metrics go on counting the whole watch.
    #[test]
    fn a_split_session_counts_on_across_its_runs() {
        let metrics = Arc::new(Metrics::new(&[PORT]));
        metrics.connection_opened(ConnId(1), PORT);
        let exchange =
            |i: u32| nagle_exchange(i, u64::from(i) * 200 * MS, 1000 + i * 4096, 5000 + i * 4096);
        let (mut before, mut feed) = watched(&metrics, &(0..10).map(exchange).collect::<Vec<_>>());
        let RunAnalyses::Watched(tally) = &mut before.analysis else { panic!("a watch") };
        tally.finish();
        let segments_before = tally.segments;
        feed.carry_over(&mut before);
        let stalls = |text: &str| {
            let labels = format!(
                "{{class=\"nagle_delayed_ack\",direction=\"client->server\",port=\"{PORT}\"}}"
            );
            value(text, &format!("ackscope_watch_stalls_total{labels}"))
        };
        let at_split = metrics.render();
        assert_eq!(stalls(&at_split), 10.0, "the first run's stalls, its last one included");

        let mut after = RunTally::new(&Scenario::Watch(WatchSpec::default()));
        feed.attach(&mut after);
        for events in (10..15).map(exchange) {
            after.push(&events, None);
            feed.push(&events, &mut after);
        }
        let RunAnalyses::Watched(tally) = &after.analysis else { panic!("a watch") };
        let text = metrics.render();
        assert_eq!(
            value(&text, "ackscope_watch_segments_total"),
            (segments_before + tally.segments) as f64,
            "both runs' segments"
        );
        assert!(stalls(&text) >= 14.0, "counting on: {}", stalls(&text));
    }

    #[test]
    fn losses_are_the_watchers_totals_and_label_sets_stop_at_the_bound_of_ports() {
        let ports: Vec<u16> = (1..=WatchSpec::MAX_PORTS as u16 + 3).collect();
        let metrics = Metrics::new(&ports);
        let counts = WatchCounts { dropped: 7, connections_left_out: 2, ..WatchCounts::default() };
        metrics.watch_counts(&counts, 3);
        metrics.watch_counts(&counts, 3);
        let text = metrics.render();
        assert_eq!(value(&text, "ackscope_watch_packets_dropped_total"), 7.0);
        assert_eq!(value(&text, "ackscope_watch_connections_left_out_total"), 2.0);
        assert_eq!(value(&text, "ackscope_watch_timer_records_lost_total"), 3.0);
        let ported = |port: u16| text.contains(&format!("port=\"{port}\""));
        assert!(ported(WatchSpec::MAX_PORTS as u16) && !ported(WatchSpec::MAX_PORTS as u16 + 1));
        // A connection of a port past the bound is not counted, nor kept.
        metrics.connection_opened(ConnId(9), WatchSpec::MAX_PORTS as u16 + 1);
        assert!(metrics.take_changes().is_empty());
    }
}
