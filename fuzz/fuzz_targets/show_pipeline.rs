#![no_main]
// `ackscope show` and `export --json` of the bytes: see ackscope_probe::fuzzing.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_probe::fuzzing::show_pipeline(data));
