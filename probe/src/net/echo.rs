//! The echo server: the other end of every request/response experiment.
//!
//! One thread accepts; each connection gets its own thread running blocking reads and writes, so
//! every recorded wait is the kernel's, not a scheduler's. Protocol: docs/PROTOCOL.md.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use ackscope_shared::{Event, EventKind, ReqId, Side};

use super::peers::{ConnTag, Peers};
use super::record::{Clock, Recorder};
use super::{context, xor_in_place, LENGTH_PREFIX_BYTES};

#[derive(Clone, Copy, Debug)]
pub struct EchoConfig {
    /// TCP_NODELAY on accepted connections.
    pub nodelay: bool,
    /// Length prefixes above this close the connection (bounds the body buffer).
    pub max_body_bytes: u32,
}

/// Connection threads still running, each with a clone of its socket to shut it down on stop.
type OpenConnections = Arc<Mutex<Vec<(TcpStream, JoinHandle<()>)>>>;

/// A running echo server on 127.0.0.1. [`EchoServer::shutdown`] stops it and waits for every
/// connection thread, so that all their events have been handed over.
pub struct EchoServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    accept_thread: Option<JoinHandle<()>>,
    connections: OpenConnections,
}

impl EchoServer {
    /// Listens on an ephemeral loopback port.
    pub fn start(
        config: EchoConfig,
        clock: Clock,
        peers: Arc<Peers>,
        sink: SyncSender<Vec<Event>>,
    ) -> io::Result<EchoServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| context(e, "echo server bind on 127.0.0.1"))?;
        let addr = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let accept_thread = {
            let stopping = Arc::clone(&stopping);
            let connections = Arc::clone(&connections);
            thread::Builder::new()
                .name("echo-accept".into())
                .spawn(move || {
                    accept_loop(
                        listener,
                        config,
                        clock,
                        &peers,
                        &sink,
                        &stopping,
                        &connections,
                    )
                })?
        };
        Ok(EchoServer {
            addr,
            stopping,
            accept_thread: Some(accept_thread),
            connections,
        })
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
        // accept() has no timeout: a connection of our own wakes it to see the flag.
        let _ = TcpStream::connect(self.addr);
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn accept_loop(
    listener: TcpListener,
    config: EchoConfig,
    clock: Clock,
    peers: &Peers,
    sink: &SyncSender<Vec<Event>>,
    stopping: &AtomicBool,
    connections: &OpenConnections,
) {
    loop {
        let accepted = listener.accept();
        let accepted_ns = clock.now_ns();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("echo server accept on {}: {e}", listener_addr(&listener));
                continue;
            }
        };
        // Connections this run did not make are served but not recorded.
        let (tag, mut recorder) = match peers.take(peer.port()) {
            Some(tag) => (tag, Recorder::new(clock, Side::Server, sink.clone())),
            None => (ConnTag::UNKNOWN, Recorder::discarding(clock, Side::Server)),
        };
        recorder.record(accepted_ns, tag.conn, tag.first_req, EventKind::Accepted);
        let Ok(watch) = stream.try_clone() else {
            continue;
        };
        let spawned = thread::Builder::new()
            .name("echo-conn".into())
            .spawn(move || {
                if let Err(e) = serve_connection(stream, peer, tag, config, recorder) {
                    tracing::warn!("{e}");
                }
            });
        match spawned {
            Ok(handle) => {
                let mut open = lock(connections);
                // Forget threads that already ended so that long runs with reconnects stay small.
                let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *open)
                    .into_iter()
                    .partition(|(_, h)| h.is_finished());
                for (_, handle) in done {
                    let _ = handle.join();
                }
                *open = running;
                open.push((watch, handle));
            }
            Err(e) => tracing::warn!("echo server could not start a connection thread: {e}"),
        }
    }
}

fn listener_addr(listener: &TcpListener) -> String {
    listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Answers requests until the peer closes.
fn serve_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    tag: ConnTag,
    config: EchoConfig,
    mut rec: Recorder,
) -> io::Result<()> {
    stream
        .set_nodelay(config.nodelay)
        .map_err(|e| context(e, "set TCP_NODELAY"))?;
    let conn = tag.conn;
    let mut body = Vec::new();
    let mut req = tag.first_req;
    let result = loop {
        let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
        match rec.read_exact(&mut stream, conn, req, &mut prefix) {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(context(e, format!("echo server read from {peer}"))),
        }
        let len = u32::from_be_bytes(prefix);
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
        // Bounded by the cap just checked.
        body.resize(len as usize, 0);
        match rec.read_exact(&mut stream, conn, req, &mut body) {
            Ok(true) => {}
            Ok(false) => break Err(eof_in_body(peer, len)),
            Err(e) => break Err(context(e, format!("echo server read from {peer}"))),
        }
        xor_in_place(&mut body);
        if let Err(e) = rec
            .write_all(&mut stream, conn, req, &prefix)
            .and_then(|()| rec.write_all(&mut stream, conn, req, &body))
        {
            break Err(context(e, format!("echo server write to {peer}")));
        }
        rec.flush();
        req = ReqId(req.0.saturating_add(1));
    };
    // The accept loop holds a clone of this socket (to unblock it on shutdown), so dropping ours
    // would not close it: shut it down explicitly so the peer sees the close now.
    let _ = stream.shutdown(Shutdown::Both);
    drop(stream);
    let closed_ns = rec.now_ns();
    rec.record(closed_ns, conn, req, EventKind::Closed);
    result
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
    use std::sync::mpsc::sync_channel;
    use std::time::Duration;

    use crate::net::XOR_KEY;

    fn echo_once(stream: &mut TcpStream, body: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(&(body.len() as u32).to_be_bytes())?;
        stream.write_all(body)?;
        let mut prefix = [0u8; 4];
        stream.read_exact(&mut prefix)?;
        let mut answer = vec![0u8; u32::from_be_bytes(prefix) as usize];
        stream.read_exact(&mut answer)?;
        Ok(answer)
    }

    #[test]
    fn a_length_over_the_cap_closes_that_connection_and_the_server_serves_on() {
        let (sink, _events) = sync_channel(64);
        let config = EchoConfig {
            nodelay: true,
            max_body_bytes: 1024,
        };
        let server =
            EchoServer::start(config, Clock::start(), Arc::new(Peers::default()), sink).unwrap();
        let mut greedy = TcpStream::connect(server.addr()).unwrap();
        let mut polite = TcpStream::connect(server.addr()).unwrap();
        greedy
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();

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
        assert_eq!(
            echo_once(&mut fresh, &[0u8; 1024]).unwrap(),
            vec![XOR_KEY; 1024]
        );
        drop((polite, fresh));
        server.shutdown();
    }

    #[test]
    fn the_over_cap_error_names_the_peer_the_length_and_the_cap() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        client.write_all(&5000u32.to_be_bytes()).unwrap();
        let config = EchoConfig {
            nodelay: false,
            max_body_bytes: 4096,
        };
        let recorder = Recorder::discarding(Clock::start(), Side::Server);
        let err = serve_connection(accepted, peer, ConnTag::UNKNOWN, config, recorder).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&peer.to_string()), "{message}");
        assert!(
            message.contains("5000") && message.contains("4096-byte cap"),
            "{message}"
        );
    }
}
