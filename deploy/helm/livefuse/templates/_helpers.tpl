{{/* Names and labels */}}
{{- define "livefuse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "livefuse.fullname" -}}
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

{{- define "livefuse.baseSelectorLabels" -}}
app.kubernetes.io/name: {{ include "livefuse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The LiveFuse pods (not the chart's coturn) */}}
{{- define "livefuse.selectorLabels" -}}
{{ include "livefuse.baseSelectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "livefuse.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "livefuse.baseSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "livefuse.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "livefuse.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "livefuse.secretName" -}}
{{- default (printf "%s-secrets" (include "livefuse.fullname" .)) .Values.secrets.existingSecret }}
{{- end }}

{{- define "livefuse.image" -}}
{{- $repo := .Values.image.repository }}
{{- $tag := default .Chart.AppVersion (.Values.image.tag | toString) }}
{{- if .Values.gpu.enabled }}
{{- $repo = default $repo .Values.gpu.image.repository }}
{{- $tag = default (printf "%s-gpu" $tag) (.Values.gpu.image.tag | toString) }}
{{- end }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}

{{/* deploy/scaling.json: the autoscaler's metric, target and queries (one file for chart and tests) */}}
{{- define "livefuse.scaling" -}}
{{- $raw := .Files.Get "files/scaling.json" }}
{{- if not $raw }}{{ fail "files/scaling.json (a link to deploy/scaling.json) is missing from the chart" }}{{ end }}
{{- $raw }}
{{- end }}

{{- define "livefuse.scheme" -}}
{{- if .Values.server.tls.secretName }}https{{ else }}http{{ end }}
{{- end }}

{{/* The URL every session URL is made absolute on: the pod's own address unless set */}}
{{- define "livefuse.publicUrl" -}}
{{- default (printf "%s://$(POD_IP):%d" (include "livefuse.scheme" .) (int .Values.server.port)) .Values.server.publicUrl }}
{{- end }}

{{/* Seconds the kubelet waits after SIGTERM: the drain timeout plus a margin, never less */}}
{{- define "livefuse.gracePeriod" -}}
{{- $drain := float64 .Values.server.drainTimeout }}
{{- $margin := int .Values.drain.graceMarginSeconds }}
{{- if lt $margin 5 }}{{ fail "drain.graceMarginSeconds must be at least 5: the drain needs time after its timeout to close sessions, flush the audit log and exit" }}{{ end }}
{{- add (int (ceil $drain)) $margin }}
{{- end }}

{{/* Names the pods answer to: the pod IP, the Service's cluster names, the Ingress hosts, the ones given */}}
{{- define "livefuse.publicHosts" -}}
{{- $hosts := list "$(POD_IP)" }}
{{- $svc := include "livefuse.fullname" . }}
{{- $hosts = append $hosts $svc }}
{{- $hosts = append $hosts (printf "%s.%s" $svc .Release.Namespace) }}
{{- $hosts = append $hosts (printf "%s.%s.svc" $svc .Release.Namespace) }}
{{- $hosts = append $hosts (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) }}
{{- if .Values.ingress.enabled }}{{ range .Values.ingress.hosts }}{{ $hosts = append $hosts .host }}{{ end }}{{ end }}
{{- range .Values.safety.publicHosts }}{{ $hosts = append $hosts . }}{{ end }}
{{- toJson (uniq $hosts) }}
{{- end }}

{{/* Page origins allowed to call the pods: the Ingress hosts' origins and the ones given */}}
{{- define "livefuse.allowedOrigins" -}}
{{- $origins := list }}
{{- if .Values.ingress.enabled }}
{{- $tlsHosts := list }}{{ range .Values.ingress.tls }}{{ range .hosts }}{{ $tlsHosts = append $tlsHosts . }}{{ end }}{{ end }}
{{- range .Values.ingress.hosts }}
{{- $origins = append $origins (printf "%s://%s" (ternary "https" "http" (has .host $tlsHosts)) .host) }}
{{- end }}
{{- end }}
{{- range .Values.safety.allowedOrigins }}{{ $origins = append $origins . }}{{ end }}
{{- toJson (uniq $origins) }}
{{- end }}

{{/* ICE servers: the ones given, then the chart's coturn */}}
{{- define "livefuse.iceServers" -}}
{{- $servers := .Values.server.iceServers | default list }}
{{- if .Values.turn.enabled }}
{{- if not .Values.turn.externalHost }}{{ fail "turn.enabled needs turn.externalHost: the address clients and pods reach coturn by" }}{{ end }}
{{- $servers = append $servers (printf "turn:%s:%d?transport=udp" .Values.turn.externalHost (int .Values.turn.port)) }}
{{- $servers = append $servers (printf "turn:%s:%d?transport=tcp" .Values.turn.externalHost (int .Values.turn.port)) }}
{{- end }}
{{- join "," $servers }}
{{- end }}

{{- define "livefuse.iceUsername" -}}
{{- if .Values.turn.enabled }}{{ .Values.turn.username }}{{ else }}{{ .Values.server.iceUsername }}{{ end }}
{{- end }}

{{- define "livefuse.faceBackend" -}}
{{- if .Values.pipeline.faceBackend }}{{ .Values.pipeline.faceBackend }}{{ else if .Values.gpu.enabled }}{{ .Values.gpu.faceBackend }}{{ end }}
{{- end }}

{{- define "livefuse.device" -}}
{{- if .Values.pipeline.device }}{{ .Values.pipeline.device }}{{ else if .Values.gpu.enabled }}{{ .Values.gpu.device }}{{ end }}
{{- end }}

{{/* A value kept across upgrades: the key in the live Secret if there is one, else a new random one */}}
{{- define "livefuse.keptSecret" -}}
{{- $ctx := index . 0 }}{{ $key := index . 1 }}{{ $given := index . 2 }}
{{- if $given }}{{ $given }}{{ else }}
{{- $live := lookup "v1" "Secret" $ctx.Release.Namespace (include "livefuse.secretName" $ctx) }}
{{- if and $live $live.data (hasKey $live.data $key) }}{{ index $live.data $key | b64dec }}{{ else }}{{ randAlphaNum 64 }}{{ end }}
{{- end }}
{{- end }}

{{/* Prometheus Adapter rules for the HPA's metrics (deploy/scaling.json's adapter_rule) */}}
{{- define "livefuse.adapterRules" -}}
{{- $scaling := include "livefuse.scaling" . | fromJson }}
{{- $rule := $scaling.hpa.adapter_rule }}
rules:
  - seriesQuery: {{ $rule.seriesQuery | quote }}
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
    name:
      matches: "^{{ $scaling.hpa.metric_name }}$"
      as: {{ $scaling.hpa.metric_name | quote }}
    metricsQuery: {{ $rule.metricsQuery | quote }}
  - seriesQuery: {{ $rule.seriesQuery | replace $scaling.hpa.metric_name "livefuse_frame_budget_used_ratio" | quote }}
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
    name:
      matches: "^livefuse_frame_budget_used_ratio$"
      as: "livefuse_frame_budget_used_ratio"
    metricsQuery: {{ $rule.metricsQuery | quote }}
{{- end }}

{{/* LIVEFUSE_RESULTS_PURGE: the caches a deleted result is purged from, the chart's Varnish tier (its headless
Service: every cache pod) and server.resultsPurge */}}
{{- define "livefuse.resultsPurge" -}}
{{- $out := list }}
{{- if .Values.cache.enabled }}
{{- $out = append $out (printf "http://%s-cache-pods.%s.svc:%v" (include "livefuse.fullname" .) .Release.Namespace .Values.cache.port) }}
{{- end }}
{{- range .Values.server.resultsPurge }}
{{- $out = append $out . }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* gRPC probes when the pods serve gRPC, probes.grpc asks for them and the port is plaintext (the kubelet's
gRPC probe speaks no TLS) */}}
{{- define "livefuse.grpcProbes" -}}
{{- if and .Values.server.grpcPort .Values.probes.grpc (empty .Values.server.tls.secretName) }}true{{ end }}
{{- end }}
