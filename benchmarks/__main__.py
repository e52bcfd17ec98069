"""Run the benchmarks: `python -m benchmarks [NAME ...] [--quick]`."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

OUT = Path("build/bench")


def table(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help="bench_<name> modules to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    args = parser.parse_args()
    here = Path(__file__).parent
    found = sorted(m.name[len("bench_") :] for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    names = args.names or found
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(found)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:
        result = importlib.import_module(f"benchmarks.bench_{name}").run(quick=args.quick)
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=2))
        print(f"\n## {result['title']}\n\n{table(result['rows'])}\n")
        if result.get("notes"):
            print(result["notes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
