{{/* The chart's name, at most 63 characters (a label value). */}}
{{- define "gpu-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release name when it already holds the chart's name. */}}
{{- define "gpu-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "gpu-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "gpu-exporter.selectorLabels" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpu-exporter.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* Where the web config Secret is mounted. */}}
{{- define "gpu-exporter.webConfigDir" -}}
/etc/gpu-exporter/web
{{- end }}

{{/*
One probe: an HTTP GET of path over HTTP or HTTPS, or, where basic auth or
client certificates stand in front of every path, a TCP check of the port.
*/}}
{{- define "gpu-exporter.probe" -}}
{{- $web := .root.Values.webConfig }}
{{- if and $web.secretName $web.authRequired }}
tcpSocket:
  port: metrics
{{- else }}
httpGet:
  path: {{ .path }}
  port: metrics
  {{- if and $web.secretName $web.tls }}
  scheme: HTTPS
  {{- end }}
{{- end }}
{{- with .settings }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The scrape endpoint of a ServiceMonitor or PodMonitor (same fields). */}}
{{- define "gpu-exporter.scrapeEndpoint" -}}
- port: metrics
  path: /metrics
  {{- if ne .scheme "http" }}
  scheme: {{ .scheme }}
  {{- end }}
  interval: {{ .interval }}
  scrapeTimeout: {{ .scrapeTimeout }}
  {{- with .tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .basicAuth }}
  basicAuth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  # gpu_allocation_info's namespace, pod and container name the GPU's owner;
  # without this Prometheus would rename them exported_* in favour of the
  # exporter's own pod. The exporter never exposes job or instance.
  honorLabels: true
  relabelings:
    - sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: instance
      action: replace
    {{- with .relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
User 0 for the kubelet's PodResources socket, which admits root only
(connect() needs write permission on it); user 10001 otherwise.
*/}}
{{- define "gpu-exporter.runsAsRoot" -}}
{{- if and .Values.podResources.enabled .Values.podResources.runAsRoot }}true{{ end }}
{{- end }}

{{/* A securityContext (pod or container) with the user the exporter runs as. */}}
{{- define "gpu-exporter.withUser" -}}
{{- $sc := deepCopy .context }}
{{- if include "gpu-exporter.runsAsRoot" .root }}
{{- $_ := set $sc "runAsUser" 0 }}
{{- $_ := set $sc "runAsNonRoot" false }}
{{- end }}
{{- toYaml $sc }}
{{- end }}

{{/*
The container's securityContext. The API server refuses privileged beside
allowPrivilegeEscalation: false, so a privileged container leaves it out. The
kernel log adds CAP_SYSLOG (kernel.dmesg_restrict=1) and, unless the runtime
admits /dev/kmsg otherwise, privileged: a hostPath device is not in the
container's device cgroup.
*/}}
{{- define "gpu-exporter.containerSecurityContext" -}}
{{- $sc := deepCopy .Values.securityContext }}
{{- $kmsg := .Values.kernelLog }}
{{- if and $kmsg.enabled $kmsg.privileged }}
{{- $_ := set $sc "privileged" true }}
{{- end }}
{{- if $sc.privileged }}
{{- $_ := unset $sc "allowPrivilegeEscalation" }}
{{- end }}
{{- if $kmsg.enabled }}
{{- $caps := deepCopy (default dict $sc.capabilities) }}
{{- $_ := set $caps "add" (append (default list $caps.add) "SYSLOG" | uniq) }}
{{- $_ := set $sc "capabilities" $caps }}
{{- end }}
{{- include "gpu-exporter.withUser" (dict "root" . "context" $sc) }}
{{- end }}

