#!/usr/bin/env bash
# The Python package's tests: a venv with numpy, pytest, tokenizers, jsonschema with its
# format checkers' packages (`format-nongpl`), pydantic with email-validator, and torch,
# transformers, accelerate and gguf for the transformers adapter (installed by name with pip;
# torch brings about 5.6 GB and 85 s of downloads), vLLM and SGLang without their GPU
# dependencies, llama-cpp-python (its source package, built with the cmake and ninja
# wheels: about a minute on 2 cores, once per venv), the package itself built from this
# checkout (one abi3 wheel from `maturin build --release`, or the dev profile's, first
# installed and imported in a clean venv without Rust on PATH) and the C ABI's library,
# then pytest, with the `ruvllm` binary to compare masks with.
# Usage: crates/ruvllm-py/run-tests.sh PATH/TO/ruvllm [pytest args]
#        crates/ruvllm-py/run-tests.sh --prepare   (only the registry packages and
#        llama-cpp-python: scripts/test.sh runs it while the Rust phases compile)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:?usage: run-tests.sh PATH/TO/ruvllm | --prepare}"
shift
venv="$root/.venv-py"
# No second copy of the downloads in pip's cache (torch's wheels alone are about 4 GB).
export PIP_NO_CACHE_DIR="${PIP_NO_CACHE_DIR:-1}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
"$venv/bin/python" -m pip install --quiet numpy pytest tokenizers "jsonschema[format-nongpl]" "pydantic[email]" llguidance torch torchvision transformers accelerate gguf
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
    # (llama_cpp imports it lazily), is a good part of the 2-core compile. The project
    # include turns llama.cpp's `common` library off, which the package forces on and never
    # loads: half of what is left (213 s -> 103 s on 2 cores).
    # At -O1 (the build type "None" adds no -O3 after these flags): the tests generate a
    # few dozen tokens through it, as fast as at -O3 (3.0 s for the llama.cpp tests), and
    # the compile takes 124 CPU seconds instead of 177 (-O0: 106, but those tests 29 s).
    # shellcheck source=../../scripts/llamacpp-flags.sh
    . "$root/scripts/llamacpp-flags.sh"
    SKBUILD_CMAKE_BUILD_TYPE=None \
    CFLAGS="$LLAMACPP_CFLAGS -O1" CXXFLAGS="$LLAMACPP_CFLAGS -O1" \
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF \
-DCMAKE_PROJECT_llama.cpp_INCLUDE=$here/llamacpp-no-common.cmake" PATH="$venv/bin:$PATH" \
        "$venv/bin/python" -m pip install --quiet --no-build-isolation "llama-cpp-python==0.3.36"
fi
"$venv/bin/python" -m pip install --quiet "maturin>=1.9,<2"
[ "$bin" = --prepare ] && exit 0
# The package as users get it: `maturin build --release` makes one abi3 wheel (any CPython
# 3.11 or later). It must install and import in a clean venv with no Rust toolchain on
# PATH; the tests below then run the same wheel. RUVLLM_WHEEL_PROFILE=dev (what
# scripts/test.sh sets) builds it in the profile the test build's dependencies share (the
# test profile inherits dev; `--profile test` itself would link the library as a test
# harness, an executable): the same abi3 wheel from the same sources and features,
# reusing what the test build compiled (the workspace-hack crate keeps the package's
# dependency features those of the workspace) instead of about 170 s for --release.
wheel_profile="${RUVLLM_WHEEL_PROFILE:-release}"
profile_args=(--release)
[ "$wheel_profile" = release ] || profile_args=(--profile "$wheel_profile")
dist="$root/target/wheels-test"
rm -rf "$dist"
(cd "$here" && "$venv/bin/maturin" build "${profile_args[@]}" --locked --out "$dist" 2>&1 | tail -n 3)
wheel="$(ls "$dist"/ruvllm-*.whl)"
case "$(basename "$wheel")" in
    *-cp311-abi3-*.whl) echo "wheel: $(basename "$wheel")" ;;
    *) echo "run-tests: $wheel is not an abi3 wheel for CPython 3.11+" >&2; exit 1 ;;
esac
clean="$(mktemp -d)"
python3 -m venv "$clean/venv"
no_rust=(env -i HOME="$clean" PATH="$clean/venv/bin:/usr/bin:/bin")
"${no_rust[@]}" python -m pip install --quiet "$wheel" numpy
"${no_rust[@]}" python - "$root/assets/tokenizers/gpt2/tokenizer.json" <<'PY'
import shutil, sys
assert shutil.which("cargo") is None and shutil.which("rustc") is None, "Rust is on PATH"
import ruvllm
vocab = ruvllm.Vocabulary.from_file(sys.argv[1])
m = ruvllm.Matcher(ruvllm.Engine(vocab).compile_regex("(yes|no)"))
mask = ruvllm.allocate_token_bitmask(1, vocab.n_vocab)
m.fill_next_token_bitmask(mask, 0)
print(f"wheel: imported from {ruvllm.__file__} without Rust; a mask over {vocab.n_vocab} tokens")
PY
rm -rf "$clean"
"$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel"
# The C ABI's shared library, beside the binary (same target directory and profile): the
# C tests link it. Beside a test build's binary (target/debug), every library as `cargo
# test --workspace` built it (the same features, so nothing compiles again; the C ABI's
# graph alone would resolve serde's and others' features otherwise and rebuild them).
bindir="$(cd "$(dirname "$bin")" && pwd)"
capi_build=(-p ruvllm-capi --release)
[ "$(basename "$bindir")" = release ] || capi_build=(--workspace --exclude ruvllm-py --lib --profile test)
(cd "$root" && cargo build --locked --quiet "${capi_build[@]}" --target-dir "$(dirname "$bindir")")
export RUVLLM_BIN="$bindir/$(basename "$bin")"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/tests" "$@"
