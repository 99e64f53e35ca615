//! How a model family writes tool calls, chosen from its chat template.
//!
//! Each family was trained on its own call syntax; writing calls in another family's
//! syntax works (the grammar forces it) but costs the model accuracy. Every format here
//! is "fixed text around a name and a JSON arguments object", so one description,
//! [`Pieces`], gives both the exact grammar (`ToolCalling::grammar` in `tools`) and
//! the incremental parser (`ToolParser` there); this module knows nothing of either:
//!
//! ```text
//! output  ::= begin call (sep call)* end
//! call    ::= call_open NAME name_close ARGUMENTS call_close
//! ```
//!
//! | format | a call | from a template that mentions |
//! |---|---|---|
//! | Hermes (Qwen 2.5/3, Hermes, SmolLM2, default) | `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>` | anything else |
//! | Llama 3.x JSON | `{"name": "f", "parameters": {...}}` (one call) | `<|python_tag|>` or `<|eom_id|>` |
//! | Mistral | `[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]` | `[TOOL_CALLS]` |
//! | DeepSeek V3 / R1 | `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>` | `tool▁calls▁begin` |
//!
//! Markers that a tokenizer keeps as control tokens (Mistral's `[TOOL_CALLS]`) are made
//! ordinary text tokens of the vocabulary the constraint is compiled against
//! ([`CallFormat::marker_texts`]), so the grammar can write them as the single token the
//! model was trained on.
//!
//! Not covered: Gemma (its templates define no call syntax; the Hermes format is used)
//! and GPT-OSS's harmony channels (calls are addressed by control-token headers,
//! `<|channel|>commentary to=functions.f`, with the reasoning in another channel).

/// What free text may not contain: anything beginning `<tool` or `</tool`. The call's
/// `<tool_call>` is the other branch of the grammar, so text that starts a tag starts a
/// call. A small model otherwise copies the prompt's `<tool_response>` into its answer,
/// or invents variants (`<tool_responseText>`, `<tool_error>`); banning the exact tags was
/// measured not to be enough (docs/SERVER.md). The price: under `auto`, an answer cannot
/// write `<tool` (as in `<toolbar>`) in its text.
pub const MARKUP: &[&str] = &["<tool", "</tool"];

/// A tool-call syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum CallFormat {
    /// `<tool_call>` JSON `</tool_call>` (Hermes, Qwen, SmolLM2; the default).
    #[default]
    Hermes,
    /// Llama 3.x's JSON call: `{"name": ..., "parameters": ...}`, one per answer.
    Llama3Json,
    /// Mistral's `[TOOL_CALLS]` followed by a JSON array of calls.
    Mistral,
    /// DeepSeek V3 / R1's marker tokens around a fenced JSON block per call.
    DeepSeek,
}

/// The fixed text of a format (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pieces {
    /// Before the first call.
    pub begin: &'static str,
    /// Before each call's name.
    pub call_open: &'static str,
    /// Between the name and the arguments.
    pub name_close: &'static str,
    /// After the arguments.
    pub call_close: &'static str,
    /// Between calls.
    pub sep: &'static str,
    /// After the last call.
    pub end: &'static str,
    /// Whether the format can hold more than one call.
    pub parallel: bool,
}

impl Pieces {
    /// The text that starts the first call (what free text under `auto` may not write).
    pub fn opener(&self) -> String {
        format!("{}{}", self.begin, self.call_open)
    }
}

impl CallFormat {
    /// The format a chat template's source was written for. Cost: a few substring
    /// searches.
    pub fn detect(template: &str) -> CallFormat {
        if template.contains("[TOOL_CALLS]") {
            CallFormat::Mistral
        } else if template.contains("tool▁calls▁begin") {
            CallFormat::DeepSeek
        } else if template.contains("<|python_tag|>") || template.contains("<|eom_id|>") {
            CallFormat::Llama3Json
        } else {
            CallFormat::Hermes
        }
    }

    /// The format's fixed text.
    pub fn pieces(self) -> Pieces {
        match self {
            CallFormat::Hermes => Pieces {
                begin: "",
                call_open: "<tool_call>\n{\"name\": \"",
                name_close: "\", \"arguments\": ",
                call_close: "}\n</tool_call>",
                sep: "\n",
                end: "",
                parallel: true,
            },
            CallFormat::Llama3Json => Pieces {
                begin: "",
                call_open: "{\"name\": \"",
                name_close: "\", \"parameters\": ",
                call_close: "}",
                sep: "",
                end: "",
                parallel: false,
            },
            CallFormat::Mistral => Pieces {
                begin: "[TOOL_CALLS][",
                call_open: "{\"name\": \"",
                name_close: "\", \"arguments\": ",
                call_close: "}",
                sep: ", ",
                end: "]",
                parallel: true,
            },
            CallFormat::DeepSeek => Pieces {
                begin: "<｜tool▁calls▁begin｜>",
                call_open: "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                name_close: "\n```json\n",
                call_close: "\n```<｜tool▁call▁end｜>",
                sep: "\n",
                end: "<｜tool▁calls▁end｜>",
                parallel: true,
            },
        }
    }

    /// What free text may not contain under `tool_choice: auto` (all beginning with the
    /// same character): the call's opener, and for Hermes anything beginning `<tool`
    /// (see [`MARKUP`]).
    pub fn forbidden_in_text(self) -> Vec<String> {
        match self {
            CallFormat::Hermes => MARKUP.iter().map(|s| s.to_string()).collect(),
            CallFormat::Mistral => vec!["[TOOL_CALLS]".into()],
            CallFormat::DeepSeek => vec!["<｜tool▁calls▁begin｜>".into()],
            CallFormat::Llama3Json => vec!["{\"name\"".into()],
        }
    }

    /// Marker texts that must be writable as ordinary tokens (control tokens in some
    /// tokenizers).
    pub fn marker_texts(self) -> &'static [&'static str] {
        match self {
            CallFormat::Mistral => &["[TOOL_CALLS]"],
            _ => &[],
        }
    }

    /// A short name (for cache keys and messages).
    pub fn name(self) -> &'static str {
        match self {
            CallFormat::Hermes => "hermes",
            CallFormat::Llama3Json => "llama3-json",
            CallFormat::Mistral => "mistral",
            CallFormat::DeepSeek => "deepseek",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detected_from_template_text() {
        assert_eq!(
            CallFormat::detect("{{ '[TOOL_CALLS]' }}"),
            CallFormat::Mistral
        );
        assert_eq!(
            CallFormat::detect("<｜tool▁calls▁begin｜>"),
            CallFormat::DeepSeek
        );
        assert_eq!(
            CallFormat::detect("{{- '<|python_tag|>' }}"),
            CallFormat::Llama3Json
        );
        assert_eq!(CallFormat::detect("<tool_call>"), CallFormat::Hermes);
        assert_eq!(CallFormat::detect(""), CallFormat::Hermes);
    }

    #[test]
    fn forbidden_words_share_their_first_character() {
        for f in [
            CallFormat::Hermes,
            CallFormat::Llama3Json,
            CallFormat::Mistral,
            CallFormat::DeepSeek,
        ] {
            let words = f.forbidden_in_text();
            let first = words[0].chars().next();
            assert!(words.iter().all(|w| w.chars().next() == first), "{f:?}");
            // Free text that avoids them cannot begin a call.
            assert!(words
                .iter()
                .any(|w| f.pieces().opener().starts_with(w.as_str())));
        }
    }
}
