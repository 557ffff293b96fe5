package stub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// start serves a stub configured by cfg on a loopback port and returns it
// with its base URL; the stub is shut down when the test ends.
// TestForwardIsABareProxy: with Forward, the stub passes requests through
// to another and its answers back, and answers 502 when that one is gone.
func TestForwardIsABareProxy(t *testing.T) {
	_, upstream := start(t, Config{})
	_, proxy := start(t, Config{Forward: strings.TrimPrefix(upstream, "http://")})
	if code, body := get(t, proxy+"/wait?ms=1"); code != 200 || body != "waited 1 ms\n" {
		t.Errorf("through the forwarder: %d %q; want 200 and the stub's answer", code, body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	_, broken := start(t, Config{Forward: gone})
	if code, _ := get(t, broken+"/wait"); code != 502 {
		t.Errorf("forwarding to a closed port: %d; want 502", code)
	}
}

func start(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}

// client is a plain net/http client with room for many connections at once,
// so concurrency tests measure the stub and not the client.
var client = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	Timeout:   30 * time.Second,
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("GET %s: reading body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// getAll sends n identical requests at once and returns how long the
// slowest took and the status codes.
func getAll(t *testing.T, url string, n int) (time.Duration, []int) {
	t.Helper()
	codes := make([]int, n)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range n {
		wg.Go(func() { codes[i], _ = get(t, url) })
	}
	wg.Wait()
	return time.Since(begin), codes
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{DBPool: -1}, "DBPool -1"},
		{Config{Pool: -2}, "Pool -2"},
		{Config{Concurrency: -3}, "Concurrency -3"},
		{Config{Forward: "http://127.0.0.1:1"}, `Forward "http://127.0.0.1:1"`},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v; want ErrConfig naming %q", tt.cfg, err, tt.want)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatalf("New(Config{}) = %v", err)
	}
	if s.dbSize != defaultDBPool || s.pool != nil || s.srv.Concurrency != defaultConcurrency {
		t.Errorf("New(Config{}) = db %d, pool %v, concurrency %d; want db %d, no pool, concurrency %d",
			s.dbSize, s.pool, s.srv.Concurrency, defaultDBPool, defaultConcurrency)
	}
}

func TestEndpoints(t *testing.T) {
	_, base := start(t, Config{})
	tests := []struct {
		path    string
		body    string
		atLeast time.Duration
	}{
		{"/wait?ms=50", "waited 50 ms\n", 50 * time.Millisecond},
		{"/wait?ms=0", "waited 0 ms\n", 0},
		{"/db?ms=30", "held a db connection 30 ms\n", 30 * time.Millisecond},
		{"/pinned?ms=20", "pinned 20 ms\n", 20 * time.Millisecond},
		{"/mixed", "mixed 15+180+5 ms\n", 200 * time.Millisecond},
		{"/cpu?iters=0", "cpu iters=0 result=11400714819323198485\n", 0},
		// /mem writes byte(page)|1 to each of 256 pages: 0|1 + 1 + 2|1 + 3 + ...
		// = (0+1+...+255) + 128 even pages raised by one = 32640 + 128.
		{"/mem?kb=1024", "held 1024 KiB for 0 ms sum=32768\n", 0},
		{"/mem?kb=8&ms=20", "held 8 KiB for 20 ms sum=2\n", 20 * time.Millisecond},
	}
	for _, tt := range tests {
		begin := time.Now()
		code, body := get(t, base+tt.path)
		took := time.Since(begin)
		if code != http.StatusOK || body != tt.body {
			t.Errorf("GET %s = %d %q; want 200 %q", tt.path, code, body, tt.body)
		}
		if took < tt.atLeast {
			t.Errorf("GET %s took %v; want at least %v", tt.path, took, tt.atLeast)
		}
	}
}

// TestSpreadDelays: with to, delays are drawn from the range, and they
// spread over it.
func TestSpreadDelays(t *testing.T) {
	_, base := start(t, Config{})
	seen := map[string]bool{}
	for range 40 {
		code, body := get(t, base+"/wait?ms=1&to=8")
		var ms int
		if _, err := fmt.Sscanf(body, "waited %d ms", &ms); err != nil || code != 200 || ms < 1 || ms > 8 {
			t.Fatalf("GET /wait?ms=1&to=8 = %d %q; want a delay from 1 to 8 ms", code, body)
		}
		seen[body] = true
	}
	if len(seen) < 4 {
		t.Errorf("40 draws from 1..8 ms gave %d distinct delays; want them spread", len(seen))
	}
}

func TestCPUReturnsTheWork(t *testing.T) {
	_, base := start(t, Config{})
	for _, iters := range []int64{1, 1000, 123457} {
		want := "cpu iters=" + itoa(iters) + " result=" + utoa(cpuWork(iters)) + "\n"
		if code, body := get(t, base+"/cpu?iters="+itoa(iters)); code != http.StatusOK || body != want {
			t.Errorf("GET /cpu?iters=%d = %d %q; want 200 %q", iters, code, body, want)
		}
	}
	if cpuWork(1000) == cpuWork(1001) {
		t.Errorf("cpuWork(1000) == cpuWork(1001); want each round to change the result")
	}
}

func TestBadParameters(t *testing.T) {
	_, base := start(t, Config{})
	tests := []struct {
		path string
		code int
		want string // in the body
	}{
		{"/wait", 400, "missing ms: want ms=N, a whole number of milliseconds from 0 to 600000"},
		{"/wait?ms=", 400, `bad ms "": not a whole number`},
		{"/wait?ms=50&to=10", 400, `bad to 10: want at least ms, 50`},
		{"/wait?ms=5&to=x", 400, `bad to "x": not a whole number`},
		{"/wait?ms=abc", 400, `bad ms "abc": not a whole number`},
		{"/wait?ms=-1", 400, `bad ms "-1": not a whole number`},
		{"/wait?ms=1.5", 400, `bad ms "1.5"`},
		{"/wait?ms=600001", 400, `bad ms "600001": too large`},
		{"/db?ms=99999999999999999999999", 400, "too large"},
		{"/pinned?ms=x", 400, `bad ms "x"`},
		{"/cpu", 400, "missing iters"},
		{"/cpu?iters=1e3", 400, `bad iters "1e3"`},
		{"/mem?ms=10", 400, "missing kb"},
		{"/mem?kb=1048577", 400, `bad kb "1048577": too large; want a whole number of KiB from 0 to 1048576`},
		{"/mem?kb=1&ms=soon", 400, `bad ms "soon"`},
		{"/nope", 404, "not found: the stub serves /wait?ms=N"},
		{"/wait/", 404, "not found"},
	}
	for _, tt := range tests {
		code, body := get(t, base+tt.path)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s = %d %q; want %d containing %q", tt.path, code, body, tt.code, tt.want)
		}
	}
}

func TestDBPoolCapsConcurrency(t *testing.T) {
	s, base := start(t, Config{DBPool: 2})
	// Six requests of 100 ms through two connections take three rounds.
	took, codes := getAll(t, base+"/db?ms=100", 6)
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("request %d: status %d; want 200", i, c)
		}
	}
	if took < 300*time.Millisecond {
		t.Errorf("6 × /db?ms=100 through 2 connections took %v; want at least 300ms", took)
	}
	if peak := s.dbOcc.peak.Load(); peak < 1 || peak > 2 {
		t.Errorf("peak db connections in use = %d; want 1..2", peak)
	}
	if got := s.dbOcc.inUse.Load() + s.dbOcc.waiting.Load(); got != 0 {
		t.Errorf("db in use + waiting after the requests = %d; want 0", got)
	}
}

func TestDBPoolIsFIFO(t *testing.T) {
	s, base := start(t, Config{DBPool: 1})
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	wg.Go(func() { get(t, base+"/db?ms=100") }) // holds the connection
	waitFor(t, "the only db connection to be taken", func() bool { return s.dbOcc.inUse.Load() == 1 })
	// Queue three more, one after the other: they must be served in the
	// order they arrived.
	for i := range 3 {
		wg.Go(func() {
			get(t, base+"/db?ms=60")
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
		waitFor(t, "the request to queue", func() bool { return s.dbOcc.waiting.Load() == int64(i+1) })
	}
	wg.Wait()
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("queued /db requests finished in order %v; want [0 1 2], first come first served", order)
	}
}

func TestPoolGatesEverythingButMetrics(t *testing.T) {
	s, base := start(t, Config{Pool: 1})
	took, _ := getAll(t, base+"/wait?ms=60", 3)
	if took < 180*time.Millisecond {
		t.Errorf("3 × /wait?ms=60 through a pool of 1 took %v; want at least 180ms", took)
	}
	if peak := s.poolOcc.peak.Load(); peak != 1 {
		t.Errorf("peak pool workers in use = %d; want 1", peak)
	}

	// While the only worker is held, /metrics must still answer, and say so.
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, base+"/wait?ms=1000")
	}()
	waitFor(t, "the pool's only worker to be taken", func() bool { return s.poolOcc.inUse.Load() == 1 })
	families := scrape(t, base)
	if got := value(families["loomgate_stub_pool_in_use"]); got != 1 {
		t.Errorf("loomgate_stub_pool_in_use while a request holds the pool = %v; want 1", got)
	}
	if got := value(families["loomgate_stub_pool_size"]); got != 1 {
		t.Errorf("loomgate_stub_pool_size = %v; want 1", got)
	}
	<-done
}

func TestPinnedSerialises(t *testing.T) {
	s, base := start(t, Config{})
	took, _ := getAll(t, base+"/pinned?ms=50", 4)
	if took < 200*time.Millisecond {
		t.Errorf("4 × /pinned?ms=50 took %v; want at least 200ms, one at a time", took)
	}
	if peak := s.pinnedOcc.peak.Load(); peak != 1 {
		t.Errorf("peak requests inside /pinned = %d; want 1", peak)
	}
}

func TestWaitRunsConcurrently(t *testing.T) {
	_, base := start(t, Config{})
	// Fifty 300 ms requests in well under fifty times 300 ms: nothing in the
	// stub serialises them. The bound is generous for a loaded machine.
	took, _ := getAll(t, base+"/wait?ms=300", 50)
	if took > 5*time.Second {
		t.Errorf("50 concurrent /wait?ms=300 took %v; want far less than 15s", took)
	}
}

func TestMemHoldsMemory(t *testing.T) {
	s, base := start(t, Config{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, base+"/mem?kb=2048&ms=1000")
	}()
	waitFor(t, "/mem to hold its buffer", func() bool { return s.memHeld.Load() > 0 })
	families := scrape(t, base)
	if got := value(families["loomgate_stub_mem_held_bytes"]); got != 2048*1024 {
		t.Errorf("loomgate_stub_mem_held_bytes during /mem?kb=2048 = %v; want %d", got, 2048*1024)
	}
	if got := value(families["loomgate_stub_in_flight"]); got != 1 {
		t.Errorf("loomgate_stub_in_flight during one /mem = %v; want 1", got)
	}
	<-done
	if got := s.memHeld.Load(); got != 0 {
		t.Errorf("bytes held after /mem returned = %d; want 0", got)
	}
}

func TestMetrics(t *testing.T) {
	s, base := start(t, Config{DBPool: 3})
	get(t, base+"/wait?ms=0")
	get(t, base+"/wait?ms=1")
	get(t, base+"/cpu?iters=10")
	get(t, base+"/wait?ms=bad")
	get(t, base+"/missing")

	families := scrape(t, base)
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines", "loomgate_stub_in_flight"} {
		if families[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if typ := families["loomgate_stub_in_flight"].GetType(); typ != dto.MetricType_GAUGE {
		t.Errorf("loomgate_stub_in_flight type = %v; want GAUGE", typ)
	}
	if got := value(families["loomgate_stub_db_connections"]); got != 3 {
		t.Errorf("loomgate_stub_db_connections = %v; want 3", got)
	}

	byPath := map[string]float64{}
	for _, m := range families["loomgate_stub_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "path" {
				byPath[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"/wait": 3, "/cpu": 1, "/db": 0, "/mem": 0, "/pinned": 0, "/mixed": 0, "/ws": 0, "other": 1,
	}
	for path, n := range want {
		if got, ok := byPath[path]; !ok || got != n {
			t.Errorf("loomgate_stub_requests_total{path=%q} = %v (present %v); want %v", path, got, ok, n)
		}
	}
	if len(byPath) != len(want) {
		t.Errorf("path label values = %v; want exactly %v", byPath, want)
	}
	if got := testutil.ToFloat64(s.requests[routeWait]); got != 3 {
		t.Errorf("requests counted for /wait = %v; want 3", got)
	}
	problems, err := testutil.GatherAndLint(s.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

func TestShutdownReleasesWaiters(t *testing.T) {
	s, err := New(Config{DBPool: 1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	base := "http://" + ln.Addr().String()

	codes := make(chan int, 2)
	// The holder's 1.5 s leave ample time to queue the second request and
	// give up on shutting down while it still waits.
	go func() { c, _ := get(t, base+"/db?ms=1500"); codes <- c }()
	waitFor(t, "the only db connection to be taken", func() bool { return s.dbOcc.inUse.Load() == 1 })
	go func() { c, _ := get(t, base+"/db?ms=1500"); codes <- c }()
	waitFor(t, "a request to wait for the db", func() bool { return s.dbOcc.waiting.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with requests in flight past its deadline = %v; want DeadlineExceeded", err)
	}
	got := map[int]int{}
	got[<-codes]++
	got[<-codes]++
	if got[http.StatusOK] != 1 || got[http.StatusServiceUnavailable] != 1 {
		t.Errorf("statuses after Shutdown gave up = %v; want one 200 (the holder) and one 503 (the waiter)", got)
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline rather than assuming how fast the machine is.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d; want 200", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// value is the value of a family's only gauge or counter, or -1 if there is
// not exactly one.
func value(f *dto.MetricFamily) float64 {
	if len(f.GetMetric()) != 1 {
		return -1
	}
	m := f.GetMetric()[0]
	if m.Gauge != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// TestShutdownDuringStartUp: a Shutdown that comes before Serve has begun,
// or while it begins, must still end Serve.
func TestShutdownDuringStartUp(t *testing.T) {
	for i := range 200 {
		s, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		if i%2 == 0 {
			go func() { served <- s.Serve(ln) }()
			for range i % 20 {
				runtime.Gosched()
			}
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatalf("round %d: Shutdown = %v", i, err)
		}
		if i%2 == 1 {
			go func() { served <- s.Serve(ln) }()
		}
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("round %d: Serve = %v; want nil after Shutdown", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Serve still running 10s after Shutdown", i)
		}
	}
}
