#![no_main]
// See ackscope_shared::fuzzing::pcap_import.
libfuzzer_sys::fuzz_target!(|data: &[u8]| ackscope_shared::fuzzing::pcap_import(data));
