//! Vocabulary decoding against the `tokenizers` crate, for every fetched tokenizer, the
//! default model's GGUF metadata, and tiktoken rank files.

mod common;

use std::sync::Arc;

use base64::Engine;
use ruvllm_engine::vocab::GgufVocab;
use ruvllm_engine::{Constraint, Grammar, Limits, Matcher, Vocabulary};

const ALL: &[&str] = &[
    "llama3_1",
    "qwen2_5",
    "gemma2",
    "gpt2",
    "llama2",
    "mistral_nemo",
    "deepseek_v3",
    "gpt4o",
];

/// Every non-special token, decoded in context after an anchor token, gives the bytes we
/// decoded (compared lossily, as `tokenizers` returns a String).
fn check_against_tokenizers(ours: &Vocabulary, theirs: &tokenizers::Tokenizer) {
    // A plain piece (not a byte-fallback token, which `tokenizers` decodes in groups).
    let anchor = theirs.token_to_id("x").expect("a piece for \"x\"");
    assert_eq!(ours.token_bytes(anchor), b"x");
    let anchor_text = theirs.decode(&[anchor], false).unwrap();
    assert_eq!(
        anchor_text,
        "x",
        "{}: anchor decodes to {anchor_text:?}",
        ours.name()
    );
    let mut checked = 0usize;
    for id in 0..ours.len() as u32 {
        if ours.is_special(id) || theirs.id_to_token(id).is_none() {
            continue;
        }
        let want = theirs.decode(&[anchor, id], false).unwrap();
        let mut bytes = b"x".to_vec();
        bytes.extend_from_slice(ours.token_bytes(id));
        let got = String::from_utf8_lossy(&bytes);
        assert_eq!(
            got,
            want,
            "{}: token {id} ({:?})",
            ours.name(),
            theirs.id_to_token(id)
        );
        checked += 1;
    }
    assert!(
        checked > 30_000,
        "{}: only {checked} tokens checked",
        ours.name()
    );
}

#[test]
fn tokenizer_json_vocabularies_match_tokenizers_decoding() {
    for name in ALL {
        let path = common::tokenizer(name);
        let ours = Vocabulary::from_tokenizer_json_file(&path).unwrap();
        let theirs = tokenizers::Tokenizer::from_file(&path).unwrap();
        check_against_tokenizers(&ours, &theirs);
        assert!(!ours.eos_tokens().is_empty(), "{name}: no EOS found");
        for &e in ours.eos_tokens() {
            assert!(ours.is_special(e), "{name}: EOS {e} is not special");
        }
    }
}

/// Multi-byte characters split across tokens (byte fallback, byte-level pieces) come back
/// together, and the encoder reproduces the text without a dummy prefix.
#[test]
fn partial_utf8_across_tokens() {
    let texts = [
        "日本語のテキスト",
        "emoji 🙂🚀 mix",
        "Ωμέγα ünïcödé",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ",
        "  two spaces",
        "tab\there\nnewline",
    ];
    for name in ALL {
        let ours = Vocabulary::from_tokenizer_json_file(common::tokenizer(name)).unwrap();
        let enc = ours.encoder().unwrap().clone();
        let mut saw_partial = false;
        for t in texts {
            let ids = enc.encode(t).unwrap();
            let mut joined = Vec::new();
            for &id in &ids {
                let b = ours.token_bytes(id);
                if std::str::from_utf8(b).is_err() {
                    saw_partial = true;
                }
                joined.extend_from_slice(b);
            }
            assert_eq!(
                String::from_utf8_lossy(&joined),
                t,
                "{name}: {t:?} -> {ids:?}"
            );
        }
        assert!(
            saw_partial,
            "{name}: no token split a character; the test texts are too easy"
        );
    }
}

#[test]
fn gguf_vocabulary_matches_a_tokenizer_built_from_the_same_metadata() {
    let g = GgufVocab::read_file(&common::model()).unwrap();
    assert_eq!(g.tokenizer_model(), Some("gpt2"));
    let ours = g.to_vocabulary().unwrap();
    assert_eq!(ours.len(), 49152);
    // Build an independent `tokenizers` BPE from the GGUF tokens and merges.
    let toks = g.tokens().unwrap();
    let merges = g.merges().unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> = toks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), serde_json::json!(i)))
        .collect();
    let cfg = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": null, "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": vocab, "merges": merges}
    });
    let theirs: tokenizers::Tokenizer = cfg.to_string().parse().unwrap();
    check_against_tokenizers(&ours, &theirs);
    // SmolLM2's chat markers are special and end turns.
    let im_end = ours.special_id("<|im_end|>").expect("<|im_end|>");
    assert!(ours.eos_tokens().contains(&im_end) || !ours.eos_tokens().is_empty());
    assert!(ours.is_special(ours.special_id("<|im_start|>").unwrap()));
    assert!(g.chat_template().is_some_and(|t| t.contains("im_start")));
}

#[test]
fn gguf_errors_are_clean() {
    assert!(GgufVocab::read(&b"NOPE"[..]).is_err());
    assert!(GgufVocab::read(&b"GGUF\x03\x00\x00\x00"[..]).is_err()); // truncated
                                                                     // A header claiming a 2^40-byte string must fail before allocating it.
    let mut bad = b"GGUF".to_vec();
    bad.extend_from_slice(&3u32.to_le_bytes());
    bad.extend_from_slice(&0u64.to_le_bytes());
    bad.extend_from_slice(&1u64.to_le_bytes());
    bad.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let e = GgufVocab::read(&bad[..]).unwrap_err().to_string();
    assert!(e.contains("limit"), "{e}");
}

#[test]
fn tiktoken_rank_file_round_trip() {
    let ours = Vocabulary::from_tokenizer_json_file(common::tokenizer("gpt4o")).unwrap();
    let mut text = String::new();
    let mut specials = Vec::new();
    for id in 0..ours.len() as u32 {
        let b = ours.token_bytes(id);
        if ours.is_special(id) {
            specials.push((String::from_utf8_lossy(b).into_owned(), id));
        } else if !b.is_empty() {
            text.push_str(&format!(
                "{} {id}\n",
                base64::engine::general_purpose::STANDARD.encode(b)
            ));
        }
    }
    let eot = ours.special_id("<|endoftext|>").unwrap();
    let tk = Vocabulary::from_tiktoken(&text, &specials, &[eot]).unwrap();
    assert_eq!(tk.len(), ours.len());
    for id in 0..ours.len() as u32 {
        assert_eq!(tk.token_bytes(id), ours.token_bytes(id), "token {id}");
        assert_eq!(tk.is_special(id), ours.is_special(id));
    }
    assert!(Vocabulary::from_tiktoken("!!notbase64 1\n", &[], &[]).is_err());
    assert!(Vocabulary::from_tiktoken("YQ== x\n", &[], &[]).is_err());
}

/// Special tokens never match grammar text, even when the grammar spells them; EOS is
/// allowed only once the output is complete.
#[test]
fn special_tokens_never_match_text() {
    let v = Arc::new(Vocabulary::from_tokenizer_json_file(common::tokenizer("llama3_1")).unwrap());
    let eot = v.special_id("<|eot_id|>").unwrap();
    let g = Grammar::from_gbnf(
        r#"root ::= "<|eot_id|>" | "<|begin_of_text|>x""#,
        &Limits::default(),
    )
    .unwrap();
    let c = Constraint::new(&g, v.clone(), &Limits::default()).unwrap();
    let mut m = Matcher::new(&c).unwrap();
    let mut mask = vec![0u32; v.mask_words()];
    m.compute_mask(&mut mask).unwrap();
    let allowed: Vec<u32> = (0..v.len() as u32)
        .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
        .collect();
    assert!(!allowed.is_empty());
    for t in &allowed {
        assert!(!v.is_special(*t), "special token {t} allowed");
    }
    assert!(
        m.commit_token(eot).is_err(),
        "EOS before the output is complete"
    );
    let bot = v.special_id("<|begin_of_text|>").unwrap();
    assert!(m.commit_token(bot).is_err());
    // Spell it out with single-byte text tokens, then EOS is fine.
    for b in b"<|eot_id|>" {
        m.commit_token(v.token_id(&[*b]).unwrap()).unwrap();
    }
    assert!(m.is_accepting());
    m.commit_token(eot).unwrap();
    assert!(m.is_finished());
}
