//! Lexeme automata, one unit: a [`dfa::Dfa`] is one flat table, a counted lexeme
//! ([`counted`]) or a literal chain in front of a cached lexeme, and a [`dfa::Lexeme`]
//! wraps a DFA with what is computed from it alone (distances to the end, [`dist`]; a
//! name; a key complement's base). The three modules refer to each other because the
//! types do (a counted lexeme and a chain hold lexemes); nothing here builds automata
//! from regexes (`super::build`, `super::compose`) or knows of caches, vocabularies or
//! token tables.

pub(crate) mod counted;
pub(crate) mod dfa;
pub(crate) mod dist;
