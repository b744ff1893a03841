//! Session files: the probe's stream written to disk (docs/PROTOCOL.md, "Versioning and files").
//!
//! A file is the same messages as the live WebSocket, each preceded by its length as a 4-byte
//! little-endian integer ([`ackscope_shared::wire::FrameStream`]); the first is a Hello. Decoding
//! is a pure function here; reading a `File`, fetching a URL and saving a download live in
//! [`crate::files`].

use std::fmt;

use ackscope_shared::wire::{FrameStream, ToBrowser, WireError};
use ackscope_shared::{Event, EventKind, RunId};

/// The name Download gives the live session.
pub const DOWNLOAD_NAME: &str = "ackscope-session.ackscope";

/// Files larger than this are refused before a byte is read. A file is read and decoded in chunks,
/// but what it decodes to stays: about 1.4 times the file's size in the page's WebAssembly memory
/// (measured on a million-request session, docs/BENCHMARKS-LOG.md), whose 32-bit address space a
/// few such files would fill.
pub const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// At most this many events are decoded from one file: what the page holds of them takes about
/// 13.5 bytes an event (a million-request session's 15 million events, 204 MB; docs/BENCHMARKS.md),
/// so this is about 650 MB. [`MAX_FILE_BYTES`] bounds a file of rows before it is read; a file of
/// compressed blocks (version 9) holds about 8 times its size once read, so its events are
/// counted as they are decoded.
pub const MAX_FILE_EVENTS: u64 = 48_000_000;

/// What a file's decoder found wrong with it, said as the page says it: the page's own decoder's
/// [`FileError`], or the one the decoder's worker sent (`crate::decode_worker`).
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub text: String,
    /// The file held more events than a page keeps ([`FileError::TooManyEvents`]).
    pub too_many: bool,
}

impl From<FileError> for Problem {
    fn from(error: FileError) -> Problem {
        Problem {
            too_many: matches!(error, FileError::TooManyEvents { .. }),
            text: error.to_string(),
        }
    }
}

/// Why a file's messages end before its last byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileError {
    Empty,
    /// A bad frame, or a first message that is not a Hello this build reads.
    Wire(WireError),
    /// More events than the page holds ([`MAX_FILE_EVENTS`]): those before are kept.
    TooManyEvents {
        kept: u64,
    },
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Empty => {
                f.write_str("the file is empty; a session file starts with a Hello")
            }
            FileError::Wire(error) => error.fmt(f),
            FileError::TooManyEvents { kept } => write!(
                f,
                "the page holds a file's first {kept} events (about {} MB of its memory) and \
                 this file has more: read it whole with `ackscope show FILE`, one request of it \
                 with `ackscope show FILE --request N`, or record a shorter run (a smaller \
                 --count or --duration)",
                kept * 27 / 2_000_000
            ),
        }
    }
}

/// Decodes a session file as its bytes arrive, in pieces of any size: a big file is read and
/// decoded chunk by chunk, so it never has to be held whole. Stops at the first bad frame; a
/// file of another protocol version yields no messages (its later frames could decode as
/// valid-looking garbage).
#[derive(Debug)]
pub struct SessionDecoder {
    stream: FrameStream,
    messages: u64,
    events: u64,
    max_events: u64,
    error: Option<FileError>,
    /// A file read from a request: its run, and the first request held ([`Self::reading_from`]).
    from: Option<(RunId, u32)>,
}

impl Default for SessionDecoder {
    fn default() -> Self {
        SessionDecoder::with_max_events(MAX_FILE_EVENTS)
    }
}

impl SessionDecoder {
    /// A decoder that stops after `max_events` events ([`MAX_FILE_EVENTS`] by default).
    pub fn with_max_events(max_events: u64) -> SessionDecoder {
        SessionDecoder {
            stream: FrameStream::default(),
            messages: 0,
            events: 0,
            max_events,
            error: None,
            from: None,
        }
    }

    /// A decoder of a file read from request `first` of run `run` (the blocks before it left
    /// unread): the run's events of earlier requests in the blocks read are left out, but the
    /// clocks matched (`ClockSync`, which its analysis needs), and so are other runs' messages.
    /// What is left out is not counted against `max_events`.
    pub fn reading_from(max_events: u64, run: RunId, first: u32) -> SessionDecoder {
        SessionDecoder { from: Some((run, first)), ..SessionDecoder::with_max_events(max_events) }
    }

    /// Hands every whole message in `bytes` (with what came before) to `apply`.
    pub fn feed(&mut self, bytes: &[u8], apply: impl FnMut(ToBrowser)) {
        self.feed_some(bytes, usize::MAX, apply);
    }

    /// [`SessionDecoder::feed`], stopping once `events` events have been handed to `apply` in
    /// this call: true if whole messages are left, for the next call (with no bytes, or more).
    /// A block of a file's events is up to 65,536 of them, and handed on whole it made a task
    /// of 50-80 ms in the page.
    pub fn feed_some(
        &mut self,
        bytes: &[u8],
        events: usize,
        mut apply: impl FnMut(ToBrowser),
    ) -> bool {
        if self.error.is_some() {
            return false;
        }
        self.stream.push(bytes);
        let mut handed = 0;
        while handed < events {
            let message = match self.stream.next_message() {
                None => return false,
                Some(Ok(message)) => message,
                Some(Err(error)) => {
                    self.error = Some(FileError::Wire(error));
                    return false;
                }
            };
            let Some(message) = self.held(message) else { continue };
            let batch = match &message {
                ToBrowser::Events { events, .. } => events.len(),
                _ => 0,
            };
            if self.events + batch as u64 > self.max_events {
                self.error = Some(FileError::TooManyEvents { kept: self.events });
                return false;
            }
            self.events += batch as u64;
            handed += batch;
            self.messages += 1;
            apply(message);
        }
        true
    }

    /// `message` as a file read from a request holds it (see [`Self::reading_from`]); `None`
    /// when none of it is held.
    fn held(&self, message: ToBrowser) -> Option<ToBrowser> {
        let Some((from, first)) = self.from else { return Some(message) };
        match message {
            ToBrowser::Events { run, mut events } if run == from => {
                let kept = |event: &Event| {
                    event.req.0 >= first || matches!(event.kind, EventKind::ClockSync { .. })
                };
                events.retain(kept);
                Some(ToBrowser::Events { run, events })
            }
            message if message.run().is_some_and(|run| run != from) => None,
            message => Some(message),
        }
    }

    /// Whether it has stopped at a bad frame or at its events' bound: it hands on nothing more,
    /// so the rest of the file need not be read.
    pub fn stopped(&self) -> bool {
        self.error.is_some()
    }

    /// The file ended: what was wrong with it, if anything.
    pub fn finish(&mut self) -> Option<FileError> {
        self.error
            .take()
            .or_else(|| self.stream.finish().map(FileError::Wire))
            .or_else(|| (self.messages == 0).then_some(FileError::Empty))
    }
}

/// Every message up to the first bad frame, and what was wrong with it.
pub fn decode_session(bytes: &[u8]) -> (Vec<ToBrowser>, Option<FileError>) {
    let mut decoder = SessionDecoder::default();
    let mut messages = Vec::new();
    decoder.feed(bytes, |message| messages.push(message));
    let problem = decoder.finish();
    (messages, problem)
}

/// Why a file of `len_bytes` is not opened, if it is too large.
pub fn refuse_size(len_bytes: u64) -> Option<String> {
    (len_bytes > MAX_FILE_BYTES).then(|| {
        format!(
            "{:.1} MiB is over the {} MiB this page opens (it holds about 1.4 times a file's size once read); record a shorter run (a smaller --count or --duration), or read it with `ackscope show`",
            len_bytes as f64 / (1024.0 * 1024.0),
            MAX_FILE_BYTES / (1024 * 1024)
        )
    })
}

/// Whether a file that begins with `first` (its first four bytes at least) is a pcap or pcapng
/// capture (tcpdump -w, Wireshark, dumpcap) rather than a session file.
pub fn is_capture(first: &[u8]) -> bool {
    const MAGICS: [[u8; 4]; 5] = [
        [0xd4, 0xc3, 0xb2, 0xa1], // pcap, microseconds, little-endian
        [0xa1, 0xb2, 0xc3, 0xd4], // pcap, microseconds, big-endian
        [0x4d, 0x3c, 0xb2, 0xa1], // pcap, nanoseconds, little-endian
        [0xa1, 0xb2, 0x3c, 0x4d], // pcap, nanoseconds, big-endian
        [0x0a, 0x0d, 0x0d, 0x0a], // pcapng's section header block
    ];
    first.get(..4).is_some_and(|magic| MAGICS.iter().any(|m| m == magic))
}

/// A capture of any TCP conversation as the session `ackscope import` writes for it: its
/// connections, each TCP packet a segment event, and the stalls its packets show (found by the
/// page's tally of the imported run, as by `ackscope show`). A capture cut short keeps the
/// packets before the damage, and its run says where the capture ends; one that holds no
/// packet is an error that says why.
pub fn capture_to_session(name: &str, capture: &[u8]) -> Result<Vec<u8>, String> {
    use ackscope_shared::import::{events, import_spec, imported_instruments, scan};
    use ackscope_shared::wire::{write_frame, Hello, HostFacts, RunOutcome};
    use ackscope_shared::{packet_stalls, RunId, Scenario};

    let mut scanned = scan(capture);
    if scanned.packets == 0 {
        return Err(match &scanned.error {
            Some(error) => format!("{name}: {error}"),
            None => format!("{name}: the capture holds no packets"),
        });
    }
    let run = RunId(1);
    let mut bytes = Vec::new();
    let hello = Hello::current(env!("CARGO_PKG_VERSION"), HostFacts::default());
    write_frame(&ToBrowser::Hello(hello), &mut bytes);
    let spec = Scenario::Import(import_spec(name, &scanned.connections));
    let instruments = imported_instruments();
    write_frame(&ToBrowser::RunStarted { run, spec, instruments }, &mut bytes);
    // The page's tally finds the stalls itself: this finder only keeps `events`' contract.
    let mut finder = packet_stalls::StallFinder::default();
    events(capture, &mut scanned, &mut finder, |events| {
        write_frame(&ToBrowser::Events { run, events }, &mut bytes);
        Ok(())
    })?;
    let outcome = match &scanned.error {
        None => RunOutcome::Completed,
        Some(error) => RunOutcome::Failed {
            error: format!("the capture ends early ({error}); the packets before it are shown"),
        },
    };
    write_frame(&ToBrowser::RunFinished { run, outcome }, &mut bytes);
    Ok(bytes)
}

/// A name for a session fetched from `url`: its last path segment, or the URL itself.
pub fn name_of_url(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    match path.rsplit('/').next() {
        Some(last) if !last.is_empty() && path.contains('/') => last.to_string(),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::wire::{write_frame, Hello, HostFacts, RunOutcome, PROTOCOL_VERSION};
    use ackscope_shared::{RrSpec, RunId};

    use super::*;
    use crate::fixtures::{hello, nagle_run, rr_started, MS};

    fn stream() -> Vec<ToBrowser> {
        vec![
            hello(),
            rr_started(1, RrSpec::default()),
            ToBrowser::Events { run: RunId(1), events: nagle_run(3, 40 * MS) },
            ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed },
        ]
    }

    fn file_of(messages: &[ToBrowser]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for message in messages {
            write_frame(message, &mut bytes);
        }
        bytes
    }

    #[test]
    fn a_whole_file_decodes_to_its_messages() {
        assert_eq!(decode_session(&file_of(&stream())), (stream(), None));
    }

    #[test]
    fn a_cut_file_keeps_every_message_before_the_cut() {
        let bytes = file_of(&stream());
        for cut in [bytes.len() - 1, bytes.len() - 4] {
            let (messages, error) = decode_session(&bytes[..cut]);
            assert_eq!(messages, stream()[..3]);
            assert!(
                matches!(error, Some(FileError::Wire(WireError::Truncated { .. }))),
                "{error:?}"
            );
        }
        // A corrupt length: refused before allocating, the prefix kept.
        let mut corrupt = file_of(&stream()[..2]);
        corrupt.extend_from_slice(&[0xff, 0xff, 0xff, 0x7f, 0]);
        let (messages, error) = decode_session(&corrupt);
        assert_eq!(messages.len(), 2);
        assert!(error.is_some_and(|e| e.to_string().contains("over the")));
    }

    #[test]
    fn a_file_must_start_with_a_readable_hello() {
        let (messages, error) = decode_session(&file_of(&stream()[1..]));
        assert!(messages.is_empty());
        assert!(error.is_some_and(|e| e.to_string().contains("does not start with Hello")));

        let newer = ToBrowser::Hello(Hello {
            protocol_version: PROTOCOL_VERSION + 1,
            ackscope_version: "9.0.0".into(),
            host: HostFacts::default(),
        });
        let (messages, error) = decode_session(&file_of(&[newer]));
        assert!(messages.is_empty());
        assert_eq!(
            error,
            Some(FileError::Wire(WireError::Version {
                found: PROTOCOL_VERSION + 1,
                supported: PROTOCOL_VERSION
            }))
        );

        assert_eq!(decode_session(&[]), (vec![], Some(FileError::Empty)));
        assert!(FileError::Empty.to_string().contains("empty"));
    }

    /// A file of more events than the page holds keeps those before the bound and says how
    /// to read the rest; the bound is on events decoded, whatever the file's bytes (a file of
    /// compressed blocks is a fraction of what it decodes to).
    #[test]
    fn a_file_past_the_events_the_page_holds_keeps_those_before_and_says_so() {
        use ackscope_shared::wire::{self, Hello, HostFacts};
        use ackscope_shared::{ConnId, Event, EventKind, ReqId, RunId, Side};
        let event = |i: u64| Event {
            at_ns: i,
            side: Side::Client,
            conn: ConnId(0),
            req: ReqId(i as u32),
            kind: EventKind::RequestStart,
        };
        let mut file = Vec::new();
        wire::write_frame(
            &ToBrowser::Hello(Hello::current("0.1.0", HostFacts::default())),
            &mut file,
        );
        for batch in 0..5 {
            let events: Vec<Event> = (batch * 100..batch * 100 + 100).map(event).collect();
            wire::write_blocks(
                RunId(1),
                &events,
                &mut wire::zstd,
                &mut file,
                &mut Default::default(),
            );
        }
        let mut decoder = SessionDecoder::with_max_events(250);
        let mut events = 0;
        decoder.feed(&file, |message| {
            if let ToBrowser::Events { events: batch, .. } = message {
                events += batch.len();
            }
        });
        assert_eq!(events, 200, "the whole batches before the bound");
        let error = decoder.finish().expect("the file is not taken whole");
        assert_eq!(error, FileError::TooManyEvents { kept: 200 });
        assert!(error.to_string().contains("ackscope show FILE"), "{error}");
    }

    #[test]
    fn size_and_names() {
        assert_eq!(refuse_size(MAX_FILE_BYTES), None);
        let reason = refuse_size(600 * 1024 * 1024).expect("refused");
        assert!(reason.starts_with("600.0 MiB is over the 512 MiB"), "{reason}");
        assert_eq!(
            name_of_url("https://example.org/lessons/story1.ackscope?x=1"),
            "story1.ackscope"
        );
        assert_eq!(name_of_url("story1.ackscope"), "story1.ackscope");
        assert_eq!(name_of_url("https://example.org/"), "https://example.org/");
    }

    #[test]
    fn a_capture_opens_as_its_conversations_with_the_stalls_import_names() {
        use ackscope_shared::attribution::StallClass;
        let capture = ackscope_shared::synthetic::nagle_capture(1);
        assert!(is_capture(&capture) && !is_capture(&file_of(&stream())));
        let session = capture_to_session("nagle.pcapng", &capture).expect("a capture");
        let (messages, problem) = decode_session(&session);
        assert_eq!(problem, None);
        let mut state = crate::state::Stream::file();
        for message in messages {
            state.apply(message);
        }
        let run = &state.runs()[0];
        assert_eq!(run.status, crate::state::RunStatus::Done);
        let imported = run.imported.as_ref().expect("an imported run");
        assert_eq!(imported.rows().len(), 1, "one conversation");
        assert_eq!(imported.rows()[0].2, [2052, 2052], "bytes each way");
        let classes = imported.classes();
        assert_eq!(classes.len(), 1, "{classes:?}");
        assert_eq!(classes[0].class, StallClass::NagleDelayedAck);
        assert_eq!(classes[0].direction, "client->server");

        let cut = &capture[..capture.len() - 10];
        let (messages, _) = decode_session(&capture_to_session("cut.pcapng", cut).unwrap());
        let finished = messages.iter().find_map(|m| match m {
            ToBrowser::RunFinished { outcome: RunOutcome::Failed { error }, .. } => Some(error),
            _ => None,
        });
        assert!(finished.is_some_and(|e| e.contains("the capture ends early")), "{finished:?}");
        let refused = capture_to_session("notes.txt", b"hello world").unwrap_err();
        assert!(refused.starts_with("notes.txt: not a pcap or pcapng file"), "{refused}");
    }
}
