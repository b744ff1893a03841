//! A class's room (`ackscope class`): the presenter's lesson state, fanned out to every page.
//!
//! As in reveal.js's multiplex, but with what it lacks: the presenter proves itself with a
//! random secret that its page reads from the URL's fragment (never sent in a request, so no
//! server or proxy log sees it) and sends over the WebSocket; students need only the short room
//! code in the link; the room keeps the last state, so a late joiner catches up at once; and the
//! room, its messages and their rate are bounded.
//!
//! The room also counts the class's votes on the presenter's question (peer instruction: the
//! class answers, sees how it answered once the answer is shown, discusses, and answers again).
//! A vote is held against the page's place for as long as its round is open, and only counts
//! leave the room: no page, file or log learns who chose what.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use ackscope_shared::lesson;
use ackscope_shared::wire::{ClassState, ClassVotes, MAX_VOTE_ROUNDS};
use tokio::sync::watch;

/// Pages in one room at most: a large lecture hall, with the presenter's.
pub const MAX_PAGES: usize = 301;
/// The pages other than the presenter's: one place is always kept for the presenter, so that
/// students (or anyone with the room code) filling the room cannot lock the presenter out.
pub const MAX_STUDENTS: usize = MAX_PAGES - 1;
/// Votes a page may send in a second: a student changing their mind, not a script.
pub const VOTES_PER_SECOND: f64 = 4.0;

/// A page's votes, bounded to [`VOTES_PER_SECOND`] on average with bursts of as many: a token
/// bucket, so that votes spaced a little under a quarter of a second apart by the network's
/// jitter are all taken, where a count per calendar second would refuse some. Past it a vote
/// is refused (the page is told) and the one before stands.
pub struct VoteRate {
    tokens: f64,
    at: std::time::Instant,
}

impl VoteRate {
    pub fn new(now: std::time::Instant) -> VoteRate {
        VoteRate { tokens: VOTES_PER_SECOND, at: now }
    }

    /// Whether a vote at `now` is taken.
    pub fn take(&mut self, now: std::time::Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * VOTES_PER_SECOND;
        self.tokens = (self.tokens + refill).min(VOTES_PER_SECOND);
        self.at = now;
        let taken = self.tokens >= 1.0;
        if taken {
            self.tokens -= 1.0;
        }
        taken
    }
}

/// A lesson id longer than this is not one of ours.
const MAX_LESSON_ID_BYTES: usize = 64;

pub struct Room {
    /// Six letters or digits, in the students' link (`?room=CODE`).
    pub code: String,
    /// 128 random bits in hex, in the presenter's link's fragment only.
    secret: String,
    state: watch::Sender<Option<ClassState>>,
    /// Pages in the students' places.
    pages: AtomicUsize,
    /// The place kept for the presenter is taken.
    presenter_seated: AtomicBool,
    /// Numbers the pages' places, so that a vote is the place's.
    next_page: AtomicU64,
    /// The next round's id: rounds are numbered across the room, never twice.
    next_round: AtomicU32,
    /// The question of the presenter's step and the votes on it.
    ballot: Mutex<Ballot>,
    /// The ballot, for the presenter's page: changed by every vote (`None` until the presenter
    /// is on a lesson).
    votes: watch::Sender<Option<ClassVotes>>,
    /// The ballot as the students' pages see it: changed only when the question, its round or
    /// the revealed counts change, so that a vote wakes the presenter's page, not the room's.
    shown: watch::Sender<Option<ClassVotes>>,
    /// How many choices each step of each bundled lesson asks for (0: no question): a vote is
    /// checked against the lesson the room is on, not against what a page says it has.
    questions: HashMap<&'static str, Vec<usize>>,
}

/// A page's place in the room, given back when it leaves.
pub struct Seat<'a> {
    room: &'a Room,
    presenter: bool,
    /// The place's number: its vote is held under it.
    pub page: u64,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        match self.presenter {
            true => self.room.presenter_seated.store(false, Ordering::SeqCst),
            false => {
                self.room.pages.fetch_sub(1, Ordering::SeqCst);
                // A student who leaves takes their vote on an open round with them (they may
                // come back and vote again); a revealed round's counts stay as shown.
                self.room.update_ballot(|ballot| {
                    if !ballot.revealed {
                        ballot.open.remove(&self.page);
                    }
                });
            }
        }
    }
}

/// The votes on one step's question.
#[derive(Default)]
struct Ballot {
    lesson: String,
    step: u32,
    /// The question's choices; 0 when the step asks none.
    choices: usize,
    /// The open or last round's id, unique in the room.
    round: u32,
    /// Rounds of this question opened so far.
    asked: u32,
    /// The presenter shows the answer: the round is closed.
    revealed: bool,
    /// The open round's vote of each page, by its place's number.
    open: HashMap<u64, u8>,
    /// The closed rounds' counts, oldest first.
    closed: Vec<Vec<u32>>,
}

impl Ballot {
    fn counts(&self) -> Vec<u32> {
        let mut counts = vec![0u32; self.choices];
        for &choice in self.open.values() {
            if let Some(count) = counts.get_mut(choice as usize) {
                *count += 1;
            }
        }
        counts
    }

    fn public(&self, students: usize) -> ClassVotes {
        ClassVotes {
            lesson: self.lesson.clone(),
            step: self.step,
            round: self.round,
            asked: self.asked,
            revealed: self.revealed,
            students: students as u32,
            answered: self.open.len() as u32,
            rounds: self.closed.clone(),
        }
    }
}

impl Room {
    /// A room with a fresh code and secret from the kernel's random source.
    pub fn new() -> std::io::Result<Room> {
        let mut bytes = [0u8; 22];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
        // No 0/O or 1/I/L: the code is read off a projector and typed.
        const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
        let code =
            bytes[..6].iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
        let secret = bytes[6..].iter().map(|b| format!("{b:02x}")).collect();
        Ok(Room::with(code, secret))
    }

    fn with(code: String, secret: String) -> Room {
        Room {
            code,
            secret,
            state: watch::channel(None).0,
            pages: AtomicUsize::new(0),
            presenter_seated: AtomicBool::new(false),
            next_page: AtomicU64::new(0),
            next_round: AtomicU32::new(0),
            ballot: Mutex::new(Ballot::default()),
            votes: watch::channel(None).0,
            shown: watch::channel(None).0,
            questions: lesson::BUNDLED
                .iter()
                .filter_map(|(id, text)| {
                    let parsed = lesson::parse(id, text).ok()?;
                    let steps = parsed.steps.iter().map(|step| {
                        step.question.as_ref().map_or(0, |question| question.choices.len())
                    });
                    Some((*id, steps.collect()))
                })
                .collect(),
        }
    }

    /// The presenter's link's fragment.
    pub fn presenter_fragment(&self) -> String {
        format!("presenter={}", self.secret)
    }

    /// Whether `secret` is the presenter's (compared in constant time).
    pub fn is_presenter(&self, secret: &str) -> bool {
        let (a, b) = (secret.as_bytes(), self.secret.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// One of the students' places for a page that has just come (every page comes as a
    /// student; the presenter moves to its own place when it presents), or why not.
    pub fn enter(&self) -> Result<Seat<'_>, String> {
        let before = self.pages.fetch_add(1, Ordering::SeqCst);
        let page = self.next_page.fetch_add(1, Ordering::Relaxed);
        let seat = Seat { room: self, presenter: false, page };
        if before >= MAX_STUDENTS {
            return Err(format!(
                "the room is full ({MAX_STUDENTS} pages and the presenter's); ask the presenter \
                 to start a second one"
            ));
        }
        self.update_ballot(|_| {});
        Ok(seat)
    }

    /// The place kept for the presenter, for a page that proved it is the presenter's (the
    /// caller then lets go of the student's place it held, if any). `None` if a page of the
    /// presenter's already holds it (a second tab of the presenter link).
    pub fn seat_presenter(&self) -> Option<Seat<'_>> {
        let free =
            self.presenter_seated.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst);
        let page = self.next_page.fetch_add(1, Ordering::Relaxed);
        free.is_ok().then_some(Seat { room: self, presenter: true, page })
    }

    /// The presenter moved: every page gets the new state (the last one, if they come later).
    /// A page that is slow to take it gets only the newest (a watch channel keeps one value), so
    /// a burst of key presses costs each page one message, not one per press.
    pub fn set(&self, state: ClassState) -> Result<(), String> {
        if state.lesson.len() > MAX_LESSON_ID_BYTES || state.step > 1000 {
            return Err("that is not a lesson's state".into());
        }
        // The state first: a page told the counts of a revealed round is told the answer is
        // shown first.
        let (lesson, step, revealed) = (state.lesson.clone(), state.step, state.revealed);
        self.state.send_replace(Some(state));
        self.update_ballot(|ballot| {
            if (ballot.lesson.as_str(), ballot.step) != (lesson.as_str(), step) {
                let choices = self
                    .questions
                    .get(lesson.as_str())
                    .and_then(|steps| steps.get(step as usize).copied());
                *ballot = Ballot {
                    lesson: lesson.clone(),
                    step,
                    choices: choices.unwrap_or(0),
                    round: self.next_round.fetch_add(1, Ordering::Relaxed),
                    asked: 1,
                    ..Ballot::default()
                };
            } else if revealed && !ballot.revealed {
                // The answer is shown: the round closes, and its counts are shown with it.
                let counts = ballot.counts();
                ballot.closed.push(counts);
                if ballot.closed.len() > MAX_VOTE_ROUNDS {
                    ballot.closed.remove(0);
                }
            } else if !revealed && ballot.revealed {
                // Hidden again on the same step: "vote again", after the class discussed.
                ballot.round = self.next_round.fetch_add(1, Ordering::Relaxed);
                ballot.asked += 1;
                ballot.open.clear();
            }
            ballot.revealed = revealed;
        });
        Ok(())
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<ClassState>> {
        self.state.subscribe()
    }

    /// The class's votes for the presenter's page: whenever they change.
    pub fn subscribe_votes(&self) -> watch::Receiver<Option<ClassVotes>> {
        self.votes.subscribe()
    }

    /// The class's votes for a student's page: whenever what it shows changes (the question, its
    /// round, the revealed counts); how many have answered is as of that change.
    pub fn subscribe_shown_votes(&self) -> watch::Receiver<Option<ClassVotes>> {
        self.shown.subscribe()
    }

    /// A student's page (the place numbered `page`) answers the question of `step` of `lesson`
    /// in round `round`, or why the vote is not taken.
    pub fn vote(
        &self,
        page: u64,
        lesson: &str,
        step: u32,
        round: u32,
        choice: u8,
    ) -> Result<(), String> {
        let mut refusal = None;
        self.update_ballot(|ballot| {
            refusal = if (ballot.lesson.as_str(), ballot.step) != (lesson, step) {
                Some("the presenter is on another step now: vote on the question shown".into())
            } else if ballot.choices == 0 {
                Some("this step asks no question".into())
            } else if round != ballot.round {
                Some("that vote was for a round that has ended: choose your answer again".into())
            } else if ballot.revealed {
                Some("the answer is shown: votes are taken until the presenter reveals it".into())
            } else if usize::from(choice) >= ballot.choices {
                Some(format!("this question has {} choices", ballot.choices))
            } else {
                ballot.open.insert(page, choice);
                None
            };
        });
        refusal.map_or(Ok(()), Err)
    }

    /// Changes the ballot, then tells every page its counts if they changed.
    fn update_ballot(&self, change: impl FnOnce(&mut Ballot)) {
        let mut ballot = self.ballot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        change(&mut ballot);
        if ballot.lesson.is_empty() {
            return; // the presenter has not opened a lesson yet
        }
        let now = ballot.public(self.pages.load(Ordering::SeqCst));
        self.shown.send_if_modified(|shown| {
            // All but the count of pages and of answers, which only the presenter's shows.
            let changed = shown.as_ref().is_none_or(|shown| {
                ClassVotes { students: now.students, answered: now.answered, ..shown.clone() }
                    != now
            });
            if changed {
                *shown = Some(now.clone());
            }
            changed
        });
        self.votes.send_if_modified(|votes| {
            let changed = votes.as_ref() != Some(&now);
            *votes = Some(now);
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use ackscope_shared::wire::ClassView;

    use super::*;

    fn state(step: u32) -> ClassState {
        let view = ClassView::default();
        ClassState { lesson: "forty-ms".into(), step, revealed: false, recording: false, view }
    }

    #[test]
    fn codes_and_secrets_are_fresh_and_only_the_secret_presents() {
        let (a, b) = (Room::new().unwrap(), Room::new().unwrap());
        assert_eq!(a.code.len(), 6);
        assert_ne!(a.code, b.code, "fresh codes (a 1 in 887 million repeat)");
        let secret = a.presenter_fragment().trim_start_matches("presenter=").to_string();
        assert_eq!(secret.len(), 32);
        assert!(a.is_presenter(&secret));
        assert!(
            !a.is_presenter(&secret[..31]) && !a.is_presenter(&a.code) && !b.is_presenter(&secret)
        );
    }

    #[test]
    fn the_room_is_bounded_and_a_seat_is_given_back() {
        let room = Room::with("ABC234".into(), "x".repeat(32));
        let seats: Vec<_> = (0..MAX_STUDENTS).map(|_| room.enter().unwrap()).collect();
        let full = room.enter().err().unwrap();
        assert!(full.contains("full"), "{full}");
        drop(seats);
        assert!(room.enter().is_ok(), "places come back as pages leave");
    }

    #[test]
    fn the_presenters_place_is_kept_whoever_fills_the_room() {
        let room = Room::with("ABC234".into(), "x".repeat(32));
        // The presenter came first, as a student, then presented: its place is given back.
        let first = room.enter().unwrap();
        let presenter = room.seat_presenter().expect("the kept place");
        drop(first);
        let students: Vec<_> = (0..MAX_STUDENTS).map(|_| room.enter().unwrap()).collect();
        assert!(room.enter().is_err(), "{MAX_STUDENTS} students fill it");
        // A second tab of the presenter link keeps what it had; the place is one.
        assert!(room.seat_presenter().is_none());
        drop(presenter);
        // The presenter's page comes back to a full room: its place is still there.
        assert!(room.seat_presenter().is_some());
        drop(students);
    }

    #[test]
    fn late_joiners_get_the_last_state_and_slow_pages_only_the_newest() {
        let room = Room::with("ABC234".into(), "x".repeat(32));
        let mut early = room.subscribe();
        room.set(state(1)).unwrap();
        room.set(state(2)).unwrap();
        let late = room.subscribe();
        assert_eq!(late.borrow().as_ref().map(|s| s.step), Some(2), "caught up at once");
        assert!(early.has_changed().unwrap());
        assert_eq!(early.borrow_and_update().as_ref().map(|s| s.step), Some(2), "one message");
        let too_long = ClassState { lesson: "x".repeat(65), ..state(1) };
        assert!(room.set(too_long).is_err());
    }

    /// The votes the room publishes now.
    fn votes(room: &Room) -> ClassVotes {
        room.subscribe_votes().borrow().clone().expect("the room is on a lesson")
    }

    fn at(step: u32, revealed: bool) -> ClassState {
        ClassState { revealed, ..state(step) }
    }

    #[test]
    fn votes_are_counted_one_per_page_and_shown_only_once_revealed() {
        let room = Room::with("ABC234".into(), "x".repeat(32));
        assert!(room.subscribe_votes().borrow().is_none(), "no lesson, no ballot");
        let (alice, bob, carol) =
            (room.enter().unwrap(), room.enter().unwrap(), room.enter().unwrap());
        // forty-ms's first step asks a question of three choices.
        room.set(at(0, false)).unwrap();
        room.vote(alice.page, "forty-ms", 0, 0, 1).unwrap();
        room.vote(bob.page, "forty-ms", 0, 0, 0).unwrap();
        room.vote(bob.page, "forty-ms", 0, 0, 1).unwrap();
        let open = votes(&room);
        assert_eq!(
            (open.students, open.answered),
            (3, 2),
            "a page's second vote replaces its first"
        );
        let shown = room.subscribe_shown_votes();
        assert_eq!(shown.borrow().as_ref().map(|v| v.answered), Some(0), "as of the question");
        assert!(open.rounds.is_empty(), "an open round's counts are shown to no one");
        // Carol leaves before voting; the room is two now.
        drop(carol);
        assert_eq!(votes(&room).students, 2);
        room.set(at(0, true)).unwrap();
        let shown = votes(&room);
        assert_eq!(shown.rounds, vec![vec![0, 2, 0]]);
        let late = room.vote(alice.page, "forty-ms", 0, 0, 2).unwrap_err();
        assert!(late.contains("the answer is shown"), "{late}");
        // Bob leaves after the reveal: what was shown stays.
        drop(bob);
        assert_eq!(votes(&room).rounds, vec![vec![0, 2, 0]]);
        drop(alice);
    }

    #[test]
    fn vote_again_opens_a_round_and_keeps_the_ones_before() {
        let room = Room::with("ABC234".into(), "x".repeat(32));
        let alice = room.enter().unwrap();
        room.set(at(0, false)).unwrap();
        room.vote(alice.page, "forty-ms", 0, 0, 0).unwrap();
        room.set(at(0, true)).unwrap();
        // The view moving (the same state again) changes nothing.
        room.set(at(0, true)).unwrap();
        room.set(at(0, false)).unwrap();
        let again = votes(&room);
        assert_eq!((again.round, again.asked, again.answered, again.revealed), (1, 2, 0, false));
        let stale = room.vote(alice.page, "forty-ms", 0, 0, 2).unwrap_err();
        assert!(stale.contains("a round that has ended"), "{stale}");
        room.vote(alice.page, "forty-ms", 0, 1, 2).unwrap();
        room.set(at(0, true)).unwrap();
        assert_eq!(votes(&room).rounds, vec![vec![1, 0, 0], vec![0, 0, 1]]);
        assert!(votes(&room).revealed);
        // Another step starts afresh.
        room.set(at(1, false)).unwrap();
        let next = votes(&room);
        assert_eq!((next.step, next.asked, next.rounds.len()), (1, 1, 0));
        let old = room.vote(alice.page, "forty-ms", 0, 1, 0).unwrap_err();
        assert!(old.contains("another step"), "{old}");
        // Back on the first step: a new round, which a late vote of its first visit is not.
        room.set(at(0, false)).unwrap();
        let back = votes(&room);
        assert!(back.round > next.round, "{back:?}");
        let late = room.vote(alice.page, "forty-ms", 0, 1, 0).unwrap_err();
        assert!(late.contains("a round that has ended"), "{late}");
    }

    #[test]
    fn a_vote_must_answer_the_rooms_question() {
        let room = Room::with("ABC234".into(), "x".repeat(32));
        let alice = room.enter().unwrap();
        room.set(at(0, false)).unwrap();
        let beyond = room.vote(alice.page, "forty-ms", 0, 0, 3).unwrap_err();
        assert!(beyond.contains("3 choices"), "{beyond}");
        room.set(ClassState { lesson: "not-bundled".into(), ..at(0, false) }).unwrap();
        let none = room.vote(alice.page, "not-bundled", 0, 0, 0).unwrap_err();
        assert!(none.contains("asks no question"), "{none}");
        assert_eq!(votes(&room).answered, 0);
    }

    #[test]
    fn a_page_votes_four_times_a_second_with_room_for_jitter() {
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let mut rate = VoteRate::new(start);
        let burst = (0..6).filter(|_| rate.take(start)).count();
        assert_eq!(burst, 4, "a burst of as many as a second's");
        assert!(rate.take(start + Duration::from_millis(250)), "one more a quarter second on");
        // Votes 0.3 s apart on average, some closer (jitter), are all taken.
        let mut rate = VoteRate::new(start);
        let gaps = [300, 150, 450, 100, 300, 300, 120, 480];
        let mut at = start;
        for gap in gaps {
            at += Duration::from_millis(gap);
            assert!(rate.take(at), "a vote {gap} ms after the last");
        }
    }

    #[test]
    fn a_room_keeps_a_bounded_number_of_rounds() {
        let room = Room::with("ABC234".into(), "x".repeat(32));
        for _ in 0..MAX_VOTE_ROUNDS + 3 {
            room.set(at(0, false)).unwrap();
            room.set(at(0, true)).unwrap();
            // Past the kept rounds the counts shown can stay the same (nobody voted): the
            // students' pages are still told the answer is shown.
            let shown = room.subscribe_shown_votes().borrow().clone().unwrap();
            assert!(shown.revealed, "{shown:?}");
        }
        let kept = votes(&room);
        assert_eq!(kept.rounds.len(), MAX_VOTE_ROUNDS);
        assert_eq!(kept.asked as usize, MAX_VOTE_ROUNDS + 3);
    }
}
