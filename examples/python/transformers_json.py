"""transformers generate() under a JSON Schema, on the default model (its GGUF, loaded by
transformers). Run in the test venv (crates/ruvllm-py/run-tests.sh builds it):

    .venv-py/bin/python examples/python/transformers_json.py
"""

import json
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

import ruvllm
from ruvllm.hf import RuvllmLogitsProcessor

models = Path(__file__).resolve().parents[2] / "assets/models"
gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
tok = AutoTokenizer.from_pretrained(models, gguf_file=gguf)
model = AutoModelForCausalLM.from_pretrained(models, gguf_file=gguf)

schema = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
engine = ruvllm.Engine(ruvllm.vocabulary_from_hf_tokenizer(tok, n_vocab=model.config.vocab_size))
grammar = ruvllm.compile_json_schema(engine, schema)

prompt = tok.apply_chat_template(
    [{"role": "user", "content": "The largest city of France and its population, in JSON."}],
    add_generation_prompt=True, tokenize=False,
)
inputs = tok(prompt, return_tensors="pt")
out = model.generate(**inputs, logits_processor=[RuvllmLogitsProcessor(grammar)],
                     max_new_tokens=96, do_sample=False)
text = tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
print(json.loads(text))
