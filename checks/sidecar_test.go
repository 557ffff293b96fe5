package checks

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/loomgate/loomgate/sidecar"
	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// fromRepoRoot joins elem to the repository root (tests run in checks/).
func fromRepoRoot(elem ...string) string {
	return filepath.Join(append([]string{".."}, elem...)...)
}

// testSidecar is a sidecar running in this process on loopback, built by
// the product's own packages from LOOMGATE_* variables as the binary
// builds it.
type testSidecar = sidecartest.Sidecar

// startSidecar runs a sidecar configured from env until the test ends,
// then drains it.
func startSidecar(t testing.TB, env map[string]string) *testSidecar {
	t.Helper()
	return sidecartest.Start(t, env, sidecar.Options{})
}

var slowUpstream = sidecartest.SlowUpstream

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
