//! The command line.
//!
//! ```text
//! ackscope [--port PORT]                 serve the web app on 127.0.0.1
//! ackscope run SCENARIO [knobs]          run headless: rr, bulk or a preset (story1, ...)
//! ackscope server --listen ADDR          the echo server alone, recording its side
//! ackscope show FILE                     a session file's summary
//! ackscope export FILE --json            a session file as plain JSON
//! ackscope export FILE --pcapng OUT      its captured segments as pcapng, stalls as comments
//! ackscope export FILE --perfetto OUT    a Chrome trace-event JSON for ui.perfetto.dev
//! ackscope export FILE --rows OUT        a session file older builds read (version 8)
//! ackscope import CAPTURE [-o FILE]      a pcap/pcapng capture as a session, with its stalls
//! ackscope watch --port PORT [-o FILE]   another program's connections on a port, explained live
//! ```
//!
//! Exit codes: 0 success, 1 the run or the server failed, 2 the command line was wrong,
//! 130 the run was interrupted with Ctrl-C (its session file is complete).

mod classroom;
mod import;
mod knobs;
mod lesson;
mod link;
mod perfetto;
mod request;
mod run;
mod serve_ui;
mod server;
mod show;
mod sweep;
mod terminal;
mod watch;

use std::io::{self, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use knobs::flag_of;

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
    Run(Box<run::RunArgs>),
    /// Run the echo server alone and record its side of every connection, until Ctrl-C; it also
    /// runs the server side of `ackscope run --remote` from another host
    Server(Box<server::ServerArgs>),
    /// Hold an emulated link between two network namespaces that other processes join (e.g. a
    /// server and a `run --remote` across a real delay on one machine), until Ctrl-C
    Link(link::LinkArgs),
    /// Print the summary of a session file, or one request's events
    Show {
        /// A session file written with -o
        file: PathBuf,
        /// Print this request's events instead (every syscall, TCP_INFO sample and segment, in
        /// order), read through the file's block index without decoding the rest
        #[arg(long, value_name = "N")]
        request: Option<u32>,
        /// The run of that request (a session of several runs); the first run by default
        #[arg(long, value_name = "R", requires = "request")]
        run: Option<u32>,
    },
    /// Write a session file in another format
    #[command(group(
        clap::ArgGroup::new("format").required(true).args(["json", "pcapng", "perfetto", "rows"])
    ))]
    Export {
        /// A session file written with -o
        file: PathBuf,
        /// As one JSON document on standard output
        #[arg(long)]
        json: bool,
        /// Its captured segments as a pcapng file (headers only), each stall's explanation as
        /// the comment of the packet that ended it
        #[arg(long, value_name = "OUT")]
        pcapng: Option<PathBuf>,
        /// As a Chrome trace-event JSON file for ui.perfetto.dev or chrome://tracing: a process
        /// per run, a thread per connection side with its syscalls and stalls as slices,
        /// TCP_INFO as counters (docs/CLI.md)
        #[arg(long, value_name = "OUT.json")]
        perfetto: Option<PathBuf>,
        /// As a session file of protocol version 8, its events as rows instead of compressed
        /// blocks: for ackscope builds older than version 9, which cannot read blocks
        #[arg(long, value_name = "OUT")]
        rows: Option<PathBuf>,
    },
    /// Turn a pcap or pcapng capture of TCP connections into a session file, with its stalls
    Import(import::ImportArgs),
    /// Watch another program's connections to or from a port of this host, explain their
    /// waits as they happen, and print the summary on Ctrl-C (packets need CAP_NET_RAW)
    Watch(Box<watch::WatchArgs>),
    /// Serve the web app to a class: every page follows the presenter's lesson step
    Class(classroom::ClassArgs),
    /// Record every step of lessons (lessons/*.lesson) that runs something, for the web app to
    /// play without a probe
    RecordLesson(lesson::RecordLessonArgs),
    /// Lessons (lessons/*.lesson): `lesson check FILE...` checks them before class
    Lesson {
        #[command(subcommand)]
        command: lesson::LessonCommand,
    },
}

/// How a command ended, for the exit code.
pub enum Ended {
    Ok,
    Interrupted,
    /// Exit with this status: the command `watch -- COMMAND` started, whose status it is.
    Status(u8),
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Usage errors exit 2 and name the flag; --help and --version exit 0.
        Err(e) => e.exit(),
    };
    tracing_subscriber::fmt()
        // A log line may quote a peer (a request's path, a refusal's reason): printed as data,
        // so without the subscriber's own colours, which are control sequences too.
        .with_writer(|| terminal::Printable::terminal(io::stderr()))
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ACKSCOPE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // A file-size limit (RLIMIT_FSIZE) would otherwise kill the process with SIGXFSZ mid-write;
    // ignored, the write fails with EFBIG like any full disk, and the run reports it and keeps
    // what was written.
    // SAFETY: setting a signal to be ignored has no handler to be unsafe in.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    if matches!(cli.command, Some(Command::Show { .. } | Command::Export { .. })) {
        crate::record::keep_freed_memory_for_reading();
    }
    let result = match cli.command {
        None => serve_ui::serve(cli.port),
        Some(Command::Run(args)) => run::run(&args),
        Some(Command::Server(args)) => server::run(&args),
        Some(Command::Link(args)) => link::link(&args),
        Some(Command::Show { file, request: Some(request), run }) => {
            request::show_request(&file, run, request)
        }
        Some(Command::Show { file, .. }) => show::show(&file),
        Some(Command::Export { file, pcapng: Some(out), .. }) => show::export_pcapng(&file, &out),
        Some(Command::Export { file, perfetto: Some(out), .. }) => perfetto::export(&file, &out),
        Some(Command::Export { file, rows: Some(out), .. }) => show::export_rows(&file, &out),
        Some(Command::Export { file, .. }) => show::export_json(&file),
        Some(Command::Import(args)) => import::import(&args),
        Some(Command::Watch(args)) => watch::watch(&args),
        Some(Command::RecordLesson(args)) => lesson::record(&args),
        Some(Command::Lesson { command }) => lesson::lesson(&command),
        Some(Command::Class(args)) => classroom::class(&args),
    };
    // An error may quote what a file or a remote host said (a refusal's reason, a version): it
    // is printed as data, never as commands to the terminal.
    let error = |message: String| {
        let mut stderr = terminal::Printable::terminal(io::stderr().lock());
        let _ = writeln!(stderr, "ackscope: {message}");
    };
    match result {
        Ok(Ended::Ok) => ExitCode::SUCCESS,
        Ok(Ended::Interrupted) => ExitCode::from(130),
        Ok(Ended::Status(status)) => ExitCode::from(status),
        Err(Failure::Usage(message)) => {
            error(message);
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            error(message);
            ExitCode::FAILURE
        }
    }
}

/// `show` and `export --json` of `data` as a session file, their output thrown away: the body
/// of the `show_pipeline` fuzz target ([`crate::fuzzing`]).
pub(crate) fn show_and_export(data: &[u8]) {
    let open = || crate::record::SessionReader::from_reader(data, data.len() as u64, "input");
    if let Ok(reader) = open() {
        let _ = show::show_from(reader, &mut terminal::Printable::terminal(io::sink()));
    }
    if let Ok(reader) = open() {
        let _ = show::export_json_from(reader, &mut io::sink());
    }
}

/// Why a command failed: the user's input (exit 2) or the run (exit 1).
pub enum Failure {
    Usage(String),
    Run(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Run(message)
    }
}
