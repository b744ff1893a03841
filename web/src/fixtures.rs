//! Test inputs: a Hello, and story-1-shaped runs from `ackscope_shared::synthetic`.

pub use ackscope_shared::synthetic::{nagle_run, MS, US};
use ackscope_shared::wire::{Hello, ToBrowser};

pub fn hello() -> ToBrowser {
    ToBrowser::Hello(Hello::current("0.1.0"))
}
