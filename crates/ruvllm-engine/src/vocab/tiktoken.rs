//! tiktoken rank files: one `base64(token bytes) rank` pair per line; the rank is the id.
//!
//! Part of the vocabulary layer. Owns: nothing. Uses: `error`.

use base64::Engine;

use super::Vocabulary;
use crate::error::VocabError;

pub(crate) fn load(
    text: &str,
    specials: &[(String, u32)],
    eos: &[u32],
) -> Result<Vocabulary, VocabError> {
    let mut entries: Vec<(Vec<u8>, u32)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let err = |msg: &str| VocabError::Tiktoken {
            line: i + 1,
            msg: msg.to_string(),
        };
        let mut parts = line.split_ascii_whitespace();
        let (Some(b64), Some(rank), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(err("expected `base64 rank`"));
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| err(&format!("bad base64: {e}")))?;
        let rank: u32 = rank.parse().map_err(|_| err("rank is not an integer"))?;
        if rank > 16_000_000 {
            return Err(err("rank is implausibly large"));
        }
        entries.push((bytes, rank));
    }
    let n = entries
        .iter()
        .map(|e| e.1)
        .chain(specials.iter().map(|s| s.1))
        .max()
        .map(|m| m as usize + 1)
        .ok_or_else(|| VocabError::Invalid("empty tiktoken file".into()))?;
    let mut tokens = vec![Vec::new(); n];
    let mut special = vec![false; n];
    for (bytes, rank) in entries {
        tokens[rank as usize] = bytes;
    }
    for (name, id) in specials {
        tokens[*id as usize] = name.as_bytes().to_vec();
        special[*id as usize] = true;
    }
    Vocabulary::new("tiktoken", tokens, special, eos.to_vec())
}
