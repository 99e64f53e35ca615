//! One request pipeline for every dialect.
//!
//! A dialect's handler only reads its wire format into a [`Request`] (the conversation
//! or a raw prompt, the tools offered, the answer's format, sampling, reasoning) and
//! writes the result back out in its own shape, whole ([`Started::answer`]) or streamed
//! ([`Started::parser`] over [`Started::stream`]). Everything between is decided here,
//! once, whatever the dialect:
//!
//! - which constraint a request gets: the tools offered (unless `tool_choice` is `none`)
//!   with the answer's format as the text branch, else the format alone;
//! - the prompt-declared schema rule ([`params::apply_prompt_schema`]) for chat requests
//!   that offer no tools, when the request's `prompt_schema` or the server's
//!   `--prompt-schema` turns it on;
//! - the tools the chat template renders, the reasoning settings and markers;
//! - how a finished answer is split into text, reasoning and calls (the model's own call
//!   format), and the headers every answer carries;
//! - where errors point: the field the constraint came from, in the dialect's spelling
//!   ([`ApiError::dialect`](crate::error::ApiError::dialect)).
//!
//! A new request field that every dialect shares goes into [`Request`] and [`start`]; a
//! dialect's own spelling of it goes into that dialect's reader.
//!
//! Owns: [`Request`], [`Input`], [`Prepared`], [`Started`], [`Answer`], [`respond`]. Uses: `state`
//! (starting through the scheduler), `params` (the constraint types, the prompt-schema
//! rule), `stream` (collecting a generation), `error`.

use axum::response::{IntoResponse, Response};
use ruvllm_runtime::call_format::CallFormat;
use ruvllm_runtime::reasoning::ReasoningMarkers;
use ruvllm_runtime::{
    GenerateParams, Generation, Message, OutputConstraint, Prompt, TextStream, Tool, ToolCall,
    ToolCalling, ToolChoice, ToolParser,
};
use serde_json::Value;

use crate::error::{ApiResult, Dialect};
use crate::params;
use crate::params::Fields;
use crate::state::{with_budget_header, with_note, Shared};
use crate::stream::collect;

/// What the model is asked to continue.
#[derive(Debug, Clone)]
pub enum Input {
    /// A conversation, rendered by the model's chat template (with the tools offered).
    Chat(Vec<Message>),
    /// A prompt used as it is (no template; no tools, no prompt-declared schema).
    Raw(String),
}

/// A request in no dialect's spelling: what every handler reads its body into.
#[derive(Debug, Clone)]
pub struct Request {
    /// The dialect it came in (the shape of its errors and the spelling of its fields).
    pub dialect: Dialect,
    /// The conversation or prompt.
    pub input: Input,
    /// The tools offered and `tool_choice` (`None`: no tools).
    pub tools: Option<ToolCalling>,
    /// The field the tools' object policy is read under ([`params::Objects::closed`]):
    /// `tools`, or `ollama tools` (whose server closes tool objects).
    pub tools_param: &'static str,
    /// The answer's format (JSON mode, a schema, a grammar...) and the field it came from.
    pub format: Option<params::Constraint>,
    /// The request's object policy and schema registry.
    pub objects: params::Objects,
    /// Sampling, stop sequences and `max_tokens`; the constraint and reasoning settings
    /// are filled in by [`start`].
    pub params: GenerateParams,
    /// Reasoning as the dialect's field asks: on, off or the template's default (`None`),
    /// and a token budget (`None`: the server's `--reasoning-budget`).
    pub thinking: (Option<bool>, Option<usize>),
    /// The request's `prompt_schema` field (`None`: the server's `--prompt-schema`).
    pub prompt_schema: Option<bool>,
}

impl Request {
    /// A request for `input` with no tools, no format and no reasoning settings; the
    /// extension fields every dialect shares are read from `f` here, once:
    /// `additional_properties` (the object policy,
    /// [`AppState::objects`](crate::state::AppState::objects)), `prompt_schema` and
    /// `budget_aware` (into `params`:
    /// [`AppState::budget_aware`](crate::state::AppState::budget_aware)). The dialect's
    /// reader fills in the rest.
    pub fn read(
        st: &Shared,
        f: &Fields,
        dialect: Dialect,
        input: Input,
        mut params: GenerateParams,
    ) -> ApiResult<Request> {
        params.budget_aware = st.budget_aware(f, dialect == Dialect::Ollama)?;
        Ok(Request {
            dialect,
            input,
            tools: None,
            tools_param: "tools",
            format: None,
            objects: st.objects(f)?,
            params,
            thinking: (None, None),
            prompt_schema: f.bool("prompt_schema")?,
        })
    }
}

/// A started generation and what its answer is read with.
#[derive(Debug)]
pub struct Started {
    /// The generation's text as it is decoded.
    pub stream: TextStream,
    /// Where the constraint came from, for the `x-ruvllm-constraint` header (the
    /// prompt-declared schema rule sets it).
    pub note: Option<String>,
    calls: Option<CallFormat>,
    markers: Option<ReasoningMarkers>,
    dialect: Dialect,
}

/// A finished answer, split into its parts.
#[derive(Debug)]
pub struct Answer {
    /// The generation (finish reason, usage, reasoning, the `ruvllm` extension's facts).
    pub generation: Generation,
    /// The answer's text, without the calls and reasoning.
    pub content: String,
    /// The tool calls, in order.
    pub calls: Vec<ToolCall>,
    note: Option<String>,
}

impl Answer {
    /// `r` with the headers every non-streamed answer carries (budget, warnings, the
    /// constraint's note).
    pub fn headers(&self, r: Response) -> Response {
        with_note(with_budget_header(r, &self.generation), self.note.clone())
    }
}

impl Started {
    /// Whether the answer may hold tool calls.
    pub fn calling(&self) -> bool {
        self.calls.is_some()
    }

    /// A parser that splits the streamed text into text, reasoning and tool calls (in the
    /// model's own call format), as [`Started::answer`] does for a whole answer.
    pub fn parser(&self) -> ToolParser {
        ToolParser::with_options(self.calls, self.markers.as_ref())
    }

    /// The streamed answer: `write` turns the generation's stream and a [`Started::parser`]
    /// into the dialect's response; the headers every streamed answer carries (the
    /// constraint's note) are added. Cost: O(1) (the writing happens as it streams).
    pub fn stream_with(self, write: impl FnOnce(TextStream, ToolParser) -> Response) -> Response {
        let parser = self.parser();
        with_note(write(self.stream, parser), self.note)
    }

    /// Reads the whole generation and splits it: text, calls and reasoning. Costs the
    /// generation's time; the parse is linear in its length.
    pub async fn answer(self) -> ApiResult<Answer> {
        let generation = collect(self.stream)
            .await
            .map_err(|e| e.dialect(self.dialect))?;
        let (content, calls) = match self.calls {
            Some(f) => ruvllm_runtime::tools::parse_output_as(f, &generation.text),
            None => (generation.text.clone(), Vec::new()),
        };
        Ok(Answer {
            generation,
            content,
            calls,
            note: self.note,
        })
    }
}

/// A request turned into what the runtime takes: the prompt (the conversation with the
/// tools the template renders, or raw text), the parameters with the constraint and
/// reasoning settings. Built by [`prepare`]; [`Prepared::start`] starts it.
#[derive(Debug)]
pub struct Prepared {
    /// The prompt.
    pub prompt: Prompt,
    /// The parameters, constraint included.
    pub params: GenerateParams,
    param: String,
    note: Option<String>,
    calls: Option<CallFormat>,
    dialect: Dialect,
}

/// Turns `req` into a prompt, parameters and a constraint (no compiling: that is done
/// when it starts). Cost: a scan of the messages when the prompt-declared schema rule is
/// on.
pub fn prepare(st: &Shared, req: Request) -> Prepared {
    let Request {
        dialect,
        input,
        tools,
        tools_param,
        format,
        objects,
        mut params,
        thinking,
        prompt_schema,
    } = req;
    let calling = tools.filter(|t| t.choice != ToolChoice::None);
    let (format, note) = match &input {
        Input::Chat(messages)
            if calling.is_none() && prompt_schema.unwrap_or(st.config.prompt_schema) =>
        {
            let json_object = format.as_ref().is_some_and(|c| {
                matches!(
                    c.c,
                    OutputConstraint::JsonObject { .. } | OutputConstraint::Json { .. }
                )
            });
            params::apply_prompt_schema(
                messages,
                format,
                json_object,
                st.sched.model().limits(),
                &objects,
            )
        }
        _ => (format, None),
    };
    let param = match (&format, &calling) {
        (Some(c), _) => c.param.clone(),
        (None, Some(_)) => "tools".to_string(),
        (None, None) => String::new(),
    };
    params.constraint = match &calling {
        Some(t) => Some(OutputConstraint::Tools {
            calling: t.clone(),
            text: format.map(|c| Box::new(c.c)),
            options: objects.options(tools_param, false),
        }),
        None => format.map(|c| c.c),
    };
    params.thinking = st.thinking(thinking.0, thinking.1);
    let prompt = match input {
        Input::Chat(messages) => Prompt::Chat {
            messages,
            tools: calling
                .as_ref()
                .map(|t| Value::from(t.tools.iter().map(Tool::to_openai).collect::<Vec<_>>())),
        },
        Input::Raw(text) => Prompt::Raw(text),
    };
    Prepared {
        prompt,
        params,
        param,
        note,
        calls: calling.is_some().then(|| st.call_format()),
        dialect,
    }
}

impl Prepared {
    /// Starts it through the scheduler (503 when full; 400 for a bad prompt, schema or
    /// grammar, naming the field the constraint came from). Rendering, tokenizing and
    /// compiling run on a blocking thread.
    pub async fn start(self, st: &Shared) -> ApiResult<Started> {
        let markers = st.reasoning(&self.prompt, &self.params);
        let stream = st
            .start(self.prompt, self.params, self.param)
            .await
            .map_err(|e| e.dialect(self.dialect))?;
        Ok(Started {
            stream,
            note: self.note,
            calls: self.calls,
            markers,
            dialect: self.dialect,
        })
    }
}

/// [`prepare`], then [`Prepared::start`]: what every generating handler calls.
pub async fn start(st: &Shared, req: Request) -> ApiResult<Started> {
    prepare(st, req).start(st).await
}

/// A handler's result as the response: the answer, or its error in the dialect's shape.
pub fn respond(d: Dialect, r: ApiResult<Response>) -> Response {
    r.map_err(|e| e.dialect(d))
        .unwrap_or_else(IntoResponse::into_response)
}
