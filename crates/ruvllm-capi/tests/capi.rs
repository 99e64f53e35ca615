//! The C ABI called as C calls it: through raw pointers, with NULLs, bad input, short
//! buffers, and a real vocabulary (the Llama 3.1 tokenizer and the default model's GGUF).

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::ptr::{null, null_mut};

use ruvllm::*;

fn asset(rel: &str) -> CString {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../assets")
        .join(rel);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh",
        p.display()
    );
    CString::new(p.to_str().unwrap()).unwrap()
}

fn err_text(buf: &[c_char]) -> String {
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn compile(e: *const RuvllmEngine, kind: u32, text: &str) -> Result<*mut RuvllmGrammar, String> {
    let t = CString::new(text).unwrap();
    let mut err = [0 as c_char; 512];
    let g =
        unsafe { ruvllm_grammar_compile(e, kind, t.as_ptr(), null(), err.as_mut_ptr(), err.len()) };
    if g.is_null() {
        Err(err_text(&err))
    } else {
        Ok(g)
    }
}

fn bits(row: &[u32]) -> Vec<u32> {
    (0..row.len() as u32 * 32)
        .filter(|t| row[*t as usize / 32] >> (t % 32) & 1 == 1)
        .collect()
}

#[test]
fn a_schema_walk_through_the_c_abi() {
    unsafe {
        let path = asset("tokenizers/llama3_1/tokenizer.json");
        let mut err = [0 as c_char; 256];
        // A logits width past the tokenizer's 128,256 tokens: the padding is never allowed.
        let v =
            ruvllm_vocabulary_from_file(path.as_ptr(), 128_300, null(), 0, err.as_mut_ptr(), 256);
        assert!(!v.is_null(), "{}", err_text(&err));
        assert_eq!(ruvllm_vocabulary_n_vocab(v), 128_300);
        let e = ruvllm_engine_new(v);
        ruvllm_vocabulary_free(v); // the engine keeps its own reference
        let schema = CString::new(r#"{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}"#).unwrap();
        let compact = RuvllmSchemaOptions {
            whitespace: RUVLLM_WHITESPACE_COMPACT,
            any_order: false,
            strict: false,
            validator_semantics: false,
        };
        let g = ruvllm_grammar_compile(
            e,
            RUVLLM_KIND_JSON_SCHEMA,
            schema.as_ptr(),
            &compact,
            err.as_mut_ptr(),
            256,
        );
        assert!(!g.is_null(), "{}", err_text(&err));
        let m = ruvllm_matcher_new(g);
        ruvllm_grammar_free(g); // the matcher keeps its own reference
        let words = 128_300usize.div_ceil(32);
        let mut row = vec![0u32; words + 1];
        row[words] = 0xdead_beef; // past the row: left alone
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, row.as_mut_ptr(), words + 1, -1),
            0
        );
        assert_eq!(row[words], 0xdead_beef);
        assert!(bits(&row[..words]).iter().all(|&t| t < 128_256));
        // The forced text is the whole opening up to the value.
        let mut ff = [0u8; 64];
        let n = ruvllm_matcher_compute_ff_bytes(m, ff.as_mut_ptr(), ff.len());
        assert_eq!(&ff[..n], b"{\"ok\":");
        let mut toks = [0u32; 16];
        let nt = ruvllm_matcher_compute_ff_tokens(m, toks.as_mut_ptr(), toks.len());
        assert!(nt > 0 && nt <= 16);
        // A short buffer gets the count, and no write past it.
        assert_eq!(
            ruvllm_matcher_compute_ff_tokens(m, toks.as_mut_ptr(), 0),
            nt
        );
        assert!(ruvllm_matcher_consume_tokens(m, toks.as_ptr(), nt));
        let lookup = ruvllm_engine::Vocabulary::from_file(path.to_str().unwrap()).unwrap();
        let id = |s: &str| lookup.token_id(s.as_bytes()).unwrap();
        // Forced tokens stop where the tokenization is still open (`":` may be one token
        // of several); the rest of the forced text is written by fewest tokens.
        let n = ruvllm_matcher_compute_ff_bytes(m, ff.as_mut_ptr(), ff.len());
        assert_eq!(&ff[..n], b"\":");
        let rest = lookup.fewest_tokens(&ff[..n]).unwrap();
        assert!(ruvllm_matcher_consume_tokens(m, rest.as_ptr(), rest.len()));
        let (t_true, t_close, t_one) = (id("true"), id("}"), id("1"));
        // A draft: its valid prefix is counted without advancing.
        assert_eq!(
            ruvllm_matcher_validate_tokens(m, [t_true, t_close, t_close].as_ptr(), 3),
            2
        );
        assert!(!ruvllm_matcher_is_accepting(m));
        // A refused token stops the matcher with an error: EOS only, until a rollback.
        assert!(!ruvllm_matcher_consume_token(m, t_one));
        let msg = CStr::from_ptr(ruvllm_matcher_get_error(m))
            .to_string_lossy()
            .into_owned();
        assert!(msg.contains("not allowed"), "{msg}");
        assert!(ruvllm_matcher_is_stopped(m));
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, row.as_mut_ptr(), words, -1),
            0
        );
        assert_eq!(bits(&row[..words]), lookup.eos_tokens().to_vec());
        assert_eq!(ruvllm_matcher_rollback(m, 0), 0);
        assert!(ruvllm_matcher_get_error(m).is_null());
        assert!(ruvllm_matcher_consume_tokens(
            m,
            [t_true, t_close].as_ptr(),
            2
        ));
        assert!(ruvllm_matcher_is_accepting(m));
        // The budget mask at 1 token left: only EOS completes in time.
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, row.as_mut_ptr(), words, 1),
            0
        );
        assert_eq!(bits(&row[..words]), lookup.eos_tokens().to_vec());
        assert!(ruvllm_matcher_consume_token(m, lookup.eos_tokens()[0]));
        assert!(ruvllm_matcher_is_stopped(m) && ruvllm_matcher_get_error(m).is_null());
        assert_eq!(
            ruvllm_matcher_rollback(m, 99),
            -1,
            "more than were committed"
        );
        assert_eq!(ruvllm_matcher_reset(m), 0);
        assert!(!ruvllm_matcher_is_stopped(m));
        // Short and NULL buffers are refused, and nothing is written.
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, row.as_mut_ptr(), words - 1, -1),
            -1
        );
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, null_mut(), words, -1),
            -1
        );
        ruvllm_matcher_free(m);
        ruvllm_engine_free(e);
    }
}

#[test]
fn bad_input_gives_errors_not_crashes() {
    unsafe {
        let mut err = [0 as c_char; 64];
        let missing = CString::new("/nonexistent/tokenizer.json").unwrap();
        assert!(ruvllm_vocabulary_from_file(
            missing.as_ptr(),
            0,
            null(),
            0,
            err.as_mut_ptr(),
            err.len()
        )
        .is_null());
        let msg = err_text(&err);
        assert!(msg.starts_with("/nonexistent/tokenizer.json"), "{msg}");
        assert!(msg.len() < 64, "the message is cut to the buffer");
        assert!(ruvllm_vocabulary_from_file(null(), 0, null(), 0, null_mut(), 0).is_null());
        let bad = CString::new("{not json").unwrap();
        assert!(ruvllm_vocabulary_from_tokenizer_json(
            bad.as_ptr(),
            0,
            null(),
            0,
            err.as_mut_ptr(),
            1
        )
        .is_null());
        assert_eq!(err[0], 0, "a one-byte buffer gets the terminator only");
        assert!(ruvllm_engine_new(null()).is_null());

        // A small vocabulary from token bytes, as llama.cpp gives them.
        let toks: [&[u8]; 5] = [b"a", b"b", b"ab", b"\xff", b""];
        let ptrs: Vec<*const u8> = toks.iter().map(|t| t.as_ptr()).collect();
        let lens: Vec<usize> = toks.iter().map(|t| t.len()).collect();
        let special = [false, false, false, false, true];
        let no_eos = ruvllm_vocabulary_from_tokens(
            ptrs.as_ptr(),
            lens.as_ptr(),
            special.as_ptr(),
            5,
            0,
            null(),
            0,
            err.as_mut_ptr(),
            err.len(),
        );
        assert!(no_eos.is_null() && err_text(&err).contains("EOS"));
        let v = ruvllm_vocabulary_from_tokens(
            ptrs.as_ptr(),
            lens.as_ptr(),
            special.as_ptr(),
            5,
            64,
            [4u32].as_ptr(),
            1,
            err.as_mut_ptr(),
            err.len(),
        );
        assert!(!v.is_null(), "{}", err_text(&err));
        let e = ruvllm_engine_new(v);
        let mut big = [0 as c_char; 512];
        for (kind, text, want) in [
            (RUVLLM_KIND_GBNF, "root ::= \"a", "1:"),
            (RUVLLM_KIND_REGEX, "(a", "regex"),
            (
                RUVLLM_KIND_JSON_SCHEMA,
                r#"{"properties":{"x":{"type":"strin"}}}"#,
                "/properties/x",
            ),
            (RUVLLM_KIND_JSON_SCHEMA, "{", "line 1"),
            (RUVLLM_KIND_CHOICES, "[1]", "choices"),
            (RUVLLM_KIND_BUILTIN, "yaml", "yaml"),
            (9, "x", "kind 9"),
        ] {
            let t = CString::new(text).unwrap();
            let g =
                ruvllm_grammar_compile(e, kind, t.as_ptr(), null(), big.as_mut_ptr(), big.len());
            assert!(g.is_null(), "{text}");
            let msg = err_text(&big);
            assert!(
                msg.to_lowercase().contains(&want.to_lowercase()),
                "{text}: {msg}"
            );
        }
        let t = CString::new("ab").unwrap();
        let bad_ws = RuvllmSchemaOptions {
            whitespace: 7,
            any_order: false,
            strict: false,
            validator_semantics: false,
        };
        assert!(ruvllm_grammar_compile(
            e,
            RUVLLM_KIND_JSON_SCHEMA,
            t.as_ptr(),
            &bad_ws,
            big.as_mut_ptr(),
            big.len()
        )
        .is_null());
        assert!(ruvllm_grammar_compile(
            null(),
            RUVLLM_KIND_REGEX,
            t.as_ptr(),
            null(),
            big.as_mut_ptr(),
            big.len()
        )
        .is_null());
        assert!(ruvllm_grammar_compile(
            e,
            RUVLLM_KIND_REGEX,
            null(),
            null(),
            big.as_mut_ptr(),
            big.len()
        )
        .is_null());
        let invalid_utf8 = [0xffu8 as c_char, 0];
        assert!(ruvllm_grammar_compile(
            e,
            RUVLLM_KIND_REGEX,
            invalid_utf8.as_ptr(),
            null(),
            big.as_mut_ptr(),
            big.len()
        )
        .is_null());
        assert!(err_text(&big).contains("UTF-8"));

        // A matcher from a NULL grammar is in error, never NULL; it fills nothing.
        let m = ruvllm_matcher_new(null());
        assert!(!m.is_null());
        assert!(CStr::from_ptr(ruvllm_matcher_get_error(m))
            .to_str()
            .unwrap()
            .contains("NULL"));
        let mut row = [0u32; 2];
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, row.as_mut_ptr(), 2, -1),
            -1
        );
        assert!(ruvllm_matcher_is_stopped(m));
        assert!(!ruvllm_matcher_consume_token(m, 0));
        ruvllm_matcher_free(m);
        // NULL handles everywhere else: defined answers.
        assert!(!ruvllm_matcher_consume_token(null_mut(), 0));
        assert!(ruvllm_matcher_is_stopped(null_mut()));
        assert_eq!(ruvllm_matcher_rollback(null_mut(), 0), -1);
        assert!(!ruvllm_matcher_get_error(null()).is_null());
        ruvllm_matcher_free(null_mut());
        ruvllm_grammar_free(null_mut());

        // Padding (ids 5..64) is refused and never allowed; EOS only afterwards.
        let g = compile(e, RUVLLM_KIND_REGEX, "(ab)+").unwrap();
        let m = ruvllm_matcher_new(g);
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, row.as_mut_ptr(), 2, -1),
            0
        );
        assert_eq!(bits(&row), vec![0, 2]);
        assert!(!ruvllm_matcher_consume_token(m, 40));
        assert!(CStr::from_ptr(ruvllm_matcher_get_error(m))
            .to_str()
            .unwrap()
            .contains("padding"));
        assert_eq!(
            ruvllm_matcher_fill_next_token_bitmask(m, row.as_mut_ptr(), 2, -1),
            0
        );
        assert_eq!(bits(&row), vec![4]);
        assert!(!ruvllm_matcher_consume_token(m, 1_000_000));
        // The batch fill refuses a matcher given twice, and writes nothing.
        let ms = [m, m];
        row = [7, 7];
        assert_eq!(
            ruvllm_fill_next_token_bitmask_par(ms.as_ptr(), 2, row.as_mut_ptr(), 2, 2),
            -1
        );
        assert_eq!(row, [7, 7]);
        ruvllm_matcher_free(m);
        ruvllm_grammar_free(g);
        ruvllm_engine_free(e);
        ruvllm_vocabulary_free(v);
        assert!(!CStr::from_ptr(ruvllm_version())
            .to_str()
            .unwrap()
            .is_empty());
    }
}

#[test]
fn batch_fill_on_two_threads_equals_one_by_one() {
    unsafe {
        let path = asset("models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let v = ruvllm_vocabulary_from_file(path.as_ptr(), 0, null(), 0, null_mut(), 0);
        assert!(!v.is_null());
        let n_vocab = ruvllm_vocabulary_n_vocab(v);
        let words = n_vocab.div_ceil(32);
        let e = ruvllm_engine_new(v);
        let g = compile(
            e,
            RUVLLM_KIND_GBNF,
            "root ::= \"[\" item (\", \" item)* \"]\"\nitem ::= [0-9]+ | \"\\\"\" [a-z]* \"\\\"\"",
        )
        .unwrap();
        let lookup = ruvllm_engine::Vocabulary::from_file(path.to_str().unwrap()).unwrap();
        let text_tokens = lookup.fewest_tokens(b"[12, \"ab\", 3").unwrap();
        let ms: Vec<*mut RuvllmMatcher> = (0..text_tokens.len())
            .map(|i| {
                let m = ruvllm_matcher_new(g);
                assert!(ruvllm_matcher_consume_tokens(m, text_tokens.as_ptr(), i));
                m
            })
            .collect();
        let mut one = vec![0u32; ms.len() * words];
        for (i, &m) in ms.iter().enumerate() {
            assert_eq!(
                ruvllm_matcher_fill_next_token_bitmask(
                    m,
                    one.as_mut_ptr().add(i * words),
                    words,
                    -1
                ),
                0
            );
        }
        let mut par = vec![0u32; ms.len() * words];
        assert_eq!(
            ruvllm_fill_next_token_bitmask_par(ms.as_ptr(), ms.len(), par.as_mut_ptr(), words, 2),
            0
        );
        assert_eq!(one, par);
        // Distinct rows: the test compares something.
        assert_ne!(&one[..words], &one[words..2 * words]);
        for m in ms {
            ruvllm_matcher_free(m);
        }
        ruvllm_grammar_free(g);
        ruvllm_engine_free(e);
        ruvllm_vocabulary_free(v);
    }
}
