//! The Earley parser over lexemes, one set per output byte.
//!
//! An item is `(position, origin, lexeme state)`: the dot position in a flattened
//! alternative, the byte offset where the alternative started (or [`ROOT`] for the start
//! rule's own alternatives), and, when the dot is before a lexeme, how far into the lexeme
//! the parser is (a DFA state). Reading a byte advances every lexeme item whose DFA stays
//! alive; an item whose DFA state accepts also moves past the lexeme (in the closure). The
//! closure predicts rules (with the Aycock–Horspool shortcut for nullable rules) and
//! completes them.
//!
//! All sets are kept, as a stack: rolling back a token truncates the stack, and the mask
//! computation pushes and pops sets as it walks the token trie. Because unproductive rules
//! were removed at compile time and DFA states that cannot reach a match are dead, an item
//! can only exist if the text so far is a prefix of a sentence: a non-empty set is proof of
//! viability, which is what makes masks exact.
//!
//! Owns: one generation's Earley sets and their memos. Uses: the compiled grammar,
//! `byteset`, `error`, the state identities (`states`), `util`.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use crate::byteset::ByteSet;
use crate::compile::{CompiledGrammar, EarleyRuleId, Sym};
use crate::error::MatchError;
use crate::parse::states::{StateIds, KEY_CLOSED, KEY_CORE, KEY_WAIT, WAIT_ROOT};

/// Origin marker of the start rule's own items.
pub(crate) const ROOT: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Item {
    pub pos: u32,
    pub origin: u32,
    pub state: u32,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct SetInfo {
    pub start: u32,
    /// Valid only once `closed`.
    pub accepting: bool,
    /// Bytes that may come next (exact once closed, an over-approximation before).
    pub allowed: ByteSet,
    /// Whether prediction/completion has run. A set starts as its scanned core and is
    /// closed only when needed (see [`Parser::push_byte`]).
    pub closed: bool,
    /// How many of the set's items are its core (scanned, or the start rule's for set 0):
    /// the rest were added by the closure, which the core and the sets below determine.
    pub core: u32,
    /// Whether closing the set evaluated a semantic check (then its items also depend on
    /// the text read, not only on the core and the sets below).
    pub checked: bool,
    /// Length of [`Parser::log`] when the set was pushed: its own check outcomes follow.
    pub log_mark: u32,
}

use crate::util::{FastMap, ItemHasher};

/// A semantic check that failed: its value spans set indices `start..end` (bytes of the
/// parse).
#[derive(Clone, Debug)]
pub(crate) struct Failed {
    pub(crate) start: u32,
    pub(crate) end: u32,
    pub(crate) check: crate::grammar::Check,
}

const LINEAR_DEDUP: usize = 24;

/// Origin sets of at least this many items are searched through their index of waiting
/// items ([`Parser::wait_index`]) when a rule completes, instead of scanned: after `},` in
/// an array of `oneOf` objects a set holds hundreds of items, and the scans of the sets
/// below made a boundary-walk step cost 17 µs. The index is built once per set and kept
/// while the set stays, and a boundary walk completes into the same sets below it over
/// and over, so it pays for sets far smaller than that: at 16 instead of 64, the masks of
/// the word-count `pattern` files (`o21072`, `o21074`, `o21075`) took 0.64-0.89x the
/// time in a paired comparison, and MaskBench's every 20th file 1.00x at the median.
const INDEXED_COMPLETION: usize = 16;

#[derive(Clone)]
pub(crate) struct Parser {
    pub items: Vec<Item>,
    pub sets: Vec<SetInfo>,
    dedup: HashSet<Item, BuildHasherDefault<ItemHasher>>,
    /// The dedup table holds exactly items[dedup_start..dedup_start + dedup_len].
    dedup_start: usize,
    dedup_len: usize,
    max_items: usize,
    /// The bytes read (`bytes[k]` took set `k` to set `k + 1`), kept only when the grammar
    /// has semantic checks, which look at the text a rule derived.
    pub(crate) bytes: Vec<u8>,
    /// Semantic checks evaluated so far (a step that leaves it unchanged depended only on
    /// the parser's items, not on the text).
    pub checks: u64,
    /// The lowest top index reached by [`Parser::pop`] or [`Parser::truncate`] since
    /// [`Parser::reset_low_water`]: sets at or below it have not changed since then.
    pub low_water: usize,
    /// The outcome of every semantic check run by the closures of the sets, in order (the
    /// closure of a set runs only while it is the top one, so each set's outcomes are
    /// contiguous, from its [`SetInfo::log_mark`] on). Part of a closed set's identity.
    log: Vec<bool>,
    /// Per set, the waiting identities computed so far and the index of its waiting
    /// items; see [`Parser::wait_id`].
    pub(crate) waits: Vec<Waits>,
    /// Scratch for identity keys.
    key: Vec<u32>,
    /// The last semantic check that failed and its value's span: where a search for a
    /// completion that passes it must change the text (`crate::matching::complete`).
    pub(crate) failed: Option<Failed>,
    /// Every semantic check that failed in the closures of the sets kept, in order (by
    /// [`Failed::end`], the set whose closure ran it): what [`Parser::failed`] would have
    /// been after reading the text again (see [`Parser::failed_within`]).
    fails: Vec<Failed>,
    /// Per rule, the closure (a [`Parser::stamp`] value) that last predicted it: a rule's
    /// predictions at set `k` are `(alt, k, entry)` for each of its alternatives, the same
    /// items whichever item asked, so a second prediction in one closure adds nothing and
    /// is skipped without a dedup probe per alternative.
    predicted: Vec<u32>,
    /// The current closure's stamp (never 0, so a fresh `predicted` marks no rule).
    stamp: u32,
}

/// The cheapest way to finish the parse once rule `r` completes at set `o` (see
/// `crate::matching::complete`): its cost in bytes, the waiting item it goes through (an index into
/// the parser's items), and whether it completes a checked rule on the way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitCost {
    pub(crate) cost: u32,
    pub(crate) via: u32,
    pub(crate) checked: bool,
}

/// What [`Parser::wait_id`] (and `crate::matching::complete`) knows of one set.
#[derive(Clone, Default)]
pub(crate) struct Waits {
    /// Rule -> waiting identity, for the rules asked about so far.
    ids: FastMap<u32, u32>,
    /// The set's items that wait for a rule, as (rule, item index) sorted: built on the
    /// first question about the set, so that each rule's waiting items are found by a
    /// binary search instead of a scan of the whole set (a scan per rule was quadratic
    /// in the set's size).
    pub(crate) index: Option<Vec<(EarleyRuleId, u32)>>,
    /// Rule -> the cheapest way to finish the parse once that rule completes here (see
    /// `crate::matching::complete`), for every rule the set waits for: computed on first use.
    pub(crate) costs: Option<Box<FastMap<EarleyRuleId, WaitCost>>>,
}

impl Parser {
    /// A parser at the start of the output.
    pub fn new(g: &CompiledGrammar, max_items: usize) -> Result<Parser, MatchError> {
        let mut p = Parser {
            items: Vec::new(),
            sets: Vec::new(),
            dedup: HashSet::default(),
            dedup_start: usize::MAX,
            dedup_len: 0,
            max_items,
            bytes: Vec::new(),
            checks: 0,
            low_water: usize::MAX,
            log: Vec::new(),
            waits: Vec::new(),
            key: Vec::new(),
            failed: None,
            fails: Vec::new(),
            predicted: vec![0; g.rule_alts.len()],
            stamp: 0,
        };
        p.sets.push(SetInfo {
            start: 0,
            accepting: false,
            allowed: ByteSet::EMPTY,
            closed: false,
            core: 0,
            checked: false,
            log_mark: 0,
        });
        for &a in &g.rule_alts[g.root.ix()] {
            let it = Item {
                pos: a,
                origin: ROOT,
                state: entry_state(g, a),
            };
            p.add(it)?;
        }
        p.sets[0].core = p.items.len() as u32;
        p.close(g)?;
        Ok(p)
    }

    /// Index of the current (last) set = bytes consumed.
    #[inline]
    pub fn top(&self) -> usize {
        self.sets.len() - 1
    }

    #[inline]
    pub fn top_info(&self) -> &SetInfo {
        self.sets.last().unwrap()
    }

    /// The items of set `k`.
    #[inline]
    pub fn set(&self, k: usize) -> &[Item] {
        let s = self.sets[k].start as usize;
        let e = self
            .sets
            .get(k + 1)
            .map(|x| x.start as usize)
            .unwrap_or(self.items.len());
        &self.items[s..e]
    }

    fn add(&mut self, it: Item) -> Result<(), MatchError> {
        let s = self.sets.last().unwrap().start as usize;
        let n = self.items.len() - s;
        if n < LINEAR_DEDUP {
            if self.items[s..].contains(&it) {
                return Ok(());
            }
        } else {
            if self.dedup_start != s || self.dedup_len != n {
                self.dedup.clear();
                self.dedup.extend(self.items[s..].iter().copied());
                self.dedup_start = s;
                self.dedup_len = n;
            }
            if !self.dedup.insert(it) {
                return Ok(());
            }
            self.dedup_len += 1;
            self.room_for_one(n)?;
        }
        self.items.push(it);
        Ok(())
    }

    /// Whether a set of `n` items may take one more (`Limits::max_parser_items`, as
    /// `max_items`). Cost: O(1).
    fn room_for_one(&self, n: usize) -> Result<(), MatchError> {
        if n >= self.max_items {
            return Err(MatchError::Budget {
                what: "parser items in one step",
                value: n + 1,
                limit: self.max_items,
            });
        }
        Ok(())
    }

    /// Appends the prediction `it` (`(alt, k, entry)`, an alternative of a rule predicted
    /// for the first time in the top set's closure) without a dedup probe: no other route
    /// makes such an item (completions and skips of nullable rules advance past a
    /// position, so theirs are never an alternative's first; scanned items and the root's
    /// come from below `k`), so it is new. The dedup table, when in step with the set,
    /// counts it without holding it: no later probe can ask for it. Cost: O(1).
    fn push_predicted(&mut self, it: Item) -> Result<(), MatchError> {
        let s = self.sets.last().unwrap().start as usize;
        let n = self.items.len() - s;
        self.room_for_one(n)?;
        if self.dedup_start == s && self.dedup_len == n {
            self.dedup_len += 1;
        }
        self.items.push(it);
        Ok(())
    }

    /// Closes the top set if it is not closed yet.
    #[inline]
    pub fn ensure_closed(&mut self, g: &CompiledGrammar) -> Result<(), MatchError> {
        if self.top_info().closed {
            Ok(())
        } else {
            self.close(g)
        }
    }

    /// Closes the top set under prediction and completion, then records whether it accepts
    /// and which bytes may come next.
    fn close(&mut self, g: &CompiledGrammar) -> Result<(), MatchError> {
        let k = self.top() as u32;
        let mut i = self.sets[k as usize].start as usize;
        let mut accepting = false;
        let checks = self.checks;
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.predicted.iter_mut().for_each(|x| *x = 0);
            self.stamp = 1;
        }
        while i < self.items.len() {
            let it = self.items[i];
            i += 1;
            match g.syms[it.pos as usize] {
                Sym::Lex(l) => {
                    if g.lexemes[l.ix()].accepting(it.state) {
                        let p = it.pos + 1;
                        self.add(Item {
                            pos: p,
                            origin: it.origin,
                            state: entry_state(g, p),
                        })?;
                    }
                }
                Sym::Rule(r) => {
                    if self.predicted[r.ix()] != self.stamp {
                        self.predicted[r.ix()] = self.stamp;
                        for &a in &g.rule_alts[r.ix()] {
                            let it = Item {
                                pos: a,
                                origin: k,
                                state: entry_state(g, a),
                            };
                            self.push_predicted(it)?;
                        }
                    }
                    if g.rule_nullable[r.ix()] {
                        let p = it.pos + 1;
                        self.add(Item {
                            pos: p,
                            origin: it.origin,
                            state: entry_state(g, p),
                        })?;
                    }
                }
                Sym::End(r) => {
                    if let Some(c) = &g.rule_check[r.ix()] {
                        let o = if it.origin == ROOT {
                            0
                        } else {
                            it.origin as usize
                        };
                        self.checks += 1;
                        let ok = c.0.accepts(&self.bytes[o..k as usize]);
                        self.log.push(ok);
                        if !ok {
                            let f = Failed {
                                start: o as u32,
                                end: k,
                                check: c.clone(),
                            };
                            self.fails.push(f.clone());
                            self.failed = Some(f);
                            continue;
                        }
                    }
                    if it.origin == ROOT {
                        if r == g.root {
                            accepting = true;
                        }
                    } else if it.origin != k {
                        let o = it.origin as usize;
                        let s = self.sets[o].start as usize;
                        let e = self.sets[o + 1].start as usize;
                        if e - s < INDEXED_COMPLETION {
                            for j in s..e {
                                let p = self.items[j];
                                if g.syms[p.pos as usize] == Sym::Rule(r) {
                                    let np = p.pos + 1;
                                    self.add(Item {
                                        pos: np,
                                        origin: p.origin,
                                        state: entry_state(g, np),
                                    })?;
                                }
                            }
                        } else {
                            // A big origin set: its waiting items by rule (built once per
                            // set, kept until it is rolled back; a set below the top never
                            // changes), instead of a scan of the whole set per completion.
                            // Only a closed set has items of its own origin (predictions),
                            // so the index is never of a set the closure may still grow.
                            debug_assert!(self.sets[o].closed);
                            let index = self.wait_index(g, o);
                            let from = index.partition_point(|x| x.0 < r);
                            let mut res = Ok(());
                            for &(_, j) in index[from..].iter().take_while(|x| x.0 == r) {
                                let p = self.items[j as usize];
                                let np = p.pos + 1;
                                res = self.add(Item {
                                    pos: np,
                                    origin: p.origin,
                                    state: entry_state(g, np),
                                });
                                if res.is_err() {
                                    break;
                                }
                            }
                            self.waits[o].index = Some(index);
                            res?;
                        }
                    }
                }
            }
        }
        let start = self.sets[k as usize].start as usize;
        let mut allowed = ByteSet::EMPTY;
        for it in &self.items[start..] {
            if let Sym::Lex(l) = g.syms[it.pos as usize] {
                allowed.union_with(g.lexemes[l.ix()].allowed(it.state));
            }
        }
        let info = &mut self.sets[k as usize];
        info.accepting = accepting;
        info.allowed = allowed;
        info.closed = true;
        info.checked = self.checks != checks;
        Ok(())
    }

    /// Marks a freshly scanned top set: closed already when no item's lexeme accepts (then
    /// closure has nothing to add), else open with an over-approximated `allowed`.
    fn finish_core(&mut self, g: &CompiledGrammar) {
        let k = self.top();
        let start = self.sets[k].start as usize;
        let mut allowed = ByteSet::EMPTY;
        let mut any_accepting = false;
        for it in &self.items[start..] {
            if let Sym::Lex(l) = g.syms[it.pos as usize] {
                let d = &g.lexemes[l.ix()];
                allowed.union_with(d.allowed(it.state));
                if d.accepting(it.state) {
                    any_accepting = true;
                    allowed.union_with(&g.lex_follow[it.pos as usize]);
                }
            }
        }
        let info = &mut self.sets[k];
        info.allowed = allowed;
        info.accepting = false;
        info.closed = !any_accepting;
    }

    /// Whether reading `b` from the (open) top set needs its closure: some item's lexeme
    /// accepts and `b` may follow it.
    fn needs_closure(&self, g: &CompiledGrammar, b: u8) -> bool {
        let k = self.top();
        self.set(k).iter().any(|it| match g.syms[it.pos as usize] {
            Sym::Lex(l) => {
                g.lexemes[l.ix()].accepting(it.state) && g.lex_follow[it.pos as usize].contains(b)
            }
            _ => false,
        })
    }

    /// Reads byte `b`, pushing a new set. Returns `Ok(false)` (and pushes nothing) when the
    /// byte cannot continue any parse.
    pub fn push_byte(&mut self, g: &CompiledGrammar, b: u8) -> Result<bool, MatchError> {
        if !self.top_info().allowed.contains(b) {
            return Ok(false);
        }
        if !self.top_info().closed && self.needs_closure(g, b) {
            self.close(g)?;
            if !self.top_info().allowed.contains(b) {
                return Ok(false);
            }
        }
        let k = self.top();
        let s = self.sets[k].start as usize;
        let e = self.items.len();
        let start = e as u32;
        self.sets.push(SetInfo {
            start,
            accepting: false,
            allowed: ByteSet::EMPTY,
            closed: false,
            core: 0,
            checked: false,
            log_mark: self.log.len() as u32,
        });
        if g.has_checks {
            self.bytes.push(b);
        }
        for i in s..e {
            let it = self.items[i];
            if let Sym::Lex(l) = g.syms[it.pos as usize] {
                let ns = g.lexemes[l.ix()].next(it.state, b);
                if ns != 0 {
                    if let Err(err) = self.add(Item {
                        pos: it.pos,
                        origin: it.origin,
                        state: ns,
                    }) {
                        self.pop();
                        return Err(err);
                    }
                }
            }
        }
        if self.items.len() == start as usize {
            self.pop();
            return Ok(false);
        }
        self.sets[k + 1].core = self.items.len() as u32 - start;
        self.finish_core(g);
        if g.has_checks && !self.top_info().closed && self.may_complete_checked(g, start as usize) {
            // A byte that completes a value whose check fails must be refused now: close
            // the set, and refuse the byte if nothing can follow and nothing is complete.
            if let Err(err) = self.close(g) {
                self.pop();
                return Err(err);
            }
            let info = self.top_info();
            if info.allowed.is_empty() && !info.accepting {
                self.pop();
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether closing the set whose core starts at item `start` may complete a checked
    /// rule: a lexeme that can end one (see `lex_check_sensitive`) is complete in it, or
    /// a checked rule derives the empty text. Elsewhere no check runs in its closure, and
    /// the set is closed when it is next needed rather than at once. Cost: one pass over
    /// the core.
    fn may_complete_checked(&self, g: &CompiledGrammar, start: usize) -> bool {
        g.nullable_check
            || self.items[start..].iter().any(|it| {
                g.lex_check_sensitive[it.pos as usize]
                    && match g.syms[it.pos as usize] {
                        Sym::Lex(l) => g.lexemes[l.ix()].accepting(it.state),
                        _ => true,
                    }
            })
    }

    /// Removes the top set.
    #[inline]
    pub fn pop(&mut self) {
        let s = self.sets.pop().unwrap();
        self.items.truncate(s.start as usize);
        self.log.truncate(s.log_mark as usize);
        self.forget_fails();
        self.forget_waits();
        self.bytes.truncate(self.sets.len().saturating_sub(1));
        self.dedup_start = usize::MAX;
        self.low_water = self.low_water.min(self.sets.len().saturating_sub(1));
    }

    /// Keeps sets `0..=k`.
    pub fn truncate(&mut self, k: usize) {
        if k + 1 < self.sets.len() {
            let s = self.sets[k + 1].start as usize;
            self.log.truncate(self.sets[k + 1].log_mark as usize);
            self.sets.truncate(k + 1);
            self.forget_fails();
            self.forget_waits();
            self.items.truncate(s);
            self.bytes.truncate(k);
            self.dedup_start = usize::MAX;
            self.low_water = self.low_water.min(k);
        }
    }

    /// Drops the failed checks of sets that are gone.
    #[inline]
    fn forget_fails(&mut self) {
        let top = self.top() as u32;
        while self.fails.last().is_some_and(|f| f.end > top) {
            self.fails.pop();
        }
    }

    /// The last semantic check that failed in the closure of a set after set `base` (up
    /// to the top): what [`Parser::failed`] holds after reading the text above `base`
    /// again from there, when those sets were kept instead (`crate::matching::complete` reuses the
    /// sets of a candidate's unchanged beginning). Cost: O(1) amortized over the sets.
    pub(crate) fn failed_within(&self, base: usize) -> Option<&Failed> {
        self.fails.last().filter(|f| f.end as usize > base)
    }

    /// Drops the waiting identities of sets that are gone.
    #[inline]
    fn forget_waits(&mut self) {
        if self.waits.len() > self.sets.len() {
            self.waits.truncate(self.sets.len());
        }
    }

    /// Starts a new low-water period (see [`Parser::low_water`]).
    pub fn reset_low_water(&mut self) {
        self.low_water = usize::MAX;
    }

    /// The identity of the top set (see [`crate::parse::states`]), which must be closed: its core
    /// items, each with the identity of what completing its rule reads at its origin
    /// ([`Parser::wait_id`]), plus the outcomes of the checks its closure ran. Cost: one
    /// interning, plus a scan of each origin set not asked about before.
    pub fn top_id(&mut self, g: &CompiledGrammar, st: &StateIds) -> u32 {
        debug_assert!(self.top_info().closed);
        let k = self.top();
        let info = self.sets[k];
        let s = info.start as usize;
        // The waiting identities first (they need `&mut self`), then the key.
        let mut waits = std::mem::take(&mut self.key);
        waits.clear();
        for i in s..s + info.core as usize {
            let it = self.items[i];
            let w = self.wait_id(g, st, it.origin, (g.pos_rule[it.pos as usize]).0);
            waits.push(w);
        }
        let mut key = Vec::with_capacity(1 + 3 * waits.len());
        key.push(KEY_CORE);
        for (it, &w) in self.items[s..s + info.core as usize].iter().zip(&waits) {
            key.extend_from_slice(&[it.pos, it.state, w]);
        }
        let mut id = st.intern(&key);
        // A closure that ran checks also depends on their outcomes.
        let outcomes = &self.log[info.log_mark as usize..];
        if !outcomes.is_empty() {
            key.clear();
            key.extend_from_slice(&[KEY_CLOSED, id, outcomes.len() as u32]);
            for chunk in outcomes.chunks(32) {
                let w = chunk
                    .iter()
                    .enumerate()
                    .fold(0u32, |w, (i, &b)| w | (b as u32) << i);
                key.push(w);
            }
            id = st.intern(&key);
        }
        self.key = waits;
        id
    }

    /// The identity of what completing rule `r` with origin `o` reads: the items of set `o`
    /// waiting for `r`, each with, in turn, what completing its own rule reads at its
    /// origin. Items predicted in `o` itself (origin `o`) refer to other rules of the same
    /// set, so the key lists the rules reached that way in order of discovery and refers
    /// to them by index (left recursion makes cycles). Earlier sets are asked first, with
    /// an explicit stack (nesting can be deep). [`WAIT_ROOT`] for the start rule's items.
    /// Cached per set and rule until the set is rolled back. Cost: a scan of set `o` per
    /// rule reached, once.
    fn wait_id(&mut self, g: &CompiledGrammar, st: &StateIds, o: u32, r: u32) -> u32 {
        if o == ROOT {
            return WAIT_ROOT;
        }
        let mut stack = vec![(o, r)];
        let mut rules: Vec<u32> = Vec::new();
        let mut rule_idx: FastMap<u32, u32> = FastMap::default();
        let mut key: Vec<u32> = Vec::new();
        let mut missing: Vec<(u32, u32)> = Vec::new();
        while let Some(&(o, r)) = stack.last() {
            if self.cached_wait(o, r).is_some() {
                stack.pop();
                continue;
            }
            let index = self.wait_index(g, o as usize);
            rules.clear();
            rules.push(r);
            rule_idx.clear();
            rule_idx.insert(r, 0);
            key.clear();
            key.push(KEY_WAIT);
            missing.clear();
            let mut i = 0;
            while i < rules.len() {
                let ri = rules[i];
                i += 1;
                let mark = key.len();
                key.extend_from_slice(&[ri, 0]);
                let from = index.partition_point(|x| x.0 < EarleyRuleId(ri));
                for &(_, j) in index[from..].iter().take_while(|x| x.0 == EarleyRuleId(ri)) {
                    let p = self.items[j as usize];
                    let pr = g.pos_rule[p.pos as usize];
                    let (tag, v) = if p.origin == ROOT {
                        (0, WAIT_ROOT)
                    } else if p.origin == o {
                        let next = rules.len() as u32;
                        let idx = *rule_idx.entry(pr.0).or_insert(next);
                        if idx == next {
                            rules.push(pr.0);
                        }
                        (1, idx)
                    } else {
                        match self.cached_wait(p.origin, pr.0) {
                            Some(w) => (0, w),
                            None => {
                                missing.push((p.origin, pr.0));
                                (0, 0)
                            }
                        }
                    };
                    key.extend_from_slice(&[p.pos, tag, v]);
                    key[mark + 1] += 1;
                }
            }
            self.waits[o as usize].index = Some(index);
            if missing.is_empty() {
                let id = st.intern(&key);
                self.waits[o as usize].ids.insert(r, id);
                stack.pop();
            } else {
                stack.extend_from_slice(&missing);
            }
        }
        self.cached_wait(o, r).unwrap_or(WAIT_ROOT)
    }

    /// A waiting identity computed before (see [`Parser::wait_id`]).
    #[inline]
    fn cached_wait(&self, o: u32, r: u32) -> Option<u32> {
        self.waits.get(o as usize)?.ids.get(&r).copied()
    }

    /// The index of set `o`'s waiting items (see [`Waits::index`]), taken out of its
    /// place (the caller puts it back). Cost: a scan and a sort of the set the first time.
    pub(crate) fn wait_index(&mut self, g: &CompiledGrammar, o: usize) -> Vec<(EarleyRuleId, u32)> {
        if self.waits.len() <= o {
            self.waits.resize_with(o + 1, Waits::default);
        }
        if let Some(index) = self.waits[o].index.take() {
            return index;
        }
        let (s, e) = self.set_range(o);
        let mut index: Vec<(EarleyRuleId, u32)> = (s..e)
            .filter_map(|j| match g.syms[self.items[j].pos as usize] {
                Sym::Rule(ri) => Some((ri, j as u32)),
                _ => None,
            })
            .collect();
        index.sort_unstable();
        index
    }

    /// The item index range of set `k`.
    #[inline]
    pub(crate) fn set_range(&self, k: usize) -> (usize, usize) {
        let s = self.sets[k].start as usize;
        let e = self
            .sets
            .get(k + 1)
            .map_or(self.items.len(), |x| x.start as usize);
        (s, e)
    }

    /// The core items of the top set (see [`SetInfo::core`]).
    #[inline]
    pub fn top_core(&self) -> &[Item] {
        let info = self.top_info();
        let s = info.start as usize;
        &self.items[s..s + info.core as usize]
    }
}

#[inline]
pub(crate) fn entry_state(g: &CompiledGrammar, pos: u32) -> u32 {
    match g.syms[pos as usize] {
        Sym::Lex(l) => g.lexemes[l.ix()].start(),
        _ => 0,
    }
}
