//! Budget flags shared by every command that loads a model (`generate`, `serve`): the
//! engine's [`Limits`] on compiling and following a constraint, the constraint cache, the
//! engine's caches of lexemes and token tables ([`EngineConfig`]) and the prompt length. Each defaults to the engine's own default (read from
//! [`Limits::default`], so the two cannot drift); a request over one is refused with an
//! error naming the flag (the server's 400 says `server flag --max-...`).

use clap::Args;
use ruvllm_engine::{EngineConfig, Limits};

/// Budget flags.
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// Largest grammar, regex or JSON Schema source in bytes.
    #[arg(long, default_value_t = Limits::default().max_grammar_bytes)]
    pub max_grammar_bytes: usize,
    /// Deepest nesting of groups and repetitions in a grammar or regex.
    #[arg(long, default_value_t = Limits::default().max_nesting)]
    pub max_nesting: usize,
    /// Deepest nesting of sub-schemas in a JSON Schema.
    #[arg(long, default_value_t = Limits::default().max_schema_depth)]
    pub max_schema_depth: usize,
    /// Most rules in a grammar (source or compiled) or produced by a schema.
    #[arg(long, default_value_t = Limits::default().max_rules)]
    pub max_rules: usize,
    /// Most expression nodes in a grammar's source.
    #[arg(long, default_value_t = Limits::default().max_grammar_nodes)]
    pub max_grammar_nodes: usize,
    /// Largest repetition bound `{m,n}`.
    #[arg(long, default_value_t = Limits::default().max_repeat)]
    pub max_repeat: usize,
    /// Most grammar symbols after expanding repetitions.
    #[arg(long, default_value_t = Limits::default().max_compiled_symbols)]
    pub max_compiled_symbols: usize,
    /// Most DFA states of one lexeme before it is split into smaller ones.
    #[arg(long, default_value_t = Limits::default().max_lexeme_states)]
    pub max_lexeme_states: usize,
    /// Most DFA states built for one grammar (the regex DFA budget).
    #[arg(long, default_value_t = Limits::default().max_total_dfa_states)]
    pub max_total_dfa_states: usize,
    /// Bytes of construction memory for one lexeme's DFA.
    #[arg(long, default_value_t = Limits::default().max_dfa_bytes)]
    pub max_dfa_bytes: usize,
    /// Most distinct lexemes in one grammar.
    #[arg(long, default_value_t = Limits::default().max_lexemes)]
    pub max_lexemes: usize,
    /// Milliseconds to compile one grammar or schema.
    #[arg(long, default_value_t = Limits::default().max_compile_time.as_millis() as u64)]
    pub max_compile_time_ms: u64,
    /// Parser items in one decoding step (bounds the time of a mask).
    #[arg(long, default_value_t = Limits::default().max_parser_items)]
    pub max_parser_items: usize,
    /// Milliseconds for one token mask (bounds first-use token tables and the parser walk;
    /// over it, the request fails rather than get an approximate mask).
    #[arg(long, default_value_t = Limits::default().max_mask_time.as_millis() as u64)]
    pub max_mask_time_ms: u64,
    /// MiB of compiled constraints (token tables) cached for reuse.
    #[arg(long, default_value_t = ruvllm_runtime::backends::candle::DEFAULT_CONSTRAINT_CACHE_BYTES >> 20)]
    pub constraint_cache_mb: usize,
    /// MiB of token tables the engine keeps for reuse by later constraints (tables that
    /// live constraints use are theirs).
    #[arg(long, default_value_t = EngineConfig::default().max_table_bytes >> 20)]
    pub table_cache_mb: usize,
    /// MiB of lexeme DFAs the engine keeps for reuse by later compiles.
    #[arg(long, default_value_t = EngineConfig::default().max_cached_dfa_bytes >> 20)]
    pub lexeme_cache_mb: usize,
    /// Longest prompt in tokens (0: the model's context less one).
    #[arg(long, default_value_t = 0)]
    pub max_prompt_tokens: usize,
}

impl LimitArgs {
    /// The engine cache bounds these flags set.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            max_table_bytes: self.table_cache_mb << 20,
            max_cached_dfa_bytes: self.lexeme_cache_mb << 20,
            ..EngineConfig::default()
        }
    }

    /// The engine limits these flags set.
    pub fn limits(&self) -> Limits {
        Limits {
            max_grammar_bytes: self.max_grammar_bytes,
            max_nesting: self.max_nesting,
            max_schema_depth: self.max_schema_depth,
            max_rules: self.max_rules,
            max_grammar_nodes: self.max_grammar_nodes,
            max_repeat: self.max_repeat,
            max_compiled_symbols: self.max_compiled_symbols,
            max_lexeme_states: self.max_lexeme_states,
            max_total_dfa_states: self.max_total_dfa_states,
            max_dfa_bytes: self.max_dfa_bytes,
            max_lexemes: self.max_lexemes,
            max_compile_time: std::time::Duration::from_millis(self.max_compile_time_ms),
            max_parser_items: self.max_parser_items,
            max_mask_time: std::time::Duration::from_millis(self.max_mask_time_ms),
            ..Limits::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        l: LimitArgs,
    }

    #[test]
    fn flag_defaults_are_the_engine_defaults() {
        let got = format!("{:?}", T::parse_from(["t"]).l.limits());
        assert_eq!(got, format!("{:?}", Limits::default()));
        let got = format!("{:?}", T::parse_from(["t"]).l.engine());
        assert_eq!(got, format!("{:?}", EngineConfig::default()));
    }
}
