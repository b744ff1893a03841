//! What the CLI tests share: running the real binary and printing what it said on failure.

use std::path::{Path, PathBuf};
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

// Each test file compiles its own copy of this module and uses some of it.
#[allow(dead_code)]
pub fn is_root() -> bool {
    // SAFETY: geteuid() cannot fail and has no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// True as root; otherwise reports the test `name` as skipped and why (CI runs as root, so
/// there it always runs). The report goes straight to standard error, not through `eprintln!`,
/// which the test harness captures and hides for a test that returns: a skip must be seen.
#[allow(dead_code)]
pub fn root_or_skip(name: &str, why: &str) -> bool {
    let root = is_root();
    if !root {
        use std::io::Write;
        let line = format!("SKIPPED {name}: {why} needs root (CI runs as root)\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
    root
}

/// Every event of a session file, through `ackscope export FILE --json`.
#[allow(dead_code)]
pub fn exported_events(file: &str) -> Vec<ackscope_shared::Event> {
    let export = ackscope(&["export", file, "--json"]);
    assert!(export.status.success(), "export {file}");
    let export: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    export["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|message| message.get("Events"))
        .flat_map(|batch| {
            serde_json::from_value::<Vec<ackscope_shared::Event>>(batch["events"].clone()).unwrap()
        })
        .collect()
}

/// A path in this test binary's own temporary folder (`tag` tells the binaries' folders apart).
#[allow(dead_code)]
pub fn temp(tag: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ackscope-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A path as the `&str` a command line takes.
#[allow(dead_code)]
pub fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A program's output as text.
#[allow(dead_code)]
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sends SIGINT (Ctrl-C) to `pid`.
#[allow(dead_code)]
pub fn interrupt(pid: u32) {
    let status = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -INT {pid}");
}
