package listen

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// At the bound Accept waits for a connection to close, and the one waiting
// in the backlog is then accepted; Close ends a waiting Accept with
// net.ErrClosed.
func TestBoundWaitsForAClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var errs atomic.Uint64
	l := New(ln, 1, &errs, nil)
	defer l.Close()
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	select {
	case err := <-accepted:
		t.Fatalf("Accept at the bound returned %v; want it to wait", err)
	case <-time.After(50 * time.Millisecond):
	}
	if l.Open() != 1 {
		t.Errorf("Open() = %d; want 1", l.Open())
	}
	l.ConnClosed()
	if err := <-accepted; err != nil {
		t.Fatalf("Accept after a close = %v; want the waiting connection", err)
	}

	go func() { _, err := l.Accept(); accepted <- err }()
	time.Sleep(10 * time.Millisecond)
	l.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v; want net.ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close = %v; want the first's, nil", err)
	}
}

func TestRetryable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "accept", Err: syscall.EMFILE}, true},
		{&net.OpError{Op: "accept", Err: syscall.ECONNABORTED}, true},
		{net.ErrClosed, false},
		{errors.New("other"), false},
	} {
		if got := retryable(tt.err); got != tt.want {
			t.Errorf("retryable(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}
