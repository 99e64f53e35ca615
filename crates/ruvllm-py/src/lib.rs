//! Python bindings of the engine: the `ruvllm._ruvllm` extension module of the `ruvllm`
//! package (`pip install ./crates/ruvllm-py`, built by maturin as one abi3 wheel).
//!
//! The shape follows what inference engines already call (llguidance's `LLMatcher`,
//! XGrammar's `GrammarMatcher`), so that an integration is a near-copy of theirs:
//!
//! * `Vocabulary`: a tokenizer's token bytes and EOS ids, with the model's logits width
//!   (`n_vocab`, which may be larger than the tokenizer: padded ids are never allowed);
//! * `Engine`: one per vocabulary, owning the caches every grammar compiled in it shares;
//! * `Grammar`: a compiled constraint (JSON Schema, GBNF, regex, choices, built-in);
//! * `Matcher`: one sequence: consume, validate, rollback, reset, forced tokens and bytes,
//!   and filling one row of an int32 bitmask (`ceil(n_vocab / 32)` words per row, bit
//!   `t % 32` of word `t / 32`). A stopped matcher, or one in error, allows EOS only.
//!
//! Every compile, mask and consume runs with the GIL released; `fill_next_token_bitmask_par`
//! fills many rows on several threads. Errors are Python exceptions whose message carries
//! the line and column, or the JSON pointer, of the problem; no input makes this module
//! panic (and a panic would be a Python exception, not an abort).

use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

use ruvllm_engine as eng;
use ruvllm_matcher::{CompileError, JsonSchemaOptions, SeqMatcher, Source, WhitespaceMode};

create_exception!(
    _ruvllm,
    RuvllmError,
    PyException,
    "Base class of the errors of ruvllm."
);
create_exception!(
    _ruvllm,
    GrammarError,
    RuvllmError,
    "A grammar, regex or choice list that does not compile (the message says where)."
);
create_exception!(_ruvllm, SchemaError, RuvllmError, "A JSON Schema that cannot be enforced exactly (the message names the keyword and its JSON pointer).");
create_exception!(
    _ruvllm,
    VocabularyError,
    RuvllmError,
    "A tokenizer that cannot be loaded."
);

/// A vocabulary: every token's bytes, the EOS ids, and the logits width.
#[pyclass(frozen, module = "ruvllm._ruvllm")]
struct Vocabulary {
    inner: Arc<eng::Vocabulary>,
    n_vocab: usize,
}

impl Vocabulary {
    fn make(
        mut v: eng::Vocabulary,
        n_vocab: Option<usize>,
        eos: Option<Vec<u32>>,
    ) -> PyResult<Self> {
        if let Some(eos) = eos {
            v.set_eos_tokens(eos)
                .map_err(|e| VocabularyError::new_err(e.to_string()))?;
        }
        let n = n_vocab.unwrap_or(v.len());
        if n < v.len() {
            return Err(PyValueError::new_err(format!(
                "n_vocab {n} is smaller than the tokenizer's {} tokens",
                v.len()
            )));
        }
        Ok(Vocabulary {
            inner: Arc::new(v),
            n_vocab: n,
        })
    }
}

#[pymethods]
impl Vocabulary {
    /// From the text of a Hugging Face `tokenizer.json`. `n_vocab`: the model's logits
    /// width (default: the tokenizer's size); `eos_token_ids`: the ids that end a
    /// generation (default: the tokenizer's end-of-text specials).
    #[staticmethod]
    #[pyo3(signature = (text, n_vocab=None, eos_token_ids=None))]
    fn from_tokenizer_json(
        py: Python<'_>,
        text: &str,
        n_vocab: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Self> {
        let v = py
            .detach(|| eng::Vocabulary::from_tokenizer_json(text, None))
            .map_err(|e| VocabularyError::new_err(e.to_string()))?;
        Self::make(v, n_vocab, eos_token_ids)
    }

    /// From a file: a `tokenizer.json`, a GGUF model, or a `*.tiktoken` rank file.
    #[staticmethod]
    #[pyo3(signature = (path, n_vocab=None, eos_token_ids=None))]
    fn from_file(
        py: Python<'_>,
        path: std::path::PathBuf,
        n_vocab: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Self> {
        let v = py
            .detach(|| eng::Vocabulary::from_file(&path))
            .map_err(|e| VocabularyError::new_err(format!("{}: {e}", path.display())))?;
        Self::make(v, n_vocab, eos_token_ids)
    }

    /// The logits width: the bitmask has `ceil(n_vocab / 32)` words per row.
    #[getter]
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Tokens the tokenizer defines (ids from this to `n_vocab` are padding, never allowed).
    #[getter]
    fn tokenizer_size(&self) -> usize {
        self.inner.len()
    }

    /// The ids that end a generation.
    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.inner.eos_tokens().to_vec()
    }

    /// The bytes token `id` writes (empty for specials and padding).
    fn token_bytes<'py>(&self, py: Python<'py>, id: u32) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, self.inner.token_bytes(id))
    }
}

/// The caches of one vocabulary (lexeme DFAs, token tables), shared by every grammar
/// compiled in it. Create one per vocabulary and keep it.
#[pyclass(frozen, module = "ruvllm._ruvllm")]
struct Engine {
    inner: eng::Engine,
    n_vocab: usize,
}

impl Engine {
    fn compile(&self, py: Python<'_>, source: Source<'_>) -> PyResult<Grammar> {
        let c = py
            .detach(|| ruvllm_matcher::compile(&self.inner, &source))
            .map_err(|e| match e {
                CompileError::Schema(m) => SchemaError::new_err(m),
                CompileError::Grammar(m) => GrammarError::new_err(m),
                CompileError::Options(m) => PyValueError::new_err(m),
            })?;
        Ok(Grammar {
            inner: c,
            n_vocab: self.n_vocab,
        })
    }
}

#[pymethods]
impl Engine {
    /// An engine for `vocab`. `table_cache_bytes` and `lexeme_cache_bytes` bound what it
    /// keeps for later grammars (default 256 MiB each).
    #[new]
    #[pyo3(signature = (vocab, table_cache_bytes=None, lexeme_cache_bytes=None))]
    fn new(
        vocab: &Vocabulary,
        table_cache_bytes: Option<usize>,
        lexeme_cache_bytes: Option<usize>,
    ) -> Self {
        let d = eng::EngineConfig::default();
        let config = eng::EngineConfig {
            max_table_bytes: table_cache_bytes.unwrap_or(d.max_table_bytes),
            max_cached_dfa_bytes: lexeme_cache_bytes.unwrap_or(d.max_cached_dfa_bytes),
            ..d
        };
        Engine {
            inner: eng::Engine::with_config(vocab.inner.clone(), config),
            n_vocab: vocab.n_vocab,
        }
    }

    /// Compiles a JSON Schema (its text). `whitespace`: "bounded" (default: compact or
    /// pretty-printed, no runaway), "compact" (none) or "flexible" (any, up to 20 at a
    /// time); `any_order`: properties in any order (default: the schema's); `strict`:
    /// OpenAI's strict mode (objects closed where `additionalProperties` is unsaid);
    /// `generation` (default): numbers as encoders write them (an integer in plain digits,
    /// at most 20 significant digits) and unique keys, so that a model cannot run on
    /// writing `8.12888…e9` until the token limit; `generation=False`: every document a
    /// validator accepts (for checking text).
    #[pyo3(signature = (schema, whitespace="bounded", any_order=false, strict=false, generation=true))]
    fn compile_json_schema(
        &self,
        py: Python<'_>,
        schema: &str,
        whitespace: &str,
        any_order: bool,
        strict: bool,
        generation: bool,
    ) -> PyResult<Grammar> {
        let opts = schema_options(whitespace, any_order, strict, generation)?;
        self.compile(py, Source::JsonSchema(schema, opts))
    }

    /// Compiles a structural tag (SGLang's and vLLM's form, as JSON text:
    /// `{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`): free text without
    /// a trigger, and tags, each a structure's `begin`, a JSON value of its `schema` and
    /// its `end`. The schema options are those of `compile_json_schema`.
    #[pyo3(signature = (tag, whitespace="bounded", any_order=false, strict=false, generation=true))]
    fn compile_structural_tag(
        &self,
        py: Python<'_>,
        tag: &str,
        whitespace: &str,
        any_order: bool,
        strict: bool,
        generation: bool,
    ) -> PyResult<Grammar> {
        let opts = schema_options(whitespace, any_order, strict, generation)?;
        self.compile(py, Source::StructuralTag(tag, opts))
    }

    /// Compiles a GBNF grammar (llama.cpp's format).
    fn compile_gbnf(&self, py: Python<'_>, text: &str) -> PyResult<Grammar> {
        self.compile(py, Source::Gbnf(text))
    }

    /// Compiles a regular expression the whole output must match.
    fn compile_regex(&self, py: Python<'_>, pattern: &str) -> PyResult<Grammar> {
        self.compile(py, Source::Regex(pattern))
    }

    /// Compiles a choice: the output is exactly one of `choices`.
    fn compile_choices(&self, py: Python<'_>, choices: Vec<String>) -> PyResult<Grammar> {
        self.compile(py, Source::Choices(choices))
    }

    /// Compiles a built-in grammar: json, json_object, jsonl, csv, xml, xml:NAME,NAME.
    fn compile_builtin(&self, py: Python<'_>, name: &str) -> PyResult<Grammar> {
        self.compile(py, Source::Builtin(name))
    }
}

/// A compiled constraint bound to an engine's vocabulary; share it between matchers.
#[pyclass(frozen, module = "ruvllm._ruvllm")]
struct Grammar {
    inner: Arc<eng::Constraint>,
    n_vocab: usize,
}

/// One sequence under a grammar.
#[pyclass(module = "ruvllm._ruvllm")]
struct Matcher {
    inner: SeqMatcher,
}

/// The JSON Schema options of `compile_json_schema` and `compile_structural_tag`.
fn schema_options(
    whitespace: &str,
    any_order: bool,
    strict: bool,
    generation: bool,
) -> PyResult<JsonSchemaOptions> {
    Ok(JsonSchemaOptions {
        whitespace: WhitespaceMode::from_name(whitespace)
            .map_err(|e| PyValueError::new_err(e.to_string()))?,
        any_order,
        strict,
        generation,
    })
}

fn match_err(e: eng::MatchError) -> PyErr {
    RuvllmError::new_err(e.to_string())
}

/// Writes `rows` (each a mask of `words` u32) into `bitmask` at the given row indices.
fn write_rows(
    _gil: Python<'_>,
    bitmask: &Bound<'_, PyAny>,
    rows: &[(usize, &[u32])],
    words: usize,
) -> PyResult<()> {
    // A CPU torch tensor has no buffer protocol; its `.numpy()` view shares its memory.
    let view;
    let bitmask = match PyBuffer::<i32>::get(bitmask) {
        Err(_) if bitmask.hasattr("numpy")? => {
            view = bitmask.call_method0("numpy")?;
            &view
        }
        _ => bitmask,
    };
    let buf: PyBuffer<i32> = PyBuffer::get(bitmask)?;
    if buf.readonly() || !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "the bitmask must be a writable, C-contiguous int32 array",
        ));
    }
    let shape = buf.shape();
    let (n_rows, width) = match shape {
        [w] => (1, *w),
        [r, w] => (*r, *w),
        _ => {
            return Err(PyValueError::new_err(format!(
                "the bitmask must have 1 or 2 dimensions, not {}",
                shape.len()
            )))
        }
    };
    if width < words {
        return Err(PyValueError::new_err(format!(
            "the bitmask rows have {width} words; ceil(n_vocab / 32) = {words} are needed"
        )));
    }
    let total = buf.item_count();
    let base = buf.buf_ptr() as *mut i32;
    for (index, row) in rows {
        if *index >= n_rows {
            return Err(PyValueError::new_err(format!(
                "row {index} is outside the bitmask's {n_rows} rows"
            )));
        }
        let row = &row[..words];
        let at = index * width;
        if at + words > total {
            return Err(PyValueError::new_err(
                "the bitmask is smaller than its shape says",
            ));
        }
        // SAFETY: `buf` holds the exporter's buffer (and keeps the memory alive) for this
        // scope; it is writable, C-contiguous, of `total` i32 items, and the row lies
        // within it (checked above). The GIL is held, so no Python code runs meanwhile;
        // as with every extension that fills an array, a native thread writing the same
        // array at the same time would race, which the caller must not do.
        // An i32 and a u32 have one layout: the row is copied as is.
        let dst = unsafe { std::slice::from_raw_parts_mut(base.add(at) as *mut u32, words) };
        dst.copy_from_slice(row);
    }
    Ok(())
}

#[pymethods]
impl Matcher {
    /// A matcher of `grammar` at its start.
    #[new]
    fn new(grammar: &Grammar) -> PyResult<Self> {
        Ok(Matcher {
            inner: SeqMatcher::new(grammar.inner.clone(), grammar.n_vocab).map_err(match_err)?,
        })
    }

    /// Commits `token`; `False` (and the matcher stops with an error) when the grammar
    /// refuses it.
    fn consume_token(&mut self, py: Python<'_>, token: u32) -> bool {
        let s = &mut self.inner;
        py.detach(|| s.consume(token))
    }

    /// Commits `tokens` in order; `False` at the first refused one (those before it stay
    /// committed, and the matcher stops with an error).
    fn consume_tokens(&mut self, py: Python<'_>, tokens: Vec<u32>) -> bool {
        let s = &mut self.inner;
        py.detach(|| tokens.iter().all(|&t| s.consume(t)))
    }

    /// How many of `tokens`, from the first, the grammar accepts from here (a draft's
    /// accepted prefix), without advancing. Cost: a copy of the parser state.
    fn validate_tokens(&self, py: Python<'_>, tokens: Vec<u32>) -> usize {
        let s = &self.inner;
        py.detach(|| s.validate(&tokens))
    }

    /// Takes back the last `n` committed tokens (clears an error a refused token left).
    fn rollback(&mut self, py: Python<'_>, n: usize) -> PyResult<()> {
        let s = &mut self.inner;
        py.detach(|| s.rollback(n)).map_err(match_err)
    }

    /// Back to the start of the grammar.
    fn reset(&mut self) -> PyResult<()> {
        self.inner.reset().map_err(match_err)
    }

    /// Whether the output so far is complete (EOS would be accepted).
    fn is_accepting(&mut self) -> bool {
        self.inner.is_accepting()
    }

    /// Whether the matcher takes no more tokens: EOS was consumed, or an error stopped it.
    fn is_stopped(&self) -> bool {
        self.inner.is_stopped()
    }

    /// Why the matcher stopped on an error, or `None`.
    fn get_error(&self) -> Option<String> {
        self.inner.error().map(str::to_owned)
    }

    /// Tokens committed so far.
    fn num_tokens(&self) -> usize {
        self.inner.num_tokens()
    }

    /// The tokens the grammar forces next (jump-forward), possibly none.
    fn compute_ff_tokens(&mut self, py: Python<'_>) -> PyResult<Vec<u32>> {
        let s = &mut self.inner;
        py.detach(|| s.forced_tokens()).map_err(match_err)
    }

    /// The shortest completion from here: the fewest tokens found after which the output
    /// is complete (what `tokens_left` must be at least for a budget-aware mask to close
    /// in time), `[]` when complete; `None` when none is found.
    fn shortest_completion(&mut self, py: Python<'_>) -> PyResult<Option<Vec<u32>>> {
        let s = &mut self.inner;
        py.detach(|| s.shortest_completion()).map_err(match_err)
    }

    /// The bytes the grammar forces next, possibly none.
    fn compute_ff_bytes<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let s = &mut self.inner;
        let b = py.detach(|| s.forced_bytes()).map_err(match_err)?;
        Ok(pyo3::types::PyBytes::new(py, &b))
    }

    /// Fills row `index` of `bitmask` (an int32 array of shape `(rows, ceil(n_vocab/32))`
    /// or `(ceil(n_vocab/32),)`, C-contiguous and writable: numpy, or a CPU torch tensor
    /// through `.numpy()`) with the next token's mask. `tokens_left`: the budget-aware mask,
    /// whose every token leaves a completion within that many tokens.
    #[pyo3(signature = (bitmask, index=0, tokens_left=None))]
    fn fill_next_token_bitmask(
        &mut self,
        py: Python<'_>,
        bitmask: &Bound<'_, PyAny>,
        index: usize,
        tokens_left: Option<usize>,
    ) -> PyResult<()> {
        let words = self.inner.words();
        let s = &mut self.inner;
        py.detach(|| {
            s.fill(tokens_left);
        });
        write_rows(py, bitmask, &[(index, self.inner.row())], words)
    }
}

/// Fills one row per matcher (row `indices[i]` for `matchers[i]`, default `i`) on
/// `threads` threads, with the GIL released; the same as filling them one by one.
#[pyfunction]
#[pyo3(signature = (matchers, bitmask, indices=None, threads=2))]
fn fill_next_token_bitmask_par(
    py: Python<'_>,
    matchers: Vec<Bound<'_, Matcher>>,
    bitmask: &Bound<'_, PyAny>,
    indices: Option<Vec<usize>>,
    threads: usize,
) -> PyResult<()> {
    let indices = indices.unwrap_or_else(|| (0..matchers.len()).collect());
    if indices.len() != matchers.len() {
        return Err(PyValueError::new_err("one index per matcher"));
    }
    let mut refs: Vec<PyRefMut<'_, Matcher>> = matchers
        .iter()
        .map(|m| m.try_borrow_mut())
        .collect::<Result<_, _>>()?;
    let Some(words) = refs.first().map(|m| m.inner.words()) else {
        return Ok(());
    };
    if refs.iter().any(|m| m.inner.words() != words) {
        return Err(PyValueError::new_err("the matchers have different n_vocab"));
    }
    let mut states: Vec<&mut SeqMatcher> = refs.iter_mut().map(|m| &mut m.inner).collect();
    py.detach(|| ruvllm_matcher::fill_rows_par(&mut states, threads));
    let rows: Vec<(usize, &[u32])> = indices
        .into_iter()
        .zip(states.iter().map(|s| s.row()))
        .collect();
    write_rows(py, bitmask, &rows, words)
}

#[pymodule]
fn _ruvllm(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // A wheel built on another machine, on a CPU without the features it was compiled
    // for: an ImportError that says so, not an "Illegal instruction" later.
    ruvllm_engine::cpu::check()
        .map_err(|e| pyo3::exceptions::PyImportError::new_err(e.to_string()))?;
    m.add_class::<Vocabulary>()?;
    m.add_class::<Engine>()?;
    m.add_class::<Grammar>()?;
    m.add_class::<Matcher>()?;
    m.add_function(wrap_pyfunction!(fill_next_token_bitmask_par, m)?)?;
    let py = m.py();
    m.add("RuvllmError", py.get_type::<RuvllmError>())?;
    m.add("GrammarError", py.get_type::<GrammarError>())?;
    m.add("SchemaError", py.get_type::<SchemaError>())?;
    m.add("VocabularyError", py.get_type::<VocabularyError>())?;
    Ok(())
}
