//! `ackscope class` against scripted WebSocket clients: what the room lets in, and what only
//! the presenter may do, whatever a page sends.

use std::io::ErrorKind;
use std::time::Duration;

use ackscope_shared::wire::{ClassState, ClassView, ClassVotes, ToBrowser, ToProbe};
use ackscope_shared::{RrSpec, Scenario};

mod common;

use common::{next_message, open_page, rejected, send_frame, start_class, Class, Page};

/// The status the probe answers a WebSocket upgrade of `path` with (101: let in).
fn upgrade_status(addr: &str, path: &str) -> u16 {
    match common::try_open_page(addr, path) {
        Ok(_) => 101,
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("{path}: neither let in nor refused: {e}"),
    }
}

fn state(step: u32) -> ClassState {
    let view = ClassView { run_clock: true, window: Some((0, 5)), selected: Some(3) };
    ClassState { lesson: "forty-ms".into(), step, revealed: false, recording: false, view }
}

/// The room's state a newly joined page is given, if any, within a second.
fn state_given_to_a_new_page(class: &Class) -> Option<ClassState> {
    let mut page = open_page(&class.addr, &format!("/ws?room={}", class.code));
    page.get_ref().set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    // Hello, Stream and TryRights first; the room's state, if there is one, right after them.
    for _ in 0..4 {
        // An error here is the second gone by with nothing more.
        let Ok(message) = page.read() else { break };
        if let tungstenite::Message::Binary(bytes) = message {
            if let Ok(ToBrowser::ClassState(state)) = ackscope_shared::wire::decode(&bytes) {
                return Some(state);
            }
        }
    }
    None
}

#[test]
fn a_page_needs_the_room_code() {
    let class = start_class();
    for path in ["/ws", "/ws?room=", "/ws?room=WRONG1"] {
        let status = upgrade_status(&class.addr, path);
        assert_eq!(status, 403, "{path}");
    }
    assert_eq!(upgrade_status(&class.addr, &format!("/ws?room={}", class.code)), 101);
}

#[test]
fn only_the_presenter_moves_the_room_or_starts_runs() {
    let class = start_class();
    let student = format!("/ws?room={}", class.code);
    let mut page = open_page(&class.addr, &student);
    // A student's page is told at once that the presenter tries the fixes on a watch.
    assert_eq!(try_rights(&mut page), Some("in a class the presenter tries the fixes".into()));
    send_frame(&mut page, &ToProbe::ClassState(state(4)));
    assert!(rejected(&mut page).contains("only the presenter moves the room"));
    send_frame(&mut page, &ToProbe::Present { secret: "0".repeat(class.secret.len()) });
    assert!(rejected(&mut page).contains("presenter secret is not this room's"));
    let spec = Scenario::Rr(RrSpec { requests: 2, ..RrSpec::default() });
    send_frame(&mut page, &ToProbe::StartRun { spec });
    assert!(rejected(&mut page).contains("presenter starts the runs"));
    assert_eq!(state_given_to_a_new_page(&class), None, "the room did not move");

    // The presenter's page, with the secret, moves it: a page joining later is there at once,
    // the presenter's view included.
    let mut presenter = open_page(&class.addr, &student);
    assert!(try_rights(&mut presenter).is_some(), "not the presenter's until it shows the secret");
    send_frame(&mut presenter, &ToProbe::Present { secret: class.secret.clone() });
    // Its page is told again: now the probe's own rights (root may; others are told why not).
    let rights = try_rights(&mut presenter);
    match common::is_root() {
        true => assert_eq!(rights, None),
        false => assert!(rights.is_some_and(|lacks| lacks.contains("CAP_SYS_PTRACE"))),
    }
    send_frame(&mut presenter, &ToProbe::ClassState(state(4)));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(state_given_to_a_new_page(&class), Some(state(4)));
}

/// The next `TryRights` the probe sends on `page`: what stands in the way of trying a fix.
fn try_rights(page: &mut Page) -> Option<String> {
    page.get_ref().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    loop {
        if let ToBrowser::TryRights { refused } = next_message(page) {
            return refused;
        }
    }
}

/// `class --lesson ID` opens the room on the lesson's first step: a page that joins is there at
/// once. A lesson that is not one is refused with the lessons there are.
#[test]
fn a_room_opened_on_a_lesson_is_on_its_first_step_for_every_page() {
    let class = common::start_class_with(&["--lesson", "forty-ms"]);
    let first = ClassState {
        lesson: "forty-ms".into(),
        step: 0,
        revealed: false,
        recording: false,
        view: ClassView::default(),
    };
    assert_eq!(state_given_to_a_new_page(&class), Some(first));

    let refused = common::ackscope(&["class", "--listen", "127.0.0.1:0", "--lesson", "forty"]);
    assert_eq!(refused.status.code(), Some(2));
    let said = common::text(&refused.stderr);
    assert!(said.contains("no lesson \"forty\"") && said.contains("forty-ms, reconnect"), "{said}");
}

#[test]
fn a_page_sending_faster_than_a_person_is_disconnected() {
    let class = start_class();
    let mut page = open_page(&class.addr, &format!("/ws?room={}", class.code));
    let secret = tungstenite::Message::Binary(
        ackscope_shared::wire::encode(&ToProbe::Present { secret: "x".into() }).into(),
    );
    for _ in 0..60 {
        // The probe may close the connection before the last ones are written.
        let _ = page.send(secret.clone());
    }
    assert!(closed(&mut page), "more than 50 messages in a second closed the connection");
}

/// Students fill the room; the next page is told so, but the presenter's page still gets in
/// (a place is kept for it) and moves the room.
#[test]
fn a_full_room_says_so_to_the_next_page_and_still_takes_the_presenter() {
    let class = start_class();
    let student = format!("/ws?room={}", class.code);
    let mut pages: Vec<Page> = (0..ackscope_probe::serve::room::MAX_STUDENTS)
        .map(|_| open_page(&class.addr, &student))
        .collect();
    let mut one_more = open_page(&class.addr, &student);
    let reason = rejected(&mut one_more);
    assert!(reason.contains("the room is full"), "{reason}");

    let mut presenter = open_page(&class.addr, &student);
    send_frame(&mut presenter, &ToProbe::Present { secret: class.secret.clone() });
    send_frame(&mut presenter, &ToProbe::ClassState(state(2)));
    let first = &mut pages[0];
    first.get_ref().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let moved = loop {
        if let ToBrowser::ClassState(state) = next_message(first) {
            break state;
        }
    };
    assert_eq!(moved, state(2), "the presenter, in the full room, moved it");
}

/// The next `ClassVotes` on `page` for which `until` holds, within 10 s.
fn votes_until(page: &mut Page, until: impl Fn(&ClassVotes) -> bool) -> ClassVotes {
    page.get_ref().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    loop {
        if let ToBrowser::ClassVotes(votes) = next_message(page) {
            if until(&votes) {
                return votes;
            }
        }
    }
}

fn vote(step: u32, round: u32, choice: u8) -> ToProbe {
    ToProbe::Vote { lesson: "forty-ms".into(), step, round, choice }
}

/// Whether the probe closed `page` (within 5 s): the messages it sent before it closed, then
/// the end of the connection; a read that times out is an open connection.
fn closed(page: &mut Page) -> bool {
    page.get_ref().set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    loop {
        match page.read() {
            Ok(_) => continue,
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// A full room votes at once: the presenter is told how many answered (not what) until the
/// reveal, then every page the counts. A page that floods votes is refused, then closed, and its
/// vote goes with it; a vote on another step, from the presenter or after the reveal is refused.
#[test]
fn a_full_room_votes_at_once_and_each_page_counts_once() {
    let class = common::start_class_with(&["--lesson", "forty-ms"]);
    let path = format!("/ws?room={}", class.code);
    let mut presenter = open_page(&class.addr, &path);
    send_frame(&mut presenter, &ToProbe::Present { secret: class.secret.clone() });
    let students = ackscope_probe::serve::room::MAX_STUDENTS;
    let mut pages: Vec<Page> = (0..students).map(|_| open_page(&class.addr, &path)).collect();
    votes_until(&mut presenter, |v| v.students as usize == students);
    // forty-ms's first step asks a question of three choices.
    for (i, page) in pages.iter_mut().enumerate() {
        send_frame(page, &vote(0, 0, (i % 3) as u8));
    }
    let counted = votes_until(&mut presenter, |v| v.answered as usize == students);
    assert!(counted.rounds.is_empty(), "no counts before the reveal: {counted:?}");

    // The first student floods: past 4 votes a second each is refused, past 50 messages the
    // page is closed, and its vote leaves the room with it.
    for _ in 0..60 {
        // The probe may close the connection before the last ones are written.
        let _ = pages[0].send(tungstenite::Message::Binary(
            ackscope_shared::wire::encode(&vote(0, 0, 1)).into(),
        ));
    }
    assert!(rejected(&mut pages[0]).contains("votes in a second"));
    assert!(closed(&mut pages[0]), "a page sending 60 votes in a second is closed");
    let after_flood = votes_until(&mut presenter, |v| v.students as usize == students - 1);
    assert_eq!(after_flood.answered as usize, students - 1, "the flooder's vote left with it");

    send_frame(&mut pages[1], &vote(3, 0, 0));
    assert!(rejected(&mut pages[1]).contains("another step"));
    send_frame(&mut presenter, &vote(0, 0, 0));
    assert!(rejected(&mut presenter).contains("presenter's page does not vote"));

    // The reveal: the presenter and every student get the counts (a choice a student, less the
    // first, who chose choice 0).
    let mut revealed = state(0);
    revealed.revealed = true;
    send_frame(&mut presenter, &ToProbe::ClassState(revealed));
    let third = (students / 3) as u32;
    let shown = vec![vec![third - 1, third, third]];
    assert_eq!(votes_until(&mut presenter, |v| !v.rounds.is_empty()).rounds, shown);
    assert_eq!(votes_until(&mut pages[2], |v| !v.rounds.is_empty()).rounds, shown);
    send_frame(&mut pages[2], &vote(0, 0, 2));
    assert!(rejected(&mut pages[2]).contains("the answer is shown"));
}

/// Only a class has votes: `ackscope ui` refuses one and says how to start a class.
#[test]
fn a_vote_outside_a_class_is_refused() {
    let (mut server, addr) = common::ui_server();
    let mut page = open_page(&addr, "/ws");
    send_frame(&mut page, &vote(0, 0, 0));
    let reason = rejected(&mut page);
    let _ = server.kill();
    let _ = server.wait();
    assert!(reason.contains("not serving a class"), "{reason}");
}
