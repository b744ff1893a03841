//! The viewer benchmark (`cargo xtask bench viewer` runs it): opens a big session file in the
//! real app in headless Chromium and measures, from outside the app, with the page's clock:
//!
//! - `load_ms`: from handing the file to the file picker to the overview strip painted for the
//!   whole run (the summary shows every request);
//! - `longest_task_ms`: the longest main-thread task while it loaded (PerformanceObserver's
//!   long tasks; none over 50 ms means the page stayed responsive);
//! - `frame_p95_ms`: the 95th percentile of frame intervals (requestAnimationFrame) during 5 s
//!   of scripted zooming, panning and scrolling;
//! - `wasm_mb`: the app's WebAssembly memory after loading, against the file's size.
//!
//! Usage: `bench-viewer FILE REQUESTS [SECONDS]`, with ACKSCOPE_BIN naming the probe.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ackscope_tests::{start_browser, start_probe};
use anyhow::{bail, Context, Result};
use fantoccini::{Client, Locator};
use serde_json::{json, Value};

/// Watches for the load to finish and for long tasks, with the page's own clock.
const OBSERVE: &str = r#"
const [requests] = arguments;
window.__bench = { longest: 0, longTasks: 0, loaded: null, t0: null };
try {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (window.__bench.t0 !== null && window.__bench.loaded === null) {
        window.__bench.longest = Math.max(window.__bench.longest, entry.duration);
        window.__bench.longTasks += 1;
      }
    }
  }).observe({ type: "longtask" });
} catch (e) { window.__bench.noLongTasks = String(e); }
const done = () => {
  const summary = document.querySelector("[data-testid=summary-requests]");
  const overview = document.querySelector("[data-testid=overview]");
  return summary && overview && summary.textContent.trim() === String(requests)
    && overview.width > 0;
};
new MutationObserver(() => {
  if (window.__bench.loaded === null && window.__bench.t0 !== null && done()) {
    // The DOM says it is done; the next frame is when it is on the screen.
    requestAnimationFrame(() => { window.__bench.loaded = performance.now(); });
  }
}).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
window.__bench.t0 = performance.now();
"#;

/// Zooms, pans and scrolls the plot for `seconds`, one input per frame, and records every
/// frame's interval.
const INTERACT: &str = r#"
const [seconds, done] = [arguments[0], arguments[arguments.length - 1]];
const plot = document.querySelector("[data-testid=plot]");
const rect = plot.getBoundingClientRect();
const frames = [];
let last = performance.now();
const start = last;
let step = 0;
const frame = (now) => {
  frames.push(now - last);
  last = now;
  const x = rect.left + 60 + (step * 37) % 700, y = rect.top + 40;
  const kind = step % 6;
  const wheel = (init) => plot.dispatchEvent(new WheelEvent("wheel",
    Object.assign({ clientX: x, clientY: y, bubbles: true, cancelable: true }, init)));
  if (kind === 0) wheel({ deltaY: -120, ctrlKey: true });
  else if (kind === 1) wheel({ deltaY: 120, shiftKey: true });
  else if (kind === 2) wheel({ deltaY: 90 });
  else if (kind === 3) wheel({ deltaY: 120, ctrlKey: true });
  else if (kind === 4) plot.dispatchEvent(new KeyboardEvent("keydown", { code: "KeyD", key: "d", bubbles: true }));
  else wheel({ deltaY: -90 });
  step += 1;
  if (now - start < seconds * 1000) requestAnimationFrame(frame);
  else done(frames.slice(1));
};
requestAnimationFrame(frame);
"#;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (file, requests, seconds) = match args.as_slice() {
        [file, requests] => (file, requests, "5"),
        [file, requests, seconds] => (file, requests, seconds.as_str()),
        _ => bail!("usage: bench-viewer FILE REQUESTS [SECONDS]"),
    };
    let file = PathBuf::from(file).canonicalize().with_context(|| format!("reading {file}"))?;
    let requests: u64 = requests.parse().context("REQUESTS must be a number")?;
    let seconds: f64 = seconds.parse().context("SECONDS must be a number")?;
    let file_mb = std::fs::metadata(&file)?.len() as f64 / 1e6;

    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = measure(&client, &url, &file, requests, seconds, file_mb).await;
    client.close().await?;
    result
}

async fn measure(
    client: &Client,
    url: &str,
    file: &std::path::Path,
    requests: u64,
    seconds: f64,
    file_mb: f64,
) -> Result<()> {
    client.goto(url).await?;
    let css = Locator::Css;
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(css("[data-testid=open-file]"))
        .await
        .context("the app did not mount")?;
    client.execute(OBSERVE, vec![json!(requests)]).await?;
    let input = client.find(css("[data-testid=open-file]")).await?;
    input.send_keys(&file.display().to_string()).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let bench = loop {
        let bench = client.execute("return window.__bench", vec![]).await?;
        if !bench["loaded"].is_null() {
            break bench;
        }
        if Instant::now() > deadline {
            bail!("the file did not finish loading within 600 s: {bench}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let number = |value: &Value| value.as_f64().unwrap_or(f64::NAN);
    let load_ms = number(&bench["loaded"]) - number(&bench["t0"]);
    let longest_task_ms = number(&bench["longest"]);

    let frames = client.execute_async(INTERACT, vec![json!(seconds)]).await?;
    let mut frames: Vec<f64> =
        frames.as_array().context("frame intervals")?.iter().map(number).collect();
    frames.sort_by(f64::total_cmp);
    let p95 = frames.get(frames.len() * 95 / 100).copied().unwrap_or(f64::NAN);
    let wasm_bytes = client
        .execute(
            "return window.ackscopeWasmMemory ? window.ackscopeWasmMemory.buffer.byteLength : null",
            vec![],
        )
        .await?;
    let wasm_mb = number(&wasm_bytes) / 1e6;
    println!(
        "viewer load_ms={load_ms:.0} frame_p95_ms={p95:.1} wasm_mb={wasm_mb:.0} file_mb={file_mb:.0} \
         requests={requests} longest_task_ms={longest_task_ms:.0} long_tasks={} frames={}",
        bench["longTasks"],
        frames.len()
    );
    Ok(())
}
