"""Prometheus alerting and recording rules, the Kubernetes PrometheusRule, the
runbook and the rules' promtool unit tests, generated from the diagnosis table
(``gpu_exporter.diagnosis.table``) and ``alerts/config.yaml``.

Regenerate with ``python -m gpu_exporter_mixin.alerting``.
"""
