//! The half of a local backend that does not depend on how the logits are computed:
//! the tokenizer and vocabulary rebuilt from the GGUF metadata, the engine every
//! constraint shares, the chat template and what it implies (reasoning markers, the
//! tool-call format), the compiled-constraint cache and the prompt limits. The candle
//! and llama.cpp backends each own one [`Front`] and differ only in their model and KV
//! memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ruvllm_engine::vocab::GgufVocab;
use ruvllm_engine::{Constraint, Engine, EngineConfig, Limits, Vocabulary};
use serde_json::Value;

use crate::api::{GenerateParams, OutputConstraint, Prompt};
use crate::call_format::CallFormat;
use crate::chat::{ChatTemplate, Message};
use crate::error::{Result, RuntimeError};
use crate::model::{LoadOptions, ModelConfig};
use crate::reasoning::ReasoningMarkers;
use crate::tools::{inject_tools, Tool};

/// How to load a local backend ([`crate::CandleBackend`], [`crate::LlamaBackend`]).
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    /// Weight loading options.
    pub load: LoadOptions,
    /// A `tokenizer.json` to use instead of the tokenizer rebuilt from the GGUF metadata.
    pub tokenizer: Option<PathBuf>,
    /// Engine limits for the constraints this backend compiles.
    pub limits: Option<Limits>,
    /// Bytes of prompt KV caches kept for reuse by later prompts with the same prefix
    /// (`None`: 256 MiB; `Some(0)`: off).
    pub prefix_cache_bytes: Option<usize>,
    /// Bytes of compiled constraints (with their token tables) kept for reuse by later
    /// requests with the same constraint (`None`: 256 MiB). Least recently used first out.
    pub constraint_cache_bytes: Option<usize>,
    /// Bounds of the engine's caches of lexemes and token tables, shared by every
    /// constraint this backend compiles (`None`: [`EngineConfig::default`]).
    pub engine: Option<EngineConfig>,
    /// Longest prompt in tokens (`None`: the model's context less one position). A longer
    /// one is refused with [`crate::RuntimeError::PromptTooLong`].
    pub max_prompt_tokens: Option<usize>,
    /// A Jinja chat template to use instead of the model file's (`None`: the file's,
    /// else ChatML).
    pub chat_template: Option<String>,
}

/// Compiled constraints kept for reuse, least recently used evicted first, bounded by
/// entries and by the bytes of their token tables (which grow as masks are computed, so
/// the bound is enforced at each insertion over the tables' current sizes). Keyed by a
/// 128-bit hash of the constraint ([`OutputConstraint`]'s `Hash`: its values, not a text
/// written of them) under two random keys of this cache, so that no request can aim at
/// another's entry.
#[derive(Default)]
struct ConstraintCache {
    entries: HashMap<u128, (Arc<Constraint>, u64)>,
    max_bytes: usize,
    tick: u64,
    keys: (std::hash::RandomState, std::hash::RandomState),
}

impl ConstraintCache {
    /// The key of `c`. Cost: one hash pass over its values (twice).
    fn key(&self, c: &OutputConstraint) -> u128 {
        use std::hash::BuildHasher;
        (self.keys.0.hash_one(c) as u128) << 64 | self.keys.1.hash_one(c) as u128
    }

    fn get(&mut self, key: u128) -> Option<Arc<Constraint>> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(&key).map(|e| {
            e.1 = tick;
            e.0.clone()
        })
    }

    /// Entries and bytes of their token tables now.
    fn usage(&self) -> (usize, usize) {
        let bytes = self.entries.values().map(|e| e.0.table_usage().1).sum();
        (self.entries.len(), bytes)
    }

    fn insert(&mut self, key: u128, c: Arc<Constraint>) {
        self.tick += 1;
        self.entries.insert(key, (c, self.tick));
        loop {
            let (n, bytes) = self.usage();
            if n <= 1 || (n <= MAX_CACHED_CONSTRAINTS && bytes <= self.max_bytes) {
                break;
            }
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.1)
                .map(|(k, _)| *k);
            match oldest {
                Some(k) => self.entries.remove(&k),
                None => break,
            };
        }
    }
}

/// How a front turns prompt text into token ids.
pub(crate) enum PromptTokenizer {
    /// Hugging Face `tokenizers`: a `tokenizer.json`, or the GGUF's byte-level BPE
    /// rebuilt.
    Hf(Box<tokenizers::Tokenizer>),
    /// llama.cpp's own tokenizer, for the kinds `tokenizers` cannot be rebuilt from GGUF
    /// metadata.
    Llama(Arc<ruvllm_llama::Model>),
}

impl PromptTokenizer {
    /// Ids of `text`, texts of special tokens read as those tokens, nothing added.
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            PromptTokenizer::Hf(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| RuntimeError::Tokenizer(e.to_string())),
            PromptTokenizer::Llama(m) => m
                .tokenize(text, false, true)
                .map_err(|e| RuntimeError::Tokenizer(e.to_string())),
        }
    }

    /// The text of token `id` as the chat template writes it.
    fn token_text(&self, id: u32) -> Option<String> {
        match self {
            PromptTokenizer::Hf(t) => t.id_to_token(id),
            PromptTokenizer::Llama(m) => m
                .piece(id, true)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
        }
    }
}

/// llama.cpp's tokenizer as the engine's encoder of forced text (a continuation: no
/// special tokens, none added). The engine keeps an encoding only when its tokens spell
/// the text exactly.
struct LlamaEncoder(Arc<ruvllm_llama::Model>);

impl ruvllm_engine::vocab::TokenEncoder for LlamaEncoder {
    fn encode(&self, text: &str) -> std::result::Result<Vec<u32>, String> {
        self.0
            .tokenize(text, false, false)
            .map_err(|e| e.to_string())
    }
}

/// Most compiled constraints cached per backend.
const MAX_CACHED_CONSTRAINTS: usize = 64;

/// Bytes of compiled constraints kept when [`BackendOptions::constraint_cache_bytes`] is
/// `None`.
pub const DEFAULT_CONSTRAINT_CACHE_BYTES: usize = 256 << 20;

/// What a local backend knows of its model besides the weights (see the module docs).
pub(crate) struct Front {
    pub(crate) tokenizer: PromptTokenizer,
    /// The engine of the model's vocabulary: every constraint is compiled and bound in
    /// it, so they share lexemes and token tables.
    pub(crate) engine: Engine,
    pub(crate) template: ChatTemplate,
    /// The template's reasoning section, when it has one.
    pub(crate) reasoning: Option<ReasoningMarkers>,
    /// The tool-call syntax of the template's family.
    pub(crate) call_format: CallFormat,
    pub(crate) bos: Option<u32>,
    pub(crate) add_bos: bool,
    pub(crate) eos: Vec<u32>,
    pub(crate) name: String,
    pub(crate) limits: Limits,
    pub(crate) max_prompt_tokens: usize,
    /// The longest token's byte length (a prompt of n bytes has at least n / this tokens).
    pub(crate) max_token_bytes: usize,
    /// The model's shape (for the APIs' model descriptions).
    pub(crate) config: ModelConfig,
    /// Special and end-of-generation tokens: what `ignore_eos` forbids.
    pub(crate) special_or_eos: Vec<u32>,
    constraints: Mutex<ConstraintCache>,
}

impl Front {
    /// Builds the front of the model whose GGUF metadata is `gv` (the file at `path`),
    /// with `config` its shape (its `context_length` the context the backend runs).
    /// Cost: rebuilding the tokenizer and vocabulary from the metadata (about half a
    /// second for a 128k vocabulary).
    ///
    /// `llama`, the model loaded in llama.cpp when there is one, tokenizes where the GGUF's
    /// tokenizer cannot be rebuilt as a `tokenizers` one (SentencePiece, WordPiece,
    /// Unigram): prompts, and the forced text of jump-forward.
    pub(crate) fn new(
        path: &Path,
        gv: &GgufVocab,
        config: ModelConfig,
        opts: &BackendOptions,
        llama: Option<&Arc<ruvllm_llama::Model>>,
    ) -> Result<Front> {
        let (tokenizer, mut vocab) = match &opts.tokenizer {
            Some(tp) => {
                let text = std::fs::read_to_string(tp).map_err(|e| RuntimeError::Io {
                    path: tp.display().to_string(),
                    source: e,
                })?;
                let t: tokenizers::Tokenizer = text
                    .parse()
                    .map_err(|e| RuntimeError::Tokenizer(format!("{}: {e}", tp.display())))?;
                (
                    PromptTokenizer::Hf(Box::new(t)),
                    Vocabulary::from_tokenizer_json(&text, None)?,
                )
            }
            None => match (gv.to_tokenizer(), llama) {
                (Ok(t), _) => (PromptTokenizer::Hf(Box::new(t)), gv.to_vocabulary()?),
                (Err(_), Some(m)) => (
                    PromptTokenizer::Llama(m.clone()),
                    gv.to_vocabulary()?
                        .with_encoder(Arc::new(LlamaEncoder(m.clone()))),
                ),
                (Err(e), None) => return Err(e.into()),
            },
        };
        let mut eos = gv.eos_ids(vocab.len());
        if let Some(m) = llama {
            // Every control token llama.cpp counts as an end of generation (end of turn,
            // end of message...), not only the metadata's EOS id. Not ordinary text tokens
            // it also counts (Gemma's `</s>` is text in its vocabulary): an EOS id must
            // never be a token the grammar can write.
            let n = vocab.len().min(m.n_vocab()) as u32;
            let eog: Vec<u32> = (0..n)
                .filter(|&t| m.is_eog(t) && vocab.is_special(t) && !eos.contains(&t))
                .collect();
            eos.extend(eog);
        }
        if !eos.is_empty() {
            vocab.set_eos_tokens(eos.clone())?;
        }
        let eos = vocab.eos_tokens().to_vec();
        let token_text = |id: Option<u32>| -> String {
            id.and_then(|i| tokenizer.token_text(i)).unwrap_or_default()
        };
        let int = |k: &str| gv.get(k).and_then(|v| v.as_int());
        let bos = int("tokenizer.ggml.bos_token_id").map(|x| x as u32);
        let add_bos = matches!(
            gv.get("tokenizer.ggml.add_bos_token"),
            Some(ruvllm_engine::vocab::GgufValue::Bool(true))
        );
        let template_src = match &opts.chat_template {
            Some(t) => t.clone(),
            None => gv
                .chat_template()
                .unwrap_or(crate::chat::default_template(&config.family))
                .to_string(),
        };
        let reasoning = ReasoningMarkers::detect(&template_src);
        let call_format = CallFormat::detect(&template_src);
        // The format's markers must be writable by the grammar, as the single tokens the
        // model was trained on where the tokenizer has them as control tokens.
        let vocab = vocab.with_text_tokens(call_format.marker_texts())?;
        let template = ChatTemplate::new(
            &template_src,
            &token_text(bos),
            &token_text(eos.first().copied()),
        )?;
        let ctx = config.context_length;
        // Over every token, special ones included (the rendered template writes them as
        // text), so not the trie's depth, which counts ordinary tokens only.
        let max_token_bytes = (0..vocab.len() as u32)
            .map(|t| vocab.token_bytes(t).len())
            .max()
            .unwrap_or(1);
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        let special_or_eos = (0..vocab.len() as u32)
            .filter(|&t| vocab.is_special(t) || eos.contains(&t))
            .collect();
        Ok(Front {
            special_or_eos,
            tokenizer,
            engine: Engine::with_config(Arc::new(vocab), opts.engine.clone().unwrap_or_default()),
            template,
            reasoning,
            call_format,
            bos,
            add_bos,
            eos,
            name,
            limits: opts.limits.clone().unwrap_or_default(),
            max_prompt_tokens: opts
                .max_prompt_tokens
                .unwrap_or(usize::MAX)
                .min(ctx.saturating_sub(1)),
            max_token_bytes,
            config,
            constraints: Mutex::new(ConstraintCache {
                max_bytes: opts
                    .constraint_cache_bytes
                    .unwrap_or(DEFAULT_CONSTRAINT_CACHE_BYTES),
                ..Default::default()
            }),
        })
    }

    /// The prompt as text, with reasoning on or off (`think`; `None`: the template's
    /// default) where the template has a reasoning section: on, the prompt ends inside it;
    /// off, after an empty one (see [`crate::reasoning`]). Cost: rendering the template.
    pub(crate) fn render_with(&self, prompt: &Prompt, think: Option<bool>) -> Result<String> {
        let t = &self.template;
        let mut text = match prompt {
            Prompt::Raw(t) => return Ok(t.clone()),
            Prompt::User(u) => t.render_with(&[Message::user(u.clone())], None, true, think)?,
            Prompt::Chat { messages, tools } => match tools {
                Some(list) if !t.supports_tools() => {
                    let parsed = list
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(Tool::from_openai)
                        .collect::<Result<Vec<_>>>()?;
                    t.render_with(&inject_tools(messages, &parsed), None, true, think)?
                }
                _ => t.render_with(&arguments_as_objects(messages), tools.as_ref(), true, think)?,
            },
        };
        if let Some(m) = &self.reasoning {
            m.finish_prompt(&mut text, think != Some(false));
        }
        Ok(text)
    }

    /// The reasoning markers a generation of `prompt` under `params` uses: the template's,
    /// for chat prompts, unless `params.thinking` turns reasoning off. Its output then
    /// begins inside the reasoning section. Cost: O(1).
    pub(crate) fn reasoning_for(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
    ) -> Option<&ReasoningMarkers> {
        match prompt {
            Prompt::Raw(_) => None,
            _ if params.thinking.enabled == Some(false) => None,
            _ => self.reasoning.as_ref(),
        }
    }

    /// Encodes prompt text to ids (special-token markers in the text become their ids; BOS
    /// is prepended when the model wants it).
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.tokenizer.encode(text)?;
        if let (true, Some(b)) = (self.add_bos, self.bos) {
            if ids.first() != Some(&b) {
                ids.insert(0, b);
            }
        }
        Ok(ids)
    }

    /// Compiles (or fetches from the cache) the engine constraint for `c`; `None` when `c`
    /// constrains nothing (tools with `tool_choice: none` and no text format).
    pub(crate) fn constraint(&self, c: &OutputConstraint) -> Result<Option<Arc<Constraint>>> {
        let key = {
            let mut cache = self.constraints.lock().unwrap_or_else(|e| e.into_inner());
            let key = cache.key(c);
            if let Some(hit) = cache.get(key) {
                return Ok(Some(hit));
            }
            key
        };
        let limits = &self.limits;
        let Some(g) = c.grammar(limits)? else {
            return Ok(None);
        };
        let cons = self.engine.constraint(&g, limits)?;
        let mut cache = self.constraints.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(key, cons.clone());
        Ok(Some(cons))
    }

    /// Compiled constraints cached now and the bytes of their token tables. Cost: one
    /// pass over the cache.
    pub(crate) fn constraint_cache_usage(&self) -> (usize, usize) {
        self.constraints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .usage()
    }
}

/// Messages for a template that renders tool calls itself: each call's `arguments`, a
/// JSON string on the wire, becomes the object templates expect (`arguments | tojson`
/// in Qwen's, Llama's and Mistral's templates; Hugging Face's convention). Arguments that
/// are not JSON stay strings. Cost: parsing each call's arguments.
fn arguments_as_objects(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(Value::Array(calls)) = &mut m.tool_calls {
                for c in calls.iter_mut() {
                    if let Some(a) = c.pointer_mut("/function/arguments") {
                        if let Some(v) = a.as_str().and_then(|s| serde_json::from_str(s).ok()) {
                            *a = v;
                        }
                    }
                }
            }
            m
        })
        .collect()
}

/// Implements [`crate::backend::ModelBackend`] for a backend type that has a
/// `fn front(&self) -> &Front` (every method reads the front).
macro_rules! model_backend_via_front {
    ($t:ty) => {
        impl $crate::backend::ModelBackend for $t {
            fn name(&self) -> &str {
                &self.front().name
            }
            fn model_config(&self) -> &$crate::model::ModelConfig {
                &self.front().config
            }
            fn vocab(&self) -> &std::sync::Arc<ruvllm_engine::Vocabulary> {
                self.front().engine.vocab()
            }
            fn engine(&self) -> &ruvllm_engine::Engine {
                &self.front().engine
            }
            fn chat_template(&self) -> &str {
                self.front().template.source()
            }
            fn render_with(
                &self,
                prompt: &$crate::api::Prompt,
                think: Option<bool>,
            ) -> $crate::error::Result<String> {
                self.front().render_with(prompt, think)
            }
            fn call_format(&self) -> $crate::call_format::CallFormat {
                self.front().call_format
            }
            fn reasoning_for(
                &self,
                prompt: &$crate::api::Prompt,
                params: &$crate::api::GenerateParams,
            ) -> Option<&$crate::reasoning::ReasoningMarkers> {
                self.front().reasoning_for(prompt, params)
            }
            fn encode(&self, text: &str) -> $crate::error::Result<Vec<u32>> {
                self.front().encode(text)
            }
            fn constraint(
                &self,
                c: &$crate::api::OutputConstraint,
            ) -> $crate::error::Result<Option<std::sync::Arc<ruvllm_engine::Constraint>>> {
                self.front().constraint(c)
            }
            fn limits(&self) -> &ruvllm_engine::Limits {
                &self.front().limits
            }
            fn constraint_cache_usage(&self) -> (usize, usize) {
                self.front().constraint_cache_usage()
            }
        }
    };
}
pub(crate) use model_backend_via_front;
