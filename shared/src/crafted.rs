//! Session files a hostile or broken writer could make, one for each bound the readers keep
//! (docs/ARCHITECTURE.md, "Bounds"). Each is well framed and decodes: what it attacks is the
//! reducer's memory and time, not the decoder. The regression tests run `show` and `export` on
//! them, and `cargo xtask bench memory` measures the reducer's peak and CPU per event on them.
//!
//! Every generator writes its frames to `out` as it goes, so a file of any size is made in the
//! memory of one message.

use std::io::{self, Write};

use crate::event::{ConnId, Event, EventKind, ReqId, RunId, Side, TcpInfoSample};
use crate::spec::{ImportSpec, RrSpec, Scenario};
use crate::synthetic::{Script, MS, US};
use crate::wire::{self, Hello, HostFacts, Instruments, RunOutcome, ToBrowser, EVENTS_PER_MESSAGE};

/// The crafted shapes, each named for the bound it crosses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crafted {
    /// One request that never ends, and `n` TCP_INFO samples taken while its read is blocked.
    SamplesOfOneOpenRequest,
    /// `n` requests the client finished and the server never answered, one message each: past
    /// the hold limit every message forces a retirement.
    UnsettledRequests,
    /// 60,000 unsettled requests held (below the hold limit, so the first stays held), then
    /// `n` repeats of the first request's start, its time moving back and forth.
    RepeatedFirstStart,
    /// `n` requests, each on a connection of its own, opened and closed (`--reconnect-every 1`).
    ConnectionPerRequest,
    /// `n` runs that start, have one request each, and never end.
    OpenRuns,
    /// An imported capture of `n` segments in one run: story 1's messages, each held by Nagle x
    /// delayed ACK (the 4-byte length, the reader's delayed pure ACK, the body). The pcapng
    /// export writes every segment, and has a stall to explain every three.
    CapturedSegments,
}

impl Crafted {
    pub const ALL: [Crafted; 6] = [
        Crafted::SamplesOfOneOpenRequest,
        Crafted::UnsettledRequests,
        Crafted::RepeatedFirstStart,
        Crafted::ConnectionPerRequest,
        Crafted::OpenRuns,
        Crafted::CapturedSegments,
    ];

    /// A short name for reports and file names.
    pub fn name(self) -> &'static str {
        match self {
            Crafted::SamplesOfOneOpenRequest => "samples-of-one-open-request",
            Crafted::UnsettledRequests => "unsettled-requests",
            Crafted::RepeatedFirstStart => "repeated-first-start",
            Crafted::ConnectionPerRequest => "connection-per-request",
            Crafted::OpenRuns => "open-runs",
            Crafted::CapturedSegments => "captured-segments",
        }
    }

    /// The captured segments of the session of `n` units: the packets `export --pcapng` writes.
    pub fn segments(self, n: u64) -> u64 {
        match self {
            Crafted::CapturedSegments => n,
            _ => 0,
        }
    }

    /// Writes the session of `n` units (samples, requests, repeats, runs or segments) to `out`;
    /// returns how many events it holds.
    pub fn write(self, n: u64, out: &mut impl Write) -> io::Result<u64> {
        let mut file = Frames { out, buf: Vec::new(), events: Vec::new(), run: RunId(1), count: 0 };
        file.frame(&ToBrowser::Hello(Hello::current("crafted", HostFacts::default())))?;
        match self {
            Crafted::OpenRuns => {}
            Crafted::CapturedSegments => {
                let spec = ImportSpec { source: "crafted.pcap".into(), connections: Vec::new() };
                file.start(RunId(1), Scenario::Import(spec))?
            }
            _ => file.start(RunId(1), Scenario::Rr(RrSpec::default()))?,
        }
        match self {
            Crafted::SamplesOfOneOpenRequest => {
                file.event(0, Side::Client, 0, 0, EventKind::RequestStart)?;
                file.event(1, Side::Client, 0, 0, EventKind::ReadStart { len_bytes: 2048 })?;
                for i in 0..n {
                    let info = TcpInfoSample {
                        during_block: true,
                        unacked: 1,
                        notsent_bytes: Some((i % 4096) as u32),
                        ato_us: 40_000,
                        snd_mss: 32_768,
                        ..TcpInfoSample::default()
                    };
                    file.event(2 + i, Side::Client, 0, 0, EventKind::TcpInfo(Box::new(info)))?;
                }
            }
            Crafted::UnsettledRequests => {
                for req in 0..n {
                    let at = req * 1_000;
                    file.event(at, Side::Client, 0, req, EventKind::RequestStart)?;
                    file.event(at + 500, Side::Client, 0, req, EventKind::RequestDone)?;
                    file.flush()?;
                }
            }
            Crafted::RepeatedFirstStart => {
                for req in 0..60_000 {
                    let at = req * 1_000;
                    file.event(at, Side::Client, 0, req, EventKind::RequestStart)?;
                    file.event(at + 500, Side::Client, 0, req, EventKind::RequestDone)?;
                }
                file.flush()?;
                for i in 0..n {
                    // Moving the first start later each time makes every reader look again
                    // for the run's earliest start.
                    file.event(1 + i % 2, Side::Client, 0, 0, EventKind::RequestStart)?;
                    file.flush()?;
                }
            }
            Crafted::ConnectionPerRequest => {
                // As the probe hands them over: each side's events in batches of their own, the
                // server's first (its close of a connection then comes before the client's start
                // of the request made on it).
                for first in (0..n).step_by(64) {
                    let requests = first..(first + 64).min(n);
                    for side in [Side::Server, Side::Client] {
                        for req in requests.clone() {
                            file.exchange_on_own_connection(req, side)?;
                        }
                        file.flush()?;
                    }
                }
            }
            Crafted::OpenRuns => {
                for run in 0..n {
                    let run = RunId(u32::try_from(run).unwrap_or(u32::MAX));
                    file.start(run, Scenario::Rr(RrSpec::default()))?;
                    file.event(0, Side::Client, 0, 0, EventKind::RequestStart)?;
                    file.event(1, Side::Client, 0, 0, EventKind::ReadStart { len_bytes: 8 })?;
                    file.flush()?;
                }
            }
            Crafted::CapturedSegments => {
                let mut script = Script::default();
                let (mut segments, mut t, mut req) = (0, 0, 0);
                while segments < n {
                    let body_at = script.held_message(Side::Client, req, t, t + 44 * MS, 2048);
                    let answer = body_at + 10 * US;
                    let answer_at =
                        script.held_message(Side::Server, req, answer, answer + 44 * MS, 2048);
                    for e in script.events.drain(..).take((n - segments) as usize) {
                        file.event(e.at_ns, e.side, 1, u64::from(req), e.kind)?;
                        segments += 1;
                    }
                    t = answer_at + 50 * US;
                    req += 1;
                }
            }
        }
        if self != Crafted::OpenRuns {
            file.flush()?;
            let finished = ToBrowser::RunFinished { run: file.run, outcome: RunOutcome::Completed };
            file.frame(&finished)?;
        }
        Ok(file.count)
    }
}

struct Frames<'w, W: Write> {
    out: &'w mut W,
    buf: Vec<u8>,
    events: Vec<Event>,
    run: RunId,
    count: u64,
}

impl<W: Write> Frames<'_, W> {
    fn frame(&mut self, message: &ToBrowser) -> io::Result<()> {
        self.buf.clear();
        wire::write_frame(message, &mut self.buf);
        self.out.write_all(&self.buf)
    }

    fn start(&mut self, run: RunId, spec: Scenario) -> io::Result<()> {
        self.run = run;
        self.frame(&ToBrowser::RunStarted { run, spec, instruments: Instruments::default() })
    }

    fn event(
        &mut self,
        at_ns: u64,
        side: Side,
        conn: u64,
        req: u64,
        kind: EventKind,
    ) -> io::Result<()> {
        let (conn, req) = (ConnId(conn as u32), ReqId(req as u32));
        self.events.push(Event { at_ns, side, conn, req, kind });
        self.count += 1;
        if self.events.len() == EVENTS_PER_MESSAGE {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.events.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.events);
        self.frame(&ToBrowser::Events { run: self.run, events })
    }

    /// One request's events on `side` as a `--reconnect-every 1` run records them: both sides
    /// connect, the client writes 8 bytes, the server reads and answers them, both close.
    fn exchange_on_own_connection(&mut self, req: u64, side: Side) -> io::Result<()> {
        let (c, s) = (Side::Client, Side::Server);
        let at = req * 100_000;
        let conn = req;
        let events = [
            (at, c, EventKind::ConnectStart),
            (at + 10_000, c, EventKind::Connected),
            (at + 10_500, s, EventKind::Accepted),
            (at + 11_000, c, EventKind::RequestStart),
            (at + 11_000, s, EventKind::ReadStart { len_bytes: 8 }),
            (at + 12_000, c, EventKind::WriteStart { len_bytes: 8 }),
            (at + 13_000, c, EventKind::WriteDone { bytes: 8 }),
            (at + 13_000, c, EventKind::ReadStart { len_bytes: 8 }),
            (at + 20_000, s, EventKind::ReadDone { bytes: 8 }),
            (at + 21_000, s, EventKind::WriteStart { len_bytes: 8 }),
            (at + 22_000, s, EventKind::WriteDone { bytes: 8 }),
            (at + 30_000, c, EventKind::ReadDone { bytes: 8 }),
            (at + 30_500, c, EventKind::RequestDone),
            (at + 31_000, c, EventKind::Closed),
            (at + 32_000, s, EventKind::ReadStart { len_bytes: 8 }),
            (at + 33_000, s, EventKind::ReadDone { bytes: 0 }),
            (at + 34_000, s, EventKind::Closed),
        ];
        for (at_ns, of, kind) in events {
            if of == side {
                self.event(at_ns, of, conn, req, kind)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crafted_file_decodes_to_its_end() {
        for crafted in Crafted::ALL {
            let mut bytes = Vec::new();
            let events = crafted.write(100, &mut bytes).unwrap();
            let mut stream = wire::FrameStream::new();
            stream.push(&bytes);
            let (mut decoded, mut segments) = (0u64, 0u64);
            while let Some(message) = stream.next_message() {
                if let ToBrowser::Events { events, .. } = message.unwrap() {
                    decoded += events.len() as u64;
                    let captured =
                        events.iter().filter(|e| matches!(e.kind, EventKind::Segment(_)));
                    segments += captured.count() as u64;
                }
            }
            assert_eq!(stream.finish(), None, "{}", crafted.name());
            assert_eq!(decoded, events, "{}", crafted.name());
            assert_eq!(segments, crafted.segments(100), "{}", crafted.name());
            assert!(events >= 100, "{}: {events} events", crafted.name());
        }
    }
}
