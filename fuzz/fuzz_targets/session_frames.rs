#![no_main]
// See ackscope_shared::fuzzing::session_frames.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::session_frames(data));
