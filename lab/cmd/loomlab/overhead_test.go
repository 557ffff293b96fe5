package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/bench/overhead"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// TestOverheadScenario runs the overhead scenario cut down to a few
// seconds a measurement and tens of requests held: every arm starts as a
// process of its own, is measured from /proc and lands in the table. The
// figures themselves are the full scenario's business (loomgate bench
// --scenario overhead), not a test's.
func TestOverheadScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an upstream and four proxies")
	}
	haproxy := sidecartest.RequireTool(t, "haproxy", "haproxy")
	nginx := sidecartest.RequireTool(t, "nginx", "nginx")
	wrk := sidecartest.RequireTool(t, "wrk", "wrk")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := overhead.Run(ctx, overhead.Config{
		Binary: labBinary(t), HAProxy: haproxy, Nginx: nginx, Wrk: wrk,
		Duration: time.Second, CPUWindow: time.Second, CPUConcurrency: 4, CPURate: 300, Rounds: 2, ProcessRounds: 1, LatencyLevels: []int{4}, LatencyDelay: 20 * time.Millisecond,
		Held: 40, HoldDelay: 300 * time.Millisecond, FixedWorkers: 10, Procs: true, Protocols: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]overhead.Row{}
	for _, r := range res.Rows {
		names[r.Name] = r
	}
	for _, name := range []string{"direct", "loomgate", "bare fasthttp", "HAProxy", "nginx"} {
		r, ok := names[name]
		switch {
		case !ok:
			t.Errorf("no %s row; skipped: %v", name, res.Skipped)
		case r.CPUPerRequest <= 0 || r.RPS <= 0 || r.CPUAtRate <= 0:
			t.Errorf("%s: CPU per request %v at %.0f rps, %v at 300 rps; want all measured", name, r.CPUPerRequest, r.RPS, r.CPUAtRate)
		case r.CPURange[0] > r.CPUPerRequest || r.CPUPerRequest > r.CPURange[1]:
			t.Errorf("%s: CPU per request %v outside its rounds' range %v", name, r.CPUPerRequest, r.CPURange)
		case name != "direct" && r.RSSUnbounded <= r.Idle/2:
			t.Errorf("%s: resident %d bytes held, %d idle; want the held figure read", name, r.RSSUnbounded, r.Idle)
		case len(r.Latency) != 1 || r.Latency[0].P50 < 20*time.Millisecond:
			t.Errorf("%s: latency %+v; want p50 above the upstream's 20 ms", name, r.Latency)
		}
	}
	if r := names["loomgate"]; r.RSSFixed == 0 {
		t.Error("loomgate has no fixed-mode memory figure")
	}
	// The GOMAXPROCS comparison: two loomgates and HAProxy at least, the
	// quota arms where a cgroup can be made (the notes say why not).
	if len(res.Procs) < 3 {
		t.Errorf("GOMAXPROCS comparison: %d rows, notes %v; want at least 3", len(res.Procs), res.ProcsNotes)
	}
	for _, r := range res.Procs {
		if r.CPUPerRequest <= 0 || r.CPUAtRate <= 0 || len(r.CPURounds) != 2 {
			t.Errorf("%s: CPU per request %v, %v at 300 rps, rounds %v; want two rounds measured", r.Name, r.CPUPerRequest, r.CPUAtRate, r.CPURounds)
		}
	}
	// The HTTP/2 comparison: h2c then gRPC, each through loomgate, the
	// bare Go proxy and HAProxy, every round measured.
	if len(res.Protocols) != 2 || res.Protocols[0].Proto != "h2c" || res.Protocols[1].Proto != "grpc" {
		t.Errorf("HTTP/2 comparison: %+v; want h2c then grpc", res.Protocols)
	}
	for _, pr := range res.Protocols {
		var got []string
		for _, r := range pr.Rows {
			got = append(got, r.Name)
			if r.CPUPerRequest <= 0 || r.RPS <= 0 || len(r.CPURounds) != 2 || r.Lost > 0 {
				t.Errorf("%s %s: CPU per call %v at %.0f calls/s, rounds %v, %d lost; want two rounds measured", pr.Proto, r.Name, r.CPUPerRequest, r.RPS, r.CPURounds, r.Lost)
			}
		}
		if want := []string{"loomgate", "bare Go", "HAProxy"}; !slices.Equal(got, want) {
			t.Errorf("%s: arms %q; want %q", pr.Proto, got, want)
		}
	}
	if res.RigRPS <= 0 || res.WrkRPS <= 0 {
		t.Errorf("rig %.0f rps, wrk %.0f rps; want both measured", res.RigRPS, res.WrkRPS)
	}
	var md strings.Builder
	if err := overhead.WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + md.String())
}
