//! A class (`ackscope class`) with the real binary: a presenter's page and two students' pages,
//! each its own WebDriver session, follow one another within a second; a student can explore
//! and come back, cannot start a run, and see the presenter's live run; 200 scripted students get
//! every step the presenter's page moves to by key. Prints the time from the presenter's key to
//! the 200th student's receipt (docs/BENCHMARKS.md).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ackscope_shared::wire::{self, ClassState, ClassView, ToBrowser, ToProbe};
use ackscope_tests::{ackscope_bin, css, start_browser, Reaped};
use anyhow::{bail, Context, Result};
use fantoccini::Client;
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const STUDENTS: usize = 200;
/// Key presses timed from the presenter's page to the 200 students: enough for a p99 of the
/// 200th student's wait that is not just the slowest of a handful.
const KEY_PRESSES: usize = 100;
/// WebDriver's codes for the arrow keys.
const ARROW_RIGHT: &str = "\u{E014}";
const ARROW_LEFT: &str = "\u{E012}";
/// What "follows within 1 s" allows: a page that is a second behind the presenter has lost the
/// class.
const FOLLOW_WITHIN: Duration = Duration::from_secs(1);

/// Starts `ackscope class` and returns it with the presenter's and the students' links.
fn start_class() -> Result<(Reaped, String, String)> {
    start_class_with(&[])
}

/// [`start_class`] with more of its flags.
fn start_class_with(flags: &[&str]) -> Result<(Reaped, String, String)> {
    let mut child = Command::new(ackscope_bin()?)
        .args(["class", "--listen", "127.0.0.1:0"])
        .args(flags)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting ackscope class")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let (mut presenter, mut students) = (None, None);
    while presenter.is_none() || students.is_none() {
        let line = lines.next().context("ackscope class ended before printing its links")??;
        let url = line.split_whitespace().last().unwrap_or_default().to_string();
        if line.starts_with("presenter:") {
            presenter = Some(url);
        } else if line.starts_with("students:") {
            students = Some(url);
        }
    }
    let (presenter, students) = (presenter.unwrap_or_default(), students.unwrap_or_default());
    assert!(presenter.contains("#presenter="), "the secret is in the fragment: {presenter}");
    assert!(!students.contains("presenter"), "the students' link has no secret: {students}");
    Ok((Reaped(child), presenter, students))
}

/// The step a page shows (from 1), if it shows one.
async fn step_of(client: &Client) -> Option<u32> {
    let step = client.find(css("[data-testid=lesson-step]")).await.ok()?;
    step.attr("data-step").await.ok()??.parse().ok()
}

/// Waits until `client` shows step `k`; returns how long that took.
async fn follows(client: &Client, k: u32, who: &str) -> Result<Duration> {
    let start = Instant::now();
    while step_of(client).await != Some(k) {
        if start.elapsed() > FOLLOW_WITHIN {
            bail!("{who} did not follow to step {k} within {FOLLOW_WITHIN:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(start.elapsed())
}

/// `ackscope class --lesson forty-ms`: the presenter's page and a student's open on the
/// lesson's first step with nothing chosen, and the presenter moves the room from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_opened_on_a_lesson_starts_every_page_on_its_first_step() -> Result<()> {
    let (_class, presenter_url, student_url) = start_class_with(&["--lesson", "forty-ms"])?;
    let (_d1, presenter, _p1) = start_browser().await?;
    let (_d2, student, _p2) = start_browser().await?;
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        presenter.goto(&presenter_url).await?;
        student.goto(&student_url).await?;
        for (client, who) in [(&presenter, "the presenter"), (&student, "the student")] {
            client
                .wait()
                .at_most(Duration::from_secs(30))
                .for_element(css("[data-testid=lesson-step][data-step='1']"))
                .await
                .with_context(|| format!("{who}'s page did not open on step 1"))?;
        }
        presenter.find(css("[data-testid=lesson-next]")).await?.click().await?;
        follows(&student, 2, "the student").await?;
        anyhow::Ok(())
    })
    .await;
    presenter.close().await?;
    student.close().await?;
    result.context("the class took more than 60 s")?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn students_follow_the_presenter_explore_and_cannot_start_runs() -> Result<()> {
    let (_class, presenter_url, student_url) = start_class()?;
    let (_d1, presenter, _p1) = start_browser().await?;
    let (_d2, alice, _p2) = start_browser().await?;
    let (_d3, bob, _p3) = start_browser().await?;
    // Bounded: a page that stops answering (one that redraws itself without end) would hold a
    // WebDriver call forever.
    let result = tokio::time::timeout(Duration::from_secs(120), async {
        presenter.goto(&presenter_url).await?;
        alice.goto(&student_url).await?;
        bob.goto(&student_url).await?;
        for client in [&presenter, &alice, &bob] {
            client
                .wait()
                .at_most(Duration::from_secs(30))
                .for_element(css("[data-testid=class-bar]"))
                .await?;
        }
        // The presenter chooses the first lesson: both students are on its step 1.
        let picker = presenter.find(css("[data-testid=lesson-picker]")).await?;
        picker.select_by_value("0").await?;
        follows(&alice, 1, "alice").await?;
        follows(&bob, 1, "bob").await?;
        presenter.find(css("[data-testid=lesson-next]")).await?.click().await?;
        let a = follows(&alice, 2, "alice").await?;
        let b = follows(&bob, 2, "bob").await?;
        eprintln!("class: students followed step 2 after {a:?} and {b:?}");

        // Bob explores: he stays where he is while the room moves on, then comes back.
        bob.find(css("[data-testid=class-follow]")).await?.click().await?;
        presenter.find(css("[data-testid=lesson-next]")).await?.click().await?;
        follows(&alice, 3, "alice").await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(step_of(&bob).await, Some(2), "exploring, bob does not follow");
        bob.find(css("[data-testid=class-back]")).await?.click().await?;
        follows(&bob, 3, "bob, back to the presenter").await?;

        // A student's page starts no run: it has no run form (the probe refuses a student's
        // start anyway: probe/tests/class.rs), and the presenter's has.
        for control in ["run", "watch-start"] {
            let found = alice.find_all(css(&format!("[data-testid={control}]"))).await?;
            assert!(found.is_empty(), "a student's page has a {control} control");
        }
        assert!(!presenter.find_all(css("[data-testid=run]")).await?.is_empty());
        assert!(alice.find(css("[data-testid=run-entry]")).await.is_err(), "no run started");

        // The presenter predicts, then runs step 3 live: the run streams to every student's
        // page, which shows it whole (its 20 requests) and settles (a page that kept redrawing
        // itself would not answer WebDriver).
        presenter.find(css("[data-testid=lesson-choice]")).await?.click().await?;
        presenter.find(css("[data-testid=lesson-run]")).await?.click().await?;
        for (student, who) in [(&alice, "alice"), (&bob, "bob")] {
            student
                .wait()
                .at_most(Duration::from_secs(30))
                .for_element(css("[data-testid=run-entry][data-source=live][aria-selected=true] \
                     [data-status=done]"))
                .await
                .with_context(|| format!("{who} was not shown the presenter's live run"))?;
            let requests = student.find(css("[data-testid=summary-requests]")).await?;
            assert_eq!(requests.text().await?.trim(), "20", "{who} sees every request");
        }
        // The shown run's view goes into each address bar (a link to it), and the class stays
        // in it: a reload keeps every page in the room, the presenter with the room's secret.
        tokio::time::sleep(Duration::from_millis(800)).await;
        for (page, who) in [(&presenter, "the presenter"), (&alice, "alice"), (&bob, "bob")] {
            let url = page.current_url().await?;
            assert!(url.as_str().contains("run="), "{who}'s address holds the view: {url}");
            assert!(url.as_str().contains("room="), "{who}'s address keeps the room: {url}");
        }
        let url = presenter.current_url().await?;
        assert!(url.fragment().is_some_and(|f| f.starts_with("presenter=")), "{url}");

        // The presenter goes to request 5 and zooms in: the students' timelines show the same
        // request and the same time window.
        let goto = presenter.find(css("[data-testid=goto-request]")).await?;
        goto.send_keys("5\u{E007}").await?;
        presenter.find(css("[data-testid=plot]")).await?.send_keys("++").await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let plot = presenter.find(css("[data-testid=plot]")).await?;
        let window = plot.attr("data-window").await?.context("the plot names its window")?;
        let start = Instant::now();
        for (student, who) in [(&alice, "alice"), (&bob, "bob")] {
            loop {
                let selected = student.find(css("[data-testid=selection]")).await.ok();
                let request = match selected {
                    Some(panel) => panel.attr("data-request").await?,
                    None => None,
                };
                let plot = student.find(css("[data-testid=plot]")).await?;
                let shown = plot.attr("data-window").await?;
                if request.as_deref() == Some("5") && shown.as_deref() == Some(window.as_str()) {
                    break;
                }
                if start.elapsed() > FOLLOW_WITHIN {
                    let mine = presenter.find(css("[data-testid=selection]")).await?;
                    let mine = mine.attr("data-request").await?;
                    let refused = match presenter.find(css("[data-testid=rejected]")).await {
                        Ok(refused) => Some(refused.text().await?),
                        Err(_) => None,
                    };
                    bail!("{who} shows request {request:?}, window {shown:?}: not the presenter's {mine:?}, {window} (refused: {refused:?})");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        eprintln!("class: students followed the presenter's view after {:?}", start.elapsed());
        Ok(())
    })
    .await
    .unwrap_or_else(|_| Err(anyhow::anyhow!("a page stopped answering within 120 s")));
    for client in [presenter, alice, bob] {
        let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
    }
    result
}

/// 200 scripted students and the presenter's own page in a browser: the presenter presses the
/// arrow keys in presenter mode, every student receives every step, and the time from each key
/// press (sent through WebDriver) to each student's receipt is measured on this process's one
/// clock (neither the page nor the probe times itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_students_receive_every_step() -> Result<()> {
    let (_class, presenter_url, student_url) = start_class()?;
    let base = student_url.trim_start_matches("http://").split('/').next().unwrap_or_default();
    let code = student_url.split("room=").nth(1).unwrap_or_default().to_string();
    let socket_url = format!("ws://{base}/ws?room={code}");
    let origin = format!("http://{base}");
    // The steps every student must see: the lesson's first (0) when the presenter opens it,
    // then one change per key press, right and left in turn.
    let expected: Vec<u32> = (0..=KEY_PRESSES).map(|k| (k % 2) as u32).collect();
    let mut students = Vec::new();
    for _ in 0..STUDENTS {
        let mut request = socket_url.clone().into_client_request()?;
        request.headers_mut().insert("Origin", origin.parse()?);
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
        let wanted = expected.len();
        students.push(tokio::spawn(async move {
            // Every change of step, with when it arrived.
            let mut received: Vec<(u32, Instant)> = Vec::new();
            while let Some(message) = socket.next().await {
                let Message::Binary(bytes) = message? else { continue };
                if let Ok(ToBrowser::ClassState(state)) = wire::decode::<ToBrowser>(&bytes) {
                    if received.last().map(|(s, _)| *s) != Some(state.step) {
                        received.push((state.step, Instant::now()));
                    }
                    if received.len() == wanted {
                        break;
                    }
                }
            }
            anyhow::Ok(received)
        }));
    }
    let (_driver, presenter, _profile) = start_browser().await?;
    let presses = async {
        presenter.goto(&presenter_url).await?;
        presenter
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(css("[data-testid=class-bar]"))
            .await?;
        presenter.find(css("[data-testid=lesson-picker]")).await?.select_by_value("0").await?;
        // Presenter mode, its button focused: the keys go to the page, not to the picker.
        let present = presenter.find(css("[data-testid=lesson-present]")).await?;
        present.click().await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut pressed = Vec::new();
        for press in 0..KEY_PRESSES {
            let key = if press % 2 == 0 { ARROW_RIGHT } else { ARROW_LEFT };
            let before = Instant::now();
            present.send_keys(key).await?;
            pressed.push((before, before.elapsed()));
            // A presenter talks for a while between steps; here long enough for all to arrive.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::Ok(pressed)
    }
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(10), presenter.close()).await;
    let pressed = presses?;
    // How long WebDriver took to deliver each key (it answers once the page has had it): part
    // of every figure below, as a person's key has none of it.
    let mut delivery: Vec<Duration> = pressed.iter().map(|&(_, took)| took).collect();
    delivery.sort();
    let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); pressed.len()];
    for student in students {
        let received = tokio::time::timeout(Duration::from_secs(10), student)
            .await
            .context("a student did not receive every step within 10 s")???;
        let got: Vec<u32> = received.iter().map(|(s, _)| *s).collect();
        assert_eq!(got, expected, "a student missed a step");
        // The first is the lesson opening; each later one answers a key press.
        for (press, (_, at)) in received.iter().skip(1).enumerate() {
            latencies[press].push(at.duration_since(pressed[press].0));
        }
    }
    // Per key press, the 200th student's wait: the room has the step when the last one has it.
    let mut last: Vec<Duration> =
        latencies.iter().map(|l| l.iter().copied().max().unwrap()).collect();
    let mut all: Vec<Duration> = latencies.into_iter().flatten().collect();
    all.sort();
    last.sort();
    let p = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "class students={STUDENTS} key_presses={KEY_PRESSES} receipt_p50_ms={:.2} receipt_p99_ms={:.2} \
         last_student_p50_ms={:.2} last_student_p99_ms={:.2} webdriver_key_p50_ms={:.2}  (from the \
         key press sent through WebDriver)",
        ms(p(&all, 0.5)),
        ms(p(&all, 0.99)),
        ms(p(&last, 0.5)),
        ms(p(&last, 0.99)),
        ms(p(&delivery, 0.5)),
    );
    assert!(*last.last().unwrap() < FOLLOW_WITHIN, "the 200th student waited over a second");
    Ok(())
}

/// Rounds of votes timed in [`two_hundred_students_vote_and_the_presenter_counts_them`]: each is
/// one "last vote to count" figure.
const VOTE_ROUNDS: u32 = 40;

/// 200 scripted students vote in each of [`VOTE_ROUNDS`] rounds (the presenter reveals, then
/// asks again), and a scripted presenter's page counts them: the time from the last student's
/// vote leaving its socket to the presenter's socket receiving "200 answered" is measured on this
/// process's one clock. The presenter is a socket, not a browser: this is the room's delivery,
/// without the page's drawing (a frame, about 16 ms, more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_students_vote_and_the_presenter_counts_them() -> Result<()> {
    use futures_util::SinkExt;
    use std::sync::{Arc, Mutex};
    let (_class, presenter_url, student_url) = start_class_with(&["--lesson", "forty-ms"])?;
    let base = student_url.trim_start_matches("http://").split('/').next().unwrap_or_default();
    let code = student_url.split("room=").nth(1).unwrap_or_default().to_string();
    let secret = presenter_url.split("#presenter=").nth(1).unwrap_or_default().to_string();
    let socket_url = format!("ws://{base}/ws?room={code}");
    let origin = format!("http://{base}");
    let connect = || async {
        let mut request = socket_url.clone().into_client_request()?;
        request.headers_mut().insert("Origin", origin.parse()?);
        anyhow::Ok(tokio_tungstenite::connect_async(request).await?.0)
    };
    let binary = |message: &ToProbe| Message::Binary(wire::encode(message).into());
    let mut presenter = connect().await?;
    presenter.send(binary(&ToProbe::Present { secret })).await?;
    // When each round's last vote left its student's socket.
    let last_vote: Arc<Mutex<Vec<Option<Instant>>>> =
        Arc::new(Mutex::new(vec![None; VOTE_ROUNDS as usize]));
    // What the room refused a student, for the failure's message (none is expected).
    let refusals: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut students = Vec::new();
    for student in 0..STUDENTS {
        let mut socket = connect().await?;
        let (last_vote, refusals) = (last_vote.clone(), refusals.clone());
        students.push(tokio::spawn(async move {
            // Each round, once the room says it is open: one vote.
            let mut voted = None;
            while let Some(message) = socket.next().await {
                let Message::Binary(bytes) = message? else { continue };
                let votes = match wire::decode::<ToBrowser>(&bytes) {
                    Ok(ToBrowser::ClassVotes(votes)) => votes,
                    Ok(ToBrowser::Rejected { reason }) => {
                        refusals.lock().unwrap().push(format!("student {student}: {reason}"));
                        continue;
                    }
                    _ => continue,
                };
                // The question's rounds from 0 (the round's id is the room's).
                let asked = votes.asked as usize - 1;
                if votes.revealed || voted == Some(votes.round) || asked >= VOTE_ROUNDS as usize {
                    continue;
                }
                let choice = ((student + asked) % 3) as u8;
                let round = votes.round;
                let message = ToProbe::Vote { lesson: votes.lesson, step: 0, round, choice };
                // Noted before it leaves: the presenter may be told before this task runs on.
                let sent = Instant::now();
                {
                    let mut last = last_vote.lock().unwrap();
                    let slot = &mut last[asked];
                    *slot = Some(slot.map_or(sent, |before| before.max(sent)));
                }
                socket.send(Message::Binary(wire::encode(&message).into())).await?;
                // The page stays (a student who leaves takes their open vote with them) until
                // the test ends and aborts this task.
                voted = Some(round);
            }
            anyhow::Ok(())
        }));
    }
    let mut waits = Vec::new();
    let counted = tokio::time::timeout(Duration::from_secs(120), async {
        for round in 0..VOTE_ROUNDS {
            let counted_at = loop {
                let message = presenter.next().await.context("the room closed")??;
                let Message::Binary(bytes) = message else { continue };
                if let Ok(ToBrowser::ClassVotes(votes)) = wire::decode::<ToBrowser>(&bytes) {
                    if votes.asked == round + 1 && votes.answered as usize == STUDENTS {
                        break Instant::now();
                    }
                }
            };
            let last = last_vote.lock().unwrap()[round as usize].context("no vote")?;
            waits.push(counted_at.saturating_duration_since(last));
            if round + 1 == VOTE_ROUNDS {
                break;
            }
            // A presenter talks between rounds; here long enough that no student votes more
            // than the 4 times a second a page may.
            tokio::time::sleep(Duration::from_millis(300)).await;
            // Reveal, then ask again.
            for revealed in [true, false] {
                let state = ClassState {
                    lesson: "forty-ms".into(),
                    step: 0,
                    revealed,
                    recording: false,
                    view: ClassView::default(),
                };
                presenter.send(binary(&ToProbe::ClassState(state))).await?;
            }
        }
        anyhow::Ok(())
    })
    .await;
    for student in &students {
        student.abort();
    }
    let refused = refusals.lock().unwrap().clone();
    counted.with_context(|| {
        format!("the presenter was not told every round's count within 120 s; refused: {refused:?}")
    })??;
    assert!(refused.is_empty(), "the room refused votes: {refused:?}");
    waits.sort();
    let p = |q: f64| waits[((waits.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "class votes students={STUDENTS} rounds={VOTE_ROUNDS} last_vote_to_count_p50_ms={:.2} \
         last_vote_to_count_p99_ms={:.2} max_ms={:.2}  (from the last vote's send to the \
         presenter's socket)",
        ms(p(0.5)),
        ms(p(0.99)),
        ms(*waits.last().unwrap()),
    );
    assert!(p(0.99) < FOLLOW_WITHIN, "the presenter waited over a second for the count");
    Ok(())
}

/// The value of `attribute` of the first element `selector` finds on `client`, if any.
async fn attr_of(client: &Client, selector: &str, attribute: &str) -> Option<String> {
    let element = client.find(css(selector)).await.ok()?;
    element.attr(attribute).await.ok()?
}

/// Waits (up to 10 s) until `client` shows an element `selector` finds.
async fn shows(client: &Client, selector: &str, who: &str) -> Result<()> {
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(css(selector))
        .await
        .with_context(|| format!("{who}'s page shows no {selector}"))?;
    Ok(())
}

/// The count each choice got in round `round` on `client`'s page, by choice.
async fn counts_in(client: &Client, round: u32) -> Result<Vec<u32>> {
    let selector =
        format!("[data-testid=class-round][data-round='{round}'] [data-testid=class-count]");
    let mut counts = Vec::new();
    for row in client.find_all(css(&selector)).await? {
        counts.push(row.attr("data-count").await?.unwrap_or_default().parse()?);
    }
    Ok(counts)
}

/// Peer instruction with a presenter and three students, each its own browser: the students
/// vote, the presenter's page counts them without showing what they chose, the reveal shows
/// every page the counts beside the answer, and "vote again" clears every choice and counts
/// afresh, both rounds then shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_class_votes_then_votes_again() -> Result<()> {
    let (_class, presenter_url, student_url) = start_class_with(&["--lesson", "forty-ms"])?;
    let (_d0, presenter, _p0) = start_browser().await?;
    let mut students = Vec::new();
    for _ in 0..3 {
        students.push(start_browser().await?);
    }
    let names = ["alice", "bob", "carol"];
    let result = tokio::time::timeout(Duration::from_secs(180), async {
        presenter.goto(&presenter_url).await?;
        for (_, client, _) in &students {
            client.goto(&student_url).await?;
        }
        // forty-ms's first step: "how long does one request take?", the third choice right.
        let before_any = "[data-testid=class-answers][data-students='3'][data-answered='0']";
        shows(&presenter, before_any, "the presenter").await?;
        for ((_, client, _), who) in students.iter().zip(names) {
            shows(client, "[data-testid=lesson-step][data-step='1']", who).await?;
            let runs = client.find_all(css("[data-testid=lesson-run]")).await?;
            for run in runs {
                assert!(!run.is_displayed().await?, "{who}'s page shows a Run control");
            }
            let hint = client.find(css("[data-testid=runs-empty]")).await?.text().await?;
            assert!(hint.contains("the presenter's runs appear here"), "{who}: {hint}");
        }
        // Alice and Carol choose the right answer, Bob the second choice.
        for ((_, client, _), choice) in students.iter().zip([2, 1, 2]) {
            let radio = format!("[data-testid=lesson-choice][data-choice='{choice}']");
            client.find(css(&radio)).await?.click().await?;
        }
        shows(&presenter, "[data-testid=class-answers][data-answered='3']", "the presenter")
            .await?;
        assert!(counts_in(&presenter, 0).await?.is_empty(), "counts shown before the reveal");
        for ((_, client, _), who) in students.iter().zip(names) {
            assert!(counts_in(client, 0).await?.is_empty(), "{who} sees counts before the reveal");
        }

        presenter.find(css("[data-testid=lesson-reveal]")).await?.click().await?;
        for (client, who) in std::iter::once((&presenter, "the presenter"))
            .chain(students.iter().map(|s| &s.1).zip(names))
        {
            shows(client, "[data-testid=class-round][data-round='0']", who).await?;
            assert_eq!(counts_in(client, 0).await?, vec![0, 1, 2], "{who}'s first vote");
            shows(client, "[data-testid=lesson-answer]", who).await?;
        }

        // After discussing, the class votes again: every choice is cleared, and the count starts
        // from nothing.
        presenter.find(css("[data-testid=lesson-vote-again]")).await?.click().await?;
        let again = "[data-testid=class-answers][data-round='1'][data-answered='0']";
        shows(&presenter, again, "the presenter").await?;
        for ((_, client, _), who) in students.iter().zip(names) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let mut checked = 0;
                for radio in client.find_all(css("[data-testid=lesson-choice]")).await? {
                    checked += usize::from(radio.prop("checked").await?.as_deref() == Some("true"));
                }
                let enabled = attr_of(client, "[data-testid=lesson-choice]", "disabled").await;
                if checked == 0 && enabled.is_none() {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("{who}'s choice was not cleared for the second vote");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        for (_, client, _) in &students {
            let right = "[data-testid=lesson-choice][data-choice='2']";
            client.find(css(right)).await?.click().await?;
        }
        shows(&presenter, "[data-testid=class-answers][data-answered='3']", "the presenter")
            .await?;
        presenter.find(css("[data-testid=lesson-reveal]")).await?.click().await?;
        for (client, who) in std::iter::once((&presenter, "the presenter"))
            .chain(students.iter().map(|s| &s.1).zip(names))
        {
            shows(client, "[data-testid=class-round][data-round='1']", who).await?;
            assert_eq!(counts_in(client, 0).await?, vec![0, 1, 2], "{who} keeps the first vote");
            assert_eq!(counts_in(client, 1).await?, vec![0, 0, 3], "{who}'s second vote");
        }
        if let Some(dir) = std::env::var_os("ACKSCOPE_SCREENSHOT_DIR") {
            let png = presenter.screenshot().await?;
            std::fs::write(std::path::Path::new(&dir).join("class-votes.png"), png)?;
            let png = students[1].1.screenshot().await?;
            std::fs::write(std::path::Path::new(&dir).join("class-votes-student.png"), png)?;
        }
        anyhow::Ok(())
    })
    .await
    .unwrap_or_else(|_| Err(anyhow::anyhow!("a page stopped answering within 180 s")));
    let _ = tokio::time::timeout(Duration::from_secs(10), presenter.close()).await;
    for (_, client, _) in students {
        let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
    }
    result
}
