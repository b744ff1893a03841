//! The command line: `ackscope` serves the web app; `ackscope run rr …` runs headless.
//!
//! Exit codes: 0 success, 1 the run or the server failed, 2 the command line was wrong.

use std::io::{self, IsTerminal, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::process::ExitCode;

use ackscope_shared::analysis::RunAnalysis;
use ackscope_shared::spec::{MAX_BODY_BYTES, MAX_REQUESTS};
use ackscope_shared::wire::RunOutcome;
use ackscope_shared::{NoDelay, RrSpec, Summary};
use clap::{Parser, Subcommand, ValueEnum};

use crate::{scenario, serve};

/// The web app's port when none is given ("44": the delayed-ACK stall this tool exists to show).
pub const DEFAULT_PORT: u16 = 4044;
/// How many ports after the default to try before taking any free one.
const PORTS_TO_TRY: u16 = 16;

#[derive(Debug, Parser)]
#[command(
    name = "ackscope",
    version,
    about = "Makes TCP waits visible: runs TCP experiments on real kernel sockets and shows where \
             each recv() blocked, and why.",
    after_help = "With no command, serves the web app on 127.0.0.1 and prints its URL."
)]
struct Cli {
    /// Port for the web app on 127.0.0.1 [default: 4044, or the next free one; 0: any free port]
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an experiment without the browser and print its summary
    Run {
        #[command(subcommand)]
        scenario: Scenario,
    },
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Request/response over loopback: 4-byte length then body, as two writes (story 1)
    Rr(RrArgs),
}

#[derive(Debug, clap::Args)]
struct RrArgs {
    /// Number of requests
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REQUESTS)))]
    count: u32,

    /// Body size of each request and response, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BODY_BYTES)))]
    size: u32,

    /// Set TCP_NODELAY (turn Nagle's algorithm off) on these sides [default: neither]
    #[arg(long, value_enum, value_name = "SIDES")]
    nodelay: Option<Sides>,

    /// Open a new connection every N requests [default: keep one connection]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    reconnect_every: Option<u32>,

    /// Print one JSON object instead of the table (fields: docs/CLI.md)
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Sides {
    Client,
    Server,
    Both,
}

impl RrArgs {
    fn spec(&self) -> RrSpec {
        let nodelay = match self.nodelay {
            None => NoDelay {
                client: false,
                server: false,
            },
            Some(Sides::Client) => NoDelay {
                client: true,
                server: false,
            },
            Some(Sides::Server) => NoDelay {
                client: false,
                server: true,
            },
            Some(Sides::Both) => NoDelay {
                client: true,
                server: true,
            },
        };
        RrSpec {
            requests: self.count,
            size_bytes: self.size,
            reconnect_every: self.reconnect_every.unwrap_or(0),
            nodelay,
        }
    }
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Usage errors exit 2 and name the flag; --help and --version exit 0.
        Err(e) => e.exit(),
    };
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ACKSCOPE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let result = match &cli.command {
        None => serve_ui(cli.port),
        Some(Command::Run {
            scenario: Scenario::Rr(args),
        }) => run_rr(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("ackscope: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run_rr(args: &RrArgs) -> Result<ExitCode, String> {
    let spec = args.spec();
    if !args.json && io::stderr().is_terminal() {
        eprintln!("ackscope: running {} ...", spec.describe());
    }
    let mut analysis = RunAnalysis::new();
    let outcome = scenario::rr::run(&spec, |events| analysis.push_all(&events))
        .map_err(|e| format!("--{}: {}", flag_of(e.field), e.problem))?;
    let summary = analysis.summary();
    let error = match outcome {
        RunOutcome::Completed => None,
        RunOutcome::Failed { error } => Some(error),
    };
    let mut out = io::stdout().lock();
    let printed = if args.json {
        writeln!(out, "{}", summary_json(&spec, &summary, error.as_deref()))
    } else {
        print_summary(&mut out, &spec, &summary)
    };
    printed.map_err(|e| format!("writing the summary: {e}"))?;
    match error {
        None => Ok(ExitCode::SUCCESS),
        Some(error) => Err(format!("the run stopped early: {error}")),
    }
}

/// The spec field behind each flag, for messages about a bad value.
fn flag_of(field: &str) -> &str {
    match field {
        "requests" => "count",
        "size_bytes" => "size",
        "reconnect_every" => "reconnect-every",
        other => other,
    }
}

/// The documented JSON summary (docs/CLI.md): scripts rely on these names.
fn summary_json(spec: &RrSpec, summary: &Summary, error: Option<&str>) -> serde_json::Value {
    let mut value = serde_json::to_value(summary).expect("a summary is plain numbers");
    let config = serde_json::to_value(spec).expect("a spec is plain data");
    let object = value.as_object_mut().expect("a summary is an object");
    object.insert("scenario".into(), "rr".into());
    object.insert("config".into(), config);
    object.insert("error".into(), error.into());
    object.insert("ackscope_version".into(), env!("CARGO_PKG_VERSION").into());
    value
}

fn print_summary(out: &mut impl Write, spec: &RrSpec, s: &Summary) -> io::Result<()> {
    writeln!(out, "rr: {}", spec.describe())?;
    writeln!(
        out,
        "  requests       {} in {:.2} s ({:.1} requests/s)",
        s.requests, s.duration_s, s.rps
    )?;
    writeln!(
        out,
        "  latency        p50 {:.2} ms   p99 {:.2} ms   max {:.2} ms",
        s.p50_ms, s.p99_ms, s.max_ms
    )?;
    writeln!(
        out,
        "  stalled reads  {} (blocked > 10 ms after the peer had written the data)",
        s.stalled_reads
    )
}

fn serve_ui(port: Option<u16>) -> Result<ExitCode, String> {
    let (listener, note) = bind_ui(port)?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("reading the bound address: {e}"))?;
    if let Some(note) = note {
        eprintln!("ackscope: {note}");
    }
    if !serve::assets::is_built() {
        eprintln!("ackscope: this binary has no web app built in; build it with `cargo xtask run`");
    }
    println!("ackscope is serving http://{addr}/ (Ctrl-C to stop)");
    let _ = io::stdout().flush();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    runtime.block_on(async {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("listener on {addr}: {e}"))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("listener on {addr}: {e}"))?;
        serve::serve(listener, serve::session::Session::new())
            .await
            .map_err(|e| format!("serving on {addr}: {e}"))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Binds the UI on loopback. An explicit port must be free; otherwise the default or the next
/// free one after it is taken, and the note says so.
fn bind_ui(port: Option<u16>) -> Result<(TcpListener, Option<String>), String> {
    if let Some(port) = port {
        return TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .map(|l| (l, None))
            .map_err(|e| {
                if e.kind() == io::ErrorKind::AddrInUse {
                    format!(
                        "port {port} on 127.0.0.1 is in use; choose another with --port, or leave \
                     --port out to take the next free one"
                    )
                } else {
                    format!("cannot listen on 127.0.0.1:{port}: {e}")
                }
            });
    }
    for candidate in DEFAULT_PORT..DEFAULT_PORT + PORTS_TO_TRY {
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, candidate)) {
            let note = (candidate != DEFAULT_PORT)
                .then(|| format!("port {DEFAULT_PORT} is in use; using {candidate} instead"));
            return Ok((listener, note));
        }
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let note = format!(
        "ports {DEFAULT_PORT}-{} are in use; using a free one instead",
        DEFAULT_PORT + PORTS_TO_TRY - 1
    );
    Ok((listener, Some(note)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_map_to_the_spec() {
        let cli = Cli::try_parse_from([
            "ackscope",
            "run",
            "rr",
            "--count",
            "5",
            "--size",
            "100",
            "--nodelay",
            "server",
            "--reconnect-every",
            "2",
        ])
        .unwrap();
        let Some(Command::Run {
            scenario: Scenario::Rr(args),
        }) = cli.command
        else {
            panic!()
        };
        let spec = args.spec();
        assert_eq!(spec.requests, 5);
        assert_eq!(spec.size_bytes, 100);
        assert_eq!(spec.reconnect_every, 2);
        assert_eq!(
            spec.nodelay,
            NoDelay {
                client: false,
                server: true
            }
        );
    }

    #[test]
    fn bad_values_name_their_flag() {
        for (args, flag) in [
            (vec!["--count", "0"], "--count"),
            (vec!["--size", "99999999999"], "--size"),
            (vec!["--nodelay", "sometimes"], "--nodelay"),
            (vec!["--reconnect-every", "0"], "--reconnect-every"),
        ] {
            let mut argv = vec!["ackscope", "run", "rr"];
            argv.extend(args);
            let err = Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(err.to_string().contains(flag), "{err}");
        }
    }

    #[test]
    fn an_explicit_port_in_use_fails_and_the_default_moves_on() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = bind_ui(Some(port)).unwrap_err();
        assert!(
            err.contains(&port.to_string()) && err.contains("--port"),
            "{err}"
        );
    }
}
