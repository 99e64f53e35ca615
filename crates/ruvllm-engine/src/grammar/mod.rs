//! Grammar front ends and the intermediate representation they share.
//!
//! Every front end (GBNF text, a regex, a list of choices, a built-in format) produces the
//! same [`Grammar`]: named rules whose bodies are [`Expr`] trees over Unicode code points
//! (and, for byte-mode regexes, raw bytes). The compiler (the `compile` module) lowers that IR
//! into lexeme DFAs plus an Earley grammar. Keeping one IR means one place for the analyses
//! that make masks exact (unproductive rules are removed, so every parser item can complete)
//! and one place for the limits that keep hostile grammars bounded.
//!
//! Owns: nothing beyond its children (the IR, the front ends, the GBNF printer, the JSON
//! string encodings, free text that avoids some words). Uses: `error` and `util`; no layer
//! above it.

pub(crate) mod anchors;
mod builtin;
mod gbnf;
mod ir;
pub(crate) mod json_string;
mod print;
mod regex;
mod tail;
pub mod text;

pub use builtin::Builtin;
pub(crate) use ir::visit_refs as visit_refs_pub;
pub use ir::{
    Check, Expr, Grammar, GrammarWarning, InnerFix, KeyComplement, Rule, RuleId, ValueCheck,
};

use crate::Limits;

impl Grammar {
    /// Parses GBNF text (llama.cpp's format). Errors carry line and column.
    /// Cost: linear in the text.
    pub fn from_gbnf(text: &str, limits: &Limits) -> Result<Grammar, crate::error::GrammarError> {
        gbnf::parse(text, limits)
    }

    /// A grammar whose sentences are exactly the strings that fully match `pattern`
    /// (Rust/ECMAScript common syntax; `^`/`$` anywhere, with their meaning in a whole-string
    /// match: see the `anchors` module). Cost: linear in the pattern, more where anchors
    /// stand inside groups (bounded by [`Limits::max_grammar_nodes`]).
    pub fn from_regex(
        pattern: &str,
        limits: &Limits,
    ) -> Result<Grammar, crate::error::GrammarError> {
        regex::parse(pattern, limits)
    }

    /// A grammar whose sentences are exactly the given strings.
    pub fn from_choices<S: AsRef<str>>(
        choices: &[S],
    ) -> Result<Grammar, crate::error::GrammarError> {
        if choices.is_empty() {
            return Err(crate::error::GrammarError::Invalid(
                "a choice list needs at least one option".into(),
            ));
        }
        let alts = choices
            .iter()
            .map(|c| Expr::Literal(c.as_ref().as_bytes().to_vec()))
            .collect();
        Ok(Grammar::single("root", Expr::Alt(alts)))
    }

    /// A built-in format (JSON, JSON object, JSONL, CSV, XML).
    pub fn builtin(which: Builtin, limits: &Limits) -> Result<Grammar, crate::error::GrammarError> {
        builtin::grammar(which, limits)
    }
}
