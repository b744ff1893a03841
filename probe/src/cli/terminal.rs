//! Output that is safe for a terminal: strings read from a file (a version, a host's facts, an
//! error) are printed as data, never as commands to the terminal. A crafted file could otherwise
//! clear the screen, retitle the window, rewrite what was printed before, or (with a bidi
//! override) show text in another order than it is.
//!
//! [`Printable`] is the one sanitiser of everything a command prints and of the JSON files it
//! writes for people to read: one predicate ([`needs_escape`]) says which characters are
//! escaped, and each rendering says how: `\u{1b}` on a terminal, `\u001b` in JSON.

use std::io::{self, Write};

/// Prints one line of a long-running command's start (its address, its token, its links) and
/// flushes it. Whoever started the command may stop reading once it has the line it needed (a
/// script reads the address, then closes the pipe): the command serves on instead of dying on
/// a closed stdout.
pub fn announce(line: std::fmt::Arguments) {
    let mut out = io::stdout().lock();
    let _ = out.write_fmt(line).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
}

/// Whether `c` must not reach a terminal as it is: every control character but newline and tab
/// (C0 with ESC and BEL, DEL, C1 with U+009B, the one-character ESC [), and the bidi controls
/// (U+202E makes a terminal or an editor show what follows right to left).
pub fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c)
}

/// The invisible characters that reorder text: the embeddings and overrides (U+202A-U+202E),
/// the isolates (U+2066-U+2069) and the marks (U+200E, U+200F, U+061C).
fn is_bidi_control(c: char) -> bool {
    let marks = ['\u{200e}', '\u{200f}', '\u{61c}'];
    ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
        || marks.contains(&c)
}

/// Whether `bytes` are printable ASCII, newlines and tabs only, none of which [`needs_escape`]
/// (and so valid UTF-8): the bulk of every output (a JSON export of a large file is mostly
/// numbers and field names). Checked a block of 64 bytes at a time with no early exit inside a
/// block, which the compiler turns into vector instructions (a byte-at-a-time `all` cannot be,
/// and took a third of `export --json`'s CPU), for printable characters alone first: a block
/// with a newline or a tab (rare in an export) is looked at again for them.
fn is_plain_ascii(bytes: &[u8]) -> bool {
    let printable = |b: u8| b.wrapping_sub(b' ') < b'~' - b' ' + 1;
    let plain = |b: u8| printable(b) | (b == b'\n') | (b == b'\t');
    let mut blocks = bytes.chunks_exact(64);
    blocks.all(|block| {
        block.iter().fold(true, |all, &b| all & printable(b))
            || block.iter().fold(true, |all, &b| all & plain(b))
    }) && blocks.remainder().iter().all(|&b| plain(b))
}

/// How [`Printable`] writes a character that [`needs_escape`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rendering {
    /// `\u{9b}`: Rust's escape, for text.
    Terminal,
    /// `\u009b`: JSON's escape. A control character is never valid JSON outside a string, so
    /// in a valid document every one is inside a string, where the escape stands for it: the
    /// document stays valid and reads back as the same string.
    Json,
}

/// Writes through to `W`, with every character that [`needs_escape`] written as a visible
/// escape instead; bytes that are not UTF-8 become U+FFFD. A character split between two writes
/// (a `BufWriter` in front cuts anywhere) is kept whole.
pub struct Printable<W: Write> {
    out: W,
    rendering: Rendering,
    /// The first bytes of a character whose rest is in the next write (at most 3).
    partial: Vec<u8>,
}

impl<W: Write> Printable<W> {
    /// For text: `\u{1b}`.
    pub fn terminal(out: W) -> Printable<W> {
        Printable { out, rendering: Rendering::Terminal, partial: Vec::new() }
    }

    /// For a JSON document (what a JSON serializer writes): `\u001b`, still valid JSON.
    pub fn json(out: W) -> Printable<W> {
        Printable { out, rendering: Rendering::Json, partial: Vec::new() }
    }

    /// Writes `text` with its unsafe characters escaped.
    fn write_text(&mut self, text: &str) -> io::Result<()> {
        if is_plain_ascii(text.as_bytes()) || !text.chars().any(needs_escape) {
            return self.out.write_all(text.as_bytes());
        }
        let mut escaped = String::with_capacity(text.len() + 16);
        for c in text.chars() {
            if !needs_escape(c) {
                escaped.push(c);
                continue;
            }
            // Every character that needs an escape is in the Basic Multilingual Plane, so
            // JSON's four hex digits always hold it.
            let code = u32::from(c);
            match self.rendering {
                Rendering::Terminal => escaped.push_str(&format!("\\u{{{code:x}}}")),
                Rendering::Json => escaped.push_str(&format!("\\u{code:04x}")),
            }
        }
        self.out.write_all(escaped.as_bytes())
    }
}

impl<W: Write> Write for Printable<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Most writes are plain ASCII whole: one pass says so, and that they are UTF-8.
        if self.partial.is_empty() && is_plain_ascii(buf) {
            self.out.write_all(buf)?;
            return Ok(buf.len());
        }
        let joined;
        let mut rest = if self.partial.is_empty() {
            buf
        } else {
            self.partial.extend_from_slice(buf);
            joined = std::mem::take(&mut self.partial);
            &joined[..]
        };
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.write_text(text)?;
                    return Ok(buf.len());
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.write_text(std::str::from_utf8(valid).expect("checked as UTF-8"))?;
                    match e.error_len() {
                        // The start of a character the next write completes.
                        None => {
                            self.partial = after.to_vec();
                            return Ok(buf.len());
                        }
                        Some(bad) => {
                            self.out.write_all("\u{fffd}".as_bytes())?;
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl<W: Write> Drop for Printable<W> {
    /// A character that was never completed is not UTF-8: shown as U+FFFD, as any other.
    fn drop(&mut self) {
        if !self.partial.is_empty() {
            let _ = self.out.write_all("\u{fffd}".as_bytes()).and_then(|()| self.out.flush());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(mut out: Printable<Vec<u8>>, pieces: &[&[u8]]) -> String {
        for piece in pieces {
            out.write_all(piece).unwrap();
        }
        String::from_utf8(std::mem::take(&mut out.out)).unwrap()
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        let mut out = Printable::terminal(Vec::new());
        write!(out, "version 1\x1b[2J\x1b]0;title\x07 done\u{9b}\n\tok").unwrap();
        let printed = String::from_utf8(std::mem::take(&mut out.out)).unwrap();
        assert_eq!(printed, "version 1\\u{1b}[2J\\u{1b}]0;title\\u{7} done\\u{9b}\n\tok");
        let mut plain = Printable::terminal(Vec::new());
        writeln!(plain, "requests 12 in 0.92 s, p50 43.85 ms").unwrap();
        assert_eq!(plain.out, b"requests 12 in 0.92 s, p50 43.85 ms\n");
    }

    #[test]
    fn plain_ascii_is_plain_by_the_one_predicate() {
        for c in (0u8..128).map(char::from) {
            let text = c.to_string();
            assert!(!is_plain_ascii(text.as_bytes()) || !needs_escape(c), "{c:?}");
        }
        assert!(is_plain_ascii(b"{\"run\":1}\n\t~") && !is_plain_ascii("\u{7f}".as_bytes()));
        // Checked a block at a time: a control character is found wherever it is, in a whole
        // block or in the rest after the last one.
        let long = "{\"at_ns\":12345,\"side\":\"Client\"}\n".repeat(3);
        assert!(long.len() > 64 && is_plain_ascii(long.as_bytes()));
        for at in 0..long.len() {
            let mut bytes = long.clone().into_bytes();
            bytes[at] = 0x1b;
            assert!(!is_plain_ascii(&bytes), "ESC at byte {at}");
            bytes[at] = 0xc2;
            assert!(!is_plain_ascii(&bytes), "a byte past ASCII at byte {at}");
        }
    }

    #[test]
    fn bidi_controls_are_shown_not_obeyed() {
        let text = "a\u{202e}b\u{202a}c\u{2066}d\u{2069}e\u{200e}\u{200f}\u{61c}f \u{5d0} \u{200d}";
        let out = printed(Printable::terminal(Vec::new()), &[text.as_bytes()]);
        assert_eq!(
            out,
            "a\\u{202e}b\\u{202a}c\\u{2066}d\\u{2069}e\\u{200e}\\u{200f}\\u{61c}f \u{5d0} \u{200d}",
            "Hebrew letters and the zero-width joiner are text, not controls"
        );
    }

    #[test]
    fn json_keeps_its_meaning_with_every_control_escaped() {
        let hostile = "kernel \u{9b}2J \u{202e}exe \u{1b}[31m \u{7f} \u{85} ok";
        let document = serde_json::json!({ "kernel": hostile, "list": [hostile] }).to_string();
        // Cut into pieces of 3 bytes: characters split between writes are kept whole.
        let pieces: Vec<&[u8]> = document.as_bytes().chunks(3).collect();
        let out = printed(Printable::json(Vec::new()), &pieces);
        assert!(!out.chars().any(needs_escape), "{out}");
        assert!(out.contains(r"kernel \u009b2J \u202eexe \u001b[31m \u007f \u0085 ok"), "{out}");
        let read: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(read["kernel"], hostile);
        assert_eq!(read["list"][0], hostile);
    }

    #[test]
    fn bytes_that_are_not_utf8_become_the_replacement_character() {
        let out = printed(Printable::terminal(Vec::new()), &[b"a\xff", b"b\xe2\x80", b"\xaez"]);
        assert_eq!(out, "a\u{fffd}b\\u{202e}z");
    }
}
