//! Session files: the probe's stream of messages written to disk as it happens (the framing of
//! docs/FORMAT.md), and read back for `ackscope show` and `ackscope export`.
//!
//! The writer appends each message as soon as it exists and flushes every batch, so a crash or a
//! kill loses at most the batch in flight; a reader keeps every message before a bad frame.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use ackscope_shared::wire::{self, FrameReader, ToBrowser, WireError};

/// Session files larger than this are refused before reading (16 GiB: far beyond a long run).
pub const MAX_FILE_BYTES: u64 = 16 << 30;

pub struct SessionWriter {
    path: PathBuf,
    out: BufWriter<File>,
    frame: Vec<u8>,
}

impl SessionWriter {
    pub fn create(path: &Path) -> io::Result<SessionWriter> {
        let file = File::create(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
        })?;
        Ok(SessionWriter { path: path.to_owned(), out: BufWriter::new(file), frame: Vec::new() })
    }

    /// Appends one message and hands it to the kernel.
    pub fn write(&mut self, message: &ToBrowser) -> io::Result<()> {
        self.frame.clear();
        wire::write_frame(message, &mut self.frame);
        self.out
            .write_all(&self.frame)
            .and_then(|()| self.out.flush())
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", self.path.display())))
    }
}

/// What a session file holds: every message up to the first bad frame, and that frame's error.
pub struct SessionFile {
    pub messages: Vec<ToBrowser>,
    pub error: Option<WireError>,
}

/// Reads a session file. IO errors and a refused version are errors; a corrupt or truncated
/// frame is reported in [`SessionFile::error`] with everything before it kept.
pub fn read(path: &Path) -> Result<SessionFile, String> {
    let size =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?.len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "{} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit for session files",
            path.display()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut reader = FrameReader::new(&bytes);
    let mut messages = Vec::new();
    let mut error = None;
    while let Some(next) = reader.next_message() {
        match next {
            Ok(message) => {
                if messages.is_empty() {
                    wire::check_hello(&message).map_err(|e| {
                        format!("{} is not a session file this build can read: {e}", path.display())
                    })?;
                }
                messages.push(message);
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    if messages.is_empty() {
        let why = error.map_or("it is empty".to_string(), |e| e.to_string());
        return Err(format!("{} is not an ackscope session file: {why}", path.display()));
    }
    Ok(SessionFile { messages, error })
}
