{{/* Labels on every object: deploy/'s two (name, part-of) and Helm's standard ones. */}}
{{- define "volcano-guard.labels" -}}
app.kubernetes.io/name: volcano-guard
app.kubernetes.io/part-of: volcano-guard
{{ include "volcano-guard.helmLabels" . }}
{{- end }}

{{/* Helm's own labels: which release and chart an object comes from. */}}
{{- define "volcano-guard.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
{{- end }}

{{- define "volcano-guard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The image fields of a container. */}}
{{- define "volcano-guard.containerImage" -}}
image: {{ include "volcano-guard.image" . }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* Pod spec fields every pod of the chart takes from the values. */}}
{{- define "volcano-guard.scheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{ toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The reconciler's pod and container securityContext: its Deployment's and its uninstall
hook's, one account, the same rights. */}}
{{- define "volcano-guard.reconcilerPodSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "volcano-guard.reconcilerContainerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* The config file: .Values.config, with the keys that default from other values filled in
when the config does not set them. */}}
{{- define "volcano-guard.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $policies := get $config "policies" | default dict -}}
{{- $nodeName := get $policies "nodeName" | default dict -}}
{{- $bindingGuard := get $nodeName "bindingGuard" | default dict -}}
{{- if not (hasKey $bindingGuard "allowedBinders") -}}
{{- $binder := printf "system:serviceaccount:%s:%s-scheduler" .Values.volcano.namespace .Values.volcano.releaseName -}}
{{- $_ := set $bindingGuard "allowedBinders" (list $binder) -}}
{{- end -}}
{{- $_ := set $nodeName "bindingGuard" $bindingGuard -}}
{{- $_ := set $policies "nodeName" $nodeName -}}
{{- $sidecar := get $policies "sidecarInjection" | default dict -}}
{{- if not (hasKey $sidecar "image") -}}
{{- $_ := set $sidecar "image" (include "volcano-guard.image" .) -}}
{{- end -}}
{{- $_ := set $policies "sidecarInjection" $sidecar -}}
{{- $_ := set $config "policies" $policies -}}
{{ toYaml $config }}
{{- end }}
