#![no_main]
// See ackscope_shared::fuzzing::control_messages.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::control_messages(data));
