package overhead

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"testing"

	"github.com/loomgate/loomgate/lab/bench"
)

// A process that ends before it listens is started again, and the second,
// which finds its address listening, is the one returned; one that always
// ends is tried startTries times, and its error says it ended.
func TestRetriedStartsAgainAProcessThatEnded(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	ctx := context.Background()
	calls := 0
	p, url, err := retried(func() (*bench.Proc, string, error) {
		calls++
		if calls == 1 {
			addr, err := bench.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			return startServing(ctx, dir, addr, "ends", place{}, nil, sh, "-c", "exit 2")
		}
		return startServing(ctx, dir, ln.Addr().String(), "serves", place{}, nil, sh, "-c", "exec sleep 60")
	})
	if err != nil || calls != 2 || url != "http://"+ln.Addr().String() {
		t.Fatalf("retried = %q, %v after %d starts; want the second's address, no error, 2 starts", url, err, calls)
	}
	p.Stop()

	calls = 0
	_, _, err = retried(func() (*bench.Proc, string, error) {
		calls++
		addr, err := bench.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		return startServing(ctx, dir, addr, "ends", place{}, nil, sh, "-c", "exit 2")
	})
	if !errors.Is(err, bench.ErrEnded) || calls != startTries {
		t.Errorf("retried of a process that always ends = %v after %d starts; want ErrEnded after %d", err, calls, startTries)
	}
}
