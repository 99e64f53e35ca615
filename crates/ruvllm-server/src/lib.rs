//! `ruvllm serve`: the runtime behind the HTTP APIs people already use.
//!
//! One loaded model, one [`Scheduler`] (continuous batching), and three dialects on top:
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
pub mod error;
pub mod llamacpp;
pub mod ollama;
pub mod openai;
pub mod params;
pub mod probe;
pub mod responses;
pub mod stream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ruvllm_runtime::reasoning::{ReasoningMarkers, Thinking};
use ruvllm_runtime::{
    BatchBackend, GenerateParams, Prompt, Scheduler, SchedulerOptions, Serving, TextStream,
};
use serde_json::{json, Value};

pub use error::{ApiError, ApiResult, Dialect};

/// Server settings (the `ruvllm serve` flags).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind (default 127.0.0.1: loopback only).
    pub host: String,
    /// Port (default 8080; 0 picks a free one).
    pub port: u16,
    /// Bearer token required on every endpoint but `/health` when set.
    pub api_key: Option<String>,
    /// Largest request body in bytes (default 4 MiB; larger = 413).
    pub max_body_bytes: usize,
    /// `max_tokens` when a request gives none (default 1024).
    pub default_max_tokens: usize,
    /// Largest `max_tokens` a request may ask for (default 8192; more = 400).
    pub max_tokens_limit: usize,
    /// Batch and queue sizes.
    pub scheduler: SchedulerOptions,
    /// Apply a JSON Schema declared in the system prompt to JSON-mode requests and to
    /// requests that ask for a ```json block (default off: `--prompt-schema`; a request's
    /// `prompt_schema` boolean decides for itself; see [`params::apply_prompt_schema`]).
    pub prompt_schema: bool,
    /// What objects whose schema declares `properties` but leaves `additionalProperties`
    /// unsaid accept (default: as each dialect's own server does; see
    /// [`params::ObjectPolicy`]). A request's `additional_properties` (a boolean) decides
    /// for that request.
    pub objects: params::ObjectPolicy,
    /// Schemas that request schemas may `$ref` by URI (`--schema-registry`); nothing is
    /// ever fetched over the network.
    pub registry: Option<Arc<ruvllm_engine::schema::SchemaRegistry>>,
    /// More names the model answers to (`--alias NAME`), besides its file stem.
    pub aliases: Vec<String>,
    /// Answer under any model name a request gives (`--any-model`), as llama-server does.
    pub any_model: bool,
    /// Most reasoning tokens before the end marker is forced, for requests that set no
    /// budget of their own (`--reasoning-budget`; `None`: only `max_tokens` bounds it).
    pub reasoning_budget: Option<usize>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            api_key: None,
            max_body_bytes: 4 << 20,
            default_max_tokens: 1024,
            max_tokens_limit: 8192,
            scheduler: SchedulerOptions::default(),
            prompt_schema: false,
            objects: params::ObjectPolicy::Dialect,
            registry: None,
            aliases: Vec::new(),
            any_model: false,
            reasoning_budget: None,
        }
    }
}

/// Request counters by endpoint and outcome, for `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: std::sync::Mutex<std::collections::BTreeMap<(String, u16), u64>>,
    /// Requests refused with 503.
    pub rejected_busy: AtomicU64,
}

impl Metrics {
    fn count(&self, path: &str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((path.to_string(), status)).or_default() += 1;
    }
}

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The batch scheduler (and through it the model).
    pub sched: Arc<dyn Serving>,
    /// The model id (the GGUF file stem).
    pub model_id: String,
    /// Settings.
    pub config: ServerConfig,
    /// Request counters.
    pub metrics: Metrics,
    /// Unix time the server started.
    pub created: u64,
    /// When the server started.
    pub started: Instant,
    /// Recent Responses API conversations, for `previous_response_id`.
    pub responses: responses::Store,
}

/// Shared state handle.
pub type Shared = Arc<AppState>;

impl AppState {
    /// State for `backend` under `config` (starts the scheduler thread).
    pub fn new<B: BatchBackend>(backend: B, config: ServerConfig) -> AppState {
        AppState {
            model_id: backend.name().to_string(),
            sched: Arc::new(Scheduler::new(backend, config.scheduler.clone())),
            config,
            metrics: Metrics::default(),
            created: unix_now(),
            started: Instant::now(),
            responses: responses::Store::default(),
        }
    }

    /// The names the model answers to: its id (the file stem), then the aliases.
    pub fn model_names(&self) -> Vec<&str> {
        let mut v = vec![self.model_id.as_str()];
        v.extend(self.config.aliases.iter().map(String::as_str));
        v
    }

    /// Checks a request's `model` field: the served model's id or an alias (Ollama's
    /// `:latest` tag and a `.gguf` suffix are accepted), or any name under `--any-model`.
    /// A missing model means the served one.
    pub fn check_model(&self, model: Option<&str>, d: Dialect) -> ApiResult<()> {
        match model {
            None | Some("") => Ok(()),
            _ if self.config.any_model => Ok(()),
            Some(m) => {
                let m = m.strip_suffix(":latest").unwrap_or(m);
                let m = m.strip_suffix(".gguf").unwrap_or(m);
                if self.model_names().contains(&m) {
                    Ok(())
                } else {
                    Err(ApiError {
                        param: Some("model".into()),
                        ..ApiError::status(
                            StatusCode::NOT_FOUND,
                            "invalid_request_error",
                            format!(
                                "the model {m:?} does not exist; this server serves {:?} \
                                 (more names: --alias, or --any-model)",
                                self.model_names()
                            ),
                        )
                        .code("model_not_found")
                    }
                    .dialect(d))
                }
            }
        }
    }

    /// The object policy of a request (see [`ServerConfig::objects`]).
    pub fn objects(&self, f: &params::Fields) -> ApiResult<params::Objects> {
        params::Objects::of(self.config.objects, self.config.registry.clone(), f)
    }

    /// Budget-aware decoding for a request: its `budget_aware` field (a boolean; Ollama
    /// requests may also put it in `options`, where their other knobs are), on by default
    /// (see [`GenerateParams::budget_aware`]).
    pub fn budget_aware(&self, f: &params::Fields, ollama: bool) -> ApiResult<bool> {
        if let Some(b) = f.bool("budget_aware")? {
            return Ok(b);
        }
        if ollama {
            if let Some(b) = f
                .obj("options")?
                .map(|o| o.bool("budget_aware"))
                .transpose()?
            {
                return Ok(b.unwrap_or(true));
            }
        }
        Ok(true)
    }

    /// Reasoning settings from a request: `enabled` as the dialect's field says (`None`:
    /// the template's default, on), `budget` as asked or the server's
    /// `--reasoning-budget`.
    pub fn thinking(&self, enabled: Option<bool>, budget: Option<usize>) -> Thinking {
        Thinking {
            enabled,
            budget: budget.or(self.config.reasoning_budget),
        }
    }

    /// The reasoning markers a generation of `prompt` under `params` begins inside (the
    /// chat template's, unless reasoning is off). Streams split reasoning from content
    /// with them.
    pub fn reasoning(&self, prompt: &Prompt, params: &GenerateParams) -> Option<ReasoningMarkers> {
        self.sched.model().reasoning_for(prompt, params).cloned()
    }

    /// The tool-call syntax the model writes (its chat template's family).
    pub fn call_format(&self) -> ruvllm_runtime::call_format::CallFormat {
        self.sched.model().call_format()
    }

    /// `max_tokens` from a request value (`None` = the default), bounded by the limit.
    pub fn max_tokens(&self, asked: Option<i64>, param: &str) -> ApiResult<usize> {
        match asked {
            None => Ok(self.config.default_max_tokens),
            Some(n) if n < 1 => Err(ApiError::bad(
                param,
                format!("`{param}` must be at least 1"),
            )),
            Some(n) if n as u64 > self.config.max_tokens_limit as u64 => Err(ApiError::bad(
                param,
                format!(
                    "`{param}` is {n}; this server allows at most {} (--max-tokens-limit)",
                    self.config.max_tokens_limit
                ),
            )),
            Some(n) => Ok(n as usize),
        }
    }

    /// Starts a generation through the scheduler: a place (503 when full), then the
    /// start on a blocking thread (400 for a bad prompt, schema or grammar, naming
    /// `constraint_param` for constraint errors).
    pub async fn start(
        self: &Arc<Self>,
        prompt: Prompt,
        params: GenerateParams,
        constraint_param: String,
    ) -> ApiResult<TextStream> {
        let ticket = self.sched.try_reserve().ok_or_else(|| {
            self.metrics.rejected_busy.fetch_add(1, Ordering::Relaxed);
            ApiError::from_runtime(
                &ruvllm_runtime::RuntimeError::Busy {
                    limit: self.sched.options().max_batch + self.sched.options().max_waiting,
                },
                "",
            )
        })?;
        let me = self.clone();
        let stream = tokio::task::spawn_blocking(move || me.sched.start(ticket, &prompt, &params))
            .await
            .map_err(|e| {
                ApiError::status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    e.to_string(),
                )
            })?
            .map_err(|e| ApiError::from_runtime(&e, &constraint_param))?;
        Ok(stream)
    }
}

/// Seconds since the Unix epoch.
/// The `ruvllm` extension object every dialect adds to a finished answer (the last chunk
/// of a stream): `budget_closed`, whether budget-aware decoding shaped the end of a
/// complete output (see [`ruvllm_runtime::Generation::budget_closed`]), and
/// `budget_steps`, at how many steps; and, when the constraint compiled with warnings
/// (an unknown `format`, not enforced), `warnings`, each `POINTER: message`.
pub fn extension(g: &ruvllm_runtime::Generation) -> Value {
    let mut v = json!({"budget_closed": g.budget_closed, "budget_steps": g.usage.budget_steps});
    if !g.warnings.is_empty() {
        v["warnings"] = json!(g.warnings);
    }
    v
}

/// Adds `x-ruvllm-budget-closed: true` to a non-streamed answer the budget closed, and
/// `x-ruvllm-warning` (the warnings joined by `; `) to one whose constraint compiled with
/// warnings.
pub fn with_budget_header(mut r: Response, g: &ruvllm_runtime::Generation) -> Response {
    if g.budget_closed {
        r.headers_mut().insert(
            "x-ruvllm-budget-closed",
            axum::http::HeaderValue::from_static("true"),
        );
    }
    if !g.warnings.is_empty() {
        let text = g.warnings.join("; ").replace(['\r', '\n'], " ");
        if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
            r.headers_mut().insert("x-ruvllm-warning", v);
        }
    }
    r
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A request body as JSON: 413 when over the limit, 400 when not JSON (naming line and
/// column) or not UTF-8.
pub fn json_body(body: Result<Bytes, BytesRejection>, d: Dialect) -> ApiResult<Value> {
    let bytes = body.map_err(|rej| {
        let status = rej.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::status(
                status,
                "invalid_request_error",
                "the request body is over the size limit (server flag --max-body-bytes)",
            )
            .code("request_too_large")
        } else {
            ApiError::status(status, "invalid_request_error", rej.body_text())
        }
        .dialect(d)
    })?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        ApiError::bad(
            "body",
            format!("the body is not UTF-8 (byte {})", e.valid_up_to()),
        )
        .dialect(d)
    })?;
    let v: Value = serde_json::from_str(text).map_err(|e| {
        // serde_json stops at 128 nested arrays and objects (a bound on its stack):
        // named as the limit it is, not as a syntax error.
        let msg = if e.to_string().starts_with("recursion limit exceeded") {
            format!(
                "the body nests arrays and objects deeper than 128 levels, the limit \
                 (line {} column {})",
                e.line(),
                e.column()
            )
        } else {
            format!("the body is not JSON: {e}")
        };
        ApiError::bad("body", msg).dialect(d)
    })?;
    if !v.is_object() {
        return Err(ApiError::bad("body", "the body must be a JSON object").dialect(d));
    }
    Ok(v)
}

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

/// A random id with a prefix (`chatcmpl-`, `call_`, ...).
pub fn new_id(prefix: &str) -> String {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let s: String = (0..24)
        .map(|_| ALPHA[rand::random_range(0..ALPHA.len())] as char)
        .collect();
    format!("{prefix}{s}")
}
