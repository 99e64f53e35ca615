//! The table store: every token table of one engine (one vocabulary), and what lets a
//! new table come from an old one.
//!
//! A [`Tables`] holds the lazily built tables of one lexeme's states. The store keeps
//! one per lexeme met (keyed by the lexeme, which it holds, so an address is never
//! reused while it is a key), so that every grammar using a lexeme (a JSON string, an
//! integer, whitespace) shares its tables; and it keeps the registries that let a first
//! use find an equal table elsewhere instead of walking the trie:
//!
//! * the **hot** list: recent expensive tables (allowing much of the vocabulary), which a
//!   state of any lexeme may prove itself equivalent to and share;
//! * the **classes**: per item lexeme of a counted lexeme, the table with the most room,
//!   from which tables with less room derive (see `PlainReach::bound_from`);
//! * the **tail memos**: for key complements, which tail states are equivalent to which
//!   string states (see `derive_key_complement`).
//!
//! Bounds: the store is generational, like the lexeme cache. Lexemes bound since the
//! last turn are *young*; a young lexeme met again stays young, an old one met again
//! moves back. When the young generation reaches half the lexeme bound, or the table
//! bytes built since the last turn reach half the byte bound, the old generation is
//! dropped (its tables freed once no live constraint holds them), the young becomes old,
//! and the registries start again empty. What the store itself keeps alive is thus at
//! most about the bounds; tables that live constraints use stay with those constraints
//! until they are dropped.
//!
//! Owns: the per-lexeme [`Tables`], the registries, the build counters and the table
//! check (see [`Store::set_verify`]). Uses: the lexeme automata and the vocabulary trie.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::{join_adjacent, Accept, StateTokens, Tables, TailEq, TokenSet};
use crate::compile::{Dfa, Lexeme};
use crate::vocab::TokenTrie;

/// Bounds of a table store (see [`crate::EngineConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Lexemes whose tables are kept, both generations together.
    pub lexemes: usize,
    /// Bytes of tables built, both generations together.
    pub bytes: usize,
}

/// A registered expensive table: the lexeme, the state, its table.
pub(super) struct Hot {
    pub lexeme: Arc<Lexeme>,
    pub state: u32,
    pub table: Arc<StateTokens>,
    /// [`super::signature`] of the state over [`super::SIGNATURE_ROUNDS`] bytes (or the
    /// vocabulary's longest token, if shorter); `None` when it gave up.
    pub signature: Option<u64>,
    /// `PlainReach::safe_key` of the state on JSON string text.
    pub safe: Option<usize>,
}

/// Per item lexeme (by address, kept alive here): the table of a state between the items
/// of a counted lexeme that reads plain text one character per item
/// ([`Dfa::plain_item_room`]), the one with the most items left met so far, and that
/// number. Every such state with the same item and no more left derives its table from it
/// (`PlainReach::bound_from`), in any lexeme whose item is the same (cached) lexeme: the
/// counts of one string after its first table, and the `maxLength`s of one `pattern`
/// class, whose first tables each cost a walk otherwise.
pub(super) type Classes = HashMap<usize, (usize, Arc<Lexeme>, Arc<StateTokens>)>;

/// Entries of [`Classes`] at most (then it starts again empty).
pub(super) const MAX_CLASSES: usize = 256;

/// The [`TailEq`] of each (tail, string) met, by the lexemes' addresses (both kept alive
/// here, so an address is not reused while it is a key).
pub(super) type TailMemos = HashMap<(usize, usize), (Arc<Lexeme>, Arc<Lexeme>, TailEq)>;

/// Entries of [`TailMemos`] at most (then it starts again empty): one per set of string
/// characters in practice.
pub(super) const MAX_TAIL_MEMOS: usize = 64;

/// Registered states (most recent first).
pub(super) const MAX_HOT: usize = 12;

/// Mismatches kept for [`Store::checks`] (the count goes on).
const MAX_MISMATCHES_KEPT: usize = 16;

/// The two generations of per-lexeme tables.
#[derive(Default)]
struct Generations {
    young: HashMap<usize, (Arc<Lexeme>, Arc<Tables>)>,
    old: HashMap<usize, (Arc<Lexeme>, Arc<Tables>)>,
    turns: usize,
}

/// Every token table of one vocabulary (see the module docs). `Send + Sync`: each part is
/// behind its own lock or atomic, held for a lookup or an insert, never during a walk.
pub(crate) struct Store {
    /// The vocabulary's longest token in bytes.
    depth: usize,
    bounds: Bounds,
    generations: Mutex<Generations>,
    /// Bytes of tables built (or brought back by moves) since the last turn.
    young_bytes: AtomicUsize,
    pub(super) hot: Mutex<Vec<Arc<Hot>>>,
    pub(super) classes: Mutex<Classes>,
    pub(super) tail_memos: Mutex<TailMemos>,
    /// Tables computed (not shared), and the nanoseconds spent in first uses.
    builds: AtomicUsize,
    nanos: AtomicU64,
    /// Whether first uses check their tables against [`reference_table`], how many they
    /// checked, how many differed, and a description of the first few that did.
    verify: AtomicBool,
    verified: AtomicUsize,
    mismatched: AtomicUsize,
    mismatches: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({} lexemes)", self.lexemes())
    }
}

/// Locks `m`, going on after a panic elsewhere (every structure here stays consistent
/// between its statements).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Store {
    /// An empty store for a vocabulary whose longest token is `depth` bytes.
    pub fn new(depth: usize, bounds: Bounds) -> Store {
        Store {
            depth,
            bounds,
            generations: Mutex::new(Generations::default()),
            young_bytes: AtomicUsize::new(0),
            hot: Mutex::new(Vec::new()),
            classes: Mutex::new(HashMap::new()),
            tail_memos: Mutex::new(HashMap::new()),
            builds: AtomicUsize::new(0),
            nanos: AtomicU64::new(0),
            verify: AtomicBool::new(false),
            verified: AtomicUsize::new(0),
            mismatched: AtomicUsize::new(0),
            mismatches: Mutex::new(Vec::new()),
        }
    }

    /// The tables of `lexeme`'s states: the store's, or new empty ones (the store turning
    /// a generation first when the young one is full). For a literal chain, its states
    /// past the literal take the tables of the lexeme after it. Cost: a lock and a hash
    /// lookup; on a miss, O(states) for the empty slots.
    pub fn tables_for(&self, lexeme: &Arc<Lexeme>) -> Arc<Tables> {
        let key = Arc::as_ptr(lexeme) as usize;
        if let Some((_, t)) = lock(&self.generations).young.get(&key) {
            return t.clone();
        }
        let rest = lexeme
            .chain_rest()
            .map(|(r, l)| (r.clone(), self.tables_for(r), l));
        let mut g = lock(&self.generations);
        if let Some((_, t)) = g.young.get(&key) {
            return t.clone();
        }
        let entry = match g.old.remove(&key) {
            // Brought back with the tables built for it while it was old.
            Some(e) => {
                self.young_bytes.fetch_add(e.1.memory(), Relaxed);
                e
            }
            None => {
                let t = Tables::new(lexeme.table_slots(self.depth), self.depth, rest);
                (lexeme.clone(), Arc::new(t))
            }
        };
        if g.young.len() >= self.bounds.lexemes / 2
            || self.young_bytes.load(Relaxed) > self.bounds.bytes / 2
        {
            self.turn(&mut g);
        }
        let t = entry.1.clone();
        g.young.insert(key, entry);
        t
    }

    /// Drops the old generation (on a helper thread: thousands of tables), makes the
    /// young one old, and empties the registries.
    fn turn(&self, g: &mut Generations) {
        let old = std::mem::replace(&mut g.old, std::mem::take(&mut g.young));
        crate::compile::cache::free_elsewhere(old);
        g.turns += 1;
        self.young_bytes.store(0, Relaxed);
        self.clear_registries();
    }

    fn clear_registries(&self) {
        lock(&self.hot).clear();
        lock(&self.classes).clear();
        lock(&self.tail_memos).clear();
    }

    /// Drops every table the store keeps (live constraints keep theirs). Cost: the frees,
    /// on a helper thread.
    pub fn clear(&self) {
        let mut g = lock(&self.generations);
        let young = std::mem::take(&mut g.young);
        let old = std::mem::take(&mut g.old);
        crate::compile::cache::free_elsewhere((young, old));
        self.young_bytes.store(0, Relaxed);
        self.clear_registries();
    }

    /// Lexemes whose tables the store keeps. Cost: a lock.
    pub fn lexemes(&self) -> usize {
        let g = lock(&self.generations);
        g.young.len() + g.old.len()
    }

    /// Heap bytes of the tables the store keeps (a table shared between states or
    /// lexemes counted once). Cost: a lock and O(states) over every kept lexeme.
    pub fn memory(&self) -> usize {
        let g = lock(&self.generations);
        let mut seen = crate::util::FastSet::default();
        g.young
            .values()
            .chain(g.old.values())
            .map(|(_, t)| t.memory_unique(&mut seen))
            .sum()
    }

    /// Generations turned so far.
    pub fn turns(&self) -> usize {
        lock(&self.generations).turns
    }

    /// Counts a table built: `bytes` more toward the young generation's bound, and the
    /// build. Cost: two atomic adds.
    pub(super) fn count_build(&self, bytes: usize) {
        self.builds.fetch_add(1, Relaxed);
        self.young_bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts `bytes` more toward the young generation's bound (memos grown).
    pub(super) fn count_bytes(&self, bytes: usize) {
        self.young_bytes.fetch_add(bytes, Relaxed);
    }

    /// Tables computed (tables found equal to an existing one and shared are not
    /// counted) and the time spent in first uses, sharing checks included.
    pub fn build_totals(&self) -> (usize, std::time::Duration) {
        (
            self.builds.load(Relaxed),
            std::time::Duration::from_nanos(self.nanos.load(Relaxed)),
        )
    }

    /// Records a first use that took `took`, and when the check is on, compares its table
    /// `t` with the table by definition of `state` of `lexeme`.
    pub(super) fn after_first_use(
        &self,
        took: std::time::Duration,
        (lexeme, state): (&Lexeme, u32),
        t: &StateTokens,
        trie: &TokenTrie,
        vocab_len: usize,
    ) {
        let ns = took.as_nanos().min(u64::MAX as u128) as u64;
        self.nanos.fetch_add(ns, Relaxed);
        if !self.verify.load(Relaxed) {
            return;
        }
        let r = reference_table(lexeme, state, trie, vocab_len);
        self.verified.fetch_add(1, Relaxed);
        if !same_decisions(t, &r, vocab_len) {
            self.mismatched.fetch_add(1, Relaxed);
            let mut m = lock(&self.mismatches);
            if m.len() < MAX_MISMATCHES_KEPT {
                m.push(format!(
                    "state {state} of lexeme {:?} ({} states)",
                    lexeme.name().unwrap_or_default(),
                    lexeme.num_states()
                ));
            }
        }
    }

    /// Switches the check of every table a first use computes or shares against the
    /// table by definition (see [`crate::Engine::verify_tables`]).
    pub fn set_verify(&self, on: bool) {
        self.verify.store(on, Relaxed);
    }

    /// Tables checked, how many differed, and the first few that did.
    pub fn checks(&self) -> (usize, usize, Vec<String>) {
        (
            self.verified.load(Relaxed),
            self.mismatched.load(Relaxed),
            lock(&self.mismatches).clone(),
        )
    }
}

/// Whether two tables decide the same: the same accepted and final tokens, and the same
/// uncertain trie nodes (however the ranges are cut). Cost: O(vocabulary / 32 + tokens +
/// ranges).
fn same_decisions(a: &StateTokens, b: &StateTokens, vocab_len: usize) -> bool {
    let bits = |t: &TokenSet| {
        let mut m = vec![0u32; vocab_len.div_ceil(32)];
        t.or_into(&mut m);
        m
    };
    let ranges = |u: &[(u32, u32)]| {
        let mut v = u.to_vec();
        v.sort_unstable();
        join_adjacent(&mut v);
        v
    };
    let finals = |f: &[u32]| {
        let mut f = f.to_vec();
        f.sort_unstable();
        f
    };
    bits(&a.accept) == bits(&b.accept)
        && ranges(&a.uncertain) == ranges(&b.uncertain)
        && finals(&a.finals) == finals(&b.finals)
}

/// The table of `s0` by the definition, with none of the walk's shortcuts: one pass over
/// the trie in node order, a DFA step per node whose parent is alive (the parent is the
/// last node read one level up), a dead node's subtree skipped, uncertain when the lexeme
/// accepted at a proper prefix of its path. The oracle [`Store::set_verify`] checks every
/// computed or shared table against. Cost: a step per live node, up to the whole trie
/// (docs/PERFORMANCE.md has its cost on MaskBench).
pub(crate) fn reference_table(
    dfa: &Dfa,
    s0: u32,
    trie: &TokenTrie,
    vocab_len: usize,
) -> StateTokens {
    // The state and whether the lexeme accepted on the way, per depth of the current path.
    let mut path: Vec<(u32, bool)> = vec![(0, false); trie.max_depth() + 2];
    path[0] = (s0, false);
    let mut accept = Accept::new(vocab_len);
    let mut uncertain = Vec::new();
    let mut finals = Vec::new();
    let total = trie.len() as u32;
    let mut n = 1;
    while n < total {
        let d = trie.depth(n);
        let (ps, pex) = path[d - 1];
        let t = dfa.next(ps, trie.byte(n));
        if t == 0 {
            if pex {
                uncertain.push((n, trie.end(n)));
            }
            n = trie.end(n);
            continue;
        }
        let toks = trie.tokens_at(n);
        if !toks.is_empty() {
            accept.add(toks);
        }
        let acc = dfa.accepting(t);
        if acc && dfa.allowed(t).is_empty() {
            finals.extend_from_slice(toks);
        }
        path[d] = (t, pex || acc);
        n += 1;
    }
    // Adjacent ranges as one, as the walk gives them (one range per refused node here).
    join_adjacent(&mut uncertain);
    StateTokens {
        accept: accept.finish(),
        uncertain,
        finals,
    }
}
