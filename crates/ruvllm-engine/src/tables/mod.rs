//! Token tables: for each lexeme DFA state, which tokens are decided without the parser.
//!
//! For a parser item inside lexeme `L` in DFA state `s`, a token either
//!
//! * keeps `L` alive through all of its bytes: it is allowed whatever the parser stack is
//!   (**accept** set; this is most of the vocabulary inside a JSON string), or
//! * kills `L` before `L` ever accepted on the way: it is refused by this item, or
//! * passes an accepting state of `L` and then goes on past it: whether it is allowed
//!   depends on what the parser allows after `L` (**uncertain**; stored as ranges of
//!   trie nodes, usually a few hundred tokens such as `",` or ` }`).
//!
//! A mask is then the union of the accept sets of the items in the current Earley set, plus
//! the uncertain tokens that a real parser walk over just those trie ranges accepts. This
//! is exact: every token a full walk would accept is in one of the two parts, and both
//! parts only hold tokens a full walk accepts.
//!
//! Tables are computed lazily, the first time a state is met (one pruned trie walk, a table
//! lookup per node), and kept for the life of the [`crate::Constraint`], shared by every
//! matcher and thread.
//!
//! Owns: `Tables` (one lexeme's lazily filled tables) and the token sets. Uses: the lexeme
//! automata (`compile`), the vocabulary trie (`vocab`), the JSON string encodings,
//! `byteset`, `util`; its children hold the store, the walk, sharing, key complements and
//! the plain-text shortcuts.

use std::sync::{Arc, Mutex, OnceLock};

use crate::util::{FastMap, FastSet};

use crate::byteset::ByteSet;
use crate::compile::{Dfa, Lexeme};
use crate::vocab::{plain, TokenTrie, CHARS_IRREGULAR};

mod reach;
use reach::*;
mod scan;
use scan::*;
mod keys;
mod store;
use keys::*;
mod share;
use share::*;
mod walk;
#[cfg(test)]
use store::reference_table;
use store::{lock, Hot, MAX_CLASSES, MAX_HOT, MAX_TAIL_MEMOS};
pub(crate) use store::{Bounds, Store};
use walk::*;

/// A set of token ids: sorted ids when few, a bitmap when many, or another table's
/// bitmap less a few tokens.
#[derive(Debug, Clone)]
pub(crate) enum TokenSet {
    Sparse(Vec<u32>),
    Dense(Arc<[u32]>),
    /// The bitmap of another table (shared), less the bits of each (word index, bits)
    /// pair, sorted by word: a key complement's table, which is a plain string's less the
    /// tokens that close a key (see [`derive_key_complement`]).
    Minus(Arc<[u32]>, Box<[(u32, u32)]>),
}

impl TokenSet {
    /// Sets the bits of the set's tokens in `mask`. Cost: O(ids), or O(words).
    #[inline]
    pub fn or_into(&self, mask: &mut [u32]) {
        match self {
            TokenSet::Sparse(ids) => {
                for &t in ids {
                    mask[(t >> 5) as usize] |= 1 << (t & 31);
                }
            }
            TokenSet::Dense(words) => or_words(mask, words),
            TokenSet::Minus(words, drop) => {
                // The runs between dropped words whole, each dropped word without its
                // bits.
                let mut from = 0;
                for &(i, bits) in drop.iter() {
                    let i = i as usize;
                    if i >= words.len() || i >= mask.len() {
                        break;
                    }
                    or_words(&mut mask[from..i], &words[from..i]);
                    mask[i] |= words[i] & !bits;
                    from = i + 1;
                }
                if from < words.len() && from < mask.len() {
                    or_words(&mut mask[from..], &words[from..]);
                }
            }
        }
    }

    /// The lowest token of the set, if any. Cost: O(1) sparse, O(words) as a bitmap.
    pub fn first(&self) -> Option<u32> {
        let lowest = |words: &[u32], drop: &[(u32, u32)]| {
            words.iter().enumerate().find_map(|(i, &w)| {
                let gone = drop.iter().find(|d| d.0 as usize == i).map_or(0, |d| d.1);
                let w = w & !gone;
                (w != 0).then(|| (i as u32) * 32 + w.trailing_zeros())
            })
        };
        match self {
            TokenSet::Sparse(ids) => ids.iter().min().copied(),
            TokenSet::Dense(words) => lowest(words, &[]),
            TokenSet::Minus(words, drop) => lowest(words, drop),
        }
    }

    /// Heap bytes of the set (a shared bitmap counted where it was built). Cost: O(1).
    pub fn memory(&self) -> usize {
        match self {
            TokenSet::Sparse(v) => v.len() * 4,
            TokenSet::Dense(v) => v.len() * 4,
            TokenSet::Minus(_, drop) => drop.len() * 8,
        }
    }
}

/// `mask |= words`, word by word. Cost: O(words).
#[inline]
fn or_words(mask: &mut [u32], words: &[u32]) {
    for (m, w) in mask.iter_mut().zip(words) {
        *m |= *w;
    }
}

/// What a lexeme state decides on its own.
#[derive(Debug, Clone)]
pub(crate) struct StateTokens {
    pub accept: TokenSet,
    /// Half-open ranges of trie nodes whose tokens need the parser; sorted, disjoint.
    pub uncertain: Vec<(u32, u32)>,
    /// Tokens of `accept` that end where the lexeme is complete and cannot go on: their
    /// commit completes the lexeme, which a semantic check may refuse (see
    /// [`crate::grammar::ValueCheck`]), so grammars with checks re-verify them.
    pub finals: Vec<u32>,
}

impl StateTokens {
    pub fn memory(&self) -> usize {
        self.accept.memory() + self.uncertain.len() * 8 + self.finals.len() * 4 + 64
    }
}

/// Lazily filled tables, one slot per state of one lexeme (for one vocabulary).
///
/// A state's table depends only on which byte strings no longer than the vocabulary's
/// longest token keep the lexeme alive and which of them complete it. Expensive tables
/// (those allowing a large part of the vocabulary, such as the inside of a JSON string) are
/// registered per vocabulary; a state about to compute its table first checks whether it
/// is equivalent, up to that depth, to a registered state of any lexeme of any grammar (an
/// exact bounded bisimulation over the two DFAs, which fails fast when they differ), and
/// shares its table if so. The string content of every schema then costs one trie walk.
pub(crate) struct Tables {
    slots: Vec<OnceLock<Arc<StateTokens>>>,
    /// The vocabulary's longest token in bytes (which states share a slot depends on it,
    /// see [`Dfa::table_slot`]).
    depth: usize,
    /// The plain-reach searches of earlier tables of this lexeme (see [`PlainReach`]), per
    /// set of bytes left out of plain text (the empty set: all of it): the reach of a DFA
    /// state does not depend on which table asks.
    reach_memo: Mutex<FastMap<ByteSet, ReachMemo>>,
    /// Lexemes against whose registered states a sharing check of this lexeme's states
    /// reached [`MAX_PAIRS`], or was refuted only past [`MAX_CHEAP_REFUTATION`] pairs:
    /// not checked again. Such pairs differ deep down and are met again and again (on
    /// the 114-file MaskBench sample, 160 checks of three big lexemes against their own
    /// registered states, 1.2 ms each); a share missed this way only costs a table walk.
    /// `Weak`, so an address is never reused while it is listed.
    gave_up: Mutex<Vec<std::sync::Weak<Lexeme>>>,
    /// For a literal chain: the lexeme after the literal, its tables, and the literal's
    /// length (see [`Tables::new`]).
    rest: Option<(Arc<Lexeme>, Arc<Tables>, u32)>,
    /// The last [`MAX_RECENT`] tables this lexeme computed or shared, most recent first,
    /// with the state each was made for: the references a table may be derived from (see
    /// [`PlainReach::bound_from`]).
    recent: Mutex<Vec<(u32, Arc<StateTokens>)>>,
}

/// Tables kept in [`Tables::recent`]. The next count of a string near its bound finds the
/// one before it there; the table after the opening quote, which derives every count of
/// a restricted class, is usually one of the last few.
const MAX_RECENT: usize = 4;

/// Plain-reach answers kept per lexeme (about 2 MiB at most; their growth counts toward
/// the table bytes that bound the lexeme cache, see [`Tables::memory`] and `EngineConfig::max_table_bytes`).
const MAX_REACH_MEMO: usize = 1 << 16;

/// Pairs one plain-reach search expands at most (then it answers with a lower bound), or
/// [`REACH_PAIRS_PER_STATE`] per DFA state when that is more.
const MAX_REACH_PAIRS: usize = 1024;

/// Pairs per DFA state one plain-reach search may expand. A key complement's trie (2,300
/// to 2,700 states for a few hundred keys) is safe on string text at every depth, but a
/// search stopped at 1,024 pairs found it safe 2-3 bytes deep only, and the table of the
/// state after its opening quote walked 30,000-50,000 trie nodes (1.8-3.6 ms). A search
/// over the whole trie takes 0.9-1.6 ms, after which the walk visits about 2,200 nodes
/// (docs/PERFORMANCE.md has the alternatives measured).
const REACH_PAIRS_PER_STATE: usize = 4;

/// The most pairs a search may expand whatever the DFA's size (32 times
/// [`MAX_REACH_PAIRS`]; a 20,000-state lexeme would otherwise allow 80,000 pairs, tens of
/// milliseconds inside one mask). A trie of up to 8,192 states is searched whole: the
/// largest key complement among the slow MaskBench files has 7,313 (its table walked
/// 41,000 trie nodes, 3 ms, when the search stopped at 1,024 pairs; at 16,384 pairs, the
/// 30 slowest files took 3-8% longer in first uses than with no cap).
const MAX_REACH_PAIRS_ANY: usize = 32 * MAX_REACH_PAIRS;

/// Sets of left-out bytes whose plain-reach answers a lexeme keeps (a lexeme's states
/// leave out a few sets: one per loop or count).
const MAX_REACH_SETS: usize = 16;

/// Plain-reach answers by (DFA state, plain state).
type ReachMemo = FastMap<(u32, u8), Reach>;

/// A plain-reach answer: the safe depth, or a lower bound of it when the search stopped
/// at the depth that was asked for or at [`MAX_REACH_PAIRS`].
#[derive(Debug, Clone, Copy)]
struct Reach {
    depth: usize,
    /// No deeper search will be tried: the depth is exact, or the search reached
    /// [`MAX_REACH_PAIRS`] (a deeper one would too).
    settled: bool,
    /// The depth is exact, up to the longest token (not a bound from the depth asked or
    /// from [`MAX_REACH_PAIRS`]).
    exact: bool,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tables({} states)", self.slots.len())
    }
}

/// Joins each range of a sorted list with the next where they touch (one ends at the
/// other's start) or overlap, so that one set of nodes has one list of ranges however a
/// walk cut it (a walk's ranges never overlap; the table check compares lists it did not
/// build). Cost: O(ranges).
pub(super) fn join_adjacent(ranges: &mut Vec<(u32, u32)>) {
    ranges.dedup_by(|next, last| {
        if next.0 <= last.1 {
            last.1 = last.1.max(next.1);
            true
        } else {
            false
        }
    });
}

impl Tables {
    /// Tables of `n` slots; for a literal chain (see [`Dfa::prepend_literal`]), `rest` is
    /// the lexeme after the literal, its tables, and the literal's length: the states past
    /// the literal are `rest`'s, moved up by that length, and take `rest`'s tables.
    pub fn new(n: usize, depth: usize, rest: Option<(Arc<Lexeme>, Arc<Tables>, u32)>) -> Tables {
        Tables {
            slots: (0..n).map(|_| OnceLock::new()).collect(),
            depth,
            reach_memo: Mutex::new(FastMap::default()),
            gave_up: Mutex::new(Vec::new()),
            rest,
            recent: Mutex::new(Vec::new()),
        }
    }

    /// Approximate heap bytes of the tables built so far and of the plain-reach answers
    /// kept (about 40 bytes each, as counted when they are added). Cost: O(slots).
    pub fn memory(&self) -> usize {
        self.memory_unique(&mut crate::util::FastSet::default())
    }

    /// [`Tables::memory`], counting only tables whose address is not in `seen` yet (and
    /// adding them): a table shared by several states or lexemes is counted once over
    /// all the calls with one `seen`. Cost: O(slots).
    pub fn memory_unique(&self, seen: &mut crate::util::FastSet<usize>) -> usize {
        let tables: usize = self
            .slots
            .iter()
            .filter_map(|s| s.get())
            .filter(|t| seen.insert(Arc::as_ptr(t) as usize))
            .map(|t| t.memory())
            .sum();
        let reach: usize = self
            .reach_memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|m| m.len() * 40)
            .sum();
        tables + reach
    }

    /// The table of `state` of `lexeme` if it was built already. Cost: a slot load.
    #[inline]
    pub fn known(&self, lexeme: &Arc<Lexeme>, state: u32) -> Option<&StateTokens> {
        if let Some((rest, tables, l)) = &self.rest {
            if state > *l {
                return tables.known(rest, state - l);
            }
        }
        self.slots[lexeme.table_slot(state, self.depth)]
            .get()
            .map(|t| &**t)
    }

    /// The table of `state` of `lexeme`. Cost: a slot load when known; on first use, a few
    /// equivalence checks against registered states, else one pruned trie walk.
    #[inline]
    pub fn get(
        &self,
        store: &Store,
        lexeme: &Arc<Lexeme>,
        state: u32,
        trie: &TokenTrie,
        vocab_len: usize,
    ) -> &StateTokens {
        debug_assert_eq!(trie.max_depth(), self.depth);
        self.slot(store, lexeme, state, trie, vocab_len)
    }

    /// [`Tables::get`], as the shared table itself. Cost: as [`Tables::get`].
    #[inline]
    fn slot(
        &self,
        store: &Store,
        lexeme: &Arc<Lexeme>,
        state: u32,
        trie: &TokenTrie,
        vocab_len: usize,
    ) -> &Arc<StateTokens> {
        if let Some((rest, tables, l)) = &self.rest {
            if state > *l {
                return tables.slot(store, rest, state - l, trie, vocab_len);
            }
        }
        let idx = lexeme.table_slot(state, self.depth);
        self.slots[idx].get_or_init(|| self.first_use(store, lexeme, state, trie, vocab_len))
    }

    fn first_use(
        &self,
        store: &Store,
        lexeme: &Arc<Lexeme>,
        state: u32,
        trie: &TokenTrie,
        vocab_len: usize,
    ) -> Arc<StateTokens> {
        let t0 = std::time::Instant::now();
        let t = self.first_use_inner(store, lexeme, state, trie, vocab_len);
        store.after_first_use(t0.elapsed(), (lexeme, state), &t, trie, vocab_len);
        t
    }

    // Long (155 lines): the ways a first use finds its table (forced walk, key
    // complement, sharing, derivation, walk), tried in order of cost.
    fn first_use_inner(
        &self,
        store: &Store,
        lexeme: &Arc<Lexeme>,
        state: u32,
        trie: &TokenTrie,
        vocab_len: usize,
    ) -> Arc<StateTokens> {
        // Tokens are at most `max_depth` bytes; the table also needs the allowed bytes after
        // the last one (for `finals`), which a check at depth `max_depth` covers.
        let depth = trie.max_depth();
        if forced(lexeme, state, FORCED_PLAIN_WALK) {
            // The next bytes are forced (a key's literal, after its quote): only the tokens
            // that start with them are alive, a few trie nodes, and the plain walk visits
            // just those. The shortcuts below (sharing, plain-text searches) cost more
            // than that walk: a mask after `{"name": "` in `cryproj.52`'s array of 644
            // commands built 644 such tables at 2.6 µs each.
            let mut reach = PlainReach::new(lexeme, depth);
            let (t, _) = compute_with(
                lexeme,
                state,
                trie,
                vocab_len,
                false,
                &mut reach,
                |x| PlainReach::excluding(lexeme, depth, x),
                |_| None,
            );
            store.count_build(t.memory());
            return Arc::new(t);
        }
        if let Some(t) = self.key_complement_table(store, lexeme, state, trie, vocab_len) {
            return t;
        }
        let hot: Vec<Arc<Hot>> = lock(&store.hot).clone();
        // The state's short-string signature, computed once if some registered state
        // agrees with it on the first byte: a different signature refutes a pair at once,
        // where the check below would expand its first layers of pairs to find out.
        let rounds = SIGNATURE_ROUNDS.min(depth);
        let mut sig = None;
        // The plain-reach memo, taken out of the lock while the table is computed (a
        // table of another state computed meanwhile starts with an empty memo: slower,
        // never wrong).
        let memo = {
            let mut all = self.reach_memo.lock().unwrap_or_else(|e| e.into_inner());
            all.remove(&ByteSet::EMPTY).unwrap_or_default()
        };
        let mut known = memo.len();
        let mut reach = PlainReach::new(lexeme, trie.max_depth());
        reach.memo = memo;
        // The state's safe depth on JSON string text, computed once if some registered
        // state has its signature: equivalent states have the same, and a bounded string
        // (`maxLength`) has the signature of every other string state but not its safe
        // depth. The check below took 0.5-1.7 ms to refute such a state against the
        // registered string states, more than its table.
        let mut safe = None;
        // What the checks below may take together: a check that fails takes up to
        // [`MAX_PAIRS`] pairs, each a step per byte run, and a state that agreed with
        // several registered ones on their signatures paid up to 0.9 ms of refutations
        // before its own walk (see [`MAX_SHARE_WORK`]).
        let mut work = MAX_SHARE_WORK;
        let shared = 'share: {
            for h in &hot {
                if lexeme.accepting(state) != h.lexeme.accepting(h.state)
                    || lexeme.allowed(state) != h.lexeme.allowed(h.state)
                {
                    continue;
                }
                let mine = *sig.get_or_insert_with(|| signature(lexeme, state, rounds));
                if let (Some(a), Some(b)) = (mine, h.signature) {
                    if a != b {
                        continue;
                    }
                }
                let mine = *safe.get_or_insert_with(|| reach.safe_key(state, plain::STARTS[0]));
                if let (Some(a), Some(b)) = (mine, h.safe) {
                    if a != b {
                        continue;
                    }
                }
                let mut gave_up = self.gave_up.lock().unwrap_or_else(|e| e.into_inner());
                if gave_up
                    .iter()
                    .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&h.lexeme)))
                {
                    continue;
                }
                drop(gave_up);
                match equivalent_budgeted(lexeme, state, &h.lexeme, h.state, depth, &mut work) {
                    (Some(true), _) => break 'share Some(h.table.clone()),
                    (Some(false), pairs) if pairs <= MAX_CHEAP_REFUTATION => {}
                    // This table's budget ran out (the checks before this one spent it):
                    // no more checks, and no verdict on that lexeme.
                    (None, _) if work == 0 => break 'share None,
                    // Gave up, or refuted only deep down: this lexeme's other states would
                    // pay as much against that lexeme's.
                    _ => {
                        gave_up = self.gave_up.lock().unwrap_or_else(|e| e.into_inner());
                        gave_up.retain(|w| w.strong_count() > 0);
                        if gave_up.len() < MAX_GAVE_UP {
                            gave_up.push(Arc::downgrade(&h.lexeme));
                        }
                    }
                }
            }
            None
        };
        if let Some(t) = shared {
            // About 40 bytes per answer, as below.
            let grown = reach.memo.len().saturating_sub(known);
            store.count_bytes(grown * 40);
            self.keep_reach(std::iter::once(reach));
            self.remember(store, lexeme, state, &t);
            return t;
        }
        let (t, tried) = compute_with(
            lexeme,
            state,
            trie,
            vocab_len,
            true,
            &mut reach,
            |x| {
                let mut r = PlainReach::excluding(lexeme, trie.max_depth(), x);
                let mut all = self.reach_memo.lock().unwrap_or_else(|e| e.into_inner());
                r.memo = all.remove(&x).unwrap_or_default();
                known += r.memo.len();
                r
            },
            |reach| self.reference(store, lexeme, state, reach),
        );
        let t = Arc::new(t);
        self.remember(store, lexeme, state, &t);
        // About 40 bytes per answer, hash table slack included.
        let now = reach.memo.len() + tried.iter().map(|r| r.memo.len()).sum::<usize>();
        store.count_bytes(now.saturating_sub(known) * 40);
        let safe = reach.safe_key(state, plain::STARTS[0]);
        self.keep_reach(std::iter::once(reach).chain(tried));
        store.count_build(t.memory());
        if matches!(t.accept, TokenSet::Dense(_)) {
            let mut list = lock(&store.hot);
            list.insert(
                0,
                Arc::new(Hot {
                    lexeme: lexeme.clone(),
                    state,
                    table: t.clone(),
                    signature: sig.unwrap_or_else(|| signature(lexeme, state, rounds)),
                    safe,
                }),
            );
            list.truncate(MAX_HOT);
        }
        t
    }

    /// The table of `state` of a key complement built from its keys, its start or a trie
    /// state (a key prefix read): derived from the plain string's table at its start or
    /// after its opening quote, which every schema shares (see [`derive_key_complement`]);
    /// `None` for any other lexeme or state, or when that walk gives up. Cost: that of
    /// the derivation, and the string's table on its first use.
    fn key_complement_table(
        &self,
        store: &Store,
        lexeme: &Arc<Lexeme>,
        state: u32,
        trie: &TokenTrie,
        vocab_len: usize,
    ) -> Option<Arc<StateTokens>> {
        let (base, tail) = lexeme.key_base()?;
        let trie0 = crate::compile::keys::trie_start(lexeme);
        // A trie state derives from the string's state after the opening quote, the
        // start (tokens that open the key) from the string's start.
        let g0 = if state == lexeme.start() {
            base.start()
        } else {
            base.next(base.start(), b'"')
        };
        if trie0 == 0 || (state < trie0 && state != lexeme.start()) || g0 == 0 {
            return None;
        }
        let bt = store.tables_for(base);
        let from = bt.slot(store, base, g0, trie, vocab_len).clone();
        // The equivalences of tail and string states found so far, out of the lock
        // while this table is derived.
        let key = (Arc::as_ptr(tail) as usize, Arc::as_ptr(base) as usize);
        let mut memo = lock(&store.tail_memos)
            .remove(&key)
            .map(|e| e.2)
            .unwrap_or_default();
        let derived = derive_key_complement(
            (lexeme, state, trie0),
            (base, g0, &from),
            (tail, &mut memo),
            trie,
            vocab_len,
        );
        {
            let mut all = lock(&store.tail_memos);
            if all.len() >= MAX_TAIL_MEMOS {
                all.clear();
            }
            all.insert(key, (tail.clone(), base.clone(), memo));
        }
        // `Some(None)`: the same table as the string's (no key closes within the longest
        // token), shared as a sharing check would find it.
        let Some(t) = derived? else {
            return Some(from);
        };
        let t = Arc::new(t);
        store.count_build(t.memory());
        Some(t)
    }

    /// A table the table of `state` derives from, and the bound in characters that
    /// cuts its plain tokens (see [`PlainReach::bound_from`]): for a counted lexeme's
    /// state between items, the table registered for its item in [`store::Classes`]; for others,
    /// the most recent table of this lexeme that bounds it, if any. Cost: a lock, then
    /// O(1) (counted) or one [`PlainReach::bound_from`] search per recent table.
    fn reference(
        &self,
        store: &Store,
        lexeme: &Lexeme,
        state: u32,
        reach: &mut PlainReach,
    ) -> Option<(usize, Arc<StateTokens>)> {
        if lexeme.has_counts() {
            let (x, room) = lexeme.plain_item_room(state, self.depth)?;
            let reg = lock(&store.classes);
            let (k, xr, t) = reg.get(&(Arc::as_ptr(x) as usize))?;
            let k = room_bound((x, room), (xr, *k))?;
            return Some((k, t.clone()));
        }
        let recent = self
            .recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut work = MAX_DERIVE_WORK;
        recent.into_iter().find_map(|(r, t)| {
            let k = (r != state).then(|| reach.bound_from(state, r, &mut work))??;
            Some((k, t))
        })
    }

    /// Keeps `t`, the table of `state`, as a reference for later tables: in [`store::Classes`]
    /// for a counted lexeme's state between items with more items left than the one
    /// registered for its item, else first in [`Tables::recent`]. Cost: a lock, and a
    /// shift of [`MAX_RECENT`] entries.
    fn remember(&self, store: &Store, lexeme: &Lexeme, state: u32, t: &Arc<StateTokens>) {
        if lexeme.has_counts() {
            if let Some((x, room)) = lexeme.plain_item_room(state, self.depth) {
                let key = Arc::as_ptr(x) as usize;
                let mut reg = lock(&store.classes);
                if reg.get(&key).is_none_or(|e| e.0 < room) {
                    if reg.len() >= MAX_CLASSES {
                        reg.clear();
                    }
                    reg.insert(key, (room, x.clone(), t.clone()));
                }
            }
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.insert(0, (state, t.clone()));
        recent.truncate(MAX_RECENT);
    }

    /// Puts plain-reach memos back for this lexeme's next tables, within
    /// [`MAX_REACH_MEMO`] answers and [`MAX_REACH_SETS`] sets. Cost: a lock and one sum
    /// per memo.
    fn keep_reach<'a>(&self, memos: impl Iterator<Item = PlainReach<'a>>) {
        let mut all = self.reach_memo.lock().unwrap_or_else(|e| e.into_inner());
        for r in memos {
            let total: usize = all.values().map(|m| m.len()).sum();
            // The plain memo (first) always finds a place: one set is kept for it.
            let room = r.x == ByteSet::EMPTY || all.len() + 1 < MAX_REACH_SETS;
            if total + r.memo.len() <= MAX_REACH_MEMO && room {
                all.insert(r.x, r.memo);
            }
        }
    }

    /// Number of computed slots and their heap bytes (shared tables counted in full).
    pub fn usage(&self) -> (usize, usize) {
        let mut n = 0;
        let mut bytes = 0;
        for s in &self.slots {
            if let Some(t) = s.get() {
                n += 1;
                bytes += t.memory();
            }
        }
        (n, bytes)
    }
}

/// The bound of [`PlainReach::bound_from`] between two states of counted lexemes, given
/// the item lexeme and the items left of each ([`Dfa::plain_item_room`]): the items left
/// to `s` when both read the same item and `r` has at least as many left (plain text then
/// lives from `s` exactly as from `r` until `s`'s count runs out), else `None`.
/// Cost: O(1).
fn room_bound(s: (&Arc<Lexeme>, usize), r: (&Arc<Lexeme>, usize)) -> Option<usize> {
    (Arc::ptr_eq(s.0, r.0) && r.1 >= s.1).then_some(s.1)
}

/// The ids whose bits are set in `bits`, in order. Cost: O(words + ids).
fn ones(bits: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    for (i, &w) in bits.iter().enumerate() {
        let mut w = w;
        while w != 0 {
            out.push(i as u32 * 32 + w.trailing_zeros());
            w &= w - 1;
        }
    }
    out
}

/// Whether `b` is clean ASCII for an [`AsciiBound`] made without `left_out`: printable
/// (the space to DEL), not `"` or `\\`, not left out. Cost: O(1).
#[inline]
fn clean_ascii(b: u8, left_out: ByteSet) -> bool {
    (0x20..=0x7f).contains(&b) && b != b'"' && b != b'\\' && !left_out.contains(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::equiv::equivalent;

    fn dfa(re: &str) -> Dfa {
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(re)
            .unwrap();
        Dfa::build(&hir, 10_000, 1 << 22).unwrap()
    }

    /// The state reached from the start by `input`.
    /// The table of `s` as a first use computes it: with the plain reach `reach` (shared
    /// by the states of `d`) and, where `s` leaves out some plain bytes, the reach without
    /// them.
    fn fast_table<'a>(
        d: &'a Dfa,
        s: u32,
        trie: &TokenTrie,
        vocab_len: usize,
        reach: &mut PlainReach<'a>,
    ) -> StateTokens {
        let depth = trie.max_depth();
        compute_with(
            d,
            s,
            trie,
            vocab_len,
            true,
            reach,
            |x| PlainReach::excluding(d, depth, x),
            |_| None,
        )
        .0
    }

    /// The table of `s` derived from `r`'s table `from` where [`PlainReach::bound_from`]
    /// finds a bound (then `Some`), as a first use computes it.
    fn derived_table<'a>(
        d: &'a Dfa,
        s: u32,
        r: u32,
        from: &Arc<StateTokens>,
        trie: &TokenTrie,
        vocab_len: usize,
        reach: &mut PlainReach<'a>,
    ) -> Option<StateTokens> {
        let depth = trie.max_depth();
        let mut used = false;
        let t = compute_with(
            d,
            s,
            trie,
            vocab_len,
            true,
            reach,
            |x| PlainReach::excluding(d, depth, x),
            |reach| {
                let k = reach.bound_from(s, r, &mut { MAX_DERIVE_WORK })?;
                used = true;
                Some((k, from.clone()))
            },
        )
        .0;
        used.then_some(t)
    }

    /// The table of `s` by the plain walk (no plain-text shortcuts: what a forced state's
    /// first use runs).
    fn plain_walk_table(d: &Dfa, s: u32, trie: &TokenTrie, vocab_len: usize) -> StateTokens {
        let mut reach = PlainReach::new(d, trie.max_depth());
        compute_with(
            d,
            s,
            trie,
            vocab_len,
            false,
            &mut reach,
            |_| unreachable!("the plain walk leaves nothing out"),
            |_| None,
        )
        .0
    }

    /// The key complement of `keys` built from the tail automaton `dev`.
    fn key_complement_dfa(keys: &[Vec<char>], dev: &Dfa) -> Dfa {
        crate::compile::keys::key_complement(
            keys,
            crate::grammar::json_string::json_encodings,
            dev,
            1 << 16,
            64 << 20,
        )
        .unwrap()
    }

    fn walk(d: &Dfa, input: &[u8]) -> u32 {
        input.iter().fold(d.start(), |s, &b| d.next(s, b))
    }

    /// The counted string `"item{min,max}"` a schema's `maxLength` makes (without its
    /// closing quote unless `close`).
    fn quoted_count(item: &str, min: u32, max: Option<u32>, close: bool) -> Dfa {
        use crate::compile::Lexeme;
        let q = Lexeme::new(dfa("\""));
        Dfa::counted(
            Some(q.clone()),
            Lexeme::new(dfa(item)),
            min,
            max,
            close.then_some(q),
        )
        .expect("counted")
    }

    /// A table store for a vocabulary whose longest token is `depth` bytes.
    fn test_store(depth: usize) -> Store {
        Store::new(
            depth,
            Bounds {
                lexemes: 1 << 12,
                bytes: 1 << 28,
            },
        )
    }

    /// The vocabulary of tokenizer `tok` from the fetched assets.
    fn test_vocab(tok: &str) -> crate::vocab::Vocabulary {
        let path = format!(
            "{}/../../assets/tokenizers/{tok}/tokenizer.json",
            env!("CARGO_MANIFEST_DIR")
        );
        crate::vocab::Vocabulary::from_file(&path)
            .expect("assets missing: run scripts/fetch-assets.sh")
    }

    /// The plain walk, which a forced state's first use runs (the literal after a key's
    /// quote), decides every state as the definition does: flat lexemes that accept
    /// inside a token (a number, a literal and its separator), a loop its scans take whole,
    /// and a counted string near and far from its bound.
    #[test]
    fn plain_walks_match_the_definition() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let mut lexemes: Vec<(String, Dfa)> = [
            r#"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"#,
            r#""name"[ ]*:[ ]*"#,
            r#"[^"\\\x00-\x1f]*""#,
            r#"(?:true|false|null)[ ]*,?"#,
        ]
        .iter()
        .map(|re| (re.to_string(), dfa(re)))
        .collect();
        lexemes.push(("counted".into(), quoted_count("[a-z ]", 0, Some(40), true)));
        let mut checked = 0;
        for (re, d) in &lexemes {
            for s in (1..d.num_states() as u32).step_by(1 + d.num_states() / 12) {
                let a = plain_walk_table(d, s, trie, vocab.len());
                let b = reference_table(d, s, trie, vocab.len());
                assert_same_tables(&a, &b, vocab.len(), &format!("{re} state {s}"));
                checked += 1;
            }
        }
        assert!(checked >= 20, "{checked}");
    }

    /// The definition's own decisions on a few tokens (a table by the definition is what
    /// the other tests hold the walks to). After `"ab`, a string of at most 3 letters
    /// accepts `c` (not final: its quote may follow) and `"` (final: nothing may follow),
    /// refuses `cd` (a fourth letter), and leaves `",` uncertain (the lexeme accepted at
    /// its quote, so the parser decides the `,`). A number accepts `12` and leaves `00`
    /// uncertain (it accepted at the first `0`).
    #[test]
    fn the_definition_decides_single_tokens() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let id = |tok: &[u8]| vocab.token_id(tok).expect("token in vocabulary");
        let has = |t: &StateTokens, tok: &[u8]| {
            let mut m = vec![0u32; vocab.len().div_ceil(32)];
            t.accept.or_into(&mut m);
            let i = id(tok);
            m[(i >> 5) as usize] >> (i & 31) & 1 == 1
        };
        let uncertain = |t: &StateTokens, tok: &[u8]| {
            let n = trie.find(tok).expect("node");
            t.uncertain.iter().any(|&(a, b)| a <= n && n < b)
        };
        let d = quoted_count("[a-z]", 0, Some(3), true);
        let t = reference_table(&d, walk(&d, b"\"ab"), trie, vocab.len());
        assert!(has(&t, b"c") && !t.finals.contains(&id(b"c")));
        assert!(has(&t, b"\"") && t.finals.contains(&id(b"\"")));
        assert!(!has(&t, b"cd") && !uncertain(&t, b"cd"));
        assert!(!has(&t, b"\",") && uncertain(&t, b"\","));
        let num = dfa("-?(?:0|[1-9][0-9]*)");
        let t = reference_table(&num, num.start(), trie, vocab.len());
        assert!(has(&t, b"12") && !uncertain(&t, b"12"));
        assert!(!has(&t, b"00") && uncertain(&t, b"00"));
    }

    /// Asserts that two tables of one state are the same: accept sets as token sets (one
    /// may be sparse, the other dense), uncertain ranges, finals in any order.
    fn assert_same_tables(a: &StateTokens, b: &StateTokens, vocab_len: usize, what: &str) {
        let ids = |t: &TokenSet| {
            let mut m = vec![0u32; vocab_len.div_ceil(32)];
            t.or_into(&mut m);
            m
        };
        assert!(ids(&a.accept) == ids(&b.accept), "{what}: accept");
        assert_eq!(a.uncertain, b.uncertain, "{what}: uncertain");
        let (mut fa, mut fb) = (a.finals.clone(), b.finals.clone());
        fa.sort_unstable();
        fb.sort_unstable();
        assert_eq!(fa, fb, "{what}: finals");
    }

    /// The plain-subtree shortcut changes nothing: every state of several string lexemes,
    /// over the Llama 3.1 vocabulary, gets the same table with and without it.
    #[test]
    fn plain_subtree_shortcut_is_exact() {
        let vocab = test_vocab("llama3_1");
        let ch = r#"(?:[ !#-\[\]-\xff]|\\["/\\bfnrt])"#;
        // The JSON string character as UTF-8 bytes, surrogates excluded.
        let u8ch = r#"(?:[ !#-\[\]-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}|\\["/\\bfnrt])"#;
        // An ECMAScript `.` inside a string: the same without U+2028 and U+2029.
        let u8dot = u8ch.replace(
            r#"[\xe1-\xec\xee\xef][\x80-\xbf]{2}"#,
            r#"[\xe1\xe3-\xec\xee\xef][\x80-\xbf]{2}|\xe2[\x81-\xbf][\x80-\xbf]|\xe2\x80[\x80-\xa7\xaa-\xbf]"#,
        );
        assert_ne!(u8dot, u8ch);
        let res = [
            format!("\"{u8dot}*\""),
            format!("\"{u8dot}{{0,40}}\",?"),
            format!("\"{u8ch}*\""),
            format!("\"{u8ch}{{0,5}}\""),
            format!("\"{u8ch}{{2,30}}\""),
            format!("\"{ch}*\""),
            format!("\"{ch}{{0,6}}\""),
            format!("\"{ch}{{3,9}}\",?"),
            "\"[a-z]{2,8}\"".to_string(),
            "[a-z ]*".to_string(),
            format!("\"{ch}*\"[ ]*:[ ]*\"{ch}{{0,4}}\""),
            // Lexemes that may end inside plain text: a string's content without its
            // closing quote, and a pattern counting words.
            format!("{u8ch}*"),
            format!("{u8ch}{{0,12}}"),
            format!("(?:{u8ch}*[!#-~]){{0,3}}[a-z]?"),
            "(?:[!#-\\[\\]-\\xff]+[ ]+){0,5}[!#-\\[\\]-\\xff]+".to_string(),
        ];
        let trie = vocab.trie();
        // Tables seeded with every plain token, per language; and with the short ones.
        let (mut seeded, mut seeded_short) = ([0usize; 2], 0);
        // States whose plain tokens a bound by characters decides.
        let mut char_bounded = 0;
        for re in &res {
            let d = dfa(re);
            let mut skipped_any = false;
            // One reach memo for all states, as the tables of one lexeme share it.
            let mut reach = PlainReach::new(&d, trie.max_depth());
            for s in 1..d.num_states() as u32 {
                let a = fast_table(&d, s, trie, vocab.len(), &mut reach);
                let b = reference_table(&d, s, trie, vocab.len());
                assert_same_tables(&a, &b, vocab.len(), &format!("{re} state {s}"));
                let mut fresh = PlainReach::new(&d, trie.max_depth());
                let (r0, r1) = (
                    fresh.safe_depth(s, plain::START),
                    fresh.safe_depth(s, plain::START_NO_LS),
                );
                skipped_any |= r0.max(r1) > 0;
                char_bounded += fresh.char_bound(s, 0).is_some() as usize;
                if r0 >= trie.max_depth() {
                    seeded[0] += 1;
                } else if r1 >= trie.max_depth() {
                    seeded[1] += 1;
                } else if r0.max(r1) >= MIN_SEED {
                    seeded_short += 1;
                }
            }
            // Only lexemes that allow every plain character can take the shortcut.
            let expect = re.contains(ch)
                || re.contains(u8ch)
                || re.contains(&u8dot)
                || re.starts_with("(?:[!#");
            assert_eq!(skipped_any, expect, "{re}: whether the shortcut applied");
        }
        // Both plain languages seeded a table somewhere, and the character bound decided
        // the plain tokens of strings near their bound (the last characters of `{0,40}`,
        // `{0,12}`, ...).
        assert!(
            seeded[0] > 0 && seeded[1] > 0 && seeded_short > 0,
            "{seeded:?} {seeded_short}"
        );
        assert!(
            char_bounded >= 20,
            "{char_bounded} states bounded by characters"
        );
    }

    /// Strings whose states refuse a few plain bytes (`^[^/]+$`, `^\S+$`, an email, printable
    /// ASCII but `~`): every table equals [`reference_table`]'s, and the shortcut without the
    /// refused bytes is taken where plain text alone gives nothing.
    #[test]
    fn tables_without_left_out_characters_are_exact() {
        let vocab = test_vocab("llama3_1");
        let multi = r#"[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}"#;
        let no_slash = format!(r#"(?:[ !#-.0-\[\]-\x7f]|{multi}|\\["/\\bfnrt])"#);
        // Unicode white space, in short: the space and U+00A0; and the other characters.
        let space = r#"(?: |\xc2\xa0)"#;
        let word = r#"(?:[!#-\[\]-~]|\xc2[\x80-\x9f\xa1-\xbf]|[\xc3-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2})"#;
        let no_space = format!(r#"(?:[!#-\[\]-\x7f]|{multi}|\\["/\\bfnrt])"#);
        let res = [
            format!("\"{no_slash}+\""),
            format!("{no_slash}+"),
            format!("\"/dev/{no_slash}+(?:/{no_slash}+)*\""),
            format!("\"{no_space}+\""),
            format!("\"{no_space}{{2,40}}\""),
            "\"[ !#-\\[\\]-}]{0,30}\"".to_string(),
            "\"[a-zA-Z0-9._%+-]+@[a-z0-9-]+(?:\\.[a-z0-9-]+)*\"".to_string(),
            "\"[a-zA-Z0-9,_-]+\"".to_string(),
            // Words counted by Unicode white space (`0xc2` starts U+00A0, a `\s`), few
            // enough that plain text with spaces stays safe for a while (the seeded part
            // of the walk).
            // At most 9 slashes: plain text is safe 9 bytes deep (the seeded part of the
            // walk), and a token of 16 slashes dies.
            format!("\"{no_slash}*(?:/{no_slash}*){{0,9}}\""),
            // Two alternatives: after a hex digit both are alive, so the characters off
            // the main path (hex digits) are a poor set to leave out; the dying one (`:`)
            // is better.
            "\"(?:[^:\"\\\\]+:[a-f0-9]+|[a-f0-9]{32})\"".to_string(),
            format!("\"(?:{word}+{space}+){{0,5}}{word}+\""),
            format!("(?:{word}+{space}+){{0,12}}{word}*"),
            // ECMAScript's `^[\w\s-]+$` (an ASCII `\w`, a Unicode `\s`), `^[\w.:-]+$` and
            // a file name: loops that keep most of the vocabulary but not whole subtrees,
            // whose tables scan subtrees in node order (see [`scan_all`] and [`loop_stay`]).
            r#""(?:[A-Za-z0-9_ \t-]|\xC2\xA0|\xE1\x9A\x80|\xE2\x80[\x80-\x8A\xA8\xA9\xAF]|\xE2\x81\x9F|\xE3\x80\x80|\xEF\xBB\xBF)+""#.to_string(),
            r#""[A-Za-z0-9_.:-]+""#.to_string(),
            r#""[A-Za-z0-9_ ./-]+\.[0-9a-zA-Z]+""#.to_string(),
        ];
        let trie = vocab.trie();
        let mut shortcut = 0;
        let scans = SCANS.with(|n| n.get());
        for re in &res {
            let d = dfa(re);
            let mut reach = PlainReach::new(&d, trie.max_depth());
            let mut taken = false;
            for s in 1..d.num_states() as u32 {
                let a = fast_table(&d, s, trie, vocab.len(), &mut reach);
                let b = reference_table(&d, s, trie, vocab.len());
                assert_same_tables(&a, &b, vocab.len(), &format!("{re} state {s}"));
                let (dead, off) = excluded_plain(&d, s);
                for x in [dead, off].into_iter().flatten() {
                    let mut rx = PlainReach::excluding(&d, trie.max_depth(), x);
                    let plain = PlainReach::new(&d, trie.max_depth()).safe_depth(s, plain::START);
                    taken |= rx.safe_depth(s, plain::START) >= MIN_SEED && plain < MIN_SEED;
                }
            }
            shortcut += taken as usize;
        }
        assert!(
            shortcut >= 8,
            "{shortcut} of {} lexemes took the shortcut",
            res.len()
        );
        // The three loops above were scanned (each state's table, every subtree of 64
        // nodes or more that its loop state reaches), and gave the walk's tables.
        assert!(SCANS.with(|n| n.get()) > scans + 100);
        // Two alternatives: the start is safe without `:` (the dying set) as without the
        // hex digits too (off the main path); the dying set is tried first and kept on
        // the tie, so subtrees with hex digits still take the shortcut.
        let d = dfa(&res[9]);
        let start = walk(&d, b"\"");
        let (dead, off) = excluded_plain(&d, start);
        let (dead, off) = (dead.unwrap(), off.unwrap());
        assert!(dead.contains(b':') && !dead.contains(b'a') && off.contains(b'a'));
        let depth =
            |x| PlainReach::excluding(&d, trie.max_depth(), x).safe_depth(start, plain::START);
        assert!(depth(dead) >= depth(off));
        // A word's state leaves out U+00A0 (a `\s`) by its lead byte, not the other
        // two-byte characters of `0xc3`.
        let d = dfa(&res[10]);
        let word = walk(&d, b"\"ab");
        // The space does not die there; it is off the word's loop, and left out.
        let (dead, off) = excluded_plain(&d, word);
        assert!(dead.is_some_and(|x| !x.contains(b' ')));
        let x = off.unwrap();
        assert!(
            x.contains(b' ') && x.contains(0xc2) && !x.contains(0xc3) && !x.contains(b'a'),
            "{}",
            x.describe()
        );
    }

    /// The byte groups of [`TokenTrie::below`]: each byte of plain ASCII text alone, the
    /// lead bytes of the big scripts alone, and a subtree's groups are those of the bytes
    /// below it. Fails if two such bytes share a group.
    #[test]
    fn byte_groups_keep_ascii_and_big_scripts_apart() {
        use crate::vocab::byte_group;
        let ascii: Vec<u8> = (0x20..=0x7fu8)
            .filter(|b| *b != b'"' && *b != b'\\')
            .collect();
        let mut seen = 0u128;
        for &b in &ascii {
            let g = byte_group(b);
            assert_eq!(g.count_ones(), 1);
            assert_eq!(seen & g, 0, "{:?} shares a group", b as char);
            seen |= g;
        }
        for b in 0..=255u8 {
            if !ascii.contains(&b) {
                assert_eq!(seen & byte_group(b), 0, "{b:#x} in an ASCII group");
            }
        }
        // The lead bytes of the big scripts of Llama 3.1 (Latin-1 and Latin Extended-A,
        // Greek, Cyrillic, Arabic, Indic, CJK, Hangul) each have a group of their own, so a
        // pattern that leaves out a few characters of one does not make the walk visit the
        // tokens of the others.
        let own: Vec<u8> = [0xc2u8, 0xc3, 0xc4, 0xc5, 0xce, 0xcf, 0xd0, 0xd1, 0xd8, 0xd9]
            .into_iter()
            .chain(0xe0..=0xed)
            .collect();
        for &b in &own {
            for c in 0x80..=0xffu8 {
                if c != b {
                    assert_ne!(byte_group(b), byte_group(c), "{b:#x} shares with {c:#x}");
                }
            }
        }
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        for n in (0..trie.len() as u32).step_by(97) {
            let mut g = 0;
            for c in n + 1..trie.end(n) {
                g |= byte_group(trie.byte(c));
            }
            assert_eq!(trie.below(n), g, "node {n}");
        }
    }

    /// Counted strings (the lexemes `maxLength` makes) near and far from their bound: the
    /// tables of every count equal [`reference_table`]'s, with escapes and multi-byte
    /// characters counted as one, and the character bound decides the last counts.
    #[test]
    fn counted_strings_near_their_bound_are_exact() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        // A JSON string character as UTF-8 bytes (surrogates excluded) or an escape.
        let ch = r#"(?:[ !#-\[\]-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}|\\["/\\bfnrt]|\\u[0-9A-Fa-f]{4})"#;
        let mut bounded = 0;
        for (min, max) in [(0, 9), (3, 40), (1, 150)] {
            let c = quoted_count(ch, min, Some(max), true);
            let mut reach = PlainReach::new(&c, trie.max_depth());
            // The states after the quote and `i` characters of each kind, the last ones
            // included.
            for unit in ["a", "é", "\\n", "\\u00e9"] {
                for i in (0..=max as usize).filter(|i| i % 7 == 0 || *i + 3 >= max as usize) {
                    let text = format!("\"{}", unit.repeat(i));
                    let s = walk(&c, text.as_bytes());
                    assert_ne!(s, 0, "{text}");
                    let a = fast_table(&c, s, trie, vocab.len(), &mut reach);
                    let b = reference_table(&c, s, trie, vocab.len());
                    let what = format!("{{{min},{max}}} after {text}");
                    assert_same_tables(&a, &b, vocab.len(), &what);
                    bounded += reach.char_bound(s, 0).is_some() as usize;
                }
            }
        }
        assert!(bounded >= 20, "{bounded} states bounded by characters");
    }

    /// A counted class of one-byte items and two-byte letters (as `o79409`'s `name`), far
    /// from its bound, unbounded, and with a count that long tokens (runs of spaces or
    /// dashes) overflow: the scan takes subtrees of one-byte items whole only where the
    /// count has room for all of them and one more, and every table equals the plain
    /// walk's.
    #[test]
    fn counted_classes_take_subtrees_of_one_byte_items_whole() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let class = r"(?:[ A-Za-z0-9_.:/%&#=+@-]|\xc3[\x80-\xbf])";
        let wholes = ITEM_WHOLES.with(|k| k.get());
        // Without a closing quote, the top count accepts and allows nothing: its tokens
        // are final, which a subtree taken whole would miss.
        for (min, max, close) in [
            (1, Some(200), true),
            (0, Some(40), true),
            (0, Some(40), false),
            (2, None, true),
        ] {
            let c = quoted_count(class, min, max, close);
            let mut reach = PlainReach::new(&c, trie.max_depth());
            for text in ["\"", "\"a", "\"ab", "\"é", "\"a b-c"] {
                let s = walk(&c, text.as_bytes());
                assert_ne!(s, 0, "{text}");
                let a = fast_table(&c, s, trie, vocab.len(), &mut reach);
                let b = reference_table(&c, s, trie, vocab.len());
                let what = format!("{min},{max:?},{close} {text}");
                assert_same_tables(&a, &b, vocab.len(), &what);
            }
        }
        let took = ITEM_WHOLES.with(|k| k.get()) - wholes;
        assert!(took > 1000, "{took} subtrees of one-byte items taken whole");
    }

    /// Classes with characters past ASCII (letters and numbers of every script, as
    /// `o79409`'s `name`; the same less two letters; CJK ideographs alone), counted and
    /// as loops: their tables take subtrees whole by the groups of the characters below
    /// ([`CharWholes`]) and are exactly [`reference_table`]'s, near and far from a count's
    /// bound, with and without a closing quote.
    #[test]
    fn classes_past_ascii_take_subtrees_whole_by_character_groups() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let udfa = |re: &str| {
            let hir = regex_syntax::ParserBuilder::new()
                .utf8(false)
                .build()
                .parse(re)
                .unwrap();
            Dfa::build(&hir, 100_000, 1 << 26).unwrap()
        };
        let before = CHAR_WHOLES.with(|k| k.get());
        let classes = [
            r"[\p{L}\p{N} _.:/@-]",
            r"[\p{L}\p{N} &&[^é日]]",
            r"[\x{4e00}-\x{9fff}]",
        ];
        let q = Lexeme::new(dfa("\""));
        // Every state the texts lead `d` to, its table against the definition's.
        let check = |d: &Dfa, what: &str| {
            let mut reach = PlainReach::new(d, trie.max_depth());
            for text in ["\"", "\"a", "\"ab c", "\"é", "\"日本", "\"ж"] {
                let s = walk(d, text.as_bytes());
                if s != 0 {
                    let a = fast_table(d, s, trie, vocab.len(), &mut reach);
                    let b = reference_table(d, s, trie, vocab.len());
                    assert_same_tables(&a, &b, vocab.len(), &format!("{what} {text}"));
                }
            }
        };
        for class in classes {
            let item = Lexeme::new(udfa(class));
            for (min, max, close) in [
                (1, Some(200), true),
                (0, Some(6), true),
                (0, Some(200), false),
                (2, None, true),
            ] {
                let c = Dfa::counted(
                    Some(q.clone()),
                    item.clone(),
                    min,
                    max,
                    close.then_some(q.clone()),
                )
                .expect("counted");
                check(&c, &format!("{class} {min},{max:?},{close}"));
            }
            check(&udfa(&format!("\"{class}*\"")), &format!("{class}*"));
        }
        let took = CHAR_WHOLES.with(|k| k.get()) - before;
        assert!(
            took > 1000,
            "{took} subtrees taken whole by character groups"
        );
    }

    /// Strings of a restricted class near their count's bound take the clean-ASCII bound
    /// ([`AsciiBound`]) for subtrees, and their tables are exactly [`reference_table`]'s: a
    /// counted lexeme (a class with a two-byte character, as `o46406`'s) and the same
    /// count unrolled in the DFA, from the start to the last count.
    #[test]
    fn restricted_classes_near_their_bound_are_exact() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let depth = trie.max_depth();
        let class = r"(?:[A-Za-z0-9 &'()*,./@-]|\xc2\xa3)";
        let counted = quoted_count(class, 1, Some(12), true);
        let unrolled = dfa(r#""[a-z0-9_-]{2,9}""#);
        let mut bounded = 0;
        for (c, max) in [(&counted, 12), (&unrolled, 9)] {
            let mut reach = PlainReach::new(c, depth);
            for i in 0..=max {
                for unit in ["a", "1", "-"] {
                    let text = format!("\"{}", unit.repeat(i));
                    let s = walk(c, text.as_bytes());
                    if s == 0 {
                        continue;
                    }
                    let a = fast_table(c, s, trie, vocab.len(), &mut reach);
                    let b = reference_table(c, s, trie, vocab.len());
                    assert_same_tables(&a, &b, vocab.len(), &format!("after {text}"));
                    let x = excluded_plain(c, s).0.unwrap_or(ByteSet::EMPTY);
                    let k = AsciiBound::new(c, x, depth).bound(s, depth);
                    if let Some(k) = k {
                        assert_eq!(k, max - i, "bound after {text}");
                        bounded += 1;
                    }
                }
            }
        }
        assert!(bounded >= 10, "{bounded} states with a clean-ASCII bound");
    }

    /// Tables derived from an earlier table by a bound in characters
    /// ([`PlainReach::bound_from`]) are exactly [`reference_table`]'s: strings of restricted
    /// classes (ASCII, with two-byte characters, with escapes) counted up to their bound,
    /// and one unrolled in the DFA, each count derived from the table after the opening
    /// quote and from the count before it; a state of another lexeme is no reference.
    #[test]
    fn tables_derived_from_earlier_counts_are_exact() {
        use crate::compile::Lexeme;
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let depth = trie.max_depth();
        let q = Lexeme::new(dfa("\""));
        let counted = |class: &str, min, max| quoted_count(class, min, Some(max), true);
        let cases = [
            (counted("[a-zA-Z0-9_-]", 162, 162), 162, vec!["a", "Z9"]),
            (
                // Latin-1 letters but `×` and `÷`, and two Arabic lead bytes.
                counted(
                    r"(?:[A-Za-z0-9 .]|\xc3[\x80-\x96\x98-\xb6\xb8-\xbf]|[\xd8\xd9][\x80-\xbf])",
                    1,
                    60,
                ),
                60,
                vec!["a", "\u{e9}", " "],
            ),
            (
                counted(r#"(?:[ !#-\[\]-~]|\\"|\\\\)"#, 30, 30),
                30,
                vec!["x", "\\\""],
            ),
            (dfa(r#""[a-z0-9_-]{2,40}""#), 40, vec!["a", "-"]),
            // A suffix that starts with plain text: its count's bound is no bound in
            // characters (`-5` is alive past the minimum, dead before it).
            (
                Dfa::counted(
                    Some(q.clone()),
                    Lexeme::new(dfa("[a-z]")),
                    2,
                    Some(20),
                    Some(Lexeme::new(dfa(r#"-[0-9]+""#))),
                )
                .expect("counted"),
                20,
                vec!["a"],
            ),
            // Complete after every letter: the bound is not exact (a longer token is
            // uncertain, not refused), and nothing may be derived.
            (dfa(r#""[a-z]{0,30}"#), 30, vec!["a"]),
            // The same counted, without a closing quote (a nullable suffix).
            (
                Dfa::counted(
                    Some(q.clone()),
                    Lexeme::new(dfa("[a-z]")),
                    0,
                    Some(30),
                    None,
                )
                .expect("counted"),
                30,
                vec!["a"],
            ),
        ];
        let (mut derived, mut structural) = (0, 0);
        for (c, max, units) in &cases {
            let mut reach = PlainReach::new(c, depth);
            let s0 = walk(c, b"\"");
            let t0 = Arc::new(fast_table(c, s0, trie, vocab.len(), &mut reach));
            for unit in units {
                let mut prev = (s0, t0.clone());
                let mut text = String::from("\"");
                while text.len() <= *max * unit.len() {
                    text.push_str(unit);
                    let s = walk(c, text.as_bytes());
                    if s == 0 {
                        break;
                    }
                    let want = reference_table(c, s, trie, vocab.len());
                    for (r, from) in [(s0, &t0), (prev.0, &prev.1)] {
                        if r == s {
                            continue;
                        }
                        // The structure of a counted lexeme and the search agree.
                        let by_structure = c.has_counts().then(|| reach.bound_from(s, r, &mut 0));
                        if let Some(Some(k)) = by_structure {
                            let found = reach.bound_search(s, r, &mut { MAX_DERIVE_WORK });
                            assert!(found.is_none_or(|f| f == k), "after {text}: {k} {found:?}");
                            structural += 1;
                        }
                        let got = derived_table(c, s, r, from, trie, vocab.len(), &mut reach);
                        if let Some(got) = got {
                            assert_same_tables(&got, &want, vocab.len(), &format!("after {text}"));
                            derived += 1;
                        }
                    }
                    // A later count is no reference for an earlier one (it keeps fewer
                    // tokens alive).
                    let want = Arc::new(want);
                    if prev.0 != s {
                        let back =
                            derived_table(c, prev.0, s, &want, trie, vocab.len(), &mut reach);
                        if let Some(back) = back {
                            assert_same_tables(
                                &back,
                                &prev.1,
                                vocab.len(),
                                &format!("before {text}"),
                            );
                        }
                    }
                    prev = (s, want);
                }
            }
        }
        assert!(derived >= 300, "{derived} tables derived");
        assert!(structural >= 100, "{structural} bounds from the structure");
        // Nothing derives the last two lexemes' tables.
        for (c, _, _) in &cases[5..] {
            let reach = PlainReach::new(c, depth);
            let (s0, s1) = (walk(c, b"\""), walk(c, b"\"ab"));
            assert_eq!(reach.bound_from(s1, s0, &mut { MAX_DERIVE_WORK }), None);
        }
        // A reference that is no earlier count of the same string: no bound.
        let (c, _, _) = &cases[0];
        let reach = PlainReach::new(c, depth);
        let s = walk(c, b"\"abc");
        let r = walk(c, b"\"abc\"");
        assert_eq!(reach.bound_from(s, r, &mut { MAX_DERIVE_WORK }), None);
    }

    /// Counted lexemes of one item (the `maxLength`s of one `pattern` class) derive their
    /// tables from the table registered for the item by another lexeme ([`Classes`]),
    /// through [`Tables::get`], and get exactly [`reference_table`]'s; a lexeme with another
    /// item (an equal class, built apart) finds none.
    #[test]
    fn counted_lexemes_of_one_class_share_a_reference_exactly() {
        use crate::compile::Lexeme;
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let store = test_store(trie.max_depth());
        let depth = trie.max_depth();
        let q = Lexeme::new(dfa("\""));
        let class = r"(?:[A-Za-z0-9 .-]|\xc3[\x80-\x96\x98-\xb6\xb8-\xbf])";
        let x = Lexeme::new(dfa(class));
        let counted = |x: &Arc<Lexeme>, min, max| {
            Lexeme::new(
                Dfa::counted(Some(q.clone()), x.clone(), min, Some(max), Some(q.clone()))
                    .expect("counted"),
            )
        };
        let (a, b) = (counted(&x, 1, 200), counted(&x, 0, 40));
        let other = counted(&Lexeme::new(dfa(class)), 0, 40);
        let (ta, tb, to) = (
            store.tables_for(&a),
            store.tables_for(&b),
            store.tables_for(&other),
        );
        ta.get(&store, &a, walk(&a, b"\""), trie, vocab.len());
        let mut derived = 0;
        for unit in ["a", "\u{e9}", "-"] {
            for i in 0..=40 {
                let text = format!("\"{}", unit.repeat(i));
                let s = walk(&b, text.as_bytes());
                let mut reach = PlainReach::new(&b, depth);
                derived += tb.reference(&store, &b, s, &mut reach).is_some() as usize;
                let got = tb.get(&store, &b, s, trie, vocab.len());
                let want = reference_table(&b, s, trie, vocab.len());
                assert_same_tables(got, &want, vocab.len(), &format!("after {text}"));
                let s = walk(&other, text.as_bytes());
                let mut reach = PlainReach::new(&other, depth);
                assert!(
                    to.reference(&store, &other, s, &mut reach).is_none(),
                    "after {text}"
                );
            }
        }
        assert!(derived >= 100, "{derived} tables derived");
        // A registered table with fewer items left is no reference: a later count first,
        // then an earlier one.
        let c = counted(&Lexeme::new(dfa(class)), 0, 40);
        let tc = store.tables_for(&c);
        for i in [35, 10, 38] {
            let text = format!("\"{}", "a".repeat(i));
            let s = walk(&c, text.as_bytes());
            let got = tc.get(&store, &c, s, trie, vocab.len());
            let want = reference_table(&c, s, trie, vocab.len());
            assert_same_tables(got, &want, vocab.len(), &format!("after {text}"));
        }
    }

    /// A plain-reach answer does not depend on what was asked before: a search stopped at
    /// the depth a walk asked for, then asked for the whole depth, gives the fresh answer
    /// (inside counted strings too, whose counts a search merges by the depth it has left).
    #[test]
    fn reach_answers_do_not_depend_on_what_was_asked_first() {
        use crate::compile::Lexeme;
        let vocab = test_vocab("llama3_1");
        let depth = vocab.trie().max_depth();
        // A JSON string character (as UTF-8, or an escape), at most 100 of them.
        let ch = r#"(?:[ !#-\[\]-\x7f]|[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}|\\["/\\bfnrt])"#;
        let q = Lexeme::new(dfa("\""));
        let c = Dfa::counted(Some(q.clone()), Lexeme::new(dfa(ch)), 1, Some(100), Some(q))
            .expect("counted");
        let mut between = 0;
        for i in [1usize, 10, 40, 70, 85, 99] {
            let s = walk(&c, format!("\"{}", "a".repeat(i)).as_bytes());
            let fresh = PlainReach::new(&c, depth).safe_depth(s, plain::START);
            between += (20 < fresh && fresh < depth) as usize;
            for need in [1, 5, 20] {
                let mut r = PlainReach::new(&c, depth);
                assert_eq!(
                    r.reaches(s, plain::START, need),
                    fresh >= need,
                    "{i} {need}"
                );
                assert_eq!(
                    r.safe_depth(s, plain::START),
                    fresh,
                    "{i} after asking {need}"
                );
                assert_eq!(r.reaches(s, plain::START, depth), fresh >= depth, "{i}");
            }
        }
        // Safe past what a walk asks, short of the longest token: where a merge of
        // counts by the asked depth would claim more.
        assert!(between >= 2, "{between}");
    }

    /// Every table equals a token-by-token reference: each token's bytes run through the
    /// DFA from the state, accepted when it stays alive, uncertain when it dies after the
    /// lexeme accepted at a proper prefix, refused otherwise; finals are the accepted
    /// tokens that end complete with nothing allowed after. Over Llama 3.1 and Gemma 2
    /// (whose tries have wide nodes: the walk visits only their allowed children).
    /// Tables through [`Tables::get`] equal [`reference_table`]'s at every state of lexemes
    /// with forced literals (a key after its quote, which takes the plain walk at once)
    /// followed by wide-open text (which takes the shortcuts).
    #[test]
    fn forced_states_take_the_plain_walk_exactly() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let store = test_store(trie.max_depth());
        let depth = trie.max_depth();
        let mut forced_states = 0;
        for re in [
            r#""(?:console_variables|commands)"[ ]{0,3}:[ ]{0,3}"r_[a-z_]+""#,
            r#""name"[ \t]*:[ \t]*"(?:[ !#-\[\]-\xff]|\\["/\\bfnrt])*""#,
            r#"abc(?:def)?[0-9]{2}"#,
            r#""key"(?:, ?"more")?"#,
        ] {
            let lex = Lexeme::new(dfa(re));
            let tables = Tables::new(lex.table_slots(depth), depth, None);
            for s in 1..lex.num_states() as u32 {
                forced_states += forced(&lex, s, FORCED_PLAIN_WALK) as usize;
                let got = tables.get(&store, &lex, s, trie, vocab.len());
                let want = reference_table(&lex, s, trie, vocab.len());
                assert_same_tables(got, &want, vocab.len(), &format!("{re} state {s}"));
            }
        }
        assert!(forced_states >= 20, "{forced_states} forced states");
    }

    /// A literal chain's tables (its own states, and those past the literal, which take
    /// the tables of the lexeme after it) equal [`reference_table`]'s for the chain, state by
    /// state: a key and colon in front of a string and in front of a number.
    #[test]
    fn literal_chains_share_their_rest_tables_exactly() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let store = test_store(trie.max_depth());
        // A counted string behind a key too (a `maxLength` string property: the chain's
        // rest is a counted lexeme, shared by every key in front of it).
        let part = |re: &str| Lexeme::new(dfa(re));
        let counted = Dfa::counted(
            Some(part(r#"[ ]?""#)),
            part(r#"[ !#-\[\]-\x7f]|\\["\\nt]"#),
            0,
            Some(12),
            Some(part(r#"""#)),
        )
        .expect("a counted string");
        for (lit, rest) in [
            (
                r#""key":"#,
                Lexeme::new(dfa(r#"[ ]?"(?:[ !#-\[\]-\x7f]|\\["\\nt]){0,12}""#)),
            ),
            (
                r#""n": "#,
                Lexeme::new(dfa(r#"-?(?:0|[1-9][0-9]{0,5})(?:\.[0-9]+)?"#)),
            ),
            (r#""counted":"#, Lexeme::new(counted)),
        ] {
            let chain = Lexeme::new(
                Dfa::prepend_literal(lit.as_bytes(), &rest, 10_000, 1 << 24).expect("chain"),
            );
            // The chain's language: the literal, then the rest's (12 characters at most for
            // the counted string).
            let run = |text: &str| {
                let s = text.bytes().fold(chain.start(), |s, b| chain.next(s, b));
                s != 0 && chain.accepting(s)
            };
            if lit == r#""counted":"# {
                assert!(run(r#""counted": "abc\n""#));
                assert!(run(r#""counted":"""#));
                assert!(run(&format!(r#""counted":"{}""#, "x".repeat(12))));
                assert!(!run(&format!(r#""counted":"{}""#, "x".repeat(13))));
                assert!(!run(r#""countex":"a""#));
            }
            let tables = store.tables_for(&chain);
            let mut delegated = 0;
            for s in 1..chain.num_states() as u32 {
                let got = tables.get(&store, &chain, s, trie, vocab.len());
                let want = reference_table(&chain, s, trie, vocab.len());
                assert_same_tables(got, &want, vocab.len(), &format!("{lit} state {s}"));
                delegated += (s as usize > lit.len()) as usize;
            }
            assert!(delegated > 3, "{lit}: {delegated} states past the literal");
        }
    }

    #[test]
    fn tables_match_a_token_by_token_reference() {
        let res = [
            r#"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"#,
            r#""(?:name|age|email|e-mail|nick)""#,
            r#"[ \t\n]*:[ \t\n]*"#,
            r#"true|false|null"#,
            r#"[a-z]+(?:_[a-z0-9]+)*"#,
            r#""(?:[ !#-\[\]-\xff]|\\["/\\bfnrt]){0,6}""#,
            r#"(?:[0-9]{3}-)?[0-9]{4}"#,
            r#"[ -~]{2,5}[.!?]"#,
            // Scanned in node order (see [`scan_all`]): fixed positions of any character
            // (a `date-time` pattern of dots), words up to a count, and a class loop
            // with two-byte letters.
            r#""[ !#-\[\]-\xff]{4}-[ !#-\[\]-\xff]{2}T[0-9]""#,
            r#""(?:[!#-\[\]-\xff]+ ){0,3}[!#-\[\]-\xff]+""#,
            r#""(?:[ a-z0-9_.:/%&#=+@-]|\xc3[\x80-\xbf])*""#,
        ];
        let scans = SCAN_ALLS.with(|n| n.get());
        for tok in ["llama3_1", "gemma2"] {
            let vocab = test_vocab(tok);
            let trie = vocab.trie();
            let mut node_of = vec![u32::MAX; vocab.len()];
            for n in 1..trie.len() as u32 {
                for &t in trie.tokens_at(n) {
                    node_of[t as usize] = n;
                }
            }
            let (mut n_acc, mut n_unc) = (0usize, 0usize);
            for re in res {
                let d = dfa(re);
                let mut reach = PlainReach::new(&d, trie.max_depth());
                for s in 1..d.num_states() as u32 {
                    let got = fast_table(&d, s, trie, vocab.len(), &mut reach);
                    let mut mask = vec![0u32; vocab.len().div_ceil(32)];
                    got.accept.or_into(&mut mask);
                    let mut finals = got.finals.clone();
                    finals.sort_unstable();
                    let mut want_finals = Vec::new();
                    for t in 0..vocab.len() as u32 {
                        let n = node_of[t as usize];
                        if n == u32::MAX {
                            continue;
                        }
                        let (mut st, mut exited, mut fate) = (s, false, 0u8);
                        for &b in vocab.token_bytes(t) {
                            if !d.allowed(st).contains(b) {
                                fate = if exited { 2 } else { 1 };
                                break;
                            }
                            st = d.next(st, b);
                            exited |= d.accepting(st);
                        }
                        let accepted = mask[(t >> 5) as usize] >> (t & 31) & 1 == 1;
                        let uncertain = got.uncertain.iter().any(|&(a, b)| a <= n && n < b);
                        let what = format!("{tok} {re} state {s} token {t}");
                        assert_eq!(accepted, fate == 0, "{what}: accepted");
                        assert_eq!(uncertain, fate == 2, "{what}: uncertain");
                        if fate == 0 && d.accepting(st) && d.allowed(st).is_empty() {
                            want_finals.push(t);
                        }
                        n_acc += (fate == 0) as usize;
                        n_unc += (fate == 2) as usize;
                    }
                    assert_eq!(finals, want_finals, "{tok} {re} state {s}: finals");
                    // Ranges are sorted and disjoint (the mask merges them).
                    for w in got.uncertain.windows(2) {
                        assert!(w[0].1 <= w[1].0, "{tok} {re} state {s}: ranges");
                    }
                }
            }
            assert!(
                n_acc > 0 && n_unc > 0,
                "{tok}: {n_acc} accepted, {n_unc} uncertain"
            );
        }
        let scanned = SCAN_ALLS.with(|n| n.get()) - scans;
        assert!(scanned > 100, "{scanned} subtrees scanned");
    }

    /// An equivalence check reports the pairs it met, which tells a refutation found at
    /// once (the next bytes differ) from one found deep down (a count that runs out after
    /// 100 characters), which makes a lexeme give up on the other (see
    /// [`MAX_CHEAP_REFUTATION`]).
    #[test]
    fn refutations_report_how_deep_they_went() {
        let (a, b, c) = (
            dfa(r#""[a-z]{0,100}""#),
            dfa(r#""[a-z]*""#),
            dfa(r#""[0-9]*""#),
        );
        let (s, t, u) = (walk(&a, b"\""), walk(&b, b"\""), walk(&c, b"\""));
        let (r, pairs) = equivalent_within(&a, s, &b, t, 256);
        assert_eq!(r, Some(false));
        assert!(
            pairs > MAX_CHEAP_REFUTATION && pairs <= MAX_PAIRS,
            "{pairs}"
        );
        // On strings of at most 99 bytes they agree (the 100th character is where `a`
        // stops allowing letters).
        assert_eq!(equivalent_within(&a, s, &b, t, 99).0, Some(true));
        let (r, pairs) = equivalent_within(&b, t, &c, u, 256);
        assert_eq!(r, Some(false));
        assert!(pairs <= MAX_CHEAP_REFUTATION, "{pairs}");
    }

    #[test]
    fn bounded_equivalence_is_exact() {
        // The inside of a string, in two different lexemes: equivalent at any depth.
        let a = dfa(r#""name": "[a-z]*""#);
        let b = dfa(r#""[a-z]*""#);
        let (sa, sb) = (walk(&a, b"\"name\": \"ab"), walk(&b, b"\"x"));
        assert!(equivalent(&a, sa, &b, sb, 64));
        // A bound of 10 more characters: strings of up to 10 bytes behave alike (depth 9
        // also compares which 10th bytes are allowed), the 11th differs.
        let c = dfa(r#""[a-z]{0,12}""#);
        let sc = walk(&c, b"\"ab");
        assert!(equivalent(&b, sb, &c, sc, 9));
        assert!(!equivalent(&b, sb, &c, sc, 10));
        // Different content or continuation: never.
        let d = dfa(r#""[a-y]*""#);
        assert!(!equivalent(&b, sb, &d, walk(&d, b"\"x"), 64));
        let e = dfa(r#""[a-z]*",?"#);
        assert!(!equivalent(&b, sb, &e, walk(&e, b"\"x"), 64));
    }

    /// A JSON string of `min` to `max` characters (ASCII escapes only) as a counted lexeme.
    fn counted_string(min: u32, max: Option<u32>) -> Dfa {
        let ch = r#"([^"\\\x00-\x1f]|\\["\\/bfnrt])"#;
        Dfa::counted(
            Some(Lexeme::new(dfa("\""))),
            Lexeme::new(dfa(ch)),
            min,
            max,
            Some(Lexeme::new(dfa("\""))),
        )
        .unwrap()
    }

    /// Signatures over `k` bytes agree exactly with the bounded bisimulation at depth `k`,
    /// across DFAs with different byte classes (equal when it holds, which sharing needs;
    /// different when it fails, barring a 64-bit collision), counted lexemes included.
    #[test]
    fn signatures_agree_with_bounded_equivalence() {
        let dfas = [
            dfa(r#""name": "[a-z]*""#),
            dfa(r#""[a-z]*""#),
            dfa(r#""[a-z]{0,12}""#),
            dfa(r#""[a-y]*""#),
            dfa(r#""[a-z]*",?"#),
            dfa(r#"-?(0|[1-9][0-9]*)(\.[0-9]+)?"#),
            dfa(r#"(true|false|null|"[0-9a-f]{2,6}")"#),
            counted_string(3, Some(9)),
            counted_string(0, Some(40)),
            counted_string(5, None),
        ];
        let mut pairs = [0usize; 2];
        for (i, x) in dfas.iter().enumerate() {
            for y in &dfas[i..] {
                let xs = (1..x.num_states().min(60) as u32).collect::<Vec<_>>();
                let ys = (1..y.num_states().min(60) as u32).collect::<Vec<_>>();
                for k in [0, 1, 2, 5] {
                    for &s in &xs {
                        for &t in &ys {
                            let same = equivalent(x, s, y, t, k);
                            pairs[same as usize] += 1;
                            assert_eq!(
                                signature(x, s, k) == signature(y, t, k),
                                same,
                                "states {s} and {t} over {k} bytes"
                            );
                        }
                    }
                }
            }
        }
        assert!(pairs[0] > 1000 && pairs[1] > 100, "{pairs:?}");
    }

    /// A key complement of a few hundred keys is safe on string text at every depth after
    /// its opening quote: the search runs over its whole trie (more pairs than
    /// [`MAX_REACH_PAIRS`], within [`REACH_PAIRS_PER_STATE`] per state) instead of
    /// stopping a few bytes deep, where its table walked tens of thousands of trie nodes.
    #[test]
    fn key_complements_are_safe_at_every_depth() {
        let mut rnd = crate::compile::test_rng(7);
        let keys: Vec<Vec<char>> = (0..400)
            .map(|_| {
                (0..4 + rnd(8))
                    .map(|_| (b'a' + rnd(26) as u8) as char)
                    .collect()
            })
            .collect();
        let dev = dfa(r#"([^"\\\x00-\x1f]|\\.)([^"\\\x00-\x1f]|\\.)*""#);
        let kc = key_complement_dfa(&keys, &dev);
        assert!(kc.num_states() > MAX_REACH_PAIRS);
        assert!(kc.num_states() * REACH_PAIRS_PER_STATE <= MAX_REACH_PAIRS_ANY);
        let inside = walk(&kc, b"\"");
        let mut r = PlainReach::new(&kc, 64);
        assert_eq!(r.safe_depth(inside, plain::STARTS[0]), usize::MAX);
        assert_eq!(r.safe_key(inside, plain::STARTS[0]), Some(64));
        // A key read, its closing quote is refused (the key is excluded), and the string
        // may go on.
        let key: String = keys[0].iter().collect();
        let at_key = walk(&kc, format!("\"{key}").as_bytes());
        assert!(kc.allowed(at_key).contains(b'a') && !kc.allowed(at_key).contains(b'"'));
    }

    /// A key complement's tables derived from the plain string's are the tables its own
    /// walk computes (token for token: the uncertain ranges may be cut differently), at
    /// the trie states a derivation takes; and it takes the state after the opening quote
    /// and those after a key's prefix, for string characters with and without `\uXXXX`
    /// escapes. A state whose keys all close past the longest token has the string's
    /// table itself.
    #[test]
    fn key_complement_tables_derive_exactly() {
        let vocab = test_vocab("llama3_1");
        let trie = vocab.trie();
        let u8ch = r#"(?:[ !#-\[\]-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}|\\["/\\bfnrt])"#;
        // The string's characters with `\uXXXX` escapes too, which the character that
        // leaves the key trie (`dev`'s first) cannot be, as in the schema module.
        let uch = format!(r#"(?:{u8ch}|\\u[0-9A-Fa-f]{{4}})"#);
        let tokens = |t: &StateTokens| {
            let mut u: Vec<u32> = t
                .uncertain
                .iter()
                .flat_map(|&(a, b)| trie.tokens_in(a, b).iter().copied())
                .collect();
            u.sort_unstable();
            let mut f = t.finals.clone();
            f.sort_unstable();
            let mut m = vec![0u32; vocab.len().div_ceil(32)];
            t.accept.or_into(&mut m);
            (m, u, f)
        };
        let mut rnd = crate::compile::test_rng(11);
        let alphabet: Vec<char> = "abcdenrst _-.0é\"\\/".chars().collect();
        let words = [
            "name",
            "type",
            "id",
            "description",
            "n",
            "na",
            "",
            "a b",
            "é",
            "\"q\"",
        ];
        // A key that closes past the longest token (its prefix's table is the string's).
        let long = format!("zq{}", "x".repeat(80));
        let (mut derived, mut same) = (0, 0);
        for ch in [u8ch, &uch] {
            let dev = dfa(&format!("{u8ch}{ch}*\""));
            let base = dfa(&format!("\"{ch}*\""));
            let g0 = walk(&base, b"\"");
            let from = reference_table(&base, g0, trie, vocab.len());
            let from_start = reference_table(&base, base.start(), trie, vocab.len());
            // One memo for every key set, as for the complements of one tail.
            let mut memo = TailEq::default();
            for round in 0..4 {
                let mut keys: Vec<Vec<char>> = words.iter().map(|w| w.chars().collect()).collect();
                keys.truncate(3 + round * 2);
                keys.push(long.chars().collect());
                for _ in 0..20 * round {
                    let n = 1 + rnd(7);
                    keys.push(
                        (0..n)
                            .map(|_| alphabet[rnd(alphabet.len() as u64) as usize])
                            .collect(),
                    );
                }
                let kc = key_complement_dfa(&keys, &dev);
                let trie0 = crate::compile::keys::trie_start(&kc);
                // The states after the opening quote, after key prefixes, and inside an
                // escape and a two-byte character.
                let mut inputs: Vec<Vec<u8>> =
                    vec![b"\"".to_vec(), b"\"\\".to_vec(), b"\"\xc3".to_vec()];
                for k in &keys {
                    let enc: Vec<u8> = k
                        .iter()
                        .flat_map(|&c| {
                            crate::grammar::json_string::json_encodings(c).swap_remove(0)
                        })
                        .collect();
                    for cut in 0..=enc.len().min(4) {
                        let mut v = b"\"".to_vec();
                        v.extend_from_slice(&enc[..cut]);
                        inputs.push(v);
                    }
                }
                // The start, derived from the string's start.
                let at_start = derive_key_complement(
                    (&kc, kc.start(), trie0),
                    (&base, base.start(), &from_start),
                    (&dev, &mut memo),
                    trie,
                    vocab.len(),
                )
                .expect("the start is derived");
                let at_start = at_start.unwrap_or_else(|| from_start.clone());
                let w = reference_table(&kc, kc.start(), trie, vocab.len());
                assert!(
                    tokens(&at_start) == tokens(&w),
                    "keys {keys:?}, at the start"
                );
                inputs.sort();
                inputs.dedup();
                for input in &inputs {
                    let s = walk(&kc, input);
                    if s < trie0 {
                        // In the tail (no key goes on with an escape or a two-byte
                        // character).
                        assert!(input.len() == 2, "{input:?} left the trie");
                        continue;
                    }
                    let d = derive_key_complement(
                        (&kc, s, trie0),
                        (&base, g0, &from),
                        (&dev, &mut memo),
                        trie,
                        vocab.len(),
                    );
                    let at_boundary = input
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || *b == b'"' || *b == b' ');
                    // A string without `\uXXXX` escapes cannot spell a key character
                    // the way the complement reads it (`json_encodings`), so the
                    // derivation gives up (the table is then computed as any other).
                    let spelled_alike = *ch == *uch
                        || keys
                            .iter()
                            .flatten()
                            .all(|&c| !crate::grammar::json_string::u_escaped(c));
                    if at_boundary && input.len() <= 3 && spelled_alike {
                        assert!(d.is_some(), "{input:?}: not derived");
                    }
                    if let Some(d) = d {
                        same += d.is_none() as usize;
                        let d = d.unwrap_or_else(|| from.clone());
                        let w = reference_table(&kc, s, trie, vocab.len());
                        assert!(tokens(&d) == tokens(&w), "keys {keys:?}, after {input:?}");
                        derived += 1;
                    }
                }
            }
        }
        assert!(derived > 40 && same > 0, "{derived} {same}");
    }

    /// A shared bitmap less some bits sets exactly its other bits, and leaves the bits
    /// already in the mask (other items' tokens) alone.
    #[test]
    fn minus_sets_or_exactly() {
        let mut rnd = crate::compile::test_rng(5);
        for n in [1usize, 2, 7, 64, 300] {
            let words: Vec<u32> = (0..n).map(|_| rnd(u32::MAX as u64) as u32).collect();
            let mut drop: Vec<(u32, u32)> = Vec::new();
            for i in 0..n {
                if rnd(3) == 0 {
                    drop.push((i as u32, rnd(u32::MAX as u64) as u32));
                }
            }
            let before: Vec<u32> = (0..n).map(|_| rnd(u32::MAX as u64) as u32).collect();
            let mut mask = before.clone();
            TokenSet::Minus(words.clone().into(), drop.clone().into()).or_into(&mut mask);
            for i in 0..n {
                let d = drop.iter().find(|e| e.0 as usize == i).map_or(0, |e| e.1);
                assert_eq!(mask[i], before[i] | (words[i] & !d), "word {i} of {n}");
            }
        }
    }

    #[test]
    fn subtracted_ranges_leave_the_rest() {
        let a = [(0, 10), (12, 20), (25, 30)];
        assert_eq!(subtract_ranges(&a, &[]), a.to_vec());
        assert_eq!(
            subtract_ranges(&a, &[(2, 3), (9, 13), (15, 16), (25, 30)]),
            vec![(0, 2), (3, 9), (13, 15), (16, 20)]
        );
        assert_eq!(subtract_ranges(&a, &[(0, 40)]), vec![]);
    }

    /// Sorted ranges that touch or overlap become one; a gap keeps them apart.
    #[test]
    fn touching_and_overlapping_ranges_join() {
        let mut r = vec![(0, 2), (2, 5), (3, 4), (4, 9), (10, 12), (12, 12)];
        join_adjacent(&mut r);
        assert_eq!(r, vec![(0, 9), (10, 12)]);
        let mut none: Vec<(u32, u32)> = Vec::new();
        join_adjacent(&mut none);
        assert!(none.is_empty());
    }

    /// The safe depth that refutes a share before the bisimulation never refutes states
    /// that are equivalent up to the longest token, and refutes some that the signature
    /// lets through (a bounded string against an unbounded one).
    #[test]
    fn safe_keys_never_refute_equivalent_states() {
        let dfas = [
            dfa(r#""[a-z]*""#),
            dfa(r#""[a-z]{0,12}""#),
            dfa(r#""([a-z]|[a-z])*""#),
            dfa(r#""[ !#-\[\]-~]*""#),
            counted_string(3, Some(9)),
            counted_string(0, Some(14)),
            counted_string(0, Some(40)),
            counted_string(5, None),
        ];
        let depth = 16;
        let (mut same, mut refuted) = (0, 0);
        for (i, x) in dfas.iter().enumerate() {
            for y in &dfas[i..] {
                let (mut rx, mut ry) = (PlainReach::new(x, depth), PlainReach::new(y, depth));
                // The first states, and those a string of `i` letters reaches.
                let states = |d: &Dfa| {
                    let mut v: Vec<u32> = (1..d.num_states().min(40) as u32).collect();
                    v.extend((0..24).map(|i| walk(d, format!("\"{}", "a".repeat(i)).as_bytes())));
                    v.retain(|&s| s != 0);
                    v
                };
                for &s in &states(x) {
                    for &t in &states(y) {
                        let (a, b) = (
                            rx.safe_key(s, plain::STARTS[0]),
                            ry.safe_key(t, plain::STARTS[0]),
                        );
                        let keys_differ = matches!((a, b), (Some(a), Some(b)) if a != b);
                        if equivalent(x, s, y, t, depth) {
                            same += 1;
                            assert!(!keys_differ, "states {s} and {t}: {a:?} {b:?}");
                        } else if keys_differ
                            && signature(x, s, SIGNATURE_ROUNDS)
                                == signature(y, t, SIGNATURE_ROUNDS)
                        {
                            refuted += 1;
                        }
                    }
                }
            }
        }
        assert!(same > 50 && refuted > 50, "{same} {refuted}");
    }

    /// A DFA whose states fan out to 4,096 distinct states within 3 bytes: the signature
    /// gives up (the sharing check then runs the capped bisimulation) instead of visiting
    /// them all, and a shallower one still answers.
    #[test]
    fn signatures_give_up_on_wide_fan_out() {
        let letters: Vec<char> = ('a'..='p').collect();
        // 64 distinct tail characters: every word gets its own two-character tail.
        let tails: Vec<char> = ('0'..='9')
            .chain('A'..='Z')
            .chain('a'..='z')
            .chain(['_', '~'])
            .collect();
        let mut words = Vec::new();
        for (i, x) in letters.iter().enumerate() {
            for (j, y) in letters.iter().enumerate() {
                for (k, z) in letters.iter().enumerate() {
                    let n = i * 256 + j * 16 + k;
                    words.push(format!("{x}{y}{z}{}{}", tails[n % 64], tails[n / 64]));
                }
            }
        }
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .build()
            .parse(&words.join("|"))
            .unwrap();
        let d = Dfa::build(&hir, 20_000, 1 << 28).unwrap();
        assert!(d.num_states() > 8000);
        assert_eq!(signature(&d, d.start(), 3), None);
        assert!(signature(&d, d.start(), 1).is_some());
    }
}
