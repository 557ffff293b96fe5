package sidecartest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// Binary is the test's own command built once per test run, for tests of
// what only a real process shows: exit codes, signals, stderr, a child
// with limits of its own. The zero value is ready; TestMain calls Remove
// after the tests.
type Binary struct {
	// Name is the file's name, e.g. "loomgate".
	Name string

	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the package in the test's working directory (its own
// folder, as go test runs it) on first use and returns the binary's path.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", b.Name+"-bin")
		if b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, b.Name)
		out, err := exec.Command("go", "build", "-o", b.path, ".").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes what Path built.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
