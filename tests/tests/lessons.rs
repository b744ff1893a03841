//! Every lesson plays from a static copy of the app with no probe: each step that runs
//! something opens its recording, made by the real probe (`cargo xtask record-lessons`), and
//! shows the kernel's answer; presenter mode moves with the keys.

use std::time::Duration;

use ackscope_shared::lesson;
use ackscope_tests::{
    css, figure, repo_root, screenshot, serve_static, start_browser, text, wait_for_text,
};
use anyhow::{bail, Context, Result};
use fantoccini::key::Key;
use fantoccini::Client;

async fn wait_for(client: &Client, selector: &str, what: &str) -> Result<String> {
    wait_for_text(client, selector, what, Duration::from_secs(30)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lesson_plays_from_the_static_build_with_no_probe() -> Result<()> {
    let root = repo_root();
    let dist = root.join("dist");
    if !dist.join("index.html").is_file() || !root.join("offline/ackscope.html").is_file() {
        bail!("{} has no app: run `cargo xtask build` (cargo xtask test does)", dist.display());
    }
    let url = serve_static(dist)?;
    let mut lessons = Vec::new();
    for entry in std::fs::read_dir(root.join("lessons"))? {
        let path = entry?.path();
        let Some(id) = path.file_name().and_then(|n| n.to_str()?.strip_suffix(".lesson")) else {
            continue;
        };
        lessons.push(lesson::parse(id, &std::fs::read_to_string(&path)?)?);
    }
    lessons.sort_by(|a, b| a.id.cmp(&b.id));
    assert!(lessons.len() >= 4, "the four stories' lessons");

    let (_driver, client, _profile) = start_browser().await?;
    let result = async {
        let mut answers = Vec::new();
        for lesson in &lessons {
            for (index, step) in lesson.steps.iter().enumerate() {
                if step.run.is_none() {
                    continue;
                }
                let k = index + 1;
                client.goto(&format!("{url}?lesson={}&step={k}", lesson.id)).await?;
                let shown = client
                    .wait()
                    .at_most(Duration::from_secs(30))
                    .for_element(css(&format!("[data-testid=lesson-step][data-step='{k}']")))
                    .await
                    .with_context(|| format!("{} step {k} did not show", lesson.id))?;
                assert_eq!(shown.attr("data-lesson").await?.as_deref(), Some(lesson.id.as_str()));
                let play = client.find(css("[data-testid=lesson-recording]")).await?;
                if step.question.is_some() {
                    assert_eq!(
                        play.attr("disabled").await?.as_deref(),
                        Some("true"),
                        "predict first"
                    );
                    client.find(css("[data-testid=lesson-choice]")).await?.click().await?;
                }
                play.click().await?;
                let kernel =
                    wait_for(&client, "[data-testid=lesson-kernel]", "What this kernel did")
                        .await
                        .with_context(|| format!("{} step {k}: no kernel's answer", lesson.id))?;
                if step.question.is_some() {
                    let answer = text(&client, "[data-testid=lesson-answer]").await?;
                    assert!(answer.starts_with("The answer:"), "{answer}");
                }
                let keep = match (lesson.id.as_str(), k) {
                    ("forty-ms", 1) => Some("lesson.png"),
                    ("slow-reader", 2) => Some("lesson-slow-reader.png"),
                    _ => None,
                };
                if let Some(name) = keep {
                    // Give the timeline its frame, then keep the page for the docs.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    screenshot(&client, name).await?;
                }
                answers.push((lesson.id.clone(), k, kernel));
            }
        }
        // The page shows what each lesson claims its recording shows (`expect:`, checked
        // against the files themselves by `ackscope lesson check`): the p50 of a request/response
        // step, the goodput of a bulk one, as the page words them.
        let mut checked = 0;
        for lesson in &lessons {
            for (index, step) in lesson.steps.iter().enumerate() {
                for claim in &step.expect {
                    // The window's figures are said only when not zero.
                    let (label, said_when_zero) = match claim.figure {
                        lesson::Figure::P50Ms => ("p50 ", true),
                        lesson::Figure::MaxMs => ("max ", true),
                        lesson::Figure::GoodputMbps => ("goodput ", true),
                        lesson::Figure::RwndLimitedMs => ("the client waited ", false),
                        lesson::Figure::ZeroWindowProbes => ("zero-window probes ", false),
                        _ => continue,
                    };
                    let k = index + 1;
                    let (_, _, kernel) = answers
                        .iter()
                        .find(|(l, s, _)| *l == lesson.id && *s == k)
                        .context("a step with a claim has a kernel's answer")?;
                    let shown =
                        figure(kernel, label).or((!said_when_zero).then_some(0.0)).with_context(
                            || format!("{} step {k}: no {label}in {kernel}", lesson.id),
                        )?;
                    assert!(
                        claim.holds(shown),
                        "{} step {k}: the page shows {label}{shown}, the lesson claims {claim}",
                        lesson.id
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 26, "every story's steps were held to their claims ({checked})");

        // The single-file build, opened from disk: nothing can be fetched, the recordings are
        // inside the page.
        let offline = root.join("offline/ackscope.html").canonicalize()?;
        for (lesson, k, label, check) in
            [("forty-ms", 1, "p50 ", (80.0, f64::MAX)), ("buffers", 1, "goodput ", (0.0, 25.0))]
        {
            client.goto(&format!("file://{}?lesson={lesson}&step={k}", offline.display())).await?;
            client
                .wait()
                .at_most(Duration::from_secs(60))
                .for_element(css(&format!("[data-testid=lesson-step][data-step='{k}']")))
                .await
                .context("the offline page did not show the step")?;
            client.find(css("[data-testid=lesson-choice]")).await?.click().await?;
            client.find(css("[data-testid=lesson-recording]")).await?.click().await?;
            let kernel = wait_for(&client, "[data-testid=lesson-kernel]", "What this kernel did")
                .await
                .with_context(|| format!("offline {lesson} step {k}: no kernel's answer"))?;
            let value = figure(&kernel, label).with_context(|| kernel.clone())?;
            assert!((check.0..check.1).contains(&value), "offline {lesson} {k}: {kernel}");
        }

        // Embedded in a course's page: just the step's timeline, its recording opened at once.
        client.goto(&format!("{url}?embed=1&lesson=forty-ms&step=1")).await?;
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css("[data-testid=request-row]"))
            .await
            .context("the embedded step shows no timeline rows")?;
        for hidden in ["[data-testid=lesson-panel]", "[data-testid=run]", "header.top"] {
            let shown = client.find(css(hidden)).await?.is_displayed().await?;
            assert!(!shown, "{hidden} is hidden when embedded");
        }
        screenshot(&client, "embed.png").await?;

        // Embedded with a file and a view instead: that file's run, its request selected, in
        // that time window, and nothing else of the page.
        let file = "lessons/recordings/forty-ms-1.ackscope";
        client.goto(&format!("{url}?embed=1&url={file}&run=1&from=0&to=50000000&req=4")).await?;
        client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css("[data-testid=selection][data-request='4']"))
            .await
            .context("the embedded file's request 4 is not selected")?;
        let plot = client.find(css("[data-testid=plot]")).await?;
        assert_eq!(plot.attr("data-window").await?.as_deref(), Some("0 50000000"));
        for hidden in ["[data-testid=lesson-panel]", "[data-testid=run]", "header.top"] {
            let shown = client.find(css(hidden)).await?.is_displayed().await?;
            assert!(!shown, "{hidden} is hidden when a file is embedded");
        }

        // Presenter mode: the keys move through the steps.
        client.goto(&format!("{url}?lesson=forty-ms&step=1")).await?;
        client.wait().for_element(css("[data-testid=lesson-step][data-step='1']")).await?;
        // The keys go to whatever has the focus: here the button just pressed.
        let present = client.find(css("[data-testid=lesson-present]")).await?;
        present.click().await?;
        present.send_keys(&Key::Right.to_string()).await?;
        client
            .wait()
            .at_most(Duration::from_secs(5))
            .for_element(css("[data-testid=lesson-step][data-step='2']"))
            .await
            .context("the right arrow did not move to step 2")?;
        present.send_keys(&Key::End.to_string()).await?;
        let last = lessons.iter().find(|l| l.id == "forty-ms").map(|l| l.steps.len()).unwrap();
        client
            .wait()
            .at_most(Duration::from_secs(5))
            .for_element(css(&format!("[data-testid=lesson-step][data-step='{last}']")))
            .await
            .context("End did not move to the last step")?;
        screenshot(&client, "presenter.png").await?;
        Ok(())
    }
    .await;
    client.close().await?;
    result
}
