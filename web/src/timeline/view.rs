//! The timeline's view state and what each key does to it: pure, no DOM.
//!
//! One struct holds where the user is looking (mode, time window, first row, selection); input
//! handlers turn keys and wheel turns into [`Action`]s and [`ViewState::act`] applies them, so
//! navigation is tested without a browser.

use ackscope_shared::wire::ClassView;

use super::scale::Scale;

/// The two ways to lay out the same requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// One row per request, each from its own start: story 1's stalls line up as a column.
    #[default]
    Aligned,
    /// Lanes per connection and side, on the run's one clock.
    RunClock,
}

impl Mode {
    pub fn word(self) -> &'static str {
        match self {
            Mode::Aligned => "aligned",
            Mode::RunClock => "run-clock",
        }
    }
}

/// What an input asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Zoom by a factor (below 1: in) around a point of the plot (0..1 of its width).
    Zoom {
        factor: f64,
        at: f64,
    },
    /// Pan by a share of the window's width (positive: later).
    Pan(f64),
    /// Scroll the rows by this many (positive: down).
    Scroll(i64),
    /// Back to the whole domain and the first row.
    Reset,
    /// The window fitted to the selected request.
    FitSelection,
    NextStall,
    PrevStall,
    ToggleHelp,
}

/// One zoom step of the keys: a fifth of the window each press.
const KEY_ZOOM: f64 = 0.8;
/// One pan step of the keys: a fifth of the window each press.
const KEY_PAN: f64 = 0.2;

/// The action of a key, by `KeyboardEvent.code` for the letters and +/- (so that W/A/S/D work
/// on any keyboard layout), by `key` for `?`. `None`: the key is not the timeline's.
pub fn key_action(code: &str, key: &str) -> Option<Action> {
    let action = match code {
        "KeyW" | "Equal" | "NumpadAdd" => Action::Zoom { factor: KEY_ZOOM, at: 0.5 },
        "KeyS" | "Minus" | "NumpadSubtract" => Action::Zoom { factor: 1.0 / KEY_ZOOM, at: 0.5 },
        "KeyA" => Action::Pan(-KEY_PAN),
        "KeyD" => Action::Pan(KEY_PAN),
        "Digit0" | "Numpad0" => Action::Reset,
        "KeyF" => Action::FitSelection,
        "KeyN" => Action::NextStall,
        "KeyP" => Action::PrevStall,
        "ArrowDown" => Action::Scroll(1),
        "ArrowUp" => Action::Scroll(-1),
        "PageDown" => Action::Scroll(PAGE_SCROLL),
        "PageUp" => Action::Scroll(-PAGE_SCROLL),
        _ if key == "?" => Action::ToggleHelp,
        _ => return None,
    };
    Some(action)
}

/// Rows a Page Up / Page Down moves (a page of the plot, less one row of overlap).
pub const PAGE_SCROLL: i64 = 19;

/// The keys `?` lists: (keys, what they do).
pub const KEY_HELP: [(&str, &str); 10] = [
    ("W / S, + / -, Ctrl+wheel", "zoom in / out (time)"),
    ("A / D, Shift+wheel, drag", "pan earlier / later"),
    ("wheel, ↑ / ↓, Page Up / Down", "scroll rows"),
    ("0", "reset the view"),
    ("f", "fit the selected request"),
    ("n / p", "next / previous stall"),
    ("click a row", "select that request"),
    ("overview strip", "click or drag to go there"),
    ("Enter in \"go to\"", "go to request N"),
    ("?", "show or hide these keys"),
];

/// Where the user is looking.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ViewState {
    pub mode: Mode,
    /// The time window, `(from_ns, domain_ns)`; `None`: the whole fitted domain.
    pub window: Option<(u64, u64)>,
    /// The first visible row (a position in the row list).
    pub top: usize,
    /// The selected request.
    pub selected: Option<u32>,
    /// The stall `n` / `p` last went to (an index into the attribution's stalls).
    pub stall: Option<usize>,
    pub help: bool,
}

impl ViewState {
    /// The scale the plot draws with, given the fitted (home) scale.
    pub fn scale(&self, home: Scale) -> Scale {
        match self.window {
            Some((from, domain)) => Scale::window(from, domain, home.width_px()),
            None => home,
        }
    }

    /// Applies a navigation action that needs only the scales and the row count. Stall steps
    /// and fitting need the run's data; [`ViewState::act`] returns them to the caller.
    pub fn act(&mut self, action: Action, home: Scale, rows: usize, page: usize) -> Option<Action> {
        let limit = home.to_ns();
        let scale = self.scale(home);
        match action {
            Action::Zoom { factor, at } => {
                let zoomed = scale.zoomed(factor, at * scale.width_px(), limit);
                self.set_window(zoomed, home);
            }
            Action::Pan(share) => {
                let panned = scale.panned(share * scale.width_px(), limit);
                self.set_window(panned, home);
            }
            Action::Scroll(by) => self.scroll_by(by, rows, page),
            Action::Reset => {
                self.window = None;
                self.top = 0;
            }
            Action::ToggleHelp => self.help = !self.help,
            Action::FitSelection | Action::NextStall | Action::PrevStall => return Some(action),
        }
        None
    }

    fn set_window(&mut self, scale: Scale, home: Scale) {
        let whole = scale.from_ns() == 0 && scale.domain_ns() >= home.domain_ns();
        self.window = (!whole).then(|| (scale.from_ns(), scale.domain_ns()));
    }

    /// Shows `from_ns ..= to_ns` with a margin of a tenth on each side.
    pub fn fit(&mut self, from_ns: u64, to_ns: u64, home: Scale) {
        let span = to_ns.saturating_sub(from_ns).max(1);
        let margin = span / 10;
        let from = from_ns.saturating_sub(margin);
        let scale = Scale::window(from, span + 2 * margin, home.width_px());
        self.set_window(scale, home);
    }

    fn scroll_by(&mut self, by: i64, rows: usize, page: usize) {
        let last_top = rows.saturating_sub(page);
        let top = (self.top as i64 + by).clamp(0, last_top as i64);
        self.top = top as usize;
    }

    /// What a class follows of this view ([`ClassView`]): the layout, the time window and the
    /// selected request; not the scroll position or the keys' help, which are each page's own.
    pub fn class_view(&self) -> ClassView {
        ClassView {
            run_clock: self.mode == Mode::RunClock,
            window: self.window.map(|(from, domain)| (from, from.saturating_add(domain))),
            selected: self.selected,
        }
    }

    /// Shows what the presenter's view shows ([`ViewState::class_view`]).
    pub fn follow(&mut self, presenter: ClassView) {
        self.mode = if presenter.run_clock { Mode::RunClock } else { Mode::Aligned };
        self.window =
            presenter.window.filter(|(from, to)| to > from).map(|(from, to)| (from, to - from));
        if self.selected != presenter.selected {
            self.selected = presenter.selected;
            self.stall = None;
        }
    }

    /// Scrolls so that row `position` is visible, near the middle if it was not.
    pub fn reveal(&mut self, position: usize, rows: usize, page: usize) {
        if position < self.top || position >= self.top + page {
            self.top = position.saturating_sub(page / 2);
        }
        self.scroll_by(0, rows, page);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::MS;

    #[test]
    fn keys_map_by_code_so_any_layout_works() {
        assert_eq!(key_action("KeyW", "z"), Some(Action::Zoom { factor: KEY_ZOOM, at: 0.5 }));
        assert_eq!(key_action("KeyA", "q"), Some(Action::Pan(-KEY_PAN)), "AZERTY's Q is KeyA");
        assert_eq!(key_action("KeyN", "n"), Some(Action::NextStall));
        assert_eq!(key_action("Slash", "?"), Some(Action::ToggleHelp));
        assert_eq!(key_action("KeyX", "x"), None);
    }

    #[test]
    fn a_followed_view_is_the_presenters() {
        let home = Scale::fit(100 * MS, 1000.0);
        let mut presenter =
            ViewState { mode: Mode::RunClock, selected: Some(7), ..ViewState::default() };
        presenter.act(Action::Zoom { factor: 0.5, at: 0.0 }, home, 100, 20);
        let mut student = ViewState { top: 40, stall: Some(3), ..ViewState::default() };
        student.follow(presenter.class_view());
        assert_eq!(student.class_view(), presenter.class_view());
        assert_eq!(
            (student.mode, student.window, student.selected),
            (Mode::RunClock, Some((0, 50 * MS)), Some(7))
        );
        assert_eq!(
            (student.top, student.stall),
            (40, None),
            "its own scroll kept, the stall step reset"
        );
        // An empty or reversed window from a broken message is the whole domain.
        student.follow(ClassView { window: Some((9, 9)), ..ClassView::default() });
        assert_eq!((student.mode, student.window), (Mode::Aligned, None));
    }

    #[test]
    fn zoom_pan_scroll_and_reset() {
        let home = Scale::fit(100 * MS, 1000.0);
        let mut view = ViewState::default();
        view.act(Action::Zoom { factor: 0.5, at: 0.0 }, home, 100, 20);
        assert_eq!(view.window, Some((0, 50 * MS)));
        view.act(Action::Pan(0.5), home, 100, 20);
        assert_eq!(view.window, Some((25 * MS, 50 * MS)));
        view.act(Action::Zoom { factor: 4.0, at: 0.5 }, home, 100, 20);
        assert_eq!(view.window, None, "zoomed out to the whole domain is home again");
        view.act(Action::Scroll(200), home, 100, 20);
        assert_eq!(view.top, 80, "the last page is full");
        view.act(Action::Scroll(-300), home, 100, 20);
        assert_eq!(view.top, 0);
        view.act(Action::Scroll(5), home, 10, 20);
        assert_eq!(view.top, 0, "fewer rows than a page do not scroll");
        view.window = Some((1, 2));
        view.top = 7;
        view.act(Action::Reset, home, 100, 20);
        assert_eq!((view.window, view.top), (None, 0));
        assert_eq!(view.act(Action::NextStall, home, 100, 20), Some(Action::NextStall));
    }

    #[test]
    fn reveal_brings_a_row_to_the_middle_and_fit_frames_a_request() {
        let home = Scale::fit(100 * MS, 1000.0);
        let mut view = ViewState::default();
        view.reveal(999_999, 1_000_000, 20);
        assert_eq!(view.top, 1_000_000 - 20, "the last row is on the last page");
        view.reveal(500_000, 1_000_000, 20);
        assert_eq!(view.top, 500_000 - 10);
        view.reveal(500_005, 1_000_000, 20);
        assert_eq!(view.top, 500_000 - 10, "already visible: no jump");
        view.fit(10 * MS, 60 * MS, home);
        assert_eq!(view.window, Some((5 * MS, 60 * MS)));
    }
}
