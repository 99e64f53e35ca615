//! The Ollama dialect: `POST /api/chat`, `POST /api/generate`, `GET /api/tags`,
//! `GET /api/version`.
//!
//! `format` is `"json"` or a JSON Schema object; sampling comes in `options`
//! (`temperature`, `top_p`, `top_k`, `min_p`, `num_predict`, `seed`, `stop`, `num_ctx`,
//! `repeat_penalty`). Streaming is the default, as in Ollama: newline-delimited JSON
//! objects with `done: false`, then one with `done: true`, `done_reason` and the counters
//! (durations in nanoseconds). Tool call `arguments` are JSON objects here. `think`
//! switches a chat template's reasoning section; the reasoning comes back in `thinking`.

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ruvllm_runtime::{
    GenerateParams, Generation, Message, TextStream, ToolCall, ToolEvent, ToolParser,
};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Dialect};
use crate::params::{self, Fields};
use crate::pipeline::{self, respond, Input, Request};
use crate::state::{extension, json_body, Shared};
use crate::stream::{channel, next_events};

const D: Dialect = Dialect::Ollama;

/// An RFC 3339 UTC timestamp for now (Ollama's `created_at`).
pub fn rfc3339_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (year, month, day) = ruvllm_runtime::chat::civil_date(secs);
    let t = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        t / 3600,
        (t / 60) % 60,
        t % 60,
        d.subsec_nanos()
    )
}

/// `options` to [`GenerateParams`].
fn options(st: &Shared, f: &Fields) -> ApiResult<GenerateParams> {
    let mut gp = GenerateParams {
        max_tokens: st.config.default_max_tokens,
        temperature: 0.8,
        ..Default::default()
    };
    let Some(o) = f.obj("options")? else {
        return Ok(gp);
    };
    if let Some(t) = o.num("temperature", 0.0, 100.0)? {
        gp.temperature = t;
    }
    if let Some(p) = o.num("top_p", 0.0, 1.0)? {
        gp.top_p = if p <= 0.0 { 1.0 } else { p };
    }
    if let Some(k) = o.int("top_k", -1, 1 << 20)? {
        gp.top_k = k.max(0) as usize;
    }
    if let Some(m) = o.num("min_p", 0.0, 1.0)? {
        gp.min_p = m;
    }
    if let Some(r) = o.num("repeat_penalty", 0.0, 100.0)? {
        gp.repeat_penalty = if r <= 0.0 { 1.0 } else { r };
    }
    if let Some(p) = o.num("presence_penalty", -2.0, 2.0)? {
        gp.presence_penalty = p;
    }
    if let Some(p) = o.num("frequency_penalty", -2.0, 2.0)? {
        gp.frequency_penalty = p;
    }
    gp.seed = o.seed("seed")?;
    gp.stop = o.stop("stop")?;
    match o.int("num_predict", -2, i64::MAX)? {
        // -1: "infinite", -2: fill the context; both mean "up to the server's default".
        None | Some(-1) | Some(-2) => {}
        Some(0) => return Err(ApiError::bad("options.num_predict", "must not be 0")),
        Some(n) => gp.max_tokens = st.max_tokens(Some(n), "options.num_predict")?,
    }
    o.int("num_ctx", 1, i64::MAX)?;
    Ok(gp)
}

fn done_fields(g: &Generation) -> Value {
    let ns = |s: f64| (s * 1e9) as u64;
    json!({
        "done": true,
        "done_reason": g.finish.as_str(),
        "total_duration": ns(g.usage.total_secs),
        "load_duration": 0,
        "prompt_eval_count": g.usage.prompt_tokens,
        "prompt_eval_duration": ns(g.usage.prompt_secs),
        "eval_count": g.usage.completion_tokens,
        "eval_duration": ns(g.usage.decode_secs()),
        "ruvllm": extension(g),
    })
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

fn ndjson_line(v: &Value) -> Result<Bytes, std::io::Error> {
    let mut s = v.to_string();
    s.push('\n');
    Ok(Bytes::from(s))
}

fn ollama_calls(calls: &[ToolCall]) -> Value {
    Value::from(
        calls
            .iter()
            .map(|c| {
                let args: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
                json!({"function": {"name": c.name, "arguments": args}})
            })
            .collect::<Vec<_>>(),
    )
}

/// Ollama messages: OpenAI's shape, with tool-call `arguments` as objects.
fn messages(f: &Fields) -> ApiResult<Vec<Message>> {
    let mut ms = params::messages(f)?;
    for m in &mut ms {
        if let Some(Value::Array(calls)) = &mut m.tool_calls {
            for c in calls.iter_mut() {
                if let Some(a) = c.pointer_mut("/function/arguments") {
                    if !a.is_string() {
                        *a = Value::String(a.to_string());
                    }
                }
            }
        }
    }
    Ok(ms)
}

/// `think`: `true` (or `"low"`, `"medium"`, `"high"`, as gpt-oss takes it) leaves a chat
/// template's reasoning section on, `false` turns it off; unset, the template decides
/// (on). The reasoning budget is `options.reasoning_budget`.
fn thinking(f: &Fields) -> ApiResult<(Option<bool>, Option<usize>)> {
    let enabled = match f.get("think") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(Value::String(s)) if matches!(s.as_str(), "low" | "medium" | "high") => Some(true),
        Some(_) => {
            return Err(ApiError::bad(
                "think",
                "`think` must be a boolean or one of \"low\", \"medium\", \"high\"",
            ))
        }
    };
    let budget = match f.obj("options")? {
        Some(o) => o.int("reasoning_budget", 0, 1 << 20)?.map(|n| n as usize),
        None => None,
    };
    Ok((enabled, budget))
}

/// `POST /api/chat`.
pub async fn chat(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    respond(D, chat_inner(st, body).await)
}

/// A chat body as a [`Request`], and its `stream` (default true).
fn read_chat(st: &Shared, v: &Value) -> ApiResult<(Request, bool)> {
    let f = Fields::of(v, "")?;
    st.check_model(f.str("model")?, D)?;
    let mut req = Request::read(st, &f, D, Input::Chat(messages(&f)?), options(st, &f)?)?;
    req.tools = params::tools(&f)?;
    req.tools_param = "ollama tools";
    req.format = params::constraint(&f, true, &req.objects)?;
    req.thinking = thinking(&f)?;
    Ok((req, f.bool("stream")?.unwrap_or(true)))
}

async fn chat_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, D)?;
    let (req, stream) = read_chat(&st, &v)?;
    let s = pipeline::start(&st, req).await?;
    let model = st.model_id.clone();
    if !stream {
        let a = s.answer().await?;
        let g = &a.generation;
        let mut message = json!({"role": "assistant", "content": a.content});
        if let Some(r) = &g.reasoning {
            message["thinking"] = json!(r);
        }
        if !a.calls.is_empty() {
            message["tool_calls"] = ollama_calls(&a.calls);
        }
        let head = json!({"model": model, "created_at": rfc3339_now(), "message": message});
        let r = Json(merge(head, done_fields(g))).into_response();
        return Ok(a.headers(r));
    }
    Ok(s.stream_with(|stream, parser| ndjson_stream(stream, parser, model, Shape::Chat)))
}

/// `POST /api/generate`: `prompt` (+ `system`) through the chat template, or as is with
/// `raw: true`.
pub async fn generate(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    respond(D, generate_inner(st, body).await)
}

async fn generate_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, D)?;
    let f = Fields::of(&v, "")?;
    st.check_model(f.str("model")?, D)?;
    let text = f.str("prompt")?.unwrap_or("").to_string();
    let model = st.model_id.clone();
    if text.is_empty() {
        // Ollama answers an empty prompt by loading the model: done at once.
        return Ok(Json(json!({"model": model, "created_at": rfc3339_now(),
                              "response": "", "done": true, "done_reason": "load"}))
        .into_response());
    }
    if f.str("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad(
            "suffix",
            "suffix (fill-in-the-middle) is not supported",
        ));
    }
    if f.get("images").is_some() {
        return Err(ApiError::bad("images", "images are not supported"));
    }
    let input = if f.bool("raw")? == Some(true) {
        Input::Raw(text)
    } else {
        let mut ms = Vec::new();
        if let Some(sys) = f.str("system")? {
            ms.push(Message::system(sys));
        }
        ms.push(Message::user(text));
        Input::Chat(ms)
    };
    let mut req = Request::read(&st, &f, D, input, options(&st, &f)?)?;
    req.format = params::constraint(&f, true, &req.objects)?;
    req.thinking = thinking(&f)?;
    let stream = f.bool("stream")?.unwrap_or(true);
    let s = pipeline::start(&st, req).await?;
    if !stream {
        let a = s.answer().await?;
        let g = &a.generation;
        let mut head = json!({"model": model, "created_at": rfc3339_now(), "response": a.content});
        if let Some(r) = &g.reasoning {
            head["thinking"] = json!(r);
        }
        let r = Json(merge(head, done_fields(g))).into_response();
        return Ok(a.headers(r));
    }
    Ok(s.stream_with(|stream, parser| ndjson_stream(stream, parser, model, Shape::Generate)))
}

/// What a streamed line carries: a chat `message` or a generate `response`.
#[derive(Clone, Copy)]
enum Shape {
    Chat,
    Generate,
}

/// A streamed answer, NDJSON: text and reasoning as they come, then a last line with the
/// counters (and, for a chat, the calls: each sent whole once its arguments are
/// complete, as Ollama clients expect object arguments).
fn ndjson_stream(
    mut s: TextStream,
    mut parser: ToolParser,
    model: String,
    shape: Shape,
) -> Response {
    let (tx, rx) = channel();
    tokio::spawn(async move {
        let line = |body: Value| merge(json!({"model": model, "created_at": rfc3339_now()}), body);
        loop {
            let (events, done) = match next_events(&mut s, &tx, &mut parser).await {
                Ok(x) => x,
                Err(e) => {
                    let _ = tx.send(ndjson_line(&json!({"error": e.to_string()}))).await;
                    return;
                }
            };
            for e in events {
                let body = match (shape, e) {
                    (Shape::Chat, ToolEvent::Text(t)) => {
                        json!({"message": {"role": "assistant", "content": t}})
                    }
                    (Shape::Chat, ToolEvent::Reasoning(t)) => {
                        json!({"message": {"role": "assistant", "content": "", "thinking": t}})
                    }
                    (Shape::Generate, ToolEvent::Text(t)) => json!({"response": t}),
                    (Shape::Generate, ToolEvent::Reasoning(t)) => {
                        json!({"response": "", "thinking": t})
                    }
                    _ => continue,
                };
                let l = line(merge(body, json!({"done": false})));
                if tx.send(ndjson_line(&l)).await.is_err() {
                    return;
                }
            }
            if done {
                break;
            }
        }
        let Some(Ok(g)) = s.outcome() else { return };
        let body = match shape {
            Shape::Chat => {
                let mut message = json!({"role": "assistant", "content": ""});
                let calls = parser.calls();
                if !calls.is_empty() {
                    message["tool_calls"] = ollama_calls(calls);
                }
                json!({"message": message})
            }
            Shape::Generate => json!({"response": ""}),
        };
        let _ = tx
            .send(ndjson_line(&merge(line(body), done_fields(&g))))
            .await;
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(rx),
    )
        .into_response()
}

/// `GET /api/tags`: the served model.
pub async fn tags(State(st): State<Shared>) -> Json<Value> {
    let cfg = st.sched.model().model_config().clone();
    Json(json!({"models": [{
        "name": format!("{}:latest", st.model_id),
        "model": format!("{}:latest", st.model_id),
        "modified_at": rfc3339_now(),
        "size": 0,
        "digest": "",
        "details": {
            "format": "gguf",
            "family": cfg.family.clone(),
            "families": [cfg.family.clone()],
            "parameter_size": "",
            "quantization_level": "",
        },
    }]}))
}

/// `GET /api/version`.
pub async fn version() -> Json<Value> {
    Json(json!({"version": "0.6.0"}))
}
