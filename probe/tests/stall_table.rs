//! The loopback stall table of the stories (p50 per request, 2048-byte bodies, length then body
//! as two writes), reproduced by the real binary, one preset per row, and classified as the
//! table says. Margins are physical: a stalled row waits for the delayed-ACK timer (>= 40 ms)
//! on every request after the first; a clean row is a loopback exchange (well under 1 ms).

use std::process::Command;

use ackscope_shared::attribution::StallClass;
use ackscope_shared::presets::PRESETS;
use ackscope_shared::report::RunReport;

fn run_preset(name: &str) -> RunReport {
    let output = Command::new(env!("CARGO_BIN_EXE_ackscope"))
        .args(["run", name, "--count", "12", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The report's p50, in ms.
fn p50_ms(v: &RunReport) -> f64 {
    v.rr().and_then(|rr| rr.p50_ms).unwrap_or_else(|| panic!("no p50_ms in {v:?}"))
}

/// The report's stalls per class and direction.
fn classes(v: &RunReport) -> &[ackscope_shared::attribution::ClassSummary] {
    v.stalls.as_deref().unwrap_or_else(|| panic!("no stalls in {v:?}"))
}

#[test]
fn every_row_of_the_stall_table() {
    let rows: Vec<_> = PRESETS.iter().filter(|p| p.name.starts_with("story1")).collect();
    assert!(rows.len() >= 12, "every loopback row has a preset");
    std::thread::scope(|scope| {
        // Two rows at a time: a stall row mostly sleeps, so they do not disturb each other.
        for pair in rows.chunks(2) {
            let handles: Vec<_> = pair
                .iter()
                .map(|preset| scope.spawn(move || (preset, run_preset(preset.name))))
                .collect();
            for handle in handles {
                let (preset, v) = handle.join().unwrap();
                check_row(preset.name, preset.stalls == Some(true), &v);
            }
        }
    });
}

fn check_row(name: &str, stalls: bool, v: &RunReport) {
    let p50 = p50_ms(v);
    let nagle: u64 = classes(v)
        .iter()
        .filter(|s| s.class == StallClass::NagleDelayedAck)
        .map(|s| u64::from(s.count))
        .sum();
    if stalls {
        assert!(p50 > 30.0, "{name}: a stall row, p50 {p50} ms: {v:?}");
        // At least one direction stalls on each of the 11 requests after the first.
        assert!(nagle >= 11, "{name}: classified as Nagle x delayed ACK: {v:?}");
        let unexplained = classes(v).iter().any(|s| s.class == StallClass::Unexplained);
        assert!(!unexplained, "{name}: every stall explained: {v:?}");
    } else {
        // A clean request takes well under a millisecond on loopback; a reconnecting row pays
        // a handshake each, and a loaded 2-core machine adds scheduling delays: 15 ms still
        // stands far from a stall row's 40 ms timer.
        assert!(p50 < 15.0, "{name}: a clean row, p50 {p50} ms: {v:?}");
        assert_eq!(nagle, 0, "{name}: no Nagle x delayed ACK stall: {v:?}");
    }
}

#[test]
fn nagle_on_both_sides_stalls_in_both_directions() {
    let v = run_preset("story1");
    let directions: Vec<&str> = classes(&v)
        .iter()
        .filter(|s| s.class == StallClass::NagleDelayedAck)
        .map(|s| s.direction.as_str())
        .collect();
    assert!(
        directions.contains(&"client->server") && directions.contains(&"server->client"),
        "{v:?}"
    );
    assert!(p50_ms(&v) > 60.0, "two stalls per request: {v:?}");
}
