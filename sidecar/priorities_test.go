package sidecar

import (
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/loomgate/loomgate/internal/upstreamtest"
)

// flowLoad is closed-loop clients on one path, with a header, counting
// their answers and timing them.
type flowLoad struct {
	path, header, value string
	clients             int

	mu        sync.Mutex
	ok        int
	latencies []time.Duration
}

// run sends from its clients until stop, counting only the answers that
// arrive from measureFrom on.
func (f *flowLoad) run(base string, measureFrom time.Time, stop <-chan struct{}, wg *sync.WaitGroup) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: f.clients}, Timeout: 60 * time.Second}
	for range f.clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", base+f.path, nil)
				if f.header != "" {
					req.Header.Set(f.header, f.value)
				}
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && !start.Before(measureFrom) {
					f.mu.Lock()
					f.ok++
					f.latencies = append(f.latencies, time.Since(start))
					f.mu.Unlock()
				}
			}
		})
	}
}

func (f *flowLoad) rate(d time.Duration) float64 { return float64(f.ok) / d.Seconds() }

func (f *flowLoad) p99() time.Duration {
	if len(f.latencies) == 0 {
		return 0
	}
	l := slices.Clone(f.latencies)
	slices.Sort(l)
	return l[len(l)*99/100]
}

// playFlows runs the flows side by side against a sidecar for warm-up and
// window, and returns the window's length.
func playFlows(t *testing.T, url string, warmup, window time.Duration, flows ...*flowLoad) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	from := time.Now().Add(warmup)
	for _, f := range flows {
		f.run(url, from, stop, &wg)
	}
	time.Sleep(warmup + window)
	close(stop)
	wg.Wait()
	return window
}

// Critical traffic through a flood: a pool of 20 at 50 ms (400 a second)
// behind WORKERS=20, 10 clients on /critical (a demand of 200 a second,
// half the capacity) beside 200 on /batch. In one FIFO queue critical
// requests wait behind the whole batch, about half a second. With
// priorities a freed permit goes to a critical waiter first, so it waits
// at most until the next permit frees: this pool answers in step, a
// permit frees every 50 ms, and critical gets about 10 / 75 ms. A share
// of 50 percent holds 10 permits for its 10 clients, so they never wait,
// and the batch runs on the other 10. In adaptive mode the share is of
// the limit the controller finds.
func TestPrioritiesThroughAFlood(t *testing.T) {
	realTime(t, "about 100 seconds")
	if raceEnabled {
		t.Skip("measures latency under load, which the race detector's slowdown changes")
	}
	up := upstreamtest.HiddenPool(t, 20, 50*time.Millisecond)
	base := []string{"LOOMGATE_UPSTREAM=" + up, "LOOMGATE_ROUTES=critical=/critical,batch=/batch"}
	fixed := []string{"LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=20"}
	priorities := []string{"LOOMGATE_PRIORITIES=critical=critical,batch=sheddable", "LOOMGATE_SHARES=critical=50"}
	for _, tt := range []struct {
		name        string
		env         []string
		minCritical float64       // answers a second
		maxP99      time.Duration // critical's, at least for the FIFO queue
		minTotal    float64
		warmup      time.Duration
	}{
		{"one FIFO queue", fixed, 0, 0, 360, 5 * time.Second},
		{"priorities", append(slices.Clone(fixed), priorities[0]), 90, 200 * time.Millisecond, 360, 5 * time.Second},
		{"priorities and a share", slices.Concat(fixed, priorities), 170, 200 * time.Millisecond, 360, 5 * time.Second},
		// Seen first at this peak, adaptive mode has no limit until its
		// probe finds one, about 16 seconds in (TestFirstSeenAtItsPeak):
		// priorities order waiters, and without a limit none wait.
		{"adaptive, priorities and a share", append(slices.Clone(priorities), "LOOMGATE_MODE=adaptive"), 150, 200 * time.Millisecond, 360, 25 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, testConfig(t, slices.Concat(base, tt.env)...))
			critical := &flowLoad{path: "/critical", clients: 10}
			batch := &flowLoad{path: "/batch", clients: 200}
			d := playFlows(t, s.URL, tt.warmup, 15*time.Second, critical, batch)
			c, b := critical.rate(d), batch.rate(d)
			t.Logf("critical %.0f rps, p99 %s; batch %.0f rps, p99 %s; total %.0f rps", c, critical.p99().Round(time.Millisecond),
				b, batch.p99().Round(time.Millisecond), c+b)
			if tt.minCritical == 0 {
				// The problem the others solve: critical waits behind the batch.
				if critical.p99() < 300*time.Millisecond {
					t.Errorf("FIFO: critical p99 %s; want the batch's wait, at least 300 ms", critical.p99())
				}
			} else if c < tt.minCritical || tt.maxP99 > 0 && critical.p99() > tt.maxP99 {
				t.Errorf("critical: %.0f rps, p99 %s; want at least %.0f rps, p99 at most %s", c, critical.p99(), tt.minCritical, tt.maxP99)
			}
			if tt.minCritical > 0 {
				// Counted under its level: every critical answer the
				// window saw, and those of the warm-up.
				if n := gatheredWith(t, s.Sidecar, "loomgate_level_requests_total", "critical", "ok"); n < float64(critical.ok) {
					t.Errorf("loomgate_level_requests_total{level=critical,outcome=ok} = %.0f; want at least the %d critical answers of the window", n, critical.ok)
				}
				// And in /advice: critical first, served near the rate the
				// clients saw (where the minute it covers is the window
				// and its warm-up), the batch behind it waiting.
				doc := adviceDoc(t, s)
				if len(doc.Levels) != 2 || doc.Levels[0].Level != "critical" || doc.Levels[1].Level != "sheddable" {
					t.Fatalf("/advice levels = %+v; want critical, then sheddable", doc.Levels)
				}
				cl, bl := doc.Levels[0], doc.Levels[1]
				if bl.QueueP99Seconds == nil {
					t.Fatalf("/advice: the batch's queue p99 is null; it waited")
				}
				t.Logf("/advice: %s; %s (queue p99 %.3fs)", cl.Summary, bl.Summary, *bl.QueueP99Seconds)
				if cl.Throughput < 0.8*c && tt.warmup <= 5*time.Second || *bl.QueueP99Seconds < 0.3 {
					t.Errorf("/advice levels: critical %.0f rps (clients saw %.0f), batch queue p99 %.3fs; want within 20%%, and the batch's wait at least 0.3 s", cl.Throughput, c, *bl.QueueP99Seconds)
				}
			}
			if c+b < tt.minTotal {
				t.Errorf("total %.0f rps; want at least %.0f, the batch taking the rest of the budget", c+b, tt.minTotal)
			}
		})
	}
}

// A noisy tenant: five tenants keyed by X-Tenant, one with ten times the
// clients of each other, behind WORKERS=20 on a pool of 20 at 50 ms: all
// five keep requests waiting. In one FIFO queue the noisy one gets its
// clients' share, ten times each other's; fair queuing between their
// flows gives each about a fifth of the answers: Jain's index at least
// 0.9, and the noisy one no more than 1.2 times its fair share.
func TestFairQueuingOfANoisyTenant(t *testing.T) {
	realTime(t, "about 40 seconds")
	if raceEnabled {
		t.Skip("measures shares under load, which the race detector's slowdown changes")
	}
	up := upstreamtest.HiddenPool(t, 20, 50*time.Millisecond)
	for _, tt := range []struct {
		name string
		env  []string
	}{
		{"one FIFO queue", nil},
		{"flows by tenant", []string{"LOOMGATE_FLOW_KEY=header:X-Tenant"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, testConfig(t, append([]string{"LOOMGATE_UPSTREAM=" + up, "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=20"}, tt.env...)...))
			flows := []*flowLoad{{path: "/r", header: "X-Tenant", value: "noisy", clients: 100}}
			for _, name := range []string{"a", "b", "c", "d"} {
				flows = append(flows, &flowLoad{path: "/r", header: "X-Tenant", value: name, clients: 10})
			}
			d := playFlows(t, s.URL, 5*time.Second, 15*time.Second, flows...)
			var sum, squares float64
			var rates []float64
			for _, f := range flows {
				x := f.rate(d)
				rates = append(rates, x)
				sum += x
				squares += x * x
			}
			jain := sum * sum / (float64(len(flows)) * squares)
			fair := sum / float64(len(flows))
			t.Logf("goodput by tenant (noisy first): %.0f rps; Jain's index %.3f", rates, jain)
			if tt.env == nil {
				// The problem fair queuing solves.
				if rates[0] < 3*fair {
					t.Errorf("FIFO: the noisy tenant got %.0f rps, %.2f times its fair share; want its clients' share, at least 3 times", rates[0], rates[0]/fair)
				}
				return
			}
			if jain < 0.9 {
				t.Errorf("Jain's index %.3f; want at least 0.9", jain)
			}
			if rates[0] > 1.2*fair {
				t.Errorf("the noisy tenant got %.0f rps, %.2f times its fair share of %.0f; want at most 1.2", rates[0], rates[0]/fair, fair)
			}
		})
	}
}

// Tenants of unequal cost: behind WORKERS=4, a tenant whose requests take
// 100 ms and one whose requests take 10 ms, ten clients each, keyed by
// X-Tenant. Fair queuing counts the upstream's time, so each holds about
// half of the workers' time: the fast tenant gets about ten times the
// slow one's answers, where a turn a request each gave the slow tenant
// ten elevenths of the workers.
func TestFairQueuingByCost(t *testing.T) {
	realTime(t, "about 13 seconds")
	if raceEnabled {
		t.Skip("measures shares under load, which the race detector's slowdown changes")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := 10 * time.Millisecond
		if r.URL.Path == "/slow" {
			d = 100 * time.Millisecond
		}
		time.Sleep(d)
		io.WriteString(w, "ok")
	})}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM=http://"+ln.Addr().String(), "LOOMGATE_MODE=fixed", "LOOMGATE_WORKERS=4",
		"LOOMGATE_FLOW_KEY=header:X-Tenant"))
	slow := &flowLoad{path: "/slow", header: "X-Tenant", value: "slow", clients: 10}
	fast := &flowLoad{path: "/fast", header: "X-Tenant", value: "fast", clients: 10}
	d := playFlows(t, s.URL, 3*time.Second, 10*time.Second, slow, fast)
	// The workers' time each tenant held, by its answers: 0.1 s and 0.01 s
	// each (the proxy's own time is the same for both).
	ts, tf := slow.rate(d)*0.1, fast.rate(d)*0.01
	share := ts / (ts + tf)
	t.Logf("slow tenant %.0f rps, fast tenant %.0f rps: the slow one held %.0f%% of the workers' time", slow.rate(d), fast.rate(d), 100*share)
	if share < 0.35 || share > 0.65 {
		t.Errorf("the slow tenant held %.0f%% of the workers' time; want about half (35%% to 65%%)", 100*share)
	}
}
