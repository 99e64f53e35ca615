//! The conversations of recent Responses API answers, kept in memory so that a later
//! request's `previous_response_id` can continue one; bounded by count and by bytes of
//! text, oldest out first.
//!
//! Owns: [`Store`], [`KEPT`], [`KEPT_BYTES`]. Uses: nothing of the crate.

use std::collections::VecDeque;
use std::sync::Mutex;

use ruvllm_runtime::Message;

/// How many responses `previous_response_id` can name (the most recent ones).
pub const KEPT: usize = 256;

/// The most text the kept conversations hold together (older ones go first).
pub const KEPT_BYTES: usize = 64 << 20;

/// The conversations of recent responses, by id: what a `previous_response_id` continues.
/// Bounded by [`KEPT`] conversations and [`KEPT_BYTES`] of text.
#[derive(Debug, Default)]
pub struct Store {
    kept: Mutex<VecDeque<(String, Vec<Message>)>>,
}

fn text_bytes(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| m.content.len() + m.tool_calls.as_ref().map_or(0, |c| c.to_string().len()))
        .sum()
}

impl Store {
    /// The conversation of response `id`, if still kept.
    pub(crate) fn get(&self, id: &str) -> Option<Vec<Message>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().find(|(k, _)| k == id).map(|(_, m)| m.clone())
    }

    /// Keeps the conversation of response `id`, dropping the oldest past the bounds.
    pub(crate) fn put(&self, id: String, messages: Vec<Message>) {
        let size = text_bytes(&messages);
        if size > KEPT_BYTES {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.push_back((id, messages));
        let mut total: usize = kept.iter().map(|(_, m)| text_bytes(m)).sum();
        while kept.len() > KEPT || total > KEPT_BYTES {
            match kept.pop_front() {
                Some((_, m)) => total -= text_bytes(&m),
                None => break,
            }
        }
    }
}
