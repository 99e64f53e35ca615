//! The JSON Schema Test Suite's groups on references and content: dynamic scopes
//! (`$dynamicRef`, `$recursiveRef`), other documents through a registry (the suite's
//! `remotes/`), documents of other drafts, and draft-7 content assertions. Every test
//! must be judged right: a valid instance accepted by the mask, an invalid one refused.
//! (The whole suite, against llguidance, is `ruvllm-bench test-suite`.)

use crate::common;

use std::path::Path;
use std::sync::Arc;

use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions, SchemaRegistry, Whitespace};
use ruvllm_engine::{CheckResult, Constraint, Limits, Matcher, Vocabulary};
use serde_json::Value;

fn dummy_vocab() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::new("none", vec![b"\0".to_vec()], vec![true], vec![]).unwrap())
}

/// Runs every group of `file` (under the suite's `tests/<draft>/`) whose description
/// contains `only` (all when empty); returns how many tests were judged.
fn run(draft: &str, file: &str, only: &str, registry: &Arc<SchemaRegistry>) -> usize {
    let schema_uri = match draft {
        "draft7" => "http://json-schema.org/draft-07/schema#",
        "draft2019-09" => "https://json-schema.org/draft/2019-09/schema",
        _ => "https://json-schema.org/draft/2020-12/schema",
    };
    let path = common::shared_data()
        .join("json-schema-test-suite/tests")
        .join(draft)
        .join(file);
    let groups: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let opts = SchemaOptions {
        whitespace: Whitespace::Flexible(4),
        registry: Some(registry.clone()),
        ..Default::default()
    };
    let mut n = 0;
    for g in groups.as_array().unwrap() {
        let what = g["description"].as_str().unwrap();
        if !what.contains(only) {
            continue;
        }
        let mut schema = g["schema"].clone();
        if let Value::Object(o) = &mut schema {
            o.entry("$schema")
                .or_insert_with(|| Value::String(schema_uri.into()));
        }
        let tests = g["tests"].as_array().unwrap();
        let grammar = match schema_to_grammar(&schema, &opts) {
            Ok(g) => g,
            // A schema that admits no value is refused: right when no instance is valid.
            Err(e) if e.to_string().contains("allows no value") => {
                assert!(
                    tests.iter().all(|t| t["valid"] == false),
                    "{draft}/{file}: {what}: {e}"
                );
                n += tests.len();
                continue;
            }
            Err(e) => panic!("{draft}/{file}: {what}: {e}"),
        };
        let c = Constraint::new(&grammar, dummy_vocab(), &Limits::default()).unwrap();
        for t in tests {
            let text = serde_json::to_string(&t["data"]).unwrap();
            let got = Matcher::new(&c)
                .unwrap()
                .check_bytes(text.as_bytes())
                .unwrap()
                == CheckResult::Accepted;
            assert_eq!(
                got,
                t["valid"].as_bool().unwrap(),
                "{draft}/{file}: {what}: {}: {text}",
                t["description"]
            );
            n += 1;
        }
    }
    n
}

fn remotes() -> Arc<SchemaRegistry> {
    let mut r = SchemaRegistry::new();
    let dir = common::shared_data().join("json-schema-test-suite/remotes");
    r.insert_dir(Path::new(&dir), Some("http://localhost:1234/"))
        .unwrap();
    Arc::new(r)
}

/// `$dynamicRef` and `$recursiveRef` whose target depends on the path evaluation took.
#[test]
fn dynamic_references_follow_the_dynamic_scope() {
    let reg = remotes();
    let mut n = run("draft2020-12", "dynamicRef.json", "", &reg);
    n += run("draft2020-12", "optional/dynamicRef.json", "", &reg);
    n += run("draft2019-09", "recursiveRef.json", "", &reg);
    n += run(
        "draft2019-09",
        "unevaluatedProperties.json",
        "$recursiveRef",
        &reg,
    );
    assert!(n > 60, "{n} tests");
}

/// References into the official meta-schemas (held by every registry) and the suite's
/// remote documents, which reach dynamic anchors through several resources.
#[test]
fn meta_schemas_and_remote_documents() {
    let reg = remotes();
    let mut n = 0;
    for draft in ["draft2020-12", "draft2019-09"] {
        for file in ["ref.json", "refRemote.json", "defs.json"] {
            n += run(draft, file, "", &reg);
        }
    }
    n += run("draft7", "refRemote.json", "", &reg);
    assert!(n > 150, "{n} tests");
}

/// A referenced document of another draft is read as that draft.
#[test]
fn documents_of_other_drafts_keep_their_semantics() {
    let reg = remotes();
    let mut n = 0;
    for draft in ["draft2020-12", "draft2019-09", "draft7"] {
        n += run(draft, "optional/cross-draft.json", "", &reg);
    }
    assert_eq!(n, 6);
}

/// Draft 7's content assertions: the encoding in the grammar, the decoded media type
/// checked when the string completes; an unknown one refused.
#[test]
fn draft7_content_assertions() {
    let reg = remotes();
    assert_eq!(run("draft7", "optional/content.json", "", &reg), 10);
    let schema = serde_json::json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "contentEncoding": "base7"
    });
    let err = schema_to_grammar(&schema, &SchemaOptions::default()).unwrap_err();
    assert!(err.to_string().contains("contentEncoding"), "{err}");
    // A media type no validator checks is an annotation; the encoding still holds.
    let schema = serde_json::json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "contentEncoding": "base64",
        "contentMediaType": "application/x-pem-file"
    });
    let g = schema_to_grammar(&schema, &SchemaOptions::default()).unwrap();
    let c = Constraint::new(&g, dummy_vocab(), &Limits::default()).unwrap();
    for (text, ok) in [
        (r#""LS0tLS1CRUdJTg==""#, true),
        (r#""LS0tLS1CRUdJTg=""#, false),
    ] {
        let got = Matcher::new(&c)
            .unwrap()
            .check_bytes(text.as_bytes())
            .unwrap()
            == CheckResult::Accepted;
        assert_eq!(got, ok, "{text}");
    }
}

/// The RFC 4648 encodings draft 7's `contentEncoding` asserts, against the validator:
/// every encoding of random bytes is accepted; random strings over the alphabet (and
/// padding, and a stray character) are accepted exactly when the validator accepts them;
/// random walks through the mask complete only valid strings. With `contentMediaType:
/// application/json` beside it, the decoded text must be JSON.
#[test]
fn content_encodings_agree_with_the_validator() {
    use data_encoding::{BASE32, BASE32HEX, BASE64, BASE64URL, HEXUPPER};
    let mut rng = common::Rng(0x5eed_c0de);
    let d7 = "http://json-schema.org/draft-07/schema#";
    let (mut judged, mut walked) = (0, 0);
    for (name, enc, alphabet) in [
        (
            "base64",
            &BASE64,
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        ),
        (
            "base64url",
            &BASE64URL,
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        ),
        ("base32", &BASE32, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
        ("base32hex", &BASE32HEX, "0123456789ABCDEFGHIJKLMNOPQRSTUV"),
        ("base16", &HEXUPPER, "0123456789ABCDEFabcdef"),
    ] {
        for media in [false, true] {
            let mut schema = serde_json::json!({"$schema": d7, "contentEncoding": name});
            if media {
                schema["contentMediaType"] = "application/json".into();
            }
            let oracle = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft7)
                .build(&schema)
                .unwrap();
            let g = schema_to_grammar(&schema, &SchemaOptions::default()).unwrap();
            let c = Constraint::new(&g, dummy_vocab(), &Limits::default()).unwrap();
            let accepts = |s: &str| {
                let text = serde_json::to_string(s).unwrap();
                Matcher::new(&c)
                    .unwrap()
                    .check_bytes(text.as_bytes())
                    .unwrap()
                    == CheckResult::Accepted
            };
            let mut strings = schema.clone();
            strings["type"] = "string".into();
            let gs = schema_to_grammar(&strings, &SchemaOptions::default()).unwrap();
            let walker =
                Constraint::new(&gs, common::walk_vocab(&["=="]), &Limits::default()).unwrap();
            for _ in 0..40 {
                if let Some(text) = common::random_walk(&walker, &mut rng, 40) {
                    let v: Value = serde_json::from_slice(&text).unwrap();
                    assert!(oracle.is_valid(&v), "{schema}: the grammar completed {v}");
                    walked += 1;
                }
            }
            for _ in 0..300 {
                // Bytes: random, or a JSON document (so the media type is met sometimes).
                let bytes: Vec<u8> = if media && rng.below(2) == 0 {
                    format!("{{\"n\": {}}}", rng.below(1000)).into_bytes()
                } else {
                    (0..rng.below(12)).map(|_| rng.below(256) as u8).collect()
                };
                let s = enc.encode(&bytes);
                let v = Value::String(s.clone());
                assert_eq!(accepts(&s), oracle.is_valid(&v), "{schema}: {s:?}");
                if !media {
                    assert!(accepts(&s), "{name}: {s:?}");
                }
                // A random string over the alphabet, padding and a stray character.
                let chars: Vec<char> = alphabet.chars().chain("==!".chars()).collect();
                let r: String = (0..rng.below(18))
                    .map(|_| chars[rng.below(chars.len())])
                    .collect();
                let v = Value::String(r.clone());
                assert_eq!(accepts(&r), oracle.is_valid(&v), "{schema}: {r:?}");
                judged += 2;
            }
        }
    }
    assert_eq!(judged, 6000);
    assert!(walked > 50, "only {walked} walks completed");
}

/// A custom meta-schema's `$vocabulary`: keywords of a vocabulary it leaves out are
/// annotations; a required vocabulary nobody defines is refused.
#[test]
fn vocabularies_of_custom_meta_schemas() {
    let reg = remotes();
    let n = run("draft2020-12", "vocabulary.json", "", &reg)
        + run("draft2019-09", "vocabulary.json", "", &reg);
    assert!(n >= 4, "{n} tests");
    let mut r = SchemaRegistry::new();
    r.insert(
        "http://example.com/meta.json",
        serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$vocabulary": {
                "https://json-schema.org/draft/2020-12/vocab/core": true,
                "https://example.com/vocab/units": true
            }
        }),
    )
    .unwrap();
    let opts = SchemaOptions {
        registry: Some(Arc::new(r)),
        ..Default::default()
    };
    let schema = serde_json::json!({"$schema": "http://example.com/meta.json", "type": "integer"});
    let err = schema_to_grammar(&schema, &opts).unwrap_err();
    assert!(
        err.to_string().contains("https://example.com/vocab/units"),
        "{err}"
    );
}
