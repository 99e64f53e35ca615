//! Vocabularies: the raw bytes of every token, which tokens are special, which end a
//! generation, and the token trie that mask computation walks.
//!
//! # Design
//!
//! Grammars work on bytes, models on token ids. A [`Vocabulary`] is the bridge: it decodes
//! every token once, at load time, to the exact bytes it contributes to the output:
//!
//! * byte-level BPE (GPT-2, Llama 3, Qwen, DeepSeek, GPT-4o): each character of the token
//!   string stands for one byte through GPT-2's printable byte map;
//! * SentencePiece (Llama 2, Mistral, Gemma): `▁` is a space and `<0xHH>` byte-fallback tokens
//!   are the single byte `HH`, so a UTF-8 character may be split across several tokens;
//! * tiktoken rank files: the base64 text is the bytes.
//!
//! Special tokens (chat markers, BOS/EOS, padding) are kept apart: they never match grammar
//! text, and only the EOS ids are ever allowed, exactly when the output is complete.
//!
//! The [`TokenTrie`] is built once per vocabulary and shared by every grammar: a pre-order
//! array of nodes, one per distinct token prefix, so that a walk visits each shared prefix
//! once and a whole subtree is a contiguous index range (cheap to skip or to mark).
//!
//! Owns: `Vocabulary` (token bytes, specials, EOS, the trie, an optional encoder). Uses:
//! `byteset` and `error`; nothing of grammars.

mod gguf;
mod tiktoken;
mod tokenizer_json;
mod trie;
pub use trie::TokenTrie;
pub(crate) use trie::*;

use std::sync::Arc;

use crate::error::VocabError;

pub use gguf::{GgufValue, GgufVocab};

/// Something that turns text into token ids the way the model's tokenizer does.
/// Needed only for forced tokens (jump-forward); masks never encode.
pub trait TokenEncoder: Send + Sync {
    /// Canonical token ids of `text`, without special tokens.
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;
}

impl TokenEncoder for tokenizers::Tokenizer {
    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        (**self)
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }
}

/// A model vocabulary decoded to bytes. Built once per tokenizer (cost: O(total token bytes)
/// plus a sort), then shared behind an `Arc` by every grammar and matcher.
pub struct Vocabulary {
    tokens: Vec<Vec<u8>>,
    special: Vec<bool>,
    eos: Vec<u32>,
    trie: TokenTrie,
    encoder: Option<Arc<dyn TokenEncoder>>,
    name: String,
    /// The bytes that are an ordinary token alone (see [`Vocabulary::byte_tokens`]).
    byte_tokens: crate::byteset::ByteSet,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary")
            .field("name", &self.name)
            .field("size", &self.tokens.len())
            .field("eos", &self.eos)
            .finish()
    }
}

impl Vocabulary {
    /// Approximate heap bytes of the token bytes and the trie (the encoder's own tables,
    /// owned by the `tokenizers` crate, are not counted). Cost: O(V).
    pub fn memory(&self) -> usize {
        self.tokens.iter().map(|t| t.len() + 24).sum::<usize>()
            + self.special.len()
            + self.trie.memory()
    }

    /// Builds a vocabulary from decoded token bytes. `tokens[i]` are the bytes of token `i`;
    /// `special[i]` marks control tokens; `eos` lists the ids that end a generation.
    /// Cost: O(total bytes · log V) for the trie.
    pub fn new(
        name: impl Into<String>,
        tokens: Vec<Vec<u8>>,
        special: Vec<bool>,
        eos: Vec<u32>,
    ) -> Result<Self, VocabError> {
        if tokens.is_empty() {
            return Err(VocabError::Invalid("no tokens".into()));
        }
        if special.len() != tokens.len() {
            return Err(VocabError::Invalid(
                "special flags do not match tokens".into(),
            ));
        }
        if let Some(bad) = eos.iter().find(|&&e| e as usize >= tokens.len()) {
            return Err(VocabError::Invalid(format!(
                "EOS id {bad} is outside the vocabulary"
            )));
        }
        let trie = TokenTrie::build(&tokens, &special);
        let mut byte_tokens = crate::byteset::ByteSet::EMPTY;
        for b in 0..=255u8 {
            if trie
                .child(0, b)
                .is_some_and(|n| !trie.tokens_at(n).is_empty())
            {
                byte_tokens.insert(b);
            }
        }
        Ok(Vocabulary {
            byte_tokens,
            tokens,
            special,
            eos,
            trie,
            encoder: None,
            name: name.into(),
        })
    }

    /// Loads `tokenizer.json` (Hugging Face format). EOS ids come from a `tokenizer_config.json`
    /// beside it when present, else from the usual end-of-text special tokens.
    pub fn from_tokenizer_json_file(path: impl AsRef<std::path::Path>) -> Result<Self, VocabError> {
        tokenizer_json::load_file(path.as_ref())
    }

    /// Loads a vocabulary from the text of a `tokenizer.json`; `eos_hint` names the EOS token
    /// (as in `tokenizer_config.json`), if known.
    pub fn from_tokenizer_json(json: &str, eos_hint: Option<&str>) -> Result<Self, VocabError> {
        tokenizer_json::load_str(json, eos_hint)
    }

    /// Loads the tokenizer metadata (`tokenizer.ggml.*`) of a GGUF model file. Reads only the
    /// metadata header, never the tensors.
    pub fn from_gguf_file(path: impl AsRef<std::path::Path>) -> Result<Self, VocabError> {
        let g = GgufVocab::read_file(path.as_ref())?;
        g.to_vocabulary()
    }

    /// Loads a tiktoken rank file (`base64-token rank` per line). `specials` are extra
    /// (name, id) pairs such as `<|endoftext|>`; `eos` the ids that end a generation.
    pub fn from_tiktoken(
        text: &str,
        specials: &[(String, u32)],
        eos: &[u32],
    ) -> Result<Self, VocabError> {
        tiktoken::load(text, specials, eos)
    }

    /// Loads any supported file by its name: `*.gguf`, `*.tiktoken`, else tokenizer.json.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, VocabError> {
        let p = path.as_ref();
        let name = p.to_string_lossy();
        if name.ends_with(".gguf") {
            Self::from_gguf_file(p)
        } else if name.ends_with(".tiktoken") {
            let text = std::fs::read_to_string(p).map_err(|e| VocabError::Io {
                path: name.to_string(),
                source: e,
            })?;
            Self::from_tiktoken(&text, &[], &[])
        } else {
            Self::from_tokenizer_json_file(p)
        }
    }

    /// Attaches an encoder used for forced tokens.
    pub fn with_encoder(mut self, enc: Arc<dyn TokenEncoder>) -> Self {
        self.encoder = Some(enc);
        self
    }

    /// The same vocabulary with the special tokens whose text is one of `texts` made
    /// ordinary text tokens, so that grammars can write them (a tool-call marker such as
    /// Mistral's `[TOOL_CALLS]`, a control token its model was trained to emit). EOS ids
    /// and the encoder are kept. Returns `self` unchanged when no special token matches;
    /// otherwise rebuilds the trie, O(total bytes · log V).
    pub fn with_text_tokens(self, texts: &[&str]) -> Result<Vocabulary, VocabError> {
        let mut special = self.special.clone();
        let mut changed = false;
        for (i, t) in self.tokens.iter().enumerate() {
            if special[i] && texts.iter().any(|x| x.as_bytes() == t.as_slice()) {
                special[i] = false;
                changed = true;
            }
        }
        if !changed {
            return Ok(self);
        }
        let v = Vocabulary::new(self.name, self.tokens, special, self.eos)?;
        Ok(match self.encoder {
            Some(e) => v.with_encoder(e),
            None => v,
        })
    }

    /// The encoder, when the vocabulary came with one (tokenizer.json does).
    pub fn encoder(&self) -> Option<&Arc<dyn TokenEncoder>> {
        self.encoder.as_ref()
    }

    /// Number of token ids (the highest id + 1). The mask needs this many bits.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Always false: a vocabulary has at least one token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The bytes token `id` adds to the output (empty for unknown ids and some specials).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.tokens
            .get(id as usize)
            .map(|v| v.as_slice())
            .unwrap_or(&[])
    }

    /// Whether `id` is a special (control) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// The ids that end a generation.
    pub fn eos_tokens(&self) -> &[u32] {
        &self.eos
    }

    /// Replaces the EOS ids (e.g. from model metadata).
    pub fn set_eos_tokens(&mut self, eos: Vec<u32>) -> Result<(), VocabError> {
        if let Some(bad) = eos.iter().find(|&&e| e as usize >= self.tokens.len()) {
            return Err(VocabError::Invalid(format!(
                "EOS id {bad} is outside the vocabulary"
            )));
        }
        self.eos = eos;
        Ok(())
    }

    /// The token trie over the non-special tokens.
    pub fn trie(&self) -> &TokenTrie {
        &self.trie
    }

    /// A short name (file stem or model name) for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of `u32` words a mask for this vocabulary needs.
    pub fn mask_words(&self) -> usize {
        self.tokens.len().div_ceil(32)
    }

    /// Looks a token up by its exact bytes (first id with those bytes). O(len) through the trie.
    pub fn token_id(&self, bytes: &[u8]) -> Option<u32> {
        let n = self.trie.find(bytes)?;
        self.trie.tokens_at(n).first().copied()
    }

    /// The fewest ordinary tokens whose bytes, one after the other, are exactly `text`
    /// (any split, not only the tokenizer's own), and such tokens; `None` when no split
    /// exists (a byte no token starts with). This is how many tokens a model needs, at
    /// the least, to write `text` when nothing stops it from choosing any token.
    /// Cost: O(len · longest token) trie steps and O(len) memory.
    pub fn fewest_tokens(&self, text: &[u8]) -> Option<Vec<u32>> {
        let n = text.len();
        // best[i]: fewest tokens for text[..i], and the token ending there.
        let mut best: Vec<(u32, u32)> = vec![(u32::MAX, 0); n + 1];
        best[0] = (0, 0);
        let trie = &self.trie;
        for i in 0..n {
            let here = best[i].0;
            if here == u32::MAX {
                continue;
            }
            let mut node = 0u32;
            for (d, &b) in text[i..].iter().enumerate() {
                match trie.child(node, b) {
                    Some(c) => node = c,
                    None => break,
                }
                if let Some(&t) = trie.tokens_at(node).first() {
                    let j = i + d + 1;
                    if here + 1 < best[j].0 {
                        best[j] = (here + 1, t);
                    }
                }
            }
        }
        if best[n].0 == u32::MAX {
            return None;
        }
        let mut out = vec![0u32; best[n].0 as usize];
        let mut j = n;
        for slot in out.iter_mut().rev() {
            let t = best[j].1;
            *slot = t;
            j -= self.tokens[t as usize].len();
        }
        Some(out)
    }

    /// [`Vocabulary::fewest_tokens`]' count only. Same cost.
    pub fn fewest_token_count(&self, text: &[u8]) -> Option<usize> {
        self.fewest_tokens(text).map(|t| t.len())
    }

    /// The byte values that are an ordinary token of their own (all of them in most
    /// byte-level BPE and byte-fallback vocabularies; SmolLM2's lacks some control
    /// characters and bytes UTF-8 never uses). A text made of these bytes never needs more
    /// tokens than it has bytes. Cost: O(1) (found when the vocabulary is built).
    pub fn byte_tokens(&self) -> &crate::byteset::ByteSet {
        &self.byte_tokens
    }

    /// Token ids of a special token by its text.
    pub fn special_id(&self, text: &str) -> Option<u32> {
        (0..self.tokens.len())
            .find(|&i| self.special[i] && self.tokens[i] == text.as_bytes())
            .map(|i| i as u32)
    }
}

/// GPT-2's byte-to-printable-character map (byte-level BPE). `BYTE_LEVEL[b]` is the char
/// that stands for byte `b`.
pub fn byte_level_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            let c = char::from_u32(256 + n).unwrap();
            n += 1;
            c
        };
    }
    out
}

/// Inverse of [`byte_level_chars`]: decodes a byte-level token string to bytes, or `None`
/// when a character is outside the map.
pub fn decode_byte_level(s: &str, inv: &std::collections::HashMap<char, u8>) -> Option<Vec<u8>> {
    s.chars().map(|c| inv.get(&c).copied()).collect()
}

/// Decodes a SentencePiece piece: `▁` is a space, `<0xHH>` is one byte when `byte_fallback`.
pub fn decode_sentencepiece(piece: &str, byte_fallback: bool) -> Vec<u8> {
    if byte_fallback && piece.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        if let Ok(b) = u8::from_str_radix(&piece[3..5], 16) {
            return vec![b];
        }
    }
    piece.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node sets are stored once each, in order of first appearance, and past the cap
    /// a value reads as every group (a superset, never a subset).
    #[test]
    fn below_sets_are_indexed_and_capped() {
        let (ix, sets) = index_sets(&[0, 5, 0, 9, 5, 12, 7], 3);
        assert_eq!(sets, vec![0, 5, 9]);
        assert_eq!(ix, vec![0, 1, 0, 2, 1, BELOW_ANY, BELOW_ANY]);
        let (ix, sets) = index_sets(&[3, 3, 4], usize::MAX);
        assert_eq!((ix, sets), (vec![0, 0, 1], vec![3, 4]));
        // The trie reads a capped node as every group.
        let tokens: Vec<Vec<u8>> = ["ab", "ac", "b"]
            .iter()
            .map(|t| t.as_bytes().to_vec())
            .collect();
        let mut trie = TokenTrie::build(&tokens, &[false; 3]);
        trie.below_ix[0] = BELOW_ANY;
        assert_eq!(trie.below(0), u128::MAX);
        assert_eq!(trie.below(1), byte_group(b'b') | byte_group(b'c'));
    }

    /// Each node knows the groups of the characters below it, read as UTF-8 from the
    /// node on: a character split over several nodes counts at its first node's parent
    /// and above, a path that starts inside a character, a token that ends inside one
    /// and bytes UTF-8 never uses are irregular, and ASCII adds no group. Letters,
    /// numbers and punctuation never share a group.
    #[test]
    fn characters_below_are_grouped_by_category() {
        let tokens: Vec<Vec<u8>> = vec![
            "aé".into(),
            "a".into(),
            "é".into(),
            "日本".into(),
            "b".into(),
            b"b\xe6\x97".to_vec(),
            "c5".into(),
            "c١".into(),
            "d—".into(),
            b"e\xff".to_vec(),
            b"\x97".to_vec(),
        ];
        let trie = TokenTrie::build(&tokens, &[false; 11]);
        let node = |t: &str| trie.find(t.as_bytes()).unwrap();
        let group = |ch: char| {
            (0..64)
                .find(|&g| trie.group_chars(g).contains(&ch))
                .unwrap_or_else(|| panic!("{ch} has no group"))
        };
        let (e, ri, ben, arabic_one, dash) =
            (group('é'), group('日'), group('本'), group('١'), group('—'));
        // Few characters: each letter has a group of its own; the digit and the dash
        // are never with a letter.
        for g in [arabic_one, dash] {
            assert!(![e, ri, ben].contains(&g));
        }
        assert_ne!(dash, arabic_one);
        assert_eq!(trie.chars_below(node("a")), 1 << e);
        assert_eq!(trie.chars_below(node("aé")), 0);
        // "é" (two bytes): the first byte's node holds nothing whole below it.
        assert_eq!(
            trie.chars_below(trie.find(b"\xc3").unwrap()),
            CHARS_IRREGULAR
        );
        assert_eq!(trie.chars_below(node("日")), 1 << ben);
        assert_eq!(
            trie.chars_below(node("b")),
            CHARS_IRREGULAR,
            "a token ends inside a character"
        );
        assert_eq!(trie.chars_below(node("c")), 1 << arabic_one);
        assert_eq!(trie.chars_below(node("d")), 1 << dash);
        assert_eq!(trie.chars_below(node("e")), CHARS_IRREGULAR);
        assert_ne!(trie.chars_below(0) & CHARS_IRREGULAR, 0);
        let all = (1 << e) | (1 << ri) | (1 << ben) | (1 << arabic_one) | (1 << dash);
        assert_eq!(trie.chars_below(0) & !CHARS_IRREGULAR, all);
        // A capped node reads as every group and irregular.
        let mut capped = trie.clone();
        capped.chars_ix[1] = BELOW_ANY;
        assert_eq!(capped.chars_below(1), u64::MAX);
    }
}
