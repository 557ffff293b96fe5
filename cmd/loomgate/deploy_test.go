package main

import (
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
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v2"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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

func (d yamlDoc) kind() string {
	m, _ := d.raw.(map[any]any)
	k, _ := m["kind"].(string)
	return k
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

// The part of the Kubernetes API the checks read.
type (
	k8sMeta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	k8sDeployment struct {
		Metadata k8sMeta `yaml:"metadata"`
		Spec     struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template struct {
				Metadata k8sMeta    `yaml:"metadata"`
				Spec     k8sPodSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	k8sPodSpec struct {
		TerminationGracePeriodSeconds *int64         `yaml:"terminationGracePeriodSeconds"`
		InitContainers                []k8sContainer `yaml:"initContainers"`
		Containers                    []k8sContainer `yaml:"containers"`
	}
	k8sContainer struct {
		Name           string      `yaml:"name"`
		Image          string      `yaml:"image"`
		RestartPolicy  string      `yaml:"restartPolicy"`
		Ports          []k8sPort   `yaml:"ports"`
		Env            []k8sEnvVar `yaml:"env"`
		StartupProbe   *k8sProbe   `yaml:"startupProbe"`
		ReadinessProbe *k8sProbe   `yaml:"readinessProbe"`
		LivenessProbe  *k8sProbe   `yaml:"livenessProbe"`
		Lifecycle      struct {
			PreStop *struct {
				Sleep *struct {
					Seconds int64 `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
	}
	k8sPort struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	}
	k8sEnvVar struct {
		Name      string  `yaml:"name"`
		Value     *string `yaml:"value"`
		ValueFrom any     `yaml:"valueFrom"`
	}
	k8sProbe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"` // a number or a port name
		} `yaml:"httpGet"`
	}
	k8sService struct {
		Metadata k8sMeta `yaml:"metadata"`
		Spec     struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort any    `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	k8sPodMonitor struct {
		Metadata k8sMeta `yaml:"metadata"`
		Spec     struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			PodMetricsEndpoints []struct {
				Port        string `yaml:"port"`
				Path        string `yaml:"path"`
				Interval    string `yaml:"interval"`
				Relabelings []struct {
					Action       string   `yaml:"action"`
					SourceLabels []string `yaml:"sourceLabels"`
					TargetLabel  string   `yaml:"targetLabel"`
					Replacement  string   `yaml:"replacement"`
				} `yaml:"relabelings"`
			} `yaml:"podMetricsEndpoints"`
		} `yaml:"spec"`
	}
	k8sKustomization struct {
		Resources []string `yaml:"resources"`
		Patches   []struct {
			Path string `yaml:"path"`
		} `yaml:"patches"`
	}
)

// TestDeployManifestsDecode decodes every YAML document under deploy/.
func TestDeployManifestsDecode(t *testing.T) {
	for _, f := range deployFiles(t, "kubernetes", ".yaml", ".yml") {
		docs := readYAML(t, f)
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
		for _, d := range docs {
			var h struct {
				APIVersion string  `yaml:"apiVersion"`
				Kind       string  `yaml:"kind"`
				Metadata   k8sMeta `yaml:"metadata"`
			}
			d.decode(t, &h)
			if h.APIVersion == "" || h.Kind == "" {
				t.Errorf("%s: apiVersion %q, kind %q; want both set", d, h.APIVersion, h.Kind)
			}
			if h.Kind != "Kustomization" && h.Metadata.Name == "" {
				t.Errorf("%s: %s without metadata.name", d, h.Kind)
			}
		}
	}
	for _, f := range deployFiles(t, "prometheus", ".yaml", ".yml") {
		readYAML(t, f)
	}
}

// k8sApp is what `kubectl apply -k dir` creates: the base's documents with
// the overlay's patches applied.
type k8sApp struct {
	dir  string
	docs []yamlDoc
}

func (a k8sApp) only(t testing.TB, kind string, v any) {
	t.Helper()
	var found []yamlDoc
	for _, d := range a.docs {
		if d.kind() == kind {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d objects of kind %s; want 1", a.dir, len(found), kind)
	}
	found[0].decode(t, v)
}

// renderKustomization builds dir (relative to the repository root) with
// kustomize's own build, the one `kubectl apply -k` embeds, so that what the
// tests check is what the cluster is sent.
func renderKustomization(t testing.TB, dir string) k8sApp {
	t.Helper()
	docs, err := kustomizeBuild(fromRepoRoot(dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return k8sApp{dir: dir, docs: docs}
}

// kustomizeBuild runs kustomize on the kustomization in dir, on disk.
func kustomizeBuild(dir string) ([]yamlDoc, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	var docs []yamlDoc
	for i, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		docs = append(docs, yamlDoc{file: filepath.ToSlash(dir) + " " + r.CurId().String(), index: i, raw: v})
	}
	return docs, nil
}

func yamlMapping(t testing.TB, d yamlDoc, v any, where string) map[any]any {
	t.Helper()
	m, ok := v.(map[any]any)
	if !ok {
		t.Fatalf("%s: %s is %T; want a mapping", d, where, v)
	}
	return m
}

func yamlOnlyKeys(t testing.TB, d yamlDoc, m map[any]any, where string, allowed ...string) {
	t.Helper()
	for k := range m {
		if ks, _ := k.(string); !slices.Contains(allowed, ks) {
			t.Errorf("%s: sets %s.%v; want only %v there (overlays change loomgate's env and nothing else)", d, where, k, allowed)
		}
	}
}

func yamlDig(m map[any]any, keys ...string) map[any]any {
	for _, k := range keys {
		m, _ = m[k].(map[any]any)
	}
	return m
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
// to it, one overlay per mode, and the overlays differ only in env.
func TestDeployKustomize(t *testing.T) {
	base := "deploy/kubernetes/base"
	var k k8sKustomization
	readYAML(t, base+"/kustomization.yaml")[0].decode(t, &k)
	var listed, present []string
	listed = append(listed, k.Resources...)
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
	var first []byte
	for _, o := range kustomizeOverlays(t) {
		file := "deploy/kubernetes/overlays/" + o + "/kustomization.yaml"
		doc := readYAML(t, file)[0]
		yamlOnlyKeys(t, doc, yamlMapping(t, doc, doc.raw, ""), "", "apiVersion", "kind", "resources", "patches")
		var ko k8sKustomization
		doc.decode(t, &ko)
		if !slices.Equal(ko.Resources, []string{"../../base"}) {
			t.Errorf("%s: resources = %q; want [../../base]", file, ko.Resources)
		}
		data, _ := yaml.Marshal(doc.raw)
		if first == nil {
			first = data
		} else if !bytes.Equal(first, data) {
			t.Errorf("%s differs from the other overlay's kustomization.yaml:\n%s\nwant the same, with the difference in the patch\n%s", file, data, first)
		}
	}

	// Rendered, the overlays are the same objects once loomgate's env is
	// set aside.
	var ref k8sApp
	for i, o := range kustomizeOverlays(t) {
		app := renderKustomization(t, "deploy/kubernetes/overlays/"+o)
		if i == 0 {
			ref = app
			continue
		}
		a, b := withoutEnv(t, ref), withoutEnv(t, app)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("overlays %s and %s differ in more than env:\n%s\nwant the same as\n%s", o, filepath.Base(ref.dir), b, a)
		}
	}
}

// withoutEnv renders an app's objects as YAML with every container's env
// removed.
func withoutEnv(t testing.TB, app k8sApp) string {
	t.Helper()
	var out strings.Builder
	for _, d := range app.docs {
		data, err := yaml.Marshal(d.raw)
		if err != nil {
			t.Fatal(err)
		}
		var c any
		if err := yaml.Unmarshal(data, &c); err != nil {
			t.Fatal(err)
		}
		if m, ok := c.(map[any]any); ok {
			pod := yamlDig(m, "spec", "template", "spec")
			for _, list := range []string{"initContainers", "containers"} {
				items, _ := pod[list].([]any)
				for _, it := range items {
					if cm, ok := it.(map[any]any); ok {
						delete(cm, "env")
					}
				}
			}
		}
		data, _ = yaml.Marshal(c)
		out.WriteString("---\n")
		out.Write(data)
	}
	return out.String()
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

func checkApp(t *testing.T, app k8sApp) {
	var dep k8sDeployment
	app.only(t, "Deployment", &dep)
	pod := dep.Spec.Template.Spec
	podLabels := dep.Spec.Template.Metadata.Labels

	// The sidecar: the container running the loomgate image, as a native
	// sidecar so that it starts before the application and stops after it.
	var lg *k8sContainer
	for i, c := range pod.InitContainers {
		if isLoomgateImage(c.Image) {
			lg = &pod.InitContainers[i]
		}
	}
	for _, c := range pod.Containers {
		if isLoomgateImage(c.Image) {
			t.Errorf("container %s runs %s as a regular container; want it in initContainers with restartPolicy: Always (a native sidecar)", c.Name, c.Image)
		}
	}
	if lg == nil {
		t.Fatalf("no initContainer runs a loomgate image; want loomgate as a native sidecar")
	}
	if lg.RestartPolicy != "Always" {
		t.Errorf("initContainer %s restartPolicy = %q; want Always (a native sidecar)", lg.Name, lg.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers; want 1, the application", len(pod.Containers))
	}
	appC := pod.Containers[0]

	if !labelsSubset(dep.Spec.Selector.MatchLabels, podLabels) || len(dep.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("Deployment selector %v does not select its pod labels %v", dep.Spec.Selector.MatchLabels, podLabels)
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
			ports[p.Name] = p.ContainerPort
		}
	}
	lgPorts := map[string]int{}
	for _, p := range lg.Ports {
		lgPorts[p.Name] = p.ContainerPort
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
		probe    *k8sProbe
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
		path := p.probe.HTTPGet.Path
		if p.want != "" && path != p.want {
			t.Errorf("loomgate %s path = %q; want %q", p.name, path, p.want)
		}
		if !slices.Contains(adminPaths, path) {
			t.Errorf("loomgate %s path = %q; want one of the admin endpoints %q", p.name, path, adminPaths)
		}
		if got := resolvePort(p.probe.HTTPGet.Port, lgPorts); got != adminPort {
			t.Errorf("loomgate %s port %v = %d; want the admin port %d", p.name, p.probe.HTTPGet.Port, got, adminPort)
		}
		if name, ok := p.probe.HTTPGet.Port.(string); !ok || name != "admin" {
			t.Errorf("loomgate %s port = %v; want the name admin", p.name, p.probe.HTTPGet.Port)
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
		appPorts = append(appPorts, p.ContainerPort)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Errorf("LOOMGATE_UPSTREAM host = %q; want 127.0.0.1, the application in the same pod", u.Hostname())
	}
	if !slices.Contains(appPorts, upPort) {
		t.Errorf("LOOMGATE_UPSTREAM port = %d; want one of container %s's ports %v", upPort, appC.Name, appPorts)
	}

	// Shutdown: the sidecar stops only once the application has, so the
	// grace period must cover the preStop sleeps and then loomgate's drain.
	grace := 30 * time.Second // Kubernetes' default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	var sleeps time.Duration
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if ps := c.Lifecycle.PreStop; ps != nil && ps.Sleep != nil {
			sleeps += time.Duration(ps.Sleep.Seconds) * time.Second
		}
	}
	if grace <= sleeps+cfg.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds = %v; want more than %v: preStop sleeps %v + LOOMGATE_DRAIN_TIMEOUT %v", grace, sleeps+cfg.DrainTimeout, sleeps, cfg.DrainTimeout)
	}

	// Resources: requests and a memory limit, the request within the limit.
	req, lim := lg.Resources.Requests, lg.Resources.Limits
	if req["cpu"] == "" || req["memory"] == "" || lim["memory"] == "" {
		t.Errorf("loomgate resources requests %v limits %v; want cpu and memory requests and a memory limit", req, lim)
	} else if reqBytes, limBytes := k8sBytes(t, req["memory"]), k8sBytes(t, lim["memory"]); reqBytes > limBytes {
		t.Errorf("loomgate memory request %s above its limit %s", req["memory"], lim["memory"])
	}

	// Service: clients reach the application through loomgate's http port.
	var svc k8sService
	app.only(t, "Service", &svc)
	if len(svc.Spec.Selector) == 0 || !labelsSubset(svc.Spec.Selector, podLabels) {
		t.Errorf("Service selector %v; want a non-empty subset of the pod labels %v", svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) == 0 {
		t.Errorf("Service has no ports")
	}
	for _, p := range svc.Spec.Ports {
		if name, ok := p.TargetPort.(string); !ok || name != "http" {
			t.Errorf("Service port %s targetPort = %v; want http, loomgate's traffic port", p.Name, p.TargetPort)
		}
		if got := resolvePort(p.TargetPort, ports); got != httpPort {
			t.Errorf("Service port %s targetPort %v = %d in the pod; want %d, loomgate's LOOMGATE_LISTEN port", p.Name, p.TargetPort, got, httpPort)
		}
	}

	// PodMonitor: selects these pods and scrapes loomgate's admin port.
	var pm k8sPodMonitor
	app.only(t, "PodMonitor", &pm)
	if sel := pm.Spec.Selector.MatchLabels; len(sel) == 0 || !labelsSubset(sel, podLabels) {
		t.Errorf("PodMonitor selector %v; want a non-empty subset of the pod labels %v", sel, podLabels)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor has %d endpoints; want 1, loomgate's admin port", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port != "admin" || lgPorts[ep.Port] != adminPort {
		t.Errorf("PodMonitor endpoint port = %q (%d); want admin (%d)", ep.Port, lgPorts[ep.Port], adminPort)
	}
	if ep.Path != "/metrics" {
		t.Errorf("PodMonitor endpoint path = %q; want /metrics", ep.Path)
	}
	if d, err := time.ParseDuration(ep.Interval); err != nil || d > 15*time.Second {
		t.Errorf("PodMonitor interval = %q; want 15s or less, which the rules' [1m] rates need", ep.Interval)
	}
}

func isLoomgateImage(image string) bool {
	name, _, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	return name == "loomgate"
}

// effectiveEnv is the container's LOOMGATE_* environment; every such
// variable must have a literal value, which the tests can check.
func effectiveEnv(t testing.TB, c k8sContainer) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, envPrefix) {
			continue
		}
		if e.Value == nil {
			t.Errorf("%s has no literal value; want one, which these tests can check against the binary", e.Name)
			continue
		}
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s is set twice in container %s", e.Name, c.Name)
		}
		env[e.Name] = *e.Value
	}
	return env
}

// resolvePort turns a port number or name into a number, -1 if unknown.
func resolvePort(port any, named map[string]int) int {
	switch p := port.(type) {
	case int:
		return p
	case string:
		if n, ok := named[p]; ok {
			return n
		}
	}
	return -1
}

// k8sBytes parses a Kubernetes memory quantity such as 64Mi.
func k8sBytes(t testing.TB, q string) int64 {
	t.Helper()
	var b byteSize
	if err := b.UnmarshalText([]byte(q)); err != nil {
		t.Fatalf("memory quantity %q: %v", q, err)
	}
	return int64(b)
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
