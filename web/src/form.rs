//! The run form's fields to a checked [`Scenario`], with errors that name the field the user
//! typed in.

use ackscope_shared::spec::LinkSpec;
use ackscope_shared::{PerSide, RrSpec, Scenario, WritePattern};

pub use ackscope_shared::spec::MAX_BROWSER_REQUESTS;

/// What the form holds: numbers as typed, so a half-typed number is not lost or "corrected".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormFields {
    pub requests: String,
    pub size_bytes: String,
    /// Empty: the same as the request.
    pub response_bytes: String,
    pub reconnect_every: String,
    pub think_us: String,
    pub write: PerSide<WritePattern>,
    pub nodelay: PerSide<bool>,
    pub cork: PerSide<bool>,
    pub quickack: PerSide<bool>,
    /// Empty: loopback; else the emulated link as the command line writes it (`rtt=40ms,...`).
    pub link: String,
}

/// A field the probe would refuse, found before asking it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The spec's field name (`"size_bytes"`, `"cork.client"`); `None` for a problem that is not
    /// one field's.
    pub field: Option<&'static str>,
    /// "body size (bytes): must be between 1 and …": starts with the form's own label.
    pub message: String,
}

impl FormFields {
    pub fn from_spec(spec: &RrSpec) -> FormFields {
        FormFields {
            requests: spec.requests.to_string(),
            size_bytes: spec.size_bytes.to_string(),
            response_bytes: spec.response_bytes.map(|bytes| bytes.to_string()).unwrap_or_default(),
            reconnect_every: spec.reconnect_every.to_string(),
            think_us: spec.think_us.to_string(),
            write: spec.write,
            nodelay: spec.nodelay,
            cork: spec.cork,
            quickack: spec.quickack,
            link: spec.link.map(|link| link.to_cli()).unwrap_or_default(),
        }
    }

    /// The scenario to send, checked by the same [`Scenario::validate`] the probe applies and
    /// by the probe's cap on runs from the browser.
    pub fn to_scenario(&self) -> Result<Scenario, FieldError> {
        let requests = whole_number("requests", &self.requests)?;
        if requests > MAX_BROWSER_REQUESTS {
            return Err(FieldError {
                field: Some("requests"),
                message: format!(
                    "requests: runs started from the browser make at most \
                     {MAX_BROWSER_REQUESTS}; use the command line (ackscope run rr) for longer runs"
                ),
            });
        }
        let response_bytes = match self.response_bytes.trim() {
            "" => None,
            text => Some(whole_number("response_bytes", text)?),
        };
        let link = match self.link.trim() {
            "" => None,
            text => Some(LinkSpec::parse(text).map_err(|problem| FieldError {
                field: Some("link"),
                message: format!("emulated link: {problem}"),
            })?),
        };
        let scenario = Scenario::Rr(RrSpec {
            requests,
            size_bytes: whole_number("size_bytes", &self.size_bytes)?,
            response_bytes,
            reconnect_every: whole_number("reconnect_every", &self.reconnect_every)?,
            think_us: whole_number("think_us", &self.think_us)?,
            write: self.write,
            nodelay: self.nodelay,
            cork: self.cork,
            quickack: self.quickack,
            link,
            ..RrSpec::default()
        });
        scenario.validate().map_err(|error| FieldError {
            field: Some(error.field),
            message: format!("{}: {}", label(error.field), error.problem),
        })?;
        Ok(scenario)
    }
}

/// The form's label for a spec field.
pub fn label(field: &str) -> &str {
    match field {
        "size_bytes" => "body size (bytes)",
        "response_bytes" => "response size (bytes)",
        "reconnect_every" => "reconnect every",
        "think_us" => "server think time (µs)",
        link if link.starts_with("link") => "emulated link",
        other => other,
    }
}

/// The write pattern a `<select>` value names; the default for anything else.
pub fn write_pattern(value: &str) -> WritePattern {
    [WritePattern::Single, WritePattern::Writev]
        .into_iter()
        .find(|pattern| pattern.name() == value)
        .unwrap_or_default()
}

fn whole_number(field: &'static str, text: &str) -> Result<u32, FieldError> {
    text.trim().parse().map_err(|_| FieldError {
        field: Some(field),
        message: format!(
            "{}: must be a whole number from 0 to {}, got {text:?}",
            label(field),
            u32::MAX
        ),
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    fn defaults() -> FormFields {
        FormFields::from_spec(&RrSpec::default())
    }

    fn rr(fields: &FormFields) -> RrSpec {
        match fields.to_scenario() {
            Ok(Scenario::Rr(spec)) => spec,
            other => panic!("an rr scenario, got {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_story_one_and_round_trip() {
        let fields = defaults();
        assert_eq!(fields.requests, "200");
        assert_eq!(fields.size_bytes, "2048");
        assert_eq!(fields.response_bytes, "", "the same as the request");
        assert_eq!(fields.reconnect_every, "0");
        assert_eq!(fields.think_us, "0");
        assert_eq!(fields.to_scenario(), Ok(Scenario::Rr(RrSpec::default())));

        let tuned = FormFields {
            nodelay: PerSide::both(true),
            cork: PerSide { client: true, server: false },
            quickack: PerSide { client: false, server: true },
            write: PerSide { client: WritePattern::Writev, server: WritePattern::Single },
            response_bytes: " 100 ".into(),
            think_us: "250".into(),
            ..fields
        };
        let spec = rr(&tuned);
        assert!(spec.nodelay.client && spec.nodelay.server);
        assert_eq!(spec.cork, PerSide { client: true, server: false });
        assert_eq!(spec.quickack, PerSide { client: false, server: true });
        assert_eq!(spec.write.client, WritePattern::Writev);
        assert_eq!(spec.write.server, WritePattern::Single);
        assert_eq!(spec.response_bytes, Some(100));
        assert_eq!(spec.think_us, 250);
        let back = FormFields { response_bytes: "100".into(), ..tuned };
        assert_eq!(FormFields::from_spec(&spec), back, "and back");
    }

    #[test]
    fn errors_name_the_field() {
        let zero = FormFields { requests: "0".into(), ..defaults() };
        let error = zero.to_scenario().unwrap_err();
        assert_eq!(error.field, Some("requests"));
        assert!(error.message.starts_with("requests: must be between 1 and"), "{}", error.message);

        let huge = FormFields { size_bytes: "100000000".into(), ..defaults() };
        let error = huge.to_scenario().unwrap_err();
        assert_eq!(error.field, Some("size_bytes"));
        assert!(
            error.message.starts_with("body size (bytes): must be between"),
            "{}",
            error.message
        );

        let typo = FormFields { reconnect_every: "ten".into(), ..defaults() };
        let error = typo.to_scenario().unwrap_err();
        assert_eq!(error.field, Some("reconnect_every"));
        assert!(error.message.contains("\"ten\""), "{}", error.message);

        let response = FormFields { response_bytes: "0".into(), ..defaults() };
        let error = response.to_scenario().unwrap_err();
        assert_eq!(error.field, Some("response_bytes"));
        assert!(error.message.starts_with("response size (bytes): "), "{}", error.message);

        let think = FormFields { think_us: "20000000".into(), ..defaults() };
        let error = think.to_scenario().unwrap_err();
        assert_eq!(error.field, Some("think_us"));
        assert!(error.message.starts_with("server think time (µs): "), "{}", error.message);
    }

    #[test]
    fn the_browser_asks_for_at_most_a_hundred_thousand_requests() {
        let most = FormFields { requests: MAX_BROWSER_REQUESTS.to_string(), ..defaults() };
        assert_eq!(rr(&most).requests, MAX_BROWSER_REQUESTS);
        // Within what the spec allows (1,000,000), but more than the probe runs for a browser.
        let more = FormFields { requests: (MAX_BROWSER_REQUESTS + 1).to_string(), ..defaults() };
        let error = more.to_scenario().unwrap_err();
        assert_eq!(error.field, Some("requests"));
        assert!(error.message.starts_with("requests: "), "{}", error.message);
        assert!(error.message.contains("at most 100000"), "{}", error.message);
        assert!(error.message.contains("ackscope run rr"), "{}", error.message);
    }

    #[test]
    fn every_request_response_preset_round_trips_through_the_form() {
        // The form has a field for everything a preset sets: what Run sends is the preset.
        for preset in ackscope_shared::presets::PRESETS {
            if let Scenario::Rr(spec) = (preset.build)() {
                let fields = FormFields::from_spec(&spec);
                assert_eq!(fields.to_scenario(), Ok(Scenario::Rr(spec)), "{}", preset.name);
            }
        }
    }

    #[test]
    fn select_values_are_the_pattern_names() {
        for pattern in [WritePattern::Split, WritePattern::Single, WritePattern::Writev] {
            assert_eq!(write_pattern(pattern.name()), pattern);
        }
        assert_eq!(write_pattern("bogus"), WritePattern::Split);
    }
}
