//! The kernel's own type information (BTF, `/sys/kernel/btf/vmlinux`): which id a kernel
//! function has, for a tracing program to attach to it, what its parameters are called, and
//! where a struct's members lie, so that a program reads the running kernel's layout rather
//! than the one it was written against.
//!
//! Only what those questions need is read: the header, the type section walked once to index
//! each type's place, and names from the string section. The format is linux/btf.h (stable
//! uapi; Documentation/bpf/btf.rst). Every length is checked against the bytes before use.

use std::io::{self, Read};

/// Where the running kernel publishes its BTF (CONFIG_DEBUG_INFO_BTF).
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
/// Larger than any kernel's BTF (about 5 MB with every driver built in): a file past it is not
/// one, and is not read whole.
const MAX_BYTES: u64 = 64 << 20;
const MAGIC: u16 = 0xeb9f;
const HEADER_BYTES: usize = 24;
/// Member lookups through anonymous members go at most this deep (the kernel's structs nest
/// three or four).
const MAX_DEPTH: usize = 8;

// Kinds (`BTF_KIND_*`).
const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// A kernel's BTF, indexed.
pub struct Btf {
    bytes: Vec<u8>,
    /// Where the types and the strings start in `bytes`, and how long the strings are.
    types_at: usize,
    strings_at: usize,
    strings_len: usize,
    /// Each type's place in the type section, by id - 1 (id 0 is `void`).
    index: Vec<u32>,
}

/// One type's fixed part.
#[derive(Clone, Copy)]
struct Type {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// `size` or `type`, as the kind has it.
    size_or_type: u32,
    /// Where its kind's extra data start in `bytes`.
    extra_at: usize,
}

/// A struct member's place: its offset in bytes from the start of the outermost struct, and
/// its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub offset: u32,
    pub size: u32,
}

impl Btf {
    /// The running kernel's BTF.
    pub fn vmlinux() -> io::Result<Btf> {
        let file = std::fs::File::open(VMLINUX).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{VMLINUX}: {e} (a kernel built with CONFIG_DEBUG_INFO_BTF has it)"),
            )
        })?;
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{VMLINUX} is over {MAX_BYTES} bytes: not a kernel's BTF"),
            ));
        }
        Btf::parse(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Indexes `bytes`, a BTF blob in this host's byte order.
    pub fn parse(bytes: Vec<u8>) -> Result<Btf, String> {
        let u16_at = |at: usize| bytes.get(at..at + 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
        if bytes.len() < HEADER_BYTES || u16_at(0) != Some(MAGIC) {
            return Err("not BTF in this host's byte order (no 0xeb9f magic)".into());
        }
        let word = |at: usize| read_u32(&bytes, at).unwrap_or(0) as usize;
        let header_len = word(4);
        let (type_off, type_len, str_off, str_len) = (word(8), word(12), word(16), word(20));
        let types_at = header_len.checked_add(type_off);
        let strings_at = header_len.checked_add(str_off);
        let (Some(types_at), Some(strings_at)) = (types_at, strings_at) else {
            return Err("BTF header's offsets overflow".into());
        };
        let types_end = types_at.checked_add(type_len).filter(|&end| end <= bytes.len());
        let strings_end = strings_at.checked_add(str_len).filter(|&end| end <= bytes.len());
        let (Some(types_end), Some(_)) = (types_end, strings_end) else {
            return Err("BTF header's sections run past the file".into());
        };
        let mut btf = Btf { bytes, types_at, strings_at, strings_len: str_len, index: Vec::new() };
        let mut at = types_at;
        while at < types_end {
            let place = u32::try_from(at - types_at).map_err(|_| "BTF type section too long")?;
            let t = btf.type_at(at).ok_or("a BTF type runs past the file")?;
            let extra = extra_bytes(&t).ok_or_else(|| {
                format!("BTF kind {}, newer than this reader knows: a newer kernel", t.kind)
            })?;
            let end = t.extra_at + extra;
            if end > types_end {
                return Err("a BTF type runs past its section".into());
            }
            btf.index.push(place);
            at = end;
        }
        Ok(btf)
    }

    /// How many types it has (ids 1 to this).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The id of the function called `name` (a `BTF_KIND_FUNC`): what a tracing program's
    /// `attach_btf_id` names.
    pub fn function(&self, name: &str) -> Option<u32> {
        self.find(KIND_FUNC, name)
    }

    /// The names of function `id`'s parameters, in order.
    pub fn parameters(&self, id: u32) -> Option<Vec<String>> {
        let func = self.get(id).filter(|t| t.kind == KIND_FUNC)?;
        let proto = self.get(func.size_or_type).filter(|t| t.kind == KIND_FUNC_PROTO)?;
        (0..proto.vlen)
            .map(|i| {
                let name_off = read_u32(&self.bytes, proto.extra_at + 8 * i)?;
                Some(self.name(name_off)?.to_string())
            })
            .collect()
    }

    /// Where the member at `path` lies in the struct `name`: each step a member's name, found
    /// through anonymous structs and unions as C finds it (`["icsk_ack", "pending"]`).
    pub fn member(&self, name: &str, path: &[&str]) -> Option<Member> {
        let mut id = self.find(KIND_STRUCT, name)?;
        let mut offset_bits = 0u32;
        let mut size = 0u32;
        for step in path {
            let (at_bits, member_type) = self.find_member(id, step, 0)?;
            offset_bits = offset_bits.checked_add(at_bits)?;
            id = self.resolve(member_type)?;
            size = self.size_of(id)?;
        }
        // A member the compiler placed off a byte boundary has no byte offset to read at.
        (offset_bits % 8 == 0 && !path.is_empty())
            .then_some(Member { offset: offset_bits / 8, size })
    }

    /// The bit offset and type of the member `name` of struct or union `id`, looking inside
    /// its anonymous members.
    fn find_member(&self, id: u32, name: &str, depth: usize) -> Option<(u32, u32)> {
        let t = self.get(id).filter(|t| t.kind == KIND_STRUCT || t.kind == KIND_UNION)?;
        for i in 0..t.vlen {
            let at = t.extra_at + 12 * i;
            let (name_off, member_type) =
                (read_u32(&self.bytes, at)?, read_u32(&self.bytes, at + 4)?);
            let raw_offset = read_u32(&self.bytes, at + 8)?;
            // With the kind flag, the top 8 bits are a bitfield's size (0: not a bitfield).
            let (bits, bitfield) = match t.kind_flag {
                true => (raw_offset & 0x00ff_ffff, raw_offset >> 24 != 0),
                false => (raw_offset, false),
            };
            let member_name = self.name(name_off)?;
            if member_name == name {
                // A bitfield has no byte offset and size of its own to read.
                return (!bitfield).then_some((bits, member_type));
            }
            if member_name.is_empty() && depth < MAX_DEPTH {
                let inner = self.resolve(member_type)?;
                if let Some((inner_bits, found)) = self.find_member(inner, name, depth + 1) {
                    return Some((bits.checked_add(inner_bits)?, found));
                }
            }
        }
        None
    }

    /// `id` past typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Option<u32> {
        for _ in 0..MAX_DEPTH * 4 {
            let t = self.get(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(id),
            }
        }
        None
    }

    /// The size in bytes of a resolved type that has one (pointers are 8: the hosts the
    /// programs are built for); arrays of arrays to [`MAX_DEPTH`].
    fn size_of(&self, id: u32) -> Option<u32> {
        self.size_within(id, 0)
    }

    fn size_within(&self, id: u32, depth: usize) -> Option<u32> {
        let t = self.get(id)?;
        match t.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => Some(t.size_or_type),
            2 => Some(8),
            KIND_ARRAY if depth < MAX_DEPTH => {
                let element = read_u32(&self.bytes, t.extra_at)?;
                let count = read_u32(&self.bytes, t.extra_at + 8)?;
                self.size_within(self.resolve(element)?, depth + 1)?.checked_mul(count)
            }
            _ => None,
        }
    }

    fn find(&self, kind: u32, name: &str) -> Option<u32> {
        (1..=self.index.len() as u32).find(|&id| {
            self.get(id).is_some_and(|t| t.kind == kind && self.name(t.name_off) == Some(name))
        })
    }

    fn get(&self, id: u32) -> Option<Type> {
        let place = *self.index.get(usize::try_from(id).ok()?.checked_sub(1)?)?;
        self.type_at(self.types_at + place as usize)
    }

    fn type_at(&self, at: usize) -> Option<Type> {
        let info = read_u32(&self.bytes, at + 4)?;
        Some(Type {
            name_off: read_u32(&self.bytes, at)?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 == 1,
            size_or_type: read_u32(&self.bytes, at + 8)?,
            extra_at: at + 12,
        })
    }

    /// The NUL-terminated string at `offset` of the string section.
    fn name(&self, offset: u32) -> Option<&str> {
        let offset = offset as usize;
        if offset >= self.strings_len {
            return None;
        }
        let strings = &self.bytes[self.strings_at + offset..self.strings_at + self.strings_len];
        let end = strings.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&strings[..end]).ok()
    }
}

/// The bytes a kind's extra data take after its fixed part; `None` for a kind this reader
/// does not know (a newer kernel's: its size cannot be known, so nothing after it can be read,
/// and the whole BTF is refused with what it is).
fn extra_bytes(t: &Type) -> Option<usize> {
    Some(match t.kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * t.vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * t.vlen,
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG.
        2 | 7 | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_FUNC | 16
        | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a BTF blob type by type, as a compiler lays one out.
    #[derive(Default)]
    struct Blob {
        types: Vec<u8>,
        strings: Vec<u8>,
        next_id: u32,
    }

    impl Blob {
        fn new() -> Blob {
            Blob { types: Vec::new(), strings: vec![0], next_id: 1 }
        }

        fn string(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let at = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            at
        }

        fn words(&mut self, words: &[u32]) {
            for w in words {
                self.types.extend_from_slice(&w.to_ne_bytes());
            }
        }

        fn add(
            &mut self,
            name: &str,
            kind: u32,
            vlen: u32,
            flag: bool,
            size: u32,
            extra: &[u32],
        ) -> u32 {
            let name = self.string(name);
            self.words(&[name, (u32::from(flag) << 31) | (kind << 24) | vlen, size]);
            self.words(extra);
            self.next_id += 1;
            self.next_id - 1
        }

        fn finish(self) -> Vec<u8> {
            let mut out = Vec::new();
            let header = [
                u32::from(MAGIC) | (1 << 16),
                HEADER_BYTES as u32,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ];
            for w in header {
                out.extend_from_slice(&w.to_ne_bytes());
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    /// struct sock_common { __be32 daddr; union { struct { __be16 dport; __u16 num; }; };
    ///   unsigned char state: 4; } and int f(struct sock_common *sk, int len).
    fn blob() -> Vec<u8> {
        let mut b = Blob::new();
        let u32_t = b.add("unsigned int", KIND_INT, 0, false, 4, &[32]);
        let u16_t = b.add("unsigned short", KIND_INT, 0, false, 2, &[16]);
        let be16 = b.add("__be16", KIND_TYPEDEF, 0, false, u16_t, &[]);
        let (dport, num) = (b.string("dport"), b.string("num"));
        let pair = b.add("", KIND_STRUCT, 2, false, 4, &[dport, be16, 0, num, u16_t, 16]);
        let union = b.add("", KIND_UNION, 1, false, 4, &[0, pair, 0]);
        let (daddr, state) = (b.string("daddr"), b.string("state"));
        let sock = b.add(
            "sock_common",
            KIND_STRUCT,
            3,
            true,
            12,
            &[daddr, u32_t, 0, 0, union, 32, state, u32_t, (4 << 24) | 64],
        );
        let ptr = b.add("", 2, 0, false, sock, &[]);
        let (sk, len) = (b.string("sk"), b.string("len"));
        let proto = b.add("", KIND_FUNC_PROTO, 2, false, u32_t, &[sk, ptr, len, u32_t]);
        b.add("f", KIND_FUNC, 1, false, proto, &[]);
        b.finish()
    }

    #[test]
    fn members_are_found_through_anonymous_unions_and_structs_past_typedefs() {
        let btf = Btf::parse(blob()).unwrap();
        assert_eq!(btf.member("sock_common", &["daddr"]), Some(Member { offset: 0, size: 4 }));
        assert_eq!(btf.member("sock_common", &["dport"]), Some(Member { offset: 4, size: 2 }));
        assert_eq!(btf.member("sock_common", &["num"]), Some(Member { offset: 6, size: 2 }));
        assert_eq!(btf.member("sock_common", &["state"]), None, "a bitfield");
        assert_eq!(btf.member("sock_common", &["nothing"]), None);
        assert_eq!(btf.member("no_such_struct", &["daddr"]), None);
    }

    #[test]
    fn a_function_is_found_by_name_with_its_parameters() {
        let btf = Btf::parse(blob()).unwrap();
        let f = btf.function("f").expect("f is a function");
        assert_eq!(btf.parameters(f), Some(vec!["sk".to_string(), "len".to_string()]));
        assert_eq!(btf.function("sock_common"), None, "a struct is not a function");
        assert_eq!(btf.function("g"), None);
    }

    #[test]
    fn truncated_or_foreign_bytes_are_refused_with_what_is_wrong() {
        let whole = blob();
        for cut in [0, 10, HEADER_BYTES, whole.len() - 1] {
            let err = Btf::parse(whole[..cut].to_vec()).err().unwrap_or_default();
            assert!(!err.is_empty(), "{cut} bytes are not a whole blob");
        }
        let mut swapped = whole.clone();
        swapped[..2].copy_from_slice(&MAGIC.swap_bytes().to_ne_bytes());
        assert!(Btf::parse(swapped).err().unwrap().contains("magic"));
        // A section length past the file.
        let mut long = whole;
        long[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(Btf::parse(long).err().unwrap().contains("past"));
    }

    /// The running kernel's BTF, where it has one, reads whole: its members through anonymous
    /// unions, and its functions with their parameters (the members the watch's program reads
    /// are checked beside it, in `watch::kernel`).
    #[test]
    fn this_kernels_btf_reads_whole() {
        if !std::path::Path::new(VMLINUX).exists() {
            eprintln!("skipped this_kernels_btf_reads_whole: no {VMLINUX}");
            return;
        }
        let btf = Btf::vmlinux().unwrap();
        assert!(btf.len() > 10_000, "{} types", btf.len());
        // `skc_num` lies in an anonymous struct inside an anonymous union of `sock_common`.
        let num = btf.member("sock_common", &["skc_num"]).unwrap();
        assert_eq!(num.size, 2);
        let recv = btf.function("tcp_recvmsg").expect("tcp_recvmsg in BTF");
        assert_eq!(btf.parameters(recv).unwrap()[0], "sk");
    }
}
