"""gpu-exporter's monitoring mixin: what a Prometheus and Grafana need around
the exporter, generated from the exporter's own tables (the diagnosis table,
the metric catalog, the Xid tiers) and ``alerts/config.yaml``. The alerting
and recording rules with their promtool tests, the runbook, the dashboards and
the README's generated tables. A separate project from the exporter: the
runtime wheel holds none of it, and the daemon never imports it."""
