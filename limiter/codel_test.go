package limiter

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// overload drives l with open arrivals every gap for d, each held for
// service once admitted, and returns the queue times of the requests
// admitted after settle and the number rejected by timeout.
func overload(t *testing.T, l *Limiter, gap, service, d, settle time.Duration) (waits []time.Duration, timedOut int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for time.Since(start) < d {
		wg.Go(func() {
			arrived := time.Now()
			err := l.Acquire(context.Background(), 0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrQueueTimeout):
				timedOut++
				return
			case err != nil:
				t.Errorf("Acquire = %v", err)
				return
			}
			if arrived.Sub(start) >= settle {
				waits = append(waits, time.Since(arrived))
			}
			mu.Unlock()
			time.Sleep(service)
			l.Release(0)
			mu.Lock()
		})
		time.Sleep(gap)
	}
	wg.Wait()
	slices.Sort(waits)
	return waits, timedOut
}

func quantileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[int(q*float64(len(ds)-1))]
}

// TestCoDelHoldsQueueTimeNearTarget: arrivals at twice what one worker
// serves, for 3 s. FIFO's queue grows without end inside its 10 s timeout,
// and a request admitted at the end has waited over a second; CoDel's
// admitted requests wait about its 5 ms target once the queue has stood
// for its 100 ms interval, and the excess is rejected instead.
func TestCoDelHoldsQueueTimeNearTarget(t *testing.T) {
	const (
		gap     = 5 * time.Millisecond  // 200 arrivals a second
		service = 10 * time.Millisecond // one worker serves 100
		d       = 3 * time.Second
		settle  = 500 * time.Millisecond
	)
	base := Config{Mode: Fixed, Workers: 1, QueueSize: 100000, QueueTimeout: 10 * time.Second}
	synctest.Test(t, func(t *testing.T) {
		waits, timedOut := overload(t, mustNew(t, base), gap, service, d, settle)
		if p50 := quantileOf(waits, 0.5); p50 < time.Second {
			t.Errorf("FIFO: median queue time %v; want over 1s (the queue grows by 100 a second)", p50)
		}
		if timedOut != 0 {
			t.Errorf("FIFO: %d timed out; want none within 10s", timedOut)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		cfg := base
		cfg.QueuePolicy, cfg.QueueTarget, cfg.QueueInterval = CoDel, 5*time.Millisecond, 100*time.Millisecond
		waits, timedOut := overload(t, mustNew(t, cfg), gap, service, d, settle)
		if p99 := quantileOf(waits, 0.99); p99 > 5*time.Millisecond {
			t.Errorf("CoDel: p99 queue time %v; want at most the 5ms target", p99)
		}
		// One worker serves 100 a second of the 200 that arrive: about
		// half are turned away, and none of the served is lost to it.
		if len(waits) < 200 {
			t.Errorf("CoDel: %d admitted after %v; want the worker kept busy (about 250)", len(waits), settle)
		}
		if timedOut < 200 {
			t.Errorf("CoDel: %d rejected; want the excess rejected (about 300)", timedOut)
		}
	})
}

// TestCoDelInAdaptiveMode: Adaptive queues as Fixed does, its policy
// included. At a limit of 1 set by its controller, the same overload as
// above: CoDel holds queue time at its target and rejects the excess.
func TestCoDelInAdaptiveMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Adaptive, QueueSize: 100000, QueueTimeout: 10 * time.Second,
			QueuePolicy: CoDel, QueueTarget: 5 * time.Millisecond, QueueInterval: 100 * time.Millisecond})
		l.SetLimit(1)
		waits, timedOut := overload(t, l, 5*time.Millisecond, 10*time.Millisecond, 3*time.Second, 500*time.Millisecond)
		if p99 := quantileOf(waits, 0.99); p99 > 5*time.Millisecond {
			t.Errorf("p99 queue time %v; want at most the 5ms target", p99)
		}
		if len(waits) < 200 || timedOut < 200 {
			t.Errorf("%d admitted after 500ms, %d rejected; want about 250 of each: the permit kept busy, the excess rejected", len(waits), timedOut)
		}
	})
}

// TestCoDelLetsABurstQueue: a burst that drains within the interval queues
// as with FIFO, in order, and nobody is rejected.
func TestCoDelLetsABurstQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 100, QueueTimeout: 10 * time.Second,
			QueuePolicy: CoDel, QueueTarget: 5 * time.Millisecond, QueueInterval: 100 * time.Millisecond})
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				if err := l.Acquire(context.Background(), 0); err != nil {
					t.Errorf("request %d: Acquire = %v; want admitted (the burst drains in 40ms)", i, err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				l.Release(0)
			})
			synctest.Wait() // each joins the queue before the next
		}
		wg.Wait()
		if !slices.IsSorted(order) {
			t.Errorf("admitted in order %v; want FIFO within the interval", order)
		}
	})
}

func TestCoDelConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: Fixed, Workers: 1, QueueSize: 5, QueueTimeout: time.Second, QueuePolicy: CoDel, QueueInterval: time.Second}, "QueueTarget is 0s; want above 0"},
		{Config{Mode: Fixed, Workers: 1, QueueSize: 5, QueueTimeout: time.Second, QueuePolicy: CoDel, QueueTarget: 2 * time.Second, QueueInterval: time.Second}, "QueueTarget is 2s; want below QueueTimeout"},
		{Config{Mode: Fixed, Workers: 1, QueueSize: 5, QueueTimeout: time.Second, QueuePolicy: CoDel, QueueTarget: time.Millisecond}, "QueueInterval is 0s; want above 0"},
	} {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v; want %q", tt.cfg, err, tt.want)
		}
	}
}
