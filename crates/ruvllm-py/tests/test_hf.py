"""`transformers` generate() on the default model (SmolLM2-135M-Instruct, loaded from its
GGUF by transformers itself) under ruvllm's logits processor: outputs complete (EOS
before the token limit) and valid, checked with independent validators."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch

import ruvllm
from ruvllm.hf import RuvllmLogitsProcessor

MAX_NEW = 96


@pytest.fixture(scope="module")
def hf(smollm2):
    """The session's model (conftest.py: loading it from the GGUF takes about 15 s) and an
    engine over its tokenizer."""
    tok, model = smollm2
    vocab = ruvllm.vocabulary_from_hf_tokenizer(tok, n_vocab=model.config.vocab_size)
    return tok, model, ruvllm.Engine(vocab)


def generate(hf, grammar, prompts: list[str]) -> list[tuple[str, bool]]:
    """The texts generated for `prompts` (one batch, left-padded) and whether each ended
    with EOS within the token limit."""
    tok, model, _ = hf
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    inp = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **inp,
            logits_processor=[RuvllmLogitsProcessor(grammar)],
            max_new_tokens=MAX_NEW,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
    res = []
    for row in out[:, inp["input_ids"].shape[1]:].tolist():
        ended = tok.eos_token_id in row
        if ended:
            row = row[: row.index(tok.eos_token_id)]
        res.append((tok.decode(row, skip_special_tokens=True), ended))
    return res


def test_json_schema(hf):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": False,
    }
    g = ruvllm.compile_json_schema(hf[2], schema)
    outs = generate(hf, g, ["Describe a person as JSON.", "Give me a JSON record of a cat owner."])
    for text, ended in outs:
        assert ended, f"cut by the token limit: {text!r}"
        jsonschema.validate(json.loads(text), schema)


def test_gbnf(hf):
    gbnf = 'root ::= "colors: " color (", " color){0,3}\ncolor ::= "red" | "green" | "blue" | "yellow"'
    g = hf[2].compile_gbnf(gbnf)
    for text, ended in generate(hf, g, ["List some colors."]):
        assert ended, f"cut by the token limit: {text!r}"
        assert re.fullmatch(r"colors: (red|green|blue|yellow)(, (red|green|blue|yellow)){0,3}", text), text


def test_one_processor_serves_two_generate_calls(hf):
    """A processor reused for a second `generate()` starts fresh matchers, whatever the
    prompt lengths."""
    tok, model, engine = hf
    g = engine.compile_regex(r"(yes|no)")
    proc = RuvllmLogitsProcessor(g)
    for prompt in ["Is water wet?", "Is fire cold? Answer yes or no."]:
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        inp = tok(text, return_tensors="pt")
        out = model.generate(**inp, logits_processor=[proc], max_new_tokens=8, do_sample=False)
        row = out[0, inp["input_ids"].shape[1]:].tolist()
        assert tok.eos_token_id in row, row
        assert tok.decode(row[: row.index(tok.eos_token_id)]) in ("yes", "no")


def test_regex(hf):
    pattern = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    g = hf[2].compile_regex(pattern)
    for text, ended in generate(hf, g, ["When did the moon landing happen? Answer with a date."]):
        assert ended, f"cut by the token limit: {text!r}"
        assert re.fullmatch(pattern, text), text
