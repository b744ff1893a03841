//! `ackscope record-lesson FILE... --out DIR`: records every step of each lesson that runs
//! something, with this probe, as the session files the web app plays when no probe is there
//! (docs/LESSONS.md). `cargo xtask record-lessons` calls it for the lessons of the repository.
//!
//! `ackscope lesson check FILE...`: reads each lesson as the page does, then reads each step's
//! recording (`recordings/ID-K.ackscope` beside the lesson) through the same reducer as `show`,
//! and holds its figures to the lesson's claims (`expect:`).
//!
//! Each step is recorded by running `ackscope run PRESET [--count N] -o DIR/ID-K.ackscope` as a
//! child process: exactly what a person would type, and a fresh process per step (the emulated
//! link needs a single-threaded process to enter its namespace).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use ackscope_shared::lesson::{self, recording_name, RunWhat, MAX_LESSON_BYTES};
use ackscope_shared::reduce::{Output, SessionReducer};
use ackscope_shared::report::RunReport;
use ackscope_shared::Scenario;

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

#[derive(Debug, clap::Subcommand)]
pub enum LessonCommand {
    /// Check lessons before class: every key known, one right choice a question, every step
    /// runnable or recorded, and each recording's figures keeping the lesson's claims
    /// (`expect:`); each problem with its file and line, exit status 2
    Check {
        /// Lesson files (lessons/*.lesson); recordings are looked for in recordings/ beside them
        #[arg(required = true, value_name = "FILE")]
        lessons: Vec<PathBuf>,
    },
}

pub fn lesson(command: &LessonCommand) -> Result<Ended, Failure> {
    match command {
        LessonCommand::Check { lessons } => check(lessons),
    }
}

/// `lesson check`: every file is checked, each problem is printed, and the exit status says
/// whether there was any.
fn check(paths: &[PathBuf]) -> Result<Ended, Failure> {
    let mut problems = 0;
    for path in paths {
        let mut out = Printable::terminal(std::io::stdout().lock());
        let mut err = Printable::terminal(std::io::stderr().lock());
        match check_one(path) {
            Ok(held) => {
                let _ = writeln!(out, "{}: ok ({held})", path.display());
            }
            Err(found) => {
                problems += found.len();
                for problem in found {
                    let _ = writeln!(err, "{problem}");
                }
            }
        }
    }
    match problems {
        0 => Ok(Ended::Ok),
        n => Err(Failure::Usage(format!(
            "{n} problem{} in the lessons above: fix each at its line, then check again",
            if n == 1 { "" } else { "s" }
        ))),
    }
}

/// One lesson's problems, each `FILE line N: what, and what would be right`; else what held.
fn check_one(path: &Path) -> Result<String, Vec<String>> {
    let lesson = read(path).map_err(|failure| match failure {
        Failure::Usage(message) | Failure::Run(message) => vec![message],
    })?;
    let at = |line: usize, problem: String| format!("{} line {line}: {problem}", path.display());
    let recordings = path.parent().unwrap_or(Path::new(".")).join("recordings");
    let (mut problems, mut recorded, mut held) = (Vec::new(), 0, 0);
    for (index, step) in lesson.steps.iter().enumerate() {
        let Some(run) = &step.run else { continue };
        let k = index + 1;
        let file = recordings.join(recording_name(&lesson.id, index));
        if !file.is_file() {
            if let Some(claim) = step.expect.first() {
                problems.push(at(
                    claim.line,
                    format!(
                        "step {k} claims `{claim}`, but has no recording to check it against \
                         ({}): record it with `ackscope record-lesson {} --out {}`",
                        file.display(),
                        path.display(),
                        recordings.display()
                    ),
                ));
            }
            continue;
        }
        recorded += 1;
        let (scenario, report) = match first_report(&file) {
            Ok(found) => found,
            Err(problem) => {
                problems.push(at(step.line, format!("step {k}'s recording: {problem}")));
                continue;
            }
        };
        if Some(&scenario) != run.scenario().as_ref() {
            problems.push(at(
                step.line,
                format!(
                    "step {k}'s recording ({}) ran another experiment than the step's `{}`: \
                     record it again with `ackscope record-lesson {} --out {}`",
                    file.display(),
                    run.name(),
                    path.display(),
                    recordings.display()
                ),
            ));
            continue;
        }
        for claim in &step.expect {
            match claim.check(&report) {
                Ok(_) => held += 1,
                Err(shows) => problems.push(at(
                    claim.line,
                    format!("step {k} claims `{claim}`: {shows}; change the claim or the step"),
                )),
            }
        }
    }
    match problems.is_empty() {
        true => Ok(format!(
            "{} steps, {recorded} recordings, {held} claims held by them",
            lesson.steps.len()
        )),
        false => Err(problems),
    }
}

/// The first run of a session file: the experiment it ran and its report, as `show` makes it.
fn first_report(file: &Path) -> Result<(Scenario, RunReport), String> {
    let mut reader = crate::record::SessionReader::open(file)?;
    let mut reducer = SessionReducer::new();
    let (mut steps, mut error) = (Vec::new(), None);
    let first = loop {
        let more = reader
            .with_next_into(&mut error, |message| reducer.handle(message, &mut steps))
            .is_some();
        if !more {
            reducer.finish(&mut steps);
        }
        match ended_run(&mut steps) {
            Some(found) => break Some(found),
            None if !more => break None,
            None => {}
        }
    };
    if let Some(error) = error {
        return Err(format!("{error}"));
    }
    first.ok_or_else(|| "the file holds no run".to_string())
}

/// The first run `steps` says ended, with its report.
fn ended_run(steps: &mut Vec<Output>) -> Option<(Scenario, RunReport)> {
    steps.drain(..).find_map(|step| match step {
        Output::Ended(run, _) => {
            let report = RunReport::of_file_run(&run);
            Some((run.scenario, report))
        }
        _ => None,
    })
}

/// A lesson's id: its file name without `.lesson`.
fn lesson_id(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()?.strip_suffix(".lesson")
}

fn read(path: &Path) -> Result<lesson::Lesson, Failure> {
    let usage = |message: String| Failure::Usage(message);
    let id = lesson_id(path).ok_or_else(|| {
        usage(format!("{}: a lesson file's name ends in .lesson", path.display()))
    })?;
    let size =
        std::fs::metadata(path).map_err(|e| usage(format!("{}: {e}", path.display())))?.len();
    if size > MAX_LESSON_BYTES as u64 {
        return Err(usage(format!("{}: {size} bytes is too large for a lesson", path.display())));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    // Named by the path it was given, not by its id: the file a teacher opens to fix.
    let file = path.display().to_string();
    lesson::parse(id, &text).map_err(|e| usage(lesson::LessonError { file, ..e }.to_string()))
}
