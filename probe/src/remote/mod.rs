//! Two hosts: `ackscope run --remote B:PORT` on host A drives the `ackscope server` on host B
//! over a control connection of its own (docs/REMOTE.md; the messages are
//! `ackscope_shared::control`).
//!
//! - [`host`]: B's side: checks the token and the versions, runs the server side of each run on
//!   a listener of its own, answers clock exchanges and streams its events back.
//! - [`drive`]: A's side: connects, estimates B's clock offset, and gives B's events A's clock,
//!   connection ids and request ids.
//!
//! Both frame messages here: a 4-byte little-endian length, then the postcard payload, the
//! length checked against the bound before anything is allocated: [`MAX_HELLO_BYTES`] for the
//! hello, read before the token is checked, [`MAX_CONTROL_MESSAGE_BYTES`] after.

pub mod drive;
pub mod host;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ackscope_shared::control::{MAX_CONTROL_MESSAGE_BYTES, MAX_HELLO_BYTES, MAX_TOKEN_BYTES};
use ackscope_shared::wire;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Writes one framed message.
pub(crate) fn send<T: Serialize>(stream: &mut impl Write, message: &T) -> io::Result<()> {
    let mut frame = Vec::new();
    wire::write_frame(message, &mut frame);
    stream.write_all(&frame)
}

/// Reads one framed message (see [`receive_frame`]).
pub(crate) fn receive<T: DeserializeOwned>(stream: &mut impl Read) -> io::Result<T> {
    decode(&receive_frame(stream)?)
}

pub(crate) fn decode<T: DeserializeOwned>(payload: &[u8]) -> io::Result<T> {
    wire::decode(payload).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// Reads one frame's payload. Its buffer grows as the bytes arrive, so a peer that announces a
/// large frame and sends nothing costs nothing.
pub(crate) fn receive_frame(stream: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_CONTROL_MESSAGE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "control message of {len} bytes is over the {MAX_CONTROL_MESSAGE_BYTES}-byte \
                 limit; is the peer an ackscope probe?"
            ),
        ));
    }
    let mut payload = Vec::new();
    stream.by_ref().take(len as u64).read_to_end(&mut payload)?;
    if payload.len() < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the control connection closed inside a message",
        ));
    }
    Ok(payload)
}

/// Reads the hello frame's payload into `buf`, before the peer is known: a length over
/// [`MAX_HELLO_BYTES`] is refused before any of the payload is read, and nothing is allocated.
pub(crate) fn receive_hello<'a>(
    stream: &mut impl Read,
    buf: &'a mut [u8; MAX_HELLO_BYTES],
) -> Result<&'a [u8], HelloError> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    let Some(payload) = buf.get_mut(..len as usize) else {
        return Err(HelloError::TooLong(len));
    };
    stream.read_exact(payload)?;
    Ok(payload)
}

/// Why no hello could be read.
#[derive(Debug)]
pub(crate) enum HelloError {
    /// The frame announced this many bytes, over [`MAX_HELLO_BYTES`].
    TooLong(u32),
    Io(io::Error),
}

impl From<io::Error> for HelloError {
    fn from(e: io::Error) -> HelloError {
        HelloError::Io(e)
    }
}

/// A stream whose reads share one deadline: each read may wait only for what is left of it, so
/// a peer sending a byte at a time is cut off at the deadline all the same (a read timeout alone
/// starts again with every byte). Past the deadline a read fails with `TimedOut`.
pub(crate) struct Deadline<'a> {
    stream: &'a TcpStream,
    until: Instant,
    /// The whole time allowed, for the error.
    allowed: Duration,
}

impl<'a> Deadline<'a> {
    pub fn new(stream: &'a TcpStream, allowed: Duration) -> Deadline<'a> {
        Deadline { stream, until: Instant::now() + allowed, allowed }
    }

    fn passed(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the handshake did not complete within {} s", self.allowed.as_secs_f64()),
        )
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.passed());
        }
        self.stream.set_read_timeout(Some(left))?;
        match (&mut &*self.stream).read(buf) {
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Err(self.passed())
            }
            read => read,
        }
    }
}

/// Both probes must be the same build's format: the refusal names both versions.
pub(crate) fn versions_differ(theirs: (u16, &str), whose: &str) -> Option<String> {
    let ours = (wire::PROTOCOL_VERSION, env!("CARGO_PKG_VERSION"));
    (theirs != ours).then(|| {
        format!(
            "version mismatch: this host runs ackscope {} (protocol {}), the {whose} ackscope {} \
             (protocol {}); install the same ackscope version on both hosts",
            ours.1, ours.0, theirs.1, theirs.0
        )
    })
}

/// Frames from a socket with a read timeout: a timeout inside a frame keeps the bytes read so
/// far for the next call (a plain `read_exact` would lose them).
#[derive(Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// The next message; `WouldBlock`/`TimedOut` when the timeout passed first.
    pub fn next<T: DeserializeOwned>(&mut self, stream: &mut impl Read) -> io::Result<T> {
        loop {
            if let Some((len, rest)) = self.buf.split_first_chunk::<4>() {
                let len = u32::from_le_bytes(*len) as usize;
                if len > MAX_CONTROL_MESSAGE_BYTES {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("control message of {len} bytes is over the limit"),
                    ));
                }
                if rest.len() >= len {
                    let message = decode(&rest[..len]);
                    self.buf.drain(..4 + len);
                    return message;
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            match stream.read(&mut chunk)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the control connection",
                    ))
                }
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// A fresh secret for a server's control connections: 128 bits from the kernel, in hex.
pub fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `token` may be a listener's token (`ackscope server --token`, `ackscope watch
/// --metrics-token`): 16 to [`MAX_TOKEN_BYTES`] printable characters; what to give, if not.
pub(crate) fn check_token(token: &str) -> Result<(), String> {
    if (16..=MAX_TOKEN_BYTES).contains(&token.len()) && token.chars().all(|c| c.is_ascii_graphic())
    {
        return Ok(());
    }
    Err(format!(
        "give 16 to {MAX_TOKEN_BYTES} printable characters (or leave it out for a random one)"
    ))
}

/// Compares a presented token with the server's in time that does not depend on where they
/// first differ.
pub(crate) fn token_matches(presented: &str, expected: &str) -> bool {
    let (a, b) = (presented.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use ackscope_shared::control::ToClient;

    #[test]
    fn a_listeners_token_is_16_to_128_printable_characters() {
        assert_eq!(check_token(&"t".repeat(16)), Ok(()));
        assert_eq!(check_token(&"t".repeat(MAX_TOKEN_BYTES)), Ok(()));
        for refused in
            ["t".repeat(15), "t".repeat(MAX_TOKEN_BYTES + 1), format!("{} t", "t".repeat(16))]
        {
            let problem = check_token(&refused).unwrap_err();
            assert!(problem.contains("16 to 128 printable characters"), "{problem}");
        }
        assert_eq!(check_token(&new_token().unwrap()), Ok(()), "a fresh one passes");
    }

    #[test]
    fn a_frame_goes_and_comes_back() {
        let mut bytes = Vec::new();
        let message = ToClient::Refused { reason: "no".into() };
        send(&mut bytes, &message).unwrap();
        let back: ToClient = receive(&mut bytes.as_slice()).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn a_hostile_length_is_refused_before_anything_is_allocated() {
        let mut huge = u32::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"xx");
        let error = receive::<ToClient>(&mut huge.as_slice()).unwrap_err();
        assert!(error.to_string().contains("over the"), "{error}");
        // Announced within the bound, then cut short: an error, not a wait or a huge buffer.
        let mut short = 1000u32.to_le_bytes().to_vec();
        short.extend_from_slice(b"abc");
        let error = receive::<ToClient>(&mut short.as_slice()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// Hands out its bytes a few at a time, with a timeout between pieces.
    struct Trickle(Vec<u8>, usize);

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.1 += 1;
            if self.1 % 2 == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = out.len().min(3).min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    #[test]
    fn a_timeout_inside_a_frame_loses_nothing() {
        let mut bytes = Vec::new();
        let first = ToClient::Refused { reason: "first".into() };
        let second = ToClient::Refused { reason: "second one".into() };
        send(&mut bytes, &first).unwrap();
        send(&mut bytes, &second).unwrap();
        let mut stream = Trickle(bytes, 0);
        let mut reader = FrameReader::default();
        let mut got = Vec::new();
        while got.len() < 2 {
            match reader.next::<ToClient>(&mut stream) {
                Ok(message) => got.push(message),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, [first, second]);
        let end = reader.next::<ToClient>(&mut stream);
        assert!(matches!(end, Err(ref e) if e.kind() == io::ErrorKind::WouldBlock));
        let end = reader.next::<ToClient>(&mut stream).unwrap_err();
        assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_hello_is_bounded_before_it_is_read() {
        let mut buf = [0u8; MAX_HELLO_BYTES];
        let mut long = (MAX_HELLO_BYTES as u32 + 1).to_le_bytes().to_vec();
        long.extend_from_slice(&[0u8; 64]);
        let error = receive_hello(&mut long.as_slice(), &mut buf).unwrap_err();
        assert!(matches!(error, HelloError::TooLong(513)), "{error:?}");
        let mut fits = Vec::new();
        send(&mut fits, &ToClient::Refused { reason: "hello".into() }).unwrap();
        let payload = receive_hello(&mut fits.as_slice(), &mut buf).unwrap();
        let back: ToClient = decode(payload).unwrap();
        assert_eq!(back, ToClient::Refused { reason: "hello".into() });
    }

    #[test]
    fn reads_share_one_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut reads = Deadline::new(&stream, Duration::from_millis(300));
        let began = Instant::now();
        let mut got = [0u8; 64];
        // A byte every 100 ms: each read is quick, the deadline still ends them.
        let error = loop {
            peer.write_all(b"x").unwrap();
            match reads.read(&mut got) {
                Ok(_) => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => break e,
            }
            assert!(began.elapsed() < Duration::from_secs(5), "never cut off");
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(error.to_string().contains("within 0.3 s"), "{error}");
        assert!(began.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn tokens_are_fresh_and_compared_whole() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(token_matches(&a, &a.clone()));
        assert!(!token_matches(&a, &b));
        assert!(!token_matches(&a[..31], &a), "a prefix is not the token");
        assert!(!token_matches("", &a));
    }
}
