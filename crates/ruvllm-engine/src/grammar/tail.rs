//! Right recursion as iteration: a rule `A ::= α A | β` is rewritten `A ::= α* β`.
//!
//! An Earley parser completes a right-recursive rule once per level: after `n` characters
//! of `chars ::= char chars | ""` (the way many hand-written GBNF and EBNF grammars spell
//! a string), each byte completes `n` nested `chars` items, so a mask costs time linear in
//! the string so far (80-360 ms per mask in a 1,000-character string, then the mask time
//! budget). Leo's items make such completions constant time inside the parser; this
//! rewrite removes the recursion before the parser sees it, which also lets a rule whose
//! `α` and `β` are regular become one lexeme. Repetitions are lowered to left recursion
//! (`S ::= ε | S x`), which an Earley parser runs in constant work per token.
//!
//! The rewrite keeps the language exactly: `A`'s language is the least solution of
//! `X = αX ∪ β`, which is `α*β` (Arden's lemma) whatever `α` and `β` are, including
//! languages that refer back to `A` through other rules (the derivation trees of the two
//! grammars differ only in how the chain of `A`s down the right spine is bracketed).
//! It applies where every direct reference of `A` to itself is the last item of an
//! alternative (through `?` and nested alternatives, and through rules whose body ends in
//! such a reference, followed up to [`MAX_TAIL_INLINE`] deep: `A ::= x B`, `B ::= y A | z`).
//! A rule with a semantic check keeps its structure: its check must see each completion.
//!
//! Cost: one pass over each rule's body, and a copy of the grammar when a rule changes.
//!
//! Part of the grammar front ends' shared IR. Owns: the rewrite. Uses: the IR.

use super::ir::{visit_refs, Expr, Grammar, RuleId};

/// How many rules deep a tail reference to another rule is followed.
const MAX_TAIL_INLINE: usize = 4;

/// Whether `e` refers to rule `a` itself (not through other rules).
fn refers_to(e: &Expr, a: RuleId) -> bool {
    let mut found = false;
    visit_refs(e, &mut |r| found |= r == a);
    found
}

/// A language as the alternatives that end in the rule (`alphas`, each followed by it)
/// and those without it (`betas`).
#[derive(Default)]
struct Split {
    alphas: Vec<Expr>,
    betas: Vec<Expr>,
}

fn one_of(mut v: Vec<Expr>) -> Expr {
    if v.len() == 1 {
        v.pop().unwrap()
    } else {
        Expr::Alt(v)
    }
}

impl Grammar {
    /// The grammar with each right-recursive rule iterated (see the module docs), or
    /// `None` when no rule is. Cost: O(grammar size), plus a copy when one changes.
    pub(crate) fn iterate_tail_recursion(&self) -> Option<Grammar> {
        let mut checked = vec![false; self.rules.len()];
        for (r, _) in &self.checks {
            checked[*r as usize] = true;
        }
        let mut out: Option<Grammar> = None;
        for a in 0..self.rules.len() as RuleId {
            let body = &self.rules[a as usize].body;
            if checked[a as usize] || !self.tail_refers(body, a, &checked, 0) {
                continue;
            }
            let mut split = Split::default();
            if !self.split(body, a, &checked, 0, &mut split)
                || split.alphas.is_empty()
                || split.betas.is_empty()
            {
                continue;
            }
            let new_body = Expr::Seq(vec![
                Expr::Repeat {
                    e: Box::new(one_of(split.alphas)),
                    min: 0,
                    max: None,
                },
                one_of(split.betas),
            ]);
            out.get_or_insert_with(|| self.clone()).rules[a as usize].body = new_body;
        }
        out
    }

    /// Whether `e` refers to `a`, directly or through the rules [`Grammar::split`] would
    /// follow.
    fn tail_refers(&self, e: &Expr, a: RuleId, checked: &[bool], depth: usize) -> bool {
        if refers_to(e, a) {
            return true;
        }
        match e {
            Expr::Ref(b) => self.inlinable(*b, a, checked, depth),
            Expr::Alt(v) => v.iter().any(|x| self.tail_refers(x, a, checked, depth)),
            Expr::Seq(v) => v
                .last()
                .is_some_and(|x| self.tail_refers(x, a, checked, depth)),
            Expr::Repeat {
                e,
                min: 0,
                max: Some(1),
            } => self.tail_refers(e, a, checked, depth),
            _ => false,
        }
    }

    /// Whether the body of rule `b` (not `a`, unchecked) is followed when it ends an
    /// alternative of `a`: it refers to `a` itself, within the depth.
    fn inlinable(&self, b: RuleId, a: RuleId, checked: &[bool], depth: usize) -> bool {
        b != a
            && depth < MAX_TAIL_INLINE
            && !checked[b as usize]
            && self.tail_refers(&self.rules[b as usize].body, a, checked, depth + 1)
    }

    /// Adds `e`'s alternatives to `out`: false when `a` occurs in `e` other than last.
    fn split(&self, e: &Expr, a: RuleId, checked: &[bool], depth: usize, out: &mut Split) -> bool {
        match e {
            Expr::Ref(r) if *r == a => {
                out.alphas.push(Expr::Empty);
                return true;
            }
            Expr::Ref(b) if self.inlinable(*b, a, checked, depth) => {
                // Followed when its body splits; kept as a reference otherwise.
                let mut inner = Split::default();
                if self.split(
                    &self.rules[*b as usize].body,
                    a,
                    checked,
                    depth + 1,
                    &mut inner,
                ) {
                    out.alphas.extend(inner.alphas);
                    out.betas.extend(inner.betas);
                } else {
                    out.betas.push(e.clone());
                }
                return true;
            }
            _ => {}
        }
        if !self.tail_refers(e, a, checked, depth) {
            out.betas.push(e.clone());
            return true;
        }
        match e {
            Expr::Alt(v) => v.iter().all(|x| self.split(x, a, checked, depth, out)),
            Expr::Seq(v) => {
                let Some((last, prefix)) = v.split_last() else {
                    return false;
                };
                if prefix.iter().any(|x| refers_to(x, a)) {
                    return false;
                }
                let mut inner = Split::default();
                if !self.split(last, a, checked, depth, &mut inner) {
                    return false;
                }
                let with_prefix = |x: Expr| {
                    let mut s = prefix.to_vec();
                    s.push(x);
                    Expr::Seq(s)
                };
                out.alphas.extend(inner.alphas.into_iter().map(with_prefix));
                out.betas.extend(inner.betas.into_iter().map(with_prefix));
                true
            }
            Expr::Repeat {
                e,
                min: 0,
                max: Some(1),
            } => {
                out.betas.push(Expr::Empty);
                self.split(e, a, checked, depth, out)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;

    fn gbnf(text: &str) -> Grammar {
        Grammar::from_gbnf(text, &Limits::default()).unwrap()
    }

    fn rule<'a>(g: &'a Grammar, name: &str) -> &'a Expr {
        &g.rules.iter().find(|r| r.name == name).unwrap().body
    }

    #[test]
    fn right_recursion_becomes_iteration() {
        let g = gbnf("root ::= \"\\\"\" chars \"\\\"\"\nchars ::= [a-z] chars | \"\"\n");
        let t = g.iterate_tail_recursion().expect("rewritten");
        assert!(!refers_to(rule(&t, "chars"), 1), "{:?}", rule(&t, "chars"));
        // Through `?` and a second rule.
        let g = gbnf("root ::= list\nlist ::= item (\",\" list)?\nitem ::= [0-9]+\n");
        let t = g.iterate_tail_recursion().expect("rewritten");
        let list = g.rules.iter().position(|r| r.name == "list").unwrap() as RuleId;
        assert!(!refers_to(rule(&t, "list"), list));
        let g = gbnf("root ::= a\na ::= \"x\" b | \"z\"\nb ::= \"y\" a\n");
        let t = g.iterate_tail_recursion().expect("rewritten");
        assert!(!refers_to(rule(&t, "a"), 1));
    }

    #[test]
    fn other_recursion_is_kept() {
        for text in [
            // Middle and left recursion: nothing to iterate.
            "root ::= \"(\" root \")\" | \"x\"\n",
            "root ::= root \"x\" | \"x\"\n",
            // A self-reference before the end of an alternative.
            "root ::= \"x\" root root | \"y\"\n",
        ] {
            assert!(gbnf(text).iterate_tail_recursion().is_none(), "{text}");
        }
    }
}
