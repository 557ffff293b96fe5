package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/loomgate/loomgate/proxy"
)

// testConfig is the defaults of Config's tags with env's variables over
// them, as `loomgate proxy` reads them, listeners on loopback.
func testConfig(t testing.TB, environ ...string) Config {
	t.Helper()
	var cfg Config
	m := env.ToMap(append([]string{"LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0"}, environ...))
	if err := env.ParseWithOptions(&cfg, env.Options{Prefix: EnvPrefix, Environment: m}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// running is a Sidecar served on loopback until the test ends.
type running struct {
	*Sidecar
	URL, AdminURL string
}

func start(t testing.TB, cfg Config) *running {
	t.Helper()
	return startWith(t, cfg, Options{Logger: slog.New(slog.DiscardHandler)})
}

// startWith is start with opts of the test's own.
func startWith(t testing.TB, cfg Config, opts Options) *running {
	t.Helper()
	r, stop, done := launch(t, cfg, opts)
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return r
}

// launch runs a Sidecar on loopback until stop is called, then sends
// Run's result on done.
func launch(t testing.TB, cfg Config, opts Options) (r *running, stop func(), done <-chan error) {
	t.Helper()
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, ln, adminLn) }()
	return &running{Sidecar: s, URL: "http://" + ln.Addr().String(), AdminURL: "http://" + adminLn.Addr().String()}, cancel, ran
}

// upstream answers after delay.
func upstream(t testing.TB, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func get(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestHealthAndReadiness(t *testing.T) {
	s := start(t, testConfig(t, "LOOMGATE_UPSTREAM="+upstream(t, 0)))
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/debug/pprof/": 404} {
		if got := get(t, s.AdminURL+path); got != want {
			t.Errorf("GET %s = %d; want %d", path, got, want)
		}
	}
	s.ready.Store(false)
	if got := get(t, s.AdminURL+"/readyz"); got != 503 {
		t.Errorf("GET /readyz while draining = %d; want 503", got)
	}
}

func TestPprofOnlyOnLoopback(t *testing.T) {
	s, err := New(testConfig(t, "LOOMGATE_PPROF=true"), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := s.adminHandler()
	for _, tt := range []struct {
		remote string
		want   int
	}{{"127.0.0.1:5000", 200}, {"[::1]:5000", 200}, {"[::ffff:127.0.0.1]:5000", 200}, {"10.1.2.3:5000", 403}, {"[2001:db8::1]:5000", 403}} {
		r, _ := http.NewRequest("GET", "/debug/pprof/", nil)
		r.RemoteAddr = tt.remote
		w := &recorder{header: http.Header{}}
		h.ServeHTTP(w, r)
		if w.status != tt.want {
			t.Errorf("GET /debug/pprof/ from %s = %d; want %d", tt.remote, w.status, tt.want)
		}
	}
}

// recorder is the least http.ResponseWriter that keeps the status.
type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return len(b), nil
}
func (r *recorder) WriteHeader(s int) { r.status = s }

func TestConfigProblemsNameTheirFields(t *testing.T) {
	tests := []struct {
		env        []string
		wantFields []string
	}{
		{nil, nil},
		{[]string{"LOOMGATE_UPSTREAM=http://127.0.0.1:99999"}, []string{"Upstream"}},
		{[]string{"LOOMGATE_UPSTREAM=http://127.0.0.1:0"}, []string{"Upstream"}},
		{[]string{"LOOMGATE_UPSTREAM=https://svc:8443"}, []string{"Upstream"}},
		{[]string{"LOOMGATE_WORKERS=0", "LOOMGATE_BULKHEAD=-1"}, []string{"Workers", "Bulkhead"}},
		{[]string{"LOOMGATE_BULKHEAD_WAIT=1s"}, []string{"BulkheadWait"}},
		{[]string{"LOOMGATE_MAX_INFLIGHT_BYTES=-1"}, []string{"MaxInFlightBytes"}},
		{[]string{"LOOMGATE_LISTEN=:99999"}, []string{"Listen"}},
		{[]string{"LOOMGATE_LISTEN=127.0.0.1:7000", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:7000"}, []string{"AdminListen"}},
		{[]string{"LOOMGATE_UPSTREAM_METRICS_URL=ftp://x/metrics"}, []string{"UpstreamMetricsURL"}},
		{[]string{"LOOMGATE_UPSTREAM_METRICS_URL=https://x/metrics"}, nil},
		{[]string{"LOOMGATE_UPSTREAM_TIMEOUT=0s", "LOOMGATE_HEADER_TIMEOUT=0s"}, []string{"UpstreamTimeout", "HeaderTimeout"}},
	}
	for _, tt := range tests {
		err := testConfig(t, tt.env...).Validate()
		var got []string
		if ce, ok := err.(*ConfigError); ok {
			for _, p := range ce.Problems {
				got = append(got, p.Field)
			}
		} else if err != nil {
			t.Errorf("Validate(%q) = %v; want a *ConfigError", tt.env, err)
		}
		if strings.Join(got, " ") != strings.Join(tt.wantFields, " ") {
			t.Errorf("Validate(%q) names %q; want %q (%v)", tt.env, got, tt.wantFields, err)
		}
	}
}

// BenchmarkObserve is what every request costs the sidecar after its
// response: the metrics and the advice's window, given the Outcome the
// proxy hands over, its end's clock reading included.
func BenchmarkObserve(b *testing.B) { benchmarkObserve(b) }

// BenchmarkObserveAdaptive is the same in adaptive mode, where the
// controller counts each answer by its route class too.
func BenchmarkObserveAdaptive(b *testing.B) { benchmarkObserve(b, "LOOMGATE_MODE=adaptive") }

func benchmarkObserve(b *testing.B, environ ...string) {
	s, err := New(testConfig(b, environ...), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	obs := &observer{metrics: s.metrics, advisor: s.advisor, controller: s.controller}
	o := proxy.Outcome{Kind: proxy.OK, Status: 200, UpstreamStatus: 200, Admission: true, Admitted: true,
		Queue: time.Millisecond, Service: 40 * time.Millisecond, Total: 42 * time.Millisecond,
		Method: []byte("GET"), Target: []byte("/users/7?x=1")}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		o := o
		// The proxy's clock reading at the request's end, which it takes
		// whether or not anyone observes.
		o.End = time.Now()
		for pb.Next() {
			obs.Observe(&o)
		}
	})
}
