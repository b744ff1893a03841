//! Sockets: everything in the probe that calls the kernel's socket API lives here.

pub mod bulk;
pub mod client;
pub mod echo;
pub mod endpoint;
pub mod options;
pub mod peers;
pub mod record;
pub mod tcp_info;

use std::io;

/// The echo protocol's length prefix: 4 bytes, big-endian (docs/PROTOCOL.md).
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// The response body is the request body with every byte XORed with this key, so the client can
/// check that what came back is its own request, transformed.
pub const XOR_KEY: u8 = 0x5a;

/// The answer to `request`: `len` bytes, byte i being `request[i % request.len()] ^ XOR_KEY`
/// (the request XORed, repeated or cut to the answer's size).
pub fn answer_into(request: &[u8], len: u32, answer: &mut Vec<u8>) {
    answer.clear();
    append_answer(request, len, answer);
}

/// [`answer_into`], appended to what `out` holds.
fn append_answer(request: &[u8], len: u32, out: &mut Vec<u8>) {
    let (from, len) = (out.len(), len as usize);
    if request.is_empty() {
        out.resize(from + len, XOR_KEY);
        return;
    }
    // Whole copies, then one XOR pass: both vectorize (a byte-by-byte `cycle()` cost more
    // than the exchange's syscalls).
    while out.len() - from < len {
        let more = (len - (out.len() - from)).min(request.len());
        out.extend_from_slice(&request[..more]);
    }
    for byte in &mut out[from..] {
        *byte ^= XOR_KEY;
    }
}

/// One message as it goes on the wire: the 4-byte big-endian length of its body, then the
/// body, in one buffer. Built once (the client's request) or into a reused buffer (the
/// server's answers), so that a single `write()` of it copies nothing in user space.
#[derive(Debug, Default)]
pub struct Message {
    bytes: Vec<u8>,
}

impl Message {
    /// `body`, framed.
    pub fn of(body: &[u8]) -> io::Result<Message> {
        let len = u32::try_from(body.len()).map_err(|_| io::Error::other("body over 4 GiB"))?;
        let mut bytes = Vec::with_capacity(LENGTH_PREFIX_BYTES + body.len());
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(body);
        Ok(Message { bytes })
    }

    /// Makes this the answer to `request` ([`answer_into`]), reusing the buffer.
    pub fn answer(&mut self, request: &[u8], len: u32) {
        self.bytes.clear();
        self.bytes.extend_from_slice(&len.to_be_bytes());
        append_answer(request, len, &mut self.bytes);
    }

    /// Gives back memory past `keep` bytes (after a large answer, before a long wait).
    pub fn release_above(&mut self, keep: usize) {
        if self.bytes.capacity() > keep {
            self.bytes = Vec::new();
        }
    }

    /// The length prefix and the body together.
    pub fn framed(&self) -> &[u8] {
        &self.bytes
    }

    pub fn prefix(&self) -> &[u8] {
        &self.bytes[..LENGTH_PREFIX_BYTES]
    }

    pub fn body(&self) -> &[u8] {
        &self.bytes[LENGTH_PREFIX_BYTES..]
    }
}

/// Wraps an IO error with the operation that failed, for messages such as
/// "echo server read from 127.0.0.1:4321: connection reset by peer".
pub(crate) fn context(err: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_its_length_then_its_body_and_an_answer_reuses_it() {
        let request = Message::of(b"abc").unwrap();
        assert_eq!(request.framed(), b"\0\0\0\x03abc");
        assert_eq!((request.prefix(), request.body()), (&b"\0\0\0\x03"[..], &b"abc"[..]));
        let mut answer = Message::default();
        for len in [7, 2, 0] {
            answer.answer(request.body(), len);
            let mut body = Vec::new();
            answer_into(request.body(), len, &mut body);
            assert_eq!(answer.prefix(), len.to_be_bytes());
            assert_eq!(answer.body(), body, "the XORed request, cut or repeated to {len} bytes");
        }
        answer.answer(b"", 3);
        assert_eq!(answer.body(), [XOR_KEY; 3]);
    }
}
