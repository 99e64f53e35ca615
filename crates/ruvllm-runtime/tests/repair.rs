//! JSON validation and repair: a corpus of malformed model outputs.

use ruvllm_runtime::json::{repair_json, Repair, RepairError};
use ruvllm_runtime::{JsonError, JsonSchema, JsonValidator, ValidationStatus};
use serde_json::{json, Value};

/// (model output, the value it must repair to, a fix that must be reported).
fn corpus() -> Vec<(&'static str, Value, Option<Repair>)> {
    use Repair::*;
    vec![
        // Code fences and prose.
        ("```json\n{\"a\": 1}\n```", json!({"a": 1}), Some(CodeFence)),
        ("```\n[1, 2]\n```", json!([1, 2]), Some(CodeFence)),
        ("Sure! ```json {\"age\": 41} ```", json!({"age": 41}), Some(CodeFence)),
        ("Here is the JSON:\n```json\n{\"name\": \"Ada\"}\n```\nLet me know!", json!({"name": "Ada"}), Some(CodeFence)),
        ("```json\n{\"a\": [1, 2\n", json!({"a": [1, 2]}), Some(UnclosedContainer)),
        // Fences inside strings neither open nor close one (found by proptest: `{"":"```"}`
        // read as the string "}").
        ("{\"\":\"```\"}", json!({"": "```"}), None),
        ("```json\n{\"code\": \"```py\\nx\\n```\"}\n```", json!({"code": "```py\nx\n```"}), Some(CodeFence)),
        ("{\"a\": \"```\"} trailing", json!({"a": "```"}), Some(SurroundingText)),
        // A fence in a single-quoted string: the text begins with the value that holds it.
        ("{'a': '```'}", json!({"a": "```"}), Some(SingleQuotes)),
        ("[{'code': '```py\nx\n```'}] done", json!([{"code": "```py\nx\n```"}]), Some(SingleQuotes)),
        // A value before a fenced block does not hold its fence: the block is the answer.
        // Nor does a value cut off by the end of the text, which would swallow the block.
        ("{'note': 'see below\n```json\n{\"b\": 2}\n```\n", json!({"b": 2}), Some(CodeFence)),
        // A cut-off value holding a fence, with nothing after it: still that value, its
        // cut string dropped.
        ("{'a': 'see ```", json!({}), Some(UnclosedString)),
        ("{\"a\": 1}\n```json\n{\"b\": 2}\n```", json!({"b": 2}), Some(CodeFence)),
        ("Sure! {\"ok\": true} Hope this helps.", json!({"ok": true}), Some(SurroundingText)),
        ("The answer is: [1, 2, 3].", json!([1, 2, 3]), Some(SurroundingText)),
        ("Note {this} is prose. {\"x\": 2}", json!({"x": 2}), Some(SurroundingText)),
        ("  \n {\"a\": null}  \n", json!({"a": null}), None),
        // Trailing commas.
        ("{\"a\": 1,}", json!({"a": 1}), Some(TrailingComma)),
        ("[1, 2, 3,]", json!([1, 2, 3]), Some(TrailingComma)),
        ("{\"a\": [1,], \"b\": {\"c\": 2,},}", json!({"a": [1], "b": {"c": 2}}), Some(TrailingComma)),
        ("[\n  {\"id\": 1},\n  {\"id\": 2},\n]", json!([{"id": 1}, {"id": 2}]), Some(TrailingComma)),
        // Single quotes.
        ("{'name': 'Ada', 'age': 36}", json!({"name": "Ada", "age": 36}), Some(SingleQuotes)),
        ("['a', \"b\"]", json!(["a", "b"]), Some(SingleQuotes)),
        ("{'quote': 'it\\'s fine'}", json!({"quote": "it's fine"}), Some(SingleQuotes)),
        ("{'say': 'he said \"hi\"'}", json!({"say": "he said \"hi\""}), Some(SingleQuotes)),
        // Unquoted keys.
        ("{name: \"Ada\", age: 36}", json!({"name": "Ada", "age": 36}), Some(UnquotedKey)),
        ("{first_name: 'A', $id: 1, x-y: 2}", json!({"first_name": "A", "$id": 1, "x-y": 2}), Some(UnquotedKey)),
        ("{nested: {deep: [1]}}", json!({"nested": {"deep": [1]}}), Some(UnquotedKey)),
        // Python literals.
        ("{\"ok\": True, \"err\": None}", json!({"ok": true, "err": null}), Some(PythonLiteral)),
        ("[False, True, None]", json!([false, true, null]), Some(PythonLiteral)),
        ("{'a': True, 'b': [None]}", json!({"a": true, "b": [null]}), Some(PythonLiteral)),
        // Comments.
        ("{\n  // the name\n  \"name\": \"Ada\"\n}", json!({"name": "Ada"}), Some(Comment)),
        ("{\"a\": 1, /* inline */ \"b\": 2}", json!({"a": 1, "b": 2}), Some(Comment)),
        ("[1, 2] // done", json!([1, 2]), Some(Comment)),
        ("{\n  # python style\n  \"a\": 1\n}", json!({"a": 1}), Some(Comment)),
        ("{\"url\": \"http://x.org/a#b\"}", json!({"url": "http://x.org/a#b"}), None),
        // Raw control characters and bad escapes inside strings.
        ("{\"text\": \"line1\nline2\"}", json!({"text": "line1\nline2"}), Some(ControlCharacter)),
        ("{\"t\": \"a\tb\"}", json!({"t": "a\tb"}), Some(ControlCharacter)),
        ("{\"path\": \"C:\\Users\\x\"}", json!({"path": "C:\\Users\\x"}), Some(InvalidEscape)),
        ("{\"e\": \"\\ud83d\\ude00\"}", json!({"e": "😀"}), None),
        // Missing commas and number notation.
        ("{\"a\": 1 \"b\": 2}", json!({"a": 1, "b": 2}), Some(MissingComma)),
        ("[1 2 3]", json!([1, 2, 3]), Some(MissingComma)),
        ("{\"a\": +1, \"b\": .5, \"c\": 2.}", json!({"a": 1, "b": 0.5, "c": 2}), Some(NumberFormat)),
        ("{\"n\": -.25}", json!({"n": -0.25}), Some(NumberFormat)),
        // Output cut off by max_tokens.
        // A cut value is never passed off as complete: "Mathematici" may have been
        // "Mathematician", 3 may have been 35.
        ("{\"name\": \"Ada\", \"bio\": \"Mathematici", json!({"name": "Ada"}), Some(UnclosedString)),
        ("{\"a\": [1, 2, {\"b\": 3", json!({"a": [1, 2, {}]}), Some(IncompleteMember)),
        ("{\"a\": [1, 2, {\"b\": 3}", json!({"a": [1, 2, {"b": 3}]}), Some(UnclosedContainer)),
        ("{\"name\": \"Ada\", \"age\": 3", json!({"name": "Ada"}), Some(IncompleteMember)),
        ("[1, 2, 3", json!([1, 2]), Some(IncompleteMember)),
        ("[1, 2, 3 ", json!([1, 2, 3]), Some(UnclosedContainer)),
        ("{\"a\": 1, \"ok\": true", json!({"a": 1, "ok": true}), Some(UnclosedContainer)),
        ("{\"a\": 1, \"b\": tr", json!({"a": 1}), Some(IncompleteMember)),
        ("{\"a\": 1, \"b\":", json!({"a": 1}), Some(IncompleteMember)),
        ("{\"a\": 1, \"b", json!({"a": 1}), Some(IncompleteMember)),
        ("[1, 2, ", json!([1, 2]), Some(UnclosedContainer)),
        ("[\"x\", \"y", json!(["x"]), Some(UnclosedString)),
        ("{\"items\": [{\"id\": 1}, {\"id\": 2}, {\"id\"", json!({"items": [{"id": 1}, {"id": 2}, {}]}), Some(IncompleteMember)),
        // Several at once.
        (
            "Sure, here you go:\n```json\n{\n  name: 'Ada', // who\n  active: True,\n  tags: ['math', 'code',],\n}\n```",
            json!({"name": "Ada", "active": true, "tags": ["math", "code"]}),
            Some(UnquotedKey),
        ),
        ("```json\n{'a': None, 'b': [1, 2,\n", json!({"a": null, "b": [1, 2]}), Some(UnclosedContainer)),
        // Already valid JSON: untouched, no fixes.
        ("{\"a\": [1, 2.5, \"x\", null, false]}", json!({"a": [1, 2.5, "x", null, false]}), None),
        ("\"just a string\"", json!("just a string"), None),
        ("42", json!(42), None),
    ]
}

#[test]
fn repairs_the_corpus() {
    let cases = corpus();
    assert!(cases.len() >= 40, "the corpus has {} cases", cases.len());
    for (input, want, fix) in cases {
        let (got, repairs) = repair_json(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(got, want, "{input:?}");
        match fix {
            Some(f) => assert!(repairs.contains(&f), "{input:?}: {repairs:?} lacks {f:?}"),
            None => assert!(
                repairs.is_empty() || input.trim() != input,
                "{input:?}: unexpected fixes {repairs:?}"
            ),
        }
        // Plain JSON needs no fixes.
        if serde_json::from_str::<Value>(input).is_ok() {
            assert!(repairs.is_empty(), "{input:?}: {repairs:?}");
        }
    }
}

#[test]
fn unrepairable_output_is_an_error() {
    for input in [
        "",
        "I cannot answer that.",
        "{\"a\" 1}",
        "{\"a\": NaN}",
        "{\"a\": undefined}",
        "<html></html>",
    ] {
        assert!(
            matches!(repair_json(input), Err(RepairError::NoJson { .. })),
            "{input:?}: {:?}",
            repair_json(input)
        );
    }
    let deep = "[".repeat(10_000);
    assert!(matches!(
        repair_json(&deep),
        Err(RepairError::TooDeep { .. })
    ));
}

fn person() -> JsonSchema {
    JsonSchema::from_str(
        r#"{"type": "object", "properties": {"name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0}}, "required": ["name", "age"],
            "additionalProperties": false}"#,
    )
    .unwrap()
}

#[test]
fn validation_names_the_failing_pointer() {
    let s = person();
    assert!(s.validate(&json!({"name": "Ada", "age": 36})).is_ok());
    let e = s.validate(&json!({"name": "Ada", "age": -1})).unwrap_err();
    assert_eq!(e.violations[0].instance_pointer, "/age");
    assert_eq!(e.violations[0].schema_pointer, "/properties/age/minimum");
    assert!(e.to_string().contains("/age"), "{e}");
    let e = s.validate(&json!({"name": 1})).unwrap_err();
    let ptrs: Vec<&str> = e
        .violations
        .iter()
        .map(|v| v.instance_pointer.as_str())
        .collect();
    assert!(ptrs.contains(&"/name") && ptrs.contains(&""), "{ptrs:?}");
    // Malformed schemas.
    assert!(matches!(
        JsonSchema::from_str("{\"type\": "),
        Err(ruvllm_runtime::JsonSchemaError::NotJson { .. })
    ));
    match JsonSchema::from_str(r#"{"properties": {"a": {"type": "strng"}}}"#) {
        Err(ruvllm_runtime::JsonSchemaError::Invalid { pointer, .. }) => {
            assert!(pointer.contains("/properties/a"), "{pointer}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn validator_modes() {
    let strict = JsonValidator::new(Some(person()), true, false);
    let repair = JsonValidator::new(Some(person()), true, true);
    let lenient = JsonValidator::new(Some(person()), false, false);
    let good = "{\"name\": \"Ada\", \"age\": 36}";
    let fixable = "```json\n{name: 'Ada', age: 36,}\n```";
    let invalid = "{'name': 'Ada', 'age': -5}";
    // Valid output passes every mode untouched.
    for v in [&strict, &repair, &lenient] {
        let r = v.validate(good).unwrap();
        assert_eq!(r.status, ValidationStatus::Valid);
        assert_eq!(r.text, good);
    }
    // Strict refuses what repair fixes.
    assert!(matches!(
        strict.validate(fixable),
        Err(JsonError::Syntax { .. })
    ));
    let r = repair.validate(fixable).unwrap();
    assert_eq!(r.status, ValidationStatus::Repaired);
    assert_eq!(r.value, Some(json!({"name": "Ada", "age": 36})));
    assert_eq!(
        serde_json::from_str::<Value>(&r.text).unwrap(),
        json!({"name": "Ada", "age": 36})
    );
    assert!(r.repairs.contains(&Repair::CodeFence));
    // Repair never returns something that does not validate.
    match repair.validate(invalid) {
        Err(JsonError::Schema(e)) => assert_eq!(e.violations[0].instance_pointer, "/age"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        repair.validate("no json here"),
        Err(JsonError::Repair(_))
    ));
    // Lenient mode hands back unchecked output, marked as such.
    let r = lenient.validate(invalid).unwrap();
    assert_eq!(r.status, ValidationStatus::Unchecked);
    // Every repaired corpus output that validates under a permissive schema comes back.
    let any = JsonValidator::new(Some(JsonSchema::from_str("{}").unwrap()), true, true);
    for (input, want, _) in corpus() {
        let r = any
            .validate(input)
            .unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(r.value, Some(want));
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Weather {
    city: String,
    celsius: f64,
    conditions: Vec<String>,
}

#[test]
fn schema_from_a_rust_type() {
    let s = JsonSchema::from_type::<Weather>();
    assert!(s.is_valid(&json!({"city": "Paris", "celsius": 21.5, "conditions": ["sunny"]})));
    assert!(!s.is_valid(&json!({"city": "Paris", "celsius": "warm", "conditions": []})));
    assert!(!s.is_valid(&json!({"city": "Paris"})));
}

fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(("\\PC{0,8}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    /// Valid JSON, compact or pretty, reads back as itself with no fixes.
    #[test]
    fn plain_json_is_untouched(v in arb_json(), pretty in proptest::bool::ANY) {
        let text = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { v.to_string() };
        let (got, repairs) = repair_json(&text).unwrap();
        proptest::prop_assert_eq!(got, v);
        proptest::prop_assert!(repairs.is_empty());
    }

    /// Any prefix of valid JSON (output cut off anywhere) repairs to a JSON value or a
    /// clean error, and arbitrary text never panics.
    #[test]
    fn truncation_and_garbage_never_panic(v in arb_json(), cut in 0usize..400, junk in "\\PC{0,64}") {
        let text = v.to_string();
        let mut end = cut.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if let Ok((r, _)) = repair_json(&text[..end]) {
            serde_json::to_string(&r).unwrap();
        }
        let _ = repair_json(&junk);
    }
}

/// Crash reproducers from `cargo fuzz run repair` (fuzz/): whatever repair returns must
/// serialize and read back with serde_json's default limits.
#[test]
fn fuzz_regressions_read_back() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("repair-")
        {
            continue;
        }
        n += 1;
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        match repair_json(&text) {
            Ok((v, _)) => {
                let s = serde_json::to_string(&v).unwrap();
                let back: Value = serde_json::from_str(&s).unwrap_or_else(|e| {
                    panic!(
                        "{}: repaired output does not read back: {e}",
                        path.display()
                    )
                });
                assert_eq!(back, v);
            }
            Err(e) => assert!(
                matches!(e, RepairError::TooDeep { .. }),
                "{}: {e}",
                path.display()
            ),
        }
    }
    assert!(n >= 1, "no reproducers in {}", dir.display());
    // Nesting right at the limit still reads back; one more level is refused.
    let deep = |d: usize| format!("{}1{}", "[".repeat(d), "]".repeat(d));
    let (v, _) = repair_json(&deep(ruvllm_runtime::json::MAX_DEPTH)).unwrap();
    let _: Value = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
    assert!(matches!(
        repair_json(&deep(ruvllm_runtime::json::MAX_DEPTH + 2)),
        Err(RepairError::TooDeep { .. })
    ));
}
