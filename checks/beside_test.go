package checks

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/loomgate/loomgate/sidecar"
)

// besideExample is a team's own Spring Boot Deployment and Service, with
// the sidecar Component and the application's move off 8080.
const besideExample = "deploy/kubernetes/examples/spring-boot"

// TestDeployBesideExistingDeployment renders the example as `kubectl apply
// -k` would and checks the pod it creates: loomgate as a native sidecar on
// 8080, the application off it on loopback where LOOMGATE_UPSTREAM sends,
// the Service reaching loomgate, the NetworkPolicy open on loomgate's
// ports only, and the sidecar the same as the base's.
func TestDeployBesideExistingDeployment(t *testing.T) {
	app := renderKustomization(t, besideExample)
	if err := checkBeside(app); err != nil {
		t.Error(err)
	}

	dep := only[*appsv1.Deployment](t, app)
	lg, err := loomgateContainer(dep)
	if err != nil {
		t.Fatal(err)
	}
	if want := "registry.example.com/platform/loomgate:v1.0.0"; lg.Image != want {
		t.Errorf("loomgate image = %q; want %q, set by the example's images:", lg.Image, want)
	}
	orders := dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range orders.Env {
		env[e.Name] = e.Value
	}
	if env["SERVER_PORT"] != "8081" || env["SERVER_ADDRESS"] != "127.0.0.1" {
		t.Errorf("orders env %v; want SERVER_PORT=8081 and SERVER_ADDRESS=127.0.0.1", env)
	}

	// The sidecar is the base's, but for its port names, its image and
	// the Deployment it is in: one to tune, one to keep in step.
	base := only[*appsv1.Deployment](t, renderKustomization(t, "deploy/kubernetes/base"))
	baseLG, err := loomgateContainer(base)
	if err != nil {
		t.Fatal(err)
	}
	want, got := normalizeSidecar(*baseLG), normalizeSidecar(*lg)
	if !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("the Component's loomgate differs from the base's in more than port names and image (- base, + component):\n%s", diff.Diff(want, got))
	}
}

// normalizeSidecar is c with the base's port names, no image and its env
// sorted, for comparing the Component's sidecar with the base's.
func normalizeSidecar(c corev1.Container) corev1.Container {
	c = *c.DeepCopy()
	c.Image = ""
	names := map[string]string{"loomgate": "http", "loomgate-admin": "admin"}
	for i, p := range c.Ports {
		if n, ok := names[p.Name]; ok {
			c.Ports[i].Name = n
		}
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil {
			if n, ok := names[p.HTTPGet.Port.StrVal]; ok {
				p.HTTPGet.Port = intstr.FromString(n)
			}
		}
	}
	slices.SortStableFunc(c.Env, func(a, b corev1.EnvVar) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return c
}

// checkBeside returns what is wrong with a Deployment and Service that the
// sidecar Component was added to.
func checkBeside(app k8sApp) error {
	var errs []error
	var dep *appsv1.Deployment
	var svcs []*corev1.Service
	var policies []*networkingv1.NetworkPolicy
	for _, o := range app.objects {
		switch v := o.(type) {
		case *appsv1.Deployment:
			dep = v
		case *corev1.Service:
			svcs = append(svcs, v)
		case *networkingv1.NetworkPolicy:
			policies = append(policies, v)
		}
	}
	if dep == nil || len(svcs) != 1 {
		return fmt.Errorf("%s: want one Deployment and one Service", app.dir)
	}
	pod := dep.Spec.Template.Spec
	lg, err := loomgateContainer(dep)
	if err != nil {
		return err
	}
	if lg.RestartPolicy == nil || *lg.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		errs = append(errs, fmt.Errorf("initContainer %s restartPolicy = %q; want Always (a native sidecar)", lg.Name, deref(lg.RestartPolicy)))
	}
	cfg, err := sidecar.ParseEnv(environOf(*lg))
	if err != nil {
		return fmt.Errorf("loomgate would exit 2: %v", err)
	}
	listen, err := portOf(cfg.Listen)
	if err != nil {
		return err
	}
	admin, err := portOf(cfg.AdminListen)
	if err != nil {
		return err
	}
	lgPorts := map[string]int{}
	for _, p := range lg.Ports {
		lgPorts[p.Name] = int(p.ContainerPort)
	}
	if lgPorts["loomgate"] != listen || lgPorts["loomgate-admin"] != admin {
		errs = append(errs, fmt.Errorf("loomgate ports %v; want loomgate %d (LOOMGATE_LISTEN) and loomgate-admin %d (LOOMGATE_ADMIN_LISTEN)", lgPorts, listen, admin))
	}

	// The application: off loomgate's ports, on the one LOOMGATE_UPSTREAM
	// names, and probed elsewhere than on loopback.
	u, err := url.Parse(cfg.Upstream)
	if err != nil {
		return err
	}
	upstream, _ := strconv.Atoi(u.Port())
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		errs = append(errs, fmt.Errorf("LOOMGATE_UPSTREAM host %q; want 127.0.0.1, the application in the same pod", u.Hostname()))
	}
	names := map[string]string{}
	var appPorts []int
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			n := int(p.ContainerPort)
			appPorts = append(appPorts, n)
			if n == listen || n == admin {
				errs = append(errs, fmt.Errorf("containers %s and %s both declare port %d; move %s off it (SERVER_PORT=%d for Spring Boot) and keep LOOMGATE_UPSTREAM on its new port", c.Name, lg.Name, n, c.Name, upstream))
			}
			if other, dup := names[p.Name]; dup && p.Name != "" {
				errs = append(errs, fmt.Errorf("port name %q in containers %s and %s", p.Name, other, c.Name))
			}
			names[p.Name] = c.Name
		}
		for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if probe != nil && probe.HTTPGet != nil && resolvePort(probe.HTTPGet.Port, containerPorts(c)) == upstream {
				errs = append(errs, fmt.Errorf("container %s is probed on %d, the port it serves on loopback; the kubelet probes the pod IP: probe another port (Spring Boot: management.server.port)", c.Name, upstream))
			}
		}
	}
	if !slices.Contains(appPorts, upstream) {
		errs = append(errs, fmt.Errorf("LOOMGATE_UPSTREAM port %d; want one of the application's ports %v", upstream, appPorts))
	}

	// The Service resolves a named targetPort as the endpoints controller
	// does: the regular containers first, then the sidecars.
	for _, p := range svcs[0].Spec.Ports {
		got := -1
		if p.TargetPort.Type == intstr.Int {
			got = p.TargetPort.IntValue()
		} else {
			for _, list := range [][]corev1.Container{pod.Containers, pod.InitContainers} {
				for _, c := range list {
					if n, ok := containerPorts(c)[p.TargetPort.StrVal]; ok && got < 0 {
						got = n
					}
				}
			}
		}
		if got != listen {
			errs = append(errs, fmt.Errorf("Service port %s targetPort %s reaches %d; want %d, loomgate's", p.Name, p.TargetPort.String(), got, listen))
		}
	}

	// The NetworkPolicy, where there is one: these pods, loomgate's ports.
	for _, np := range policies {
		if !equality.Semantic.DeepEqual(np.Spec.PodSelector.MatchLabels, dep.Spec.Selector.MatchLabels) {
			errs = append(errs, fmt.Errorf("NetworkPolicy %s selects %v; want the Deployment's pods, %v", np.Name, np.Spec.PodSelector.MatchLabels, dep.Spec.Selector.MatchLabels))
		}
		var open []int
		for _, rule := range np.Spec.Ingress {
			if len(rule.Ports) == 0 {
				errs = append(errs, fmt.Errorf("NetworkPolicy %s has a rule for every port; want loomgate's only", np.Name))
			}
			for _, p := range rule.Ports {
				open = append(open, resolvePort(deref(p.Port), lgPorts))
			}
		}
		slices.Sort(open)
		if want := []int{listen, admin}; !slices.Equal(open, want) {
			errs = append(errs, fmt.Errorf("NetworkPolicy %s opens ports %v; want loomgate's, %v", np.Name, open, want))
		}
	}
	return errors.Join(errs...)
}

func containerPorts(c corev1.Container) map[string]int {
	m := map[string]int{}
	for _, p := range c.Ports {
		m[p.Name] = int(p.ContainerPort)
	}
	return m
}

// environOf is c's LOOMGATE_* environment as NAME=value.
func environOf(c corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, sidecar.EnvPrefix) {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

func portOf(listen string) (int, error) {
	_, p, err := net.SplitHostPort(listen)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

// TestDeployBesideBrokenCopy undoes one step of the example at a time and
// checks that checkBeside names what is then wrong.
func TestDeployBesideBrokenCopy(t *testing.T) {
	tests := []struct {
		name  string
		file  string // under the example
		edits [][2]string
		want  string
	}{
		{
			name:  "application still on 8080",
			file:  "kustomization.yaml",
			edits: [][2]string{{"patches:\n  - path: move-off-8080.yaml\n", ""}},
			want:  "containers orders and loomgate both declare port 8080",
		},
		{
			name:  "upstream on another port than the application's",
			file:  "move-off-8080.yaml",
			edits: [][2]string{{`value: "8081"`, `value: "8083"`}, {"containerPort: 8081", "containerPort: 8083"}},
			want:  "LOOMGATE_UPSTREAM port 8081; want one of the application's ports [8083 8082]",
		},
		{
			name:  "application probed on loopback",
			file:  "move-off-8080.yaml",
			edits: [][2]string{{"          readinessProbe:\n            httpGet:\n              port: management\n", "          readinessProbe:\n            httpGet:\n              port: app\n"}},
			want:  "container orders is probed on 8081",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.CopyFS(root, os.DirFS(fromRepoRoot("deploy", "kubernetes"))); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "examples", "spring-boot")
			editFile(t, filepath.Join(dir, tt.file), tt.edits...)
			app, err := kustomizeBuild(dir)
			if err == nil {
				err = checkBeside(app)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v; want an error with %q", err, tt.want)
			}
		})
	}
}
