package checks

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"
)

// The autoscaling examples: one HPA through the Prometheus adapter, one
// KEDA ScaledObject, both on loomgate:utilisation:ratio_rate1m with the
// same target, both aimed at the base's Deployment.

const autoscalingDir = "deploy/kubernetes/autoscaling"

// readK8sObject decodes the single object of file strictly into T.
func readK8sObject[T runtime.Object](t *testing.T, file string) T {
	t.Helper()
	data, err := os.ReadFile(fromRepoRoot(file))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := yamlDocuments(data)
	if err != nil || len(docs) != 1 {
		t.Fatalf("%s: %d documents, %v; want one object", file, len(docs), err)
	}
	obj, err := decodeK8s(docs[0])
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	v, ok := obj.(T)
	if !ok {
		var zero T
		t.Fatalf("%s: a %T; want %T", file, obj, zero)
	}
	return v
}

// adapterConfig is the part of the Prometheus adapter's configuration the
// example uses, decoded strictly: a misspelt key is an error here as it is
// a silently missing metric there.
type adapterConfig struct {
	Rules []struct {
		SeriesQuery string `json:"seriesQuery"`
		Resources   struct {
			Overrides map[string]struct {
				Resource string `json:"resource"`
			} `json:"overrides"`
		} `json:"resources"`
		Name struct {
			As string `json:"as"`
		} `json:"name"`
		MetricsQuery string `json:"metricsQuery"`
	} `json:"rules"`
}

func TestDeployAutoscaling(t *testing.T) {
	dep := only[*appsv1.Deployment](t, renderKustomization(t, "deploy/kubernetes/base"))
	app := dep.Labels["app.kubernetes.io/name"]
	recorded := recordingRules(t)
	const signal = "loomgate:utilisation:ratio_rate1m"
	if !recorded[signal] {
		t.Fatalf("rules.yml records no %s, the signal both examples scale on", signal)
	}

	// The base does not autoscale by default.
	for _, r := range readKustomization(t, "deploy/kubernetes/base/kustomization.yaml").Resources {
		if strings.Contains(r, "autoscaling") {
			t.Errorf("base/kustomization.yaml lists %s; want the autoscaling examples optional", r)
		}
	}

	hpa := readK8sObject[*autoscalingv2.HorizontalPodAutoscaler](t, autoscalingDir+"/hpa.yaml")
	ref := hpa.Spec.ScaleTargetRef
	if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != dep.Name {
		t.Errorf("hpa.yaml scaleTargetRef = %+v; want the base's Deployment %s", ref, dep.Name)
	}
	if len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].Type != autoscalingv2.PodsMetricSourceType || hpa.Spec.Metrics[0].Pods == nil {
		t.Fatalf("hpa.yaml metrics = %+v; want one Pods metric", hpa.Spec.Metrics)
	}
	pods := hpa.Spec.Metrics[0].Pods
	if pods.Target.Type != autoscalingv2.AverageValueMetricType || pods.Target.AverageValue == nil {
		t.Fatalf("hpa.yaml target = %+v; want an AverageValue", pods.Target)
	}
	target := float64(pods.Target.AverageValue.MilliValue()) / 1000
	if target <= 0 || target >= 0.9 {
		t.Errorf("hpa.yaml target %v; want below 0.9, where the rules count a replica saturated", target)
	}
	if m := deref(hpa.Spec.MinReplicas); m < 2 {
		t.Errorf("hpa.yaml minReplicas = %d; want 2 or more, so that one bad pod never serves alone", m)
	}
	if b := hpa.Spec.Behavior; b == nil || b.ScaleDown == nil || deref(b.ScaleDown.StabilizationWindowSeconds) < 60 {
		t.Errorf("hpa.yaml behavior = %+v; want a scale-down stabilization window, so that a lull between bursts does not scale in", b)
	}

	// The adapter serves the recording rule under the HPA's metric name,
	// per pod.
	cm := readK8sObject[*corev1.ConfigMap](t, autoscalingDir+"/prometheus-adapter-config.yaml")
	var ac adapterConfig
	if err := sigsyaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &ac); err != nil {
		t.Fatalf("prometheus-adapter-config.yaml config.yaml: %v", err)
	}
	served := false
	for _, r := range ac.Rules {
		if r.Name.As != pods.Metric.Name {
			continue
		}
		served = true
		if names := promMetricNames(r.SeriesQuery); len(names) != 1 || names[0] != signal {
			t.Errorf("adapter rule %s seriesQuery %q; want %s", r.Name.As, r.SeriesQuery, signal)
		}
		if r.Resources.Overrides["namespace"].Resource != "namespace" || r.Resources.Overrides["pod"].Resource != "pod" {
			t.Errorf("adapter rule %s resources = %+v; want namespace and pod mapped, as a Pods metric needs", r.Name.As, r.Resources)
		}
		if !strings.Contains(r.MetricsQuery, "<<.Series>>") || !strings.Contains(r.MetricsQuery, "<<.LabelMatchers>>") {
			t.Errorf("adapter rule %s metricsQuery %q; want it to select <<.Series>>{<<.LabelMatchers>>}", r.Name.As, r.MetricsQuery)
		}
	}
	if !served {
		t.Errorf("the adapter's config serves no metric %s, the HPA's", pods.Metric.Name)
	}

	so := readK8sObject[*kedav1alpha1.ScaledObject](t, autoscalingDir+"/keda-scaledobject.yaml")
	if err := kedav1alpha1.ValidateTriggers(so.Spec.Triggers); err != nil {
		t.Errorf("keda-scaledobject.yaml triggers: %v", err)
	}
	if err := kedav1alpha1.CheckReplicaCountBoundsAreValid(so); err != nil {
		t.Errorf("keda-scaledobject.yaml: %v", err)
	}
	if r := so.Spec.ScaleTargetRef; r == nil || r.Name != dep.Name || r.Kind != "Deployment" {
		t.Errorf("keda-scaledobject.yaml scaleTargetRef = %+v; want the base's Deployment %s", r, dep.Name)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "prometheus" {
		t.Fatalf("keda-scaledobject.yaml triggers = %+v; want one prometheus trigger", so.Spec.Triggers)
	}
	tr := so.Spec.Triggers[0]
	if tr.MetricType != autoscalingv2.AverageValueMetricType {
		t.Errorf("KEDA trigger metricType %q; want AverageValue, so that KEDA asks for ceil(query / threshold) as the HPA does", tr.MetricType)
	}
	query := tr.Metadata["query"]
	for _, problem := range checkPromExpr(query, recorded) {
		t.Errorf("KEDA query: %s", problem)
	}
	if !regexp.MustCompile(`^\s*sum\(\s*` + regexp.QuoteMeta(signal) + `\{`).MatchString(query) {
		t.Errorf("KEDA query %q; want sum(%s{...}): the replicas' utilisation summed, which over the threshold is the HPA's replica count", query, signal)
	}
	if want := `workload="` + app + `"`; !strings.Contains(query, want) {
		t.Errorf("KEDA query %q; want %s, the label the PodMonitor copies from the pods", query, want)
	}
	if th, err := strconv.ParseFloat(tr.Metadata["threshold"], 64); err != nil || th != target {
		t.Errorf("KEDA threshold %q; want the HPA's target %v", tr.Metadata["threshold"], target)
	}
	if tr.Metadata["serverAddress"] == "" {
		t.Error("KEDA trigger has no serverAddress")
	}
	if deref(so.Spec.MinReplicaCount) != deref(hpa.Spec.MinReplicas) || deref(so.Spec.MaxReplicaCount) != hpa.Spec.MaxReplicas {
		t.Errorf("KEDA replicas %d-%d; want the HPA's %d-%d", deref(so.Spec.MinReplicaCount), deref(so.Spec.MaxReplicaCount), deref(hpa.Spec.MinReplicas), hpa.Spec.MaxReplicas)
	}
	if a := so.Spec.Advanced; a == nil || a.HorizontalPodAutoscalerConfig == nil ||
		!equality.Semantic.DeepEqual(a.HorizontalPodAutoscalerConfig.Behavior, hpa.Spec.Behavior) {
		t.Errorf("KEDA behavior differs from the HPA's; want the two examples to scale alike")
	}

	// The rule that shows the replicas an HPA would ask for uses the same
	// target.
	for _, r := range readRules(t) {
		if r.Record == "loomgate:workload_replicas_wanted:target70" {
			if !strings.Contains(r.Expr, "/ "+strconv.FormatFloat(target, 'g', -1, 64)+")") || target != 0.7 {
				t.Errorf("%s = %q, HPA target %v; want the two to agree", r.Record, r.Expr, target)
			}
		}
	}
}

// autoscalingQueries are the PromQL of the examples, for the checks that
// run every expression.
func autoscalingQueries(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(fromRepoRoot(autoscalingDir + "/keda-scaledobject.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decodeK8s(data)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tr := range obj.(*kedav1alpha1.ScaledObject).Spec.Triggers {
		if q := tr.Metadata["query"]; q != "" {
			out = append(out, q)
		}
	}
	return out
}
