//! Installing what the build needs, each piece only when the installed version differs.
//!
//! Pinned here and nowhere else: binaryen's wasm-opt (Debian's 108 silently breaks the app; 132
//! from npm works). wasm-bindgen-cli must equal the `wasm-bindgen` in Cargo.lock, so its version
//! is read from there. Both go into `.tools/` in the checkout, not into cargo's bin directory: the
//! project's build tools do not replace the user's own. Trunk is not needed to build (see
//! `web_build.rs`); only `trunk serve`, for live reload while working on the web app, uses it
//! (web/README.md says how to install it).

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::steps::{RunExt, Steps};

const BINARYEN_VERSION: &str = "132.0.0";
pub const WASM_TARGET: &str = "wasm32-unknown-unknown";

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask/ is inside the workspace").into()
}

/// Cargo's target directory (CARGO_TARGET_DIR is honoured).
pub fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The release binary, in cargo's target directory.
pub fn probe_binary() -> PathBuf {
    target_dir().join("release/ackscope")
}

fn cargo_bin_dir() -> PathBuf {
    match env::var_os("CARGO_HOME") {
        Some(home) => PathBuf::from(home).join("bin"),
        None => PathBuf::from(env::var_os("HOME").unwrap_or_default()).join(".cargo/bin"),
    }
}

fn binaryen_dir() -> PathBuf {
    root().join(".tools/binaryen")
}

/// `cargo install --root` of wasm-bindgen-cli: its programs are in `bin/` below.
fn wasm_bindgen_dir() -> PathBuf {
    root().join(".tools/wasm-bindgen")
}

/// PATH with the tools this task installs in front: binaryen's bin dir first (a `wasm-opt` in
/// cargo's bin dir or anywhere else on PATH, Debian's 108 among them, must not shadow the 132
/// this task installs and checks), then the wasm-bindgen it installs, then cargo's bin dir.
fn tool_path() -> OsString {
    let mut dirs = vec![
        binaryen_dir().join("node_modules/.bin"),
        wasm_bindgen_dir().join("bin"),
        cargo_bin_dir(),
    ];
    dirs.extend(env::split_paths(&env::var_os("PATH").unwrap_or_default()));
    env::join_paths(dirs).expect("PATH entries have no separators")
}

/// A command that finds the installed tools, run from the workspace root.
pub fn tool_command(program: &str) -> Command {
    let mut command = Command::new(program);
    command.env("PATH", tool_path()).current_dir(root());
    command
}

pub fn cargo() -> Command {
    tool_command("cargo")
}

/// The first line a tool prints for `--version`, or `None` if it is not installed.
fn version_of(program: &str, args: &[&str]) -> Option<String> {
    let text = tool_command(program).args(args).output_text()?;
    Some(text.lines().next().unwrap_or("").trim().to_string())
}

pub fn ensure_build_tools(steps: &mut Steps) -> Result<(), String> {
    steps.start(&format!("Rust target {WASM_TARGET}"));
    let installed = tool_command("rustup").args(["target", "list", "--installed"]).output_text();
    if installed.is_some_and(|list| list.lines().any(|l| l.trim() == WASM_TARGET)) {
        steps.done("installed");
    } else {
        tool_command("rustup").args(["target", "add", WASM_TARGET]).run()?;
        steps.done("added");
    }

    let wanted = lock_version("wasm-bindgen")?;
    steps.start(&format!("wasm-bindgen-cli {wanted} (the version in Cargo.lock)"));
    let found = version_of("wasm-bindgen", &["--version"]);
    if found.as_deref() == Some(&format!("wasm-bindgen {wanted}")) {
        steps.done("installed");
    } else {
        steps.note(&format!("found {}; installing", found.as_deref().unwrap_or("none")));
        steps.note("this compiles wasm-bindgen-cli from source into .tools/: about 1.5 minutes");
        // Compiled without optimization: 73 s instead of 197 s on 2 cores. It then takes 1.9 s
        // instead of 0.3 s for the release app, and 12 s instead of 1.8 s for the web tests'
        // wasm (built without debuginfo for that reason: the `wasm-test` profile), so every
        // first build and first test is two minutes sooner (docs/BENCHMARKS-LOG.md, "bench setup").
        // Only the two programs the build and the web tests run.
        // Not --locked: its lockfile pins a webpki-roots version the registry no longer has.
        cargo()
            .args(["install", "--force", "wasm-bindgen-cli", "--version", &wanted])
            .args(["--bin", "wasm-bindgen", "--bin", "wasm-bindgen-test-runner", "--root"])
            .arg(wasm_bindgen_dir())
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .run()?;
        steps.done("installed");
    }

    steps.start(&format!("wasm-opt from binaryen {BINARYEN_VERSION} (npm)"));
    let found = version_of("wasm-opt", &["--version"]);
    let major = BINARYEN_VERSION.split('.').next().unwrap_or_default();
    if found.as_deref().is_some_and(|v| v.contains(&format!("version {major}"))) {
        steps.done("installed");
    } else {
        steps.note(&format!(
            "found {}; installing into .tools/binaryen",
            found.as_deref().unwrap_or("none")
        ));
        tool_command("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(binaryen_dir())
            .arg(format!("binaryen@{BINARYEN_VERSION}"))
            .run()
            .map_err(|e| format!("{e}\nwasm-opt comes from npm: install Node.js and npm first"))?;
        steps.done("installed");
    }
    Ok(())
}

/// Debian's packages the tests need: Chromium and ChromeDriver (browser tests), the OpenSSL
/// headers (the WebDriver client links the system OpenSSL), tcpdump and tshark (the capture
/// import/export tests make and read real captures), python3 (the server-view test's client is
/// not ackscope's own), and Prometheus's Python client (the `watch --metrics` tests read
/// `/metrics` with its parser).
const TEST_PACKAGES: [&str; 8] = [
    "chromium",
    "chromium-driver",
    "libssl-dev",
    "pkg-config",
    "tcpdump",
    "tshark",
    "python3",
    "python3-prometheus-client",
];

const TEST_PACKAGES_STEP: &str = "chromium, chromedriver, OpenSSL headers (browser tests), \
     tcpdump, tshark (capture tests), python3 (an outside client), Prometheus's Python parser \
     (metrics tests)";

/// Those of [`TEST_PACKAGES`] to install: none when every program is there (however it was
/// installed), else those dpkg does not list.
fn missing_test_packages() -> Vec<&'static str> {
    let have = |p: &str| version_of(p, &["--version"]).is_some();
    let openssl = tool_command("pkg-config").args(["--exists", "openssl"]).run_quietly();
    let programs = ["chromium", "chromedriver", "tcpdump", "tshark", "python3"];
    // Debian's python3, whose packages the tests import (a python3 earlier on the PATH may
    // have its own).
    let parser =
        tool_command("/usr/bin/python3").args(["-c", "import prometheus_client"]).run_quietly();
    if openssl && parser && programs.iter().all(|p| have(p)) {
        return Vec::new();
    }
    TEST_PACKAGES.iter().copied().filter(|package| !dpkg_has(package)).collect()
}

/// Chromium and ChromeDriver for the browser tests, and the other [`TEST_PACKAGES`], from
/// Debian's packages when missing.
pub fn ensure_browser(steps: &mut Steps) -> Result<(), String> {
    steps.start(TEST_PACKAGES_STEP);
    ensure_apt_packages(steps, &missing_test_packages())
}

/// The test packages installed while something else runs: `apt-get` downloads and unpacks for
/// about 40 s, mostly waiting on the network and the disk, which the compile of
/// wasm-bindgen-cli beside it does not. Only as root: `sudo` may ask for a password, which needs
/// the terminal to itself. Its output goes to `log`; [`BackgroundInstall::finish`] ends the step.
pub struct BackgroundInstall {
    missing: Vec<&'static str>,
    log: PathBuf,
    install: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl BackgroundInstall {
    pub fn start() -> BackgroundInstall {
        let missing = missing_test_packages();
        let log = target_dir().join("apt-get.log");
        let install = (!missing.is_empty() && is_root()).then(|| {
            let (packages, log) = (missing.clone(), log.clone());
            std::thread::spawn(move || apt_install(&packages, Some(&log)))
        });
        BackgroundInstall { missing, log, install }
    }

    pub fn finish(self, steps: &mut Steps) -> Result<(), String> {
        steps.start(TEST_PACKAGES_STEP);
        match self.install {
            None => ensure_apt_packages(steps, &self.missing),
            Some(install) => {
                steps.note(&format!(
                    "installed {} with apt-get beside the step before (its output: {})",
                    self.missing.join(", "),
                    self.log.display()
                ));
                install.join().map_err(|_| "the apt-get thread panicked".to_string())??;
                steps.done("installed");
                Ok(())
            }
        }
    }
}

pub fn is_root() -> bool {
    tool_command("id").arg("-u").output_text().is_some_and(|id| id.trim() == "0")
}

/// Installs those of Debian's `packages` that dpkg does not list as installed, with apt-get
/// (through sudo unless root), and ends the step the caller started.
pub fn ensure_apt_packages(steps: &mut Steps, packages: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> =
        packages.iter().copied().filter(|package| !dpkg_has(package)).collect();
    if missing.is_empty() {
        steps.done("installed");
        return Ok(());
    }
    steps
        .note(&format!("installing Debian's {} with apt-get (about a minute)", missing.join(", ")));
    apt_install(&missing, None)?;
    steps.done("installed");
    Ok(())
}

/// `apt-get update` then `apt-get install -y` of `packages` (through sudo unless root), its
/// output into the file `log` if given, else to the terminal.
fn apt_install(packages: &[&str], log: Option<&Path>) -> Result<(), String> {
    let mut fix = format!("install them with: sudo apt-get install -y {}", packages.join(" "));
    let log = match log {
        None => None,
        Some(path) => {
            fix = format!("its output is in {}\n{fix}", path.display());
            let _ = fs::create_dir_all(path.parent().unwrap_or(Path::new(".")));
            Some(fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?)
        }
    };
    let as_root = is_root();
    let apt_get = |args: &[&str]| {
        let mut command = tool_command(if as_root { "apt-get" } else { "sudo" });
        if !as_root {
            command.arg("apt-get");
        }
        if let Some(log) = &log {
            let (out, err) = (log.try_clone(), log.try_clone());
            command.stdout(out.map_err(|e| e.to_string())?);
            command.stderr(err.map_err(|e| e.to_string())?);
        }
        command.env("DEBIAN_FRONTEND", "noninteractive").args(args).run()
    };
    let failed = |e: String| format!("{e}\n{fix}");
    apt_get(&["update"]).map_err(failed)?;
    apt_get(&[&["install", "-y"][..], packages].concat()).map_err(failed)?;
    Ok(())
}

fn dpkg_has(package: &str) -> bool {
    tool_command("dpkg-query")
        .args(["--show", "--showformat=${Status}", package])
        .output_text()
        .is_some_and(|status| status.trim() == "install ok installed")
}

/// The version of `package` that Cargo.lock resolved.
fn lock_version(package: &str) -> Result<String, String> {
    let path = root().join("Cargo.lock");
    let lock = fs::read_to_string(&path)
        .map_err(|e| format!("reading {}: {e}; run `cargo generate-lockfile`", path.display()))?;
    let name_line = format!("name = \"{package}\"");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == name_line {
            if let Some(version) = lines.next().and_then(|l| l.trim().strip_prefix("version = ")) {
                return Ok(version.trim_matches('"').to_string());
            }
        }
    }
    Err(format!("Cargo.lock has no {package}; run `cargo update -p {package}`"))
}

/// Written at the end of every web build: its mtime is when dist/ was last built (the app's own
/// files keep theirs when their bytes did not change). A dot-file, so it is not embedded.
pub const DIST_STAMP: &str = "dist/.built";

/// True when dist/ was built after every input of the web build changed.
pub fn dist_is_fresh() -> bool {
    let root = root();
    // The single-file offline page is built with dist/: both must be there.
    if !root.join("dist/index.html").is_file() || !root.join("offline/ackscope.html").is_file() {
        return false;
    }
    let Some(built) = modified(&root.join(DIST_STAMP)) else {
        return false;
    };
    let inputs = [
        "web",
        "shared",
        "lessons",
        "xtask/src/web_build.rs",
        "Trunk.toml",
        "Cargo.lock",
        "Cargo.toml",
    ];
    inputs.iter().all(|input| newest(&root.join(input)).is_none_or(|newest| newest <= built))
}

fn modified(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn newest(path: &Path) -> Option<SystemTime> {
    let own = modified(path);
    if !path.is_dir() {
        return own;
    }
    let entries = fs::read_dir(path).ok()?;
    entries.flatten().filter_map(|e| newest(&e.path())).chain(own).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installed_tools_come_before_any_others_on_path() {
        let first: Vec<PathBuf> = env::split_paths(&tool_path()).take(2).collect();
        assert_eq!(
            first,
            [binaryen_dir().join("node_modules/.bin"), wasm_bindgen_dir().join("bin")]
        );
    }

    /// `trunk serve` (live reload while working on the web app) takes its tool versions from
    /// Trunk.toml, the build from Cargo.lock and this file: they must not drift apart.
    #[test]
    fn trunk_uses_the_tools_the_build_pins() {
        let trunk = fs::read_to_string(root().join("Trunk.toml")).expect("Trunk.toml");
        let pinned = |key: &str| {
            let line = trunk.lines().find(|line| line.trim_start().starts_with(key))?;
            Some(line.split_once('=')?.1.trim().trim_matches('"').to_string())
        };
        let bindgen = lock_version("wasm-bindgen").expect("Cargo.lock names wasm-bindgen");
        assert_eq!(pinned("wasm_bindgen ").as_deref(), Some(bindgen.as_str()), "Trunk.toml");
        let major = BINARYEN_VERSION.split('.').next().expect("a version");
        assert_eq!(pinned("wasm_opt ").as_deref(), Some(format!("version_{major}").as_str()));
    }
}
