package adaptive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomgate/loomgate/field"
	"github.com/loomgate/loomgate/route"
)

// Estimate is the estimator's judgement of the upstream, as the
// controller reads it.
type Estimate struct {
	// Saturated is set when the upstream queues inside: its service time
	// grew with the load while its throughput stopped.
	Saturated bool
	// Capacity is the concurrency it sustains; NaN or 0 when unknown.
	Capacity float64
	// LowerBound is the most requests it was seen to serve at once
	// without its service time growing: the limit never goes below it.
	LowerBound float64
}

// State is admission's state, sampled between ticks.
type State struct {
	InFlight, Queued int64
}

// Reason says why the limit changed.
type Reason string

// The reasons for a change of the limit.
const (
	// CapacityFound: the estimator found the upstream queueing inside
	// while admission was open; the limit is set at its capacity.
	CapacityFound Reason = "capacity_found"
	// Probe: a trial step, up or down, judged after one tick.
	Probe Reason = "probe"
	// ThroughputFollowed: a step up raised throughput; it is kept.
	ThroughputFollowed Reason = "throughput_followed"
	// ThroughputHeld: a step down lost no throughput, so the upstream
	// was holding more than it served; it is kept.
	ThroughputHeld Reason = "throughput_held"
	// ProbeFailed: the trial step was not borne out; the limit goes back.
	ProbeFailed Reason = "probe_failed"
	// DemandFell: nothing waited for the limit for LiftAfter and the
	// upstream was not stretched; admission opens again.
	DemandFell Reason = "demand_fell"
)

// Reasons lists every Reason, for metrics that create their series at once.
func Reasons() []Reason {
	return []Reason{CapacityFound, Probe, ThroughputFollowed, ThroughputHeld, ProbeFailed, DemandFell}
}

// Change is one change of the limit.
type Change struct {
	At       time.Time
	From, To int
	Reason   Reason
	// Detail gives the figures behind the change, in words.
	Detail string
}

// Config describes a Controller.
type Config struct {
	// SetLimit applies a limit; 0 opens admission. Required.
	SetLimit func(int)
	// State reads admission's state. Required.
	State func() State
	// Estimate reads the estimator's judgement, at each tick while
	// admission is open. Required.
	Estimate func() Estimate
	// Min and Max bound the limit. If Min is zero, 1; if Max is zero, no
	// bound above.
	Min, Max int
	// Tick is the measuring interval while a limit is in force. If zero,
	// 20 of the least median service times seen, from 1s to 2s: long
	// enough for every permit to turn over many times, short enough that
	// a trial (two ticks) follows a grown pool within seconds. While
	// admission is open the tick is shorter (see openTickMin).
	Tick time.Duration
	// LiftAfter is how long nothing must wait for the limit, with the
	// upstream unstretched, before admission opens again. If zero, 2m.
	LiftAfter time.Duration
	// Logger receives each change. If nil, slog.Default().
	Logger *slog.Logger
	// OnChange is told of each change, for metrics. Optional.
	OnChange func(Change)
	// Paused reports whether another part holds admission back for a
	// while (a probe): a tick during which it did is passed over, its
	// figures that part's doing. Optional.
	Paused func() bool
}

// Validate reports every problem of cfg as *field.Error values joined,
// or nil.
func (cfg Config) Validate() error {
	var problems []error
	bad := func(name, format string, args ...any) {
		problems = append(problems, &field.Error{Part: "adaptive", Field: name, Problem: fmt.Sprintf(format, args...)})
	}
	for _, f := range []struct {
		name string
		nil  bool
	}{{"SetLimit", cfg.SetLimit == nil}, {"State", cfg.State == nil}, {"Estimate", cfg.Estimate == nil}} {
		if f.nil {
			bad(f.name, "is required")
		}
	}
	if cfg.Min < 0 {
		bad("Min", "is %d; want 0 or more", cfg.Min)
	}
	if cfg.Max < 0 || cfg.Max > 0 && cfg.Max < max(cfg.Min, 1) {
		bad("Max", "is %d; want 0 (no bound), or Min (%d) or more", cfg.Max, cfg.Min)
	}
	if cfg.Tick < 0 {
		bad("Tick", "is %v; want 0 (the default) or more", cfg.Tick)
	}
	if cfg.LiftAfter < 0 {
		bad("LiftAfter", "is %v; want 0 (the default) or more", cfg.LiftAfter)
	}
	return errors.Join(problems...)
}

// Step sizes, as fractions of the limit.
const (
	firstStep = 0.1
	lastStep  = 0.5
	// followShare is the share of a step's proportional change in
	// throughput that counts as following it (up) or as losing it
	// (down): a step of 10% up is kept when throughput rose 5% or more.
	followShare = 0.5
	// holdLoss is the most throughput a step down may lose and still
	// count as having held it: above a tick's noise of a few percent.
	holdLoss = 0.05
	// busyShare is the share of samples with requests waiting for the
	// limit from which the limit counts as the binding constraint: only
	// then does a step up have demand to show.
	busyShare = 0.5
	// stretched is the stretch (what the upstream holds over what it
	// serves at its unloaded speed) from which it counts as holding
	// requests it does not serve: only then is a step down tried.
	stretched = 1.2
	// trimStretch is the slowdown from which a limit just set from
	// admission open is trimmed to what the upstream serves: a pool that
	// answers in step, held one permit over its 50, is slowed by 2%, the
	// request over it waiting a whole turn. A tick's mean service time is
	// a percent or so off, so a trim may be refused, at the cost of a
	// tick a permit below the limit.
	trimStretch = 1.01
	// upTicks is how long a step up kept is taken to show that the limit
	// it came from serves less: a step down there, to learn it again,
	// costs two ticks, once in 30 at most.
	upTicks = 30
	// heldGrowth is how much the stretch must grow, at a limit where a
	// step down was refused, before another is tried there.
	heldGrowth = 1.1
	// servedNoise is how far what the upstream serves at once reads high
	// in a tick: a step down stops where it would go below what is
	// served, less this.
	servedNoise = 0.02
	// roundUpBelow: a first limit from admission open of fewer permits
	// than this is set a permit higher. There a permit is a third of the
	// throughput or more, and a limit a permit low costs it until a step
	// up is judged, two ticks at least; a limit a permit high costs, in
	// a pool that answers in step, a request a turn waiting in the
	// upstream's queue rather than loomgate's, until a step down is
	// tried (see consider). CPU-bound work on 2 cores shared with the
	// load's own clients serves 1.5 to 2.0 at once at its unloaded speed
	// with admission open, but a sixth to a fifth more at 3 than at 2.
	roundUpBelow = 4
	// overloadStretch and loadRose: an open admission is limited at once,
	// without the estimator, when the upstream holds half again what it
	// serves while serving a fifth more than it ever did unstretched.
	overloadStretch = 1.5
	loadRose        = 1.2
	// baseAnswers is how many answers of a route class make one sample of
	// its mean service time: fewer, and the least of the samples is the
	// luckiest, not the unloaded speed. Service times spread evenly from
	// 20 to 200 ms put the least of 18 samples of 50 answers 14% below
	// the mean, and every limit from it as low; of 200, about 4%.
	baseAnswers = 200
	// openTickMin is the shortest tick while admission is open: an
	// overload of open arrivals piles up inside the upstream by the
	// second, and is acted on within two ticks.
	openTickMin = 500 * time.Millisecond
	// restTicks is how many ticks pass, at a limit both of whose
	// neighbours were tried and refused, before the next trial.
	restTicks = 3
	// minWindow is how long the least service time is remembered.
	minWindow = 10 * time.Minute
)

// Controller moves an Adaptive limiter's limit: open until the estimator
// finds the upstream queueing inside, then at its capacity, then by
// bounded steps judged on whether throughput follows.
//
// While limited, the upstream's load no longer varies, and an estimate
// from load alone goes blind. The controller keeps learning by trial:
// when requests wait for the limit, a step up is kept if throughput rose
// with it; when the upstream's service time is stretched over the least
// seen, a step down is kept if throughput held. Service time is measured
// from admission, apart from the queue, so the controller's own queue
// never looks like the upstream slowing down. Steps grow while they keep
// being borne out (10% to 50%), so a pool that doubles is found within a
// minute, and shrink back to 10% at the first refusal.
type Controller struct {
	cfg Config
	log *slog.Logger

	// The current tick's figures, written by Record from every request:
	// answers and their service time per route class, whose unloaded
	// speeds differ (the tick's totals are their sums), and the median's
	// histogram.
	perClass [route.Max + 1]struct{ n, ns atomic.Int64 }
	hist     histogram

	mu    sync.Mutex
	limit int
	// The controller's phase and what it compares against.
	phase   phase
	base    tick // the last tick at the limit in force, before a trial
	from    int  // the limit before a trial
	dir     int  // +1 up, -1 down: the next trial's direction
	step    float64
	refused int // trials refused in a row
	knees   int // rests after a refused step down, in a row
	upKnees int // rests after a refused step up, in a row
	// prev is the last tick measured at the limit in force, at prevAt:
	// a trial starts from a base that agrees with it.
	prev      tick
	prevAt    int
	rest      int  // ticks left to rest
	restBase  tick // the figures at the knee, when the rest began
	bothWays  bool // the trial under way had evidence for both directions
	calmSince time.Time
	mins      minWindowed
	// Each route class's least mean service time, and the pooled answers
	// not yet enough for a sample of it.
	unloaded [route.Max + 1]classBase
	// The most throughput, and the most requests held at once, of the
	// ticks in which the upstream was not stretched.
	calmThroughput, calmInFlight peakWindowed
	hot                          int     // open ticks in a row that found saturation
	hotServed                    float64 // the most served in those ticks
	// fresh is set when the limit has just been set from admission open:
	// until its first measured tick, ticks are short, and that tick is a
	// trial's base without a second to agree with it.
	fresh bool
	// roundedUp is set when the first limit was set a permit above what
	// the upstream served (see roundUpBelow), until the first tick
	// measured at it.
	roundedUp bool
	// trimming is set while the trial under way is a trim (see consider):
	// a trim kept is judged again as a trim.
	trimming bool
	// nudging is set while the trial under way is a step of one permit
	// up, tried when a larger step was refused but throughput rose by a
	// permit's share or more; nudgedAt is the limit from which the last
	// such step was refused.
	nudging  bool
	nudgedAt int
	// heldAt is the limit from which a step down was last refused, at a
	// stretch of heldStretch.
	heldAt      int
	heldStretch float64
	// upFrom is the limit the last step up kept came from, which served
	// less than the limit above it, when the upstream served upAtOnce at
	// once; believed until upUntil.
	upFrom   int
	upAtOnce float64
	upUntil  time.Time
	changes  []Change
	tickLen  time.Duration
	// openTickLen is the tick while admission is open: 5 of the least
	// median service times, from 0.5 s to 1 s.
	openTickLen time.Duration
	skip        int // ticks to pass over before the next measure
	// drained is when the requests held as a limit was first set are
	// answered: the last tick passed over ends no sooner.
	drained time.Time

	samples, busy int // this tick's State samples, and those with waiters
	inFlightSum   int64
	paused        bool // Config.Paused said so at a sample of this tick

	// What decide chose, applied once c.mu is released: the limit to set
	// (-1 for none) and the changes to report.
	apply   int
	pending []Change
}

type phase int

const (
	open    phase = iota // no limit; waiting for the estimator
	measure              // at a limit, measuring the base of a trial
	settle               // a step down's first tick: requests of the old limit finish
	judge                // a trial's second tick: measured and judged
)

// tick is one interval's figures.
type tick struct {
	throughput float64       // completions a second
	answered   float64       // completions a second, counted
	service    time.Duration // median service time
	busy       float64       // share of samples with requests waiting
	inFlight   float64       // mean admitted
	n          int64         // completions
	// slowdown is the mean service time over what the tick's mix of
	// route classes took unloaded: the stretch without the tick's count
	// of answers, which answers in step put a batch off.
	slowdown float64
	// served is how many requests the upstream would hold at once for
	// this tick's answers at each route's unloaded speed (Little's law,
	// route by route), and stretch the requests it held over that: 1 when
	// nothing waits inside it, 2 when half of what it holds waits. By
	// route, because the mix moves with the load: a pool shared by 20 ms
	// and 200 ms requests serves more of the slow ones when it is
	// overloaded, and a single median would read that as a stretch.
	served, stretch float64
	// atOnce is what it serves at once by Little's law alone: the
	// requests held over their slowdown (served, without one). Unlike
	// served, it needs no count of answers, which a pool answering in
	// step puts a batch off.
	atOnce float64
}

// New validates cfg and returns a Controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Min == 0 {
		cfg.Min = 1
	}
	if cfg.LiftAfter == 0 {
		cfg.LiftAfter = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Controller{cfg: cfg, log: cfg.Logger, step: firstStep, dir: +1, apply: -1}, nil
}

// Record counts one request of route class class (an index of
// route.Classes; out of range counts as route.Other's) answered by the
// upstream, with its service time (admission to last byte). It is safe for
// concurrent use and takes no lock.
func (c *Controller) Record(class int, service time.Duration) {
	c.hist.add(service)
	if class < 0 || class >= len(c.perClass) {
		class = 0
	}
	c.perClass[class].n.Add(1)
	c.perClass[class].ns.Add(int64(service))
}

// Limit is the limit in force, 0 when admission is open.
func (c *Controller) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit
}

// Changes returns the last changes, oldest first (at most 50).
func (c *Controller) Changes() []Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Change(nil), c.changes...)
}

// sampleEvery is how often State is sampled within a tick.
const sampleEvery = 50 * time.Millisecond

// Run measures and adjusts until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	sample := time.NewTicker(sampleEvery)
	defer sample.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-sample.C:
			c.sample()
			if now.Sub(start) >= c.tickLength() {
				c.step1(now, now.Sub(start))
				start = now
			}
		}
	}
}

func (c *Controller) sample() {
	st := c.cfg.State()
	paused := c.cfg.Paused != nil && c.cfg.Paused()
	c.mu.Lock()
	c.paused = c.paused || paused
	c.samples++
	c.inFlightSum += st.InFlight
	if st.Queued > 0 {
		c.busy++
	}
	c.mu.Unlock()
}

// tickLength is the measuring interval in force.
func (c *Controller) tickLength() time.Duration {
	if c.cfg.Tick > 0 {
		return c.cfg.Tick
	}
	c.mu.Lock()
	d := c.tickLen
	switch {
	case c.phase == open || c.skip > 0:
		// Also a tick passed over after the limit jumped (first set, a
		// trial undone): the requests above it finish within a few
		// service times, and a long one only delays the next trial,
		// which is how a pool grown under the limit is found.
		d = c.openTickLen
	case c.fresh:
		// The first tick measured at a limit first set, on which it is
		// trimmed or a step up is tried: the sooner, the less the first
		// limit's error costs.
		d /= 2
	case c.phase == judge && c.limit > c.from:
		// A step up is judged on half a tick, 10 service times or more:
		// its permits are taken at once, and it is what costs latency
		// at a knee that holds (see judgeTrial).
		d /= 2
	}
	c.mu.Unlock()
	if d == 0 {
		return openTickMin
	}
	return d
}

// classTick is one route class's answers in a tick.
type classTick struct{ n, ns int64 }

// step1 closes a tick of length d and acts on it.
func (c *Controller) step1(now time.Time, d time.Duration) {
	median := c.hist.takeMedian()
	var classes [route.Max + 1]classTick
	var n int64
	var total time.Duration
	for i := range c.perClass {
		classes[i] = classTick{c.perClass[i].n.Swap(0), c.perClass[i].ns.Swap(0)}
		n += classes[i].n
		total += time.Duration(classes[i].ns)
	}
	c.mu.Lock()
	if c.paused {
		// Another part held admission back: the tick is its doing.
		c.paused = false
		c.samples, c.busy, c.inFlightSum = 0, 0, 0
		c.hot, c.hotServed = 0, 0
		c.mu.Unlock()
		return
	}
	c.decide(now, d, n, total, median, &classes)
	c.flush()
}

// Found sets a first limit at capacity, which another part found (a
// probe: an upstream seen only at its peak, whose unloaded speed no tick
// of admission open shows), never below lowerBound. It does nothing once
// a limit is in force: the trials follow the upstream from there.
func (c *Controller) Found(capacity, lowerBound float64, detail string) {
	c.mu.Lock()
	if c.phase != open || !(capacity > 0) {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	c.set(now, c.firstLimit(max(capacity, lowerBound), lowerBound), CapacityFound, detail)
	c.limited(now, tick{})
	c.flush()
}

// flush applies what decide chose: the limiter, the log and the metrics
// hear of it after the lock is released, as no lock is held across
// another component. The caller holds c.mu, which flush releases.
func (c *Controller) flush() {
	limit, changes := c.apply, c.pending
	c.apply, c.pending = -1, nil
	c.mu.Unlock()
	if limit >= 0 {
		c.cfg.SetLimit(limit)
	}
	for _, ch := range changes {
		level := slog.LevelInfo
		if ch.Reason == Probe {
			// Trials come every few ticks at the knee; the outcome of
			// each is logged at info.
			level = slog.LevelDebug
		}
		c.log.Log(context.Background(), level, "adaptive limit", "from", ch.From, "to", ch.To, "reason", string(ch.Reason), "detail", ch.Detail)
		if c.cfg.OnChange != nil {
			c.cfg.OnChange(ch)
		}
	}
}

// decide closes a tick of length d with n answers, their service times
// adding up to total, of the given median, and chooses what to do. The
// caller holds c.mu.
func (c *Controller) decide(now time.Time, d time.Duration, n int64, total, median time.Duration, classes *[route.Max + 1]classTick) {
	t := tick{throughput: float64(n) / d.Seconds(), answered: float64(n) / d.Seconds(), service: median, n: n}
	if c.samples > 0 {
		t.busy = float64(c.busy) / float64(c.samples)
		t.inFlight = float64(c.inFlightSum) / float64(c.samples)
	}
	if n > 0 && total > 0 && t.inFlight > 0 {
		// Little's law, L / S: the requests held on average over their
		// mean service time. Counting answers in the tick instead is off
		// by a whole batch when answers come in step (a pool of 50 at a
		// fixed 200 ms answers 50 at a time: 15 or 16 batches in 3 s,
		// 7% apart, more than a step is judged by).
		t.throughput = t.inFlight / (total.Seconds() / float64(n))
	}
	c.samples, c.busy, c.inFlightSum = 0, 0, 0
	t.served = c.servedAtUnloadedSpeed(now, d, classes)
	if t.served > 0 {
		t.stretch = t.inFlight / t.served
		// served = n/d × the mix's unloaded mean.
		t.slowdown = total.Seconds() / (t.served * d.Seconds())
	}
	t.atOnce = t.served
	if t.slowdown > 0 {
		t.atOnce = t.inFlight / t.slowdown
	}
	if median > 0 {
		c.mins.add(now, median)
		// From the least service time, not this tick's: a stretched
		// upstream would otherwise slow the controller that should
		// relieve it.
		least := c.mins.least(now)
		c.tickLen = min(max(20*least, time.Second), 2*time.Second)
		c.openTickLen = min(max(5*least, openTickMin), time.Second)
	}
	if n < 20 {
		// Too few answers to judge anything; the tick does not count.
		c.hot, c.hotServed = 0, 0
		return
	}
	if c.phase == open && t.stretch > 0 && t.stretch <= stretched {
		c.calmThroughput.add(now, t.throughput)
		c.calmInFlight.add(now, t.inFlight)
	}
	if c.skip > 0 {
		// The tick after a jump of the limit mixes the old limit's
		// requests, still finishing, with the new: it is no base. After
		// a limit first set, until the requests the upstream held then
		// are answered: under open arrivals it held five times the
		// limit, and those answered in the first tick measured, each
		// having waited inside it, made it read as serving 30 of 50.
		if c.skip == 1 && now.Before(c.drained) {
			return
		}
		c.skip--
		return
	}
	switch c.phase {
	case open:
		if c.overloadedNow(now, t) {
			return
		}
		est := c.cfg.Estimate()
		// Saturated in the estimator's window is not enough: after a lift
		// the window still remembers the last overload. The upstream must
		// be asked for more than its capacity now.
		if est.Saturated && est.Capacity > 0 && !math.IsNaN(est.Capacity) && t.inFlight >= est.Capacity {
			to := c.firstLimit(max(est.Capacity, est.LowerBound), est.LowerBound)
			c.set(now, to, CapacityFound, fmt.Sprintf("the upstream queues inside; its capacity is %.1f (at least %.0f)", est.Capacity, est.LowerBound))
			c.limited(now, t)
		}
	case measure:
		fresh := c.fresh
		c.fresh = false
		c.consider(now, t, fresh, fresh)
	case settle:
		c.phase = judge
	case judge:
		c.judgeTrial(now, t)
	}
}

// servedAtUnloadedSpeed folds a tick's answers per route class into each
// class's least mean service time, and returns how many requests the
// upstream would have held at once to give the tick's answers at those
// speeds: the sum over classes of throughput × least mean service time. A
// class not yet seen often enough for a least counts at this tick's speed,
// as unstretched. The caller holds c.mu.
func (c *Controller) servedAtUnloadedSpeed(now time.Time, d time.Duration, classes *[route.Max + 1]classTick) float64 {
	var served float64
	for i, ct := range classes {
		if ct.n == 0 {
			continue
		}
		b := &c.unloaded[i]
		b.n += ct.n
		b.ns += ct.ns
		if b.n >= baseAnswers {
			b.least.add(now, time.Duration(b.ns/b.n))
			b.n, b.ns = 0, 0
		}
		least := b.least.least(now)
		if least == 0 {
			least = time.Duration(ct.ns / ct.n)
		}
		served += float64(ct.n) / d.Seconds() * least.Seconds()
	}
	return served
}

// overloadedNow limits admission, without waiting for the estimator, when
// the load has just risen past what the upstream serves: for two ticks in
// a row it holds half again what it serves at its unloaded speed, while
// serving a fifth more than it ever did unstretched. The limit is what it
// serves (Little's law at the unloaded speeds, route by route), never
// below the most it held unstretched.
//
// The rise in throughput is what tells an overload from a dependency that
// slowed: with arrivals that keep coming whatever the latency, a slower
// dependency also holds more requests than it serves at its old speed,
// but it serves no more than before. A load that crept up to the capacity
// gives no such rise, and is left to the estimator; nothing piles up
// quickly there. The caller holds c.mu.
func (c *Controller) overloadedNow(now time.Time, t tick) bool {
	calm := c.calmThroughput.peak(now)
	if t.stretch < overloadStretch || calm == 0 || t.throughput < loadRose*calm {
		c.hot, c.hotServed = 0, 0
		return false
	}
	// What a tick's answers show it serving is a count, a tenth off
	// either way. By Little's law (the requests held over their
	// slowdown) it reads high while the upstream's queue still grows,
	// by nearly half in the first tick of 200 clients on a pool of 50,
	// and is exact once it has grown. A limit a little high is trimmed
	// within a tick and a half (see consider); one a little low is found
	// only by a step up, and costs, in a pool that answers in step, a
	// whole turn for some requests until then. So the more of the two,
	// the second no more than a tenth over the count.
	c.hotServed = max(c.hotServed, t.served, min(t.atOnce, 1.1*t.served))
	if c.hot++; c.hot < 2 {
		return false
	}
	// The more of the two ticks: the first began before the load rose,
	// and what the upstream serves reads low (a third low, measured on a
	// pool of 50).
	served := c.hotServed
	c.hot, c.hotServed = 0, 0
	held := c.calmInFlight.peak(now)
	to := c.firstLimit(max(served, held), held)
	c.set(now, to, CapacityFound, fmt.Sprintf("the load rose: the upstream holds %.0f at once, serves %.0f/s, as many as %.1f would at its unloaded speed (at most %.0f/s and %.0f held before it stretched)", t.inFlight, t.throughput, served, calm, held))
	c.limited(now, t)
	return true
}

// firstLimit is the limit first set from admission open for an upstream
// that serves capacity at once, never below lowerBound: capacity rounded,
// and a permit more where that is fewer than roundUpBelow (see
// roundUpBelow). The caller holds c.mu.
func (c *Controller) firstLimit(capacity, lowerBound float64) int {
	to := c.clamp(int(math.Round(capacity)), lowerBound)
	up := c.clamp(to+1, lowerBound)
	// Not where the bounds set it.
	c.roundedUp = to < roundUpBelow && up > to
	if c.roundedUp {
		return up
	}
	return to
}

// limited starts measuring at a limit just set from admission open, in a
// tick t: after a tick passed over, and no sooner than the requests the
// upstream held in t are answered at its counted rate, with a fifth to
// spare. The caller holds c.mu.
func (c *Controller) limited(now time.Time, t tick) {
	c.phase, c.skip, c.fresh = measure, 1, true
	c.calmSince = now
	// What trials learnt at an earlier limit is of another load.
	c.step, c.dir, c.refused, c.knees, c.upKnees = firstStep, +1, 0, 0, 0
	c.rest, c.nudgedAt, c.heldAt, c.upFrom = 0, 0, 0, 0
	c.drained = now
	if t.answered > 0 {
		c.drained = now.Add(time.Duration(1.2 * t.inFlight / t.answered * float64(time.Second)))
	}
}

// consider takes t, a tick at the limit in force, as the base of the next
// trial, and starts the trial if there is evidence for one and no rest.
// stable says t needs no earlier tick to agree with it; fresh, that it is
// the first measured at a limit set from admission open. The caller holds
// c.mu.
func (c *Controller) consider(now time.Time, t tick, stable, fresh bool) {
	c.base = t
	// A tick that straddled a change of the upstream (a pool resized, a
	// burst) is no base: a trial judged against it is judged against a
	// throughput that is gone. Unless it was measured at a trial just
	// kept, the base must agree with the tick before it at the same limit.
	stable = stable || c.prevAt == c.limit && c.prev.n > 0 && math.Abs(t.throughput/c.prev.throughput-1) <= 0.1
	c.prev, c.prevAt = t, c.limit
	if t.busy >= busyShare {
		c.calmSince = now
	} else if now.Sub(c.calmSince) >= c.cfg.LiftAfter && t.stretch <= stretched {
		c.set(now, 0, DemandFell, fmt.Sprintf("nothing waited for the limit for %v and the upstream holds %.0f at once, within %.0f%% of what it serves at its unloaded speed", c.cfg.LiftAfter, t.inFlight, (stretched-1)*100))
		c.phase = open
		return
	}
	if c.rest > 0 && c.restBase.n == 0 {
		c.restBase = t
		c.rest--
		return
	}
	if c.rest > 0 {
		// Resting at the knee, unless the upstream has changed since:
		// throughput moved by a fifth, or service time stretched.
		moved := math.Abs(t.throughput/c.restBase.throughput-1) > 0.2
		stretch := t.stretch >= stretched && t.stretch >= stretched*c.restBase.stretch
		if !moved && !stretch {
			c.rest--
			return
		}
		c.rest, c.knees, c.upKnees = 0, 0, 0
	}
	if !stable {
		return
	}
	up := t.busy >= busyShare && (c.cfg.Max == 0 || c.limit < c.cfg.Max)
	// A step down goes no lower than what the upstream serves at once at
	// its unloaded speed: fewer can only serve less. A stretch can come
	// from what shares the upstream's cores, not from waiting inside it:
	// CPU-bound work on 2 cores, at a limit of 2, is stretched a third by
	// the load's own clients, and a step to 1 loses a third of the
	// throughput for every request queued behind it.
	//
	// What it serves at once is taken by Little's law (requests held over
	// their slowdown), not from the tick's count of answers, which a pool
	// answering in step puts a batch off; and less a tick's noise of a
	// couple of percent: at 51 on a pool of 50 that answers in step, 50
	// read as 50.3 would keep the permit over the pool for good.
	floor := max(c.cfg.Min, int(math.Ceil(t.atOnce*(1-servedNoise))))
	if fresh && c.roundedUp {
		// A first limit rounded up is not trimmed back, nor stepped
		// down, to the permit it was rounded up from: as after a step up
		// kept from there, for upTicks at most. A tick's throughput does
		// not tell the two apart: on 2 cores shared with the load's own
		// clients, 3 served 0 to 12% less than admission open had in the
		// seconds before, and a trim to 2 lost a sixth to a fifth for two
		// ticks. A pool of 2 that answers in step holds a request a turn
		// in its own queue, not loomgate's, until a step down is tried.
		c.upFrom, c.upAtOnce = c.limit-1, t.atOnce
		c.upUntil = now.Add(upTicks * c.tickLen)
	}
	c.roundedUp = false
	// Nor below a limit a step up was kept from, which was measured to
	// serve less, until what the upstream serves at once falls by a tenth
	// (it has changed; unlike the stretch, that does not move with the
	// limit): on 2 cores shared with the load's own clients, 3 is
	// stretched half again, and a step down to the 2 it came from lost a
	// seventh of the throughput for two ticks. For upTicks at most: a
	// tick's reading on such cores is a few percent off, and a step up
	// kept on its luck would otherwise stand, and the next on it, for as
	// long as the upstream does not change.
	if c.upFrom > 0 && (heldGrowth*t.atOnce <= c.upAtOnce || !now.Before(c.upUntil)) {
		c.upFrom = 0
	}
	if c.upFrom > 0 {
		floor = max(floor, c.upFrom+1)
	}
	// Nor is it tried again from a limit where one was refused, until
	// the stretch grows by a tenth: work on cores shared with the load's
	// own clients is stretched for good, and each step down to learn it
	// again lost a sixth of the throughput for two ticks.
	down := t.stretch >= stretched && c.limit > floor && (c.heldAt != c.limit || t.stretch >= heldGrowth*c.heldStretch)
	// A limit just set from admission open came from a count of answers
	// in the seconds the load rose, a tenth off either way; measured now
	// at a steady load, a service time stretched by more than a tick's
	// noise says part of it waits inside the upstream. Trimmed first: a
	// step down is otherwise tried only from a stretch of a fifth.
	trim := fresh && c.limit > floor && t.slowdown >= trimStretch
	if !up && !down && !trim {
		return
	}
	c.bothWays = up && down
	switch {
	case trim:
		c.dir = -1
		c.trimming = true
	case up && down:
		// Both have something to show: alternate, from the last.
	case up:
		c.dir = +1
	default:
		c.dir = -1
	}
	to := c.trial(c.dir)
	if c.dir < 0 {
		// The upstream serves about t.served at once: a limit far above
		// that only queues inside it, so try that at once, but no lower
		// than half the limit in one step: requests of one route class
		// whose costs differ widely make t.served low when the mix moves
		// towards the costly ones, and a halving that loses throughput is
		// undone in a tick.
		served := int(math.Ceil(1.05 * t.atOnce))
		to = max(min(to, c.clamp(max(served, (c.limit+1)/2), 0)), floor)
		if trim {
			// To what it serves at once, by its service time alone (the
			// count of answers is what put the limit off). Rounded to
			// the nearest: in a pool that answers in step it comes out
			// within a tenth of a permit of the pool, on either side, as
			// the least service time is a little low or high. A trim kept
			// is measured again as one (see judgeTrial): the stretch of a
			// few requests waiting among many reads a little low.
			to = max(c.clamp(int(math.Round(float64(c.limit)/t.slowdown)), 0), floor)
		}
	}
	if to == c.limit {
		c.dir = -c.dir
		return
	}
	c.from = c.limit
	c.set(now, to, Probe, fmt.Sprintf("trying %d, from %d: throughput %.0f/s, service %v, %.0f%% of the tick with requests waiting", to, c.limit, t.throughput, t.service.Round(time.Millisecond), t.busy*100))
	// A step up is judged on its first (half) tick: the new permits are
	// taken at once, and the answers of requests admitted before it are
	// a tenth of the tick's. A step down waits a tick for the requests
	// above the new limit to finish.
	c.phase = judge
	if to < c.from {
		c.phase = settle
	}
}

// trial is the limit a step in direction dir would try.
func (c *Controller) trial(dir int) int {
	// Rounded up: a step of one at a small limit is lost in the noise of
	// a tick's count.
	delta := max(1, int(math.Ceil(c.step*float64(c.limit))))
	return c.clamp(c.limit+dir*delta, 0)
}

// judgeTrial keeps or undoes a trial from the tick measured at it.
func (c *Controller) judgeTrial(now time.Time, t tick) {
	c.phase = measure
	ratio := float64(c.limit) / float64(c.from)
	gain := t.throughput/c.base.throughput - 1
	figures := fmt.Sprintf("throughput %.0f/s at %d against %.0f/s at %d", t.throughput, c.limit, c.base.throughput, c.from)
	var kept bool
	var reason Reason
	if c.limit > c.from {
		// Up: kept if demand filled it and throughput followed by half
		// the step, or beyond a tick's noise (holdLoss): a step of 50%
		// that raised throughput 8% found 8% more, and a step of one
		// permit, the finest there is, is a third or a half of a small
		// limit (a third request of work that is partly CPU, on 2 cores,
		// fills the time the others wait). It is kept only as far as
		// throughput followed (below). The service time must agree: had
		// it grown by the whole step, the requests added would all wait
		// inside the upstream. It is measured apart from the requests
		// held, whose samples a tick's throughput also rests on.
		stretch := 0.0
		if c.base.slowdown > 0 {
			stretch = t.slowdown/c.base.slowdown - 1
		}
		kept = t.busy >= busyShare/2 && gain >= min(followShare*(ratio-1), holdLoss) &&
			stretch <= max(followShare*(ratio-1), ratio/(1+holdLoss)-1)
		reason = ThroughputFollowed
	} else {
		// Down: kept if throughput held, within half the step and never
		// more than holdLoss: at a small limit a step is a third or a
		// half, and half of that would accept a real loss as noise.
		loss := min(followShare*(1-ratio), holdLoss)
		if c.trimming {
			// A trim claims the upstream serves as much with fewer:
			// within a tick's noise. Spread service times put the least
			// mean a few percent under the mean, and a trim from the
			// pool, 50 to 47, read 2.9% less and was kept.
			loss = min(loss, servedNoise)
		}
		kept = gain >= -loss
		reason = ThroughputHeld
	}
	dir := +1
	if c.limit < c.from {
		dir = -1
	}
	if kept {
		// The limit moved: a step of one permit, or down, may be tried
		// anywhere.
		c.nudgedAt, c.heldAt = 0, 0
	}
	if kept && dir > 0 {
		// Kept as far as throughput followed: a step of 10% that raised
		// throughput 6% put the rest in the upstream's queue. Rounded
		// down: a tick's throughput is a percent or so off, a permit in
		// 50 either way; a permit too few costs its share of throughput,
		// and a step of one permit finds it (see nudging); a permit too
		// many, in a pool that answers in step, keeps one request a turn
		// waiting a whole turn longer than its peers, which is the tail
		// latency. So no further than what the upstream served at once at
		// the trial either, by its service time: in such a pool that is
		// the pool, within half a permit, and elsewhere it reads high.
		// Where it served the whole trial at once, nothing waited inside
		// it, and the whole step is kept: a tick's throughput then lags by
		// a permit or two (in a pool grown to 100, 64 tried from 58 read
		// as 62 followed), and keeping less only slows the climb.
		atOnce := float64(c.limit)
		if t.slowdown > 0 {
			atOnce = t.atOnce
		}
		followed := c.limit
		if int(math.Round(atOnce)) < c.limit {
			followed = min(int(math.Floor(float64(c.from)*(1+gain))), int(math.Round(atOnce)))
		}
		if followed = max(followed, c.from+1); followed < c.limit {
			figures += fmt.Sprintf("; kept as far as throughput followed, %d", followed)
			short := 2*(followed-c.from) < c.limit-c.from
			c.limit, c.apply = followed, followed
			if short {
				// Less than half the step followed: the knee lies within
				// it. Rest there as after a step up refused, rather than
				// go on with a step twice as large (in a pool answering in
				// step, a step of a fifth above it holds a sixth of the
				// requests a whole turn).
				c.logChange(now, c.from, c.limit, reason, figures)
				c.step, c.refused, c.knees = firstStep, 0, 0
				c.skip = 1
				c.restAtKnee(+1)
				return
			}
			// Most of it followed, short by what a tick's noise and the
			// rounding down take off (78 tried, 76 followed, in a pool
			// grown to 100): go on, with a step no larger.
			c.step /= 2
		}
	}
	if kept && dir > 0 {
		c.upFrom, c.upAtOnce = c.from, t.atOnce
		c.upUntil = now.Add(upTicks * c.tickLen)
	}
	if kept && c.nudging {
		// The permit the step refused had shown: the knee is here.
		c.logChange(now, c.from, c.limit, reason, figures)
		c.nudging = false
		c.step, c.refused, c.knees = firstStep, 0, 0
		c.restAtKnee(+1)
		return
	}
	if kept && c.trimming {
		c.logChange(now, c.from, c.limit, reason, figures)
		c.trimming = false
		c.step, c.refused = firstStep, 0
		if t.slowdown < trimStretch {
			// At what the upstream serves at once: rest there, as at a
			// knee, rather than step on (up, with a step doubled, into a
			// pool that answers in step).
			c.rest, c.restBase = restTicks, tick{}
		}
		// Measured again as a trim: a stretch of a few requests among
		// many reads a little low, so a trim may stop short.
		c.consider(now, t, true, true)
		return
	}
	if kept {
		c.logChange(now, c.from, c.limit, reason, figures)
		// Steps grow while they are borne out, so that a pool that
		// doubled is reached in a few.
		c.step = min(2*c.step, lastStep)
		c.refused, c.knees, c.upKnees = 0, 0, 0
		// The tick just judged was taken at the new limit: it is the base
		// of the next step, which goes on in the same direction.
		c.dir = dir
		c.consider(now, t, true, false)
		return
	}
	c.trimming = false
	tried := c.limit
	c.set(now, c.from, ProbeFailed, figures)
	c.step = firstStep
	if next := c.clamp(c.from+1, 0); dir > 0 && !c.nudging && tried > next && c.nudgedAt != c.from && gain >= 1/float64(c.from) {
		// Throughput rose by a permit's share or more, short of what the
		// step asked: the knee may be a permit above (a pool of 50 under
		// a limit of 49, where a step to 54 reads 3.5% more and puts four
		// requests a turn in the pool's queue). A step of one permit
		// tells, at once, against the same base: the requests admitted
		// above it finish within its first turn. Once, until the limit
		// moves: at a knee that holds, a step of a tenth reads 1 to 2%
		// more in a pool that answers in step.
		c.nudging = true
		c.set(now, next, Probe, fmt.Sprintf("trying %d, from %d: throughput rose %.1f%% at %d, a permit's share or more", next, c.from, gain*100, tried))
		c.phase = judge
		return
	}
	if c.nudging {
		c.nudgedAt = c.from
	}
	if dir < 0 {
		c.heldAt, c.heldStretch = c.from, c.base.stretch
	}
	c.skip = 1
	c.nudging = false
	c.refused++
	c.dir = -dir
	if c.refused >= 2 || !c.bothWays {
		// Every neighbour with evidence for it refused: the limit is at
		// the knee.
		c.restAtKnee(dir)
		c.refused = 0
		// The base the trial was judged against was measured at this
		// limit, just before it: a rest measured from the first tick
		// back at the limit missed an upstream that changed during the
		// trial (a pool shrunk from 100 to 30 a second after a step up
		// was refused was stepped down to only after the 12 s rest).
		c.restBase = c.base
	}
}

// restAtKnee rests before the next trial, after a step in direction dir
// was refused or kept short, longer each time the knee holds. A refused
// step down cost throughput: its rest doubles up to 8 times. A step up put
// requests in the upstream's queue, where a pool answering in step keeps
// them a whole turn longer than their peers, but it is how a grown pool
// is found: its rest doubles once, to 12 s at the longest tick, so that a
// pool grown is found within seconds and the limit stands above a pool
// that holds a fifteenth of the time. The caller holds c.mu.
func (c *Controller) restAtKnee(dir int) {
	if dir < 0 {
		c.rest = restTicks << c.knees
		c.knees = min(c.knees+1, 3)
	} else {
		c.rest = restTicks << c.upKnees
		c.upKnees = min(c.upKnees+1, 1)
	}
	// The rest's base is the first tick measured back at the limit (the
	// one just judged was taken at the trial).
	c.restBase = tick{}
}

// clamp bounds a limit by Min, Max and the estimator's lower bound.
func (c *Controller) clamp(n int, lowerBound float64) int {
	n = max(n, c.cfg.Min, int(math.Ceil(lowerBound)))
	if c.cfg.Max > 0 {
		n = min(n, c.cfg.Max)
	}
	return n
}

// set chooses a limit and records the change. The caller holds c.mu.
func (c *Controller) set(now time.Time, to int, reason Reason, detail string) {
	from := c.limit
	c.limit, c.apply = to, to
	c.logChange(now, from, to, reason, detail)
}

// logChange records a change, whether or not it moved the limit (a kept
// trial has moved it already). The caller holds c.mu.
func (c *Controller) logChange(now time.Time, from, to int, reason Reason, detail string) {
	ch := Change{At: now, From: from, To: to, Reason: reason, Detail: detail}
	c.changes = append(c.changes, ch)
	if len(c.changes) > 50 {
		c.changes = c.changes[len(c.changes)-50:]
	}
	c.pending = append(c.pending, ch)
}

// classBase is one route class's least mean service time, over samples
// of baseAnswers answers, and the answers pooled towards the next sample.
type classBase struct {
	n, ns int64
	least minWindowed
}

// peakWindowed keeps the greatest value per minute for minWindow.
type peakWindowed struct {
	peaks [10]struct {
		minute int64
		peak   float64
	}
}

func (p *peakWindowed) add(now time.Time, v float64) {
	minute := now.Unix() / 60
	slot := &p.peaks[minute%int64(len(p.peaks))]
	if slot.minute != minute {
		slot.minute, slot.peak = minute, v
		return
	}
	slot.peak = max(slot.peak, v)
}

func (p *peakWindowed) peak(now time.Time) float64 {
	minute := now.Unix() / 60
	var peak float64
	for _, s := range p.peaks {
		if minute-s.minute < int64(minWindow/time.Minute) {
			peak = max(peak, s.peak)
		}
	}
	return peak
}

// minWindowed keeps the least median service time per minute for
// minWindow, so that a baseline from a calmer time ages out instead of
// holding the upstream to a speed it has lost.
type minWindowed struct {
	mins [10]struct {
		minute int64
		least  time.Duration
	}
}

func (m *minWindowed) add(now time.Time, d time.Duration) {
	minute := now.Unix() / 60
	slot := &m.mins[minute%int64(len(m.mins))]
	if slot.minute != minute || slot.least == 0 || d < slot.least {
		if slot.minute != minute {
			slot.minute, slot.least = minute, d
			return
		}
		slot.least = d
	}
}

func (m *minWindowed) least(now time.Time) time.Duration {
	minute := now.Unix() / 60
	var least time.Duration
	for _, s := range m.mins {
		if s.least > 0 && minute-s.minute < int64(minWindow/time.Minute) && (least == 0 || s.least < least) {
			least = s.least
		}
	}
	return least
}

// histogram counts service times in buckets 10% apart, from 10µs to
// about an hour, with one atomic add per request.
type histogram struct {
	counts [200]atomic.Int64
}

const histBase = 10 * time.Microsecond

var histGrowth = math.Log(1.1)

func (h *histogram) add(d time.Duration) {
	i := 0
	if d > histBase {
		i = min(int(math.Log(float64(d)/float64(histBase))/histGrowth)+1, len(h.counts)-1)
	}
	h.counts[i].Add(1)
}

// takeMedian returns the median since the last call and starts anew.
func (h *histogram) takeMedian() time.Duration {
	var counts [len(h.counts)]int64
	var total int64
	for i := range h.counts {
		counts[i] = h.counts[i].Swap(0)
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	var seen int64
	for i, n := range counts {
		seen += n
		if 2*seen >= total {
			if i == 0 {
				return histBase
			}
			// The bucket's middle.
			return time.Duration(float64(histBase) * math.Exp(histGrowth*(float64(i)-0.5)))
		}
	}
	return 0
}
