// Package sidecartest runs a sidecar in the test's process on loopback,
// built from LOOMGATE_* variables as the binary builds it, and reads its
// metrics: for the end-to-end tests of the commands and of the repository
// checks, which would otherwise each keep a copy. So are the external
// tools those tests drive (RequireTool) and a buffer written while a test
// reads it (SyncBuffer).
package sidecartest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/loomgate/loomgate/sidecar"
)

// Sidecar is a sidecar serving on loopback until its test ends.
type Sidecar struct {
	*sidecar.Sidecar
	// URL and AdminURL are the traffic and admin listeners' base URLs.
	URL, AdminURL string
}

// Start runs a sidecar configured from env (LOOMGATE_ names; the listeners
// are always on 127.0.0.1:0) with opts, logging nowhere unless opts says,
// until the test ends; then it drains it and fails the test if the drain
// did not end cleanly.
func Start(t testing.TB, env map[string]string, opts sidecar.Options) *Sidecar {
	t.Helper()
	environ := []string{"LOOMGATE_LISTEN=127.0.0.1:0", "LOOMGATE_ADMIN_LISTEN=127.0.0.1:0"}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cfg, err := sidecar.ParseEnv(environ)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := sidecar.New(cfg, opts)
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
	Run(t, s, ln, adminLn)
	return &Sidecar{Sidecar: s, URL: "http://" + ln.Addr().String(), AdminURL: "http://" + adminLn.Addr().String()}
}

// Run runs s on ln and adminLn until the test ends, then drains it.
func Run(t testing.TB, s *sidecar.Sidecar, ln, adminLn net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln, adminLn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar Run = %v", err)
		}
	})
}

// SlowUpstream is an upstream on loopback that answers "ok" after delay,
// and records the most requests it held at once.
func SlowUpstream(t testing.TB, delay time.Duration) (url string, most *atomic.Int64) {
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

// Histogram returns a histogram's count and sum from the sidecar's
// registry.
func (s *Sidecar) Histogram(t testing.TB, name string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := s.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0, 0
}

// Value returns the value of the counter or gauge name whose labels
// include labels (name, value, name, value …).
func (s *Sidecar) Value(t testing.TB, name string, labels ...string) float64 {
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
