package limiter

import (
	"context"
	"errors"
	"slices"
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

// served is one request through the real limiter l, tallied in real, and
// served by serve once admitted.
func served(l *Limiter, real *tally, serve func()) {
	start := time.Now()
	err := l.Acquire(context.Background(), 0)
	if err != nil {
		real.add(Decision{Would: WouldReject, Err: err})
		return
	}
	if w := time.Since(start); w > 0 {
		real.add(Decision{Would: WouldQueue, Wait: w})
	} else {
		real.add(Decision{Would: WouldAdmit})
	}
	serve()
	l.Release(0)
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
				served(l, &real, func() { time.Sleep(service) })
			})
		})
		synctest.Test(t, func(t *testing.T) {
			s := NewShadow(mustNew(t, cfg), shadow.add)
			arrivals(n, gap, func(int) {
				ticket := s.Arrive(0, Default, 0)
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

// TestShadowInFrontOfAFullPool: open arrivals at 1.5 times what a pool of
// 5 serves, against a real limiter of 5 workers in front of the pool and
// against a shadow of one, whose requests all go on to the pool and queue
// inside it. The pool's answers then come ever later; held for those
// service times, the shadow served a fraction of what the pool did, and
// timed out nearly every request. Told the pool's capacity, it holds each
// place for the time the request would have taken behind the real limit,
// and rejects as the real limiter does.
func TestShadowInFrontOfAFullPool(t *testing.T) {
	const (
		n       = 600
		gap     = 10 * time.Millisecond // 100 a second
		service = 75 * time.Millisecond // the pool of 5 serves 67 a second
		pool    = 5
	)
	cfg := Config{Mode: Fixed, Workers: pool, QueueSize: 1000, QueueTimeout: 500 * time.Millisecond}
	// inPool holds a place in a pool of 5 for service, waiting in turn.
	inPool := func(workers chan struct{}) {
		workers <- struct{}{}
		time.Sleep(service)
		<-workers
	}
	var real tally
	synctest.Test(t, func(t *testing.T) {
		l, workers := mustNew(t, cfg), make(chan struct{}, pool)
		arrivals(n, gap, func(int) {
			served(l, &real, func() { inPool(workers) })
		})
	})
	if real.timely < n/5 {
		t.Fatalf("real: %d of %d timed out; want about a third, or the case proves nothing", real.timely, n)
	}
	for _, capacity := range []float64{0, pool} {
		var shadow tally
		synctest.Test(t, func(t *testing.T) {
			s, workers := NewShadow(mustNew(t, cfg), shadow.add), make(chan struct{}, pool)
			s.SetCapacity(capacity)
			arrivals(n, gap, func(int) {
				start := time.Now()
				ticket := s.Arrive(0, Default, 0)
				inPool(workers)
				ticket.Leave(time.Since(start))
			})
			time.Sleep(2 * time.Second)
			s.Close()
			if st := s.Limiter().Stats(); st.InFlight != 0 || st.Queued != 0 {
				t.Errorf("shadow after the run: %+v; want every permit returned", st)
			}
		})
		t.Logf("capacity %v: real admitted %d, queued %d (mean wait %v), timed out %d; shadow %d, %d (%v), %d",
			capacity, real.admitted, real.queued, meanWait(&real), real.timely, shadow.admitted, shadow.queued, meanWait(&shadow), shadow.timely)
		near := abs(real.timely-shadow.timely) <= real.timely/20 && abs(real.queued+real.admitted-shadow.queued-shadow.admitted) <= n/20
		switch {
		case capacity > 0 && !near:
			t.Errorf("told the capacity: real served %d, timed out %d; shadow %d, %d; want within 5%%",
				real.queued+real.admitted, real.timely, shadow.queued+shadow.admitted, shadow.timely)
		case capacity == 0 && near:
			t.Errorf("not told the capacity, the shadow timed out %d as the real %d: the case does not show the pool's queue", shadow.timely, real.timely)
		}
	}
}

// TestShadowOrdersByLevel: a dry run of a policy with priorities queues
// as it would: of a sheddable and a critical request that arrive behind a
// held permit, the critical one would be admitted first.
func TestShadowOrdersByLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var order []Level
		s := NewShadow(mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Minute, Priorities: true}),
			func(d Decision) {
				mu.Lock()
				order = append(order, d.Level)
				mu.Unlock()
			})
		first := s.Arrive(0, Default, 0)
		batch := s.Arrive(0, Sheddable, 0)
		synctest.Wait()
		checkout := s.Arrive(0, Critical, 0)
		synctest.Wait()
		first.Leave(time.Second)
		time.Sleep(2 * time.Second)
		checkout.Leave(time.Second)
		time.Sleep(2 * time.Second)
		batch.Leave(time.Second)
		time.Sleep(2 * time.Second)
		s.Close()
		if want := []Level{Default, Critical, Sheddable}; !slices.Equal(order, want) {
			t.Errorf("decided in order %v; want %v, the critical before the sheddable that came first", order, want)
		}
	})
}
