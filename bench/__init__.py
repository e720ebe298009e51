"""Benchmarks: scripts that print their figures (see BENCHMARKS.md)."""
