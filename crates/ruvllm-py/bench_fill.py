"""Bitmask fills from Python, ruvllm against the llguidance wheel, in one run on the same
MaskBench schemas, positions and tokens: a single-row fill per position (what a sampler
loop calls per step), and a 64-row batch fill on 2 threads (what a batched engine calls),
each position filled once, as in generation. As MaskBench does, every valid instance of a
schema (up to --instances) is walked with one compiled grammar per engine.

Usage (the venv of crates/ruvllm-py/run-tests.sh, plus `pip install llguidance`):
    .venv-py/bin/python crates/ruvllm-py/bench_fill.py [--every N] [MASKBENCH_DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import llguidance
import llguidance.numpy as lln
from tokenizers import Tokenizer

import ruvllm

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="?", default=str(ROOT.parent / "shared/data/maskbench/data"))
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--tokenizer", default=str(ROOT / "assets/tokenizers/llama3_1/tokenizer.json"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--steps", type=int, default=32)
    a = ap.parse_args()

    text = Path(a.tokenizer).read_text()
    tok = Tokenizer.from_str(text)
    vocab = ruvllm.Vocabulary.from_tokenizer_json(text)
    engine = ruvllm.Engine(vocab)
    lltok = llguidance.LLTokenizer(text, n_vocab=vocab.n_vocab, eos_token=vocab.eos_token_ids)
    n = vocab.n_vocab

    # (ruvllm grammar, llguidance grammar, tokens of a valid instance) for every sampled
    # schema both compile, and each of its valid instances both accept.
    cases = []
    files = sorted(Path(a.data).glob("*.json"))[:: a.every]
    for f in files:
        d = json.loads(f.read_text())
        valid = [t for t in d["tests"] if t.get("valid")]
        if not valid:
            continue
        try:
            g = engine.compile_json_schema(
                json.dumps(d["schema"]), whitespace="flexible", any_order=True, generation=False
            )
        except ruvllm.RuvllmError:
            continue
        lg = llguidance.LLMatcher.grammar_from_json_schema(
            d["schema"], defaults={"whitespace_flexible": True}
        )
        probe = llguidance.LLMatcher(lltok, lg, log_level=0)
        if probe.is_error():
            continue
        for inst in valid[: a.instances]:
            ids = tok.encode(json.dumps(inst["data"]), add_special_tokens=False).ids
            m = ruvllm.Matcher(g)
            probe = llguidance.LLMatcher(lltok, lg, log_level=0)
            if m.consume_tokens(ids) and probe.consume_tokens(ids):
                cases.append((g, lg, ids))
    print(f"{len(cases)} instances of {len(files)} sampled schemas (both engines compile and accept them)")

    # Single-row fills, position by position, alternating which engine goes first per file.
    ours, theirs, positions = [], [], 0
    bm_r = ruvllm.allocate_token_bitmask(1, n)
    bm_l = lln.allocate_token_bitmask(1, n)
    for k, (g, lg, ids) in enumerate(cases):
        m = ruvllm.Matcher(g)
        lm = llguidance.LLMatcher(lltok, lg, log_level=0)
        for t in ids + [None]:
            def r() -> float:
                t0 = time.perf_counter()
                m.fill_next_token_bitmask(bm_r, 0)
                return time.perf_counter() - t0

            def l() -> float:
                t0 = time.perf_counter()
                lln.fill_next_token_bitmask(lm, bm_l, 0)
                return time.perf_counter() - t0

            if k % 2:
                x, y = r(), l()
            else:
                y, x = l(), r()
            ours.append(x)
            theirs.append(y)
            positions += 1
            if t is not None:
                m.consume_token(t)
                lm.consume_token(t)

    # Batches: `batch` sequences (the cases, repeated), each step fills every row once
    # (one position per sequence), then each sequence consumes its next token.
    long = [c for c in cases if len(c[2]) >= a.steps] or cases
    seqs = [long[i % len(long)] for i in range(a.batch)]
    ex = llguidance.LLExecutor(num_threads=a.threads)

    def run_batches(kind: str) -> list[float]:
        ms = [ruvllm.Matcher(g) if kind == "r" else llguidance.LLMatcher(lltok, lg, log_level=0) for g, lg, _ in seqs]
        bm = ruvllm.allocate_token_bitmask(a.batch, n)
        times = []
        steps = min(a.steps, min(len(ids) for _, _, ids in seqs))
        for s in range(steps):
            t0 = time.perf_counter()
            if kind == "r":
                ruvllm.fill_next_token_bitmask_par(ms, bm, threads=a.threads)
            else:
                lln.fill_next_token_bitmask_par(ex, [(m, i) for i, m in enumerate(ms)], bm)
            times.append(time.perf_counter() - t0)
            for m, (_, _, ids) in zip(ms, seqs):
                m.consume_token(ids[s])
        return times

    # The engines' caches are warm from the single-row pass for both: the batches measure
    # fills at positions each matcher meets for the first time.
    br = run_batches("r")
    bl = run_batches("l")

    # What the binding adds: a fill that computes nothing (a stopped matcher: EOS only),
    # and a warm repeated fill at one position inside a string.
    def per_call(f, n: int = 20000) -> float:
        f()
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        return (time.perf_counter() - t0) / n

    stopped = ruvllm.Matcher(cases[0][0])
    stopped.consume_token(2**31 - 1)
    in_string = ruvllm.Matcher(engine.compile_json_schema('{"type": "string"}'))
    in_string.consume_tokens(tok.encode('"some text', add_special_tokens=False).ids)
    overhead = per_call(lambda: stopped.fill_next_token_bitmask(bm_r, 0))
    warm = per_call(lambda: in_string.fill_next_token_bitmask(bm_r, 0))

    def us(x: list[float]) -> str:
        return f"mean {statistics.mean(x) * 1e6:.1f} µs, median {statistics.median(x) * 1e6:.1f} µs"

    print(f"single-row fill, {positions} positions: ruvllm {us(ours)}; llguidance {us(theirs)}")
    print(
        f"  ratio ruvllm/llguidance: mean {statistics.mean(ours) / statistics.mean(theirs):.2f}x, "
        f"median {statistics.median(ours) / statistics.median(theirs):.2f}x"
    )
    print(f"binding overhead (a stopped matcher's EOS-only fill): {overhead * 1e6:.2f} µs; warm fill inside a string: {warm * 1e6:.2f} µs")
    print(f"{a.batch}-row batch fill on {a.threads} threads, {len(br)} steps: ruvllm {us(br)}; llguidance {us(bl)}")
    print(
        f"  ratio ruvllm/llguidance: mean {statistics.mean(br) / statistics.mean(bl):.2f}x, "
        f"median {statistics.median(br) / statistics.median(bl):.2f}x"
    )


if __name__ == "__main__":
    main()
