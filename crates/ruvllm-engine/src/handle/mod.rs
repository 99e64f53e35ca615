//! The two handles a caller holds: the [`Engine`](crate::Engine) (one per vocabulary:
//! the caches every constraint shares, bounded) and the [`Constraint`](crate::Constraint)
//! (a compiled grammar bound in an engine, with what all its matchers share: state
//! identities, walk results, budget caches from `parse`).
//!
//! Owns: `engine`, `constraint`. Uses: `compile`, `tables`, `parse`, `grammar`, `vocab`.

pub(crate) mod constraint;
pub(crate) mod engine;
