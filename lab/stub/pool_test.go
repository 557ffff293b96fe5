package stub

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestWorkersResize: a pool grown hands its new workers to the waiters at
// once, in order; a pool shrunk lets those serving finish and starts no
// one until fewer than the new size are held.
func TestWorkersResize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers(1)
		ctx := context.Background()
		if err := w.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got := make(chan int, 3)
		for i := range 3 {
			go func() {
				if w.Acquire(ctx, 1) == nil {
					got <- i
				}
			}()
			// One at a time, so that they queue in order.
			synctest.Wait()
		}
		if len(got) != 0 {
			t.Fatalf("%d acquired from a full pool of 1; want 0", len(got))
		}
		w.Resize(3)
		synctest.Wait()
		// Both woke; which of them sends first is the scheduler's choice.
		if a, b := <-got, <-got; min(a, b) != 0 || max(a, b) != 1 || len(got) != 0 {
			t.Fatalf("grown to 3: waiters %d and %d acquired, %d more; want the first two, 0 and 1, then none", a, b, len(got))
		}
		// Three held; shrink to 1: two releases free no one.
		w.Resize(1)
		w.Release(1)
		w.Release(1)
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("shrunk to 1 with 1 still held: a waiter acquired; want none")
		}
		w.Release(1)
		synctest.Wait()
		if i := <-got; i != 2 {
			t.Errorf("last waiter = %d; want 2", i)
		}
	})
}

// TestWorkersCancel: a waiter whose context ends leaves the queue and
// takes no worker.
func TestWorkersCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers(1)
		if err := w.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := w.Acquire(ctx, 1); err == nil {
			t.Fatal("Acquire on a full pool = nil; want the context's error")
		}
		w.Release(1)
		if err := w.Acquire(context.Background(), 1); err != nil {
			t.Fatalf("Acquire after the waiter gave up = %v; want nil", err)
		}
	})
}

// TestPoolResizeEndpoint: /pool?size=N resizes the hidden pool, which
// /metrics then reports; without a pool, or with a bad size, it refuses.
func TestPoolResizeEndpoint(t *testing.T) {
	_, base := start(t, Config{Pool: 2})
	if code, body := get(t, base+"/pool?size=5"); code != 200 || body != "pool 5\n" {
		t.Errorf("/pool?size=5: %d %q; want 200 \"pool 5\\n\"", code, body)
	}
	mfs := scrape(t, base)
	if g := mfs["loomgate_stub_pool_size"].GetMetric()[0].GetGauge().GetValue(); g != 5 {
		t.Errorf("loomgate_stub_pool_size = %v after /pool?size=5; want 5", g)
	}
	for _, q := range []string{"", "?size=0", "?size=x"} {
		if code, _ := get(t, base+"/pool"+q); code != 400 {
			t.Errorf("/pool%s: %d; want 400", q, code)
		}
	}
	_, none := start(t, Config{})
	if code, _ := get(t, none+"/pool?size=5"); code != 409 {
		t.Errorf("/pool?size=5 without a pool: %d; want 409", code)
	}
}
