//! One generation under a constraint: the walk past lexeme ends (`boundary`), the
//! [`Matcher`](crate::Matcher) (masks, commits, rollback, forced text), the shortest
//! completions (`complete`) and the budget masks (`budget`). Above the handles: a
//! matcher takes a [`Constraint`](crate::Constraint) and reads what it shares.
//!
//! Owns: the per-generation state. Uses: `handle` (the constraint), `parse` (the
//! Earley sets, state identities, facts), `tables`, `compile`, `deadline`.

pub(crate) mod boundary;
pub(crate) mod budget;
pub(crate) mod complete;
pub(crate) mod matcher;
