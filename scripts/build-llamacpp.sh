#!/usr/bin/env bash
# Build llama.cpp's `llama-bench` and `llama-server` from the llama-cpp-python source
# package, for side-by-side comparisons (`ruvllm-bench e2e --llama-bench
# assets/llamacpp/bin/llama-bench`, `ruvllm-bench load --llama-server
# assets/llamacpp/bin/llama-server`). The llama-cpp-sys-2 crate that ruvllm's llama.cpp
# backend links carries llama.cpp's library sources but not its tools, and no registry
# package ships the tools of exactly that tree: llama-cpp-python 0.3.36 vendors
# llama.cpp@0c1e57098 (ggml 0.25.3), the crate a slightly newer tree (ggml 0.26.0).
#
# Idempotent: an existing build is kept. Everything comes from the Python package registry
# with pip: cmake and ninja as wheels, llama-cpp-python as its source distribution (which
# vendors llama.cpp). Built with GGML_NATIVE=ON, the configuration llama.cpp users get, less
# the AMX kernels (scripts/llamacpp-flags.sh), as the crate's build.
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/assets/llamacpp"
bin="$out/bin/llama-bench"
if [ -x "$bin" ] && [ -x "$out/bin/llama-server" ]; then
  echo "ok      $bin"
  exit 0
fi
mkdir -p "$out"
venv="$out/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet cmake ninja scikit-build-core
src="$out/src"
if [ ! -d "$src/vendor/llama.cpp" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # --no-build-isolation: pip reads the sdist's metadata with the scikit-build-core wheel
  # installed above instead of building cmake from source in an isolated environment.
  "$venv/bin/pip" download --quiet --no-deps --no-binary llama-cpp-python \
    --no-build-isolation "llama-cpp-python==$version" -d "$work"
  tarball="$(ls "$work"/llama_cpp_python-*.tar.gz)"
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$tarball" -C "$src" --strip-components=1
fi
export PATH="$venv/bin:$PATH"
# The same flags as the crate's build (no AMX kernels), so comparisons stay fair.
. "$root/scripts/llamacpp-flags.sh"
CFLAGS="$LLAMACPP_CFLAGS" CXXFLAGS="$LLAMACPP_CFLAGS" cmake -S "$src/vendor/llama.cpp" -B "$out/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TOOLS=ON >/dev/null
# llama-bench and llama-server for the comparisons; libllama (built with them) for the C
# example (scripts/build-c-example.sh).
cmake --build "$out/build" --target llama-bench llama-server llama -j "$(nproc)"
mkdir -p "$out/bin"
# Links: the tools find their shared ggml libraries beside the real files.
ln -sf "$out/build/bin/llama-bench" "$bin"
ln -sf "$out/build/bin/llama-server" "$out/bin/llama-server"
echo "built   $bin and llama-server"
