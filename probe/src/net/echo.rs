//! The echo server: the other end of every request/response experiment.
//!
//! One file, though long: the protocol's framing, each knob's socket options and the recording of
//! every call must stay in step; the loop itself is short.
//!
//! One thread accepts; each connection gets its own thread running blocking reads and writes, so
//! every recorded wait is the kernel's, not a scheduler's. Protocol: docs/PROTOCOL.md.

use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ackscope_shared::control::{CONTROL_MAGIC, MAX_TOKEN_LINE, TOKEN_MAGIC};
use ackscope_shared::spec::MAX_BODY_BYTES;
use ackscope_shared::{ConnId, Event, EventKind, ReqId, RrSpec, Side};
use socket2::{Domain, Protocol, Socket, Type};

use super::endpoint::{Endpoint, Inbox, KernelProbe, INBOX_START_BYTES};
use super::options::SideOptions;
use super::peers::{ConnTag, Peers};
use super::record::{Clock, Recorder};
use super::{context, Message};
use ackscope_shared::wire::Instruments;

#[derive(Clone, Debug)]
pub struct EchoConfig {
    /// The server side's socket options and write pattern.
    pub opts: SideOptions,
    /// Length prefixes above this close the connection (bounds the body buffer).
    pub max_body_bytes: u32,
    /// Answer bodies of this size instead of the request's.
    pub response_bytes: Option<u32>,
    /// Wait this long between reading a request and answering it.
    pub think: Duration,
    /// TCP_INFO at syscalls and while blocked, for recorded connections.
    pub instruments: Instruments,
    /// Connections served at once; one more is closed as soon as it is accepted, with a log
    /// line. Each connection has a thread of its own.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed (a standalone server's idle
    /// clients); `None`: never (a run's own client).
    pub idle_timeout: Option<Duration>,
}

impl EchoConfig {
    /// The server of a run (this probe's own, or a remote run's on `ackscope server`): the
    /// spec's server side, bodies up to the protocol's cap, no idle timeout (the run's client
    /// is the only one), and [`RUN_MAX_CONNECTIONS`].
    pub fn for_run(spec: &RrSpec, instruments: Instruments) -> EchoConfig {
        EchoConfig {
            opts: SideOptions::rr(spec, Side::Server),
            max_body_bytes: MAX_BODY_BYTES,
            response_bytes: spec.response_bytes,
            think: Duration::from_micros(u64::from(spec.think_us)),
            instruments,
            max_connections: RUN_MAX_CONNECTIONS,
            idle_timeout: None,
        }
    }
}

/// The buffers a standalone server's connection keeps between requests; larger ones are given
/// back after the answer. 1,024 idle connections that each once sent 64 MiB then hold 2 GiB at
/// most, not 128 GiB.
const KEEP_BETWEEN_REQUESTS: usize = 1 << 20;

/// Connections a standalone server serves at once unless told otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// A run's own server: its client opens at most `spec.connections` at a time, and a few more
/// when it reconnects; this only guards against a stray flood.
pub const RUN_MAX_CONNECTIONS: usize = 4096;

/// Which connections are recorded, and how their requests are numbered.
pub enum Tagging {
    /// A run's own server: only connections its client registered, with the client's ids.
    Run(Arc<Peers>),
    /// A standalone server: every connection, numbered in the order they come. With `control`,
    /// a connection that opens with [`CONTROL_MAGIC`] is handed to it instead (a remote probe
    /// driving this server: docs/REMOTE.md). `access` says who gets echo answers.
    Standalone {
        next_conn: AtomicU32,
        next_req: AtomicU32,
        control: Option<ControlHandler>,
        access: EchoAccess,
    },
    /// The server of a run another host drives: every connection from `from` (the address of
    /// the control connection that gave the token; any other is closed), numbered in the order
    /// they come; a request's id is its index on its connection, which the driving host maps to
    /// its own ids. Each connection's client port is noted in `introductions` before its events.
    Remote { from: IpAddr, next_conn: AtomicU32, introductions: Arc<Mutex<Vec<(ConnId, u16)>>> },
}

/// Who a standalone server answers.
pub enum EchoAccess {
    /// Anyone: a listener on loopback. A client that gives a token anyway has it checked
    /// against this one.
    Open(Option<Arc<str>>),
    /// Only a connection that opens with [`TOKEN_MAGIC`], this token and a newline: a listener
    /// that is not on loopback.
    Token(Arc<str>),
}

impl EchoAccess {
    /// What a listener on `addr` with `token` requires.
    pub fn for_listener(addr: SocketAddr, token: Option<Arc<str>>) -> EchoAccess {
        match token {
            Some(token) if !addr.ip().is_loopback() => EchoAccess::Token(token),
            token => EchoAccess::Open(token),
        }
    }
}

/// Serves a control connection (its first four bytes still unread).
pub type ControlHandler = Arc<dyn Fn(TcpStream, SocketAddr) + Send + Sync>;

impl Tagging {
    pub fn standalone(control: Option<ControlHandler>, access: EchoAccess) -> Tagging {
        Tagging::Standalone {
            next_conn: AtomicU32::new(0),
            next_req: AtomicU32::new(0),
            control,
            access,
        }
    }

    /// The tag of a connection from `peer`, or `None` for one that is served but not recorded.
    fn tag(&self, peer: SocketAddr) -> Option<ConnTag> {
        let next = |counter: &AtomicU32| ConnId(counter.fetch_add(1, Ordering::Relaxed));
        match self {
            Tagging::Run(peers) => peers.take(peer.port()),
            Tagging::Standalone { next_conn, .. } => Some(ConnTag::new(next(next_conn))),
            Tagging::Remote { next_conn, introductions, .. } => {
                let conn = next(next_conn);
                lock(introductions).push((conn, peer.port()));
                Some(ConnTag::new(conn))
            }
        }
    }
}

/// How a connection opens, from its first four bytes, peeked, not read: an echo client's length
/// prefix is still there for it.
enum Opening {
    Control,
    /// [`TOKEN_MAGIC`]: an echo client giving the token.
    Token,
    Echo,
    /// Nothing more came within the socket's read timeout (the idle timeout) of the last byte:
    /// closed as an idle echo connection would be, not given a second timeout's wait.
    Idle,
}

/// How long a connection that opens like a handshake (its first byte the magics' `A`, which no
/// echo length prefix starts with: that would be over 1 GiB) has from that byte to the end of
/// its magic and, with [`TOKEN_MAGIC`], of its token line. Without it each byte got the whole
/// idle timeout, and a peer trickling them held a thread and a connection's place for hours
/// before the control port's own handshake deadline began.
pub const OPENING_DEADLINE: Duration = Duration::from_secs(10);

/// Waits for the first four bytes (or the read timeout after the last byte, or the peer
/// closing). Once the first byte says a handshake, the rest must come within
/// [`OPENING_DEADLINE`]; the returned deadline is the token line's too.
fn opening(stream: &TcpStream) -> (Opening, Option<Instant>) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(stream);
    let mut first = [0u8; 4];
    let mut have = 0;
    let mut handshake: Option<Instant> = None;
    // One byte more at a time: the read timeout then runs from each byte, as an echo
    // connection's reads do. (Asked for all four at once, it ran once for them all, and three
    // bytes then silence were waited for again by the echo read: twice the idle timeout.)
    while have < first.len() {
        if have > 0 && first[0] == CONTROL_MAGIC[0] {
            let until = *handshake.get_or_insert_with(|| Instant::now() + OPENING_DEADLINE);
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
                return (Opening::Idle, handshake);
            }
        }
        // SAFETY: recv writes at most `have + 1 <= first.len()` bytes into the buffer we own,
        // on a descriptor `stream` keeps open for the call.
        let got = unsafe {
            libc::recv(fd, first.as_mut_ptr().cast(), have + 1, libc::MSG_PEEK | libc::MSG_WAITALL)
        };
        match usize::try_from(got) {
            Err(_) if is_timeout(&io::Error::last_os_error()) => return (Opening::Idle, handshake),
            // An error: the echo read meets it too, and says so.
            Err(_) => return (Opening::Echo, handshake),
            // Short of what was asked: the peer closed (the echo read sees the end) or the
            // timeout passed with the bytes before still there.
            Ok(got) if got <= have => {
                let opening = if peer_closed(stream) { Opening::Echo } else { Opening::Idle };
                return (opening, handshake);
            }
            Ok(got) => have = got,
        }
    }
    let opening = match first {
        CONTROL_MAGIC => Opening::Control,
        TOKEN_MAGIC => Opening::Token,
        _ => Opening::Echo,
    };
    (opening, handshake)
}

/// Whether the peer has closed its side (or the connection failed), with data still unread.
fn peer_closed(stream: &TcpStream) -> bool {
    let mut poll = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(stream),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one pollfd we own; a timeout of 0 does not wait.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Reads an echo client's [`TOKEN_MAGIC`] line, all of it by `until`, and checks it against
/// `token`: `Err` says why the connection is refused (also told to the client, on one line).
fn check_token_line(stream: &mut TcpStream, token: &str, until: Instant) -> Result<(), String> {
    use std::io::Read;
    let late = || format!("the token line did not come within {} s", OPENING_DEADLINE.as_secs());
    let mut magic = [0u8; 4];
    stream.read_exact(&mut magic).map_err(|e| format!("the token line did not come: {e}"))?;
    // A byte at a time, at most MAX_TOKEN_LINE: nothing past the newline is taken from the
    // echo messages that follow it.
    let mut line = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(late());
        }
        match stream.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => break,
            Ok(1) if line.len() < MAX_TOKEN_LINE => line.push(byte[0]),
            Ok(1) => return Err(format!("the token line is over {MAX_TOKEN_LINE} bytes")),
            Ok(_) => return Err("the connection closed before the token's newline".into()),
            Err(e) if is_timeout(&e) => return Err(late()),
            Err(e) => return Err(format!("the token line did not come: {e}")),
        }
    }
    // Compared without stopping at the first difference: the time taken says nothing of how
    // much of a guess was right.
    let given = line.strip_suffix(b"\r").unwrap_or(&line);
    let same = given.len() == token.len()
        && given.iter().zip(token.as_bytes()).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0;
    if same {
        Ok(())
    } else {
        Err("wrong token: give the token this `ackscope server` printed when it started".into())
    }
}

/// Closes a connection this server does not serve, telling the client why on one line.
fn refuse(mut stream: TcpStream, peer: SocketAddr, why: &str) {
    use std::io::{Read, Write};
    tracing::warn!("echo server refused the connection from {peer}: {why}");
    let _ = stream.write_all(format!("ackscope: {why}\n").as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
    // What the client sent unread would make the close a reset, which can overtake the line
    // above: read it away first (at most 64 KiB, for at most a second).
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
            break;
        }
    }
    // The accept loop holds a clone: shut it down so the peer sees the close now.
    let _ = stream.shutdown(Shutdown::Both);
}

/// Connection threads still running, each with a clone of its socket to shut it down on stop.
type OpenConnections = Arc<Mutex<Vec<(TcpStream, JoinHandle<()>)>>>;

/// A running echo server. [`EchoServer::shutdown`] stops it and waits for every connection
/// thread, so that all their events have been handed over.
pub struct EchoServer {
    addr: SocketAddr,
    /// A second descriptor of the listening socket, to wake the accept thread with.
    wake: TcpListener,
    stopping: Arc<AtomicBool>,
    accept_thread: Option<JoinHandle<()>>,
    connections: OpenConnections,
}

impl EchoServer {
    /// Listens on `listen` (port 0: an ephemeral port) with the server side's options set on the
    /// listener, so accepted sockets inherit the buffer sizes before the handshake.
    pub fn start(
        listen: SocketAddr,
        config: EchoConfig,
        clock: Clock,
        tagging: Tagging,
        sink: Option<SyncSender<Vec<Event>>>,
    ) -> io::Result<EchoServer> {
        let listener = listener(listen, &config.opts)?;
        let addr = listener.local_addr()?;
        let wake = listener.try_clone().map_err(|e| context(e, "echo server listener"))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let connections = OpenConnections::default();
        let accept_thread = {
            let stopping = Arc::clone(&stopping);
            let connections = Arc::clone(&connections);
            let tagging = Arc::new(tagging);
            thread::Builder::new().name("echo-accept".into()).spawn(move || {
                let accept = Accept { config, clock, tagging, sink, stopping, connections };
                accept.run(listener);
            })?
        };
        Ok(EchoServer { addr, wake, stopping, accept_thread: Some(accept_thread), connections })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes connections still open, and joins every thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(accept_thread) = self.accept_thread.take() else {
            return;
        };
        self.stopping.store(true, Ordering::SeqCst);
        // accept() has no timeout. Shutting the listening socket down ends the listen, and the
        // blocked accept() returns (EINVAL) to see the flag. A connection of our own would need a
        // route to the listener's address from this thread's namespace: from a user's
        // namespace whose lo is down (`ip netns add` leaves it so) there is none, and accept()
        // would wait forever. The connection stays as the fallback.
        if socket2::SockRef::from(&self.wake).shutdown(Shutdown::Read).is_err() {
            let _ = TcpStream::connect(self.addr);
        }
        let _ = accept_thread.join();
        let connections = std::mem::take(&mut *lock(&self.connections));
        for (stream, handle) in connections {
            // Unblocks a read waiting on a peer that never closed.
            let _ = stream.shutdown(Shutdown::Both);
            let _ = handle.join();
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn listener(listen: SocketAddr, opts: &SideOptions) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(listen), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| context(e, "echo server socket"))?;
    socket.set_reuse_address(true)?;
    opts.apply_before_handshake(&socket)?;
    socket.bind(&listen.into()).map_err(|e| context(e, format!("echo server bind on {listen}")))?;
    socket.listen(128).map_err(|e| context(e, format!("echo server listen on {listen}")))?;
    Ok(socket.into())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct Accept {
    config: EchoConfig,
    clock: Clock,
    tagging: Arc<Tagging>,
    sink: Option<SyncSender<Vec<Event>>>,
    stopping: Arc<AtomicBool>,
    connections: OpenConnections,
}

impl Accept {
    fn run(self, listener: TcpListener) {
        let mut backoff = AcceptBackoff::default();
        loop {
            let accepted = listener.accept();
            let accepted_ns = self.clock.now_ns();
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let (stream, peer) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors (EMFILE) or memory: retrying at once would spin. Wait,
                    // longer each time, until a connection is served again.
                    backoff.failed("accept failed", &e);
                    continue;
                }
            };
            let open = self.open_connections();
            if open >= self.config.max_connections {
                tracing::warn!(
                    "echo server closed the connection from {peer} at once: {open} connections \
                     are open, the most it serves (--max-connections {})",
                    self.config.max_connections
                );
                drop(stream);
                continue;
            }
            if let Some(idle) = self.config.idle_timeout {
                if let Err(e) = stream.set_read_timeout(Some(idle)) {
                    tracing::warn!("echo server: no idle timeout for {peer}: {e}");
                }
            }
            let watch = match stream.try_clone() {
                Ok(watch) => watch,
                Err(e) => {
                    // Out of descriptors after the accept (it took the last one): the connection
                    // is closed, and the episode goes on.
                    drop(stream);
                    backoff.failed("accept failed", &e);
                    continue;
                }
            };
            let (clock, sink) = (self.clock, self.sink.clone());
            let config = self.config.clone();
            let tagging = Arc::clone(&self.tagging);
            let spawned = thread::Builder::new().name("echo-conn".into()).spawn(move || {
                let mut stream = stream;
                if let Tagging::Remote { from, .. } = &*tagging {
                    if peer.ip() != *from {
                        let why = format!(
                            "this port serves a run driven from {from}, and no other address"
                        );
                        return refuse(stream, peer, &why);
                    }
                }
                if let Tagging::Standalone { control, access, .. } = &*tagging {
                    let (opening, handshake) = opening(&stream);
                    match opening {
                        Opening::Control => match control {
                            Some(control) => return control(stream, peer),
                            None => return refuse(stream, peer, "this server takes no runs"),
                        },
                        Opening::Token => {
                            let (EchoAccess::Token(token) | EchoAccess::Open(Some(token))) = access
                            else {
                                return refuse(stream, peer, "this server has no token");
                            };
                            let until = handshake.unwrap_or_else(Instant::now);
                            if let Err(why) = check_token_line(&mut stream, token, until) {
                                return refuse(stream, peer, &why);
                            }
                            // Echo messages follow: the idle timeout again, not the deadline.
                            if let Err(e) = stream.set_read_timeout(config.idle_timeout) {
                                return refuse(stream, peer, &format!("setting its timeout: {e}"));
                            }
                        }
                        Opening::Echo if matches!(access, EchoAccess::Token(_)) => {
                            return refuse(
                                stream,
                                peer,
                                "this server is not on loopback: open the connection with ACKT, \
                                 the token it printed and a newline, then send echo messages \
                                 (docs/PROTOCOL.md)",
                            );
                        }
                        Opening::Idle => {
                            // The accept loop holds a clone: shut it down so the peer sees it.
                            let _ = stream.shutdown(Shutdown::Both);
                            let idle = config.idle_timeout.unwrap_or_default().as_secs();
                            return tracing::info!(
                                "echo server closed the connection from {peer}: nothing came \
                                 for {idle} s (--idle-timeout)"
                            );
                        }
                        Opening::Echo => {}
                    }
                }
                let tag = tagging.tag(peer);
                // Connections this run did not make are served but not recorded.
                let (conn, mut recorder) = match (&tag, sink) {
                    (Some(tag), Some(sink)) => (tag.conn, Recorder::new(clock, Side::Server, sink)),
                    _ => (ConnId(u32::MAX), Recorder::discarding(clock, Side::Server)),
                };
                recorder.record(accepted_ns, conn, ReqId(0), EventKind::Accepted);
                let connection = Connection { peer, tag, tagging: &tagging, config: &config };
                if let Err(e) = connection.serve(stream, conn, &mut recorder) {
                    tracing::warn!("{e}");
                }
            });
            match spawned {
                Ok(handle) => {
                    self.keep(watch, handle);
                    backoff.served();
                }
                // Out of memory or threads: as out of descriptors.
                Err(e) => backoff.failed("could not start a connection thread", &e),
            }
        }
    }

    /// Connections whose threads are still running.
    fn open_connections(&self) -> usize {
        lock(&self.connections).iter().filter(|(_, handle)| !handle.is_finished()).count()
    }

    fn keep(&self, stream: TcpStream, handle: JoinHandle<()>) {
        let mut open = lock(&self.connections);
        // Forget threads that already ended so that long runs with reconnects stay small.
        let (done, running): (Vec<_>, Vec<_>) =
            std::mem::take(&mut *open).into_iter().partition(|(_, h)| h.is_finished());
        for (_, handle) in done {
            let _ = handle.join();
        }
        *open = running;
        open.push((stream, handle));
    }
}

struct Connection<'a> {
    peer: SocketAddr,
    tag: Option<ConnTag>,
    tagging: &'a Tagging,
    config: &'a EchoConfig,
}

impl Connection<'_> {
    /// The id of the `index`-th request on this connection.
    fn request_id(&self, index: usize) -> ReqId {
        match (self.tagging, &self.tag) {
            (Tagging::Standalone { next_req, .. }, _) => {
                ReqId(next_req.fetch_add(1, Ordering::Relaxed))
            }
            (Tagging::Run(_), Some(tag)) => tag.request_at(index).unwrap_or(ReqId(u32::MAX)),
            (Tagging::Run(_), None) => ReqId(u32::MAX),
            (Tagging::Remote { .. }, _) => ReqId(u32::try_from(index).unwrap_or(u32::MAX)),
        }
    }

    /// Answers requests until the peer closes.
    fn serve(&self, mut stream: TcpStream, conn: ConnId, rec: &mut Recorder) -> io::Result<()> {
        let peer = self.peer;
        let config = self.config;
        stream.set_nodelay(config.opts.nodelay).map_err(|e| context(e, "set TCP_NODELAY"))?;
        let kernel = KernelProbe::start(config.instruments, &stream, rec, conn);
        let mut end = Endpoint::new(&mut stream, conn, &config.opts, rec, &kernel);
        end.record_buffers(ReqId(0))?;
        let mut inbox = Inbox::with_capacity(INBOX_START_BYTES);
        let mut answer = Message::default();
        let mut req = ReqId(0);
        let mut index = 0;
        let result = loop {
            // Whose request this is is known only once its length has arrived: the events of the
            // read are given the right id after it.
            let mark = end.recorder().mark();
            let len = match end.read_prefix(req, &mut inbox, true) {
                Ok(Some(len)) => len,
                Ok(None) => break Ok(()),
                Err(e) if is_timeout(&e) => {
                    let idle = config.idle_timeout.unwrap_or_default();
                    tracing::info!(
                        "echo server closed the connection from {peer}: nothing came for {} s \
                         (--idle-timeout)",
                        idle.as_secs()
                    );
                    break Ok(());
                }
                Err(e) => break Err(context(e, format!("echo server read from {peer}"))),
            };
            req = self.request_id(index);
            index += 1;
            end.recorder().retag_since(mark, req);
            // A standalone server's client is not recorded, and a remote run's client is on
            // another host: the server marks each request as it sees it, from the message's
            // first bytes arriving to its answer written (the server's own view of a run).
            let standalone =
                matches!(self.tagging, Tagging::Standalone { .. } | Tagging::Remote { .. });
            if standalone {
                let arrived = end.recorder().first_read_since(mark);
                let at_ns = arrived.unwrap_or_else(|| end.recorder().now_ns());
                end.recorder().record(at_ns, conn, req, EventKind::RequestStart);
            }
            if len > config.max_body_bytes {
                break Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "echo server closed the connection from {peer}: its length prefix says \
                         {len} bytes, over the {}-byte cap; send smaller messages",
                        config.max_body_bytes
                    ),
                ));
            }
            // Bounded by the cap just checked, and allocated only as the body arrives.
            let body = match end.read_body(req, &mut inbox, len) {
                Ok(body) => body,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    break Err(eof_in_body(peer, len))
                }
                Err(e) => break Err(context(e, format!("echo server read from {peer}"))),
            };
            answer.answer(body, config.response_bytes.unwrap_or(len));
            if !config.think.is_zero() {
                thread::sleep(config.think);
            }
            if let Err(e) = end.write_message(req, &answer) {
                break Err(context(e, format!("echo server write to {peer}")));
            }
            if standalone {
                end.note(req, EventKind::RequestDone);
            }
            if matches!(self.tagging, Tagging::Standalone { .. }) {
                // An outside client may send one large message, then wait: its connection then
                // keeps at most 1 MiB, not the largest message it ever sent. (A run's client
                // sends many of one size: its buffers are kept.)
                inbox.release_above(KEEP_BETWEEN_REQUESTS);
                answer.release_above(KEEP_BETWEEN_REQUESTS);
            }
            end.recorder().hand_over();
        };
        // The accept loop holds a clone of this socket (to unblock it on shutdown), so dropping
        // ours would not close it: shut it down explicitly so the peer sees the close now.
        let _ = end.stream.shutdown(Shutdown::Both);
        end.note(req, EventKind::Closed);
        result
    }
}

/// A read that gave up at the socket's timeout.
fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Waits between failed accepts: 10 ms, doubling to 1 s, back to none once a connection is
/// served. An accept that succeeds is no sign the episode is over: out of descriptors, it often
/// takes the last one, and the connection, which needs a second, is dropped. Each episode is
/// logged once as it begins and once as it ends, however many connections it dropped.
#[derive(Default)]
struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    const LONGEST_WAIT: Duration = Duration::from_secs(1);

    /// `what` failed with `error`: waits before the next accept.
    fn failed(&mut self, what: &str, error: &io::Error) {
        if self.failures == 0 {
            tracing::warn!(
                "echo server {what} ({error}); until a connection can be served again, \
                 connections wait or are closed, and the server waits longer between accepts, \
                 up to {} s (raise the open files limit, `ulimit -n`, or lower \
                 --max-connections)",
                Self::LONGEST_WAIT.as_secs()
            );
        }
        let wait = Duration::from_millis(10 << self.failures.min(7)).min(Self::LONGEST_WAIT);
        self.failures = self.failures.saturating_add(1);
        thread::sleep(wait);
    }

    fn served(&mut self) {
        if self.failures > 0 {
            tracing::info!(
                "echo server serving connections again, after {} failed accepts",
                self.failures
            );
            self.failures = 0;
        }
    }
}

fn eof_in_body(peer: SocketAddr, len: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("echo server: {peer} closed before sending the {len}-byte body it announced"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::Ipv4Addr;
    use std::sync::mpsc::sync_channel;
    use std::time::Duration;

    use crate::net::XOR_KEY;

    fn config(max_body_bytes: u32) -> EchoConfig {
        EchoConfig {
            opts: SideOptions { side_name: "server", nodelay: true, ..SideOptions::default() },
            max_body_bytes,
            response_bytes: None,
            think: Duration::ZERO,
            instruments: Instruments::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: None,
        }
    }

    fn echo_once(stream: &mut TcpStream, body: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(&(body.len() as u32).to_be_bytes())?;
        stream.write_all(body)?;
        let mut prefix = [0u8; 4];
        stream.read_exact(&mut prefix)?;
        let mut answer = vec![0u8; u32::from_be_bytes(prefix) as usize];
        stream.read_exact(&mut answer)?;
        Ok(answer)
    }

    fn loopback() -> SocketAddr {
        (Ipv4Addr::LOCALHOST, 0).into()
    }

    /// What a listener that is not on loopback asks of echo clients (`EchoAccess::Token`; the
    /// address itself is loopback here, so the test needs no other network).
    #[test]
    fn a_server_that_asks_for_the_token_answers_only_the_clients_that_give_it() {
        let token: Arc<str> = Arc::from("the-servers-token-0123456789");
        let server = EchoServer::start(
            loopback(),
            config(1024),
            Clock::start(),
            Tagging::standalone(None, EchoAccess::Token(Arc::clone(&token))),
            None,
        )
        .unwrap();
        let connect = || {
            let stream = TcpStream::connect(server.addr()).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            stream
        };
        // What a refused client reads: one line, then the close (the message it sent unread).
        let refusal = |mut stream: TcpStream| {
            stream.write_all(&5u32.to_be_bytes()).unwrap();
            stream.write_all(b"hello").unwrap();
            let mut said = Vec::new();
            let _ = stream.read_to_end(&mut said);
            String::from_utf8_lossy(&said).into_owned()
        };

        let said = refusal(connect());
        assert!(said.starts_with("ackscope: this server is not on loopback"), "{said}");
        assert!(said.contains("ACKT, the token it printed and a newline"), "{said}");

        let mut wrong = connect();
        wrong.write_all(b"ACKTnot-the-token\n").unwrap();
        let said = refusal(wrong);
        assert!(said.starts_with("ackscope: wrong token"), "{said}");

        let mut right = connect();
        right.write_all(format!("ACKT{token}\r\n").as_bytes()).unwrap();
        for body in [&b"hello"[..], b"again"] {
            let answer = echo_once(&mut right, body).unwrap();
            let expected: Vec<u8> = body.iter().map(|b| b ^ XOR_KEY).collect();
            assert_eq!(answer, expected, "served like any echo client after the token");
        }
    }

    #[test]
    fn a_length_over_the_cap_closes_that_connection_and_the_server_serves_on() {
        let (sink, _events) = sync_channel(64);
        let server = EchoServer::start(
            loopback(),
            config(1024),
            Clock::start(),
            Tagging::standalone(None, EchoAccess::Open(None)),
            Some(sink),
        )
        .unwrap();
        let mut greedy = TcpStream::connect(server.addr()).unwrap();
        let mut polite = TcpStream::connect(server.addr()).unwrap();
        greedy.set_read_timeout(Some(Duration::from_secs(10))).unwrap();

        greedy.write_all(&u32::MAX.to_be_bytes()).unwrap();
        let mut rest = Vec::new();
        let closed = greedy.read_to_end(&mut rest);
        assert!(
            matches!(closed, Ok(0)) || closed.is_err(),
            "the over-cap connection is closed without an answer: {closed:?} {rest:?}"
        );

        let answer = echo_once(&mut polite, b"hello").unwrap();
        let expected: Vec<u8> = b"hello".iter().map(|b| b ^ XOR_KEY).collect();
        assert_eq!(answer, expected);
        let mut fresh = TcpStream::connect(server.addr()).unwrap();
        assert_eq!(echo_once(&mut fresh, &[0u8; 1024]).unwrap(), vec![XOR_KEY; 1024]);
        drop((polite, fresh));
        server.shutdown();
    }

    #[test]
    fn the_over_cap_error_names_the_peer_the_length_and_the_cap() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        client.write_all(&5000u32.to_be_bytes()).unwrap();
        let config = config(4096);
        let tagging = Tagging::standalone(None, EchoAccess::Open(None));
        let connection = Connection { peer, tag: None, tagging: &tagging, config: &config };
        let mut recorder = Recorder::discarding(Clock::start(), Side::Server);
        let err = connection.serve(accepted, ConnId(0), &mut recorder).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&peer.to_string()), "{message}");
        assert!(message.contains("5000") && message.contains("4096-byte cap"), "{message}");
    }

    #[test]
    fn answers_can_be_longer_or_shorter_than_requests() {
        let mut long = config(1024);
        long.response_bytes = Some(7);
        let server = EchoServer::start(
            loopback(),
            long,
            Clock::start(),
            Tagging::standalone(None, EchoAccess::Open(None)),
            None,
        )
        .unwrap();
        let mut client = TcpStream::connect(server.addr()).unwrap();
        let answer = echo_once(&mut client, b"abc").unwrap();
        let expected: Vec<u8> = b"abcabca".iter().map(|b| b ^ XOR_KEY).collect();
        assert_eq!(answer, expected);
        drop(client);
        server.shutdown();
    }
}
