//! Bounded bisimulation of two DFA states: whether they agree on every byte string up to
//! a length. The token tables use it to share tables between lexemes that behave alike
//! (under their own budget), and the tests use it as an oracle for counted lexemes'
//! canonical states. Uses only the DFA.

use super::automata::dfa::Dfa;
use crate::util::FastSet;

/// Whether state `s` of `a` and state `t` of `b` agree on every byte string of length at
/// most `depth`: same acceptance, and the same next bytes keep each alive (so aliveness
/// agrees up to length `depth + 1`). Breadth-first over
/// state pairs, each visited once at its smallest depth (where the remaining budget is
/// largest, so that visit decides). Exact; gives up (false) past a million pairs: tests
/// use it as an oracle, so its cap is far above the token tables' (`MAX_PAIRS` there).
#[cfg(test)]
pub(crate) fn equivalent(a: &Dfa, s: u32, b: &Dfa, t: u32, depth: usize) -> bool {
    equivalent_capped(a, s, b, t, depth, 1 << 20, &mut { usize::MAX }).0 == Some(true)
}

/// `equivalent` (the tests' oracle), or `None` when it gave up past `max_pairs` pairs;
/// with the pairs it met.
pub(crate) fn equivalent_capped(
    a: &Dfa,
    s: u32,
    b: &Dfa,
    t: u32,
    depth: usize,
    max_pairs: usize,
    work: &mut usize,
) -> (Option<bool>, usize) {
    if a.accepting(s) != b.accepting(t) || a.allowed(s) != b.allowed(t) {
        return (Some(false), 1);
    }
    // One byte per run of the two DFAs' joint byte partition (bytes of one class behave
    // alike; a cell that recurs after another gets a second, redundant representative).
    let mut reps: Vec<u8> = Vec::with_capacity(64);
    let mut last = None;
    for byte in 0..=255u8 {
        let cell = Some((a.class_of(byte), b.class_of(byte)));
        if cell != last {
            last = cell;
            reps.push(byte);
        }
    }
    let mut seen: FastSet<(u32, u32)> = FastSet::default();
    let mut queue = std::collections::VecDeque::new();
    seen.insert((s, t));
    queue.push_back((s, t, 0usize));
    while let Some((x, y, d)) = queue.pop_front() {
        if d + 1 > depth {
            continue;
        }
        // Adjacent runs mostly lead to the same pair: one set look per run of them.
        let mut last = None;
        for &byte in &reps {
            if !a.allowed(x).contains(byte) {
                continue;
            }
            if *work == 0 {
                return (None, seen.len());
            }
            *work -= 1;
            // Only `depth - d - 1` more bytes matter from the next pair: counts of a
            // counted lexeme that cannot be told apart within them are one state.
            let r = depth - d - 1;
            let (nx, ny) = (
                a.canonical(a.next(x, byte), r),
                b.canonical(b.next(y, byte), r),
            );
            if last == Some((nx, ny)) {
                continue;
            }
            last = Some((nx, ny));
            if seen.insert((nx, ny)) {
                // Compared when met rather than when expanded: a difference one byte down
                // is then found before the rest of this layer's pairs are generated.
                if a.accepting(nx) != b.accepting(ny) || a.allowed(nx) != b.allowed(ny) {
                    return (Some(false), seen.len());
                }
                if seen.len() > max_pairs {
                    return (None, seen.len());
                }
                queue.push_back((nx, ny, d + 1));
            }
        }
    }
    (Some(true), seen.len())
}
