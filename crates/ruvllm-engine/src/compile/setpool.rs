//! The interned state sets of a subset construction.
//!
//! Both determinizations of the crate, the NFA route ([`super::subset`], sets of NFA
//! states) and the composition ([`super::compose`], sets of (leaf, leaf state) positions),
//! keep their DFA states' sets the same way: in id order in one pool, with a hash-chained
//! index to find a set that was met before. Set 0 is the dead state's empty set.
//!
//! Part of the compiler (the parent module). Owns: the interned sets of one construction.
//! Uses: `util` only.

use crate::util::FastMap;

/// Sets of `T`, numbered from 0 (the empty set) in the order they were added.
pub(crate) struct SetPool<T> {
    /// Set `i` is `pool[off[i]..off[i + 1]]`.
    pool: Vec<T>,
    off: Vec<u32>,
    /// A set's hash to the newest set with that hash; `chain[i]` to the one before set
    /// `i` (0: none).
    heads: FastMap<u64, u32>,
    chain: Vec<u32>,
}

impl<T: Copy + Eq> SetPool<T> {
    /// A pool holding only the empty set (id 0).
    pub(crate) fn new() -> Self {
        SetPool {
            pool: Vec::new(),
            off: vec![0, 0],
            heads: FastMap::default(),
            chain: vec![0],
        }
    }

    /// Set `i`. Cost: O(1).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &[T] {
        &self.pool[self.off[i] as usize..self.off[i + 1] as usize]
    }

    /// The id of `set` (whose hash is `h`) if it was added, else 0. Cost: a hash lookup
    /// and a comparison per set with that hash.
    #[inline]
    pub(crate) fn find(&self, set: &[T], h: u64) -> u32 {
        let mut found = self.heads.get(&h).copied().unwrap_or(0);
        while found != 0 && self.get(found as usize) != set {
            found = self.chain[found as usize];
        }
        found
    }

    /// Whether adding `more` items keeps the pool within its `u32` offsets.
    pub(crate) fn has_room(&self, more: usize) -> bool {
        self.pool.len().saturating_add(more) < u32::MAX as usize
    }

    /// Items held, over all sets.
    pub(crate) fn items(&self) -> usize {
        self.pool.len()
    }

    /// Adds `set` (hash `h`, not added before, and [`SetPool::has_room`] for it); its id
    /// is the number of sets before it. Cost: amortized O(`set.len()`).
    pub(crate) fn push(&mut self, set: &[T], h: u64) -> u32 {
        debug_assert!(self.has_room(set.len()));
        let id = (self.off.len() - 1) as u32;
        self.pool.extend_from_slice(set);
        self.off.push(self.pool.len() as u32);
        self.chain.push(self.heads.insert(h, id).unwrap_or(0));
        id
    }
}
