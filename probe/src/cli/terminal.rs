//! Output that is safe for a terminal: strings read from a file (a version, a host's facts, an
//! error) are printed as data, never as commands to the terminal. A crafted file could otherwise
//! clear the screen, retitle the window or rewrite what was printed before.

use std::io::{self, Write};

/// Prints one line of a long-running command's start (its address, its token, its links) and
/// flushes it. Whoever started the command may stop reading once it has the line it needed (a
/// script reads the address, then closes the pipe): the command serves on instead of dying on
/// a closed stdout.
pub fn announce(line: std::fmt::Arguments) {
    let mut out = io::stdout().lock();
    let _ = out.write_fmt(line).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
}

/// Writes through to `W`, with every control character but newline and tab (C0, DEL, C1: ESC
/// and BEL among them) shown as a visible escape, `\u{1b}`; bytes that are not UTF-8 become
/// U+FFFD.
pub struct Printable<W: Write>(pub W);

impl<W: Write> Write for Printable<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        if !text.chars().any(needs_escape) {
            self.0.write_all(text.as_bytes())?;
            return Ok(buf.len());
        }
        let mut escaped = String::with_capacity(text.len() + 8);
        for c in text.chars() {
            if needs_escape(c) {
                escaped.push_str(&c.escape_unicode().to_string());
            } else {
                escaped.push(c);
            }
        }
        self.0.write_all(escaped.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        let mut out = Printable(Vec::new());
        write!(out, "version 1\x1b[2J\x1b]0;title\x07 done\u{9b}\n\tok").unwrap();
        let printed = String::from_utf8(out.0).unwrap();
        assert_eq!(printed, "version 1\\u{1b}[2J\\u{1b}]0;title\\u{7} done\\u{9b}\n\tok");
        let mut plain = Printable(Vec::new());
        writeln!(plain, "requests 12 in 0.92 s, p50 43.85 ms").unwrap();
        assert_eq!(plain.0, b"requests 12 in 0.92 s, p50 43.85 ms\n");
    }
}
