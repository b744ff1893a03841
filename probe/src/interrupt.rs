//! Ctrl-C for headless runs: the first one asks the run to stop cleanly (the session file is
//! finished and the run marked interrupted); a second one ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // SAFETY: signal() is async-signal-safe; restoring the default makes a second Ctrl-C end the
    // process if the run does not stop.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

/// Installs the handler and returns the flag it sets.
pub fn install() -> &'static AtomicBool {
    let handler = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic and calls signal(), both async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
    }
    &INTERRUPTED
}
