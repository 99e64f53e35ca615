//! Lexeme automata: byte-level DFAs in the engine's own table.
//!
//! `regex-automata` compiles a lexeme's regex to a Thompson NFA; [`crate::compile::subset`]
//! determinizes it (with budgets that turn pathological regexes into errors instead of
//! hangs) straight into this table:
//!
//! * state 0 is the single dead state, and every state that cannot reach a match is that
//!   state (so "alive" really means "this prefix can still complete the lexeme", which is
//!   what makes masks exact);
//! * `accepting[s]`: the bytes read so far form a complete lexeme;
//! * `allowed[s]`: the bytes that keep the lexeme alive, for O(1) pruning during trie walks;
//! * byte equivalence classes, so the table is `states × classes` words.
//!
//! The tests check the subset construction against regex-automata's dense builder as
//! the oracle (`subset_construction_equals_dense_dfa`).
//!
//! Owns: `Dfa` and `Lexeme` (a DFA with what is computed from it alone: distances, a name,
//! a key complement's base). Uses: the subset construction, composition, counted lexemes
//! and the compile caches of its siblings; nothing of vocabularies or token tables.

use std::sync::{Arc, OnceLock};

use super::counted::Counted;
use crate::byteset::ByteSet;

/// Why a lexeme could not be built.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DfaError {
    /// A size limit was hit (the caller may fall back to structural lowering). `cost`
    /// is the attempt's work in state-equivalents, charged to the grammar's DFA budget:
    /// `max_states` for a full-budget attempt, proportionally less for an attempt whose
    /// budget was scaled down for a large NFA.
    TooBig {
        /// Work charged, in DFA states.
        cost: usize,
    },
    /// The compile deadline passed during the attempt (not cached: it says nothing about
    /// the regex).
    Deadline,
}

/// A byte-level DFA for one lexeme. Cost of `next`: two table loads.
#[derive(Debug, Clone)]
pub struct Dfa {
    classes: [u8; 256],
    stride: usize,
    trans: Vec<u32>,
    accepting: Vec<bool>,
    allowed: Vec<ByteSet>,
    start: u32,
    /// A counted lexeme or a literal chain in front of a cached lexeme: the tables above
    /// (but `classes`) are then empty and every query goes to it.
    special: Special,
}

/// What a [`Dfa`] is when it is not one flat table.
#[derive(Debug, Clone)]
enum Special {
    /// One table (`trans`, `accepting`, `allowed`).
    Flat,
    /// A counted lexeme (see [`super::counted`]).
    Counted(Box<Counted>),
    /// A literal in front of a cached lexeme (see [`Chain`]).
    Chain(Box<Chain>),
}

/// The literal `lit` in front of the lexeme `rest`, without copying `rest`'s table (see
/// [`Dfa::prepend_literal`]): state 0 is dead, state `1 + i` reads `lit[i]`, and `rest`'s
/// live states follow, moved up by `lit.len()`. Cost of `next`: a compare in the chain,
/// `rest`'s `next` after it.
#[derive(Debug, Clone)]
struct Chain {
    lit: Box<[u8]>,
    /// Per chain state, its one byte.
    allowed: Box<[ByteSet]>,
    rest: Arc<Lexeme>,
}

impl Chain {
    #[inline]
    fn moved(&self, s: u32) -> u32 {
        if s == 0 {
            0
        } else {
            s + self.lit.len() as u32
        }
    }

    #[inline]
    fn next(&self, s: u32, b: u8) -> u32 {
        let l = self.lit.len() as u32;
        if s == 0 {
            0
        } else if s <= l {
            if self.lit[s as usize - 1] != b {
                0
            } else if s < l {
                s + 1
            } else {
                self.moved(self.rest.start())
            }
        } else {
            self.moved(self.rest.next(s - l, b))
        }
    }

    #[inline]
    fn accepting(&self, s: u32) -> bool {
        let l = self.lit.len() as u32;
        s > l && self.rest.accepting(s - l)
    }

    #[inline]
    fn allowed(&self, s: u32) -> &ByteSet {
        let l = self.lit.len() as u32;
        if s == 0 {
            &ByteSet::EMPTY
        } else if s <= l {
            &self.allowed[s as usize - 1]
        } else {
            self.rest.allowed(s - l)
        }
    }
}

impl Dfa {
    /// Whether the automaton counts repetitions (then its state ids encode counts and may
    /// stand for several counts; see [`Dfa::canonical`]). Cost: O(1).
    pub(crate) fn has_counts(&self) -> bool {
        matches!(self.special, Special::Counted(_))
    }

    /// Whether the automaton is one table (neither counted nor a literal chain).
    pub(crate) fn is_flat(&self) -> bool {
        matches!(self.special, Special::Flat)
    }

    /// The counted lexeme this automaton is, if it is one.
    #[cfg(test)]
    pub(super) fn counted_part(&self) -> Option<&Counted> {
        match &self.special {
            Special::Counted(c) => Some(c),
            _ => None,
        }
    }

    /// The counted lexeme `p x{min,max} s` (see [`super::counted`]), or `None` when its
    /// conditions do not hold. Cost: O(states of the parts).
    pub(crate) fn counted(
        p: Option<Arc<Lexeme>>,
        x: Arc<Lexeme>,
        min: u32,
        max: Option<u32>,
        s: Option<Arc<Lexeme>>,
    ) -> Option<Dfa> {
        let c = Counted::new(p, x, min, max, s)?;
        Some(Dfa {
            classes: c.classes(),
            stride: 0,
            trans: Vec::new(),
            accepting: Vec::new(),
            allowed: Vec::new(),
            start: c.start(),
            special: Special::Counted(Box::new(c)),
        })
    }

    /// Number of token-table slots for a vocabulary whose tokens are at most `depth` bytes
    /// (the number of states, except for counted lexemes, whose far-from-the-bounds counts
    /// share slots).
    pub(crate) fn table_slots(&self, depth: usize) -> usize {
        match &self.special {
            Special::Counted(c) => c.table_slots(depth),
            // The chain's own states (past them, `rest`'s tables answer).
            Special::Chain(c) => c.lit.len() + 1,
            Special::Flat => self.num_states(),
        }
    }

    /// The token-table slot of state `s` (see [`Dfa::table_slots`]).
    #[inline]
    pub(crate) fn table_slot(&self, s: u32, depth: usize) -> usize {
        match &self.special {
            Special::Counted(c) => c.table_slot(s, depth),
            _ => s as usize,
        }
    }

    /// The DFA of the literal `lit` followed by the language of `rest`: a chain of
    /// `lit.len()` states in front of `rest`, shared, not copied (see [`Chain`]); its byte
    /// classes are `rest`'s split at the literal's bytes (still intervals in increasing
    /// order). The language is exactly the concatenation; the states are `rest`'s plus the
    /// chain (not minimized, like every lexeme DFA). `rest` may be one table or a counted
    /// lexeme (a `maxLength` string behind its key: then every key shares the counted
    /// lexeme and its token tables). `None` for an empty literal, another `rest` (a
    /// chain), an empty `rest` language, or a result past `max_states` states or, for a
    /// table, past `max_bytes` for the table a copy would take (so the same lexemes are
    /// built as when it was copied).
    ///
    /// Cost: O(`lit.len()` + 256), with no NFA, no subset construction and no copy. This
    /// is how a property's key lexeme (`"name"` then the colon and whitespace that every
    /// key of a schema shares, one cached DFA) is built: through the NFA it took about 46
    /// µs per key, a fifth of all compile time on a 566-file MaskBench sample (17 µs with a
    /// copy of `rest`'s table, the cache lookups included; the copies, with their wider
    /// byte classes, were 8% of compile time, half of it page faults).
    pub(crate) fn prepend_literal(
        lit: &[u8],
        rest: &Arc<Lexeme>,
        max_states: usize,
        max_bytes: usize,
    ) -> Option<Dfa> {
        let counted = matches!(rest.special, Special::Counted(_));
        if lit.is_empty() || !(counted || matches!(rest.special, Special::Flat)) || rest.start == 0
        {
            return None;
        }
        let mut in_lit = [false; 256];
        for &b in lit {
            in_lit[b as usize] = true;
        }
        // Classes: runs of bytes with the same class in `rest` and, for a byte of the
        // literal, that very byte (bytes of one class must behave alike in every state,
        // the chain's included).
        let mut classes = [0u8; 256];
        let mut last = None;
        let mut n_classes = 0usize;
        for b in 0..=255u8 {
            let cell = (rest.classes[b as usize], in_lit[b as usize].then_some(b));
            if last != Some(cell) {
                last = Some(cell);
                n_classes += 1;
            }
            classes[b as usize] = (n_classes - 1) as u8;
        }
        let l = lit.len();
        let n = l.checked_add(rest.num_states())?;
        // The limits of the table a copy would have had, so that the same lexemes are
        // built either way. A counted `rest` has no table (its states are computed): only
        // the state numbers must fit.
        if counted {
            if n >= u32::MAX as usize || l > max_states {
                return None;
            }
        } else if n > max_states || n.saturating_mul(n_classes).saturating_mul(4) > max_bytes {
            return None;
        }
        let allowed = lit
            .iter()
            .map(|&b| {
                let mut a = ByteSet::EMPTY;
                a.insert(b);
                a
            })
            .collect();
        Some(Dfa {
            classes,
            stride: 0,
            trans: Vec::new(),
            accepting: Vec::new(),
            allowed: Vec::new(),
            start: 1,
            special: Special::Chain(Box::new(Chain {
                lit: lit.into(),
                allowed,
                rest: rest.clone(),
            })),
        })
    }

    /// The DFA of a complete table (state 0 dead, every other state able to reach an
    /// accepting one): computes the allowed bytes of each state. Cost: O(states x classes).
    pub(crate) fn from_subset(d: crate::compile::subset::Subset) -> Dfa {
        let n = d.accepting.len();
        // `allowed` is the union of the live classes' byte sets (a union of 32-byte words
        // per live class; inserting the bytes one by one was most of this function's time).
        let mut class_bytes = vec![ByteSet::EMPTY; d.stride];
        for b in 0..=255u8 {
            class_bytes[d.classes[b as usize] as usize].insert(b);
        }
        let mut allowed = vec![ByteSet::EMPTY; n];
        for (s, a) in allowed.iter_mut().enumerate() {
            let row = &d.trans[s * d.stride..(s + 1) * d.stride];
            for (c, &t) in row.iter().enumerate() {
                if t != 0 {
                    a.union_with(&class_bytes[c]);
                }
            }
        }
        Dfa {
            classes: d.classes,
            stride: d.stride,
            trans: d.trans,
            accepting: d.accepting,
            allowed,
            start: d.start,
            special: Special::Flat,
        }
    }

    /// A state that behaves like `s` on every byte string of at most `r` bytes (see
    /// [`Counted::canonical`]); `s` itself except for counted lexemes. Cost: O(1).
    #[inline]
    pub(crate) fn canonical(&self, s: u32, r: usize) -> u32 {
        match &self.special {
            Special::Counted(c) => c.canonical(s, r),
            _ => s,
        }
    }

    /// For a counted lexeme whose items are plain characters, the item lexeme and the
    /// items left to state `s` (see [`Counted::plain_item_room`]); `None` for other
    /// automata. Cost: O(1) after a first check per lexeme.
    pub(crate) fn plain_item_room(
        &self,
        s: u32,
        max_depth: usize,
    ) -> Option<(&Arc<Lexeme>, usize)> {
        match &self.special {
            Special::Counted(c) => c.plain_item_room(s, max_depth),
            _ => None,
        }
    }

    /// For a counted lexeme's state between items, how many more items it may take
    /// (`usize::MAX` when unbounded; see [`Counted::items_left`]); `None` for other states
    /// and automata. Cost: O(1).
    #[inline]
    pub(crate) fn items_left(&self, s: u32) -> Option<usize> {
        match &self.special {
            Special::Counted(c) => c.items_left(s),
            _ => None,
        }
    }

    /// For a counted lexeme, the bytes that are a whole item alone (see
    /// [`Counted::one_byte_items`]); `None` for other automata. Cost: 256 steps.
    pub(crate) fn one_byte_items(&self) -> Option<ByteSet> {
        match &self.special {
            Special::Counted(c) => Some(c.one_byte_items()),
            _ => None,
        }
    }

    /// For a counted lexeme, whether `bytes` is one whole item (see
    /// [`Counted::whole_item`]); `false` for other automata. Cost: a step per byte.
    pub(crate) fn whole_item(&self, bytes: &[u8]) -> bool {
        match &self.special {
            Special::Counted(c) => c.whole_item(bytes),
            _ => false,
        }
    }

    /// A flat DFA's transition table, a row of `stride` entries per state (the first
    /// `classes` of them used: one per byte class); `None` for other automata. Cost: O(1).
    pub(crate) fn rows(&self) -> Option<(&[u32], usize, usize)> {
        match &self.special {
            Special::Flat => {
                let classes = self.classes.iter().map(|&c| c as usize).max().unwrap_or(0) + 1;
                Some((&self.trans, self.stride, classes.min(self.stride)))
            }
            _ => None,
        }
    }

    /// The byte class of `b` (bytes of one class behave alike in every state).
    #[inline(always)]
    pub(crate) fn class_of(&self, b: u8) -> u8 {
        self.classes[b as usize]
    }

    /// The state after reading `b` in state `s` (0 = dead).
    #[inline(always)]
    pub fn next(&self, s: u32, b: u8) -> u32 {
        match &self.special {
            Special::Flat => {
                self.trans[s as usize * self.stride + self.classes[b as usize] as usize]
            }
            Special::Counted(c) => c.next(s, b),
            Special::Chain(c) => c.next(s, b),
        }
    }

    /// Whether the bytes read so far form a whole lexeme.
    #[inline(always)]
    pub fn accepting(&self, s: u32) -> bool {
        match &self.special {
            Special::Flat => self.accepting[s as usize],
            Special::Counted(c) => c.accepting(s),
            Special::Chain(c) => c.accepting(s),
        }
    }

    /// The bytes that keep state `s` alive.
    #[inline(always)]
    pub fn allowed(&self, s: u32) -> &ByteSet {
        match &self.special {
            Special::Flat => &self.allowed[s as usize],
            Special::Counted(c) => c.allowed(s),
            Special::Chain(c) => c.allowed(s),
        }
    }

    /// The start state (0 when the lexeme's language is empty).
    #[inline(always)]
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Number of states, the dead state included (for a counted lexeme: the states its
    /// parts store, not the counts it tells apart).
    pub fn num_states(&self) -> usize {
        match &self.special {
            Special::Flat => self.accepting.len(),
            Special::Counted(c) => c.num_states(),
            Special::Chain(c) => c.lit.len() + c.rest.num_states(),
        }
    }

    /// Approximate heap size in bytes.
    pub fn memory(&self) -> usize {
        self.trans.len() * 4
            + self.accepting.len()
            + self.allowed.len() * 32
            + 256
            + match &self.special {
                Special::Flat => 0,
                Special::Counted(c) => c.memory(),
                // The chain only: `rest` is counted where it is cached.
                Special::Chain(c) => c.lit.len() * 33,
            }
    }
}

/// A lexeme DFA shared by every grammar that uses the same regular expression (through
/// an engine's compile cache, see [`crate::compile::cache`]), with what is computed on first use:
/// its distance table, its name for diagnostics, and for a key complement the string
/// lexeme its token tables derive from. It knows nothing of vocabularies: token tables
/// live in the engine's table store, keyed by lexeme.
#[derive(Debug)]
pub struct Lexeme {
    dfa: Dfa,
    /// The start of its regex as printed (at most [`NAME_BYTES`] bytes), for diagnostics,
    /// when it is cached under a structural key, which does not name it (see
    /// `Lowerer::lexeme_of`).
    name: OnceLock<String>,
    /// For a key complement built from its keys (see `super::keys`): the lexeme of any
    /// JSON string of the same characters, from whose table after the opening quote the
    /// tables of the complement's trie states are derived (see
    /// `crate::tables::derive_key_complement`), and the tail automaton it was built with.
    key_base: OnceLock<(Arc<Lexeme>, Arc<Lexeme>)>,
    /// Distances to the end, for a flat DFA (see [`super::dist`]; computed on first use).
    dist: OnceLock<super::dist::FlatDist>,
}

/// Bytes of a lexeme's printed regex kept as its name (diagnostics show 60 at most).
pub(crate) const NAME_BYTES: usize = 64;

impl std::ops::Deref for Lexeme {
    type Target = Dfa;
    fn deref(&self) -> &Dfa {
        &self.dfa
    }
}

impl Lexeme {
    /// A lexeme of `dfa` (not in any cache).
    pub(crate) fn new(dfa: Dfa) -> Arc<Lexeme> {
        Arc::new(Lexeme {
            dfa,
            name: OnceLock::new(),
            key_base: OnceLock::new(),
            dist: OnceLock::new(),
        })
    }

    /// The flat DFA's distance table (see [`super::dist`]), built on first use.
    fn flat_dist(&self) -> &super::dist::FlatDist {
        self.dist
            .get_or_init(|| super::dist::FlatDist::of(&self.dfa))
    }

    /// The fewest bytes from state `s` to a whole lexeme (0 when `s` accepts,
    /// [`super::dist::INF`] for the dead state). Cost: a load (a counted lexeme: a few),
    /// after a first search of O(states x byte classes) per flat DFA.
    pub(crate) fn dist(&self, s: u32) -> u32 {
        if s == 0 {
            return super::dist::INF;
        }
        match &self.dfa.special {
            Special::Flat => self
                .flat_dist()
                .dist
                .get(s as usize)
                .copied()
                .unwrap_or(super::dist::INF),
            Special::Counted(c) => c.dist(s),
            Special::Chain(c) => {
                let l = c.lit.len() as u32;
                if s <= l {
                    super::dist::add(l - s + 1, c.rest.dist(c.rest.start()))
                } else {
                    c.rest.dist(s - l)
                }
            }
        }
    }

    /// [`Lexeme::dist`] of the start state, without building the whole distance table
    /// of a flat DFA when it is not there yet (a forward breadth-first search that stops
    /// at the first accepting depth): the shortest derivations of a grammar ask it of
    /// every lexeme, and most are never entered. Cost: the states within that depth.
    pub(crate) fn start_dist(&self) -> u32 {
        let s0 = self.dfa.start();
        match &self.dfa.special {
            Special::Flat if self.dist.get().is_none() => {
                if s0 == 0 {
                    return super::dist::INF;
                }
                let mut seen = vec![false; self.dfa.num_states()];
                seen[s0 as usize] = true;
                let mut layer = vec![s0];
                let mut depth = 0u32;
                while !layer.is_empty() {
                    if layer.iter().any(|&q| self.dfa.accepting(q)) {
                        return depth;
                    }
                    let mut next = Vec::new();
                    for &q in &layer {
                        for b in self.dfa.allowed(q).iter() {
                            let t = self.dfa.next(q, b);
                            if t != 0 && !seen[t as usize] {
                                seen[t as usize] = true;
                                next.push(t);
                            }
                        }
                    }
                    layer = next;
                    depth += 1;
                }
                super::dist::INF
            }
            _ => self.dist(s0),
        }
    }

    /// The largest finite [`Lexeme::dist`] over the states: no token that stays inside
    /// the lexeme can leave more than this to read. Cost: as [`Lexeme::dist`].
    pub(crate) fn max_dist(&self) -> u32 {
        match &self.dfa.special {
            Special::Flat => self.flat_dist().max,
            Special::Counted(c) => c.max_dist(),
            Special::Chain(c) => {
                let l = c.lit.len() as u32;
                super::dist::add(l, c.rest.dist(c.rest.start())).max(c.rest.max_dist())
            }
        }
    }

    /// Every byte [`Lexeme::complete_into`] can write, from any state. Cost: as
    /// [`Lexeme::max_dist`].
    pub(crate) fn completion_bytes(&self) -> ByteSet {
        match &self.dfa.special {
            Special::Flat => self.flat_dist().bytes,
            Special::Counted(c) => c.completion_bytes(),
            Special::Chain(c) => {
                let mut b = c.rest.completion_bytes();
                for &x in c.lit.iter() {
                    b.insert(x);
                }
                b
            }
        }
    }

    /// Appends a shortest text from state `s` to a whole lexeme (nothing for the dead
    /// state). Cost: O(bytes appended), 256 steps per byte at worst.
    pub(crate) fn complete_into(&self, s: u32, out: &mut Vec<u8>) {
        if s == 0 {
            return;
        }
        match &self.dfa.special {
            Special::Flat => self.flat_dist().text(&self.dfa, s, out),
            Special::Counted(c) => c.complete_into(s, out),
            Special::Chain(c) => {
                let l = c.lit.len() as u32;
                if s <= l {
                    out.extend_from_slice(&c.lit[s as usize - 1..]);
                    c.rest.complete_into(c.rest.start(), out);
                } else {
                    c.rest.complete_into(s - l, out);
                }
            }
        }
    }

    /// For a key complement built from its keys, the lexeme of every JSON string of its
    /// characters and the tail automaton (`dev`) it was built with (see
    /// [`Lexeme::set_key_base`]). Cost: a load.
    pub(crate) fn key_base(&self) -> Option<&(Arc<Lexeme>, Arc<Lexeme>)> {
        self.key_base.get()
    }

    /// Records `base`, the lexeme of `"` then any string characters then `"`, the
    /// characters being those of this key complement, and `dev`, the tail automaton this
    /// lexeme was built from (once; later calls are ignored). Its tables then derive this
    /// lexeme's (see `crate::tables`). Cost: O(1).
    pub(crate) fn set_key_base(&self, base: Arc<Lexeme>, dev: Arc<Lexeme>) {
        let _ = self.key_base.set((base, dev));
    }

    /// The start of its regex as printed, when it was named (see [`Lexeme::set_name`]).
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.get().map(String::as_str)
    }

    /// Names the lexeme after the start of `printed`, its regex (once; later calls are
    /// ignored). Cost: a copy of at most [`NAME_BYTES`] bytes.
    pub(crate) fn set_name(&self, printed: &str) {
        let mut cut = printed.len().min(NAME_BYTES);
        while !printed.is_char_boundary(cut) {
            cut -= 1;
        }
        let _ = self.name.set(printed[..cut].to_string());
    }
    /// For a literal chain ([`Dfa::prepend_literal`]): the lexeme after the literal and
    /// the literal's length (its states past the literal are the rest's, moved up by that
    /// length). Cost: O(1).
    pub(crate) fn chain_rest(&self) -> Option<(&Arc<Lexeme>, u32)> {
        match &self.dfa.special {
            Special::Chain(c) => Some((&c.rest, c.lit.len() as u32)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compile::test_hir as hir;
    use regex_automata::nfa::thompson;

    /// Checks that `ours` recognizes the language of `re` state by state, against
    /// regex-automata's dense DFA (anchored, all matches): the same whole-lexeme verdicts,
    /// a byte allowed exactly when the reference can still reach a match after it, and
    /// dead exactly when it cannot.
    fn same_as_dense(re: &str, ours: &Dfa) {
        use regex_automata::dfa::{dense, Automaton, StartKind};
        use regex_automata::util::primitives::StateID;
        use regex_automata::{util::start, Anchored, MatchKind};
        let theirs = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .match_kind(MatchKind::All)
                    .start_kind(StartKind::Anchored),
            )
            .thompson(thompson::Config::new().utf8(false))
            .syntax(regex_automata::util::syntax::Config::new().utf8(false))
            .build(re)
            .unwrap();
        let t0 = theirs
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .unwrap();
        let live = |t: StateID| {
            let mut seen = std::collections::HashSet::new();
            let mut stack = vec![t];
            while let Some(t) = stack.pop() {
                if theirs.is_dead_state(t) || !seen.insert(t) {
                    continue;
                }
                if theirs.is_match_state(theirs.next_eoi_state(t)) {
                    return true;
                }
                stack.extend((0..=255u8).map(|b| theirs.next_state(t, b)));
            }
            false
        };
        assert_eq!(ours.start() != 0, live(t0), "{re}: start");
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![(ours.start(), t0)];
        while let Some((s, t)) = stack.pop() {
            if s == 0 || !seen.insert((s, t)) {
                continue;
            }
            assert_eq!(
                ours.accepting(s),
                theirs.is_match_state(theirs.next_eoi_state(t)),
                "{re}: accepting"
            );
            for b in 0..=255u8 {
                let (s2, t2) = (ours.next(s, b), theirs.next_state(t, b));
                assert_eq!(s2 != 0, live(t2), "{re}: byte {b:#x}");
                assert_eq!(ours.allowed(s).contains(b), s2 != 0, "{re}: allowed {b:#x}");
                stack.push((s2, t2));
            }
        }
    }

    /// The subset construction against regex-automata's dense builder, on the engine's
    /// own lexeme shapes and on random regexes over a small alphabet with Unicode classes,
    /// bounded repeats, nullable and dead parts.
    #[test]
    fn subset_construction_equals_dense_dfa() {
        let ch = r#"(?:[ -!#-\[\]-\x{10FFFF}]|\\["/\\bfnrt]|\\u(?:[0-9A-CE-Fa-ce-f][0-9A-Fa-f]{3}|[Dd][0-7][0-9A-Fa-f]{2}|[Dd][89ABab][0-9A-Fa-f]{2}\\u[Dd][C-Fc-f][0-9A-Fa-f]{2}))"#;
        let mut res: Vec<String> = vec![
            format!("\"{ch}*\""),
            format!("\"{ch}{{2,9}}\""),
            format!("[ \t\n]{{0,20}},[ \t\n]{{0,20}}\"(?:name|nick)\"[ \t\n]{{0,20}}:[ \t\n]{{0,20}}\"{ch}*\""),
            r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?".into(),
            r"(?:true|false|null)".into(),
            r"a*b".into(),
            r"".into(),
            r"[^\x00-\xff]".into(),
            r"(?:ab|a)(?:bc|c)*".into(),
            r"\x{80}|\x{7ff}|\x{800}|\x{ffff}|\x{10000}|\x{10ffff}".into(),
            r"[\x00-\xff]{3}".into(),
            r"(?-u:[\x80-\xff])+é".into(),
        ];
        // Random regexes from a tiny grammar (a fixed-seed generator, so failures repeat).
        let mut rnd = crate::compile::test_rng(0x2545_f491_4f6c_dd1du64);
        fn gen(rnd: &mut dyn FnMut(u64) -> u64, depth: u32) -> String {
            let atoms = [
                "a", "b", "ab", "[a-c]", "[^a]", "é", "[à-ÿ]", "\\.", "(?:)", "[b-z]",
            ];
            if depth == 0 || rnd(3) == 0 {
                return atoms[rnd(atoms.len() as u64) as usize].to_string();
            }
            match rnd(5) {
                0 => format!("(?:{}|{})", gen(rnd, depth - 1), gen(rnd, depth - 1)),
                1 => format!("{}{}", gen(rnd, depth - 1), gen(rnd, depth - 1)),
                2 => format!("(?:{})*", gen(rnd, depth - 1)),
                3 => {
                    let lo = rnd(3);
                    format!("(?:{}){{{},{}}}", gen(rnd, depth - 1), lo, lo + rnd(4))
                }
                _ => format!("(?:{})?{}", gen(rnd, depth - 1), gen(rnd, depth - 1)),
            }
        }
        for _ in 0..400 {
            res.push(gen(&mut rnd, 4));
        }
        for re in &res {
            let d = Dfa::build(&hir(re), 100_000, 1 << 26).unwrap();
            same_as_dense(re, &d);
        }
    }

    #[test]
    fn a_literal_chain_in_front_of_a_dfa_is_the_concatenation() {
        // A key and its colon; a literal whose bytes split the rest's classes; a
        // multi-byte literal; an empty rest; a rest that starts with the literal's byte.
        let cases = [
            (r#""name""#, r#"[ \t\n\r]{0,3}:[ \t\n\r]{0,3}"[a-z]*""#),
            ("a:b", "[:a-c]+d?"),
            ("ключ", "[а-я]{1,3}|x"),
            ("x", ""),
            ("\"", r#"[^"\\]*""#),
        ];
        for (lit, rest) in cases {
            let r = Lexeme::new(Dfa::build(&hir(rest), 10_000, 1 << 24).unwrap());
            let joined = Dfa::prepend_literal(lit.as_bytes(), &r, 10_000, 1 << 24).unwrap();
            same_as_dense(&format!("{}(?:{rest})", regex_syntax::escape(lit)), &joined);
            // Classes stay intervals in increasing order (the subset construction and the
            // signatures rely on it).
            for b in 1..=255u8 {
                let d = joined.class_of(b) as i32 - joined.class_of(b - 1) as i32;
                assert!(d == 0 || d == 1, "{lit:?} {rest:?} at byte {b}");
            }
        }
        let r = Lexeme::new(Dfa::build(&hir("[a-z]{0,5}"), 10_000, 1 << 24).unwrap());
        assert!(Dfa::prepend_literal(b"", &r, 10_000, 1 << 24).is_none());
        // The chain adds one state per byte, within the state limit.
        let n = r.num_states();
        assert!(Dfa::prepend_literal(b"abc", &r, n + 2, 1 << 24).is_none());
        assert_eq!(
            Dfa::prepend_literal(b"abc", &r, n + 3, 1 << 24)
                .unwrap()
                .num_states(),
            n + 3
        );
        let empty = Lexeme::new(Dfa::build(&hir("[a&&b]"), 10_000, 1 << 24).unwrap());
        assert!(Dfa::prepend_literal(b"abc", &empty, 10_000, 1 << 24).is_none());
    }

    /// The byte bound derived from the state limit: an ambiguous digit repeat whose DFA
    /// has tens of thousands of states (the fuzz-found GBNF `number` rule) is refused
    /// within a bounded time, and a DFA within the limit is never refused by the bound,
    /// even one whose every state is a match state (the limit is exact to one state).
    /// That the bound stops determinization early, rather than after the whole DFA, is
    /// shown by `tests/errors.rs::fuzz_found_ambiguous_digit_repeat_compiles`.
    #[test]
    fn state_limit_stops_determinization_early() {
        let limits = crate::Limits::default();
        let t = std::time::Instant::now();
        let d = Dfa::build(
            &hir(
                r"(?:-?(?:[0-9]|[1-9][0-9]{0,15}))*(?:\.[0-9]+)?(?:[eE][-+]?[0-9][1-9]{0,15})?(?: \| |\n[ \t]{0,20})",
            ),
            limits.max_lexeme_states,
            limits.max_dfa_bytes,
        );
        let took = t.elapsed();
        assert!(matches!(d, Err(DfaError::TooBig { .. })));
        assert!(took < std::time::Duration::from_millis(1500), "{took:?}");
        for re in ["a{0,3000}", "[a-z]{0,1500}", "(?:ab|cd){0,1000}"] {
            let n = Dfa::build(&hir(re), usize::MAX, usize::MAX)
                .unwrap()
                .num_states();
            // `num_states` counts the dead state; `max_states` bounds the live ones.
            assert!(
                Dfa::build(&hir(re), n - 1, limits.max_dfa_bytes).is_ok(),
                "{re}"
            );
            assert!(
                Dfa::build(&hir(re), n - 2, limits.max_dfa_bytes).is_err(),
                "{re}"
            );
        }
    }

    /// The two sides of the determinization budget: the fuzz-found regex (3,000 NFA states
    /// with large sets) fails fast, and a bounded JSON string (6,600 NFA states with small
    /// sets) still gets its DFA rather than being split per character.
    #[test]
    fn determinization_budget_scales_with_nfa_size() {
        let limits = crate::Limits::default();
        let build = |re: &str| {
            let t = std::time::Instant::now();
            let d = Dfa::build(&hir(re), limits.max_lexeme_states, limits.max_dfa_bytes);
            (d, t.elapsed())
        };
        let (d, took) = build(r"(?:\S+\x00{9}\x10|s+){0,99}\S\x00{39}\x00+");
        assert!(matches!(d, Err(DfaError::TooBig { cost }) if cost < limits.max_lexeme_states));
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        let ch = r#"(?:[ -!#-\[\]-\x{10FFFF}]|\\["/\\bfnrt]|\\u(?:[0-9A-CE-Fa-ce-f][0-9A-Fa-f]{3}|[Dd][0-7][0-9A-Fa-f]{2}|[Dd][89ABab][0-9A-Fa-f]{2}\\u[Dd][C-Fc-f][0-9A-Fa-f]{2}))"#;
        let (d, _) = build(&format!("\"{ch}{{0,200}}\""));
        assert!(d.is_ok_and(|d| d.num_states() > 200));
    }
}
