package limiter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// wantSeconds checks RequestSeconds against exact figures: synctest's clock
// moves only when every goroutine is blocked, so the integrals are whole
// multiples of the sleeps.
func wantSeconds(t *testing.T, l *Limiter, inFlight, queued float64) {
	t.Helper()
	gotIn, gotQ := l.RequestSeconds()
	if gotIn != inFlight || gotQ != queued {
		t.Fatalf("RequestSeconds() = %v, %v; want %v, %v", gotIn, gotQ, inFlight, queued)
	}
}

func TestRequestSecondsIntegratesInFlightAndQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Fixed, Workers: 2, QueueSize: 10, QueueTimeout: time.Minute})
		wantSeconds(t, l, 0, 0)
		time.Sleep(time.Second) // idle: nothing accrues
		wantSeconds(t, l, 0, 0)

		// One in flight for 1.5 s, then two for 2 s: 1.5 + 4.
		if err := l.TryAcquire(0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		wantSeconds(t, l, 1.5, 0)
		if err := l.TryAcquire(0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		wantSeconds(t, l, 5.5, 0)

		// Three more wait: the queue accrues 3 per second for 1 s.
		done := make(chan error, 3)
		for range 3 {
			go func() { done <- l.Acquire(context.Background(), 0) }()
		}
		synctest.Wait()
		time.Sleep(time.Second)
		wantSeconds(t, l, 7.5, 3)

		// A release hands its permit on: in flight stays 2, queue 2.
		l.Release(0)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
		wantSeconds(t, l, 8, 3.5)

		// The rest time out at a minute from their arrival (59 s on):
		// 2 waiters for 59 s, then none.
		for range 2 {
			if err := <-done; !errors.Is(err, ErrQueueTimeout) {
				t.Fatalf("waiter = %v; want ErrQueueTimeout", err)
			}
		}
		time.Sleep(time.Second)
		// In flight: 8 + 2 × (58.75 + 1) = 127.5; queued: 3.5 + 2 × 58.75.
		wantSeconds(t, l, 127.5, 121)
		l.Release(0)
		l.Release(0)
		time.Sleep(time.Hour)
		wantSeconds(t, l, 127.5, 121)
	})
}

// A request that stays less than a scrape interval is what a gauge read
// at scrape time misses; the integral holds it whenever it is read.
func TestRequestSecondsKeepsABurstBetweenReadings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Unbounded})
		wantSeconds(t, l, 0, 0)
		time.Sleep(5 * time.Second)
		for range 100 {
			if err := l.TryAcquire(0); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
		for range 100 {
			l.Release(0)
		}
		time.Sleep(9800 * time.Millisecond)
		if s := l.Stats(); s.InFlight != 0 {
			t.Fatalf("in flight = %d at the reading; want 0", s.InFlight)
		}
		wantSeconds(t, l, 20, 0) // 100 × 0.2 s
	})
}

// SetLimit admits waiters and a client leaving takes its waiter out: both
// move the integrals at the moment they happen.
func TestRequestSecondsFollowsSetLimitAndDepartures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Adaptive, QueueSize: 10, QueueTimeout: time.Minute})
		l.SetLimit(1)
		if err := l.TryAcquire(0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		go func() { left <- l.Acquire(ctx, 0) }()
		admitted := make(chan error, 1)
		go func() { admitted <- l.Acquire(context.Background(), 0) }()
		synctest.Wait()
		time.Sleep(time.Second) // 1 in flight, 2 queued
		cancel()
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Fatalf("departed waiter = %v; want context.Canceled", err)
		}
		time.Sleep(time.Second) // 1 in flight, 1 queued
		l.SetLimit(2)
		if err := <-admitted; err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // 2 in flight
		wantSeconds(t, l, 4, 3)
	})
}

func TestIntegrateCarriesNanosecondsIntoSeconds(t *testing.T) {
	secs, nanos := integrate(0, 999_999_999, 1, 1)
	if secs != 1 || nanos != 0 {
		t.Errorf("integrate(0, 999999999, 1, 1) = %d, %d; want 1, 0", secs, nanos)
	}
	// A thousand requests held for a year: n*d would overflow int64
	// nanoseconds (9.2e18) after 107 days; split, it does not.
	year := int64(365 * 24 * time.Hour)
	secs, nanos = integrate(0, 0, 1000, year)
	if want := int64(1000 * 365 * 24 * 3600); secs != want || nanos != 0 {
		t.Errorf("integrate(0, 0, 1000, a year) = %d, %d; want %d, 0", secs, nanos, want)
	}
}

// Many requests admitted and released at once, in every mode, each held a
// known time on synctest's clock, while readers read: the integral is the
// sum of the holds exactly, and no reading is below an earlier one.
func TestRequestSecondsExactUnderConcurrency(t *testing.T) {
	for _, cfg := range []Config{
		{Mode: Unbounded},
		{Mode: Unbounded, Bulkhead: 8, BulkheadWait: time.Hour},
		{Mode: Fixed, Workers: 8, QueueSize: 1000, QueueTimeout: time.Hour},
		{Mode: Adaptive},
	} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, cfg)
				const workers, rounds = 32, 50
				var wg sync.WaitGroup
				var want time.Duration // every hold, summed by the test
				var wantMu sync.Mutex
				for w := range workers {
					wg.Go(func() {
						for r := range rounds {
							if err := l.Acquire(context.Background(), 0); err != nil {
								t.Error(err)
								return
							}
							hold := time.Duration(1+(w*rounds+r)%7) * time.Millisecond
							time.Sleep(hold)
							l.Release(0)
							wantMu.Lock()
							want += hold
							wantMu.Unlock()
						}
					})
				}
				stop := make(chan struct{})
				var readers sync.WaitGroup
				for range 2 {
					readers.Go(func() {
						var last float64
						for {
							in, _ := l.RequestSeconds()
							if in < last {
								t.Errorf("RequestSeconds() in flight = %v after %v; want no decrease", in, last)
							}
							last = in
							select {
							case <-stop:
								return
							case <-time.After(3 * time.Millisecond):
							}
						}
					})
				}
				wg.Wait()
				close(stop)
				readers.Wait()
				in, _ := l.RequestSeconds()
				if in != want.Seconds() {
					t.Errorf("RequestSeconds() in flight = %v; want %v", in, want.Seconds())
				}
			})
		})
	}
}

// On the real clock, pass-through's lock-free admissions and releases from
// many goroutines, read all along: readings never decrease, and the last is
// within what the goroutines could have held, one request each at most.
func TestRequestSecondsPassThroughRealClock(t *testing.T) {
	l := mustNew(t, Config{Mode: Unbounded})
	const workers = 8
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := l.TryAcquire(64); err != nil {
					t.Error(err)
					return
				}
				l.Release(64)
			}
		})
	}
	var last float64
	for range 200 {
		in, queued := l.RequestSeconds()
		if in < last || queued != 0 {
			t.Fatalf("RequestSeconds() = %v, %v after %v; want no decrease, and 0 queued", in, queued, last)
		}
		last = in
		time.Sleep(100 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	in, _ := l.RequestSeconds()
	if in <= 0 || in > workers*elapsed {
		t.Errorf("RequestSeconds() in flight = %v after %v s with %d goroutines; want above 0, at most %v", in, elapsed, workers, workers*elapsed)
	}
	if s := l.Stats(); s.InFlight != 0 || s.Bytes != 0 {
		t.Errorf("Stats() = %+v after every release; want nothing in flight", s)
	}
	// Nothing held from here: the integral stays where it is.
	time.Sleep(10 * time.Millisecond)
	if again, _ := l.RequestSeconds(); again != in {
		t.Errorf("RequestSeconds() in flight = %v with nothing held since %v; want no change", again, in)
	}
}

func TestAddNanosKeepsNanosInASecond(t *testing.T) {
	for _, tt := range []struct{ secs, nanos, v, wantSecs, wantNanos int64 }{
		{0, 999_999_999, 1, 1, 0},
		{1, 0, -1, 0, 999_999_999},
		{5, 500_000_000, -2_700_000_000, 2, 800_000_000},
		{0, 0, 3_000_000_001, 3, 1},
	} {
		s, n := addNanos(tt.secs, tt.nanos, tt.v)
		if s != tt.wantSecs || n != tt.wantNanos {
			t.Errorf("addNanos(%d, %d, %d) = %d, %d; want %d, %d", tt.secs, tt.nanos, tt.v, s, n, tt.wantSecs, tt.wantNanos)
		}
	}
}

// A shard whose changes wrap n·now − sum around int64 still gives the
// integral: a thousand requests held for a year each, begun in one shard
// and ended in another.
func TestIntegralSurvivesAYear(t *testing.T) {
	base := time.Unix(0, 0)
	in := newIntegral(base)
	year := 365 * 24 * time.Hour
	for range 1000 {
		in.add(base, 1)
	}
	for range 1000 {
		in.add(base.Add(year), -1)
	}
	got := in.seconds(func() time.Time { return base.Add(2 * year) })
	if want := 1000 * year.Seconds(); got != want {
		t.Errorf("integral of 1000 requests for a year = %v; want %v", got, want)
	}
}
