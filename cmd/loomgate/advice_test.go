package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/internal/upstreamtest"
	"github.com/loomgate/loomgate/proxy"
	"github.com/loomgate/loomgate/sidecar"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// adviceLoad is a load of clients that each send a request, wait for its
// answer and send the next, until Stop: the users of the published
// experiments the README cites.
type adviceLoad struct {
	stop                   chan struct{}
	wg                     sync.WaitGroup
	ok, rejected, failures atomic.Int64
	// retryAfter is the highest Retry-After seen on a 503.
	retryAfter atomic.Int64
}

// startAdviceLoad starts clients closed loops on target+path, one every
// ramp/clients; every request is bounded by 30 s, so Stop returns within
// that.
func startAdviceLoad(t testing.TB, target, path string, clients int, ramp time.Duration) *adviceLoad {
	t.Helper()
	u := strings.TrimPrefix(target, "http://")
	c := &fasthttp.HostClient{Addr: u, MaxConns: clients, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	l := &adviceLoad{stop: make(chan struct{})}
	start := time.Now()
	for i := range clients {
		// Against the clock, so that late wake-ups on a busy machine do
		// not add up.
		time.Sleep(time.Until(start.Add(time.Duration(i) * ramp / time.Duration(clients))))
		l.wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + u + path)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				switch err := c.DoTimeout(req, resp, 30*time.Second); {
				case err != nil:
					l.failures.Add(1)
					time.Sleep(10 * time.Millisecond) // not a busy loop if the target is gone
				case resp.StatusCode() == 200:
					l.ok.Add(1)
				case resp.StatusCode() == 503:
					l.rejected.Add(1)
					if ra, err := strconv.ParseInt(string(resp.Header.Peek("Retry-After")), 10, 64); err == nil {
						raiseMax(&l.retryAfter, ra)
					}
					// A pause, shorter than any Retry-After, so that a
					// rejected client does not spin the test's two cores.
					time.Sleep(time.Millisecond)
				default:
					l.failures.Add(1)
				}
			}
		})
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the load and waits for every client; it may be called twice.
func (l *adviceLoad) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func raiseMax(p *atomic.Int64, v int64) {
	for old := p.Load(); v > old && !p.CompareAndSwap(old, v); old = p.Load() {
	}
}

// getAdvice reads /advice as scripts do.
func getAdvice(t testing.TB, admin string) sidecar.AdviceDoc {
	t.Helper()
	resp, err := http.Get(admin + "/advice")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /advice = %s, %s; want 200 JSON", resp.Status, resp.Header.Get("Content-Type"))
	}
	var doc sidecar.AdviceDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func logAdvice(t testing.TB, doc sidecar.AdviceDoc) {
	t.Helper()
	f := doc.Figures
	capacity := math.NaN()
	if f.UpstreamCapacity != nil {
		capacity = *f.UpstreamCapacity
	}
	t.Logf("window %.1fs: %d requests, %.0f rps, in flight %.1f, queued %.1f, service %.0f ms, queue %.0f ms, queue share %.2f, capacity %.1f (%s, at least %.0f), saturated %v, memory %.0f MiB, %.0f KiB per request",
		f.WindowSeconds, f.Requests, f.Throughput, f.InFlight, f.Queued, 1000*f.MeanServiceSeconds,
		1000*f.MeanQueueSeconds, f.QueueShare, capacity, f.CapacityUnknown, f.CapacityLowerBound, f.UpstreamSaturated, f.UpstreamMemoryBytes/(1<<20), f.BytesPerRequest/1024)
	for _, r := range f.Routes {
		t.Logf("route %s: %d answers, %.0f rps, service %.0f ms, p25 %.0f ms over %.0f ms unloaded (%.1f×), saturated %v", r.Name, r.Requests, r.Throughput,
			1000*r.MeanServiceSeconds, 1000*r.ServiceP25Seconds, 1000*r.UnloadedP25Seconds, r.Stretch, r.Saturated)
	}
	t.Logf("advice: %+v", doc.Recommendation)
}

// TestAdviceHiddenPool is the first acceptance experiment: an unbounded
// sidecar in front of an upstream with a hidden pool of 50 workers, on a
// 100 ms call: 10 clients, then 200. At 200 each request spends 400 ms in
// the upstream, a quarter of it working; the sidecar must see the service
// time grow with the load, estimate the capacity at 50 from the buckets in
// which it queued (not the window's average, which the 10 clients' buckets
// would pull down) and advise that more admission will not help.
func TestAdviceHiddenPool(t *testing.T) {
	// The capacity is read as throughput times the unloaded service time:
	// a rig starved of CPU (the race detector, or the machine's other
	// work beside it) serves less, and the capacity read falls with it
	// (37 and 42 of 50 seen). It runs where CI runs the sidecar's other
	// tests of behaviour under load, alone and without the race detector.
	if os.Getenv("LOAD_TESTS") != "1" {
		t.Skip("measures a capacity from 13 s of load: runs with LOAD_TESTS=1, as CI's step for such tests does")
	}
	up := upstreamtest.HiddenPool(t, 50, 100*time.Millisecond)
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": up})
	// A whole 5 s bucket at the low load makes the baseline.
	calm := startAdviceLoad(t, s.URL, "/wait?ms=100", 10, 0)
	time.Sleep(6 * time.Second)
	calm.Stop()
	load := startAdviceLoad(t, s.URL, "/wait?ms=100", 200, 200*time.Millisecond)
	time.Sleep(7 * time.Second)
	doc := getAdvice(t, s.AdminURL)
	saturated := s.Value(t, "loomgate_upstream_saturated")
	capacity := s.Value(t, "loomgate_upstream_capacity_estimate")
	workers := s.Value(t, "loomgate_advice_workers")
	load.Stop()
	logAdvice(t, doc)

	f, r := doc.Figures, doc.Recommendation
	if f.UpstreamSaturated == nil || !*f.UpstreamSaturated || saturated != 1 {
		t.Errorf("upstream_saturated = %v, loomgate_upstream_saturated = %v; want true and 1", f.UpstreamSaturated, saturated)
	}
	if f.UpstreamCapacity == nil {
		t.Fatalf("upstream_capacity unknown (%s); want about 50", f.CapacityUnknown)
	}
	for name, c := range map[string]float64{"/advice": *f.UpstreamCapacity, "loomgate_upstream_capacity_estimate": capacity} {
		if math.Abs(c-50)/50 > 0.15 {
			t.Errorf("%s capacity = %.1f; want 50 ± 15%% (the hidden pool)", name, c)
		}
	}
	// The gauge is computed at its scrape, a moment after /advice: close,
	// not equal.
	for name, w := range map[string]float64{"workers": float64(r.Workers), "bulkhead": float64(r.Bulkhead), "loomgate_advice_workers": workers} {
		if math.Abs(w-50)/50 > 0.15 {
			t.Errorf("advice %s = %v; want 50 ± 15%%", name, w)
		}
	}
	if !strings.Contains(r.Summary, "more admission will not help") || !strings.Contains(r.Summary, fmt.Sprintf("LOOMGATE_WORKERS=%d", r.Workers)) {
		t.Errorf("summary = %q; want it to say more admission will not help and name the workers", r.Summary)
	}
	if load.failures.Load() > 0 || load.rejected.Load() > 0 {
		t.Errorf("%d failures, %d rejections; want none: unbounded admits everyone", load.failures.Load(), load.rejected.Load())
	}
}

// TestAdviceOwnQueue is the second: WORKERS=20 in front of an upstream
// with no limit of its own, 200 clients on a 100 ms call. Requests wait
// 900 ms in loomgate's queue for 100 ms of service; the upstream is fine
// as far as it was seen, 20 at once, and the advice must keep the limit or
// step it up by a bounded amount to find out more.
func TestAdviceOwnQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("4 s of load")
	}
	up := upstreamtest.HiddenPool(t, 0, 100*time.Millisecond)
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": up, "LOOMGATE_MODE": "fixed", "LOOMGATE_WORKERS": "20"})
	load := startAdviceLoad(t, s.URL, "/wait?ms=100", 200, 0)
	time.Sleep(4 * time.Second)
	doc := getAdvice(t, s.AdminURL)
	var text bytes.Buffer
	if code := run(context.Background(), []string{"advise", "--admin", s.AdminURL}, nil, &text, io.Discard); code != 0 {
		t.Errorf("loomgate advise = %d; want 0", code)
	}
	load.Stop()
	logAdvice(t, doc)
	t.Logf("loomgate advise:\n%s", text.String())

	// The upstream was never seen serving more than the 20 admitted: the
	// advice keeps them and offers a bounded step, watched, rather than
	// raising the limit tenfold on no evidence (the advice would reverse
	// itself once the cap it gave was applied).
	f, r := doc.Figures, doc.Recommendation
	for _, want := range []string{"Mode fixed, WORKERS=20, QUEUE_SIZE=10000.", "Keep LOOMGATE_WORKERS=20, or find out whether the upstream serves more: raise it to 25", "of their time in loomgate's queue"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("loomgate advise printed %q; want it to contain %q", text.String(), want)
		}
	}
	// Seen only at the 20 admitted, the upstream may be serving them in
	// its unloaded time or queueing them inside: not saturated, or unknown.
	if f.UpstreamSaturated != nil && *f.UpstreamSaturated {
		t.Errorf("upstream_saturated = true; want false or null: nothing shows it queueing inside")
	}
	if f.QueueShare < 0.7 {
		t.Errorf("queue_share = %.2f; want at least 0.7 (900 ms of queue for 100 ms of service)", f.QueueShare)
	}
	if r.Mode != "fixed" || r.Workers != 20 || r.Probe != 25 {
		t.Errorf("advice = %s with %d workers, probe %d; want 20 workers kept and a probe of 25", r.Mode, r.Workers, r.Probe)
	}
	if strings.Contains(r.Summary, "LOOMGATE_MODE=unbounded") {
		t.Errorf("summary = %q; want no switch to admitting every request, beyond what the upstream was seen to serve", r.Summary)
	}
	if got := s.Value(t, "loomgate_upstream_saturated"); got == 1 {
		t.Errorf("loomgate_upstream_saturated = %v; want 0 or NaN (unknown)", got)
	}
}

// TestAdviceBytesPerRequest is the third: requests that each hold 512 KiB
// in the upstream, at 50 and then 150 clients. The slope of the upstream's
// memory against the requests in flight is the memory per request.
//
// Each request holds its memory for 1 s: long beside the time it spends in
// flight without holding it (in the proxy, allocating, answering), which
// the race detector stretches to tens of milliseconds. At 200 ms the slope
// measured under -race was two thirds of the bytes held, and rightly so:
// a request in flight held its memory only that part of the time.
func TestAdviceBytesPerRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("6 s of load")
	}
	up := upstreamtest.HiddenPool(t, 0, time.Second)
	s := sidecartest.Start(t, map[string]string{
		"LOOMGATE_UPSTREAM":               up,
		"LOOMGATE_UPSTREAM_METRICS_URL":   up + "/metrics",
		"LOOMGATE_UPSTREAM_MEMORY_METRIC": adviceMemoryMetric,
		"LOOMGATE_MEMORY_BUDGET_BYTES":    "1GiB",
	}, sidecar.Options{ScrapeInterval: 250 * time.Millisecond})
	const path = "/mem?kb=512&ms=1000"
	first := startAdviceLoad(t, s.URL, path, 50, 0)
	time.Sleep(3 * time.Second)
	second := startAdviceLoad(t, s.URL, path, 100, 0)
	time.Sleep(3 * time.Second)
	doc := getAdvice(t, s.AdminURL)
	bpr := s.Value(t, "loomgate_advice_bytes_per_request")
	// Read while the load holds memory: once it stops, the next scrape
	// finds none held, and the gauge follows it to 0.
	upMem := s.Value(t, "loomgate_upstream_memory_bytes")
	first.Stop()
	second.Stop()
	logAdvice(t, doc)

	f, r := doc.Figures, doc.Recommendation
	const want = 512 << 10
	if math.Abs(f.BytesPerRequest-want)/want > 0.25 {
		t.Errorf("bytes_per_request = %.0f KiB; want 512 KiB ± 25%%", f.BytesPerRequest/1024)
	}
	if bpr != f.BytesPerRequest && math.Abs(bpr-want)/want > 0.25 {
		t.Errorf("loomgate_advice_bytes_per_request = %.0f KiB; want 512 KiB ± 25%%", bpr/1024)
	}
	if f.UpstreamMemoryBytes <= 0 || upMem <= 0 {
		t.Errorf("upstream memory = %v, loomgate_upstream_memory_bytes = %v; want the upstream's", f.UpstreamMemoryBytes, upMem)
	}
	// A scrape may miss its 250 ms under this load on two cores; the fit
	// above shows that enough arrived.
	t.Logf("scrape errors: %v", s.Value(t, "loomgate_upstream_scrape_errors_total"))
	// 1 GiB at about 512 KiB a request: a bulkhead of about 2048.
	if wantBulkhead := int(float64(1<<30) / f.BytesPerRequest); r.Bulkhead != wantBulkhead {
		t.Errorf("advice bulkhead = %d; want floor(1 GiB / %.0f B) = %d", r.Bulkhead, f.BytesPerRequest, wantBulkhead)
	}
}

// adviceMemoryMetric is the upstream's series read as its memory.
//
// The upstream shares this process with the sidecar and the clients, and
// the Go runtime lets its heap grow to twice the live data between
// collections (GOGC=100), so resident memory rises by more than what
// requests hold: this test measured 873 KiB per request with
// process_resident_memory_bytes and 669 KiB with
// go_memstats_heap_inuse_bytes. That is the right slope for a container's
// memory limit, which counts every resident byte, but not a known answer to
// check the fit against. upstreamtest.HeldBytesMetric is the bytes kb=
// requests hold, as a JVM's heap in use after collection is; read through
// the same scrape, selector and fit, it checks the pipeline against 512 KiB
// exactly.
const adviceMemoryMetric = upstreamtest.HeldBytesMetric

// TestMemoryBulkheadEndToEnd sends more than LOOMGATE_MAX_INFLIGHT_BYTES
// can hold: the excess is answered 503 rejected_memory with a Retry-After,
// and loomgate_in_flight_bytes_max, read continuously, never exceeds the
// budget.
func TestMemoryBulkheadEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s of load")
	}
	const budget = 20*proxy.RequestOverheadBytes + 64<<10
	up := upstreamtest.HiddenPool(t, 0, 50*time.Millisecond)
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": up, "LOOMGATE_MAX_INFLIGHT_BYTES": strconv.Itoa(budget)})
	gets := startAdviceLoad(t, s.URL, "/wait?ms=50", 60, 0)
	// Uploads of a declared 100 KiB weigh more than a GET.
	var posts sync.WaitGroup
	stopPosts := make(chan struct{})
	for range 10 {
		posts.Go(func() {
			body := bytes.Repeat([]byte("u"), 100<<10)
			for {
				select {
				case <-stopPosts:
					return
				default:
				}
				resp, err := http.Post(s.URL+"/wait?ms=20", "application/octet-stream", bytes.NewReader(body))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	var most, scrapes float64
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		text := adviceScrape(t, s.AdminURL)
		for _, name := range []string{"loomgate_in_flight_bytes_max", "loomgate_in_flight_bytes"} {
			v := adviceSample(t, text, name)
			if v > budget {
				t.Errorf("%s = %.0f; want at most LOOMGATE_MAX_INFLIGHT_BYTES = %d", name, v, budget)
			}
			most = max(most, v)
		}
		scrapes++
		time.Sleep(20 * time.Millisecond)
	}
	gets.Stop()
	close(stopPosts)
	posts.Wait()
	rejected := s.Value(t, "loomgate_requests_total", "outcome", "rejected_memory")
	t.Logf("%.0f scrapes; most reserved %.0f of %d; %d ok, %d rejected (%v rejected_memory), Retry-After up to %d s",
		scrapes, most, budget, gets.ok.Load(), gets.rejected.Load(), rejected, gets.retryAfter.Load())
	if gets.ok.Load() == 0 || gets.rejected.Load() == 0 || rejected == 0 {
		t.Errorf("%d ok, %d 503s, %v rejected_memory; want some of each", gets.ok.Load(), gets.rejected.Load(), rejected)
	}
	if ra := gets.retryAfter.Load(); ra < 1 {
		t.Errorf("Retry-After on rejected_memory = %d; want at least 1", ra)
	}
	if most < budget/2 {
		t.Errorf("most reserved %.0f; want the load to fill the budget %d", most, budget)
	}
	waitUntil(t, func() bool { st := s.Stats(); return st.InFlight == 0 && st.Bytes == 0 })
}

// adviceScrape reads the admin listener's /metrics in the text format.
func adviceScrape(t testing.TB, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// adviceSample finds an unlabelled sample in the text exposition.
func adviceSample(t testing.TB, text, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// TestRetryAfterFromLiveState checks the Retry-After the sidecar computes
// against metrics.RetryAfter's formula, in a bubble whose clock makes the
// mean service time and the queue exact.
func TestAdviceEndpoint(t *testing.T) {
	upURL, _ := slowUpstream(t, 0)
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": upURL, "LOOMGATE_MODE": "fixed", "LOOMGATE_WORKERS": "8", "LOOMGATE_QUEUE_SIZE": "16"})
	for range 3 {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitUntil(t, func() bool { return s.Value(t, "loomgate_requests_total", "outcome", "ok") == 3 })
	doc := getAdvice(t, s.AdminURL)
	if doc.Settings.Mode != "fixed" || doc.Settings.Workers != 8 || doc.Settings.QueueSize != 16 || doc.Settings.QueueTimeoutSeconds != 30 || doc.Settings.Bulkhead != 0 {
		t.Errorf("settings = %+v; want fixed, 8 workers, queue 16, 30 s timeout", doc.Settings)
	}
	// The other modes' settings are shown too, named as inactive.
	if strings.Join(doc.Settings.Inactive, " ") != "LOOMGATE_ADAPTIVE_MIN LOOMGATE_ADAPTIVE_MAX LOOMGATE_BULKHEAD LOOMGATE_BULKHEAD_WAIT" {
		t.Errorf("settings.inactive = %q; want the adaptive and unbounded modes' variables", doc.Settings.Inactive)
	}
	if doc.Figures.Requests != 3 || doc.Recommendation.Workers != 0 || !strings.HasPrefix(doc.Recommendation.Summary, "Not enough traffic") || doc.Recommendation.Reasons == nil {
		t.Errorf("figures %+v, recommendation %+v; want 3 requests and no advice yet", doc.Figures, doc.Recommendation)
	}
	for _, tt := range []struct {
		query       string
		status      int
		contentType string
		body        string
	}{
		{"?format=text", 200, "text/plain; charset=utf-8", "Mode fixed, WORKERS=8, QUEUE_SIZE=16."},
		{"?format=json", 200, "application/json", `"mode": "fixed"`},
		{"?format=xml", 400, "text/plain; charset=utf-8", "format must be json or text"},
	} {
		resp, err := http.Get(s.AdminURL + "/advice" + tt.query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.contentType || !strings.Contains(string(body), tt.body) {
			t.Errorf("GET /advice%s = %d %s %q; want %d %s containing %q", tt.query, resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.status, tt.contentType, tt.body)
		}
	}
}

func TestAdviseCommand(t *testing.T) {
	upURL, _ := slowUpstream(t, 0)
	s := startSidecar(t, map[string]string{"LOOMGATE_UPSTREAM": upURL})
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()

	for _, tt := range []struct {
		args            []string
		code            int
		stdout, stderr  string
		stdoutIsJSONDoc bool
	}{
		{args: []string{"--admin", s.AdminURL}, code: 0, stdout: "Mode unbounded, no bulkhead."},
		{args: []string{"--admin", s.AdminURL + "/", "--format", "json"}, code: 0, stdoutIsJSONDoc: true},
		{args: []string{"--admin", dead}, code: 1, stderr: "cannot reach the sidecar at " + dead},
		{args: []string{"--admin", s.AdminURL + "/elsewhere"}, code: 1, stderr: "404 Not Found; is --admin a loomgate admin listener?"},
		{args: []string{"--format", "yaml"}, code: 2, stderr: `--format "yaml": want text or json`},
		{args: []string{"--admin", "127.0.0.1:9090"}, code: 2, stderr: "want the admin listener as http://host:port"},
		{args: []string{"--bogus"}, code: 2, stderr: "loomgate advise: unknown flag --bogus (loomgate advise -h)"},
		{args: []string{"extra"}, code: 2, stderr: `unexpected argument "extra"`},
		{args: []string{"-h"}, code: 0, stderr: "Usage: loomgate advise"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"advise"}, tt.args...), nil, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("loomgate advise %q = %d\nstdout: %s\nstderr: %s\nwant %d, stdout containing %q, stderr containing %q",
				tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
		if tt.stdoutIsJSONDoc {
			var doc sidecar.AdviceDoc
			if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || doc.Settings.Mode != "unbounded" {
				t.Errorf("loomgate advise %q printed %q; want the /advice JSON (%v)", tt.args, stdout.String(), err)
			}
		}
	}
}

// TestUpstreamMemoryMetricIsChecked: a selector the scraper could not use
// is refused at start, with the rest of the configuration's problems.
func TestUpstreamMemoryMetricIsChecked(t *testing.T) {
	for _, tt := range []struct {
		value, want string
	}{
		{`jvm_memory_used_bytes{area=heap}`, `LOOMGATE_UPSTREAM_MEMORY_METRIC="jvm_memory_used_bytes{area=heap}": value of area: want a value in double quotes`},
		{`m{a=~"x"}`, `LOOMGATE_UPSTREAM_MEMORY_METRIC="m{a=~\"x\"}": regular expression matchers are not supported`},
		{`9lives`, `LOOMGATE_UPSTREAM_MEMORY_METRIC="9lives": want a metric name`},
	} {
		_, err := sidecar.ParseEnv([]string{"LOOMGATE_UPSTREAM_MEMORY_METRIC=" + tt.value})
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "accepted: ") {
			t.Errorf("sidecar.ParseEnv(LOOMGATE_UPSTREAM_MEMORY_METRIC=%s) = %v; want a problem starting %q", tt.value, err, tt.want)
		}
	}
	if _, err := sidecar.ParseEnv([]string{`LOOMGATE_UPSTREAM_MEMORY_METRIC=jvm_memory_used_bytes{area="heap"}`}); err != nil {
		t.Errorf("sidecar.ParseEnv(a JVM heap selector) = %v; want nil", err)
	}
}
