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
/// How long a new connection has to send its first request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

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
            let deadline = Some(Box::pin(tokio::time::sleep(HEADER_TIMEOUT)));
            let guarded = Guarded { stream, deadline, matched: 0, open: Arc::clone(&self.open) };
            return (guarded, addr);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that ends if its first request's headers have not all come by its deadline.
pub struct Guarded {
    stream: TcpStream,
    /// `None` once the headers' end (an empty line) has been read.
    deadline: Option<Pin<Box<Sleep>>>,
    /// How much of "\r\n\r\n" the bytes read so far end with.
    matched: usize,
    open: Arc<AtomicUsize>,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

const HEADERS_END: &[u8; 4] = b"\r\n\r\n";

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = &mut this.deadline {
            if deadline.as_mut().poll(cx).is_ready() {
                let message = format!("no request headers within {} s", HEADER_TIMEOUT.as_secs());
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)));
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if this.deadline.is_some() {
            for &byte in &buf.filled()[before..] {
                this.matched = match byte {
                    b if b == HEADERS_END[this.matched] => this.matched + 1,
                    b'\r' => 1,
                    _ => 0,
                };
                if this.matched == HEADERS_END.len() {
                    this.deadline = None;
                    break;
                }
            }
        }
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
