# Included by llama.cpp's own CMakeLists right after its project() call (run-tests.sh
# passes it as CMAKE_PROJECT_llama.cpp_INCLUDE when it builds llama-cpp-python): the
# Python package forces llama.cpp's `common` library on, which it never loads (it loads
# libllama and libggml* only), and which is half of the build's compile time on 2 cores.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
