//! Synthetic event streams shaped like story 1's exchanges, for tests of the analysis and of the
//! views. They are never shown as measurements. Compiled for this crate's tests and, through the
//! `synthetic` feature, for other crates' tests.

use crate::event::{ConnId, Event, EventKind, ReqId, Side};

pub const US: u64 = 1_000;
pub const MS: u64 = 1_000_000;

/// Builds the events of request/response exchanges on connection 0 as the probe records them.
#[derive(Debug, Default)]
pub struct Script {
    pub events: Vec<Event>,
}

impl Script {
    pub fn event(&mut self, at_ns: u64, side: Side, req: u32, kind: EventKind) {
        let (conn, req) = (ConnId(0), ReqId(req));
        self.events.push(Event { at_ns, side, conn, req, kind });
    }

    pub fn write(&mut self, side: Side, req: u32, start: u64, end: u64, bytes: u32) {
        self.event(start, side, req, EventKind::WriteStart { len_bytes: bytes });
        self.event(end, side, req, EventKind::WriteDone { bytes });
    }

    pub fn read(&mut self, side: Side, req: u32, start: u64, end: u64, bytes: u32) {
        self.event(start, side, req, EventKind::ReadStart { len_bytes: bytes });
        self.event(end, side, req, EventKind::ReadDone { bytes });
    }

    /// One length+body exchange of 2048 bytes starting at `t`, whose body is held `hold` in each
    /// direction after being written. The server sat in `read()` for the length since
    /// `server_idle_from` (a real server waits there for the next request). Returns the time the
    /// request was done.
    pub fn exchange(&mut self, req: u32, t: u64, server_idle_from: u64, hold: u64) -> u64 {
        use Side::{Client, Server};
        self.event(t, Client, req, EventKind::RequestStart);
        self.write(Client, req, t, t + 5 * US, 4);
        self.write(Client, req, t + 6 * US, t + 10 * US, 2048);
        // The server gets the length at once, but the body only after the hold.
        self.read(Server, req, server_idle_from, t + 20 * US, 4);
        let body = t + 10 * US + hold;
        self.read(Server, req, t + 21 * US, body, 2048);
        self.write(Server, req, body + 5 * US, body + 10 * US, 4);
        self.write(Server, req, body + 11 * US, body + 15 * US, 2048);
        // The client waits for the length while the server is held: waiting, not held itself.
        self.read(Client, req, t + 11 * US, body + 20 * US, 4);
        let end = body + 15 * US + hold;
        self.read(Client, req, body + 21 * US, end, 2048);
        self.event(end + US, Client, req, EventKind::RequestDone);
        end + US
    }
}

/// `requests` exchanges on one keep-alive connection, 50 us apart. The first is quick (a new
/// connection ACKs at once); every later body is held `hold` in both directions, as Nagle x
/// delayed ACK holds it.
pub fn nagle_run(requests: u32, hold: u64) -> Vec<Event> {
    let mut script = Script::default();
    let mut t: u64 = 0;
    for req in 0..requests {
        let this_hold = if req == 0 { 30 * US } else { hold };
        let server_idle_from = t.saturating_sub(40 * US);
        t = script.exchange(req, t, server_idle_from, this_hold) + 50 * US;
    }
    script.events
}
