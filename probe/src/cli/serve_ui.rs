//! `ackscope` with no command: the web app and its WebSocket on loopback.

use std::io;
use std::net::{Ipv4Addr, TcpListener};

use super::terminal::announce;
use super::{Ended, Failure};
use crate::serve;

/// The web app's port when none is given ("44": the delayed-ACK stall this tool exists to show).
pub const DEFAULT_PORT: u16 = 4044;
/// How many ports after the default to try before taking any free one.
const PORTS_TO_TRY: u16 = 16;

pub fn serve(port: Option<u16>) -> Result<Ended, Failure> {
    let (listener, note) = bind_ui(port)?;
    let addr = listener.local_addr().map_err(|e| format!("reading the bound address: {e}"))?;
    if let Some(note) = note {
        eprintln!("ackscope: {note}");
    }
    if !serve::assets::is_built() {
        eprintln!("ackscope: this binary has no web app built in; build it with `cargo xtask run`");
    }
    serve::run(listener, None, || {
        announce(format_args!("ackscope is serving http://{addr}/ (Ctrl-C to stop)"));
    })?;
    // It serves until Ctrl-C or SIGTERM: an interrupted command, exit 130.
    Ok(Ended::Interrupted)
}

/// Binds the UI on loopback. An explicit port must be free; otherwise the default or the next
/// free one after it is taken, and the note says so.
fn bind_ui(port: Option<u16>) -> Result<(TcpListener, Option<String>), String> {
    if let Some(port) = port {
        return TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map(|l| (l, None)).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                format!(
                    "port {port} on 127.0.0.1 is in use; choose another with --port, or leave \
                     --port out to take the next free one"
                )
            } else {
                format!("cannot listen on 127.0.0.1:{port}: {e}")
            }
        });
    }
    for candidate in DEFAULT_PORT..DEFAULT_PORT + PORTS_TO_TRY {
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, candidate)) {
            let note = (candidate != DEFAULT_PORT)
                .then(|| format!("port {DEFAULT_PORT} is in use; using {candidate} instead"));
            return Ok((listener, note));
        }
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let note = format!(
        "ports {DEFAULT_PORT}-{} are in use; using a free one instead",
        DEFAULT_PORT + PORTS_TO_TRY - 1
    );
    Ok((listener, Some(note)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_port_in_use_fails_and_names_the_flag() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = bind_ui(Some(port)).unwrap_err();
        assert!(err.contains(&port.to_string()) && err.contains("--port"), "{err}");
    }
}
