#!/usr/bin/env bash
# Set up and run the main job on the default model: fetch the assets, build, and generate
# with SmolLM2-135M-Instruct on the CPU, constrained by a JSON Schema, a regex, a choice
# list and a GBNF grammar (every output is valid by construction), then show the masks the
# engine computes over the model's vocabulary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup-system.sh --for run
bash scripts/fetch-assets.sh
cargo build --release --locked -p ruvllm-cli
model=assets/models/SmolLM2-135M-Instruct.Q4_1.gguf
ruvllm=./target/release/ruvllm
schema="$(mktemp)"
trap 'rm -f "$schema"' EXIT
cat > "$schema" <<'JSON'
{"type": "object",
 "properties": {"name": {"type": "string", "maxLength": 40},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "email": {"type": "string", "format": "email"},
                "languages": {"type": "array", "items": {"enum": ["en", "fr", "de", "es"]},
                              "minItems": 1, "maxItems": 3, "uniqueItems": true}},
 "required": ["name", "age", "email", "languages"], "additionalProperties": false}
JSON
echo "== Unconstrained: asked for JSON, a small model answers as it likes"
$ruvllm generate --model "$model" --seed 7 --max-tokens 60 "Describe a person as JSON with name, age, email and languages."
echo "== The same with the schema: valid by construction (statistics from -v on stderr)"
out="$($ruvllm generate --model "$model" --seed 7 -v --schema "$schema" "Describe a person as JSON with name, age, email and languages.")"
echo "$out"
echo "$out" | $ruvllm validate --schema "$schema" -
echo "== A regex, a choice list, a GBNF grammar"
$ruvllm generate --model "$model" --seed 1 --regex '(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])' "When did the Apollo 11 mission land on the Moon? Give the date as YYYY-MM-DD."
$ruvllm generate --model "$model" --seed 1 --choice positive,negative,neutral "Classify the sentiment of this review as positive, negative or neutral: 'I loved this film, it was wonderful!'"
$ruvllm generate --model "$model" --seed 1 --max-tokens 40 --gbnf ../shared/data/gbnf/llama.cpp/chess.gbnf "Play the first moves of a chess game."
echo "== Streaming, greedy"
$ruvllm generate --model "$model" --temperature 0 --stream --raw $'<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n'
echo "== The masks behind it: tokens allowed after '{\"name\": \"Ada\", ' under plain JSON"
$ruvllm grammar mask --builtin json --tokenizer "$model" --prefix '{"name": "Ada", ' --sample 10
