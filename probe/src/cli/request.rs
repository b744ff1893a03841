//! `ackscope show FILE --request N [--run R]`: one request's events, every syscall, sample and
//! segment of it in order, read through the file's block index (docs/FORMAT.md, "The block
//! index"): of a ten-million-request soak, the one slow request without decoding the rest. A
//! file without an index (cut short, rows, an older version) is read whole for it.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use ackscope_shared::wire::seek::{Found, Seeker};
use ackscope_shared::wire::ToBrowser;
use ackscope_shared::{Event, EventKind, RunId};

use super::terminal::Printable;
use super::{Ended, Failure};
use crate::record;

/// At most this many of a request's events are printed (a request of story 1 has a dozen; only
/// a crafted file has more than a few hundred), the rest counted.
const MAX_PRINTED_EVENTS: usize = 10_000;

pub fn show_request(path: &Path, run: Option<u32>, request: u32) -> Result<Ended, Failure> {
    // The file is checked as every reader checks it (its size, its Hello) before it is seeked.
    let mut reader = record::SessionReader::open(path)?;
    let name = path.display().to_string();
    // The run asked for, or the file's first (read from its start, not taken from its index:
    // a first run without an index must not make another run's request N answer).
    let run = match run {
        Some(run) => RunId(run),
        None => first_run(&mut reader).ok_or_else(|| format!("{name} holds no run"))?,
    };
    let file = File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let size = file.metadata().map_err(|e| format!("cannot read {name}: {e}"))?.len();
    let mut read_at = |at: u64, len: usize| {
        // Every length comes from the index's checked claims: a frame or the file's end, each at
        // most 16 MiB.
        let mut bytes = vec![0; len];
        file.read_exact_at(&mut bytes, at)
            .map_err(|e| format!("cannot read {name} at byte {at}: {e}"))?;
        Ok(bytes)
    };
    // Through the index when the file has one that holds; else (none, the run not in it, or a
    // claim of it refused) the file read whole, the first line saying which and why.
    let indexed = match Seeker::open(size, &mut read_at) {
        Ok(Some(seeker)) => {
            seeker.request(run, request, MAX_PRINTED_EVENTS, &mut read_at).unwrap_or_else(|| {
                Err(format!(
                    "run {} has no block index (its events are rows, or more blocks than an \
                     index lists)",
                    run.0
                ))
            })
        }
        Ok(None) => Err("the file has no block index (its events are rows, it was cut short, \
                         written before version 10, or its end is too large to believe)"
            .into()),
        Err(why) => Err(why),
    };
    let mut out = Printable::terminal(io::stdout().lock());
    let mut file_error = None;
    let (mut found, how) = match indexed {
        Ok(found) => {
            let how = format!(
                "read from {} of the run's {} blocks through the file's index",
                found.blocks_read, found.blocks
            );
            (found, how)
        }
        Err(refused) => {
            let found = read_whole(reader, run, request, &mut file_error);
            (found, format!("{refused}: read whole"))
        }
    };
    let damaged =
        |kept: &str| file_error.as_ref().map(|e| Failure::Run(format!("{name}: {e}; {kept}")));
    if found.events.is_empty() {
        return Err(damaged("no event of the request before that point").unwrap_or_else(|| {
            Failure::Run(format!(
                "{name}: run {} holds no event of request {request} ({how}); `ackscope show \
                 {name}` counts its requests",
                found.run.0
            ))
        }));
    }
    let total = found.events.len() as u64 + found.beyond;
    let _ = writeln!(out, "run {}, request {request}: {total} events, {how}", found.run.0);
    print_events(&mut found.events, &mut out);
    if found.beyond > 0 {
        let _ = writeln!(out, "… and {} more events, not printed", found.beyond);
    }
    match damaged("the events above are those before that point") {
        Some(failure) => Err(failure),
        None => Ok(Ended::Ok),
    }
}

/// [`Seeker::request`] of a file without an index: every message read up to a bad frame (whose
/// error is put in `file_error`), the request's events of `run` kept, at most
/// [`MAX_PRINTED_EVENTS`].
fn read_whole(
    mut reader: record::SessionReader,
    run: RunId,
    request: u32,
    file_error: &mut Option<ackscope_shared::wire::WireError>,
) -> Found {
    let mut found = Found::of(run);
    while let Some(()) = reader.with_next_into(file_error, |message| {
        let ToBrowser::Events { run: of, events } = message else { return };
        if *of != run {
            return;
        }
        for event in events.iter().filter(|event| event.req.0 == request) {
            found.keep(event.clone(), MAX_PRINTED_EVENTS);
        }
    }) {}
    found
}

/// The run the file starts first, read from its start (its first messages); `None` if it
/// starts none before its end or a bad frame.
fn first_run(reader: &mut record::SessionReader) -> Option<RunId> {
    let mut error = None;
    loop {
        let started = reader.with_next_into(&mut error, |message| match message {
            ToBrowser::RunStarted { run, .. } => Some(*run),
            _ => None,
        })?;
        if started.is_some() {
            return started;
        }
    }
}

/// One line an event, in the order of their times: its time on the run's clock and from the
/// request's start (or its first event), its side, its connection and what it was. A TCP_INFO
/// sample that reads as the one before it on its side (a blocked call sampled every
/// millisecond) is counted, not printed.
fn print_events(events: &mut [Event], out: &mut impl Write) {
    events.sort_by_key(|event| event.at_ns);
    // From the request's start where the client marked it; the server's wait for it before.
    let start = events.iter().find(|event| matches!(event.kind, EventKind::RequestStart));
    let first = start.or(events.first()).map_or(0, |event| event.at_ns);
    let _ =
        writeln!(out, "{:>14} {:>10}  {:<6} {:>5}  event", "run clock ms", "+ms", "side", "conn");
    let mut last_sample: Vec<((usize, u32), String)> = Vec::new();
    let mut alike = 0u64;
    for event in events.iter() {
        let line = describe(&event.kind);
        if matches!(event.kind, EventKind::TcpInfo(_)) {
            let key = (event.side.index(), event.conn.0);
            match last_sample.iter_mut().find(|(k, _)| *k == key) {
                Some((_, last)) if *last == line => {
                    alike += 1;
                    continue;
                }
                Some((_, last)) => *last = line.clone(),
                None => last_sample.push((key, line.clone())),
            }
        }
        let _ = writeln!(
            out,
            "{:>14.3} {:>+10.3}  {:<6} {:>5}  {line}",
            event.at_ns as f64 / 1e6,
            (event.at_ns as f64 - first as f64) / 1e6,
            event.side.name(),
            event.conn.0,
        );
    }
    if alike > 0 {
        let _ = writeln!(
            out,
            "({alike} TCP_INFO samples that read as the one before them on their side are not printed)"
        );
    }
}

/// An event's kind in a line: a TCP_INFO sample by the fields a stall is read from.
fn describe(kind: &EventKind) -> String {
    match kind {
        EventKind::TcpInfo(sample) => {
            let when = if sample.during_block { "while blocked" } else { "at the call" };
            let notsent = sample.notsent_bytes.map_or("-".to_string(), |b| b.to_string());
            format!(
                "TCP_INFO {when}: rtt {} us, ato {} us, unacked {}, notsent {notsent}, cwnd {}",
                sample.rtt_us, sample.ato_us, sample.unacked, sample.snd_cwnd
            )
        }
        EventKind::BlockedCall { call, since_ns, bytes } => format!(
            "{} returned {bytes} bytes; its thread slept from {:.3} ms (seen in the kernel)",
            call.name(),
            *since_ns as f64 / 1e6
        ),
        other => format!("{other:?}"),
    }
}
