//! The app's state behind one version signal, and the per-frame batching of live messages.
//!
//! The socket ([`crate::ws`]) decodes each message and [`crate::state::apply`] applies it to the
//! one [`AppState`] kept in a [`StoredValue`], outside the reactive graph. At most once per
//! animation frame a single version signal is bumped; every view reads the state through
//! [`Store::read`], which subscribes to that signal. A burst of thousands of events is therefore
//! one redraw, not thousands.

use std::cell::Cell;
use std::rc::Rc;

use ackscope_shared::wire::{ToBrowser, WireError};
use leptos::prelude::*;

use crate::state::{apply, AppState};

/// The app's state and the signal that says it changed. Copy, so every closure can hold one.
#[derive(Clone, Copy)]
pub struct Store {
    state: StoredValue<AppState, LocalStorage>,
    version: RwSignal<u64>,
}

impl Store {
    pub fn new(state: AppState) -> Store {
        Store { state: StoredValue::new_local(state), version: RwSignal::new(0) }
    }

    /// Reads the state and re-runs the calling view when it changes.
    pub fn read<T>(&self, f: impl FnOnce(&AppState) -> T) -> T {
        self.version.track();
        self.state.with_value(f)
    }

    /// What a view reads, derived from the state by `f` and kept until it changes: the view is
    /// handed this memo, not the store, and redraws only when its own model changed (not for
    /// every frame of a run streaming into another part of the page).
    pub fn memo<T>(self, f: impl Fn(&AppState) -> T + Send + Sync + 'static) -> Memo<T>
    where
        T: PartialEq + Send + Sync + 'static,
    {
        Memo::new(move |_| self.read(&f))
    }

    /// Reads the state without subscribing: for event handlers and tests.
    pub fn read_untracked<T>(&self, f: impl FnOnce(&AppState) -> T) -> T {
        self.state.with_value(f)
    }

    /// Changes the state and redraws now: for the user's own actions, which are rare.
    pub fn update(&self, f: impl FnOnce(&mut AppState)) {
        self.state.update_value(f);
        self.changed();
    }

    /// As [`Store::update`], for work that finishes later (a file read): by then the page may be
    /// gone, and then there is nothing to change.
    pub fn try_update(&self, f: impl FnOnce(&mut AppState)) {
        if self.state.try_update_value(f).is_some() {
            self.version.try_update(|version| *version += 1);
        }
    }

    /// As [`Store::try_update`], returning what `f` returns (`None`: the page is gone).
    pub fn try_update_with<T>(&self, f: impl FnOnce(&mut AppState) -> T) -> Option<T> {
        let result = self.state.try_update_value(f)?;
        self.version.try_update(|version| *version += 1);
        Some(result)
    }

    /// Changes the state without redrawing, if the page is still there (`None` if not); the
    /// caller redraws later.
    pub fn try_update_quietly<T>(&self, f: impl FnOnce(&mut AppState) -> T) -> Option<T> {
        self.state.try_update_value(f)
    }

    /// Changes the state without redrawing; the caller redraws later (see [`FrameBatch`]).
    fn update_quietly(&self, f: impl FnOnce(&mut AppState)) {
        self.state.update_value(f);
    }

    fn changed(&self) {
        self.version.update(|version| *version += 1);
    }
}

/// Coalesces redraws: however many messages arrive between two frames, the views run once.
#[derive(Clone)]
pub struct FrameBatch {
    store: Store,
    scheduled: Rc<Cell<bool>>,
}

impl FrameBatch {
    pub fn new(store: Store) -> FrameBatch {
        FrameBatch { store, scheduled: Rc::new(Cell::new(false)) }
    }

    pub fn apply(&self, message: Result<ToBrowser, WireError>) {
        self.store.update_quietly(|state| match message {
            Ok(message) => apply(state, message),
            Err(error) => state.bad_message(&error),
        });
        if self.scheduled.replace(true) {
            return;
        }
        let batch = self.clone();
        request_animation_frame(move || {
            batch.scheduled.set(false);
            batch.store.changed();
        });
    }
}
