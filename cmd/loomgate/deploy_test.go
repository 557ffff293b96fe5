package main

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
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
)

// These tests read deploy/ the way kubectl, Prometheus and Grafana would,
// and check that it agrees with the binary: ports, probe paths, variable
// names and values, and metric names.

// fromRepoRoot joins elem to the repository root (tests run in cmd/loomgate).
func fromRepoRoot(elem ...string) string {
	return filepath.Join(append([]string{"..", ".."}, elem...)...)
}

// adminPaths are the admin listener's endpoints (DESIGN.md, "Admin endpoints").
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
// API server (for the PodMonitor, the Prometheus operator) decodes them into.
var k8sScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, monitoringv1.AddToScheme} {
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

	if got, want := kustomizeOverlays(t), []string{"fixed", "unbounded"}; !slices.Equal(got, want) {
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
	baseMode, ok := loomgateEnvVar(want, envPrefix+"MODE")
	if !ok {
		return fmt.Errorf("%s: loomgate has no %sMODE", base.dir, envPrefix)
	}
	v, ok := loomgateEnvVar(got, envPrefix+"MODE")
	if !ok {
		return fmt.Errorf("%s: loomgate has no %sMODE; want %s", overlay.dir, envPrefix, mode)
	}
	if v.Value != mode {
		return fmt.Errorf("%s: %sMODE = %q; want %q", overlay.dir, envPrefix, v.Value, mode)
	}
	v.Value = baseMode.Value
	if !equality.Semantic.DeepEqual(want, got) {
		return fmt.Errorf("%s differs from %s in more than %sMODE (- base, + overlay):\n%s", overlay.dir, base.dir, envPrefix, diff.Diff(want, got))
	}
	return nil
}

// envSorted copies objects with every container's env sorted by name.
// kustomize's merge moves a patched variable to the front of the list;
// the order matters only to $(NAME) references, which the manifests do not
// make (effectiveEnv hands the values to parseConfig as they are).
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
		t.Errorf("initContainer %s restartPolicy = %v; want Always (a native sidecar)", lg.Name, ptrString(lg.RestartPolicy))
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
	cfg, err := parseConfig(environ)
	if err != nil {
		t.Fatalf("loomgate would exit 2 with this environment %q:\n%v", environ, err)
	}
	if mode == "base" && (cfg.Mode != "unbounded" || cfg.Bulkhead != 0) {
		t.Errorf("base: MODE=%s BULKHEAD=%d; want unbounded with no bulkhead, the pass-through that changes nothing", cfg.Mode, cfg.Bulkhead)
	}
	// The same environment starts in both modes, each with its own limit.
	for _, m := range []string{"fixed", "unbounded"} {
		flipped := append(slices.Clone(environ), "LOOMGATE_MODE="+m)
		fc, err := parseConfig(flipped)
		if err != nil {
			t.Errorf("%s flipped to MODE=%s: loomgate would exit 2:\n%v", mode, m, err)
			continue
		}
		s, err := newSidecar(fc, slog.New(slog.DiscardHandler), io.Discard)
		if err != nil {
			t.Errorf("%s flipped to MODE=%s: %v", mode, m, err)
			continue
		}
		want := fc.Workers
		if m == "unbounded" {
			want = fc.Bulkhead
		}
		if got := s.limiter.Stats().Limit; got != want {
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
	if epPort := ptrString(ep.Port); epPort != "admin" || lgPorts[epPort] != adminPort {
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
		if !strings.HasPrefix(e.Name, envPrefix) {
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

// ptrString is *p as a string, "<nil>" if p is nil.
func ptrString[S ~string](p *S) string {
	if p == nil {
		return "<nil>"
	}
	return string(*p)
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
	for _, v := range configVars() {
		known[v.Name] = true
	}
	for _, names := range modeOnly {
		for _, n := range names {
			if !known[n] {
				t.Errorf("modeOnly names %s, which configVars() does not", n)
			}
		}
	}
	files := append(deployFiles(t, ""), "Dockerfile")
	re := regexp.MustCompile(envPrefix + `[A-Z0-9_]+`)
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(fromRepoRoot(f))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range re.FindAllString(string(data), -1) {
			seen++
			if !known[name] {
				t.Errorf("%s mentions %s; configVars() has no such variable", f, name)
			}
		}
	}
	if seen == 0 {
		t.Errorf("no %s name found under deploy/; the search itself is broken", envPrefix)
	}
}

// grafanaDashboard is the part of the dashboard JSON the checks read.
type grafanaDashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			AllValue   string          `json:"allValue"`
			Datasource *grafanaDS      `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource *grafanaDS `json:"datasource"`
	GridPos    *struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string     `json:"expr"`
		RefID      string     `json:"refId"`
		Datasource *grafanaDS `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's panels
}

type grafanaDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

const grafanaDatasource = "${DS_PROMETHEUS}"

func readDashboard(t testing.TB) grafanaDashboard {
	t.Helper()
	data, err := os.ReadFile(fromRepoRoot("deploy", "grafana", "loomgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("deploy/grafana/loomgate.json: %v", err)
	}
	return d
}

// dashboardPanels flattens rows into their panels, rows left out.
func dashboardPanels(d grafanaDashboard) []grafanaPanel {
	var out []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboard checks that the dashboard imports as is and shows only
// series that exist: metrics of DESIGN.md and recording rules of rules.yml.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q; want both set", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion = %d; want 36 or later (datasources as objects)", d.SchemaVersion)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs = %+v; want one prometheus datasource input, DS_PROMETHEUS", d.Inputs)
	}

	rules := recordingRules(t)
	ids := map[int]bool{}
	var exprs []string
	for _, p := range dashboardPanels(d) {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q has no gridPos", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != grafanaDatasource {
			t.Errorf("panel %q datasource = %+v; want uid %s", p.Title, p.Datasource, grafanaDatasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
			}
			if tg.Datasource != nil && tg.Datasource.UID != grafanaDatasource {
				t.Errorf("panel %q target %s datasource = %+v; want uid %s", p.Title, tg.RefID, tg.Datasource, grafanaDatasource)
			}
			exprs = append(exprs, tg.Expr)
			for _, problem := range checkPromExpr(tg.Expr, rules) {
				t.Errorf("panel %q target %s: %s", p.Title, tg.RefID, problem)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if v.Datasource == nil || v.Datasource.UID != grafanaDatasource {
			t.Errorf("variable %s datasource = %+v; want uid %s", v.Name, v.Datasource, grafanaDatasource)
		}
		for _, problem := range checkPromExpr(v.Definition, rules) {
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
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel shows %s", want)
		}
	}
}
