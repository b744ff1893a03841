//! `cargo xtask`: set-up, build order (web before probe) and the one test command.
//!
//! Its dependencies are ones the workspace builds anyway (ackscope-shared, serde_json, libc) and
//! lexopt for its flags, which has none, so it still compiles in seconds on a fresh machine.
//!
//! ```text
//! cargo xtask run [-- ARGS]   install what is missing, build, serve (ARGS go to ackscope)
//! cargo xtask build           install what is missing, build web app and probe (release)
//! cargo xtask build-vm        the in-browser Linux into dist/vm/ (docs/IN-BROWSER.md)
//! cargo xtask setup           only install what is missing
//! cargo xtask test            everything CI checks: fmt, clippy, unit, browser, end-to-end
//! cargo xtask record-lessons  record the lessons' steps into lessons/recordings/
//! ```

mod bench;
mod bench_capture;
mod bench_hostile;
mod bench_link;
mod bench_remote;
mod bench_setup;
mod bench_viewer;
mod bench_watch;
mod build_vm;
mod cli;
mod fuzz;
mod json;
mod layers;
mod link_taps;
mod setup;
mod steps;
mod web_build;

use std::process::ExitCode;

use steps::{RunExt, Steps};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match command {
        "setup" => setup::ensure_build_tools(&mut Steps::new(3)),
        "build" => build(),
        "build-vm" => build_vm::run(),
        "run" => build().and_then(|()| run_probe(rest)),
        "test" => test(),
        "fuzz" => fuzz::run(rest),
        "record-lessons" => build().and_then(|()| record_lessons()),
        "bench" => bench::run(rest),
        "help" | "--help" | "-h" => {
            println!("{}", include_str!("usage.txt"));
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("xtask: unknown command `{other}`\n\n{}", include_str!("usage.txt"));
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("\nxtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn build() -> Result<(), String> {
    let mut steps = Steps::new(5);
    setup::ensure_build_tools(&mut steps)?;
    build_web(&mut steps)?;
    build_probe(&mut steps)
}

pub(crate) fn build_web(steps: &mut Steps) -> Result<(), String> {
    steps.start("web app (Rust to wasm32, wasm-bindgen, wasm-opt)");
    if setup::dist_is_fresh() {
        steps.done("up to date");
        return Ok(());
    }
    steps.note("a clean build takes a few minutes on 2 cores; a rebuild after an edit 20 to 60 s");
    web_build::build()?;
    steps.done("built into dist/");
    Ok(())
}

pub(crate) fn build_probe(steps: &mut Steps) -> Result<(), String> {
    steps.start("probe (release, with the web app embedded)");
    steps.note("a clean build takes about two minutes; an unchanged one a second");
    setup::cargo()
        .args(["build", "--release", "--package", "ackscope-probe"])
        .env("ACKSCOPE_WEB_DIST", setup::root().join("dist"))
        .run()?;
    steps.done(&setup::probe_binary().display().to_string());
    Ok(())
}

/// Records every lesson's steps with the release probe into lessons/recordings/ (then rebuilds,
/// so the app carries the new recordings).
fn record_lessons() -> Result<(), String> {
    let root = setup::root();
    let mut lessons: Vec<_> = std::fs::read_dir(root.join("lessons"))
        .map_err(|e| format!("reading lessons/: {e}"))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "lesson"))
        .collect();
    lessons.sort();
    let out = root.join("lessons/recordings");
    println!("\nrecording {} lessons into {}", lessons.len(), out.display());
    std::process::Command::new(setup::probe_binary())
        .arg("record-lesson")
        .args(&lessons)
        .arg("--out")
        .arg(&out)
        .run()?;
    build()
}

fn run_probe(args: &[String]) -> Result<(), String> {
    let args = args.strip_prefix(&["--".to_string()]).unwrap_or(args);
    let binary = setup::probe_binary();
    println!("\nstarting {} {}", binary.display(), args.join(" "));
    let status = std::process::Command::new(&binary)
        .args(args)
        .status()
        .map_err(|e| format!("could not start {}: {e}", binary.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("ackscope exited with {status}"))
    }
}

/// Where the end-to-end test writes its screenshots: `target/screenshots`, beside the build.
fn screenshot_dir() -> Result<std::path::PathBuf, String> {
    let dir = setup::target_dir().join("screenshots");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

fn test() -> Result<(), String> {
    let mut steps = Steps::new(12);
    let test_packages = setup::BackgroundInstall::start();
    setup::ensure_build_tools(&mut steps)?;
    test_packages.finish(&mut steps)?;

    steps.start("cargo fmt --check");
    setup::cargo().args(["fmt", "--all", "--", "--check"]).run()?;
    let modules = layers::check(&setup::root())?;
    steps.done(&format!("formatted; {modules} modules of shared in layers, no cycle"));

    steps.start("clippy, warnings denied (native crates)");
    setup::cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]).run()?;
    steps.done("clean");

    steps.start("clippy, warnings denied (web crate, wasm32)");
    setup::cargo()
        .args(["clippy", "--package", "ackscope-web", "--target", "wasm32-unknown-unknown"])
        // The tests' profile, so that their proc macros and build scripts are built once.
        .args(["--profile", "wasm-test", "--all-targets", "--", "-D", "warnings"])
        .run()?;
    steps.done("clean");

    build_web(&mut steps)?;
    build_probe(&mut steps)?;

    steps.start("web crate tests in headless Chromium (wasm-bindgen-test)");
    // The test runner's Chromium leaves its profile (about 12 MB) in the temporary folder when
    // the runner ends: it gets a folder of its own, removed afterwards however the tests end.
    let scratch = std::env::temp_dir().join(format!("ackscope-wasm-test-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .map_err(|e| format!("creating {}: {e}", scratch.display()))?;
    let tests = setup::tool_command("cargo")
        .args(["test", "--package", "ackscope-web", "--target", "wasm32-unknown-unknown"])
        .args(["--profile", "wasm-test"])
        .env("TMPDIR", &scratch)
        .run();
    let _ = std::fs::remove_dir_all(&scratch);
    tests?;
    steps.done("passed");

    steps.start("native unit, integration and end-to-end tests (the web crate's pure modules too)");
    steps.note("the end-to-end test drives the real binary in headless Chromium");
    // Both passes below run the workspace's tests against the release binary just built.
    let workspace_tests = || -> Result<std::process::Command, String> {
        let mut command = setup::tool_command("cargo");
        command
            .args(["test", "--workspace"])
            .env("ACKSCOPE_BIN", setup::probe_binary())
            // Under target/: tests never rewrite tracked files; docs/ gets a copy on purpose.
            .env("ACKSCOPE_SCREENSHOT_DIR", screenshot_dir()?);
        Ok(command)
    };
    workspace_tests()?.run()?;
    steps.done("passed");

    // The tests that need root are `#[ignore = "needs root ..."]`: the pass above lists them as
    // ignored, by name. Here they run, on their own, when this is root (as in CI).
    steps.start(
        "root-only tests (packet capture, namespaces, SCHED_FIFO, the Linux in the tab), the \
         ignored ones above",
    );
    if setup::is_root() {
        // The in-browser Linux's test boots it from dist/vm/ (about 7 minutes the first time:
        // its kernel and the probe for i686; seconds after).
        build_vm::run()?;
        workspace_tests()?.args(["--", "--ignored"]).run()?;
        steps.done("passed");
    } else {
        steps.done(
            "skipped: not root; the tests listed as ignored above did not run (CI runs them)",
        );
    }
    println!("\nall checks passed");
    Ok(())
}
