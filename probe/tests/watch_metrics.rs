//! `ackscope watch --metrics ADDR`: the watch's counts at `/metrics`, scraped over HTTP and read
//! with Prometheus's own parser (the prometheus_client Python package, `watched/scrape.py`),
//! while a pair of programs ackscope did not write (Python's standard library,
//! `watched/pair.py`) stalls on Nagle and delayed ACKs.
//!
//! Reading another program's packets takes CAP_NET_RAW: the test of the stalls is marked
//! ignored, by name, and `cargo xtask test` runs it as root (as CI does). The server's rules
//! (the format, the headers, the token off loopback) need no privilege: a watch without
//! packets serves its metrics all the same.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ackscope_shared::report::RunReport;
use common::require_root;

use common::Reaped;

/// A Python 3 that has Prometheus's client: `python3` on the PATH, or Debian's, whose package
/// python3-prometheus-client `cargo xtask setup` installs.
fn python() -> &'static str {
    static FOUND: OnceLock<&'static str> = OnceLock::new();
    FOUND.get_or_init(|| {
        ["python3", "/usr/bin/python3"]
            .into_iter()
            .find(|python| {
                let import = Command::new(python).args(["-c", "import prometheus_client"]).output();
                import.is_ok_and(|out| out.status.success())
            })
            .expect(
                "no python3 with the prometheus_client package, Prometheus's parser: install \
                 Debian's python3-prometheus-client (cargo xtask setup does)",
            )
    })
}

fn watched(program: &str) -> String {
    format!("{}/tests/watched/{program}", env!("CARGO_MANIFEST_DIR"))
}

/// What one scrape got, as Prometheus's parser read it.
#[derive(Debug, serde::Deserialize)]
struct Scrape {
    status: u16,
    headers: HashMap<String, String>,
    #[serde(default)]
    types: HashMap<String, String>,
    #[serde(default)]
    samples: Vec<(String, HashMap<String, String>, f64)>,
    #[serde(default)]
    body: String,
}

impl Scrape {
    /// The value of the sample `name` whose labels include `labels`; None if there is none.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matches = |have: &HashMap<String, String>| {
            labels.iter().all(|(key, value)| have.get(*key).is_some_and(|v| v == value))
        };
        self.samples.iter().find(|(n, l, _)| n == name && matches(l)).map(|(_, _, v)| *v)
    }

    fn nagle_stalls(&self, port: u16, direction: &str) -> f64 {
        let port = port.to_string();
        let labels = [("class", "nagle_delayed_ack"), ("direction", direction), ("port", &port)];
        self.value("ackscope_watch_stalls_total", &labels)
            .unwrap_or_else(|| panic!("no stall counter {direction} on port {port}: {self:?}"))
    }

    fn nagle_seconds(&self, port: u16, direction: &str) -> f64 {
        let port = port.to_string();
        let labels = [("class", "nagle_delayed_ack"), ("direction", direction), ("port", &port)];
        self.value("ackscope_watch_stall_seconds_total", &labels).expect("a stall-time counter")
    }

    fn exchanges(&self, port: u16) -> f64 {
        let port = port.to_string();
        self.value("ackscope_watch_exchange_seconds_count", &[("port", &port)])
            .expect("the exchange-latency histogram's count")
    }

    /// Every answer carries the security headers the UI's answers carry.
    fn assert_security_headers(&self) {
        for (name, value) in [
            ("x-content-type-options", "nosniff"),
            ("x-frame-options", "SAMEORIGIN"),
            ("referrer-policy", "no-referrer"),
        ] {
            assert_eq!(self.headers.get(name).map(String::as_str), Some(value), "{self:?}");
        }
        assert!(self.headers.contains_key("content-security-policy"), "{self:?}");
    }
}

/// Scrapes `url` with `scrape.py` (`--token T`, `--host H` in `args`).
fn scrape(url: &str, args: &[&str]) -> Scrape {
    let out = Command::new(python()).arg(watched("scrape.py")).arg(url).args(args).output();
    let out = out.expect("python3 runs");
    assert!(out.status.success(), "scrape.py {url}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("scrape.py printed no scrape ({e}): {}", String::from_utf8_lossy(&out.stdout))
    })
}

/// A running `ackscope watch ARGS`, once it said it watches, with what it said before.
struct Watch {
    child: Reaped,
    said: Vec<String>,
}

impl Watch {
    fn start(args: &[&str]) -> Watch {
        let ackscope = Command::new(env!("CARGO_BIN_EXE_ackscope"));
        let (child, said) = common::start_watch(ackscope, args);
        Watch { child: Reaped(child), said }
    }

    /// The metrics' URL, as the watch said it: "ackscope: metrics at http://ADDR/metrics".
    fn metrics_url(&self) -> String {
        let line = self.said.iter().find_map(|l| l.strip_prefix("ackscope: metrics at "));
        line.unwrap_or_else(|| panic!("no metrics address said: {:?}", self.said)).to_string()
    }

    /// Ctrl-C, then what it printed on standard output.
    fn stop(mut self) -> String {
        common::stop_watch(&mut self.child.0)
    }
}

/// A port nothing listens on (the kernel gave it out and took it back).
fn quiet_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port().to_string()
}

#[test]
fn on_loopback_metrics_are_prometheus_text_with_the_uis_security_headers() {
    let port = quiet_port();
    let watch = Watch::start(&["--port", &port, "--metrics", "127.0.0.1:0"]);
    let url = watch.metrics_url();
    let metrics = scrape(&url, &[]);
    assert_eq!(metrics.status, 200, "{metrics:?}");
    assert_eq!(
        metrics.headers.get("content-type").map(String::as_str),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    metrics.assert_security_headers();
    for (family, kind) in [
        ("ackscope_watch_stalls", "counter"),
        ("ackscope_watch_stall_seconds", "counter"),
        ("ackscope_watch_exchange_seconds", "histogram"),
        ("ackscope_watch_payload_bytes", "counter"),
        ("ackscope_watch_packets_dropped", "counter"),
        ("ackscope_watch_timer_records_lost", "counter"),
    ] {
        assert_eq!(metrics.types.get(family).map(String::as_str), Some(kind), "{metrics:?}");
    }
    // Each class each way is there from the start, at zero: an alert on its increase sees the
    // first stall.
    for direction in ["client->server", "server->client"] {
        assert_eq!(metrics.nagle_stalls(port.parse().unwrap(), direction), 0.0);
    }

    // Any other path, and a page that reached 127.0.0.1 by another name: refused, with the
    // headers too.
    let other = scrape(&url.replace("/metrics", "/"), &[]);
    assert_eq!(other.status, 404, "{other:?}");
    other.assert_security_headers();
    let rebound = scrape(&url, &["--host", "attacker.example"]);
    assert_eq!(rebound.status, 421, "{rebound:?}");
    rebound.assert_security_headers();
    watch.stop();
}

#[test]
fn off_loopback_every_scrape_needs_the_token() {
    let port = quiet_port();
    let watch = Watch::start(&["--port", &port, "--metrics", "0.0.0.0:0"]);
    let url = watch.metrics_url().replace("0.0.0.0", "127.0.0.1");
    let said = watch.said.join("\n");
    let token = said
        .split_whitespace()
        .skip_while(|word| *word != "token")
        .nth(1)
        .and_then(|token| token.strip_suffix(':'))
        .unwrap_or_else(|| panic!("a fresh token said: {said}"));
    let refused = scrape(&url, &[]);
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(refused.headers.get("www-authenticate").is_some_and(|v| v.starts_with("Bearer")));
    assert!(refused.body.contains("Authorization: Bearer"), "says what to send: {refused:?}");
    refused.assert_security_headers();
    let wrong = scrape(&url, &["--token", &"x".repeat(token.len())]);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let scraped = scrape(&url, &["--token", token]);
    assert_eq!(scraped.status, 200, "{scraped:?}");
    scraped.assert_security_headers();
    watch.stop();

    // A token given is used, and not printed.
    let given = "a-token-of-twenty-chars";
    let watch =
        Watch::start(&["--port", &port, "--metrics", "0.0.0.0:0", "--metrics-token", given]);
    assert!(!watch.said.join("\n").contains(given), "{:?}", watch.said);
    let url = watch.metrics_url().replace("0.0.0.0", "127.0.0.1");
    assert_eq!(scrape(&url, &["--token", given]).status, 200);
    assert_eq!(scrape(&url, &[]).status, 401);
    watch.stop();
}

#[test]
fn a_token_too_short_or_an_address_that_is_none_is_refused_with_what_to_give() {
    let short = common::ackscope(&[
        "watch",
        "--port",
        "9",
        "--metrics",
        "0.0.0.0:0",
        "--metrics-token",
        "short",
    ]);
    assert_eq!(short.status.code(), Some(2));
    let said = common::text(&short.stderr);
    assert!(said.contains("--metrics-token") && said.contains("16 to 128"), "{said}");
    let nowhere = common::ackscope(&["watch", "--port", "9", "--metrics", "localhost"]);
    assert_eq!(nowhere.status.code(), Some(2));
    let said = common::text(&nowhere.stderr);
    assert!(said.contains("127.0.0.1:9464"), "names the forms it takes: {said}");
    let alone = common::ackscope(&["watch", "--port", "9", "--metrics-token", "0123456789abcdef"]);
    assert_eq!(alone.status.code(), Some(2), "a token needs --metrics");
}

/// What a client of `pair.py` measured of its own requests.
#[derive(Debug, serde::Deserialize)]
struct Measured {
    requests: u32,
}

const REQUESTS: u32 = 20;

/// The pair writes each message as its length then its body with Nagle on, both ways: once a
/// connection leaves its first quick ACKs, every message waits for the peer's 40 ms delayed
/// ACK. Scraped as Prometheus scrapes, the stall counter of each direction grows with the
/// requests, by the count the watch's own summary gives at the end, and the exchanges are
/// counted and timed.
#[test]
#[ignore = "needs root (reading another program's packets): cargo xtask test runs it as root"]
fn the_nagle_stall_counter_grows_as_a_standard_library_pair_stalls() {
    require_root("watching another program's packets");
    let (_server, port) = common::start_pair_server("server", &["--split"]);
    let port_text = port.to_string();
    let watch = Watch::start(&["--port", &port_text, "--json", "--metrics", "127.0.0.1:0"]);
    let url = watch.metrics_url();

    let before = scrape(&url, &[]);
    let ways = ["client->server", "server->client"];
    for direction in ways {
        assert_eq!(before.nagle_stalls(port, direction), 0.0, "before any request");
    }
    let mut requests = 0;
    let mut last = before;
    for round in 1..=2 {
        let client = Command::new("python3")
            .arg(watched("pair.py"))
            .args(["client", "--port", &port_text, "--requests", &REQUESTS.to_string()])
            .arg("--split")
            .output()
            .unwrap();
        assert!(client.status.success(), "{}", String::from_utf8_lossy(&client.stderr));
        let measured: Measured = serde_json::from_slice(&client.stdout).unwrap();
        requests += measured.requests;
        // The watch hands its events over every 50 ms, and the client's connection closes
        // with its last exchange: within seconds every exchange is counted.
        let deadline = Instant::now() + Duration::from_secs(30);
        let scraped = loop {
            let scraped = scrape(&url, &[]);
            if scraped.exchanges(port) == f64::from(requests) {
                break scraped;
            }
            assert!(Instant::now() < deadline, "round {round}: {requests} exchanges: {scraped:?}");
            std::thread::sleep(Duration::from_millis(100));
        };
        for direction in ways {
            // The first exchanges of a connection are acknowledged at once (quick ACKs); most
            // of the rest wait for the timer.
            let grew = scraped.nagle_stalls(port, direction) - last.nagle_stalls(port, direction);
            assert!(grew >= f64::from(REQUESTS / 2), "round {round}, {direction}: +{grew}");
            let seconds =
                scraped.nagle_seconds(port, direction) - last.nagle_seconds(port, direction);
            assert!(
                (0.030 * grew..0.300 * grew).contains(&seconds),
                "round {round}, {direction}: {grew} stalls of {seconds} s in all"
            );
        }
        last = scraped;
    }
    // Each request waited two timers: no exchange took less than 40 ms.
    let quick = last.value("ackscope_watch_exchange_seconds_bucket", &[("le", "0.035")]);
    let quick = quick.expect("the bucket below the timer");
    assert!(quick <= f64::from(requests) / 4.0, "{quick} of {requests} exchanges under 35 ms");
    let bytes = |direction| {
        last.value("ackscope_watch_payload_bytes_total", &[("direction", direction)]).unwrap()
    };
    assert!(bytes("client->server") >= f64::from(requests) * 104.0, "{last:?}");
    assert!(bytes("server->client") >= f64::from(requests) * 104.0, "{last:?}");
    let connections = last.value("ackscope_watch_connections_total", &[("port", &port_text)]);
    assert_eq!(connections, Some(2.0), "one connection a round");

    // The watch's own summary counts the same stalls, by the same rule.
    let report: RunReport = common::report_line(&watch.stop());
    for direction in ways {
        let summary = report
            .stalls
            .iter()
            .flatten()
            .find(|s| s.class.code() == "nagle_delayed_ack" && s.direction == direction)
            .map_or(0, |s| s.count);
        assert_eq!(last.nagle_stalls(port, direction), f64::from(summary), "{direction}");
    }
}
