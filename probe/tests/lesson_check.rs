//! `ackscope lesson check` with the real binary: every lesson of the repository holds against
//! its recordings, and a lesson with a mistake (a second right choice, an unknown key, a claim
//! with no recording, a claim its recording does not keep, a recording of another experiment)
//! is refused with its file and line, exit status 2.

use std::path::{Path, PathBuf};

mod common;

use common::{ackscope, s, temp_folder, text};

fn lessons() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../lessons")
}

#[test]
fn every_lesson_of_the_repository_holds_against_its_recordings() {
    let mut files: Vec<String> = std::fs::read_dir(lessons())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "lesson"))
        .map(|path| path.to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(files.len() >= 4, "the stories' lessons: {files:?}");
    let mut args = vec!["lesson", "check"];
    args.extend(files.iter().map(String::as_str));
    let checked = ackscope(&args);
    let said = text(&checked.stdout);
    assert_eq!(checked.status.code(), Some(0), "{said}{}", text(&checked.stderr));
    for file in &files {
        assert!(said.contains(&format!("{file}: ok (")), "{file}: {said}");
    }
    assert!(said.contains("9 claims held"), "forty-ms's claims were checked: {said}");
}

/// `lesson check FILE` of a lesson written to `dir`, as `name`: its exit status and what it
/// printed on standard error.
fn check(dir: &Path, name: &str, lesson: &str) -> (Option<i32>, String) {
    let file = dir.join(name);
    std::fs::write(&file, lesson).unwrap();
    let checked = ackscope(&["lesson", "check", s(&file)]);
    (checked.status.code(), text(&checked.stderr))
}

#[test]
fn a_lesson_with_a_mistake_is_refused_at_its_line() {
    let dir = temp_folder("lesson-check");
    let question = "ask: How long?\nchoice: short\n";
    for (lesson, line, says) in [
        (
            format!("lesson: T\nstep: one\n{question}choice*: long\nchoice*: longer\n"),
            6,
            "a second `choice*:`",
        ),
        ("lesson: T\nstep: one\nrun: story1\nwhat: x\n".to_string(), 4, "unknown key \"what\""),
        (
            "lesson: T\nstep: one\nrun: story1\nexpect: p50_ms > 80\n".to_string(),
            4,
            "has no recording",
        ),
        ("lesson: T\nstep: one\nexpect: p50_ms > 80\n".to_string(), 3, "put it after `run:`"),
        (
            "lesson: T\nstep: one\nrun: story1\nexpect: p50 > 80\n".to_string(),
            4,
            "no figure \"p50\"",
        ),
    ] {
        let (status, said) = check(&dir, "mistake.lesson", &lesson);
        assert_eq!(status, Some(2), "{said}");
        let at = format!("mistake.lesson line {line}: ");
        assert!(said.contains(&at) && said.contains(says), "{at} {says}: {said}");
    }
}

/// Story 1's first step with its real recording: its claim as written holds; claimed otherwise,
/// the recording's figure is named; and a step that now runs another experiment than its
/// recording is told to record it again.
#[test]
fn claims_are_held_to_the_recordings_figures() {
    let dir = temp_folder("lesson-claims");
    std::fs::create_dir(dir.join("recordings")).unwrap();
    std::fs::copy(
        lessons().join("recordings/forty-ms-1.ackscope"),
        dir.join("recordings/forty-ms-1.ackscope"),
    )
    .unwrap();
    let step = |run: &str, claim: &str| {
        format!("lesson: Story 1\nstep: Nagle on both sides\nrun: {run}\nrequests: 20\nexpect: {claim}\n")
    };
    let (status, said) = check(&dir, "forty-ms.lesson", &step("story1", "p50_ms > 80"));
    assert_eq!(status, Some(0), "{said}");

    let (status, said) = check(&dir, "forty-ms.lesson", &step("story1", "p50_ms < 5"));
    assert_eq!(status, Some(2));
    assert!(said.contains("forty-ms.lesson line 5: step 1 claims `p50_ms < 5`"), "{said}");
    assert!(said.contains("the recording shows p50_ms 8"), "about 88 ms: {said}");

    let (status, said) =
        check(&dir, "forty-ms.lesson", &step("story1", "stalls nagle_delayed_ack = 0"));
    assert_eq!(status, Some(2), "story 1 stalls: {said}");
    assert!(said.contains("the recording shows stalls nagle_delayed_ack 38.00"), "{said}");

    let (status, said) = check(&dir, "forty-ms.lesson", &step("story1-nodelay", "p50_ms < 5"));
    assert_eq!(status, Some(2));
    assert!(said.contains("ran another experiment than the step's `story1-nodelay`"), "{said}");
    assert!(said.contains("record it again"), "{said}");
}
