//! Session files: the probe's stream written to disk (docs/PROTOCOL.md, "Versioning and files").
//!
//! A file is the same messages as the live WebSocket, each preceded by its length as a 4-byte
//! little-endian integer ([`ackscope_shared::wire::FrameStream`]); the first is a Hello. Decoding
//! is a pure function here; reading a `File`, fetching a URL and saving a download live in
//! [`crate::files`].

use std::fmt;

use ackscope_shared::wire::{FrameStream, ToBrowser, WireError};

/// The name Download gives the live session.
pub const DOWNLOAD_NAME: &str = "ackscope-session.ackscope";

/// Files larger than this are refused before a byte is read. A file is read and decoded in chunks,
/// but what it decodes to stays: about 1.4 times the file's size in the page's WebAssembly memory
/// (measured on a million-request session, docs/BENCHMARKS-LOG.md), whose 32-bit address space a
/// few such files would fill.
pub const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// Why a file's messages end before its last byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileError {
    Empty,
    /// A bad frame, or a first message that is not a Hello this build reads.
    Wire(WireError),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Empty => {
                f.write_str("the file is empty; a session file starts with a Hello")
            }
            FileError::Wire(error) => error.fmt(f),
        }
    }
}

/// Decodes a session file as its bytes arrive, in pieces of any size: a big file is read and
/// decoded chunk by chunk, so it never has to be held whole. Stops at the first bad frame; a
/// file of another protocol version yields no messages (its later frames could decode as
/// valid-looking garbage).
#[derive(Debug, Default)]
pub struct SessionDecoder {
    stream: FrameStream,
    messages: u64,
    error: Option<FileError>,
}

impl SessionDecoder {
    /// Hands every whole message in `bytes` (with what came before) to `apply`.
    pub fn feed(&mut self, bytes: &[u8], mut apply: impl FnMut(ToBrowser)) {
        if self.error.is_some() {
            return;
        }
        self.stream.push(bytes);
        while let Some(next) = self.stream.next_message() {
            match next {
                Ok(message) => {
                    self.messages += 1;
                    apply(message);
                }
                Err(error) => {
                    self.error = Some(FileError::Wire(error));
                    return;
                }
            }
        }
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
}
