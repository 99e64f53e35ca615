//! The C ABI of the engine: `include/ruvllm.h` (generated from this file by cbindgen and
//! committed; the crate's tests check it is current), `libruvllm.so` and `libruvllm.a`.
//!
//! The functions mirror the Python package (`crates/ruvllm-py`) and llguidance's and
//! XGrammar's C APIs, so that an engine written in C or C++ (llama.cpp, an Android app
//! through JNI, an iOS app) integrates it the way it integrates those:
//!
//! * opaque handles: [`RuvllmVocabulary`] (token bytes, EOS ids, the logits width),
//!   [`RuvllmEngine`] (the caches of one vocabulary), [`RuvllmGrammar`] (a compiled
//!   constraint, shared by any number of matchers) and [`RuvllmMatcher`] (one sequence);
//! * constructors that can fail return NULL and write the reason into a caller's buffer;
//!   a matcher is never NULL: one that cannot work is in an error state
//!   ([`ruvllm_matcher_get_error`]), and its row allows EOS only, as after a refused token;
//! * every entry point catches panics (none is expected; a caught one becomes an error
//!   return), checks its pointers for NULL and its sizes against the handle's, and never
//!   writes outside the buffer and length it was given.
//!
//! Threads: vocabularies, engines and grammars may be shared between threads; a matcher
//! is used by one thread at a time. [`ruvllm_fill_next_token_bitmask_par`] fills many
//! matchers' rows on several threads.
//!
//! The llama.cpp sampler (`llama/ruvllm_llama.c`) is C over this ABI: it builds the
//! vocabulary from the model's own token pieces and masks `llama_token_data_array` entries
//! by token id.

use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use ruvllm_engine as eng;
use ruvllm_matcher::{compile, words_of, JsonSchemaOptions, SeqMatcher, Source, WhitespaceMode};

/// Grammar kind: a JSON Schema's text.
pub const RUVLLM_KIND_JSON_SCHEMA: u32 = 0;
/// Grammar kind: a GBNF grammar (llama.cpp's format).
pub const RUVLLM_KIND_GBNF: u32 = 1;
/// Grammar kind: a regular expression the whole output must match.
pub const RUVLLM_KIND_REGEX: u32 = 2;
/// Grammar kind: a JSON array of strings; the output is exactly one of them.
pub const RUVLLM_KIND_CHOICES: u32 = 3;
/// Grammar kind: a built-in grammar's name (json, json_object, jsonl, csv, xml).
pub const RUVLLM_KIND_BUILTIN: u32 = 4;

/// Grammar kind: a structural tag's JSON text (`{"structures": [{"begin", "schema",
/// "end"}], "triggers": [...]}`): free text, and tags holding JSON of their schema.
pub const RUVLLM_KIND_STRUCTURAL_TAG: u32 = 5;

/// Whitespace in JSON: compact or pretty-printed, no runaway (the default).
pub const RUVLLM_WHITESPACE_BOUNDED: u32 = 0;
/// Whitespace in JSON: none.
pub const RUVLLM_WHITESPACE_COMPACT: u32 = 1;
/// Whitespace in JSON: any, up to 20 characters at a time.
pub const RUVLLM_WHITESPACE_FLEXIBLE: u32 = 2;

/// How a JSON Schema is compiled; pass NULL for the defaults (all fields 0).
#[repr(C)]
pub struct RuvllmSchemaOptions {
    /// One of the `RUVLLM_WHITESPACE_*` values.
    pub whitespace: u32,
    /// Properties in any order instead of the schema's.
    pub any_order: bool,
    /// OpenAI's strict mode: objects are closed where `additionalProperties` is unsaid.
    pub strict: bool,
    /// Every document a validator accepts (for checking text), instead of the generation
    /// defaults (numbers as encoders write them, unique keys).
    pub validator_semantics: bool,
}

/// A vocabulary: every token's bytes, the EOS ids and the model's logits width.
pub struct RuvllmVocabulary {
    inner: Arc<eng::Vocabulary>,
    n_vocab: usize,
}

/// The caches of one vocabulary, shared by every grammar compiled in it.
pub struct RuvllmEngine {
    inner: eng::Engine,
    n_vocab: usize,
}

/// A compiled constraint bound to an engine's vocabulary.
pub struct RuvllmGrammar {
    inner: Arc<eng::Constraint>,
    n_vocab: usize,
}

/// One sequence under a grammar.
pub struct RuvllmMatcher {
    /// `None` when the matcher could not be made (its reason is in `failed`).
    seq: Option<SeqMatcher>,
    failed: Option<String>,
    /// What an EOS-only row sets, and the logits width, for a matcher without `seq`.
    eos: Vec<u32>,
    n_vocab: usize,
    /// The error message as C text, refreshed after every call that can change it.
    error_c: Option<CString>,
}

impl RuvllmMatcher {
    fn failed(why: String, eos: Vec<u32>, n_vocab: usize) -> RuvllmMatcher {
        let mut m = RuvllmMatcher {
            seq: None,
            failed: Some(why),
            eos,
            n_vocab,
            error_c: None,
        };
        m.sync();
        m
    }

    fn error(&self) -> Option<&str> {
        self.failed
            .as_deref()
            .or_else(|| self.seq.as_ref().and_then(|s| s.error()))
    }

    fn sync(&mut self) {
        self.error_c = self
            .error()
            .map(|e| CString::new(e.replace('\0', "\\0")).unwrap_or_default());
    }

    fn words(&self) -> usize {
        words_of(self.n_vocab)
    }

    /// The next row: the matcher's, or EOS only for a matcher that could not be made.
    fn fill(&mut self, tokens_left: Option<usize>) {
        if let Some(s) = self.seq.as_mut() {
            s.fill(tokens_left);
        }
        self.sync();
    }

    fn row_into(&self, dst: &mut [u32]) {
        match &self.seq {
            Some(s) => dst.copy_from_slice(s.row()),
            None => {
                dst.fill(0);
                for &e in &self.eos {
                    if let Some(w) = dst.get_mut(e as usize / 32) {
                        *w |= 1 << (e % 32);
                    }
                }
            }
        }
    }
}

/// Runs `f`, turning a panic into `fallback`.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// Writes `msg` into `err` (NUL-terminated, cut to `err_len - 1` bytes at a character
/// boundary) when `err` is not NULL and `err_len > 0`.
///
/// # Safety
/// `err` is NULL or points to `err_len` writable bytes.
unsafe fn write_err(err: *mut c_char, err_len: usize, msg: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let mut n = msg.len().min(err_len - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller gives `err_len` writable bytes; `n + 1 <= err_len`.
    let dst = unsafe { std::slice::from_raw_parts_mut(err as *mut u8, n + 1) };
    dst[..n].copy_from_slice(&msg.as_bytes()[..n]);
    dst[n] = 0;
}

/// The UTF-8 text of a C string.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the caller's contract.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|e| format!("{what} is not UTF-8 (byte {})", e.valid_up_to()))
}

/// A slice from a C pointer and length (NULL is allowed when `len` is 0).
///
/// # Safety
/// `p` is NULL with `len == 0`, or points to `len` readable items.
unsafe fn slice<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T], String> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Drops a handle made by `Box::into_raw` (NULL is ignored; a panic in a destructor is
/// caught).
///
/// # Safety
/// `p` is NULL or came from `Box::into_raw` and is not freed before.
unsafe fn free_box<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's contract.
        guard((), || drop(unsafe { Box::from_raw(p) }));
    }
}

fn finish_vocab(
    mut v: eng::Vocabulary,
    n_vocab: usize,
    eos: &[u32],
) -> Result<RuvllmVocabulary, String> {
    if !eos.is_empty() {
        v.set_eos_tokens(eos.to_vec()).map_err(|e| e.to_string())?;
    }
    let n = if n_vocab == 0 { v.len() } else { n_vocab };
    if n < v.len() {
        return Err(format!(
            "n_vocab {n} is smaller than the tokenizer's {} tokens",
            v.len()
        ));
    }
    Ok(RuvllmVocabulary {
        inner: Arc::new(v),
        n_vocab: n,
    })
}

fn boxed_or_err<T>(r: Result<T, String>, err: *mut c_char, err_len: usize) -> *mut T {
    match r {
        Ok(v) => Box::into_raw(Box::new(v)),
        Err(e) => {
            // SAFETY: forwarded from the entry point's contract on `err`.
            unsafe { write_err(err, err_len, &e) };
            std::ptr::null_mut()
        }
    }
}

/// Loads a vocabulary from a file: a `tokenizer.json`, a GGUF model or a `*.tiktoken` file.
/// `n_vocab`: the model's logits width (0: the tokenizer's size; never smaller); `eos`,
/// `n_eos`: the ids that end a generation (none: the tokenizer's). NULL on failure, with
/// the reason in `err` (`err_len` bytes, may be NULL). Cost: reading the file and building
/// the token trie (about half a second for a 128k vocabulary).
///
/// # Safety
/// `path` is a NUL-terminated string; `eos` points to `n_eos` ids (or is NULL when 0);
/// `err` is NULL or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_vocabulary_from_file(
    path: *const c_char,
    n_vocab: usize,
    eos: *const u32,
    n_eos: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut RuvllmVocabulary {
    let r = guard(Err("internal error (panic)".into()), || {
        // SAFETY: the function's contract.
        let path = unsafe { text(path, "path") }?;
        let eos = unsafe { slice(eos, n_eos, "eos") }?;
        let v = eng::Vocabulary::from_file(path).map_err(|e| format!("{path}: {e}"))?;
        finish_vocab(v, n_vocab, eos)
    });
    boxed_or_err(r, err, err_len)
}

/// A vocabulary from the text of a Hugging Face `tokenizer.json` (see
/// [`ruvllm_vocabulary_from_file`] for the other arguments).
///
/// # Safety
/// As [`ruvllm_vocabulary_from_file`], with `json` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_vocabulary_from_tokenizer_json(
    json: *const c_char,
    n_vocab: usize,
    eos: *const u32,
    n_eos: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut RuvllmVocabulary {
    let r = guard(Err("internal error (panic)".into()), || {
        // SAFETY: the function's contract.
        let json = unsafe { text(json, "json") }?;
        let eos = unsafe { slice(eos, n_eos, "eos") }?;
        let v = eng::Vocabulary::from_tokenizer_json(json, None).map_err(|e| e.to_string())?;
        finish_vocab(v, n_vocab, eos)
    });
    boxed_or_err(r, err, err_len)
}

/// A vocabulary from each token's bytes, as an inference engine knows them (llama.cpp's
/// `llama_token_to_piece`): token `i` writes `tokens[i][0..lens[i]]`; `special[i]` marks a
/// control token, never allowed as text (may be NULL: none). `eos` must not be empty.
/// Cost: O(total bytes · log n_tokens).
///
/// # Safety
/// `tokens` and `lens` point to `n_tokens` items, each `tokens[i]` to `lens[i]` bytes (or
/// NULL when 0); `special` is NULL or points to `n_tokens` bools; the rest as
/// [`ruvllm_vocabulary_from_file`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ruvllm_vocabulary_from_tokens(
    tokens: *const *const u8,
    lens: *const usize,
    special: *const bool,
    n_tokens: usize,
    n_vocab: usize,
    eos: *const u32,
    n_eos: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut RuvllmVocabulary {
    let r = guard(Err("internal error (panic)".into()), || {
        // SAFETY: the function's contract.
        let ptrs = unsafe { slice(tokens, n_tokens, "tokens") }?;
        let lens = unsafe { slice(lens, n_tokens, "lens") }?;
        let eos = unsafe { slice(eos, n_eos, "eos") }?;
        let special = if special.is_null() {
            vec![false; n_tokens]
        } else {
            unsafe { slice(special, n_tokens, "special") }?.to_vec()
        };
        let mut bytes = Vec::with_capacity(n_tokens);
        for (i, (&p, &len)) in ptrs.iter().zip(lens).enumerate() {
            bytes.push(unsafe { slice(p, len, &format!("tokens[{i}]")) }?.to_vec());
        }
        if eos.is_empty() {
            return Err("no EOS id given".into());
        }
        let v =
            eng::Vocabulary::new("c", bytes, special, eos.to_vec()).map_err(|e| e.to_string())?;
        finish_vocab(v, n_vocab, &[])
    });
    boxed_or_err(r, err, err_len)
}

/// The logits width (bitmask rows have `(n_vocab + 31) / 32` words); 0 for NULL.
///
/// # Safety
/// `v` is NULL or a live vocabulary.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_vocabulary_n_vocab(v: *const RuvllmVocabulary) -> usize {
    // SAFETY: the function's contract.
    unsafe { v.as_ref() }.map_or(0, |v| v.n_vocab)
}

/// Frees a vocabulary (NULL is ignored). Engines made from it keep their own reference.
///
/// # Safety
/// `v` is NULL or a vocabulary not freed before.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_vocabulary_free(v: *mut RuvllmVocabulary) {
    // SAFETY: forwarded.
    unsafe { free_box(v) }
}

/// An engine for `vocab`: the caches (lexeme automata, token tables) every grammar
/// compiled in it shares, bounded by the default `EngineConfig` (256 MiB each). NULL only
/// when `vocab` is NULL. Cost: O(1); keep one per vocabulary.
///
/// # Safety
/// `vocab` is NULL or a live vocabulary.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_engine_new(vocab: *const RuvllmVocabulary) -> *mut RuvllmEngine {
    // SAFETY: the function's contract.
    let Some(v) = (unsafe { vocab.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(RuvllmEngine {
            inner: eng::Engine::new(v.inner.clone()),
            n_vocab: v.n_vocab,
        }))
    })
}

/// Frees an engine (NULL is ignored). Grammars compiled in it stay valid.
///
/// # Safety
/// `e` is NULL or an engine not freed before.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_engine_free(e: *mut RuvllmEngine) {
    // SAFETY: forwarded.
    unsafe { free_box(e) }
}

/// Compiles a constraint of `kind` (a `RUVLLM_KIND_*` value) from `text` in `engine`.
/// `options` applies to JSON Schemas and to structural tags' schemas (NULL: the
/// defaults). NULL on failure, with the reason in `err`: a line and column, or the schema
/// keyword and its JSON pointer. Cost: the engine's compile (milliseconds for a typical
/// schema; cached parts are reused).
///
/// # Safety
/// `engine` is NULL or a live engine; `text` is NULL or a NUL-terminated string; `options`
/// is NULL or points to options; `err` is NULL or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_grammar_compile(
    engine: *const RuvllmEngine,
    kind: u32,
    text_: *const c_char,
    options: *const RuvllmSchemaOptions,
    err: *mut c_char,
    err_len: usize,
) -> *mut RuvllmGrammar {
    let r = guard(Err("internal error (panic)".into()), || {
        // SAFETY: the function's contract.
        let e = unsafe { engine.as_ref() }.ok_or("engine is NULL")?;
        let src = unsafe { text(text_, "text") }?;
        let opts = match unsafe { options.as_ref() } {
            None => JsonSchemaOptions::default(),
            Some(o) => JsonSchemaOptions {
                whitespace: match o.whitespace {
                    RUVLLM_WHITESPACE_BOUNDED => WhitespaceMode::Bounded,
                    RUVLLM_WHITESPACE_COMPACT => WhitespaceMode::Compact,
                    RUVLLM_WHITESPACE_FLEXIBLE => WhitespaceMode::Flexible,
                    w => return Err(format!("whitespace {w}: expected 0, 1 or 2")),
                },
                any_order: o.any_order,
                strict: o.strict,
                generation: !o.validator_semantics,
            },
        };
        let source = match kind {
            RUVLLM_KIND_JSON_SCHEMA => Source::JsonSchema(src, opts),
            RUVLLM_KIND_GBNF => Source::Gbnf(src),
            RUVLLM_KIND_REGEX => Source::Regex(src),
            RUVLLM_KIND_CHOICES => Source::Choices(
                serde_json::from_str(src)
                    .map_err(|e| format!("choices: expected a JSON array of strings: {e}"))?,
            ),
            RUVLLM_KIND_BUILTIN => Source::Builtin(src),
            RUVLLM_KIND_STRUCTURAL_TAG => Source::StructuralTag(src, opts),
            k => return Err(format!("kind {k}: expected a RUVLLM_KIND_* value (0 to 5)")),
        };
        let c = compile(&e.inner, &source).map_err(|e| e.to_string())?;
        Ok(RuvllmGrammar {
            inner: c,
            n_vocab: e.n_vocab,
        })
    });
    boxed_or_err(r, err, err_len)
}

/// Another reference to `g` (free both). NULL for NULL. Cost: O(1).
///
/// # Safety
/// `g` is NULL or a live grammar.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_grammar_clone(g: *const RuvllmGrammar) -> *mut RuvllmGrammar {
    // SAFETY: the function's contract.
    let Some(g) = (unsafe { g.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(RuvllmGrammar {
            inner: g.inner.clone(),
            n_vocab: g.n_vocab,
        }))
    })
}

/// Frees a grammar (NULL is ignored). Matchers made from it stay valid.
///
/// # Safety
/// `g` is NULL or a grammar not freed before.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_grammar_free(g: *mut RuvllmGrammar) {
    // SAFETY: forwarded.
    unsafe { free_box(g) }
}

/// A matcher at the start of `grammar`. Never NULL (short of memory): when `grammar` is
/// NULL or the matcher cannot start, it is in an error state ([`ruvllm_matcher_get_error`])
/// and its rows allow EOS only (nothing at all when `grammar` is NULL: then no EOS is
/// known, and a fill returns -1). Cost: one parser start.
///
/// # Safety
/// `grammar` is NULL or a live grammar.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_new(grammar: *const RuvllmGrammar) -> *mut RuvllmMatcher {
    // SAFETY: the function's contract.
    let g = unsafe { grammar.as_ref() };
    let m = guard(
        RuvllmMatcher::failed("internal error (panic)".into(), vec![], 0),
        || match g {
            None => RuvllmMatcher::failed("grammar is NULL".into(), vec![], 0),
            Some(g) => {
                let eos = g.inner.vocab().eos_tokens().to_vec();
                match SeqMatcher::new(g.inner.clone(), g.n_vocab) {
                    Ok(s) => RuvllmMatcher {
                        n_vocab: s.n_vocab(),
                        seq: Some(s),
                        failed: None,
                        eos,
                        error_c: None,
                    },
                    Err(e) => RuvllmMatcher::failed(e.to_string(), eos, g.n_vocab),
                }
            }
        },
    );
    Box::into_raw(Box::new(m))
}

/// A copy of `m` in its current state (for a llama.cpp sampler's clone, or to branch a
/// sequence). NULL for NULL. Cost: a copy of the parser history.
///
/// # Safety
/// `m` is NULL or a live matcher not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_clone(m: *const RuvllmMatcher) -> *mut RuvllmMatcher {
    // SAFETY: the function's contract.
    let Some(m) = (unsafe { m.as_ref() }) else {
        return std::ptr::null_mut();
    };
    guard(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(RuvllmMatcher {
            seq: m.seq.clone(),
            failed: m.failed.clone(),
            eos: m.eos.clone(),
            n_vocab: m.n_vocab,
            error_c: m.error_c.clone(),
        }))
    })
}

/// Frees a matcher (NULL is ignored).
///
/// # Safety
/// `m` is NULL or a matcher not freed before.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_free(m: *mut RuvllmMatcher) {
    // SAFETY: forwarded.
    unsafe { free_box(m) }
}

/// Why the matcher stopped on an error (NUL-terminated, valid until the next call on
/// `m`), or NULL when it has none. "matcher is NULL" for NULL.
///
/// # Safety
/// `m` is NULL or a live matcher.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_get_error(m: *const RuvllmMatcher) -> *const c_char {
    static NULL_MATCHER: &CStr = c"matcher is NULL";
    // SAFETY: the function's contract.
    match unsafe { m.as_ref() } {
        None => NULL_MATCHER.as_ptr(),
        Some(m) => m.error_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
    }
}

/// Runs `f` on a live matcher, refreshing its error text; `fallback` for NULL or a panic.
///
/// # Safety
/// `m` is NULL or a live matcher used by no other thread meanwhile.
unsafe fn with_matcher<T: Copy>(
    m: *mut RuvllmMatcher,
    fallback: T,
    f: impl FnOnce(&mut RuvllmMatcher) -> T,
) -> T {
    // SAFETY: the caller's contract.
    let Some(m) = (unsafe { m.as_mut() }) else {
        return fallback;
    };
    let r = guard(fallback, || f(m));
    m.sync();
    r
}

/// Commits `token`. False, and the matcher stops with an error (its rows then allow EOS
/// only), when the grammar refuses it. Cost: one parser step per byte of the token.
///
/// # Safety
/// `m` is NULL or a live matcher used by no other thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_consume_token(m: *mut RuvllmMatcher, token: u32) -> bool {
    // SAFETY: forwarded.
    unsafe {
        with_matcher(m, false, |m| {
            m.seq.as_mut().is_some_and(|s| s.consume(token))
        })
    }
}

/// Commits `tokens[0..n]` in order; false at the first refused one (those before it stay
/// committed).
///
/// # Safety
/// `m` as [`ruvllm_matcher_consume_token`]; `tokens` points to `n` ids (or is NULL when 0).
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_consume_tokens(
    m: *mut RuvllmMatcher,
    tokens: *const u32,
    n: usize,
) -> bool {
    // SAFETY: the function's contract.
    let Ok(tokens) = (unsafe { slice(tokens, n, "tokens") }) else {
        return false;
    };
    unsafe {
        with_matcher(m, false, |m| {
            m.seq
                .as_mut()
                .is_some_and(|s| tokens.iter().all(|&t| s.consume(t)))
        })
    }
}

/// How many of `tokens[0..n]`, from the first, the grammar accepts from here, without
/// advancing (a speculative draft's accepted prefix). Cost: a copy of the parser state.
///
/// # Safety
/// As [`ruvllm_matcher_consume_tokens`].
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_validate_tokens(
    m: *mut RuvllmMatcher,
    tokens: *const u32,
    n: usize,
) -> usize {
    // SAFETY: the function's contract.
    let Ok(tokens) = (unsafe { slice(tokens, n, "tokens") }) else {
        return 0;
    };
    unsafe { with_matcher(m, 0, |m| m.seq.as_ref().map_or(0, |s| s.validate(tokens))) }
}

/// Takes back the last `n` committed tokens (and clears an error a refused token left).
/// 0, or -1 when fewer than `n` were committed or the matcher never started. Cost: O(1).
///
/// # Safety
/// As [`ruvllm_matcher_consume_token`].
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_rollback(m: *mut RuvllmMatcher, n: usize) -> i32 {
    // SAFETY: forwarded.
    unsafe {
        with_matcher(m, -1, |m| match m.seq.as_mut().map(|s| s.rollback(n)) {
            Some(Ok(())) => 0,
            _ => -1,
        })
    }
}

/// Back to the start of the grammar, with no error. 0, or -1 for a matcher that never
/// started.
///
/// # Safety
/// As [`ruvllm_matcher_consume_token`].
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_reset(m: *mut RuvllmMatcher) -> i32 {
    // SAFETY: forwarded.
    unsafe {
        with_matcher(m, -1, |m| match m.seq.as_mut().map(|s| s.reset()) {
            Some(Ok(())) => 0,
            _ => -1,
        })
    }
}

/// Whether the output so far is complete (EOS would be accepted now).
///
/// # Safety
/// As [`ruvllm_matcher_consume_token`].
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_is_accepting(m: *mut RuvllmMatcher) -> bool {
    // SAFETY: forwarded.
    unsafe {
        with_matcher(m, false, |m| {
            m.seq.as_mut().is_some_and(|s| s.is_accepting())
        })
    }
}

/// Whether the matcher takes no more tokens: EOS was consumed, or an error stopped it.
/// True for NULL.
///
/// # Safety
/// As [`ruvllm_matcher_consume_token`].
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_is_stopped(m: *mut RuvllmMatcher) -> bool {
    // SAFETY: forwarded.
    unsafe { with_matcher(m, true, |m| m.seq.as_ref().map_or(true, |s| s.is_stopped())) }
}

/// The logits width of the matcher's rows; 0 for NULL.
///
/// # Safety
/// `m` is NULL or a live matcher.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_n_vocab(m: *const RuvllmMatcher) -> usize {
    // SAFETY: the function's contract.
    unsafe { m.as_ref() }.map_or(0, |m| m.n_vocab)
}

/// Writes the next token's mask into `bitmask[0..words]` (`words` at least
/// `(n_vocab + 31) / 32`; bit `t % 32` of word `t / 32` is token `t`; words past the
/// row are left alone). `tokens_left` >= 0: the budget-aware mask, whose every token leaves
/// a completion within that many tokens; < 0: no budget. A stopped matcher, or one in
/// error, allows EOS only. 0, or -1 for a NULL or short buffer or a matcher without a
/// grammar (nothing is written then). Cost: one mask computation and a row copy.
///
/// # Safety
/// `m` as [`ruvllm_matcher_consume_token`]; `bitmask` is NULL or points to `words` writable
/// words.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_fill_next_token_bitmask(
    m: *mut RuvllmMatcher,
    bitmask: *mut u32,
    words: usize,
    tokens_left: i64,
) -> i32 {
    // SAFETY: forwarded; the row is written only after its length is checked.
    unsafe {
        with_matcher(m, -1, |m| {
            let need = m.words();
            if bitmask.is_null() || words < need || m.seq.is_none() && m.eos.is_empty() {
                return -1;
            }
            m.fill(usize::try_from(tokens_left).ok());
            let dst = std::slice::from_raw_parts_mut(bitmask, need);
            m.row_into(dst);
            0
        })
    }
}

/// Copies the first `cap` items of `v` into `out` (nothing when `out` is NULL) and returns
/// `v.len()`.
///
/// # Safety
/// `out` is NULL or points to `cap` writable items.
unsafe fn copy_out<T: Copy>(v: &[T], out: *mut T, cap: usize) -> usize {
    if !out.is_null() {
        let n = v.len().min(cap);
        // SAFETY: `n <= cap` items, which the caller says are writable.
        unsafe { std::slice::from_raw_parts_mut(out, n) }.copy_from_slice(&v[..n]);
    }
    v.len()
}

/// Copies into `out[0..cap]` the tokens the grammar forces next (jump-forward) and returns
/// how many there are (may exceed `cap`: call again with a larger buffer). 0 when stopped.
///
/// # Safety
/// `m` as [`ruvllm_matcher_consume_token`]; `out` is NULL or points to `cap` writable ids.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_compute_ff_tokens(
    m: *mut RuvllmMatcher,
    out: *mut u32,
    cap: usize,
) -> usize {
    // SAFETY: forwarded.
    unsafe {
        with_matcher(m, 0, |m| {
            let t = m.seq.as_mut().and_then(|s| s.forced_tokens().ok());
            copy_out(&t.unwrap_or_default(), out, cap)
        })
    }
}

/// Copies into `out[0..cap]` the bytes the grammar forces next and returns how many there
/// are (may exceed `cap`). 0 when stopped.
///
/// # Safety
/// `m` as [`ruvllm_matcher_consume_token`]; `out` is NULL or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_matcher_compute_ff_bytes(
    m: *mut RuvllmMatcher,
    out: *mut u8,
    cap: usize,
) -> usize {
    // SAFETY: forwarded.
    unsafe {
        with_matcher(m, 0, |m| {
            let b = m.seq.as_mut().and_then(|s| s.forced_bytes().ok());
            copy_out(&b.unwrap_or_default(), out, cap)
        })
    }
}

/// Fills row `i` of `bitmask` (rows of `words_per_row` words) for `matchers[i]`, for `i`
/// in `0..n`, on up to `threads` threads: the same rows as
/// [`ruvllm_matcher_fill_next_token_bitmask`] one by one. 0, or -1 (nothing written) when
/// a pointer is NULL, a matcher appears twice, has no grammar, or needs wider rows.
///
/// # Safety
/// `matchers` points to `n` live matchers used by no other thread meanwhile; `bitmask`
/// points to `n * words_per_row` writable words.
#[no_mangle]
pub unsafe extern "C" fn ruvllm_fill_next_token_bitmask_par(
    matchers: *const *mut RuvllmMatcher,
    n: usize,
    bitmask: *mut u32,
    words_per_row: usize,
    threads: usize,
) -> i32 {
    guard(-1, || {
        // SAFETY: the function's contract.
        let Ok(ptrs) = (unsafe { slice(matchers, n, "matchers") }) else {
            return -1;
        };
        let mut seen = std::collections::HashSet::new();
        if ptrs
            .iter()
            .any(|p| p.is_null() || !seen.insert(*p as usize))
            || bitmask.is_null() && n > 0
        {
            return -1;
        }
        // SAFETY: distinct live matchers (checked above and by the contract).
        let mut ms: Vec<&mut RuvllmMatcher> = ptrs.iter().map(|&p| unsafe { &mut *p }).collect();
        if ms
            .iter()
            .any(|m| m.words() > words_per_row || m.seq.is_none() && m.eos.is_empty())
        {
            return -1;
        }
        let mut seqs: Vec<&mut SeqMatcher> = ms.iter_mut().filter_map(|m| m.seq.as_mut()).collect();
        ruvllm_matcher::fill_rows_par(&mut seqs, threads);
        for (i, m) in ms.iter_mut().enumerate() {
            m.sync();
            let w = m.words();
            // SAFETY: row `i` lies within the `n * words_per_row` words (w <= words_per_row).
            let dst = unsafe { std::slice::from_raw_parts_mut(bitmask.add(i * words_per_row), w) };
            m.row_into(dst);
        }
        0
    })
}

/// The library's version, e.g. "0.1.0" (a static string).
#[no_mangle]
pub extern "C" fn ruvllm_version() -> *const c_char {
    static V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    V.as_ptr()
}
