package checks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/loomgate/loomgate/limiter"
	"github.com/loomgate/loomgate/sidecar"
)

// These tests read deploy/ the way kubectl, Prometheus and Grafana would,
// and check that it agrees with the binary: ports, probe paths, variable
// names and values, and metric names.

// adminPaths are the admin listener's endpoints (the README's "Admin endpoints").
var adminPaths = []string{"/metrics", "/healthz", "/readyz", "/advice", "/"}

// modeOnly names the variables that belong to one mode; with the other they
// are checked but inactive.
var modeOnly = map[string][]string{
	"fixed":     {"LOOMGATE_WORKERS", "LOOMGATE_QUEUE_SIZE", "LOOMGATE_QUEUE_TIMEOUT"},
	"unbounded": {"LOOMGATE_BULKHEAD", "LOOMGATE_BULKHEAD_WAIT"},
}

// yamlDoc is one document of a YAML file.
type yamlDoc struct {
	file  string // relative to the repository root
	index int    // position in the file, from 0
	raw   any    // as decoded: map[any]any, []any and scalars
}

func (d yamlDoc) String() string { return fmt.Sprintf("%s#%d", d.file, d.index) }

// decode decodes the document into a typed value.
func (d yamlDoc) decode(t testing.TB, v any) {
	t.Helper()
	data, err := yaml.Marshal(d.raw)
	if err != nil {
		t.Fatalf("%s: %v", d, err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", d, err)
	}
}

// readYAML decodes every document of a (multi-document) YAML file.
func readYAML(t testing.TB, rel string) []yamlDoc {
	t.Helper()
	data, err := os.ReadFile(fromRepoRoot(rel))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []yamlDoc
	for i := 0; ; i++ {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", rel, i, err)
		}
		if v != nil {
			docs = append(docs, yamlDoc{file: rel, index: i, raw: v})
		}
	}
	return docs
}

// deployFiles lists the files under deploy/dir with one of exts, relative
// to the repository root, in lexical order.
func deployFiles(t testing.TB, dir string, exts ...string) []string {
	t.Helper()
	var files []string
	root := fromRepoRoot()
	err := filepath.WalkDir(fromRepoRoot("deploy", dir), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if len(exts) == 0 || slices.Contains(exts, filepath.Ext(p)) {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no %v files under deploy/%s", exts, dir)
	}
	return files
}

// k8sScheme knows the kinds deploy/kubernetes creates, in the Go types the
// API server (for the PodMonitor, the Prometheus operator; for the
// ScaledObject, KEDA) decodes them into.
var k8sScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, networkingv1.AddToScheme, monitoringv1.AddToScheme,
		autoscalingv2.AddToScheme, kedav1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// k8sDecoder is strict because the cluster is: kubectl apply validates
// fields strictly by default, so a misspelt or duplicated field is refused
// there, never silently dropped.
var k8sDecoder = k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, k8sScheme, k8sScheme,
	k8sjson.SerializerOptions{Yaml: true, Strict: true})

// decodeK8s decodes one YAML or JSON object into its registered type.
func decodeK8s(data []byte) (runtime.Object, error) {
	obj, _, err := k8sDecoder.Decode(data, nil, nil)
	return obj, err
}

// yamlDocuments splits a multi-document YAML file, dropping empty documents.
func yamlDocuments(data []byte) ([][]byte, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if string(j) != "null" {
			docs = append(docs, doc)
		}
	}
}

// readKustomization decodes a kustomization.yaml as kustomize does, refusing
// unknown fields.
func readKustomization(t testing.TB, rel string) kusttypes.Kustomization {
	t.Helper()
	data, err := os.ReadFile(fromRepoRoot(rel))
	if err != nil {
		t.Fatal(err)
	}
	var k kusttypes.Kustomization
	if err := sigsyaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return k
}

// TestDeployManifestsDecode decodes every YAML document under deploy/, the
// overlays' patches included, so that a misspelt field is reported in the
// file that has it and not only in the Deployment kustomize merges it into.
func TestDeployManifestsDecode(t *testing.T) {
	for _, f := range deployFiles(t, "kubernetes", ".yaml", ".yml") {
		if path.Base(f) == "kustomization.yaml" {
			readKustomization(t, f)
			continue
		}
		data, err := os.ReadFile(fromRepoRoot(f))
		if err != nil {
			t.Fatal(err)
		}
		docs, err := yamlDocuments(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
		for i, doc := range docs {
			doc, err := withoutPatchDirectives(doc)
			if err != nil {
				t.Errorf("%s#%d: %v", f, i, err)
				continue
			}
			obj, err := decodeK8s(doc)
			if err != nil {
				t.Errorf("%s#%d: %v", f, i, err)
				continue
			}
			if m, err := meta.Accessor(obj); err != nil || m.GetName() == "" {
				t.Errorf("%s#%d: %s without metadata.name", f, i, obj.GetObjectKind().GroupVersionKind().Kind)
			}
		}
	}
	for _, f := range deployFiles(t, "prometheus", ".yaml", ".yml") {
		readYAML(t, f)
	}
}

// withoutPatchDirectives drops the list elements of a strategic merge patch
// that are only a directive ({$patch: replace}): kustomize consumes them,
// and the cluster never sees them.
func withoutPatchDirectives(doc []byte) ([]byte, error) {
	var v any
	if err := sigsyaml.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	var drop func(v any) any
	drop = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				v[k] = drop(e)
			}
		case []any:
			var kept []any
			for _, e := range v {
				if m, ok := e.(map[string]any); ok && len(m) == 1 && m["$patch"] != nil {
					continue
				}
				kept = append(kept, drop(e))
			}
			return kept
		}
		return v
	}
	return sigsyaml.Marshal(drop(v))
}

// k8sApp is what `kubectl apply -k dir` creates.
type k8sApp struct {
	dir     string // relative to the repository root, or a copy's path
	objects []runtime.Object
}

// only returns the app's single object of type T.
func only[T runtime.Object](t testing.TB, app k8sApp) T {
	t.Helper()
	var found []T
	for _, o := range app.objects {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%s: %d objects of type %T; want 1", app.dir, len(found), zero)
	}
	return found[0]
}

// renderKustomization builds dir (relative to the repository root) with
// kustomize's own build, the one `kubectl apply -k` embeds, so that what the
// tests check is what the cluster is sent.
func renderKustomization(t testing.TB, dir string) k8sApp {
	t.Helper()
	app, err := kustomizeBuild(fromRepoRoot(dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	app.dir = dir
	return app
}

// kustomizeBuild runs kustomize on the kustomization in dir, on disk, and
// decodes what it renders strictly.
func kustomizeBuild(dir string) (k8sApp, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return k8sApp{}, err
	}
	app := k8sApp{dir: dir}
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			return k8sApp{}, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		obj, err := decodeK8s(data)
		if err != nil {
			return k8sApp{}, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		app.objects = append(app.objects, obj)
	}
	return app, nil
}

// overlays lists the directories under deploy/kubernetes/overlays.
func kustomizeOverlays(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(fromRepoRoot("deploy", "kubernetes", "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

// TestDeployKustomize checks the layout: the base lists every manifest next
// to it, one overlay per mode, and the overlays differ only in
// LOOMGATE_MODE.
func TestDeployKustomize(t *testing.T) {
	base := "deploy/kubernetes/base"
	listed := slices.Clone(readKustomization(t, base+"/kustomization.yaml").Resources)
	var present []string
	for _, f := range deployFiles(t, "kubernetes/base", ".yaml", ".yml") {
		if name := filepath.Base(f); name != "kustomization.yaml" {
			present = append(present, name)
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, present) {
		t.Errorf("%s/kustomization.yaml resources = %q; want every manifest of the directory, %q", base, listed, present)
	}

	if got, want := kustomizeOverlays(t), []string{"adaptive", "fixed", "unbounded"}; !slices.Equal(got, want) {
		t.Errorf("overlays = %q; want %q", got, want)
	}

	// Overlay kustomizations: the base and the env patch, nothing else
	// (no images, namePrefix, replicas ... that would set them apart).
	var first *kusttypes.Kustomization
	for _, o := range kustomizeOverlays(t) {
		file := "deploy/kubernetes/overlays/" + o + "/kustomization.yaml"
		k := readKustomization(t, file)
		if !slices.Equal(k.Resources, []string{"../../base"}) {
			t.Errorf("%s: resources = %q; want [../../base]", file, k.Resources)
		}
		rest := k
		rest.TypeMeta, rest.Resources, rest.Patches = kusttypes.TypeMeta{}, nil, nil
		if !reflect.DeepEqual(rest, kusttypes.Kustomization{}) {
			t.Errorf("%s sets %+v; want only resources and patches", file, rest)
		}
		if first == nil {
			first = &k
		} else if !reflect.DeepEqual(*first, k) {
			t.Errorf("%s = %+v; want the same as the other overlay's, %+v, with the difference in the patch", file, k, *first)
		}
	}

	ref := renderKustomization(t, base)
	for _, o := range kustomizeOverlays(t) {
		if err := modeOnlyDiff(ref, renderKustomization(t, "deploy/kubernetes/overlays/"+o), o); err != nil {
			t.Error(err)
		}
	}
}

// modeOnlyDiff returns why overlay is not base with LOOMGATE_MODE=mode.
func modeOnlyDiff(base, overlay k8sApp, mode string) error {
	want, got := envSorted(base.objects), envSorted(overlay.objects)
	baseMode, ok := loomgateEnvVar(want, sidecar.EnvPrefix+"MODE")
	if !ok {
		return fmt.Errorf("%s: loomgate has no %sMODE", base.dir, sidecar.EnvPrefix)
	}
	v, ok := loomgateEnvVar(got, sidecar.EnvPrefix+"MODE")
	if !ok {
		return fmt.Errorf("%s: loomgate has no %sMODE; want %s", overlay.dir, sidecar.EnvPrefix, mode)
	}
	if v.Value != mode {
		return fmt.Errorf("%s: %sMODE = %q; want %q", overlay.dir, sidecar.EnvPrefix, v.Value, mode)
	}
	v.Value = baseMode.Value
	if !equality.Semantic.DeepEqual(want, got) {
		return fmt.Errorf("%s differs from %s in more than %sMODE (- base, + overlay):\n%s", overlay.dir, base.dir, sidecar.EnvPrefix, diff.Diff(want, got))
	}
	return nil
}

// envSorted copies objects with every container's env sorted by name.
// kustomize's merge moves a patched variable to the front of the list;
// the order matters only to $(NAME) references, which the manifests do not
// make (effectiveEnv hands the values to sidecar.ParseEnv as they are).
func envSorted(objects []runtime.Object) []runtime.Object {
	out := make([]runtime.Object, len(objects))
	for i, o := range objects {
		out[i] = o.DeepCopyObject()
		if dep, ok := out[i].(*appsv1.Deployment); ok {
			pod := &dep.Spec.Template.Spec
			for _, list := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
				for i := range list {
					slices.SortStableFunc(list[i].Env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
				}
			}
		}
	}
	return out
}

// loomgateEnvVar finds the variable name of the Deployment's loomgate
// container.
func loomgateEnvVar(objects []runtime.Object, name string) (*corev1.EnvVar, bool) {
	for _, o := range objects {
		dep, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		pod := &dep.Spec.Template.Spec
		for _, list := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
			for i := range list {
				if !isLoomgateImage(list[i].Image) {
					continue
				}
				for j := range list[i].Env {
					if list[i].Env[j].Name == name {
						return &list[i].Env[j], true
					}
				}
			}
		}
	}
	return nil, false
}

// TestDeployKustomizeBrokenCopy breaks a copy of deploy/kubernetes one edit
// at a time and checks that the build and the checks above refuse it,
// naming the problem, or accept it where the edit is valid.
func TestDeployKustomizeBrokenCopy(t *testing.T) {
	tests := []struct {
		name  string
		file  string      // under deploy/kubernetes
		edits [][2]string // old, new: each old must occur once
		dir   string      // what is built: base or overlays/<mode>
		want  string      // in the error; "" = accepted
	}{
		{
			name:  "misspelt Deployment field",
			file:  "base/deployment.yaml",
			edits: [][2]string{{"restartPolicy: Always", "restartPolicyy: Always"}},
			dir:   "base",
			want:  `unknown field "spec.template.spec.initContainers[0].restartPolicyy"`,
		},
		{
			name:  "duplicated Deployment field",
			file:  "base/deployment.yaml",
			edits: [][2]string{{"  replicas: 2\n", "  replicas: 2\n  replicas: 3\n"}},
			dir:   "base",
			want:  `mapping key "replicas" already defined`,
		},
		{
			name:  "bad memory quantity",
			file:  "base/deployment.yaml",
			edits: [][2]string{{"memory: 256Mi", "memory: 256MB"}},
			dir:   "base",
			want:  "quantities must match the regular expression",
		},
		{
			name:  "memory request above the limit",
			file:  "base/deployment.yaml",
			edits: [][2]string{{"memory: 64Mi", "memory: 0.5Gi"}, {"memory: 256Mi", "memory: 512M"}},
			dir:   "base",
			want:  "memory request 512Mi (536870912 bytes) above its limit 512M (512000000 bytes)",
		},
		{
			name:  "decimal and fractional quantities",
			file:  "base/deployment.yaml",
			edits: [][2]string{{"memory: 64Mi", "memory: 0.5Gi"}, {"memory: 256Mi", "memory: 1G"}},
			dir:   "base",
		},
		{
			name:  "misspelt PodMonitor field",
			file:  "base/podmonitor.yaml",
			edits: [][2]string{{"      path: /metrics", "      pth: /metrics"}},
			dir:   "base",
			want:  `unknown field "spec.podMetricsEndpoints[0].pth"`,
		},
		{
			name:  "misspelt field in an overlay's patch",
			file:  "overlays/fixed/env.yaml",
			edits: [][2]string{{"  template:", "  templat:"}},
			dir:   "overlays/fixed",
			want:  `unknown field "spec.templat"`,
		},
		{
			name:  "patch of a Deployment the base lacks",
			file:  "overlays/fixed/env.yaml",
			edits: [][2]string{{"name: your-app", "name: other-app"}},
			dir:   "overlays/fixed",
			want:  "no resource matches strategic merge patch",
		},
		{
			name:  "misspelt kustomization field",
			file:  "overlays/fixed/kustomization.yaml",
			edits: [][2]string{{"patches:", "patchs:"}},
			dir:   "overlays/fixed",
			want:  `unknown field "patchs"`,
		},
		{
			name:  "overlay sets another variable",
			file:  "overlays/fixed/env.yaml",
			edits: [][2]string{{"value: fixed\n", "value: fixed\n            - name: LOOMGATE_WORKERS\n              value: \"100\"\n"}},
			dir:   "overlays/fixed",
			want:  "in more than LOOMGATE_MODE",
		},
		{
			name:  "overlay sets the other mode",
			file:  "overlays/fixed/env.yaml",
			edits: [][2]string{{"value: fixed", "value: unbounded"}},
			dir:   "overlays/fixed",
			want:  `LOOMGATE_MODE = "unbounded"; want "fixed"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.CopyFS(root, os.DirFS(fromRepoRoot("deploy", "kubernetes"))); err != nil {
				t.Fatal(err)
			}
			editFile(t, filepath.Join(root, tt.file), tt.edits...)
			err := checkKustomizeCopy(root, tt.dir)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("%s: %v; want it accepted", tt.dir, err)
			case tt.want != "" && err == nil:
				t.Errorf("%s: accepted; want an error with %q", tt.dir, tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("%s: %v; want an error with %q", tt.dir, err, tt.want)
			}
		})
	}
}

// checkKustomizeCopy runs, on a copy of deploy/kubernetes at root, the
// checks of TestDeployKustomize and TestDeployPods that return errors.
func checkKustomizeCopy(root, dir string) error {
	app, err := kustomizeBuild(filepath.Join(root, dir))
	if err != nil {
		return err
	}
	for _, o := range app.objects {
		dep, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		lg, err := loomgateContainer(dep)
		if err != nil {
			return err
		}
		if err := checkResources(lg); err != nil {
			return err
		}
	}
	if mode, ok := strings.CutPrefix(dir, "overlays/"); ok {
		base, err := kustomizeBuild(filepath.Join(root, "base"))
		if err != nil {
			return err
		}
		return modeOnlyDiff(base, app, mode)
	}
	return nil
}

// editFile replaces, in file, each edit's old text (which must occur
// exactly once) by its new text.
func editFile(t testing.TB, file string, edits ...[2]string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, e := range edits {
		if n := strings.Count(s, e[0]); n != 1 {
			t.Fatalf("%s: %q occurs %d times; want once", file, e[0], n)
		}
		s = strings.Replace(s, e[0], e[1], 1)
	}
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDeployPods checks the Pod that the base and each overlay create.
func TestDeployPods(t *testing.T) {
	dirs := []string{"deploy/kubernetes/base"}
	for _, o := range kustomizeOverlays(t) {
		dirs = append(dirs, "deploy/kubernetes/overlays/"+o)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			checkApp(t, renderKustomization(t, dir))
		})
	}
}

// loomgateContainer is the Deployment's container running the loomgate
// image, among its init containers.
func loomgateContainer(dep *appsv1.Deployment) (*corev1.Container, error) {
	pod := &dep.Spec.Template.Spec
	for _, c := range pod.Containers {
		if isLoomgateImage(c.Image) {
			return nil, fmt.Errorf("container %s runs %s as a regular container; want it in initContainers with restartPolicy: Always (a native sidecar)", c.Name, c.Image)
		}
	}
	for i, c := range pod.InitContainers {
		if isLoomgateImage(c.Image) {
			return &pod.InitContainers[i], nil
		}
	}
	return nil, errors.New("no initContainer runs a loomgate image; want loomgate as a native sidecar")
}

// checkResources wants requests and a memory limit, the request within the
// limit, compared as the kubelet compares quantities.
func checkResources(c *corev1.Container) error {
	req, lim := c.Resources.Requests, c.Resources.Limits
	reqCPU, okCPU := req[corev1.ResourceCPU]
	reqMem, okMem := req[corev1.ResourceMemory]
	limMem, okLim := lim[corev1.ResourceMemory]
	if !okCPU || !okMem || !okLim || reqCPU.IsZero() || reqMem.IsZero() || limMem.IsZero() {
		return fmt.Errorf("%s resources requests %v limits %v; want cpu and memory requests and a memory limit", c.Name, req, lim)
	}
	if reqMem.Cmp(limMem) > 0 {
		return fmt.Errorf("%s memory request %s (%d bytes) above its limit %s (%d bytes)", c.Name, &reqMem, reqMem.Value(), &limMem, limMem.Value())
	}
	return nil
}

func checkApp(t *testing.T, app k8sApp) {
	dep := only[*appsv1.Deployment](t, app)
	pod := dep.Spec.Template.Spec
	podLabels := dep.Spec.Template.Labels

	// The sidecar: the container running the loomgate image, as a native
	// sidecar so that it starts before the application and stops after it.
	lg, err := loomgateContainer(dep)
	if err != nil {
		t.Fatal(err)
	}
	if lg.RestartPolicy == nil || *lg.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("initContainer %s restartPolicy = %q; want Always (a native sidecar)", lg.Name, deref(lg.RestartPolicy))
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers; want 1, the application", len(pod.Containers))
	}
	appC := pod.Containers[0]

	if dep.Spec.Selector == nil || len(dep.Spec.Selector.MatchLabels) == 0 || !labelsSubset(dep.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not select its pod labels %v", dep.Spec.Selector, podLabels)
	}

	// The environment: every overlay sets LOOMGATE_MODE, and nothing else
	// of loomgate's differs from the base, so that a flip is one edit.
	mode := filepath.Base(app.dir)
	env := effectiveEnv(t, *lg)
	if mode != "base" {
		if got := env["LOOMGATE_MODE"]; got != mode {
			t.Errorf("overlay %s: LOOMGATE_MODE = %q; want %q", mode, got, mode)
		}
	}
	for _, names := range modeOnly {
		for _, name := range names {
			if _, ok := env[name]; !ok {
				t.Errorf("%s: %s is unset; want both modes' settings in the base, so that flipping LOOMGATE_MODE is one edit", mode, name)
			}
		}
	}
	var environ []string
	for name, value := range env {
		environ = append(environ, name+"="+value)
	}
	sort.Strings(environ)
	cfg, err := sidecar.ParseEnv(environ)
	if err != nil {
		t.Fatalf("loomgate would exit 2 with this environment %q:\n%v", environ, err)
	}
	if mode == "base" && (cfg.Mode != limiter.Unbounded || cfg.Bulkhead != 0) {
		t.Errorf("base: MODE=%s BULKHEAD=%d; want unbounded with no bulkhead, the pass-through that changes nothing", cfg.Mode, cfg.Bulkhead)
	}
	// The same environment starts in both modes, each with its own limit.
	for _, m := range []string{"fixed", "unbounded"} {
		flipped := append(slices.Clone(environ), "LOOMGATE_MODE="+m)
		fc, err := sidecar.ParseEnv(flipped)
		if err != nil {
			t.Errorf("%s flipped to MODE=%s: loomgate would exit 2:\n%v", mode, m, err)
			continue
		}
		s, err := sidecar.New(fc, sidecar.Options{Logger: slog.New(slog.DiscardHandler), AccessLog: io.Discard})
		if err != nil {
			t.Errorf("%s flipped to MODE=%s: %v", mode, m, err)
			continue
		}
		want := fc.Workers
		if m == "unbounded" {
			want = fc.Bulkhead
		}
		if got := s.Stats().Limit; got != want {
			t.Errorf("%s flipped to MODE=%s: limit %d; want %d", mode, m, got, want)
		}
	}

	// Ports: the container ports agree with the listen addresses.
	ports := map[string]int{}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for _, p := range c.Ports {
			if _, dup := ports[p.Name]; dup && p.Name != "" {
				t.Errorf("port name %q is used twice in the pod; want names that resolve to one port", p.Name)
			}
			ports[p.Name] = int(p.ContainerPort)
		}
	}
	lgPorts := map[string]int{}
	for _, p := range lg.Ports {
		lgPorts[p.Name] = int(p.ContainerPort)
	}
	httpPort := portOfListen(t, "LOOMGATE_LISTEN", cfg.Listen)
	adminPort := portOfListen(t, "LOOMGATE_ADMIN_LISTEN", cfg.AdminListen)
	if got, ok := lgPorts["http"]; !ok || got != httpPort {
		t.Errorf("loomgate port named http = %d (declared: %v); want %d, the port of LOOMGATE_LISTEN=%q", got, ok, httpPort, cfg.Listen)
	}
	if got, ok := lgPorts["admin"]; !ok || got != adminPort {
		t.Errorf("loomgate port named admin = %d (declared: %v); want %d, the port of LOOMGATE_ADMIN_LISTEN=%q", got, ok, adminPort, cfg.AdminListen)
	}

	// Probes: on the admin port, at admin endpoints.
	probes := []struct {
		name     string
		probe    *corev1.Probe
		want     string // "" = any admin endpoint
		required bool
	}{
		{"readinessProbe", lg.ReadinessProbe, "/readyz", true},
		{"livenessProbe", lg.LivenessProbe, "/healthz", true},
		{"startupProbe", lg.StartupProbe, "", false},
	}
	for _, p := range probes {
		if p.probe == nil {
			if p.required {
				t.Errorf("loomgate has no %s; want an httpGet on the admin port", p.name)
			}
			continue
		}
		if p.probe.HTTPGet == nil {
			t.Errorf("loomgate %s is not an httpGet probe", p.name)
			continue
		}
		path, port := p.probe.HTTPGet.Path, p.probe.HTTPGet.Port
		if p.want != "" && path != p.want {
			t.Errorf("loomgate %s path = %q; want %q", p.name, path, p.want)
		}
		if !slices.Contains(adminPaths, path) {
			t.Errorf("loomgate %s path = %q; want one of the admin endpoints %q", p.name, path, adminPaths)
		}
		if got := resolvePort(port, lgPorts); got != adminPort {
			t.Errorf("loomgate %s port %s = %d; want the admin port %d", p.name, port.String(), got, adminPort)
		}
		if port.Type != intstr.String || port.StrVal != "admin" {
			t.Errorf("loomgate %s port = %s; want the name admin", p.name, port.String())
		}
	}

	// The upstream is the application container, over loopback.
	u, err := url.Parse(cfg.Upstream)
	if err != nil {
		t.Fatal(err)
	}
	upPort, _ := strconv.Atoi(u.Port())
	var appPorts []int
	for _, p := range appC.Ports {
		appPorts = append(appPorts, int(p.ContainerPort))
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Errorf("LOOMGATE_UPSTREAM host = %q; want 127.0.0.1, the application in the same pod", u.Hostname())
	}
	if !slices.Contains(appPorts, upPort) {
		t.Errorf("LOOMGATE_UPSTREAM port = %d; want one of container %s's ports %v", upPort, appC.Name, appPorts)
	}

	// Shutdown: the sidecar stops only once the application has, so the
	// grace period must cover the preStop sleeps and then loomgate's drain.
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	var sleeps time.Duration
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			sleeps += time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	if grace <= sleeps+cfg.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds = %v; want more than %v: preStop sleeps %v + LOOMGATE_DRAIN_TIMEOUT %v", grace, sleeps+cfg.DrainTimeout, sleeps, cfg.DrainTimeout)
	}

	// Resources: requests and a memory limit, the request within the limit.
	if err := checkResources(lg); err != nil {
		t.Error(err)
	}

	// Service: clients reach the application through loomgate's http port.
	svc := only[*corev1.Service](t, app)
	if len(svc.Spec.Selector) == 0 || !labelsSubset(svc.Spec.Selector, podLabels) {
		t.Errorf("Service selector %v; want a non-empty subset of the pod labels %v", svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) == 0 {
		t.Errorf("Service has no ports")
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.Type != intstr.String || p.TargetPort.StrVal != "http" {
			t.Errorf("Service port %s targetPort = %s; want http, loomgate's traffic port", p.Name, p.TargetPort.String())
		}
		if got := resolvePort(p.TargetPort, ports); got != httpPort {
			t.Errorf("Service port %s targetPort %s = %d in the pod; want %d, loomgate's LOOMGATE_LISTEN port", p.Name, p.TargetPort.String(), got, httpPort)
		}
	}

	// PodMonitor: selects these pods and scrapes loomgate's admin port.
	pm := only[*monitoringv1.PodMonitor](t, app)
	if sel := pm.Spec.Selector.MatchLabels; len(sel) == 0 || !labelsSubset(sel, podLabels) {
		t.Errorf("PodMonitor selector %v; want a non-empty subset of the pod labels %v", sel, podLabels)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor has %d endpoints; want 1, loomgate's admin port", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if epPort := deref(ep.Port); epPort != "admin" || lgPorts[epPort] != adminPort {
		t.Errorf("PodMonitor endpoint port = %q (%d); want admin (%d)", epPort, lgPorts[epPort], adminPort)
	}
	if ep.Path != "/metrics" {
		t.Errorf("PodMonitor endpoint path = %q; want /metrics", ep.Path)
	}
	// The operator hands the interval to Prometheus, which parses it.
	if d, err := model.ParseDuration(string(ep.Interval)); err != nil || time.Duration(d) > 15*time.Second {
		t.Errorf("PodMonitor interval = %q; want 15s or less, which the rules' [1m] rates need", ep.Interval)
	}
}

func isLoomgateImage(image string) bool {
	name, _, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	return name == "loomgate"
}

// effectiveEnv is the container's LOOMGATE_* environment; every such
// variable must have a literal value, which the tests can check.
func effectiveEnv(t testing.TB, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, sidecar.EnvPrefix) {
			continue
		}
		if e.ValueFrom != nil {
			t.Errorf("%s has no literal value; want one, which these tests can check against the binary", e.Name)
			continue
		}
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s is set twice in container %s", e.Name, c.Name)
		}
		env[e.Name] = e.Value
	}
	return env
}

// resolvePort turns a port number or name into a number, -1 if unknown.
func resolvePort(port intstr.IntOrString, named map[string]int) int {
	if port.Type == intstr.Int {
		return port.IntValue()
	}
	if n, ok := named[port.StrVal]; ok {
		return n
	}
	return -1
}

// deref is *p, or the zero value if p is nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func labelsSubset(sub, super map[string]string) bool {
	for k, v := range sub {
		if w, ok := super[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestDeployEnvNames finds every LOOMGATE_* name in deploy/ (manifests,
// rules, dashboard, README) and in the Dockerfile, and checks that the
// binary knows it: an unknown one would make loomgate exit 2, or send an
// operator after a setting that does not exist.
func TestDeployEnvNames(t *testing.T) {
	known := map[string]bool{}
	for _, v := range sidecar.Variables() {
		known[v.Name] = true
	}
	for _, names := range modeOnly {
		for _, n := range names {
			if !known[n] {
				t.Errorf("modeOnly names %s, which sidecar.Variables() does not", n)
			}
		}
	}
	files := append(deployFiles(t, ""), "Dockerfile")
	re := regexp.MustCompile(sidecar.EnvPrefix + `[A-Z0-9_]+`)
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(fromRepoRoot(f))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range re.FindAllString(string(data), -1) {
			seen++
			if !known[name] {
				t.Errorf("%s mentions %s; sidecar.Variables() has no such variable", f, name)
			}
		}
	}
	if seen == 0 {
		t.Errorf("no %s name found under deploy/; the search itself is broken", sidecar.EnvPrefix)
	}
}

// grafanaExport is the dashboard file as Grafana's "Export for sharing
// externally" writes it and its import reads it: the dashboard with the
// import's __inputs, __requires and __elements beside it, which the
// dashboard schema itself does not define.
type grafanaExport struct {
	Inputs    []grafanaInput
	Requires  []grafanaRequire
	Elements  map[string]json.RawMessage // library panels, by uid
	Dashboard dashboard.Dashboard
}

type grafanaInput struct {
	Name        string `json:"name"`
	Label       string `json:"label"`
	Description string `json:"description"`
	Type        string `json:"type"`
	PluginID    string `json:"pluginId"`
	PluginName  string `json:"pluginName"`
}

type grafanaRequire struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

const grafanaDatasource = "${DS_PROMETHEUS}"

// registerGrafanaPlugins lets the SDK decode panel options, custom field
// config and Prometheus targets strictly by their plugin's types; without
// them it keeps those as untyped maps.
var registerGrafanaPlugins = sync.OnceFunc(plugins.RegisterDefaultPlugins)

func readDashboard(t testing.TB) grafanaExport {
	t.Helper()
	d, err := loadDashboard(fromRepoRoot("deploy", "grafana", "loomgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// loadDashboard decodes file strictly and validates it with the Grafana
// foundation SDK's dashboard types. It fails on unknown fields, values of
// the wrong type and values outside the schema's constraints, but neither
// requires nor fills in the fields the schema marks required: Grafana
// fills those from the panel plugin's defaults when it loads the dashboard
// (older Grafana, such as the 10.4 of __requires, knows fewer of them), so
// their absence is no defect of the file, and filling them here would take
// a copy of Grafana's defaults, another stand-in. The file is checked as
// written; TestDashboard checks the fields that matter here (a uid, a
// gridPos and a datasource on every panel ...) itself.
func loadDashboard(file string) (grafanaExport, error) {
	registerGrafanaPlugins()
	data, err := os.ReadFile(file)
	if err != nil {
		return grafanaExport{}, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return grafanaExport{}, fmt.Errorf("%s: %w", file, err)
	}
	var d grafanaExport
	for name, into := range map[string]any{"__inputs": &d.Inputs, "__requires": &d.Requires, "__elements": &d.Elements} {
		raw, ok := fields[name]
		if !ok {
			continue
		}
		delete(fields, name)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			return grafanaExport{}, fmt.Errorf("%s: %s: %w", file, name, err)
		}
	}
	rest, err := json.Marshal(fields)
	if err != nil {
		return grafanaExport{}, err
	}
	if err := unknownOrWrong(new(dashboard.Dashboard).UnmarshalJSONStrict(rest)); err != nil {
		return grafanaExport{}, fmt.Errorf("%s: %w", file, err)
	}
	// The strict pass only reports: it drops a panel with any error,
	// an absent required field included. The values come from the SDK's
	// lenient decoding, which still types options and targets by plugin.
	if err := json.Unmarshal(rest, &d.Dashboard); err != nil {
		return grafanaExport{}, fmt.Errorf("%s: %w", file, err)
	}
	if err := d.Dashboard.Validate(); err != nil {
		return grafanaExport{}, fmt.Errorf("%s: %w", file, err)
	}
	// The SDK decodes a panel of a type it has no plugin for loosely;
	// Grafana shows it as "Panel plugin not found".
	for _, p := range dashboardPanels(d.Dashboard) {
		if _, ok := cog.ConfigForPanelcfgVariant(p.Type); !ok {
			return grafanaExport{}, fmt.Errorf("%s: panel %q: type %q is not a panel plugin Grafana ships", file, deref(p.Title), p.Type)
		}
	}
	return d, nil
}

// unknownOrWrong drops, from the SDK's decoding errors, those about a
// required field being absent (see loadDashboard).
func unknownOrWrong(err error) error {
	var errs cog.BuildErrors
	if !errors.As(err, &errs) {
		return err
	}
	var kept cog.BuildErrors
	for _, e := range errs {
		if e.Message != "required field is missing from input" {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// dashboardPanels flattens rows into their panels, rows left out.
func dashboardPanels(d dashboard.Dashboard) []dashboard.Panel {
	var out []dashboard.Panel
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			out = append(out, *p.Panel)
		case p.RowPanel != nil:
			out = append(out, p.RowPanel.Panels...)
		}
	}
	return out
}

// promTarget is the Prometheus query of a panel's target, nil if the target
// is not one.
func promTarget(q variants.Dataquery) *prometheus.Dataquery {
	pq, _ := q.(*prometheus.Dataquery)
	return pq
}

// TestDashboard checks that the dashboard imports as is and shows only
// series that exist: metrics of the README and recording rules of rules.yml.
func TestDashboard(t *testing.T) {
	export := readDashboard(t)
	d := export.Dashboard
	if deref(d.Uid) == "" || deref(d.Title) == "" {
		t.Errorf("uid %q, title %q; want both set", deref(d.Uid), deref(d.Title))
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion = %d; want 36 or later (datasources as objects)", d.SchemaVersion)
	}
	if in := export.Inputs; len(in) != 1 || in[0].Name != "DS_PROMETHEUS" || in[0].Type != "datasource" || in[0].PluginID != "prometheus" {
		t.Errorf("__inputs = %+v; want one prometheus datasource input, DS_PROMETHEUS", in)
	}

	rules := recordingRules(t)
	ids := map[uint32]bool{}
	var exprs []string
	for _, p := range dashboardPanels(d) {
		title := deref(p.Title)
		if p.Id == nil || ids[*p.Id] {
			t.Errorf("panel %q: id %v missing or used twice", title, p.Id)
		} else {
			ids[*p.Id] = true
		}
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q has no gridPos", title)
		}
		if p.Datasource == nil || deref(p.Datasource.Uid) != grafanaDatasource {
			t.Errorf("panel %q datasource uid = %q; want %s", title, dsUID(p.Datasource), grafanaDatasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", title)
		}
		for _, q := range p.Targets {
			tg := promTarget(q)
			if tg == nil {
				t.Errorf("panel %q target %T; want a Prometheus query", title, q)
				continue
			}
			ref := deref(tg.RefId)
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s: empty expr", title, ref)
			}
			if tg.Datasource != nil && deref(tg.Datasource.Uid) != grafanaDatasource {
				t.Errorf("panel %q target %s datasource uid = %q; want %s", title, ref, dsUID(tg.Datasource), grafanaDatasource)
			}
			exprs = append(exprs, tg.Expr)
			for _, problem := range checkPromExpr(tg.Expr, rules) {
				t.Errorf("panel %q target %s: %s", title, ref, problem)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != dashboard.VariableTypeQuery {
			continue
		}
		if v.Datasource == nil || deref(v.Datasource.Uid) != grafanaDatasource {
			t.Errorf("variable %s datasource uid = %q; want %s", v.Name, dsUID(v.Datasource), grafanaDatasource)
		}
		for _, problem := range checkPromExpr(deref(v.Definition), rules) {
			t.Errorf("variable %s: %s", v.Name, problem)
		}
	}

	// What the dashboard is for: each of these appears in some panel.
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"loomgate:requests:rate1m",
		"loomgate:queue_wait_seconds:p99_rate1m",
		"loomgate:service_seconds:p99_rate1m",
		"loomgate:saturation:ratio",
		"loomgate:rejections:ratio_rate1m",
		`outcome=~"rejected_.*"`,
		"loomgate_in_flight",
		"loomgate_queued",
		"loomgate_in_flight_bytes",
		"loomgate_mode_info",
		"loomgate_advice_workers",
		"loomgate_advice_bulkhead",
		"loomgate_upstream_capacity_estimate",
		"loomgate_upstream_saturated",
		// The fleet row.
		"loomgate:utilisation:ratio_rate1m",
		"loomgate:workload_utilisation:ratio_rate1m",
		"loomgate:workload_replicas_wanted:target70",
		"loomgate:workload_queue_wait_seconds:p99_rate1m",
		"loomgate:workload_rejections:rate1m",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel shows %s", want)
		}
	}
}

func dsUID(ds *common.DataSourceRef) string {
	if ds == nil {
		return ""
	}
	return deref(ds.Uid)
}

// TestDashboardBrokenCopy breaks a copy of the dashboard one edit at a time
// and checks that loading it fails, naming the problem.
func TestDashboardBrokenCopy(t *testing.T) {
	// Panel 1 is the "Mode" stat panel, with one Prometheus target.
	panel := func(d map[string]any) map[string]any { return d["panels"].([]any)[1].(map[string]any) }
	target := func(d map[string]any) map[string]any { return panel(d)["targets"].([]any)[0].(map[string]any) }
	tests := []struct {
		name string
		edit func(d map[string]any)
		want string // in the error
	}{
		{"unknown dashboard field", func(d map[string]any) { d["refreshRate"] = "30s" }, "unexpected field 'refreshRate'"},
		{"unknown panel field", func(d map[string]any) { panel(d)["titel"] = "Mode" }, "unexpected field 'titel'"},
		{"misspelt panel option", func(d map[string]any) {
			o := panel(d)["options"].(map[string]any)
			o["colourMode"] = o["colorMode"]
			delete(o, "colorMode")
		}, "unexpected field 'colourMode'"},
		{"unknown target field", func(d map[string]any) { target(d)["exp"] = target(d)["expr"] }, "unexpected field 'exp'"},
		{"panel type no plugin has", func(d map[string]any) { panel(d)["type"] = "singlestat" }, `type "singlestat" is not a panel plugin`},
		{"panel type of other options", func(d map[string]any) { panel(d)["type"] = "timeseries" }, "panels[1].options.Options: unexpected field 'colorMode'"},
		{"wrong type of a field", func(d map[string]any) { d["schemaVersion"] = "39" }, "schemaVersion"},
		{"width beyond the grid", func(d map[string]any) { panel(d)["gridPos"].(map[string]any)["w"] = 40 }, "must be <= 24"},
		{"unknown input field", func(d map[string]any) { d["__inputs"].([]any)[0].(map[string]any)["plugin"] = "prometheus" }, `__inputs: json: unknown field "plugin"`},
	}
	data, err := os.ReadFile(fromRepoRoot("deploy", "grafana", "loomgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d map[string]any
			if err := json.Unmarshal(data, &d); err != nil {
				t.Fatal(err)
			}
			tt.edit(d)
			broken, err := json.MarshalIndent(d, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "loomgate.json")
			if err := os.WriteFile(file, broken, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = loadDashboard(file)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("loadDashboard = %v; want an error with %q", err, tt.want)
			}
		})
	}
}

// TestDeployReadmeFlipsEveryMode: deploy/README.md's "Flipping the mode"
// shows the command for every overlay there is, and counts them right:
// it said "the two overlays" and showed two when a third, adaptive, had
// been added beside them.
func TestDeployReadmeFlipsEveryMode(t *testing.T) {
	b, err := os.ReadFile(fromRepoRoot("deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Flipping the mode\n")
	if !ok {
		t.Fatal(`deploy/README.md has no section "### Flipping the mode"`)
	}
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	overlays := kustomizeOverlays(t)
	for _, o := range overlays {
		if !strings.Contains(section, "kubectl apply -k deploy/kubernetes/overlays/"+o+" ") {
			t.Errorf("deploy/README.md's \"Flipping the mode\" has no kubectl apply of overlays/%s", o)
		}
	}
	words := map[int]string{2: "two", 3: "three", 4: "four", 5: "five"}
	for n, w := range words {
		if n != len(overlays) && strings.Contains(section, "the "+w+" overlays") {
			t.Errorf("deploy/README.md's \"Flipping the mode\" speaks of the %s overlays; there are %d: %v", w, len(overlays), overlays)
		}
	}
}
