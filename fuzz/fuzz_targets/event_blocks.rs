#![no_main]
// See ackscope_shared::fuzzing::event_blocks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::event_blocks(data));
