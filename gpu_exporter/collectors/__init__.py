"""Collectors: one module per source, each adding its samples to a poll's snapshot."""
