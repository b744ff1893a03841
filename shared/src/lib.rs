//! The data model, the stream codec and the analysis that the probe and the web app share.
//!
//! Layers, bottom up (each uses only the ones above it; `cargo xtask test` fails on a cycle):
//! - leaves: [`event`] (what the probe records: one [`Event`] per step, stamped with
//!   nanoseconds since the run started on one clock for both sides), [`stats`] (percentiles),
//!   `varint`, `keyed_hash` (the hash of maps keyed by ids), [`span`] (a syscall as a span of time), [`stall`] (the classes of wait and
//!   their fixes), [`spec`] (what a run does: everything needed to run it again), [`packet`]
//!   and [`tcp_info`]; [`budget`] (what a run's buffers may take, and the limits on it);
//! - [`analysis`]: a run's events as requests, their spans and evidence, the summary;
//! - [`packet_stalls`] (the packet rule), [`exchange`] (requests found from packets' direction,
//!   for watched programs and imported captures), [`estimate`] (a watch's exchanges bounded
//!   from the kernel's counters, without packets), [`watch_rows`] (a watch's exchanges as a
//!   run's requests, the page's rows) and [`attribution`] (why each wait happened);
//! - [`overview`]: a run's requests in a bounded number of columns, each keeping its worst;
//! - [`wire`] (the versioned messages between probe and browser, and their framing: a session
//!   file is the same framed stream written to disk; `wire::run_start` and `wire::events`, a run's
//!   start and a batch of events decoded by hand in place), [`event_json`] (its messages as JSON, the events and run starts written by hand) and
//!   [`control`] (between two probes);
//! - [`reduce`]: the one path from a stream of messages to runs, their tally and their stalls,
//!   with every reader's bounds; [`report`] (a run's `--json` report) and the exports over it
//!   ([`export_json`], [`perfetto`], [`pcapng_export`]);
//! - beside them: [`lesson`] (the classroom's lessons), [`kernel`] (TCP_INFO over time, for
//!   charts), [`bulk`], [`pcap`].
//!
//! Nothing here does IO or reads a clock: callers pass times in. That keeps the crate buildable
//! for wasm32 and its tests deterministic.
#![forbid(unsafe_code)]

pub mod analysis;
pub mod attribution;
pub mod budget;
pub mod bulk;
mod compact;
pub mod control;
#[cfg(any(test, feature = "synthetic"))]
pub mod crafted;
pub mod estimate;
pub mod event;
pub mod event_json;
pub mod exchange;
pub mod export_json;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod import;
pub mod kernel;
mod keyed_hash;
pub mod lesson;
pub mod overview;
pub mod packet;
pub mod packet_stalls;
pub mod pcap;
pub mod pcapng_export;
pub mod perfetto;
pub mod presets;
pub mod reduce;
pub mod report;
mod side_map;
mod sorted_multiset;
pub mod span;
mod span_list;
pub mod spec;
pub mod stall;
pub mod stats;
#[cfg(any(test, feature = "synthetic"))]
pub mod synthetic;
pub mod tcp_info;
pub mod tried;
mod varint;
pub mod watch_rows;
pub mod wire;
mod write_log;

pub use analysis::{RequestView, Summary};
pub use event::{
    Call, ConnId, Event, EventKind, LinkAction, LinkEvent, ReqId, RunId, Segment, Side, SockOpt,
    TcpInfoSample,
};
pub use spec::{
    BulkSpec, ImportSpec, ImportedConnection, NoDelay, PerSide, RrSpec, Scenario, SpecError,
    WatchSpec, WritePattern,
};
