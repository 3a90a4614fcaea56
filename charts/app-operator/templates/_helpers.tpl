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

{{/* The Secret cert-manager writes the metrics certificate to (metrics.certManager). */}}
{{- define "app-operator.metricsCertSecret" -}}
{{ include "app-operator.fullname" . }}-metrics-cert
{{- end }}

{{/* The metrics Service's DNS name, which its certificate is for. */}}
{{- define "app-operator.metricsServerName" -}}
{{ include "app-operator.fullname" . }}-metrics.{{ .Release.Namespace }}.svc
{{- end }}
