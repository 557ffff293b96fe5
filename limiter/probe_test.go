package limiter

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// started starts an Acquire, lets it reach its decision or its wait, and
// returns where its result arrives.
func started(l *Limiter) <-chan error {
	ch := acquireAsync(l, context.Background(), 0)
	synctest.Wait()
	return ch
}

func pending(ch <-chan error) bool {
	select {
	case err := <-ch:
		panic("decided: " + errString(err))
	default:
		return true
	}
}

func errString(err error) string {
	if err == nil {
		return "admitted"
	}
	return err.Error()
}

// In a mode with no queue of its own a probe delays, it never rejects:
// requests the cap holds back wait however the mode would have answered
// them, and a lifted cap admits them.
func TestProbeHoldsBackWithoutRejecting(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		// admitted is how many of 6 requests are admitted under a cap of
		// 2, waiting how many wait, and the rest are refused with full;
		// after the cap is lifted, lifted are admitted, and the others,
		// which would have waited in the mode's queue anyway, are as long
		// past its timeout as they waited.
		admitted, waiting int
		full              error
		lifted            int
	}{
		{"unbounded", Config{Mode: Unbounded, Probe: true}, 2, 4, nil, 4},
		{"unbounded, a bulkhead of 4 that fails fast", Config{Mode: Unbounded, Bulkhead: 4, Probe: true}, 2, 2, ErrBulkheadFull, 2},
		{"fixed, 4 workers and no queue", Config{Mode: Fixed, Workers: 4, Probe: true}, 2, 2, ErrQueueFull, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, tt.cfg)
				l.SetProbe(2)
				var waits []<-chan error
				admitted, refused := 0, 0
				for range 6 {
					ch := started(l)
					select {
					case err := <-ch:
						switch {
						case err == nil:
							admitted++
						case tt.full != nil && errors.Is(err, tt.full):
							refused++
						default:
							t.Fatalf("Acquire = %v; want admitted, waiting or %v", err, tt.full)
						}
					default:
						waits = append(waits, ch)
					}
				}
				if admitted != tt.admitted || len(waits) != tt.waiting || refused != 6-tt.admitted-tt.waiting {
					t.Fatalf("under a cap of 2: %d admitted, %d waiting, %d refused; want %d, %d, %d",
						admitted, len(waits), refused, tt.admitted, tt.waiting, 6-tt.admitted-tt.waiting)
				}
				if s := l.Stats(); s.Probe != 2 || s.InFlight != 2 || s.Queued != int64(tt.waiting) {
					t.Fatalf("Stats = %+v; want probe 2, 2 in flight, %d queued", s, tt.waiting)
				}
				// Well past every wait of the mode, and codel's target: the
				// cap's waiters still wait.
				time.Sleep(5 * time.Second)
				synctest.Wait()
				for _, ch := range waits {
					pending(ch)
				}
				l.SetProbe(0)
				synctest.Wait()
				got := 0
				for _, ch := range waits {
					select {
					case err := <-ch:
						switch {
						case err == nil:
							got++
						case !errors.Is(err, ErrQueueTimeout):
							t.Errorf("lifted: Acquire = %v; want admitted, or the mode's queue timeout", err)
						}
					default:
					}
				}
				if got != tt.lifted {
					t.Errorf("the cap lifted admitted %d; want %d", got, tt.lifted)
				}
				if s := l.Stats(); s.Probe != 0 {
					t.Errorf("Stats().Probe = %d after SetProbe(0); want 0", s.Probe)
				}
			})
		})
	}
}

// In a mode with a queue, a probe's cap is a limit like the mode's own:
// the queue's size bounds its waiters, and its timeout (or codel's
// target, under a standing queue) ends their wait. A probe measures; it
// never suspends the shedding of an overload.
func TestProbeKeepsTheQueueBounds(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		// waiting is how many of 6 wait under a cap of 2 (the rest beyond
		// 2 are refused, full), and expire the error each waiter gets
		// once past the wait.
		waiting int
		expire  error
	}{
		{"fixed, 4 workers and a queue of 1", Config{Mode: Fixed, Workers: 4, QueueSize: 1, QueueTimeout: time.Second, Probe: true}, 1, ErrQueueTimeout},
		{"fixed, codel", Config{Mode: Fixed, Workers: 4, QueueSize: 10, QueueTimeout: time.Second, QueuePolicy: CoDel,
			QueueTarget: 5 * time.Millisecond, QueueInterval: 10 * time.Millisecond, Probe: true}, 4, ErrQueueTimeout},
		{"adaptive, open, a queue of 3", Config{Mode: Adaptive, QueueSize: 3, QueueTimeout: time.Second, Probe: true}, 3, ErrQueueTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, tt.cfg)
				l.SetProbe(2)
				var waits []<-chan error
				admitted, full := 0, 0
				for range 6 {
					ch := started(l)
					select {
					case err := <-ch:
						switch {
						case err == nil:
							admitted++
						case errors.Is(err, ErrQueueFull):
							full++
						default:
							t.Fatalf("Acquire = %v; want admitted, waiting or the queue full", err)
						}
					default:
						waits = append(waits, ch)
					}
				}
				if admitted != 2 || len(waits) != tt.waiting || full != 4-tt.waiting {
					t.Fatalf("under a cap of 2: %d admitted, %d waiting, %d full; want 2, %d, %d", admitted, len(waits), full, tt.waiting, 4-tt.waiting)
				}
				// Past the queue's timeout, with the cap still on: every
				// waiter is answered by the mode's own bound.
				time.Sleep(1500 * time.Millisecond)
				synctest.Wait()
				for _, ch := range waits {
					select {
					case err := <-ch:
						if !errors.Is(err, tt.expire) {
							t.Errorf("past the queue's timeout under a cap: Acquire = %v; want %v", err, tt.expire)
						}
					default:
						t.Error("a waiter still waits past the queue's timeout under a probe's cap")
					}
				}
				if s := l.Stats(); s.Queued != 0 || s.InFlight != 2 {
					t.Errorf("Stats = %+v; want 2 in flight, none queued", s)
				}
			})
		})
	}
}

// A cap below what is in flight is reached as requests finish, and a
// release hands its permit on only within the cap.
func TestProbeLowersAsRequestsFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, Config{Mode: Unbounded, Probe: true})
		for range 5 {
			if err := l.TryAcquire(0); err != nil {
				t.Fatal(err)
			}
		}
		l.SetProbe(2)
		w := started(l)
		for range 3 {
			l.Release(0)
		}
		synctest.Wait()
		pending(w)
		l.Release(0)
		synctest.Wait()
		if err := <-w; err != nil {
			t.Fatalf("Acquire = %v once 1 of a cap of 2 was in flight; want admitted", err)
		}
		if s := l.Stats(); s.InFlight != 2 {
			t.Errorf("InFlight = %d; want 2", s.InFlight)
		}
	})
}

func TestSetProbeWithoutConfigPanics(t *testing.T) {
	l := mustNew(t, Config{Mode: Unbounded})
	defer func() {
		if recover() == nil {
			t.Error("SetProbe without Config.Probe did not panic")
		}
	}()
	l.SetProbe(1)
}
