//! One side of one measured connection: every syscall on it goes through here, stamped
//! immediately before and after, with the side's socket options applied around it.

use std::cell::Cell;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;

use ackscope_shared::{ConnId, EventKind, ReqId, SockOpt, WritePattern};
use socket2::SockRef;

use super::options::{effective_buffers, SideOptions};
use super::record::Recorder;
use super::tcp_info::{self, BlockSampler};
use super::{context, Message, LENGTH_PREFIX_BYTES};
use ackscope_shared::wire::Instruments;
use std::time::Duration;

/// The kernel's view of one side of a connection: TCP_INFO at syscall boundaries and while a
/// call is blocked, as the run's instruments say. Lives as long as the connection.
///
/// At boundaries it samples after every call that took at least [`SLOW_CALL`] (the state a
/// stall ended in), and otherwise at most once per [`BOUNDARY_EVERY`] per connection, starting
/// with its first call (the MSS, RTT, window and cwnd the charts and the attribution read). One
/// `getsockopt` after every call would cost more than the exchange itself on loopback.
pub struct KernelProbe {
    at_syscalls: bool,
    sampler: Option<BlockSampler>,
    /// When the last boundary sample was taken, on the run's clock; `None` before the first.
    last_boundary_ns: Cell<Option<u64>>,
    /// The measuring thread's run-queue delay, read at the same moments as the boundary
    /// samples; `None` where /proc has no schedstat (or for a connection not recorded).
    run_delay: Option<RunDelay>,
}

/// The calling thread's run-queue delay so far: the second field of
/// /proc/thread-self/schedstat (nanoseconds runnable but not running), through a descriptor
/// opened once (it names the thread that opened it), one `pread` a reading.
struct RunDelay {
    file: std::fs::File,
    /// The previous reading: when, on the run's clock, and what it was.
    last: Cell<Option<(u64, u64)>>,
}

/// Growth of the run-queue delay below this is not recorded: a loaded CPU, not a stall.
const RUN_DELAY_WORTH_NOTING_NS: u64 = 100_000;

impl RunDelay {
    /// Opened by the thread that will make the calls.
    fn open() -> Option<RunDelay> {
        let file = std::fs::File::open("/proc/thread-self/schedstat").ok()?;
        let reader = RunDelay { file, last: Cell::new(None) };
        reader.read_ns().map(|_| reader)
    }

    fn read_ns(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_whitespace().nth(1)?.parse().ok()
    }

    /// Reads it at `now_ns`: how much it grew since the previous reading, and since when, if
    /// by at least [`RUN_DELAY_WORTH_NOTING_NS`].
    fn grew(&self, now_ns: u64) -> Option<(u64, u64)> {
        let delay = self.read_ns()?;
        let previous = self.last.replace(Some((now_ns, delay)));
        let (since_ns, before) = previous?;
        let grew = delay.saturating_sub(before);
        (grew >= RUN_DELAY_WORTH_NOTING_NS).then_some((since_ns, grew))
    }
}

/// A call that took this long is followed by a boundary sample, whatever the rate limit.
pub const SLOW_CALL: Duration = Duration::from_millis(1);
/// Quick calls are followed by a boundary sample at most this often per connection.
pub const BOUNDARY_EVERY: Duration = Duration::from_millis(10);

impl KernelProbe {
    pub fn off() -> KernelProbe {
        KernelProbe {
            at_syscalls: false,
            sampler: None,
            last_boundary_ns: Cell::new(None),
            run_delay: None,
        }
    }

    /// Starts what `instruments` asks for on `stream`, recording through `rec`'s channel. Only
    /// recorded connections are sampled.
    pub fn start(
        instruments: Instruments,
        stream: &TcpStream,
        rec: &Recorder,
        conn: ConnId,
    ) -> KernelProbe {
        let Some(sink) = rec.sink() else { return KernelProbe::off() };
        let sampler = (instruments.tcp_info_interval_us > 0)
            .then(|| stream.try_clone().ok())
            .flatten()
            .and_then(|clone| {
                let interval = Duration::from_micros(u64::from(instruments.tcp_info_interval_us));
                BlockSampler::start(clone, interval, rec.clock(), rec.side(), conn, sink)
                    .map_err(|e| tracing::warn!("TCP_INFO sampling while blocked is off: {e}"))
                    .ok()
            });
        KernelProbe {
            at_syscalls: instruments.tcp_info_at_syscalls,
            sampler,
            last_boundary_ns: Cell::new(None),
            run_delay: RunDelay::open(),
        }
    }

    /// Whether a call that ran from `start_ns` to `done_ns` is followed by a boundary sample
    /// (TCP_INFO if asked for, and the run-queue delay).
    fn boundary_due(&self, start_ns: u64, done_ns: u64) -> bool {
        if !self.at_syscalls && self.run_delay.is_none() {
            return false;
        }
        let slow = done_ns.saturating_sub(start_ns) >= SLOW_CALL.as_nanos() as u64;
        let due = match self.last_boundary_ns.get() {
            None => true,
            Some(last) => done_ns.saturating_sub(last) >= BOUNDARY_EVERY.as_nanos() as u64,
        };
        if slow || due {
            self.last_boundary_ns.set(Some(done_ns));
        }
        slow || due
    }
}

/// Bytes read from a connection and not yet taken: one `read()` takes a whole message (its
/// length prefix and its body) when the kernel already holds it, instead of one read for the
/// prefix and one for the body.
///
/// It grows only as bytes arrive (doubling when full, up to what the message needs), so a
/// length prefix announcing 64 MiB costs nothing until 64 MiB come. A read may take bytes of
/// the next message too (a peer that pipelines); they wait here for it.
pub struct Inbox {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// An inbox starts this large unless its owner knows the size of what it will read.
pub const INBOX_START_BYTES: usize = 4096;

impl Inbox {
    /// An inbox sized for messages of `expected` bytes (prefix included).
    pub fn with_capacity(expected: usize) -> Inbox {
        Inbox { buf: vec![0; expected.max(LENGTH_PREFIX_BYTES)], start: 0, end: 0 }
    }

    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Room to read into, for a message that needs `want` bytes from `start`.
    fn room(&mut self, want: usize) -> &mut [u8] {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.start + want > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.end == self.buf.len() {
            // Full, and the message needs more: grow with what arrived.
            let grown = (self.buf.len() * 2).min(self.start + want).max(self.end + 1);
            self.buf.resize(grown, 0);
        }
        &mut self.buf[self.end..]
    }

    /// Gives back memory past `keep` bytes once nothing is buffered: an inbox grown for one
    /// large message does not hold it through the waits after.
    pub fn release_above(&mut self, keep: usize) {
        if self.start == self.end && self.buf.len() > keep {
            *self = Inbox::with_capacity(INBOX_START_BYTES);
        }
    }

    /// Takes the first `len` bytes (all buffered).
    fn take(&mut self, len: usize) -> &[u8] {
        let taken = &self.buf[self.start..self.start + len];
        self.start += len;
        taken
    }
}

/// A short-lived view: the socket, its side's options and the side's recorder, borrowed together.
pub struct Endpoint<'a> {
    pub stream: &'a mut TcpStream,
    pub conn: ConnId,
    opts: &'a SideOptions,
    rec: &'a mut Recorder,
    kernel: &'a KernelProbe,
}

impl<'a> Endpoint<'a> {
    pub fn new(
        stream: &'a mut TcpStream,
        conn: ConnId,
        opts: &'a SideOptions,
        rec: &'a mut Recorder,
        kernel: &'a KernelProbe,
    ) -> Self {
        Endpoint { stream, conn, opts, rec, kernel }
    }

    /// Brackets one syscall: tells the sampler a call may block, and reads TCP_INFO at the
    /// boundary after it.
    fn measured<T>(&mut self, req: ReqId, call: impl FnOnce(&mut TcpStream) -> T) -> (u64, T, u64) {
        self.measured_as(Some(req), call)
    }

    /// [`Endpoint::measured`]; `sampled: None` for a call that waits outside any request (a
    /// server waiting for the next one), which the sampler leaves alone: an idle connection
    /// costs no samples.
    fn measured_as<T>(
        &mut self,
        sampled: Option<ReqId>,
        call: impl FnOnce(&mut TcpStream) -> T,
    ) -> (u64, T, u64) {
        let sampler = self.kernel.sampler.as_ref().filter(|_| sampled.is_some());
        if let (Some(sampler), Some(req)) = (sampler, sampled) {
            sampler.blocked(req);
        }
        let start_ns = self.rec.now_ns();
        let result = call(self.stream);
        let done_ns = self.rec.now_ns();
        if let Some(sampler) = sampler {
            sampler.unblocked(self.rec);
        }
        (start_ns, result, done_ns)
    }

    fn boundary_sample(&mut self, req: ReqId, start_ns: u64, done_ns: u64) {
        if !self.kernel.boundary_due(start_ns, done_ns) {
            return;
        }
        if let Some((since_ns, waited_ns)) =
            self.kernel.run_delay.as_ref().and_then(|r| r.grew(done_ns))
        {
            self.rec.record(done_ns, self.conn, req, EventKind::RunDelay { since_ns, waited_ns });
        }
        if !self.kernel.at_syscalls {
            return;
        }
        if let Ok(sample) = tcp_info::sample(&*self.stream, false) {
            let at_ns = self.rec.now_ns();
            self.rec.record(at_ns, self.conn, req, EventKind::TcpInfo(Box::new(sample)));
        }
    }

    pub fn recorder(&mut self) -> &mut Recorder {
        self.rec
    }

    pub fn note(&mut self, req: ReqId, kind: EventKind) {
        let now = self.rec.now_ns();
        self.rec.record(now, self.conn, req, kind);
    }

    /// Records the socket buffers the kernel actually set (Linux doubles what was asked, and
    /// caps it at rmem_max / wmem_max).
    pub fn record_buffers(&mut self, req: ReqId) -> io::Result<()> {
        let (sndbuf_bytes, rcvbuf_bytes) = effective_buffers(&SockRef::from(&*self.stream))?;
        self.note(req, EventKind::Buffers { sndbuf_bytes, rcvbuf_bytes });
        Ok(())
    }

    /// One `read()`; with TCP_QUICKACK on, re-armed after every read that returned data (the
    /// kernel clears it).
    pub fn read(&mut self, req: ReqId, buf: &mut [u8]) -> io::Result<usize> {
        self.read_as(req, true, buf)
    }

    /// [`Endpoint::read`]; `in_request: false` for a read that waits for a request to begin.
    fn read_as(&mut self, req: ReqId, in_request: bool, buf: &mut [u8]) -> io::Result<usize> {
        let len_bytes = clamp_u32(buf.len());
        let sampled = in_request.then_some(req);
        let (start_ns, result, done_ns) = self.measured_as(sampled, |stream| stream.read(buf));
        self.rec.record(start_ns, self.conn, req, EventKind::ReadStart { len_bytes });
        let bytes = clamp_u32(*result.as_ref().unwrap_or(&0));
        self.rec.record(done_ns, self.conn, req, EventKind::ReadDone { bytes });
        self.boundary_sample(req, start_ns, done_ns);
        if self.opts.quickack && bytes > 0 {
            self.set_option(req, SockOpt::QuickAck, true)?;
        }
        result
    }

    /// Reads until `inbox` holds `want` bytes. `Ok(false)` if the peer closed before the first
    /// byte of a message (`at_message_start`: a clean end between messages), an error if it
    /// closed part-way. `between_requests`: the wait for a message's first byte is not part of
    /// any request (a server waiting for the next one) and is not sampled.
    fn fill(
        &mut self,
        req: ReqId,
        inbox: &mut Inbox,
        want: usize,
        at_message_start: bool,
        between_requests: bool,
    ) -> io::Result<bool> {
        while inbox.buffered() < want {
            let in_request = !(between_requests && inbox.buffered() == 0);
            match self.read_as(req, in_request, inbox.room(want)) {
                Ok(0) if at_message_start && inbox.buffered() == 0 => return Ok(false),
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("peer closed after {} of {want} bytes", inbox.buffered()),
                    ))
                }
                Ok(n) => inbox.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads a message's 4-byte length prefix (and whatever of the body came with it). `None`
    /// if the peer closed cleanly before it. `between_requests`: see [`Endpoint::fill`].
    pub fn read_prefix(
        &mut self,
        req: ReqId,
        inbox: &mut Inbox,
        between_requests: bool,
    ) -> io::Result<Option<u32>> {
        if !self.fill(req, inbox, LENGTH_PREFIX_BYTES, true, between_requests)? {
            return Ok(None);
        }
        let prefix: [u8; LENGTH_PREFIX_BYTES] =
            inbox.take(LENGTH_PREFIX_BYTES).try_into().expect("took the prefix's length");
        Ok(Some(u32::from_be_bytes(prefix)))
    }

    /// Reads the `len`-byte body that follows a prefix. The caller bounds `len`; the inbox
    /// grows only as the bytes arrive.
    pub fn read_body<'i>(
        &mut self,
        req: ReqId,
        inbox: &'i mut Inbox,
        len: u32,
    ) -> io::Result<&'i [u8]> {
        let len = len as usize;
        self.fill(req, inbox, len, false, false)?;
        Ok(inbox.take(len))
    }

    /// One `write()`.
    pub fn write(&mut self, req: ReqId, buf: &[u8]) -> io::Result<usize> {
        let (start_ns, result, done_ns) = self.measured(req, |stream| stream.write(buf));
        self.record_write(req, start_ns, done_ns, buf.len(), &result);
        result
    }

    /// One `writev()` of two buffers.
    fn writev(&mut self, req: ReqId, first: &[u8], second: &[u8]) -> io::Result<usize> {
        let slices = [IoSlice::new(first), IoSlice::new(second)];
        let (start_ns, result, done_ns) =
            self.measured(req, |stream| stream.write_vectored(&slices));
        self.record_write(req, start_ns, done_ns, first.len() + second.len(), &result);
        result
    }

    fn record_write(
        &mut self,
        req: ReqId,
        start: u64,
        done: u64,
        len: usize,
        r: &io::Result<usize>,
    ) {
        let len_bytes = clamp_u32(len);
        self.rec.record(start, self.conn, req, EventKind::WriteStart { len_bytes });
        let bytes = clamp_u32(*r.as_ref().unwrap_or(&0));
        self.rec.record(done, self.conn, req, EventKind::WriteDone { bytes });
        self.boundary_sample(req, start, done);
    }

    pub fn write_all(&mut self, req: ReqId, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(req, buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes one message (its 4-byte big-endian length, then its body) the way this side's
    /// options say: split, single or writev, inside TCP_CORK if asked.
    pub fn write_message(&mut self, req: ReqId, message: &Message) -> io::Result<()> {
        if self.opts.cork {
            self.set_option(req, SockOpt::Cork, true)?;
        }
        match self.opts.write {
            WritePattern::Split => {
                self.write_all(req, message.prefix())?;
                self.write_all(req, message.body())?;
            }
            WritePattern::Single => self.write_all(req, message.framed())?,
            WritePattern::Writev => {
                let (prefix, body) = (message.prefix(), message.body());
                let mut sent = 0;
                let total = message.framed().len();
                while sent < total {
                    let (first, second) = if sent < LENGTH_PREFIX_BYTES {
                        (&prefix[sent..], body)
                    } else {
                        (&body[sent - LENGTH_PREFIX_BYTES..], &[][..])
                    };
                    match self.writev(req, first, second) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => sent += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        if self.opts.cork {
            self.set_option(req, SockOpt::Cork, false)?;
        }
        Ok(())
    }

    fn set_option(&mut self, req: ReqId, opt: SockOpt, on: bool) -> io::Result<()> {
        let socket = SockRef::from(&*self.stream);
        let side = self.opts.side_name;
        let result = match opt {
            SockOpt::Cork => socket.set_tcp_cork(on),
            SockOpt::QuickAck => socket.set_tcp_quickack(on),
        };
        result.map_err(|e| context(e, format!("{opt:?} on the {side}")))?;
        self.note(req, EventKind::SockOpt { opt, value: u32::from(on) });
        Ok(())
    }
}

fn clamp_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
