//! A compiled grammar bound to one vocabulary, with what its matchers share.
//!
//! The layer between the engine (caches per vocabulary) and the matchers (one generation
//! each): a [`Constraint`] is assembled here, by [`Engine::bind`] and
//! [`Engine::constraint`] (which live in this module, so that the engine names no
//! constraint), and handed to every matcher; the matcher, the boundary walk, completions
//! and budget masks read it and fill its caches.
//!
//! Owns: per lexeme, a handle to its token tables (kept in the engine's table store), and
//! per parse state, identities, boundary-walk results and budget facts. Uses: the
//! compiled grammar, the engine, the tables, the state caches (`states`), the budget
//! caches (`facts`).

use std::sync::Arc;

use crate::compile::CompiledGrammar;
use crate::error::GrammarError;
use crate::grammar::{Grammar, GrammarWarning};
use crate::handle::engine::Engine;
use crate::parse::facts::BudgetCache;
use crate::parse::states;
use crate::vocab::Vocabulary;
use crate::{tables, Limits};

/// A compiled grammar bound to a vocabulary: the unit a runtime caches per request shape.
/// Holds the lazily computed token tables; share it with `Arc` across matchers and threads.
pub struct Constraint {
    pub(crate) grammar: Arc<CompiledGrammar>,
    pub(crate) vocab: Arc<Vocabulary>,
    /// The engine whose table store holds the tables (and whose caches it shares).
    pub(crate) engine: Engine,
    /// Token tables per lexeme (shared with other constraints on the same lexeme, through
    /// the engine's table store).
    pub(crate) tables: Vec<Arc<tables::Tables>>,
    pub(crate) limits: Limits,
    /// Parse-state identities, shared by this constraint's matchers (see `states`).
    pub(crate) states: states::StateIds,
    /// Boundary-walk results per parse state (see `states`).
    pub(crate) walks: states::WalkCache,
    /// Budget facts per parse state and budget tables per lexeme state (see `budget`).
    pub(crate) budget: BudgetCache,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("vocab", &self.vocab)
            .field("grammar", &self.grammar.stats())
            .finish()
    }
}

impl Constraint {
    /// The warnings of the grammar it was compiled from ([`CompiledGrammar::warnings`]).
    /// Cost: O(1).
    pub fn warnings(&self) -> &[GrammarWarning] {
        self.grammar.warnings()
    }
}

impl Constraint {
    /// Compiles `g` and binds it to `vocab`, in an engine of its own: nothing is shared
    /// with other constraints. To share lexemes and token tables between constraints (a
    /// server's requests), create one [`Engine`] per vocabulary and use
    /// [`Engine::constraint`]. Cost: compilation; token tables are built on first use.
    pub fn new(
        g: &Grammar,
        vocab: Arc<Vocabulary>,
        limits: &Limits,
    ) -> Result<Arc<Constraint>, GrammarError> {
        Engine::new(vocab).constraint(g, limits)
    }

    /// Binds an already compiled grammar to `vocab`, in an engine of its own (see
    /// [`Constraint::new`]; [`Engine::bind`] shares). O(lexeme states).
    pub fn from_compiled(
        grammar: Arc<CompiledGrammar>,
        vocab: Arc<Vocabulary>,
        limits: &Limits,
    ) -> Arc<Constraint> {
        Engine::new(vocab).bind(grammar, limits)
    }

    /// See [`Engine::bind`].
    pub(crate) fn bind(
        grammar: Arc<CompiledGrammar>,
        engine: Engine,
        limits: &Limits,
    ) -> Arc<Constraint> {
        let store = &engine.shared.tables;
        let tables = grammar
            .lexemes
            .iter()
            .map(|l| store.tables_for(l))
            .collect();
        Arc::new(Constraint {
            grammar,
            vocab: engine.vocab().clone(),
            engine,
            tables,
            limits: limits.clone(),
            states: states::StateIds::default(),
            walks: states::WalkCache::default(),
            budget: BudgetCache::default(),
        })
    }

    /// Parses, compiles and binds a GBNF grammar.
    pub fn from_gbnf(
        text: &str,
        vocab: Arc<Vocabulary>,
        limits: &Limits,
    ) -> Result<Arc<Constraint>, GrammarError> {
        Self::new(&Grammar::from_gbnf(text, limits)?, vocab, limits)
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    /// The compiled grammar.
    pub fn grammar(&self) -> &Arc<CompiledGrammar> {
        &self.grammar
    }

    /// The engine whose caches it shares.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The table store its tables come from. Cost: O(1).
    pub(crate) fn store(&self) -> &tables::Store {
        &self.engine.shared.tables
    }

    /// Approximate heap bytes of what this constraint's matchers share besides token
    /// tables: parse-state identities and boundary-walk results (each bounded to a few
    /// MiB). Cost: two atomic loads.
    pub fn state_cache_bytes(&self) -> usize {
        self.states.memory() + self.walks.memory() + self.budget.memory()
    }

    /// Token tables built so far and their approximate heap bytes (tables shared with
    /// other constraints included).
    pub fn table_usage(&self) -> (usize, usize) {
        let mut seen: Vec<*const tables::Tables> = Vec::new();
        let (mut n, mut b) = (0, 0);
        for t in &self.tables {
            let p = Arc::as_ptr(t);
            if !seen.contains(&p) {
                seen.push(p);
                let (x, y) = t.usage();
                n += x;
                b += y;
            }
        }
        (n, b)
    }
}

/// The constraints an engine makes: the grammar bound here, so that the engine below
/// (its caches) names no constraint.
impl Engine {
    /// Binds a compiled grammar to this engine's vocabulary: its lexemes get their token
    /// tables from the table store (shared with every other grammar using the same
    /// lexemes; built on first use). Cost: a lookup per lexeme.
    pub fn bind(&self, grammar: Arc<CompiledGrammar>, limits: &Limits) -> Arc<Constraint> {
        Constraint::bind(grammar, self.clone(), limits)
    }

    /// [`Engine::compile`] then [`Engine::bind`].
    pub fn constraint(
        &self,
        g: &Grammar,
        limits: &Limits,
    ) -> Result<Arc<Constraint>, GrammarError> {
        Ok(self.bind(self.compile(g, limits)?, limits))
    }
}
