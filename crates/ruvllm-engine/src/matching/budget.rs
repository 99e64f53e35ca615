//! Budget-aware masks: the tokens of the exact mask after which the output can still be
//! completed within the tokens left.
//!
//! # The guarantee
//!
//! Let `R` be the tokens left, the one being chosen included, and `U(s)` the length of the
//! shortest completion that [`Matcher::shortest_completion`] finds from state `s`. The
//! budget mask at `s` allows
//!
//! * EOS, exactly when the output is complete (as the exact mask does);
//! * a token `t` of the exact mask when a completion of at most `R - 1` tokens is
//!   *proven* to exist after it: a certificate below shows a concrete completion text
//!   through one of the parser's items, and `U(s·t)` is at most its token count;
//! * the first token of the shortest completion from `s`, when `U(s) <= R`.
//!
//! So the mask is a subset of the exact mask, it is never empty while `U(s) <= R`, and
//! every allowed token keeps `U <= R - 1`: a generation that starts with `max_tokens` at
//! least `U(start)` always ends complete within it. Tokens whose certificate runs through
//! a semantic check are allowed on the syntax alone and reported as *tentative*
//! ([`BudgetMask::tentative`]): the caller confirms one after committing it with
//! [`Matcher::shortest_completion`] and rolls it back if that finds nothing short enough
//! (a check can close every way on; the exact mask has the same dead ends).
//!
//! # Certificates
//!
//! Distances here are in bytes (`crate::matching::complete`). When every byte a shortest completion
//! of the grammar can write is a token of its own
//! ([`crate::Vocabulary::byte_tokens`]), no completion text needs more tokens than bytes,
//! so byte bounds are token bounds. For an Earley item reading lexeme `l` with `c` bytes
//! of context after it:
//!
//! * a token that stays inside `l` leaves at most `max_dist(l)` bytes of `l` to read,
//!   so every such token is proven when `max_dist(l) + c <= R - 1`. This is the *far*
//!   case: far from the end of the budget the mask is the exact mask (tentative when a
//!   bound runs through a semantic check);
//! * nearer, the tokens are grouped by the lexeme state they end in (a *budget table*
//!   per lexeme state, one trie walk, kept per constraint), and a group is proven by its
//!   state's distance, or by the tokens of its state's completion plus those of the
//!   context, counted apart;
//! * a token that crosses a lexeme boundary is walked with the real parser once per
//!   parse-state identity (`crate::parse::states`), which gives the distance after it; the
//!   token counts of those completions are computed only when a step needs them.
//!
//! Per identity the largest proven bound over the whole mask is kept, so at a state met
//! before, the far case costs one lookup. On a state's first visit far from the end only
//! the tokens inside lexemes are bounded (the items' bounds, no walk), and the mask is the
//! exact mask with the boundary-crossing tokens left to be confirmed (tentative); the walk
//! comes with the state's second visit, or at once near the end. Memory: each cache of a
//! constraint holds at most `facts::MAX_ENTRIES` entries and `facts::MAX_BYTES` bytes (then it is
//! emptied); a budget table's large token groups are bitmaps.
//!
//! Owns: the computing of budget facts per parse state and budget tables per lexeme
//! state, which a constraint keeps (`facts::BudgetCache`). Uses: the compiled grammar and its distances, the Earley
//! sets, the token tables, shortest completions (`complete`), the state identities.

use std::sync::{Arc, OnceLock};

use crate::compile::automata::dist::{add, INF};
use crate::compile::Sym;
use crate::deadline::Deadline;
use crate::error::MatchError;
use crate::matching::matcher::Matcher;
use crate::parse::earley::{Item, Parser};
use crate::parse::facts::{BudgetTable, Group, Leaf, LexemeClose, StateBudget};
use crate::parse::states::UNIQUE;
use crate::util::FastMap;

/// Masks for which a bound found at an earlier state stands in for the current state's
/// when the end of the budget is far (see [`Matcher::compute_budget_mask`]).
const HINT_STEPS: u32 = 16;
/// How far is far for that: the tokens left are at least this many times the bound.
const HINT_SLACK: u32 = 4;

/// What [`Matcher::compute_budget_mask`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetMask {
    /// The budget removed tokens the exact mask allowed.
    pub narrowed: bool,
    /// Some allowed token is proven only up to a semantic check: confirm a committed
    /// token with [`Matcher::shortest_completion`] (see the module docs).
    pub tentative: bool,
    /// The shortest completion's length, when it was computed (near the end of the
    /// budget; `None` far from it, where it is not needed).
    pub shortest: Option<usize>,
}

/// The exact mask with every token to be confirmed after it is sampled.
const TENTATIVE: BudgetMask = BudgetMask {
    narrowed: false,
    tentative: true,
    shortest: None,
};

/// `mask &= allowed`, EOS bits kept; whether a bit went. Cost: O(words · EOS ids).
fn keep_with_eos(mask: &mut [u32], allowed: &[u32], eos: &[u32]) -> bool {
    let mut narrowed = false;
    for (i, w) in mask.iter_mut().enumerate() {
        let mut keep = allowed.get(i).copied().unwrap_or(0);
        for &e in eos {
            if (e >> 5) as usize == i {
                keep |= 1 << (e & 31);
            }
        }
        let nw = *w & keep;
        narrowed |= nw != *w;
        *w = nw;
    }
    narrowed
}

/// Lexeme states a token search ([`Matcher::lexeme_close`]) visits at most: each costs
/// a budget table (one trie walk, kept).
const CLOSE_STATES: usize = 32;

/// Walks the token trie over the sorted, disjoint node `ranges` with the real parser (no
/// memo), calling `at` at each node that ends tokens the parser accepts. The parser is
/// left as it was. Returns whether no step ran a semantic check.
fn walk_real(
    m: &mut Matcher,
    ranges: &[(u32, u32)],
    clock: &mut Deadline,
    mut at: impl FnMut(&mut Parser, &[u32]) -> Result<(), MatchError>,
) -> Result<bool, MatchError> {
    let c = m.c.clone();
    let g = &c.grammar;
    let trie = c.vocab.trie();
    let base = m.parser.top();
    let checks = m.parser.checks;
    let mut path: Vec<u32> = Vec::new();
    let r = (|| -> Result<(), MatchError> {
        let mut chain: Vec<u32> = Vec::new();
        for &(a, b) in ranges {
            let mut x = a;
            'nodes: while x < b {
                while let Some(&top) = path.last() {
                    if top < x && x < trie.end(top) {
                        break;
                    }
                    path.pop();
                    m.parser.pop();
                }
                let top = path.last().copied().unwrap_or(0);
                chain.clear();
                let mut y = trie.parent(x);
                while y != top && y != 0 {
                    chain.push(y);
                    y = trie.parent(y);
                }
                while let Some(y) = chain.pop() {
                    clock.tick(1)?;
                    if !m.parser.push_byte(g, trie.byte(y))? {
                        x = trie.end(y).min(b).max(x + 1);
                        continue 'nodes;
                    }
                    path.push(y);
                }
                clock.tick(1)?;
                if !m.parser.push_byte(g, trie.byte(x))? {
                    x = trie.end(x);
                    continue;
                }
                path.push(x);
                let toks = trie.tokens_at(x);
                if !toks.is_empty() {
                    at(&mut m.parser, toks)?;
                }
                x += 1;
            }
        }
        Ok(())
    })();
    m.parser.truncate(base);
    r.map(|()| m.parser.checks == checks)
}

impl Matcher {
    /// Writes the **budget-aware** mask for a generation with `remaining` tokens left (the
    /// one being chosen included): the tokens of the exact mask ([`Matcher::compute_mask`])
    /// after which a completion is proven to fit in `remaining - 1` tokens, EOS when the
    /// output is complete, and the first token of the shortest completion when that fits
    /// (see the `budget` module docs for the exact statement). Far from the end of the
    /// budget it is the exact mask. With `remaining == 0` only EOS may be allowed.
    ///
    /// Cost: the exact mask, plus, the first time a parse state is met, a walk of its
    /// boundary-crossing tokens with the real parser; far from the end, one lookup after
    /// that. Near the end, a budget table per lexeme state met (one trie walk, kept) and
    /// the shortest completion.
    pub fn compute_budget_mask(
        &mut self,
        mask: &mut [u32],
        remaining: usize,
    ) -> Result<BudgetMask, MatchError> {
        self.compute_mask(mask)?;
        if self.finished {
            return Ok(BudgetMask::default());
        }
        if remaining == 0 {
            let narrowed = keep_with_eos(mask, &[], self.c.vocab.eos_tokens());
            return Ok(BudgetMask {
                narrowed,
                tentative: false,
                shortest: None,
            });
        }
        let left = (remaining - 1).min(INF as usize - 1) as u32;
        // Every text a shortest completion writes is made of single-token bytes: no text
        // needs more tokens than bytes, and byte bounds are token bounds.
        let singles = self.c.vocab.byte_tokens();
        let bytes_ok = singles.len() == 256 || {
            let written = self.c.grammar.completion_bytes();
            written.intersection(singles) == written
        };
        let mut clock = Deadline::new(self.c.limits.max_mask_time);
        let facts = match self.far_case(left, bytes_ok, &mut clock) {
            Ok(Ok(far)) => return Ok(far),
            Ok(Err(facts)) => facts,
            // Out of time: the exact mask, every token to be confirmed.
            Err(MatchError::MaskTime { .. }) => return Ok(TENTATIVE),
            Err(e) => return Err(e),
        };
        let mut allowed = vec![0u32; mask.len()];
        let mut tentative = self.allow_in_lexemes(&mut allowed, left, bytes_ok)?;
        tentative |= self.allow_leaves(&facts, &mut allowed, left, bytes_ok, &mut clock)?;
        let shortest = self.shortest_completion()?;
        if let Some(w) = &shortest {
            if let Some(&first) = w.tokens().first() {
                if w.len() <= remaining {
                    allowed[(first >> 5) as usize] |= 1 << (first & 31);
                }
            }
        }
        let narrowed = keep_with_eos(mask, &allowed, self.c.vocab.eos_tokens());
        Ok(BudgetMask {
            narrowed,
            tentative,
            shortest: shortest.map(|w| w.len()),
        })
    }

    /// Far from the end of the budget (`left` tokens after this one): the answer, the
    /// exact mask (proven, or tentative); near it, the state's facts with its
    /// boundary-crossing tokens walked, for [`Matcher::compute_budget_mask`] to narrow the
    /// mask with.
    fn far_case(
        &mut self,
        left: u32,
        bytes_ok: bool,
        clock: &mut Deadline,
    ) -> Result<Result<BudgetMask, Arc<StateBudget>>, MatchError> {
        // Comfortably far from the end by a bound found in the last few steps: the exact
        // mask, every token to be confirmed, and no bound computed (a state's first visit
        // costs a bound per item of its set; most states of a long output are met once).
        if let Some((bound, steps)) = &mut self.budget_hint {
            if bytes_ok && *steps < HINT_STEPS && bound.saturating_mul(HINT_SLACK) <= left {
                *steps += 1;
                return Ok(Ok(TENTATIVE));
            }
        }
        let facts = self.state_budget(clock, false, left)?;
        self.budget_hint = Some((facts.far_any, 0));
        if bytes_ok && facts.walked && facts.far <= left {
            return Ok(Ok(BudgetMask::default()));
        }
        if bytes_ok && facts.far_any <= left {
            // Far from the end, but some token's proof runs through a semantic check or
            // crosses a boundary not walked yet: the exact mask, each sampled token to be
            // confirmed.
            return Ok(Ok(TENTATIVE));
        }
        if facts.walked {
            return Ok(Err(facts));
        }
        Ok(Err(self.state_budget(clock, true, left)?))
    }

    /// The budget facts of the current parse state: from the constraint's cache, or
    /// computed (and kept when they depend on the state alone). The boundary-crossing
    /// tokens are walked when `full` is asked, or on the state's second visit (a state met
    /// once far from the end, as most states of a long output are, costs only its items'
    /// bounds; one met again, as the states of a repeated request are, gets its proof).
    fn state_budget(
        &mut self,
        clock: &mut Deadline,
        full: bool,
        left: u32,
    ) -> Result<Arc<StateBudget>, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        self.parser.ensure_closed(g)?;
        let id = match self.last_id {
            Some((at, id)) if at == self.parser.top() => id,
            _ => self.parser.top_id(g, &c.states),
        };
        // The same state as the last mask's (inside a string, one state for every
        // character): no lock.
        if let Some((last, f)) = &self.last_facts {
            if *last == id && id & UNIQUE == 0 && (f.walked || !full) {
                return Ok(f.clone());
            }
        }
        let facts = self.state_budget_of(id, clock, full, left)?;
        self.last_facts = Some((id, facts.clone()));
        Ok(facts)
    }

    /// [`Matcher::state_budget`] for identity `id`, through the constraint's cache.
    fn state_budget_of(
        &mut self,
        id: u32,
        clock: &mut Deadline,
        full: bool,
        left: u32,
    ) -> Result<Arc<StateBudget>, MatchError> {
        let c = self.c.clone();
        let mut seen = false;
        if id & UNIQUE == 0 {
            if let Some(f) = c.budget.states.lock().ok().and_then(|m| m.get(&id)) {
                if f.walked {
                    return Ok(f);
                }
                seen = true;
            }
        }
        let (mut far, mut far_any) = self.lexeme_bounds();
        // Comfortably far (twice the bound of the tokens inside lexemes): no walk, the
        // boundary-crossing tokens are confirmed after sampling instead.
        let comfortable = far_any != INF && far_any.saturating_mul(2) <= left;
        let walk = full || ((seen || id & UNIQUE != 0) && !comfortable);
        let (leaves, clean) = if walk {
            self.walk_leaves(clock)?
        } else {
            (Vec::new(), true)
        };
        for l in &leaves {
            far = far.max(l.unchecked);
            far_any = far_any.max(l.any);
        }
        let facts = Arc::new(StateBudget {
            far,
            far_any,
            walked: walk,
            leaves,
            tokens: OnceLock::new(),
        });
        if clean && id & UNIQUE == 0 {
            if let Ok(mut m) = c.budget.states.lock() {
                // The leaves, and their token counts when a step near the end adds them.
                m.insert(id, facts.clone(), 64 + facts.leaves.len() * 20);
            }
        }
        Ok(facts)
    }

    /// The proven and the syntactic bound (bytes, see [`StateBudget`]) over the tokens
    /// that stay inside the lexemes of the top set's items: each item's lexeme's longest
    /// distance plus its context. Cost: O(items), after the Earley sets' waiting costs.
    fn lexeme_bounds(&mut self) -> (u32, u32) {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let (mut far, mut far_any) = (0u32, 0u32);
        let (start, end) = self.parser.set_range(self.parser.top());
        for i in start..end {
            let it = self.parser.items[i];
            let Sym::Lex(l) = g.syms[it.pos as usize] else {
                continue;
            };
            let (ctx, checked) = self.parser.ctx_cost(g, sh, it);
            if ctx == INF {
                continue;
            }
            let bound = add(g.lexemes[l.ix()].max_dist(), ctx);
            far = far.max(if checked { INF } else { bound });
            far_any = far_any.max(bound);
        }
        (far, far_any)
    }

    /// The boundary-crossing tokens of the top set (its items' tables' uncertain ranges)
    /// walked with the real parser, each with the distances after it; and whether no step
    /// ran a semantic check (then they depend on the state alone). Cost: a parser step per
    /// trie node of the ranges, and the distances at each token's end.
    fn walk_leaves(&mut self, clock: &mut Deadline) -> Result<(Vec<Leaf>, bool), MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for it in self.parser.set(self.parser.top()) {
            if let Sym::Lex(l) = g.syms[it.pos as usize] {
                let lexeme = &g.lexemes[l.ix()];
                if let Some(t) = c.tables[l.ix()].known(lexeme, it.state) {
                    ranges.extend_from_slice(&t.uncertain);
                }
            }
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let mut leaves: Vec<Leaf> = Vec::new();
        let clean = walk_real(self, &merged, clock, |p, toks| {
            let (any, unchecked) = p.distance(g, sh);
            for &t in toks {
                leaves.push(Leaf {
                    token: t,
                    unchecked,
                    any,
                });
            }
            Ok(())
        })?;
        Ok((leaves, clean))
    }

    /// Near the end: sets in `allowed` the tokens that stay inside a lexeme and are
    /// proven (or, under a semantic check, fit syntactically: then returns `true`).
    fn allow_in_lexemes(
        &mut self,
        allowed: &mut [u32],
        left: u32,
        bytes_ok: bool,
    ) -> Result<bool, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let vocab = &c.vocab;
        let k = self.parser.top();
        let items: Vec<Item> = self.parser.set(k).to_vec();
        let mut seen: Vec<(u32, u32, u32)> = Vec::new();
        let mut tentative = false;
        for it in items {
            let Sym::Lex(l) = g.syms[it.pos as usize] else {
                continue;
            };
            if seen.contains(&(it.pos, it.origin, it.state)) {
                continue;
            }
            seen.push((it.pos, it.origin, it.state));
            let (ctx, checked) = self.parser.ctx_cost(g, sh, it);
            if ctx == INF {
                continue;
            }
            let lexeme = &g.lexemes[l.ix()];
            if bytes_ok && add(lexeme.max_dist(), ctx) <= left {
                if let Some(t) = c.tables[l.ix()].known(lexeme, it.state) {
                    t.accept.or_into(allowed);
                    tentative |= checked;
                    continue;
                }
            }
            let table = self.budget_table(l.0, it.state);
            // The context's tokens, counted apart (computed when a group needs them).
            let mut ctx_tokens: Option<u32> = None;
            for grp in &table.groups {
                let mut ok = bytes_ok && add(grp.dist, ctx) <= left;
                if !ok {
                    let ct = *ctx_tokens.get_or_insert_with(|| {
                        let mut text = Vec::new();
                        self.parser.ctx_text(g, sh, it, &mut text);
                        vocab.fewest_token_count(&text).map_or(INF, |n| n as u32)
                    });
                    let gt = *grp.fewest.get_or_init(|| {
                        let mut text = Vec::new();
                        lexeme.complete_into(grp.state, &mut text);
                        vocab.fewest_token_count(&text).map_or(INF, |n| n as u32)
                    });
                    ok = add(gt, ct) <= left;
                }
                if ok {
                    grp.tokens.or_into(allowed);
                    tentative |= checked;
                }
            }
        }
        Ok(tentative)
    }

    /// Near the end: sets in `allowed` the boundary-crossing tokens that are proven (or fit
    /// syntactically under a semantic check: then returns `true`).
    fn allow_leaves(
        &mut self,
        facts: &StateBudget,
        allowed: &mut [u32],
        left: u32,
        bytes_ok: bool,
        clock: &mut Deadline,
    ) -> Result<bool, MatchError> {
        let mut tentative = false;
        let needs_tokens = facts
            .leaves
            .iter()
            .any(|l| !(bytes_ok && l.unchecked <= left));
        if !needs_tokens {
            for l in &facts.leaves {
                allowed[(l.token >> 5) as usize] |= 1 << (l.token & 31);
            }
            return Ok(false);
        }
        let counts = match facts.tokens.get() {
            Some(c) => c.clone(),
            None => {
                let c = self.leaf_token_counts(facts, clock)?;
                let _ = facts.tokens.set(c.clone());
                c
            }
        };
        for (l, &(unchecked, any)) in facts.leaves.iter().zip(&counts) {
            let proven = (bytes_ok && l.unchecked <= left) || unchecked <= left;
            let fits = proven || (bytes_ok && l.any <= left) || any <= left;
            if fits {
                allowed[(l.token >> 5) as usize] |= 1 << (l.token & 31);
                tentative |= !proven;
            }
        }
        Ok(tentative)
    }

    /// The token counts of [`StateBudget::tokens`]: the boundary walk again, now counting
    /// the tokens of the best completions after each leaf (by the ranked candidates, as
    /// [`Matcher::shortest_completion`] counts them, without its checks).
    fn leaf_token_counts(
        &mut self,
        facts: &StateBudget,
        clock: &mut Deadline,
    ) -> Result<Vec<(u32, u32)>, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let vocab = &c.vocab;
        let longest = vocab.trie().max_depth().max(1) as u32;
        let mut by_token: FastMap<u32, (u32, u32)> = FastMap::default();
        let ranges = leaf_ranges(&c, facts);
        walk_real(self, &ranges, clock, |p, toks| {
            let ranked = p.ranked_core(g, sh);
            let (mut unchecked, mut any) = (INF, INF);
            let mut text = Vec::new();
            for &(cost, checked, it) in &ranked {
                let bound = unchecked.min(any);
                if bound != INF
                    && bound <= cost.div_ceil(longest)
                    && unchecked <= cost.div_ceil(longest)
                {
                    break;
                }
                text.clear();
                p.item_text(g, sh, it, &mut text);
                let n = vocab.fewest_token_count(&text).map_or(INF, |n| n as u32);
                any = any.min(n);
                if !checked {
                    unchecked = unchecked.min(n);
                }
            }
            for &t in toks {
                by_token.insert(t, (unchecked, any));
            }
            Ok(())
        })?;
        Ok(facts
            .leaves
            .iter()
            .map(|l| by_token.get(&l.token).copied().unwrap_or((INF, INF)))
            .collect())
    }

    /// The fewest tokens found that finish lexeme `l` from its state `s` (see
    /// [`LexemeClose`]): a breadth-first search over the lexeme's states whose edges are
    /// the tokens that stay inside it (the budget tables), each state reached after `d`
    /// tokens closed by its shortest text's fewest tokens. The shortest text in bytes is
    /// not always the one in the fewest tokens: `[a-z ]{30}` is `aaaa…` (8 tokens of a
    /// real vocabulary) or two 15-letter tokens. Exact for the lexeme alone when the
    /// search ends within [`CLOSE_STATES`] states; an upper bound with a witness always.
    /// Kept per constraint. Cost on a miss: up to that many budget tables.
    pub(crate) fn lexeme_close(&self, l: u32, s: u32) -> Arc<LexemeClose> {
        let c = &self.c;
        if let Some(t) = c.budget.closes.lock().ok().and_then(|m| m.get(&(l, s))) {
            return t;
        }
        let lexeme = &c.grammar.lexemes[l as usize];
        let spell = |q: u32| {
            let mut text = Vec::new();
            lexeme.complete_into(q, &mut text);
            c.vocab.fewest_token_count(&text).map_or(INF, |n| n as u32)
        };
        let mut best = LexemeClose {
            count: spell(s),
            steps: Vec::new(),
            end: s,
        };
        let mut seen: crate::util::FastSet<u32> = Default::default();
        seen.insert(s);
        let mut layer: Vec<(u32, Vec<u32>)> = vec![(s, Vec::new())];
        let mut d = 0u32;
        // A state `d + 1` tokens away improves on the best only if `d + 1` is below it.
        while !layer.is_empty() && d + 1 < best.count && seen.len() < CLOSE_STATES {
            let mut next = Vec::new();
            for (q, path) in &layer {
                // Full, or a state reached at this depth with nothing left to write: no
                // better count remains to find.
                if seen.len() >= CLOSE_STATES || best.count <= d + 1 {
                    break;
                }
                let table = self.budget_table(l, *q);
                for grp in &table.groups {
                    if seen.len() >= CLOSE_STATES {
                        break;
                    }
                    if !seen.insert(grp.state) {
                        continue;
                    }
                    let Some(t) = grp.tokens.first() else {
                        continue;
                    };
                    let rest = *grp.fewest.get_or_init(|| spell(grp.state));
                    let mut steps = path.clone();
                    steps.push(t);
                    if add(d + 1, rest) < best.count {
                        best = LexemeClose {
                            count: d + 1 + rest,
                            steps: steps.clone(),
                            end: grp.state,
                        };
                    }
                    next.push((grp.state, steps));
                }
            }
            layer = next;
            d += 1;
        }
        let size = 64 + best.steps.len() * 4;
        let best = Arc::new(best);
        if let Ok(mut m) = c.budget.closes.lock() {
            m.insert((l, s), best.clone(), size);
        }
        best
    }

    /// The budget table of lexeme `l`'s state `s` (see the module docs): kept per
    /// constraint. Cost on a miss: a pass over the trie, a DFA step per live node.
    fn budget_table(&self, l: u32, s: u32) -> Arc<BudgetTable> {
        let c = &self.c;
        if let Some(t) = c.budget.tables.lock().ok().and_then(|m| m.get(&(l, s))) {
            return t;
        }
        let lexeme = &c.grammar.lexemes[l as usize];
        let trie = c.vocab.trie();
        let mut path: Vec<u32> = vec![0; trie.max_depth() + 2];
        path[0] = s;
        let mut by_state: FastMap<u32, Vec<u32>> = FastMap::default();
        let total = trie.len() as u32;
        let mut n = 1;
        while n < total {
            let d = trie.depth(n);
            let t = lexeme.next(path[d - 1], trie.byte(n));
            if t == 0 {
                n = trie.end(n);
                continue;
            }
            let toks = trie.tokens_at(n);
            if !toks.is_empty() {
                by_state.entry(t).or_default().extend_from_slice(toks);
            }
            path[d] = t;
            n += 1;
        }
        // A group of more tokens than a bitmap has words is a bitmap (the inside of a
        // string: most of the vocabulary in one group).
        let words = c.vocab.mask_words();
        let mut groups: Vec<Group> = by_state
            .into_iter()
            .map(|(state, tokens)| Group {
                dist: lexeme.dist(state),
                state,
                tokens: if tokens.len() > words {
                    let mut bits = vec![0u32; words];
                    for t in tokens {
                        bits[(t >> 5) as usize] |= 1 << (t & 31);
                    }
                    crate::tables::TokenSet::Dense(bits.into())
                } else {
                    crate::tables::TokenSet::Sparse(tokens)
                },
                fewest: OnceLock::new(),
            })
            .collect();
        groups.sort_by_key(|g| (g.dist, g.state));
        let size: usize = groups.iter().map(|g| 48 + g.tokens.memory()).sum();
        let table = Arc::new(BudgetTable { groups });
        if let Ok(mut m) = c.budget.tables.lock() {
            m.insert((l, s), table.clone(), size);
        }
        table
    }
}

/// The trie ranges holding the leaves' tokens: each token's node, as a range of one.
fn leaf_ranges(c: &crate::handle::constraint::Constraint, facts: &StateBudget) -> Vec<(u32, u32)> {
    let trie = c.vocab.trie();
    let mut nodes: Vec<u32> = facts
        .leaves
        .iter()
        .filter_map(|l| trie.find(c.vocab.token_bytes(l.token)))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.into_iter().map(|n| (n, n + 1)).collect()
}
