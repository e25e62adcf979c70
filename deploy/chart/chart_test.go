package chart

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	release   = "prod"
	podPrefix = "prod-toolgate"
)

// testCluster holds the Secrets a release of baseValues names.
func testCluster(t *testing.T, keys replicaKeys) cluster {
	t.Helper()
	return cluster{secrets: map[string]map[string][]byte{
		"toolgate-signing":  keys.secret,
		"toolgate-api-keys": {"orchestrator": []byte("tg-api-key-0123456789abcdef-never-in-a-manifest")},
		"toolgate-s3":       {"AWS_ACCESS_KEY_ID": []byte("AKIAEXAMPLEKEYID0001"), "AWS_SECRET_ACCESS_KEY": []byte("s3-secret-never-in-a-manifest-0123456789")},
		"toolgate-mac":      {"shared-mac-key": []byte("shared-mac-key-never-in-a-manifest-0123456789")},
		"toolgate-webhook":  {"hmac": []byte("webhook-hmac-never-in-a-manifest")},
		"toolgate-tls":      selfSigned(t),
	}}
}

// baseValues are the values every release needs: the bucket, the Secrets
// and the replicas' public keys.
func baseValues(keys replicaKeys) map[string]any {
	return map[string]any{
		"evidence": map[string]any{
			"url":          "s3://evidence/prod?region=auto&endpoint=https://account.r2.cloudflarestorage.com",
			"credentials":  map[string]any{"secretName": "toolgate-s3"},
			"sharedMacKey": map[string]any{"secretName": "toolgate-mac"},
		},
		"signing": map[string]any{"secretName": "toolgate-signing", "publicKeys": keys.public},
		"auth": map[string]any{"keys": []any{
			map[string]any{"caller": "orchestrator", "groups": []any{"ops"}, "secret": map[string]any{"name": "toolgate-api-keys", "key": "orchestrator"}},
			map[string]any{"caller": "ci", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
		}},
		"tls": map[string]any{"allowPlaintext": true},
	}
}

// with returns base with over merged in, over winning.
func with(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = with(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func selfSigned(t *testing.T) map[string][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolgate"},
		DNSNames: []string{"prod-toolgate"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// TestChartRendersStrictly renders the chart for several values, runs
// helm lint --strict on each, decodes every manifest strictly into the
// Kubernetes API types, checks what the pods run as and are probed on,
// and has `toolgate check config` accept the configuration a pod gets,
// materialised as the kubelet would mount it.
func TestChartRendersStrictly(t *testing.T) {
	keys := newReplicaKeys(t, podPrefix, 3)
	c := testCluster(t, keys)
	base := baseValues(keys)
	cases := []struct {
		name  string
		over  map[string]any
		kinds []string // beyond the ones every release has
		check func(t *testing.T, sts *appsv1.StatefulSet, objs []runtime.Object)
	}{
		{name: "defaults", check: func(t *testing.T, sts *appsv1.StatefulSet, _ []runtime.Object) {
			pod := sts.Spec.Template.Spec
			if pod.HostUsers != nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("without the shell sandbox the pod keeps the host's users and RuntimeDefault seccomp: hostUsers %v, seccomp %v",
					pod.HostUsers, pod.SecurityContext.SeccompProfile.Type)
			}
		}},
		{name: "TLS on", over: map[string]any{"tls": map[string]any{"enabled": true, "secretName": "toolgate-tls", "allowPlaintext": false}}},
		{name: "sandbox off", over: map[string]any{"workspace": map[string]any{"enabled": true, "sandbox": "none", "allowUnsandboxed": true}}},
		{name: "sandbox on", over: map[string]any{"workspace": map[string]any{"enabled": true, "sandbox": "namespaces"}},
			check: func(t *testing.T, sts *appsv1.StatefulSet, _ []runtime.Object) {
				pod := sts.Spec.Template.Spec
				sc := pod.Containers[0].SecurityContext
				if pod.HostUsers == nil || *pod.HostUsers || sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount {
					t.Errorf("the shell sandbox needs a pod user namespace and an unmasked /proc: hostUsers %v, procMount %v", pod.HostUsers, sc.ProcMount)
				}
			}},
		{name: "ServiceMonitor on", kinds: []string{"ServiceMonitor", "PrometheusRule"}, over: map[string]any{
			"serviceMonitor": map[string]any{"enabled": true},
			"prometheusRule": map[string]any{"enabled": true},
			"frontDoors": map[string]any{"mcp": map[string]any{"enabled": true}, "tpmjs": map[string]any{"enabled": true},
				"agentSpaces": map[string]any{"enabled": true}},
			"approvals": map[string]any{"webhook": map[string]any{"url": "https://hooks.example/toolgate", "secret": map[string]any{"name": "toolgate-webhook"}}},
		}, check: checkMonitoring},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := Release{Name: release, Namespace: "toolgate", Values: with(base, tc.over)}
			if err := Lint(chartDir, r); err != nil {
				t.Fatalf("helm lint --strict: %v", err)
			}
			manifest, objs := render(t, r)
			want := append([]string{"ConfigMap", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "Service", "Service", "ServiceAccount", "StatefulSet"}, tc.kinds...)
			if got := kinds(objs); !slices.Equal(got, sorted(want)) {
				t.Errorf("rendered kinds %v, want %v", got, sorted(want))
			}
			for name, data := range c.secrets {
				for key, v := range data {
					if bytes.Contains([]byte(manifest), bytes.TrimSpace(v)) {
						t.Errorf("the manifest holds the value of Secret %s key %s", name, key)
					}
				}
			}
			checkNames(t, objs)
			sts, _ := statefulSet(t, objs)
			checkPod(t, sts)
			checkConfig(t, c, objs)
			if tc.check != nil {
				tc.check(t, sts, objs)
			}
		})
	}
}

// checkNames applies the API server's rules for names the strict decoder
// does not check: object names, and port names (at most 15 characters),
// which a Service's targetPort and a NetworkPolicy refer to.
func checkNames(t *testing.T, objs []runtime.Object) {
	t.Helper()
	for _, o := range objs {
		meta, err := apimeta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range validation.IsDNS1123Subdomain(meta.GetName()) {
			t.Errorf("%T %s: %s", o, meta.GetName(), msg)
		}
		var ports []string
		switch o := o.(type) {
		case *corev1.Service:
			for _, msg := range validation.IsDNS1035Label(o.Name) {
				t.Errorf("Service %s: %s", o.Name, msg)
			}
			for _, p := range o.Spec.Ports {
				ports = append(ports, p.Name, p.TargetPort.String())
			}
		case *appsv1.StatefulSet:
			for _, p := range o.Spec.Template.Spec.Containers[0].Ports {
				ports = append(ports, p.Name)
			}
		}
		for _, name := range ports {
			for _, msg := range validation.IsValidPortName(name) {
				t.Errorf("%T %s: port %q: %s", o, meta.GetName(), name, msg)
			}
		}
	}
}

func kinds(objs []runtime.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetObjectKind().GroupVersionKind().Kind)
	}
	return sorted(out)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// checkPod checks what the pod runs as, where it is probed, and that its
// instance name is its pod name.
func checkPod(t *testing.T, sts *appsv1.StatefulSet) {
	t.Helper()
	pod := sts.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want non-root with a numeric user", psc)
	}
	ctr := pod.Containers[0]
	sc := ctr.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root file system is writable")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation is allowed")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v: want drop ALL, add none", sc.Capabilities)
	}
	probes := map[string]*corev1.Probe{"/healthz": ctr.LivenessProbe, "/readyz": ctr.ReadinessProbe}
	for path, p := range probes {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "admin" {
			t.Errorf("probe of %s: %+v, want an HTTP GET of %s on the admin port", path, p, path)
		}
	}
	if !slices.Contains(ctr.Args, "--instance=$(POD_NAME)") {
		t.Errorf("args %q: the instance name must be the pod's", ctr.Args)
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil && e.Name != "TMPDIR" {
			t.Errorf("env %s has a literal value; secrets come from Secrets", e.Name)
		}
	}
	if sts.Spec.Template.Spec.AutomountServiceAccountToken == nil || *sts.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it never uses")
	}
}

// checkConfig materialises pod 0 and runs `toolgate check config` on the
// configuration file it mounts, with its environment.
func checkConfig(t *testing.T, c cluster, objs []runtime.Object) {
	t.Helper()
	p := c.materialise(t, objs, 0, t.TempDir())
	cfg := configArg(t, p)
	if err := os.MkdirAll(p.workDir, 0o770); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runTool(t, p.workDir, p.env, "check", "config", cfg)
	if code != 0 {
		text, _ := os.ReadFile(cfg)
		t.Fatalf("toolgate check config: exit %d\n%s%s\nconfiguration:\n%s", code, out, stderr, text)
	}
	t.Log(strings.TrimSpace(out))
}

// configArg is the --config file of the pod's arguments.
func configArg(t *testing.T, p *pod) string {
	t.Helper()
	for _, a := range p.args {
		if f, ok := strings.CutPrefix(a, "--config="); ok {
			return f
		}
	}
	t.Fatalf("args %q name no --config", p.args)
	return ""
}

// checkMonitoring checks that the PrometheusRule carries operate/'s alert
// rules, every group and rule of them.
func checkMonitoring(t *testing.T, _ *appsv1.StatefulSet, objs []runtime.Object) {
	t.Helper()
	var file struct {
		Groups []struct {
			Name  string           `yaml:"name"`
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	data, err := os.ReadFile("../../operate/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		pr, ok := o.(*monitoringv1.PrometheusRule)
		if !ok {
			continue
		}
		if len(pr.Spec.Groups) != len(file.Groups) {
			t.Fatalf("PrometheusRule has %d groups, alerts.yml %d", len(pr.Spec.Groups), len(file.Groups))
		}
		for i, g := range pr.Spec.Groups {
			if g.Name != file.Groups[i].Name || len(g.Rules) != len(file.Groups[i].Rules) {
				t.Errorf("group %d: %s with %d rules, alerts.yml has %s with %d", i, g.Name, len(g.Rules), file.Groups[i].Name, len(file.Groups[i].Rules))
			}
			for j, r := range g.Rules {
				if r.Expr.String() == "" || r.Alert != file.Groups[i].Rules[j]["alert"] {
					t.Errorf("group %s rule %d: %s, want %v", g.Name, j, r.Alert, file.Groups[i].Rules[j]["alert"])
				}
			}
		}
		return
	}
	t.Fatal("no PrometheusRule rendered")
}

// TestChartAlertsMatchOperate keeps the chart's copy of the alert rules
// the same as operate/prometheus/alerts.yml, which promtool tests.
func TestChartAlertsMatchOperate(t *testing.T) {
	t.Parallel()
	chart, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	operate, err := os.ReadFile("../../operate/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chart, operate) {
		t.Fatal("deploy/helm/toolgate/files/alerts.yml differs from operate/prometheus/alerts.yml: copy it over")
	}
}

// TestChartRefusesHostileValues: values that would bake a secret into the
// chart, take a key the chart owns, leave replicas distrusting each other
// or turn a safety off without saying so are refused at render time, by
// values.schema.json or the templates, never rendered.
func TestChartRefusesHostileValues(t *testing.T) {
	keys := newReplicaKeys(t, podPrefix, 3)
	base := baseValues(keys)
	privatePEM := string(keys.secret[podPrefix+"-0.pem"])
	cases := []struct {
		name string
		over map[string]any
		want string
	}{
		{"a private key pasted as a public key", map[string]any{"signing": map[string]any{"publicKeys": []any{privatePEM, keys.public[1], keys.public[2]}}}, "publicKeys"},
		{"fewer public keys than replicas", map[string]any{"signing": map[string]any{"publicKeys": keys.public[:2]}}, "2 given for 3 replicas"},
		{"a misspelt top-level key", map[string]any{"replicas": 5}, "replicas"},
		{"the instance set for every replica", map[string]any{"config": map[string]any{"instance": "one-for-all"}}, "'instance'"},
		{"an API key with neither digest nor Secret", map[string]any{"auth": map[string]any{"keys": []any{map[string]any{"caller": "x"}}}}, "auth"},
		{"an API key given in clear", map[string]any{"auth": map[string]any{"keys": []any{map[string]any{"caller": "x", "key": "tg-plain"}}}}, "key"},
		{"no API keys", map[string]any{"auth": map[string]any{"keys": []any{}}}, "auth.keys"},
		{"evidence on the pod's disk", map[string]any{"evidence": map[string]any{"url": "file:///var/lib/toolgate/evidence"}}, "url"},
		{"no bucket", map[string]any{"evidence": map[string]any{"url": ""}}, "evidence.url"},
		{"replicas without a shared MAC key", map[string]any{"evidence": map[string]any{"sharedMacKey": map[string]any{"secretName": ""}}}, "sharedMacKey"},
		{"plaintext without saying so", map[string]any{"tls": map[string]any{"allowPlaintext": false}}, "tls"},
		{"TLS without its Secret", map[string]any{"tls": map[string]any{"enabled": true}}, "secretName"},
		{"an unsandboxed shell without saying so", map[string]any{"workspace": map[string]any{"enabled": true, "sandbox": "none"}}, "allowUnsandboxed"},
		{"a door's listen address", map[string]any{"frontDoors": map[string]any{"mcp": map[string]any{"enabled": true, "port": 8788, "settings": map[string]any{"listen": "0.0.0.0:1"}}}}, "settings"},
		{"an image by a malformed digest", map[string]any{"image": map[string]any{"digest": "sha256:zz"}}, "digest"},
		{"a secret variable with a hostile name", map[string]any{"secretEnv": []any{map[string]any{"name": "X=1\nY", "secretName": "s", "key": "k"}}}, "name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Render(t.Context(), chartDir, Release{Name: release, Namespace: "toolgate", Values: with(base, tc.over)})
			if err == nil {
				t.Fatalf("rendered; want it refused (%s)", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused with %v; want the message to name %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "BEGIN PRIVATE KEY") || strings.Contains(err.Error(), "PRIVATE KEY-----\n") {
				t.Error("the refusal quotes the private key")
			}
		})
	}
}

// TestDecodeIsStrict: a manifest with a field the API type does not have,
// or a field twice, is refused, so a typo in a template cannot pass as a
// field the cluster would drop.
func TestDecodeIsStrict(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, doc string }{
		{"unknown field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: 1}]\n  selectr: {a: b}\n"},
		{"misplaced field", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: i, readOnlyRootFilesystem: true}]\n"},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n"},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: x}\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Decode(tc.doc); err == nil {
				t.Fatal("decoded; want it refused")
			}
		})
	}
	if objs, err := Decode("# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"); err != nil || len(objs) != 1 {
		t.Fatalf("a valid manifest: %d objects, %v", len(objs), err)
	}
}
