//! A class's room (`ackscope class`): the presenter's lesson state, fanned out to every page.
//!
//! As in reveal.js's multiplex, but with what it lacks: the presenter proves itself with a
//! random secret that its page reads from the URL's fragment (never sent in a request, so no
//! server or proxy log sees it) and sends over the WebSocket; students need only the short room
//! code in the link; the room keeps the last state, so a late joiner catches up at once; and the
//! room, its messages and their rate are bounded.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ackscope_shared::wire::ClassState;
use tokio::sync::watch;

/// Pages in one room at most: a large lecture hall, with the presenter's.
pub const MAX_PAGES: usize = 301;
/// The pages other than the presenter's: one place is always kept for the presenter, so that
/// students (or anyone with the room code) filling the room cannot lock the presenter out.
pub const MAX_STUDENTS: usize = MAX_PAGES - 1;
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
}

/// A page's place in the room, given back when it leaves.
pub struct Seat<'a> {
    room: &'a Room,
    presenter: bool,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        match self.presenter {
            true => self.room.presenter_seated.store(false, Ordering::SeqCst),
            false => _ = self.room.pages.fetch_sub(1, Ordering::SeqCst),
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
        let seat = Seat { room: self, presenter: false };
        if before >= MAX_STUDENTS {
            return Err(format!(
                "the room is full ({MAX_STUDENTS} pages and the presenter's); ask the presenter \
                 to start a second one"
            ));
        }
        Ok(seat)
    }

    /// The place kept for the presenter, for a page that proved it is the presenter's (the
    /// caller then lets go of the student's place it held, if any). `None` if a page of the
    /// presenter's already holds it (a second tab of the presenter link).
    pub fn seat_presenter(&self) -> Option<Seat<'_>> {
        let free =
            self.presenter_seated.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst);
        free.is_ok().then_some(Seat { room: self, presenter: true })
    }

    /// The presenter moved: every page gets the new state (the last one, if they come later).
    /// A page that is slow to take it gets only the newest (a watch channel keeps one value), so
    /// a burst of key presses costs each page one message, not one per press.
    pub fn set(&self, state: ClassState) -> Result<(), String> {
        if state.lesson.len() > MAX_LESSON_ID_BYTES || state.step > 1000 {
            return Err("that is not a lesson's state".into());
        }
        self.state.send_replace(Some(state));
        Ok(())
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<ClassState>> {
        self.state.subscribe()
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
}
