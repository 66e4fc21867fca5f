#!/usr/bin/env bash
# A clone is self-contained: no test, build file or tool reads the `../shared` folder that sits
# beside the project's own checkouts (the data the tests need is in tests/data, the eval's default
# data in eval/data), and no binary carries the checkout's path (the eval finds its data beside the
# binary, core/paths.h share_dir; KVS_ASSERT names the file without its directory, core/error.h).
#   self_contained.sh SOURCE_DIR BINARY...
set -euo pipefail
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
for bin in "$@"; do
  tmp=$(mktemp)
  objcopy -O binary --only-section=.rodata "$bin" "$tmp"
  if grep -qF "$src" "$tmp"; then
    echo "FAIL: $bin holds the checkout path '$src' in its read-only data:"
    grep -aoF "$src" "$tmp" | head -3
    strings -a "$tmp" | grep -F "$src" | head -5
    fail=1
  fi
  rm -f "$tmp"
done
[ "$fail" = 0 ] && echo "self-contained: no ../shared reads, no checkout path in $# binaries"
exit "$fail"
