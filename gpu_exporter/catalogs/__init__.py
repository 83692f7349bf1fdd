"""Metric catalog entries, one module per area; joined in ``gpu_exporter.poll.catalog``."""
