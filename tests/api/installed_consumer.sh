#!/usr/bin/env bash
# Installs a built tree into a prefix and builds examples/ against it as a user would, twice:
# with CMake (find_package(kvshrink) -> kvshrink::kvshrink) and with pkg-config; runs both on the
# testbed model and checks the answer, and runs the installed kvshrink binary.
# Usage: installed_consumer.sh BUILD_DIR SOURCE_DIR PREFIX
set -euo pipefail
build=$1 src=$2 prefix=$3
work=$(dirname "$prefix")/consumer
rm -rf "$prefix" "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

for f in include/kvshrink/kvshrink.h include/kvshrink/version.h lib/libkvshrink.so lib/cmake/kvshrink/kvshrinkConfig.cmake \
         lib/pkgconfig/kvshrink.pc bin/kvshrink; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $prefix/$f"; exit 1; }
done
# No engine header may be needed: the installed include folder holds the public API only.
extra=$(find "$prefix/include" -type f ! -name kvshrink.h ! -name version.h)
[ -z "$extra" ] || { echo "unexpected installed headers: $extra"; exit 1; }

model=$src/testbed/models/v7s1/model-f16.gguf
context=$src/eval/examples/needle_context.txt
check_answer() {  # $1: output of the example
  grep -q "^answer: 4071589" <<<"$1" || { echo "unexpected output:"; echo "$1"; exit 1; }
  grep -q "^reloaded answer: 4071589" <<<"$1" || { echo "unexpected output after reload:"; echo "$1"; exit 1; }
}

# 1. CMake package
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$src/examples" -B "$work/cmake" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log"
cmake --build "$work/cmake" >"$work/build.log"
out=$("$work/cmake/kvshrink_example" "$model" "$context" "$work/ctx.kvc")
echo "$out"
check_answer "$out"

# 2. pkg-config
cxx=${CXX:-c++}
# shellcheck disable=SC2046
"$cxx" -std=c++17 -O1 "$src/examples/main.cpp" -o "$work/example_pc" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs kvshrink)
out=$("$work/example_pc" "$model" "$context" "$work/ctx_pc.kvc")
check_answer "$out"

# 3. the installed binary reads the file the library wrote
q="What is the special magic number for quiet-harbor mentioned in the provided text? The special magic number for quiet-harbor mentioned in the provided text is"
ans=$("$prefix/bin/kvshrink" ask -m "$model" "$work/ctx.kvc" -n 8 "$q" 2>/dev/null)
grep -q "^A: *4071589" <<<"$ans" || { echo "installed kvshrink ask: $ans"; exit 1; }
# 4. the installed Python package (when the bindings were built; KVS_PYTHON names their Python)
mod=$(find "$prefix" -name '_kvshrink*.so' | head -1)
if [ -n "$mod" ] && [ -n "${KVS_PYTHON:-}" ]; then
  site=$(dirname "$(dirname "$mod")")
  (cd "$work" && PYTHONPATH="$site" "$KVS_PYTHON" -c "
import kvshrink, sys
assert kvshrink.__file__.startswith('$site'), kvshrink.__file__
ctx = kvshrink.load('$work/ctx.kvc', kvshrink.Model('$model'))
a = ctx.ask('$q', max_new_tokens=8)
assert a.startswith(' 4071589'), a
print('installed Python package answers', repr(a))")
fi
echo "installed consumer: ok"
