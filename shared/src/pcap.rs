//! Capture files: a pcapng writer, and a reader for pcap and pcapng (what tcpdump, dumpcap and
//! Wireshark write). Pure: bytes in, bytes out; the caller reads and writes files.
//!
//! Formats: pcap is described in draft-ietf-opsawg-pcap, pcapng in draft-ietf-opsawg-pcapng
//! (section numbers below are the pcapng draft's). The reader bounds every length before using it:
//! a block longer than [`MAX_BLOCK_BYTES`] or past the end of the input ends the read with an
//! error that names the byte offset, and every packet before it is kept.

use std::io::Read;

use crate::packet::{self, Packet, PacketError};

/// Link-layer header types (the tcpdump.org LINKTYPE_ registry) that [`parse_link`] reads.
pub mod linktype {
    /// BSD loopback: a 4-byte address family in the writer's byte order, then IP.
    pub const NULL: u16 = 0;
    /// Ethernet (also what Linux's lo gives: a zeroed 14-byte header).
    pub const EN10MB: u16 = 1;
    /// IP with no link-layer header (version from the first nibble).
    pub const RAW: u16 = 101;
    /// Linux "cooked" capture v1 (tcpdump -i any, older versions).
    pub const LINUX_SLL: u16 = 113;
    pub const IPV4: u16 = 228;
    pub const IPV6: u16 = 229;
    /// Linux "cooked" capture v2 (tcpdump -i any, newer versions).
    pub const LINUX_SLL2: u16 = 276;
}

/// The largest block or packet record read: more is a corrupt length, not a packet.
pub const MAX_BLOCK_BYTES: usize = 16 << 20;

/// One packet from a capture file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedPacket {
    /// Nanoseconds since the Unix epoch (as the capture's clock said).
    pub ts_ns: u64,
    pub linktype: u16,
    /// The bytes captured (possibly fewer than were on the wire: the snaplen).
    pub data: Vec<u8>,
    /// How long the packet was on the wire.
    pub orig_len: u32,
}

/// One packet as [`CaptureReader::next_packet`] gives it: its bytes are the reader's, until the
/// next packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRef<'a> {
    pub ts_ns: u64,
    pub linktype: u16,
    pub data: &'a [u8],
    pub orig_len: u32,
}

/// Everything readable from a capture file, and why the read stopped early, if it did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capture {
    pub packets: Vec<CapturedPacket>,
    pub error: Option<CaptureError>,
}

/// Why a capture file could not be read (further). `offset` is the byte where the problem is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    #[error("not a pcap or pcapng file (it starts with {magic:02x?})")]
    NotACapture { magic: Vec<u8> },
    #[error("truncated {what} at byte {offset}: needs {needed} bytes, {got} left")]
    Truncated { what: &'static str, offset: usize, needed: usize, got: usize },
    #[error("{what} at byte {offset} claims {len} bytes, over the {MAX_BLOCK_BYTES}-byte limit")]
    TooLong { what: &'static str, offset: usize, len: usize },
    #[error("bad {what} at byte {offset}: {value}")]
    Bad { what: &'static str, offset: usize, value: u64 },
}

impl CaptureError {
    pub fn offset(&self) -> usize {
        match self {
            CaptureError::NotACapture { .. } => 0,
            CaptureError::Truncated { offset, .. }
            | CaptureError::TooLong { offset, .. }
            | CaptureError::Bad { offset, .. } => *offset,
        }
    }
}

/// Reads the IP + TCP packet behind a link-layer header of type `linktype`.
pub fn parse_link(linktype: u16, data: &[u8]) -> Result<Packet, PacketError> {
    let after = |n: usize, what: &'static str| {
        data.get(n..).ok_or(PacketError::Truncated { what, needed: n, got: data.len() })
    };
    let ip_ethertype = |ethertype: u16, rest: &[u8]| match ethertype {
        0x0800 | 0x86dd => packet::parse_ip(rest),
        other => Err(PacketError::NotIp { found: other }),
    };
    match linktype {
        linktype::EN10MB => packet::parse_ethernet(data),
        linktype::RAW | linktype::IPV4 | linktype::IPV6 => packet::parse_ip(data),
        linktype::NULL => packet::parse_ip(after(4, "loopback header")?),
        linktype::LINUX_SLL => {
            let rest = after(16, "Linux cooked header")?;
            ip_ethertype(u16::from_be_bytes([data[14], data[15]]), rest)
        }
        linktype::LINUX_SLL2 => {
            let rest = after(20, "Linux cooked v2 header")?;
            ip_ethertype(u16::from_be_bytes([data[0], data[1]]), rest)
        }
        other => Err(PacketError::NotIp { found: other }),
    }
}

// ---------------------------------------------------------------------------------------------
// Writer

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const SPB: u32 = 3;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;

/// Writes pcapng (little-endian, one section) into a buffer: a Section Header Block at once,
/// then an Interface Description Block per [`PcapngWriter::interface`] and an Enhanced Packet
/// Block per [`PcapngWriter::packet`], timestamps in nanoseconds (`if_tsresol` = 9).
pub struct PcapngWriter<'a> {
    out: &'a mut Vec<u8>,
    interfaces: u32,
}

impl<'a> PcapngWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> PcapngWriter<'a> {
        let mut body = Vec::new();
        body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes()); // section length: not given
        write_block(out, SHB, &body);
        PcapngWriter { out, interfaces: 0 }
    }

    /// Adds an interface; returns its id for [`PcapngWriter::packet`].
    /// The bytes written so far, for a caller that writes them out as they grow (and clears
    /// them): the blocks already in it are complete.
    pub fn bytes(&mut self) -> &mut Vec<u8> {
        self.out
    }

    pub fn interface(&mut self, name: &str, linktype: u16) -> u32 {
        let mut body = Vec::new();
        body.extend_from_slice(&linktype.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes()); // snaplen: no limit
        push_option(&mut body, IF_NAME, name.as_bytes());
        push_option(&mut body, IF_TSRESOL, &[9]);
        push_option(&mut body, OPT_END, &[]);
        write_block(self.out, IDB, &body);
        self.interfaces += 1;
        self.interfaces - 1
    }

    /// Adds a packet seen at `ts_ns` (nanoseconds since the Unix epoch) on `iface`, whole (the
    /// original length is the captured one). `comment` is shown by Wireshark as the packet's
    /// comment (`frame.comment`).
    pub fn packet(&mut self, iface: u32, ts_ns: u64, bytes: &[u8], comment: Option<&str>) {
        self.packet_with_len(iface, ts_ns, bytes, bytes.len() as u32, comment);
    }

    /// Same, for a packet that was `orig_len` bytes on the wire of which `bytes` were kept.
    pub fn packet_with_len(
        &mut self,
        iface: u32,
        ts_ns: u64,
        bytes: &[u8],
        orig_len: u32,
        comment: Option<&str>,
    ) {
        let mut body = Vec::with_capacity(20 + bytes.len() + 8);
        body.extend_from_slice(&iface.to_le_bytes());
        body.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ts_ns as u32).to_le_bytes());
        body.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        body.extend_from_slice(&orig_len.max(bytes.len() as u32).to_le_bytes());
        body.extend_from_slice(bytes);
        pad4(&mut body);
        if let Some(comment) = comment {
            // An option value is at most 65535 bytes; cut a longer comment at a char boundary.
            let mut end = comment.len().min(u16::MAX as usize);
            while !comment.is_char_boundary(end) {
                end -= 1;
            }
            push_option(&mut body, OPT_COMMENT, &comment.as_bytes()[..end]);
            push_option(&mut body, OPT_END, &[]);
        }
        write_block(self.out, EPB, &body);
    }
}

fn pad4(b: &mut Vec<u8>) {
    while b.len() % 4 != 0 {
        b.push(0);
    }
}

fn push_option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&(value.len() as u16).to_le_bytes());
    body.extend_from_slice(value);
    pad4(body);
}

fn write_block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let total = (12 + body.len()) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&total.to_le_bytes());
}

// ---------------------------------------------------------------------------------------------
// Reader

#[derive(Clone, Copy)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let v = [b[at], b[at + 1]];
        match self {
            Endian::Little => u16::from_le_bytes(v),
            Endian::Big => u16::from_be_bytes(v),
        }
    }

    fn u32(self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self {
            Endian::Little => u32::from_le_bytes(v),
            Endian::Big => u32::from_be_bytes(v),
        }
    }
}

/// Reads a whole pcap or pcapng capture held in memory (tests and the fuzz target; `ackscope
/// import` streams files with [`CaptureReader`]).
pub fn read(bytes: &[u8]) -> Capture {
    let mut reader = CaptureReader::new(bytes);
    let mut packets = Vec::new();
    while let Some(p) = reader.next_packet() {
        packets.push(CapturedPacket {
            ts_ns: p.ts_ns,
            linktype: p.linktype,
            data: p.data.to_vec(),
            orig_len: p.orig_len,
        });
    }
    Capture { packets, error: reader.into_error() }
}

/// The most interfaces a pcapng section may describe: each costs a few bytes of memory, and a
/// real capture has a handful.
pub const MAX_INTERFACES: usize = 65_536;

/// Reads a pcap or pcapng capture (told apart by its first four bytes) from `src` one block at a
/// time: it holds one block (at most [`MAX_BLOCK_BYTES`], allocated as its bytes arrive) and the
/// section's interfaces, whatever the size of the file.
pub struct CaptureReader<R> {
    src: R,
    /// Bytes consumed: where the next block or record starts.
    at: usize,
    format: Format,
    /// The current block or record.
    block: Vec<u8>,
    /// The block holds the first bytes of the next block already (a pcapng file's magic, read
    /// to tell the format).
    carried: bool,
    error: Option<CaptureError>,
}

/// A packet found in the current block: its time, link type, place in the block, length on the
/// wire.
type Found = (u64, u16, std::ops::Range<usize>, u32);

enum Format {
    /// Nothing read yet.
    Unknown,
    Pcap {
        e: Endian,
        ns: bool,
        linktype: u16,
    },
    Pcapng {
        e: Endian,
        interfaces: Vec<Interface>,
        last_ts_ns: u64,
    },
    /// The end, or an error.
    Done,
}

impl<R: std::io::Read> CaptureReader<R> {
    pub fn new(src: R) -> CaptureReader<R> {
        let (format, block) = (Format::Unknown, Vec::new());
        CaptureReader { src, at: 0, format, block, carried: false, error: None }
    }

    /// Why the read stopped before the end of the input, if it did.
    pub fn into_error(self) -> Option<CaptureError> {
        self.error
    }

    /// Appends up to `n` more bytes of the input to the block; how many came.
    fn fill(&mut self, n: usize) -> usize {
        let before = self.block.len();
        // `take` + `read_to_end`: the block grows as the bytes arrive, not by `n` up front.
        let _ = (&mut self.src).take(n as u64).read_to_end(&mut self.block);
        self.block.len() - before
    }

    /// Ends the read with `error`.
    fn fail(&mut self, error: CaptureError) {
        self.error = Some(error);
        self.format = Format::Done;
    }

    /// Reads the next `n` bytes as the start of a new block or record: `None` at a clean end
    /// (no byte left), or after failing with a truncation error naming `what`.
    fn start_block(&mut self, n: usize, what: &'static str) -> Option<()> {
        let kept = if std::mem::take(&mut self.carried) { self.block.len() } else { 0 };
        self.block.truncate(kept);
        match kept + self.fill(n - kept) {
            0 => {
                self.format = Format::Done;
                None
            }
            got if got < n => {
                self.fail(CaptureError::Truncated { what, offset: self.at, needed: n, got });
                None
            }
            _ => Some(()),
        }
    }

    /// Completes the block begun by [`Self::start_block`] to `len` bytes.
    fn finish_block(&mut self, len: usize, what: &'static str) -> Option<()> {
        let had = self.block.len();
        let got = had + self.fill(len - had);
        if got < len {
            self.fail(CaptureError::Truncated { what, offset: self.at, needed: len, got });
            return None;
        }
        Some(())
    }

    /// The next packet, or `None` at the end of the input or at an error ([`Self::into_error`]).
    pub fn next_packet(&mut self) -> Option<PacketRef<'_>> {
        let (ts_ns, linktype, range, orig_len) = loop {
            let found = match &self.format {
                Format::Done => return None,
                Format::Unknown => {
                    self.read_file_header();
                    continue;
                }
                Format::Pcap { .. } => self.pcap_record(),
                Format::Pcapng { .. } => self.pcapng_block(),
            };
            if let Some(found) = found {
                break found;
            }
        };
        Some(PacketRef { ts_ns, linktype, data: &self.block[range], orig_len })
    }

    fn read_file_header(&mut self) {
        self.block.clear();
        let got = self.fill(4);
        let magic = [0, 1, 2, 3].map(|i| self.block.get(i).copied().unwrap_or(0));
        if got < 4 {
            return self.fail(CaptureError::NotACapture { magic: self.block.clone() });
        }
        if u32::from_le_bytes(magic) == SHB {
            // The magic is the section header's first bytes: the first block.
            self.carried = true;
            self.format =
                Format::Pcapng { e: Endian::Little, interfaces: Vec::new(), last_ts_ns: 0 };
            return;
        }
        let Some((e, ns)) = pcap_magic(magic) else {
            return self.fail(CaptureError::NotACapture { magic: magic.to_vec() });
        };
        if self.finish_block(24, "pcap file header").is_none() {
            return;
        }
        // The link type is the low 16 bits; the high ones carry FCS information.
        let linktype = e.u32(&self.block, 20) as u16;
        self.at = 24;
        self.block.clear();
        self.format = Format::Pcap { e, ns, linktype };
    }

    /// One pcap record: `Some` with its packet's place in the block, or `None` at the end or at
    /// an error.
    fn pcap_record(&mut self) -> Option<Found> {
        let Format::Pcap { e, ns, linktype } = self.format else { return None };
        self.start_block(16, "pcap record header")?;
        let b = &self.block;
        let (sec, frac) = (u64::from(e.u32(b, 0)), u64::from(e.u32(b, 4)));
        let incl = e.u32(b, 8) as usize;
        let orig_len = e.u32(b, 12);
        if incl > MAX_BLOCK_BYTES {
            let at = self.at;
            self.fail(CaptureError::TooLong { what: "pcap record", offset: at, len: incl });
            return None;
        }
        self.finish_block(16 + incl, "pcap record")?;
        self.at += 16 + incl;
        let frac_ns = if ns { frac } else { frac.saturating_mul(1000) };
        let ts_ns = sec.saturating_mul(1_000_000_000).saturating_add(frac_ns);
        Some((ts_ns, linktype, 16..16 + incl, orig_len))
    }

    /// One pcapng block: `Some` with a packet's place in it, `None` with the format still
    /// pcapng for a block that holds none, and `None` at the end or at an error.
    fn pcapng_block(&mut self) -> Option<Found> {
        let at = self.at;
        self.start_block(12, "pcapng block header")?;
        let Format::Pcapng { e, .. } = &mut self.format else { return None };
        let b = &self.block;
        let kind = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if kind == SHB {
            // SHB's type reads the same in both byte orders; the section's byte order is in
            // the block: read it before its length.
            let order = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
            *e = if order == BYTE_ORDER_MAGIC {
                Endian::Little
            } else if order.swap_bytes() == BYTE_ORDER_MAGIC {
                Endian::Big
            } else {
                let value = order.into();
                let bad =
                    CaptureError::Bad { what: "pcapng byte-order magic", offset: at + 8, value };
                self.fail(bad);
                return None;
            };
        }
        let e = *e;
        let kind = e.u32(b, 0);
        let len = e.u32(b, 4) as usize;
        if len > MAX_BLOCK_BYTES {
            self.fail(CaptureError::TooLong { what: "pcapng block", offset: at, len });
            return None;
        }
        if len < 12 || len % 4 != 0 {
            let value = len as u64;
            self.fail(CaptureError::Bad { what: "pcapng block length", offset: at, value });
            return None;
        }
        self.finish_block(len, "pcapng block")?;
        self.at += len;
        let Format::Pcapng { interfaces, last_ts_ns, .. } = &mut self.format else { return None };
        let body = &self.block[8..len - 4];
        let bad = |what, value: u64| CaptureError::Bad { what, offset: at, value };
        let failed = match kind {
            SHB => {
                interfaces.clear();
                None
            }
            IDB if body.len() < 8 => Some(bad("interface description block length", len as u64)),
            IDB if interfaces.len() >= MAX_INTERFACES => {
                Some(bad("interface count (over the limit)", interfaces.len() as u64))
            }
            IDB => {
                let mut iface = Interface { linktype: e.u16(body, 0), tsresol: 6 };
                for (code, value) in options(&body[8..], e) {
                    if code == IF_TSRESOL && !value.is_empty() {
                        iface.tsresol = value[0];
                    }
                }
                interfaces.push(iface);
                None
            }
            EPB if body.len() < 20 => Some(bad("enhanced packet block length", len as u64)),
            EPB => {
                let id = e.u32(body, 0);
                let caplen = e.u32(body, 12) as usize;
                match interfaces.get(id as usize) {
                    None => Some(bad("interface id (none described)", id.into())),
                    Some(_) if caplen > body.len() - 20 => {
                        Some(bad("captured length", caplen as u64))
                    }
                    Some(&iface) => {
                        let units = (u64::from(e.u32(body, 4)) << 32) | u64::from(e.u32(body, 8));
                        *last_ts_ns = iface.to_ns(units);
                        let orig_len = e.u32(body, 16);
                        // The body starts 8 bytes into the block.
                        return Some((*last_ts_ns, iface.linktype, 28..28 + caplen, orig_len));
                    }
                }
            }
            SPB => match interfaces.first() {
                // No timestamp (section 4.4): the previous packet's is the best there is.
                None => Some(bad("simple packet block without an interface", 0)),
                Some(_) if body.len() < 4 => Some(bad("simple packet block length", len as u64)),
                Some(&iface) => {
                    let orig_len = e.u32(body, 0);
                    let caplen = (orig_len as usize).min(body.len() - 4);
                    return Some((*last_ts_ns, iface.linktype, 12..12 + caplen, orig_len));
                }
            },
            _ => None, // name resolution, statistics, custom blocks: nothing for us
        };
        if let Some(error) = failed {
            self.fail(error);
        }
        None
    }
}

/// pcap's magic: the byte order and whether the fraction is nanoseconds.
fn pcap_magic(m: [u8; 4]) -> Option<(Endian, bool)> {
    match (u32::from_le_bytes(m), u32::from_be_bytes(m)) {
        (0xa1b2_c3d4, _) => Some((Endian::Little, false)),
        (0xa1b2_3c4d, _) => Some((Endian::Little, true)),
        (_, 0xa1b2_c3d4) => Some((Endian::Big, false)),
        (_, 0xa1b2_3c4d) => Some((Endian::Big, true)),
        _ => None,
    }
}

/// An interface of the current pcapng section.
#[derive(Clone, Copy)]
struct Interface {
    linktype: u16,
    /// if_tsresol: bit 7 clear, 10^-n seconds; set, 2^-n seconds (section 4.2).
    tsresol: u8,
}

impl Interface {
    fn to_ns(self, units: u64) -> u64 {
        let n = u32::from(self.tsresol & 0x7f);
        let ns = if self.tsresol & 0x80 == 0 {
            if n <= 9 {
                u128::from(units) * 10u128.pow(9 - n)
            } else {
                u128::from(units) / 10u128.checked_pow(n - 9).unwrap_or(u128::MAX)
            }
        } else {
            (u128::from(units) * 1_000_000_000) >> n.min(127)
        };
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// The options of a block body (section 3.5), until opt_endofopt or a malformed one.
fn options(mut b: &[u8], e: Endian) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let (code, len) = (e.u16(b, 0), usize::from(e.u16(b, 2)));
        if code == OPT_END || b.len() - 4 < len {
            break;
        }
        out.push((code, &b[4..4 + len]));
        let padded = (len + 3) & !3;
        b = b.get(4 + padded..).unwrap_or(&[]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{tcp_flags, Segment};
    use std::net::{IpAddr, Ipv4Addr};

    fn sample_packet(len: u32) -> Vec<u8> {
        packet::synthesize(&Packet {
            src: IpAddr::V4(Ipv4Addr::LOCALHOST),
            dst: IpAddr::V4(Ipv4Addr::LOCALHOST),
            src_port: 40000,
            dst_port: 8080,
            segment: Segment { flags: tcp_flags::PSH | tcp_flags::ACK, len, ..Segment::default() },
        })
    }

    fn written() -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = PcapngWriter::new(&mut out);
        let raw = w.interface("lo", linktype::RAW);
        w.packet(raw, 1_700_000_000_123_456_789, &sample_packet(4), None);
        w.packet(raw, 1_700_000_000_167_000_001, &sample_packet(0), Some("Nagle x delayed ACK: é"));
        let eth = w.interface("eth0", linktype::EN10MB);
        let mut frame = vec![0; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&sample_packet(2048));
        w.packet(eth, 1_700_000_000_167_030_000, &frame, None);
        out
    }

    #[test]
    fn pcapng_round_trip() {
        let bytes = written();
        let capture = read(&bytes);
        assert_eq!(capture.error, None);
        let p = &capture.packets;
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].ts_ns, 1_700_000_000_123_456_789);
        assert_eq!(p[1].ts_ns, 1_700_000_000_167_000_001);
        assert_eq!((p[0].linktype, p[2].linktype), (linktype::RAW, linktype::EN10MB));
        let lens: Vec<u32> = p
            .iter()
            .map(|c| parse_link(c.linktype, &c.data).expect("parses").segment.len)
            .collect();
        assert_eq!(lens, [4, 0, 2048]);
    }

    #[test]
    fn comment_is_an_epb_option() {
        let bytes = written();
        let needle = "Nagle x delayed ACK: é".as_bytes();
        assert!(bytes.windows(needle.len()).any(|w| w == needle));
    }

    fn pcap_file(
        big_endian: bool,
        ns: bool,
        linktype: u32,
        packets: &[(u32, u32, &[u8])],
    ) -> Vec<u8> {
        let put32 = |out: &mut Vec<u8>, v: u32| {
            out.extend_from_slice(&if big_endian { v.to_be_bytes() } else { v.to_le_bytes() })
        };
        let put16 = |out: &mut Vec<u8>, v: u16| {
            out.extend_from_slice(&if big_endian { v.to_be_bytes() } else { v.to_le_bytes() })
        };
        let mut out = Vec::new();
        put32(&mut out, if ns { 0xa1b2_3c4d } else { 0xa1b2_c3d4 });
        put16(&mut out, 2);
        put16(&mut out, 4);
        put32(&mut out, 0);
        put32(&mut out, 0);
        put32(&mut out, 262_144);
        put32(&mut out, linktype);
        for (sec, frac, data) in packets {
            put32(&mut out, *sec);
            put32(&mut out, *frac);
            put32(&mut out, data.len() as u32);
            put32(&mut out, data.len() as u32);
            out.extend_from_slice(data);
        }
        out
    }

    #[test]
    fn pcap_both_byte_orders_and_resolutions() {
        let ip = sample_packet(4);
        for big in [false, true] {
            for ns in [false, true] {
                let file = pcap_file(big, ns, 101, &[(10, 500, &ip), (11, 0, &ip)]);
                let c = read(&file);
                assert_eq!(c.error, None);
                assert_eq!(c.packets.len(), 2);
                let frac = if ns { 500 } else { 500_000 };
                assert_eq!(c.packets[0].ts_ns, 10_000_000_000 + frac);
                assert_eq!(c.packets[1].ts_ns, 11_000_000_000);
                assert_eq!(
                    parse_link(c.packets[0].linktype, &c.packets[0].data).map(|p| p.segment.len),
                    Ok(4)
                );
            }
        }
    }

    #[test]
    fn link_types() {
        let ip = sample_packet(4);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        let mut sll = vec![0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&ip);
        let mut sll2 = vec![0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0];
        sll2.extend_from_slice(&ip);
        for (lt, data) in
            [(linktype::NULL, null), (linktype::LINUX_SLL, sll), (linktype::LINUX_SLL2, sll2)]
        {
            assert_eq!(parse_link(lt, &data).map(|p| p.segment.len), Ok(4), "linktype {lt}");
            for cut in 0..data.len() {
                assert!(parse_link(lt, &data[..cut]).is_err());
            }
        }
        assert!(parse_link(147, &ip).is_err());
    }

    #[test]
    fn big_endian_pcapng_with_microseconds_and_binary_resolution() {
        // Hand-built big-endian section: SHB, IDB (RAW, default resolution), EPB; then a second
        // little-endian section whose interface counts in 2^-10 s.
        let ip = sample_packet(4);
        let mut out = Vec::new();
        let block = |out: &mut Vec<u8>, kind: u32, body: &[u8], be: bool| {
            let total = (12 + body.len()) as u32;
            let enc = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            out.extend_from_slice(&enc(kind));
            out.extend_from_slice(&enc(total));
            out.extend_from_slice(body);
            out.extend_from_slice(&enc(total));
        };
        let mut shb = BYTE_ORDER_MAGIC.to_be_bytes().to_vec();
        shb.extend_from_slice(&[0, 1, 0, 0]);
        shb.extend_from_slice(&(-1i64).to_be_bytes());
        block(&mut out, SHB, &shb, true);
        block(&mut out, IDB, &[0, 101, 0, 0, 0, 0, 0, 0], true);
        let mut epb = Vec::new();
        for v in [0u32, 0, 2_500_000, ip.len() as u32, ip.len() as u32] {
            epb.extend_from_slice(&v.to_be_bytes());
        }
        epb.extend_from_slice(&ip);
        pad4(&mut epb);
        block(&mut out, EPB, &epb, true);
        let mut second = Vec::new();
        let mut w = PcapngWriter::new(&mut second);
        w.interface("x", linktype::RAW);
        // Rewrite the tsresol option value (9) to 2^-10 after the fact.
        let at = second.len() - 16;
        assert_eq!(second[at..at + 2], IF_TSRESOL.to_le_bytes());
        second[at + 4] = 0x80 | 10;
        let mut w = PcapngWriter { out: &mut second, interfaces: 1 };
        w.packet(0, 2048, &ip, None); // 2 s
                                      // SPB on interface 0: takes the previous timestamp.
        let mut spb = (ip.len() as u32).to_le_bytes().to_vec();
        spb.extend_from_slice(&ip);
        pad4(&mut spb);
        write_block(&mut second, SPB, &spb);
        out.extend_from_slice(&second);
        let c = read(&out);
        assert_eq!(c.error, None);
        let ts: Vec<u64> = c.packets.iter().map(|p| p.ts_ns).collect();
        assert_eq!(ts, [2_500_000_000, 2_000_000_000, 2_000_000_000]);
        assert!(c.packets.iter().all(|p| parse_link(p.linktype, &p.data).is_ok()));
    }

    #[test]
    fn truncated_files_keep_the_valid_prefix_and_say_where() {
        let bytes = written();
        let full = read(&bytes).packets.len();
        for cut in 0..bytes.len() {
            let c = read(&bytes[..cut]);
            let err = c.error.as_ref().map(CaptureError::offset);
            // Every packet read is one of the originals, and the cut is always reported
            // unless it falls on a block boundary.
            assert!(c.packets.len() <= full);
            if c.error.is_none() {
                let again = read(&bytes[..cut]);
                assert_eq!(again.packets.len(), c.packets.len());
            } else {
                assert!(err.expect("error") <= cut, "offset past the cut at {cut}");
            }
        }
        // Cut in the middle of the last block: two packets kept, the offset is that block's.
        let c = read(&bytes[..bytes.len() - 5]);
        assert_eq!(c.packets.len(), 2);
        let err = c.error.expect("truncated");
        assert!(err.to_string().starts_with("truncated pcapng block at byte "), "{err}");
    }

    /// A file read a few bytes at a time (a pipe, a slow disk) gives what the whole file does.
    #[test]
    fn a_stream_that_trickles_reads_like_the_whole_file() {
        struct Trickle<'a>(&'a [u8], usize);
        impl std::io::Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.1 += 1;
                let n = buf.len().min(self.1 % 7 + 1).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let bytes = written();
        for cut in [bytes.len(), bytes.len() - 5, 30] {
            let whole = read(&bytes[..cut]);
            let mut reader = CaptureReader::new(Trickle(&bytes[..cut], 0));
            let mut packets = Vec::new();
            while let Some(p) = reader.next_packet() {
                packets.push((p.ts_ns, p.linktype, p.data.to_vec()));
            }
            let expected: Vec<_> =
                whole.packets.iter().map(|p| (p.ts_ns, p.linktype, p.data.clone())).collect();
            assert_eq!(packets, expected, "cut at {cut}");
            assert_eq!(reader.into_error(), whole.error, "cut at {cut}");
        }
    }

    #[test]
    fn oversized_block_is_refused_before_reading() {
        let mut bytes = written();
        let shb_len = u32::from_le_bytes(bytes[4..8].try_into().expect("4")) as usize;
        bytes[shb_len + 4..shb_len + 8].copy_from_slice(&(64u32 << 20).to_le_bytes());
        let c = read(&bytes);
        assert!(c.packets.is_empty());
        assert_eq!(
            c.error,
            Some(CaptureError::TooLong { what: "pcapng block", offset: shb_len, len: 64 << 20 })
        );
        assert!(c.error.expect("error").to_string().contains("over the 16777216-byte limit"));
        let mut pcap = pcap_file(false, false, 1, &[(1, 1, &[0u8; 60][..])]);
        pcap[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(read(&pcap).error, Some(CaptureError::TooLong { offset: 24, .. })));
    }

    #[test]
    fn not_a_capture() {
        assert_eq!(
            read(b"hello world").error,
            Some(CaptureError::NotACapture { magic: b"hell".to_vec() })
        );
        assert!(read(b"").error.is_some());
    }

    #[test]
    fn garbage_never_panics() {
        let ip = sample_packet(3);
        let sll2: Vec<u8> = [&[0x08, 0x00][..], &[0; 18], &ip].concat();
        let seeds = [written(), pcap_file(true, true, 276, &[(1, 2, sll2.as_slice()); 3])];
        let mut x: u64 = 42;
        let mut next = || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) as usize
        };
        for i in 0..200_000 {
            let mut b = seeds[i % 2].clone();
            for _ in 0..1 + next() % 6 {
                let at = next() % b.len();
                b[at] = next() as u8;
            }
            let cut = next() % (b.len() + 1);
            let c = read(&b[..cut]);
            for p in &c.packets {
                let _ = parse_link(p.linktype, &p.data);
            }
        }
    }
}
