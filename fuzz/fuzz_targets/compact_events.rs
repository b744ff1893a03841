#![no_main]
// See ackscope_shared::fuzzing::compact_events.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::compact_events(data));
