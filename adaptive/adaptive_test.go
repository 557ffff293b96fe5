package adaptive

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/loomgate/loomgate/field"
	"github.com/loomgate/loomgate/limiter"
)

// pool is a synthetic upstream: a pool of workers, resizable, in front of
// work that takes service() each; requests beyond the pool wait inside it,
// as in a servlet container's thread pool.
type pool struct {
	mu      sync.Mutex
	size    int
	busy    int
	waiting []chan struct{}
	service func() time.Duration
}

func (p *pool) serve() { p.serveFor(p.service()) }

// serveFor serves a request whose work takes d.
func (p *pool) serveFor(d time.Duration) {
	p.mu.Lock()
	if p.busy < p.size {
		p.busy++
		p.mu.Unlock()
	} else {
		ch := make(chan struct{})
		p.waiting = append(p.waiting, ch)
		p.mu.Unlock()
		<-ch
	}
	time.Sleep(d)
	p.mu.Lock()
	if len(p.waiting) > 0 && p.busy <= p.size {
		ch := p.waiting[0]
		p.waiting = p.waiting[1:]
		close(ch)
	} else {
		p.busy--
	}
	p.mu.Unlock()
}

func (p *pool) resize(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.size = n
	for p.busy < p.size && len(p.waiting) > 0 {
		p.busy++
		close(p.waiting[0])
		p.waiting = p.waiting[1:]
	}
}

// rig is a limiter in Adaptive mode and its controller in front of a pool,
// driven by closed-loop clients.
type rig struct {
	t       *testing.T
	lim     *limiter.Limiter
	ctrl    *Controller
	up      *pool
	clients atomic.Int64 // how many clients should be running
	running atomic.Int64
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func newRig(t *testing.T, up *pool, est Estimate, cfg Config) *rig {
	lim, err := limiter.New(limiter.Config{Mode: limiter.Adaptive, QueueSize: 100000, QueueTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg.SetLimit = lim.SetLimit
	cfg.State = func() State { s := lim.Stats(); return State{InFlight: s.InFlight, Queued: s.Queued} }
	cfg.Estimate = func() Estimate { return est }
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctrl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, lim: lim, ctrl: ctrl, up: up, stop: cancel}
	r.wg.Go(func() { ctrl.Run(ctx) })
	return r
}

// routeClients starts n clients of route class class whose requests take
// d of work each, until the rig closes.
func (r *rig) routeClients(n, class int, d time.Duration) {
	for range n {
		r.wg.Go(func() {
			for r.clients.Load() >= 0 {
				if err := r.lim.Acquire(context.Background(), 0); err != nil {
					r.t.Errorf("Acquire = %v", err)
					return
				}
				start := time.Now()
				r.up.serveFor(d)
				r.ctrl.Record(class, time.Since(start))
				r.lim.Release(0)
			}
		})
	}
}

// arrivals sends requests at rate a second for dur, each on its own
// whatever the latency: open arrivals, as from many independent users.
func (r *rig) arrivals(rate float64, dur time.Duration) {
	every := time.Duration(float64(time.Second) / rate)
	for end := time.Now().Add(dur); time.Now().Before(end); time.Sleep(every) {
		r.wg.Go(func() {
			if err := r.lim.Acquire(context.Background(), 0); err != nil {
				return
			}
			start := time.Now()
			r.up.serve()
			r.ctrl.Record(0, time.Since(start))
			r.lim.Release(0)
		})
	}
}

// setClients starts or stops clients until n run.
func (r *rig) setClients(n int) {
	r.clients.Store(int64(n))
	for r.running.Load() < int64(n) {
		r.running.Add(1)
		id := r.running.Load()
		r.wg.Go(func() {
			defer r.running.Add(-1)
			for id <= r.clients.Load() {
				if err := r.lim.Acquire(context.Background(), 0); err != nil {
					r.t.Errorf("Acquire = %v", err)
					return
				}
				start := time.Now()
				r.up.serve()
				r.ctrl.Record(0, time.Since(start))
				r.lim.Release(0)
			}
		})
	}
}

func (r *rig) close() {
	r.clients.Store(-1)
	r.stop()
	r.lim.SetLimit(0)
	r.wg.Wait()
}

// limits samples the limit every second for d.
func (r *rig) limits(d time.Duration) []int {
	var out []int
	for range int(d / time.Second) {
		time.Sleep(time.Second)
		out = append(out, r.ctrl.Limit())
	}
	return out
}

// lastMedian is the median of the last twenty samples: where the limit
// stands, whatever trial a single instant may catch.
func lastMedian(samples []int) int {
	last := slices.Clone(samples[max(0, len(samples)-20):])
	slices.Sort(last)
	return last[len(last)/2]
}

func within(got, want int, share float64) bool {
	return float64(got) >= float64(want)*(1-share) && float64(got) <= float64(want)*(1+share)
}

// settled reports the share of samples within share of want.
func settled(samples []int, want int, share float64) float64 {
	n := 0
	for _, s := range samples {
		if within(s, want, share) {
			n++
		}
	}
	return float64(n) / float64(len(samples))
}

func fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// around is a service time within 10% of d, drawn evenly from a seeded
// source: a real upstream's answers do not come in lock-step, as a pool
// at a fixed time's do (50 every 100 ms), which puts a half-second's
// count a fifth off.
func around(d time.Duration) func() time.Duration {
	rng := rand.New(rand.NewPCG(3, 4))
	var mu sync.Mutex
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return d*9/10 + time.Duration(rng.Int64N(int64(d/5)))
	}
}

// TestFindsThePoolFromAWrongEstimate: a pool of 50 at 100 ms under 200
// clients; the estimator says 40. Trials find 50 within a minute and the
// limit stays near it.
func TestFindsThePoolFromAWrongEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50, service: around(100 * time.Millisecond)}, Estimate{Saturated: true, Capacity: 40, LowerBound: 10}, Config{})
		defer r.close()
		r.setClients(200)
		first := r.limits(60 * time.Second)
		later := r.limits(120 * time.Second)
		if got := lastMedian(first); !within(got, 50, 0.15) {
			t.Errorf("limit at 40-60s = %d; want within 15%% of the pool, 50 (path %v)", got, first)
		}
		// Trials step 10% or more above it, briefly.
		if s := settled(later, 50, 0.2); s < 0.8 {
			t.Errorf("limit within 20%% of 50 for %.0f%% of the next two minutes; want 80%% (%v)", s*100, later)
		}
	})
}

// TestFollowsAPoolThatChanges: the pool grows from 50 to 100, then shrinks
// to 30, as a deploy might change it; the limit follows each within a
// minute, and the growth within 30 s: a trial comes every 12 s at most at
// a knee that held, and a step kept short of its trial rests too.
func TestFollowsAPoolThatChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &pool{size: 50, service: around(100 * time.Millisecond)}
		r := newRig(t, up, Estimate{Saturated: true, Capacity: 50, LowerBound: 10}, Config{})
		defer r.close()
		r.setClients(300)
		r.limits(60 * time.Second)
		up.resize(100)
		grown := r.limits(60 * time.Second)
		// Steps up rest at most 12 s at a knee that held for a minute,
		// then grow while they are kept.
		if at := slices.IndexFunc(grown, func(l int) bool { return within(l, 100, 0.15) }); at < 0 || at >= 30 {
			t.Errorf("limit first within 15%% of 100 at %ds after the pool grew; want within 30s (path %v)", at+1, grown)
		}
		if got := lastMedian(grown); !within(got, 100, 0.15) {
			t.Errorf("limit 40-60s after the pool grew to 100 = %d; want within 15%% (path %v)", got, grown)
		}
		up.resize(30)
		shrunk := r.limits(60 * time.Second)
		if got := lastMedian(shrunk); !within(got, 30, 0.15) {
			t.Errorf("limit 40-60s after the pool shrank to 30 = %d; want within 15%% (path %v)", got, shrunk)
		}
	})
}

// TestFollowsAPoolShrunkAsATrialIsRefused: the pool shrinks from 50 to 30
// the moment a step up from 50 is refused. The rest that follows is
// measured from the trial's base, taken at 50 before the shrink, so the
// fall in throughput ends it on the first tick back: the limit is at the
// new pool within 8 s, not after the rest (14.5 s when the rest's base was
// the first tick back, taken after the shrink).
func TestFollowsAPoolShrunkAsATrialIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &pool{size: 50, service: around(100 * time.Millisecond)}
		r := newRig(t, up, Estimate{Saturated: true, Capacity: 50, LowerBound: 10}, Config{})
		defer r.close()
		r.setClients(10)
		r.limits(10 * time.Second)
		r.setClients(200)
		time.Sleep(15 * time.Second)
		waited := time.Now()
		for start := len(r.ctrl.Changes()); ; time.Sleep(50 * time.Millisecond) {
			if ch := r.ctrl.Changes(); len(ch) > start && ch[len(ch)-1].Reason == ProbeFailed {
				break
			}
			if time.Since(waited) > 2*time.Minute {
				t.Fatalf("no trial refused within 2 minutes (changes %+v)", r.ctrl.Changes())
			}
		}
		up.resize(30)
		shrunk := time.Now()
		for r.ctrl.Limit() > 36 {
			if time.Since(shrunk) > 8*time.Second {
				t.Fatalf("limit %d 8s after the pool shrank to 30; want 36 or less (changes %+v)", r.ctrl.Limit(), r.ctrl.Changes())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestProbesLessWhileTheKneeHolds: at a pool of 50 that does not change,
// steps up are refused again and again; each puts requests in the pool's
// queue, so the rests between them grow, and after the first minute the
// limit stands above the pool for under a tenth of the time.
func TestProbesLessWhileTheKneeHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50, service: around(100 * time.Millisecond)}, Estimate{Saturated: true, Capacity: 50, LowerBound: 10}, Config{})
		defer r.close()
		r.setClients(200)
		r.limits(60 * time.Second)
		samples := r.limits(3 * time.Minute)
		above := 0
		for _, l := range samples {
			if l > 50 {
				above++
			}
		}
		if share := float64(above) / float64(len(samples)); share >= 0.1 {
			t.Errorf("limit above the pool for %.0f%% of three minutes; want under 10%% (%v)", share*100, samples)
		}
		if got := lastMedian(samples); got != 50 {
			t.Errorf("limit at the end = %d; want the pool, 50 (path %v)", got, samples)
		}
	})
}

// TestNoisyServiceTimesNeitherDriftNorCollapse: service times spread from
// 50 to 150 ms; over five minutes the limit stays near the pool and never
// goes below the estimator's lower bound.
func TestNoisyServiceTimesNeitherDriftNorCollapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		var mu sync.Mutex
		noisy := func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return 50*time.Millisecond + time.Duration(rng.Int64N(int64(100*time.Millisecond)))
		}
		r := newRig(t, &pool{size: 50, service: noisy}, Estimate{Saturated: true, Capacity: 50, LowerBound: 35}, Config{})
		defer r.close()
		r.setClients(200)
		samples := r.limits(5 * time.Minute)
		for i, s := range samples {
			if s < 35 && (s != 0 || i > 10) {
				t.Fatalf("limit %d at %ds; want never below the lower bound 35", s, i+1)
			}
		}
		if s := settled(samples[60:], 50, 0.25); s < 0.8 {
			t.Errorf("limit within 25%% of 50 for %.0f%% of four minutes; want 80%% (%v)", s*100, samples)
		}
	})
}

// TestOpensWhenDemandFalls: once nothing has waited for LiftAfter and the
// upstream is unstretched, admission opens again.
func TestOpensWhenDemandFalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50, service: fixed(100 * time.Millisecond)}, Estimate{Saturated: true, Capacity: 50, LowerBound: 10}, Config{LiftAfter: time.Minute})
		defer r.close()
		r.setClients(200)
		if got := r.limits(30 * time.Second); got[len(got)-1] == 0 {
			t.Fatalf("limit after 30s of overload = 0; want a limit")
		}
		r.setClients(10)
		after := r.limits(2 * time.Minute)
		if got := after[len(after)-1]; got != 0 {
			t.Errorf("limit two minutes after demand fell to 10 clients = %d; want 0 (open) (path %v)", got, after)
		}
		var lifted bool
		for _, ch := range r.ctrl.Changes() {
			lifted = lifted || ch.Reason == DemandFell && ch.To == 0
		}
		if !lifted {
			t.Errorf("no %s change recorded: %+v", DemandFell, r.ctrl.Changes())
		}
	})
}

// TestStaysOpenWithoutSaturation: while the estimator finds no queueing
// inside, admission stays open, whatever the load.
func TestStaysOpenWithoutSaturation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 1000, service: fixed(100 * time.Millisecond)}, Estimate{}, Config{})
		defer r.close()
		r.setClients(200)
		for _, l := range r.limits(60 * time.Second) {
			if l != 0 {
				t.Fatalf("limit %d without saturation; want open", l)
			}
		}
	})
}

// TestHoldsWhenADependencySlows: the pool stays 50 but each request
// takes twice as long (a slower dependency, not more load). Service time
// stretches, so steps down are tried; throughput falls with each, so none
// is kept, and the limit stays at the pool.
func TestHoldsWhenADependencySlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		service := 100 * time.Millisecond
		slow := func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return service
		}
		r := newRig(t, &pool{size: 50, service: slow}, Estimate{Saturated: true, Capacity: 50, LowerBound: 10}, Config{})
		defer r.close()
		r.setClients(200)
		r.limits(60 * time.Second)
		mu.Lock()
		service = 200 * time.Millisecond
		mu.Unlock()
		samples := r.limits(3 * time.Minute)
		if got := lastMedian(samples); !within(got, 50, 0.15) {
			t.Errorf("limit after a dependency slowed = %d; want the pool, 50, within 15%% (path %v)", got, samples)
		}
		if s := settled(samples, 50, 0.2); s < 0.8 {
			t.Errorf("limit within 20%% of 50 for %.0f%% of the three minutes; want 80%% (%v)", s*100, samples)
		}
	})
}

// firstLimit is the first limit set within samples (taken a second
// apart), and the second it came at; 0, -1 when none was.
func firstLimit(samples []int) (limit, at int) {
	for i, l := range samples {
		if l != 0 {
			return l, i + 1
		}
	}
	return 0, -1
}

// firstSet is the first limit set from admission open, in changes: 0 if
// none was. Samples a second apart may miss it, where a trim follows
// within the second.
func firstSet(changes []Change) int {
	for _, ch := range changes {
		if ch.Reason == CapacityFound {
			return ch.To
		}
	}
	return 0
}

// TestLimitsWithinSecondsOfASuddenOverload: 10 clients, then 200, on a
// pool of 50 at 100 ms, with an estimator that has found nothing yet (its
// window is seconds behind). The controller sees the load rise past what
// the upstream serves and limits at the pool within three seconds.
func TestLimitsWithinSecondsOfASuddenOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50, service: around(100 * time.Millisecond)}, Estimate{}, Config{})
		defer r.close()
		r.setClients(10)
		if l := r.limits(10 * time.Second); l[len(l)-1] != 0 {
			t.Fatalf("limit under 10 clients = %d; want open (path %v)", l[len(l)-1], l)
		}
		r.setClients(200)
		samples := r.limits(60 * time.Second)
		if l, at := firstLimit(samples); at < 0 || at > 3 || !within(l, 50, 0.15) {
			t.Errorf("first limit %d at %ds after the overload; want within 15%% of 50 within 3s (path %v)", l, at, samples)
		}
		if s := settled(samples[3:], 50, 0.2); s < 0.8 {
			t.Errorf("limit within 20%% of 50 for %.0f%% of the minute; want 80%% (%v)", s*100, samples)
		}
	})
}

// TestWeighsRoutesSharingAPoolByTheirCost: a pool of 50 shared by 20 ms and
// 200 ms requests, 5 clients each, then 100 each. Overloaded, the pool
// serves more of the slow requests than before (each client waits as
// long in its queue, whatever its cost), so the median service time jumps
// ten-fold without any stretch; weighed route by route, what it serves is
// still 50 at once. The limit settles at 50, never below half of it.
func TestWeighsRoutesSharingAPoolByTheirCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50}, Estimate{}, Config{})
		defer r.close()
		r.routeClients(5, 1, 20*time.Millisecond)
		r.routeClients(5, 2, 200*time.Millisecond)
		r.limits(10 * time.Second)
		r.routeClients(95, 1, 20*time.Millisecond)
		r.routeClients(95, 2, 200*time.Millisecond)
		samples := r.limits(90 * time.Second)
		// The first limit is taken in the seconds when the mix is still
		// moving towards the slow requests; trials do the rest.
		if l, at := firstLimit(samples); at < 0 || at > 5 || !within(l, 50, 0.25) {
			t.Errorf("first limit %d at %ds after the overload; want within 25%% of 50 within 5s (path %v)", l, at, samples)
		}
		if got := lastMedian(samples); !within(got, 50, 0.15) {
			t.Errorf("limit at 70-90s = %d; want within 15%% of 50 (path %v)", got, samples)
		}
		if lowest := slices.Min(samples[5:]); lowest < 25 {
			t.Errorf("lowest limit %d; want never below 25, half the pool (path %v)", lowest, samples)
		}
	})
}

// TestLimitsOpenArrivalsAtOnce: 200 arrivals a second, then 750, at a pool
// of 50 at 100 ms (500 a second). Each second before a limit piles 250
// requests inside the upstream; the limit comes at the pool within two
// seconds.
func TestLimitsOpenArrivalsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50, service: around(100 * time.Millisecond)}, Estimate{}, Config{})
		defer r.close()
		r.wg.Go(func() {
			r.arrivals(200, 10*time.Second)
			r.arrivals(750, 20*time.Second)
		})
		if l := r.limits(10 * time.Second); l[len(l)-1] != 0 {
			t.Fatalf("limit at 200 a second = %d; want open (path %v)", l[len(l)-1], l)
		}
		samples := r.limits(20 * time.Second)
		l, at := firstLimit(samples)
		if at < 0 || at > 2 || !within(l, 50, 0.15) {
			t.Fatalf("first limit %d at %ds after the overload; want within 15%% of 50 within 2s (path %v)", l, at, samples)
		}
		// The upstream held five times the pool when the limit was set;
		// measured before those requests are answered, it reads as
		// serving far fewer, and a trim went to 30.
		if lowest := slices.Min(samples[at:]); lowest < 45 {
			t.Errorf("lowest limit %d after the first; want 45 or more, about the pool of 50 (path %v; changes %+v)", lowest, samples, r.ctrl.Changes())
		}
	})
}

// TestOpenArrivalsToASlowerDependencyStayOpen: 200 arrivals a second to an
// upstream with no pool whose work slows from 100 to 250 ms. It then holds
// 2.5 times the requests, as an overloaded pool would, but serves no more
// than before: nothing saturates, and admission stays open.
func TestOpenArrivalsToASlowerDependencyStayOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		service := 100 * time.Millisecond
		up := &pool{size: 100000, service: func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return service
		}}
		r := newRig(t, up, Estimate{}, Config{})
		defer r.close()
		r.wg.Go(func() { r.arrivals(200, 40*time.Second) })
		r.limits(10 * time.Second)
		mu.Lock()
		service = 250 * time.Millisecond
		mu.Unlock()
		for i, l := range r.limits(25 * time.Second) {
			if l != 0 {
				t.Fatalf("limit %d %ds after the dependency slowed; want open", l, i+1)
			}
		}
	})
}

// coresRig is a limiter in Adaptive mode and its controller, with the
// estimate est, in front of an upstream on cores (serve returns the time a
// request took): 32 closed-loop clients, of which the first *clients run.
// It returns the controller and a function that stops it all.
func coresRig(t *testing.T, est Estimate, serve func() time.Duration, clients *atomic.Int64) (*Controller, func()) {
	lim, err := limiter.New(limiter.Config{Mode: limiter.Adaptive, QueueSize: 100000, QueueTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(Config{
		SetLimit: lim.SetLimit,
		State:    func() State { s := lim.Stats(); return State{InFlight: s.InFlight, Queued: s.Queued} },
		Estimate: func() Estimate { return est },
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { ctrl.Run(ctx) })
	for id := range int64(32) {
		wg.Go(func() {
			for n := clients.Load(); n >= 0; n = clients.Load() {
				if id >= n {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err := lim.Acquire(context.Background(), 0); err != nil {
					t.Errorf("Acquire = %v", err)
					return
				}
				ctrl.Record(0, serve())
				lim.Release(0)
			}
		})
	}
	return ctrl, func() {
		clients.Store(-1)
		cancel()
		lim.SetLimit(0)
		wg.Wait()
	}
}

// cores is a synthetic upstream on cores: a request takes d times
// slowdown(n), n the requests running, itself included.
type cores struct {
	d        time.Duration
	slowdown func(n float64) float64
	busy     atomic.Int64
}

func (c *cores) serve() time.Duration {
	n := c.busy.Add(1)
	defer c.busy.Add(-1)
	took := time.Duration(c.slowdown(float64(n)) * float64(c.d))
	time.Sleep(took)
	return took
}

// cpuBound is an upstream bound by 2 cores that something else also uses
// under load (the load's own clients, a sidecar): a request takes d alone,
// and 1.3 times d × its share of the cores once two or more run, so that
// 2 and 3 at once serve the same and 1 serves a third less. Its service
// time at its best throughput is stretched 1.3 times over the unloaded
// speed, as a pool's would be by waiting inside it.
func cpuBound(d time.Duration) *cores {
	return &cores{d: d, slowdown: func(n float64) float64 {
		if n < 2 {
			return 1
		}
		return 1.3 * max(1, n/2)
	}}
}

// TestCPUBoundNeverStepsBelowWhatItServes: 1 client, then 32, on the
// CPU-bound upstream. At a limit of 2 its service time is stretched, but
// the upstream serves 1.5 requests at once at its unloaded speed: a step
// down to 1 can only lose a third of the throughput, for every request
// queued behind it, so none is tried.
func TestCPUBoundNeverStepsBelowWhatItServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := cpuBound(time.Millisecond)
		var clients atomic.Int64
		clients.Store(1)
		ctrl, stop := coresRig(t, Estimate{Saturated: true, Capacity: 2, LowerBound: 1}, up.serve, &clients)
		defer stop()
		time.Sleep(10 * time.Second)
		clients.Store(32)
		var samples []int
		for range 120 {
			time.Sleep(250 * time.Millisecond)
			samples = append(samples, ctrl.Limit())
		}
		if _, at := firstLimit(samples); at < 0 {
			t.Fatalf("no limit within 30s of 32 clients")
		}
		// The first limit, from the seconds the load rose, may be 1; no
		// step goes there.
		for _, ch := range ctrl.Changes() {
			if ch.Reason == Probe && ch.To < ch.From && ch.To < 2 {
				t.Errorf("a step down from %d to %d, below 2, what the upstream serves at once (path %v; changes %+v)", ch.From, ch.To, samples, ctrl.Changes())
			}
		}
	})
}

// sharedCores is an upstream bound by 2 cores that the load's own
// clients and a sidecar also run on, as busy as 1.2 requests of it: n
// requests at once each get 2/(n+1.2) of a core, at most one, so that a
// request takes d alone and throughput rises with every request held, by
// a fifth from 2 to 3, 8% from 3 to 4, and to nearly 2 cores' worth under
// open admission, where the other work's share is least.
func sharedCores(d time.Duration) *cores {
	return &cores{d: d, slowdown: func(n float64) float64 { return max(1, (n+1.2)/2) }}
}

// TestFirstLimitOnSharedCoresIsNotTheOneBelow: 1 client, then 32, on
// sharedCores. With admission open the upstream serves about 2 requests at
// once at its unloaded speed, yet 2 serve a sixth less than 3: the first
// limit is 3, and nothing lower is tried, where a first limit of 2 stood
// for a second, then a step to 3 was judged.
func TestFirstLimitOnSharedCoresIsNotTheOneBelow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var clients atomic.Int64
		clients.Store(1)
		ctrl, stop := coresRig(t, Estimate{}, sharedCores(time.Millisecond).serve, &clients)
		defer stop()
		time.Sleep(10 * time.Second)
		clients.Store(32)
		time.Sleep(30 * time.Second)
		changes := ctrl.Changes()
		if firstSet(changes) == 0 {
			t.Fatalf("no limit within 30 s of 32 clients (changes %+v)", changes)
		}
		for _, ch := range changes {
			if ch.To != 0 && ch.To < 3 {
				t.Errorf("limit %d, from %d (%s): fewer than 3, which serve a sixth more than 2 (changes %+v)", ch.To, ch.From, ch.Reason, changes)
			}
		}
	})
}

// TestASmallPoolRoundedUpIsSteppedDownTo: 1 client, then 32, on a pool
// of 2 at about 20 ms. The first limit is rounded up to 3, a request over
// the pool, which waits in the pool's queue rather than loomgate's; it is
// not trimmed at once, but a step down to the pool is tried once what a
// step up kept would protect has lapsed: 30 ticks of a second.
func TestASmallPoolRoundedUpIsSteppedDownTo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 2, service: around(20 * time.Millisecond)}, Estimate{Saturated: true, Capacity: 2, LowerBound: 1}, Config{})
		defer r.close()
		r.setClients(1)
		r.limits(10 * time.Second)
		r.setClients(32)
		samples := r.limits(2 * time.Minute)
		if got := firstSet(r.ctrl.Changes()); got != 3 {
			t.Errorf("first limit = %d; want 3, the pool of 2 rounded up (changes %+v)", got, r.ctrl.Changes())
		}
		if got := lastMedian(samples); got != 2 {
			t.Errorf("limit after 100-120s = %d; want 2, the pool (path %v; changes %+v)", got, samples, r.ctrl.Changes())
		}
	})
}

// TestTrimsAFirstLimitAboveThePool: the estimate says 51, 53 or 56 of a
// pool of 50. Above it, requests wait inside the pool (in one that answers
// in step, a whole turn longer than their peers); a step down is otherwise
// tried only from a stretch of a fifth, so the first tick at the limit
// trims it to what the pool serves. One permit over, the stretch is 2%,
// and a step down that went no lower than what the tick's count of answers
// showed served (50.3 read as 51) kept it there.
func TestTrimsAFirstLimitAboveThePool(t *testing.T) {
	for _, est := range []float64{51, 53, 56} {
		t.Run(fmt.Sprint(est), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, &pool{size: 50, service: around(100 * time.Millisecond)}, Estimate{Saturated: true, Capacity: est, LowerBound: 10}, Config{})
				defer r.close()
				// Light load first: the unloaded speed is what the stretch
				// is measured from. 45 clients, not fewer: the rise to 200
				// then serves under a fifth more than the light load did,
				// which leaves the first limit to the estimate (from 10
				// clients the controller's own reading of the rise may
				// come first, at the pool's 50, and nothing is trimmed).
				r.setClients(45)
				r.limits(10 * time.Second)
				r.setClients(200)
				samples := r.limits(30 * time.Second)
				if l := firstSet(r.ctrl.Changes()); l != int(est) {
					t.Fatalf("first limit %d; want %v, the estimate (changes %+v)", l, est, r.ctrl.Changes())
				}
				if got := lastMedian(samples); got != 50 {
					t.Errorf("limit at 10-30s = %d; want 50, the pool (path %v; changes %+v)", got, samples, r.ctrl.Changes())
				}
			})
		})
	}
}

// spreadOf is a service time drawn evenly from lo to hi, from a source
// seeded with seed.
func spreadOf(lo, hi time.Duration, seed uint64) func() time.Duration {
	rng := rand.New(rand.NewPCG(seed, 7))
	var mu sync.Mutex
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
}

// TestTrimsNoThroughputWhereServiceTimesSpread: service times from 20 to
// 200 ms, on a pool of 50, with a first limit of 50. The least mean
// service time of such requests reads a few percent under their mean, so
// the first tick reads a stretch where nothing waits, and a trim is
// tried. A trim claims the upstream serves as much with fewer: it is kept
// only if throughput holds within a tick's noise, not within half the
// step like other steps down (50 to 47 read 2.9% less, and was kept, then
// 46).
func TestTrimsNoThroughputWhereServiceTimesSpread(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed+1), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, &pool{size: 50, service: spreadOf(20*time.Millisecond, 200*time.Millisecond, seed+1)}, Estimate{Saturated: true, Capacity: 50, LowerBound: 10}, Config{})
				defer r.close()
				r.setClients(10)
				r.limits(10 * time.Second)
				r.setClients(200)
				r.limits(30 * time.Second)
				for _, ch := range r.ctrl.Changes() {
					if ch.Reason == ThroughputHeld && ch.To < 48 {
						t.Fatalf("a step down to %d kept, on a pool of 50 (changes %+v)", ch.To, r.ctrl.Changes())
					}
				}
			})
		})
	}
}

// TestStepsAPermitUpWhereAStepHidIt: the estimate says 49 of a pool of 50.
// A step of a tenth, to 54, raises throughput by the one permit's 2%, short
// of the half of the step it asks, and puts four requests in the pool's
// queue; refused whole, it left the limit a permit short for good. A step
// of one permit, tried at once, finds it.
func TestStepsAPermitUpWhereAStepHidIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50, service: around(100 * time.Millisecond)}, Estimate{Saturated: true, Capacity: 49, LowerBound: 10}, Config{})
		defer r.close()
		r.setClients(10)
		r.limits(10 * time.Second)
		r.setClients(200)
		samples := r.limits(30 * time.Second)
		if l := firstSet(r.ctrl.Changes()); l != 49 {
			t.Fatalf("first limit %d; want 49, the estimate (changes %+v)", l, r.ctrl.Changes())
		}
		if got := lastMedian(samples); got != 50 {
			t.Errorf("limit at 10-30s = %d; want 50, the pool (path %v; changes %+v)", got, samples, r.ctrl.Changes())
		}
		var nudged bool
		for _, ch := range r.ctrl.Changes() {
			nudged = nudged || ch.Reason == Probe && ch.From == 49 && ch.To == 50
		}
		if !nudged {
			t.Errorf("no step of one permit from 49 (changes %+v)", r.ctrl.Changes())
		}
	})
}

// TestKeepsAStepAsFarAsThroughputFollowed: from an estimate of 40 against
// a pool of 50, a step to about 44 is kept, and the
// next, to about 53, raises throughput by more than half the step but
// less than all of it: it is kept only as far as throughput followed,
// about 50, not where several requests a turn would wait inside the pool.
func TestKeepsAStepAsFarAsThroughputFollowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 50, service: around(100 * time.Millisecond)}, Estimate{Saturated: true, Capacity: 40, LowerBound: 10}, Config{})
		defer r.close()
		r.setClients(200)
		samples := r.limits(40 * time.Second)
		var trimmed bool
		for _, ch := range r.ctrl.Changes() {
			trimmed = trimmed || ch.Reason == ThroughputFollowed && strings.Contains(ch.Detail, "kept as far as") && ch.To >= 49 && ch.To <= 51
		}
		if !trimmed {
			t.Errorf("no step kept short of its trial, at 49 to 51 (changes %+v)", r.ctrl.Changes())
		}
		if got := lastMedian(samples); got < 49 || got > 51 {
			t.Errorf("limit after 20-40s = %d; want 49 to 51, about the pool (path %v)", got, samples)
		}
	})
}

// partlyCPU is an upstream whose requests spend 30% of their time waiting
// on something else and 70% on 2 cores: 2 at once leave the cores idle
// while they wait, a third fills them (throughput up 45%), a fourth still
// adds 8%, and each beyond adds less.
func partlyCPU(d time.Duration) *cores {
	// On the cores, 70% of the requests held, at most one core each.
	return &cores{d: d, slowdown: func(n float64) float64 { return 0.3 + 0.7*max(1, 0.7*n/2) }}
}

// partlyCPURig runs 32 clients on partlyCPU work of 10 ms, from an
// estimate of 2.
func partlyCPURig(t *testing.T) (*Controller, func()) {
	var clients atomic.Int64
	clients.Store(32)
	return coresRig(t, Estimate{Saturated: true, Capacity: 2, LowerBound: 1}, partlyCPU(10*time.Millisecond).serve, &clients)
}

// TestStepsOfOnePermitFollowWhereTheCoresFill: at a small limit a step of
// one permit is a third or a half of the limit; it is kept when it raises
// throughput beyond a tick's noise, not only by half the step. From an
// estimate of 2, the limit climbs to 3 and beyond.
func TestStepsOfOnePermitFollowWhereTheCoresFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctrl, stop := partlyCPURig(t)
		defer stop()
		var samples []int
		for range 60 {
			time.Sleep(time.Second)
			samples = append(samples, ctrl.Limit())
		}
		if got := lastMedian(samples); got < 3 {
			t.Errorf("limit after 40-60s = %d; want 3 or more, where the cores fill (path %v; changes %+v)", got, samples, ctrl.Changes())
		}
	})
}

// TestStepsDownOnceWhereTheStretchIsTheCores: work partly CPU on 2 cores
// is stretched at any limit that fills them, by the load's own clients as
// much as by waiting, and a step down from there loses throughput. Once
// refused from a limit, a step down is not tried from it again while the
// stretch holds: each costs two ticks below the knee.
func TestStepsDownOnceWhereTheStretchIsTheCores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctrl, stop := partlyCPURig(t)
		defer stop()
		time.Sleep(2 * time.Minute)
		downs := map[int]int{}
		for _, ch := range ctrl.Changes() {
			switch {
			case ch.Reason == Probe && ch.To < ch.From:
				downs[ch.From]++
			case ch.Reason == ThroughputFollowed || ch.Reason == ThroughputHeld:
				clear(downs)
			}
			for from, n := range downs {
				if n > 1 {
					t.Fatalf("%d steps down from %d with no step kept between (changes %+v)", n, from, ctrl.Changes())
				}
			}
		}
	})
}

// TestStepsDownNoLowerThanAStepUpCameFrom: a step up kept measured the
// limit it came from serving less. Work partly CPU on 2 cores is
// stretched at every limit that fills them, and a step down back there
// lost a tenth of the throughput for two ticks, to learn again what the
// step up had shown. It is learnt again after 30 ticks (here 30 s, at
// ticks of 1 s), so that a step up kept on a lucky tick does not stand
// for good.
func TestStepsDownNoLowerThanAStepUpCameFrom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctrl, stop := partlyCPURig(t)
		defer stop()
		time.Sleep(2 * time.Minute)
		upFrom, retested := 0, false
		var upAt time.Time
		for _, ch := range ctrl.Changes() {
			switch {
			case ch.Reason == CapacityFound:
				upFrom = 0
			case ch.Reason == ThroughputFollowed:
				upFrom, upAt = ch.From, ch.At
			case ch.Reason == Probe && ch.To < ch.From && ch.To <= upFrom:
				if ch.At.Sub(upAt) < 30*time.Second {
					t.Fatalf("a step down from %d to %d, %v after a step up from %d was kept (changes %+v)", ch.From, ch.To, ch.At.Sub(upAt), upFrom, ctrl.Changes())
				}
				retested = true
			}
		}
		if !retested {
			t.Errorf("no step down where a step up was kept more than 30 s before (changes %+v)", ctrl.Changes())
		}
	})
}

func TestValidateNamesEveryBadField(t *testing.T) {
	err := Config{Min: -1, Max: -2, Tick: -time.Second, LiftAfter: -time.Second}.Validate()
	var got []string
	for _, e := range field.All(err) {
		got = append(got, e.Field)
	}
	if want := "SetLimit State Estimate Min Max Tick LiftAfter"; strings.Join(got, " ") != want {
		t.Errorf("Validate names %q; want %q (%v)", got, want, err)
	}
	ok := Config{SetLimit: func(int) {}, State: func() State { return State{} }, Estimate: func() Estimate { return Estimate{} }, Min: 4, Max: 4}
	if err := ok.Validate(); err != nil {
		t.Errorf("Min = Max = 4: %v; want no problem", err)
	}
	ok.Max = 3
	if err := ok.Validate(); err == nil || !strings.Contains(err.Error(), "adaptive: Max is 3; want 0 (no bound), or Min (4) or more") {
		t.Errorf("Max below Min: %v; want Max named", err)
	}
}

// TestTriesASmallPoolSparingly: a pool of 5 at 100 ms under 32 clients. A
// step of one permit over it puts a request a turn in the pool's queue,
// and its tick read a few percent more throughput than the base (why, is
// not known): judged alone it is refused, and tried again after a rest. Tried again at once and
// judged together with the tries before (to find a fourth request that
// adds 2 to 7% on 2 cores, within a tick's noise), the limit stood above
// this pool a quarter of the time; trials alone keep it there a fifteenth.
func TestTriesASmallPoolSparingly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 5, service: around(100 * time.Millisecond)}, Estimate{Saturated: true, Capacity: 5, LowerBound: 1}, Config{})
		defer r.close()
		r.setClients(2)
		r.limits(10 * time.Second)
		r.setClients(32)
		const n = 1200 // samples, every 100 ms
		var above int
		var samples []int
		for i := range n {
			time.Sleep(100 * time.Millisecond)
			l := r.ctrl.Limit()
			if l > 5 {
				above++
			}
			if i%10 == 9 {
				samples = append(samples, l)
			}
		}
		if share := float64(above) / n; share > 0.12 {
			t.Errorf("limit above the pool of 5 for %.0f%% of 120 s; want 12%% at most (path %v; changes %+v)", share*100, samples, r.ctrl.Changes())
		}
		if got := lastMedian(samples); got != 5 {
			t.Errorf("limit after 100-120s = %d; want 5, the pool (path %v)", got, samples)
		}
	})
}

// TestFoundSetsTheFirstLimit: 300 clients on a pool of 37 from the first
// second, an estimate that never says saturated (it saw nothing calmer):
// admission stays open until a probe tells the controller the capacity,
// which then becomes its first limit, held, and a capacity told once a
// limit is in force changes nothing.
func TestFoundSetsTheFirstLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &pool{size: 37, service: around(80 * time.Millisecond)}, Estimate{}, Config{})
		defer r.close()
		r.setClients(300)
		time.Sleep(15 * time.Second)
		if l := r.ctrl.Limit(); l != 0 {
			t.Fatalf("limit %d with nothing found; want admission open", l)
		}
		r.ctrl.Found(36.4, 18, "a probe found it")
		if l := r.ctrl.Limit(); l != 36 || r.lim.Stats().Limit != 36 {
			t.Fatalf("limit %d, limiter's %d after Found(36.4); want 36", l, r.lim.Stats().Limit)
		}
		if ch := r.ctrl.Changes(); len(ch) != 1 || ch[0].Reason != CapacityFound {
			t.Errorf("changes %+v; want one, capacity_found", ch)
		}
		if m := lastMedian(r.limits(40 * time.Second)); !within(m, 37, 0.15) {
			t.Errorf("limit stands at %d; want 37 within 15%%", m)
		}
		before := r.ctrl.Limit()
		r.ctrl.Found(5, 1, "a stale finding")
		if l := r.ctrl.Limit(); l != before {
			t.Errorf("Found with a limit in force moved it from %d to %d", before, l)
		}
	})
}
