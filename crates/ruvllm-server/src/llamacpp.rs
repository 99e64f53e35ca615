//! llama.cpp's server dialect: `POST /completion`.
//!
//! The prompt is used as is (no chat template), `grammar` is GBNF text and `json_schema` a
//! schema; `n_predict`, `temperature`, `top_k`, `top_p`, `min_p`, `repeat_penalty`,
//! `stop`, `seed`, `stream`. The answer carries `content`, `stop`, `stop_type`
//! (`eos`, `limit`, `word`), token counts and `timings`; streaming sends
//! `data: {"content": ..., "stop": false}` events and a final one with `stop: true`.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ruvllm_runtime::{FinishReason, GenerateParams, Generation};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Dialect};
use crate::params::{self, Fields};
use crate::pipeline::{self, respond, Input, Request};
use crate::state::{extension, json_body, Shared};
use crate::stream::{channel, next_chunk};

const D: Dialect = Dialect::LlamaCpp;

fn final_fields(g: &Generation, model: &str, stop: &[String]) -> Value {
    // A stop sequence ended it when the output stopped before the model or grammar did;
    // the runtime reports both as `stop`, so tell them apart by the configured words.
    let stop_type = match g.finish {
        FinishReason::Length => "limit",
        FinishReason::Stop if !stop.is_empty() && g.usage.completion_tokens > 0 => "word",
        FinishReason::Stop => "eos",
    };
    let ms = |s: f64| s * 1e3;
    let decode = g.usage.decode_secs();
    json!({
        "content": g.text,
        "stop": true,
        "stop_type": stop_type,
        "model": model,
        "tokens_predicted": g.usage.completion_tokens,
        "tokens_evaluated": g.usage.prompt_tokens,
        "truncated": false,
        "ruvllm": extension(g),
        "timings": {
            "prompt_n": g.usage.prompt_tokens,
            "prompt_ms": ms(g.usage.prompt_secs),
            "prompt_per_second": if g.usage.prompt_secs > 0.0 { g.usage.prompt_tokens as f64 / g.usage.prompt_secs } else { 0.0 },
            "predicted_n": g.usage.completion_tokens,
            "predicted_ms": ms(decode),
            "predicted_per_second": g.usage.decode_tokens_per_sec(),
        },
    })
}

/// `POST /completion`.
pub async fn completion(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    respond(D, inner(st, body).await)
}

async fn inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, D)?;
    let f = Fields::of(&v, "")?;
    let prompt = match f.get("prompt") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | None => {
            return Err(ApiError::bad(
                "prompt",
                "`prompt` is required (a non-empty string)",
            ))
        }
        Some(_) => {
            return Err(ApiError::bad(
                "prompt",
                "`prompt` must be a string (token arrays are not supported)",
            ))
        }
    };
    let max_tokens = match f.int("n_predict", -1, i64::MAX)? {
        None | Some(-1) => st.config.default_max_tokens,
        Some(0) => return Err(ApiError::bad("n_predict", "`n_predict` must not be 0")),
        Some(n) => st.max_tokens(Some(n), "n_predict")?,
    };
    let stop = f.stop("stop")?;
    let gp = GenerateParams {
        max_tokens,
        temperature: f.num("temperature", 0.0, 100.0)?.unwrap_or(0.8),
        top_k: f
            .int("top_k", -1, 1 << 20)?
            .map_or(40, |k| k.max(0) as usize),
        top_p: f
            .num("top_p", 0.0, 1.0)?
            .map_or(0.95, |p| if p <= 0.0 { 1.0 } else { p }),
        min_p: f.num("min_p", 0.0, 1.0)?.unwrap_or(0.05),
        repeat_penalty: f.num("repeat_penalty", 0.0, 100.0)?.map_or(1.0, |r| {
            if r <= 0.0 {
                1.0
            } else {
                r
            }
        }),
        presence_penalty: f.num("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        frequency_penalty: f.num("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0),
        seed: f
            .seed("seed")?
            .filter(|&s| s != u32::MAX as u64 && s != u64::MAX),
        stop: stop.clone(),
        ..Default::default()
    };
    let mut req = Request::read(&st, &f, D, Input::Raw(prompt), gp)?;
    req.format = params::constraint(&f, false, &req.objects)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let s = pipeline::start(&st, req).await?;
    let model = st.model_id.clone();
    if !stream {
        let a = s.answer().await?;
        let r = Json(final_fields(&a.generation, &model, &stop)).into_response();
        return Ok(a.headers(r));
    }
    Ok(s.stream_with(|mut s, _| {
        let (tx, rx) = channel::<Result<Event, Infallible>>();
        tokio::spawn(async move {
            let ev = |v: Value| Ok(Event::default().data(v.to_string()));
            while let Some(item) = next_chunk(&mut s, &tx).await {
                let v = match item {
                    Ok(t) => json!({"content": t, "stop": false}),
                    Err(e) => ApiError::from_runtime(&e, "").dialect(D).body(),
                };
                if tx.send(ev(v)).await.is_err() {
                    return;
                }
            }
            if let Some(Ok(g)) = s.outcome() {
                let mut last = final_fields(&g, &model, &stop);
                last["content"] = json!("");
                let _ = tx.send(ev(last)).await;
            }
        });
        Sse::new(rx).into_response()
    }))
}
