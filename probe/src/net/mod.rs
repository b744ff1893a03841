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
    if request.is_empty() {
        answer.resize(len as usize, XOR_KEY);
        return;
    }
    // Whole copies, then one XOR pass: both vectorize (a byte-by-byte `cycle()` cost more
    // than the exchange's syscalls).
    let len = len as usize;
    while answer.len() < len {
        let more = (len - answer.len()).min(request.len());
        answer.extend_from_slice(&request[..more]);
    }
    for byte in answer.iter_mut() {
        *byte ^= XOR_KEY;
    }
}

/// Wraps an IO error with the operation that failed, for messages such as
/// "echo server read from 127.0.0.1:4321: connection reset by peer".
pub(crate) fn context(err: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}
