//! `ruvllm-bench e2e`: generation on a real model, end to end.
//!
//! * **Validity**: 30 MaskBench schemas (recursive, anyOf, enum, pattern, formats, oneOf,
//!   bounds) and 5 llama.cpp GBNF grammars, each at temperature 0.7 with several seeds and
//!   at each `max_tokens` asked (512 and 64 by default). A generation is **complete and
//!   valid** when it ends `stop` and parses and validates (schemas: `jsonschema`; grammars:
//!   the grammar recognizer, plus `serde_json` for the JSON ones); an output cut by the
//!   token limit is at best a **valid prefix**, and that is counted apart, never as valid.
//!   Each case's shortest completion (in tokens, from the engine) is reported: budget-aware
//!   decoding (on) must end complete and valid whenever the budget is at least it, and
//!   `length` (a valid prefix) otherwise. No schema output may contain runaway whitespace:
//!   a run longer than [`RUNAWAY_WS`] characters outside strings (schemas decode with no
//!   whitespace at all, which a validator cannot see). A grammar's whitespace is the
//!   grammar's own: the recognizer already judges it (`arithmetic.gbnf`'s `ws ::= [ \t\n]*`
//!   allows any run, and a base model may pad with it; the longest run is in the rows'
//!   `max_ws_run`). The per-step mask cost is reported
//!   apart near the end of the budget (where budget masks narrow the exact mask) and far
//!   from it.
//! * **Speed**: on schemas with fixed keys, decode tokens/s unconstrained (exactly N tokens,
//!   EOS ignored) vs constrained vs constrained with jump-forward, forward passes per output
//!   token and per 100 output bytes, and time to first token.
//! * **Raw decode vs llama.cpp**: a 16-token prompt then 128 greedy tokens, ours and
//!   `llama-bench -p 16 -n 128` on the same GGUF file, alternating, medians reported.
//! * **Constrained decode vs llama.cpp's own**: the speed schemas through `llama-server`'s
//!   `json_schema` (its grammar sampler), the same prompt text, beside ours with
//!   jump-forward.
//!
//! Every backend named by `--backends` (the llama.cpp backend, candle) runs the validity
//! and speed parts in turn and takes its turn in the raw-decode rounds, so the choice of
//! the default backend is measured in one run.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ruvllm_engine::{Grammar, Limits, Matcher};
use ruvllm_runtime::{
    FinishReason, GenerateParams, Generation, JsonModeConfig, JsonSchema, LlmBackend, ModelBackend,
    OutputConstraint, Prompt,
};
use serde_json::{json, Value};

/// The 30 MaskBench files of the validity run, with the feature each was picked for.
pub const SCHEMAS: &[(&str, &str)] = &[
    ("Github_easy---o83258.json", "recursive"),
    ("Github_easy---o58839.json", "recursive"),
    ("Github_easy---o69958.json", "recursive"),
    ("Github_easy---o78062.json", "recursive"),
    ("BFCL_multiple_109.json", "anyOf"),
    ("BFCL_multiple_130.json", "anyOf"),
    ("BFCL_multiple_141.json", "anyOf"),
    ("BFCL_multiple_155.json", "anyOf"),
    ("BFCL_multiple_157.json", "enum"),
    ("BFCL_multiple_167.json", "enum"),
    ("BFCL_multiple_185.json", "enum"),
    ("BFCL_multiple_81.json", "enum"),
    ("Github_easy---o10013.json", "pattern"),
    ("Github_easy---o12620.json", "pattern"),
    ("Github_easy---o17611.json", "pattern"),
    ("Github_easy---o17940.json", "pattern"),
    ("Github_easy---o10526.json", "format:date-time"),
    ("Github_easy---o21083.json", "format:date-time"),
    ("Github_easy---o10016.json", "format:email"),
    ("Github_easy---o10318.json", "format:uri"),
    ("Github_easy---o48879.json", "format:uuid"),
    ("BFCL_multiple_5.json", "format:date"),
    ("Github_easy---o13129.json", "oneOf"),
    ("Github_easy---o46142.json", "oneOf"),
    ("Github_easy---o10093.json", "integer bounds"),
    ("Github_easy---o21466.json", "integer bounds"),
    ("Github_easy---o21205.json", "minItems/maxItems"),
    ("Github_easy---o21735.json", "minItems/maxItems"),
    ("Github_easy---o12626.json", "plain object"),
    ("Github_easy---o14464.json", "plain object"),
];

/// The 5 llama.cpp grammars of the validity run, with their prompts.
pub const GRAMMARS: &[(&str, &str)] = &[
    (
        "arithmetic.gbnf",
        "Write an arithmetic expression that equals 42.",
    ),
    (
        "chess.gbnf",
        "Write the first moves of a chess game in algebraic notation.",
    ),
    ("json.gbnf", "Describe a book as a JSON object."),
    (
        "json_arr.gbnf",
        "List three fruits with their colors as JSON.",
    ),
    ("list.gbnf", "List four things to pack for a beach trip."),
];

/// Schemas with fixed keys for the speed run.
pub const SPEED_SCHEMAS: &[&str] = &[
    r#"{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string","format":"email"},"city":{"type":"string"},"country":{"type":"string"}},"required":["name","age","email","city","country"],"additionalProperties":false}"#,
    r#"{"type":"object","properties":{"title":{"type":"string"},"author":{"type":"string"},"year":{"type":"integer","minimum":1000,"maximum":2100},"genres":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3},"rating":{"type":"number"}},"required":["title","author","year","genres","rating"],"additionalProperties":false}"#,
    r#"{"type":"object","properties":{"product_id":{"type":"string"},"quantity":{"type":"integer","minimum":1},"unit_price":{"type":"number"},"currency":{"enum":["USD","EUR","GBP"]},"in_stock":{"type":"boolean"},"warehouse":{"type":"object","properties":{"code":{"type":"string"},"region":{"type":"string"}},"required":["code","region"],"additionalProperties":false}},"required":["product_id","quantity","unit_price","currency","in_stock","warehouse"],"additionalProperties":false}"#,
    r#"{"type":"object","properties":{"event":{"type":"string"},"date":{"type":"string","format":"date"},"location":{"type":"string"},"attendees":{"type":"array","items":{"type":"object","properties":{"first_name":{"type":"string"},"last_name":{"type":"string"}},"required":["first_name","last_name"],"additionalProperties":false},"maxItems":3}},"required":["event","date","location","attendees"],"additionalProperties":false}"#,
];

/// Longest whitespace run (outside strings) that is not runaway whitespace.
pub const RUNAWAY_WS: usize = 24;

/// One validity result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ValidityRow {
    /// Schema file or grammar name.
    pub case: String,
    /// Why it was picked.
    pub feature: String,
    /// Seed.
    pub seed: u64,
    /// `max_tokens`.
    pub budget: usize,
    /// The shortest completion of the constraint from the start, in tokens (`None`: none
    /// found).
    pub shortest: Option<usize>,
    /// `stop` or `length`.
    pub finish: String,
    /// Ended `stop`, parses and validates.
    pub complete_valid: bool,
    /// What was generated is a prefix of a valid output (true of every complete and valid
    /// output, and of a cut one that stayed inside the constraint).
    pub valid_prefix: bool,
    /// Budget-aware decoding narrowed the mask at some step.
    pub budget_closed: bool,
    /// As expected: complete and valid when the budget is at least the shortest
    /// completion, else `length` with a valid prefix; and no runaway whitespace.
    pub ok: bool,
    /// What was wrong, if anything.
    pub problem: Option<String>,
    /// Output tokens.
    pub tokens: usize,
    /// Longest whitespace run outside strings.
    pub max_ws_run: usize,
    /// Per sampled step: mask microseconds, and whether the end of the budget was near.
    #[serde(skip)]
    pub mask_steps: Vec<(f32, bool)>,
    /// The output (first 300 characters).
    pub output: String,
}

/// Longest run of JSON whitespace outside string literals.
pub fn max_ws_outside_strings(s: &str) -> usize {
    let (mut best, mut run, mut in_str, mut esc) = (0, 0, false, false);
    for c in s.chars() {
        if in_str {
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        if matches!(c, ' ' | '\t' | '\n' | '\r') {
            run += 1;
            best = usize::max(best, run);
        } else {
            run = 0;
            if c == '"' {
                in_str = true;
            }
        }
    }
    best
}

/// The prompt of a schema case: the schema, asked for as a JSON example.
pub fn schema_prompt(schema: &Value) -> String {
    format!(
        "Write a realistic example JSON value that follows this JSON Schema. Answer with the \
         JSON only.\n\n{}",
        serde_json::to_string(schema).unwrap_or_default()
    )
}

fn params(seed: u64, temperature: f32, max_tokens: usize) -> GenerateParams {
    GenerateParams {
        seed: Some(seed),
        temperature,
        max_tokens,
        ..Default::default()
    }
}

fn short(s: &str) -> String {
    s.chars().take(300).collect()
}

/// Whether `text` is complete under `grammar` (GBNF) on the backend's vocabulary.
fn grammar_complete<B: ModelBackend>(b: &B, grammar: &str, text: &str) -> Result<(bool, bool)> {
    let limits = Limits::default();
    let g = Grammar::from_gbnf(grammar, &limits)?;
    let c = b.engine().constraint(&g, &limits)?;
    let mut m = Matcher::new(&c)?;
    Ok(match m.check_bytes(text.as_bytes())? {
        ruvllm_engine::CheckResult::Accepted => (true, true),
        ruvllm_engine::CheckResult::Incomplete { .. } => (true, false),
        ruvllm_engine::CheckResult::Rejected { .. } => (false, false),
    })
}

/// The shortest completion of `c` from the start, in tokens, on the backend's vocabulary.
fn shortest<B: ModelBackend>(b: &B, c: &OutputConstraint) -> Result<Option<usize>> {
    let Some(cons) = b.constraint(c)? else {
        return Ok(Some(0));
    };
    let mut m = Matcher::new(&cons)?;
    Ok(m.shortest_completion()?.map(|w| w.len()))
}

/// Runs the validity part over `schemas` (MaskBench file, feature) and `grammars`
/// (llama.cpp grammar file, prompt), at each budget of `budgets`.
#[allow(clippy::too_many_arguments)]
pub fn validity<B: LlmBackend + ModelBackend>(
    b: &B,
    maskbench: &Path,
    gbnf: &Path,
    schemas: &[(&str, &str)],
    grammars: &[(&str, &str)],
    seeds: u64,
    temperature: f32,
    budgets: &[usize],
    mut progress: impl FnMut(&ValidityRow),
) -> Result<Vec<ValidityRow>> {
    let mut rows = Vec::new();
    for &max_tokens in budgets {
        for (file, feature) in schemas {
            let path = maskbench.join(file);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let doc: Value = serde_json::from_str(&text)?;
            let schema_v = doc["schema"].clone();
            let schema = JsonSchema::from_value(schema_v.clone())
                .with_context(|| format!("schema of {file}"))?;
            let mode = JsonModeConfig {
                schema: Some(schema.clone()),
                ..Default::default()
            };
            let least = match mode.constraint() {
                Some(c) => shortest(b, &c)?,
                None => None,
            };
            for seed in 0..seeds {
                let mut p = params(seed, temperature, max_tokens);
                p.json_mode = Some(mode.clone());
                let g = b
                    .complete(&Prompt::User(schema_prompt(&schema_v)), &p, &mut |_| true)
                    .with_context(|| format!("{file} seed {seed}"))?;
                let valid = parse_json(&g.text)
                    .map_err(|e| format!("not JSON: {e}"))
                    .and_then(|v| schema.validate(&v).map_err(|e| e.to_string()));
                let complete_valid = g.finish == FinishReason::Stop && valid.is_ok();
                // Constrained output is a valid prefix by construction; a stop that does
                // not validate is not.
                let valid_prefix = g.finish == FinishReason::Length || valid.is_ok();
                let problem = match (&g.finish, &valid) {
                    (FinishReason::Stop, Err(e)) => Some(e.clone()),
                    (FinishReason::Length, Ok(())) => {
                        Some("finish=length but the value was complete".into())
                    }
                    _ => None,
                };
                let row = row(
                    (file, feature, seed, max_tokens, least),
                    &g,
                    (complete_valid, valid_prefix),
                    problem,
                );
                progress(&row);
                rows.push(row);
            }
        }
        for (file, prompt) in grammars {
            let path = gbnf.join(file);
            let grammar = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let c = OutputConstraint::Gbnf(grammar.clone());
            let least = shortest(b, &c)?;
            for seed in 0..seeds {
                let mut p = params(seed, temperature, max_tokens);
                p.constraint = Some(c.clone());
                let g = b
                    .complete(&Prompt::User(prompt.to_string()), &p, &mut |_| true)
                    .with_context(|| format!("{file} seed {seed}"))?;
                let (prefix_ok, complete) = grammar_complete(b, &grammar, &g.text)?;
                let mut problem = match (g.finish, prefix_ok, complete) {
                    (_, false, _) => Some("output leaves the grammar".to_string()),
                    (FinishReason::Stop, true, false) => Some("finish=stop but incomplete".into()),
                    (FinishReason::Length, true, true) => {
                        Some("finish=length but the output was complete".into())
                    }
                    _ => None,
                };
                if problem.is_none() && g.finish == FinishReason::Stop && file.starts_with("json") {
                    if let Err(e) = parse_json(&g.text) {
                        problem = Some(format!("not JSON: {e}"));
                    }
                }
                let complete_valid = g.finish == FinishReason::Stop && problem.is_none();
                let row = row(
                    (file, "gbnf", seed, max_tokens, least),
                    &g,
                    (complete_valid, prefix_ok),
                    problem,
                );
                progress(&row);
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// Parses a generated JSON text at any depth: `json.gbnf` and `json_arr.gbnf` (and
/// recursive schemas) allow nesting past serde_json's default limit of 128, and an
/// output is no less valid for it. The depth is bounded by the output's length (at most
/// a few thousand bytes here), which the main thread's stack holds.
fn parse_json(text: &str) -> serde_json::Result<Value> {
    use serde::Deserialize;
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let v = Value::deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

fn row(
    (file, feature, seed, budget, shortest): (&str, &str, u64, usize, Option<usize>),
    g: &Generation,
    (complete_valid, valid_prefix): (bool, bool),
    problem: Option<String>,
) -> ValidityRow {
    let ws = max_ws_outside_strings(&g.text);
    let fits = shortest.is_some_and(|n| n <= budget);
    let problem = problem
        .or_else(|| {
            (feature != "gbnf" && ws > RUNAWAY_WS).then(|| format!("whitespace run of {ws}"))
        })
        .or_else(|| {
            (fits && !complete_valid).then(|| {
                format!(
                    "not complete and valid though the shortest completion ({} tokens) fits",
                    shortest.unwrap_or(0)
                )
            })
        })
        .or_else(|| (!valid_prefix).then(|| "not even a valid prefix".to_string()));
    ValidityRow {
        case: file.to_string(),
        feature: feature.to_string(),
        seed,
        budget,
        shortest,
        finish: g.finish.as_str().into(),
        complete_valid,
        valid_prefix,
        budget_closed: g.budget_closed,
        ok: problem.is_none(),
        problem,
        tokens: g.usage.completion_tokens,
        max_ws_run: ws,
        mask_steps: g
            .usage
            .mask_steps
            .iter()
            .map(|&(s, near)| (s * 1e6, near))
            .collect(),
        output: short(&g.text),
    }
}

/// A speed row of one backend, by its name.
pub type BackendRow = (String, SpeedRow);

/// One speed measurement.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SpeedRow {
    /// `unconstrained`, `constrained`, `constrained+jf`.
    pub mode: String,
    /// Output tokens.
    pub tokens: usize,
    /// Output bytes.
    pub bytes: usize,
    /// Forward passes after the prompt.
    pub forward_passes: usize,
    /// Decode tokens/s (after the first token).
    pub tok_per_s: f64,
    /// Time to the first output text, seconds (forced text is available before the
    /// prompt is read).
    pub ttft: f64,
    /// Seconds reading the prompt.
    pub prefill_secs: f64,
    /// Seconds in mask computation.
    pub mask_secs: f64,
    /// Seconds in total.
    pub total_secs: f64,
}

/// Runs the speed part: each schema in each mode, `reps` seeds.
pub fn speed<B: LlmBackend + ModelBackend>(
    b: &B,
    reps: u64,
    max_tokens: usize,
) -> Result<Vec<SpeedRow>> {
    let mut rows = Vec::new();
    for s in SPEED_SCHEMAS {
        let schema = JsonSchema::from_str(s)?;
        let prompt = Prompt::User(schema_prompt(schema.as_value()));
        for seed in 0..reps {
            for mode in ["unconstrained", "constrained", "constrained+jf"] {
                let mut p = params(100 + seed, 0.7, max_tokens);
                match mode {
                    "unconstrained" => p.ignore_eos = true,
                    m => {
                        p.json_mode = Some(JsonModeConfig {
                            schema: Some(schema.clone()),
                            ..Default::default()
                        });
                        p.jump_forward = m == "constrained+jf";
                    }
                }
                let g = b.complete(&prompt, &p, &mut |_| true)?;
                rows.push(speed_row(mode, &g));
            }
        }
    }
    Ok(rows)
}

fn speed_row(mode: &str, g: &Generation) -> SpeedRow {
    let u = &g.usage;
    SpeedRow {
        mode: mode.into(),
        tokens: u.completion_tokens,
        bytes: g.text.len(),
        forward_passes: u.forward_passes,
        tok_per_s: u.decode_tokens_per_sec(),
        ttft: u.first_token_secs,
        prefill_secs: u.prompt_secs,
        mask_secs: u.mask_secs,
        total_secs: u.total_secs,
    }
}

/// One constrained generation with jump-forward on speed schema `schema` (the speed
/// part's `constrained+jf` mode), for the rounds beside llama-server.
pub fn jf_row<B: LlmBackend + ModelBackend>(b: &B, schema: &str, seed: u64) -> Result<SpeedRow> {
    let schema = JsonSchema::from_str(schema)?;
    let prompt = Prompt::User(schema_prompt(schema.as_value()));
    let mut p = params(100 + seed, 0.7, 128);
    p.json_mode = Some(JsonModeConfig {
        schema: Some(schema),
        ..Default::default()
    });
    p.jump_forward = true;
    let g = b.complete(&prompt, &p, &mut |_| true)?;
    Ok(speed_row("constrained+jf", &g))
}

/// Raw decode speed: ours.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RawRow {
    /// `ruvllm` or `llama.cpp`.
    pub engine: String,
    /// Prefill tokens/s.
    pub prefill_tok_s: f64,
    /// Decode tokens/s.
    pub decode_tok_s: f64,
}

/// Ours: a 16-token raw prompt, then `n` greedy tokens with EOS ignored; `engine` names
/// the row.
pub fn raw_ours<B: LlmBackend + ModelBackend>(b: &B, n: usize, engine: &str) -> Result<RawRow> {
    // 16 tokens of ordinary text.
    let mut text = String::from("The history of the city begins with a small village on a river");
    while b.encode(&text)?.len() < 16 {
        text.push_str(" and");
    }
    while b.encode(&text)?.len() > 16 {
        text.pop();
    }
    let p = GenerateParams {
        temperature: 0.0,
        max_tokens: n,
        ignore_eos: true,
        ..Default::default()
    };
    let g = b.complete(&Prompt::Raw(text), &p, &mut |_| true)?;
    let u = &g.usage;
    Ok(RawRow {
        engine: engine.into(),
        prefill_tok_s: u.prompt_tokens as f64 / u.prompt_secs,
        decode_tok_s: u.passes_per_sec(),
    })
}

/// llama.cpp: `llama-bench -m MODEL -p 16 -n N -t THREADS -r 1 -o json`.
pub fn raw_llamacpp(bin: &Path, model: &Path, n: usize, threads: usize) -> Result<RawRow> {
    let out = std::process::Command::new(bin)
        .args(["-m"])
        .arg(model)
        .args(["-p", "16", "-n", &n.to_string(), "-t", &threads.to_string()])
        .args(["-r", "1", "-o", "json"])
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("llama-bench JSON output")?;
    let mut row = RawRow {
        engine: LLAMA_CPP.into(),
        prefill_tok_s: 0.0,
        decode_tok_s: 0.0,
    };
    for r in v.as_array().into_iter().flatten() {
        let ts = r["avg_ts"].as_f64().unwrap_or(0.0);
        if r["n_prompt"].as_u64().unwrap_or(0) > 0 {
            row.prefill_tok_s = ts;
        } else if r["n_gen"].as_u64().unwrap_or(0) > 0 {
            row.decode_tok_s = ts;
        }
    }
    Ok(row)
}

/// The `q` quantile of a sorted slice (0 when empty).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Median of a non-empty slice.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Everything `ruvllm-bench e2e` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The model file's name.
    pub model: String,
    /// One run per backend.
    pub runs: Vec<BackendRun>,
    /// Raw decode rows of every engine, alternating.
    pub raw: Vec<RawRow>,
    /// llama.cpp's own constrained decoding (llama-server, `json_schema`) on the speed
    /// schemas.
    pub server: Vec<SpeedRow>,
    /// Ours with jump-forward on the same schema and seed just before each `server` row,
    /// per backend: `(backend, row)`, `server.len()` per backend, in the same order.
    pub beside_server: Vec<BackendRow>,
}

/// The validity and speed rows of one backend.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendRun {
    /// `llama.cpp` or `candle`.
    pub backend: String,
    /// Validity rows.
    pub validity: Vec<ValidityRow>,
    /// Speed rows.
    pub speed: Vec<SpeedRow>,
}

impl Report {
    /// A summary as JSON (what the note quotes): each backend's, and raw decode beside
    /// llama.cpp.
    pub fn summary(&self) -> Value {
        let raw = |e: &str| {
            let rows: Vec<&RawRow> = self.raw.iter().filter(|r| r.engine == e).collect();
            json!({
                "decode_tok_s": median(&rows.iter().map(|r| r.decode_tok_s).collect::<Vec<_>>()),
                "prefill_tok_s": median(&rows.iter().map(|r| r.prefill_tok_s).collect::<Vec<_>>()),
                "runs": rows.len(),
            })
        };
        let lc = raw(LLAMA_CPP);
        let mut engines = serde_json::Map::new();
        for run in &self.runs {
            let name = raw_engine(&run.backend);
            let ours = raw(&name);
            // The median of each round's ratio (ours against llama-bench run just after
            // it): a slow drift in the machine's speed cancels within a round.
            let ratio = |k: fn(&RawRow) -> f64| {
                let pairs: Vec<f64> = self
                    .raw
                    .iter()
                    .filter(|r| r.engine == name)
                    .zip(self.raw.iter().filter(|r| r.engine == LLAMA_CPP))
                    .filter(|(_, b)| k(b) > 0.0)
                    .map(|(a, b)| k(a) / k(b))
                    .collect();
                (!pairs.is_empty()).then(|| median(&pairs))
            };
            engines.insert(
                name.clone(),
                json!({"decode_tok_s": ours["decode_tok_s"], "prefill_tok_s": ours["prefill_tok_s"],
                       "runs": ours["runs"], "ratio_decode": ratio(|r| r.decode_tok_s),
                       "ratio_prefill": ratio(|r| r.prefill_tok_s)}),
            );
        }
        engines.insert(LLAMA_CPP.into(), lc);
        let server = median(&self.server.iter().map(|r| r.tok_per_s).collect::<Vec<_>>());
        let constrained: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                // Each pair ran back to back (ours, then llama-server on the same schema
                // and seed): the median of the pairs' ratios.
                let ours: Vec<&SpeedRow> = self
                    .beside_server
                    .iter()
                    .filter(|(b, _)| *b == r.backend)
                    .map(|(_, row)| row)
                    .collect();
                let jf = median(&ours.iter().map(|o| o.tok_per_s).collect::<Vec<_>>());
                let ratios: Vec<f64> = ours
                    .iter()
                    .zip(&self.server)
                    .filter(|(_, sv)| sv.tok_per_s > 0.0)
                    .map(|(o, sv)| o.tok_per_s / sv.tok_per_s)
                    .collect();
                json!({"backend": r.backend, "constrained_jf_tok_s": jf,
                       "over_llama_server": (!ratios.is_empty()).then(|| median(&ratios))})
            })
            .collect();
        json!({
            "model": self.model,
            "llama_server_json_schema": {"median_decode_tok_s": server, "runs": self.server.len(),
                                         "backends": constrained},
            "backends": self.runs.iter().map(|r| json!({"backend": r.backend, "summary": r.summary()})).collect::<Vec<_>>(),
            "raw_decode": engines,
        })
    }
}

/// The raw-decode row name of a backend's runs.
pub fn raw_engine(backend: &str) -> String {
    format!("ruvllm ({backend})")
}

/// The raw-decode row name of llama.cpp's `llama-bench`.
pub const LLAMA_CPP: &str = "llama.cpp (llama-bench)";

impl BackendRun {
    /// This backend's validity and speed summary as JSON.
    pub fn summary(&self) -> Value {
        let mut budgets: Vec<usize> = self.validity.iter().map(|r| r.budget).collect();
        budgets.sort_unstable_by(|a, b| b.cmp(a));
        budgets.dedup();
        let per_budget: Vec<Value> = budgets
            .iter()
            .map(|&b| {
                let rows: Vec<&ValidityRow> =
                    self.validity.iter().filter(|r| r.budget == b).collect();
                let count = |f: &dyn Fn(&ValidityRow) -> bool| rows.iter().filter(|r| f(r)).count();
                let fit = |r: &ValidityRow| r.shortest.is_some_and(|n| n <= b);
                json!({
                    "max_tokens": b,
                    "generations": rows.len(),
                    "ok": count(&|r| r.ok),
                    "complete_valid": count(&|r| r.complete_valid),
                    "valid_prefix_only": count(&|r| r.valid_prefix && !r.complete_valid),
                    "finish_length": count(&|r| r.finish == "length"),
                    "budget_closed": count(&|r| r.budget_closed),
                    "fitting": count(&fit),
                    "fitting_complete_valid": count(&|r| fit(r) && r.complete_valid),
                })
            })
            .collect();
        let steps = |near: bool| {
            let mut v: Vec<f64> = self
                .validity
                .iter()
                .flat_map(|r| r.mask_steps.iter())
                .filter(|x| x.1 == near)
                .map(|x| x.0 as f64)
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            json!({"steps": v.len(), "mean_us": mean, "p99_us": percentile(&v, 0.99),
                   "max_us": v.last().copied().unwrap_or(0.0)})
        };
        let n = self.validity.len();
        let ok = self.validity.iter().filter(|r| r.ok).count();
        let stop = self.validity.iter().filter(|r| r.finish == "stop").count();
        let mode =
            |m: &str| -> Vec<&SpeedRow> { self.speed.iter().filter(|r| r.mode == m).collect() };
        let agg = |rows: Vec<&SpeedRow>| {
            let tps = median(&rows.iter().map(|r| r.tok_per_s).collect::<Vec<_>>());
            let fp_tok = rows.iter().map(|r| r.forward_passes).sum::<usize>() as f64
                / rows.iter().map(|r| r.tokens).sum::<usize>().max(1) as f64;
            let fp_100b = 100.0 * rows.iter().map(|r| r.forward_passes).sum::<usize>() as f64
                / rows.iter().map(|r| r.bytes).sum::<usize>().max(1) as f64;
            let ttft = median(&rows.iter().map(|r| r.ttft).collect::<Vec<_>>());
            let prefill = median(&rows.iter().map(|r| r.prefill_secs).collect::<Vec<_>>());
            let mask_ms_tok = 1e3 * rows.iter().map(|r| r.mask_secs).sum::<f64>()
                / rows.iter().map(|r| r.tokens).sum::<usize>().max(1) as f64;
            json!({"median_decode_tok_s": tps, "forward_passes_per_token": fp_tok,
                   "forward_passes_per_100_bytes": fp_100b, "median_ttft_s": ttft,
                   "median_prefill_s": prefill,
                   "mask_ms_per_token": mask_ms_tok, "runs": rows.len()})
        };
        let u = agg(mode("unconstrained"));
        let c = agg(mode("constrained"));
        let j = agg(mode("constrained+jf"));
        let ratio = |a: &Value, b: &Value, k: &str| {
            let d = b[k].as_f64().unwrap_or(0.0);
            if d > 0.0 {
                json!(a[k].as_f64().unwrap_or(0.0) / d)
            } else {
                Value::Null
            }
        };
        json!({
            "validity": {"generations": n, "ok": ok, "finish_stop": stop,
                         "finish_length": n - stop, "budgets": per_budget,
                         "mask_near_end": steps(true), "mask_far_from_end": steps(false)},
            "speed": {"unconstrained": u, "constrained": c, "constrained_jf": j,
                      "constrained_over_unconstrained_tok_s": ratio(&c, &u, "median_decode_tok_s"),
                      "jf_over_unconstrained_tok_s": ratio(&j, &u, "median_decode_tok_s"),
                      "jf_forward_pass_cut_per_100_bytes":
                          ratio(&j, &c, "forward_passes_per_100_bytes").as_f64().map(|r| 1.0 - r)},
        })
    }
}

/// The default model path, for messages.
pub fn default_model() -> PathBuf {
    PathBuf::from("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The report as Markdown (`docs/E2E.md`), generated, never typed by hand. `command` is
/// the command line that produced it.
pub fn markdown(report: &Report, command: &str, commit: &str) -> String {
    let s = report.summary();
    let f = fmt_num;
    let mut m = String::new();
    m.push_str("# End-to-end benchmark (generated)\n\n");
    m.push_str(&format!(
        "Generated by `{command}` at commit `{commit}` on `{}` (CPU). Do not edit by hand: \
         rerun the command. Backends in this run: {}.\n\n",
        report.model,
        report
            .runs
            .iter()
            .map(|r| format!("`{}`", r.backend))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !report.raw.is_empty() {
        m.push_str("## Raw speed beside llama.cpp (same GGUF file)\n\n");
        m.push_str(
            "16-token prompt, then 128 greedy tokens; llama.cpp's `llama-bench -p 16 -n 128` \
             (built by `scripts/build-llamacpp.sh`), every engine in turn, repeated: medians, \
             and each ratio is the median of the rounds' ratios (ours against llama-bench in \
             the same round, which cancels the machine's slow drifts).\n\n",
        );
        m.push_str("| engine | decode tokens/s | prefill tokens/s | decode / llama.cpp | prefill / llama.cpp | runs |\n|---|---|---|---|---|---|\n");
        for (name, r) in s["raw_decode"].as_object().into_iter().flatten() {
            m.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} |\n",
                f(&r["decode_tok_s"]),
                f(&r["prefill_tok_s"]),
                f(&r["ratio_decode"]),
                f(&r["ratio_prefill"]),
                r["runs"]
            ));
        }
        m.push('\n');
    }
    let ls = &s["llama_server_json_schema"];
    if ls["runs"].as_u64().unwrap_or(0) > 0 {
        m.push_str("## Constrained decoding beside llama.cpp's own\n\n");
        m.push_str(
            "The four speed schemas, temperature 0.7, the same prompt text, at most 128 \
             tokens: ruvllm with jump-forward (median decode tokens/s, forced tokens \
             counted as output) against `llama-server` with the schema as `json_schema` \
             (llama.cpp's grammar sampler; its own `predicted_per_second`). Each ruvllm \
             generation runs just before llama-server's on the same schema and seed, and \
             the ratio is the median of those pairs' ratios.\n\n",
        );
        m.push_str("| engine | median decode tokens/s | over llama.cpp |\n|---|---|---|\n");
        m.push_str(&format!(
            "| llama-server `json_schema` | {} | 1.00 |\n",
            f(&ls["median_decode_tok_s"])
        ));
        for b in ls["backends"].as_array().into_iter().flatten() {
            m.push_str(&format!(
                "| ruvllm ({}) constrained + jump-forward | {} | **{}** |\n",
                b["backend"].as_str().unwrap_or(""),
                f(&b["constrained_jf_tok_s"]),
                f(&b["over_llama_server"])
            ));
        }
        m.push('\n');
    }
    for (run, rs) in report
        .runs
        .iter()
        .zip(s["backends"].as_array().into_iter().flatten())
    {
        m.push_str(&format!("# Backend `{}`\n\n", run.backend));
        backend_markdown(&mut m, run, &rs["summary"]);
    }
    m
}

fn fmt_num(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
        None => "n/a".into(),
    }
}

/// One backend's validity and speed sections.
fn backend_markdown(m: &mut String, report: &BackendRun, s: &Value) {
    let f = fmt_num;
    let v = &s["validity"];
    if v["generations"].as_u64().unwrap_or(0) > 0 {
        m.push_str("## Validity of constrained generations\n\n");
        m.push_str(
            "30 MaskBench schemas and 5 llama.cpp grammars, temperature 0.7, several seeds, \
             budget-aware decoding on (the default). **Complete and valid** means the \
             generation ended `stop` and its output parses and validates; an output cut by \
             `max_tokens` is at most a **valid prefix**, counted apart and never as valid. \
             Budget-aware decoding promises complete and valid output whenever `max_tokens` \
             is at least the case's shortest completion (listed below).\n\n",
        );
        m.push_str("| max_tokens | generations | complete and valid | valid prefix only (cut) | ended `length` | shortest completion fits | complete and valid where it fits | closed by the budget |\n|---|---|---|---|---|---|---|---|\n");
        for b in v["budgets"].as_array().into_iter().flatten() {
            m.push_str(&format!(
                "| {} | {} | **{}** | {} | {} | {} | **{} of {}** | {} |\n",
                b["max_tokens"],
                b["generations"],
                b["complete_valid"],
                b["valid_prefix_only"],
                b["finish_length"],
                b["fitting"],
                b["fitting_complete_valid"],
                b["fitting"],
                b["budget_closed"],
            ));
        }
        let (near, far) = (&v["mask_near_end"], &v["mask_far_from_end"]);
        m.push_str(&format!(
            "\nMask cost per sampled step (budget mask included), all budgets: near the end \
             of the budget (the budget mask narrows the exact one token by token) {} steps, \
             mean **{} us**, p99 **{} us**, max {} us; far from it (the exact mask) {} \
             steps, mean {} us, p99 {} us.\n\n",
            near["steps"],
            f(&near["mean_us"]),
            f(&near["p99_us"]),
            f(&near["max_us"]),
            far["steps"],
            f(&far["mean_us"]),
            f(&far["p99_us"]),
        ));
        // Shortest completions per case.
        let mut cases: Vec<(&str, Option<usize>)> = Vec::new();
        for r in &report.validity {
            if !cases.iter().any(|c| c.0 == r.case) {
                cases.push((&r.case, r.shortest));
            }
        }
        m.push_str("Shortest completion of each case from the start (tokens of the model's vocabulary):\n\n| case | shortest completion |\n|---|---|\n");
        for (case, n) in cases {
            m.push_str(&format!(
                "| {case} | {} |\n",
                n.map_or("none found".to_string(), |n| n.to_string())
            ));
        }
        m.push('\n');
        m.push_str("| case | picked for | max_tokens | seed | finish | tokens | complete and valid | ok | output (start) |\n|---|---|---|---|---|---|---|---|---|\n");
        for r in &report.validity {
            let out: String = r
                .output
                .chars()
                .take(80)
                .collect::<String>()
                .replace('|', "\\|")
                .replace('\n', "\\n");
            m.push_str(&format!(
                "| {} | {} | {} | {} | {}{} | {} | {} | {} | `{}` |\n",
                r.case,
                r.feature,
                r.budget,
                r.seed,
                r.finish,
                if r.budget_closed {
                    " (closed by the budget)"
                } else {
                    ""
                },
                r.tokens,
                if r.complete_valid { "yes" } else { "no" },
                if r.ok {
                    "yes"
                } else {
                    r.problem.as_deref().unwrap_or("no")
                },
                out
            ));
        }
        m.push('\n');
    }
    let sp = &s["speed"];
    if sp["unconstrained"]["runs"].as_u64().unwrap_or(0) > 0 {
        m.push_str("## Decode speed: unconstrained, constrained, jump-forward\n\n");
        m.push_str(
            "Four schemas with fixed keys, temperature 0.7, the schema in the prompt; \
                    unconstrained runs generate exactly 128 tokens (EOS ignored), constrained \
                    runs end where the JSON ends (shorter outputs, so a shorter context per \
                    step, which is why they can be slightly faster per token). Tokens/s counts \
                    output tokens over the time after the prompt; forced tokens are output \
                    too. TTFT is the time to the first output text: with jump-forward the \
                    forced opening (`{\"key\":`) is known before the prompt is read, so it \
                    is near zero; the prefill column is the time to read the prompt.\n\n",
        );
        m.push_str("| mode | median tokens/s | forward passes / token | forward passes / 100 bytes | median TTFT (s) | median prefill (s) | mask ms / token |\n|---|---|---|---|---|---|---|\n");
        for (name, k) in [
            ("unconstrained", "unconstrained"),
            ("constrained", "constrained"),
            ("constrained + jump-forward", "constrained_jf"),
        ] {
            let r = &sp[k];
            m.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} | {} |\n",
                f(&r["median_decode_tok_s"]),
                f(&r["forward_passes_per_token"]),
                f(&r["forward_passes_per_100_bytes"]),
                f(&r["median_ttft_s"]),
                f(&r["median_prefill_s"]),
                f(&r["mask_ms_per_token"])
            ));
        }
        m.push_str(&format!(
            "\nConstrained / unconstrained tokens/s: **{}x** (target >= 0.95x). \
             Jump-forward / unconstrained: **{}x**. Jump-forward cuts forward passes per \
             output byte by **{}** (target >= 30%).\n\n",
            f(&sp["constrained_over_unconstrained_tok_s"]),
            f(&sp["jf_over_unconstrained_tok_s"]),
            sp["jf_forward_pass_cut_per_100_bytes"]
                .as_f64()
                .map(|x| format!("{:.0}%", 100.0 * x))
                .unwrap_or_else(|| "n/a".into())
        ));
    }
}

/// llama.cpp's own constrained decoding: `llama-server` (built by
/// `scripts/build-llamacpp.sh`) started on the same model with `threads` threads, one
/// slot, then each speed schema as `/completion` with `json_schema` (llama.cpp converts it
/// to a grammar and samples under it), the same prompt text as ours (`prompt` renders it),
/// temperature 0.7, 128 tokens at most, `reps` seeds. Rows have mode
/// `llama-server json_schema`; tokens/s is the server's own `predicted_per_second`.
/// `beside(schema, seed)` runs just before each request (ours on the same schema and
/// seed); its rows come back second, in the same order.
pub fn llama_server_speed(
    server_bin: &Path,
    model: &Path,
    threads: usize,
    reps: u64,
    prompt: impl Fn(&Value) -> Result<String>,
    mut beside: impl FnMut(&str, u64) -> Result<Vec<BackendRow>>,
) -> Result<(Vec<SpeedRow>, Vec<BackendRow>)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = std::process::Command::new(server_bin)
        .arg("-m")
        .arg(model)
        .args(["-t", &threads.to_string(), "-c", "4096", "-np", "1"])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", server_bin.display()))?;
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = {
        let url = format!("http://127.0.0.1:{port}/health");
        let t0 = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("{} exited with {status}", server_bin.display());
            }
            if ureq::get(&url).call().is_ok_and(|r| r.status() == 200) {
                break;
            }
            if t0.elapsed().as_secs() > 120 {
                let _ = child.kill();
                bail!("{} did not become healthy in 120 s", server_bin.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Kill(child)
    };
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(300)))
            .build(),
    );
    let mut rows = Vec::new();
    let mut ours = Vec::new();
    for s in SPEED_SCHEMAS {
        let schema: Value = serde_json::from_str(s)?;
        let text = prompt(&schema)?;
        for seed in 0..reps {
            ours.extend(beside(s, seed)?);
            let body = json!({"prompt": text, "json_schema": schema, "n_predict": 128,
                              "temperature": 0.7, "seed": 100 + seed, "cache_prompt": false});
            let mut r = agent
                .post(&format!("http://127.0.0.1:{port}/completion"))
                .header("Content-Type", "application/json")
                .send(body.to_string().as_bytes())?;
            let v: Value = serde_json::from_str(&r.body_mut().read_to_string()?)
                .context("llama-server answer")?;
            let t = &v["timings"];
            let content = v["content"].as_str().unwrap_or("");
            rows.push(SpeedRow {
                mode: LLAMA_SERVER_MODE.into(),
                tokens: v["tokens_predicted"].as_u64().unwrap_or(0) as usize,
                bytes: content.len(),
                forward_passes: v["tokens_predicted"].as_u64().unwrap_or(0) as usize,
                tok_per_s: t["predicted_per_second"].as_f64().unwrap_or(0.0),
                ttft: t["prompt_ms"].as_f64().unwrap_or(0.0) / 1e3,
                prefill_secs: t["prompt_ms"].as_f64().unwrap_or(0.0) / 1e3,
                mask_secs: 0.0,
                total_secs: (t["prompt_ms"].as_f64().unwrap_or(0.0)
                    + t["predicted_ms"].as_f64().unwrap_or(0.0))
                    / 1e3,
            });
        }
    }
    Ok((rows, ours))
}

/// The mode name of llama-server's constrained rows.
pub const LLAMA_SERVER_MODE: &str = "llama-server json_schema";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_json_parses_past_depth_128() {
        let deep = format!("{}{}", "[\n".repeat(600), "]".repeat(600));
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        assert!(parse_json(&deep).is_ok());
        assert!(parse_json("[1] x").is_err());
        assert!(parse_json(&"[".repeat(600)).is_err());
    }
}
