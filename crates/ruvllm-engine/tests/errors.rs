//! Bad input gets clear errors in bounded time; nothing panics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ruvllm_engine::{
    CheckResult, Constraint, Grammar, GrammarError, LimitKind, Limits, Matcher, Vocabulary,
};

fn toy_vocab() -> Arc<Vocabulary> {
    let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    for s in ["ab", "aa", "abc", "{\"", "\":", "</s>"] {
        toks.push(s.as_bytes().to_vec());
    }
    let n = toks.len();
    let mut special = vec![false; n];
    special[n - 1] = true;
    Arc::new(Vocabulary::new("toy", toks, special, vec![(n - 1) as u32]).unwrap())
}

fn gbnf_err(text: &str) -> GrammarError {
    Grammar::from_gbnf(text, &Limits::default()).expect_err(text)
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "{what} took {:?}",
        t.elapsed()
    );
    r
}

#[test]
fn syntax_errors_have_line_and_column() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("root ::= \"a", 1, 10, "unterminated string"),
        ("root ::= [a-", 1, 10, "unterminated character class"),
        ("root ::= (\"a\"", 1, 14, "expecting ')'"),
        ("root := \"a\"", 1, 6, "expecting ::="),
        ("root ::= \"a\"\nx ::= *", 2, 7, "expecting an item"),
        ("root ::= \"\\q\"", 1, 11, "unknown escape"),
        ("root ::= \"\\x4\"", 1, 13, "hex digits"),
        ("root ::= [z-a]", 1, 13, "out of order"),
        ("root ::= \"a\"{3,1}", 1, 13, "below its minimum"),
        ("root ::= \"a\"{x}", 1, 14, "expecting an integer"),
        ("root ::= \"a\" )", 1, 14, "expecting newline"),
        ("\n\n  root ::= \"a\" ]", 3, 16, "expecting newline"),
    ];
    for (text, line, col, msg) in cases {
        match gbnf_err(text) {
            GrammarError::Syntax {
                line: l,
                col: c,
                msg: m,
            } => {
                assert_eq!((l, c), (*line, *col), "{text:?}: {m}");
                assert!(m.contains(msg), "{text:?}: message {m:?} lacks {msg:?}");
            }
            other => panic!("{text:?}: expected a syntax error, got {other}"),
        }
    }
}

#[test]
fn semantic_errors() {
    assert!(
        matches!(gbnf_err("root ::= foo\n"), GrammarError::UndefinedRule { ref name, line: 1, col: 10 } if name == "foo")
    );
    assert!(matches!(gbnf_err("a ::= \"x\"\n"), GrammarError::NoRoot));
    assert!(matches!(
        gbnf_err("root ::= \"a\"\nroot ::= \"b\"\n"),
        GrammarError::DuplicateRule { line: 2, .. }
    ));
    // Never terminates: empty language.
    assert!(matches!(
        gbnf_err("root ::= \"a\" root\n"),
        GrammarError::EmptyLanguage { .. }
    ));
    assert!(matches!(
        gbnf_err("root ::= a\na ::= b \"x\"\nb ::= a\n"),
        GrammarError::EmptyLanguage { .. }
    ));
    assert!(matches!(
        gbnf_err("root ::= [^\\x00-\\U0010FFFF]\n"),
        GrammarError::EmptyLanguage { .. }
    ));
    assert!(matches!(
        gbnf_err("root ::= <think>\n"),
        GrammarError::Unsupported { .. }
    ));
    let e = gbnf_err("root ::= foo\n").to_string();
    assert!(e.contains("foo") && e.contains("1:10"), "{e}");
}

#[test]
fn huge_input_is_refused_quickly() {
    let big = format!("root ::= \"{}\"\n", "a".repeat(10 << 20));
    let e = timed("10 MB grammar", || gbnf_err(&big));
    assert!(
        matches!(e, GrammarError::Limit { what, .. } if what.contains("size")),
        "{e}"
    );
    let big_re = "a".repeat(10 << 20);
    assert!(timed("10 MB regex", || Grammar::from_regex(
        &big_re,
        &Limits::default()
    ))
    .is_err());
}

#[test]
fn deep_nesting_is_refused() {
    let deep = format!(
        "root ::= {}\"x\"{}\n",
        "(".repeat(10_000),
        ")".repeat(10_000)
    );
    let e = timed("10,000-deep groups", || gbnf_err(&deep));
    assert!(
        matches!(e, GrammarError::Limit { what, .. } if what.contains("nesting")),
        "{e}"
    );
    // 10,000 stars merge into one (`(x*)*` is `x*`): no nesting at all.
    let stars = format!("root ::= \"x\"{}\n", "*".repeat(10_000));
    let g = timed("10,000 stars", || {
        Grammar::from_gbnf(&stars, &Limits::default()).unwrap()
    });
    assert!(matches!(
        &g.rules[g.root as usize].body,
        ruvllm_engine::Expr::Repeat {
            min: 0,
            max: None,
            ..
        }
    ));
    let re = format!("{}a{}", "(".repeat(10_000), ")".repeat(10_000));
    assert!(timed("deep regex", || Grammar::from_regex(
        &re,
        &Limits::default()
    ))
    .is_err());
    // A 10,000-long chain of rules (deep, but not nested) compiles fine.
    let mut chain = String::from("root ::= r0\n");
    for i in 0..10_000 {
        chain.push_str(&format!("r{i} ::= \"x\" r{}\n", i + 1));
    }
    chain.push_str("r10000 ::= \"end\"\n");
    let g = timed("rule chain", || {
        Grammar::from_gbnf(&chain, &Limits::default()).unwrap()
    });
    let c = timed("rule chain compile", || {
        Constraint::new(&g, toy_vocab(), &Limits::default()).unwrap()
    });
    let mut m = Matcher::new(&c).unwrap();
    let text = format!("{}end", "x".repeat(10_000));
    assert_eq!(
        m.check_bytes(text.as_bytes()).unwrap(),
        ruvllm_engine::CheckResult::Accepted
    );
}

#[test]
fn exploding_repeats_and_regexes_are_bounded() {
    let limits = Limits::default();
    for text in [
        "root ::= ((((\"a\"){0,100}){0,100}){0,100}){0,100}\n",
        "root ::= ([a-z]{0,10000}){0,10000}\n",
        "root ::= (x){10000}\nx ::= \"(\" root? \")\" | (\"a\" | \"b\"){0,10000}\n",
    ] {
        let r = timed(text, || {
            Grammar::from_gbnf(text, &limits)
                .and_then(|g| Constraint::new(&g, toy_vocab(), &limits))
        });
        if let Err(e) = r {
            assert!(matches!(e, GrammarError::Limit { .. }), "{text}: {e}");
        }
    }
    for re in [
        "(a|aa)*b",
        "(.*a){20}",
        "([a-z]+)+$",
        "(x+x+)+y",
        "[a-z]{1000}[0-9]{1000}",
    ] {
        let r = timed(re, || {
            Grammar::from_regex(re, &limits).and_then(|g| Constraint::new(&g, toy_vocab(), &limits))
        });
        let c = r.unwrap_or_else(|e| panic!("{re}: {e}"));
        let mut m = Matcher::new(&c).unwrap();
        let mut mask = vec![0u32; 9];
        timed("mask", || m.compute_mask(&mut mask).unwrap());
    }
    // A regex with look-around is refused, not approximated.
    assert!(Grammar::from_regex(r"\bword\b", &limits).is_err());
    assert!(Grammar::from_regex("a(?=b)", &limits).is_err());
}

/// Nested counted repetitions are merged where that keeps the language, so an ambiguous
/// nest costs what one repetition does. `((((a{1,100}){1,100}){1,100}){1,100})` used to
/// keep every split of the `a`s into groups alive: its masks took 20, 112, 296, then over
/// 500 ms (the mask time budget) in a release build by the fourth token. Now it is one
/// counted lexeme of up to 10^8 `a`s.
#[test]
fn nested_repeats_are_merged_and_stay_fast() {
    let limits = Limits::default();
    let re = "((((a{1,100}){1,100}){1,100}){1,100})";
    let c = Grammar::from_regex(re, &limits)
        .and_then(|g| Constraint::new(&g, toy_vocab(), &limits))
        .unwrap();
    let mut m = Matcher::new(&c).unwrap();
    let mut mask = vec![0u32; 9];
    let aa = 257; // "aa" in the toy vocabulary
    timed("40 masks of a nested repeat", || {
        for _ in 0..40 {
            m.compute_mask(&mut mask).unwrap();
            assert!(mask[(aa >> 5) as usize] >> (aa & 31) & 1 == 1);
            m.commit_token(aa).unwrap();
        }
    });
    // A merged minimum beyond the chunk size is lowered in chunks, exactly:
    // ((a|ab){10}){30} is (a|ab){300}.
    let c = Grammar::from_regex("((a|ab){10}){30}", &limits)
        .and_then(|g| Constraint::new(&g, toy_vocab(), &limits))
        .unwrap();
    let check = |text: String| {
        Matcher::new(&c)
            .unwrap()
            .check_bytes(text.as_bytes())
            .unwrap()
    };
    use ruvllm_engine::CheckResult::*;
    assert_eq!(check("a".repeat(300)), Accepted);
    assert_eq!(check("ab".repeat(150) + &"a".repeat(150)), Accepted);
    assert!(matches!(check("a".repeat(299)), Incomplete { .. }));
    assert!(matches!(check("ab".repeat(298) + "a"), Incomplete { .. }));
    assert!(matches!(check("a".repeat(301)), Rejected { at: 300, .. }));
}

/// A repetition whose maximum is below its minimum, which only a grammar built in code can
/// hold (the GBNF and regex parsers refuse it), matches nothing: alone it is an empty
/// language, as an alternative it is dropped. It used to reach the compiler as a lexeme
/// `b{100,3}`: the grammar compiled, and after `bbbb` the matcher said "incomplete" (a
/// prefix with no completion, which exact masks must never allow).
#[test]
fn inverted_repetition_bounds_match_nothing() {
    use ruvllm_engine::Expr;
    let limits = Limits::default();
    let inverted = || Expr::Repeat {
        e: Box::new(Expr::Literal(b"b".to_vec())),
        min: 100,
        max: Some(3),
    };
    let alone = Grammar::single("root", inverted());
    assert!(matches!(
        Constraint::new(&alone, toy_vocab(), &limits),
        Err(GrammarError::EmptyLanguage { .. })
    ));
    let either = Grammar::single(
        "root",
        Expr::Alt(vec![Expr::Literal(b"a".to_vec()), inverted()]),
    );
    let c = Constraint::new(&either, toy_vocab(), &limits).unwrap();
    let check = |t: &[u8]| Matcher::new(&c).unwrap().check_bytes(t).unwrap();
    assert_eq!(check(b"a"), ruvllm_engine::CheckResult::Accepted);
    assert!(matches!(
        check(b"b"),
        ruvllm_engine::CheckResult::Rejected { at: 0, .. }
    ));
}

#[test]
fn parser_budget_is_an_error_not_a_wrong_mask() {
    // Highly ambiguous grammar: item count grows with the text; a tiny budget trips it.
    let limits = Limits {
        max_parser_items: 64,
        ..Limits::default()
    };
    let g = Grammar::from_gbnf("root ::= s\ns ::= s s | \"a\" | \"\"\n", &limits).unwrap();
    let c = Constraint::new(&g, toy_vocab(), &limits).unwrap();
    let mut m = Matcher::new(&c).unwrap();
    let mut hit = false;
    for _ in 0..200 {
        match m.commit_token(b'a' as u32) {
            Ok(()) => {}
            Err(ruvllm_engine::MatchError::Budget { .. }) => {
                hit = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(hit, "budget never hit");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]
    /// Arbitrary text never panics the GBNF parser or the compiler.
    #[test]
    fn arbitrary_gbnf_never_panics(s in "(root ::= |[a-z]+ ::= |[\"\\[\\]()|*+?{},0-9a-z^\\\\\\- .\n#<>!]|\\\\[xuU][0-9a-fA-F]{0,8}){0,40}") {
        if let Ok(g) = Grammar::from_gbnf(&s, &Limits::default()) {
            if let Ok(c) = Constraint::new(&g, toy_vocab(), &Limits::default()) {
                let mut m = Matcher::new(&c).unwrap();
                let mut mask = vec![0u32; 9];
                let _ = m.compute_mask(&mut mask);
            }
        }
    }

    /// Anchors anywhere (issue 66): a regex with `^`/`$` in any position accepts exactly
    /// the strings regex-automata finds `\A(?:regex)\z` in (the anchors inside then refer
    /// to the whole string, as in a generation). Every string over `ab` up to length 4.
    #[test]
    fn anchored_regexes_accept_what_they_match_whole(s in "([ab^$|()*?]|\\(\\?:){0,14}") {
        if regex_syntax::parse(&s).is_err() {
            return Ok(());
        }
        let theirs = regex_automata::meta::Regex::new(&format!(r"\A(?:{s})\z")).unwrap();
        let limits = Limits::default();
        let mut words = vec![String::new()];
        for len in 1..=4 {
            for i in 0..(1u32 << len) {
                words.push((0..len).map(|k| if i >> k & 1 == 1 { 'b' } else { 'a' }).collect());
            }
        }
        let c = Grammar::from_regex(&s, &limits)
            .and_then(|g| Constraint::new(&g, toy_vocab(), &limits));
        let Ok(c) = c else {
            // Only a regex that matches nothing (`$a`) is refused, as an empty language.
            let e = c.unwrap_err().to_string();
            prop_assert!(e.contains("empty") || e.contains("never complete"), "{:?}: {}", s, e);
            prop_assert!(words.iter().all(|w| !theirs.is_match(w.as_str())), "{:?}", s);
            return Ok(());
        };
        for w in &words {
            let mut m = Matcher::new(&c).unwrap();
            let ours = m.check_bytes(w.as_bytes()).unwrap() == CheckResult::Accepted;
            prop_assert_eq!(ours, theirs.is_match(w.as_str()), "{:?} on {:?}", s, w);
        }
    }

    #[test]
    fn arbitrary_regex_never_panics(s in "[a-z()|*+?{}0-9,\\[\\]^$.\\\\dwsb-]{0,30}") {
        if let Ok(g) = Grammar::from_regex(&s, &Limits::default()) {
            let _ = Constraint::new(&g, toy_vocab(), &Limits::default());
        }
    }
}

#[test]
fn many_oversized_lexemes_hit_the_total_budget() {
    // Each rule's DFA is over the per-lexeme limit (the n-th byte from the end is an `a`:
    // 2^16 states); together they must stop early. (Long bounded repetitions no longer
    // serve here: they are counted lexemes of a few states.)
    let mut text = String::from("root ::= r0");
    for i in 1..200 {
        text.push_str(&format!(" | r{i}"));
    }
    text.push('\n');
    for i in 0..200 {
        text.push_str(&format!("r{i} ::= \"{i}\" [ab]* \"a\" [ab]{{15}}\n"));
    }
    let limits = Limits::default();
    let g = Grammar::from_gbnf(&text, &limits).unwrap();
    let r = timed("200 oversized lexemes", || {
        Constraint::new(&g, toy_vocab(), &limits)
    });
    match r {
        Err(GrammarError::Limit { kind, .. }) => {
            assert!(
                matches!(kind, LimitKind::TotalDfaStates | LimitKind::CompileTime),
                "{kind}"
            )
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("expected the total DFA budget to be hit"),
    }
}

/// Found by the `gbnf` fuzz target (a 10 s timeout in the instrumented build): a `number`
/// rule `("-"? ([0-9] | [1-9] [0-9]{0,15}))*` whose DFA has tens of thousands of states.
/// Each attempt at its lexeme used to be determinized to the end within `max_dfa_bytes`
/// (about 65,000 states) before being refused for exceeding `max_lexeme_states`, and the
/// attempts together ran past the 2 s compile budget (3.4 s, then a limit error). The state
/// limit now stops determinization as soon as it is passed: the grammar compiles in about
/// 0.3 s (release) and accepts its sentences.
#[test]
fn fuzz_found_ambiguous_digit_repeat_compiles() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz-regressions/gbnf-ambiguous-digit-repeat.gbnf");
    let text = std::fs::read_to_string(&path).unwrap();
    let limits = Limits::default();
    let c = timed("fuzz-found digit repeat", || {
        Grammar::from_gbnf(&text, &limits).and_then(|g| Constraint::new(&g, toy_vocab(), &limits))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mut m = Matcher::new(&c).unwrap();
    assert_eq!(
        m.check_bytes(b"{ | } | ").unwrap(),
        ruvllm_engine::CheckResult::Accepted
    );
}

/// One DFA attempt stops at the compile deadline, not only at the state and memory limits:
/// a lexeme of 2^18 DFA states, under state and memory limits raised to let it through and
/// a 5 ms compile budget, is refused with the compile-time error within a few milliseconds
/// of the deadline, instead of being determinized to the end first (about 0.5 s in the test
/// build, measured with the deadline removed) and refused afterwards.
#[test]
fn one_dfa_attempt_stops_at_the_compile_deadline() {
    let roomy = Limits {
        max_lexeme_states: 1 << 20,
        max_total_dfa_states: 1 << 21,
        max_dfa_bytes: 1 << 30,
        ..Limits::default()
    };
    let limits = Limits {
        max_compile_time: Duration::from_millis(5),
        ..roomy.clone()
    };
    let text = "root ::= [ab]* \"a\" [ab]{17}\n";
    let g = Grammar::from_gbnf(text, &limits).unwrap();
    let t = Instant::now();
    let r = Constraint::new(&g, toy_vocab(), &limits);
    let took = t.elapsed();
    match r {
        Err(GrammarError::Limit { kind, .. }) => {
            assert_eq!(kind, LimitKind::CompileTime)
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("expected the compile-time limit"),
    }
    assert!(took < Duration::from_millis(100), "took {took:?}");
    // With the default time budget the same grammar compiles.
    let c = Constraint::new(&g, toy_vocab(), &roomy).unwrap();
    let mut m = Matcher::new(&c).unwrap();
    let text = [b"bba".as_slice(), &[b'b'; 17]].concat();
    assert_eq!(
        m.check_bytes(&text).unwrap(),
        ruvllm_engine::CheckResult::Accepted
    );
}
