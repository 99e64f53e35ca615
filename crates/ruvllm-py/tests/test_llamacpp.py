"""`llama-cpp-python` on the default model (its GGUF) under ruvllm's logits processor:
outputs complete (`finish_reason` "stop" within the token limit) and valid, checked with
independent validators."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from llama_cpp import Llama, LogitsProcessorList

import ruvllm
from ruvllm.llamacpp import RuvllmLlamaProcessor, vocabulary_from_llama

GGUF = Path(__file__).resolve().parents[3] / "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_TOKENS = 96


@pytest.fixture(scope="module")
def llm():
    assert GGUF.exists(), "the default model is missing: run scripts/fetch-assets.sh"
    llm = Llama(model_path=str(GGUF), n_ctx=1024, n_threads=2, verbose=False, seed=0)
    return llm, ruvllm.Engine(vocabulary_from_llama(llm))


def chat(llm, grammar, prompt: str) -> tuple[str, str]:
    model, _ = llm
    out = model.create_chat_completion(
        messages=[{"role": "user", "content": prompt}],
        logits_processor=LogitsProcessorList([RuvllmLlamaProcessor(grammar)]),
        max_tokens=MAX_TOKENS,
        temperature=0.0,
    )
    choice = out["choices"][0]
    return choice["message"]["content"], choice["finish_reason"]


def test_json_schema(llm):
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "population": {"type": "integer", "minimum": 0},
        },
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    text, finish = chat(llm, ruvllm.compile_json_schema(llm[1], schema), "Give a city as JSON.")
    assert finish == "stop", f"cut by the token limit: {text!r}"
    jsonschema.validate(json.loads(text), schema)


def test_gbnf(llm):
    g = llm[1].compile_gbnf('root ::= "answer: " ("yes" | "no") "."')
    text, finish = chat(llm, g, "Is the sky blue?")
    assert finish == "stop", f"cut by the token limit: {text!r}"
    assert re.fullmatch(r"answer: (yes|no)\.", text), text


def test_regex(llm):
    pattern = r"[A-Z][a-z]+ [0-9]{1,3}"
    text, finish = chat(llm, llm[1].compile_regex(pattern), "Name a street and a house number.")
    assert finish == "stop", f"cut by the token limit: {text!r}"
    assert re.fullmatch(pattern, text), text
