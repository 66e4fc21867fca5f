#!/usr/bin/env bash
# A clone is self-contained: no test, build file or tool reads the `../shared` folder that sits
# beside the project's own checkouts (the data the tests need is in tests/data, the eval's default
# data in eval/data), and no binary carries the checkout's path (the eval finds its data beside the
# binary, core/paths.h share_dir; only KVS_ASSERT's __FILE__ names of compiled sources remain).
#   self_contained.sh SOURCE_DIR BINARY...
set -euo pipefail
export LC_ALL=C  # binary data through grep and sed
src=$1; shift
fail=0
# Code and build files only (prose under docs/ may mention the folder the data came from).
hits=$(cd "$src" && grep -rnE '\.\./shared|KVS_SHARED|KVSHRINK_SHARED' \
         --include='*.cpp' --include='*.h' --include='*.cmake' --include='CMakeLists.txt' \
         --include='*.mjs' --include='*.py' --include='*.sh' \
         tests tools benches python src CMakeLists.txt cmake .ci scripts/sanitize 2>/dev/null |
       grep -vE '^(src|tests)/[^:]*:[0-9]+: *(//|#)' | grep -v '^tests/house/' || true)
if [ -n "$hits" ]; then
  echo "FAIL: these lines read ../shared (use tests/data, tests/test_data.h, or --data):"
  echo "$hits"
  fail=1
fi
# Paths the binary could look things up in: any string holding the checkout path, except the
# __FILE__ names of its own compiled sources that KVS_ASSERT messages carry (core/error.h).
for bin in "$@"; do
  tmp=$(mktemp)
  objcopy -O binary --only-section=.rodata "$bin" "$tmp"
  bad=$(tr '\0' '\n' < "$tmp" | grep -aF "$src" | sed "s|^.*\($src\)|\1|" |
        grep -avE "^$src/(src|include|tools|python)/[A-Za-z0-9_/.-]+\.(cpp|h)$" || true)
  if [ -n "$bad" ]; then
    echo "FAIL: $bin holds paths of the checkout '$src' in its read-only data:"
    echo "$bad" | head -5
    fail=1
  fi
  rm -f "$tmp"
done
[ "$fail" = 0 ] && echo "self-contained: no ../shared reads, no checkout path in $# binaries"
exit "$fail"
