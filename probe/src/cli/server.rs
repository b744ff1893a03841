//! `ackscope server --listen ADDR`: the echo server alone, so that a client written by anyone,
//! in any language, speaking docs/PROTOCOL.md, can be observed from the server's side; and the
//! server side of runs another host's probe drives with `ackscope run --remote` (docs/REMOTE.md),
//! for whoever holds the token it prints.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use ackscope_shared::spec::MAX_BODY_BYTES;
use ackscope_shared::wire::{Hello, Instruments, RunOutcome, ToBrowser};
use ackscope_shared::{RrSpec, RunId, Scenario, Side};

use super::knobs::{self, BulkKnobs, CommonKnobs, RrKnobs};
use super::run::{finish_file, print_summary, Tally};
use super::terminal::{announce, Printable};
use super::{Ended, Failure};
use crate::net::echo::{EchoAccess, EchoConfig, EchoServer, Tagging, DEFAULT_MAX_CONNECTIONS};
use crate::net::options::SideOptions;
use crate::net::record::Clock;
use crate::record::{SessionWriter, SharedWriter};
use crate::remote::{self, host::ControlHost, host::MAX_RUN, host::MAX_RUN_LIMIT};
use crate::{host, interrupt};

#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// Address to listen on, e.g. 127.0.0.1:9000 (port 0: any free port)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the session to FILE (finished cleanly on Ctrl-C)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Largest length prefix accepted; a larger one closes that connection
    #[arg(long, value_name = "BYTES", default_value_t = MAX_BODY_BYTES)]
    max_body: u32,
    /// On Ctrl-C, print the summary as one JSON object instead of the table (docs/CLI.md)
    #[arg(long)]
    json: bool,
    /// Connections served at once; another is closed as soon as it comes, with a log line
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Close a connection that sends nothing for this many seconds (0: never)
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    idle_timeout: u64,
    /// The token remote probes must give (`ackscope run --remote ADDR --token T`); 16 to 128
    /// characters [default: a fresh random one, printed at start]
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// The longest a remote run may last, 1 to 3600 seconds; one that asks for longer is
    /// refused, one that goes on longer is stopped and keeps what it recorded
    #[arg(long, value_name = "SECONDS", default_value_t = MAX_RUN.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=MAX_RUN_LIMIT.as_secs()))]
    max_run: u64,
    #[command(flatten)]
    rr: RrKnobs,
    #[command(flatten)]
    common: CommonKnobs,
}

pub fn run(args: &ServerArgs) -> Result<Ended, Failure> {
    // The server-side knobs are the rr ones (--nodelay server, --cork server, --think-us, ...).
    let mut scenario = Scenario::Server(RrSpec::default());
    knobs::apply(&mut scenario, &args.rr, &BulkKnobs::default(), &args.common)
        .map_err(|flag| Failure::Usage(format!("{} does not apply to the server", flag.0)))?;
    scenario
        .validate()
        .map_err(|e| Failure::Usage(format!("{}: {}", knobs::flag_of(e.field), e.problem)))?;
    let Scenario::Server(spec) = &scenario else { unreachable!("built as a server spec above") };
    // Before the address is announced: whoever reads it may stop the server at once.
    let stop = interrupt::install();
    let instruments = Instruments::default();
    let token = match &args.token {
        Some(token) => {
            remote::check_token(token)
                .map_err(|problem| Failure::Usage(format!("--token: {problem}")))?;
            token.clone()
        }
        None => remote::new_token().map_err(|e| format!("making a token: {e}"))?,
    };
    let mut file = match &args.output {
        Some(path) => Some(SessionWriter::create(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let run = RunId(1);
    let write = |file: &mut Option<SessionWriter>, message: ToBrowser| -> Result<(), String> {
        match file {
            Some(writer) => writer.write(&message).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    };
    let hello = Hello::current(env!("CARGO_PKG_VERSION"), host::facts());
    write(&mut file, ToBrowser::Hello(hello))?;
    write(&mut file, ToBrowser::RunStarted { run, spec: scenario.clone(), instruments })?;
    // From here the server's own run and the remote runs share the file.
    let file = Arc::new(SharedWriter::new(file));
    let remote_stop = Arc::new(AtomicBool::new(false));
    let control = Arc::new(ControlHost::new(
        token.clone(),
        Arc::clone(&file),
        Arc::clone(&remote_stop),
        Duration::from_secs(args.max_run),
    ));
    let config = EchoConfig {
        opts: SideOptions::rr(spec, Side::Server),
        max_body_bytes: args.max_body,
        response_bytes: spec.response_bytes,
        think: Duration::from_micros(u64::from(spec.think_us)),
        instruments,
        max_connections: args.max_connections,
        idle_timeout: (args.idle_timeout > 0).then(|| Duration::from_secs(args.idle_timeout)),
    };
    let (sink, batches) = sync_channel(1024);
    let server = EchoServer::start(
        args.listen,
        config,
        Clock::start(),
        Tagging::standalone(
            Some(control.handler()),
            EchoAccess::for_listener(args.listen, Some(Arc::from(token.as_str()))),
        ),
        Some(sink),
    )
    .map_err(|e| e.to_string())?;
    announce(format_args!("ackscope echo server on {} (Ctrl-C to stop and save)", server.addr()));
    announce(format_args!("token {token}"));
    announce(format_args!(
        "remote runs: ackscope run rr --remote {} --token {token}",
        shown_address(server.addr())
    ));
    if !server.addr().ip().is_loopback() {
        announce(format_args!(
            "  (not on loopback: runs need the token, and so do echo clients, which open the \
             connection with ACKT, the token and a newline: docs/PROTOCOL.md)"
        ));
    }
    let mut tally = Tally::new(&scenario);
    let mut server = Some(server);
    let mut stopping: Option<std::thread::JoinHandle<()>> = None;
    loop {
        match batches.recv_timeout(Duration::from_millis(100)) {
            Ok(events) => {
                tally.push(&events);
                if let Some(error) = file.write_events(run, events) {
                    let mut stderr = Printable::terminal(std::io::stderr().lock());
                    let _ = writeln!(stderr, "ackscope: {error}; stopping");
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // A recording server whose recording fails (a full disk; its own write or a remote
        // run's) stops as on Ctrl-C, rather than serving on with nothing kept.
        if stop.load(Ordering::Relaxed) || file.failed() {
            remote_stop.store(true, Ordering::SeqCst);
            // Closing the server joins its connection threads, which may be waiting to hand
            // events to this loop: it is done elsewhere while this loop drains, so it cannot
            // wait on itself. The loop ends when the last sender has gone.
            if let Some(server) = server.take() {
                stopping = Some(std::thread::spawn(move || server.shutdown()));
            }
        }
    }
    if let Some(stopping) = stopping {
        let _ = stopping.join();
    }
    let outcome = RunOutcome::Interrupted;
    let (writer, write_error) = file.take();
    let write_error = finish_file(writer, write_error, run, &outcome, &tally);
    eprintln!("ackscope: stopped; {} events recorded", tally.run.events);
    // The clients are not recorded: the summary is the server's view of their requests.
    print_summary(&tally, &scenario, &outcome, args.json)?;
    if let (Some(message), Some(path)) = (write_error, &args.output) {
        return Err(Failure::Run(format!(
            "the session file is incomplete: {message}; {} holds every message written before \
             the error",
            path.display()
        )));
    }
    // The server serves until it is stopped: by Ctrl-C or SIGTERM (exit 130, as a run), or by
    // its recording failing (an error above).
    Ok(Ended::Interrupted)
}

/// The address to give remote probes: a wildcard listener is reached at one of the host's own
/// addresses, which this cannot know, so it says so.
fn shown_address(addr: SocketAddr) -> String {
    match addr.ip().is_unspecified() {
        true => format!("THIS_HOST:{}", addr.port()),
        false => addr.to_string(),
    }
}
