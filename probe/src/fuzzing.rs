//! The fuzz target that runs ackscope's own read-back commands (`fuzz/fuzz_targets/
//! show_pipeline.rs`, `cargo xtask fuzz`): `show` and `export --json` of arbitrary bytes as a
//! session file, the very code the commands run (frames decoded, each run analysed as it streams
//! with requests retired past a bound, every stall attributed, the summaries printed), its output
//! thrown away. `probe/tests/fuzz_corpus.rs` replays the checked-in corpus through it on stable.
//! The decoders alone are fuzzed by `ackscope_shared::fuzzing`.

/// `ackscope show` then `ackscope export --json` of `data`.
pub fn show_pipeline(data: &[u8]) {
    crate::cli::show_and_export(data);
}
