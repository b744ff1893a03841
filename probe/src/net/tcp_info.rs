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
use std::sync::Arc;
use std::thread::{self, JoinHandle};
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
/// block and [`BlockSampler::unblocked`] right after it returns. A thread of the sampler's own
/// wakes every `interval`; once the same call has been blocked for at least one full interval
/// it samples, and keeps sampling every interval until the call returns. Each sample becomes an
/// [`EventKind::TcpInfo`] event with `during_block: true`, the request id given to `blocked`,
/// stamped immediately before the `getsockopt`, and sent through the sampler's own [`Recorder`].
/// Calls that return within an interval are never sampled, so quick exchanges get no extra
/// syscalls and no contention on the socket lock.
///
/// Why a thread and not a timer signal: a signal delivered to the measuring thread interrupts
/// the very syscall being measured (`EINTR`, or a silent restart), changing what is measured,
/// and a signal handler may not allocate or send on a channel. A thread sleeps on its own and
/// reads the socket through its own descriptor.
///
/// Why the measuring thread only touches atomics: `blocked`/`unblocked` sit between the
/// syscall and its Start/Done stamps. A lock, a channel send or a syscall there would add to
/// the measured time and could wake the sampler onto a core mid-measurement; a release store is
/// one plain store on x86_64.
///
/// The sampler holds a duplicate descriptor (`try_clone`) of the socket: the kernel closes the
/// connection (sends FIN) only when every descriptor is closed, so drop the sampler before
/// relying on dropping the stream to close it. Dropping (or [`BlockSampler::stop`]) wakes the
/// thread and joins it at once, whatever the interval. If the collector stops draining its
/// channel, the thread waits in [`Recorder::flush`] like every other recorder.
pub struct BlockSampler {
    shared: Arc<SamplerShared>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

/// Between the measuring thread and the sampler thread.
struct SamplerShared {
    /// [`NOT_BLOCKED`], or the current blocked call: its generation in the high 32 bits (never
    /// 0), its request id in the low 32 bits. The generation tells two consecutive calls for
    /// the same request apart, so the sampler never mistakes them for one long block.
    block: AtomicU64,
    /// The generation of the next call; written by [`BlockSampler::blocked`] only.
    next_generation: AtomicU32,
    stop: AtomicBool,
}

const NOT_BLOCKED: u64 = 0;

/// The sampler's batch is sent on after this many samples, and when a block ends: bounds the
/// batch, and how late the UI sees a long stall.
const FLUSH_EVERY: usize = 8;

/// Shorter intervals would keep a core busy with samples; 1-5 ms resolves a 40 ms stall.
const MIN_INTERVAL: Duration = Duration::from_micros(100);

impl BlockSampler {
    /// Starts the sampler thread. `socket` is a `try_clone` of the measured socket; `side` and
    /// `conn` tag every event. `interval` is clamped to at least 100 us.
    pub fn start(
        socket: TcpStream,
        interval: Duration,
        clock: Clock,
        side: Side,
        conn: ConnId,
        sink: SyncSender<Vec<Event>>,
    ) -> io::Result<BlockSampler> {
        let shared = Arc::new(SamplerShared {
            block: AtomicU64::new(NOT_BLOCKED),
            next_generation: AtomicU32::new(1),
            stop: AtomicBool::new(false),
        });
        let worker = Worker {
            shared: Arc::clone(&shared),
            socket,
            interval: interval.max(MIN_INTERVAL),
            clock,
            conn,
            recorder: Recorder::new(clock, side, sink),
        };
        let thread = thread::Builder::new()
            .name(format!("tcp-info {} {}", side.name(), conn.0))
            .spawn(move || worker.run())
            .map_err(|e| context(e, "spawn the TCP_INFO sampler thread"))?;
        Ok(BlockSampler { shared, thread: Some(thread) })
    }

    /// The measuring thread (one thread: the one making the calls) is about to make a call for
    /// `req` that may block.
    pub fn blocked(&self, req: ReqId) {
        let mut generation = self.shared.next_generation.load(Ordering::Relaxed);
        if generation == 0 {
            generation = 1; // after 2^32 calls: 0 would read as NOT_BLOCKED
        }
        self.shared.next_generation.store(generation.wrapping_add(1), Ordering::Relaxed);
        let word = (u64::from(generation) << 32) | u64::from(req.0);
        self.shared.block.store(word, Ordering::Release);
    }

    /// The call announced by [`BlockSampler::blocked`] returned.
    pub fn unblocked(&self) {
        self.shared.block.store(NOT_BLOCKED, Ordering::Release);
    }

    /// Stops and joins the thread; returns the error that ended sampling early, if any (a
    /// failed `getsockopt`, which a live socket does not produce).
    pub fn stop(mut self) -> io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> io::Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.shared.stop.store(true, Ordering::Release);
        thread.thread().unpark();
        match thread.join() {
            Ok(result) => result,
            Err(_) => Err(io::Error::other("the TCP_INFO sampler thread panicked")),
        }
    }
}

impl Drop for BlockSampler {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// The sampler thread's state.
struct Worker {
    shared: Arc<SamplerShared>,
    socket: TcpStream,
    interval: Duration,
    clock: Clock,
    conn: ConnId,
    recorder: Recorder,
}

impl Worker {
    fn run(mut self) -> io::Result<()> {
        // The block word seen at the previous tick: seeing the same call again one interval
        // later means it has been blocked for at least a full interval.
        let mut seen = NOT_BLOCKED;
        let mut unflushed = 0;
        while self.sleep_one_interval() {
            let block = self.shared.block.load(Ordering::Acquire);
            let mut sampled = false;
            if block != NOT_BLOCKED && block == seen {
                let at_ns = self.clock.now_ns();
                let info = sample(&self.socket, true)?;
                // If the call returned meanwhile, the sample is not "during" it: drop it.
                if self.shared.block.load(Ordering::Acquire) == block {
                    let req = ReqId(block as u32);
                    let kind = EventKind::TcpInfo(Box::new(info));
                    self.recorder.record(at_ns, self.conn, req, kind);
                    unflushed += 1;
                    sampled = true;
                }
            }
            if unflushed >= FLUSH_EVERY || (unflushed > 0 && !sampled) {
                self.recorder.flush();
                unflushed = 0;
            }
            seen = block;
        }
        self.recorder.flush();
        Ok(())
    }

    /// Sleeps one full interval (parking can wake early); `false` once asked to stop.
    fn sleep_one_interval(&self) -> bool {
        let deadline = Instant::now() + self.interval;
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            thread::park_timeout(deadline - now);
        }
    }
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
        let sampler = BlockSampler::start(clone, interval, clock, Side::Client, ConnId(7), tx)
            .expect("start sampler");
        let peer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            server.write_all(b"late").expect("server write");
            server
        });

        let blocked_ns = clock.now_ns();
        sampler.blocked(ReqId(3));
        client.read_exact(&mut [0; 4]).expect("client read");
        sampler.unblocked();
        let unblocked_ns = clock.now_ns();
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
        for req in 0..20 {
            sampler.blocked(ReqId(req));
            sampler.unblocked();
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
            server_sampler.unblocked();
            server.write_all(&[1; 4]).expect("server write");
            server_sampler.stop().expect("server sampler");
        });
        let start = Instant::now();
        client.write_all(&2048u32.to_be_bytes()).expect("write length");
        client.write_all(&[9; 2048]).expect("write body");
        client_sampler.blocked(ReqId(5));
        client.read_exact(&mut [0; 4]).expect("client read");
        client_sampler.unblocked();
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
