#!/usr/bin/env bash
# The C and C++ flags every llama.cpp build of this repository adds (the crate's, through
# .cargo/config.toml's [env], and llama-bench, llama-server and llama-cpp-python, through
# CFLAGS/CXXFLAGS, which cmake reads at configure time): ggml without its AMX kernels.
# ggml compiles them whenever -march=native defines __AMX_INT8__ and uses them wherever the
# kernel grants the tile permission; on some cloud VMs the permission is granted and they
# still die with SIGILL. Undefining the macros drops that code with any compiler version.
# Usage: source it, then use "$LLAMACPP_CFLAGS".
case "$(uname -m)" in
    x86_64|amd64) LLAMACPP_CFLAGS="-U__AMX_TILE__ -U__AMX_INT8__ -U__AMX_BF16__" ;;
    *) LLAMACPP_CFLAGS="" ;;
esac
export LLAMACPP_CFLAGS
