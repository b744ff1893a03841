//! `cargo xtask bench setup`: how long a fresh machine takes to the first served page.
//!
//! One file, though long: the fresh clone, its environment and each timed step are one
//! measurement read in order; split, the sequence would be scattered.
//!
//! It clones this repository's committed HEAD (what CI gets) into a fresh temporary directory
//! and runs there with an empty `CARGO_HOME`, an empty npm cache, no `.tools/`, and
//! `CARGO_TARGET_DIR` inside the clone. The rustup toolchain stays (`RUSTUP_HOME` is set to the
//! current one, and the toolchain's own `cargo` is on PATH), as do Debian's packages. Timed:
//!
//! - `first_run_s`: from starting `cargo xtask run -- --port 0` until a GET of the URL it prints
//!   answers 200 with the web app (then everything it started is stopped);
//! - `rebuild_after_touch_s`: `cargo xtask build` after touching a file in `probe/`, then after
//!   touching one in `web/`; the larger of the two;
//! - `first_test_s` (unless `--no-test`): `cargo xtask test` in a second fresh clone with its
//!   own empty `CARGO_HOME`, so that its installs are counted too.
//!
//! A measurement, not a test: a missed target is printed, and the exit code stays 0. Every
//! process a phase starts carries a marker in its environment, so that stopping a phase (the
//! server after the first run, any phase at its timeout) finds all of them, also those whose
//! parent has exited. What it measures and the figures of one machine: docs/BENCHMARKS.md.

use std::env;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::bench::met_or_missed;
use crate::cli::Flags;
use crate::setup::{self, WASM_TARGET};
use crate::steps::{RunExt, Steps};

pub(crate) const USAGE: &str =
    "usage: cargo xtask bench setup [--no-test | --with-test] [--keep] [--timeout-min N]";

/// Each phase (first run, each rebuild, the first test) is stopped after this long.
const DEFAULT_TIMEOUT_MIN: u32 = 40;
/// "The first run in under 10 minutes on a fresh machine."
const FIRST_RUN_TARGET_S: f64 = 600.0;
/// The files touched before the timed rebuilds: the roots of the probe's and the web app's
/// library crates, which every other module of them belongs to.
const PROBE_TOUCH: &str = "probe/src/lib.rs";
const WEB_TOUCH: &str = "web/src/lib.rs";
/// The environment variable that marks every process a phase starts.
const MARK: &str = "ACKSCOPE_BENCH_SETUP";
/// Output of the commands it runs is shown indented behind this.
const PREFIX: &str = "      | ";

/// `bench setup FLAGS...`.
pub fn run(args: &[String]) -> Result<(), String> {
    parse_options(args).and_then(|options| bench(&options))
}

#[derive(Debug, PartialEq)]
struct Options {
    /// Also time `cargo xtask test` in a second fresh clone (the default; `--no-test` skips it).
    test: bool,
    /// Keep the temporary directory (the clones, their CARGO_HOMEs) instead of removing it.
    keep: bool,
    timeout: Duration,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        test: true,
        keep: false,
        timeout: Duration::from_secs(u64::from(DEFAULT_TIMEOUT_MIN) * 60),
    };
    let mut flags = Flags::new(args, USAGE);
    while let Some(flag) = flags.next()? {
        match flag.as_str() {
            "--no-test" => options.test = false,
            "--with-test" => options.test = true,
            "--keep" => options.keep = true,
            "--timeout-min" => {
                let minutes: u32 = flags.number(&flag)?;
                if minutes == 0 {
                    return Err(flags.error(&format!(
                        "{flag} needs a whole number of minutes, at least 1, not `0`"
                    )));
                }
                options.timeout = Duration::from_secs(u64::from(minutes) * 60);
            }
            _ => return Err(flags.unknown(&flag)),
        }
    }
    Ok(options)
}

fn bench(options: &Options) -> Result<(), String> {
    let mut steps = Steps::new(if options.test { 10 } else { 7 });
    let load_before = load_average();

    steps
        .start("what this machine keeps: the rustup toolchain, git, Debian's packages (not timed)");
    let toolchain = Toolchain::find()?;
    steps.note(&format!("RUSTUP_HOME={}", toolchain.rustup_home.display()));
    steps.note(&format!(
        "cargo from {} (the toolchain, not a proxy)",
        toolchain.cargo_dir.display()
    ));
    for dropped in &toolchain.dropped {
        steps.note(&format!(
            "left out of PATH: {} (tools installed there would count as present)",
            dropped.display()
        ));
    }
    for found in &toolchain.preinstalled {
        steps.note(&format!(
            "note: {} is on PATH; setup uses it if its version is the wanted one",
            found.display()
        ));
    }
    let target = if toolchain.has_wasm_target {
        format!("the toolchain has {WASM_TARGET} already: adding it is not timed")
    } else {
        format!("the toolchain lacks {WASM_TARGET}: the first run adds it with rustup (timed)")
    };
    steps.note(&target);
    steps.note(&format!("{} CPUs, load average {}", cpus(), shown_load(load_before.as_deref())));
    steps.done("found");

    let temp = TempDir::create(options.keep)?;
    let commit = git_head()?;
    steps.start(&format!(
        "git clone --no-hardlinks of HEAD ({commit}) into {}",
        temp.path.join("run").display()
    ));
    if let Some(changes) = uncommitted_changes() {
        steps.note(&format!(
            "uncommitted changes in the working tree are not in the clone: {changes}"
        ));
    }
    let run = Sandbox::create(&temp.path, "run", &toolchain, &commit)?;
    steps.done("cloned (not timed: a clone from GitHub depends on the network)");

    steps.start(
        "first run: `cargo xtask run -- --port 0`, empty CARGO_HOME, until GET / answers 200",
    );
    for line in run.described() {
        steps.note(&line);
    }
    steps.note(
        "5 to 8 minutes on 2 cores: wasm-bindgen-cli 1.5, the web app 2.5 to 4, the probe 1.5 to 2",
    );
    let (first_run_s, mut server) = first_run(&run, &toolchain, options.timeout)?;
    steps.done(&format!("the web app answered 200 after {first_run_s:.1} s"));
    println!("\nsetup first_run_s={first_run_s:.1}\n");

    steps.start("stopping the server and everything `cargo xtask run` started");
    let stopped = server.stop()?;
    drop(server);
    steps.done(&stopped);

    let probe_s = touch_and_build(&mut steps, &run, &toolchain, PROBE_TOUCH, options.timeout)?;
    let web_s = touch_and_build(&mut steps, &run, &toolchain, WEB_TOUCH, options.timeout)?;
    let rebuild_s = probe_s.max(web_s);
    println!(
        "\nsetup rebuild_after_touch_s={rebuild_s:.1} probe_s={probe_s:.1} web_s={web_s:.1}  \
         (the larger of the two)\n"
    );

    let first_test_s = if options.test {
        steps.start(&format!(
            "a second fresh clone, with its own empty CARGO_HOME, into {}",
            temp.path.join("test").display()
        ));
        let test = Sandbox::create(&temp.path, "test", &toolchain, &commit)?;
        steps.done("cloned (not timed)");

        steps.start("first test: `cargo xtask test` in it (installs counted; see the note)");
        for line in test.described() {
            steps.note(&line);
        }
        steps.note(
            "apt packages already installed (chromium, chromedriver, ...) are not installed \
             again: their install time is not counted",
        );
        let first_test_s = timed(&test, &toolchain, &["test"], "test", options.timeout)?;
        steps.done(&format!("passed after {first_test_s:.1} s"));
        println!("\nsetup first_test_s={first_test_s:.1}\n");

        steps.start("removing the second clone (it is no longer needed)");
        let size = disk_usage(&test.root);
        let removed = temp.remove_part(&test.root)?;
        steps.done(&format!("{removed}{size}"));
        Some(first_test_s)
    } else {
        None
    };

    steps.start(if options.keep {
        "keeping the temporary directory (--keep)"
    } else {
        "removing the temporary directory"
    });
    let size = disk_usage(&temp.path);
    let kept = temp.finish()?;
    steps.done(&format!("{kept}{size}"));

    let load_after = load_average();
    println!(
        "\nload average (1, 5, 15 min) before {}, after {}, on {} CPUs",
        shown_load(load_before.as_deref()),
        shown_load(load_after.as_deref()),
        cpus()
    );
    let first_test = first_test_s.map_or("skipped".to_string(), |s| format!("{s:.1}"));
    println!(
        "setup first_run_s={first_run_s:.1} first_test_s={first_test} \
         rebuild_after_touch_s={rebuild_s:.1}"
    );
    println!(
        "  first run < {:.0} min:{}",
        FIRST_RUN_TARGET_S / 60.0,
        met_or_missed(first_run_s < FIRST_RUN_TARGET_S)
    );
    Ok(())
}

/// The rustup toolchain the clones build with, and the PATH they get.
struct Toolchain {
    rustup_home: PathBuf,
    /// The directory of the toolchain's own `cargo` (and rustc, rustfmt, cargo-clippy).
    cargo_dir: PathBuf,
    /// The rustup binary, linked into each sandbox's bin directory as `rustup`.
    rustup: PathBuf,
    /// This PATH without `dropped`.
    path: Vec<PathBuf>,
    /// PATH entries left out: cargo's bin directories of this machine, this checkout's folders.
    dropped: Vec<PathBuf>,
    /// Tools that setup installs but that the remaining PATH has already.
    preinstalled: Vec<PathBuf>,
    has_wasm_target: bool,
}

impl Toolchain {
    fn find() -> Result<Toolchain, String> {
        let fix = "bench setup needs rustup (https://rustup.rs): the clones use its toolchain";
        let rustup = find_on_path("rustup").ok_or_else(|| format!("no `rustup` on PATH; {fix}"))?;
        let rustup_home = match env::var_os("RUSTUP_HOME") {
            Some(home) => PathBuf::from(home),
            None => PathBuf::from(
                Command::new(&rustup)
                    .args(["show", "home"])
                    .output_text()
                    .ok_or_else(|| format!("`rustup show home` failed; {fix}"))?
                    .trim(),
            ),
        };
        let cargo = Command::new(&rustup)
            .args(["which", "cargo"])
            .output_text()
            .ok_or_else(|| format!("`rustup which cargo` failed; {fix}"))?;
        let cargo_dir = Path::new(cargo.trim())
            .parent()
            .ok_or_else(|| format!("`rustup which cargo` printed `{}`, not a path", cargo.trim()))?
            .to_path_buf();
        let home = env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        let mut cargo_bins = vec![home.join(".cargo/bin")];
        cargo_bins.extend(env::var_os("CARGO_HOME").map(|h| PathBuf::from(h).join("bin")));
        let entries: Vec<PathBuf> =
            env::split_paths(&env::var_os("PATH").unwrap_or_default()).collect();
        let (path, dropped) = fresh_path(&entries, &cargo_bins, &setup::root());
        let preinstalled = ["wasm-bindgen", "wasm-bindgen-test-runner", "wasm-opt"]
            .iter()
            .filter_map(|tool| path.iter().map(|dir| dir.join(tool)).find(|p| p.is_file()))
            .collect();
        let installed = Command::new(&rustup).args(["target", "list", "--installed"]).output_text();
        Ok(Toolchain {
            rustup_home,
            cargo_dir,
            rustup,
            path,
            dropped,
            preinstalled,
            has_wasm_target: installed.is_some_and(|l| l.lines().any(|t| t.trim() == WASM_TARGET)),
        })
    }
}

/// PATH without cargo's bin directories (`cargo_bins`, compared as canonical paths) and without
/// anything inside `checkout`, each entry once; and what was left out.
fn fresh_path(
    entries: &[PathBuf],
    cargo_bins: &[PathBuf],
    checkout: &Path,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let canonical = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let bins: Vec<PathBuf> = cargo_bins.iter().map(|b| canonical(b)).collect();
    let checkout = canonical(checkout);
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for entry in entries {
        let real = canonical(entry);
        let list = if bins.contains(&real) || real.starts_with(&checkout) {
            &mut dropped
        } else {
            &mut kept
        };
        if !list.contains(entry) {
            list.push(entry.clone());
        }
    }
    (kept, dropped)
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// One fresh clone and its own empty CARGO_HOME, npm cache and bin directory (with `rustup`).
struct Sandbox {
    /// Holds all of the below.
    root: PathBuf,
    clone: PathBuf,
    cargo_home: PathBuf,
    npm_cache: PathBuf,
    bin: PathBuf,
}

impl Sandbox {
    fn create(
        parent: &Path,
        name: &str,
        toolchain: &Toolchain,
        commit: &str,
    ) -> Result<Sandbox, String> {
        let root = parent.join(name);
        let sandbox = Sandbox {
            clone: root.join("ackscope"),
            cargo_home: root.join("cargo-home"),
            npm_cache: root.join("npm-cache"),
            bin: root.join("bin"),
            root,
        };
        for dir in [&sandbox.cargo_home, &sandbox.npm_cache, &sandbox.bin] {
            fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        std::os::unix::fs::symlink(&toolchain.rustup, sandbox.bin.join("rustup"))
            .map_err(|e| format!("linking rustup into {}: {e}", sandbox.bin.display()))?;
        Command::new("git")
            .args(["clone", "--quiet", "--no-hardlinks"])
            .arg(setup::root())
            .arg(&sandbox.clone)
            .run()
            .map_err(|e| format!("cloning the repository: {e}"))?;
        // The clone checks out the branch HEAD names; make sure it is the very commit.
        let head = Command::new("git")
            .arg("-C")
            .arg(&sandbox.clone)
            .args(["rev-parse", "--short", "HEAD"])
            .output_text();
        if head.as_deref().map(str::trim) != Some(commit) {
            Command::new("git")
                .arg("-C")
                .arg(&sandbox.clone)
                .args(["checkout", "--quiet", "--detach", commit])
                .run()
                .map_err(|e| format!("checking out {commit} in the clone: {e}"))?;
        }
        Ok(sandbox)
    }

    fn target_dir(&self) -> PathBuf {
        self.clone.join("target")
    }

    fn path(&self, toolchain: &Toolchain) -> OsString {
        let mut dirs =
            vec![self.cargo_home.join("bin"), self.bin.clone(), toolchain.cargo_dir.clone()];
        dirs.extend(toolchain.path.iter().cloned());
        env::join_paths(dirs).expect("PATH entries have no separators")
    }

    /// `cargo xtask ARGS` in the clone, with this sandbox's environment; `mark` marks it and
    /// every process it starts.
    fn xtask(&self, toolchain: &Toolchain, args: &[&str], mark: &str) -> Command {
        let mut command = Command::new(toolchain.cargo_dir.join("cargo"));
        command.arg("xtask").args(args).current_dir(&self.clone);
        // What this process got from cargo and rustup (CARGO_PKG_*, CARGO_MANIFEST_DIR,
        // CARGO_HOME, LD_LIBRARY_PATH into this checkout's target/, ...) is not a fresh shell's.
        for (key, _) in env::vars_os() {
            if inherited_from_cargo(&key) {
                command.env_remove(&key);
            }
        }
        command
            .env("CARGO_HOME", &self.cargo_home)
            .env("CARGO_TARGET_DIR", self.target_dir())
            .env("RUSTUP_HOME", &toolchain.rustup_home)
            .env("PATH", self.path(toolchain))
            .env("npm_config_cache", &self.npm_cache)
            .env(MARK, mark);
        command
    }

    /// The environment it runs with, one line each, for the notes.
    fn described(&self) -> Vec<String> {
        vec![
            format!("in {}", self.clone.display()),
            format!("CARGO_HOME={} (empty)", self.cargo_home.display()),
            format!("CARGO_TARGET_DIR={}", self.target_dir().display()),
            format!("npm_config_cache={} (empty)", self.npm_cache.display()),
        ]
    }

    /// How to run `cargo xtask ARGS` there by hand, for error messages.
    fn by_hand(&self, toolchain: &Toolchain, args: &[&str]) -> String {
        format!(
            "cd {} && CARGO_HOME={} CARGO_TARGET_DIR={} RUSTUP_HOME={} PATH={}:$PATH \
             cargo xtask {}",
            self.clone.display(),
            self.cargo_home.display(),
            self.target_dir().display(),
            toolchain.rustup_home.display(),
            toolchain.cargo_dir.display(),
            args.join(" ")
        )
    }
}

/// Variables cargo and rustup set for the programs they run, which a fresh shell has not.
fn inherited_from_cargo(key: &OsStr) -> bool {
    let key = key.to_string_lossy();
    key.starts_with("CARGO")
        || key.starts_with("RUSTC")
        || matches!(
            key.as_ref(),
            "RUSTDOC" | "RUST_RECURSION_COUNT" | "RUSTUP_TOOLCHAIN_SOURCE" | "LD_LIBRARY_PATH"
        )
}

/// The temporary directory that holds the sandboxes; removed when dropped unless kept.
struct TempDir {
    path: PathBuf,
    keep: bool,
    finished: bool,
}

impl TempDir {
    fn create(keep: bool) -> Result<TempDir, String> {
        let path = env::temp_dir().join(format!("ackscope-bench-setup-{}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path).map_err(|e| format!("removing {}: {e}", path.display()))?;
        }
        fs::create_dir_all(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        Ok(TempDir { path, keep, finished: false })
    }

    fn remove_part(&self, part: &Path) -> Result<String, String> {
        if self.keep {
            return Ok(format!("kept {} (--keep)", part.display()));
        }
        fs::remove_dir_all(part).map_err(|e| format!("removing {}: {e}", part.display()))?;
        Ok(format!("removed {}", part.display()))
    }

    fn finish(mut self) -> Result<String, String> {
        self.finished = true;
        if self.keep {
            return Ok(format!("kept {}", self.path.display()));
        }
        fs::remove_dir_all(&self.path)
            .map_err(|e| format!("removing {}: {e}", self.path.display()))?;
        Ok(format!("removed {}", self.path.display()))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if self.keep {
            eprintln!("\nxtask: kept {} (--keep)", self.path.display());
        } else if fs::remove_dir_all(&self.path).is_ok() {
            eprintln!(
                "\nxtask: removed {} (run with --keep to look at the clone after an error)",
                self.path.display()
            );
        }
    }
}

/// The first run: seconds from starting `cargo xtask run -- --port 0` until GET of the URL it
/// prints answers 200 with the web app, and the still-running server.
fn first_run(
    sandbox: &Sandbox,
    toolchain: &Toolchain,
    timeout: Duration,
) -> Result<(f64, Running), String> {
    let args = ["run", "--", "--port", "0"];
    let by_hand = sandbox.by_hand(toolchain, &args);
    let started = Instant::now();
    let deadline = started + timeout;
    let mut running = Running::spawn(sandbox.xtask(toolchain, &args, &mark("run")))?;
    let url = match running.wait(deadline, true)? {
        Waited::Url(url) => url,
        Waited::Exited(status) => {
            return Err(format!(
                "first run: `cargo xtask run -- --port 0` exited with {status} before it served \
                 anything; its output is above (the lines behind `|`). To repeat it by hand:\n  \
                 {by_hand}\n(--keep keeps the clone)"
            ))
        }
        Waited::TimedOut => return Err(timed_out("first run", &mut running, timeout)),
    };
    loop {
        let last = match http_get(&url) {
            Ok((200, body)) if body.contains("_bg.wasm") => break,
            Ok((200, _)) => {
                return Err(format!(
                    "first run: {url} answered 200 with a page that loads no web app (the probe \
                     was built without dist/); to repeat it by hand:\n  {by_hand}"
                ))
            }
            Ok((status, _)) => format!("HTTP status {status}"),
            Err(e) => e,
        };
        if let Some(status) = running.child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "first run: the server exited ({status}) before {url} answered 200 ({last}); \
                 its output is above. To repeat it by hand:\n  {by_hand}"
            ));
        }
        if Instant::now() > deadline {
            return Err(timed_out(&format!("first run ({url}: {last})"), &mut running, timeout));
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok((started.elapsed().as_secs_f64(), running))
}

/// Touches `file` in the clone, then times `cargo xtask build`.
fn touch_and_build(
    steps: &mut Steps,
    sandbox: &Sandbox,
    toolchain: &Toolchain,
    file: &str,
    timeout: Duration,
) -> Result<f64, String> {
    steps.start(&format!("rebuild: touch {file}, then `cargo xtask build`"));
    let path = sandbox.clone.join(file);
    fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(SystemTime::now()))
        .map_err(|e| {
            format!(
                "rebuild: touching {}: {e}; bench setup touches {file}: has it moved?",
                path.display()
            )
        })?;
    let seconds = timed(sandbox, toolchain, &["build"], "rebuild", timeout)?;
    steps.done(&format!("built after {seconds:.1} s"));
    Ok(seconds)
}

/// Seconds `cargo xtask ARGS` takes to succeed in the clone.
fn timed(
    sandbox: &Sandbox,
    toolchain: &Toolchain,
    args: &[&str],
    phase: &str,
    timeout: Duration,
) -> Result<f64, String> {
    let started = Instant::now();
    let mut running = Running::spawn(sandbox.xtask(toolchain, args, &mark(phase)))?;
    match running.wait(started + timeout, false)? {
        Waited::Exited(status) if status.success() => {
            let seconds = started.elapsed().as_secs_f64();
            running.stop()?;
            Ok(seconds)
        }
        Waited::Exited(status) => Err(format!(
            "{phase}: `cargo xtask {}` failed ({status}); its output is above (the lines behind \
             `|`). To repeat it by hand:\n  {}\n(--keep keeps the clone)",
            args.join(" "),
            sandbox.by_hand(toolchain, args)
        )),
        Waited::Url(_) => unreachable!("only the first run waits for a URL"),
        Waited::TimedOut => Err(timed_out(phase, &mut running, timeout)),
    }
}

fn timed_out(phase: &str, running: &mut Running, timeout: Duration) -> String {
    let stopped = running.stop().unwrap_or_else(|e| e);
    format!(
        "{phase}: not done after {} min, so it was stopped ({stopped}). On a slower or busier \
         machine, give it longer with --timeout-min N; its output so far is above",
        timeout.as_secs() / 60
    )
}

/// A value for `MARK` that no other process has.
fn mark(phase: &str) -> String {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!("{}-{phase}-{}", std::process::id(), nanos.as_nanos())
}

/// A phase's process, its output shown as it comes, and what it started (all carry its mark).
struct Running {
    child: Child,
    mark: String,
    /// stdout lines, for the URL; ends when both streams are closed.
    lines: Receiver<String>,
    stopped: bool,
}

enum Waited {
    Exited(ExitStatus),
    Url(String),
    TimedOut,
}

impl Running {
    fn spawn(mut command: Command) -> Result<Running, String> {
        let shown = crate::steps::shown(&command);
        let mark = command
            .get_envs()
            .find(|(key, _)| *key == MARK)
            .and_then(|(_, value)| value)
            .map(|value| value.to_string_lossy().into_owned())
            .expect("phase commands carry the mark");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start `{shown}`: {e}"))?;
        let (sender, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        forward(stdout, Some(sender));
        forward(stderr, None);
        Ok(Running { child, mark, lines, stopped: false })
    }

    /// Until the process exits, or (with `want_url`) prints the URL it serves, or `deadline`.
    fn wait(&mut self, deadline: Instant, want_url: bool) -> Result<Waited, String> {
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                // Let the rest of its output through before the next step's line: until the
                // streams close (a process it left running may hold them), a second of silence,
                // or 5 s.
                let until = Instant::now() + Duration::from_secs(5);
                while let Ok(line) = self.lines.recv_timeout(
                    until.saturating_duration_since(Instant::now()).min(Duration::from_secs(1)),
                ) {
                    if want_url {
                        if let Some(url) = serving_url(&line) {
                            return Ok(Waited::Url(url.to_string()));
                        }
                    }
                }
                return Ok(Waited::Exited(status));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Waited::TimedOut);
            }
            match self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Some(url) = serving_url(&line).filter(|_| want_url) {
                        return Ok(Waited::Url(url.to_string()));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Stops every process that carries the mark: SIGTERM, then SIGKILL after 10 s. Says what
    /// it stopped, or fails naming what is still running.
    fn stop(&mut self) -> Result<String, String> {
        self.stopped = true;
        let first = marked_processes(&self.mark);
        if first.is_empty() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return Ok("nothing was left running".into());
        }
        let names: Vec<String> = first.iter().map(|(pid, name)| format!("{name} {pid}")).collect();
        for (signal, grace) in [("-TERM", 10), ("-KILL", 5)] {
            let pids: Vec<String> =
                marked_processes(&self.mark).iter().map(|(pid, _)| pid.to_string()).collect();
            if pids.is_empty() {
                break;
            }
            let _ = Command::new("kill").arg(signal).args(&pids).stderr(Stdio::null()).status();
            if signal == "-KILL" {
                let _ = self.child.kill();
            }
            let until = Instant::now() + Duration::from_secs(grace);
            while Instant::now() < until {
                let _ = self.child.try_wait();
                if marked_processes(&self.mark).is_empty() {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
        let left = marked_processes(&self.mark);
        if !left.is_empty() {
            let pids: Vec<String> =
                left.iter().map(|(pid, name)| format!("{name} {pid}")).collect();
            return Err(format!(
                "still running after SIGKILL: {}; stop them with `kill -9 PID`",
                pids.join(", ")
            ));
        }
        let _ = self.child.wait();
        Ok(format!("stopped {} processes: {}", names.len(), names.join(", ")))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.stopped {
            if let Err(e) = self.stop() {
                eprintln!("xtask: {e}");
            }
        }
    }
}

/// Shows a stream's lines behind `PREFIX` as they come; sends them on when given a sender.
fn forward(stream: impl Read + Send + 'static, lines: Option<Sender<String>>) {
    thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut buffer = Vec::new();
        while reader.read_until(b'\n', &mut buffer).is_ok_and(|n| n > 0) {
            let line = String::from_utf8_lossy(&buffer).trim_end().to_string();
            println!("{PREFIX}{line}");
            if let Some(lines) = &lines {
                let _ = lines.send(line);
            }
            buffer.clear();
        }
    });
}

/// The live processes (pid, name) whose environment has `MARK=mark`; zombies are not running.
fn marked_processes(mark: &str) -> Vec<(u32, String)> {
    let entry = format!("{MARK}={mark}");
    let Ok(proc) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own = std::process::id();
    let mut found = Vec::new();
    for dir in proc.flatten() {
        let Some(pid) = dir.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == own {
            continue;
        }
        let path = dir.path();
        let alive = fs::read_to_string(path.join("stat"))
            .ok()
            .and_then(|stat| stat_state(&stat))
            .is_some_and(|state| !matches!(state, 'Z' | 'X' | 'x'));
        if alive && fs::read(path.join("environ")).is_ok_and(|env| environ_has(&env, &entry)) {
            let name = fs::read_to_string(path.join("comm")).unwrap_or_default();
            found.push((pid, name.trim().to_string()));
        }
    }
    found
}

/// The state letter of a /proc/PID/stat line: "1234 (cargo) S 1 ...", the name may hold spaces
/// and parentheses.
fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.split_whitespace().next()?.chars().next()
}

/// Whether /proc/PID/environ (NUL-separated `KEY=value` entries) has exactly `entry`.
fn environ_has(environ: &[u8], entry: &str) -> bool {
    environ.split(|b| *b == 0).any(|e| e == entry.as_bytes())
}

/// The URL of ackscope's "ackscope is serving http://127.0.0.1:PORT/ (Ctrl-C to stop)".
fn serving_url(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("ackscope is serving ")?;
    let url = rest.split_whitespace().next()?;
    url.starts_with("http://").then_some(url)
}

/// `http://HOST:PORT/PATH` as ("HOST:PORT", "/PATH").
fn split_http_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    (!authority.is_empty() && authority.contains(':')).then_some((authority, path))
}

/// The status code of an HTTP response: "HTTP/1.1 200 OK\r\n..." is 200.
fn status_code(response: &str) -> Option<u16> {
    let mut words = response.lines().next()?.split_whitespace();
    words.next().filter(|version| version.starts_with("HTTP/"))?;
    words.next()?.parse().ok()
}

/// GET `url` with HTTP/1.0 (the server closes the connection after the answer): its status
/// and body.
fn http_get(url: &str) -> Result<(u16, String), String> {
    let (authority, path) =
        split_http_url(url).ok_or_else(|| format!("`{url}` is not an http://HOST:PORT/ URL"))?;
    let addr = authority
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("cannot resolve {authority}"))?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n")
        .map_err(|e| format!("sending GET to {addr}: {e}"))?;
    let mut response = Vec::new();
    stream
        .take(16 << 20)
        .read_to_end(&mut response)
        .map_err(|e| format!("reading the answer of {addr}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let status =
        status_code(&response).ok_or_else(|| format!("{addr} answered no HTTP status line"))?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_string()))
}

/// `git rev-parse --short HEAD` of this checkout.
fn git_head() -> Result<String, String> {
    Command::new("git")
        .arg("-C")
        .arg(setup::root())
        .args(["rev-parse", "--short", "HEAD"])
        .output_text()
        .map(|s| s.trim().to_string())
        .ok_or_else(|| {
            "`git rev-parse HEAD` failed: bench setup clones this git checkout's HEAD; run it \
             in a checkout with at least one commit"
                .to_string()
        })
}

/// "3 files" when the working tree differs from HEAD (without touching the index's stat cache).
fn uncommitted_changes() -> Option<String> {
    let status = Command::new("git")
        .arg("-C")
        .arg(setup::root())
        .args(["--no-optional-locks", "status", "--porcelain"])
        .output_text()?;
    let count = status.lines().filter(|l| !l.trim().is_empty()).count();
    (count > 0).then(|| format!("{count} files"))
}

/// ", 12.3 GB" from `du -sk`, or nothing when du fails.
fn disk_usage(path: &Path) -> String {
    Command::new("du")
        .arg("-sk")
        .arg(path)
        .output_text()
        .and_then(|out| out.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(String::new(), |kb| format!(" ({:.1} GB)", kb / 1024.0 / 1024.0))
}

/// The three load averages of /proc/loadavg ("0.41 0.89 0.98 1/234 5678").
fn load_average() -> Option<String> {
    parse_load(&fs::read_to_string("/proc/loadavg").ok()?)
}

fn parse_load(text: &str) -> Option<String> {
    let three: Vec<&str> = text.split_whitespace().take(3).collect();
    (three.len() == 3 && three.iter().all(|v| v.parse::<f64>().is_ok())).then(|| three.join(" "))
}

fn shown_load(load: Option<&str>) -> &str {
    load.unwrap_or("unknown")
}

fn cpus() -> usize {
    thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args;

    #[test]
    fn options_default_to_testing_and_cleaning_up() {
        let options = parse_options(&[]).unwrap();
        assert_eq!(
            options,
            Options { test: true, keep: false, timeout: Duration::from_secs(40 * 60) }
        );
        let options = parse_options(&args("--no-test --keep --timeout-min 5")).unwrap();
        assert_eq!(options, Options { test: false, keep: true, timeout: Duration::from_secs(300) });
        assert!(parse_options(&args("--no-test --with-test")).unwrap().test);
        assert!(parse_options(&args("--timeout-min 0")).unwrap_err().contains("at least 1"));
        assert!(parse_options(&args("--timeout-min")).unwrap_err().contains("needs a number"));
        assert!(parse_options(&args("--rounds 3"))
            .unwrap_err()
            .contains("unknown option `--rounds`"));
        let error = parse_options(&args("--timeout-min soon")).unwrap_err();
        assert_eq!(error, format!("--timeout-min needs a whole number, not `soon`\n{USAGE}"));
        let error = parse_options(&args("--keep=yes")).unwrap_err();
        assert_eq!(error, format!("--keep takes no value, not `yes`\n{USAGE}"));
    }

    #[test]
    fn the_url_comes_from_ackscopes_serving_line() {
        let line = "ackscope is serving http://127.0.0.1:41234/ (Ctrl-C to stop)";
        assert_eq!(serving_url(line), Some("http://127.0.0.1:41234/"));
        assert_eq!(serving_url("[5/5] probe (release, with the web app embedded)"), None);
        assert_eq!(serving_url("ackscope is serving nothing"), None);
        assert_eq!(split_http_url("http://127.0.0.1:41234/"), Some(("127.0.0.1:41234", "/")));
        assert_eq!(split_http_url("http://[::1]:80/a/b"), Some(("[::1]:80", "/a/b")));
        assert_eq!(split_http_url("http://127.0.0.1:8080"), Some(("127.0.0.1:8080", "/")));
        assert_eq!(split_http_url("https://127.0.0.1:1/"), None);
    }

    #[test]
    fn reads_the_status_line() {
        assert_eq!(
            status_code("HTTP/1.0 200 OK\r\ncontent-type: text/html\r\n\r\n<html>"),
            Some(200)
        );
        assert_eq!(status_code("HTTP/1.1 404 Not Found\r\n\r\n"), Some(404));
        assert_eq!(status_code("SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_code(""), None);
    }

    #[test]
    fn finds_marked_processes_by_their_environment() {
        let environ = b"HOME=/root\0ACKSCOPE_BENCH_SETUP=12-run-99\0PATH=/bin\0";
        assert!(environ_has(environ, "ACKSCOPE_BENCH_SETUP=12-run-99"));
        assert!(!environ_has(environ, "ACKSCOPE_BENCH_SETUP=12-run-9"));
        assert!(!environ_has(b"", "ACKSCOPE_BENCH_SETUP=12-run-99"));
        assert_eq!(stat_state("4242 (cargo) S 1 4242 4242 0 -1"), Some('S'));
        assert_eq!(stat_state("77 (a (b) c) Z 1 77"), Some('Z'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn marked_processes_are_found_and_stopped() {
        let value = mark("unit-test");
        let mut command = Command::new("sh");
        // sh exits at once, leaving its sleep to init: found by its mark all the same.
        command.args(["-c", "sleep 60 & echo started"]).env(MARK, &value);
        let mut running = Running::spawn(command).expect("sh runs");
        let waited = running.wait(Instant::now() + Duration::from_secs(5), false).expect("waits");
        assert!(matches!(waited, Waited::Exited(status) if status.success()));
        let left = marked_processes(&value);
        assert_eq!(left.len(), 1, "the orphaned sleep: {left:?}");
        let stopped = running.stop().expect("stopped");
        assert_eq!(stopped, format!("stopped 1 processes: sleep {}", left[0].0));
        assert!(marked_processes(&value).is_empty());
    }

    #[test]
    fn path_leaves_out_cargo_bins_and_the_checkout() {
        let checkout = Path::new("/nonexistent/ackscope");
        let entries: Vec<PathBuf> = [
            "/root/.cargo/bin",
            "/usr/bin",
            "/nonexistent/ackscope/.tools/binaryen/node_modules/.bin",
            "/usr/bin",
            "/root/.cargo/bin",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let (kept, dropped) = fresh_path(&entries, &[PathBuf::from("/root/.cargo/bin")], checkout);
        assert_eq!(kept, vec![PathBuf::from("/usr/bin")]);
        assert_eq!(
            dropped,
            vec![
                PathBuf::from("/root/.cargo/bin"),
                PathBuf::from("/nonexistent/ackscope/.tools/binaryen/node_modules/.bin")
            ]
        );
    }

    #[test]
    fn cargos_own_variables_are_not_passed_on() {
        for key in ["CARGO", "CARGO_HOME", "CARGO_PKG_NAME", "RUSTC_WRAPPER", "LD_LIBRARY_PATH"] {
            assert!(inherited_from_cargo(OsStr::new(key)), "{key}");
        }
        for key in ["RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "RUSTFLAGS", "PATH", "HOME"] {
            assert!(!inherited_from_cargo(OsStr::new(key)), "{key}");
        }
    }

    #[test]
    fn load_average_is_the_first_three_fields() {
        assert_eq!(parse_load("0.41 0.89 0.98 1/234 5678\n").as_deref(), Some("0.41 0.89 0.98"));
        assert_eq!(parse_load("nonsense"), None);
    }
}
