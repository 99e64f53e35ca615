//! The engine handle: every cache that the constraints of one vocabulary share, owned by
//! the caller.
//!
//! Compiling a grammar and computing its first masks are mostly work that other grammars
//! have done already: the lexeme of a JSON string, of an integer, of whitespace, and the
//! token tables of their states. An [`Engine`] keeps that work for one vocabulary:
//!
//! * the **compile caches**: built lexeme DFAs by regex (or structural key) and limits,
//!   and key-set measures, vocabulary-independent (see `compile::cache`);
//! * the **table store**: per lexeme, the token tables of its states for this vocabulary,
//!   and the registries from which a new table is shared or derived instead of walked
//!   (see `tables::store`).
//!
//! Nothing lives in process statics: two engines share nothing, tests do not see each
//! other's caches, and dropping an engine (and the constraints made from it) frees it
//! all. The caller sets the bounds ([`EngineConfig`]) and may [`Engine::clear`] at any
//! time.
//!
//! # Threads
//!
//! An `Engine` is a cheap handle (`Clone` shares the same caches) and is `Send + Sync`.
//! Shared between threads: the compile caches, the table store, and through each
//! [`Constraint`](crate::handle::constraint::Constraint) its token tables, parse-state identities and walk results (all behind
//! short locks or `OnceLock`s; a table is computed once, by whichever thread first needs
//! it, while others needing the same table wait for it). Per generation and never
//! shared: a [`crate::Matcher`] (Earley sets, scratch buffers); clone it to fork.
//!
//! # Bounds
//!
//! Both caches are generational: what was not used during the last generation is dropped
//! when the current one fills half of a bound, so what the engine itself keeps stays
//! within the bounds. A constraint keeps the tables it uses for as long as it lives,
//! whatever the engine drops meanwhile (that memory is the constraint's, see
//! [`Constraint::table_usage`](crate::handle::constraint::Constraint::table_usage)).

use std::sync::Arc;

use crate::compile::cache::{self, Caches};
use crate::compile::CompiledGrammar;
use crate::error::GrammarError;
use crate::grammar::Grammar;
use crate::tables::{self, Store};
use crate::vocab::Vocabulary;
use crate::Limits;

/// Bounds of an [`Engine`]'s caches. The defaults suit a server that compiles thousands
/// of distinct schemas with one vocabulary: a few hundred MiB at most.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Lexeme DFAs kept by the compile cache (default 8,192).
    pub max_cached_lexemes: usize,
    /// Bytes of the DFAs the compile cache keeps (default 256 MiB; one DFA can reach
    /// `Limits::max_lexeme_states` x 1 KiB, so a count alone does not bound it).
    pub max_cached_dfa_bytes: usize,
    /// Lexemes whose token tables the table store keeps (default 8,192).
    pub max_table_lexemes: usize,
    /// Bytes of token tables (and the search memos kept with them) the table store keeps
    /// (default 256 MiB).
    pub max_table_bytes: usize,
    /// Key sets whose measures the compile cache keeps (default 16,384).
    pub max_key_sets: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        let compile = cache::Bounds::default();
        EngineConfig {
            max_cached_lexemes: compile.lexemes,
            max_cached_dfa_bytes: compile.dfa_bytes,
            max_table_lexemes: 8192,
            max_table_bytes: 256 << 20,
            max_key_sets: compile.key_sets,
        }
    }
}

impl EngineConfig {
    /// The compile caches' part of the bounds.
    pub(crate) fn compile_bounds(&self) -> cache::Bounds {
        cache::Bounds {
            lexemes: self.max_cached_lexemes.max(2),
            dfa_bytes: self.max_cached_dfa_bytes,
            key_sets: self.max_key_sets,
        }
    }

    /// The table store's part of the bounds.
    fn table_bounds(&self) -> tables::Bounds {
        tables::Bounds {
            lexemes: self.max_table_lexemes.max(2),
            bytes: self.max_table_bytes,
        }
    }
}

/// What an engine's caches hold (see [`Engine::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Lexeme DFAs in the compile cache.
    pub lexemes: usize,
    /// Their bytes.
    pub dfa_bytes: usize,
    /// Lexemes whose token tables the table store keeps.
    pub table_lexemes: usize,
    /// Bytes of those token tables and their memos.
    pub table_bytes: usize,
    /// Generations the compile cache has turned (each drops the lexemes not used during
    /// the one before).
    pub lexeme_turns: usize,
    /// Generations the table store has turned.
    pub table_turns: usize,
}

/// The caches of one vocabulary's constraints (see the module docs). Create one per
/// vocabulary and share it (it is a handle: clones share the caches).
#[derive(Clone)]
pub struct Engine {
    pub(crate) shared: Arc<Shared>,
}

/// What an [`Engine`] handle points to.
pub(crate) struct Shared {
    vocab: Arc<Vocabulary>,
    config: EngineConfig,
    compile: Caches,
    pub(crate) tables: Store,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("vocab", &self.shared.vocab)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl Engine {
    /// An engine for `vocab` with the default bounds. Cost: O(1); nothing is built
    /// until grammars are compiled and masks computed.
    pub fn new(vocab: Arc<Vocabulary>) -> Engine {
        Self::with_config(vocab, EngineConfig::default())
    }

    /// An engine for `vocab` with the given bounds. Cost: O(1).
    pub fn with_config(vocab: Arc<Vocabulary>, config: EngineConfig) -> Engine {
        let depth = vocab.trie().max_depth();
        Engine {
            shared: Arc::new(Shared {
                tables: Store::new(depth, config.table_bounds()),
                compile: Caches::new(config.compile_bounds()),
                vocab,
                config,
            }),
        }
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        &self.shared.vocab
    }

    /// The bounds it was created with.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Compiles `g` with this engine's lexeme cache: lexemes other grammars built are
    /// looked up, new ones added. The result depends on no vocabulary; bind it with
    /// [`Engine::bind`] (here or in another engine). Cost: as
    /// [`CompiledGrammar::new`], less the lexemes found cached.
    pub fn compile(
        &self,
        g: &Grammar,
        limits: &Limits,
    ) -> Result<Arc<CompiledGrammar>, GrammarError> {
        CompiledGrammar::compile_in(g, limits, &self.shared.compile).map(Arc::new)
    }

    /// Drops everything the caches keep. Live constraints and grammars keep what they
    /// use; the next compiles and first masks build again. Cost: the frees, on helper
    /// threads.
    pub fn clear(&self) {
        self.shared.compile.clear();
        self.shared.tables.clear();
    }

    /// What the caches hold now. Cost: O(kept lexemes and their states), a few ms for
    /// thousands of lexemes: for monitoring, not for every request.
    pub fn usage(&self) -> CacheUsage {
        let (lexemes, dfa_bytes) = self.shared.compile.usage();
        CacheUsage {
            lexemes,
            dfa_bytes,
            table_lexemes: self.shared.tables.lexemes(),
            table_bytes: self.shared.tables.memory(),
            lexeme_turns: self.shared.compile.turns(),
            table_turns: self.shared.tables.turns(),
        }
    }

    /// Token tables computed so far by this engine (tables found equal to an existing
    /// one and shared are not counted) and the time spent in first uses of lexeme
    /// states, sharing checks included: the part of mask time that a warm matcher no
    /// longer pays. Cost: two atomic loads.
    pub fn table_build_totals(&self) -> (usize, std::time::Duration) {
        self.shared.tables.build_totals()
    }

    /// Switches on (or off) the check of every token table a first use computes or
    /// shares against the table by definition: a pass over the whole trie with a DFA
    /// step per live node and none of the walk's shortcuts (sharing, derivation from
    /// another table, plain-text proofs, bounds). A diagnostic: each first use then also
    /// pays that pass (about a millisecond with a 128k vocabulary), which is not counted
    /// in [`Engine::table_build_totals`]. Masks stay exact either way; the results are
    /// read with [`Engine::table_checks`].
    pub fn verify_tables(&self, on: bool) {
        self.shared.tables.set_verify(on)
    }

    /// Tables checked since [`Engine::verify_tables`] was switched on, how many of them
    /// differed from the table by definition, and a description of the first few that
    /// did (the lexeme and its state). Cost: two atomic loads and a copy of at most 16
    /// strings.
    pub fn table_checks(&self) -> (usize, usize, Vec<String>) {
        self.shared.tables.checks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    /// The handle, what it shares and what it makes can cross threads.
    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<Engine>();
        assert_send_sync::<crate::handle::constraint::Constraint>();
        assert_send_sync::<CompiledGrammar>();
        assert_send_sync::<crate::matching::matcher::Matcher>();
    }
}
