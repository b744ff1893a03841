#![no_main]
// See ackscope_shared::fuzzing::seek_request.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::seek_request(data));
