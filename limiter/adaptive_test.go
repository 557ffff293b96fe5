package limiter

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestAdaptiveStartsOpenAndFollowsSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Adaptive, QueueSize: 100, QueueTimeout: time.Minute})
		// No limit yet: everyone is admitted at once.
		for i := range 20 {
			if err := l.TryAcquire(0); err != nil {
				t.Fatalf("TryAcquire %d before any limit = %v; want admitted", i, err)
			}
		}
		if s := l.Stats(); s.Limit != 0 || s.InFlight != 20 {
			t.Fatalf("Stats = %+v; want no limit and 20 in flight", s)
		}

		// A limit below what is in flight: newcomers wait, and releases
		// hand nothing on until in flight is below the limit.
		l.SetLimit(5)
		if s := l.Stats(); s.Limit != 5 {
			t.Fatalf("Stats().Limit = %d after SetLimit(5); want 5", s.Limit)
		}
		admitted := make(chan int, 10)
		for i := range 10 {
			go func() {
				if err := l.Acquire(context.Background(), 0); err != nil {
					t.Errorf("waiter %d: Acquire = %v", i, err)
					return
				}
				admitted <- i
			}()
			synctest.Wait()
		}
		for range 15 {
			l.Release(0)
		}
		synctest.Wait()
		if n := len(admitted); n != 0 {
			t.Fatalf("%d admitted after 15 of 20 released under a limit of 5; want none (5 still in flight)", n)
		}
		l.Release(0)
		synctest.Wait()
		if got := <-admitted; got != 0 {
			t.Errorf("first admitted = waiter %d; want 0 (FIFO)", got)
		}
		if s := l.Stats(); s.InFlight != 5 || s.Queued != 9 {
			t.Fatalf("Stats = %+v; want 5 in flight, 9 queued", s)
		}

		// A higher limit admits the oldest waiters at once (in which
		// order their goroutines then run is the scheduler's).
		l.SetLimit(8)
		synctest.Wait()
		got := []int{<-admitted, <-admitted, <-admitted}
		slices.Sort(got)
		if !slices.Equal(got, []int{1, 2, 3}) {
			t.Errorf("admitted waiters %v after SetLimit(8); want the three oldest, 1 2 3", got)
		}
		// Lifting the limit admits everyone.
		l.SetLimit(0)
		synctest.Wait()
		if s := l.Stats(); s.Queued != 0 || s.InFlight != 14 {
			t.Fatalf("Stats after SetLimit(0) = %+v; want 14 in flight, none queued", s)
		}
		for range 14 {
			l.Release(0)
		}
		if s := l.Stats(); s.InFlight != 0 {
			t.Fatalf("in flight after all released = %d", s.InFlight)
		}
	})
}

// TestCeilingBoundsEveryLimit: with a Ceiling, Adaptive mode admits no
// more than it at once before its first limit, with its limit lifted, and
// under a higher limit; a lower limit is the limit.
func TestCeilingBoundsEveryLimit(t *testing.T) {
	l := mustNew(t, Config{Mode: Adaptive, Ceiling: 3})
	for _, c := range []struct {
		set  int // -1: none set yet
		want int
	}{{-1, 3}, {10, 3}, {2, 2}, {0, 3}} {
		if c.set >= 0 {
			l.SetLimit(c.set)
		}
		admitted := 0
		for l.TryAcquire(0) == nil {
			admitted++
			if admitted > 100 {
				break
			}
		}
		if admitted != c.want || l.Stats().Limit != c.want {
			t.Errorf("limit set %d: %d admitted at once, Stats().Limit %d; want %d", c.set, admitted, l.Stats().Limit, c.want)
		}
		for range admitted {
			l.Release(0)
		}
	}
}

func TestSetLimitOutsideAdaptivePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("SetLimit on a Fixed limiter did not panic")
		}
	}()
	mustNew(t, Config{Mode: Fixed, Workers: 1}).SetLimit(2)
}

// TestAdaptiveHammer: many requests while the limit moves; at every
// admission in flight is within the highest limit set lately, and
// everything balances at the end.
func TestAdaptiveHammer(t *testing.T) {
	l := mustNew(t, Config{Mode: Adaptive, QueueSize: 1000, QueueTimeout: time.Second})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	ceiling := 0 // the highest limit set so far; 0 before the first
	wg.Go(func() {
		for {
			select {
			case <-stop:
				l.SetLimit(0)
				return
			default:
			}
			n := 1 + rand.IntN(20)
			mu.Lock()
			ceiling = max(ceiling, n)
			mu.Unlock()
			l.SetLimit(n)
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(5 * time.Millisecond)
	var clients sync.WaitGroup
	for range 50 {
		clients.Go(func() {
			for range 100 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3))*time.Millisecond)
				err := l.Acquire(ctx, 0)
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				c := ceiling
				mu.Unlock()
				if in := l.Stats().InFlight; in > int64(c)+50 {
					t.Errorf("in flight %d above every limit set (%d) and the clients", in, c)
				}
				l.Release(0)
			}
		})
	}
	clients.Wait()
	close(stop)
	wg.Wait()
	if s := l.Stats(); s.InFlight != 0 || s.Queued != 0 {
		t.Errorf("Stats at the end = %+v; want nothing in flight or queued", s)
	}
}
