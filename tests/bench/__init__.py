"""Smoke tests of the benchmarks in bench/ (tiny N, no timing thresholds)."""
