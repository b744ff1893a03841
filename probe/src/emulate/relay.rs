//! The relay thread: reads packets from each namespace's TUN device, passes them through that
//! direction's [`Direction`], and writes them into the other namespace when they are due.
//! It sleeps in ppoll() until a packet arrives or the next one is due, never spinning.
//!
//! A packet enters the link when the sender's kernel handed it to its device, as that kernel
//! stamped it ([`EntryTap`]), not when the relay got round to reading it; without a stamp, when
//! it was read.
//!
//! With packet capture on (`--capture`), each TCP packet read from a device is also recorded as
//! a `Segment` event of the side that sent it, at that same entry time: before the link's queue
//! and delay. Only its headers are parsed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use ackscope_shared::packet::parse_ip;
use ackscope_shared::{ConnId, EventKind, LinkAction, LinkEvent, ReqId, Side};

use super::entry::EntryTap;
use super::netns::Offload;
use super::queue::{Direction, Frame};
use crate::capture::Tagger;
use crate::net::record::{Clock, Recorder};

/// The longest sleep: how soon the relay sees that it should stop.
const STOP_CHECK_NS: u64 = 20_000_000;
/// Events are handed on at least this often, so a viewer sees the link while it runs.
const FLUSH_EVERY_NS: u64 = 100_000_000;
/// Packets read from one device before looking at due deliveries again.
const READ_BURST: usize = 64;
/// Room for the largest packet a device hands over: a GSO packet of 64 KB plus its header
/// (a read into less would cut it short).
const READ_BUFFER: usize = 1 << 17;
/// Lateness samples kept for [`RelayStats`] (a few MB at most).
const MAX_LATENESS_SAMPLES: usize = 1 << 20;

/// One direction: the device its packets come from (they go to the other path's device).
pub struct Path {
    pub from: File,
    /// The stamps of the packets `from` hands over, if the tap could be opened.
    pub entry: Option<EntryTap>,
    pub direction: Direction,
    pub recorder: Recorder,
}

/// What the relay did, for benchmarks and tests.
#[derive(Clone, Debug, Default)]
pub struct RelayStats {
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    pub dropped_packets: u64,
    /// Each delivery's write time minus its due time, in nanoseconds (the first million).
    pub lateness_ns: Vec<u64>,
    /// Segments recorded by the capture, when there was one.
    pub captured_segments: Option<u64>,
    /// Packets that entered the link at their kernel's stamp ([`EntryTap`]), and packets
    /// timed by the relay's read for want of one.
    pub stamped_packets: u64,
    pub unstamped_packets: u64,
}

pub struct Relay {
    stop: Arc<AtomicBool>,
    /// Taken by the first [`Relay::stop`]; behind a lock so a shared link can be stopped.
    thread: Mutex<Option<JoinHandle<io::Result<RelayStats>>>>,
}

impl Relay {
    /// Starts relaying `paths[0]` (client to server) and `paths[1]` (server to client), whose
    /// devices both pass packets as `offload` says; with a `capture`, recording each TCP packet
    /// read as a segment of the side that sent it.
    pub fn start(
        paths: [Path; 2],
        clock: Clock,
        offload: Offload,
        capture: Option<Tagger>,
    ) -> io::Result<Relay> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let header_len = offload.header_len();
        let thread = thread::Builder::new()
            .name("link-relay".into())
            .spawn(move || run(paths, clock, header_len, capture, &flag))?;
        Ok(Relay { stop, thread: Mutex::new(Some(thread)) })
    }

    /// Stops the relay (packets still held are dropped silently) and returns what it did. Its
    /// recorders are dropped then, so a run's collector can see the end of its events.
    pub fn stop(&self) -> io::Result<RelayStats> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        match thread {
            Some(thread) => {
                thread.join().map_err(|_| io::Error::other("the link relay thread panicked"))?
            }
            None => Ok(RelayStats::default()),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn run(
    mut paths: [Path; 2],
    clock: Clock,
    header_len: usize,
    mut capture: Option<Tagger>,
    stop: &AtomicBool,
) -> io::Result<RelayStats> {
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack; 1 ns keeps ppoll()'s
    // wake-ups within microseconds of the due time instead of the default 50 us slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let mut stats = RelayStats::default();
    let mut buffer = vec![0u8; READ_BUFFER];
    let mut last_flush_ns = clock.now_ns();
    while !stop.load(Ordering::Relaxed) {
        deliver_due(&mut paths, &clock, &mut stats);
        let now_ns = clock.now_ns();
        let next_due = paths.iter().filter_map(|p| p.direction.next_due_ns()).min();
        let sleep_ns =
            next_due.map_or(STOP_CHECK_NS, |due| due.saturating_sub(now_ns)).min(STOP_CHECK_NS);
        let ready = wait_readable([&paths[0].from, &paths[1].from], sleep_ns)?;
        for ((path, readable), sender) in paths.iter_mut().zip(ready).zip(SENDERS) {
            if readable {
                let capture = capture.as_mut().map(|tagger| (tagger, sender));
                read_burst(path, &mut buffer, header_len, &clock, &mut stats, capture)?;
            }
        }
        let now_ns = clock.now_ns();
        if now_ns - last_flush_ns >= FLUSH_EVERY_NS {
            last_flush_ns = now_ns;
            if let Some(tagger) = &mut capture {
                tagger.resolve_pending(&mut paths[0].recorder, false);
            }
            paths.iter_mut().for_each(|p| p.recorder.flush());
        } else {
            paths.iter_mut().for_each(|p| p.recorder.hand_over());
        }
    }
    if let Some(tagger) = &mut capture {
        tagger.resolve_pending(&mut paths[0].recorder, true);
        tagger.log_unmatched();
        stats.captured_segments = Some(tagger.segments());
    }
    tracing::info!(
        "emulated link: {} packets entered the link at their kernel's stamp, {} when the relay \
         read them",
        stats.stamped_packets,
        stats.unstamped_packets
    );
    Ok(stats)
}

/// Who sends the packets read from `paths[0]` and `paths[1]`.
const SENDERS: [Side; 2] = [Side::Client, Side::Server];

fn deliver_due(paths: &mut [Path; 2], clock: &Clock, stats: &mut RelayStats) {
    for index in 0..paths.len() {
        let now_ns = clock.now_ns();
        let to_index = 1 - index;
        while let Some(delivery) = paths[index].direction.poll_delivery(now_ns) {
            // A write to a TUN device hands the packet to the namespace's stack at once; if the
            // stack refuses it (memory), the packet is lost like on a real link.
            let written = (&paths[to_index].from).write(&delivery.frame.bytes);
            let written_ns = clock.now_ns();
            let mut event = delivery.event;
            if written.is_ok() {
                stats.delivered_packets += 1;
                stats.delivered_bytes += u64::from(delivery.frame.ip_len());
                if stats.lateness_ns.len() < MAX_LATENESS_SAMPLES {
                    stats.lateness_ns.push(written_ns.saturating_sub(delivery.due_ns));
                }
            } else {
                stats.dropped_packets += 1;
                event.action = LinkAction::Dropped;
            }
            record(&mut paths[index].recorder, written_ns, event);
        }
    }
}

fn read_burst(
    path: &mut Path,
    buffer: &mut [u8],
    header_len: usize,
    clock: &Clock,
    stats: &mut RelayStats,
    mut capture: Option<(&mut Tagger, Side)>,
) -> io::Result<()> {
    for _ in 0..READ_BURST {
        let len = match path.from.read(buffer) {
            Ok(len) => len,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("link relay read: {e}"))),
        };
        // Only IPv4 is relayed: the kernel's own IPv6 chatter (router solicitations) is not
        // part of any experiment.
        if len <= header_len || buffer[header_len] >> 4 != 4 {
            continue;
        }
        let read_ns = clock.now_ns();
        let packet = &buffer[header_len..len];
        // Its kernel's stamp is never after the read; the clamp only guards against a stepped
        // realtime clock.
        let entered_ns = match path.entry.as_mut().and_then(|tap| tap.entered(packet, clock)) {
            Some(stamped_ns) => {
                stats.stamped_packets += 1;
                stamped_ns.min(read_ns)
            }
            None => {
                stats.unstamped_packets += 1;
                read_ns
            }
        };
        if let Some((tagger, sender)) = &mut capture {
            capture_segment(tagger, &mut path.recorder, *sender, packet, entered_ns);
        }
        let frame = Frame { bytes: buffer[..len].to_vec(), header_len };
        let event = path.direction.handle_packet(entered_ns, frame);
        if event.action == LinkAction::Dropped {
            stats.dropped_packets += 1;
        }
        record(&mut path.recorder, entered_ns, event);
    }
    Ok(())
}

/// Records the TCP segment in `packet`, sent by `sender` and handed to its device at `at_ns`,
/// for the connection of its client port (anything else is not the run's, and skipped).
fn capture_segment(
    tagger: &mut Tagger,
    recorder: &mut Recorder,
    sender: Side,
    packet: &[u8],
    at_ns: u64,
) {
    let Ok(packet) = parse_ip(packet) else { return };
    let client_port = match sender {
        Side::Client => packet.src_port,
        Side::Server => packet.dst_port,
    };
    tagger.record(recorder, sender, client_port, at_ns, packet.segment);
}

fn record(recorder: &mut Recorder, at_ns: u64, event: LinkEvent) {
    recorder.record(at_ns, ConnId(0), ReqId(0), EventKind::Link(event));
}

/// Waits up to `timeout_ns` for either device to have a packet; which ones do.
fn wait_readable(files: [&File; 2], timeout_ns: u64) -> io::Result<[bool; 2]> {
    let mut fds =
        files.map(|f| libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 });
    let timeout = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as _,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `fds` is a live array of two pollfd and `timeout` a live timespec; no signal mask.
    let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &timeout, std::ptr::null()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok([false; 2]);
        }
        return Err(io::Error::new(e.kind(), format!("link relay ppoll: {e}")));
    }
    let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    if fds.iter().any(|fd| fd.revents & bad != 0) {
        return Err(io::Error::other("link relay: a TUN device went away"));
    }
    Ok(fds.map(|fd| fd.revents & libc::POLLIN != 0))
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};
    use std::sync::mpsc::sync_channel;
    use std::time::Duration;

    use super::*;
    use crate::emulate::netns::{Namespace, TUN_NAME};
    use crate::emulate::queue::DirectionConfig;

    fn in_namespace<T: Send>(namespace: &Namespace, f: impl FnOnce() -> io::Result<T> + Send) -> T {
        namespace.run_in(f).expect("set up in the namespace")
    }

    /// A packet the relay reads late (here it is not running yet, as when a busy machine keeps
    /// it off the CPU) still leaves a link with a rate its delay after it was sent: the link
    /// times it by its kernel's stamp. Timed by the read it would arrive 60 ms later than that.
    #[test]
    #[ignore = "needs root (network namespaces): cargo xtask test runs it as root"]
    fn a_packet_read_late_is_still_delivered_its_delay_after_it_was_sent() {
        // SAFETY: geteuid() cannot fail and has no side effects.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "network namespaces need root: run this test as root (cargo xtask test does)"
        );
        let (client_ip, server_ip) = (Ipv4Addr::new(10, 45, 0, 1), Ipv4Addr::new(10, 45, 0, 2));
        let (client, client_tun) = Namespace::create(client_ip, server_ip, 1500, Offload::Plain)
            .expect("the client's namespace");
        let (server, server_tun) = Namespace::create(server_ip, client_ip, 1500, Offload::Plain)
            .expect("the server's namespace");
        let receiver = in_namespace(&server, || {
            let socket = UdpSocket::bind((server_ip, 5001))?;
            socket.set_read_timeout(Some(Duration::from_secs(2)))?;
            Ok(socket)
        });
        let sender = in_namespace(&client, || UdpSocket::bind((client_ip, 0)));
        let client_tap = in_namespace(&client, || EntryTap::open(TUN_NAME));
        let server_tap = in_namespace(&server, || EntryTap::open(TUN_NAME));

        let clock = Clock::start();
        sender.send_to(b"late", (server_ip, 5001)).expect("send into the client's device");
        let sent_ns = clock.now_ns();
        // The relay is not running yet: the packet waits in the client device's queue.
        thread::sleep(Duration::from_millis(60));
        let config = DirectionConfig {
            rate_bps: Some(1_000_000_000),
            delay_ns: 100_000_000,
            queue_packets: 100,
            loss_ppm: 0,
        };
        let (sink, _events) = sync_channel(1024);
        let paths = [
            Path {
                from: client_tun,
                entry: Some(client_tap),
                direction: Direction::new(config, 1),
                recorder: Recorder::new(clock, Side::Client, sink.clone()),
            },
            Path {
                from: server_tun,
                entry: Some(server_tap),
                direction: Direction::new(config, 2),
                recorder: Recorder::new(clock, Side::Server, sink),
            },
        ];
        let relay = Relay::start(paths, clock, Offload::Plain, None).expect("the relay");
        let mut received = [0u8; 16];
        let (len, _) = receiver.recv_from(&mut received).expect("the packet crosses the link");
        let arrived_ns = clock.now_ns();
        let stats = relay.stop().expect("the relay's stats");

        assert_eq!(&received[..len], b"late");
        let crossed_ms = (arrived_ns - sent_ns) as f64 / 1e6;
        assert!(
            (99.0..140.0).contains(&crossed_ms),
            "sent to arrived: {crossed_ms:.1} ms; the link's delay is 100 ms, and the relay read \
             the packet 60 ms after it was sent"
        );
        assert!(stats.stamped_packets >= 1, "{stats:?}");
    }
}
