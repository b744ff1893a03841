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

/// What the browser tests read the page with.
#[cfg(target_arch = "wasm32")]
pub mod dom {
    use wasm_bindgen::JsCast;
    use web_sys::Element;

    pub fn all(root: &Element, selector: &str) -> Vec<Element> {
        let list = root.query_selector_all(selector).expect("a valid selector");
        (0..list.length()).filter_map(|i| list.item(i)?.dyn_into().ok()).collect()
    }

    /// Lets Leptos run the effects a signal change queued, then what they put off to a later
    /// task (the kernel panel is built a task after the rest of a run's view), then theirs.
    pub async fn settle() {
        for _ in 0..3 {
            leptos::task::tick().await;
        }
        crate::js::sleep(0).await;
        for _ in 0..3 {
            leptos::task::tick().await;
        }
    }
}
