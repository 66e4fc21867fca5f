"""No import circle among a Python package's modules (module-level and function-level imports alike).

    python_import_cycles.py PACKAGE_DIR

Reads each module's imports with ast (nothing is imported, so torch need not be installed) and
fails naming the first circle found.
"""
import ast
import os
import sys


def imports_of(path, pkg_modules):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:  # from . import a, b
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
    return {m for m in out if m in pkg_modules}


def main():
    d = sys.argv[1]
    mods = {f[:-3] for f in os.listdir(d) if f.endswith(".py") and f != "__init__.py"}
    graph = {m: imports_of(os.path.join(d, m + ".py"), mods) - {m} for m in sorted(mods)}
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cyc = stack[stack.index(n):] + [n]
                print("FAIL: import circle in %s: %s" % (d, " -> ".join(cyc)))
                sys.exit(1)
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    print("no import circle among %d modules of %s" % (len(graph), d))


if __name__ == "__main__":
    main()
