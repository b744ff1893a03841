//! The `--json` contract (docs/CLI.md, "`--json`: a stable interface"): one run's report, as
//! `run --json` and `server --json` print it and `export --json` lists it under `runs`. The probe
//! serializes this type; the benchmarks and the tests deserialize it, so a renamed or retyped
//! field fails to build or to parse instead of being looked up by a name that is gone.
//!
//! Fields are added over time; existing ones keep their names, types and meaning.
//!
//! [`RunReport::of`] makes the report from the reducer's tally of a run: `run` for the run it
//! made, `export --json` and the page's JSON export for a file's runs ([`crate::export_json`]).

use serde::{Deserialize, Serialize};

use crate::analysis::Summary;
use crate::attribution::ClassSummary;
use crate::bulk::BulkSummary;
use crate::control::ClockSync;
use crate::estimate::EstimatedExchanges;
use crate::reduce::{Figures, FollowedRun, RunTally};
use crate::spec::Scenario;
use crate::tried::OptionTried;
use crate::wire::RunOutcome;

/// One run's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// `rr`, `bulk`, `server` or `import`.
    pub scenario: String,
    /// The spec that ran, without its scenario's name ([`RunReport::spec`] puts them together).
    pub config: serde_json::Value,
    pub outcome: ReportOutcome,
    /// Why the run stopped early.
    pub error: Option<String>,
    /// Events recorded.
    pub events: u64,
    pub ackscope_version: String,
    /// A request/response run's or a bulk transfer's headline numbers, at the top level.
    #[serde(flatten)]
    pub figures: ReportFigures,
    /// Request/response runs of `run`: what the client threads counted themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<ClientCount>,
    /// Request/response runs: stalls per class and direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalls: Option<Vec<ClassSummary>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureFigures>,
    /// Runs against a remote server or a server in a namespace, and files with their clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockSync>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteFigures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_netns: Option<NetnsPlace>,
    /// A watch that read no packet: its exchanges bounded from the sockets' counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated: Option<EstimatedExchanges>,
    /// A watch's run after `--try`: the socket options it tried, on which process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<OptionTried>,
    /// `ackscope watch --try --json`: the run before the options went into force (this report
    /// is of the run with them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Box<RunReport>>,
}

/// What only the process that made a run knows besides its events: none of it is in a session
/// file, so a file's run has none of it ([`LiveFacts::default`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveFacts {
    /// Request/response runs of `run`: what the client threads counted themselves.
    pub clients: Option<ClientCount>,
    /// The run recorded no events (`--no-events`): a request/response run's figures are then
    /// the client threads' count.
    pub no_events: bool,
    pub capture: Option<CaptureFigures>,
    pub remote: Option<RemoteFigures>,
    pub server_netns: Option<NetnsPlace>,
}

/// The outcome of a run the session ends in (its `RunFinished` never came), for its summary.
pub fn unfinished_outcome() -> RunOutcome {
    RunOutcome::Failed { error: "the file ends before the run did".into() }
}

impl RunReport {
    /// The report of a run read from a file (`export --json`'s summary, `lesson check`): only
    /// what the file holds, and a run the file ends in as failed.
    pub fn of_file_run(run: &FollowedRun) -> RunReport {
        let outcome = run.outcome.clone().unwrap_or_else(unfinished_outcome);
        RunReport::of(&run.tally, &run.scenario, &outcome, LiveFacts::default())
    }

    /// A report of `scenario` with only these figures: for tests of what reads reports.
    #[cfg(test)]
    pub(crate) fn with_figures(scenario: &str, figures: ReportFigures) -> RunReport {
        RunReport {
            scenario: scenario.into(),
            config: serde_json::json!({}),
            outcome: ReportOutcome::Completed,
            error: None,
            events: 3,
            ackscope_version: "0.1.0".into(),
            figures,
            clients: None,
            stalls: None,
            capture: None,
            clock: None,
            remote: None,
            server_netns: None,
            estimated: None,
            tried: Vec::new(),
            before: None,
        }
    }

    /// The report of a run from the reducer's `tally` of its events, the `scenario` it ran and
    /// how it ended, with what only a live run knows (`live`; the default for a file's run).
    pub fn of(
        tally: &RunTally,
        scenario: &Scenario,
        outcome: &RunOutcome,
        live: LiveFacts,
    ) -> RunReport {
        let LiveFacts { clients, no_events, capture, remote, server_netns } = live;
        let figures = match (tally.figures(), clients) {
            // Nothing was recorded: only what the client threads counted is known.
            (Some(Figures::Rr(_)), Some(clients)) if no_events => ReportFigures::Rr(RrFigures {
                requests: clients.requests,
                duration_s: clients.elapsed_s,
                rps: clients.rps,
                p50_ms: None,
                p99_ms: None,
                max_ms: None,
                stalled_reads: None,
            }),
            (Some(Figures::Rr(summary)), _) => ReportFigures::Rr(RrFigures::from(&summary)),
            (Some(Figures::Bulk(summary)), _) => ReportFigures::Bulk(summary),
            // An imported capture's run is summarized from its packets (its connections and
            // the stall classes they show), not here.
            (None, _) => ReportFigures::None {},
        };
        let config = match scenario {
            Scenario::Rr(spec) | Scenario::Server(spec) => serde_json::to_value(spec),
            Scenario::Bulk(spec) => serde_json::to_value(spec),
            Scenario::Import(spec) => serde_json::to_value(spec),
            Scenario::Watch(spec) => serde_json::to_value(spec),
        }
        .expect("a spec is plain data");
        let (outcome, error) = ReportOutcome::of(outcome);
        RunReport {
            scenario: scenario.name().to_string(),
            config,
            outcome,
            error,
            events: tally.events,
            // The workspace's one version: the probe's and the page's.
            ackscope_version: env!("CARGO_PKG_VERSION").to_string(),
            figures,
            clients,
            stalls: tally.stall_classes(),
            capture,
            clock: tally.clock,
            remote,
            server_netns,
            estimated: tally.estimated_exchanges(),
            tried: tally.tried.entries().to_vec(),
            before: None,
        }
    }

    /// The spec that ran, if this build knows its scenario.
    pub fn spec(&self) -> Option<Scenario> {
        let tagged = serde_json::json!({ self.scenario.clone(): self.config.clone() });
        serde_json::from_value(tagged).ok()
    }

    /// The request/response figures, if this is such a run.
    pub fn rr(&self) -> Option<&RrFigures> {
        match &self.figures {
            ReportFigures::Rr(rr) => Some(rr),
            _ => None,
        }
    }

    /// The bulk transfer's figures, if this is one.
    pub fn bulk(&self) -> Option<&BulkSummary> {
        match &self.figures {
            ReportFigures::Bulk(bulk) => Some(bulk),
            _ => None,
        }
    }
}

/// How a run ended, by its JSON name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    Completed,
    Interrupted,
    Failed,
}

impl ReportOutcome {
    /// The outcome's name and its error.
    pub fn of(outcome: &RunOutcome) -> (ReportOutcome, Option<String>) {
        match outcome {
            RunOutcome::Completed => (ReportOutcome::Completed, None),
            RunOutcome::Interrupted => (ReportOutcome::Interrupted, None),
            RunOutcome::Failed { error } => (ReportOutcome::Failed, Some(error.clone())),
        }
    }
}

/// A run's headline numbers; which fields appear tells the kinds apart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReportFigures {
    Rr(RrFigures),
    Bulk(BulkSummary),
    /// An imported capture's run, summarized from its packets elsewhere.
    None {},
}

/// A request/response run's figures. With `--no-events` only the client threads' counts are
/// known: the latencies and stalled reads are null.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RrFigures {
    /// Requests completed.
    pub requests: u32,
    /// From the first request's start to the last request's end.
    pub duration_s: f64,
    pub rps: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// Reads held more than 10 ms after the peer had written their bytes.
    pub stalled_reads: Option<u32>,
}

impl From<&Summary> for RrFigures {
    fn from(s: &Summary) -> RrFigures {
        RrFigures {
            requests: s.requests,
            duration_s: s.duration_s,
            rps: s.rps,
            p50_ms: Some(s.p50_ms),
            p99_ms: Some(s.p99_ms),
            max_ms: Some(s.max_ms),
            stalled_reads: Some(s.stalled_reads),
        }
    }
}

/// Requests the client threads answered, counted by themselves, over the time from starting
/// them to joining them: the same window with recording on or off.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientCount {
    pub requests: u32,
    pub elapsed_s: f64,
    pub rps: f64,
}

impl ClientCount {
    pub fn new(requests: u32, elapsed_s: f64) -> ClientCount {
        let rps = if elapsed_s > 0.0 { f64::from(requests) / elapsed_s } else { 0.0 };
        ClientCount { requests, elapsed_s, rps }
    }
}

/// How a run's packet capture went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaptureFigures {
    /// The way in (`tcx_ingress_lo`, `packet_socket`, `link_relay`), when known.
    pub via: Option<String>,
    pub segments: u64,
    pub offset_uncertainty_ns: u64,
    pub drift_ns: i64,
    /// Packets the kernel dropped for a full ring.
    pub dropped: u32,
    pub kernel_packets: u64,
}

/// A run against a remote server, as it saw the server's side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteFigures {
    pub server: String,
    pub same_host_offset_ns: i64,
    pub server_outcome: ReportOutcome,
    pub server_error: Option<String>,
    pub unmatched_events: u64,
}

/// Where `--server-netns` placed the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetnsPlace {
    pub name: String,
    pub ip: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const RR: &str = r#"{"ackscope_version":"0.1.0","config":{"nodelay":{"client":true,"server":true},"reconnect_every":0,"requests":2000,"size_bytes":2048},"duration_s":0.118912712,"error":null,"events":12,"outcome":"completed","max_ms":1.362274,"p50_ms":0.042723,"p99_ms":0.5,"requests":1999,"rps":16819.05968135686,"scenario":"rr","stalled_reads":0,"stalls":[]}"#;

    #[test]
    fn a_report_reads_back_typed_and_its_own_fields_are_not_its_configs() {
        let report: RunReport = serde_json::from_str(RR).unwrap();
        let rr = report.rr().expect("a request/response run");
        assert_eq!(rr.requests, 1999, "not config.requests");
        assert_eq!(rr.p50_ms, Some(0.042723));
        assert_eq!(report.outcome, ReportOutcome::Completed);
        assert!(matches!(report.spec(), Some(Scenario::Rr(spec)) if spec.requests == 2000));
        let again: RunReport =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(again, report);
    }

    #[test]
    fn a_bulk_report_and_an_imported_one_are_told_apart_by_their_fields() {
        let bulk = BulkSummary { bytes: 10, ..BulkSummary::default() };
        let report = RunReport::with_figures("bulk", ReportFigures::Bulk(bulk.clone()));
        let text = serde_json::to_string(&report).unwrap();
        assert!(text.contains("\"bytes\":10") && !text.contains("\"stalls\""), "{text}");
        assert!(!text.contains("\"tried\""), "only a watch that tried an option has it: {text}");
        let back: RunReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.bulk(), Some(&bulk));
        let none = RunReport { figures: ReportFigures::None {}, ..report };
        let back: RunReport = serde_json::from_str(&serde_json::to_string(&none).unwrap()).unwrap();
        assert_eq!(back.figures, ReportFigures::None {});
    }
}
