"""Fixtures shared by tests, the local platform and benchmarks (no test framework imports)."""
