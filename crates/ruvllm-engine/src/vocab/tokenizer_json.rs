//! tokenizer.json (Hugging Face) loading.
//!
//! The JSON is read with `serde_json` to find how pieces map to bytes (byte-level BPE or
//! SentencePiece with `▁` and byte fallback) and which added tokens are special; the
//! `tokenizers` crate loads the same file as the encoder for forced tokens.
//!
//! Part of the vocabulary layer. Owns: nothing. Uses: `tokenizers` and `error`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{byte_level_chars, decode_byte_level, decode_sentencepiece, Vocabulary};
use crate::error::VocabError;

/// Special tokens that end a generation in the common model families.
pub(crate) const KNOWN_EOS: &[&str] = &[
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<|im_end|>",
    "</s>",
    "<eos>",
    "<end_of_turn>",
    "<|end\u{2581}of\u{2581}sentence|>",
    "<|end|>",
];

pub(crate) fn load_file(path: &Path) -> Result<Vocabulary, VocabError> {
    let io = |e| VocabError::Io {
        path: path.display().to_string(),
        source: e,
    };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let cfg = path.with_file_name("tokenizer_config.json");
    let eos_hint = std::fs::read_to_string(&cfg)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| match v.get("eos_token") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => o.get("content").and_then(|c| c.as_str()).map(String::from),
            _ => None,
        });
    let mut v = load_str(&text, eos_hint.as_deref())?;
    v.name = path
        .parent()
        .and_then(|p| p.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tokenizer".into());
    Ok(v)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Scheme {
    ByteLevel,
    SentencePiece { byte_fallback: bool },
}

fn detect_scheme(root: &Value) -> Scheme {
    let model_fallback = root
        .pointer("/model/byte_fallback")
        .and_then(|b| b.as_bool())
        .unwrap_or(false);
    let mut types = Vec::new();
    fn collect(v: &Value, out: &mut Vec<String>) {
        if let Some(t) = v.get("type").and_then(|t| t.as_str()) {
            out.push(t.to_string());
            if t == "Replace" {
                if let Some(p) = v.pointer("/pattern/String").and_then(|p| p.as_str()) {
                    if p == "\u{2581}" {
                        out.push("ReplaceMetaspace".into());
                    }
                }
            }
        }
        for key in ["decoders", "pretokenizers"] {
            if let Some(list) = v.get(key).and_then(|l| l.as_array()) {
                for d in list {
                    collect(d, out);
                }
            }
        }
    }
    if let Some(d) = root.get("decoder") {
        collect(d, &mut types);
    }
    if types.is_empty() {
        if let Some(p) = root.get("pre_tokenizer") {
            collect(p, &mut types);
        }
    }
    let has = |t: &str| types.iter().any(|x| x == t);
    if has("ByteLevel") {
        Scheme::ByteLevel
    } else {
        Scheme::SentencePiece {
            byte_fallback: model_fallback || has("ByteFallback"),
        }
    }
}

pub(crate) fn load_str(json: &str, eos_hint: Option<&str>) -> Result<Vocabulary, VocabError> {
    let root: Value =
        serde_json::from_str(json).map_err(|e| VocabError::TokenizerJson(e.to_string()))?;
    let scheme = detect_scheme(&root);
    let model_vocab = root
        .pointer("/model/vocab")
        .ok_or_else(|| VocabError::TokenizerJson("no model.vocab".into()))?;
    // (piece, id)
    let mut pieces: Vec<(String, u32)> = Vec::new();
    match model_vocab {
        Value::Object(map) => {
            for (k, v) in map {
                let id = v.as_u64().ok_or_else(|| {
                    VocabError::TokenizerJson(format!("non-integer id for {k:?}"))
                })?;
                pieces.push((k.clone(), id as u32));
            }
        }
        Value::Array(list) => {
            for (i, e) in list.iter().enumerate() {
                let p = e
                    .get(0)
                    .and_then(|p| p.as_str())
                    .ok_or_else(|| VocabError::TokenizerJson(format!("bad unigram entry {i}")))?;
                pieces.push((p.to_string(), i as u32));
            }
        }
        _ => {
            return Err(VocabError::TokenizerJson(
                "model.vocab is neither map nor list".into(),
            ))
        }
    }
    let mut added: Vec<(String, u32, bool)> = Vec::new();
    if let Some(list) = root.get("added_tokens").and_then(|a| a.as_array()) {
        for a in list {
            let id = a.get("id").and_then(|i| i.as_u64());
            let content = a.get("content").and_then(|c| c.as_str());
            let special = a.get("special").and_then(|s| s.as_bool()).unwrap_or(false);
            if let (Some(id), Some(c)) = (id, content) {
                added.push((c.to_string(), id as u32, special));
            }
        }
    }
    let max_id = pieces
        .iter()
        .map(|p| p.1)
        .chain(added.iter().map(|a| a.1))
        .max()
        .ok_or_else(|| VocabError::TokenizerJson("empty vocabulary".into()))?;
    if max_id > 16_000_000 {
        return Err(VocabError::TokenizerJson(format!(
            "token id {max_id} is implausibly large"
        )));
    }
    let n = max_id as usize + 1;
    let mut tokens = vec![Vec::new(); n];
    let mut special = vec![false; n];
    let inv: HashMap<char, u8> = byte_level_chars()
        .iter()
        .enumerate()
        .map(|(b, c)| (*c, b as u8))
        .collect();
    // The decoder runs over every non-special token, added ones included (Gemma's `▁▁`).
    let decode = |piece: &str| match scheme {
        Scheme::ByteLevel => {
            decode_byte_level(piece, &inv).unwrap_or_else(|| piece.as_bytes().to_vec())
        }
        Scheme::SentencePiece { byte_fallback } => decode_sentencepiece(piece, byte_fallback),
    };
    for (piece, id) in &pieces {
        tokens[*id as usize] = decode(piece);
    }
    for (content, id, sp) in &added {
        tokens[*id as usize] = if *sp {
            content.as_bytes().to_vec()
        } else {
            decode(content)
        };
        special[*id as usize] = *sp;
    }
    let mut eos: Vec<u32> = Vec::new();
    for (content, id, sp) in &added {
        if *sp && (Some(content.as_str()) == eos_hint || KNOWN_EOS.contains(&content.as_str())) {
            eos.push(*id);
        }
    }
    eos.sort_unstable();
    eos.dedup();
    let mut v = Vocabulary::new("tokenizer", tokens, special, eos)?;
    let mut enc_cfg = root;
    strip_dummy_prefix(&mut enc_cfg);
    if let Ok(t) = enc_cfg.to_string().parse::<tokenizers::Tokenizer>() {
        v = v.with_encoder(Arc::new(t));
    }
    Ok(v)
}

/// Turns a tokenizer config into a *continuation* encoder: SentencePiece models prepend `▁`
/// to the start of every text (the "dummy prefix"), which is right for a prompt but wrong
/// for text that continues an output. Removes `Prepend` normalizers and sets Metaspace's
/// `prepend_scheme` to `never`.
fn strip_dummy_prefix(cfg: &mut Value) {
    fn fix(v: &mut Value) {
        if let Some(list) = v.get_mut("normalizers").and_then(|l| l.as_array_mut()) {
            list.retain(|n| n.get("type").and_then(|t| t.as_str()) != Some("Prepend"));
            list.iter_mut().for_each(fix);
        }
        if let Some(list) = v.get_mut("pretokenizers").and_then(|l| l.as_array_mut()) {
            list.iter_mut().for_each(fix);
        }
        if v.get("type").and_then(|t| t.as_str()) == Some("Metaspace") {
            if let Some(o) = v.as_object_mut() {
                o.insert("prepend_scheme".into(), Value::String("never".into()));
                o.insert("add_prefix_space".into(), Value::Bool(false));
            }
        }
    }
    if let Some(n) = cfg.get_mut("normalizer") {
        if n.get("type").and_then(|t| t.as_str()) == Some("Prepend") {
            *n = Value::Null;
        } else {
            fix(n);
        }
    }
    if let Some(p) = cfg.get_mut("pre_tokenizer") {
        fix(p);
    }
}
