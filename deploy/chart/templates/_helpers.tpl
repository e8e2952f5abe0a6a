{{/*
skein.fullname: the prefix of the chart's own objects ("skein" for a release named skein).
*/}}
{{- define "skein.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* skein.labels: the labels of every object; pass the root context. */}}
{{- define "skein.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: skein
{{- end -}}

{{/* skein.selectorLabels: dict "root" $ "component" "controller" */}}
{{- define "skein.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* skein.image: an image reference from {registry, repository, tag, digest}: the registry
defaults to imageRegistry, the tag to appVersion; a digest wins over the tag. */}}
{{- define "skein.image" -}}
{{- $reg := .image.registry | default .root.Values.imageRegistry | default "" | trimSuffix "/" -}}
{{- $repo := .image.repository -}}
{{- if $reg -}}
{{- $repo = printf "%s/%s" $reg $repo -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default .root.Chart.AppVersion | toString) -}}
{{- end -}}
{{- end -}}

{{/* skein.cidrs: a CIDR or a list of CIDRs as the comma-separated list the flags take. */}}
{{- define "skein.cidrs" -}}
{{- if kindIs "slice" . -}}
{{- join "," . -}}
{{- else -}}
{{- . | toString | nospace -}}
{{- end -}}
{{- end -}}

{{/*
skein.overlayArgs: the overlay flags skein-agent and skein-gateway share (same names in both), so
the nodes' devices and the gateways always agree. "mtuFlag" names the MTU flag of the command.
*/}}
{{- define "skein.overlayArgs" -}}
{{- $o := .root.Values.overlay -}}
- --overlay-kind={{ $o.kind }}
- --vni={{ int64 $o.vni }}
{{- if $o.port }}
- --overlay-port={{ int64 $o.port }}
{{- end }}
{{- if $o.mtu }}
- --{{ .mtuFlag }}={{ int64 $o.mtu }}
{{- end }}
{{- end -}}

{{/*
skein.gatewayTemplate renders one default gateway template from the chart's files (copies of
deploy/templates, kept equal by deploy/chart_test.go). The file is read with .Files.Get and
parsed, never evaluated, so its '{{ .Name }}'-style strings reach the API untouched: skein-
controller fills them per gateway. The chart sets the namespace, its labels, and the gateway
container's image, pull policy, resources and overlay flags (and --watch-pods with
gateway.watchPods), the replicas, and from
.Values.gateway the pods' node selector, tolerations, priority class and image pull secrets and
the annotations of everything rendered.
Pass dict "root" $ "file" "files/templates/wireguard-server.yaml".
*/}}
{{- define "skein.gatewayTemplate" -}}
{{- $root := .root -}}
{{- $t := fromYaml ($root.Files.Get .file) -}}
{{- if or (hasKey $t "Error") (not $t.spec) -}}
{{- fail (printf "%s: not a gateway template: %v" .file (get $t "Error")) -}}
{{- end -}}
{{- $_ := set $t.metadata "namespace" $root.Release.Namespace -}}
{{- $_ := set $t.metadata "labels" (merge (include "skein.labels" $root | fromYaml) ($t.metadata.labels | default dict)) -}}
{{- $_ := set $t.spec.template.spec.deployment "replicas" (int $root.Values.gateway.replicas) -}}
{{- $pod := $t.spec.template.spec.deployment.template.spec -}}
{{- $found := false -}}
{{- range $c := $pod.containers -}}
{{- if eq $c.name "gateway" -}}
{{- $found = true -}}
{{- $g := $root.Values.gateway -}}
{{- $_ := set $c "image" (include "skein.image" (dict "root" $root "image" $g.image)) -}}
{{- $_ := set $c "imagePullPolicy" $g.image.pullPolicy -}}
{{- with $g.resources -}}
{{- $_ := set $c "resources" . -}}
{{- end -}}
{{- $extra := include "skein.overlayArgs" (dict "root" $root "mtuFlag" "overlay-mtu") | fromYamlArray -}}
{{- if eq (toString $g.watchPods) "true" -}}
{{- $extra = append $extra "--watch-pods" -}}
{{- end -}}
{{- $_ := set $c "args" (concat ($c.args | default list) $extra) -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "%s: no container named gateway" .file) -}}
{{- end -}}
{{- $g := $root.Values.gateway -}}
{{- with $g.nodeSelector -}}
{{- $_ := set $pod "nodeSelector" (merge (deepCopy .) ($pod.nodeSelector | default dict)) -}}
{{- end -}}
{{- with $g.tolerations -}}
{{- $_ := set $pod "tolerations" (concat ($pod.tolerations | default list) .) -}}
{{- end -}}
{{- with $g.priorityClassName -}}
{{- $_ := set $pod "priorityClassName" . -}}
{{- end -}}
{{- with $g.imagePullSecrets -}}
{{- $_ := set $pod "imagePullSecrets" (concat ($pod.imagePullSecrets | default list) .) -}}
{{- end -}}
{{- with $g.annotations -}}
{{- $meta := $t.spec.template.metadata | default dict -}}
{{- $_ := set $meta "annotations" (merge (deepCopy .) ($meta.annotations | default dict)) -}}
{{- $_ := set $t.spec.template "metadata" $meta -}}
{{- end -}}
{{ toYaml $t }}
{{- end -}}
