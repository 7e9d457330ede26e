"""Benchmarks (see docs/benchmarks.md); not part of the product."""
