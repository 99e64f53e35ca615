//! The compile caches one [`crate::Engine`] owns: built lexemes, key-set measures, and a
//! reusable NFA compiler.
//!
//! Schemas repeat the same lexemes endlessly (a JSON string, an integer, whitespace, a
//! `"key": ` prefix), so determinizing each once per engine turns most of compile time
//! into a lookup. The cache is keyed by the exact regex (or structural key) and the size
//! limits it was built under, so a hit recognizes exactly what a fresh build would (a
//! composed build may differ in its number of states when its parts were evicted and
//! rebuilt meanwhile, since equal parts are recognized by identity).
//!
//! Owns: the [`Cache`] of lexemes, the key-set measures, the NFA compiler. Uses: the
//! lexeme automata ([`super::automata::dfa`]) only. Nothing here knows of vocabularies or token
//! tables: those live in the engine's table store (`crate::tables::Store`), keyed by
//! lexeme.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use regex_automata::nfa::thompson;
use regex_syntax::hir::Hir;

use super::automata::dfa::{Dfa, DfaError, Lexeme};

/// A cached build: the lexeme, or why it could not be built.
pub(crate) type Entry = Result<Arc<Lexeme>, DfaError>;

/// Bounds of the compile caches. An engine's come from its configuration
/// (`EngineConfig`, whose defaults are these); a standalone compile uses the defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Lexemes kept, both generations together (default 8,192).
    pub lexemes: usize,
    /// DFA bytes the kept lexemes may hold, both generations together (default 256 MiB;
    /// one DFA can reach `Limits::max_lexeme_states` x 1 KiB, so a count alone does not
    /// bound it).
    pub dfa_bytes: usize,
    /// Key sets whose measures are kept (default 16,384).
    pub key_sets: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            lexemes: 8192,
            dfa_bytes: 256 << 20,
            key_sets: 1 << 14,
        }
    }
}

/// The compile caches of one engine. `Send + Sync`: every part is behind its own lock,
/// held only for a lookup or an insert (builds run outside the locks, so two threads
/// compiling the same new lexeme may both build it; the second insert wins, both results
/// are equal).
pub(crate) struct Caches {
    lexemes: Mutex<Cache>,
    measured: Mutex<MeasureMemo>,
    /// A Thompson compiler reused by every NFA build that finds it free: a fresh one
    /// allocates and zeroes its UTF-8 suffix caches (10,000 entries, about 400 KiB) for
    /// every lexeme, which was a tenth of compile time; a reused one invalidates them by
    /// bumping a version. regex-automata clears its builder at each build, so reuse gives
    /// the same NFA. A build that finds it taken (another thread's) uses a fresh one.
    nfa: Mutex<thompson::Compiler>,
    bounds: Bounds,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, bytes) = self.usage();
        write!(f, "Caches({n} lexemes, {bytes} DFA bytes)")
    }
}

impl Caches {
    /// Empty caches within `bounds`. Cost: O(1).
    pub fn new(bounds: Bounds) -> Caches {
        Caches {
            lexemes: Mutex::new(Cache::default()),
            measured: Mutex::new(MeasureMemo::default()),
            nfa: Mutex::new(thompson::Compiler::new()),
            bounds,
        }
    }

    /// Caches for one compile outside any engine (a standalone
    /// [`super::CompiledGrammar::new`]): the defaults' bounds.
    pub fn private() -> Caches {
        Caches::new(Bounds::default())
    }

    /// Lexemes kept and their DFA bytes. Cost: a lock and O(lexemes) for the bytes.
    pub fn usage(&self) -> (usize, usize) {
        let c = lock(&self.lexemes);
        let old: usize = c
            .old
            .values()
            .filter_map(|e| e.as_ref().ok())
            .map(|l| l.memory())
            .sum();
        (c.young.len() + c.old.len(), c.young_dfa_bytes + old)
    }

    /// Generations turned so far (each drops the lexemes not used during the last one).
    pub fn turns(&self) -> usize {
        lock(&self.lexemes).turns
    }

    /// Drops every cached lexeme and measure (grammars keep their own `Arc`s). Cost: the
    /// frees, on a helper thread.
    pub fn clear(&self) {
        let mut c = lock(&self.lexemes);
        let old = std::mem::take(&mut *c);
        c.turns = old.turns;
        drop(c);
        free_elsewhere(old);
        *lock(&self.measured) = MeasureMemo::default();
    }

    /// Builds (or fetches) the lexeme of `hir` under the given limits; `Err` when it is
    /// too big (also cached, so a hopeless build is attempted once) or `deadline` passed
    /// (not cached).
    pub fn cached(
        &self,
        key: &str,
        hir: &Hir,
        max_states: usize,
        max_bytes: usize,
        deadline: Option<std::time::Instant>,
    ) -> Result<Arc<Lexeme>, DfaError> {
        self.cached_with(format!("{max_states}/{max_bytes}/{key}").as_bytes(), || {
            Dfa::build_lexeme(self, hir, max_states, max_bytes, deadline)
        })
    }

    /// Fetches the lexeme cached under `full_key` (which must name everything the build
    /// depends on), or builds it with `build` and caches the result. Cost: a lock and a
    /// hash lookup on a hit.
    pub fn cached_with(
        &self,
        full_key: &[u8],
        build: impl FnOnce() -> Result<Dfa, DfaError>,
    ) -> Result<Arc<Lexeme>, DfaError> {
        if let Some(hit) = self.get(full_key) {
            return hit;
        }
        self.put(full_key, build())
    }

    /// The entry cached under `full_key`, if any. Cost: a lock and a hash lookup.
    pub fn get(&self, full_key: &[u8]) -> Option<Entry> {
        lock(&self.lexemes).get(full_key, &self.bounds)
    }

    /// Caches the result of a build under `full_key` and returns it (a deadline error is
    /// returned and not cached). Cost: a lock and a hash insert.
    pub fn put(
        &self,
        full_key: &[u8],
        built: Result<Dfa, DfaError>,
    ) -> Result<Arc<Lexeme>, DfaError> {
        if matches!(built, Err(DfaError::Deadline)) {
            return Err(DfaError::Deadline);
        }
        let built = built.map(Lexeme::new);
        lock(&self.lexemes).insert(full_key.into(), built.clone(), &self.bounds);
        built
    }

    /// Runs `f` with the shared NFA compiler, or a fresh one when another thread holds
    /// it. Cost: a try-lock.
    pub fn with_nfa_compiler<T>(&self, f: impl FnOnce(&mut thompson::Compiler) -> T) -> T {
        match self.nfa.try_lock() {
            Ok(mut c) => f(&mut c),
            Err(_) => f(&mut thompson::Compiler::new()),
        }
    }

    /// The measure of `keys` by `measure`, remembered by the key set: schemas repeat their
    /// key sets (`name`/`type`/`value` objects), within a schema and across schemas, and
    /// the walk of a set's trie was 5% of compile time on the MaskBench files that take
    /// 7-16 ms to compile. Memory: at most `key_sets` sets and [`MAX_MEASURED_CHARS`] key
    /// characters (then cleared whole). Cost: a hash of the keys and a lock; `measure` on
    /// a miss.
    pub fn measure_key_set(
        &self,
        keys: &[Vec<char>],
        measure: impl FnOnce(&[Vec<char>]) -> [usize; 4],
    ) -> [usize; 4] {
        if let Some(m) = lock(&self.measured).sets.get(keys) {
            return *m;
        }
        let m = measure(keys);
        let chars: usize = keys.iter().map(|k| k.len()).sum();
        if chars > MAX_MEASURED_CHARS / 16 {
            return m; // too big to keep: measured again when met again
        }
        let mut memo = lock(&self.measured);
        if memo.sets.len() >= self.bounds.key_sets || memo.chars + chars > MAX_MEASURED_CHARS {
            *memo = MeasureMemo::default();
        }
        if memo.sets.insert(keys.to_vec(), m).is_none() {
            memo.chars += chars;
        }
        m
    }
}

/// Key sets measured, with their total characters.
#[derive(Default)]
struct MeasureMemo {
    sets: HashMap<Vec<Vec<char>>, [usize; 4]>,
    chars: usize,
}

/// Key characters the measure memo may hold (4 bytes each: 16 MiB), so that a few
/// schemas with huge key sets cannot make it large.
const MAX_MEASURED_CHARS: usize = 1 << 22;

/// The lexeme cache, in two generations (a "second chance" eviction).
///
/// New entries go to `young`; a hit in `old` moves the entry to `young`. When `young`
/// reaches half of a bound (entries or DFA bytes), `old` is dropped and `young` becomes
/// `old`. A lexeme used at least once per generation (a JSON string, an integer,
/// whitespace) therefore stays, while one-off lexemes (a schema's own keys) age out
/// (docs/PERFORMANCE.md has the measurements that chose this over one map cleared whole).
/// Each generation holds at most half of the bounds, so both together stay within them.
#[derive(Default)]
struct Cache {
    young: HashMap<Box<[u8]>, Entry>,
    old: HashMap<Box<[u8]>, Entry>,
    /// DFA bytes of `young`'s lexemes.
    young_dfa_bytes: usize,
    /// Generations turned.
    turns: usize,
}

impl Cache {
    /// Whether `young` is full for an entry of `size` more DFA bytes.
    fn young_full(&self, size: usize, b: &Bounds) -> bool {
        self.young.len() >= b.lexemes / 2 || self.young_dfa_bytes + size > b.dfa_bytes / 2
    }

    /// Drops `old` (on a helper thread) and makes `young` the old generation.
    fn turn(&mut self) {
        free_elsewhere(std::mem::replace(
            &mut self.old,
            std::mem::take(&mut self.young),
        ));
        self.young_dfa_bytes = 0;
        self.turns += 1;
    }

    /// Adds `entry` to `young` (turning the generations first when it is full).
    fn insert(&mut self, key: Box<[u8]>, entry: Entry, b: &Bounds) {
        let size = entry.as_ref().map_or(0, |l| l.memory());
        if self.young_full(size, b) {
            self.turn();
        }
        if self.young.insert(key, entry).is_none() {
            self.young_dfa_bytes += size;
        }
    }

    /// The entry of `key`, moved to `young` when it was in `old`.
    fn get(&mut self, key: &[u8], b: &Bounds) -> Option<Entry> {
        if let Some(hit) = self.young.get(key) {
            return Some(hit.clone());
        }
        let (key, hit) = self.old.remove_entry(key)?;
        self.insert(key, hit.clone(), b);
        Some(hit)
    }
}

/// Locks `m`, going on after a panic elsewhere (every structure here stays consistent
/// between its statements).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops `old` (a cleared generation: thousands of lexemes) on a short-lived helper
/// thread, so that the compile that found the cache full does not wait for it: freeing
/// a full cache took 17-32 ms inside that compile, 13 times over the MaskBench run.
/// Lexemes still used by live grammars are only released here; their last user frees
/// them. When no thread can be started, `old` is dropped here. Cost: a thread start (tens
/// of µs).
pub(crate) fn free_elsewhere<T: Send + 'static>(old: T) {
    // On failure the closure, and `old` with it, is dropped right here.
    let _ = std::thread::Builder::new()
        .name("ruvllm-cache-free".into())
        .spawn(move || drop(old));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::test_hir as hir;

    fn small() -> Caches {
        Caches::new(Bounds {
            lexemes: 64,
            dfa_bytes: 256 << 20,
            key_sets: 16,
        })
    }

    /// A lexeme not used while `lexemes` others are inserted leaves the cache (after two
    /// generation turns; the old entries are freed on a helper thread): a lexeme held
    /// outside the cache stays whole and usable, and the cache goes on answering, with a
    /// fresh build for an evicted key.
    #[test]
    fn unused_lexemes_leave_the_cache_and_held_ones_stay_usable() {
        let c = small();
        let key = |i: usize| format!("cache-clear-test/{i}");
        let build = |i: usize| Dfa::build_until(&c, &hir(&format!("q{i}z")), 64, 1 << 20, None);
        let held = c.cached_with(key(0).as_bytes(), || build(0)).unwrap();
        for i in 1..=64 {
            c.cached_with(key(i).as_bytes(), || build(i)).unwrap();
        }
        let mut rebuilt = false;
        let again = c
            .cached_with(key(0).as_bytes(), || {
                rebuilt = true;
                build(0)
            })
            .unwrap();
        assert!(rebuilt, "key 0 survived 64 later insertions");
        assert!(!Arc::ptr_eq(&held, &again));
        assert!(c.usage().0 <= 64 && c.turns() >= 2);
        // The held lexeme still reads `q0z`.
        let mut s = held.start();
        for &b in b"q0z" {
            s = held.next(s, b);
            assert_ne!(s, 0);
        }
        assert!(held.accepting(s));
    }

    /// A lexeme used at least once per generation stays in the cache however many others
    /// pass through it: fetched between every 16 insertions of new keys, over three times
    /// the bound of them, it is built once and always the same `Arc`.
    #[test]
    fn lexemes_in_use_stay_in_the_cache() {
        let c = small();
        let key = |i: usize| format!("cache-keep-test/{i}");
        let build = |i: usize| Dfa::build_until(&c, &hir(&format!("k{i}y")), 64, 1 << 20, None);
        let first = c.cached_with(key(0).as_bytes(), || build(0)).unwrap();
        for i in 1..=3 * 64 {
            c.cached_with(key(i).as_bytes(), || build(i)).unwrap();
            if i % 16 == 0 {
                let got = c.cached_with(key(0).as_bytes(), || {
                    panic!("key 0 was evicted after {i} keys")
                });
                assert!(Arc::ptr_eq(&first, &got.unwrap()));
            }
        }
    }

    /// `clear` empties the cache; a lexeme held outside stays usable.
    #[test]
    fn clear_drops_every_lexeme() {
        let c = small();
        let held = c.cached("a+", &hir("a+"), 64, 1 << 20, None).unwrap();
        c.clear();
        assert_eq!(c.usage(), (0, 0));
        let again = c.cached("a+", &hir("a+"), 64, 1 << 20, None).unwrap();
        assert!(!Arc::ptr_eq(&held, &again));
        assert!(held.accepting(held.next(held.start(), b'a')));
    }
}
