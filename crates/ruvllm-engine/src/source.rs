//! A constraint as its user writes it, whatever the input: the one place where each kind
//! of source becomes a [`Grammar`].
//!
//! Every surface reads its own spelling of a constraint (the CLI's flags, the server's
//! fields in each dialect, the Python package's and the C ABI's arguments) into a
//! [`Source`] and calls [`Source::to_grammar`] with the [`Limits`] it runs under; the
//! runtime wraps a source with what only it knows (tool calls, a reasoning section, fixed
//! text around the answer). A new input format (Lark, TypeScript interfaces) is a new
//! variant here, and every surface that reads it gets it compiled the same way.
//!
//! Owns: [`Source`], [`SourceError`]. Uses: `grammar` (the front ends of GBNF, regexes,
//! choices and built-ins), `schema` (the JSON Schema compiler).

use serde_json::Value;
use thiserror::Error;

use crate::error::GrammarError;
use crate::grammar::{Builtin, Grammar};
use crate::schema::{schema_to_grammar_limited, SchemaError, SchemaOptions};
use crate::Limits;

/// What a constraint is written in.
#[derive(Debug, Clone)]
pub enum Source {
    /// A JSON Schema (any draft the schema compiler reads), compiled with these options.
    JsonSchema(Value, SchemaOptions),
    /// A GBNF grammar (llama.cpp's format).
    Gbnf(String),
    /// A regular expression the whole output must match.
    Regex(String),
    /// The output is exactly one of these strings.
    Choices(Vec<String>),
    /// A built-in grammar ([`Builtin`]: JSON, JSON Lines, CSV, XML).
    Builtin(Builtin),
}

/// Why a source has no grammar: the schema compiler's error or a grammar front end's,
/// each with its pointer or position.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SourceError {
    /// The JSON Schema cannot be compiled.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The grammar, regex or choice list cannot be read.
    #[error(transparent)]
    Grammar(#[from] GrammarError),
}

impl Source {
    /// The source's grammar. Cost: one front-end pass, bounded by `limits` (source size,
    /// nesting, rules, repetitions, compile time), linear in the source for GBNF, regexes
    /// and choices.
    pub fn to_grammar(&self, limits: &Limits) -> Result<Grammar, SourceError> {
        Ok(match self {
            Source::JsonSchema(schema, options) => {
                schema_to_grammar_limited(schema, options, limits)?
            }
            Source::Gbnf(text) => Grammar::from_gbnf(text, limits)?,
            Source::Regex(pattern) => Grammar::from_regex(pattern, limits)?,
            Source::Choices(list) => Grammar::from_choices(list)?,
            Source::Builtin(b) => Grammar::builtin(b.clone(), limits)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each kind compiles to the language its front end gives, and errors keep their kind.
    #[test]
    fn each_kind_reaches_its_front_end() {
        let limits = Limits::default();
        let kinds = [
            Source::JsonSchema(json!({"enum": ["a"]}), SchemaOptions::generation()),
            Source::Gbnf("root ::= \"a\"".into()),
            Source::Regex("a".into()),
            Source::Choices(vec!["a".into()]),
        ];
        for s in &kinds {
            let g = s.to_grammar(&limits).unwrap();
            assert!(!g.rules.is_empty(), "{s:?}");
        }
        assert!(Source::Builtin(Builtin::Json).to_grammar(&limits).is_ok());
        assert!(matches!(
            Source::Gbnf("root ::= (".into()).to_grammar(&limits),
            Err(SourceError::Grammar(_))
        ));
        assert!(matches!(
            Source::JsonSchema(json!({"type": 5}), SchemaOptions::default()).to_grammar(&limits),
            Err(SourceError::Schema(_))
        ));
    }
}
