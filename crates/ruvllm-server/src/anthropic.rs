//! The Anthropic Messages dialect: `POST /v1/messages` and `POST /v1/messages/count_tokens`,
//! as the `anthropic` SDK and the tools built on it (Claude-based agents) call them.
//!
//! A request is read into the same [`ruvllm_runtime::Prompt`] and [`OutputConstraint`] as
//! an OpenAI chat request: `system` becomes a system message; content blocks become text,
//! `tool_use` blocks an assistant's tool calls and `tool_result` blocks tool messages;
//! `tools` (`input_schema`) and `tool_choice` (`auto`, `any`, `tool`, `none`) the tool
//! calling of the runtime, so a forced call's arguments are valid by construction;
//! `output_config.format` (or the beta's `output_format`), `{"type": "json_schema",
//! "schema"}`, Anthropic's structured outputs, a schema constraint (objects closed, every
//! declared property present, as Anthropic defines them). `temperature`, `top_p` and
//! `top_k` are read where a client still sends them. `thinking` (`enabled` with
//! `budget_tokens`, or `disabled`, the default) turns on the reasoning section of a chat
//! template that has one (see `ruvllm_runtime::reasoning`). The answer is a message of
//! `thinking`, `text` and `tool_use` blocks with
//! `stop_reason` `end_turn`, `tool_use` or `max_tokens`; a stream is Anthropic's named
//! SSE events (`message_start`, `content_block_start`/`_delta`/`_stop`, `message_delta`,
//! `message_stop`), tool input streamed as `input_json_delta`. Errors use Anthropic's
//! shape (`{"type": "error", "error": {"type", "message"}}`) and name the field.
//!
//! Not supported, and refused with a 400 naming the field rather than ignored: image and
//! document blocks, server tools (`web_search`...).

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ruvllm_runtime::{
    FinishReason, GenerateParams, Generation, Message, OutputConstraint, Tool, ToolCall,
    ToolCalling, ToolChoice, ToolEvent, ToolParser,
};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Dialect};
use crate::params::{self, type_name, Fields};
use crate::pipeline::{self, respond, Input, Request};
use crate::state::{extension, json_body, new_id, Shared};
use crate::stream::{channel, next_chunk};

const D: Dialect = Dialect::Anthropic;

fn bad(param: impl Into<String>, msg: impl Into<String>) -> ApiError {
    ApiError::bad(param, msg).dialect(D)
}

/// The text of a `content` that is a string or a list of `text` blocks (`param` names it).
fn text_of(v: &Value, param: &str) -> ApiResult<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut out = String::new();
            for (j, b) in blocks.iter().enumerate() {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        out.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""))
                    }
                    other => {
                        return Err(bad(
                            format!("{param}[{j}].type"),
                            format!("a block of type {other:?} is not supported here (only text)"),
                        ))
                    }
                }
            }
            Ok(out)
        }
        other => Err(bad(
            param,
            format!(
                "must be a string or a list of blocks, got {}",
                type_name(other)
            ),
        )),
    }
}

/// `system` and `messages` as chat messages (see the module docs).
fn messages(f: &Fields) -> ApiResult<Vec<Message>> {
    let mut out = Vec::new();
    if let Some(s) = f.get("system") {
        out.push(Message::system(text_of(s, "system")?));
    }
    let list = match f.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(bad("messages", "`messages` must not be empty")),
        Some(v) => {
            return Err(bad(
                "messages",
                format!("`messages` must be an array, got {}", type_name(v)),
            ))
        }
        None => return Err(bad("messages", "`messages` is required")),
    };
    for (i, m) in list.iter().enumerate() {
        let p = format!("messages[{i}]");
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if !matches!(role, "user" | "assistant") {
            return Err(bad(
                format!("{p}.role"),
                format!("role {role:?} is not one of user, assistant"),
            ));
        }
        let content = m
            .get("content")
            .ok_or_else(|| bad(format!("{p}.content"), "`content` is required"))?;
        let blocks = match content {
            Value::String(s) => {
                out.push(Message::new(role, s.clone()));
                continue;
            }
            Value::Array(b) => b,
            other => {
                return Err(bad(
                    format!("{p}.content"),
                    format!(
                        "must be a string or a list of blocks, got {}",
                        type_name(other)
                    ),
                ))
            }
        };
        let mut text = String::new();
        let mut calls = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let bp = format!("{p}.content[{j}]");
            match (role, b.get("type").and_then(Value::as_str)) {
                (_, Some("text")) => {
                    text.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""));
                }
                // Earlier reasoning is not shown to the model again.
                ("assistant", Some("thinking" | "redacted_thinking")) => {}
                ("assistant", Some("tool_use")) => {
                    let name = b.get("name").and_then(Value::as_str).ok_or_else(|| {
                        bad(format!("{bp}.name"), "a tool_use block needs `name`")
                    })?;
                    let id = b.get("id").and_then(Value::as_str).unwrap_or("");
                    let input = b.get("input").cloned().unwrap_or(json!({}));
                    calls.push(json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": input.to_string()}}));
                }
                ("user", Some("tool_result")) => {
                    let id = b
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            bad(
                                format!("{bp}.tool_use_id"),
                                "a tool_result block needs `tool_use_id`",
                            )
                        })?;
                    let mut result = match b.get("content") {
                        None | Some(Value::Null) => String::new(),
                        Some(c) => text_of(c, &format!("{bp}.content"))?,
                    };
                    if b.get("is_error") == Some(&Value::Bool(true)) {
                        result = format!("Error: {result}");
                    }
                    let mut msg = Message::new("tool", result);
                    msg.tool_call_id = Some(id.to_string());
                    out.push(msg);
                }
                (_, other) => {
                    return Err(bad(
                        format!("{bp}.type"),
                        format!("a {role} block of type {other:?} is not supported"),
                    ))
                }
            }
        }
        if !calls.is_empty() {
            let mut msg = Message::new("assistant", text);
            msg.tool_calls = Some(Value::Array(calls));
            out.push(msg);
        } else if !text.is_empty() || role == "assistant" {
            out.push(Message::new(role, text));
        }
    }
    Ok(out)
}

/// `tools` and `tool_choice`.
fn tools(f: &Fields) -> ApiResult<Option<ToolCalling>> {
    let list = match f.get("tools") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let p = format!("tools[{i}]");
                if let Some(ty) = t.get("type").and_then(Value::as_str) {
                    if ty != "custom" {
                        return Err(bad(
                            format!("{p}.type"),
                            format!("server tool {ty:?} is not supported (only client tools)"),
                        ));
                    }
                }
                let name = t
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{p}.name"), "a tool needs `name`"))?;
                let description = t
                    .get("description")
                    .and_then(Value::as_str)
                    .map(String::from);
                let mut schema = match t.get("input_schema") {
                    Some(s @ Value::Object(_)) => s.clone(),
                    _ => {
                        return Err(bad(
                            format!("{p}.input_schema"),
                            "a tool needs `input_schema` (a JSON Schema object)",
                        ))
                    }
                };
                if t.get("strict") == Some(&Value::Bool(true)) {
                    schema = params::strict_schema(&schema, &format!("{p}.input_schema"))?;
                }
                Tool::new(name, description, schema)
                    .map_err(|e| bad(format!("{p}.name"), e.to_string()))
            })
            .collect::<ApiResult<Vec<_>>>()?,
        Some(v) => {
            return Err(bad(
                "tools",
                format!("`tools` must be an array, got {}", type_name(v)),
            ))
        }
    };
    let (choice, parallel) = match f.get("tool_choice") {
        None => (ToolChoice::Auto, true),
        Some(tc) => {
            let parallel = tc.get("disable_parallel_tool_use") != Some(&Value::Bool(true));
            let choice = match tc.get("type").and_then(Value::as_str) {
                Some("auto") => ToolChoice::Auto,
                Some("any") => ToolChoice::Required,
                Some("none") => ToolChoice::None,
                Some("tool") => {
                    let name = tc.get("name").and_then(Value::as_str).ok_or_else(|| {
                        bad("tool_choice.name", "tool_choice of type tool needs `name`")
                    })?;
                    if !list.iter().any(|t| t.name == name) {
                        return Err(bad(
                            "tool_choice.name",
                            format!("tool {name:?} is not among the tools"),
                        ));
                    }
                    ToolChoice::Function(name.to_string())
                }
                other => {
                    return Err(bad(
                        "tool_choice.type",
                        format!("tool_choice type {other:?} is not one of auto, any, tool, none"),
                    ))
                }
            };
            (choice, parallel)
        }
    };
    if list.is_empty() {
        return match choice {
            ToolChoice::None | ToolChoice::Auto => Ok(None),
            _ => Err(bad("tool_choice", "tool_choice needs `tools`")),
        };
    }
    Ok(Some(ToolCalling {
        tools: list,
        choice,
        parallel,
        // The backend writes calls in its chat template's format.
        format: Default::default(),
    }))
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` turns reasoning on with that
/// budget, `{"type": "disabled"}` or no field leaves it off (Anthropic's default), for
/// chat templates with a reasoning section. Returns `(enabled, budget)`.
fn thinking(f: &Fields) -> ApiResult<(Option<bool>, Option<usize>)> {
    let Some(t) = f.obj("thinking")? else {
        return Ok((Some(false), None));
    };
    match t.str("type")? {
        Some("enabled") => {
            let budget = t.int("budget_tokens", 0, 1 << 20)?.map(|n| n as usize);
            Ok((Some(true), budget))
        }
        Some("disabled") => Ok((Some(false), None)),
        other => Err(bad(
            "thinking.type",
            format!("thinking.type {other:?} is not \"enabled\" or \"disabled\""),
        )),
    }
}

/// `output_config.format` (current) or the beta's `output_format`: a schema constraint,
/// objects closed and every declared property required, as Anthropic's structured
/// outputs define them.
fn output_format(f: &Fields, objects: &params::Objects) -> ApiResult<Option<params::Constraint>> {
    let spelled = match (
        f.get("output_config").and_then(|c| c.get("format")),
        f.get("output_format"),
    ) {
        (Some(of), None) if !of.is_null() => Some((of, "output_config.format")),
        (None | Some(Value::Null), Some(of)) if !of.is_null() => Some((of, "output_format")),
        (Some(of), Some(other)) if !of.is_null() && !other.is_null() => {
            return Err(bad(
                "output_format",
                "give `output_config.format` or `output_format`, not both",
            ))
        }
        _ => None,
    };
    let Some((of, at)) = spelled else {
        return Ok(None);
    };
    if of.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Err(bad(format!("{at}.type"), "must be \"json_schema\""));
    }
    let param = format!("{at}.schema");
    let schema = of
        .get("schema")
        .ok_or_else(|| bad(&param, format!("`{param}` is required")))?;
    let schema = params::strict_schema(schema, &param)?;
    let js = ruvllm_runtime::JsonSchema::from_value_with(schema, objects.registry.as_deref())
        .map_err(|e| bad(&param, format!("not a valid JSON Schema: {e}")))?;
    Ok(Some(params::Constraint {
        c: OutputConstraint::JsonSchema {
            schema: js,
            options: objects.options(&param, true),
        },
        param,
    }))
}

/// Sampling: `max_tokens` (required), `temperature` (0 to 1), `top_p`, `top_k`,
/// `stop_sequences`.
fn sampling(st: &Shared, f: &Fields) -> ApiResult<GenerateParams> {
    let max_tokens = match f.int("max_tokens", i64::MIN, i64::MAX)? {
        Some(n) => st.max_tokens(Some(n), "max_tokens")?,
        None => return Err(bad("max_tokens", "`max_tokens` is required")),
    };
    let top_p = match f.num("top_p", 0.0, 1.0)? {
        Some(p) if p <= 0.0 => return Err(bad("top_p", "`top_p` must be greater than 0")),
        Some(p) => p,
        None => 1.0,
    };
    Ok(GenerateParams {
        max_tokens,
        temperature: f.num("temperature", 0.0, 1.0)?.unwrap_or(1.0),
        top_p,
        top_k: f.int("top_k", 0, 1 << 20)?.map_or(0, |k| k as usize),
        stop: f.stop("stop_sequences")?,
        ..Default::default()
    })
}

/// The body as a [`Request`], and its `stream` (default false).
fn read(st: &Shared, v: &Value) -> ApiResult<(Request, bool)> {
    let f = Fields::of(v, "")?;
    st.check_model(f.str("model")?, D)?;
    let thinking = thinking(&f)?;
    let msgs = messages(&f)?;
    let mut req = Request::read(st, &f, D, Input::Chat(msgs), sampling(st, &f)?)?;
    req.tools = tools(&f)?;
    req.format = output_format(&f, &req.objects)?;
    req.thinking = thinking;
    Ok((req, f.bool("stream")?.unwrap_or(false)))
}

fn stop_reason(finish: FinishReason, calls: bool) -> &'static str {
    match (finish, calls) {
        (FinishReason::Length, _) => "max_tokens",
        (FinishReason::Stop, true) => "tool_use",
        (FinishReason::Stop, false) => "end_turn",
    }
}

fn tool_use(call: &ToolCall) -> Value {
    let input: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
    json!({"type": "tool_use", "id": new_id("toolu_"), "name": call.name, "input": input})
}

/// `POST /v1/messages`.
pub async fn messages_endpoint(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(D, messages_inner(st, body).await)
}

async fn messages_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, D)?;
    let (req, stream) = read(&st, &v)?;
    let s = pipeline::start(&st, req).await?;
    let id = new_id("msg_");
    let model = st.model_id.clone();
    if stream {
        return Ok(s.stream_with(|stream, parser| {
            message_stream(stream, id, model, parser).into_response()
        }));
    }
    let a = s.answer().await?;
    let g = &a.generation;
    let mut content = Vec::new();
    if let Some(r) = &g.reasoning {
        content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if !a.content.is_empty() {
        content.push(json!({"type": "text", "text": a.content}));
    }
    content.extend(a.calls.iter().map(tool_use));
    let r = Json(json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(g.finish, !a.calls.is_empty()),
        "stop_sequence": null,
        "usage": usage(g),
        "ruvllm": extension(g),
    }))
    .into_response();
    Ok(a.headers(r))
}

fn usage(g: &Generation) -> Value {
    json!({
        "input_tokens": g.usage.prompt_tokens,
        "output_tokens": g.usage.completion_tokens,
        "cache_read_input_tokens": g.usage.cached_prompt_tokens,
        "cache_creation_input_tokens": 0,
    })
}

fn event(name: &str, data: Value) -> Result<Event, Infallible> {
    Ok(Event::default().event(name).data(data.to_string()))
}

/// A content block being streamed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    ToolUse,
}

/// Turns parser events into Anthropic stream events: blocks opened and closed as the kind
/// of content changes, deltas in between.
struct Blocks {
    open: Option<(usize, Block)>,
    next: usize,
    calls: usize,
    out: Vec<Result<Event, Infallible>>,
}

impl Blocks {
    fn close(&mut self) {
        if let Some((i, _)) = self.open.take() {
            self.out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
    }

    /// The index of an open block of `kind`, opening one with `start` when needed.
    fn ensure(&mut self, kind: Block, start: Value) -> usize {
        if let Some((i, k)) = self.open {
            if k == kind && kind != Block::ToolUse {
                return i;
            }
        }
        self.close();
        let i = self.next;
        self.next += 1;
        self.out.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        self.open = Some((i, kind));
        i
    }

    fn delta(&mut self, i: usize, delta: Value) {
        self.out.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": delta}),
        ));
    }

    fn emit(&mut self, ev: ToolEvent) {
        match ev {
            ToolEvent::Text(t) | ToolEvent::Reasoning(t) if t.is_empty() => {}
            ToolEvent::Reasoning(t) => {
                let start = json!({"type": "thinking", "thinking": "", "signature": ""});
                let i = self.ensure(Block::Thinking, start);
                self.delta(i, json!({"type": "thinking_delta", "thinking": t}));
            }
            ToolEvent::Text(t) => {
                let i = self.ensure(Block::Text, json!({"type": "text", "text": ""}));
                self.delta(i, json!({"type": "text_delta", "text": t}));
            }
            ToolEvent::CallStart { name, .. } => {
                self.calls += 1;
                let start = json!({"type": "tool_use", "id": new_id("toolu_"), "name": name,
                                   "input": {}});
                self.ensure(Block::ToolUse, start);
            }
            ToolEvent::CallArgs { fragment, .. } => {
                if let Some((i, Block::ToolUse)) = self.open {
                    self.delta(
                        i,
                        json!({"type": "input_json_delta", "partial_json": fragment}),
                    );
                }
            }
        }
    }
}

fn message_stream(
    mut s: ruvllm_runtime::TextStream,
    id: String,
    model: String,
    mut parser: ToolParser,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = channel();
    tokio::spawn(async move {
        let start = json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0}}});
        if tx.send(event("message_start", start)).await.is_err() {
            return;
        }
        let mut blocks = Blocks {
            open: None,
            next: 0,
            calls: 0,
            out: Vec::new(),
        };
        while let Some(item) = next_chunk(&mut s, &tx).await {
            let text = match item {
                Ok(t) => t,
                Err(e) => {
                    let err = ApiError::from_runtime(&e, "").dialect(D);
                    let _ = tx.send(event("error", err.body())).await;
                    return;
                }
            };
            for ev in parser.push(&text) {
                blocks.emit(ev);
            }
            for e in blocks.out.drain(..) {
                if tx.send(e).await.is_err() {
                    return;
                }
            }
        }
        for ev in parser.finish() {
            blocks.emit(ev);
        }
        blocks.close();
        for e in blocks.out.drain(..) {
            if tx.send(e).await.is_err() {
                return;
            }
        }
        let g = match s.outcome() {
            Some(Ok(g)) => g,
            _ => return,
        };
        let mut delta = json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason(g.finish, blocks.calls > 0),
                      "stop_sequence": null},
            "usage": usage(&g)});
        delta["ruvllm"] = extension(&g);
        let _ = tx.send(event("message_delta", delta)).await;
        let _ = tx
            .send(event("message_stop", json!({"type": "message_stop"})))
            .await;
    });
    Sse::new(rx)
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as this model reads them.
pub async fn count_tokens(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(D, count_inner(st, body))
}

fn count_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let mut v = json_body(body, D)?;
    // Counting needs no budget.
    if let Value::Object(m) = &mut v {
        m.entry("max_tokens").or_insert(json!(1));
    }
    let (req, _) = read(&st, &v)?;
    let p = pipeline::prepare(&st, req);
    let b = st.sched.model();
    // Rendered as the request would be: with its reasoning section on or off.
    let text = b
        .render_with(&p.prompt, p.params.thinking.enabled)
        .map_err(|e| ApiError::from_runtime(&e, "messages"))?;
    let ids = b
        .encode(&text)
        .map_err(|e| ApiError::from_runtime(&e, "messages"))?;
    Ok(Json(json!({"input_tokens": ids.len()})).into_response())
}
