//! Chat templates: the Jinja template a GGUF file carries (`tokenizer.chat_template`),
//! rendered with `minijinja` the way Hugging Face `transformers` renders it.
//!
//! Hugging Face renders with `trim_blocks` and `lstrip_blocks`, Python string methods
//! (`.strip()`, `.startswith()`...) and a `raise_exception` function; we set up the same
//! environment (`minijinja-contrib`'s Python compatibility layer), so templates written for
//! `transformers` render identically. A file without a template gets ChatML, as llama.cpp
//! does.

use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::RuntimeError;

/// ChatML, used when the model file has no template.
pub const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Gemma's turn format (`<start_of_turn>user` ... `<end_of_turn>`, the assistant as
/// `model`, a system message folded into the first user turn), for Gemma GGUF files that
/// carry no template of their own.
pub const GEMMA: &str = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}{% for message in rest %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

/// The template for a model file without one: Gemma's turns for the Gemma families,
/// ChatML otherwise.
pub fn default_template(family: &str) -> &'static str {
    if family.starts_with("gemma") {
        GEMMA
    } else {
        CHATML
    }
}

/// One chat message. `content` may be empty for assistant messages that only call tools.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    #[serde(default)]
    pub content: String,
    /// Tool calls made by an assistant message (OpenAI shape), passed to the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    /// For `tool` messages: the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Optional author name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// A message with a role and text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::new("user", content)
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message::new("system", content)
    }
}

/// A compiled chat template plus the special-token strings it may use.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    supports_tools: bool,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

/// The UTC calendar date `(year, month 1-12, day 1-31)` of a Unix time in seconds
/// (Howard Hinnant's days-to-civil algorithm). O(1).
pub fn civil_date(unix_secs: u64) -> (i64, u32, u32) {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m as u32, d as u32)
}

fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_date(secs);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!("{d:02} {} {y}", MONTHS[(m - 1) as usize])
}

impl ChatTemplate {
    /// Compiles `source`. `bos`/`eos` are the texts of the model's BOS and EOS tokens.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate, RuntimeError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", |_fmt: String| today());
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| RuntimeError::Template(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            supports_tools: source.contains("tools"),
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template renders `tools` itself (it mentions them); otherwise
    /// [`crate::tools::inject_tools`] puts them into the system message.
    pub fn supports_tools(&self) -> bool {
        self.supports_tools
    }

    /// Renders `messages` (and `tools`, OpenAI function definitions, when given), ending
    /// with the assistant prefix when `add_generation_prompt`. Cost: proportional to the
    /// text.
    pub fn render(
        &self,
        messages: &[Message],
        tools: Option<&Value>,
        add_generation_prompt: bool,
    ) -> Result<String, RuntimeError> {
        self.render_with(messages, tools, add_generation_prompt, None)
    }

    /// [`ChatTemplate::render`] with `enable_thinking` set for templates with a reasoning
    /// switch (Qwen3's); `None` leaves it undefined (the template's default).
    pub fn render_with(
        &self,
        messages: &[Message],
        tools: Option<&Value>,
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String, RuntimeError> {
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| RuntimeError::Template(e.to_string()))?;
        t.render(minijinja::context! {
            messages => minijinja::Value::from_serialize(messages),
            tools => tools.map(minijinja::Value::from_serialize),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
            enable_thinking => enable_thinking,
        })
        .map_err(|e| RuntimeError::Template(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_with_generation_prompt() {
        let t = ChatTemplate::new(CHATML, "", "<|im_end|>").unwrap();
        let s = t.render(&[Message::user("hi")], None, true).unwrap();
        assert_eq!(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn python_methods_and_raise_exception() {
        let src = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}{{ messages[0]['content'].strip() }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(
            t.render(&[Message::user("  x ")], None, false).unwrap(),
            "x"
        );
        let e = t.render(&[Message::system("s")], None, false).unwrap_err();
        assert!(e.to_string().contains("first must be user"), "{e}");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(951_782_400), (2000, 2, 29));
        assert_eq!(civil_date(1_795_252_230), (2026, 11, 21));
    }

    #[test]
    fn malformed_template_is_an_error() {
        assert!(ChatTemplate::new("{% for %}", "", "").is_err());
    }
}
