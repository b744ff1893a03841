//! `ackscope import CAPTURE [-o FILE]`: a tcpdump or Wireshark capture of any TCP conversation
//! turned into a session of `Segment` events (`ackscope_shared::import`, which the page uses
//! too), with the stalls its packets show.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ackscope_shared::attribution::{ClassSummary, StallTally};
use ackscope_shared::import::{
    endpoint, events, import_spec, imported_instruments, scan, unnamed_note, Connection,
    MAX_NAMED_CONNECTIONS,
};
use ackscope_shared::packet_stalls;
use ackscope_shared::wire::{Hello, HostFacts, RunOutcome, ToBrowser};
use ackscope_shared::{RunId, Scenario};

use super::terminal::Printable;
use super::{Ended, Failure};
use crate::record::SessionWriter;

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A pcap or pcapng file (tcpdump -w, Wireshark, dumpcap); `-` reads it from standard
    /// input, as from any pipe (then -o names the session)
    capture: PathBuf,
    /// The session file to write [default: CAPTURE with the extension .ackscope]
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn import(args: &ImportArgs) -> Result<Ended, Failure> {
    let path = &args.capture;
    let stdin = path.as_os_str() == "-";
    let name = if stdin { "standard input".to_string() } else { path.display().to_string() };
    let mut input = if stdin {
        let fd = io::stdin().as_fd().try_clone_to_owned();
        File::from(fd.map_err(|e| format!("cannot read standard input: {e}"))?)
    } else {
        File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?
    };
    let metadata = input.metadata().map_err(|e| format!("cannot read {name}: {e}"))?;
    if metadata.is_dir() {
        return Err(Failure::Usage(format!("{name} is a folder: give a pcap or pcapng file")));
    }
    // A file is read twice, from where it starts; anything else (a pipe, a terminal, a socket)
    // once, into a copy that the second pass reads.
    let seekable = metadata.is_file();
    let output = match (&args.output, seekable && !stdin) {
        (Some(output), _) => output.clone(),
        (None, true) => default_output(path),
        (None, false) => {
            return Err(Failure::Usage(format!(
                "{name} is not a capture file to name the session after (standard input, or a \
                 pipe): name the session file with -o FILE"
            )))
        }
    };
    if is_same_file(&output, &metadata) {
        return Err(Failure::Usage(format!(
            "{}: the session would be written over the capture it is read from; name another \
             file with -o",
            output.display()
        )));
    }

    // Two passes, one packet in memory at a time: the connections first (the session's header
    // names them, and who the client is may show only at the end), then the events, written as
    // they are made.
    let (mut scan, mut capture) = if seekable {
        let start = input.stream_position().map_err(|e| format!("cannot read {name}: {e}"))?;
        let scan = scan(BufReader::new(&input));
        input.seek(SeekFrom::Start(start)).map_err(|e| format!("cannot read {name}: {e}"))?;
        (scan, input)
    } else {
        let copy = spill_file(&output)?;
        let mut spill = Spill { input, copy, error: None };
        let scan = scan(BufReader::new(&mut spill));
        if let Some(e) = spill.error {
            return Err(Failure::Run(format!(
                "cannot keep a copy of {name} beside {} for the second pass over it: {e}; free \
                 some space there, or save the capture to a file and import that file",
                output.display()
            )));
        }
        let mut copy = spill.copy;
        copy.rewind().map_err(|e| format!("cannot read the copy of {name}: {e}"))?;
        (scan, copy)
    };
    if scan.packets == 0 {
        if let Some(error) = &scan.error {
            return Err(Failure::Run(format!("{name}: {error}")));
        }
    }
    let mut writer = SessionWriter::create(&output).map_err(|e| e.to_string())?;
    let run = RunId(1);
    let mut write = |message: ToBrowser| writer.write(&message).map_err(|e| e.to_string());
    write(ToBrowser::Hello(Hello::current(env!("CARGO_PKG_VERSION"), HostFacts::default())))?;
    let spec = Scenario::Import(import_spec(&name, &scan.connections));
    write(ToBrowser::RunStarted { run, spec, instruments: imported_instruments() })?;
    let mut finder = packet_stalls::StallFinder::default();
    let made = events(BufReader::new(&mut capture), &mut scan, &mut finder, |events| {
        write(ToBrowser::Events { run, events })
    })?;
    write(ToBrowser::RunFinished { run, outcome: RunOutcome::Completed })?;
    let mut stalls = StallTally::default();
    finder.finish().iter().for_each(|(stall, ())| stalls.add(stall));

    // The capture's name and the output's are the user's, yet printed as data all the same.
    let mut out = Printable::terminal(io::stdout().lock());
    let _ = writeln!(
        out,
        "imported {} of {} packets from {name} (a packet capture: no syscalls, no TCP_INFO){}",
        scan.packets - scan.skipped,
        scan.packets,
        if scan.skipped > 0 {
            format!("; {} not TCP over IP, skipped", scan.skipped)
        } else {
            String::new()
        }
    );
    print_connections(&mut out, &scan.connections);
    let unnamed = scan.connections.len().saturating_sub(MAX_NAMED_CONNECTIONS);
    if unnamed > 0 {
        let _ = writeln!(out, "{}", unnamed_note(MAX_NAMED_CONNECTIONS, unnamed));
    }
    print_summaries(&mut out, &stalls.summaries());
    let _ = writeln!(out, "wrote {made} segments to {}", output.display());
    match scan.error {
        None => Ok(Ended::Ok),
        Some(error) => Err(Failure::Run(format!(
            "{name}: {error}; the {} packets before it were imported",
            scan.packets
        ))),
    }
}

/// A capture read once from a pipe, copied as it is read into `copy` for the second pass.
/// Memory stays one read's worth; the copy takes the capture's size on disk, beside the
/// session, which takes about as much.
struct Spill {
    input: File,
    copy: File,
    /// Why the copy failed: the read then fails too, which ends the first pass.
    error: Option<io::Error>,
}

impl Read for Spill {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.input.read(buf)?;
        if let Err(e) = self.copy.write_all(&buf[..n]) {
            let error = io::Error::new(e.kind(), e.to_string());
            self.error = Some(e);
            return Err(error);
        }
        Ok(n)
    }
}

/// An empty file beside `output`, readable by this user only: created under a name of its own,
/// then unlinked at once, so that it is gone when the process ends, however it ends.
fn spill_file(output: &Path) -> Result<File, String> {
    let folder = match output.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = format!(".ackscope-import-{}.capture", std::process::id());
    let path = folder.join(name);
    let cannot = |e: io::Error| {
        format!(
            "cannot make a temporary copy of the capture in {} (a pipe is read twice): {e}; give \
             -o a folder you can write, or save the capture to a file and import that",
            folder.display()
        )
    };
    let mut open = std::fs::OpenOptions::new();
    open.read(true).write(true).create_new(true).mode(0o600);
    let file = open.open(&path).map_err(cannot)?;
    // Open, the file stays readable after its name is gone.
    std::fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    Ok(file)
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

/// Whether `output` is the capture, whose metadata is `capture` (a link or another spelling of
/// the path included); a path that does not exist yet is no existing file.
fn is_same_file(output: &Path, capture: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(output).is_ok_and(|o| o.dev() == capture.dev() && o.ino() == capture.ino())
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
