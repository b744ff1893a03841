//! A batch of events (`ToBrowser::Events`) decoded by hand (`crate::compact::decode_into_by_hand`),
//! `serde` deciding what that does not take: in the place of the last one for the readers that
//! look at each message and let it go (`FrameStream::with_next_message`: its list and its
//! TCP_INFO samples' boxes are used again), or into a list of its own (`decode_message`).

use super::{ToBrowser, EVENTS_PER_MESSAGE};
use crate::event::RunId;

/// The first byte of an encoded `ToBrowser::Events`: its variant's index.
pub(super) const EVENTS: u8 = 2;

/// Where batches of events are decoded, in place: the last one, kept until the next comes so
/// that its list and its samples' boxes are used again (`compact::recycle`), and the boxes
/// put back.
#[derive(Debug)]
pub(super) struct EventsPlace {
    pub(super) batch: ToBrowser,
    spare: crate::compact::SpareSamples,
}

impl Default for EventsPlace {
    fn default() -> Self {
        EventsPlace {
            batch: ToBrowser::Events { run: RunId(0), events: Vec::new() },
            spare: Default::default(),
        }
    }
}

impl EventsPlace {
    /// The next batch of `block` made in the place of the last one, its samples in the boxes
    /// the last let go (`None` when the block has no events left, the last batch kept).
    pub(super) fn next_of_block(
        &mut self,
        block: &mut crate::compact::columns::Unpacked,
    ) -> Option<Result<(), String>> {
        if !block.has_events_left() {
            return None;
        }
        let ToBrowser::Events { run, events } = &mut self.batch else {
            unreachable!("an events place holds a batch of events")
        };
        crate::compact::recycle(events, &mut self.spare);
        *run = block.run;
        block.next_batch_into(&mut self.spare, EVENTS_PER_MESSAGE, events)
    }

    /// Decodes the batch of events encoded in `payload` into `self.batch`: true if it did,
    /// false (the batch left in any state) for `serde` to decode it, and say why not.
    pub(super) fn decode(&mut self, payload: &[u8]) -> bool {
        let ToBrowser::Events { run, events } = &mut self.batch else {
            unreachable!("an events place holds a batch of events")
        };
        crate::compact::recycle(events, &mut self.spare);
        // A batch over the usual size (a hostile file's) is not kept in full once read.
        events.shrink_to(EVENTS_PER_MESSAGE);
        let mut bytes = crate::varint::Bytes(payload);
        let Some(id) = run_of_batch(&mut bytes) else { return false };
        *run = id;
        crate::compact::decode_into_by_hand(&mut bytes, events, &mut self.spare).is_some()
    }
}

/// The batch of events encoded in `payload`, decoded by hand into a list of its own (for the
/// readers that keep each message: the page, the exports); `None` where that does not take it
/// whole, for `serde` to decode it, or say why not.
pub(super) fn decode_owned(payload: &[u8]) -> Option<ToBrowser> {
    let mut bytes = crate::varint::Bytes(payload);
    let run = run_of_batch(&mut bytes)?;
    let mut events = Vec::new();
    let mut spare = crate::compact::SpareSamples::default();
    crate::compact::decode_into_by_hand(&mut bytes, &mut events, &mut spare)?;
    Some(ToBrowser::Events { run, events })
}

/// A batch's variant index and run id, if `bytes` start with them.
fn run_of_batch(bytes: &mut crate::varint::Bytes<'_>) -> Option<RunId> {
    if bytes.u32()? != u32::from(EVENTS) {
        return None;
    }
    bytes.u32().map(RunId)
}
