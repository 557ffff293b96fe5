// Package stubtest serves the experiment upstream on loopback for a test's
// duration, as net/http/httptest serves a handler: for the tests of the
// rig, the commands and the sidecar that need an upstream with a hidden
// pool, a delay or held memory.
package stubtest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/loomgate/loomgate/lab/stub"
)

// Start serves a stub configured by cfg on a loopback port until the test
// ends, then shuts it down, and returns its base URL.
func Start(t testing.TB, cfg stub.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, cfg, ln)
}

// Serve is Start on a listener of the caller's, for a test that wraps one
// (to count its connections, say).
func Serve(t testing.TB, cfg stub.Config, ln net.Listener) string {
	t.Helper()
	s, err := stub.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String()
}
