//! Ctrl-C and SIGTERM for headless commands. SIGTERM is what `kill` and service managers send,
//! so it is treated as Ctrl-C: the first one asks the command to stop cleanly (the session file
//! is finished and the run marked interrupted); a second one of the same signal ends the
//! process at once.
//!
//! A clean stop can itself block: a write to a FIFO whose reader stopped reading never returns,
//! and Rust's `write_all` retries an interrupted write. So the first signal also wakes a
//! watchdog thread that ends the process [`FINISH_WITHIN`] later if it is still running, saying
//! that the file may be incomplete: ackscope promises to end within 2 s of Ctrl-C under any
//! load.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Once;
use std::time::Duration;

/// How long a stop may take before the watchdog ends the process: under the 2 s promise with
/// room for the exit itself.
pub const FINISH_WITHIN: Duration = Duration::from_millis(1700);

/// The signals handled as Ctrl-C.
const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The first of [`SIGNALS`] that came; 0 before.
static FIRST_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The write end of the pipe that wakes the watchdog; -1 until [`install`] made it.
static WAKE_WATCHDOG: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    let _ = FIRST_SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
    let wake = WAKE_WATCHDOG.load(Ordering::SeqCst);
    // SAFETY: write() and signal() are async-signal-safe; the byte is on this stack. Restoring
    // the default makes a second one of this signal end the process if the stop does not.
    unsafe {
        if wake >= 0 {
            libc::write(wake, [1u8].as_ptr().cast(), 1);
        }
        libc::signal(signal, libc::SIG_DFL);
    }
}

/// Whether Ctrl-C or SIGTERM came (after [`install`]): a stop that waits on another host
/// waits less, to finish before [`FINISH_WITHIN`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Which signal interrupted the command (SIGINT or SIGTERM), once one did: `watch -- COMMAND`
/// passes it on to the command it started.
pub fn signal() -> Option<libc::c_int> {
    Some(FIRST_SIGNAL.load(Ordering::SeqCst)).filter(|&signal| signal != 0)
}

/// Installs the handlers (once per process) and returns the flag they set.
pub fn install() -> &'static AtomicBool {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        start_watchdog();
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for signal in SIGNALS {
            // SAFETY: the handler only stores to atomics and calls write() and signal(), all
            // async-signal-safe.
            unsafe {
                libc::signal(signal, handler);
            }
        }
    });
    &INTERRUPTED
}

/// A thread that waits, blocked on a pipe, for the first signal, then gives the command
/// [`FINISH_WITHIN`] to end on its own. Without a pipe (no descriptors left) there is no
/// watchdog, and a blocked stop waits for a second signal as before.
fn start_watchdog() {
    let mut ends = [-1; 2];
    // SAFETY: `ends` has room for the two descriptors pipe2() writes.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    let [read_end, write_end] = ends;
    let started = std::thread::Builder::new().name("interrupt-watchdog".into()).spawn(move || {
        let mut byte = 0u8;
        loop {
            // SAFETY: reads at most one byte into `byte`.
            let read = unsafe { libc::read(read_end, (&raw mut byte).cast(), 1) };
            if read == 1 {
                break;
            }
            if read == 0
                || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
            {
                return;
            }
        }
        std::thread::sleep(FINISH_WITHIN);
        let message = format!(
            "\nackscope: still stopping {:.1} s after the interrupt (is whoever reads the \
             output still reading?); ended at once: the session file may be incomplete\n",
            FINISH_WITHIN.as_secs_f64()
        );
        // SAFETY: raw write(2) and _exit(2): no lock is taken that a blocked thread may hold
        // (stdout's or stderr's), and no destructor or buffer flush can block the exit.
        unsafe {
            libc::write(2, message.as_ptr().cast(), message.len());
            libc::_exit(130);
        }
    });
    match started {
        Ok(_) => WAKE_WATCHDOG.store(write_end, Ordering::SeqCst),
        // SAFETY: both ends are ours and used by nothing else.
        Err(_) => unsafe {
            libc::close(read_end);
            libc::close(write_end);
        },
    }
}
