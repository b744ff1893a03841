//! The control connection between two probes: `ackscope run --remote HOST:PORT` on host A drives
//! the `ackscope server` on host B (docs/REMOTE.md).
//!
//! The control connection is a TCP connection of its own, apart from the measured ones. It opens
//! with [`CONTROL_MAGIC`] on the server's echo port: as an echo length prefix those four bytes
//! read as over a gigabyte, which no echo client sends, so one port serves both. Then both ways
//! it carries frames as a session file does (4-byte little-endian length, one postcard message),
//! each at most [`MAX_CONTROL_MESSAGE_BYTES`].
//!
//! The exchange, in order:
//! 1. A: [`ToServer::Hello`] with its versions and the token B printed, in a frame of at most
//!    [`MAX_HELLO_BYTES`]. B checks the token first and says nothing about itself to a peer
//!    without it: a wrong or missing token gets a [`ToClient::Refused`] saying only that. Then
//!    B checks the versions: [`ToClient::Welcome`], or a refusal naming both version numbers.
//! 2. A: [`ToServer::Run`]. B opens a listener with the server side's options for this run
//!    alone and answers [`ToClient::Ready`] with its port, or refuses a run beyond its limits.
//! 3. A: a few [`ToServer::Clock`]; B answers each at once with its own times. [`ClockSync`]
//!    makes one estimate of the offset between the clocks from them.
//! 4. A's clients connect to the port. B streams its side's events back as
//!    [`ToClient::Events`], each connection introduced first by a [`ToClient::Peer`] naming
//!    the client port it came from, so A can give B's events A's connection and request ids.
//! 5. A: [`ToServer::Stop`] when its clients are done. B closes the run's connections, sends
//!    what is left and [`ToClient::Finished`] with how its side ended.
//!
//! Until the token has been checked a connection costs B a few hundred bytes at most: the
//! hello's length is checked against [`MAX_HELLO_BYTES`] before any of it is read, and the whole
//! handshake (the opening to the run's spec) has a deadline of its own, not one per read.
//!
//! Like [`crate::wire`], nothing here does IO: the probe frames and moves the bytes.

use serde::{Deserialize, Serialize};

use crate::event::{ConnId, Event};
use crate::spec::Scenario;
use crate::wire::{Instruments, RunOutcome};

/// The first four bytes of a control connection.
pub const CONTROL_MAGIC: [u8; 4] = *b"ACKC";

/// How an echo client opens a connection to an `ackscope server` that is not on loopback:
/// these four bytes, the token, a newline (docs/PROTOCOL.md). As an echo length prefix they too
/// would read as over a gigabyte.
pub const TOKEN_MAGIC: [u8; 4] = *b"ACKT";

/// The longest token line an echo client may send after [`TOKEN_MAGIC`] (the token itself and
/// its newline): read a byte at a time up to this, never more.
pub const MAX_TOKEN_LINE: usize = 256;

/// The longest token a server takes (`ackscope server --token`) and a client sends: the random
/// one is 32 characters.
pub const MAX_TOKEN_BYTES: usize = 128;

/// Bounds the first frame of a control connection, the [`ToServer::Hello`], read before the
/// token is checked: its two versions and a token of at most [`MAX_TOKEN_BYTES`] fit with room
/// to spare. A longer one is refused before any of it is read.
pub const MAX_HELLO_BYTES: usize = 512;

/// Bounds a frame's payload before it is read, once the token has been checked: an events batch
/// of the largest kind is well under this.
pub const MAX_CONTROL_MESSAGE_BYTES: usize = crate::wire::MAX_MESSAGE_BYTES;

/// Clock exchanges before a run: the estimate takes the one with the shortest round trip.
pub const CLOCK_EXCHANGES: usize = 32;

/// Host A (the client) to host B (the server).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToServer {
    /// Always first (tag 0), in a frame of at most [`MAX_HELLO_BYTES`]. Its fields keep this
    /// order in every version, so that any version can read the token, check it, then refuse a
    /// peer of another version by number.
    Hello { protocol_version: u16, ackscope_version: String, token: String },
    /// Run this; only the server side's part of it happens on B.
    Run { spec: Scenario, instruments: Instruments },
    /// `t1_ns`: when A sent this, on A's run clock.
    Clock { t1_ns: u64 },
    /// A's clients are done: end the run.
    Stop,
}

/// Host B (the server) to host A (the client).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToClient {
    /// Same shape as [`ToServer::Hello`]'s start: the version first.
    Welcome { protocol_version: u16, ackscope_version: String },
    /// The server will not go on; `reason` says why and what to do. The connection closes.
    Refused { reason: String },
    /// The run's listener is on `port` of the address A reached; B's run clock started at
    /// `clock_monotonic_ns` on B's CLOCK_MONOTONIC (compared with A's only when both are one
    /// host: the benchmark's true offset).
    Ready { port: u16, clock_monotonic_ns: u64 },
    /// The answer to [`ToServer::Clock`]: `t2_ns` when B read it, `t3_ns` when B sent this,
    /// both on B's run clock.
    Clock { t1_ns: u64, t2_ns: u64, t3_ns: u64 },
    /// B's connection `conn` came from A's port `client_port`; sent before its events.
    Peer { conn: ConnId, client_port: u16 },
    /// B's events, on B's clock, with B's connection ids and, as request ids, each request's
    /// index on its connection (B cannot know A's ids; A maps them).
    Events {
        #[serde(with = "crate::compact")]
        events: Vec<Event>,
    },
    /// B's side of the run ended so; nothing follows.
    Finished { outcome: RunOutcome },
}

/// One clock exchange: A sent at `t1`, B read at `t2` and answered at `t3` (B's clock), A read
/// the answer at `t4` (A's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub t1_ns: u64,
    pub t2_ns: u64,
    pub t3_ns: u64,
    pub t4_ns: u64,
}

impl Exchange {
    /// The time on the wire both ways: the round trip less B's time between read and answer.
    pub fn round_trip_ns(&self) -> u64 {
        let total = self.t4_ns.saturating_sub(self.t1_ns);
        total.saturating_sub(self.t3_ns.saturating_sub(self.t2_ns))
    }

    /// B's clock minus A's, assuming the two directions took equally long (NTP's estimate).
    pub fn offset_ns(&self) -> i64 {
        let there = self.t2_ns as i128 - self.t1_ns as i128;
        let back = self.t3_ns as i128 - self.t4_ns as i128;
        ((there + back) / 2) as i64
    }
}

/// The estimate of B's clock relative to A's, from a run's exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSync {
    /// B's clock minus A's: an event B stamped at `t` happened at `t - offset_ns` on A's clock.
    pub offset_ns: i64,
    /// How far the estimate may be off, from how well the best exchanges agree: each one's
    /// offset, and half of how much longer its round trip was than the best (time spent queued
    /// on one leg or the other moves an estimate by up to half of it). Like NTP, this assumes
    /// the path takes as long each way: a path slower one way than the other moves the offset by
    /// half the difference, up to `rtt_ns / 2`, which no exchange can see.
    pub uncertainty_ns: u64,
    /// The shortest round trip: the path between the hosts, as the control connection saw it.
    pub rtt_ns: u64,
}

impl ClockSync {
    /// A server on this run's own clock: in this process, in another network namespace
    /// (`--server-netns`), which records offset and uncertainty 0. Exchanges between two
    /// clocks never agree to the nanosecond, so an estimate is never both.
    pub fn is_same_clock(&self) -> bool {
        self.offset_ns == 0 && self.uncertainty_ns == 0
    }

    /// A server on this run's own clock across a path whose round trip is `rtt_ns`.
    pub fn same_clock(rtt_ns: u64) -> ClockSync {
        ClockSync { offset_ns: 0, uncertainty_ns: 0, rtt_ns }
    }

    /// The `ClockSync` event that opens a run's events, recorded by the client side.
    pub fn event(&self, at_ns: u64) -> Event {
        Event {
            at_ns,
            side: crate::Side::Client,
            conn: ConnId(0),
            req: crate::ReqId(0),
            kind: crate::EventKind::ClockSync {
                offset_ns: self.offset_ns,
                uncertainty_ns: self.uncertainty_ns,
                rtt_ns: self.rtt_ns,
            },
        }
    }

    /// Where the server was and how its clock was matched to the run's, in the words the CLI
    /// and the page both print after "server": `place` names it when the caller knows more
    /// than the event says (the remote host's address, the namespace's name).
    pub fn describe(&self, place: Option<&str>) -> String {
        let path =
            format!("path round trip {:.3} ms, not counted as stalls", self.rtt_ns as f64 / 1e6);
        if self.is_same_clock() {
            let place = place.unwrap_or("in another network namespace");
            format!("{place}, on this run's clock ({path})")
        } else {
            format!(
                "{}: its clock {:.3} ms from ours, +/- {:.1} us ({path})",
                place.unwrap_or("on another host"),
                self.offset_ns as f64 / 1e6,
                self.uncertainty_ns as f64 / 1e3
            )
        }
    }

    /// The exchange with the shortest round trip is the one least delayed by queues or by a
    /// thread waiting for a CPU on either side: its offset is the estimate. The uncertainty is
    /// the spread of the best quarter of the exchanges (at least three). `None` without
    /// exchanges.
    pub fn estimate(exchanges: &[Exchange]) -> Option<ClockSync> {
        let mut by_rtt: Vec<&Exchange> = exchanges.iter().collect();
        by_rtt.sort_by_key(|e| e.round_trip_ns());
        let best = by_rtt.first()?;
        let (offset_ns, rtt_ns) = (best.offset_ns(), best.round_trip_ns());
        let considered = (by_rtt.len() / 4).max(3).min(by_rtt.len());
        let uncertainty_ns = by_rtt[..considered]
            .iter()
            .map(|e| {
                let apart = (e.offset_ns() - offset_ns).unsigned_abs();
                apart.max((e.round_trip_ns() - rtt_ns).div_ceil(2))
            })
            .max()
            .unwrap_or(0);
        Some(ClockSync { offset_ns, uncertainty_ns, rtt_ns })
    }

    /// A time B stamped, on A's clock (0 if the estimate puts it before A's run began).
    pub fn to_client_ns(&self, server_ns: u64) -> u64 {
        let at = server_ns as i128 - self.offset_ns as i128;
        at.clamp(0, u64::MAX as i128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// B's clock runs `offset` ahead of A's; the message takes `there` to B and `back` to A,
    /// and B answers `think` after reading.
    fn exchange(offset: i64, t1: u64, there: u64, think: u64, back: u64) -> Exchange {
        let t2 = (t1 as i64 + there as i64 + offset) as u64;
        let t3 = t2 + think;
        let t4 = (t3 as i64 - offset) as u64 + back;
        Exchange { t1_ns: t1, t2_ns: t2, t3_ns: t3, t4_ns: t4 }
    }

    #[test]
    fn a_symmetric_path_gives_the_offset_exactly() {
        let e = exchange(5_000_000, 1_000, 20_000, 3_000, 20_000);
        assert_eq!(e.round_trip_ns(), 40_000, "B's time to answer is not the path's");
        assert_eq!(e.offset_ns(), 5_000_000);
        let e = exchange(-7_000_000, 9_000_000, 10_000, 0, 10_000);
        assert_eq!(e.offset_ns(), -7_000_000, "B's clock may be behind A's");
    }

    #[test]
    fn the_shortest_round_trip_wins_and_the_best_ones_spread_is_the_uncertainty() {
        let offset = 2_000_000;
        let exchanges = [
            // Queued 300 us on the way there: its estimate is 150 us off, and it is not among
            // the best.
            exchange(offset, 0, 320_000, 1_000, 20_000),
            exchange(offset, 1_000_000, 22_000, 1_000, 18_000),
            exchange(offset, 2_000_000, 20_000, 1_000, 900_000),
            exchange(offset, 3_000_000, 21_000, 1_000, 21_000),
            exchange(offset, 4_000_000, 22_000, 1_000, 22_000),
        ];
        let sync = ClockSync::estimate(&exchanges).unwrap();
        assert_eq!(sync.rtt_ns, 40_000);
        let error = (sync.offset_ns - offset).unsigned_abs();
        assert_eq!(error, 2_000, "an asymmetry of 4 us shows as half of it");
        // The three best: 40 us (2 us off), 42 and 44 us (0 off, 2 and 4 us longer).
        assert_eq!(sync.uncertainty_ns, 2_000);
        assert!(error <= sync.uncertainty_ns, "the true offset is within it here");
        assert_eq!(ClockSync::estimate(&[]), None);
    }

    #[test]
    fn the_server_line_says_whether_the_server_shared_the_runs_clock() {
        let namespace = ClockSync::same_clock(20_000_000);
        assert_eq!(
            namespace.describe(None),
            "in another network namespace, on this run's clock (path round trip 20.000 ms, not \
             counted as stalls)"
        );
        let remote = ClockSync { offset_ns: 1_500_000, uncertainty_ns: 2_500, rtt_ns: 300_000 };
        assert_eq!(
            remote.describe(Some("10.0.0.2:7000")),
            "10.0.0.2:7000: its clock 1.500 ms from ours, +/- 2.5 us (path round trip 0.300 ms, \
             not counted as stalls)"
        );
        assert!(remote.describe(None).starts_with("on another host: its clock"));
        // Real exchanges disagree by some nanoseconds at least: an estimate is not "one clock",
        // even when its offset is 0.
        let estimated = ClockSync::estimate(&[
            exchange(0, 1_000, 50_000, 10_000, 50_000),
            exchange(0, 200_000, 50_000, 10_000, 52_000),
            exchange(0, 400_000, 51_000, 10_000, 50_000),
        ])
        .unwrap();
        assert!(!estimated.is_same_clock(), "{estimated:?}");
    }

    #[test]
    fn a_path_of_tens_of_milliseconds_still_gives_a_close_estimate() {
        // 10 ms each way, a few microseconds of jitter: the estimate is as good as the jitter,
        // not the path's length.
        let offset = -51_000_000;
        let exchanges: Vec<Exchange> = (0..32)
            .map(|i| {
                exchange(
                    offset,
                    i * 30_000_000,
                    10_000_000 + i % 5 * 1_000,
                    5_000,
                    10_000_000 + i % 3 * 1_000,
                )
            })
            .collect();
        let sync = ClockSync::estimate(&exchanges).unwrap();
        assert!(sync.uncertainty_ns <= 3_000, "{sync:?}");
        assert!((sync.offset_ns - offset).unsigned_abs() <= sync.uncertainty_ns, "{sync:?}");
    }

    #[test]
    fn server_times_move_onto_the_clients_clock() {
        let sync = ClockSync { offset_ns: 1_000, uncertainty_ns: 10, rtt_ns: 20 };
        assert_eq!(sync.to_client_ns(5_000), 4_000);
        assert_eq!(sync.to_client_ns(500), 0, "never before the run began");
        let behind = ClockSync { offset_ns: -1_000, ..sync };
        assert_eq!(behind.to_client_ns(5_000), 6_000);
    }

    #[test]
    fn the_longest_token_fits_in_a_hello() {
        let hello = ToServer::Hello {
            protocol_version: u16::MAX,
            ackscope_version: "999.999.999-some.long.pre.release+and.build.metadata".into(),
            token: "t".repeat(MAX_TOKEN_BYTES),
        };
        let len = crate::wire::encode(&hello).len();
        assert!(len < MAX_HELLO_BYTES / 2, "{len} bytes: the bound leaves room for growth");
    }

    #[test]
    fn hello_keeps_its_version_where_any_version_can_read_it() {
        let hello = ToServer::Hello {
            protocol_version: 4,
            ackscope_version: "0.1.0".into(),
            token: "t".into(),
        };
        let bytes = crate::wire::encode(&hello);
        assert_eq!(bytes[0], 0, "Hello is the first variant");
        assert_eq!(crate::wire::peek_version(&bytes), Some(4));
        let welcome = ToClient::Welcome { protocol_version: 4, ackscope_version: "0.1.0".into() };
        assert_eq!(crate::wire::peek_version(&crate::wire::encode(&welcome)), Some(4));
    }
}
