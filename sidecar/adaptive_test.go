package sidecar

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/loomgate/loomgate/internal/upstreamtest"
)

// closedLoop runs n clients against url, each sending its next request
// when its answer arrives, until stop is closed.
func closedLoop(url string, n int, stop <-chan struct{}, wg *sync.WaitGroup) {
	(&flowLoad{clients: n}).run(url, time.Time{}, stop, wg)
}

// TestAdaptiveModeFindsAHiddenPool: behind MODE=adaptive, an upstream with
// a pool of 20 at 50 ms. Light load leaves admission open; when load rises
// to three times the pool, the sidecar caps admission near 20 and says why
// in its metrics and /advice.
func TestAdaptiveModeFindsAHiddenPool(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs load for about a minute")
	}
	up := upstreamtest.HiddenPool(t, 20, 50*time.Millisecond)
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM="+up, "LOOMGATE_MODE=adaptive", "LOOMGATE_QUEUE_TIMEOUT=30s"))
	var wg sync.WaitGroup
	light := make(chan struct{})
	closedLoop(s.URL+"/r", 4, light, &wg)
	time.Sleep(12 * time.Second)
	if l := s.Stats().Limit; l != 0 {
		t.Errorf("limit under light load = %d; want admission open", l)
	}
	close(light)
	heavy := make(chan struct{})
	defer func() { close(heavy); wg.Wait() }()
	closedLoop(s.URL+"/r", 60, heavy, &wg)
	deadline := time.Now().Add(60 * time.Second)
	for s.Stats().Limit == 0 {
		if time.Now().After(deadline) {
			resp, err := http.Get(s.AdminURL + "/advice?format=text")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("advice:\n%s", b)
			}
			t.Fatal("no limit 60s into three times the pool's load")
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Let the trials run a little, then judge where the limit stands.
	time.Sleep(10 * time.Second)
	doc := adviceDoc(t, s)
	if l := s.Stats().Limit; l < 14 || l > 30 {
		t.Errorf("adaptive limit = %d; want near the pool of 20 (14 to 30)", l)
		for _, ch := range doc.Adaptive.Changes {
			t.Logf("%s %d → %d %s: %s", ch.Time.Format(time.TimeOnly), ch.From, ch.To, ch.Reason, ch.Detail)
		}
	}
	if doc.Adaptive == nil || len(doc.Adaptive.Changes) == 0 || doc.Adaptive.Changes[0].Reason != "capacity_found" {
		t.Errorf("/advice adaptive = %+v; want its changes, the first capacity_found", doc.Adaptive)
	}
	if n := gathered(t, s.Sidecar, "loomgate_limit_changes_total", "capacity_found"); n < 1 {
		t.Errorf("loomgate_limit_changes_total{reason=capacity_found} = %v; want at least 1", n)
	}
	if got := gathered(t, s.Sidecar, "loomgate_limit", ""); got != float64(s.Stats().Limit) {
		t.Errorf("loomgate_limit = %v; want the limit in force, %d", got, s.Stats().Limit)
	}
}

// adviceDoc is the sidecar's /advice, decoded.
func adviceDoc(t *testing.T, s *running) AdviceDoc {
	t.Helper()
	resp, err := http.Get(s.AdminURL + "/advice")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc AdviceDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// gathered is the value of the sample of name whose one label (if any)
// has value label, from the sidecar's registry.
func gathered(t *testing.T, s *Sidecar, name, label string) float64 {
	t.Helper()
	if label == "" {
		return gatheredWith(t, s, name)
	}
	return gatheredWith(t, s, name, label)
}

// gatheredWith is the value of the sample of name whose labels have
// values, in the order of their names; with none, the first sample.
func gatheredWith(t *testing.T, s *Sidecar, name string, values ...string) float64 {
	t.Helper()
	mfs, err := s.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(values) > 0 && !slices.Equal(labelValues(m.GetLabel()), values) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no sample of %s%q", name, values)
	return 0
}

func labelValues(labels []*dto.LabelPair) []string {
	var v []string
	for _, l := range labels {
		v = append(v, l.GetValue())
	}
	return v
}

// TestAdaptiveDryRunLimitStaysNearThePool: adaptive mode in a dry run, in
// front of a pool of 20 at 50 ms, with three times the pool's load. The
// shadow's limit holds nothing back, so it must be judged on the requests
// the upstream really holds. Judged on the shadow's own permits, capped by
// its limit while service times were those of the whole load, each step up
// seemed to raise throughput in proportion and was kept: three in 20 s,
// and the would-be limit ran away. The upstream's throughput cannot follow
// a limit that holds nothing back in front of a full pool: a step up may
// pass on noise once, not run.
func TestAdaptiveDryRunLimitStaysNearThePool(t *testing.T) {
	// Its subject is the would-be limit's course over 30 s of three times
	// the pool's load: where the controller's first reading of the
	// capacity lands depends on the tick the load rises in, which load
	// beside it (another test's, under t.Parallel) moves.
	realTime(t, "about 45 seconds")
	up := upstreamtest.HiddenPool(t, 20, 50*time.Millisecond)
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM="+up, "LOOMGATE_MODE=adaptive", "LOOMGATE_DRY_RUN=true", "LOOMGATE_QUEUE_TIMEOUT=30s"))
	var wg sync.WaitGroup
	light := make(chan struct{})
	closedLoop(s.URL+"/r", 4, light, &wg)
	time.Sleep(12 * time.Second)
	close(light)
	heavy := make(chan struct{})
	defer func() { close(heavy); wg.Wait() }()
	closedLoop(s.URL+"/r", 60, heavy, &wg)
	limit := func() int { return int(gathered(t, s.Sidecar, "loomgate_limit", "")) }
	deadline := time.Now().Add(60 * time.Second)
	for limit() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no would-be limit 60s into three times the pool's load")
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(30 * time.Second)
	followed := gathered(t, s.Sidecar, "loomgate_limit_changes_total", "throughput_followed")
	if l := limit(); l < 14 || l > 30 || followed > 1 {
		t.Errorf("dry run's limit = %d after 30 s, %v steps up kept; want near the pool of 20 (14 to 30), at most one step up kept", l, followed)
		for _, ch := range s.adaptive.Changes() {
			t.Logf("%s %d → %d %s: %s", ch.At.Format(time.TimeOnly), ch.From, ch.To, ch.Reason, ch.Detail)
		}
	}
	if n := gathered(t, s.Sidecar, "loomgate_requests_total", "rejected_queue_timeout"); n != 0 {
		t.Errorf("dry run rejected %v requests for real; want none", n)
	}
}

// TestAdaptiveMaxBoundsTheOpenStart: ADAPTIVE_MAX=5 in front of an
// upstream that counts the requests it holds at once, with 20 clients from
// the start. Before its first limit adaptive mode admits every request,
// and the upstream held 20 where its operator had said 5: it now holds at
// most 5, and loomgate_limit says 5.
func TestAdaptiveMaxBoundsTheOpenStart(t *testing.T) {
	t.Parallel()
	var held, most atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := held.Add(1)
		defer held.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM=http://"+ln.Addr().String(), "LOOMGATE_MODE=adaptive", "LOOMGATE_ADAPTIVE_MAX=5"))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	closedLoop(s.URL+"/r", 20, stop, &wg)
	time.Sleep(2 * time.Second)
	if l := gathered(t, s.Sidecar, "loomgate_limit", ""); l != 5 {
		t.Errorf("loomgate_limit = %v; want ADAPTIVE_MAX, 5", l)
	}
	close(stop)
	wg.Wait()
	if m := most.Load(); m > 5 || m < 2 {
		t.Errorf("the upstream held %d at once; want at most ADAPTIVE_MAX, 5 (and the load to reach it)", m)
	}
}
