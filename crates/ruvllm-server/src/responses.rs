//! The OpenAI Responses API: `POST /v1/responses`, the default of the OpenAI Agents SDK
//! and of `client.responses.parse`.
//!
//! A request becomes the same prompt and constraint as a chat completion: `instructions`
//! a system message; `input` (a string, or items) messages, `function_call` items an
//! assistant's tool calls and `function_call_output` items tool messages; `tools`
//! (function tools, `strict` by default as the Responses API defines) and `tool_choice`
//! the runtime's tool calling; `text.format` (`json_object`, `json_schema` with `strict`)
//! a format. `previous_response_id` continues from a response this server gave, kept in
//! memory (the last [`KEPT`], at most
//! [`KEPT_BYTES`](crate::conversations::KEPT_BYTES) of text); an id it no longer has is
//! a 400. The answer is a `response` whose `output` holds a `message` item (`output_text`) and `function_call`
//! items; `status` is `incomplete` (reason `max_output_tokens`) only when the output is
//! really incomplete. A stream is the API's named events (`response.created`,
//! `response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, ..., `response.completed`), each with its
//! `sequence_number`.
//!
//! Refused with a 400 naming the field: built-in tools (`web_search`, `file_search`...),
//! image and file inputs, `background` and `n`. `reasoning.effort` `none` turns a chat
//! template's reasoning section off; other efforts leave it on (it is returned as a
//! `reasoning` item with `reasoning_text` content).

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ruvllm_runtime::{FinishReason, Generation, Message, OutputConstraint, ToolEvent, ToolParser};
use serde_json::{json, Map, Value};

use crate::conversations::KEPT;
use crate::error::{ApiError, ApiResult, Dialect};
use crate::openai::sampling;
use crate::params::{self, type_name, Fields};
use crate::pipeline::{self, respond, Input, Request};
use crate::state::{extension, json_body, new_id, unix_now, Shared};
use crate::stream::{channel, next_events};

const D: Dialect = Dialect::Responses;

/// `input` as chat messages (see the module docs).
fn input_messages(input: &Value, out: &mut Vec<Message>) -> ApiResult<()> {
    let items = match input {
        Value::String(s) => {
            out.push(Message::user(s.clone()));
            return Ok(());
        }
        Value::Array(items) => items,
        other => {
            return Err(ApiError::bad(
                "input",
                format!(
                    "`input` must be a string or a list of items, got {}",
                    type_name(other)
                ),
            ))
        }
    };
    for (i, it) in items.iter().enumerate() {
        let p = format!("input[{i}]");
        match it.get("type").and_then(Value::as_str) {
            None | Some("message") => {
                let role = match it.get("role").and_then(Value::as_str) {
                    Some("developer") => "system",
                    Some(r @ ("system" | "user" | "assistant")) => r,
                    other => {
                        return Err(ApiError::bad(
                            format!("{p}.role"),
                            format!(
                                "role {other:?} is not one of system, developer, user, assistant"
                            ),
                        ))
                    }
                };
                let text = params::content_text(it.get("content"), &format!("{p}.content"))?;
                out.push(Message::new(role, text));
            }
            Some("function_call") => {
                let name = it.get("name").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad(format!("{p}.name"), "a function_call item needs `name`")
                })?;
                let call_id = it.get("call_id").and_then(Value::as_str).unwrap_or("");
                let arguments = it.get("arguments").and_then(Value::as_str).unwrap_or("{}");
                let call = json!({"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": arguments}});
                // Calls of one turn go into one assistant message.
                match out.last_mut() {
                    Some(m) if m.role == "assistant" => match &mut m.tool_calls {
                        Some(Value::Array(calls)) => calls.push(call),
                        slot => *slot = Some(Value::Array(vec![call])),
                    },
                    _ => {
                        let mut m = Message::new("assistant", "");
                        m.tool_calls = Some(Value::Array(vec![call]));
                        out.push(m);
                    }
                }
            }
            Some("function_call_output") => {
                let call_id = it.get("call_id").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad(
                        format!("{p}.call_id"),
                        "a function_call_output needs `call_id`",
                    )
                })?;
                let output = match it.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => params::content_text(Some(v), &format!("{p}.output"))?,
                    None => String::new(),
                };
                let mut m = Message::new("tool", output);
                m.tool_call_id = Some(call_id.to_string());
                out.push(m);
            }
            // Earlier reasoning is not shown to the model again.
            Some("reasoning") => {}
            Some(other) => {
                return Err(ApiError::bad(
                    format!("{p}.type"),
                    format!("input items of type {other:?} are not supported"),
                ))
            }
        }
    }
    Ok(())
}

/// The request's `tools` in the shape [`params::tools`] reads, `strict` defaulting to
/// true as the Responses API defines it.
fn chat_shape(v: &Value) -> ApiResult<Value> {
    let mut m = Map::new();
    if let Some(Value::Array(tools)) = v.get("tools") {
        let mut list = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            let ty = t.get("type").and_then(Value::as_str).unwrap_or("function");
            if ty != "function" {
                return Err(ApiError::bad(
                    format!("tools[{i}].type"),
                    format!("built-in tool {ty:?} is not supported (only function tools)"),
                ));
            }
            let mut t = t.clone();
            if let Value::Object(o) = &mut t {
                o.entry("strict").or_insert(Value::Bool(true));
            }
            list.push(t);
        }
        m.insert("tools".into(), Value::Array(list));
    } else if let Some(t) = v.get("tools") {
        m.insert("tools".into(), t.clone());
    }
    for k in ["tool_choice", "parallel_tool_calls"] {
        if let Some(x) = v.get(k) {
            m.insert(k.into(), x.clone());
        }
    }
    Ok(Value::Object(m))
}

/// `text.format`: the answer's format.
fn text_format(f: &Fields, objects: &params::Objects) -> ApiResult<Option<params::Constraint>> {
    let Some(fmt) = f.get("text").and_then(|t| t.get("format")) else {
        return Ok(None);
    };
    match fmt.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(params::Constraint {
            c: OutputConstraint::JsonObject {
                whitespace: ruvllm_engine::schema::Whitespace::Compact,
            },
            param: "text.format".into(),
        })),
        Some("json_schema") => {
            let param = "text.format.schema";
            let schema = fmt
                .get("schema")
                .ok_or_else(|| ApiError::bad(param, "`text.format.schema` is required"))?;
            let strict = match fmt.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(ApiError::bad(
                        "text.format.strict",
                        format!("`strict` must be a boolean, got {}", type_name(v)),
                    ))
                }
            };
            let schema = if strict {
                params::strict_schema(schema, param)?
            } else {
                schema.clone()
            };
            params::schema_constraint(&schema, param, strict, objects).map(Some)
        }
        other => Err(ApiError::bad(
            "text.format.type",
            format!("format {other:?} is not one of text, json_object, json_schema"),
        )),
    }
}

/// `POST /v1/responses`.
pub async fn create(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    respond(D, create_inner(st, body).await)
}

async fn create_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, D)?;
    let f = Fields::of(&v, "")?;
    st.check_model(f.str("model")?, D)?;
    if f.bool("background")? == Some(true) {
        return Err(ApiError::bad(
            "background",
            "background responses are not supported",
        ));
    }
    let think = match f.obj("reasoning")? {
        Some(r) => match r.str("effort")? {
            None => None,
            Some("none") => Some(false),
            Some("minimal" | "low" | "medium" | "high") => Some(true),
            Some(e) => {
                return Err(ApiError::bad(
                    "reasoning.effort",
                    format!(
                        "reasoning.effort {e:?} is not one of none, minimal, low, medium, high"
                    ),
                ))
            }
        },
        None => None,
    };
    let budget = f.int("reasoning_budget", 0, 1 << 20)?.map(|n| n as usize);
    let mut messages = Vec::new();
    if let Some(prev) = f.str("previous_response_id")? {
        messages = st.responses.get(prev).ok_or_else(|| {
            ApiError::bad(
                "previous_response_id",
                format!("no response {prev:?} here (the server keeps the last {KEPT}, in memory)"),
            )
        })?;
    }
    if let Some(i) = f.str("instructions")? {
        messages.retain(|m| m.role != "system");
        messages.insert(0, Message::system(i));
    }
    let input = f
        .get("input")
        .ok_or_else(|| ApiError::bad("input", "`input` is required"))?;
    input_messages(input, &mut messages)?;
    let shaped = chat_shape(&v)?;
    let gp = sampling(&st, &f, &["max_output_tokens"])?;
    let mut req = Request::read(&st, &f, D, Input::Chat(messages.clone()), gp)?;
    req.tools = params::tools(&Fields::of(&shaped, "")?)?;
    req.format = text_format(&f, &req.objects)?;
    req.thinking = (think, budget);
    let stream = f.bool("stream")?.unwrap_or(false);
    let s = pipeline::start(&st, req).await?;
    let head = Head {
        id: new_id("resp_"),
        created: unix_now(),
        model: st.model_id.clone(),
        echo: echo(&v),
    };
    if stream {
        let st = st.clone();
        return Ok(s.stream_with(|stream, parser| {
            response_stream(st, stream, head, parser, messages).into_response()
        }));
    }
    let a = s.answer().await?;
    let (g, text, calls) = (&a.generation, &a.content, &a.calls);
    let mut output = Vec::new();
    if let Some(r) = &g.reasoning {
        output.push(reasoning_item(&new_id("rs_"), r, "completed"));
    }
    if !text.is_empty() {
        output.push(message_item(&new_id("msg_"), text, "completed"));
    }
    let mut items: Vec<(String, String, String)> = Vec::new();
    for c in calls {
        let call_id = new_id("call_");
        output.push(call_item(
            &new_id("fc_"),
            &call_id,
            &c.name,
            &c.arguments,
            "completed",
        ));
        items.push((call_id, c.name.clone(), c.arguments.clone()));
    }
    remember(&st, &head.id, messages, text, &items);
    let r = Json(response_json(&head, g, output)).into_response();
    Ok(a.headers(r))
}

/// What a response repeats of its request.
fn echo(v: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    for (k, d) in [
        ("instructions", Value::Null),
        ("tools", json!([])),
        ("tool_choice", json!("auto")),
        ("parallel_tool_calls", json!(true)),
        ("temperature", json!(1.0)),
        ("top_p", json!(1.0)),
        ("max_output_tokens", Value::Null),
        ("previous_response_id", Value::Null),
        ("metadata", json!({})),
        ("text", json!({"format": {"type": "text"}})),
    ] {
        m.insert(k.into(), v.get(k).cloned().unwrap_or(d));
    }
    m
}

struct Head {
    id: String,
    created: u64,
    model: String,
    echo: Map<String, Value>,
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "reasoning", "id": id, "status": status, "summary": [],
           "content": [{"type": "reasoning_text", "text": text}]})
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

fn usage(g: &Generation) -> Value {
    json!({
        "input_tokens": g.usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": g.usage.cached_prompt_tokens},
        "output_tokens": g.usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": g.usage.reasoning_tokens},
        "total_tokens": g.usage.prompt_tokens + g.usage.completion_tokens,
    })
}

/// The `response` object; `g` is `None` while it is in progress.
fn response_body(head: &Head, g: Option<&Generation>, output: Vec<Value>) -> Value {
    let (status, incomplete) = match g.map(|g| g.finish) {
        None => ("in_progress", Value::Null),
        Some(FinishReason::Stop) => ("completed", Value::Null),
        Some(FinishReason::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
    };
    let mut r = json!({
        "id": head.id,
        "object": "response",
        "created_at": head.created,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "model": head.model,
        "output": output,
        "usage": g.map(usage),
        "reasoning": null,
        "store": true,
        "truncation": "disabled",
    });
    if let Value::Object(m) = &mut r {
        m.extend(head.echo.clone());
    }
    if let Some(g) = g {
        r["ruvllm"] = extension(g);
    }
    r
}

fn response_json(head: &Head, g: &Generation, output: Vec<Value>) -> Value {
    response_body(head, Some(g), output)
}

/// Keeps the conversation so far for a later `previous_response_id`.
fn remember(
    st: &Shared,
    id: &str,
    mut messages: Vec<Message>,
    text: &str,
    calls: &[(String, String, String)],
) {
    let mut m = Message::new("assistant", text);
    if !calls.is_empty() {
        m.tool_calls = Some(Value::Array(
            calls
                .iter()
                .map(|(cid, name, args)| {
                    json!({"id": cid, "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect(),
        ));
    }
    messages.push(m);
    st.responses.put(id.to_string(), messages);
}

/// The kinds of output item a stream opens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Item {
    Reasoning,
    Message,
    Call,
}

/// The Responses stream's event bookkeeping: the output items so far, the open one (a
/// text message or a function call) and the events waiting to be sent, each numbered.
struct Emitter {
    seq: u64,
    output: Vec<Value>,
    /// The open item's index and kind.
    open: Option<(usize, Item)>,
    text: String,
    args: String,
    calls: Vec<(String, String, String)>,
    pending: Vec<Result<Event, Infallible>>,
}

impl Emitter {
    fn new() -> Emitter {
        Emitter {
            seq: 0,
            output: Vec::new(),
            open: None,
            text: String::new(),
            args: String::new(),
            calls: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Queues event `name` with `data` (its `type` and `sequence_number` added).
    fn push(&mut self, name: &str, mut data: Value) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.pending
            .push(Ok(Event::default().event(name).data(data.to_string())));
    }

    /// Closes the open item with its `done` events.
    fn close(&mut self) {
        let Some((i, kind)) = self.open.take() else {
            return;
        };
        let id = self.output[i]["id"].as_str().unwrap_or("").to_string();
        if kind == Item::Reasoning {
            let text = self.text.clone();
            self.push(
                "response.reasoning_text.done",
                json!({"item_id": id, "output_index": i, "content_index": 0, "text": text}),
            );
            self.output[i] = reasoning_item(&id, &text, "completed");
        } else if kind == Item::Message {
            let text = self.text.clone();
            let part = json!({"type": "output_text", "text": text, "annotations": []});
            self.push(
                "response.output_text.done",
                json!({"item_id": id, "output_index": i, "content_index": 0, "text": text,
                       "logprobs": []}),
            );
            self.push(
                "response.content_part.done",
                json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
            );
            self.output[i] = message_item(&id, &text, "completed");
        } else {
            let call_id = self.output[i]["call_id"].as_str().unwrap_or("").to_string();
            let name = self.output[i]["name"].as_str().unwrap_or("").to_string();
            let args = self.args.clone();
            self.push(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": i, "arguments": args}),
            );
            self.output[i] = call_item(&id, &call_id, &name, &args, "completed");
            self.calls.push((call_id, name, args));
        }
        let item = self.output[i].clone();
        self.push(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        );
    }

    /// Answer text: into the open message, or a new one.
    fn text(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        if !matches!(self.open, Some((_, Item::Message))) {
            self.close();
            let id = new_id("msg_");
            let i = self.output.len();
            self.output.push(message_item(&id, "", "in_progress"));
            let mut added = self.output[i].clone();
            added["content"] = json!([]);
            self.push(
                "response.output_item.added",
                json!({"output_index": i, "item": added}),
            );
            self.push(
                "response.content_part.added",
                json!({"item_id": id, "output_index": i, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
            self.open = Some((i, Item::Message));
            self.text.clear();
        }
        let i = self.open.map_or(0, |(i, _)| i);
        self.text.push_str(t);
        let id = self.output[i]["id"].clone();
        self.push(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": i, "content_index": 0, "delta": t,
                   "logprobs": []}),
        );
    }

    /// A function call begins.
    fn call(&mut self, name: &str) {
        self.close();
        let i = self.output.len();
        self.output.push(call_item(
            &new_id("fc_"),
            &new_id("call_"),
            name,
            "",
            "in_progress",
        ));
        let item = self.output[i].clone();
        self.push(
            "response.output_item.added",
            json!({"output_index": i, "item": item}),
        );
        self.open = Some((i, Item::Call));
        self.args.clear();
    }

    /// More of the open call's arguments.
    fn args(&mut self, fragment: &str) {
        if let Some((i, Item::Call)) = self.open {
            self.args.push_str(fragment);
            let id = self.output[i]["id"].clone();
            self.push(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": i, "delta": fragment}),
            );
        }
    }

    /// Reasoning text: into the open reasoning item, or a new one.
    fn reasoning(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        if !matches!(self.open, Some((_, Item::Reasoning))) {
            self.close();
            let id = new_id("rs_");
            let i = self.output.len();
            self.output.push(reasoning_item(&id, "", "in_progress"));
            let mut added = self.output[i].clone();
            added["content"] = json!([]);
            self.push(
                "response.output_item.added",
                json!({"output_index": i, "item": added}),
            );
            self.open = Some((i, Item::Reasoning));
            self.text.clear();
        }
        let i = self.open.map_or(0, |(i, _)| i);
        self.text.push_str(t);
        let id = self.output[i]["id"].clone();
        self.push(
            "response.reasoning_text.delta",
            json!({"item_id": id, "output_index": i, "content_index": 0, "delta": t}),
        );
    }

    fn apply(&mut self, e: ToolEvent) {
        match e {
            ToolEvent::Reasoning(t) => self.reasoning(&t),
            ToolEvent::Text(t) => self.text(&t),
            ToolEvent::CallStart { name, .. } => self.call(&name),
            ToolEvent::CallArgs { fragment, .. } => self.args(&fragment),
        }
    }

    /// The text of the output's messages.
    fn all_text(&self) -> String {
        self.output
            .iter()
            .filter(|o| o["type"] == "message")
            .filter_map(|o| o["content"][0]["text"].as_str())
            .collect()
    }
}

fn response_stream(
    st: Shared,
    mut s: ruvllm_runtime::TextStream,
    head: Head,
    mut parser: ToolParser,
    messages: Vec<Message>,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = channel();
    tokio::spawn(async move {
        let mut em = Emitter::new();
        let start = response_body(&head, None, Vec::new());
        em.push("response.created", json!({"response": start.clone()}));
        em.push("response.in_progress", json!({"response": start}));
        loop {
            let (evs, done) = match next_events(&mut s, &tx, &mut parser).await {
                Ok(x) => x,
                Err(e) => {
                    let err = ApiError::from_runtime(&e, "");
                    em.push(
                        "error",
                        json!({"code": err.code, "message": err.message, "param": err.param}),
                    );
                    for e in em.pending.drain(..) {
                        let _ = tx.send(e).await;
                    }
                    return;
                }
            };
            for e in evs {
                em.apply(e);
            }
            if done {
                em.close();
            }
            for e in em.pending.drain(..) {
                if tx.send(e).await.is_err() {
                    return;
                }
            }
            if done {
                break;
            }
        }
        let Some(Ok(g)) = s.outcome() else {
            return;
        };
        remember(&st, &head.id, messages, &em.all_text(), &em.calls);
        let name = if g.finish == FinishReason::Length {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let output = std::mem::take(&mut em.output);
        em.push(
            name,
            json!({"response": response_body(&head, Some(&g), output)}),
        );
        for e in em.pending.drain(..) {
            let _ = tx.send(e).await;
        }
    });
    Sse::new(rx)
}
