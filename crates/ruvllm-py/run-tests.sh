#!/usr/bin/env bash
# The Python package's tests: a venv with numpy, pytest, tokenizers, jsonschema, and torch,
# transformers, accelerate and gguf for the transformers adapter (installed by name with pip;
# torch brings about 5.6 GB and 85 s of downloads), vLLM and SGLang without their GPU
# dependencies, llama-cpp-python (its source package, built with the cmake and ninja
# wheels: about 5 minutes on 2 cores, once per venv), the package itself built from this
# checkout (`pip install ./crates/ruvllm-py`, which runs maturin) and the C ABI's library,
# then pytest, with the `ruvllm` binary to compare masks with.
# Usage: crates/ruvllm-py/run-tests.sh PATH/TO/ruvllm [pytest args]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:?usage: run-tests.sh PATH/TO/ruvllm}"
shift
venv="$root/.venv-py"
# No second copy of the downloads in pip's cache (torch's wheels alone are about 4 GB).
export PIP_NO_CACHE_DIR="${PIP_NO_CACHE_DIR:-1}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
"$venv/bin/python" -m pip install --quiet numpy pytest tokenizers jsonschema llguidance torch torchvision transformers accelerate gguf
# vLLM and SGLang, whose adapters the tests drive through the real packages as far as they
# run on a CPU: the packages themselves without their dependencies (their wheels pin GPU
# builds of torch and kernels a CPU cannot load), then the modules the tested code paths
# import, by name.
"$venv/bin/python" -m pip install --quiet --no-deps --no-warn-conflicts "vllm==0.33.0" "sglang==0.5.23"
"$venv/bin/python" -m pip install --quiet --no-warn-conflicts \
    cbor2 pyzmq aiohttp openai-harmony openai xgrammar fastapi pillow pybase64 cachetools \
    prometheus_client msgspec cloudpickle uvloop py-cpuinfo partial_json_parser einops \
    orjson ipython dill sentencepiece compressed-tensors
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet cmake ninja scikit-build-core
    # LLAVA_BUILD=OFF: the multimodal library (mtmd), which the tests never load
    # (llama_cpp imports it lazily), is a good part of the 2-core compile.
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF" PATH="$venv/bin:$PATH" \
        "$venv/bin/python" -m pip install --quiet --no-build-isolation "llama-cpp-python==0.3.36"
fi
"$venv/bin/python" -m pip install --quiet "$here"
# The C ABI's shared library, beside the binary (same target directory and profile): the
# C tests link it.
bindir="$(cd "$(dirname "$bin")" && pwd)"
profile=()
[ "$(basename "$bindir")" = release ] && profile=(--release)
(cd "$root" && cargo build --locked --quiet -p ruvllm-capi "${profile[@]}" --target-dir "$(dirname "$bindir")")
export RUVLLM_BIN="$bindir/$(basename "$bin")"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/tests" "$@"
