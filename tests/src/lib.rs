//! The browser harness shared by the end-to-end tests and the viewer benchmark: the real
//! `ackscope` binary, a real headless Chromium over WebDriver, and cleanup however they end.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fantoccini::{Client, ClientBuilder, Locator};
use tempfile::TempDir;

/// A child process killed when the test ends, however it ends.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn ackscope_bin() -> Result<PathBuf> {
    let bin = std::env::var_os("ACKSCOPE_BIN").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/ackscope")
    });
    if !bin.is_file() {
        bail!("{} is missing: run `cargo xtask test`, which builds it first", bin.display());
    }
    Ok(bin)
}

/// Starts `ackscope --port 0` and returns it with the URL it printed.
pub fn start_probe() -> Result<(Reaped, String)> {
    let mut child = Command::new(ackscope_bin()?)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting ackscope")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let url = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .with_context(|| format!("no URL in ackscope's first line: {line:?}"))?
        .to_string();
    Ok((Reaped(child), url))
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

pub async fn start_browser() -> Result<(Reaped, Client, TempDir)> {
    let port = free_port()?;
    let driver = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .spawn()
        .context("starting chromedriver (cargo xtask test installs it)")?;
    let driver = Reaped(driver);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        if Instant::now() > deadline {
            bail!("chromedriver did not listen on port {port} within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let profile = scratch_dir()?;
    let args = [
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--window-size=1280,1000".into(),
        format!("--user-data-dir={}", profile.path().display()),
    ];
    // What the page saves (a view as PNG, a session) lands in the profile's own folder.
    let prefs = serde_json::json!({
        "download.default_directory": downloads(&profile),
        "download.prompt_for_download": false,
    });
    let capabilities = serde_json::json!({
        "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args, "prefs": prefs }
    });
    let serde_json::Value::Object(capabilities) = capabilities else { unreachable!() };
    let client = ClientBuilder::native()
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .context("opening a WebDriver session in Chromium")?;
    Ok((driver, client, profile))
}

/// Where the browser of [`start_browser`] saves what a page downloads.
pub fn downloads(profile: &TempDir) -> PathBuf {
    profile.path().join("downloads")
}

/// A static file server over `dir`, as any static host (GitHub Pages and the like) would
/// serve the app: GET only, no WebSocket, nothing generated. Returns its URL; it stops when the
/// test process ends (its thread only serves files).
pub fn serve_static(dir: PathBuf) -> Result<String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let url = format!("http://{}/", listener.local_addr()?);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let _ = serve_one(&dir, stream);
            });
        }
    });
    Ok(url)
}

fn serve_one(dir: &std::path::Path, mut stream: TcpStream) -> std::io::Result<()> {
    use std::io::Write;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = String::new();
    BufReader::new(&stream).read_line(&mut request)?;
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let path = path.split(['?', '#']).next().unwrap_or("/").trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    let file = dir.join(path);
    let inside = !path.split('/').any(|part| part == "..");
    let (status, body) = match std::fs::read(&file) {
        Ok(body) if inside => ("200 OK", body),
        _ => ("404 Not Found", b"not found".to_vec()),
    };
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css",
        _ => "application/octet-stream",
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&body)
}

/// Saves what the page shows as `name` in ACKSCOPE_SCREENSHOT_DIR (`cargo xtask test` sets it to
/// target/screenshots; copy one into docs/ on purpose), if set.
pub async fn screenshot(client: &Client, name: &str) -> Result<()> {
    if let Some(dir) = std::env::var_os("ACKSCOPE_SCREENSHOT_DIR") {
        let path = PathBuf::from(dir).join(name);
        std::fs::write(&path, client.screenshot().await?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Whether this process runs as root (its effective uid, from `/proc/self/status`).
pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uids = status.lines().find_map(|line| line.strip_prefix("Uid:"));
    uids.and_then(|uids| uids.split_whitespace().nth(1)) == Some("0")
}

/// The first line of a root-only test. Such a test is marked
/// `#[ignore = "needs root (...): cargo xtask test runs it as root"]`, so that `cargo test`
/// lists it as ignored, by name; `cargo xtask test` runs the ignored tests as root (as in CI).
/// Run by hand without root (`-- --ignored`), it fails here saying what it needs.
pub fn require_root(what: &str) {
    assert!(is_root(), "{what} needs root: run this test as root (cargo xtask test does, as CI)");
}

/// The repository's root (the tests crate is one level below it).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A folder of its own, `ackscope-e2e-RANDOM` under the system's temporary folder, removed
/// when dropped.
pub fn scratch_dir() -> std::io::Result<TempDir> {
    TempDir::with_prefix("ackscope-e2e-")
}

/// The elements `selector` (CSS) finds.
pub fn css(selector: &str) -> Locator<'_> {
    Locator::Css(selector)
}

/// The text of the first element `selector` finds.
pub async fn text(client: &Client, selector: &str) -> Result<String> {
    Ok(client.find(css(selector)).await?.text().await?)
}

/// The number after `label` in `text` ("p50 87.98 ms" with "p50 " -> 87.98).
pub fn figure(text: &str, label: &str) -> Option<f64> {
    text.split(label).nth(1)?.split_whitespace().next()?.trim_end_matches(',').parse().ok()
}

/// Polls `selector` until its text contains `what`, for up to `timeout`; its text then.
pub async fn wait_for_text(
    client: &Client,
    selector: &str,
    what: &str,
    timeout: Duration,
) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(found) = text(client, selector).await {
            if found.contains(what) {
                return Ok(found);
            }
        }
        if Instant::now() > deadline {
            bail!("{selector} never said {what:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
