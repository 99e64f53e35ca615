//! The OpenAI dialect: `POST /v1/chat/completions`, `POST /v1/completions`,
//! `GET /v1/models`.
//!
//! Chat requests may carry `response_format` (text, json_object, json_schema with
//! `strict`), tools (`tool_choice` none/auto/required/named, `parallel_tool_calls`), and
//! the vLLM/SGLang/llama.cpp extension fields; streaming answers are Server-Sent Events
//! with `chat.completion.chunk` objects, tool calls streamed as `delta.tool_calls` (id,
//! type and name only in the first delta of each call, argument fragments after), a final
//! chunk with `finish_reason`, an optional usage chunk (`stream_options.include_usage`),
//! and `data: [DONE]`.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::Stream;
use ruvllm_runtime::{
    FinishReason, GenerateParams, Generation, TextStream, ToolCall, ToolEvent, ToolParser,
};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Dialect};
use crate::params::{self, Fields};
use crate::pipeline::{self, respond, Input, Request};
use crate::state::{extension, json_body, new_id, unix_now, Shared};
use crate::stream::{channel, next_chunk};

const D: Dialect = Dialect::OpenAi;

/// Sampling fields shared by the OpenAI endpoints (with the usual extensions `top_k`,
/// `min_p`, `repetition_penalty`).
pub(crate) fn sampling(st: &Shared, f: &Fields, max_keys: &[&str]) -> ApiResult<GenerateParams> {
    let mut asked = None;
    for k in max_keys {
        if let Some(n) = f.int(k, i64::MIN, i64::MAX)? {
            asked = Some((n, *k));
        }
    }
    let max_tokens = match asked {
        Some((n, k)) => st.max_tokens(Some(n), k)?,
        None => st.max_tokens(None, "max_tokens")?,
    };
    Ok(GenerateParams {
        max_tokens,
        temperature: f.num("temperature", 0.0, 2.0)?.unwrap_or(1.0),
        top_p: match f.num("top_p", 0.0, 1.0)? {
            Some(p) if p <= 0.0 => {
                return Err(ApiError::bad("top_p", "`top_p` must be greater than 0"))
            }
            Some(p) => p,
            None => 1.0,
        },
        top_k: f
            .int("top_k", -1, 1 << 20)?
            .map_or(0, |k| k.max(0) as usize),
        min_p: f.num("min_p", 0.0, 1.0)?.unwrap_or(0.0),
        repeat_penalty: f.num("repetition_penalty", 0.01, 100.0)?.unwrap_or(1.0),
        presence_penalty: f.num("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        frequency_penalty: f.num("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        seed: f.seed("seed")?,
        stop: f.stop("stop")?,
        ..Default::default()
    })
}

fn usage_json(g: &Generation) -> Value {
    json!({
        "prompt_tokens": g.usage.prompt_tokens,
        "completion_tokens": g.usage.completion_tokens,
        "total_tokens": g.usage.prompt_tokens + g.usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": g.usage.cached_prompt_tokens},
    })
}

fn tool_calls_json(calls: &[ToolCall], ids: &[String]) -> Value {
    Value::from(
        calls
            .iter()
            .zip(ids)
            .map(|(c, id)| {
                json!({"id": id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect::<Vec<_>>(),
    )
}

fn finish_reason(finish: FinishReason, calls: bool) -> &'static str {
    match (finish, calls) {
        (FinishReason::Stop, true) => "tool_calls",
        (f, _) => f.as_str(),
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    respond(D, chat_inner(st, body).await)
}

/// A chat request's body as a [`Request`], and its `stream` and
/// `stream_options.include_usage`.
fn read_chat(st: &Shared, v: &Value) -> ApiResult<(Request, bool, bool)> {
    let f = Fields::of(v, "")?;
    st.check_model(f.str("model")?, D)?;
    params::refuse_unsupported(&f)?;
    let mut req = Request::read(
        st,
        &f,
        D,
        Input::Chat(params::messages(&f)?),
        sampling(st, &f, &["max_tokens", "max_completion_tokens"])?,
    )?;
    req.tools = params::tools(&f)?;
    req.format = params::constraint(&f, false, &req.objects)?;
    req.thinking = params::openai_thinking(&f)?;
    Ok((req, f.bool("stream")?.unwrap_or(false), include_usage(&f)?))
}

/// `stream_options.include_usage` (default false).
fn include_usage(f: &Fields) -> ApiResult<bool> {
    Ok(match f.obj("stream_options")? {
        Some(o) => o.bool("include_usage")?.unwrap_or(false),
        None => false,
    })
}

async fn chat_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, D)?;
    let (req, stream, include_usage) = read_chat(&st, &v)?;
    let s = pipeline::start(&st, req).await?;
    let id = new_id("chatcmpl-");
    let created = unix_now();
    let model = st.model_id.clone();
    if stream {
        return Ok(s.stream_with(|stream, parser| {
            chat_stream(stream, id, created, model, parser, include_usage).into_response()
        }));
    }
    let a = s.answer().await?;
    let g = &a.generation;
    let ids: Vec<String> = a.calls.iter().map(|_| new_id("call_")).collect();
    let mut message = json!({
        "role": "assistant",
        "content": if a.content.is_empty() && !a.calls.is_empty() { Value::Null } else { json!(a.content) },
        "refusal": null,
    });
    if !a.calls.is_empty() {
        message["tool_calls"] = tool_calls_json(&a.calls, &ids);
    }
    if let Some(r) = &g.reasoning {
        message["reasoning_content"] = json!(r);
    }
    let r = Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "ruvllm",
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(g.finish, !a.calls.is_empty()),
        }],
        "usage": usage_json(g),
        "ruvllm": extension(g),
    }))
    .into_response();
    Ok(a.headers(r))
}

fn sse(v: &Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(v.to_string()))
}

fn chat_stream(
    mut s: TextStream,
    id: String,
    created: u64,
    model: String,
    mut parser: ToolParser,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = channel();
    tokio::spawn(async move {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": id, "object": "chat.completion.chunk", "created": created,
                   "model": model, "system_fingerprint": "ruvllm",
                   "choices": [{"index": 0, "delta": delta, "logprobs": null,
                                "finish_reason": finish}]})
        };
        if tx
            .send(sse(&chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            )))
            .await
            .is_err()
        {
            return;
        }
        let mut ids: Vec<String> = Vec::new();
        while let Some(item) = next_chunk(&mut s, &tx).await {
            let text = match item {
                Ok(t) => t,
                Err(e) => {
                    let err = ApiError::from_runtime(&e, "");
                    let _ = tx.send(sse(&err.body())).await;
                    let _ = tx.send(Ok(Event::default().data("[DONE]"))).await;
                    return;
                }
            };
            for ev in parser.push(&text) {
                let delta = match ev {
                    ToolEvent::Reasoning(t) => json!({"reasoning_content": t}),
                    ToolEvent::Text(t) => json!({"content": t}),
                    ToolEvent::CallStart { index, name } => {
                        let cid = new_id("call_");
                        ids.push(cid.clone());
                        json!({"tool_calls": [{"index": index, "id": cid, "type": "function",
                                               "function": {"name": name, "arguments": ""}}]})
                    }
                    ToolEvent::CallArgs { index, fragment } => {
                        json!({"tool_calls": [{"index": index,
                                               "function": {"arguments": fragment}}]})
                    }
                };
                if tx.send(sse(&chunk(delta, Value::Null))).await.is_err() {
                    return;
                }
            }
        }
        for ev in parser.finish() {
            let delta = match ev {
                ToolEvent::Text(t) => json!({"content": t}),
                ToolEvent::Reasoning(t) => json!({"reasoning_content": t}),
                _ => continue,
            };
            let _ = tx.send(sse(&chunk(delta, Value::Null))).await;
        }
        let g = match s.outcome() {
            Some(Ok(g)) => g,
            _ => return,
        };
        let fr = finish_reason(g.finish, !parser.calls().is_empty());
        let mut last = chunk(json!({}), json!(fr));
        last["ruvllm"] = extension(&g);
        let _ = tx.send(sse(&last)).await;
        if include_usage {
            let _ = tx
                .send(sse(&json!({"id": id, "object": "chat.completion.chunk",
                    "created": created, "model": model, "system_fingerprint": "ruvllm",
                    "choices": [], "usage": usage_json(&g)})))
                .await;
        }
        let _ = tx.send(Ok(Event::default().data("[DONE]"))).await;
    });
    Sse::new(rx)
}

/// `POST /v1/completions` (legacy text completion: the prompt is used as is, no chat
/// template).
pub async fn completions(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(D, completions_inner(st, body).await)
}

async fn completions_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, D)?;
    let f = Fields::of(&v, "")?;
    st.check_model(f.str("model")?, D)?;
    params::refuse_unsupported(&f)?;
    let prompt = match f.get("prompt") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            a[0].as_str().unwrap_or_default().to_string()
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::bad(
                "prompt",
                "only one prompt per request is supported (a string)",
            ))
        }
        Some(_) => return Err(ApiError::bad("prompt", "`prompt` must be a string")),
        None => return Err(ApiError::bad("prompt", "`prompt` is required")),
    };
    let mut gp = sampling(&st, &f, &["max_tokens"])?;
    if f.get("max_tokens").is_none() {
        // OpenAI's legacy default.
        gp.max_tokens = 16;
    }
    let mut req = Request::read(&st, &f, D, Input::Raw(prompt), gp)?;
    req.format = params::constraint(&f, false, &req.objects)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = include_usage(&f)?;
    let s = pipeline::start(&st, req).await?;
    let id = new_id("cmpl-");
    let created = unix_now();
    let model = st.model_id.clone();
    if !stream {
        let a = s.answer().await?;
        let g = &a.generation;
        let r = Json(json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "system_fingerprint": "ruvllm",
            "choices": [{"text": a.content, "index": 0, "logprobs": null,
                         "finish_reason": g.finish.as_str()}],
            "usage": usage_json(g),
            "ruvllm": extension(g),
        }))
        .into_response();
        return Ok(a.headers(r));
    }
    Ok(s.stream_with(|mut s, _| {
        let (tx, rx) = channel();
        tokio::spawn(async move {
            let chunk = |text: &str, finish: Value| {
                json!({"id": id, "object": "text_completion", "created": created, "model": model,
                   "system_fingerprint": "ruvllm",
                   "choices": [{"text": text, "index": 0, "logprobs": null,
                                "finish_reason": finish}]})
            };
            while let Some(item) = next_chunk(&mut s, &tx).await {
                let ev = match item {
                    Ok(t) => sse(&chunk(&t, Value::Null)),
                    Err(e) => sse(&ApiError::from_runtime(&e, "").body()),
                };
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
            if let Some(Ok(g)) = s.outcome() {
                let mut last = chunk("", json!(g.finish.as_str()));
                last["ruvllm"] = extension(&g);
                let _ = tx.send(sse(&last)).await;
                if include_usage {
                    let _ = tx
                        .send(sse(&json!({"id": id, "object": "text_completion",
                        "created": created, "model": model, "choices": [],
                        "usage": usage_json(&g)})))
                        .await;
                }
            }
            let _ = tx.send(Ok(Event::default().data("[DONE]"))).await;
        });
        Sse::new(rx).into_response()
    }))
}

/// `GET /v1/models`.
pub async fn models(State(st): State<Shared>) -> Json<Value> {
    let data: Vec<Value> = st
        .model_names()
        .into_iter()
        .map(|id| json!({"id": id, "object": "model", "created": st.created, "owned_by": "ruvllm"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}
