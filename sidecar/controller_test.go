package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fixedController sets one limit when it starts and counts its samples.
type fixedController struct {
	hooks   ControllerHooks
	limit   int
	samples atomic.Int64
}

func (c *fixedController) Record(int, time.Duration) { c.samples.Add(1) }
func (c *fixedController) Run(ctx context.Context) {
	c.hooks.SetLimit(c.limit)
	<-ctx.Done()
}

// TestPluggedController: in adaptive mode, Options.Controller's controller
// moves the limit in place of package adaptive's, the limiter enforces it,
// and it hears of every request the upstream answered.
func TestPluggedController(t *testing.T) {
	var inside, most, served atomic.Int64
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		inside.Add(-1)
		served.Add(1)
		io.WriteString(w, "ok")
	})}
	go srv.Serve(up)
	t.Cleanup(func() { srv.Close() })

	ctrl := &fixedController{limit: 3}
	cfg := testConfig(t, "LOOMGATE_MODE=adaptive", "LOOMGATE_UPSTREAM=http://"+up.Addr().String())
	s := startWith(t, cfg, Options{Logger: slog.New(slog.DiscardHandler), Controller: func(h ControllerHooks) Controller {
		ctrl.hooks = h
		return ctrl
	}})
	// The controller sets its limit as Run starts; wait for it before the
	// load, so that no request is admitted while admission is still open.
	for deadline := time.Now().Add(5 * time.Second); s.Stats().Limit != 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d 5 s after Run; want the plugged controller's 3", s.Stats().Limit)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	closedLoop(s.URL+"/", 10, stop, &wg)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if m := most.Load(); m > 3 {
		t.Errorf("the upstream saw %d requests at once; want at most the plugged limit, 3", m)
	}
	// Every answer reaches the observer after the client has it; give the
	// last ones a moment.
	for deadline := time.Now().Add(5 * time.Second); ctrl.samples.Load() != served.Load() && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	if got, want := ctrl.samples.Load(), served.Load(); got != want || got == 0 {
		t.Errorf("the plugged controller heard of %d requests; want the %d the upstream answered", got, want)
	}
	if s.adaptive != nil {
		t.Error("package adaptive's controller was built beside the plugged one; want only the plugged one")
	}
}
