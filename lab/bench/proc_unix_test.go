//go:build unix

package bench

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readyWriter closes ready at the first write.
type readyWriter struct {
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.ready) })
	return len(b), nil
}

// A process is asked to stop with SIGTERM, and killed only if it is still
// there after its grace period.
func TestProcStopDrainsThenKills(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, tt := range []struct {
		name, script string
		grace        time.Duration
		want         syscall.Signal
	}{
		{"ends on SIGTERM", "echo ready; exec sleep 60", time.Minute, syscall.SIGTERM},
		{"ignores SIGTERM", "trap '' TERM; echo ready; exec sleep 60", 100 * time.Millisecond, syscall.SIGKILL},
	} {
		out := &readyWriter{ready: make(chan struct{})}
		p, err := Command{Name: tt.name, Path: sh, Args: []string{"-c", tt.script}, Output: out, Grace: tt.grace}.Start()
		if err != nil {
			t.Fatal(err)
		}
		<-out.ready
		p.Stop()
		ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != tt.want {
			t.Errorf("%s: stopped with %v; want ended by %v", tt.name, p.cmd.ProcessState, tt.want)
		}
		p.Stop() // a stopped process: nothing to do
	}
	if _, err := (Command{Name: "nothing", Path: "/nonexistent/loomgate"}).Start(); err == nil || !strings.Contains(err.Error(), "nothing: ") {
		t.Errorf("Start of a missing executable = %v; want its name in the error", err)
	}
}

// A process that ends before it listens fails the wait at once, with its
// exit; one that listens passes it.
func TestProcWaitListeningEndsWithTheProcess(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Command{Name: "exits", Path: sh, Args: []string{"-c", "exit 2"}, Output: io.Discard}.Start()
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err = p.WaitListening(context.Background(), addr, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "exits ended before it listened on "+addr+" (exit status 2)") {
		t.Errorf("WaitListening of a process that exited 2 = %v; want its end named", err)
	}
	// Well within the minute it would otherwise wait.
	if took := time.Since(begin); took > 30*time.Second {
		t.Errorf("WaitListening of a process that exited took %v", took)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	q, err := Command{Name: "sleeps", Path: sh, Args: []string{"-c", "exec sleep 60"}, Output: io.Discard, Grace: time.Second}.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Stop()
	if err := q.WaitListening(context.Background(), ln.Addr().String(), 10*time.Second); err != nil {
		t.Errorf("WaitListening with a listener there = %v; want nil", err)
	}
}
