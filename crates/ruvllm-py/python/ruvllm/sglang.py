"""The adapter for SGLang: a grammar backend (`--grammar-backend ruvllm`).

Installing the `ruvllm` package registers `register` under SGLang's general-plugin entry
point (`sglang.srt.plugins`); SGLang runs it at start-up, and it adds "ruvllm" to the
grammar-backend choices and to SGLang's backend registry. Then:

    python -m sglang.launch_server --model-path MODEL --grammar-backend ruvllm

serves `response_format` JSON Schemas, `regex`, `ebnf` (GBNF) and structural tags (the
`structures`/`triggers` form) through ruvllm, with jump-forward (`try_jump_forward` gives
the forced tokens) and speculative draft trees (accept and rollback per token).

The grammar objects follow SGLang's `BaseGrammarObject` contract as its llguidance backend
does: a packed int32 bitmask (`ceil(vocab/32)` words per row, -1 = unconstrained), rows
filled on several threads in one call, a stopped or failed matcher allowing EOS only.
JSON whitespace is ruvllm's bounded default (compact or pretty-printed, no runaway), or
none with `--constrained-json-disable-any-whitespace`.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarRow,
    InvalidGrammarObject,
)

import ruvllm

logger = logging.getLogger(__name__)


class RuvllmGrammarObject(BaseGrammarObject):
    """One request's matcher over a compiled `ruvllm.Grammar`."""

    def __init__(self, grammar: ruvllm.Grammar) -> None:
        super().__init__()
        self.grammar = grammar
        self.matcher = ruvllm.Matcher(grammar)

    def accept_token(self, token: int) -> None:
        if self.finished:
            return
        if not self.matcher.consume_token(token):
            raise ValueError(f"ruvllm: {self.matcher.get_error()}")
        if self.matcher.is_stopped():
            # EOS was committed: the output is complete.
            self.finished = True

    def rollback(self, k: int) -> None:
        if k <= 0:
            return
        self.finished = False
        self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.finished

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        return torch.full((batch_size, ruvllm.bitmask_words(vocab_size)), -1, dtype=torch.int32)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: List[GrammarRow], vocab_mask: torch.Tensor) -> None:
        """All rows in one call, on 2 threads with the GIL released."""
        if not entries:
            return
        if all(isinstance(e.grammar, RuvllmGrammarObject) for e in entries):
            ruvllm.fill_next_token_bitmask_par(
                [e.grammar.matcher for e in entries], vocab_mask, indices=[e.row for e in entries]
            )
            return
        BaseGrammarObject.fill_vocab_mask_batched(entries, vocab_mask)

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        ruvllm.apply_token_bitmask_inplace(logits, vocab_mask)

    def copy(self) -> "RuvllmGrammarObject":
        # The cached object is a template: a request gets a fresh matcher of the same
        # compiled grammar (no recompile).
        return RuvllmGrammarObject(self.grammar)

    def try_jump_forward(self, tokenizer: Any) -> Optional[Tuple[List[int], str]]:
        ff = self.matcher.compute_ff_tokens()
        return (ff, "") if ff else None

    def jump_forward_str_state(self, helper: Tuple[List[int], str]) -> Tuple[str, int]:
        return "", -1

    def jump_and_retokenize(self, old_output_ids: List[int], new_output_ids: List[int], next_state: int) -> None:
        pass


class RuvllmGrammarBackend(BaseGrammarBackend):
    """SGLang's grammar backend over one `ruvllm.Engine` (the tokenizer's vocabulary with
    the model's logits width)."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: Optional[Any] = None,
        any_whitespace: bool = True,
    ) -> None:
        super().__init__()
        eos = sorted(eos_token_ids) if eos_token_ids else None
        vocab = ruvllm.vocabulary_from_hf_tokenizer(
            tokenizer, n_vocab=max(vocab_size, len(tokenizer)), eos_token_ids=eos
        )
        self.engine = ruvllm.Engine(vocab)
        self.whitespace = "bounded" if any_whitespace else "compact"

    def _make(self, compile_: Any, *args: Any, **kwargs: Any) -> BaseGrammarObject:
        try:
            return RuvllmGrammarObject(compile_(*args, **kwargs))
        except (ruvllm.RuvllmError, ValueError) as e:
            logger.error("ruvllm: invalid grammar: %s", e)
            return InvalidGrammarObject(str(e))

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        return self._make(self.engine.compile_json_schema, key_string, whitespace=self.whitespace)

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._make(self.engine.compile_regex, key_string)

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        return self._make(self.engine.compile_gbnf, key_string)

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        return self._make(self.engine.compile_structural_tag, key_string, whitespace=self.whitespace)


def create_backend(server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Optional[Any] = None):
    """The factory SGLang's registry calls: `(server_args, tokenizer, vocab_size,
    eos_token_ids)`."""
    no_ws = bool(getattr(server_args, "constrained_json_disable_any_whitespace", False))
    return RuvllmGrammarBackend(tokenizer, vocab_size, eos_token_ids, any_whitespace=not no_ws)


def register() -> None:
    """The `sglang.srt.plugins` entry point: makes `--grammar-backend ruvllm` valid and
    registers the factory."""
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices
    from sglang.srt.constrained.base_grammar_backend import register_grammar_backend

    if "ruvllm" not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices(["ruvllm"])
    register_grammar_backend("ruvllm", create_backend)
