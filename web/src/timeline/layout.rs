//! Which marks each request produces: pure geometry, no DOM.
//!
//! Each request is one row of four lanes: the client's writes and reads, then the server's reads
//! and writes, all on the one clock the probe records both sides with.
//!
//! Every row is aligned at its own request's start, not at the run's clock: the x axis is "ms
//! since this request began". A Nagle x delayed-ACK stall happens at the same point of every
//! exchange, so aligned rows stack the stalls into one red column that is obvious at a glance,
//! where a run-clock axis would scatter them along a diagonal too long to read.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use ackscope_shared::analysis::{RunAnalysis, Span, SpanKind};
use ackscope_shared::attribution::{Stall, StallClass};
use ackscope_shared::overview::extent_ns;
use ackscope_shared::packet_stalls;
use ackscope_shared::{RequestView, Side};

use super::rows::RowSet;
use super::scale::Scale;
use crate::state::Attribution;

pub const LANE_HEIGHT: f64 = 5.0;
pub const LANE_GAP: f64 = 1.0;
pub const ROW_PAD_TOP: f64 = 3.0;
pub const ROW_PAD_BOTTOM: f64 = 4.0;
pub const ROW_HEIGHT: f64 = ROW_PAD_TOP + 4.0 * LANE_HEIGHT + 3.0 * LANE_GAP + ROW_PAD_BOTTOM;
/// A stalled read stands out of its lane by this much above and below.
pub const STALL_OVERHANG: f64 = 2.0;
/// Marks shorter than this are widened to it, so a 5 µs write on a 100 ms axis stays visible.
pub const MIN_BAR_WIDTH: f64 = 1.0;
/// Rough width of one label character at the timeline's font size, to decide whether a label
/// fits inside its bar.
const LABEL_CHAR_WIDTH: f64 = 6.0;
/// Room right of the plot for a label past the last bar (the SVG is this much wider).
pub const RIGHT_MARGIN: f64 = 64.0;
/// Room left of the plot (the request number's gutter) a label before its bar may use.
pub const LEFT_ROOM: f64 = 16.0;
/// Space between a bar's end and its label.
const LABEL_GAP: f64 = 3.0;

/// The four lanes of a row, top to bottom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    ClientWrite,
    ClientRead,
    ServerRead,
    ServerWrite,
}

impl Lane {
    pub const ALL: [Lane; 4] =
        [Lane::ClientWrite, Lane::ClientRead, Lane::ServerRead, Lane::ServerWrite];

    fn index(self) -> usize {
        match self {
            Lane::ClientWrite => 0,
            Lane::ClientRead => 1,
            Lane::ServerRead => 2,
            Lane::ServerWrite => 3,
        }
    }

    /// Top of the lane within its row.
    pub fn y(self) -> f64 {
        ROW_PAD_TOP + self.index() as f64 * (LANE_HEIGHT + LANE_GAP)
    }

    /// A CSS class, also the legend's.
    pub fn class(self) -> &'static str {
        match self {
            Lane::ClientWrite => "client-write",
            Lane::ClientRead => "client-read",
            Lane::ServerRead => "server-read",
            Lane::ServerWrite => "server-write",
        }
    }

    /// The connect handshake is the client's first step before its writes, so it shares their
    /// lane in a colour of its own.
    pub fn of(span: &Span) -> Lane {
        match (span.side, span.kind) {
            (Side::Client, SpanKind::Read) => Lane::ClientRead,
            (Side::Client, _) => Lane::ClientWrite,
            (Side::Server, SpanKind::Write) => Lane::ServerWrite,
            (Side::Server, _) => Lane::ServerRead,
        }
    }
}

/// How a bar is painted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mark {
    /// A syscall, coloured by its lane.
    Call(Lane),
    Connect,
    /// A read the kernel held past the stall threshold after the peer had written its bytes.
    Stalled,
    /// A call that waited past the threshold for another reason the attribution names: the
    /// server thinking before it answered, a slow connect, a write blocked on a full buffer or a
    /// closed window.
    Waited,
}

impl Mark {
    pub fn class(self) -> &'static str {
        match self {
            Mark::Call(lane) => lane.class(),
            Mark::Connect => "connect",
            Mark::Stalled => "stalled",
            Mark::Waited => "waited",
        }
    }

    /// Drawn over its lane's neighbours, taller than the lane.
    fn stands_out(self) -> bool {
        matches!(self, Mark::Stalled | Mark::Waited)
    }
}

/// The word shared's JSON (and the `data-class` attribute) uses for a class: its serde name.
pub fn class_word(class: StallClass) -> &'static str {
    class.code()
}

/// One rectangle, in row coordinates (x from the plot's left edge, y from the row's top).
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub mark: Mark,
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
    /// Hover text: what the call was and how long it took.
    pub title: String,
}

/// Which mark a label belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LabelKind {
    /// A stalled read's held time: "43.7 ms".
    Stall,
    /// Another wait, named: "server think time 30.0 ms".
    Wait,
}

/// Where a label sits against its bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Anchor {
    /// Inside the bar, ending at its right end.
    Inside,
    /// Just right of the bar, starting there.
    After,
    /// Just left of the bar, ending there (when there is no room right of it).
    Before,
}

/// The text printed at a stalled read or another wait, and why it waited.
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub kind: LabelKind,
    /// Where the text anchors (see [`Anchor`]).
    pub x: f64,
    /// The text's baseline.
    pub y: f64,
    pub anchor: Anchor,
    /// "43.7 ms" for a stall; "server think time 30.0 ms" for a wait.
    pub text: String,
    /// "43.7": the waited time alone, for machines.
    pub ms: String,
    /// Why, from shared's attribution; `None` only if it had no entry for this call.
    pub class: Option<StallClass>,
    /// Hover text: "Nagle x delayed ACK: the client wrote 4 bytes, then 2048 bytes; …".
    pub title: String,
}

/// Everything one request draws.
#[derive(Clone, Debug, PartialEq)]
pub struct RowLayout {
    pub req: u32,
    /// Top of the row within the plot.
    pub y: f64,
    pub bars: Vec<Bar>,
    /// Stall labels and wait labels, in the order of their calls.
    pub labels: Vec<Label>,
    /// Where the client had read the whole response, if it has.
    pub done_x: Option<f64>,
}

impl RowLayout {
    /// Changes whenever anything drawn changes: the view re-creates a row only then.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.req.hash(&mut hasher);
        self.y.to_bits().hash(&mut hasher);
        self.done_x.map(f64::to_bits).hash(&mut hasher);
        for bar in &self.bars {
            bar.mark.hash(&mut hasher);
            for value in [bar.x, bar.y, bar.width, bar.height] {
                value.to_bits().hash(&mut hasher);
            }
            bar.title.hash(&mut hasher);
        }
        for label in &self.labels {
            label.kind.hash(&mut hasher);
            label.x.to_bits().hash(&mut hasher);
            label.anchor.hash(&mut hasher);
            label.text.hash(&mut hasher);
            label.class.hash(&mut hasher);
            label.title.hash(&mut hasher);
        }
        hasher.finish()
    }
}

/// The rows of one page of the plot, and how many rows there are in all.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineLayout {
    pub scale: Scale,
    /// The visible rows, `y` counted from the top of the page.
    pub rows: Vec<RowLayout>,
    /// Rows in the row list (the requests the filter keeps), drawn or not.
    pub total: usize,
}

impl TimelineLayout {
    pub fn height(&self) -> f64 {
        self.rows.len() as f64 * ROW_HEIGHT
    }
}

/// Lays out rows `top .. top + page` of the row list `rows` (request ids) with `scale`. Only
/// these rows cost anything, so a run of a million requests draws as fast as one of twenty.
/// `why` is the run's attribution: it names each stall's class and marks the other waits.
pub fn layout_page(
    analysis: &RunAnalysis,
    why: &Attribution,
    rows: &RowSet,
    top: usize,
    page: usize,
    scale: Scale,
) -> TimelineLayout {
    let first = analysis.first_request();
    let requests = analysis.requests();
    let visible = rows.from(top).take(page);
    let laid = visible
        .enumerate()
        .filter_map(|(position, req)| {
            let view = requests.get(req.checked_sub(first)? as usize)?;
            let mut row = layout_row(analysis, req, view, why.of_request(req), &scale)?;
            row.y = position as f64 * ROW_HEIGHT;
            Some(row)
        })
        .collect();
    TimelineLayout { scale, rows: laid, total: rows.len() }
}

/// The scale that fits the slowest request of the run (see [`Scale::fit`]).
pub fn home_scale(analysis: &RunAnalysis, width_px: f64) -> Scale {
    let slowest = analysis.requests().iter().filter_map(extent_ns).max().unwrap_or(0);
    Scale::fit(slowest, width_px)
}

/// The marks of one request, or `None` while its start is unknown (the client's events of it
/// have not arrived yet: there is nothing to align it on). `stalls` are the attribution's for
/// this request.
pub fn layout_row(
    analysis: &RunAnalysis,
    req: u32,
    view: &RequestView,
    stalls: &[Stall],
    scale: &Scale,
) -> Option<RowLayout> {
    let start_ns = view.start_ns?;
    let mut bars = Vec::with_capacity(view.span_count());
    let mut labels = Vec::new();
    let spans: Vec<Span> = view.spans().collect();
    let (stall_of, taken) = stalls_of_spans(&spans, stalls);
    for (span, why) in spans.into_iter().zip(stall_of) {
        // A server read that began before the request (the server idling in read() for the
        // next request) is drawn from the request's start: before it, nothing of this request
        // existed to wait for.
        if span.end_ns < start_ns {
            continue;
        }
        let from_ns = span.start_ns.max(start_ns) - start_ns;
        let to_ns = span.end_ns - start_ns;
        // Outside a zoomed window: nothing to draw.
        if !scale.overlaps(from_ns, to_ns) {
            continue;
        }
        let x = scale.x(from_ns);
        let width = (scale.x(to_ns) - x).max(MIN_BAR_WIDTH);
        let lane = Lane::of(&span);
        let held_ns = view.conn.and_then(|conn| analysis.stall_ns(conn, &span));
        let why = why.map(|index| &stalls[index]);
        let mut title = describe_span(&span, held_ns);
        if let Some(stall) = why {
            title.push_str(&format!("\n{}", explain(stall)));
        }
        // A held read is a stall whatever its class, and so is a Nagle hold seen from one side
        // only (a standalone server's session, where the peer's writes are not recorded); any
        // other call the attribution names waited for something else.
        let nagle = |stall: &&Stall| {
            matches!(stall.class, StallClass::NagleDelayedAck | StallClass::NagleRoundTrip)
        };
        let (kind, wait_ns) = match (held_ns, why) {
            (Some(held_ns), _) => (LabelKind::Stall, held_ns),
            (None, Some(stall)) if nagle(&stall) => (LabelKind::Stall, stall.wait_ns),
            (None, Some(stall)) => (LabelKind::Wait, stall.wait_ns),
            (None, None) => {
                let mark =
                    if span.kind == SpanKind::Connect { Mark::Connect } else { Mark::Call(lane) };
                bars.push(Bar { mark, x, y: lane.y(), width, height: LANE_HEIGHT, title });
                continue;
            }
        };
        let wait = Standing { lane, x, width, kind, wait_ns, why, title };
        wait.push_to(&mut bars, &mut labels, scale.width_px());
    }
    // A watch's stall that no read of the program took (its calls are not seen without root,
    // or its reader is on another host): the wait the packets show, from the small segment to
    // the held bytes, on the reader's lane.
    for (stall, _) in stalls.iter().zip(&taken).filter(|(_, taken)| !**taken) {
        if stall.end_ns < start_ns {
            continue;
        }
        let (from_ns, to_ns) = (stall.start_ns.max(start_ns) - start_ns, stall.end_ns - start_ns);
        if !scale.overlaps(from_ns, to_ns) {
            continue;
        }
        let lane = if stall.side == Side::Client { Lane::ClientRead } else { Lane::ServerRead };
        let x = scale.x(from_ns);
        let width = (scale.x(to_ns) - x).max(MIN_BAR_WIDTH);
        let title =
            format!("{}\n(the wait the packets show: no call of the program seen)", explain(stall));
        let (kind, wait_ns, why) = (LabelKind::Stall, stall.wait_ns, Some(stall));
        let wait = Standing { lane, x, width, kind, wait_ns, why, title };
        wait.push_to(&mut bars, &mut labels, scale.width_px());
    }
    // Stalls and waits go last so that they paint over any neighbour they overhang.
    bars.sort_by_key(|bar| bar.mark.stands_out());
    let done_x = view.done_ns.map(|done| scale.x(done.saturating_sub(start_ns)));
    let done_x =
        done_x.filter(|_| view.done_ns.is_some_and(|d| scale.overlaps(d - start_ns, d - start_ns)));
    Some(RowLayout { req, y: 0.0, bars, labels, done_x })
}

/// The stall each of a request's `spans` is, by its index in `stalls` (a run's stall is its
/// span's own; a watch's, the read that took its held bytes), and whether each stall is some
/// span's: those that are not (a watch's, without its programs' calls) are drawn as the wait
/// the packets show. The one rule of the aligned rows and the run-clock lanes.
pub fn stalls_of_spans(spans: &[Span], stalls: &[Stall]) -> (Vec<Option<usize>>, Vec<bool>) {
    let mut taken = vec![false; stalls.len()];
    let of = spans
        .iter()
        .map(|span| {
            let own = |stall: &Stall| {
                stall.side == span.side
                    && stall.start_ns == span.start_ns
                    && stall.end_ns == span.end_ns
            };
            let index = stalls
                .iter()
                .position(own)
                .or_else(|| stalls.iter().position(|stall| took_held_bytes(stall, span)));
            if let Some(index) = index {
                taken[index] = true;
            }
            index
        })
        .collect();
    (of, taken)
}

/// Whether `span` is the read that took a watch's stall's held bytes (the packet rule's stall
/// names the segments, not the call, so it is not the span's own, as a run's stalls are): on
/// the receiving side, by the packet rule's own test.
fn took_held_bytes(stall: &Stall, span: &Span) -> bool {
    span.kind == SpanKind::Read
        && stall.side == span.side
        && packet_stalls::took_held_bytes(span.start_ns, span.end_ns, stall.end_ns)
}

/// A wait as a mark standing out of its lane, with its label: a stall ("43.9 ms") or a wait
/// the attribution names for something else ("server think time 30.0 ms").
struct Standing<'a> {
    lane: Lane,
    x: f64,
    width: f64,
    kind: LabelKind,
    wait_ns: u64,
    why: Option<&'a Stall>,
    /// The bar's title; the label's is the stall's explanation, if there is a stall.
    title: String,
}

impl Standing<'_> {
    fn push_to(self, bars: &mut Vec<Bar>, labels: &mut Vec<Label>, plot_width: f64) {
        let Standing { lane, x, width, kind, wait_ns, why, title } = self;
        let ms = format!("{:.1}", wait_ns as f64 / 1e6);
        let (mark, text) = match kind {
            LabelKind::Stall => (Mark::Stalled, format!("{ms} ms")),
            LabelKind::Wait => {
                let name = why.map_or("wait", |stall| stall.class.name());
                (Mark::Waited, format!("{name} {ms} ms"))
            }
        };
        let (anchor, label_x) = place_label(x, width, &text, plot_width);
        labels.push(Label {
            kind,
            x: label_x,
            y: lane.y() + LANE_HEIGHT + 1.0,
            anchor,
            text,
            ms,
            class: why.map(|stall| stall.class),
            title: why.map_or_else(|| title.clone(), explain),
        });
        bars.push(Bar {
            mark,
            x,
            y: lane.y() - STALL_OVERHANG,
            width,
            height: LANE_HEIGHT + 2.0 * STALL_OVERHANG,
            title,
        });
    }
}

/// Inside the bar if the text fits there, else right of it if the plot (and its margin) has
/// room, else left of it.
fn place_label(x: f64, width: f64, text: &str, plot_width: f64) -> (Anchor, f64) {
    let text_width = text.chars().count() as f64 * LABEL_CHAR_WIDTH;
    if width >= text_width + 2.0 * LABEL_GAP {
        (Anchor::Inside, x + width - LABEL_GAP)
    } else if x + width + LABEL_GAP + text_width <= plot_width + RIGHT_MARGIN
        || x - LABEL_GAP - text_width < -LEFT_ROOM
    {
        (Anchor::After, x + width + LABEL_GAP)
    } else {
        (Anchor::Before, x - LABEL_GAP)
    }
}

/// "Nagle x delayed ACK: the client wrote 4 bytes, then 2048 bytes; …".
fn explain(stall: &Stall) -> String {
    format!("{}: {}", stall.class.name(), stall.evidence)
}

/// "server read 2048 B in 43.712 ms, held 43.689 ms by the kernel".
fn describe_span(span: &Span, stall_ns: Option<u64>) -> String {
    let took = format_ms(span.duration_ns());
    let what = match span.kind {
        SpanKind::Connect => return format!("{} connect in {took}", span.side.name()),
        SpanKind::Write => "write",
        SpanKind::Read => "read",
    };
    let mut text = format!("{} {what} {} B in {took}", span.side.name(), span.bytes);
    if let Some(held_ns) = stall_ns {
        text.push_str(&format!(", held {} by the kernel", format_ms(held_ns)));
    }
    text
}

fn format_ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use ackscope_shared::analysis::RunAnalysis;
    use ackscope_shared::{PerSide, RrSpec};

    use super::*;
    use crate::fixtures::{nagle_run, MS, US};

    fn analysed(requests: u32, hold: u64) -> RunAnalysis {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&nagle_run(requests, hold));
        analysis
    }

    /// The attribution of story 1's spec (Nagle on both sides).
    /// Every row of a run on one page, with the scale that fits it.
    fn layout_run(analysis: &RunAnalysis, why: &Attribution, width_px: f64) -> TimelineLayout {
        let rows = RowSet::All(0..analysis.requests().len() as u32);
        let scale = home_scale(analysis, width_px);
        layout_page(analysis, why, &rows, 0, rows.len(), scale)
    }

    fn why(analysis: &RunAnalysis) -> Attribution {
        Attribution::of(analysis, Some(&RrSpec::default()))
    }

    /// One exchange: a 25 ms connect, the server thinking 30 ms before it answers, and its
    /// body's write blocked 15 ms (as in shared's attribution tests).
    fn think_time_exchange() -> RunAnalysis {
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&ackscope_shared::synthetic::think_time_exchange());
        analysis
    }

    #[test]
    fn waits_that_are_not_held_reads_get_a_mark_and_a_named_label() {
        let analysis = think_time_exchange();
        let layout = layout_run(&analysis, &why(&analysis), 800.0);
        let row = &layout.rows[0];
        assert!(row.bars.iter().all(|b| b.mark != Mark::Stalled), "no read was held");
        let waits: Vec<(Option<StallClass>, &str, &str)> = row
            .labels
            .iter()
            .map(|l| {
                assert_eq!(l.kind, LabelKind::Wait);
                (l.class, l.text.as_str(), l.ms.as_str())
            })
            .collect();
        assert_eq!(
            waits,
            [
                (Some(StallClass::ConnectionSetup), "connection set-up 25.0 ms", "25.0"),
                (Some(StallClass::SendBufferLimited), "send-buffer limited 15.0 ms", "15.0"),
                (Some(StallClass::ServerThinkTime), "server think time 30.0 ms", "30.0"),
            ]
        );
        let think = row.labels.iter().find(|l| l.class == Some(StallClass::ServerThinkTime));
        let title = think.map(|l| l.title.as_str()).unwrap_or_default();
        assert!(
            title.starts_with("server think time: the server read the whole request, then spent"),
            "{title}"
        );
        // One mark per wait, in the lane of the call that waited, standing out of it.
        let waited: Vec<&Bar> = row.bars.iter().filter(|b| b.mark == Mark::Waited).collect();
        assert_eq!(waited.len(), 3);
        assert!(waited.iter().all(|b| b.height > LANE_HEIGHT));
        let client_read = Lane::ClientRead.y() - STALL_OVERHANG;
        assert!(waited.iter().any(|b| b.y == client_read && b.title.contains("server think")));
        assert!(row.bars.iter().rev().take(3).all(|b| b.mark == Mark::Waited), "painted last");
        assert_eq!(class_word(StallClass::ServerThinkTime), "server_think_time");
    }

    #[test]
    fn a_label_goes_inside_its_bar_else_after_it_else_before_it() {
        // 800 px of plot and 64 px of margin; "server think time 30.0 ms" is about 150 px.
        let text = "server think time 30.0 ms";
        assert_eq!(place_label(100.0, 200.0, text, 800.0), (Anchor::Inside, 297.0));
        assert_eq!(place_label(100.0, 20.0, text, 800.0), (Anchor::After, 123.0));
        assert_eq!(place_label(700.0, 20.0, text, 800.0), (Anchor::Before, 697.0));
        assert_eq!(place_label(60.0, 700.0, text, 800.0).0, Anchor::Inside);
        // No room on either side: after it, cut off at the edge.
        assert_eq!(place_label(10.0, 780.0, &"x".repeat(200), 800.0).0, Anchor::After);
    }

    #[test]
    fn a_stalled_read_is_a_tall_red_bar_labelled_with_its_held_time() {
        let analysis = analysed(3, 43_700 * US);
        let layout = layout_run(&analysis, &why(&analysis), 800.0);
        assert_eq!((layout.total, layout.rows.len()), (3, 3));
        // 43.7 ms held each way: ~87.5 ms per request, fitted to a 100 ms axis.
        assert_eq!(layout.scale.domain_ns(), 100 * MS);

        let row = &layout.rows[1];
        assert_eq!(row.req, 1);
        assert_eq!(row.y, ROW_HEIGHT);
        let stalled: Vec<&Bar> = row.bars.iter().filter(|b| b.mark == Mark::Stalled).collect();
        assert_eq!(stalled.len(), 2, "one per direction");
        assert!(stalled.iter().all(|b| b.height > LANE_HEIGHT));
        // The server's body read: from 21 µs to 43.71 ms after the request began.
        let server_y = Lane::ServerRead.y() - STALL_OVERHANG;
        let server = stalled.iter().find(|b| b.y == server_y).expect("a server stall");
        assert!((server.x - 0.168).abs() < 0.01, "{}", server.x);
        assert!((server.width - 349.5).abs() < 0.1, "{}", server.width);
        assert!(server.title.contains("held 43.689 ms"), "{}", server.title);

        let labels: Vec<(&str, &str)> =
            row.labels.iter().map(|l| (l.text.as_str(), l.ms.as_str())).collect();
        assert_eq!(labels, [("43.7 ms", "43.7"), ("43.7 ms", "43.7")]);
        // Wide bars carry their label inside, at their right end.
        assert!(row.labels.iter().all(|l| l.anchor == Anchor::Inside));
        assert!(row.labels.iter().any(|l| (l.x - (server.x + server.width - 3.0)).abs() < 1e-9));
        // Each says why: the class, and the evidence as hover text on label and bar.
        for label in &row.labels {
            assert_eq!(label.kind, LabelKind::Stall);
            assert_eq!(label.class, Some(StallClass::NagleDelayedAck));
            assert!(label.title.starts_with("Nagle x delayed ACK: the "), "{}", label.title);
            assert!(label.title.contains("wrote 4 bytes, then 2048 bytes"), "{}", label.title);
        }
        assert!(
            server.title.contains("\nNagle x delayed ACK: the client wrote"),
            "{}",
            server.title
        );
        // The stalled bars are painted last, over their neighbours.
        assert!(row.bars.iter().rev().take(2).all(|b| b.mark == Mark::Stalled));
    }

    #[test]
    fn the_first_request_of_a_connection_and_a_nodelay_run_have_no_stall() {
        let analysis = analysed(2, 44 * MS);
        let layout = layout_run(&analysis, &why(&analysis), 800.0);
        assert!(layout.rows[0].labels.is_empty());
        assert!(layout.rows[0].bars.iter().all(|b| b.mark != Mark::Stalled));

        // Every body held 30 µs: TCP_NODELAY on both sides.
        let fast = analysed(50, 30 * US);
        let layout = layout_run(&fast, &why(&fast), 800.0);
        assert_eq!(layout.scale.domain_ns(), MS);
        assert_eq!(layout.rows.len(), 50);
        assert!(layout.rows.iter().all(|row| row.labels.is_empty()));
        assert!(layout.rows.iter().flat_map(|row| &row.bars).all(|bar| bar.mark != Mark::Stalled));
        // Each exchange: 2 writes and 2 reads per side, all in the right lanes.
        let row = &layout.rows[7];
        assert_eq!(row.bars.len(), 8);
        for lane in Lane::ALL {
            let in_lane = row.bars.iter().filter(|b| b.mark == Mark::Call(lane)).count();
            assert_eq!(in_lane, 2, "{lane:?}");
            assert!(row
                .bars
                .iter()
                .filter(|b| b.mark == Mark::Call(lane))
                .all(|b| b.y == lane.y()));
        }
    }

    #[test]
    fn spans_before_the_request_start_are_clipped_to_it() {
        let analysis = analysed(3, 30 * US);
        let scale = Scale::fit(MS, 1000.0);
        let view = &analysis.requests()[2];
        // The server sat in read() for this request's length since 40 µs before it began.
        let early = view.spans().filter(|s| s.start_ns < view.start_ns.unwrap_or(0)).count();
        assert_eq!(early, 1);
        let row = layout_row(&analysis, 2, view, &[], &scale).expect("the request has started");
        let length_read = row
            .bars
            .iter()
            .find(|b| b.mark == Mark::Call(Lane::ServerRead) && b.x == 0.0)
            .expect("the clipped read starts at 0");
        assert!((length_read.width - 20.0).abs() < 1e-9, "ends 20 µs in: {}", length_read.width);
        assert!(row.bars.iter().all(|b| b.x >= 0.0));
        assert!(row.done_x.is_some());
    }

    #[test]
    fn a_request_in_flight_is_drawn_and_only_the_page_is_laid_out() {
        let events = nagle_run(2, 44 * MS);
        // Only the first half of the second request has arrived.
        let cut = events.len() - 8;
        let mut analysis = RunAnalysis::new();
        analysis.push_all(&events[..cut]);
        let layout = layout_run(&analysis, &why(&analysis), 800.0);
        assert_eq!(layout.rows.len(), 2);
        assert!(layout.rows[1].done_x.is_none());
        assert!(!layout.rows[1].bars.is_empty());

        let many = analysed(1005, 30 * US);
        let rows = RowSet::All(0..1005);
        let scale = home_scale(&many, 800.0);
        let page = layout_page(&many, &why(&many), &rows, 990, 20, scale);
        assert_eq!(page.total, 1005);
        let reqs: Vec<u32> = page.rows.iter().map(|row| row.req).collect();
        assert_eq!(reqs, (990..1005).collect::<Vec<_>>(), "the last page, as far as it goes");
        assert_eq!(page.rows[0].y, 0.0, "rows are placed from the top of the page");
        assert_eq!(page.height(), 15.0 * ROW_HEIGHT);
    }

    #[test]
    fn a_zoomed_window_draws_only_what_it_shows() {
        let analysis = analysed(3, 44 * MS);
        let why = why(&analysis);
        let view = &analysis.requests()[1];
        let stalls = why.of_request(1);
        let whole =
            layout_row(&analysis, 1, view, stalls, &Scale::fit(100 * MS, 800.0)).expect("started");
        // Half a millisecond in the middle of the second held read: the response's first bytes
        // are held, the writes are long done.
        let window = Scale::window(60 * MS, 500 * US, 800.0);
        let early = layout_row(&analysis, 1, view, stalls, &window).expect("started");
        assert!(
            early.bars.len() < whole.bars.len(),
            "{} of {}",
            early.bars.len(),
            whole.bars.len()
        );
        let held: Vec<&Bar> = early.bars.iter().filter(|b| b.mark == Mark::Stalled).collect();
        assert_eq!(held.len(), 1, "the held read runs across the whole window");
        assert_eq!((held[0].x, held[0].width), (0.0, 800.0), "cut at both edges");
        assert_eq!(early.labels.len(), 1, "its label stays with it");
        assert!(early.done_x.is_none(), "the response is read later");
    }

    #[test]
    fn the_fingerprint_follows_what_is_drawn() {
        let analysis = analysed(2, 44 * MS);
        let scale = Scale::fit(100 * MS, 800.0);
        let view = &analysis.requests()[1];
        let attribution = why(&analysis);
        let stalls = attribution.of_request(1);
        let row = layout_row(&analysis, 1, view, stalls, &scale).expect("started");
        let same = layout_row(&analysis, 1, view, stalls, &scale).expect("started");
        assert_eq!(row.fingerprint(), same.fingerprint());
        let rescaled = layout_row(&analysis, 1, view, stalls, &Scale::fit(200 * MS, 800.0));
        assert_ne!(rescaled.map(|r| r.fingerprint()), Some(row.fingerprint()));
        // A different verdict on the same spans is a different row.
        let unexplained = Attribution::of(
            &analysis,
            Some(&RrSpec { nodelay: PerSide::both(true), ..RrSpec::default() }),
        );
        let reclassed =
            layout_row(&analysis, 1, view, unexplained.of_request(1), &scale).expect("started");
        assert_ne!(reclassed.fingerprint(), row.fingerprint());
    }
}
