//! What the timeline panel is computed from and what it shows, as plain data: the plot's sizes,
//! the selected run's facts, the rows the filter keeps, the run-clock lanes and one page of the
//! plot. The panel ([`render`](super::render)) and its parts (`find`, `overview`, `png`,
//! [`tables`](super::tables)) all read these, so they live below every one of them.

use std::sync::Arc;

use super::canvas::{Frame, Rect};
use super::clock::Lanes;
use super::layout::{RowLayout, RIGHT_MARGIN};
use super::rows::{Facts, Filter, RowSet};
use super::scale::Scale;
use crate::state::RunKey;

/// Room left of the plot for the request number (or the lane's name).
pub const GUTTER: f64 = 88.0;
/// The plot itself: time maps onto this many pixels.
pub const PLOT_WIDTH: f64 = 720.0;
pub const CANVAS_WIDTH: f64 = GUTTER + PLOT_WIDTH + RIGHT_MARGIN;
/// Rows on one page of the plot.
pub const PAGE_ROWS: usize = 20;
pub(super) const MAX_TICK_INTERVALS: u64 = 6;

/// What the views of one run are computed from, cheap to compare: recomputed only when the run
/// or its event count changes, not on every redraw of the page.
#[derive(Clone, Debug)]
pub struct RunFacts {
    pub key: RunKey,
    pub events: u64,
    pub facts: Arc<Facts>,
    /// The aligned view's fitted scale.
    pub home: Scale,
}

impl PartialEq for RunFacts {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.events == other.events
    }
}

/// The run-clock lanes of a run, with what they were made from.
#[derive(Clone, Debug)]
pub(super) struct RunLanes {
    pub(super) key: RunKey,
    pub(super) events: u64,
    pub(super) lanes: Arc<Lanes>,
}

impl PartialEq for RunLanes {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.events == other.events
    }
}

/// The row list the filter keeps, with what it was made from.
#[derive(Clone, Debug, Default)]
pub struct RowList {
    pub of: Option<(RunKey, u64)>,
    pub filter: Filter,
    pub rows: RowSet,
}

impl PartialEq for RowList {
    fn eq(&self, other: &Self) -> bool {
        self.of == other.of && self.filter == other.filter
    }
}

/// What one page of the plot shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Page {
    pub(super) frame: Frame,
    pub(super) rows: Vec<RowLayout>,
    pub(super) lanes: Vec<(f64, String)>,
    pub(super) scale: Option<Scale>,
    /// The whole domain: what zooming out and panning stop at.
    pub(super) home: Option<Scale>,
    /// Rows (or lanes) in all, and the first shown.
    pub(super) total: usize,
    pub(super) top: usize,
    pub(super) stalled_marks: usize,
    pub(super) waited_marks: usize,
    /// For the run-clock view: the request of each drawn bar, to select by clicking.
    pub(super) hits: Vec<(Rect, u32)>,
}
