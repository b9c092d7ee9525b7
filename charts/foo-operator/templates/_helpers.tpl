{{/*
Names, labels and the TLS material every template shares. Anything two templates need is
defined here once (the caBundle above all: four objects carry it and they must agree).
*/}}

{{- define "foo-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped base name; the release name alone when it already contains the chart's. */}}
{{- define "foo-operator.fullname" -}}
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

{{- define "foo-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "foo-operator.labels" -}}
helm.sh/chart: {{ include "foo-operator.chart" . }}
app.kubernetes.io/name: {{ include "foo-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: foo-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: call with (dict "root" $ "component" "webhook"). */}}
{{- define "foo-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "foo-operator.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "foo-operator.componentLabels" -}}
{{ include "foo-operator.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "foo-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ object names */}}

{{- define "foo-operator.webhookName" -}}
{{- printf "%s-webhook" (include "foo-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "foo-operator.controllerName" -}}
{{- printf "%s-controller" (include "foo-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "foo-operator.insightsName" -}}
{{- printf "%s-insights" (include "foo-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Service the apiserver calls for admission and conversion. */}}
{{- define "foo-operator.webhookServiceName" -}}
{{- include "foo-operator.webhookName" . }}
{{- end }}

{{/* Both admission configurations share this name (webhook/manifests.py: "foo-operator"). */}}
{{- define "foo-operator.admissionConfigurationName" -}}
{{- include "foo-operator.fullname" . }}
{{- end }}

{{- define "foo-operator.crdName" -}}
foos.samplecontroller.k8s.io
{{- end }}

{{- define "foo-operator.apiServiceName" -}}
v1alpha1.insights.samplecontroller.k8s.io
{{- end }}

{{- define "foo-operator.webhookServiceAccountName" -}}
{{- if .Values.serviceAccount.webhook.create }}
{{- default (include "foo-operator.webhookName" .) .Values.serviceAccount.webhook.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.webhook.name }}
{{- end }}
{{- end }}

{{- define "foo-operator.insightsServiceAccountName" -}}
{{- if .Values.serviceAccount.insights.create }}
{{- default (include "foo-operator.insightsName" .) .Values.serviceAccount.insights.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.insights.name }}
{{- end }}
{{- end }}

{{- define "foo-operator.controllerServiceAccountName" -}}
{{- if .Values.serviceAccount.controller.create }}
{{- default (include "foo-operator.controllerName" .) .Values.serviceAccount.controller.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.controller.name }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ admission */}}

{{/*
One admission webhook's settings (call with (dict "root" $ "hook" "mutating")): webhook.<hook>'s
failurePolicy, timeoutSeconds, namespaceSelector and objectSelector where set, else the shared
webhook.* value. As YAML, for fromYaml.
*/}}
{{- define "foo-operator.admissionSettings" -}}
{{- $webhook := .root.Values.webhook -}}
{{- $own := index $webhook .hook | default dict -}}
failurePolicy: {{ $own.failurePolicy | default $webhook.failurePolicy }}
timeoutSeconds: {{ $own.timeoutSeconds | default $webhook.timeoutSeconds }}
namespaceSelector: {{ $own.namespaceSelector | default $webhook.namespaceSelector | toJson }}
objectSelector: {{ $own.objectSelector | default $webhook.objectSelector | toJson }}
{{- end }}

{{/* The shorter admission timeout: the webhook's own deadline must beat both (--admission-timeout-seconds). */}}
{{- define "foo-operator.admissionTimeoutSeconds" -}}
{{- $mutating := include "foo-operator.admissionSettings" (dict "root" . "hook" "mutating") | fromYaml -}}
{{- $validating := include "foo-operator.admissionSettings" (dict "root" . "hook" "validating") | fromYaml -}}
{{- min (int $mutating.timeoutSeconds) (int $validating.timeoutSeconds) -}}
{{- end }}

{{/* ------------------------------------------------------------------ TLS */}}

{{/*
The Secret the serving certificate is in: the user's in existingSecret mode; in generated mode a
kubernetes.io/tls Secret of its own name; else (certManager, rotator) `<webhook>-tls`. generated has
a name of its own because a Secret's type never changes: rotator's is Opaque, so a release switched
from generated to rotator needs a new Secret, not the old one turned Opaque.
*/}}
{{- define "foo-operator.tlsSecretName" -}}
{{- if eq .Values.tls.mode "existingSecret" }}
{{- include "foo-operator.checkExistingSecret" . }}
{{- .Values.tls.existingSecret.name }}
{{- else if eq .Values.tls.mode "generated" }}
{{- printf "%s-generated-tls" (include "foo-operator.webhookName" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- include "foo-operator.webhookTLSSecretName" . }}
{{- end }}
{{- end }}

{{/* certManager's and rotator's Secret; generated mode's too, in charts up to 0.2.0. */}}
{{- define "foo-operator.webhookTLSSecretName" -}}
{{- printf "%s-tls" (include "foo-operator.webhookName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The live Secret `name` if this release's Helm made it (meta.helm.sh/release-name), else {}. */}}
{{- define "foo-operator.ownSecret" -}}
{{- $secret := lookup "v1" "Secret" .root.Release.Namespace .name | default dict }}
{{- if eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $secret) .root.Release.Name }}
{{- toJson $secret }}
{{- else }}
{{- "{}" }}
{{- end }}
{{- end }}

{{/*
tls.mode=rotator over `<webhook>-tls` of another type (generated mode of a chart up to 0.2.0, or
cert-manager's): the rotator's Opaque Secret cannot replace it in place. Refused here, saying what
to do, rather than by the apiserver halfway through the upgrade. A lookup that only refuses:
without a cluster (helm template, Argo CD) nothing renders differently.
*/}}
{{- define "foo-operator.checkRotatorSecret" -}}
{{- $name := include "foo-operator.webhookTLSSecretName" . }}
{{- $live := lookup "v1" "Secret" .Release.Namespace $name | default dict }}
{{- if and $live (ne ($live.type | default "Opaque") "Opaque") }}
{{- if eq (include "foo-operator.ownSecret" (dict "root" . "name" $name)) "{}" }}
{{- fail (printf "tls.mode=rotator: Secret %s/%s exists with type %s (made by cert-manager or by hand), and a Secret's type never changes: delete it, then upgrade again" .Release.Namespace $name $live.type) }}
{{- else }}
{{- fail (printf "tls.mode=rotator: Secret %s/%s is generated mode's kubernetes.io/tls Secret of an older chart, and a Secret's type never changes: upgrade to this chart with tls.mode=generated first (it moves the certificate to %s-generated-tls), then switch to rotator" .Release.Namespace $name (include "foo-operator.webhookName" .)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* tls.mode=existingSecret needs both settings; say which are missing, all at once. */}}
{{- define "foo-operator.checkExistingSecret" -}}
{{- $missing := list }}
{{- if not .Values.tls.existingSecret.name }}
{{- $missing = append $missing "tls.existingSecret.name (a kubernetes.io/tls Secret in the release namespace)" }}
{{- end }}
{{- if not (trim .Values.tls.existingSecret.caBundle) }}
{{- $missing = append $missing "tls.existingSecret.caBundle (the CA that signed it, PEM or base64: --set-file tls.existingSecret.caBundle=ca.crt)" }}
{{- end }}
{{- if $missing }}
{{- fail (printf "tls.mode=existingSecret needs %s" (join " and " $missing)) }}
{{- end }}
{{- end }}

{{- define "foo-operator.certificateName" -}}
{{- include "foo-operator.webhookName" . }}
{{- end }}

{{/* certManager mode without an issuerRef: the chart's own CA (Certificate, its Secret, its Issuer). */}}
{{- define "foo-operator.caCertificateName" -}}
{{- include "foo-operator.webhookName" . }}-ca
{{- end }}

{{/*
Where cainjector reads every caBundle from: the CA Certificate, so serving-certificate renewals
never move a caBundle; with your own issuerRef, the serving Certificate (its Secret's ca.crt is
your issuer's CA).
*/}}
{{- define "foo-operator.caSourceCertificateName" -}}
{{- if .Values.tls.certManager.issuerRef }}
{{- include "foo-operator.certificateName" . }}
{{- else }}
{{- include "foo-operator.caCertificateName" . }}
{{- end }}
{{- end }}

{{/*
Every name the apiserver may dial a Service by — the webhook's and, when installed, the insights
server's: both serve the one certificate, so one caBundle covers the four objects that carry it.
*/}}
{{- define "foo-operator.serviceDNSNames" -}}
{{- $ns := .Release.Namespace }}
{{- $names := list }}
{{- $services := list (include "foo-operator.webhookServiceName" .) }}
{{- if .Values.insights.enabled }}
{{- $services = append $services (include "foo-operator.insightsName" .) }}
{{- end }}
{{- range $svc := $services }}
{{- $names = concat $names (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $.Values.clusterDomain)) }}
{{- end }}
{{- $names | toJson }}
{{- end }}

{{/*
tls.mode=generated: {"ca.crt", "tls.crt", "tls.key"} (base64), computed ONCE per render.

On upgrade the Secret already in the cluster is reused (lookup), so neither the certificate nor
any caBundle changes on `helm upgrade`. On install (or `helm template`, where lookup sees
nothing) Helm makes a CA and a serving certificate. Templates render one after another over the
same .Values, so the result is cached there: a second genCA would produce a CA the first
caBundle does not match.
*/}}
{{- define "foo-operator.generatedTLS" -}}
{{- if not (hasKey .Values "__fooOperatorGeneratedTLS") }}
{{- $tls := dict }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "foo-operator.tlsSecretName" .) | default dict }}
{{- $data := dig "data" dict $existing }}
{{- if not (and (index $data "ca.crt") (index $data "tls.crt") (index $data "tls.key")) }}
{{- /* Upgrading from a chart up to 0.2.0: the same pair from the Secret it kept under the old name. */}}
{{- $old := include "foo-operator.ownSecret" (dict "root" . "name" (include "foo-operator.webhookTLSSecretName" .)) | fromJson }}
{{- if eq ($old.type | default "") "kubernetes.io/tls" }}
{{- $data = dig "data" dict $old }}
{{- end }}
{{- end }}
{{- if and (index $data "ca.crt") (index $data "tls.crt") (index $data "tls.key") }}
{{- $tls = pick $data "ca.crt" "tls.crt" "tls.key" }}
{{- else }}
{{- $ca := genCA (printf "%s-ca" (include "foo-operator.webhookName" .)) (int .Values.tls.generated.caDays) }}
{{- $cert := genSignedCert (include "foo-operator.webhookServiceName" .) nil (include "foo-operator.serviceDNSNames" . | fromJsonArray) (int .Values.tls.generated.certDays) $ca }}
{{- $tls = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__fooOperatorGeneratedTLS" $tls }}
{{- end }}
{{- get .Values "__fooOperatorGeneratedTLS" | toJson }}
{{- end }}

{{/*
The caBundle (base64 PEM) Helm writes into the CRD, both admission configurations and the
APIService — empty when someone else writes it (cert-manager's cainjector, or the rotator), so
the key is left out and `helm upgrade` never overwrites their value.
*/}}
{{- define "foo-operator.caBundle" -}}
{{- if eq .Values.tls.mode "generated" }}
{{- index (include "foo-operator.generatedTLS" . | fromJson) "ca.crt" }}
{{- else if eq .Values.tls.mode "existingSecret" }}
{{- include "foo-operator.checkExistingSecret" . }}
{{- $ca := .Values.tls.existingSecret.caBundle | trim }}
{{- if hasPrefix "-----BEGIN" $ca }}
{{- $ca | b64enc }}
{{- else }}
{{- $ca }}
{{- end }}
{{- end }}
{{- end }}

{{/* cert-manager's cainjector fills the caBundle of an object carrying this annotation. */}}
{{- define "foo-operator.caInjectionAnnotations" -}}
{{- if eq .Values.tls.mode "certManager" }}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "foo-operator.caSourceCertificateName" . }}
{{- end }}
{{- end }}

{{/* clientConfig.service of the admission webhooks; the CRD's is generated (hack/release/gen_crd.py). */}}
{{- define "foo-operator.webhookClientConfig" -}}
service:
  namespace: {{ .root.Release.Namespace }}
  name: {{ include "foo-operator.webhookServiceName" .root }}
  path: {{ .path }}
  port: {{ .root.Values.webhook.service.port }}
{{- with include "foo-operator.caBundle" .root }}
caBundle: {{ . }}
{{- end }}
{{- end }}

{{/*
Flags of the rotator mode (`python -m webhook --cert-rotation`): the service makes and rotates its
CA and certificate in the Secret, writes them to its own cert directory, and keeps caBundle
right in the four objects named here ('' skips one the chart does not install).
*/}}
{{- define "foo-operator.rotatorArgs" -}}
- --cert-rotation
- --namespace={{ .Release.Namespace }}
- --cert-secret={{ include "foo-operator.tlsSecretName" . }}
- --service={{ include "foo-operator.webhookServiceName" . }}
{{- range $name := include "foo-operator.serviceDNSNames" . | fromJsonArray }}
- --extra-dns={{ $name }}
{{- end }}
- --webhook-configuration={{ include "foo-operator.admissionConfigurationName" . }}
- --crd={{ if .Values.crd.install }}{{ include "foo-operator.crdName" . }}{{ end }}
- --apiservice={{ if .Values.insights.enabled }}{{ include "foo-operator.apiServiceName" . }}{{ end }}
- --ca-validity-days={{ .Values.tls.rotator.caDays }}
- --serving-validity-days={{ .Values.tls.rotator.certDays }}
- --rotation-lease={{ include "foo-operator.rotatorLeaseName" . }}
{{- end }}

{{/* The rotator's Lease, one per release (`--rotation-lease`). */}}
{{- define "foo-operator.rotatorLeaseName" -}}
{{ include "foo-operator.fullname" . | trunc 45 | trimSuffix "-" }}-cert-rotator
{{- end }}

{{/* ------------------------------------------------------------------ pods */}}

{{/*
Admission and conversion need no Kubernetes credentials; only the rotator does, and secure
metrics (a TokenReview and a SubjectAccessReview per scraper, cached).
*/}}
{{- define "foo-operator.webhookNeedsAPI" -}}
{{- if or (eq .Values.tls.mode "rotator") (include "foo-operator.metricsSecure" .) }}true{{ end }}
{{- end }}

{{/* ------------------------------------------------------------------ metrics and TLS flags */}}

{{- define "foo-operator.metricsSecure" -}}
{{- if and .Values.metrics.enabled .Values.metrics.secure }}true{{ end }}
{{- end }}

{{/* The port a component's /metrics listens on: (dict "root" $ "component" "insights").
metrics.port, or insights.metricsPort for the insights pods when set. */}}
{{- define "foo-operator.metricsPort" -}}
{{- if and (eq .component "insights") .root.Values.insights.metricsPort }}
{{- .root.Values.insights.metricsPort }}
{{- else }}
{{- .root.Values.metrics.port }}
{{- end }}
{{- end }}

{{/* The metrics flags every process takes (serving/lifecycle.py, controller/settings.py):
(dict "root" $ "component" "insights"). */}}
{{- define "foo-operator.metricsArgs" -}}
{{- if .root.Values.metrics.enabled }}
- --metrics-bind-address=:{{ include "foo-operator.metricsPort" . }}
{{- if .root.Values.metrics.secure }}
- --metrics-secure
{{- end }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
{{- end }}

{{/*
With hostNetwork on both, a webhook and an insights pod on one node bind their ports on the
node's one network namespace: any port both listen on (serving, probes or metrics) would leave the
second pod crash-looping on "address already in use". Refused at install, naming the ports.
*/}}
{{- define "foo-operator.checkHostNetworkPorts" -}}
{{- $v := .Values }}
{{- if and $v.webhook.hostNetwork $v.insights.enabled $v.insights.hostNetwork }}
{{- $webhook := dict (toString $v.webhook.containerPort) "webhook.containerPort" (toString $v.webhook.healthPort) "webhook.healthPort" }}
{{- $insights := dict (toString $v.insights.containerPort) "insights.containerPort" (toString $v.insights.healthPort) "insights.healthPort" }}
{{- if $v.metrics.enabled }}
{{- $_ := set $webhook (include "foo-operator.metricsPort" (dict "root" . "component" "webhook")) "metrics.port" }}
{{- $_ := set $insights (include "foo-operator.metricsPort" (dict "root" . "component" "insights")) (ternary "insights.metricsPort" "metrics.port" (not (empty $v.insights.metricsPort))) }}
{{- end }}
{{- range $port, $name := $insights }}
{{- if hasKey $webhook $port }}
{{- fail (printf "webhook.hostNetwork and insights.hostNetwork: a webhook and an insights pod on one node would both bind port %s on it (%s and %s); give the insights pods another port (insights.healthPort, insights.metricsPort or insights.containerPort), or turn metrics off" $port (get $webhook $port) $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The listener's TLS policy (webhook and insights). */}}
{{- define "foo-operator.tlsArgs" -}}
- --tls-min-version={{ .Values.tls.minVersion }}
{{- with .Values.tls.cipherSuites }}
- --tls-cipher-suites={{ join "," . }}
{{- end }}
{{- end }}

{{/* The container port /metrics listens on: (dict "root" $ "component" "insights"). */}}
{{- define "foo-operator.metricsContainerPort" -}}
{{- if .root.Values.metrics.enabled }}
- name: metrics
  containerPort: {{ include "foo-operator.metricsPort" . }}
  protocol: TCP
{{- end }}
{{- end }}

{{/* Soft anti-affinity between the replicas of one component: (dict "root" $ "component" "insights"). */}}
{{- define "foo-operator.softAntiAffinity" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "foo-operator.selectorLabels" . | fromYaml)) -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    {{- list (dict "weight" 100 "podAffinityTerm" $term) | toYaml | nindent 4 }}
{{- end }}

{{/*
A pod's affinity: `affinity` (the component's own, or the chart's default for it; a map, or empty)
with a required node affinity `kubernetes.io/arch In image.architectures` ANDed into each of its
nodeSelectorTerms (or a term of its own), so the pods land only on nodes the image runs on, and a
node of another architecture never sees "exec format error". image.architectures empty: no such term.
Values without the key (0.2.0's, kept by `helm upgrade --reuse-values`) get values.yaml's default,
the release image's (test_chart_upgrades holds the two equal).
Call with (dict "root" $ "affinity" <map>).
*/}}
{{- define "foo-operator.affinity" -}}
{{- $affinity := deepCopy (.affinity | default dict) }}
{{- $architectures := list "amd64" }}
{{- if hasKey .root.Values.image "architectures" }}
{{- $architectures = .root.Values.image.architectures }}
{{- end }}
{{- with $architectures }}
{{- $arch := dict "key" "kubernetes.io/arch" "operator" "In" "values" . }}
{{- $node := get $affinity "nodeAffinity" | default dict }}
{{- $required := get $node "requiredDuringSchedulingIgnoredDuringExecution" | default dict }}
{{- $terms := list }}
{{- range get $required "nodeSelectorTerms" | default (list dict) }}
{{- $terms = append $terms (merge (dict "matchExpressions" (append (get . "matchExpressions" | default list) $arch)) .) }}
{{- end }}
{{- $_ := set $required "nodeSelectorTerms" $terms }}
{{- $_ = set $node "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ = set $affinity "nodeAffinity" $node }}
{{- end }}
{{- with $affinity }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* A component's own `affinity`, else soft anti-affinity between its replicas, so a node's
drain or loss takes one of them, not all: (dict "root" $ "component" "controller"). */}}
{{- define "foo-operator.componentAffinity" -}}
{{- $own := (get .root.Values .component).affinity }}
{{- if $own }}
{{- toYaml $own }}
{{- else }}
{{- include "foo-operator.softAntiAffinity" . }}
{{- end }}
{{- end }}

{{- define "foo-operator.webhookAffinity" -}}
{{- if .Values.webhook.affinity }}
{{- toYaml .Values.webhook.affinity }}
{{- else if ne .Values.webhook.podAntiAffinity "none" }}
{{- $term := dict "topologyKey" .Values.webhook.podAntiAffinityTopologyKey "labelSelector" (dict "matchLabels" (include "foo-operator.selectorLabels" (dict "root" . "component" "webhook") | fromYaml)) -}}
podAntiAffinity:
{{- if eq .Values.webhook.podAntiAffinity "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    {{- list $term | toYaml | nindent 4 }}
{{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    {{- list (dict "weight" 100 "podAffinityTerm" $term) | toYaml | nindent 4 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The components with a /metrics listener, as a JSON list (fromJsonArray). */}}
{{- define "foo-operator.metricsComponents" -}}
{{- $components := list "webhook" }}
{{- if .Values.insights.enabled }}{{ $components = append $components "insights" }}{{ end }}
{{- if .Values.controller.enabled }}{{ $components = append $components "controller" }}{{ end }}
{{- toJson $components }}
{{- end }}

{{/* A component's metrics Service; Prometheus' `job` label for its targets. Call with (dict "root" $ "component" "webhook"). */}}
{{- define "foo-operator.metricsServiceName" -}}
{{- printf "%s-%s-metrics" (include "foo-operator.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* ------------------------------------------------------------------ per-component pod knobs */}}

{{/* The pod's securityContext: the component's podSecurityContext merged over the shared one, so
a platform that wants one more key on one component need not repeat the restricted defaults. */}}
{{- define "foo-operator.podSecurityContext" -}}
{{- $own := (get .root.Values .component).podSecurityContext | default dict }}
{{- toYaml (mergeOverwrite (deepCopy .root.Values.podSecurityContext) (deepCopy $own)) }}
{{- end }}

{{/* The container's securityContext, likewise (securityContext per component over the shared one). */}}
{{- define "foo-operator.containerSecurityContext" -}}
{{- $own := (get .root.Values .component).securityContext | default dict }}
{{- toYaml (mergeOverwrite (deepCopy .root.Values.securityContext) (deepCopy $own)) }}
{{- end }}

{{/* topologySpreadConstraints; one without a labelSelector gets the component's selector labels,
as the same default a Deployment-wide spread needs in nearly every case. */}}
{{- define "foo-operator.topologySpreadConstraints" -}}
{{- $selector := dict "matchLabels" (include "foo-operator.selectorLabels" . | fromYaml) }}
{{- $constraints := list }}
{{- range (get .root.Values .component).topologySpreadConstraints }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" $selector }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
{{- with $constraints }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* The Deployment's own metadata.labels and annotations: (dict "root" $ "component" "webhook"). */}}
{{- define "foo-operator.deploymentMetadata" -}}
{{- $values := get .root.Values .component }}
labels:
  {{- include "foo-operator.componentLabels" . | nindent 2 }}
  {{- with $values.deploymentLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $values.deploymentAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A Deployment's spec.strategy from a component's strategy value. values.yaml's surge-first
default is a map Helm merges yours into, so `{type: Recreate}` arrives with the default's
rollingUpdate too, which the apiserver refuses for Recreate: drop it there. */}}
{{- define "foo-operator.strategy" -}}
{{- if eq (.type | default "RollingUpdate") "Recreate" }}
{{- toYaml (omit . "rollingUpdate") }}
{{- else }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* A Service's labels and annotations: (dict "root" $ "component" "webhook" "service" .Values.webhook.service). */}}
{{- define "foo-operator.serviceMetadata" -}}
labels:
  {{- include "foo-operator.componentLabels" . | nindent 2 }}
  {{- with .service.labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .service.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The scheduling keys of a component's pod spec: priorityClassName is elsewhere (before the
containers, where it was); these come after volumes. */}}
{{- define "foo-operator.podPlacement" -}}
{{- $values := get .root.Values .component }}
{{- with include "foo-operator.topologySpreadConstraints" . }}
topologySpreadConstraints:
  {{- . | nindent 2 }}
{{- end }}
{{- with $values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The controller refuses timings out of this order at start; refused at install instead, so a
typo fails `helm upgrade` rather than crash-looping the new pod. */}}
{{- define "foo-operator.checkLeaderElection" -}}
{{- $le := .Values.controller.leaderElection }}
{{- if $le.enabled }}
{{- if not (and (gt (float64 $le.leaseDurationSeconds) (float64 $le.renewDeadlineSeconds)) (gt (float64 $le.renewDeadlineSeconds) (float64 $le.retryPeriodSeconds))) }}
{{- fail (printf "controller.leaderElection: leaseDurationSeconds (%v) must exceed renewDeadlineSeconds (%v), which must exceed retryPeriodSeconds (%v)" $le.leaseDurationSeconds $le.renewDeadlineSeconds $le.retryPeriodSeconds) }}
{{- end }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ how Prometheus scrapes */}}

{{/* The Secret the ServiceMonitors take a bearer token from; empty: Prometheus' own token file. */}}
{{- define "foo-operator.scrapeTokenSecretName" -}}
{{- $auth := .Values.metrics.serviceMonitor.authorization }}
{{- if $auth.secretName }}
{{- $auth.secretName }}
{{- else if $auth.createTokenSecret }}
{{- printf "%s-metrics-scraper" (include "foo-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* A scrape's tlsConfig: yours, else the serving certificate verified against the chart's CA (or
cert-manager's) for a name it carries. Every component serves the webhook's pair on its metrics
port (the controller mounts it for that), so the webhook Service's name verifies all three. */}}
{{- define "foo-operator.scrapeTLSConfig" -}}
{{- $sm := .root.Values.metrics.serviceMonitor }}
{{- if $sm.tlsConfig }}
{{- toYaml $sm.tlsConfig }}
{{- else }}
{{- $service := include "foo-operator.webhookServiceName" .root }}
{{- if eq .component "insights" }}{{ $service = include "foo-operator.insightsName" .root }}{{ end }}
serverName: {{ printf "%s.%s.svc" $service .root.Release.Namespace }}
ca:
  {{- if eq .root.Values.tls.mode "existingSecret" }}
  configMap:
    name: {{ include "foo-operator.metricsCAName" .root }}
    key: ca.crt
  {{- else }}
  secret:
    name: {{ include "foo-operator.tlsSecretName" .root }}
    {{- /* rotator: ca.crt is the issuing CA alone, and switches in the same write as tls.crt, a
    kubelet sync before the pods serve the new pair; ca-bundle.crt trusts old and new across the
    overlap, as every caBundle does (certs/rotation.py). */}}
    key: {{ eq .root.Values.tls.mode "rotator" | ternary "ca-bundle.crt" "ca.crt" }}
  {{- end }}
{{- end }}
{{- end }}

{{/* existingSecret mode: your Secret need not hold ca.crt, so the CA you gave goes in a ConfigMap. */}}
{{- define "foo-operator.metricsCAName" -}}
{{- printf "%s-metrics-ca" (include "foo-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The controller serves /metrics with the webhook's pair when the ServiceMonitor verifies it. */}}
{{- define "foo-operator.controllerMetricsCert" -}}
{{- if and (include "foo-operator.metricsSecure" .) .Values.metrics.serviceMonitor.enabled (not .Values.metrics.serviceMonitor.tlsConfig) }}true{{ end }}
{{- end }}
