"""Markdown result tables shared by evaluate.py and export.py (kept apart so neither imports the other)."""


def acc_rows(res, names):
    """Markdown table lines: one row per set in `names`, one column per length in res ("set@L" keys)."""
    lens = sorted({int(k.split("@")[1]) for k in res if "@" in k and not k.endswith("_examples")})
    rows = ["| set | " + " | ".join(str(l) for l in lens) + " |", "|---|" + "---|" * len(lens)]
    for nm in names:
        rows.append("| %s | " % nm + " | ".join("%.0f%%" % (100 * res["%s@%d" % (nm, l)]) if "%s@%d" % (nm, l) in res
                                                 else "-" for l in lens) + " |")
    return rows
