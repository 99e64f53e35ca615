//! What shortest completions and budget masks keep between calls: plain data, so that
//! the matcher can hold it without depending on the code that computes it (`complete`,
//! `budget`, which extend the matcher).
//!
//! Owns: plain data (`Completion`, per-set facts), and the bounded caches a constraint
//! keeps them in (`BudgetCache`). Uses: the distance arithmetic of `compile::dist`, token
//! sets.

use std::sync::{Arc, Mutex, OnceLock};

use crate::util::FastMap;

/// A way to finish the output: tokens that, committed one after the other, make it a
/// complete sentence (then only EOS is left), and their text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub(crate) tokens: Vec<u32>,
    pub(crate) text: Vec<u8>,
}

impl Completion {
    /// The tokens, in order (none when the output is complete already).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Their bytes, concatenated.
    pub fn text(&self) -> &[u8] {
        &self.text
    }

    /// How many tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the output is complete already.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The completion after its first token (`None` when empty).
    pub(crate) fn rest(&self, vocab: &crate::vocab::Vocabulary) -> Option<Completion> {
        let (&first, rest) = self.tokens.split_first()?;
        let cut = vocab.token_bytes(first).len().min(self.text.len());
        Some(Completion {
            tokens: rest.to_vec(),
            text: self.text[cut..].to_vec(),
        })
    }
}

/// A completion known at a matcher state: the state (committed tokens, output bytes)
/// and the completion.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) tokens: usize,
    pub(crate) bytes: usize,
    pub(crate) completion: Option<Completion>,
}

/// A token that crosses a lexeme boundary, with the distances after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaf {
    pub(crate) token: u32,
    /// Bytes of the shortest completion after it that runs no semantic check.
    pub(crate) unchecked: u32,
    /// Bytes of the shortest syntactic completion after it.
    pub(crate) any: u32,
}

/// The budget facts of one parse-state identity.
#[derive(Debug)]
pub(crate) struct StateBudget {
    /// The largest proven bound (bytes) over every token of the exact mask ([`crate::compile::automata::dist::INF`] when
    /// some token has none).
    pub(crate) far: u32,
    /// The largest syntactic bound (bytes) over every token of the exact mask, semantic
    /// checks left aside: within it every token fits, tentatively.
    pub(crate) far_any: u32,
    /// Whether the boundary-crossing tokens were walked: `false` on a state's first
    /// visit far from the end of the budget, when `far` and `far_any` cover the tokens
    /// inside lexemes only, and the boundary-crossing ones are left to be confirmed.
    pub(crate) walked: bool,
    pub(crate) leaves: Vec<Leaf>,
    /// Per leaf: the tokens of the shortest unchecked completion after it, and of the
    /// shortest syntactic one (computed when a step first needs them).
    pub(crate) tokens: OnceLock<Vec<(u32, u32)>>,
}

/// Identities whose budget facts a constraint keeps.
pub(crate) const MAX_ENTRIES: usize = 1 << 16;
/// Budget tables a constraint keeps.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// The tokens that stay inside a lexeme from one state, grouped by the state they end in.
#[derive(Debug)]
pub(crate) struct BudgetTable {
    pub(crate) groups: Vec<Group>,
}

#[derive(Debug)]
pub(crate) struct Group {
    /// Bytes from the end state to the end of the lexeme.
    pub(crate) dist: u32,
    /// The end state.
    pub(crate) state: u32,
    pub(crate) tokens: crate::tables::TokenSet,
    /// Tokens of the end state's shortest text (computed on first need).
    pub(crate) fewest: OnceLock<u32>,
}

/// A map bounded by entries and by (approximate) bytes: emptied when an insertion would
/// pass either bound.
pub(crate) struct Bounded<K, V> {
    map: FastMap<K, V>,
    bytes: usize,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded {
            map: FastMap::default(),
            bytes: 0,
        }
    }
}

impl<K: std::hash::Hash + Eq, V: Clone> Bounded<K, V> {
    pub(crate) fn get(&self, k: &K) -> Option<V> {
        self.map.get(k).cloned()
    }

    /// Inserts `v` of about `size` bytes (a replaced value's bytes stay counted until the
    /// next emptying). Cost: O(1), O(entries) when emptied.
    pub(crate) fn insert(&mut self, k: K, v: V, size: usize) {
        if self.map.len() >= MAX_ENTRIES || self.bytes + size > MAX_BYTES {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.map.insert(k, v);
    }
}

/// Per-constraint caches of budget facts (see `crate::matching::budget`, which computes them).
#[derive(Default)]
pub(crate) struct BudgetCache {
    pub(crate) states: Mutex<Bounded<u32, Arc<StateBudget>>>,
    pub(crate) tables: Mutex<Bounded<(u32, u32), Arc<BudgetTable>>>,
    pub(crate) closes: Mutex<Bounded<(u32, u32), Arc<LexemeClose>>>,
}

impl BudgetCache {
    /// Approximate heap bytes (each cache at most [`MAX_BYTES`]). Cost: three locks.
    pub(crate) fn memory(&self) -> usize {
        self.states.lock().map_or(0, |m| m.bytes)
            + self.tables.lock().map_or(0, |m| m.bytes)
            + self.closes.lock().map_or(0, |m| m.bytes)
    }
}

/// The fewest tokens found that take a lexeme from one state to its end: `steps`, tokens
/// that stay inside the lexeme, then from the state `end` where they stop, the lexeme's
/// shortest text in its fewest tokens; `count` in all.
#[derive(Debug)]
pub(crate) struct LexemeClose {
    pub(crate) count: u32,
    pub(crate) steps: Vec<u32>,
    pub(crate) end: u32,
}
