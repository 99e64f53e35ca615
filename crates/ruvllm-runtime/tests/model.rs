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
    let g = b
        .complete(
            &Prompt::User("Describe a cat as JSON.".into()),
            &GenerateParams {
                json_mode: Some(JsonModeConfig::default()),
                ..greedy(3)
            },
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(g.finish, FinishReason::Length);
    assert_eq!(g.usage.completion_tokens, 3);
}
