//! Shortest derivations of the Earley grammar: for every rule, the fewest bytes it can
//! derive and the alternative that does it; for every parser position, the fewest bytes
//! that finish its alternative from there.
//!
//! These are the grammar half of a shortest completion (`crate::matching::complete` adds the
//! parser's stack; `super::automata::dist` gives the lexemes' half). They depend on the grammar
//! only, not on a vocabulary, so a compiled grammar computes them once, on first use
//! (grammars never asked for a completion never pay).
//!
//! The computation is Knuth's generalization of Dijkstra's algorithm to grammars (1977):
//! a rule's cost is final once the cheapest alternative whose every rule is final has
//! been popped from a priority queue. Each alternative is touched once per rule it
//! mentions: O(positions · log rules). The derivation it picks for each rule uses only
//! rules finished before it, so following the picks always ends (no cycle), and a
//! shortest text is built with an explicit stack (nesting can be deep).
//!
//! Costs are bytes, saturating at [`INF`]; a rule whose shortest text is longer than
//! [`MAX_TEXT`] is treated as having none (a completion that long is never built).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::automata::dist::{add, INF};
use super::{CompiledGrammar, LexemeId, Sym};

/// The longest shortest text ever built (bytes): a grammar whose completion needs more is
/// treated as having none from that state (no generation could write it: 64 KiB take
/// thousands of tokens of any vocabulary, and a server's `max_tokens` is bounded). Bounds
/// the text built and split into tokens per candidate.
pub(crate) const MAX_TEXT: u32 = 1 << 16;

/// Shortest derivations of one compiled grammar (see the module docs).
#[derive(Debug)]
pub(crate) struct Shortest {
    /// Per rule: the first position of the alternative that derives the fewest bytes
    /// (their count is `suffix` of that position).
    pub(crate) alt: Vec<u32>,
    /// Per position: the fewest bytes from it to the end of its alternative (the symbol
    /// at the position included; 0 at an end).
    pub(crate) suffix: Vec<u32>,
    /// Per position: whether that shortest suffix completes a checked rule (the
    /// alternative's own rule, which completes at the end, is not counted here).
    pub(crate) suffix_checked: Vec<bool>,
}

impl Shortest {
    /// Computes the shortest derivations of `g`. Cost: O(positions · log rules), plus the
    /// distance tables of the lexemes whose start states are asked (first use each).
    pub(crate) fn of(g: &CompiledGrammar) -> Shortest {
        let nr = g.rule_alts.len();
        // Each lexeme's shortest text from its start, once.
        let starts: Vec<u32> = g.lexemes.iter().map(|d| d.start_dist()).collect();
        let lex_cost = |l: LexemeId| starts[l.ix()];
        // Per alternative (by its start position): rules still unknown, cost so far.
        let mut pending: Vec<u32> = vec![0; g.syms.len()];
        let mut partial: Vec<u32> = vec![0; g.syms.len()];
        // Occurrences of each rule inside alternatives (the alternatives' start positions).
        let mut occ_start = vec![0u32; nr + 1];
        let mut heap: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::new();
        let mut alt_of: Vec<u32> = vec![0; g.syms.len()];
        for alts in &g.rule_alts {
            for &a in alts {
                let mut p = a as usize;
                loop {
                    alt_of[p] = a;
                    match g.syms[p] {
                        Sym::Lex(l) => partial[a as usize] = add(partial[a as usize], lex_cost(l)),
                        Sym::Rule(r) => {
                            pending[a as usize] += 1;
                            occ_start[r.ix() + 1] += 1;
                        }
                        Sym::End(_) => break,
                    }
                    p += 1;
                }
            }
        }
        for r in 0..nr {
            occ_start[r + 1] += occ_start[r];
        }
        let mut fill = occ_start.clone();
        let mut occ = vec![0u32; occ_start[nr] as usize];
        for (p, s) in g.syms.iter().enumerate() {
            if let Sym::Rule(r) = s {
                occ[fill[r.ix()] as usize] = alt_of[p];
                fill[r.ix()] += 1;
            }
        }
        for alts in &g.rule_alts {
            for &a in alts {
                if pending[a as usize] == 0 && partial[a as usize] != INF {
                    heap.push(Reverse((partial[a as usize], a)));
                }
            }
        }
        let mut rule = vec![INF; nr];
        let mut alt = vec![u32::MAX; nr];
        let mut done = vec![false; nr];
        let mut rule_checked = vec![false; nr];
        while let Some(Reverse((cost, a))) = heap.pop() {
            let r = (g.pos_rule[a as usize]).ix();
            if done[r] {
                continue;
            }
            done[r] = true;
            rule[r] = cost;
            alt[r] = a;
            // Checked when the rule itself is, or the alternative's rules' are (all final).
            let mut checked = g.rule_check[r].is_some();
            let mut p = a as usize;
            while let Sym::Lex(_) | Sym::Rule(_) = g.syms[p] {
                if let Sym::Rule(x) = g.syms[p] {
                    checked |= rule_checked[x.ix()];
                }
                p += 1;
            }
            rule_checked[r] = checked;
            for &b in &occ[occ_start[r] as usize..occ_start[r + 1] as usize] {
                let b = b as usize;
                partial[b] = add(partial[b], cost);
                pending[b] -= 1;
                if pending[b] == 0 && partial[b] != INF {
                    heap.push(Reverse((partial[b], b as u32)));
                }
            }
        }
        // Suffixes, backwards through each alternative.
        let mut suffix = vec![0u32; g.syms.len()];
        let mut suffix_checked = vec![false; g.syms.len()];
        for p in (0..g.syms.len()).rev() {
            let (c, k) = match g.syms[p] {
                Sym::End(_) => (0, false),
                Sym::Lex(l) => (add(lex_cost(l), suffix[p + 1]), suffix_checked[p + 1]),
                Sym::Rule(r) => (
                    add(rule[r.ix()], suffix[p + 1]),
                    rule_checked[r.ix()] || suffix_checked[p + 1],
                ),
            };
            suffix[p] = if c > MAX_TEXT { INF } else { c };
            suffix_checked[p] = k;
        }
        Shortest {
            alt,
            suffix,
            suffix_checked,
        }
    }

    /// Appends a shortest text of the symbols from position `pos` to the end of its
    /// alternative (nothing when that is [`INF`]). Cost: O(bytes appended + positions
    /// visited), with an explicit stack. Each lexeme's text is written by `lexeme` (given the lexeme's index; it must
    /// append a text of the lexeme's language: its shortest, for the shortest text).
    pub(crate) fn suffix_text_with(
        &self,
        g: &CompiledGrammar,
        pos: u32,
        out: &mut Vec<u8>,
        lexeme: &mut dyn FnMut(u32, &mut Vec<u8>),
    ) {
        if self.suffix[pos as usize] == INF {
            return;
        }
        let mut stack: Vec<u32> = vec![pos];
        while let Some(p) = stack.pop() {
            match g.syms[p as usize] {
                Sym::End(_) => {}
                Sym::Lex(l) => {
                    lexeme(l.0, out);
                    stack.push(p + 1);
                }
                Sym::Rule(r) => {
                    stack.push(p + 1);
                    stack.push(self.alt[r.ix()]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::compile::CompiledGrammar;
    use crate::grammar::Grammar;
    use crate::Limits;

    fn compiled(gbnf: &str) -> CompiledGrammar {
        let g = Grammar::from_gbnf(gbnf, &Limits::default()).unwrap();
        CompiledGrammar::new(&g, &Limits::default()).unwrap()
    }

    /// The shortest text of the root is a sentence, as short as the grammar allows, and
    /// recursion picks its base case.
    #[test]
    fn root_shortest_texts() {
        for (gbnf, want) in [
            (r#"root ::= "ab" | "c" root "d""#, "ab"),
            (
                r#"root ::= x x ; x ::= "(" x ")" | "[]""#.replace(" ; ", "\n").as_str(),
                "[][]",
            ),
            (r#"root ::= "x"+ "yy" | "zzz""#, "xyy"),
            (
                r#"root ::= e ; e ::= e "+" t | t ; t ::= "1" | "(" e ")""#
                    .replace(" ; ", "\n")
                    .as_str(),
                "1",
            ),
        ] {
            let g = compiled(gbnf);
            let s = g.shortest();
            let root = g.root.ix();
            let mut out = Vec::new();
            s.suffix_text_with(&g, s.alt[root], &mut out, &mut |l, out| {
                let d = &g.lexemes[l as usize];
                d.complete_into(d.start(), out);
            });
            assert_eq!(String::from_utf8(out).unwrap(), want, "{gbnf}");
            assert_eq!(
                s.suffix[s.alt[root] as usize] as usize,
                want.len(),
                "{gbnf}"
            );
        }
    }
}
