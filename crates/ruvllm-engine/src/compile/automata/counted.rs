//! Counted lexemes: `P x{min,max} S` without unrolling the count.
//!
//! A JSON string with `maxLength: 32767` is the regular language `" char{0,32767} "`, but its
//! DFA has one state per count per character state (hundreds of thousands of states), which
//! is too big to build. Splitting it into chunks of helper rules kept it exact but put a
//! lexeme boundary (an Earley completion and prediction) every few dozen characters, and
//! made every mask near a boundary walk the parser: 100 ms mean masks on such schemas.
//!
//! A counted lexeme is an automaton whose state is `(count, state of x)`, computed on the
//! fly from three small DFAs: the prefix `P`, the repeated item `x` and the suffix `S`. It
//! is exact under three conditions, checked when it is built (otherwise the caller falls
//! back to other lowerings):
//!
//! * `x` is *prefix-free* and not empty: no string of `x` is a proper prefix of another, so
//!   where one item ends is decided by the bytes (a JSON string character, one character
//!   class, an escape sequence all qualify). The count is then a function of the text.
//! * `P` is prefix-free, so it ends at a known byte and the count starts at 0 there.
//! * No byte can both start an item and start `S` (`"` cannot start a string character),
//!   so after a whole item the next byte picks one.
//!
//! Every state is alive: an item in progress can be finished, `min` items can be reached
//! and `S` completed (`min <= max` is required), which keeps the engine's invariant that a
//! live state is a viable prefix.
//!
//! **Token tables.** The engine keeps one token table per lexeme state, and a count of
//! 32767 would mean 32767 copies of each character state. But a token is at most `depth`
//! bytes long, so it reads at most `depth` items: two counts whose distance to `min` and to
//! `max` both exceed `depth + 1` behave the same on every token. [`Dfa::table_slot`] maps
//! such counts to one slot (counts far below `min`, counts between the bounds), and keeps
//! exact slots for the counts within `depth + 2` of a bound: `2·depth + 7` slots per
//! character state whatever the bounds. Bounds closer than that keep a slot per count, but
//! the counts of a shared class still use one (its least count's): a `maxLength` of 200
//! with Llama 3.1's 128-byte tokens built a table for each of the first 69 counts, 2-3.5
//! ms apiece for a `pattern` class of letters (`Github_hard---o79409`).
//!
//! The tables of the counts near a bound of an item that reads plain text one character
//! at a time (a `pattern` class under a `maxLength`) are not walked one by one: the plain
//! tokens of each are those of an earlier table with at most as many characters as the
//! count has left ([`Counted::plain_item_room`], and the token tables' derivation).
//!
//! **Cost.** A step is a division and a few table loads (the plain DFA's is one load), paid
//! only by counted lexemes.
//!
//! Part of the compiler (the parent module). Owns: the counted automaton of one lexeme.
//! Uses: the lexeme automata and their distances, the plain-text states of the vocabulary
//! trie (`vocab::plain`).

use crate::byteset::ByteSet;

use std::sync::Arc;

use super::dfa::{Dfa, Lexeme};

/// The parts and the state numbering of a counted lexeme (see the module docs).
///
/// Ids: 0 is dead; `1..np` are `P`'s own states; `off_s + t` is `S`'s state `t`;
/// `off_c + c·nx + q` is count `c` with `x` in state `q`, and `q = 0` (x's dead state,
/// never live) means between items. (x's start state cannot stand for "between": a DFA
/// such as that of `a*b` comes back to its start in the middle of an item.)
#[derive(Debug, Clone)]
pub(crate) struct Counted {
    p: Option<Arc<Lexeme>>,
    x: Arc<Lexeme>,
    s: Option<Arc<Lexeme>>,
    min: u32,
    /// The largest count kept: `max`, or `min` when unbounded (more items than `min` are
    /// then all alike).
    top: u32,
    bounded: bool,
    np: u32,
    off_s: u32,
    off_c: u32,
    nx: u32,
    /// `nx`'s reciprocal for [`div_by`] (0 when `nx` is 1).
    nx_inv: u64,
    /// Whether `S` accepts the empty string (or there is no `S`).
    s_nullable: bool,
    /// Allowed bytes between items, by `(may add an item) | (may end) << 1`.
    between: [ByteSet; 4],
    /// See [`Counted::plain_items`] (computed on first use).
    plain_items: std::sync::OnceLock<bool>,
}

/// The most (item state, plain state) pairs [`Counted::plain_items`] looks at (a class
/// of every script has a few hundred).
const MAX_PLAIN_ITEM_PAIRS: usize = 4096;

/// Ids stay below this (the parser keeps states in `u32`, and slot arithmetic must not
/// overflow).
const MAX_ID: u64 = (u32::MAX / 2) as u64;

/// `ceil(2^64 / d)` for [`div_by`]; 0 for `d <= 1` (division by 1 is the identity).
fn reciprocal(d: u32) -> u64 {
    if d <= 1 {
        0
    } else {
        u64::MAX / d as u64 + 1
    }
}

/// `n / d` for the `d` whose [`reciprocal`] is `inv`, by a multiply and a shift: exact for
/// every 32-bit `n` and `d` (Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation", 2019: 64 bits of reciprocal suffice for 32-bit operands). A state's
/// `(count, item state)` is decoded at every step of every trie walk over a counted
/// lexeme (`decode` was 12% of `o79409`'s biggest table; this took about 2% off that
/// table, builds interleaved). Cost: O(1).
#[inline(always)]
fn div_by(n: u32, inv: u64) -> u32 {
    if inv == 0 {
        n
    } else {
        ((inv as u128 * n as u128) >> 64) as u32
    }
}

/// Whether `d` is prefix-free: no accepting state can read further.
fn prefix_free(d: &Dfa) -> bool {
    (1..d.num_states() as u32).all(|s| !d.accepting(s) || d.allowed(s).is_empty())
}

impl Counted {
    /// The counted lexeme `p x{min,max} s` (max `None`: unbounded), or `None` when the
    /// conditions of the module docs do not hold. Cost: O(states of the parts).
    pub(crate) fn new(
        p: Option<Arc<Lexeme>>,
        x: Arc<Lexeme>,
        min: u32,
        max: Option<u32>,
        s: Option<Arc<Lexeme>>,
    ) -> Option<Counted> {
        if max.is_some_and(|m| m < min) || x.start() == 0 || x.accepting(x.start()) {
            return None;
        }
        if !prefix_free(&x) {
            return None;
        }
        if let Some(p) = &p {
            if p.start() == 0 || p.accepting(p.start()) || !prefix_free(p) {
                return None;
            }
        }
        let (s_first, s_nullable) = match &s {
            Some(d) if d.start() == 0 => return None,
            Some(d) => (*d.allowed(d.start()), d.accepting(d.start())),
            None => (ByteSet::EMPTY, true),
        };
        let x_first = *x.allowed(x.start());
        if !x_first.intersection(&s_first).is_empty() {
            return None;
        }
        let np = p.as_ref().map_or(1, |d| d.num_states() as u32);
        let ns = s.as_ref().map_or(1, |d| d.num_states() as u32);
        let nx = x.num_states() as u32;
        let off_s = np - 1;
        let off_c = off_s + ns;
        let top = max.unwrap_or(min);
        if off_c as u64 + (top as u64 + 1) * nx as u64 >= MAX_ID {
            return None;
        }
        let mut between = [ByteSet::EMPTY; 4];
        for (i, b) in between.iter_mut().enumerate() {
            if i & 1 != 0 {
                b.union_with(&x_first);
            }
            if i & 2 != 0 {
                b.union_with(&s_first);
            }
        }
        Some(Counted {
            p,
            x,
            s,
            min,
            top,
            bounded: max.is_some(),
            np,
            off_s,
            off_c,
            nx,
            nx_inv: reciprocal(nx),
            s_nullable,
            between,
            plain_items: std::sync::OnceLock::new(),
        })
    }

    /// The start state.
    pub(crate) fn start(&self) -> u32 {
        match &self.p {
            Some(p) => p.start(),
            None => self.off_c,
        }
    }

    /// Which part `id` is in: `P`'s state, `S`'s state, or `(count, x state)`.
    #[inline]
    fn decode(&self, id: u32) -> Part {
        if id < self.np {
            Part::P(id)
        } else if id < self.off_c {
            Part::S(id - self.off_s)
        } else {
            let r = id - self.off_c;
            let c = div_by(r, self.nx_inv);
            Part::C(c, r - c * self.nx)
        }
    }

    #[inline]
    fn item_state(&self, c: u32, q: u32) -> u32 {
        if self.x.accepting(q) {
            // A whole item: the count moves on (capped at `min` when unbounded).
            let c2 = if self.bounded {
                c + 1
            } else {
                (c + 1).min(self.min)
            };
            self.off_c + c2 * self.nx
        } else {
            self.off_c + c * self.nx + q
        }
    }

    #[inline]
    fn may_add(&self, c: u32) -> bool {
        !self.bounded || c < self.top
    }

    /// The state after reading `b` in state `id` (0 = dead).
    pub(crate) fn next(&self, id: u32, b: u8) -> u32 {
        match self.decode(id) {
            Part::P(p) => {
                let Some(d) = &self.p else { return 0 };
                let p2 = d.next(p, b);
                if p2 == 0 {
                    0
                } else if d.accepting(p2) {
                    self.off_c
                } else {
                    p2
                }
            }
            Part::S(t) => match &self.s {
                Some(d) => match d.next(t, b) {
                    0 => 0,
                    t2 => self.off_s + t2,
                },
                None => 0,
            },
            Part::C(c, q) => {
                if q != 0 {
                    return match self.x.next(q, b) {
                        0 => 0,
                        q2 => self.item_state(c, q2),
                    };
                }
                if self.may_add(c) {
                    let q2 = self.x.next(self.x.start(), b);
                    if q2 != 0 {
                        return self.item_state(c, q2);
                    }
                }
                if c >= self.min {
                    if let Some(d) = &self.s {
                        let t2 = d.next(d.start(), b);
                        if t2 != 0 {
                            return self.off_s + t2;
                        }
                    }
                }
                0
            }
        }
    }

    /// Whether the bytes read so far form a whole lexeme.
    pub(crate) fn accepting(&self, id: u32) -> bool {
        match self.decode(id) {
            Part::P(_) => false,
            Part::S(t) => self.s.as_ref().is_some_and(|d| d.accepting(t)),
            Part::C(c, q) => q == 0 && c >= self.min && self.s_nullable,
        }
    }

    /// The bytes that keep `id` alive.
    pub(crate) fn allowed(&self, id: u32) -> &ByteSet {
        match self.decode(id) {
            Part::P(p) => self.p.as_ref().map_or(&ByteSet::EMPTY, |d| d.allowed(p)),
            Part::S(t) => self.s.as_ref().map_or(&ByteSet::EMPTY, |d| d.allowed(t)),
            Part::C(c, 0) => {
                &self.between[self.may_add(c) as usize | ((c >= self.min) as usize) << 1]
            }
            Part::C(_, q) => self.x.allowed(q),
        }
    }

    /// A byte partition refining the three parts' classes.
    pub(crate) fn classes(&self) -> [u8; 256] {
        let mut out = [0u8; 256];
        let mut cells: Vec<(u8, u8, u8)> = Vec::new();
        for b in 0..=255u8 {
            let cell = (
                self.p.as_ref().map_or(0, |d| d.class_of(b)),
                self.x.class_of(b),
                self.s.as_ref().map_or(0, |d| d.class_of(b)),
            );
            let i = match cells.iter().position(|&c| c == cell) {
                Some(i) => i,
                None => {
                    cells.push(cell);
                    cells.len() - 1
                }
            };
            out[b as usize] = i as u8;
        }
        out
    }

    /// Whether plain JSON string text ([`crate::vocab::plain`]) is read one character per
    /// item: `x` reads a plain character to an accepting state at its last byte or dies
    /// on it, never accepts inside one, and `S` starts with no byte that starts plain text
    /// (a closing quote). Then from between items, a plain text that starts `j`
    /// characters has started `j` items and never accepted (when `S` is not nullable).
    /// Cost: on first use, 256 steps and hash lookups per (item state, plain state) pair
    /// inside a character, at most [`MAX_PLAIN_ITEM_PAIRS`] pairs; then a load.
    fn plain_items(&self) -> bool {
        use crate::vocab::plain;
        *self.plain_items.get_or_init(|| {
            if let Some(d) = &self.s {
                let first = d.allowed(d.start());
                if first
                    .iter()
                    .any(|b| plain::next(plain::START, b) != plain::BAD)
                {
                    return false;
                }
            }
            // Pairs met (a set: a linear search over thousands of them, per byte, would
            // be billions of steps) and the ones still to expand.
            let mut seen: crate::util::FastSet<(u32, u8)> = Default::default();
            seen.insert((self.x.start(), plain::START));
            let mut todo = vec![(self.x.start(), plain::START)];
            while let Some((q, p)) = todo.pop() {
                for b in 0..=255u8 {
                    let p2 = plain::next(p, b);
                    let q2 = if p2 == plain::BAD {
                        0
                    } else {
                        self.x.next(q, b)
                    };
                    if q2 == 0 {
                        continue;
                    }
                    if (p2 == plain::START) != self.x.accepting(q2) {
                        return false;
                    }
                    if p2 != plain::START && !seen.contains(&(q2, p2)) {
                        if seen.len() >= MAX_PLAIN_ITEM_PAIRS {
                            return false;
                        }
                        seen.insert((q2, p2));
                        todo.push((q2, p2));
                    }
                }
            }
            true
        })
    }

    /// For a state `s` between items, where plain text is read one character per item
    /// ([`Counted::plain_items`]) and `S` is not nullable: the item lexeme `x` and the
    /// items left to `s` (`max_depth` when unbounded or more). Then a plain text is alive
    /// from `s` exactly when each character it starts is an item of `x` and it starts at
    /// most that many, and never accepts: two such states with the same `x` agree on
    /// every plain text that starts no more characters than either has left, whatever
    /// their lexemes (the `maxLength`s of one `pattern` class), and the one with fewer
    /// left dies at the byte that starts one more (see `PlainReach::bound_from` in the
    /// token tables). `None` otherwise. Cost: O(1) after the first
    /// [`Counted::plain_items`].
    pub(crate) fn plain_item_room(
        &self,
        s: u32,
        max_depth: usize,
    ) -> Option<(&Arc<Lexeme>, usize)> {
        let Part::C(c, 0) = self.decode(s) else {
            return None;
        };
        if self.s_nullable || !self.plain_items() {
            return None;
        }
        let room = if self.bounded {
            ((self.top - c) as usize).min(max_depth)
        } else {
            max_depth
        };
        Some((&self.x, room))
    }

    /// For a state between items (`(count, 0)`): how many more items it may take before
    /// its count is full (`usize::MAX` when unbounded: counts past `min` are alike and
    /// always take one more); `None` for other states. Cost: O(1).
    pub(crate) fn items_left(&self, id: u32) -> Option<usize> {
        match self.decode(id) {
            Part::C(c, 0) if self.bounded => Some((self.top - c) as usize),
            Part::C(_, 0) => Some(usize::MAX),
            _ => None,
        }
    }

    /// The bytes that are a whole item alone: from a state between items with room for
    /// one more, such a byte reads one item and lands between items again, one count on
    /// (an item ends where it first accepts). Cost: 256 steps.
    pub(crate) fn one_byte_items(&self) -> ByteSet {
        let mut out = ByteSet::EMPTY;
        let q0 = self.x.start();
        for b in 0..=255u8 {
            let q = self.x.next(q0, b);
            if q != 0 && self.x.accepting(q) {
                out.insert(b);
            }
        }
        out
    }

    /// Whether `bytes` is exactly one item: the item automaton, from its start, stays
    /// alive and does not accept before the last byte, and accepts at it. From a state
    /// between items with room for one more, such bytes read one item and land between
    /// items again, one count on, every state on the way alive and not accepting (an item
    /// ends where it first accepts). Cost: a step per byte.
    pub(crate) fn whole_item(&self, bytes: &[u8]) -> bool {
        let Some((&last, init)) = bytes.split_last() else {
            return false;
        };
        let mut q = self.x.start();
        for &b in init {
            q = self.x.next(q, b);
            if q == 0 || self.x.accepting(q) {
                return false;
            }
        }
        q = self.x.next(q, last);
        q != 0 && self.x.accepting(q)
    }

    /// States actually stored (the parts' tables), for budgets and statistics.
    pub(crate) fn num_states(&self) -> usize {
        self.off_c as usize + self.nx as usize
    }

    /// Approximate heap size in bytes.
    pub(crate) fn memory(&self) -> usize {
        self.x.memory()
            + self.p.as_ref().map_or(0, |d| d.memory())
            + self.s.as_ref().map_or(0, |d| d.memory())
            + 4 * 32
    }

    /// Counts told apart by token tables for tokens of at most `depth` bytes: `(classes,
    /// class of count c)`. See the module docs.
    fn count_class(&self, depth: usize, c: u32) -> (u64, u64) {
        let l = depth as u64 + 2;
        let (c, min, top) = (c as u64, self.min as u64, self.top as u64);
        if self.bounded {
            if top < 2 * l + 3 {
                // Too few counts for the compact layout: a slot per count, but the counts
                // of a shared class use its least count's (the classes are the same; a
                // `maxLength` of 200 with Llama 3.1's 128-byte tokens has counts 1-69
                // between the bounds).
                return (top + 1, self.shared_rep(l, c).unwrap_or(c));
            }
            let k = if c < min {
                if c + l < min {
                    0
                } else {
                    2 + c + l - min
                }
            } else if c + l < top {
                1
            } else {
                l + 2 + c + l - top
            };
            (2 * l + 3, k)
        } else {
            if min < l + 2 {
                return (min + 1, c);
            }
            let k = if c + l < min { 0 } else { 1 + c + l - min };
            (l + 2, k)
        }
    }

    /// For a bounded count `c` in a class of [`Counted::count_class`] shared by several
    /// counts (`l` is the depth plus 2): the least count of the class, 0 far below `min`
    /// or `min` between the bounds; `None` for a count within `l` of a bound, which is
    /// its own class.
    fn shared_rep(&self, l: u64, c: u64) -> Option<u64> {
        let (min, top) = (self.min as u64, self.top as u64);
        if c + l < min {
            Some(0)
        } else if c >= min && c + l < top {
            Some(min)
        } else {
            None
        }
    }

    /// A state that behaves like `id` on every byte string of at most `r` bytes (same
    /// acceptance and aliveness, one byte further included): `id` itself, or, when its
    /// count is in a shared class of [`Counted::count_class`] for depth `r`, the least
    /// count of that class with the same item state. Searches bounded by a remaining depth
    /// use it to stop telling apart counts they cannot distinguish. Cost: O(1).
    pub(crate) fn canonical(&self, id: u32, r: usize) -> u32 {
        let Part::C(c, q) = self.decode(id) else {
            return id;
        };
        let l = r as u64 + 2;
        let (c64, min) = (c as u64, self.min as u64);
        let rep = if self.bounded {
            // Searches merge counts only where the compact layout holds: merging the
            // short bounds' classes too made their searches answer for a limit only
            // (more of them, and repeated), which cost more than it saved.
            if (self.top as u64) < 2 * l + 3 {
                return id;
            }
            match self.shared_rep(l, c64) {
                Some(rep) => rep as u32,
                None => return id,
            }
        } else {
            // Counts past `min` are already capped at `min`.
            if min < l + 2 || c64 + l >= min {
                return id;
            }
            0
        };
        self.off_c + rep * self.nx + q
    }

    /// Number of token-table slots for tokens of at most `depth` bytes.
    pub(crate) fn table_slots(&self, depth: usize) -> usize {
        let (k, _) = self.count_class(depth, 0);
        (self.off_c as u64 + k * self.nx as u64) as usize
    }

    /// The token-table slot of `id`: states whose tables are provably equal share one.
    pub(crate) fn table_slot(&self, id: u32, depth: usize) -> usize {
        match self.decode(id) {
            Part::P(_) | Part::S(_) => id as usize,
            Part::C(c, q) => {
                let (_, k) = self.count_class(depth, c);
                (self.off_c as u64 + k * self.nx as u64 + q as u64) as usize
            }
        }
    }
}

enum Part {
    P(u32),
    S(u32),
    C(u32, u32),
}

/// Distances to the end of a counted lexeme (see [`super::dist`]), from the parts'
/// distances: nothing is stored per count.
impl Counted {
    /// Bytes of the shortest item, and of the shortest suffix (0 when `S` is nullable or
    /// absent). Cost: two lookups.
    fn shortest_parts(&self) -> (u32, u32) {
        let mx = self.x.dist(self.x.start());
        let ms = match &self.s {
            Some(d) if !self.s_nullable => d.dist(d.start()),
            _ => 0,
        };
        (mx, ms)
    }

    /// Bytes from "between items with `c` whole items read" to the end.
    fn dist_between(&self, c: u32) -> u32 {
        let (mx, ms) = self.shortest_parts();
        let left = self.min.saturating_sub(c);
        super::dist::add(super::dist::mul(left, mx), ms)
    }

    /// The fewest bytes from `id` to a whole lexeme ([`super::dist::INF`] for the dead
    /// state). Cost: O(1) after the parts' first distance tables.
    pub(crate) fn dist(&self, id: u32) -> u32 {
        use super::dist::add;
        if id == 0 {
            return super::dist::INF;
        }
        match self.decode(id) {
            Part::P(p) => match &self.p {
                Some(d) => add(d.dist(p), self.dist_between(0)),
                None => super::dist::INF,
            },
            Part::S(t) => self.s.as_ref().map_or(super::dist::INF, |d| d.dist(t)),
            Part::C(c, 0) => self.dist_between(c),
            Part::C(c, q) => {
                let next = if self.bounded {
                    c + 1
                } else {
                    (c + 1).min(self.min)
                };
                add(self.x.dist(q), self.dist_between(next))
            }
        }
    }

    /// The largest finite [`Counted::dist`] over its states. Cost: O(1) after the parts'.
    pub(crate) fn max_dist(&self) -> u32 {
        use super::dist::add;
        let mut m = self.dist_between(0);
        if let Some(d) = &self.p {
            m = m.max(add(d.max_dist(), self.dist_between(0)));
        }
        m = m.max(add(self.x.max_dist(), self.dist_between(1.min(self.top))));
        if let Some(d) = &self.s {
            m = m.max(d.max_dist());
        }
        m
    }

    /// Every byte [`Counted::complete_into`] can write: its parts'. Cost: as theirs.
    pub(crate) fn completion_bytes(&self) -> ByteSet {
        let mut b = self.x.completion_bytes();
        for part in [&self.p, &self.s].into_iter().flatten() {
            b.union_with(&part.completion_bytes());
        }
        b
    }

    /// Appends a shortest way from `id` to a whole lexeme. Cost: O(bytes appended).
    pub(crate) fn complete_into(&self, id: u32, out: &mut Vec<u8>) {
        if id == 0 {
            return;
        }
        let mut c = match self.decode(id) {
            Part::P(p) => {
                if let Some(d) = &self.p {
                    d.complete_into(p, out);
                }
                0
            }
            Part::S(t) => {
                if let Some(d) = &self.s {
                    d.complete_into(t, out);
                }
                return;
            }
            Part::C(c, 0) => c,
            Part::C(c, q) => {
                self.x.complete_into(q, out);
                if self.bounded {
                    c + 1
                } else {
                    (c + 1).min(self.min)
                }
            }
        };
        while c < self.min {
            self.x.complete_into(self.x.start(), out);
            c += 1;
        }
        if let (Some(d), false) = (&self.s, self.s_nullable) {
            d.complete_into(d.start(), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashSet, VecDeque};

    /// The reciprocal division agrees with `/` on the edges of the range and on random
    /// operands (a wrong reciprocal, one less, fails on exact multiples).
    #[test]
    fn reciprocal_division_is_exact() {
        let mut rnd = crate::compile::test_rng(0x2545_f491_4f6c_dd1d);
        let mut ds: Vec<u32> = vec![
            1,
            2,
            3,
            5,
            7,
            225,
            641,
            65_535,
            65_536,
            u32::MAX - 1,
            u32::MAX,
        ];
        ds.extend((0..200).map(|_| 1 + rnd(u32::MAX as u64) as u32));
        ds.extend((0..200).map(|_| 1 + rnd(5000) as u32));
        for &d in &ds {
            let inv = reciprocal(d);
            let mut ns: Vec<u32> = vec![0, 1, d - 1, d, u32::MAX, u32::MAX - 1];
            ns.extend([d.wrapping_mul(2), d.saturating_mul(3).saturating_sub(1)]);
            ns.extend((0..500).map(|_| rnd(u32::MAX as u64 + 1) as u32));
            for n in ns {
                assert_eq!(div_by(n, inv), n / d, "{n} / {d}");
            }
        }
    }

    fn part(re: &str) -> Arc<Lexeme> {
        Lexeme::new(dfa(re))
    }

    fn dfa(re: &str) -> Dfa {
        Dfa::build(&crate::compile::test_hir(re), 200_000, 1 << 26).unwrap()
    }

    /// Explores every pair of states of `a` and `b` reachable by the same bytes and
    /// asserts that they agree on acceptance and on the bytes that keep them alive: the two
    /// automata then accept the same language and have the same viable prefixes.
    fn assert_same(a: &Dfa, b: &Dfa, what: &str) {
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([(a.start(), b.start(), Vec::<u8>::new())]);
        seen.insert((a.start(), b.start()));
        while let Some((x, y, path)) = queue.pop_front() {
            let at = String::from_utf8_lossy(&path);
            assert_eq!(
                a.accepting(x),
                b.accepting(y),
                "{what}: accepting after {at:?}"
            );
            assert_eq!(a.allowed(x), b.allowed(y), "{what}: allowed after {at:?}");
            for byte in a.allowed(x).iter() {
                let (nx, ny) = (a.next(x, byte), b.next(y, byte));
                assert!(nx != 0 && ny != 0, "{what}: dead after {at:?} {byte}");
                if seen.insert((nx, ny)) {
                    let mut p = path.clone();
                    p.push(byte);
                    queue.push_back((nx, ny, p));
                }
            }
        }
    }

    const CH: &str = r#"(?:[ !#-\[\]-\x{10FFFF}]|\\["/\\bfnrt]|\\u(?:[0-9A-CE-Fa-ce-f][0-9A-Fa-f]{3}|[Dd][0-7][0-9A-Fa-f]{2}|[Dd][89ABab][0-9A-Fa-f]{2}\\u[Dd][C-Fc-f][0-9A-Fa-f]{2}))"#;

    /// A counted lexeme is the very automaton of its regex: checked against the dense DFA
    /// of `P x{min,max} S` for items that are a JSON string character, a class, an item
    /// whose DFA comes back to its start mid-item (`a*b`), with and without prefix and
    /// suffix, bounded and unbounded.
    #[test]
    fn counted_equals_dense() {
        let items = [CH, "[a-c]", "a*b", r"\\[nt]|[a-z]"];
        let prefixes = [None, Some("\""), Some(r#""key"[ \t]{0,2}:[ \t]{0,2}""#)];
        let suffixes = [None, Some("\""), Some("\"(?:,|)")];
        let bounds = [
            (0, Some(0)),
            (0, Some(3)),
            (2, Some(5)),
            (4, Some(4)),
            (0, None),
            (3, None),
        ];
        let mut checked = 0;
        for x in items {
            for p in prefixes {
                for s in suffixes {
                    for (min, max) in bounds {
                        let re = format!(
                            "{}(?:{x}){{{min},{}}}{}",
                            p.unwrap_or(""),
                            max.map_or(String::new(), |m| m.to_string()),
                            s.unwrap_or("")
                        );
                        let c = Dfa::counted(p.map(part), part(x), min, max, s.map(part));
                        let c = c.unwrap_or_else(|| panic!("{re}: not counted"));
                        assert_same(&dfa(&re), &c, &re);
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 4 * 3 * 3 * 6);
    }

    /// The conditions are enforced: an item that is not prefix-free, a nullable item, a
    /// prefix that is not prefix-free, a suffix that can start like an item, and empty
    /// bounds are all refused (the caller then lowers the repetition another way).
    #[test]
    fn counted_refuses_what_it_cannot_count() {
        let c = |p: Option<&str>, x: &str, min, max, s: Option<&str>| {
            Dfa::counted(p.map(part), part(x), min, max, s.map(part)).is_some()
        };
        assert!(c(None, "ab|c", 0, Some(9), None), "baseline");
        assert!(!c(None, "a|ab", 0, Some(9), None), "not prefix-free");
        assert!(!c(None, "a?", 0, Some(9), None), "nullable item");
        assert!(
            !c(Some("x+"), "a", 0, Some(9), None),
            "prefix not prefix-free"
        );
        assert!(
            !c(None, "[a-c]", 0, Some(9), Some("c")),
            "suffix starts like an item"
        );
        assert!(!c(None, "a", 5, Some(4), None), "max below min");
    }

    /// A canonical state behaves like the original on every string of the remaining
    /// depth, near and far from both bounds, between items and mid-item.
    #[test]
    fn canonical_states_are_exact() {
        for (min, max) in [
            (0, Some(200)),
            (40, Some(200)),
            (100, Some(130)),
            (60, None),
            (3, Some(9)),
        ] {
            let d = Dfa::counted(Some(part("\"")), part(CH), min, max, Some(part("\""))).unwrap();
            let Some(c) = d.counted_part() else {
                unreachable!()
            };
            let top = max.unwrap_or(min);
            let mut moved = 0;
            for r in [0usize, 1, 2, 5, 12, 40] {
                for count in 0..=top {
                    for q in [0, c.x.next(c.x.start(), b'\\')] {
                        if q != 0 && max == Some(count) {
                            continue;
                        }
                        let id = c.off_c + count * c.nx + q;
                        let canon = d.canonical(id, r);
                        moved += (canon != id) as usize;
                        assert!(
                            crate::compile::equiv::equivalent(&d, canon, &d, id, r),
                            "{min}..{max:?}: count {count} (x state {q}) at depth {r}"
                        );
                    }
                }
            }
            assert!(
                moved > 0 || top < 10,
                "{min}..{max:?}: nothing canonicalized"
            );
        }
    }

    /// Counts that share a token-table slot are equivalent for every byte string the
    /// tables look at (depth + 1 bytes), near and far from both bounds.
    #[test]
    fn shared_table_slots_are_exact() {
        let depth = 12;
        for (min, max) in [
            (0, Some(200)),
            (40, Some(200)),
            (100, Some(130)),
            (60, None),
            // Bounds too close for the compact layout (under `2 * (depth + 2) + 3`), with
            // counts between them that still share.
            (5, Some(28)),
            (0, Some(30)),
        ] {
            let d = Dfa::counted(Some(part("\"")), part(CH), min, max, Some(part("\""))).unwrap();
            let Some(c) = d.counted_part() else {
                unreachable!()
            };
            // The state of each count between items, and one mid-item state per count.
            let mut reps: std::collections::HashMap<usize, u32> = Default::default();
            let top = max.unwrap_or(min);
            for count in 0..=top {
                for q in [0, c.x.next(c.x.start(), b'\\')] {
                    if q != 0 && max == Some(count) {
                        continue; // no item starts at the last count
                    }
                    let id = c.off_c + count * c.nx + q;
                    let slot = d.table_slot(id, depth);
                    assert!(slot < d.table_slots(depth));
                    let rep = *reps.entry(slot).or_insert(id);
                    assert!(
                        crate::compile::equiv::equivalent(&d, rep, &d, id, depth + 1),
                        "{min}..{max:?}: count {count} (x state {q}) shares slot {slot}"
                    );
                }
            }
            // Far-from-the-bounds counts did share: fewer slots than counts.
            assert!(
                reps.len() < (top as usize + 1) * 2 - 8 || top < 20,
                "{min}..{max:?}: {} slots used",
                reps.len()
            );
        }
    }
}
