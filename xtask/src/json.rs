//! The probe's JSON as the benchmarks read it: parsed with serde_json, fields looked up by name
//! on the object they belong to (a run's `requests` is not its `config.requests`).

use std::process::Output;

use serde_json::Value;

/// The JSON summary `ackscope run ... --json` printed (its one line that is an object), or the
/// run's error when it reports one.
pub fn summary(output: &Output) -> Result<Value, String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|line| line.trim_start().starts_with('{'))
        .ok_or_else(|| format!("ackscope printed no JSON object; its output:\n{stdout}"))?;
    let json = parse(line)?;
    match &json["error"] {
        Value::Null => Ok(json),
        error => Err(format!("ackscope's run failed: {error}")),
    }
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

/// `object[field]` as a string.
pub fn string<'a>(object: &'a Value, field: &str) -> Result<&'a str, String> {
    object
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no string `{field}` field in {object}"))
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
        assert_eq!(string(&json, "scenario"), Ok("rr"));
        assert!(json.get("size_bytes").is_none(), "config's fields stay in config");
        let missing = number(&json, "events").unwrap_err();
        assert!(missing.contains("no `events` field"), "{missing}");
    }

    #[test]
    fn strings_with_braces_and_quotes_and_reported_errors() {
        let json = parse(r#"{"error":"a \"}\" here, {x}","rps":2.5}"#).unwrap();
        assert_eq!(number(&json, "rps"), Ok(2.5));
        assert_eq!(string(&json, "error"), Ok(r#"a "}" here, {x}"#));
        let output = |stdout: &str| {
            use std::os::unix::process::ExitStatusExt;
            Output {
                status: std::process::ExitStatus::from_raw(0),
                stdout: stdout.as_bytes().to_vec(),
                stderr: Vec::new(),
            }
        };
        let failed = summary(&output("note\n{\"error\":\"no link\",\"rps\":0}\n")).unwrap_err();
        assert!(failed.contains("no link"), "{failed}");
        let fine = summary(&output("{\"error\":null,\"rps\":3}")).unwrap();
        assert_eq!(number(&fine, "rps"), Ok(3.0));
        assert!(summary(&output("no json")).unwrap_err().contains("no JSON object"));
    }
}
