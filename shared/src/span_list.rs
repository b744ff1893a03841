//! A request's spans: a plain list while the request can still change, packed into a few bytes
//! a span once it has settled.
//!
//! The browser keeps every request of a run it shows: a million requests of story 1 are about
//! 6.7 million spans. As [`Span`]s (32 bytes each, in lists that grow to 8 slots) they took 256
//! MB, more than the session file they came from. Packed they take about 12 bytes each: every
//! number is stored as a difference from the one before it of its kind, as a varint, the way
//! the session file stores events (docs/FORMAT.md), and the list is exactly as long as it needs.
//!
//! Packing loses nothing: every `u64` and `u32` comes back as it went in, whatever it is
//! (differences wrap around, so a hostile file's times in any order still round-trip). A packed
//! list that gets another span (a late event of a settled request) is unpacked first.
//!
//! Only readers that keep requests pack them (the browser, [`crate::RunAnalysis::pack_settled`]);
//! the command line retires its requests instead and never pays for packing.

use crate::event::Side;
use crate::span::{Span, SpanKind};
use crate::varint::{put_varint, varint};

#[derive(Clone, Debug)]
pub(crate) enum SpanList {
    Open(Vec<Span>),
    /// [`encode`]d; never empty (an empty list is `Open`).
    Packed(Box<[u8]>),
}

impl Default for SpanList {
    fn default() -> Self {
        SpanList::Open(Vec::new())
    }
}

/// Two lists are equal when they hold the same spans, packed or not.
impl PartialEq for SpanList {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for SpanList {}

impl SpanList {
    pub(crate) fn iter(&self) -> Spans<'_> {
        match self {
            SpanList::Open(spans) => Spans::Open(spans.iter()),
            SpanList::Packed(bytes) => Spans::Packed(Decoder::new(bytes)),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            SpanList::Open(spans) => spans.len(),
            SpanList::Packed(bytes) => Decoder::new(bytes).count(),
        }
    }

    pub(crate) fn push(&mut self, span: Span) {
        self.unpack().push(span);
    }

    /// The spans as a plain list, unpacking them if they were packed.
    fn unpack(&mut self) -> &mut Vec<Span> {
        if let SpanList::Packed(bytes) = self {
            *self = SpanList::Open(Decoder::new(bytes).collect());
        }
        match self {
            SpanList::Open(spans) => spans,
            SpanList::Packed(_) => unreachable!("unpacked above"),
        }
    }

    /// Packs the list (a no-op if it is packed or empty).
    #[cfg(test)]
    pub(crate) fn pack(&mut self) {
        self.pack_reusing(&mut Vec::new());
    }

    /// Packs the list (a no-op if it is packed or empty), encoding it in `scratch`, and hands
    /// back the plain list's allocation, emptied, for another request's spans. A page packs a
    /// request a moment after it made its list: without the reuse each request cost two
    /// allocations, a reallocation as its list grew and a shrinking one, a tenth of loading a
    /// file in the browser (whose allocator is slower than the system's).
    pub(crate) fn pack_reusing(&mut self, scratch: &mut Vec<u8>) -> Option<Vec<Span>> {
        let SpanList::Open(spans) = self else { return None };
        if spans.is_empty() {
            return None;
        }
        scratch.clear();
        encode_into(spans, scratch);
        match std::mem::replace(self, SpanList::Packed(Box::from(scratch.as_slice()))) {
            SpanList::Open(mut spans) => {
                spans.clear();
                Some(spans)
            }
            SpanList::Packed(_) => None,
        }
    }

    pub(crate) fn is_packed(&self) -> bool {
        matches!(self, SpanList::Packed(_))
    }

    /// The plain list's allocation, emptied, if it has one worth keeping (a spare request view's,
    /// see `RequestView::emptied`).
    pub(crate) fn into_open_capacity(self) -> Vec<Span> {
        match self {
            SpanList::Open(mut spans) => {
                spans.clear();
                spans
            }
            SpanList::Packed(_) => Vec::new(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        match self {
            SpanList::Open(spans) => spans.capacity(),
            SpanList::Packed(_) => 0,
        }
    }
}

/// The spans of a request, in the order they were added.
pub enum Spans<'a> {
    Open(std::slice::Iter<'a, Span>),
    Packed(Decoder<'a>),
}

impl Iterator for Spans<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        match self {
            Spans::Open(spans) => spans.next().copied(),
            Spans::Packed(decoder) => decoder.next(),
        }
    }
}

/// What a span's numbers are differences from: the previous span's start, and the previous
/// stream offset of the same direction. A client's write and the server's read of it move along
/// the same bytes, so their offsets are a few bytes apart: keyed by direction, a request's
/// offsets after the first of each direction take a byte or two.
#[derive(Default)]
struct Previous {
    start_ns: u64,
    /// Client to server, server to client, and connects (whose offset is 0).
    stream_end: [u64; 3],
}

fn stream_index(side: Side, kind: SpanKind) -> usize {
    match (kind, side) {
        (SpanKind::Connect, _) => 2,
        (SpanKind::Write, Side::Client) | (SpanKind::Read, Side::Server) => 0,
        (SpanKind::Write, Side::Server) | (SpanKind::Read, Side::Client) => 1,
    }
}

/// One span is a tag byte (side and kind), then four varints: the start's difference from the
/// previous span's start, the end's from the start, the bytes, and the stream offset's
/// difference from the previous one of its direction. Differences are signed (zigzag): a file's
/// events need not be in order.
fn encode_into(spans: &[Span], out: &mut Vec<u8>) {
    let mut previous = Previous::default();
    for span in spans {
        let side = match span.side {
            Side::Client => 0,
            Side::Server => 1,
        };
        let kind = match span.kind {
            SpanKind::Connect => 0,
            SpanKind::Write => 1,
            SpanKind::Read => 2,
        };
        out.push(side | kind << 1);
        let stream = &mut previous.stream_end[stream_index(span.side, span.kind)];
        put_signed(out, span.start_ns.wrapping_sub(previous.start_ns));
        put_signed(out, span.end_ns.wrapping_sub(span.start_ns));
        put_varint(out, u64::from(span.bytes));
        put_signed(out, span.stream_end.wrapping_sub(*stream));
        previous.start_ns = span.start_ns;
        *stream = span.stream_end;
    }
}

/// A wrapped difference as a zigzag varint: small either way, forwards or back.
fn put_signed(out: &mut Vec<u8>, difference: u64) {
    let signed = difference as i64;
    put_varint(out, ((signed << 1) ^ (signed >> 63)) as u64);
}

/// Reads back what [`encode`] wrote.
pub struct Decoder<'a> {
    bytes: &'a [u8],
    previous: Previous,
}

impl<'a> Decoder<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Decoder { bytes, previous: Previous::default() }
    }

    fn varint(&mut self) -> u64 {
        // Only `encode` writes these bytes: every varint it writes is whole.
        let (value, rest) = varint(self.bytes).expect("a packed span list holds whole numbers");
        self.bytes = rest;
        value
    }

    fn signed(&mut self) -> u64 {
        let zigzag = self.varint();
        ((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64)) as u64
    }
}

impl Iterator for Decoder<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        let (&tag, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        let side = if tag & 1 == 0 { Side::Client } else { Side::Server };
        let kind = match tag >> 1 {
            0 => SpanKind::Connect,
            1 => SpanKind::Write,
            _ => SpanKind::Read,
        };
        let start_ns = self.previous.start_ns.wrapping_add(self.signed());
        let end_ns = start_ns.wrapping_add(self.signed());
        let bytes = self.varint() as u32;
        let stream = stream_index(side, kind);
        let stream_end = self.previous.stream_end[stream].wrapping_add(self.signed());
        self.previous.stream_end[stream] = stream_end;
        self.previous.start_ns = start_ns;
        Some(Span { side, kind, start_ns, end_ns, bytes, stream_end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(side: Side, kind: SpanKind, start_ns: u64, end_ns: u64, bytes: u32, end: u64) -> Span {
        Span { side, kind, start_ns, end_ns, bytes, stream_end: end }
    }

    fn packed(spans: &[Span]) -> SpanList {
        let mut list = SpanList::Open(spans.to_vec());
        list.pack();
        list
    }

    /// Packing through a scratch buffer hands the list's allocation back, emptied, and a second
    /// list packed through the same buffer holds its own spans, not the first's.
    #[test]
    fn packing_hands_back_the_plain_lists_allocation() {
        let first = [span(Side::Client, SpanKind::Write, 10, 20, 4, 4)];
        let second = [
            span(Side::Server, SpanKind::Read, 12, 30, 4, 4),
            span(Side::Server, SpanKind::Write, 31, 35, 2048, 2048),
        ];
        let mut scratch = Vec::new();
        let mut list = SpanList::Open(Vec::with_capacity(8));
        list.push(first[0]);
        let spare = list.pack_reusing(&mut scratch).expect("an open list hands its allocation");
        assert!(spare.is_empty() && spare.capacity() >= 8, "{}", spare.capacity());
        assert!(list.is_packed() && list.iter().eq(first.iter().copied()));
        let mut other = SpanList::Open(second.to_vec());
        assert!(other.pack_reusing(&mut scratch).is_some());
        assert!(other.iter().eq(second.iter().copied()));
        assert!(list.iter().eq(first.iter().copied()), "the first list is its own");
        assert!(list.pack_reusing(&mut scratch).is_none(), "packed already");
        assert!(SpanList::default().pack_reusing(&mut scratch).is_none(), "empty");
    }

    /// A deterministic stream of numbers for the round trips (xorshift64*).
    struct Numbers(u64);

    impl Numbers {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Mostly small, sometimes anything, sometimes an extreme: what differences look like.
        fn number(&mut self) -> u64 {
            match self.next() % 8 {
                0 => u64::MAX - self.next() % 3,
                1 => self.next(),
                2 => self.next() % 3,
                _ => self.next() % 100_000,
            }
        }
    }

    #[test]
    fn every_span_comes_back_as_it_went_in_whatever_its_numbers() {
        let mut numbers = Numbers(0x9e37_79b9_7f4a_7c15);
        for round in 0..2000 {
            let count = 1 + (numbers.next() % 12) as usize;
            let spans: Vec<Span> = (0..count)
                .map(|_| {
                    let side = if numbers.next() % 2 == 0 { Side::Client } else { Side::Server };
                    let kind = [SpanKind::Connect, SpanKind::Write, SpanKind::Read]
                        [(numbers.next() % 3) as usize];
                    let bytes = numbers.number() as u32;
                    span(side, kind, numbers.number(), numbers.number(), bytes, numbers.number())
                })
                .collect();
            let list = packed(&spans);
            assert!(list.is_packed());
            assert_eq!(list.iter().collect::<Vec<_>>(), spans, "round {round}");
            assert_eq!(list.len(), spans.len());
        }
    }

    #[test]
    fn a_story_one_request_packs_into_a_few_bytes_a_span() {
        // One NODELAY exchange about 60 s into a long run, 2 GB into each stream: the client's
        // split write, the server's read of it, its answer, the client's read.
        let (t, o) = (60_000_000_000, 2_000_000_000);
        let spans = [
            span(Side::Client, SpanKind::Write, t, t + 3_000, 4, o + 4),
            span(Side::Client, SpanKind::Write, t + 4_000, t + 9_000, 2048, o + 2052),
            span(Side::Server, SpanKind::Read, t + 1_000, t + 12_000, 2052, o + 2052),
            span(Side::Server, SpanKind::Write, t + 14_000, t + 17_000, 4, o + 4),
            span(Side::Server, SpanKind::Write, t + 18_000, t + 22_000, 2048, o + 2052),
            span(Side::Client, SpanKind::Read, t + 10_000, t + 25_000, 2052, o + 2052),
        ];
        let SpanList::Packed(bytes) = packed(&spans) else { panic!("not packed") };
        assert!(bytes.len() <= 6 * 16, "{} bytes for 6 spans", bytes.len());
        assert!(bytes.len() * 3 < spans.len() * std::mem::size_of::<Span>());
    }

    #[test]
    fn a_span_added_to_a_packed_list_unpacks_it_and_keeps_every_span() {
        let first = span(Side::Client, SpanKind::Write, 1_000, 2_000, 10, 10);
        let late = span(Side::Server, SpanKind::Read, 500, 2_500, 10, 10);
        let mut list = packed(&[first]);
        list.push(late);
        assert!(!list.is_packed());
        assert_eq!(list.iter().collect::<Vec<_>>(), [first, late]);
        assert_eq!(list, packed(&[first, late]), "equal whether packed or not");
    }

    #[test]
    fn a_list_is_no_larger_than_a_vec() {
        // A request view holds one: a million of them in the browser.
        assert_eq!(std::mem::size_of::<SpanList>(), std::mem::size_of::<Vec<Span>>());
    }

    #[test]
    fn an_empty_list_stays_open() {
        let mut list = SpanList::default();
        list.pack();
        assert!(!list.is_packed());
        assert_eq!(list.len(), 0);
    }
}
