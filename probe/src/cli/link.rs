//! `ackscope link rtt=20ms,...`: the emulated link alone, between two network namespaces that
//! other processes join, so that two probes (or any two programs) talk across a path with a real
//! delay on one machine: `ackscope server` in one namespace, `ackscope run --remote` in the
//! other (docs/REMOTE.md). The same relay as `--link` (docs/LINK.md).

use std::sync::atomic::Ordering;
use std::time::Duration;

use ackscope_shared::spec::LinkSpec;
use ackscope_shared::Side;

use super::terminal::announce;
use super::{Ended, Failure};
use crate::emulate::{self, Link, CLIENT_IP, SERVER_IP};
use crate::interrupt;
use crate::net::record::{Clock, Recorder};

#[derive(Debug, clap::Args)]
pub struct LinkArgs {
    /// The link: rtt=40ms[,rate=100mbit][,mtu=1500][,queue=1000][,loss=0.1%]
    #[arg(value_name = "SPEC", value_parser = LinkSpec::parse)]
    spec: LinkSpec,
}

pub fn link(args: &LinkArgs) -> Result<Ended, Failure> {
    // Before any thread exists: a user namespace is refused to a multithreaded process.
    emulate::privilege::ensure_link_privileges().map_err(|e| Failure::Run(e.to_string()))?;
    let clock = Clock::start();
    let recorder = |side| Recorder::discarding(clock, side);
    let link = Link::start(&args.spec, clock, recorder(Side::Client), recorder(Side::Server))
        .map_err(|e| Failure::Run(e.to_string()))?;
    let (client, server) = link.namespace_fds();
    let pid = std::process::id();
    announce(format_args!("link up: round trip {} us (Ctrl-C to take it down)", args.spec.rtt_us));
    announce(format_args!("client namespace /proc/{pid}/fd/{client} address {CLIENT_IP}"));
    announce(format_args!("server namespace /proc/{pid}/fd/{server} address {SERVER_IP}"));
    announce(format_args!(
        "e.g. nsenter --net=/proc/{pid}/fd/{server} ackscope server --listen {SERVER_IP}:7000"
    ));
    let stop = interrupt::install();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = link.stop_relay().map_err(|e| Failure::Run(format!("the relay failed: {e}")))?;
    eprintln!(
        "ackscope: link down; {} packets delivered, {} dropped",
        stats.delivered_packets, stats.dropped_packets
    );
    Ok(Ended::Ok)
}
