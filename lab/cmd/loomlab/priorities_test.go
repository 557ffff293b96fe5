package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench/priorities"
)

// TestPrioritiesScenario runs the priorities scenario's fixed arms with
// shorter windows, as processes: through the flood, the critical class
// waits behind the batch in one FIFO queue and not with priorities and a
// share; among the tenants, the noisy one takes its clients' share in one
// FIFO queue and a fair one with flows by tenant. The full run, with
// adaptive arms, is loomgate bench --scenario priorities.
func TestPrioritiesScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four arms of load for about a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := priorities.Options{Warmup: 4 * time.Second, Window: 8 * time.Second}
	run := func(name string, arms ...int) []priorities.Result {
		c, ok := priorities.Lookup(name)
		if !ok {
			t.Fatalf("no case %s", name)
		}
		var picked []priorities.Arm
		for _, i := range arms {
			picked = append(picked, c.Arms[i])
		}
		c.Arms = picked
		res, err := priorities.Run(ctx, c, processes{exe: labBinary(t)}, opts)
		var md strings.Builder
		priorities.WriteMarkdown(&md, res)
		t.Log("\n" + md.String())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	flood := run("flood", 0, 2)
	fifo, shared := flood[0].Classes[0], flood[1].Classes[0]
	// One FIFO queue: critical waits behind 200 batch clients on 20
	// permits, about half a second.
	if fifo.P99 < 300*time.Millisecond {
		t.Errorf("FIFO: critical p99 %v; want the batch's wait, at least 300 ms", fifo.P99)
	}
	// A share of 50% holds 10 permits for its 10 clients: about 200 rps at
	// the pool's 50 ms.
	if shared.RPS < 150 || shared.P99 > 200*time.Millisecond {
		t.Errorf("priorities and a share: critical %.0f rps, p99 %v; want at least 150 rps, p99 at most 200 ms", shared.RPS, shared.P99)
	}
	// The batch takes the rest: the pool's 400 rps, whoever gets them.
	for _, r := range flood {
		if r.Total < 320 {
			t.Errorf("%s: total %.0f rps; want near the pool's 400", r.Arm, r.Total)
		}
	}

	tenants := run("tenants", 0, 1)
	if j := tenants[0].Jain; j > 0.7 {
		t.Errorf("FIFO: Jain's index %.3f; want the noisy tenant's 10 to 1, well below 0.7", j)
	}
	if j := tenants[1].Jain; j < 0.9 {
		t.Errorf("flows by tenant: Jain's index %.3f; want at least 0.9", j)
	}
}
