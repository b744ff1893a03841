//! A session as a Chrome trace-event file (the JSON
//! Object Format, `{"traceEvents": [...], "displayTimeUnit": "ns"}`), which ui.perfetto.dev and
//! chrome://tracing open.
//!
//! What is where:
//! - one process per run: `pid` = run id + 1, named "run 1: rr: 100 x 2048 B, ...";
//! - one thread per connection side, named "conn 3 client" (tids are numbered from
//!   [`FIRST_TID`] in the order the sides first appear in the file, so they never repeat across
//!   runs and never equal a pid);
//! - on that thread, every `connect()`, `write()` and `read()` as a complete slice (`ph: X`,
//!   category `syscall`), and every stall as a slice (category `stall`) nested in the call that
//!   waited, covering the part of the wait that counts (for a held read: from when the peer had
//!   written the data until the read returned, less 1 ns so that it nests in every viewer);
//! - TCP_INFO as counters (`ph: C`), one per field and connection side ("conn 3 client unacked",
//!   its value keyed by its unit), written whenever the value changes.
//!
//! Times are microseconds since the run started (the format's unit) with the nanoseconds as
//! decimals. Events are written as the file is read, so they are not sorted by time across
//! threads (stalls come when their request is analysed); both viewers sort on load.
//!
//! [`TraceBuilder`] maps messages to trace events and does no IO; [`write_trace`] streams
//! messages through it into any `Write`, one serialized event at a time (`ackscope export
//! --perfetto` into a file).

use std::io::{self, Write};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::event::{ConnId, Event, EventKind, RunId, Side, TcpInfoSample};
use crate::keyed_hash::KeyedMap;
use crate::reduce::{Output, SessionReducer};
use crate::span::SpanKind;
use crate::spec::Scenario;
use crate::stall::Stall;
use crate::wire::{Hello, ToBrowser, WireError};

/// The first thread id; later ones count up from it.
pub const FIRST_TID: u32 = 1_000_000;

/// One trace event, serialized as one object of `traceEvents`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceEvent {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    /// `X` (complete slice), `C` (counter) or `M` (metadata: names and sort order).
    pub ph: &'static str,
    /// Microseconds since the run started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    /// Microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    pub args: Args,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Args {
    Name {
        name: String,
    },
    SortIndex {
        sort_index: u64,
    },
    Call {
        #[serde(skip_serializing_if = "Option::is_none")]
        bytes: Option<u32>,
        /// What the call asked for (`write` of / `read` up to this many bytes).
        #[serde(skip_serializing_if = "Option::is_none")]
        asked: Option<u32>,
        req: u32,
    },
    Stall {
        /// The class's JSON name, as in `run --json`'s `stalls`.
        class: &'static str,
        /// "client->server": where the waited-for data was going.
        direction: String,
        /// How long the wait that counts lasted.
        held_ms: f64,
        evidence: String,
        fixes: Vec<String>,
        req: u32,
    },
    Counter(Counter),
}

/// A counter's value keyed by its unit: `{"segments": 3}`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counter {
    pub unit: &'static str,
    pub value: u64,
}

impl Serialize for Counter {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.unit, &self.value)?;
        map.end()
    }
}

/// A TCP_INFO field shown as a counter: its name, its unit, and its value in a sample (`None`
/// when the kernel did not report it).
type CounterField = (&'static str, &'static str, fn(&TcpInfoSample) -> Option<u64>);

/// The TCP_INFO fields written as counters.
const COUNTERS: [CounterField; 9] = [
    ("unacked", "segments", |t| Some(t.unacked.into())),
    ("notsent", "bytes", |t| t.notsent_bytes.map(u64::from)),
    ("cwnd", "segments", |t| Some(t.snd_cwnd.into())),
    ("snd_wnd", "bytes", |t| t.snd_wnd.map(u64::from)),
    ("rcv_wnd", "bytes", |t| t.rcv_wnd.map(u64::from)),
    ("rcv_space", "bytes", |t| Some(t.rcv_space.into())),
    ("rtt", "us", |t| Some(t.rtt_us.into())),
    ("ato", "us", |t| Some(t.ato_us.into())),
    ("retrans", "segments", |t| Some(t.total_retrans.into())),
];

/// What was written, for the closing line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub runs: u64,
    pub syscalls: u64,
    pub stalls: u64,
    pub counters: u64,
}

/// Maps a session's messages, in file order, to trace events. The runs, their analysis and
/// their stalls come from the shared reducer (`reduce::SessionReducer`, which hands out each
/// stall as its request retires); this holds per run only each connection side's thread: its
/// open call and last counter values while the connection is open, its tid once it closed.
#[derive(Debug)]
pub struct TraceBuilder {
    reducer: SessionReducer,
    runs: KeyedMap<RunId, RunTrace>,
    next_tid: u32,
    steps: Vec<Output>,
    pub counts: Counts,
}

#[derive(Debug)]
struct RunTrace {
    pid: u32,
    threads: KeyedMap<(ConnId, Side), Thread>,
    /// The tids of the connection sides that closed: a stall of theirs can still come (when its
    /// request retires), and goes on their thread; the rest of their state is gone.
    closed: KeyedMap<(ConnId, Side), u32>,
}

#[derive(Debug)]
struct Thread {
    tid: u32,
    open: Option<OpenCall>,
    counters: [Option<u64>; COUNTERS.len()],
}

#[derive(Clone, Copy, Debug)]
struct OpenCall {
    kind: SpanKind,
    start_ns: u64,
    asked: u32,
}

impl Default for TraceBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceBuilder {
    pub fn new() -> TraceBuilder {
        TraceBuilder {
            reducer: SessionReducer::hand_out_stalls(),
            runs: KeyedMap::default(),
            next_tid: FIRST_TID,
            steps: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// The session's Hello, once read.
    pub fn hello(&self) -> Option<&Hello> {
        self.reducer.hello()
    }

    /// The trace events of one message (at most about a dozen per event of an `Events` batch, plus
    /// the stalls of the requests it lets the analysis retire).
    pub fn message(&mut self, message: &ToBrowser) -> Vec<TraceEvent> {
        let mut out = Vec::new();
        if let ToBrowser::Events { run, events } = message {
            if let Some(trace) = self.runs.get_mut(run) {
                trace.events(events, &mut self.next_tid, &mut self.counts, &mut out);
            }
        }
        let mut steps = std::mem::take(&mut self.steps);
        self.reducer.handle(message, &mut steps);
        for step in steps.drain(..) {
            match (step, message) {
                (Output::Started(run), ToBrowser::RunStarted { spec, .. }) => {
                    self.started(run, spec, &mut out);
                }
                (Output::Started(_), _) => {}
                (Output::Stalls(run, stalls), _) => {
                    if let Some(trace) = self.runs.get_mut(&run) {
                        for stall in &stalls {
                            trace.stall(stall, &mut self.next_tid, &mut self.counts, &mut out);
                        }
                    }
                }
                (Output::Ended(ended, held), _) => self.ended(ended.run, &held, &mut out),
            }
        }
        self.steps = steps;
        out
    }

    /// At the end of the file: the remaining stalls of runs it ended inside (cut off).
    pub fn finish(&mut self) -> Vec<TraceEvent> {
        let mut out = Vec::new();
        let mut steps = std::mem::take(&mut self.steps);
        self.reducer.finish(&mut steps);
        for step in steps.drain(..) {
            if let Output::Ended(ended, held) = step {
                self.ended(ended.run, &held, &mut out);
            }
        }
        out
    }

    fn started(&mut self, run: RunId, spec: &Scenario, out: &mut Vec<TraceEvent>) {
        let pid = run.0.saturating_add(1);
        let name = format!("run {}: {}: {}", run.0, spec.name(), spec.describe());
        out.push(metadata("process_name", pid, None, Args::Name { name }));
        let sort_index = u64::from(run.0);
        out.push(metadata("process_sort_index", pid, None, Args::SortIndex { sort_index }));
        let trace = RunTrace { pid, threads: KeyedMap::default(), closed: KeyedMap::default() };
        self.runs.insert(run, trace);
        self.counts.runs += 1;
    }

    /// A run ended: the stalls of the requests its analysis still held.
    fn ended(&mut self, run: RunId, held: &[Stall], out: &mut Vec<TraceEvent>) {
        if let Some(mut trace) = self.runs.remove(&run) {
            for stall in held {
                trace.stall(stall, &mut self.next_tid, &mut self.counts, out);
            }
        }
    }
}

impl RunTrace {
    /// The thread of a connection side, named (metadata events) when first seen.
    fn thread(
        &mut self,
        conn: ConnId,
        side: Side,
        next_tid: &mut u32,
        out: &mut Vec<TraceEvent>,
    ) -> &mut Thread {
        let pid = self.pid;
        let closed = &mut self.closed;
        self.threads.entry((conn, side)).or_insert_with(|| {
            // A side that closed and is heard from again (a stall of its last request) keeps
            // its thread.
            let tid = closed.remove(&(conn, side)).unwrap_or_else(|| {
                let tid = *next_tid;
                *next_tid = next_tid.saturating_add(1);
                let name = format!("conn {} {}", conn.0, side.name());
                out.push(metadata("thread_name", pid, Some(tid), Args::Name { name }));
                let sort_index = 2 * u64::from(conn.0) + u64::from(side == Side::Server);
                let sort = Args::SortIndex { sort_index };
                out.push(metadata("thread_sort_index", pid, Some(tid), sort));
                tid
            });
            Thread { tid, open: None, counters: [None; COUNTERS.len()] }
        })
    }

    fn events(
        &mut self,
        events: &[Event],
        next_tid: &mut u32,
        counts: &mut Counts,
        out: &mut Vec<TraceEvent>,
    ) {
        let pid = self.pid;
        for event in events {
            let (opens, closes) = match event.kind {
                EventKind::ConnectStart => (Some((SpanKind::Connect, 0)), None),
                EventKind::WriteStart { len_bytes } => (Some((SpanKind::Write, len_bytes)), None),
                EventKind::ReadStart { len_bytes } => (Some((SpanKind::Read, len_bytes)), None),
                EventKind::Connected => (None, Some((SpanKind::Connect, None))),
                EventKind::WriteDone { bytes } => (None, Some((SpanKind::Write, Some(bytes)))),
                EventKind::ReadDone { bytes } => (None, Some((SpanKind::Read, Some(bytes)))),
                EventKind::TcpInfo(ref info) => {
                    let thread = self.thread(event.conn, event.side, next_tid, out);
                    counts.counters += counters(thread, pid, event, info, out);
                    continue;
                }
                EventKind::BlockedCall { call, since_ns, bytes } => {
                    // A watched program's call that slept, as a slice from its sleep to its
                    // return (a watch as root): where its wait was.
                    let thread = self.thread(event.conn, event.side, next_tid, out);
                    out.push(slept_call(pid, thread.tid, event, call, since_ns, bytes));
                    counts.syscalls += 1;
                    continue;
                }
                EventKind::Closed => {
                    // Only its tid is kept: a run that opens a connection per request holds
                    // the state of the open ones.
                    let key = (event.conn, event.side);
                    if let Some(thread) = self.threads.remove(&key) {
                        self.closed.insert(key, thread.tid);
                    }
                    continue;
                }
                _ => continue,
            };
            let thread = self.thread(event.conn, event.side, next_tid, out);
            if let Some((kind, asked)) = opens {
                // Each side of a connection is one thread: a new call ends any unfinished one.
                thread.open = Some(OpenCall { kind, start_ns: event.at_ns, asked });
            }
            if let Some((kind, bytes)) = closes {
                match thread.open {
                    Some(call) if call.kind == kind => {
                        thread.open = None;
                        out.push(syscall(pid, thread.tid, call, event, bytes));
                        counts.syscalls += 1;
                    }
                    _ => {}
                }
            }
        }
    }

    /// A stall as a slice on the thread of the call that waited, nested in that call: its last
    /// `wait_ns` (all of it when the wait counted is longer than the call, as think time can be),
    /// ending 1 ns before the call returned. Microseconds as floating point can move an end
    /// that equals the call's by a nanosecond (Perfetto truncates `dur` to whole nanoseconds),
    /// and a slice a nanosecond past its parent is cut and counted as a misplaced end.
    fn stall(
        &mut self,
        stall: &Stall,
        next_tid: &mut u32,
        counts: &mut Counts,
        out: &mut Vec<TraceEvent>,
    ) {
        let pid = self.pid;
        let key = (stall.conn, stall.side);
        let tid = match self.closed.get(&key) {
            Some(&tid) => tid,
            None => self.thread(stall.conn, stall.side, next_tid, out).tid,
        };
        let start_ns = stall.start_ns.max(stall.end_ns.saturating_sub(stall.wait_ns));
        let end_ns = stall.end_ns.saturating_sub(1).max(start_ns);
        out.push(TraceEvent {
            name: stall.class.name().to_string(),
            cat: Some("stall"),
            ph: "X",
            ts: Some(us(start_ns)),
            dur: Some(us(end_ns - start_ns)),
            pid,
            tid: Some(tid),
            args: Args::Stall {
                class: stall.class.code(),
                direction: format!("{}->{}", stall.from.name(), stall.to.name()),
                held_ms: stall.wait_ns as f64 / 1e6,
                evidence: stall.evidence.clone(),
                fixes: stall.class.fixes(stall.from, stall.to),
                req: stall.req.0,
            },
        });
        counts.stalls += 1;
    }
}

/// A returned call as a complete slice: "read 2048 B", "write 4 B", "connect".
fn syscall(pid: u32, tid: u32, call: OpenCall, done: &Event, bytes: Option<u32>) -> TraceEvent {
    let name = match (call.kind, bytes) {
        (SpanKind::Connect, _) => "connect".to_string(),
        (SpanKind::Write, Some(n)) => format!("write {n} B"),
        (SpanKind::Read, Some(0)) => "read 0 B (peer closed)".to_string(),
        (SpanKind::Read, Some(n)) => format!("read {n} B"),
        (kind, None) => format!("{kind:?}").to_lowercase(),
    };
    let asked = (call.kind != SpanKind::Connect).then_some(call.asked);
    TraceEvent {
        name,
        cat: Some("syscall"),
        ph: "X",
        ts: Some(us(call.start_ns)),
        dur: Some(us(done.at_ns.saturating_sub(call.start_ns))),
        pid,
        tid: Some(tid),
        args: Args::Call { bytes, asked, req: done.req.0 },
    }
}

/// A watched program's call that returned `bytes` after its thread slept from `since_ns`
/// ([`EventKind::BlockedCall`]): "recv() 100 B, slept".
fn slept_call(
    pid: u32,
    tid: u32,
    done: &Event,
    call: crate::event::Call,
    since_ns: u64,
    bytes: u32,
) -> TraceEvent {
    TraceEvent {
        name: format!("{} {bytes} B, slept", call.name()),
        cat: Some("syscall"),
        ph: "X",
        ts: Some(us(since_ns)),
        dur: Some(us(done.at_ns.saturating_sub(since_ns))),
        pid,
        tid: Some(tid),
        args: Args::Call { bytes: Some(bytes), asked: None, req: done.req.0 },
    }
}

/// The counter events of one TCP_INFO sample: the fields whose value changed on this side.
fn counters(
    thread: &mut Thread,
    pid: u32,
    event: &Event,
    info: &TcpInfoSample,
    out: &mut Vec<TraceEvent>,
) -> u64 {
    let mut written = 0;
    for (i, (field, unit, value_of)) in COUNTERS.iter().enumerate() {
        let Some(value) = value_of(info) else { continue };
        if thread.counters[i] == Some(value) {
            continue;
        }
        thread.counters[i] = Some(value);
        out.push(TraceEvent {
            name: format!("conn {} {} {field}", event.conn.0, event.side.name()),
            cat: Some("tcp_info"),
            ph: "C",
            ts: Some(us(event.at_ns)),
            dur: None,
            pid,
            tid: Some(thread.tid),
            args: Args::Counter(Counter { unit, value }),
        });
        written += 1;
    }
    written
}

fn metadata(name: &str, pid: u32, tid: Option<u32>, args: Args) -> TraceEvent {
    TraceEvent { name: name.to_string(), cat: None, ph: "M", ts: None, dur: None, pid, tid, args }
}

/// Nanoseconds as the format's microseconds, keeping the nanoseconds as decimals.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// What the trace says about where it came from (chrome://tracing shows it as metadata).
#[derive(Serialize)]
struct OtherData<'a> {
    source: &'a str,
    exported_by: String,
    recorded_by: Option<&'a str>,
    host: Option<String>,
    congestion_control: Option<&'a str>,
    tcp_rmem: Option<&'a str>,
    tcp_wmem: Option<&'a str>,
    /// The bad frame that ended the session file, if one did.
    error: Option<String>,
}

/// Writes the trace of `messages` to `out` as they come; returns the error that ended them.
pub fn write_trace(
    messages: impl Iterator<Item = Result<ToBrowser, WireError>>,
    source: &str,
    trace: &mut TraceBuilder,
    out: &mut impl Write,
) -> io::Result<Option<WireError>> {
    out.write_all(b"{\"traceEvents\":[")?;
    let mut first = true;
    let mut write_all = |out: &mut dyn Write, events: Vec<TraceEvent>| -> io::Result<()> {
        for event in &events {
            out.write_all(if first { b"\n" } else { b",\n" })?;
            first = false;
            serde_json::to_writer(&mut *out, event)?;
        }
        Ok(())
    };
    let mut error = None;
    for message in messages {
        match message {
            Ok(message) => write_all(out, trace.message(&message))?,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    write_all(out, trace.finish())?;
    let hello = trace.hello();
    let other = OtherData {
        source,
        exported_by: format!("ackscope {}", env!("CARGO_PKG_VERSION")),
        recorded_by: hello.map(|h| h.ackscope_version.as_str()),
        host: hello.map(|h| format!("{} {}", h.host.os, h.host.kernel)),
        congestion_control: hello.map(|h| h.host.congestion_control.as_str()),
        tcp_rmem: hello.map(|h| h.host.tcp_rmem.as_str()),
        tcp_wmem: hello.map(|h| h.host.tcp_wmem.as_str()),
        error: error.as_ref().map(|e| e.to_string()),
    };
    out.write_all(b"\n],\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(&mut *out, &other)?;
    out.write_all(b"}\n")?;
    Ok(error)
}

/// `ackscope export FILE --perfetto OUT`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ReqId;
    use crate::reduce::RETIRE_ABOVE;
    use crate::spec::RrSpec;
    use crate::synthetic::{nagle_run, MS};
    use crate::wire::{HostFacts, Instruments, RunOutcome};

    fn session(events: Vec<Event>) -> Vec<ToBrowser> {
        let run = RunId(1);
        let mut messages = vec![
            ToBrowser::Hello(Hello::current("0.1.0", HostFacts::default())),
            ToBrowser::RunStarted {
                run,
                spec: Scenario::Rr(RrSpec { requests: 10, ..RrSpec::default() }),
                instruments: Instruments::default(),
            },
        ];
        for batch in events.chunks(ackscope_shared::wire::EVENTS_PER_MESSAGE) {
            messages.push(ToBrowser::Events { run, events: batch.to_vec() });
        }
        messages.push(ToBrowser::RunFinished { run, outcome: RunOutcome::Completed });
        messages
    }

    fn map(messages: &[ToBrowser]) -> (Vec<TraceEvent>, Counts) {
        let mut trace = TraceBuilder::new();
        let mut all: Vec<TraceEvent> = messages.iter().flat_map(|m| trace.message(m)).collect();
        all.extend(trace.finish());
        (all, trace.counts)
    }

    fn end(e: &TraceEvent) -> f64 {
        e.ts.unwrap() + e.dur.unwrap()
    }

    #[test]
    fn a_nagle_run_maps_to_named_threads_syscall_slices_and_nested_stalls() {
        let (events, counts) = map(&session(nagle_run(10, 44 * MS)));
        let process = events.iter().find(|e| e.name == "process_name").unwrap();
        assert_eq!(process.pid, 2, "pid = run id + 1");
        let Args::Name { name } = &process.args else { panic!("{process:?}") };
        assert!(
            name.starts_with("run 1: rr: 10 x 2048 B, keep-alive, Nagle on both sides"),
            "{name}"
        );

        let threads: Vec<(&str, u32)> = events
            .iter()
            .filter(|e| e.name == "thread_name")
            .map(|e| match &e.args {
                Args::Name { name } => (name.as_str(), e.tid.unwrap()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(threads, [("conn 0 client", FIRST_TID), ("conn 0 server", FIRST_TID + 1)]);

        // Each exchange: the client writes 4 then 2048 bytes and reads them back, the server the
        // same the other way round.
        let syscalls: Vec<&TraceEvent> =
            events.iter().filter(|e| e.cat == Some("syscall")).collect();
        assert_eq!(syscalls.len(), 80);
        assert_eq!(counts.syscalls, 80);
        assert!(syscalls.iter().all(|e| e.ph == "X" && e.pid == 2));
        for (name, count) in [("write 4 B", 20), ("write 2048 B", 20), ("read 4 B", 20)] {
            assert_eq!(syscalls.iter().filter(|e| e.name == name).count(), count, "{name}");
        }
        let first_write = syscalls.iter().find(|e| e.name == "write 4 B").unwrap();
        assert_eq!(first_write.args, Args::Call { bytes: Some(4), asked: Some(4), req: 0 });
        assert_eq!((first_write.ts, first_write.dur), (Some(0.0), Some(5.0)));

        // Two stalls per request after the first, one on each side, each inside a read.
        let stalls: Vec<&TraceEvent> = events.iter().filter(|e| e.cat == Some("stall")).collect();
        assert_eq!(stalls.len(), 18);
        for stall in &stalls {
            assert_eq!(stall.name, "Nagle x delayed ACK");
            assert!((43_000.0..45_000.0).contains(&stall.dur.unwrap()), "{stall:?}");
            let Args::Stall { class, held_ms, evidence, fixes, .. } = &stall.args else {
                panic!("{stall:?}")
            };
            assert_eq!(*class, "nagle_delayed_ack");
            assert!((43.0..45.0).contains(held_ms));
            assert!(evidence.contains("Nagle held them"), "{evidence}");
            assert!(fixes.iter().any(|f| f.starts_with("TCP_NODELAY")), "{fixes:?}");
            let parent = syscalls.iter().find(|s| {
                s.tid == stall.tid
                    && s.name == "read 2048 B"
                    && s.ts <= stall.ts
                    && end(stall) < end(s)
            });
            assert!(parent.is_some(), "nested in its read: {stall:?}");
        }
        assert!(stalls.iter().any(|s| s.tid == Some(FIRST_TID)));
        assert!(stalls.iter().any(|s| s.tid == Some(FIRST_TID + 1)));
    }

    #[test]
    fn a_long_run_retires_requests_and_still_writes_every_stall_once() {
        let requests = RETIRE_ABOVE as u32 + 500;
        let (events, counts) = map(&session(nagle_run(requests, 44 * MS)));
        assert_eq!(counts.stalls, 2 * u64::from(requests - 1));
        let mut reads: Vec<(u32, u32)> = events
            .iter()
            .filter_map(|e| match e.args {
                Args::Stall { req, .. } => Some((req, e.tid.unwrap())),
                _ => None,
            })
            .collect();
        reads.sort_unstable();
        reads.dedup();
        assert_eq!(reads.len() as u64, counts.stalls, "no stall twice");
    }

    fn tcp_info(at_ns: u64, unacked: u32) -> Event {
        let info = TcpInfoSample {
            unacked,
            snd_cwnd: 10,
            rtt_us: 50,
            notsent_bytes: Some(2048),
            ..TcpInfoSample::default()
        };
        Event {
            at_ns,
            side: Side::Client,
            conn: ConnId(3),
            req: ReqId(0),
            kind: EventKind::TcpInfo(Box::new(info)),
        }
    }

    #[test]
    fn tcp_info_becomes_counters_written_when_they_change() {
        let (events, counts) = map(&session(vec![tcp_info(1_234_567, 1), tcp_info(2_000_000, 2)]));
        let counters: Vec<&TraceEvent> = events.iter().filter(|e| e.ph == "C").collect();
        // The first sample: every field it has (snd_wnd and rcv_wnd are absent), the second: unacked.
        assert_eq!(counters.len(), 7 + 1);
        assert_eq!(counts.counters, 8);
        let notsent = counters.iter().find(|e| e.name == "conn 3 client notsent").unwrap();
        assert_eq!(notsent.args, Args::Counter(Counter { unit: "bytes", value: 2048 }));
        assert_eq!(notsent.ts, Some(1234.567), "microseconds, nanoseconds kept as decimals");
        let last = counters.last().unwrap();
        assert_eq!(last.name, "conn 3 client unacked");
        assert_eq!(last.args, Args::Counter(Counter { unit: "segments", value: 2 }));
        assert_eq!(last.ts, Some(2000.0));
        assert!(!counters.iter().any(|e| e.name.ends_with("snd_wnd")));
    }

    #[test]
    fn events_serialize_as_trace_objects_with_strings_escaped() {
        let stall = TraceEvent {
            name: "a \"quoted\"\nname\\".into(),
            cat: Some("stall"),
            ph: "X",
            ts: Some(0.5),
            dur: Some(44_000.001),
            pid: 2,
            tid: Some(FIRST_TID),
            args: Args::Stall {
                class: "unexplained",
                direction: "client->server".into(),
                held_ms: 44.000001,
                evidence: "tab\there, \u{1} control".into(),
                fixes: vec!["x".into()],
                req: 7,
            },
        };
        let text = serde_json::to_string(&stall).unwrap();
        assert!(!text.contains('\n') && !text.contains('\t'), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["name"], "a \"quoted\"\nname\\");
        assert_eq!(v["ts"], 0.5);
        assert_eq!(v["dur"], 44_000.001);
        assert_eq!(v["args"]["evidence"], "tab\there, \u{1} control");
        assert_eq!(v["args"]["fixes"][0], "x");
        let counter = TraceEvent {
            args: Args::Counter(Counter { unit: "us", value: 9 }),
            ph: "C",
            dur: None,
            ..stall
        };
        let v: serde_json::Value = serde_json::to_value(&counter).unwrap();
        assert_eq!(v["args"], serde_json::json!({"us": 9}));
        assert!(v.get("dur").is_none());
    }

    #[test]
    fn the_written_trace_is_one_json_object_even_when_the_file_was_cut() {
        let messages = session(nagle_run(3, 44 * MS));
        let cut = messages[..messages.len() - 1].iter().cloned().map(Ok);
        let cut = cut.chain([Err(WireError::Truncated { offset: 99 })]);
        let mut bytes = Vec::new();
        let mut trace = TraceBuilder::new();
        let error = write_trace(cut, "s.ackscope", &mut trace, &mut bytes).unwrap();
        assert_eq!(error, Some(WireError::Truncated { offset: 99 }));
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["displayTimeUnit"], "ns");
        assert_eq!(doc["otherData"]["source"], "s.ackscope");
        assert!(doc["otherData"]["error"].as_str().unwrap().contains("byte 99"));
        let events = doc["traceEvents"].as_array().unwrap();
        // The run was cut off before RunFinished: its stalls are still written.
        assert_eq!(events.iter().filter(|e| e["cat"] == "stall").count(), 4);
        assert_eq!(events.len() as u64, 2 + 4 + trace.counts.syscalls + trace.counts.stalls);
    }
}
