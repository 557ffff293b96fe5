package bench_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/loomgate/loomgate/bench"
	"github.com/loomgate/loomgate/stub"
)

func ExamplePhysics_Check() {
	// Fixed 200 at c1000 in front of a 200 ms call: saturated, so the
	// throughput should sit at 200 / 0.203 s.
	ok := bench.Physics{Concurrency: 1000, RPS: 983, Mean: 1017 * time.Millisecond, Limit: 200, Service: 203 * time.Millisecond}.Check()
	fmt.Printf("expected %.0f rps, off %+.1f%%, flagged %v\n", ok.Expected, 100*ok.Off, ok.Flagged)

	// The same limit, but throughput far below it: something else caps it.
	hidden := bench.Physics{Concurrency: 1000, RPS: 590, Mean: 1695 * time.Millisecond, Limit: 200, Service: 200 * time.Millisecond}.Check()
	fmt.Println(hidden.Reason)
	// Output:
	// expected 985 rps, off -0.2%, flagged false
	// 590 rps is 41% below limit/service = 200 / 200 ms = 1000 rps although c1000 exceeds the limit: something other than the limit caps throughput
}

func ExampleWriteMarkdown() {
	results := []bench.Result{
		{Arm: "fixed 200", Concurrency: 1000, RPS: 984, Mean: 1017 * time.Millisecond, P50: 1014 * time.Millisecond,
			P95: 1030 * time.Millisecond, P99: 1042 * time.Millisecond, Max: 1100 * time.Millisecond},
		{Arm: "unbounded", Concurrency: 1000, RPS: 4860, Mean: 206 * time.Millisecond, P50: 204 * time.Millisecond,
			P95: 214 * time.Millisecond, P99: 224 * time.Millisecond, Max: 254 * time.Millisecond,
			Errors: bench.Errors{Status: 3}},
	}
	bench.WriteMarkdown(os.Stdout, results)
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
	for _, s := range bench.Narrative(results) {
		fmt.Println(s)
	}
	// Output:
	// fixed 200 pins throughput at 978 rps from c200 on; from there only latency grows, p50 204 ms at c200 to 1.02 s at c1000.
	// unbounded reaches 4790 rps at c1000 with p50 208 ms, still climbing at the highest level.
	// fixed 200 and unbounded diverge at c1000: unbounded serves 4.9× the throughput of fixed 200 (4790 vs 982 rps), with p50 208 ms against 1.02 s.
	// Physics check: all 4 rows within 10% of C/R and of limit/service.
}

func ExampleRun() {
	s, _ := stub.New(stub.Config{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	defer s.Shutdown(context.Background())

	// Four virtual users against a 50 ms endpoint: 4 / 0.05 s = 80 rps.
	res, err := bench.Run(context.Background(), bench.Config{
		URL:         "http://" + ln.Addr().String() + "/wait?ms=50",
		Concurrency: 4,
		Warmup:      200 * time.Millisecond,
		Window:      time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("near 80 rps:", res.RPS > 60 && res.RPS < 90)
	fmt.Println("errors:", res.Errors.Total())
	fmt.Println("physics flagged:", res.Physics.Flagged)
	// Output:
	// near 80 rps: true
	// errors: 0
	// physics flagged: false
}

func ExampleRunScenario() {
	// A launcher that starts only the stub and points traffic straight at
	// it; the loomgate command's launcher starts a sidecar in front too.
	launch := bench.LauncherFunc(func(ctx context.Context, arm bench.Arm) (bench.Target, func(), error) {
		s, err := stub.New(arm.Stub)
		if err != nil {
			return bench.Target{}, nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return bench.Target{}, nil, err
		}
		go s.Serve(ln)
		return bench.Target{URL: "http://" + ln.Addr().String()}, func() { s.Shutdown(context.Background()) }, nil
	})
	sc := bench.Scenario{
		Name: "tiny", Path: "/db?ms=20", Levels: []int{2},
		Arms: []bench.Arm{{Label: "pool 1", Stub: stub.Config{DBPool: 1},
			Capacity: bench.Capacity{Limit: 1, Hold: 20 * time.Millisecond}}},
	}
	results, err := bench.RunScenario(context.Background(), sc, launch,
		bench.ScenarioOptions{Warmup: 100 * time.Millisecond, Window: 500 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range results {
		fmt.Printf("%s c%d: ceiling %.0f rps\n", r.Arm, r.Concurrency, r.Physics.Ceiling)
	}
	// Output:
	// pool 1 c2: ceiling 50 rps
}
