//! Exchanges estimated from the kernel's counters, for a watch that read no packet (no
//! CAP_NET_RAW): each watched socket's TCP_INFO, read through sock_diag every 100 ms, counts
//! the data segments it sent and the bytes each way. Without packets nothing says where one
//! exchange ends and the next begins, so the estimate is a bound, and says so:
//!
//! - each exchange carries at least one data segment each way, so a connection had at most as
//!   many exchanges as the fewer data segments either of its sides sent (a message written in
//!   two segments counts twice: the bound is above the true count, never below it, but for
//!   what the sampling misses, below);
//! - a socket's counters count from its first sample, or from zero when the watch saw its
//!   connection open ([`EventKind::Connected`] or [`EventKind::Accepted`] before its samples):
//!   what it sent before the watch began is not counted;
//! - what a connection sends after its last sample (at most 100 ms before it closed) is not
//!   counted, and a connection that lived between two samples is not seen at all.
//!
//! Memory: a hundred bytes per connection seen, up to [`MAX_CONNECTIONS`]; past it, the
//! connections quiet for longest are folded into the totals (a later sample of one starts it
//! again from that sample, and it counts as a connection again).

use crate::event::{ConnId, Event, EventKind, TcpInfoSample};
use crate::keyed_hash::KeyedMap;

/// Connections whose counters are held at once: as many as a watch follows.
pub const MAX_CONNECTIONS: usize = crate::exchange::MAX_OPEN_CONNECTIONS;

/// What [`CounterEstimate`] found, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EstimatedExchanges {
    /// At most this many exchanges: per connection, the fewer data segments either side sent.
    pub exchanges_at_most: u64,
    /// Payload bytes the clients sent, and the servers.
    pub bytes_to_server: u64,
    pub bytes_to_client: u64,
    /// Connections whose counters moved while watched.
    pub connections: u64,
}

impl EstimatedExchanges {
    /// The summary's line, the same in `ackscope watch`, `show` and the page.
    pub fn line(&self) -> String {
        format!(
            "at most {} exchanges on {} connection{}, estimated from the kernel's counters \
             (sock_diag every 100 ms: the data segments each side sent, a message of several \
             segments counting several; {} bytes to the server, {} to the client); packets \
             (CAP_NET_RAW) would count and time each exchange",
            self.exchanges_at_most,
            self.connections,
            if self.connections == 1 { "" } else { "s" },
            self.bytes_to_server,
            self.bytes_to_client,
        )
    }
}

/// One socket's counters at a sample.
#[derive(Clone, Copy, Debug, Default)]
struct Reading {
    data_segs_out: u64,
    bytes_sent: u64,
    bytes_acked: u64,
    bytes_received: u64,
}

impl Reading {
    /// `None` from a kernel without these counters (before Linux 4.19).
    fn of(sample: &TcpInfoSample) -> Option<Reading> {
        Some(Reading {
            data_segs_out: u64::from(sample.data_segs_out?),
            bytes_sent: sample.bytes_sent?,
            bytes_acked: sample.bytes_acked?,
            bytes_received: sample.bytes_received?,
        })
    }
}

/// How a sender's bytes were counted: by itself as sent (retransmissions too) and as
/// acknowledged (its SYN and FIN too, one each), and by its peer as received (the FIN too).
#[derive(Clone, Copy, Debug, Default)]
struct Counted {
    sent: u64,
    acked: u64,
    received_by_peer: u64,
}

/// One connection's counters: each side's last reading, and what each side was seen to send
/// since its first (`None`: that side's socket was never sampled, a peer on another host).
#[derive(Clone, Copy, Debug, Default)]
struct Connection {
    last: [Option<Reading>; 2],
    segments_sent: [Option<u64>; 2],
    bytes: [Counted; 2],
    /// The last time this connection was counted, to fold the quietest first.
    last_ns: u64,
}

impl Connection {
    fn exchanges_at_most(&self) -> u64 {
        match self.segments_sent {
            [Some(client), Some(server)] => client.min(server),
            [Some(one), None] | [None, Some(one)] => one,
            [None, None] => 0,
        }
    }

    /// Bytes the client sent and the server sent: the least of the counts of the sides that
    /// were sampled (each counts something more than the payload: a retransmission, a SYN, a
    /// FIN; only data still in flight at the last sample is counted by none of them).
    fn bytes(&self) -> [u64; 2] {
        [0, 1].map(|sender| {
            let counted = self.bytes[sender];
            let by_sender = self.segments_sent[sender].map(|_| counted.sent.min(counted.acked));
            let by_receiver = self.segments_sent[1 - sender].map(|_| counted.received_by_peer);
            match (by_sender, by_receiver) {
                (Some(a), Some(b)) => a.min(b),
                (Some(one), None) | (None, Some(one)) => one,
                (None, None) => 0,
            }
        })
    }
}

/// The estimate as a watch's events go by (the reducer's [`crate::reduce::WatchTally`] feeds
/// it every event; it is read only when the watch read no packet).
#[derive(Debug, Default)]
pub struct CounterEstimate {
    open: KeyedMap<ConnId, Connection>,
    /// The connections folded out of `open`.
    folded: EstimatedExchanges,
}

impl CounterEstimate {
    pub fn push(&mut self, event: &Event) {
        let side = event.side.index();
        match &event.kind {
            // The watch saw this socket's connection open: it counts from zero.
            EventKind::Connected | EventKind::Accepted => {
                let connection = self.connection(event.conn);
                connection.last_ns = connection.last_ns.max(event.at_ns);
                connection.last[side].get_or_insert_with(Reading::default);
            }
            EventKind::TcpInfo(sample) => {
                let Some(now) = Reading::of(sample) else { return };
                let connection = self.connection(event.conn);
                connection.last_ns = connection.last_ns.max(event.at_ns);
                let Some(before) = connection.last[side].replace(now) else {
                    connection.segments_sent[side].get_or_insert(0);
                    return;
                };
                // Counters only grow; one that went back (a reused socket) restarts here.
                let grew = |now: u64, before: u64| now.saturating_sub(before);
                let segments = connection.segments_sent[side].get_or_insert(0);
                *segments += grew(now.data_segs_out, before.data_segs_out);
                let mine = &mut connection.bytes[side];
                mine.sent += grew(now.bytes_sent, before.bytes_sent);
                mine.acked += grew(now.bytes_acked, before.bytes_acked);
                connection.bytes[1 - side].received_by_peer +=
                    grew(now.bytes_received, before.bytes_received);
            }
            _ => {}
        }
    }

    fn connection(&mut self, conn: ConnId) -> &mut Connection {
        if self.open.len() >= MAX_CONNECTIONS && !self.open.contains_key(&conn) {
            self.fold_quietest_half();
        }
        self.open.entry(conn).or_default()
    }

    /// Folds the half of the held connections quiet for longest into the totals (by their
    /// last time, then their id: a listing stamps all its samples alike): O(n) once every n/2
    /// new connections.
    fn fold_quietest_half(&mut self) {
        let mut quiet: Vec<(u64, ConnId)> =
            self.open.iter().map(|(&conn, c)| (c.last_ns, conn)).collect();
        let middle = quiet.len() / 2;
        let (_, &mut cut, _) = quiet.select_nth_unstable(middle);
        let folded = &mut self.folded;
        self.open.retain(|&conn, connection| {
            let fold = (connection.last_ns, conn) < cut;
            if fold {
                add(folded, connection);
            }
            !fold
        });
    }

    /// The estimate so far: `None` when no socket's counters moved.
    pub fn estimate(&self) -> Option<EstimatedExchanges> {
        let mut total = self.folded.clone();
        for connection in self.open.values() {
            add(&mut total, connection);
        }
        (total.connections > 0).then_some(total)
    }
}

/// Adds a connection to `total` if anything of it was counted.
fn add(total: &mut EstimatedExchanges, connection: &Connection) {
    let [to_server, to_client] = connection.bytes();
    let exchanges = connection.exchanges_at_most();
    if exchanges == 0 && to_server == 0 && to_client == 0 {
        return;
    }
    total.exchanges_at_most += exchanges;
    total.bytes_to_server += to_server;
    total.bytes_to_client += to_client;
    total.connections += 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ReqId, Side};

    /// A socket's sample; it sent `bytes_sent`, which counts as acknowledged too.
    fn sample(data_segs_out: u32, bytes_sent: u64, bytes_received: u64) -> TcpInfoSample {
        TcpInfoSample {
            data_segs_out: Some(data_segs_out),
            bytes_sent: Some(bytes_sent),
            bytes_acked: Some(bytes_sent),
            bytes_received: Some(bytes_received),
            ..TcpInfoSample::default()
        }
    }

    fn event(at_ns: u64, conn: u32, side: Side, kind: EventKind) -> Event {
        Event { at_ns, side, conn: ConnId(conn), req: ReqId(0), kind }
    }

    fn info(at_ns: u64, conn: u32, side: Side, s: TcpInfoSample) -> Event {
        event(at_ns, conn, side, EventKind::TcpInfo(Box::new(s)))
    }

    /// Both ends sampled: the fewer data segments either side sent bound the exchanges; the
    /// bytes each way are counted once, the least of what the counters say (the client's
    /// count of bytes acknowledged has its SYN and FIN, the server's of bytes received the
    /// client's FIN).
    #[test]
    fn both_ends_bound_the_exchanges_by_the_fewer_segments_and_count_each_byte_once() {
        let mut estimate = CounterEstimate::default();
        // Opened while watched: both count from zero. 10 requests of 2 segments (a length,
        // then a body: 104 bytes), 10 answers of 1 (100 bytes).
        estimate.push(&event(0, 1, Side::Client, EventKind::Connected));
        estimate.push(&event(0, 1, Side::Server, EventKind::Accepted));
        estimate.push(&info(100, 1, Side::Client, sample(8, 416, 300)));
        estimate.push(&info(100, 1, Side::Server, sample(3, 300, 416)));
        let mut closing = sample(20, 1040, 1000);
        closing.bytes_acked = Some(1042);
        estimate.push(&info(200, 1, Side::Client, closing));
        estimate.push(&info(200, 1, Side::Server, sample(10, 1000, 1041)));
        let found = estimate.estimate().expect("counted");
        assert_eq!(
            found,
            EstimatedExchanges {
                exchanges_at_most: 10,
                bytes_to_server: 1040,
                bytes_to_client: 1000,
                connections: 1
            }
        );
        assert!(found.line().starts_with("at most 10 exchanges on 1 connection, estimated"));
    }

    /// A socket first seen already open counts from its first sample, not from what it sent
    /// before the watch; a peer on another host (one end sampled) bounds by that end alone.
    #[test]
    fn a_socket_open_before_the_watch_counts_from_its_first_sample() {
        let mut estimate = CounterEstimate::default();
        assert_eq!(estimate.estimate(), None, "nothing sampled");
        estimate.push(&info(100, 7, Side::Server, sample(500, 50_000, 9_000)));
        assert_eq!(estimate.estimate(), None, "a first sample is where counting starts");
        estimate.push(&info(200, 7, Side::Server, sample(503, 50_300, 9_090)));
        let found = estimate.estimate().expect("counted");
        assert_eq!(found.exchanges_at_most, 3);
        assert_eq!((found.bytes_to_server, found.bytes_to_client), (90, 300));
    }

    /// Past the bound, the quietest half is folded into the totals, even when a listing
    /// stamped them all alike: nothing counted is lost, and what is held stays bounded.
    #[test]
    fn past_the_bound_the_quietest_half_is_folded_and_nothing_counted_is_lost() {
        let mut estimate = CounterEstimate::default();
        let connections = MAX_CONNECTIONS as u32 * 3;
        for conn in 0..connections {
            // Ten connections to a listing, all stamped with its time.
            let at = u64::from(conn / 10) * 100;
            estimate.push(&event(at, conn, Side::Client, EventKind::Connected));
            estimate.push(&info(at, conn, Side::Client, sample(2, 20, 10)));
            assert!(estimate.open.len() <= MAX_CONNECTIONS);
        }
        assert!(estimate.open.len() >= MAX_CONNECTIONS / 2, "half kept: {}", estimate.open.len());
        let found = estimate.estimate().expect("counted");
        assert_eq!(found.connections, u64::from(connections));
        assert_eq!(found.exchanges_at_most, 2 * u64::from(connections));
        assert_eq!(found.bytes_to_server, 20 * u64::from(connections));
        assert_eq!(found.bytes_to_client, 10 * u64::from(connections));
    }
}
