"""Fixtures shared by the engine adapters' tests: the default model (SmolLM2-135M-Instruct)
loaded once by transformers from its GGUF, for real logits."""

from __future__ import annotations

from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[3] / "assets/models"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The schema the generation tests ask the default model to fill (a city and its population).
CITY_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "population": {"type": "integer", "minimum": 0},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture(scope="session")
def smollm2():
    """(tokenizer, model) of the default model, on the CPU."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (MODELS / GGUF).exists(), "the default model is missing: run scripts/fetch-assets.sh"
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=GGUF)
    return tok, model


def chat_ids(tok, text: str) -> list[int]:
    """The prompt ids of one user message in the model's chat template."""
    chat = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    return tok(chat)["input_ids"]


def next_logits(model, seqs: list[list[int]]):
    """The next-token logits of each sequence (one forward pass each, float32)."""
    import torch

    with torch.no_grad():
        return torch.cat([model(torch.tensor([s])).logits[:, -1, :].float() for s in seqs])
