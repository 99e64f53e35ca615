"""ruvllm: exact grammar-constrained decoding.

Token masks for JSON Schema, GBNF (llama.cpp's format), regular expressions and choice
lists, over a real vocabulary. One `Engine` per vocabulary holds the caches every grammar
shares; a `Matcher` follows one sequence and fills one row of an int32 bitmask
(`ceil(n_vocab / 32)` words, bit `t % 32` of word `t // 32`) per step.

    from ruvllm import Vocabulary, Engine, Matcher, allocate_token_bitmask
    vocab = Vocabulary.from_file("tokenizer.json")
    engine = Engine(vocab)
    grammar = engine.compile_json_schema('{"type": "object"}')
    m = Matcher(grammar)
    bitmask = allocate_token_bitmask(1, vocab.n_vocab)
    m.fill_next_token_bitmask(bitmask, 0)
"""

from __future__ import annotations

import json as _json
from typing import Any, Sequence

from ._ruvllm import (
    Engine,
    Grammar,
    GrammarError,
    Matcher,
    RuvllmError,
    SchemaError,
    Vocabulary,
    VocabularyError,
    fill_next_token_bitmask_par,
)

__all__ = [
    "Engine",
    "Grammar",
    "GrammarError",
    "Matcher",
    "RuvllmError",
    "SchemaError",
    "Vocabulary",
    "VocabularyError",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_words",
    "compile_json_schema",
    "fill_next_token_bitmask_par",
    "vocabulary_from_hf_tokenizer",
]


def bitmask_words(n_vocab: int) -> int:
    """Words of one bitmask row: ceil(n_vocab / 32)."""
    return (n_vocab + 31) // 32


def allocate_token_bitmask(batch: int, n_vocab: int) -> Any:
    """A zeroed numpy int32 bitmask of shape (batch, ceil(n_vocab / 32))."""
    import numpy as np

    return np.zeros((batch, bitmask_words(n_vocab)), dtype=np.int32)


def apply_token_bitmask_inplace(logits: Any, bitmask: Any) -> None:
    """Sets the logits of disallowed tokens to -inf, row by row (numpy or torch; logits of
    shape (batch, n) or (n,), bitmask of shape (batch, words) or (words,))."""
    # A torch tensor's type lives in the torch package; torch is imported only then.
    if type(logits).__module__.startswith("torch"):
        import torch

        bits = torch.as_tensor(bitmask, device=logits.device)
        n = logits.shape[-1]
        idx = torch.arange(n, device=logits.device)
        allowed = (bits[..., idx // 32] >> (idx % 32)) & 1
        logits.masked_fill_(allowed == 0, float("-inf"))
        return
    import numpy as np

    bits = np.asarray(bitmask)
    n = logits.shape[-1]
    idx = np.arange(n)
    allowed = (bits[..., idx // 32] >> (idx % 32)) & 1
    logits[allowed == 0] = -np.inf


def vocabulary_from_hf_tokenizer(
    tokenizer: Any, n_vocab: int | None = None, eos_token_ids: Sequence[int] | None = None
) -> Vocabulary:
    """A vocabulary from a Hugging Face fast tokenizer (`transformers.PreTrainedTokenizerFast`
    or a `tokenizers.Tokenizer`): its `tokenizer.json`, the model's logits width
    `n_vocab` (default: the tokenizer's), and its EOS ids (default: `eos_token_id`)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    text = backend.to_str()
    if eos_token_ids is None:
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            eos_token_ids = [eos]
        elif isinstance(eos, (list, tuple)):
            eos_token_ids = list(eos)
    return Vocabulary.from_tokenizer_json(
        text, n_vocab=n_vocab, eos_token_ids=list(eos_token_ids) if eos_token_ids else None
    )


def compile_json_schema(engine: Engine, schema: Any, **options: Any) -> Grammar:
    """`engine.compile_json_schema` for a schema given as a dict (or a JSON string)."""
    text = schema if isinstance(schema, str) else _json.dumps(schema)
    return engine.compile_json_schema(text, **options)
