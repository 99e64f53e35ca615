//! Shortest completions: from any matcher state, the fewest tokens that make the output a
//! complete sentence, and those tokens.
//!
//! # What is computed
//!
//! A completion must finish every open piece of the parse: the lexeme being read, the
//! rest of its rule's alternative, and, through the Earley sets' origins, the rest of each
//! enclosing rule up to the start rule. The Earley parser keeps every possible parse, so
//! the shortest completion *in bytes* is exact and cheap:
//!
//! ```text
//! cost(item)  = dist(lexeme state) + suffix(pos + 1) + wait(origin, rule)
//! wait(o, r)  = min over the items p of set o waiting for r of
//!               suffix(p.pos + 1) + wait(p.origin, rule(p))        (0 at the start rule)
//! D(state)    = min over the core items of the top set of cost(item)
//! ```
//!
//! `dist` comes from the lexeme (`compile::dist`), `suffix` from the grammar's shortest
//! derivations (`compile::shortest`), and `wait` is computed once per Earley set and kept
//! until the set is rolled back (a Dijkstra over the rules the set waits for, since items
//! predicted in a set wait for each other). Only core items count: every completion goes
//! through one of them.
//!
//! **Tokens.** The budget is in tokens. A completion's text is counted with the fewest
//! tokens of the real vocabulary that spell it ([`crate::Vocabulary::fewest_tokens`]: any
//! split, since the mask allows any), for the text of every core item that could still
//! win (one needs at least `bytes / longest token` tokens), and the best is kept. The
//! shortest text in bytes is not always the one in the fewest tokens: inside a long
//! lexeme (`[a-z ]{30}`, a `minLength: 30` string) another text of the same language
//! spells in far fewer (two 15-letter tokens against eight for `aaaa…`). So where an
//! unchecked item's lexeme has at least [`CLOSE_MIN_BYTES`] left, its lexeme part is also
//! searched in tokens ([`Matcher::lexeme_close`]: a breadth-first search over the lexeme's
//! states with the tokens that stay inside it as edges), then closed by the shortest
//! text of the rest. The result is an **upper bound** on the true minimum, with a real
//! witness: it never undercounts; it is exact when the fewest tokens go through the
//! shortest context text (the tests compare it with a brute-force search over tokens,
//! on small grammars and on a real vocabulary cut to 3,000 tokens).
//!
//! **Semantic checks.** A text through a rule with a check (`uniqueItems`, an exclusive
//! `oneOf`, `multipleOf`, ...) is only a candidate: it is fed to the real parser, which
//! runs the checks, and kept only if the output then accepts. When none passes, the
//! failing candidate is **filled** from what the grammar and the check say, one value at
//! a time:
//! - an object lacking keys its check requires (`ValueCheck::missing_keys`: keys in any
//!   order, `dependentRequired`, a validator's `required` errors) gets each key with the
//!   grammar's shortest value for it (a `format`, `pattern` or `enum` value spelled as
//!   the grammar spells it); a nested object is filled in turn, and where a validator
//!   blames the value written (`ValueCheck::blames_member`), another is searched for;
//! - a change the check asks for below the object's own members or in the value
//!   (`ValueCheck::inner_fixes`: a nested object's missing key, one more member or
//!   element, a member or element the value may not have cut out, a value of the wrong
//!   type replaced by the simplest of the right one, a string too short padded) is made
//!   in place;
//! - a value no key fixes gets the check's own examples (`ValueCheck::value_examples`: a
//!   number within its exact bounds), an object in place of a value that must be one,
//!   or a search of the value alone.
//!
//! The fill is a depth-first search whose first way is this greedy one: where a check
//! offers several ways to gain keys (`ValueCheck::key_choices`: the branches of a failed
//! `anyOf`, fewest errors first), the next is tried when the one before leads nowhere.
//! Each candidate is read only from where it differs from the last one
//! (`Matcher::accepts_at`).
//!
//! Failing that, the check's member hints (keys and values the sub-schema names) are
//! inserted, then a best-first search over bytes (ordered by bytes so far plus the
//! syntactic distance, which never overestimates; ties deepest first) tries
//! continuations, each followed by its syntactic completion, within a bounded number of
//! steps ([`SEARCH_NODES`]) and time (one clock for the fill, the hints and the searches:
//! [`SEARCH_SHARE`]). It first keeps the failing candidate's text up to
//! the start of the value whose check failed (the parser records it), so it only changes
//! what can fix that check (`"responses": {}` under `minProperties: 1` becomes
//! `"responses": {"000": {}}`); failing that, it searches from the current output.
//!
//! **Monotone.** A matcher remembers its last completion; after the token it starts with
//! is committed, the rest is still a completion (`Matcher`'s carry), so the count after
//! that token is at most one less than before, whatever the search finds. The budget mask
//! (`crate::matching::budget`) relies on this.
//!
//! Owns: the per-set waiting costs of a matcher (kept in the Earley sets) and the
//! completion search. Uses: the compiled grammar, its shortest derivations and lexeme
//! distances, the Earley sets, the budget facts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::compile::automata::dist::{add, INF};
use crate::compile::shortest::{Shortest, MAX_TEXT};
use crate::compile::{CompiledGrammar, EarleyRuleId, Sym};
use crate::error::MatchError;
use crate::grammar::InnerFix;
use crate::matching::matcher::{Deadline, Matcher};
use crate::parse::earley::{Failed, Item, Parser, WaitCost, ROOT};
use crate::parse::facts::{Completion, Known};
use crate::util::FastMap;

const NO_WAIT: WaitCost = WaitCost {
    cost: INF,
    via: u32::MAX,
    checked: false,
};

/// Completing the start rule completes the parse: nothing more to write.
const DONE: WaitCost = WaitCost {
    cost: 0,
    via: u32::MAX,
    checked: false,
};

/// Byte-level search nodes tried per completion when every syntactic candidate fails a
/// semantic check (each node costs its path pushed on the parser and a candidate fed).
pub(crate) const SEARCH_NODES: usize = 2048;

/// Bytes a lexeme must have left before its completion is also searched in tokens
/// ([`Matcher::lexeme_close`]): below it a few bytes rarely spell in fewer tokens another
/// way, and the search's budget tables are not worth building.
const CLOSE_MIN_BYTES: u32 = 8;

/// Checked candidates fed to the parser before searching.
const CHECKED_CANDIDATES: usize = 8;

impl Parser {
    /// [`WaitCost`] of rule `r` completing at set `o` ([`ROOT`]: the start rule's own
    /// items, which complete the parse). Cost: a lookup, after a Dijkstra over the waiting
    /// items of `o` and of the sets below it that were not asked before.
    pub(crate) fn wait_cost(
        &mut self,
        g: &CompiledGrammar,
        sh: &Shortest,
        o: u32,
        r: EarleyRuleId,
    ) -> WaitCost {
        if o == ROOT {
            return if r == g.root { DONE } else { NO_WAIT };
        }
        self.ensure_costs(g, sh, o as usize);
        self.waits[o as usize]
            .costs
            .as_ref()
            .and_then(|m| m.get(&r).copied())
            .unwrap_or(NO_WAIT)
    }

    /// Computes the waiting costs of set `o` and of every set below that they need, lower
    /// sets first (an explicit stack: origins can nest thousands deep).
    fn ensure_costs(&mut self, g: &CompiledGrammar, sh: &Shortest, o: usize) {
        let has = |p: &Parser, x: usize| p.waits.get(x).is_some_and(|w| w.costs.is_some());
        if has(self, o) {
            return;
        }
        let mut stack = vec![o];
        while let Some(&x) = stack.last() {
            if has(self, x) {
                stack.pop();
                continue;
            }
            let index = self.wait_index(g, x);
            let before = stack.len();
            for &(_, j) in &index {
                let p = self.items[j as usize];
                if p.origin != ROOT && p.origin as usize != x && !has(self, p.origin as usize) {
                    let po = p.origin as usize;
                    if !stack[before..].contains(&po) {
                        stack.push(po);
                    }
                }
            }
            if stack.len() > before {
                self.waits[x].index = Some(index);
                continue;
            }
            let costs = self.set_costs(g, sh, x, &index);
            self.waits[x].index = Some(index);
            self.waits[x].costs = Some(Box::new(costs));
            stack.pop();
        }
    }

    /// The waiting costs of set `x` from its waiting items (`index`: (rule, item) sorted),
    /// the costs of the sets below being known. Cost: O(waiting items · log).
    fn set_costs(
        &self,
        g: &CompiledGrammar,
        sh: &Shortest,
        x: usize,
        index: &[(EarleyRuleId, u32)],
    ) -> FastMap<EarleyRuleId, WaitCost> {
        let mut dist: FastMap<EarleyRuleId, WaitCost> = FastMap::default();
        // Items predicted in `x` itself: (their rule, the rule they wait for, item).
        let mut inner: Vec<(EarleyRuleId, EarleyRuleId, u32)> = Vec::new();
        let relax = |dist: &mut FastMap<EarleyRuleId, WaitCost>, r: EarleyRuleId, w: WaitCost| {
            let e = dist.entry(r).or_insert(NO_WAIT);
            if w.cost < e.cost {
                *e = w;
            }
        };
        for &(r, j) in index {
            let p = self.items[j as usize];
            let pr = g.pos_rule[p.pos as usize];
            if p.origin as usize == x && p.origin != ROOT {
                inner.push((pr, r, j));
                continue;
            }
            let parent = if p.origin == ROOT {
                if pr == g.root {
                    DONE
                } else {
                    NO_WAIT
                }
            } else {
                self.waits[p.origin as usize]
                    .costs
                    .as_ref()
                    .and_then(|m| m.get(&pr).copied())
                    .unwrap_or(NO_WAIT)
            };
            let next = p.pos as usize + 1;
            let w = WaitCost {
                cost: add(sh.suffix[next], parent.cost),
                via: j,
                checked: sh.suffix_checked[next]
                    || g.rule_check[pr.ix()].is_some()
                    || parent.checked,
            };
            relax(&mut dist, r, w);
        }
        if inner.is_empty() {
            return dist;
        }
        inner.sort_unstable();
        let mut heap: BinaryHeap<Reverse<(u32, EarleyRuleId)>> =
            dist.iter().map(|(&r, w)| Reverse((w.cost, r))).collect();
        let mut done: crate::util::FastSet<u32> = Default::default();
        while let Some(Reverse((c, r))) = heap.pop() {
            if c == INF || !done.insert(r.0) {
                continue;
            }
            let from = dist[&r];
            let at = inner.partition_point(|e| e.0 < r);
            for &(_, r2, j) in inner[at..].iter().take_while(|e| e.0 == r) {
                let p = self.items[j as usize];
                let next = p.pos as usize + 1;
                let w = WaitCost {
                    cost: add(sh.suffix[next], from.cost),
                    via: j,
                    checked: sh.suffix_checked[next]
                        || g.rule_check[r.ix()].is_some()
                        || from.checked,
                };
                let cur = dist.get(&r2).map_or(INF, |e| e.cost);
                if w.cost < cur {
                    dist.insert(r2, w);
                    heap.push(Reverse((w.cost, r2)));
                }
            }
        }
        dist
    }

    /// The bytes a shortest completion through item `it` needs after its lexeme (the rest
    /// of its alternative and of the enclosing rules), and whether it completes a checked
    /// rule. Cost: as [`Parser::wait_cost`].
    pub(crate) fn ctx_cost(&mut self, g: &CompiledGrammar, sh: &Shortest, it: Item) -> (u32, bool) {
        let r = g.pos_rule[it.pos as usize];
        let after = match g.syms[it.pos as usize] {
            Sym::Lex(_) => it.pos as usize + 1,
            _ => it.pos as usize,
        };
        let w = self.wait_cost(g, sh, it.origin, r);
        (
            add(sh.suffix[after], w.cost),
            sh.suffix_checked[after] || g.rule_check[r.ix()].is_some() || w.checked,
        )
    }

    /// The bytes of a shortest completion through item `it` (its lexeme finished from its
    /// state, then [`Parser::ctx_cost`]), and whether it completes a checked rule.
    pub(crate) fn item_cost(
        &mut self,
        g: &CompiledGrammar,
        sh: &Shortest,
        it: Item,
    ) -> (u32, bool) {
        let (ctx, checked) = self.ctx_cost(g, sh, it);
        let head = match g.syms[it.pos as usize] {
            Sym::Lex(l) => g.lexemes[l.ix()].dist(it.state),
            _ => 0,
        };
        (add(head, ctx), checked)
    }

    /// Appends the text of [`Parser::ctx_cost`]. The waiting costs it follows must have
    /// been computed (by `ctx_cost` or `item_cost` of the same item, with no push since).
    pub(crate) fn ctx_text(&self, g: &CompiledGrammar, sh: &Shortest, it: Item, out: &mut Vec<u8>) {
        self.ctx_text_with(g, sh, it, out, &mut |l, out| {
            let d = &g.lexemes[l as usize];
            d.complete_into(d.start(), out);
        });
    }

    /// [`Parser::ctx_text`] with each lexeme's text written by `lexeme` (see
    /// [`Shortest::suffix_text_with`]).
    pub(crate) fn ctx_text_with(
        &self,
        g: &CompiledGrammar,
        sh: &Shortest,
        it: Item,
        out: &mut Vec<u8>,
        lexeme: &mut dyn FnMut(u32, &mut Vec<u8>),
    ) {
        let after = match g.syms[it.pos as usize] {
            Sym::Lex(_) => it.pos + 1,
            _ => it.pos,
        };
        sh.suffix_text_with(g, after, out, lexeme);
        let (mut o, mut r) = (it.origin, g.pos_rule[it.pos as usize]);
        while o != ROOT {
            let Some(w) = self
                .waits
                .get(o as usize)
                .and_then(|w| w.costs.as_ref())
                .and_then(|m| m.get(&r).copied())
            else {
                return;
            };
            if w.via == u32::MAX {
                return;
            }
            let p = self.items[w.via as usize];
            sh.suffix_text_with(g, p.pos + 1, out, lexeme);
            o = p.origin;
            r = g.pos_rule[p.pos as usize];
        }
    }

    /// Appends the text of [`Parser::item_cost`] (same conditions as
    /// [`Parser::ctx_text`]).
    pub(crate) fn item_text(
        &self,
        g: &CompiledGrammar,
        sh: &Shortest,
        it: Item,
        out: &mut Vec<u8>,
    ) {
        if let Sym::Lex(l) = g.syms[it.pos as usize] {
            g.lexemes[l.ix()].complete_into(it.state, out);
        }
        self.ctx_text(g, sh, it, out);
    }

    /// The core items of the top set with their [`Parser::item_cost`], cheapest first
    /// (ties in item order), those whose text is at most [`MAX_TEXT`] bytes only.
    pub(crate) fn ranked_core(
        &mut self,
        g: &CompiledGrammar,
        sh: &Shortest,
    ) -> Vec<(u32, bool, Item)> {
        let core: Vec<Item> = self.top_core().to_vec();
        let mut out: Vec<(u32, bool, Item)> = Vec::with_capacity(core.len());
        for it in core {
            let (c, k) = self.item_cost(g, sh, it);
            if c <= MAX_TEXT {
                out.push((c, k, it));
            }
        }
        out.sort_by_key(|x| x.0);
        out
    }

    /// The syntactic distance of the top set: the cheapest [`Parser::item_cost`] of its
    /// core items, and the cheapest of those that complete no checked rule.
    pub(crate) fn distance(&mut self, g: &CompiledGrammar, sh: &Shortest) -> (u32, u32) {
        let (mut any, mut unchecked) = (INF, INF);
        let n = self.top_core().len();
        for i in 0..n {
            let it = self.top_core()[i];
            let (c, k) = self.item_cost(g, sh, it);
            any = any.min(c);
            if !k {
                unchecked = unchecked.min(c);
            }
        }
        (any, unchecked)
    }
}

impl Matcher {
    /// The shortest completion found from the current state: the fewest tokens of the
    /// vocabulary after which the output is a complete sentence (semantic checks
    /// included), and those tokens. `None` when none is found: the output cannot be
    /// completed (a semantic check closed every way), or the bounded search for a way
    /// past a semantic check gave up. After EOS, or when the output is complete already,
    /// an empty completion.
    ///
    /// The count is an upper bound on the true minimum that is exact in the usual case
    /// (see the `complete` module docs for how it is found and where it can be above).
    /// It is monotone: right after committing the first token of a completion, the next
    /// answer is at most one token shorter than it.
    ///
    /// Cost: O(core items) plus, for the first use of each Earley set, a Dijkstra over its
    /// waiting items; then the text of each candidate that could still win and its
    /// split into tokens (O(bytes · longest token)). With semantic checks, each candidate
    /// is fed to the parser, and a failing state runs a search of up to
    /// 2,048 nodes. The answer is kept until the state changes.
    pub fn shortest_completion(&mut self) -> Result<Option<Completion>, MatchError> {
        if self.finished {
            return Ok(Some(Completion {
                tokens: Vec::new(),
                text: Vec::new(),
            }));
        }
        let here = (self.tokens.len(), self.parser.top());
        if let Some(k) = &self.known {
            if (k.tokens, k.bytes) == here {
                return Ok(k.completion.clone());
            }
        }
        let found = self.find_completion()?;
        self.known = Some(Known {
            tokens: here.0,
            bytes: here.1,
            completion: found.clone(),
        });
        Ok(found)
    }

    /// The search behind [`Matcher::shortest_completion`] (nothing cached).
    fn find_completion(&mut self) -> Result<Option<Completion>, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let vocab = &c.vocab;
        let longest = vocab.trie().max_depth().max(1) as u32;
        let mut best: Option<Completion> = self.carried();
        let ranked = self.parser.ranked_core(g, sh);
        let mut checked: Vec<Item> = Vec::new();
        let beats = |best: &Option<Completion>, bytes: u32| match best {
            Some(b) => (b.len() as u32) > bytes.div_ceil(longest),
            None => true,
        };
        let mut text = Vec::new();
        for &(cost, is_checked, it) in &ranked {
            if !beats(&best, cost) {
                break;
            }
            if is_checked {
                if checked.len() < CHECKED_CANDIDATES {
                    checked.push(it);
                }
                continue;
            }
            text.clear();
            self.parser.item_text(g, sh, it, &mut text);
            consider(&mut best, vocab, &text);
            if let Some(w) = self.spelled(it) {
                keep_fewer(&mut best, w);
            }
        }
        // Where the first failing candidate's check starts its value: a search that keeps
        // the candidate's text up to there changes only what can fix it.
        let mut fix: Option<Vec<u8>> = None;
        let mut first_failure: Option<(Vec<u8>, Failed)> = None;
        let start = self.parser.top();
        for it in checked {
            text.clear();
            let cost = self.parser.item_cost(g, sh, it).0;
            if !beats(&best, cost) {
                break;
            }
            self.parser.item_text(g, sh, it, &mut text);
            // Long lexemes spelled in fewer tokens: fed to the parser too.
            if let Some(w) = self.spelled(it) {
                if best.as_ref().is_none_or(|b| w.len() < b.len()) && self.accepts_after(&w.text)? {
                    best = Some(w);
                }
            }
            self.parser.failed = None;
            if self.accepts_after(&text)? {
                consider(&mut best, vocab, &text);
            } else if fix.is_none() {
                if let Some(f) = self.parser.failed.take() {
                    let keep = (f.start as usize).saturating_sub(start).min(text.len());
                    fix = Some(text[..keep].to_vec());
                    first_failure = Some((text.clone(), f));
                }
            }
        }
        if best.is_none() && g.has_checks {
            // One clock for everything below: the fill and its searches, then the two
            // whole searches, which share what the fill left.
            let limit = c.limits.max_mask_time;
            let total = Deadline::new(limit / SEARCH_SHARE);
            let mut found = None;
            if let Some((text, f)) = first_failure {
                found = self.hinted(text, f, total.within(limit / (2 * SEARCH_SHARE)))?;
            }
            if let Some(prefix) = fix.filter(|p| !p.is_empty() && found.is_none()) {
                let half = total.remaining().unwrap_or(limit) / 2;
                found = self.search(&prefix, &total.within(half))?;
            }
            if found.is_none() {
                found = self.search(&[], &total)?;
            }
            if let Some(text) = found {
                consider(&mut best, vocab, &text);
            }
        }
        Ok(best)
    }

    /// A completion through item `it` with each long lexeme spelled in the fewest tokens
    /// found ([`Matcher::lexeme_close`]): the item's own lexeme from its state, and each
    /// lexeme of its context from its start (a string value after the current key). Its
    /// own lexeme's tokens are kept as found, the rest is split into its fewest tokens.
    /// `None` when no lexeme with at least [`CLOSE_MIN_BYTES`] to write spells in fewer
    /// tokens than its shortest text (the completion would be [`Parser::item_text`]'s).
    /// Semantic checks are not run (the caller feeds a checked item's text to the
    /// parser). The waiting costs of `it` must be computed (as [`Parser::ctx_text`]
    /// needs). Cost: the text's bytes, and a search per long lexeme not met before.
    fn spelled(&mut self, it: Item) -> Option<Completion> {
        let c = self.c.clone();
        let (g, vocab) = (&c.grammar, &c.vocab);
        let mut changed = false;
        let mut steps: Vec<u32> = Vec::new();
        let mut rest: Vec<u8> = Vec::new();
        if let Sym::Lex(l) = g.syms[it.pos as usize] {
            let lexeme = &g.lexemes[l.ix()];
            let mut end = it.state;
            if lexeme.dist(it.state) >= CLOSE_MIN_BYTES {
                let close = self.lexeme_close(l.0, it.state);
                if !close.steps.is_empty() {
                    steps.clone_from(&close.steps);
                    end = close.end;
                    changed = true;
                }
            }
            lexeme.complete_into(end, &mut rest);
        }
        let this = &*self;
        self.parser
            .ctx_text_with(g, g.shortest(), it, &mut rest, &mut |l, out| {
                let lexeme = &g.lexemes[l as usize];
                let start = lexeme.start();
                if lexeme.dist(start) >= CLOSE_MIN_BYTES {
                    let close = this.lexeme_close(l, start);
                    if !close.steps.is_empty() {
                        for &t in &close.steps {
                            out.extend_from_slice(vocab.token_bytes(t));
                        }
                        lexeme.complete_into(close.end, out);
                        changed = true;
                        return;
                    }
                }
                lexeme.complete_into(start, out);
            });
        if !changed {
            return None;
        }
        let tokens = vocab.fewest_tokens(&rest)?;
        let mut text: Vec<u8> = Vec::new();
        for &t in &steps {
            text.extend_from_slice(vocab.token_bytes(t));
        }
        text.extend_from_slice(&rest);
        steps.extend_from_slice(&tokens);
        Some(Completion {
            tokens: steps,
            text,
        })
    }

    /// The rest of the last completion, when the tokens committed since are its first
    /// ones (see [`Matcher::shortest_completion`]'s monotonicity).
    fn carried(&self) -> Option<Completion> {
        let carry = self.carry.as_ref()?;
        (carry.tokens == self.tokens.len() && carry.bytes == self.parser.top())
            .then(|| carry.completion.clone())
            .flatten()
    }

    /// Whether the output followed by `text` is a complete sentence (semantic checks
    /// run). The parser is left as it was. Cost: a parser step per byte.
    pub(crate) fn accepts_after(&mut self, text: &[u8]) -> Result<bool, MatchError> {
        let start = self.parser.top();
        let g = &self.c.grammar;
        let mut ok = true;
        for &b in text {
            match self.parser.push_byte(g, b) {
                Ok(true) => {}
                Ok(false) => {
                    ok = false;
                    break;
                }
                Err(e) => {
                    self.parser.truncate(start);
                    return Err(e);
                }
            }
        }
        if ok {
            ok = match self.parser.ensure_closed(g) {
                Ok(()) => self.parser.top_info().accepting,
                Err(e) => {
                    self.parser.truncate(start);
                    return Err(e);
                }
            };
        }
        self.parser.truncate(start);
        Ok(ok)
    }

    /// A best-first search over bytes for a completion that passes the semantic checks
    /// (see the module docs), from the output followed by `prefix`: nodes in order of
    /// bytes so far plus syntactic distance (ties deepest first); at each, the syntactic
    /// candidates are fed to the parser, and each child's too; at most [`SEARCH_NODES`]
    /// nodes, within `clock`. Returns the completion's text (`prefix` included).
    fn search(&mut self, prefix: &[u8], clock: &Deadline) -> Result<Option<Vec<u8>>, MatchError> {
        Ok(self.search_to(prefix, Goal::Accept, clock)?.map(|(t, _)| t))
    }

    /// [`Matcher::search`] towards `goal` (see [`Goal`]); a text that reaches it without
    /// completing the output comes with the check that still fails, for the caller to fix
    /// in turn.
    fn search_to(
        &mut self,
        prefix: &[u8],
        goal: Goal<'_>,
        clock: &Deadline,
    ) -> Result<Reached, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let start = self.parser.top();
        let mut paths: Vec<Vec<u8>> = vec![prefix.to_vec()];
        // (f, deeper first among equal f, insertion order): ties go depth-first, so a
        // key that must be three digits is reached in three steps, not 256^3.
        let mut heap: BinaryHeap<Reverse<(u32, Reverse<u32>, u32)>> = BinaryHeap::new();
        heap.push(Reverse((0, Reverse(0), 0)));
        let mut expanded = 0;
        let r = (|| -> Result<Reached, MatchError> {
            while let Some(Reverse((_, _, id))) = heap.pop() {
                if expanded >= SEARCH_NODES || clock.check().is_err() {
                    return Ok(None);
                }
                expanded += 1;
                let path = paths[id as usize].clone();
                self.parser.truncate(start);
                for &b in &path {
                    if !self.parser.push_byte(g, b)? {
                        return Ok(None);
                    }
                }
                self.parser.ensure_closed(g)?;
                if self.parser.top_info().accepting {
                    return Ok(Some((path, None)));
                }
                // The syntactic candidates from here.
                if let Some((text, f)) = self.passing_candidate(goal)? {
                    let mut full = path.clone();
                    full.extend_from_slice(&text);
                    return Ok(Some((full, f)));
                }
                // A dive: the first preferred byte again and again, with the candidates
                // after each (a key that must be three digits is `000`, which a search
                // by extra bytes reaches only after every shorter key).
                let depth0 = self.parser.top();
                if expanded <= DIVES {
                    if let Some((text, f)) = self.dive(&mut expanded, goal)? {
                        let mut full = path.clone();
                        full.extend_from_slice(&text);
                        return Ok(Some((full, f)));
                    }
                }
                self.parser.truncate(depth0);
                // Children, in the preferred byte order, each with its own syntactic
                // candidate tried at once: one byte off the failing text and its shortest
                // way on (`{"v` then `alue":0}` where `{"":0}` fails an exclusive `oneOf`
                // whose branches differ on `value`; a lexeme's shortest completion is one
                // text, so the other keys of an object are only reached this way).
                let allowed = self.parser.top_info().allowed;
                for &b in crate::compile::automata::dist::PREFERRED.iter() {
                    if !allowed.contains(b) {
                        continue;
                    }
                    if expanded >= SEARCH_NODES || clock.check().is_err() {
                        return Ok(None);
                    }
                    if !self.parser.push_byte(g, b)? {
                        continue;
                    }
                    expanded += 1;
                    let (d, _) = self.parser.distance(g, sh);
                    if d == INF {
                        self.parser.pop();
                        continue;
                    }
                    self.parser.ensure_closed(g)?;
                    let found = if self.parser.top_info().accepting {
                        Some((Vec::new(), None))
                    } else {
                        self.passing_candidate(goal)?
                    };
                    self.parser.pop();
                    if let Some((text, f)) = found {
                        let mut full = path.clone();
                        full.push(b);
                        full.extend_from_slice(&text);
                        return Ok(Some((full, f)));
                    }
                    let mut p = path.clone();
                    p.push(b);
                    let f = add(p.len() as u32, d);
                    let depth = p.len() as u32;
                    paths.push(p);
                    heap.push(Reverse((f, Reverse(depth), (paths.len() - 1) as u32)));
                }
            }
            Ok(None)
        })();
        self.parser.truncate(start);
        r
    }
}

impl Matcher {
    /// A completion built with the member hints of the check that failed (`f`, on the
    /// candidate `text`): first the candidate repaired ([`Matcher::repair`]), then each
    /// hint as a continuation of the output itself (the rest of a key the output has
    /// begun, or a whole member, with a comma when one is due) followed by the syntactic
    /// candidates from there, each repaired in turn. Every try is fed to the parser, so a
    /// hint that breaks the grammar or a check is dropped. At most [`REPAIR_TRIES`]
    /// candidates fed, within `clock`. The parser is left as it was.
    fn hinted(
        &mut self,
        text: Vec<u8>,
        f: Failed,
        clock: Deadline,
    ) -> Result<Option<Vec<u8>>, MatchError> {
        let mut budget = RepairBudget { tries: 0, clock };
        let check = f.check.clone();
        if let Some(t) = self.fill(text, f, &mut budget)? {
            return Ok(Some(t));
        }
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let start = self.parser.top();
        let tail = self.parser.bytes[start.saturating_sub(64)..start].to_vec();
        for h in check.0.member_hints() {
            for cont in continuations(&tail, h.as_bytes()) {
                if !budget.spend() {
                    return Ok(None);
                }
                let mut ok = true;
                for &b in &cont {
                    if !self.parser.push_byte(g, b)? {
                        ok = false;
                        break;
                    }
                }
                let mut texts = Vec::new();
                if ok {
                    self.parser.ensure_closed(g)?;
                    if self.parser.top_info().accepting {
                        self.parser.truncate(start);
                        return Ok(Some(cont));
                    }
                    let ranked = self.parser.ranked_core(g, sh);
                    for &(_, _, it) in ranked.iter().take(4) {
                        let mut t = cont.clone();
                        self.parser.item_text(g, sh, it, &mut t);
                        texts.push(t);
                    }
                }
                self.parser.truncate(start);
                for t in texts {
                    if !budget.spend() {
                        return Ok(None);
                    }
                    self.parser.failed = None;
                    if self.accepts_after(&t)? {
                        return Ok(Some(t));
                    }
                    if let Some(f) = self.parser.failed.take() {
                        let r = self.repair(start, t, f, &mut budget);
                        self.parser.truncate(start);
                        if let Some(r) = r? {
                            return Ok(Some(r));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// Completes a candidate `text` whose value failed its check (`f`) by what the
    /// grammar itself says, one value at a time:
    /// - an object that lacks keys its check requires
    ///   ([`crate::grammar::ValueCheck::key_choices`]) gets one written before its
    ///   closing brace with the grammar's shortest value for it ([`Matcher::with_key`]),
    ///   or, where the check blames that value, one searched for alone
    ///   ([`Goal::Member`]); an object the candidate wrote with none of them is emptied
    ///   first, once;
    /// - then the change the check asks for below the object's members or in the value
    ///   ([`Matcher::inner_fix`]: a nested key, one more member or element, a member or
    ///   element cut out, a value replaced);
    /// - any other failing value is replaced by the check's own examples (a number within
    ///   its bounds: [`Matcher::value_example`]), or by an object where it must be one
    ///   ([`Matcher::container_instead`]), or else searched for alone (a string's length
    ///   under a `pattern`: [`Matcher::search_to`] from the text before it, until the
    ///   check that fails is an enclosing value's), once per value; and where none of
    ///   those leads on, by an array;
    ///
    /// and the candidate is fed again, until it passes: a depth-first search over the
    /// candidates, whose first way is the first key choice each time, and which comes
    /// back to the next choice where a way leads nowhere. Failing that, the member hints
    /// ([`Matcher::repair`]) on where the first way stopped, then on the candidate. At
    /// most [`FILL_KEYS`] candidates expanded, within `budget`'s time. Returns the completion's text, or
    /// `None`. The parser is left as it was.
    ///
    /// Each candidate is fed with [`Matcher::accepts_at`]: only what differs from the
    /// last candidate is read again (a key written before an object's closing brace
    /// costs its own bytes and the closing ones, not the whole candidate's).
    fn fill(
        &mut self,
        text: Vec<u8>,
        f: Failed,
        budget: &mut RepairBudget,
    ) -> Result<Option<Vec<u8>>, MatchError> {
        let start = self.parser.top();
        let r = self.fill_from(start, text, f, budget);
        self.parser.truncate(start);
        r
    }

    /// [`Matcher::fill`] from set `start` (the output), leaving the parser holding the
    /// last candidate fed.
    fn fill_from(
        &mut self,
        start: usize,
        text: Vec<u8>,
        f: Failed,
        budget: &mut RepairBudget,
    ) -> Result<Option<Vec<u8>>, MatchError> {
        let original = (text.clone(), f.clone());
        // Objects emptied once, and values searched once (by their start).
        let mut emptied: Vec<u32> = Vec::new();
        let mut searched: Vec<u32> = Vec::new();
        // The candidates to go on from, the one to go on from next last: a depth-first
        // search whose first way is the greedy fill, and whose other ways are the other
        // key choices of a check ([`crate::grammar::ValueCheck::key_choices`]).
        let mut stack = vec![FillNode::new(text, f)];
        // Where the first way stopped (the member hints are tried there).
        let mut stopped: Option<(Vec<u8>, Failed)> = None;
        // The candidates met (by a hash of their text): two ways that write the same keys
        // in another order meet again, and the second is not expanded.
        let mut seen: crate::util::FastSet<u64> = crate::util::FastSet::default();
        for _ in 0..FILL_KEYS {
            if budget.clock.check().is_err() {
                return Ok(None);
            }
            let Some(mut node) = stack.pop() else {
                break;
            };

            let choices = match self.failed_object(start, &node.text, &node.f) {
                Some((_, value)) => node.f.check.0.key_choices(&value),
                None => Vec::new(),
            };
            let step = if let Some(key) = choices.get(node.next) {
                if node.next == 0 {
                    node.may_empty = !emptied.contains(&node.f.start);
                    emptied.push(node.f.start);
                }
                let (text, f, may_empty) = (&node.text, &node.f, node.may_empty);
                let step = self.fill_key(start, text, f, key, may_empty, &budget.clock)?;
                node.next += 1;
                node.went_on |= step.is_some();
                stack.push(node);
                step
            } else if node.next == choices.len() {
                // Then what the check asks for below the object's own members, a way per
                // visit (the other branches of a failed `anyOf` when the first leads
                // nowhere).
                let ways = match node.ways.take() {
                    Some(w) => w,
                    None => {
                        let value = self.failed_value(start, &node.text, &node.f);
                        node.f.check.0.inner_fixes(&value)
                    }
                };
                let step = self.inner_fix(start, &node.text, &node.f, &ways, &mut node.way)?;
                if step.is_none() {
                    node.next += 1;
                }
                node.ways = Some(ways);
                node.went_on |= step.is_some();
                stack.push(node);
                step
            } else if node.next == choices.len() + 1
                && !node.went_on
                && !searched.contains(&node.f.start)
            {
                // Then the value alone, once per value (an object instead among its ways).
                searched.push(node.f.start);
                let step = self.fill_value(start, &node.text, &node.f, &budget.clock)?;
                node.next += 1;
                node.went_on |= step.is_some();
                node.array_next = true;
                stack.push(node);
                step
            } else if std::mem::take(&mut node.array_next) {
                // Then an array instead, where the value's ways did not lead on.
                let step = self.container_instead(start, &node.text, &node.f, b'[')?;
                node.went_on |= step.is_some();
                stack.push(node);
                step
            } else {
                if !node.went_on && stopped.is_none() && node.text != original.0 {
                    stopped = Some((node.text, node.f));
                }
                None
            };
            match step {
                Some((t, None)) => return Ok(Some(t)),
                Some((t, Some(g))) if seen.insert(text_hash(&t)) => {
                    stack.push(FillNode::new(t, g));
                }
                Some(_) | None => {}
            }
        }
        if let Some((text, f)) = stopped {
            if let Some(t) = self.repair(start, text, f, budget)? {
                return Ok(Some(t));
            }
        }
        let (text, f) = original;
        self.repair(start, text, f, budget)
    }

    /// A value no key fixes (a string's length under a `pattern`, a number's bounds; `f`
    /// on the candidate `text` after set `start`): the check's own examples
    /// ([`Matcher::value_example`]), an object where one must be
    /// ([`Matcher::container_instead`]), or else the value searched for alone from the text
    /// before it ([`Goal::Past`], within `clock`).
    fn fill_value(
        &mut self,
        start: usize,
        text: &[u8],
        f: &Failed,
        clock: &Deadline,
    ) -> Result<Reached, MatchError> {
        if let Some(step) = self.value_example(start, text, f)? {
            return Ok(Some(step));
        }
        if let Some(step) = self.container_instead(start, text, f, b'{')? {
            return Ok(Some(step));
        }
        let keep = (f.start as usize).saturating_sub(start).min(text.len());
        self.search_from(start, &text[..keep], Goal::Past(f.start), clock)
    }

    /// Where the check of the failing value (`f`, on the candidate `text` after set
    /// `start`) asks for a change in it (`ways`, from
    /// [`crate::grammar::ValueCheck::inner_fixes`]): the candidate with the first way from
    /// `*next` on that the grammar reads ([`Matcher::fixed`]), with the check that still
    /// fails; `*next` moves past it. `None` once the ways are spent. Cost: a parse of the
    /// changed part per way tried.
    fn inner_fix(
        &mut self,
        start: usize,
        text: &[u8],
        f: &Failed,
        ways: &[InnerFix],
        next: &mut usize,
    ) -> Result<Reached, MatchError> {
        while let Some(fix) = ways.get(*next) {
            *next += 1;
            if let Some(t) = self.fixed(start, text, f, fix.clone())? {
                if let Some(step) = self.judged(start, t)? {
                    return Ok(Some(step));
                }
            }
        }
        Ok(None)
    }

    /// The candidate `text` (after set `start`) with change `fix` made in its failing
    /// value (`f`): a nested object's missing key written with the grammar's shortest
    /// value, as [`Matcher::with_key`] does, or one more member or element (the
    /// grammar's shortest); a member or element cut out; a value replaced. `None` where
    /// the change falls outside the candidate's own text or the grammar refuses it.
    /// Cost: a parse of the changed part where the grammar writes some of it.
    fn fixed(
        &mut self,
        start: usize,
        text: &[u8],
        f: &Failed,
        fix: InnerFix,
    ) -> Result<Option<Vec<u8>>, MatchError> {
        // Offsets into the object's text, which starts at `f.start`; only the candidate's
        // own text can change.
        let at = |off: usize| (f.start as usize + off).checked_sub(start);
        let t = match fix {
            InnerFix::Key {
                close,
                members,
                key,
            } => {
                let Some(close) = at(close).filter(|&c| c <= text.len()) else {
                    return Ok(None);
                };
                match self.with_key(start, &text[..close], members, Some(&key))? {
                    Some((t, value_at)) => self.kept_after(start, t, value_at, &text[close..])?,
                    None => return Ok(None),
                }
            }
            InnerFix::Member { close, members } => {
                let Some(close) = at(close).filter(|&c| c <= text.len()) else {
                    return Ok(None);
                };
                match self.with_key(start, &text[..close], members, None)? {
                    Some((t, key_at)) => {
                        // The value starts after the key the grammar wrote and its colon.
                        let colon = crate::util::value_end(&t, key_at - 1)
                            .map(|e| crate::util::skip_blanks(&t, e));
                        match colon.filter(|&c| t.get(c) == Some(&b':')) {
                            Some(c) => {
                                let v = crate::util::skip_blanks(&t, c + 1);
                                self.kept_after(start, t, v, &text[close..])?
                            }
                            None => t,
                        }
                    }
                    None => return Ok(None),
                }
            }
            InnerFix::Element { close, elements } => {
                let Some(close) = at(close).filter(|&c| c <= text.len()) else {
                    return Ok(None);
                };
                let mut t = text[..close].to_vec();
                if elements {
                    t.push(b',');
                }
                if !self.shortest_element_after(start, &mut t)? {
                    return Ok(None);
                }
                t
            }
            InnerFix::Replace {
                start: a,
                end: b,
                text: mut x,
            } => {
                // A value that starts in the output already written (a string whose
                // opening quote and first letters are committed) is replaced where the
                // new text begins with what is written: its rest follows.
                let a = match at(a) {
                    Some(a) => Some(a),
                    None => {
                        let from = f.start as usize + a;
                        let written = self.parser.bytes.get(from..start).unwrap_or_default();
                        match x.as_bytes().strip_prefix(written) {
                            Some(rest) if from < start => {
                                x = String::from_utf8_lossy(rest).into_owned();
                                Some(0)
                            }
                            _ => None,
                        }
                    }
                };
                let (Some(a), Some(b)) = (a, at(b)) else {
                    return Ok(None);
                };
                if a > b || b > text.len() {
                    return Ok(None);
                }
                let mut t = text[..a].to_vec();
                t.extend_from_slice(x.as_bytes());
                t.extend_from_slice(&text[b..]);
                t
            }
        };
        Ok(Some(t))
    }

    /// Where the failing value (`f`, on the candidate `text` after set `start`) is the
    /// candidate's own and not an object (`open` is `{`) or an array (`[`), the candidate
    /// with one there instead (the grammar's shortest from `open` on), with the check
    /// that still fails, for the fill to go on with its keys or elements (a root whose
    /// schema allows `null` but whose `oneOf` needs an object). `None` when the grammar
    /// allows none there. Cost: a parse of the changed part.
    fn container_instead(
        &mut self,
        start: usize,
        text: &[u8],
        f: &Failed,
        open: u8,
    ) -> Result<Reached, MatchError> {
        let Some(at) = (f.start as usize).checked_sub(start) else {
            return Ok(None);
        };
        if at >= text.len() || text[at] == open {
            return Ok(None);
        }
        let mut t = text[..at].to_vec();
        t.push(open);
        if !self.shortest_after(start, &mut t)? {
            return Ok(None);
        }
        self.judged(start, t)
    }

    /// [`Matcher::search_to`] from set `base` (the parser may hold sets above it).
    fn search_from(
        &mut self,
        base: usize,
        prefix: &[u8],
        goal: Goal<'_>,
        clock: &Deadline,
    ) -> Result<Reached, MatchError> {
        self.parser.truncate(base);
        self.search_to(prefix, goal, clock)
    }

    /// Whether the output up to set `base` followed by `text` is a complete sentence
    /// (semantic checks run), like [`Matcher::accepts_after`] from `base`, but reading
    /// only what differs from the text the parser holds above `base` now: the sets of
    /// their common beginning are kept (a set depends only on the text before it), and
    /// [`crate::parse::earley::Parser::failed`] is left as reading all of `text` would leave it.
    /// The parser is left holding `base` and what it read of `text`. Cost: a parser step
    /// per byte after the common beginning.
    fn accepts_at(&mut self, base: usize, text: &[u8]) -> Result<bool, MatchError> {
        if !self.feed(base, text)? {
            return Ok(false);
        }
        self.parser.ensure_closed(&self.c.grammar)?;
        Ok(self.parser.top_info().accepting)
    }

    /// Makes the parser hold the output up to set `base` followed by `text`, keeping the
    /// sets of what it holds above `base` now as far as that agrees with `text` (see
    /// [`Matcher::accepts_at`]); false, holding what was read, when a byte is refused.
    /// Cost: a parser step per byte after the common beginning.
    fn feed(&mut self, base: usize, text: &[u8]) -> Result<bool, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let top = self.parser.top();
        // The bytes read are kept only where the grammar has checks (as here).
        let same = match self.parser.bytes.get(base..top) {
            Some(held) if g.has_checks && base <= top => {
                held.iter().zip(text).take_while(|(a, b)| a == b).count()
            }
            _ => 0,
        };
        self.parser.truncate(base + same);
        if let Some(f) = self.parser.failed_within(base) {
            self.parser.failed = Some(f.clone());
        }
        for &b in &text[same..] {
            if !self.parser.push_byte(g, b)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One key of [`Matcher::fill`]: where the failing value (`f`, on the candidate `text`)
    /// is an object, the candidate with `key` and its value written before the object's
    /// closing brace (the object emptied first when `may_empty` and the candidate wrote it
    /// with none of the required keys), with the check that still fails (`None` when the
    /// output accepts). `None` when the value is not such an object or the grammar
    /// refuses the key. Cost: a few parses of
    /// the candidate, and a search of the value when the check blames it (within `clock`).
    fn fill_key(
        &mut self,
        start: usize,
        text: &[u8],
        f: &Failed,
        key: &str,
        may_empty: bool,
        clock: &Deadline,
    ) -> Result<Reached, MatchError> {
        let Some((mut at, value)) = self.failed_object(start, text, f) else {
            return Ok(None);
        };
        let required = f.check.0.missing_keys(b"{}");
        let mut members = value[1..value.len() - 1]
            .iter()
            .any(|b| !b" \t\r\n".contains(b));
        // An object the candidate wrote with none of the required keys: its members were
        // the grammar's shortest ones (`{"":0}`), which the required ones replace (once:
        // under a union of objects, another branch may want what was removed).
        let mut t = text.to_vec();
        let open = (f.start as usize).checked_sub(start);
        if let Some(open) =
            open.filter(|_| members && may_empty && !required.iter().any(|k| has_key(&value, k)))
        {
            t.drain(open + 1..at);
            at = open + 1;
            members = false;
        }
        let Some((t, value_at)) = self.with_key(start, &t[..at], members, Some(key))? else {
            return Ok(None);
        };
        self.parser.failed = None;
        if self.accepts_at(start, &t)? {
            return Ok(Some((t, None)));
        }
        let g = self.parser.failed.take();
        // The check blames the value written (a branch wants a string where the grammar's
        // shortest value over all branches is `0`): that value searched alone until it
        // does not.
        // First what the check itself asks for there (a value of the wrong type replaced
        // by the simplest of the right one): a search costs a validation of the whole
        // object per node, and an object with many such members would spend the clock
        // on its first.
        let goal = Goal::Member(f.start, key);
        if let Some(g) = g.as_ref().filter(|g| !self.reached(start, &t, g, goal)) {
            let ways = g.check.0.inner_fixes(&self.failed_value(start, &t, g));
            if let Some(step) = self.inner_fix(start, &t, g, &ways, &mut 0)? {
                return Ok(Some(step));
            }
            if let Some(found) = self.search_from(start, &t[..value_at], goal, clock)? {
                return Ok(Some(found));
            }
        }
        Ok(Some((t, g)))
    }

    /// The candidate `text` with its failing value (`f`, written by the candidate) replaced
    /// by the first of the check's own examples
    /// ([`crate::grammar::ValueCheck::value_examples`]) after which the output accepts, or
    /// the check that fails is an enclosing value's; with that check. Cost: a parse of the
    /// candidate per example (its changed part: [`Matcher::accepts_at`] from set `start`).
    fn value_example(
        &mut self,
        start: usize,
        text: &[u8],
        f: &Failed,
    ) -> Result<Reached, MatchError> {
        let Some(at) = (f.start as usize).checked_sub(start) else {
            return Ok(None);
        };
        let end = (f.end as usize).saturating_sub(start).min(text.len());
        if at >= end {
            return Ok(None);
        }
        for ex in f.check.0.value_examples() {
            let mut t = text[..at].to_vec();
            t.extend_from_slice(ex.as_bytes());
            t.extend_from_slice(&text[end..]);
            self.parser.failed = None;
            if self.accepts_at(start, &t)? {
                return Ok(Some((t, None)));
            }
            if let Some(g) = self.parser.failed.take().filter(|g| g.start < f.start) {
                return Ok(Some((t, Some(g))));
            }
        }
        Ok(None)
    }

    /// The text of the value that failed (`f`, on the candidate `text` after set `start`;
    /// what is committed included).
    fn failed_value(&self, start: usize, text: &[u8], f: &Failed) -> Vec<u8> {
        (f.start as usize..f.end as usize)
            .filter_map(|i| match i.checked_sub(start) {
                None => self.parser.bytes.get(i).copied(),
                Some(j) => text.get(j).copied(),
            })
            .collect()
    }

    /// Where the value that failed (`f`, on the candidate `text` after set `start`) is an
    /// object whose closing brace the candidate wrote (what is committed stays): that
    /// brace's index in `text` and the object's text.
    fn failed_object(&self, start: usize, text: &[u8], f: &Failed) -> Option<(usize, Vec<u8>)> {
        let at = (f.end as usize)
            .checked_sub(1)
            .and_then(|e| e.checked_sub(start))
            .filter(|&at| text.get(at) == Some(&b'}'))?;
        let value = self.failed_value(start, text, f);
        (value.first() == Some(&b'{')).then_some((at, value))
    }

    /// Repairs a candidate `text` whose object value failed its check (`f`) with the
    /// check's member hints (`crate::schema`'s hints): each is inserted before the
    /// object's closing brace (which the candidate wrote), and the first that makes the
    /// output accept is the completion; one that moves the failure to another value is
    /// kept and that value repaired in turn, [`REPAIR_ROUNDS`] values at most. Returns the
    /// repaired text, or `None`. The candidate follows set `start`; each try is fed with
    /// [`Matcher::accepts_at`] (the parser is left holding the last).
    fn repair(
        &mut self,
        start: usize,
        mut text: Vec<u8>,
        mut f: Failed,
        budget: &mut RepairBudget,
    ) -> Result<Option<Vec<u8>>, MatchError> {
        for _ in 0..REPAIR_ROUNDS {
            let Some((at, value)) = self.failed_object(start, &text, &f) else {
                return Ok(None);
            };
            let present = serde_json::from_slice::<serde_json::Value>(&value).ok();
            let Some(present) = present.as_ref().and_then(|v| v.as_object()) else {
                return Ok(None);
            };
            let mut next = None;
            for h in f.check.0.member_hints() {
                // Only the members the value lacks (a hint may be a whole required set).
                let Some(h) = missing_members(h, present) else {
                    continue;
                };
                if !budget.spend() {
                    return Ok(None);
                }
                let mut t = text[..at].to_vec();
                if !present.is_empty() {
                    t.push(b',');
                }
                t.extend_from_slice(h.as_bytes());
                t.extend_from_slice(&text[at..]);
                self.parser.failed = None;
                if self.accepts_at(start, &t)? {
                    return Ok(Some(t));
                }
                match self.parser.failed.take() {
                    Some(g) if g.start != f.start || g.check != f.check => {
                        next = Some((t, g));
                        break;
                    }
                    _ => {}
                }
            }
            let Some((t, g)) = next else {
                return Ok(None);
            };
            text = t;
            f = g;
        }
        Ok(None)
    }

    /// The output followed by `prefix` (a candidate cut before an object's closing brace),
    /// a comma when `comma`, the member key `key` and its colon, then the shortest
    /// syntactic completion from there, which writes the grammar's shortest value for
    /// that key (a `format`, `pattern` or `enum` value spelled as the grammar spells it)
    /// and closes the rest; with no `key`, the opening quote only, so the grammar writes
    /// its own shortest key (one a `patternProperties` allows) and value. `None` when the
    /// grammar refuses the key there. The output ends at set `start`; the parser is left
    /// holding the text up to the value (or the key) ([`Matcher::feed`]); returns the
    /// text and the offset of the value in it (of the key, without `key`). Cost: a parser
    /// step per byte not held already.
    fn with_key(
        &mut self,
        start: usize,
        prefix: &[u8],
        comma: bool,
        key: Option<&str>,
    ) -> Result<Option<(Vec<u8>, usize)>, MatchError> {
        let mut t = prefix.to_vec();
        if comma {
            t.push(b',');
        }
        match key {
            Some(key) => {
                t.extend_from_slice(
                    serde_json::Value::String(key.to_string())
                        .to_string()
                        .as_bytes(),
                );
                t.push(b':');
            }
            None => t.push(b'"'),
        }
        let value_at = t.len();
        Ok(self.shortest_after(start, &mut t)?.then_some((t, value_at)))
    }

    /// Appends to `t` (a text after set `start`) the grammar's shortest syntactic
    /// completion from its end; false when the grammar refuses `t` (the parser is left
    /// holding it, [`Matcher::feed`]). Cost: a parser step per byte not held already.
    fn shortest_after(&mut self, start: usize, t: &mut Vec<u8>) -> Result<bool, MatchError> {
        let c = self.c.clone();
        let (g, sh) = (&c.grammar, c.grammar.shortest());
        if !self.feed(start, t)? {
            return Ok(false);
        }
        self.parser.ensure_closed(g)?;
        let Some(&(_, _, it)) = self.parser.ranked_core(g, sh).first() else {
            return Ok(false);
        };
        self.parser.item_text(g, sh, it, t);
        Ok(true)
    }

    /// `t`, a candidate that [`Matcher::with_key`] wrote through a new member whose value
    /// starts at `value_at`, with what followed the object's closing brace before
    /// (`rest`, from that brace on) in place of the grammar's shortest way to close it:
    /// the other members of enclosing objects stay as they were. `t` itself where the
    /// grammar refuses that (a check that fails on it does not count). Cost: a parse of the new member and `rest`.
    fn kept_after(
        &mut self,
        start: usize,
        t: Vec<u8>,
        value_at: usize,
        rest: &[u8],
    ) -> Result<Vec<u8>, MatchError> {
        let Some(end) = crate::util::value_end(&t, value_at) else {
            return Ok(t);
        };
        let mut kept = t[..end].to_vec();
        kept.extend_from_slice(rest);
        // A byte refused because a check failed on a value it completes is read by the
        // grammar: the candidate goes on with that check failing.
        self.parser.failed = None;
        if kept != t && (self.feed(start, &kept)? || self.parser.failed.is_some()) {
            return Ok(kept);
        }
        Ok(t)
    }

    /// Like [`Matcher::shortest_after`] where `t` ends inside an array, before its next
    /// element or its closing bracket: the shortest completion that writes an element
    /// first (the shortest of the grammar's ways on whose text does not start by closing
    /// the array). Cost: as [`Matcher::shortest_after`], and the text of each way tried.
    fn shortest_element_after(
        &mut self,
        start: usize,
        t: &mut Vec<u8>,
    ) -> Result<bool, MatchError> {
        let c = self.c.clone();
        let (g, sh) = (&c.grammar, c.grammar.shortest());
        if !self.feed(start, t)? {
            return Ok(false);
        }
        self.parser.ensure_closed(g)?;
        let at = t.len();
        for &(_, _, it) in &self.parser.ranked_core(g, sh) {
            self.parser.item_text(g, sh, it, t);
            let first = t[at..].iter().find(|b| !b" \t\r\n".contains(b));
            if first.is_some_and(|&b| b != b']') {
                return Ok(true);
            }
            t.truncate(at);
        }
        Ok(false)
    }

    /// The candidate `t` (after set `start`) judged: with no check when the output then
    /// accepts, with the check that fails otherwise, `None` when the grammar refuses it
    /// with no check failing. Cost: [`Matcher::accepts_at`].
    fn judged(&mut self, start: usize, t: Vec<u8>) -> Result<Reached, MatchError> {
        self.parser.failed = None;
        if self.accepts_at(start, &t)? {
            return Ok(Some((t, None)));
        }
        Ok(self.parser.failed.take().map(|g| (t, Some(g))))
    }

    /// From the current state, [`DIVE`] bytes at most, each the first preferred byte
    /// (whitespace last) that keeps a completion, trying after each whether the output
    /// reaches `goal` or a syntactic candidate does (see [`Matcher::search_to`]); returns
    /// the bytes and the candidate's text. The parser is left at the end of the dive (the
    /// caller truncates). Counts its steps in `expanded`.
    fn dive(&mut self, expanded: &mut usize, goal: Goal<'_>) -> Result<Reached, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let mut dive = Vec::new();
        // The preferred order with whitespace last: blanks between tokens change nothing.
        let (blank, mut order): (Vec<u8>, Vec<u8>) = crate::compile::automata::dist::PREFERRED
            .iter()
            .copied()
            .partition(|b| b" \t\r\n".contains(b));
        order.extend(blank);
        for _ in 0..DIVE {
            *expanded += 1;
            self.parser.ensure_closed(g)?;
            let allowed = self.parser.top_info().allowed;
            let mut stepped = false;
            for &b in &order {
                if allowed.contains(b) && self.parser.push_byte(g, b)? {
                    if self.parser.distance(g, sh).0 == INF {
                        self.parser.pop();
                        continue;
                    }
                    dive.push(b);
                    stepped = true;
                    break;
                }
            }
            if !stepped {
                return Ok(None);
            }
            self.parser.ensure_closed(g)?;
            let done = if self.parser.top_info().accepting {
                Some((Vec::new(), None))
            } else {
                self.passing_candidate(goal)?
            };
            if let Some((text, f)) = done {
                dive.extend_from_slice(&text);
                return Ok(Some((dive, f)));
            }
        }
        Ok(None)
    }

    /// The text of the first of the four cheapest syntactic candidates from the current
    /// state that reaches `goal` (see [`Matcher::search_to`]), if any, with the check
    /// that still fails after it.
    fn passing_candidate(&mut self, goal: Goal<'_>) -> Result<Reached, MatchError> {
        let c = self.c.clone();
        let g = &c.grammar;
        let sh = g.shortest();
        let ranked = self.parser.ranked_core(g, sh);
        let mut text = Vec::new();
        for &(_, _, it) in ranked.iter().take(4) {
            text.clear();
            self.parser.item_text(g, sh, it, &mut text);
            self.parser.failed = None;
            if self.accepts_after(&text)? {
                return Ok(Some((text, None)));
            }
            if let Some(f) = self.parser.failed.take() {
                if self.reached(self.parser.top(), &text, &f, goal) {
                    return Ok(Some((text, Some(f))));
                }
            }
        }
        Ok(None)
    }

    /// Whether a candidate `text` (after set `start`) after which check `f` fails still
    /// reaches `goal`.
    fn reached(&self, start: usize, text: &[u8], f: &Failed, goal: Goal<'_>) -> bool {
        match goal {
            Goal::Accept => false,
            Goal::Past(s) => f.start < s,
            Goal::Member(s, key) => {
                f.start != s
                    || !self
                        .failed_object(start, text, f)
                        .is_some_and(|(_, value)| f.check.0.blames_member(&value, key))
            }
        }
    }
}

/// A hash of a candidate's text (for [`Matcher::fill`]'s candidates met).
fn text_hash(t: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    t.hash(&mut h);
    h.finish()
}

/// A candidate of [`Matcher::fill`]'s search: the text, the check that fails on it, the
/// index of its next key choice, whether a choice went on from it, and whether its object
/// may be emptied (decided at its first choice, the same for the others).
struct FillNode {
    text: Vec<u8>,
    f: Failed,
    next: usize,
    went_on: bool,
    may_empty: bool,
    /// Whether an array in place of the value remains to be tried (after the value's own
    /// ways, [`Matcher::fill_value`]).
    array_next: bool,
    /// The changes the check asks for below the members, once asked, and the next to try
    /// ([`Matcher::inner_fix`]).
    ways: Option<Vec<InnerFix>>,
    way: usize,
}

impl FillNode {
    /// A candidate not expanded yet.
    fn new(text: Vec<u8>, f: Failed) -> FillNode {
        FillNode {
            text,
            f,
            next: 0,
            went_on: false,
            may_empty: true,
            array_next: false,
            ways: None,
            way: 0,
        }
    }
}

/// What a search with member hints may still spend.
struct RepairBudget {
    tries: usize,
    clock: Deadline,
}

impl RepairBudget {
    /// Counts one candidate fed; false once [`REPAIR_TRIES`] are spent or time is up.
    fn spend(&mut self) -> bool {
        self.tries += 1;
        self.tries <= REPAIR_TRIES && self.clock.check().is_ok()
    }
}

/// The members of hint `h` (`"key":value`, or several joined by commas) whose keys
/// `present` lacks, as hint text in `h`'s order; `None` when there are none or `h` is not
/// members.
fn missing_members(
    h: &str,
    present: &serde_json::Map<String, serde_json::Value>,
) -> Option<String> {
    let m: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&format!("{{{h}}}")).ok()?;
    let parts: Vec<String> = m
        .iter()
        .filter(|(k, _)| !present.contains_key(*k))
        .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone())))
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// Ways the output (whose last bytes are `tail`) may go on with the member `h`: the rest
/// of `h` after each of its beginnings that the output ends with (a key begun), and the
/// whole member, alone and after a comma.
fn continuations(tail: &[u8], h: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (1..h.len())
        .rev()
        .filter(|&j| tail.ends_with(&h[..j]))
        .map(|j| h[j..].to_vec())
        .collect();
    out.push(h.to_vec());
    let mut comma = b",".to_vec();
    comma.extend_from_slice(h);
    out.push(comma);
    out
}

/// Values a repair fixes in turn (see [`Matcher::repair`]).
const REPAIR_ROUNDS: usize = 8;

/// Candidates a fill expands at most (see [`Matcher::fill`]); each costs a parse of what
/// changed in the candidate and a check, and the search's time limit bounds them too.
const FILL_KEYS: usize = 1024;

/// The completion search past semantic checks (the fill, the member hints and the
/// searches) runs within `1 / SEARCH_SHARE` of [`crate::Limits::max_mask_time`], one clock
/// for all of it; the fill and the hints take at most half.
const SEARCH_SHARE: u32 = 4;

/// Candidates a repair feeds to the parser at most.
const REPAIR_TRIES: usize = 256;

/// Bytes of a search's dive (see [`Matcher::search`]).
const DIVE: usize = 12;

/// Search nodes that dive (the first ones).
const DIVES: usize = 4;

/// What a search for a value must reach besides a complete output.
#[derive(Clone, Copy)]
enum Goal<'a> {
    /// Nothing else: a completion.
    Accept,
    /// The value starting at this byte passes its check: the last check that fails
    /// starts before it (an enclosing value's).
    Past(u32),
    /// The member with this key of the object starting at this byte passes: its check
    /// fails on something else, or another check fails.
    Member(u32, &'a str),
}

/// What a search towards a goal found (see [`Matcher::search_to`]): the text, and the
/// check that still fails after it (`None` when the output then accepts).
type Reached = Option<(Vec<u8>, Option<Failed>)>;

/// Whether the object text `value` has the top-level key `key` (a parse of `value`).
fn has_key(value: &[u8], key: &str) -> bool {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(value)
        .is_ok_and(|m| m.contains_key(key))
}

/// Puts `w` in `best` when it has fewer tokens.
fn keep_fewer(best: &mut Option<Completion>, w: Completion) {
    if best.as_ref().is_none_or(|b| w.len() < b.len()) {
        *best = Some(w);
    }
}

fn consider(best: &mut Option<Completion>, vocab: &crate::vocab::Vocabulary, text: &[u8]) {
    let Some(tokens) = vocab.fewest_tokens(text) else {
        return;
    };
    if best.as_ref().is_none_or(|b| tokens.len() < b.len()) {
        *best = Some(Completion {
            tokens,
            text: text.to_vec(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::constraint::Constraint;
    use crate::schema::{schema_to_grammar, SchemaOptions};
    use std::sync::Arc;

    /// [`Matcher::accepts_at`] keeps the sets of the beginning a candidate shares with the
    /// one read before: its verdict and the failed check it leaves are those of reading
    /// the candidate afresh ([`Matcher::accepts_after`]), for candidates that share
    /// beginnings of every length, fail checks at every depth, or stop early.
    #[test]
    fn candidates_read_from_their_change_agree_with_a_fresh_read() {
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"<eos>".to_vec());
        let mut special = vec![false; 256];
        special.push(true);
        let vocab =
            Arc::new(crate::vocab::Vocabulary::new("bytes", toks, special, vec![256]).unwrap());
        let schema = serde_json::json!({
            "type": "object", "required": ["a", "b"],
            "properties": {
                "a": {"type": "string", "pattern": "^x+$"},
                "b": {"oneOf": [{"type": "integer", "minimum": 3},
                                {"type": "integer", "multipleOf": 2}]},
                "c": {"type": "object", "required": ["d"],
                      "properties": {"d": {"type": "boolean"}}}}});
        let opts = SchemaOptions {
            any_order: true,
            ..SchemaOptions::default()
        };
        let g = schema_to_grammar(&schema, &opts).unwrap();
        let c = Constraint::new(&g, vocab, &crate::Limits::default()).unwrap();
        let docs = [
            r#"{"a":"xx","b":4}"#,
            r#"{"a":"xy","b":4}"#,
            r#"{"a":"xx","b":6}"#,
            r#"{"a":"xx","b":1}"#,
            r#"{"a":"xx","b":5,"c":{}}"#,
            r#"{"a":"xx","b":5,"c":{"d":true}}"#,
            r#"{"b":5}"#,
            r#"{"b":5,"a":""}"#,
            r#"{"b":5,"a":"x"}"#,
            r#"{"c":{"d":1},"a":"x","b":3}"#,
        ];
        let mut held = Matcher::new(&c).unwrap();
        let mut fresh = Matcher::new(&c).unwrap();
        for m in [&mut held, &mut fresh] {
            m.commit_token(u32::from(b'{')).unwrap();
        }
        let base = held.parser.top();
        let mut accepted = 0;
        for round in 0..3 {
            for (i, d) in docs.iter().enumerate() {
                let d = &d.as_bytes()[1..];
                for cut in [
                    d.len(),
                    d.len() - 1,
                    d.len() / 2,
                    (d.len() * (i + round)) % d.len(),
                ] {
                    let t = &d[..cut];
                    held.parser.failed = None;
                    let a = held.accepts_at(base, t).unwrap();
                    let fa = held.parser.failed.take();
                    fresh.parser.failed = None;
                    let b = fresh.accepts_after(t).unwrap();
                    let fb = fresh.parser.failed.take();
                    let what = String::from_utf8_lossy(t);
                    assert_eq!(a, b, "{what}");
                    let span = |f: Option<Failed>| f.map(|f| (f.start, f.end, f.check));
                    assert_eq!(span(fa), span(fb), "{what}");
                    accepted += usize::from(a);
                }
            }
        }
        // Two documents are valid, each read whole once a round: `b` 5 passes one branch
        // of the exclusive `oneOf` (4 and 6 pass both, 1 neither).
        assert_eq!(accepted, 2 * 3, "valid candidates read");
    }
}
