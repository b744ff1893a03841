//! Decoding Linux's `struct tcp_info` (the bytes `getsockopt(IPPROTO_TCP, TCP_INFO)` returns)
//! into a [`TcpInfoSample`].
//!
//! The bytes are decoded by offset rather than through a C struct: the `libc` crate does not
//! expose every field on every target, and a kernel returns only as much of the struct as it
//! knows. The struct only ever grows at the end, so a shorter buffer is an older kernel, and the
//! fields past its end are `None`. docs/TCP_INFO.md lists the fields, their units and what a
//! Nagle stall looks like in them.
//!
//! Layout (include/uapi/linux/tcp.h): the kernel writes the struct in the host's byte order, so
//! it is decoded in the host's byte order (`from_ne_bytes`), right on a big-endian host too;
//! every field is naturally aligned.

use crate::event::TcpInfoSample;

/// Bytes up to and including `tcpi_total_retrans` (offset 100): every non-`Option` field of
/// [`TcpInfoSample`] lies within them. Kernels since 2.6 return at least this much.
pub const MIN_LEN: usize = 104;

/// The length of `struct tcp_info` up to `tcpi_rcv_wnd`, the last field read here (Linux 6.2+).
pub const FULL_LEN: usize = 236;

// Byte offsets of the fields read here.
const STATE: usize = 0;
const CA_STATE: usize = 1;
const RTO: usize = 8;
const ATO: usize = 12;
const SND_MSS: usize = 16;
const RCV_MSS: usize = 20;
const UNACKED: usize = 24;
const LOST: usize = 32;
const RETRANS: usize = 36;
const LAST_DATA_SENT: usize = 44;
const LAST_DATA_RECV: usize = 52;
const LAST_ACK_RECV: usize = 56;
const RTT: usize = 68;
const RTTVAR: usize = 72;
const SND_CWND: usize = 80;
const RCV_SPACE: usize = 96;
const TOTAL_RETRANS: usize = 100;
const BYTES_ACKED: usize = 120;
const BYTES_RECEIVED: usize = 128;
const SEGS_OUT: usize = 136;
const SEGS_IN: usize = 140;
const NOTSENT_BYTES: usize = 144;
const MIN_RTT: usize = 148;
const DATA_SEGS_OUT: usize = 156;
const DELIVERY_RATE: usize = 160;
const RWND_LIMITED: usize = 176;
const SNDBUF_LIMITED: usize = 184;
const BYTES_SENT: usize = 200;
const SND_WND: usize = 228;
const RCV_WND: usize = 232;

/// Decodes the bytes the kernel returned for `TCP_INFO`.
///
/// Returns `None` only if `bytes` is shorter than [`MIN_LEN`] (104 bytes, which every kernel
/// since 2.6 returns); fields beyond the end of a shorter-than-current buffer are `None`. Extra
/// bytes from newer kernels are ignored. Never panics.
///
/// Units are the kernel's: `rto_us`, `ato_us`, `rtt_us`, `rttvar_us`, `min_rtt_us` in
/// microseconds; `last_*_ms` in milliseconds ago; `snd_cwnd` in segments; `delivery_rate_bytes_per_s`
/// is **bytes** per second, as `tcpi_delivery_rate` gives it (not bits, despite the name).
pub fn decode(bytes: &[u8], during_block: bool) -> Option<TcpInfoSample> {
    if bytes.len() < MIN_LEN {
        return None;
    }
    let u32 = |offset| u32_at(bytes, offset);
    let u64 = |offset| u64_at(bytes, offset);
    Some(TcpInfoSample {
        during_block,
        state: *bytes.get(STATE)?,
        ca_state: *bytes.get(CA_STATE)?,
        rto_us: u32(RTO)?,
        ato_us: u32(ATO)?,
        snd_mss: u32(SND_MSS)?,
        rcv_mss: u32(RCV_MSS)?,
        unacked: u32(UNACKED)?,
        lost: u32(LOST)?,
        retrans: u32(RETRANS)?,
        last_data_sent_ms: u32(LAST_DATA_SENT)?,
        last_ack_recv_ms: u32(LAST_ACK_RECV)?,
        last_data_recv_ms: u32(LAST_DATA_RECV)?,
        rtt_us: u32(RTT)?,
        rttvar_us: u32(RTTVAR)?,
        snd_cwnd: u32(SND_CWND)?,
        rcv_space: u32(RCV_SPACE)?,
        total_retrans: u32(TOTAL_RETRANS)?,
        bytes_acked: u64(BYTES_ACKED),
        bytes_received: u64(BYTES_RECEIVED),
        segs_out: u32(SEGS_OUT),
        segs_in: u32(SEGS_IN),
        notsent_bytes: u32(NOTSENT_BYTES),
        min_rtt_us: u32(MIN_RTT),
        delivery_rate_bytes_per_s: u64(DELIVERY_RATE),
        bytes_sent: u64(BYTES_SENT),
        data_segs_out: u32(DATA_SEGS_OUT),
        rwnd_limited_us: u64(RWND_LIMITED),
        sndbuf_limited_us: u64(SNDBUF_LIMITED),
        snd_wnd: u32(SND_WND),
        rcv_wnd: u32(RCV_WND),
    })
}

fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let field = bytes.get(offset..offset.checked_add(4)?)?;
    // The kernel writes the struct in the host's byte order.
    Some(u32::from_ne_bytes(field.try_into().ok()?))
}

fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    let field = bytes.get(offset..offset.checked_add(8)?)?;
    Some(u64::from_ne_bytes(field.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `tcp_info` buffer built field by field.
    struct Buf(Vec<u8>);

    impl Buf {
        fn new(len: usize) -> Buf {
            Buf(vec![0; len])
        }

        fn u8(mut self, offset: usize, value: u8) -> Buf {
            self.0[offset] = value;
            self
        }

        fn u32(mut self, offset: usize, value: u32) -> Buf {
            self.0[offset..offset + 4].copy_from_slice(&value.to_ne_bytes());
            self
        }

        fn u64(mut self, offset: usize, value: u64) -> Buf {
            self.0[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
            self
        }
    }

    /// A writer held by Nagle: 4 bytes in flight, 2048 written and not sent. Every field gets a
    /// distinct value so that a swapped offset shows.
    fn stalled_writer() -> Buf {
        Buf::new(280)
            .u8(STATE, 1)
            .u8(CA_STATE, 0)
            .u8(2, 0xee) // retransmits: not read, must not leak into a neighbour
            .u32(RTO, 204_000)
            .u32(ATO, 40_000)
            .u32(SND_MSS, 32_768)
            .u32(RCV_MSS, 536)
            .u32(UNACKED, 1)
            .u32(28, 0xdead) // sacked: not read
            .u32(LOST, 2)
            .u32(RETRANS, 3)
            .u32(LAST_DATA_SENT, 41)
            .u32(48, 0xbeef) // last_ack_sent: not read
            .u32(LAST_DATA_RECV, 43)
            .u32(LAST_ACK_RECV, 42)
            .u32(RTT, 61)
            .u32(RTTVAR, 30)
            .u32(SND_CWND, 10)
            .u32(RCV_SPACE, 65_483)
            .u32(TOTAL_RETRANS, 4)
            .u64(104, u64::MAX) // pacing_rate: not read
            .u64(BYTES_ACKED, 5_000_000_001)
            .u64(BYTES_RECEIVED, 6_000_000_002)
            .u32(SEGS_OUT, 7)
            .u32(SEGS_IN, 8)
            .u32(NOTSENT_BYTES, 2048)
            .u32(MIN_RTT, 9)
            .u64(DELIVERY_RATE, 7_000_000_003)
            .u64(BYTES_SENT, 8_000_000_004)
            .u32(SND_WND, 65_536)
            .u32(RCV_WND, 65_535)
    }

    #[test]
    fn decodes_every_field_at_its_offset() {
        let sample = decode(&stalled_writer().0, true).expect("280 bytes is a full struct");
        assert_eq!(
            sample,
            TcpInfoSample {
                during_block: true,
                state: 1,
                ca_state: 0,
                rto_us: 204_000,
                ato_us: 40_000,
                snd_mss: 32_768,
                rcv_mss: 536,
                unacked: 1,
                lost: 2,
                retrans: 3,
                last_data_sent_ms: 41,
                last_ack_recv_ms: 42,
                last_data_recv_ms: 43,
                rtt_us: 61,
                rttvar_us: 30,
                snd_cwnd: 10,
                rcv_space: 65_483,
                total_retrans: 4,
                bytes_acked: Some(5_000_000_001),
                bytes_received: Some(6_000_000_002),
                segs_out: Some(7),
                segs_in: Some(8),
                notsent_bytes: Some(2048),
                min_rtt_us: Some(9),
                delivery_rate_bytes_per_s: Some(7_000_000_003),
                bytes_sent: Some(8_000_000_004),
                snd_wnd: Some(65_536),
                rcv_wnd: Some(65_535),
                data_segs_out: Some(0),
                rwnd_limited_us: Some(0),
                sndbuf_limited_us: Some(0),
            }
        );
    }

    #[test]
    fn an_old_kernels_104_bytes_leave_the_later_fields_none() {
        let full = stalled_writer().0;
        let sample = decode(&full[..104], false).expect("104 bytes hold every required field");
        assert!(!sample.during_block);
        assert_eq!((sample.rto_us, sample.ato_us, sample.total_retrans), (204_000, 40_000, 4));
        assert_eq!(sample.rcv_space, 65_483);
        assert_eq!(sample.bytes_acked, None);
        assert_eq!(sample.bytes_received, None);
        assert_eq!(sample.segs_out, None);
        assert_eq!(sample.segs_in, None);
        assert_eq!(sample.notsent_bytes, None);
        assert_eq!(sample.min_rtt_us, None);
        assert_eq!(sample.delivery_rate_bytes_per_s, None);
        assert_eq!(sample.bytes_sent, None);
        assert_eq!(sample.snd_wnd, None);
        assert_eq!(sample.rcv_wnd, None);
    }

    #[test]
    fn each_optional_field_appears_exactly_when_its_last_byte_is_there() {
        let full = stalled_writer().0;
        let optional = |s: &TcpInfoSample| {
            [
                s.bytes_acked.is_some(),
                s.bytes_received.is_some(),
                s.segs_out.is_some(),
                s.segs_in.is_some(),
                s.notsent_bytes.is_some(),
                s.min_rtt_us.is_some(),
                s.delivery_rate_bytes_per_s.is_some(),
                s.bytes_sent.is_some(),
                s.snd_wnd.is_some(),
                s.rcv_wnd.is_some(),
            ]
        };
        let ends = [
            BYTES_ACKED + 8,
            BYTES_RECEIVED + 8,
            SEGS_OUT + 4,
            SEGS_IN + 4,
            NOTSENT_BYTES + 4,
            MIN_RTT + 4,
            DELIVERY_RATE + 8,
            BYTES_SENT + 8,
            SND_WND + 4,
            RCV_WND + 4,
        ];
        assert_eq!(ends[ends.len() - 1], FULL_LEN);
        for len in MIN_LEN..=full.len() {
            let sample = decode(&full[..len], false).expect("at least MIN_LEN bytes");
            let expected = ends.map(|end| len >= end);
            assert_eq!(optional(&sample), expected, "length {len}");
        }
    }

    #[test]
    fn too_short_is_none() {
        let full = stalled_writer().0;
        for len in 0..MIN_LEN {
            assert_eq!(decode(&full[..len], false), None, "length {len}");
        }
    }

    #[test]
    fn any_length_of_garbage_decodes_without_panicking() {
        // A small xorshift generator: deterministic garbage without a dependency.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for len in 0..=300 {
            for fill in [0x00u8, 0xff] {
                let bytes = vec![fill; len];
                assert_eq!(decode(&bytes, false).is_some(), len >= MIN_LEN);
            }
            for _ in 0..8 {
                let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let decoded = decode(&bytes, true);
                assert_eq!(decoded.is_some(), len >= MIN_LEN, "length {len}");
            }
        }
        // Misaligned views of a valid buffer are only garbage too.
        let full = stalled_writer().0;
        for start in 1..8 {
            let _ = decode(&full[start..], false);
        }
    }

    #[test]
    fn all_ones_are_the_largest_values_not_an_overflow() {
        let sample = decode(&[0xff; 280], false).expect("a full struct");
        assert_eq!(sample.state, u8::MAX);
        assert_eq!(sample.rto_us, u32::MAX);
        assert_eq!(sample.bytes_sent, Some(u64::MAX));
        assert_eq!(sample.rcv_wnd, Some(u32::MAX));
    }
}
