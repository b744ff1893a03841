//! Test inputs: a Hello, and story-1-shaped runs from `ackscope_shared::synthetic`.

pub use ackscope_shared::synthetic::{nagle_run, MS, US};
use ackscope_shared::wire::{Hello, HostFacts, Instruments, ToBrowser};
use ackscope_shared::{RrSpec, RunId, Scenario};

/// The machine the fixtures pretend to run on.
pub fn host() -> HostFacts {
    HostFacts {
        os: "linux".into(),
        kernel: "6.8.0-test".into(),
        tcp_rmem: "4096 131072 6291456".into(),
        tcp_wmem: "4096 16384 4194304".into(),
        rmem_max: "212992".into(),
        wmem_max: "212992".into(),
        congestion_control: "cubic".into(),
        capture: "not permitted: needs CAP_NET_RAW".into(),
    }
}

pub fn hello() -> ToBrowser {
    ToBrowser::Hello(Hello::current("0.1.0", host()))
}

/// A request/response run starting, with every instrument at its default.
pub fn rr_started(id: u32, spec: RrSpec) -> ToBrowser {
    ToBrowser::RunStarted {
        run: RunId(id),
        spec: Scenario::Rr(spec),
        instruments: Instruments::default(),
    }
}
