#![no_main]
// See ackscope_shared::fuzzing::show_pipeline.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::show_pipeline(data));
