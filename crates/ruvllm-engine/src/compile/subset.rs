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

/// The ε-closures of transition targets met so far, in one pool (`off[t]` is `NONE` until
/// target `t` is closed), with the scratch space of the search that computes them and
/// the bytes of sets and closures used so far (bounded by `set_bytes`).
struct Closures {
    off: Vec<u32>,
    len: Vec<u32>,
    pool: Vec<u32>,
    mark: Vec<u32>,
    epoch: u32,
    todo: Vec<u32>,
    used: usize,
    set_bytes: usize,
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
/// plus the closures, within the three budgets and, when given, until `deadline`. The
/// steps: [`Alphabet::of`] (byte classes), [`co_reachable`] (live NFA states),
/// [`Closures`] (ε-closures, each target once), then per DFA state [`step_members`] and
/// [`Table::state_of`] for each class's successor set.
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
    let ab = Alphabet::of(nfa);
    let stride = ab.stride;
    let alive = co_reachable(states);
    let mut cl = Closures::new(n, set_bytes);
    let mut table = Table {
        sets: SetPool::new(),
        trans: vec![0; stride],
        accepting: vec![false],
        stride,
        max_states,
        set_bytes,
        table_bytes,
        row_bytes: ab.row_bytes,
        deadline,
    };
    // The DFA states' NFA-state sets, in id order (state 0, dead, is the empty set).
    let start_nfa = nfa.start_anchored().as_usize();
    let start_set = cl.close(start_nfa, states, &alive)?.to_vec();
    let start = if start_set.is_empty() {
        0
    } else {
        cl.used += start_set.len() * 4 + 8;
        table.add(&start_set, hash(&start_set));
        1
    };

    // Per class: the transition targets of the current state's members.
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); stride];
    let mut members: Vec<u32> = Vec::new();
    let mut set: Vec<u32> = Vec::new();
    let mut mark = vec![0u32; n];
    let mut epoch = 0u32;
    let mut i = 1;
    while i < table.accepting.len() {
        members.clear();
        members.extend_from_slice(table.sets.get(i));
        table.accepting[i] = step_members(states, &members, &ab, &alive, &mut buckets);
        let mut prev: Option<(usize, u32)> = None;
        for c in 0..stride {
            if buckets[c].is_empty() {
                prev = None;
                continue;
            }
            if let Some((pc, id)) = prev {
                if buckets[pc] == buckets[c] {
                    table.trans[i * stride + c] = id;
                    continue;
                }
            }
            // The union of the targets' closures.
            epoch += 1;
            set.clear();
            for &t in buckets[c].iter() {
                for &s in cl.close(t as usize, states, &alive)? {
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
                table.state_of(&set, &mut cl.used)?
            };
            table.trans[i * stride + c] = id;
            prev = Some((c, id));
        }
        i += 1;
    }
    Ok(Subset {
        classes: ab.classes,
        stride,
        trans: table.trans,
        accepting: table.accepting,
        start,
    })
}

/// The hash of a set of NFA states, for the set pool.
fn hash(set: &[u32]) -> u64 {
    let mut h = ItemHasher::default();
    set.iter().for_each(|&x| h.write_u32(x));
    h.finish()
}

/// An NFA's byte classes (each an interval of bytes, numbered in increasing byte order)
/// and one representative byte per class. The last class of regex-automata's alphabet is
/// end-of-input, which lexemes do not use.
struct Alphabet {
    classes: [u8; 256],
    stride: usize,
    reps: Vec<u8>,
    /// What regex-automata's table would store per state (alphabet with end-of-input,
    /// padded to a power of two): the table budget keeps its meaning.
    row_bytes: usize,
}

impl Alphabet {
    fn of(nfa: &NFA) -> Alphabet {
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
        Alphabet {
            classes,
            stride,
            reps,
            row_bytes: (stride + 1).next_power_of_two() * 4,
        }
    }
}

/// Co-reachability: the NFA states from which a match can be reached, over the reverse
/// graph in compressed rows (one allocation, not one vector per NFA state). Linear in
/// the NFA.
fn co_reachable(states: &[State]) -> Vec<bool> {
    let n = states.len();
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
    alive
}

/// Fills `buckets[c]` with the live transition targets of `members` on byte class `c`;
/// returns whether a member is a match state. Linear in the members' transitions.
fn step_members(
    states: &[State],
    members: &[u32],
    ab: &Alphabet,
    alive: &[bool],
    buckets: &mut [Vec<u32>],
) -> bool {
    for b in buckets.iter_mut() {
        b.clear();
    }
    let classes = &ab.classes;
    let push = |lo: u8, hi: u8, next: u32, buckets: &mut [Vec<u32>]| {
        if alive[next as usize] {
            for c in classes[lo as usize]..=classes[hi as usize] {
                buckets[c as usize].push(next);
            }
        }
    };
    let mut matches = false;
    for &m in members {
        match &states[m as usize] {
            State::ByteRange { trans } => {
                push(trans.start, trans.end, trans.next.as_u32(), buckets)
            }
            State::Sparse(s) => {
                for t in s.transitions.iter() {
                    push(t.start, t.end, t.next.as_u32(), buckets);
                }
            }
            State::Dense(d) => {
                for (c, &r) in ab.reps.iter().enumerate() {
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
    matches
}

/// The DFA under construction: its states' NFA-state sets, transitions and accepting
/// flags, with the budgets that bound it.
struct Table {
    sets: SetPool<u32>,
    trans: Vec<u32>,
    accepting: Vec<bool>,
    stride: usize,
    max_states: usize,
    set_bytes: usize,
    table_bytes: usize,
    row_bytes: usize,
    deadline: Option<std::time::Instant>,
}

impl Table {
    /// Adds a state for `set` (not yet known).
    fn add(&mut self, set: &[u32], h: u64) {
        self.sets.push(set, h);
        self.trans.resize(self.trans.len() + self.stride, 0);
        self.accepting.push(false);
    }

    /// The state of a sorted, non-empty `set`: found, or added within the budgets
    /// (`used` counts the bytes of sets and closures). Checks the clock every
    /// [`DEADLINE_EVERY`] new states.
    fn state_of(&mut self, set: &[u32], used: &mut usize) -> Result<u32, Stop> {
        let h = hash(set);
        let found = self.sets.find(set, h);
        if found != 0 {
            return Ok(found);
        }
        let id = self.accepting.len();
        if id > self.max_states {
            return Err(Stop::States);
        }
        *used += set.len() * 4 + 8;
        if *used > self.set_bytes
            || id * self.row_bytes > self.table_bytes
            || !self.sets.has_room(set.len())
        {
            return Err(Stop::Memory);
        }
        if id.is_multiple_of(DEADLINE_EVERY)
            && self.deadline.is_some_and(|d| std::time::Instant::now() > d)
        {
            return Err(Stop::Time);
        }
        self.add(set, h);
        Ok(id as u32)
    }
}

/// Marks a target not closed yet.
const NONE: u32 = u32::MAX;

impl Closures {
    fn new(n: usize, set_bytes: usize) -> Closures {
        Closures {
            off: vec![NONE; n],
            len: vec![0; n],
            pool: Vec::new(),
            mark: vec![0; n],
            epoch: 0,
            todo: Vec::new(),
            used: 0,
            set_bytes,
        }
    }

    /// The ε-closure of target `t`: the live states that read a byte or match, sorted;
    /// computed the first time it is asked, then kept.
    fn close(&mut self, t: usize, states: &[State], alive: &[bool]) -> Result<&[u32], Stop> {
        if self.off[t] == NONE {
            self.compute(t, states, alive)?;
        }
        let o = self.off[t] as usize;
        Ok(&self.pool[o..o + self.len[t] as usize])
    }

    fn compute(&mut self, t: usize, states: &[State], alive: &[bool]) -> Result<(), Stop> {
        self.epoch += 1;
        let from = self.pool.len();
        self.todo.clear();
        self.todo.push(t as u32);
        while let Some(s) = self.todo.pop() {
            let s = s as usize;
            if self.mark[s] == self.epoch || !alive[s] {
                continue;
            }
            self.mark[s] = self.epoch;
            match &states[s] {
                State::ByteRange { .. }
                | State::Sparse(_)
                | State::Dense(_)
                | State::Match { .. } => self.pool.push(s as u32),
                // Reverse order so that the first alternative is explored first (the
                // order does not matter to the set; this keeps the stack shallow).
                State::Union { alternates } => self
                    .todo
                    .extend(alternates.iter().rev().map(|x| x.as_u32())),
                State::BinaryUnion { alt1, alt2 } => {
                    self.todo.push(alt2.as_u32());
                    self.todo.push(alt1.as_u32());
                }
                State::Capture { next, .. } => self.todo.push(next.as_u32()),
                State::Look { .. } | State::Fail => {}
            }
        }
        self.pool[from..].sort_unstable();
        let len = self.pool.len() - from;
        self.used += len * 4 + 8;
        // The pools are indexed by `u32` (16 GiB of sets, past any sane `set_bytes`).
        if self.used > self.set_bytes || self.pool.len() >= u32::MAX as usize {
            return Err(Stop::Memory);
        }
        self.off[t] = from as u32;
        self.len[t] = len as u32;
        Ok(())
    }
}
