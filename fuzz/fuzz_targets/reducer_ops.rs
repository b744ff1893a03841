#![no_main]
// The session reducer driven past every bound it keeps: see ackscope_shared::fuzzing::reducer_ops.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::reducer_ops(data));
