//! How a [`Scenario`] is serialized. JSON (lessons, `--spec`, `--print-spec`, `export --format
//! json`) names each kind of run and each field, so a field added with a default reads older
//! JSON. The session's binary encoding (postcard) names nothing: a kind of run is its position
//! and a spec's fields follow in order, so a field added to a spec would misread every older
//! file. Its kinds of run are therefore appended, never changed: a bulk run whose reader pauses
//! (`read_pause_us`, version 8) is a kind of run of its own, after the five that versions 1-7
//! knew, and a bulk run that does not pause is encoded as those versions encoded it, byte for
//! byte. Older files decode to the same specs, and `wire::run_start` decodes the same layout by
//! hand.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{BulkSpec, ImportSpec, LinkSpec, PerSide, RrSpec, Scenario, WatchSpec};

/// The JSON form: by name.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Scenario", rename_all = "snake_case")]
enum Named {
    Rr(RrSpec),
    Bulk(BulkSpec),
    Server(RrSpec),
    Import(ImportSpec),
    Watch(WatchSpec),
}

/// The binary form: by position. Only appended to. Generic so that one declaration gives the
/// order both ways: decoded into owned specs ([`Decoded`]), encoded from borrowed ones
/// ([`Encoded`]: an encoding copies nothing but a bulk spec's few fields).
#[derive(Serialize, Deserialize)]
enum Positional<Rr, Import, Watch, Bulk> {
    Rr(Rr),
    /// A bulk run as versions 1-7 encoded it: a reader that does not pause.
    Bulk(BulkWithoutPause),
    Server(Rr),
    Import(Import),
    Watch(Watch),
    /// Version 8: a bulk run whose server pauses before its reads, every field of `BulkSpec`
    /// in its order (the pause fourth).
    BulkSlowReader(Bulk),
}

type Decoded = Positional<RrSpec, ImportSpec, WatchSpec, BulkSpec>;
type Encoded<'a> = Positional<&'a RrSpec, &'a ImportSpec, &'a WatchSpec, &'a BulkSpec>;

/// The fields of [`BulkSpec`] that versions 1-7 encoded, in their order.
#[derive(Serialize, Deserialize)]
struct BulkWithoutPause {
    bytes: u64,
    duration_ms: Option<u32>,
    app_buffer_bytes: u32,
    sndbuf: PerSide<Option<u32>>,
    rcvbuf: PerSide<Option<u32>>,
    congestion: PerSide<Option<String>>,
    link: Option<LinkSpec>,
}

impl BulkWithoutPause {
    fn of(spec: &BulkSpec) -> BulkWithoutPause {
        // Every field named: one added to `BulkSpec` does not build until placed here.
        let BulkSpec {
            bytes,
            duration_ms,
            app_buffer_bytes,
            read_pause_us: _,
            sndbuf,
            rcvbuf,
            congestion,
            link,
        } = spec.clone();
        BulkWithoutPause { bytes, duration_ms, app_buffer_bytes, sndbuf, rcvbuf, congestion, link }
    }

    fn spec(self) -> BulkSpec {
        let BulkWithoutPause {
            bytes,
            duration_ms,
            app_buffer_bytes,
            sndbuf,
            rcvbuf,
            congestion,
            link,
        } = self;
        BulkSpec {
            bytes,
            duration_ms,
            app_buffer_bytes,
            read_pause_us: 0,
            sndbuf,
            rcvbuf,
            congestion,
            link,
        }
    }
}

impl<'a> Encoded<'a> {
    fn of(scenario: &'a Scenario) -> Encoded<'a> {
        match scenario {
            Scenario::Rr(spec) => Positional::Rr(spec),
            Scenario::Bulk(spec) if spec.read_pause_us > 0 => Positional::BulkSlowReader(spec),
            Scenario::Bulk(spec) => Positional::Bulk(BulkWithoutPause::of(spec)),
            Scenario::Server(spec) => Positional::Server(spec),
            Scenario::Import(spec) => Positional::Import(spec),
            Scenario::Watch(spec) => Positional::Watch(spec),
        }
    }
}

impl Decoded {
    fn scenario(self) -> Scenario {
        match self {
            Positional::Rr(spec) => Scenario::Rr(spec),
            Positional::Bulk(spec) => Scenario::Bulk(spec.spec()),
            Positional::BulkSlowReader(spec) => Scenario::Bulk(spec),
            Positional::Server(spec) => Scenario::Server(spec),
            Positional::Import(spec) => Scenario::Import(spec),
            Positional::Watch(spec) => Scenario::Watch(spec),
        }
    }
}

impl Serialize for Scenario {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            Named::serialize(self, serializer)
        } else {
            Encoded::of(self).serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Scenario {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scenario, D::Error> {
        if deserializer.is_human_readable() {
            Named::deserialize(deserializer)
        } else {
            Decoded::deserialize(deserializer).map(Decoded::scenario)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(read_pause_us: u32) -> Scenario {
        Scenario::Bulk(BulkSpec {
            read_pause_us,
            congestion: PerSide { client: Some("cubic".into()), server: None },
            ..BulkSpec::default()
        })
    }

    /// A bulk run that does not pause is encoded as versions 1-7 encoded it: the fields they
    /// knew, in their order, after the kind's index 1.
    #[test]
    fn a_bulk_run_without_a_pause_encodes_as_older_versions_did() {
        let spec = BulkSpec::default();
        let mut expected = vec![1];
        expected.extend(postcard::to_allocvec(&spec.bytes).unwrap());
        expected.extend(postcard::to_allocvec(&spec.duration_ms).unwrap());
        expected.extend(postcard::to_allocvec(&spec.app_buffer_bytes).unwrap());
        expected.extend([0, 0, 0, 0, 0, 0, 0]); // sndbuf, rcvbuf, congestion: none; no link
        assert_eq!(postcard::to_allocvec(&Scenario::Bulk(spec)).unwrap(), expected);
    }

    #[test]
    fn both_kinds_of_bulk_run_round_trip_in_both_forms() {
        for scenario in [bulk(0), bulk(250_000)] {
            let bytes = postcard::to_allocvec(&scenario).unwrap();
            assert_eq!(postcard::from_bytes::<Scenario>(&bytes).unwrap(), scenario);
            let json = serde_json::to_string(&scenario).unwrap();
            assert!(json.starts_with(r#"{"bulk":{"#), "{json}");
            assert_eq!(serde_json::from_str::<Scenario>(&json).unwrap(), scenario);
        }
        assert_eq!(postcard::to_allocvec(&bulk(250_000)).unwrap()[0], 5);
    }

    /// JSON written before the pause existed reads as a reader that does not pause.
    #[test]
    fn older_json_reads_as_a_reader_without_a_pause() {
        let json = r#"{"bulk":{"bytes":1000,"app_buffer_bytes":4096}}"#;
        let Scenario::Bulk(spec) = serde_json::from_str(json).unwrap() else { panic!("bulk") };
        assert_eq!(spec.read_pause_us, 0);
    }
}
