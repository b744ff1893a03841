//! JSON as the benchmarks read it: the probe's run report typed (`ackscope_shared::report`, the
//! `--json` contract), other tools' JSON (iperf3's) parsed with serde_json and looked up by name
//! on the object the field belongs to, as is an export's list of messages (whose events are
//! read back typed, as `ackscope_shared::Event`).

use std::process::Output;

use ackscope_shared::report::{ClientCount, RrFigures, RunReport};
use serde_json::Value;

/// The report `ackscope run ... --json` printed (its one line that is an object), or the run's
/// error when it reports one.
pub fn summary(output: &Output) -> Result<RunReport, String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|line| line.trim_start().starts_with('{'))
        .ok_or_else(|| format!("ackscope printed no JSON object; its output:\n{stdout}"))?;
    let report: RunReport = serde_json::from_str(line)
        .map_err(|e| format!("ackscope's report does not parse ({e}): {line}"))?;
    match &report.error {
        None => Ok(report),
        Some(error) => Err(format!("ackscope's run failed: {error}")),
    }
}

/// The client threads' own count of a request/response run.
pub fn clients(report: &RunReport) -> Result<ClientCount, String> {
    report.clients.ok_or_else(|| format!("no `clients` in a request/response report: {report:?}"))
}

/// A request/response run's figures.
pub fn rr(report: &RunReport) -> Result<&RrFigures, String> {
    report.rr().ok_or_else(|| format!("not a request/response report: {report:?}"))
}

/// A bulk transfer's goodput.
pub fn goodput_mbps(report: &RunReport) -> Result<f64, String> {
    report
        .bulk()
        .map(|bulk| bulk.goodput_mbps)
        .ok_or_else(|| format!("not a bulk transfer's report: {report:?}"))
}

pub fn parse(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("ackscope's JSON does not parse ({e}): {text}"))
}

/// `object[field]` as a number.
pub fn number(object: &Value, field: &str) -> Result<f64, String> {
    match object.get(field) {
        Some(value) => value
            .as_f64()
            .ok_or_else(|| format!("`{field}` is `{value}`, not a number, in {object}")),
        None => Err(format!("ackscope's JSON has no `{field}` field: {object}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"ackscope_version":"0.1.0","config":{"nodelay":{"client":true,"server":true},"reconnect_every":0,"requests":2000,"size_bytes":2048},"duration_s":0.118912712,"error":null,"max_ms":1.362274,"p50_ms":0.042723,"requests":1999,"rps":16819.05968135686,"scenario":"rr","stalled_reads":0}"#;

    #[test]
    fn fields_are_the_objects_own() {
        let json = parse(JSON).unwrap();
        assert_eq!(number(&json, "requests"), Ok(1999.0), "not config.requests");
        assert_eq!(number(&json, "rps"), Ok(16819.05968135686));
        assert_eq!(json["scenario"].as_str(), Some("rr"));
        assert!(json.get("size_bytes").is_none(), "config's fields stay in config");
        let missing = number(&json, "events").unwrap_err();
        assert!(missing.contains("no `events` field"), "{missing}");
    }

    #[test]
    fn strings_with_braces_and_quotes_and_reported_errors() {
        let json = parse(r#"{"error":"a \"}\" here, {x}","rps":2.5}"#).unwrap();
        assert_eq!(number(&json, "rps"), Ok(2.5));
        assert_eq!(json["error"].as_str(), Some(r#"a "}" here, {x}"#));
        let output = |stdout: &str| {
            use std::os::unix::process::ExitStatusExt;
            Output {
                status: std::process::ExitStatus::from_raw(0),
                stdout: stdout.as_bytes().to_vec(),
                stderr: Vec::new(),
            }
        };
        let report = JSON
            .replace("\"error\":null,", "\"outcome\":\"completed\",\"events\":9,\"error\":null,");
        let fine = summary(&output(&format!("note\n{report}\n"))).unwrap();
        assert_eq!(rr(&fine).map(|rr| rr.requests), Ok(1999), "typed, not config.requests");
        let failed = report.replace("\"error\":null", "\"error\":\"no link\"");
        let failed = summary(&output(&failed)).unwrap_err();
        assert!(failed.contains("no link"), "{failed}");
        assert!(summary(&output("{\"rps\":3}")).unwrap_err().contains("does not parse"));
        assert!(summary(&output("no json")).unwrap_err().contains("no JSON object"));
    }
}
