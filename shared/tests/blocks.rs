//! Version 9 writes a file's events in blocks of columns where every version before wrote rows:
//! every file an earlier version wrote (the golden files) and every lesson's recording, its
//! events rewritten as blocks, reads back to the same messages and the same analysis.

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

/// `messages` as version 9 writes them: the Hello of version 9, and the events of each run
/// gathered into blocks until another message comes (the probe also writes a block once its
/// first event is a second old).
fn as_blocks(messages: &[ToBrowser]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut gathered: Vec<(RunId, Vec<Event>)> = Vec::new();
    let write_gathered = |gathered: &mut Vec<(RunId, Vec<Event>)>, out: &mut Vec<u8>| {
        for (run, events) in gathered.drain(..) {
            wire::write_blocks(run, &events, &mut wire::zstd, out);
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
                write_gathered(&mut gathered, &mut out);
                let hello = wire::Hello { protocol_version: PROTOCOL_VERSION, ..hello.clone() };
                wire::write_frame(&ToBrowser::Hello(hello), &mut out);
            }
            other => {
                write_gathered(&mut gathered, &mut out);
                wire::write_frame(other, &mut out);
            }
        }
    }
    write_gathered(&mut gathered, &mut out);
    out
}

/// Each run's events, and the other messages in order (the Hello without its version).
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
        wire::write_blocks(*run, third, &mut wire::zstd, &mut file);
    }
    let cut = third_starts + (file.len() - third_starts) / 2;
    let (read_back, error) = read(&file[..cut]);
    assert_eq!(error, Some(WireError::Truncated { offset: third_starts }));
    let whole_blocks = thirds[0].len() + thirds[1].len();
    assert_eq!(contents(&read_back).0[run], events[..whole_blocks]);
}
