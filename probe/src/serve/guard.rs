//! The UI's listener, bounded so that no client can hold the server, or lock its pages out, by
//! what it sends or leaves unsent.
//!
//! **Deadlines.** Every connection is under a deadline until it is a WebSocket, and it is one
//! only once its handshake was answered `101`, as seen in the bytes written back: a handshake
//! that was refused got an ordinary answer, and its connection stays under the deadlines.
//! - A request's headers must all come within [`HEADER_TIMEOUT`] of the connection's opening,
//!   or of the request's first byte on a kept-alive connection.
//! - Its answer must be written within [`REQUEST_TIMEOUT`] of then.
//! - Once every request's answer is begun, a connection that moves no byte for
//!   [`IDLE_TIMEOUT`] is closed (a kept-alive one with no next request), or for
//!   [`STALLED_WRITE_TIMEOUT`] while an answer waits for the client to read it.
//!
//! **Places.** Connections not yet upgraded (a page's files, a handshake being answered, and
//! anyone who only connects) have places apart from the WebSockets': a flood needs no room code
//! and no Origin to connect, so it can fill only the first, and there a new connection closes
//! the oldest instead of being refused. A student or the presenter connecting during a flood is
//! let in; once upgraded (which takes the room code, or the page's Origin) its WebSocket is out
//! of the flood's reach. A class's room bounds its own pages within the WebSockets' places, and
//! keeps one for the presenter (see `room`). The cost: a flood that opens more connections than
//! there are places in the time a page's request takes closes that request before its answer,
//! and the page connects again. Both kinds of places are taken from the descriptors
//! the process may open (its soft limit is raised towards what they need; see
//! [`descriptors_allowed`]), so that the places fill before the descriptors run out: out of
//! descriptors, the listener could accept nothing, and the flood would win.
//!
//! **Headers.** The HTTP library answers some requests itself, before any handler or
//! middleware sees them (400 to a malformed request, 414, 431 to too many or too large headers).
//! The listener adds the security headers to every answer's head that lacks any, as it is
//! written; the middleware sets them on the app's own answers.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// How long a request's headers may take: from a new connection's opening, or from the first
/// byte of a kept-alive connection's next request.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request may take from then until its answer is written: the page's largest file
/// (about 1 MB of WebAssembly) at 70 kbit/s.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a connection may move no byte once every request's answer is begun: a kept-alive
/// one with no next request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer may wait for the client to take its next bytes: a reader that stopped
/// reading, but also a lossy link, whose retransmissions back off for seconds.
pub const STALLED_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections not yet upgraded at most (fewer if descriptors are short); one more closes the
/// oldest. A page loads its files over a few connections; a class of 300 opening the page at
/// once needs up to a thousand.
pub const MAX_HTTP_CONNECTIONS: usize = 1024;
/// WebSockets at most (fewer if descriptors are short); a handshake past it is closed. Every
/// tab holds one; a class's room holds up to its pages' (`room::MAX_PAGES`).
pub const MAX_WEBSOCKETS: usize = 1024;
/// The most a request's headers may take (a browser's are a few hundred bytes to a few KiB).
/// The HTTP library's own limit is about 400 KiB a connection: held by each of the places for
/// connections not yet upgraded until its header deadline, that was 400 MiB.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Descriptors left to the rest of the process (a browser run's connections, its capture,
/// files) when the places are sized.
const OTHER_DESCRIPTORS: usize = 256;

/// The security headers, made once and shared by the middleware and every connection.
pub type SecurityHeaders = Arc<[(HeaderName, HeaderValue)]>;

/// The headers every answer carries: the page's Content-Security-Policy, no MIME sniffing,
/// framed only by its own origin, no Referer sent from it.
pub fn security_headers(content_security_policy: &str) -> SecurityHeaders {
    let mut headers = Vec::new();
    if let Ok(policy) = HeaderValue::from_str(content_security_policy) {
        headers.push((header::CONTENT_SECURITY_POLICY, policy));
    }
    headers.push((header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")));
    headers.push((header::X_FRAME_OPTIONS, HeaderValue::from_static("SAMEORIGIN")));
    headers.push((header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")));
    headers.into()
}

pub struct GuardedListener {
    inner: TcpListener,
    places: Arc<Places>,
    /// Connections accepted so far: each one's number, by which the oldest is found.
    accepted: u64,
    security_headers: SecurityHeaders,
}

/// The places of the connections being served, shared by the listener and its connections.
struct Places {
    /// Places for connections not yet upgraded.
    http_places: usize,
    /// Places for WebSockets.
    websocket_places: usize,
    /// The connections not yet upgraded, by number: the first is the oldest.
    http: Mutex<BTreeMap<u64, Arc<Slot>>>,
    websockets: AtomicUsize,
    /// Connections closed to make room, for the log.
    made_room: AtomicU64,
}

/// A connection's place among those not yet upgraded: the listener closes it to make room.
#[derive(Default)]
struct Slot {
    closed: AtomicBool,
    /// The task serving the connection, woken to see it was closed.
    waker: Mutex<Option<Waker>>,
}

impl Slot {
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(waker) = lock(&self.waker).take() {
            waker.wake();
        }
    }

    /// Whether the listener closed it; if it does later, `cx`'s task is woken.
    fn is_closed(&self, cx: &Context<'_>) -> bool {
        {
            let mut waker = lock(&self.waker);
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
        }
        self.closed.load(Ordering::SeqCst)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GuardedListener {
    /// The listener; every answer written through it carries `security_headers`.
    pub fn new(inner: TcpListener, security_headers: SecurityHeaders) -> GuardedListener {
        let wanted = MAX_HTTP_CONNECTIONS + MAX_WEBSOCKETS + OTHER_DESCRIPTORS;
        let allowed = descriptors_allowed(wanted);
        let each = allowed.saturating_sub(OTHER_DESCRIPTORS) / 2;
        let (http_places, websocket_places) =
            (MAX_HTTP_CONNECTIONS.min(each), MAX_WEBSOCKETS.min(each));
        if allowed < wanted {
            tracing::warn!(
                "this process may open {allowed} descriptors: the UI serves at most \
                 {websocket_places} pages and {http_places} other connections at once; raise \
                 `ulimit -n` to {wanted} for {MAX_WEBSOCKETS} and {MAX_HTTP_CONNECTIONS}"
            );
        }
        let places = Places {
            http_places,
            websocket_places,
            http: Mutex::default(),
            websockets: AtomicUsize::new(0),
            made_room: AtomicU64::new(0),
        };
        GuardedListener { inner, places: Arc::new(places), accepted: 0, security_headers }
    }
}

/// The descriptors this process may open, after raising its soft limit to `wanted` if it is
/// lower and the hard limit allows: a common default of 1,024 would run out before the places
/// fill. (The probe waits with `poll`, never `select`, so descriptors past 1,024 are safe.)
fn descriptors_allowed(wanted: usize) -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write only the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        let wanted = wanted as libc::rlim_t;
        if limit.rlim_cur < wanted {
            let raised = libc::rlimit { rlim_cur: wanted.min(limit.rlim_max), ..limit };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

impl axum::serve::Listener for GuardedListener {
    type Io = Guarded;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Guarded, SocketAddr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let number = self.accepted;
        self.accepted += 1;
        let slot = Arc::new(Slot::default());
        {
            let mut http = lock(&self.places.http);
            if http.len() >= self.places.http_places {
                if let Some((_, oldest)) = http.pop_first() {
                    oldest.close();
                    let made_room = self.places.made_room.fetch_add(1, Ordering::Relaxed) + 1;
                    if made_room == 1 || made_room % 1000 == 0 {
                        tracing::warn!(
                            "{} connections not yet upgraded are open, the most the UI keeps: \
                             closed the oldest to make room for a new one ({made_room} so far)",
                            self.places.http_places
                        );
                    }
                }
            }
            http.insert(number, Arc::clone(&slot));
        }
        let now = Instant::now();
        let guarded = Guarded {
            stream,
            // A new connection's first request is taken as begun when it opens.
            requests: 1,
            answers: 0,
            in_head: true,
            head_bytes: 0,
            matched: 0,
            websocket: false,
            request_began: now,
            last_written: now,
            write_blocked: false,
            timer: Box::pin(tokio::time::sleep_until(now + HEADER_TIMEOUT)),
            head_out: Vec::new(),
            head_written: 0,
            continuing: false,
            security_headers: Arc::clone(&self.security_headers),
            number,
            slot,
            places: Arc::clone(&self.places),
        };
        (guarded, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection under the deadlines until its handshake is answered `101`.
///
/// It follows the requests in the bytes read (each ends its headers with an empty line) and the
/// answers in the bytes written (each begins with a status line). Fewer answers begun than
/// requests is a request being read or answered; a client may send its next request before
/// the last answer is written, so the two are counted apart.
pub struct Guarded {
    stream: TcpStream,
    /// Requests begun: their first byte was read.
    requests: u64,
    /// Answers begun: their status line was written.
    answers: u64,
    /// In a request's headers: from its first byte until their empty line.
    in_head: bool,
    /// The bytes of the request's headers read so far: past [`MAX_HEAD_BYTES`] the connection
    /// ends.
    head_bytes: usize,
    /// How much of "\r\n\r\n" the request bytes read so far end with.
    matched: usize,
    /// Its handshake was answered 101: its frames are not HTTP, and no deadline holds.
    websocket: bool,
    /// When the last request began: the connection's opening, or the request's first byte.
    request_began: Instant,
    /// When an answer's bytes last moved.
    last_written: Instant,
    /// The last write found the socket full: an answer waits for the client to read.
    write_blocked: bool,
    /// Fires at the deadline in force, or before it (the deadline moves on with each write):
    /// then it is set again.
    timer: Pin<Box<Sleep>>,
    /// An answer's head with the security headers added, written before anything else.
    head_out: Vec<u8>,
    head_written: usize,
    /// The last write took only part of its buffer: the next one goes on with it, and is never
    /// taken for an answer's start (a client that reads slowly chooses where writes split, and
    /// could otherwise make a body's bytes pass for a `101`).
    continuing: bool,
    security_headers: SecurityHeaders,
    number: u64,
    slot: Arc<Slot>,
    places: Arc<Places>,
}

/// What a connection's deadline is for.
enum Deadline {
    Headers,
    Request,
    /// No byte moved for this long.
    Quiet(Duration),
}

impl Deadline {
    /// Why a connection that missed it was closed.
    fn missed(&self) -> String {
        match self {
            Deadline::Headers => {
                format!("no request headers within {} s", HEADER_TIMEOUT.as_secs())
            }
            Deadline::Request => {
                format!("request not answered within {} s", REQUEST_TIMEOUT.as_secs())
            }
            Deadline::Quiet(quiet) => format!("no byte moved for {} s", quiet.as_secs()),
        }
    }
}

const HEADERS_END: &[u8; 4] = b"\r\n\r\n";

impl Guarded {
    /// Follows the requests through `bytes`, just read. A byte after a request's headers begins
    /// the next request (a body is taken as one too: no route here reads a body, and the library
    /// closes a connection whose body it did not read).
    fn follow(&mut self, bytes: &[u8]) {
        if self.websocket {
            return;
        }
        for &byte in bytes {
            if !self.in_head {
                self.in_head = true;
                self.requests += 1;
                self.request_began = Instant::now();
                self.matched = 0;
                self.head_bytes = 0;
            }
            self.head_bytes += 1;
            self.matched = match byte {
                b if b == HEADERS_END[self.matched] => self.matched + 1,
                b'\r' => 1,
                _ => 0,
            };
            if self.matched == HEADERS_END.len() {
                self.in_head = false;
            }
        }
    }

    /// The deadline in force and what it is for; `None` for a WebSocket.
    fn deadline(&self) -> Option<(Instant, Deadline)> {
        if self.websocket {
            return None;
        }
        let answered_by = self.request_began + REQUEST_TIMEOUT;
        if self.in_head {
            return Some((self.request_began + HEADER_TIMEOUT, Deadline::Headers));
        }
        if self.answers < self.requests {
            return Some((answered_by, Deadline::Request));
        }
        // Every request's answer is begun: written, or waiting for the client to read it.
        let quiet = if self.write_blocked { STALLED_WRITE_TIMEOUT } else { IDLE_TIMEOUT };
        let quiet_by = self.last_written + quiet;
        Some(match quiet_by < answered_by {
            true => (quiet_by, Deadline::Quiet(quiet)),
            false => (answered_by, Deadline::Request),
        })
    }

    /// Why the connection must end now, if it must; otherwise `cx`'s task is woken when its
    /// deadline comes, or when the listener closes it to make room.
    fn must_end(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let (deadline, what) = self.deadline()?;
        if self.slot.is_closed(cx) {
            return Some(io::Error::other("closed to make room for a newer connection"));
        }
        loop {
            if Instant::now() >= deadline {
                return Some(io::Error::new(io::ErrorKind::TimedOut, what.missed()));
            }
            if self.timer.deadline() > deadline {
                self.timer.as_mut().reset(deadline);
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Pending => return None,
                // Set before the deadline moved on.
                Poll::Ready(()) => self.timer.as_mut().reset(deadline),
            }
        }
    }

    /// `buf` begins an answer (the library writes an answer's head in one buffer, at the start
    /// of a write: it flattens its writes, as this stream does not take vectored ones): it
    /// becomes a WebSocket if it says `101`, and its head gets the security headers it lacks.
    /// `Some(length)` if the head was taken (into `head_out`, to be written first), `None` to
    /// write `buf` as it is.
    fn begin_answer(&mut self, buf: &[u8]) -> io::Result<Option<usize>> {
        self.answers += 1;
        // Quiet from now on is counted from the answer's start.
        self.last_written = Instant::now();
        if buf.starts_with(b"HTTP/1.1 101 ") {
            self.become_websocket()?;
        }
        let Some(end) = find(buf, HEADERS_END) else { return Ok(None) };
        let head_length = end + HEADERS_END.len();
        let Some(head) = with_headers(&buf[..head_length], &self.security_headers) else {
            return Ok(None);
        };
        self.head_out = head;
        self.head_written = 0;
        Ok(Some(head_length))
    }

    fn become_websocket(&mut self) -> io::Result<()> {
        let open = self.places.websockets.fetch_add(1, Ordering::SeqCst);
        if open >= self.places.websocket_places {
            self.places.websockets.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(
                "closed a WebSocket at its handshake: {open} are open, the most the UI serves"
            );
            return Err(io::Error::other("no place for another WebSocket"));
        }
        lock(&self.places.http).remove(&self.number);
        self.websocket = true;
        Ok(())
    }

    /// Notes whether a write to the socket moved bytes; returns it as it was.
    fn note_write(&mut self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        self.write_blocked = polled.is_pending();
        if let Poll::Ready(Ok(1..)) = polled {
            self.last_written = Instant::now();
        }
        polled
    }

    /// Writes what is left of `head_out`.
    fn poll_head_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.head_written < self.head_out.len() {
            let rest = &self.head_out[self.head_written..];
            let polled = Pin::new(&mut self.stream).poll_write(cx, rest);
            let written = ready!(self.note_write(polled))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.head_written += written;
        }
        self.head_out = Vec::new();
        self.head_written = 0;
        Poll::Ready(Ok(()))
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        match self.websocket {
            true => _ = self.places.websockets.fetch_sub(1, Ordering::SeqCst),
            false => _ = lock(&self.places.http).remove(&self.number),
        }
    }
}

/// Whether `bytes` begin with an HTTP/1 status line's start ("HTTP/1.1 200 ").
fn is_status_line(bytes: &[u8]) -> bool {
    bytes.len() >= 13
        && (bytes.starts_with(b"HTTP/1.1 ") || bytes.starts_with(b"HTTP/1.0 "))
        && bytes[9..12].iter().all(u8::is_ascii_digit)
        && bytes[12] == b' '
}

/// Where `needle` first is in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// `head` (an answer's, through its empty line) with those of `headers` it lacks added; `None`
/// if it has them all.
fn with_headers(head: &[u8], headers: &[(HeaderName, HeaderValue)]) -> Option<Vec<u8>> {
    let has = |name: &HeaderName| {
        let name = name.as_str().as_bytes();
        head.split(|&byte| byte == b'\n').any(|line| {
            line.len() > name.len()
                && line[..name.len()].eq_ignore_ascii_case(name)
                && line[name.len()] == b':'
        })
    };
    let missing: Vec<_> = headers.iter().filter(|(name, _)| !has(name)).collect();
    if missing.is_empty() {
        return None;
    }
    // Before the empty line that ends the head.
    let mut with = head[..head.len() - 2].to_vec();
    for (name, value) in missing {
        with.extend_from_slice(name.as_str().as_bytes());
        with.extend_from_slice(b": ");
        with.extend_from_slice(value.as_bytes());
        with.extend_from_slice(b"\r\n");
    }
    with.extend_from_slice(b"\r\n");
    Some(with)
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.must_end(cx) {
            return Poll::Ready(Err(error));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        this.follow(&buf.filled()[before..]);
        if this.in_head && this.head_bytes > MAX_HEAD_BYTES {
            let message = format!("request headers over {MAX_HEAD_BYTES} bytes");
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, message)));
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
        let this = self.get_mut();
        if let Some(error) = this.must_end(cx) {
            return Poll::Ready(Err(error));
        }
        ready!(this.poll_head_out(cx))?;
        // An answer is owed and these bytes begin one: not the rest of a buffer a write took
        // part of (the rest of the last answer, still being written when the client sent its
        // next request early).
        let begins = !this.continuing && this.answers < this.requests && is_status_line(buf);
        if !this.websocket && begins {
            if let Some(taken) = this.begin_answer(buf)? {
                this.continuing = taken < buf.len();
                return Poll::Ready(Ok(taken));
            }
        }
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = polled {
            this.continuing = written < buf.len();
        }
        this.note_write(polled)
    }

    /// No: the library then writes each answer's head in one buffer, which `begin_answer`
    /// reads whole.
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.must_end(cx) {
            return Poll::Ready(Err(error));
        }
        ready!(this.poll_head_out(cx))?;
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.must_end(cx) {
            return Poll::Ready(Err(error));
        }
        ready!(this.poll_head_out(cx))?;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gets_the_security_headers_it_lacks_and_no_others() {
        let headers = security_headers("default-src 'self'");
        let bare = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let with = String::from_utf8(with_headers(bare, &headers).unwrap()).unwrap();
        assert!(with.starts_with("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n"), "{with}");
        assert!(with.ends_with("referrer-policy: no-referrer\r\n\r\n"), "{with}");
        assert!(with.contains("\r\ncontent-security-policy: default-src 'self'\r\n"), "{with}");
        assert!(with.contains("\r\nx-content-type-options: nosniff\r\n"), "{with}");
        assert!(with.contains("\r\nx-frame-options: SAMEORIGIN\r\n"), "{with}");
        assert_eq!(with_headers(with.as_bytes(), &headers), None, "has them all");
        let partial = b"HTTP/1.1 200 OK\r\nX-Frame-Options: DENY\r\n\r\n";
        let with = String::from_utf8(with_headers(partial, &headers).unwrap()).unwrap();
        assert!(!with.contains("x-frame-options: SAMEORIGIN"), "the one it has is kept: {with}");
        // A header whose name only begins like one of them does not count.
        let lookalike = b"HTTP/1.1 200 OK\r\nx-content-type-options-note: x\r\n\r\n";
        let with = String::from_utf8(with_headers(lookalike, &headers).unwrap()).unwrap();
        assert!(with.contains("\r\nx-content-type-options: nosniff\r\n"), "{with}");
    }

    #[test]
    fn an_answer_is_told_by_its_status_line() {
        assert!(is_status_line(b"HTTP/1.1 101 Switching Protocols\r\n"));
        assert!(is_status_line(b"HTTP/1.0 400 Bad Request\r\n"));
        for not in [&b"HTTP/1.1 20"[..], b"HTTP/2 200 OK\r\n", b"<html>HTTP/1.1 200 ", b"\0asm"] {
            assert!(!is_status_line(not), "{}", String::from_utf8_lossy(not));
        }
    }
}
