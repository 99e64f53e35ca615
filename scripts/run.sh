#!/usr/bin/env bash
# Set up and run the main job on the default model: fetch the assets, build, and constrain
# output over the SmolLM2-135M-Instruct vocabulary (read from its GGUF file): check text
# against grammars and show the token masks a decoder would apply.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/fetch-assets.sh
cargo build --release --locked -p ruvllm-cli -p ruvllm-bench
model=assets/models/SmolLM2-135M-Instruct.Q4_1.gguf
ruvllm=./target/release/ruvllm
echo "== JSON: the tokens allowed after '{\"name\": \"Ada\", ' on $model"
$ruvllm grammar mask --builtin json --tokenizer "$model" --prefix '{"name": "Ada", ' --sample 10
echo "== A GBNF grammar (llama.cpp's chess.gbnf) checking text"
$ruvllm grammar check --gbnf ../shared/data/gbnf/llama.cpp/chess.gbnf --text $'1. e4 e5\n2. Nf3 Nc6\n' || true
$ruvllm grammar check --gbnf ../shared/data/gbnf/llama.cpp/chess.gbnf --text $'1. e4 e5\n2. Nf9' || true
echo "== A regex"
$ruvllm grammar mask --regex '[0-9]{4}-[0-9]{2}-[0-9]{2}' --tokenizer "$model" --prefix '2024-1' --sample 5
echo "== Random valid outputs drawn through the masks (examples/sample_grammar.rs)"
cargo run --release --locked -q -p ruvllm-engine --example sample_grammar -- "$model" json 3
echo "== The grammar conformance cases, token by token, with the Llama 3.1 tokenizer"
./target/release/ruvllm-bench grammar-cases --tokenizer assets/tokenizers/llama3_1/tokenizer.json tests/grammars | tail -n 1
