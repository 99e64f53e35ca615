"""The adapters for vLLM (V1 engine).

Two ways in, both tested against the real `vllm` package (tests/test_vllm.py):

1. **A structured-output backend** (`RuvllmBackend`, `RuvllmGrammar`): vLLM's
   `StructuredOutputBackend` / `StructuredOutputGrammar` contract, the same as its
   `guidance` and `xgrammar` backends: compile per request type (JSON Schema, JSON object,
   regex, GBNF grammar, choice), accept, validate (speculative drafts), rollback, fill a
   bitmask row, terminate, reset. vLLM picks its backend by name inside
   `StructuredOutputManager`, so this one is enabled by the small upstream change that
   docs/vllm-backend-proposal.md describes, or by `install_backend(manager)` on an engine
   you build yourself.

2. **A logits-processor plugin** (`RuvllmLogitsProcessor`), the out-of-tree route vLLM
   offers today: installing the `ruvllm` package registers it under vLLM's
   `vllm.logits_processors` entry point, and it does nothing until a request asks for it:

       SamplingParams(extra_args={"ruvllm": {"json_schema": {...}}})
       # or {"regex": "..."}, {"gbnf": "..."}, {"choice": [...]}, {"json_object": True},
       # {"structural_tag": {"structures": [...], "triggers": [...]}}

   Through the OpenAI server, send it as a JSON string (its `vllm_xargs` carry strings,
   numbers and lists only):

       extra_body={"vllm_xargs": {"ruvllm": json.dumps({"json_schema": schema})}}

   It keeps one matcher per batch row (following vLLM's batch updates: added, removed,
   moved), commits each step's new tokens, and masks the logits row in place. vLLM disables custom logits processors
   under speculative decoding; the backend (1) is the route that supports drafts.

The EOS tokens and the request's stop-token ids are allowed exactly when the output is
complete. Structural tags are supported in their `structures`/`triggers` form (free text,
and tags holding JSON of their schema); the newer `format` form is refused with an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

import ruvllm


def _whitespace(vllm_config: Any) -> str:
    cfg = getattr(vllm_config, "structured_outputs_config", None)
    return "compact" if getattr(cfg, "disable_any_whitespace", False) else "bounded"


def _strict(vllm_config: Any) -> bool:
    cfg = getattr(vllm_config, "structured_outputs_config", None)
    return bool(getattr(cfg, "disable_additional_properties", False))


def _compile(engine: ruvllm.Engine, kind: str, spec: Any, whitespace: str, strict: bool) -> ruvllm.Grammar:
    """Compiles one request's constraint; `kind` is json, json_object, regex, grammar,
    choice, structural_tag (vLLM's names) or gbnf."""
    if kind == "json":
        text = spec if isinstance(spec, str) else json.dumps(spec)
        return engine.compile_json_schema(text, whitespace=whitespace, strict=strict)
    if kind == "json_object":
        return engine.compile_builtin("json_object")
    if kind == "regex":
        return engine.compile_regex(spec)
    if kind in ("grammar", "gbnf"):
        return engine.compile_gbnf(spec)
    if kind == "structural_tag":
        text = spec if isinstance(spec, str) else json.dumps(spec)
        return engine.compile_structural_tag(text, whitespace=whitespace, strict=strict)
    if kind == "choice":
        choices = json.loads(spec) if isinstance(spec, str) else spec
        return engine.compile_choices([str(c) for c in choices])
    raise ValueError(f"ruvllm: unsupported structured output type {kind!r}")


_KINDS = {
    StructuredOutputOptions.JSON: "json",
    StructuredOutputOptions.JSON_OBJECT: "json_object",
    StructuredOutputOptions.REGEX: "regex",
    StructuredOutputOptions.GRAMMAR: "grammar",
    StructuredOutputOptions.CHOICE: "choice",
    StructuredOutputOptions.STRUCTURAL_TAG: "structural_tag",
}


@dataclass
class RuvllmBackend(StructuredOutputBackend):
    """vLLM's engine-level structured-output backend over one `ruvllm.Engine` (built from
    the engine's tokenizer, with the model's logits width `vocab_size`)."""

    def __post_init__(self) -> None:
        vocab = ruvllm.vocabulary_from_hf_tokenizer(
            self.tokenizer, n_vocab=max(self.vocab_size, len(self.tokenizer))
        )
        self.engine = ruvllm.Engine(vocab)
        self.n_vocab = vocab.n_vocab
        self.whitespace = _whitespace(self.vllm_config)
        self.strict = _strict(self.vllm_config)

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> StructuredOutputGrammar:
        kind = _KINDS.get(request_type)
        if kind is None:
            raise ValueError(f"ruvllm: {request_type.name} requests are not supported")
        grammar = _compile(self.engine, kind, grammar_spec, self.whitespace, self.strict)
        return RuvllmGrammar(ruvllm.Matcher(grammar), set(stop_token_ids or ()))

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return torch.full((max_num_seqs, ruvllm.bitmask_words(self.n_vocab)), -1, dtype=torch.int32)

    def destroy(self) -> None:
        pass


@dataclass
class RuvllmGrammar(StructuredOutputGrammar):
    """One request's matcher. `stop_ids`: the request's EOS and stop-token ids, allowed
    exactly when the output is complete (the tokenizer's EOS always is)."""

    matcher: ruvllm.Matcher
    stop_ids: set[int] = field(default_factory=set)
    # A stop id that is not an EOS of the vocabulary, accepted at a complete output: the
    # matcher does not see it, so it is counted here (for rollback).
    stopped_by: int | None = None

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        for t in tokens:
            if self.stopped_by is not None:
                return False
            if t in self.stop_ids and not self.matcher.is_stopped() and self.matcher.is_accepting():
                if not self.matcher.consume_token(t):
                    # Not an EOS of the vocabulary: a user stop id, taken as the end.
                    self.matcher.rollback(0)
                    self.stopped_by = t
                continue
            if not self.matcher.consume_token(t):
                return False
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        # vLLM pads drafts with -1.
        draft = []
        for t in tokens:
            if t < 0:
                break
            draft.append(t)
        if self.stopped_by is not None:
            return []
        return draft[: self.matcher.validate_tokens(draft)]

    def rollback(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        if self.stopped_by is not None:
            self.stopped_by = None
            num_tokens -= 1
        if num_tokens:
            self.matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, batch_index)
        if self.stop_ids and not self.matcher.is_stopped() and self.matcher.is_accepting():
            import numpy as np

            row = bitmask[batch_index].numpy().view(np.uint32)
            for t in self.stop_ids:
                if 0 <= t >> 5 < row.shape[0]:
                    row[t >> 5] |= np.uint32(1 << (t & 31))

    def is_terminated(self) -> bool:
        m = self.matcher
        return self.stopped_by is not None or (m.is_stopped() and m.get_error() is None)

    def reset(self) -> None:
        self.stopped_by = None
        self.matcher.reset()


def install_backend(manager: Any) -> RuvllmBackend:
    """Makes ruvllm the backend of a `vllm.v1.structured_output.StructuredOutputManager`
    (requests then name it: `StructuredOutputsParams(..., _backend="ruvllm")`), as the
    upstream change of docs/vllm-backend-proposal.md does by name. Returns the backend."""
    backend = RuvllmBackend(
        manager.vllm_config,
        tokenizer=manager.tokenizer,
        vocab_size=manager.vllm_config.model_config.get_vocab_size(),
    )
    manager.backend = backend
    manager.backend_name = "ruvllm"
    return backend


def _request_spec(params: Any) -> tuple[str, Any] | None:
    """The `extra_args["ruvllm"]` of a request: (kind, spec), or None."""
    extra = getattr(params, "extra_args", None) or {}
    spec = extra.get("ruvllm")
    if spec is None:
        return None
    if isinstance(spec, str):
        # The OpenAI server's `vllm_xargs` carry strings, numbers and lists only.
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise ValueError(f"extra_args['ruvllm'] is not JSON: {e}") from e
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ValueError(
            "extra_args['ruvllm'] must be one of {'json_schema': ...}, {'regex': ...}, "
            "{'gbnf': ...}, {'choice': [...]}, {'json_object': true}"
        )
    ((kind, value),) = spec.items()
    kind = {"json_schema": "json"}.get(kind, kind)
    if kind not in ("json", "json_object", "regex", "gbnf", "choice", "structural_tag"):
        raise ValueError(f"extra_args['ruvllm']: unknown kind {kind!r}")
    return kind, value


class RuvllmLogitsProcessor(LogitsProcessor):
    """vLLM V1 logits processor: masks the rows of requests whose `extra_args` carry a
    `"ruvllm"` constraint; other rows are untouched."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        _request_spec(sampling_params)

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.vllm_config = vllm_config
        self.device = device
        self.engine: ruvllm.Engine | None = None
        self.n_vocab = 0
        # batch index -> (matcher, the request's live output-token list, tokens consumed)
        self.rows: dict[int, list[Any]] = {}
        self.bitmask: torch.Tensor | None = None

    def _engine(self) -> ruvllm.Engine:
        if self.engine is None:
            from vllm.tokenizers import cached_tokenizer_from_config

            mc = self.vllm_config.model_config
            tok = cached_tokenizer_from_config(model_config=mc)
            self.n_vocab = max(mc.get_vocab_size(), len(tok))
            self.engine = ruvllm.Engine(ruvllm.vocabulary_from_hf_tokenizer(tok, n_vocab=self.n_vocab))
        return self.engine

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None:
            for index in batch_update.removed:
                self.rows.pop(index, None)
            for index, params, _prompt, output_ids in batch_update.added:
                spec = _request_spec(params)
                self.rows.pop(index, None)
                if spec is None:
                    continue
                grammar = _compile(
                    self._engine(), spec[0], spec[1], _whitespace(self.vllm_config), _strict(self.vllm_config)
                )
                self.rows[index] = [ruvllm.Matcher(grammar), output_ids, 0]
            for a, b, direction in batch_update.moved:
                ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
                if ra is not None:
                    self.rows[b] = ra
                if rb is not None and direction == MoveDirectionality.SWAP:
                    self.rows[a] = rb
        # Commit the tokens each request generated since the last step.
        for row in self.rows.values():
            m, out, done = row
            for t in out[done:]:
                if not m.is_stopped():
                    m.consume_token(int(t))
            row[2] = len(out)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        indices = sorted(i for i in self.rows if i < logits.shape[0])
        words = ruvllm.bitmask_words(logits.shape[-1])
        if self.bitmask is None or self.bitmask.shape[0] < len(indices) or self.bitmask.shape[1] != words:
            self.bitmask = torch.zeros((max(len(indices), 8), words), dtype=torch.int32)
        matchers = [self.rows[i][0] for i in indices]
        ruvllm.fill_next_token_bitmask_par(matchers, self.bitmask, threads=2)
        rows = torch.tensor(indices, device=logits.device)
        sub = logits.index_select(0, rows)
        ruvllm.apply_token_bitmask_inplace(sub, self.bitmask[: len(indices)].to(logits.device))
        logits.index_copy_(0, rows, sub)
        return logits
