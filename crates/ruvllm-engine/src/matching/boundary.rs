//! The boundary walk: the part of a mask that needs the parser, with its steps memoized.
//!
//! A token table ([`crate::tables`]) decides most tokens from the lexeme state alone. The
//! rest cross a lexeme boundary (inside a JSON string: `",`, `"}`, `abc"]`, ...): the
//! matcher walks the token trie over just those, pushing each byte onto the real Earley
//! parser. The same parser steps recur. Every token that closes a string reaches the same
//! state after its quote whatever text came before the quote, and the next mask, one
//! token further into the string, walks the same tokens again.
//!
//! # The memo
//!
//! Each position of the walk gets a node of a lazily built automaton, and the parser's
//! answer for (node, byte) is kept: the next node, or "refused". A node is either
//!
//! * **canonical**: the *core* of a parser set (its scanned items, before prediction and
//!   completion) whose origins all point at or below the set where the mask started, or
//! * **derived**: reached from another node by one byte, when the new core points at a set
//!   inside the walk (an item predicted after the boundary).
//!
//! Why this is exact. A set's closure and the sets after it are a function of its core,
//! of the sets its origins point at (completion looks them up; their own items point
//! lower still), and of the text, but only through semantic checks. Predictions take the
//! current index as origin, and the parser only compares origins with the current index
//! or follows them, so a shift of every index after the core changes nothing. Hence:
//!
//! * a step is remembered only when it ran no semantic check ([`Parser::checks`] is
//!   unchanged, which covers the closure of the set before and, with checks, of the set
//!   after). A step that ran one is taken for real every time, and the positions below it
//!   are not memoized until a step that ran none reaches a canonical core;
//! * the memo lives in the [`crate::Matcher`] and stays valid while the sets its cores
//!   point at are unchanged: a rollback below the highest such origin
//!   ([`Parser::low_water`]) clears it.
//!
//! A hit costs one hash lookup instead of a parser step (a closure at a boundary builds
//! tens of items). When a lookup misses below a run of hits, the bytes of the run are
//! pushed for real first (the parser is only as deep as the last real step).
//!
//! Limits: the memo is bounded: it is cleared at the start of a mask once it holds
//! [`MAX_EDGES`] transitions or nodes, and a walk that reaches twice that takes its further
//! steps for real, so a matcher's memo stays under about 2 MiB (a walk inside a string
//! needs about 700 transitions). A clone of a matcher starts with an empty memo: it is a
//! cache, and copying it would make forks cost more than the parser history they copy.

use crate::deadline::Deadline;
use crate::error::MatchError;
use crate::handle::constraint::Constraint;
use crate::parse::earley::{Item, Parser, ROOT};
use crate::parse::states::Walked;
use crate::util::FastMap;

/// No node: the position is not memoized (below a step that ran a semantic check).
const NONE: u32 = u32::MAX;
/// The byte was refused.
const DEAD: u32 = u32::MAX - 1;
/// Transitions (and nodes) a memo may hold at the start of a mask; see the module doc.
pub(crate) const MAX_EDGES: usize = 1 << 13;

/// Memoized parser steps of the boundary walk (see the module doc). A clone is empty.
#[derive(Default)]
pub(crate) struct WalkMemo {
    cores: FastMap<Box<[Item]>, u32>,
    next: FastMap<u64, u32>,
    nodes: u32,
    /// The highest origin a canonical core points at: sets `0..=hi` must not change.
    hi: usize,
}

impl Clone for WalkMemo {
    /// An empty memo (see the module doc).
    fn clone(&self) -> Self {
        WalkMemo::default()
    }
}

#[inline]
fn key(node: u32, b: u8) -> u64 {
    ((node as u64) << 8) | b as u64
}

impl WalkMemo {
    /// Drops the memo when a rollback changed a set it depends on, or when it is full.
    /// Called at the start of each mask; starts a new low-water period of the parser.
    pub(crate) fn prepare(&mut self, p: &mut Parser) {
        if self.nodes > 0
            && (p.low_water < self.hi
                || self.next.len() >= MAX_EDGES
                || self.nodes as usize >= MAX_EDGES)
        {
            // Emptied in place: the tables keep their capacity, so a memo that filled once
            // does not grow (rehashing at every doubling) again after each clear.
            self.cores.clear();
            self.next.clear();
            self.nodes = 0;
            self.hi = 0;
        }
        p.reset_low_water();
    }

    /// Transitions and nodes held.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.next.len(), self.nodes as usize)
    }

    /// Whether the walk may add no more (twice the limit at a mask's start).
    fn full(&self) -> bool {
        self.nodes as usize >= 2 * MAX_EDGES || self.next.len() >= 2 * MAX_EDGES
    }

    fn fresh(&mut self) -> u32 {
        if self.full() {
            return NONE;
        }
        self.nodes += 1;
        self.nodes - 1
    }

    /// The canonical node of `core`, or [`NONE`] when an origin points above `base`.
    fn intern(&mut self, core: &[Item], base: usize) -> u32 {
        let mut hi = 0;
        for it in core {
            if it.origin != ROOT {
                if it.origin as usize > base {
                    return NONE;
                }
                hi = hi.max(it.origin as usize);
            }
        }
        if let Some(&id) = self.cores.get(core) {
            return id;
        }
        let id = self.fresh();
        if id != NONE {
            self.cores.insert(core.into(), id);
            self.hi = self.hi.max(hi);
        }
        id
    }
}

/// One boundary walk: the real parser, how deep it is, and the memo.
struct Walk<'a> {
    c: &'a Constraint,
    p: &'a mut Parser,
    memo: &'a mut WalkMemo,
    clock: &'a mut Deadline,
    /// The trie nodes from the walk's root down to the current one, with their memo nodes.
    stack: Vec<(u32, u32)>,
    /// The bytes of `stack` below the root.
    path: Vec<u8>,
    /// How many bytes of `path` are pushed on the parser (the rest were memo hits).
    real: usize,
    /// The set where the mask started.
    base: usize,
    /// What the walk found, for the walk cache (see [`crate::parse::states`]), when asked.
    rec: Option<Walked>,
    /// Stack length from which the path is below a step that ran a semantic check
    /// (`usize::MAX`: it is not).
    dirty_from: usize,
    /// Whether the last [`Walk::step`] ran no semantic check.
    clean: bool,
}

/// Walks the token trie over the sorted, disjoint node `ranges` only, stepping the parser
/// (or the memo), and sets the bits of the tokens it accepts. The parser is left as it was.
///
/// The walk is driven by the ranges, not by the trie's sibling lists: for each range it
/// climbs the parent links from the range's first node to the current path, steps down to
/// it, then reads the range's nodes in order (a range is whole subtrees). So it touches the
/// nodes of the ranges and their ancestors only; iterating the siblings of every ancestor
/// instead cost about five times as many (cache-missing) node visits inside a string.
/// Cost: one memo lookup or parser step per node touched.
///
/// With `record`, also returns what the walk found for the walk cache: the tokens it
/// accepted along paths on which no step ran a semantic check, and the parts of the
/// ranges below a step that ran one.
pub(crate) fn walk(
    c: &Constraint,
    p: &mut Parser,
    memo: &mut WalkMemo,
    ranges: &[(u32, u32)],
    mask: &mut [u32],
    clock: &mut Deadline,
    record: bool,
) -> Result<Option<Walked>, MatchError> {
    let base = p.top();
    let root = if p.top_info().checked {
        NONE
    } else {
        memo.intern(p.top_core(), base)
    };
    let mut w = Walk {
        c,
        p,
        memo,
        clock,
        stack: vec![(0, root)],
        path: Vec::new(),
        real: 0,
        base,
        rec: record.then(Walked::default),
        dirty_from: usize::MAX,
        clean: true,
    };
    let r = w.run(ranges, mask);
    // On an error the walk stopped midway: drop the sets it had pushed.
    w.p.truncate(base);
    r.map(|()| w.rec)
}

impl Walk<'_> {
    fn run(&mut self, ranges: &[(u32, u32)], mask: &mut [u32]) -> Result<(), MatchError> {
        let trie = self.c.vocab.trie();
        let mut chain: Vec<u32> = Vec::new();
        for &(a, b) in ranges {
            let mut x = a;
            'nodes: while x < b {
                // Up to the deepest node of the path that holds `x`.
                while let Some(&(top, _)) = self.stack.last() {
                    if top == 0 || (top < x && x < trie.end(top)) {
                        break;
                    }
                    self.up();
                }
                // Down through the ancestors of `x` that are not on the path yet.
                let top = self.stack.last().map_or(0, |t| t.0);
                chain.clear();
                let mut y = trie.parent(x);
                while y != top {
                    chain.push(y);
                    y = trie.parent(y);
                }
                while let Some(y) = chain.pop() {
                    let node = self.stack.last().map_or(NONE, |t| t.1);
                    let next = self.step(node, trie.byte(y))?;
                    if next == DEAD {
                        // The range's nodes below `y` are refused (by a check, perhaps).
                        let skip = trie.end(y);
                        self.note_dirty(x, skip.min(b));
                        self.settle();
                        x = skip;
                        continue 'nodes;
                    }
                    self.down(y, next);
                }
                let node = self.stack.last().map_or(NONE, |t| t.1);
                let next = self.step(node, trie.byte(x))?;
                if next == DEAD {
                    let skip = trie.end(x);
                    self.note_dirty(x, skip.min(b));
                    self.settle();
                    x = skip;
                    continue;
                }
                let tokens = trie.tokens_at(x);
                for &t in tokens {
                    mask[(t >> 5) as usize] |= 1 << (t & 31);
                }
                if let Some(rec) = &mut self.rec {
                    if self.dirty_from == usize::MAX && self.clean {
                        rec.accepted.extend_from_slice(tokens);
                    }
                }
                self.note_dirty(x, x + 1);
                if trie.end(x) > x + 1 {
                    self.down(x, next);
                } else {
                    self.settle();
                }
                x += 1;
            }
        }
        Ok(())
    }

    /// After a step into the first node of `a..b` (nodes of the walk's ranges): records
    /// them as needing a walk every time when that step, or one above it on the path, ran
    /// a semantic check. Adjacent ranges are merged.
    fn note_dirty(&mut self, a: u32, b: u32) {
        let Some(rec) = &mut self.rec else { return };
        if self.dirty_from == usize::MAX && self.clean {
            return;
        }
        match rec.dirty.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => rec.dirty.push((a, b)),
        }
    }

    /// Makes trie node `n` (just stepped into, memo node `node`) the end of the path.
    fn down(&mut self, n: u32, node: u32) {
        self.path.push(self.c.vocab.trie().byte(n));
        self.stack.push((n, node));
        // Below a step that ran a check, everything depends on the text.
        if !self.clean && self.dirty_from == usize::MAX {
            self.dirty_from = self.stack.len();
        }
    }

    /// Leaves the deepest node of the path.
    fn up(&mut self) {
        self.stack.pop();
        self.path.pop();
        if self.stack.len() < self.dirty_from {
            self.dirty_from = usize::MAX;
        }
        self.settle();
    }

    /// Drops a parser set pushed beyond the path (by a step whose node was not entered).
    fn settle(&mut self) {
        while self.real > self.path.len() {
            self.p.pop();
            self.real -= 1;
        }
    }

    /// Reads `b` after the current path from `node`: the next node, [`NONE`] (alive, not
    /// memoized) or [`DEAD`]. On a miss the parser is brought to the path and steps; it
    /// is then one byte deeper (`real` counts it).
    fn step(&mut self, node: u32, b: u8) -> Result<u32, MatchError> {
        // A memoized step ran no check; a real one says below.
        self.clean = true;
        if node != NONE {
            if let Some(&next) = self.memo.next.get(&key(node, b)) {
                self.clock.tick(1)?;
                return Ok(next);
            }
        }
        let g = &self.c.grammar;
        while self.real < self.path.len() {
            // These bytes were accepted before: the memo says so.
            if !self.p.push_byte(g, self.path[self.real])? {
                return Err(MatchError::Internal {
                    what: "the boundary-walk memo disagrees with the parser",
                });
            }
            self.real += 1;
        }
        let before = self.p.items.len();
        let checks = self.p.checks;
        let ok = self.p.top_info().allowed.contains(b) && self.p.push_byte(g, b)?;
        // Work of this step: the items it built (at least one unit per byte).
        self.clock
            .tick(1 + self.p.items.len().saturating_sub(before))?;
        let clean = self.p.checks == checks;
        self.clean = clean;
        if !ok {
            if clean && node != NONE && !self.memo.full() {
                self.memo.next.insert(key(node, b), DEAD);
            }
            return Ok(DEAD);
        }
        self.real += 1;
        if !clean {
            return Ok(NONE);
        }
        let mut next = self.memo.intern(self.p.top_core(), self.base);
        if node != NONE {
            if next == NONE {
                next = self.memo.fresh();
            }
            if next != NONE && !self.memo.full() {
                self.memo.next.insert(key(node, b), next);
            }
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::matcher::Matcher;
    use crate::vocab::Vocabulary;
    use crate::Limits;
    use std::sync::Arc;

    /// A walk over tens of thousands of boundary-crossing tokens fills the memo past its
    /// limit: it stops growing, is cleared at the next mask, and the masks stay those of
    /// fresh matchers.
    #[test]
    fn memo_stays_bounded_on_a_huge_walk() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../assets/tokenizers/llama3_1/tokenizer.json"
        );
        let vocab = Arc::new(
            Vocabulary::from_file(path).expect("assets missing: run scripts/fetch-assets.sh"),
        );
        // Every letter is a lexeme of its own (the rule is ambiguous and recursive), so
        // every token made of letters crosses lexeme boundaries.
        let c = crate::handle::constraint::Constraint::from_gbnf(
            "root ::= s\ns ::= s s | [a-z] | \"\"",
            vocab.clone(),
            &Limits::default(),
        )
        .unwrap();
        let enc = vocab.encoder().unwrap();
        let text = enc.encode("hello").unwrap();
        let mut m = Matcher::new(&c).unwrap();
        let mut mask = vec![0u32; vocab.mask_words()];
        let mut peak = (0, 0);
        for (i, &t) in text.iter().enumerate() {
            m.compute_mask(&mut mask).unwrap();
            let (e, n) = m.memo_sizes();
            peak = (peak.0.max(e), peak.1.max(n));
            assert!(
                e <= 2 * MAX_EDGES && n <= 2 * MAX_EDGES,
                "{e} transitions, {n} nodes"
            );
            let mut fresh = Matcher::new(&c).unwrap();
            for &u in &text[..i] {
                fresh.commit_token(u).unwrap();
            }
            let mut want = vec![0u32; vocab.mask_words()];
            fresh.compute_mask(&mut want).unwrap();
            assert!(mask == want, "mask {i} differs from a fresh matcher's");
            m.commit_token(t).unwrap();
        }
        assert!(peak.0 >= MAX_EDGES, "the walk filled the memo: {peak:?}");
    }
}
