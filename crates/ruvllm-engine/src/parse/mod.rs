//! What a parse is and what the parses of one constraint share, below the constraint
//! handle: the Earley recognizer over lexemes (`earley`), the identities of parse states
//! that key every per-state cache (`states`), and the facts proven about them
//! (`facts`: shortest completions, budget facts and their bounded caches, plain data).
//!
//! Owns: nothing of its own. Uses: `compile` (the compiled grammar), `grammar`, `tables`
//! (token sets that facts keep), `vocab`, `util`.

pub(crate) mod earley;
pub(crate) mod facts;
pub(crate) mod states;
