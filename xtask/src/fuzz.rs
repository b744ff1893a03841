//! `cargo xtask fuzz [--seconds N | --runs N] [--target NAME] [--keep]`: the coverage-guided
//! fuzz targets of `fuzz/` (cargo-fuzz and libFuzzer, on the nightly toolchain), each for N
//! seconds, or until it has run N inputs (`--runs`: an exec count to reach, however long).
//!
//! Each target starts from its checked-in corpus (`fuzz/corpus/TARGET`, read only) and writes
//! what it finds under `target/fuzz-corpus/TARGET`; `--keep` merges the finds that add coverage
//! into the checked-in corpus, on purpose. libFuzzer's limits are the budgets that fail a target:
//! any single allocation over 64 MB (the largest legitimate one is a 16 MiB message), 1 GB of
//! memory in all, 10 s for one input. A crash stops with the input's path; add it to the
//! corpus with the fix, and the smoke pass (`shared/tests/fuzz_corpus.rs`) keeps it fixed.

use std::process::Stdio;

use crate::cli::Flags;
use crate::setup::{self, tool_command};
use crate::steps::{RunExt, Steps};

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N | --runs N] [--target NAME] [--keep]";

/// The fuzz crate's binaries: the names of `ackscope_shared::fuzzing::TARGETS` and the probe's
/// `show_pipeline` (`ackscope_probe::fuzzing`), which xtask does not build.
const TARGETS: [&str; 10] = [
    "session_frames",
    "compact_events",
    "event_blocks",
    "seek_request",
    "websocket_to_probe",
    "control_messages",
    "pcap_import",
    "ip_tcp",
    "reducer_ops",
    "show_pipeline",
];

/// libFuzzer's budgets (docs/FUZZING.md). `-max_len`: inputs up to 64 KiB (several frames of a
/// session, a capture of dozens of packets); by default libFuzzer stops at its corpus's largest
/// input, about 4 KB here, and a decoder's bounds past that were never tried.
const LIMITS: [&str; 5] = [
    "-malloc_limit_mb=64",
    "-rss_limit_mb=1024",
    "-timeout=10",
    "-max_len=65536",
    "-print_final_stats=1",
];

/// What `cargo xtask fuzz` was asked for.
#[derive(Debug, PartialEq)]
struct Options {
    /// Each target's time, unless `runs` is given.
    seconds: u32,
    /// Each target's exec count to reach, however long it takes.
    runs: Option<u64>,
    /// The one target to run (all of them when `None`).
    only: Option<String>,
    /// Merge the finds that add coverage into the checked-in corpus.
    keep: bool,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut options = Options { seconds: 60, runs: None, only: None, keep: false };
    let mut flags = Flags::new(args, USAGE);
    while let Some(flag) = flags.next()? {
        match flag.as_str() {
            "--seconds" => options.seconds = flags.number(&flag)?,
            "--runs" => options.runs = Some(flags.number(&flag)?),
            "--target" => {
                let name = flags.value(&flag)?;
                if !TARGETS.contains(&name.as_str()) {
                    return Err(
                        flags.error(&format!("no fuzz target `{name}`: {}", TARGETS.join(", ")))
                    );
                }
                options.only = Some(name);
            }
            "--keep" => options.keep = true,
            _ => return Err(flags.unknown(&flag)),
        }
    }
    Ok(options)
}

pub fn run(args: &[String]) -> Result<(), String> {
    let Options { seconds, runs, only, keep } = options(args)?;
    let targets: Vec<&str> =
        TARGETS.iter().copied().filter(|t| only.as_deref().is_none_or(|o| o == *t)).collect();
    let mut steps = Steps::new(3 + targets.len());
    ensure_fuzz_tools(&mut steps)?;
    steps.start("fuzz targets (instrumented, release)");
    fuzz_cargo().args(["build", "-O"]).run()?;
    steps.done("built");
    let mut report = Vec::new();
    for target in targets {
        let budget = match runs {
            Some(runs) => format!("-runs={runs}"),
            None => format!("-max_total_time={seconds}"),
        };
        steps.start(&format!(
            "{target}, {}",
            runs.map_or(format!("{seconds} s"), |r| format!("{r} runs"))
        ));
        let started = std::time::Instant::now();
        let found = setup::root().join("target/fuzz-corpus").join(target);
        std::fs::create_dir_all(&found).map_err(|e| format!("{}: {e}", found.display()))?;
        let checked_in = format!("corpus/{target}");
        let output = fuzz_cargo()
            .args(["run", "-O", target])
            .arg(&found)
            .arg(&checked_in)
            .arg("--")
            .arg(&budget)
            .args(LIMITS)
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("cargo fuzz run {target}: {e}"))?;
        let log = String::from_utf8_lossy(&output.stderr);
        let execs = stat(&log, "stat::number_of_executed_units:");
        let rss = stat(&log, "stat::peak_rss_mb:");
        if !output.status.success() {
            let tail: Vec<&str> =
                log.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect();
            return Err(format!(
                "fuzz target {target} failed after {} runs:\n{}",
                execs.unwrap_or(0),
                tail.join("\n")
            ));
        }
        let execs = execs.ok_or_else(|| format!("{target}: libFuzzer printed no statistics"))?;
        steps.done(&format!("{execs} runs, clean, peak RSS {} MB", rss.unwrap_or(0)));
        if keep {
            fuzz_cargo()
                .args(["run", "-O", target])
                .arg(&checked_in)
                .arg(&found)
                .args(["--", "-merge=1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .run()?;
        }
        report.push((target, execs, rss, started.elapsed().as_secs()));
    }
    println!();
    for (target, execs, rss, seconds) in report {
        println!(
            "fuzz {target} execs={execs} seconds={seconds} peak_rss_mb={} clean",
            rss.unwrap_or(0)
        );
    }
    Ok(())
}

/// `cargo +nightly fuzz` in `fuzz/`, building under the one target dir.
fn fuzz_cargo() -> std::process::Command {
    let mut command = tool_command("cargo");
    command.args(["+nightly", "fuzz"]);
    command.current_dir(setup::root().join("fuzz"));
    command.env("CARGO_TARGET_DIR", setup::root().join("target/fuzz"));
    command
}

/// The nightly toolchain (for `-Z sanitizer`) and cargo-fuzz, installed when missing.
fn ensure_fuzz_tools(steps: &mut Steps) -> Result<(), String> {
    steps.start("Rust nightly toolchain (cargo-fuzz's instrumentation needs it)");
    if tool_command("cargo").args(["+nightly", "--version"]).run_quietly() {
        steps.done("installed");
    } else {
        tool_command("rustup")
            .args(["toolchain", "install", "nightly", "--profile", "minimal"])
            .run()?;
        steps.done("installed now");
    }
    steps.start("cargo-fuzz");
    if tool_command("cargo").args(["fuzz", "--version"]).run_quietly() {
        steps.done("installed");
    } else {
        steps.note("compiles from source: about 2 minutes, once");
        setup::cargo().args(["install", "cargo-fuzz", "--locked"]).run()?;
        steps.done("installed now");
    }
    Ok(())
}

/// libFuzzer's `-print_final_stats` value after `label`.
fn stat(log: &str, label: &str) -> Option<u64> {
    log.lines().find_map(|line| line.strip_prefix(label)).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    #[test]
    fn fuzz_flags() {
        let defaults = Options { seconds: 60, runs: None, only: None, keep: false };
        assert_eq!(options(&[]), Ok(defaults));
        assert_eq!(
            options(&args("--runs 5000000000 --target ip_tcp --keep --seconds 5")),
            Ok(Options {
                seconds: 5,
                runs: Some(5_000_000_000),
                only: Some("ip_tcp".into()),
                keep: true
            })
        );
        let error = options(&args("--target nope")).unwrap_err();
        assert!(error.starts_with("no fuzz target `nope`: session_frames, "), "{error}");
        assert!(error.ends_with(USAGE), "{error}");
        let error = options(&args("--seconds")).unwrap_err();
        assert_eq!(error, format!("--seconds needs a number\n{USAGE}"));
        let error = options(&args("--target")).unwrap_err();
        assert_eq!(error, format!("--target needs a value\n{USAGE}"));
        let error = options(&args("--runs many")).unwrap_err();
        assert_eq!(error, format!("--runs needs a whole number, not `many`\n{USAGE}"));
        let error = options(&args("--count 3")).unwrap_err();
        assert_eq!(error, format!("unknown option `--count`\n{USAGE}"));
    }

    #[test]
    fn reads_libfuzzers_final_statistics() {
        let log = "#231384\tDONE   cov: 1555\nstat::number_of_executed_units: 231384\n\
                   stat::peak_rss_mb:              368\n";
        assert_eq!(stat(log, "stat::number_of_executed_units:"), Some(231_384));
        assert_eq!(stat(log, "stat::peak_rss_mb:"), Some(368));
        assert_eq!(stat(log, "stat::slowest_unit_time_sec:"), None);
    }
}
