//! The bottom layer: a fast hasher for the small integer keys every other layer hashes
//! (parser items, automaton states, token ids), the index types of a compiled grammar,
//! and two scanners of JSON text (where a value ends) that the semantic checks and the
//! completion search share. It owns nothing and uses nothing of the crate.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// Maps and sets of small integer keys, with [`ItemHasher`].
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<ItemHasher>>;
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<ItemHasher>>;

/// A fast hasher for packed item keys.
#[derive(Default)]
pub(crate) struct ItemHasher(u64);
impl Hasher for ItemHasher {
    /// The state rotated so that its well-mixed high bits come first: a multiply
    /// spreads a key's low bits upward only, and the table indexes buckets by the low
    /// bits, so without the rotation keys that differ only above bit 14 (boundary-walk
    /// transitions of nodes 64 apart, with the same byte) shared a bucket position.
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
    /// Eight bytes per multiply (long literals and keys are hashed too), the rest one
    /// at a time.
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            self.0 = (self.0.rotate_left(23) ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        for &b in words.remainder() {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0.rotate_left(23) ^ i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(23) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// Defines an index newtype over `u32`: a distinct type per kind of index, so that a
/// lexeme index cannot be used as a rule index; `ix()` gives the `usize` to index with.
macro_rules! index_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        #[repr(transparent)]
        pub(crate) struct $name(pub u32);

        impl $name {
            /// The index as a `usize`.
            #[inline]
            pub fn ix(self) -> usize {
                self.0 as usize
            }
        }
    };
}

index_type!(
    /// A lexeme of a compiled grammar: an index into its lexemes (and into a
    /// constraint's token tables).
    LexemeId
);
index_type!(
    /// An Earley rule of a compiled grammar: an index into its rules.
    EarleyRuleId
);

/// The first index at or after `i` that is not a blank.
pub(crate) fn skip_blanks(text: &[u8], mut i: usize) -> usize {
    while text.get(i).is_some_and(|b| b" \t\r\n".contains(b)) {
        i += 1;
    }
    i
}

/// The end (exclusive) of the JSON value that starts at `i` in `text`.
pub(crate) fn value_end(text: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    loop {
        match *text.get(j)? {
            b'"' => {
                j += 1;
                while *text.get(j)? != b'"' {
                    j += if text[j] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' | b'[' => depth += 1,
            // A scalar ends before its container's closer.
            b'}' | b']' if depth == 0 => return Some(j),
            b'}' | b']' => depth -= 1,
            b',' | b':' | b' ' | b'\t' | b'\r' | b'\n' if depth == 0 => return Some(j),
            _ => {}
        }
        j += 1;
        if depth == 0 && matches!(text[j - 1], b'"' | b'}' | b']') {
            return Some(j);
        }
    }
}
