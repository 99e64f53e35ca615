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

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use crate::byteset::ByteSet;
use crate::compile::{CompiledGrammar, Sym};
use crate::error::MatchError;
use crate::states::{StateIds, KEY_CLOSED, KEY_CORE};

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

/// Maps and sets of small integer keys, with [`ItemHasher`].
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<ItemHasher>>;
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<ItemHasher>>;

/// A fast hasher for packed item keys.
#[derive(Default)]
pub(crate) struct ItemHasher(u64);
impl Hasher for ItemHasher {
    /// The state rotated so that its well-mixed high bits come first: a multiply
    /// spreads a key's low bits upward only, and the table indexes buckets by the low
    /// bits, so without the rotation keys that differ only above bit 14 (boundary-walk
    /// transitions of nodes 64 apart, with the same byte) shared a bucket position.
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0.rotate_left(23) ^ i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(23) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

const LINEAR_DEDUP: usize = 24;

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
    bytes: Vec<u8>,
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
    /// The identities of sets `0..ids.len()` (see [`crate::states`]), computed on demand.
    ids: Vec<u32>,
    /// Scratch for identity keys.
    key: Vec<u32>,
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
            ids: Vec::new(),
            key: Vec::new(),
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
        for &a in &g.rule_alts[g.root as usize] {
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
            if n >= self.max_items {
                return Err(MatchError::Budget {
                    what: "parser items in one step",
                    value: n + 1,
                    limit: self.max_items,
                });
            }
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
        while i < self.items.len() {
            let it = self.items[i];
            i += 1;
            match g.syms[it.pos as usize] {
                Sym::Lex(l) => {
                    if g.lexemes[l as usize].accepting(it.state) {
                        let p = it.pos + 1;
                        self.add(Item {
                            pos: p,
                            origin: it.origin,
                            state: entry_state(g, p),
                        })?;
                    }
                }
                Sym::Rule(r) => {
                    for &a in &g.rule_alts[r as usize] {
                        self.add(Item {
                            pos: a,
                            origin: k,
                            state: entry_state(g, a),
                        })?;
                    }
                    if g.rule_nullable[r as usize] {
                        let p = it.pos + 1;
                        self.add(Item {
                            pos: p,
                            origin: it.origin,
                            state: entry_state(g, p),
                        })?;
                    }
                }
                Sym::End(r) => {
                    if let Some(c) = &g.rule_check[r as usize] {
                        let o = if it.origin == ROOT {
                            0
                        } else {
                            it.origin as usize
                        };
                        self.checks += 1;
                        let ok = c.0.accepts(&self.bytes[o..k as usize]);
                        self.log.push(ok);
                        if !ok {
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
                    }
                }
            }
        }
        let start = self.sets[k as usize].start as usize;
        let mut allowed = ByteSet::EMPTY;
        for it in &self.items[start..] {
            if let Sym::Lex(l) = g.syms[it.pos as usize] {
                allowed.union_with(g.lexemes[l as usize].allowed(it.state));
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
                let d = &g.lexemes[l as usize];
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
                g.lexemes[l as usize].accepting(it.state)
                    && g.lex_follow[it.pos as usize].contains(b)
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
                let ns = g.lexemes[l as usize].next(it.state, b);
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
        if g.has_checks && !self.top_info().closed {
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

    /// Removes the top set.
    #[inline]
    pub fn pop(&mut self) {
        let s = self.sets.pop().unwrap();
        self.items.truncate(s.start as usize);
        self.log.truncate(s.log_mark as usize);
        self.forget_open_top_id();
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
            self.forget_open_top_id();
            self.items.truncate(s);
            self.bytes.truncate(k);
            self.dedup_start = usize::MAX;
            self.low_water = self.low_water.min(k);
        }
    }

    /// Keeps the identities of the sets below the top, and the top's only if it is closed:
    /// an open set's identity is its core's, and closing it may run checks that change it.
    fn forget_open_top_id(&mut self) {
        let keep = self.sets.len() - !self.top_info().closed as usize;
        self.ids.truncate(keep);
    }

    /// Starts a new low-water period (see [`Parser::low_water`]).
    pub fn reset_low_water(&mut self) {
        self.low_water = usize::MAX;
    }

    /// The identity of the top set (see [`crate::states`]), which must be closed. Computes
    /// the identities of the sets below it first, in order, where they are not known yet
    /// (each depends on those its items' origins point at). Cost: one interning per set not
    /// met before by this parser (a hash and a lookup of its core).
    pub fn top_id(&mut self, st: &StateIds) -> u32 {
        debug_assert!(self.top_info().closed);
        while self.ids.len() < self.sets.len() {
            let k = self.ids.len();
            let info = self.sets[k];
            let s = info.start as usize;
            self.key.clear();
            self.key.push(KEY_CORE);
            for it in &self.items[s..s + info.core as usize] {
                // An origin points at a set closed before this one was pushed (items get
                // a set as their origin only by prediction in its closure).
                let o = if it.origin == ROOT {
                    u32::MAX
                } else {
                    self.ids[it.origin as usize]
                };
                self.key.extend_from_slice(&[it.pos, it.state, o]);
            }
            let mut id = st.intern(&self.key);
            // A closure that ran checks also depends on their outcomes. (A set below the
            // top that was never closed has no predicted items: no origin points at it.)
            let end = self
                .sets
                .get(k + 1)
                .map_or(self.log.len(), |x| x.log_mark as usize);
            let outcomes = &self.log[info.log_mark as usize..end];
            if !outcomes.is_empty() {
                self.key.clear();
                self.key
                    .extend_from_slice(&[KEY_CLOSED, id, outcomes.len() as u32]);
                for chunk in outcomes.chunks(32) {
                    let w = chunk
                        .iter()
                        .enumerate()
                        .fold(0u32, |w, (i, &b)| w | (b as u32) << i);
                    self.key.push(w);
                }
                id = st.intern(&self.key);
            }
            self.ids.push(id);
        }
        self.ids[self.sets.len() - 1]
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
        Sym::Lex(l) => g.lexemes[l as usize].start(),
        _ => 0,
    }
}
