package bench_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/stub"
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
