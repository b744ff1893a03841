//! Lessons: a story told step by step, as data (docs/LESSONS.md has the format).
//!
//! A lesson file is plain text, one `key: value` per line, so a teacher can write one in any
//! editor and review it in a diff. Each step says what to tell, what to run (a preset), what to
//! look at, and optionally a question the class answers before the kernel's answer is shown.
//! The parser is strict: an unknown key, a preset that does not exist or a question without a
//! right answer is an error naming the line and saying what would be right.

mod claim;

pub use claim::{Bound, Claim, Figure};

use crate::attribution::StallClass;
use crate::presets;
use crate::spec::Scenario;
use crate::Side;

/// Lesson files larger than this are not lessons (the longest is a few kilobytes).
pub const MAX_LESSON_BYTES: usize = 64 * 1024;
/// More steps than this is several lessons.
pub const MAX_STEPS: usize = 40;
/// Choices of one question.
pub const MAX_CHOICES: usize = 6;

#[derive(Clone, Debug, PartialEq)]
pub struct Lesson {
    /// The file's name without `.lesson`: names its recordings and its links.
    pub id: String,
    pub title: String,
    pub about: String,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    pub title: String,
    /// The line of its `step:`, from 1, for what is said about the step.
    pub line: usize,
    /// Paragraphs of narrative.
    pub text: Vec<String>,
    /// The preset this step runs, if it runs one, with its request count changed if the lesson
    /// says so.
    pub run: Option<Run>,
    /// What to look at once the run is shown.
    pub look: Vec<Look>,
    pub question: Option<Question>,
    /// What the step's run shows, as figures its recording is checked against
    /// (`ackscope lesson check`).
    pub expect: Vec<Claim>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub what: RunWhat,
    /// For request/response runs: run this many requests instead of the preset's or spec's.
    pub requests: Option<u32>,
}

/// What a step runs: a preset by name (`run: story1`), or a whole scenario spec
/// (`spec: {...}`, the JSON `ackscope run ... --print-spec` prints, on one line).
#[derive(Clone, Debug, PartialEq)]
pub enum RunWhat {
    Preset(String),
    Spec(Box<Scenario>),
}

impl Run {
    /// The preset's name, or `spec` for a step that gives its own.
    pub fn name(&self) -> &str {
        match &self.what {
            RunWhat::Preset(name) => name,
            RunWhat::Spec(_) => "spec",
        }
    }

    /// The scenario to run: the preset's or the spec, with the lesson's changes.
    pub fn scenario(&self) -> Option<Scenario> {
        let mut scenario = match &self.what {
            RunWhat::Preset(name) => (presets::find(name)?.build)(),
            RunWhat::Spec(spec) => (**spec).clone(),
        };
        if let (Scenario::Rr(spec), Some(requests)) = (&mut scenario, self.requests) {
            spec.requests = requests;
        }
        Some(scenario)
    }
}

/// Something a step points at.
#[derive(Clone, Debug, PartialEq)]
pub enum Look {
    /// One request, by id (from 0): selected, its ladder shown.
    Request(u32),
    /// Only the requests with a stall of this class.
    Class(StallClass),
    /// The run-clock view, with this connection's side in view.
    Lane { conn: u32, side: Side },
    /// The time window `from_ns .. to_ns` of the aligned view.
    Range { from_ns: u64, to_ns: u64 },
}

/// A predict-then-reveal question: students choose before the run is shown.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub ask: String,
    pub choices: Vec<String>,
    /// Index into `choices`.
    pub answer: usize,
    /// Said once the answer is revealed, beside the run's own numbers.
    pub reveal: String,
}

/// A problem with a lesson file, at a line (from 1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file} line {line}: {problem}")]
pub struct LessonError {
    pub file: String,
    pub line: usize,
    pub problem: String,
}

/// `(id, text)` of each lesson ackscope carries, in the order of the stories: every file of
/// `lessons/` at the repository's root, compiled in (the page plays them with no probe; `class
/// --lesson ID` opens a room on one). A test of the web crate checks that this is every file.
pub const BUNDLED: [(&str, &str); 8] = [
    ("forty-ms", include_str!("../../lessons/forty-ms.lesson")),
    ("reconnect", include_str!("../../lessons/reconnect.lesson")),
    ("split-writes", include_str!("../../lessons/split-writes.lesson")),
    ("buffers", include_str!("../../lessons/buffers.lesson")),
    ("loss", include_str!("../../lessons/loss.lesson")),
    ("slow-start", include_str!("../../lessons/slow-start.lesson")),
    ("bbr", include_str!("../../lessons/bbr.lesson")),
    ("slow-reader", include_str!("../../lessons/slow-reader.lesson")),
];

/// The recording of step `index` (from 0) of lesson `id`: the file `record-lesson` writes and
/// the page plays, in `lessons/recordings/`.
pub fn recording_name(id: &str, index: usize) -> String {
    format!("{id}-{}.ackscope", index + 1)
}

/// Parses a lesson file named `id` (its file name without `.lesson`).
pub fn parse(id: &str, text: &str) -> Result<Lesson, LessonError> {
    let file = format!("{id}.lesson");
    let fail = |line: usize, problem: String| LessonError { file: file.clone(), line, problem };
    if text.len() > MAX_LESSON_BYTES {
        return Err(fail(
            0,
            format!("{} bytes is over the {MAX_LESSON_BYTES}-byte limit for a lesson", text.len()),
        ));
    }
    let mut lesson = Lesson {
        id: id.to_string(),
        title: String::new(),
        about: String::new(),
        steps: Vec::new(),
    };
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(fail(line, format!("expected `key: value`, found {trimmed:?}")));
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "lesson" if lesson.title.is_empty() && lesson.steps.is_empty() => {
                lesson.title = value.to_string();
                continue;
            }
            "lesson" => {
                return Err(fail(line, "a file holds one lesson: one `lesson:` line".into()))
            }
            "about" if lesson.steps.is_empty() => {
                join(&mut lesson.about, value);
                continue;
            }
            "about" => {
                return Err(fail(
                    line,
                    "`about:` describes the lesson: put it before the first step".into(),
                ))
            }
            "step" => {
                if lesson.title.is_empty() {
                    return Err(fail(line, "the file starts with `lesson: TITLE`".into()));
                }
                if lesson.steps.len() == MAX_STEPS {
                    return Err(fail(
                        line,
                        format!("more than {MAX_STEPS} steps: split the lesson"),
                    ));
                }
                lesson.steps.push(Step { title: value.to_string(), line, ..Step::default() });
                continue;
            }
            "text" | "run" | "spec" | "requests" | "look" | "ask" | "choice" | "choice*"
            | "reveal" | "expect" => {}
            _ => {
                return Err(fail(
                    line,
                    format!(
                        "unknown key {key:?}; a lesson has lesson, about, step, text, run, \
                         spec, requests, look, ask, choice, choice*, reveal, expect"
                    ),
                ))
            }
        }
        let Some(step) = lesson.steps.last_mut() else {
            return Err(fail(
                line,
                format!("`{key}:` belongs to a step: start one with `step: TITLE`"),
            ));
        };
        match key {
            // Lines join into a paragraph; an empty `text:` ends it.
            "text" => match step.text.last_mut() {
                Some(paragraph) if !value.is_empty() => join(paragraph, value),
                _ => step.text.push(value.to_string()),
            },
            "run" => {
                if presets::find(value).is_none() {
                    let names: Vec<&str> = presets::PRESETS.iter().map(|p| p.name).collect();
                    return Err(fail(
                        line,
                        format!("no preset {value:?}; the presets are {}", names.join(", ")),
                    ));
                }
                step.run = Some(Run { what: RunWhat::Preset(value.to_string()), requests: None });
            }
            "spec" => {
                let how = "give the JSON `ackscope run PRESET --print-spec` prints, on one line";
                let spec: Scenario = serde_json::from_str(value)
                    .map_err(|e| fail(line, format!("not a spec ({e}); {how}")))?;
                spec.validate().map_err(|e| fail(line, format!("{e}")))?;
                if matches!(spec, Scenario::Server(_) | Scenario::Import(_)) {
                    return Err(fail(line, "a step runs an rr or a bulk spec".into()));
                }
                step.run = Some(Run { what: RunWhat::Spec(Box::new(spec)), requests: None });
            }
            "requests" => {
                let Some(run) = step.run.as_mut() else {
                    return Err(fail(
                        line,
                        "`requests:` changes a `run:`: put it after one".into(),
                    ));
                };
                let count: u32 =
                    value.parse().ok().filter(|n| (1..=100_000).contains(n)).ok_or_else(|| {
                        fail(
                            line,
                            format!("requests must be a number from 1 to 100000, not {value:?}"),
                        )
                    })?;
                run.requests = Some(count);
            }
            "look" => step.look.push(look(value).map_err(|p| fail(line, p))?),
            "expect" => {
                if step.run.is_none() {
                    return Err(fail(
                        line,
                        "`expect:` says what the step's run shows: put it after `run:` or \
                         `spec:`"
                            .into(),
                    ));
                }
                step.expect.push(Claim::parse(value, line).map_err(|p| fail(line, p))?);
            }
            "ask" => {
                step.question = Some(Question {
                    ask: value.to_string(),
                    choices: Vec::new(),
                    answer: usize::MAX,
                    reveal: String::new(),
                })
            }
            "reveal" => {
                let Some(question) = step.question.as_mut() else {
                    return Err(fail(
                        line,
                        "`reveal:` explains a question's answer: put `ask:` first".into(),
                    ));
                };
                join(&mut question.reveal, value);
            }
            _ => {
                // choice or choice*
                let Some(question) = step.question.as_mut() else {
                    return Err(fail(
                        line,
                        "a choice belongs to a question: put `ask:` first".into(),
                    ));
                };
                if question.choices.len() == MAX_CHOICES {
                    return Err(fail(line, format!("more than {MAX_CHOICES} choices")));
                }
                if key == "choice*" {
                    if question.answer != usize::MAX {
                        return Err(fail(
                            line,
                            "a second `choice*:`: one choice is the answer".into(),
                        ));
                    }
                    question.answer = question.choices.len();
                }
                question.choices.push(value.to_string());
            }
        }
    }
    if lesson.title.is_empty() {
        return Err(fail(1, "the file starts with `lesson: TITLE`".into()));
    }
    if lesson.steps.is_empty() {
        return Err(fail(1, "a lesson has at least one `step:`".into()));
    }
    for step in &mut lesson.steps {
        let line = step.line;
        step.text.retain(|paragraph| !paragraph.is_empty());
        if let Some(question) = &step.question {
            if question.choices.len() < 2 || question.answer == usize::MAX {
                return Err(fail(
                    line,
                    format!(
                        "step {:?}: a question has at least two `choice:` lines, one of them \
                         `choice*:` (the answer)",
                        step.title
                    ),
                ));
            }
        }
    }
    Ok(lesson)
}

fn join(into: &mut String, more: &str) {
    if !into.is_empty() && !more.is_empty() {
        into.push(' ');
    }
    into.push_str(more);
}

/// `request 3`, `class nagle_delayed_ack`, `lane 0 server`, `range 0ms 100ms`.
fn look(value: &str) -> Result<Look, String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    let usage =
        "look: request N | class CODE | lane CONN client|server | range FROM TO (e.g. 0ms 90ms)";
    match words.as_slice() {
        ["request", n] => n
            .parse()
            .map(Look::Request)
            .map_err(|_| format!("{n:?} is not a request number; {usage}")),
        ["class", code] => StallClass::ALL
            .iter()
            .find(|class| class.code() == *code)
            .map(|&class| Look::Class(class))
            .ok_or_else(|| {
                let codes: Vec<&str> = StallClass::ALL.iter().map(|c| c.code()).collect();
                format!("no stall class {code:?}; the classes are {}", codes.join(", "))
            }),
        ["lane", conn, side] => {
            let conn = conn
                .parse()
                .map_err(|_| format!("{conn:?} is not a connection number; {usage}"))?;
            let side = match *side {
                "client" => Side::Client,
                "server" => Side::Server,
                other => {
                    return Err(format!("{other:?} is not a side (client or server); {usage}"))
                }
            };
            Ok(Look::Lane { conn, side })
        }
        ["range", from, to] => {
            let (from_ns, to_ns) = (duration_ns(from)?, duration_ns(to)?);
            if to_ns <= from_ns {
                return Err(format!("the range ends ({to}) before it starts ({from})"));
            }
            Ok(Look::Range { from_ns, to_ns })
        }
        _ => Err(format!("cannot read {value:?}; {usage}")),
    }
}

/// `90ms`, `250us`, `2s`.
fn duration_ns(text: &str) -> Result<u64, String> {
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        _ => return Err(format!("{text:?} has no unit: write it like 90ms, 250us or 2s")),
    };
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 90ms"))?;
    if !(0.0..=3600e9).contains(&(value * scale)) {
        return Err(format!("{text:?} is not a duration within an hour"));
    }
    Ok((value * scale) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
# a comment
lesson: The 40 ms
about: Why a small write waits.

step: Nagle on both sides
text: The client writes the length,
text: then the body.
text:
text: A second paragraph.
run: story1
requests: 20
look: class nagle_delayed_ack
look: request 3
look: range 0ms 90ms
ask: How long does each request take?
choice: about 0.1 ms
choice*: about 88 ms
reveal: Two delayed ACKs of about 44 ms.

step: The end
text: That is all.
";

    #[test]
    fn a_lesson_reads_into_its_steps() {
        let lesson = parse("forty", GOOD).unwrap();
        assert_eq!(lesson.title, "The 40 ms");
        assert_eq!(lesson.about, "Why a small write waits.");
        assert_eq!(lesson.steps.len(), 2);
        let step = &lesson.steps[0];
        assert_eq!(
            step.text,
            ["The client writes the length, then the body.", "A second paragraph."]
        );
        let run = step.run.as_ref().unwrap();
        assert_eq!((run.what.clone(), run.requests), (RunWhat::Preset("story1".into()), Some(20)));
        match run.scenario() {
            Some(Scenario::Rr(spec)) => assert_eq!(spec.requests, 20),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            step.look,
            [
                Look::Class(StallClass::NagleDelayedAck),
                Look::Request(3),
                Look::Range { from_ns: 0, to_ns: 90_000_000 }
            ]
        );
        let question = step.question.as_ref().unwrap();
        assert_eq!(question.choices.len(), 2);
        assert_eq!(question.answer, 1);
        assert_eq!(question.reveal, "Two delayed ACKs of about 44 ms.");
        assert_eq!(lesson.steps[1].run, None);
    }

    #[test]
    fn a_step_can_run_a_whole_spec() {
        // What `ackscope run story1 --nodelay client --print-spec` prints, on one line.
        let mut spec = crate::spec::RrSpec::default();
        spec.nodelay.client = true;
        let json = serde_json::to_string(&Scenario::Rr(spec.clone())).unwrap();
        let text = format!("lesson: x\nstep: a\nspec: {json}\nrequests: 7\n");
        let run = parse("x", &text).unwrap().steps[0].run.clone().unwrap();
        assert_eq!(run.name(), "spec");
        spec.requests = 7;
        assert_eq!(run.scenario(), Some(Scenario::Rr(spec.clone())));
        // A spec the command line would refuse is refused here, by its field.
        spec.requests = 0;
        let json = serde_json::to_string(&Scenario::Rr(spec)).unwrap();
        let error = parse("x", &format!("lesson: x\nstep: a\nspec: {json}\n")).unwrap_err();
        assert!(error.to_string().contains("requests"), "{error}");
    }

    #[test]
    fn mistakes_name_the_line_and_what_would_be_right() {
        let cases = [
            (
                "lesson: x\nstep: a\nrun: story9\n",
                3,
                "no preset \"story9\"; the presets are story1",
            ),
            ("lesson: x\nstep: a\nlook: class nagle\n", 3, "the classes are nagle_delayed_ack"),
            ("lesson: x\nstep: a\nrequests: 5\n", 3, "put it after one"),
            ("lesson: x\ntext: hi\n", 2, "belongs to a step"),
            ("lesson: x\nstep: a\ncolour: red\n", 3, "unknown key \"colour\""),
            (
                "lesson: x\nstep: a\nask: why?\nchoice: this\nchoice: that\n",
                2,
                "one of them `choice*:`",
            ),
            ("lesson: x\nstep: a\nlook: range 9ms 1ms\n", 3, "ends (1ms) before it starts"),
            ("lesson: x\nstep: a\nlook: range 9 10ms\n", 3, "has no unit"),
            ("step: a\n", 1, "starts with `lesson: TITLE`"),
            ("lesson: x\n", 1, "at least one `step:`"),
            ("lesson: x\nstep: a\njust words\n", 3, "expected `key: value`"),
            ("lesson: x\nstep: a\nspec: {\"rr\": 5}\n", 3, "--print-spec"),
        ];
        for (text, line, says) in cases {
            let error = parse("bad", text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.to_string().contains(says), "{text:?}: {error}");
            assert!(error.to_string().starts_with("bad.lesson line"), "{error}");
        }
        let huge = "x".repeat(MAX_LESSON_BYTES + 1);
        assert!(parse("huge", &huge).unwrap_err().problem.contains("limit"));
    }
}
