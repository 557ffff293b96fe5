// Package predict is the model the advice predicts with: what an
// admission setting (a fixed pool and its queue, a bulkhead, adaptive
// admission) would do to a measured demand, closed (clients that wait for
// their answers) or open (arrivals whatever the latency), route by route,
// each route's service times as they were measured. It is a simulation of
// the requests, not a formula: queues, pools inside the upstream that
// routes share, rejections and the course of an overload that has no
// steady state.
package predict

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Setting is one admission configuration the advice predicts.
type Setting struct {
	// Name says which alternative it is: "in force", "recommended", the
	// alternative mode's name (otherMode), "memory budget", or in a dry run
	// "dry run", the mode it counts for.
	Name string
	// Fixed is fixed mode; otherwise unbounded. Adaptive is adaptive mode,
	// simulated at its limit (Fixed), or with admission open.
	Fixed, Adaptive bool
	// Limit is WORKERS or BULKHEAD; 0 for none.
	Limit int
	// QueueSize bounds fixed mode's queue; 0 for none. Unbounded mode's
	// bulkhead queue is bounded by Wait alone.
	QueueSize int
	// Wait is QUEUE_TIMEOUT or BULKHEAD_WAIT.
	Wait time.Duration
}

// Prediction is what a Setting would do to the measured demand.
type Prediction struct {
	Setting
	// Throughput is answers per second.
	Throughput float64
	// P50 and P99 are clients' latency: queue wait, the upstream's own
	// queue, service.
	P50, P99 time.Duration
	// MeanQueue is the mean wait in loomgate's queue of admitted requests.
	MeanQueue time.Duration
	// Rejected is rejections per second.
	Rejected float64
	// InFlight is requests at the upstream, time-averaged; Queued those in
	// loomgate's queue.
	InFlight, Queued float64
	// Open is set when the prediction is for open demand: then the figures
	// are those of the first Span from an empty queue, QueueGrowth is
	// how many more requests wait each second (loomgate's queue and the
	// upstream's), and FullAfter when the queue's bound or timeout first
	// rejected, 0 if it did not within the Span.
	Open        bool
	Span        time.Duration
	QueueGrowth float64
	FullAfter   time.Duration
	// Course is how an open overload unfolds under the setting, nil when
	// the arrivals do not exceed what it serves: a wait that keeps growing
	// has no steady p50, only one for each moment of the overload.
	Course *Course
	// Beyond is set when the setting would put more requests at the
	// upstream than it was seen to serve at once (Demand.Seen), the
	// capacity being unknown: the figures assume it serves no more, a
	// floor for throughput and a ceiling for latency, not a forecast.
	Beyond bool
	// InFlightBytes is what loomgate reserves for them (its
	// loomgate_in_flight_bytes); UpstreamBytes what the upstream holds
	// for its in-flight requests, 0 unless its memory per request is known.
	InFlightBytes, UpstreamBytes float64
	// Other is the other end of what the setting may do, when that
	// depends on a capacity never seen: then the figures above are what
	// it does if the upstream serves no more than was seen (Beyond), or
	// if its service time stays what it is now, and Other what it does if
	// it serves all it is given at the speed seen, or if the speed now is
	// a queue inside that the setting would empty. Nil when the
	// prediction is one figure.
	Other *Outcome
}

// Course is an open overload under one setting, from an empty queue:
// the arrivals above what it serves wait, more each second, until the
// queue's timeout or bound turns the excess away.
type Course struct {
	// Excess is how much the arrivals exceed what the setting serves, a
	// share of it (0.2: a fifth more), and Growth how many more requests
	// wait each second.
	Excess, Growth float64
	// Points are the waits of the requests that arrive around given times
	// into the overload.
	Points []CoursePoint
	// FullAfter is when waits reach the queue's timeout or it reaches its
	// bound, and Rejected the share of arrivals turned away from then on;
	// 0 and 0 when neither bounds it (the wait grows until
	// UPSTREAM_TIMEOUT), and FullAfter 0 with Rejected above 0 when the
	// excess is turned away at once (a bulkhead that fails fast).
	FullAfter time.Duration
	Rejected  float64
	// Bounded is set when the queue's bound, not its timeout, is reached
	// first.
	Bounded bool
}

// CoursePoint is the requests that arrive in the CourseWindow before At:
// their median wait for admission (loomgate's queue, or the upstream's
// own where nothing limits it) and their median latency, and the share
// of them rejected.
type CoursePoint struct {
	At            time.Duration
	Wait, Latency time.Duration
	Rejected      float64
}

// CourseAt are the moments a course is told at, and CourseWindow the
// arrivals each one is of: 20 s and a minute into an overload, as an
// alert's for and a person's patience measure it.
var CourseAt = []time.Duration{20 * time.Second, time.Minute}

const CourseWindow = 5 * time.Second

// course is the course of open arrivals at rate under s, which serves
// served a second, with a median service time of service, when they
// exceed it. The backlog grows at their difference, and a request waits
// for the backlog ahead of it to be served, FIFO: what the simulation
// shows for the first minute, told for any moment.
func course(s Setting, rate, served float64, service time.Duration) *Course {
	if !(served > 0) || rate <= served*(1+courseNoise) {
		return nil
	}
	g := rate - served
	c := &Course{Excess: rate/served - 1, Growth: g}
	full := math.Inf(1)
	switch {
	case s.Limit > 0 && (s.Wait <= 0 || s.Fixed && s.QueueSize <= 0):
		// The excess is turned away at once: nothing waits.
		c.Rejected, full = g/rate, 0
	case s.Limit > 0:
		full = s.Wait.Seconds() * served / g
		if s.Fixed && s.QueueSize > 0 && float64(s.QueueSize)/g < full {
			full, c.Bounded = float64(s.QueueSize)/g, true
		}
		c.Rejected = g / rate
		c.FullAfter = secs(full)
	}
	for _, at := range CourseAt {
		t := (at - CourseWindow/2).Seconds()
		wait := g * min(t, full) / served
		pt := CoursePoint{At: at, Wait: secs(wait), Latency: secs(wait) + service}
		if t >= full {
			pt.Rejected = c.Rejected
		}
		c.Points = append(c.Points, pt)
	}
	return c
}

// courseNoise is how far the arrivals must exceed what is served for an
// overload: within it, the simulation's own figures differ as much.
const courseNoise = 0.02

// Outcome is one end of a predicted range.
type Outcome struct {
	Throughput float64
	P50, P99   time.Duration
}

// Demand is the load a prediction is made for.
type Demand struct {
	// Routes are the demand by route class. The model is a closed loop,
	// like the published experiments: each client sends its next request
	// when its answer arrives; a rejected one comes back after a mean
	// service time.
	Routes []RouteDemand
	// Capacity is the upstream's, shared by every route: its hidden
	// pool, cores or lock, which queues what exceeds it. 0 or NaN: none.
	Capacity float64
	// Open is set when requests arrive at each route's Rate whatever the
	// latency, rather than from Clients that wait for their answers. An
	// open stream above what a setting serves fills its queue at the
	// difference until the queue's bound or timeout rejects it.
	Open bool
	// Seen is the most the upstream was seen serving at once. Where the
	// Capacity is unknown and no route has one of its own, the simulation
	// serves no more than Seen at once: beyond it nothing was measured,
	// and a throughput never seen is no prediction. 0: no such bound.
	Seen float64
	// Unjudged is set when whether the upstream queues inside is unknown:
	// its service times now may be a queue inside it, which a limit below
	// what it holds would empty. A setting below Seen then has a range.
	Unjudged bool
	// OverheadBytes is what loomgate reserves per request it holds, and
	// BytesPerRequest the upstream's memory per request in flight (0 when
	// unknown).
	OverheadBytes, BytesPerRequest float64
}

// RouteDemand is one route's part of the demand.
type RouteDemand struct {
	// Clients is the concurrency its clients keep outstanding: its share
	// of in flight plus queued, time-averaged.
	Clients int
	// Service is its unloaded service time distribution.
	Service []Sample
	// Capacity is a bottleneck behind this route alone (its pool), 0 or
	// NaN for none.
	Capacity float64
	// Rate is its requests a second when the demand is Open.
	Rate float64
}

// seenBound is the concurrency the simulation caps the upstream at for
// want of a capacity, 0 for none: Seen, when no capacity is known at all.
func (d Demand) seenBound() int {
	if isKnown(d.Capacity) && d.Capacity > 0 || !isKnown(d.Seen) || d.Seen <= 0 {
		return 0
	}
	for _, r := range d.Routes {
		if isKnown(r.Capacity) && r.Capacity > 0 {
			return 0
		}
	}
	return max(1, int(math.Round(d.Seen)))
}

// rate is the open demand's total, requests a second.
func (d Demand) rate() float64 {
	x := 0.0
	for _, r := range d.Routes {
		if len(r.Service) > 0 {
			x += r.Rate
		}
	}
	return x
}

// openHorizon is how long a prediction of open demand simulates, from
// empty: a minute, as the figures cover, or less above 500 requests a
// second, so that a prediction costs no more than 30 000 requests.
func openHorizon(rate float64) float64 {
	return min(Horizon.Seconds(), 3*predictCompletions/rate)
}

// Horizon is the longest a prediction of open demand simulates: the
// minute the advice's figures cover (advice.Window), what its predictions
// tell of ("in its first 60 s").
const Horizon = time.Minute

// isKnown reports whether x is a figure, not NaN (unknown) or infinite.
func isKnown(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// medianService is the median of the routes' service times, weighed by
// their rates: a request's own time, once its wait is over.
func (d Demand) medianService() time.Duration {
	var all []Sample
	total := 0.0
	for _, r := range d.Routes {
		w := 0.0
		for _, x := range r.Service {
			w += x.Weight
		}
		for _, x := range r.Service {
			if w > 0 {
				all = append(all, Sample{Service: x.Service, Weight: x.Weight / w * r.Rate})
				total += x.Weight / w * r.Rate
			}
		}
	}
	slices.SortFunc(all, func(a, b Sample) int { return cmp.Compare(a.Service, b.Service) })
	acc := 0.0
	for _, x := range all {
		if acc += x.Weight; acc >= total/2 {
			return x.Service
		}
	}
	return 0
}

// clients is the demand's total.
func (d Demand) clients() int {
	n := 0
	for _, r := range d.Routes {
		n += r.Clients
	}
	return n
}

// predictCompletions is how many answers a prediction simulates: a p99 of
// 10000 has 100 answers above it, and four predictions take milliseconds.
const predictCompletions = 10000

// Predict simulates s under d: a discrete-event simulation of the clients
// (or, for open demand, of arrivals at their rate from an empty queue),
// loomgate's admission and the upstream's own capacity, with service times
// drawn from the measured unloaded distribution. A simulation rather than
// a formula: the formulas give means, and a p99 of widely spread service
// times behind a queue needs the distribution. It is deterministic: the
// same figures give the same prediction.
func Predict(s Setting, d Demand) Prediction {
	p := Prediction{Setting: s}
	if !d.Open && d.clients() <= 0 || d.Open && d.rate() <= 0 {
		return p
	}
	p = simulate(s, d)
	if d.Open {
		p.Course = course(s, d.rate(), p.Throughput, d.medianService())
	}
	bound := d.seenBound()
	if bound > 0 {
		most := d.clients()
		if d.Open {
			most = int(math.Ceil(p.InFlight))
		}
		if s.Limit > 0 {
			most = min(most, s.Limit)
		}
		p.Beyond = most > bound
	}
	switch {
	case p.Beyond:
		// The other end: the upstream serves all it is given, as fast as
		// it served what was seen.
		open := d
		open.Seen = 0
		p.Other = outcomeOf(simulate(s, open))
	case d.Unjudged && bound > 0 && s.Limit > 0 && s.Limit < bound:
		// The other end: what the upstream held was a queue inside it,
		// every request waiting as long for the same throughput, so a
		// limit below it leaves the throughput and shortens the service
		// time in proportion.
		q := d
		q.Seen = 0
		q.Routes = slices.Clone(d.Routes)
		scale := float64(s.Limit) / float64(bound)
		for i := range q.Routes {
			q.Routes[i].Service = slices.Clone(q.Routes[i].Service)
			for j := range q.Routes[i].Service {
				q.Routes[i].Service[j].Service = time.Duration(scale * float64(q.Routes[i].Service[j].Service))
			}
		}
		p.Other = outcomeOf(simulate(s, q))
	}
	return p
}

func simulate(s Setting, d Demand) Prediction {
	sim := newSimulation(s, d)
	sim.run()
	return sim.prediction()
}

// outcomeOf is p's end of a range, nil when it says nothing more.
func outcomeOf(p Prediction) *Outcome {
	if p.Throughput == 0 {
		return nil
	}
	return &Outcome{Throughput: p.Throughput, P50: p.P50, P99: p.P99}
}

type request struct {
	client   int
	route    int
	arrived  float64 // seconds
	admitted float64
}

// pool is a bottleneck inside the upstream: at most cap served at once,
// the rest waiting FIFO.
type pool struct {
	cap, busy int
	queue     []request
}

type simulation struct {
	s   Setting
	d   Demand
	rng *rand.Rand
	// cum are the cumulative weights of each route's Service.
	cum  [][]float64
	mean float64 // of every route's service times, weighted by clients

	now         float64
	arrivals    eventHeap // clients' next requests
	completions eventHeap // the upstream's answers in service
	admitted    int
	admitQ      []request // loomgate's FIFO queue
	limit       int
	// pools are the upstream's bottlenecks: one shared by every route when
	// the upstream has a capacity, else one per route (unbounded where the
	// route has none).
	pools  []pool
	shared bool

	// open: arrivals at each route's Rate until horizon, measured from
	// the start; firstReject is when the first was refused, -1 before.
	open             bool
	horizon          float64
	firstReject      float64
	waitingAtHorizon int

	// Measured after the warm-up.
	warm, done                     int
	start                          float64
	latency                        []float64
	queueSum                       float64
	rejected                       int
	areaInFlight, areaQueued, last float64
}

func newSimulation(s Setting, d Demand) *simulation {
	sim := &simulation{s: s, d: d, rng: rand.New(rand.NewPCG(1, 2)), limit: math.MaxInt}
	clients := 0
	for _, r := range d.Routes {
		total, mean := 0.0, 0.0
		var cum []float64
		for _, w := range r.Service {
			total += w.Weight
			cum = append(cum, total)
			mean += w.Service.Seconds() * w.Weight
		}
		sim.cum = append(sim.cum, cum)
		if total > 0 {
			sim.mean += mean / total * float64(r.Clients)
			clients += r.Clients
		}
	}
	if clients > 0 {
		sim.mean /= float64(clients)
	}
	if s.Limit > 0 {
		sim.limit = s.Limit
	}
	capOf := func(c float64) int {
		if isKnown(c) && c > 0 {
			return max(1, int(math.Round(c)))
		}
		return math.MaxInt
	}
	if isKnown(d.Capacity) && d.Capacity > 0 {
		sim.shared = true
		sim.pools = []pool{{cap: capOf(d.Capacity)}}
	} else if bound := d.seenBound(); bound > 0 {
		sim.shared = true
		sim.pools = []pool{{cap: bound}}
	} else {
		for _, r := range d.Routes {
			sim.pools = append(sim.pools, pool{cap: capOf(r.Capacity)})
		}
	}
	sim.firstReject = -1
	if d.Open {
		sim.open, sim.horizon = true, openHorizon(d.rate())
		for route, r := range d.Routes {
			if len(r.Service) > 0 && r.Rate > 0 {
				sim.arrivals.push(event{at: sim.rng.ExpFloat64() / r.Rate, req: request{client: -1, route: route}})
			}
		}
		return sim
	}
	sim.warm = predictCompletions / 5
	n, c := d.clients(), 0
	for route, r := range d.Routes {
		if len(r.Service) == 0 {
			continue
		}
		for range r.Clients {
			// Arrivals spread over a millisecond, as clients do not start
			// in the same instant.
			sim.arrivals.push(event{at: float64(c) * 1e-3 / float64(n), req: request{client: c, route: route}})
			c++
		}
	}
	return sim
}

func (sim *simulation) pool(r request) *pool {
	if sim.shared {
		return &sim.pools[0]
	}
	return &sim.pools[r.route]
}

func (sim *simulation) draw(route int) float64 {
	cum, service := sim.cum[route], sim.d.Routes[route].Service
	x := sim.rng.Float64() * cum[len(cum)-1]
	i, _ := slices.BinarySearch(cum, x)
	return service[min(i, len(service)-1)].Service.Seconds()
}

// advance moves the clock to t, accumulating the time averages.
func (sim *simulation) advance(t float64) {
	if sim.done >= sim.warm {
		dt := t - sim.last
		sim.areaInFlight += dt * float64(sim.admitted)
		sim.areaQueued += dt * float64(len(sim.admitQ))
	}
	sim.now, sim.last = t, t
}

func (sim *simulation) run() {
	for sim.open || sim.done < sim.warm+predictCompletions {
		next, kind := math.Inf(1), 0
		if len(sim.arrivals) > 0 {
			next, kind = sim.arrivals[0].at, 1
		}
		if len(sim.completions) > 0 && sim.completions[0].at < next {
			next, kind = sim.completions[0].at, 2
		}
		if len(sim.admitQ) > 0 {
			if dl := sim.admitQ[0].arrived + sim.s.Wait.Seconds(); dl < next {
				next, kind = dl, 3
			}
		}
		if sim.open && next > sim.horizon {
			sim.advance(sim.horizon)
			sim.waitingAtHorizon = len(sim.admitQ)
			for _, p := range sim.pools {
				sim.waitingAtHorizon += len(p.queue)
			}
			return
		}
		if kind == 0 {
			return
		}
		sim.advance(next)
		switch kind {
		case 1:
			e := sim.arrivals.pop()
			sim.arrive(request{client: e.req.client, route: e.req.route, arrived: sim.now})
			if sim.open {
				sim.arrivals.push(event{at: sim.now + sim.rng.ExpFloat64()/sim.d.Routes[e.req.route].Rate, req: e.req})
			}
		case 2:
			e := sim.completions.pop()
			sim.complete(e.req)
		case 3:
			r := sim.admitQ[0]
			sim.admitQ = sim.admitQ[1:]
			sim.reject(r)
		}
	}
}

func (sim *simulation) arrive(r request) {
	switch {
	case sim.admitted < sim.limit:
		sim.admit(r)
	case sim.s.Wait > 0 && (!sim.s.Fixed || len(sim.admitQ) < sim.s.QueueSize):
		sim.admitQ = append(sim.admitQ, r)
	default:
		sim.reject(r)
	}
}

func (sim *simulation) admit(r request) {
	sim.admitted++
	r.admitted = sim.now
	if p := sim.pool(r); p.busy < p.cap {
		sim.serve(p, r)
		return
	} else {
		p.queue = append(p.queue, r)
	}
}

func (sim *simulation) serve(p *pool, r request) {
	p.busy++
	sim.completions.push(event{at: sim.now + sim.draw(r.route), req: r})
}

func (sim *simulation) complete(r request) {
	p := sim.pool(r)
	p.busy--
	sim.admitted--
	if sim.done == sim.warm && !sim.open {
		sim.start = sim.now
	}
	if sim.done >= sim.warm {
		sim.latency = append(sim.latency, sim.now-r.arrived)
		sim.queueSum += r.admitted - r.arrived
	}
	sim.done++
	if len(p.queue) > 0 {
		next := p.queue[0]
		p.queue = p.queue[1:]
		sim.serve(p, next)
	}
	if len(sim.admitQ) > 0 {
		next := sim.admitQ[0]
		sim.admitQ = sim.admitQ[1:]
		sim.admit(next)
	}
	if !sim.open {
		sim.arrivals.push(event{at: sim.now, req: request{client: r.client, route: r.route}})
	}
}

func (sim *simulation) reject(r request) {
	if sim.done >= sim.warm {
		sim.rejected++
	}
	if sim.open {
		// An open stream's next request comes at its own rate.
		if sim.firstReject < 0 {
			sim.firstReject = sim.now
		}
		return
	}
	sim.arrivals.push(event{at: sim.now + sim.mean, req: request{client: r.client, route: r.route}})
}

func (sim *simulation) prediction() Prediction {
	p := Prediction{Setting: sim.s}
	elapsed := sim.now - sim.start
	if elapsed <= 0 || len(sim.latency) == 0 {
		return p
	}
	p.Throughput = float64(len(sim.latency)) / elapsed
	p.Rejected = float64(sim.rejected) / elapsed
	p.MeanQueue = secs(sim.queueSum / float64(len(sim.latency)))
	slices.Sort(sim.latency)
	p.P50 = secs(sim.latency[len(sim.latency)/2])
	p.P99 = secs(sim.latency[len(sim.latency)*99/100])
	p.InFlight = sim.areaInFlight / elapsed
	p.Queued = sim.areaQueued / elapsed
	p.InFlightBytes = (p.InFlight + p.Queued) * sim.d.OverheadBytes
	p.UpstreamBytes = p.InFlight * sim.d.BytesPerRequest
	if sim.open {
		p.Open, p.Span = true, secs(sim.horizon)
		p.QueueGrowth = float64(sim.waitingAtHorizon) / elapsed
		if sim.firstReject >= 0 {
			p.FullAfter = secs(sim.firstReject)
		}
	}
	return p
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

type event struct {
	at  float64
	req request
}

// eventHeap is a binary min-heap of events by time, typed rather than
// container/heap's, which boxes every event it is given.
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if q[parent].at <= q[i].at {
			break
		}
		q[parent], q[i] = q[i], q[parent]
		i = parent
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && q[l].at < q[small].at {
			small = l
		}
		if r < len(q) && q[r].at < q[small].at {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// Sample is a service time and how often it occurs.
type Sample struct {
	Service time.Duration
	Weight  float64
}

// Describe writes the setting the way the variables set it.
func (s Setting) Describe() string {
	switch {
	case s.Adaptive && s.Limit > 0:
		return fmt.Sprintf("MODE=adaptive, limit %d, QUEUE_SIZE=%d, QUEUE_TIMEOUT=%s", s.Limit, s.QueueSize, s.Wait)
	case s.Adaptive:
		return "MODE=adaptive, admission open"
	case s.Fixed && s.QueueSize > 0:
		return fmt.Sprintf("MODE=fixed, WORKERS=%d, QUEUE_SIZE=%d, QUEUE_TIMEOUT=%s", s.Limit, s.QueueSize, s.Wait)
	case s.Fixed:
		return fmt.Sprintf("MODE=fixed, WORKERS=%d, no queue", s.Limit)
	case s.Limit > 0 && s.Wait > 0:
		return fmt.Sprintf("MODE=unbounded, BULKHEAD=%d, BULKHEAD_WAIT=%s", s.Limit, s.Wait)
	case s.Limit > 0:
		return fmt.Sprintf("MODE=unbounded, BULKHEAD=%d", s.Limit)
	}
	return "MODE=unbounded, no bulkhead"
}
