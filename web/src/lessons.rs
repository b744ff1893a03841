//! The lessons the app carries: every file of `lessons/` at the repository's root, compiled in,
//! so a lesson plays from a static copy of the app with no probe (its recordings are fetched
//! from `lessons/recordings/` beside the page). Pure: the panel is `panels::lesson`.

use ackscope_shared::lesson::{self, Lesson, LessonError, BUNDLED};

/// Every bundled lesson, parsed (a bad file is reported by name; the others still play).
pub fn all() -> Vec<Result<Lesson, LessonError>> {
    BUNDLED.iter().map(|(id, text)| lesson::parse(id, text)).collect()
}

/// The bundled lessons that read, parsed once for the page.
pub fn playable() -> &'static [Lesson] {
    thread_local! {
        static LESSONS: &'static [Lesson] =
            all().into_iter().filter_map(Result::ok).collect::<Vec<_>>().leak();
    }
    LESSONS.with(|lessons| *lessons)
}

/// Where the recording of step `step` (from 0) of lesson `id` is, relative to the page:
/// `cargo xtask record-lessons` writes it, `cargo xtask build` puts it beside the app.
pub fn recording_url(id: &str, step: usize) -> String {
    format!("lessons/recordings/{}", recording_name(id, step))
}

/// The recording's file name (also the name the opened file is listed under).
pub use ackscope_shared::lesson::recording_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lesson_file_is_bundled_and_reads() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../lessons");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("lessons/ is beside web/")
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter_map(|name| name.strip_suffix(".lesson").map(str::to_string))
            .collect();
        files.sort();
        let mut bundled: Vec<String> = BUNDLED.iter().map(|(id, _)| id.to_string()).collect();
        bundled.sort();
        assert_eq!(bundled, files, "BUNDLED lists every file of lessons/");
        for lesson in all() {
            let lesson = lesson.unwrap_or_else(|error| panic!("{error}"));
            assert!(lesson.steps.len() >= 3, "{}: a lesson of a few steps", lesson.id);
            assert!(
                lesson.steps.iter().any(|s| s.question.is_some()),
                "{} asks something",
                lesson.id
            );
            for step in lesson.steps.iter().filter_map(|s| s.run.as_ref()) {
                assert!(step.scenario().is_some(), "{}: {} runs", lesson.id, step.name());
            }
        }
    }

    #[test]
    fn recordings_are_named_by_lesson_and_step_from_one() {
        assert_eq!(recording_url("forty-ms", 0), "lessons/recordings/forty-ms-1.ackscope");
    }
}
