#![no_main]
// See ackscope_shared::fuzzing::websocket_to_probe.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::websocket_to_probe(data));
