{{/* Names. */}}
{{- define "toolgate.name" -}}toolgate{{- end -}}

{{- define "toolgate.fullname" -}}
{{- if contains "toolgate" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-toolgate" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.selectorLabels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "toolgate.labels" -}}
{{ include "toolgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "toolgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "toolgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Where the pod sees its files. */}}
{{- define "toolgate.configDir" -}}/etc/toolgate/config{{- end -}}
{{- define "toolgate.policyDir" -}}/etc/toolgate/policies{{- end -}}
{{- define "toolgate.tlsDir" -}}/etc/toolgate/tls{{- end -}}
{{- define "toolgate.dataDir" -}}/var/lib/toolgate{{- end -}}
{{- define "toolgate.signingKeyFile" -}}/var/lib/toolgate/signing.pem{{- end -}}

{{/* The front doors that are on: name in the config, values key, port. */}}
{{- define "toolgate.doors" -}}
{{- $doors := list -}}
{{- range $key, $name := dict "mcp" "mcp" "tpmjs" "tpmjs" "agentSpaces" "agent_spaces" -}}
{{- $d := index $.Values.frontDoors $key -}}
{{- if $d.enabled -}}
{{- $doors = append $doors (dict "name" $name "key" $key "port" $d.port "settings" $d.settings "port_name" ($name | replace "_" "-")) -}}
{{- end -}}
{{- end -}}
{{- toJson $doors -}}
{{- end -}}

{{/* Environment variables from Secrets: name, secret, key. */}}
{{- define "toolgate.secretEnv" -}}
{{- $env := list -}}
{{- range $i, $k := .Values.auth.keys -}}
{{- if $k.secret -}}
{{- $env = append $env (dict "name" (printf "TOOLGATE_API_KEY_%d" $i) "secretName" $k.secret.name "key" $k.secret.key) -}}
{{- end -}}
{{- end -}}
{{- with .Values.evidence.credentials -}}
{{- if .secretName -}}
{{- $env = append $env (dict "name" "AWS_ACCESS_KEY_ID" "secretName" .secretName "key" .accessKeyIdKey) -}}
{{- $env = append $env (dict "name" "AWS_SECRET_ACCESS_KEY" "secretName" .secretName "key" .secretAccessKeyKey) -}}
{{- end -}}
{{- end -}}
{{- with .Values.evidence.sharedMacKey -}}
{{- if .secretName -}}
{{- $env = append $env (dict "name" "TOOLGATE_SHARED_MAC_KEY" "secretName" .secretName "key" .key) -}}
{{- end -}}
{{- end -}}
{{- with .Values.approvals.webhook -}}
{{- if .url -}}
{{- $env = append $env (dict "name" "TOOLGATE_APPROVAL_HMAC" "secretName" (required "approvals.webhook.secret.name: the webhook's HMAC secret comes from a Secret" .secret.name) "key" .secret.key) -}}
{{- end -}}
{{- end -}}
{{- range .Values.secretEnv -}}
{{- $env = append $env (dict "name" .name "secretName" .secretName "key" .key) -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* The gateway's configuration file, as the ConfigMap holds it. */}}
{{- define "toolgate.config" -}}
{{- $v := .Values -}}
{{- if not $v.evidence.url -}}{{- fail "evidence.url: the bucket every replica shares (s3://BUCKET/PREFIX?…)" -}}{{- end -}}
{{- if not $v.signing.secretName -}}{{- fail "signing.secretName: the Secret holding each pod's signing key (<pod name>.pem)" -}}{{- end -}}
{{- if ne (len $v.signing.publicKeys) (int $v.replicaCount) -}}
{{- fail (printf "signing.publicKeys: %d given for %d replicas; list every replica's public key, so that each trusts the others" (len $v.signing.publicKeys) (int $v.replicaCount)) -}}
{{- end -}}
{{- if and (gt (int $v.replicaCount) 1) (not $v.evidence.sharedMacKey.secretName) -}}
{{- fail "evidence.sharedMacKey.secretName: replicas need a MAC key they share, from a Secret" -}}
{{- end -}}
{{- if and (not $v.tls.enabled) (not $v.tls.allowPlaintext) -}}
{{- fail "tls: set tls.enabled with tls.secretName, or tls.allowPlaintext when a mesh or proxy in front terminates TLS" -}}
{{- end -}}
{{- if and $v.tls.enabled (not $v.tls.secretName) -}}{{- fail "tls.secretName: the kubernetes.io/tls Secret of the gRPC listener" -}}{{- end -}}
{{- if eq (len $v.auth.keys) 0 -}}{{- fail "auth.keys: a gateway reachable from other pods needs API keys" -}}{{- end -}}
{{- $cfg := deepCopy $v.config -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int $v.ports.grpc)) -}}
{{- $tls := dict "allow_plaintext" (and (not $v.tls.enabled) $v.tls.allowPlaintext) -}}
{{- if $v.tls.enabled -}}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" (include "toolgate.tlsDir" .)) -}}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" (include "toolgate.tlsDir" .)) -}}
{{- end -}}
{{- $_ := set $cfg "tls" $tls -}}
{{- $keys := list -}}
{{- range $i, $k := $v.auth.keys -}}
{{- $key := dict "caller" $k.caller -}}
{{- if $k.secret -}}{{- $_ := set $key "env" (printf "TOOLGATE_API_KEY_%d" $i) -}}{{- else -}}{{- $_ := set $key "sha256" (required (printf "auth.keys[%d]: give sha256 or secret" $i) $k.sha256) -}}{{- end -}}
{{- with $k.groups -}}{{- $_ := set $key "groups" . -}}{{- end -}}
{{- with $k.roles -}}{{- $_ := set $key "roles" . -}}{{- end -}}
{{- $keys = append $keys $key -}}
{{- end -}}
{{- $_ := set $cfg "auth" (dict "keys" $keys) -}}
{{- $pol := default dict $cfg.policies -}}
{{- $_ := set $pol "dir" (include "toolgate.policyDir" .) -}}
{{- $_ := set $cfg "policies" $pol -}}
{{- $ev := dict "url" $v.evidence.url "spool_dir" (printf "%s/spool" (include "toolgate.dataDir" .)) -}}
{{- $_ := set $ev "signing_key" (dict "file" (include "toolgate.signingKeyFile" .)) -}}
{{- $_ := set $ev "trusted_keys" $v.signing.publicKeys -}}
{{- if $v.evidence.sharedMacKey.secretName -}}{{- $_ := set $ev "shared_mac_key" (dict "env" "TOOLGATE_SHARED_MAC_KEY") -}}{{- end -}}
{{- with $v.evidence.objectLock -}}{{- $_ := set $ev "object_lock" . -}}{{- end -}}
{{- range $k, $x := (default dict $cfg.evidence) -}}{{- if not (hasKey $ev $k) -}}{{- $_ := set $ev $k $x -}}{{- end -}}{{- end -}}
{{- $_ := set $cfg "evidence" $ev -}}
{{- $_ := set $cfg "admin" (dict "listen" (printf "0.0.0.0:%d" (int $v.ports.admin)) "allow_non_loopback" true) -}}
{{- $doors := dict -}}
{{- range (include "toolgate.doors" . | fromJsonArray) -}}
{{- $d := deepCopy (default dict .settings) -}}
{{- $_ := set $d "listen" (printf "0.0.0.0:%d" (int .port)) -}}
{{- $_ := set $doors .name $d -}}
{{- end -}}
{{- if $doors -}}{{- $_ := set $cfg "front_doors" $doors -}}{{- end -}}
{{- $drivers := default dict $cfg.drivers -}}
{{- if $v.workspace.enabled -}}
{{- $ws := dict "type" "workspace" "root" (printf "%s/workspace" (include "toolgate.dataDir" .)) "sandbox" $v.workspace.sandbox -}}
{{- if eq $v.workspace.sandbox "none" -}}{{- $_ := set $ws "allow_unsandboxed" $v.workspace.allowUnsandboxed -}}{{- else -}}{{- $_ := set $ws "network" $v.workspace.network -}}{{- end -}}
{{- range $k, $x := (default dict $drivers.workspace) -}}{{- if not (hasKey $ws $k) -}}{{- $_ := set $ws $k $x -}}{{- end -}}{{- end -}}
{{- $_ := set $drivers "workspace" $ws -}}
{{- end -}}
{{- if $drivers -}}{{- $_ := set $cfg "drivers" $drivers -}}{{- end -}}
{{- $ap := default dict $cfg.approvals -}}
{{- $_ := set $ap "ttl" $v.approvals.ttl -}}
{{- if $v.approvals.webhook.url -}}
{{- $_ := set $ap "webhook" (dict "url" $v.approvals.webhook.url "secret" (dict "env" "TOOLGATE_APPROVAL_HMAC")) -}}
{{- end -}}
{{- $_ := set $cfg "approvals" $ap -}}
{{- $redact := default dict $cfg.redact -}}
{{- $names := default list $redact.secrets_env -}}
{{- range (include "toolgate.secretEnv" . | fromJsonArray) -}}
{{- if not (has .name $names) -}}{{- $names = append $names .name -}}{{- end -}}
{{- end -}}
{{- $_ := set $redact "secrets_env" $names -}}
{{- $_ := set $cfg "redact" $redact -}}
{{- $_ := unset $cfg "instance" -}}
# Rendered by the toolgate chart; the instance name comes from the pod
# (--instance), the signing key from its own Secret key.
{{ toYaml $cfg }}
{{- end -}}
