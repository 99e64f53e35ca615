//! Tool calling (OpenAI `tools` / `tool_choice` / `parallel_tool_calls`), constrained by
//! the engine.
//!
//! # The wire format the model writes
//!
//! A call is written the way Hermes-style models (Qwen 2.5, SmolLM2, Hermes) were trained
//! to write it:
//!
//! ```text
//! <tool_call>
//! {"name": "get_weather", "arguments": {"city":"Paris"}}
//! </tool_call>
//! ```
//!
//! Several calls follow each other, separated by a newline. The whole output is one
//! grammar ([`ToolCalling::grammar`]) built from the tools' parameter schemas (each compiled
//! by the schema compiler as its own document, so `$ref`s stay valid, and embedded with
//! [`Grammar::embed`]):
//!
//! * `required`: one or more calls (exactly one when `parallel_tool_calls` is false);
//! * a named function: exactly one call of it, so the name and the punctuation around it
//!   are forced text (jump-forward) and the model samples only the arguments;
//! * `auto`: free text that never contains `<tool_call>` nor anything else beginning
//!   `<tool` ([`MARKUP`]: a small model copies `<tool_response>` from the prompt
//!   otherwise), optionally followed by calls; or,
//!   when the answer has a format (`response_format`), that format or calls. Once the
//!   model writes the first byte of `<tool_call>`, the call is constrained; text can never
//!   smuggle a malformed call past the parser.
//! * `none`: no tool grammar at all.
//!
//! [`ToolParser`] turns the output back into text and calls, incrementally, so a server can
//! stream `delta.tool_calls` (the name once, then argument fragments).
//!
//! # Prompting
//!
//! Templates that render `tools` themselves get them; for the others (SmolLM2's, plain
//! ChatML), [`inject_tools`] writes the tool list and the format into the system message
//! and turns earlier assistant calls and tool results into the same text format.

use ruvllm_engine::grammar::{Expr, Grammar};
use ruvllm_engine::schema::{schema_to_grammar_limited, SchemaOptions};
use ruvllm_engine::Limits;
use serde_json::{json, Value};

use crate::call_format::{CallFormat, Pieces};
use crate::chat::Message;
use crate::error::{Result, RuntimeError};
use crate::reasoning::{Part, ReasoningMarkers, ReasoningSplitter};
use ruvllm_engine::grammar::text::text_without;

/// The text that opens a call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The text that closes a call.
pub const CALL_CLOSE: &str = "</tool_call>";

/// One function the model may call.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct Tool {
    /// The function name (`[A-Za-z0-9_-]{1,64}`, as OpenAI requires).
    pub name: String,
    /// What it does (for the prompt).
    pub description: Option<String>,
    /// JSON Schema of the arguments (`{"type":"object"}` when the tool gave none).
    pub parameters: Value,
}

impl Tool {
    /// A tool from its name, description and parameter schema. Errors when the name is
    /// not 1-64 characters of `[A-Za-z0-9_-]`.
    pub fn new(name: &str, description: Option<String>, parameters: Value) -> Result<Tool> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(RuntimeError::Params {
                param: "tools",
                msg: format!(
                    "tool name {name:?} must be 1 to 64 characters of letters, digits, `_` or `-`"
                ),
            });
        }
        Ok(Tool {
            name: name.into(),
            description,
            parameters,
        })
    }

    /// A tool from its OpenAI definition (`{"type":"function","function":{"name",
    /// "description","parameters"}}`; a bare `{"name",...}` is accepted too). Errors name
    /// what is missing or malformed.
    pub fn from_openai(v: &Value) -> Result<Tool> {
        let f = v.get("function").unwrap_or(v);
        let bad = |msg: String| RuntimeError::Params {
            param: "tools",
            msg,
        };
        if let Some(t) = v.get("type").and_then(|t| t.as_str()) {
            if t != "function" {
                return Err(bad(format!(
                    "tool type {t:?} is not supported (only \"function\")"
                )));
            }
        }
        let name = f
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or_else(|| bad("a tool needs `function.name` (a string)".into()))?;
        let description = match f.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(bad(format!(
                    "tool {name:?}: `description` must be a string"
                )))
            }
        };
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(bad(format!(
                    "tool {name:?}: `parameters` must be a JSON Schema object"
                )))
            }
        };
        Tool::new(name, description, parameters)
    }

    /// The OpenAI definition (`{"type":"function","function":{...}}`), as templates expect.
    pub fn to_openai(&self) -> Value {
        let mut f = json!({"name": self.name});
        if let Some(d) = &self.description {
            f["description"] = json!(d);
        }
        f["parameters"] = self.parameters.clone();
        json!({"type": "function", "function": f})
    }
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolChoice {
    /// No calls (the tools are not offered).
    None,
    /// The model chooses between text and calls.
    Auto,
    /// At least one call.
    Required,
    /// Exactly one call of this function.
    Function(String),
}

/// Tools offered to one generation, and how they may be used.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ToolCalling {
    /// The functions.
    pub tools: Vec<Tool>,
    /// Which calls are allowed or required.
    pub choice: ToolChoice,
    /// Whether more than one call may be made (OpenAI's default: true).
    pub parallel: bool,
    /// The call syntax (the chat template's family; the backend sets it).
    pub format: CallFormat,
}

fn lit(s: &str) -> Expr {
    Expr::Literal(s.as_bytes().to_vec())
}

pub use crate::call_format::MARKUP;

impl ToolCalling {
    /// The tools a call may name under this choice. Errors when a named function is not
    /// among the tools, or when calls are possible but no tool is given.
    pub fn callable(&self) -> Result<Vec<&Tool>> {
        match &self.choice {
            ToolChoice::None => Ok(Vec::new()),
            ToolChoice::Function(name) => match self.tools.iter().find(|t| &t.name == name) {
                Some(t) => Ok(vec![t]),
                None => Err(RuntimeError::Params {
                    param: "tool_choice",
                    msg: format!("function {name:?} is not among the tools"),
                }),
            },
            ToolChoice::Auto | ToolChoice::Required => {
                if self.tools.is_empty() && self.choice == ToolChoice::Required {
                    return Err(RuntimeError::Params {
                        param: "tool_choice",
                        msg: "`required` needs at least one tool".into(),
                    });
                }
                Ok(self.tools.iter().collect())
            }
        }
    }

    /// The grammar of the whole output (see the module docs). `text` is the grammar of a
    /// text answer (the response format) for `auto`; `None` means free text. With
    /// `tool_choice: none` this is `text` itself (`None`: unconstrained). Cost: compiling
    /// each callable tool's schema.
    pub fn grammar(
        &self,
        text: Option<Grammar>,
        opts: &SchemaOptions,
        limits: &Limits,
    ) -> Result<Option<Grammar>> {
        let callable = self.callable()?;
        if callable.is_empty() {
            return Ok(text);
        }
        let p = self.format.pieces();
        let mut g = Grammar::single("root", Expr::Empty);
        let mut calls = Vec::new();
        for (i, t) in callable.iter().enumerate() {
            let args = schema_to_grammar_limited(&t.parameters, opts, limits).map_err(|e| {
                RuntimeError::ToolSchema {
                    index: self
                        .tools
                        .iter()
                        .position(|x| x.name == t.name)
                        .unwrap_or(i),
                    name: t.name.clone(),
                    source: e,
                }
            })?;
            let args = g.embed(args, &format!("tool{i}-"));
            calls.push(Expr::Seq(vec![
                lit(&format!("{}{}{}", p.call_open, t.name, p.name_close)),
                Expr::Ref(args),
                lit(p.call_close),
            ]));
        }
        let call = g.add_rule("call", Expr::Alt(calls));
        let many = p.parallel && self.parallel && !matches!(self.choice, ToolChoice::Function(_));
        let calls = if many {
            Expr::Seq(vec![
                lit(p.begin),
                Expr::Ref(call),
                Expr::Repeat {
                    e: Box::new(Expr::Seq(vec![lit(p.sep), Expr::Ref(call)])),
                    min: 0,
                    max: None,
                },
                lit(p.end),
            ])
        } else {
            Expr::Seq(vec![lit(p.begin), Expr::Ref(call), lit(p.end)])
        };
        let calls = g.add_rule("calls", calls);
        let root = match (&self.choice, text) {
            (ToolChoice::Auto, Some(t)) => {
                let t = g.embed(t, "text-");
                Expr::Alt(vec![Expr::Ref(calls), Expr::Ref(t)])
            }
            (ToolChoice::Auto, None) => {
                let words = self.format.forbidden_in_text();
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                let free = g.add_rule("text", text_without(&words));
                Expr::Seq(vec![
                    Expr::Ref(free),
                    Expr::Repeat {
                        e: Box::new(Expr::Ref(calls)),
                        min: 0,
                        max: Some(1),
                    },
                ])
            }
            _ => Expr::Ref(calls),
        };
        g.rules[0].body = root;
        Ok(Some(g))
    }
}

/// The system-prompt text that offers `tools` to a model whose template does not render
/// them (Hermes format).
pub fn tools_system_text(tools: &[Tool]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
    );
    for t in tools {
        s.push_str(&t.to_openai().to_string());
        s.push('\n');
    }
    s.push_str(
        "</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// Rewrites a conversation for a template that does not render tools: the tool list goes
/// into the system message, assistant calls become `<tool_call>` text and tool results
/// become `<tool_response>` user turns. Cost: linear in the messages.
pub fn inject_tools(messages: &[Message], tools: &[Tool]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if !tools.is_empty() {
        let text = tools_system_text(tools);
        match messages.first() {
            Some(m) if m.role == "system" => {
                out.push(Message::system(format!("{}\n\n{text}", m.content)));
            }
            _ => out.push(Message::system(text)),
        }
    }
    let skip =
        usize::from(!tools.is_empty() && messages.first().is_some_and(|m| m.role == "system"));
    for m in &messages[skip..] {
        let mut m = m.clone();
        if let Some(calls) = m.tool_calls.take() {
            for c in calls.as_array().into_iter().flatten() {
                let name = c.pointer("/function/name").cloned().unwrap_or(Value::Null);
                let args = match c.pointer("/function/arguments") {
                    Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(json!(s)),
                    Some(v) => v.clone(),
                    None => json!({}),
                };
                if !m.content.is_empty() {
                    m.content.push('\n');
                }
                m.content.push_str(&format!(
                    "{CALL_OPEN}\n{}\n{CALL_CLOSE}",
                    json!({"name": name, "arguments": args})
                ));
            }
        }
        if m.role == "tool" {
            m = Message::user(format!("<tool_response>\n{}\n</tool_response>", m.content));
        }
        out.push(m);
    }
    out
}

/// A piece of parsed output.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolEvent {
    /// Reasoning text (before the answer; see [`crate::reasoning`]).
    Reasoning(String),
    /// Answer text.
    Text(String),
    /// Call number `index` (from 0) names `name`.
    CallStart {
        /// The call's index.
        index: usize,
        /// The function.
        name: String,
    },
    /// More of the JSON arguments of call `index`.
    CallArgs {
        /// The call's index.
        index: usize,
        /// The fragment.
        fragment: String,
    },
}

/// A finished call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function.
    pub name: String,
    /// Its arguments as JSON text.
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Answer text; looking for [`CALL_OPEN`].
    Text,
    /// After `<tool_call>`: reading up to the end of `"arguments": `.
    Header,
    /// Inside the arguments value.
    Args,
    /// After the arguments: up to `</tool_call>`.
    Tail,
    /// Between calls: whitespace, then `<tool_call>`.
    Between,
}

/// Splits model output into text and tool calls, incrementally (feed chunks with
/// [`ToolParser::push`], then [`ToolParser::finish`]). It never fails: output that does
/// not follow the format stays text. Cost: linear in the output.
#[derive(Debug)]
pub struct ToolParser {
    state: State,
    buf: String,
    calls: Vec<ToolCall>,
    text: String,
    depth: usize,
    in_str: bool,
    esc: bool,
    started: bool,
    /// The call syntax looked for (`None`: all content is text).
    format: Option<CallFormat>,
    /// Splits off a leading reasoning section first, when the output has one.
    reasoning: Option<ReasoningSplitter>,
}

impl Default for ToolParser {
    fn default() -> Self {
        ToolParser::new()
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `pat`.
fn partial_suffix(s: &str, pat: &str) -> usize {
    (1..pat.len())
        .rev()
        .find(|&k| pat.is_char_boundary(k) && s.ends_with(&pat[..k]))
        .unwrap_or(0)
}

impl ToolParser {
    /// A parser at the start of an output.
    pub fn new() -> ToolParser {
        ToolParser {
            state: State::Text,
            buf: String::new(),
            calls: Vec::new(),
            text: String::new(),
            depth: 0,
            in_str: false,
            esc: false,
            started: false,
            format: Some(CallFormat::Hermes),
            reasoning: None,
        }
    }

    /// A parser for an output that may begin with a reasoning section (`reasoning`: its
    /// markers) and may hold calls in `format` (`None`: all content is text). Cost: O(1).
    pub fn with_options(
        format: Option<CallFormat>,
        reasoning: Option<&ReasoningMarkers>,
    ) -> ToolParser {
        ToolParser {
            format,
            reasoning: reasoning.map(ReasoningSplitter::new),
            ..ToolParser::new()
        }
    }

    /// The calls seen so far (arguments possibly incomplete).
    pub fn calls(&self) -> &[ToolCall] {
        &self.calls
    }

    /// The answer text seen so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Feeds output text; returns what it completes.
    pub fn push(&mut self, chunk: &str) -> Vec<ToolEvent> {
        let mut ev = Vec::new();
        match &mut self.reasoning {
            Some(r) => {
                for part in r.push(chunk) {
                    match part {
                        Part::Reasoning(t) => ev.push(ToolEvent::Reasoning(t)),
                        Part::Content(t) => self.content(&t, &mut ev),
                    }
                }
            }
            _ => self.content(chunk, &mut ev),
        }
        ev
    }

    fn content(&mut self, chunk: &str, ev: &mut Vec<ToolEvent>) {
        if self.format.is_some() {
            self.buf.push_str(chunk);
            self.run(ev, false);
        } else {
            self.emit_text(chunk, ev);
        }
    }

    /// Ends the output: held-back text is released.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let mut ev = Vec::new();
        if let Some(r) = &mut self.reasoning {
            for part in r.finish() {
                if let Part::Reasoning(t) = part {
                    ev.push(ToolEvent::Reasoning(t));
                }
            }
        }
        self.run(&mut ev, true);
        if !self.buf.is_empty() && matches!(self.state, State::Text | State::Header) {
            let rest = std::mem::take(&mut self.buf);
            self.emit_text(&rest, &mut ev);
        }
        ev
    }

    fn emit_text(&mut self, s: &str, ev: &mut Vec<ToolEvent>) {
        if !s.is_empty() {
            self.text.push_str(s);
            ev.push(ToolEvent::Text(s.to_string()));
        }
    }

    fn run(&mut self, ev: &mut Vec<ToolEvent>, end: bool) {
        let p: Pieces = self.format.unwrap_or_default().pieces();
        let opener = p.opener();
        let next_call = format!("{}{}", p.sep, p.call_open);
        loop {
            match self.state {
                State::Text => {
                    if let Some(i) = self.buf.find(&opener) {
                        let before = self.buf[..i].to_string();
                        self.emit_text(&before, ev);
                        self.buf.drain(..i + opener.len());
                        self.state = State::Header;
                        continue;
                    }
                    let hold = if end {
                        0
                    } else {
                        partial_suffix(&self.buf, &opener)
                    };
                    let cut = self.buf.len() - hold;
                    let out: String = self.buf.drain(..cut).collect();
                    self.emit_text(&out, ev);
                    return;
                }
                State::Between => {
                    if self.buf.starts_with(&next_call) {
                        self.buf.drain(..next_call.len());
                        self.state = State::Header;
                        continue;
                    }
                    if !p.end.is_empty() && self.buf.starts_with(p.end) {
                        self.buf.drain(..p.end.len());
                        self.state = State::Text;
                        continue;
                    }
                    let waiting = next_call.starts_with(self.buf.as_str())
                        || p.end.starts_with(self.buf.as_str());
                    if waiting && !end {
                        return;
                    }
                    // Not another call: what follows is text again.
                    self.state = State::Text;
                }
                State::Header => {
                    let Some(i) = self.buf.find(p.name_close) else {
                        return;
                    };
                    let name = self.buf[..i].to_string();
                    self.buf.drain(..i + p.name_close.len());
                    let index = self.calls.len();
                    self.calls.push(ToolCall {
                        name: name.clone(),
                        arguments: String::new(),
                    });
                    ev.push(ToolEvent::CallStart { index, name });
                    self.state = State::Args;
                    self.depth = 0;
                    self.in_str = false;
                    self.esc = false;
                    self.started = false;
                }
                State::Args => {
                    if !self.args(ev) {
                        return;
                    }
                    self.state = State::Tail;
                }
                State::Tail => {
                    let Some(i) = self.buf.find(p.call_close) else {
                        return;
                    };
                    self.buf.drain(..i + p.call_close.len());
                    self.state = State::Between;
                }
            }
        }
    }

    /// Reads the arguments value as far as the buffer goes; `true` once it is complete.
    fn args(&mut self, ev: &mut Vec<ToolEvent>) -> bool {
        let mut cut = self.buf.len();
        let mut done = false;
        for (i, c) in self.buf.char_indices() {
            if self.in_str {
                if self.esc {
                    self.esc = false;
                } else if c == '\\' {
                    self.esc = true;
                } else if c == '"' {
                    self.in_str = false;
                    if self.depth == 0 {
                        cut = i + 1;
                        done = true;
                        break;
                    }
                }
                continue;
            }
            match c {
                '"' => {
                    self.in_str = true;
                    self.started = true;
                }
                '{' | '[' => {
                    self.depth += 1;
                    self.started = true;
                }
                '}' | ']' if self.depth > 0 => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        cut = i + 1;
                        done = true;
                        break;
                    }
                }
                '}' | ',' | '\n' if self.depth == 0 && self.started => {
                    // The end of a scalar value.
                    cut = i;
                    done = true;
                    break;
                }
                _ => self.started = true,
            }
        }
        let frag: String = self.buf.drain(..cut).collect();
        let index = self.calls.len() - 1;
        if !frag.is_empty() {
            self.calls[index].arguments.push_str(&frag);
            ev.push(ToolEvent::CallArgs {
                index,
                fragment: frag,
            });
        }
        done
    }
}

/// Parses a whole output in the Hermes format: its text and its calls.
pub fn parse_output(text: &str) -> (String, Vec<ToolCall>) {
    parse_output_as(CallFormat::Hermes, text)
}

/// Parses a whole output in `format`: its text and its calls. Cost: linear.
pub fn parse_output_as(format: CallFormat, text: &str) -> (String, Vec<ToolCall>) {
    let mut p = ToolParser::with_options(Some(format), None);
    p.push(text);
    p.finish();
    (p.text, p.calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruvllm_engine::{CheckResult, Constraint, Limits, Matcher, Vocabulary};
    use std::sync::Arc;

    fn bytes_vocab() -> Arc<Vocabulary> {
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"<eos>".to_vec());
        let mut special = vec![false; 256];
        special.push(true);
        Arc::new(Vocabulary::new("bytes", toks, special, vec![256]).unwrap())
    }

    fn accepts(g: &Grammar, text: &str) -> bool {
        let c = Constraint::new(g, bytes_vocab(), &Limits::default()).unwrap();
        let mut m = Matcher::new(&c).unwrap();
        matches!(
            m.check_bytes(text.as_bytes()).unwrap(),
            CheckResult::Accepted
        )
    }

    fn tools() -> Vec<Tool> {
        vec![
            Tool::new(
                "get_weather",
                Some("Weather".into()),
                json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}),
            )
            .unwrap(),
            Tool::new(
                "add",
                None,
                json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"$ref":"#/$defs/n"}},"required":["a","b"],"additionalProperties":false,"$defs":{"n":{"type":"integer"}}}),
            )
            .unwrap(),
        ]
    }

    fn call(name: &str, args: &str) -> String {
        format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>")
    }

    #[test]
    fn named_choice_forces_one_call_of_that_tool() {
        let tc = ToolCalling {
            tools: tools(),
            choice: ToolChoice::Function("add".into()),
            parallel: true,
            format: CallFormat::Hermes,
        };
        let g = tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .unwrap()
            .unwrap();
        assert!(accepts(&g, &call("add", r#"{"a":1,"b":2}"#)));
        assert!(!accepts(&g, &call("add", r#"{"a":1,"b":"x"}"#)));
        assert!(!accepts(&g, &call("get_weather", r#"{"city":"P"}"#)));
        let two = format!(
            "{}\n{}",
            call("add", r#"{"a":1,"b":2}"#),
            call("add", r#"{"a":1,"b":2}"#)
        );
        assert!(!accepts(&g, &two));
        assert!(!accepts(&g, "hello"));
    }

    #[test]
    fn required_allows_several_calls_unless_not_parallel() {
        let mut tc = ToolCalling {
            tools: tools(),
            choice: ToolChoice::Required,
            parallel: true,
            format: CallFormat::Hermes,
        };
        let two = format!(
            "{}\n{}",
            call("get_weather", r#"{"city":"P"}"#),
            call("add", r#"{"a":1,"b":2}"#)
        );
        let g = tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .unwrap()
            .unwrap();
        assert!(accepts(&g, &two));
        assert!(!accepts(&g, ""));
        tc.parallel = false;
        let g = tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .unwrap()
            .unwrap();
        assert!(!accepts(&g, &two));
        assert!(accepts(&g, &call("get_weather", r#"{"city":"P"}"#)));
    }

    #[test]
    fn auto_allows_text_or_calls_but_never_a_malformed_call() {
        let tc = ToolCalling {
            tools: tools(),
            choice: ToolChoice::Auto,
            parallel: true,
            format: CallFormat::Hermes,
        };
        let g = tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .unwrap()
            .unwrap();
        assert!(accepts(&g, "The weather is fine. <too <<to> <t"));
        assert!(accepts(&g, ""));
        assert!(accepts(&g, "ends with <too"));
        assert!(!accepts(&g, "The weather is fine. <tool_ <<tool_cal>"));
        assert!(accepts(&g, &call("add", r#"{"a":1,"b":2}"#)));
        assert!(accepts(
            &g,
            &format!("Let me look.\n{}", call("add", r#"{"a":1,"b":2}"#))
        ));
        assert!(!accepts(&g, "<tool_call>\n{\"name\": \"nope\"}"));
        assert!(!accepts(&g, "text <<tool_call> more"));
        // A `<` after a partial tag starts over; nothing beginning `<tool` appears in text.
        assert!(accepts(&g, "a <too<x and <t<to </too <<</to"));
        assert!(!accepts(&g, "x </tool_response"));
        for tag in [
            "<tool_response>",
            "</tool_response>",
            "</tool_call>",
            "<tools>",
            "<tool_error>",
        ] {
            assert!(!accepts(&g, &format!("It is {tag} sunny")), "{tag}");
            assert!(!accepts(&g, &format!("<too<{tag}")), "{tag}");
        }
        // With a response format, text must follow it.
        let text = Grammar::from_regex("[0-9]+", &Limits::default()).unwrap();
        let g = tc
            .grammar(Some(text), &SchemaOptions::default(), &Limits::default())
            .unwrap()
            .unwrap();
        assert!(accepts(&g, "42"));
        assert!(!accepts(&g, "hello"));
        assert!(accepts(&g, &call("add", r#"{"a":1,"b":2}"#)));
    }

    #[test]
    fn bad_choices_and_names_are_errors() {
        let tc = ToolCalling {
            tools: tools(),
            choice: ToolChoice::Function("missing".into()),
            parallel: true,
            format: CallFormat::Hermes,
        };
        assert!(tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .is_err());
        assert!(Tool::new("bad name", None, json!({})).is_err());
        let tc = ToolCalling {
            format: CallFormat::Hermes,
            tools: vec![Tool::new("f", None, json!({"type": 5})).unwrap()],
            choice: ToolChoice::Required,
            parallel: true,
        };
        let e = tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .unwrap_err();
        assert!(
            e.to_string().contains("tool \"f\" (tools[0]) parameters"),
            "{e}"
        );
    }

    #[test]
    fn parser_streams_text_then_calls() {
        let out = format!(
            "Sure.\n{}\n{}",
            call("get_weather", r#"{"city":"Pa\"}ris"}"#),
            call("add", r#"{"a":1,"b":[2]}"#)
        );
        // Feed one character at a time: the same result as all at once.
        let mut p = ToolParser::new();
        let mut ev = Vec::new();
        for c in out.chars() {
            ev.extend(p.push(&c.to_string()));
        }
        ev.extend(p.finish());
        let (text, calls) = parse_output(&out);
        assert_eq!(text, "Sure.\n");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, r#"{"city":"Pa\"}ris"}"#);
        assert_eq!(calls[1].arguments, r#"{"a":1,"b":[2]}"#);
        assert_eq!(p.calls(), &calls[..]);
        let starts: Vec<_> = ev
            .iter()
            .filter(|e| matches!(e, ToolEvent::CallStart { .. }))
            .collect();
        assert_eq!(starts.len(), 2);
        let streamed: String = ev
            .iter()
            .filter_map(|e| match e {
                ToolEvent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(streamed, "Sure.\n");
    }

    #[test]
    fn parser_keeps_plain_text_and_partial_markers() {
        let (t, c) = parse_output("a < b <tool_ c");
        assert_eq!(t, "a < b <tool_ c");
        assert!(c.is_empty());
        let (t, c) = parse_output("ends <tool_cal");
        assert_eq!(t, "ends <tool_cal");
        assert!(c.is_empty());
        // A call cut by max_tokens keeps its partial arguments.
        let (_, c) = parse_output("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].arguments, "{\"a\":");
    }

    #[test]
    fn injected_prompt_lists_tools_and_rewrites_history() {
        let mut asst = Message::new("assistant", "");
        asst.tool_calls = Some(
            json!([{"id":"c1","type":"function","function":{"name":"add","arguments":"{\"a\":1}"}}]),
        );
        let mut tool = Message::new("tool", "3");
        tool.tool_call_id = Some("c1".into());
        let msgs = vec![
            Message::system("Be brief."),
            Message::user("1+2?"),
            asst,
            tool,
        ];
        let out = inject_tools(&msgs, &tools());
        assert_eq!(out.len(), 4);
        assert!(out[0].content.starts_with("Be brief.\n\n# Tools"));
        assert!(out[0].content.contains("\"name\":\"get_weather\""));
        assert!(out[2]
            .content
            .contains("<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1}}"));
        assert_eq!(out[3].role, "user");
        assert!(out[3]
            .content
            .contains("<tool_response>\n3\n</tool_response>"));
    }

    /// One call in `f`'s syntax.
    fn call_in(f: CallFormat, name: &str, args: &str) -> String {
        let p = f.pieces();
        format!(
            "{}{name}{}{args}{}",
            p.call_open, p.name_close, p.call_close
        )
    }

    fn calls_in(f: CallFormat, calls: &[(&str, &str)]) -> String {
        let p = f.pieces();
        let body: Vec<String> = calls.iter().map(|(n, a)| call_in(f, n, a)).collect();
        format!("{}{}{}", p.begin, body.join(p.sep), p.end)
    }

    const FORMATS: [CallFormat; 4] = [
        CallFormat::Hermes,
        CallFormat::Llama3Json,
        CallFormat::Mistral,
        CallFormat::DeepSeek,
    ];

    /// Each family's grammar accepts its own calls with valid arguments and nothing else,
    /// and its parser reads them back, whatever the chunking.
    #[test]
    fn every_format_has_an_exact_grammar_and_parser() {
        for f in FORMATS {
            let tc = |choice| ToolCalling {
                tools: tools(),
                choice,
                parallel: true,
                format: f,
            };
            let opts = SchemaOptions::default();
            let lim = Limits::default();
            let required = tc(ToolChoice::Required)
                .grammar(None, &opts, &lim)
                .unwrap()
                .unwrap();
            let one = calls_in(f, &[("add", r#"{"a":1,"b":2}"#)]);
            assert!(accepts(&required, &one), "{f:?} {one}");
            assert!(!accepts(
                &required,
                &calls_in(f, &[("add", r#"{"a":1,"b":"x"}"#)])
            ));
            assert!(!accepts(&required, &calls_in(f, &[("nope", r#"{}"#)])));
            let two = calls_in(
                f,
                &[
                    ("add", r#"{"a":1,"b":2}"#),
                    ("get_weather", r#"{"city":"P"}"#),
                ],
            );
            assert_eq!(accepts(&required, &two), f.pieces().parallel, "{f:?} {two}");
            // Auto: text, or text then calls; text never begins a call.
            let auto = tc(ToolChoice::Auto)
                .grammar(None, &opts, &lim)
                .unwrap()
                .unwrap();
            assert!(accepts(&auto, "Hello."));
            assert!(accepts(&auto, &format!("Sure. {one}")));
            let opener = f.pieces().opener();
            assert!(!accepts(&auto, &format!("x {opener}")), "{f:?}");
            // The parser, at every cut.
            let out = if f.pieces().parallel {
                two.clone()
            } else {
                one.clone()
            };
            let text = format!("Sure. {out}");
            let (t, calls) = parse_output_as(f, &text);
            assert_eq!(t, "Sure. ", "{f:?}");
            assert_eq!(calls[0].name, "add");
            assert_eq!(calls[0].arguments, r#"{"a":1,"b":2}"#);
            assert_eq!(calls.len(), if f.pieces().parallel { 2 } else { 1 });
            for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
                let mut p = ToolParser::with_options(Some(f), None);
                let mut evs = p.push(&text[..cut]);
                evs.extend(p.push(&text[cut..]));
                evs.extend(p.finish());
                assert_eq!(p.text(), t, "{f:?} cut {cut}");
                assert_eq!(p.calls(), calls.as_slice(), "{f:?} cut {cut}");
                let args: String = evs
                    .iter()
                    .filter_map(|e| match e {
                        ToolEvent::CallArgs { index: 0, fragment } => Some(fragment.as_str()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(args, calls[0].arguments);
            }
        }
    }

    /// A marker the tokenizer keeps as a control token (Mistral's `[TOOL_CALLS]`)
    /// becomes a text token the grammar can write, as that single token.
    #[test]
    fn control_token_markers_become_writable() {
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"[TOOL_CALLS]".to_vec());
        toks.push(b"</s>".to_vec());
        let mut special = vec![false; 256];
        special.extend([true, true]);
        let v = Vocabulary::new("v", toks, special, vec![257]).unwrap();
        let v = Arc::new(
            v.with_text_tokens(CallFormat::Mistral.marker_texts())
                .unwrap(),
        );
        assert!(!v.is_special(256) && v.is_special(257));
        let tc = ToolCalling {
            tools: tools(),
            choice: ToolChoice::Function("add".into()),
            parallel: true,
            format: CallFormat::Mistral,
        };
        let g = tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .unwrap()
            .unwrap();
        let c = Constraint::new(&g, v, &Limits::default()).unwrap();
        let mut m = Matcher::new(&c).unwrap();
        let mut mask = vec![0u32; 9];
        m.compute_mask(&mut mask).unwrap();
        assert!(
            mask[256 / 32] & (1 << (256 % 32)) != 0,
            "[TOOL_CALLS] allowed"
        );
        m.commit_token(256).unwrap();
    }
}
