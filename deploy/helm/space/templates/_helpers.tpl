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

{{/* `nodeAuth`, checked: signed | token. */}}
{{- define "space.nodeAuth" -}}
{{- if has .Values.nodeAuth (list "signed" "token") -}}
{{- .Values.nodeAuth -}}
{{- else -}}
{{- fail (printf "nodeAuth is signed or token, not %q" (toString .Values.nodeAuth)) -}}
{{- end -}}
{{- end -}}

{{- define "space.nodeSigningSecret" -}}
{{- $key := .Values.nodeSigningKey -}}
{{- if ne (empty $key.existingSecret) (empty $key.existingConfigMap) -}}
{{- fail "set both nodeSigningKey.existingSecret and nodeSigningKey.existingConfigMap, or neither" -}}
{{- end -}}
{{- $key.existingSecret | default (printf "%s-node-signing-key" (include "space.fullname" .)) -}}
{{- end -}}

{{- define "space.nodeTrustConfigMap" -}}
{{- .Values.nodeSigningKey.existingConfigMap | default (printf "%s-node-trust-key" (include "space.fullname" .)) -}}
{{- end -}}

{{- define "space.credentialKeysSecret" -}}
{{- .Values.credentials.existingSecret | default (printf "%s-credential-keys" (include "space.fullname" .)) -}}
{{- end -}}

{{/* The API's and controller's key files: the node signing key (`nodeAuth: signed`) and
the credential keys every one of them must share. An init container copies each from its
Secret into the memory volume `keys` as a 0600 file of the container's user (a Secret
volume's files are group-readable under the pod's fsGroup, which SPACE refuses for a key).
One row per file: the Secret volume, the file in it, the file in `keys`, the setting. */}}
{{- define "space.keyFiles" -}}
{{- if eq (include "space.nodeAuth" .) "signed" }}
- {from: node-signing-secret, key: key, file: signing-key.pem, env: SPACE_CLUSTER_NODE_SIGNING_KEY_FILE}
{{- end }}
- {from: credential-keys-secret, key: credentials.key, file: credentials.key, env: SPACE_CREDENTIALS_KEY_FILE}
- {from: credential-keys-secret, key: credentials-placeholder.key, file: credentials-placeholder.key, env: SPACE_CREDENTIALS_PLACEHOLDER_KEY_FILE}
{{- end -}}

{{/* The API's and controller's env: where each key file is, and the node token in
`nodeAuth: token`. */}}
{{- define "space.controlPlaneEnv" -}}
{{- range include "space.keyFiles" . | fromYamlArray }}
- name: {{ .env }}
  value: /run/space-keys/{{ .file }}
{{- end }}
{{- if eq (include "space.nodeAuth" .) "token" }}
{{ include "space.nodeTokenEnv" (dict "root" . "name" "SPACE_CLUSTER_NODE_TOKEN") }}
{{- end }}
{{- end -}}

{{- define "space.controlPlaneInit" -}}
{{- $copies := list "umask 077" -}}
{{- range include "space.keyFiles" . | fromYamlArray -}}
{{- $copies = append $copies (printf "cat /etc/space/%s/%s > /run/space-keys/%s" .from .key .file) -}}
{{- end -}}
initContainers:
  - name: keys
    image: {{ include "space.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["sh", "-c", {{ join " && " $copies | quote }}]
    resources:
      requests: {cpu: 10m, memory: 16Mi}
      limits: {cpu: 100m, memory: 64Mi}
    {{- include "space.restricted" . | nindent 4 }}
    volumeMounts:
      {{- if eq (include "space.nodeAuth" .) "signed" }}
      - name: node-signing-secret
        mountPath: /etc/space/node-signing-secret
        readOnly: true
      {{- end }}
      - name: credential-keys-secret
        mountPath: /etc/space/credential-keys-secret
        readOnly: true
      - name: keys
        mountPath: /run/space-keys
{{- end -}}

{{- define "space.controlPlaneMounts" -}}
- name: keys
  mountPath: /run/space-keys
  readOnly: true
{{- end -}}

{{- define "space.controlPlaneVolumes" -}}
{{- if eq (include "space.nodeAuth" .) "signed" -}}
- name: node-signing-secret
  secret:
    secretName: {{ include "space.nodeSigningSecret" . }}
    defaultMode: 256  # 0400 (0440 under the fsGroup)
    items:
      - key: {{ .Values.nodeSigningKey.existingSecretKey }}
        path: key
{{ end -}}
- name: credential-keys-secret
  secret:
    secretName: {{ include "space.credentialKeysSecret" . }}
    defaultMode: 256
    items:
      - key: {{ .Values.credentials.existingSecretKeys.sealing }}
        path: credentials.key
      - key: {{ .Values.credentials.existingSecretKeys.placeholder }}
        path: credentials-placeholder.key
- name: keys
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end -}}

{{/* A node's credential: the env, the mount and the volume. */}}
{{- define "space.nodeEnv" -}}
{{- if eq (include "space.nodeAuth" .) "signed" -}}
- name: SPACE_NODE_TRUST_KEY_FILE
  value: /etc/space/node-trust/trust-key.pem
{{- else -}}
{{- include "space.nodeTokenEnv" (dict "root" . "name" "SPACE_NODE_TOKEN") }}
{{- end -}}
{{- end -}}

{{- define "space.nodeMounts" -}}
{{- if eq (include "space.nodeAuth" .) "signed" -}}
- name: node-trust
  mountPath: /etc/space/node-trust
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "space.nodeVolumes" -}}
{{- if eq (include "space.nodeAuth" .) "signed" -}}
- name: node-trust
  configMap:
    name: {{ include "space.nodeTrustConfigMap" . }}
    items:
      - key: {{ .Values.nodeSigningKey.existingConfigMapKey }}
        path: trust-key.pem
{{- end -}}
{{- end -}}

{{/* `node.sharedSnapshots`'s volume source (nfs or a claim), empty when off. */}}
{{- define "space.sharedSnapshots" -}}
{{- $shared := .Values.node.sharedSnapshots -}}
{{- if and $shared.nfs.server $shared.existingClaim -}}
{{- fail "node.sharedSnapshots: set nfs.server or existingClaim, not both" -}}
{{- else if $shared.nfs.server -}}
nfs:
  server: {{ $shared.nfs.server | quote }}
  path: {{ $shared.nfs.path | quote }}
{{- else if $shared.existingClaim -}}
persistentVolumeClaim:
  claimName: {{ $shared.existingClaim | quote }}
{{- end -}}
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

{{/* Prometheus scrape annotations for a pod serving /metrics on `port`. */}}
{{- define "space.scrapeAnnotations" -}}
{{- if .root.Values.metrics.scrapeAnnotations -}}
annotations:
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ .port | quote }}
  prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/* The API's sandbox URL domain (SPACE_PUBLIC_DOMAIN), empty for SPACE's default. */}}
{{- define "space.publicDomain" -}}
{{- .Values.api.publicDomain | default (ternary .Values.ingress.host "" .Values.ingress.enabled) -}}
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
