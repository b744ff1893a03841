//! Version 9 writes a file's events in blocks of columns where every version before wrote rows,
//! and version 10 indexes them at the file's end: every file an earlier version wrote (the
//! golden files) and every lesson's recording, its events rewritten as blocks, reads back to the
//! same messages and the same analysis, and each request read through the index alone is the
//! request the whole file holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ackscope_shared::export_json::write_export_json;
use ackscope_shared::wire::{self, FrameStream, ToBrowser, WireError, PROTOCOL_VERSION};
use ackscope_shared::{Event, RunId};

fn read(bytes: &[u8]) -> (Vec<ToBrowser>, Option<WireError>) {
    let mut stream = FrameStream::new();
    stream.push(bytes);
    let mut messages = Vec::new();
    while let Some(message) = stream.next_message() {
        match message {
            Ok(message) => messages.push(message),
            Err(e) => return (messages, Some(e)),
        }
    }
    (messages, stream.finish())
}

/// `messages` as this version writes them: the Hello of this version, the events of each run
/// gathered into blocks until another message comes (the probe also writes a block once its
/// first event is a second old), and a finished file's end with each run's block index.
fn as_blocks(messages: &[ToBrowser]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut gathered: Vec<(RunId, Vec<Event>)> = Vec::new();
    let mut index = wire::Indexer::default();
    let mut overviews = Vec::new();
    let write_gathered =
        |gathered: &mut Vec<(RunId, Vec<Event>)>, out: &mut Vec<u8>, index: &mut wire::Indexer| {
            for (run, events) in gathered.drain(..) {
                wire::write_blocks(run, &events, &mut wire::zstd, out, index);
            }
        };
    for message in messages {
        match message {
            ToBrowser::Events { run, events } => {
                match gathered.iter_mut().find(|(r, _)| r == run) {
                    Some((_, gathering)) => gathering.extend(events.iter().cloned()),
                    None => gathered.push((*run, events.clone())),
                }
            }
            ToBrowser::Hello(hello) => {
                write_gathered(&mut gathered, &mut out, &mut index);
                let hello = wire::Hello { protocol_version: PROTOCOL_VERSION, ..hello.clone() };
                wire::write_frame(&ToBrowser::Hello(hello), &mut out);
            }
            ToBrowser::Overview { run, overview } => {
                write_gathered(&mut gathered, &mut out, &mut index);
                overviews.push((*run, overview.clone()));
            }
            ToBrowser::Trailer(_) => {
                write_gathered(&mut gathered, &mut out, &mut index);
                wire::write_file_end(std::mem::take(&mut overviews), &index, &mut out);
            }
            other => {
                write_gathered(&mut gathered, &mut out, &mut index);
                wire::write_frame(other, &mut out);
            }
        }
    }
    write_gathered(&mut gathered, &mut out, &mut index);
    out
}

/// Each run's events, and the other messages in order (the Hello without its version, the
/// trailer without the count of bytes it ends, which the index adds to).
fn contents(messages: &[ToBrowser]) -> (BTreeMap<RunId, Vec<Event>>, Vec<ToBrowser>) {
    let mut events: BTreeMap<RunId, Vec<Event>> = BTreeMap::new();
    let mut others = Vec::new();
    for message in messages {
        match message {
            ToBrowser::Events { run, events: batch } => {
                events.entry(*run).or_default().extend(batch.iter().cloned())
            }
            ToBrowser::Hello(hello) => {
                others.push(ToBrowser::Hello(wire::Hello { protocol_version: 0, ..hello.clone() }))
            }
            ToBrowser::Trailer(_) => others.push(ToBrowser::Trailer(wire::Trailer::new(0))),
            other => others.push(other.clone()),
        }
    }
    (events, others)
}

/// The runs' analysis as `export --json` writes it.
fn analysis(messages: &[ToBrowser]) -> serde_json::Value {
    let mut json = Vec::new();
    write_export_json(messages.iter().cloned().map(Ok), &mut json).unwrap();
    let document: serde_json::Value = serde_json::from_slice(&json).unwrap();
    document["runs"].clone()
}

fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let golden =
        (1..PROTOCOL_VERSION).map(|v| root.join(format!("tests/golden/session-v{v}.ackscope")));
    let recordings = std::fs::read_dir(root.join("../lessons/recordings"))
        .expect("the lessons' recordings are checked in")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "ackscope"));
    golden.chain(recordings).collect()
}

#[test]
fn every_older_file_and_lesson_recording_reads_the_same_from_blocks() {
    let files = files();
    assert!(files.len() > 20, "{} files", files.len());
    for file in files {
        let rows = std::fs::read(&file).unwrap();
        let (before, error) = read(&rows);
        assert_eq!(error, None, "{}", file.display());
        let blocks = as_blocks(&before);
        let (after, error) = read(&blocks);
        assert_eq!(error, None, "{} as blocks", file.display());
        assert_eq!(contents(&after), contents(&before), "{}", file.display());
        assert_eq!(analysis(&after), analysis(&before), "{}", file.display());
        let batches = after.iter().filter_map(|m| match m {
            ToBrowser::Events { events, .. } => Some(events.len()),
            _ => None,
        });
        assert!(batches.into_iter().all(|len| (1..=wire::EVENTS_PER_MESSAGE).contains(&len)));
        // Smaller, but for the smallest files (a block's directory and its frames' headers
        // take a few hundred bytes); story 1's recording a third of its rows at most.
        if rows.len() > 20_000 {
            assert!(blocks.len() * 2 < rows.len(), "{}: {} bytes", file.display(), blocks.len());
        }
        if file.ends_with("forty-ms-1.ackscope") {
            assert!(blocks.len() * 3 < rows.len(), "story 1: {} bytes", blocks.len());
        }
    }
}

/// Every finished file's runs, rewritten as this version writes them, are indexed: their first,
/// middle and last requests read through the index are the events the whole file holds for
/// them, from fewer blocks than the run has where it has more than two.
#[test]
fn every_request_read_through_the_index_is_the_one_the_file_holds() {
    let mut runs_indexed = 0;
    for file in files() {
        let (messages, _) = read(&std::fs::read(&file).unwrap());
        if !messages.iter().any(|m| matches!(m, ToBrowser::Trailer(_))) {
            continue;
        }
        let blocks = as_blocks(&messages);
        let mut read_at = |at: u64, len: usize| {
            let at = at as usize;
            blocks.get(at..at + len).map(<[u8]>::to_vec).ok_or_else(|| "past the end".into())
        };
        let seeker = wire::seek::Seeker::open(blocks.len() as u64, &mut read_at)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .unwrap_or_else(|| panic!("{}: a finished file of blocks is indexed", file.display()));
        let events = contents(&messages).0;
        let indexed: Vec<(RunId, u64)> =
            seeker.runs().map(|index| (index.run, index.requests())).collect();
        assert_eq!(indexed.len(), events.len(), "{}: every run with events", file.display());
        for (run, requests) in indexed {
            runs_indexed += 1;
            for request in [0, requests / 2, requests - 1] {
                let request = request as u32;
                let found =
                    seeker.request(run, request, usize::MAX, &mut read_at).unwrap().unwrap();
                let expected: Vec<&Event> =
                    events[&run].iter().filter(|e| e.req.0 == request).collect();
                assert_eq!(found.events.iter().collect::<Vec<_>>(), expected, "{}", file.display());
                if found.blocks > 2 {
                    assert!(found.blocks_read < found.blocks, "{}: {found:?}", file.display());
                }
            }
        }
    }
    assert!(runs_indexed > 20, "{runs_indexed} runs indexed");
}

#[test]
fn a_file_cut_inside_a_block_opens_up_to_its_last_whole_block() {
    let recording =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../lessons/recordings/forty-ms-1.ackscope");
    let (messages, _) = read(&std::fs::read(recording).unwrap());
    let (ToBrowser::Hello(_), ToBrowser::RunStarted { run, .. }) = (&messages[0], &messages[1])
    else {
        panic!("a recording starts with its Hello and its run's start")
    };
    let events: Vec<Event> = contents(&messages).0.remove(run).unwrap();
    assert!(events.len() > 30, "{} events", events.len());
    // Three blocks of a third of the events each, the file cut in the middle of the third.
    let mut file = Vec::new();
    wire::write_frame(&messages[0], &mut file);
    wire::write_frame(&messages[1], &mut file);
    let thirds: Vec<&[Event]> = events.chunks(events.len().div_ceil(3)).collect();
    let mut third_starts = 0;
    for third in &thirds {
        third_starts = file.len();
        wire::write_blocks(*run, third, &mut wire::zstd, &mut file, &mut Default::default());
    }
    let cut = third_starts + (file.len() - third_starts) / 2;
    let (read_back, error) = read(&file[..cut]);
    assert_eq!(error, Some(WireError::Truncated { offset: third_starts }));
    let whole_blocks = thirds[0].len() + thirds[1].len();
    assert_eq!(contents(&read_back).0[run], events[..whole_blocks]);
}
