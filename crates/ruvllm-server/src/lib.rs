//! `ruvllm serve`: the runtime behind the HTTP APIs people already use.
//!
//! One loaded model, one scheduler (continuous batching), and the dialects on top:
//!
//! | dialect | endpoints | module |
//! |---|---|---|
//! | OpenAI | `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models` | [`openai`] |
//! | OpenAI Responses | `POST /v1/responses` | [`responses`] |
//! | Ollama | `POST /api/chat`, `POST /api/generate`, `GET /api/tags`, `GET /api/version` | [`ollama`] |
//! | llama.cpp | `POST /completion` | [`llamacpp`] |
//! | Anthropic | `POST /v1/messages`, `POST /v1/messages/count_tokens` | [`anthropic`] |
//! | probes | `GET /v1/models/{id}`, `POST /api/show`, `GET /api/ps`, `POST /tokenize`, `POST /detokenize`, `GET /props` | [`probe`] |
//!
//! plus `GET /health` and `GET /metrics` (Prometheus text). Structured output may be asked
//! for in any dialect's spelling, including vLLM's (`structured_outputs`, `guided_*`) and
//! SGLang's (`regex`, `ebnf`); see [`params`].
//!
//! # Request life
//!
//! Every generating endpoint goes through one pipeline ([`pipeline`]): the dialect's
//! module reads its body into a [`pipeline::Request`], the pipeline turns it into a
//! prompt, parameters and a constraint and starts it, and the dialect writes the answer
//! back in its own shape. Shared state and body reading are in [`state`].
//!
//! The body is read as bytes (at most `max_body_bytes`, else 413) and parsed field by
//! field ([`params::Fields`]), so every mistake is a 400 naming its field. Then a place is
//! reserved in the scheduler (503 with `Retry-After` when full), the generation is
//! *started* on a blocking thread (prompt rendering, tokenization, constraint compilation:
//! schema and grammar errors are 400s here, before any streaming begins), and submitted.
//! Streams are Server-Sent Events (OpenAI, llama.cpp) or NDJSON (Ollama); when the client
//! goes away, the response stream is dropped, which drops the generation's stream, and the
//! scheduler frees the place at its next cycle.

#![warn(missing_docs)]

pub mod anthropic;
pub mod conversations;
pub mod error;
pub mod llamacpp;
pub mod ollama;
pub mod openai;
pub mod params;
pub mod pipeline;
pub mod probe;
pub mod responses;
pub mod state;
pub mod stream;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ruvllm_runtime::BatchBackend;
use serde_json::{json, Value};

use crate::state::{AppState, Shared};

pub use error::{ApiError, ApiResult, Dialect};
pub use state::{Metrics, ServerConfig};

async fn auth(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if let Some(key) = &st.config.api_key {
        if path != "/health" {
            // `Authorization: Bearer KEY`, or Anthropic's `x-api-key: KEY`.
            let bearer = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.strip_prefix("Bearer "));
            let x_api_key = req.headers().get("x-api-key").and_then(|h| h.to_str().ok());
            let ok = bearer
                .or(x_api_key)
                .is_some_and(|t| constant_time_eq(t.trim().as_bytes(), key.as_bytes()));
            if !ok {
                st.metrics.count(&path, 401);
                let d = dialect_of(&path);
                return ApiError::status(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "missing or wrong API key (send `Authorization: Bearer <key>`)",
                )
                .code("invalid_api_key")
                .dialect(d)
                .into_response();
            }
        }
    }
    let r = next.run(req).await;
    st.metrics.count(&path, r.status().as_u16());
    r
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn dialect_of(path: &str) -> Dialect {
    if path.starts_with("/v1/messages") {
        Dialect::Anthropic
    } else if path.starts_with("/v1/responses") {
        Dialect::Responses
    } else if path.starts_with("/api/") {
        Dialect::Ollama
    } else if matches!(path, "/completion" | "/tokenize" | "/detokenize" | "/props") {
        Dialect::LlamaCpp
    } else {
        Dialect::OpenAi
    }
}

async fn health(State(st): State<Shared>) -> Json<Value> {
    let s = st.sched.stats();
    Json(json!({"status": "ok", "model": st.model_id, "active": s.active, "waiting": s.waiting}))
}

async fn metrics(State(st): State<Shared>) -> impl IntoResponse {
    let s = st.sched.stats();
    let mut out = String::new();
    out.push_str("# HELP ruvllm_requests_total HTTP requests by path and status.\n");
    out.push_str("# TYPE ruvllm_requests_total counter\n");
    for ((path, status), n) in st
        .metrics
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        out.push_str(&format!(
            "ruvllm_requests_total{{path=\"{path}\",status=\"{status}\"}} {n}\n"
        ));
    }
    let (cached, cache_bytes) = st.sched.model().constraint_cache_usage();
    let engine = st.sched.model().engine().usage();
    let lines: [(&str, &str, &str, String); 16] = [
        (
            "ruvllm_generations_total",
            "counter",
            "Generations submitted.",
            s.submitted.to_string(),
        ),
        (
            "ruvllm_generations_cancelled_total",
            "counter",
            "Generations whose client went away.",
            s.cancelled.to_string(),
        ),
        (
            "ruvllm_generations_failed_total",
            "counter",
            "Generations that failed.",
            s.failed.to_string(),
        ),
        (
            "ruvllm_prompt_tokens_total",
            "counter",
            "Prompt tokens read.",
            s.prompt_tokens.to_string(),
        ),
        (
            "ruvllm_completion_tokens_total",
            "counter",
            "Output tokens produced.",
            s.completion_tokens.to_string(),
        ),
        (
            "ruvllm_mask_seconds_total",
            "counter",
            "Seconds spent computing grammar masks and forced text.",
            format!("{:.6}", s.mask_secs),
        ),
        (
            "ruvllm_forward_passes_total",
            "counter",
            "Batched forward passes.",
            s.forward_passes.to_string(),
        ),
        (
            "ruvllm_batched_sequences_total",
            "counter",
            "Sum of the batch sizes of all forward passes.",
            s.batched_sequences.to_string(),
        ),
        (
            "ruvllm_active_sequences",
            "gauge",
            "Generations running now.",
            s.active.to_string(),
        ),
        (
            "ruvllm_queue_depth",
            "gauge",
            "Generations waiting for a place in the batch.",
            s.waiting.to_string(),
        ),
        (
            "ruvllm_rejected_busy_total",
            "counter",
            "Requests answered 503 (queue full).",
            st.metrics.rejected_busy.load(Ordering::Relaxed).to_string(),
        ),
        (
            "ruvllm_constraint_cache_entries",
            "gauge",
            "Compiled constraints cached for reuse.",
            cached.to_string(),
        ),
        (
            "ruvllm_constraint_cache_bytes",
            "gauge",
            "Bytes of the cached constraints' token tables (bounded by --constraint-cache-mb).",
            cache_bytes.to_string(),
        ),
        (
            "ruvllm_engine_lexemes",
            "gauge",
            "Lexeme DFAs the engine keeps for later compiles (bounded by --lexeme-cache-mb).",
            engine.lexemes.to_string(),
        ),
        (
            "ruvllm_engine_dfa_bytes",
            "gauge",
            "Bytes of those lexeme DFAs.",
            engine.dfa_bytes.to_string(),
        ),
        (
            "ruvllm_engine_table_bytes",
            "gauge",
            "Bytes of token tables the engine keeps for later constraints (bounded by --table-cache-mb).",
            engine.table_bytes.to_string(),
        ),
    ];
    for (name, ty, help, v) in lines {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {ty}\n{name} {v}\n"
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

async fn not_found(req: Request) -> ApiError {
    let path = req.uri().path().to_string();
    ApiError::status(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no endpoint {} {path}", req.method()),
    )
    .dialect(dialect_of(&path))
}

/// A known path asked with a method it does not serve: 405 with the dialect's error body
/// (axum sets the `Allow` header).
async fn method_not_allowed(req: Request) -> ApiError {
    let path = req.uri().path().to_string();
    ApiError::status(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!(
            "{path} does not take {} (the Allow header lists what it takes)",
            req.method()
        ),
    )
    .dialect(dialect_of(&path))
}

/// The router with every endpoint, authentication and the body limit.
pub fn router(state: Shared) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/models", get(openai::models))
        .route("/v1/responses", post(responses::create))
        .route("/v1/messages", post(anthropic::messages_endpoint))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/models/{id}", get(probe::model))
        .route("/api/show", post(probe::show))
        .route("/api/ps", get(probe::ps))
        .route("/tokenize", post(probe::tokenize))
        .route("/detokenize", post(probe::detokenize))
        .route("/props", get(probe::props))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/version", get(ollama::version))
        .route("/completion", post(llamacpp::completion))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Binds `config.host:config.port` and serves until ctrl-c. Returns the bound address
/// through `on_bound` first (useful with port 0).
pub async fn serve<B: BatchBackend>(
    backend: B,
    config: ServerConfig,
    on_bound: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let addr = format!("{}:{}", config.host, config.port);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    on_bound(listener.local_addr()?);
    let state = Arc::new(AppState::new(backend, config));
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
