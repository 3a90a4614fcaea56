{{/* The chart's name, or nameOverride. */}}
{{- define "app-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name: fullnameOverride, else <release>-<name> (or just the
release when it already holds the name). */}}
{{- define "app-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "app-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "app-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "app-operator.labels" -}}
helm.sh/chart: {{ include "app-operator.chart" . }}
{{ include "app-operator.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "app-operator.selector" -}}
app.kubernetes.io/name: {{ include "app-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "app-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "app-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "app-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The metrics Service's port name, which also says the scheme. */}}
{{- define "app-operator.metricsPortName" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The Secret the metrics certificate is mounted from: the user's (metrics.certSecret), else the
one cert-manager writes (metrics.certManager); empty when there is none (self-signed). */}}
{{- define "app-operator.metricsCertSecret" -}}
{{- if .Values.metrics.certSecret -}}
{{- if not .Values.metrics.secure }}
{{- fail "metrics.certSecret needs metrics.secure: the certificate serves HTTPS" }}
{{- end }}
{{- if .Values.metrics.certManager.enabled }}
{{- fail "metrics.certSecret and metrics.certManager.enabled: give one certificate" }}
{{- end }}
{{- .Values.metrics.certSecret -}}
{{- else if .Values.metrics.certManager.enabled -}}
{{ include "app-operator.fullname" . }}-metrics-cert
{{- end -}}
{{- end }}

{{/* The metrics Service's DNS name, which its certificate is for. */}}
{{- define "app-operator.metricsServerName" -}}
{{ include "app-operator.fullname" . }}-metrics.{{ .Release.Namespace }}.svc
{{- end }}

{{/* The runbooks' URL in config/prometheus/alerts.yaml, which metrics.prometheusRule.runbookBaseURL replaces. */}}
{{- define "app-operator.runbooks" -}}
https://github.com/app-operator/app-operator/blob/main/docs/runbooks.md
{{- end }}
