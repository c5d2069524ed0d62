{{/* Name of the chart, or nameOverride. */}}
{{- define "weir.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name: fullnameOverride, else <release>-<name>, else <release> when
it already contains the name. */}}
{{- define "weir.fullname" -}}
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

{{- define "weir.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "weir.labels" -}}
helm.sh/chart: {{ include "weir.chart" . }}
{{ include "weir.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels selecting the pods. */}}
{{- define "weir.selectorLabels" -}}
app.kubernetes.io/name: {{ include "weir.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "weir.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "weir.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: repository@digest, or repository:tag (tag defaulting to appVersion). */}}
{{- define "weir.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* host:port on the pod's address (IPv6 addresses are written in brackets in values). */}}
{{- define "weir.podAddr" -}}
{{- printf "%s:%d" .root.Values.listenAddress (int .port) }}
{{- end }}

{{- define "weir.electionId" -}}
{{- default (printf "%s-leader" (include "weir.fullname" .)) .Values.controller.electionId }}
{{- end }}

{{- define "weir.publishService" -}}
{{- default (printf "%s/%s" .Release.Namespace (include "weir.fullname" .)) .Values.controller.publishService.pathOverride }}
{{- end }}

{{- define "weir.terminationGracePeriodSeconds" -}}
{{- $min := add .Values.proxy.preStopSleepSeconds .Values.proxy.shutdownGraceSeconds }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $min 5 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $min) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be more than proxy.preStopSleepSeconds + proxy.shutdownGraceSeconds (%v), or in-flight requests are cut off" .Values.terminationGracePeriodSeconds $min) }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
Checks of combinations the schema cannot express; rendered (as nothing) by the Deployment.
*/}}
{{- define "weir.validate" -}}
{{- $ns := .Values.watchNamespaces }}
{{- if and $ns .Values.controller.publishService.enabled (not .Values.controller.publishService.pathOverride) (not (has .Release.Namespace $ns)) }}
{{- fail (printf "watchNamespaces does not include the release namespace %q, so the controller cannot see its own Service to publish its address in Ingress status: add %q to watchNamespaces, or set controller.publishService.enabled=false (optionally with controller.publishStatusAddresses), or point controller.publishService.pathOverride at a Service in a watched namespace" .Release.Namespace .Release.Namespace) }}
{{- end }}
{{- if and .Values.controller.publishService.enabled .Values.controller.publishStatusAddresses }}
{{- fail "controller.publishStatusAddresses needs controller.publishService.enabled=false (the controller takes one or the other)" }}
{{- end }}
{{- if and .Values.service.https.enabled (not .Values.proxy.tls) }}
{{- fail "service.https.enabled needs proxy.tls=true (there is no HTTPS listener to expose)" }}
{{- end }}
{{- if and (not .Values.service.http.enabled) (not .Values.service.https.enabled) }}
{{- fail "service.http.enabled and service.https.enabled are both false: the proxy Service would have no port" }}
{{- end }}
{{- if and .Values.service.externalTrafficPolicy (eq .Values.service.type "ClusterIP") }}
{{- fail "service.externalTrafficPolicy applies to NodePort and LoadBalancer Services only" }}
{{- end }}
{{- if and .Values.redis.rateLimits (not .Values.redis.host) (not .Values.redis.existingSecret) }}
{{- fail "redis.rateLimits needs redis.host (or redis.existingSecret)" }}
{{- end }}
{{- if and .Values.redis.rateLimits $ns (not (has .Release.Namespace $ns)) }}
{{- fail (printf "redis.rateLimits keeps its configurations in a Secret of the release namespace %q, which the controller only reads when watchNamespaces includes it" .Release.Namespace) }}
{{- end }}
{{- $ports := list .Values.proxy.httpPort .Values.proxy.httpsPort .Values.proxy.adminPort .Values.proxy.statusPort .Values.controller.metricsPort }}
{{- if ne (len $ports) (len (uniq $ports)) }}
{{- fail (printf "proxy.httpPort, proxy.httpsPort, proxy.adminPort, proxy.statusPort and controller.metricsPort must differ (the containers share the pod's network): %v" $ports) }}
{{- end }}
{{- end }}
