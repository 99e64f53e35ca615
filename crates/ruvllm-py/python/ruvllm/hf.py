"""The adapter for Hugging Face `transformers`: a logits processor for `generate()`.

    from ruvllm.hf import RuvllmLogitsProcessor
    proc = RuvllmLogitsProcessor(grammar)
    out = model.generate(**inputs, logits_processor=[proc], max_new_tokens=64)

One matcher per batch row, made fresh at the first step of each `generate()` call (a call
whose input is not the last one plus one token); each later step commits the token the
previous one chose, then masks the scores (disallowed
tokens to -inf). A row that has produced EOS allows EOS only (the padding `generate()`
appends after it). Build the grammar in an `Engine` whose vocabulary has the model's
logits width: `ruvllm.vocabulary_from_hf_tokenizer(tokenizer, n_vocab=scores width)`.
"""

from __future__ import annotations

from typing import Any

import transformers

import ruvllm


class RuvllmLogitsProcessor(transformers.LogitsProcessor):
    """Constrains `generate()` to `grammar` (a `ruvllm.Grammar`), every row of the batch."""

    def __init__(self, grammar: ruvllm.Grammar, threads: int = 2) -> None:
        self.grammar = grammar
        self.threads = threads
        self.matchers: list[ruvllm.Matcher] = []
        self.last: Any = None  # input_ids at the last call
        self.bitmask: Any = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        batch, length = input_ids.shape
        prev = self.last
        goes_on = (
            prev is not None
            and len(self.matchers) == batch
            and prev.shape[1] + 1 == length
            and torch.equal(input_ids[:, :-1], prev)
        )
        if not goes_on:
            # A new generate() call (or the first): fresh matchers at the grammar's start.
            self.matchers = [ruvllm.Matcher(self.grammar) for _ in range(batch)]
        else:
            last = input_ids[:, -1].tolist()
            for m, t in zip(self.matchers, last):
                if not m.is_stopped():
                    m.consume_token(int(t))
        self.last = input_ids.clone()
        words = (scores.shape[-1] + 31) // 32
        if self.bitmask is None or self.bitmask.shape != (batch, words):
            self.bitmask = torch.zeros((batch, words), dtype=torch.int32)
        ruvllm.fill_next_token_bitmask_par(self.matchers, self.bitmask, threads=self.threads)
        ruvllm.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
        return scores
