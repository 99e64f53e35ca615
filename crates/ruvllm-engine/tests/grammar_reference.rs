//! The engine against an independent reference recognizer (tests/common/reference.rs).
//!
//! * Every case file's expected verdicts agree with the reference (so the case files, which
//!   `ruvllm-bench grammar-cases` runs through the engine, are right).
//! * Random mask-guided walks: at each step, sampled tokens (from the mask and from the
//!   whole vocabulary) are in the mask exactly when the reference says the text stays a
//!   viable prefix; EOS is in the mask exactly when the reference accepts; a walk that ends
//!   with EOS produced a sentence.
//! * For every accepted case string and every byte offset, every vocabulary token that
//!   spells the next bytes of the string is in the mask.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use common::reference::Reference;
use proptest::prelude::*;
use ruvllm_engine::{Builtin, Constraint, Grammar, Limits, Matcher};
use serde_json::Value;

struct Case {
    name: String,
    grammar: Grammar,
    accept: Vec<String>,
    reject: Vec<String>,
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.to_string_lossy().ends_with(".cases.json") {
            out.push(p);
        }
    }
}

fn cases() -> &'static Vec<Case> {
    static C: OnceLock<Vec<Case>> = OnceLock::new();
    C.get_or_init(|| {
        let _ = common::shared_data();
        let mut files = Vec::new();
        collect(&common::repo().join("tests/grammars"), &mut files);
        files.sort();
        let limits = Limits::default();
        files
            .iter()
            .map(|f| {
                let v: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
                let name = f
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .replace(".cases.json", "");
                let grammar = if let Some(b) = v.get("builtin").and_then(|b| b.as_str()) {
                    Grammar::builtin(Builtin::from_name(b).unwrap(), &limits).unwrap()
                } else {
                    let gp = match v.get("gbnf_file").and_then(|g| g.as_str()) {
                        Some(p) => f.parent().unwrap().join(p),
                        None => f.with_file_name(format!("{name}.gbnf")),
                    };
                    Grammar::from_gbnf(&std::fs::read_to_string(&gp).unwrap(), &limits).unwrap()
                };
                let list = |k: &str| -> Vec<String> {
                    v.get(k)
                        .and_then(|a| a.as_array())
                        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
                        .unwrap_or_default()
                };
                Case {
                    name,
                    grammar,
                    accept: list("accept"),
                    reject: list("reject"),
                }
            })
            .collect()
    })
}

fn constraints() -> &'static Vec<Arc<Constraint>> {
    static C: OnceLock<Vec<Arc<Constraint>>> = OnceLock::new();
    C.get_or_init(|| {
        cases()
            .iter()
            .map(|c| Constraint::new(&c.grammar, common::llama3(), &Limits::default()).unwrap())
            .collect()
    })
}

#[test]
fn case_files_agree_with_reference() {
    let mut n = 0;
    for c in cases() {
        let r = Reference::new(&c.grammar);
        for s in &c.accept {
            assert!(
                r.accepts(s.as_bytes()),
                "{}: reference refuses accept string {s:?}",
                c.name
            );
            n += 1;
        }
        for s in &c.reject {
            assert!(
                !r.accepts(s.as_bytes()),
                "{}: reference accepts reject string {s:?}",
                c.name
            );
            n += 1;
        }
    }
    assert!(cases().len() >= 20, "at least 20 grammars");
    assert!(n >= 400, "at least 400 strings, found {n}");
}

fn bit(mask: &[u32], t: u32) -> bool {
    mask[(t >> 5) as usize] >> (t & 31) & 1 == 1
}

fn random_walk(gi: usize, seed: u64) {
    let case = &cases()[gi];
    let c = &constraints()[gi];
    let vocab = common::llama3();
    let reference = Reference::new(&case.grammar);
    let mut rng = common::Rng(seed | 1);
    let mut m = Matcher::new(c).unwrap();
    let mut text: Vec<u8> = Vec::new();
    let mut mask = vec![0u32; vocab.mask_words()];
    for _step in 0..10 {
        m.compute_mask(&mut mask).unwrap();
        let allowed: Vec<u32> = (0..vocab.len() as u32).filter(|&t| bit(&mask, t)).collect();
        let eos_allowed = vocab.eos_tokens().iter().any(|&e| bit(&mask, e));
        assert_eq!(
            eos_allowed,
            reference.accepts(&text),
            "{}: EOS vs reference after {:?}",
            case.name,
            String::from_utf8_lossy(&text)
        );
        // Sampled exactness checks.
        let mut probe: Vec<u32> = (0..6).map(|_| rng.below(vocab.len()) as u32).collect();
        let non_eos: Vec<u32> = allowed
            .iter()
            .copied()
            .filter(|t| !vocab.eos_tokens().contains(t))
            .collect();
        for _ in 0..6 {
            if !non_eos.is_empty() {
                probe.push(non_eos[rng.below(non_eos.len())]);
            }
        }
        for t in probe {
            if vocab.is_special(t) {
                if !vocab.eos_tokens().contains(&t) {
                    assert!(!bit(&mask, t), "special token {t} in mask");
                }
                continue;
            }
            let mut cand = text.clone();
            cand.extend_from_slice(vocab.token_bytes(t));
            if cand.len() > 64 {
                continue;
            }
            let want = reference.viable(&cand);
            assert_eq!(
                bit(&mask, t),
                want,
                "{}: token {t} {:?} after {:?}: mask says {}, reference says {want}",
                case.name,
                String::from_utf8_lossy(vocab.token_bytes(t)),
                String::from_utf8_lossy(&text),
                bit(&mask, t)
            );
        }
        if non_eos.is_empty() || (eos_allowed && rng.below(4) == 0) {
            if eos_allowed {
                let e = *vocab.eos_tokens().iter().find(|&&e| bit(&mask, e)).unwrap();
                m.commit_token(e).unwrap();
                assert!(
                    reference.accepts(&text),
                    "{}: walk ended on a non-sentence {:?}",
                    case.name,
                    String::from_utf8_lossy(&text)
                );
            }
            return;
        }
        // Prefer short tokens so walks get somewhere in few steps.
        let mut t = non_eos[rng.below(non_eos.len())];
        for _ in 0..3 {
            if vocab.token_bytes(t).len() <= 3 {
                break;
            }
            t = non_eos[rng.below(non_eos.len())];
        }
        m.commit_token(t).unwrap();
        text.extend_from_slice(vocab.token_bytes(t));
        if text.len() > 48 {
            return;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn mask_guided_walks_match_reference(gi in 0usize..1000, seed in any::<u64>()) {
        let gi = gi % cases().len();
        random_walk(gi, seed);
    }
}

#[test]
fn every_walk_grammar_is_exercised() {
    // Deterministic sweep so every grammar gets walks regardless of proptest's sampling.
    for gi in 0..cases().len() {
        for seed in [0x9E37_79B9u64, 12345, 777] {
            random_walk(gi, seed);
        }
    }
}

#[test]
fn next_tokens_of_accepted_strings_are_in_the_mask() {
    let vocab = common::llama3();
    let trie = vocab.trie();
    let mut mask = vec![0u32; vocab.mask_words()];
    let mut checked = 0usize;
    for (gi, case) in cases().iter().enumerate() {
        let c = &constraints()[gi];
        for s in &case.accept {
            let s = s.as_bytes();
            for i in 0..=s.len() {
                let mut m = Matcher::new(c).unwrap();
                assert!(matches!(
                    m.check_bytes(&s[..i]).unwrap(),
                    ruvllm_engine::CheckResult::Accepted
                        | ruvllm_engine::CheckResult::Incomplete { .. }
                ));
                m.compute_mask(&mut mask).unwrap();
                let eos = vocab.eos_tokens().iter().any(|&e| bit(&mask, e));
                if i == s.len() {
                    assert!(
                        eos,
                        "{}: EOS missing at the end of {:?}",
                        case.name,
                        String::from_utf8_lossy(s)
                    );
                }
                // Every token spelling s[i..i+len] must be allowed.
                let mut n = 0u32;
                for &b in &s[i..] {
                    match trie.child(n, b) {
                        Some(ch) => n = ch,
                        None => break,
                    }
                    for &t in trie.tokens_at(n) {
                        assert!(
                            bit(&mask, t),
                            "{}: token {:?} missing after {:?}",
                            case.name,
                            String::from_utf8_lossy(vocab.token_bytes(t)),
                            String::from_utf8_lossy(&s[..i])
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 1000);
}

/// `to_gbnf` round-trips: the printed grammar parses back to the same language.
#[test]
fn gbnf_printer_round_trips() {
    for c in cases() {
        let text = c.grammar.to_gbnf().unwrap();
        let back = Grammar::from_gbnf(&text, &Limits::default())
            .unwrap_or_else(|e| panic!("{}: {e}\n{text}", c.name));
        let (r1, r2) = (Reference::new(&c.grammar), Reference::new(&back));
        for s in c.accept.iter().chain(&c.reject) {
            assert_eq!(
                r1.accepts(s.as_bytes()),
                r2.accepts(s.as_bytes()),
                "{}: {s:?}\n{text}",
                c.name
            );
        }
    }
}

/// A rule that completes with a big origin set finds the items waiting for it through the
/// set's index (sets of 64 items or more), which must answer as a scan would and must not
/// outlive the set: after a rollback the set at the same index holds other items. The
/// texts are checked byte by byte against the reference, and the masks of a matcher that
/// rolled back from one branch to the other against a fresh matcher's.
#[test]
fn big_origin_sets_complete_through_their_index() {
    let mut text = String::from("root ::= \"x\" w | \"y\" z\nv ::= [0-9]+ | v \"-\" v\n");
    let alts = |tag: &str, n: usize| {
        (0..n)
            .map(|i| format!("v \"{tag}{i};\""))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    text += &format!("w ::= {}\n", alts("a", 80));
    text += &format!("z ::= \"q\" | {}\n", alts("b", 90));
    let g = Grammar::from_gbnf(&text, &Limits::default()).unwrap();
    let r = Reference::new(&g);
    let c = Constraint::new(&g, common::llama3(), &Limits::default()).unwrap();
    let texts = [
        "x12a5;",
        "x12b5;",
        "y7b89;",
        "y7a1;",
        "x1-2-3a79;",
        "y4-5b0;",
        "y4-5b90;",
        "yq",
    ];
    for t in texts {
        for n in 0..=t.len() {
            let prefix = &t.as_bytes()[..n];
            let mut m = Matcher::new(&c).unwrap();
            let got = m.check_bytes(prefix).unwrap();
            let want_viable = r.viable(prefix);
            match got {
                ruvllm_engine::CheckResult::Rejected { .. } => {
                    assert!(!want_viable, "{t:?}[..{n}]: refused, the reference goes on")
                }
                ruvllm_engine::CheckResult::Accepted => {
                    assert!(
                        r.accepts(prefix),
                        "{t:?}[..{n}]: accepted, not by the reference"
                    )
                }
                ruvllm_engine::CheckResult::Incomplete { .. } => assert!(
                    want_viable && !r.accepts(prefix),
                    "{t:?}[..{n}]: incomplete, the reference disagrees"
                ),
            }
        }
    }
    // One matcher through "x1-2-3a79;", rolled back to the start, then "y4-5b0;": every
    // mask as a fresh matcher's.
    let enc = common::llama3().encoder().unwrap().clone();
    let words = common::llama3().mask_words();
    let mask_of = |m: &mut Matcher| {
        let mut mask = vec![0u32; words];
        m.compute_mask(&mut mask).unwrap();
        mask
    };
    let mut m = Matcher::new(&c).unwrap();
    for t in ["x1-2-3a79;", "y4-5b0;"] {
        let toks = enc.encode(t).unwrap();
        for (i, &tok) in toks.iter().enumerate() {
            let mut fresh = Matcher::new(&c).unwrap();
            for &u in &toks[..i] {
                fresh.commit_token(u).unwrap();
            }
            assert!(mask_of(&mut m) == mask_of(&mut fresh), "{t:?}: mask {i}");
            m.commit_token(tok).unwrap();
        }
        assert!(m.is_accepting(), "{t:?}");
        m.rollback(m.num_tokens()).unwrap();
    }
}

/// Grammars with copies of rules (which the compiler merges, see
/// `Grammar::merge_equal_rules`), among them a copy of a recursive rule that refers to
/// it (merging makes a new cycle) and copies that differ only in what they refer to:
/// every string of up to 6 bytes over the grammar's alphabet gets the reference's
/// verdict (accepted, a viable prefix, or refused).
#[test]
fn merged_copies_keep_the_language() {
    let grammars = [
        (
            "root ::= y | q\ny ::= \"a\" z | \"b\"\nz ::= \"a\" z | \"b\"\nq ::= \"c\" y2\ny2 ::= \"a\" z | \"b\"",
            "abc",
        ),
        (
            "root ::= o1 | o2 \"!\" | o3 | o4 \"?\"\no4 ::= \"{\" kv4 \"}\"\nkv4 ::= \"k\" v4 | \"j\" [0-1]\nv4 ::= \"f\"\no1 ::= \"{\" kv1 (\",\" kv1)* \"}\"\no2 ::= \"{\" kv2 (\",\" kv2)* \"}\"\no3 ::= \"{\" kv3 \"}\"\nkv1 ::= \"k\" v1 | \"j\" [0-2]\nkv2 ::= \"k\" v2 | \"j\" [0-2]\nkv3 ::= \"k\" v1 | \"j\" [0-1]\nv1 ::= \"t\" | \"[\" w \"]\"\nv2 ::= \"t\" | \"[\" w \"]\"\nw ::= \"1\" | w \"1\"",
            "{},!?kjft[]10",
        ),
    ];
    // Sixteen distinct rules more, which the texts never reach (`~` is not in their
    // alphabets): the compiler searches grammars of 16 rules or more for copies.
    let pad: String = (0..16)
        .map(|i| format!("\npad{i} ::= \"~{i}\""))
        .collect::<String>()
        + "\npads ::= "
        + &(0..16)
            .map(|i| format!("pad{i}"))
            .collect::<Vec<_>>()
            .join(" | ");
    for (text, alphabet) in grammars {
        let text = text.replacen("root ::= ", "root ::= \"~\" pads | ", 1) + &pad;
        let text = text.as_str();
        let g = Grammar::from_gbnf(text, &Limits::default()).unwrap();
        assert!(g.rules.len() >= 16, "{text}");
        let r = Reference::new(&g);
        let c = Constraint::new(&g, common::llama3(), &Limits::default()).unwrap();
        let alphabet = alphabet.as_bytes();
        let mut layer: Vec<Vec<u8>> = vec![Vec::new()];
        let mut n = 0;
        for _ in 0..=6 {
            let mut next = Vec::new();
            for s in &layer {
                let mut m = Matcher::new(&c).unwrap();
                let got = match m.check_bytes(s).unwrap() {
                    ruvllm_engine::CheckResult::Accepted => 2,
                    ruvllm_engine::CheckResult::Incomplete { .. } => 1,
                    ruvllm_engine::CheckResult::Rejected { .. } => 0,
                };
                let want = if r.accepts(s) {
                    2
                } else if r.viable(s) {
                    1
                } else {
                    0
                };
                assert_eq!(got, want, "{text}\n{:?}", String::from_utf8_lossy(s));
                n += 1;
                // Only viable prefixes are extended (a refused one stays refused).
                if want > 0 {
                    next.extend(alphabet.iter().map(|&b| {
                        let mut t = s.clone();
                        t.push(b);
                        t
                    }));
                }
            }
            layer = next;
        }
        assert!(n > 50, "{n} strings");
    }
}
