//! End to end: the real `ackscope` binary, real loopback sockets, real headless Chromium over
//! WebDriver. Asserts what a person looking at the page would see.
//!
//! Needs the release binary with the web app embedded (`cargo xtask test` builds it and sets
//! ACKSCOPE_BIN), Chromium and ChromeDriver (`cargo xtask test` installs them).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ackscope_tests::{css, downloads, screenshot, start_browser, start_probe};
use anyhow::{bail, ensure, Context, Result};
use fantoccini::{elements::Element, Client};

/// Requests per run: with Nagle on both sides each takes ~88 ms, so a run lasts ~5 s, long enough
/// to watch rows arrive while it goes.
const REQUESTS: usize = 60;

/// Saves one element as `name`, like [`screenshot`]: for the parts of the page below the fold.
async fn element_screenshot(client: &Client, selector: &str, name: &str) -> Result<()> {
    if let Some(dir) = std::env::var_os("ACKSCOPE_SCREENSHOT_DIR") {
        let path = PathBuf::from(dir).join(name);
        let element = client.find(css(selector)).await?;
        std::fs::write(&path, element.screenshot().await?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn text_of(client: &Client, testid: &str) -> Result<String> {
    let element = client.find(css(&format!("[data-testid={testid}]"))).await?;
    Ok(element.text().await?.trim().to_string())
}

async fn number_of(client: &Client, testid: &str) -> Result<f64> {
    let text = text_of(client, testid).await?;
    text.parse().with_context(|| format!("{testid} shows {text:?}, not a number"))
}

async fn type_into(client: &Client, testid: &str, value: &str) -> Result<()> {
    let field = client.find(css(&format!("[data-testid={testid}]"))).await?;
    field.clear().await?;
    field.send_keys(value).await?;
    let shown = field.prop("value").await?.unwrap_or_default();
    if shown != value {
        bail!("typed {value:?} into {testid} but it shows {shown:?}");
    }
    Ok(())
}

async fn set_checkbox(client: &Client, testid: &str, on: bool) -> Result<()> {
    let checkbox = client.find(css(&format!("[data-testid={testid}]"))).await?;
    if checkbox.is_selected().await? != on {
        checkbox.click().await?;
    }
    Ok(())
}

/// The stall labels a person sees per request row: (request rows, rows with a 30-60 ms stall,
/// rows with any stall label).
async fn stall_rows(client: &Client) -> Result<(usize, usize, usize)> {
    let rows: Vec<Element> = client.find_all(css("[data-testid=request-row]")).await?;
    let (mut delayed_ack, mut any) = (0, 0);
    for row in &rows {
        let labels = row.find_all(css("[data-testid=stall-label]")).await?;
        if !labels.is_empty() {
            any += 1;
        }
        for label in labels {
            let text = label.text().await?;
            let ms: f64 = text
                .trim()
                .trim_end_matches("ms")
                .trim()
                .parse()
                .with_context(|| format!("stall label {text:?} is not 'N ms'"))?;
            if (30.0..=60.0).contains(&ms) {
                delayed_ack += 1;
                break;
            }
        }
    }
    Ok((rows.len(), delayed_ack, any))
}

/// Presses Run and waits for the run to finish, `requests` requests. Returns the most rows seen
/// while it was going.
async fn run_and_wait(client: &Client, requests: usize) -> Result<usize> {
    let before = client.find_all(css("[data-testid=run-entry]")).await?.len();
    client.find(css("[data-testid=run]")).await?.click().await?;
    // The new run is listed and selected once the probe has started it; only then does the
    // summary belong to it.
    let new_run =
        format!("[data-testid=run-entry][data-run-id='{}'][aria-selected=true]", before + 1);
    client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(css(&new_run))
        .await
        .context("the new run never appeared in the run list")?;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut rows_while_running = 0;
    loop {
        let done = text_of(client, "summary-requests").await? == requests.to_string();
        if done {
            return Ok(rows_while_running);
        }
        let rows = client.find_all(css("[data-testid=request-row]")).await?.len();
        if rows < requests {
            rows_while_running = rows_while_running.max(rows);
        }
        if Instant::now() > deadline {
            bail!("the run did not finish within 90 s ({rows} rows shown)");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nagle_stall_shows_live_and_vanishes_with_nodelay() -> Result<()> {
    let (_probe, url) = start_probe()?;
    let (_driver, client, profile) = start_browser().await?;
    let result = scenario(&client, &url, &downloads(&profile)).await;
    if result.is_err() {
        if let Ok(png) = client.screenshot().await {
            let path = std::env::temp_dir().join("ackscope-e2e-failure.png");
            let _ = std::fs::write(&path, png);
            eprintln!("screenshot of the failure: {}", path.display());
        }
    }
    client.close().await?;
    result
}

/// Opens the app at `url` and waits until it has mounted (a blank page with a broken wasm fails
/// here), then fills in story 1 as the seed had it: `requests` requests of 2048 bytes, Nagle on
/// both sides, keep-alive.
async fn open_with_story_one(client: &Client, url: &str, requests: usize) -> Result<()> {
    client.goto(url).await?;
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(css("[data-testid=run]"))
        .await
        .context("the Run button never appeared: the web app did not mount")?;
    type_into(client, "requests", &requests.to_string()).await?;
    type_into(client, "size", "2048").await?;
    set_checkbox(client, "nodelay-client", false).await?;
    set_checkbox(client, "nodelay-server", false).await
}

async fn scenario(client: &Client, url: &str, downloads: &std::path::Path) -> Result<()> {
    open_with_story_one(client, url, REQUESTS).await?;
    let seen_live = run_and_wait(client, REQUESTS).await?;
    assert!(
        seen_live > 0,
        "rows must appear while the run goes, not only at the end (saw {seen_live})"
    );
    // The timeline shows a page of rows (the rest are a scroll, a key or a search away).
    let (rows, delayed_ack, _) = stall_rows(client).await?;
    assert!(rows >= 15, "{rows} request rows on the first page");
    assert!(
        delayed_ack * 2 > rows,
        "more than half the rows show a 30-60 ms stall: {delayed_ack} of {rows}"
    );
    let nagle_stalls = number_of(client, "summary-stalled-reads").await?;
    assert!(nagle_stalls >= REQUESTS as f64, "{nagle_stalls} stalled reads");
    assert!(number_of(client, "summary-p50-ms").await? > 60.0);
    assert!(number_of(client, "summary-rps").await? < 25.0);

    // The fix: TCP_NODELAY on both sides.
    set_checkbox(client, "nodelay-client", true).await?;
    set_checkbox(client, "nodelay-server", true).await?;
    run_and_wait(client, REQUESTS).await?;
    let (rows, delayed_ack, any_stall) = stall_rows(client).await?;
    assert!(rows >= 15, "{rows} request rows");
    assert_eq!(delayed_ack, 0, "no row shows a 30-60 ms stall with TCP_NODELAY on both sides");
    // A loaded machine may delay a thread past 10 ms once in a while; never row after row.
    assert!(any_stall <= 1, "{any_stall} rows show a stall with TCP_NODELAY on both sides");
    assert!(number_of(client, "summary-stalled-reads").await? <= 1.0);
    assert!(number_of(client, "summary-p50-ms").await? < 5.0);

    // Both runs stay listed; flipping back shows the stalls again.
    let entries = client.find_all(css("[data-testid=run-entry]")).await?;
    assert_eq!(entries.len(), 2, "both runs are listed");
    client.find(css("[data-testid=run-entry][data-run-id='1']")).await?.click().await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while number_of(client, "summary-stalled-reads").await? != nagle_stalls {
        if Instant::now() > deadline {
            bail!("selecting the first run did not bring its summary back");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (rows, delayed_ack, _) = stall_rows(client).await?;
    assert!(delayed_ack * 2 > rows, "the Nagle run's stalls are drawn again");

    // The last request is reachable: go to it, and the selection shows its ladder.
    let goto = client.find(css("[data-testid=goto-request]")).await?;
    goto.send_keys(&format!("{}\u{E007}", REQUESTS - 1)).await?;
    let selected = format!("[data-testid=selection][data-request='{}']", REQUESTS - 1);
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(css(&selected))
        .await
        .context("going to the last request did not select it")?;
    client.find(css(&format!("{selected} [data-testid=ladder]"))).await?;
    let row = format!("[data-testid=request-row][data-req='{}']", REQUESTS - 1);
    client.find(css(&row)).await.context("the last request's row is on the page")?;

    screenshot(client, "story1.png").await?;

    // n steps through the stalls in request order from the selected request: request 1's two
    // (one per direction), then request 2's.
    let goto = client.find(css("[data-testid=goto-request]")).await?;
    goto.clear().await?;
    goto.send_keys("0\u{E007}").await?;
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(css("[data-testid=selection][data-request='0']"))
        .await?;
    let mut visited = Vec::new();
    for _ in 0..3 {
        client.find(css("[data-testid=plot]")).await?.send_keys("n").await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        visited.push(selected_request(client).await?);
    }
    assert_eq!(visited, [1, 1, 2], "n walks the stalls in order");
    element_screenshot(client, "[data-testid=selection]", "ladder.png").await?;
    // The kernel's view of the selected request's connection: TCP_INFO over time, both sides.
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(css("[data-testid=kernel-tracks]"))
        .await
        .context("no kernel tracks for the selected request")?;
    element_screenshot(client, "[data-testid=kernel-tracks]", "kernel.png").await?;

    // The run-clock view: one lane per connection and side, the stalls still red.
    client.find(css("[data-testid=mode-run-clock]")).await?.click().await?;
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(css("[data-testid=plot][data-mode=run-clock]"))
        .await?;
    let lanes = client.find_all(css("[data-testid=lane]")).await?.len();
    assert_eq!(lanes, 2, "one lane per side of the one connection");
    let plot = client.find(css("[data-testid=plot]")).await?;
    let stalled: usize = plot.attr("data-stalled-marks").await?.unwrap_or_default().parse()?;
    assert!(stalled >= REQUESTS, "{stalled} stalls painted on the run clock");
    element_screenshot(client, "section.timeline", "run-clock.png").await?;
    client.find(css("[data-testid=mode-aligned]")).await?.click().await?;

    // "Save as PNG" saves the view as the screen shows it: a PNG of the plot's width.
    client.find(css("[data-testid=export-png]")).await?.click().await?;
    let png = downloaded(downloads, "ackscope-view.png").await?;
    let (width, height) = png_size(&png)?;
    let (_, _, plot_width, _) =
        client.find(css("[data-testid=plot] canvas")).await?.rectangle().await?;
    assert_eq!(f64::from(width), plot_width.round(), "the PNG is as wide as the plot on screen");
    assert!(height > 100, "the PNG holds the rows: {width} x {height}");

    // The address bar holds the view: zoomed in, reloading it shows the same run, request and
    // time window.
    client.find(css("[data-testid=plot]")).await?.send_keys("++").await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let link = client.current_url().await?;
    assert!(link.as_str().contains("run=1") && link.as_str().contains("req=2"), "{link}");
    let window = query_window(link.as_str()).context("zoomed in, the link holds no window")?;
    client.goto(link.as_str()).await?;
    client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(css("[data-testid=selection][data-request='2']"))
        .await
        .context("the reloaded link did not show request 2 again")?;
    client.find(css("[data-testid=run-entry][data-run-id='1'][aria-selected=true]")).await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let reloaded = client.current_url().await?;
    assert_eq!(query_window(reloaded.as_str()), Some(window), "the same window: {reloaded}");

    // Compare the two runs: the specs' difference is named.
    let changed = compare_runs_1_and_2(client).await?;
    assert!(changed.contains("TCP_NODELAY") && changed.contains("off -> on"), "{changed}");
    screenshot(client, "compare.png").await?;
    Ok(())
}

/// The `from` and `to` of a link's query: the timeline's time window.
/// The run form's "server" field: a run against `ackscope server` elsewhere (here another
/// process on loopback), started from the page with its token. The page shows the run's
/// requests, the Nagle stalls on both sides, and how the server's clock was matched to ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_against_a_remote_server_is_started_from_the_run_form() -> Result<()> {
    let (_server, addr, token) = start_server()?;
    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = remote_scenario(&client, &url, &addr, &token).await;
    client.close().await?;
    result
}

/// `ackscope server --listen 127.0.0.1:0`: the process, its address and its token.
fn start_server() -> Result<(ackscope_tests::Reaped, String, String)> {
    start_server_recording(None)
}

/// `ackscope server --listen 127.0.0.1:0 [-o FILE]`: the process, its address and its token.
fn start_server_recording(
    file: Option<&std::path::Path>,
) -> Result<(ackscope_tests::Reaped, String, String)> {
    use std::io::BufRead;
    let mut command = std::process::Command::new(ackscope_tests::ackscope_bin()?);
    command.args(["server", "--listen", "127.0.0.1:0"]);
    if let Some(file) = file {
        command.arg("-o").arg(file);
    }
    let mut child =
        command.stdout(std::process::Stdio::piped()).spawn().context("starting ackscope server")?;
    let mut out = std::io::BufReader::new(child.stdout.take().context("stdout")?);
    let server = ackscope_tests::Reaped(child);
    let (mut addr, mut token) = (None, None);
    while token.is_none() {
        let mut line = String::new();
        ensure!(out.read_line(&mut line)? > 0, "ackscope server ended before its token");
        let words: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with("ackscope echo server on") {
            addr = words.get(4).map(|w| w.to_string());
        }
        if line.starts_with("token ") {
            token = words.get(1).map(|w| w.to_string());
        }
    }
    // The rest of its output is read, so that it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Ok((server, addr.context("no address line")?, token.context("no token")?))
}

async fn remote_scenario(client: &Client, url: &str, addr: &str, token: &str) -> Result<()> {
    open_with_story_one(client, url, REQUESTS).await?;
    type_into(client, "server", addr).await?;
    type_into(client, "server-token", token).await?;
    run_and_wait(client, REQUESTS).await?;
    let clock = text_of(client, "summary-clock").await?;
    ensure!(clock.starts_with("server on another host"), "the clock line: {clock:?}");
    // Nagle x delayed ACK on both sides, as on loopback: the server's options were applied
    // on the server.
    let (rows, delayed_ack, _) = stall_rows(client).await?;
    ensure!(rows >= 15, "{rows} request rows");
    ensure!(delayed_ack * 2 > rows, "a 30-60 ms stall on most rows: {delayed_ack} of {rows}");
    ensure!(number_of(client, "summary-stalled-reads").await? >= REQUESTS as f64);
    Ok(())
}

fn query_window(link: &str) -> Option<(u64, u64)> {
    let query = link.split_once('?')?.1;
    let value = |name: &str| {
        query.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
    };
    Some((value("from")?, value("to")?))
}

/// The file `name` once the browser has finished downloading it into `dir`.
async fn downloaded(dir: &std::path::Path, name: &str) -> Result<Vec<u8>> {
    let path = dir.join(name);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Chromium writes `name.crdownload` and renames it when done.
        if let Ok(bytes) = std::fs::read(&path) {
            if !bytes.is_empty() {
                return Ok(bytes);
            }
        }
        if Instant::now() > deadline {
            bail!("{} was not downloaded within 10 s", path.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The width and height in a PNG's header.
fn png_size(png: &[u8]) -> Result<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    ensure!(png.len() > 24 && png.starts_with(SIGNATURE), "not a PNG ({} bytes)", png.len());
    ensure!(&png[12..16] == b"IHDR", "a PNG without its header first");
    let number = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    Ok((number(16), number(20)))
}

/// The request the selection panel shows.
async fn selected_request(client: &Client) -> Result<u32> {
    let panel = client.find(css("[data-testid=selection]")).await?;
    let req = panel.attr("data-request").await?.context("the selection names no request")?;
    Ok(req.parse()?)
}

/// Records `count` requests with TCP_NODELAY on both sides into `file` with the release probe;
/// its summary, as the command line printed it.
fn record_nodelay(count: u32, file: &std::path::Path) -> Result<String> {
    let recorded = std::process::Command::new(ackscope_tests::ackscope_bin()?)
        .args(["run", "rr", "--count", &count.to_string(), "--nodelay", "both", "-o"])
        .arg(file)
        .output()
        .with_context(|| format!("recording {count} requests"))?;
    ensure!(recorded.status.success(), "{}", String::from_utf8_lossy(&recorded.stderr));
    Ok(String::from_utf8_lossy(&recorded.stdout).to_string())
}

/// A million requests recorded by the probe open in the browser, and the slowest is reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_request_session_opens_and_its_slowest_request_is_one_click_away() -> Result<()> {
    const COUNT: u32 = 1_000_000;
    let dir = ackscope_tests::scratch_dir()?;
    let file = dir.path().join("big.ackscope");
    // The slowest latency as the command line reports it: "max 8.35 ms".
    let summary = record_nodelay(COUNT, &file)?;
    let max_ms: f64 = summary
        .split("max ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|ms| ms.parse().ok())
        .with_context(|| format!("no max latency in {summary}"))?;

    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = async {
        client.goto(&url).await?;
        open_file(&client, &file).await?;
        let deadline = Instant::now() + Duration::from_secs(180);
        // While it loads (seconds), the whole run's overview from the file's end is painted.
        let mut previewed_slowest_ns = None;
        while text_of(&client, "summary-requests").await.unwrap_or_default() != COUNT.to_string() {
            if Instant::now() > deadline {
                bail!("the million-request file did not open within 180 s");
            }
            if previewed_slowest_ns.is_none() {
                if let Ok(preview) = client.find(css("[data-testid=preview-overview]")).await {
                    let requests = preview.attr("data-requests").await?;
                    if preview.attr("data-painted").await?.as_deref() == Some("true") {
                        assert_eq!(
                            requests,
                            Some(COUNT.to_string()),
                            "the preview has every request"
                        );
                        let slowest = preview.attr("data-slowest-ns").await?.unwrap_or_default();
                        previewed_slowest_ns = Some(slowest.parse::<f64>()?);
                        screenshot(&client, "loading.png").await?;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let previewed = previewed_slowest_ns.context("no overview was painted while it loaded")?;
        assert!(
            (previewed / 1e6 - max_ms).abs() < 0.01,
            "the preview's slowest request takes {} ms; the run's max is {max_ms} ms",
            previewed / 1e6
        );
        assert!(
            client.find(css("[data-testid=file-preview]")).await.is_err(),
            "the preview goes once the file is read"
        );
        // Decoded beside the page, by a worker that said how much memory it held.
        let worker_bytes = client.execute("return window.ackscopeWorkerWasmBytes || 0", vec![]);
        let worker_bytes = worker_bytes.await?.as_f64().unwrap_or(0.0);
        assert!(worker_bytes > 0.0, "the file was not decoded in the decoder's worker");
        client.find(css("[data-testid=next-slowest]")).await?.click().await?;
        // The selection shows the slowest request once the click is handled.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let panel = client.find(css("[data-testid=selection]")).await;
            let latency_ns = match panel {
                Ok(panel) => panel.attr("data-latency-ns").await?.and_then(|ns| ns.parse().ok()),
                Err(_) => None,
            };
            let latency_ms = latency_ns.map_or(f64::NAN, |ns: f64| ns / 1e6);
            if (latency_ms - max_ms).abs() < 0.01 {
                break;
            }
            if Instant::now() > deadline {
                bail!("the slowest request takes {latency_ms} ms; the run's max is {max_ms} ms");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let req = selected_request(&client).await?;
        client.find(css(&format!("[data-testid=request-row][data-req='{req}']"))).await?;
        client.find(css("[data-testid=selection] [data-testid=ladder]")).await?;
        screenshot(&client, "million.png").await?;
        Ok(())
    }
    .await;
    client.close().await?;
    result
}

/// "Read from a request" on the file's card, opening its control if it is closed (it stays
/// open on a card that was not replaced). A card replaced between the look and the typing (the
/// file read again around a request) has its control closed again: tried until the field
/// takes the number.
async fn read_from(client: &Client, request: u32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let typed = async {
            let control = client.find(css("[data-testid=file-read-from]")).await?;
            if control.attr("open").await?.is_none() {
                client.find(css("[data-testid=file-read-from] summary")).await?.click().await?;
            }
            type_into(client, "file-read-from-request", &request.to_string()).await
        }
        .await;
        match typed {
            Ok(()) => break,
            Err(error) if Instant::now() > deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    client.find(css("[data-testid=file-read-from-go]")).await?.click().await?;
    Ok(())
}

/// A file read from a request through its block index: the run's blocks before the one that
/// holds it are left unread, the page shows the run from there with that request selected, and
/// "go to request" of a request it did not read reads the file again around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_is_read_from_any_request_through_its_block_index() -> Result<()> {
    const COUNT: u32 = 20_000;
    const WANTED: u32 = 15_000;
    let dir = ackscope_tests::scratch_dir()?;
    let file = dir.path().join("soak.ackscope");
    record_nodelay(COUNT, &file)?;

    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = async {
        client.goto(&url).await?;
        open_and_wait(&client, &file, COUNT).await?;
        // Held whole: the request "next slowest" goes to from the one wanted.
        let goto = client.find(css("[data-testid=goto-request]")).await?;
        goto.send_keys(&format!("{WANTED}\u{E007}")).await?;
        let selected = format!("[data-testid=selection][data-request='{WANTED}']");
        client.wait().at_most(Duration::from_secs(10)).for_element(css(&selected)).await?;
        client.find(css("[data-testid=next-slowest]")).await?.click().await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let after_wanted = loop {
            let now = selected_request(&client).await?;
            if now != WANTED {
                break now;
            }
            if Instant::now() > deadline {
                bail!("next slowest did not move from request {WANTED}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };

        read_from(&client, WANTED).await?;
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css(&selected))
            .await
            .context("the file read from the request did not show it selected")?;
        let note = text_of(&client, "file-read-from-note").await?;
        let first: u32 = note
            .split("from request ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|first| first.parse().ok())
            .with_context(|| format!("no first request in {note:?}"))?;
        assert!(first > WANTED - 10_000 && first <= WANTED, "read from {first}: {note}");
        assert!(note.contains("left unread"), "{note}");
        let shown: u32 = text_of(&client, "summary-requests").await?.parse()?;
        assert_eq!(shown, COUNT - first, "the requests from {first} on, and no earlier one");
        client.find(css(&format!("[data-testid=request-row][data-req='{WANTED}']"))).await?;
        // The whole run's strip, from the file's end, with the part held shaded.
        let whole = client.find(css("[data-testid=whole-run]")).await?;
        assert_eq!(whole.attr("data-requests").await?, Some(COUNT.to_string()));
        assert_eq!(whole.attr("data-held-from").await?, Some(first.to_string()));
        screenshot(&client, "read-from-request.png").await?;
        element_screenshot(&client, "[data-testid=whole-run]", "whole-run.png").await?;

        // Every request ranked by a pass over the whole file: "next slowest" goes where it went
        // with the whole run held, held now or not (then the file is read around it).
        client
            .wait()
            .at_most(Duration::from_secs(60))
            .for_element(css("[data-testid=whole-run][data-ranked=true]"))
            .await
            .context("the whole run was not ranked")?;
        client.find(css("[data-testid=next-slowest]")).await?.click().await?;
        let reached = client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css(&format!("[data-testid=selection][data-request='{after_wanted}']")))
            .await;
        if reached.is_err() {
            let now = selected_request(&client).await.ok();
            let said = text_of(&client, "find-message").await.unwrap_or_default();
            bail!("next slowest from {WANTED} did not reach {after_wanted}: {now:?} ({said})");
        }

        // Read from the request again, then its middle column's worst request is before those
        // held: a click reads the file around it and selects it.
        read_from(&client, WANTED).await?;
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css(&selected))
            .await
            .context("read from the request again")?;
        client.find(css("[data-testid=whole-run-strip]")).await?.click().await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let clicked = loop {
            let note = text_of(&client, "file-read-from-note").await.unwrap_or_default();
            let wanted = note.split("to hold request ").nth(1).and_then(|w| w.parse::<u32>().ok());
            if let Some(wanted) = wanted.filter(|&wanted| wanted != WANTED) {
                break wanted;
            }
            if Instant::now() > deadline {
                bail!("a click on the whole run's strip read nothing new: {note:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(clicked < first, "the middle of 0-{COUNT} is before {first}: {clicked}");
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css(&format!("[data-testid=selection][data-request='{clicked}']")))
            .await
            .context("the strip's request was not selected once read")?;

        // A request before those read: "go to request" reads the file again, around it.
        read_from(&client, WANTED).await?;
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css(&selected))
            .await
            .context("read from the request again")?;
        let goto = client.find(css("[data-testid=goto-request]")).await?;
        goto.send_keys("100\u{E007}").await?;
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css("[data-testid=selection][data-request='100']"))
            .await
            .context("going to a request the page had not read did not read it")?;
        let note = text_of(&client, "file-read-from-note").await?;
        assert!(note.contains("to hold request 100"), "{note}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while text_of(&client, "summary-requests").await? != COUNT.to_string() {
            if Instant::now() > deadline {
                bail!("the file read again around request 100 does not hold all its requests");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
    .await;
    client.close().await?;
    result
}

/// A tcpdump capture dropped on the page: it shows the conversation and names the same stalls
/// as `ackscope import` of the same file, and exports what it shows as a Perfetto trace and as
/// pcapng with each stall's explanation on its packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_opens_on_the_page_with_the_stalls_import_names_and_exports() -> Result<()> {
    let dir = ackscope_tests::scratch_dir()?;
    let capture = dir.path().join("nagle.pcapng");
    std::fs::write(&capture, ackscope_shared::synthetic::nagle_capture(2))?;
    let imported = std::process::Command::new(ackscope_tests::ackscope_bin()?)
        .arg("import")
        .arg(&capture)
        .arg("-o")
        .arg(dir.path().join("nagle.ackscope"))
        .output()
        .context("ackscope import")?;
    let said = String::from_utf8_lossy(&imported.stdout).to_string();
    ensure!(imported.status.success(), "ackscope import failed: {said}");
    // "1 stalls: Nagle x delayed ACK, client->server, median 43.6 ms; fixes: ..."
    let import_line = said
        .lines()
        .find(|line| line.contains("Nagle x delayed ACK"))
        .with_context(|| format!("import names no Nagle stall: {said}"))?;
    let import_count: u32 = import_line.split_whitespace().next().unwrap_or("").parse()?;

    let (_probe, url) = start_probe()?;
    let (_driver, client, profile) = start_browser().await?;
    let result = async {
        client.goto(&url).await?;
        open_file(&client, &capture).await?;
        let connection = client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css("[data-testid=imported-connection]"))
            .await?
            .text()
            .await?;
        ensure!(
            connection.contains("client 127.0.0.1:50000 -> server 127.0.0.1:8080"),
            "{connection}"
        );
        ensure!(connection.contains("4104 bytes client->server"), "{connection}");
        let class = client.find(css("[data-testid=stall-class]")).await?;
        ensure!(class.attr("data-class").await?.as_deref() == Some("nagle_delayed_ack"));
        ensure!(class.attr("data-direction").await?.as_deref() == Some("client->server"));
        let page_count: u32 = class.attr("data-count").await?.unwrap_or_default().parse()?;
        ensure!(page_count == import_count, "page {page_count}, import {import_count}");

        client.find(css("[data-testid=export-perfetto]")).await?.click().await?;
        let trace = downloaded(&downloads(&profile), "nagle.perfetto.json").await?;
        let trace: serde_json::Value = serde_json::from_slice(&trace)?;
        ensure!(trace["traceEvents"].as_array().is_some_and(|events| !events.is_empty()));
        let status = text_of(&client, "export-status").await?;
        ensure!(status.contains("to nagle.perfetto.json"), "{status}");

        client.find(css("[data-testid=export-pcapng]")).await?.click().await?;
        let pcapng = downloaded(&downloads(&profile), "nagle.pcapng").await?;
        let read = ackscope_shared::pcap::read(&pcapng);
        ensure!(read.error.is_none(), "{:?}", read.error);
        ensure!(read.packets.len() == 13, "{} packets", read.packets.len());
        let comments =
            String::from_utf8_lossy(&pcapng).matches("stall: Nagle x delayed ACK").count();
        ensure!(comments as u32 == import_count, "{comments} stall comments");
        let status = text_of(&client, "export-status").await?;
        ensure!(status.contains("13 packets (2 with a stall's explanation)"), "{status}");
        screenshot(&client, "capture.png").await?;
        Ok(())
    }
    .await;
    client.close().await?;
    result
}

/// The page's summary of the selected run against the report the command line printed for it
/// (`RunReport`, the `--json` contract): the same numbers, as the page formats them.
async fn page_matches_report(
    client: &Client,
    report: &ackscope_shared::report::RunReport,
    what: &str,
) -> Result<()> {
    let rr = report.rr().with_context(|| format!("{what}: not a request/response report"))?;
    let two = |ms: Option<f64>| ms.map(|ms| format!("{ms:.2}")).unwrap_or_default();
    let expected = [
        ("summary-requests", rr.requests.to_string()),
        ("summary-p50-ms", two(rr.p50_ms)),
        ("summary-p99-ms", two(rr.p99_ms)),
        ("summary-max-ms", two(rr.max_ms)),
        ("summary-stalled-reads", rr.stalled_reads.unwrap_or_default().to_string()),
    ];
    for (testid, value) in expected {
        let shown = text_of(client, testid).await?;
        ensure!(
            shown == value,
            "{what}: the page shows {testid} {shown}, the command line {value}"
        );
    }
    let mut page_classes = Vec::new();
    for class in client.find_all(css("[data-testid=stall-class]")).await? {
        page_classes.push((
            class.attr("data-class").await?.unwrap_or_default(),
            class.attr("data-direction").await?.unwrap_or_default(),
            class.attr("data-count").await?.unwrap_or_default(),
        ));
    }
    let mut cli_classes: Vec<(String, String, String)> = report
        .stalls
        .iter()
        .flatten()
        .map(|c| (c.class.code().to_string(), c.direction.clone(), c.count.to_string()))
        .collect();
    page_classes.sort();
    cli_classes.sort();
    ensure!(
        page_classes == cli_classes,
        "{what}: page {page_classes:?}, command line {cli_classes:?}"
    );
    Ok(())
}

/// The page's "export JSON" of the selected run's session, downloaded into `downloads` as
/// `name`, against `cli`, the command line's `export --json` of the same session: one document
/// (`shared::export_json` writes both).
async fn page_export_matches(
    client: &Client,
    downloads: &std::path::Path,
    name: &str,
    cli: &serde_json::Value,
    what: &str,
) -> Result<()> {
    client.find(css("[data-testid=export-json]")).await?.click().await?;
    let bytes = downloaded(downloads, name).await?;
    let page: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{what}: the page's {name} is not one JSON document"))?;
    if let Some(difference) = first_difference(&page, cli, "") {
        bail!("{what}: the page's JSON export and export --json differ at {difference}");
    }
    let status = text_of(client, "export-status").await?;
    ensure!(status.contains(&format!("to {name}")), "{what}: the export's status says {status:?}");
    Ok(())
}

/// Where two JSON documents first differ (a path such as `.runs[0].summary.p50_ms`, with both
/// values), or `None` when they are equal.
fn first_difference(page: &serde_json::Value, cli: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match (page, cli) {
        (Value::Object(p), Value::Object(c)) => p.keys().chain(c.keys()).find_map(|key| {
            let at = format!("{at}.{key}");
            match (p.get(key), c.get(key)) {
                (Some(p), Some(c)) => first_difference(p, c, &at),
                (Some(_), None) => Some(format!("{at}: only in the page's")),
                _ => Some(format!("{at}: only in the command line's")),
            }
        }),
        (Value::Array(p), Value::Array(c)) if p.len() == c.len() => p
            .iter()
            .zip(c)
            .enumerate()
            .find_map(|(i, (p, c))| first_difference(p, c, &format!("{at}[{i}]"))),
        _ if page == cli => None,
        _ => {
            let short = |v: &Value| v.to_string().chars().take(200).collect::<String>();
            Some(format!("{at}: the page's {}, the command line's {}", short(page), short(cli)))
        }
    }
}

/// Opens `file` on the page and waits until its run's summary shows `requests` requests.
/// Opens `file` from the page's Runs card, as a user picks it.
async fn open_file(client: &Client, file: &std::path::Path) -> Result<()> {
    let input = client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(css("[data-testid=open-file]"))
        .await?;
    input.send_keys(&file.display().to_string()).await?;
    Ok(())
}

async fn open_and_wait(client: &Client, file: &std::path::Path, requests: u32) -> Result<()> {
    open_file(client, file).await?;
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let from = text_of(client, "summary-file").await.unwrap_or_default();
        let shown = text_of(client, "summary-requests").await.unwrap_or_default();
        if from.contains(&name) && shown == requests.to_string() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} did not open with {requests} requests within 60 s (shows {shown:?})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The same numbers everywhere: for a run recorded to a file, a server-only session (the
/// server's side of runs from another probe), a run against that remote server recorded by its
/// client, and a run started from the page itself, the page shows what the command line printed
/// when it ran (`run --json`) and what `export --json` says of the file, and its own JSON export
/// of each is `export --json`'s document: one reducer, one report, one export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_numbers_the_command_line_prints_for_each_source() -> Result<()> {
    use ackscope_shared::report::RunReport;
    let dir = ackscope_tests::scratch_dir()?;
    let bin = ackscope_tests::ackscope_bin()?;
    let report_of = |stdout: &[u8]| -> Result<RunReport> {
        let text = String::from_utf8_lossy(stdout);
        let line = text.lines().find(|l| l.starts_with('{')).context("no JSON report")?;
        Ok(serde_json::from_str(line)?)
    };
    let export_document = |file: &std::path::Path| -> Result<serde_json::Value> {
        let out =
            std::process::Command::new(&bin).arg("export").arg(file).arg("--json").output()?;
        ensure!(out.status.success(), "export --json failed");
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let summary_in = |export: &serde_json::Value| -> Result<RunReport> {
        Ok(serde_json::from_value(export["runs"][0]["summary"].clone())?)
    };
    let exported = |file: &std::path::Path| summary_in(&export_document(file)?);

    // A story-1 run recorded to a file.
    let recorded = dir.path().join("story1.ackscope");
    let out = std::process::Command::new(&bin)
        .args(["run", "story1", "--count", "20", "--json", "-o"])
        .arg(&recorded)
        .output()?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let live = report_of(&out.stdout)?;
    let from_file = exported(&recorded)?;
    ensure!(live.rr() == from_file.rr(), "run --json {live:?}, export --json {from_file:?}");
    ensure!(live.stalls == from_file.stalls, "the stalls, live and from the file");
    ensure!(live.stalls.as_ref().is_some_and(|s| !s.is_empty()), "story 1 stalls: {live:?}");

    // A server-only session: the server's side of runs another probe drives; and that run, as
    // its client recorded it (both sides, on the client's clock).
    let served = dir.path().join("served.ackscope");
    let remote = dir.path().join("remote.ackscope");
    let (server, addr, token) = start_server_recording(Some(&served))?;
    let out = std::process::Command::new(&bin)
        .args(["run", "rr", "--count", "20", "--remote", &addr, "--token", &token])
        .args(["--json", "-o"])
        .arg(&remote)
        .output()?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let remote_report = report_of(&out.stdout)?;
    ensure!(remote_report.remote.is_some(), "a remote run's report: {remote_report:?}");
    let remote_from_file = exported(&remote)?;
    ensure!(
        remote_report.rr() == remote_from_file.rr()
            && remote_report.stalls == remote_from_file.stalls,
        "run --json {remote_report:?}, export --json {remote_from_file:?}"
    );
    // Ctrl-C: the server ends its session and its file.
    let pid = server.0.id().to_string();
    std::process::Command::new("kill").args(["-INT", &pid]).status()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let server_report = loop {
        if let Ok(report) = exported(&served) {
            if report.outcome != ackscope_shared::report::ReportOutcome::Failed {
                break report;
            }
        }
        ensure!(Instant::now() < deadline, "the server's session did not end within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(server);

    let (_probe, url) = start_probe()?;
    let (_driver, client, profile) = start_browser().await?;
    let downloads = downloads(&profile);
    let result = async {
        // A run started from the page: its numbers are those of the command line's report of
        // the session the page saves, and its JSON export is that session's `export --json`.
        open_with_story_one(&client, &url, 20).await?;
        run_and_wait(&client, 20).await?;
        // Its end has arrived (the summary shows every request a little before): the session
        // the page saves and exports is whole.
        client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(css("[data-testid=run-entry][data-source=live] [data-status=done]"))
            .await
            .context("the page's run was never marked done")?;
        client.find(css("[data-testid=download]")).await?.click().await?;
        let saved = downloads.join("ackscope-session.ackscope");
        downloaded(&downloads, "ackscope-session.ackscope").await?;
        let saved_export = export_document(&saved)?;
        let page_run = summary_in(&saved_export)?;
        ensure!(page_run.rr().map(|rr| rr.requests) == Some(20), "{page_run:?}");
        page_matches_report(&client, &page_run, "a run started from the page").await?;
        let name = "ackscope-session.json";
        page_export_matches(&client, &downloads, name, &saved_export, "the page's run").await?;

        open_and_wait(&client, &recorded, 20).await?;
        page_matches_report(&client, &live, "a recorded run").await?;
        let recorded_export = export_document(&recorded)?;
        page_export_matches(&client, &downloads, "story1.json", &recorded_export, "a recorded run")
            .await?;
        element_screenshot(&client, "p.card.exports", "exports.png").await?;

        let served_requests = server_report.rr().map_or(0, |rr| rr.requests);
        ensure!(served_requests == 20, "the server saw {served_requests} requests");
        let server_stalls = server_report.stalls.as_ref().map_or(0, Vec::len);
        ensure!(server_stalls > 0, "Nagle stalls from the server's side: {server_report:?}");
        open_and_wait(&client, &served, served_requests).await?;
        page_matches_report(&client, &server_report, "a server-only session").await?;
        let served_export = export_document(&served)?;
        page_export_matches(&client, &downloads, "served.json", &served_export, "a server session")
            .await?;

        // The remote run as its client recorded it: the page shows what `run --json` printed.
        open_and_wait(&client, &remote, 20).await?;
        page_matches_report(&client, &remote_report, "a run against a remote server").await?;
        let remote_export = export_document(&remote)?;
        page_export_matches(&client, &downloads, "remote.json", &remote_export, "a remote run")
            .await
    }
    .await;
    client.close().await?;
    result
}

/// Starts `watch` (an `ackscope watch` command line), and once it says it watches, pair.py's
/// client for `requests` requests with each message in two writes; then Ctrl-C ends the watch
/// (within 10 s). What the watch said on standard error before it watched.
async fn watch_a_client(
    watch: &mut std::process::Command,
    port: &str,
    requests: u32,
) -> Result<Vec<String>> {
    use std::io::BufRead;
    let mut watch = watch
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting ackscope watch")?;
    let stderr = std::io::BufReader::new(watch.stderr.take().context("its stderr")?);
    let mut watch = ackscope_tests::Reaped(watch);
    // The watch says when it watches: the client starts after that.
    let mut said = Vec::new();
    let mut lines = stderr.lines();
    while !said.last().is_some_and(|line: &String| line.contains("watching port")) {
        said.push(lines.next().context("the watch ended before it watched")??);
    }
    // The rest of what it says is read (and dropped) to its end, so that it never writes to a
    // closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let requests = requests.to_string();
    let client_ran = pair_py(&["client", "--port", port, "--requests", &requests, "--split"])
        .output()
        .context("pair.py client")?;
    ensure!(client_ran.status.success(), "pair.py client failed");
    // Ctrl-C ends the watch and finishes its file.
    std::process::Command::new("kill")
        .args(["-INT", &watch.0.id().to_string()])
        .status()
        .context("kill -INT")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while watch.0.try_wait()?.is_none() {
        ensure!(Instant::now() < deadline, "the watch did not end within 10 s of Ctrl-C");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(said)
}

/// `pair.py server --split` (each answer in two writes, Nagle on): the running server, its pid
/// and its port.
fn split_pair_server() -> Result<(ackscope_tests::Reaped, u32, String)> {
    use std::io::BufRead;
    let mut server = pair_py(&["server", "--split"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting pair.py server (python3)")?;
    let pid = server.id();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().context("its stdout")?).read_line(&mut line)?;
    let server = ackscope_tests::Reaped(server);
    let port = line.trim().strip_prefix("port ").context("pair.py printed no port")?.to_string();
    Ok((server, pid, port))
}

/// Opens the page at `url` and watches `port` from its watch source, until run 1 shows running.
async fn watch_from_the_page(client: &Client, url: &str, port: &str) -> Result<()> {
    client.goto(url).await?;
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(css("[data-testid=watch-start]:not([disabled])"))
        .await
        .context("the watch source never became ready: the app did not mount or connect")?;
    type_into(client, "watch-port", port).await?;
    client.find(css("[data-testid=watch-start]")).await?.click().await?;
    client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(css("[data-testid=run-entry][data-run-id='1'] [data-status=running]"))
        .await
        .context("the watch was never shown running")?;
    Ok(())
}

/// Closes the browser; a failed test's page is kept first, as
/// `ackscope-e2e-NAME-failure.png` in the temporary folder, and said where.
async fn close_keeping_a_failure(client: Client, result: Result<()>, name: &str) -> Result<()> {
    if result.is_err() {
        if let Ok(png) = client.screenshot().await {
            let path = std::env::temp_dir().join(format!("ackscope-e2e-{name}-failure.png"));
            let _ = std::fs::write(&path, png);
            eprintln!("screenshot of the failure: {}", path.display());
        }
    }
    client.close().await?;
    result
}

/// Marks runs 1 and 2 for Compare; the "what changed" line it then shows.
async fn compare_runs_1_and_2(client: &Client) -> Result<String> {
    for id in ["1", "2"] {
        let toggle =
            format!("[data-testid=run-entry][data-run-id='{id}'] [data-testid=compare-toggle]");
        client.find(css(&toggle)).await?.click().await?;
    }
    Ok(client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(css("[data-testid=what-changed]"))
        .await
        .context("no what-changed line after marking both runs")?
        .text()
        .await?)
}

/// `python3 pair.py ARGS` (probe/tests/watched: a client and a server ackscope did not write).
fn pair_py(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new("python3");
    command.arg(ackscope_tests::repo_root().join("probe/tests/watched/pair.py")).args(args);
    command
}

/// The page watching live: a program ackscope did not start (pair.py's server, each message in
/// two writes with Nagle on) is watched from the watch source by its port; its client's waits
/// are named while it runs, and Stop ends the watch with the client's requests counted and the
/// Nagle x delayed ACK stalls of both directions listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (reading another program's packets): cargo xtask test runs it as root"]
async fn the_page_watches_another_programs_port_live_and_names_its_stalls() -> Result<()> {
    ackscope_tests::require_root("watching another program's packets");
    const REQUESTS: usize = 20;
    let (_server, _, port) = split_pair_server()?;

    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = async {
        watch_from_the_page(&client, &url, &port).await?;
        let status = text_of(&client, "watch-status").await?;
        ensure!(status.contains(&format!("port {port}")), "the watch card says {status:?}");
        element_screenshot(&client, "form.watch-source", "watch-source.png").await?;

        // The client runs while the page is looked at: its first stall is named before it ends.
        // Its 20 exchanges take at least 20 x 80 ms (two delayed ACKs each); the first stall is
        // known after the first exchange, and the probe hands events over every 50 ms.
        let mut pair_client = pair_py(&["client", "--port", &port])
            .args(["--requests", &REQUESTS.to_string(), "--split"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("starting pair.py client")?;
        let nagle = "[data-testid=stall-class][data-class=nagle_delayed_ack]";
        let seen_while_running = loop {
            // The class named, and its exchanges' rows drawn with the stalls in them.
            let shown =
                !client.find_all(css(nagle)).await?.is_empty() && stalled_marks(&client).await? > 0;
            // Still running after the page was read: it was shown while the client ran.
            let running = pair_client.try_wait()?.is_none();
            if !running || shown {
                break running && shown;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let measured = pair_client.wait_with_output()?;
        ensure!(measured.status.success(), "pair.py client failed");
        let measured: serde_json::Value = serde_json::from_slice(&measured.stdout)?;
        ensure!(measured["requests"] == REQUESTS, "the client made {measured}");
        ensure!(seen_while_running, "no Nagle stall or stalled row was shown while the client ran");

        // The client is done: Stop ends the watch, which counted each of its requests once.
        client.find(css("[data-testid=stop-run]")).await?.click().await?;
        client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(css("[data-testid=run-entry][data-run-id='1'] [data-status=interrupted]"))
            .await
            .context("Stop did not end the watch as interrupted")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let shown = text_of(&client, "summary-requests").await?;
            if shown == REQUESTS.to_string() {
                break;
            }
            ensure!(Instant::now() < deadline, "the page counts {shown} exchanges, not {REQUESTS}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Two delayed ACKs of ~40 ms in each exchange: far above loopback's microseconds.
        let p50 = number_of(&client, "summary-p50-ms").await?;
        ensure!(p50 > 60.0, "p50 {p50} ms with a Nagle stall each way");
        let mut directions = Vec::new();
        for class in client.find_all(css(nagle)).await? {
            directions.push(class.attr("data-direction").await?.unwrap_or_default());
        }
        directions.sort();
        ensure!(
            directions == ["client->server", "server->client"],
            "Nagle x delayed ACK listed for {directions:?}"
        );
        // As root the kernel's delayed-ACK timer is seen sending the held ACKs: about two an
        // exchange, once the connection left its first quick ACKs; and the reading programs'
        // recv() sleeping until the held bytes came, as many.
        let timer = text_of(&client, "watch-kernel-timer").await?;
        let counts: Vec<usize> =
            timer.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect();
        ensure!(
            timer.contains("delayed-ACK timer sent")
                && timer.contains("recv() slept until the held bytes came")
                && counts.len() == 5
                && counts[0] >= REQUESTS
                && counts[1] >= REQUESTS / 2
                && counts[3] >= REQUESTS
                && counts[4] >= REQUESTS / 2,
            "the page says of the kernel's timer and the programs' calls: {timer:?}"
        );
        // Each exchange is a row, its held reads red: as root, the reads of the programs seen
        // sleeping until the held bytes came; about two an exchange.
        ensure!(
            client.find_all(css("[data-testid=no-timeline]")).await?.is_empty(),
            "a watch that reads packets has a timeline"
        );
        let stalled = stalled_marks(&client).await?;
        ensure!(stalled >= REQUESTS, "{stalled} stalls drawn in the watch's rows");
        ensure!(
            text_of(&client, "row-range").await?.contains(&REQUESTS.to_string()),
            "a row per exchange: {}",
            text_of(&client, "row-range").await?
        );
        element_screenshot(&client, "section.timeline", "watch-rows.png").await?;
        // The top of the page: the summary of the watch beside the run form.
        client.execute("window.scrollTo(0, 0)", vec![]).await?;
        screenshot(&client, "watch.png").await
    }
    .await;
    close_keeping_a_failure(client, result, "watch").await
}

/// The stalls the timeline's plot draws now (0 while it has none, or no plot).
async fn stalled_marks(client: &Client) -> Result<usize> {
    let Some(plot) = client.find_all(css("[data-testid=plot]")).await?.into_iter().next() else {
        return Ok(0);
    };
    Ok(plot.attr("data-stalled-marks").await?.unwrap_or_default().parse().unwrap_or(0))
}

/// `watch --try --try-after` on a program ackscope did not start splits its file into the run
/// before the option (1.5 s of it as it is) and the run with it; the page opens the file,
/// compares the two runs and names the change made on the running program, with its process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (pidfd_getfd on another program's socket): cargo xtask test runs it as root"]
async fn a_watch_that_tried_an_option_is_compared_before_and_after_on_the_page() -> Result<()> {
    ackscope_tests::require_root("changing another program's socket");
    let (_server, server_pid, port) = split_pair_server()?;

    let dir = ackscope_tests::scratch_dir()?;
    let file = dir.path().join("tried.ackscope");
    let mut watch = std::process::Command::new(ackscope_tests::ackscope_bin()?);
    watch.args(["watch", "--port", &port, "--try", "nodelay=server", "--try-after", "1500ms"]);
    // About 88 ms a request before the change (two delayed ACKs), 44 after (the client's):
    // 40 requests outlast the 1.5 s the programs are watched as they are.
    watch_a_client(watch.arg("-o").arg(&file), &port, 40).await?;

    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = async {
        client.goto(&url).await?;
        open_file(&client, &file).await?;
        for id in ["1", "2"] {
            let toggle =
                format!("[data-testid=run-entry][data-run-id='{id}'] [data-testid=compare-toggle]");
            client
                .wait()
                .at_most(Duration::from_secs(30))
                .for_element(css(&toggle))
                .await
                .with_context(|| format!("run {id} of the file has no compare toggle"))?
                .click()
                .await?;
        }
        let changed = client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(css("[data-testid=what-changed]"))
            .await
            .context("no what-changed line after marking both runs")?
            .text()
            .await?;
        let expected = format!(
            "TCP_NODELAY on the server: off -> on (applied to the running process {server_pid}, \
             python3)"
        );
        ensure!(changed.contains(&expected), "the page names {changed:?}, not {expected:?}");
        // The waits by class are the watch's, found from its packets: both directions' before
        // the change, the client's alone after it (its socket kept Nagle), one a request.
        let mut counts = Vec::new();
        for run in ["1", "2"] {
            let cell = format!(
                "[data-testid=compare-classes] tr[data-class=nagle_delayed_ack] \
                 td[data-run-id='{run}']"
            );
            let count = client.find(css(&cell)).await?.attr("data-count").await?;
            counts.push(count.unwrap_or_default().parse::<u32>().unwrap_or(0));
        }
        let (before, after) = (counts[0], counts[1]);
        ensure!(before >= 10, "{before} Nagle x delayed ACK waits shown before the change");
        ensure!(after >= 10, "{after} Nagle x delayed ACK waits shown after the change");
        screenshot(&client, "watch-tried.png").await
    }
    .await;
    client.close().await?;
    result
}

/// A watch without privileges (run as the user nobody: no packets) bounds the exchanges of
/// a program ackscope did not start from its sockets' counters; the page shows, for the
/// watch's file, the line `ackscope show` prints for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (running the watch as the user nobody): cargo xtask test runs it as root"]
async fn an_unprivileged_watchs_estimate_reads_on_the_page_as_show_prints_it() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    ackscope_tests::require_root("running the watch as the user nobody");
    let (_server, _pid, port) = split_pair_server()?;

    // The user nobody runs a copy of the binary from a folder it may write the file in.
    let dir = ackscope_tests::scratch_dir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
    let binary = dir.path().join("ackscope");
    std::fs::copy(ackscope_tests::ackscope_bin()?, &binary)?;
    let file = dir.path().join("unprivileged.ackscope");
    let mut watch = std::process::Command::new("setpriv");
    watch.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(&binary);
    watch.args(["watch", "--port", &port, "-o"]).arg(&file);
    let said = watch_a_client(&mut watch, &port, 10).await?;
    ensure!(said.join("\n").contains("TCP_INFO only"), "not unprivileged: {said:?}");
    let shown = std::process::Command::new(ackscope_tests::ackscope_bin()?)
        .arg("show")
        .arg(&file)
        .output()
        .context("ackscope show")?;
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    let line = shown
        .lines()
        .find_map(|line| line.trim().strip_prefix("exchanges"))
        .map(str::trim)
        .with_context(|| format!("show printed no exchanges line:\n{shown}"))?;
    ensure!(line.starts_with("at most "), "show's exchanges line is not an estimate: {line}");

    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = async {
        client.goto(&url).await?;
        open_file(&client, &file).await?;
        let estimate = client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css("[data-testid=watch-estimate]"))
            .await
            .context("the page shows no estimate for the watch's file")?
            .text()
            .await?;
        ensure!(estimate.trim() == format!("exchanges: {line}"), "the page says {estimate:?}");
        element_screenshot(&client, "section.summary", "watch-estimate.png").await
    }
    .await;
    close_keeping_a_failure(client, result, "watch-estimate").await
}

/// The page tries a stall's fix on a program ackscope did not start, live: while its watch
/// runs, the Nagle x delayed ACK stall of the server's answers offers "try TCP_NODELAY on the
/// server's sockets"; pressing it changes the running server's socket, the watch goes on in a
/// second run with the option, where the server's answers no longer stall and the client's
/// requests still do, and comparing the two runs names the change and the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (pidfd_getfd on another program's socket): cargo xtask test runs it as root"]
async fn the_page_tries_a_stalls_fix_on_the_watched_program_live() -> Result<()> {
    ackscope_tests::require_root("changing another program's socket");
    let (_server, server_pid, port) = split_pair_server()?;

    let (_probe, url) = start_probe()?;
    let (_driver, client, _profile) = start_browser().await?;
    let result = async {
        watch_from_the_page(&client, &url, &port).await?;
        // About 88 ms a request before the fix (a delayed ACK each way), 44 ms after: 80
        // requests last several seconds, most of them after the press.
        let pair_client = pair_py(&["client", "--port", &port, "--requests", "80", "--split"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("starting pair.py client")?;
        let button = "[data-testid=stall-class][data-direction='server->client'] \
                      button[data-testid=try-fix][data-side=server]";
        let button = client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(css(button))
            .await
            .context("no button to try TCP_NODELAY on the server while its answers stalled")?;
        let words = button.text().await?;
        ensure!(words == "try TCP_NODELAY on the server's sockets", "the button reads {words:?}");
        // The page as the user sees it then: the watch's summary with its buttons, in view.
        client
            .execute("document.querySelector('section.summary').scrollIntoView()", vec![])
            .await?;
        screenshot(&client, "watch-try-button.png").await?;
        button.click().await?;
        // The run splits where the option went into force: run 2 is the server with it.
        client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(css("[data-testid=run-entry][data-run-id='2'] [data-status=running]"))
            .await
            .context("the watch did not go on in a second run once the option was tried")?;
        ensure!(
            !client
                .find_all(css("[data-testid=run-entry][data-run-id='1'] [data-status=done]"))
                .await?
                .is_empty(),
            "run 1, the server as it was, is not shown as done"
        );
        let measured = pair_client.wait_with_output()?;
        ensure!(measured.status.success(), "pair.py client failed");
        client.find(css("[data-testid=stop-run]")).await?.click().await?;
        client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(css("[data-testid=run-entry][data-run-id='2'] [data-status=interrupted]"))
            .await
            .context("Stop did not end the watch's second run")?;

        let changed = compare_runs_1_and_2(&client).await?;
        let expected = format!(
            "TCP_NODELAY on the server: off -> on (applied to the running process {server_pid}, \
             python3)"
        );
        ensure!(changed.contains(&expected), "the page names {changed:?}, not {expected:?}");
        // The stalls of each run by direction: the server's answers stalled before the press
        // and not after it (the exchange the change fell in aside); the client's requests,
        // whose socket kept Nagle, both times.
        let mut counts = std::collections::HashMap::new();
        for run in ["1", "2"] {
            let entry = format!("[data-testid=run-entry][data-run-id='{run}'] .run-spec");
            client.find(css(&entry)).await?.click().await?;
            let deadline = Instant::now() + Duration::from_secs(10);
            while !client
                .find(css("section.summary h2"))
                .await?
                .text()
                .await?
                .contains(&format!("Run #{run}"))
            {
                ensure!(Instant::now() < deadline, "run {run} was not shown when selected");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let nagle = "[data-testid=stall-class][data-class=nagle_delayed_ack]";
            for line in client.find_all(css(nagle)).await? {
                let direction = line.attr("data-direction").await?.unwrap_or_default();
                let count = line.attr("data-count").await?.unwrap_or_default();
                counts.insert((direction, run), count.parse::<u32>().unwrap_or(0));
            }
        }
        let count = |direction: &str, run| counts.get(&(direction.to_string(), run)).copied();
        ensure!(count("server->client", "1") >= Some(1), "the answers' stalls before: {counts:?}");
        ensure!(
            count("server->client", "2").unwrap_or(0) <= 1,
            "the answers' stalls after: {counts:?}"
        );
        ensure!(count("client->server", "2") >= Some(20), "the requests' stalls after: {counts:?}");
        screenshot(&client, "watch-try.png").await
    }
    .await;
    close_keeping_a_failure(client, result, "watch-try").await
}
