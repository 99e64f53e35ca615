//! `ruvllm serve`: the OpenAI, Ollama and llama.cpp HTTP dialects on a local model.

use anyhow::{bail, Context, Result};
use clap::Args;
use ruvllm_runtime::{BatchBackend, SchedulerOptions};
use ruvllm_server::params::ObjectPolicy;
use ruvllm_server::ServerConfig;

use crate::generate::{BackendKind, ModelArgs};

/// `ruvllm serve` flags.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to bind. The default is loopback only; use 0.0.0.0 to listen on every
    /// interface (then set --api-key).
    #[arg(long, default_value_t = ServerConfig::default().host)]
    host: String,
    /// Port (0 picks a free one; the chosen address is printed).
    #[arg(long, default_value_t = ServerConfig::default().port)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health
    /// (default: $RUVLLM_API_KEY when set).
    #[arg(long)]
    api_key: Option<String>,
    /// Generations decoded together in one batch.
    #[arg(long, default_value_t = SchedulerOptions::default().max_batch)]
    max_batch: usize,
    /// Requests queued beyond the batch before new ones get 503 + Retry-After.
    #[arg(long, default_value_t = SchedulerOptions::default().max_waiting)]
    max_queue: usize,
    /// Largest request body in bytes (larger: 413).
    #[arg(long, default_value_t = ServerConfig::default().max_body_bytes)]
    max_body_bytes: usize,
    /// max_tokens when a request gives none.
    #[arg(long, default_value_t = ServerConfig::default().default_max_tokens)]
    default_max_tokens: usize,
    /// Largest max_tokens a request may ask for (more: 400).
    #[arg(long, default_value_t = ServerConfig::default().max_tokens_limit)]
    max_tokens_limit: usize,
    /// MiB of prompt KV caches kept for reuse by prompts sharing a prefix (system
    /// messages, tool lists); 0 turns prefix caching off. (The llama.cpp backend keeps
    /// two prompts, each in a sequence of --context positions.)
    #[arg(long, default_value_t = ruvllm_runtime::backends::candle::DEFAULT_PREFIX_CACHE_BYTES >> 20)]
    prefix_cache_mb: usize,
    /// Apply a JSON Schema declared in a system prompt (instructor's JSON/MD_JSON modes,
    /// LangChain output parsers) to JSON-mode requests, when the prompt shows exactly one
    /// (off by default; a request's `prompt_schema` boolean decides for itself).
    #[arg(long)]
    prompt_schema: bool,
    /// Another name the model answers to (repeatable), besides its file stem.
    #[arg(long = "alias", value_name = "NAME")]
    aliases: Vec<String>,
    /// Answer under any model name a request gives (as llama-server does).
    #[arg(long)]
    any_model: bool,
    /// Most reasoning tokens before `</think>` is forced, for chat templates with a
    /// reasoning section, when a request sets no budget (default: only max_tokens).
    #[arg(long, value_name = "TOKENS")]
    reasoning_budget: Option<usize>,
    /// Objects whose schema declares properties but leaves additionalProperties unsaid:
    /// `dialect` closes them where that field's own server does (Ollama `format`,
    /// llama.cpp `json_schema`, Ollama tools) and leaves them open elsewhere (OpenAI,
    /// vLLM, SGLang fields); `open` and `closed` decide for every field. OpenAI `strict`
    /// always closes them; a request's `additional_properties` (a boolean) overrides.
    #[arg(long, value_enum, default_value_t = Objects::Dialect)]
    additional_properties: Objects,
}

/// `--additional-properties` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objects {
    /// As each dialect's own server does.
    Dialect,
    /// The JSON Schema default: any other key too.
    Open,
    /// Only the declared properties.
    Closed,
}

/// Loads the model and serves until ctrl-c.
pub fn run(
    a: ServeArgs,
    registry: Option<std::sync::Arc<ruvllm_engine::schema::SchemaRegistry>>,
) -> Result<()> {
    if a.max_batch == 0 {
        bail!("--max-batch must be at least 1");
    }
    let config = ServerConfig {
        host: a.host,
        port: a.port,
        api_key: a
            .api_key
            .or_else(|| std::env::var("RUVLLM_API_KEY").ok())
            .filter(|k| !k.is_empty()),
        max_body_bytes: a.max_body_bytes,
        default_max_tokens: a.default_max_tokens,
        max_tokens_limit: a.max_tokens_limit,
        scheduler: SchedulerOptions {
            max_batch: a.max_batch,
            max_waiting: a.max_queue,
            ..Default::default()
        },
        prompt_schema: a.prompt_schema,
        aliases: a.aliases,
        any_model: a.any_model,
        reasoning_budget: a.reasoning_budget,
        objects: match a.additional_properties {
            Objects::Dialect => ObjectPolicy::Dialect,
            Objects::Open => ObjectPolicy::Open,
            Objects::Closed => ObjectPolicy::Closed,
        },
        registry,
    };
    match a.model.backend_kind()? {
        BackendKind::Auto | BackendKind::Candle => {
            serve(a.model.load_with(Some(a.prefix_cache_mb << 20))?, config)
        }
        BackendKind::Llama => {
            // One llama.cpp sequence per batch place, and two cached prompts unless
            // prefix caching is off.
            let slots = if a.prefix_cache_mb == 0 { 0 } else { 2 };
            serve(a.model.load_llama(a.max_batch, slots)?, config)
        }
    }
}

fn serve<B: BatchBackend>(backend: B, config: ServerConfig) -> Result<()> {
    let model = backend.name().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(ruvllm_server::serve(backend, config, |addr| {
        eprintln!("ruvllm: serving {model} on http://{addr} (OpenAI: http://{addr}/v1, Anthropic: http://{addr}/v1/messages, Ollama: http://{addr}/api, llama.cpp: http://{addr}/completion)");
        // Which CPU kernels run (GET /props has the same under system_info).
        eprintln!("ruvllm: cpu: built for {}", ruvllm_engine::cpu::built_for());
    }))
    .context("serving")?;
    Ok(())
}
