//! ackscope's probe: runs TCP experiments on real kernel sockets, records every step with
//! nanosecond timestamps, and serves the web app that shows them.
//!
//! - [`net`]: the only module that makes a run's TCP connections: the echo server, the
//!   request/response client, and the recorder that stamps each syscall.
//! - [`capture`]: packet capture of a run's own connections, stamped on the run's clock.
//! - [`scenario`]: what a run does and in what order; starts the threads, gathers their events.
//! - [`remote`]: two hosts: a run here driving the server side on another host's
//!   `ackscope server`, over a control connection.
//! - [`emulate`]: the emulated link (`--link`): two network namespaces joined by a relay.
//! - [`serve`]: the HTTP server for the embedded web app and the WebSocket that streams runs.
//! - [`watch`]: the sockets of processes ackscope did not start; for now every TCP socket's
//!   state and TCP_INFO through sock_diag, without privileges.
//! - [`cli`]: argument parsing and the headless summary.
//!
//! The measured path is plain blocking syscalls on dedicated threads, never async tasks: a
//! runtime's wake-ups would add their own latency to what we claim is the kernel's. tokio only
//! serves the UI and the WebSocket.

pub mod bpf;
pub mod capture;
pub mod cli;
pub mod emulate;
pub mod fuzzing;
pub mod host;
pub mod interrupt;
pub mod net;
pub mod record;
pub mod remote;
pub mod scenario;
pub mod serve;
pub mod watch;
