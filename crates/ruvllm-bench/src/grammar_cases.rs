//! `grammar-cases`: run accept/reject strings through real tokenizers, token by token.
//!
//! DIR holds `NAME.cases.json` files, `{"accept": [..], "reject": [..]}`, each next to
//! `NAME.gbnf`, or naming its grammar with `"gbnf_file"` (a path relative to the case file)
//! or `"builtin"` (`json`, `csv`, ...). Each string is tokenized with the tokenizer (no
//! special tokens, no dummy prefix) and fed token by token: `compute_mask`, check the token
//! is in the mask, `commit_token` (which must agree with the mask). An accept string must
//! pass every token and end accepting, with EOS in the final mask; a reject string must be
//! refused at some token or end not accepting.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ruvllm_engine::{Builtin, Engine, Grammar, Limits, Matcher, Vocabulary};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct CaseFile {
    #[serde(default)]
    accept: Vec<String>,
    #[serde(default)]
    reject: Vec<String>,
    gbnf_file: Option<String>,
    builtin: Option<String>,
}

/// One grammar's results.
#[derive(Debug, Serialize, Clone, Default)]
pub struct GrammarReport {
    /// Grammar name (case file stem).
    pub name: String,
    /// Compile error, if any.
    pub compile_error: Option<String>,
    /// Strings run.
    pub cases: usize,
    /// Strings judged right.
    pub passed: usize,
    /// Accept strings that were refused.
    pub accept_wrong: Vec<String>,
    /// Reject strings that were accepted.
    pub reject_wrong: Vec<String>,
    /// Tokens fed.
    pub tokens: usize,
    /// Total time of the masks and commits, microseconds.
    pub mask_us: f64,
    /// The slowest single mask, microseconds.
    pub max_mask_us: f64,
}

/// The whole run, in the shape `--json` writes.
#[derive(Debug, Serialize, Default)]
pub struct Report {
    /// Grammars found.
    pub grammars: usize,
    /// Grammars that failed to compile.
    pub compile_errors: usize,
    /// Strings run.
    pub cases: usize,
    /// Strings judged right.
    pub passed: usize,
    /// Accept strings refused.
    pub accept_wrong: usize,
    /// Reject strings accepted.
    pub reject_wrong: usize,
    /// Per-grammar details.
    pub details: Vec<GrammarReport>,
}

/// Loads every case file under `dir` (recursively) and runs it with `vocab` under `limits`.
///
/// A budget error (a mask over `limits.max_mask_time`, say) stops the run with that error:
/// it is no verdict on the case. A correctness run that must not depend on the machine's
/// speed passes a generous `max_mask_time`; the slowest mask of each grammar is reported.
pub fn run(vocab: Arc<Vocabulary>, dir: &Path, limits: &Limits) -> Result<Report> {
    // One engine for every case, as a server keeps one per vocabulary.
    let engine = Engine::new(vocab.clone());
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    if files.is_empty() {
        bail!("no *.cases.json files under {}", dir.display());
    }
    let enc = vocab
        .encoder()
        .cloned()
        .context("the tokenizer has no encoder (use a tokenizer.json)")?;
    let mut report = Report::default();
    for f in files {
        let name = f
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".cases.json")
            .to_string();
        let cases: CaseFile = serde_json::from_str(&std::fs::read_to_string(&f)?)
            .with_context(|| format!("parsing {}", f.display()))?;
        let grammar = if let Some(b) = &cases.builtin {
            Builtin::from_name(b).and_then(|b| Grammar::builtin(b, limits))
        } else {
            let gpath = match &cases.gbnf_file {
                Some(p) => f.parent().unwrap().join(p),
                None => f.with_file_name(format!("{name}.gbnf")),
            };
            let text = std::fs::read_to_string(&gpath)
                .with_context(|| format!("reading {}", gpath.display()))?;
            Grammar::from_gbnf(&text, limits)
        };
        let mut gr = GrammarReport {
            name: name.clone(),
            ..Default::default()
        };
        let c = match grammar.and_then(|g| engine.constraint(&g, limits)) {
            Ok(c) => c,
            Err(e) => {
                gr.compile_error = Some(e.to_string());
                report.compile_errors += 1;
                report.grammars += 1;
                report.details.push(gr);
                continue;
            }
        };
        let mut mask = vec![0u32; vocab.mask_words()];
        for (s, want) in cases
            .accept
            .iter()
            .map(|s| (s, true))
            .chain(cases.reject.iter().map(|s| (s, false)))
        {
            let ids = enc.encode(s).map_err(anyhow::Error::msg)?;
            let joined: Vec<u8> = ids
                .iter()
                .flat_map(|&t| vocab.token_bytes(t).to_vec())
                .collect();
            if joined != s.as_bytes() {
                bail!("{name}: tokenizing {s:?} does not reproduce its bytes");
            }
            let mut m = Matcher::new(&c)?;
            let mut ok = true;
            let t0 = Instant::now();
            for &t in &ids {
                let t1 = Instant::now();
                m.compute_mask(&mut mask)
                    .with_context(|| format!("{name}: a mask of {s:?}"))?;
                gr.max_mask_us = gr.max_mask_us.max(t1.elapsed().as_secs_f64() * 1e6);
                let in_mask = mask[(t >> 5) as usize] >> (t & 31) & 1 == 1;
                let committed = m.commit_token(t).is_ok();
                if in_mask != committed {
                    bail!("{name}: mask and commit disagree on token {t} in {s:?}");
                }
                gr.tokens += 1;
                if !in_mask {
                    ok = false;
                    break;
                }
            }
            if ok {
                let t1 = Instant::now();
                m.compute_mask(&mut mask)
                    .with_context(|| format!("{name}: the final mask of {s:?}"))?;
                gr.max_mask_us = gr.max_mask_us.max(t1.elapsed().as_secs_f64() * 1e6);
                let eos_ok = vocab
                    .eos_tokens()
                    .iter()
                    .any(|&e| mask[(e >> 5) as usize] >> (e & 31) & 1 == 1);
                if eos_ok != m.is_accepting() {
                    bail!("{name}: EOS in mask disagrees with is_accepting on {s:?}");
                }
                ok = m.is_accepting();
            }
            gr.mask_us += t0.elapsed().as_secs_f64() * 1e6;
            gr.cases += 1;
            if ok == want {
                gr.passed += 1;
            } else if want {
                gr.accept_wrong.push(s.clone());
            } else {
                gr.reject_wrong.push(s.clone());
            }
        }
        report.grammars += 1;
        report.cases += gr.cases;
        report.passed += gr.passed;
        report.accept_wrong += gr.accept_wrong.len();
        report.reject_wrong += gr.reject_wrong.len();
        report.details.push(gr);
    }
    Ok(report)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.to_string_lossy().ends_with(".cases.json") {
            out.push(p);
        }
    }
    Ok(())
}

/// Formats the report as a table.
pub fn table(r: &Report) -> String {
    let mut s = format!(
        "{:<24} {:>6} {:>6} {:>8} {:>8} {:>7} {:>10} {:>10}\n",
        "grammar", "cases", "passed", "acc_bad", "rej_bad", "tokens", "us/token", "max_ms"
    );
    for g in &r.details {
        if let Some(e) = &g.compile_error {
            s.push_str(&format!("{:<24} compile error: {e}\n", g.name));
            continue;
        }
        s.push_str(&format!(
            "{:<24} {:>6} {:>6} {:>8} {:>8} {:>7} {:>10.1} {:>10.2}\n",
            g.name,
            g.cases,
            g.passed,
            g.accept_wrong.len(),
            g.reject_wrong.len(),
            g.tokens,
            if g.tokens > 0 {
                g.mask_us / g.tokens as f64
            } else {
                0.0
            },
            g.max_mask_us / 1000.0
        ));
        for w in &g.accept_wrong {
            s.push_str(&format!("    accept string refused: {w:?}\n"));
        }
        for w in &g.reject_wrong {
            s.push_str(&format!("    reject string accepted: {w:?}\n"));
        }
    }
    s.push_str(&format!(
        "{} grammars, {} compile errors, {} cases, {} passed, {} accept wrong, {} reject wrong\n",
        r.grammars, r.compile_errors, r.cases, r.passed, r.accept_wrong, r.reject_wrong
    ));
    s
}
