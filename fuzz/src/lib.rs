//! Shared pieces of the fuzz targets.

use ruvllm_engine::{CompiledGrammar, Grammar, GrammarError, Limits};

/// Runs a grammar front end on arbitrary bytes (UTF-8 only) and compiles what it accepts,
/// with a 500 ms compile budget: every outcome must be a value or an error, never a panic.
pub fn front_end_then_compile(
    data: &[u8],
    front: fn(&str, &Limits) -> Result<Grammar, GrammarError>,
) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let limits = Limits {
        max_compile_time: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    if let Ok(g) = front(text, &limits) {
        let _ = CompiledGrammar::new(&g, &limits);
    }
}

/// The engine tests' reference recognizer (an interpreter of the grammar IR, independent of
/// the compiler and the Earley parser), shared here so the fuzzer checks against the same
/// oracle.
#[path = "../../crates/ruvllm-engine/tests/common/reference.rs"]
pub mod reference;

use ruvllm_engine::{Constraint, Matcher, Vocabulary};
use std::sync::{Arc, OnceLock};

/// A small vocabulary over the alphabet the generated grammars use: single bytes, merges,
/// a 2-byte character and its two halves (byte-level tokens), an EOS and another special.
fn small_vocab() -> Arc<Vocabulary> {
    static V: OnceLock<Arc<Vocabulary>> = OnceLock::new();
    V.get_or_init(|| {
        let mut toks: Vec<Vec<u8>> = [
            "a", "b", "c", "ab", "ba", "abc", "aa", "bb", "\"", "\\", "\"a", " ", "-", "0", "1",
            "01", "é",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        toks.push(vec![0xC3]);
        toks.push(vec![0xA9]);
        toks.push(b"<eos>".to_vec());
        toks.push(b"<pad>".to_vec());
        let n = toks.len();
        let mut special = vec![false; n];
        special[n - 2] = true;
        special[n - 1] = true;
        Arc::new(Vocabulary::new("fuzz", toks, special, vec![n as u32 - 2]).unwrap())
    })
    .clone()
}

/// Reads bytes as a program that writes a GBNF grammar of four rules (`root`, `r1`..`r3`)
/// with literals, classes, references (recursion included), sequences, alternations and
/// every repetition form.
struct GrammarWriter<'a> {
    data: &'a [u8],
    pos: usize,
}

impl GrammarWriter<'_> {
    fn next(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn expr(&mut self, depth: u32, out: &mut String) {
        const LITS: [&str; 8] = [
            "\"a\"", "\"b\"", "\"ab\"", "\"\\\"\"", "\"c\"", "\"\"", "\"é\"", "\"01\"",
        ];
        const CLASSES: [&str; 7] = ["[ab]", "[^a]", "[a-c]", "[\"\\\\]", ".", "[0-1]", "[^\"]"];
        let op = self.next();
        let kind = if depth >= 4 { op % 2 } else { op % 10 };
        match kind {
            0 => out.push_str(LITS[(op / 16) as usize % LITS.len()]),
            1 => out.push_str(CLASSES[(op / 16) as usize % CLASSES.len()]),
            2 => out.push_str(["root", "r1", "r2", "r3"][(op / 16) as usize % 4]),
            3 | 4 => {
                let n = 2 + (op / 16) as usize % 2;
                out.push('(');
                for i in 0..n {
                    if i > 0 {
                        out.push_str(if kind == 3 { " " } else { " | " });
                    }
                    self.expr(depth + 1, out);
                }
                out.push(')');
            }
            _ => {
                out.push('(');
                self.expr(depth + 1, out);
                out.push(')');
                match kind {
                    5 => out.push('*'),
                    6 => out.push('+'),
                    7 => out.push('?'),
                    // Long counts: counted lexemes (short outputs reach the low bounds and
                    // the shared middle counts, not the top). Only at a rule's top: nested
                    // long counts made the reference recognizer time out (14 s for one input).
                    9 if op & 8 != 0 && depth == 0 => {
                        let m = (op / 16) % 4;
                        match (op / 64) % 3 {
                            0 => out.push_str(&format!("{{{m},300}}")),
                            1 => out.push_str(&format!("{{{},}}", 260 + m as u32)),
                            _ => out.push_str(&format!("{{{m},{}}}", 257 + m as u32 * 5)),
                        }
                    }
                    _ => {
                        let m = (op / 16) % 3;
                        match (op / 64) % 3 {
                            0 => out.push_str(&format!("{{{m}}}")),
                            1 => out.push_str(&format!("{{{m},}}")),
                            _ => out.push_str(&format!("{{{m},{}}}", m + (op / 32) % 3)),
                        }
                    }
                }
            }
        }
    }
}

/// The matcher fuzz target: builds a grammar from the first bytes, then replays the rest as
/// decoding actions (commit an allowed token, try an arbitrary token, roll back). At every
/// step each token's mask bit must equal the reference's verdict on the text plus that
/// token, EOS must be allowed exactly when the reference accepts the text, a refused commit
/// must leave the state unchanged, and forced bytes must agree with every allowed token.
/// Panics (a fuzzer finding) on any disagreement.
pub fn matcher_check(data: &[u8]) {
    let Some((&glen, rest)) = data.split_first() else {
        return;
    };
    let glen = (glen as usize % 48).min(rest.len());
    let (gbytes, actions) = rest.split_at(glen);
    let mut w = GrammarWriter {
        data: gbytes,
        pos: 0,
    };
    let mut text = String::new();
    for name in ["root", "r1", "r2", "r3"] {
        text.push_str(name);
        text.push_str(" ::= ");
        w.expr(0, &mut text);
        text.push('\n');
    }
    let limits = ruvllm_engine::Limits {
        max_compile_time: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    let Ok(g) = ruvllm_engine::Grammar::from_gbnf(&text, &limits) else {
        return;
    };
    let vocab = small_vocab();
    let Ok(c) = Constraint::new(&g, vocab.clone(), &limits) else {
        return;
    };
    // The reference treats a partial match as viable without asking whether it can
    // complete, so it is exact only when every rule derives some string.
    let exact = g.productive().iter().all(|&p| p);
    let reference = reference::Reference::new(&g);
    let Ok(mut m) = Matcher::new(&c) else { return };
    let eos = vocab.eos_tokens()[0];
    let mut out: Vec<u8> = Vec::new();
    let mut lens: Vec<usize> = Vec::new();
    let mut mask = vec![0u32; vocab.mask_words()];
    let bit = |mask: &[u32], t: u32| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1;
    for &a in actions.iter().take(16) {
        if m.compute_mask(&mut mask).is_err() {
            return; // a budget error is an allowed outcome
        }
        let allowed: Vec<u32> = (0..vocab.len() as u32).filter(|&t| bit(&mask, t)).collect();
        if exact {
            for t in 0..vocab.len() as u32 {
                let want = if t == eos {
                    reference.accepts(&out)
                } else if vocab.is_special(t) {
                    false
                } else {
                    let mut cand = out.clone();
                    cand.extend_from_slice(vocab.token_bytes(t));
                    reference.viable(&cand)
                };
                assert_eq!(
                    bit(&mask, t),
                    want,
                    "grammar:\n{text}token {t} {:?} after {:?}",
                    String::from_utf8_lossy(vocab.token_bytes(t)),
                    String::from_utf8_lossy(&out)
                );
            }
        }
        if let Ok(forced) = m.forced_bytes() {
            if !forced.is_empty() {
                assert!(!bit(&mask, eos), "forced text {forced:?} while EOS allowed");
                for &t in &allowed {
                    let b = vocab.token_bytes(t);
                    let k = b.len().min(forced.len());
                    assert_eq!(
                        &b[..k],
                        &forced[..k],
                        "grammar:\n{text}forced {forced:?} vs {t}"
                    );
                }
            }
        }
        match a % 8 {
            0..=4 => {
                let Some(&t) = allowed.get((a / 8) as usize % allowed.len().max(1)) else {
                    return;
                };
                m.commit_token(t).expect("an allowed token commits");
                if t == eos {
                    m.compute_mask(&mut mask).unwrap();
                    assert!(mask.iter().all(|&x| x == 0), "mask after EOS");
                    assert!(m.commit_token(0).is_err());
                    return;
                }
                lens.push(out.len());
                out.extend_from_slice(vocab.token_bytes(t));
            }
            5 | 6 => {
                let t = (a / 8) as u32 % vocab.len() as u32;
                let ok = m.commit_token(t).is_ok();
                assert_eq!(ok, bit(&mask, t), "commit of {t} disagrees with the mask");
                if ok {
                    if t == eos {
                        return;
                    }
                    lens.push(out.len());
                    out.extend_from_slice(vocab.token_bytes(t));
                }
            }
            _ => {
                let n = ((a / 8) as usize % 3 + 1).min(lens.len());
                m.rollback(n).expect("rollback within history");
                for _ in 0..n {
                    out.truncate(lens.pop().unwrap());
                }
            }
        }
        if out.len() > 40 {
            return;
        }
    }
}
