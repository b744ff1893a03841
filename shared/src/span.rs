//! A syscall as a span of time: what the analysis keeps of each `connect`, `write` and `read`,
//! and what the packed span lists (`span_list`) hold. A leaf above [`crate::event`].

use serde::{Deserialize, Serialize};

use crate::event::Side;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpanKind {
    Connect,
    Write,
    Read,
}

/// One syscall (or the connect handshake) from start to return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub side: Side,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u32,
    /// For reads and writes: the stream offset (bytes this side had read or written on the
    /// connection) just after this call.
    pub stream_end: u64,
}

impl Span {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}
