"""llama-cpp-python create_chat_completion under a JSON Schema, on the default model. Run
in the test venv (crates/ruvllm-py/run-tests.sh builds it):

    .venv-py/bin/python examples/python/llamacpp_json.py
"""

import json
from pathlib import Path

from llama_cpp import Llama, LogitsProcessorList

import ruvllm
from ruvllm.llamacpp import RuvllmLlamaProcessor, vocabulary_from_llama

gguf = Path(__file__).resolve().parents[2] / "assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
llm = Llama(model_path=str(gguf), n_ctx=1024, n_threads=2, verbose=False)
engine = ruvllm.Engine(vocabulary_from_llama(llm))
schema = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
grammar = ruvllm.compile_json_schema(engine, schema)
out = llm.create_chat_completion(
    messages=[{"role": "user", "content": "The largest city of France and its population, in JSON."}],
    logits_processor=LogitsProcessorList([RuvllmLlamaProcessor(grammar)]),
    max_tokens=96, temperature=0.0,
)
choice = out["choices"][0]
print(choice["finish_reason"], json.loads(choice["message"]["content"]))
