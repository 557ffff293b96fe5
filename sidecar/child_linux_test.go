package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"
)

// TestChild is the sidecar of the tests that need one in a process of its
// own, for its open-file limit or its memory: it runs only when one of
// them starts it (startChild). LOOMGATE_TEST_CHILD_FILES, when set, is its
// open-file limit.
func TestChild(t *testing.T) {
	if os.Getenv("LOOMGATE_TEST_CHILD") == "" {
		t.Skip("started by the tests that need a sidecar process")
	}
	if v := os.Getenv("LOOMGATE_TEST_CHILD_FILES"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			t.Fatal(err)
		}
	}
	var cfg Config
	if err := env.ParseWithOptions(&cfg, env.Options{Prefix: EnvPrefix}); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Printf("listening %s %s\n", ln.Addr(), adminLn.Addr())
	if err := s.Run(ctx, ln, adminLn); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// child is a sidecar process started by a test.
type child struct {
	cmd            *exec.Cmd
	traffic, admin string
	stderr         lockedBuffer
	done           chan struct{} // closed when the process has exited
	err            error         // its exit, once done is closed
}

// startChild starts TestChild with env (LOOMGATE_ variables, and
// LOOMGATE_TEST_CHILD_FILES, GOMEMLIMIT …) over the test's own, and waits
// until it listens. It is killed when the test ends, and its log shown if
// the test failed.
func startChild(t *testing.T, env ...string) *child {
	t.Helper()
	c := &child{done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	c.cmd.Env = append(append(os.Environ(), "LOOMGATE_TEST_CHILD=1"), env...)
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if _, err := fmt.Sscanf(lines.Text(), "listening %s %s", &c.traffic, &c.admin); err == nil {
			break
		}
	}
	go func() {
		io.Copy(io.Discard, out)
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			t.Logf("the sidecar's log:\n%s", c.stderr.String())
		}
	})
	if c.traffic == "" {
		<-c.done
		t.Fatalf("the sidecar did not start: %v\n%s", c.err, c.stderr.String())
	}
	return c
}

// alive fails the test if the process has exited.
func (c *child) alive(t *testing.T, when string) {
	t.Helper()
	select {
	case <-c.done:
		t.Fatalf("%s: the sidecar exited: %v\n%s", when, c.err, c.stderr.String())
	default:
	}
}

// scrape reads the admin port's /metrics, within timeout.
func (c *child) scrape(timeout time.Duration) ([]byte, error) {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get("http://" + c.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// peakRSS is the most resident memory the process has had (VmHWM).
func (c *child) peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(kb, "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatal("no VmHWM in /proc/…/status")
	return 0
}

// terminate sends SIGTERM and returns how the process exited, failing the
// test if it takes longer than within.
func (c *child) terminate(t *testing.T, within time.Duration) error {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	return c.exit(t, within)
}

// exit waits, within a bound, for a process already told SIGTERM to exit,
// and returns how it did. It sends no second signal: one that lands after
// the drain, once the process has let go of SIGTERM, would kill it.
func (c *child) exit(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(within):
		t.Fatalf("the sidecar did not exit within %v of SIGTERM", within)
		return nil
	}
}
