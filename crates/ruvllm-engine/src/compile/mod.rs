//! Lowering the IR into lexemes and an Earley grammar.
//!
//! # Design
//!
//! A byte-level Earley parser is exact for any context-free grammar (left recursion,
//! ambiguity and nullable rules included) but pays for every byte. Most of a real grammar is
//! regular (string contents, numbers, keywords, whitespace), so the compiler carves the
//! grammar into two layers, the lexer/parser split that the fastest engines use:
//!
//! * **Lexemes**: every maximal regular sub-expression (terminals, and references to rules
//!   that are not recursive and not too large once inlined) becomes one DFA. Inside a
//!   lexeme, a byte costs one table lookup.
//! * **Earley rules**: what is left (recursion, and alternations or repetitions that contain
//!   recursive rules) is an Earley grammar whose terminals are lexemes. An Earley item
//!   carries the DFA state of the lexeme it is in, so lexemes need no separate tokenizer and
//!   no lexing ambiguity arises: the parser simply follows every path.
//!
//! A lexeme whose DFA would exceed the limits is split (a sequence into its elements, an
//! alternation into a rule, a repetition into helper rules), so size limits never change the
//! language, only where the work happens. Repetitions of non-regular parts use left-recursive
//! helper rules (`S ::= ε | S x`), which Earley parses in linear time.
//!
//! Owns: `CompiledGrammar` (the Earley grammar over lexemes, immutable) and the `Lowerer`
//! state of one compile. Uses: the IR (`grammar`), its children (automata, caches, the
//! lowering by concern), `byteset`, `error`, `util`; never the vocabulary or the token
//! tables.

pub(crate) mod automata;
mod build;
pub(crate) mod cache;
mod compose;
pub(crate) mod equiv;
pub(crate) mod keys;
mod setpool;
pub(crate) mod shortest;
mod subset;

// The lowering, by concern (each a part of `Lowerer`).
mod finish;
mod keying;
mod lexemes;
mod measure;
mod repeat;
use keying::*;
use lexemes::*;
use measure::*;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use regex_syntax::hir::{self, Hir};

pub use automata::dfa::{Dfa, Lexeme};

use crate::error::GrammarError;
use crate::grammar::{Check, Expr, Grammar};
pub(crate) use crate::util::{EarleyRuleId, LexemeId};
use crate::Limits;

/// A grammar symbol at a parser position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sym {
    /// A lexeme.
    Lex(LexemeId),
    /// A nonterminal (an Earley rule).
    Rule(EarleyRuleId),
    /// End of an alternative of the given rule.
    End(EarleyRuleId),
}

/// A grammar ready for matching: lexeme DFAs plus a flattened Earley grammar. Immutable and
/// shared (`Arc`) by every matcher and every vocabulary it is used with.
#[derive(Debug)]
pub struct CompiledGrammar {
    pub(crate) syms: Vec<Sym>,
    pub(crate) rule_alts: Vec<Vec<u32>>,
    pub(crate) rule_nullable: Vec<bool>,
    pub(crate) rule_name: Vec<String>,
    pub(crate) root: EarleyRuleId,
    pub(crate) lexemes: Vec<std::sync::Arc<Lexeme>>,
    pub(crate) lex_name: Vec<String>,
    pub(crate) n_lex_states: usize,
    /// For each position, the rule it belongs to.
    pub(crate) pos_rule: Vec<EarleyRuleId>,
    /// For each lexeme position: bytes that may follow once that lexeme completes (an
    /// over-approximation through FIRST/FOLLOW sets). The parser closes a set only when the
    /// next byte is in here for some accepting item.
    pub(crate) lex_follow: Vec<crate::byteset::ByteSet>,
    /// Semantic check per Earley rule (see [`crate::grammar::ValueCheck`]).
    pub(crate) rule_check: Vec<Option<Check>>,
    /// Whether any rule has a check (the parser then tracks the output bytes).
    pub(crate) has_checks: bool,
    /// Per lexeme position: completing the lexeme may complete a checked rule at once
    /// (the rest of its alternative, and of each enclosing one up to a checked rule, is
    /// nullable). Masks re-verify such tokens with the parser.
    pub(crate) lex_check_sensitive: Vec<bool>,
    /// Whether some checked rule derives the empty text (it can then complete, and its
    /// check run, at any set, not only where a sensitive lexeme completes).
    pub(crate) nullable_check: bool,
    /// Shortest derivations (see [`shortest`]), computed on first use.
    shortest: std::sync::OnceLock<shortest::Shortest>,
    /// Every byte a shortest completion can write (see
    /// [`CompiledGrammar::completion_bytes`]), computed on first use.
    completion_bytes: std::sync::OnceLock<crate::byteset::ByteSet>,
    /// The source grammar's warnings ([`crate::GrammarWarning`]), for the caller to report.
    pub(crate) warnings: Vec<crate::grammar::GrammarWarning>,
}

/// Size figures of a compiled grammar.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrammarStats {
    /// Earley rules.
    pub rules: usize,
    /// Parser positions (symbols plus one end marker per alternative).
    pub positions: usize,
    /// Lexeme DFAs.
    pub lexemes: usize,
    /// DFA states over all lexemes.
    pub lexeme_states: usize,
    /// Approximate heap bytes of the DFAs.
    pub dfa_bytes: usize,
}

impl CompiledGrammar {
    /// Compiles an IR grammar. Cost: linear in the grammar plus DFA construction for each
    /// distinct lexeme, all bounded by `limits`.
    ///
    /// Builds every lexeme afresh: an [`crate::Engine`] compiles with its cache of
    /// lexemes, which other grammars share ([`crate::Engine::compile`]).
    pub fn new(g: &Grammar, limits: &Limits) -> Result<CompiledGrammar, GrammarError> {
        Self::compile_in(g, limits, &cache::Caches::private())
    }

    /// [`CompiledGrammar::new`] with lexemes looked up in, and added to, `caches`.
    pub(crate) fn compile_in(
        g: &Grammar,
        limits: &Limits,
        caches: &cache::Caches,
    ) -> Result<CompiledGrammar, GrammarError> {
        // Front ends prune already (the schema compiler does): copy and prune only when
        // that would change something.
        let pruned;
        let g = if g.is_pruned() {
            g
        } else {
            let mut p = g.clone();
            p.prune_unproductive()?;
            pruned = p;
            &pruned
        };
        // Right recursion as iteration (`A ::= α A | β` is `A ::= α* β`), which the parser
        // runs in constant work per byte (see `grammar::tail`).
        let iterated;
        let g = match g.iterate_tail_recursion() {
            Some(t) => {
                iterated = t;
                &iterated
            }
            None => g,
        };
        // Copies of one rule (a schema's combinations of `required` sets) become one.
        match g.merge_equal_rules() {
            Some(m) => Lowerer::new(&m, limits, caches).run(),
            None => Lowerer::new(g, limits, caches).run(),
        }
    }

    /// What the front end accepted with a warning (an unknown JSON Schema `format`, read as
    /// an annotation), carried from the source [`Grammar`]. Cost: O(1).
    pub fn warnings(&self) -> &[crate::grammar::GrammarWarning] {
        &self.warnings
    }

    /// Size figures.
    pub fn stats(&self) -> GrammarStats {
        GrammarStats {
            rules: self.rule_alts.len(),
            positions: self.syms.len(),
            lexemes: self.lexemes.len(),
            lexeme_states: self.n_lex_states,
            dfa_bytes: self.lexemes.iter().map(|d| d.memory()).sum(),
        }
    }

    /// The shortest derivations of every rule and position (see [`shortest`]). Cost:
    /// O(positions · log rules) on the first call, a load after.
    pub(crate) fn shortest(&self) -> &shortest::Shortest {
        self.shortest.get_or_init(|| shortest::Shortest::of(self))
    }

    /// Every byte a shortest completion (`crate::matching::complete`) can write: the union of the
    /// lexemes' [`Lexeme::completion_bytes`]. Cost: a pass over the lexemes' states on the
    /// first call, a load after.
    pub(crate) fn completion_bytes(&self) -> crate::byteset::ByteSet {
        *self.completion_bytes.get_or_init(|| {
            let mut b = crate::byteset::ByteSet::EMPTY;
            for l in &self.lexemes {
                b.union_with(&l.completion_bytes());
            }
            b
        })
    }

    /// Describes what the parser expects at position `pos` (rule name and lexeme).
    pub(crate) fn describe_pos(&self, pos: u32) -> String {
        let rule = &self.rule_name[(self.pos_rule[pos as usize]).ix()];
        match self.syms[pos as usize] {
            Sym::Lex(l) => format!("{rule}: {}", self.lex_name[l.ix()]),
            _ => rule.clone(),
        }
    }
}

struct Lowerer<'a> {
    g: &'a Grammar,
    limits: &'a Limits,
    /// Where lexemes are looked up and cached (the engine's, or one compile's own).
    caches: &'a cache::Caches,
    inlinable: Vec<bool>,
    weight: Vec<usize>,
    hir_cache: Vec<Option<Hir>>,
    /// The structural key of each rule's body, once written (see [`Lowerer::expr_key`]).
    key_cache: Vec<Option<(std::sync::Arc<[u8]>, KeyKind)>>,
    /// [`Lowerer::long_repeat`] of each inlinable rule, once known.
    long_repeat_memo: Vec<Option<bool>>,
    rule_map: Vec<Option<u32>>,
    queue: Vec<(u32, u32)>,
    // Output.
    rules: Vec<Vec<Vec<Sym>>>,
    rule_name: Vec<String>,
    rule_check: Vec<Option<Check>>,
    ir_check: Vec<Option<Check>>,
    lexemes: Vec<std::sync::Arc<Lexeme>>,
    lex_name: Vec<String>,
    /// This grammar's lexemes by key: a printed regex, or a structural key (see
    /// [`Lowerer::lexeme_of`]), which starts with a byte no printed key starts with.
    lex_map: HashMap<Vec<u8>, u32>,
    /// Runs of elements already lowered to one lexeme, by a hash of the run: a schema
    /// repeats the same run (a string value, a number) in many places, and finding it
    /// here skips building and printing its regex (58% of the lexeme lookups of the
    /// MaskBench sample found their lexeme already in this grammar). Exact: rule ids
    /// name the same rules throughout one grammar, and a run's lowering depends on the
    /// run alone.
    run_memo: HashMap<u64, Vec<(Vec<Expr>, u32)>>,
    total_syms: usize,
    current_rule: String,
    /// DFA states built so far (plus `max_lexeme_states` for each attempt that hit a
    /// limit): bounds total compile time across many lexemes.
    dfa_spent: usize,
    started: std::time::Instant,
}

/// Regular parts heavier than this are not merged with their neighbours into one lexeme.
const SHARE_WEIGHT: usize = 256;

/// Alternations with fewer alternatives than this keep one Earley alternative each (see
/// [`Lowerer::alts`]).
const ALT_GROUP_MIN: usize = 8;

/// Largest repetition span lowered as one helper chain.
const CHUNK: u32 = 64;

/// Repetitions of more items than this, nested in a regular run, are split out as counted
/// lexemes rather than unrolled into a dense DFA (unless the run is light, see
/// [`NESTED_DENSE_WEIGHT`]).
const LONG_REPEAT: u32 = 32;

/// Runs up to this weight get a dense DFA even with a long repetition nested inside: a
/// `hostname` (labels of up to 63 characters, `{0,58}` inside each) is about 300, a few
/// hundred DFA states; split, its labels were helper rules whose every character crossed
/// a lexeme boundary, and masks inside it walked the parser (4-14 ms each).
const NESTED_DENSE_WEIGHT: usize = 512;

/// Unrolled size (item DFA states times the largest count) up to which a repetition that
/// cannot be a counted lexeme is tried as one dense DFA with its prefix and suffix.
const DENSE_UNROLLED_STATES: u64 = 10_000;

fn limit(
    what: &'static str,
    value: usize,
    limit: usize,
    kind: crate::error::LimitKind,
) -> GrammarError {
    GrammarError::Limit {
        what,
        value,
        limit,
        kind,
    }
}

/// How [`Lowerer::seq`] groups a sequence's elements.
#[derive(Clone, Copy)]
enum Run {
    /// Light regular elements `a..b`, lexed together.
    Light(usize, usize),
    /// One heavy regular element.
    Big(usize),
    /// One element that is not regular.
    Structural(usize),
}

/// The HIR of the test regex `re`, with byte classes allowed (`utf8(false)`, as lexemes
/// are byte-level).
#[cfg(test)]
pub(crate) fn test_hir(re: &str) -> Hir {
    regex_syntax::ParserBuilder::new()
        .utf8(false)
        .build()
        .parse(re)
        .unwrap()
}

/// A fixed-seed xorshift generator for the tests' random inputs (so failures repeat):
/// `rnd(n)` is a number below `n`.
#[cfg(test)]
pub(crate) fn test_rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

impl<'a> Lowerer<'a> {
    fn new(g: &'a Grammar, limits: &'a Limits, caches: &'a cache::Caches) -> Self {
        prime_key_measures(g, caches);
        let n = g.rules.len();
        // Rules that are not (mutually) recursive, in dependency order, via a worklist over
        // "referenced rules not yet known to be non-recursive".
        let mut deps: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut rdeps: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (i, r) in g.rules.iter().enumerate() {
            let mut d = Vec::new();
            crate::grammar::visit_refs_pub(&r.body, &mut |x| d.push(x));
            d.sort_unstable();
            d.dedup();
            for &x in &d {
                rdeps[x as usize].push(i as u32);
            }
            deps[i] = d;
        }
        let mut pending: Vec<usize> = deps.iter().map(|d| d.len()).collect();
        let mut order: Vec<u32> = (0..n as u32)
            .filter(|&i| pending[i as usize] == 0)
            .collect();
        let mut i = 0;
        while i < order.len() {
            let r = order[i];
            for &d in &rdeps[r as usize] {
                pending[d as usize] -= 1;
                if pending[d as usize] == 0 {
                    order.push(d);
                }
            }
            i += 1;
        }
        // Inlinable: non-recursive, only inlinable references, and small once expanded.
        let mut inlinable = vec![false; n];
        let mut weight = vec![usize::MAX / 4; n];
        let mut depth = vec![usize::MAX / 4; n];
        let mut ir_check = vec![None; n];
        for (r, c) in &g.checks {
            ir_check[*r as usize] = Some(c.clone());
        }
        for &r in &order {
            if ir_check[r as usize].is_some() {
                continue; // the parser must see every completion of a checked rule
            }
            let body = &g.rules[r as usize].body;
            if deps[r as usize].iter().all(|&d| inlinable[d as usize]) {
                let w = expr_weight(body, &weight);
                let d = expr_depth(body, &depth);
                if w <= limits.max_inline_weight && d <= limits.max_inline_depth {
                    inlinable[r as usize] = true;
                    weight[r as usize] = w;
                    depth[r as usize] = d;
                }
            }
        }
        Lowerer {
            g,
            limits,
            caches,
            inlinable,
            weight,
            hir_cache: vec![None; n],
            key_cache: vec![None; n],
            long_repeat_memo: vec![None; n],
            rule_map: vec![None; n],
            queue: Vec::new(),
            rules: Vec::new(),
            rule_name: Vec::new(),
            rule_check: Vec::new(),
            ir_check,
            lexemes: Vec::new(),
            lex_name: Vec::new(),
            lex_map: HashMap::new(),
            run_memo: HashMap::new(),
            total_syms: 0,
            current_rule: String::new(),
            dfa_spent: 0,
            started: std::time::Instant::now(),
        }
    }

    fn run(mut self) -> Result<CompiledGrammar, GrammarError> {
        let root = self.ensure_rule(self.g.root)?;
        while let Some((ir, er)) = self.queue.pop() {
            self.current_rule = self.g.rules[ir as usize].name.clone();
            let body = &self.g.rules[ir as usize].body;
            let alts: Vec<Vec<Sym>> = match body {
                Expr::Alt(v) => self.alts(v)?,
                other => vec![self.seq(other)?],
            };
            self.rules[er as usize] = alts;
        }
        self.finish(root)
    }

    fn ensure_rule(&mut self, ir: u32) -> Result<u32, GrammarError> {
        if let Some(er) = self.rule_map[ir as usize] {
            return Ok(er);
        }
        let er = self.new_rule(self.g.rules[ir as usize].name.clone())?;
        self.rule_check[er as usize] = self.ir_check[ir as usize].clone();
        self.rule_map[ir as usize] = Some(er);
        self.queue.push((ir, er));
        Ok(er)
    }

    fn new_rule(&mut self, name: String) -> Result<u32, GrammarError> {
        if self.rules.len() >= self.limits.max_rules {
            return Err(limit(
                "number of compiled rules",
                self.rules.len() + 1,
                self.limits.max_rules,
                crate::error::LimitKind::Rules,
            ));
        }
        self.rules.push(Vec::new());
        self.rule_name.push(name);
        self.rule_check.push(None);
        Ok((self.rules.len() - 1) as u32)
    }

    fn helper(&mut self, alts: Vec<Vec<Sym>>) -> Result<Sym, GrammarError> {
        let name = format!("{}(helper)", self.current_rule);
        let r = self.new_rule(name)?;
        self.count(alts.iter().map(|a| a.len() + 1).sum())?;
        self.rules[r as usize] = alts;
        Ok(Sym::Rule(EarleyRuleId(r)))
    }

    fn count(&mut self, n: usize) -> Result<(), GrammarError> {
        self.total_syms += n;
        if self.total_syms > self.limits.max_compiled_symbols {
            return Err(limit(
                "number of compiled grammar symbols",
                self.total_syms,
                self.limits.max_compiled_symbols,
                crate::error::LimitKind::CompiledSymbols,
            ));
        }
        Ok(())
    }

    /// Lowers an expression to a symbol sequence.
    ///
    /// Regular elements are grouped into runs, each lexed as one lexeme when it fits; a
    /// heavy element stays a run of its own, so that identical ones (the same bounded
    /// string in many properties) share one DFA and its tables. A heavy bounded repetition
    /// of a prefix-free item becomes a counted lexeme (see [`automata::counted`]) that takes in the
    /// light runs on either side (the quotes of a string) when it can.
    fn seq(&mut self, e: &Expr) -> Result<Vec<Sym>, GrammarError> {
        let mut elems: Vec<&Expr> = Vec::new();
        flatten_seq(e, &mut elems);
        let big = |e: &Expr, w: &[usize]| expr_weight(e, w) > SHARE_WEIGHT;
        let mut runs: Vec<Run> = Vec::new();
        let mut i = 0;
        while i < elems.len() {
            if !is_lexable(elems[i], &self.inlinable) {
                runs.push(Run::Structural(i));
                i += 1;
            } else if big(elems[i], &self.weight) {
                runs.push(Run::Big(i));
                i += 1;
            } else {
                let mut j = i + 1;
                while j < elems.len()
                    && is_lexable(elems[j], &self.inlinable)
                    && !big(elems[j], &self.weight)
                {
                    j += 1;
                }
                runs.push(Run::Light(i, j));
                i = j;
            }
        }
        let mut out = Vec::new();
        let mut k = 0;
        while k < runs.len() {
            // A counted repetition, with the light runs around it as prefix and suffix.
            let (prefix, rep) = match (runs[k], runs.get(k + 1)) {
                (Run::Light(a, b), Some(&Run::Big(r))) => (Some(&elems[a..b]), Some(r)),
                (Run::Big(r), _) => (None, Some(r)),
                _ => (None, None),
            };
            if let Some(r) = rep {
                let at = k + prefix.is_some() as usize + 1;
                // Suffixes to try, widest first: the regular runs that follow up to the
                // next element that is not regular or holds a long count (heavy ones
                // included), then the light run alone. A lexeme that ended at a string's
                // closing quote would put a lexeme boundary inside tokens like `",` and
                // `"}`, and every mask inside the string would walk the parser over them
                // (45 µs instead of 1 µs per mask in a three-property object).
                let mut suffixes: Vec<(&[&Expr], usize)> = Vec::new();
                if let Some(&Run::Light(a, b)) = runs.get(at) {
                    suffixes.push((&elems[a..b], 1));
                }
                let (mut end, mut n, mut w) = (None, 0, 0usize);
                for run in &runs[at.min(runs.len())..] {
                    let (a, b) = match *run {
                        Run::Light(a, b) => (a, b),
                        Run::Big(i) if !self.long_repeat(elems[i]) => (i, i + 1),
                        _ => break,
                    };
                    w = elems[a..b]
                        .iter()
                        .fold(w, |w, e| w.saturating_add(expr_weight(e, &self.weight)));
                    if w > self.limits.max_inline_weight {
                        break;
                    }
                    end = Some(b);
                    n += 1;
                }
                if let (Some(end), true) = (end, n > suffixes.len()) {
                    let start = match runs[at] {
                        Run::Light(a, _) => a,
                        Run::Big(i) | Run::Structural(i) => i,
                    };
                    suffixes.insert(0, (&elems[start..end], n));
                }
                if let Some(used) = self.counted_run(prefix, elems[r], &suffixes, &mut out)? {
                    k = at + used;
                    continue;
                }
            }
            match runs[k] {
                Run::Light(a, b) => self.lex_run(&elems[a..b], &mut out)?,
                Run::Big(i) => self.lex_run(&elems[i..=i], &mut out)?,
                Run::Structural(i) => out.extend(self.structural(elems[i])?),
            }
            k += 1;
        }
        self.count(out.len())?;
        Ok(out)
    }

    /// Lexes a run of regular elements: one lexeme if it fits, else element by element.
    fn lex_run(&mut self, run: &[&Expr], out: &mut Vec<Sym>) -> Result<(), GrammarError> {
        if run.iter().all(|e| matches!(e, Expr::Empty)) {
            return Ok(());
        }
        let run_key = {
            // The parser's hasher, eight bytes per multiply over literals (SipHash, the
            // default, was 6% of compile time here).
            let mut h = crate::util::ItemHasher::default();
            run.hash(&mut h);
            h.finish()
        };
        let same = |k: &[Expr]| k.len() == run.len() && k.iter().zip(run).all(|(a, b)| a == *b);
        if let Some(&(_, l)) = self
            .run_memo
            .get(&run_key)
            .and_then(|v| v.iter().find(|(k, _)| same(k)))
        {
            out.push(Sym::Lex(LexemeId(l)));
            return Ok(());
        }
        if let [e] = run {
            if let Some(k) = self.key_complement(e) {
                if let Some(l) = self.key_lexeme(&k)? {
                    out.push(Sym::Lex(LexemeId(l)));
                    return Ok(());
                }
            }
        }
        // Too big to be worth a DFA attempt (determinization cost grows with bounded
        // repetitions): split without trying.
        let w = run.iter().fold(0usize, |a, e| {
            a.saturating_add(expr_weight(e, &self.weight))
        });
        if self.dense_ok(run, w) {
            if let Some(l) = self.lexeme_of(Group::Seq, run)? {
                let run = run.iter().map(|&e| e.clone()).collect();
                self.run_memo.entry(run_key).or_default().push((run, l));
                out.push(Sym::Lex(LexemeId(l)));
                return Ok(());
            }
        }
        if run.len() > 1 {
            for e in run {
                self.lex_run(std::slice::from_ref(e), out)?;
            }
            return Ok(());
        }
        out.extend(self.structural(run[0])?);
        Ok(())
    }

    /// Lowers the alternatives of an alternation, one symbol sequence per Earley
    /// alternative. Fixed-text alternatives are grouped, in order, into chunks of at most
    /// `max_inline_weight`, and each chunk becomes one lexeme when its DFA fits (else its
    /// alternatives are lowered one by one). Without grouping, a 2,461-value enum too heavy
    /// to inline was 2,461 lexemes: an Earley set of as many items where the value starts,
    /// every byte stepped all of them, and the first mask there built as many tables.
    /// Cost: one DFA per chunk (cached per engine like every lexeme).
    fn alts(&mut self, v: &[Expr]) -> Result<Vec<Vec<Sym>>, GrammarError> {
        if v.len() < ALT_GROUP_MIN {
            return v.iter().map(|x| self.seq(x)).collect();
        }
        let max = self.limits.max_inline_weight;
        let mut out = Vec::new();
        let mut chunk: Vec<&Expr> = Vec::new();
        let mut w = 0usize;
        for x in v {
            // Fixed texts only (enum values): grouping alternatives with structure (the
            // key-value pairs of a property loop) built new DFAs where each alternative's
            // was cached, and compile took 6-12% longer on the MaskBench sample.
            let xw = expr_weight(x, &self.weight);
            if !is_fixed_text(x) || xw > max / 4 {
                out.push(self.seq(x)?);
                continue;
            }
            if w.saturating_add(xw) > max {
                self.alt_chunk(&chunk, &mut out)?;
                chunk.clear();
                w = 0;
            }
            chunk.push(x);
            w += xw;
        }
        self.alt_chunk(&chunk, &mut out)?;
        Ok(out)
    }

    /// One chunk of [`Lowerer::alts`]: one lexeme for all of it when the DFA fits, else
    /// one alternative each.
    fn alt_chunk(&mut self, chunk: &[&Expr], out: &mut Vec<Vec<Sym>>) -> Result<(), GrammarError> {
        if chunk.len() > 1 {
            if let Some(l) = self.lexeme_of(Group::Alt, chunk)? {
                out.push(vec![Sym::Lex(LexemeId(l))]);
                return Ok(());
            }
        }
        for e in chunk {
            out.push(self.seq(e)?);
        }
        Ok(())
    }

    /// Lowers one element structurally (helper rules), used for non-regular parts and for
    /// regular parts too large for one DFA.
    fn structural(&mut self, e: &Expr) -> Result<Vec<Sym>, GrammarError> {
        Ok(match e {
            Expr::Empty => vec![],
            Expr::Literal(l) => {
                // Only reached when a literal alone exceeds the DFA limits: split it.
                let mut v = Vec::new();
                for chunk in l.chunks(256) {
                    let h = Hir::literal(chunk.to_vec());
                    match self.lexeme(h)? {
                        Some(x) => v.push(Sym::Lex(LexemeId(x))),
                        None => {
                            return Err(limit(
                                "literal size",
                                l.len(),
                                256,
                                crate::error::LimitKind::LexemeStates,
                            ))
                        }
                    }
                }
                v
            }
            Expr::Chars(_) | Expr::Bytes(_) => {
                let h = self.hir(e)?;
                match self.lexeme(h)? {
                    Some(x) => vec![Sym::Lex(LexemeId(x))],
                    None => {
                        return Err(limit(
                            "character class DFA states",
                            self.limits.max_lexeme_states + 1,
                            self.limits.max_lexeme_states,
                            crate::error::LimitKind::LexemeStates,
                        ))
                    }
                }
            }
            // A key complement too heavy to inline still makes one lexeme when built
            // from its keys.
            Expr::Ref(r) => {
                let lexeme = match self.key_complement(e) {
                    Some(k) => self.key_lexeme(&k)?,
                    None => None,
                };
                match lexeme {
                    Some(l) => vec![Sym::Lex(LexemeId(l))],
                    None => vec![Sym::Rule(EarleyRuleId(self.ensure_rule(*r)?))],
                }
            }
            Expr::KeyComplement(k) => match self.key_lexeme(k)? {
                Some(l) => vec![Sym::Lex(LexemeId(l))],
                None => self.structural(&k.expand())?,
            },
            Expr::Seq(_) => self.seq(e)?,
            Expr::Alt(v) => {
                let alts = self.alts(v)?;
                if alts.len() == 1 {
                    alts.into_iter().next().unwrap()
                } else {
                    vec![self.helper(alts)?]
                }
            }
            Expr::Repeat { e: inner, min, max } if *min > CHUNK => {
                // x{min,max} is (x{c}){q} x{rem, rem + (max - min)} with min = q·c + rem:
                // the `min` copies are never written out one by one (merged nested
                // repetitions can ask for millions); each level divides the count by c.
                let (q, rem) = (min / CHUNK, min % CHUNK);
                let rep = |e: Expr, a: u32, b: Option<u32>| Expr::Repeat {
                    e: Box::new(e),
                    min: a,
                    max: b,
                };
                let chunk = rep((**inner).clone(), CHUNK, Some(CHUNK));
                let tail = rep((**inner).clone(), rem, max.map(|m| m - min + rem));
                self.seq(&Expr::Seq(vec![rep(chunk, q, Some(q)), tail]))?
            }
            Expr::Repeat {
                e: inner,
                min,
                max: Some(m),
            } if m - min > CHUNK => {
                // x{0,r} with r = q·c + rem is  (x{c}){0,q-1} x{0,c-1}  |  (x{c}){q} x{0,rem}:
                // the same counts, helper chains c times shorter, and unambiguous enough that
                // only the current chunk and one tail are alive at any point.
                let r = m - min;
                let (q, rem) = (r / CHUNK, r % CHUNK);
                let x = || (**inner).clone();
                let rep = |e: Expr, a: u32, b: u32| Expr::Repeat {
                    e: Box::new(e),
                    min: a,
                    max: Some(b),
                };
                let chunk = rep(x(), CHUNK, CHUNK);
                let body = Expr::Alt(vec![
                    Expr::Seq(vec![rep(chunk.clone(), 0, q - 1), rep(x(), 0, CHUNK - 1)]),
                    Expr::Seq(vec![rep(chunk, q, q), rep(x(), 0, rem)]),
                ]);
                self.seq(&Expr::Seq(vec![rep(x(), *min, *min), body]))?
            }
            Expr::Repeat { e: inner, min, max } => {
                let body = self.seq(inner)?;
                let x: Sym = if body.len() == 1 {
                    body[0]
                } else {
                    self.helper(vec![body])?
                };
                let mut out = vec![x; *min as usize];
                match max {
                    None => {
                        // S ::= ε | S x
                        let s = self.new_rule(format!("{}(repeat)", self.current_rule))?;
                        self.count(4)?;
                        self.rules[s as usize] = vec![vec![], vec![Sym::Rule(EarleyRuleId(s)), x]];
                        out.push(Sym::Rule(EarleyRuleId(s)));
                    }
                    Some(m) if *m > *min => {
                        // O_k ::= ε | O_{k-1} x  (0..=k copies)
                        let mut prev: Option<u32> = None;
                        for _ in 0..(m - min) {
                            let o = self.new_rule(format!("{}(repeat)", self.current_rule))?;
                            self.count(4)?;
                            let alt = match prev {
                                None => vec![x],
                                Some(p) => vec![Sym::Rule(EarleyRuleId(p)), x],
                            };
                            self.rules[o as usize] = vec![vec![], alt];
                            prev = Some(o);
                        }
                        out.push(Sym::Rule(EarleyRuleId(prev.unwrap())));
                    }
                    Some(_) => {}
                }
                self.count(out.len())?;
                out
            }
        })
    }

    /// When the compile-time budget runs out (one DFA attempt stops there too).
    fn deadline(&self) -> std::time::Instant {
        self.started + self.limits.max_compile_time
    }

    /// The compile-time limit error, with the time spent so far.
    fn time_error(&self) -> GrammarError {
        limit(
            "compile time in milliseconds",
            self.started.elapsed().as_millis() as usize,
            self.limits.max_compile_time.as_millis() as usize,
            crate::error::LimitKind::CompileTime,
        )
    }

    /// Fails when the compile-time or total-DFA budget is spent.
    fn check_budgets(&self) -> Result<(), GrammarError> {
        if self.started.elapsed() > self.limits.max_compile_time {
            return Err(self.time_error());
        }
        if self.dfa_spent > self.limits.max_total_dfa_states {
            return Err(limit(
                "lexeme DFA states built",
                self.dfa_spent,
                self.limits.max_total_dfa_states,
                crate::error::LimitKind::TotalDfaStates,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;
    use crate::grammar::Rule;

    fn lit(s: &str) -> Expr {
        Expr::Literal(s.as_bytes().to_vec())
    }

    fn chars(a: char, b: char) -> Expr {
        Expr::Chars(vec![(a, b)])
    }

    /// A grammar whose rules 0 and 1 the expressions below refer to (rule 2 is a root
    /// that names them, so that neither is unused).
    fn grammar() -> Grammar {
        let rule = |name: &str, body| Rule {
            name: name.into(),
            body,
        };
        Grammar {
            rules: vec![
                rule("r0", Expr::Seq(vec![lit("a"), chars('a', 'b')])),
                rule("r1", Expr::Alt(vec![lit("b"), Expr::Empty])),
                rule("root", Expr::Seq(vec![Expr::Ref(0), Expr::Ref(1)])),
            ],
            root: 2,
            checks: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn key(l: &mut Lowerer, e: &Expr) -> Vec<u8> {
        let mut k = Vec::new();
        l.expr_key(e, &mut k);
        k
    }

    /// A random expression over a tiny alphabet, so that many differ only in how they
    /// nest, split literals, or spell one character.
    fn random_expr(rnd: &mut impl FnMut(u64) -> u64, depth: u32) -> Expr {
        let leaf = depth == 0 || rnd(3) == 0;
        if leaf {
            return match rnd(8) {
                0 => Expr::Empty,
                1 => lit("a"),
                2 => lit("ab"),
                3 => lit(""),
                4 => chars('a', 'a'),
                5 => chars('a', 'b'),
                6 => Expr::Bytes(vec![(b'b', b'b')]),
                _ => Expr::Ref(rnd(2) as u32),
            };
        }
        let n = 1 + rnd(3) as usize;
        let kids = (0..n).map(|_| random_expr(rnd, depth - 1)).collect();
        match rnd(4) {
            0 | 1 => Expr::Seq(kids),
            2 => Expr::Alt(kids),
            _ => {
                let (min, max) =
                    [(1, Some(1)), (0, Some(0)), (0, None), (1, Some(2))][rnd(4) as usize];
                Expr::Repeat {
                    e: Box::new(random_expr(rnd, depth - 1)),
                    min,
                    max,
                }
            }
        }
    }

    /// The strings over `a` and `b` of at most 7 bytes that `dfa` accepts whole.
    fn language(dfa: &Dfa) -> Vec<String> {
        let mut out = Vec::new();
        for len in 0..=7u32 {
            for bits in 0..1u32 << len {
                let w: String = (0..len)
                    .map(|i| if bits >> i & 1 == 0 { 'a' } else { 'b' })
                    .collect();
                let s = w.bytes().fold(dfa.start(), |s, b| dfa.next(s, b));
                if s != 0 && dfa.accepting(s) {
                    out.push(w);
                }
            }
        }
        out
    }

    /// Structural keys never join expressions whose languages differ: over 20,000 random
    /// expressions, those with one key print one regex, or accept the same strings (the
    /// regex builder also factors common prefixes out of alternations, which the key
    /// does not follow, so equal keys may print differently). They also join the
    /// spellings the regex builder normalizes (checked below), so the keys are fewer
    /// than two thirds of the expressions (5,996 for 10,228). A key that dropped the empty alternatives of an
    /// alternation, merged literals across an alternation, or took `{0,1}` for `{1,1}`,
    /// fails the first check.
    #[test]
    fn structural_keys_join_only_equal_languages() {
        let g = grammar();
        let limits = Limits::default();
        let caches = cache::Caches::private();
        let mut l = Lowerer::new(&g, &limits, &caches);
        let mut rnd = test_rng(0x5eed_1234_abcd);
        let mut buckets: HashMap<Vec<u8>, (Hir, Expr)> = HashMap::new();
        let mut distinct = std::collections::HashSet::new();
        let mut differently_printed = 0;
        for _ in 0..20_000 {
            let e = random_expr(&mut rnd, 3);
            let hir = l.hir(&e).unwrap();
            let k = key(&mut l, &e);
            distinct.insert(format!("{e:?}"));
            match buckets.get(&k) {
                Some((h, _)) if h.to_string() == hir.to_string() => {}
                Some((h, other)) => {
                    differently_printed += 1;
                    let dfa = |h: &Hir| {
                        Dfa::build_lexeme(&cache::Caches::private(), h, 10_000, 1 << 22, None)
                            .unwrap()
                    };
                    assert_eq!(
                        language(&dfa(h)),
                        language(&dfa(&hir)),
                        "one key for {other:?} and {e:?}, whose languages differ"
                    );
                }
                None => {
                    buckets.insert(k, (hir, e));
                }
            }
        }
        assert!(differently_printed > 0, "the languages were never compared");
        assert!(
            buckets.len() * 3 < distinct.len() * 2,
            "{} keys for {} expressions",
            buckets.len(),
            distinct.len()
        );
    }

    /// The normalizations the key makes, one by one, and spellings it keeps apart.
    #[test]
    fn structural_keys_normalize_like_the_regex_builder() {
        let g = grammar();
        let limits = Limits::default();
        let caches = cache::Caches::private();
        let mut l = Lowerer::new(&g, &limits, &caches);
        let (a, b, c) = (lit("a"), chars('a', 'b'), Expr::Ref(1));
        let same = [
            // A sequence nested in a sequence.
            (
                Expr::Seq(vec![Expr::Seq(vec![a.clone(), b.clone()]), c.clone()]),
                Expr::Seq(vec![a.clone(), b.clone(), c.clone()]),
            ),
            // Adjacent literals, one of them a one-character class.
            (
                Expr::Seq(vec![lit("a"), chars('b', 'b'), b.clone()]),
                Expr::Seq(vec![lit("ab"), b.clone()]),
            ),
            // Empty items, one-item groups, `{1,1}`.
            (
                Expr::Seq(vec![Expr::Empty, Expr::Alt(vec![b.clone()]), lit("")]),
                Expr::Repeat {
                    e: Box::new(b.clone()),
                    min: 1,
                    max: Some(1),
                },
            ),
            // A reference and its rule's body.
            (Expr::Ref(0), Expr::Seq(vec![lit("a"), b.clone()])),
            // An alternation nested in an alternation.
            (
                Expr::Alt(vec![a.clone(), Expr::Alt(vec![b.clone(), c.clone()])]),
                Expr::Alt(vec![a.clone(), b.clone(), c.clone()]),
            ),
        ];
        for (x, y) in &same {
            assert_eq!(key(&mut l, x), key(&mut l, y), "{x:?} and {y:?}");
        }
        let apart = [
            // An empty alternative is not dropped.
            (Expr::Alt(vec![a.clone(), Expr::Empty]), a.clone()),
            // Literals in an alternation are not merged.
            (Expr::Alt(vec![lit("a"), lit("b")]), lit("ab")),
            // `{0,1}` is not `{1,1}`.
            (
                Expr::Repeat {
                    e: Box::new(a.clone()),
                    min: 0,
                    max: Some(1),
                },
                a.clone(),
            ),
        ];
        for (x, y) in &apart {
            assert_ne!(key(&mut l, x), key(&mut l, y), "{x:?} and {y:?}");
        }
    }

    /// A sequence that starts with literal text, built as that text in front of the lexeme
    /// of the rest, has the language of the whole built at once (2,000 random rests); only
    /// a sequence that is all text is not split.
    #[test]
    fn literal_heads_in_front_of_their_rest_are_exact() {
        let g = grammar();
        let limits = Limits::default();
        let caches = cache::Caches::private();
        let mut l = Lowerer::new(&g, &limits, &caches);
        let mut rnd = test_rng(0x11fe_ad00_7e57);
        let mut split = 0;
        for i in 0..2_000 {
            let e = random_expr(&mut rnd, 3);
            let head = if i % 2 == 0 { lit("a") } else { lit("ba") };
            let whole = Expr::Seq(vec![head.clone(), e.clone()]);
            let expect = Dfa::build_lexeme(
                &cache::Caches::private(),
                &l.hir(&whole).unwrap(),
                10_000,
                1 << 22,
                None,
            );
            // A key no compile writes (theirs start with the limits), so that this test
            // leaves nothing in the engine's cache that a compile could read.
            let key = format!("test/literal heads/{i}").into_bytes();
            match l
                .literal_head_lexeme(Group::Seq, &[&head, &e], &key)
                .unwrap()
            {
                Some(got) => {
                    split += 1;
                    assert_eq!(
                        language(&got.unwrap()),
                        language(&expect.unwrap()),
                        "{whole:?}"
                    );
                }
                // Only a fixed text is not split (it is all head).
                None => {
                    fn fixed(e: &Expr) -> bool {
                        match e {
                            Expr::Literal(_) | Expr::Empty => true,
                            Expr::Seq(v) => v.iter().all(fixed),
                            _ => false,
                        }
                    }
                    assert!(fixed(&e), "{e:?} was not split");
                }
            }
        }
        assert!(split > 1_500, "only {split} split");
    }

    /// A lexeme found by its structural key is named after its printed regex, as one
    /// found by the regex itself: a second grammar that finds it cached names it the same.
    #[test]
    fn structurally_keyed_lexemes_keep_their_names() {
        let body = Expr::Seq(vec![
            lit("\"q"),
            Expr::Repeat {
                e: Box::new(chars('a', 'z')),
                min: 1,
                max: None,
            },
            lit("\""),
        ]);
        let g = Grammar::single("word", body);
        for _ in 0..2 {
            let c = CompiledGrammar::new(&g, &Limits::default()).unwrap();
            // The key's text, then the name of the cached rest it was put in front of.
            assert_eq!(c.lex_name, vec![r#"(?:"q)(?:[a-z]+")"#.to_string()]);
        }
    }
}
