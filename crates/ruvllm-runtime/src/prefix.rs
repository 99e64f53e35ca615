//! The prefix cache's bookkeeping, whatever holds the cached keys and values: which
//! prompts are cached, the longest one a new prompt starts with, and which entry to give
//! up first (the least recently used). The candle backend keeps each prompt's own KV
//! cache (`V = Arc<KvCache>`, bounded by bytes); the llama.cpp backend keeps them in
//! sequence ids of its context (`V = u32`, a fixed number of slots). vLLM calls this
//! automatic prefix caching.
//!
//! Owns: [`PrefixLru`], [`MIN_PREFIX`], [`worth_storing`]. Uses: nothing of the crate.

/// Prompts shorter than this are neither stored in nor served from a prefix cache.
pub(crate) const MIN_PREFIX: usize = 32;

/// Whether a prompt of `len` tokens, `cached` of which came from the cache, is worth
/// storing: long enough, and at least [`MIN_PREFIX`] tokens past what was served.
pub(crate) fn worth_storing(len: usize, cached: usize) -> bool {
    len >= MIN_PREFIX && cached + MIN_PREFIX <= len
}

/// Cached prompts and what holds each one's keys and values, least recently used first
/// to go. Lookups are linear in the entries (a handful) and their shared prefixes.
pub(crate) struct PrefixLru<V> {
    entries: Vec<Entry<V>>,
    tick: u64,
}

/// One cached prompt: its tokens (empty: a slot not filled) and where its keys and values
/// are.
pub(crate) struct Entry<V> {
    pub(crate) tokens: Vec<u32>,
    pub(crate) value: V,
    used: u64,
}

impl<V> Default for PrefixLru<V> {
    fn default() -> Self {
        PrefixLru {
            entries: Vec::new(),
            tick: 0,
        }
    }
}

impl<V> PrefixLru<V> {
    /// Empty slots, one per value (llama.cpp's sequence ids set aside for the cache).
    pub(crate) fn with_slots(values: impl IntoIterator<Item = V>) -> Self {
        PrefixLru {
            entries: values
                .into_iter()
                .map(|value| Entry {
                    tokens: Vec::new(),
                    value,
                    used: 0,
                })
                .collect(),
            tick: 0,
        }
    }

    /// Whether there are no entries (and so no slots).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry sharing the longest prefix with `ids` (at least [`MIN_PREFIX`] tokens),
    /// marked used: where its keys and values are, and that length.
    pub(crate) fn best(&mut self, ids: &[u32]) -> Option<(&V, usize)> {
        self.tick += 1;
        let (i, n) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let n = e.tokens.iter().zip(ids).take_while(|(a, b)| a == b).count();
                (i, n)
            })
            .max_by_key(|&(_, n)| n)?;
        if n < MIN_PREFIX {
            return None;
        }
        self.entries[i].used = self.tick;
        Some((&self.entries[i].value, n))
    }

    /// Whether exactly these tokens are cached.
    pub(crate) fn holds(&self, tokens: &[u32]) -> bool {
        self.entries.iter().any(|e| e.tokens == tokens)
    }

    /// Removes the least recently used entry.
    pub(crate) fn pop_least_recent(&mut self) -> Option<Entry<V>> {
        let (i, _) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.used)?;
        Some(self.entries.swap_remove(i))
    }

    /// Adds an entry, used now.
    pub(crate) fn push(&mut self, tokens: Vec<u32>, value: V) {
        self.tick += 1;
        self.entries.push(Entry {
            tokens,
            value,
            used: self.tick,
        });
    }

    /// Refills the least recently used slot with `tokens`, used now, when `fill` (which
    /// copies the prompt's keys and values into the slot's place) succeeds; a failed fill
    /// leaves the slot empty.
    pub(crate) fn refill_least_recent(&mut self, tokens: Vec<u32>, fill: impl FnOnce(&V) -> bool) {
        self.tick += 1;
        let tick = self.tick;
        let Some(slot) = self.entries.iter_mut().min_by_key(|e| e.used) else {
            return;
        };
        if fill(&slot.value) {
            slot.tokens = tokens;
            slot.used = tick;
        } else {
            slot.tokens.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest shared prefix wins, short ones are not served, and the least recently
    /// used entry goes first.
    #[test]
    fn longest_prefix_and_least_recent() {
        let a: Vec<u32> = (0..40).collect();
        let mut b = a.clone();
        b.extend(100..120);
        let mut lru = PrefixLru::default();
        lru.push(a.clone(), 'a');
        lru.push(b.clone(), 'b');
        assert_eq!(lru.best(&b).map(|(v, n)| (*v, n)), Some(('b', 60)));
        assert_eq!(lru.best(&a[..31]), None);
        assert!(lru.holds(&a) && !lru.holds(&a[..39]));
        // `b` was used last: `a` goes first.
        assert_eq!(lru.pop_least_recent().map(|e| e.value), Some('a'));
        let mut slots = PrefixLru::with_slots([7u32, 8]);
        slots.refill_least_recent(a.clone(), |&s| s == 7);
        assert_eq!(slots.best(&a).map(|(v, n)| (*v, n)), Some((7, 40)));
        // The other slot (never used) is refilled next; a failed fill leaves it empty.
        slots.refill_least_recent(b.clone(), |_| false);
        assert!(!slots.holds(&b));
        assert!(worth_storing(64, 32) && !worth_storing(63, 32));
    }
}
