//! The messages between the probe and the browser, and how they are framed.
//!
//! Encoding: each message is one [postcard] value. On the WebSocket, one binary WebSocket message
//! carries one encoded message (WebSocket does the framing). On disk, a session file is the same
//! sequence of messages, each preceded by its length as a 4-byte little-endian integer
//! ([`write_frame`], [`FrameStream`]): "the live stream, written to disk". docs/PROTOCOL.md
//! documents both.
//!
//! Versioning: the first message is always [`ToBrowser::Hello`] (tag 0), whose first field is the
//! protocol version. That prefix never changes, so any version can read a newer peer's version
//! and refuse it by name instead of misreading it. New variants and event kinds are appended.

use serde::{Deserialize, Serialize};

pub use crate::compact::columns::{
    encode_blocks, zstd, Compress, EncodedBlock, BLOCK_COLUMN_BYTES, BLOCK_EVENTS,
};
use crate::compact::columns::{Unpacked, BLOCK};
use crate::compact::index::BLOCK_INDEX;
pub use crate::compact::index::{
    BlockContents, BlockIndex, IndexedBlock, Indexer, MAX_INDEXED_BLOCKS,
};
use crate::event::{Event, RunId};
use crate::overview::Overview;
use crate::spec::Scenario;
use crate::varint::varint;

mod events;
mod run_start;
pub mod seek;

/// Bumped whenever the encoding changes (docs/FORMAT.md, "Versions"). Version 2 appended the
/// `Overview` and `Trailer` messages of a file's end and the class's messages; version 3 the
/// `RunDelay` event kind and `ToProbe::StopRun`; version 4 the `ClockSync` event kind of runs
/// against a remote server and `ToProbe::StartRemoteRun`; version 5 the `DelayedAck` event kind
/// of a watch as root; version 6 the `OptionsTried` message of a watch that tries an option,
/// with the live stream's `TryRights` and `ToProbe::TryOnWatch`; version 7 a class's votes
/// (`ClassVotes`, `ToProbe::Vote`), live only; version 8 a bulk run whose reader pauses, as a
/// kind of run of its own (`spec::encoding`); version 9 a file's events in blocks of columns,
/// compressed (`compact::columns`), files only; version 10 each run's block index at a file's
/// end (`compact::index`); version 11 the `BlockedCall` event kind of a watch as root.
pub const PROTOCOL_VERSION: u16 = 11;

/// The oldest version this build still reads: every version since only appended messages, so
/// an older stream is a valid newer one.
pub const OLDEST_READABLE_VERSION: u16 = 1;

fn readable(version: u16) -> bool {
    (OLDEST_READABLE_VERSION..=PROTOCOL_VERSION).contains(&version)
}

/// No message may be larger than this: bounds what a decoder allocates for a bad length.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// At most this many events in one `Events` message: about 100 KB of syscall events, far below
/// [`MAX_MESSAGE_BYTES`] even for TCP_INFO samples or captured segments.
pub const EVENTS_PER_MESSAGE: usize = 8192;

/// Probe to browser.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToBrowser {
    /// Always the first message of a stream or file.
    Hello(Hello),
    /// A run began; its events follow in [`ToBrowser::Events`].
    RunStarted { run: RunId, spec: Scenario, instruments: Instruments },
    /// A batch of a run's events, in the order each side recorded them (encoded compactly:
    /// see `compact`).
    Events {
        run: RunId,
        #[serde(with = "crate::compact")]
        events: Vec<Event>,
    },
    /// The run ended; no more events follow for it.
    RunFinished { run: RunId, outcome: RunOutcome },
    /// The probe refused a request from the browser; `reason` says why and what to do.
    Rejected { reason: String },
    /// Files only, after a run's last message: the overview of its requests, as the probe saw
    /// them while it recorded. A viewer reads it first (see [`Trailer`]) and paints the whole
    /// run's overview before decoding its events; it adds nothing the events do not hold.
    Overview { run: RunId, overview: Overview },
    /// Files only, the last frame of a file that was finished: how many bytes of the file's end
    /// (`Overview` frames, then each run's block index) come just before it. Fixed size
    /// ([`TRAILER_FRAME_BYTES`]), so a reader finds it by reading the file's last bytes.
    Trailer(Trailer),
    /// In a class (`ackscope class`): where the presenter is, sent to every page of the room
    /// when it changes and to a page when it joins. Carries the whole state, so a page that
    /// missed some simply takes the newest.
    ClassState(ClassState),
    /// The live stream only (never in files), right after `Hello`: this probe's stream `id`,
    /// and whether the stream resumes where the page's last one was cut (it asked with
    /// `/ws?resume=ID.RUN.EVENTS.FINISHED`, docs/PROTOCOL.md): then only what the page has not
    /// had follows; else every run, from the start (version 4).
    Stream { id: u64, resumed: bool },
    /// A watch's run began with socket options tried on the watched programs' running sockets
    /// (`watch --try`), or tried them on more sockets since: each entry replaces the run's entry
    /// for the same option, side and process (`tried`). The run before the change has none
    /// (version 6).
    OptionsTried {
        run: RunId,
        #[serde(deserialize_with = "crate::tried::bounded_list")]
        tried: Vec<crate::tried::OptionTried>,
    },
    /// The live stream only (never in files), right after `Stream`: whether this probe may try
    /// an option on the programs a page's watch watches ([`ToProbe::TryOnWatch`]): `None` if it
    /// may, else what it lacks and how to get it (version 6).
    TryRights { refused: Option<String> },
    /// The live stream only, in a class: how the room voted on the presenter's question, sent
    /// to every page when it changes and to a page when it joins (version 7). Anonymous: counts,
    /// never who chose what.
    ClassVotes(ClassVotes),
}

impl ToBrowser {
    /// The run the message is of, if it is of one.
    pub fn run(&self) -> Option<RunId> {
        match self {
            ToBrowser::RunStarted { run, .. }
            | ToBrowser::Events { run, .. }
            | ToBrowser::RunFinished { run, .. }
            | ToBrowser::Overview { run, .. }
            | ToBrowser::OptionsTried { run, .. } => Some(*run),
            ToBrowser::Hello(_)
            | ToBrowser::Rejected { .. }
            | ToBrowser::Trailer(_)
            | ToBrowser::ClassState(_)
            | ToBrowser::Stream { .. }
            | ToBrowser::TryRights { .. }
            | ToBrowser::ClassVotes(_) => None,
        }
    }
}

/// The presenter's place in the lessons, as the room's pages follow it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassState {
    /// The lesson's id (its file name without `.lesson`).
    pub lesson: String,
    /// The step, from 0.
    pub step: u32,
    /// The step's answer is shown.
    pub revealed: bool,
    /// The presenter is showing the step's recording (not a live run, which reaches every page
    /// as it streams).
    pub recording: bool,
    /// What the presenter's timeline shows of that run: the pages that follow show the same.
    pub view: ClassView,
}

/// How a class voted on the question of the presenter's step ([`ToBrowser::ClassVotes`]).
/// A round is open until the presenter reveals the answer; "vote again" (the presenter hiding
/// the answer of the same step) opens the next, and the rounds before stay, so the class sees how
/// its answers moved. An open round's counts are shown to no one, the presenter included: only
/// how many have answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassVotes {
    /// The lesson and step voted on (as in [`ClassState`]).
    pub lesson: String,
    pub step: u32,
    /// The round open or last closed: an id the room never gives twice, so that a vote sent
    /// for a round that has ended (the class moved on, or came back to the step) is refused,
    /// never counted in another.
    pub round: u32,
    /// How many rounds of this question the room has opened: 1 for the first vote, 2 after
    /// "vote again".
    pub asked: u32,
    /// The answer is shown: the round is closed, its counts are the last of `rounds`.
    pub revealed: bool,
    /// Pages in the students' places now.
    pub students: u32,
    /// Students who have voted in the current round.
    pub answered: u32,
    /// Each closed round's count of each choice, oldest first (at most [`MAX_VOTE_ROUNDS`],
    /// the newest): the current round's last, once it is revealed.
    pub rounds: Vec<Vec<u32>>,
}

/// Rounds of one question a room keeps: "vote again" past it forgets the oldest.
pub const MAX_VOTE_ROUNDS: usize = 8;

/// The presenter's view of the timeline, as the class follows it. Times are the timeline's:
/// from each request's start in the aligned view, on the run's clock in the run-clock view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassView {
    /// The run-clock view (lanes per connection and side), not the aligned one.
    pub run_clock: bool,
    /// `(from_ns, to_ns)` of the time window, when the presenter zoomed or panned.
    pub window: Option<(u64, u64)>,
    /// The selected request.
    pub selected: Option<u32>,
}

/// See [`ToBrowser::Trailer`]: encoded in exactly [`TRAILER_FRAME_BYTES`] with its frame,
/// because postcard writes a byte array as its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    pub magic: [u8; 8],
    /// Little-endian: the bytes of the file's end, the `Overview` frames and the block indexes
    /// between the events and this frame.
    pub overview_bytes: [u8; 8],
}

/// The trailer's mark: a tail that decodes to a trailer by accident is not one.
const TRAILER_MAGIC: [u8; 8] = *b"ACKSCOPE";
/// A trailer frame: the 4-byte length, the variant's tag, the magic and the count.
pub const TRAILER_FRAME_BYTES: usize = 4 + 1 + 8 + 8;
/// A file's end of more bytes than this is not believed: a run's overview is at most
/// [`crate::overview::MAX_COLUMNS`] columns, some tens of kilobytes, and the indexes of a file
/// at most [`MAX_INDEXED_BLOCKS`] blocks, a few bytes each.
pub const MAX_END_BYTES: u64 = 16 << 20;

impl Trailer {
    pub fn new(overview_bytes: u64) -> Trailer {
        Trailer { magic: TRAILER_MAGIC, overview_bytes: overview_bytes.to_le_bytes() }
    }

    /// The byte range of the end of a file of `file_bytes` that ends in `tail` (its last
    /// [`TRAILER_FRAME_BYTES`]): its `Overview` frames and block indexes ([`read_file_end`]), or
    /// `None` when the file has no trailer (it was cut short, or written by a build without
    /// one): then a reader decodes the whole file.
    pub fn file_end_in(tail: &[u8], file_bytes: u64) -> Option<std::ops::Range<u64>> {
        let frame = tail.get(tail.len().checked_sub(TRAILER_FRAME_BYTES)?..)?;
        let (len, payload) = frame.split_at(4);
        if u32::from_le_bytes(len.try_into().ok()?) as usize != TRAILER_FRAME_BYTES - 4 {
            return None;
        }
        let Ok(ToBrowser::Trailer(trailer)) = decode(payload) else { return None };
        let bytes = u64::from_le_bytes(trailer.overview_bytes);
        let end = file_bytes.checked_sub(TRAILER_FRAME_BYTES as u64)?;
        (trailer.magic == TRAILER_MAGIC && bytes <= MAX_END_BYTES && bytes <= end)
            .then(|| end - bytes..end)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Must stay the first field (see the module docs).
    pub protocol_version: u16,
    /// The probe's package version, for people.
    pub ackscope_version: String,
    /// The machine the runs were made on.
    pub host: HostFacts,
}

impl Hello {
    pub fn current(ackscope_version: &str, host: HostFacts) -> Hello {
        Hello {
            protocol_version: PROTOCOL_VERSION,
            ackscope_version: ackscope_version.to_string(),
            host,
        }
    }
}

/// What a reader needs to know about the machine to trust or compare the numbers. Values are as
/// the kernel printed them ("4096 131072 6291456" for tcp_rmem); empty when unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// "linux", as Rust names the OS.
    pub os: String,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    pub tcp_rmem: String,
    pub tcp_wmem: String,
    pub rmem_max: String,
    pub wmem_max: String,
    /// net.ipv4.tcp_congestion_control: the default for sockets that do not choose.
    pub congestion_control: String,
    /// Whether this probe could capture packets, or why not.
    pub capture: String,
}

/// Which instruments were on for a run: each costs time on the measured path, so a reader must
/// know what perturbed the run (its cost is measured by `cargo xtask bench rr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instruments {
    /// Syscall events recorded (off only to measure what recording costs).
    pub events: bool,
    /// TCP_INFO read at every syscall boundary.
    pub tcp_info_at_syscalls: bool,
    /// TCP_INFO read this often while a call is blocked; 0: not sampled while blocked.
    pub tcp_info_interval_us: u32,
    /// Packets of the run's connections captured (AF_PACKET).
    pub capture: bool,
}

impl Default for Instruments {
    fn default() -> Self {
        Instruments {
            events: true,
            tcp_info_at_syscalls: true,
            tcp_info_interval_us: 1000,
            capture: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunOutcome {
    Completed,
    /// The run stopped early; the events recorded before `error` are kept.
    Failed {
        error: String,
    },
    /// Stopped by the user (Ctrl-C); the events recorded before are kept.
    Interrupted,
}

/// Browser to probe. The only address a page can name is a remote `ackscope server`'s, and only
/// with the token that server printed: the probe never connects anywhere else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToProbe {
    StartRun {
        spec: Scenario,
    },
    /// In a class: this page holds the presenter's secret (read from its URL's fragment, which
    /// no request carries). Sent on every connect.
    Present {
        secret: String,
    },
    /// In a class, from the presenter's page: where it is now.
    ClassState(ClassState),
    /// Stop the run that is going (the page's Stop button): it ends after its current step,
    /// keeping what it recorded, as interrupted (version 3).
    StopRun,
    /// Run `spec` against the `ackscope server` at `server` (host:port), which printed `token`
    /// (version 4). The token is not kept in the session.
    StartRemoteRun {
        spec: Scenario,
        server: String,
        token: String,
    },
    /// Try `option` on the `sides` of the connections the running watch `run` watches, on the
    /// programs' running sockets (a stall's fix, tried live): the watch splits into the run
    /// before and the run with the option, as `watch --try` does (version 6).
    TryOnWatch {
        run: RunId,
        option: crate::tried::TriedOption,
        sides: crate::tried::Sides,
    },
    /// In a class, from a student's page: its answer (`choice`, from 0) to the question of step
    /// `step` of `lesson`, in vote round `round` ([`ClassVotes`]). A later vote of the same page
    /// in the same round replaces it; none is taken once the answer is shown (version 7).
    Vote {
        lesson: String,
        step: u32,
        round: u32,
        choice: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message of {len} bytes is over the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("stream ends inside a message at byte {offset}: the file is truncated")]
    Truncated { offset: usize },
    #[error(
        "stream speaks protocol version {found}; this build reads version {supported} and \
         older: use an ackscope build of version {found}"
    )]
    Version { found: u16, supported: u16 },
}

/// Encodes one message (the payload of one WebSocket message).
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    postcard::to_allocvec(message).expect("encoding into a Vec cannot fail for these types")
}

/// Decodes one message, refusing any larger than [`MAX_MESSAGE_BYTES`].
#[inline]
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, WireError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge { len: bytes.len(), max: MAX_MESSAGE_BYTES });
    }
    postcard::from_bytes(bytes).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Decodes one message of a stream, not its first ([`decode_first`] checks that one): a batch
/// of events by hand, every other message (and a batch that does not decode whole by hand) by
/// `serde`, which decodes it or says why not. The page's stream and every reader that keeps
/// its messages decode through here.
pub fn decode_message(bytes: &[u8]) -> Result<ToBrowser, WireError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge { len: bytes.len(), max: MAX_MESSAGE_BYTES });
    }
    if bytes.first() == Some(&BLOCK) {
        // Only a file holds blocks, and its reader ([`FrameStream`]) hands them on in batches.
        return Err(WireError::Malformed(
            "a block of a file's events, which only a file holds".into(),
        ));
    }
    match events::decode_owned(bytes) {
        Some(batch) => Ok(batch),
        None => decode(bytes),
    }
}

/// A block of a file's events (a frame's payload, its first byte the block's tag) decoded
/// whole, as the one batch of all its events (up to [`BLOCK_EVENTS`]): for a reader that seeks
/// ([`seek`]), tests and the fuzz target; a file's reader takes a block a batch at a time
/// ([`FrameStream`]).
pub fn decode_block(bytes: &[u8]) -> Result<ToBrowser, WireError> {
    let mut block = Unpacked::default();
    block.read(bytes).map_err(WireError::Malformed)?;
    let events = block.next_batch(&mut Default::default(), BLOCK_EVENTS);
    let events = events.expect("a block holds an event").map_err(WireError::Malformed)?;
    Ok(ToBrowser::Events { run: block.run, events })
}

/// Checks that a stream's first message is a Hello this build can read.
pub fn check_hello(message: &ToBrowser) -> Result<(), WireError> {
    match message {
        ToBrowser::Hello(hello) if readable(hello.protocol_version) => Ok(()),
        ToBrowser::Hello(hello) => {
            Err(WireError::Version { found: hello.protocol_version, supported: PROTOCOL_VERSION })
        }
        _ => Err(WireError::Malformed("the stream does not start with Hello".into())),
    }
}

/// The protocol version of a stream's first message, read without decoding the rest of it: a
/// newer version may encode its Hello differently, and must be refused by name, not as garbage.
pub fn peek_version(first_message: &[u8]) -> Option<u16> {
    let (tag, rest) = varint(first_message)?;
    let (version, _) = varint(rest)?;
    (tag == 0).then_some(u16::try_from(version).ok()?)
}

/// Decodes a stream's first message: its version is checked before anything else is read.
pub fn decode_first(bytes: &[u8]) -> Result<ToBrowser, WireError> {
    match peek_version(bytes) {
        Some(found) if !readable(found) => {
            Err(WireError::Version { found, supported: PROTOCOL_VERSION })
        }
        _ => {
            let message = decode(bytes)?;
            check_hello(&message)?;
            Ok(message)
        }
    }
}

/// Appends one length-prefixed message to `out` (the session-file framing).
pub fn write_frame<T: Serialize>(message: &T, out: &mut Vec<u8>) {
    write_payload(&encode(message), out);
}

/// Appends an encoded message (or a block) as a frame: its length, then its bytes.
pub fn write_payload(payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).expect("messages are far below 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Appends `events` of `run` as a file of version 9 and later holds them: the frames of their
/// blocks ([`encode_blocks`]), each noted in `index` where it lands (`out` holds the file from
/// its first byte).
pub fn write_blocks(
    run: RunId,
    events: &[Event],
    compress: Compress<'_>,
    out: &mut Vec<u8>,
    index: &mut Indexer,
) {
    for block in encode_blocks(run, events, compress) {
        index.note(run, out.len() as u64, block.payload.len(), block.contents);
        write_payload(&block.payload, out);
    }
}

/// Appends a finished file's end (docs/FORMAT.md, "The end of a file"): each run's overview,
/// each run's block index, then the fixed-size trailer that says how many bytes they take. An
/// end past [`MAX_END_BYTES`] is not believed by readers: the indexes are left out of one, so
/// that the overviews stay (and if those alone pass it, with thousands of runs, readers read
/// the file whole, as they read one cut short).
pub fn write_file_end(overviews: Vec<(RunId, Overview)>, index: &Indexer, out: &mut Vec<u8>) {
    let start = out.len();
    for (run, overview) in overviews {
        write_frame(&ToBrowser::Overview { run, overview }, out);
    }
    let overviews_end = out.len();
    for run in index.indexes() {
        write_payload(&run.encode(), out);
    }
    if (out.len() - start) as u64 > MAX_END_BYTES {
        out.truncate(overviews_end);
    }
    let bytes = (out.len() - start) as u64;
    write_frame(&ToBrowser::Trailer(Trailer::new(bytes)), out);
}

/// What a finished file's end holds ([`read_file_end`]).
#[derive(Debug, Default, PartialEq)]
pub struct FileEnd {
    pub overviews: Vec<(RunId, Overview)>,
    pub indexes: Vec<BlockIndex>,
    /// Why the end was not read whole, if it was not: what was read before it is kept (what a
    /// viewer reads here only ever saves it work; the events say the same).
    pub error: Option<String>,
}

/// Reads the frames of `bytes`, a file's end that [`Trailer::file_end_in`] found at `start`:
/// its overviews and block indexes, each index checked against `start` (where the blocks end),
/// at most [`MAX_INDEXED_BLOCKS`] blocks in all. Other messages are skipped; a bad frame or a
/// lying index ends it.
pub fn read_file_end(bytes: &[u8], start: u64) -> FileEnd {
    read_end(bytes, Some(start))
}

/// The overviews of a file's end ([`read_file_end`] without its indexes, passed by unread):
/// what a viewer paints first.
pub fn read_file_overviews(bytes: &[u8]) -> Vec<(RunId, Overview)> {
    read_end(bytes, None).overviews
}

/// [`read_file_end`]; the indexes only with `start`.
fn read_end(bytes: &[u8], start: Option<u64>) -> FileEnd {
    let mut end = FileEnd::default();
    let mut indexed = 0usize;
    let mut rest = bytes;
    while let Some((len, after)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        let Some(payload) = after.get(..len) else {
            end.error = Some("the file's end is cut inside a frame".into());
            break;
        };
        if payload.first() == Some(&BLOCK_INDEX) {
            let Some(start) = start else {
                rest = &after[len..];
                continue;
            };
            match BlockIndex::read(payload, start) {
                Ok(index) if indexed + index.blocks.len() <= MAX_INDEXED_BLOCKS => {
                    indexed += index.blocks.len();
                    end.indexes.push(index);
                }
                Ok(_) => {
                    end.error =
                        Some(format!("the file's end indexes over {MAX_INDEXED_BLOCKS} blocks"));
                    break;
                }
                Err(why) => {
                    end.error = Some(why);
                    break;
                }
            }
        } else {
            match decode(payload) {
                Ok(ToBrowser::Overview { run, overview }) => end.overviews.push((run, overview)),
                Ok(_) => {}
                Err(e) => {
                    end.error = Some(format!("the file's end: {e}"));
                    break;
                }
            }
        }
        rest = &after[len..];
    }
    end
}

/// Frames that arrive in pieces (a file read in chunks, a socket): push bytes as they come and
/// take whole messages out. It holds at most one unfinished frame beside the bytes pushed since,
/// and a frame's length is checked against [`MAX_MESSAGE_BYTES`] before its payload is awaited.
#[derive(Debug, Default)]
pub struct FrameStream {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`.
    start: usize,
    /// The stream offset of `buf[0]`, for errors that say where.
    base: u64,
    /// Messages taken so far: the first is decoded with [`decode_first`].
    taken: u64,
    failed: bool,
    /// The last run start decoded by [`FrameStream::with_next_message`], whose place the next
    /// one is decoded in.
    run_start: run_start::RunStartPlace,
    /// The last batch of events decoded by [`FrameStream::with_next_message`], whose place
    /// (and whose samples' boxes) the next one is decoded in.
    events: events::EventsPlace,
    /// The last block of a file's events: its batches not yet handed on.
    block: Unpacked,
}

impl FrameStream {
    pub fn new() -> FrameStream {
        FrameStream::default()
    }

    /// Bytes of the stream consumed by the messages taken so far.
    pub fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        // Drop what was consumed before growing, so the buffer stays one frame plus one push.
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.base += self.start as u64;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, `None` until more bytes are pushed, or the error that ends the
    /// stream (nothing after it is decoded). Inlined into its caller, so that the message is
    /// decoded where the caller keeps it instead of being copied out through each call (a
    /// message is over 200 bytes, and a file of small messages spent a large share of its
    /// reading in those copies). [`FrameStream::with_next_message`] copies it nowhere.
    #[inline]
    pub fn next_message(&mut self) -> Option<Result<ToBrowser, WireError>> {
        if let Some(batch) = self.next_batch_of_block(&mut Default::default()) {
            return Some(batch.map(|events| ToBrowser::Events { run: self.block.run, events }));
        }
        let first = self.taken == 0;
        let payload = match self.take_frame()? {
            Ok(payload) => &self.buf[payload],
            Err(e) => return Some(Err(e)),
        };
        if !first && payload.first() == Some(&BLOCK) {
            if let Err(why) = self.block.read(payload) {
                self.failed = true;
                return Some(Err(WireError::Malformed(why)));
            }
            let batch = self.next_batch_of_block(&mut Default::default());
            let batch = batch.expect("a block holds an event");
            return Some(batch.map(|events| ToBrowser::Events { run: self.block.run, events }));
        }
        let decoded = if first { decode_first(payload) } else { decode_message(payload) };
        if decoded.is_err() {
            self.failed = true;
        }
        Some(decoded)
    }

    /// [`FrameStream::next_message`] handed to `take` by reference, where it was decoded: what
    /// `take` returns, `None` until more bytes are pushed. For readers that look at each
    /// message and let it go (`show`, `export`): a returned message was copied at each call it
    /// went through (224 bytes each time), which was a third of the CPU of reading a file of
    /// messages of one or two events.
    #[inline]
    pub fn with_next_message<T>(
        &mut self,
        take: impl FnOnce(Result<&ToBrowser, WireError>) -> T,
    ) -> Option<T> {
        if let Some(made) = self.events.next_of_block(&mut self.block) {
            return Some(self.hand_on_batch_of_block(made, take));
        }
        let first = self.taken == 0;
        let payload = match self.take_frame()? {
            Ok(payload) => &self.buf[payload],
            Err(e) => return Some(take(Err(e))),
        };
        if first {
            let decoded = decode_first(payload);
            self.failed = decoded.is_err();
            return Some(take(decoded.as_ref().map_err(Clone::clone)));
        }
        // A run's start by hand, into the place the last one was decoded in (`run_start`).
        if payload.first() == Some(&run_start::RUN_STARTED)
            && run_start::run_started_into(payload, &mut self.run_start)
        {
            if let Some(start) = &self.run_start.start {
                return Some(take(Ok(start)));
            }
        }
        // A block of a file's events, its batches handed on one by one in the place of the
        // last batch, its samples in the boxes the batches before let go.
        if payload.first() == Some(&BLOCK) {
            if let Err(why) = self.block.read(payload) {
                self.failed = true;
                return Some(take(Err(WireError::Malformed(why))));
            }
            let made = self.events.next_of_block(&mut self.block).expect("a block holds an event");
            return Some(self.hand_on_batch_of_block(made, take));
        }
        // A batch of events into the place of the last one, its samples into their boxes.
        if payload.first() == Some(&events::EVENTS) && self.events.decode(payload) {
            return Some(take(Ok(&self.events.batch)));
        }
        // `decode` without its result moved out, nor into another `Result` (a copy of the
        // message): the frame's length is already checked.
        let mut decoder = postcard::Deserializer::from_bytes(payload);
        match ToBrowser::deserialize(&mut decoder) {
            Ok(ref message) => Some(take(Ok(message))),
            Err(e) => {
                self.failed = true;
                Some(take(Err(WireError::Malformed(e.to_string()))))
            }
        }
    }

    /// The batch of a block just made in the place of the last (`made`), handed to `take`; an
    /// error ends the stream.
    fn hand_on_batch_of_block<T>(
        &mut self,
        made: Result<(), String>,
        take: impl FnOnce(Result<&ToBrowser, WireError>) -> T,
    ) -> T {
        match made {
            Ok(()) => take(Ok(&self.events.batch)),
            Err(why) => {
                self.failed = true;
                take(Err(WireError::Malformed(why)))
            }
        }
    }

    /// The next batch of the block being read, if it has events left; an error ends the
    /// stream.
    fn next_batch_of_block(
        &mut self,
        spare: &mut crate::compact::SpareSamples,
    ) -> Option<Result<Vec<Event>, WireError>> {
        let batch = self.block.next_batch(spare, EVENTS_PER_MESSAGE)?;
        if batch.is_err() {
            self.failed = true;
        }
        Some(batch.map_err(WireError::Malformed))
    }

    /// Where the next whole frame's payload is in `buf` (the frame then counts as taken),
    /// `None` until all of it has arrived, or the error of a length over the limit.
    #[inline]
    fn take_frame(&mut self) -> Option<Result<std::ops::Range<usize>, WireError>> {
        loop {
            if self.failed {
                return None;
            }
            let rest = &self.buf[self.start..];
            let len_bytes = rest.get(..4)?;
            let len = u32::from_le_bytes(len_bytes.try_into().expect("slice of 4")) as usize;
            if len > MAX_MESSAGE_BYTES {
                self.failed = true;
                return Some(Err(WireError::TooLarge { len, max: MAX_MESSAGE_BYTES }));
            }
            if rest.len() < 4 + len {
                return None;
            }
            let payload = self.start + 4..self.start + 4 + len;
            self.start += 4 + len;
            self.taken += 1;
            // A block index repeats what the blocks say, for a reader that seeks
            // ([`read_file_end`]): one that reads every message passes it by.
            // (An empty frame has no first byte: the next frame's is not its.)
            let index = self.taken > 1 && len > 0 && self.buf[payload.start] == BLOCK_INDEX;
            if !index {
                return Some(Ok(payload));
            }
        }
    }

    /// At the end of the stream: the error if it stopped inside a frame. (A block's batches
    /// not yet taken are not an error: they are whole, for the next calls.)
    pub fn finish(&self) -> Option<WireError> {
        let cut = !self.failed && self.start < self.buf.len();
        cut.then(|| WireError::Truncated { offset: self.offset() as usize })
    }
}

/// Where a page's live stream was cut, as it asks the probe to resume it (`/ws?resume=`): its
/// stream (a restarted probe numbers its runs from 1 again), the last run it had begun
/// receiving, how many of that run's events it had, and whether it had its end. Every earlier
/// run it had whole: one run goes at a time, and each run's end is sent before the next run's
/// start. One type, one text form, for the page that writes it and the probe that reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumePoint {
    pub stream: u64,
    pub run: RunId,
    pub events: u64,
    pub finished: bool,
}

impl std::fmt::Display for ResumePoint {
    /// `STREAM.RUN.EVENTS.FINISHED`, FINISHED 0 or 1.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let finished = u8::from(self.finished);
        write!(f, "{}.{}.{}.{finished}", self.stream, self.run.0, self.events)
    }
}

impl ResumePoint {
    /// Reads what [`ResumePoint`]'s `Display` wrote; `None` for anything else.
    pub fn parse(text: &str) -> Option<ResumePoint> {
        let mut parts = text.split('.');
        let mut next = || parts.next()?.parse::<u64>().ok();
        let (stream, run, events, finished) = (next()?, next()?, next()?, next()?);
        if parts.next().is_some() {
            return None;
        }
        Some(ResumePoint {
            stream,
            run: RunId(u32::try_from(run).ok()?),
            events,
            finished: match finished {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_trailer_is_found_at_the_end_and_names_the_overviews_before_it() {
        use crate::overview::{key, Overview, Priority};
        let overview = Overview::of((0..10_000u64).map(|i| (key(Priority::Call, i), i == 77)));
        let mut file = Vec::new();
        write_frame(&ToBrowser::Rejected { reason: "stands for the events".into() }, &mut file);
        let start = file.len();
        write_frame(&ToBrowser::Overview { run: RunId(1), overview: overview.clone() }, &mut file);
        let bytes = (file.len() - start) as u64;
        write_frame(&ToBrowser::Trailer(Trailer::new(bytes)), &mut file);
        assert_eq!(file.len() - start - bytes as usize, TRAILER_FRAME_BYTES, "fixed size");
        let range = Trailer::file_end_in(&file, file.len() as u64).expect("a trailer");
        assert_eq!(range, start as u64..start as u64 + bytes);
        let found = read_file_end(&file[range.start as usize..range.end as usize], range.start);
        assert_eq!(found.overviews, vec![(RunId(1), overview)]);
        // A file cut anywhere, or one without a trailer, has none.
        for cut in [1, 5, TRAILER_FRAME_BYTES] {
            let short = &file[..file.len() - cut];
            assert_eq!(Trailer::file_end_in(short, short.len() as u64), None);
        }
        // A trailer claiming more than the file holds is not believed.
        let mut lying = Vec::new();
        write_frame(&ToBrowser::Trailer(Trailer::new(1000)), &mut lying);
        assert_eq!(Trailer::file_end_in(&lying, lying.len() as u64), None);
    }

    use super::*;
    use crate::event::{ConnId, EventKind, ReqId, Side};
    use crate::spec::RrSpec;

    fn sample_stream() -> Vec<ToBrowser> {
        let event = Event {
            at_ns: 43_600_000,
            side: Side::Server,
            conn: ConnId(1),
            req: ReqId(7),
            kind: EventKind::ReadDone { bytes: 2048 },
        };
        vec![
            ToBrowser::Hello(Hello::current("0.1.0", HostFacts::default())),
            ToBrowser::RunStarted {
                run: RunId(1),
                spec: Scenario::Rr(RrSpec::default()),
                instruments: Instruments::default(),
            },
            ToBrowser::Events { run: RunId(1), events: vec![event; 3] },
            ToBrowser::RunFinished { run: RunId(1), outcome: RunOutcome::Completed },
        ]
    }

    #[test]
    fn messages_round_trip() {
        for message in sample_stream() {
            let bytes = encode(&message);
            assert_eq!(decode::<ToBrowser>(&bytes).unwrap(), message);
        }
        let start = ToProbe::StartRun { spec: Scenario::Rr(RrSpec::default()) };
        assert_eq!(decode::<ToProbe>(&encode(&start)).unwrap(), start);
    }

    #[test]
    fn events_are_compact() {
        // A read of 2048 bytes at 43.6 ms: varints keep it near a dozen bytes.
        let ToBrowser::Events { events, .. } = &sample_stream()[2] else { unreachable!() };
        assert!(encode(&events[0]).len() <= 12, "{} bytes", encode(&events[0]).len());
    }

    /// A block's frame has the tag after `ToBrowser`'s last variant, a block index's the one
    /// after it: a variant appended would take it (a new message must first take both places
    /// with variants no one sends). `serde` lists the variants it knows when it refuses one it
    /// does not.
    #[test]
    fn no_message_takes_the_tag_of_a_block() {
        assert_eq!(BLOCK_INDEX, BLOCK + 1);
        let refused = serde_json::from_str::<ToBrowser>("\"NoSuchMessage\"").unwrap_err();
        let listed = refused.to_string().matches('`').count() / 2;
        let variants = listed - 1; // the refused name is quoted too
        assert_eq!(variants, usize::from(BLOCK), "{refused}");
        let last = ToBrowser::ClassVotes(ClassVotes::default());
        assert_eq!(encode(&last)[0], BLOCK - 1, "the last variant's tag");
    }

    #[test]
    fn a_newer_version_is_refused_by_name() {
        let next = PROTOCOL_VERSION + 1;
        let newer = ToBrowser::Hello(Hello {
            protocol_version: next,
            ackscope_version: next.to_string(),
            host: HostFacts::default(),
        });
        let decoded: ToBrowser = decode(&encode(&newer)).unwrap();
        let err = check_hello(&decoded).unwrap_err();
        assert_eq!(err, WireError::Version { found: next, supported: PROTOCOL_VERSION });
        assert!(err.to_string().contains(&format!("version {next}")));
        assert!(check_hello(&sample_stream()[0]).is_ok());
        let older = ToBrowser::Hello(Hello {
            protocol_version: 1,
            ..Hello::current("0.1.0", HostFacts::default())
        });
        assert!(check_hello(&older).is_ok(), "version 1 streams are version 2 streams");
        assert!(decode_first(&encode(&older)).is_ok());
    }

    #[test]
    fn a_newer_hello_that_no_longer_decodes_is_still_refused_by_version() {
        // The next version's Hello: tag 0, the version, then fields this build does not know.
        let next = PROTOCOL_VERSION + 1;
        assert!(next < 0x80, "one byte as a varint");
        let newer = [0u8, next as u8, 0xff, 0xff, 0xff];
        assert_eq!(peek_version(&newer), Some(next));
        assert_eq!(
            decode_first(&newer).unwrap_err(),
            WireError::Version { found: next, supported: PROTOCOL_VERSION }
        );
        let mut file = Vec::new();
        file.extend_from_slice(&(newer.len() as u32).to_le_bytes());
        file.extend_from_slice(&newer);
        let mut reader = FrameStream::new();
        reader.push(&file);
        let refused = reader.next_message();
        assert!(matches!(refused, Some(Err(WireError::Version { found, .. })) if found == next));
        let current = encode(&sample_stream()[0]);
        assert_eq!(peek_version(&current), Some(PROTOCOL_VERSION));
        assert!(decode_first(&current).is_ok());
    }

    #[test]
    fn file_framing_keeps_the_valid_prefix_of_a_truncated_stream() {
        let mut file = Vec::new();
        for message in sample_stream() {
            write_frame(&message, &mut file);
        }
        let cut = &file[..file.len() - 3];
        let mut reader = FrameStream::new();
        reader.push(cut);
        let mut good = Vec::new();
        let mut error = None;
        while let Some(result) = reader.next_message() {
            match result {
                Ok(message) => good.push(message),
                Err(e) => error = Some(e),
            }
        }
        let error = error.or_else(|| reader.finish());
        assert_eq!(good, sample_stream()[..3]);
        assert!(matches!(error, Some(WireError::Truncated { .. })));
    }

    #[test]
    fn garbage_never_panics_and_huge_lengths_are_refused_before_allocating() {
        let huge = [0xff, 0xff, 0xff, 0x7f, 1, 2, 3];
        let mut reader = FrameStream::new();
        reader.push(&huge);
        assert!(matches!(reader.next_message(), Some(Err(WireError::TooLarge { .. }))));
        assert!(reader.next_message().is_none());
        for seed in 0u32..2000 {
            let bytes: Vec<u8> = (0..(seed % 40)).map(|i| (seed * 31 + i * 17) as u8).collect();
            let _ = decode::<ToBrowser>(&bytes);
            let _ = decode::<ToProbe>(&bytes);
        }
    }

    #[test]
    fn a_stream_pushed_in_any_pieces_gives_the_same_messages() {
        let messages = sample_stream();
        let mut bytes = Vec::new();
        for message in &messages {
            write_frame(message, &mut bytes);
        }
        for piece in [1, 3, 4, 5, 17, bytes.len()] {
            let mut stream = FrameStream::new();
            let mut got = Vec::new();
            for chunk in bytes.chunks(piece) {
                stream.push(chunk);
                while let Some(message) = stream.next_message() {
                    got.push(message.expect("valid"));
                }
            }
            assert_eq!(got, messages, "pieces of {piece}");
            assert_eq!(stream.finish(), None);
            assert_eq!(stream.offset(), bytes.len() as u64);
        }
        // Cut inside the last frame: every message before it, then where it was cut.
        let mut stream = FrameStream::new();
        stream.push(&bytes[..bytes.len() - 3]);
        let mut count = 0;
        while let Some(message) = stream.next_message() {
            message.expect("valid");
            count += 1;
        }
        assert_eq!(count, messages.len() - 1);
        assert!(matches!(stream.finish(), Some(WireError::Truncated { .. })));
    }

    /// `with_next_message` hands over by reference what `next_message` returns, a run's start
    /// and batches of events decoded in place among them, in any pieces, to the same errors.
    #[test]
    fn a_message_looked_at_in_place_is_the_message_returned() {
        let mut bytes = Vec::new();
        for message in sample_stream().iter().chain(&sample_stream()[1..]) {
            write_frame(message, &mut bytes);
        }
        let huge = u32::MAX.to_le_bytes();
        let damaged = {
            let mut damaged = bytes.clone();
            let at = damaged.len() / 2;
            damaged[at] ^= 0xff;
            damaged
        };
        for stream_bytes in [bytes.clone(), bytes[..bytes.len() - 3].to_vec(), damaged] {
            for piece in [1, 7, stream_bytes.len()] {
                let (mut returned, mut in_place) = (FrameStream::new(), FrameStream::new());
                let mut messages = 0;
                for chunk in stream_bytes.chunks(piece).chain([&huge[..]]) {
                    returned.push(chunk);
                    in_place.push(chunk);
                    loop {
                        let message = returned.next_message();
                        let seen = in_place.with_next_message(|seen| seen.cloned());
                        assert_eq!(seen, message, "pieces of {piece}");
                        match message {
                            Some(_) => messages += 1,
                            None => break,
                        }
                    }
                }
                assert_eq!(in_place.finish(), returned.finish());
                assert!(messages >= 2, "{messages} messages in pieces of {piece}");
            }
        }
    }

    /// A message decoded by `decode_message` (its batches of events by hand) is what `serde`
    /// decodes, and a damaged one is refused by both, with `serde`'s error.
    #[test]
    fn a_message_decoded_by_hand_is_what_serde_decodes_even_damaged() {
        let mut rng = crate::analysis::batches::Rng(5);
        let (mut took, mut refused) = (0, 0);
        for message in &sample_stream()[1..] {
            let bytes = encode(message);
            assert_eq!(decode_message(&bytes).as_ref(), Ok(message));
            for _ in 0..300 {
                let mut damaged = bytes.clone();
                let at = rng.below(damaged.len());
                damaged[at] = rng.below(256) as u8;
                damaged.truncate(damaged.len() - rng.below(3).min(damaged.len()));
                let by_serde = decode::<ToBrowser>(&damaged);
                if damaged.first() == Some(&BLOCK) {
                    // A block of a file's events, which `serde` does not know: refused by both.
                    assert!(decode_message(&damaged).is_err() && by_serde.is_err());
                    continue;
                }
                assert_eq!(decode_message(&damaged), by_serde, "{damaged:x?}");
                if by_serde.is_ok() {
                    took += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert!(took > 0 && refused > 0, "{took} damaged messages taken, {refused} refused");
    }

    #[test]
    fn a_hostile_length_costs_nothing_before_it_is_refused() {
        let mut stream = FrameStream::new();
        stream.push(&u32::MAX.to_le_bytes());
        assert!(matches!(stream.next_message(), Some(Err(WireError::TooLarge { .. }))));
        stream.push(&[0; 1024]);
        assert!(stream.next_message().is_none(), "nothing after the error");
        assert!(stream.buf.capacity() < 64 * 1024, "no allocation for the claimed length");

        // A length within the limit, and only a few bytes behind it: they are all it costs.
        let mut stream = FrameStream::new();
        stream.push(&(MAX_MESSAGE_BYTES as u32).to_le_bytes());
        stream.push(&[7; 10]);
        assert!(stream.next_message().is_none(), "waiting for the rest of the frame");
        assert!(stream.buf.capacity() < 64 * 1024, "memory follows the bytes that arrived");
        assert_eq!(stream.finish(), Some(WireError::Truncated { offset: 0 }));
    }

    #[test]
    fn a_resume_point_reads_back_what_it_writes_and_nothing_else() {
        use super::ResumePoint;
        let point = ResumePoint { stream: 7, run: RunId(3), events: 20, finished: true };
        assert_eq!(point.to_string(), "7.3.20.1");
        assert_eq!(ResumePoint::parse(&point.to_string()), Some(point));
        for bad in ["", "7.3.20", "7.3.20.2", "7.3.20.1.9", "7.x.20.0", "7.4294967296.0.0"] {
            assert_eq!(ResumePoint::parse(bad), None, "{bad:?}");
        }
    }
}
