//! Story 2 through the emulated link: throughput is at most window / RTT. Each row of the sweep
//! must come within 10% of the formula while the window, not the link, is what limits it.

mod common;

use common::ackscope;

#[test]
fn goodput_follows_window_over_rtt() {
    let output = ackscope(&[
        "run",
        "bulk",
        "--link",
        "rtt=40ms,rate=100mbit",
        "--duration",
        "3s",
        "--sweep-rcvbuf",
        "16k,64k,1m",
        "--json",
    ]);
    assert!(output.status.success());
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in &rows[..2] {
        assert_eq!(row["window_limited"], true, "{row}");
        // Linux doubles SO_RCVBUF and advertises part of it: the window is what TCP_INFO says.
        assert_eq!(row["getsockopt_bytes"], row["asked_bytes"].as_u64().unwrap() * 2, "{row}");
        let ratio = row["ratio"].as_f64().unwrap();
        assert!((0.9..=1.05).contains(&ratio), "within 10% of window/RTT: {row}");
    }
    let wide = &rows[2];
    assert_eq!(wide["window_limited"], false, "1 MiB at 40 ms allows more than the link: {wide}");
    let goodput = wide["goodput_mbps"].as_f64().unwrap();
    assert!((70.0..=101.0).contains(&goodput), "the link's 100 Mbit/s limits: {wide}");
}
