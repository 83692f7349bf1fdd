"""HTTP: /metrics from the newest snapshot, the landing page, health endpoints."""
