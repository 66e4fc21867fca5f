#!/usr/bin/python3
"""Where each press spends its budget, and whether the needle survives: compresses the README's
needle context (eval/examples/needle_context.txt, the value 4071589) with each press at one keep
ratio, saves a .kvc, and reads the kept positions back per (layer, KV head).

    /usr/bin/python3 docs/results/kvzip-compactor/needle_survival.py [MODEL] [KEEP]

Prints, per press: the tokens kept per head (layer-major), how many heads keep every token of the
needle's value (" 4071589"), and whether the answer comes out right.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
K = os.environ.get("KVSHRINK", os.path.join(ROOT, "build", "tools", "kvshrink"))
CTX = os.path.join(ROOT, "eval", "examples", "needle_context.txt")
Q = ("What is the special magic number for quiet-harbor mentioned in the provided text? The special magic number "
     "for quiet-harbor mentioned in the provided text is")


def read_kvc(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"KVSC"
    hlen = struct.unpack_from("<Q", data, 8)[0]
    hdr = json.loads(data[16:16 + hlen])
    off = 16 + hlen
    elem = 2 if hdr["dtype"] == "f16" else 4
    heads = []
    for _ in range(hdr["n_layer"] * hdr["n_head_kv"]):
        n = struct.unpack_from("<I", data, off)[0]
        off += 4
        pos = list(struct.unpack_from(f"<{n}i", data, off))
        off += 4 * n
        has_mass = data[off]
        off += 1 + (4 * n if has_mass else 0)
        off += 2 * n * hdr["head_dim"] * elem
        heads.append(pos)
    return hdr, heads


def value_positions(model):
    out = subprocess.run([K, "tokenize", "-m", model, "--ids", "-f", CTX], capture_output=True, text=True, check=True)
    ids = [int(x) for x in out.stdout.replace("[", " ").replace("]", " ").replace(",", " ").split()]
    val = subprocess.run([K, "tokenize", "-m", model, "--ids", "--no-bos", "-p", "is: 4071589."], capture_output=True,
                         text=True, check=True)
    v = [int(x) for x in val.stdout.replace("[", " ").replace("]", " ").replace(",", " ").split()][3:-1]
    for i in range(len(ids) - len(v)):
        if ids[i:i + len(v)] == v:
            return list(range(i, i + len(v)))
    raise SystemExit("needle value not found in the tokenized context")


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testbed", "models", "v7s1")
    keep = sys.argv[2] if len(sys.argv) > 2 else "0.1"
    vpos = value_positions(model)
    print(f"model {model}, keep {keep}; needle value at positions {vpos[0]}..{vpos[-1]} ({len(vpos)} tokens)\n")
    print("| press | tokens kept per head (layer-major) | heads keeping the whole value | answer |")
    print("|---|---|---|---|")
    presses = [["snapkv"], ["keydiff"], ["kvzip"], ["kvzip", "--opt", "allocator=uniform"], ["kvzip", "--opt", "level=head"],
               ["compactor"], ["compactor", "--opt", "allocator=uniform"]]
    with tempfile.TemporaryDirectory() as d:
        kvc = os.path.join(d, "c.kvc")
        for p in presses:
            subprocess.run([K, "compress", "-m", model, "-t", "1", "--press", *p, "--keep", keep, "--context", CTX,
                            "--question-template", "\n{question}", "-o", kvc], capture_output=True, check=True)
            _, heads = read_kvc(kvc)
            whole = sum(all(x in set(h) for x in vpos) for h in heads)
            ans = subprocess.run([K, "ask", "-m", model, "-t", "1", kvc, "-n", "8", Q], capture_output=True, text=True)
            a = [l for l in ans.stdout.splitlines() if l.startswith("A:")]
            a = a[0][2:].strip() if a else "?"
            print(f"| {' '.join(p).replace('--opt ', ':')} | {' '.join(str(len(h)) for h in heads)} | {whole} of "
                  f"{len(heads)} | {a}{' (right)' if '4071589' in a else ''} |")


if __name__ == "__main__":
    main()
