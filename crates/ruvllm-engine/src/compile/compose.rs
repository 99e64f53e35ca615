//! Lexeme DFAs composed from smaller cached ones.
//!
//! A schema's big lexemes are built from a few small ones used everywhere: the members of
//! an object (`"name" ws : ws <string>`, one alternative per property, often inside a
//! `(, member)*` loop), arrays of enum values. Through a Thompson NFA, every copy of a
//! JSON string inside such a lexeme is a fresh run of UTF-8 NFA states, every DFA state
//! of the subset construction holds dozens of them, and the value's states are built once
//! per property. That was about 40% of all compile time on MaskBench.
//!
//! This module builds those lexemes one level up:
//!
//! * **Leaves.** The regex's top structure (concatenations, alternations, optional parts,
//!   `*`/`+` loops over such structure) is taken apart down to *leaves*: literals, and any
//!   other sub-expression (a character class, a bounded repetition, a JSON string), whose
//!   DFA comes from the engine's lexeme cache (built once per engine, like any
//!   lexeme).
//! * **Positions.** The leaves are the positions of a Glushkov automaton: each has the
//!   set of leaves that may follow it, and whether the whole may end after it (computed with
//!   the leaves' own nullability). A state of the composed DFA is then a set of
//!   (leaf, leaf-DFA state) pairs, which is usually one or two pairs where a NFA state set
//!   had dozens.
//! * **Shared tails.** Before determinizing, leaves that are the same automaton with the
//!   same followers and the same ending are merged (partition refinement over the
//!   follower graph). The values of two properties of the same type then share their
//!   states: after `"a": ` and after `"b": ` the composed DFA is in the same state, so it
//!   has fewer states than the NFA route gave, and the mask tables are built once for both.
//! * **Entry groups.** The leaves entered together once a leaf accepts (an object loop's
//!   hundreds of keys after `, `) are one pseudo-position in a set, and what a group does
//!   on a byte class is computed once per composition, not once per DFA state.
//! * **Local classes.** A DFA state steps its positions once per byte class *its* leaves
//!   tell apart (a string's dozen, not the hundred that the keys' bytes make for the
//!   whole table), and fills the table row by ranges.
//!
//! On MaskBench (llama3_1, every 4th file) the composed lexemes took 0.68 s to determinize
//! against 1.13 s for the same regexes through the NFA route, with 873,000 states against
//! 1,567,000; compile as a whole got about 7% faster (`docs/PERFORMANCE.md`).
//!
//! The language is exactly the regex's (the construction is the classic position
//! automaton, with leaves in place of bytes; the tests compare every composed DFA with the
//! NFA route's by a product walk). Like every lexeme DFA, state 0 is the only dead state:
//! a leaf that cannot be followed to an end is dropped before the construction.
//!
//! **When it is not used.** Regexes with few HIR nodes (the NFA route is as fast, and the
//! leaves would only add cache entries), a leaf that exceeds the DFA limits, a long count
//! of a loop, a follower graph past [`MAX_EDGES`], or leaf merging past
//! [`MAX_REFINE_WORK`] (a long chain of alike leaves): [`compose`] answers `None` and the
//! caller takes the NFA route, so the choice never changes a language, only where compile
//! time goes. Every step is linear in the leaves and their follower sets, except the
//! merging (bounded by its budget) and the subset construction (bounded by the DFA limits
//! and the compile deadline, like the NFA route's). The recursion over the regex is as
//! deep as the regex, as in the lowering that built it.
//!
//! Part of the compiler (the parent module). Owns: the position automaton of one
//! composition. Uses: the compile caches (its leaves), the lexeme automata, the subset
//! construction's state pool.

use std::hash::Hasher;
use std::sync::Arc;

use regex_syntax::hir::{Hir, HirKind};

use super::automata::dfa::{Dfa, DfaError, Lexeme};
use super::cache::Caches;
use super::setpool::SetPool;
use super::subset::Subset;
use crate::byteset::ByteSet;
use crate::util::{FastMap, ItemHasher};

/// HIR nodes below which a regex goes the NFA route whole.
const MIN_NODES: usize = 16;
/// Follower-set entries a composition may create before it gives up (concatenations of
/// many nullable parts make the follower sets quadratic).
const MAX_EDGES: usize = 1 << 16;
/// Leaves a composition may have before it gives up.
const MAX_LEAVES: usize = 1 << 14;
/// Counts above which a repetition of a loop sends the whole regex to the NFA route.
const LONG_COUNT: u32 = 16;
/// Signature entries the merging of equal leaves may write over all its rounds before the
/// composition gives up (a few rounds over a few thousand leaves in real lexemes).
const MAX_REFINE_WORK: usize = 1 << 22;
/// DFA states added between two looks at the clock.
const DEADLINE_EVERY: usize = 64;

/// A leaf's automaton: a literal (state `i + 1` has read `i` of its bytes), or a cached
/// lexeme DFA.
enum Leaf {
    Lit(Box<[u8]>),
    Lex(Arc<Lexeme>),
}

impl Leaf {
    #[inline]
    fn start(&self) -> u32 {
        match self {
            Leaf::Lit(_) => 1,
            Leaf::Lex(l) => l.start(),
        }
    }

    #[inline]
    fn next(&self, s: u32, b: u8) -> u32 {
        match self {
            Leaf::Lit(l) => {
                let i = s as usize - 1;
                if l.get(i) == Some(&b) {
                    s + 1
                } else {
                    0
                }
            }
            Leaf::Lex(l) => l.next(s, b),
        }
    }

    #[inline]
    fn accepting(&self, s: u32) -> bool {
        match self {
            Leaf::Lit(l) => s as usize == l.len() + 1,
            Leaf::Lex(l) => l.accepting(s),
        }
    }

    /// The bytes at which a byte class of this leaf starts (for a literal: each of its
    /// bytes and the byte after it). Cost: 256 steps.
    fn bounds(&self) -> ByteSet {
        let mut set = ByteSet::EMPTY;
        set.insert(0);
        match self {
            Leaf::Lit(l) => {
                for &b in l.iter() {
                    set.insert(b);
                    if b < 255 {
                        set.insert(b + 1);
                    }
                }
            }
            Leaf::Lex(l) => {
                for b in 1..=255u8 {
                    if l.class_of(b) != l.class_of(b - 1) {
                        set.insert(b);
                    }
                }
            }
        }
        set
    }

    /// The bytes that keep state `s` alive.
    #[inline]
    fn allowed(&self, s: u32) -> ByteSet {
        match self {
            Leaf::Lit(l) => {
                let mut set = ByteSet::EMPTY;
                if let Some(&b) = l.get(s as usize - 1) {
                    set.insert(b);
                }
                set
            }
            Leaf::Lex(l) => *l.allowed(s),
        }
    }
}

/// First and last leaves of a sub-expression, and whether it matches the empty string.
struct Frag {
    first: Vec<u32>,
    last: Vec<u32>,
    nullable: bool,
}

impl Frag {
    fn empty() -> Frag {
        Frag {
            first: Vec::new(),
            last: Vec::new(),
            nullable: true,
        }
    }
}

/// Why a composition stopped before its DFA was built.
enum Stop {
    /// Not worth it or not possible: the caller takes the NFA route.
    Decline,
    /// The DFA limits or the deadline (the NFA route would not do better).
    Err(DfaError),
}

/// The position automaton under construction.
struct Glushkov<'c> {
    /// Where the leaves are looked up and cached.
    caches: &'c Caches,
    leaves: Vec<Leaf>,
    next: Vec<Vec<u32>>,
    edges: usize,
    max_states: usize,
    max_bytes: usize,
    deadline: Option<std::time::Instant>,
}

impl Glushkov<'_> {
    fn leaf(&mut self, leaf: Leaf) -> Result<Frag, Stop> {
        if self.leaves.len() >= MAX_LEAVES {
            return Err(Stop::Decline);
        }
        let nullable = leaf.accepting(leaf.start());
        let id = self.leaves.len() as u32;
        self.leaves.push(leaf);
        self.next.push(Vec::new());
        Ok(Frag {
            first: vec![id],
            last: vec![id],
            nullable,
        })
    }

    /// `to` may follow each leaf of `from`.
    fn link(&mut self, from: &[u32], to: &[u32]) -> Result<(), Stop> {
        self.edges += from.len() * to.len();
        if self.edges > MAX_EDGES {
            return Err(Stop::Decline);
        }
        for &a in from {
            self.next[a as usize].extend_from_slice(to);
        }
        Ok(())
    }

    fn frag(&mut self, h: &Hir) -> Result<Frag, Stop> {
        match h.kind() {
            HirKind::Empty => Ok(Frag::empty()),
            HirKind::Literal(l) if l.0.is_empty() => Ok(Frag::empty()),
            HirKind::Literal(l) => self.leaf(Leaf::Lit(l.0.clone())),
            HirKind::Capture(c) => self.frag(&c.sub),
            HirKind::Concat(parts) => {
                let mut acc = Frag::empty();
                for p in parts {
                    let f = self.frag(p)?;
                    self.link(&acc.last, &f.first)?;
                    if acc.nullable {
                        acc.first.extend_from_slice(&f.first);
                    }
                    acc.last = if f.nullable {
                        let mut l = f.last;
                        l.extend_from_slice(&acc.last);
                        l
                    } else {
                        f.last
                    };
                    acc.nullable &= f.nullable;
                }
                Ok(acc)
            }
            HirKind::Alternation(alts) => {
                let mut acc = Frag {
                    first: Vec::new(),
                    last: Vec::new(),
                    nullable: false,
                };
                for a in alts {
                    let f = self.frag(a)?;
                    acc.first.extend_from_slice(&f.first);
                    acc.last.extend_from_slice(&f.last);
                    acc.nullable |= f.nullable;
                }
                Ok(acc)
            }
            HirKind::Repetition(r) if loop_or_option(r) && structured(&r.sub) => {
                let f = self.frag(&r.sub)?;
                if r.max.is_none() {
                    self.link(&f.last, &f.first)?;
                }
                Ok(Frag {
                    nullable: f.nullable || r.min == 0,
                    ..f
                })
            }
            // A long count of a loop (a word count, `(?:\S+\s+){0,99}`) unrolls into most of
            // the lexeme's states: composing would walk again what that leaf's own
            // determinization built (`o21074` compiled in 44 ms composed, 33 ms through the
            // NFA), so the whole regex takes the NFA route.
            HirKind::Repetition(r) if r.max.is_some_and(|m| m > LONG_COUNT) && has_loop(&r.sub) => {
                Err(Stop::Decline)
            }
            _ => {
                let got = self.caches.cached(
                    &h.to_string(),
                    h,
                    self.max_states,
                    self.max_bytes,
                    self.deadline,
                );
                match got {
                    Ok(l) if !l.has_counts() => self.leaf(Leaf::Lex(l)),
                    Ok(_) | Err(DfaError::TooBig { .. }) => Err(Stop::Decline),
                    Err(e) => Err(Stop::Err(e)),
                }
            }
        }
    }
}

/// Whether `h` has structure this module takes apart (rather than a leaf): a
/// concatenation, an alternation, or an optional part or a `*`/`+` loop of one.
fn structured(h: &Hir) -> bool {
    match h.kind() {
        HirKind::Concat(_) | HirKind::Alternation(_) => true,
        HirKind::Capture(c) => structured(&c.sub),
        HirKind::Repetition(r) => loop_or_option(r) && structured(&r.sub),
        _ => false,
    }
}

/// Whether `r` is `?`, `*` or `+` (the repetitions a position automaton expresses
/// without copies).
fn loop_or_option(r: &regex_syntax::hir::Repetition) -> bool {
    matches!((r.min, r.max), (0, Some(1)) | (0 | 1, None))
}

/// Whether `h` has a `*` or `+` loop.
fn has_loop(h: &Hir) -> bool {
    match h.kind() {
        HirKind::Concat(v) | HirKind::Alternation(v) => v.iter().any(has_loop),
        HirKind::Capture(c) => has_loop(&c.sub),
        HirKind::Repetition(r) => r.max.is_none() || has_loop(&r.sub),
        _ => false,
    }
}

/// Whether `h` has at least `n` HIR nodes. Cost: O(min(n, nodes)).
fn has_nodes(h: &Hir, n: &mut usize) -> bool {
    if *n == 0 {
        return true;
    }
    *n -= 1;
    match h.kind() {
        HirKind::Concat(v) | HirKind::Alternation(v) => v.iter().any(|x| has_nodes(x, n)),
        HirKind::Capture(c) => has_nodes(&c.sub, n),
        HirKind::Repetition(r) => has_nodes(&r.sub, n),
        _ => *n == 0,
    }
}

/// A position: leaf class in the high half, leaf-DFA state in the low half.
#[inline]
fn pos(leaf: u32, state: u32) -> u64 {
    (leaf as u64) << 32 | state as u64
}

/// The DFA of `hir` composed from cached leaf DFAs (see the module docs), within
/// `max_states` states and `max_bytes` of tables and sets, stopping with
/// [`DfaError::Deadline`] once `deadline` has passed; `None` when the regex is small or
/// its structure does not suit (then the NFA route builds it). Cost: the leaves' cache
/// lookups (and builds, once per engine), then O(DFA states x positions per state x byte
/// classes).
pub(crate) fn compose(
    caches: &Caches,
    hir: &Hir,
    max_states: usize,
    max_bytes: usize,
    deadline: Option<std::time::Instant>,
) -> Option<Result<Dfa, DfaError>> {
    let mut budget = MIN_NODES;
    if !has_nodes(hir, &mut budget) {
        return None;
    }
    compose_any(caches, hir, max_states, max_bytes, deadline)
}

/// [`compose`] whatever the regex's size.
fn compose_any(
    caches: &Caches,
    hir: &Hir,
    max_states: usize,
    max_bytes: usize,
    deadline: Option<std::time::Instant>,
) -> Option<Result<Dfa, DfaError>> {
    if !structured(hir) {
        return None;
    }
    let mut g = Glushkov {
        caches,
        leaves: Vec::new(),
        next: Vec::new(),
        edges: 0,
        max_states,
        max_bytes,
        deadline,
    };
    match g.frag(hir) {
        Ok(root) => match determinize(g, root) {
            Ok(d) => Some(Ok(d)),
            Err(Stop::Decline) => None,
            Err(Stop::Err(e)) => Some(Err(e)),
        },
        Err(Stop::Decline) => None,
        Err(Stop::Err(e)) => Some(Err(e)),
    }
}

/// Merges equivalent leaves, drops dead ones, and runs the subset construction over
/// positions; declines when merging would take more than [`MAX_REFINE_WORK`]. The phases,
/// each its own step: [`refine`] (leaf classes), [`Classes::new`] (one representative
/// per class, dead classes dropped), [`Groups::build`] (entry groups), then
/// [`construct`] (the subset construction).
fn determinize(g: Glushkov, root: Frag) -> Result<Dfa, Stop> {
    let Glushkov {
        leaves,
        next,
        max_states,
        max_bytes,
        deadline,
        ..
    } = g;
    let mut final_ = vec![false; leaves.len()];
    for &l in &root.last {
        final_[l as usize] = true;
    }
    let class = refine(&leaves, &next, &final_, deadline)?;
    let cls = Classes::new(&leaves, &next, &final_, &class, &root.first);
    let (groups, after, start_group) = Groups::build(&cls);
    let steps = Steps::new(&cls, &groups, after);
    let limits = Bounds {
        max_states,
        max_bytes,
        deadline,
    };
    construct(steps, start_group, root.nullable, &limits)
}

/// Leaf classes: the same automaton, the same ending, followers of the same classes.
/// Starts from (automaton, ending) and refines by the follower classes until stable; `n`
/// leaves, each round linear in the leaves and their followers, at most
/// [`MAX_REFINE_WORK`] in all (then it declines).
fn refine(
    leaves: &[Leaf],
    next: &[Vec<u32>],
    final_: &[bool],
    deadline: Option<std::time::Instant>,
) -> Result<Vec<u32>, Stop> {
    let n = leaves.len();
    let mut class = vec![0u32; n];
    if n == 0 {
        return Ok(class);
    }
    let mut ids: FastMap<(usize, &[u8], bool), u32> = FastMap::default();
    for i in 0..n {
        let key = match &leaves[i] {
            Leaf::Lit(l) => (0, &l[..], final_[i]),
            Leaf::Lex(l) => (Arc::as_ptr(l) as usize, &[][..], final_[i]),
        };
        let k = ids.len() as u32;
        class[i] = *ids.entry(key).or_insert(k);
    }
    // Each round: a leaf's signature is its class and its followers' classes (sorted, in
    // one pool); leaves with equal signatures get one new class (found by the signature's
    // hash, then compared). A leaf alone in its class stays alone (refinement only
    // splits), so only leaves that share a class are signed; the others get fresh ids
    // after them.
    let mut count = ids.len();
    let mut pool: Vec<u32> = Vec::new();
    // Where each representative's signature lies in the pool.
    let mut sig_at: Vec<(usize, usize)> = vec![(0, 0); n];
    let mut size = vec![0u32; n];
    let mut refined = vec![0u32; n];
    let mut by_hash: FastMap<u64, Vec<(u32, u32)>> = FastMap::default();
    let mut work = 0usize;
    loop {
        // A class split travels one follower step per round, so a long chain of alike
        // leaves takes as many rounds as it is long: quadratic (6,000 `[ab]c?` took 0.9
        // s). Past the budget the NFA route, linear there, builds it.
        work += n + pool.len();
        if work > MAX_REFINE_WORK {
            return Err(Stop::Decline);
        }
        if deadline.is_some_and(|d| std::time::Instant::now() > d) {
            return Err(Stop::Err(DfaError::Deadline));
        }
        size[..count].iter_mut().for_each(|x| *x = 0);
        for &c in &class {
            size[c as usize] += 1;
        }
        pool.clear();
        by_hash.clear();
        let mut next_id = 0u32;
        for i in 0..n {
            if size[class[i] as usize] < 2 {
                continue;
            }
            let from = pool.len();
            pool.push(class[i]);
            pool.extend(next[i].iter().map(|&m| class[m as usize]));
            pool[from + 1..].sort_unstable();
            let mut w = from + 1;
            for r in from + 1..pool.len() {
                if w == from + 1 || pool[r] != pool[w - 1] {
                    pool[w] = pool[r];
                    w += 1;
                }
            }
            pool.truncate(w);
            sig_at[i] = (from, w);
            let mut h = ItemHasher::default();
            pool[from..w].iter().for_each(|&x| h.write_u64(x as u64));
            let list = by_hash.entry(h.finish()).or_default();
            let same = list.iter().find(|&&(r, _)| {
                let (a, b) = sig_at[r as usize];
                pool[a..b] == pool[from..w]
            });
            refined[i] = match same {
                Some(&(_, id)) => {
                    // Not a representative: its copy of the signature is not kept.
                    pool.truncate(from);
                    id
                }
                None => {
                    list.push((i as u32, next_id));
                    next_id += 1;
                    next_id - 1
                }
            };
        }
        if next_id == 0 {
            break;
        }
        for i in 0..n {
            if size[class[i] as usize] < 2 {
                refined[i] = next_id;
                next_id += 1;
            }
        }
        std::mem::swap(&mut class, &mut refined);
        if next_id as usize == count {
            break;
        }
        count = next_id as usize;
    }
    Ok(class)
}

/// The leaf classes of a composition: one representative leaf per class, its followers as
/// classes (dead ones dropped), and what the subset construction asks of each class.
/// Built in time linear in the leaves and their follower sets.
struct Classes<'a> {
    leaves: &'a [Leaf],
    /// The representative leaf of each class.
    rep: Vec<u32>,
    /// The live classes that may follow each class.
    follow: Vec<Vec<u32>>,
    /// The live classes the whole may begin with.
    first: Vec<u32>,
    /// A non-empty automaton after which the whole can end.
    alive: Vec<bool>,
    /// The class's automaton matches the empty string.
    nullable: Vec<bool>,
    /// The whole may end once the class's automaton accepts (itself final, or followed
    /// by classes that match the empty string up to a final one).
    ends: Vec<bool>,
    /// The bytes where a byte class of the class's automaton starts.
    bounds: Vec<ByteSet>,
}

impl<'a> Classes<'a> {
    fn new(
        leaves: &'a [Leaf],
        next: &[Vec<u32>],
        final_: &[bool],
        class: &[u32],
        root_first: &[u32],
    ) -> Classes<'a> {
        let k = class.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
        let mut rep = vec![u32::MAX; k];
        for (i, &c) in class.iter().enumerate() {
            if rep[c as usize] == u32::MAX {
                rep[c as usize] = i as u32;
            }
        }
        let follow: Vec<Vec<u32>> = (0..k)
            .map(|c| {
                let mut f: Vec<u32> = next[rep[c] as usize]
                    .iter()
                    .map(|&m| class[m as usize])
                    .collect();
                f.sort_unstable();
                f.dedup();
                f
            })
            .collect();
        let mut first: Vec<u32> = root_first.iter().map(|&m| class[m as usize]).collect();
        first.sort_unstable();
        first.dedup();
        let is_final: Vec<bool> = (0..k).map(|c| final_[rep[c] as usize]).collect();
        let mut cls = Classes {
            leaves,
            rep,
            follow,
            first,
            alive: Vec::new(),
            nullable: Vec::new(),
            ends: Vec::new(),
            bounds: Vec::new(),
        };
        cls.nullable = (0..k as u32)
            .map(|c| cls.leaf(c).accepting(cls.leaf(c).start()))
            .collect();
        let preds = Preds::of(&cls.follow);
        cls.prune(&preds, &is_final);
        cls.ends = cls.may_end(&preds, is_final);
        cls.bounds = (0..k as u32).map(|c| cls.leaf(c).bounds()).collect();
        cls
    }

    /// The representative leaf of class `c`.
    #[inline]
    fn leaf(&self, c: u32) -> &'a Leaf {
        &self.leaves[self.rep[c as usize] as usize]
    }

    /// How many classes.
    fn len(&self) -> usize {
        self.rep.len()
    }

    /// Marks the live classes (a non-empty automaton after which the whole can end) and
    /// drops the others from the follower sets and the first set.
    fn prune(&mut self, preds: &Preds, is_final: &[bool]) {
        let k = self.len();
        let nonempty: Vec<bool> = (0..k as u32).map(|c| self.leaf(c).start() != 0).collect();
        let mut alive = vec![false; k];
        let mut stack: Vec<u32> = (0..k as u32)
            .filter(|&c| nonempty[c as usize] && is_final[c as usize])
            .collect();
        stack.iter().for_each(|&c| alive[c as usize] = true);
        while let Some(m) = stack.pop() {
            for &p in preds.of_class(m) {
                if !alive[p as usize] && nonempty[p as usize] {
                    alive[p as usize] = true;
                    stack.push(p);
                }
            }
        }
        for f in self.follow.iter_mut() {
            f.retain(|&m| alive[m as usize]);
        }
        self.first.retain(|&m| alive[m as usize]);
        self.alive = alive;
    }

    /// `ends[c]`: the whole may end once class `c` accepts. Only live classes pass it on
    /// (a nullable class is live once it may end).
    fn may_end(&self, preds: &Preds, mut ends: Vec<bool>) -> Vec<bool> {
        let mut stack: Vec<u32> = (0..self.len() as u32)
            .filter(|&c| ends[c as usize] && self.nullable[c as usize])
            .collect();
        while let Some(m) = stack.pop() {
            for &p in preds.of_class(m) {
                if !ends[p as usize] {
                    ends[p as usize] = true;
                    if self.nullable[p as usize] {
                        stack.push(p);
                    }
                }
            }
        }
        ends
    }

    /// The byte classes of the whole (the bytes where a class of some live leaf starts)
    /// as a byte-to-class map and the number of classes.
    fn byte_classes(&self) -> ([u8; 256], usize) {
        let mut all = ByteSet::EMPTY;
        for c in 0..self.len() {
            if self.alive[c] {
                all.union_with(&self.bounds[c]);
            }
        }
        all.insert(0);
        let mut classes = [0u8; 256];
        let mut stride = 0usize;
        for b in 0..=255u8 {
            if all.contains(b) {
                stride += 1;
            }
            classes[b as usize] = (stride - 1) as u8;
        }
        (classes, stride)
    }
}

/// Each class's predecessors (the classes it follows), in compressed rows, for the two
/// backward searches of [`Classes`] (linear, where sweeps until nothing changes were
/// quadratic on long chains).
struct Preds {
    off: Vec<usize>,
    pred: Vec<u32>,
}

impl Preds {
    fn of(follow: &[Vec<u32>]) -> Preds {
        let k = follow.len();
        let mut off = vec![0usize; k + 1];
        for f in follow {
            for &m in f {
                off[m as usize + 1] += 1;
            }
        }
        for c in 0..k {
            off[c + 1] += off[c];
        }
        let mut pred = vec![0u32; off[k]];
        let mut fill = off.clone();
        for (c, f) in follow.iter().enumerate() {
            for &m in f {
                pred[fill[m as usize]] = c as u32;
                fill[m as usize] += 1;
            }
        }
        Preds { off, pred }
    }

    #[inline]
    fn of_class(&self, m: u32) -> &[u32] {
        &self.pred[self.off[m as usize]..self.off[m as usize + 1]]
    }
}

/// The entry groups of a composition: the leaves whose starts are entered together (once
/// a leaf accepts: its followers, and past those that match the empty string; at the
/// start: the first leaves). A set holds a group as one pseudo-position `pos(k + g, 0)`,
/// and what a group does on a byte is computed once ([`Steps::step_group`]), not once per
/// DFA state: the hundreds of keys an object loop may start with are stepped once per
/// byte class.
struct Groups {
    members: Vec<Vec<u32>>,
    ids: FastMap<Vec<u32>, u32>,
    /// Bytes where a class of some member starts (and 0).
    bounds: Vec<ByteSet>,
    /// Bytes on which some member leaves its start alive.
    allowed: Vec<ByteSet>,
    /// Some member matches the empty string and may end the whole.
    accepts: Vec<bool>,
}

impl Groups {
    /// The groups of `cls`, the group entered after each class accepts, and the group at
    /// the start. Linear in the classes and their follower sets (each group once).
    fn build(cls: &Classes) -> (Groups, Vec<Option<u32>>, Option<u32>) {
        let mut groups = Groups {
            members: Vec::new(),
            ids: FastMap::default(),
            bounds: Vec::new(),
            allowed: Vec::new(),
            accepts: Vec::new(),
        };
        let mut seen = vec![0u32; cls.len()];
        let mut epoch = 0u32;
        let after: Vec<Option<u32>> = (0..cls.len())
            .map(|c| groups.entered(cls, &cls.follow[c], &mut seen, &mut epoch))
            .collect();
        let start = groups.entered(cls, &cls.first, &mut seen, &mut epoch);
        (groups, after, start)
    }

    /// The group entered at `from` (and past the nullable classes that follow), added if
    /// new; `None` when it is empty.
    fn entered(
        &mut self,
        cls: &Classes,
        from: &[u32],
        seen: &mut [u32],
        epoch: &mut u32,
    ) -> Option<u32> {
        *epoch += 1;
        let mut out: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = from.to_vec();
        while let Some(m) = stack.pop() {
            if std::mem::replace(&mut seen[m as usize], *epoch) == *epoch {
                continue;
            }
            out.push(m);
            if cls.nullable[m as usize] {
                stack.extend_from_slice(&cls.follow[m as usize]);
            }
        }
        if out.is_empty() {
            return None;
        }
        out.sort_unstable();
        if let Some(&g) = self.ids.get(&out) {
            return Some(g);
        }
        let g = self.members.len() as u32;
        let mut b = ByteSet::EMPTY;
        let mut allowed = ByteSet::EMPTY;
        for &m in &out {
            let l = cls.leaf(m);
            b.union_with(&cls.bounds[m as usize]);
            allowed.union_with(&l.allowed(l.start()));
        }
        b.insert(0);
        self.bounds.push(b);
        self.allowed.push(allowed);
        self.accepts.push(
            out.iter()
                .any(|&m| cls.nullable[m as usize] && cls.ends[m as usize]),
        );
        self.ids.insert(out.clone(), g);
        self.members.push(out);
        Some(g)
    }
}

/// What positions become on a byte: a leaf position steps its automaton (and enters the
/// group after it when it accepts); a group's step is computed once per byte class of
/// its members and kept.
struct Steps<'a> {
    cls: &'a Classes<'a>,
    groups: &'a Groups,
    /// The group entered once each class accepts.
    after: Vec<Option<u32>>,
    /// `group_steps[g][i]`: what group `g` becomes on the bytes of its class `i` (a class
    /// starts at each byte of its bounds), as a range of `pool`; `None` until asked.
    group_steps: Vec<Vec<Option<(u32, u32)>>>,
    pool: Vec<u64>,
}

impl<'a> Steps<'a> {
    fn new(cls: &'a Classes<'a>, groups: &'a Groups, after: Vec<Option<u32>>) -> Steps<'a> {
        Steps {
            cls,
            groups,
            after,
            group_steps: groups
                .bounds
                .iter()
                .map(|b| vec![None; b.len() as usize])
                .collect(),
            pool: Vec::new(),
        }
    }

    /// The position of group `g` in a set.
    #[inline]
    fn group_pos(&self, g: u32) -> u64 {
        pos(self.cls.len() as u32 + g, 0)
    }

    /// What leaf position `(c, s)` becomes on byte `b`: itself in its next state, and the
    /// group entered when that state accepts.
    #[inline]
    fn step_leaf(cls: &Classes, after: &[Option<u32>], c: u32, s: u32, b: u8, out: &mut Vec<u64>) {
        let l = cls.leaf(c);
        let t = l.next(s, b);
        if t != 0 {
            out.push(pos(c, t));
            if l.accepting(t) {
                if let Some(g) = after[c as usize] {
                    out.push(pos(cls.len() as u32 + g, 0));
                }
            }
        }
    }

    /// What group `g` becomes on byte `b` (bytes of one class of its members behave
    /// alike: computed once per class).
    fn step_group(&mut self, g: u32, b: u8, out: &mut Vec<u64>) {
        let bounds = &self.groups.bounds[g as usize];
        let class = bounds.rank(bounds.floor(b)) as usize;
        let (from, to) = match self.group_steps[g as usize][class] {
            Some(r) => r,
            None => {
                let from = self.pool.len() as u32;
                for &m in &self.groups.members[g as usize] {
                    let start = self.cls.leaf(m).start();
                    Self::step_leaf(self.cls, &self.after, m, start, b, &mut self.pool);
                }
                let r = (from, self.pool.len() as u32);
                self.group_steps[g as usize][class] = Some(r);
                r
            }
        };
        out.extend_from_slice(&self.pool[from as usize..to as usize]);
    }

    /// Whether a set of positions accepts.
    fn accepts(&self, set: &[u64]) -> bool {
        let k = self.cls.len();
        set.iter().any(|&p| {
            let c = (p >> 32) as usize;
            if c >= k {
                self.groups.accepts[c - k]
            } else {
                self.cls.ends[c] && self.cls.leaf(c as u32).accepting(p as u32)
            }
        })
    }

    /// The bytes where a class that the members of a set tell apart starts (usually far
    /// fewer than the whole's).
    fn local_bounds(&self, members: &[u64]) -> ByteSet {
        let k = self.cls.len();
        let mut local = ByteSet::EMPTY;
        local.insert(0);
        for &p in members {
            let (c, s) = ((p >> 32) as usize, p as u32);
            if c >= k {
                local.union_with(&self.groups.bounds[c - k]);
            } else if let Leaf::Lit(l) = self.cls.leaf(c as u32) {
                if let Some(&b) = l.get(s as usize - 1) {
                    local.insert(b);
                    if b < 255 {
                        local.insert(b + 1);
                    }
                }
            } else {
                local.union_with(&self.cls.bounds[c]);
            }
        }
        local
    }

    /// Steps every member of a set on each local class (first byte `reps[i]`, whose rank
    /// in `local` is `i`) into `buckets[i]`.
    fn step_set(
        &mut self,
        members: &[u64],
        local: &ByteSet,
        reps: &[u8],
        buckets: &mut [Vec<u64>],
    ) {
        let k = self.cls.len();
        for &p in members {
            let (c, s) = ((p >> 32) as usize, p as u32);
            if c >= k {
                let g = (c - k) as u32;
                let allowed = self.groups.allowed[g as usize];
                for (li, &b) in reps.iter().enumerate() {
                    if allowed.contains(b) {
                        self.step_group(g, b, &mut buckets[li]);
                    }
                }
            } else if let Leaf::Lit(l) = self.cls.leaf(c as u32) {
                if let Some(&b) = l.get(s as usize - 1) {
                    let li = local.rank(b) as usize;
                    Self::step_leaf(self.cls, &self.after, c as u32, s, b, &mut buckets[li]);
                }
            } else {
                let allowed = self.cls.leaf(c as u32).allowed(s);
                for (li, &b) in reps.iter().enumerate() {
                    if allowed.contains(b) {
                        Self::step_leaf(self.cls, &self.after, c as u32, s, b, &mut buckets[li]);
                    }
                }
            }
        }
    }
}

/// The limits of one subset construction.
struct Bounds {
    max_states: usize,
    max_bytes: usize,
    deadline: Option<std::time::Instant>,
}

/// The subset construction over positions: per DFA state, the byte classes its members
/// tell apart, one bucket of successor positions per such class, each bucket a state
/// (found or added), the table row filled by ranges. Bounded by the DFA limits and the
/// deadline.
fn construct(
    mut steps: Steps,
    start_group: Option<u32>,
    root_nullable: bool,
    limits: &Bounds,
) -> Result<Dfa, Stop> {
    let (classes, stride) = steps.cls.byte_classes();
    // The table's real row (the NFA route counts regex-automata's padded row, which is up
    // to twice as big: the composed DFA may have as many states as that allowed).
    let row_bytes = stride * 4;
    let too_big = || {
        Stop::Err(DfaError::TooBig {
            cost: limits.max_states,
        })
    };
    let hash = |set: &[u64]| {
        let mut h = ItemHasher::default();
        set.iter().for_each(|&x| h.write_u64(x));
        h.finish()
    };
    let mut sets: SetPool<u64> = SetPool::new();
    let mut trans: Vec<u32> = vec![0; stride];
    let mut accepting = vec![false];
    let start_set: Vec<u64> = start_group
        .map(|g| steps.group_pos(g))
        .into_iter()
        .collect();
    let start = if start_set.is_empty() && !root_nullable {
        0
    } else {
        sets.push(&start_set, hash(&start_set));
        trans.resize(2 * stride, 0);
        accepting.push(root_nullable || steps.accepts(&start_set));
        1
    };
    let mut buckets: Vec<Vec<u64>> = Vec::new();
    let mut members: Vec<u64> = Vec::new();
    let mut reps: Vec<u8> = Vec::with_capacity(256);
    let mut i = 1;
    while i < accepting.len() {
        members.clear();
        members.extend_from_slice(sets.get(i));
        let local = steps.local_bounds(&members);
        reps.clear();
        reps.extend(local.iter());
        if buckets.len() < reps.len() {
            buckets.resize(reps.len(), Vec::new());
        }
        for b in buckets[..reps.len()].iter_mut() {
            b.clear();
        }
        steps.step_set(&members, &local, &reps, &mut buckets);
        for li in 0..reps.len() {
            let set = &mut buckets[li];
            if set.is_empty() {
                continue;
            }
            set.sort_unstable();
            set.dedup();
            let set = &buckets[li];
            let h = hash(set);
            let found = sets.find(set, h);
            let id = if found != 0 {
                found
            } else {
                let id = accepting.len();
                if id > limits.max_states
                    || id.saturating_mul(row_bytes) > limits.max_bytes
                    || (sets.items() + set.len()).saturating_mul(8) > limits.max_bytes
                    || !sets.has_room(set.len())
                {
                    return Err(too_big());
                }
                if id % DEADLINE_EVERY == 0
                    && limits
                        .deadline
                        .is_some_and(|d| std::time::Instant::now() > d)
                {
                    return Err(Stop::Err(DfaError::Deadline));
                }
                sets.push(set, h);
                trans.resize(trans.len() + stride, 0);
                accepting.push(steps.accepts(set));
                id as u32
            };
            // The local class runs from its first byte to the byte before the next one.
            let lo = reps[li];
            let hi = reps.get(li + 1).map_or(255, |&n| n - 1);
            let row = &mut trans[i * stride..(i + 1) * stride];
            for t in &mut row[classes[lo as usize] as usize..=classes[hi as usize] as usize] {
                *t = id;
            }
        }
        i += 1;
    }
    Ok(Dfa::from_subset(Subset {
        classes,
        stride,
        trans,
        accepting,
        start,
    }))
}

#[cfg(test)]
mod tests {
    fn caches() -> Caches {
        Caches::private()
    }

    use super::*;

    use crate::compile::test_hir as hir;

    /// The composed DFA of `re` (whatever its size).
    fn composed(re: &str) -> Dfa {
        compose_any(&caches(), &hir(re), 100_000, 1 << 26, None)
            .expect("structured")
            .expect("within limits")
    }

    /// States reachable from the start (the dead state excluded).
    fn reachable(d: &Dfa) -> usize {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![d.start()];
        while let Some(s) = stack.pop() {
            if s == 0 || !seen.insert(s) {
                continue;
            }
            for b in 0..=255u8 {
                stack.push(d.next(s, b));
            }
        }
        seen.len()
    }

    /// Checks that `a` and `b` accept the same language: a walk over the pairs of states
    /// reachable on the same bytes finds the same verdicts (whole match, dead) in both.
    /// Both keep only live states, so "dead on the same bytes" plus "accepting on the same
    /// bytes" is language equality. Also checks that every state of `a` can still reach an
    /// accepting one (state 0 is the only dead state).
    fn same_language(re: &str, a: &Dfa, b: &Dfa) {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![(a.start(), b.start(), Vec::<u8>::new())];
        while let Some((x, y, path)) = stack.pop() {
            assert_eq!(x == 0, y == 0, "{re}: dead after {path:?} in one DFA only");
            if x == 0 || !seen.insert((x, y)) {
                continue;
            }
            assert_eq!(
                a.accepting(x),
                b.accepting(y),
                "{re}: whole match after {path:?} in one DFA only"
            );
            for byte in 0..=255u8 {
                let (nx, ny) = (a.next(x, byte), b.next(y, byte));
                assert_eq!(
                    a.allowed(x).contains(byte),
                    nx != 0,
                    "{re}: allowed bytes disagree with the table"
                );
                let mut p = path.clone();
                p.push(byte);
                stack.push((nx, ny, p));
            }
        }
        // Liveness of every state of `a`: some accepting state is reachable.
        for s in 1..a.num_states() as u32 {
            let mut seen = std::collections::HashSet::new();
            let mut stack = vec![s];
            let mut live = false;
            while let Some(t) = stack.pop() {
                if t == 0 || !seen.insert(t) {
                    continue;
                }
                if a.accepting(t) {
                    live = true;
                    break;
                }
                stack.extend((0..=255u8).map(|b| a.next(t, b)));
            }
            assert!(live, "{re}: state {s} of the composed DFA cannot complete");
        }
    }

    /// A random regex over a small alphabet with the structures this module takes apart
    /// (concatenation, alternation, `?`, `*`, `+`) and leaves of every kind (literals,
    /// classes, bounded repetitions, nullable leaves, an empty class).
    fn random_regex(rnd: &mut impl FnMut(u64) -> u64, depth: u32) -> String {
        let leaf = |rnd: &mut dyn FnMut(u64) -> u64| -> String {
            match rnd(9) {
                0 => "a".into(),
                1 => "ab".into(),
                2 => "\"".into(),
                3 => "[a-c]".into(),
                4 => "[ \\t]{0,2}".into(),
                5 => "b{1,3}".into(),
                6 => "[a&&b]".into(),
                7 => "(?:a|bc)".into(),
                _ => "c*".into(),
            }
        };
        if depth == 0 {
            return leaf(rnd);
        }
        match rnd(7) {
            0 | 1 => {
                let n = 2 + rnd(3);
                (0..n).map(|_| random_regex(rnd, depth - 1)).collect()
            }
            2 | 3 => {
                let n = 2 + rnd(3);
                let parts: Vec<String> = (0..n).map(|_| random_regex(rnd, depth - 1)).collect();
                format!("(?:{})", parts.join("|"))
            }
            4 => format!("(?:{})?", random_regex(rnd, depth - 1)),
            5 => format!("(?:{})*", random_regex(rnd, depth - 1)),
            _ => format!("(?:{})+", random_regex(rnd, depth - 1)),
        }
    }

    /// Composed DFAs accept exactly the language of the NFA route's, on 600 random
    /// regexes of nested concatenations, alternations, options and loops.
    #[test]
    fn composed_dfas_equal_the_nfa_route() {
        let mut rnd = crate::compile::test_rng(0x5eed_c0de);
        let mut checked = 0;
        for i in 0..600 {
            let re = random_regex(&mut rnd, 1 + (i % 4) as u32);
            let Some(got) = compose_any(&caches(), &hir(&re), 100_000, 1 << 26, None) else {
                continue;
            };
            let ours = got.unwrap();
            let theirs = Dfa::build_until(&caches(), &hir(&re), 100_000, 1 << 26, None).unwrap();
            same_language(&re, &ours, &theirs);
            checked += 1;
        }
        assert!(checked > 400, "only {checked} regexes were composed");
    }

    /// JSON-shaped lexemes (an object's members in a loop, an array of enum values, keys
    /// that share prefixes, a nullable whole) compose to the same language as the NFA
    /// route's; and the members' values of one type share their states, so the composed
    /// DFA is smaller.
    #[test]
    fn json_lexemes_compose_exactly_and_share_value_states() {
        let s = r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*""#;
        let w = r"[ \t\n\r]{0,3}";
        let member = |k: &str| format!(r#"(?:"{k}"{w}:{w}{s})"#);
        let members = ["id", "name", "names", "n", "url"].map(member).join("|");
        let cases = [
            format!("(?:(?:{members})(?:{w},{w}(?:{members}))*)?"),
            format!(
                r#"\[{w}(?:\]|(?:"red"|"green"|"gr"|"blue")(?:{w},{w}(?:"red"|"green"|"gr"|"blue"))*{w}\])"#
            ),
            format!(r"(?:{w},{w}(?:{members}))"),
            format!(r#"(?:"a"|"ab"|"abc")?(?:{w}x)?"#),
        ];
        for re in &cases {
            let ours = composed(re);
            let theirs = Dfa::build_until(&caches(), &hir(re), 100_000, 1 << 26, None).unwrap();
            same_language(re, &ours, &theirs);
        }
        let ours = composed(&cases[0]);
        let theirs = Dfa::build_until(&caches(), &hir(&cases[0]), 100_000, 1 << 26, None).unwrap();
        assert!(
            reachable(&ours) * 2 < reachable(&theirs),
            "composed {} states, NFA route {}",
            reachable(&ours),
            reachable(&theirs)
        );
    }

    /// A long chain of alike leaves, whose merging would take a round per leaf (quadratic:
    /// 0.9 s for this one), is declined once the merging's budget is spent, and the NFA
    /// route builds it; a chain a tenth as long still composes, to the same language.
    #[test]
    fn long_chains_of_alike_leaves_are_declined() {
        let chain = |n: usize| (0..n).map(|_| "(?:[ab]c?)").collect::<String>();
        let parse = |re: &str| {
            regex_syntax::ParserBuilder::new()
                .utf8(false)
                .nest_limit(100_000)
                .build()
                .parse(re)
                .unwrap()
        };
        let long = parse(&chain(6000));
        assert!(compose_any(&caches(), &long, 1 << 20, 1 << 30, None).is_none());
        let short = chain(600);
        let ours = compose_any(&caches(), &parse(&short), 1 << 20, 1 << 30, None)
            .expect("composed")
            .unwrap();
        let theirs = Dfa::build_until(&caches(), &parse(&short), 1 << 20, 1 << 30, None).unwrap();
        same_language("600 x (?:[ab]c?)", &ours, &theirs);
    }

    /// Small regexes, unstructured ones and long counts of loops take the NFA route; an
    /// empty language composes to the dead start.
    #[test]
    fn small_or_flat_regexes_are_declined_and_empty_languages_are_dead() {
        assert!(compose(&caches(), &hir("(?:a|b)c"), 1000, 1 << 20, None).is_none());
        assert!(compose_any(&caches(), &hir("[a-z]{0,9}"), 1000, 1 << 20, None).is_none());
        let dead = composed("(?:[a&&b]x|y[a&&b])");
        assert_eq!(dead.start(), 0);
        // A long count of a loop (a word count) goes to the NFA route whole; a long count
        // of a loop-free item (a bounded string) is a leaf.
        assert!(compose_any(
            &caches(),
            &hir(r#""(?:[a-z]+ +){0,40}[a-z]+""#),
            1 << 16,
            1 << 26,
            None
        )
        .is_none());
        assert!(compose_any(
            &caches(),
            &hir(r#"(?:"(?:[a-z]|\n){0,40}"|x)y"#),
            1 << 16,
            1 << 26,
            None
        )
        .is_some());
    }
}
