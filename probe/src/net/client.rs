//! The request/response client: story 1's client, instrumented. One thread per concurrent
//! connection; the threads of a run share the request counter, so ids are unique and dense.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use ackscope_shared::spec::MAX_BODY_BYTES;
use ackscope_shared::{ConnId, EventKind, ReqId, RrSpec, Side};
use socket2::{Domain, Protocol, Socket, Type};

use super::endpoint::{Endpoint, Inbox, KernelProbe};
use super::options::SideOptions;
use super::peers::{ConnTag, Peers};
use super::record::Recorder;
use super::{answer_into, context, Message, LENGTH_PREFIX_BYTES};
use ackscope_shared::wire::Instruments;

/// What the client threads of one run share.
pub struct Shared<'a> {
    pub spec: &'a RrSpec,
    pub server: SocketAddr,
    /// The address client sockets bind to: loopback, or the client's end of an emulated link.
    pub bind: Ipv4Addr,
    pub peers: &'a Peers,
    pub next_req: AtomicU32,
    pub next_conn: AtomicU32,
    /// Requests answered, counted apart from the events (which may be off).
    pub completed: AtomicU32,
    /// No new requests after this.
    pub deadline: Option<Instant>,
    /// Set when any thread fails: the others stop after their request.
    pub stop: &'a AtomicBool,
    /// Set by Ctrl-C: every thread stops after its request.
    pub user_stop: &'a AtomicBool,
    pub instruments: Instruments,
}

impl<'a> Shared<'a> {
    /// A run's client threads, about to start: no request or connection taken yet, the
    /// deadline (`spec.duration_ms`) from now.
    pub fn new(
        spec: &'a RrSpec,
        server: SocketAddr,
        bind: Ipv4Addr,
        peers: &'a Peers,
        stop: &'a AtomicBool,
        user_stop: &'a AtomicBool,
        instruments: Instruments,
    ) -> Shared<'a> {
        let deadline = spec
            .duration_ms
            .map(|ms| Instant::now() + std::time::Duration::from_millis(u64::from(ms)));
        Shared {
            spec,
            server,
            bind,
            peers,
            next_req: AtomicU32::new(0),
            next_conn: AtomicU32::new(0),
            completed: AtomicU32::new(0),
            deadline,
            stop,
            user_stop,
            instruments,
        }
    }

    /// The next request's id, or `None` when the run is over.
    fn take_request(&self) -> Option<ReqId> {
        let stopped = self.stop.load(Ordering::Relaxed) || self.user_stop.load(Ordering::Relaxed);
        if stopped || self.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let id = self.next_req.fetch_add(1, Ordering::Relaxed);
        (id < self.spec.requests).then_some(ReqId(id))
    }
}

/// One client thread: requests until the run is over. Stops at the first error; everything
/// recorded before it has been handed to the recorder's sink.
pub fn run(shared: &Shared, rec: &mut Recorder) -> io::Result<()> {
    let spec = shared.spec;
    let server = shared.server;
    let opts = SideOptions::rr(spec, Side::Client);
    // The request body: a recognisable pattern, so a wrong echo is caught below.
    let body: Vec<u8> = (0..spec.size_bytes as usize).map(|i| (i % 251) as u8).collect();
    let mut expected = Vec::new();
    answer_into(&body, spec.response_size(), &mut expected);
    let request = Message::of(&body)?;
    // Sized for the whole answer: when it is all there, one read takes it.
    let mut inbox = Inbox::with_capacity(LENGTH_PREFIX_BYTES + spec.response_size() as usize);

    let mut open: Option<(TcpStream, ConnTag, KernelProbe)> = None;
    let mut index_on_thread = 0u32;
    let mut last_req = ReqId(0);
    while let Some(req) = shared.take_request() {
        let reconnect = spec.connects_before(index_on_thread);
        if reconnect {
            if let Some((stream, tag, kernel)) = open.take() {
                close(stream, kernel, tag.conn, last_req, rec);
            }
        }
        // The request's start, also the time it is announced to the server and the capture.
        let started_ns = rec.now_ns();
        if reconnect {
            let conn = ConnId(shared.next_conn.fetch_add(1, Ordering::Relaxed));
            rec.record(started_ns, conn, req, EventKind::RequestStart);
            let (stream, tag) = connect(shared, &opts, ConnTag::new(conn), req, rec)?;
            let kernel = KernelProbe::start(shared.instruments, &stream, rec, conn);
            open = Some((stream, tag, kernel));
        } else if let Some((_, tag, _)) = &open {
            rec.record(started_ns, tag.conn, req, EventKind::RequestStart);
        }
        index_on_thread += 1;
        last_req = req;
        let (stream, tag, kernel) = open.as_mut().expect("connects_before(0) opened a connection");
        tag.announce(req, started_ns);
        let mut end = Endpoint::new(stream, tag.conn, &opts, rec, kernel);
        let what = |step: &str| format!("request {}: client {step} on {server}", req.0);
        end.write_message(req, &request).map_err(|e| context(e, what("write")))?;
        let Some(answer_len) =
            end.read_prefix(req, &mut inbox, false).map_err(|e| context(e, what("read")))?
        else {
            return Err(closed_by_server(req, server));
        };
        if answer_len != spec.response_size() || answer_len > MAX_BODY_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "request {}: the server on {server} announced a {answer_len}-byte answer, \
                     {} bytes were expected; is it an ackscope echo server?",
                    req.0,
                    spec.response_size()
                ),
            ));
        }
        let response =
            end.read_body(req, &mut inbox, answer_len).map_err(|e| context(e, what("read")))?;
        let answered = response == expected.as_slice();
        end.note(req, EventKind::RequestDone);
        shared.completed.fetch_add(1, Ordering::Relaxed);
        rec.hand_over();
        if !answered {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("request {}: the answer from {server} is not the XORed request", req.0),
            ));
        }
    }
    if let Some((stream, tag, kernel)) = open {
        close(stream, kernel, tag.conn, last_req, rec);
    }
    rec.flush();
    Ok(())
}

/// Opens a connection, registering its port first so the server can tag its side alike.
fn connect(
    shared: &Shared,
    opts: &SideOptions,
    tag: ConnTag,
    req: ReqId,
    rec: &mut Recorder,
) -> io::Result<(TcpStream, ConnTag)> {
    let (server, bind) = (shared.server, shared.bind);
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| context(e, "client socket"))?;
    opts.apply_before_handshake(&socket)?;
    socket
        .bind(&SocketAddrV4::new(bind, 0).into())
        .map_err(|e| context(e, format!("client bind on {bind}")))?;
    let port = socket
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("client socket has no IP address"))?;
    shared.peers.register(port, tag.clone());
    let start_ns = rec.now_ns();
    let connected = socket.connect(&server.into());
    let done_ns = rec.now_ns();
    connected.map_err(|e| context(e, format!("client connect to {server}")))?;
    rec.record(start_ns, tag.conn, req, EventKind::ConnectStart);
    rec.record(done_ns, tag.conn, req, EventKind::Connected);
    let mut stream: TcpStream = socket.into();
    Endpoint::new(&mut stream, tag.conn, opts, rec, &KernelProbe::off()).record_buffers(req)?;
    Ok((stream, tag))
}

/// Closes a connection. The sampler holds a duplicate descriptor: it goes first, so that dropping
/// the stream really closes the socket.
fn close(
    stream: TcpStream,
    kernel: KernelProbe,
    conn: ConnId,
    last_req: ReqId,
    rec: &mut Recorder,
) {
    drop(kernel);
    drop(stream);
    rec.record(rec.now_ns(), conn, last_req, EventKind::Closed);
}

fn closed_by_server(req: ReqId, server: SocketAddr) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("request {}: the server on {server} closed the connection before answering", req.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc::sync_channel;

    use ackscope_shared::wire::Instruments;

    use crate::net::record::Clock;

    /// A peer that answers `answers` requests, then resets the connection (SO_LINGER 0) once the
    /// next request's length has arrived.
    fn resetting_peer(answers: usize) -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            for _ in 0..answers {
                let mut prefix = [0u8; 4];
                stream.read_exact(&mut prefix).unwrap();
                let mut body = vec![0u8; u32::from_be_bytes(prefix) as usize];
                stream.read_exact(&mut body).unwrap();
                let mut answer = Vec::new();
                answer_into(&body, body.len() as u32, &mut answer);
                stream.write_all(&prefix).unwrap();
                stream.write_all(&answer).unwrap();
            }
            let mut prefix = [0u8; 4];
            stream.read_exact(&mut prefix).unwrap();
            socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO)).unwrap();
        });
        addr
    }

    #[test]
    fn a_peer_that_resets_mid_run_ends_it_with_an_error_and_keeps_what_was_recorded() {
        let server = resetting_peer(3);
        let spec = RrSpec {
            requests: 10,
            nodelay: ackscope_shared::PerSide::both(true),
            ..RrSpec::default()
        };
        let stop = AtomicBool::new(false);
        let shared = Shared {
            spec: &spec,
            server,
            bind: Ipv4Addr::LOCALHOST,
            peers: &Peers::default(),
            next_req: AtomicU32::new(0),
            next_conn: AtomicU32::new(0),
            completed: AtomicU32::new(0),
            deadline: None,
            stop: &stop,
            user_stop: &AtomicBool::new(false),
            instruments: Instruments {
                tcp_info_at_syscalls: false,
                tcp_info_interval_us: 0,
                ..Instruments::default()
            },
        };
        let (sink, batches) = sync_channel(1024);
        let mut rec = Recorder::new(Clock::start(), Side::Client, sink);
        let error = run(&shared, &mut rec).unwrap_err().to_string();
        drop(rec);
        assert!(error.contains("request 3"), "the error names the request: {error}");
        let events: Vec<_> = batches.iter().flatten().collect();
        let done = events.iter().filter(|e| e.kind == EventKind::RequestDone).count();
        assert_eq!(done, 3, "the three answered requests are kept");
        assert!(events.iter().any(|e| e.req == ReqId(3)), "so is what request 3 did");
    }
}
