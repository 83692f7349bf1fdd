// gpu-exporter's monitoring mixin: the alerting and recording rules and the
// Grafana dashboards, from the same generators as alerts/ and grafana/
// (generated.libsonnet, a function of $._config; config.libsonnet holds the
// defaults, the settings of alerts/config.yaml). Vendor this folder and
// override what you need:
//
//   local gpu = (import 'gpu-exporter-mixin/mixin.libsonnet') + {
//     _config+:: { selector: 'job="gpu-exporter", cluster="gpu-west"', cluster_label: 'k8s_cluster' },
//   };
//   { alerts: gpu.prometheusAlerts, rules: gpu.prometheusRules, dashboards: gpu.grafanaDashboards }
local generated = import 'generated.libsonnet';

(import 'config.libsonnet') + {
  local data = generated($._config),
  local recording(group) = std.all([std.objectHas(r, 'record') for r in group.rules]),
  prometheusRules+:: { groups+: [g for g in data.groups if recording(g)] },
  prometheusAlerts+:: { groups+: [g for g in data.groups if !recording(g)] },
  grafanaDashboards+:: data.dashboards,
}
