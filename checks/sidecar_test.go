package checks

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/loomgate/loomgate/sidecar"
)

// fromRepoRoot joins elem to the repository root (tests run in checks/).
func fromRepoRoot(elem ...string) string {
	return filepath.Join(append([]string{".."}, elem...)...)
}

// testSidecar is a sidecar running in this process on loopback, built by
// the product's own packages from LOOMGATE_* variables as the binary
// builds it.
type testSidecar struct {
	*sidecar.Sidecar
	URL, AdminURL string
}

// startSidecar runs a sidecar configured from env (LOOMGATE_ names; the
// listeners are always on 127.0.0.1:0) until the test ends, then drains it.
func startSidecar(t testing.TB, env map[string]string) *testSidecar {
	t.Helper()
	environ := []string{"LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0"}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cfg, err := sidecar.ParseEnv(environ)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.DiscardHandler)})
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
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln, adminLn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar Run = %v", err)
		}
	})
	return &testSidecar{Sidecar: s, URL: "http://" + ln.Addr().String(), AdminURL: "http://" + adminLn.Addr().String()}
}

// slowUpstream answers every request after delay and records the most
// requests it held at once.
func slowUpstream(t testing.TB, delay time.Duration) (url string, most *atomic.Int64) {
	t.Helper()
	var now atomic.Int64
	most = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(delay)
		now.Add(-1)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), most
}

// counter returns a counter's or gauge's value from the sidecar's registry.
func (s *testSidecar) counter(t testing.TB, name string, labels ...string) float64 {
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
			if labelsMatch(m, labels) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func labelsMatch(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freePort returns a loopback address nothing listens on.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a bytes.Buffer safe to write from a process's pipe copier
// while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
