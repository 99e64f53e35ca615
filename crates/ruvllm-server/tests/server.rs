//! The server over real HTTP (ureq) on the default model: wire shapes, errors and limits,
//! admission (503), cancellation on disconnect, and the non-OpenAI dialects. The Python
//! client tests (`tests/clients/`) cover the client libraries themselves.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ruvllm_runtime::{BackendOptions, CandleBackend, SchedulerOptions};
use ruvllm_server::ServerConfig;
use serde_json::{json, Value};

fn backend() -> CandleBackend {
    static B: OnceLock<CandleBackend> = OnceLock::new();
    B.get_or_init(|| {
        let p = match std::env::var("RUVLLM_MODEL") {
            Ok(p) => PathBuf::from(p),
            Err(_) => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        };
        assert!(
            p.exists(),
            "{} is missing: run scripts/fetch-assets.sh",
            p.display()
        );
        CandleBackend::load(&p, &BackendOptions::default()).unwrap()
    })
    .clone()
}

/// Starts a server on a free loopback port (on its own thread and runtime).
fn start(config: ServerConfig) -> SocketAddr {
    start_with(backend(), config)
}

/// Starts a server of backend `b`.
fn start_with(b: CandleBackend, config: ServerConfig) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(ruvllm_server::serve(
            b,
            ServerConfig { port: 0, ..config },
            |a| tx.send(a).unwrap(),
        ))
        .unwrap();
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap()
}

fn shared() -> SocketAddr {
    static A: OnceLock<SocketAddr> = OnceLock::new();
    *A.get_or_init(|| start(ServerConfig::default()))
}

fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build(),
    )
}

/// POSTs JSON text; returns status, headers of interest and the body text.
fn post_raw(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
    auth: Option<&str>,
) -> (u16, Option<String>, String) {
    let mut req = agent()
        .post(&format!("http://{addr}{path}"))
        .header("Content-Type", "application/json");
    if let Some(k) = auth {
        req = req.header("Authorization", &format!("Bearer {k}"));
    }
    let mut r = req.send(body).unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let text = r.body_mut().read_to_string().unwrap();
    (r.status().as_u16(), retry, text)
}

fn post(addr: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let (s, _, t) = post_raw(addr, path, body.to_string().as_bytes(), None);
    (s, serde_json::from_str(&t).unwrap_or(Value::String(t)))
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut r = agent().get(&format!("http://{addr}{path}")).call().unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[test]
fn bad_requests_are_400s_naming_the_field() {
    let a = shared();
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"messages": user("hi"), "temperature": "hot"}),
            "temperature",
        ),
        (
            json!({"messages": user("hi"), "temperature": 7}),
            "temperature",
        ),
        (
            json!({"messages": user("hi"), "max_tokens": 0}),
            "max_tokens",
        ),
        (
            json!({"messages": user("hi"), "max_tokens": 100000}),
            "max_tokens",
        ),
        (json!({"messages": [{"content": "x"}]}), "messages[0].role"),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "messages[0].content[0]",
        ),
        (json!({}), "messages"),
        (json!({"messages": ["hi"]}), "messages[0]"),
        (
            json!({"messages": [{"role": "user", "content": "x", "tool_call_id": 5}]}),
            "messages[0].tool_call_id",
        ),
        (json!({"messages": user("hi"), "n": 2}), "n"),
        (
            json!({"messages": user("hi"), "logprobs": true}),
            "logprobs",
        ),
        (json!({"messages": user("hi"), "stop": [1]}), "stop"),
        (
            json!({"messages": user("hi"), "response_format": {"type": "xml"}}),
            "response_format.type",
        ),
        (
            json!({"messages": user("hi"), "response_format": {"type": "json_schema"}}),
            "response_format.json_schema",
        ),
        (
            json!({"messages": user("hi"), "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": "two"}}}}),
            "response_format.json_schema.schema",
        ),
        (
            json!({"messages": user("hi"), "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]}),
            "tools[0].function.parameters",
        ),
        (
            json!({"messages": user("hi"), "tools": [{"type": "function", "function": {"name": "bad name"}}]}),
            "tools[0]",
        ),
        (
            json!({"messages": user("hi"), "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
            "tool_choice.function.name",
        ),
        (
            json!({"messages": user("hi"), "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            json!({"messages": user("hi"), "guided_regex": "a+", "guided_choice": ["x"]}),
            "guided_choice",
        ),
        (
            json!({"messages": user("hi"), "guided_regex": "(unclosed"}),
            "guided_regex",
        ),
        (
            json!({"messages": user("hi"), "grammar": "root ::= undefined-rule"}),
            "grammar",
        ),
        (
            json!({"messages": user("hi"), "structured_outputs": {"choice": []}}),
            "structured_outputs.choice",
        ),
    ];
    for (body, param) in cases {
        let (s, v) = post(a, "/v1/chat/completions", body.clone());
        assert_eq!(s, 400, "{body} -> {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["param"], param, "{body} -> {v}");
        assert!(v["error"]["message"].as_str().unwrap().len() > 5);
    }
    // Not JSON, not UTF-8, not an object.
    for raw in [&b"{\"messages\": ["[..], &b"\xff\xfe{}"[..], &b"[1,2]"[..]] {
        let (s, _, t) = post_raw(a, "/v1/chat/completions", raw, None);
        assert_eq!(s, 400, "{t}");
        let v: Value = serde_json::from_str(&t).unwrap();
        assert_eq!(v["error"]["param"], "body");
    }
    // Unknown model and unknown path: 404 in the error shape.
    let (s, v) = post(
        a,
        "/v1/chat/completions",
        json!({"model": "gpt-9", "messages": user("hi")}),
    );
    assert_eq!(s, 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    let (s, t) = get(a, "/v1/nothing");
    assert_eq!(s, 404);
    assert!(t.contains("\"error\""));
    // Ollama's error shape is a plain string; llama.cpp's carries the code.
    let (s, v) = post(
        a,
        "/api/chat",
        json!({"messages": user("hi"), "options": {"temperature": "x"}}),
    );
    assert_eq!(s, 400);
    assert!(
        v["error"].as_str().unwrap().contains("options.temperature"),
        "{v}"
    );
    let (s, v) = post(
        a,
        "/completion",
        json!({"prompt": "x", "grammar": "root ::= ("}),
    );
    assert_eq!(s, 400);
    assert_eq!(v["error"]["code"], 400);
}

#[test]
fn chat_answer_shape_and_usage() {
    let a = shared();
    let (s, v) = post(
        a,
        "/v1/chat/completions",
        json!({"messages": user("What is the capital of France?"), "temperature": 0, "max_tokens": 24}),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let ch = &v["choices"][0];
    assert_eq!(ch["message"]["role"], "assistant");
    assert!(ch["message"]["refusal"].is_null());
    assert!(
        !ch["message"]["content"].as_str().unwrap().is_empty(),
        "{v}"
    );
    assert!(ch["finish_reason"] == "stop" || ch["finish_reason"] == "length");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
}

/// Reads an SSE body into its `data:` payloads.
fn sse_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not an SSE data event: {e:?}"))
                .to_string()
        })
        .collect()
}

#[test]
fn streamed_tool_call_deltas_follow_openai() {
    let a = shared();
    let tool = json!({"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": false}}});
    let body = json!({"messages": user("Add 2 and 3."), "tools": [tool],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "stream": true, "temperature": 0});
    let (s, _, text) = post_raw(a, "/v1/chat/completions", body.to_string().as_bytes(), None);
    assert_eq!(s, 200);
    let events = sse_events(&text);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let id = chunks[0]["id"].clone();
    let mut args = String::new();
    let mut names = 0;
    for c in &chunks {
        assert_eq!(c["id"], id);
        assert_eq!(c["object"], "chat.completion.chunk");
        if let Some(tc) = c["choices"][0]["delta"]["tool_calls"].as_array() {
            assert_eq!(tc[0]["index"], 0);
            if tc[0]["function"].get("name").is_some() {
                names += 1;
                assert_eq!(tc[0]["function"]["name"], "add");
                assert_eq!(tc[0]["type"], "function");
                assert!(tc[0]["id"].as_str().unwrap().starts_with("call_"));
            } else {
                assert!(tc[0].get("id").is_none() && tc[0].get("type").is_none());
            }
            args.push_str(tc[0]["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(names, 1);
    let v: Value = serde_json::from_str(&args).unwrap();
    assert!(v["a"].is_i64() && v["b"].is_i64(), "{v}");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[test]
fn llama_cpp_and_ollama_dialects() {
    let a = shared();
    let (s, v) = post(
        a,
        "/completion",
        json!({"prompt": "Q: Is water wet? A:", "grammar": "root ::= \" yes\" | \" no\"", "temperature": 0}),
    );
    assert_eq!(s, 200, "{v}");
    assert!(v["content"] == " yes" || v["content"] == " no", "{v}");
    assert_eq!(v["stop"], true);
    assert_eq!(v["stop_type"], "eos");
    assert!(v["timings"]["prompt_n"].as_u64().unwrap() > 0);
    let (_, v) = post(
        a,
        "/completion",
        json!({"prompt": "A person: ", "json_schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"], "additionalProperties": false}, "temperature": 0}),
    );
    let p: Value = serde_json::from_str(v["content"].as_str().unwrap()).unwrap();
    assert!(p["name"].is_string());
    let (_, v) = post(
        a,
        "/completion",
        json!({"prompt": "Once upon a time", "n_predict": 4, "temperature": 0}),
    );
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["tokens_predicted"], 4);
    // llama.cpp streaming: data events, the last with stop: true.
    let body = json!({"prompt": "1, 2, 3,", "n_predict": 6, "temperature": 0, "stream": true});
    let (_, _, text) = post_raw(a, "/completion", body.to_string().as_bytes(), None);
    let ev: Vec<Value> = sse_events(&text)
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(ev.last().unwrap()["stop"], true);
    assert!(ev[..ev.len() - 1].iter().all(|e| e["stop"] == false));
    // Ollama: raw generate without streaming; NDJSON when streaming (the default).
    let (s, v) = post(
        a,
        "/api/generate",
        json!({"prompt": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "raw": true, "stream": false, "options": {"temperature": 0, "num_predict": 8}}),
    );
    assert_eq!(s, 200);
    assert_eq!(v["done"], true);
    assert!(v["eval_count"].as_u64().unwrap() > 0);
    let (_, _, text) = post_raw(
        a,
        "/api/chat",
        json!({"messages": user("Hi"), "options": {"temperature": 0, "num_predict": 8}})
            .to_string()
            .as_bytes(),
        None,
    );
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["done"], true);
    assert!(lines.last().unwrap()["total_duration"].as_u64().unwrap() > 0);
    let (s, t) = get(a, "/api/tags");
    assert_eq!(s, 200);
    assert!(t.contains("SmolLM2-135M-Instruct.Q4_1:latest"));
    let (s, t) = get(a, "/api/version");
    assert_eq!(s, 200);
    assert!(t.contains("version"));
}

/// Budget-aware decoding in every dialect's spelling of the token limit: the answer is
/// complete within it, says so in its `ruvllm` object (and header), and `length` is kept
/// for answers that really are cut. And the object policy: llama.cpp's `json_schema` and
/// Ollama's `format` close objects that leave `additionalProperties` unsaid, OpenAI's
/// `response_format` does not, and a request's `additional_properties` decides.
#[test]
fn budgets_and_object_policy_in_every_dialect() {
    let a = shared();
    let story = json!({"type": "object", "properties": {"title": {"type": "string"},
        "story": {"type": "string"}}, "required": ["title", "story"]});
    let prompt = "Write a very long story as JSON with a title and the story: ";
    // llama.cpp: n_predict with json_schema and with a grammar.
    let (s, v) = post(
        a,
        "/completion",
        json!({"prompt": prompt, "json_schema": story, "n_predict": 16, "seed": 3}),
    );
    assert_eq!(s, 200, "{v}");
    let doc: Value = serde_json::from_str(v["content"].as_str().unwrap()).unwrap();
    assert!(doc["story"].is_string(), "{v}");
    assert_eq!(v["stop_type"], "eos", "{v}");
    assert!(v["tokens_predicted"].as_u64().unwrap() <= 16);
    assert_eq!(v["ruvllm"]["budget_closed"], true, "{v}");
    let (_, v) = post(
        a,
        "/completion",
        json!({"prompt": "Numbers: ", "grammar": "root ::= \"[\" [0-9]+ (\",\" [0-9]+)* \"]\"",
               "n_predict": 6, "seed": 1}),
    );
    let text = v["content"].as_str().unwrap();
    assert!(text.starts_with('[') && text.ends_with(']'), "{v}");
    // Off: cut, and `limit`.
    let (_, v) = post(
        a,
        "/completion",
        json!({"prompt": prompt, "json_schema": story, "n_predict": 16, "seed": 3,
               "budget_aware": false}),
    );
    assert_eq!(v["stop_type"], "limit", "{v}");
    assert_eq!(v["ruvllm"]["budget_closed"], false);
    // OpenAI legacy completions, streamed: the last chunk carries the extension.
    let body = json!({"prompt": prompt, "max_tokens": 16, "stream": true, "seed": 2,
                      "response_format": {"type": "json_schema",
                                          "json_schema": {"name": "s", "schema": story}}});
    let (_, _, text) = post_raw(a, "/v1/completions", body.to_string().as_bytes(), None);
    let ev: Vec<Value> = sse_events(&text)
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let last = ev.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop", "{last}");
    assert_eq!(last["ruvllm"]["budget_closed"], true, "{last}");
    let joined: String = ev
        .iter()
        .filter_map(|e| e["choices"][0]["text"].as_str())
        .collect();
    serde_json::from_str::<Value>(&joined).unwrap();
    // The object policy. An open object may take any key; with a prompt that invites
    // more keys, count the keys that are not declared.
    let person = json!({"type": "object", "properties": {"name": {"type": "string"}},
                        "required": ["name"]});
    let ask = "Describe a person as JSON with a name, an age, a city and hobbies.";
    let extra = |v: &Value| -> usize {
        let doc: Value = serde_json::from_str(v.as_str().unwrap()).unwrap();
        doc.as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "name")
            .count()
    };
    let mut open_extra = 0;
    for seed in 0..4 {
        let (_, v) = post(
            a,
            "/completion",
            json!({"prompt": ask, "json_schema": person, "n_predict": 64, "seed": seed}),
        );
        assert_eq!(extra(&v["content"]), 0, "llama.cpp json_schema closes: {v}");
        let (_, v) = post(
            a,
            "/api/generate",
            json!({"prompt": ask, "format": person, "stream": false,
                   "options": {"num_predict": 64, "seed": seed}}),
        );
        assert_eq!(extra(&v["response"]), 0, "Ollama format closes: {v}");
        let (_, v) = post(
            a,
            "/v1/chat/completions",
            json!({"messages": user(ask), "max_tokens": 64, "seed": seed,
                   "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "p", "schema": person}}}),
        );
        open_extra += extra(&v["choices"][0]["message"]["content"]);
        let (_, v) = post(
            a,
            "/v1/chat/completions",
            json!({"messages": user(ask), "max_tokens": 64, "seed": seed,
                   "additional_properties": false,
                   "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "p", "schema": person}}}),
        );
        assert_eq!(extra(&v["choices"][0]["message"]["content"]), 0, "{v}");
    }
    assert!(
        open_extra > 0,
        "OpenAI's response_format keeps the JSON Schema default"
    );
    let (s, v) = post(
        a,
        "/v1/chat/completions",
        json!({"messages": user("hi"), "additional_properties": "no"}),
    );
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("additional_properties"))
    );
}

#[test]
fn health_and_metrics() {
    // Its own server: other tests' generations would count as active on the shared one.
    let a = start(ServerConfig::default());
    post(
        a,
        "/v1/completions",
        json!({"prompt": "Hello", "max_tokens": 2}),
    );
    // A constrained one, so that the engine caches lexemes.
    post(
        a,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
               "response_format": {"type": "json_object"}}),
    );
    // Once the answer is back, nothing is running: `active` returns to 0 (the scheduler
    // updates it as its loop turns, so give it a moment).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (s, t) = get(a, "/health");
        assert_eq!(s, 200);
        let h: Value = serde_json::from_str(&t).unwrap();
        assert_eq!(h["status"], "ok");
        if h["active"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "active stays at {}", h["active"]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (s, t) = get(a, "/metrics");
    assert_eq!(s, 200);
    for name in [
        "ruvllm_requests_total{path=\"/v1/completions\",status=\"200\"}",
        "ruvllm_completion_tokens_total",
        "ruvllm_mask_seconds_total",
        "ruvllm_queue_depth",
        "ruvllm_engine_table_bytes",
    ] {
        assert!(t.contains(name), "{name} missing from\n{t}");
    }
    // The engine cached the lexemes of the request's constraints: some, and within bounds.
    let gauge = |name: &str| -> u64 {
        let line = t
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(gauge("ruvllm_engine_lexemes") > 0, "{t}");
    assert!(gauge("ruvllm_engine_dfa_bytes") <= 256 << 20, "{t}");
}

#[test]
fn api_key_and_body_limit() {
    let a = start(ServerConfig {
        api_key: Some("sekret".into()),
        max_body_bytes: 2048,
        ..ServerConfig::default()
    });
    let body = json!({"messages": user("hi"), "max_tokens": 1}).to_string();
    let (s, _, t) = post_raw(a, "/v1/chat/completions", body.as_bytes(), None);
    assert_eq!(s, 401, "{t}");
    assert!(t.contains("invalid_api_key"));
    let (s, _, _) = post_raw(a, "/v1/chat/completions", body.as_bytes(), Some("wrong"));
    assert_eq!(s, 401);
    let (s, _, t) = post_raw(a, "/v1/chat/completions", body.as_bytes(), Some("sekret"));
    assert_eq!(s, 200, "{t}");
    let (s, _) = get(a, "/health");
    assert_eq!(s, 200, "health needs no key");
    let big = json!({"messages": user(&"x".repeat(4096))}).to_string();
    let (s, _, t) = post_raw(a, "/v1/chat/completions", big.as_bytes(), Some("sekret"));
    assert_eq!(s, 413, "{t}");
    assert!(t.contains("--max-body-bytes"));
}

/// Sends a streaming request by hand and returns the open socket after the headers.
fn open_stream(a: SocketAddr, max_tokens: usize) -> BufReader<TcpStream> {
    let body = json!({"messages": user("Tell me a very long story about the sea."),
        "max_tokens": max_tokens, "stream": true, "temperature": 0.7, "seed": 1})
    .to_string();
    let mut s = TcpStream::connect(a).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    r
}

#[test]
fn full_queue_is_503_and_a_disconnect_frees_the_place() {
    let a = start(ServerConfig {
        scheduler: SchedulerOptions {
            max_batch: 1,
            max_waiting: 0,
            ..Default::default()
        },
        ..ServerConfig::default()
    });
    let mut first = open_stream(a, 2000);
    // Read until text arrives: the generation is decoding and holds the only place.
    let mut line = String::new();
    while !line.contains("\"content\":\"") || line.contains("\"content\":\"\"") {
        line.clear();
        first.read_line(&mut line).unwrap();
    }
    let body = json!({"messages": user("hi"), "max_tokens": 1}).to_string();
    let (s, retry, t) = post_raw(a, "/v1/chat/completions", body.as_bytes(), None);
    assert_eq!(s, 503, "{t}");
    assert_eq!(retry.as_deref(), Some("1"));
    // The client goes away: its place is free again at once.
    drop(first);
    let t0 = Instant::now();
    loop {
        let (s, _, t) = post_raw(a, "/v1/chat/completions", body.as_bytes(), None);
        if s == 200 {
            break;
        }
        assert_eq!(s, 503, "{t}");
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "the place was not freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("place freed {:?} after the disconnect", t0.elapsed());
    let (_, m) = get(a, "/metrics");
    assert!(m.contains("ruvllm_generations_cancelled_total 1"), "{m}");
}

/// `$ref`s to other documents resolve through the server's registry in every dialect, and
/// one that names nothing there is a 400 naming its URI and pointer (never the validator
/// crate's internals, never a fetch).
#[test]
fn references_resolve_through_the_server_registry() {
    let mut reg = ruvllm_engine::schema::SchemaRegistry::new();
    reg.insert(
        "https://example.com/person.json",
        json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
               "required": ["name", "age"], "additionalProperties": false}),
    )
    .unwrap();
    let a = start(ServerConfig {
        registry: Some(std::sync::Arc::new(reg)),
        ..ServerConfig::default()
    });
    let schema = json!({"type": "object", "properties": {"lead": {"$ref": "https://example.com/person.json"}},
                        "required": ["lead"], "additionalProperties": false});
    let ask = "Describe the team lead as JSON.";
    let check = |text: &str| {
        let doc: Value = serde_json::from_str(text).unwrap();
        let age = doc["lead"]["age"].as_i64().unwrap();
        assert!((0..=120).contains(&age), "{doc}");
        assert!(
            doc["lead"]["name"].as_str().unwrap().chars().count() <= 12,
            "{doc}"
        );
    };
    let (s, v) = post(
        a,
        "/completion",
        json!({"prompt": ask, "json_schema": schema, "n_predict": 64}),
    );
    assert_eq!(s, 200, "{v}");
    check(v["content"].as_str().unwrap());
    let (s, v) = post(
        a,
        "/api/chat",
        json!({"stream": false, "format": schema,
        "messages": [{"role": "user", "content": ask}], "options": {"num_predict": 64}}),
    );
    assert_eq!(s, 200, "{v}");
    check(v["message"]["content"].as_str().unwrap());
    let (s, v) = post(
        a,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": ask}],
        "max_tokens": 64, "response_format": {"type": "json_schema",
        "json_schema": {"name": "team", "schema": schema}}}),
    );
    assert_eq!(s, 200, "{v}");
    check(v["choices"][0]["message"]["content"].as_str().unwrap());
    // Not in the registry.
    let missing = json!({"properties": {"x": {"$ref": "https://example.com/nope.json"}}});
    let (s, v) = post(
        a,
        "/completion",
        json!({"prompt": ask, "json_schema": missing, "n_predict": 8}),
    );
    assert_eq!(s, 400, "{v}");
    let msg = v.to_string();
    assert!(
        msg.contains("https://example.com/nope.json") && msg.contains("#/properties/x"),
        "{msg}"
    );
    assert!(
        !msg.contains("resolve-http") && !msg.contains("custom resolver"),
        "{msg}"
    );
}

/// OpenAI's strict mode on a function tool and on `response_format`: objects closed and
/// every declared property present; an open object under strict is a 400 naming it.
#[test]
fn strict_tools_close_objects_and_require_every_property() {
    let a = shared();
    let tool = |strict: bool| {
        json!({"type": "function", "function": {"name": "weather", "strict": strict,
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["c", "f"]}}}}})
    };
    for seed in 0..3 {
        let body = json!({"messages": user("Weather in Tokyo?"), "tools": [tool(true)],
            "tool_choice": "required", "temperature": 1.0, "seed": seed, "max_tokens": 60});
        let (s, v) = post(a, "/v1/chat/completions", body);
        assert_eq!(s, 200, "{v}");
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
        let args: Value = serde_json::from_str(
            choice["message"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let keys: Vec<&String> = args.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["city", "unit"], "{args}");
    }
    // An object strict mode cannot close.
    let mut open = tool(true);
    open["function"]["parameters"]["additionalProperties"] = json!(true);
    let body = json!({"messages": user("hi"), "tools": [open], "tool_choice": "required"});
    let (s, v) = post(a, "/v1/chat/completions", body);
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "tools[0].function.parameters");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("additionalProperties"));
    let body = json!({"messages": user("hi"), "tools": [tool(true)],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
            "schema": {"type": "object", "properties": {"a": {
                "type": "object", "additionalProperties": {"type": "integer"}}}}}}});
    let (s, v) = post(a, "/v1/chat/completions", body);
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "response_format.json_schema.schema");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("#/properties/a"));
    let mut bad = tool(true);
    bad["function"]["strict"] = json!("yes");
    let (s, v) = post(
        a,
        "/v1/chat/completions",
        json!({"messages": user("hi"), "tools": [bad]}),
    );
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "tools[0].function.strict");
}

/// An unknown `format` is an annotation, never silently: the answer carries the warning
/// with its pointer (a header, and `ruvllm.warnings` in the body; issue 66).
#[test]
fn unknown_formats_are_reported() {
    let a = shared();
    let schema = json!({"type": "object", "properties": {
        "card": {"type": "string", "format": "credit-card", "maxLength": 4}},
        "required": ["card"], "additionalProperties": false});
    let body = json!({"messages": user("A card number as JSON."), "max_tokens": 24,
        "temperature": 0, "response_format": {"type": "json_schema",
            "json_schema": {"name": "c", "schema": schema}}});
    let mut r = agent()
        .post(&format!("http://{a}/v1/chat/completions"))
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .unwrap();
    let header = r
        .headers()
        .get("x-ruvllm-warning")
        .map(|h| h.to_str().unwrap().to_string());
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    let want =
        "#/properties/card/format: unknown format \"credit-card\": an annotation, not enforced";
    assert_eq!(header.as_deref(), Some(want), "{v}");
    assert_eq!(v["ruvllm"]["warnings"], json!([want]), "{v}");
    // A schema without one has neither.
    let body = json!({"messages": user("hi"), "max_tokens": 8,
        "response_format": {"type": "json_object"}});
    let r = agent()
        .post(&format!("http://{a}/v1/chat/completions"))
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .unwrap();
    assert!(r.headers().get("x-ruvllm-warning").is_none());
}

/// A schema shown in the system prompt constrains nothing unless asked for (a request's
/// `prompt_schema`, or `--prompt-schema`); when it does, the response says so.
#[test]
fn prompt_declared_schemas_are_opt_in() {
    let a = shared();
    let messages = json!([
        {"role": "system", "content": "Reply with JSON matching this json_schema: {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, \"required\": [\"n\"], \"additionalProperties\": false}"},
        {"role": "user", "content": "Pick a number."}]);
    let ask = |extra: Value| {
        let mut body = json!({"messages": messages, "response_format": {"type": "json_object"},
            "temperature": 0, "max_tokens": 40});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let mut r = agent()
            .post(&format!("http://{a}/v1/chat/completions"))
            .header("Content-Type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap();
        let note = r
            .headers()
            .get("x-ruvllm-constraint")
            .map(|h| h.to_str().unwrap().to_string());
        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        (note, v)
    };
    let (note, _) = ask(json!({}));
    assert_eq!(note, None);
    let (note, v) = ask(json!({"prompt_schema": true}));
    assert_eq!(note.as_deref(), Some("prompt-schema"));
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let out: Value =
        serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(
        out["n"].is_i64() && out.as_object().unwrap().len() == 1,
        "{out}"
    );
    // One pipeline: the Responses API reads the same field and applies the same rule.
    let body = json!({"instructions": messages[0]["content"], "input": "Pick a number.",
        "text": {"format": {"type": "json_object"}}, "prompt_schema": true,
        "temperature": 0, "max_output_tokens": 40});
    let mut r = agent()
        .post(&format!("http://{a}/v1/responses"))
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .unwrap();
    let note = r.headers().get("x-ruvllm-constraint").cloned();
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(note.unwrap().to_str().unwrap(), "prompt-schema", "{v}");
    let text = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "message")
        .map(|o| o["content"][0]["text"].as_str().unwrap().to_string())
        .unwrap();
    let out: Value = serde_json::from_str(&text).unwrap();
    assert!(
        out["n"].is_i64() && out.as_object().unwrap().len() == 1,
        "{out}"
    );
}

/// The endpoints clients probe, and the names the model answers to.
#[test]
fn probes_and_model_names() {
    let a = start(ServerConfig {
        aliases: vec!["gpt-4o-mini".into()],
        ..ServerConfig::default()
    });
    let (s, t) = get(a, "/v1/models");
    assert_eq!(s, 200);
    let list: Value = serde_json::from_str(&t).unwrap();
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[1], "gpt-4o-mini");
    let id = ids[0].to_string();
    let (s, t) = get(a, "/v1/models/gpt-4o-mini");
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        serde_json::from_str::<Value>(&t).unwrap()["id"],
        "gpt-4o-mini"
    );
    let (s, t) = get(a, "/v1/models/nope");
    assert_eq!(s, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&t).unwrap()["error"]["code"],
        "model_not_found"
    );
    let chat = |model: &str| json!({"model": model, "messages": user("Hi"), "max_tokens": 2});
    assert_eq!(post(a, "/v1/chat/completions", chat("gpt-4o-mini")).0, 200);
    assert_eq!(post(a, "/v1/chat/completions", chat("llama3:8b")).0, 404);
    let any = start(ServerConfig {
        any_model: true,
        ..ServerConfig::default()
    });
    assert_eq!(post(any, "/v1/chat/completions", chat("llama3:8b")).0, 200);
    // Ollama.
    let (s, v) = post(a, "/api/show", json!({"model": id}));
    assert_eq!(s, 200, "{v}");
    assert!(v["template"].as_str().unwrap().contains("im_start"), "{v}");
    assert_eq!(v["details"]["format"], "gguf");
    assert!(v["model_info"]["general.architecture"].is_string());
    assert_eq!(post(a, "/api/show", json!({"model": "nope"})).0, 404);
    let (s, t) = get(a, "/api/ps");
    assert_eq!(s, 200);
    let ps: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(ps["models"][0]["name"], format!("{id}:latest"));
    // llama.cpp.
    let (s, v) = post(a, "/tokenize", json!({"content": "Hello world"}));
    assert_eq!(s, 200, "{v}");
    let tokens = v["tokens"].clone();
    assert!(tokens.as_array().unwrap().len() >= 2);
    let (s, v) = post(a, "/detokenize", json!({"tokens": tokens}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["content"], "Hello world");
    let (_, v) = post(
        a,
        "/tokenize",
        json!({"content": "Hello", "with_pieces": true}),
    );
    assert_eq!(v["tokens"][0]["piece"], "Hello", "{v}");
    let (s, v) = post(
        a,
        "/tokenize",
        json!({"content": "Hello", "add_special": true}),
    );
    assert_eq!(s, 200);
    assert!(!v["tokens"].as_array().unwrap().is_empty());
    let (s, v) = post(a, "/detokenize", json!({"tokens": [1, 99999999]}));
    assert_eq!(s, 400, "{v}");
    assert!(v.to_string().contains("tokens[1]"), "{v}");
    let (s, t) = get(a, "/props");
    assert_eq!(s, 200);
    let p: Value = serde_json::from_str(&t).unwrap();
    assert!(p["total_slots"].as_u64().unwrap() >= 1);
    assert!(p["chat_template"].as_str().unwrap().contains("im_start"));
    assert!(p["default_generation_settings"]["n_ctx"].as_u64().unwrap() > 0);
}

/// The Anthropic Messages dialect: a forced tool's `tool_use` block, the named SSE events
/// of a stream, Anthropic's error shape, and `x-api-key`.
#[test]
fn anthropic_messages() {
    let a = shared();
    let tool = json!({"name": "add", "input_schema": {"type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": false}});
    let body = json!({"max_tokens": 40, "messages": user("Add 2 and 3."), "tools": [tool],
        "tool_choice": {"type": "tool", "name": "add"}, "temperature": 0});
    let (s, v) = post(a, "/v1/messages", body.clone());
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["type"], "message");
    assert_eq!(v["stop_reason"], "tool_use");
    let block = v["content"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(block["type"], "tool_use");
    assert!(
        block["input"]["a"].is_i64() && block["input"]["b"].is_i64(),
        "{v}"
    );
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // Streamed: named events; the input rebuilt from its deltas.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (s, _, text) = post_raw(a, "/v1/messages", streamed.to_string().as_bytes(), None);
    assert_eq!(s, 200);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    let mut partial = String::new();
    for d in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let e: Value = serde_json::from_str(d).unwrap();
        if e["delta"]["type"] == "input_json_delta" {
            partial.push_str(e["delta"]["partial_json"].as_str().unwrap());
        }
        if e["type"] == "message_delta" {
            assert_eq!(e["delta"]["stop_reason"], "tool_use");
        }
    }
    let input: Value = serde_json::from_str(&partial).unwrap();
    assert!(input["a"].is_i64(), "{input}");
    // Errors in Anthropic's shape, naming the field.
    let (s, v) = post(a, "/v1/messages", json!({"messages": user("hi")}));
    assert_eq!(s, 400);
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_tokens"));
    let (s, v) = post(
        a,
        "/v1/messages",
        json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {}}]}]}),
    );
    assert_eq!(s, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages[0].content[0].type"),
        "{v}"
    );
    // `x-api-key` is a key, as Anthropic's clients send it.
    let k = start(ServerConfig {
        api_key: Some("sekret".into()),
        ..ServerConfig::default()
    });
    let ask = |key: &str| {
        agent()
            .post(&format!("http://{k}/v1/messages/count_tokens"))
            .header("x-api-key", key)
            .send(json!({"messages": user("Hello")}).to_string().as_bytes())
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(ask("sekret"), 200);
    assert_eq!(ask("wrong"), 401);
}

/// A server on the default model with a chat template that has a reasoning section
/// (`tests/templates/chatml-think.jinja`, written for these tests).
fn thinking_server() -> SocketAddr {
    static A: OnceLock<SocketAddr> = OnceLock::new();
    *A.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let t = std::fs::read_to_string(root.join("tests/templates/chatml-think.jinja")).unwrap();
        let p = root.join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let opts = BackendOptions {
            chat_template: Some(t),
            ..Default::default()
        };
        start_with(
            CandleBackend::load(&p, &opts).unwrap(),
            ServerConfig::default(),
        )
    })
}

/// Named SSE events (`event:` and `data:` lines) as (name, data).
fn named_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            (name, data)
        })
        .collect()
}

/// Reasoning in every dialect: the constraint starts after `</think>`, the budget forces
/// it, the answer validates, and streams carry reasoning apart from content, rebuilding
/// to the non-streamed answer.
#[test]
fn reasoning_in_every_dialect() {
    let a = thinking_server();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string",
        "maxLength": 16}}, "required": ["city"], "additionalProperties": false});
    let valid = |text: &str| {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(jsonschema::is_valid(&schema, &v), "{text}");
    };
    let ask = user("What is the capital of France? Answer in JSON.");
    // OpenAI chat, whole and streamed.
    let body = json!({"messages": ask, "max_tokens": 80, "seed": 5, "reasoning_budget": 12,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "c", "schema": schema}}});
    let (s, v) = post(a, "/v1/chat/completions", body.clone());
    assert_eq!(s, 200, "{v}");
    let m = &v["choices"][0]["message"];
    valid(m["content"].as_str().unwrap());
    let reasoning = m["reasoning_content"].as_str().unwrap().to_string();
    assert!(!reasoning.is_empty() && !reasoning.contains("</think>"));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (s, _, text) = post_raw(a, "/v1/chat/completions", sb.to_string().as_bytes(), None);
    assert_eq!(s, 200);
    let (mut r, mut c) = (String::new(), String::new());
    for e in sse_events(&text) {
        if e == "[DONE]" {
            continue;
        }
        let d: Value = serde_json::from_str(&e).unwrap();
        let delta = &d["choices"][0]["delta"];
        r.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        c.push_str(delta["content"].as_str().unwrap_or(""));
    }
    assert_eq!(r.trim(), reasoning);
    assert_eq!(c, m["content"].as_str().unwrap());
    // Off: no reasoning.
    let mut off = body.clone();
    off["reasoning_effort"] = json!("none");
    let (s, v) = post(a, "/v1/chat/completions", off);
    assert_eq!(s, 200, "{v}");
    assert!(v["choices"][0]["message"]
        .get("reasoning_content")
        .is_none());
    valid(v["choices"][0]["message"]["content"].as_str().unwrap());
    // Grammar, regex and choices after the reasoning.
    for (field, value, check) in [
        ("grammar", json!("root ::= \"yes\" | \"no\""), "yes|no"),
        ("guided_regex", json!("[0-9]{3}"), "ddd"),
        ("guided_choice", json!(["red", "blue"]), "red|blue"),
    ] {
        let mut b = json!({"messages": user("Pick one."), "max_tokens": 40, "seed": 1,
                           "reasoning_budget": 6});
        b[field] = value;
        let (s, v) = post(a, "/v1/chat/completions", b);
        assert_eq!(s, 200, "{v}");
        let out = v["choices"][0]["message"]["content"].as_str().unwrap();
        let ok = match check {
            "ddd" => out.len() == 3 && out.bytes().all(|b| b.is_ascii_digit()),
            alts => alts.split('|').any(|x| x == out),
        };
        assert!(ok, "{field}: {out:?}");
        assert!(v["choices"][0]["message"]["reasoning_content"].is_string());
    }
    // Ollama: `thinking` beside the content, streamed as ndjson lines.
    let body = json!({"messages": ask, "think": true, "format": schema,
        "stream": false, "options": {"seed": 5, "num_predict": 80, "reasoning_budget": 12}});
    let (s, v) = post(a, "/api/chat", body.clone());
    assert_eq!(s, 200, "{v}");
    valid(v["message"]["content"].as_str().unwrap());
    let thinking = v["message"]["thinking"].as_str().unwrap().to_string();
    let mut sb = body;
    sb["stream"] = json!(true);
    let (_, _, text) = post_raw(a, "/api/chat", sb.to_string().as_bytes(), None);
    let (mut r, mut c) = (String::new(), String::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        let d: Value = serde_json::from_str(line).unwrap();
        r.push_str(d["message"]["thinking"].as_str().unwrap_or(""));
        c.push_str(d["message"]["content"].as_str().unwrap_or(""));
    }
    assert_eq!(r.trim(), thinking);
    assert_eq!(c, v["message"]["content"].as_str().unwrap());
    // Anthropic: a thinking block, then the forced tool call.
    let tool = json!({"name": "answer", "input_schema": schema});
    let body = json!({"max_tokens": 80, "messages": ask, "tools": [tool],
        "tool_choice": {"type": "tool", "name": "answer"}, "temperature": 0,
        "thinking": {"type": "enabled", "budget_tokens": 10}, "stream": true});
    let (s, _, text) = post_raw(a, "/v1/messages", body.to_string().as_bytes(), None);
    assert_eq!(s, 200, "{text}");
    let evs = named_events(&text);
    let kinds: Vec<String> = evs
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d["content_block"]["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["thinking", "tool_use"], "{text}");
    let (mut r, mut input) = (String::new(), String::new());
    for (_, d) in &evs {
        r.push_str(d["delta"]["thinking"].as_str().unwrap_or(""));
        input.push_str(d["delta"]["partial_json"].as_str().unwrap_or(""));
    }
    assert!(!r.trim().is_empty());
    valid(&input);
    // Anthropic without `thinking`: off, as Anthropic's default.
    let mut b2 = body;
    b2.as_object_mut().unwrap().remove("thinking");
    b2["stream"] = json!(false);
    let (s, v) = post(a, "/v1/messages", b2);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["content"][0]["type"], "tool_use", "{v}");
    // Responses: a reasoning item, then the message.
    let body = json!({"input": "What is the capital of France? Answer in JSON.",
        "max_output_tokens": 80, "reasoning": {"effort": "low"}, "reasoning_budget": 12,
        "text": {"format": {"type": "json_schema", "name": "c", "schema": schema}},
        "stream": true});
    let (s, _, text) = post_raw(a, "/v1/responses", body.to_string().as_bytes(), None);
    assert_eq!(s, 200, "{text}");
    let evs = named_events(&text);
    let (mut r, mut c) = (String::new(), String::new());
    for (n, d) in &evs {
        match n.as_str() {
            "response.reasoning_text.delta" => r.push_str(d["delta"].as_str().unwrap()),
            "response.output_text.delta" => c.push_str(d["delta"].as_str().unwrap()),
            _ => {}
        }
    }
    let done = &evs.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["type"], "reasoning", "{done}");
    assert_eq!(done["output"][0]["content"][0]["text"].as_str().unwrap(), r);
    assert_eq!(done["output"][1]["type"], "message");
    valid(&c);
    assert!(
        done["usage"]["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
}

/// The same cases through every dialect, each answered in its own spelling: a text answer
/// cut by the token limit while tools are offered is `length` (as without tools); a known
/// path asked with another method is a 405 with the dialect's error body; a body nested
/// past the parser's limit names the limit; a tool schema error names the dialect's own
/// field; Ollama's `format: "json"` answers an object.
#[test]
fn one_truth_across_dialects() {
    let a = shared();
    let weather = json!({"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]});
    let ask = "Write a long poem about the sea, in many verses.";
    let openai_tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather of a city", "parameters": weather}}]);
    // (dialect, path, body, how the answer says it was cut, whether it made calls)
    type Cut = fn(&Value) -> (bool, bool);
    let cases: Vec<(&str, &str, Value, Cut)> = vec![
        (
            "openai",
            "/v1/chat/completions",
            json!({"messages": user(ask), "max_tokens": 8, "seed": 1, "tools": openai_tools,
                   "tool_choice": "auto"}),
            |v| {
                let c = &v["choices"][0];
                (
                    c["finish_reason"] == "length",
                    c["message"]["tool_calls"].is_array(),
                )
            },
        ),
        (
            "anthropic",
            "/v1/messages",
            json!({"messages": user(ask), "max_tokens": 8, "model": "SmolLM2-135M-Instruct.Q4_1",
                   "tools": [{"name": "get_weather", "input_schema": weather}]}),
            |v| {
                let calls = v["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"));
                (v["stop_reason"] == "max_tokens", calls)
            },
        ),
        (
            "responses",
            "/v1/responses",
            json!({"input": ask, "max_output_tokens": 8,
                   "tools": [{"type": "function", "name": "get_weather", "parameters": weather}]}),
            |v| {
                let calls = v["output"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|i| i["type"] == "function_call"));
                (v["status"] == "incomplete", calls)
            },
        ),
        (
            "ollama",
            "/api/chat",
            json!({"messages": user(ask), "stream": false, "tools": openai_tools,
                   "options": {"num_predict": 8, "seed": 1}}),
            |v| {
                let calls = v["message"]["tool_calls"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty());
                (v["done_reason"] == "length", calls)
            },
        ),
    ];
    let mut text_answers = 0;
    for (name, path, body, cut) in cases {
        let (s, v) = post(a, path, body);
        assert_eq!(s, 200, "{name}: {v}");
        let (is_cut, calls) = cut(&v);
        if !calls {
            text_answers += 1;
            assert!(is_cut, "{name}: a cut text answer must say so: {v}");
            // Budget-aware decoding closed nothing there.
            assert_ne!(
                v.pointer("/ruvllm/budget_closed"),
                Some(&json!(true)),
                "{name}: {v}"
            );
        }
    }
    assert!(text_answers >= 3, "the poem prompt gives text answers");

    // 405 with a body, in the dialect's shape.
    for (path, field) in [
        ("/v1/chat/completions", "/error/message"),
        ("/api/chat", "/error"),
        ("/v1/messages", "/error/message"),
        ("/completion", "/error/message"),
    ] {
        let (s, t) = get(a, path);
        let v: Value = serde_json::from_str(&t).unwrap_or_else(|_| panic!("{path}: {t:?}"));
        assert_eq!(s, 405, "{path}: {t}");
        let msg = v.pointer(field).and_then(Value::as_str).unwrap_or_default();
        assert!(msg.contains("GET"), "{path}: {t}");
    }

    // A body nested past serde_json's 128 levels names the limit.
    let deep = format!(
        r#"{{"messages": [{{"role": "user", "content": "hi"}}], "x": {}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let (s, _, t) = post_raw(a, "/v1/chat/completions", deep.as_bytes(), None);
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("deeper than 128 levels"), "{t}");

    // A tool schema error names the dialect's field.
    let bad = json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}});
    let (s, v) = post(
        a,
        "/v1/messages",
        json!({"messages": user("hi"), "max_tokens": 4, "model": "SmolLM2-135M-Instruct.Q4_1",
               "tools": [{"name": "f", "input_schema": bad}]}),
    );
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(s, 400, "{v}");
    assert!(
        msg.contains("tools[0].input_schema") && !msg.contains("function.parameters"),
        "{v}"
    );
    let (s, v) = post(
        a,
        "/v1/chat/completions",
        json!({"messages": user("hi"), "max_tokens": 4,
               "tools": [{"type": "function", "function": {"name": "f", "parameters": bad}}]}),
    );
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("tools[0].function.parameters")),
        "{v}"
    );
    let (s, v) = post(
        a,
        "/v1/responses",
        json!({"input": "hi", "max_output_tokens": 4,
               "tools": [{"type": "function", "name": "f", "parameters": bad}]}),
    );
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("tools[0].parameters")),
        "{v}"
    );
    let (s, v) = post(
        a,
        "/v1/responses",
        json!({"input": "hi", "max_output_tokens": 4,
               "tools": [{"type": "function", "name": "f", "strict": "yes",
                          "parameters": {"type": "object"}}]}),
    );
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("tools[0].strict")),
        "{v}"
    );

    // Ollama's JSON mode: an object, every time.
    let mut whole = 0;
    for seed in 0..6 {
        let (s, v) = post(
            a,
            "/api/generate",
            json!({"prompt": "Give me a number.", "format": "json", "stream": false,
                   "options": {"num_predict": 48, "seed": seed}}),
        );
        assert_eq!(s, 200, "{v}");
        if v["done_reason"] == "stop" {
            let doc: Value = serde_json::from_str(v["response"].as_str().unwrap()).unwrap();
            assert!(doc.is_object(), "seed {seed}: {v}");
            whole += 1;
        }
    }
    assert!(whole >= 3, "most JSON answers end within 48 tokens");
}
