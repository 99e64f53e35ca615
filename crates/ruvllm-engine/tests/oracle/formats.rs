//! `format` and `pattern` against their definitions: every format the validator asserts,
//! on the JSON Schema Test Suite's format tests, on the cases of the RFCs that a
//! conservative subset used to refuse, and on random walks through the masks whose
//! completed strings must validate; ECMA-262 regex semantics in patterns.

use crate::common;

use std::sync::Arc;

use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions, Whitespace};
use ruvllm_engine::{CheckResult, Constraint, Limits, Matcher, Vocabulary};
use serde_json::{json, Value};

fn dummy_vocab() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::new("none", vec![b"\0".to_vec()], vec![true], vec![]).unwrap())
}

fn compile(schema: &Value, vocab: Arc<Vocabulary>) -> Arc<Constraint> {
    let opts = SchemaOptions {
        whitespace: Whitespace::Compact,
        ..Default::default()
    };
    let g = schema_to_grammar(schema, &opts).unwrap_or_else(|e| panic!("{schema}: {e}"));
    Constraint::new(&g, vocab, &Limits::default()).unwrap()
}

fn accepts(c: &Arc<Constraint>, text: &str) -> bool {
    Matcher::new(c)
        .unwrap()
        .check_bytes(text.as_bytes())
        .unwrap()
        == CheckResult::Accepted
}

const FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Every test of the suite's `optional/format/` folder (draft 2020-12) judged right.
#[test]
fn the_suites_format_tests() {
    let dir =
        common::shared_data().join("json-schema-test-suite/tests/draft2020-12/optional/format");
    let (mut n, mut files) = (0, 0);
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let groups: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        files += 1;
        for g in groups.as_array().unwrap() {
            let c = compile(&g["schema"], dummy_vocab());
            for t in g["tests"].as_array().unwrap() {
                let text = serde_json::to_string(&t["data"]).unwrap();
                let want = t["valid"].as_bool().unwrap();
                assert_eq!(accepts(&c, &text), want, "{}: {text}", p.display());
                n += 1;
            }
        }
    }
    assert!(files >= 20 && n > 500, "{files} files, {n} tests");
}

#[test]
fn what_the_subsets_refused() {
    for (f, good, bad) in [
        (
            "ipv6",
            vec![
                "::FFFF:192.168.0.1",
                "1:2::192.168.0.1",
                "FE80::1",
                "::",
                "1::",
            ],
            vec!["::ffff:256.1.1.1", "1:2:3:4:5:6:7:8:9", "fe80::1%eth0"],
        ),
        (
            "hostname",
            vec![
                "xn--bcher-kva.example",
                "a.b.c.d.e.f.g.h.example.com",
                "a--b.com",
            ],
            vec!["xn--X", "-a.com", "example."],
        ),
        (
            "uri",
            vec![
                "http://[::1]:8080/health",
                "http://[v1.fe]/",
                "ldap://[2001:db8::7]/c=GB?objectClass?one",
            ],
            vec!["http://[::1/", "//no-scheme"],
        ),
        (
            "email",
            vec![
                "\"joe bloggs\"@example.com",
                "joe@[127.0.0.1]",
                "joe@[IPv6:::1]",
            ],
            vec!["joe..b@example.com", "joe@[127.0.0.300]"],
        ),
        (
            "idn-hostname",
            vec!["bücher.example", "실례.테스트"],
            vec!["-bücher.example", "a..b"],
        ),
        (
            "date-time",
            vec!["1998-12-31T23:59:60Z", "1998-12-31T15:59:60.123-08:00"],
            vec!["1998-12-31T22:59:60Z"],
        ),
        (
            "iri",
            vec!["http://ƒøø.ßår/?∂éœ=πîx#πîüx", "http://[2001:db8::1]"],
            vec!["http://exa mple.com"],
        ),
    ] {
        let c = compile(&json!({"format": f}), dummy_vocab());
        for (texts, want) in [(good, true), (bad, false)] {
            for t in texts {
                let text = serde_json::to_string(t).unwrap();
                assert_eq!(accepts(&c, &text), want, "{f}: {t}");
            }
        }
    }
}

/// Patterns read as ECMA-262 reads them, also where a check (not the grammar) decides.
#[test]
fn patterns_mean_what_ecmascript_says() {
    for (p, good, bad) in [
        (
            r"\bcat\b",
            vec!["écat", "a cat", "cat"],
            vec!["cats", "concat"],
        ),
        (r"\Bcat", vec!["xcat"], vec!["écat", "cat"]),
        (
            r"^a.b$",
            vec!["a b", "aéb"],
            vec!["a\nb", "a\u{2028}b", "a\rb"],
        ),
        (
            r"^\s$",
            vec![" ", "\u{feff}", "\u{a0}"],
            vec!["\u{85}", "x"],
        ),
        (r"^\w+$", vec!["abc_1"], vec!["é", "ab-c"]),
        (r"^\d$", vec!["7"], vec!["٣"]),
        (r"^(a)\1$", vec!["aa"], vec!["ab"]),
        (r"^(?=.*x).{2}$", vec!["ax", "xa"], vec!["ab"]),
        // A `]` that closes no class is itself (Annex B), in a checked pattern too.
        (r"^\[a]:(1)\1$", vec!["[a]:11"], vec!["[a:11", "a]:11"]),
        // `\cX` is the control character X mod 32, in a class too.
        (r"^\cC$", vec!["\u{3}"], vec!["\\cC", "C", "cC"]),
        (r"^[\ca-\cz]+$", vec!["\u{1}\u{1a}"], vec!["a", "\u{1b}"]),
    ] {
        let c = compile(&json!({"type": "string", "pattern": p}), dummy_vocab());
        for (texts, want) in [(good, true), (bad, false)] {
            for t in texts {
                let text = serde_json::to_string(t).unwrap();
                assert_eq!(accepts(&c, &text), want, "{p} on {t:?}");
            }
        }
    }
}

/// Random walks through the masks of each format (tokens: printable ASCII and a few
/// characters beyond it): every string a walk completes validates.
#[test]
fn every_string_the_grammar_completes_validates() {
    let vocab = common::walk_vocab(&[
        "é", "ß", "실", "례", "ƒ", "\u{3002}", "::", "xn--", "ff", ".com", "12", "T", "Z",
    ]);
    let mut rng = common::Rng(0x0f01_23a7);
    let mut completed = 0;
    for f in FORMATS {
        let schema = json!({"type": "string", "format": f});
        let oracle = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .unwrap();
        let c = compile(&schema, vocab.clone());
        for _ in 0..40 {
            if let Some(text) = common::random_walk(&c, &mut rng, 60) {
                let v: Value = serde_json::from_slice(&text).unwrap();
                assert!(oracle.is_valid(&v), "{f}: the grammar completed {v}");
                completed += 1;
            }
        }
    }
    assert!(completed > 200, "only {completed} walks completed");
}
