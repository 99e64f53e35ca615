//! Each family's call format against its own real tokenizer (`scripts/fetch-assets.sh`):
//! a named call's forced text begins with the family's marker as the single token the
//! model was trained on, and a whole call is accepted. Fails, not skips, without assets.

use std::path::PathBuf;
use std::sync::Arc;

use ruvllm_engine::schema::SchemaOptions;
use ruvllm_engine::{CheckResult, Constraint, Limits, Matcher, Vocabulary};
use ruvllm_runtime::call_format::CallFormat;
use ruvllm_runtime::tools::{parse_output_as, Tool, ToolCalling, ToolChoice};
use serde_json::json;

fn vocab(name: &str, f: CallFormat) -> Arc<Vocabulary> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets/tokenizers")
        .join(name)
        .join("tokenizer.json");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    let v = Vocabulary::from_tokenizer_json_file(&p).unwrap();
    Arc::new(v.with_text_tokens(f.marker_texts()).unwrap())
}

#[test]
fn family_markers_are_forced_as_their_own_tokens() {
    let schema = json!({"type":"object","properties":{"city":{"type":"string"}},
                        "required":["city"],"additionalProperties":false});
    let tool = Tool::new("get_weather", None, schema).unwrap();
    for (tok, f, marker) in [
        ("qwen2_5", CallFormat::Hermes, Some("<tool_call>")),
        ("llama3_1", CallFormat::Llama3Json, None),
        ("mistral_nemo", CallFormat::Mistral, Some("[TOOL_CALLS]")),
        (
            "deepseek_v3",
            CallFormat::DeepSeek,
            Some("<｜tool▁calls▁begin｜>"),
        ),
    ] {
        let v = vocab(tok, f);
        let tc = ToolCalling {
            tools: vec![tool.clone()],
            choice: ToolChoice::Function("get_weather".into()),
            parallel: true,
            format: f,
        };
        let g = tc
            .grammar(None, &SchemaOptions::default(), &Limits::default())
            .unwrap()
            .unwrap();
        let c = Constraint::new(&g, v.clone(), &Limits::default()).unwrap();
        let mut m = Matcher::new(&c).unwrap();
        let forced = m.forced_tokens().unwrap();
        assert!(!forced.is_empty(), "{tok}");
        if let Some(marker) = marker {
            let first = forced[0];
            assert_eq!(
                v.token_bytes(first),
                marker.as_bytes(),
                "{tok}: the call opens with {marker} as one token"
            );
        }
        let p = f.pieces();
        let call = format!(
            "{}{}get_weather{}{{\"city\":\"Paris\"}}{}{}",
            p.begin, p.call_open, p.name_close, p.call_close, p.end
        );
        let mut m = Matcher::new(&c).unwrap();
        assert_eq!(
            m.check_bytes(call.as_bytes()).unwrap(),
            CheckResult::Accepted,
            "{tok}: {call}"
        );
        let (text, calls) = parse_output_as(f, &call);
        assert!(text.is_empty());
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
    }
}
