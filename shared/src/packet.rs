//! IP + TCP header parsing for captured packets: bytes in, a [`Packet`] (addresses, ports and a
//! [`Segment`]) out.
//!
//! Every read is bounds-checked: a parser fed by a capture must survive any bytes. Lengths come
//! from the IP header, never from the captured length, because loopback hands over
//! segmentation-offload super-packets and a capture may be cut short by its snaplen; the TCP
//! header itself must be present in full.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::event::Segment;

/// A TCP segment with the addresses and ports it travelled between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub segment: Segment,
}

/// Why bytes are not a TCP packet this parser understands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// Fewer bytes than the header being read needs.
    Truncated { what: &'static str, needed: usize, got: usize },
    /// Neither IPv4 nor IPv6 (version nibble, or EtherType).
    NotIp { found: u16 },
    /// An IP packet carrying another protocol (the IP protocol / next-header number).
    NotTcp { protocol: u8 },
    /// A header field that contradicts the header itself.
    BadHeader { what: &'static str, value: u32 },
    /// A fragment after the first: no TCP header to read.
    Fragment,
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketError::Truncated { what, needed, got } => {
                write!(f, "truncated {what}: needs {needed} bytes, got {got}")
            }
            PacketError::NotIp { found } => write!(f, "not an IP packet (type {found:#06x})"),
            PacketError::NotTcp { protocol } => write!(f, "not TCP (IP protocol {protocol})"),
            PacketError::BadHeader { what, value } => write!(f, "bad {what}: {value}"),
            PacketError::Fragment => write!(f, "an IP fragment without the TCP header"),
        }
    }
}

impl std::error::Error for PacketError {}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const IPPROTO_TCP: u8 = 6;
/// IPv6 extension headers skipped on the way to TCP (RFC 8200 section 4): hop-by-hop, routing,
/// destination options. Fragment (44) is handled apart.
const IPV6_SKIPPABLE: [u8; 3] = [0, 43, 60];
const IPV6_FRAGMENT: u8 = 44;
/// Bound on extension headers walked, so a crafted chain cannot keep the parser busy.
const IPV6_MAX_EXTENSIONS: usize = 8;

fn need(bytes: &[u8], what: &'static str, needed: usize) -> Result<(), PacketError> {
    if bytes.len() < needed {
        Err(PacketError::Truncated { what, needed, got: bytes.len() })
    } else {
        Ok(())
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses an Ethernet frame carrying IP (EtherType 0x0800 or 0x86DD, one 802.1Q tag allowed), as
/// AF_PACKET on lo gives it (a zeroed 14-byte Ethernet header).
pub fn parse_ethernet(frame: &[u8]) -> Result<Packet, PacketError> {
    need(frame, "ethernet header", 14)?;
    let mut ethertype = be16(frame, 12);
    let mut at = 14;
    if ethertype == ETHERTYPE_VLAN {
        need(frame, "802.1Q tag", 18)?;
        ethertype = be16(frame, 16);
        at = 18;
    }
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => parse_ip(&frame[at..]),
        other => Err(PacketError::NotIp { found: other }),
    }
}

/// Parses an IP packet (IPv4 or IPv6, from the first byte's version nibble) carrying TCP.
pub fn parse_ip(bytes: &[u8]) -> Result<Packet, PacketError> {
    need(bytes, "IP header", 1)?;
    match bytes[0] >> 4 {
        4 => parse_ipv4(bytes),
        6 => parse_ipv6(bytes),
        v => Err(PacketError::NotIp { found: u16::from(v) }),
    }
}

fn parse_ipv4(b: &[u8]) -> Result<Packet, PacketError> {
    need(b, "IPv4 header", 20)?;
    let ihl = usize::from(b[0] & 0x0f) * 4;
    if ihl < 20 {
        return Err(PacketError::BadHeader { what: "IPv4 header length", value: ihl as u32 });
    }
    need(b, "IPv4 header with options", ihl)?;
    let total_len = usize::from(be16(b, 2));
    // 0 is what segmentation offload leaves in a super-packet's header on some paths (TSO
    // hands the length to the driver); then the captured bytes are all there is.
    let total_len = if total_len == 0 { b.len() } else { total_len };
    if total_len < ihl {
        return Err(PacketError::BadHeader { what: "IPv4 total length", value: total_len as u32 });
    }
    // Fragment offset (low 13 bits): a later fragment has no TCP header.
    if be16(b, 6) & 0x1fff != 0 {
        return Err(PacketError::Fragment);
    }
    if b[9] != IPPROTO_TCP {
        return Err(PacketError::NotTcp { protocol: b[9] });
    }
    let src = IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19]));
    parse_tcp(&b[ihl..], total_len - ihl, src, dst)
}

fn parse_ipv6(b: &[u8]) -> Result<Packet, PacketError> {
    need(b, "IPv6 header", 40)?;
    let payload_len = usize::from(be16(b, 4));
    let mut next = b[6];
    let src = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).expect("16 bytes")));
    let dst = IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[24..40]).expect("16 bytes")));
    // Offset of the current header, and how much of the payload length it accounts for.
    let mut at = 40;
    let mut ext_len = 0usize;
    for _ in 0..IPV6_MAX_EXTENSIONS {
        if next == IPPROTO_TCP {
            // payload_len 0 with a jumbogram or a GSO super-packet: fall back to what was captured.
            let l4_len = if payload_len == 0 {
                b.len() - at
            } else {
                payload_len.checked_sub(ext_len).ok_or(PacketError::BadHeader {
                    what: "IPv6 payload length",
                    value: payload_len as u32,
                })?
            };
            return parse_tcp(&b[at..], l4_len, src, dst);
        }
        if next == IPV6_FRAGMENT {
            need(b, "IPv6 fragment header", at + 8)?;
            if be16(b, at + 2) & 0xfff8 != 0 {
                return Err(PacketError::Fragment);
            }
            next = b[at];
            at += 8;
            ext_len += 8;
            continue;
        }
        if !IPV6_SKIPPABLE.contains(&next) {
            return Err(PacketError::NotTcp { protocol: next });
        }
        need(b, "IPv6 extension header", at + 2)?;
        let len = (usize::from(b[at + 1]) + 1) * 8;
        need(b, "IPv6 extension header", at + len)?;
        next = b[at];
        at += len;
        ext_len += len;
    }
    Err(PacketError::BadHeader {
        what: "IPv6 extension header count",
        value: IPV6_MAX_EXTENSIONS as u32 + 1,
    })
}

/// `l4_len`: the TCP header plus payload, as the IP header says.
fn parse_tcp(b: &[u8], l4_len: usize, src: IpAddr, dst: IpAddr) -> Result<Packet, PacketError> {
    need(b, "TCP header", 20)?;
    let data_offset = usize::from(b[12] >> 4) * 4;
    if data_offset < 20 {
        return Err(PacketError::BadHeader { what: "TCP data offset", value: data_offset as u32 });
    }
    need(b, "TCP header with options", data_offset)?;
    if l4_len < data_offset {
        return Err(PacketError::BadHeader { what: "IP length for TCP", value: l4_len as u32 });
    }
    let mut segment = Segment {
        flags: b[13],
        seq: be32(b, 4),
        ack: be32(b, 8),
        len: u32::try_from(l4_len - data_offset).unwrap_or(u32::MAX),
        window: be16(b, 14),
        ..Segment::default()
    };
    parse_options(&b[20..data_offset], &mut segment);
    Ok(Packet { src, dst, src_port: be16(b, 0), dst_port: be16(b, 2), segment })
}

/// TCP options (RFC 9293 section 3.1; RFC 7323 for window scale and timestamps; RFC 2018 for
/// SACK). A malformed option ends the walk; what was read before it is kept.
fn parse_options(mut o: &[u8], s: &mut Segment) {
    while let Some(&kind) = o.first() {
        match kind {
            0 => break,
            1 => {
                o = &o[1..];
                continue;
            }
            _ => {}
        }
        let Some(&len) = o.get(1) else { break };
        let len = usize::from(len);
        if len < 2 || len > o.len() {
            break;
        }
        let body = &o[2..len];
        match (kind, body.len()) {
            (2, 2) => s.mss = Some(be16(body, 0)),
            (3, 1) => s.wscale = Some(body[0]),
            (4, 0) => s.sack_permitted = true,
            (5, n) if n % 8 == 0 => s.sack_blocks = (n / 8) as u8,
            (8, 8) => s.timestamps = Some((be32(body, 0), be32(body, 4))),
            _ => {}
        }
        o = &o[len..];
    }
}

/// Builds an IP + TCP header for a segment (no payload bytes: the IP length still counts
/// `segment.len`, the way a snaplen-truncated capture looks). For export, where ackscope has the
/// segment's fields but not its bytes. Options written: MSS, window scale, SACK-permitted,
/// timestamps, and `sack_blocks` zeroed SACK blocks.
pub fn synthesize(packet: &Packet) -> Vec<u8> {
    let s = &packet.segment;
    let mut opts = Vec::new();
    if let Some(mss) = s.mss {
        opts.extend_from_slice(&[2, 4]);
        opts.extend_from_slice(&mss.to_be_bytes());
    }
    if s.sack_permitted {
        opts.extend_from_slice(&[4, 2]);
    }
    if let Some((val, ecr)) = s.timestamps {
        opts.extend_from_slice(&[1, 1, 8, 10]);
        opts.extend_from_slice(&val.to_be_bytes());
        opts.extend_from_slice(&ecr.to_be_bytes());
    }
    if let Some(ws) = s.wscale {
        opts.extend_from_slice(&[1, 3, 3, ws]);
    }
    // At most 40 option bytes: 4 SACK blocks without timestamps, 3 with.
    let room = (40 - opts.len().min(40)).saturating_sub(4) / 8;
    let blocks = usize::from(s.sack_blocks).min(room);
    if blocks > 0 {
        opts.extend_from_slice(&[1, 1, 5, (2 + 8 * blocks) as u8]);
        opts.resize(opts.len() + 8 * blocks, 0);
    }
    while opts.len() % 4 != 0 {
        opts.push(0);
    }
    let tcp_len = 20 + opts.len();
    let mut tcp = Vec::with_capacity(tcp_len);
    tcp.extend_from_slice(&packet.src_port.to_be_bytes());
    tcp.extend_from_slice(&packet.dst_port.to_be_bytes());
    tcp.extend_from_slice(&s.seq.to_be_bytes());
    tcp.extend_from_slice(&s.ack.to_be_bytes());
    tcp.push(((tcp_len / 4) as u8) << 4);
    tcp.push(s.flags);
    tcp.extend_from_slice(&s.window.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0]); // checksum (not computed: no payload), urgent pointer
    tcp.extend_from_slice(&opts);
    let l4_len = tcp_len + s.len as usize;
    let mut out = Vec::with_capacity(40 + tcp_len);
    match (packet.src, packet.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            // An IPv4 length over 65535 (a GSO super-packet) is written as 0, which parse_ipv4
            // reads back as "take the captured length".
            let total = u16::try_from(20 + l4_len).unwrap_or(0);
            out.extend_from_slice(&[0x45, 0]);
            out.extend_from_slice(&total.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0x40, 0, 64, IPPROTO_TCP, 0, 0]);
            out.extend_from_slice(&src.octets());
            out.extend_from_slice(&dst.octets());
            let sum = checksum(&out);
            out[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        (src, dst) => {
            let to6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let payload = u16::try_from(l4_len).unwrap_or(0);
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&payload.to_be_bytes());
            out.extend_from_slice(&[IPPROTO_TCP, 64]);
            out.extend_from_slice(&to6(src).octets());
            out.extend_from_slice(&to6(dst).octets());
        }
    }
    out.extend_from_slice(&tcp);
    out
}

/// The Internet checksum (RFC 1071) of an IPv4 header.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 =
        b.chunks(2).map(|c| u32::from(be16(&[c[0], *c.get(1).unwrap_or(&0)], 0))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tcp_flags::{ACK, PSH, SYN};

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    fn tcp_header(flags: u8, options: &[u8]) -> Vec<u8> {
        let len = 20 + options.len();
        assert_eq!(len % 4, 0);
        let mut t = vec![0xc3, 0x50, 0x1f, 0x90]; // 50000 -> 8080
        t.extend_from_slice(&1000u32.to_be_bytes());
        t.extend_from_slice(&2000u32.to_be_bytes());
        t.push(((len / 4) as u8) << 4);
        t.push(flags);
        t.extend_from_slice(&65483u16.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 0]);
        t.extend_from_slice(options);
        t
    }

    fn ipv4(tcp: &[u8], payload: usize) -> Vec<u8> {
        let total = (20 + tcp.len() + payload) as u16;
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2]);
        p.extend_from_slice(tcp);
        p.resize(p.len() + payload, 0xab);
        p
    }

    fn syn_options() -> Vec<u8> {
        // What Linux sends: MSS, SACK-permitted, timestamps, NOP, window scale.
        let mut o = vec![2, 4, 0xff, 0xd7, 4, 2, 8, 10];
        o.extend_from_slice(&0x0102_0304u32.to_be_bytes());
        o.extend_from_slice(&0u32.to_be_bytes());
        o.extend_from_slice(&[1, 3, 3, 7]);
        o
    }

    #[test]
    fn syn_with_linux_options() {
        let p = parse_ip(&ipv4(&tcp_header(SYN, &syn_options()), 0)).expect("parses");
        assert_eq!(p.src, v4([127, 0, 0, 1]));
        assert_eq!(p.dst, v4([127, 0, 0, 2]));
        assert_eq!((p.src_port, p.dst_port), (50000, 8080));
        let s = p.segment;
        assert!(s.has(SYN) && !s.has(ACK));
        assert_eq!((s.seq, s.ack, s.len, s.window), (1000, 2000, 0, 65483));
        assert_eq!(s.mss, Some(65495));
        assert_eq!(s.wscale, Some(7));
        assert!(s.sack_permitted);
        assert_eq!(s.timestamps, Some((0x0102_0304, 0)));
        assert_eq!(s.sack_blocks, 0);
    }

    #[test]
    fn four_byte_push_and_pure_ack() {
        let ts = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8];
        let p = parse_ip(&ipv4(&tcp_header(PSH | ACK, &ts), 4)).expect("parses");
        assert_eq!(p.segment.len, 4);
        assert!(!p.segment.is_pure_ack());
        assert_eq!(p.segment.timestamps, Some((9, 8)));
        let a = parse_ip(&ipv4(&tcp_header(ACK, &ts), 0)).expect("parses");
        assert!(a.segment.is_pure_ack());
    }

    #[test]
    fn length_comes_from_the_ip_header_not_the_capture() {
        // A snaplen-truncated 2048-byte segment: only the headers were captured.
        let mut p = ipv4(&tcp_header(ACK, &[]), 2048);
        p.truncate(40);
        assert_eq!(parse_ip(&p).expect("parses").segment.len, 2048);
        // A GSO super-packet with total length 0: the capture is all there is.
        let mut gso = ipv4(&tcp_header(ACK, &[]), 40000);
        gso[2] = 0;
        gso[3] = 0;
        assert_eq!(parse_ip(&gso).expect("parses").segment.len, 40000);
    }

    #[test]
    fn sack_blocks_are_counted() {
        let mut o = vec![1, 1, 5, 18];
        o.resize(20, 0);
        let p = parse_ip(&ipv4(&tcp_header(ACK, &o), 0)).expect("parses");
        assert_eq!(p.segment.sack_blocks, 2);
    }

    #[test]
    fn ipv6_with_extension_headers() {
        let tcp = tcp_header(SYN, &syn_options());
        // Hop-by-hop (8 bytes) then destination options (16 bytes) then TCP.
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&((8 + 16 + tcp.len() + 10) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 64]);
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
        p.extend_from_slice(&[6, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&tcp);
        p.resize(p.len() + 10, 0);
        let parsed = parse_ip(&p).expect("parses");
        assert_eq!(parsed.src, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(parsed.segment.len, 10);
        assert_eq!(parsed.segment.mss, Some(65495));
        // Behind an Ethernet header with an 802.1Q tag.
        let mut frame = vec![0; 12];
        frame.extend_from_slice(&[0x81, 0x00, 0, 5, 0x86, 0xdd]);
        frame.extend_from_slice(&p);
        assert_eq!(parse_ethernet(&frame).expect("parses"), parsed);
    }

    #[test]
    fn loopback_ethernet_frame() {
        let mut frame = vec![0; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&ipv4(&tcp_header(PSH | ACK, &[]), 4));
        assert_eq!(parse_ethernet(&frame).expect("parses").segment.len, 4);
        frame[12] = 0x08;
        frame[13] = 0x06; // ARP
        assert_eq!(parse_ethernet(&frame), Err(PacketError::NotIp { found: 0x0806 }));
    }

    #[test]
    fn errors_say_what() {
        let mut udp = ipv4(&tcp_header(ACK, &[]), 0);
        udp[9] = 17;
        assert_eq!(parse_ip(&udp), Err(PacketError::NotTcp { protocol: 17 }));
        assert_eq!(parse_ip(&[0x20]), Err(PacketError::NotIp { found: 2 }));
        let err = parse_ip(&[0x45, 0, 0]).expect_err("short");
        assert_eq!(err.to_string(), "truncated IPv4 header: needs 20 bytes, got 3");
    }

    #[test]
    fn truncated_at_every_length_is_an_error_not_a_panic() {
        let full = ipv4(&tcp_header(SYN, &syn_options()), 0);
        for cut in 0..full.len() {
            assert!(parse_ip(&full[..cut]).is_err(), "cut at {cut}");
        }
        let mut frame = vec![0; 12];
        frame.extend_from_slice(&[0x86, 0xdd]);
        let mut v6 = vec![0x60, 0, 0, 0, 0, 40, 6, 64];
        v6.resize(40, 0);
        v6.extend_from_slice(&tcp_header(SYN, &syn_options()));
        frame.extend_from_slice(&v6);
        for cut in 0..frame.len() {
            assert!(parse_ethernet(&frame[..cut]).is_err(), "cut at {cut}");
        }
        assert!(parse_ethernet(&frame).is_ok());
    }

    #[test]
    fn header_length_lies() {
        let good = ipv4(&tcp_header(ACK, &[]), 4);
        for ihl in 0..16u8 {
            let mut p = good.clone();
            p[0] = 0x40 | ihl;
            let r = parse_ip(&p);
            if ihl == 5 {
                assert!(r.is_ok());
            } else {
                assert!(r.is_err(), "ihl {ihl}");
            }
        }
        for off in 0..16u8 {
            let mut p = good.clone();
            p[32] = off << 4;
            let r = parse_ip(&p);
            // 6 is consistent: the 4 payload bytes read as options (and 0 payload bytes).
            assert_eq!(r.is_ok(), off == 5 || off == 6, "data offset {off}");
        }
        // Total length shorter than the headers it claims to contain.
        let mut p = good.clone();
        p[2] = 0;
        p[3] = 30;
        assert!(matches!(parse_ip(&p), Err(PacketError::BadHeader { .. })));
    }

    #[test]
    fn option_lengths_zero_one_and_overlong_stop_the_walk() {
        for bad in [[2u8, 0, 0, 0], [2, 1, 0, 0], [2, 200, 0, 0], [8, 10, 0, 0]] {
            let mut o = vec![3, 3, 7, 1]; // wscale 7 first, kept
            o.extend_from_slice(&bad);
            let p = parse_ip(&ipv4(&tcp_header(SYN, &o), 0)).expect("parses");
            assert_eq!(p.segment.wscale, Some(7));
            assert_eq!(p.segment.mss, None);
            assert_eq!(p.segment.timestamps, None);
        }
        // EOL ends the list even when bytes follow.
        let p = parse_ip(&ipv4(&tcp_header(SYN, &[0, 2, 4, 5, 0xb4, 0, 0, 0]), 0)).expect("parses");
        assert_eq!(p.segment.mss, None);
        // A wrong-size known option is skipped, not misread.
        let p = parse_ip(&ipv4(&tcp_header(SYN, &[2, 3, 5, 1]), 0)).expect("parses");
        assert_eq!(p.segment.mss, None);
    }

    #[test]
    fn fuzz_a_million_inputs_never_panics() {
        let seeds = [ipv4(&tcp_header(SYN, &syn_options()), 4), {
            let mut f = vec![0; 12];
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend_from_slice(&ipv4(&tcp_header(ACK, &[1, 1, 5, 10, 0, 0, 0, 0, 0, 0, 0, 0]), 0));
            f
        }];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) as usize
        };
        let mut ok = 0usize;
        for i in 0..1_000_000 {
            let mut buf = if i % 4 == 0 {
                // Pure garbage with a plausible first byte.
                let len = next() % 100;
                let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                if let Some(first) = b.first_mut() {
                    *first = if next() % 2 == 0 { 0x45 } else { 0x60 };
                }
                b
            } else {
                // A real packet with a few bytes flipped and maybe cut.
                let mut b = seeds[i % 2].clone();
                for _ in 0..1 + next() % 4 {
                    let at = next() % b.len();
                    b[at] = next() as u8;
                }
                b
            };
            let cut = next() % (buf.len() + 1);
            if next() % 3 == 0 {
                buf.truncate(cut);
            }
            ok += usize::from(parse_ip(&buf).is_ok());
            ok += usize::from(parse_ethernet(&buf).is_ok());
        }
        // The mutated real packets mostly still parse: the loop is exercising the deep paths.
        assert!(ok > 100_000, "only {ok} parsed");
    }

    #[test]
    fn synthesize_round_trips() {
        let segments = [
            Segment {
                flags: SYN,
                seq: 7,
                window: 65495,
                mss: Some(65495),
                wscale: Some(7),
                sack_permitted: true,
                timestamps: Some((1, 0)),
                ..Segment::default()
            },
            Segment {
                flags: PSH | ACK,
                seq: 8,
                ack: 9,
                len: 4,
                window: 512,
                timestamps: Some((5, 6)),
                ..Segment::default()
            },
            Segment {
                flags: ACK,
                ack: 12,
                sack_blocks: 3,
                timestamps: Some((5, 6)),
                ..Segment::default()
            },
            Segment { flags: ACK, len: 100_000, ..Segment::default() },
        ];
        let addrs = [
            (v4([127, 0, 0, 1]), v4([10, 0, 0, 2])),
            (IpAddr::V6(Ipv6Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ];
        for (src, dst) in addrs {
            for segment in &segments {
                let packet =
                    Packet { src, dst, src_port: 1, dst_port: 2, segment: segment.clone() };
                let bytes = synthesize(&packet);
                let back = parse_ip(&bytes).expect("parses");
                if segment.len > 65_000 {
                    // Too long for the length field: written as 0, read back as "no payload captured".
                    assert_eq!(back.segment.len, 0);
                } else {
                    assert_eq!(back, packet);
                }
            }
        }
        let v4_bytes = synthesize(&Packet {
            src: v4([127, 0, 0, 1]),
            dst: v4([127, 0, 0, 1]),
            src_port: 1,
            dst_port: 2,
            segment: segments[1].clone(),
        });
        assert_eq!(checksum(&v4_bytes[..20]), 0, "IPv4 header checksum verifies");
    }
}
