"""Benchmarks of the exporter on simulated nodes: see BENCHMARKS.md."""
