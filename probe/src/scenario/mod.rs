//! Scenarios: what a run does. Each one starts the threads of its experiment, gathers their
//! events in one place and reports how the run ended.

pub mod rr;
