//! The `grammar-cases` run for the llama3_1, gemma2 and llama2 vocabularies: every case
//! judged right, at least 20 grammars and 400 strings.

use std::path::PathBuf;
use std::sync::Arc;

use ruvllm_bench::grammar_cases;
use ruvllm_engine::{Limits, Vocabulary};

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
