{{- define "taskgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "taskgate.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "taskgate.labels" -}}
{{ include "taskgate.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The port of a HOST:PORT listen address. */}}
{{- define "taskgate.port" -}}
{{- regexReplaceAll "^.*:" . "" -}}
{{- end -}}

{{/* Refusals: what the chart cannot deploy correctly. */}}
{{- define "taskgate.checks" -}}
{{- $store := default "file" (dig "store" "backend" "file" .Values.config) -}}
{{- if and (gt (int .Values.replicas) 1) (ne $store "redis") (not .Values.existingConfigSecret) -}}
{{- fail (printf "replicas: %d needs config.store.backend \"redis\": replicas share sessions and tasks only through Redis (store.backend is %q)" (int .Values.replicas) $store) -}}
{{- end -}}
{{- if not (dig "server" "admin_listen" "" .Values.config) -}}
{{- if not .Values.existingConfigSecret -}}
{{- fail "config.server.admin_listen is required: the probes and /metrics are on the operators' listener" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
TOML of the `config` values. Helm reads every YAML number as a float, and its toToml would write
30 as 30.0, which taskgate's integer keys refuse: whole numbers are written as integers here.
Tables come after the keys of their parent, arrays of tables as [[name]].
*/}}
{{- define "taskgate.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "taskgate.tomlValue" -}}
{{- $v := . -}}
{{- if kindIs "string" $v -}}{{ toJson $v }}
{{- else if kindIs "bool" $v -}}{{ $v }}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) -}}
{{- if eq $v (floor $v) -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) -}}{{ $v }}
{{- else if kindIs "slice" $v -}}[{{ range $i, $e := $v }}{{ if $i }}, {{ end }}{{ include "taskgate.tomlValue" $e }}{{ end }}]
{{- else if kindIs "map" $v -}}{ {{- range $i, $k := keys $v | sortAlpha }}{{ if $i }}, {{ end }}{{ include "taskgate.tomlKey" $k }} = {{ include "taskgate.tomlValue" (get $v $k) }}{{ end -}} }
{{- else -}}{{ fail (printf "config: a value TOML cannot hold: %v" $v) }}
{{- end -}}
{{- end -}}

{{/* Whether a value is an array of tables: a list whose items are all maps. */}}
{{- define "taskgate.isTables" -}}
{{- if and (kindIs "slice" .) (gt (len .) 0) -}}
{{- $all := true -}}
{{- range . -}}{{- if not (kindIs "map" .) -}}{{- $all = false -}}{{- end -}}{{- end -}}
{{- if $all -}}yes{{- end -}}
{{- end -}}
{{- end -}}

{{- define "taskgate.tomlTable" -}}
{{- $t := .table -}}
{{- $p := .path -}}
{{- range $k := keys $t | sortAlpha -}}
{{- $v := get $t $k -}}
{{- if and (not (kindIs "map" $v)) (not (include "taskgate.isTables" $v)) (not (kindIs "invalid" $v)) }}
{{ include "taskgate.tomlKey" $k }} = {{ include "taskgate.tomlValue" $v }}
{{- end -}}
{{- end -}}
{{- range $k := keys $t | sortAlpha -}}
{{- $v := get $t $k -}}
{{- $name := ternary (include "taskgate.tomlKey" $k) (printf "%s.%s" $p (include "taskgate.tomlKey" $k)) (eq $p "") -}}
{{- if kindIs "map" $v }}

[{{ $name }}]
{{- include "taskgate.tomlTable" (dict "path" $name "table" $v) -}}
{{- else if include "taskgate.isTables" $v -}}
{{- range $v }}

[[{{ $name }}]]
{{- include "taskgate.tomlTable" (dict "path" $name "table" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "taskgate.toml" -}}
# Rendered by the taskgate Helm chart from its `config` values.
{{- include "taskgate.tomlTable" (dict "path" "" "table" .Values.config) }}
{{ end -}}
