package adaptivematrix

import (
	"time"

	"github.com/loomgate/loomgate/lab/bench"
)

// Case is one case of the matrix: a stub, load in phases, and the truth
// of each phase, which every arm's limit is judged against.
type Case struct {
	Name        string
	Description string
	// Pool is the stub's hidden pool at the start; 0 for none.
	Pool   int
	Phases []Phase
	// QueueTimeout, if set, bounds every limited arm's queue wait: with
	// open arrivals above capacity a queue without it only grows.
	QueueTimeout time.Duration
	// Oracle is the true capacity the oracle arm is fixed at; 0 when no
	// limit is right (nothing saturates), where the oracle is the
	// unbounded arm. FollowPool makes the oracle set its limit to the
	// stub's pool as it changes.
	Oracle     int
	FollowPool bool
	// Within, if set, is how soon every phase's limit must stand right,
	// in place of ConvergeWithin; P99Margin, how far above the oracle's
	// adaptive's p99 may be, in place of P99Noise: a case that starts at
	// its peak pays for finding the knee in its slowest answers.
	Within    time.Duration
	P99Margin float64
}

// caseNamed is the matrix's case of that name.
func caseNamed(name string) (Case, bool) {
	for _, c := range Cases() {
		if c.Name == name {
			return c, true
		}
	}
	return Case{}, false
}

// Phase is a time of steady load and of one truth.
type Phase struct {
	Duration time.Duration
	// Pool, if set, resizes the stub's pool as the phase starts.
	Pool int
	// Flows are closed-loop clients; Rate and Path, open arrivals.
	Flows []bench.Flow
	Rate  float64
	Path  string
	Truth Truth
}

// Truth is what a right limit is during a phase.
type Truth struct {
	// Capacity is the concurrency the upstream sustains, and Lo to Hi the
	// range a limit converged on it stands in (15% either side, unless
	// the case says otherwise). Capacity 0: nothing saturates, and a
	// right limit is none, or one at least the demand, Demand.
	Capacity, Lo, Hi float64
	Demand           float64
}

// within reports whether limit (0: none) is right for t.
func (t Truth) within(limit float64) bool {
	if t.Capacity == 0 {
		return limit == 0 || limit >= t.Demand
	}
	// The band's edges are products of floats: 100 × 1.15 is
	// 114.99999999999999, and a limit of exactly 115 stands within it.
	const edge = 1e-9
	return limit >= t.Lo-edge && limit <= t.Hi+edge
}

// floor is the limit below which an arm has collapsed: half of what the
// phase needs (its capacity, or with nothing saturated its demand).
func (t Truth) floor() float64 {
	if t.Capacity == 0 {
		return t.Demand / 2
	}
	return t.Capacity / 2
}

// ConvergeMargin is how near the truth a converged limit stands.
const ConvergeMargin = 0.15

func pool(n float64) Truth {
	return Truth{Capacity: n, Lo: n * (1 - ConvergeMargin), Hi: n * (1 + ConvergeMargin)}
}

func healthy(demand float64) Truth { return Truth{Demand: demand} }

// Cases returns the matrix. Service times are 100 ms unless a case says
// otherwise: the stub's pool of 50 then serves 500 requests a second,
// which the rig, the sidecar and the stub sustain on two shared cores.
//
// Most cases whose upstream saturates begin with LeadIn of light load, as
// a new replica's traffic ramps up behind its readiness probe and a load
// balancer's slow start. The peak cases begin at full load, as a sidecar
// added beside a service already slow does: there only the probe shows
// that the service time is a queue inside, and the limit must stand
// right within 30 s of the first request.
func Cases() []Case {
	s := time.Second
	wait := "/wait?ms=100"
	lead := func(path string, clients int) Phase {
		return Phase{Duration: LeadIn, Flows: []bench.Flow{{Path: path, Clients: clients}}, Truth: healthy(float64(clients))}
	}
	return []Case{
		{
			Name: "pool", Description: "a hidden pool of 50 at 100 ms: 10 clients, then 200",
			Pool: 50, Oracle: 50,
			Phases: []Phase{lead(wait, 10), {Duration: 25 * s, Flows: []bench.Flow{{Path: wait, Clients: 200}}, Truth: pool(50)}},
		},
		{
			Name: "pool-change", Description: "a hidden pool of 50, grown to 100, shrunk to 30, at 100 ms: 10 clients, then 200",
			Pool: 50, Oracle: 50, FollowPool: true,
			Phases: []Phase{
				lead(wait, 10),
				{Duration: 45 * s, Flows: []bench.Flow{{Path: wait, Clients: 200}}, Truth: pool(50)},
				{Duration: 45 * s, Pool: 100, Flows: []bench.Flow{{Path: wait, Clients: 200}}, Truth: pool(100)},
				{Duration: 45 * s, Pool: 30, Flows: []bench.Flow{{Path: wait, Clients: 200}}, Truth: pool(30)},
			},
		},
		{
			// A minute, as peak-healthy: it begins at full load, so the
			// probe runs its one step (half the answers for about three
			// service times), a few hundred requests, which over 15 s
			// were the p99 (129% of unbounded's; 103% before the probe).
			Name: "no-pool", Description: "nothing limits the upstream: 100 ms, 200 clients",
			Phases: []Phase{{Duration: 60 * s, Flows: []bench.Flow{{Path: wait, Clients: 200}}, Truth: healthy(200)}},
		},
		{
			Name: "slower", Description: "a dependency slows from 100 to 250 ms with no more load, nothing saturated: 100 clients",
			Phases: []Phase{
				{Duration: 10 * s, Flows: []bench.Flow{{Path: wait, Clients: 100}}, Truth: healthy(100)},
				{Duration: 20 * s, Flows: []bench.Flow{{Path: "/wait?ms=250", Clients: 100}}, Truth: healthy(100)},
			},
		},
		{
			Name: "spread", Description: "a hidden pool of 50 behind service times spread 20-200 ms: 10 clients, then 150",
			Pool: 50, Oracle: 50,
			Phases: []Phase{lead("/wait?ms=20&to=200", 10), {Duration: 20 * s, Flows: []bench.Flow{{Path: "/wait?ms=20&to=200", Clients: 150}}, Truth: pool(50)}},
		},
		{
			Name: "two-routes", Description: "a hidden pool of 50 shared by two routes, 20 ms /wait and 200 ms /mixed: 5 clients each, then 100 each",
			Pool: 50, Oracle: 50,
			// Two routes, as loomgate's route classes tell them apart (by
			// path, not query): requests of one route whose costs differ
			// ten-fold are one class, and weighed as one.
			Phases: []Phase{
				{Duration: LeadIn, Flows: []bench.Flow{{Path: "/wait?ms=20", Clients: 5}, {Path: "/mixed", Clients: 5}}, Truth: healthy(10)},
				{Duration: 20 * s, Flows: []bench.Flow{{Path: "/wait?ms=20", Clients: 100}, {Path: "/mixed", Clients: 100}}, Truth: pool(50)},
			},
		},
		{
			Name: "cpu", Description: "CPU work of about 1 ms a request: 1 client, then 32; the ceiling is the 2 cores, shared with the rig and the sidecar",
			Oracle: 2,
			// The cores are shared, and a request is not all CPU: the knee
			// lies from one core's worth to twice the cores (as in the
			// advice matrix).
			// Its light load is one client: two would already fill the two
			// cores that the rig and the sidecar share.
			Phases: []Phase{lead("/cpu?iters=300000", 1), {Duration: 15 * s, Flows: []bench.Flow{{Path: "/cpu?iters=300000", Clients: 32}}, Truth: Truth{Capacity: 2, Lo: 1, Hi: 4}}},
		},
		{
			Name: "peak", Description: "a hidden pool of 37 at 80 ms behind 300 clients from the first second",
			Pool: 37, Oracle: 37, Within: 30 * s, P99Margin: 0.5,
			Phases: []Phase{{Duration: 45 * s, Flows: []bench.Flow{{Path: "/wait?ms=80", Clients: 300}}, Truth: pool(37)}},
		},
		{
			// A minute: the probe's one step, half the answers for two
			// service times, is a few hundred requests, which over 30 s
			// are the p99 (1.9 times unbounded's), and over a minute not.
			Name: "peak-healthy", Description: "nothing limits the upstream, 650 ms, 300 clients from the first second",
			Within: 30 * s,
			Phases: []Phase{{Duration: 60 * s, Flows: []bench.Flow{{Path: "/wait?ms=650", Clients: 300}}, Truth: healthy(300)}},
		},
		{
			Name: "open", Description: "open arrivals at 1.5× capacity: 200 a second, then 750, at a hidden pool of 50 at 100 ms (500 a second); queue waits bounded at 1 s",
			Pool: 50, Oracle: 50, QueueTimeout: time.Second,
			Phases: []Phase{
				{Duration: LeadIn, Rate: 200, Path: wait, Truth: healthy(20)},
				{Duration: 20 * s, Rate: 750, Path: wait, Truth: pool(50)},
			},
		},
		{
			// A healthy upstream whose dependency slows step by step:
			// nothing saturates, and no limit, nor a trial below what it
			// serves, is right.
			Name: "rising", Description: "nothing limits the upstream, its latency rising 50, 100, 150, 200 ms: 40 clients",
			Phases: []Phase{
				{Duration: 15 * s, Flows: []bench.Flow{{Path: "/wait?ms=50", Clients: 40}}, Truth: healthy(40)},
				{Duration: 15 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 40}}, Truth: healthy(40)},
				{Duration: 15 * s, Flows: []bench.Flow{{Path: "/wait?ms=150", Clients: 40}}, Truth: healthy(40)},
				{Duration: 15 * s, Flows: []bench.Flow{{Path: "/wait?ms=200", Clients: 40}}, Truth: healthy(40)},
			},
		},
		{
			// Open arrivals do not slow down when answers do: from the
			// first second the upstream's own queue grows by 150 a second,
			// and every second without a limit adds half a second to the
			// wait of those behind it.
			Name: "open-peak", Description: "open arrivals at 1.5× capacity from the first second: 450 a second at a hidden pool of 30 at 100 ms (300 a second); queue waits bounded at 1 s",
			Pool: 30, Oracle: 30, QueueTimeout: time.Second, Within: 30 * s, P99Margin: 0.5,
			Phases: []Phase{{Duration: 45 * s, Rate: 450, Path: wait, Truth: pool(30)}},
		},
	}
}

// LeadIn is the light load a saturating case begins with.
const LeadIn = 10 * time.Second
