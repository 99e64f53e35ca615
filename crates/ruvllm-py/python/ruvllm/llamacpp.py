"""The adapter for `llama-cpp-python`: a logits processor for `Llama.create_completion`
and `Llama.create_chat_completion`.

    from ruvllm.llamacpp import RuvllmLlamaProcessor, vocabulary_from_llama
    llm = Llama(model_path="model.gguf")
    engine = ruvllm.Engine(vocabulary_from_llama(llm))
    proc = RuvllmLlamaProcessor(engine.compile_json_schema(schema))
    out = llm.create_completion(prompt, logits_processor=LogitsProcessorList([proc]))

llama-cpp-python calls the processor once per sampled token with the whole sequence so
far (prompt included) and the next token's logits. The processor follows the tokens after
the prompt it first saw, so one processor serves one generation; make a new one per call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ruvllm


def vocabulary_from_llama(llm: Any) -> ruvllm.Vocabulary:
    """The vocabulary of a loaded `llama_cpp.Llama`, read from its GGUF file (the same
    tokens and EOS), with the model's logits width."""
    return ruvllm.Vocabulary.from_file(llm.model_path, n_vocab=llm.n_vocab())


class RuvllmLlamaProcessor:
    """Masks the logits of one `llama_cpp` generation to `grammar`."""

    def __init__(self, grammar: ruvllm.Grammar) -> None:
        self.matcher = ruvllm.Matcher(grammar)
        self.prompt_len: int | None = None
        self.done = 0
        self.bitmask: np.ndarray | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.prompt_len is None:
            self.prompt_len = len(input_ids)
        for t in input_ids[self.prompt_len + self.done :]:
            if not self.matcher.is_stopped():
                self.matcher.consume_token(int(t))
            self.done += 1
        words = (scores.shape[-1] + 31) // 32
        if self.bitmask is None or self.bitmask.shape != (words,):
            self.bitmask = np.zeros(words, dtype=np.int32)
        self.matcher.fill_next_token_bitmask(self.bitmask, 0)
        ruvllm.apply_token_bitmask_inplace(scores, self.bitmask)
        return scores
