{{- define "space.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "space.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "api") */}}
{{- define "space.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "space.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "space.databaseSecret" -}}
{{- if .Values.postgresql.existingSecret -}}
{{- .Values.postgresql.existingSecret -}}
{{- else if .Values.postgresql.url -}}
{{- printf "%s-postgresql" (include "space.fullname" .) -}}
{{- else -}}
{{- fail "set postgresql.existingSecret (a Secret holding the database URL) or postgresql.url" -}}
{{- end -}}
{{- end -}}

{{- define "space.nodeTokenSecret" -}}
{{- .Values.nodeToken.existingSecret | default (printf "%s-node-token" (include "space.fullname" .)) -}}
{{- end -}}

{{/* The node token, as the variable `name` (the nodes' and the control plane's). */}}
{{- define "space.nodeTokenEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "space.nodeTokenSecret" .root }}
      key: {{ .root.Values.nodeToken.existingSecretKey }}
{{- end -}}

{{/* The environment every component shares: database, data dir, bootstrap key, extras. */}}
{{- define "space.env" -}}
- name: SPACE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "space.databaseSecret" .root }}
      key: {{ ternary .root.Values.postgresql.existingSecretKey "database-url" (not (empty .root.Values.postgresql.existingSecret)) }}
- name: SPACE_DATA_DIR
  value: /var/lib/space
{{- with .root.Values.bootstrapKey.existingSecret }}
- name: SPACE_BOOTSTRAP_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.root.Values.bootstrapKey.existingSecretKey }}
{{- end }}
{{- range $name, $value := .extra }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* A restricted, non-root container (api, controller). */}}
{{- define "space.restricted" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "space.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
