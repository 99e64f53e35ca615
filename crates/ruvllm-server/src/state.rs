//! What every handler shares: the server's settings, its state (the scheduler, counters,
//! the Responses store), reading a request body, and the few things every dialect adds to
//! an answer (the `ruvllm` extension object, the budget and warning headers, ids).
//!
//! Owns: [`ServerConfig`], [`AppState`], [`Metrics`], [`json_body`]. Uses: `error`,
//! `params` (a request's object policy), `conversations` (the Responses store).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::Response;
use ruvllm_runtime::reasoning::{ReasoningMarkers, Thinking};
use ruvllm_runtime::{
    BatchBackend, GenerateParams, Prompt, Scheduler, SchedulerOptions, Serving, TextStream,
};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Dialect};
use crate::{conversations, params};

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
    pub(crate) requests: std::sync::Mutex<std::collections::BTreeMap<(String, u16), u64>>,
    /// Requests refused with 503.
    pub rejected_busy: AtomicU64,
}

impl Metrics {
    pub(crate) fn count(&self, path: &str, status: u16) {
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
    pub responses: conversations::Store,
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
            responses: conversations::Store::default(),
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

/// Adds the `x-ruvllm-constraint` header saying where the constraint came from.
pub fn with_note(mut r: Response, note: Option<String>) -> Response {
    if let Some(n) = note {
        if let Ok(v) = axum::http::HeaderValue::from_str(&n.replace(['\r', '\n'], " ")) {
            r.headers_mut().insert("x-ruvllm-constraint", v);
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

/// A random id with a prefix (`chatcmpl-`, `call_`, ...).
pub fn new_id(prefix: &str) -> String {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let s: String = (0..24)
        .map(|_| ALPHA[rand::random_range(0..ALPHA.len())] as char)
        .collect();
    format!("{prefix}{s}")
}
