#!/usr/bin/env bash
# The install as a user does it: `cargo install --path crates/ruvllm-cli` into a fresh
# root, then, from a directory outside the checkout with an empty home, `ruvllm pull`
# (the default model into the user cache, with pip, checksummed), `ruvllm generate
# --schema` on it (the cached model is the one used), and `ruvllm validate` of the output.
#
# Built with the test profile into the checkout's target directory, so the artifacts `cargo test`
# left there are reused (a release install is the same command without --profile test);
# it prints the crates it had to compile again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log="$work/install.log"
if ! (cd "$root" && CARGO_TARGET_DIR="$root/target" cargo install --locked --profile test \
    --path crates/ruvllm-cli --root "$work/root") >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
fi
# What the install compiled rather than took from the test build: the CLI's graph
# resolves features alone (crates/workspace-hack/Cargo.toml says what keeps it equal).
again="$(grep -o 'Compiling [^ ]*' "$log" | cut -d' ' -f2 | tr '\n' ' ' || true)"
echo "install: compiled again: ${again:-nothing}"
bin="$work/root/bin/ruvllm"
[ -x "$bin" ] || { echo "install: no $bin" >&2; exit 1; }
mkdir -p "$work/home" "$work/elsewhere"
cd "$work/elsewhere"
export HOME="$work/home"
unset RUVLLM_HOME XDG_CACHE_HOME RUVLLM_MODEL
cached="$HOME/.cache/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf"
path="$("$bin" pull)"
[ "$path" = "$cached" ] || { echo "install: pull printed $path, expected $cached" >&2; exit 1; }
[ -s "$cached" ] || { echo "install: $cached is missing" >&2; exit 1; }
# Idempotent: the second pull keeps the file.
"$bin" pull >/dev/null 2>pull2.txt
grep -q '^ok ' pull2.txt || { echo "install: the second pull fetched again:" >&2; cat pull2.txt >&2; exit 1; }
cat > person.json <<'JSON'
{"type": "object",
 "properties": {"name": {"type": "string", "maxLength": 20},
                "age": {"type": "integer", "minimum": 0, "maximum": 120}},
 "required": ["name", "age"], "additionalProperties": false}
JSON
out="$("$bin" generate -v --seed 3 --max-tokens 64 --schema person.json \
    "Describe a person as JSON." 2>err.txt)" || { cat err.txt >&2; exit 1; }
grep -q "^model: $cached\$" err.txt || { echo "install: the cached model was not used:" >&2; cat err.txt >&2; exit 1; }
echo "$out" | "$bin" validate --schema person.json -
echo "install: ok: cargo install, ruvllm pull, generate --schema from $PWD: $out"
