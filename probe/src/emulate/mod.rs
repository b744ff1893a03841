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

pub mod netns;
pub mod privilege;
pub mod queue;
pub mod relay;

use std::io;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::thread;

use ackscope_shared::spec::LinkSpec;
use ackscope_shared::Side;

use crate::capture::Tagger;
use crate::net::peers::Peers;
use crate::net::record::{Clock, Recorder};
use netns::{Namespace, Offload};
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
        let paths = [
            Path {
                from: client_tun,
                direction: Direction::new(config, seed),
                recorder: client_recorder,
            },
            Path {
                from: server_tun,
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

/// Where a run's sockets live: both on loopback, or each side in its namespace of a link.
#[derive(Clone, Copy)]
pub enum Placement<'a> {
    Loopback,
    Link(&'a Link),
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
        }
    }

    /// Moves the calling thread to `side`'s namespace (nothing to do on loopback).
    pub fn enter(&self, side: Side) -> io::Result<()> {
        match self {
            Placement::Loopback => Ok(()),
            Placement::Link(link) => link.enter(side),
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
