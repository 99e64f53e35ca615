//! The endpoints clients call to find out what a server serves, before or beside
//! generating: OpenAI's `GET /v1/models/{id}`, Ollama's `POST /api/show` and `GET /api/ps`,
//! llama.cpp's `POST /tokenize`, `POST /detokenize` and `GET /props`. Each answers in its
//! dialect's shape with what this server really has (one model, its names, its template
//! and tokenizer); none generates.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Dialect};
use crate::params::{type_name, Fields};
use crate::state::{json_body, Shared};

/// `GET /v1/models/{id}`: the model under any name it answers to (404 otherwise).
pub async fn model(State(st): State<Shared>, Path(id): Path<String>) -> Response {
    match st.check_model(Some(&id), Dialect::OpenAi) {
        Ok(()) => Json(json!({
            "id": id, "object": "model", "created": st.created, "owned_by": "ruvllm",
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

fn details(st: &Shared) -> Value {
    let cfg = st.sched.model().model_config();
    let family = cfg.family.clone();
    json!({
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": "",
        "quantization_level": "",
    })
}

/// `POST /api/show` (`{"model": name}`, or the older `name`): the template, the model's
/// shape and what it can do.
pub async fn show(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    show_inner(st, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn show_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let v = json_body(body, Dialect::Ollama)?;
    let f = Fields::of(&v, "")?;
    let name = match f.str("model")? {
        Some(m) => Some(m),
        None => f.str("name")?,
    };
    let name =
        name.ok_or_else(|| ApiError::bad("model", "`model` is required").dialect(Dialect::Ollama))?;
    st.check_model(Some(name), Dialect::Ollama)?;
    let b = st.sched.model();
    let cfg = b.model_config();
    let family = cfg.family.clone();
    Ok(Json(json!({
        "modelfile": format!("FROM {}\n", st.model_id),
        "parameters": "",
        "template": b.chat_template(),
        "details": details(&st),
        "model_info": {
            "general.architecture": family,
            format!("{family}.block_count"): cfg.n_layer,
            format!("{family}.context_length"): cfg.context_length,
            format!("{family}.embedding_length"): cfg.n_embd,
            format!("{family}.attention.head_count"): cfg.n_head,
            format!("{family}.attention.head_count_kv"): cfg.n_kv_head,
            "tokenizer.ggml.vocab_size": cfg.vocab_size,
        },
        "capabilities": ["completion", "tools"],
        "modified_at": crate::ollama::rfc3339_now(),
    }))
    .into_response())
}

/// `GET /api/ps`: the one model, always loaded.
pub async fn ps(State(st): State<Shared>) -> Json<Value> {
    Json(json!({"models": [{
        "name": format!("{}:latest", st.model_id),
        "model": format!("{}:latest", st.model_id),
        "size": 0,
        "digest": "",
        "details": details(&st),
        "expires_at": "9999-12-31T23:59:59Z",
        "size_vram": 0,
    }]}))
}

/// `POST /tokenize` (llama.cpp): `content` to ids, `add_special` (BOS) when asked,
/// `with_pieces` for `{"id", "piece"}` pairs.
pub async fn tokenize(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    tokenize_inner(st, body).unwrap_or_else(IntoResponse::into_response)
}

fn tokenize_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let d = Dialect::LlamaCpp;
    let v = json_body(body, d)?;
    let f = Fields::of(&v, "")?;
    let content = f
        .str("content")?
        .ok_or_else(|| ApiError::bad("content", "`content` is required").dialect(d))?;
    let b = st.sched.model();
    let ids = if f.bool("add_special")?.unwrap_or(false) {
        b.encode(content)
            .map_err(|e| ApiError::from_runtime(&e, "content").dialect(d))?
    } else {
        let enc = b.vocab().encoder().ok_or_else(|| {
            ApiError::bad("content", "the model's vocabulary has no encoder").dialect(d)
        })?;
        enc.encode(content)
            .map_err(|e| ApiError::bad("content", e).dialect(d))?
    };
    let tokens: Vec<Value> = if f.bool("with_pieces")?.unwrap_or(false) {
        ids.iter()
            .map(|&t| {
                let bytes = b.vocab().token_bytes(t);
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => json!(s),
                    Err(_) => json!(bytes),
                };
                json!({"id": t, "piece": piece})
            })
            .collect()
    } else {
        ids.iter().map(|&t| json!(t)).collect()
    };
    Ok(Json(json!({"tokens": tokens})).into_response())
}

/// `POST /detokenize` (llama.cpp): ids (each checked against the vocabulary) to text.
pub async fn detokenize(State(st): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    detokenize_inner(st, body).unwrap_or_else(IntoResponse::into_response)
}

fn detokenize_inner(st: Shared, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let d = Dialect::LlamaCpp;
    let v = json_body(body, d)?;
    let vocab = st.sched.model().vocab().clone();
    let list = match v.get("tokens") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(ApiError::bad(
                "tokens",
                format!("`tokens` must be an array of ids, got {}", type_name(other)),
            )
            .dialect(d))
        }
        None => return Err(ApiError::bad("tokens", "`tokens` is required").dialect(d)),
    };
    let mut bytes = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let id = t
            .as_u64()
            .filter(|&id| (id as usize) < vocab.len())
            .ok_or_else(|| {
                ApiError::bad(
                    format!("tokens[{i}]"),
                    format!(
                        "tokens[{i}]: {t} is not a token id (0 to {})",
                        vocab.len() - 1
                    ),
                )
                .dialect(d)
            })?;
        bytes.extend_from_slice(vocab.token_bytes(id as u32));
    }
    Ok(Json(json!({"content": String::from_utf8_lossy(&bytes)})).into_response())
}

/// `GET /props` (llama.cpp): the generation defaults, slots, model and template.
pub async fn props(State(st): State<Shared>) -> Json<Value> {
    let b = st.sched.model();
    let cfg = b.model_config();
    let o = st.sched.options();
    Json(json!({
        "default_generation_settings": {
            "n_ctx": cfg.context_length,
            "params": {"n_predict": st.config.default_max_tokens},
        },
        "total_slots": o.max_batch,
        "model_path": st.model_id,
        "chat_template": b.chat_template(),
        "modalities": {"vision": false, "audio": false},
        "build_info": format!("ruvllm {}", env!("CARGO_PKG_VERSION")),
        // The CPU features the build was compiled for, and the llama.cpp kernels linked
        // (llama.cpp's own /props has no such field; its log prints the same list).
        "system_info": {
            "built_for": ruvllm_engine::cpu::built_for(),
            "llama_cpp": ruvllm_runtime::LlamaBackend::cpu_info(),
        },
    }))
}
