//! Reading request bodies field by field, so that every mistake is a 400 naming the
//! field (`param`), and turning each dialect's knobs into [`ruvllm_runtime::GenerateParams`] and an
//! [`OutputConstraint`].
//!
//! Fields that would change the output if ignored (`n > 1`, `logprobs`, `logit_bias`,
//! unknown `response_format` types) are refused rather than silently dropped; fields that
//! only label a request (`user`, `metadata`, `store`) are accepted and ignored.

use std::sync::Arc;

use ruvllm_engine::schema::{SchemaOptions, SchemaRegistry, Whitespace};
use ruvllm_runtime::{JsonSchema, Message, OutputConstraint, Tool, ToolCalling, ToolChoice};
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// A JSON object being read, with the path of its fields for errors.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
}

/// The JSON type of `v`, for error messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Fields<'a> {
    /// The fields of `v`, which must be an object (`what` names it in the error).
    pub fn of(v: &'a Value, what: &str) -> ApiResult<Fields<'a>> {
        match v {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: what.to_string(),
            }),
            other => Err(ApiError::bad(
                what,
                format!("expected a JSON object, got {}", type_name(other)),
            )),
        }
    }

    /// The full name of field `k`.
    pub fn path(&self, k: &str) -> String {
        if self.prefix.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.prefix)
        }
    }

    /// Field `k`, treating `null` as absent.
    pub fn get(&self, k: &str) -> Option<&'a Value> {
        self.map.get(k).filter(|v| !v.is_null())
    }

    fn wrong(&self, k: &str, want: &str, got: &Value) -> ApiError {
        ApiError::bad(
            self.path(k),
            format!("`{}` must be {want}, got {}", self.path(k), type_name(got)),
        )
    }

    /// A string field.
    pub fn str(&self, k: &str) -> ApiResult<Option<&'a str>> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(k, "a string", v)),
        }
    }

    /// A boolean field.
    pub fn bool(&self, k: &str) -> ApiResult<Option<bool>> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(k, "a boolean", v)),
        }
    }

    /// A number field within `[lo, hi]`.
    pub fn num(&self, k: &str, lo: f64, hi: f64) -> ApiResult<Option<f32>> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if !(lo..=hi).contains(&x) {
                    return Err(ApiError::bad(
                        self.path(k),
                        format!("`{}` is {x}, which is not in [{lo}, {hi}]", self.path(k)),
                    ));
                }
                Ok(Some(x as f32))
            }
            Some(v) => Err(self.wrong(k, "a number", v)),
        }
    }

    /// An integer field within `[lo, hi]`.
    pub fn int(&self, k: &str, lo: i64, hi: i64) -> ApiResult<Option<i64>> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let x = n
                    .as_i64()
                    .or_else(|| {
                        n.as_f64()
                            .filter(|f| f.fract() == 0.0 && f.abs() < 9e18)
                            .map(|f| f as i64)
                    })
                    .ok_or_else(|| self.wrong(k, "an integer", &Value::Number(n.clone())))?;
                if !(lo..=hi).contains(&x) {
                    return Err(ApiError::bad(
                        self.path(k),
                        format!("`{}` is {x}, which is not in [{lo}, {hi}]", self.path(k)),
                    ));
                }
                Ok(Some(x))
            }
            Some(v) => Err(self.wrong(k, "an integer", v)),
        }
    }

    /// A seed: any 64-bit integer (negative seeds are reinterpreted).
    pub fn seed(&self, k: &str) -> ApiResult<Option<u64>> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .or_else(|| n.as_i64().map(|x| x as u64))
                .map(Some)
                .ok_or_else(|| self.wrong(k, "an integer", &Value::Number(n.clone()))),
            Some(v) => Err(self.wrong(k, "an integer", v)),
        }
    }

    /// `stop`: a string or an array of at most 16 non-empty strings.
    pub fn stop(&self, k: &str) -> ApiResult<Vec<String>> {
        let list = match self.get(k) {
            None => return Ok(Vec::new()),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| match x {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.wrong(k, "a string or an array of strings", other)),
                })
                .collect::<ApiResult<Vec<_>>>()?,
            Some(v) => return Err(self.wrong(k, "a string or an array of strings", v)),
        };
        if list.len() > 16 {
            return Err(ApiError::bad(self.path(k), "at most 16 stop sequences"));
        }
        if list.iter().any(|s| s.is_empty() || s.len() > 256) {
            return Err(ApiError::bad(
                self.path(k),
                "stop sequences must be 1 to 256 bytes",
            ));
        }
        Ok(list)
    }

    /// An object field.
    pub fn obj(&self, k: &str) -> ApiResult<Option<Fields<'a>>> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Fields {
                map,
                prefix: self.path(k),
            })),
            Some(v) => Err(self.wrong(k, "an object", v)),
        }
    }
}

/// A constraint and the request field it came from.
#[derive(Debug, Clone)]
pub struct Constraint {
    /// The constraint.
    pub c: OutputConstraint,
    /// Where it came from, for errors.
    pub param: String,
}

/// What objects whose schema leaves `additionalProperties` unsaid accept (see
/// [`ObjectPolicy`]), resolved for one request.
#[derive(Debug, Clone)]
pub struct Objects {
    /// The server's policy.
    pub policy: ObjectPolicy,
    /// The request's `additional_properties` field: `true` open, `false` closed.
    pub request: Option<bool>,
    /// The server's schema registry (`ruvllm serve --schema-registry`): documents the
    /// request's schemas may `$ref` by URI.
    pub registry: Option<Arc<SchemaRegistry>>,
}

/// The server's policy for objects whose schema declares `properties` but leaves
/// `additionalProperties` unsaid (`ruvllm serve --additional-properties`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ObjectPolicy {
    /// As each field's own server does (the default): closed for Ollama's `format` and
    /// llama.cpp's `json_schema` (both close them), open (the JSON Schema default) for
    /// OpenAI's `response_format` and vLLM's and SGLang's fields; closed under OpenAI's
    /// `strict`, always.
    #[default]
    Dialect,
    /// Always open (the JSON Schema default), but under `strict`.
    Open,
    /// Always closed.
    Closed,
}

impl Objects {
    /// Whether a schema from `param` closes its objects (`strict` always does). Tool
    /// parameters are `param` `tools` under OpenAI and `ollama tools` under Ollama
    /// (whose server closes them).
    pub fn closed(&self, param: &str, strict: bool) -> bool {
        if strict {
            return true;
        }
        if let Some(open) = self.request {
            return !open;
        }
        match self.policy {
            ObjectPolicy::Open => false,
            ObjectPolicy::Closed => true,
            ObjectPolicy::Dialect => {
                matches!(param, "format" | "json_schema" | "ollama tools")
            }
        }
    }

    /// The policy for a request: the server's, and the request's `additional_properties`
    /// (a boolean) if it has one.
    pub fn of(
        policy: ObjectPolicy,
        registry: Option<Arc<SchemaRegistry>>,
        f: &Fields,
    ) -> ApiResult<Objects> {
        Ok(Objects {
            policy,
            request: f.bool("additional_properties")?,
            registry,
        })
    }

    /// Schema options for a schema from `param` ([`generation_options`], with the
    /// server's registry).
    pub fn options(&self, param: &str, strict: bool) -> SchemaOptions {
        SchemaOptions {
            registry: self.registry.clone(),
            ..generation_options(strict, self.closed(param, strict))
        }
    }
}

/// Schema options for generation ([`SchemaOptions::generation`]); `strict` closes every
/// object, `closed` those that declare properties.
pub fn generation_options(strict: bool, closed: bool) -> SchemaOptions {
    SchemaOptions {
        strict,
        closed_objects: closed,
        ..SchemaOptions::generation()
    }
}

/// A schema from `param` as a constraint (400 naming `param` when it is not a valid
/// JSON Schema); `strict` closes its objects.
pub fn schema_constraint(
    schema: &Value,
    param: &str,
    strict: bool,
    objects: &Objects,
) -> ApiResult<Constraint> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err(ApiError::bad(
            param,
            format!(
                "`{param}` must be a JSON Schema (an object), got {}",
                type_name(schema)
            ),
        ));
    }
    let js = JsonSchema::from_value_with(schema.clone(), objects.registry.as_deref())
        .map_err(|e| ApiError::bad(param, format!("`{param}` is not a valid JSON Schema: {e}")))?;
    Ok(Constraint {
        c: OutputConstraint::JsonSchema {
            schema: js,
            options: objects.options(param, strict),
        },
        param: param.into(),
    })
}

fn json_object() -> OutputConstraint {
    OutputConstraint::JsonObject {
        whitespace: Whitespace::Compact,
    }
}

/// OpenAI's `response_format` (with the shapes other servers accept: a `schema` beside
/// `json_object`, a flat `json_schema`). `None` for `text`.
pub fn response_format(f: &Fields, objects: &Objects) -> ApiResult<Option<Constraint>> {
    let Some(rf) = f.get("response_format") else {
        return Ok(None);
    };
    let rf = Fields::of(rf, "response_format")?;
    let ty = rf.str("type")?.ok_or_else(|| {
        ApiError::bad("response_format.type", "`response_format.type` is required")
    })?;
    match ty {
        "text" => Ok(None),
        "json_object" => match rf.get("schema") {
            Some(s) => schema_constraint(s, "response_format.schema", false, objects).map(Some),
            None => Ok(Some(Constraint {
                c: json_object(),
                param: "response_format".into(),
            })),
        },
        "json_schema" => {
            if let Some(js) = rf.get("json_schema") {
                let js = Fields::of(js, "response_format.json_schema")?;
                let strict = js.bool("strict")?.unwrap_or(false);
                js.str("name")?;
                let schema = js.get("schema").ok_or_else(|| {
                    ApiError::bad(
                        "response_format.json_schema.schema",
                        "`response_format.json_schema.schema` is required",
                    )
                })?;
                let param = "response_format.json_schema.schema";
                let schema = if strict {
                    strict_schema(schema, param)?
                } else {
                    schema.clone()
                };
                schema_constraint(&schema, param, strict, objects).map(Some)
            } else if let Some(s) = rf.get("schema") {
                schema_constraint(s, "response_format.schema", false, objects).map(Some)
            } else {
                Err(ApiError::bad(
                    "response_format.json_schema",
                    "`response_format.json_schema` is required for type json_schema",
                ))
            }
        }
        other => Err(ApiError::bad(
            "response_format.type",
            format!(
                "response_format type {other:?} is not supported (text, json_object, json_schema)"
            ),
        )),
    }
}

fn string_list(v: &Value, param: &str) -> ApiResult<Vec<String>> {
    let a = v
        .as_array()
        .ok_or_else(|| ApiError::bad(param, format!("`{param}` must be an array of strings")))?;
    let list: Vec<String> = a
        .iter()
        .map(|x| {
            x.as_str().map(str::to_string).ok_or_else(|| {
                ApiError::bad(param, format!("`{param}` must be an array of strings"))
            })
        })
        .collect::<ApiResult<_>>()?;
    if list.is_empty() {
        return Err(ApiError::bad(
            param,
            format!("`{param}` needs at least one choice"),
        ));
    }
    Ok(list)
}

fn text_field(f: &Fields, k: &str) -> ApiResult<Option<(String, String)>> {
    Ok(f.str(k)?.map(|s| (s.to_string(), f.path(k))))
}

/// Every structured-output field a request may carry, of any dialect: `response_format`
/// (OpenAI), `structured_outputs` and `guided_*` (vLLM), `regex` and `ebnf` (SGLang),
/// `grammar` and `json_schema` (llama.cpp), `format` (Ollama, when `ollama_format`).
/// At most one may be given.
pub fn constraint(
    f: &Fields,
    ollama_format: bool,
    objects: &Objects,
) -> ApiResult<Option<Constraint>> {
    let mut found: Vec<Constraint> = Vec::new();
    if let Some(c) = response_format(f, objects)? {
        found.push(c);
    }
    if let Some(so) = f.obj("structured_outputs")? {
        if let Some(s) = so.get("json") {
            // vLLM accepts the schema as an object or as JSON text.
            let v = match s {
                Value::String(t) => serde_json::from_str(t).map_err(|e| {
                    ApiError::bad("structured_outputs.json", format!("not JSON: {e}"))
                })?,
                other => other.clone(),
            };
            found.push(schema_constraint(
                &v,
                "structured_outputs.json",
                false,
                objects,
            )?);
        }
        if let Some((r, p)) = text_field(&so, "regex")? {
            found.push(Constraint {
                c: OutputConstraint::Regex(r),
                param: p,
            });
        }
        if let Some(c) = so.get("choice") {
            found.push(Constraint {
                c: OutputConstraint::Choice(string_list(c, "structured_outputs.choice")?),
                param: "structured_outputs.choice".into(),
            });
        }
        if let Some((g, p)) = text_field(&so, "grammar")? {
            found.push(Constraint {
                c: OutputConstraint::Gbnf(g),
                param: p,
            });
        }
        if so.bool("json_object")? == Some(true) {
            found.push(Constraint {
                c: json_object(),
                param: "structured_outputs.json_object".into(),
            });
        }
    }
    if let Some(s) = f.get("guided_json") {
        let v = match s {
            Value::String(t) => serde_json::from_str(t)
                .map_err(|e| ApiError::bad("guided_json", format!("not JSON: {e}")))?,
            other => other.clone(),
        };
        found.push(schema_constraint(&v, "guided_json", false, objects)?);
    }
    for (k, make) in [
        (
            "guided_regex",
            OutputConstraint::Regex as fn(String) -> OutputConstraint,
        ),
        ("regex", OutputConstraint::Regex),
        ("guided_grammar", OutputConstraint::Gbnf),
        ("ebnf", OutputConstraint::Gbnf),
        ("grammar", OutputConstraint::Gbnf),
    ] {
        if let Some((t, p)) = text_field(f, k)? {
            // llama.cpp sends `"grammar": ""` for "no grammar"; an empty regex is a real
            // constraint (only the empty output), so it is kept.
            let is_regex = k.ends_with("regex");
            if is_regex || !t.is_empty() {
                found.push(Constraint {
                    c: make(t),
                    param: p,
                });
            }
        }
    }
    if let Some(c) = f.get("guided_choice") {
        found.push(Constraint {
            c: OutputConstraint::Choice(string_list(c, "guided_choice")?),
            param: "guided_choice".into(),
        });
    }
    if let Some(s) = f.get("json_schema") {
        found.push(schema_constraint(s, "json_schema", false, objects)?);
    }
    if ollama_format {
        match f.get("format") {
            None => {}
            // Ollama's JSON mode answers an object (its grammar is llama.cpp's
            // `json.gbnf`, whose root is an object), never a bare number or string.
            Some(Value::String(s)) if s == "json" => found.push(Constraint {
                c: OutputConstraint::JsonObject {
                    whitespace: Whitespace::Compact,
                },
                param: "format".into(),
            }),
            Some(Value::String(s)) if s.is_empty() => {}
            Some(s @ Value::Object(_)) => {
                found.push(schema_constraint(s, "format", false, objects)?)
            }
            Some(other) => {
                return Err(ApiError::bad(
                    "format",
                    format!("`format` must be \"json\" or a JSON Schema object, got {other}"),
                ))
            }
        }
    }
    if found.len() > 1 {
        return Err(ApiError::bad(
            found[1].param.clone(),
            format!(
                "`{}` and `{}` both constrain the output; give one",
                found[0].param, found[1].param
            ),
        ));
    }
    Ok(found.pop())
}

/// OpenAI `tools`, `tool_choice` and `parallel_tool_calls`. `None` when no tools are
/// given (a `tool_choice` other than `none`/`auto` without tools is an error).
pub fn tools(f: &Fields) -> ApiResult<Option<ToolCalling>> {
    let list = match f.get("tools") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut tool = Tool::from_openai(t)
                    .map_err(|e| ApiError::bad(format!("tools[{i}]"), e.to_string()))?;
                let function = t.get("function").unwrap_or(t);
                let param = format!("tools[{i}].function.strict");
                match function.get("strict") {
                    None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                    Some(Value::Bool(true)) => {
                        let at = format!("tools[{i}].function.parameters");
                        tool.parameters = strict_schema(&tool.parameters, &at)?;
                    }
                    Some(v) => {
                        return Err(ApiError::bad(
                            param,
                            format!("`strict` must be a boolean, got {}", type_name(v)),
                        ))
                    }
                }
                Ok(tool)
            })
            .collect::<ApiResult<Vec<_>>>()?,
        Some(v) => {
            return Err(ApiError::bad(
                "tools",
                format!("`tools` must be an array, got {}", type_name(v)),
            ))
        }
    };
    let mut names: Vec<&str> = list.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(ApiError::bad(
            "tools",
            format!("tool name {:?} is given twice", w[0]),
        ));
    }
    let choice = match f.get("tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" | "any" => ToolChoice::Required,
            other => {
                return Err(ApiError::bad(
                    "tool_choice",
                    format!("tool_choice {other:?} is not one of none, auto, required"),
                ))
            }
        },
        Some(v @ Value::Object(_)) => {
            let name = v
                .pointer("/function/name")
                .or_else(|| v.get("name"))
                .and_then(|n| n.as_str())
                .ok_or_else(|| {
                    ApiError::bad(
                        "tool_choice.function.name",
                        "a named tool_choice needs `function.name`",
                    )
                })?;
            if !list.iter().any(|t| t.name == name) {
                return Err(ApiError::bad(
                    "tool_choice.function.name",
                    format!("function {name:?} is not among the tools"),
                ));
            }
            ToolChoice::Function(name.to_string())
        }
        Some(v) => {
            return Err(ApiError::bad(
                "tool_choice",
                format!(
                    "`tool_choice` must be a string or an object, got {}",
                    type_name(v)
                ),
            ))
        }
    };
    let parallel = f.bool("parallel_tool_calls")?.unwrap_or(true);
    if list.is_empty() {
        return match choice {
            ToolChoice::None | ToolChoice::Auto => Ok(None),
            _ => Err(ApiError::bad("tool_choice", "tool_choice needs `tools`")),
        };
    }
    Ok(Some(ToolCalling {
        tools: list,
        choice,
        parallel,
        // The backend writes calls in its chat template's format.
        format: Default::default(),
    }))
}

/// `schema` as OpenAI's strict mode reads it: every object closed (`additionalProperties:
/// false`) and every property it declares required, in every sub-schema. A schema strict
/// mode cannot serve (an object whose `additionalProperties` is set to anything but
/// `false`) is a 400 naming `param` and the JSON pointer. Cost: one walk of the schema.
pub fn strict_schema(schema: &Value, param: &str) -> ApiResult<Value> {
    fn go(v: &mut Value, ptr: &str, depth: usize) -> Result<(), String> {
        if depth > 128 {
            return Ok(());
        }
        let Value::Object(m) = v else {
            return Ok(());
        };
        let is_object = m.contains_key("properties")
            || match m.get("type") {
                Some(Value::String(t)) => t == "object",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
                _ => false,
            };
        if is_object {
            match m.get("additionalProperties") {
                None => {
                    m.insert("additionalProperties".into(), Value::Bool(false));
                }
                Some(Value::Bool(false)) => {}
                Some(other) => {
                    return Err(format!(
                        "strict mode closes every object, but {} sets `additionalProperties` to {other}",
                        if ptr.is_empty() { "#".to_string() } else { format!("#{ptr}") }
                    ))
                }
            }
            if let Some(Value::Object(props)) = m.get("properties") {
                let all: Vec<Value> = props.keys().map(|k| Value::String(k.clone())).collect();
                m.insert("required".into(), Value::Array(all));
            }
        }
        for (key, many) in [
            ("properties", true),
            ("patternProperties", true),
            ("$defs", true),
            ("definitions", true),
            ("dependentSchemas", true),
            ("items", false),
            ("additionalItems", false),
            ("contains", false),
            ("not", false),
            ("if", false),
            ("then", false),
            ("else", false),
            ("prefixItems", false),
            ("anyOf", false),
            ("oneOf", false),
            ("allOf", false),
        ] {
            let Some(child) = m.get_mut(key) else {
                continue;
            };
            let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
            match child {
                Value::Object(named) if many => {
                    for (k, x) in named.iter_mut() {
                        go(x, &format!("{ptr}/{key}/{}", escape(k)), depth + 1)?;
                    }
                }
                Value::Array(list) => {
                    for (i, x) in list.iter_mut().enumerate() {
                        go(x, &format!("{ptr}/{key}/{i}"), depth + 1)?;
                    }
                }
                x if !many => go(x, &format!("{ptr}/{key}"), depth + 1)?,
                _ => {}
            }
        }
        Ok(())
    }
    let mut out = schema.clone();
    go(&mut out, "", 0).map_err(|msg| ApiError::bad(param, msg))?;
    Ok(out)
}

/// One content part list or string, as text (OpenAI allows `[{"type":"text","text":..}]`).
/// (The Responses API's `input_text` and `output_text` parts read the same.)
pub(crate) fn content_text(v: Option<&Value>, param: &str) -> ApiResult<String> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(|t| t.as_str()), p.get("text")) {
                    (Some("text" | "input_text" | "output_text"), Some(Value::String(t))) => {
                        out.push_str(t)
                    }
                    (ty, _) => {
                        return Err(ApiError::bad(
                            format!("{param}[{j}]"),
                            format!(
                                "content part type {} is not supported (text only)",
                                ty.unwrap_or("(missing)")
                            ),
                        ))
                    }
                }
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::bad(
            param,
            format!(
                "content must be a string or an array of parts, got {}",
                type_name(other)
            ),
        )),
    }
}

/// `messages`: OpenAI or Ollama shape (Ollama's tool-call `arguments` are objects; both
/// are accepted). `developer` becomes `system`.
pub fn messages(f: &Fields) -> ApiResult<Vec<Message>> {
    let arr = match f.get("messages") {
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(ApiError::bad(
                "messages",
                format!("`messages` must be an array, got {}", type_name(v)),
            ))
        }
        None => return Err(ApiError::bad("messages", "`messages` is required")),
    };
    if arr.is_empty() {
        return Err(ApiError::bad("messages", "`messages` must not be empty"));
    }
    let mut out = Vec::with_capacity(arr.len());
    for (i, m) in arr.iter().enumerate() {
        let p = format!("messages[{i}]");
        let mf = Fields::of(m, &p)?;
        let role = mf
            .str("role")
            .map_err(|_| ApiError::bad(format!("{p}.role"), "`role` must be a string"))?
            .ok_or_else(|| ApiError::bad(format!("{p}.role"), "`role` is required"))?;
        let role = match role {
            "developer" => "system",
            r @ ("system" | "user" | "assistant" | "tool") => r,
            other => {
                return Err(ApiError::bad(
                    format!("{p}.role"),
                    format!(
                        "role {other:?} is not one of system, developer, user, assistant, tool"
                    ),
                ))
            }
        };
        let mut msg = Message::new(
            role,
            content_text(m.get("content"), &format!("{p}.content"))?,
        );
        if let Some(tc) = mf.get("tool_calls") {
            if !tc.is_array() {
                return Err(ApiError::bad(
                    format!("{p}.tool_calls"),
                    "`tool_calls` must be an array",
                ));
            }
            msg.tool_calls = Some(tc.clone());
        }
        msg.tool_call_id = mf.str("tool_call_id")?.map(str::to_string);
        msg.name = mf.str("name")?.map(str::to_string);
        out.push(msg);
    }
    Ok(out)
}

/// Refuses OpenAI fields that change the output and are not supported.
pub fn refuse_unsupported(f: &Fields) -> ApiResult<()> {
    if let Some(n) = f.int("n", 1, 128)? {
        if n != 1 {
            return Err(ApiError::bad("n", "only n = 1 is supported"));
        }
    }
    if f.bool("logprobs")? == Some(true) {
        return Err(ApiError::bad("logprobs", "logprobs are not supported"));
    }
    if f.get("top_logprobs").is_some() {
        return Err(ApiError::bad("top_logprobs", "logprobs are not supported"));
    }
    if let Some(b) = f.get("logit_bias") {
        if b.as_object().is_some_and(|m| !m.is_empty()) {
            return Err(ApiError::bad("logit_bias", "logit_bias is not supported"));
        }
    }
    if let Some(b) = f.get("best_of") {
        if b.as_u64() != Some(1) {
            return Err(ApiError::bad("best_of", "only best_of = 1 is supported"));
        }
    }
    if f.bool("echo")? == Some(true) {
        return Err(ApiError::bad("echo", "echo is not supported"));
    }
    if f.get("suffix").is_some_and(|s| s.as_str() != Some("")) {
        return Err(ApiError::bad("suffix", "suffix is not supported"));
    }
    Ok(())
}

/// Reasoning fields of the OpenAI dialects: `reasoning_effort` (`"none"` turns reasoning
/// off, `minimal` to `high` leave it on), `chat_template_kwargs.enable_thinking` (vLLM's
/// and llama.cpp's switch) and `reasoning_budget` (most reasoning tokens). Returns
/// `(enabled, budget)`; `None` leaves each to the template and the server.
pub fn openai_thinking(f: &Fields) -> ApiResult<(Option<bool>, Option<usize>)> {
    let mut enabled = match f.str("reasoning_effort")? {
        None => None,
        Some("none") => Some(false),
        Some("minimal" | "low" | "medium" | "high") => Some(true),
        Some(e) => {
            return Err(ApiError::bad(
                "reasoning_effort",
                format!("reasoning_effort {e:?} is not one of none, minimal, low, medium, high"),
            ))
        }
    };
    if let Some(k) = f.obj("chat_template_kwargs")? {
        if let Some(b) = k.bool("enable_thinking")? {
            enabled = Some(b);
        }
    }
    let budget = f.int("reasoning_budget", 0, 1 << 20)?.map(|n| n as usize);
    Ok((enabled, budget))
}

/// How many `{` positions [`prompt_schemas`] tries per message (bounds its cost).
const PROMPT_SCHEMA_TRIES: usize = 32;

/// The JSON Schemas declared in the system messages, the way prompt-only
/// structured-output libraries declare them (instructor's JSON and MD_JSON modes: "...match
/// the following json_schema: {...}"; LangChain's output parsers: "...conforms to the JSON
/// schema below: {...}"): the distinct JSON objects after the word "schema" that look like
/// schemas (have `properties`, `$defs`, `anyOf`/`oneOf`, or `type: object`), leaving out
/// LangChain's fixed example (a schema of one property `foo`, and a wrong instance of it,
/// shown before the real one). Cost: at most `PROMPT_SCHEMA_TRIES` (32) JSON parses per system
/// message.
pub fn prompt_schemas(messages: &[Message]) -> Vec<Value> {
    let schemaish = |o: &Map<String, Value>| {
        o.contains_key("properties")
            || o.contains_key("$defs")
            || o.contains_key("anyOf")
            || o.contains_key("oneOf")
            || o.get("type").and_then(|t| t.as_str()) == Some("object")
    };
    // LangChain's instructions show a schema with one property `foo` (titled "Foo") and
    // a wrong instance of it (`{"properties": {"foo": ["bar", "baz"]}}`).
    let langchain_example = |o: &Map<String, Value>| {
        o.get("properties")
            .and_then(Value::as_object)
            .filter(|p| p.len() == 1)
            .and_then(|p| p.get("foo"))
            .is_some_and(|p| p.is_array() || p.get("title") == Some(&Value::from("Foo")))
    };
    let mut found: Vec<Value> = Vec::new();
    for m in messages.iter().filter(|m| m.role == "system") {
        let text = &m.content;
        let Some(at) = text.to_ascii_lowercase().find("schema") else {
            continue;
        };
        // Top-level JSON objects after the word, each skipped whole once parsed (so a
        // schema's own sub-objects are never taken for it).
        let mut pos = at;
        for _ in 0..PROMPT_SCHEMA_TRIES {
            let Some(i) = text[pos..].find('{') else {
                break;
            };
            let start = pos + i;
            let mut it = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
            match it.next() {
                Some(Ok(Value::Object(o))) => {
                    if schemaish(&o) && !langchain_example(&o) {
                        let v = Value::Object(o);
                        if !found.contains(&v) {
                            found.push(v);
                        }
                    }
                    pos = start + it.byte_offset().max(1);
                }
                _ => pos = start + 1,
            }
        }
    }
    found
}

/// Whether any message asks for the answer in a ```json code block.
pub fn asks_for_json_fence(messages: &[Message]) -> bool {
    messages
        .iter()
        .any(|m| m.role != "assistant" && m.content.contains("```json"))
}

/// Applies the schema the prompt declares ([`prompt_schemas`]; none when it shows
/// several) to a JSON-mode request
/// (`json_object` becomes that schema) or to a request without any format whose messages
/// ask for a ```json code block (the answer becomes such a block holding an instance).
/// Returns the new format and a note for the `x-ruvllm-constraint` header; a declared
/// schema that does not compile leaves the request as it was (the note says why).
pub fn apply_prompt_schema(
    messages: &[Message],
    format: Option<Constraint>,
    json_object: bool,
    limits: &ruvllm_engine::Limits,
    objects: &Objects,
) -> (Option<Constraint>, Option<String>) {
    let fence = format.is_none() && asks_for_json_fence(messages);
    if !(json_object || fence) {
        return (format, None);
    }
    let mut schemas = prompt_schemas(messages);
    let schema = match schemas.len() {
        0 => return (format, None),
        1 => schemas.remove(0),
        // Which one the answer should follow is a guess: none is applied.
        n => {
            return (
                format,
                Some(format!(
                    "prompt-schema ignored: the prompt shows {n} schemas"
                )),
            )
        }
    };
    let compiled = ruvllm_engine::schema::schema_to_grammar_limited(
        &schema,
        &SchemaOptions::default(),
        limits,
    );
    if let Err(e) = compiled {
        return (format, Some(format!("prompt-schema ignored: {e}")));
    }
    let Ok(c) = schema_constraint(&schema, "messages", false, objects) else {
        return (
            format,
            Some("prompt-schema ignored: not a valid JSON Schema".into()),
        );
    };
    if fence {
        let wrapped = Constraint {
            c: OutputConstraint::Wrapped {
                prefix: "```json\n".into(),
                inner: Box::new(c.c),
                suffix: "\n```".into(),
            },
            param: "messages".into(),
        };
        (Some(wrapped), Some("prompt-schema; json-fence".into()))
    } else {
        (Some(c), Some("prompt-schema".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruvllm_engine::Limits;
    use serde_json::json;

    const OPEN: Objects = Objects {
        policy: ObjectPolicy::Dialect,
        request: None,
        registry: None,
    };

    fn sys(text: &str) -> Message {
        Message::system(text)
    }

    #[test]
    fn prompt_schema_finds_instructor_and_langchain_styles() {
        let schema = json!({"properties": {"name": {"type": "string"}}, "required": ["name"], "type": "object"});
        let instructor = format!(
            "As a genius expert, provide the parsed objects in json that match the following json_schema:\n\n{}\n\nMake sure to return an instance",
            serde_json::to_string_pretty(&schema).unwrap()
        );
        assert_eq!(prompt_schemas(&[sys(&instructor)]), vec![schema.clone()]);
        // LangChain's PydanticOutputParser: its fixed example schema first, then the real one.
        let langchain = format!(
            "The output should be formatted as a JSON instance that conforms to the JSON schema below.\n\nAs an example, for the schema {{\"properties\": {{\"foo\": {{\"title\": \"Foo\", \"description\": \"a list of strings\", \"type\": \"array\", \"items\": {{\"type\": \"string\"}}}}}}, \"required\": [\"foo\"]}}\nthe object {{\"foo\": [\"bar\", \"baz\"]}} is a well-formatted instance of the schema. The object {{\"properties\": {{\"foo\": [\"bar\", \"baz\"]}}}} is not well-formatted.\n\nHere is the output schema:\n```\n{schema}\n```"
        );
        assert_eq!(prompt_schemas(&[sys(&langchain)]), vec![schema.clone()]);
        // No "schema" word, or only in a user message: nothing.
        assert!(prompt_schemas(&[sys(&schema.to_string())]).is_empty());
        assert!(prompt_schemas(&[Message::user(instructor.clone())]).is_empty());
        // Two schemas (a ReAct prompt showing a tool's arguments and its answer format):
        // which one applies is a guess, so none does.
        let two = format!("{instructor}\nAnswer with this schema: {{\"type\": \"object\", \"properties\": {{\"action\": {{}}}}}}");
        assert_eq!(prompt_schemas(&[sys(&two)]).len(), 2);
        let json_object = Some(Constraint {
            c: OutputConstraint::JsonObject {
                whitespace: Whitespace::Compact,
            },
            param: "response_format".into(),
        });
        let (c, note) =
            apply_prompt_schema(&[sys(&two)], json_object, true, &Limits::default(), &OPEN);
        assert!(matches!(c.unwrap().c, OutputConstraint::JsonObject { .. }));
        assert!(note.unwrap().contains("2 schemas"));
    }

    #[test]
    fn prompt_schema_applies_only_to_json_requests() {
        let s = "Match this json_schema: {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}";
        let msgs = vec![sys(s), Message::user("go")];
        let json_object = Some(Constraint {
            c: OutputConstraint::JsonObject {
                whitespace: Whitespace::Compact,
            },
            param: "response_format".into(),
        });
        let (c, note) = apply_prompt_schema(&msgs, json_object, true, &Limits::default(), &OPEN);
        assert!(matches!(c.unwrap().c, OutputConstraint::JsonSchema { .. }));
        assert_eq!(note.as_deref(), Some("prompt-schema"));
        // No format and no ```json request: untouched.
        let (c, note) = apply_prompt_schema(&msgs, None, false, &Limits::default(), &OPEN);
        assert!(c.is_none() && note.is_none());
        // No format, but the user asks for a ```json block: a fenced instance.
        let mut fenced = msgs.clone();
        fenced[1] = Message::user("Answer in a ```json codeblock.");
        let (c, _) = apply_prompt_schema(&fenced, None, false, &Limits::default(), &OPEN);
        match c.unwrap().c {
            OutputConstraint::Wrapped { prefix, suffix, .. } => {
                assert_eq!((prefix.as_str(), suffix.as_str()), ("```json\n", "\n```"))
            }
            other => panic!("{other:?}"),
        }
        // A declared schema that does not compile leaves the request as it was.
        let bad = vec![sys("json_schema: {\"type\": \"object\", \"properties\": {\"a\": {\"$dynamicRef\": \"#x\"}}}")];
        let (c, note) = apply_prompt_schema(&bad, None, true, &Limits::default(), &OPEN);
        assert!(c.is_none());
        assert!(note.unwrap().starts_with("prompt-schema ignored"));
    }
}
