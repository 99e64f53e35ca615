//! Every token table the engine computes or shares on a slice of MaskBench decides the
//! same as the table by definition (`ruvllm_engine::Engine::verify_tables`: a pass over the
//! whole trie, a DFA step per live node, none of the walk's shortcuts). The slice is every
//! 50th file and the files whose tables take the walk's rarer paths: counted strings
//! behind keys and near their bounds (`o46406`, `o79409`, `sp_335`), a `date-time`
//! pattern of dots (`o89194`), a pattern of counted segments (`winget-pkgs-locale`), word
//! counts (`o21074`), an e-mail pattern (`o21455`) and an object's other keys (`o9351`).
//! The same check over any set of files is `ruvllm-bench maskbench --verify-tables`.
//! Fails, not skips, when the tokenizer or the shared data is missing.

use std::path::PathBuf;
use std::sync::Arc;

use ruvllm_bench::maskbench::{self, EngineStats};
use ruvllm_engine::Vocabulary;

/// Files whose tables take the walk's rarer paths (see the module docs).
const HARD: &[&str] = &[
    "Github_easy---o46406.json",
    "Github_hard---o79409.json",
    "Snowplow---sp_335_Normalized.json",
    "Github_hard---o89194.json",
    "JsonSchemaStore---winget-pkgs-locale-1.0.0.json",
    "Github_hard---o21074.json",
    "Github_easy---o21455.json",
    "Github_easy---o9351.json",
];

#[test]
fn maskbench_tables_match_the_definition() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tokenizer = root.join("assets/tokenizers/llama3_1/tokenizer.json");
    assert!(
        tokenizer.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        tokenizer.display()
    );
    let data = root.join("../shared/data/maskbench/data");
    assert!(data.exists(), "../shared/data is missing");
    let vocab = Arc::new(Vocabulary::from_file(&tokenizer).unwrap());
    let mut files: Vec<PathBuf> = maskbench::collect(std::slice::from_ref(&data))
        .unwrap()
        .into_iter()
        .step_by(50)
        .collect();
    for h in HARD {
        let f = data.join(h);
        assert!(f.exists(), "{} is missing", f.display());
        files.push(f);
    }
    let engine = ruvllm_engine::Engine::new(vocab.clone());
    engine.verify_tables(true);
    let mut st = EngineStats::default();
    for f in &files {
        let case = maskbench::load(&vocab, f).unwrap();
        maskbench::run_ruvllm(&engine, &case, &mut st).unwrap();
    }
    engine.verify_tables(false);
    let (checked, differ, which) = engine.table_checks();
    assert_eq!(differ, 0, "{differ} of {checked} tables differ: {which:#?}");
    // The slice's masks build thousands of tables (5,293 for the 30 files with the
    // slowest masks); far fewer means the check was not on.
    assert!(checked > 2_000, "only {checked} tables checked");
    assert_eq!(st.invalid_accepted, 0);
}
