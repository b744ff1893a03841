//! The smoke pass of the `show_pipeline` fuzz target (the others are replayed by
//! shared/tests/fuzz_corpus.rs): every checked-in input of its corpus through `ackscope show`
//! and `export --json`'s own code, on stable. An input that once crashed it stays in the corpus,
//! so this is also the regression test of every fix the fuzzer found.

use std::path::PathBuf;

#[test]
fn every_show_pipeline_corpus_input_goes_through_show_and_export() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/show_pipeline"));
    let inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; the target has a corpus", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(inputs.len() > 100, "{}: only {} inputs", dir.display(), inputs.len());
    for input in inputs {
        ackscope_probe::fuzzing::show_pipeline(&std::fs::read(&input).unwrap());
    }
}
