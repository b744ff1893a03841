//! The run form's text fields to an [`RrSpec`], with errors that name the field the user typed in.

use ackscope_shared::RrSpec;

/// What the form holds: text as typed, so a half-typed number is not lost or "corrected".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormFields {
    pub requests: String,
    pub size_bytes: String,
    pub reconnect_every: String,
    pub nodelay_client: bool,
    pub nodelay_server: bool,
}

/// A field the probe would refuse, found before asking it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The spec's field name (`"size_bytes"`); `None` for a problem that is not one field's.
    pub field: Option<&'static str>,
    /// "body size (bytes): must be between 1 and …": starts with the form's own label.
    pub message: String,
}

impl FormFields {
    pub fn from_spec(spec: &RrSpec) -> FormFields {
        FormFields {
            requests: spec.requests.to_string(),
            size_bytes: spec.size_bytes.to_string(),
            reconnect_every: spec.reconnect_every.to_string(),
            nodelay_client: spec.nodelay.client,
            nodelay_server: spec.nodelay.server,
        }
    }

    /// The spec to send, checked by the same [`RrSpec::validate`] the probe applies.
    pub fn to_spec(&self) -> Result<RrSpec, FieldError> {
        let mut spec = RrSpec {
            requests: whole_number("requests", &self.requests)?,
            size_bytes: whole_number("size_bytes", &self.size_bytes)?,
            reconnect_every: whole_number("reconnect_every", &self.reconnect_every)?,
            ..RrSpec::default()
        };
        spec.nodelay.client = self.nodelay_client;
        spec.nodelay.server = self.nodelay_server;
        spec.validate().map_err(|error| FieldError {
            field: Some(error.field),
            message: format!("{}: {}", label(error.field), error.problem),
        })?;
        Ok(spec)
    }
}

/// The form's label for a spec field.
pub fn label(field: &str) -> &str {
    match field {
        "size_bytes" => "body size (bytes)",
        "reconnect_every" => "reconnect every",
        other => other,
    }
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
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    #[wasm_bindgen_test]
    fn the_defaults_are_story_one_and_round_trip() {
        let fields = FormFields::from_spec(&RrSpec::default());
        assert_eq!(fields.requests, "200");
        assert_eq!(fields.size_bytes, "2048");
        assert_eq!(fields.reconnect_every, "0");
        assert_eq!(fields.to_spec(), Ok(RrSpec::default()));

        let both = FormFields {
            nodelay_client: true,
            nodelay_server: true,
            ..fields
        };
        let spec = both.to_spec().expect("valid");
        assert!(spec.nodelay.client && spec.nodelay.server);
    }

    #[wasm_bindgen_test]
    fn errors_name_the_field() {
        let defaults = FormFields::from_spec(&RrSpec::default());
        let zero = FormFields {
            requests: "0".into(),
            ..defaults.clone()
        };
        let error = zero.to_spec().unwrap_err();
        assert_eq!(error.field, Some("requests"));
        assert!(
            error.message.starts_with("requests: must be between 1 and"),
            "{}",
            error.message
        );

        let huge = FormFields {
            size_bytes: "100000000".into(),
            ..defaults.clone()
        };
        let error = huge.to_spec().unwrap_err();
        assert_eq!(error.field, Some("size_bytes"));
        assert!(
            error
                .message
                .starts_with("body size (bytes): must be between"),
            "{}",
            error.message
        );

        let typo = FormFields {
            reconnect_every: "ten".into(),
            ..defaults
        };
        let error = typo.to_spec().unwrap_err();
        assert_eq!(error.field, Some("reconnect_every"));
        assert!(error.message.contains("\"ten\""), "{}", error.message);
    }
}
