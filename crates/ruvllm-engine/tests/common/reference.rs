//! A reference recognizer, independent of the engine's compiler and parser: it interprets
//! the grammar IR directly. For a text of n bytes it computes, for every rule and start
//! offset, the set of offsets where the rule can end, iterating to a fixpoint (so left
//! recursion works). The extra "offset" n+1 means "ran into the end of the text while still
//! matching", which decides whether a text is a viable prefix. Slow (polynomial, fine for
//! short texts) and simple on purpose.

#![allow(clippy::needless_range_loop)] // index loops over offsets read best here

use ruvllm_engine::{Expr, Grammar};

pub struct Reference<'g> {
    /// The grammar, with every key complement replaced by its expansion (the cache below
    /// is keyed by expression address, so the expansion must live as long as the grammar).
    g: std::borrow::Cow<'g, Grammar>,
    /// Ends of (sub-expression, start) within one fixpoint round (rule ends change between
    /// rounds, so it is cleared each round): keeps nested repetitions polynomial.
    cache: std::cell::RefCell<Cache>,
}

/// Words of an [`Ends`]: texts of up to `64 * WORDS - 2` bytes.
const WORDS: usize = 8;

/// A set of end offsets `0..=n+1` as bits (offset n+1 = PARTIAL). A fixed array, not a
/// `Vec<bool>`: the unions below are the recognizer's inner loop, and copies that allocate
/// made the matcher fuzzer's oracle (instrumented allocations record a stack trace) take
/// 29 s on one input with nested stars.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Ends([u64; WORDS]);

impl Ends {
    fn new(n: usize) -> Self {
        assert!(
            n + 2 <= 64 * WORDS,
            "the reference recognizer takes texts of at most {} bytes",
            64 * WORDS - 2
        );
        Ends([0; WORDS])
    }
    fn get(&self, k: usize) -> bool {
        self.0[k / 64] >> (k % 64) & 1 == 1
    }
    fn set(&mut self, k: usize) {
        self.0[k / 64] |= 1 << (k % 64);
    }
    fn or(&mut self, other: &Ends) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
    /// The offsets in the set, in increasing order.
    fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros() as usize;
                    w &= w - 1;
                    i * 64 + b
                })
            })
        })
    }
}

/// A multiplicative hasher for the cache's (pointer, offset) keys (SipHash was a tenth
/// of the fuzzer's time).
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

type Cache =
    std::collections::HashMap<(*const Expr, usize), Ends, std::hash::BuildHasherDefault<KeyHasher>>;

impl<'g> Reference<'g> {
    pub fn new(g: &'g Grammar) -> Self {
        let g = if g.rules.iter().any(|r| has_key_complement(&r.body)) {
            let mut own = g.clone();
            for r in &mut own.rules {
                expand_key_complements(&mut r.body);
            }
            std::borrow::Cow::Owned(own)
        } else {
            std::borrow::Cow::Borrowed(g)
        };
        Reference {
            g,
            cache: Default::default(),
        }
    }

    /// Whether `text` is a sentence of the grammar.
    pub fn accepts(&self, text: &[u8]) -> bool {
        let ends = self.root_ends(text);
        ends.get(text.len())
    }

    /// Whether `text` is a prefix of some sentence.
    pub fn viable(&self, text: &[u8]) -> bool {
        let ends = self.root_ends(text);
        ends.get(text.len()) || ends.get(text.len() + 1)
    }

    fn root_ends(&self, text: &[u8]) -> Ends {
        let n = text.len();
        let nr = self.g.rules.len();
        // memo[r][i] = ends of rule r started at i
        let mut memo: Vec<Vec<Ends>> = vec![vec![Ends::new(n); n + 1]; nr];
        loop {
            let mut changed = false;
            self.cache.borrow_mut().clear();
            for r in 0..nr {
                for i in 0..=n {
                    let e = self.ends(&self.g.rules[r].body, i, text, &memo);
                    let mut grown = memo[r][i];
                    grown.or(&e);
                    if grown != memo[r][i] {
                        memo[r][i] = grown;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        memo[self.g.root as usize][0]
    }

    fn ends(&self, e: &Expr, i: usize, text: &[u8], memo: &[Vec<Ends>]) -> Ends {
        let key = (e as *const Expr, i);
        if let Some(&hit) = self.cache.borrow().get(&key) {
            return hit;
        }
        let out = self.ends_uncached(e, i, text, memo);
        self.cache.borrow_mut().insert(key, out);
        out
    }

    /// The ends of `x` started at any offset of `cur` (PARTIAL carried over).
    fn step(&self, x: &Expr, cur: &Ends, text: &[u8], memo: &[Vec<Ends>]) -> Ends {
        let n = text.len();
        let mut next = Ends::new(n);
        if cur.get(n + 1) {
            next.set(n + 1);
        }
        for j in cur.ones().filter(|&j| j <= n) {
            next.or(&self.ends(x, j, text, memo));
        }
        next
    }

    fn ends_uncached(&self, e: &Expr, i: usize, text: &[u8], memo: &[Vec<Ends>]) -> Ends {
        let n = text.len();
        let mut out = Ends::new(n);
        match e {
            Expr::Empty => out.set(i),
            Expr::KeyComplement(_) => unreachable!("expanded in Reference::new"),
            Expr::Literal(l) => {
                let rest = &text[i..];
                if rest.len() >= l.len() {
                    if &rest[..l.len()] == l.as_slice() {
                        out.set(i + l.len());
                    }
                } else if l.starts_with(rest) {
                    out.set(n + 1);
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
                                out.set(i + len);
                            }
                            break;
                        }
                    } else {
                        // Partial: is `rest` a prefix of the encoding of some char in the class?
                        if partial_char_in(rest, ranges) {
                            out.set(n + 1);
                        }
                        break;
                    }
                }
            }
            Expr::Bytes(ranges) => {
                if i < n {
                    if ranges.iter().any(|&(a, b)| a <= text[i] && text[i] <= b) {
                        out.set(i + 1);
                    }
                } else if !ranges.is_empty() {
                    out.set(n + 1);
                }
            }
            Expr::Ref(r) => {
                if i <= n {
                    out = memo[*r as usize][i];
                }
            }
            Expr::Seq(v) => {
                let mut cur = Ends::new(n);
                cur.set(i);
                for x in v {
                    cur = self.step(x, &cur, text, memo);
                }
                out = cur;
            }
            Expr::Alt(v) => {
                for x in v {
                    out.or(&self.ends(x, i, text, memo));
                }
            }
            Expr::Repeat { e, min, max } => {
                let mut cur = Ends::new(n);
                cur.set(i);
                for _ in 0..*min {
                    let next = self.step(e, &cur, text, memo);
                    if next.is_empty() {
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
                let mut reach = cur;
                let mut frontier = cur;
                let mut extra = 0u32;
                loop {
                    if max.is_some_and(|m| min + extra >= m) {
                        break;
                    }
                    let next = self.step(e, &frontier, text, memo);
                    let mut new = Ends::new(n);
                    let mut any = false;
                    for (k, (w, r)) in next.0.iter().zip(reach.0.iter_mut()).enumerate() {
                        new.0[k] = w & !*r;
                        *r |= w;
                        any |= new.0[k] != 0;
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

/// Whether `e` holds a key complement.
fn has_key_complement(e: &Expr) -> bool {
    match e {
        Expr::KeyComplement(_) => true,
        Expr::Seq(v) | Expr::Alt(v) => v.iter().any(has_key_complement),
        Expr::Repeat { e, .. } => has_key_complement(e),
        _ => false,
    }
}

/// `e` with every key complement replaced by its expansion.
fn expand_key_complements(e: &mut Expr) {
    match e {
        Expr::KeyComplement(k) => {
            *e = k.expand();
            expand_key_complements(e);
        }
        Expr::Seq(v) | Expr::Alt(v) => v.iter_mut().for_each(expand_key_complements),
        Expr::Repeat { e, .. } => expand_key_complements(e),
        _ => {}
    }
}
