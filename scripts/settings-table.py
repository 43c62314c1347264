#!/usr/bin/env python3
"""Rewrites the table under "## Every setting" in docs/settings.md from `dflash config list --json`.

usage: scripts/settings-table.py [DFLASH_BINARY]   (default build/dflash)
"""
import json
import pathlib
import subprocess
import sys


def num(x):
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return json.dumps(x)


def constraint(e):
    if "choices" in e:
        return "\\|".join(e["choices"])
    if "min" not in e and "max" not in e:
        return ""
    lo = num(e["min"]) if "min" in e else "..."
    hi = num(e["max"]) if "max" in e else "..."
    return f"[{lo}, {hi}" + (")" if "max" not in e else "]")


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/dflash"
    entries = json.loads(subprocess.check_output([binary, "config", "list", "--json"]))
    rows = ["| key | type | default | range / choices | doc |", "|---|---|---|---|---|"]
    for e in sorted(entries, key=lambda e: e["key"]):
        default = json.dumps(e["default"], ensure_ascii=False)
        doc = e["doc"].replace("|", "\\|")
        rows.append(f"| `{e['key']}` | `{e['type']}` | `{default}` | {constraint(e)} | {doc} |")
    path = pathlib.Path(__file__).resolve().parent.parent / "docs" / "settings.md"
    lines = path.read_text().split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("| key | type | default"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    lines[start:end] = rows
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
