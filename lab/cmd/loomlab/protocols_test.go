package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/stub"
	"github.com/loomgate/loomgate/lab/stub/stubtest"
)

// TestHTTP2ThroughTheSidecar drives h2c and gRPC through a real sidecar to
// a real stub, in both pacings. Closed: eight users on two connections
// behind a fixed limit of 2 at 100 ms get the limit's 20 rps, and the
// queue of six shows in the sidecar's queue time. Open: 100 arrivals a
// second at that limit with a queue of 1 are mostly refused, and every
// request due is counted once, each refusal as a refusal: a 503's
// count, with its Retry-After, and as many as the sidecar itself counted.
func TestHTTP2ThroughTheSidecar(t *testing.T) {
	const workers, hold = 2, 100 * time.Millisecond
	for _, p := range []bench.Proto{bench.H2C, bench.GRPC} {
		t.Run(string(p), func(t *testing.T) {
			closed := bench.Scenario{
				Name: "closed", Path: "/wait?ms=100", Levels: []int{8},
				Arms: []bench.Arm{{Label: "fixed 2", Sidecar: bench.Sidecar{Mode: "fixed", Workers: workers},
					Capacity: bench.Capacity{Limit: workers, Hold: hold}, Proto: p}},
				Warmup: 500 * time.Millisecond, Window: 1500 * time.Millisecond,
			}
			res, err := bench.RunScenario(context.Background(), closed, inProcess{}, bench.ScenarioOptions{Conns: 2})
			if err != nil || len(res) != 1 {
				t.Fatalf("RunScenario = %d results, %v", len(res), err)
			}
			r := res[0]
			t.Logf("closed c8: %.1f rps, sidecar %+v", r.RPS, r.Sidecar)
			if r.Arm != "fixed 2 over "+string(p)+", 2 connections" {
				t.Errorf("arm %q; want the protocol and connections named", r.Arm)
			}
			// 2 / 0.1 s = 20 rps; the margins allow two shared cores,
			// not a sidecar that lets all eight through (80 rps).
			if r.RPS < 14 || r.RPS > 22 || r.Errors.Total() != 0 {
				t.Errorf("closed c8: %.1f rps, errors %+v; want 14..22 (2 / 100 ms = 20), none", r.RPS, r.Errors)
			}
			sc := r.Sidecar
			if sc == nil || !sc.Loomgate || sc.Limit != workers || sc.PeakInFlight != workers {
				t.Fatalf("closed c8: sidecar %+v; want its limit of %d, reached", sc, workers)
			}
			// Six of eight wait: three turns of 100 ms. A service time
			// under 100 ms would be streams cut at the window's end
			// counted in it.
			if sc.QueueWait < 200*time.Millisecond || sc.PeakQueued < 4 || sc.Service < 95*time.Millisecond || sc.CPUPerRequest <= 0 {
				t.Errorf("closed c8: queue %v, peak queued %d, service %v, CPU/req %v; want about 300ms of queue for 100ms of service, and the CPU read",
					sc.QueueWait, sc.PeakQueued, sc.Service, sc.CPUPerRequest)
			}

			open := bench.Scenario{
				Name: "open", Path: "/wait?ms=100", Rates: []float64{100},
				Arms:   []bench.Arm{{Label: "fixed 2, queue 1", Sidecar: bench.Sidecar{Mode: "fixed", Workers: workers, QueueSize: 1}, Proto: p}},
				Warmup: 300 * time.Millisecond, Window: time.Second,
			}
			ores, err := bench.RunOpenScenario(context.Background(), open, inProcess{}, bench.ScenarioOptions{})
			if err != nil || len(ores) != 1 {
				t.Fatalf("RunOpenScenario = %d results, %v", len(ores), err)
			}
			o := ores[0]
			t.Logf("open 100 rps: counts %+v, Retry-After %+v, sidecar outcomes %v", o.Counts, o.RetryAfter, o.Sidecar.Outcomes)
			c := o.Counts
			if o.Due != 100 || c.Total() != o.Due || c.OK+c.Unavailable != o.Due {
				t.Errorf("open 100 rps: due %d, counts %+v; want 100, each answered or refused once", o.Due, c)
			}
			// At most 20 served a second, and one waiting: 70 or more of
			// 100 refused.
			if c.OK < 10 || c.OK > 30 || c.Unavailable < 70 || o.RetryAfter.N != c.Unavailable {
				t.Errorf("open 100 rps: %d served, %d refused, %d with Retry-After; want about 20 served, every refusal with Retry-After",
					c.OK, c.Unavailable, o.RetryAfter.N)
			}
			// The sidecar counts a refusal when it answers it, at once:
			// the window's edges, read by scrapes, may move a few.
			if sc := o.Sidecar; sc == nil || absDiff(sc.Rejected(), c.Unavailable) > 8 {
				t.Errorf("open 100 rps: the sidecar refused %v; want about the rig's %d", sc, c.Unavailable)
			}
		})
	}
}

func absDiff(a, b int64) int64 { return max(a-b, b-a) }

// TestBenchCommandProto: --proto and --conns reach the load, and the
// output says what the requests went over.
func TestBenchCommandProto(t *testing.T) {
	base := stubtest.Start(t, stub.Config{})
	var stdout, stderr bytes.Buffer
	code := benchCommand(context.Background(), []string{
		"--url", base + "/wait?ms=10", "--proto", "grpc", "--conns", "2", "-c", "4", "--warmup", "100ms", "--window", "500ms",
	}, nil, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("bench --proto grpc = %d\nstderr:\n%s", code, stderr.String())
	}
	if want := "/wait?ms=10 over grpc on 2 connections | 4 |"; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
	}
	if want := "4 users on " + base + "/wait?ms=10 over grpc on 2 connections"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
}

// TestBenchCommandProtoScenarioRefused: a scenario whose path the stub's
// gRPC service does not have is refused before anything is launched.
func TestBenchCommandProtoScenarioRefused(t *testing.T) {
	launched := bench.LauncherFunc(func(context.Context, bench.Arm) (bench.Target, func(), error) {
		t.Error("launched a scenario that cannot run")
		return bench.Target{}, nil, context.Canceled
	})
	var stderr bytes.Buffer
	code := benchCommand(context.Background(), []string{"--scenario", "pool", "--proto", "grpc"}, launched, io.Discard, &stderr)
	if want := "over grpc its path /db?ms=200 is no method of the stub's"; code != 2 || !strings.Contains(stderr.String(), want) {
		t.Errorf("bench --scenario pool --proto grpc = %d, %q; want 2 and %q", code, stderr.String(), want)
	}
}
