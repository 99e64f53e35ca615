#!/usr/bin/env bash
# Builds examples/c/llama_generate: llama.cpp generating under a ruvllm grammar through the
# ruvllm sampler (crates/ruvllm-capi/llama). Uses the llama.cpp that
# scripts/build-llamacpp.sh builds from source (run it first), and libruvllm built here.
#
#   bash scripts/build-c-example.sh
#   assets/llamacpp/bin/llama_generate assets/models/SmolLM2-135M-Instruct.Q4_1.gguf \
#       schema schema.json "What is the largest city of France? Answer in JSON." 128
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
llama="$root/assets/llamacpp"
src="$llama/src/vendor/llama.cpp"
[ -f "$src/include/llama.h" ] && [ -e "$llama/build/bin/libllama.so" ] || {
    echo "build-c-example: llama.cpp is not built: run scripts/build-llamacpp.sh" >&2
    exit 1
}
cargo build --release --locked -p ruvllm-capi --manifest-path "$root/Cargo.toml"
lib="$root/target/release"
mkdir -p "$llama/bin"
cc -O2 -std=c11 -Wall -Wextra \
    -I"$src/include" -I"$src/ggml/include" \
    -I"$root/crates/ruvllm-capi/include" -I"$root/crates/ruvllm-capi/llama" \
    "$root/examples/c/llama_generate.c" "$root/crates/ruvllm-capi/llama/ruvllm_llama.c" \
    -o "$llama/bin/llama_generate" \
    -L"$llama/build/bin" -L"$lib" -lruvllm -lllama -lm \
    -Wl,-rpath,"$llama/build/bin" -Wl,-rpath,"$lib"
echo "built   $llama/bin/llama_generate"
