//! Session files: the probe's stream of messages written to disk as it happens (the framing of
//! docs/FORMAT.md), and read back for `ackscope show` and `ackscope export`.
//!
//! The writer appends each message as soon as it exists; a run's events are gathered into
//! blocks (docs/FORMAT.md, "Blocks") for at most [`BLOCK_GATHERING`], so a crash or a kill loses
//! at most that last second of events. A reader keeps every message before a bad frame.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ackscope_shared::overview::Overview;
use ackscope_shared::wire::{self, FrameStream, Indexer, ToBrowser, WireError};
use ackscope_shared::{Event, RunId};

/// Session files larger than this are refused before reading (16 GiB: far beyond a long run).
pub const MAX_FILE_BYTES: u64 = 16 << 30;

/// A run's events are gathered into a block for at most this long before it is written (give
/// or take [`FLUSH_EVERY`]): what a crash or a kill may lose.
pub const BLOCK_GATHERING: Duration = Duration::from_secs(1);

/// How often a writer's own thread looks at the age of what it gathered: a run or a watch whose
/// events stop (an idle service, a long wait) has what it gathered written all the same.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// A session file being written: its messages in order, its events gathered into blocks. A
/// thread of its own writes what was gathered once it is [`BLOCK_GATHERING`] old, whether or not
/// more events come; its failure is the next write's error.
pub struct SessionWriter {
    writing: std::sync::Arc<std::sync::Mutex<Writing>>,
    /// Dropped to stop the flushing thread, which is then joined.
    flusher: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

struct Writing {
    path: PathBuf,
    out: BufWriter<File>,
    frame: Vec<u8>,
    /// Events not yet written, gathered into blocks of columns (docs/FORMAT.md, "Blocks"): a
    /// block is written when it holds [`wire::BLOCK_EVENTS`] events (those of every run
    /// together), when its first event is [`BLOCK_GATHERING`] old, and before any other
    /// message, which keeps the file in the order the messages came.
    gathering: Vec<Gathering>,
    /// Bytes written so far: where the next frame starts.
    written: u64,
    /// Where each run's blocks went, for the indexes at the file's end.
    index: Indexer,
    /// What the flushing thread's last write failed with, for the next write to return.
    flush_error: Option<io::Error>,
}

/// A run's events not yet written.
struct Gathering {
    run: RunId,
    events: Vec<Event>,
    since: Instant,
}

impl SessionWriter {
    pub fn create(path: &Path) -> io::Result<SessionWriter> {
        let file = File::create(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
        })?;
        let writing = std::sync::Arc::new(std::sync::Mutex::new(Writing {
            path: path.to_owned(),
            out: BufWriter::new(file),
            frame: Vec::new(),
            gathering: Vec::new(),
            written: 0,
            index: Indexer::default(),
            flush_error: None,
        }));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let flushed = std::sync::Arc::clone(&writing);
        let flusher = std::thread::Builder::new().name("session-file".into()).spawn(move || {
            // Until the writer is dropped (its sender with it).
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(FLUSH_EVERY)
            {
                let mut writing = flushed.lock().unwrap_or_else(|p| p.into_inner());
                if writing.flush_error.is_none() {
                    writing.flush_error = writing.write_due().err();
                }
            }
        })?;
        Ok(SessionWriter { writing, flusher: Some((stop, flusher)) })
    }

    fn writing(&self) -> std::sync::MutexGuard<'_, Writing> {
        self.writing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one message and hands it to the kernel. A message over
    /// [`wire::MAX_MESSAGE_BYTES`] is refused, not written: no reader could take it, and the
    /// file would end there for them.
    pub fn write(&mut self, message: &ToBrowser) -> io::Result<()> {
        self.writing().write(message)
    }

    /// Appends a run's events, gathered into blocks (see [`Writing::gathering`]).
    pub fn write_events(&mut self, run: RunId, events: Vec<Event>) -> io::Result<()> {
        self.writing().write_events(run, events)
    }

    /// Ends the file: each run's overview and block index, then the fixed-size trailer that
    /// says where they start, so a viewer paints a long run's overview from the file's last
    /// bytes before it has decoded the events, and a reader finds one request's blocks without
    /// reading the rest (docs/FORMAT.md, "The end of a file"). A file without them (cut short by
    /// a crash) still reads whole.
    pub fn finish(mut self, overviews: Vec<(RunId, Overview)>) -> io::Result<()> {
        self.stop_flushing();
        self.writing().finish(overviews)
    }

    /// Stops the flushing thread and waits for it.
    fn stop_flushing(&mut self) {
        if let Some((stop, flusher)) = self.flusher.take() {
            drop(stop);
            let _ = flusher.join();
        }
    }
}

impl Writing {
    fn write(&mut self, message: &ToBrowser) -> io::Result<()> {
        self.write_blocks()?;
        self.frame.clear();
        wire::write_frame(message, &mut self.frame);
        self.write_frame()
    }

    /// Writes the frame in `frame`, which must be one a reader takes.
    fn write_frame(&mut self) -> io::Result<()> {
        let len = self.frame.len() - 4;
        if len > wire::MAX_MESSAGE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "writing {}: a message of {len} bytes is over the {}-byte limit of what a \
                     reader takes: not written (the file holds every message before it)",
                    self.path.display(),
                    wire::MAX_MESSAGE_BYTES
                ),
            ));
        }
        self.put_frame()
    }

    /// Writes what `frame` holds and counts its bytes.
    fn put_frame(&mut self) -> io::Result<()> {
        self.out.write_all(&self.frame).and_then(|()| self.out.flush()).map_err(|e| {
            io::Error::new(e.kind(), format!("writing {}: {e}", self.path.display()))
        })?;
        self.written += self.frame.len() as u64;
        Ok(())
    }
}

impl Writing {
    fn write_events(&mut self, run: RunId, mut events: Vec<Event>) -> io::Result<()> {
        match self.gathering.iter_mut().find(|gathering| gathering.run == run) {
            Some(gathering) => gathering.events.append(&mut events),
            None => self.gathering.push(Gathering { run, events, since: Instant::now() }),
        }
        let gathered: usize = self.gathering.iter().map(|gathering| gathering.events.len()).sum();
        if gathered >= wire::BLOCK_EVENTS {
            return self.write_blocks();
        }
        self.write_due()
    }

    /// Writes the gathered events once the first of them is [`BLOCK_GATHERING`] old.
    fn write_due(&mut self) -> io::Result<()> {
        let oldest = self.gathering.iter().map(|gathering| gathering.since).min();
        if oldest.is_some_and(|t| t.elapsed() >= BLOCK_GATHERING) {
            self.write_blocks()?;
        }
        Ok(())
    }

    /// Writes every run's gathered events as blocks, in the order the runs first had events;
    /// first, the flushing thread's failure, if it had one.
    fn write_blocks(&mut self) -> io::Result<()> {
        if let Some(error) = self.flush_error.take() {
            return Err(error);
        }
        for Gathering { run, events, .. } in std::mem::take(&mut self.gathering) {
            for block in wire::encode_blocks(run, &events, &mut wire::zstd) {
                self.frame.clear();
                wire::write_payload(&block.payload, &mut self.frame);
                let at = self.written;
                self.write_frame()?;
                self.index.note(run, at, block.payload.len(), block.contents);
            }
        }
        Ok(())
    }

    fn finish(&mut self, overviews: Vec<(RunId, Overview)>) -> io::Result<()> {
        self.write_blocks()?;
        // Each frame of the end is within what a reader takes (an overview is some tens of KB,
        // an index at most MAX_INDEXED_BLOCKS entries of at most 48 bytes).
        self.frame.clear();
        wire::write_file_end(overviews, &self.index, &mut self.frame);
        self.put_frame()
    }
}

/// A writer let go without [`SessionWriter::finish`] (its command failed, or stopped) still
/// writes the events it gathered: the file keeps everything it was handed.
impl Drop for SessionWriter {
    fn drop(&mut self) {
        self.stop_flushing();
        let _ = self.writing().write_blocks();
    }
}

/// A session file several threads write runs to (a standalone server's own run and the runs
/// remote probes drive). After the first failed write it writes nothing more and keeps the
/// error: the file then holds every message before it.
#[derive(Default)]
pub struct SharedWriter {
    state: std::sync::Mutex<(Option<SessionWriter>, Option<String>)>,
}

impl SharedWriter {
    pub fn new(writer: Option<SessionWriter>) -> SharedWriter {
        SharedWriter { state: std::sync::Mutex::new((writer, None)) }
    }

    /// Writes `message` unless an earlier write failed; returns this write's error, once.
    pub fn write(&self, message: &ToBrowser) -> Option<String> {
        self.with(|writer| writer.write(message))
    }

    /// [`SessionWriter::write_events`], as [`SharedWriter::write`].
    pub fn write_events(&self, run: RunId, events: Vec<Event>) -> Option<String> {
        self.with(|writer| writer.write_events(run, events))
    }

    fn with(&self, write: impl FnOnce(&mut SessionWriter) -> io::Result<()>) -> Option<String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (writer, failed) = &mut *state;
        let (Some(writer), None) = (writer, &failed) else { return None };
        let error = write(writer).err()?.to_string();
        *failed = Some(error.clone());
        Some(error)
    }

    /// A write has failed: nothing more is written.
    pub fn failed(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1.is_some()
    }

    /// The writer and the first write error, for ending the file.
    pub fn take(&self) -> (Option<SessionWriter>, Option<String>) {
        std::mem::take(&mut *self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// What a session file holds: every message up to the first bad frame, and that frame's error.
pub struct SessionFile {
    pub messages: Vec<ToBrowser>,
    pub error: Option<WireError>,
}

/// Has the allocator keep what a reader frees for its next message instead of handing it back
/// to the kernel: for the commands that read a session file (`show`, `export`). Each message's
/// events are decoded, summarized and freed before the next is read. Left to glibc's adaptive
/// thresholds, a message of TCP_INFO samples (8,192 boxed samples, about 2 MB) was given back
/// when it was freed and faulted in again, page by page, for the next one: `show` of 1.4 million
/// samples took 69,000 page faults and twice the CPU, or 1,000 and not, depending on which large
/// blocks the process had happened to free before. With fixed thresholds every run is the
/// cheap one: blocks below 4 MiB (a message's events) come from the heap, and up to 16 MiB
/// freed at its top stays for the next message. What is kept was in use just before; the peaks
/// measured grew by 0.6 to 3 MB (blocks that were mapped and unmapped apart now share the heap).
pub fn keep_freed_memory_for_reading() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets the allocator's parameters under its own lock; no memory is touched.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
    }
}

/// Reads a whole session file (see [`SessionReader`] for one message at a time). IO errors and a
/// refused version are errors; a corrupt or truncated frame is reported in
/// [`SessionFile::error`] with everything before it kept.
pub fn read(path: &Path) -> Result<SessionFile, String> {
    let mut reader = SessionReader::open(path)?;
    let mut messages = Vec::new();
    let mut error = None;
    while let Some(message) = reader.next_into(&mut error) {
        messages.push(message);
    }
    Ok(SessionFile { messages, error })
}

/// Reads a session file one frame at a time, holding about one message in memory: the file is
/// read in chunks into a [`wire::FrameStream`], the one framing of the live stream and of files.
/// Memory grows as bytes arrive, so a length over [`wire::MAX_MESSAGE_BYTES`] is refused and a
/// short file claiming a long frame costs only its bytes; nothing past the size checked against
/// [`MAX_FILE_BYTES`] at open is read, and the first bad frame ends the stream.
pub struct SessionReader<R = File> {
    input: io::Take<R>,
    stream: FrameStream,
    /// Bytes read from the file at a time, reused.
    chunk: Vec<u8>,
    /// The Hello, read and checked by [`SessionReader::open`], not yet handed out.
    hello: Option<ToBrowser>,
    ended: bool,
}

impl SessionReader {
    /// Opens a session file and checks its first message: a file that is empty, does not start
    /// with a Hello, or speaks another protocol version is an error naming the file.
    pub fn open(path: &Path) -> Result<SessionReader, String> {
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(format!(
                "{} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit for session files",
                path.display()
            ));
        }
        let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        SessionReader::from_reader(file, size, &path.display().to_string())
    }
}

impl<R: Read> SessionReader<R> {
    /// [`SessionReader::open`] of `size` bytes from `input`, called `name` in errors.
    pub fn from_reader(input: R, size: u64, name: &str) -> Result<SessionReader<R>, String> {
        let mut reader = SessionReader {
            input: input.take(size.min(MAX_FILE_BYTES)),
            stream: FrameStream::new(),
            chunk: vec![0; READ_CHUNK_BYTES],
            hello: None,
            ended: false,
        };
        let hello = match reader.frame() {
            Some(Ok(message)) => message,
            Some(Err(e)) => return Err(format!("{name} is not an ackscope session file: {e}")),
            None => return Err(format!("{name} is not an ackscope session file: it is empty")),
        };
        wire::check_hello(&hello)
            .map_err(|e| format!("{name} is not a session file this build can read: {e}"))?;
        reader.hello = Some(hello);
        Ok(reader)
    }

    /// The next message (the Hello first), `None` at a clean end, or the error that ends the
    /// stream (nothing follows it).
    pub fn next_message(&mut self) -> Option<Result<ToBrowser, WireError>> {
        match self.hello.take() {
            Some(hello) => Some(Ok(hello)),
            None => self.frame(),
        }
    }

    /// The next good message; `None` at the end, or at the first bad frame, whose error is then
    /// put in `error` (nothing follows it). For readers that keep what came before a bad frame.
    pub fn next_into(&mut self, error: &mut Option<WireError>) -> Option<ToBrowser> {
        match self.next_message()? {
            Ok(message) => Some(message),
            Err(e) => {
                *error = Some(e);
                None
            }
        }
    }

    /// [`SessionReader::next_into`] handed to `take` by reference instead of returned
    /// ([`FrameStream::with_next_message`]): what `take` returned, `None` at the end or at the
    /// first bad frame, whose error is then put in `error`. For readers that look at each message
    /// and let it go: a file of small messages spent a third of its reading copying each out.
    pub fn with_next_into<T>(
        &mut self,
        error: &mut Option<WireError>,
        take: impl FnOnce(&ToBrowser) -> T,
    ) -> Option<T> {
        if let Some(hello) = self.hello.take() {
            return Some(take(&hello));
        }
        if self.ended {
            return None;
        }
        let mut take = Some(take);
        let mut ended_by = None;
        loop {
            let taken = self.stream.with_next_message(|message| match message {
                Ok(message) => take.take().map(|take| take(message)),
                Err(e) => {
                    ended_by = Some(e);
                    None
                }
            });
            match taken {
                Some(Some(value)) => return Some(value),
                Some(None) => {
                    self.ended = true;
                    *error = ended_by;
                    return None;
                }
                None => {}
            }
            if let Err(end) = self.read_chunk() {
                *error = end;
                return None;
            }
        }
    }

    fn frame(&mut self) -> Option<Result<ToBrowser, WireError>> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(next) = self.stream.next_message() {
                self.ended = next.is_err();
                return Some(next);
            }
            if let Err(end) = self.read_chunk() {
                return end.map(Err);
            }
        }
    }

    /// Reads the next bytes of the file into the stream; at its end, the error that ends the
    /// stream if it stopped inside a frame or could not be read.
    fn read_chunk(&mut self) -> Result<(), Option<WireError>> {
        loop {
            match self.input.read(&mut self.chunk) {
                Ok(0) => {
                    self.ended = true;
                    return Err(self.stream.finish());
                }
                Ok(n) => {
                    self.stream.push(&self.chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.ended = true;
                    return Err(Some(unreadable(self.stream.offset(), &e)));
                }
            }
        }
    }
}

/// Bytes read from a session file at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

fn unreadable(offset: u64, e: &io::Error) -> WireError {
    WireError::Malformed(format!("cannot read the frame at byte {offset}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackscope_shared::wire::{HostFacts, Instruments, RunOutcome};
    use ackscope_shared::{ConnId, Event, EventKind, ReqId, RrSpec, RunId, Scenario, Side};

    /// A scratch file of one test, removed at its end unless the test failed.
    struct TempFile(PathBuf);

    fn temp(name: &str) -> TempFile {
        TempFile(
            std::env::temp_dir().join(format!("ackscope-record-{}-{name}", std::process::id())),
        )
    }

    impl std::ops::Deref for TempFile {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl AsRef<Path> for TempFile {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    fn session() -> Vec<ToBrowser> {
        let event = Event {
            at_ns: 43_600_000,
            side: Side::Server,
            conn: ConnId(1),
            req: ReqId(7),
            kind: EventKind::ReadDone { bytes: 2048 },
        };
        vec![
            ToBrowser::Hello(wire::Hello::current("0.1.0", HostFacts::default())),
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: Scenario::Rr(RrSpec::default()),
                instruments: Instruments::default(),
            },
            ToBrowser::Events { run: RunId(1), events: vec![event; 100] },
            ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed },
        ]
    }

    fn write(path: &Path, messages: &[ToBrowser]) -> Vec<u8> {
        let mut writer = SessionWriter::create(path).unwrap();
        for message in messages {
            writer.write(message).unwrap();
        }
        drop(writer);
        std::fs::read(path).unwrap()
    }

    #[test]
    fn the_streaming_reader_returns_every_message_then_ends() {
        let path = temp("whole.ackscope");
        write(&path, &session());
        let mut reader = SessionReader::open(&path).unwrap();
        let mut read = Vec::new();
        while let Some(next) = reader.next_message() {
            read.push(next.unwrap());
        }
        assert_eq!(read, session());
        assert!(reader.next_message().is_none());
    }

    #[test]
    fn a_cut_file_keeps_its_valid_prefix_and_names_the_offset() {
        let path = temp("cut.ackscope");
        let bytes = write(&path, &session());
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let file = read(&path).unwrap();
        assert_eq!(file.messages, session()[..3]);
        let last_frame = bytes.len() - (wire::encode(&session()[3]).len() + 4);
        assert_eq!(file.error, Some(WireError::Truncated { offset: last_frame }));
    }

    #[test]
    fn a_huge_length_is_refused_before_allocating_and_ends_the_stream() {
        let path = temp("huge.ackscope");
        let mut bytes = write(&path, &session()[..1]);
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&path, &bytes).unwrap();
        let mut reader = SessionReader::open(&path).unwrap();
        assert!(matches!(reader.next_message(), Some(Ok(ToBrowser::Hello(_)))));
        assert!(matches!(reader.next_message(), Some(Err(WireError::TooLarge { .. }))));
        assert!(reader.next_message().is_none());
    }

    #[test]
    fn a_message_no_reader_takes_is_refused_not_written() {
        let path = temp("too-large.ackscope");
        let mut writer = SessionWriter::create(&path).unwrap();
        writer.write(&session()[0]).unwrap();
        let huge = ToBrowser::Rejected { reason: "x".repeat(wire::MAX_MESSAGE_BYTES) };
        let err = writer.write(&huge).unwrap_err();
        assert!(err.to_string().contains("over the 16777216-byte limit"), "{err}");
        drop(writer);
        assert_eq!(read(&path).unwrap().messages, session()[..1], "the file reads whole");
    }

    /// A run's events are gathered into a block, not written at once; when no more come (an
    /// idle watch, a server between clients) the writer's own thread writes them once they are
    /// a second old, and the file then reads back whole.
    #[test]
    fn gathered_events_are_written_once_they_are_a_second_old() {
        let path = temp("gathered.ackscope");
        let mut writer = SessionWriter::create(&path).unwrap();
        let messages = session();
        writer.write(&messages[0]).unwrap();
        writer.write(&messages[1]).unwrap();
        let ToBrowser::Events { run, events } = messages[2].clone() else { unreachable!() };
        writer.write_events(run, events).unwrap();
        let written = || std::fs::metadata(&path).unwrap().len();
        let before = written();
        let started = Instant::now();
        let deadline = started + Duration::from_secs(30);
        while written() == before {
            assert!(Instant::now() < deadline, "the block was never written");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(started.elapsed() >= BLOCK_GATHERING / 2, "written early: {:?}", started.elapsed());
        let file = read(&path).unwrap();
        assert_eq!(file.messages, messages[..3], "the block reads back as the batch it was");
        drop(writer);
    }

    #[test]
    fn empty_and_foreign_files_are_refused_by_name() {
        let empty = temp("empty.ackscope");
        std::fs::write(&empty, b"").unwrap();
        let err = SessionReader::open(&empty).err().unwrap();
        assert!(err.contains("empty.ackscope") && err.contains("empty"), "{err}");
        let foreign = temp("foreign.ackscope");
        std::fs::write(&foreign, b"this is not a session file at all").unwrap();
        let err = SessionReader::open(&foreign).err().unwrap();
        assert!(err.contains("foreign.ackscope") && err.contains("not an ackscope"), "{err}");
    }
}
