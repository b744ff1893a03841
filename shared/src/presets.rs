//! Named scenarios: the stories' experiments and every loopback row of the stall table, each a
//! plain spec (`ackscope run NAME --print-spec` shows it; edit it and run it with `--spec FILE`).

use crate::spec::{BulkSpec, LinkSpec, PerSide, RrSpec, Scenario, WritePattern};

/// What a preset shows, for `ackscope run --help` and the browser.
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    /// Whether the story's table says this configuration stalls on every request after the
    /// first (a delayed-ACK wait of ~40 ms or more per exchange).
    pub stalls: Option<bool>,
    pub build: fn() -> Scenario,
}

/// Story 3 on a 40 ms RTT, MTU 1500 link (docs/LINK.md): bodies of `size_bytes`, Nagle on.
fn story3(size_bytes: u32, write: WritePattern, requests: u32) -> Scenario {
    let link =
        LinkSpec { rtt_us: 40_000, rate_bps: None, mtu: 1500, queue_packets: 1000, loss_ppm: 0 };
    Scenario::Rr(RrSpec {
        requests,
        size_bytes,
        write: PerSide::both(write),
        link: Some(link),
        ..RrSpec::default()
    })
}

/// Story 2 on a 40 ms RTT, 100 Mbit/s link: 16 MiB one way (enough that slow start's first
/// round trips do not dominate the average), the receiver's buffer set to
/// `rcvbuf` (`None`: the kernel auto-tunes it). The window caps goodput at about rcvbuf / RTT.
fn story2(rcvbuf: Option<u32>) -> Scenario {
    let link = LinkSpec {
        rtt_us: 40_000,
        rate_bps: Some(100_000_000),
        mtu: 1500,
        queue_packets: 1000,
        loss_ppm: 0,
    };
    Scenario::Bulk(BulkSpec {
        bytes: 16 << 20,
        rcvbuf: PerSide { client: None, server: rcvbuf },
        link: Some(link),
        ..BulkSpec::default()
    })
}

fn story1(change: impl FnOnce(&mut RrSpec)) -> Scenario {
    let mut spec = RrSpec { requests: 100, ..RrSpec::default() };
    change(&mut spec);
    Scenario::Rr(spec)
}

const CLIENT_ONLY: PerSide<bool> = PerSide { client: true, server: false };
const SERVER_ONLY: PerSide<bool> = PerSide { client: false, server: true };
const BOTH: PerSide<bool> = PerSide { client: true, server: true };

pub const PRESETS: &[Preset] = &[
    Preset {
        name: "story1",
        about: "length then body as two writes, Nagle on both sides, keep-alive: two ~44 ms stalls per request",
        stalls: Some(true),
        build: || story1(|_| {}),
    },
    Preset {
        name: "story1-nodelay",
        about: "TCP_NODELAY on both sides: no stall",
        stalls: Some(false),
        build: || story1(|s| s.nodelay = BOTH),
    },
    Preset {
        name: "story1-nodelay-client",
        about: "TCP_NODELAY on the client only: the answer still stalls",
        stalls: Some(true),
        build: || story1(|s| s.nodelay = CLIENT_ONLY),
    },
    Preset {
        name: "story1-nodelay-server",
        about: "TCP_NODELAY on the server only: the request still stalls",
        stalls: Some(true),
        build: || story1(|s| s.nodelay = SERVER_ONLY),
    },
    Preset {
        name: "story1-quickack",
        about: "TCP_QUICKACK on both sides, re-armed after every read: no stall",
        stalls: Some(false),
        build: || story1(|s| s.quickack = BOTH),
    },
    Preset {
        name: "story1-quickack-server",
        about: "TCP_QUICKACK on the server only: the answer still stalls",
        stalls: Some(true),
        build: || story1(|s| s.quickack = SERVER_ONLY),
    },
    Preset {
        name: "story1-cork",
        about: "TCP_CORK around each message on both sides: no stall",
        stalls: Some(false),
        build: || story1(|s| s.cork = BOTH),
    },
    Preset {
        name: "story1-cork-client",
        about: "TCP_CORK on the client only: the answer still stalls",
        stalls: Some(true),
        build: || story1(|s| s.cork = CLIENT_ONLY),
    },
    Preset {
        name: "story1-single-write",
        about: "length and body in one write on both sides: no stall",
        stalls: Some(false),
        build: || story1(|s| s.write = PerSide::both(WritePattern::Single)),
    },
    Preset {
        name: "story1-writev",
        about: "length and body in one writev() on both sides: no stall",
        stalls: Some(false),
        build: || story1(|s| s.write = PerSide::both(WritePattern::Writev)),
    },
    Preset {
        name: "story1-reconnect",
        about: "Nagle on, a new connection before every request: no stall (quick-ACK mode)",
        stalls: Some(false),
        build: || story1(|s| s.reconnect_every = 1),
    },
    Preset {
        name: "story1-reconnect-nodelay",
        about: "TCP_NODELAY on, a new connection before every request: no stall",
        stalls: Some(false),
        build: || {
            story1(|s| {
                s.reconnect_every = 1;
                s.nodelay = BOTH;
            })
        },
    },
    Preset {
        name: "story2-loopback",
        about: "bulk 100 MiB one way with a 64 KiB receive buffer on the server (on loopback the \
                RTT is microseconds: the window barely limits; see the emulated link)",
        stalls: None,
        build: || {
            Scenario::Bulk(BulkSpec {
                rcvbuf: PerSide { client: None, server: Some(64 * 1024) },
                ..BulkSpec::default()
            })
        },
    },
    Preset {
        name: "story2-link-64k",
        about: "bulk 16 MiB over a 40 ms, 100 Mbit/s link, the server's receive buffer set to \
                64 KiB: the window caps goodput near 64 KiB / 40 ms, a tenth of the link",
        stalls: None,
        build: || story2(Some(64 * 1024)),
    },
    Preset {
        name: "story2-link-256k",
        about: "the same with a 256 KiB receive buffer: four times the window, about four \
                times the goodput",
        stalls: None,
        build: || story2(Some(256 * 1024)),
    },
    Preset {
        name: "story2-link-1m",
        about: "the same with 1 MiB: above bandwidth x delay (100 Mbit/s x 40 ms = 500 KB), \
                so the link, not the window, is the limit",
        stalls: None,
        build: || story2(Some(1 << 20)),
    },
    Preset {
        name: "story2-link-auto",
        about: "the same with the buffer left to the kernel's auto-tuning (tcp_rmem)",
        stalls: None,
        build: || story2(None),
    },
    Preset {
        name: "story3-split-1000",
        about: "40 ms link, length then a 1000-byte body, Nagle: the sub-MSS body waits for the \
                delayed ACK of the length in each direction (~208 ms per request)",
        stalls: Some(true),
        build: || story3(1000, WritePattern::Split, 10),
    },
    Preset {
        name: "story3-split-1448",
        about: "40 ms link, length then a 1448-byte body (one full MSS): Nagle sends a full \
                segment at once, one RTT per request (~41 ms)",
        stalls: Some(false),
        build: || story3(1448, WritePattern::Split, 10),
    },
    Preset {
        name: "story3-split-2048",
        about: "40 ms link, length then a 2048-byte body: the 600-byte tail waits for an ACK, \
                an extra RTT per direction (~123 ms per request)",
        stalls: Some(true),
        build: || story3(2048, WritePattern::Split, 10),
    },
    Preset {
        name: "story3-cheshire-99900",
        about: "Cheshire's 99,900 bytes in one write over a 40 ms link: 68 full segments and a \
                tail; Linux uses Minshall's variant of Nagle (a small segment waits only for \
                another unacknowledged small one), so it does not stall",
        stalls: Some(false),
        build: || story3(99_900, WritePattern::Single, 6),
    },
    Preset {
        name: "story3-cheshire-100000",
        about: "Cheshire's 100,000 bytes in one write over a 40 ms link: the classic stall of \
                the odd last segment does not happen on Linux (Minshall's variant of Nagle): \
                the same time as 99,900",
        stalls: Some(false),
        build: || story3(100_000, WritePattern::Single, 6),
    },
];

pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|preset| preset.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_a_valid_spec_with_a_unique_name() {
        for (i, preset) in PRESETS.iter().enumerate() {
            assert!((preset.build)().validate().is_ok(), "{}", preset.name);
            assert!(PRESETS[..i].iter().all(|p| p.name != preset.name), "{}", preset.name);
        }
        assert!(find("story1").is_some() && find("nothing").is_none());
    }
}
