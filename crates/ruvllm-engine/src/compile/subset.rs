//! Subset construction of a lexeme DFA from a `regex-automata` Thompson NFA.
//!
//! `regex-automata`'s dense builder is general (unanchored starts, look-around, leftmost
//! match semantics, byte-encoded NFA-state sets hashed with SipHash) and then had to be
//! copied into the engine's table, with a reverse-graph pass to fold dead states. Lexemes
//! need less: anchored, all matches, no look-around, and only the states from which the
//! lexeme can still be completed. This module builds exactly that, directly:
//!
//! * **Pruned sets.** An NFA state that cannot reach a match (computed once, backwards from
//!   the match states) never enters a set. A set is then empty exactly when no completion
//!   exists, so "dead" is the empty set, state 0, and every other state is alive by
//!   construction: no second pass.
//! * **Memoized ε-closures.** A byte transition's target is closed over ε-edges once per
//!   target and kept as a sorted list of the NFA states that read bytes or match; a DFA
//!   step is then a union of stored lists.
//! * **All classes at once.** A state's members are scanned once; each byte transition
//!   covers a contiguous run of byte classes (classes are byte intervals in increasing
//!   order), so its target is pushed to those classes' buckets. Neighbouring classes with
//!   the same targets (common: a character class spanning many classes) share one lookup.
//! * **Fx hashing** of the sorted `u32` sets.
//!
//! The result is the same language as the dense builder's (checked state by state in the
//! tests of [`super::dfa`]), with at most as many states.
//!
//! **Budgets.** `max_states` bounds the live states; `set_bytes` bounds the memory of the
//! sets and closures (what grows with NFA states per DFA state, the factor that made some
//! fuzz-found regexes slow); `table_bytes` bounds the transition table; an optional
//! deadline (the grammar's compile budget) bounds the time of one attempt, which the
//! state and memory budgets bound only indirectly. Hitting any of them stops the
//! construction at once.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use regex_automata::nfa::thompson::{State, NFA};

/// Why a construction stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// More than `max_states` live states.
    States,
    /// The sets and closures outgrew `set_bytes`, or the table `table_bytes`.
    Memory,
    /// The NFA has a look-around assertion (the engine's regexes never do).
    Look,
    /// The deadline passed (checked every [`DEADLINE_EVERY`] states).
    Time,
}

/// States added between two looks at the clock.
const DEADLINE_EVERY: usize = 64;

/// A determinized lexeme: state 0 dead, `start` the start state (0 when the language is
/// empty), `trans[s * stride + class]` the next state.
pub(crate) struct Subset {
    pub classes: [u8; 256],
    pub stride: usize,
    pub trans: Vec<u32>,
    pub accepting: Vec<bool>,
    pub start: u32,
}

/// FxHash (rustc's): one multiply per word, ample for sorted state lists.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// Determinizes `nfa` from its anchored start. Cost: O(DFA states × (members + classes))
/// plus the closures, within the three budgets and, when given, until `deadline`.
pub(crate) fn determinize(
    nfa: &NFA,
    max_states: usize,
    set_bytes: usize,
    table_bytes: usize,
    deadline: Option<std::time::Instant>,
) -> Result<Subset, Stop> {
    if !nfa.look_set_any().is_empty() {
        return Err(Stop::Look);
    }
    let states = nfa.states();
    let n = states.len();

    // Byte classes (each an interval of bytes, numbered in increasing byte order) and
    // one representative byte per class. The last class of regex-automata's alphabet is
    // end-of-input, which lexemes do not use.
    let bc = nfa.byte_classes();
    let mut classes = [0u8; 256];
    for b in 0..=255u8 {
        classes[b as usize] = bc.get(b);
    }
    let stride = bc.alphabet_len() - 1;
    let mut reps = vec![0u8; stride];
    for b in (0..=255u8).rev() {
        reps[classes[b as usize] as usize] = b;
    }
    // What regex-automata's table would store per state (alphabet with end-of-input,
    // padded to a power of two): the table budget keeps its meaning.
    let row_bytes = (stride + 1).next_power_of_two() * 4;

    // Co-reachability: NFA states from which a match can be reached.
    let mut rev: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut edge = |from: usize, to: usize| rev[to].push(from as u32);
    for (i, st) in states.iter().enumerate() {
        match st {
            State::ByteRange { trans } => edge(i, trans.next.as_usize()),
            State::Sparse(s) => s
                .transitions
                .iter()
                .for_each(|t| edge(i, t.next.as_usize())),
            State::Dense(d) => d
                .transitions
                .iter()
                .filter(|t| t.as_usize() != 0)
                .for_each(|t| edge(i, t.as_usize())),
            State::Union { alternates } => alternates.iter().for_each(|t| edge(i, t.as_usize())),
            State::BinaryUnion { alt1, alt2 } => {
                edge(i, alt1.as_usize());
                edge(i, alt2.as_usize());
            }
            State::Capture { next, .. } | State::Look { next, .. } => edge(i, next.as_usize()),
            State::Fail | State::Match { .. } => {}
        }
    }
    let mut alive = vec![false; n];
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&i| matches!(states[i as usize], State::Match { .. }))
        .collect();
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
    drop(rev);

    let mut used_bytes = 0usize;
    // ε-closures of transition targets: the live states that read a byte or match.
    let mut closures: Vec<Option<Box<[u32]>>> = vec![None; n];
    let mut cmark = vec![0u32; n];
    let mut cepoch = 0u32;
    let mut close =
        |t: usize, closures: &mut Vec<Option<Box<[u32]>>>, used: &mut usize| -> Result<(), Stop> {
            if closures[t].is_some() {
                return Ok(());
            }
            cepoch += 1;
            let mut out = Vec::new();
            let mut todo = vec![t as u32];
            while let Some(s) = todo.pop() {
                let s = s as usize;
                if cmark[s] == cepoch || !alive[s] {
                    continue;
                }
                cmark[s] = cepoch;
                match &states[s] {
                    State::ByteRange { .. }
                    | State::Sparse(_)
                    | State::Dense(_)
                    | State::Match { .. } => out.push(s as u32),
                    // Reverse order so that the first alternative is explored first (the
                    // order does not matter to the set; this keeps the stack shallow).
                    State::Union { alternates } => {
                        todo.extend(alternates.iter().rev().map(|x| x.as_u32()))
                    }
                    State::BinaryUnion { alt1, alt2 } => {
                        todo.push(alt2.as_u32());
                        todo.push(alt1.as_u32());
                    }
                    State::Capture { next, .. } => todo.push(next.as_u32()),
                    State::Look { .. } | State::Fail => {}
                }
            }
            out.sort_unstable();
            *used += out.len() * 4 + 8;
            if *used > set_bytes {
                return Err(Stop::Memory);
            }
            closures[t] = Some(out.into_boxed_slice());
            Ok(())
        };

    let start_nfa = nfa.start_anchored().as_usize();
    close(start_nfa, &mut closures, &mut used_bytes)?;
    let start_set: Box<[u32]> = closures[start_nfa].clone().unwrap_or_default();

    let mut sets: Vec<Box<[u32]>> = vec![Box::default()];
    let mut map: FxMap<Box<[u32]>, u32> = FxMap::default();
    let mut trans: Vec<u32> = vec![0; stride];
    let mut accepting = vec![false];
    let start = if start_set.is_empty() {
        0
    } else {
        used_bytes += start_set.len() * 4 + 8;
        map.insert(start_set.clone(), 1);
        sets.push(start_set);
        trans.resize(2 * stride, 0);
        accepting.push(false);
        1
    };

    // Per class: the transition targets of the current state's members.
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); stride];
    let mut set: Vec<u32> = Vec::new();
    let mut mark = vec![0u32; n];
    let mut epoch = 0u32;
    let mut i = 1;
    while i < sets.len() {
        let members = std::mem::take(&mut sets[i]);
        for b in buckets.iter_mut() {
            b.clear();
        }
        let push = |lo: u8, hi: u8, next: u32, buckets: &mut Vec<Vec<u32>>| {
            if alive[next as usize] {
                for c in classes[lo as usize]..=classes[hi as usize] {
                    buckets[c as usize].push(next);
                }
            }
        };
        let mut matches = false;
        for &m in members.iter() {
            match &states[m as usize] {
                State::ByteRange { trans } => {
                    push(trans.start, trans.end, trans.next.as_u32(), &mut buckets)
                }
                State::Sparse(s) => {
                    for t in s.transitions.iter() {
                        push(t.start, t.end, t.next.as_u32(), &mut buckets);
                    }
                }
                State::Dense(d) => {
                    for (c, &r) in reps.iter().enumerate() {
                        let t = d.transitions[r as usize].as_u32();
                        if t != 0 && alive[t as usize] {
                            buckets[c].push(t);
                        }
                    }
                }
                State::Match { .. } => matches = true,
                _ => {}
            }
        }
        accepting[i] = matches;
        let mut prev: Option<(usize, u32)> = None;
        for c in 0..stride {
            if buckets[c].is_empty() {
                prev = None;
                continue;
            }
            if let Some((pc, id)) = prev {
                if buckets[pc] == buckets[c] {
                    trans[i * stride + c] = id;
                    continue;
                }
            }
            // The union of the targets' closures.
            epoch += 1;
            set.clear();
            for &t in buckets[c].iter() {
                let t = t as usize;
                close(t, &mut closures, &mut used_bytes)?;
                for &s in closures[t].as_deref().unwrap_or_default() {
                    if mark[s as usize] != epoch {
                        mark[s as usize] = epoch;
                        set.push(s);
                    }
                }
            }
            let id = if set.is_empty() {
                0
            } else {
                set.sort_unstable();
                match map.get(set.as_slice()) {
                    Some(&id) => id,
                    None => {
                        if sets.len() > max_states {
                            return Err(Stop::States);
                        }
                        used_bytes += set.len() * 4 + 8;
                        if used_bytes > set_bytes || sets.len() * row_bytes > table_bytes {
                            return Err(Stop::Memory);
                        }
                        if sets.len().is_multiple_of(DEADLINE_EVERY)
                            && deadline.is_some_and(|d| std::time::Instant::now() > d)
                        {
                            return Err(Stop::Time);
                        }
                        let id = sets.len() as u32;
                        let boxed: Box<[u32]> = set.as_slice().into();
                        map.insert(boxed.clone(), id);
                        sets.push(boxed);
                        trans.resize(trans.len() + stride, 0);
                        accepting.push(false);
                        id
                    }
                }
            };
            trans[i * stride + c] = id;
            prev = Some((c, id));
        }
        sets[i] = members;
        i += 1;
    }
    Ok(Subset {
        classes,
        stride,
        trans,
        accepting,
        start,
    })
}
