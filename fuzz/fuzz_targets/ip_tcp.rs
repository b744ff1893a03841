#![no_main]
// See ackscope_shared::fuzzing::ip_tcp.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::ip_tcp(data));
