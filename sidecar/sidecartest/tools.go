package sidecartest

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// RequireTool returns the path of the external program name. Where it is
// missing the test is skipped with the Debian package that provides it, so
// a developer without it still runs everything else; with
// REQUIRE_TEST_TOOLS=1 (set by CI) a missing tool fails the test instead,
// so that CI cannot pass by skipping.
func RequireTool(t testing.TB, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("REQUIRE_TEST_TOOLS") == "1" {
		t.Fatalf("%s not found (%v) and REQUIRE_TEST_TOOLS=1; install it: apt-get install %s", name, err, debianPackage)
	}
	t.Skipf("%s not found; install it to run this test: apt-get install %s", name, debianPackage)
	return ""
}

// SyncBuffer is a buffer a child process or a logger writes to while the
// test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
