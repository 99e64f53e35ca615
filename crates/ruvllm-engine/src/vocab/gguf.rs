//! GGUF metadata reading: just the key/value header, for the tokenizer.
//!
//! The GGUF header is `magic "GGUF"`, a version (2 or 3), tensor and key counts, then typed
//! key/value pairs. We read the pairs with a buffered reader and stop before the tensor
//! table, so loading a vocabulary from a 100 MB model costs a few MB of reading. Every
//! length read from the file is checked against a limit before anything is allocated.
//!
//! Part of the vocabulary layer. Owns: `GgufVocab` (metadata). Uses: `error`.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use super::{byte_level_chars, decode_byte_level, decode_sentencepiece, Vocabulary};
use crate::error::VocabError;

const MAX_STRING: u64 = 64 << 20;
const MAX_ARRAY: u64 = 16 << 20;
const MAX_KEYS: u64 = 1 << 16;

/// A GGUF metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// Any integer type, widened.
    Int(i128),
    /// f32 or f64.
    Float(f64),
    /// bool.
    Bool(bool),
    /// A UTF-8 string (lossy).
    Str(String),
    /// An array.
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// The integer value, if any.
    pub fn as_int(&self) -> Option<i128> {
        match self {
            GgufValue::Int(i) => Some(*i),
            _ => None,
        }
    }
    /// The string value, if any.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The metadata of a GGUF file and the tokenizer it describes.
#[derive(Debug, Clone)]
pub struct GgufVocab {
    /// Every metadata key and value.
    pub metadata: HashMap<String, GgufValue>,
}

struct Rd<R: Read> {
    r: R,
    off: u64,
}

impl<R: Read> Rd<R> {
    fn err(&self, msg: impl Into<String>) -> VocabError {
        VocabError::Gguf {
            offset: self.off,
            msg: msg.into(),
        }
    }
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], VocabError> {
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|e| self.err(format!("truncated: {e}")))?;
        self.off += N as u64;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, VocabError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> Result<u64, VocabError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn string(&mut self) -> Result<String, VocabError> {
        let len = self.u64()?;
        if len > MAX_STRING {
            return Err(self.err(format!(
                "string of {len} bytes exceeds the {MAX_STRING} limit"
            )));
        }
        let mut buf = vec![0u8; len as usize];
        self.r
            .read_exact(&mut buf)
            .map_err(|e| self.err(format!("truncated string: {e}")))?;
        self.off += len;
        Ok(String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()))
    }
    fn value(&mut self, ty: u32, depth: u32) -> Result<GgufValue, VocabError> {
        Ok(match ty {
            0 => GgufValue::Int(self.bytes::<1>()?[0] as i128),
            1 => GgufValue::Int(self.bytes::<1>()?[0] as i8 as i128),
            2 => GgufValue::Int(u16::from_le_bytes(self.bytes()?) as i128),
            3 => GgufValue::Int(i16::from_le_bytes(self.bytes()?) as i128),
            4 => GgufValue::Int(self.u32()? as i128),
            5 => GgufValue::Int(i32::from_le_bytes(self.bytes()?) as i128),
            6 => GgufValue::Float(f32::from_le_bytes(self.bytes()?) as f64),
            7 => GgufValue::Bool(self.bytes::<1>()?[0] != 0),
            8 => GgufValue::Str(self.string()?),
            9 => {
                if depth > 2 {
                    return Err(self.err("arrays nested too deeply"));
                }
                let ety = self.u32()?;
                let n = self.u64()?;
                if n > MAX_ARRAY {
                    return Err(
                        self.err(format!("array of {n} items exceeds the {MAX_ARRAY} limit"))
                    );
                }
                let mut v = Vec::with_capacity(n.min(1 << 16) as usize);
                for _ in 0..n {
                    v.push(self.value(ety, depth + 1)?);
                }
                GgufValue::Array(v)
            }
            10 => GgufValue::Int(self.u64()? as i128),
            11 => GgufValue::Int(i64::from_le_bytes(self.bytes()?) as i128),
            12 => GgufValue::Float(f64::from_le_bytes(self.bytes()?)),
            t => return Err(self.err(format!("unknown value type {t}"))),
        })
    }
}

impl GgufVocab {
    /// Reads the metadata of a GGUF file.
    pub fn read_file(path: &Path) -> Result<Self, VocabError> {
        let f = std::fs::File::open(path).map_err(|e| VocabError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        Self::read(BufReader::with_capacity(1 << 20, f))
    }

    /// Reads GGUF metadata from any reader positioned at the start of the file.
    pub fn read(r: impl Read) -> Result<Self, VocabError> {
        let mut rd = Rd { r, off: 0 };
        let magic = rd.bytes::<4>()?;
        if &magic != b"GGUF" {
            return Err(rd.err("not a GGUF file (bad magic)"));
        }
        let version = rd.u32()?;
        if !(2..=3).contains(&version) {
            return Err(rd.err(format!("unsupported GGUF version {version}")));
        }
        let _tensors = rd.u64()?;
        let nkv = rd.u64()?;
        if nkv > MAX_KEYS {
            return Err(rd.err(format!("{nkv} metadata keys exceed the limit")));
        }
        let mut metadata = HashMap::new();
        for _ in 0..nkv {
            let key = rd.string()?;
            let ty = rd.u32()?;
            let v = rd.value(ty, 0)?;
            metadata.insert(key, v);
        }
        Ok(GgufVocab { metadata })
    }

    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    fn strings(&self, key: &str) -> Option<Vec<String>> {
        match self.get(key)? {
            GgufValue::Array(a) => a.iter().map(|v| v.as_str().map(String::from)).collect(),
            _ => None,
        }
    }

    /// The token strings (`tokenizer.ggml.tokens`).
    pub fn tokens(&self) -> Option<Vec<String>> {
        self.strings("tokenizer.ggml.tokens")
    }

    /// BPE merges (`tokenizer.ggml.merges`), when present.
    pub fn merges(&self) -> Option<Vec<String>> {
        self.strings("tokenizer.ggml.merges")
    }

    /// The tokenizer model name: `gpt2` (byte-level BPE) or `llama` (SentencePiece), etc.
    pub fn tokenizer_model(&self) -> Option<&str> {
        self.get("tokenizer.ggml.model")?.as_str()
    }

    /// The chat template, when the file has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.get("tokenizer.chat_template")?.as_str()
    }

    /// The ids that end a generation: `tokenizer.ggml.eos_token_id` plus the `eot`/`eom`
    /// ids when present, each checked against the vocabulary size `n`.
    pub fn eos_ids(&self, n: usize) -> Vec<u32> {
        let mut eos = Vec::new();
        for key in [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ] {
            if let Some(id) = self.get(key).and_then(|v| v.as_int()) {
                if id >= 0 && (id as usize) < n {
                    eos.push(id as u32);
                }
            }
        }
        eos.sort_unstable();
        eos.dedup();
        eos
    }

    /// A Hugging Face `tokenizer.json` equivalent to the GGUF tokenizer, so that prompts
    /// are encoded by the `tokenizers` crate exactly as llama.cpp encodes them.
    ///
    /// Byte-level BPE (`tokenizer.ggml.model = gpt2`) only: the vocabulary and merges are
    /// copied, control tokens become special added tokens, and the pre-tokenizer is chosen
    /// by `tokenizer.ggml.pre` (`gpt2`/`default`, `smollm`/`starcoder`, `llama-bpe`/`llama3`,
    /// `qwen2`, `deepseek-llm`-like ones are not guessed). Anything else is an error naming
    /// the key, never a tokenizer that silently splits text differently from the model's.
    /// Cost: O(vocabulary + merges).
    pub fn to_tokenizer_json(&self) -> Result<serde_json::Value, VocabError> {
        use serde_json::{json, Map, Value};
        let gerr = |m: String| VocabError::Gguf { offset: 0, msg: m };
        let model = self.tokenizer_model().unwrap_or("(missing)");
        if model != "gpt2" {
            return Err(gerr(format!(
                "tokenizer.ggml.model = {model:?}: only byte-level BPE (\"gpt2\") GGUF \
                 tokenizers are rebuilt; pass the model's tokenizer.json instead"
            )));
        }
        let toks = self
            .tokens()
            .ok_or_else(|| gerr("no tokenizer.ggml.tokens".into()))?;
        let merges = self.merges().unwrap_or_default();
        let types: Vec<i128> = match self.get("tokenizer.ggml.token_type") {
            Some(GgufValue::Array(a)) => a.iter().map(|v| v.as_int().unwrap_or(1)).collect(),
            _ => vec![1; toks.len()],
        };
        let pre = self
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let byte_level = |regex: bool| {
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                   "use_regex": regex})
        };
        let split = |pattern: &str| {
            json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
                   "invert": false})
        };
        const LLAMA3: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        const QWEN2: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        let pre_tokenizer = match pre {
            "default" | "gpt2" | "gpt-2" => byte_level(true),
            "smollm" | "starcoder" | "refact" => json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true}, byte_level(true)]}),
            "llama-bpe" | "llama3" | "llama-v3" => {
                json!({"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(false)]})
            }
            "qwen2" => {
                json!({"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(false)]})
            }
            other => {
                return Err(gerr(format!(
                    "tokenizer.ggml.pre = {other:?} is not a pre-tokenizer ruvllm knows; \
                     pass the model's tokenizer.json instead"
                )))
            }
        };
        let mut vocab = Map::new();
        let mut added = Vec::new();
        for (i, t) in toks.iter().enumerate() {
            vocab.insert(t.clone(), Value::from(i));
            let ty = types.get(i).copied().unwrap_or(1);
            if matches!(ty, 3 | 4) {
                added.push(
                    json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": ty == 4, "special": ty == 3}),
                );
            }
        }
        Ok(json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                        "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": null, "end_of_word_suffix": null,
                      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges}
        }))
    }

    /// The GGUF tokenizer as a `tokenizers::Tokenizer` (see [`Self::to_tokenizer_json`]).
    pub fn to_tokenizer(&self) -> Result<tokenizers::Tokenizer, VocabError> {
        let j = self.to_tokenizer_json()?;
        j.to_string()
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| VocabError::Gguf {
                offset: 0,
                msg: format!("rebuilt tokenizer does not load: {e}"),
            })
    }

    /// Decodes the tokenizer into a [`Vocabulary`]: control tokens are special; EOS is
    /// `tokenizer.ggml.eos_token_id` plus `eot`/`eom` ids when present. Byte-level BPE
    /// vocabularies get an encoder (for forced tokens) rebuilt with
    /// [`Self::to_tokenizer`].
    pub fn to_vocabulary(&self) -> Result<Vocabulary, VocabError> {
        let gerr = |m: &str| VocabError::Gguf {
            offset: 0,
            msg: m.to_string(),
        };
        let toks = self
            .tokens()
            .ok_or_else(|| gerr("no tokenizer.ggml.tokens"))?;
        let types: Vec<i128> = match self.get("tokenizer.ggml.token_type") {
            Some(GgufValue::Array(a)) => a.iter().map(|v| v.as_int().unwrap_or(1)).collect(),
            _ => vec![1; toks.len()],
        };
        let model = self.tokenizer_model().unwrap_or("llama");
        let inv: HashMap<char, u8> = byte_level_chars()
            .iter()
            .enumerate()
            .map(|(b, c)| (*c, b as u8))
            .collect();
        let mut tokens = Vec::with_capacity(toks.len());
        let mut special = Vec::with_capacity(toks.len());
        for (i, t) in toks.iter().enumerate() {
            let ty = types.get(i).copied().unwrap_or(1);
            // 3 = control, 5 = unused; 2 = unknown.
            let is_special = matches!(ty, 2 | 3 | 5);
            let bytes = if is_special || ty == 4 {
                t.as_bytes().to_vec()
            } else if model == "gpt2" {
                decode_byte_level(t, &inv).unwrap_or_else(|| t.as_bytes().to_vec())
            } else {
                decode_sentencepiece(t, true)
            };
            tokens.push(bytes);
            special.push(is_special);
        }
        let eos = self.eos_ids(tokens.len());
        let name = self
            .get("general.name")
            .and_then(|v| v.as_str())
            .unwrap_or("gguf")
            .to_string();
        let v = Vocabulary::new(name, tokens, special, eos)?;
        Ok(match self.to_tokenizer() {
            Ok(t) => v.with_encoder(Arc::new(t)),
            Err(_) => v,
        })
    }
}
