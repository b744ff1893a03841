//! `ackscope class [--listen ADDR] [--lesson ID]`: the web app for a room. It prints the presenter's link
//! (with the room's secret in its fragment) and the students' link (with the room code); every
//! page follows the presenter's lesson step, and runs the presenter starts stream to all of them.

use std::net::SocketAddr;
use std::sync::Arc;

use ackscope_shared::lesson;
use ackscope_shared::wire::{ClassState, ClassView};

use super::terminal::announce;
use super::{Ended, Failure};
use crate::serve;
use crate::serve::room::{Room, MAX_PAGES};

/// The room's port when none is given: beside the UI's 4044.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4045";

#[derive(Debug, clap::Args)]
pub struct ClassArgs {
    /// Address to serve the room on; another machine's students need a non-loopback address
    /// such as 0.0.0.0:4045 (they then need the room code to connect)
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Open the room on this lesson (its file name without .lesson: forty-ms, reconnect,
    /// split-writes, buffers, loss, slow-start, bbr): every page, the presenter's too, starts on
    /// its first step
    #[arg(long, value_name = "ID")]
    lesson: Option<String>,
}

/// The room's first state for `--lesson ID`: the lesson's first step, nothing revealed. The
/// error names the lessons there are.
fn opening_on(id: &str) -> Result<ClassState, Failure> {
    let known: Vec<&str> = lesson::BUNDLED.iter().map(|(id, _)| *id).collect();
    if !known.contains(&id) {
        return Err(Failure::Usage(format!(
            "--lesson: no lesson {id:?}; the lessons are {} (docs/LESSONS.md)",
            known.join(", ")
        )));
    }
    Ok(ClassState {
        lesson: id.to_string(),
        step: 0,
        revealed: false,
        recording: false,
        view: ClassView::default(),
    })
}

pub fn class(args: &ClassArgs) -> Result<Ended, Failure> {
    let opening = args.lesson.as_deref().map(opening_on).transpose()?;
    let listener = std::net::TcpListener::bind(args.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| format!("reading the bound address: {e}"))?;
    let room = Arc::new(Room::new().map_err(|e| format!("cannot make the room's secret: {e}"))?);
    if let Some(state) = opening {
        room.set(state)?;
    }
    if !serve::assets::is_built() {
        eprintln!("ackscope: this binary has no web app built in; build it with `cargo xtask run`");
    }
    let host = if addr.ip().is_unspecified() {
        eprintln!(
            "ackscope: listening on {addr}, every interface: a page needs the room code {} to \
             connect, and only the presenter's link (its secret) moves the room or starts runs. \
             Give students this machine's address in place of {}.",
            room.code,
            addr.ip()
        );
        format!("{}:{}", addr.ip(), addr.port())
    } else {
        if !addr.ip().is_loopback() {
            eprintln!(
                "ackscope: listening on {addr}: a page needs the room code {} to connect, and \
                 only the presenter's link moves the room or starts runs",
                room.code
            );
        }
        addr.to_string()
    };
    let links = || {
        announce(format_args!(
            "ackscope class: room {}, at most {} pages (Ctrl-C to stop)",
            room.code,
            MAX_PAGES - 1
        ));
        announce(format_args!(
            "presenter: http://{host}/?room={}#{}",
            room.code,
            room.presenter_fragment()
        ));
        announce(format_args!("students:  http://{host}/?room={}", room.code));
    };
    serve::run(listener, Some(Arc::clone(&room)), links)?;
    // It serves until Ctrl-C or SIGTERM: an interrupted command, exit 130.
    Ok(Ended::Interrupted)
}
