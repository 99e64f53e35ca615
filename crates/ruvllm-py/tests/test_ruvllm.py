"""The `ruvllm` Python package against real tokenizers, the repository's grammar cases, the
`ruvllm` binary's masks, and bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import ruvllm
from ruvllm import Engine, Matcher, Vocabulary, allocate_token_bitmask

ROOT = Path(__file__).resolve().parents[3]
TOKENIZER = ROOT / "assets/tokenizers/llama3_1/tokenizer.json"
GRAMMARS = ROOT / "tests/grammars/own"


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    assert TOKENIZER.exists(), f"{TOKENIZER} is missing: run scripts/fetch-assets.sh"
    return Vocabulary.from_file(TOKENIZER)


@pytest.fixture(scope="module")
def engine(vocab: Vocabulary) -> Engine:
    return Engine(vocab)


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOKENIZER))


def allowed(row: np.ndarray, n: int) -> list[int]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:n]
    return [int(i) for i in np.nonzero(bits)[0]]


def test_json_schema_walk_allows_every_token_and_eos_at_the_end(vocab, engine, tok):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    g = ruvllm.compile_json_schema(engine, schema)
    m = Matcher(g)
    ids = tok.encode('{"name": "Ada", "age": 36}', add_special_tokens=False).ids
    bm = allocate_token_bitmask(1, vocab.n_vocab)
    eos = vocab.eos_token_ids
    for t in ids:
        m.fill_next_token_bitmask(bm, 0)
        ok = allowed(bm[0], vocab.n_vocab)
        assert t in ok
        assert not set(eos) & set(ok)
        assert m.consume_token(t)
    m.fill_next_token_bitmask(bm, 0)
    assert set(eos) <= set(allowed(bm[0], vocab.n_vocab))
    assert m.is_accepting()
    assert m.consume_token(eos[0])
    assert m.is_stopped()


def test_padded_logits_width_never_allows_padding(engine, vocab):
    v = Vocabulary.from_file(TOKENIZER, n_vocab=vocab.tokenizer_size + 200)
    e = Engine(v)
    m = Matcher(e.compile_regex("[a-z ]+"))
    bm = allocate_token_bitmask(2, v.n_vocab)
    assert bm.shape[1] == (v.n_vocab + 31) // 32
    m.fill_next_token_bitmask(bm, 1)
    ok = allowed(bm[1], v.n_vocab)
    assert ok and max(ok) < vocab.tokenizer_size
    assert not bm[0].any()
    # A padding id is refused: the matcher stops with an error and allows EOS only.
    assert not m.consume_token(vocab.tokenizer_size + 5)
    assert "padding" in m.get_error()
    m.fill_next_token_bitmask(bm, 0)
    assert allowed(bm[0], v.n_vocab) == sorted(v.eos_token_ids)


def test_rollback_validate_forced_and_reset(engine, vocab, tok):
    g = engine.compile_gbnf('root ::= "{\\"answer\\": " ("yes" | "no") "}"')
    m = Matcher(g)
    forced = m.compute_ff_bytes()
    assert forced == b'{"answer": '
    # The forced tokens stop where the tokenizer would join the rest with what follows
    # (` yes` is one token): a prefix of the forced bytes.
    ids = m.compute_ff_tokens()
    assert ids and forced.startswith(tok.decode(ids).encode())
    draft = tok.encode('{"answer": maybe}', add_special_tokens=False).ids
    n = m.validate_tokens(draft)
    assert 0 < n < len(draft) and m.num_tokens() == 0
    assert m.consume_tokens(draft[:n])
    m.rollback(n)
    assert m.num_tokens() == 0
    assert m.consume_tokens(tok.encode('{"answer": yes}', add_special_tokens=False).ids)
    assert m.is_accepting()
    m.reset()
    assert m.num_tokens() == 0 and not m.is_accepting()


def test_budget_mask_closes_in_time(engine, vocab):
    m = Matcher(engine.compile_json_schema('{"type": "array", "items": {"type": "integer"}}'))
    bm = allocate_token_bitmask(1, vocab.n_vocab)
    m.fill_next_token_bitmask(bm, 0, tokens_left=1)
    # One token left: only a token that completes the output can come, then EOS.
    ok = allowed(bm[0], vocab.n_vocab)
    assert ok and all(vocab.token_bytes(t).startswith(b"[") for t in ok)


def test_bad_input_raises_with_positions(engine):
    with pytest.raises(ruvllm.GrammarError, match=r"at 2:10"):
        engine.compile_gbnf('root ::= "a"\nfoo ::= (')
    with pytest.raises(ruvllm.SchemaError, match=r"/properties/x"):
        engine.compile_json_schema('{"properties": {"x": {"minLength": -1}}}')
    with pytest.raises(ruvllm.SchemaError, match="not JSON"):
        engine.compile_json_schema("{")
    with pytest.raises(ruvllm.GrammarError):
        engine.compile_regex("(")
    with pytest.raises(ruvllm.GrammarError):
        engine.compile_builtin("no-such-grammar")
    with pytest.raises(ValueError):
        engine.compile_json_schema("{}", whitespace="sometimes")
    with pytest.raises(ruvllm.VocabularyError):
        Vocabulary.from_tokenizer_json("not a tokenizer")
    m = Matcher(engine.compile_choices(["yes", "no"]))
    with pytest.raises(ValueError):
        m.fill_next_token_bitmask(np.zeros((1, 3), dtype=np.int32))  # rows too short
    with pytest.raises((ValueError, TypeError, BufferError)):
        m.fill_next_token_bitmask(np.zeros((1, 5000), dtype=np.int64))
    assert not m.consume_token(2**31)
    assert m.is_stopped() and m.get_error()


def test_batch_fill_on_two_threads_equals_sequential(engine, vocab, tok):
    g = ruvllm.compile_json_schema(
        engine, {"type": "array", "items": {"type": "string", "maxLength": 30}}
    )
    texts = ['["a', '["hello", "wor', "[", '["x"', '["x", "y"]', '["\\u00e9']
    matchers = []
    for i in range(24):
        m = Matcher(g)
        assert m.consume_tokens(tok.encode(texts[i % len(texts)], add_special_tokens=False).ids)
        matchers.append(m)
    seq = allocate_token_bitmask(len(matchers), vocab.n_vocab)
    for i, m in enumerate(matchers):
        m.fill_next_token_bitmask(seq, i)
    par = allocate_token_bitmask(len(matchers), vocab.n_vocab)
    order = list(reversed(range(len(matchers))))
    ruvllm.fill_next_token_bitmask_par(
        [matchers[i] for i in order], par, indices=order, threads=2
    )
    assert np.array_equal(seq, par)


def compare_with_cli(vocab: Vocabulary, positions: list[tuple[str, Path, str, str, list[int]]]):
    """Asserts that each position's Python mask (`ok`, the allowed ids) equals the binary's:
    `positions` holds (name, grammar file, kind, prefix, ok). The binary runs once per
    grammar file with all of that file's prefixes (each run loads the 128k-token tokenizer:
    most of a run's time), as many runs at a time as there are cores."""
    groups: dict[tuple[Path, str], list[int]] = {}
    for i, (_, grammar, kind, _, _) in enumerate(positions):
        groups.setdefault((grammar, kind), []).append(i)
    cli: list = [None] * len(positions)

    def run(item):
        (grammar, kind), idx = item
        for i, answer in zip(idx, cli_masks(grammar, [positions[i][3] for i in idx], kind)):
            cli[i] = answer

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(run, groups.items()))
    eos_ids = set(vocab.eos_token_ids)
    for (name, _, _, _, ok), (count, first, eos) in zip(positions, cli):
        assert len(ok) == count, name
        assert ok[: len(first)] == first, name
        assert eos == bool(eos_ids & set(ok)), name


def cli_masks(grammar: Path, prefixes: list[str], kind: str = "--gbnf") -> list[tuple[int, list[int], bool]]:
    """The `ruvllm grammar mask` binary's count, first 50 allowed ids, and EOS after each of
    `prefixes`, for a grammar file of `kind` (`--gbnf` or `--schema`), from one run."""
    args = [os.environ["RUVLLM_BIN"], "grammar", "mask", kind, str(grammar), "--tokenizer",
            str(TOKENIZER), "--sample", "50"]
    for p in prefixes:
        args += ["--prefix", p]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    # With two or more prefixes each block is headed `prefix N: "..."`.
    blocks = re.split(r"^prefix \d+: .*\n", out, flags=re.M)[1:] if len(prefixes) > 1 else [out]
    assert len(blocks) == len(prefixes), out[:2000]
    res = []
    for block in blocks:
        head = re.match(r"(\d+) of \d+ tokens allowed; EOS (allowed|not allowed)", block)
        ids = [int(l.split()[0]) for l in block.splitlines()[1:] if re.match(r"\s*\d+\s", l)]
        res.append((int(head.group(1)), ids, head.group(2) == "allowed"))
    return res


def test_masks_equal_the_rust_binary_on_the_grammar_cases(engine, vocab):
    """Python's masks equal the `ruvllm` binary's (the Rust engine) after a prefix of each
    accepted case of the repository's own grammar cases."""
    if "RUVLLM_BIN" not in os.environ:
        pytest.fail("RUVLLM_BIN (the ruvllm binary) is not set: run crates/ruvllm-py/run-tests.sh")
    positions = []
    for cases_file in sorted(GRAMMARS.glob("*.cases.json")):
        cases = json.loads(cases_file.read_text())
        if cases.get("builtin") or cases.get("gbnf_file"):
            continue
        gbnf = cases_file.with_name(cases_file.name.replace(".cases.json", ".gbnf"))
        if not gbnf.exists():
            continue
        accept = [c for c in cases.get("accept", []) if isinstance(c, str) and c]
        if not accept:
            continue
        text = accept[0]
        prefix = text[: len(text) // 2]
        g = engine.compile_gbnf(gbnf.read_text())
        m = Matcher(g)
        # The raw prefix (not necessarily on token boundaries) through the byte tokens.
        ids = [t for b in prefix.encode() for t in [byte_token(vocab, b)]]
        if None in ids or not m.consume_tokens(ids):
            continue
        bm = allocate_token_bitmask(1, vocab.n_vocab)
        m.fill_next_token_bitmask(bm, 0)
        positions.append((gbnf.name, gbnf, "--gbnf", prefix, allowed(bm[0], vocab.n_vocab)))
    compare_with_cli(vocab, positions)
    assert len(positions) >= 10, f"only {len(positions)} grammars compared"


_BYTE_TOKENS: dict[int, int] = {}


def byte_token(vocab: Vocabulary, b: int) -> int | None:
    if not _BYTE_TOKENS:
        for t in range(vocab.tokenizer_size):
            bs = vocab.token_bytes(t)
            if len(bs) == 1:
                _BYTE_TOKENS.setdefault(bs[0], t)
    return _BYTE_TOKENS.get(b)


MASKBENCH = ROOT.parent / "shared/data/maskbench/data"


def test_masks_equal_the_rust_binary_on_a_maskbench_sample(engine, vocab, tmp_path):
    """Python's masks equal the `ruvllm` binary's on every 250th MaskBench schema, at three
    points of its first valid instance (the CLI compiles with validator semantics and
    bounded whitespace: the same options are passed here)."""
    if "RUVLLM_BIN" not in os.environ:
        pytest.fail("RUVLLM_BIN (the ruvllm binary) is not set: run crates/ruvllm-py/run-tests.sh")
    assert MASKBENCH.is_dir(), f"{MASKBENCH} is missing (../shared/data)"
    positions = []
    for f in sorted(MASKBENCH.glob("*.json"))[::250]:
        d = json.loads(f.read_text())
        valid = [t for t in d["tests"] if t.get("valid")]
        if not valid:
            continue
        try:
            g = engine.compile_json_schema(json.dumps(d["schema"]), generation=False)
        except ruvllm.RuvllmError:
            continue
        schema = tmp_path / f.name
        schema.write_text(json.dumps(d["schema"]))
        text = json.dumps(valid[0]["data"], indent=2)
        for cut in (len(text) // 4, len(text) // 2, len(text)):
            prefix = text[:cut]
            m = Matcher(g)
            ids = [byte_token(vocab, b) for b in prefix.encode()]
            if None in ids or not m.consume_tokens(ids):
                break
            bm = allocate_token_bitmask(1, vocab.n_vocab)
            m.fill_next_token_bitmask(bm, 0)
            ok = allowed(bm[0], vocab.n_vocab)
            positions.append((f"{f.name} at {cut}", schema, "--schema", prefix, ok))
    compare_with_cli(vocab, positions)
    assert len(positions) >= 30, f"only {len(positions)} positions compared"
