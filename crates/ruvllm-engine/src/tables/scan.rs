//! Whole subtrees by their bytes: when every token below a trie node stays in a lexeme
//! state (loops over a class, one-byte items, characters past ASCII by their groups) or
//! is cut by a bound in clean ASCII text, the walk takes or refuses the subtree at once
//! instead of stepping the DFA through its nodes (`scan_all`, `AsciiBound`).
//!
//! Part of the token tables (the parent module), split out; it uses only the parent.

use super::*;

/// The [`crate::vocab::byte_group`]s below this one are printable ASCII but `"` and `\\`,
/// one byte each.
pub(super) const ASCII_GROUPS: u32 = 94;

/// How many more bytes of clean ASCII text (printable, without `"`, `\\` and a set of
/// left-out bytes) a DFA state takes when that number is the same for every such text:
/// `Some(k)` when every clean text of at most `k` bytes keeps the lexeme alive at states
/// that do not accept, and every one of `k + 1` bytes kills it at its last byte. Then a
/// token that continues a node with clean ASCII bytes only is accepted when it has at
/// most `k` more bytes and refused (never uncertain: the lexeme never accepted on the
/// way) when it has more, so the walk reads the subtree's nodes in a row instead of
/// stepping the DFA through them.
///
/// That is a string of a restricted class near its count's bound: `Github_easy---o46406`'s
/// `[A-Za-z0-9 &'()*,./@£-]{1,32}` a few characters from 32, where every class character
/// leads to the next count and the others die. Plain text alone is not safe there (most
/// of it dies at once) and the tokens of the class that fit are too many to be whole
/// subtrees; each of its last tables walked 28,000-52,000 trie nodes (2-3 ms).
pub(super) struct AsciiBound<'a> {
    pub(super) dfa: &'a Dfa,
    /// The longest token: a bound past it is none.
    pub(super) max_depth: usize,
    /// One byte per DFA class among the clean bytes.
    pub(super) reps: Vec<u8>,
    pub(super) memo: FastMap<u32, Bound>,
    /// DFA steps taken by this table's searches: past [`MAX_ASCII_WORK`], every further
    /// state answers no bound (the walk then decides its subtrees as before), so that a
    /// DFA with many states met along a walk cannot make the searches the slow part.
    pub(super) work: usize,
}

/// See [`AsciiBound::work`] (a few hundred microseconds of steps).
pub(super) const MAX_ASCII_WORK: usize = 1 << 17;

/// An [`AsciiBound`] answer.
#[derive(Clone, Copy)]
pub(super) enum Bound {
    /// The bound.
    Is(usize),
    /// None at any depth.
    None,
    /// Every clean text of this many bytes keeps the lexeme alive at states that do not
    /// accept (a subtree no deeper needs no bound).
    NotWithin(usize),
}

/// The fewest nodes of a subtree that [`scan_all`] is tried on with a loop state
/// ([`loop_stay`]); a smaller one is walked.
pub(super) const MIN_SCAN_NODES: u32 = 64;

/// The fewest byte groups a state must loop on for [`scan_all`] to scan it as a loop
/// ([`loop_stay`]): a scan reads every child, where a walk reads only those whose bytes
/// the state allows.
pub(super) const MIN_SCAN_GROUPS: u32 = 48;

#[cfg(test)]
thread_local! {
    /// Loop states [`loop_stay`] let [`scan_all`] take subtrees of whole on this thread
    /// (for the tests, which check that the loop case ran).
    pub(super) static SCANS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Subtrees [`scan_all`] decided on this thread (for the tests).
    pub(super) static SCAN_ALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Subtrees of one-byte items [`scan_all`] took whole on this thread (for the tests).
    pub(super) static ITEM_WHOLES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Subtrees with characters past ASCII [`scan_all`] took whole by their character
    /// groups on this thread (for the tests).
    pub(super) static CHAR_WHOLES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The [`crate::vocab::byte_group`]s of the ASCII bytes (the bytes past ASCII are known
/// by [`TokenTrie::chars_below`] instead).
pub(super) const ASCII_BYTE_GROUPS: u128 = (1 << 95) - 1;

/// Which character groups (see [`TokenTrie::chars_below`]) let [`scan_all`] take a
/// subtree whole, found per group when a subtree first holds it: for a loop state, the
/// groups every character of which leads from the state back to it; for a counted
/// lexeme, the groups every character of which is one whole item.
///
/// Why: a class of letters of every script (`Github_hard---o79409`'s `name`, letters,
/// numbers and spaces with a count of 200) leaves out symbols and marks of most scripts,
/// so the byte groups of lead bytes never fall inside it and the scan visited every
/// node of the vocabulary's letters past ASCII (44,834 nodes). By the characters'
/// groups, the subtrees of letters are taken whole and only those that hold a symbol or
/// a mark are visited: that file's slowest mask went from 1.37 to 0.74 ms (medians of
/// three runs, builds alternating; see docs/PERFORMANCE.md). Cost: a group's check is a
/// step per byte of its characters (Llama 3.1 has 4,084 characters past ASCII in 63
/// groups), once per table and state; the walk reads one more index per node it asks.
#[derive(Default)]
pub(super) struct CharWholes {
    /// Per loop state: the groups checked, and those found to keep it there.
    pub(super) loops: FastMap<u32, (u64, u64)>,
    /// For a counted lexeme: the groups checked, and those found to be whole items.
    pub(super) items: (u64, u64),
}

impl CharWholes {
    /// Whether every group of `need` passes `ok` (each checked once, the first that
    /// fails ending the check), and no path is [`CHARS_IRREGULAR`]. Cost: `ok` per group
    /// not checked before.
    pub(super) fn all(memo: &mut (u64, u64), need: u64, mut ok: impl FnMut(u32) -> bool) -> bool {
        if need & CHARS_IRREGULAR != 0 {
            return false;
        }
        let (known, good) = memo;
        let mut todo = need & !*known;
        while todo != 0 {
            let g = todo.trailing_zeros();
            todo &= todo - 1;
            *known |= 1 << g;
            if ok(g) {
                *good |= 1 << g;
            } else {
                return false;
            }
        }
        need & !*good == 0
    }

    /// Whether every character below node `n` leads loop state `s` back to `s` (so every
    /// path below is alive, each at `s` or inside a character that returns to it; the
    /// caller checks the ASCII bytes). Cost: a load, and per group not checked before a
    /// step per byte of its characters.
    pub(super) fn loop_whole(&mut self, dfa: &Dfa, trie: &TokenTrie, s: u32, n: u32) -> bool {
        let need = trie.chars_below(n);
        let memo = self.loops.entry(s).or_default();
        Self::all(memo, need, |g| {
            trie.group_chars(g).iter().all(|ch| {
                let mut buf = [0u8; 4];
                let t = ch
                    .encode_utf8(&mut buf)
                    .bytes()
                    .try_fold(s, |t, b| match dfa.next(t, b) {
                        0 => None,
                        t => Some(t),
                    });
                t == Some(s)
            })
        })
    }

    /// Whether every character below node `n` is one whole item of the counted lexeme
    /// `dfa` (see [`Dfa::whole_item`]; the caller checks the ASCII bytes and the room).
    /// Cost: a load, and per group not checked before a step per byte of its characters.
    pub(super) fn items_whole(&mut self, dfa: &Dfa, trie: &TokenTrie, n: u32) -> bool {
        let need = trie.chars_below(n);
        Self::all(&mut self.items, need, |g| {
            trie.group_chars(g).iter().all(|ch| {
                let mut buf = [0u8; 4];
                dfa.whole_item(ch.encode_utf8(&mut buf).as_bytes())
            })
        })
    }
}

/// The [`crate::vocab::byte_group`]s every byte of which keeps DFA state `s` where it
/// is. Cost: 256 steps.
pub(super) fn stay_groups(dfa: &Dfa, s: u32) -> u128 {
    let mut stay = ByteSet::EMPTY;
    for b in 0..=255u8 {
        if dfa.next(s, b) == s {
            stay.insert(b);
        }
    }
    groups_within(&stay)
}

/// The [`crate::vocab::byte_group`]s all of whose bytes are in `set`. Cost: 256 steps.
pub(super) fn groups_within(set: &ByteSet) -> u128 {
    let (mut inside, mut other) = (0u128, 0u128);
    for b in 0..=255u8 {
        let g = crate::vocab::byte_group(b);
        if set.contains(b) {
            inside |= g;
        } else {
            other |= g;
        }
    }
    inside & !other
}

/// Where state `s` is a loop (a string of a restricted class), the byte groups that keep
/// it there, for [`scan_all`] to take the subtrees that hold only those whole; memoized
/// per state in `stays`. `None` when the lexeme counts (its states are (count, item)
/// pairs, which a character moves on, left to the walk and its bounds) or `s` loops on
/// fewer than [`MIN_SCAN_GROUPS`] byte groups (the walk then does better: it reads only
/// the children whose bytes `s` allows). Cost: 256 steps per new `s`.
pub(super) fn loop_stay(dfa: &Dfa, s: u32, stays: &mut FastMap<u32, u128>) -> Option<u128> {
    // A state that allows fewer bytes loops on fewer groups.
    if dfa.has_counts() || dfa.allowed(s).len() < MIN_SCAN_GROUPS {
        return None;
    }
    let stay = *stays.entry(s).or_insert_with(|| stay_groups(dfa, s));
    if stay.count_ones() < MIN_SCAN_GROUPS {
        return None;
    }
    #[cfg(test)]
    SCANS.with(|n| n.set(n.get() + 1));
    Some(stay)
}

/// The fewest nodes of a subtree that [`scan_all`] decides (a smaller one is walked),
/// and that it asks [`PlainReach::reaches`] about.
pub(super) const MIN_SCAN_ALL_NODES: u32 = 16;

/// Decides the subtree of trie node `c` (`c..ce`, whose path led the lexeme to state `s`,
/// `exited` when it accepted on the way or at `c`) by one pass in node order, with the
/// state of each depth in `states`: a node's state is its parent's stepped by its byte,
/// and in node order the parent is the last node read one level up. A node the lexeme
/// dies at is skipped with its subtree, uncertain when the lexeme accepted on its way; a
/// live node's tokens are accepted, and final where its state accepts and allows nothing
/// more. That is the walk's decision for each node; the walk's cheap shortcuts are kept
/// too, each a subtree skipped whole:
///
/// * plain text no deeper than `seed` bytes (its tokens are in the seed of plain `lang`);
/// * with `stay`, the groups that keep `s` in its loop (see [`loop_stay`]): a node back
///   at `s` whose bytes below are all of them (all accepted); or whose ASCII bytes below
///   are, and whose characters past ASCII below are all in groups every character of
///   which leads `s` back to `s` ([`CharWholes`], by [`TokenTrie::chars_below`]);
/// * with `items`, a counted lexeme's byte groups that are whole items alone (see
///   [`Dfa::one_byte_items`]): a node between items whose bytes below are all of them,
///   or whose ASCII bytes are and whose characters past ASCII are in groups of whole
///   items ([`CharWholes`] again), where the count has room for more items than there
///   are bytes below (all accepted; the count changes at every byte, so the loop case
///   above never holds for it);
/// * with `plain`, the plain reach and the reach without the left-out bytes (`groups`
///   their byte groups): plain text below on which the lexeme is safe as deep as the
///   subtree goes (all accepted), the walk's own test for a child;
/// * a state that allows a few bytes, none of which is below (every child refused).
///
/// The walk paid a stack entry and a child visit per node, with branches on several
/// fields of the child: 20-30 ns a node; this pass decides such a subtree at about half
/// that cost (docs/PERFORMANCE.md). The bounds of counts (see [`AsciiBound`]) are not
/// looked for below `c`, so a counted lexeme's subtrees are scanned only where the
/// table's own state has no bound within [`MIXED_BOUND`] bytes.
/// Cost: O(nodes read).
#[allow(clippy::too_many_arguments)]
pub(super) fn scan_all(
    dfa: &Dfa,
    trie: &TokenTrie,
    (c, ce): (u32, u32),
    s: u32,
    exited: bool,
    stay: Option<u128>,
    items: Option<u128>,
    (lang, seed): (usize, usize),
    mut plain: Option<(&mut PlainReach, Option<&mut PlainReach>, u128)>,
    states: &mut Vec<(u32, bool)>,
    chars: &mut CharWholes,
    accept: &mut Accept,
    uncertain: &mut Vec<(u32, u32)>,
    finals: &mut Vec<u32>,
) {
    #[cfg(test)]
    SCAN_ALLS.with(|n| n.set(n.get() + 1));
    let base = trie.depth(c);
    states.clear();
    states.push((s, exited));
    let mut n = c + 1;
    while n < ce {
        let pd = trie.plain_depth(lang, n);
        if pd > 0 && pd <= seed {
            // Plain text no deeper than the seed: its tokens are in the seed already,
            // none is final or refused.
            n = trie.end(n);
            continue;
        }
        let d = trie.depth(n) - base;
        // In node order the parent of `n` is the last node read at depth `d - 1`.
        let (ps, pex) = states[d - 1];
        let ne = trie.end(n);
        let t = dfa.next(ps, trie.byte(n));
        if t == 0 {
            if pex {
                uncertain.push((n, ne));
            }
            n = ne;
            continue;
        }
        if t == s && ne > n + 1 && {
            let (below, g) = (trie.below(n), stay.unwrap_or(0));
            below & !g == 0
                || (below & ASCII_BYTE_GROUPS & !g == 0 && chars.loop_whole(dfa, trie, s, n) && {
                    #[cfg(test)]
                    CHAR_WHOLES.with(|k| k.set(k.get() + 1));
                    true
                })
        } {
            // Every byte below keeps the lexeme in its loop, or every character does and
            // every byte below is part of one: all of the subtree is alive, none of it
            // final (a loop allows a next byte, a character inside the rest of it),
            // nothing refused.
            accept.add(trie.tokens_in(n, ne));
            n = ne;
            continue;
        }
        if ne > n + 1
            && pd > 0
            && dfa
                .items_left(t)
                .is_some_and(|left| left > pd - trie.depth(n))
            && items.is_some_and(|g| {
                let below = trie.below(n);
                below & !g == 0
                    || (below & ASCII_BYTE_GROUPS & !g == 0 && chars.items_whole(dfa, trie, n) && {
                        #[cfg(test)]
                        CHAR_WHOLES.with(|k| k.set(k.get() + 1));
                        true
                    })
            })
        {
            // A count between items, every byte below a whole item alone, and more room
            // than bytes below: each node below is between items again, one count on and
            // short of the top, so alive and able to take one more (none final, nothing
            // refused).
            #[cfg(test)]
            ITEM_WHOLES.with(|k| k.set(k.get() + 1));
            accept.add(trie.tokens_in(n, ne));
            n = ne;
            continue;
        }
        if pd > 0 && ne - n >= MIN_SCAN_ALL_NODES {
            if let Some((reach, without, groups)) = plain.as_mut() {
                // Plain text below, on which the lexeme is safe as deep as it goes (the
                // walk's own test for a child's subtree).
                let (p, need) = (trie.plain_state(lang, n), pd - trie.depth(n));
                let whole = match without {
                    Some(rx) if trie.below(n) & *groups == 0 => rx.reaches(t, p, need),
                    _ => reach.reaches(t, p, need),
                };
                if whole {
                    accept.add(trie.tokens_in(n, ne));
                    n = ne;
                    continue;
                }
            }
        }
        let toks = trie.tokens_at(n);
        if !toks.is_empty() {
            accept.add(toks);
        }
        let acc = dfa.accepting(t);
        let allowed = dfa.allowed(t);
        if acc && allowed.is_empty() {
            finals.extend_from_slice(toks);
        }
        if ne > n + 1
            && allowed.len() <= MAX_ALLOWED_PROBE
            && allowed
                .iter()
                .fold(0, |g, b| g | crate::vocab::byte_group(b))
                & trie.below(n)
                == 0
        {
            // None of the few bytes `t` allows is anywhere below: every child refused.
            if pex || acc {
                uncertain.push((n + 1, ne));
            }
            n = ne;
            continue;
        }
        states.truncate(d);
        states.push((t, pex || acc));
        n += 1;
    }
}

/// The fewest nodes of a subtree for which a walk asks for an [`AsciiBound`] (a smaller
/// one is walked: on `Github_hard---o89194`, whose states have no bound, asking for every
/// subtree cost more than the bounds saved).
pub(super) const MIN_BOUND_NODES: u32 = 32;

/// How far an exact bound of a table's own state is looked for before subtrees that are
/// not all clean ASCII are scanned by it (see [`compute_with`]): a search costs a layer
/// per byte, and on `o79409`'s count of 200 (no bound within a token's length) asking as
/// deep as the longest token added about 3% to its tables.
pub(super) const MIXED_BOUND: usize = 32;

/// The most states one layer of an [`AsciiBound`] search may hold (then: no bound).
pub(super) const MAX_ASCII_LAYER: usize = 16;

impl<'a> AsciiBound<'a> {
    pub(super) fn new(dfa: &'a Dfa, left_out: ByteSet, max_depth: usize) -> Self {
        let clean = (0x20..=0x7fu8).filter(|&b| clean_ascii(b, left_out));
        let reps = class_runs(dfa, clean);
        AsciiBound {
            dfa,
            max_depth,
            reps,
            memo: FastMap::default(),
            work: 0,
        }
    }

    /// See the type's doc; `None` also past the longest token, [`MAX_ASCII_LAYER`] states
    /// in a layer, or [`MAX_ASCII_WORK`] steps in this table. Cost: memoized per state;
    /// else one step per (state, class) of each layer, at most one layer per byte of the
    /// subtree's depth.
    pub(super) fn bound(&mut self, s: u32, need: usize) -> Option<usize> {
        // A subtree below a child is at most `max_depth - 1` bytes deep, so only texts of
        // at most `max_depth` bytes matter: counts that cannot tell them apart are one
        // state (a long string's counts far from its bound, met one per depth).
        let s = self.dfa.canonical(s, self.max_depth);
        match self.memo.get(&s) {
            Some(&Bound::Is(k)) => return Some(k),
            Some(&Bound::None) => return None,
            Some(&Bound::NotWithin(l)) if l >= need => return Some(need),
            _ => {}
        }
        let k = self.search(s, need);
        self.memo.insert(s, k);
        match k {
            Bound::Is(k) => Some(k),
            // Every clean text as long as the subtree keeps the lexeme alive: all of its
            // tokens are accepted (a subtree the plain-text search could not take whole
            // for the characters outside ASCII that it left out).
            Bound::NotWithin(l) if l >= need => Some(need),
            _ => None,
        }
    }

    /// [`AsciiBound::bound`] when it is an exact bound (`Bound::Is`): `None` where every
    /// clean text as long as `need` merely keeps the lexeme alive, which decides only the
    /// clean tokens of a subtree that also holds others. Cost: as `bound`, sharing its memo.
    pub(super) fn bound_is(&mut self, s: u32, need: usize) -> Option<usize> {
        self.bound(s, need)?;
        match self.memo.get(&self.dfa.canonical(s, self.max_depth)) {
            Some(&Bound::Is(k)) => Some(k),
            _ => None,
        }
    }

    pub(super) fn search(&mut self, s: u32, need: usize) -> Bound {
        let dfa = self.dfa;
        if self.reps.is_empty() || dfa.accepting(s) || self.work > MAX_ASCII_WORK {
            return Bound::None;
        }
        let mut seen: FastSet<u32> = FastSet::default();
        seen.insert(s);
        let mut layer = vec![s];
        let limit = need.min(self.max_depth);
        for k in 0..=limit {
            self.work += layer.len() * self.reps.len();
            let (mut died, mut next) = (false, Vec::new());
            for &x in &layer {
                for &b in &self.reps {
                    match dfa.next(x, b) {
                        0 => died = true,
                        y if dfa.accepting(y) => return Bound::None,
                        // Met again: a loop, which some text never leaves.
                        y if !seen.insert(y) => {
                            if !next.contains(&y) {
                                return Bound::None;
                            }
                        }
                        y => next.push(y),
                    }
                }
            }
            match (died, next.is_empty()) {
                (true, true) => return Bound::Is(k),
                (true, false) => return Bound::None,
                _ if next.len() > MAX_ASCII_LAYER => return Bound::None,
                _ => layer = next,
            }
        }
        if limit >= self.max_depth {
            Bound::None
        } else {
            Bound::NotWithin(limit)
        }
    }
}

/// The accept set while a table is built: ids while few, then a bitmap written in place
/// (a dense set inside a JSON string holds most of the vocabulary, whose ids were
/// collected in a growing vector before being scattered into the bitmap).
pub(super) enum Accept {
    /// The ids so far, and the vocabulary size.
    Ids(Vec<u32>, usize),
    /// The bitmap, once over a 32nd of the vocabulary.
    Bits(Vec<u32>),
}

impl Accept {
    pub(super) fn new(vocab_len: usize) -> Accept {
        Accept::Ids(Vec::new(), vocab_len)
    }

    #[inline]
    pub(super) fn add(&mut self, ids: &[u32]) {
        match self {
            Accept::Ids(v, vocab_len) => {
                v.extend_from_slice(ids);
                if v.len() * 32 > *vocab_len {
                    let mut words = vec![0u32; vocab_len.div_ceil(32)];
                    for &t in v.iter() {
                        words[(t >> 5) as usize] |= 1 << (t & 31);
                    }
                    *self = Accept::Bits(words);
                }
            }
            Accept::Bits(words) => {
                for &t in ids {
                    words[(t >> 5) as usize] |= 1 << (t & 31);
                }
            }
        }
    }

    /// The set: dense once over a 32nd of the vocabulary (a token is in the trie once,
    /// so the count is exact).
    pub(super) fn finish(self) -> TokenSet {
        match self {
            Accept::Ids(mut v, _) => {
                v.sort_unstable();
                TokenSet::Sparse(v)
            }
            Accept::Bits(words) => TokenSet::Dense(words.into()),
        }
    }
}
