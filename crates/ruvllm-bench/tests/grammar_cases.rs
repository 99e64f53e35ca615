//! The `grammar-cases` run for the llama3_1, gemma2 and llama2 vocabularies: every case
//! judged right, at least 20 grammars and 400 strings; and the recursion bench's families
//! stay flat.

use std::path::PathBuf;
use std::sync::Arc;

use ruvllm_bench::{grammar_cases, recursion};
use ruvllm_engine::{Engine, Limits, Vocabulary};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(tok: &str) {
    let path = repo()
        .join("assets/tokenizers")
        .join(tok)
        .join("tokenizer.json");
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        path.display()
    );
    assert!(
        repo()
            .join("../shared/data/gbnf/llama.cpp/json.gbnf")
            .exists(),
        "../shared/data is missing"
    );
    let vocab = Arc::new(Vocabulary::from_file(&path).unwrap());
    // A verdict test: a mask's wall-clock budget (500 ms by default, a guard against hostile
    // grammars, tested in the engine's and the CLI's tests) must not decide it. In the test
    // build a cold 256k-vocabulary mask of the XML builtins takes tens of ms here and came
    // near 500 ms on a slow CI machine; the table's `max_ms` column shows each grammar's
    // slowest mask.
    let limits = Limits {
        max_mask_time: std::time::Duration::from_secs(120),
        ..Limits::default()
    };
    let r = grammar_cases::run(vocab, &repo().join("tests/grammars"), &limits).unwrap();
    let table = grammar_cases::table(&r);
    assert_eq!(r.compile_errors, 0, "{table}");
    assert_eq!(r.accept_wrong + r.reject_wrong, 0, "{table}");
    assert!(r.grammars >= 20 && r.cases >= 400, "{table}");
    assert_eq!(r.passed, r.cases);
}

#[test]
fn llama3_1() {
    run("llama3_1");
}

#[test]
fn gemma2() {
    run("gemma2");
}

#[test]
fn llama2() {
    run("llama2");
}

/// The recursion bench's families stay flat (issue 66): along 1,000 levels of right, left
/// and middle recursion, and 1,000 characters of a JSON string whose rule recurses per
/// character, the last masks cost what the first did (before right recursion was iterated,
/// a mask there took 80-360 ms after 1,000 characters).
#[test]
fn deep_recursion_costs_the_same_per_mask() {
    let path = repo().join("assets/tokenizers/llama3_1/tokenizer.json");
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        path.display()
    );
    let vocab = Arc::new(Vocabulary::from_file(&path).unwrap());
    let engine = Engine::new(vocab.clone());
    let mut rows = Vec::new();
    for f in recursion::FAMILIES {
        rows.push(recursion::run_one(&engine, &vocab, f, 1000, &Limits::default()).unwrap());
    }
    let table = recursion::table(&rows);
    println!("{table}");
    for r in &rows {
        assert!(r.error.is_none(), "{}: {:?}\n{table}", r.family, r.error);
        // Medians of ten masks each; a level of linear work per mask would put the last
        // ones hundreds of times above the first at this depth.
        assert!(
            r.ratio < 4.0,
            "{}: the masks grow with the depth\n{table}",
            r.family
        );
        assert!(r.last_us < 5_000.0, "{}: slow masks\n{table}", r.family);
    }
}
