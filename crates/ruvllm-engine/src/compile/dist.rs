//! Distances to the end of a lexeme: the fewest bytes from a DFA state to an accepting
//! one, and a shortest text that gets there.
//!
//! They are the lexeme half of a *shortest completion* (see `crate::complete`): the
//! parser half adds the rest of each rule, and the two together bound how many tokens a
//! generation still needs. Distances are in bytes, which the vocabulary does not change,
//! so they belong to the lexeme and are computed once per process:
//!
//! * a flat DFA gets a table of distances by one breadth-first search backwards from its
//!   accepting states (O(states x byte classes), on first use);
//! * a counted lexeme (`P x{min,max} S`) computes them from its parts' tables: the count
//!   is never unrolled;
//! * a literal chain in front of a cached lexeme is the literal's length plus the rest's.
//!
//! The shortest text follows the distances down, picking at each state the first byte
//! of [`PREFERRED`] that keeps to a shortest path (digits, then letters, then space and
//! the rest): `0` for a number, `a` for the characters of a string with a `minLength`.

use super::dfa::Dfa;

/// No way to the end (the dead state).
pub(crate) const INF: u32 = u32::MAX;

/// `a + b`, saturating at [`INF`].
#[inline]
pub(crate) fn add(a: u32, b: u32) -> u32 {
    a.saturating_add(b)
}

/// `a * b`, saturating at [`INF`].
#[inline]
pub(crate) fn mul(a: u32, b: u32) -> u32 {
    a.saturating_mul(b)
}

/// The order in which a shortest text's bytes are chosen among equally short ones.
pub(crate) const PREFERRED: [u8; 256] = preferred();

const fn preferred() -> [u8; 256] {
    let mut out = [0u8; 256];
    let mut n = 0;
    let firsts: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ \"";
    let mut i = 0;
    while i < firsts.len() {
        out[n] = firsts[i];
        n += 1;
        i += 1;
    }
    let mut b = 0usize;
    while b < 256 {
        let mut seen = false;
        let mut j = 0;
        while j < firsts.len() {
            if firsts[j] as usize == b {
                seen = true;
            }
            j += 1;
        }
        if !seen {
            out[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    out
}

/// The distance table of a flat DFA, its largest finite entry, and the bytes its shortest
/// texts are made of ([`chosen_bytes`]).
#[derive(Debug)]
pub(crate) struct FlatDist {
    pub(crate) dist: Box<[u32]>,
    pub(crate) max: u32,
    pub(crate) bytes: crate::byteset::ByteSet,
}

impl FlatDist {
    /// Distances of every state of `d` (a flat DFA) by a backward breadth-first search
    /// from its accepting states. Cost: O(states x byte classes) time and memory.
    pub(crate) fn of(d: &Dfa) -> FlatDist {
        let n = d.num_states();
        // One representative byte per class.
        let mut reps: Vec<u8> = Vec::new();
        let mut seen_class = [false; 256];
        for b in 0..=255u8 {
            let c = d.class_of(b) as usize;
            if !seen_class[c] {
                seen_class[c] = true;
                reps.push(b);
            }
        }
        // Reverse edges, in compressed rows.
        let mut count = vec![0u32; n + 1];
        for s in 1..n as u32 {
            for &b in &reps {
                let t = d.next(s, b);
                if t != 0 {
                    count[t as usize + 1] += 1;
                }
            }
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut from = vec![0u32; count[n] as usize];
        for s in 1..n as u32 {
            for &b in &reps {
                let t = d.next(s, b);
                if t != 0 {
                    from[fill[t as usize] as usize] = s;
                    fill[t as usize] += 1;
                }
            }
        }
        let mut dist = vec![INF; n].into_boxed_slice();
        let mut queue: Vec<u32> = Vec::new();
        for s in 1..n as u32 {
            if d.accepting(s) {
                dist[s as usize] = 0;
                queue.push(s);
            }
        }
        let mut head = 0;
        let mut max = 0;
        while head < queue.len() {
            let t = queue[head];
            head += 1;
            let dt = dist[t as usize];
            max = max.max(dt);
            for &s in &from[count[t as usize] as usize..count[t as usize + 1] as usize] {
                if dist[s as usize] == INF {
                    dist[s as usize] = dt + 1;
                    queue.push(s);
                }
            }
        }
        let bytes = chosen_bytes(d, |t| dist.get(t as usize).copied().unwrap_or(INF));
        FlatDist { dist, max, bytes }
    }
}

/// The bytes [`follow`] can choose from any state of `d`: the first preferred byte that
/// keeps to a shortest path, over every live state. Cost: O(states x 256) at worst.
pub(crate) fn chosen_bytes(d: &Dfa, dist: impl Fn(u32) -> u32) -> crate::byteset::ByteSet {
    let mut out = crate::byteset::ByteSet::EMPTY;
    for s in 1..d.num_states() as u32 {
        let left = dist(s);
        if left == 0 || left == INF {
            continue;
        }
        let allowed = d.allowed(s);
        for &b in PREFERRED.iter() {
            if allowed.contains(b) {
                let t = d.next(s, b);
                if t != 0 && dist(t) == left - 1 {
                    out.insert(b);
                    break;
                }
            }
        }
    }
    out
}

/// Appends a shortest text from state `s` of `d` to acceptance, given `dist` (a function
/// giving each state's distance). Cost: O(bytes appended x 256) at worst.
pub(crate) fn follow(d: &Dfa, mut s: u32, dist: impl Fn(u32) -> u32, out: &mut Vec<u8>) {
    let mut left = dist(s);
    while left != 0 && left != INF {
        let allowed = d.allowed(s);
        let mut stepped = false;
        for &b in PREFERRED.iter() {
            if !allowed.contains(b) {
                continue;
            }
            let t = d.next(s, b);
            if t != 0 && dist(t) == left - 1 {
                out.push(b);
                s = t;
                left -= 1;
                stepped = true;
                break;
            }
        }
        if !stepped {
            // Distances are exact, so a shortest step always exists.
            debug_assert!(false, "no shortest step from a live state");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{test_hir, Lexeme};

    fn lexeme(re: &str) -> std::sync::Arc<Lexeme> {
        Lexeme::new(Dfa::build(&test_hir(re), 10_000, 1 << 22).unwrap())
    }

    /// Every byte appears once in the preference order.
    #[test]
    fn preferred_is_a_permutation() {
        let mut seen = [false; 256];
        for &b in PREFERRED.iter() {
            assert!(!seen[b as usize]);
            seen[b as usize] = true;
        }
        assert_eq!(PREFERRED[0], b'0');
    }

    /// Distances agree with a breadth-first search forward from each state, and the
    /// shortest texts have that length and are accepted.
    #[test]
    fn flat_distances_are_shortest() {
        for re in [
            r#""([^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*""#,
            r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
            r"(true|false|null)",
            r"[a-z]{3,5}x",
        ] {
            let l = lexeme(re);
            for s in 1..l.num_states() as u32 {
                // Forward BFS.
                let mut frontier = vec![s];
                let mut seen = std::collections::HashSet::from([s]);
                let mut want = INF;
                let mut depth = 0;
                while !frontier.is_empty() {
                    if frontier.iter().any(|&q| l.accepting(q)) {
                        want = depth;
                        break;
                    }
                    let mut next = Vec::new();
                    for &q in &frontier {
                        for b in 0..=255u8 {
                            let t = l.next(q, b);
                            if t != 0 && seen.insert(t) {
                                next.push(t);
                            }
                        }
                    }
                    frontier = next;
                    depth += 1;
                }
                assert_eq!(l.dist(s), want, "{re} state {s}");
                let mut text = Vec::new();
                l.complete_into(s, &mut text);
                assert_eq!(text.len() as u32, want);
                let mut q = s;
                for &b in &text {
                    q = l.next(q, b);
                }
                assert!(l.accepting(q), "{re}: {:?}", String::from_utf8_lossy(&text));
                assert!(l.dist(s) <= l.max_dist());
            }
        }
    }
}
