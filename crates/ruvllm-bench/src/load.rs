//! `ruvllm-bench load`: many concurrent clients against a real `ruvllm serve` on loopback,
//! with a mix of schemas, tool calls (plain and streamed), choices, regexes, Ollama and
//! llama.cpp requests. Every answer is checked (HTTP status, JSON, the schema or the
//! pattern); the report gives failures, invalid outputs, throughput, latency percentiles,
//! the server's mean batch size and its RSS before and after.
//!
//! The same mix runs against `ruvllm serve` on each backend of `--backends` and, with
//! `--llama-server`, against llama.cpp's own server (`--parallel` equal to the batch), the
//! requests translated into its fields, so that the servers are compared on one machine
//! in one run.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ruvllm_runtime::JsonSchema;
use serde::Serialize;
use serde_json::{json, Value};

/// Load run settings.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The `ruvllm` binary to start.
    pub server_bin: PathBuf,
    /// Model for the server (default: its own default).
    pub model: Option<PathBuf>,
    /// Concurrent clients.
    pub clients: usize,
    /// How long each configuration runs.
    pub duration: Duration,
    /// `--max-batch` values to run, one server each.
    pub batches: Vec<usize>,
    /// Sampling temperature of the requests.
    pub temperature: f32,
    /// Extra clients that inject faults (see [`crate::faults`]); 0 = none.
    pub fault_clients: usize,
    /// RSS is judged after this much of the run (the prefix cache fills up first).
    pub warmup: Duration,
    /// The servers to run the load against, each in turn at each batch size.
    pub servers: Vec<ServerKind>,
    /// Threads of the servers.
    pub threads: usize,
}

/// A server the load runs against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKind {
    /// `ruvllm serve --backend NAME`.
    Ruvllm(String),
    /// llama.cpp's `llama-server` (this binary), `--parallel` equal to the batch size.
    LlamaServer(PathBuf),
}

impl ServerKind {
    /// The name reports give it.
    pub fn label(&self) -> String {
        match self {
            ServerKind::Ruvllm(b) => format!("ruvllm ({b})"),
            ServerKind::LlamaServer(_) => "llama-server".into(),
        }
    }
}

/// One request kind of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Kind {
    /// Chat, `response_format: json_schema` (strict), a person.
    SchemaPerson,
    /// Chat, `response_format: json_schema`, an order with nested items.
    SchemaOrder,
    /// Chat, tools with a named `tool_choice`.
    ToolNamed,
    /// Chat, streamed, `tool_choice: required`, `parallel_tool_calls: false`.
    ToolStream,
    /// Chat, vLLM `guided_choice`.
    Choice,
    /// Chat, vLLM `guided_regex`.
    Regex,
    /// Ollama `/api/chat` with a schema `format`.
    OllamaSchema,
    /// llama.cpp `/completion` with a GBNF grammar.
    LlamaGrammar,
}

const KINDS: [Kind; 8] = [
    Kind::SchemaPerson,
    Kind::SchemaOrder,
    Kind::ToolNamed,
    Kind::ToolStream,
    Kind::Choice,
    Kind::Regex,
    Kind::OllamaSchema,
    Kind::LlamaGrammar,
];

fn person() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email"}},
      "required": ["name", "age", "email"], "additionalProperties": false})
}

fn order() -> Value {
    json!({"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^ORD-[0-9]{4}$"},
        "status": {"enum": ["new", "paid", "shipped"]},
        "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object", "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["sku", "qty"], "additionalProperties": false}}},
      "required": ["id", "status", "items"], "additionalProperties": false})
}

fn weather_params() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
      "required": ["city", "unit"], "additionalProperties": false})
}

fn time_params() -> Value {
    json!({"type": "object", "properties": {"tz": {"type": "string", "maxLength": 30}},
      "required": ["tz"], "additionalProperties": false})
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": weather_params()}},
        {"type": "function", "function": {"name": "get_time", "description": "Time in a timezone", "parameters": time_params()}},
    ])
}

const CITIES: [&str; 6] = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Perth"];

/// The request for `kind` as llama-server takes it: the same messages and constraints,
/// in its fields (a GBNF `grammar` for vLLM's choice and regex, the chat endpoint with
/// `response_format` for Ollama's `format`). Returns the kind whose check applies.
fn llama_server_request(kind: Kind, i: u64, temperature: f32) -> (Kind, &'static str, Value) {
    let (path, mut body) = request(kind, i, temperature);
    match kind {
        Kind::Choice => {
            body.as_object_mut().map(|o| o.remove("guided_choice"));
            body["grammar"] = json!("root ::= \"yes\" | \"no\"");
            (kind, path, body)
        }
        Kind::Regex => {
            body.as_object_mut().map(|o| o.remove("guided_regex"));
            body["grammar"] = json!("root ::= \"+\" [0-9]{2} \" \" [0-9]{3} \" \" [0-9]{4}");
            (kind, path, body)
        }
        Kind::OllamaSchema => {
            let city = CITIES[(i % CITIES.len() as u64) as usize];
            let body = json!({"messages": [{"role": "user", "content": format!("Invent a person from {city}.")}],
                              "temperature": temperature, "seed": i, "max_tokens": 200,
                              "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": person()}}});
            (Kind::SchemaPerson, "/v1/chat/completions", body)
        }
        _ => (kind, path, body),
    }
}

/// The request for `kind` (path and body).
fn request(kind: Kind, i: u64, temperature: f32) -> (&'static str, Value) {
    let city = CITIES[(i % CITIES.len() as u64) as usize];
    let common = |messages: Value| json!({"messages": messages, "temperature": temperature, "seed": i, "max_tokens": 200});
    let user = |t: String| json!([{"role": "user", "content": t}]);
    match kind {
        Kind::SchemaPerson => {
            let mut b = common(user(format!("Invent a person who lives in {city}.")));
            b["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": person()}});
            ("/v1/chat/completions", b)
        }
        Kind::SchemaOrder => {
            let mut b = common(user("Create a sample shop order.".into()));
            b["response_format"] =
                json!({"type": "json_schema", "json_schema": {"name": "order", "schema": order()}});
            ("/v1/chat/completions", b)
        }
        Kind::ToolNamed => {
            let mut b = common(user(format!("What is the weather in {city}?")));
            b["tools"] = tools();
            b["tool_choice"] = json!({"type": "function", "function": {"name": "get_weather"}});
            ("/v1/chat/completions", b)
        }
        Kind::ToolStream => {
            let mut b = common(user(format!("What time is it in {city}?")));
            b["tools"] = tools();
            b["tool_choice"] = json!("required");
            b["parallel_tool_calls"] = json!(false);
            b["stream"] = json!(true);
            ("/v1/chat/completions", b)
        }
        Kind::Choice => {
            let mut b = common(user(format!("Is {city} a capital city? Answer yes or no.")));
            b["guided_choice"] = json!(["yes", "no"]);
            ("/v1/chat/completions", b)
        }
        Kind::Regex => {
            let mut b = common(user(format!("Give a phone number in {city}.")));
            b["guided_regex"] = json!(r"\+[0-9]{2} [0-9]{3} [0-9]{4}");
            ("/v1/chat/completions", b)
        }
        Kind::OllamaSchema => (
            "/api/chat",
            json!({"messages": user(format!("Invent a person from {city}.")), "format": person(),
                   "stream": false, "options": {"temperature": temperature, "seed": i, "num_predict": 200}}),
        ),
        Kind::LlamaGrammar => (
            "/completion",
            json!({"prompt": format!("Three numbers about {city}:"), "temperature": temperature, "seed": i,
                   "n_predict": 60, "grammar": "root ::= \" \" num (\", \" num){2}\nnum ::= [1-9] [0-9]{0,3}"}),
        ),
    }
}

fn valid(schema: &Value, v: &Value) -> Result<(), String> {
    let s = JsonSchema::from_value(schema.clone()).map_err(|e| e.to_string())?;
    s.validate(v).map_err(|e| e.to_string())
}

/// Parses an SSE body into the tool call it streamed: (name, arguments, finish_reason).
fn sse_tool_call(body: &str) -> Result<(String, String, String), String> {
    let mut name = None;
    let mut names = 0;
    let mut args = String::new();
    let mut finish = String::new();
    let mut done = false;
    for ev in body.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data = ev
            .strip_prefix("data: ")
            .ok_or_else(|| format!("not an SSE data event: {ev:?}"))?;
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let c: Value = serde_json::from_str(data).map_err(|e| format!("chunk not JSON: {e}"))?;
        if c.get("error").is_some() {
            return Err(format!("error event: {c}"));
        }
        let ch = &c["choices"][0];
        if let Some(f) = ch["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for tc in ch["delta"]["tool_calls"].as_array().into_iter().flatten() {
            if tc["index"] != 0 {
                return Err("more than one call with parallel_tool_calls false".into());
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                names += 1;
                name = Some(n.to_string());
            }
            args.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    if !done {
        return Err("no [DONE]".into());
    }
    if names != 1 {
        return Err(format!("the name came {names} times"));
    }
    Ok((name.unwrap_or_default(), args, finish))
}

/// Checks one answer; `Ok(completion_tokens)`.
fn check(kind: Kind, body: &str) -> Result<u64, String> {
    if kind == Kind::ToolStream {
        let (name, args, finish) = sse_tool_call(body)?;
        if finish != "tool_calls" {
            return Err(format!("finish_reason {finish}"));
        }
        let v: Value = serde_json::from_str(&args).map_err(|e| format!("arguments: {e}"))?;
        let schema = match name.as_str() {
            "get_weather" => weather_params(),
            "get_time" => time_params(),
            other => return Err(format!("unknown tool {other}")),
        };
        valid(&schema, &v)?;
        return Ok(0);
    }
    let v: Value = serde_json::from_str(body).map_err(|e| format!("answer not JSON: {e}"))?;
    let finish = match kind {
        Kind::OllamaSchema => v["done_reason"].as_str().unwrap_or("").to_string(),
        Kind::LlamaGrammar => v["stop_type"].as_str().unwrap_or("").to_string(),
        _ => v["choices"][0]["finish_reason"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    };
    let tokens = v["usage"]["completion_tokens"]
        .as_u64()
        .or_else(|| v["eval_count"].as_u64())
        .or_else(|| v["tokens_predicted"].as_u64())
        .unwrap_or(0);
    let text = match kind {
        Kind::OllamaSchema => v["message"]["content"].as_str(),
        Kind::LlamaGrammar => v["content"].as_str(),
        _ => v["choices"][0]["message"]["content"].as_str(),
    };
    match kind {
        Kind::SchemaPerson | Kind::SchemaOrder | Kind::OllamaSchema => {
            if finish != "stop" {
                return Err(format!("finish {finish} (bounded schema)"));
            }
            let x: Value = serde_json::from_str(text.unwrap_or(""))
                .map_err(|e| format!("content not JSON: {e}"))?;
            let schema = if kind == Kind::SchemaOrder {
                order()
            } else {
                person()
            };
            valid(&schema, &x)?;
        }
        Kind::ToolNamed => {
            if finish != "tool_calls" {
                return Err(format!("finish_reason {finish}"));
            }
            let calls = v["choices"][0]["message"]["tool_calls"]
                .as_array()
                .ok_or("no tool_calls")?;
            if calls.len() != 1 || calls[0]["function"]["name"] != "get_weather" {
                return Err(format!("calls: {calls:?}"));
            }
            let args: Value =
                serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap_or(""))
                    .map_err(|e| format!("arguments: {e}"))?;
            valid(&weather_params(), &args)?;
        }
        Kind::Choice => {
            if !matches!(text, Some("yes") | Some("no")) {
                return Err(format!("choice {text:?}"));
            }
        }
        Kind::Regex => {
            let t = text.unwrap_or("");
            let ok = t.len() == 12
                && t.starts_with('+')
                && t.bytes().enumerate().all(|(i, b)| match i {
                    0 => b == b'+',
                    3 | 7 => b == b' ',
                    _ => b.is_ascii_digit(),
                });
            if !ok {
                return Err(format!("regex {t:?}"));
            }
        }
        Kind::LlamaGrammar => {
            let t = text.unwrap_or("");
            let parts: Vec<&str> = t.trim_start().split(", ").collect();
            let ok = t.starts_with(' ')
                && parts.len() == 3
                && parts.iter().all(|p| {
                    !p.is_empty()
                        && p.len() <= 4
                        && !p.starts_with('0')
                        && p.bytes().all(|b| b.is_ascii_digit())
                });
            if !ok {
                return Err(format!("grammar {t:?}"));
            }
        }
        Kind::ToolStream => unreachable!("handled above"),
    }
    Ok(tokens)
}

/// One server run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Which server (`ruvllm (llama)`, `ruvllm (candle)`, `llama-server`).
    pub server: String,
    /// `--max-batch` of the server (llama-server: `--parallel`).
    pub max_batch: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// Seconds of load.
    pub secs: f64,
    /// Requests answered and valid.
    pub ok: u64,
    /// Requests that failed (transport error or a status other than 200).
    pub failed: u64,
    /// Answers that failed validation.
    pub invalid: u64,
    /// Completed requests per second.
    pub req_per_sec: f64,
    /// Output tokens per second (non-streamed answers' usage).
    pub tokens_per_sec: f64,
    /// Latency percentiles in seconds.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Server RSS after warm-up, KiB.
    pub rss_before_kib: u64,
    /// Server RSS at the end, KiB.
    pub rss_after_kib: u64,
    /// Mean sequences per forward pass (from /metrics).
    pub mean_batch: f64,
    /// Requests per kind.
    pub per_kind: Vec<(Kind, u64)>,
    /// Faults injected and unexpected answers to them.
    pub faults: crate::faults::FaultCounts,
    /// Server RSS samples (seconds into the run, KiB), every 10 s.
    pub rss_samples: Vec<(f64, u64)>,
    /// Server RSS at the end of the warm-up, KiB.
    pub rss_warm_kib: u64,
    /// Highest and lowest RSS after the warm-up, KiB.
    pub rss_after_warm_max_kib: u64,
    /// Lowest RSS after the warm-up, KiB.
    pub rss_after_warm_min_kib: u64,
    /// Whether the server process was still running at the end (no crash).
    pub server_alive: bool,
    /// The first problems seen.
    pub problems: Vec<String>,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(cfg: &LoadConfig, kind: &ServerKind, max_batch: usize) -> Result<Server> {
    let backend = match kind {
        ServerKind::Ruvllm(b) => b.clone(),
        ServerKind::LlamaServer(bin) => return start_llama_server(cfg, bin, max_batch),
    };
    let mut cmd = Command::new(&cfg.server_bin);
    cmd.args([
        "serve",
        "--port",
        "0",
        "--max-batch",
        &max_batch.to_string(),
        "--backend",
        &backend,
        "--threads",
        &cfg.threads.to_string(),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if let Some(m) = &cfg.model {
        cmd.arg("--model").arg(m);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", cfg.server_bin.display()))?;
    let stderr = child.stderr.take().context("server stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let Some(line) = lines.next() else {
            bail!("the server exited before reporting its address")
        };
        let line = line?;
        if let Some(i) = line.find("on http://") {
            let rest = &line[i + 3..];
            break rest.split_whitespace().next().unwrap_or("").to_string();
        }
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Ok(Server { child, url })
}

/// llama-server on the same model: `--parallel` slots of 4096 positions each, chat
/// templates through Jinja (for tools), waiting for `/health`.
fn start_llama_server(cfg: &LoadConfig, bin: &std::path::Path, max_batch: usize) -> Result<Server> {
    let model = cfg.model.clone().unwrap_or_else(crate::e2e::default_model);
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(bin)
        .arg("-m")
        .arg(&model)
        .args(["-t", &cfg.threads.to_string(), "--jinja"])
        .args(["-np", &max_batch.to_string()])
        .args(["-c", &(4096 * max_batch).to_string()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let t0 = Instant::now();
    loop {
        if let Some(st) = server.child.try_wait()? {
            bail!("{} exited with {st}", bin.display());
        }
        if ureq::get(&format!("{}/health", server.url))
            .call()
            .is_ok_and(|r| r.status() == 200)
        {
            return Ok(server);
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = server.child.kill();
            bail!("{} did not become healthy in 120 s", bin.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(300)))
            .build(),
    )
}

fn send(agent: &ureq::Agent, url: &str, path: &str, body: &Value) -> Result<(u16, String), String> {
    let mut r = agent
        .post(&format!("{url}{path}"))
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let text = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok((r.status().as_u16(), text))
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the load against one server with `max_batch`.
pub fn run_one(cfg: &LoadConfig, kind: &ServerKind, max_batch: usize) -> Result<LoadReport> {
    let server = start_server(cfg, kind, max_batch)?;
    let url = server.url.clone();
    let pid = server.child.id();
    let llama_server = matches!(kind, ServerKind::LlamaServer(_));
    let make = move |k: Kind, i: u64| -> (Kind, &'static str, Value) {
        if llama_server {
            llama_server_request(k, i, cfg.temperature)
        } else {
            let (p, b) = request(k, i, cfg.temperature);
            (k, p, b)
        }
    };
    // Warm-up: one request of each kind (compiles and caches every constraint). A
    // request llama-server cannot serve counts in the run, not here.
    let a = agent();
    for (i, k) in KINDS.iter().enumerate() {
        let (_, path, body) = make(*k, i as u64);
        let (s, t) = send(&a, &url, path, &body).map_err(anyhow::Error::msg)?;
        if s != 200 && !llama_server {
            bail!("warm-up {k:?}: HTTP {s}: {t}");
        }
    }
    let rss_before = rss_kib(pid);
    struct Shared {
        lat: Vec<f64>,
        ok: u64,
        failed: u64,
        invalid: u64,
        tokens: u64,
        per_kind: Vec<u64>,
        problems: Vec<String>,
    }
    let shared = Mutex::new(Shared {
        lat: Vec::new(),
        ok: 0,
        failed: 0,
        invalid: 0,
        tokens: 0,
        per_kind: vec![0; KINDS.len()],
        problems: Vec::new(),
    });
    let t0 = Instant::now();
    let deadline = t0 + cfg.duration;
    let faults = Mutex::new(crate::faults::FaultCounts {
        sent: vec![0; crate::faults::FAULTS.len()],
        ..Default::default()
    });
    let samples = Mutex::new(Vec::<(f64, u64)>::new());
    let host = url.trim_start_matches("http://").to_string();
    std::thread::scope(|s| {
        s.spawn(|| {
            while Instant::now() < deadline {
                samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((t0.elapsed().as_secs_f64(), rss_kib(pid)));
                std::thread::sleep(Duration::from_secs(10).min(deadline - Instant::now()));
            }
        });
        for c in 0..cfg.fault_clients {
            let (faults, host) = (&faults, &host);
            s.spawn(move || {
                let mut i = c as u64;
                while Instant::now() < deadline {
                    let k = (i as usize) % crate::faults::FAULTS.len();
                    let f = crate::faults::FAULTS[k];
                    let r = crate::faults::send(
                        f,
                        i / crate::faults::FAULTS.len() as u64,
                        host,
                        4 << 20,
                    );
                    let mut g = faults.lock().unwrap_or_else(|e| e.into_inner());
                    g.sent[k] += 1;
                    if let Err(e) = r {
                        g.unexpected += 1;
                        if g.problems.len() < 10 {
                            g.problems.push(e);
                        }
                    }
                    drop(g);
                    i += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
        for c in 0..cfg.clients {
            let url = url.clone();
            let shared = &shared;
            s.spawn(move || {
                let a = agent();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let ki = (c + i as usize) % KINDS.len();
                    let kind = KINDS[ki];
                    let seed = (c as u64) * 100_000 + i;
                    i += 1;
                    let (check_as, path, body) = make(kind, seed);
                    let t = Instant::now();
                    let r = send(&a, &url, path, &body);
                    let secs = t.elapsed().as_secs_f64();
                    let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
                    g.per_kind[ki] += 1;
                    match r {
                        Ok((200, text)) => match check(check_as, &text) {
                            Ok(n) => {
                                g.ok += 1;
                                g.tokens += n;
                                g.lat.push(secs);
                            }
                            Err(e) => {
                                g.invalid += 1;
                                // Every invalid answer is kept (there should be none).
                                if g.problems.len() < 100 {
                                    g.problems.push(format!("{kind:?} invalid: {e}"));
                                }
                            }
                        },
                        Ok((status, text)) => {
                            g.failed += 1;
                            if g.problems.len() < 10 {
                                g.problems.push(format!("{kind:?} HTTP {status}: {text}"));
                            }
                        }
                        Err(e) => {
                            g.failed += 1;
                            if g.problems.len() < 10 {
                                g.problems.push(format!("{kind:?} transport: {e}"));
                            }
                        }
                    }
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let rss_after = rss_kib(pid);
    let mut server = server;
    let server_alive = matches!(server.child.try_wait(), Ok(None));
    let samples = samples.into_inner().unwrap_or_else(|e| e.into_inner());
    let warm_secs = cfg.warmup.as_secs_f64();
    let after: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= warm_secs)
        .map(|x| x.1)
        .chain([rss_after])
        .collect();
    let rss_warm = after.first().copied().unwrap_or(rss_after);
    // A dead server has no metrics; the report still comes back (server_alive: false).
    let mtext = a
        .get(&format!("{url}/metrics"))
        .call()
        .ok()
        .and_then(|mut m| m.body_mut().read_to_string().ok())
        .unwrap_or_default();
    let passes = metric(&mtext, "ruvllm_forward_passes_total");
    let batched = metric(&mtext, "ruvllm_batched_sequences_total");
    let mut g = shared.into_inner().unwrap_or_else(|e| e.into_inner());
    g.lat.sort_by(f64::total_cmp);
    Ok(LoadReport {
        server: kind.label(),
        max_batch,
        clients: cfg.clients,
        secs,
        ok: g.ok,
        failed: g.failed,
        invalid: g.invalid,
        req_per_sec: g.ok as f64 / secs,
        tokens_per_sec: g.tokens as f64 / secs,
        p50: percentile(&g.lat, 0.5),
        p90: percentile(&g.lat, 0.9),
        p99: percentile(&g.lat, 0.99),
        rss_before_kib: rss_before,
        rss_after_kib: rss_after,
        mean_batch: if passes > 0.0 { batched / passes } else { 0.0 },
        per_kind: KINDS.iter().copied().zip(g.per_kind).collect(),
        problems: g.problems,
        faults: faults.into_inner().unwrap_or_else(|e| e.into_inner()),
        rss_samples: samples,
        rss_warm_kib: rss_warm,
        rss_after_warm_max_kib: after.iter().copied().max().unwrap_or(0),
        rss_after_warm_min_kib: after.iter().copied().min().unwrap_or(0),
        server_alive,
    })
}

/// The Markdown report.
pub fn markdown(cfg: &LoadConfig, reports: &[LoadReport], command: &str) -> String {
    let mut s = String::new();
    s.push_str("# Load: concurrent clients against `ruvllm serve`\n\n");
    s.push_str("Generated by `");
    s.push_str(command);
    s.push_str("` (do not edit by hand).\n\n");
    s.push_str(&format!(
        "{} clients on loopback for {} s per configuration, each sending one request after \
         another, cycling through a mix of {} request kinds (strict json_schema, nested \
         schema with patterns, named tool call, streamed `required` tool call with \
         `parallel_tool_calls: false`, vLLM `guided_choice` and `guided_regex`, Ollama \
         `format` schema, llama.cpp GBNF), temperature {}, a fresh seed per request. Every \
         answer is checked: HTTP 200, JSON, the schema (jsonschema), the tool's parameter \
         schema, the regex or grammar; a streamed call is rebuilt from its deltas.\n\n",
        cfg.clients,
        cfg.duration.as_secs(),
        KINDS.len(),
        cfg.temperature
    ));
    s.push_str(
        "llama-server (built by `scripts/build-llamacpp.sh`, `--parallel` equal to the batch, \
         4096 positions per slot, `--jinja`) gets the same mix in its own fields: vLLM's \
         choice and regex as a GBNF `grammar`, Ollama's `format` as the chat endpoint's \
         `response_format`; its answers are checked the same way. Output tokens per second \
         count the non-streamed answers' `usage`. llama-server has no /metrics here (mean \
         batch 0).\n\n",
    );
    s.push_str("| server | max batch | requests ok | failed | invalid | req/s | output tok/s | p50 s | p90 s | p99 s | mean batch | RSS before | RSS after |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in reports {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} MiB | {:.0} MiB |\n",
            r.server,
            r.max_batch,
            r.ok,
            r.failed,
            r.invalid,
            r.req_per_sec,
            r.tokens_per_sec,
            r.p50,
            r.p90,
            r.p99,
            r.mean_batch,
            r.rss_before_kib as f64 / 1024.0,
            r.rss_after_kib as f64 / 1024.0
        ));
    }
    for (r, l) in reports.iter().flat_map(|r| {
        reports
            .iter()
            .filter(|l| {
                l.server == "llama-server" && l.max_batch == r.max_batch && r.server != l.server
            })
            .map(move |l| (r, l))
    }) {
        s.push_str(&format!(
            "\n{} / llama-server at max batch {}: **{:.2}x** completed requests per second, \
             **{:.2}x** output tokens per second.\n",
            r.server,
            r.max_batch,
            r.req_per_sec / l.req_per_sec.max(1e-9),
            r.tokens_per_sec / l.tokens_per_sec.max(1e-9)
        ));
    }
    if let (Some(b), Some(one)) = (
        reports.iter().find(|r| r.max_batch > 1),
        reports
            .iter()
            .find(|r| r.max_batch == 1 && r.server == reports[0].server),
    ) {
        s.push_str(&format!(
            "\nBatching (max batch {}) vs one sequence per forward pass: **{:.2}x** requests \
             per second, **{:.2}x** output tokens per second.\n",
            b.max_batch,
            b.req_per_sec / one.req_per_sec.max(1e-9),
            b.tokens_per_sec / one.tokens_per_sec.max(1e-9)
        ));
    }
    s.push_str("\nRequests per kind (first configuration):\n\n");
    if let Some(r) = reports.first() {
        for (k, n) in &r.per_kind {
            s.push_str(&format!("- {k:?}: {n}\n"));
        }
    }
    for r in reports
        .iter()
        .filter(|r| r.faults.sent.iter().sum::<u64>() > 0)
    {
        s.push_str(&format!(
            "\n## Faults injected (max batch {})\n\n{} fault clients, one fault every 200 ms \
             each, beside the {} ordinary clients:\n\n| fault | sent |\n|---|---|\n",
            r.max_batch, cfg.fault_clients, r.clients
        ));
        for (f, n) in crate::faults::FAULTS.iter().zip(&r.faults.sent) {
            s.push_str(&format!("| {f:?} | {n} |\n"));
        }
        s.push_str(&format!(
            "\nUnexpected answers to faults: **{}**. Server process alive at the end: **{}**.\n\n\
             RSS after a {} s warm-up: {:.0} MiB; afterwards between {:.0} and {:.0} MiB \
             (max/warm = **{:.3}**). Samples every 10 s (s: MiB): {}\n",
            r.faults.unexpected,
            if r.server_alive { "yes" } else { "NO" },
            cfg.warmup.as_secs(),
            r.rss_warm_kib as f64 / 1024.0,
            r.rss_after_warm_min_kib as f64 / 1024.0,
            r.rss_after_warm_max_kib as f64 / 1024.0,
            r.rss_after_warm_max_kib as f64 / r.rss_warm_kib.max(1) as f64,
            r.rss_samples
                .iter()
                .step_by(6)
                .map(|(t, k)| format!("{:.0}: {:.0}", t, *k as f64 / 1024.0))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for p in &r.faults.problems {
            s.push_str(&format!("- unexpected: {}\n", p.replace('\n', " ")));
        }
    }
    let problems: Vec<&String> = reports.iter().flat_map(|r| &r.problems).collect();
    if !problems.is_empty() {
        s.push_str("\nProblems seen:\n\n");
        for p in problems {
            s.push_str(&format!("- {}\n", p.replace('\n', " ")));
        }
    }
    s
}

/// The `ruvllm` binary next to this one (the same target folder), if built.
pub fn sibling_binary() -> Option<PathBuf> {
    let me = std::env::current_exe().ok()?;
    let p = me.parent()?.join("ruvllm");
    p.exists().then_some(p)
}

/// One row of [`forward_steps`]: a decode step over `batch` sequences.
#[derive(Debug, Clone, Serialize)]
pub struct StepTiming {
    /// Whether our Q8_0 kernel was on (else candle's).
    pub own_kernel: bool,
    /// Sequences in the step.
    pub batch: usize,
    /// Median milliseconds per step.
    pub ms_per_step: f64,
    /// Output tokens per second (batch / step time).
    pub tokens_per_sec: f64,
}

/// Decode-step cost by batch size: `batch` sequences with `ctx` cached positions each,
/// one new token each, median of `reps` steps. The figure behind the scheduler's
/// batching and the f16 batch weights.
pub fn forward_steps(
    model_path: &std::path::Path,
    batches: &[usize],
    ctx: usize,
    reps: usize,
) -> Result<Vec<StepTiming>> {
    use ruvllm_runtime::{LoadOptions, Model};
    let mut out = Vec::new();
    for own in [false, true] {
        let m = Model::load(
            model_path,
            &LoadOptions {
                own_kernel: own,
                ..Default::default()
            },
        )?;
        let wide = own;
        let prompt: Vec<u32> = (0..ctx as u32).map(|i| 100 + i % 1000).collect();
        for &b in batches {
            let mut caches = Vec::new();
            for _ in 0..b {
                let mut c = m.new_cache();
                m.forward(&prompt, &mut c)?;
                caches.push(c);
            }
            let mut times = Vec::new();
            for r in 0..reps + 1 {
                let toks: Vec<[u32; 1]> = (0..b).map(|i| [(200 + i + r) as u32]).collect();
                let mut batch: Vec<(&[u32], &mut ruvllm_runtime::KvCache)> =
                    toks.iter().map(|t| &t[..]).zip(caches.iter_mut()).collect();
                let t0 = Instant::now();
                m.forward_batch(&mut batch)?;
                if r > 0 {
                    times.push(t0.elapsed().as_secs_f64());
                }
            }
            times.sort_by(f64::total_cmp);
            let med = times[times.len() / 2];
            out.push(StepTiming {
                own_kernel: wide,
                batch: b,
                ms_per_step: med * 1e3,
                tokens_per_sec: b as f64 / med,
            });
        }
    }
    Ok(out)
}
