package sidecar

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"
)

// TestRunEndsWhenCancelledAtAnyPointOfStartUp: a SIGTERM may arrive at any
// moment of start-up, before Run, while its parts start, or just after.
// Each time Run must drain what little it has and return; a traffic
// listener still accepting after the cancel would leave the process
// running and this test hanging.
func TestRunEndsWhenCancelledAtAnyPointOfStartUp(t *testing.T) {
	up := upstream(t, 0)
	cfg := testConfig(t, "LOOMGATE_UPSTREAM="+up)
	const rounds = 300
	for i := range rounds {
		s, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
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
		// Round 0 cancels before Run; the others let start-up run for a
		// number of scheduler turns that grows with the round, so that
		// the cancel lands at every step of it on any machine's timing.
		if i == 0 {
			cancel()
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, ln, adminLn) }()
		for range i % 50 {
			runtime.Gosched()
		}
		if i%50 == 49 {
			time.Sleep(time.Duration(i/50) * time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Run = %v; want nil", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Run still running 10s after its context was cancelled", i)
		}
		// The traffic listener is closed: nothing accepts there any more.
		if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
			c.Close()
			t.Fatalf("round %d: the traffic listener still accepts after Run returned", i)
		}
	}
}
