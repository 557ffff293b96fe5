package limiter

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestTryReserve(t *testing.T) {
	type step struct {
		bytes int64
		want  bool
	}
	tests := []struct {
		name      string
		max       int64
		acquired  int64 // what Acquire took first
		steps     []step
		wantBytes int64 // Stats().Bytes after the steps
	}{
		{"no bulkhead counts everything", 0, 100, []step{{1 << 40, true}, {5, true}}, 100 + 1<<40 + 5},
		{"fits", 1000, 100, []step{{900, true}}, 1000},
		{"one byte too many", 1000, 100, []step{{901, false}, {900, true}}, 1000},
		{"larger than the bulkhead", 1000, 0, []step{{1001, false}}, 0},
		{"zero always fits", 1000, 1000, []step{{0, true}, {1, false}}, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustNew(t, Config{Mode: Unbounded, MaxInFlightBytes: tt.max})
			if err := l.Acquire(context.Background(), tt.acquired); err != nil {
				t.Fatalf("Acquire(%d) = %v", tt.acquired, err)
			}
			held := tt.acquired
			for _, s := range tt.steps {
				got := l.TryReserve(s.bytes)
				if got != s.want {
					t.Errorf("TryReserve(%d) with %d held of %d = %v; want %v", s.bytes, held, tt.max, got, s.want)
				}
				if got {
					held += s.bytes
				}
			}
			if got := l.Stats().Bytes; got != tt.wantBytes {
				t.Errorf("Stats().Bytes = %d; want %d", got, tt.wantBytes)
			}
			if _, _, peak := l.TakePeaks(); peak != tt.wantBytes {
				t.Errorf("bytes peak = %d; want %d", peak, tt.wantBytes)
			}
			l.Release(held)
			if s := l.Stats(); s.Bytes != 0 || s.InFlight != 0 {
				t.Errorf("after Release(%d) Stats() = %+v; want nothing held", held, s)
			}
			// Everything came back: the whole bulkhead is free again.
			if tt.max > 0 {
				if err := l.Acquire(context.Background(), tt.max); err != nil {
					t.Errorf("Acquire(%d) of an empty bulkhead = %v; want nil", tt.max, err)
				}
			}
		})
	}
}

func TestTryReserveNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("TryReserve(-1) did not panic")
		}
	}()
	mustNew(t, Config{Mode: Unbounded}).TryReserve(-1)
}

// TestMemoryHammer is the memory bulkhead's promise under contention:
// requests that reserve on admission and again later, as a response does
// when its headers arrive, never hold more than MaxInFlightBytes together,
// and the bytes counted (what loomgate_in_flight_bytes and its peak show)
// never exceed it either.
func TestMemoryHammer(t *testing.T) {
	const budget = 64 << 10
	for _, cfg := range []Config{
		{Mode: Unbounded, MaxInFlightBytes: budget},
		{Mode: Fixed, Workers: 6, QueueSize: 20, QueueTimeout: 1 << 20, MaxInFlightBytes: budget},
	} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			l := mustNew(t, cfg)
			// held is the test's own sum of what admitted requests hold,
			// raised only after the limiter granted and lowered before
			// Release, so it never overstates what the limiter allowed.
			var held, most, worst atomic.Int64
			var admitted, refused, late atomic.Int64
			stop := make(chan struct{})
			var watch sync.WaitGroup
			watch.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					peak(&worst, l.Stats().Bytes)
					_, _, p := l.TakePeaks()
					peak(&worst, p)
				}
			})
			var wg sync.WaitGroup
			for g := range 24 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 7))
					for range 400 {
						first := r.Int64N(budget / 4)
						if err := l.Acquire(context.Background(), first); err != nil {
							refused.Add(1)
							continue
						}
						admitted.Add(1)
						mine := first
						peak(&most, held.Add(first))
						more := r.Int64N(budget / 4)
						if l.TryReserve(more) {
							mine += more
							peak(&most, held.Add(more))
						} else {
							late.Add(1)
						}
						if r.IntN(3) == 0 {
							runtime.Gosched()
						}
						held.Add(-mine)
						l.Release(mine)
					}
				})
			}
			wg.Wait()
			close(stop)
			watch.Wait()
			if most.Load() > budget {
				t.Errorf("requests held %d bytes at once; want at most %d", most.Load(), budget)
			}
			if worst.Load() > budget {
				t.Errorf("Stats().Bytes or the bytes peak reached %d; want at most %d", worst.Load(), budget)
			}
			if s := l.Stats(); s.Bytes != 0 || s.InFlight != 0 || s.Queued != 0 {
				t.Errorf("after the hammer Stats() = %+v; want all zero", s)
			}
			if admitted.Load() == 0 || refused.Load()+late.Load() == 0 {
				t.Errorf("admitted %d, refused %d, refused late %d; want some admitted and the bulkhead exercised",
					admitted.Load(), refused.Load(), late.Load())
			}
		})
	}
}
