//! Tables of key complements ("a key other than these"), derived from the table of a
//! plain JSON string of the same characters: the two differ only on the tokens that
//! close one of the keys, which a walk of the key trie finds.
//!
//! Part of the token tables (the parent module); it uses the key tries of the compiler
//! (`compile::keys`), the lexeme automata and the vocabulary trie.

use super::*;

/// Trie children a key complement's derivation looks at, at most (then the table is
/// computed as any other). Five keys took 536 (a temporary harness, Llama 3.1).
pub(super) const MAX_KEY_DERIVE_WORK: usize = 1 << 16;

/// Which states of a key complement's tail automaton (`dev`, see `compile::keys`) are
/// equivalent to which states of a plain string of the same characters, as deep as the
/// longest token: the same for every complement built from that tail.
pub(super) type TailEq = FastMap<(u32, u32), bool>;

/// What a byte does to the pair of states of [`derive_key_complement`]'s walk.
pub(super) enum KeyStep {
    /// The subtree below is the same in both tables: both refuse it, or both accept its
    /// token and close (nothing may follow), or the two states are equivalent as deep
    /// as the longest token.
    Same,
    /// The complement refuses the subtree (a `"` right after a key, or an escape the
    /// string reads and the complement does not): none of its tokens is in the
    /// complement's table, whatever the string's table says of them.
    Refused,
    /// Both go on and differ below: walk the subtree.
    Walk(u32, u32),
}

/// The table of `state`, a trie state of the key complement `kc` (a key prefix read, see
/// `compile::keys`) or its start, derived from `from`, the table of `g0`, the state after
/// the opening quote (or the start) of `base`, a plain JSON string of the same
/// characters; `None` when the walk meets a token the complement keeps and the string
/// does not, or states that accept differently (then the table is computed as any
/// other); `Some(None)` when the table is `from` itself (no key closes within the
/// longest token).
///
/// The two lexemes read string characters alike, except that the complement refuses a
/// closing quote right after a key (and, where the string's characters include `\uXXXX`
/// escapes, the character by which it leaves its key trie cannot be one). So the
/// vocabulary trie is walked with both states side by side, and a subtree is left as
/// `from` has it wherever the two states are equivalent as deep as the longest token
/// (checked exactly on the complement's tail automaton, once per pair of states for every
/// complement built from it: `checked`): in practice once the complement has left its key
/// trie and finished that character. Where the complement dies first, no token of the
/// subtree is in its table (it never accepted on the way): they leave the accept set and
/// the finals, and the subtree's nodes leave the uncertain ranges. The result is exactly
/// the table a walk of `kc` would compute, however `from` itself was made.
///
/// Why: a complement's table after its opening quote keeps most of the vocabulary, and
/// its own plain-reach search and walk run over the whole key trie (on the 97 MaskBench
/// files with a mask over 1.8 ms, 3,941 such tables took 624 ms, 158 µs each); every
/// object with other properties has its own key set, so no table is shared. The table
/// keeps `from`'s accept bitmap (shared) and the bits it takes out. Cost: O(children of
/// the trie nodes that spell key prefixes or start an escape), at most
/// [`MAX_KEY_DERIVE_WORK`], plus an equivalence check (about 8 µs) per pair of states
/// `checked` does not know yet.
pub(super) fn derive_key_complement(
    (kc, state, trie0): (&Dfa, u32, u32),
    (base, g0, from): (&Dfa, u32, &StateTokens),
    (tail, checked): (&Dfa, &mut TailEq),
    trie: &TokenTrie,
    vocab_len: usize,
) -> Option<Option<StateTokens>> {
    match &from.accept {
        TokenSet::Dense(words) if words.len() == vocab_len.div_ceil(32) => {}
        TokenSet::Sparse(_) => {}
        _ => return None,
    }
    let depth = trie.max_depth();
    let mut step = |b: u8, k: u32, g: u32| -> Option<KeyStep> {
        let (k2, g2) = (kc.next(k, b), base.next(g, b));
        match (k2 == 0, g2 == 0) {
            (true, true) => Some(KeyStep::Same),
            (false, true) => None,
            (true, false) => Some(KeyStep::Refused),
            (false, false) => {
                let acc = kc.accepting(k2);
                if acc != base.accepting(g2) {
                    return None;
                }
                if acc {
                    return (kc.allowed(k2).is_empty() && base.allowed(g2).is_empty())
                        .then_some(KeyStep::Same);
                }
                let same = crate::compile::keys::tail_state(k2, trie0).is_some_and(|d| {
                    *checked.entry((d, g2)).or_insert_with(|| {
                        equivalent_within(tail, d, base, g2, depth).0 == Some(true)
                    })
                });
                Some(if same {
                    KeyStep::Same
                } else {
                    KeyStep::Walk(k2, g2)
                })
            }
        }
    };
    // Subtrees the complement refuses.
    let mut refused: Vec<u32> = Vec::new();
    let mut stack: Vec<(u32, u32, u32)> = vec![(0, state, g0)];
    let mut work = 0usize;
    while let Some((n, k, g)) = stack.pop() {
        let end = trie.end(n);
        let mut visit = |c: u32, b: u8, stack: &mut Vec<(u32, u32, u32)>| -> Option<()> {
            match step(b, k, g)? {
                KeyStep::Same => {}
                KeyStep::Refused => refused.push(c),
                KeyStep::Walk(k2, g2) => {
                    if trie.end(c) > c + 1 {
                        stack.push((c, k2, g2));
                    }
                }
            }
            Some(())
        };
        if let Some((bytes, kids)) = trie.wide(n) {
            work += kids.len();
            if work > MAX_KEY_DERIVE_WORK {
                return None;
            }
            for (b, &c) in bytes.iter().zip(kids) {
                visit(c, b, &mut stack)?;
            }
        } else {
            let mut c = n + 1;
            while c < end {
                work += 1;
                if work > MAX_KEY_DERIVE_WORK {
                    return None;
                }
                visit(c, trie.byte(c), &mut stack)?;
                c = trie.end(c);
            }
        }
    }
    if refused.is_empty() {
        return Some(None);
    }
    let mut gone: Vec<u32> = Vec::new();
    let mut cut: Vec<(u32, u32)> = Vec::new();
    for &c in &refused {
        let ce = trie.end(c);
        gone.extend_from_slice(trie.tokens_in(c, ce));
        cut.push((c, ce));
    }
    gone.sort_unstable();
    let kept = |t: &u32| gone.binary_search(t).is_err();
    let accept = match &from.accept {
        // The string's bitmap, shared, less those tokens' bits (by word).
        TokenSet::Dense(words) => {
            let mut drop: Vec<(u32, u32)> = Vec::new();
            for &t in &gone {
                let (w, bit) = (t >> 5, 1u32 << (t & 31));
                match drop.last_mut() {
                    Some((lw, bits)) if *lw == w => *bits |= bit,
                    _ => drop.push((w, bit)),
                }
            }
            TokenSet::Minus(words.clone(), drop.into())
        }
        TokenSet::Sparse(ids) => TokenSet::Sparse(ids.iter().copied().filter(kept).collect()),
        TokenSet::Minus(..) => return None,
    };
    let finals = from.finals.iter().copied().filter(kept).collect();
    cut.sort_unstable();
    Some(Some(StateTokens {
        accept,
        uncertain: subtract_ranges(&from.uncertain, &cut),
        finals,
    }))
}

/// The half-open ranges of `a` (sorted, disjoint) less those of `cut` (sorted, disjoint).
/// Cost: O(|a| + |cut|).
pub(super) fn subtract_ranges(a: &[(u32, u32)], cut: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(a.len() + cut.len());
    let mut j = 0;
    for &(mut lo, hi) in a {
        while j < cut.len() && cut[j].1 <= lo {
            j += 1;
        }
        let mut i = j;
        while lo < hi && i < cut.len() && cut[i].0 < hi {
            if cut[i].0 > lo {
                out.push((lo, cut[i].0));
            }
            lo = lo.max(cut[i].1);
            i += 1;
        }
        if lo < hi {
            out.push((lo, hi));
        }
    }
    out
}
