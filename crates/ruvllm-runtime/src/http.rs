//! [`HttpBackend`]: post-validation for backends without logit access.
//!
//! When the model runs behind someone else's OpenAI-compatible server (a hosted API, vLLM,
//! llama.cpp's server, another `ruvllm serve`), the mask cannot be applied. This backend
//! sends the request, then checks the answer the way constrained decoding would have
//! guaranteed it:
//!
//! 1. JSON mode: parse and validate against the schema ([`crate::JsonValidator`]); in repair mode
//!    malformed output is repaired (the repaired value must validate). Grammar, regex and
//!    choice constraints: the output must be a complete sentence of the grammar (checked
//!    byte by byte by the engine's recognizer).
//! 2. If the answer fails, the conversation is extended with the answer and the reason it
//!    was refused, and the request is sent again, at most `max_retries` times.
//! 3. The [`Generation`] reports which path produced the result: [`ResultPath::Valid`],
//!    [`ResultPath::Repaired`], [`ResultPath::Retried`] (with the number of retries), or an
//!    error naming the last violation when every attempt failed.
//!
//! The server's own structured-output support is used when asked
//! ([`HttpBackend::send_response_format`]): the schema goes in `response_format`, and the
//! answer is still validated here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ruvllm_engine::{CheckResult, Engine, Limits, Matcher, Vocabulary};
use serde_json::{json, Value};

use crate::api::{
    FinishReason, GenerateParams, Generation, LlmBackend, OutputConstraint, Prompt, ResultPath,
    Usage,
};
use crate::chat::Message;
use crate::error::{Result, RuntimeError};
use crate::json::ValidationStatus;

/// An OpenAI-compatible chat-completions server, with validation, repair and retries.
#[derive(Clone)]
pub struct HttpBackend {
    base_url: String,
    model: String,
    api_key: Option<String>,
    /// Retries after a refused answer (default 2).
    pub max_retries: usize,
    /// Send the schema as `response_format` (default `true`).
    pub send_response_format: bool,
    agent: ureq::Agent,
    /// An engine over a one-byte-per-token vocabulary, for checking answers.
    bytes: Engine,
}

impl std::fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBackend")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

/// One token per byte: enough for the engine to check text byte by byte.
fn byte_vocabulary() -> Result<Vocabulary> {
    let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    toks.push(b"<eos>".to_vec());
    let mut special = vec![false; 256];
    special.push(true);
    Ok(Vocabulary::new("bytes", toks, special, vec![256])?)
}

impl HttpBackend {
    /// A backend for the server at `base_url` (e.g. `http://127.0.0.1:8080/v1`), using
    /// `model`; `api_key` is sent as a bearer token. Requests time out after 300 s.
    pub fn new(base_url: &str, model: &str, api_key: Option<String>) -> Result<HttpBackend> {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(300)))
            .http_status_as_error(false)
            .build();
        Ok(HttpBackend {
            base_url: base_url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            api_key,
            max_retries: 2,
            send_response_format: true,
            agent: ureq::Agent::new_with_config(config),
            bytes: Engine::new(Arc::new(byte_vocabulary()?)),
        })
    }

    fn chat(&self, body: &Value) -> Result<(String, FinishReason, usize, usize)> {
        let url = format!("{}/chat/completions", self.base_url);
        let mut req = self.agent.post(&url);
        if let Some(k) = &self.api_key {
            req = req.header("Authorization", &format!("Bearer {k}"));
        }
        let mut resp = req
            .send_json(body)
            .map_err(|e| RuntimeError::Http(format!("{url}: {e}")))?;
        let status = resp.status().as_u16();
        let v: Value = resp.body_mut().read_json().map_err(|e| {
            RuntimeError::Http(format!("{url}: HTTP {status}, unreadable body: {e}"))
        })?;
        if status != 200 {
            let msg = v
                .pointer("/error/message")
                .and_then(|m| m.as_str())
                .unwrap_or("(no message)");
            return Err(RuntimeError::Http(format!("{url}: HTTP {status}: {msg}")));
        }
        let choice = v
            .pointer("/choices/0")
            .ok_or_else(|| RuntimeError::Http(format!("{url}: no choices in the answer")))?;
        let text = choice
            .pointer("/message/content")
            .and_then(|c| c.as_str())
            .unwrap_or("")
            .to_string();
        let finish = match choice.get("finish_reason").and_then(|f| f.as_str()) {
            Some("length") => FinishReason::Length,
            _ => FinishReason::Stop,
        };
        let pt = v
            .pointer("/usage/prompt_tokens")
            .and_then(|x| x.as_u64())
            .unwrap_or(0) as usize;
        let ct = v
            .pointer("/usage/completion_tokens")
            .and_then(|x| x.as_u64())
            .unwrap_or(0) as usize;
        Ok((text, finish, pt, ct))
    }

    /// Checks `text` against a non-JSON constraint: `Ok(None)` when it is a complete
    /// sentence, `Ok(Some(reason))` when not.
    fn check_grammar(&self, c: &OutputConstraint, text: &str) -> Result<Option<String>> {
        let limits = Limits::default();
        let g = match c {
            OutputConstraint::Gbnf(_)
            | OutputConstraint::Regex(_)
            | OutputConstraint::Choice(_)
            | OutputConstraint::Tools { .. } => match c.grammar(&limits)? {
                Some(g) => g,
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let cons = self.bytes.constraint(&g, &limits)?;
        let mut m = Matcher::new(&cons)?;
        Ok(match m.check_bytes(text.as_bytes())? {
            CheckResult::Accepted => None,
            CheckResult::Incomplete { expected } => Some(format!(
                "the answer is incomplete; expected next: {}",
                expected.join(", ")
            )),
            CheckResult::Rejected { at, expected } => Some(format!(
                "the answer breaks the format at byte {at}; expected: {}",
                expected.join(", ")
            )),
        })
    }
}

impl LlmBackend for HttpBackend {
    fn complete(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        params.validate()?;
        let t0 = Instant::now();
        // A raw prompt has no template to bypass here: the server applies its own, so it
        // goes as one user message.
        let mut messages = match prompt {
            Prompt::User(t) | Prompt::Raw(t) => vec![Message::user(t.clone())],
            Prompt::Chat { messages, .. } => messages.clone(),
        };
        let seed = params.seed.unwrap_or_else(rand::random);
        let mut body = json!({
            "model": self.model,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": seed,
        });
        if !params.stop.is_empty() {
            body["stop"] = json!(params.stop);
        }
        let grammar = params.constraint.clone();
        if let (Some(j), true) = (&params.json_mode, self.send_response_format) {
            body["response_format"] = match &j.schema {
                Some(s) => json!({"type": "json_schema", "json_schema": {
                    "name": "output", "schema": s.as_value(), "strict": false}}),
                None => json!({"type": "json_object"}),
            };
        }
        let mut usage = Usage::default();
        let mut last_problem = String::new();
        for attempt in 0..=self.max_retries {
            body["messages"] = serde_json::to_value(&messages)
                .map_err(|e| RuntimeError::Http(format!("encoding messages: {e}")))?;
            let (text, finish, pt, ct) = self.chat(&body)?;
            usage.prompt_tokens += pt;
            usage.completion_tokens += ct;
            usage.forward_passes += 1;
            let path_ok = |status: ValidationStatus| match (attempt, status) {
                (0, ValidationStatus::Valid) => ResultPath::Valid,
                (0, ValidationStatus::Repaired) => ResultPath::Repaired,
                (n, _) => ResultPath::Retried(n),
            };
            let outcome: std::result::Result<(String, ResultPath, _), String> =
                match (&params.json_mode, &grammar) {
                    (Some(j), _) => match j.validator().validate(&text) {
                        Ok(v) if v.status != ValidationStatus::Unchecked => {
                            let t = if v.status == ValidationStatus::Repaired {
                                v.text.clone()
                            } else {
                                text.clone()
                            };
                            Ok((t, path_ok(v.status), Some(v)))
                        }
                        // Lenient mode (neither strict nor repair): returned unchecked.
                        Ok(v) => Ok((text.clone(), ResultPath::Unchecked, Some(v))),
                        Err(e) => Err(e.to_string()),
                    },
                    (None, Some(c)) => match self.check_grammar(c, &text)? {
                        None => Ok((text.clone(), path_ok(ValidationStatus::Valid), None)),
                        Some(why) => Err(why),
                    },
                    (None, None) => Ok((text.clone(), ResultPath::Unchecked, None)),
                };
            match outcome {
                Ok((text, path, json)) => {
                    if !on_text(&text) {
                        return Err(RuntimeError::Cancelled);
                    }
                    usage.total_secs = t0.elapsed().as_secs_f64();
                    usage.first_token_secs = usage.total_secs;
                    return Ok(Generation {
                        text,
                        finish,
                        usage,
                        seed,
                        json,
                        path,
                        budget_closed: false,
                        reasoning: None,
                        warnings: Vec::new(),
                    });
                }
                Err(why) => {
                    last_problem = why.clone();
                    messages.push(Message::new("assistant", text));
                    messages.push(Message::user(format!(
                        "That answer was refused: {why}. Answer again with only the corrected \
                         output."
                    )));
                }
            }
        }
        Err(RuntimeError::Http(format!(
            "no valid answer after {} attempts; last problem: {last_problem}",
            self.max_retries + 1
        )))
    }
}
