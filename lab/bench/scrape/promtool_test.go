package scrape

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOpenHistogramQuantileMatchesPromtool has Prometheus itself evaluate
// histogram_quantile(0.99, rate(..._bucket[1m])) over series whose rate is
// known, and expects histogramQuantile's answer on those rates, to the last
// bit. Skipped without promtool (Debian package prometheus).
func TestOpenHistogramQuantileMatchesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found; install the Debian package prometheus")
	}
	// loomgate's classic buckets.
	bounds := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, inf}
	// Observations per 15 s scrape interval, bucket by bucket (not
	// cumulative).
	cases := [][]int{
		{0, 0, 0, 5, 40, 30, 10, 5, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0},   // p99 in (0.1, 0.25]
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 20, 300, 50, 0, 0, 0, 0, 0}, // queue waits of seconds
		{7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},      // first bucket
		{90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 11},    // +Inf bucket
		{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
	}
	var b strings.Builder
	b.WriteString("rule_files: []\nevaluation_interval: 15s\ntests:\n")
	for i, perStep := range cases {
		fmt.Fprintf(&b, "  - interval: 15s\n    input_series:\n")
		inc := make([]float64, len(bounds))
		cum := 0
		for k, n := range perStep {
			cum += n
			le := strconv.FormatFloat(bounds[k], 'g', -1, 64)
			// Every series starts well above zero, so that rate's
			// extrapolation is the same for all buckets.
			fmt.Fprintf(&b, "      - series: 'h_bucket{case=\"%d\",le=\"%s\"}'\n        values: '%d+%dx12'\n", i, le, 100000+cum*10, cum)
			// [1m] at 2m spans the samples at 1m and 2m, 4 intervals;
			// divided by the range in seconds as rate does, so that the
			// floats are Prometheus's to the last bit.
			inc[k] = float64(4*cum) / 60
		}
		want := histogramQuantile(0.99, bounds, inc)
		fmt.Fprintf(&b, "    promql_expr_test:\n      - expr: histogram_quantile(0.99, rate(h_bucket{case=\"%d\"}[1m]))\n        eval_time: 2m\n", i)
		fmt.Fprintf(&b, "        exp_samples:\n          - labels: '{case=\"%d\"}'\n            value: %s\n", i, strconv.FormatFloat(want, 'g', -1, 64))
	}
	file := filepath.Join(t.TempDir(), "quantile_test.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool disagrees with histogramQuantile: %v\n%s\n%s", err, out, b.String())
	}
}
