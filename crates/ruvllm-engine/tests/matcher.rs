//! The matcher API: commit, rollback, fork, forced text and tokens, EOS, mask sizing.

mod common;

use std::sync::Arc;

use ruvllm_engine::{Builtin, Constraint, Grammar, Limits, MatchError, Matcher};

fn gbnf(text: &str) -> Arc<Constraint> {
    Constraint::from_gbnf(text, common::llama3(), &Limits::default()).unwrap()
}

fn allowed(m: &mut Matcher) -> Vec<u32> {
    let v = m.constraint().vocab().clone();
    let mut mask = vec![0u32; v.mask_words()];
    m.compute_mask(&mut mask).unwrap();
    (0..v.len() as u32)
        .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
        .collect()
}

/// The constraint of a JSON Schema (default options) over Llama 3.1.
fn schema(schema: serde_json::Value) -> Arc<Constraint> {
    use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
    let g = schema_to_grammar(&schema, &SchemaOptions::default()).unwrap();
    Constraint::new(&g, common::llama3(), &Limits::default()).unwrap()
}

/// Whether token `t` is allowed in `mask`.
fn bit(mask: &[u32], t: u32) -> bool {
    mask[(t >> 5) as usize] >> (t & 31) & 1 == 1
}

fn ids(text: &str) -> Vec<u32> {
    common::llama3().encoder().unwrap().encode(text).unwrap()
}

#[test]
fn commit_rollback_and_fork() {
    let c = Constraint::new(
        &Grammar::builtin(Builtin::Json, &Limits::default()).unwrap(),
        common::llama3(),
        &Limits::default(),
    )
    .unwrap();
    let mut m = Matcher::new(&c).unwrap();
    let toks = ids(r#"{"a": [1, 2], "b": "x"}"#);
    let mut snapshots = Vec::new();
    for &t in &toks {
        snapshots.push(allowed(&mut m));
        m.commit_token(t).unwrap();
    }
    assert!(m.is_accepting());
    let fork = m.clone();
    // Roll back step by step: masks are the same as on the way in.
    for i in (0..toks.len()).rev() {
        m.rollback(1).unwrap();
        assert_eq!(
            allowed(&mut m),
            snapshots[i],
            "mask after rollback to token {i}"
        );
    }
    assert_eq!(m.num_tokens(), 0);
    assert!(matches!(m.rollback(1), Err(MatchError::Rollback { .. })));
    // The fork was not affected.
    let mut fork = fork;
    assert!(fork.is_accepting());
    assert_eq!(fork.position(), r#"{"a": [1, 2], "b": "x"}"#.len());
    // Speculative decoding style: commit several, roll back several.
    m.commit_token(toks[0]).unwrap();
    m.commit_token(toks[1]).unwrap();
    m.commit_token(toks[2]).unwrap();
    m.rollback(2).unwrap();
    assert_eq!(allowed(&mut m), snapshots[1]);
}

#[test]
fn rejected_token_leaves_state_unchanged() {
    let c = gbnf(r#"root ::= "hello" " world"?"#);
    let mut m = Matcher::new(&c).unwrap();
    let before = allowed(&mut m);
    let bad = ids("goodbye")[0];
    assert!(matches!(
        m.commit_token(bad),
        Err(MatchError::TokenRejected { position: 0, .. })
    ));
    assert_eq!(allowed(&mut m), before);
    assert!(matches!(
        m.commit_token(u32::MAX),
        Err(MatchError::UnknownToken(_))
    ));
    for t in ids("hello") {
        m.commit_token(t).unwrap();
    }
    assert!(m.is_accepting());
    let eos = common::llama3().eos_tokens()[0];
    m.commit_token(eos).unwrap();
    assert!(m.is_finished());
    assert!(allowed(&mut m).is_empty());
    assert!(matches!(m.commit_token(eos), Err(MatchError::Finished)));
    m.rollback(1).unwrap();
    assert!(m.is_accepting());
    // " world" is still possible.
    assert!(allowed(&mut m).contains(&ids(" world")[0]));
}

#[test]
fn eos_exactly_when_complete() {
    let c = gbnf(r#"root ::= "a" ("b" "c")*"#);
    let v = common::llama3();
    let mut m = Matcher::new(&c).unwrap();
    let eos = v.eos_tokens().to_vec();
    let has_eos = |a: &[u32]| eos.iter().any(|e| a.contains(e));
    assert!(!has_eos(&allowed(&mut m)));
    m.commit_token(v.token_id(b"a").unwrap()).unwrap();
    assert!(has_eos(&allowed(&mut m)));
    m.commit_token(v.token_id(b"b").unwrap()).unwrap();
    assert!(!has_eos(&allowed(&mut m)));
    m.commit_token(v.token_id(b"c").unwrap()).unwrap();
    assert!(has_eos(&allowed(&mut m)));
}

#[test]
fn mask_sizing() {
    let c = gbnf(r#"root ::= "x""#);
    let mut m = Matcher::new(&c).unwrap();
    let need = common::llama3().mask_words();
    let mut small = vec![0u32; need - 1];
    assert!(matches!(
        m.compute_mask(&mut small),
        Err(MatchError::MaskTooSmall { .. })
    ));
    // Padded to a model's logits size: extra bits are cleared.
    let mut big = vec![u32::MAX; need + 100];
    m.compute_mask(&mut big).unwrap();
    assert!(big[need..].iter().all(|&w| w == 0));
    assert_eq!(big.iter().map(|w| w.count_ones()).sum::<u32>(), 1);
}

#[test]
fn forced_bytes_and_tokens() {
    let c = gbnf(r#"root ::= "{\"name\": \"" [a-z]+ "\", \"age\": " [0-9]+ "}""#);
    let v = common::llama3();
    let mut m = Matcher::new(&c).unwrap();
    assert_eq!(m.forced_bytes().unwrap(), br#"{"name": ""#);
    let forced = m.forced_tokens().unwrap();
    let text: Vec<u8> = forced
        .iter()
        .flat_map(|&t| v.token_bytes(t).to_vec())
        .collect();
    // Safe tokens are a prefix of the forced text, and the last forced byte (the quote,
    // which a longer token such as `"ab` could span) is left to the model.
    assert!(
        br#"{"name": ""#.starts_with(&text),
        "{:?}",
        String::from_utf8_lossy(&text)
    );
    assert!(!text.is_empty() && text.len() < br#"{"name": ""#.len());
    for t in forced {
        m.commit_token(t).unwrap();
    }
    // Whatever was left of the forced text, then the name.
    let rest = String::from_utf8(br#"{"name": ""#[text.len()..].to_vec()).unwrap();
    for t in ids(&format!("{rest}bob")) {
        m.commit_token(t).unwrap();
    }
    assert!(
        m.forced_bytes().unwrap().is_empty(),
        "more letters or the quote: a choice"
    );
    m.commit_token(v.token_id(b"\"").unwrap()).unwrap();
    assert_eq!(m.forced_bytes().unwrap(), br#", "age": "#);
    // Forced bytes do not change the state.
    assert_eq!(m.position(), r#"{"name": "bob""#.len());
    // When complete, nothing is forced.
    let c2 = gbnf(r#"root ::= "a" "b"?"#);
    let mut m2 = Matcher::new(&c2).unwrap();
    m2.commit_token(v.token_id(b"a").unwrap()).unwrap();
    assert!(m2.forced_bytes().unwrap().is_empty());
}

#[test]
fn regex_and_choice_constraints() {
    let v = common::llama3();
    let limits = Limits::default();
    let re = Constraint::new(
        &Grammar::from_regex(r"^\d{3}-[A-Z]{2}$", &limits).unwrap(),
        v.clone(),
        &limits,
    )
    .unwrap();
    let mut m = Matcher::new(&re).unwrap();
    for t in ids("123-AB") {
        assert!(allowed(&mut m).contains(&t));
        m.commit_token(t).unwrap();
    }
    assert!(m.is_accepting());
    let mut m = Matcher::new(&re).unwrap();
    assert!(m.commit_token(ids("12a")[0]).is_err() || m.commit_token(ids("a")[0]).is_err());

    let ch = Constraint::new(
        &Grammar::from_choices(&["red", "green", "blue"]).unwrap(),
        v.clone(),
        &limits,
    )
    .unwrap();
    let mut m = Matcher::new(&ch).unwrap();
    let a = allowed(&mut m);
    for w in ["red", "green", "blue", "r", "gre", "bl"] {
        assert!(a.contains(&v.token_id(w.as_bytes()).unwrap()), "{w}");
    }
    assert!(!a.contains(&v.token_id(b"redd").unwrap_or(u32::MAX)));
    assert!(!a.contains(&v.token_id(b"yellow").unwrap()));
    assert!(Grammar::from_choices::<&str>(&[]).is_err());
}

/// A limits value whose mask-time budget is spent before the first look at the clock.
fn no_mask_time() -> Limits {
    Limits {
        max_mask_time: std::time::Duration::ZERO,
        ..Limits::default()
    }
}

/// Limits with a mask-time budget no machine reaches in these tests.
fn ample_mask_time() -> Limits {
    Limits {
        max_mask_time: std::time::Duration::from_secs(600),
        ..Limits::default()
    }
}

#[test]
fn mask_time_budget_stops_first_use_tables() {
    // 30 distinct lexemes alive at the start, each needing its own trie walk (a grammar
    // like this with 10,000 of them took 22 s for its first mask before the budget).
    let mut g = String::from("root ::= ");
    g.push_str(
        &(0..30)
            .map(|i| format!("r{i}"))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    for i in 0..30 {
        g.push_str(&format!("\nr{i} ::= [a-z ]* \"{i}\" r{i} | \".\""));
    }
    let tight = Constraint::from_gbnf(&g, common::llama3(), &no_mask_time()).unwrap();
    let mut m = Matcher::new(&tight).unwrap();
    let mut mask = vec![0u32; common::llama3().mask_words()];
    match m.compute_mask(&mut mask) {
        Err(MatchError::MaskTime { limit_ms: 0 }) => {}
        other => panic!("expected the mask-time error, got {other:?}"),
    }
    assert_eq!(m.position(), 0);
    // The matcher still commits, and the same grammar with time to spare masks.
    m.commit_token(ids(".")[0]).unwrap();
    assert!(m.is_accepting());
    let ok = Constraint::from_compiled(
        tight.grammar().clone(),
        common::llama3(),
        &ample_mask_time(),
    );
    let mut m2 = Matcher::new(&ok).unwrap();
    let n = allowed(&mut m2).len();
    assert!(n > 10_000, "{n} tokens allowed");
}

#[test]
fn mask_time_budget_stops_the_boundary_walk_and_restores_the_parser() {
    // An ambiguous grammar: every set holds an item per earlier position, so the parser
    // walk over tokens of a's (which cross lexeme boundaries) does thousands of items.
    const N: usize = 400;
    let text = "root ::= s\ns ::= s s | \"a\" | \"\"";
    let ok = Constraint::from_gbnf(text, common::llama3(), &ample_mask_time()).unwrap();
    let a = ids("a")[0];
    let mut m_ok = Matcher::new(&ok).unwrap();
    for _ in 0..N {
        assert!(allowed(&mut m_ok).contains(&a));
        m_ok.commit_token(a).unwrap();
    }
    let want = allowed(&mut m_ok);
    // Same lexemes, so the same (now built) token tables; only the walk can stop it.
    let tight = Constraint::from_compiled(ok.grammar().clone(), common::llama3(), &no_mask_time());
    let mut m = Matcher::new(&tight).unwrap();
    for _ in 0..N {
        m.commit_token(a).unwrap();
    }
    let mut mask = vec![0u32; common::llama3().mask_words()];
    match m.compute_mask(&mut mask) {
        Err(MatchError::MaskTime { .. }) => {}
        other => panic!("expected the mask-time error, got {other:?}"),
    }
    // The sets the walk had pushed are gone: the matcher is where it was.
    assert_eq!(m.position(), N);
    assert_eq!(m.next_bytes().unwrap(), m_ok.next_bytes().unwrap());
    m.commit_token(a).unwrap();
    m_ok.commit_token(a).unwrap();
    assert_eq!(m.position(), N + 1);
    assert!(want.contains(&a));
}

/// The mask of a fresh matcher after `tokens`, on a fresh constraint over the same compiled
/// grammar: its boundary-walk memo starts empty, and so do the parse-state identities and
/// walk results that a constraint's matchers share.
fn fresh_mask(c: &Arc<Constraint>, tokens: &[u32]) -> Vec<u32> {
    let c = Constraint::from_compiled(c.grammar().clone(), c.vocab().clone(), &Limits::default());
    let mut m = Matcher::new(&c).unwrap();
    for &t in tokens {
        m.commit_token(t).unwrap();
    }
    let mut mask = vec![0u32; common::llama3().mask_words()];
    m.compute_mask(&mut mask).unwrap();
    mask
}

/// Fails naming the first tokens on which two masks differ.
#[track_caller]
fn assert_same(got: &[u32], want: &[u32], what: impl std::fmt::Display) {
    let v = common::llama3();
    let diff: Vec<String> = (0..v.len() as u32)
        .filter(|&t| bit(got, t) != bit(want, t))
        .take(5)
        .map(|t| {
            format!(
                "{:?} (fresh: {})",
                String::from_utf8_lossy(v.token_bytes(t)),
                bit(want, t)
            )
        })
        .collect();
    assert!(diff.is_empty(), "{what}: masks differ on {diff:?}");
}

#[test]
fn boundary_memo_agrees_with_fresh_matchers_across_commits_and_rollbacks() {
    use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
    // Strings followed by structural loops (additional properties allowed: keys in any
    // order, under a semantic check at `}`), a counted string, plain strings, nested
    // arrays, numbers: the walk crosses boundaries after quotes, digits and brackets.
    let schema: serde_json::Value = serde_json::from_str(
        r#"{"type": "object", "properties": {
            "pem": {"type": "string", "maxLength": 300},
            "tags": {"type": "array", "items": {"type": "string"}},
            "n": {"type": "integer"},
            "kids": {"type": "array", "items": {"type": "object",
                "properties": {"id": {"type": "string"}}, "required": ["id"]}}},
           "required": ["pem"]}"#,
    )
    .unwrap();
    let opts = SchemaOptions {
        any_order: true,
        ..SchemaOptions::default()
    };
    let g = schema_to_grammar(&schema, &opts).unwrap();
    assert!(!g.checks.is_empty(), "the any-order key check is exercised");
    let c = Constraint::new(&g, common::llama3(), &Limits::default()).unwrap();
    let a = ids(
        r#"{"pem": "MIIEpAIBAAKCAQEAn1pMVSEDO4EPzQxK", "tags": ["x", "yz"], "n": 1234, "kids": [{"id": "a\"b"}, {"id": "q"}]}"#,
    );
    let b =
        ids(r#"{"kids": [{"id": "k", "extra": [1, {"p": "s"}]}], "pem": "AAAA", "zz": "tail"}"#);
    // Tokens that cross boundaries (structural bytes), probed one by one by commit.
    let v = common::llama3();
    let probes: Vec<u32> = (0..v.len() as u32)
        .filter(|&t| {
            let bytes = v.token_bytes(t);
            !v.is_special(t) && bytes.len() <= 4 && bytes.iter().any(|x| b"\"{}[],:".contains(x))
        })
        .collect();
    assert!(probes.len() > 500, "{} probes", probes.len());
    let mut m = Matcher::new(&c).unwrap();
    let mut mask = vec![0u32; v.mask_words()];
    let mut committed: Vec<u32> = Vec::new();
    let mut checked = 0;
    // Forward through `a` with rollbacks of one and three tokens on the way (recommitting
    // the same tokens), then back to the start and forward through `b`.
    let mut plan: Vec<(usize, u32)> = Vec::new(); // (rollback first, token)
    for (i, &t) in a.iter().enumerate() {
        plan.push((
            if i % 5 == 4 {
                1
            } else if i % 11 == 10 {
                3
            } else {
                0
            },
            t,
        ));
    }
    let mut step = 0;
    let mut run = |m: &mut Matcher, committed: &mut Vec<u32>, plan: &[(usize, u32)]| {
        for &(back, t) in plan {
            if back > 0 && committed.len() >= back {
                m.rollback(back).unwrap();
                let redo: Vec<u32> = committed.split_off(committed.len() - back);
                m.compute_mask(&mut mask).unwrap();
                assert_same(
                    &mask,
                    &fresh_mask(&c, committed),
                    format!("after rolling back {back}"),
                );
                for r in redo {
                    m.commit_token(r).unwrap();
                    committed.push(r);
                }
            }
            m.compute_mask(&mut mask).unwrap();
            let at = format!("after {} tokens", committed.len());
            assert_same(&mask, &fresh_mask(&c, committed), at);
            if step % 3 == 0 {
                let mut probe = m.clone();
                for &p in &probes {
                    let ok = probe.commit_token(p).is_ok();
                    if ok {
                        probe.rollback(1).unwrap();
                    }
                    assert_eq!(
                        bit(&mask, p),
                        ok,
                        "token {:?} after {} tokens",
                        String::from_utf8_lossy(v.token_bytes(p)),
                        committed.len()
                    );
                }
                checked += 1;
            }
            step += 1;
            m.commit_token(t).unwrap();
            committed.push(t);
        }
    };
    run(&mut m, &mut committed, &plan);
    m.rollback(committed.len()).unwrap();
    committed.clear();
    let plan_b: Vec<(usize, u32)> = b.iter().map(|&t| (0, t)).collect();
    run(&mut m, &mut committed, &plan_b);
    assert!(m.is_accepting());
    assert!(checked > 20, "{checked} masks probed token by token");
}

#[test]
fn boundary_memo_is_dropped_when_its_sets_change_and_skips_semantic_checks() {
    use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
    let v = common::llama3();
    let mut mask = vec![0u32; v.mask_words()];
    // The string value starts at byte 4 in both texts, so its parser core is the same, but
    // the set below it expects `]` in one and `}` in the other: a memo kept across the
    // rollback would answer for the wrong container.
    let json = Constraint::new(
        &Grammar::builtin(Builtin::Json, &Limits::default()).unwrap(),
        v.clone(),
        &Limits::default(),
    )
    .unwrap();
    let mut m = Matcher::new(&json).unwrap();
    for (text, other) in [(r#"[1, "ab"#, r#"{"":"ab"#), (r#"{"":"ab"#, r#"[1, "ab"#)] {
        for t in ids(text) {
            m.commit_token(t).unwrap();
        }
        m.compute_mask(&mut mask).unwrap();
        assert_same(&mask, &fresh_mask(&json, &ids(text)), text);
        m.rollback(m.num_tokens()).unwrap();
        for t in ids(other) {
            m.commit_token(t).unwrap();
        }
        m.compute_mask(&mut mask).unwrap();
        assert_same(
            &mask,
            &fresh_mask(&json, &ids(other)),
            format!("{other} after {text}"),
        );
        m.rollback(m.num_tokens()).unwrap();
    }
    // A semantic check reads the text, which the parser's items do not show: inside a
    // string the items repeat from token to token, but whether `"]` may close the array
    // depends on the string (uniqueItems). The checked array sits inside another, so that
    // `"]` goes through the boundary walk (it does not complete the whole value).
    let schema: serde_json::Value = serde_json::from_str(
        r#"{"type": "array", "items":
            {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}"#,
    )
    .unwrap();
    let g = schema_to_grammar(&schema, &SchemaOptions::default()).unwrap();
    assert!(!g.checks.is_empty());
    let c = Constraint::new(&g, v.clone(), &Limits::default()).unwrap();
    let close = ids(r#""]"#);
    assert_eq!(close.len(), 1, "one token closes the string and the array");
    let mut m = Matcher::new(&c).unwrap();
    let mut text = String::from(r#"[["ab", "a"#);
    for t in ids(&text) {
        m.commit_token(t).unwrap();
    }
    for (more, unique) in [("", true), ("b", false), ("c", true)] {
        if !more.is_empty() {
            m.commit_token(ids(more)[0]).unwrap();
            text.push_str(more);
        }
        m.compute_mask(&mut mask).unwrap();
        assert_eq!(bit(&mask, close[0]), unique, "after {text}");
        assert_same(&mask, &fresh_mask(&c, &ids(&text)), format!("after {text}"));
        if more == "b" {
            m.rollback(1).unwrap();
            text.pop();
        }
    }
}

#[test]
fn table_build_totals_count_first_uses() {
    // A constraint's own engine starts empty: its first mask computes at least one table,
    // and a second constraint on the same lexemes shares them.
    let c = gbnf("root ::= \"qzx\" [a-f]{3} \"jkw\"");
    let (n0, t0) = c.engine().table_build_totals();
    assert_eq!((n0, t0), (0, std::time::Duration::ZERO));
    let mut m = Matcher::new(&c).unwrap();
    assert!(!allowed(&mut m).is_empty());
    let (n1, t1) = c.engine().table_build_totals();
    assert!(n1 > n0, "{n0} -> {n1} tables");
    assert!(t1 > t0, "{t0:?} -> {t1:?}");
    let again = c.engine().bind(c.grammar().clone(), &Limits::default());
    assert!(!allowed(&mut Matcher::new(&again).unwrap()).is_empty());
    assert_eq!(
        c.engine().table_build_totals().0,
        n1,
        "the second binding built tables"
    );
}

/// Matchers of one constraint share boundary walks by parse state. Two texts reach the same
/// state inside a string (the items do not show the string), but whether `"]` may close the
/// array depends on it (uniqueItems): the part of the walk that ran the check must be
/// walked again, not taken from the first matcher.
#[test]
fn shared_walks_redo_what_a_semantic_check_decided() {
    use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
    let v = common::llama3();
    let schema: serde_json::Value = serde_json::from_str(
        r#"{"type": "array", "items":
            {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}"#,
    )
    .unwrap();
    let g = schema_to_grammar(&schema, &SchemaOptions::default()).unwrap();
    let c = Constraint::new(&g, v.clone(), &Limits::default()).unwrap();
    // The checked array sits inside another, so `"]` (the check runs as it closes) does not
    // complete the whole value: a token of the boundary walk, not one decided apart.
    let close = ids(r#""]"#);
    assert_eq!(close.len(), 1);
    let mut mask = vec![0u32; v.mask_words()];
    // Each text on a matcher of its own, in turn: later ones meet the states of earlier
    // ones, with the opposite answer for `"]`.
    for (text, unique) in [
        (r#"[["ab", "cd"#, true),
        (r#"[["ab", "ab"#, false),
        (r#"[["xy", "ab"#, true),
        (r#"[["cd", "cd"#, false),
    ] {
        let mut m = Matcher::new(&c).unwrap();
        for t in ids(text) {
            m.commit_token(t).unwrap();
        }
        m.compute_mask(&mut mask).unwrap();
        assert_eq!(bit(&mask, close[0]), unique, "after {text}");
        assert_same(&mask, &fresh_mask(&c, &ids(text)), text);
    }
}

/// Seeded random generations under a schema with checks (keys in any order, uniqueItems),
/// all on one constraint so that later ones reuse the walks of earlier ones: every mask
/// equals a fresh constraint's, and the generations go through states met before.
#[test]
fn shared_walks_agree_with_fresh_constraints_on_random_generations() {
    use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
    let v = common::llama3();
    let schema: serde_json::Value = serde_json::from_str(
        r#"{"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 12},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "cd"]}, "uniqueItems": true},
            "n": {"type": "integer"},
            "kids": {"type": "array", "items": {"type": "object",
                "properties": {"id": {"type": "string"}}, "required": ["id"]}}},
           "required": ["name"]}"#,
    )
    .unwrap();
    let opts = SchemaOptions {
        any_order: true,
        ..SchemaOptions::default()
    };
    let g = schema_to_grammar(&schema, &opts).unwrap();
    let c = Constraint::new(&g, v.clone(), &Limits::default()).unwrap();
    let text = |ts: &[u32]| {
        let bytes: Vec<u8> = ts.iter().flat_map(|&t| v.token_bytes(t).to_vec()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let mut mask = vec![0u32; v.mask_words()];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // Prefer short tokens and structural ones, so generations move through the grammar.
    let mut masks = 0;
    for gen in 0..8 {
        let mut m = Matcher::new(&c).unwrap();
        let mut taken: Vec<u32> = Vec::new();
        for _ in 0..30 {
            m.compute_mask(&mut mask).unwrap();
            assert_same(
                &mask,
                &fresh_mask(&c, &taken),
                format!("generation {gen} after {:?}", text(&taken)),
            );
            masks += 1;
            let allowed: Vec<u32> = (0..v.len() as u32)
                .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
                .filter(|&t| !v.eos_tokens().contains(&t))
                .collect();
            if allowed.is_empty() {
                break;
            }
            let short: Vec<u32> = allowed
                .iter()
                .copied()
                .filter(|&t| v.token_bytes(t).len() <= 3)
                .collect();
            let pool = if short.is_empty() || rand() % 4 == 0 {
                &allowed
            } else {
                &short
            };
            let t = pool[(rand() % pool.len() as u64) as usize];
            m.commit_token(t).unwrap();
            taken.push(t);
        }
    }
    assert!(masks > 150, "{masks} masks compared");
}

/// A rule too heavy to inline whose alternatives are thousands of literals (a big enum)
/// becomes a few lexemes, not one per value, with the same masks as the same language
/// written as a rule of small groups (each group one lexeme of its own).
#[test]
fn many_literal_alternatives_share_lexemes_with_the_same_masks() {
    let v = common::llama3();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut words: Vec<String> = Vec::new();
    while words.len() < 3000 {
        let mut w = String::new();
        let n = 4 + (state % 9) as usize;
        for _ in 0..n {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            w.push((b"abcdeflmnoprstu_"[(state % 16) as usize]) as char);
        }
        if !words.contains(&w) {
            words.push(w);
        }
    }
    let lit = |w: &String| format!("\"\\\"{w}\\\"\"");
    let flat = words.iter().map(lit).collect::<Vec<_>>().join(" | ");
    let grouped: Vec<String> = words
        .chunks(7)
        .enumerate()
        .map(|(i, c)| {
            format!(
                "g{i} ::= {}",
                c.iter().map(lit).collect::<Vec<_>>().join(" | ")
            )
        })
        .collect();
    let refs = (0..grouped.len())
        .map(|i| format!("g{i}"))
        .collect::<Vec<_>>()
        .join(" | ");
    let a = gbnf(&format!(
        "root ::= \"[\" item (\", \" item)* \"]\"\nitem ::= {flat}\n"
    ));
    let b = gbnf(&format!(
        "root ::= \"[\" item (\", \" item)* \"]\"\nitem ::= {refs}\n{}\n",
        grouped.join("\n")
    ));
    let (la, lb) = (a.grammar().stats().lexemes, b.grammar().stats().lexemes);
    assert!(la < 20, "{la} lexemes for 3,000 literals");
    assert!(lb > 400, "{lb} lexemes in the comparison grammar");
    let (mut ma, mut mb) = (vec![0u32; v.mask_words()], vec![0u32; v.mask_words()]);
    let w0 = &words[0];
    let w1 = &words[1234];
    for text in [
        "[".to_string(),
        format!("[\"{}", &w0[..2]),
        format!("[\"{w0}"),
        format!("[\"{w0}\""),
        format!("[\"{w0}\", \"{}", &w1[..3]),
    ] {
        let (mut x, mut y) = (Matcher::new(&a).unwrap(), Matcher::new(&b).unwrap());
        for t in ids(&text) {
            x.commit_token(t).unwrap();
            y.commit_token(t).unwrap();
        }
        x.compute_mask(&mut ma).unwrap();
        y.compute_mask(&mut mb).unwrap();
        assert_same(&ma, &mb, &text);
        assert!(ma.iter().any(|&w| w != 0), "{text}");
    }
}

/// A light run with a long repetition nested inside (a `hostname`: labels of up to 63
/// characters) is one dense lexeme, not helper rules whose every character crosses a
/// lexeme boundary; its masks still follow the format.
#[test]
fn hostname_is_one_lexeme() {
    let v = common::llama3();
    let c = schema(serde_json::json!({"type": "string", "format": "hostname"}));
    let stats = c.grammar().stats();
    assert!(stats.lexemes <= 2, "{stats:?}");
    let mut mask = vec![0u32; v.mask_words()];
    // After `"ab.c`, a token of letters and digits only continues the label; one with `_`
    // or a space never fits a hostname; `"` closes it.
    let mut m = Matcher::new(&c).unwrap();
    for t in ids("\"ab.c") {
        m.commit_token(t).unwrap();
    }
    m.compute_mask(&mut mask).unwrap();
    for (text, ok) in [
        ("de", true),
        ("_x", false),
        (" de", false),
        ("\"", true),
        ("..", false),
    ] {
        let t = ids(text);
        assert_eq!(t.len(), 1, "{text}");
        assert_eq!(bit(&mask, t[0]), ok, "{text}");
    }
}

/// A parse state's identity names, for each core item, what waits for its rule at its
/// origin; in a set where thousands of rules are predicted one from another, that is a
/// chain through all of them. It is found through an index of the set's waiting items
/// (a scan of the set per rule, and a linear search of the rules met, made it
/// quadratic: these five masks took 270 s in a debug build, against 2 s with the index), and the masks are still exact.
#[test]
fn identities_of_long_prediction_chains_cost_linear_time() {
    const N: usize = 6000;
    let mut g = String::from("root ::= r0\n");
    for i in 0..N {
        g.push_str(&format!("r{i} ::= r{} \"x\" | \"(\" r0 \")\"\n", i + 1));
    }
    g.push_str(&format!("r{N} ::= \"y\" | \"(\" r0 \")\"\n"));
    let c = Constraint::from_gbnf(&g, common::llama3(), &ample_mask_time()).unwrap();
    let mut m = Matcher::new(&c).unwrap();
    let t = std::time::Instant::now();
    for text in ["(", "y", "x", "x"] {
        let a = allowed(&mut m);
        let tok = ids(text)[0];
        assert!(a.contains(&tok), "{text}");
        m.commit_token(tok).unwrap();
    }
    let a = allowed(&mut m);
    assert!(a.contains(&ids("x")[0]) && !a.contains(&ids("y")[0]));
    assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
}

/// A property loop whose values are long bounded strings (any order, no other keys, as
/// MaskBench compiles schemas) is not one counted lexeme over an item DFA that unrolls
/// every string's count (thousands of states, milliseconds of compile): each string is a
/// counted lexeme of its own. The masks still follow the schema.
#[test]
fn loops_of_bounded_strings_do_not_unroll_their_counts() {
    use ruvllm_engine::schema::{schema_to_grammar, SchemaOptions};
    let v = common::llama3();
    let s = serde_json::json!({"type": "string", "maxLength": 128});
    let schema = serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {"id": s, "kind": s, "name": s},
    });
    let opts = SchemaOptions {
        any_order: true,
        ..SchemaOptions::default()
    };
    let g = schema_to_grammar(&schema, &opts).unwrap();
    let c = Constraint::new(&g, v.clone(), &Limits::default()).unwrap();
    let stats = c.grammar().stats();
    assert!(stats.lexeme_states < 2000, "{stats:?}");
    let mut mask = vec![0u32; v.mask_words()];
    let mut m = Matcher::new(&c).unwrap();
    for t in ids(&format!("{{\"kind\": \"{}", "a".repeat(127))) {
        m.commit_token(t).unwrap();
    }
    m.compute_mask(&mut mask).unwrap();
    for (text, ok) in [("a", true), ("aa", false), ("\"", true), ("\"}", true)] {
        let t = ids(text);
        assert_eq!(t.len(), 1, "{text}");
        assert_eq!(bit(&mask, t[0]), ok, "{text}");
    }
}

/// A word-count `pattern` (`(\S+\s+){0,99}\S+`: at most 100 words) cannot be a counted
/// lexeme (a word's item is not prefix-free), but unrolled it is a few thousand DFA
/// states: the string, its quotes included, is one dense lexeme. Before, the repetition
/// was lexed apart from the quotes (three lexemes here), and inside objects the masks at
/// those boundaries walked the parser (the worst mask of MaskBench's
/// `Github_hard---o21072` took 3.9-4.1 ms, 2.7 ms since). The masks still count words.
#[test]
fn word_count_patterns_are_one_lexeme() {
    let v = common::llama3();
    let c = schema(serde_json::json!({"type": "string", "pattern": "^(?:\\S+\\s+){0,99}\\S+$"}));
    let stats = c.grammar().stats();
    assert_eq!((stats.rules, stats.lexemes), (1, 1), "{stats:?}");
    let mut mask = vec![0u32; v.mask_words()];
    let (word, space, quote) = (ids(" word")[0], ids(" ")[0], ids("\"")[0]);
    let mut m = Matcher::new(&c).unwrap();
    for t in ids("\"word") {
        m.commit_token(t).unwrap();
    }
    // Words 2 to 100 may follow; after the 100th, neither a space nor another word.
    for n in 2..=100 {
        m.compute_mask(&mut mask).unwrap();
        assert!(bit(&mask, word) && bit(&mask, quote), "before word {n}");
        m.commit_token(word).unwrap();
    }
    m.compute_mask(&mut mask).unwrap();
    assert!(bit(&mask, quote) && !bit(&mask, word) && !bit(&mask, space));
    m.commit_token(quote).unwrap();
    assert!(m.is_accepting());
}
