//! Sharing a table: whether a lexeme state behaves as an already tabled one (of any
//! lexeme) up to the vocabulary's longest token, decided by short-string signatures
//! first and then a bounded bisimulation with a work budget.
//!
//! Part of the token tables (the parent module); it uses the lexeme automata only.

use super::*;

/// Bytes covered by the signatures that refute table sharing before the bounded
/// bisimulation runs. On the 114-file MaskBench sample, 7,147 of the 7,604 refutations
/// that got past the first byte came within 3 bytes and 7,309 within 5.
pub(super) const SIGNATURE_ROUNDS: usize = 3;

/// Distinct (state, remaining rounds) one [`signature`] may visit before giving up.
pub(super) const MAX_SIGNATURE_STATES: usize = 2048;

/// Lexemes listed in one lexeme's `gave_up`, at most (dropped ones are pruned first).
pub(super) const MAX_GAVE_UP: usize = 32;

/// Most state pairs one equivalence check visits before giving up (then: not shared).
///
/// A check that proves a share is short (about 10 µs on average on MaskBench); one that
/// fails past the 3-byte signatures finds its difference deep down (string length bounds
/// that differ) after hundreds of pairs, so a low cap loses few shares and bounds the
/// failures' cost (docs/PERFORMANCE.md has the measurements that chose 512).
pub(super) const MAX_PAIRS: usize = 512;

/// Pairs past which a refuted equivalence check counts as a give-up: the lexeme then no
/// longer checks its states against the other lexeme's (see [`Tables::gave_up`]). The
/// string states of one big lexeme (an object's properties, each string followed by a
/// different key) agree with each other's registered states for the 3 bytes of the
/// signatures and differ after the closing quote, found after hundreds of pairs: on the
/// 97 MaskBench files with a mask over 1.8 ms, one state's table paid 12 such
/// refutations, 1.6-1.9 ms, before a walk of 0.2-0.4 ms, again for each string of the
/// object. A share missed this way costs a walk.
pub(super) const MAX_CHEAP_REFUTATION: usize = 64;

/// Steps (a pair and a byte run followed from it) all of one table's sharing checks
/// take together, at most (then the table is computed). A check that proves a share
/// takes about 650 steps at the median and about 14,000 at the most on the slowest
/// MaskBench files; a share missed costs a walk of an expensive table, and without a
/// budget one table's checks took up to 0.9 ms (docs/PERFORMANCE.md has the
/// measurements that chose this budget).
pub(super) const MAX_SHARE_WORK: usize = 16_384;

/// `equivalent` (the tests' oracle), or `None` when it gave up at [`MAX_PAIRS`] pairs;
/// with the pairs it met.
pub(super) fn equivalent_within(
    a: &Dfa,
    s: u32,
    b: &Dfa,
    t: u32,
    depth: usize,
) -> (Option<bool>, usize) {
    crate::compile::equiv::equivalent_capped(a, s, b, t, depth, MAX_PAIRS, &mut { usize::MAX })
}

/// [`equivalent_within`] that also stops (`None`) once it has taken `work` steps (one
/// per byte run it follows from a pair), and takes them off `work`.
pub(super) fn equivalent_budgeted(
    a: &Dfa,
    s: u32,
    b: &Dfa,
    t: u32,
    depth: usize,
    work: &mut usize,
) -> (Option<bool>, usize) {
    crate::compile::equiv::equivalent_capped(a, s, b, t, depth, MAX_PAIRS, work)
}

/// A hash of how state `s` behaves on the byte strings of at most `rounds` bytes: whether
/// each is accepted and which bytes may follow it. States that agree on all of them (in
/// any two DFAs, whatever their byte classes) get equal hashes, so unequal hashes prove a
/// difference within `rounds` bytes; equal hashes prove nothing. Cost: one step per byte
/// class for each distinct (state, remaining rounds) met, memoized; `None` (no
/// signature: the pair is then left to the bounded bisimulation) past
/// [`MAX_SIGNATURE_STATES`] of them, so that a DFA whose states fan out widely within a
/// few bytes cannot make it slow.
pub(crate) fn signature(dfa: &Dfa, s: u32, rounds: usize) -> Option<u64> {
    let runs = class_runs(dfa, 0..=255u8);
    fn go(
        dfa: &Dfa,
        runs: &[u8],
        s: u32,
        r: usize,
        memo: &mut FastMap<(u32, usize), u64>,
    ) -> Option<u64> {
        if let Some(&h) = memo.get(&(s, r)) {
            return Some(h);
        }
        if memo.len() >= MAX_SIGNATURE_STATES {
            return None;
        }
        let allowed = *dfa.allowed(s);
        let mut h = mix(0x51_7cc1_b727_220a, dfa.accepting(s) as u64);
        for w in allowed.0 {
            h = mix(h, w);
        }
        if r > 0 {
            // The child signature of every allowed byte, written at each change in
            // ascending byte order: a function of the bytes, not of the classes.
            let mut last = None;
            for &b in runs {
                if !allowed.contains(b) {
                    continue;
                }
                let child = go(dfa, runs, dfa.next(s, b), r - 1, memo)?;
                if last != Some(child) {
                    h = mix(mix(h, b as u64), child);
                }
                last = Some(child);
            }
        }
        memo.insert((s, r), h);
        Some(h)
    }
    go(dfa, &runs, s, rounds, &mut FastMap::default())
}

/// One byte per run of `bytes` (in ascending order) whose DFA classes are equal: bytes of
/// one class behave alike in every state, so each run stands for its bytes (a class that
/// recurs after another gets a second, redundant representative). Cost: one class
/// lookup per byte.
pub(super) fn class_runs(dfa: &Dfa, bytes: impl Iterator<Item = u8>) -> Vec<u8> {
    let mut runs = Vec::with_capacity(64);
    let mut last = None;
    for b in bytes {
        let class = Some(dfa.class_of(b));
        if class != last {
            last = class;
            runs.push(b);
        }
    }
    runs
}

#[inline]
pub(super) fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}
