#!/usr/bin/env bash
# Installs the checkout with pip, offline, into a fresh venv and answers a question through it.
# Usage: pip_install.sh PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
py=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
"$py" -m venv --system-site-packages "$work/venv"
cd "$src"
KVS_PIP_BUILD_DIR="$work/cmake" KVS_PIP_JOBS=${KVS_PIP_JOBS:-2} \
  "$work/venv/bin/pip" install --no-build-isolation --no-index . >"$work/pip.log" 2>&1 || { tail -40 "$work/pip.log"; exit 1; }
cd "$work"
"$work/venv/bin/python" - "$src" <<'PY'
import os, sys
import kvshrink
src = sys.argv[1]
assert kvshrink.__file__.startswith(os.path.join(sys.prefix, "lib")), kvshrink.__file__
m = kvshrink.Model(os.path.join(src, "testbed/models/v7s1/model-f16.gguf"))
text = open(os.path.join(src, "eval/examples/needle_context.txt")).read()
ctx = m.compress(text, press="keydiff", keep=0.4, question_template="\n{question}")
q = ("What is the special magic number for quiet-harbor mentioned in the provided text? "
     "The special magic number for quiet-harbor mentioned in the provided text is")
a = ctx.ask(q, max_new_tokens=8)
assert a.startswith(" 4071589"), a
print("pip-installed kvshrink", kvshrink.__version__, "answers", repr(a))
PY
