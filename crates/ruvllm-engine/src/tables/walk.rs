//! The trie walk that computes a lexeme state's table: a pruned depth-first walk of the
//! token trie with a DFA step per node, which takes whole subtrees of plain text without
//! visiting them where the plain-reach search proves them safe, derives bounded counts
//! from an earlier table, and stops early in forced states.
//!
//! Part of the token tables (the parent module); it uses the parent's reach and scan
//! searches, the lexeme automata and the vocabulary trie.

use super::*;

/// The least plain-safe depth of a table's state for which its accept set starts from the
/// plain tokens of that length (below it, few tokens are that short and the walk visits
/// nearly every node anyway). It was 8: a state of `o89194`'s `^....-..-..T` that takes
/// four characters of any kind before a `-` then stepped the DFA and added the tokens of
/// each of the 43,000 nodes within four characters (2.8 ms); seeded, the walk only looks
/// for the `-` below them (2.3 ms), and the 566-file sample's first uses stay the same.
pub(super) const MIN_SEED: usize = 4;

/// The most bytes a node's state may allow for the walk to look, by the node's groups
/// below ([`TokenTrie::below`]), whether any of them is in its subtree before scanning its
/// children (a fold over the bytes and one load; more bytes than this rarely all miss).
pub(super) const MAX_ALLOWED_PROBE: u32 = 8;

/// The most (state, state, plain state) triples one layer of
/// [`PlainReach::bound_from`] may hold (a class of many scripts has a few dozen: the
/// states inside a multi-byte character).
pub(super) const MAX_DERIVE_LAYER: usize = 32;

/// The most triples the [`PlainReach::bound_from`] searches for one table may expand in
/// all (each one step of both states per cell). An unrolled lexeme of many states,
/// equivalent to an earlier state on plain text, filled every layer to a cap of 128
/// triples as deep as the longest token, with no cap in all: 6.4 ms, for a table its walk
/// made in 0.5 ms; at 2,048 triples per
/// search against each of four tables, one table's failed searches took up to 0.4 ms on
/// six slow MaskBench files. A class of ASCII characters needs one triple per character.
pub(super) const MAX_DERIVE_WORK: usize = 1024;

/// Forced bytes from which a table is the plain walk (see [`Tables::get`]'s first use).
pub(super) const FORCED_PLAIN_WALK: usize = 2;

/// Whether the first `n` bytes from state `s` are forced (one allowed byte each).
/// Cost: O(n).
pub(super) fn forced(dfa: &Dfa, mut s: u32, n: usize) -> bool {
    for _ in 0..n {
        let allowed = dfa.allowed(s);
        if allowed.len() != 1 {
            return false;
        }
        let Some(b) = allowed.iter().next() else {
            return false;
        };
        s = dfa.next(s, b);
    }
    true
}

/// One pruned walk of the trie from DFA state `s0`.
///
/// A subtree whose nodes are all plain string text (see [`crate::vocab::plain`]) is taken
/// whole, without visiting it, when the lexeme provably stays alive, and never at a
/// complete lexeme that cannot go on, on every plain text as deep as the subtree (checked
/// once per state by [`PlainReach`]): every token in it is then in `accept`, none is final,
/// and none is uncertain (where the lexeme may end inside a token, the rest of the token
/// matters only for bytes the lexeme refuses, and it refuses no plain byte there). Inside
/// a JSON string, or a `pattern` that may end after any word, this skips most of the
/// vocabulary. When that holds from `s0` itself for every text of `r` bytes (`r` ≥
/// [`MIN_SEED`]; inside an unbounded string, as long as the longest token), the accept set
/// starts as the trie's bitmap of the plain tokens of at most `r` bytes (a copy, instead
/// of setting some 120,000 bits one by one) and the walk only visits the paths to tokens
/// that are not plain or longer than `r`. Of the two plain languages, the one without
/// U+2028 and U+2029 is used when only it holds (a pattern's `.`). Short of that, when a
/// bound by characters holds ([`PlainReach::char_bound`]: a string `k` characters from its
/// `maxLength`), every plain token is decided by how many characters it starts, so the
/// accept set starts as the plain tokens of at most `k` characters and the walk visits only
/// the subtrees that hold a token that is not plain (by bytes, every subtree with a token
/// longer than `k` bytes needed a visit: most of the trie for a small `k`).
/// Where plain text is not safe from `s0` as deep as the longest token because a few
/// characters die or leave the lexeme's main path (`^[^/]+$`, `^\S+$`, the words of
/// `(\S+\s+){0,99}`, a hostname's label), plain text died at the first such character
/// and the walk visited most of the trie (2-5 ms per table on Llama 3.1). Of the two
/// candidate sets of such characters ([`excluded_plain`]), the one without which `s0` is
/// safe the deepest, `X`, is then taken out of plain text too: a subtree
/// that holds none of their bytes ([`TokenTrie::below`], by byte groups) is taken whole
/// when the lexeme is safe, as deep as the subtree, on plain text without them (a second
/// [`PlainReach`] that never reads a byte of `X`), in the seeded part of the walk as
/// elsewhere. Every continuation in such a subtree is plain text without `X`, so the
/// argument above holds for it unchanged; a subtree with a byte of `X` falls back to the
/// plain reach. `left_out` makes the reach without a candidate set (with the memo of
/// earlier tables); the reaches made are returned with the table, `X`'s first.
/// A subtree of clean ASCII tokens below a state with an exact bound `k` of clean bytes
/// ([`AsciiBound`]) is decided by token length; where the table's own state has such a
/// bound (within [`MIXED_BOUND`] bytes), a subtree that also holds other bytes is scanned
/// by the same bound, stepping the DFA only at the bytes that are not clean.
/// Where none of the above gives a seed or a bound by characters, `derive` may give an
/// earlier table and a bound `k` relative to it ([`PlainReach::bound_from`]): the accept
/// set then starts as that table's plain tokens of at most `k` characters, and the walk
/// visits only the subtrees that hold a token that is not plain, as under a bound by
/// characters (on 104 tables of the 61 MaskBench files with masks over 2 ms on an AMD
/// EPYC, medians of ten alternated rebuilds summed to 10.3 ms against 26.5 ms walked).
/// `skip_plain` off gives the plain walk, which the tests compare against; `reach` may
/// hold the searches of earlier tables of the DFA.
///
/// The steps: [`Shortcuts::find`] (seed, bounds, reference table) and
/// [`Shortcuts::initial_accept`], [`without_reaches`] (the plain languages without some
/// characters), then one depth-first [`Walk`] whose per-child cases are its methods.
// The two closures are the ways a table reuses earlier work (reaches, references); a
// struct for them would only rename the arguments.
#[allow(clippy::too_many_arguments)]
pub(super) fn compute_with<'a>(
    dfa: &'a Dfa,
    s0: u32,
    trie: &TokenTrie,
    vocab_len: usize,
    skip_plain: bool,
    reach: &mut PlainReach<'a>,
    left_out: impl FnMut(ByteSet) -> PlainReach<'a>,
    derive: impl FnOnce(&mut PlainReach<'a>) -> Option<(usize, Arc<StateTokens>)>,
) -> (StateTokens, Vec<PlainReach<'a>>) {
    let depth = trie.max_depth();
    let (sc, from) = Shortcuts::find(s0, depth, skip_plain, reach, derive);
    let accept = sc.initial_accept(trie, vocab_len, from.as_ref());
    let tried = if skip_plain && sc.seed < depth && sc.chars.is_none() {
        without_reaches(dfa, s0, sc.lang, left_out)
    } else {
        Vec::new()
    };
    let groups = tried.first().map_or(0, |r| {
        r.x.iter().fold(0, |g, b| g | crate::vocab::byte_group(b))
    });
    let left_out = tried.first().map_or(ByteSet::EMPTY, |r| r.x);
    let mut w = Walk {
        dfa,
        trie,
        s0,
        depth,
        skip_plain,
        sc,
        groups,
        left_out,
        reach,
        tried,
        accept,
        uncertain: Vec::new(),
        finals: Vec::new(),
        stack: vec![(0, s0, false)],
        path: Vec::new(),
        ascii: None,
        mixed_ok: None,
        stays: FastMap::default(),
        counts: dfa.has_counts(),
        levels: Vec::new(),
        items: None,
        char_wholes: CharWholes::default(),
    };
    while let Some((n, s, exited)) = w.stack.pop() {
        w.visit(n, s, exited);
    }
    let Walk {
        accept,
        mut uncertain,
        finals,
        tried,
        ..
    } = w;
    uncertain.sort_unstable();
    // Adjacent ranges as one (the walk gives one range per refused child, a scan one per
    // refused node; the same nodes either way).
    join_adjacent(&mut uncertain);
    let table = StateTokens {
        accept: accept.finish(),
        uncertain,
        finals,
    };
    (table, tried)
}

/// The shortcuts of one walk, found before it starts.
#[derive(Clone, Copy)]
struct Shortcuts {
    /// The plain language of the shortcuts (an index of [`plain::STARTS`]).
    lang: usize,
    /// Every plain token of at most `seed` bytes is accepted (0: no seed).
    seed: usize,
    /// A bound by characters that decides every plain token (a string `k` characters
    /// from its `maxLength`, or relative to a reference table).
    chars: Option<usize>,
}

impl Shortcuts {
    /// The plain language and how deep `s0` is safe on it; short of the longest token,
    /// a bound by characters ([`PlainReach::char_bound`]); short of that, one relative
    /// to an earlier table (`derive`, [`PlainReach::bound_from`]; its plain language is
    /// 0), returned with that table.
    fn find<'a>(
        s0: u32,
        depth: usize,
        skip_plain: bool,
        reach: &mut PlainReach<'a>,
        derive: impl FnOnce(&mut PlainReach<'a>) -> Option<(usize, Arc<StateTokens>)>,
    ) -> (Shortcuts, Option<(usize, Arc<StateTokens>)>) {
        let (lang, seed) = if !skip_plain {
            (0, 0)
        } else {
            let r0 = reach.safe_depth(s0, plain::STARTS[0]);
            let (lang, r) = if r0 >= depth {
                (0, r0)
            } else {
                let r1 = reach.safe_depth(s0, plain::STARTS[1]);
                if r1 > r0 {
                    (1, r1)
                } else {
                    (0, r0)
                }
            };
            let seed = if r >= MIN_SEED.min(depth) {
                r.min(depth)
            } else {
                0
            };
            (lang, seed)
        };
        let chars = if skip_plain && seed < depth {
            reach.char_bound(s0, lang)
        } else {
            None
        };
        let from = if skip_plain && seed < depth && chars.is_none() {
            derive(reach)
        } else {
            None
        };
        let (lang, chars) = match &from {
            Some((k, _)) => (0, Some(*k)),
            None => (lang, chars),
        };
        let seed = if chars.is_some() { 0 } else { seed };
        (Shortcuts { lang, seed, chars }, from)
    }

    /// The accept set the walk starts from: the reference table's tokens among the plain
    /// ones of at most `k` characters, the plain tokens of at most `chars` characters or
    /// `seed` bytes, or none. Cost: a copy of a bitmap of the vocabulary at most.
    fn initial_accept(
        &self,
        trie: &TokenTrie,
        vocab_len: usize,
        from: Option<&(usize, Arc<StateTokens>)>,
    ) -> Accept {
        if let Some((k, r)) = from {
            // The earlier table's tokens among the plain ones of at most `k` characters.
            let mut bits = trie.plain_char_seed(0, *k, vocab_len.div_ceil(32));
            match &r.accept {
                TokenSet::Dense(words) | TokenSet::Minus(words, _) => {
                    for (b, w) in bits.iter_mut().zip(words.iter()) {
                        *b &= *w;
                    }
                    if let TokenSet::Minus(_, drop) = &r.accept {
                        for &(i, d) in drop.iter() {
                            if let Some(b) = bits.get_mut(i as usize) {
                                *b &= !d;
                            }
                        }
                    }
                    let n: u32 = bits.iter().map(|w| w.count_ones()).sum();
                    if n as usize * 32 <= vocab_len {
                        Accept::Ids(ones(&bits), vocab_len)
                    } else {
                        Accept::Bits(bits)
                    }
                }
                TokenSet::Sparse(ids) => {
                    let kept: Vec<u32> = ids
                        .iter()
                        .copied()
                        .filter(|&t| bits[(t >> 5) as usize] >> (t & 31) & 1 == 1)
                        .collect();
                    let mut a = Accept::new(vocab_len);
                    a.add(&kept);
                    a
                }
            }
        } else if let Some(k) = self.chars {
            // Few (a string near its bound): ids, a sparse set unless the walk adds more.
            let ids = trie.plain_char_ids(self.lang, k);
            if ids.len() * 32 <= vocab_len {
                let mut a = Accept::new(vocab_len);
                a.add(ids);
                a
            } else {
                Accept::Bits(trie.plain_char_seed(self.lang, k, vocab_len.div_ceil(32)))
            }
        } else if self.seed > 0 {
            Accept::Bits(trie.plain_seed(self.lang, self.seed, vocab_len.div_ceil(32)))
        } else {
            Accept::new(vocab_len)
        }
    }
}

/// Plain text without some characters, where plain text alone is not safe as deep as the
/// longest token: the reaches of the candidates ([`excluded_plain`]), the one `s0` is
/// safe on the deepest first (the first on a tie).
fn without_reaches<'a>(
    dfa: &Dfa,
    s0: u32,
    lang: usize,
    mut left_out: impl FnMut(ByteSet) -> PlainReach<'a>,
) -> Vec<PlainReach<'a>> {
    let mut tried: Vec<PlainReach<'a>> = Vec::new();
    let (dead, off) = excluded_plain(dfa, s0);
    let mut best = 0;
    for x in [dead, off].into_iter().flatten() {
        if tried.first().is_some_and(|r| r.x == x) {
            continue;
        }
        let mut r = left_out(x);
        let d = r.safe_depth(s0, plain::STARTS[lang]);
        if tried.is_empty() || d > best {
            best = d;
            tried.insert(0, r);
        } else {
            tried.push(r);
        }
    }
    tried
}

/// One depth-first walk of the trie: its stacks, memos and the table it builds.
struct Walk<'a, 'r, 't> {
    dfa: &'a Dfa,
    trie: &'t TokenTrie,
    s0: u32,
    /// The trie's longest token.
    depth: usize,
    skip_plain: bool,
    sc: Shortcuts,
    /// The byte groups of the left-out characters `X` (0: none).
    groups: u128,
    /// The left-out characters `X` (empty: none).
    left_out: ByteSet,
    reach: &'r mut PlainReach<'a>,
    /// The reaches without a candidate set, `X`'s first.
    tried: Vec<PlainReach<'a>>,
    accept: Accept,
    uncertain: Vec<(u32, u32)>,
    finals: Vec<u32>,
    /// (node, state, exited): `exited` = the lexeme accepted at some proper prefix.
    stack: Vec<(u32, u32, bool)>,
    /// The bytes of a path, for [`along_path`].
    path: Vec<u8>,
    /// Bounds of states on clean ASCII text (see [`AsciiBound`]), made when first asked.
    ascii: Option<AsciiBound<'a>>,
    /// Whether subtrees that are not all clean ASCII ask for an exact bound too: only
    /// where `s0` has one within [`MIXED_BOUND`] bytes (a restricted class near its
    /// count's bound). Elsewhere, as in a long count far from its bound, the searches
    /// would find none and cost their budget.
    mixed_ok: Option<bool>,
    /// The groups that keep each loop state a scan started from in its loop (see
    /// [`loop_stay`]).
    stays: FastMap<u32, u128>,
    /// Whether the lexeme counts (a counted lexeme's subtrees are left to the walk where
    /// `s0` has a bound within [`MIXED_BOUND`] bytes: the bound may decide a subtree
    /// below where it does not at its root).
    counts: bool,
    /// The per-depth states of [`scan_all`].
    levels: Vec<(u32, bool)>,
    /// A counted lexeme's byte groups that are whole items alone, for [`scan_all`] to
    /// take subtrees of them whole where the count has room (found at the first scan).
    items: Option<Option<u128>>,
    /// The character groups that take subtrees whole in [`scan_all`] (found as met).
    char_wholes: CharWholes,
}

impl<'a> Walk<'a, '_, '_> {
    /// The bounds on clean ASCII text, made at the first ask.
    #[inline]
    fn ascii(&mut self) -> &mut AsciiBound<'a> {
        let (dfa, left_out, depth) = (self.dfa, self.left_out, self.depth);
        self.ascii
            .get_or_insert_with(|| AsciiBound::new(dfa, left_out, depth))
    }

    /// See [`Walk::mixed_ok`].
    #[inline]
    fn mixed_ok(&mut self) -> bool {
        if let Some(ok) = self.mixed_ok {
            return ok;
        }
        let (s0, need) = (self.s0, MIXED_BOUND.min(self.depth));
        let ok = self.ascii().bound_is(s0, need).is_some();
        self.mixed_ok = Some(ok);
        ok
    }

    /// Whether [`scan_all`] may decide the subtree `c..ce` that no shortcut took (see
    /// [`Walk::counts`]).
    #[inline]
    fn may_scan(&mut self, c: u32, ce: u32) -> bool {
        self.skip_plain && ce - c >= MIN_SCAN_ALL_NODES && (!self.counts || !self.mixed_ok())
    }

    /// Decides the subtree of child `c` (`c..ce`, state `s2`, `ex` as in the stack) by
    /// [`scan_all`], with the loop groups `stay` of `s2` if it is a loop.
    fn scan_below(&mut self, c: u32, ce: u32, s2: u32, ex: bool, stay: Option<u128>) {
        let dfa = self.dfa;
        let items = *self
            .items
            .get_or_insert_with(|| dfa.one_byte_items().map(|set| groups_within(&set)));
        let plain =
            self.skip_plain
                .then_some((&mut *self.reach, self.tried.first_mut(), self.groups));
        scan_all(
            dfa,
            self.trie,
            (c, ce),
            s2,
            ex,
            stay,
            items,
            (self.sc.lang, self.sc.seed),
            plain,
            &mut self.levels,
            &mut self.char_wholes,
            &mut self.accept,
            &mut self.uncertain,
            &mut self.finals,
        )
    }

    /// Visits node `n` at state `s`: each child along a byte `s` allows is taken by
    /// [`Walk::child`]; a child whose byte `s` refuses is refused, or uncertain once the
    /// lexeme has accepted on the way (`exited`). A seed-plain child's byte is always
    /// allowed: `s` is alive on its path, which is plain text within the seed.
    #[inline]
    fn visit(&mut self, n: u32, s: u32, exited: bool) {
        let (dfa, trie) = (self.dfa, self.trie);
        let allowed = dfa.allowed(s);
        let end = trie.end(n);
        // A state that allows a few bytes, none of which is anywhere below `n` (four
        // characters of any kind, then a `-`): every child is refused, without a scan.
        if allowed.len() <= MAX_ALLOWED_PROBE
            && allowed
                .iter()
                .fold(0, |g, b| g | crate::vocab::byte_group(b))
                & trie.below(n)
                == 0
        {
            if exited && n + 1 < end {
                self.uncertain.push((n + 1, end));
            }
            return;
        }
        if let Some((bytes, kids)) = trie.wide(n) {
            // Only the allowed children are visited; the refused ones between them are
            // whole sibling subtrees, contiguous in node order, so one range each run.
            let mut gap = n + 1;
            for b in bytes.intersection(allowed).iter() {
                let c = kids[bytes.rank(b) as usize];
                if exited && gap < c {
                    self.uncertain.push((gap, c));
                }
                let ce = trie.end(c);
                self.child(c, ce, b, s, exited);
                gap = ce;
            }
            if exited && gap < end {
                self.uncertain.push((gap, end));
            }
        } else {
            let mut c = n + 1;
            while c < end {
                let ce = trie.end(c);
                let b = trie.byte(c);
                if allowed.contains(b) {
                    self.child(c, ce, b, s, exited);
                } else {
                    debug_assert!(
                        trie.depth(c) > self.sc.seed
                            || trie.plain_state(self.sc.lang, c) == plain::BAD,
                        "a seed-plain byte refused"
                    );
                    if exited {
                        self.uncertain.push((c, ce));
                    }
                }
                c = ce;
            }
        }
    }

    /// Child `c` (subtree `c..ce`) along byte `b`, which the parent's state `s` allows.
    #[inline]
    fn child(&mut self, c: u32, ce: u32, b: u8, s: u32, exited: bool) {
        let (dfa, trie, lang) = (self.dfa, self.trie, self.sc.lang);
        if self.sc.chars.is_some() && trie.plain_state(lang, c) != plain::BAD {
            // Plain path: its plain tokens are decided by the bound (in the seed when
            // they start at most `k` characters, refused when more, never final or
            // uncertain); only a subtree that holds a token that is not plain needs a
            // visit.
            if trie.plain_depth(lang, c) == 0 {
                let s2 = dfa.next(s, b);
                self.stack.push((c, s2, exited || dfa.accepting(s2)));
            }
        } else if trie.depth(c) <= self.sc.seed && trie.plain_state(lang, c) != plain::BAD {
            self.seed_child(c, ce, b, s, exited);
        } else {
            self.other_child(c, ce, b, s, exited);
        }
    }

    /// A child that is plain and within the seed: allowed, accepted, not final (`s0` is
    /// safe on plain text this long), its tokens in the seed already. Its subtree needs a
    /// visit only where it holds a token that is not plain or is longer than the seed; one
    /// that is plain but deeper is still taken whole when it holds no left-out byte and
    /// the lexeme is safe on plain text without them as deep as the subtree.
    fn seed_child(&mut self, c: u32, ce: u32, b: u8, s: u32, exited: bool) {
        let (dfa, trie, lang) = (self.dfa, self.trie, self.sc.lang);
        let deepest = trie.plain_depth(lang, c);
        if deepest != 0 && deepest <= self.sc.seed {
            return;
        }
        let s2 = dfa.next(s, b);
        let groups = self.groups;
        let whole = deepest > 0
            && trie.below(c) & groups == 0
            && self.tried.first_mut().is_some_and(|rx| {
                rx.reaches(s2, trie.plain_state(lang, c), deepest - trie.depth(c))
            });
        let ex = exited || dfa.accepting(s2);
        if whole {
            self.accept.add(trie.tokens_in(c + 1, ce));
        } else if self.may_scan(c, ce) {
            self.scan_below(c, ce, s2, ex, None);
        } else {
            self.stack.push((c, s2, ex));
        }
    }

    /// Any other child: its tokens are accepted (final where the lexeme ends there), and
    /// its subtree is taken whole when every continuation is plain and safe, decided by
    /// an exact bound on clean ASCII text, scanned, or walked.
    fn other_child(&mut self, c: u32, ce: u32, b: u8, s: u32, exited: bool) {
        let (dfa, trie, lang, depth) = (self.dfa, self.trie, self.sc.lang, self.depth);
        let s2 = dfa.next(s, b);
        self.accept.add(trie.tokens_at(c));
        if dfa.accepting(s2) && dfa.allowed(s2).is_empty() {
            self.finals.extend_from_slice(trie.tokens_at(c));
        }
        if ce <= c + 1 {
            return;
        }
        let deepest = trie.plain_depth(lang, c);
        // Every continuation below `c` is plain (`deepest > 0`), and without `X` when no
        // group of `X` is below.
        let groups = self.groups;
        let whole = self.skip_plain && deepest > 0 && {
            let (p, need) = (trie.plain_state(lang, c), deepest - trie.depth(c));
            match self.tried.first_mut() {
                Some(rx) if trie.below(c) & groups == 0 => rx.reaches(s2, p, need),
                _ => self.reach.reaches(s2, p, need),
            }
        };
        if whole {
            self.accept.add(trie.tokens_in(c + 1, ce));
            return;
        }
        // Not whole: if every token below is clean ASCII (printable, no `"`, `\\` or
        // left-out byte) and `s2` takes exactly `k` more bytes of it (a string `k` from
        // its bound, of a restricted class), the tokens below are decided by their length
        // alone. When some are not (`mixed`), an exact bound `k` still decides every token
        // whose bytes are clean, and only the subtrees under a byte that is not clean are
        // stepped ([`Walk::mixed_below`]).
        let (bound, mixed) = if exited || !self.skip_plain || ce - c < MIN_BOUND_NODES {
            (None, false)
        } else {
            let below = trie.below(c);
            let need = need_below(deepest, depth).saturating_sub(trie.depth(c));
            if below >> ASCII_GROUPS == 0 && below & groups == 0 {
                (self.ascii().bound(s2, need), false)
            } else if self.mixed_ok() {
                (self.ascii().bound_is(s2, need), true)
            } else {
                (None, false)
            }
        };
        match (bound, mixed) {
            (Some(k), true) => self.mixed_below(c, ce, s2, k),
            (Some(k), false) => {
                let last = trie.depth(c) + k;
                if last >= need_below(deepest, depth) {
                    self.accept.add(trie.tokens_in(c + 1, ce));
                } else {
                    for n in c + 1..ce {
                        if trie.depth(n) <= last {
                            self.accept.add(trie.tokens_at(n));
                        }
                    }
                }
            }
            (None, _) => {
                let ex = exited || dfa.accepting(s2);
                let stay = if !ex && ce - c >= MIN_SCAN_NODES {
                    loop_stay(dfa, s2, &mut self.stays)
                } else {
                    None
                };
                if stay.is_some() || self.may_scan(c, ce) {
                    self.scan_below(c, ce, s2, ex, stay);
                } else {
                    self.stack.push((c, s2, ex));
                }
            }
        }
    }

    /// The subtree below `c` (state `s2`) under an exact bound of `k` clean bytes, node
    /// by node in trie order: a clean byte within `k` bytes of `c` keeps the lexeme alive
    /// at a state that does not accept (its tokens accepted, never final or uncertain),
    /// past `k` kills it (its subtree refused: the lexeme never accepted on the way); a
    /// byte that is not clean is stepped from the state its clean path leads to, and its
    /// subtree, if alive, walked as any child's. On `o46406`'s last counts most subtrees
    /// hold a `"`, a `£` or a left-out character somewhere, and were walked node by node
    /// (14,000-16,000 nodes a table, 1.7-2.3 ms).
    fn mixed_below(&mut self, c: u32, ce: u32, s2: u32, k: usize) {
        let (dfa, trie, lang) = (self.dfa, self.trie, self.sc.lang);
        let last = trie.depth(c) + k;
        let mut n = c + 1;
        // The state at the last parent stepped to (siblings that are not clean share it).
        let mut at = (c, s2);
        while n < ce {
            let (nb, ne) = (trie.byte(n), trie.end(n));
            if clean_ascii(nb, self.left_out) {
                if trie.depth(n) > last {
                    n = ne;
                    continue;
                }
                // A clean subtree no deeper than the bound: all of its tokens at once
                // (`plain_depth` is its deepest token when its paths are plain text; 0
                // when not, such as after an escape on the way from the root).
                let below = trie.below(n);
                let deepest = trie.plain_depth(lang, n);
                if below >> ASCII_GROUPS == 0
                    && below & self.groups == 0
                    && deepest > 0
                    && deepest <= last
                {
                    self.accept.add(trie.tokens_in(n, ne));
                    n = ne;
                } else {
                    self.accept.add(trie.tokens_at(n));
                    n += 1;
                }
                continue;
            }
            let p = trie.parent(n);
            if at.0 != p {
                at = (p, along_path(dfa, trie, s2, c, p, &mut self.path));
            }
            let t = dfa.next(at.1, nb);
            if t != 0 {
                self.accept.add(trie.tokens_at(n));
                if dfa.accepting(t) && dfa.allowed(t).is_empty() {
                    self.finals.extend_from_slice(trie.tokens_at(n));
                }
                if ne > n + 1 {
                    self.stack.push((n, t, dfa.accepting(t)));
                }
            }
            n = ne;
        }
    }
}

/// The DFA state after the bytes of the trie path from node `from` (exclusive) down to
/// node `to` (inclusive), starting at `s` (`to == from`: `s`). `path` is scratch space.
/// Cost: one parent link and one DFA step per byte of the path.
pub(super) fn along_path(
    dfa: &Dfa,
    trie: &TokenTrie,
    s: u32,
    from: u32,
    to: u32,
    path: &mut Vec<u8>,
) -> u32 {
    path.clear();
    let mut x = to;
    while x != from {
        path.push(trie.byte(x));
        x = trie.parent(x);
    }
    path.iter().rev().fold(s, |s, &b| dfa.next(s, b))
}

/// How deep a subtree reaches: its deepest token when all of it is plain (`deepest`, see
/// [`TokenTrie::plain_depth`]), else the longest token.
#[inline]
pub(super) fn need_below(deepest: usize, depth: usize) -> usize {
    if deepest > 0 {
        deepest
    } else {
        depth
    }
}
