//! Lexeme automata: a `regex-automata` dense DFA re-tabled for the engine.
//!
//! `regex-automata` determinizes (with size limits that turn pathological regexes into
//! errors instead of hangs). We then copy the reachable states into our own table with:
//!
//! * state 0 as the single dead state, and every state that cannot reach a match folded
//!   into it (so "alive" really means "this prefix can still complete the lexeme", which is
//!   what makes masks exact);
//! * `accepting[s]`: the bytes read so far form a complete lexeme (regex-automata reports
//!   matches one byte late; we resolve that with its end-of-input transition);
//! * `allowed[s]`: the bytes that keep the lexeme alive, for O(1) pruning during trie walks;
//! * byte equivalence classes, so the table is `states × classes` words.

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::nfa::thompson;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::Hir;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::counted::Counted;
use crate::byteset::ByteSet;
use crate::tables::Tables;

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
    /// Set for a counted lexeme (see [`super::counted`]): the tables above are then empty
    /// and every query goes to it.
    pub(super) counted: Option<Box<Counted>>,
}

impl Dfa {
    /// The counted lexeme `p x{min,max} s` (see [`super::counted`]), or `None` when its
    /// conditions do not hold. Cost: O(states of the parts).
    pub(crate) fn counted(
        p: Option<Dfa>,
        x: Dfa,
        min: u32,
        max: Option<u32>,
        s: Option<Dfa>,
    ) -> Option<Dfa> {
        let c = Counted::new(p, x, min, max, s)?;
        Some(Dfa {
            classes: c.classes(),
            stride: 0,
            trans: Vec::new(),
            accepting: Vec::new(),
            allowed: Vec::new(),
            start: c.start(),
            counted: Some(Box::new(c)),
        })
    }

    /// Number of token-table slots for a vocabulary whose tokens are at most `depth` bytes
    /// (the number of states, except for counted lexemes, whose far-from-the-bounds counts
    /// share slots).
    pub(crate) fn table_slots(&self, depth: usize) -> usize {
        match &self.counted {
            None => self.num_states(),
            Some(c) => c.table_slots(depth),
        }
    }

    /// The token-table slot of state `s` (see [`Dfa::table_slots`]).
    #[inline]
    pub(crate) fn table_slot(&self, s: u32, depth: usize) -> usize {
        match &self.counted {
            None => s as usize,
            Some(c) => c.table_slot(s, depth),
        }
    }

    /// Builds the DFA of `hir` (anchored, all matches), within `max_states` states and
    /// `max_bytes` of determinization memory.
    pub(crate) fn build(hir: &Hir, max_states: usize, max_bytes: usize) -> Result<Dfa, DfaError> {
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .utf8(false)
                    .shrink(false)
                    .which_captures(thompson::WhichCaptures::None)
                    .nfa_size_limit(Some(max_bytes)),
            )
            .build_from_hir(hir)
            .map_err(|_| DfaError::TooBig { cost: max_states })?;
        // Determinization costs about (DFA states) x (NFA states per DFA state), and the
        // second factor is what `determinize_size_limit` bounds (the NFA-state sets it keeps
        // per DFA state). A memory limit alone let a large NFA with big sets spend seconds
        // inside it (found by fuzzing: `(?:\S+…|s+){0,99}…`, 3,000 NFA states, 1.3 s per
        // attempt at 4 MiB, 77 ms at 256 KiB). Past `NFA_FULL_BUDGET` NFA states the
        // determinization budget shrinks with the square of the ratio, down to a floor of
        // `DETERMINIZE_FLOOR`; the DFA itself keeps the whole budget. Bounded repeats of a
        // JSON string character (the common large NFA: 6,600 NFA states for 200
        // characters) have small sets and fit in 256 KiB, so they still get their DFA;
        // shrinking the DFA budget too had split `maxLength: 60` strings into per-character
        // lexemes, which cost seconds per mask in the parser.
        let n = nfa.states().len().max(1);
        let det_bytes = if n > NFA_FULL_BUDGET {
            let f = NFA_FULL_BUDGET as u128;
            let scaled = (max_bytes as u128 * f * f / (n as u128 * n as u128)) as usize;
            scaled.max(DETERMINIZE_FLOOR).min(max_bytes)
        } else {
            max_bytes
        };
        // The DFA may not outgrow `max_states` either: that many states' transitions (at
        // the NFA's alphabet, padded to a power of two as regex-automata stores them) and
        // match lists (12 bytes per match state), plus slack for the start table. Without
        // this, a blow-up that fits in `max_bytes` was determinized to the end (65,000
        // states of `(-?[0-9]{1,16})*`, seconds) only to be refused afterwards for having
        // more than `max_states` (found by fuzzing).
        let stride = nfa.byte_classes().alphabet_len().next_power_of_two();
        let state_bytes = max_states
            .saturating_add(8)
            .saturating_mul(stride * std::mem::size_of::<u32>() + 16)
            .saturating_add(STATE_BOUND_SLACK);
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .match_kind(MatchKind::All)
                    .start_kind(StartKind::Anchored)
                    .minimize(false)
                    .accelerate(false)
                    .specialize_start_states(false)
                    .determinize_size_limit(Some(det_bytes))
                    .dfa_size_limit(Some(max_bytes.min(state_bytes))),
            )
            .build_from_nfa(&nfa)
            .map_err(|_| DfaError::TooBig {
                cost: (max_states as u128 * det_bytes as u128 / max_bytes.max(1) as u128).max(1)
                    as usize,
            })?;
        let s0 = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .map_err(|_| DfaError::TooBig { cost: max_states })?;

        // regex-automata's byte classes: bytes no transition distinguishes.
        let bc = dfa.byte_classes();
        let mut classes = [0u8; 256];
        for b in 0..=255u8 {
            classes[b as usize] = bc.get(b);
        }
        let stride = bc.alphabet_len() - 1; // the last class is end-of-input
        let mut reps = vec![0u8; stride];
        let mut seen_class = vec![false; stride];
        for b in 0..=255u8 {
            let c = classes[b as usize] as usize;
            if c < stride && !seen_class[c] {
                seen_class[c] = true;
                reps[c] = b;
            }
        }
        // Breadth-first copy of the reachable states. Ours: 0 = dead.
        // Our id of each regex-automata state, indexed by its table index (0 = not yet).
        let index = |id: regex_automata::util::primitives::StateID| id.as_usize() >> dfa.stride2();
        let mut ids: Vec<u32> = Vec::new();
        let set_id = |ids: &mut Vec<u32>, i: usize, x: u32| {
            if i >= ids.len() {
                ids.resize(i + 1, 0);
            }
            ids[i] = x;
        };
        let mut order = vec![s0];
        set_id(&mut ids, index(s0), 1);
        let mut trans: Vec<u32> = vec![0; 2 * stride];
        let mut accepting = vec![false, false];
        let mut i = 0;
        while i < order.len() {
            let s = order[i];
            let me = i + 1;
            accepting[me] = dfa.is_match_state(dfa.next_eoi_state(s));
            for (c, &b) in reps.iter().enumerate() {
                let n = dfa.next_state(s, b);
                if dfa.is_dead_state(n) || dfa.is_quit_state(n) {
                    continue;
                }
                let next_id = match ids.get(index(n)).copied().filter(|&x| x != 0) {
                    Some(x) => x,
                    None => {
                        if order.len() >= max_states {
                            return Err(DfaError::TooBig { cost: max_states });
                        }
                        order.push(n);
                        let x = order.len() as u32;
                        set_id(&mut ids, index(n), x);
                        trans.resize(trans.len() + stride, 0);
                        accepting.push(false);
                        x
                    }
                };
                trans[me * stride + c] = next_id;
            }
            i += 1;
        }
        let n = accepting.len();
        // Co-reachability: states from which an accepting state can be reached.
        let mut rev: Vec<Vec<u32>> = vec![Vec::new(); n];
        for s in 0..n {
            for &t in &trans[s * stride..(s + 1) * stride] {
                if t != 0 {
                    rev[t as usize].push(s as u32);
                }
            }
        }
        let mut alive = vec![false; n];
        let mut stack: Vec<u32> = (0..n as u32).filter(|&s| accepting[s as usize]).collect();
        for &s in &stack {
            alive[s as usize] = true;
        }
        while let Some(s) = stack.pop() {
            for &p in &rev[s as usize] {
                if !alive[p as usize] {
                    alive[p as usize] = true;
                    stack.push(p);
                }
            }
        }
        for t in trans.iter_mut() {
            if !alive[*t as usize] {
                *t = 0;
            }
        }
        let mut allowed = vec![ByteSet::EMPTY; n];
        for (s, a) in allowed.iter_mut().enumerate() {
            for b in 0..=255u8 {
                let c = classes[b as usize] as usize;
                if c < stride && trans[s * stride + c] != 0 {
                    a.insert(b);
                }
            }
        }
        let start = if alive[1] { 1 } else { 0 };
        Ok(Dfa {
            classes,
            stride,
            trans,
            accepting,
            allowed,
            start,
            counted: None,
        })
    }

    /// The byte class of `b` (bytes of one class behave alike in every state).
    #[inline(always)]
    pub(crate) fn class_of(&self, b: u8) -> u8 {
        self.classes[b as usize]
    }

    /// The state after reading `b` in state `s` (0 = dead).
    #[inline(always)]
    pub fn next(&self, s: u32, b: u8) -> u32 {
        match &self.counted {
            None => self.trans[s as usize * self.stride + self.classes[b as usize] as usize],
            Some(c) => c.next(s, b),
        }
    }

    /// Whether the bytes read so far form a whole lexeme.
    #[inline(always)]
    pub fn accepting(&self, s: u32) -> bool {
        match &self.counted {
            None => self.accepting[s as usize],
            Some(c) => c.accepting(s),
        }
    }

    /// The bytes that keep state `s` alive.
    #[inline(always)]
    pub fn allowed(&self, s: u32) -> &ByteSet {
        match &self.counted {
            None => &self.allowed[s as usize],
            Some(c) => c.allowed(s),
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
        match &self.counted {
            None => self.accepting.len(),
            Some(c) => c.num_states(),
        }
    }

    /// Approximate heap size in bytes.
    pub fn memory(&self) -> usize {
        self.trans.len() * 4
            + self.accepting.len()
            + self.allowed.len() * 32
            + 256
            + self.counted.as_ref().map_or(0, |c| c.memory())
    }
}

/// A lexeme DFA shared by every grammar that uses the same regular expression, with the
/// token tables of its states per vocabulary (filled lazily, see [`crate::tables`]).
///
/// Schemas repeat the same lexemes endlessly (a JSON string, an integer, whitespace, a
/// `"key": ` prefix), so determinizing each once per process and computing each state's
/// token table once per vocabulary turns most of compile time and first-mask time into a
/// lookup. The cache is keyed by the exact regex and the size limits it was built under,
/// so a hit is the very DFA a fresh build would give; it is bounded (cleared when it holds
/// more than [`MAX_CACHED`] lexemes or its lexemes' token tables exceed
/// [`MAX_CACHED_TABLE_BYTES`]; grammars keep their own `Arc`s).
#[derive(Debug)]
pub struct Lexeme {
    dfa: Dfa,
    tables: Mutex<Vec<(u64, Arc<Tables>)>>,
}

impl std::ops::Deref for Lexeme {
    type Target = Dfa;
    fn deref(&self) -> &Dfa {
        &self.dfa
    }
}

/// NFA states up to which a lexeme's determinization gets the whole `max_dfa_bytes` budget.
const NFA_FULL_BUDGET: usize = 512;
/// The least determinization budget of a large NFA (when `max_dfa_bytes` is larger).
const DETERMINIZE_FLOOR: usize = 256 << 10;

/// Bytes allowed over a `max_states`-state transition table for the rest of a dense DFA
/// (start states, match pattern lists), so that a DFA within the state limit is never
/// refused by the byte bound derived from it.
const STATE_BOUND_SLACK: usize = 64 << 10;

/// Vocabularies whose tables a lexeme keeps (oldest dropped first).
const TABLES_PER_LEXEME: usize = 4;
/// Lexemes kept in the process-wide cache.
const MAX_CACHED: usize = 8192;
/// Token-table bytes the cached lexemes may hold before the caches are cleared.
const MAX_CACHED_TABLE_BYTES: usize = 256 << 20;
/// DFA bytes the cached lexemes may hold before the cache is cleared (one DFA can reach
/// `max_lexeme_states x 256 x 4` bytes, so a count of entries alone does not bound it).
const MAX_CACHED_DFA_BYTES: usize = 256 << 20;

impl Lexeme {
    /// The token tables of this lexeme's states for vocabulary `vocab_id`, whose tokens are
    /// at most `depth` bytes. Cost: a lock and a short scan.
    pub(crate) fn tables_for(&self, vocab_id: u64, depth: usize) -> Arc<Tables> {
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, x)) = t.iter().find(|(v, _)| *v == vocab_id) {
            return x.clone();
        }
        if t.len() >= TABLES_PER_LEXEME {
            t.remove(0);
        }
        let x = Arc::new(Tables::new(self.dfa.table_slots(depth), vocab_id, depth));
        t.push((vocab_id, x.clone()));
        x
    }
}

/// The process-wide lexeme cache and the DFA bytes it holds.
type Cache = Mutex<(HashMap<String, Result<Arc<Lexeme>, DfaError>>, usize)>;

/// Builds (or fetches) the lexeme of `hir` under the given limits; `Err` when it is too
/// big (also cached, so a hopeless build is attempted once).
pub(crate) fn cached(
    key: &str,
    hir: &Hir,
    max_states: usize,
    max_bytes: usize,
) -> Result<Arc<Lexeme>, DfaError> {
    cached_with(&format!("{max_states}/{max_bytes}/{key}"), || {
        Dfa::build(hir, max_states, max_bytes)
    })
}

/// Fetches the lexeme cached under `full_key` (which must name everything the build
/// depends on), or builds it with `build` and caches the result.
pub(crate) fn cached_with(
    full_key: &str,
    build: impl FnOnce() -> Result<Dfa, DfaError>,
) -> Result<Arc<Lexeme>, DfaError> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new((HashMap::new(), 0)));
    if let Some(hit) = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .0
        .get(full_key)
    {
        return hit.clone();
    }
    let built = build();
    let built = built.map(|dfa| {
        Arc::new(Lexeme {
            dfa,
            tables: Mutex::new(Vec::new()),
        })
    });
    let size = built.as_ref().map_or(0, |l| l.dfa.memory());
    let mut guard = cache.lock().unwrap_or_else(|e| e.into_inner());
    let (c, bytes) = &mut *guard;
    if c.len() >= MAX_CACHED
        || *bytes + size > MAX_CACHED_DFA_BYTES
        || crate::tables::table_bytes() > MAX_CACHED_TABLE_BYTES
    {
        c.clear();
        *bytes = 0;
        crate::tables::clear_shared();
    }
    if c.insert(full_key.to_string(), built.clone()).is_none() {
        *bytes += size;
    }
    built
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hir(re: &str) -> Hir {
        regex_syntax::ParserBuilder::new()
            .utf8(false)
            .build()
            .parse(re)
            .unwrap()
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
