"""Benchmarks and measurement scripts (not part of the installed package)."""
