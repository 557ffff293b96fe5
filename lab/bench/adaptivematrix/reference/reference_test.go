package reference

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// limits records the limits a controller applies.
type limits struct {
	mu  sync.Mutex
	got []int
}

func (l *limits) set(n int) {
	l.mu.Lock()
	l.got = append(l.got, n)
	l.mu.Unlock()
}

func (l *limits) all() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// TestEnvoyGradient follows Envoy's formulas by hand: the minimum RTT
// taken at 3 over 50 samples of 100 ms; then at a sample RTT equal to it,
// gradient 1.25: 3 → 3.75 + √3.75 = 5 (truncated) → 6.25 + 2.5 = 8; then
// at 250 ms, gradient 0.5: 8 → 4 + 2 = 6; an interval without samples
// changes nothing.
func TestEnvoyGradient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l limits
		e := NewEnvoy(EnvoyConfig{SetLimit: l.set})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go e.Run(ctx)
		// Between ticks (every 100 ms from the start), so that each
		// interval's samples are recorded before it closes.
		time.Sleep(150 * time.Millisecond)
		for range 50 {
			e.Record(100 * time.Millisecond)
		}
		for _, rtt := range []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 0} {
			if rtt > 0 {
				for range 10 {
					e.Record(rtt)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got, want := l.all(), []int{3, 3, 5, 8, 6}; !slices.Equal(got, want) {
			t.Errorf("limits = %v; want %v", got, want)
		}
	})
}

// TestEnvoyIgnoresEarlierRequests: a request started before the minimum
// RTT's window is no sample of it.
func TestEnvoyIgnoresEarlierRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l limits
		e := NewEnvoy(EnvoyConfig{SetLimit: l.set})
		time.Sleep(50 * time.Millisecond)
		for range 100 {
			e.Record(100 * time.Millisecond)
		}
		if !e.inMinRTT {
			t.Error("samples of requests older than the window ended it; want it still measuring")
		}
	})
}

// TestGradient2 follows Gradient2Limit's formulas by hand from 20: at a
// steady RTT, gradient 1: 20 × 0.8 + 24 × 0.2 = 20.8, then 21.6 (21);
// at an RTT ten times the long average's 100 ms, the long average
// (still a plain mean of its first samples) is 400 ms, gradient
// 1.5 × 400 / 1000 = 0.6: 21.6 × 0.8 + (21.6 × 0.6 + 4) × 0.2 = 20.67
// (20). A window whose requests in flight stayed under half the limit
// changes nothing.
func TestGradient2(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l limits
		var inFlight atomic.Int64
		inFlight.Store(20)
		g := NewGradient2(Gradient2Config{SetLimit: l.set, InFlight: inFlight.Load})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go g.Run(ctx)
		synctest.Wait()
		// The first sample closes an empty window; each window after
		// closes with the first sample past its second.
		g.Record(100 * time.Millisecond)
		window := func(rtt time.Duration) {
			for range 10 {
				g.Record(rtt)
			}
			time.Sleep(time.Second + time.Millisecond)
			g.Record(rtt)
		}
		window(100 * time.Millisecond)
		if got := g.Limit(); got != 20 {
			t.Errorf("after one steady window: %d; want 20 (20.8)", got)
		}
		window(100 * time.Millisecond)
		window(time.Second)
		inFlight.Store(5)
		window(time.Second)
		if got, want := l.all(), []int{20, 21, 20}; !slices.Equal(got, want) {
			t.Errorf("limits = %v; want %v", got, want)
		}
	})
}
