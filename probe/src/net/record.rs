//! Stamping events and handing them to whoever collects them.

use std::sync::mpsc::{SyncSender, TrySendError};

use ackscope_shared::{ConnId, Event, EventKind, ReqId, Side};

/// The run's clock: monotonic nanoseconds since the run started, shared by every thread of a
/// local run so that both sides' events line up.
///
/// It reads CLOCK_MONOTONIC directly (one vDSO call), not through `Instant`, whose checked
/// subtraction added half again to each reading, four readings per exchange and side.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The epoch on CLOCK_MONOTONIC: lets two processes of one host compare their clocks'
    /// epochs (a remote run's true offset).
    epoch_monotonic_ns: u64,
}

impl Clock {
    pub fn start() -> Clock {
        Clock { epoch_monotonic_ns: monotonic_ns() }
    }

    pub fn epoch_monotonic_ns(&self) -> u64 {
        self.epoch_monotonic_ns
    }

    pub fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.epoch_monotonic_ns)
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds (u64 nanoseconds last 584 years).
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Events recorded by one thread (one side of one or more connections), sent on in batches.
///
/// Batching keeps the channel off the measured path: a push is a `Vec` append; the batch crosses
/// threads once per exchange ([`Recorder::flush`]), or when it grows past a cap.
pub struct Recorder {
    clock: Clock,
    side: Side,
    batch: Vec<Event>,
    /// The batch is sent on by itself, waiting for room if need be, past this many events
    /// ([`BATCH_CAP`], or more for a thread that must not wait: [`Recorder::waiting_past`]).
    cap: usize,
    /// `None`: a recorder that keeps nothing (recording off, or a connection a run did not make).
    sink: Option<SyncSender<Vec<Event>>>,
}

/// A batch is sent on by itself past this many events (a bulk transfer's thousands of writes).
const BATCH_CAP: usize = 16 * 1024;
/// [`Recorder::hand_over`] sends a batch this large, or this old. At 60,000 exchanges a second
/// a side hands over about 600 times a second: the collector is not woken per exchange, and a
/// batch (32 KiB) stays below the allocator's mmap threshold, so its memory is reused rather
/// than mapped and faulted in afresh.
const HAND_OVER_EVENTS: usize = 1024;
const HAND_OVER_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

impl Recorder {
    pub fn new(clock: Clock, side: Side, sink: SyncSender<Vec<Event>>) -> Recorder {
        Recorder { clock, side, batch: Vec::new(), cap: BATCH_CAP, sink: Some(sink) }
    }

    /// This recorder for a thread that must not wait on the collector (the packet capture, whose
    /// ring fills while it waits): [`Recorder::hand_over_without_waiting`] lets the batch grow
    /// while the collector has no room, and only past `cap` events does a record wait.
    pub fn waiting_past(mut self, cap: usize) -> Recorder {
        self.cap = cap.max(BATCH_CAP);
        self
    }

    /// A recorder that stamps nothing and keeps nothing.
    pub fn discarding(clock: Clock, side: Side) -> Recorder {
        Recorder { clock, side, batch: Vec::new(), cap: BATCH_CAP, sink: None }
    }

    pub fn is_recording(&self) -> bool {
        self.sink.is_some()
    }

    /// Where this recorder's batches go, for another thread recording the same side.
    pub fn sink(&self) -> Option<SyncSender<Vec<Event>>> {
        self.sink.clone()
    }

    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    pub fn side(&self) -> Side {
        self.side
    }

    pub fn record(&mut self, at_ns: u64, conn: ConnId, req: ReqId, kind: EventKind) {
        self.record_as(self.side, at_ns, conn, req, kind);
    }

    /// Records an event of `side` (packet capture sees both sides' segments on one thread).
    pub fn record_as(&mut self, side: Side, at_ns: u64, conn: ConnId, req: ReqId, kind: EventKind) {
        if self.sink.is_none() {
            return;
        }
        self.batch.push(Event { at_ns, side, conn, req, kind });
        if self.batch.len() >= self.cap {
            self.flush();
        }
    }

    /// Moves the events `other` recorded into this batch (a sampler's samples of this thread's
    /// call): they are then handed over in order with this thread's own.
    pub fn take_from(&mut self, other: &mut Recorder) {
        if self.sink.is_none() {
            other.batch.clear();
            return;
        }
        self.batch.append(&mut other.batch);
        if self.batch.len() >= self.cap {
            self.flush();
        }
    }

    /// A position in the current batch, for [`Recorder::retag_since`].
    pub fn mark(&self) -> usize {
        self.batch.len()
    }

    /// When the first read since `mark` that returned bytes returned, if it is still in the
    /// batch.
    pub fn first_read_since(&self, mark: usize) -> Option<u64> {
        let events = self.batch.get(mark..)?;
        events
            .iter()
            .find(|e| matches!(e.kind, EventKind::ReadDone { bytes } if bytes > 0))
            .map(|e| e.at_ns)
    }

    /// Gives every event recorded since `mark` the request id `req`: for events recorded before
    /// the request they belong to was known (the server reads a length prefix before it can know
    /// whose it is). Events already sent on past the batch cap keep their first id; a length
    /// prefix takes at most four reads, far from the cap.
    pub fn retag_since(&mut self, mark: usize, req: ReqId) {
        if let Some(events) = self.batch.get_mut(mark..) {
            for event in events {
                event.req = req;
            }
        }
    }

    /// A good moment to hand the batch over (an exchange ended): it is sent once it holds a
    /// thousand events or spans 10 ms. Sending after every exchange would wake
    /// the collector thousands of times a second, on the cores the experiment measures; every
    /// 10 ms still shows a run live.
    pub fn hand_over(&mut self) {
        if self.hand_over_due() {
            self.flush();
        }
    }

    /// [`Recorder::hand_over`] that never waits: when the collector has no room the batch grows
    /// instead (up to the cap of [`Recorder::waiting_past`]).
    pub fn hand_over_without_waiting(&mut self) {
        if self.hand_over_due() {
            self.try_flush();
        }
    }

    /// Whether the batch holds a thousand events or spans 10 ms, judged from its own stamps: no
    /// clock read per exchange.
    fn hand_over_due(&self) -> bool {
        let age_ns = match (self.batch.first(), self.batch.last()) {
            (Some(first), Some(last)) => last.at_ns.saturating_sub(first.at_ns),
            _ => 0,
        };
        self.batch.len() >= HAND_OVER_EVENTS || age_ns >= HAND_OVER_AFTER.as_nanos() as u64
    }

    /// Sends what was recorded. If the collector has gone, the events have nowhere to go and
    /// are dropped; the run itself is ending then.
    pub fn flush(&mut self) {
        if let (Some(sink), false) = (&self.sink, self.batch.is_empty()) {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(HAND_OVER_EVENTS));
            let _ = sink.send(batch);
        }
    }

    /// Sends what was recorded if the collector has room for it now; `false` (the events kept)
    /// if not. For a thread that must never wait on a collector (the TCP_INFO sampler).
    pub fn try_flush(&mut self) -> bool {
        let Some(sink) = &self.sink else { return true };
        if self.batch.is_empty() {
            return true;
        }
        match sink.try_send(std::mem::take(&mut self.batch)) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => true,
            Err(TrySendError::Full(batch)) => {
                self.batch = batch;
                false
            }
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}
