//! The emulated link (`--link`): client and server in two network namespaces, joined by a
//! user-space relay between two TUN devices (the Mahimahi design), because this kernel has no
//! netem. Per direction: a drop-tail queue, a rate serializer, a fixed delay of half the RTT,
//! and random loss from a PRNG seeded per run.
//!
//! - [`queue`]: one direction's model, pure, with the time passed in.
//! - [`netns`]: anonymous namespaces and TUN devices, made by syscalls; nothing outlives the
//!   process, whatever ends it.
//! - [`relay`]: the thread that moves packets between the devices.
//! - [`privilege`]: what `--link` needs without root (a user namespace), and the one message
//!   when the system refuses it.
//!
//! A run can also put its server in a network namespace the user made (`--server-netns`): the
//! path between is then theirs, a veth pair with or without `tc netem`, and nothing is emulated.

pub mod entry;
pub mod netns;
pub mod privilege;
pub mod queue;
pub mod relay;

use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ackscope_shared::spec::LinkSpec;
use ackscope_shared::Side;

use crate::capture::Tagger;
use crate::net::peers::Peers;
use crate::net::record::{Clock, Recorder};
use entry::EntryTap;
use netns::{Namespace, Offload, TUN_NAME};
use queue::{Direction, DirectionConfig};
use relay::{Path, Relay, RelayStats};

/// The client namespace's address; the server's is its point-to-point peer.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 44, 0, 1);
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 44, 0, 2);

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("emulated link: setting up the {side} namespace: {source}")]
    Namespace { side: &'static str, source: io::Error },
    #[error("emulated link: starting the relay: {0}")]
    Relay(io::Error),
}

/// A running emulated link. Dropping it stops the relay and closes both namespaces (they go
/// away once the last socket in them is closed too).
pub struct Link {
    client: Namespace,
    server: Namespace,
    relay: Relay,
    /// The loss PRNG's seed: the same seed drops the same packet numbers.
    pub seed: u64,
}

impl Link {
    /// Makes both namespaces and starts the relay; `recorders` record what the link does to the
    /// client's packets and the server's.
    pub fn start(
        spec: &LinkSpec,
        clock: Clock,
        client_recorder: Recorder,
        server_recorder: Recorder,
    ) -> Result<Link, LinkError> {
        Link::start_capturing(spec, clock, client_recorder, server_recorder, None)
    }

    /// [`Link::start`], and with `capture` (the run's connections) the relay also records each
    /// TCP packet it reads as a `Segment` event of its sender, in that side's recorder
    /// (`--capture` on the link: docs/CAPTURE.md).
    pub fn start_capturing(
        spec: &LinkSpec,
        clock: Clock,
        client_recorder: Recorder,
        server_recorder: Recorder,
        capture: Option<Arc<Peers>>,
    ) -> Result<Link, LinkError> {
        let offload = offload(spec, capture.is_some());
        let (client, client_tun) = Namespace::create(CLIENT_IP, SERVER_IP, spec.mtu, offload)
            .map_err(|source| LinkError::Namespace { side: "client", source })?;
        let (server, server_tun) = Namespace::create(SERVER_IP, CLIENT_IP, spec.mtu, offload)
            .map_err(|source| LinkError::Namespace { side: "server", source })?;
        let seed = seed();
        tracing::info!("emulated link: loss seed {seed}, {offload:?} packets");
        let config = DirectionConfig {
            rate_bps: spec.rate_bps,
            delay_ns: spec.one_way_delay_ns(),
            queue_packets: spec.queue_packets,
            loss_ppm: spec.loss_ppm,
        };
        // Only a serializer carries a late read over to the packets queued behind it: without a
        // rate a packet read late is only itself late, and the taps' cost (a fifth of the
        // relay's top packet rate) buys less there (entry.rs).
        let stamped = spec.rate_bps.is_some();
        let paths = [
            Path {
                from: client_tun,
                entry: entry_tap(&client, "client", stamped),
                direction: Direction::new(config, seed),
                recorder: client_recorder,
            },
            Path {
                from: server_tun,
                entry: entry_tap(&server, "server", stamped),
                direction: Direction::new(config, seed ^ 0x5EED),
                recorder: server_recorder,
            },
        ];
        let relay = Relay::start(paths, clock, offload, capture.map(Tagger::new))
            .map_err(LinkError::Relay)?;
        Ok(Link { client, server, relay, seed })
    }

    /// Moves the calling thread into `side`'s namespace.
    pub fn enter(&self, side: Side) -> io::Result<()> {
        match side {
            Side::Client => self.client.enter(),
            Side::Server => self.server.enter(),
        }
    }

    /// Each side's namespace descriptor (client, server), for other processes to join.
    pub fn namespace_fds(&self) -> (std::os::fd::RawFd, std::os::fd::RawFd) {
        (self.client.raw_fd(), self.server.raw_fd())
    }

    /// Stops the relay; what it did, or the error that stopped it early. The namespaces stay
    /// until the link is dropped.
    pub fn stop_relay(&self) -> io::Result<RelayStats> {
        self.relay.stop()
    }
}

/// The entry tap of `namespace`'s device, if `wanted` (opened in that namespace: a socket
/// belongs to its maker's); without one the relay times packets by its reads.
fn entry_tap(namespace: &Namespace, side: &str, wanted: bool) -> Option<EntryTap> {
    if !wanted {
        return None;
    }
    namespace
        .run_in(|| EntryTap::open(TUN_NAME))
        .inspect_err(|e| {
            tracing::warn!(
                "emulated link: no entry tap on the {side} device ({e}); its packets enter the \
                 link when the relay reads them, later if the relay is kept off the CPU"
            )
        })
        .ok()
}

/// How the devices pass packets. A link that only delays passes the kernels' GSO packets whole:
/// every segment of one is delayed alike, so nothing the link models changes, and the relay moves
/// 64 KB per read and write. A rate, a queue that can fill, loss and capture act on each packet
/// on the wire, so those links pass plain, MTU-sized packets.
fn offload(spec: &LinkSpec, capture: bool) -> Offload {
    if spec.rate_bps.is_none() && spec.loss_ppm == 0 && !capture {
        Offload::Gso
    } else {
        Offload::Plain
    }
}

/// The loss seed: `ACKSCOPE_LINK_SEED` to replay a run's losses, else from the clock.
fn seed() -> u64 {
    if let Some(seed) = std::env::var("ACKSCOPE_LINK_SEED").ok().and_then(|s| s.parse().ok()) {
        return seed;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// A run's server placed in a network namespace the user made (`ip netns add`), listening on
/// `ip`, an address of that namespace the client's namespace has a route to.
pub struct ServerNamespace {
    pub name: String,
    pub ip: Ipv4Addr,
    namespace: Namespace,
}

impl ServerNamespace {
    /// Opens and checks the namespace (see [`Namespace::open_named`]).
    pub fn open(name: &str, ip: Ipv4Addr) -> Result<ServerNamespace, String> {
        let namespace = Namespace::open_named(name)?;
        Ok(ServerNamespace { name: name.to_owned(), ip, namespace })
    }

    /// The round trip of the path from the calling thread's namespace to the server's: the
    /// fastest of a few TCP handshakes (`connect()` returns when the SYN-ACK is back) to a
    /// listener of its own on `ip`, so the run's echo server sees none of them. Also checks that
    /// `ip` is the namespace's and reachable, before the run starts.
    pub fn path_rtt_ns(&self) -> Result<u64, String> {
        const HANDSHAKES: usize = 5;
        let (name, ip) = (&self.name, self.ip);
        let listener = Placement::ServerIn(self)
            .run_in(Side::Server, || TcpListener::bind((ip, 0)))
            .map_err(|e| {
                format!(
                    "cannot listen on {ip} in namespace `{name}` ({e}): give --server-ip one of \
                     its addresses (`ip -n {name} addr`)"
                )
            })?;
        let to = listener.local_addr().map_err(|e| e.to_string())?;
        let mut fastest = u64::MAX;
        for _ in 0..HANDSHAKES {
            let started = Instant::now();
            let stream = TcpStream::connect_timeout(&to, Duration::from_secs(2)).map_err(|e| {
                format!(
                    "cannot reach {ip} (namespace `{name}`) from this namespace ({e}): is the \
                     veth pair up, with a route to it? (`ip route get {ip}`)"
                )
            })?;
            fastest = fastest.min(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
            drop(stream);
            // Established already: accept() returns at once and keeps the backlog empty.
            let _ = listener.accept();
        }
        Ok(fastest)
    }
}

/// Where a run's sockets live: both on loopback, each side in its namespace of a link, or the
/// client in this process's namespace and the server in a named one.
#[derive(Clone, Copy)]
pub enum Placement<'a> {
    Loopback,
    Link(&'a Link),
    ServerIn(&'a ServerNamespace),
}

impl Placement<'_> {
    pub fn new(link: Option<&Link>) -> Placement<'_> {
        link.map_or(Placement::Loopback, Placement::Link)
    }

    /// The address `side`'s sockets bind to.
    pub fn ip(&self, side: Side) -> Ipv4Addr {
        match (self, side) {
            (Placement::Loopback, _) => Ipv4Addr::LOCALHOST,
            (Placement::Link(_), Side::Client) => CLIENT_IP,
            (Placement::Link(_), Side::Server) => SERVER_IP,
            // Whichever local address the route to the server's namespace leaves from.
            (Placement::ServerIn(_), Side::Client) => Ipv4Addr::UNSPECIFIED,
            (Placement::ServerIn(server), Side::Server) => server.ip,
        }
    }

    /// Moves the calling thread to `side`'s namespace (nothing to do on loopback, or for the
    /// client of a server in a named namespace: it stays in this process's).
    pub fn enter(&self, side: Side) -> io::Result<()> {
        match (self, side) {
            (Placement::Loopback, _) | (Placement::ServerIn(_), Side::Client) => Ok(()),
            (Placement::Link(link), side) => link.enter(side),
            (Placement::ServerIn(server), Side::Server) => server.namespace.enter(),
        }
    }

    /// Runs `f` on a thread in `side`'s namespace, leaving the caller's own namespace alone:
    /// sockets `f` creates stay in that namespace wherever they are used afterwards.
    pub fn run_in<T: Send>(
        &self,
        side: Side,
        f: impl FnOnce() -> io::Result<T> + Send,
    ) -> io::Result<T> {
        if let Placement::Loopback = self {
            return f();
        }
        thread::scope(|scope| {
            scope
                .spawn(|| {
                    self.enter(side)?;
                    f()
                })
                .join()
                .map_err(|_| io::Error::other("a thread setting up the link's sockets panicked"))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_link_that_just_delays_passes_whole_gso_packets() {
        let link = |text: &str| LinkSpec::parse(text).unwrap();
        assert_eq!(offload(&link("rtt=40ms"), false), Offload::Gso);
        assert_eq!(offload(&link("rtt=40ms,mtu=1500,queue=10"), false), Offload::Gso);
        assert_eq!(offload(&link("rtt=40ms"), true), Offload::Plain, "capture sees each segment");
        assert_eq!(offload(&link("rtt=40ms,rate=100mbit"), false), Offload::Plain);
        assert_eq!(offload(&link("rtt=40ms,loss=1%"), false), Offload::Plain);
    }
}
