//! Reasoning models: a free reasoning section, then the constrained answer, in one pass.
//!
//! # The design
//!
//! A chat template with a reasoning section (Qwen3, DeepSeek-R1, QwQ and the like write
//! `<think>` ... `</think>` before the answer) gets one grammar for the whole output:
//!
//! ```text
//! root ::= reasoning "</think>" "\n\n" answer
//! reasoning ::= text that never contains "</think>"   (ruvllm_engine::grammar::text::text_without)
//! ```
//!
//! where `answer` is the request's constraint (a schema, GBNF, regex, choice list or the
//! tool-call grammar). The reasoning is therefore unconstrained but for one thing: its
//! first end marker ends it, and from there on the constraint holds. There is no second
//! request (Ollama), no refusal of raw grammars (llama.cpp), and no reasoning parser to
//! configure (vLLM, SGLang): the same grammar machinery does it for every constraint.
//!
//! Two budgets bound the reasoning:
//!
//! * **`max_tokens`** covers both parts. Budget-aware decoding (issue 8) already knows the
//!   shortest completion from inside the reasoning is the end marker plus the answer's
//!   shortest completion, so it closes the reasoning in time for a complete answer.
//! * **A reasoning budget** ([`Thinking::budget`]): once the reasoning has used that many
//!   tokens, the runtime forces the end marker's tokens (they ride along with the next
//!   forward pass, like jump-forward text).
//!
//! The prompt ends inside the reasoning: when the rendered prompt does not already end
//! with the start marker (templates differ), it is appended. Reasoning turned off renders
//! the template with `enable_thinking = false` and, when the template does not close the
//! section itself, appends an empty one (`<think>\n\n</think>\n\n`), as Qwen3's template
//! does.
//!
//! # Limits
//!
//! Markers must be text the vocabulary can spell (true of `<think>` in every family we
//! know, where it is an ordinary added token). GPT-OSS's harmony `analysis` channel uses
//! control tokens and is not handled here.

use serde::{Deserialize, Serialize};

/// The markers around a reasoning section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasoningMarkers {
    /// Opens the section (`<think>`).
    pub start: String,
    /// Closes it (`</think>`).
    pub end: String,
}

/// What follows the end marker before the answer when the answer is constrained (the
/// blank line Qwen3 and DeepSeek-R1 write).
pub const SEPARATOR: &str = "\n\n";

impl ReasoningMarkers {
    /// The `<think>` markers.
    pub fn think() -> ReasoningMarkers {
        ReasoningMarkers {
            start: "<think>".into(),
            end: "</think>".into(),
        }
    }

    /// The markers a chat template's source uses, when it has a reasoning section (it
    /// writes both `<think>` and `</think>`). Cost: two substring searches.
    pub fn detect(template: &str) -> Option<ReasoningMarkers> {
        (template.contains("<think>") && template.contains("</think>"))
            .then(ReasoningMarkers::think)
    }

    /// Makes a rendered prompt end inside the reasoning section (`on`) or after an empty
    /// one (`!on`), unless the template already did. Cost: linear in the prompt's tail.
    pub fn finish_prompt(&self, prompt: &mut String, on: bool) {
        let tail = prompt.trim_end();
        if on {
            if !tail.ends_with(&self.start) {
                prompt.push_str(&self.start);
                prompt.push('\n');
            }
        } else if !tail.ends_with(&self.end) {
            prompt.push_str(&format!("{}\n\n{}{SEPARATOR}", self.start, self.end));
        }
    }

    /// Splits a whole output that began inside the reasoning: the reasoning (up to the
    /// first end marker, trimmed) and the answer after it (leading whitespace removed).
    /// Without an end marker everything is reasoning. Cost: one search.
    pub fn split<'a>(&self, text: &'a str) -> (&'a str, &'a str) {
        match text.find(&self.end) {
            Some(i) => (text[..i].trim(), text[i + self.end.len()..].trim_start()),
            None => (text.trim(), ""),
        }
    }
}

/// Reasoning settings of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thinking {
    /// `Some(false)` turns reasoning off; `None` and `Some(true)` leave it on wherever
    /// the chat template has a reasoning section.
    pub enabled: Option<bool>,
    /// Most reasoning tokens before the end marker is forced (`None`: only `max_tokens`
    /// bounds it).
    pub budget: Option<usize>,
}

/// One piece of a streamed output split by [`ReasoningSplitter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Reasoning text.
    Reasoning(String),
    /// Answer text.
    Content(String),
}

/// Splits a streamed output that begins inside the reasoning into reasoning and answer,
/// incrementally: text that may be the start of the end marker is held back until it is
/// known not to be. The whitespace right after the marker is dropped. Cost: linear.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    end: String,
    buf: String,
    done: bool,
    leading: bool,
    started: bool,
}

impl ReasoningSplitter {
    /// A splitter at the start of the output.
    pub fn new(markers: &ReasoningMarkers) -> ReasoningSplitter {
        ReasoningSplitter {
            end: markers.end.clone(),
            buf: String::new(),
            done: false,
            leading: true,
            started: false,
        }
    }

    /// Whether the end marker has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds a chunk; returns the pieces it completes.
    pub fn push(&mut self, chunk: &str) -> Vec<Part> {
        let mut out = Vec::new();
        if self.done {
            self.content(chunk, &mut out);
            return out;
        }
        self.buf.push_str(chunk);
        if let Some(i) = self.buf.find(&self.end) {
            let before = self.buf[..i].to_string();
            let after = self.buf[i + self.end.len()..].to_string();
            self.buf.clear();
            self.reasoning(&before, &mut out, true);
            self.done = true;
            self.content(&after, &mut out);
            return out;
        }
        // Hold back a tail that may begin the marker.
        let hold = (1..self.end.len())
            .rev()
            .find(|&k| self.end.is_char_boundary(k) && self.buf.ends_with(&self.end[..k]))
            .unwrap_or(0);
        let cut = self.buf.len() - hold;
        let text: String = self.buf.drain(..cut).collect();
        self.reasoning(&text, &mut out, false);
        out
    }

    /// Ends the output: held-back text is reasoning.
    pub fn finish(&mut self) -> Vec<Part> {
        let mut out = Vec::new();
        if !self.done {
            let rest = std::mem::take(&mut self.buf);
            self.reasoning(&rest, &mut out, true);
        }
        out
    }

    fn reasoning(&mut self, s: &str, out: &mut Vec<Part>, last: bool) {
        // The reasoning is reported trimmed, as [`ReasoningMarkers::split`] does: leading
        // whitespace is dropped here, trailing whitespace held until more text follows.
        let mut s = s;
        if !self.started {
            s = s.trim_start();
            if s.is_empty() {
                return;
            }
            self.started = true;
        }
        let body = if last { s.trim_end() } else { s };
        if !body.is_empty() {
            out.push(Part::Reasoning(body.to_string()));
        }
    }

    fn content(&mut self, s: &str, out: &mut Vec<Part>) {
        let s = if self.leading { s.trim_start() } else { s };
        if !s.is_empty() {
            self.leading = false;
            out.push(Part::Content(s.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rebuild(chunks: &[&str]) -> (String, String) {
        let m = ReasoningMarkers::think();
        let mut s = ReasoningSplitter::new(&m);
        let (mut r, mut c) = (String::new(), String::new());
        let mut parts: Vec<Part> = chunks.iter().flat_map(|ch| s.push(ch)).collect();
        parts.extend(s.finish());
        for p in parts {
            match p {
                Part::Reasoning(t) => r.push_str(&t),
                Part::Content(t) => c.push_str(&t),
            }
        }
        (r, c)
    }

    #[test]
    fn streamed_split_equals_whole_split_at_every_cut() {
        let m = ReasoningMarkers::think();
        let text = "\nLet me see. a</b </thin <x>\n</think>\n\n{\"a\": 1}</think>";
        let (wr, wc) = m.split(text);
        for i in 0..text.len() {
            for j in i..text.len() {
                if !(text.is_char_boundary(i) && text.is_char_boundary(j)) {
                    continue;
                }
                let (r, c) = rebuild(&[&text[..i], &text[i..j], &text[j..]]);
                assert_eq!((r.trim_end(), c.as_str()), (wr, wc), "cut at {i},{j}");
            }
        }
    }

    #[test]
    fn no_end_marker_is_all_reasoning() {
        assert_eq!(rebuild(&["abc </thi"]), ("abc </thi".into(), String::new()));
    }

    #[test]
    fn prompts_end_inside_or_after_the_section() {
        let m = ReasoningMarkers::think();
        let mut p = "<|im_start|>assistant\n".to_string();
        m.finish_prompt(&mut p, true);
        assert_eq!(p, "<|im_start|>assistant\n<think>\n");
        m.finish_prompt(&mut p, true);
        assert_eq!(p, "<|im_start|>assistant\n<think>\n");
        let mut q = "<|im_start|>assistant\n".to_string();
        m.finish_prompt(&mut q, false);
        assert_eq!(q, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
        assert!(ReasoningMarkers::detect("{{ '<think>' }}x{{ '</think>' }}").is_some());
        assert!(ReasoningMarkers::detect("<|im_start|>").is_none());
    }
}
