#!/usr/bin/env bash
# The vLLM and SGLang adapters on a machine with an NVIDIA GPU, through the real servers and
# the OpenAI client: `vllm serve` with ruvllm's logits-processor plugin (a request carries
# its constraint in `vllm_xargs`) and `sglang.launch_server --grammar-backend ruvllm`
# (standard `response_format` JSON Schemas, `regex`, `ebnf`), each on the default model
# (SmolLM2-135M-Instruct, converted from the repository's GGUF to a Hugging Face folder by
# transformers). Every answer must end with finish_reason "stop" and pass `jsonschema` or
# Python's `re`. Exit 0 when every check passes.
#
#   bash scripts/gpu-check.sh            # both servers
#   bash scripts/gpu-check.sh vllm       # or one of them
#
# It needs a GPU and the package registries (vLLM and SGLang pin their own torch builds, so
# each gets its own venv under assets/gpu/). The CPU tests (crates/ruvllm-py/tests/
# test_vllm.py, test_sglang.py) drive the same adapters through the packages' own classes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$root/assets/gpu"
which="${1:-all}"
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi: this needs an NVIDIA GPU" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
bash "$root/scripts/fetch-assets.sh" >/dev/null
mkdir -p "$work"

venv() { # venv NAME PACKAGES...: a venv with these packages, ruvllm from this checkout
    local v="$work/venv-$1"
    shift
    [ -x "$v/bin/python" ] || python3 -m venv "$v" >&2
    "$v/bin/python" -m pip install --quiet --upgrade pip >&2
    "$v/bin/python" -m pip install --quiet "$@" openai jsonschema transformers gguf >&2
    "$v/bin/python" -m pip install --quiet "$root/crates/ruvllm-py" >&2
    echo "$v/bin/python"
}

model="$work/SmolLM2-135M-Instruct"
convert() { # the GGUF as a Hugging Face folder (weights dequantized by transformers)
    [ -f "$model/config.json" ] && return
    "$1" - "$root/assets/models" "$model" <<'EOF'
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer
src, dst = sys.argv[1], sys.argv[2]
g = "SmolLM2-135M-Instruct.Q4_1.gguf"
AutoTokenizer.from_pretrained(src, gguf_file=g).save_pretrained(dst)
m = AutoModelForCausalLM.from_pretrained(src, gguf_file=g)
m.config.architectures = ["LlamaForCausalLM"]
m.save_pretrained(dst)
EOF
}

wait_up() { # wait_up PORT PID
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$1/v1/models" >/dev/null && return 0
        kill -0 "$2" 2>/dev/null || { echo "gpu-check: the server exited" >&2; return 1; }
        sleep 1
    done
    echo "gpu-check: the server did not come up" >&2
    return 1
}

# The client checks: one request per constraint kind, each answer complete and valid.
check() { # check PYTHON PORT ENGINE
    "$1" - "$2" "$3" <<'EOF'
import json, re, sys
import jsonschema
from openai import OpenAI
port, engine = sys.argv[1], sys.argv[2]
c = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
model = c.models.list().data[0].id
schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
          "population": {"type": "integer", "minimum": 0}},
          "required": ["city", "population"], "additionalProperties": False}
cases = [
    ("json", "The largest city of France and its population, in JSON.",
     lambda s: jsonschema.validate(json.loads(s), schema), {"json_schema": schema}),
    ("regex", "Name a city and a year.",
     lambda s: re.fullmatch(r"[A-Z][a-z]+ [0-9]{1,4}", s) or (_ for _ in ()).throw(AssertionError(s)),
     {"regex": r"[A-Z][a-z]+ [0-9]{1,4}"}),
    ("gbnf", "Is the sky green?",
     lambda s: re.fullmatch(r"answer: (yes|no)\.", s) or (_ for _ in ()).throw(AssertionError(s)),
     {"gbnf": 'root ::= "answer: " ("yes" | "no") "."'}),
]
failed = 0
for name, prompt, ok, spec in cases:
    if engine == "vllm":  # the plugin: the constraint travels in vllm_xargs
        extra = {"vllm_xargs": {"ruvllm": json.dumps(spec)}}
        rf = None
    else:  # SGLang's own fields, served by --grammar-backend ruvllm
        key, value = next(iter(spec.items()))
        extra = {"regex": value} if key == "regex" else {"ebnf": value} if key == "gbnf" else {}
        rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": value}} if key == "json_schema" else None
    kw = {"response_format": rf} if rf else {}
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                  max_tokens=96, temperature=0, extra_body=extra, **kw)
    ch = r.choices[0]
    try:
        assert ch.finish_reason == "stop", f"finish_reason {ch.finish_reason}"
        ok(ch.message.content)
        print(f"ok      {engine} {name}: {ch.message.content!r}")
    except Exception as e:
        failed += 1
        print(f"FAILED  {engine} {name}: {e}: {ch.message.content!r}")
sys.exit(1 if failed else 0)
EOF
}

status=0
if [ "$which" = all ] || [ "$which" = vllm ]; then
    py="$(venv vllm "vllm==0.33.0")"
    convert "$py"
    "$py" -m vllm.entrypoints.openai.api_server --model "$model" --port 8401 \
        --max-model-len 2048 --gpu-memory-utilization 0.3 >"$work/vllm.log" 2>&1 &
    pid=$!
    if wait_up 8401 "$pid"; then check "$py" 8401 vllm || status=1; else status=1; tail -30 "$work/vllm.log"; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
fi
if [ "$which" = all ] || [ "$which" = sglang ]; then
    py="$(venv sglang "sglang[all]==0.5.23")"
    convert "$py"
    "$py" -m sglang.launch_server --model-path "$model" --port 8402 \
        --grammar-backend ruvllm --mem-fraction-static 0.3 >"$work/sglang.log" 2>&1 &
    pid=$!
    if wait_up 8402 "$pid"; then check "$py" 8402 sglang || status=1; else status=1; tail -30 "$work/sglang.log"; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
fi
exit $status
