//! A CI-sized slice of `ruvllm-bench e2e`'s validity run, through the same code: every
//! 5th schema of the 30 and two of the grammars, one seed, on the default model, at 96
//! and at 40 tokens. Every output must be complete and valid when the budget is at least
//! its shortest completion (else truly cut, a valid prefix), with no runaway whitespace.
//! Fails, not skips, when the model or the shared data is missing.

use std::path::PathBuf;

use ruvllm_bench::e2e;
use ruvllm_runtime::{BackendOptions, CandleBackend};

#[test]
fn constrained_generations_validate() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let model = root.join("assets/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        model.display()
    );
    let maskbench = root.join("../shared/data/maskbench/data");
    let gbnf = root.join("../shared/data/gbnf/llama.cpp");
    assert!(
        maskbench.exists() && gbnf.exists(),
        "../shared/data is missing"
    );
    let b = CandleBackend::load(&model, &BackendOptions::default()).unwrap();
    let schemas: Vec<(&str, &str)> = e2e::SCHEMAS.iter().step_by(5).copied().collect();
    let grammars = [e2e::GRAMMARS[0], e2e::GRAMMARS[3]];
    let rows = e2e::validity(
        &b,
        &maskbench,
        &gbnf,
        &schemas,
        &grammars,
        1,
        0.7,
        &[96, 40],
        |_| {},
    )
    .unwrap();
    assert_eq!(rows.len(), 2 * (schemas.len() + grammars.len()));
    let bad: Vec<_> = rows.iter().filter(|r| !r.ok).collect();
    assert!(bad.is_empty(), "invalid outputs: {bad:#?}");
    // Budget-aware decoding is what keeps them complete: at 40 tokens some had to close.
    let fitting = rows
        .iter()
        .filter(|r| r.shortest.is_some_and(|n| n <= r.budget))
        .count();
    assert!(fitting >= rows.len() - 2, "{rows:#?}");
    assert!(
        rows.iter()
            .filter(|r| r.budget == 40)
            .any(|r| r.budget_closed && r.complete_valid),
        "{rows:#?}"
    );
}

#[test]
fn whitespace_runs_are_measured_outside_strings() {
    assert_eq!(e2e::max_ws_outside_strings(r#"{"a": "      ",  "b":1}"#), 2);
    assert_eq!(e2e::max_ws_outside_strings("[\n\n\n 1]"), 4);
    assert_eq!(e2e::max_ws_outside_strings(r#""a\"   ""#), 0);
}
