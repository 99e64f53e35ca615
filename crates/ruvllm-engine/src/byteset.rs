//! A set of bytes as a 256-bit bitmap: the alphabet of the byte-level automata.

/// A set of byte values. Copy, 32 bytes; all operations are O(1).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Debug)]
pub struct ByteSet(pub [u64; 4]);

impl ByteSet {
    /// The empty set.
    pub const EMPTY: ByteSet = ByteSet([0; 4]);

    /// Adds `b`.
    #[inline]
    pub fn insert(&mut self, b: u8) {
        self.0[(b >> 6) as usize] |= 1u64 << (b & 63);
    }

    /// Whether `b` is in the set.
    #[inline]
    pub fn contains(&self, b: u8) -> bool {
        self.0[(b >> 6) as usize] & (1u64 << (b & 63)) != 0
    }

    /// Adds every byte of `other`.
    #[inline]
    pub fn union_with(&mut self, other: &ByteSet) {
        for i in 0..4 {
            self.0[i] |= other.0[i];
        }
    }

    /// Number of bytes in the set.
    #[inline]
    pub fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// Whether the set is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    /// The smallest byte in the set.
    pub fn first(&self) -> Option<u8> {
        for (i, w) in self.0.iter().enumerate() {
            if *w != 0 {
                return Some((i * 64 + w.trailing_zeros() as usize) as u8);
            }
        }
        None
    }

    /// Iterates the bytes in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0u16..256).map(|b| b as u8).filter(|b| self.contains(*b))
    }

    /// Describes the set as a character class, e.g. `[0-9a-f]` or `["\\]`.
    pub fn describe(&self) -> String {
        let mut out = String::from("[");
        let bytes: Vec<u8> = self.iter().collect();
        let mut i = 0;
        let show = |b: u8| -> String {
            match b {
                b'\\' | b']' | b'-' | b'^' => format!("\\{}", b as char),
                0x21..=0x7e => (b as char).to_string(),
                b' ' => " ".into(),
                b'\n' => "\\n".into(),
                b'\t' => "\\t".into(),
                b'\r' => "\\r".into(),
                _ => format!("\\x{b:02X}"),
            }
        };
        while i < bytes.len() {
            let mut j = i;
            while j + 1 < bytes.len() && bytes[j + 1] == bytes[j] + 1 {
                j += 1;
            }
            if j >= i + 2 {
                out.push_str(&format!("{}-{}", show(bytes[i]), show(bytes[j])));
            } else {
                for &b in &bytes[i..=j] {
                    out.push_str(&show(b));
                }
            }
            i = j + 1;
        }
        out.push(']');
        out
    }
}
