//! Numbers against exact decimal arithmetic: random schemas (`integer`/`number` with
//! bounds, exclusive bounds and `multipleOf`, `const` and `enum` values), random instances
//! in every JSON spelling (plain, trailing zeros, exponents, `-0`), and each verdict
//! compared with one computed on big rationals, independently of the engine's decimals.

mod common;

use std::sync::Arc;

use num_bigint::BigInt;
use ruvllm_engine::schema::{schema_to_grammar, SchemaError, SchemaOptions, Whitespace};
use ruvllm_engine::{CheckResult, Constraint, Limits, Matcher, Vocabulary};
use serde_json::{json, Value};

/// `n / 10^k` as a rational with a power-of-ten denominator.
#[derive(Clone, Debug)]
struct Q {
    n: BigInt,
    k: u32,
}

impl Q {
    fn parse(text: &str) -> Q {
        let (mant, exp) = match text.find(['e', 'E']) {
            Some(i) => (&text[..i], text[i + 1..].parse::<i64>().unwrap()),
            None => (text, 0),
        };
        let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
        let n: BigInt = format!("{int}{frac}").parse().unwrap();
        let scale = frac.len() as i64 - exp;
        if scale >= 0 {
            Q { n, k: scale as u32 }
        } else {
            Q {
                n: n * BigInt::from(10).pow((-scale) as u32),
                k: 0,
            }
        }
    }

    /// Both over the same denominator.
    fn common(&self, o: &Q) -> (BigInt, BigInt) {
        let k = self.k.max(o.k);
        (
            &self.n * BigInt::from(10).pow(k - self.k),
            &o.n * BigInt::from(10).pow(k - o.k),
        )
    }

    fn cmp(&self, o: &Q) -> std::cmp::Ordering {
        let (a, b) = self.common(o);
        a.cmp(&b)
    }

    fn divisible_by(&self, o: &Q) -> bool {
        let (a, b) = self.common(o);
        &a % &b == BigInt::from(0)
    }

    fn is_integer(&self) -> bool {
        &self.n % BigInt::from(10).pow(self.k) == BigInt::from(0)
    }
}

fn dummy_vocab() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::new("none", vec![b"\0".to_vec()], vec![true], vec![]).unwrap())
}

/// Random spellings of a random value: digits around the interesting magnitudes.
fn spellings(rng: &mut common::Rng) -> Vec<String> {
    let digits: String = (0..1 + rng.below(22))
        .map(|_| (b'0' + rng.below(10) as u8) as char)
        .collect();
    let digits = digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let neg = if rng.below(3) == 0 { "-" } else { "" };
    let point = rng.below(digits.len() + 1);
    let (i, f) = digits.split_at(digits.len() - point);
    let i = if i.is_empty() { "0" } else { i };
    let mut out = vec![format!("{neg}{digits}")];
    if !f.is_empty() {
        out.push(format!("{neg}{i}.{f}"));
        out.push(format!("{neg}{i}.{f}000"));
    } else {
        out.push(format!("{neg}{i}.0"));
    }
    out.push(format!("{neg}{digits}e-{point}"));
    out.push(format!("{neg}{digits}E+{}", rng.below(3)));
    let first = &digits[..1];
    let rest = &digits[1..];
    let e = digits.len() as i64 - 1 - point as i64;
    if rest.is_empty() {
        out.push(format!("{neg}{first}e{e}"));
    } else {
        out.push(format!("{neg}{first}.{rest}e{e}"));
    }
    out
}

/// A random exact schema number: an integer (often beyond 2^53) or a short decimal.
fn schema_number(rng: &mut common::Rng) -> Value {
    match rng.below(4) {
        0 => json!(9007199254740990i64 + rng.below(8) as i64 - 4),
        1 => json!(-(9007199254740990i64 + rng.below(8) as i64)),
        2 => json!(rng.below(200) as i64 - 100),
        _ => {
            let text = format!("{}.{}", rng.below(20) as i64 - 10, rng.below(100));
            serde_json::from_str(&text).unwrap()
        }
    }
}

fn verdict(schema: &Value, text: &str) -> bool {
    let x = Q::parse(text);
    let m = schema.as_object().unwrap();
    let q = |k: &str| m.get(k).map(|v| Q::parse(&v.to_string()));
    if m.get("type") == Some(&json!("integer")) && !x.is_integer() {
        return false;
    }
    use std::cmp::Ordering::*;
    q("minimum").is_none_or(|l| x.cmp(&l) != Less)
        && q("maximum").is_none_or(|h| x.cmp(&h) != Greater)
        && q("exclusiveMinimum").is_none_or(|l| x.cmp(&l) == Greater)
        && q("exclusiveMaximum").is_none_or(|h| x.cmp(&h) == Less)
        && q("multipleOf").is_none_or(|d| x.divisible_by(&d))
        && m.get("const")
            .is_none_or(|c| x.cmp(&Q::parse(&c.to_string())) == Equal)
        && m.get("enum").is_none_or(|e| {
            e.as_array()
                .unwrap()
                .iter()
                .any(|c| x.cmp(&Q::parse(&c.to_string())) == Equal)
        })
}

#[test]
fn numbers_are_judged_on_their_exact_values() {
    let mut rng = common::Rng(0x5eed_0052);
    let opts = SchemaOptions {
        whitespace: Whitespace::Compact,
        ..Default::default()
    };
    let (mut checked, mut valid) = (0, 0);
    for round in 0..160 {
        let mut m = serde_json::Map::new();
        m.insert(
            "type".into(),
            json!(if rng.below(2) == 0 {
                "integer"
            } else {
                "number"
            }),
        );
        for k in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
            if rng.below(3) == 0 {
                m.insert(k.into(), schema_number(&mut rng));
            }
        }
        if rng.below(4) == 0 {
            m.insert(
                "multipleOf".into(),
                [json!(0.01), json!(0.5), json!(3), json!(1e-8), json!(7.5)][rng.below(5)].clone(),
            );
        }
        let mut instances: Vec<String> = (0..6).flat_map(|_| spellings(&mut rng)).collect();
        if round % 5 == 0 {
            let v = schema_number(&mut rng);
            instances.extend(spellings(&mut rng));
            instances.push(v.to_string());
            m.insert("const".into(), v);
        } else if round % 7 == 0 {
            let e = vec![schema_number(&mut rng), schema_number(&mut rng)];
            instances.extend(e.iter().map(|v| v.to_string()));
            m.insert("enum".into(), json!(e));
        }
        let schema = Value::Object(m);
        let g = match schema_to_grammar(&schema, &opts) {
            Ok(g) => g,
            Err(SchemaError::Unsatisfiable { .. }) => {
                // Refused as admitting no value: then no instance may be valid.
                for text in &instances {
                    assert!(!verdict(&schema, text), "{schema} admits {text}");
                }
                continue;
            }
            Err(e) => panic!("{schema}: {e}"),
        };
        let c = Constraint::new(&g, dummy_vocab(), &Limits::default()).unwrap();
        for text in &instances {
            let mut mt = Matcher::new(&c).unwrap();
            let got = mt.check_bytes(text.as_bytes()).unwrap() == CheckResult::Accepted;
            let want = verdict(&schema, text);
            assert_eq!(got, want, "{schema} on {text}");
            checked += 1;
            valid += want as usize;
        }
    }
    eprintln!("{checked} instances, {valid} valid");
    assert!(
        valid > 100,
        "too few valid instances to mean anything: {valid}"
    );
}

#[test]
fn the_issues_numbers() {
    let opts = SchemaOptions::default();
    for (schema, good, bad) in [
        (
            json!({"minimum": 9007199254740993u64}),
            vec!["9007199254740993", "1e+30"],
            vec!["9007199254740992"],
        ),
        (
            json!({"maximum": -9007199254740993i64}),
            vec!["-9007199254740993"],
            vec!["-9007199254740992"],
        ),
        (
            json!({"type": "integer", "minimum": 5}),
            vec!["1e+30", "5.0", "50e-1"],
            vec!["4.99e0", "4"],
        ),
        (
            json!({"exclusiveMinimum": 0}),
            vec!["1e-09", "1E-400"],
            vec!["0", "-0.0", "0e5"],
        ),
        (
            json!({"const": 0}),
            vec!["0", "-0", "-0.0", "0.000", "0e10"],
            vec!["1", "0.1"],
        ),
        (
            json!({"const": 100}),
            vec!["100", "100.0", "1e2", "1000e-1"],
            vec!["100.5", "10"],
        ),
        (
            json!({"enum": [1.5, 2]}),
            vec!["1.50", "15e-1", "2.0", "2"],
            vec!["1.05", "1"],
        ),
        (
            json!({"multipleOf": 0.0001}),
            vec!["0.0075", "12", "1e-4"],
            vec!["0.00751", "1e-5"],
        ),
    ] {
        let g = schema_to_grammar(&schema, &opts).unwrap();
        let c = Constraint::new(&g, dummy_vocab(), &Limits::default()).unwrap();
        for (texts, want) in [(good, true), (bad, false)] {
            for t in texts {
                let mut mt = Matcher::new(&c).unwrap();
                let got = mt.check_bytes(t.as_bytes()).unwrap() == CheckResult::Accepted;
                assert_eq!(got, want, "{schema} on {t}");
            }
        }
    }
}
