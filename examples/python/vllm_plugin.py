"""vLLM (offline, on a GPU) under a JSON Schema through ruvllm's logits-processor plugin,
which installing the `ruvllm` package registers:

    pip install vllm ./crates/ruvllm-py
    python examples/python/vllm_plugin.py
"""

import json

from vllm import LLM, SamplingParams

schema = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
llm = LLM(model="HuggingFaceTB/SmolLM2-135M-Instruct", gpu_memory_utilization=0.3)
params = SamplingParams(max_tokens=96, temperature=0.0, extra_args={"ruvllm": {"json_schema": schema}})
out = llm.chat([{"role": "user", "content": "The largest city of France and its population, in JSON."}], params)
print(json.loads(out[0].outputs[0].text))
