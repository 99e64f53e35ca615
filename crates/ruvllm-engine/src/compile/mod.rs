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

pub(crate) mod cache;
mod compose;
mod counted;
pub(crate) mod dfa;
pub(crate) mod dist;
pub(crate) mod equiv;
pub(crate) mod keys;
mod setpool;
pub(crate) mod shortest;
mod subset;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use regex_syntax::hir::{self, Hir};

pub use dfa::{Dfa, Lexeme};

use crate::grammar::{Check, Expr, Grammar};
use crate::{GrammarError, Limits};

/// A grammar symbol at a parser position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sym {
    /// A lexeme (DFA index).
    Lex(u32),
    /// A nonterminal (Earley rule index).
    Rule(u32),
    /// End of an alternative of the given rule.
    End(u32),
}

/// A grammar ready for matching: lexeme DFAs plus a flattened Earley grammar. Immutable and
/// shared (`Arc`) by every matcher and every vocabulary it is used with.
#[derive(Debug)]
pub struct CompiledGrammar {
    pub(crate) syms: Vec<Sym>,
    pub(crate) rule_alts: Vec<Vec<u32>>,
    pub(crate) rule_nullable: Vec<bool>,
    pub(crate) rule_name: Vec<String>,
    pub(crate) root: u32,
    pub(crate) lexemes: Vec<std::sync::Arc<Lexeme>>,
    pub(crate) lex_name: Vec<String>,
    pub(crate) n_lex_states: usize,
    /// For each position, the rule it belongs to.
    pub(crate) pos_rule: Vec<u32>,
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
        // Copies of one rule (a schema's combinations of `required` sets) become one.
        match g.merge_equal_rules() {
            Some(m) => Lowerer::new(&m, limits, caches).run(),
            None => Lowerer::new(g, limits, caches).run(),
        }
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

    /// Every byte a shortest completion (`crate::complete`) can write: the union of the
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
        let rule = &self.rule_name[self.pos_rule[pos as usize] as usize];
        match self.syms[pos as usize] {
            Sym::Lex(l) => format!("{rule}: {}", self.lex_name[l as usize]),
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

/// The elements of `e` as a flat sequence (nested sequences spliced, empties dropped).
fn flatten_seq<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Seq(v) => v.iter().for_each(|x| flatten_seq(x, out)),
        Expr::Empty => {}
        other => out.push(other),
    }
}

fn is_lexable(e: &Expr, inl: &[bool]) -> bool {
    match e {
        Expr::Ref(r) => inl[*r as usize],
        Expr::Seq(v) | Expr::Alt(v) => v.iter().all(|x| is_lexable(x, inl)),
        Expr::Repeat { e, .. } => is_lexable(e, inl),
        Expr::KeyComplement(k) => is_lexable(k.ch(), inl),
        _ => true,
    }
}

fn expr_depth(e: &Expr, d: &[usize]) -> usize {
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
enum Measure {
    Depth(usize),
    Weight(usize),
}

/// Measures a key complement's expansion as functions of its string character's weight
/// `w` and depth `d`: `[base, uses, d0, d1]` for weight `base + uses * w` and depth
/// `max(d0, d1 + d)` (`d1` is 0 where the character does not occur). The expansion is a
/// tree, so both are linear in (or a maximum over) the character's occurrences.
struct KeyMeasure;

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
fn measure_keys(k: &crate::grammar::KeyComplement, m: Measure) -> usize {
    let [base, uses, d0, d1] = k.measured(measure_key_set);
    match m {
        Measure::Weight(w) => base.saturating_add(uses.saturating_mul(w)),
        Measure::Depth(d) if d1 > 0 => d0.max(d1.saturating_add(d)),
        Measure::Depth(_) => d0,
    }
}

/// The measure of the key complement of `keys` (see [`KeyMeasure`]): one walk of the
/// key trie. Cost: O(trie).
fn measure_key_set(keys: &[Vec<char>]) -> [usize; 4] {
    crate::grammar::json_string::key_complement_body(keys, &mut KeyMeasure)
}

/// Measures every key complement of `g` through `caches`, which remember the measures
/// by key set: schemas repeat their key sets (`name`/`type`/`value` objects), within a
/// schema and across schemas, and the walk of a set's trie was 5% of compile time on the
/// MaskBench files that take 7-16 ms to compile. Each complement keeps its measure, so
/// [`measure_keys`] then finds it there. Cost: a walk of the grammar's expressions, a
/// lookup per complement.
fn prime_key_measures(g: &Grammar, caches: &cache::Caches) {
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

/// How [`Lowerer::lexeme_of`] joins its expressions (the tag of the key's group).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Group {
    /// One after the other, as [`Expr::Seq`] (the same tag).
    Seq = 4,
    /// Any one of them, as [`Expr::Alt`] (the same tag).
    Alt = 5,
}

/// The first byte of every structural lexeme key: never the first byte of a printed
/// regex (UTF-8 text), so the two kinds of keys share the lexeme maps without meeting.
const STRUCTURAL_KEY: u8 = 0xFF;

/// A part of a counted lexeme or key complement: its structural key and its lexeme (see
/// [`Lowerer::part`]).
type Part = (Vec<u8>, std::sync::Arc<Lexeme>);

/// The end tag of a group in a structural key.
const END: u8 = 8;

/// What a structural key (see [`Lowerer::expr_key`]) is, as its group writer needs to
/// know: the empty string, a literal (tag, 4-byte length, bytes), a group of `n` items,
/// or anything else.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum KeyKind {
    Empty,
    Literal,
    Group(Group, usize),
    Other,
}

/// Appends a literal's key: tag, length as 4 bytes (so that a merge can rewrite it in
/// place), bytes.
fn literal_key(l: &[u8], out: &mut Vec<u8>) {
    out.push(1);
    out.extend_from_slice(&(l.len().min(u32::MAX as usize) as u32).to_le_bytes());
    out.extend_from_slice(l);
}

/// Appends `n` to a structural key as a LEB128 varint (self-delimiting).
fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The start of `hir` printed, at most `n` bytes (whole characters): a lexeme's name,
/// without printing all of a long regex. Cost: O(n) after the regex's first nodes.
fn printed_prefix(hir: &Hir, n: usize) -> String {
    struct Cut(String, usize);
    impl std::fmt::Write for Cut {
        fn write_str(&mut self, x: &str) -> std::fmt::Result {
            for c in x.chars() {
                if self.0.len() + c.len_utf8() > self.1 {
                    return Err(std::fmt::Error);
                }
                self.0.push(c);
            }
            Ok(())
        }
    }
    let mut w = Cut(String::new(), n);
    // An error only says the prefix is full.
    let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{hir}"));
    w.0
}

/// Builds the lexeme of `hir`: when it starts with a literal (a property key and its
/// colon), as that literal's chain in front of the cached DFA of the rest (see
/// [`Dfa::prepend_literal`]), which the other keys of the schema share; else directly.
fn build_hir_lexeme(
    caches: &cache::Caches,
    hir: &Hir,
    states: usize,
    bytes: usize,
    deadline: Option<std::time::Instant>,
) -> Result<Dfa, dfa::DfaError> {
    if let Some((lit, rest)) = literal_head(hir) {
        match caches.cached(&rest.to_string(), &rest, states, bytes, deadline) {
            Ok(r) => {
                if let Some(d) = Dfa::prepend_literal(&lit, &r, states, bytes) {
                    return Ok(d);
                }
            }
            Err(dfa::DfaError::Deadline) => return Err(dfa::DfaError::Deadline),
            Err(dfa::DfaError::TooBig { .. }) => {}
        }
    }
    Dfa::build_lexeme(caches, hir, states, bytes, deadline)
}

/// A concatenation that starts with a literal, split into the literal's bytes and the
/// rest (`None` for anything else; the rest may be the empty regex). Cost: a clone of the
/// rest's parts.
fn literal_head(hir: &Hir) -> Option<(Vec<u8>, Hir)> {
    let hir::HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    let (first, rest) = parts.split_first()?;
    let hir::HirKind::Literal(lit) = first.kind() else {
        return None;
    };
    Some((lit.0.to_vec(), Hir::concat(rest.to_vec())))
}

/// The literal text that a sequence of `items` starts with (nested sequences flattened,
/// empty items skipped), and the items after it. Cost: O(items).
fn literal_head_of<'e>(items: &[&'e Expr]) -> (Vec<u8>, Vec<&'e Expr>) {
    fn flatten<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
        match e {
            Expr::Seq(v) => v.iter().for_each(|x| flatten(x, out)),
            Expr::Empty => {}
            _ => out.push(e),
        }
    }
    let mut flat: Vec<&Expr> = Vec::with_capacity(items.len());
    items.iter().for_each(|e| flatten(e, &mut flat));
    let mut lit = Vec::new();
    let mut head = 0;
    while let Some(Expr::Literal(l)) = flat.get(head) {
        lit.extend_from_slice(l);
        head += 1;
    }
    flat.drain(..head);
    (lit, flat)
}

/// Whether `e` is one fixed byte string (a literal, or a sequence of them: the schema front
/// end writes an enum's string value character by character).
fn is_fixed_text(e: &Expr) -> bool {
    match e {
        Expr::Literal(_) => true,
        Expr::Seq(v) => v.iter().all(is_fixed_text),
        _ => false,
    }
}

fn expr_weight(e: &Expr, w: &[usize]) -> usize {
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
        Ok(Sym::Rule(r))
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
    /// of a prefix-free item becomes a counted lexeme (see [`counted`]) that takes in the
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

    /// Whether `e` has a repetition of more than [`LONG_REPEAT`] items strictly inside it
    /// (through sequences, alternatives, repetitions and inlinable rules): what
    /// [`Lowerer::seq`] would make a counted lexeme once `e` is split.
    fn long_repeat_inside(&mut self, e: &Expr) -> bool {
        match e {
            Expr::Seq(v) | Expr::Alt(v) => v.iter().any(|x| self.long_repeat(x)),
            Expr::Repeat { e, .. } => self.long_repeat(e),
            Expr::Ref(r) => self.long_repeat(&Expr::Ref(*r)),
            // The expansion's only repetition is `ch*`.
            Expr::KeyComplement(k) => self.long_repeat(k.ch()),
            _ => false,
        }
    }

    /// Whether `e` is, or has inside it, a repetition of more than [`LONG_REPEAT`] items.
    /// Memoized per rule.
    fn long_repeat(&mut self, e: &Expr) -> bool {
        match e {
            Expr::Repeat { min, max, .. } if max.unwrap_or(*min) > LONG_REPEAT => true,
            Expr::Ref(r) if self.inlinable[*r as usize] => {
                if let Some(x) = self.long_repeat_memo[*r as usize] {
                    return x;
                }
                let body = &self.g.rules[*r as usize].body;
                let x = self.long_repeat(body);
                self.long_repeat_memo[*r as usize] = Some(x);
                x
            }
            Expr::Ref(_) => false,
            other => self.long_repeat_inside(other),
        }
    }

    /// Lowers `rep` as a counted lexeme if it is a repetition of a prefix-free item,
    /// absorbing `prefix` and one of `suffixes` (elements, and the runs they span; widest
    /// first) where the counted lexeme's conditions allow (a prefix it cannot take is lexed
    /// on its own first). Returns the number of runs of the suffix taken (0 for none), or
    /// `None` (nothing emitted) when `rep` cannot be counted.
    fn counted_run(
        &mut self,
        prefix: Option<&[&Expr]>,
        rep: &Expr,
        suffixes: &[(&[&Expr], usize)],
        out: &mut Vec<Sym>,
    ) -> Result<Option<usize>, GrammarError> {
        let Expr::Repeat { e: item, min, max } = rep else {
            return Ok(None);
        };
        // A few repetitions of a heavy item (an optional group of properties, `(, k: v){0,1}`)
        // are not worth the item's DFA: such items are property alternatives, almost never
        // prefix-free (a number value), so the counted lexeme is refused after the build. On
        // the 566-file MaskBench sample, all 682 attempts were refused, after 163 ms of
        // DFA builds (a tenth of compile time). Lowered another way, the language is the
        // same.
        let item_weight = expr_weight(item, &self.weight);
        if max.is_some_and(|m| m <= LONG_REPEAT) && item_weight > SHARE_WEIGHT {
            return Ok(None);
        }
        // Nor is a heavy item with a long repetition inside (a property loop whose values
        // are `maxLength` strings): its DFA unrolls those counts, as a dense attempt would
        // (see `dense_ok`). On a Snowplow schema three such items had 3,117 to 9,402
        // states and took 6.4 ms of a 10 ms compile; lowered structurally instead, each
        // string is a counted lexeme of its own, and the language is the same.
        if item_weight > NESTED_DENSE_WEIGHT && self.long_repeat_inside(item) {
            return Ok(None);
        }
        let Some(x) = self.part(&[&**item])? else {
            return Ok(None);
        };
        let part_of = |this: &mut Self, run: Option<&[&Expr]>| -> Result<_, GrammarError> {
            let Some(run) = run else { return Ok(None) };
            if run.iter().all(|e| matches!(e, Expr::Empty)) {
                return Ok(None);
            }
            this.part(run)
        };
        // A prefix that starts with literal text (a property key) is that text's chain in
        // front of the counted lexeme of the rest ([`Dfa::prepend_literal`]): the rest (`ws
        // : ws "` and the string) is then one cached lexeme for every key, and so are its
        // token tables, where each key's lexeme computed its own (1.5-2.7 ms apiece for
        // the first count of a `maxLength` string, once per property).
        let (head, prefix_tail) = prefix.map_or((Vec::new(), Vec::new()), literal_head_of);
        let p = part_of(self, Some(&prefix_tail[..]))?;
        let has_p = p.is_some() || !head.is_empty();
        let mut ss_all = Vec::with_capacity(suffixes.len());
        for &(run, n) in suffixes {
            if let Some(d) = part_of(self, Some(run))? {
                ss_all.push((d, n));
            }
        }
        // The widest combination the conditions allow: each suffix with and without the
        // prefix, then neither.
        let mut tries: Vec<(bool, Option<usize>)> = Vec::new();
        for i in 0..ss_all.len() {
            tries.extend([(true, Some(i)), (false, Some(i))]);
        }
        tries.extend([(true, None), (false, None)]);
        for (use_p, si) in tries {
            if use_p && !has_p {
                continue; // the same as the try without the prefix
            }
            let pp: Option<&Part> = p.as_ref().filter(|_| use_p);
            let ss = si.map(|i| &ss_all[i].0);
            let used = si.map_or(0, |i| ss_all[i].1);
            let Some(dfa) = Dfa::counted(
                pp.map(|(_, d)| d.clone()),
                x.1.clone(),
                *min,
                *max,
                ss.map(|(_, d)| d.clone()),
            ) else {
                continue;
            };
            // Keyed by its parts' structural keys (written once per part, not printed);
            // named after their printed regexes, as `p(?:x){min,max}s`.
            let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
            let mut key = vec![STRUCTURAL_KEY, b'C'];
            for part in [pp, Some(&x), ss] {
                match part {
                    Some((k, _)) => {
                        key.push(1);
                        key.extend_from_slice(k);
                    }
                    None => key.push(0),
                }
            }
            key.extend_from_slice(&min.to_le_bytes());
            key.extend_from_slice(&max.map_or([0xFF; 5], |m| {
                let [a, b, c, d] = m.to_le_bytes();
                [0, a, b, c, d]
            }));
            let mut cache_key = format!("{states}/{bytes}/").into_bytes();
            cache_key.extend_from_slice(&key);
            let head = if use_p { &head[..] } else { &[][..] };
            let name = || {
                let show = |part: Option<&Part>| {
                    part.map_or("", |(_, d)| d.name().unwrap_or_default())
                        .to_string()
                };
                let bound = max.map_or(String::new(), |m| m.to_string());
                let head = if head.is_empty() {
                    String::new()
                } else {
                    printed_prefix(&Hir::literal(head.to_vec()), dfa::NAME_BYTES)
                };
                format!(
                    "{head}{}(?:{}){{{min},{bound}}}{}",
                    show(pp),
                    show(Some(&x)),
                    show(ss)
                )
            };
            let (key, cache_key, dfa) = if head.is_empty() {
                (key, cache_key, dfa)
            } else {
                // The counted rest, cached on its own, with the text's chain in front.
                let Ok(rest) = self.caches.cached_with(&cache_key, || Ok(dfa)) else {
                    continue;
                };
                let Some(chain) = Dfa::prepend_literal(head, &rest, states, bytes) else {
                    continue;
                };
                let mut whole = vec![STRUCTURAL_KEY, b'H'];
                whole.extend_from_slice(&(head.len() as u64).to_le_bytes());
                whole.extend_from_slice(head);
                whole.extend_from_slice(&key);
                let mut whole_cache = format!("{states}/{bytes}/").into_bytes();
                whole_cache.extend_from_slice(&whole);
                (whole, whole_cache, chain)
            };
            let Some(l) = self.register(&cache_key, key, name, move || Ok(dfa))? else {
                return Ok(None);
            };
            if let (Some(run), false) = (prefix, use_p) {
                self.lex_run(run, out)?;
            }
            out.push(Sym::Lex(l));
            return Ok(Some(used));
        }
        // Not countable (an item that is not prefix-free, such as a word `\S+\s+`), but
        // small once unrolled: one dense DFA for the prefix, the repetition and the widest
        // suffix (a string's quotes, a key), rather than the repetition lexed apart from
        // them, with lexeme boundaries (parser walks in the masks) where they meet. On
        // MaskBench's word-count `pattern`s (`(\S+\s+){0,99}\S+`) the worst masks went
        // from 3.5-4.2 ms to 0.9-2.7 ms (the 7 files of that family, alone).
        if let Some(m) = max {
            let unrolled = x.1.num_states() as u64 * (u64::from(*m) + 1);
            if unrolled <= DENSE_UNROLLED_STATES {
                let (tail, used) = suffixes.first().map_or((&[][..], 0), |&(r, n)| (r, n));
                let parts: Vec<&Expr> = prefix
                    .unwrap_or(&[])
                    .iter()
                    .copied()
                    .chain([rep])
                    .chain(tail.iter().copied())
                    .collect();
                if let Some(l) = self.lexeme_of(Group::Seq, &parts)? {
                    out.push(Sym::Lex(l));
                    return Ok(Some(used));
                }
            }
        }
        Ok(None)
    }

    /// The DFA of a part of a counted lexeme or key complement (the expressions `items` in
    /// sequence), with its structural key (see [`Lowerer::expr_key`]); `None` when it
    /// exceeds the DFA limits. Shared with the process-wide cache, where a hit builds and
    /// prints no regex; a part built is named after the start of its printed regex.
    fn part(&mut self, items: &[&Expr]) -> Result<Option<Part>, GrammarError> {
        self.check_budgets()?;
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let mut key = vec![STRUCTURAL_KEY, b'P'];
        self.group_key(Group::Seq, items.iter().copied(), &mut key);
        let mut cache_key = format!("{states}/{bytes}/").into_bytes();
        cache_key.extend_from_slice(&key);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let entry = self.fetch_or_build(&cache_key, Group::Seq, items, |hir| {
            Dfa::build_lexeme(caches, hir, states, bytes, deadline)
        })?;
        match entry {
            // Charged once, as part of the counted lexeme's states (see `register`).
            Ok(d) => Ok(Some((key, d))),
            Err(dfa::DfaError::TooBig { cost }) => {
                self.dfa_spent += cost;
                Ok(None)
            }
            Err(dfa::DfaError::Deadline) => Err(self.time_error()),
        }
    }

    /// Whether a run of weight `w` is worth a dense DFA attempt: within `max_inline_weight`,
    /// and, when a long counted repetition is nested in it (a bounded string among the
    /// alternatives of a property loop), light enough that unrolling the count stays small
    /// ([`NESTED_DENSE_WEIGHT`]); heavier ones are better as a counted lexeme of their own
    /// than inside a dense DFA, which would unroll the count (when it fits at all: the
    /// attempt alone took 40 ms on such loops).
    fn dense_ok(&mut self, run: &[&Expr], w: usize) -> bool {
        w <= self.limits.max_inline_weight
            && (w <= NESTED_DENSE_WEIGHT || !run.iter().any(|e| self.long_repeat_inside(e)))
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
            out.push(Sym::Lex(l));
            return Ok(());
        }
        if let [e] = run {
            if let Some(k) = self.key_complement(e) {
                if let Some(l) = self.key_lexeme(&k)? {
                    out.push(Sym::Lex(l));
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
                out.push(Sym::Lex(l));
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
    /// Cost: one DFA per chunk (cached per process like every lexeme).
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
                out.push(vec![Sym::Lex(l)]);
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
                        Some(x) => v.push(Sym::Lex(x)),
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
                    Some(x) => vec![Sym::Lex(x)],
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
                    Some(l) => vec![Sym::Lex(l)],
                    None => vec![Sym::Rule(self.ensure_rule(*r)?)],
                }
            }
            Expr::KeyComplement(k) => match self.key_lexeme(k)? {
                Some(l) => vec![Sym::Lex(l)],
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
                        self.rules[s as usize] = vec![vec![], vec![Sym::Rule(s), x]];
                        out.push(Sym::Rule(s));
                    }
                    Some(m) if *m > *min => {
                        // O_k ::= ε | O_{k-1} x  (0..=k copies)
                        let mut prev: Option<u32> = None;
                        for _ in 0..(m - min) {
                            let o = self.new_rule(format!("{}(repeat)", self.current_rule))?;
                            self.count(4)?;
                            let alt = match prev {
                                None => vec![x],
                                Some(p) => vec![Sym::Rule(p), x],
                            };
                            self.rules[o as usize] = vec![vec![], alt];
                            prev = Some(o);
                        }
                        out.push(Sym::Rule(prev.unwrap()));
                    }
                    Some(_) => {}
                }
                self.count(out.len())?;
                out
            }
        })
    }

    /// The HIR of a lexable expression (rule references are inlined).
    fn hir(&mut self, e: &Expr) -> Result<Hir, GrammarError> {
        Ok(match e {
            Expr::Empty => Hir::empty(),
            Expr::Literal(l) => Hir::literal(l.clone()),
            Expr::Chars(r) => Hir::class(hir::Class::Unicode(hir::ClassUnicode::new(
                r.iter().map(|&(a, b)| hir::ClassUnicodeRange::new(a, b)),
            ))),
            Expr::Bytes(r) => Hir::class(hir::Class::Bytes(hir::ClassBytes::new(
                r.iter().map(|&(a, b)| hir::ClassBytesRange::new(a, b)),
            ))),
            Expr::Ref(r) => {
                if let Some(h) = &self.hir_cache[*r as usize] {
                    return Ok(h.clone());
                }
                let body = &self.g.rules[*r as usize].body;
                let h = self.hir(body)?;
                self.hir_cache[*r as usize] = Some(h.clone());
                h
            }
            Expr::Seq(v) => Hir::concat(v.iter().map(|x| self.hir(x)).collect::<Result<_, _>>()?),
            Expr::Alt(v) => {
                Hir::alternation(v.iter().map(|x| self.hir(x)).collect::<Result<_, _>>()?)
            }
            Expr::Repeat { e, min, max } => Hir::repetition(hir::Repetition {
                min: *min,
                max: *max,
                greedy: true,
                sub: Box::new(self.hir(e)?),
            }),
            Expr::KeyComplement(k) => self.hir(&k.expand())?,
        })
    }

    /// The key complement `e` is, directly or as a reference to a rule whose body is one.
    fn key_complement(&self, e: &Expr) -> Option<std::sync::Arc<crate::grammar::KeyComplement>> {
        match e {
            Expr::KeyComplement(k) => Some(k.clone()),
            Expr::Ref(r) => match &self.g.rules[*r as usize].body {
                Expr::KeyComplement(k) => Some(k.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The lexeme of key complement `k` (see [`keys`]), built from its keys; `None` when
    /// the automaton exceeds the DFA limits (the caller lowers the expansion instead).
    /// Cost: O(states x classes) unless the process-wide cache has it.
    fn key_lexeme(
        &mut self,
        k: &crate::grammar::KeyComplement,
    ) -> Result<Option<u32>, GrammarError> {
        let Some((dev_key, dev)) = self.part(&[&keys::dev_expr(k.ch())])? else {
            return Ok(None);
        };
        let keys = k.keys().to_vec();
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        // The keys, each as its length in characters and its text: unambiguous, and much
        // cheaper to write than their `Debug` form (every character quoted); then the
        // structural key of the string character's part.
        let mut text = String::from("(?:a key other than ");
        for k in &keys {
            use std::fmt::Write;
            let _ = write!(text, "{}:", k.len());
            text.extend(k.iter());
        }
        text.push(')');
        let mut key = text.clone().into_bytes();
        key.extend_from_slice(&dev_key);
        let mut cache_key = format!("{states}/{bytes}/").into_bytes();
        cache_key.extend_from_slice(&key);
        let name = {
            let dev = dev.clone();
            move || text + dev.name().unwrap_or_default()
        };
        let built = std::cell::Cell::new(false);
        let tail = dev.clone();
        let l = self.register(&cache_key, key, name, || {
            built.set(true);
            keys::key_complement(
                &keys,
                crate::grammar::json_string::json_encodings,
                &dev,
                states,
                bytes,
            )
        })?;
        // The plain string of the same characters, whose tables derive this lexeme's,
        // recorded when the lexeme is built here: its states past the start and end are
        // then `tail`'s, numbered as in `tail` (a cached one may come from another build
        // of the tail).
        if let (Some(l), true) = (l, built.get()) {
            if let Some((_, base)) = self.part(&[&keys::base_expr(k.ch())])? {
                self.lexemes[l as usize].set_key_base(base, tail);
            }
        }
        Ok(l)
    }

    /// Builds (or reuses) the lexeme for `hir`; `None` when it exceeds the DFA limits.
    ///
    /// A lexeme that starts with a literal (a property key and the colon after it) is
    /// built as the literal's chain in front of the cached DFA of the rest (see
    /// [`Dfa::prepend_literal`]), which the other keys of the schema share.
    fn lexeme(&mut self, hir: Hir) -> Result<Option<u32>, GrammarError> {
        let key = hir.to_string();
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let cache_key = format!("{states}/{bytes}/{key}");
        let name = key.clone();
        self.register(
            cache_key.as_bytes(),
            key.into_bytes(),
            || name,
            move || build_hir_lexeme(caches, &hir, states, bytes, deadline),
        )
    }

    /// The lexeme of a sequence or an alternation of lexable expressions, as
    /// [`Lowerer::lexeme`] makes it from their regex, but looked up by a structural key of
    /// the expressions ([`Lowerer::expr_key`]) rather than by the printed regex: most
    /// lookups find the lexeme cached (12,100 of 20,468 on the 566-file MaskBench sample,
    /// against 7,976 builds), and then the regex is neither built nor printed, which was
    /// about a fifth of compile time. The key is exact: it encodes the expressions with
    /// rule references inlined, of which the regex is a function. Expressions that make
    /// the same regex but differ in ways the key does not normalize (see
    /// [`Lowerer::expr_key`]) get two cache entries: a second build, never a wrong
    /// share. Cost: a write of the key (a copy of each rule's key, written once per
    /// grammar) and a lookup; on a miss, the regex, the start of its printed form (the
    /// lexeme's name), and the build.
    fn lexeme_of(&mut self, group: Group, items: &[&Expr]) -> Result<Option<u32>, GrammarError> {
        let mut key = vec![STRUCTURAL_KEY];
        self.group_key(group, items.iter().copied(), &mut key);
        if let Some(l) = self.lex_map.get(&key) {
            return Ok(Some(*l));
        }
        self.room_for_lexeme()?;
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let mut cache_key = format!("{states}/{bytes}/").into_bytes();
        cache_key.extend_from_slice(&key);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let entry = match self.caches.get(&cache_key) {
            Some(entry) => entry,
            None => match self.literal_head_lexeme(group, items, &cache_key)? {
                Some(entry) => entry,
                None => self.fetch_or_build(&cache_key, group, items, |hir| {
                    build_hir_lexeme(caches, hir, states, bytes, deadline)
                })?,
            },
        };
        let name = match &entry {
            Ok(l) => l.name().unwrap_or_default().to_string(),
            Err(_) => String::new(),
        };
        self.add_lexeme(key, &name, entry)
    }

    /// The lexeme of a sequence that starts with literal text (a property key), built as
    /// that text's chain in front of the lexeme of the rest ([`Dfa::prepend_literal`]),
    /// the rest looked up by its structural key: the rest (`ws : ws` and the value) is
    /// usually shared by other keys of the schema, and then no regex is built or printed
    /// at all. [`build_hir_lexeme`] makes the same split on the regex, which it had to
    /// build and print whole first (about 4% of compile time on the MaskBench files that
    /// compile in 15-26 ms). `None` when `items` do not start with a literal followed by
    /// something, or the rest is too big or the chain does not fit; the caller then builds
    /// the whole. The entry is cached under `cache_key`. Cost: a write of the rest's key,
    /// a lookup, O(literal + 256) for the chain; on a miss, the rest's build.
    fn literal_head_lexeme(
        &mut self,
        group: Group,
        items: &[&Expr],
        cache_key: &[u8],
    ) -> Result<Option<cache::Entry>, GrammarError> {
        if group != Group::Seq {
            return Ok(None);
        }
        let (lit, rest) = literal_head_of(items);
        if lit.is_empty() || rest.is_empty() {
            return Ok(None);
        }
        let rest = &rest[..];
        let (states, bytes) = (self.limits.max_lexeme_states, self.limits.max_dfa_bytes);
        let mut rest_key = format!("{states}/{bytes}/").into_bytes();
        rest_key.push(STRUCTURAL_KEY);
        self.group_key(Group::Seq, rest.iter().copied(), &mut rest_key);
        let deadline = Some(self.deadline());
        let caches = self.caches;
        let r = match self.fetch_or_build(&rest_key, Group::Seq, rest, |hir| {
            Dfa::build_lexeme(caches, hir, states, bytes, deadline)
        })? {
            Ok(r) => r,
            Err(dfa::DfaError::Deadline) => return Ok(Some(Err(dfa::DfaError::Deadline))),
            Err(dfa::DfaError::TooBig { .. }) => return Ok(None),
        };
        let Some(d) = Dfa::prepend_literal(&lit, &r, states, bytes) else {
            return Ok(None);
        };
        let entry = self.caches.put(cache_key, Ok(d));
        if let Ok(l) = &entry {
            let mut name = printed_prefix(&Hir::literal(lit), dfa::NAME_BYTES);
            name.push_str(r.name().unwrap_or_default());
            l.set_name(&name);
        }
        Ok(Some(entry))
    }

    /// The cache entry under `cache_key` (a structural key); on a miss, the regex of
    /// `items` joined by `group` is built, given to `build`, and the result cached, its
    /// lexeme named after the start of the printed regex. Cost: a lookup; on a miss, the
    /// regex and the build.
    fn fetch_or_build(
        &mut self,
        cache_key: &[u8],
        group: Group,
        items: &[&Expr],
        build: impl FnOnce(&Hir) -> Result<Dfa, dfa::DfaError>,
    ) -> Result<cache::Entry, GrammarError> {
        if let Some(entry) = self.caches.get(cache_key) {
            return Ok(entry);
        }
        let parts = items
            .iter()
            .map(|e| self.hir(e))
            .collect::<Result<Vec<_>, _>>()?;
        let hir = match group {
            Group::Seq => Hir::concat(parts),
            Group::Alt => Hir::alternation(parts),
        };
        let entry = self.caches.put(cache_key, build(&hir));
        if let Ok(l) = &entry {
            l.set_name(&printed_prefix(&hir, dfa::NAME_BYTES));
        }
        Ok(entry)
    }

    /// Appends the key of `items` joined by `group` (as [`Expr::Seq`] or [`Expr::Alt`] of
    /// them would be written, see [`Lowerer::expr_key`]).
    fn group_key<'e>(
        &mut self,
        group: Group,
        items: impl Iterator<Item = &'e Expr>,
        out: &mut Vec<u8>,
    ) -> KeyKind {
        let start = out.len();
        let tag = group as u8;
        out.push(tag);
        let mut n = 0;
        // Where the last item starts, when it is a literal (the next one merges into it).
        let mut last_lit: Option<usize> = None;
        // The kind of the last item (what the group is when it is its only item).
        let mut single = KeyKind::Other;
        for x in items {
            let at = out.len();
            match self.expr_key(x, out) {
                KeyKind::Empty if group == Group::Seq => out.truncate(at),
                KeyKind::Group(g, k) if g == group => {
                    // Spliced: its items become this group's.
                    out.remove(at);
                    out.pop();
                    n += k;
                    last_lit = None;
                }
                KeyKind::Literal if group == Group::Seq => {
                    if let Some(prev) = last_lit {
                        // Merged: `prev` holds tag, length (4 bytes), bytes.
                        let add = out.len() - at - 5;
                        let len = u32::from_le_bytes(out[prev + 1..prev + 5].try_into().unwrap());
                        let len = len.saturating_add(add as u32);
                        out[prev + 1..prev + 5].copy_from_slice(&len.to_le_bytes());
                        out.drain(at..at + 5);
                    } else {
                        last_lit = Some(at);
                        n += 1;
                        single = KeyKind::Literal;
                    }
                }
                kind => {
                    n += 1;
                    last_lit = None;
                    single = kind;
                }
            }
        }
        out.push(END);
        match (group, n) {
            (Group::Seq, 0) => {
                out.truncate(start);
                out.push(0);
                KeyKind::Empty
            }
            (_, 1) => {
                out.remove(start);
                out.pop();
                single
            }
            _ => KeyKind::Group(group, n),
        }
    }

    /// Appends the structural key of `e` to `out`: a tag per node, explicit lengths, each
    /// group closed by an end tag, and the key of a referenced rule's body in place of
    /// the reference (written once per rule and copied after). Written normalized the
    /// way [`Hir::concat`] and [`Hir::alternation`] normalize: nested sequences
    /// (alternations) flattened, empty items of sequences dropped, adjacent literals
    /// merged, single items unwrapped, and one-character classes written as literals, so
    /// that expressions that make the same regex that way get the same key. Two
    /// expressions get the same key only when their regexes are the same (see
    /// [`Lowerer::hir`]). Returns what the key is. Cost: O(key bytes), plus the shifts
    /// of spliced groups.
    fn expr_key(&mut self, e: &Expr, out: &mut Vec<u8>) -> KeyKind {
        match e {
            Expr::Empty => {
                out.push(0);
                KeyKind::Empty
            }
            Expr::Literal(l) if l.is_empty() => {
                out.push(0);
                KeyKind::Empty
            }
            Expr::Literal(l) => {
                literal_key(l, out);
                KeyKind::Literal
            }
            Expr::Chars(r) if r.len() == 1 && r[0].0 == r[0].1 => {
                literal_key(r[0].0.encode_utf8(&mut [0; 4]).as_bytes(), out);
                KeyKind::Literal
            }
            Expr::Chars(r) => {
                out.push(2);
                put_len(out, r.len());
                for &(a, b) in r {
                    out.extend_from_slice(&u32::from(a).to_le_bytes());
                    out.extend_from_slice(&u32::from(b).to_le_bytes());
                }
                KeyKind::Other
            }
            Expr::Bytes(r) if r.len() == 1 && r[0].0 == r[0].1 => {
                literal_key(&[r[0].0], out);
                KeyKind::Literal
            }
            Expr::Bytes(r) => {
                out.push(3);
                put_len(out, r.len());
                for &(a, b) in r {
                    out.extend_from_slice(&[a, b]);
                }
                KeyKind::Other
            }
            Expr::Ref(r) => {
                if let Some((k, kind)) = &self.key_cache[*r as usize] {
                    out.extend_from_slice(k);
                    return *kind;
                }
                let g = self.g;
                let start = out.len();
                let kind = self.expr_key(&g.rules[*r as usize].body, out);
                self.key_cache[*r as usize] = Some((out[start..].into(), kind));
                kind
            }
            Expr::Seq(v) => self.group_key(Group::Seq, v.iter(), out),
            Expr::Alt(v) => self.group_key(Group::Alt, v.iter(), out),
            Expr::Repeat {
                e,
                min: 1,
                max: Some(1),
            } => self.expr_key(e, out),
            Expr::Repeat {
                min: 0,
                max: Some(0),
                ..
            } => {
                out.push(0);
                KeyKind::Empty
            }
            Expr::Repeat { e, min, max } => {
                out.push(6);
                out.extend_from_slice(&min.to_le_bytes());
                match max {
                    Some(m) => {
                        out.push(1);
                        out.extend_from_slice(&m.to_le_bytes());
                    }
                    None => out.push(0),
                }
                self.expr_key(e, out);
                KeyKind::Other
            }
            Expr::KeyComplement(k) => {
                out.push(7);
                put_len(out, k.keys().len());
                for key in k.keys() {
                    put_len(out, key.len());
                    for &c in key {
                        out.extend_from_slice(&u32::from(c).to_le_bytes());
                    }
                }
                self.expr_key(k.ch(), out);
                KeyKind::Other
            }
        }
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

    /// Adds the lexeme named `key` to the grammar (once per grammar), building it with
    /// `build` unless the process-wide cache has it under `cache_key`; `None` when it
    /// exceeds the DFA limits.
    fn register(
        &mut self,
        cache_key: &[u8],
        key: Vec<u8>,
        name: impl FnOnce() -> String,
        build: impl FnOnce() -> Result<Dfa, dfa::DfaError>,
    ) -> Result<Option<u32>, GrammarError> {
        if let Some(&l) = self.lex_map.get(&key) {
            return Ok(Some(l));
        }
        self.room_for_lexeme()?;
        let entry = match self.caches.get(cache_key) {
            Some(entry) => entry,
            None => self.caches.put(cache_key, build()),
        };
        self.add_lexeme(key, &name(), entry)
    }

    /// Fails when one more lexeme would pass `max_lexemes`, or a compile budget is spent.
    fn room_for_lexeme(&self) -> Result<(), GrammarError> {
        if self.lexemes.len() >= self.limits.max_lexemes {
            return Err(limit(
                "number of lexemes",
                self.lexemes.len() + 1,
                self.limits.max_lexemes,
                crate::error::LimitKind::Lexemes,
            ));
        }
        self.check_budgets()
    }

    /// Adds the lexeme of a cache entry to the grammar under `key`, named after the start
    /// of `name` (a printed regex); `None` when the entry says it exceeds the DFA limits.
    fn add_lexeme(
        &mut self,
        key: Vec<u8>,
        name: &str,
        entry: cache::Entry,
    ) -> Result<Option<u32>, GrammarError> {
        match entry {
            Ok(d) => {
                self.dfa_spent += d.num_states();
                let l = self.lexemes.len() as u32;
                self.lexemes.push(d);
                // Control characters escaped, so diagnostics stay on one line (only the
                // first 61 bytes are needed to name it).
                let full = name;
                let mut name = String::new();
                for c in full.chars() {
                    if name.len() > 60 {
                        break;
                    }
                    if c.is_control() {
                        name.extend(c.escape_default());
                    } else {
                        name.push(c);
                    }
                }
                if name.len() > 60 {
                    let mut cut = 57;
                    while !name.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    name.truncate(cut);
                    name.push_str("...");
                }
                self.lex_name.push(name);
                self.lex_map.insert(key, l);
                Ok(Some(l))
            }
            Err(dfa::DfaError::TooBig { cost }) => {
                self.dfa_spent += cost;
                Ok(None)
            }
            Err(dfa::DfaError::Deadline) => Err(self.time_error()),
        }
    }

    fn finish(self, root: u32) -> Result<CompiledGrammar, GrammarError> {
        let mut syms = Vec::with_capacity(self.total_syms + self.rules.len());
        let mut rule_alts = Vec::with_capacity(self.rules.len());
        let mut pos_rule = Vec::new();
        for (r, alts) in self.rules.iter().enumerate() {
            let mut starts = Vec::with_capacity(alts.len());
            for alt in alts {
                starts.push(syms.len() as u32);
                syms.extend_from_slice(alt);
                syms.push(Sym::End(r as u32));
                pos_rule.resize(syms.len(), r as u32);
            }
            rule_alts.push(starts);
        }
        if syms.len() >= u32::MAX as usize / 2 {
            return Err(limit(
                "compiled grammar size",
                syms.len(),
                u32::MAX as usize / 2,
                crate::error::LimitKind::CompiledSymbols,
            ));
        }
        // Nullable rules, to a fixpoint.
        let lex_nullable: Vec<bool> = self
            .lexemes
            .iter()
            .map(|d| d.accepting(d.start()))
            .collect();
        let mut nullable = vec![false; self.rules.len()];
        loop {
            let mut changed = false;
            for (r, alts) in self.rules.iter().enumerate() {
                // A checked rule is never nullable: the parser's nullable shortcut would
                // skip its check (and no JSON value is empty).
                if nullable[r] || self.rule_check[r].is_some() {
                    continue;
                }
                let n = alts.iter().any(|alt| {
                    alt.iter().all(|s| match s {
                        Sym::Lex(l) => lex_nullable[*l as usize],
                        Sym::Rule(x) => nullable[*x as usize],
                        Sym::End(_) => true,
                    })
                });
                if n {
                    nullable[r] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let lex_follow = follow_bytes(&syms, &rule_alts, &nullable, &self.lexemes);
        let lex_check_sensitive = check_sensitive(&syms, &rule_alts, &nullable, &self.rule_check);
        let nullable_check = self
            .rule_check
            .iter()
            .zip(&nullable)
            .any(|(c, &n)| c.is_some() && n);
        let total: usize = self.lexemes.iter().map(|d| d.num_states()).sum();
        Ok(CompiledGrammar {
            syms,
            rule_alts,
            rule_nullable: nullable,
            rule_name: self.rule_name,
            root,
            lexemes: self.lexemes,
            lex_name: self.lex_name,
            n_lex_states: total,
            pos_rule,
            lex_follow,
            has_checks: self.rule_check.iter().any(|c| c.is_some()),
            nullable_check,
            lex_check_sensitive,
            rule_check: self.rule_check,
            shortest: std::sync::OnceLock::new(),
            completion_bytes: std::sync::OnceLock::new(),
        })
    }
}

/// Positions whose completion may complete a checked rule in the same step: a rule is
/// "hot" if it is checked or sits before a nullable suffix in a hot rule's alternative; a
/// position is sensitive if a nullable suffix follows it in a hot rule. Cost: a fixpoint
/// over the grammar.
fn check_sensitive(
    syms: &[Sym],
    rule_alts: &[Vec<u32>],
    nullable: &[bool],
    checks: &[Option<Check>],
) -> Vec<bool> {
    let mut hot: Vec<bool> = checks.iter().map(|c| c.is_some()).collect();
    if !hot.iter().any(|&h| h) {
        return vec![false; syms.len()];
    }
    // Whether the suffix after position p (up to End) is nullable.
    let tail_null = |p: usize| -> bool {
        let mut i = p + 1;
        loop {
            match syms[i] {
                Sym::End(_) => return true,
                Sym::Lex(_) => return false,
                Sym::Rule(r) if !nullable[r as usize] => return false,
                Sym::Rule(_) => i += 1,
            }
        }
    };
    loop {
        let mut changed = false;
        for (r, alts) in rule_alts.iter().enumerate() {
            if !hot[r] {
                continue;
            }
            for &a in alts {
                let mut i = a as usize;
                while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                    if let Sym::Rule(x) = syms[i] {
                        if !hot[x as usize] && tail_null(i) {
                            hot[x as usize] = true;
                            changed = true;
                        }
                    }
                    i += 1;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut out = vec![false; syms.len()];
    for (r, alts) in rule_alts.iter().enumerate() {
        if !hot[r] {
            continue;
        }
        for &a in alts {
            let mut i = a as usize;
            while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                if let Sym::Lex(_) = syms[i] {
                    out[i] = tail_null(i);
                }
                i += 1;
            }
        }
    }
    out
}

/// FIRST/FOLLOW over bytes, then, for each lexeme position, the bytes that can follow the
/// lexeme. Falls back to "any byte" (always close) if the fixpoint takes too long: that is
/// only slower, never wrong.
fn follow_bytes(
    syms: &[Sym],
    rule_alts: &[Vec<u32>],
    nullable: &[bool],
    lexemes: &[std::sync::Arc<Lexeme>],
) -> Vec<crate::byteset::ByteSet> {
    use crate::byteset::ByteSet;
    let n = rule_alts.len();
    let lex_first = |l: u32| *lexemes[l as usize].allowed(lexemes[l as usize].start());
    let lex_null = |l: u32| lexemes[l as usize].accepting(lexemes[l as usize].start());
    // FIRST of the suffix starting at `p` (up to End), and whether that suffix is nullable.
    let first_from = |p: usize, first: &[ByteSet]| -> (ByteSet, bool) {
        let mut acc = ByteSet::EMPTY;
        let mut i = p;
        loop {
            match syms[i] {
                Sym::End(_) => return (acc, true),
                Sym::Lex(l) => {
                    acc.union_with(&lex_first(l));
                    if !lex_null(l) {
                        return (acc, false);
                    }
                }
                Sym::Rule(r) => {
                    acc.union_with(&first[r as usize]);
                    if !nullable[r as usize] {
                        return (acc, false);
                    }
                }
            }
            i += 1;
        }
    };
    let all = ByteSet([u64::MAX; 4]);
    let mut first = vec![ByteSet::EMPTY; n];
    let mut ok = false;
    for _ in 0..64 {
        let mut changed = false;
        for r in 0..n {
            for &a in &rule_alts[r] {
                let (f, _) = first_from(a as usize, &first);
                let mut nf = first[r];
                nf.union_with(&f);
                if nf != first[r] {
                    first[r] = nf;
                    changed = true;
                }
            }
        }
        if !changed {
            ok = true;
            break;
        }
    }
    if !ok {
        first = vec![all; n];
    }
    let mut follow = vec![ByteSet::EMPTY; n];
    let mut ok = false;
    for _ in 0..64 {
        let mut changed = false;
        for r in 0..n {
            for &a in &rule_alts[r] {
                let mut i = a as usize;
                while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                    if let Sym::Rule(x) = syms[i] {
                        let (mut f, null) = first_from(i + 1, &first);
                        if null {
                            f.union_with(&follow[r]);
                        }
                        let mut nf = follow[x as usize];
                        nf.union_with(&f);
                        if nf != follow[x as usize] {
                            follow[x as usize] = nf;
                            changed = true;
                        }
                    }
                    i += 1;
                }
            }
        }
        if !changed {
            ok = true;
            break;
        }
    }
    if !ok {
        return vec![all; syms.len()];
    }
    let mut out = vec![ByteSet::EMPTY; syms.len()];
    for r in 0..n {
        for &a in &rule_alts[r] {
            let mut i = a as usize;
            while let Sym::Rule(_) | Sym::Lex(_) = syms[i] {
                if let Sym::Lex(_) = syms[i] {
                    let (mut f, null) = first_from(i + 1, &first);
                    if null {
                        f.union_with(&follow[r]);
                    }
                    out[i] = f;
                }
                i += 1;
            }
        }
    }
    out
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
            // leaves nothing in the process-wide cache that a compile could read.
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
