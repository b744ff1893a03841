//! Bulk transfer: the client writes as fast as the connection takes bytes, the server reads and
//! discards them. Every write and read is recorded, so goodput over time and the windows can be
//! read from the events.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ackscope_shared::{BulkSpec, ConnId, EventKind, ReqId, Side};
use socket2::{Domain, Protocol, Socket, Type};

use super::context;
use super::endpoint::{Endpoint, KernelProbe};
use super::options::SideOptions;
use super::record::Recorder;
use ackscope_shared::wire::Instruments;

/// How long the client's wait for the server's close blocks before it looks at `stop` again.
const CLOSE_WAIT_SLICE: Duration = Duration::from_millis(200);

/// The whole transfer is one "request" of the run.
pub const TRANSFER: ReqId = ReqId(0);
pub const CONN: ConnId = ConnId(0);

/// A listener on `ip` with the server side's buffers set before `listen()`, so the accepted
/// socket inherits them (and the window scale they need).
pub fn listen(spec: &BulkSpec, ip: Ipv4Addr) -> io::Result<TcpListener> {
    let opts = SideOptions::bulk(spec, Side::Server);
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| context(e, "bulk server socket"))?;
    opts.apply_before_handshake(&socket)?;
    let addr: SocketAddr = SocketAddrV4::new(ip, 0).into();
    socket.bind(&addr.into()).map_err(|e| context(e, format!("bulk server bind on {ip}")))?;
    socket.listen(1).map_err(|e| context(e, "bulk server listen"))?;
    Ok(socket.into())
}

/// Accepts the client's connection (the one from `client_port`) and reads until it closes.
pub fn serve(
    spec: &BulkSpec,
    instruments: Instruments,
    listener: TcpListener,
    client_port: u16,
    stop: &AtomicBool,
    rec: &mut Recorder,
) -> io::Result<u64> {
    let stream = loop {
        let (stream, peer) = listener.accept().map_err(|e| context(e, "bulk server accept"))?;
        if peer.port() == client_port {
            break stream;
        }
    };
    serve_accepted(spec, instruments, stream, stop, rec)
}

/// Reads the transfer from its accepted connection until the client closes. Once `stop` is
/// set, or the spec's duration has passed since the connection was accepted, a slow reader
/// stops pausing, so that the rest is read at once and the run ends when it should.
pub fn serve_accepted(
    spec: &BulkSpec,
    instruments: Instruments,
    mut stream: TcpStream,
    stop: &AtomicBool,
    rec: &mut Recorder,
) -> io::Result<u64> {
    let opts = SideOptions::bulk(spec, Side::Server);
    rec.record(rec.now_ns(), CONN, TRANSFER, EventKind::Accepted);
    let mut buffer = vec![0u8; spec.app_buffer_bytes as usize];
    let kernel = KernelProbe::start(instruments, &stream, rec, CONN);
    let mut end = Endpoint::new(&mut stream, CONN, &opts, rec, &kernel);
    end.record_buffers(TRANSFER)?;
    let mut received = 0u64;
    let pause = Duration::from_micros(u64::from(spec.read_pause_us));
    let deadline = spec.duration_ms.map(|ms| Instant::now() + Duration::from_millis(u64::from(ms)));
    loop {
        // A slow reader: the data waits in the receive buffer meanwhile, and the window the
        // server advertises shrinks, to zero once the buffer is full.
        if received > 0 && !pause.is_zero() {
            pause_unless_stopped(pause, stop, deadline);
        }
        match end.read(TRANSFER, &mut buffer) {
            Ok(0) => break,
            Ok(n) => received += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(context(e, "bulk server read")),
        }
    }
    let _ = end.stream.shutdown(Shutdown::Both);
    end.note(TRANSFER, EventKind::Closed);
    Ok(received)
}

/// Sleeps for `pause`, or until `stop` is set or `deadline` passes: checked every 20 ms, so
/// that Ctrl-C or `--duration` ends a run whose reader pauses for seconds.
fn pause_unless_stopped(pause: Duration, stop: &AtomicBool, deadline: Option<Instant>) {
    const SLICE: Duration = Duration::from_millis(20);
    let until = Instant::now() + pause;
    let until = deadline.map_or(until, |deadline| until.min(deadline));
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        thread::sleep(left.min(SLICE));
    }
}

/// A client socket bound to `ip`, not yet connected: its port tells the server which
/// connection is the run's.
pub fn client_socket(spec: &BulkSpec, ip: Ipv4Addr) -> io::Result<(Socket, u16)> {
    let opts = SideOptions::bulk(spec, Side::Client);
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| context(e, "bulk client socket"))?;
    opts.apply_before_handshake(&socket)?;
    socket
        .bind(&SocketAddrV4::new(ip, 0).into())
        .map_err(|e| context(e, format!("bulk client bind on {ip}")))?;
    let port = socket.local_addr()?.as_socket().map_or(0, |a| a.port());
    Ok((socket, port))
}

/// Sends `spec.bytes` (or until the deadline or `stop`), then closes its side and waits for the
/// server to finish reading.
pub fn send(
    spec: &BulkSpec,
    instruments: Instruments,
    socket: Socket,
    server: SocketAddr,
    deadline: Option<Instant>,
    stop: &AtomicBool,
    rec: &mut Recorder,
) -> io::Result<u64> {
    let opts = SideOptions::bulk(spec, Side::Client);
    rec.record(rec.now_ns(), CONN, TRANSFER, EventKind::RequestStart);
    let start_ns = rec.now_ns();
    socket
        .connect(&server.into())
        .map_err(|e| context(e, format!("bulk client connect to {server}")))?;
    let done_ns = rec.now_ns();
    rec.record(start_ns, CONN, TRANSFER, EventKind::ConnectStart);
    rec.record(done_ns, CONN, TRANSFER, EventKind::Connected);
    let mut stream: TcpStream = socket.into();
    let buffer: Vec<u8> = (0..spec.app_buffer_bytes as usize).map(|i| (i % 251) as u8).collect();
    let kernel = KernelProbe::start(instruments, &stream, rec, CONN);
    let mut end = Endpoint::new(&mut stream, CONN, &opts, rec, &kernel);
    end.record_buffers(TRANSFER)?;
    let mut sent = 0u64;
    while sent < spec.bytes
        && !stop.load(Ordering::Relaxed)
        && deadline.is_none_or(|d| Instant::now() < d)
    {
        let chunk = (spec.bytes - sent).min(buffer.len() as u64) as usize;
        match end.write(TRANSFER, &buffer[..chunk]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(context(e, "bulk client write")),
        }
        end.recorder().hand_over();
    }
    // Half-close, then wait for the server's close: the transfer is done when it has read all.
    // The wait is recorded reads, so TCP_INFO is sampled while they block (what the send buffer
    // still held goes out meanwhile, and a slow reader's closed window and the probes of it are
    // seen to the end), each bounded so that Ctrl-C is seen while a slow reader across hosts
    // drains the buffers (a remote server stops pausing only when told the run stopped).
    end.stream.shutdown(Shutdown::Write).map_err(|e| context(e, "bulk client shutdown"))?;
    end.stream.set_read_timeout(Some(CLOSE_WAIT_SLICE))?;
    let mut rest = [0u8; 64];
    loop {
        match end.read(TRANSFER, &mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if stop.load(Ordering::Relaxed) {
                    // Interrupted: the outcome says so; what was read is all recorded.
                    return Ok(sent);
                }
            }
            Err(e) => return Err(context(e, "bulk client waiting for the close")),
        }
    }
    end.note(TRANSFER, EventKind::RequestDone);
    end.note(TRANSFER, EventKind::Closed);
    Ok(sent)
}
