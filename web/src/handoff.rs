//! Messages decoded in the file decoder's worker ([`crate::decode_worker`]), handed to the page
//! in a form it takes back without decoding again: each event of the common kinds (calls,
//! requests, connections) as a fixed record, everything else by `serde` (`wire::encode`).
//!
//! Both ends are this same build of the app (the worker runs a second instance of its wasm), so
//! the form needs no version: it never leaves the page. The page still bounds what it reads, as
//! for any bytes: a count or a length is checked against the bytes left before anything is
//! allocated for it, and a bad batch is an error, not a panic.

use ackscope_shared::wire::{self, ToBrowser};
use ackscope_shared::{ConnId, Event, EventKind, ReqId, RunId, Side};

/// Message tags.
const EVENTS: u8 = 0;
const OTHER: u8 = 1;

/// Event kinds written as fixed records; any other kind is [`SERDE_EVENT`].
const CONNECT_START: u8 = 0;
const CONNECTED: u8 = 1;
const ACCEPTED: u8 = 2;
const CLOSED: u8 = 3;
const REQUEST_START: u8 = 4;
const REQUEST_DONE: u8 = 5;
const DELAYED_ACK: u8 = 6;
const WRITE_START: u8 = 7;
const WRITE_DONE: u8 = 8;
const READ_START: u8 = 9;
const READ_DONE: u8 = 10;
const SERDE_EVENT: u8 = 255;

/// An event's fixed part: kind, time, side, connection, request.
const FIXED_BYTES: usize = 1 + 8 + 1 + 4 + 4;

/// Appends `message` to a batch.
pub fn write(message: &ToBrowser, out: &mut Vec<u8>) {
    match message {
        ToBrowser::Events { run, events } => {
            out.push(EVENTS);
            out.extend_from_slice(&run.0.to_le_bytes());
            out.extend_from_slice(&(events.len() as u32).to_le_bytes());
            for event in events {
                write_event(event, out);
            }
        }
        other => {
            out.push(OTHER);
            write_bytes(&wire::encode(other), out);
        }
    }
}

fn write_event(event: &Event, out: &mut Vec<u8>) {
    let (kind, value) = match event.kind {
        EventKind::ConnectStart => (CONNECT_START, None),
        EventKind::Connected => (CONNECTED, None),
        EventKind::Accepted => (ACCEPTED, None),
        EventKind::Closed => (CLOSED, None),
        EventKind::RequestStart => (REQUEST_START, None),
        EventKind::RequestDone => (REQUEST_DONE, None),
        EventKind::DelayedAck => (DELAYED_ACK, None),
        EventKind::WriteStart { len_bytes } => (WRITE_START, Some(len_bytes)),
        EventKind::WriteDone { bytes } => (WRITE_DONE, Some(bytes)),
        EventKind::ReadStart { len_bytes } => (READ_START, Some(len_bytes)),
        EventKind::ReadDone { bytes } => (READ_DONE, Some(bytes)),
        _ => {
            out.push(SERDE_EVENT);
            write_bytes(&wire::encode(event), out);
            return;
        }
    };
    out.push(kind);
    out.extend_from_slice(&event.at_ns.to_le_bytes());
    out.push(match event.side {
        Side::Client => 0,
        Side::Server => 1,
    });
    out.extend_from_slice(&event.conn.0.to_le_bytes());
    out.extend_from_slice(&event.req.0.to_le_bytes());
    if let Some(value) = value {
        out.extend_from_slice(&value.to_le_bytes());
    }
}

fn write_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The messages of a batch, in order; stops at the first that does not read.
pub struct Messages<'a> {
    bytes: &'a [u8],
    failed: bool,
}

impl<'a> Messages<'a> {
    pub fn new(bytes: &'a [u8]) -> Messages<'a> {
        Messages { bytes, failed: false }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(format!("{n} bytes wanted, {} left", self.bytes.len()));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// Bytes that say their length first.
    fn lengthed(&mut self) -> Result<&'a [u8], String> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    fn message(&mut self) -> Result<ToBrowser, String> {
        match self.u8()? {
            EVENTS => {
                let run = RunId(self.u32()?);
                let count = self.u32()? as usize;
                // Every event takes at least its fixed part (or a serde event its length and
                // more): a count the bytes left cannot hold is refused before the room is made.
                if count > self.bytes.len() / 5 {
                    return Err(format!("{count} events in {} bytes", self.bytes.len()));
                }
                let mut events = Vec::with_capacity(count);
                for _ in 0..count {
                    events.push(self.event()?);
                }
                Ok(ToBrowser::Events { run, events })
            }
            OTHER => wire::decode::<ToBrowser>(self.lengthed()?).map_err(|e| e.to_string()),
            tag => Err(format!("a message of tag {tag}")),
        }
    }

    fn event(&mut self) -> Result<Event, String> {
        let kind = self.u8()?;
        if kind == SERDE_EVENT {
            return wire::decode::<Event>(self.lengthed()?).map_err(|e| e.to_string());
        }
        let fixed = self.take(FIXED_BYTES - 1)?;
        let at_ns = u64::from_le_bytes(fixed[0..8].try_into().expect("8 bytes"));
        let side = match fixed[8] {
            0 => Side::Client,
            1 => Side::Server,
            other => return Err(format!("side {other}")),
        };
        let conn = ConnId(u32::from_le_bytes(fixed[9..13].try_into().expect("4 bytes")));
        let req = ReqId(u32::from_le_bytes(fixed[13..17].try_into().expect("4 bytes")));
        let kind = match kind {
            CONNECT_START => EventKind::ConnectStart,
            CONNECTED => EventKind::Connected,
            ACCEPTED => EventKind::Accepted,
            CLOSED => EventKind::Closed,
            REQUEST_START => EventKind::RequestStart,
            REQUEST_DONE => EventKind::RequestDone,
            DELAYED_ACK => EventKind::DelayedAck,
            WRITE_START => EventKind::WriteStart { len_bytes: self.u32()? },
            WRITE_DONE => EventKind::WriteDone { bytes: self.u32()? },
            READ_START => EventKind::ReadStart { len_bytes: self.u32()? },
            READ_DONE => EventKind::ReadDone { bytes: self.u32()? },
            other => return Err(format!("an event of kind {other}")),
        };
        Ok(Event { at_ns, side, conn, req, kind })
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<ToBrowser, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.bytes.is_empty() {
            return None;
        }
        let message = self.message();
        self.failed = message.is_err();
        Some(message.map_err(|e| format!("the decoder's worker handed over a bad batch: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_file::decode_session;

    /// Every message of every lesson's recording comes back as it went: the events of every
    /// kind a recording has (TCP_INFO, captured segments, the link's) and every other message.
    #[test]
    fn every_recorded_message_comes_back_as_it_went() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lessons/recordings");
        let mut kinds = std::collections::HashSet::new();
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).expect("the lessons' recordings") {
            let bytes = std::fs::read(entry.expect("an entry").path()).expect("a recording");
            let (messages, error) = decode_session(&bytes);
            assert!(error.is_none(), "{error:?}");
            let mut batch = Vec::new();
            for message in &messages {
                write(message, &mut batch);
                if let ToBrowser::Events { events, .. } = message {
                    kinds.extend(events.iter().map(|e| std::mem::discriminant(&e.kind)));
                }
            }
            let back: Vec<ToBrowser> =
                Messages::new(&batch).collect::<Result<_, _>>().expect("the batch reads");
            assert_eq!(back, messages);
            checked += messages.len();
        }
        assert!(checked > 1000, "{checked} messages");
        assert!(kinds.len() >= 12, "{} kinds of event", kinds.len());
    }

    /// A batch cut anywhere, or with a count it cannot hold, is an error, and nothing is made
    /// for a count the bytes cannot hold.
    #[test]
    fn a_bad_batch_is_an_error_not_a_panic() {
        let event =
            |kind| Event { at_ns: 7, side: Side::Server, conn: ConnId(1), req: ReqId(2), kind };
        let message = ToBrowser::Events {
            run: RunId(3),
            events: vec![event(EventKind::ReadDone { bytes: 9 }), event(EventKind::DelayedAck)],
        };
        let mut batch = Vec::new();
        write(&message, &mut batch);
        for cut in 1..batch.len() {
            let read: Vec<_> = Messages::new(&batch[..cut]).collect();
            assert!(read.last().is_some_and(|m| m.is_err()), "cut at {cut}: {read:?}");
        }
        let mut huge = vec![EVENTS];
        huge.extend_from_slice(&3u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        let error = Messages::new(&huge).next().expect("a message").expect_err("refused");
        assert!(error.contains("4294967295 events"), "{error}");
        assert_eq!(Messages::new(&[9]).count(), 1);
    }
}
