//! Scenario specs: everything needed to run an experiment again.
//!
//! A spec never names a network address: the probe runs it against its own echo server. That is
//! what lets the browser start experiments without being able to aim the probe at anything else.

use serde::{Deserialize, Serialize};

/// The largest body the echo protocol accepts by default (the server's length-prefix cap).
pub const MAX_BODY_BYTES: u32 = 64 * 1024 * 1024;
/// The most requests one run may make: bounds the memory a run can take.
pub const MAX_REQUESTS: u32 = 1_000_000;

/// Request/response over the length-prefixed echo protocol (docs/PROTOCOL.md): the client writes
/// a 4-byte big-endian length, then the body, as two writes; the server answers the same way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RrSpec {
    /// How many requests the client makes.
    pub requests: u32,
    /// Body size of each request (and of each response), in bytes.
    pub size_bytes: u32,
    /// Open a new connection after this many requests; 0 keeps one connection for the whole run.
    #[serde(default)]
    pub reconnect_every: u32,
    /// TCP_NODELAY (Nagle's algorithm off) per side.
    #[serde(default)]
    pub nodelay: NoDelay,
}

/// Which sides set TCP_NODELAY.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoDelay {
    pub client: bool,
    pub server: bool,
}

impl Default for RrSpec {
    /// Story 1 as the seed measured it: Nagle on both sides, keep-alive, 2048-byte bodies.
    fn default() -> Self {
        RrSpec {
            requests: 200,
            size_bytes: 2048,
            reconnect_every: 0,
            nodelay: NoDelay::default(),
        }
    }
}

/// A spec field out of range. `field` is the spec's field name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SpecError {
    pub field: &'static str,
    pub problem: String,
}

impl RrSpec {
    /// Checks every field's range; the error names the first bad field.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.requests == 0 || self.requests > MAX_REQUESTS {
            return Err(SpecError {
                field: "requests",
                problem: format!(
                    "must be between 1 and {MAX_REQUESTS}, got {}",
                    self.requests
                ),
            });
        }
        if self.size_bytes == 0 || self.size_bytes > MAX_BODY_BYTES {
            return Err(SpecError {
                field: "size_bytes",
                problem: format!(
                    "must be between 1 and {MAX_BODY_BYTES} (64 MiB), got {}",
                    self.size_bytes
                ),
            });
        }
        Ok(())
    }

    /// Whether request `index` (from 0) opens a new connection before it is sent.
    pub fn connects_before(&self, index: u32) -> bool {
        index == 0 || (self.reconnect_every != 0 && index % self.reconnect_every == 0)
    }

    /// One line for people: "200 x 2048 B, keep-alive, Nagle on both sides".
    pub fn describe(&self) -> String {
        let connection = match self.reconnect_every {
            0 => "keep-alive".to_string(),
            1 => "reconnect before every request".to_string(),
            n => format!("reconnect every {n} requests"),
        };
        let nagle = match (self.nodelay.client, self.nodelay.server) {
            (false, false) => "Nagle on both sides",
            (true, false) => "TCP_NODELAY on the client only",
            (false, true) => "TCP_NODELAY on the server only",
            (true, true) => "TCP_NODELAY on both sides",
        };
        format!(
            "{} x {} B, {connection}, {nagle}",
            self.requests, self.size_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_bad_field() {
        let zero = RrSpec {
            requests: 0,
            ..RrSpec::default()
        };
        assert_eq!(zero.validate().unwrap_err().field, "requests");
        let huge = RrSpec {
            size_bytes: MAX_BODY_BYTES + 1,
            ..RrSpec::default()
        };
        assert_eq!(huge.validate().unwrap_err().field, "size_bytes");
        assert!(RrSpec::default().validate().is_ok());
    }

    #[test]
    fn reconnect_plan() {
        let keep = RrSpec {
            requests: 5,
            ..RrSpec::default()
        };
        let opens: Vec<bool> = (0..5).map(|i| keep.connects_before(i)).collect();
        assert_eq!(opens, [true, false, false, false, false]);
        let every2 = RrSpec {
            requests: 5,
            reconnect_every: 2,
            ..RrSpec::default()
        };
        let opens: Vec<bool> = (0..5).map(|i| every2.connects_before(i)).collect();
        assert_eq!(opens, [true, false, true, false, true]);
    }

    #[test]
    fn json_field_names_are_the_documented_ones() {
        let spec = RrSpec {
            nodelay: NoDelay {
                client: true,
                server: false,
            },
            ..RrSpec::default()
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "requests": 200, "size_bytes": 2048, "reconnect_every": 0,
                "nodelay": {"client": true, "server": false}
            })
        );
        let typo = r#"{"requests": 1, "size_bytes": 1, "nodelay": {"clinet": true}}"#;
        assert!(serde_json::from_str::<RrSpec>(typo).is_err());
    }
}
