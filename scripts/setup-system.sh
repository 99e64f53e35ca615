#!/usr/bin/env bash
# The system packages the build needs beyond Rust, a C compiler, Python and Node.js:
# cmake and libclang (llama-cpp-sys-2 builds llama.cpp with cmake and generates its
# bindings with bindgen). Installed by name with apt-get when missing; idempotent.
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
if ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so' \
    && ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
    missing+=(libclang-dev)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup: installing ${missing[*]} (apt-get)"
sudo=()
[ "$(id -u)" -ne 0 ] && sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; then
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
