package fleet

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestHPAReplicas(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		current int
		pods    []float64
		want    int
	}{
		{3, []float64{0.7, 0.7, 0.7}, 3},
		{3, []float64{0.75, 0.76, 0.77}, 3},             // within 10% of the target: no change
		{3, []float64{0.8, 0.8, 0.8}, 4},                // ceil(2.4 / 0.7)
		{3, []float64{1.6, 1.6, 1.6}, 7},                // ceil(4.8 / 0.7)
		{3, []float64{1.6, nan, 1.6}, 5},                // a pod without a value is left out
		{3, []float64{0.1, 0.1, 0.1}, 2},                // not below minReplicas
		{10, []float64{9, 9, 9, 9, 9, 9}, 20},           // nor above maxReplicas
		{3, []float64{nan, nan, nan}, 3},                // no data: no change
		{4, []float64{0.3, 0.3, 0.3, 0.3}, 2},           // ceil(1.2 / 0.7)
		{2, []float64{0.63, 0.77}, 2},                   // a mean of 0.7
		{2, []float64{0.2, 1.4}, 3},                     // ceil(1.6 / 0.7): the sum, not the busiest pod
		{2, []float64{0.62, 0.62}, 2},                   // 0.886 of the target: outside 10%, but min 2
		{5, []float64{0.62, 0.62, 0.62, 0.62, 0.62}, 5}, // ceil(3.1 / 0.7) = 5
	}
	for _, tt := range tests {
		if got := hpaReplicas(tt.current, tt.pods); got != tt.want {
			t.Errorf("hpaReplicas(%d, %v) = %d; want %d", tt.current, tt.pods, got, tt.want)
		}
	}
}

func TestShortenRules(t *testing.T) {
	in := `      - record: a:b:rate1m
        expr: sum(rate(x_total[1m])) / rate(y[1m])
      - alert: A
        expr: a:b:rate1m > 1
        for: 10m
`
	want := `      - record: a:b:rate1m
        expr: sum(rate(x_total[8s])) / rate(y[8s])
      - alert: A
        expr: a:b:rate1m > 1
        for: 3s
`
	if got := string(shortenRules([]byte(in), 8*time.Second)); got != want {
		t.Errorf("shortenRules =\n%s\nwant\n%s", got, want)
	}
}

func TestWriteMarkdown(t *testing.T) {
	nan := math.NaN()
	r := Result{
		Config:   Config{Replicas: 2, Workers: 10, Delay: 100 * time.Millisecond}.withDefaults(),
		Capacity: 200, Window: 8 * time.Second,
		Steps: []Step{
			{Demand: 0.5, Offered: 100, Served: 100, Pods: []float64{0.5, 0.5}, Fleet: 0.5, Wanted: 2, HPA: 2, QueueP99: 0},
			{Demand: 1.3, Offered: 260, Served: 200, Rejected: 60, Pods: []float64{1.8, nan}, Fleet: 1.8, Saturated: 1, Wanted: 3, HPA: 3, QueueP99: 0.12,
				Alerts: []string{"LoomgateFleetSaturated firing"}},
		},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 50% | 100 | 100 | 0.0 | 0.50 | 0.50 | 0.50 | 0 | 0 ms | 2 | 2 | none |",
		"| 130% | 260 | 200 | 60.0 | 1.80 | – | 1.80 | 1 | 120 ms | 3 | 3 | LoomgateFleetSaturated firing |",
		"would have added replicas at 130% of capacity (260 rps): fleet utilisation 1.80, 3 replicas asked for instead of 2.",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteMarkdown lacks %q:\n%s", want, b.String())
		}
	}
}
