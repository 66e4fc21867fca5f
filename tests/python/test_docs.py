"""The example of docs/python.md runs as written (from the repository root)."""
import os
import re
import subprocess
import sys

SRC = os.environ.get("KVS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_docs_python_example_runs():
    with open(os.path.join(SRC, "docs", "python.md"), encoding="utf-8") as f:
        doc = f.read()
    example = doc[doc.index("## Example"):]
    code = re.search(r"```python\n(.*?)```", example, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], cwd=SRC, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == " 4071589"
    assert "has no option 'no_such_option'" in r.stdout
