//! What the CLI tests share: running the real binary and printing what it said on failure.

use std::process::{Command, Output};

/// Runs `ackscope ARGS` to completion; its output is printed so a failing test shows it.
pub fn ackscope(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_ackscope")).args(args).output().unwrap();
    eprintln!(
        "$ ackscope {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
