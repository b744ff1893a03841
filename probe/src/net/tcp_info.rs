//! The kernel's view of a connection: `getsockopt(TCP_INFO)`, once ([`sample`]) or repeatedly
//! while a call on the socket is blocked ([`BlockSampler`]).
//!
//! A stall is invisible from the syscalls alone: a `read()` that takes 44 ms looks the same
//! whether the peer was slow or the bytes sat in the peer's socket held by Nagle. Sampled while
//! the call is blocked, `tcp_info` shows which: the writer's `notsent_bytes` holds the body, the
//! reader's `ato_us` is the delayed-ACK timeout it is waiting out. docs/TCP_INFO.md has the
//! fields, units and the numbers measured by the tests below.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use ackscope_shared::tcp_info::{decode, MIN_LEN};
use ackscope_shared::{ConnId, Event, EventKind, ReqId, Side, TcpInfoSample};

use super::context;
use super::record::{Clock, Recorder};

/// Larger than any kernel's `struct tcp_info` so far (280 bytes on 6.18); the kernel copies
/// `min(our length, its length)` and says how much.
const BUF_BYTES: usize = 512;

/// Reads `TCP_INFO` for `socket` now.
///
/// One syscall, a few microseconds. The kernel answers from any thread, for any fd of the socket.
pub fn sample(socket: &impl AsFd, during_block: bool) -> io::Result<TcpInfoSample> {
    let fd = socket.as_fd();
    let mut buf = [0u8; BUF_BYTES];
    let mut len = BUF_BYTES as libc::socklen_t;
    // SAFETY: `fd` is a descriptor borrowed for the duration of the call, so it stays open;
    // `buf` is writable for `len` bytes, the kernel writes at most `len` bytes into it and
    // stores the number it wrote back into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(context(io::Error::last_os_error(), describe(socket)));
    }
    let len = (len as usize).min(BUF_BYTES);
    decode(&buf[..len], during_block).ok_or_else(|| {
        let err = io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the kernel returned {len} bytes, fewer than the {MIN_LEN} of Linux 2.6"),
        );
        context(err, describe(socket))
    })
}

/// "getsockopt(TCP_INFO) on 127.0.0.1:40312 -> 127.0.0.1:7": extra syscalls, on the error path
/// only.
fn describe(socket: &impl AsFd) -> String {
    let sock = socket2::SockRef::from(socket);
    let addr = |a: io::Result<socket2::SockAddr>| match a.ok().and_then(|a| a.as_socket()) {
        Some(a) => a.to_string(),
        None => "?".to_string(),
    };
    format!("getsockopt(TCP_INFO) on {} -> {}", addr(sock.local_addr()), addr(sock.peer_addr()))
}

/// Samples `TCP_INFO` of one socket while a read or write on it is blocked, so that a stall
/// shows what the kernel is holding while it happens, not only after.
///
/// Contract: the measuring thread calls [`BlockSampler::blocked`] right before a call that may
/// block and [`BlockSampler::unblocked`] right after it returns. Once the same call has been
/// blocked for at least one full `interval` it is sampled (first between 1 and 8 intervals
/// after it blocked, see [`LOOK_STRETCH`]), and again every interval until it returns (spaced
/// out after [`SAMPLES_AT_INTERVAL`] samples, see [`spacing`]). Each sample
/// becomes an [`EventKind::TcpInfo`] event with `during_block: true`, the request id given to
/// `blocked`, stamped immediately before the `getsockopt`. Calls that return within an interval
/// are never sampled, so quick exchanges get no extra syscalls and no contention on the socket
/// lock.
///
/// One thread samples every socket of the process ([`Sampler`]). It sleeps without a timeout
/// while no call is blocked anywhere, so an idle probe, or a run whose calls are all quick
/// between its wake-ups, costs no wake-ups; it is woken by the first `blocked` after that.
///
/// Why a thread and not a timer signal: a signal delivered to the measuring thread interrupts
/// the very syscall being measured (`EINTR`, or a silent restart), changing what is measured,
/// and a signal handler may not allocate or send on a channel. A thread sleeps on its own and
/// reads the socket through its own descriptor.
///
/// Why the measuring thread only touches atomics: `blocked`/`unblocked` sit between the
/// syscall and its Start/Done stamps. A lock, a channel send or a syscall there would add to
/// the measured time; a store is one instruction on x86_64. Only when the sampler is asleep does
/// `blocked` wake it (one `futex` call).
///
/// The sampler holds a duplicate descriptor (`try_clone`) of the socket: the kernel closes the
/// connection (sends FIN) only when every descriptor is closed. Dropping the handle (or
/// [`BlockSampler::stop`]) closes that duplicate and hands the last samples over before it
/// returns, whatever the interval, so drop it before relying on dropping the stream to close
/// it. The sampler thread never waits on a collector: when a run's channel is full its samples
/// wait in their batch (at most [`PENDING_CAP`], then they are counted as dropped).
pub struct BlockSampler {
    watch: Arc<Watch>,
}

/// One watched socket, between its measuring thread and the sampler thread.
struct Watch {
    /// [`NOT_BLOCKED`], or the current blocked call: its generation in the high 32 bits (never
    /// 0), its request id in the low 32 bits. The generation tells two consecutive calls for
    /// the same request apart, so the sampler never mistakes them for one long block.
    block: AtomicU64,
    /// The generation of the next call; written by [`BlockSampler::blocked`] only.
    next_generation: AtomicU32,
    /// The block word the sampler thread last looked at; written by it only.
    seen: AtomicU64,
    /// Whether samples wait in the state's batch: the measuring thread takes the lock to hand
    /// them over ([`BlockSampler::unblocked`]) only then. Written under the lock.
    pending: AtomicBool,
    interval: Duration,
    /// `None` once the handle let go. Locked by the sampler thread when it looks at the watch,
    /// and by the handle once, when it lets go.
    state: Mutex<Option<WatchState>>,
}

/// What the sampler thread keeps about one watched socket.
struct WatchState {
    socket: TcpStream,
    clock: Clock,
    conn: ConnId,
    recorder: Recorder,
    /// When the call being timed ([`Watch::seen`]) is next due.
    due: Instant,
    samples_of_call: u32,
    /// Samples recorded and not yet handed over.
    unflushed: usize,
    /// Samples not recorded because the collector was not keeping up.
    dropped: u64,
    /// The error that ended sampling of this socket, if any.
    error: Option<io::Error>,
}

const NOT_BLOCKED: u64 = 0;

/// The batch is offered to the collector after this many samples, and when a block ends: bounds
/// how late the UI sees a long stall.
const FLUSH_EVERY: usize = 8;
/// Samples waiting for a collector that is not draining its channel, per socket.
const PENDING_CAP: usize = 1024;

/// Looks for newly blocked calls are at most this many intervals apart (see [`Sampler::run`]):
/// a call is first sampled between 1 and 2 x LOOK_STRETCH intervals after it blocked.
pub const LOOK_STRETCH: u32 = 4;

/// Shorter intervals would keep a core busy with samples; 1-5 ms resolves a 40 ms stall.
const MIN_INTERVAL: Duration = Duration::from_micros(100);
/// A call is sampled at the interval this many times; after that the spacing doubles with
/// every sample, up to [`MAX_SPACING`]: a connection blocked for an hour costs a few thousand
/// samples, not millions, and the first 100 ms of any stall are sampled in full.
pub const SAMPLES_AT_INTERVAL: u32 = 100;
const MAX_SPACING: Duration = Duration::from_secs(1);

/// The wait before the sample after `samples` samples of one call.
fn spacing(interval: Duration, samples: u32) -> Duration {
    let doublings = samples.saturating_sub(SAMPLES_AT_INTERVAL).min(16);
    interval.saturating_mul(1 << doublings).min(MAX_SPACING.max(interval))
}

impl BlockSampler {
    /// Starts sampling `socket`, a `try_clone` of the measured socket; `side` and `conn` tag
    /// every event. `interval` is clamped to at least 100 us. The sampler thread is started
    /// with the first socket of the process.
    pub fn start(
        socket: TcpStream,
        interval: Duration,
        clock: Clock,
        side: Side,
        conn: ConnId,
        sink: SyncSender<Vec<Event>>,
    ) -> io::Result<BlockSampler> {
        let sampler = Sampler::get()?;
        let watch = Arc::new(Watch {
            block: AtomicU64::new(NOT_BLOCKED),
            next_generation: AtomicU32::new(1),
            seen: AtomicU64::new(NOT_BLOCKED),
            pending: AtomicBool::new(false),
            interval: interval.max(MIN_INTERVAL),
            state: Mutex::new(Some(WatchState {
                socket,
                clock,
                conn,
                recorder: Recorder::new(clock, side, sink),
                due: Instant::now(),
                samples_of_call: 0,
                unflushed: 0,
                dropped: 0,
                error: None,
            })),
        });
        lock(&sampler.watches).push(Arc::clone(&watch));
        Ok(BlockSampler { watch })
    }

    /// The measuring thread (one thread: the one making the calls) is about to make a call for
    /// `req` that may block.
    pub fn blocked(&self, req: ReqId) {
        let watch = &self.watch;
        let mut generation = watch.next_generation.load(Ordering::Relaxed);
        if generation == 0 {
            generation = 1; // after 2^32 calls: 0 would read as NOT_BLOCKED
        }
        watch.next_generation.store(generation.wrapping_add(1), Ordering::Relaxed);
        let word = (u64::from(generation) << 32) | u64::from(req.0);
        // SeqCst against the sampler's `sleep_ns`: either it sees this word before it sleeps,
        // or this thread sees how long it sleeps and wakes it if that is too long.
        watch.block.store(word, Ordering::SeqCst);
        if let Some(sampler) = SAMPLER.get() {
            sampler.wake_within(watch.interval);
        }
    }

    /// The call announced by [`BlockSampler::blocked`] returned. Samples still waiting to be handed over (this call's) go into `rec`,
    /// the measuring thread's own batch, in order with its events: the sampler hands its batch
    /// over itself only when it next looks, which a busy CPU can put off until the request they
    /// belong to has been summarized. The lock is taken only when samples wait.
    pub fn unblocked(&self, rec: &mut Recorder) {
        let watch = &self.watch;
        watch.block.store(NOT_BLOCKED, Ordering::Release);
        if !watch.pending.load(Ordering::Acquire) {
            return;
        }
        if let Some(state) = lock(&watch.state).as_mut() {
            rec.take_from(&mut state.recorder);
            state.unflushed = 0;
            watch.pending.store(false, Ordering::Release);
        }
    }

    /// Stops sampling; returns the error that ended sampling early, if any (a failed
    /// `getsockopt`, which a live socket does not produce).
    pub fn stop(self) -> io::Result<()> {
        self.let_go()
    }

    /// Closes the duplicate descriptor and hands the last samples over, now.
    fn let_go(&self) -> io::Result<()> {
        self.watch.block.store(NOT_BLOCKED, Ordering::Release);
        let state = lock(&self.watch.state).take();
        let Some(mut state) = state else { return Ok(()) };
        if state.dropped > 0 {
            tracing::warn!(
                "{} TCP_INFO samples of connection {} were dropped: the recording fell behind",
                state.dropped,
                state.conn.0
            );
        }
        state.recorder.flush();
        match state.error.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

impl Drop for BlockSampler {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

/// The process's one sampler thread and the sockets it watches.
struct Sampler {
    watches: Mutex<Vec<Arc<Watch>>>,
    /// How long the thread is sleeping for, in nanoseconds (`u64::MAX`: until woken); 0 while it
    /// is awake or has been woken.
    sleep_ns: AtomicU64,
    thread: thread::Thread,
}

static SAMPLER: OnceLock<Sampler> = OnceLock::new();

impl Sampler {
    fn get() -> io::Result<&'static Sampler> {
        if let Some(sampler) = SAMPLER.get() {
            return Ok(sampler);
        }
        // The thread waits until the sampler is published before it looks at it.
        let (publish, published) = std::sync::mpsc::channel::<&'static Sampler>();
        let handle = thread::Builder::new()
            .name("tcp-info".into())
            .spawn(move || {
                if let Ok(sampler) = published.recv() {
                    sampler.run();
                }
            })
            .map_err(|e| context(e, "spawn the TCP_INFO sampler thread"))?;
        let sampler = Sampler {
            watches: Mutex::new(Vec::new()),
            sleep_ns: AtomicU64::new(0),
            thread: handle.thread().clone(),
        };
        // Another thread may have won the race: its sampler is the one; this thread ends.
        let mut ours = Some(sampler);
        let sampler = SAMPLER.get_or_init(|| ours.take().expect("initialised once"));
        if ours.is_none() {
            let _ = publish.send(sampler);
        }
        Ok(sampler)
    }

    /// Wakes the thread if it sleeps longer than [`LOOK_STRETCH`] times `interval`: a call
    /// blocked now is then found within that. With every socket at the same interval this is a
    /// load and no wake-up while calls come and go, and one wake-up after the thread has gone
    /// idle.
    fn wake_within(&self, interval: Duration) {
        let sleep = self.sleep_ns.load(Ordering::SeqCst);
        if sleep > (interval * LOOK_STRETCH).as_nanos() as u64
            && self.sleep_ns.compare_exchange(sleep, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok()
        {
            self.thread.unpark();
        }
    }

    fn run(&self) {
        // How long after finding a newly blocked call the thread looks again; `None` while no
        // call is blocked.
        let mut look: Option<Duration> = None;
        loop {
            let now = Instant::now();
            let (mut next_due, mut new_calls, mut timing) = (None::<Instant>, None, false);
            {
                let mut watches = lock(&self.watches);
                // A watch whose handle has gone is only referenced here.
                watches.retain(|watch| Arc::strong_count(watch) > 1);
                for watch in watches.iter() {
                    match watch.visit(now) {
                        Found::Idle => {}
                        Found::New => {
                            new_calls = new_calls.min(Some(watch.interval)).or(Some(watch.interval))
                        }
                        Found::Timing(due) => {
                            next_due = next_due.min(Some(due)).or(Some(due));
                            timing = true;
                        }
                    }
                }
            }
            // While every call found at one look had returned by the next, looks are spaced out
            // (doubling, up to LOOK_STRETCH intervals): a ping-pong's calls last microseconds,
            // and the thread would otherwise wake every interval to find them gone. A call
            // still blocked at a look brings the spacing back to the interval.
            look = match (new_calls, look) {
                (None, _) if !timing => None,
                (None, look) => look,
                (Some(interval), _) if timing => Some(interval),
                (Some(interval), None) => Some(interval),
                (Some(interval), Some(look)) => Some((look * 2).min(interval * LOOK_STRETCH)),
            };
            if let (Some(look), Some(_)) = (look, new_calls) {
                let again = now + look;
                next_due = next_due.min(Some(again)).or(Some(again));
            }
            let sleep = next_due.map(|due| due.saturating_duration_since(Instant::now()));
            let sleep_ns = sleep.map_or(u64::MAX, |sleep| (sleep.as_nanos() as u64).max(1));
            self.sleep_ns.store(sleep_ns, Ordering::SeqCst);
            // A call that blocked after its visit above, before `sleep_ns` was published, could
            // not tell this thread to wake: look for one that this sleep would find too late.
            let missed = lock(&self.watches).iter().any(|watch| {
                let word = watch.block.load(Ordering::SeqCst);
                let too_long = sleep_ns > (watch.interval * LOOK_STRETCH).as_nanos() as u64;
                too_long && word != NOT_BLOCKED && word != watch.seen.load(Ordering::Relaxed)
            });
            match (missed, sleep) {
                (true, _) => {}
                (false, Some(sleep)) => thread::park_timeout(sleep),
                (false, None) => thread::park(),
            }
            self.sleep_ns.store(0, Ordering::SeqCst);
        }
    }
}

/// What a look at one watched socket found.
enum Found {
    /// No call blocked.
    Idle,
    /// A call that was not blocked at the previous look.
    New,
    /// A call blocked since the previous look (or before): next due then.
    Timing(Instant),
}

impl Watch {
    /// Looks at the watched call at `now`: samples it if it has been blocked for an interval.
    fn visit(&self, now: Instant) -> Found {
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else { return Found::Idle };
        let found = self.visit_state(state, now);
        self.pending.store(state.unflushed > 0, Ordering::Release);
        found
    }

    fn visit_state(&self, state: &mut WatchState, now: Instant) -> Found {
        let word = self.block.load(Ordering::Acquire);
        let seen = self.seen.swap(word, Ordering::Relaxed);
        if word != seen && state.unflushed > 0 {
            state.offer();
        }
        if word == NOT_BLOCKED || state.error.is_some() {
            return Found::Idle;
        }
        if word != seen {
            state.samples_of_call = 0;
            state.due = now + self.interval;
            return Found::New;
        }
        if now < state.due {
            return Found::Timing(state.due);
        }
        let at_ns = state.clock.now_ns();
        match sample(&state.socket, true) {
            // If the call returned meanwhile, the sample is not "during" it: drop it.
            Ok(info) if self.block.load(Ordering::Acquire) == word => {
                state.record(at_ns, word, info)
            }
            Ok(_) => {}
            Err(error) => {
                state.error = Some(error);
                return Found::Idle;
            }
        }
        state.samples_of_call += 1;
        state.due = now + spacing(self.interval, state.samples_of_call);
        Found::Timing(state.due)
    }
}

impl WatchState {
    fn record(&mut self, at_ns: u64, word: u64, info: TcpInfoSample) {
        if self.unflushed >= PENDING_CAP {
            self.dropped += 1;
            return;
        }
        let req = ReqId(word as u32);
        self.recorder.record(at_ns, self.conn, req, EventKind::TcpInfo(Box::new(info)));
        self.unflushed += 1;
        if self.unflushed >= FLUSH_EVERY {
            self.offer();
        }
    }

    /// Hands the batch over if the collector has room.
    fn offer(&mut self) {
        if self.recorder.try_flush() {
            self.unflushed = 0;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener};
    use std::sync::mpsc::{sync_channel, Receiver};

    use super::*;

    const ESTABLISHED: u8 = 1;

    /// A connected loopback pair with the kernel's defaults (Nagle on, delayed ACKs on).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    /// One request as the echo protocol's naive client sends it: the length prefix and the body
    /// in two writes; the answer in one write.
    fn split_exchange(client: &mut TcpStream, server: &mut TcpStream, body: usize) {
        client.write_all(&(body as u32).to_be_bytes()).expect("write length");
        client.write_all(&vec![7; body]).expect("write body");
        let mut request = vec![0; 4 + body];
        server.read_exact(&mut request).expect("server read");
        server.write_all(&[1; 4]).expect("server write");
        client.read_exact(&mut [0; 4]).expect("client read");
    }

    /// Waits long enough for any delayed ACK (40 ms minimum) to have gone.
    fn settle() {
        thread::sleep(Duration::from_millis(120));
    }

    fn tcp_info_events(rx: &Receiver<Vec<Event>>) -> Vec<Event> {
        rx.try_iter().flatten().collect()
    }

    fn info(event: &Event) -> &TcpInfoSample {
        match &event.kind {
            EventKind::TcpInfo(info) => info,
            other => panic!("not a TcpInfo event: {other:?}"),
        }
    }

    #[test]
    fn a_fresh_pair_is_established_and_counts_what_it_received() {
        let (mut client, mut server) = pair();
        let fresh = sample(&client, false).expect("sample client");
        assert_eq!(fresh.state, ESTABLISHED);
        assert!(fresh.snd_mss > 0, "{fresh:?}");
        assert!(!fresh.during_block);

        client.write_all(&[3; 100]).expect("client write");
        server.read_exact(&mut [0; 100]).expect("server read");
        server.write_all(&[4; 60]).expect("server write");
        client.read_exact(&mut [0; 60]).expect("client read");
        settle();

        let c = sample(&client, false).expect("sample client");
        let s = sample(&server, false).expect("sample server");
        assert!(c.rtt_us > 0, "{c:?}");
        assert_eq!(s.bytes_received, Some(100));
        assert_eq!(c.bytes_received, Some(60));
        assert_eq!(c.bytes_sent, Some(100));
        // bytes_acked counts the SYN's sequence number too.
        assert_eq!(c.bytes_acked, Some(101));
        assert_eq!(c.notsent_bytes, Some(0));
        assert_eq!(c.unacked, 0);
    }

    #[test]
    fn a_nagle_stall_holds_the_body_on_the_writer_while_the_reader_delays_its_ack() {
        let (mut client, mut server) = pair();
        // Out of quick-ACK mode: after the first exchange the server delays its ACKs.
        for _ in 0..3 {
            split_exchange(&mut client, &mut server, 64);
        }
        settle();
        let reader_before = sample(&server, false).expect("sample server");

        let wrote = Instant::now();
        client.write_all(&2048u32.to_be_bytes()).expect("write length");
        client.write_all(&[9; 2048]).expect("write body");
        let writer = sample(&client, false).expect("sample client");
        let reader = sample(&server, false).expect("sample server");

        // The 4-byte length left at once; the body waits for its ACK (Minshall's Nagle).
        assert_eq!(writer.notsent_bytes, Some(2048), "{writer:?}");
        assert_eq!(writer.unacked, 1, "{writer:?}");
        let sent = writer.bytes_sent.expect("6.18 has bytes_sent");
        let acked = writer.bytes_acked.expect("bytes_acked");
        // bytes_acked includes the SYN, so the 4 bytes in flight show as 3.
        assert_eq!(sent + 1 - acked, 4, "{writer:?}");
        // The reader got the length and sent nothing back: its ACK is delayed.
        assert_eq!(reader.segs_out, reader_before.segs_out, "{reader:?}");
        assert!(reader.ato_us >= 40_000, "{reader:?}");

        // Poll until the body leaves; note when the reader's first segment went out.
        let mut first_reader_segment: Option<(Duration, u32)> = None;
        let stall = loop {
            let w = sample(&client, false).expect("sample client");
            let r = sample(&server, false).expect("sample server");
            let out = r.segs_out.expect("segs_out") - reader_before.segs_out.expect("segs_out");
            if out > 0 && first_reader_segment.is_none() {
                first_reader_segment = Some((wrote.elapsed(), out));
            }
            if w.notsent_bytes == Some(0) {
                break wrote.elapsed();
            }
            assert!(wrote.elapsed() < Duration::from_secs(2), "body never left: {w:?}");
            thread::sleep(Duration::from_micros(500));
        };
        let (ack_after, segments) = first_reader_segment.expect("the ACK that released the body");
        eprintln!(
            "nagle stall: writer {writer:?}\nreader {reader:?}\nbody held {stall:?}; \
             reader's first segment after {ack_after:?} ({segments} segment(s) by then)"
        );
        assert!(ack_after >= Duration::from_millis(30), "{ack_after:?}");
        assert!(stall >= Duration::from_millis(30), "{stall:?}");
        assert!(stall < Duration::from_millis(500), "{stall:?}");
        server.read_exact(&mut [0; 2052]).expect("server read");
    }

    #[test]
    fn a_blocked_read_is_sampled_every_interval_until_it_returns() {
        let (mut client, mut server) = pair();
        let clock = Clock::start();
        let (tx, rx) = sync_channel(1024);
        let clone = client.try_clone().expect("try_clone");
        let interval = Duration::from_millis(1);
        let sampler =
            BlockSampler::start(clone, interval, clock, Side::Client, ConnId(7), tx.clone())
                .expect("start sampler");
        let peer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            server.write_all(b"late").expect("server write");
            server
        });

        let blocked_ns = clock.now_ns();
        // The measuring thread's recorder: the samples still waiting when the call returns
        // come through it.
        let mut rec = Recorder::new(clock, Side::Client, tx.clone());
        sampler.blocked(ReqId(3));
        client.read_exact(&mut [0; 4]).expect("client read");
        sampler.unblocked(&mut rec);
        let unblocked_ns = clock.now_ns();
        rec.flush();
        let stopping = Instant::now();
        drop(sampler);
        let stopped_after = stopping.elapsed();
        let _server = peer.join().expect("peer thread");

        let events = tcp_info_events(&rx);
        eprintln!(
            "blocked {} ms: {} samples; stopped in {stopped_after:?}",
            (unblocked_ns - blocked_ns) / 1_000_000,
            events.len()
        );
        assert!(events.len() >= 5, "{} samples", events.len());
        for event in &events {
            assert_eq!((event.side, event.conn, event.req), (Side::Client, ConnId(7), ReqId(3)));
            assert!(event.at_ns >= blocked_ns + 1_000_000 && event.at_ns <= unblocked_ns);
            let info = info(event);
            assert!(info.during_block);
            assert_eq!(info.state, ESTABLISHED);
        }
        assert!(stopped_after < Duration::from_millis(100), "{stopped_after:?}");
    }

    /// A short block's few samples (fewer than the sampler hands over by itself) are in the
    /// measuring thread's batch when the call returns: they reach the collector with its events,
    /// not whenever the sampler next looks, which a busy CPU can put off.
    #[test]
    fn a_calls_samples_are_handed_over_by_its_thread_when_it_returns() {
        let (mut client, mut server) = pair();
        let clock = Clock::start();
        let (tx, rx) = sync_channel(1024);
        let mut rec = Recorder::new(clock, Side::Client, tx.clone());
        let clone = client.try_clone().expect("try_clone");
        let sampler = BlockSampler::start(
            clone,
            Duration::from_millis(1),
            clock,
            Side::Client,
            ConnId(2),
            tx,
        )
        .expect("start sampler");
        let peer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            server.write_all(b"soon").expect("server write");
            server
        });
        sampler.blocked(ReqId(1));
        client.read_exact(&mut [0; 4]).expect("client read");
        sampler.unblocked(&mut rec);
        let in_batch = rec.mark();
        rec.flush();
        let handed = tcp_info_events(&rx).len();
        sampler.stop().expect("stop");
        let _server = peer.join().expect("peer thread");
        let later = tcp_info_events(&rx).len();
        eprintln!("{handed} samples with the thread's batch ({in_batch} in it), {later} later");
        assert!(handed >= 2, "the samples of a 5 ms block came with the call: {handed}");
        assert_eq!(handed, in_batch, "through the thread's own batch");
    }

    #[test]
    fn a_sampler_never_blocked_records_nothing() {
        let (client, _server) = pair();
        let (tx, rx) = sync_channel(1024);
        let clone = client.try_clone().expect("try_clone");
        let interval = Duration::from_millis(1);
        let sampler =
            BlockSampler::start(clone, interval, Clock::start(), Side::Server, ConnId(1), tx)
                .expect("start sampler");
        // Calls shorter than an interval are not samples either.
        let mut rec = Recorder::discarding(Clock::start(), Side::Server);
        for req in 0..20 {
            sampler.blocked(ReqId(req));
            sampler.unblocked(&mut rec);
            thread::sleep(Duration::from_micros(1500));
        }
        thread::sleep(Duration::from_millis(20));
        sampler.stop().expect("stop");
        assert_eq!(tcp_info_events(&rx).len(), 0);
    }

    #[test]
    fn dropping_a_sampler_stops_it_without_waiting_out_the_interval() {
        let (client, _server) = pair();
        let (tx, rx) = sync_channel(16);
        let clone = client.try_clone().expect("try_clone");
        let interval = Duration::from_secs(10);
        let sampler =
            BlockSampler::start(clone, interval, Clock::start(), Side::Client, ConnId(1), tx)
                .expect("start sampler");
        sampler.blocked(ReqId(0));
        thread::sleep(Duration::from_millis(20));
        let stopping = Instant::now();
        drop(sampler);
        assert!(stopping.elapsed() < Duration::from_millis(500), "{:?}", stopping.elapsed());
        assert_eq!(tcp_info_events(&rx).len(), 0);
    }

    /// The story the sampler exists for: while the client waits for the answer, its body is
    /// still in its own socket (notsent), and the server, waiting for the body, is delaying
    /// the ACK that would release it.
    #[test]
    fn block_samples_show_a_nagle_stall_while_it_happens() {
        let (mut client, mut server) = pair();
        for _ in 0..3 {
            split_exchange(&mut client, &mut server, 64);
        }
        settle();
        let clock = Clock::start();
        let interval = Duration::from_millis(1);
        let (client_tx, client_rx) = sync_channel(1024);
        let (server_tx, server_rx) = sync_channel(1024);
        let client_clone = client.try_clone().expect("try_clone");
        let server_clone = server.try_clone().expect("try_clone");
        // The measuring threads' recorders, on the same channels.
        let mut client_rec = Recorder::new(clock, Side::Client, client_tx.clone());
        let mut server_rec = Recorder::new(clock, Side::Server, server_tx.clone());
        let client_sampler =
            BlockSampler::start(client_clone, interval, clock, Side::Client, ConnId(1), client_tx)
                .expect("start client sampler");
        let server_sampler =
            BlockSampler::start(server_clone, interval, clock, Side::Server, ConnId(1), server_tx)
                .expect("start server sampler");

        let server_thread = thread::spawn(move || {
            let mut length = [0; 4];
            server.read_exact(&mut length).expect("server read length");
            let mut body = vec![0; u32::from_be_bytes(length) as usize];
            server_sampler.blocked(ReqId(5));
            server.read_exact(&mut body).expect("server read body");
            server_sampler.unblocked(&mut server_rec);
            server.write_all(&[1; 4]).expect("server write");
            drop(server_rec);
            server_sampler.stop().expect("server sampler");
        });
        let start = Instant::now();
        client.write_all(&2048u32.to_be_bytes()).expect("write length");
        client.write_all(&[9; 2048]).expect("write body");
        client_sampler.blocked(ReqId(5));
        client.read_exact(&mut [0; 4]).expect("client read");
        client_sampler.unblocked(&mut client_rec);
        drop(client_rec);
        let took = start.elapsed();
        client_sampler.stop().expect("client sampler");
        server_thread.join().expect("server thread");

        let client_events = tcp_info_events(&client_rx);
        let server_events = tcp_info_events(&server_rx);
        let held = client_events.iter().filter(|e| info(e).notsent_bytes == Some(2048)).count();
        let delaying = server_events.iter().filter(|e| info(e).ato_us >= 40_000).count();
        eprintln!(
            "exchange took {took:?}; client: {} samples, {held} with notsent 2048; \
             server: {} samples, {delaying} with ato >= 40 ms\nfirst client sample {:?}\n\
             first server sample {:?}",
            client_events.len(),
            server_events.len(),
            client_events.first().map(info),
            server_events.first().map(info),
        );
        assert!(took >= Duration::from_millis(30), "no stall: {took:?}");
        assert!(held >= 5, "{held} of {} client samples", client_events.len());
        assert!(delaying >= 5, "{delaying} of {} server samples", server_events.len());
    }
}
