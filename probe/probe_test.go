package probe

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/limiter"
)

// upstream is an upstream with a pool of size workers (0: none), each
// request taking service, waiting FIFO for a worker when all are busy.
type upstream struct {
	size    int
	service func(*rand.Rand) time.Duration
	workers chan struct{}
}

func (u *upstream) serve(rng *rand.Rand) {
	if u.size > 0 {
		u.workers <- struct{}{}
		defer func() { <-u.workers }()
	}
	time.Sleep(u.service(rng))
}

// rig is clients behind a limiter that the probe caps, in front of an
// upstream, all in a synctest bubble.
type rig struct {
	lim      *limiter.Limiter
	ctrl     *Controller
	rejected atomic.Int64
	answers  atomic.Int64
	steps    []float64 // loads of the steps kept as baselines
	mu       sync.Mutex
	reports  []Report
	began    time.Time
}

// newRig starts clients that each send their next request as soon as the
// last is answered, and a probe that is wanted until it has reported.
func newRig(t *testing.T, ctx, clientsCtx context.Context, u *upstream, clients int, mode limiter.Config) *rig {
	t.Helper()
	return newRigOverrun(t, ctx, clientsCtx, u, clients, mode, false)
}

// newRigOverrun is newRig with the probe wanted at once on an overrun too,
// if overrun is set, as the sidecar has it in adaptive mode.
func newRigOverrun(t *testing.T, ctx, clientsCtx context.Context, u *upstream, clients int, mode limiter.Config, overrun bool) *rig {
	t.Helper()
	if u.size > 0 {
		u.workers = make(chan struct{}, u.size)
	}
	mode.Probe = true
	lim, err := limiter.New(mode)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{lim: lim, began: time.Now()}
	r.ctrl, err = New(Config{
		Cap: lim.SetProbe,
		State: func() State {
			st := lim.Stats()
			return State{InFlight: st.InFlight, Queued: st.Queued}
		},
		// Wanted after 10 s of traffic, as the sidecar has it: the
		// clients' queue inside the upstream has built by then.
		Wanted: func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.reports) == 0 && time.Since(r.began) >= 10*time.Second
		},
		Overrun: func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return overrun && len(r.reports) == 0
		},
		End: func(load float64, below bool) {
			if below {
				r.mu.Lock()
				r.steps = append(r.steps, load)
				r.mu.Unlock()
			}
		},
		OnReport: func(rep Report) {
			r.mu.Lock()
			r.reports = append(r.reports, rep)
			r.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range clients {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			for clientsCtx.Err() == nil {
				if err := lim.Acquire(clientsCtx, 0); err != nil {
					if clientsCtx.Err() == nil {
						r.rejected.Add(1)
					}
					continue
				}
				start := time.Now()
				u.serve(rng)
				r.ctrl.Record(time.Since(start))
				r.answers.Add(1)
				lim.Release(0)
			}
		}()
	}
	go r.ctrl.Run(ctx)
	return r
}

func (r *rig) report() (Report, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		return Report{}, false
	}
	return r.reports[0], true
}

func around(d time.Duration) func(*rand.Rand) time.Duration {
	return func(rng *rand.Rand) time.Duration { return d + time.Duration((rng.Float64()-0.5)*0.05*float64(d)) }
}

// A service first seen at its peak: 300 clients from the first second.
// The probe halves admission while the answers hold, and the first step
// that serves fewer gives the capacity; a healthy upstream serves fewer
// at once, and is left after one step. Nothing is rejected for it.
func TestProbeFindsTheKnee(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		up      upstream
		clients int
		mode    limiter.Config
		result  Result
		// capacity is the truth, 0 when the upstream serves all it holds.
		capacity float64
	}{
		{"a pool of 37 at 80 ms, 300 clients, unbounded", upstream{size: 37, service: around(80 * ms)}, 300,
			limiter.Config{Mode: limiter.Unbounded}, Queueing, 37},
		{"a pool of 37 at 80 ms, 300 clients, adaptive open", upstream{size: 37, service: around(80 * ms)}, 300,
			limiter.Config{Mode: limiter.Adaptive, QueueSize: 10000, QueueTimeout: 30 * time.Second}, Queueing, 37},
		{"a pool of 37, fixed at 200 with a queue", upstream{size: 37, service: around(80 * ms)}, 300,
			limiter.Config{Mode: limiter.Fixed, Workers: 200, QueueSize: 10000, QueueTimeout: 30 * time.Second}, Queueing, 37},
		{"a pool of 200 behind 1000 clients, 200 ms", upstream{size: 200, service: around(200 * ms)}, 1000,
			limiter.Config{Mode: limiter.Unbounded}, Queueing, 200},
		{"a pool of 1, 300 clients", upstream{size: 1, service: around(10 * ms)}, 300,
			limiter.Config{Mode: limiter.Unbounded}, Queueing, 1},
		{"no pool, 650 ms, 300 clients", upstream{service: around(650 * ms)}, 300,
			limiter.Config{Mode: limiter.Unbounded}, NotQueueing, 0},
		{"a bulkhead of 400 that fails fast, pool of 37", upstream{size: 37, service: around(80 * ms)}, 300,
			limiter.Config{Mode: limiter.Unbounded, Bulkhead: 400}, Queueing, 37},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				up := tt.up
				r := newRig(t, ctx, ctx, &up, tt.clients, tt.mode)
				start := time.Now()
				var rep Report
				for {
					time.Sleep(time.Second)
					var ok bool
					if rep, ok = r.report(); ok || time.Since(start) > 2*time.Minute {
						break
					}
				}
				cancel()
				// The clients finish the requests they have inside.
				time.Sleep(10 * time.Second)
				t.Logf("%s in %s: %+v", rep.Result, rep.End.Sub(rep.Start).Round(time.Millisecond), rep)
				if rep.Result != tt.result {
					t.Fatalf("result %q (%s); want %q", rep.Result, rep.Detail, tt.result)
				}
				switch {
				case tt.capacity > 0 && math.Abs(rep.Capacity-tt.capacity) > 0.15*tt.capacity:
					t.Errorf("capacity %.1f; want %.0f within 15%%", rep.Capacity, tt.capacity)
				case tt.capacity == 0 && rep.Capacity < 0.85*float64(tt.clients):
					t.Errorf("capacity %.1f; want at least what it held, %d", rep.Capacity, tt.clients)
				}
				if d := rep.End.Sub(rep.Start); d > 30*time.Second {
					t.Errorf("the probe took %s; want within 30 s", d)
				}
				if n := r.rejected.Load(); n != 0 {
					t.Errorf("%d requests rejected; a probe delays, it never rejects", n)
				}
				if len(r.steps) != 1 {
					t.Errorf("%d steps kept as baselines; want the one below the knee", len(r.steps))
				}
				if s := r.lim.Stats(); s.Probe != 0 {
					t.Errorf("the cap is still %d after the probe", s.Probe)
				}
			})
		})
	}
}

// The load goes away during a probe: it stops, lifts its cap, and says
// it found nothing.
func TestProbeStopsWhenTheLoadGoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		clients, stopClients := context.WithCancel(ctx)
		up := upstream{size: 37, service: around(80 * time.Millisecond)}
		r := newRig(t, ctx, clients, &up, 300, limiter.Config{Mode: limiter.Unbounded})
		// The probe starts 10 s in; the clients leave in its first step.
		time.Sleep(11500 * time.Millisecond)
		stopClients()
		time.Sleep(time.Minute)
		rep, ok := r.report()
		if !ok {
			t.Fatal("no report")
		}
		if rep.Result != Inconclusive {
			t.Errorf("result %q (%s); want inconclusive", rep.Result, rep.Detail)
		}
		if s := r.lim.Stats(); s.Probe != 0 || s.Queued != 0 {
			t.Errorf("after the probe: %+v; want no cap and nothing waiting", s)
		}
		cancel()
		time.Sleep(10 * time.Second)
	})
}

// A probe is never started while it is not wanted, and a second waits for
// Quiet after the first.
func TestProbeOnlyWhenWanted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		lim, _ := limiter.New(limiter.Config{Mode: limiter.Unbounded, Probe: true})
		for range 10 {
			_ = lim.TryAcquire(0)
		}
		var wanted atomic.Bool
		var caps atomic.Int64
		c, err := New(Config{
			Cap:    func(n int) { caps.Add(1); lim.SetProbe(n) },
			State:  func() State { return State{InFlight: lim.Stats().InFlight} },
			Wanted: wanted.Load,
		})
		if err != nil {
			t.Fatal(err)
		}
		go c.Run(ctx)
		time.Sleep(time.Minute)
		if n := caps.Load(); n != 0 {
			t.Fatalf("capped %d times while not wanted", n)
		}
		wanted.Store(true)
		// Nobody answers: the probe measures nothing, and gives up before
		// capping anything.
		time.Sleep(30 * time.Second)
		if _, n := c.Last(); n != 1 {
			t.Fatalf("%d probes; want 1", n)
		}
		time.Sleep(4 * time.Minute)
		if _, n := c.Last(); n != 1 {
			t.Errorf("%d probes within 5 minutes; want 1, then Quiet", n)
		}
		time.Sleep(2 * time.Minute)
		if _, n := c.Last(); n != 2 {
			t.Errorf("%d probes after Quiet; want 2", n)
		}
		cancel()
		synctest.Wait()
	})
}

// openArrivals sends rate requests a second through r's limiter to up
// until ctx ends, each when due whatever became of the ones before, and
// reports each answer's latency from when it was due (admission's wait
// and the upstream's) to answered.
func openArrivals(ctx context.Context, r *rig, up *upstream, rate float64, answered func(time.Duration)) {
	rng := rand.New(rand.NewPCG(5, 6))
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// A generator of its own for each request: a rand.Rand is not
		// safe for concurrent use.
		seed := rng.Uint64()
		go func() {
			due := time.Now()
			if err := r.lim.Acquire(ctx, 0); err != nil {
				if ctx.Err() == nil {
					r.rejected.Add(1)
				}
				return
			}
			start := time.Now()
			up.serve(rand.New(rand.NewPCG(seed, 6)))
			r.ctrl.Record(time.Since(start))
			r.lim.Release(0)
			r.answers.Add(1)
			if answered != nil {
				answered(time.Since(due))
			}
		}()
	}
}

// Open arrivals at 1.5 times what the upstream serves from the first
// second, in adaptive mode with a queue timeout of 1 s: the overrun starts
// the probe within seconds, not after Wanted's ten, its first cap near the
// knee rather than at half of what is held, and the queue's bounds shed
// the excess all along.
func TestProbeOfAnOverrun(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		up       upstream
		rate     float64
		capacity float64
	}{
		{"a pool of 30 at 100 ms, 450 a second", upstream{size: 30, service: around(100 * ms)}, 450, 30},
		{"a pool of 30 spread 20-200 ms, 400 a second", upstream{size: 30, service: func(rng *rand.Rand) time.Duration {
			return 20*ms + time.Duration(rng.Float64()*float64(180*ms))
		}}, 400, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				up := tt.up
				r := newRigOverrun(t, ctx, ctx, &up, 0, limiter.Config{Mode: limiter.Adaptive, QueueSize: 10000, QueueTimeout: time.Second}, true)
				go openArrivals(ctx, r, &up, tt.rate, nil)
				var rep Report
				for {
					time.Sleep(time.Second)
					var ok bool
					if rep, ok = r.report(); ok || time.Since(r.began) > time.Minute {
						break
					}
				}
				waiting := r.lim.Stats().Queued
				cancel()
				time.Sleep(30 * time.Second)
				t.Logf("%s in %s from %s: %+v", rep.Result, rep.End.Sub(rep.Start).Round(time.Millisecond), rep.Start.Sub(r.began).Round(time.Millisecond), rep)
				if rep.Result != Queueing || !rep.Overrun || math.Abs(rep.Capacity-tt.capacity) > 0.15*tt.capacity {
					t.Fatalf("result %q (overrun %v), capacity %.1f (%s); want queueing from an overrun, %.0f within 15%%", rep.Result, rep.Overrun, rep.Capacity, rep.Detail, tt.capacity)
				}
				// A second of overrun after the first answers, and a sample's
				// lag.
				if at := rep.Start.Sub(r.began); at > 2*time.Second {
					t.Errorf("the probe began %s after the first request; want within 2 s", at)
				}
				if at := rep.End.Sub(r.began); at > 10*time.Second {
					t.Errorf("the probe ended %s after the first request; want within 10 s", at)
				}
				// The queue's timeout kept shedding: what waited at the end
				// is at most a second of arrivals, and some were shed.
				if waiting > int64(tt.rate) {
					t.Errorf("%d waiting at the end; want at most a second's arrivals, %.0f", waiting, tt.rate)
				}
				if r.rejected.Load() == 0 {
					t.Error("nothing rejected under an overload of open arrivals; want the queue's timeout to shed")
				}
			})
		})
	}
}

// Open arrivals a fifth above what a pool of 20 at 100 ms serves, from the
// first second: the queue inside grows by 40 a second, and the requests
// held over their service time read the arrival rate, not what is served.
// The probe counts what is served before it, and finds the pool.
func TestProbeUnderOpenArrivals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		up := upstream{size: 20, service: around(100 * time.Millisecond)}
		r := newRig(t, ctx, ctx, &up, 0, limiter.Config{Mode: limiter.Unbounded})
		go openArrivals(ctx, r, &up, 240, nil)
		var rep Report
		for start := time.Now(); time.Since(start) < 2*time.Minute; {
			time.Sleep(time.Second)
			var ok bool
			if rep, ok = r.report(); ok {
				break
			}
		}
		cancel()
		// Everything inside finishes: thousands queued at 200 a second.
		time.Sleep(2 * time.Minute)
		t.Logf("%s in %s: %+v", rep.Result, rep.End.Sub(rep.Start).Round(time.Millisecond), rep)
		if rep.Result != Queueing || math.Abs(rep.Capacity-20) > 0.15*20 {
			t.Errorf("result %q, capacity %.1f (%s); want queueing, 20 within 15%%", rep.Result, rep.Capacity, rep.Detail)
		}
		if n := r.rejected.Load(); n != 0 {
			t.Errorf("%d rejected", n)
		}
	})
}
