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
//! * **Interned sets** ([`super::setpool::SetPool`], shared with the composition), hashed
//!   with the parser's one-multiply-per-word hasher.
//!
//! The result is the same language as the dense builder's (checked state by state in the
//! tests of [`super::automata::dfa`]), with at most as many states.
//!
//! **Budgets.** `max_states` bounds the live states; `set_bytes` bounds the memory of the
//! sets and closures (what grows with NFA states per DFA state, the factor that made some
//! fuzz-found regexes slow); `table_bytes` bounds the transition table; an optional
//! deadline (the grammar's compile budget) bounds the time of one attempt, which the
//! state and memory budgets bound only indirectly. Hitting any of them stops the
//! construction at once.
//!
//! Part of the compiler (the parent module). Owns: one determinization's state. Uses:
//! `regex-automata`'s NFA, the state pool, `util`.

use std::hash::Hasher;

use regex_automata::nfa::thompson::{State, NFA};

use super::setpool::SetPool;
use crate::util::ItemHasher;

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

/// The ε-closures of transition targets met so far, in one pool, with the scratch space
/// of the search that computes them.
struct Closures {
    off: Vec<u32>,
    len: Vec<u32>,
    pool: Vec<u32>,
    mark: Vec<u32>,
    epoch: u32,
    todo: Vec<u32>,
}

/// Calls `f` with each successor of NFA state `st` (byte transitions and ε-edges).
fn successors(st: &State, mut f: impl FnMut(usize)) {
    match st {
        State::ByteRange { trans } => f(trans.next.as_usize()),
        State::Sparse(s) => s.transitions.iter().for_each(|t| f(t.next.as_usize())),
        State::Dense(d) => d
            .transitions
            .iter()
            .filter(|t| t.as_usize() != 0)
            .for_each(|t| f(t.as_usize())),
        State::Union { alternates } => alternates.iter().for_each(|t| f(t.as_usize())),
        State::BinaryUnion { alt1, alt2 } => {
            f(alt1.as_usize());
            f(alt2.as_usize());
        }
        State::Capture { next, .. } | State::Look { next, .. } => f(next.as_usize()),
        State::Fail | State::Match { .. } => {}
    }
}

/// Determinizes `nfa` from its anchored start. Cost: O(DFA states × (members + classes))
/// plus the closures, within the three budgets and, when given, until `deadline`.
// Long (260 lines) on purpose: the subset construction's one loop (closure, transitions,
// the three budgets) over shared buffers, the hot loop of DFA building.
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

    // Co-reachability: NFA states from which a match can be reached, over the reverse
    // graph in compressed rows (one allocation, not one vector per NFA state).
    let mut rev_off = vec![0u32; n + 1];
    for st in states.iter() {
        successors(st, |to| rev_off[to + 1] += 1);
    }
    for i in 0..n {
        rev_off[i + 1] += rev_off[i];
    }
    let mut rev = vec![0u32; rev_off[n] as usize];
    let mut fill = rev_off.clone();
    for (i, st) in states.iter().enumerate() {
        successors(st, |to| {
            rev[fill[to] as usize] = i as u32;
            fill[to] += 1;
        });
    }
    drop(fill);
    let mut alive = vec![false; n];
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&i| matches!(states[i as usize], State::Match { .. }))
        .collect();
    for &s in &stack {
        alive[s as usize] = true;
    }
    while let Some(s) = stack.pop() {
        for &p in &rev[rev_off[s as usize] as usize..rev_off[s as usize + 1] as usize] {
            if !alive[p as usize] {
                alive[p as usize] = true;
                stack.push(p);
            }
        }
    }
    drop(rev);
    drop(rev_off);

    let mut used_bytes = 0usize;
    // ε-closures of transition targets: the live states that read a byte or match, kept
    // sorted in one pool (`cl_off[t]` is `NONE` until target `t` is closed).
    const NONE: u32 = u32::MAX;
    let mut cl = Closures {
        off: vec![NONE; n],
        len: vec![0; n],
        pool: Vec::new(),
        mark: vec![0; n],
        epoch: 0,
        todo: Vec::new(),
    };
    let close = |t: usize, cl: &mut Closures, used: &mut usize| -> Result<(), Stop> {
        if cl.off[t] != NONE {
            return Ok(());
        }
        cl.epoch += 1;
        let from = cl.pool.len();
        cl.todo.clear();
        cl.todo.push(t as u32);
        while let Some(s) = cl.todo.pop() {
            let s = s as usize;
            if cl.mark[s] == cl.epoch || !alive[s] {
                continue;
            }
            cl.mark[s] = cl.epoch;
            match &states[s] {
                State::ByteRange { .. }
                | State::Sparse(_)
                | State::Dense(_)
                | State::Match { .. } => cl.pool.push(s as u32),
                // Reverse order so that the first alternative is explored first (the
                // order does not matter to the set; this keeps the stack shallow).
                State::Union { alternates } => {
                    cl.todo.extend(alternates.iter().rev().map(|x| x.as_u32()))
                }
                State::BinaryUnion { alt1, alt2 } => {
                    cl.todo.push(alt2.as_u32());
                    cl.todo.push(alt1.as_u32());
                }
                State::Capture { next, .. } => cl.todo.push(next.as_u32()),
                State::Look { .. } | State::Fail => {}
            }
        }
        cl.pool[from..].sort_unstable();
        let len = cl.pool.len() - from;
        *used += len * 4 + 8;
        // The pools are indexed by `u32` (16 GiB of sets, past any sane `set_bytes`).
        if *used > set_bytes || cl.pool.len() >= u32::MAX as usize {
            return Err(Stop::Memory);
        }
        cl.off[t] = from as u32;
        cl.len[t] = len as u32;
        Ok(())
    };

    // The DFA states' NFA-state sets, in id order (state 0, dead, is the empty set).
    let start_nfa = nfa.start_anchored().as_usize();
    close(start_nfa, &mut cl, &mut used_bytes)?;
    let mut sets: SetPool<u32> = SetPool::new();
    let mut trans: Vec<u32> = vec![0; stride];
    let mut accepting = vec![false];
    let hash = |set: &[u32]| {
        let mut h = ItemHasher::default();
        set.iter().for_each(|&x| h.write_u32(x));
        h.finish()
    };
    let start_len = cl.len[start_nfa] as usize;
    let start = if start_len == 0 {
        0
    } else {
        let o = cl.off[start_nfa] as usize;
        let start_set = &cl.pool[o..o + start_len];
        used_bytes += start_len * 4 + 8;
        sets.push(start_set, hash(start_set));
        trans.resize(2 * stride, 0);
        accepting.push(false);
        1
    };

    // Per class: the transition targets of the current state's members.
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); stride];
    let mut members: Vec<u32> = Vec::new();
    let mut set: Vec<u32> = Vec::new();
    let mut mark = vec![0u32; n];
    let mut epoch = 0u32;
    let mut i = 1;
    while i < accepting.len() {
        members.clear();
        members.extend_from_slice(sets.get(i));
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
                close(t, &mut cl, &mut used_bytes)?;
                let o = cl.off[t] as usize;
                for &s in &cl.pool[o..o + cl.len[t] as usize] {
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
                let h = hash(&set);
                let found = sets.find(&set, h);
                if found != 0 {
                    found
                } else {
                    let id = accepting.len();
                    if id > max_states {
                        return Err(Stop::States);
                    }
                    used_bytes += set.len() * 4 + 8;
                    if used_bytes > set_bytes
                        || id * row_bytes > table_bytes
                        || !sets.has_room(set.len())
                    {
                        return Err(Stop::Memory);
                    }
                    if id.is_multiple_of(DEADLINE_EVERY)
                        && deadline.is_some_and(|d| std::time::Instant::now() > d)
                    {
                        return Err(Stop::Time);
                    }
                    sets.push(&set, h);
                    trans.resize(trans.len() + stride, 0);
                    accepting.push(false);
                    id as u32
                }
            };
            trans[i * stride + c] = id;
            prev = Some((c, id));
        }
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
