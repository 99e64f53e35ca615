//! llguidance (the crate of that name) bound to our vocabulary, for side-by-side runs.
//!
//! The token trie is built from the very bytes ruvllm decoded (special tokens marked with
//! toktrie's 0xFF prefix, so they never match text), so both engines see the same
//! vocabulary and the same token sequences.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use ruvllm_engine::Vocabulary;
use serde_json::Value;

use crate::maskbench::{EngineStats, FileCase};

struct Env {
    trie: TokTrie,
    encoder: Option<Arc<dyn ruvllm_engine::TokenEncoder>>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }
    /// llguidance needs the model's real (canonical) tokenization here, as its own
    /// environment gives it; greedy tokenization makes it refuse valid tokens.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match (&self.encoder, std::str::from_utf8(s)) {
            (Some(enc), Ok(text)) => enc
                .encode(text)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            _ => self.trie.greedy_tokenize(s),
        }
    }
}

/// A parser factory over `vocab` (built once per run: llguidance's vocabulary-level tables).
pub fn factory(vocab: &Vocabulary) -> Result<ParserFactory> {
    let words: Vec<Vec<u8>> = (0..vocab.len() as u32)
        .map(|i| {
            let b = vocab.token_bytes(i);
            if vocab.is_special(i) || b.is_empty() {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(
                    if b.is_empty() {
                        format!("<unused{i}>").into_bytes()
                    } else {
                        b.to_vec()
                    }
                    .as_slice(),
                );
                w
            } else {
                b.to_vec()
            }
        })
        .collect();
    let eos = vocab.eos_tokens().first().copied().unwrap_or(0);
    let info = TokRxInfo::new(vocab.len() as u32, eos);
    let env: TokEnv = Arc::new(Env {
        trie: TokTrie::from(&info, &words),
        encoder: vocab.encoder().cloned(),
    });
    ParserFactory::new_simple(&env)
}

/// Runs llguidance on one file: its default JSON options plus flexible whitespace (which
/// accepts the `", "` / `": "` serialization).
pub fn run(factory: &ParserFactory, case: &FileCase, st: &mut EngineStats) -> Result<()> {
    st.schemas += 1;
    let mut schema = case.schema.clone();
    if let Value::Object(o) = &mut schema {
        o.insert(
            "x-guidance".into(),
            serde_json::json!({"whitespace_flexible": true}),
        );
    } else if schema == Value::Bool(true) {
        schema = serde_json::json!({"x-guidance": {"whitespace_flexible": true}});
    }
    let t0 = Instant::now();
    let parser = factory.create_parser(TopLevelGrammar::from_json_schema(schema));
    let parser = match parser {
        Ok(p) => {
            st.ttfm.push(t0.elapsed().as_secs_f64() * 1e6);
            p
        }
        Err(e) => {
            st.compile_errors += 1;
            st.errors.push((case.name.clone(), e.to_string()));
            return Ok(());
        }
    };
    let base = Matcher::new(Ok(parser));
    let mut verdicts = Vec::new();
    for (_, _, ids) in &case.tests {
        let mut m = base.deep_clone();
        let mut ok = true;
        for &tok in ids {
            let t1 = Instant::now();
            let allowed = match m.compute_mask() {
                Ok(mask) => mask.is_allowed(tok) && m.consume_token(tok).is_ok(),
                Err(_) => false,
            };
            let us = t1.elapsed().as_secs_f64() * 1e6;
            st.push_tbm(us, crate::maskbench::stalled_us(us), &case.name);
            st.tokens += 1;
            if !allowed {
                ok = false;
                break;
            }
        }
        verdicts.push(ok && m.is_accepting().unwrap_or(false));
    }
    crate::maskbench::judge_pub(st, case, &verdicts);
    Ok(())
}
