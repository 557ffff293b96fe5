package limiter

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/field"
)

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return l
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no mode", Config{}, "Mode is Mode(0)"},
		{"no workers", Config{Mode: Fixed}, "Workers is 0"},
		{"negative queue", Config{Mode: Fixed, Workers: 1, QueueSize: -1}, "QueueSize is -1"},
		{"queue without timeout", Config{Mode: Fixed, Workers: 1, QueueSize: 5}, "QueueTimeout is 0s"},
		// The other mode's fields are checked as strictly as the active ones.
		{"negative workers in unbounded", Config{Mode: Unbounded, Workers: -3}, "Workers is -3"},
		{"negative bulkhead in fixed", Config{Mode: Fixed, Workers: 1, Bulkhead: -1}, "Bulkhead is -1"},
		{"negative bulkhead", Config{Mode: Unbounded, Bulkhead: -1}, "Bulkhead is -1"},
		{"negative wait", Config{Mode: Unbounded, Bulkhead: 1, BulkheadWait: -time.Second}, "BulkheadWait is -1s"},
		{"wait without bulkhead", Config{Mode: Unbounded, BulkheadWait: time.Second}, "BulkheadWait is 1s; has no effect unless"},
		{"negative bytes", Config{Mode: Unbounded, MaxInFlightBytes: -1}, "MaxInFlightBytes is -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%+v) = %v; want an error containing %q", tt.cfg, err, tt.want)
			}
			var fe *field.Error
			if !errors.As(err, &fe) || !strings.HasPrefix(tt.want, fe.Field+" ") {
				t.Errorf("New(%+v) = %v; want a *field.Error naming the field of %q", tt.cfg, err, tt.want)
			}
		})
	}
}

func TestBothModesSettingsAreAccepted(t *testing.T) {
	// One configuration with both modes' settings, as a ConfigMap that flips
	// by one variable carries it: each mode enforces only its own.
	both := Config{Workers: 7, QueueSize: 9, QueueTimeout: time.Second, Bulkhead: 5, BulkheadWait: time.Second}
	for _, tt := range []struct {
		mode                 Mode
		wantLimit, wantQueue int
	}{{Fixed, 7, 9}, {Unbounded, 5, 0}} {
		cfg := both
		cfg.Mode = tt.mode
		s := mustNew(t, cfg).Stats()
		if s.Limit != tt.wantLimit || s.QueueLimit != tt.wantQueue {
			t.Errorf("New(%+v).Stats() = %+v; want Limit %d, QueueLimit %d", cfg, s, tt.wantLimit, tt.wantQueue)
		}
	}
}

func TestStatsReportLimits(t *testing.T) {
	tests := []struct {
		cfg                  Config
		wantLimit, wantQueue int
	}{
		{Config{Mode: Fixed, Workers: 7, QueueSize: 9, QueueTimeout: time.Second}, 7, 9},
		{Config{Mode: Fixed, Workers: 7}, 7, 0},
		{Config{Mode: Unbounded}, 0, 0},
		{Config{Mode: Unbounded, Bulkhead: 5, BulkheadWait: time.Second}, 5, 0},
	}
	for _, tt := range tests {
		s := mustNew(t, tt.cfg).Stats()
		if s.Limit != tt.wantLimit || s.QueueLimit != tt.wantQueue || s.Mode != tt.cfg.Mode {
			t.Errorf("New(%+v).Stats() = %+v; want Limit %d, QueueLimit %d", tt.cfg, s, tt.wantLimit, tt.wantQueue)
		}
	}
}

// acquireAsync starts Acquire in a goroutine and returns where its result
// will arrive.
func acquireAsync(l *Limiter, ctx context.Context, bytes int64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Acquire(ctx, bytes) }()
	return done
}

func TestFixedQueueBoundAndExactTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 2, QueueSize: 3, QueueTimeout: 250 * time.Millisecond})
		ctx := context.Background()
		for i := range 2 {
			if err := l.Acquire(ctx, 0); err != nil {
				t.Fatalf("Acquire #%d = %v; want nil", i, err)
			}
		}
		start := time.Now()
		var waiters []<-chan error
		for range 3 {
			waiters = append(waiters, acquireAsync(l, ctx, 0))
		}
		synctest.Wait()
		if got := l.Stats().Queued; got != 3 {
			t.Fatalf("Queued = %d; want 3", got)
		}
		if err := l.Acquire(ctx, 0); !errors.Is(err, ErrQueueFull) {
			t.Errorf("Acquire with full queue = %v; want ErrQueueFull", err)
		}
		for i, w := range waiters {
			if err := <-w; !errors.Is(err, ErrQueueTimeout) {
				t.Errorf("waiter %d: Acquire = %v; want ErrQueueTimeout", i, err)
			}
		}
		if waited := time.Since(start); waited != 250*time.Millisecond {
			t.Errorf("waiters rejected after %v; want exactly 250ms", waited)
		}
		if s := l.Stats(); s.InFlight != 2 || s.Queued != 0 {
			t.Errorf("after timeouts Stats() = %+v; want InFlight 2, Queued 0", s)
		}
		l.Release(0)
		l.Release(0)
		if s := l.Stats(); s.InFlight != 0 {
			t.Errorf("after releases InFlight = %d; want 0", s.InFlight)
		}
	})
}

func TestFixedAdmitsInFIFOOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 100, QueueTimeout: time.Hour})
		if err := l.Acquire(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		const n = 20
		var mu sync.Mutex
		var order []int
		for i := range n {
			go func() {
				if err := l.Acquire(context.Background(), 0); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				l.Release(0)
			}()
			// Each waiter is queued before the next one arrives.
			synctest.Wait()
		}
		l.Release(0)
		synctest.Wait()
		if len(order) != n {
			t.Fatalf("admitted %d waiters; want %d", len(order), n)
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("admission order = %v; want 0..%d in order", order, n-1)
			}
		}
	})
}

func TestWaiterWhoLeavesLeavesNothingBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 10, QueueTimeout: time.Minute})
		if err := l.Acquire(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		gone := acquireAsync(l, ctx, 0)
		behind := acquireAsync(l, context.Background(), 0)
		synctest.Wait()
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire after cancel = %v; want context.Canceled", err)
		}
		if got := l.Stats().Queued; got != 1 {
			t.Errorf("Queued after one waiter left = %d; want 1", got)
		}
		// The permit goes to the waiter behind, not to the one who left.
		l.Release(0)
		if err := <-behind; err != nil {
			t.Errorf("next waiter: Acquire = %v; want nil", err)
		}
		l.Release(0)
		if s := l.Stats(); s.InFlight != 0 || s.Queued != 0 {
			t.Errorf("Stats() = %+v; want nothing in flight or queued", s)
		}
		// All permits are back: Workers requests are admitted at once.
		if err := l.Acquire(context.Background(), 0); err != nil {
			t.Errorf("Acquire on idle limiter = %v; want nil", err)
		}
	})
}

func TestZeroQueueRejectsAtOnce(t *testing.T) {
	l := mustNew(t, Config{Mode: Fixed, Workers: 1})
	if err := l.Acquire(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire(context.Background(), 0); !errors.Is(err, ErrQueueFull) {
		t.Errorf("Acquire with no queue = %v; want ErrQueueFull", err)
	}
}

func TestBulkhead(t *testing.T) {
	t.Run("fail fast", func(t *testing.T) {
		l := mustNew(t, Config{Mode: Unbounded, Bulkhead: 2})
		for range 2 {
			if err := l.Acquire(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Acquire(context.Background(), 0); !errors.Is(err, ErrBulkheadFull) {
			t.Errorf("Acquire on full bulkhead = %v; want ErrBulkheadFull", err)
		}
		if q := l.Stats().Queued; q != 0 {
			t.Errorf("Queued = %d; want 0 (fail fast never queues)", q)
		}
	})
	t.Run("wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := mustNew(t, Config{Mode: Unbounded, Bulkhead: 1, BulkheadWait: 100 * time.Millisecond})
			if err := l.Acquire(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			admitted := acquireAsync(l, context.Background(), 0)
			time.Sleep(60 * time.Millisecond)
			l.Release(0)
			if err := <-admitted; err != nil || time.Since(start) != 60*time.Millisecond {
				t.Errorf("Acquire = %v after %v; want nil after 60ms", err, time.Since(start))
			}
			start = time.Now()
			if err := l.Acquire(context.Background(), 0); !errors.Is(err, ErrBulkheadFull) || time.Since(start) != 100*time.Millisecond {
				t.Errorf("Acquire = %v after %v; want ErrBulkheadFull after 100ms", err, time.Since(start))
			}
		})
	})
	t.Run("off", func(t *testing.T) {
		l := mustNew(t, Config{Mode: Unbounded})
		for range 10000 {
			if err := l.Acquire(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
		}
		if s := l.Stats(); s.InFlight != 10000 || s.Limit != 0 {
			t.Errorf("Stats() = %+v; want 10000 in flight and no limit", s)
		}
	})
}

func TestMemoryBulkhead(t *testing.T) {
	l := mustNew(t, Config{Mode: Unbounded, MaxInFlightBytes: 1000})
	ctx := context.Background()
	if err := l.Acquire(ctx, 600); err != nil {
		t.Fatalf("Acquire(600) = %v; want nil", err)
	}
	if err := l.Acquire(ctx, 500); !errors.Is(err, ErrMemoryFull) {
		t.Errorf("Acquire(500) beside 600 of 1000 = %v; want ErrMemoryFull", err)
	}
	if err := l.Acquire(ctx, 5000); !errors.Is(err, ErrMemoryFull) {
		t.Errorf("Acquire(5000) of 1000 = %v; want ErrMemoryFull", err)
	}
	if err := l.Acquire(ctx, 400); err != nil {
		t.Errorf("Acquire(400) beside 600 of 1000 = %v; want nil", err)
	}
	if s := l.Stats(); s.Bytes != 1000 || s.InFlight != 2 {
		t.Errorf("Stats() = %+v; want 1000 bytes, 2 in flight", s)
	}
	l.Release(600)
	l.Release(400)
	if s := l.Stats(); s.Bytes != 0 || s.InFlight != 0 {
		t.Errorf("after release Stats() = %+v; want 0 bytes, 0 in flight", s)
	}
}

// TestTooLargeForTheWholeBulkhead: bytes over MaxInFlightBytes itself can
// never be admitted, and say so with ErrTooLarge, which is still an
// ErrMemoryFull; bytes that fit the bulkhead but not beside those held are
// the plain ErrMemoryFull, which a retry may pass.
func TestTooLargeForTheWholeBulkhead(t *testing.T) {
	l := mustNew(t, Config{Mode: Fixed, Workers: 1, QueueSize: 1, QueueTimeout: time.Second, MaxInFlightBytes: 1000})
	if err := l.TryAcquire(1001); !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrMemoryFull) {
		t.Errorf("TryAcquire(1001) of 1000 = %v; want ErrTooLarge, an ErrMemoryFull", err)
	}
	if err := l.Acquire(context.Background(), 5000); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Acquire(5000) of 1000 = %v; want ErrTooLarge", err)
	}
	if err := l.TryAcquire(1000); err != nil {
		t.Fatalf("TryAcquire(1000) of 1000 = %v; want nil", err)
	}
	if err := l.TryAcquire(1); !errors.Is(err, ErrMemoryFull) || errors.Is(err, ErrTooLarge) {
		t.Errorf("TryAcquire(1) beside 1000 of 1000 = %v; want ErrMemoryFull, not ErrTooLarge", err)
	}
	l.Release(1000)
	if s := l.Stats(); s.Bytes != 0 || s.InFlight != 0 {
		t.Errorf("Stats() = %+v; want nothing held", s)
	}
}

func TestMemoryReturnedWhenQueueRejects(t *testing.T) {
	l := mustNew(t, Config{Mode: Fixed, Workers: 1, MaxInFlightBytes: 100})
	if err := l.Acquire(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire(context.Background(), 10); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Acquire = %v; want ErrQueueFull", err)
	}
	if b := l.Stats().Bytes; b != 10 {
		t.Errorf("Bytes after rejection = %d; want 10 (the rejected request's bytes returned)", b)
	}
}

func TestTakePeaksSinceLastCall(t *testing.T) {
	l := mustNew(t, Config{Mode: Unbounded})
	for range 5 {
		_ = l.Acquire(context.Background(), 10)
	}
	for range 3 {
		l.Release(10)
	}
	if inFlight, queued, bytes := l.TakePeaks(); inFlight != 5 || queued != 0 || bytes != 50 {
		t.Errorf("TakePeaks() = %d, %d, %d; want 5, 0, 50", inFlight, queued, bytes)
	}
	if inFlight, _, bytes := l.TakePeaks(); inFlight != 2 || bytes != 20 {
		t.Errorf("second TakePeaks() = %d, _, %d; want the current 2 and 20", inFlight, bytes)
	}
}

func TestReleaseMoreThanAcquiredPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Release without Acquire did not panic")
		}
	}()
	mustNew(t, Config{Mode: Unbounded}).Release(0)
}

// TestHammer runs many clients that acquire, hold, release or give up, and
// checks the two invariants that matter in production: never more than the
// limit at once, and nothing left behind.
func TestHammer(t *testing.T) {
	for _, cfg := range []Config{
		{Mode: Fixed, Workers: 4, QueueSize: 8, QueueTimeout: 2 * time.Millisecond, MaxInFlightBytes: 1 << 20},
		{Mode: Unbounded, Bulkhead: 4, BulkheadWait: time.Millisecond},
		{Mode: Unbounded, MaxInFlightBytes: 4096},
	} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			l := mustNew(t, cfg)
			var now, most atomic.Int64
			var admitted, rejected atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range 300 {
						ctx, cancel := context.WithCancel(context.Background())
						if r.IntN(10) == 0 {
							cancel() // a client already gone
						}
						bytes := r.Int64N(1024)
						if err := l.Acquire(ctx, bytes); err != nil {
							rejected.Add(1)
							cancel()
							continue
						}
						admitted.Add(1)
						peak(&most, now.Add(1))
						if r.IntN(4) == 0 {
							time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
						}
						now.Add(-1)
						l.Release(bytes)
						cancel()
					}
				})
			}
			wg.Wait()
			if s := l.Stats(); s.InFlight != 0 || s.Queued != 0 || s.Bytes != 0 {
				t.Errorf("after the hammer Stats() = %+v; want all zero", s)
			}
			if s := l.Stats(); s.Limit > 0 && most.Load() > int64(s.Limit) {
				t.Errorf("%d requests in flight at once; want at most %d", most.Load(), s.Limit)
			}
			if admitted.Load() == 0 || admitted.Load()+rejected.Load() != 32*300 {
				t.Errorf("admitted %d + rejected %d; want a sum of %d with some admitted", admitted.Load(), rejected.Load(), 32*300)
			}
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, cfg := range []Config{
		{Mode: Fixed, Workers: 1 << 20, QueueSize: 10, QueueTimeout: time.Second},
		{Mode: Unbounded},
		{Mode: Unbounded, Bulkhead: 1 << 20, MaxInFlightBytes: 1 << 40},
	} {
		b.Run(cfg.Mode.String(), func(b *testing.B) {
			l := mustNew(b, cfg)
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := l.Acquire(ctx, 512); err != nil {
						b.Fatal(err)
					}
					l.Release(512)
				}
			})
		})
	}
}

// BenchmarkTryAcquireAtReleaseAt is admission as the proxy asks for it:
// at once, with the clock readings it has taken anyway (the request's
// start and its end), so the Limiter reads no clock of its own.
func BenchmarkTryAcquireAtReleaseAt(b *testing.B) {
	for _, cfg := range []Config{
		{Mode: Fixed, Workers: 1 << 20, QueueSize: 10, QueueTimeout: time.Second},
		{Mode: Unbounded},
		{Mode: Adaptive},
	} {
		b.Run(cfg.Mode.String(), func(b *testing.B) {
			l := mustNew(b, cfg)
			now := time.Now()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := l.TryAcquireAt(now, 512); err != nil {
						b.Fatal(err)
					}
					l.ReleaseAt(now, 512)
				}
			})
		})
	}
}
