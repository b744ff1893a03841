//! The bodies of the fuzz targets (`fuzz/`, `cargo xtask fuzz`): every decoder of bytes that come
//! from a file or the network. (The whole read-back pipeline, `ackscope show` and `export`, is
//! fuzzed through the probe's own code: `ackscope_probe::fuzzing`.) Each takes arbitrary bytes
//! and must neither panic nor take memory or time out of proportion to them (libFuzzer's limits,
//! set by `cargo xtask fuzz`, fail a target that does). They live here, behind the `fuzzing`
//! feature, so that a plain `cargo test` replays the checked-in corpora through them on stable
//! Rust (`shared/tests/fuzz_corpus.rs`): the smoke pass of CI.

use crate::control::{ToClient, ToServer};
use crate::event::RunId;
use crate::wire::{self, FrameStream, ToBrowser, ToProbe};

/// A target's body: arbitrary bytes in, no panic out.
pub type Target = fn(&[u8]);

/// Every target, by name: the fuzz crate's binaries and the corpus folders are named alike.
/// (The seventh, `show_pipeline`, runs the probe's own `show` and `export --json`:
/// `ackscope_probe::fuzzing`.)
pub const TARGETS: [(&str, Target); 6] = [
    ("session_frames", session_frames),
    ("compact_events", compact_events),
    ("websocket_to_probe", websocket_to_probe),
    ("control_messages", control_messages),
    ("pcap_import", pcap_import),
    ("ip_tcp", ip_tcp),
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
    let mut reader = crate::pcap::CaptureReader::new(data);
    while let Some(packet) = reader.next_packet() {
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
