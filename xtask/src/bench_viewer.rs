//! `cargo xtask bench viewer`: a real session of a million requests, recorded by the release
//! probe, opened in the real app in headless Chromium, then zoomed and panned for 5 s; and from
//! the command line, the file's size against its rows, one request through its block index
//! against `show` of the whole, and the readers' peak memory (`--requests 10000000`: those,
//! and the page reading what it holds of the file, then going to its last request).
//!
//! The measuring is done from outside the app, with the page's own clock, by the `bench-viewer`
//! program of the tests crate (tests/src/bin/bench_viewer.rs), which prints
//! `viewer load_ms=L frame_p95_ms=F wasm_mb=W file_mb=M requests=N ...`.

use std::fs;

use crate::steps::{RunExt, Steps};
use crate::{cli, setup};

pub(crate) const USAGE: &str =
    "usage: cargo xtask bench viewer [--requests N] [--seconds S]   (--count N: the same)";
/// The overview painted, and every request reachable, for a million requests (issue 37).
const LOAD_TARGET_MS: f64 = 100.0;
const FULL_LOAD_TARGET_MS: f64 = 1500.0;
/// No main-thread task longer than this, while loading or while a live run streams.
const TASK_TARGET_MS: f64 = 50.0;
/// The live view keeps up with at least this share of the CLI's recording rate.
const LIVE_VS_CLI_TARGET: f64 = 0.9;
const FRAME_TARGET_MS: f64 = 16.7;
/// The page's memory for a file's requests. (It was 1.5 times the file's size while files were
/// rows; compressed blocks are a sixth of that size, and what the page holds is the requests.)
const WASM_MB_PER_MILLION_REQUESTS: f64 = 250.0;
/// A million requests in at most 25 MB: a file a chat or an issue takes.
const BYTES_PER_REQUEST_TARGET: f64 = 25.0;
/// `show` and `export --json` of ten million requests in at most this much memory.
const READER_PEAK_TARGET_MB: f64 = 200.0;
/// Ten million requests: the whole run's overview within a second, in at most 2 GB.
const BIG_OVERVIEW_TARGET_MS: f64 = 1000.0;
const BIG_WASM_TARGET_MB: f64 = 2000.0;
/// The page stops reading a file at 48 million events (`MAX_FILE_EVENTS`), about three million
/// requests of this run: past it, the page is measured reading the file up to there, then from
/// its last request (`bench-viewer`'s `viewer_past_cap` line).
const PAGE_MAX_REQUESTS: u32 = 3_000_000;

/// `bench viewer FLAGS...`.
pub fn run(args: &[String]) -> Result<(), String> {
    options(args).and_then(|(count, seconds)| bench(count, seconds))
}

/// `bench viewer`'s flags: (requests recorded, seconds of zooming and panning).
fn options(args: &[String]) -> Result<(u32, u32), String> {
    let (mut requests, mut count, mut seconds) = (u32::MAX, u32::MAX, 5);
    cli::numbers(
        args,
        USAGE,
        &mut [("--requests", &mut requests), ("--count", &mut count), ("--seconds", &mut seconds)],
    )?;
    let requests = [requests, count].into_iter().find(|&n| n != u32::MAX).unwrap_or(1_000_000);
    if requests == 0 || seconds == 0 {
        return Err(format!("--requests and --seconds must be at least 1\n{USAGE}"));
    }
    Ok((requests, seconds))
}

fn bench(count: u32, seconds: u32) -> Result<(), String> {
    let mut steps = Steps::new(12);
    setup::ensure_build_tools(&mut steps)?;
    setup::ensure_browser(&mut steps)?;
    crate::build_web(&mut steps)?;
    crate::build_probe(&mut steps)?;
    steps
        .start("zstd, the peer the file's size is compared with, and time, which measures readers");
    setup::ensure_apt_packages(&mut steps, &["zstd", "time"])?;

    steps.start("the measuring program (tests/src/bin/bench_viewer.rs)");
    setup::cargo()
        .args(["build", "--quiet", "--package", "ackscope-tests", "--bin", "bench-viewer"])
        .run()?;
    steps.done("built");

    let target = setup::target_dir().join("bench-viewer");
    fs::create_dir_all(&target).map_err(|e| format!("creating {}: {e}", target.display()))?;
    let file = target.join(format!("rr-{count}.ackscope"));
    steps.start(&format!(
        "recording {count} requests with the release probe (NODELAY on both sides)"
    ));
    steps.note("about a minute for a million requests on 2 cores");
    let output = std::process::Command::new(setup::probe_binary())
        .args(["run", "rr", "--count", &count.to_string(), "--nodelay", "both", "--json", "-o"])
        .arg(&file)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start the probe: {e}"))?;
    let report = crate::json::summary(&output)?;
    let file_bytes = fs::metadata(&file).map_err(|e| e.to_string())?.len();
    let file_mb = file_bytes as f64 / 1e6;
    steps.done(&format!("{} ({file_mb:.0} MB)", file.display()));
    let recording = recording(&report, count, &file)?;

    steps.start("the same session as rows (`export --rows`, version 8), and zstd -3 of that");
    let sizes = file_sizes(&file, file_bytes, count)?;
    steps.done("measured");

    steps.start(&format!(
        "`show --request {}` against `show` of the whole file, and `export --json`",
        count - 1
    ));
    let readers = reader_costs(&file, count)?;
    steps.done("measured");
    let reader_peaks = [figure(&readers, "show_peak_mb"), figure(&readers, "export_json_peak_mb")];

    if count > PAGE_MAX_REQUESTS {
        steps.start("opening it in headless Chromium, then going to its last request");
        let line = page_figures(&file, count, 1)?;
        steps.done("measured");
        println!("\n{line}\n{recording}\n{sizes}\n{readers}");
        println!(
            "  show and export --json peak_mb <= {READER_PEAK_TARGET_MB}: {}",
            verdict(reader_peaks.iter().all(|p| p.is_some_and(|p| p <= READER_PEAK_TARGET_MB)))
        );
        let field = |name: &str| figure(&line, name);
        println!(
            "  overview_ms <= {BIG_OVERVIEW_TARGET_MS}: {}",
            verdict(field("overview_ms").is_some_and(|ms| ms <= BIG_OVERVIEW_TARGET_MS))
        );
        println!(
            "  the last request reachable (goto_last_ms printed): {}",
            verdict(field("goto_last_ms").is_some_and(f64::is_finite))
        );
        println!(
            "  every request ranked, next slowest across the run (next_slowest_ms printed): {}",
            verdict(field("next_slowest_ms").is_some_and(f64::is_finite))
        );
        println!(
            "  wasm_mb <= {BIG_WASM_TARGET_MB}: {}",
            verdict(field("wasm_mb").is_some_and(|mb| mb <= BIG_WASM_TARGET_MB))
        );
        println!(
            "  longest_task_ms <= {TASK_TARGET_MS}: {}",
            verdict(field("longest_task_ms").is_some_and(|ms| ms <= TASK_TARGET_MS))
        );
        println!(
            "  the page holds 48 million events of a file (about {PAGE_MAX_REQUESTS} requests of \
             this run) and reads any other part of it from the request asked for"
        );
        return Ok(());
    }

    steps.start(&format!(
        "opening it in headless Chromium, then {seconds} s of zooming and panning"
    ));
    let line = page_figures(&file, count, seconds)?;
    steps.done("measured");

    println!("\n{line}");
    println!("{recording}");
    println!("{sizes}");
    println!("{readers}");
    println!(
        "  show and export --json peak_mb <= {READER_PEAK_TARGET_MB}: {}",
        verdict(reader_peaks.iter().all(|p| p.is_some_and(|p| p <= READER_PEAK_TARGET_MB)))
    );
    let field = |name: &str| figure(&line, name);
    if let Some(full_load_ms) = field("full_load_ms") {
        println!(
            "  decode_mb_per_s={:.1} (the file's MB over full_load_ms)",
            file_mb / full_load_ms * 1e3
        );
    }
    let per_request = figure(&sizes, "file_bytes_per_request");
    println!(
        "  file_bytes_per_request <= {BYTES_PER_REQUEST_TARGET} (a million requests in 25 MB): {}",
        verdict(per_request.is_some_and(|b| b <= BYTES_PER_REQUEST_TARGET))
    );
    let (load, frame, wasm) = (field("load_ms"), field("frame_p95_ms"), field("wasm_mb"));
    println!(
        "  load_ms <= {LOAD_TARGET_MS}: {}",
        verdict(load.is_some_and(|l| l <= LOAD_TARGET_MS))
    );
    let full_load = field("full_load_ms");
    println!(
        "  full_load_ms <= {FULL_LOAD_TARGET_MS}: {}",
        verdict(full_load.is_some_and(|l| l <= FULL_LOAD_TARGET_MS))
    );
    let tasks = [field("longest_task_ms"), field("live_longest_task_ms")];
    println!(
        "  longest_task_ms and live_longest_task_ms <= {TASK_TARGET_MS}: {}",
        verdict(tasks.iter().all(|t| t.is_some_and(|t| t <= TASK_TARGET_MS)))
    );
    println!(
        "  live_vs_cli >= {LIVE_VS_CLI_TARGET}: {}",
        verdict(field("live_vs_cli").is_some_and(|r| r >= LIVE_VS_CLI_TARGET))
    );
    println!(
        "  frame_p95_ms <= {FRAME_TARGET_MS}: {}",
        verdict(frame.is_some_and(|f| f <= FRAME_TARGET_MS))
    );
    let wasm_target = WASM_MB_PER_MILLION_REQUESTS * f64::from(count) / 1e6;
    // The decoder's worker holds its memory while the file loads, beside the page's: both count.
    let memory = wasm.zip(field("worker_mb")).map(|(page, worker)| page + worker);
    println!(
        "  wasm_mb + worker_mb <= {wasm_target:.0} ({WASM_MB_PER_MILLION_REQUESTS} MB a million \
         requests): {}",
        verdict(memory.is_some_and(|w| w <= wasm_target))
    );
    println!(
        "  peer: Perfetto's trace_processor_shell cannot be installed here (no Debian, PyPI or npm \
         package ships the binary; the perfetto wheel downloads it from Google's storage, which \
         this machine cannot reach), so no time is printed for it"
    );
    Ok(())
}

/// The measuring program's line for `file` of `count` requests (`bench-viewer`, which opens it
/// in headless Chromium).
fn page_figures(file: &std::path::Path, count: u32, seconds: u32) -> Result<String, String> {
    let output = std::process::Command::new(target_binary("bench-viewer"))
        .arg(file)
        .arg(count.to_string())
        .arg(seconds.to_string())
        .env("ACKSCOPE_BIN", setup::probe_binary())
        .output()
        .map_err(|e| format!("could not start bench-viewer: {e}"))?;
    if !output.status.success() {
        return Err(format!("bench-viewer failed:\n{}", String::from_utf8_lossy(&output.stderr)));
    }
    Ok(String::from_utf8_lossy(&output.stdout).lines().last().unwrap_or("").to_string())
}

/// The recorded file against the same session as rows and against zstd -3 of the rows (the
/// like-for-like peers: the same events, the same machine, this run), a request's bytes each:
/// `sizes file_bytes_per_request=B rows_bytes_per_request=R rows_zstd3_bytes_per_request=Z
/// file_vs_rows=F file_vs_rows_zstd3=G`.
fn file_sizes(file: &std::path::Path, file_bytes: u64, count: u32) -> Result<String, String> {
    let rows = file.with_extension("rows.ackscope");
    std::process::Command::new(setup::probe_binary())
        .arg("export")
        .arg(file)
        .arg("--rows")
        .arg(&rows)
        .stdout(std::process::Stdio::null())
        .run()?;
    let rows_bytes = fs::metadata(&rows).map_err(|e| e.to_string())?.len();
    let zstd = std::process::Command::new("zstd")
        .args(["-3", "-c", "-T1"])
        .arg(&rows)
        .output()
        .map_err(|e| format!("could not run zstd: {e}"))?;
    let _ = fs::remove_file(&rows);
    if !zstd.status.success() {
        return Err(format!("zstd failed: {}", String::from_utf8_lossy(&zstd.stderr)));
    }
    let zstd_bytes = zstd.stdout.len() as u64;
    let per = |bytes: u64| bytes as f64 / f64::from(count);
    Ok(format!(
        "sizes file_bytes_per_request={:.1} rows_bytes_per_request={:.1} \
         rows_zstd3_bytes_per_request={:.1} file_vs_rows={:.3} file_vs_rows_zstd3={:.3}",
        per(file_bytes),
        per(rows_bytes),
        per(zstd_bytes),
        file_bytes as f64 / rows_bytes as f64,
        file_bytes as f64 / zstd_bytes as f64,
    ))
}

/// What the recording did and what its file holds: the run's own count of completed requests
/// and its rate (its `--json` report), and the requests the file's blocks hold (its block index,
/// read from its end), which must be the `count` asked for (the writer kept up, nothing was
/// lost): `recording requests=N rps=R file_requests=M`, and whether the file holds them all.
fn recording(
    report: &ackscope_shared::report::RunReport,
    count: u32,
    file: &std::path::Path,
) -> Result<String, String> {
    use std::os::unix::fs::FileExt;
    let figures = crate::json::rr(report)?;
    let opened = fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let size = opened.metadata().map_err(|e| e.to_string())?.len();
    let mut read_at = |at: u64, len: usize| {
        let mut bytes = vec![0; len];
        opened.read_exact_at(&mut bytes, at).map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(bytes)
    };
    let seeker = ackscope_shared::wire::seek::Seeker::open(size, &mut read_at)?
        .ok_or_else(|| format!("{} ends without a block index", file.display()))?;
    let file_requests: u64 = seeker.runs().map(|index| index.requests()).sum();
    let kept = file_requests == u64::from(count);
    Ok(format!(
        "recording requests={} rps={:.0} file_requests={file_requests}\n  the file holds every \
         request the run made: {}",
        figures.requests,
        figures.rps,
        verdict(kept)
    ))
}

/// Rounds of `show` and `show --request`: the least CPU of them is kept (other processes only
/// ever add to it), and the largest peak.
const SEEK_ROUNDS: usize = 3;

/// One request read through the file's block index against the whole file read by `show` (the
/// like-for-like peer: the same file, the same binary, this run), CPU and peak memory, and
/// `export --json`'s peak once: `readers show_request_cpu_ms=S show_cpu_ms=W seek_vs_show=R
/// show_request_peak_mb=P show_peak_mb=Q export_json_peak_mb=E`.
fn reader_costs(file: &std::path::Path, count: u32) -> Result<String, String> {
    let last = (count - 1).to_string();
    let mut seek = crate::bench::Cost { peak_rss_kb: 0.0, cpu_s: f64::MAX };
    let mut show = crate::bench::Cost { peak_rss_kb: 0.0, cpu_s: f64::MAX };
    for _ in 0..SEEK_ROUNDS {
        for (args, best) in [(&["show", "--request", &last][..], &mut seek), (&["show"], &mut show)]
        {
            let cost = crate::bench::cost_of(args, file)?;
            best.cpu_s = best.cpu_s.min(cost.cpu_s);
            best.peak_rss_kb = best.peak_rss_kb.max(cost.peak_rss_kb);
        }
    }
    let export = crate::bench::cost_of(&["export", "--json"], file)?;
    Ok(format!(
        "readers show_request_cpu_ms={:.1} show_cpu_ms={:.0} seek_vs_show={:.4} \
         show_request_peak_mb={:.1} show_peak_mb={:.1} export_json_peak_mb={:.1}",
        seek.cpu_s * 1e3,
        show.cpu_s * 1e3,
        seek.cpu_s / show.cpu_s,
        seek.peak_rss_kb / 1024.0,
        show.peak_rss_kb / 1024.0,
        export.peak_rss_kb / 1024.0,
    ))
}

/// `name=VALUE` from the program's line.
fn figure(line: &str, name: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

fn target_binary(name: &str) -> std::path::PathBuf {
    setup::target_dir().join("debug").join(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    #[test]
    fn viewer_flags() {
        assert_eq!(options(&[]), Ok((1_000_000, 5)));
        assert_eq!(options(&args("--count 1000 --seconds 2")), Ok((1000, 2)));
        assert_eq!(options(&args("--requests 10000000")), Ok((10_000_000, 5)));
        assert!(options(&args("--requests 0")).unwrap_err().contains("must be at least 1"));
        let error = options(&args("--seconds 1.5")).unwrap_err();
        assert_eq!(error, format!("--seconds needs a whole number, not `1.5`\n{USAGE}"));
        let error = options(&args("--rounds 2")).unwrap_err();
        assert_eq!(error, format!("unknown option `--rounds`\n{USAGE}"));
    }

    #[test]
    fn figures_are_read_by_their_whole_name() {
        let line = "viewer load_ms=9256 frame_p95_ms=16.7 wasm_mb=453 file_mb=334";
        assert_eq!(figure(line, "load_ms"), Some(9256.0));
        assert_eq!(figure(line, "frame_p95_ms"), Some(16.7));
        assert_eq!(figure(line, "ms"), None, "no field is found by a part of its name");
    }
}
