//! `test-suite`: the official JSON Schema Test Suite (`tests/<draft>`, `optional/` included).
//!
//! Each test group's schema is compiled once per engine; each test's `data` is serialized
//! like MaskBench instances, tokenized, and fed token by token. A group whose schema does not
//! compile counts its tests as `compile_error`. `false_positive` = an invalid instance
//! accepted; `false_negative` = a valid one refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use ruvllm_engine::Vocabulary;
use serde_json::{json, Value};

use crate::maskbench::{EngineStats, FileCase};

/// Per-engine totals.
#[derive(Debug, Default, Clone, Copy)]
pub struct SuiteStats {
    /// Tests run.
    pub tests: usize,
    /// Judged right.
    pub passed: usize,
    /// In groups whose schema did not compile.
    pub compile_error: usize,
    /// Invalid instances accepted.
    pub false_positive: usize,
    /// Valid instances refused.
    pub false_negative: usize,
    /// Groups whose schema compiled with no completion found from the start (engine
    /// `ruvllm-budget` only: budget-aware decoding is then off for it).
    pub no_start_completion: usize,
    /// Of them, groups with a valid test instance (so a completion exists).
    pub no_start_completion_with_valid: usize,
}

impl SuiteStats {
    /// The JSON shape of the issue.
    pub fn to_json(self) -> Value {
        json!({"tests": self.tests, "passed": self.passed, "compile_error": self.compile_error,
               "false_positive": self.false_positive, "false_negative": self.false_negative,
               "no_start_completion": self.no_start_completion,
               "no_start_completion_with_valid": self.no_start_completion_with_valid})
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// What [`run`] measured, per engine (in the order given).
pub struct SuiteRun {
    /// Every test under the folder.
    pub totals: Vec<SuiteStats>,
    /// Of them, the core `format.json` tests (not `optional/format/`): from 2019-09 (and in
    /// draft 7's copy) they expect `format` to be an annotation, which ruvllm asserts by
    /// design (see docs/JSON_SCHEMA.md), so they are reported on their own line too.
    pub format_annotations: Vec<SuiteStats>,
    /// The accepted invalid instances, for the report.
    pub false_positives: Vec<Vec<String>>,
    /// The groups with a valid instance and no completion from the start
    /// (`ruvllm-budget`), for the report.
    pub no_start_completion_with_valid: Vec<Vec<String>>,
}

/// Runs every test file under `dir` with the given engines.
pub fn run(
    vocab: &Arc<Vocabulary>,
    dir: &Path,
    engines: &[String],
    factory: Option<&llguidance::ParserFactory>,
) -> Result<SuiteRun> {
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    anyhow::ensure!(!files.is_empty(), "no test files under {}", dir.display());
    // One engine for the whole suite, as a server keeps one per vocabulary.
    let engine = ruvllm_engine::Engine::new(vocab.clone());
    let enc = vocab
        .encoder()
        .context("the tokenizer has no encoder")?
        .clone();
    // The suite's schemas leave `$schema` out: the draft is the folder's. Say it explicitly
    // (for both engines) so draft-specific semantics apply.
    let dir_name = dir.to_string_lossy();
    let draft_uri = if dir_name.contains("draft7") {
        Some("http://json-schema.org/draft-07/schema#")
    } else if dir_name.contains("draft2019-09") {
        Some("https://json-schema.org/draft/2019-09/schema")
    } else if dir_name.contains("draft2020-12") {
        Some("https://json-schema.org/draft/2020-12/schema")
    } else {
        None
    };
    // The suite's `remotes/` folder, which its README says to serve at
    // http://localhost:1234/: here a registry, nothing is served or fetched.
    let mut registry = ruvllm_engine::schema::SchemaRegistry::new();
    let remotes = dir
        .ancestors()
        .map(|a| a.join("remotes"))
        .find(|r| r.is_dir())
        .with_context(|| format!("no remotes/ folder above {}", dir.display()))?;
    registry.insert_dir(&remotes, Some("http://localhost:1234/"))?;
    let registry = Arc::new(registry);
    let mut totals = vec![SuiteStats::default(); engines.len()];
    let mut formats = vec![SuiteStats::default(); engines.len()];
    let mut fps = vec![Vec::new(); engines.len()];
    let mut no_start = vec![Vec::new(); engines.len()];
    for f in &files {
        let src = std::fs::read_to_string(f)?;
        let groups: Value =
            serde_json::from_str(&src).with_context(|| format!("parsing {}", f.display()))?;
        // The instances as Python reads them (integers exact): see `pyjson`.
        let py = crate::pyjson::loads(&src)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("parsing {}", f.display()))?;
        let rel = f.strip_prefix(dir).unwrap_or(f).display().to_string();
        let annotations = rel == "format.json";
        for (gi, g) in groups
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let mut tests = Vec::new();
            let py_tests = py.items().get(gi).and_then(|g| g.get("tests"));
            for t in py_tests.map(crate::pyjson::Py::items).unwrap_or_default() {
                let data = t.get("data").unwrap_or(&crate::pyjson::Py::Null);
                let text = crate::pyjson::dumps_py(data);
                let ids = enc.encode(&text).map_err(anyhow::Error::msg)?;
                tests.push((
                    t.get("valid") == Some(&crate::pyjson::Py::Bool(true)),
                    text,
                    ids,
                ));
            }
            let mut schema = g["schema"].clone();
            if let (Some(uri), Value::Object(o)) = (draft_uri, &mut schema) {
                o.entry("$schema")
                    .or_insert_with(|| Value::String(uri.to_string()));
            }
            let case = FileCase {
                name: format!("{rel}: {}", g["description"].as_str().unwrap_or("")),
                schema,
                tests,
                registry: Some(registry.clone()),
            };
            for (i, e) in engines.iter().enumerate() {
                let mut st = EngineStats::default();
                match e.as_str() {
                    "ruvllm" => crate::maskbench::run_ruvllm(&engine, &case, &mut st)?,
                    "ruvllm-budget" => {
                        crate::maskbench::run_ruvllm_budget(&engine, &case, &mut st)?
                    }
                    _ => crate::llg::run(factory.context("llguidance factory")?, &case, &mut st)?,
                }
                let n = case.tests.len();
                if std::env::var_os("RUVLLM_BENCH_TRACE").is_some() {
                    for (f, msg) in &st.errors {
                        eprintln!("{e}: compile error {f}: {msg}");
                    }
                    for (f, text) in &st.false_rejects {
                        eprintln!("{e}: valid rejected {f}: {text}");
                    }
                }
                for t in [Some(&mut totals[i]), annotations.then_some(&mut formats[i])]
                    .into_iter()
                    .flatten()
                {
                    t.tests += n;
                    t.no_start_completion += st.no_start_completion.len();
                    t.no_start_completion_with_valid += st.no_start_completion_valid.len();
                    if st.compile_errors > 0 {
                        t.compile_error += n;
                    } else {
                        t.false_positive += st.invalid_accepted;
                        t.false_negative += st.valid_rejected;
                        t.passed += n - st.invalid_accepted - st.valid_rejected;
                    }
                }
                no_start[i].extend(st.no_start_completion_valid);
                if st.compile_errors == 0 {
                    for (name, text) in st.false_accepts {
                        fps[i].push(format!("{name}: {text}"));
                    }
                }
            }
        }
    }
    Ok(SuiteRun {
        totals,
        format_annotations: formats,
        false_positives: fps,
        no_start_completion_with_valid: no_start,
    })
}
