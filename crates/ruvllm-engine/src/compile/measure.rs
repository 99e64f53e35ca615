//! Measures of IR expressions that decide how a rule is lowered: its weight (about its
//! regex's size) and depth, whether it is regular at all, and the measures of key
//! complements taken without building their expansion.
//!
//! Part of the lowering (the parent module); it uses the IR and the compile caches.

use super::*;

/// The elements of `e` as a flat sequence (nested sequences spliced, empties dropped).
pub(super) fn flatten_seq<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Seq(v) => v.iter().for_each(|x| flatten_seq(x, out)),
        Expr::Empty => {}
        other => out.push(other),
    }
}

pub(super) fn is_lexable(e: &Expr, inl: &[bool]) -> bool {
    match e {
        Expr::Ref(r) => inl[*r as usize],
        Expr::Seq(v) | Expr::Alt(v) => v.iter().all(|x| is_lexable(x, inl)),
        Expr::Repeat { e, .. } => is_lexable(e, inl),
        Expr::KeyComplement(k) => is_lexable(k.ch(), inl),
        _ => true,
    }
}

pub(super) fn expr_depth(e: &Expr, d: &[usize]) -> usize {
    match e {
        Expr::Ref(r) => d[*r as usize],
        Expr::Seq(v) | Expr::Alt(v) => 1 + v.iter().map(|x| expr_depth(x, d)).max().unwrap_or(0),
        Expr::Repeat { e, .. } => 1 + expr_depth(e, d),
        Expr::KeyComplement(k) => measure_keys(k, Measure::Depth(expr_depth(k.ch(), d))),
        _ => 1,
    }
}

/// What [`measure_keys`] computes: [`expr_depth`] or [`expr_weight`] of a key complement's
/// expansion, given that of its string character.
#[derive(Clone, Copy)]
pub(super) enum Measure {
    Depth(usize),
    Weight(usize),
}

/// Measures a key complement's expansion as functions of its string character's weight
/// `w` and depth `d`: `[base, uses, d0, d1]` for weight `base + uses * w` and depth
/// `max(d0, d1 + d)` (`d1` is 0 where the character does not occur). The expansion is a
/// tree, so both are linear in (or a maximum over) the character's occurrences.
pub(super) struct KeyMeasure;

impl crate::grammar::json_string::KeySink for KeyMeasure {
    type E = [usize; 4];
    fn lit(&mut self, b: &[u8]) -> [usize; 4] {
        [b.len().max(1), 0, 1, 0]
    }
    fn expr(&mut self, e: Expr) -> [usize; 4] {
        // No references: the pieces are character classes and escapes.
        [expr_weight(&e, &[]), 0, expr_depth(&e, &[]), 0]
    }
    fn any(&mut self) -> [usize; 4] {
        // `ch{0,}`: a repetition weighs its item once when unbounded, and is one level.
        [1, 1, 1, 1]
    }
    fn seq(&mut self, v: Vec<[usize; 4]>) -> [usize; 4] {
        self.alt(v)
    }
    fn alt(&mut self, v: Vec<[usize; 4]>) -> [usize; 4] {
        let mut m: [usize; 4] = [1, 0, 0, 0];
        for x in v {
            m[0] = m[0].saturating_add(x[0]);
            m[1] = m[1].saturating_add(x[1]);
            m[2] = m[2].max(x[2]);
            m[3] = m[3].max(x[3]);
        }
        m[2] += 1;
        if m[3] > 0 {
            m[3] += 1;
        }
        m
    }
}

/// [`expr_depth`] or [`expr_weight`] of `k`'s expansion, without building it, so that a key
/// complement is lowered exactly as its expansion would be. Cost: one walk of the key trie
/// the first time `k` is measured (the compiler measures every rule once or more), O(1)
/// after.
pub(super) fn measure_keys(k: &crate::grammar::KeyComplement, m: Measure) -> usize {
    let [base, uses, d0, d1] = k.measured(measure_key_set);
    match m {
        Measure::Weight(w) => base.saturating_add(uses.saturating_mul(w)),
        Measure::Depth(d) if d1 > 0 => d0.max(d1.saturating_add(d)),
        Measure::Depth(_) => d0,
    }
}

/// The measure of the key complement of `keys` (see [`KeyMeasure`]): one walk of the
/// key trie. Cost: O(trie).
pub(super) fn measure_key_set(keys: &[Vec<char>]) -> [usize; 4] {
    crate::grammar::json_string::key_complement_body(keys, &mut KeyMeasure)
}

/// Measures every key complement of `g` through `caches`, which remember the measures
/// by key set: schemas repeat their key sets (`name`/`type`/`value` objects), within a
/// schema and across schemas, and the walk of a set's trie was 5% of compile time on the
/// MaskBench files that take 7-16 ms to compile. Each complement keeps its measure, so
/// [`measure_keys`] then finds it there. Cost: a walk of the grammar's expressions, a
/// lookup per complement.
pub(super) fn prime_key_measures(g: &Grammar, caches: &cache::Caches) {
    fn walk(e: &Expr, caches: &cache::Caches) {
        match e {
            Expr::Seq(v) | Expr::Alt(v) => v.iter().for_each(|x| walk(x, caches)),
            Expr::Repeat { e, .. } => walk(e, caches),
            Expr::KeyComplement(k) => {
                k.measured(|keys| caches.measure_key_set(keys, measure_key_set));
                walk(k.ch(), caches);
            }
            _ => {}
        }
    }
    for r in &g.rules {
        walk(&r.body, caches);
    }
}

/// Whether `e` is one fixed byte string (a literal, or a sequence of them: the schema front
/// end writes an enum's string value character by character).
pub(super) fn is_fixed_text(e: &Expr) -> bool {
    match e {
        Expr::Literal(_) => true,
        Expr::Seq(v) => v.iter().all(is_fixed_text),
        _ => false,
    }
}

pub(super) fn expr_weight(e: &Expr, w: &[usize]) -> usize {
    match e {
        Expr::Ref(r) => w[*r as usize],
        Expr::Literal(l) => l.len().max(1),
        Expr::Seq(v) | Expr::Alt(v) => v
            .iter()
            .fold(1usize, |a, x| a.saturating_add(expr_weight(x, w))),
        Expr::Repeat { e, min, max } => {
            let k = max.unwrap_or(*min).max(1) as usize;
            1usize.saturating_add(expr_weight(e, w).saturating_mul(k))
        }
        Expr::KeyComplement(k) => measure_keys(k, Measure::Weight(expr_weight(k.ch(), w))),
        _ => 1,
    }
}
