//! One direction of the emulated link, without IO: a drop-tail queue in front of a rate
//! serializer, then a fixed delay (the Mahimahi model). Time is passed in by the caller.

use std::collections::VecDeque;

use ackscope_shared::{LinkAction, LinkEvent};

/// What one direction does to the packets it is handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectionConfig {
    /// `None`: no serialization time (as fast as the relay goes).
    pub rate_bps: Option<u64>,
    pub delay_ns: u64,
    pub queue_packets: u32,
    pub loss_ppm: u32,
}

/// A packet as one TUN device hands it over and the other takes it: the IP packet, after a
/// virtio-net header of `header_len` bytes when the devices pass GSO packets whole (see
/// `netns::Offload`). The link's model counts the IP bytes only.
pub struct Frame {
    pub bytes: Vec<u8>,
    pub header_len: usize,
}

impl Frame {
    /// A plain IP packet, with no header in front.
    pub fn ip(bytes: Vec<u8>) -> Frame {
        Frame { bytes, header_len: 0 }
    }

    /// The IP packet's length: what the serializer, the queue and the events count.
    pub fn ip_len(&self) -> u32 {
        self.bytes.len().saturating_sub(self.header_len) as u32
    }
}

/// A packet leaving the far end.
pub struct Delivery {
    pub frame: Frame,
    pub event: LinkEvent,
    /// When it was due: the relay's lateness is the time it is written minus this.
    pub due_ns: u64,
}

struct Held {
    packet: u32,
    /// When its last bit has left the serializer: it leaves the queue then.
    sent_ns: u64,
    /// When it comes out of the far end.
    due_ns: u64,
    frame: Frame,
}

/// A direction's queue and delay line. Packets are FIFO, so both are one deque each: the queue
/// holds packets still waiting for or in the serializer, the delay line those past it.
pub struct Direction {
    config: DirectionConfig,
    rng: SplitMix64,
    queue: VecDeque<Held>,
    line: VecDeque<Held>,
    queued_bytes: u32,
    /// When the serializer is free again.
    free_ns: u64,
    next_packet: u32,
}

impl Direction {
    pub fn new(config: DirectionConfig, seed: u64) -> Direction {
        Direction {
            config,
            rng: SplitMix64(seed),
            queue: VecDeque::new(),
            line: VecDeque::new(),
            queued_bytes: 0,
            free_ns: 0,
            next_packet: 0,
        }
    }

    /// A packet arrives at `now_ns`: it is queued, or dropped (queue full, or random loss).
    pub fn handle_packet(&mut self, now_ns: u64, frame: Frame) -> LinkEvent {
        self.advance(now_ns);
        let packet = self.next_packet;
        self.next_packet = self.next_packet.wrapping_add(1);
        let len = frame.ip_len();
        let lost = self.config.loss_ppm > 0
            && self.rng.next() % 1_000_000 < u64::from(self.config.loss_ppm);
        if lost || self.queue.len() >= self.config.queue_packets as usize {
            return event(LinkAction::Dropped, packet, len, self.queued_bytes);
        }
        let serialize_ns = self
            .config
            .rate_bps
            .map_or(0, |bps| (u128::from(len) * 8 * 1_000_000_000 / u128::from(bps.max(1))) as u64);
        let sent_ns = self.free_ns.max(now_ns) + serialize_ns;
        self.free_ns = sent_ns;
        let held = Held { packet, sent_ns, due_ns: sent_ns + self.config.delay_ns, frame };
        self.queued_bytes += len;
        self.queue.push_back(held);
        event(LinkAction::Enqueued, packet, len, self.queued_bytes)
    }

    /// The next packet due by `now_ns`, with its `Delivered` event; `None` when none is.
    pub fn poll_delivery(&mut self, now_ns: u64) -> Option<Delivery> {
        self.advance(now_ns);
        if self.line.front()?.due_ns > now_ns {
            return None;
        }
        let held = self.line.pop_front().expect("front() was Some");
        let len = held.frame.ip_len();
        Some(Delivery {
            event: event(LinkAction::Delivered, held.packet, len, self.queued_bytes),
            due_ns: held.due_ns,
            frame: held.frame,
        })
    }

    /// When the next packet is due, if any is held.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.line.front().or(self.queue.front()).map(|held| held.due_ns)
    }

    /// Moves packets whose last bit has left the serializer from the queue to the delay line.
    fn advance(&mut self, now_ns: u64) {
        while self.queue.front().is_some_and(|held| held.sent_ns <= now_ns) {
            let held = self.queue.pop_front().expect("front() was Some");
            self.queued_bytes -= held.frame.ip_len();
            self.line.push_back(held);
        }
    }
}

fn event(action: LinkAction, packet: u32, bytes: u32, queued_bytes: u32) -> LinkEvent {
    LinkEvent { action, packet, bytes, queued_bytes }
}

/// A small deterministic PRNG (SplitMix64): the same seed drops the same packets.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn config() -> DirectionConfig {
        DirectionConfig {
            rate_bps: Some(12_000_000),
            delay_ns: 20 * MS,
            queue_packets: 2,
            loss_ppm: 0,
        }
    }

    #[test]
    fn a_packet_is_due_after_its_serialization_and_the_delay() {
        // 1500 bytes at 12 Mbit/s: 1 ms on the wire.
        let mut dir = Direction::new(config(), 1);
        let ev = dir.handle_packet(0, Frame::ip(vec![0; 1500]));
        assert_eq!(ev.action, LinkAction::Enqueued);
        assert_eq!(ev.queued_bytes, 1500);
        assert_eq!(dir.next_due_ns(), Some(21 * MS));
        assert!(dir.poll_delivery(21 * MS - 1).is_none());
        let out = dir.poll_delivery(21 * MS).unwrap();
        let ev = out.event;
        assert_eq!(
            (out.frame.bytes.len(), ev.action, ev.packet, ev.queued_bytes),
            (1500, LinkAction::Delivered, 0, 0)
        );
    }

    #[test]
    fn back_to_back_packets_wait_for_the_serializer_and_the_full_queue_drops() {
        let mut dir = Direction::new(config(), 1);
        dir.handle_packet(0, Frame::ip(vec![0; 1500]));
        dir.handle_packet(0, Frame::ip(vec![0; 1500]));
        let third = dir.handle_packet(0, Frame::ip(vec![0; 1500]));
        assert_eq!(
            (third.action, third.packet, third.queued_bytes),
            (LinkAction::Dropped, 2, 3000)
        );
        // The first has left the serializer at 1 ms: there is room again.
        assert_eq!(dir.handle_packet(MS, Frame::ip(vec![0; 100])).action, LinkAction::Enqueued);
        assert_eq!(dir.poll_delivery(22 * MS).unwrap().event.packet, 0);
        assert_eq!(dir.poll_delivery(22 * MS).unwrap().event.packet, 1);
        assert!(dir.poll_delivery(22 * MS).is_none(), "the third is due at 22.07 ms");
        assert_eq!(dir.poll_delivery(23 * MS).unwrap().event.packet, 3);
    }

    #[test]
    fn a_frames_header_is_passed_on_but_not_counted() {
        // 1500 IP bytes behind a 10-byte virtio-net header: 1 ms at 12 Mbit/s, not 1.0067 ms.
        let mut dir = Direction::new(config(), 1);
        let ev = dir.handle_packet(0, Frame { bytes: vec![7; 1510], header_len: 10 });
        assert_eq!((ev.bytes, ev.queued_bytes), (1500, 1500));
        assert_eq!(dir.next_due_ns(), Some(21 * MS));
        let out = dir.poll_delivery(21 * MS).unwrap();
        assert_eq!((out.frame.bytes.len(), out.event.bytes), (1510, 1500));
    }

    #[test]
    fn without_a_rate_only_the_delay_counts() {
        let mut dir = Direction::new(DirectionConfig { rate_bps: None, ..config() }, 1);
        dir.handle_packet(5, Frame::ip(vec![0; 9000]));
        assert_eq!(dir.next_due_ns(), Some(20 * MS + 5));
    }

    #[test]
    fn loss_is_deterministic_per_seed_and_near_the_configured_rate() {
        let lossy = DirectionConfig { loss_ppm: 100_000, queue_packets: 1_000_000, ..config() };
        let drops = |seed| {
            let mut dir = Direction::new(lossy, seed);
            (0..10_000u64)
                .map(|i| {
                    dir.handle_packet(i * MS, Frame::ip(vec![0; 40])).action == LinkAction::Dropped
                })
                .collect::<Vec<_>>()
        };
        let first = drops(7);
        assert_eq!(first, drops(7));
        assert_ne!(first, drops(8));
        let count = first.iter().filter(|d| **d).count();
        assert!((800..1200).contains(&count), "10% of 10000, got {count}");
    }
}
