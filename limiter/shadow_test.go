package limiter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// tally counts decisions by what they were.
type tally struct {
	mu                             sync.Mutex
	admitted, queued, full, timely int
	waited                         time.Duration
}

func (t *tally) add(d Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case d.Would == WouldAdmit:
		t.admitted++
	case d.Would == WouldQueue:
		t.queued++
		t.waited += d.Wait
	case errors.Is(d.Err, ErrQueueTimeout):
		t.timely++
	default:
		t.full++
	}
}

// arrivals sends n requests gap apart; each calls serve in a goroutine.
func arrivals(n int, gap time.Duration, serve func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { serve(i) })
		time.Sleep(gap)
	}
	wg.Wait()
}

// TestShadowRejectsAsTheRealPolicyWould: the same open arrivals (three
// times what the workers serve) against a real fixed limiter and against
// a shadow of one, whose requests go on at once. The shadow's would-be
// admissions, waits and rejections match the real ones.
func TestShadowRejectsAsTheRealPolicyWould(t *testing.T) {
	const (
		n       = 600
		gap     = 5 * time.Millisecond  // 200 a second
		service = 75 * time.Millisecond // 5 workers serve 67 a second
	)
	for _, cfg := range []Config{
		{Mode: Fixed, Workers: 5, QueueSize: 20, QueueTimeout: time.Second},
		{Mode: Fixed, Workers: 5, QueueSize: 1000, QueueTimeout: 200 * time.Millisecond},
		{Mode: Fixed, Workers: 5, QueueSize: 1000, QueueTimeout: time.Second, QueuePolicy: CoDel, QueueTarget: 5 * time.Millisecond, QueueInterval: 100 * time.Millisecond},
		{Mode: Unbounded, Bulkhead: 5, BulkheadWait: 50 * time.Millisecond},
	} {
		var real, shadow tally
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, cfg)
			arrivals(n, gap, func(int) {
				start := time.Now()
				switch err := l.Acquire(context.Background(), 0); {
				case err == nil:
					if w := time.Since(start); w > 0 {
						real.add(Decision{Would: WouldQueue, Wait: w})
					} else {
						real.add(Decision{Would: WouldAdmit})
					}
					time.Sleep(service)
					l.Release(0)
				default:
					real.add(Decision{Would: WouldReject, Err: err})
				}
			})
		})
		synctest.Test(t, func(t *testing.T) {
			s := NewShadow(mustNew(t, cfg), shadow.add)
			arrivals(n, gap, func(int) {
				ticket := s.Arrive(0)
				time.Sleep(service) // served at once, for real
				ticket.Leave(service)
			})
			// The shadow world runs behind the real one: let its queue
			// drain (every wait is bounded by a second) before closing.
			time.Sleep(2 * time.Second)
			s.Close()
			if st := s.Limiter().Stats(); st.InFlight != 0 || st.Queued != 0 {
				t.Errorf("shadow after the run: %+v; want every permit returned", st)
			}
		})
		if real.full+real.timely == 0 {
			t.Fatalf("%+v: no real rejection; the case proves nothing", cfg)
		}
		// Served counts both kinds of admission: a request admitted from
		// the queue at the very instant it arrived reads as waiting 0 on
		// the real side and as queued in the shadow.
		near := func(a, b int) bool { return abs(a-b) <= max(2, max(a, b)/20) }
		if !near(real.full, shadow.full) || !near(real.timely, shadow.timely) || !near(real.queued+real.admitted, shadow.queued+shadow.admitted) {
			t.Errorf("%v %s: real admitted %d, queued %d, rejected full %d, timed out %d; shadow %d, %d, %d, %d; want within 5%%",
				cfg.Mode, cfg.QueuePolicy, real.admitted, real.queued, real.full, real.timely, shadow.admitted, shadow.queued, shadow.full, shadow.timely)
		}
		if cfg.QueuePolicy == FIFO {
			if r, w := meanWait(&real), meanWait(&shadow); (r - w).Abs() > r/20 {
				t.Errorf("%v: mean wait real %v, shadow %v; want within 5%%", cfg.Mode, r, w)
			}
		}
		t.Logf("%v %s: real admitted %d, queued %d (mean wait %v), rejected full %d, timed out %d; shadow %d, %d (%v), %d, %d",
			cfg.Mode, cfg.QueuePolicy, real.admitted, real.queued, meanWait(&real), real.full, real.timely,
			shadow.admitted, shadow.queued, meanWait(&shadow), shadow.full, shadow.timely)
	}
}

func meanWait(t *tally) time.Duration {
	if t.queued == 0 {
		return 0
	}
	return t.waited / time.Duration(t.queued)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
