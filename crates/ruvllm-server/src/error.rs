//! Errors as each dialect spells them.
//!
//! Every bad request is a 400 (never a 5xx: clients retry those) that names the offending
//! field in `param`, in the OpenAI shape `{"error":{"message","type","param","code"}}`;
//! Ollama clients expect `{"error":"message"}`, llama.cpp clients
//! `{"error":{"code","message","type"}}` and Anthropic's
//! `{"type":"error","error":{"type","message"}}`, so the shape follows the endpoint.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ruvllm_engine::schema::SchemaError;
use ruvllm_engine::{GrammarError, LimitKind, MatchError};
use ruvllm_runtime::RuntimeError;
use serde_json::json;

/// Which API family an endpoint belongs to (it decides the error shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI (`/v1/...`), also used for `/health` and `/metrics`.
    OpenAi,
    /// Ollama (`/api/...`).
    Ollama,
    /// llama.cpp's server (`/completion`).
    LlamaCpp,
    /// Anthropic's Messages API (`/v1/messages`).
    Anthropic,
    /// OpenAI's Responses API (`/v1/responses`): OpenAI's error shape, flat tools
    /// (`tools[i].parameters`, `tools[i].strict`).
    Responses,
}

/// An HTTP error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's `type` (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The offending request field, e.g. `response_format.json_schema.schema`.
    pub param: Option<String>,
    /// OpenAI's `code` (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
    /// The shape of the body.
    pub dialect: Dialect,
    /// Seconds for a `Retry-After` header (503 answers).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 naming `param`.
    pub fn bad(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: None,
            dialect: Dialect::OpenAi,
            retry_after: None,
        }
    }

    /// An error with any status and no param.
    pub fn status(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            dialect: Dialect::OpenAi,
            retry_after: None,
        }
    }

    /// The same error in another dialect's shape (a tool's schema named by the field
    /// that dialect spells it with: Anthropic's `input_schema`).
    pub fn dialect(mut self, d: Dialect) -> ApiError {
        self.dialect = d;
        match d {
            Dialect::Anthropic => self.tool_schema_at("input_schema"),
            Dialect::Responses => self.flat_tools(),
            _ => self,
        }
    }

    /// The error of a tool's parameter schema (`tools[i].function.parameters`, the
    /// OpenAI Chat spelling [`ApiError::from_runtime`] gives) renamed to `tools[i].FIELD`,
    /// for dialects that spell the tool another way; any other error as it is.
    pub fn tool_schema_at(mut self, field: &str) -> ApiError {
        if let Some(p) = &self.param {
            if let Some(i) = p
                .strip_prefix("tools[")
                .and_then(|r| r.strip_suffix("].function.parameters"))
            {
                let renamed = format!("tools[{i}].{field}");
                self.message = self.message.replace(p.as_str(), &renamed);
                self.param = Some(renamed);
            }
        }
        self
    }

    /// The error of a tool's field as OpenAI Chat spells it (`tools[i].function.FIELD`)
    /// renamed to the flat spelling of the Responses API (`tools[i].FIELD`); any other
    /// error as it is.
    pub fn flat_tools(mut self) -> ApiError {
        if let Some(p) = &self.param {
            if let Some((head, field)) = p.split_once("].function.") {
                if head.starts_with("tools[") {
                    let renamed = format!("{head}].{field}");
                    self.message = self.message.replace(p.as_str(), &renamed);
                    self.param = Some(renamed);
                }
            }
        }
        self
    }

    /// Sets OpenAI's `code`.
    pub fn code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// A runtime error met while starting or running a generation; `constraint_param`
    /// names the field the constraint came from (schema and grammar errors point there).
    pub fn from_runtime(e: &RuntimeError, constraint_param: &str) -> ApiError {
        match e {
            RuntimeError::Params { param, msg } => {
                let param = match *param {
                    "constraint" => constraint_param.to_string(),
                    p => p.to_string(),
                };
                ApiError::bad(param, e.to_string()).with_message_from(msg)
            }
            RuntimeError::Schema(_) | RuntimeError::JsonSchema(_) | RuntimeError::Grammar(_) => {
                ApiError::bad(constraint_param, name_flag(e))
            }
            RuntimeError::ToolSchema { index, .. } => {
                ApiError::bad(format!("tools[{index}].function.parameters"), name_flag(e))
            }
            RuntimeError::Match(MatchError::Budget { .. }) => ApiError::bad(
                constraint_param,
                format!("{e} (the constraint is too costly to follow; raise --max-parser-items)"),
            ),
            RuntimeError::Match(MatchError::MaskTime { .. }) => ApiError::bad(
                constraint_param,
                format!("{e} (the constraint is too costly to follow; raise --max-mask-time-ms)"),
            ),
            RuntimeError::ContextFull { .. } | RuntimeError::PromptTooLong { .. } => {
                ApiError::bad("messages", e.to_string()).code("context_length_exceeded")
            }
            RuntimeError::Template(_) | RuntimeError::Tokenizer(_) => {
                ApiError::bad("messages", e.to_string())
            }
            RuntimeError::Busy { .. } => ApiError {
                retry_after: Some(1),
                ..ApiError::status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_overloaded",
                    e.to_string(),
                )
            },
            _ => ApiError::status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                e.to_string(),
            ),
        }
    }

    fn with_message_from(mut self, msg: &str) -> ApiError {
        if let Some(p) = &self.param {
            self.message = format!("invalid parameter `{p}`: {msg}");
        }
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        match self.dialect {
            Dialect::OpenAi | Dialect::Responses => json!({"error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }}),
            Dialect::Ollama => json!({"error": self.message}),
            Dialect::LlamaCpp => json!({"error": {
                "code": self.status.as_u16(),
                "message": self.message,
                "type": self.kind,
            }}),
            // Anthropic's types; the field is named in the message, which its SDK shows.
            Dialect::Anthropic => {
                let kind = match self.status.as_u16() {
                    400 | 413 | 422 => "invalid_request_error",
                    401 => "authentication_error",
                    403 => "permission_error",
                    404 => "not_found_error",
                    429 => "rate_limit_error",
                    503 | 529 => "overloaded_error",
                    _ => "api_error",
                };
                let message = match &self.param {
                    Some(p) if !self.message.contains(p.as_str()) => {
                        format!("{p}: {}", self.message)
                    }
                    _ => self.message.clone(),
                };
                json!({"type": "error", "error": {"type": kind, "message": message}})
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        r
    }
}

/// The server's result type.
pub type ApiResult<T> = Result<T, ApiError>;

/// The `ruvllm serve` flag that sets engine limit `field` (a [`ruvllm_engine::Limits`]
/// field name): `max_compile_time` is `--max-compile-time-ms`, every other field is its
/// name with dashes.
pub fn limit_flag(field: &str) -> String {
    match field {
        "max_compile_time" => "--max-compile-time-ms".into(),
        f => format!("--{}", f.replace('_', "-")),
    }
}

/// The engine limit a runtime error is about, when it is a limit error.
pub fn limit_kind(e: &RuntimeError) -> Option<LimitKind> {
    fn of_grammar(g: &GrammarError) -> Option<LimitKind> {
        match g {
            GrammarError::Limit { kind, .. } => Some(*kind),
            _ => None,
        }
    }
    fn of_schema(s: &SchemaError) -> Option<LimitKind> {
        match s {
            SchemaError::Limit { kind, .. } => Some(*kind),
            SchemaError::Grammar(g) => of_grammar(g),
            _ => None,
        }
    }
    match e {
        RuntimeError::Grammar(g) => of_grammar(g),
        RuntimeError::Schema(s) | RuntimeError::ToolSchema { source: s, .. } => of_schema(s),
        _ => None,
    }
}

/// The error's message, with the engine's `Limits::field` (which an API caller cannot
/// set) replaced by the server flag that raises that limit.
fn name_flag(e: &RuntimeError) -> String {
    let msg = e.to_string();
    match limit_kind(e) {
        Some(k) => msg.replace(
            &k.to_string(),
            &format!("server flag {}", limit_flag(k.field())),
        ),
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_errors_name_the_server_flag() {
        let e = RuntimeError::Grammar(GrammarError::Limit {
            what: "number of rules",
            value: 3,
            limit: 2,
            kind: LimitKind::Rules,
        });
        assert_eq!(limit_kind(&e), Some(LimitKind::Rules));
        assert_eq!(
            name_flag(&e),
            "grammar limit exceeded: number of rules is 3, the limit is 2 (server flag --max-rules)"
        );
        let e = RuntimeError::Schema(ruvllm_engine::schema::SchemaError::Limit {
            what: "schema compile time in ms",
            value: 3,
            limit: 2,
            pointer: "#".into(),
            kind: LimitKind::CompileTime,
        });
        assert!(name_flag(&e).ends_with("(server flag --max-compile-time-ms)"));
    }
}
