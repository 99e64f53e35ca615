"""The C ABI and the llama.cpp sampler, from C: `examples/c/llama_generate.c` and
`crates/ruvllm-capi/llama/test_sampler.c` are compiled with `cc` against `ruvllm.h` and the
llama.cpp that this venv built from source (llama-cpp-python 0.3.36 vendors it and installs
its headers and shared libraries), linked with `libruvllm.so` (built beside the `ruvllm`
binary by run-tests.sh), and run on the default model. Outputs must be complete (EOS
before the token limit) and valid, checked with independent validators."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import llama_cpp
import pytest
from conftest import CITY_SCHEMA

ROOT = Path(__file__).resolve().parents[3]
GGUF = ROOT / "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
CAPI = ROOT / "crates/ruvllm-capi"
LLAMA_PKG = Path(llama_cpp.__file__).parent
LLAMA_INCLUDE = LLAMA_PKG.parent / "include"
LLAMA_LIB = LLAMA_PKG / "lib"


def ruvllm_lib_dir() -> Path:
    d = Path(os.environ["RUVLLM_BIN"]).parent
    assert (d / "libruvllm.so").exists(), f"{d}/libruvllm.so is missing: cargo build -p ruvllm-capi"
    return d


def build(src: Path, out: Path) -> Path:
    assert (LLAMA_INCLUDE / "llama.h").exists(), f"llama.h is missing under {LLAMA_INCLUDE}"
    lib = ruvllm_lib_dir()
    cmd = [
        "cc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror",
        f"-I{LLAMA_INCLUDE}", f"-I{CAPI / 'include'}", f"-I{CAPI / 'llama'}",
        str(src), str(CAPI / "llama/ruvllm_llama.c"), "-o", str(out),
        f"-L{LLAMA_LIB}", f"-L{lib}", "-lruvllm", "-lllama", "-lm",
        f"-Wl,-rpath,{LLAMA_LIB}", f"-Wl,-rpath,{lib}",
    ]
    subprocess.run(cmd, check=True)
    return out


@pytest.fixture(scope="module")
def generate(tmp_path_factory) -> Path:
    assert GGUF.exists(), "the default model is missing: run scripts/fetch-assets.sh"
    return build(ROOT / "examples/c/llama_generate.c", tmp_path_factory.mktemp("c") / "llama_generate")


def run(exe: Path, kind: str, spec: str, prompt: str, tmp_path: Path, max_tokens: int = 96):
    f = tmp_path / "spec"
    f.write_text(spec)
    p = subprocess.run(
        [str(exe), str(GGUF), kind, str(f), prompt, str(max_tokens)],
        capture_output=True, text=True, timeout=300,
    )
    tail = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 0, f"rc {p.returncode}: {p.stdout!r} {p.stderr[-2000:]}"
    assert tail.startswith("finish_reason=stop"), tail
    return p.stdout, int(re.search(r"tokens=(\d+)", tail).group(1))


def test_sampler_contract(tmp_path):
    exe = build(CAPI / "llama/test_sampler.c", tmp_path / "test_sampler")
    p = subprocess.run([str(exe), str(GGUF)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("ok:"), p.stdout


def test_schema(generate, tmp_path):
    schema = CITY_SCHEMA
    out, n = run(generate, "schema", json.dumps(schema),
                 "What is the largest city of France, and its population? Answer in JSON.", tmp_path)
    jsonschema.validate(json.loads(out), schema)
    assert n <= 96


def test_gbnf(generate, tmp_path):
    gbnf = 'root ::= "answer: " ("yes" | "no") "."\n'
    out, _ = run(generate, "gbnf", gbnf, "Is the sky green?", tmp_path)
    assert re.fullmatch(r"answer: (yes|no)\.", out), out


def test_regex(generate, tmp_path):
    out, _ = run(generate, "regex", r"[A-Z][a-z]+ [0-9]{1,4}", "Name a city and a year.", tmp_path)
    assert re.fullmatch(r"[A-Z][a-z]+ [0-9]{1,4}", out), out


def test_budget_keeps_the_output_complete(generate, tmp_path):
    # A list the model would go on with: with 24 tokens the sampler's budget mask closes it
    # in time, and the output is still complete and valid.
    schema = {"type": "array", "items": {"type": "string", "maxLength": 12}}
    out, n = run(generate, "schema", json.dumps(schema),
                 "List thirty fruits as a JSON array of strings.", tmp_path, max_tokens=24)
    jsonschema.validate(json.loads(out), schema)
    assert n <= 24
