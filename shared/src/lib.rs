//! The data model, the stream codec and the analysis that the probe and the web app share.
//!
//! Layers, bottom up:
//! - [`event`]: what the probe records: one [`Event`] per step (syscall start/done, connection
//!   life), stamped with nanoseconds since the run started on one monotonic clock for both sides.
//! - [`spec`]: what a run does ([`RrSpec`]): everything needed to run it again.
//! - [`wire`]: the versioned messages between probe and browser, and their framing. A session
//!   file is the same framed stream written to disk, so one decoder serves both.
//! - [`control`]: the messages between two probes, one driving the other's server.
//! - [`analysis`]: pure functions over events: per-request spans, stalls, the summary.
//! - [`overview`]: a run's requests in a bounded number of columns, each keeping its worst.
//! - [`lesson`]: the classroom's lessons, parsed from their plain-text files.
//! - [`kernel`]: every TCP_INFO sample over time, per connection and side, bounded, for charts.
//!
//! Nothing here does IO or reads a clock: callers pass times in. That keeps the crate buildable
//! for wasm32 and its tests deterministic.
#![forbid(unsafe_code)]

pub mod analysis;
pub mod attribution;
pub mod bulk;
mod compact;
pub mod control;
#[cfg(any(test, feature = "synthetic"))]
pub mod crafted;
pub mod event;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod kernel;
pub mod lesson;
pub mod overview;
pub mod packet;
pub mod packet_stalls;
pub mod pcap;
pub mod presets;
pub mod reduce;
mod side_map;
mod sorted_multiset;
mod span_list;
pub mod spec;
#[cfg(any(test, feature = "synthetic"))]
pub mod synthetic;
pub mod tcp_info;
pub mod wire;
mod write_log;

pub use analysis::{RequestView, Summary};
pub use event::{
    ConnId, Event, EventKind, LinkAction, LinkEvent, ReqId, RunId, Segment, Side, SockOpt,
    TcpInfoSample,
};
pub use spec::{
    BulkSpec, ImportSpec, ImportedConnection, NoDelay, PerSide, RrSpec, Scenario, SpecError,
    WritePattern,
};
