//! `--link`: runs over the emulated link (two network namespaces and a relay), as root and as
//! an unprivileged user through a user namespace; nothing may be left behind.

use std::process::Command;
use std::sync::Mutex;

use ackscope_shared::bulk::BulkSummary;
use ackscope_shared::report::{ReportOutcome, RunReport};

mod common;

use common::ackscope;

/// The tests count namespaces and devices around their runs: one run at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run_json(args: &[&str]) -> RunReport {
    let output = ackscope(args);
    assert!(output.status.success(), "ackscope {args:?} failed");
    let v = common::report_of(&output);
    assert_eq!(v.outcome, ReportOutcome::Completed);
    v
}

/// A request/response run's p50, in ms.
fn p50_ms(v: &RunReport) -> f64 {
    v.rr().and_then(|rr| rr.p50_ms).unwrap_or_else(|| panic!("p50_ms is a number in {v:?}"))
}

/// A bulk run's figures.
fn bulk(v: &RunReport) -> &BulkSummary {
    v.bulk().unwrap_or_else(|| panic!("not a bulk report: {v:?}"))
}

/// A figure of a bulk run that is there only if sampled.
fn sampled(v: &RunReport, field: &str, figure: Option<u32>) -> f64 {
    f64::from(figure.unwrap_or_else(|| panic!("{field} is a number in {v:?}")))
}

/// What a run could leave behind: named namespaces and TUN devices, in the host's namespace.
fn leftovers() -> (String, String) {
    let out = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    (out(&["netns", "list"]), out(&["-o", "link", "show", "type", "tun"]))
}

#[test]
fn rr_over_a_40ms_link_takes_one_round_trip_per_exchange() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let before = leftovers();
    let v = run_json(&[
        "run",
        "rr",
        "--link",
        "rtt=40ms",
        "--count",
        "5",
        "--nodelay",
        "both",
        "--json",
    ]);
    let p50 = p50_ms(&v);
    assert!((38.0..60.0).contains(&p50), "one 40 ms RTT per exchange, got p50 {p50} ms");
    assert_eq!(v.config["link"]["rtt_us"], 40_000);
    assert_eq!(leftovers(), before, "no namespace or TUN device is left behind");
}

#[test]
fn bulk_goodput_is_the_window_over_the_rtt() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let before = leftovers();
    let v = run_json(&[
        "run",
        "bulk",
        "--link",
        "rtt=40ms,rate=100mbit",
        "--duration",
        "3s",
        "--server-rcvbuf",
        "65536",
        "--json",
    ]);
    let window = sampled(&v, "server_rcv_wnd_bytes", bulk(&v).server_rcv_wnd_bytes);
    let rtt_s = sampled(&v, "min_rtt_us", bulk(&v).min_rtt_us) / 1e6;
    assert!((0.038..0.050).contains(&rtt_s), "the link's RTT, got {rtt_s} s");
    let expected_mbps = window * 8.0 / rtt_s / 1e6;
    let goodput = bulk(&v).goodput_mbps;
    assert!(
        (goodput - expected_mbps).abs() <= 0.25 * expected_mbps,
        "goodput {goodput} Mbit/s vs window/RTT {expected_mbps} Mbit/s"
    );
    assert!(goodput < 50.0, "the window, not the 100 Mbit/s link, limits it: {goodput}");
    assert_eq!(leftovers(), before, "no namespace or TUN device is left behind");
}

/// As an unprivileged user, the run enters a user namespace of its own. This machine allows
/// unprivileged user namespaces, so the run works; where the kernel refuses them the run stops
/// before starting with one message naming the sysctl that allows them.
#[test]
#[ignore = "needs root (switching to an unprivileged uid): cargo xtask test runs it as root"]
fn an_unprivileged_user_runs_over_the_link_in_a_user_namespace() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    common::require_root("switching to an unprivileged uid");
    let before = leftovers();
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_ackscope"))
        .args(["run", "rr", "--link", "rtt=20ms", "--count", "3", "--nodelay", "both", "--json"])
        .current_dir("/")
        .output()
        .expect("setpriv runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}{stderr}");
    if userns_allowed() {
        assert!(output.status.success(), "the user-namespace path works here");
        let v: RunReport = serde_json::from_str(&stdout).expect("one JSON object");
        let p50 = p50_ms(&v);
        assert!((18.0..40.0).contains(&p50), "one 20 ms RTT per exchange, got {p50}");
    } else {
        assert_eq!(output.status.code(), Some(1));
        assert!(stdout.is_empty(), "the run did not start");
        assert_eq!(stderr.lines().count(), 1, "one message: {stderr}");
        assert!(
            stderr.contains("--link needs root or a user namespace") && stderr.contains("sysctl")
        );
    }
    assert_eq!(leftovers(), before, "no namespace or TUN device is left behind");
}

fn userns_allowed() -> bool {
    let read =
        |path: &str| std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<i64>().ok());
    read("/proc/sys/user/max_user_namespaces") != Some(0)
        && read("/proc/sys/kernel/unprivileged_userns_clone") != Some(0)
        && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") != Some(1)
}

#[test]
fn a_bad_link_spec_exits_2_and_names_the_flag() {
    let output = ackscope(&["run", "rr", "--link", "rate=100mbit", "--json"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--link") && stderr.contains("rtt=40ms"), "{stderr}");
}

/// Story 3's split write over a 40 ms, MTU 1500 link (Nagle on): a 1000-byte body waits for
/// delayed ACKs, a full 1448-byte segment goes at once, a 2048-byte body's tail costs an RTT.
#[test]
fn story3_split_writes_stall_by_body_size() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let p50 = |preset: &str| p50_ms(&run_json(&["run", preset, "--json"]));
    let (small, full, larger) =
        (p50("story3-split-1000"), p50("story3-split-1448"), p50("story3-split-2048"));
    assert!((150.0..260.0).contains(&small), "1000 B: ~208 ms, got {small}");
    assert!((38.0..60.0).contains(&full), "1448 B: one RTT, got {full}");
    assert!((90.0..160.0).contains(&larger), "2048 B: ~123 ms, got {larger}");
}

/// The largest IP packet the relay handed on in each direction's `Link` events of a bulk run
/// over `link`, and how many packets it delivered.
fn largest_link_packet(link: &str) -> (u32, usize) {
    let file = common::temp("link-gso", &format!("{}.ackscope", link.replace([',', '='], "-")));
    let file = common::s(&file).to_owned();
    let args = ["run", "bulk", "--link", link, "--duration", "1s", "-o", &file, "--json"];
    run_json(&args);
    let events = common::exported_events(&file);
    let _ = std::fs::remove_file(&file);
    let delivered: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.kind {
            ackscope_shared::EventKind::Link(link)
                if link.action == ackscope_shared::LinkAction::Delivered =>
            {
                Some(link.bytes)
            }
            _ => None,
        })
        .collect();
    (delivered.iter().copied().max().unwrap_or(0), delivered.len())
}

/// A link that only delays passes the kernel's GSO packets whole (docs/LINK.md): bulk data
/// crosses it in packets far over the 1500-byte MTU. With a rate the serializer times each
/// packet on the wire, so no packet is over the MTU.
#[test]
fn a_delay_only_link_passes_whole_gso_packets_and_a_rate_limited_one_mtu_packets() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (largest, delivered) = largest_link_packet("rtt=2ms");
    assert!(delivered > 100, "a second of bulk data delivered only {delivered} packets");
    assert!(largest > 1500, "no packet over the MTU on a delay-only link: largest {largest} B");
    let (largest, delivered) = largest_link_packet("rtt=2ms,rate=200mbit");
    assert!(delivered > 100, "a second of bulk data delivered only {delivered} packets");
    assert!(largest <= 1500, "a rate-limited link passed a {largest}-byte packet over its MTU");
}
