//! LEB128 varints (postcard's integer encoding): the leaf that the stream's version check and
//! the packed span lists share.

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

#[cfg(test)]
mod tests {
    use super::*;

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
