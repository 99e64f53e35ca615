//! What shortest completions and budget masks keep between calls: plain data, so that
//! the matcher can hold it without depending on the code that computes it (`complete`,
//! `budget`, which extend the matcher).
//!
//! Owns: plain data (`Completion`, per-set facts). Uses: the distance arithmetic of
//! `compile::dist`.

use std::sync::OnceLock;

/// A way to finish the output: tokens that, committed one after the other, make it a
/// complete sentence (then only EOS is left), and their text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub(crate) tokens: Vec<u32>,
    pub(crate) text: Vec<u8>,
}

impl Completion {
    /// The tokens, in order (none when the output is complete already).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Their bytes, concatenated.
    pub fn text(&self) -> &[u8] {
        &self.text
    }

    /// How many tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the output is complete already.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The completion after its first token (`None` when empty).
    pub(crate) fn rest(&self, vocab: &crate::Vocabulary) -> Option<Completion> {
        let (&first, rest) = self.tokens.split_first()?;
        let cut = vocab.token_bytes(first).len().min(self.text.len());
        Some(Completion {
            tokens: rest.to_vec(),
            text: self.text[cut..].to_vec(),
        })
    }
}

/// A completion known at a matcher state: the state (committed tokens, output bytes)
/// and the completion.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) tokens: usize,
    pub(crate) bytes: usize,
    pub(crate) completion: Option<Completion>,
}

/// A token that crosses a lexeme boundary, with the distances after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaf {
    pub(crate) token: u32,
    /// Bytes of the shortest completion after it that runs no semantic check.
    pub(crate) unchecked: u32,
    /// Bytes of the shortest syntactic completion after it.
    pub(crate) any: u32,
}

/// The budget facts of one parse-state identity.
#[derive(Debug)]
pub(crate) struct StateBudget {
    /// The largest proven bound (bytes) over every token of the exact mask ([`crate::compile::dist::INF`] when
    /// some token has none).
    pub(crate) far: u32,
    /// The largest syntactic bound (bytes) over every token of the exact mask, semantic
    /// checks left aside: within it every token fits, tentatively.
    pub(crate) far_any: u32,
    /// Whether the boundary-crossing tokens were walked: `false` on a state's first
    /// visit far from the end of the budget, when `far` and `far_any` cover the tokens
    /// inside lexemes only, and the boundary-crossing ones are left to be confirmed.
    pub(crate) walked: bool,
    pub(crate) leaves: Vec<Leaf>,
    /// Per leaf: the tokens of the shortest unchecked completion after it, and of the
    /// shortest syntactic one (computed when a step first needs them).
    pub(crate) tokens: OnceLock<Vec<(u32, u32)>>,
}
