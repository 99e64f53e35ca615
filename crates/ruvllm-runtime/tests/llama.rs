//! The llama.cpp backend end to end on the default model: the same behaviours the candle
//! backend's tests check (golden greedy output, schemas, regexes, grammars, budgets,
//! stop sequences, streaming, seeds), plus batching through the scheduler and the prefix
//! cache. Fails, never skips, when the model is missing.

use std::path::PathBuf;
use std::sync::OnceLock;

use ruvllm_runtime::{
    BackendOptions, FinishReason, GenerateParams, JsonModeConfig, JsonSchema, LlamaBackend,
    LlamaOptions, LlmBackend, Message, ModelBackend, OutputConstraint, Prompt, Scheduler,
    SchedulerOptions, StreamingBackend,
};

fn model_path() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    p
}

fn backend() -> &'static LlamaBackend {
    static B: OnceLock<LlamaBackend> = OnceLock::new();
    B.get_or_init(|| {
        LlamaBackend::load(
            &model_path(),
            &BackendOptions::default(),
            &LlamaOptions::default(),
        )
        .unwrap()
    })
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
    assert_eq!(b.model_config().family, "llama");
    let g = b
        .complete(&Prompt::Raw(FRANCE.into()), &greedy(32), &mut |_| true)
        .unwrap();
    assert_eq!(g.text, "The capital of France is Paris.");
    assert_eq!(g.finish, FinishReason::Stop);
}

#[test]
fn schemas_regexes_grammars_and_choices() {
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
    let g = run(OutputConstraint::Regex("[0-9]{3}-[0-9]{4}".into()));
    assert_eq!(g.finish, FinishReason::Stop);
    assert_eq!(g.text.len(), 8, "{}", g.text);
    let g = run(OutputConstraint::Gbnf(
        "root ::= \"Answer: \" (\"yes\" | \"no\") \".\"".into(),
    ));
    assert!(
        g.text == "Answer: yes." || g.text == "Answer: no.",
        "{}",
        g.text
    );
}

#[test]
fn seeds_streams_stops_and_budgets() {
    let b = backend();
    let p = GenerateParams {
        seed: Some(42),
        temperature: 1.0,
        max_tokens: 20,
        ..Default::default()
    };
    let a = b.generate("Tell me a story.", p.clone()).unwrap();
    assert_eq!(a, b.generate("Tell me a story.", p).unwrap());
    let p = GenerateParams {
        seed: Some(5),
        max_tokens: 40,
        json_mode: Some(JsonModeConfig::default()),
        ..Default::default()
    };
    let whole = b.generate("List three colors as JSON.", p.clone()).unwrap();
    let mut s = b.generate_stream("List three colors as JSON.", p);
    let streamed: String = s.by_ref().map(|c| c.unwrap()).collect();
    assert_eq!(streamed, whole);
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
    // Budget-aware: 12 tokens end a complete value.
    let schema = JsonSchema::from_str(
        r#"{"type":"object","properties":{"name":{"type":"string"},"story":{"type":"string"}},
            "required":["name","story"],"additionalProperties":false}"#,
    )
    .unwrap();
    let g = b
        .complete(
            &Prompt::User("Describe a cat as JSON with its name and a long story.".into()),
            &GenerateParams {
                json_mode: Some(JsonModeConfig {
                    schema: Some(schema.clone()),
                    ..Default::default()
                }),
                ..greedy(12)
            },
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(g.finish, FinishReason::Stop, "{}", g.text);
    assert!(g.usage.completion_tokens <= 12);
    schema
        .validate(&serde_json::from_str(&g.text).unwrap())
        .unwrap();
}

/// The scheduler runs several generations in one llama.cpp decode per step; each gives
/// the output it gives alone (greedy), and seeded sampled outputs do not depend on the
/// batch.
#[test]
fn scheduler_batches_and_gives_the_same_outputs() {
    let b = backend();
    let sched = Scheduler::new(
        b.clone(),
        SchedulerOptions {
            max_batch: 4,
            max_waiting: 8,
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
        temperature: if i == 3 { 0.8 } else { 0.0 },
        seed: Some(i as u64),
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
    }
    let st = sched.stats();
    assert!(st.batched_sequences > st.forward_passes, "{st:?}");
}

#[test]
fn prompt_prefixes_are_reused() {
    let b = LlamaBackend::load(
        &model_path(),
        &BackendOptions::default(),
        &LlamaOptions::default(),
    )
    .unwrap();
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
    assert!(other.usage.cached_prompt_tokens >= 32, "{:?}", other.usage);
    assert!(other.usage.cached_prompt_tokens < other.usage.prompt_tokens);
    let again = ask("What is the capital of France?");
    assert_eq!(
        again.usage.cached_prompt_tokens,
        again.usage.prompt_tokens - 1
    );
    assert_eq!(again.text, first.text);
}

fn gemma() -> &'static LlamaBackend {
    static B: OnceLock<LlamaBackend> = OnceLock::new();
    B.get_or_init(|| {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../assets/models/gemma-3-270m-q4_k_m.gguf");
        assert!(
            p.exists(),
            "{} is missing: run scripts/fetch-assets.sh",
            p.display()
        );
        LlamaBackend::load(&p, &BackendOptions::default(), &LlamaOptions::default()).unwrap()
    })
}

/// Gemma 3 270M (an architecture the candle backend does not run; a base model, and a
/// SentencePiece vocabulary of 262k tokens that llama.cpp tokenizes): a golden greedy
/// continuation, and constrained outputs complete and valid.
#[test]
fn gemma3_under_schemas_regexes_and_grammars() {
    let b = gemma();
    assert_eq!(b.model_config().family, "gemma3");
    assert_eq!(b.vocab().len(), 262_144);
    // Every end of generation is a control token (llama.cpp also counts `</s>`, id 212,
    // which is ordinary text in Gemma's vocabulary and must stay writable).
    let v = b.vocab();
    assert!(
        v.eos_tokens().contains(&106),
        "<end_of_turn> ends the output"
    );
    assert!(!v.eos_tokens().contains(&212));
    assert!(v.eos_tokens().iter().all(|&t| v.is_special(t)));
    // The Gemma turn format (the file carries no template).
    let text = b.render_with(&Prompt::User("Hi".into()), None).unwrap();
    assert_eq!(
        text,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(b.encode(&text).unwrap()[..3], [2, 105, 2364]);
    let g = b
        .complete(
            &Prompt::Raw("The capital of France is".into()),
            &greedy(12),
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(
        g.text,
        " the capital of the country of France. It is the largest"
    );
    let schema = JsonSchema::from_str(
        r#"{"type":"object","properties":{"city":{"type":"string","maxLength":30},
            "population":{"type":"integer","minimum":0}},"required":["city","population"],
            "additionalProperties":false}"#,
    )
    .unwrap();
    for seed in 0..3 {
        let g = b
            .complete(
                &Prompt::User("Give the largest city of Japan as JSON.".into()),
                &GenerateParams {
                    seed: Some(seed),
                    max_tokens: 64,
                    json_mode: Some(JsonModeConfig {
                        schema: Some(schema.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                &mut |_| true,
            )
            .unwrap();
        assert_eq!(g.finish, FinishReason::Stop, "{}", g.text);
        schema
            .validate(&serde_json::from_str(&g.text).unwrap())
            .unwrap();
    }
    let g = b
        .complete(
            &Prompt::User("When did Apollo 11 land? Answer with the date.".into()),
            &GenerateParams {
                constraint: Some(OutputConstraint::Regex(
                    "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])".into(),
                )),
                ..greedy(16)
            },
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(g.finish, FinishReason::Stop);
    assert_eq!(g.text.len(), 10, "{}", g.text);
    let g = b
        .complete(
            &Prompt::User("Is water wet? Answer.".into()),
            &GenerateParams {
                constraint: Some(OutputConstraint::Gbnf(
                    "root ::= \"Answer: \" (\"yes\" | \"no\") \".\"".into(),
                )),
                ..greedy(16)
            },
            &mut |_| true,
        )
        .unwrap();
    assert!(
        g.text == "Answer: yes." || g.text == "Answer: no.",
        "{}",
        g.text
    );
}
