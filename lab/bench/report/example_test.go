package report_test

import (
	"fmt"
	"os"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/report"
)

func ExampleWriteMarkdown() {
	results := []bench.Result{
		{Arm: "fixed 200", Concurrency: 1000, RPS: 984, Mean: 1017 * time.Millisecond, P50: 1014 * time.Millisecond,
			P95: 1030 * time.Millisecond, P99: 1042 * time.Millisecond, Max: 1100 * time.Millisecond},
		{Arm: "unbounded", Concurrency: 1000, RPS: 4860, Mean: 206 * time.Millisecond, P50: 204 * time.Millisecond,
			P95: 214 * time.Millisecond, P99: 224 * time.Millisecond, Max: 254 * time.Millisecond,
			Errors: bench.Errors{Status: 3}},
	}
	report.WriteMarkdown(os.Stdout, results)
	// Output:
	// | arm | c | rps | mean | p50 | p95 | p99 | max | errors | physics |
	// | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |
	// | fixed 200 | 1000 | 984 | 1.02 s | 1.01 s | 1.03 s | 1.04 s | 1.10 s | 0 | ok |
	// | unbounded | 1000 | 4860 | 206 ms | 204 ms | 214 ms | 224 ms | 254 ms | 3 (3 status) | ok |
}

func ExampleNarrative() {
	row := func(arm string, c int, rps float64, p50 time.Duration) bench.Result {
		return bench.Result{Scenario: "crossover", Arm: arm, Concurrency: c, RPS: rps, Mean: p50, P50: p50}
	}
	results := []bench.Result{
		row("fixed 200", 200, 975, 204*time.Millisecond),
		row("fixed 200", 1000, 982, 1016*time.Millisecond),
		row("unbounded", 200, 978, 204*time.Millisecond),
		row("unbounded", 1000, 4790, 208*time.Millisecond),
	}
	for _, s := range report.Narrative(results) {
		fmt.Println(s)
	}
	// Output:
	// fixed 200 pins throughput at 978 rps from c200 on; from there only latency grows, p50 204 ms at c200 to 1.02 s at c1000.
	// unbounded reaches 4790 rps at c1000 with p50 208 ms, still climbing at the highest level.
	// fixed 200 and unbounded diverge at c1000: unbounded serves 4.9× the throughput of fixed 200 (4790 vs 982 rps), with p50 208 ms against 1.02 s.
	// Physics check: all 4 rows within 10% of C/R and of limit/service.
}
