//! Parse-state identities, and the mask work they let matchers share.
//!
//! # Why
//!
//! A mask is a function of the parser's state, not of the text that led there. Two
//! generations under one constraint (two requests with the same schema, or the valid and
//! invalid instances of one MaskBench file) reach the same states again and again: the
//! inside of the same string property, the place after the same key. The boundary walk
//! (`boundary.rs`) is most of a mask's cost, and its per-matcher memo cannot be shared: its
//! nodes are parser cores with origins as byte offsets, which differ between generations.
//!
//! # What an identity is
//!
//! The future of an Earley parser from set `k` (which bytes it accepts, and the sets it
//! builds) depends on the core of set `k` and, through completion, on what each core
//! item's origin set holds for it: when the item's rule `r` completes, the parser advances
//! the items of the origin set that wait for `r`, which in turn complete at their own
//! origins. So an identity names a set by its core items, each with the identity of what
//! waits for its rule at its origin:
//!
//! ```text
//! id(k)      = intern([(pos, dfa state, wait(origin, rule(pos))) for each core item of k])
//! wait(o, r) = intern([(pos, wait(origin, rule(pos))) for each item of set o before `r`])
//! ```
//!
//! Items predicted in `o` itself (origin `o`) wait for other rules of the same set, and
//! left recursion makes that a cycle, so a waiting key lists every rule reached that way
//! within the set and refers to them by index. Naming only what completion reads, rather
//! than whole origin sets, is what lets states repeat: the items of the `n`-th element of
//! an array have the `(n-1)`-th element's end as origin, and that set differs from element
//! to element by the history it carries, but what waits there for an element does not.
//!
//! Interning compares whole keys (a hash only picks the bucket), so equal identities mean
//! equal keys, and by induction over origins equal futures. The one input outside the
//! items is the text, read by semantic checks (`crate::grammar::ValueCheck`) while a set is
//! closed; a closed set whose closure ran checks gets the identity of its core together
//! with the outcomes of those checks, in order (the closure is a deterministic function of
//! the core, the sets below and those outcomes). What comes after a set may still run
//! checks on text: the walk cache below keeps such parts apart.
//!
//! Identities are per [`crate::Constraint`], shared by its matchers and threads. The
//! interner is sharded by hash (a short lock per key: one per mask, more when the sets
//! below are new). It is bounded
//! ([`MAX_WORDS`]): past it, new states get fresh identities that nothing shares (marked
//! [`UNIQUE`]; the interner is then sealed), so memory stays bounded and answers stay
//! exact; only sharing stops.
//!
//! # The walk cache
//!
//! [`WalkCache`] keeps, per identity, the result of the boundary walk from that state:
//! the tokens it accepted along paths on which no step ran a semantic check, and the trie
//! ranges below a step that did (their answer depends on the text, so a later mask walks
//! them again with the real parser). A mask at a state met before then costs its table
//! unions, one lookup, and the walk over those ranges only.
//!
//! Owns: a constraint's parse-state identities (`StateIds`) and walk results (`WalkCache`),
//! both bounded. Uses: `grammar` (check outcomes) and `util`.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::util::FastMap;

/// Marks an identity that was not interned (the interner was full): equal to no other.
pub(crate) const UNIQUE: u32 = 1 << 31;

/// Words of keys an interner holds at most (4 MiB of keys, about 100,000 states of a
/// JSON schema), plus its index; see the module doc.
pub(crate) const MAX_WORDS: usize = 1 << 20;

/// Tokens and range bounds a walk cache holds at most (4 MiB).
pub(crate) const MAX_WALK_WORDS: usize = 1 << 20;

const SHARD_BITS: u32 = 3;
const SHARDS: usize = 1 << SHARD_BITS;
const NO_ENTRY: u32 = u32::MAX;

/// First word of a core key.
pub(crate) const KEY_CORE: u32 = 0;
/// First word of a closed-set key (core identity, check count, outcome bits).
pub(crate) const KEY_CLOSED: u32 = 1;
/// First word of a waiting key (see `Parser::wait_id`).
pub(crate) const KEY_WAIT: u32 = 2;
/// The waiting identity of the start rule's items (completing them accepts). Interned
/// identities are below it: the interner hands out at most `UNIQUE` of them.
pub(crate) const WAIT_ROOT: u32 = u32::MAX;

#[derive(Default)]
struct Shard {
    /// Key hash -> the latest entry with that hash; older ones follow `chain`.
    heads: FastMap<u64, u32>,
    chain: Vec<u32>,
    /// Entry `i`'s key is `words[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    words: Vec<u32>,
}

/// The identity interner of one constraint (see the module doc).
pub(crate) struct StateIds {
    shards: Box<[Mutex<Shard>]>,
    words: AtomicUsize,
    unique: AtomicU32,
    /// Set once a key was refused: no key is interned after (see [`StateIds::intern`]).
    sealed: std::sync::atomic::AtomicBool,
}

impl Default for StateIds {
    fn default() -> Self {
        StateIds {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            words: AtomicUsize::new(0),
            unique: AtomicU32::new(0),
            sealed: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

fn hash(key: &[u32]) -> u64 {
    let mut h: u64 = 0x243f_6a88_85a3_08d3;
    for &w in key {
        h = (h ^ w as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h ^ (h >> 29)
}

impl StateIds {
    /// The identity of `key`: the same number for equal keys, a new one for a key never
    /// seen (or a [`UNIQUE`] one once the interner is full). Cost: a hash of the key and a
    /// lookup under one shard's lock; a copy of the key when it is new.
    pub(crate) fn intern(&self, key: &[u32]) -> u32 {
        let h = hash(key);
        let s = (h >> (64 - SHARD_BITS)) as usize;
        let mut shard = self.shards[s].lock().unwrap_or_else(|e| e.into_inner());
        let head = shard.heads.get(&h).copied().unwrap_or(NO_ENTRY);
        let mut i = head;
        while i != NO_ENTRY {
            let (a, b) = (
                shard.starts[i as usize] as usize,
                shard.starts[i as usize + 1] as usize,
            );
            if shard.words[a..b] == *key {
                return (i << SHARD_BITS) | s as u32;
            }
            i = shard.chain[i as usize];
        }
        let local = shard.chain.len() as u32;
        let full = self.sealed.load(Ordering::Relaxed)
            || self.words.load(Ordering::Relaxed) + key.len() + 4 > MAX_WORDS
            || local >= UNIQUE >> SHARD_BITS;
        if full {
            // Sealed for good: no key interned later can hold a unique identity (those
            // repeat after 2^31 - 1), so equal keys stay equal states. A unique identity
            // is never [`WAIT_ROOT`], which interned keys do hold.
            self.sealed.store(true, Ordering::Relaxed);
            drop(shard);
            return UNIQUE | (self.unique.fetch_add(1, Ordering::Relaxed) % (UNIQUE - 1));
        }
        if shard.starts.is_empty() {
            shard.starts.push(0);
        }
        shard.words.extend_from_slice(key);
        let end = shard.words.len() as u32;
        shard.starts.push(end);
        shard.chain.push(head);
        shard.heads.insert(h, local);
        // Key words plus about four words of index per entry.
        self.words.fetch_add(key.len() + 4, Ordering::Relaxed);
        (local << SHARD_BITS) | s as u32
    }

    /// Approximate heap bytes held.
    pub(crate) fn memory(&self) -> usize {
        self.words.load(Ordering::Relaxed) * 4
    }
}

/// What the boundary walk from one state found (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Tokens accepted along paths on which no step ran a semantic check.
    pub accepted: Vec<u32>,
    /// Sorted, disjoint trie ranges below a step that ran one: walked again every time.
    pub dirty: Vec<(u32, u32)>,
}

/// Boundary-walk results per state identity, for one constraint (see the module doc).
#[derive(Default)]
pub(crate) struct WalkCache {
    map: Mutex<FastMap<u32, Arc<Walked>>>,
    words: AtomicUsize,
}

impl WalkCache {
    /// The walk remembered for identity `id`. Cost: one lookup under a lock.
    pub(crate) fn get(&self, id: u32) -> Option<Arc<Walked>> {
        if id & UNIQUE != 0 {
            return None;
        }
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Remembers `w` for `id` unless the cache is full or `id` is [`UNIQUE`].
    pub(crate) fn put(&self, id: u32, w: Walked) {
        if id & UNIQUE != 0 {
            return;
        }
        let n = w.accepted.len() + 2 * w.dirty.len() + 8;
        if self.words.load(Ordering::Relaxed) + n > MAX_WALK_WORDS {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.insert(id, Arc::new(w)).is_none() {
            self.words.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Approximate heap bytes held.
    pub(crate) fn memory(&self) -> usize {
        self.words.load(Ordering::Relaxed) * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_get_equal_identities_and_a_full_interner_shares_nothing() {
        let ids = StateIds::default();
        let a = ids.intern(&[KEY_CORE, 1, 2, 3]);
        let b = ids.intern(&[KEY_CORE, 1, 2, 4]);
        let c = ids.intern(&[KEY_CLOSED, 1, 2, 3]);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(ids.intern(&[KEY_CORE, 1, 2, 3]), a);
        assert_eq!(ids.intern(&[KEY_CORE, 1, 2, 4]), b);
        assert_eq!(a & UNIQUE, 0);
        // Thousands of keys, many sharing a shard: all distinct, all found again.
        let got: Vec<u32> = (0..5000u32).map(|i| ids.intern(&[KEY_CORE, i])).collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len());
        for (i, &g) in got.iter().enumerate() {
            assert_eq!(ids.intern(&[KEY_CORE, i as u32]), g);
        }
        // Past the bound, a new key gets a fresh unique identity each time.
        let big = vec![7u32; MAX_WORDS];
        let u1 = ids.intern(&big);
        let u2 = ids.intern(&big);
        assert!(u1 & UNIQUE != 0 && u2 & UNIQUE != 0 && u1 != u2);
        assert_eq!(ids.intern(&[KEY_CORE, 1, 2, 3]), a, "old keys still found");
        let cache = WalkCache::default();
        cache.put(u1, Walked::default());
        assert!(cache.get(u1).is_none(), "unique identities are not cached");
        cache.put(a, Walked::default());
        assert!(cache.get(a).is_some());
    }
}
