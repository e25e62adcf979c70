package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// cluster is what a test's pretend cluster holds besides the rendered
// objects: the Secrets the chart's values name, by name and key.
type cluster struct {
	secrets map[string]map[string][]byte
}

// pod is one pod of the rendered StatefulSet materialised on this host
// the way the kubelet would start it, as far as a process without a
// container can be: its volumes as folders under root (ConfigMap and
// Secret volumes in the kubelet's layout of ..data links, subPathExpr
// mounts as the one file they select), its environment resolved from
// field references and Secrets, and its arguments expanded. Paths the pod
// sees at a mount point P are root+P here; the configuration file and the
// arguments are rewritten accordingly, and that is the only change made
// to them.
type pod struct {
	name    string
	root    string
	env     []string
	args    []string
	workDir string
}

// statefulSet returns the rendered StatefulSet and ConfigMaps by name.
func statefulSet(t *testing.T, objs []runtime.Object) (*appsv1.StatefulSet, map[string]*corev1.ConfigMap) {
	t.Helper()
	var sts *appsv1.StatefulSet
	cms := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.StatefulSet:
			if sts != nil {
				t.Fatal("two StatefulSets rendered")
			}
			sts = o
		case *corev1.ConfigMap:
			cms[o.Name] = o
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet rendered")
	}
	return sts, cms
}

// materialise lays out pod ordinal of the rendered objects under root.
func (c cluster) materialise(t *testing.T, objs []runtime.Object, ordinal int, root string) *pod {
	t.Helper()
	sts, cms := statefulSet(t, objs)
	spec := sts.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	ctr := spec.Containers[0]
	p := &pod{name: fmt.Sprintf("%s-%d", sts.Name, ordinal), root: root}
	vars := c.environment(t, p.name, ctr)
	for _, kv := range vars {
		p.env = append(p.env, kv[0]+"="+kv[1])
	}
	rewrite := mountRewriter(root, ctr)
	for _, a := range ctr.Args {
		p.args = append(p.args, rewrite(expand(a, vars)))
	}
	p.workDir = rewrite(ctr.WorkingDir)
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vct := range sts.Spec.VolumeClaimTemplates {
		volumes[vct.Name] = corev1.Volume{Name: vct.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	mounts := slices.Clone(ctr.VolumeMounts)
	// The kubelet mounts parents before children.
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return strings.Compare(a.MountPath, b.MountPath) })
	for _, m := range mounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Fatalf("volume mount %s names no volume", m.Name)
		}
		c.mount(t, p, v, m, cms, vars, rewrite)
	}
	return p
}

// environment resolves the container's env as the kubelet does: in order,
// $(VAR) expanded from the variables before, field and Secret references
// resolved.
func (c cluster) environment(t *testing.T, podName string, ctr corev1.Container) [][2]string {
	t.Helper()
	if len(ctr.EnvFrom) > 0 {
		t.Fatal("envFrom is not expected: every variable is named")
	}
	var vars [][2]string
	for _, e := range ctr.Env {
		var val string
		switch {
		case e.ValueFrom == nil:
			val = expand(e.Value, vars)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			val = podName
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			data, ok := c.secrets[ref.Name][ref.Key]
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			val = string(data)
		default:
			t.Fatalf("env %s: a reference this test does not resolve: %+v", e.Name, e.ValueFrom)
		}
		vars = append(vars, [2]string{e.Name, val})
	}
	return vars
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) by the value of VAR among vars, leaving unknown
// references as they are, as the kubelet does.
func expand(s string, vars [][2]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := varRef.FindStringSubmatch(ref)[1]
		for i := len(vars) - 1; i >= 0; i-- {
			if vars[i][0] == name {
				return vars[i][1]
			}
		}
		return ref
	})
}

// mountRewriter returns a function that rewrites, in one pass, every
// absolute path at or under a mount point (or the working directory) to
// the same path under root.
func mountRewriter(root string, ctr corev1.Container) func(string) string {
	points := []string{ctr.WorkingDir}
	for _, m := range ctr.VolumeMounts {
		points = append(points, m.MountPath)
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	quoted := make([]string, 0, len(points))
	for _, p := range points {
		if p != "" {
			quoted = append(quoted, regexp.QuoteMeta(p))
		}
	}
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_./-])(` + strings.Join(quoted, "|") + `)(/|$|[^A-Za-z0-9_.-])`)
	return func(s string) string {
		return re.ReplaceAllString(s, "${1}"+root+"${2}${3}")
	}
}

// mount materialises one volume mount.
func (c cluster) mount(t *testing.T, p *pod, v corev1.Volume, m corev1.VolumeMount, cms map[string]*corev1.ConfigMap,
	vars [][2]string, rewrite func(string) string) {
	t.Helper()
	target := filepath.Join(p.root, m.MountPath)
	var files map[string][]byte
	mode := os.FileMode(0o644)
	switch {
	case v.EmptyDir != nil:
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Fatalf("mount %s: a subPath of an emptyDir is not expected", m.Name)
		}
		if err := os.MkdirAll(target, 0o770); err != nil {
			t.Fatal(err)
		}
		return
	case v.ConfigMap != nil:
		cm, ok := cms[v.ConfigMap.Name]
		if !ok {
			t.Fatalf("mount %s: ConfigMap %s is not rendered", m.Name, v.ConfigMap.Name)
		}
		files = map[string][]byte{}
		for k, text := range cm.Data {
			// The only change to a configuration file: where the pod's
			// mounts are on this host.
			files[k] = []byte(rewrite(text))
		}
	case v.Secret != nil:
		data, ok := c.secrets[v.Secret.SecretName]
		if !ok {
			t.Fatalf("mount %s: no Secret %s", m.Name, v.Secret.SecretName)
		}
		files = data
		if v.Secret.DefaultMode != nil {
			mode = os.FileMode(*v.Secret.DefaultMode)
		}
	default:
		t.Fatalf("mount %s: a volume kind this test does not materialise", m.Name)
	}
	if m.SubPath != "" || m.SubPathExpr != "" {
		key := m.SubPath
		if m.SubPathExpr != "" {
			key = expand(m.SubPathExpr, vars)
		}
		data, ok := files[key]
		if !ok {
			t.Fatalf("mount %s: the volume has no %s", m.Name, key)
		}
		writeFile(t, target, data, mode)
		return
	}
	atomicWriterLayout(t, target, files, mode)
}

// atomicWriterLayout writes files into dir the way the kubelet writes a
// ConfigMap or Secret volume: the data in a timestamped folder, a ..data
// link to it, and each key a link through ..data.
func atomicWriterLayout(t *testing.T, dir string, files map[string][]byte, mode os.FileMode) {
	t.Helper()
	const stamp = "..2026_11_28_08_00_00.000000001"
	for k, data := range files {
		writeFile(t, filepath.Join(dir, stamp, k), data, mode)
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
