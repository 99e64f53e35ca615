//! A reference recognizer, independent of the engine's compiler and parser: it interprets
//! the grammar IR directly. For a text of n bytes it computes, for every rule and start
//! offset, the set of offsets where the rule can end, iterating to a fixpoint (so left
//! recursion works). The extra "offset" n+1 means "ran into the end of the text while still
//! matching", which decides whether a text is a viable prefix. Slow (polynomial, fine for
//! short texts) and simple on purpose.

#![allow(clippy::needless_range_loop)] // index loops over offsets read best here

use ruvllm_engine::{Expr, Grammar};

pub struct Reference<'g> {
    g: &'g Grammar,
    /// Ends of (sub-expression, start) within one fixpoint round (rule ends change between
    /// rounds, so it is cleared each round): keeps nested repetitions polynomial.
    cache: std::cell::RefCell<std::collections::HashMap<(*const Expr, usize), Ends>>,
}

type Ends = Vec<bool>; // index n+1 = PARTIAL

impl<'g> Reference<'g> {
    pub fn new(g: &'g Grammar) -> Self {
        Reference {
            g,
            cache: Default::default(),
        }
    }

    /// Whether `text` is a sentence of the grammar.
    pub fn accepts(&self, text: &[u8]) -> bool {
        let ends = self.root_ends(text);
        ends[text.len()]
    }

    /// Whether `text` is a prefix of some sentence.
    pub fn viable(&self, text: &[u8]) -> bool {
        let ends = self.root_ends(text);
        ends[text.len()] || ends[text.len() + 1]
    }

    fn root_ends(&self, text: &[u8]) -> Ends {
        let n = text.len();
        let nr = self.g.rules.len();
        // memo[r][i] = ends of rule r started at i
        let mut memo: Vec<Vec<Ends>> = vec![vec![vec![false; n + 2]; n + 1]; nr];
        loop {
            let mut changed = false;
            self.cache.borrow_mut().clear();
            for r in 0..nr {
                for i in 0..=n {
                    let e = self.ends(&self.g.rules[r].body, i, text, &memo);
                    for k in 0..n + 2 {
                        if e[k] && !memo[r][i][k] {
                            memo[r][i][k] = true;
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        memo[self.g.root as usize][0].clone()
    }

    fn ends(&self, e: &Expr, i: usize, text: &[u8], memo: &[Vec<Ends>]) -> Ends {
        let key = (e as *const Expr, i);
        if let Some(hit) = self.cache.borrow().get(&key) {
            return hit.clone();
        }
        let out = self.ends_uncached(e, i, text, memo);
        self.cache.borrow_mut().insert(key, out.clone());
        out
    }

    fn ends_uncached(&self, e: &Expr, i: usize, text: &[u8], memo: &[Vec<Ends>]) -> Ends {
        let n = text.len();
        let mut out = vec![false; n + 2];
        match e {
            Expr::Empty => out[i] = true,
            Expr::Literal(l) => {
                let rest = &text[i..];
                if rest.len() >= l.len() {
                    if &rest[..l.len()] == l.as_slice() {
                        out[i + l.len()] = true;
                    }
                } else if l.starts_with(rest) {
                    out[n + 1] = true;
                }
            }
            Expr::Chars(ranges) => {
                let rest = &text[i..];
                // Try every char length 1..=4.
                for len in 1..=4usize {
                    if rest.len() >= len {
                        if let Ok(s) = std::str::from_utf8(&rest[..len]) {
                            let c = s.chars().next().unwrap();
                            if ranges.iter().any(|&(a, b)| a <= c && c <= b) {
                                out[i + len] = true;
                            }
                            break;
                        }
                    } else {
                        // Partial: is `rest` a prefix of the encoding of some char in the class?
                        if partial_char_in(rest, ranges) {
                            out[n + 1] = true;
                        }
                        break;
                    }
                }
            }
            Expr::Bytes(ranges) => {
                if i < n {
                    if ranges.iter().any(|&(a, b)| a <= text[i] && text[i] <= b) {
                        out[i + 1] = true;
                    }
                } else if !ranges.is_empty() {
                    out[n + 1] = true;
                }
            }
            Expr::Ref(r) => {
                if i <= n {
                    out.clone_from(&memo[*r as usize][i]);
                }
            }
            Expr::Seq(v) => {
                let mut cur = vec![false; n + 2];
                cur[i] = true;
                for x in v {
                    let mut next = vec![false; n + 2];
                    next[n + 1] = cur[n + 1];
                    for j in 0..=n {
                        if cur[j] {
                            let e = self.ends(x, j, text, memo);
                            for k in 0..n + 2 {
                                next[k] |= e[k];
                            }
                        }
                    }
                    cur = next;
                }
                out = cur;
            }
            Expr::Alt(v) => {
                for x in v {
                    let e = self.ends(x, i, text, memo);
                    for k in 0..n + 2 {
                        out[k] |= e[k];
                    }
                }
            }
            Expr::Repeat { e, min, max } => {
                let step = |cur: &Ends| -> Ends {
                    let mut next = vec![false; n + 2];
                    next[n + 1] = cur[n + 1];
                    for j in 0..=n {
                        if cur[j] {
                            let x = self.ends(e, j, text, memo);
                            for k in 0..n + 2 {
                                next[k] |= x[k];
                            }
                        }
                    }
                    next
                };
                let mut cur = vec![false; n + 2];
                cur[i] = true;
                for _ in 0..*min {
                    let next = step(&cur);
                    if next.iter().all(|b| !b) {
                        return out;
                    }
                    if next == cur {
                        // A fixpoint: every further repetition gives the same ends (long
                        // minimum counts such as `{260,}` would otherwise cost one step
                        // each, and nested ones timed the matcher fuzzer out).
                        break;
                    }
                    cur = next;
                }
                // Breadth-first over further repetitions: earliest discovery is enough.
                let mut reach = cur.clone();
                let mut frontier = cur;
                let mut extra = 0u32;
                loop {
                    if max.is_some_and(|m| min + extra >= m) {
                        break;
                    }
                    let next = step(&frontier);
                    let mut new = vec![false; n + 2];
                    let mut any = false;
                    for k in 0..n + 2 {
                        if next[k] && !reach[k] {
                            new[k] = true;
                            reach[k] = true;
                            any = true;
                        }
                    }
                    if !any {
                        break;
                    }
                    frontier = new;
                    extra += 1;
                }
                out = reach;
            }
        }
        out
    }
}

fn partial_char_in(rest: &[u8], ranges: &[(char, char)]) -> bool {
    if rest.is_empty() {
        return !ranges.is_empty();
    }
    let (need, lead_bits, min_cp) = match rest[0] {
        0xC2..=0xDF => (2usize, (rest[0] & 0x1F) as u32, 0x80u32),
        0xE0..=0xEF => (3, (rest[0] & 0x0F) as u32, 0x800),
        0xF0..=0xF4 => (4, (rest[0] & 0x07) as u32, 0x10000),
        _ => return false,
    };
    if rest.len() >= need || rest[1..].iter().any(|&b| !(0x80..=0xBF).contains(&b)) {
        return false;
    }
    // The code points whose encoding starts with `rest` form the interval [lo, hi].
    let mut lo = lead_bits;
    let mut hi = lead_bits;
    for i in 1..need {
        let (a, b) = match rest.get(i) {
            Some(&c) => ((c & 0x3F) as u32, (c & 0x3F) as u32),
            None => (0, 0x3F),
        };
        lo = (lo << 6) | a;
        hi = (hi << 6) | b;
    }
    let lo = lo.max(min_cp);
    let hi = hi.min(0x10FFFF);
    ranges.iter().any(|&(a, b)| {
        let (a, b) = (a as u32, b as u32);
        // Intersect, ignoring the surrogate gap (class ranges never contain surrogates).
        let x = a.max(lo);
        let y = b.min(hi);
        x <= y && !(x >= 0xD800 && y <= 0xDFFF)
    })
}
