//! End-to-end tests on the default model (SmolLM2-135M-Instruct Q4_1), which
//! `scripts/fetch-assets.sh` downloads. These fail, not skip, when it is missing.

use std::path::PathBuf;
use std::sync::OnceLock;

use ruvllm_runtime::{
    BackendOptions, CandleBackend, FinishReason, GenerateParams, JsonModeConfig, JsonSchema,
    LlmBackend, Message, OutputConstraint, Prompt, StreamingBackend,
};

fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("RUVLLM_MODEL") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    p
}

fn backend() -> &'static CandleBackend {
    static B: OnceLock<CandleBackend> = OnceLock::new();
    B.get_or_init(|| CandleBackend::load(&model_path(), &BackendOptions::default()).unwrap())
}

const FRANCE: &str =
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams {
        temperature: 0.0,
        max_tokens,
        ..Default::default()
    }
}

#[test]
fn golden_capital_of_france() {
    let b = backend();
    // The question as one ChatML user turn (the template's format, without the default
    // system message the GGUF template inserts when none is given).
    let g = b
        .complete(
            &Prompt::Chat {
                messages: vec![Message::user("What is the capital of France?")],
                tools: None,
            },
            &greedy(32),
            &mut |_| true,
        )
        .unwrap();
    assert!(!g.text.is_empty());
    let g = b
        .complete(&Prompt::Raw(FRANCE.into()), &greedy(32), &mut |_| true)
        .unwrap();
    assert_eq!(g.text, "The capital of France is Paris.");
    assert_eq!(g.finish, FinishReason::Stop);
}

#[test]
fn prompt_is_rendered_with_the_gguf_chat_template() {
    let b = backend();
    let text = b.render(&Prompt::User("Hi".into())).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = b.encode(&text).unwrap();
    assert_eq!(ids[0], 1, "<|im_start|> is one special token");
    assert_eq!(
        b.encode("123").unwrap().len(),
        3,
        "digits are split one by one"
    );
}

#[test]
fn schema_constrained_output_validates() {
    let b = backend();
    let schema = JsonSchema::from_str(
        r#"{"type":"object","properties":{"name":{"type":"string","maxLength":20},
            "age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],
            "additionalProperties":false}"#,
    )
    .unwrap();
    for seed in 0..3 {
        let v = b
            .generate_json(
                "Give me a person as JSON.",
                Some(schema.clone()),
                GenerateParams {
                    seed: Some(seed),
                    max_tokens: 64,
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(schema.is_valid(&v), "{v}");
    }
}

#[test]
fn same_seed_same_output() {
    let b = backend();
    let p = GenerateParams {
        seed: Some(42),
        temperature: 1.0,
        max_tokens: 20,
        ..Default::default()
    };
    let a = b.generate("Tell me a story.", p.clone()).unwrap();
    let c = b.generate("Tell me a story.", p).unwrap();
    assert_eq!(a, c);
}

#[test]
fn choice_regex_and_grammar_constraints() {
    let b = backend();
    let run = |c: OutputConstraint| {
        b.complete(
            &Prompt::User("Is the sky blue? Answer.".into()),
            &GenerateParams {
                constraint: Some(c),
                max_tokens: 16,
                seed: Some(1),
                ..Default::default()
            },
            &mut |_| true,
        )
        .unwrap()
    };
    let g = run(OutputConstraint::Choice(vec!["yes".into(), "no".into()]));
    assert!(g.text == "yes" || g.text == "no", "{}", g.text);
    assert_eq!(g.finish, FinishReason::Stop);
    let g = run(OutputConstraint::Regex("[0-9]{3}-[0-9]{4}".into()));
    assert!(
        regex_like_phone(&g.text),
        "{:?} does not match the regex",
        g.text
    );
    let g = run(OutputConstraint::Gbnf(
        "root ::= \"Answer: \" (\"yes\" | \"no\") \".\"".into(),
    ));
    assert!(
        g.text == "Answer: yes." || g.text == "Answer: no.",
        "{}",
        g.text
    );
}

fn regex_like_phone(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 8
        && b[..3].iter().all(u8::is_ascii_digit)
        && b[3] == b'-'
        && b[4..].iter().all(u8::is_ascii_digit)
}

#[test]
fn streaming_yields_the_same_text() {
    let b = backend();
    let p = GenerateParams {
        seed: Some(5),
        max_tokens: 40,
        json_mode: Some(JsonModeConfig::default()),
        ..Default::default()
    };
    let whole = b.generate("List three colors as JSON.", p.clone()).unwrap();
    let mut s = b.generate_stream("List three colors as JSON.", p);
    let mut streamed = String::new();
    for chunk in &mut s {
        streamed.push_str(&chunk.unwrap());
    }
    assert_eq!(streamed, whole);
    assert!(s.outcome().unwrap().is_ok());
}

#[test]
fn stop_sequences_cut_the_output() {
    let b = backend();
    let g = b
        .complete(
            &Prompt::Raw(FRANCE.into()),
            &GenerateParams {
                stop: vec!["France".into()],
                ..greedy(32)
            },
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(g.text, "The capital of ");
    assert_eq!(g.finish, FinishReason::Stop);
}

#[test]
fn max_tokens_cut_is_reported_as_length() {
    let b = backend();
    let schema = JsonSchema::from_str(
        r#"{"type":"object","properties":{"name":{"type":"string"},"story":{"type":"string"}},
            "required":["name","story"],"additionalProperties":false}"#,
    )
    .unwrap();
    let mode = JsonModeConfig {
        schema: Some(schema),
        ..Default::default()
    };
    let prompt = "Describe a cat as JSON with its name and a long story.";
    // Budget-aware decoding off: the JSON is cut, and said to be.
    let g = b
        .complete(
            &Prompt::User(prompt.into()),
            &GenerateParams {
                json_mode: Some(mode.clone()),
                budget_aware: false,
                ..greedy(12)
            },
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(g.finish, FinishReason::Length);
    assert_eq!(g.usage.completion_tokens, 12);
    assert!(serde_json::from_str::<serde_json::Value>(&g.text).is_err());
    // On (the default): the same 12 tokens end in a complete value.
    let g = b
        .complete(
            &Prompt::User(prompt.into()),
            &GenerateParams {
                json_mode: Some(mode),
                ..greedy(12)
            },
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(g.finish, FinishReason::Stop, "{}", g.text);
    assert!(g.usage.completion_tokens <= 12);
    serde_json::from_str::<serde_json::Value>(&g.text).unwrap();
}

/// A schema whose strings run on: with a small budget, every entry point (`generate_json`,
/// a stream, the scheduler) ends with a complete, valid value that the budget closed;
/// below the shortest completion the output is cut and ends `length`.
#[test]
fn budget_aware_outputs_end_complete_within_max_tokens() {
    use ruvllm_runtime::{Scheduler, SchedulerOptions};
    let b = backend();
    let schema = JsonSchema::from_str(
        r#"{"type":"object","properties":{"title":{"type":"string"},"story":{"type":"string"},
            "tags":{"type":"array","items":{"type":"string"}}},"required":["title","story","tags"]}"#,
    )
    .unwrap();
    let prompt = "Write a very long story as JSON with a title, the story and many tags.";
    let params = |max_tokens: usize, seed: u64| GenerateParams {
        max_tokens,
        seed: Some(seed),
        temperature: 0.7,
        json_mode: Some(JsonModeConfig {
            schema: Some(schema.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    // generate_json: a value, never an error about cut JSON.
    for seed in 0..3 {
        let v = b
            .generate_json(prompt, Some(schema.clone()), params(20, seed))
            .unwrap();
        schema.validate(&v).unwrap();
    }
    // A stream.
    let mut st = b.stream(Prompt::User(prompt.into()), params(20, 7));
    let text: String = st.by_ref().map(|c| c.unwrap()).collect();
    let g = st.outcome().unwrap().unwrap();
    assert_eq!(g.text, text);
    assert_eq!(g.finish, FinishReason::Stop);
    assert!(g.budget_closed && g.usage.budget_steps > 0, "{g:?}");
    schema
        .validate(&serde_json::from_str(&text).unwrap())
        .unwrap();
    // The scheduler, several at once.
    let sched = Scheduler::new(
        b.clone(),
        SchedulerOptions {
            max_batch: 3,
            ..Default::default()
        },
    );
    let streams: Vec<_> = (0..3)
        .map(|seed| {
            sched
                .generate(&Prompt::User(prompt.into()), &params(24, seed))
                .unwrap()
        })
        .collect();
    for mut s in streams {
        for c in s.by_ref() {
            c.unwrap();
        }
        let g = s.outcome().unwrap().unwrap();
        assert_eq!(g.finish, FinishReason::Stop);
        assert!(g.usage.completion_tokens <= 24);
        schema
            .validate(&serde_json::from_str(&g.text).unwrap())
            .unwrap();
    }
    // Below the shortest completion (`{"title":"","story":"","tags":[]}` is more than 5
    // tokens): cut, and said to be.
    let g = b
        .complete(&Prompt::User(prompt.into()), &params(5, 1), &mut |_| true)
        .unwrap();
    assert_eq!(g.finish, FinishReason::Length);
    assert!(!g.budget_closed);
}

/// Under a constraint a stop sequence ends the output only where it is complete: a `"`
/// stop cannot cut a JSON value in half.
#[test]
fn stop_sequences_under_a_constraint_wait_for_a_complete_output() {
    let b = backend();
    let schema = JsonSchema::from_str(
        r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],
            "additionalProperties":false}"#,
    )
    .unwrap();
    let g = b
        .complete(
            &Prompt::User("Name a city as JSON.".into()),
            &GenerateParams {
                stop: vec!["\"".into(), "}".into()],
                json_mode: Some(JsonModeConfig {
                    schema: Some(schema.clone()),
                    ..Default::default()
                }),
                ..greedy(40)
            },
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(g.finish, FinishReason::Stop);
    schema
        .validate(&serde_json::from_str(&g.text).unwrap())
        .unwrap();
}

#[test]
fn batched_forward_matches_one_sequence_at_a_time() {
    let b = backend();
    let m = b.model();
    let prompts: Vec<Vec<u32>> = ["Hello there", "The capital of France is", "1, 2, 3,"]
        .iter()
        .map(|t| b.encode(t).unwrap())
        .collect();
    let mut alone = Vec::new();
    for p in &prompts {
        let mut c = m.new_cache();
        alone.push(m.forward(p, &mut c).unwrap());
    }
    let mut caches: Vec<_> = prompts.iter().map(|_| m.new_cache()).collect();
    let mut batch: Vec<(&[u32], &mut ruvllm_runtime::KvCache)> = prompts
        .iter()
        .map(|p| p.as_slice())
        .zip(caches.iter_mut())
        .collect();
    let together = m.forward_batch(&mut batch).unwrap();
    for (a, t) in alone.iter().zip(&together) {
        let diff = a
            .iter()
            .zip(t)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-3, "max |diff| {diff}");
    }
    // A decode step with different cache lengths in one batch.
    let next = [42u32, 7];
    let mut one = m.new_cache();
    m.forward(&prompts[0], &mut one).unwrap();
    let want = m.forward(&next[..1], &mut one).unwrap();
    let (c0, rest) = caches.split_at_mut(1);
    let got = m
        .forward_batch(&mut [(&next[..1], &mut c0[0]), (&next[1..], &mut rest[0])])
        .unwrap();
    let diff = want
        .iter()
        .zip(&got[0])
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(diff < 1e-3, "decode step max |diff| {diff}");
    // A prompt fed in chunks (as the scheduler feeds long prompts) gives the same logits.
    let long = b
        .encode(&"The quick brown fox jumps over the lazy dog. ".repeat(6))
        .unwrap();
    let mut whole = m.new_cache();
    let want = m.forward(&long, &mut whole).unwrap();
    let mut parts = m.new_cache();
    let mut got = Vec::new();
    for chunk in long.chunks(16) {
        got = m
            .forward_batch(&mut [(chunk, &mut parts)])
            .unwrap()
            .remove(0);
    }
    let diff = want
        .iter()
        .zip(&got)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(diff < 1e-2, "chunked prompt max |diff| {diff}");
}

#[test]
fn scheduler_batches_and_gives_the_same_outputs() {
    use ruvllm_runtime::{Scheduler, SchedulerOptions};
    let b = backend();
    let sched = Scheduler::new(
        b.clone(),
        SchedulerOptions {
            max_batch: 4,
            max_waiting: 2,
            // Prompts in one chunk: then batching alone must not change a greedy output
            // (chunking changes float rounding a little; checked in the test above).
            prefill_chunk: 512,
        },
    );
    let questions = [
        "What is the capital of France?",
        "Name a color.",
        "Give me a JSON object with a name.",
        "Count to five.",
    ];
    let params = |i: usize| GenerateParams {
        temperature: 0.0,
        max_tokens: 24,
        json_mode: (i == 2).then(JsonModeConfig::default),
        ..Default::default()
    };
    let streams: Vec<_> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            sched
                .generate(&Prompt::User(q.to_string()), &params(i))
                .unwrap()
        })
        .collect();
    // Two more fit in the queue, then admission fails.
    let t1 = sched.try_reserve().unwrap();
    let t2 = sched.try_reserve().unwrap();
    assert!(sched.try_reserve().is_none());
    let busy = sched
        .generate(&Prompt::User("x".into()), &params(0))
        .unwrap_err();
    assert!(busy.to_string().contains("busy"), "{busy}");
    drop((t1, t2));
    for (i, mut s) in streams.into_iter().enumerate() {
        let text: String = s.by_ref().map(|c| c.unwrap()).collect();
        let g = s.outcome().unwrap().unwrap();
        assert_eq!(text, g.text);
        let want = b
            .complete(
                &Prompt::User(questions[i].to_string()),
                &params(i),
                &mut |_| true,
            )
            .unwrap();
        assert_eq!(g.text, want.text, "question {i}");
        assert_eq!(g.finish, want.finish);
    }
    let st = sched.stats();
    assert_eq!(st.finished, 4);
    assert!(
        st.batched_sequences > st.forward_passes,
        "no pass held more than one sequence: {st:?}"
    );
    // A consumer that goes away frees its place.
    let s = sched
        .generate(&Prompt::User("Tell me a long story.".into()), &greedy(200))
        .unwrap();
    drop(s);
    let t0 = std::time::Instant::now();
    while sched.stats().cancelled == 0 {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the dropped stream was not cancelled"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn prompt_prefixes_are_reused() {
    // A fresh backend, so that other tests' prompts are not in its prefix cache.
    let b = CandleBackend::load(&model_path(), &BackendOptions::default()).unwrap();
    let system = "You are a careful assistant. You answer questions about geography in one \
                  short sentence, without any introduction, and you never make things up.";
    let ask = |q: &str| {
        b.complete(
            &Prompt::Chat {
                messages: vec![Message::system(system), Message::user(q)],
                tools: None,
            },
            &greedy(20),
            &mut |_| true,
        )
        .unwrap()
    };
    let first = ask("What is the capital of France?");
    assert_eq!(first.usage.cached_prompt_tokens, 0);
    let other = ask("What is the capital of Spain?");
    assert!(
        other.usage.cached_prompt_tokens >= 32,
        "the shared system prompt was recomputed: {:?}",
        other.usage
    );
    assert!(other.usage.cached_prompt_tokens < other.usage.prompt_tokens);
    // The same prompt again: everything but the last token comes from the cache, and the
    // greedy answer is the same.
    let again = ask("What is the capital of France?");
    assert_eq!(
        again.usage.cached_prompt_tokens,
        again.usage.prompt_tokens - 1
    );
    assert_eq!(again.text, first.text);
    // Turned off, nothing is reused.
    let off = CandleBackend::load(
        &model_path(),
        &BackendOptions {
            prefix_cache_bytes: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    for _ in 0..2 {
        let g = off
            .complete(
                &Prompt::User("Hello there, how are you today?".repeat(4)),
                &greedy(2),
                &mut |_| true,
            )
            .unwrap();
        assert_eq!(g.usage.cached_prompt_tokens, 0);
    }
}

fn thinking_backend() -> &'static CandleBackend {
    static B: OnceLock<CandleBackend> = OnceLock::new();
    B.get_or_init(|| {
        let t = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/templates/chatml-think.jinja"),
        )
        .unwrap();
        let opts = BackendOptions {
            chat_template: Some(t),
            ..Default::default()
        };
        CandleBackend::load(&model_path(), &opts).unwrap()
    })
}

/// Reasoning in one pass: free text up to `</think>` (forced at the reasoning budget),
/// then the schema; the answer validates and the reasoning comes apart from it.
#[test]
fn reasoning_then_schema_in_one_pass() {
    let b = thinking_backend();
    let schema = serde_json::json!({"type":"object","properties":{"city":{"type":"string","maxLength":20}},"required":["city"],"additionalProperties":false});
    let prompt = Prompt::Chat {
        messages: vec![Message::user(
            "Which city is the capital of France? Answer in JSON.",
        )],
        tools: None,
    };
    assert!(b
        .render(&prompt)
        .unwrap()
        .ends_with("<|im_start|>assistant\n<think>\n"));
    for budget in [0, 5, 24] {
        let params = GenerateParams {
            seed: Some(7),
            max_tokens: 96,
            constraint: Some(OutputConstraint::JsonSchema {
                schema: JsonSchema::from_value(schema.clone()).unwrap(),
                options: Default::default(),
            }),
            thinking: ruvllm_runtime::reasoning::Thinking {
                enabled: None,
                budget: Some(budget),
            },
            ..Default::default()
        };
        let mut streamed = String::new();
        let g = b
            .complete(&prompt, &params, &mut |t| {
                streamed.push_str(t);
                true
            })
            .unwrap();
        assert_eq!(g.finish, FinishReason::Stop, "{g:?}");
        let v: serde_json::Value = serde_json::from_str(&g.text).unwrap();
        assert!(jsonschema::is_valid(&schema, &v), "{}", g.text);
        let reasoning = g.reasoning.clone().unwrap();
        // The stream is reasoning, the marker, the separator, the answer.
        let end = streamed.find("</think>").expect("the end marker");
        assert_eq!(streamed[end + 8..].trim_start(), g.text);
        assert_eq!(streamed[..end].trim(), reasoning);
        // The budget bounds the reasoning (its tokens are at most the budget).
        let n = b.encode(&streamed[..end]).unwrap().len();
        assert!(
            n <= budget + 1,
            "{n} reasoning tokens over a budget of {budget}"
        );
    }
    // Reasoning off: an empty section in the prompt, no reasoning in the output.
    let params = GenerateParams {
        seed: Some(7),
        max_tokens: 64,
        json_mode: Some(JsonModeConfig::default()),
        thinking: ruvllm_runtime::reasoning::Thinking {
            enabled: Some(false),
            budget: None,
        },
        ..Default::default()
    };
    let g = b.complete(&prompt, &params, &mut |_| true).unwrap();
    assert!(g.reasoning.is_none());
    assert_eq!(g.finish, FinishReason::Stop);
    serde_json::from_str::<serde_json::Value>(&g.text).unwrap();
}

/// `max_tokens` covers the reasoning and the answer: budget-aware decoding closes the
/// reasoning in time for a complete answer.
#[test]
fn max_tokens_closes_the_reasoning_in_time() {
    let b = thinking_backend();
    let schema = serde_json::json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false});
    let params = GenerateParams {
        seed: Some(3),
        max_tokens: 24,
        constraint: Some(OutputConstraint::JsonSchema {
            schema: JsonSchema::from_value(schema.clone()).unwrap(),
            options: Default::default(),
        }),
        ..Default::default()
    };
    let prompt = Prompt::Chat {
        messages: vec![Message::user(
            "Think at length about the number seven, then give it.",
        )],
        tools: None,
    };
    let g = b.complete(&prompt, &params, &mut |_| true).unwrap();
    assert_eq!(g.finish, FinishReason::Stop, "{g:?}");
    assert!(g.usage.completion_tokens <= 24);
    let v: serde_json::Value = serde_json::from_str(&g.text).unwrap();
    assert!(jsonschema::is_valid(&schema, &v), "{}", g.text);
    assert!(g.reasoning.is_some());
}

/// A chat template of the Mistral family: calls are written `[TOOL_CALLS][...]`, parsed
/// back in that syntax, and the conversation's earlier calls are rendered with object
/// arguments, as the template expects.
#[test]
fn tool_calls_in_the_template_family_format() {
    use ruvllm_runtime::call_format::CallFormat;
    use ruvllm_runtime::tools::{parse_output_as, Tool, ToolCalling, ToolChoice};
    let t = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/templates/chatml-mistral-tools.jinja"),
    )
    .unwrap();
    let opts = BackendOptions {
        chat_template: Some(t),
        ..Default::default()
    };
    let b = CandleBackend::load(&model_path(), &opts).unwrap();
    assert_eq!(b.call_format(), CallFormat::Mistral);
    let schema = serde_json::json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false});
    let add = Tool::new("add", Some("Adds".into()), schema.clone()).unwrap();
    let mut earlier = Message::new("assistant", "");
    earlier.tool_calls = Some(serde_json::json!([{"id": "c1", "type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 1}"}}]));
    let mut result = Message::new("tool", "2");
    result.tool_call_id = Some("c1".into());
    let prompt = Prompt::Chat {
        messages: vec![
            Message::user("What is 1 plus 1?"),
            earlier,
            result,
            Message::user("And 2 plus 3?"),
        ],
        tools: Some(serde_json::json!([add.to_openai()])),
    };
    let text = b.render(&prompt).unwrap();
    assert!(
        text.contains(r#"[TOOL_CALLS][{"name": "add", "arguments": {"a":1,"b":1}}]"#),
        "{text}"
    );
    let params = GenerateParams {
        seed: Some(1),
        max_tokens: 64,
        constraint: Some(OutputConstraint::Tools {
            calling: ToolCalling {
                tools: vec![add],
                choice: ToolChoice::Required,
                parallel: true,
                format: CallFormat::Hermes, // the backend writes its own format
            },
            text: None,
            options: Default::default(),
        }),
        ..Default::default()
    };
    let g = b.complete(&prompt, &params, &mut |_| true).unwrap();
    assert_eq!(g.finish, FinishReason::Stop);
    assert!(
        g.text.starts_with("[TOOL_CALLS][{\"name\": \"add\""),
        "{}",
        g.text
    );
    let (rest, calls) = parse_output_as(CallFormat::Mistral, &g.text);
    assert!(rest.is_empty(), "{rest:?}");
    assert!(!calls.is_empty());
    for c in calls {
        let v: serde_json::Value = serde_json::from_str(&c.arguments).unwrap();
        assert!(jsonschema::is_valid(&schema, &v), "{}", c.arguments);
    }
}

/// A backend whose forward pass panics once, when armed: the scheduler must fail the
/// generations of that pass with an error naming the fault, and serve the next request.
mod faulty {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use ruvllm_engine::{Constraint, Engine, Limits, Vocabulary};
    use ruvllm_runtime::call_format::CallFormat;
    use ruvllm_runtime::reasoning::ReasoningMarkers;
    use ruvllm_runtime::{
        BatchBackend, CandleBackend, GenerateParams, ModelBackend, ModelConfig, OutputConstraint,
        Prompt, Result, Sequence,
    };

    pub struct Faulty {
        pub inner: CandleBackend,
        pub armed: Arc<AtomicBool>,
    }

    impl ModelBackend for Faulty {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn model_config(&self) -> &ModelConfig {
            self.inner.model_config()
        }
        fn vocab(&self) -> &Arc<Vocabulary> {
            self.inner.vocab()
        }
        fn engine(&self) -> &Engine {
            self.inner.engine()
        }
        fn chat_template(&self) -> &str {
            self.inner.chat_template()
        }
        fn render_with(&self, prompt: &Prompt, think: Option<bool>) -> Result<String> {
            self.inner.render_with(prompt, think)
        }
        fn call_format(&self) -> CallFormat {
            self.inner.call_format()
        }
        fn reasoning_for(
            &self,
            prompt: &Prompt,
            params: &GenerateParams,
        ) -> Option<&ReasoningMarkers> {
            self.inner.reasoning_for(prompt, params)
        }
        fn encode(&self, text: &str) -> Result<Vec<u32>> {
            self.inner.encode(text)
        }
        fn constraint(&self, c: &OutputConstraint) -> Result<Option<Arc<Constraint>>> {
            self.inner.constraint(c)
        }
        fn limits(&self) -> &Limits {
            self.inner.limits()
        }
        fn constraint_cache_usage(&self) -> (usize, usize) {
            self.inner.constraint_cache_usage()
        }
    }

    impl BatchBackend for Faulty {
        type Sequence = Sequence;
        fn start(&self, prompt: &Prompt, params: &GenerateParams) -> Result<Sequence> {
            self.inner.start(prompt, params)
        }
        fn forward(&self, batch: &mut [(&mut Sequence, usize)]) -> Result<Vec<Vec<f32>>> {
            if self.armed.swap(false, Ordering::SeqCst) {
                panic!("injected fault in the forward pass");
            }
            self.inner.forward(batch)
        }
    }
}

#[test]
fn a_backend_fault_fails_its_request_and_the_next_is_served() {
    use ruvllm_runtime::{RuntimeError, Scheduler, SchedulerOptions};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let armed = Arc::new(AtomicBool::new(true));
    let sched = Scheduler::new(
        faulty::Faulty {
            inner: backend().clone(),
            armed: armed.clone(),
        },
        SchedulerOptions::default(),
    );
    let first = sched.complete(&Prompt::User("Hello".into()), &greedy(4));
    match first {
        Err(RuntimeError::Model(m)) => {
            assert!(m.contains("backend fault in the forward pass"), "{m}");
            assert!(m.contains("injected fault"), "{m}");
        }
        other => panic!("expected a model error naming the fault, got {other:?}"),
    }
    let second = sched
        .complete(&Prompt::User("Hello".into()), &greedy(4))
        .unwrap();
    assert!(second.usage.completion_tokens > 0, "{second:?}");
    assert_eq!(sched.stats().failed, 1);
}
