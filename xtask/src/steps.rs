//! Saying what is happening, and running commands that say what failed.

use std::process::Command;
use std::time::Instant;

/// Numbered progress lines: "[2/5] trunk 0.21.14 ... installed (14m 3s)".
pub struct Steps {
    total: usize,
    current: usize,
    started: Instant,
}

impl Steps {
    pub fn new(total: usize) -> Steps {
        Steps { total, current: 0, started: Instant::now() }
    }

    pub fn start(&mut self, what: &str) {
        self.current += 1;
        self.started = Instant::now();
        println!("[{}/{}] {what}", self.current, self.total.max(self.current));
    }

    pub fn note(&self, text: &str) {
        println!("      {text}");
    }

    pub fn done(&self, result: &str) {
        println!("      {result} ({})", elapsed(self.started));
    }
}

fn elapsed(since: Instant) -> String {
    let secs = since.elapsed().as_secs();
    if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else {
        format!("{:.1}s", since.elapsed().as_secs_f64())
    }
}

pub trait RunExt {
    /// Runs to completion with inherited output; an error names the command.
    fn run(&mut self) -> Result<(), String>;
    /// Runs and returns stdout, or `None` if the program is missing or fails.
    fn output_text(&mut self) -> Option<String>;
    /// Runs silently; true if it ran and succeeded.
    fn run_quietly(&mut self) -> bool;
}

impl RunExt for Command {
    fn run(&mut self) -> Result<(), String> {
        let shown = shown(self);
        let status = self.status().map_err(|e| format!("could not start `{shown}`: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("`{shown}` failed ({status}); its output is above"))
        }
    }

    fn output_text(&mut self) -> Option<String> {
        let output = self.output().ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn run_quietly(&mut self) -> bool {
        self.output().is_ok_and(|output| output.status.success())
    }
}

/// A command as a person would type it, for messages: "cargo build --release".
pub fn shown(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}
