//! Stamping syscalls and handing the events to whoever collects them.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::SyncSender;
use std::time::Instant;

use ackscope_shared::{ConnId, Event, EventKind, ReqId, Side};

/// The run's clock: monotonic nanoseconds since the run started, shared by every thread of a
/// local run so that both sides' events line up.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    pub fn start() -> Clock {
        Clock {
            epoch: Instant::now(),
        }
    }

    pub fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// Events recorded by one thread (one side of one or more connections), sent on in batches.
///
/// Batching keeps the channel off the measured path: a push is a `Vec` append; the batch crosses
/// threads once per exchange ([`Recorder::flush`]) or when it grows large.
pub struct Recorder {
    clock: Clock,
    side: Side,
    batch: Vec<Event>,
    /// `None`: a recorder that keeps nothing (for connections a run did not make).
    sink: Option<SyncSender<Vec<Event>>>,
}

const BATCH_EVENTS: usize = 4096;

impl Recorder {
    pub fn new(clock: Clock, side: Side, sink: SyncSender<Vec<Event>>) -> Recorder {
        Recorder {
            clock,
            side,
            batch: Vec::with_capacity(64),
            sink: Some(sink),
        }
    }

    /// A recorder that stamps nothing and keeps nothing.
    pub fn discarding(clock: Clock, side: Side) -> Recorder {
        Recorder {
            clock,
            side,
            batch: Vec::new(),
            sink: None,
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub fn record(&mut self, at_ns: u64, conn: ConnId, req: ReqId, kind: EventKind) {
        if self.sink.is_none() {
            return;
        }
        self.batch.push(Event {
            at_ns,
            side: self.side,
            conn,
            req,
            kind,
        });
        if self.batch.len() >= BATCH_EVENTS {
            self.flush();
        }
    }

    /// Sends what was recorded. If the collector has gone, the events have nowhere to go and
    /// are dropped; the run itself is ending then.
    pub fn flush(&mut self) {
        if let (Some(sink), false) = (&self.sink, self.batch.is_empty()) {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(64));
            let _ = sink.send(batch);
        }
    }

    /// One `write()` syscall, stamped immediately before and after.
    pub fn write(
        &mut self,
        stream: &mut TcpStream,
        conn: ConnId,
        req: ReqId,
        buf: &[u8],
    ) -> io::Result<usize> {
        let start_ns = self.now_ns();
        let result = stream.write(buf);
        let done_ns = self.now_ns();
        let len_bytes = clamp_u32(buf.len());
        self.record(start_ns, conn, req, EventKind::WriteStart { len_bytes });
        let bytes = clamp_u32(*result.as_ref().unwrap_or(&0));
        self.record(done_ns, conn, req, EventKind::WriteDone { bytes });
        result
    }

    /// One `read()` syscall, stamped immediately before and after.
    pub fn read(
        &mut self,
        stream: &mut TcpStream,
        conn: ConnId,
        req: ReqId,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        let start_ns = self.now_ns();
        let result = stream.read(buf);
        let done_ns = self.now_ns();
        let len_bytes = clamp_u32(buf.len());
        self.record(start_ns, conn, req, EventKind::ReadStart { len_bytes });
        let bytes = clamp_u32(*result.as_ref().unwrap_or(&0));
        self.record(done_ns, conn, req, EventKind::ReadDone { bytes });
        result
    }

    /// Writes all of `buf`, one recorded syscall at a time.
    pub fn write_all(
        &mut self,
        stream: &mut TcpStream,
        conn: ConnId,
        req: ReqId,
        mut buf: &[u8],
    ) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(stream, conn, req, buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Fills `buf`, one recorded syscall at a time. Returns `Ok(false)` if the peer closed before
    /// the first byte (a clean end between messages), an error if it closed part-way.
    pub fn read_exact(
        &mut self,
        stream: &mut TcpStream,
        conn: ConnId,
        req: ReqId,
        buf: &mut [u8],
    ) -> io::Result<bool> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.read(stream, conn, req, &mut buf[filled..]) {
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
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}

fn clamp_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
