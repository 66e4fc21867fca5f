#!/bin/sh
# Regenerates ggml_quant_reference.inc: compiles llama.cpp's ggml-quants.c the way its ggml-base
# library is built (C11 with GNU extensions, -O3, no -march: no FMA contraction) and runs
# ggml_quant_fixture.cpp against it. Usage: make_ggml_quant_reference.sh [LLAMA_CPP_SOURCE]
# (default /work/llamacpp-src, the Feb 2025 snapshot).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${1:-/work/llamacpp-src}
repo=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O3 -std=gnu11 -DNDEBUG -c "$src/ggml/src/ggml-quants.c" -I"$src/ggml/include" -I"$src/ggml/src" \
    -I"$src/ggml/src/ggml-cpu" -o "$tmp/ggml-quants.o"
g++ -O2 -std=c++20 -I"$repo/src" -I"$here/.." -c "$here/ggml_quant_fixture.cpp" -o "$tmp/fixture.o"
g++ -no-pie "$tmp/fixture.o" "$tmp/ggml-quants.o" -lm -o "$tmp/fixture"
"$tmp/fixture" > "$here/ggml_quant_reference.inc"
echo "wrote $here/ggml_quant_reference.inc"
