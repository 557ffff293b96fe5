package main

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench/fleet"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// TestFleetScenario runs the fleet scenario cut down to two replicas and
// two steps of seven seconds, below and above their capacity: HAProxy
// spreads the load, Prometheus evaluates the shipped rules, and the
// utilisation, the fleet alert and the HPA's answer follow the demand.
// The full run is loomgate bench --scenario fleet.
func TestFleetScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two replicas, HAProxy and Prometheus for about 20 s")
	}
	haproxy := sidecartest.RequireTool(t, "haproxy", "haproxy")
	prometheus := sidecartest.RequireTool(t, "prometheus", "prometheus")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := fleet.Run(ctx, fleet.Config{
		Binary: labBinary(t), HAProxy: haproxy, Prometheus: prometheus,
		Rules:    filepath.Join("..", "..", "..", "deploy", "prometheus", "rules.yml"),
		Replicas: 2, Workers: 5, Delay: 50 * time.Millisecond,
		Steps: []float64{0.4, 1.5}, Step: 7 * time.Second,
	})
	var md strings.Builder
	fleet.WriteMarkdown(&md, res)
	t.Log("\n" + md.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 2 {
		t.Fatalf("%d steps; want 2", len(res.Steps))
	}
	low, high := res.Steps[0], res.Steps[1]
	for i, s := range res.Steps {
		for j, u := range s.Pods {
			if math.IsNaN(u) || u <= 0 {
				t.Errorf("step %d: replica-%d utilisation %v; want one for every replica, HAProxy sharing the load", i+1, j+1, u)
			}
		}
	}
	// 40% of capacity, Poisson-ish arrivals: well under the 0.7 target.
	if !(low.Fleet > 0.2 && low.Fleet < 0.65) || low.HPA > res.Config.Replicas {
		t.Errorf("at 40%%: fleet utilisation %v, HPA %d replicas; want about 0.4 and no more than %d", low.Fleet, low.HPA, res.Config.Replicas)
	}
	// 150%: every permit busy, the queue full, rejections.
	if !(high.Fleet > 1) || high.HPA <= res.Config.Replicas || high.Saturated != 2 || high.Rejected <= 0 {
		t.Errorf("at 150%%: fleet utilisation %v, HPA %d replicas, %v saturated, %.1f rejected/s; want above 1, more than %d, 2 and some",
			high.Fleet, high.HPA, high.Saturated, high.Rejected, res.Config.Replicas)
	}
	// Read by two queries, possibly an evaluation apart.
	if math.Abs(high.Wanted-float64(high.HPA)) > 1 {
		t.Errorf("at 150%%: loomgate:workload_replicas_wanted:target70 = %v, the HPA's algorithm %d; want the rule to agree", high.Wanted, high.HPA)
	}
	if !strings.Contains(strings.Join(high.Alerts, ","), "LoomgateFleetSaturated") {
		t.Errorf("at 150%%: alerts %q; want LoomgateFleetSaturated pending or firing", high.Alerts)
	}
	// Prometheus runs with native histograms, which it then scrapes
	// instead of the classic buckets: a quantile here is the rule's
	// native branch summing every replica's histogram.
	if math.IsNaN(high.QueueP99) || high.QueueP99 <= 0 {
		t.Errorf("at 150%%: queue wait p99 across replicas %v; want one, from the native histograms", high.QueueP99)
	}
	if res.ScaleStep() != 1 {
		t.Errorf("ScaleStep = %d; want 1, the step past capacity", res.ScaleStep())
	}
}
