//! The bodies of the fuzz targets (`fuzz/`, `cargo xtask fuzz`): every decoder of bytes that come
//! from a file or the network, and the whole read-back pipeline behind `ackscope show`. Each
//! takes arbitrary bytes and must neither panic nor take memory or time out of proportion to
//! them (libFuzzer's limits, set by `cargo xtask fuzz`, fail a target that does). They live here,
//! behind the `fuzzing` feature, so that a plain `cargo test` replays the checked-in corpora
//! through them on stable Rust (`shared/tests/fuzz_corpus.rs`): the smoke pass of CI.

use crate::analysis::{RunAnalysis, MAX_REQUESTS_AHEAD};
use crate::attribution::{self, StallTally};
use crate::bulk::BulkAnalysis;
use crate::control::{ToClient, ToServer};
use crate::event::RunId;
use crate::kernel::KernelTracks;
use crate::overview::Overview;
use crate::spec::Scenario;
use crate::wire::{self, FrameStream, ToBrowser, ToProbe};
use std::collections::HashMap;

/// A target's body: arbitrary bytes in, no panic out.
pub type Target = fn(&[u8]);

/// Every target, by name: the fuzz crate's binaries and the corpus folders are named alike.
pub const TARGETS: [(&str, Target); 7] = [
    ("session_frames", session_frames),
    ("compact_events", compact_events),
    ("websocket_to_probe", websocket_to_probe),
    ("control_messages", control_messages),
    ("pcap_import", pcap_import),
    ("ip_tcp", ip_tcp),
    ("show_pipeline", show_pipeline),
];

/// A session file's framing, fed in uneven pieces as a file or socket delivers them.
pub fn session_frames(data: &[u8]) {
    let mut stream = FrameStream::new();
    let split = data.first().map_or(1, |&b| usize::from(b).max(1));
    for chunk in data.chunks(split) {
        stream.push(chunk);
        while let Some(message) = stream.next_message() {
            if message.is_err() {
                return;
            }
        }
    }
    let _ = stream.finish();
}

/// One message as the browser decodes it, the compact event encoding included.
pub fn compact_events(data: &[u8]) {
    if let Ok(ToBrowser::Events { events, .. }) = wire::decode::<ToBrowser>(data) {
        // What came out encodes again and decodes to the same.
        let again = wire::encode(&ToBrowser::Events { run: RunId(0), events: events.clone() });
        match wire::decode::<ToBrowser>(&again) {
            Ok(ToBrowser::Events { events: back, .. }) => assert_eq!(back, events),
            other => panic!("re-encoded events do not decode: {other:?}"),
        }
    }
}

/// What a page sends the probe, as the probe decodes and checks it before acting.
pub fn websocket_to_probe(data: &[u8]) {
    if let Ok(ToProbe::StartRun { spec } | ToProbe::StartRemoteRun { spec, .. }) =
        wire::decode::<ToProbe>(data)
    {
        let _ = spec.validate();
        let _ = spec.describe();
    }
}

/// Both directions of a control connection between two probes.
pub fn control_messages(data: &[u8]) {
    let _ = wire::peek_version(data);
    if let Ok(ToServer::Run { spec, .. }) = wire::decode::<ToServer>(data) {
        let _ = spec.validate();
    }
    let _ = wire::decode::<ToClient>(data);
}

/// A pcap or pcapng file as `ackscope import` reads it, every packet parsed.
pub fn pcap_import(data: &[u8]) {
    let capture = crate::pcap::read(data);
    for packet in &capture.packets {
        let _ = crate::pcap::parse_link(packet.linktype, packet.data);
    }
}

/// IP and TCP headers, as capture and import parse them (Ethernet first when the first byte says
/// so, else raw IP).
pub fn ip_tcp(data: &[u8]) {
    let _ = crate::packet::parse_ip(data);
    let _ = crate::packet::parse_ethernet(data);
    if let Some((&linktype, rest)) = data.split_first() {
        let _ = crate::pcap::parse_link(u16::from(linktype), rest);
    }
}

/// What `ackscope show` does with a file: decode every frame, analyse each run as it streams
/// (requests retired past a bound, as the CLI does), attribute every stall, keep the overview,
/// and summarize.
pub fn show_pipeline(data: &[u8]) {
    let mut stream = FrameStream::new();
    stream.push(data);
    let mut runs: HashMap<RunId, Pipeline> = HashMap::new();
    while let Some(message) = stream.next_message() {
        let Ok(message) = message else { break };
        match message {
            // A file may hold many runs; past a bound they are not kept (as `show` streams).
            ToBrowser::RunStarted { run, spec, .. } if runs.len() < 64 => {
                runs.insert(run, Pipeline::new(spec));
            }
            ToBrowser::Events { run, events } => {
                if let Some(pipeline) = runs.get_mut(&run) {
                    pipeline.push(&events);
                }
            }
            _ => {}
        }
    }
    for pipeline in runs.into_values() {
        pipeline.finish();
    }
}

struct Pipeline {
    spec: Scenario,
    analysis: RunAnalysis,
    bulk: BulkAnalysis,
    kernel: KernelTracks,
    retired: StallTally,
    overview: Overview,
}

impl Pipeline {
    fn new(spec: Scenario) -> Pipeline {
        Pipeline {
            analysis: RunAnalysis::of_rr(spec.rr()),
            spec,
            bulk: BulkAnalysis::new(),
            kernel: KernelTracks::new(),
            retired: StallTally::default(),
            overview: Overview::default(),
        }
    }

    fn push(&mut self, events: &[crate::Event]) {
        self.analysis.push_all(events);
        self.bulk.push_all(events);
        self.kernel.push_all(events);
        if self.analysis.requests().len() > MAX_REQUESTS_AHEAD / 2 {
            let spec = self.spec.rr();
            let (retired, overview) = (&mut self.retired, &mut self.overview);
            self.analysis.retire(1024, |analysis, req, view| {
                let stalls = attribution::attribute_request(analysis, req, view, spec);
                for stall in &stalls {
                    retired.add(stall);
                }
                let (key, stalled) = crate::overview::row(view, &stalls);
                overview.push(key, stalled);
            });
        }
    }

    fn finish(self) {
        let spec = self.spec.rr();
        let stalls = attribution::attribute(&self.analysis, spec);
        let _ = self.retired.summaries_with(&stalls);
        let _ = self.analysis.summary();
        let _ = self.bulk.summary();
    }
}
