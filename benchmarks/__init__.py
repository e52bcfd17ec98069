"""Benchmarks: `make bench` runs every benchmarks/bench_*.py.

Each module exposes ``run(quick: bool) -> dict`` returning ``{"title": str, "rows": [dict, ...],
"notes": str}``. Figures are ratios against a baseline measured side by side in the same run,
never absolute timings asserted by tests. Results go to build/bench/<name>.json and a Markdown
table on stdout (paste it into the README).
"""
