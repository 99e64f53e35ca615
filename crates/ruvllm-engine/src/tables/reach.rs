//! Plain reach: which bytes of plain JSON-string text a lexeme state takes and how far,
//! searched once per table (a string's count states, a class near its bound). The token
//! tables use it to take whole trie subtrees of plain text without walking them, and to
//! derive a table from an earlier one by a bound in bytes or characters.
//!
//! Part of the token tables (the parent module), split out; it uses only the parent.

use super::*;

/// Per byte, which class of bytes it falls in by its moves in every [`plain`] state
/// ([`NO_MOVE`]: not plain in any state). A constant, computed at build time (256 x 18
/// moves), which every table paid at run time before.
pub(super) fn plain_moves() -> &'static [u8; 256] {
    &PLAIN_MOVES
}

/// See [`plain_moves`].
const PLAIN_MOVES: [u8; 256] = byte_move_classes();

/// Numbers the distinct columns of moves (one move per [`plain`] state) in byte order.
const fn byte_move_classes() -> [u8; 256] {
    const N: usize = plain::STATES as usize;
    let mut kinds = [[plain::BAD; N]; 256];
    let mut n_kinds = 0;
    let mut out = [NO_MOVE; 256];
    let mut b = 0;
    while b < 256 {
        let mut moves = [plain::BAD; N];
        let mut any = false;
        let mut p = 0;
        while p < N {
            moves[p] = plain::next(p as u8, b as u8);
            any |= moves[p] != plain::BAD;
            p += 1;
        }
        if any {
            let mut found = n_kinds;
            let mut i = 0;
            while i < n_kinds {
                let mut same = true;
                let mut p = 0;
                while p < N {
                    same &= kinds[i][p] == moves[p];
                    p += 1;
                }
                if same {
                    found = i;
                    break;
                }
                i += 1;
            }
            if found == n_kinds {
                kinds[n_kinds] = moves;
                n_kinds += 1;
            }
            out[b] = found as u8;
        }
        b += 1;
    }
    out
}

/// See [`plain_moves`].
pub(super) const NO_MOVE: u8 = u8::MAX;

/// The fewest ASCII characters a state keeps for [`excluded_plain`] to look at it (fewer:
/// a number, a keyword, whose walks are small).
pub(super) const MIN_KEPT: usize = 10;

/// The candidates for the `X` of [`compute_with`]: sets of plain-text characters, by the
/// bytes that start them (ASCII from the space, `"` and `\\` aside, and UTF-8 lead
/// bytes), whose removal may keep DFA state `s` alive on plain text for long. First the
/// characters that die at once (`^[^/]+$`, `^\S+$`, or `[^:]+` in
/// `^([^:]+:[a-f0-9]+|[a-f0-9]{32})$`). Second, where most ASCII characters lead to one
/// state (`s` itself in a loop such as the words of `(\S+\s+){0,99}`, the next count in
/// `\S{2,40}` or a hostname's label), the characters that lead elsewhere or die, so that
/// plain text without them keeps the lexeme on that main path. A lead byte is in a set
/// when some character it starts (as plain UTF-8) is, such as `0xc2` for U+00A0 (a `\s`)
/// in a word. Each is `None` when empty, and both when `s` keeps under [`MIN_KEPT`] ASCII
/// characters. Cost: 95 transitions and a count, then one transition per (DFA state,
/// continuation cell) pair of each lead cell's characters (one byte per run of bytes with
/// the same DFA class and plain moves), typically a few hundred.
pub(super) fn excluded_plain(dfa: &Dfa, s: u32) -> (Option<ByteSet>, Option<ByteSet>) {
    let ascii: Vec<(u8, u32)> = (0x20..=0x7fu8)
        .filter(|&b| b != b'"' && b != b'\\')
        .map(|b| (b, dfa.next(s, b)))
        .collect();
    let mut targets: Vec<(u32, usize)> = Vec::new();
    for &(_, t) in ascii.iter().filter(|(_, t)| *t != 0) {
        match targets.iter_mut().find(|(u, _)| *u == t) {
            Some((_, n)) => *n += 1,
            None => targets.push((t, 1)),
        }
    }
    let kept: usize = targets.iter().map(|(_, n)| n).sum();
    if kept < MIN_KEPT {
        return (None, None);
    }
    let main = targets
        .iter()
        .max_by_key(|(_, n)| *n)
        .map_or(0, |(t, _)| *t);
    let (mut dead, mut off) = (ByteSet::EMPTY, ByteSet::EMPTY);
    for &(b, t) in &ascii {
        if t == 0 {
            dead.insert(b);
        }
        if t != main {
            off.insert(b);
        }
    }
    // Bytes of one cell (DFA class and plain moves) behave alike: one answer per run.
    let mut last = None;
    for lead in 0xc2..=0xf4u8 {
        let cell = (dfa.class_of(lead), plain_moves()[lead as usize]);
        let (dies, leaves) = match last {
            Some((c, fate)) if c == cell => fate,
            _ => char_fate(dfa, s, lead, main),
        };
        last = Some((cell, (dies, leaves)));
        if dies {
            dead.insert(lead);
        }
        if dies || leaves {
            off.insert(lead);
        }
    }
    let some = |x: ByteSet| (!x.is_empty()).then_some(x);
    (some(dead), some(off))
}

/// Pairs [`char_fate`] looks up by a scan; past them, by a hash set.
pub(super) const MAX_SCANNED_PAIRS: usize = 32;

/// For the plain UTF-8 characters that start with `lead`, read from DFA state `s`:
/// whether one dies on the way, and whether one ends at a state other than `main`.
pub(super) fn char_fate(dfa: &Dfa, s: u32, lead: u8, main: u32) -> (bool, bool) {
    let t = dfa.next(s, lead);
    let q = plain::next(plain::START, lead);
    if t == 0 {
        return (true, false);
    }
    if q == plain::BAD {
        return (false, false);
    }
    let (mut dies, mut leaves) = (false, false);
    let mut seen = vec![(t, q)];
    // The pairs of `seen` once there are many, for lookups (a class of many scripts has
    // hundreds of pairs, and a scan of `seen` per step made this quadratic: 7.6% of
    // `o79409`'s biggest table); most characters have a few pairs, scanned.
    let mut known: FastSet<(u32, u8)> = FastSet::default();
    let mut i = 0;
    while i < seen.len() && !(dies && leaves) {
        let (t, q) = seen[i];
        i += 1;
        let mut last = None;
        for c in 0x80..=0xbfu8 {
            // One byte per run of a cell (see `excluded_plain`).
            let cell = Some((dfa.class_of(c), plain_moves()[c as usize]));
            if cell == last {
                continue;
            }
            last = cell;
            let q2 = plain::next(q, c);
            if q2 == plain::BAD {
                continue;
            }
            match dfa.next(t, c) {
                0 => dies = true,
                t2 if q2 == plain::START => leaves |= t2 != main,
                t2 => {
                    let new = if seen.len() < MAX_SCANNED_PAIRS {
                        !seen.contains(&(t2, q2))
                    } else {
                        if known.is_empty() {
                            known.extend(seen.iter().copied());
                        }
                        known.insert((t2, q2))
                    };
                    if new {
                        seen.push((t2, q2));
                    }
                }
            }
        }
    }
    (dies, leaves)
}

/// How deep a lexeme stays alive on plain text: for a DFA state `s` and a
/// [`plain`] state `p`, the largest `d` such that every plain continuation of at most `d`
/// bytes from `p` keeps the DFA alive from `s`, never at an accepting state that allows
/// no next byte (`usize::MAX` when that holds at every length). Acceptance alone does not
/// stop it: a lexeme that may end after any word (`(\S+\s+){0,99}\S+`) was safe nowhere,
/// and its every table visited the whole trie (4 ms each). Breadth-first over (DFA
/// state, plain state) pairs, one byte per cell of the joint byte partition, each pair
/// expanded once at its least depth (where it decides); memoized per start pair, and the
/// memo kept for the lexeme's next tables. A walk only asks whether a subtree a few bytes
/// deep is safe ([`PlainReach::reaches`]), so most searches stop at that depth; a search
/// stops at [`MAX_REACH_PAIRS`] (or [`REACH_PAIRS_PER_STATE`] per DFA state, if more)
/// too (a count unrolled in the DFA, such as 99 words, gave every layer new pairs), and
/// its lower bound is then the answer. Over plain text
/// without a set of bytes (`x`), the same for the characters left out by
/// [`excluded_plain`].
pub(super) struct PlainReach<'a> {
    pub(super) dfa: &'a Dfa,
    pub(super) max_depth: usize,
    /// One byte per (DFA class, plain group) cell.
    pub(super) reps: Vec<u8>,
    /// The bytes left out of plain text (never read).
    pub(super) x: ByteSet,
    pub(super) memo: ReachMemo,
    /// Per plain state, the cells of `reps` that keep plain text (`(byte, next plain
    /// state)`): a search steps only through those. Made on the first search (a table of a
    /// forced literal makes a `PlainReach` and never searches).
    pub(super) moves: std::cell::OnceCell<Moves>,
}

/// [`PlainReach::moves`]: `cells[at[q]..at[q + 1]]` for plain state `q`.
pub(super) struct Moves {
    pub(super) cells: Vec<(u8, u8)>,
    pub(super) at: [u16; plain::STATES as usize + 1],
}

impl<'a> PlainReach<'a> {
    pub(super) fn new(dfa: &'a Dfa, max_depth: usize) -> Self {
        Self::excluding(dfa, max_depth, ByteSet::EMPTY)
    }

    /// The same over plain text without the bytes of `x` (never read by the search).
    pub(super) fn excluding(dfa: &'a Dfa, max_depth: usize, x: ByteSet) -> Self {
        // One byte per run of equal cells (a cell recurring after another gets a second,
        // redundant representative).
        let mut reps: Vec<u8> = Vec::new();
        let mut last = None;
        for b in 0..=255u8 {
            // Bytes that agree on their moves in every plain state and on the DFA class
            // behave alike everywhere in the search.
            let moves = plain_moves()[b as usize];
            if moves == NO_MOVE || x.contains(b) {
                continue;
            }
            let cell = Some((dfa.class_of(b), moves));
            if cell != last {
                last = cell;
                reps.push(b);
            }
        }
        PlainReach {
            dfa,
            max_depth,
            reps,
            x,
            memo: FastMap::default(),
            moves: std::cell::OnceCell::new(),
        }
    }

    /// The cells that keep plain text from plain state `q`, with the plain state after
    /// each. Cost: on the first call, one plain step per (plain state, cell).
    #[inline]
    pub(super) fn moves(&self, q: u8) -> &[(u8, u8)] {
        let m = self.moves.get_or_init(|| {
            let mut cells = Vec::new();
            let mut at = [0u16; plain::STATES as usize + 1];
            for q in 0..plain::STATES {
                for &b in &self.reps {
                    let q2 = plain::next(q, b);
                    if q2 != plain::BAD {
                        cells.push((b, q2));
                    }
                }
                at[q as usize + 1] = cells.len() as u16;
            }
            Moves { cells, at }
        });
        &m.cells[m.at[q as usize] as usize..m.at[q as usize + 1] as usize]
    }

    /// See the type's doc; a lower bound of it where the search reached
    /// [`MAX_REACH_PAIRS`]. Cost: memoized; else O(pairs reached x cells), at most
    /// [`MAX_REACH_PAIRS`] pairs.
    pub(super) fn safe_depth(&mut self, s: u32, p: u8) -> usize {
        if p == plain::BAD {
            return 0;
        }
        if let Some(r) = self.memo.get(&(s, p)).filter(|r| r.settled) {
            return r.depth;
        }
        let r = self.search(s, p, self.max_depth);
        self.memo.insert((s, p), r);
        r.depth
    }

    /// The safe depth of `(s, p)` up to the longest token, when the search knows it
    /// exactly (`None` when it stopped at [`MAX_REACH_PAIRS`]). States that agree on every
    /// string as long as the longest token have the same; see [`Tables::first_use`].
    /// Cost: [`PlainReach::safe_depth`].
    pub(super) fn safe_key(&mut self, s: u32, p: u8) -> Option<usize> {
        let d = self.safe_depth(s, p);
        match self.memo.get(&(s, p)) {
            Some(r) if r.exact => Some(d.min(self.max_depth)),
            _ => None,
        }
    }

    /// Whether [`PlainReach::safe_depth`] is at least `need`. Cost: memoized; else a
    /// search at most `max(need, 16)` bytes deep (a walk asks about subtrees a few bytes
    /// deep, where a count that plain text never ends, such as words in a `pattern`,
    /// made every search run to the longest token).
    pub(super) fn reaches(&mut self, s: u32, p: u8, need: usize) -> bool {
        if p == plain::BAD {
            return need == 0;
        }
        if let Some(r) = self.memo.get(&(s, p)) {
            if r.settled || r.depth >= need {
                return r.depth >= need;
            }
        }
        let r = self.search(s, p, need.max(16).min(self.max_depth));
        self.memo.insert((s, p), r);
        r.depth >= need
    }

    /// `Some(k)` when, from DFA state `s` and the start of [`plain`] language `lang`,
    /// every plain text that starts at most `k` characters (a character a text splits
    /// counts) keeps the lexeme alive at states that do not accept, and every plain text
    /// that starts one more dies at the byte that starts it: then the plain tokens that
    /// start at most `k` characters are accepted and all other plain tokens refused, none
    /// final or uncertain. That is a string `k` characters from its `maxLength`, whose
    /// bound by bytes (`safe_depth`) is `k` too and leaves every longer token to the walk.
    /// `None` otherwise (a state reached twice means a loop that never dies). Cost: one
    /// breadth-first search by characters over (DFA state, plain state) pairs, one byte per
    /// cell of the joint byte partition, at most `max_depth` characters deep.
    pub(super) fn char_bound(&self, s: u32, lang: usize) -> Option<usize> {
        let dfa = self.dfa;
        let is_cont = |b: u8| (0x80..=0xbf).contains(&b);
        // The layer (characters started) at which each pair was first reached.
        let mut seen: FastMap<(u32, u8), usize> = FastMap::default();
        seen.insert((s, plain::STARTS[lang]), 0);
        let mut layer = vec![(s, plain::STARTS[lang])];
        for k in 0..=self.max_depth {
            // The pairs that start `k` characters: close the layer under continuation
            // bytes (no death, no acceptance within a character).
            let mut i = 0;
            while i < layer.len() {
                let (x, q) = layer[i];
                i += 1;
                let mut last = None;
                for &(b, q2) in self.moves(q).iter().filter(|&&(b, _)| is_cont(b)) {
                    let x2 = dfa.next(x, b);
                    // One look per run of cells that lead to the same pair.
                    if last == Some((x2, q2)) {
                        continue;
                    }
                    last = Some((x2, q2));
                    if x2 == 0 || dfa.accepting(x2) {
                        return None;
                    }
                    match seen.get(&(x2, q2)) {
                        Some(&at) if at == k => {}
                        // Met with fewer characters: a loop, which never dies.
                        Some(_) => return None,
                        None => {
                            seen.insert((x2, q2), k);
                            layer.push((x2, q2));
                        }
                    }
                }
            }
            // Starting character `k + 1`: every start byte dies (the bound), or none does.
            let (mut died, mut next) = (false, Vec::new());
            for &(x, q) in &layer {
                let mut last = None;
                for &(b, q2) in self.moves(q).iter().filter(|&&(b, _)| !is_cont(b)) {
                    let x2 = dfa.next(x, b);
                    if last == Some((x2, q2)) {
                        continue;
                    }
                    last = Some((x2, q2));
                    if x2 == 0 {
                        died = true;
                        continue;
                    }
                    if dfa.accepting(x2) {
                        return None;
                    }
                    match seen.get(&(x2, q2)) {
                        Some(&at) if at == k + 1 => {}
                        Some(_) => return None,
                        None => {
                            seen.insert((x2, q2), k + 1);
                            next.push((x2, q2));
                        }
                    }
                }
            }
            match (died, next.is_empty()) {
                (true, true) => return Some(k),
                (true, false) => return None,
                _ => layer = next,
            }
        }
        None
    }

    /// `Some(k)` when, from DFA state `s`, every plain text (language 0) that starts at
    /// most `k` characters keeps the lexeme alive exactly when it keeps it alive from
    /// state `r`, never at a state that accepts, and every plain text that starts one
    /// more dies at the byte that starts it (when no text dies from `s` alone, `k` is the
    /// longest token). Then a plain token is accepted from `s` when it starts at most `k`
    /// characters and is in `r`'s accept set, and refused otherwise, never final or
    /// uncertain: the plain part of `s`'s table is `r`'s cut by the character count, and
    /// only the subtrees that hold a token that is not plain need a walk.
    ///
    /// That is the next count of a string of a restricted class near its bound
    /// (`[a-zA-Z0-9_-]{162}`, `[\p{L}\p{Z}\p{N}…]{1,200}`, a `pattern` class under a
    /// `maxLength`), whose plain tokens are those of the class that fit in the count
    /// left: each count's walk visited every token of the class (2-4.6 ms on the slow
    /// MaskBench files), where `r` is the table of an earlier count or of the state after
    /// the opening quote. [`PlainReach::char_bound`] is the case where `r` accepts every
    /// plain token. `None` otherwise, or past [`MAX_DERIVE_LAYER`] triples in a layer or
    /// `work` triples in all (a budget shared by the searches of one table).
    /// Cost: one breadth-first search by characters over (state from `s`, state from `r`,
    /// plain state) triples, one byte per cell of the joint byte partition, at most the
    /// longest token's characters deep; it fails at the first byte two unrelated states
    /// disagree on.
    pub(super) fn bound_from(&self, s: u32, r: u32, work: &mut usize) -> Option<usize> {
        debug_assert!(self.x.is_empty(), "a bound over all plain text");
        let dfa = self.dfa;
        // A counted lexeme proves it from its structure (a class of many scripts has too
        // many states inside a character for the search), or not at all: where the
        // structure does not decide, the search over its states (a division per step)
        // ran into its cap, 30 µs each time, on the slow MaskBench files.
        if dfa.has_counts() {
            return room_bound(
                dfa.plain_item_room(s, self.max_depth)?,
                dfa.plain_item_room(r, self.max_depth)?,
            );
        }
        self.bound_search(s, r, work)
    }

    /// [`PlainReach::bound_from`] by its search alone, which expands at most `work` more
    /// triples (and counts them there).
    pub(super) fn bound_search(&self, s: u32, r: u32, work: &mut usize) -> Option<usize> {
        let dfa = self.dfa;
        let is_cont = |b: u8| (0x80..=0xbf).contains(&b);
        let mut layer: Vec<(u32, u32, u8)> = vec![(s, r, plain::STARTS[0])];
        for k in 0..=self.max_depth {
            // The triples that start `k` characters: close the layer under continuation
            // bytes, where both states die together or live on, never accepting.
            let mut i = 0;
            while i < layer.len() {
                if *work == 0 {
                    return None;
                }
                *work -= 1;
                let (a, b, q) = layer[i];
                i += 1;
                for &(c, q2) in self.moves(q).iter().filter(|&&(c, _)| is_cont(c)) {
                    let (a2, b2) = (dfa.next(a, c), dfa.next(b, c));
                    if (a2 == 0) != (b2 == 0) {
                        return None;
                    }
                    if a2 == 0 || layer.contains(&(a2, b2, q2)) {
                        continue;
                    }
                    if dfa.accepting(a2) || layer.len() >= MAX_DERIVE_LAYER {
                        return None;
                    }
                    layer.push((a2, b2, q2));
                }
            }
            // Starting character `k + 1`: both die, both live on, or only `s`'s dies
            // (the bound), which must then be so at every start byte.
            let (mut bound, mut next) = (false, Vec::new());
            for &(a, b, q) in &layer {
                for &(c, q2) in self.moves(q).iter().filter(|&&(c, _)| !is_cont(c)) {
                    let (a2, b2) = (dfa.next(a, c), dfa.next(b, c));
                    match (a2 == 0, b2 == 0) {
                        (true, true) => {}
                        (false, true) => return None,
                        (true, false) => bound = true,
                        (false, false) => {
                            if next.contains(&(a2, b2, q2)) {
                                continue;
                            }
                            if dfa.accepting(a2) || next.len() >= MAX_DERIVE_LAYER {
                                return None;
                            }
                            next.push((a2, b2, q2));
                        }
                    }
                }
            }
            if bound {
                return next.is_empty().then_some(k);
            }
            if next.is_empty() {
                break;
            }
            layer = next;
        }
        Some(self.max_depth)
    }

    /// The safe depth of `(s, p)`, exact when under `limit` or `limit` is the longest
    /// token (then every token is within it), else the lower bound `limit` (also where
    /// counts merged by `limit` closed the search); past [`MAX_REACH_PAIRS`], the depth
    /// of the layers completed (a lower bound).
    pub(super) fn search(&self, s: u32, p: u8, limit: usize) -> Reach {
        let exact = |depth| Reach {
            depth,
            settled: true,
            exact: true,
        };
        let dfa = self.dfa;
        let mut seen = Seen::new(dfa);
        seen.insert(s, p);
        let mut layer = vec![(s, p)];
        let mut next = Vec::new();
        let (mut work, mut merged) = (0, false);
        let max_pairs =
            (REACH_PAIRS_PER_STATE * dfa.num_states()).clamp(MAX_REACH_PAIRS, MAX_REACH_PAIRS_ANY);
        for d in 1..=limit {
            // Every byte string of `d - 1` bytes is safe: past the work cap (a count that
            // plain text never ends, unrolled in the DFA, gives every layer new pairs),
            // that lower bound is the answer.
            work += layer.len();
            if work > max_pairs {
                return Reach {
                    depth: d - 1,
                    settled: true,
                    exact: false,
                };
            }
            next.clear();
            for &(x, q) in &layer {
                // Most cells lead one pair to the same next pair (every character of
                // a `[^/]{1,32}` to the next count, with the plain state back at a
                // character's start), and the cells of a run are adjacent: one look per
                // run (the set's checks were a third of a search over a counted lexeme).
                let mut last = None;
                for &(b, q2) in self.moves(q) {
                    let x2 = dfa.next(x, b);
                    if last == Some((x2, q2)) {
                        continue;
                    }
                    last = Some((x2, q2));
                    if x2 == 0 || (dfa.accepting(x2) && dfa.allowed(x2).is_empty()) {
                        return exact(d - 1);
                    }
                    // Counts of a counted lexeme that the remaining depth cannot tell
                    // apart are one state (without this, a long string's search never
                    // met a pair twice and ran to `max_depth`: milliseconds per table).
                    // The depth left is `limit`'s; where that merges counts the depth
                    // left to the longest token would not, a search that closes (no new
                    // pair) answers for `limit` only.
                    let c = dfa.canonical(x2, limit - d);
                    merged |= limit < self.max_depth && c != dfa.canonical(x2, self.max_depth - d);
                    if seen.insert(c, q2) {
                        next.push((c, q2));
                    }
                }
            }
            if next.is_empty() {
                return if merged {
                    Reach {
                        depth: limit,
                        settled: false,
                        exact: false,
                    }
                } else {
                    exact(usize::MAX)
                };
            }
            std::mem::swap(&mut layer, &mut next);
        }
        Reach {
            depth: limit,
            settled: limit >= self.max_depth,
            exact: limit >= self.max_depth,
        }
    }
}

/// The (DFA state, plain state) pairs a plain-reach search has met: a bitmap by state
/// where the DFA has no counts (its states are its ids, below `num_states`) and the
/// bitmap is at most [`SEEN_BITS`] bits, else a hash set (a counted lexeme's ids encode
/// counts; a bigger bitmap would be zeroed for every search, and a walk runs many short
/// ones). A key complement's search meets about 10,000 pairs, each tried once per byte
/// cell: a bit test instead of a hash-set insert.
pub(super) enum Seen {
    Dense(Vec<u64>),
    Hashed(FastSet<(u32, u8)>),
}

/// The largest [`Seen`] bitmap (32 KiB: DFAs of up to 14,563 states).
pub(super) const SEEN_BITS: usize = 1 << 18;

impl Seen {
    /// An empty set for the pairs of `dfa`. Cost: `num_states x 18` bits zeroed (at most
    /// [`SEEN_BITS`]), or none.
    pub(super) fn new(dfa: &Dfa) -> Seen {
        let bits = dfa.num_states() * plain::STATES as usize;
        if dfa.has_counts() || bits > SEEN_BITS {
            Seen::Hashed(FastSet::default())
        } else {
            Seen::Dense(vec![0; bits.div_ceil(64)])
        }
    }

    /// Adds the pair; whether it was new. Cost: a bit test, or a hash insert.
    #[inline]
    pub(super) fn insert(&mut self, x: u32, q: u8) -> bool {
        match self {
            Seen::Dense(bits) => {
                let i = x as usize * plain::STATES as usize + q as usize;
                let (w, m) = (i / 64, 1u64 << (i % 64));
                let new = bits[w] & m == 0;
                bits[w] |= m;
                new
            }
            Seen::Hashed(set) => set.insert((x, q)),
        }
    }
}
