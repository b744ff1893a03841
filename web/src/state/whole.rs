//! A pass over the whole run of a file the page holds in part: every request's facts (its
//! extent, its stalls' classes), made through the retire-and-attribute loop `show` reads a file
//! with (shared's `RunStalls`, bounded), so that "next slowest" and the steps from stall to
//! stall reach every request of the run, not only those held.

use ackscope_shared::reduce::{stall_spec, RunStalls};
use ackscope_shared::wire::ToBrowser;
use ackscope_shared::RunId;

use crate::session_file::SessionDecoder;
use crate::timeline::rows::Facts;

/// The pass over one run of a file, fed its bytes from the start in pieces.
#[derive(Debug)]
pub struct WholePass {
    pub run: RunId,
    decoder: SessionDecoder,
    /// From the run's start on (`None` for a run whose stalls are not found from its calls).
    stalls: Option<RunStalls>,
    facts: Facts,
    pub read_bytes: u64,
    pub total_bytes: u64,
}

impl WholePass {
    pub fn new(run: RunId, total_bytes: u64) -> WholePass {
        WholePass {
            run,
            // Every event of the run (a pass keeps none of them), none of the other runs.
            decoder: SessionDecoder::reading_from(u64::MAX, run, 0),
            stalls: None,
            facts: Facts::default(),
            read_bytes: 0,
            total_bytes,
        }
    }

    /// Takes the next piece of the file, stopping after `events` events: true if whole
    /// messages are left for the next call (as `SessionDecoder::feed_some`).
    pub fn feed_some(&mut self, bytes: &[u8], events: usize) -> bool {
        self.read_bytes += bytes.len() as u64;
        let (stalls, facts) = (&mut self.stalls, &mut self.facts);
        self.decoder.feed_some(bytes, events, |message| match message {
            ToBrowser::RunStarted { spec, .. } => {
                *stalls = stall_spec(&spec).map(|spec| RunStalls::new(spec.cloned()));
            }
            ToBrowser::Events { events, .. } => {
                if let Some(stalls) = stalls {
                    stalls
                        .push(&events, |req, view, found| facts.push_request(req.0, view, &found));
                }
            }
            _ => {}
        })
    }

    /// Every request's facts once the file is read (up to where it stops holding, if it was
    /// cut short), the requests still held attributed as `show` attributes them at a file's
    /// end; `None` for a run of another kind.
    pub fn finish(mut self) -> Option<Facts> {
        let stalls = self.stalls?;
        let held = stalls.held_stalls();
        let analysis = stalls.analysis();
        let first = analysis.first_request();
        for (index, view) in analysis.requests().iter().enumerate() {
            let req = first + index as u32;
            let from = held.partition_point(|stall| stall.req.0 < req);
            let to = held.partition_point(|stall| stall.req.0 <= req);
            self.facts.push_request(req, view, &held[from..to]);
        }
        Some(self.facts)
    }
}
