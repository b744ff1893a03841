//! The viewer benchmark (`cargo xtask bench viewer` runs it): opens a big session file in the
//! real app in headless Chromium and measures, from outside the app, with the page's clock:
//!
//! - `load_ms`: from handing the file to the file picker to the overview strip of the whole run
//!   painted: the preview from the overview the probe wrote at the file's end (`data-requests`
//!   saying every request), or, for a file without one, the timeline's own strip;
//! - `full_load_ms`: to every request decoded and reachable (the summary shows every request,
//!   the timeline's strip is painted and the kernel panel is built);
//! - `longest_task_ms`: the longest main-thread task that began while it loaded, the one that
//!   finished the load included (PerformanceObserver's long tasks; none over 50 ms means the
//!   page stayed responsive);
//! - `frame_p95_ms`: the 95th percentile of frame intervals (requestAnimationFrame) during 5 s
//!   of scripted zooming, panning and scrolling (and `frames_over_25ms`, the frames that missed
//!   the display's interval), with `paint_p95_ms`, the 95th percentile of the time the page's
//!   Canvas 2D calls for the plot took in a frame (the app writes it on the canvas), and
//!   `marks_max`, the most marks one frame drew;
//! - `wasm_mb`: the app's WebAssembly memory after loading, against the file's size, and
//!   `worker_mb`, the memory of the worker that decoded the file beside the page (stopped once
//!   the file is read: its memory goes with it);
//! - `live_events_per_s`: a 100,000-request run started from the page, with NODELAY on both
//!   sides, from pressing Run to the page showing every request done: the events the page
//!   received (`data-events` of the run's entry) per second, and `live_vs_cli`, the CLI's
//!   duration of the same run over the page's (1.0: the page kept up with the probe).
//!
//! A file of more than 3,000,000 requests is past what the page holds (48 million events); for
//! it the program prints `viewer_past_cap overview_ms= cut_load_ms= requests_read= goto_last_ms=
//! wasm_mb= longest_task_ms=`: the whole run's overview painted, the page holding what it holds,
//! then "go to request" of the last request until it is shown (the page reads the file again
//! from around it), its memory after, and the longest main-thread task of it all.
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
window.__bench = { overview: null, loaded: null, t0: null, entries: [] };
try {
  // Every long task since the file was chosen. An entry is delivered after its task ends, so the
  // task that finished the load arrives after `loaded` was set: which tasks belong to the load
  // is decided by when they began (TASKS_BEFORE), once they have all been delivered.
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (window.__bench.t0 !== null) window.__bench.entries.push([entry.startTime, entry.duration]);
    }
  }).observe({ type: "longtask" });
} catch (e) { window.__bench.noLongTasks = String(e); }
const done = () => {
  const summary = document.querySelector("[data-testid=summary-requests]");
  const overview = document.querySelector("[data-testid=overview]");
  // The kernel panel is built a task after the rest of the run's view: the load ends with it.
  const kernel = document.querySelector("[data-testid=kernel-tracks], [data-testid=no-kernel-tracks]");
  return summary && overview && kernel && summary.textContent.trim() === String(requests)
    && overview.width > 0;
};
const previewed = () => {
  const preview = document.querySelector("[data-testid=preview-overview]");
  return preview && preview.getAttribute("data-painted") === "true"
    && preview.getAttribute("data-requests") === String(requests);
};
new MutationObserver(() => {
  if (window.__bench.overview === null && window.__bench.t0 !== null && (previewed() || done())) {
    requestAnimationFrame(() => { window.__bench.overview = performance.now(); });
  }
  if (window.__bench.loaded === null && window.__bench.t0 !== null && done()) {
    // The DOM says it is done; the next frame is when it is on the screen.
    requestAnimationFrame(() => { window.__bench.loaded = performance.now(); });
  }
}).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
window.__bench.t0 = performance.now();
"#;

/// For a file past what the page holds (more than [`PAGE_HOLDS`] requests): `__cap.overview`
/// when the whole run's overview from the file's end is painted, `__cap.cut` when the page has
/// read what it holds and says the rest can be read from a request, `__cap.goto` when "go to
/// request" of the last request (asked at `__cap.gotoAt`) shows it selected, `__cap.ranked`
/// when every request of the run is ranked, and `__cap.next` when "next slowest" (pressed at
/// `__cap.nextAt`) has selected another request.
const PAST_CAP: &str = r#"
const [requests] = arguments;
window.__cap = {
  overview: null, cut: null, t0: null, gotoAt: null, goto: null, ranked: null,
  nextAt: null, nextFrom: null, next: null, entries: [],
};
try {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (window.__cap.t0 !== null) window.__cap.entries.push([entry.startTime, entry.duration]);
    }
  }).observe({ type: "longtask" });
} catch (e) { window.__cap.noLongTasks = String(e); }
const previewed = () => {
  const preview = document.querySelector("[data-testid=preview-overview]");
  return preview && preview.getAttribute("data-painted") === "true"
    && preview.getAttribute("data-requests") === String(requests);
};
const cut = () => {
  const note = document.querySelector("[data-testid=file-error]");
  return note && note.textContent.includes("read from a request")
    && document.querySelector("[data-testid=summary-requests]");
};
const last = () => document.querySelector(`[data-testid=selection][data-request='${requests - 1}']`);
new MutationObserver(() => {
  const bench = window.__cap;
  if (bench.t0 === null) return;
  if (bench.overview === null && previewed()) {
    requestAnimationFrame(() => { bench.overview = performance.now(); });
  }
  if (bench.cut === null && cut()) requestAnimationFrame(() => { bench.cut = performance.now(); });
  if (bench.gotoAt !== null && bench.goto === null && last()) {
    requestAnimationFrame(() => { bench.goto = performance.now(); });
  }
  if (bench.ranked === null && document.querySelector("[data-testid=whole-run][data-ranked=true]")) {
    bench.ranked = performance.now();
  }
  const selected = document.querySelector("[data-testid=selection]");
  if (bench.nextAt !== null && bench.next === null && selected
      && selected.getAttribute("data-request") !== bench.nextFrom) {
    requestAnimationFrame(() => { bench.next = performance.now(); });
  }
}).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
window.__cap.t0 = performance.now();
"#;

/// Requests of a NODELAY run the page holds: 48 million events, about 3.2 million requests.
const PAGE_HOLDS: u64 = 3_000_000;

/// Loads the app, starts the measuring `script` (with the request count), and chooses `file`.
async fn open_observed(
    client: &Client,
    url: &str,
    file: &std::path::Path,
    script: &str,
    requests: u64,
) -> Result<()> {
    client.goto(url).await?;
    let css = Locator::Css;
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(css("[data-testid=open-file]"))
        .await
        .context("the app did not mount")?;
    client.execute(script, vec![json!(requests)]).await?;
    let input = client.find(css("[data-testid=open-file]")).await?;
    input.send_keys(&file.display().to_string()).await?;
    Ok(())
}

/// The app's WebAssembly memory in bytes (`null` if the page does not say).
async fn wasm_bytes(client: &Client) -> Result<Value> {
    let script =
        "return window.ackscopeWasmMemory ? window.ackscopeWasmMemory.buffer.byteLength : null";
    Ok(client.execute(script, vec![]).await?)
}

/// The most WebAssembly memory a worker that decoded a file beside the page held (0 if none
/// did: a file decoded on the page's thread).
async fn worker_wasm_bytes(client: &Client) -> Result<f64> {
    let script = "return window.ackscopeWorkerWasmBytes || 0";
    Ok(client.execute(script, vec![]).await?.as_f64().unwrap_or(f64::NAN))
}

/// A file past what the page holds: from choosing it to its overview painted, to the page
/// holding what it holds (and saying the rest is read from a request), then from "go to
/// request" of the last request to it shown; the page's memory after, and the longest task.
async fn measure_past_cap(
    client: &Client,
    url: &str,
    file: &std::path::Path,
    requests: u64,
    file_mb: f64,
) -> Result<()> {
    open_observed(client, url, file, PAST_CAP, requests).await?;
    let css = Locator::Css;
    let cap = |field: &'static str| async move {
        let deadline = Instant::now() + Duration::from_secs(900);
        loop {
            let bench = client.execute("return window.__cap", vec![]).await?;
            if !bench[field].is_null() {
                return Ok::<Value, anyhow::Error>(bench);
            }
            if Instant::now() > deadline {
                bail!("no {field} within 900 s: {bench}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let bench = cap("cut").await?;
    let number = |value: &Value| value.as_f64().unwrap_or(f64::NAN);
    let read_text = client.find(css("[data-testid=summary-requests]")).await?.text().await?;
    let requests_read: u64 = read_text.trim().parse().unwrap_or(0);
    client.execute("window.__cap.gotoAt = performance.now()", vec![]).await?;
    let goto = client.find(css("[data-testid=goto-request]")).await?;
    goto.send_keys(&format!("{}\u{E007}", requests - 1)).await?;
    let after = cap("goto").await?;
    let ranked = cap("ranked").await?;
    client
        .execute(
            "const s = document.querySelector('[data-testid=selection]'); \
             window.__cap.nextFrom = s ? s.getAttribute('data-request') : null; \
             window.__cap.nextAt = performance.now()",
            vec![],
        )
        .await?;
    client.find(css("[data-testid=next-slowest]")).await?.click().await?;
    let next = cap("next").await?;
    let longest = next["entries"]
        .as_array()
        .map(|entries| entries.iter().map(|e| number(&e[1])).fold(0.0, f64::max))
        .unwrap_or(f64::NAN);
    eprintln!(
        "timeline (ms, the page's clock): t0 {} cut {} gotoAt {} goto {} ranked {} nextAt {} next {} long tasks [at, ms] {:?}",
        next["t0"], next["cut"], next["gotoAt"], next["goto"], next["ranked"], next["nextAt"], next["next"], next["entries"]
    );
    let wasm_bytes = wasm_bytes(client).await?;
    println!(
        "viewer_past_cap overview_ms={:.0} cut_load_ms={:.0} requests_read={requests_read} \
         goto_last_ms={:.0} ranked_ms={:.0} next_slowest_ms={:.0} wasm_mb={:.0} \
         longest_task_ms={longest:.0} file_mb={file_mb:.0} requests={requests}",
        number(&bench["overview"]) - number(&bench["t0"]),
        number(&bench["cut"]) - number(&bench["t0"]),
        number(&after["goto"]) - number(&after["gotoAt"]),
        number(&ranked["ranked"]) - number(&bench["cut"]),
        number(&next["next"]) - number(&next["nextAt"]),
        number(&wasm_bytes) / 1e6,
    );
    Ok(())
}

/// The long tasks of `window[arguments[0]]` that began between its `t0` and the moment named
/// `arguments[1]` (the load's `loaded`, the live run's `done`).
const TASKS_BEFORE: &str = r#"
const [name, end] = arguments;
const b = window[name];
const within = b.entries.filter(([start]) => start < b[end]);
return {
  longest: Math.max(0, ...within.map(([, duration]) => duration)),
  count: within.length,
  at: within.map(([start, duration]) => Math.round(start - b.t0) + "+" + Math.round(duration)),
};
"#;

/// A task's entry is delivered a little after it ends: how long to wait for the last one.
const TASK_ENTRY_DELAY: Duration = Duration::from_millis(500);

/// The long tasks that began before `end` of `window[name]`: (longest, count, when each began
/// and how long it took).
async fn tasks_before(client: &Client, name: &str, end: &str) -> Result<(f64, u64, String)> {
    tokio::time::sleep(TASK_ENTRY_DELAY).await;
    let tasks = client.execute(TASKS_BEFORE, vec![json!(name), json!(end)]).await?;
    let at = tasks["at"].as_array().map_or(String::new(), |at| {
        at.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",")
    });
    Ok((tasks["longest"].as_f64().unwrap_or(f64::NAN), tasks["count"].as_u64().unwrap_or(0), at))
}

/// Presses Run and records when the page shows the run done with every request.
const LIVE: &str = r#"
const [requests] = arguments;
window.__live = { t0: null, done: null, entries: [] };
try {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (window.__live.t0 !== null) window.__live.entries.push([entry.startTime, entry.duration]);
    }
  }).observe({ type: "longtask" });
} catch (e) {}
const done = () => {
  const summary = document.querySelector("[data-testid=summary-requests]");
  const status = document.querySelector("[data-testid=run-entry][aria-selected=true] .status");
  return summary && status && summary.textContent.trim() === String(requests)
    && status.getAttribute("data-status") === "done";
};
new MutationObserver(() => {
  if (window.__live.done === null && window.__live.t0 !== null && done()) {
    requestAnimationFrame(() => { window.__live.done = performance.now(); });
  }
}).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
window.__live.t0 = performance.now();
document.querySelector("[data-testid=run]").click();
"#;

/// Requests of the live run: the most the page may start (the probe refuses more).
const LIVE_REQUESTS: u64 = 100_000;

/// Zooms, pans and scrolls the plot for `seconds`, one input per frame, and records every
/// frame's interval.
const INTERACT: &str = r#"
const [seconds, done] = [arguments[0], arguments[arguments.length - 1]];
const plot = document.querySelector("[data-testid=plot]");
const canvas = plot.querySelector("canvas");
const rect = plot.getBoundingClientRect();
const frames = [], paints = [], marks = [];
let last = performance.now();
const start = last;
let step = 0;
const frame = (now) => {
  frames.push(now - last);
  last = now;
  // The last paint's drawing calls (ms) and how many marks the page drew.
  paints.push(parseFloat(canvas.dataset.paintMs));
  marks.push(parseInt(plot.dataset.marks, 10));
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
  else done({ frames: frames.slice(1), paints: paints.slice(1), marks: marks.slice(1) });
};
requestAnimationFrame(frame);
"#;

/// A live run of [`LIVE_REQUESTS`] from the page, against the same run on the command line.
async fn live(client: &Client) -> Result<String> {
    let cli = std::process::Command::new(ackscope_tests::ackscope_bin()?)
        .args(["run", "rr", "--count", &LIVE_REQUESTS.to_string(), "--nodelay", "both", "--json"])
        .output()
        .context("the command line's run")?;
    let cli: Value = serde_json::from_slice(&cli.stdout).context("the command line's JSON")?;
    let cli_s = cli["duration_s"].as_f64().context("no duration_s")?;

    let field = client.find(Locator::Css("[data-testid=requests]")).await?;
    field.clear().await?;
    field.send_keys(&LIVE_REQUESTS.to_string()).await?;
    for side in ["nodelay-client", "nodelay-server"] {
        let selector = format!("[data-testid={side}]");
        let checkbox = client.find(Locator::Css(&selector)).await?;
        if !checkbox.is_selected().await? {
            checkbox.click().await?;
        }
    }
    client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("[data-testid=run]:not([disabled])"))
        .await
        .context("Run never became pressable (is the probe connected?)")?;
    client.execute(LIVE, vec![json!(LIVE_REQUESTS)]).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let live = loop {
        let live = client.execute("return window.__live", vec![]).await?;
        if !live["done"].is_null() {
            break live;
        }
        if Instant::now() > deadline {
            bail!("the live run did not show as done within 300 s: {live}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let page_ms =
        live["done"].as_f64().unwrap_or(f64::NAN) - live["t0"].as_f64().unwrap_or(f64::NAN);
    let entry = client.find(Locator::Css("[data-testid=run-entry][aria-selected=true]")).await?;
    let events: f64 = entry.attr("data-events").await?.context("no data-events")?.parse()?;
    let (longest, _, _) = tasks_before(client, "__live", "done").await?;
    Ok(format!(
        "live_events={events:.0} live_events_per_s={:.0} live_ms={page_ms:.0} live_vs_cli={:.2} live_longest_task_ms={longest:.0}",
        events / (page_ms / 1e3),
        cli_s * 1e3 / page_ms,
    ))
}

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
    let result = match requests > PAGE_HOLDS {
        true => measure_past_cap(&client, &url, &file, requests, file_mb).await,
        false => measure(&client, &url, &file, requests, seconds, file_mb).await,
    };
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
    open_observed(client, url, file, OBSERVE, requests).await?;
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
    let load_ms = number(&bench["overview"]) - number(&bench["t0"]);
    let full_load_ms = number(&bench["loaded"]) - number(&bench["t0"]);
    let (longest_task_ms, long_tasks, long_tasks_at) =
        tasks_before(client, "__bench", "loaded").await?;

    let input = client.execute_async(INTERACT, vec![json!(seconds)]).await?;
    let sorted = |name: &str| -> Result<Vec<f64>> {
        let list = input[name].as_array().with_context(|| format!("no {name} in {input}"))?;
        let mut list: Vec<f64> = list.iter().map(number).filter(|n| n.is_finite()).collect();
        list.sort_by(f64::total_cmp);
        Ok(list)
    };
    let p95 = |list: &[f64]| list.get(list.len() * 95 / 100).copied().unwrap_or(f64::NAN);
    let frames = sorted("frames")?;
    let paint_p95 = p95(&sorted("paints")?);
    let marks_max = sorted("marks")?.last().copied().unwrap_or(f64::NAN);
    let p95 = p95(&frames);
    // A frame the page missed takes two display intervals (33 ms at 60 Hz): count those apart
    // from the p95, which a 60 Hz display pins at its own interval plus jitter.
    let missed = frames.iter().filter(|&&ms| ms > 25.0).count();
    let wasm_bytes = wasm_bytes(client).await?;
    let wasm_mb = number(&wasm_bytes) / 1e6;
    let worker_mb = worker_wasm_bytes(client).await? / 1e6;
    // Last, on the same page: the live run's memory is not the file's.
    let live = live(client).await?;
    println!(
        "viewer load_ms={load_ms:.0} full_load_ms={full_load_ms:.0} frame_p95_ms={p95:.1} wasm_mb={wasm_mb:.0} worker_mb={worker_mb:.0} file_mb={file_mb:.0} \
         requests={requests} longest_task_ms={longest_task_ms:.0} long_tasks={long_tasks} frames={} \
         frames_over_25ms={missed} paint_p95_ms={paint_p95:.2} marks_max={marks_max:.0} \
         long_tasks_at_ms={long_tasks_at} {live}",
        frames.len(),
    );
    Ok(())
}
