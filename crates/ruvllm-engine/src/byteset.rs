//! A set of bytes as a 256-bit bitmap: the alphabet of the byte-level automata.
//!
//! Owns: nothing but the type. Uses: nothing of the crate (the bottom layer).

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

    /// The bytes in both sets.
    #[inline]
    pub fn intersection(&self, other: &ByteSet) -> ByteSet {
        ByteSet([
            self.0[0] & other.0[0],
            self.0[1] & other.0[1],
            self.0[2] & other.0[2],
            self.0[3] & other.0[3],
        ])
    }

    /// How many bytes of the set are smaller than `b`. Cost: up to four popcounts.
    #[inline]
    pub fn rank(&self, b: u8) -> u32 {
        let w = (b >> 6) as usize;
        let mut r = (self.0[w] & ((1u64 << (b & 63)) - 1)).count_ones();
        for i in 0..w {
            r += self.0[i].count_ones();
        }
        r
    }

    /// The largest byte of the set that is at most `b` (0 when there is none). Cost: up
    /// to four word scans.
    #[inline]
    pub fn floor(&self, b: u8) -> u8 {
        let mut w = (b >> 6) as usize;
        let shift = 63 - (b & 63);
        let mut word = (self.0[w] << shift) >> shift;
        loop {
            if word != 0 {
                return (w * 64 + 63 - word.leading_zeros() as usize) as u8;
            }
            if w == 0 {
                return 0;
            }
            w -= 1;
            word = self.0[w];
        }
    }

    /// Iterates the bytes in ascending order, one step per member (not per byte value).
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = u8> {
        let mut words = self.0;
        let mut i = 0usize;
        std::iter::from_fn(move || {
            while i < 4 {
                let w = words[i];
                if w != 0 {
                    words[i] = w & (w - 1);
                    return Some((i * 64 + w.trailing_zeros() as usize) as u8);
                }
                i += 1;
            }
            None
        })
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

#[cfg(test)]
mod tests {
    use super::ByteSet;

    /// `floor(b)` is the largest member at most `b` (0 when none), across word edges.
    #[test]
    fn floor_is_the_largest_member_at_most_b() {
        let mut a = ByteSet::EMPTY;
        for x in [5u8, 63, 64, 130, 255] {
            a.insert(x);
        }
        for b in 0..=255u8 {
            let want = (0..=b).rev().find(|&x| a.contains(x)).unwrap_or(0);
            assert_eq!(a.floor(b), want, "floor({b})");
        }
        assert_eq!(ByteSet::EMPTY.floor(255), 0);
    }

    #[test]
    fn iter_rank_and_intersection_agree_with_contains() {
        let mut a = ByteSet::EMPTY;
        let mut b = ByteSet::EMPTY;
        for x in [0u8, 1, 7, 63, 64, 65, 127, 128, 200, 255] {
            a.insert(x);
        }
        for x in (0..=255u8).step_by(3) {
            b.insert(x);
        }
        let members: Vec<u8> = a.iter().collect();
        assert_eq!(
            members,
            (0..=255u8).filter(|&x| a.contains(x)).collect::<Vec<u8>>()
        );
        for x in 0..=255u8 {
            let below = (0..x).filter(|&y| a.contains(y)).count() as u32;
            assert_eq!(a.rank(x), below, "rank {x}");
            assert_eq!(
                a.intersection(&b).contains(x),
                a.contains(x) && b.contains(x)
            );
        }
        assert_eq!(ByteSet::EMPTY.iter().count(), 0);
    }
}
