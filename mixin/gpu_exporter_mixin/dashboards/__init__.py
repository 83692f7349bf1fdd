"""Grafana dashboards as code (grafana-foundation-sdk): the node and fleet
dashboards under ``grafana/dashboards/``. Regenerate with
``python -m gpu_exporter_mixin.dashboards``."""
