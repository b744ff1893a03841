//! `ackscope record-lesson FILE... --out DIR`: records every step of each lesson that runs
//! something, with this probe, as the session files the web app plays when no probe is there
//! (docs/LESSONS.md). `cargo xtask record-lessons` calls it for the lessons of the repository.
//!
//! Each step is recorded by running `ackscope run PRESET [--count N] -o DIR/ID-K.ackscope` as a
//! child process: exactly what a person would type, and a fresh process per step (the emulated
//! link needs a single-threaded process to enter its namespace).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use ackscope_shared::lesson::{self, RunWhat, MAX_LESSON_BYTES};

use super::terminal::Printable;
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
        remove_stale(&args.out, lesson)?;
        for (index, step) in lesson.steps.iter().enumerate() {
            let Some(run) = &step.run else { continue };
            let out = args.out.join(recording_name(&lesson.id, index));
            let mut command = Command::new(&exe);
            let mut spec_file = None;
            match &run.what {
                RunWhat::Preset(name) => _ = command.args(["run", name]),
                RunWhat::Spec(spec) => {
                    // The spec as the file `ackscope run --spec` reads, beside the recording.
                    let path = out.with_extension("spec.json");
                    let json = serde_json::to_string_pretty(&**spec)
                        .map_err(|e| format!("{} step {}: {e}", lesson.id, index + 1))?;
                    std::fs::write(&path, json)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    command.arg("run").arg("--spec").arg(&path);
                    spec_file = Some(path);
                }
            }
            if let Some(requests) = run.requests {
                command.args(["--count", &requests.to_string()]);
            }
            command.arg("-o").arg(&out).stdout(std::process::Stdio::null());
            // Paths and lesson names printed as data.
            let _ = writeln!(
                Printable::terminal(std::io::stderr().lock()),
                "{} step {} ({}): {}",
                lesson.id,
                index + 1,
                run.name(),
                out.display()
            );
            let status = command.status();
            if let Some(path) = spec_file {
                let _ = std::fs::remove_file(path);
            }
            let status = status.map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
            if !status.success() {
                return Err(Failure::Run(format!(
                    "{} step {}: `ackscope run {}` failed ({status}); its message is above",
                    lesson.id,
                    index + 1,
                    run.name()
                )));
            }
        }
    }
    Ok(Ended::Ok)
}

/// The recording of step `index` (from 0) of lesson `id`, as the web app looks for it.
fn recording_name(id: &str, index: usize) -> String {
    format!("{id}-{}.ackscope", index + 1)
}

/// Removes the recordings of `lesson` in `dir` that no step of it makes any more (a step taken
/// out, or one that no longer runs anything): otherwise they would be bundled with the app and
/// played for a step they are not of.
fn remove_stale(dir: &Path, lesson: &lesson::Lesson) -> Result<(), Failure> {
    let wanted: Vec<String> = (lesson.steps.iter().enumerate())
        .filter(|(_, step)| step.run.is_some())
        .map(|(index, _)| recording_name(&lesson.id, index))
        .collect();
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let step = name
            .strip_prefix(&format!("{}-", lesson.id))
            .and_then(|rest| rest.strip_suffix(".ackscope"))
            .is_some_and(|number| number.parse::<usize>().is_ok());
        if step && !wanted.contains(&name) {
            let path = entry.path();
            std::fs::remove_file(&path)
                .map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
            let _ = writeln!(
                Printable::terminal(std::io::stderr().lock()),
                "{}: no step records this any more; removed",
                path.display()
            );
        }
    }
    Ok(())
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
