//! Distances to the end of a lexeme: the fewest bytes from a DFA state to an accepting
//! one, and a shortest text that gets there.
//!
//! They are the lexeme half of a *shortest completion* (see `crate::matching::complete`): the
//! parser half adds the rest of each rule, and the two together bound how many tokens a
//! generation still needs. Distances are in bytes, which the vocabulary does not change,
//! so they belong to the lexeme and are computed once per lexeme:
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
//!
//! Part of the compiler (the parent module). Owns: the distance table of a flat DFA. Uses:
//! the lexeme automata.

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

/// The distance table of a flat DFA, its largest finite entry, each state's first byte on
/// its shortest text (kept so that building a text costs a step per byte), and the bytes those texts are made of ([`choices`]).
#[derive(Debug)]
pub(crate) struct FlatDist {
    pub(crate) dist: Box<[u32]>,
    pub(crate) max: u32,
    pub(crate) choice: Box<[u8]>,
    pub(crate) bytes: crate::byteset::ByteSet,
}

impl FlatDist {
    /// Appends the shortest text from state `s` of `d` (the DFA this table was built
    /// for). Cost: a step per byte appended.
    pub(crate) fn text(&self, d: &Dfa, mut s: u32, out: &mut Vec<u8>) {
        let mut left = self.dist.get(s as usize).copied().unwrap_or(INF);
        while left != 0 && left != INF {
            let b = self.choice[s as usize];
            out.push(b);
            s = d.next(s, b);
            left -= 1;
        }
    }
}

impl FlatDist {
    /// Distances of every state of `d` (a flat DFA) by a backward breadth-first search
    /// from its accepting states. Cost: O(states x byte classes) time, O(edges) memory.
    pub(crate) fn of(d: &Dfa) -> FlatDist {
        let n = d.num_states();
        // The forward edges, each distinct (state, next state) once: most byte classes of a
        // state go to the dead state or to a few states.
        let mut edges: Vec<(u32, u32)> = Vec::new();
        // `stamp[t] == s` once the edge (s, t) is in: O(1) per table entry, no sort.
        let mut stamp = vec![0u32; n];
        let mut add = |s: u32, t: u32| {
            if t != 0 && stamp[t as usize] != s {
                stamp[t as usize] = s;
                edges.push((t, s));
            }
        };
        match d.rows() {
            Some((trans, stride, classes)) => {
                for s in 1..n {
                    for &t in &trans[s * stride..s * stride + classes] {
                        add(s as u32, t);
                    }
                }
            }
            None => {
                for s in 1..n as u32 {
                    for b in d.allowed(s).iter() {
                        add(s, d.next(s, b));
                    }
                }
            }
        }
        // Reverse edges, in compressed rows.
        let mut count = vec![0u32; n + 1];
        for &(t, _) in &edges {
            count[t as usize + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let mut fill = count.clone();
        let mut from = vec![0u32; count[n] as usize];
        for &(t, s) in &edges {
            from[fill[t as usize] as usize] = s;
            fill[t as usize] += 1;
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
        let (choice, bytes) = choices(d, &dist);
        FlatDist {
            dist,
            max,
            choice,
            bytes,
        }
    }
}

/// Per state of `d`, the byte its shortest text starts with (the first preferred byte that
/// keeps to a shortest path; 0 where none is needed), and the set of those bytes. Cost: O(states x
/// 256) at worst.
fn choices(d: &Dfa, dist: &[u32]) -> (Box<[u8]>, crate::byteset::ByteSet) {
    let n = d.num_states();
    let mut choice = vec![0u8; n].into_boxed_slice();
    let mut bytes = crate::byteset::ByteSet::EMPTY;
    for s in 1..n as u32 {
        let left = dist[s as usize];
        if left == 0 || left == INF {
            continue;
        }
        let allowed = d.allowed(s);
        for &b in PREFERRED.iter() {
            if allowed.contains(b) {
                let t = d.next(s, b);
                if t != 0 && dist[t as usize] == left - 1 {
                    choice[s as usize] = b;
                    bytes.insert(b);
                    break;
                }
            }
        }
    }
    (choice, bytes)
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
