//! The UI's listener, bounded: at most [`MAX_CONNECTIONS`] connections at once, and each must
//! send its first request's headers within [`HEADER_TIMEOUT`]. Without these, connections that
//! open and send nothing (1,000 half-open ones were held) would each keep a task and a
//! descriptor for ever.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// Connections served at once; one more is closed as it is accepted. Every tab holds one
/// WebSocket and a few page requests; a class's room holds up to its students'.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a new connection has to send its first request's headers, and a kept-alive one
/// the rest of a request's headers after their first byte.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The part of a request's headers kept to see whether it asks for a WebSocket (a browser's
/// handshake is under 1 KiB). Past it a request is taken as an ordinary one.
const HEAD_KEPT: usize = 8 * 1024;

pub struct GuardedListener {
    inner: TcpListener,
    open: Arc<AtomicUsize>,
}

impl GuardedListener {
    pub fn new(inner: TcpListener) -> GuardedListener {
        GuardedListener { inner, open: Arc::default() }
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = Guarded;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Guarded, SocketAddr) {
        loop {
            let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            let open = self.open.load(Ordering::Relaxed);
            if open >= MAX_CONNECTIONS {
                tracing::warn!(
                    "closed the connection from {addr} at once: {open} are open, the most the \
                     UI serves"
                );
                continue;
            }
            self.open.fetch_add(1, Ordering::Relaxed);
            let guarded = Guarded {
                stream,
                state: State::Head { deadline: Box::pin(tokio::time::sleep(HEADER_TIMEOUT)) },
                head: Vec::new(),
                matched: 0,
                open: Arc::clone(&self.open),
            };
            return (guarded, addr);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that ends if a request's headers have not all come by their deadline.
pub struct Guarded {
    stream: TcpStream,
    state: State,
    /// The start of the request's headers being read (up to [`HEAD_KEPT`] bytes).
    head: Vec<u8>,
    /// How much of "\r\n\r\n" the bytes read so far end with.
    matched: usize,
    open: Arc<AtomicUsize>,
}

enum State {
    /// Reading a request's headers, which must end (an empty line) by the deadline.
    Head { deadline: Pin<Box<Sleep>> },
    /// Between requests of a kept-alive connection: the next byte starts a request's headers.
    Between,
    /// A WebSocket: its frames are not HTTP.
    Upgraded,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

const HEADERS_END: &[u8; 4] = b"\r\n\r\n";

impl Guarded {
    /// Follows the request headers through `bytes`, just read.
    fn follow(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            match self.state {
                State::Upgraded => return,
                State::Between => {
                    self.state =
                        State::Head { deadline: Box::pin(tokio::time::sleep(HEADER_TIMEOUT)) };
                    self.head.clear();
                    self.matched = 0;
                }
                State::Head { .. } => {}
            }
            if self.head.len() < HEAD_KEPT {
                self.head.push(byte);
            }
            self.matched = match byte {
                b if b == HEADERS_END[self.matched] => self.matched + 1,
                b'\r' => 1,
                _ => 0,
            };
            if self.matched == HEADERS_END.len() {
                self.state =
                    if asks_for_websocket(&self.head) { State::Upgraded } else { State::Between };
            }
        }
    }
}

/// The request's headers have `Upgrade: websocket`.
fn asks_for_websocket(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).split("\r\n").any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("upgrade")
                && value.to_ascii_lowercase().contains("websocket")
        })
    })
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let State::Head { deadline } = &mut this.state {
            if deadline.as_mut().poll(cx).is_ready() {
                let message = format!("no request headers within {} s", HEADER_TIMEOUT.as_secs());
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)));
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        this.follow(&buf.filled()[before..]);
        polled
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::asks_for_websocket;

    #[test]
    fn a_websocket_handshake_is_told_from_an_ordinary_request() {
        let ws =
            b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUPGRADE:  WebSocket\r\n\r\n";
        assert!(asks_for_websocket(ws));
        let page = b"GET / HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n";
        assert!(!asks_for_websocket(page));
        assert!(!asks_for_websocket(b"GET /websocket HTTP/1.1\r\nX-Upgrade-Note: no\r\n\r\n"));
    }
}
