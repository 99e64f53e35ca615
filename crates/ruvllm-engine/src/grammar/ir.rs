//! The grammar IR and its analyses (productivity, nullability) and rewrites (pruning,
//! merging copies of a rule).
//!
//! Owns: `Grammar`, `Rule`, `Expr`, `KeyComplement`. Uses: the JSON string encodings
//! (`json_string`) and `util`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::GrammarError;

/// A semantic predicate on the exact text a rule derived, for constraints that are not
/// context-free (JSON Schema's `uniqueItems`, exclusive `oneOf`, `not`, ...).
///
/// The parser calls it each time it completes the checked rule over a span of the output,
/// and drops that completion when it answers `false`: the token that would complete a
/// violation is forbidden. Masks stay sound (nothing that fails the check is ever accepted),
/// but a prefix may become a dead end when every completion of it fails the check; the
/// grammar's own language should therefore be as tight as possible, with the check
/// removing only what the grammar cannot express.
pub trait ValueCheck: Send + Sync + std::fmt::Debug {
    /// Whether `text` is acceptable. Cost: implementation-defined; called once per
    /// candidate completion (including during mask computation), so keep it near-linear.
    fn accepts(&self, text: &[u8]) -> bool;

    /// Members (`"key":value` texts) that may make a failing object pass, shortest
    /// first: the completion search inserts them before the object's closing brace (see
    /// `crate::matching::complete`); the check and the grammar still judge the result. Cost: none
    /// (computed when the check is built); empty by default.
    fn member_hints(&self) -> &[String] {
        &[]
    }

    /// The keys (decoded) that the failing object `text` lacks and must gain to pass, in
    /// the order to write them: the completion search writes each as a member whose value
    /// is the grammar's own shortest one (see `crate::matching::complete`), so the fill follows the
    /// grammar exactly instead of guessing values. Empty by default (and for a value the
    /// check does not read as an object). Cost: one pass over `text`.
    fn missing_keys(&self, _text: &[u8]) -> Vec<String> {
        Vec::new()
    }

    /// The first key of each way the failing object `text` can gain keys to pass, best
    /// first (the first is [`ValueCheck::missing_keys`]'s first): the fill writes one and
    /// goes on, and comes back to the next when that way leads nowhere (a failed `anyOf`
    /// whose branches need different keys). By default, the first missing key. Cost: as
    /// [`ValueCheck::missing_keys`].
    fn key_choices(&self, text: &[u8]) -> Vec<String> {
        self.missing_keys(text).into_iter().take(1).collect()
    }

    /// Whether the check, failing on the object `text`, blames the value of its member
    /// `key` (a validator's error inside that member): the completion search then looks
    /// for another value there. False by default. Cost: as [`ValueCheck::accepts`].
    fn blames_member(&self, _text: &[u8], _key: &str) -> bool {
        false
    }

    /// The changes inside the failing value `text` that the check asks for beyond an
    /// object's own required keys (a validator's nested `required` key, a type, a
    /// `format`, a `pattern`, a `const` or `enum` that the value or one inside it must
    /// meet, a `minProperties` that no required key meets, a string too short), best
    /// first: ways of making one change, of which the completion search makes the first
    /// that the grammar reads, and goes on. Empty by default. Cost: as
    /// [`ValueCheck::accepts`].
    fn inner_fixes(&self, _text: &[u8]) -> Vec<InnerFix> {
        Vec::new()
    }

    /// Texts that pass this check alone, simplest first (a number within its bounds and
    /// multiples): the completion search puts them in place of a failing value, and the
    /// grammar and every other check still judge the result. Empty by default. Cost:
    /// small, bounded by the implementation.
    fn value_examples(&self) -> Vec<String> {
        Vec::new()
    }

    /// What the check enforces, for diagnostics (`ruvllm schema compile` lists them).
    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

/// A change inside a failing object's text that its check asks for
/// ([`ValueCheck::inner_fixes`]); offsets are into that text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InnerFix {
    /// An object (the failing one, or one nested in it; closing brace at `close`) lacks
    /// `key`.
    Key {
        /// The offset of the object's closing brace.
        close: usize,
        /// Whether the object has members (a comma goes before the new one).
        members: bool,
        /// The key (decoded).
        key: String,
    },
    /// The object at `close` (its closing brace) has fewer members than it must: one
    /// more, with any key the grammar allows there.
    Member {
        /// The offset of the object's closing brace.
        close: usize,
        /// Whether the object has members (a comma goes before the new one).
        members: bool,
    },
    /// The array at `close` (its closing bracket) has fewer elements than it must (a
    /// `minItems`, or a `oneOf` that more than one branch passes while it is this short):
    /// one more, the grammar's shortest.
    Element {
        /// The offset of the array's closing bracket.
        close: usize,
        /// Whether the array has elements (a comma goes before the new one).
        elements: bool,
    },
    /// `start..end` replaced by `text`: a value of the wrong type by the simplest of the
    /// type wanted (`{}`, `[]`, `""`, `0`, `true`, `null`), a value by the one a `const`,
    /// `enum`, `format` or `pattern` wants, a string too short padded; a member or an
    /// element the value may not have (an `additionalProperties` or
    /// `unevaluatedProperties` key, an element past `maxItems` or the evaluated ones),
    /// with the comma that joins it, by nothing.
    Replace {
        /// Where the value starts.
        start: usize,
        /// Where it ends (exclusive).
        end: usize,
        /// The simplest value of the wanted type.
        text: String,
    },
}

/// A shared [`ValueCheck`] attached to a rule. Equality is identity.
#[derive(Clone, Debug)]
pub struct Check(pub Arc<dyn ValueCheck>);

impl PartialEq for Check {
    fn eq(&self, o: &Check) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}
impl Eq for Check {}

/// Index of a rule in [`Grammar::rules`].
pub type RuleId = u32;

/// A grammar expression. Terminals are Unicode code point sets (matched as their UTF-8
/// encodings) or raw byte sets; the rest is the usual BNF structure plus bounded repetition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// The empty string.
    Empty,
    /// An exact byte string (the UTF-8 encoding of a literal).
    Literal(Vec<u8>),
    /// One code point in any of the inclusive ranges (sorted, disjoint). Empty = no match.
    Chars(Vec<(char, char)>),
    /// One byte in any of the inclusive ranges (byte-mode regexes).
    Bytes(Vec<(u8, u8)>),
    /// A reference to a rule.
    Ref(RuleId),
    /// Concatenation.
    Seq(Vec<Expr>),
    /// Alternation.
    Alt(Vec<Expr>),
    /// `e{min,max}`; `max = None` is unbounded.
    Repeat {
        /// The repeated expression.
        e: Box<Expr>,
        /// Minimum count.
        min: u32,
        /// Maximum count, `None` for unbounded.
        max: Option<u32>,
    },
    /// The JSON strings, quotes included, other than the given object keys: shorthand for
    /// the expression [`KeyComplement::expand`] builds (see there).
    KeyComplement(Arc<KeyComplement>),
}

impl Expr {
    /// One code point that is none of `not` (any order, duplicates allowed). Cost:
    /// O(n log n) in `not`.
    pub fn chars_except(not: &[char]) -> Expr {
        let mut not = not.to_vec();
        not.sort_unstable();
        not.dedup();
        Expr::Chars(super::json_string::complement_chars(&not))
    }

    /// `e{min,max}`, with a directly nested repetition merged into one when that keeps the
    /// language: `(x{a,b}){c,d}` is `x{c·a, d·b}` exactly when the counts it allows,
    /// `⋃ k∈[c,d] [k·a, k·b]`, have no gap, i.e. when `a - 1 <= c·(b - a)` (the gap between
    /// the intervals of `k` and `k + 1` shrinks as `k` grows), or `b` is unbounded and
    /// `c >= 1` or `a <= 1`. Cost: O(1).
    ///
    /// Why: the nested form is ambiguous (20 `a`s split into groups in many ways), and a
    /// parser that keeps every derivation alive pays for each split at every byte:
    /// `((((a{1,100}){1,100}){1,100}){1,100})` took 20 ms, then 112, 296 and 650 ms for
    /// its first masks, while `a{1,100000000}` is one counted lexeme (a few µs per mask).
    /// The merged bound may exceed [`crate::Limits::max_repeat`], which limits what a
    /// source writes; the compiler lowers large bounds without unrolling them. A product
    /// that overflows `u32` is left nested.
    pub fn repeat(e: Expr, min: u32, max: Option<u32>) -> Expr {
        let mut inner = &e;
        while let Expr::Seq(v) | Expr::Alt(v) = inner {
            match v.as_slice() {
                [one] => inner = one,
                _ => break,
            }
        }
        if let Expr::Repeat {
            e: x,
            min: a,
            max: b,
        } = inner
        {
            let (a, b, c, d) = (*a, *b, min, max);
            let gapless = match b {
                Some(b) => b >= a && u64::from(a) <= 1 + u64::from(c) * u64::from(b - a),
                None => c >= 1 || a <= 1,
            };
            let lo = c.checked_mul(a);
            let hi = match (b, d) {
                (Some(b), Some(d)) => b.checked_mul(d).map(Some),
                _ => Some(None),
            };
            // `d = 0` or `b = 0` allow only the empty string, and inverted outer bounds
            // (`d < c`) nothing: leave such shapes as written.
            if gapless && d != Some(0) && b != Some(0) && d.is_none_or(|d| d >= c) {
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    return Expr::Repeat {
                        e: x.clone(),
                        min: lo,
                        max: hi,
                    };
                }
            }
        }
        Expr::Repeat {
            e: Box::new(e),
            min,
            max,
        }
    }
}

/// "A JSON string other than these keys", the name of an object's additional property.
///
/// Its meaning is its expansion ([`KeyComplement::expand`]): a trie of the keys, where
/// every node may also close the string, or leave the trie by a character no key continues
/// with and then go on with any string characters (`ch`). That expansion costs a few
/// expressions per trie node to build, clone and compare (about a tenth of schema compile
/// time when every object carried it), and the compiler builds the automaton of the node
/// from the keys anyway (`compile::keys`); kept as a node, the expansion is built only by
/// whoever needs it (printing, a compiler without the keys, a lexeme too big for the direct
/// automaton). The compiler weighs the node as its expansion without building it, so it is
/// lowered exactly as the expansion would be.
///
/// Keys are read as JSON string characters in the encodings the schema front end writes
/// (raw, short escape, and `\uXXXX` for the characters encoders escape: controls,
/// non-ASCII, HTML-sensitive punctuation; see `json_string::u_escaped`).
#[derive(Debug, Clone)]
pub struct KeyComplement {
    /// The keys as characters, sorted and without duplicates.
    keys: Vec<Vec<char>>,
    /// One string character, as the tails of the expansion read it.
    ch: Expr,
    /// The compiler's measure of the expansion, computed once (see
    /// [`KeyComplement::measured`]); not part of the node's value.
    measured: std::sync::OnceLock<[usize; 4]>,
}

impl PartialEq for KeyComplement {
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys && self.ch == other.ch
    }
}

impl Eq for KeyComplement {}

impl std::hash::Hash for KeyComplement {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.keys.hash(h);
        self.ch.hash(h);
    }
}

impl KeyComplement {
    /// The complement of `keys` (any order, duplicates allowed), with tails of `ch`.
    /// Cost: O(key characters x log keys) for the sort.
    pub fn new<S: AsRef<str>>(keys: &[S], ch: Expr) -> KeyComplement {
        let mut keys: Vec<Vec<char>> = keys.iter().map(|k| k.as_ref().chars().collect()).collect();
        keys.sort_unstable();
        keys.dedup();
        KeyComplement {
            keys,
            ch,
            measured: std::sync::OnceLock::new(),
        }
    }

    /// What `measure` computes from this node, computed on the first call and kept (it
    /// depends on the keys only, which never change). Cost: O(1) after the first call.
    pub(crate) fn measured(&self, measure: impl FnOnce(&[Vec<char>]) -> [usize; 4]) -> [usize; 4] {
        *self.measured.get_or_init(|| measure(&self.keys))
    }

    /// The keys, as characters, sorted and without duplicates.
    pub fn keys(&self) -> &[Vec<char>] {
        &self.keys
    }

    /// The string character of the tails.
    pub fn ch(&self) -> &Expr {
        &self.ch
    }

    /// The expression this node stands for. Cost: O(key characters) expressions, plus
    /// O(trie nodes x depth) for the traversal.
    pub fn expand(&self) -> Expr {
        crate::grammar::json_string::key_complement_body(
            &self.keys,
            &mut crate::grammar::json_string::BuildExpr(&self.ch),
        )
    }
}

/// A named rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its name (used in diagnostics).
    pub name: String,
    /// Its body.
    pub body: Expr,
}

/// Something a front end accepted but its user should know, with where it stands: a
/// keyword read as an annotation that the user may have meant as an assertion (an unknown
/// JSON Schema `format`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrammarWarning {
    /// Where: a JSON pointer (`#/properties/card/format`).
    pub at: String,
    /// What, in a sentence.
    pub message: String,
}

impl std::fmt::Display for GrammarWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// A grammar: rules and the start rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    /// The rules; `Expr::Ref(i)` refers to `rules[i]`.
    pub rules: Vec<Rule>,
    /// The start rule.
    pub root: RuleId,
    /// Semantic checks on rules (see [`ValueCheck`]); a checked rule is never inlined into
    /// a lexeme, so that the parser sees each of its completions.
    pub checks: Vec<(RuleId, Check)>,
    /// What the front end accepted with a warning ([`GrammarWarning`]); the language does
    /// not depend on it.
    pub warnings: Vec<GrammarWarning>,
}

impl Grammar {
    /// A grammar with one rule.
    pub fn single(name: &str, body: Expr) -> Grammar {
        Grammar {
            rules: vec![Rule {
                name: name.into(),
                body,
            }],
            root: 0,
            checks: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Rules that derive at least one finite string. Cost: O(size · rules) worst case,
    /// iterating to a fixpoint.
    pub fn productive(&self) -> Vec<bool> {
        let mut prod = vec![false; self.rules.len()];
        loop {
            let mut changed = false;
            for (i, r) in self.rules.iter().enumerate() {
                if !prod[i] && expr_productive(&r.body, &prod) {
                    prod[i] = true;
                    changed = true;
                }
            }
            if !changed {
                return prod;
            }
        }
    }

    /// Removes every alternative that cannot derive a finite string, so that any prefix the
    /// parser accepts can be completed. Fails when the start rule itself is unproductive.
    pub fn prune_unproductive(&mut self) -> Result<(), GrammarError> {
        let prod = self.productive();
        if !prod[self.root as usize] {
            return Err(GrammarError::EmptyLanguage {
                rule: self.rules[self.root as usize].name.clone(),
            });
        }
        for (i, r) in self.rules.iter_mut().enumerate() {
            if prod[i] {
                let body = std::mem::replace(&mut r.body, Expr::Empty);
                r.body = prune(body, &prod).unwrap_or(Expr::Alt(vec![]));
            } else {
                r.body = Expr::Alt(vec![]);
            }
        }
        Ok(())
    }

    /// Whether [`Grammar::prune_unproductive`] would leave the grammar as it is (and not
    /// fail), so that a compiler can skip copying it. Cost: one pass over the rules plus
    /// [`Grammar::productive`]; no allocation besides that.
    pub(crate) fn is_pruned(&self) -> bool {
        let prod = self.productive();
        prod[self.root as usize]
            && self.rules.iter().zip(&prod).all(|(r, &p)| {
                if p {
                    !prunable(&r.body, &prod)
                } else {
                    matches!(&r.body, Expr::Alt(v) if v.is_empty())
                }
            })
    }

    /// Rules reachable from the root.
    pub fn reachable(&self) -> Vec<bool> {
        let mut seen = vec![false; self.rules.len()];
        let mut stack = vec![self.root];
        seen[self.root as usize] = true;
        while let Some(r) = stack.pop() {
            visit_refs(&self.rules[r as usize].body, &mut |x| {
                if !seen[x as usize] {
                    seen[x as usize] = true;
                    stack.push(x);
                }
            });
        }
        seen
    }

    /// Appends the rules and checks of `other` (their names prefixed with `prefix`) and
    /// returns the id its root has here, so that grammars from different front ends (a
    /// schema's grammar inside a tool-call wrapper, say) can be combined with
    /// [`Expr::Ref`]. The root of `self` is unchanged. Cost: O(size of `other`).
    pub fn embed(&mut self, other: Grammar, prefix: &str) -> RuleId {
        let off = self.rules.len() as RuleId;
        for r in other.rules {
            let mut body = r.body;
            rewrite_refs(&mut body, &|r| r + off);
            self.rules.push(Rule {
                name: format!("{prefix}{}", r.name),
                body,
            });
        }
        self.checks
            .extend(other.checks.into_iter().map(|(r, c)| (r + off, c)));
        self.warnings.extend(other.warnings);
        other.root + off
    }

    /// Adds a rule and returns its id. Cost: O(1).
    pub fn add_rule(&mut self, name: &str, body: Expr) -> RuleId {
        self.rules.push(Rule {
            name: name.into(),
            body,
        });
        (self.rules.len() - 1) as RuleId
    }

    /// Total number of expression nodes (a size measure for limits).
    pub fn size(&self) -> usize {
        self.rules.iter().map(|r| expr_size(&r.body)).sum()
    }

    /// The grammar with every rule that equals another rule, up to rules already found
    /// equal, replaced by that rule; `None` when no two rules are equal that way. Checked
    /// rules merge only with rules of the same check ([`Check`]'s identity: the schema
    /// front end shares a check between equal sub-schemas).
    ///
    /// Why: a schema's `allOf`/`oneOf` of `required` sets expands into one object per
    /// combination (`tson.json`: 48), each with its own copy of the same key-value rule.
    /// The parser then carried 48 copies of every key's item through every byte of the
    /// object (672 items a set), and a boundary walk over those sets took milliseconds.
    /// With the copies merged, the 48 objects wait on one rule.
    ///
    /// How: rules are visited once, in depth-first post-order from the root (what a rule
    /// refers to is settled before it, except along a cycle), and each unchecked rule is
    /// looked up by its body, with every reference read as its class, among the rules kept
    /// so far. Exact: two rules whose bodies are equal once references are read as rules of
    /// the same language derive the same language, by induction on derivations; so does
    /// the rewritten grammar, where every reference names its class's first rule (a merged
    /// rule's body is left empty: nothing refers to it). Rules on a cycle whose equality
    /// would need a fixpoint (`a ::= "x" a`, `b ::= "x" b`) stay apart: a missed merge,
    /// never a wrong one. `None` for grammars of under 16 rules ([`MERGE_MIN_RULES`]), and
    /// when the copies are under a 16th of the grammar
    /// ([`MERGE_WORTH`]: the rewrite would cost more than it saves). Cost: O(grammar size)
    /// expected (a hash per rule, and an equality check per hash match), plus a copy of
    /// the grammar when it merges.
    pub(crate) fn merge_equal_rules(&self) -> Option<Grammar> {
        if self.rules.len() < MERGE_MIN_RULES {
            return None;
        }
        self.merge_equal_rules_always()
    }

    /// [`Grammar::merge_equal_rules`] whatever the grammar's size.
    fn merge_equal_rules_always(&self) -> Option<Grammar> {
        use std::hash::Hasher;
        let n = self.rules.len();
        // The check of each checked rule, by address (equal checks are shared).
        let mut checked: Vec<Option<usize>> = vec![None; n];
        for (r, c) in &self.checks {
            checked[*r as usize] = Some(Arc::as_ptr(&c.0) as *const () as usize);
        }
        // Post-order from the root, iteratively (nesting can be deep).
        let mut seen = vec![false; n];
        let mut order: Vec<RuleId> = Vec::with_capacity(n);
        // (rule, where its children start in `kids`); a rule's children are popped from
        // the end of `kids` one by one.
        let mut stack: Vec<(RuleId, usize)> = Vec::new();
        let mut kids: Vec<RuleId> = Vec::new();
        seen[self.root as usize] = true;
        stack.push((self.root, 0));
        visit_refs(&self.rules[self.root as usize].body, &mut |x| kids.push(x));
        while let Some(&(r, from)) = stack.last() {
            if kids.len() > from {
                let x = kids.pop().unwrap_or(0);
                if !seen[x as usize] {
                    seen[x as usize] = true;
                    stack.push((x, kids.len()));
                    visit_refs(&self.rules[x as usize].body, &mut |y| kids.push(y));
                }
            } else {
                order.push(r);
                stack.pop();
            }
        }
        let mut class: Vec<RuleId> = (0..n as RuleId).collect();
        let mut kept: HashMap<u64, Vec<RuleId>> = HashMap::new();
        let mut merged = false;
        for &r in &order {
            let body = &self.rules[r as usize].body;
            let mut h = crate::util::ItemHasher::default();
            std::hash::Hash::hash(&checked[r as usize], &mut h);
            hash_mod(body, &class, &mut h);
            let list = kept.entry(h.finish()).or_default();
            match list.iter().find(|&&c| {
                checked[c as usize] == checked[r as usize]
                    && eq_mod(body, &self.rules[c as usize].body, &class)
            }) {
                Some(&c) => {
                    class[r as usize] = c;
                    merged = true;
                }
                None => list.push(r),
            }
        }
        // A rewrite copies the grammar: worth it where the copies are a good part of it
        // (small copies cost the parser little, and the lowering finds their lexemes
        // already built).
        let size = |r: RuleId| expr_size(&self.rules[r as usize].body);
        let gone: usize = order
            .iter()
            .filter(|&&r| class[r as usize] != r)
            .map(|&r| size(r))
            .sum();
        if !merged || gone * MERGE_WORTH < order.iter().map(|&r| size(r)).sum::<usize>() {
            return None;
        }
        let rules = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| Rule {
                name: r.name.clone(),
                body: if class[i] == i as RuleId {
                    let mut body = r.body.clone();
                    rewrite_refs(&mut body, &|x| class[x as usize]);
                    body
                } else {
                    Expr::Alt(vec![])
                },
            })
            .collect();
        Some(Grammar {
            rules,
            root: class[self.root as usize],
            checks: self
                .checks
                .iter()
                .filter(|(r, _)| class[*r as usize] == *r)
                .cloned()
                .collect(),
            warnings: self.warnings.clone(),
        })
    }
}

/// Grammars of fewer rules are not searched for copies (see
/// [`Grammar::merge_equal_rules`]): their copies are small, and over MaskBench the search
/// cost their 8,000 compiles 10 µs each, 3% of such a compile, for 347 small merges.
const MERGE_MIN_RULES: usize = 16;

/// A merge rewrites the grammar only when the merged copies are at least this fraction
/// (its inverse) of the reachable grammar's size (see [`Grammar::merge_equal_rules`]).
const MERGE_WORTH: usize = 16;

/// Calls `f` for every rule referenced in `e`.
pub fn visit_refs(e: &Expr, f: &mut impl FnMut(RuleId)) {
    match e {
        Expr::Ref(r) => f(*r),
        Expr::Seq(v) | Expr::Alt(v) => v.iter().for_each(|x| visit_refs(x, f)),
        Expr::Repeat { e, .. } => visit_refs(e, f),
        Expr::KeyComplement(k) => visit_refs(&k.ch, f),
        _ => {}
    }
}

/// Hashes `e` with every reference read as its class (see [`Grammar::merge_equal_rules`]).
fn hash_mod(e: &Expr, class: &[RuleId], h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    std::mem::discriminant(e).hash(h);
    match e {
        Expr::Ref(r) => class[*r as usize].hash(h),
        Expr::Seq(v) | Expr::Alt(v) => {
            v.len().hash(h);
            v.iter().for_each(|x| hash_mod(x, class, h));
        }
        Expr::Repeat { e, min, max } => {
            min.hash(h);
            max.hash(h);
            hash_mod(e, class, h);
        }
        Expr::KeyComplement(k) => {
            k.keys.hash(h);
            hash_mod(&k.ch, class, h);
        }
        other => other.hash(h),
    }
}

/// Whether `a` and `b` are equal with every reference read as its class.
fn eq_mod(a: &Expr, b: &Expr, class: &[RuleId]) -> bool {
    match (a, b) {
        (Expr::Ref(x), Expr::Ref(y)) => class[*x as usize] == class[*y as usize],
        (Expr::Seq(v), Expr::Seq(w)) | (Expr::Alt(v), Expr::Alt(w)) => {
            v.len() == w.len() && v.iter().zip(w).all(|(x, y)| eq_mod(x, y, class))
        }
        (
            Expr::Repeat { e, min, max },
            Expr::Repeat {
                e: f,
                min: m2,
                max: x2,
            },
        ) => min == m2 && max == x2 && eq_mod(e, f, class),
        (Expr::KeyComplement(k), Expr::KeyComplement(l)) => {
            k.keys == l.keys && eq_mod(&k.ch, &l.ch, class)
        }
        (Expr::Ref(_), _)
        | (Expr::Seq(_), _)
        | (Expr::Alt(_), _)
        | (Expr::Repeat { .. }, _)
        | (Expr::KeyComplement(_), _) => false,
        (x, y) => x == y,
    }
}

/// Replaces every rule reference `r` in `e` (key complements' included) by `f(r)`.
/// Cost: O(size of `e`), plus a copy of a shared key complement whose references change.
fn rewrite_refs(e: &mut Expr, f: &impl Fn(RuleId) -> RuleId) {
    match e {
        Expr::Ref(r) => *r = f(*r),
        Expr::Seq(v) | Expr::Alt(v) => v.iter_mut().for_each(|x| rewrite_refs(x, f)),
        Expr::Repeat { e, .. } => rewrite_refs(e, f),
        Expr::KeyComplement(k) => {
            let mut changes = false;
            visit_refs(&k.ch, &mut |x| changes |= f(x) != x);
            if changes {
                rewrite_refs(&mut Arc::make_mut(k).ch, f);
            }
        }
        _ => {}
    }
}

fn expr_size(e: &Expr) -> usize {
    match e {
        Expr::Seq(v) | Expr::Alt(v) => 1 + v.iter().map(expr_size).sum::<usize>(),
        Expr::Repeat { e, .. } => 1 + expr_size(e),
        // One node per key character (about a fifth of the expansion's).
        Expr::KeyComplement(k) => 1 + expr_size(&k.ch) + k.keys.iter().map(Vec::len).sum::<usize>(),
        _ => 1,
    }
}

fn expr_productive(e: &Expr, prod: &[bool]) -> bool {
    match e {
        Expr::Empty | Expr::Literal(_) => true,
        Expr::Chars(r) => !r.is_empty(),
        Expr::Bytes(r) => !r.is_empty(),
        Expr::Ref(r) => prod[*r as usize],
        Expr::Seq(v) => v.iter().all(|x| expr_productive(x, prod)),
        Expr::Alt(v) => v.iter().any(|x| expr_productive(x, prod)),
        // `x{min,max}` with `max < min` (only a grammar built in code can say it) matches
        // nothing.
        Expr::Repeat { e, min, max } => {
            !max.is_some_and(|m| m < *min)
                && (*min == 0 || max == &Some(0) || expr_productive(e, prod))
        }
        // The expansion closes the string or leaves the key trie at its root by some
        // character (a finite set of keys never covers them all), and its `ch` appears
        // only under `*`.
        Expr::KeyComplement(_) => true,
    }
}

/// Whether [`prune`] would change `e` (return `None` or a different expression).
fn prunable(e: &Expr, prod: &[bool]) -> bool {
    match e {
        Expr::Chars(r) => r.is_empty(),
        Expr::Bytes(r) => r.is_empty(),
        Expr::Ref(r) => !prod[*r as usize],
        Expr::Seq(v) => v.iter().any(|x| prunable(x, prod)),
        Expr::Alt(v) => v.is_empty() || v.iter().any(|x| prunable(x, prod)),
        Expr::Repeat { e, min, max } => {
            max.is_some_and(|m| m < *min) || *max == Some(0) || prunable(e, prod)
        }
        // The expansion's character classes are never empty; only `ch` can be pruned.
        Expr::KeyComplement(k) => prunable(&k.ch, prod),
        Expr::Empty | Expr::Literal(_) => false,
    }
}

/// Returns the expression without unproductive parts, or None when it is unproductive.
fn prune(e: Expr, prod: &[bool]) -> Option<Expr> {
    match e {
        Expr::Chars(ref r) if r.is_empty() => None,
        Expr::Bytes(ref r) if r.is_empty() => None,
        Expr::Ref(r) if !prod[r as usize] => None,
        Expr::Seq(v) => {
            let mut out = Vec::with_capacity(v.len());
            for x in v {
                out.push(prune(x, prod)?);
            }
            Some(Expr::Seq(out))
        }
        Expr::Alt(v) => {
            let out: Vec<Expr> = v.into_iter().filter_map(|x| prune(x, prod)).collect();
            if out.is_empty() {
                None
            } else {
                Some(Expr::Alt(out))
            }
        }
        Expr::Repeat { e, min, max } => {
            if max.is_some_and(|m| m < min) {
                return None;
            }
            if max == Some(0) {
                return Some(Expr::Empty);
            }
            match prune(*e, prod) {
                Some(x) => Some(Expr::Repeat {
                    e: Box::new(x),
                    min,
                    max,
                }),
                None if min == 0 => Some(Expr::Empty),
                None => None,
            }
        }
        Expr::KeyComplement(k) if prunable(&k.ch, prod) => prune(k.expand(), prod),
        other => Some(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;

    /// Copies of a rule merge, also when they refer to copies of other rules (what an
    /// `allOf` of `oneOf`s of `required` sets makes), into the first one met; rules that
    /// differ, cycles that would need a fixpoint, and checked rules with different checks
    /// stay apart; checked rules with one shared check merge.
    #[test]
    fn equal_rules_merge() {
        let text = r#"root ::= a1 | a2 | c1 | c2 | r1 | r2 | d
            a1 ::= "{" kv1 "}"
            a2 ::= "{" kv2 "}"
            kv1 ::= "\"x\":" v1 | "\"y\":" [0-9]+
            kv2 ::= "\"x\":" v2 | "\"y\":" [0-9]+
            v1 ::= "true" | "[" w "]"
            v2 ::= "true" | "[" w "]"
            w ::= "1" | w "," w
            c1 ::= "c" [a-z]
            c2 ::= "c" [a-z]
            r1 ::= "r" r1 | "r"
            r2 ::= "r" r2 | "r"
            d ::= "{" kv1 "}" "!""#;
        let mut g = Grammar::from_gbnf(text, &Limits::default()).unwrap();
        let id = |g: &Grammar, name: &str| g.rules.iter().position(|r| r.name == name).unwrap();
        let (c1, c2) = (id(&g, "c1") as RuleId, id(&g, "c2") as RuleId);
        #[derive(Debug)]
        struct Never;
        impl ValueCheck for Never {
            fn accepts(&self, _: &[u8]) -> bool {
                false
            }
        }
        let shared = Check(Arc::new(Never));
        // c1 and c2 checked with different checks: apart.
        g.checks = vec![(c1, shared.clone()), (c2, Check(Arc::new(Never)))];
        let m = g.merge_equal_rules_always().unwrap();
        let refs = |m: &Grammar, name: &str| {
            let mut v = Vec::new();
            visit_refs(&m.rules[id(m, name)].body, &mut |x| {
                v.push(m.rules[x as usize].name.clone())
            });
            v
        };
        // a1 and a2 merged into one, and so kv1/kv2 and v1/v2: one of each pair kept, the
        // other's body left empty; the root refers to the kept `a` twice, d to the kept kv.
        let empty = |m: &Grammar, name: &str| m.rules[id(m, name)].body == Expr::Alt(vec![]);
        for r in ["a", "kv", "v"] {
            let (one, two) = (format!("{r}1"), format!("{r}2"));
            assert!(empty(&m, &one) != empty(&m, &two), "{r}");
        }
        let a = if empty(&m, "a1") { "a2" } else { "a1" };
        let kv = if empty(&m, "kv1") { "kv2" } else { "kv1" };
        let root = refs(&m, "root");
        assert_eq!(root.iter().filter(|n| *n == a).count(), 2, "{root:?}");
        assert_eq!(refs(&m, "d"), vec![kv.to_string()]);
        // Recursive copies would need a fixpoint: kept apart.
        assert!(root.contains(&"r1".to_string()) && root.contains(&"r2".to_string()));
        assert!(root.contains(&"c1".to_string()) && root.contains(&"c2".to_string()));
        assert_eq!(m.checks.len(), 2);
        // With one shared check, c1 and c2 merge (one of them kept) and one check entry
        // goes.
        g.checks = vec![(c1, shared.clone()), (c2, shared)];
        let m = g.merge_equal_rules_always().unwrap();
        let root = refs(&m, "root");
        assert_eq!(
            root.iter().filter(|n| n.starts_with('c')).count(),
            2,
            "{root:?}"
        );
        assert!(root.contains(&"c1".to_string()) != root.contains(&"c2".to_string()));
        assert_eq!(m.checks.len(), 1);
        // Nothing equal: None.
        let g = Grammar::from_gbnf(
            "root ::= a | b\na ::= \"a\"\nb ::= \"b\"",
            &Limits::default(),
        )
        .unwrap();
        assert!(g.merge_equal_rules_always().is_none());
    }

    /// `is_pruned` says exactly whether pruning leaves the grammar unchanged.
    #[test]
    fn is_pruned_matches_pruning() {
        let unchanged = |g: &Grammar| {
            let mut h = g.clone();
            h.prune_unproductive().is_ok() && h == *g
        };
        let mut grammars: Vec<Grammar> = [
            r#"root ::= "a" b* | "c"
               b ::= [x-z]"#,
            r#"root ::= "a" | dead
               dead ::= "b" dead"#,
            r#"root ::= "a" x{0}
               x ::= "y""#,
            r#"root ::= "a" x{0,0} "b"
               x ::= "y""#,
            r#"root ::= (("a" | "b")+ "c"?)*"#,
        ]
        .iter()
        .map(|t| Grammar::from_gbnf(t, &Limits::default()).unwrap())
        .collect();
        // Shapes a front end could hand over unpruned.
        grammars.push(Grammar::single(
            "root",
            Expr::Alt(vec![Expr::Literal(b"a".to_vec()), Expr::Chars(vec![])]),
        ));
        grammars.push(Grammar::single("root", Expr::Alt(vec![])));
        // A repetition whose maximum is below its minimum matches nothing.
        grammars.push(Grammar::single(
            "root",
            Expr::Alt(vec![
                Expr::Literal(b"a".to_vec()),
                Expr::Repeat {
                    e: Box::new(Expr::Literal(b"b".to_vec())),
                    min: 100,
                    max: Some(3),
                },
            ]),
        ));
        grammars.push(Grammar::single(
            "root",
            Expr::Seq(vec![
                Expr::Literal(b"a".to_vec()),
                Expr::Repeat {
                    e: Box::new(Expr::Bytes(vec![])),
                    min: 0,
                    max: None,
                },
            ]),
        ));
        let mut pruned_already = 0;
        for g in &grammars {
            assert_eq!(g.is_pruned(), unchanged(g), "{g:?}");
            let mut h = g.clone();
            if h.prune_unproductive().is_ok() {
                assert!(h.is_pruned(), "{h:?}");
            }
            pruned_already += g.is_pruned() as usize;
        }
        assert!(pruned_already > 0 && pruned_already < grammars.len());
    }

    /// A merged repetition allows exactly the counts the nested one does (`x^i x^j` is
    /// `x^(i+j)` for any `x`, so comparing counts compares languages), over every small
    /// shape, bounded and unbounded; and merges happen where they may.
    #[test]
    fn nested_repeats_merge_exactly() {
        const N: u32 = 60;
        let x = || Expr::Literal(b"a".to_vec());
        let counts = |min: u32, max: Option<u32>| -> Vec<bool> {
            (0..N)
                .map(|n| n >= min && max.is_none_or(|m| n <= m))
                .collect()
        };
        let bounds = |lo: u32| (lo..6).map(Some).chain([None]);
        let mut merged = 0;
        for a in 0..6 {
            for b in bounds(a) {
                for c in 0..6 {
                    for d in bounds(c) {
                        // Counts of the nested form: some k in [c, d] with n in [k·a, k·b].
                        let nested: Vec<bool> = (0..N)
                            .map(|n| {
                                (c..=d.unwrap_or(N)).any(|k| {
                                    n >= k * a && b.is_none_or(|b| n <= k * b) && (k > 0 || n == 0)
                                })
                            })
                            .collect();
                        let inner = Expr::Repeat {
                            e: Box::new(x()),
                            min: a,
                            max: b,
                        };
                        match Expr::repeat(Expr::Seq(vec![inner]), c, d) {
                            Expr::Repeat { e, min, max } if *e == x() => {
                                assert_eq!(
                                    counts(min, max),
                                    nested,
                                    "(a{{{a},{b:?}}}){{{c},{d:?}}}"
                                );
                                merged += 1;
                            }
                            Expr::Repeat { e, min, max } => {
                                assert!(matches!(*e, Expr::Seq(_)) && (min, max) == (c, d));
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                }
            }
        }
        assert!(merged > 400, "{merged}");
        // The hostile regex that motivated it: one repetition of 10^8.
        let g = Grammar::from_regex("((((a{1,100}){1,100}){1,100}){1,100})", &Limits::default())
            .unwrap();
        let body = &g.rules[g.root as usize].body;
        assert!(
            matches!(
                body,
                Expr::Repeat {
                    min: 1,
                    max: Some(100_000_000),
                    ..
                }
            ),
            "{body:?}"
        );
        // Inverted outer bounds (nothing matches) are not merged into a language.
        let inner = Expr::Repeat {
            e: Box::new(x()),
            min: 1,
            max: Some(5),
        };
        assert!(matches!(
            Expr::repeat(inner, 5, Some(2)),
            Expr::Repeat {
                min: 5,
                max: Some(2),
                ..
            }
        ));
        // Overflowing products stay nested.
        let big = Expr::Repeat {
            e: Box::new(x()),
            min: 1,
            max: Some(u32::MAX / 2),
        };
        assert!(matches!(
            Expr::repeat(big, 1, Some(3)),
            Expr::Repeat { max: Some(3), .. }
        ));
    }
}
