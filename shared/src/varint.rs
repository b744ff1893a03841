//! LEB128 varints (postcard's integer encoding): the leaf that the stream's version check and
//! the packed span lists share; and [`Bytes`], postcard's encoding of each primitive value read
//! by hand, for the messages decoded without `serde` (a run's start, a batch's segments).

/// A LEB128 varint (postcard's integer encoding) and the bytes after it.
pub(crate) fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// Appends `value` as a LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends `value` zigzagged (0, -1, 1, -2, ... as 0, 1, 2, 3, ...), then as a LEB128 varint:
/// postcard's signed integers.
pub(crate) fn put_zigzag(out: &mut Vec<u8>, value: i64) {
    put_varint(out, zigzag(value));
}

/// 0, -1, 1, -2, ... as 0, 1, 2, 3, ...: small either way.
pub(crate) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// What [`zigzag`] made, back.
pub(crate) fn unzigzag(zigzag: u64) -> i64 {
    (zigzag >> 1) as i64 ^ -((zigzag & 1) as i64)
}

/// The bytes not yet read. Each reader takes a value as postcard encodes it, or `None` where
/// postcard refuses it.
pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl Bytes<'_> {
    #[inline]
    pub(crate) fn byte(&mut self) -> Option<u8> {
        let (&byte, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(byte)
    }

    /// An unsigned LEB128 varint of at most `max_bytes` bytes, the last of them at most
    /// `max_last` (postcard's `try_take_varint_*`: wider values are refused).
    #[inline]
    pub(crate) fn varint(&mut self, max_bytes: u32, max_last: u8) -> Option<u64> {
        // Most values of an event (its side, its kind, small differences) are one byte.
        if let Some((&byte, rest)) = self.0.split_first() {
            if byte < 0x80 {
                self.0 = rest;
                return Some(u64::from(byte));
            }
        }
        self.longer_varint(max_bytes, max_last)
    }

    /// [`Bytes::varint`] of more than one byte (a segment's sequence numbers, most times).
    #[inline]
    fn longer_varint(&mut self, max_bytes: u32, max_last: u8) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..max_bytes {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return (i < max_bytes - 1 || byte <= max_last).then_some(value);
            }
        }
        None
    }

    #[inline]
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.varint(3, 0b11).and_then(|value| u16::try_from(value).ok())
    }

    #[inline]
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.varint(5, 0b1111).and_then(|value| u32::try_from(value).ok())
    }

    #[inline]
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.varint(10, 1)
    }

    /// A length, as wide as the platform's `usize` (postcard's `try_take_varint_usize`).
    #[inline]
    pub(crate) fn usize(&mut self) -> Option<usize> {
        if usize::BITS == 32 {
            self.u32().map(|value| value as usize)
        } else {
            self.u64().and_then(|value| usize::try_from(value).ok())
        }
    }

    /// A signed integer: zigzag, then a varint.
    #[inline]
    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.u64().map(unzigzag)
    }

    #[inline]
    pub(crate) fn bool(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn option<T>(
        &mut self,
        value: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        match self.byte()? {
            0 => Some(None),
            1 => value(self).map(Some),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Signed integers and lengths read by hand as postcard writes them.
    #[test]
    fn signed_values_and_lengths_read_as_postcard_writes_them() {
        for value in [0, 1, -1, 63, -64, 64, i64::from(i32::MIN), i64::MAX, i64::MIN] {
            let bytes = postcard::to_allocvec(&value).unwrap();
            assert_eq!(Bytes(&bytes).i64(), Some(value), "{value}");
        }
        for len in [0usize, 1, 300, 70_000] {
            let bytes = postcard::to_allocvec(&vec![0u8; len]).unwrap();
            let mut read = Bytes(&bytes);
            assert_eq!(read.usize(), Some(len));
            assert_eq!(read.0.len(), len, "the length's bytes only");
        }
    }

    #[test]
    fn varints_round_trip_and_a_cut_one_is_none() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, value);
            bytes.push(42);
            assert_eq!(varint(&bytes), Some((value, &[42u8][..])));
            assert_eq!(varint(&bytes[..bytes.len() - 2]), None, "{value} cut short");
        }
    }
}
