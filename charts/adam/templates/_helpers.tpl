{{/* The labels every object of the chart carries (Helm's and Kubernetes' recommended set). */}}
{{- define "adam.labels" -}}
app.kubernetes.io/name: adam
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The operator pods' selector: stable across upgrades (no version in it). */}}
{{- define "adam.selector" -}}
app.kubernetes.io/name: adam
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "adam.serviceAccountName" -}}
{{ .Values.serviceAccount.name | default .Release.Name }}
{{- end }}

{{/* The image of the operator, and of every job that names none (spec.image's default). */}}
{{- define "adam.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}
