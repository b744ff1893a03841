//! A run's start (`ToBrowser::RunStarted`) decoded by hand from postcard's encoding, the way
//! `serde` decodes it: a file of runs that never end is a start for every two events, and
//! `serde`'s decoding of a start's spec (some thirty fields in nested structs, options and
//! pairs) was a third of the CPU of reading one.
//!
//! It takes only what `serde` takes, to the same values: a message it does not take whole (a
//! kind of run it does not know, a damaged byte, trailing bytes) is left to `serde`, which
//! decodes it or says why not, so the errors are `serde`'s. Each type is built with every
//! field named, so a field added to one does not build until it is read here too; the tests
//! hold this decoding to `serde`'s on specs drawn at random and on damaged messages.

use super::{Instruments, ToBrowser};
use crate::event::RunId;
use crate::spec::{
    BulkSpec, ImportSpec, ImportedConnection, LinkSpec, PerSide, RrSpec, Scenario, WatchSpec,
    WritePattern,
};
use crate::varint::Bytes;

/// The first byte of an encoded `ToBrowser::RunStarted`: its variant's index.
pub(crate) const RUN_STARTED: u8 = 1;

/// Where run starts are decoded, in place: the last one decoded, and the bytes of its spec and
/// instruments (everything after its run id).
#[derive(Debug, Default)]
pub(crate) struct RunStartPlace {
    pub(crate) start: Option<ToBrowser>,
    /// Empty when `start` is not a whole decoding of them (none yet, or one that failed).
    spec_bytes: Vec<u8>,
}

/// Decodes the run start encoded in `payload` into `place.start`, in place: true if it did,
/// false (with the start left in any state) for `serde` to decode it. In place, because a start
/// is a large value (224 bytes), and building one and moving it out through each call that
/// returned it cost as much as decoding it. The start is made a start of the payload's kind of
/// run if it is not one already.
///
/// A start whose spec and instruments are byte for byte the last one's (a sweep's repeats, a
/// file of runs that never end: a start for every two events) takes only its run id: decoding
/// the spec's thirty fields was a third of the CPU of reading such a file.
pub(crate) fn run_started_into(payload: &[u8], place: &mut RunStartPlace) -> bool {
    let mut bytes = Bytes(payload);
    let Some(run_id) = bytes.run_id() else { return false };
    if let Some(ToBrowser::RunStarted { run, .. }) = &mut place.start {
        if !place.spec_bytes.is_empty() && place.spec_bytes == bytes.0 {
            *run = run_id;
            return true;
        }
    }
    let spec_bytes = bytes.0;
    let decoded = bytes.run_started(run_id, &mut place.start).is_some() && bytes.0.is_empty();
    place.spec_bytes.clear();
    if decoded {
        place.spec_bytes.extend_from_slice(spec_bytes);
    }
    decoded
}

impl Bytes<'_> {
    #[inline]
    fn string(&mut self) -> Option<String> {
        let len = self.usize()?;
        let text = self.0.get(..len)?;
        self.0 = &self.0[len..];
        std::str::from_utf8(text).ok().map(str::to_owned)
    }

    /// A sequence: its length, then its items. Each item takes a byte at least, so the bytes
    /// left bound what is allocated ahead.
    fn vec<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let len = self.usize()?;
        let mut items = Vec::with_capacity(len.min(self.0.len()));
        for _ in 0..len {
            items.push(item(self)?);
        }
        Some(items)
    }

    #[inline]
    fn per_side<T>(&mut self, mut value: impl FnMut(&mut Self) -> Option<T>) -> Option<PerSide<T>> {
        Some(PerSide { client: value(self)?, server: value(self)? })
    }

    #[inline]
    fn optional_u32(&mut self) -> Option<Option<u32>> {
        self.option(Self::u32)
    }

    #[inline]
    fn optional_string(&mut self) -> Option<Option<String>> {
        self.option(Self::string)
    }

    /// A run start's tag and run id.
    fn run_id(&mut self) -> Option<RunId> {
        if self.u32()? != u32::from(RUN_STARTED) {
            return None;
        }
        Some(RunId(self.u32()?))
    }

    /// The rest of a run start, after its run id.
    fn run_started(&mut self, run_id: RunId, start: &mut Option<ToBrowser>) -> Option<()> {
        let kind = self.u32()?;
        let reusable = matches!(
            start,
            Some(ToBrowser::RunStarted { spec, .. }) if Some(kind_of(spec)) == kind_at(kind)
        );
        if !reusable {
            let spec = empty_scenario(kind)?;
            let instruments = Instruments::default();
            *start = Some(ToBrowser::RunStarted { run: run_id, spec, instruments });
        }
        let Some(ToBrowser::RunStarted { run, spec, instruments }) = start else {
            return None;
        };
        *run = run_id;
        match spec {
            Scenario::Rr(rr) | Scenario::Server(rr) => self.rr(rr)?,
            // A bulk run's pause is only in the kind of run of version 8.
            Scenario::Bulk(bulk) => self.bulk(bulk, kind == BULK_SLOW_READER)?,
            Scenario::Import(import) => self.import(import)?,
            Scenario::Watch(watch) => self.watch(watch)?,
        }
        let Instruments { events, tcp_info_at_syscalls, tcp_info_interval_us, capture } =
            instruments;
        *events = self.bool()?;
        *tcp_info_at_syscalls = self.bool()?;
        *tcp_info_interval_us = self.u32()?;
        *capture = self.bool()?;
        Some(())
    }

    #[inline]
    fn write_pattern(&mut self) -> Option<WritePattern> {
        Some(match self.u32()? {
            0 => WritePattern::Split,
            1 => WritePattern::Single,
            2 => WritePattern::Writev,
            _ => return None,
        })
    }

    #[inline]
    fn link(&mut self) -> Option<LinkSpec> {
        Some(LinkSpec {
            rtt_us: self.u32()?,
            rate_bps: self.option(Self::u64)?,
            mtu: self.u32()?,
            queue_packets: self.u32()?,
            loss_ppm: self.u32()?,
        })
    }

    // Each spec is read field by field into its place: every field is bound below, and one
    // left unread is an unused variable, which the lints refuse.

    fn rr(&mut self, spec: &mut RrSpec) -> Option<()> {
        let RrSpec {
            requests,
            duration_ms,
            size_bytes,
            response_bytes,
            reconnect_every,
            connections,
            think_us,
            write,
            nodelay,
            cork,
            quickack,
            sndbuf,
            rcvbuf,
            congestion,
            link,
        } = spec;
        *requests = self.u32()?;
        *duration_ms = self.optional_u32()?;
        *size_bytes = self.u32()?;
        *response_bytes = self.optional_u32()?;
        *reconnect_every = self.u32()?;
        *connections = self.u32()?;
        *think_us = self.u32()?;
        *write = self.per_side(Self::write_pattern)?;
        *nodelay = self.per_side(Self::bool)?;
        *cork = self.per_side(Self::bool)?;
        *quickack = self.per_side(Self::bool)?;
        *sndbuf = self.per_side(Self::optional_u32)?;
        *rcvbuf = self.per_side(Self::optional_u32)?;
        *congestion = self.per_side(Self::optional_string)?;
        *link = self.option(Self::link)?;
        Some(())
    }

    /// A bulk spec in the order `serde` encodes it (`spec::encoding`): the fields of versions
    /// 1-7 with, for a reader that pauses, its pause fourth (after the application buffer, in
    /// `BulkSpec`'s order).
    fn bulk(&mut self, spec: &mut BulkSpec, pauses: bool) -> Option<()> {
        let BulkSpec {
            bytes,
            duration_ms,
            app_buffer_bytes,
            read_pause_us,
            sndbuf,
            rcvbuf,
            congestion,
            link,
        } = spec;
        *bytes = self.u64()?;
        *duration_ms = self.optional_u32()?;
        *app_buffer_bytes = self.u32()?;
        *read_pause_us = if pauses { self.u32()? } else { 0 };
        *sndbuf = self.per_side(Self::optional_u32)?;
        *rcvbuf = self.per_side(Self::optional_u32)?;
        *congestion = self.per_side(Self::optional_string)?;
        *link = self.option(Self::link)?;
        Some(())
    }

    fn import(&mut self, spec: &mut ImportSpec) -> Option<()> {
        let ImportSpec { source, connections } = spec;
        *source = self.string()?;
        *connections = self.vec(|bytes| {
            Some(ImportedConnection {
                client: bytes.string()?,
                server: bytes.string()?,
                client_by: bytes.string()?,
            })
        })?;
        Some(())
    }

    fn watch(&mut self, spec: &mut WatchSpec) -> Option<()> {
        let WatchSpec { ports, pid, duration_ms, evidence } = spec;
        *ports = self.vec(Self::u16)?;
        *pid = self.optional_u32()?;
        *duration_ms = self.optional_u32()?;
        *evidence = self.string()?;
        Some(())
    }
}

/// The index `serde` encodes a bulk run whose reader pauses with (`spec::encoding`).
const BULK_SLOW_READER: u32 = 5;

/// Which of `Scenario`'s variants `spec` is, by its position.
fn kind_of(spec: &Scenario) -> usize {
    match spec {
        Scenario::Rr(_) => 0,
        Scenario::Bulk(_) => 1,
        Scenario::Server(_) => 2,
        Scenario::Import(_) => 3,
        Scenario::Watch(_) => 4,
    }
}

/// Which of `Scenario`'s variants `serde` encodes with `index`: both kinds of bulk run are
/// `Scenario::Bulk`.
fn kind_at(index: u32) -> Option<usize> {
    match index {
        0..=4 => Some(index as usize),
        BULK_SLOW_READER => Some(1),
        _ => None,
    }
}

/// A spec of the kind of run `serde` encodes with `index`, its fields to be read into it.
fn empty_scenario(index: u32) -> Option<Scenario> {
    Some(match kind_at(index)? {
        0 => Scenario::Rr(RrSpec::default()),
        1 => Scenario::Bulk(BulkSpec::default()),
        2 => Scenario::Server(RrSpec::default()),
        3 => Scenario::Import(ImportSpec::default()),
        _ => Scenario::Watch(WatchSpec::default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::batches::Rng;
    use crate::event_json::tests::{draw, every_scenario};
    use crate::wire::{decode, encode};

    fn starts(rng: &mut Rng) -> Vec<ToBrowser> {
        every_scenario(rng)
            .into_iter()
            .map(|spec| {
                let instruments = Instruments {
                    events: rng.below(2) == 1,
                    tcp_info_at_syscalls: rng.below(2) == 1,
                    tcp_info_interval_us: draw(rng, u64::from(u32::MAX)) as u32,
                    capture: rng.below(2) == 1,
                };
                let run = RunId(draw(rng, u64::from(u32::MAX)) as u32);
                ToBrowser::RunStarted { run, spec, instruments }
            })
            .collect()
    }

    /// Every kind of run start, each decoded into the place the one before it was: nothing of
    /// one is left in the next.
    #[test]
    fn every_kind_of_run_start_decodes_as_serde_decodes_it() {
        let mut rng = Rng(37);
        let mut place = RunStartPlace::default();
        for _ in 0..300 {
            for message in starts(&mut rng) {
                let bytes = encode(&message);
                assert_eq!(bytes[0], RUN_STARTED);
                assert!(run_started_into(&bytes, &mut place));
                assert_eq!(place.start.as_ref(), Some(&message));
            }
        }
    }

    /// The same spec again under another run id takes the new id and keeps the spec; a spec
    /// that differs after it is decoded whole.
    #[test]
    fn a_repeated_spec_takes_only_its_new_run_id() {
        let mut rng = Rng(41);
        let mut place = RunStartPlace::default();
        for message in starts(&mut rng).into_iter().chain(starts(&mut rng)) {
            let ToBrowser::RunStarted { spec, instruments, .. } = &message else { unreachable!() };
            for id in [7, 70_000, 7] {
                let again = ToBrowser::RunStarted {
                    run: RunId(id),
                    spec: spec.clone(),
                    instruments: *instruments,
                };
                assert!(run_started_into(&encode(&again), &mut place));
                assert_eq!(place.start.as_ref(), Some(&again));
            }
        }
    }

    /// Whatever it takes of a damaged start, `serde` takes too, as the same message; what it
    /// leaves, `serde` decodes or refuses. The place is reused throughout, so what a damaged
    /// start left half read is never seen in the next.
    #[test]
    fn a_damaged_start_is_taken_only_as_serde_takes_it() {
        let mut rng = Rng(43);
        let (mut taken, mut left) = (0, 0);
        let mut place = RunStartPlace::default();
        for _ in 0..100 {
            for message in starts(&mut rng) {
                let bytes = encode(&message);
                for _ in 0..100 {
                    // Half the time the undamaged start first: the damaged one then meets the
                    // place holding its spec's bytes.
                    if rng.below(2) == 1 {
                        assert!(run_started_into(&bytes, &mut place));
                        assert_eq!(place.start.as_ref(), Some(&message));
                    }
                    let mut damaged = bytes.clone();
                    for _ in 0..=rng.below(2) {
                        let at = 1 + rng.below(damaged.len() - 1);
                        damaged[at] = rng.below(256) as u8;
                    }
                    match rng.below(3) {
                        0 => damaged.truncate(damaged.len() - rng.below(4)),
                        1 => damaged.push(rng.below(256) as u8),
                        _ => {}
                    }
                    if run_started_into(&damaged, &mut place) {
                        assert_eq!(
                            decode::<ToBrowser>(&damaged).as_ref(),
                            Ok(place.start.as_ref().unwrap())
                        );
                        taken += 1;
                    } else {
                        left += 1;
                    }
                }
            }
        }
        assert!(taken > 1000 && left > 1000, "{taken} damaged starts taken, {left} left");
    }

    #[test]
    fn varints_are_taken_as_postcard_takes_them() {
        // Postcard's limits: 3, 5 and 10 bytes, and the bits of the last byte that still fit.
        /// Bytes, and what they are as a u16, a u32 and a u64 (`None`: refused).
        type Case = (&'static [u8], Option<u64>, Option<u64>, Option<u64>);
        let cases: [Case; 7] = [
            (&[0x00], Some(0), Some(0), Some(0)),
            (&[0x80, 0x00], Some(0), Some(0), Some(0)),
            (&[0xff, 0xff, 0x03], Some(65_535), Some(65_535), Some(65_535)),
            (&[0xff, 0xff, 0x04], None, Some(0x1_3fff), Some(0x1_3fff)),
            (
                &[0xff, 0xff, 0xff, 0xff, 0x0f],
                None,
                Some(u64::from(u32::MAX)),
                Some(u64::from(u32::MAX)),
            ),
            (&[0xff, 0xff, 0xff, 0xff, 0x10], None, None, Some(0x1_0fff_ffff)),
            (&[0x80], None, None, None),
        ];
        for (bytes, as_u16, as_u32, as_u64) in cases {
            assert_eq!(Bytes(bytes).u16().map(u64::from), as_u16, "{bytes:x?}");
            assert_eq!(Bytes(bytes).u32().map(u64::from), as_u32, "{bytes:x?}");
            assert_eq!(Bytes(bytes).u64(), as_u64, "{bytes:x?}");
            assert_eq!(decode::<u16>(bytes).ok().map(u64::from), as_u16, "{bytes:x?}");
            assert_eq!(decode::<u32>(bytes).ok().map(u64::from), as_u32, "{bytes:x?}");
            assert_eq!(decode::<u64>(bytes).ok(), as_u64, "{bytes:x?}");
        }
        let mut max = vec![0xff; 9];
        max.push(0x01);
        assert_eq!(Bytes(&max).u64(), Some(u64::MAX));
        max[9] = 0x02;
        assert_eq!((Bytes(&max).u64(), decode::<u64>(&max).ok()), (None, None));
    }
}
