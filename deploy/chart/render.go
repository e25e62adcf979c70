// Package chart renders the Helm chart in deploy/helm/toolgate as
// `helm template` does, with Helm's own Go packages at the version pinned
// in deploy/go.mod, and decodes what it renders strictly into the
// Kubernetes API types, refusing unknown fields.
package chart

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// kubeVersion is the cluster version rendered for: the oldest the chart
// supports (Chart.yaml kubeVersion), whose API the manifests must fit.
func kubeVersion() *chartutil.KubeVersion {
	return &chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}
}

// Release names one rendering: the release, its namespace and the values
// files applied in order over the chart's values.yaml.
type Release struct {
	Name       string
	Namespace  string
	ValueFiles []string
	// Values are applied last, over the files (as --set-json would).
	Values map[string]any
}

// values merges r's values files and Values, the later over the earlier.
func (r Release) values() (map[string]any, error) {
	merged := map[string]any{}
	for _, f := range r.ValueFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("values %s: %w", f, err)
		}
		merged = chartutil.MergeTables(v.AsMap(), merged)
	}
	// Helm writes into the values it is given: a copy keeps r.Values
	// (and whatever it shares with other releases) as it was.
	own, err := deepCopy(r.Values)
	if err != nil {
		return nil, err
	}
	return chartutil.MergeTables(own, merged), nil
}

// deepCopy copies v through JSON, which is also how Helm reads
// --set-json: numbers become float64.
func deepCopy(v map[string]any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	return out, nil
}

// Render renders the chart in dir for r, as `helm template` would, and
// returns the manifest: YAML documents separated by "---" lines. The
// chart's values.schema.json is applied to the merged values.
func Render(ctx context.Context, dir string, r Release) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	vals, err := r.values()
	if err != nil {
		return "", err
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = r.Name, r.Namespace
	install.DisableHooks = true
	install.KubeVersion = kubeVersion()
	rel, err := install.RunWithContext(ctx, ch, vals)
	if err != nil {
		return "", fmt.Errorf("render chart: %w", err)
	}
	return rel.Manifest, nil
}

// Lint runs `helm lint --strict` on the chart in dir with r's values: a
// warning fails as an error does.
func Lint(dir string, r Release) error {
	vals, err := r.values()
	if err != nil {
		return err
	}
	l := action.NewLint()
	l.Strict, l.Namespace, l.KubeVersion = true, r.Namespace, kubeVersion()
	res := l.Run([]string{dir}, vals)
	return errors.Join(res.Errors...)
}

// decoder decodes the kinds of k8s.io/api and the Prometheus operator's
// monitoring.coreos.com/v1, strictly: an unknown or duplicated field is an
// error, not a field silently dropped.
func decoder() (runtime.Decoder, error) {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer(), nil
}

// Decode splits manifest into its documents and decodes each strictly
// into its Kubernetes type. An empty document is skipped; one of a kind
// the scheme does not know is an error.
func Decode(manifest string) ([]runtime.Object, error) {
	dec, err := decoder()
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var objs []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split manifest: %w", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w\n%s", gvk, err, doc)
		}
		objs = append(objs, obj)
	}
}

// stripComments drops the comment lines of a YAML document, so that a
// document of comments alone counts as empty.
func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}
