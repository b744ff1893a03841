//! `ackscope import CAPTURE [-o FILE]`: a tcpdump or Wireshark capture of any TCP conversation
//! turned into a session of `Segment` events (`ackscope_shared::import`, which the page uses
//! too), with the stalls its packets show.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ackscope_shared::attribution::{ClassSummary, StallTally};
use ackscope_shared::import::{
    endpoint, events, import_spec, imported_instruments, scan, Connection,
};
use ackscope_shared::packet_stalls;
use ackscope_shared::wire::{Hello, HostFacts, RunOutcome, ToBrowser};
use ackscope_shared::{RunId, Scenario};

use super::{Ended, Failure};
use crate::record::SessionWriter;

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A pcap or pcapng file (tcpdump -w, Wireshark, dumpcap)
    capture: PathBuf,
    /// The session file to write [default: CAPTURE with the extension .ackscope]
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn import(args: &ImportArgs) -> Result<Ended, Failure> {
    let path = &args.capture;
    let open = || {
        std::fs::File::open(path)
            .map(io::BufReader::new)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    // Two passes over the file, one packet in memory at a time: the connections first (the
    // session's header names them), then the events, written as they are made.
    let mut scan = scan(open()?);
    if scan.packets == 0 {
        if let Some(error) = &scan.error {
            return Err(Failure::Run(format!("{}: {error}", path.display())));
        }
    }
    let output = args.output.clone().unwrap_or_else(|| default_output(path));
    if is_same_file(&output, path) {
        return Err(Failure::Usage(format!(
            "{}: the session would be written over the capture it is read from; name another \
             file with -o",
            output.display()
        )));
    }
    let mut writer = SessionWriter::create(&output).map_err(|e| e.to_string())?;
    let run = RunId(1);
    let mut write = |message: ToBrowser| writer.write(&message).map_err(|e| e.to_string());
    write(ToBrowser::Hello(Hello::current(env!("CARGO_PKG_VERSION"), HostFacts::default())))?;
    let spec = Scenario::Import(import_spec(&path.display().to_string(), &scan.connections));
    write(ToBrowser::RunStarted { run, spec, instruments: imported_instruments() })?;
    let mut finder = packet_stalls::StallFinder::default();
    let made =
        events(open()?, &mut scan, &mut finder, |events| write(ToBrowser::Events { run, events }))?;
    write(ToBrowser::RunFinished { run, outcome: RunOutcome::Completed })?;
    let mut stalls = StallTally::default();
    finder.finish().iter().for_each(|(stall, ())| stalls.add(stall));

    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "imported {} of {} packets from {} (a packet capture: no syscalls, no TCP_INFO){}",
        scan.packets - scan.skipped,
        scan.packets,
        path.display(),
        if scan.skipped > 0 {
            format!("; {} not TCP over IP, skipped", scan.skipped)
        } else {
            String::new()
        }
    );
    print_connections(&mut out, &scan.connections);
    print_summaries(&mut out, &stalls.summaries());
    let _ = writeln!(out, "wrote {made} segments to {}", output.display());
    match scan.error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!(
            "{}: {error}; the {} packets before it were imported",
            path.display(),
            scan.packets
        ))),
    }
}

/// `CAPTURE.ackscope` beside the capture, or `CAPTURE.imported.ackscope` when the capture is
/// itself named `.ackscope`: the default never names the input.
fn default_output(capture: &Path) -> PathBuf {
    if capture.extension().is_some_and(|ext| ext == "ackscope") {
        capture.with_extension("imported.ackscope")
    } else {
        capture.with_extension("ackscope")
    }
}

/// Whether `a` and `b` are one file (a link or another spelling of the path included); a path
/// that does not exist yet is no existing file.
fn is_same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

pub fn print_connections(out: &mut impl Write, connections: &[Connection]) {
    for (i, c) in connections.iter().enumerate() {
        let _ = writeln!(
            out,
            "conn {}: client {} -> server {} (client by {}), {} segments, {} bytes client->server, \
             {} bytes server->client",
            i + 1,
            endpoint(c.client),
            endpoint(c.server),
            c.told_by,
            c.segments,
            c.bytes[0],
            c.bytes[1]
        );
    }
}

/// The stall classes of an import, or that there were none.
pub fn print_summaries(out: &mut impl Write, classes: &[ClassSummary]) {
    if classes.is_empty() {
        let _ = writeln!(out, "no stalls seen in the packets");
        return;
    }
    for class in classes {
        let _ = writeln!(out, "{}", class.line());
    }
}
