//! `ackscope record-lesson FILE... --out DIR`: records every step of each lesson that runs
//! something, with this probe, as the session files the web app plays when no probe is there
//! (docs/LESSONS.md). `cargo xtask record-lessons` calls it for the lessons of the repository.
//!
//! Each step is recorded by running `ackscope run PRESET [--count N] -o DIR/ID-K.ackscope` as a
//! child process: exactly what a person would type, and a fresh process per step (the emulated
//! link needs a single-threaded process to enter its namespace).

use std::path::{Path, PathBuf};
use std::process::Command;

use ackscope_shared::lesson::{self, MAX_LESSON_BYTES};

use super::{Ended, Failure};

#[derive(Debug, clap::Args)]
pub struct RecordLessonArgs {
    /// Lesson files (lessons/*.lesson)
    #[arg(required = true, value_name = "FILE")]
    lessons: Vec<PathBuf>,
    /// Where the recordings go: one ID-STEP.ackscope per step that runs something
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn record(args: &RecordLessonArgs) -> Result<Ended, Failure> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    // Every lesson is read first: a mistake in the last one should not cost the others' runs.
    let lessons = args.lessons.iter().map(|path| read(path)).collect::<Result<Vec<_>, _>>()?;
    for lesson in &lessons {
        for (index, step) in lesson.steps.iter().enumerate() {
            let Some(run) = &step.run else { continue };
            let out = args.out.join(format!("{}-{}.ackscope", lesson.id, index + 1));
            let mut command = Command::new(&exe);
            command.args(["run", &run.preset]);
            if let Some(requests) = run.requests {
                command.args(["--count", &requests.to_string()]);
            }
            command.arg("-o").arg(&out).stdout(std::process::Stdio::null());
            eprintln!("{} step {} ({}): {}", lesson.id, index + 1, run.preset, out.display());
            let status =
                command.status().map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
            if !status.success() {
                return Err(Failure::Run(format!(
                    "{} step {}: `ackscope run {}` failed ({status}); its message is above",
                    lesson.id,
                    index + 1,
                    run.preset
                )));
            }
        }
    }
    Ok(Ended::Ok)
}

fn read(path: &Path) -> Result<lesson::Lesson, Failure> {
    let usage = |message: String| Failure::Usage(message);
    let id = path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_suffix(".lesson"))
        .ok_or_else(|| {
            usage(format!("{}: a lesson file's name ends in .lesson", path.display()))
        })?;
    let size =
        std::fs::metadata(path).map_err(|e| usage(format!("{}: {e}", path.display())))?.len();
    if size > MAX_LESSON_BYTES as u64 {
        return Err(usage(format!("{}: {size} bytes is too large for a lesson", path.display())));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    lesson::parse(id, &text).map_err(|e| usage(e.to_string()))
}
