{{/* Name of every object of the release (at most 63 characters). */}}
{{- define "botbox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "botbox.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "botbox.labels" -}}
{{ include "botbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The BotBox image reference; a digest wins over the tag. */}}
{{- define "botbox.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}
{{- end -}}

{{/* "cert-manager" or "helm": who issues the webhook's serving certificate. */}}
{{- define "botbox.certSource" -}}
{{- $s := .Values.certificates.source -}}
{{- if eq $s "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}cert-manager{{- else -}}helm{{- end -}}
{{- else if or (eq $s "cert-manager") (eq $s "helm") -}}
{{- $s -}}
{{- else -}}
{{- fail (printf "certificates.source must be auto, cert-manager or helm, got %q" $s) -}}
{{- end -}}
{{- end -}}

{{- define "botbox.tlsSecret" -}}{{ include "botbox.fullname" . }}-webhook-tls{{- end -}}

{{/* DNS name the API server calls. */}}
{{- define "botbox.serviceHost" -}}
{{- printf "%s.%s.svc" (include "botbox.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
namespaceSelector of both webhook configurations: the labelled namespaces,
never the webhook's own (a labelled release namespace would make the webhook
Pods wait for themselves).
*/}}
{{- define "botbox.namespaceSelector" -}}
namespaceSelector:
  matchLabels:
    botbox.dev/inject: enabled
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [{{ .Release.Namespace | quote }}]
{{- end -}}
