//! One side of one measured connection: every syscall on it goes through here, stamped
//! immediately before and after, with the side's socket options applied around it.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;

use ackscope_shared::{ConnId, EventKind, ReqId, SockOpt, WritePattern};
use socket2::SockRef;

use super::options::{effective_buffers, SideOptions};
use super::record::Recorder;
use super::tcp_info::{self, BlockSampler};
use super::{context, LENGTH_PREFIX_BYTES};
use ackscope_shared::wire::Instruments;
use std::time::Duration;

/// The kernel's view of one side of a connection: TCP_INFO at syscall boundaries and while a
/// call is blocked, as the run's instruments say. Lives as long as the connection.
pub struct KernelProbe {
    at_syscalls: bool,
    sampler: Option<BlockSampler>,
}

impl KernelProbe {
    pub fn off() -> KernelProbe {
        KernelProbe { at_syscalls: false, sampler: None }
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
        KernelProbe { at_syscalls: instruments.tcp_info_at_syscalls, sampler }
    }
}

/// A short-lived view: the socket, its side's options and the side's recorder, borrowed together.
pub struct Endpoint<'a> {
    pub stream: &'a mut TcpStream,
    pub conn: ConnId,
    opts: &'a SideOptions,
    rec: &'a mut Recorder,
    kernel: &'a KernelProbe,
    /// Length and body copied together for [`WritePattern::Single`].
    scratch: Vec<u8>,
}

impl<'a> Endpoint<'a> {
    pub fn new(
        stream: &'a mut TcpStream,
        conn: ConnId,
        opts: &'a SideOptions,
        rec: &'a mut Recorder,
        kernel: &'a KernelProbe,
    ) -> Self {
        Endpoint { stream, conn, opts, rec, kernel, scratch: Vec::new() }
    }

    /// Brackets one syscall: tells the sampler a call may block, and reads TCP_INFO at the
    /// boundary after it.
    fn measured<T>(&mut self, req: ReqId, call: impl FnOnce(&mut TcpStream) -> T) -> (u64, T, u64) {
        if let Some(sampler) = &self.kernel.sampler {
            sampler.blocked(req);
        }
        let start_ns = self.rec.now_ns();
        let result = call(self.stream);
        let done_ns = self.rec.now_ns();
        if let Some(sampler) = &self.kernel.sampler {
            sampler.unblocked();
        }
        (start_ns, result, done_ns)
    }

    fn boundary_sample(&mut self, req: ReqId) {
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
        let len_bytes = clamp_u32(buf.len());
        let (start_ns, result, done_ns) = self.measured(req, |stream| stream.read(buf));
        self.rec.record(start_ns, self.conn, req, EventKind::ReadStart { len_bytes });
        let bytes = clamp_u32(*result.as_ref().unwrap_or(&0));
        self.rec.record(done_ns, self.conn, req, EventKind::ReadDone { bytes });
        self.boundary_sample(req);
        if self.opts.quickack && bytes > 0 {
            self.set_option(req, SockOpt::QuickAck, true)?;
        }
        result
    }

    /// Fills `buf`. Returns `Ok(false)` if the peer closed before the first byte (a clean end
    /// between messages), an error if it closed part-way.
    pub fn read_exact(&mut self, req: ReqId, buf: &mut [u8]) -> io::Result<bool> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.read(req, &mut buf[filled..]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("peer closed after {filled} of {} bytes", buf.len()),
                    ))
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
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
        self.boundary_sample(req);
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

    /// Writes one message (4-byte big-endian length, then `body`) the way this side's options
    /// say: split, single or writev, inside TCP_CORK if asked.
    pub fn write_message(&mut self, req: ReqId, body: &[u8]) -> io::Result<()> {
        let len = u32::try_from(body.len()).map_err(|_| io::Error::other("body over 4 GiB"))?;
        let prefix = len.to_be_bytes();
        if self.opts.cork {
            self.set_option(req, SockOpt::Cork, true)?;
        }
        match self.opts.write {
            WritePattern::Split => {
                self.write_all(req, &prefix)?;
                self.write_all(req, body)?;
            }
            WritePattern::Single => {
                let mut buffer = std::mem::take(&mut self.scratch);
                buffer.clear();
                buffer.extend_from_slice(&prefix);
                buffer.extend_from_slice(body);
                let written = self.write_all(req, &buffer);
                self.scratch = buffer;
                written?;
            }
            WritePattern::Writev => {
                let mut sent = 0;
                let total = LENGTH_PREFIX_BYTES + body.len();
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
