//! Token tables: for each lexeme DFA state, which tokens are decided without the parser.
//!
//! For a parser item inside lexeme `L` in DFA state `s`, a token either
//!
//! * keeps `L` alive through all of its bytes: it is allowed whatever the parser stack is
//!   (**accept** set; this is most of the vocabulary inside a JSON string), or
//! * kills `L` before `L` ever accepted on the way: it is refused by this item, or
//! * passes an accepting state of `L` and then goes on past it: whether it is allowed
//!   depends on what the parser allows after `L` (**uncertain**; stored as ranges of
//!   trie nodes, usually a few hundred tokens such as `",` or ` }`).
//!
//! A mask is then the union of the accept sets of the items in the current Earley set, plus
//! the uncertain tokens that a real parser walk over just those trie ranges accepts. This
//! is exact: every token a full walk would accept is in one of the two parts, and both
//! parts only hold tokens a full walk accepts.
//!
//! Tables are computed lazily, the first time a state is met (one pruned trie walk, a table
//! lookup per node), and kept for the life of the [`crate::Constraint`], shared by every
//! matcher and thread.

use std::sync::OnceLock;

use crate::compile::Dfa;
use crate::vocab::TokenTrie;

/// A set of token ids: sorted ids when few, a bitmap when many.
#[derive(Debug, Clone)]
pub(crate) enum TokenSet {
    Sparse(Vec<u32>),
    Dense(Vec<u32>),
}

impl TokenSet {
    #[inline]
    pub fn or_into(&self, mask: &mut [u32]) {
        match self {
            TokenSet::Sparse(ids) => {
                for &t in ids {
                    mask[(t >> 5) as usize] |= 1 << (t & 31);
                }
            }
            TokenSet::Dense(words) => {
                for (m, w) in mask.iter_mut().zip(words) {
                    *m |= *w;
                }
            }
        }
    }

    pub fn memory(&self) -> usize {
        match self {
            TokenSet::Sparse(v) | TokenSet::Dense(v) => v.len() * 4,
        }
    }
}

/// What a lexeme state decides on its own.
#[derive(Debug, Clone)]
pub(crate) struct StateTokens {
    pub accept: TokenSet,
    /// Half-open ranges of trie nodes whose tokens need the parser; sorted, disjoint.
    pub uncertain: Vec<(u32, u32)>,
    /// Tokens of `accept` that end where the lexeme is complete and cannot go on: their
    /// commit completes the lexeme, which a semantic check may refuse (see
    /// [`crate::grammar::ValueCheck`]), so grammars with checks re-verify them.
    pub finals: Vec<u32>,
}

impl StateTokens {
    pub fn memory(&self) -> usize {
        self.accept.memory() + self.uncertain.len() * 8 + self.finals.len() * 4 + 64
    }
}

/// Lazily filled tables, one slot per state of one lexeme (for one vocabulary).
pub(crate) struct Tables {
    slots: Vec<OnceLock<StateTokens>>,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tables({} states)", self.slots.len())
    }
}

impl Tables {
    pub fn new(n: usize) -> Tables {
        Tables {
            slots: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    #[inline]
    pub fn get(
        &self,
        idx: usize,
        dfa: &Dfa,
        state: u32,
        trie: &TokenTrie,
        vocab_len: usize,
    ) -> &StateTokens {
        self.slots[idx].get_or_init(|| compute(dfa, state, trie, vocab_len))
    }

    /// Number of computed slots and their heap bytes.
    pub fn usage(&self) -> (usize, usize) {
        let mut n = 0;
        let mut bytes = 0;
        for s in &self.slots {
            if let Some(t) = s.get() {
                n += 1;
                bytes += t.memory();
            }
        }
        (n, bytes)
    }
}

/// One pruned walk of the trie from DFA state `s0`.
fn compute(dfa: &Dfa, s0: u32, trie: &TokenTrie, vocab_len: usize) -> StateTokens {
    let mut accept: Vec<u32> = Vec::new();
    let mut uncertain: Vec<(u32, u32)> = Vec::new();
    let mut finals: Vec<u32> = Vec::new();
    // (node, state, exited): `exited` = the lexeme accepted at some proper prefix.
    let mut stack: Vec<(u32, u32, bool)> = vec![(0, s0, false)];
    while let Some((n, s, exited)) = stack.pop() {
        let allowed = dfa.allowed(s);
        let end = trie.end(n);
        let mut c = n + 1;
        while c < end {
            let ce = trie.end(c);
            let b = trie.byte(c);
            if allowed.contains(b) {
                let s2 = dfa.next(s, b);
                accept.extend_from_slice(trie.tokens_at(c));
                if dfa.accepting(s2) && dfa.allowed(s2).is_empty() {
                    finals.extend_from_slice(trie.tokens_at(c));
                }
                if ce > c + 1 {
                    stack.push((c, s2, exited || dfa.accepting(s2)));
                }
            } else if exited {
                uncertain.push((c, ce));
            }
            c = ce;
        }
    }
    uncertain.sort_unstable();
    let accept = if accept.len() * 32 > vocab_len {
        let mut words = vec![0u32; vocab_len.div_ceil(32)];
        for t in accept {
            words[(t >> 5) as usize] |= 1 << (t & 31);
        }
        TokenSet::Dense(words)
    } else {
        accept.sort_unstable();
        TokenSet::Sparse(accept)
    };
    StateTokens {
        accept,
        uncertain,
        finals,
    }
}
