package probe

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
)

// State is admission's state: requests admitted and not finished (at the
// upstream), and requests waiting.
type State struct {
	InFlight, Queued int64
}

// Result is what a probe found.
type Result string

// The results of a probe.
const (
	// Queueing: fewer admitted were served as many answers a second, so
	// the upstream was queueing the rest inside; the step below its knee
	// gives its capacity.
	Queueing Result = "queueing"
	// NotQueueing: fewer admitted were served fewer answers, in
	// proportion: the upstream was serving all it held.
	NotQueueing Result = "not_queueing"
	// Inconclusive: the load the probe measured went away, or the
	// upstream answered too little to tell; the probe stopped.
	Inconclusive Result = "inconclusive"
)

// Results lists every Result, for metrics that create their series at once.
func Results() []Result { return []Result{Queueing, NotQueueing, Inconclusive} }

// Step is one cap of a probe, measured.
type Step struct {
	// Cap is the most admitted at once.
	Cap int
	// Load is the requests in flight, on average, while it was measured.
	Load float64
	// Throughput is answers a second, and Service their mean service time.
	Throughput float64
	Service    time.Duration
	// Held is set when the answers a second held within HoldLoss of the
	// throughput before the probe.
	Held bool
}

// Report is one probe, from its start to its cap lifted.
type Report struct {
	Start, End time.Time
	Result     Result
	// Load, Throughput and Service are the upstream's before the probe:
	// requests in flight on average, answers a second, mean service time.
	Load       float64
	Throughput float64
	Service    time.Duration
	Steps      []Step
	// Capacity is what the upstream serves at once at its unloaded speed:
	// the throughput before the probe times the service time of the step
	// below its knee (Little's law). 0 when Inconclusive.
	Capacity float64
	// Overrun is set when the probe began because requests were admitted
	// faster than they were answered (Config.Overrun), without a measure
	// before it: the throughput and load before are those of the overrun.
	Overrun bool
	// Fallback is, for a probe begun by an overrun that ended
	// Inconclusive, the least cap at which the upstream served as much as
	// before, or the first cap where no step was measured: admission was
	// overrun above it, and a controller of the limit keeps it rather than
	// open admission to the overrun again. 0 otherwise.
	Fallback int
	// Detail says what was seen, in a sentence.
	Detail string
}

// Config describes a Controller.
type Config struct {
	// Cap caps admission at n; 0 lifts the cap. Required.
	Cap func(n int)
	// State reads admission's state. Required.
	State func() State
	// Wanted reports whether the upstream needs a probe: whether it
	// queues inside is unknown, for want of a calmer load than now.
	// Required.
	Wanted func() bool
	// Overrun reports whether a probe is wanted at once where requests
	// have been admitted faster than the upstream answers them for
	// overrunSpan, its answers a second flat: open arrivals above what it
	// serves, whose queue inside grows by the second and whose clients
	// give up while a probe waits for Wanted's ten seconds. Optional:
	// without it, only Wanted starts a probe.
	Overrun func() bool
	// Probing is told when a probe starts (true) and ends: the estimate
	// leaves that time out. Optional.
	Probing func(on bool)
	// Found is told of a probe that found the upstream queueing inside,
	// or one begun by an overrun that has a Fallback, before its cap is
	// lifted: a controller of the limit sets its own first, so that the
	// requests the probe held back do not all reach the upstream's queue
	// again. Optional.
	Found func(Report)
	// Begin is told when a step's answers start to be measured, and End
	// when they stop, with the requests in flight on average and whether
	// the step was below the upstream's knee (then its answers are its
	// unloaded speed). Optional.
	Begin func()
	End   func(load float64, below bool)
	// Every is how often Wanted is asked. If zero, a second.
	Every time.Duration
	// Quiet is the least time from the end of a probe to the start of the
	// next. If zero, 5 minutes: a probe's step below the knee is a
	// baseline for the estimate's 15 minutes, and Wanted stays false
	// while it lasts; one that found nothing is not repeated at once.
	Quiet time.Duration
	// Logger receives each probe's report. If nil, slog.Default().
	Logger *slog.Logger
	// OnReport is told of each report, for metrics. Optional.
	OnReport func(Report)
}

// Validate reports every problem of cfg as *field.Error values joined,
// or nil.
func (cfg Config) Validate() error {
	var problems []error
	for _, f := range []struct {
		name string
		nil  bool
	}{{"Cap", cfg.Cap == nil}, {"State", cfg.State == nil}, {"Wanted", cfg.Wanted == nil}} {
		if f.nil {
			problems = append(problems, &field.Error{Part: "probe", Field: f.name, Problem: "is required"})
		}
	}
	if cfg.Every < 0 {
		problems = append(problems, &field.Error{Part: "probe", Field: "Every", Problem: fmt.Sprintf("is %v; want 0 (the default) or more", cfg.Every)})
	}
	if cfg.Quiet < 0 {
		problems = append(problems, &field.Error{Part: "probe", Field: "Quiet", Problem: fmt.Sprintf("is %v; want 0 (the default) or more", cfg.Quiet)})
	}
	return errors.Join(problems...)
}

// The probe's judgements and bounds.
const (
	// HoldLoss is the most throughput a step may lose and still count as
	// having held it: above a second's noise in the answers of a few
	// hundred, below what a step a tenth under the knee loses. A step
	// that loses a little at the knee is taken as held, and the next,
	// at half, is then well below it: the capacity comes from that one.
	HoldLoss = 0.1
	// MinLoad is the least in flight worth probing: below it, a cap at
	// half admits nothing or one.
	MinLoad = 2
	// minAnswers is the fewest answers that make a measure: a count of 50
	// is off by a few percent at most.
	minAnswers = 50
	// minMeasure and measureTurns: a measure lasts a second at least, and
	// three service times, so that every permit turns over several times.
	minMeasure   = time.Second
	measureTurns = 3
	// Fell is how much throughput a step must lose to be cut short, once
	// minFellAnswers give its service time: plainly below the knee (where
	// a step of half loses from a tenth to a half), so that its cost, half
	// the answers, lasts no longer than needed to read it. Throughput by
	// Little's law is exact for the step's own answers, however they
	// batch; the mean of 30 answers spread from 20 to 400 ms is within a
	// tenth of its own, and a step that fell loses a quarter or more.
	Fell           = 0.25
	minFellAnswers = 30
	// maxMeasure is the longest a measure waits for its answers, in
	// service times, and at least maxMeasureFloor.
	maxMeasure      = 10
	maxMeasureFloor = 5 * time.Second
	// maxProbe bounds a probe whatever the upstream does: well within the
	// minute the limiter lets a probe's waiters wait.
	maxProbe = 40 * time.Second
	// sampleEvery is how often admission's state is read.
	sampleEvery = 50 * time.Millisecond
	// watchEvery is how often admission is looked at between probes, for
	// an overrun; overrunSpan is how long it must last, in overrunParts
	// parts each of which grew what is held by overrunShare of its answers
	// or more and by minOverrunGrowth: a jump of closed clients grows it
	// in one part, and the upstream's own queue growing under open
	// arrivals in every one. An open flood at 1.5 times what a pool
	// serves grows what is held by half its answers a second.
	watchEvery       = 250 * time.Millisecond
	overrunSpan      = time.Second
	overrunParts     = 4
	overrunShare     = 0.1
	minOverrunGrowth = 2
	// overrunRise is how much more the answers of an overrun's second
	// half may be than its first's: a healthy upstream taking on a load
	// answers more as it holds more; an overrun one answers what it did.
	overrunRise = 1.2
	// leastSpan is how long the least service time is remembered between
	// probes: an overrun from the first second leaves only its first
	// answers unstretched.
	leastSpan = 10 * time.Second
	// overrunCap is the first cap of a probe begun by an overrun, as a
	// share of what the upstream serves at once at the least service time
	// seen (its answers a second times that): just below its knee where
	// every request takes about as long, so that the first step already
	// gives the capacity, and far below where service times spread, which
	// such a step, plainly falling, tells at once and cheaply.
	overrunCap = 0.8
	// farBelow: an overrun's first step that served less than this share
	// of the answers before was far below the knee (see probe).
	farBelow = 0.5
)

// errGone ends a probe whose load went away or that ran out of time.
var errGone = errors.New("probe: the load went away")

// Controller probes the upstream when Wanted says so, a step at a time.
// Record feeds it the answers.
type Controller struct {
	cfg    Config
	n, ns  atomic.Int64 // answers, and their service time, since the last read
	least  atomic.Int64 // the least service time since the last watch, ns; 0 for none
	active atomic.Bool

	mu      sync.Mutex
	last    Report
	reports int
}

// New validates cfg and returns a Controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Every == 0 {
		cfg.Every = time.Second
	}
	if cfg.Quiet == 0 {
		cfg.Quiet = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Controller{cfg: cfg}, nil
}

// Record counts one answer of the upstream with its service time
// (admission to last byte). It is safe for concurrent use and takes no
// lock.
func (c *Controller) Record(service time.Duration) {
	c.n.Add(1)
	c.ns.Add(int64(service))
	for {
		// Past the first answers, few are the least: a load, rarely a
		// swap.
		least := c.least.Load()
		if least != 0 && least <= int64(service) || c.least.CompareAndSwap(least, max(int64(service), 1)) {
			return
		}
	}
}

// Active reports whether a probe caps admission now: another controller
// of the limit must not read these seconds as the upstream's own.
func (c *Controller) Active() bool { return c.active.Load() }

// Last returns the last probe's report, and how many probes ran; a zero
// Report before the first.
func (c *Controller) Last() (Report, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.reports
}

// Run probes when Wanted or Overrun says so until ctx ends; a probe under
// way when it ends lifts its cap.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	var next, asked time.Time
	var w watch
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := c.cfg.State()
			w.add(now, st.InFlight, c.n.Swap(0), c.ns.Swap(0), time.Duration(c.least.Swap(0)))
			if now.Before(next) || st.InFlight < MinLoad {
				continue
			}
			var from *overrun
			if o, ok := w.overrun(); ok && c.cfg.Overrun != nil && c.cfg.Overrun() {
				o.load = float64(st.InFlight)
				from = &o
			} else if now.Sub(asked) < c.cfg.Every {
				continue
			} else if asked = now; !c.cfg.Wanted() {
				continue
			}
			r := c.probe(ctx, from)
			next = r.End.Add(c.cfg.Quiet)
			w = watch{}
			c.mu.Lock()
			c.last = r
			c.reports++
			c.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			level := slog.LevelInfo
			if r.Result == Inconclusive {
				level = slog.LevelWarn
			}
			c.cfg.Logger.Log(context.Background(), level, "probe", "result", string(r.Result), "capacity", math.Round(r.Capacity*10)/10,
				"steps", len(r.Steps), "seconds", math.Round(r.End.Sub(r.Start).Seconds()*10)/10, "overrun", r.Overrun, "detail", r.Detail)
			if c.cfg.OnReport != nil {
				c.cfg.OnReport(r)
			}
		}
	}
}

// watch is admission between probes, a sample every watchEvery over the
// last leastSpan: what was held, and the answers since the sample before.
type watch struct {
	samples []watchSample
}

type watchSample struct {
	at       time.Time
	inFlight int64
	n, ns    int64
	least    time.Duration // 0 for no answer
}

func (w *watch) add(at time.Time, inFlight, n, ns int64, least time.Duration) {
	if len(w.samples) > 0 && at.Sub(w.samples[0].at) > leastSpan {
		w.samples = w.samples[1:]
	}
	w.samples = append(w.samples, watchSample{at: at, inFlight: inFlight, n: n, ns: ns, least: least})
}

// overrun is what an overrun showed: answers a second, their mean service
// time, the least service time of leastSpan, and what was held at its end.
type overrun struct {
	throughput float64
	service    time.Duration
	least      time.Duration
	load       float64
}

// overrun reports whether admission has outrun the answers over the last
// overrunSpan (see overrunParts), and what it showed.
func (w *watch) overrun() (overrun, bool) {
	k := int(overrunSpan / watchEvery)
	if len(w.samples) <= k {
		return overrun{}, false
	}
	last := w.samples[len(w.samples)-k-1:]
	per := k / overrunParts
	var n, ns, firstHalf, secondHalf int64
	for p := range overrunParts {
		from, to := last[p*per], last[(p+1)*per]
		var answers int64
		for _, s := range last[p*per+1 : (p+1)*per+1] {
			answers += s.n
			ns += s.ns
		}
		n += answers
		if p < overrunParts/2 {
			firstHalf += answers
		} else {
			secondHalf += answers
		}
		grew := float64(to.inFlight - from.inFlight)
		if grew < minOverrunGrowth || grew < overrunShare*float64(answers) {
			return overrun{}, false
		}
	}
	if n < minFellAnswers || float64(secondHalf) > overrunRise*float64(firstHalf) {
		return overrun{}, false
	}
	o := overrun{throughput: float64(n) / last[len(last)-1].at.Sub(last[0].at).Seconds(), service: time.Duration(ns / n)}
	for _, s := range w.samples {
		if s.least > 0 && (o.least == 0 || s.least < o.least) {
			o.least = s.least
		}
	}
	return o, o.least > 0
}

// meter is what a measure saw: answers, their service time, and the
// state's samples.
type meter struct {
	start             time.Time
	elapsed           time.Duration
	n, ns             int64
	samples           int64
	inFlight, waiting int64 // sums over the samples
	first, last       State
}

// throughput is answers a second by Little's law, the requests held on
// average over their mean service time: counting answers over the measure
// instead is off by a whole batch where a pool answers in step (200 every
// 200 ms), and a measure of a few service times holds only a few batches.
func (m meter) throughput() float64 {
	if s := m.service(); s > 0 && m.samples > 0 {
		return m.load() / s.Seconds()
	}
	if m.elapsed <= 0 {
		return 0
	}
	return float64(m.n) / m.elapsed.Seconds()
}

// counted is answers a second, counted: unbiased where Little's law is
// not, while the requests held grow (open arrivals above capacity): the
// answers then waited behind fewer than are held at the end, and the
// requests held over their mean service time read high, as high as the
// arrivals themselves.
func (m meter) counted() float64 {
	if m.elapsed <= 0 {
		return 0
	}
	return float64(m.n) / m.elapsed.Seconds()
}

// growing reports whether the requests held grew through the measure by
// more than its noise.
func (m meter) growing() bool {
	return m.samples > 1 && float64(m.last.InFlight) > growth*float64(m.first.InFlight)
}

// growth is how much the requests held must grow through a measure to be
// growing.
const growth = 1.1

func (m meter) service() time.Duration {
	if m.n == 0 {
		return 0
	}
	return time.Duration(m.ns / m.n)
}

func (m meter) load() float64 {
	if m.samples == 0 {
		return 0
	}
	return float64(m.inFlight) / float64(m.samples)
}

// measure reads answers and state from now until done says it has enough,
// or for at most limit; it fails when ctx ends or the probe runs past
// deadline.
func (c *Controller) measure(ctx context.Context, deadline time.Time, limit time.Duration, done func(*meter) bool) (meter, error) {
	c.n.Swap(0)
	c.ns.Swap(0)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	m := meter{start: time.Now()}
	for {
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case now := <-t.C:
			m.elapsed = now.Sub(m.start)
			m.n += c.n.Swap(0)
			m.ns += c.ns.Swap(0)
			m.last = c.cfg.State()
			if m.samples == 0 {
				m.first = m.last
			}
			m.samples++
			m.inFlight += m.last.InFlight
			m.waiting += m.last.Queued
			if done(&m) {
				return m, nil
			}
			if m.elapsed >= limit || now.After(deadline) {
				return m, errGone
			}
		}
	}
}

// probe runs one probe and returns its report; the cap is lifted however
// it ends. from is the overrun that began it, nil for none.
func (c *Controller) probe(ctx context.Context, from *overrun) (r Report) {
	r.Start = time.Now()
	r.Result = Inconclusive
	deadline := r.Start.Add(maxProbe)

	var capAt int
	if from != nil {
		// An overrun is its own measure before: a count of what is served
		// (Little's law reads the arrivals while the queue inside grows),
		// and every second more of it adds to that queue. The first cap
		// is near the knee, not half of what is held, which has grown
		// past it by the second.
		r.Overrun = true
		r.Load, r.Throughput, r.Service = from.load, from.throughput, from.service
		capAt = min(int(overrunCap*r.Throughput*from.least.Seconds()), int(r.Load/2))
		capAt = max(capAt, 1)
	} else {
		// Before: what the upstream serves at the load it has.
		before, err := c.measure(ctx, deadline, maxMeasureFloor*2, func(m *meter) bool {
			return m.n >= minAnswers && m.elapsed >= max(minMeasure, 2*m.service())
		})
		r.End = time.Now()
		if err != nil {
			r.Detail = fmt.Sprintf("too few answers to measure: %d in %s", before.n, before.elapsed.Round(time.Millisecond))
			return r
		}
		r.Load, r.Throughput, r.Service = before.load(), before.throughput(), before.service()
		if before.growing() {
			// Open arrivals above what is served: the queue inside grows,
			// and only a count reads what is served. Its answers come in
			// many batches there (each a service time apart, the queue
			// many deep), so a batch more or less is noise.
			r.Throughput = before.counted()
		}
		capAt = int(r.Load / 2)
		if capAt < 1 {
			r.Detail = fmt.Sprintf("%.1f in flight: too few to admit fewer", r.Load)
			return r
		}
	}

	c.active.Store(true)
	if c.cfg.Probing != nil {
		c.cfg.Probing(true)
	}
	defer func() {
		c.cfg.Cap(0)
		if c.cfg.Probing != nil {
			c.cfg.Probing(false)
		}
		c.active.Store(false)
		r.End = time.Now()
	}()
	for {
		// The step after an overrun's first far below the knee is there to
		// be measured whole (see below).
		whole := r.Overrun && len(r.Steps) == 1
		step, err := c.step(ctx, deadline, capAt, r.Service, r.Throughput, whole)
		if err != nil {
			r.Detail = fmt.Sprintf("stopped at a cap of %d: %v", capAt, err)
			if errors.Is(err, errGone) {
				r.Detail = fmt.Sprintf("stopped at a cap of %d: the load went away, or the upstream answered too little to measure", capAt)
			}
			if r.Overrun && ctx.Err() == nil {
				// Overrun above the caps that held, and perhaps at this
				// one: a limit stays, and learns from there.
				r.Fallback = capAt
				if len(r.Steps) > 0 {
					r.Fallback = r.Steps[len(r.Steps)-1].Cap
				}
				r.Detail += fmt.Sprintf("; admission was overrun, and stays limited at %d", r.Fallback)
				if c.cfg.Found != nil {
					c.cfg.Found(r)
				}
			}
			return r
		}
		step.Held = step.Throughput >= (1-HoldLoss)*r.Throughput
		r.Steps = append(r.Steps, step)
		if next := int(overrunCap * r.Throughput * step.Service.Seconds()); r.Overrun && len(r.Steps) == 1 &&
			step.Throughput < farBelow*r.Throughput && next > capAt {
			// An overrun's first cap far below the knee (service times
			// spread, the least of them far under their mean) served a
			// few answers, cut short: their mean is a few dozen draws,
			// the quick ones first. A step just below the knee its figure
			// gives measures the unloaded speed on many more.
			if c.cfg.End != nil {
				c.cfg.End(step.Load, false)
			}
			capAt = next
			continue
		}
		if step.Held && capAt > 1 {
			// Served as many with fewer inside: the rest were queueing.
			// Half again.
			if c.cfg.End != nil {
				c.cfg.End(step.Load, false)
			}
			capAt /= 2
			continue
		}
		// Below the knee (or a cap of 1 that held: it serves one at once,
		// at its unloaded speed): this step's speed is the unloaded one.
		if c.cfg.End != nil {
			c.cfg.End(step.Load, true)
		}
		r.Capacity = r.Throughput * step.Service.Seconds()
		if step.Held {
			r.Capacity = 1
		}
		r.Result = Queueing
		r.Detail = fmt.Sprintf("it served %.0f/s with %.0f in flight, and %.0f/s with %d: it serves %.1f at once, in %s each, and queued the rest inside",
			r.Throughput, r.Load, step.Throughput, step.Cap, r.Capacity, step.Service.Round(time.Millisecond))
		if len(r.Steps) == 1 && r.Capacity >= r.Load/1.25 {
			r.Result = NotQueueing
			r.Detail = fmt.Sprintf("it served %.0f/s with %.0f in flight, and %.0f/s with %d, in %s each as before: it was serving all it held",
				r.Throughput, r.Load, step.Throughput, step.Cap, step.Service.Round(time.Millisecond))
		}
		if r.Result == Queueing && c.cfg.Found != nil {
			c.cfg.Found(r)
		}
		return r
	}
}

// step caps admission at capAt, waits until every request inside was
// admitted under the cap, and measures what the upstream serves then.
// service and before are the mean service time and the throughput before
// the probe: the first bounds the waits, and a step that serves plainly
// less than the second is cut short, unless whole.
func (c *Controller) step(ctx context.Context, deadline time.Time, capAt int, service time.Duration, before float64, whole bool) (Step, error) {
	c.cfg.Cap(capAt)
	bound := max(maxMeasureFloor, maxMeasure*service)
	// The requests above the cap finish...
	if _, err := c.measure(ctx, deadline, bound, func(m *meter) bool { return m.last.InFlight <= int64(capAt) }); err != nil {
		return Step{}, err
	}
	// ...then each permit turns over once: every request inside was
	// admitted under the cap, and waited for none of those before it.
	turned, err := c.measure(ctx, deadline, bound, func(m *meter) bool { return m.n >= int64(capAt) })
	if err != nil {
		return Step{}, err
	}
	if turned.waiting == 0 {
		// Nothing waited for the cap: the load fell below it, and the
		// step would measure the load, not the upstream.
		return Step{}, errGone
	}
	if c.cfg.Begin != nil {
		c.cfg.Begin()
	}
	// Measured long enough to tell a step that held from one that lost a
	// tenth; but one that plainly fell is below the knee, and every
	// moment more of it delays half the requests: it stops at once.
	m, err := c.measure(ctx, deadline, bound, func(m *meter) bool {
		switch {
		case !whole && m.n >= minFellAnswers && m.throughput() < (1-Fell)*before:
			return true
		case m.n < minAnswers:
			return false
		}
		return m.elapsed >= max(minMeasure, measureTurns*m.service())
	})
	if err != nil {
		if c.cfg.End != nil {
			c.cfg.End(0, false)
		}
		return Step{}, err
	}
	return Step{Cap: capAt, Load: m.load(), Throughput: m.throughput(), Service: m.service()}, nil
}
