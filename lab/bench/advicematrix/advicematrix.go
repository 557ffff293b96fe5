// Package advicematrix is the advice matrix, `loomgate bench --scenario
// advice`: cases whose truth is known by construction, each played against
// a sidecar in front of the stub or a real server (Apache Tomcat's thread
// pool), the sidecar's advice read and judged against the truth, its
// recommendation applied and measured against what it predicted, and the
// applied sidecar's own advice read, which must keep it.
package advicematrix

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/tomcat"
	"github.com/loomgate/loomgate/lab/stub"
)

// Case is one case of the advice matrix: a stub and a sidecar, load
// that may change over time, and what is true of the upstream, which the
// sidecar's advice is judged against.
type Case struct {
	Name        string
	Description string
	Stub        stub.Config
	Sidecar     bench.Sidecar
	// Phases run one after the other; the advice is read at the end of
	// the last.
	Phases []Phase
	Truth  Truth
	// SharedCores marks a case whose clients compete for the cores with
	// the work itself: how many of them are in the sidecar, and how much
	// CPU the work gets, then depend on the setting, and what is predicted
	// for the clients seen is shown but not checked.
	SharedCores bool
	// Upstream, if set, starts the service behind the sidecar in place of
	// the stub, as bench.Arm.Upstream says: a real server.
	Upstream func(ctx context.Context, stubURL string) (url string, stop func(), err error)
	// Needs, if set, reports why the case cannot run on this machine (a
	// program not installed); Run then skips it with that note.
	Needs func() error
	// ApplyFromEmpty, if set, measures the applied setting from its
	// start, for this long, in place of Options' warm-up and window: open
	// arrivals beyond what is served have no steady state, and what the
	// advice predicts for them is the first minute from an empty queue.
	ApplyFromEmpty time.Duration
}

// Phase is a time of steady load: flows side by side.
type Phase struct {
	Duration time.Duration
	Flows    []bench.Flow
	// Rates are open arrivals beside the flows' clients: requests sent on
	// schedule whether or not the ones before were answered, as many
	// independent users send them.
	Rates []Rate
}

// Rate is open arrivals on one path.
type Rate struct {
	// Path is requested on the target's host, e.g. "/wait?ms=100".
	Path      string
	PerSecond float64
}

// Truth is what holds of a case's upstream, by its construction.
type Truth struct {
	// Saturated: the upstream queues inside for every route.
	Saturated bool
	// RouteLocal names the one route that alone queues inside.
	RouteLocal string
	// Capacity is the concurrency it sustains, with CapacityLo and
	// CapacityHi the range a right estimate falls in (15% either side,
	// unless the case says otherwise); 0 where the estimate must say
	// unknown or may say anything.
	Capacity, CapacityLo, CapacityHi float64
	// CapacityKnown: the upstream is not saturated now, but was; a known
	// capacity must then be in range.
	CapacityKnown bool
	// Shared, if set, are the routes that must be named as sharing the
	// bottleneck: one cap in front of them all, not one per route.
	Shared []string
	// Unknown: the upstream is only ever seen at one load and the probe is
	// off, so whether it is saturated cannot be told, and the advice must
	// say so: neither saturated nor not, no lower bound above Capacity
	// (when set), no limit recommended.
	Unknown bool
}

// Result is one case's outcome.
type Result struct {
	Case  Case
	Truth Truth

	// What the sidecar said. SaturationUnknown is why it could not tell
	// whether the upstream is saturated, empty when it could.
	Saturated         bool
	SaturationUnknown string
	RouteLocal        []string
	Shared            []string
	Capacity          *float64
	Unknown           string
	LowerBound        float64
	// InFlight is the requests the upstream held on average over the
	// window: the demand of open arrivals, which have no client count.
	InFlight float64
	// Probes is how many probes the sidecar ran (LOOMGATE_PROBE), and
	// ProbeResult what the last found with its capacity, in words.
	Probes      int
	ProbeResult string
	Summary     string
	Recommended string // the setting applied, as the variables write it
	Workers     int
	Bulkhead    int

	// The prediction for the applied setting, and what was measured under
	// it with the last phase's load: throughput by the clients, latency by
	// the sidecar; ClientP50 is the clients' own median.
	Predicted, Measured Measure
	ClientP50           time.Duration

	// Course is, for open arrivals beyond what the applied setting
	// serves, its course predicted and measured from an empty queue.
	Course []CourseCheck

	// Once applied: what the applied sidecar's own advice says of the
	// setting it runs, "keeps", "probe N" or what it would change to.
	// The setting is stable when it is kept, or a bounded probe is
	// proposed; anything else is a reversal, and a problem.
	Once string

	// Skipped says why the case did not run; empty when it ran.
	Skipped string

	// Problems lists what was wrong; empty when the case passed.
	Problems []string
}

// Measure is throughput and median latency.
type Measure struct {
	Throughput float64
	P50        time.Duration
}

// Passed reports whether the case got everything right.
func (r Result) Passed() bool { return len(r.Problems) == 0 }

// The acceptance margins: the capacity within 15% of the truth, and under
// the applied setting throughput within 15% and p50 within 20% of the
// prediction.
const (
	CapacityMargin   = 0.15
	ThroughputMargin = 0.15
	LatencyMargin    = 0.20
)

// Cases returns the matrix: each way real traffic has misled a naive
// estimate, with its truth.
func Cases() []Case {
	s := time.Second
	pool := func(n float64) Truth {
		return Truth{Saturated: true, Capacity: n, CapacityLo: n * (1 - CapacityMargin), CapacityHi: n * (1 + CapacityMargin)}
	}
	return []Case{
		// One load from the first second: nothing calmer is seen, and the
		// probe (on in these cases, after 10 s of traffic) tells a
		// healthy upstream from one queueing inside. 25 s leaves it time.
		{
			Name: "steady", Description: "one route, 100 ms, 50 clients, nothing limits it",
			Phases: []Phase{{Duration: 25 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 50}}}},
		},
		{
			Name: "spread", Description: "one route, service times spread 20-400 ms, 40 clients, nothing limits it",
			Phases: []Phase{{Duration: 25 * s, Flows: []bench.Flow{{Path: "/wait?ms=20&to=400", Clients: 40}}}},
		},
		{
			Name: "cheap+expensive", Description: "2 ms requests from 2 clients beside 200 ms ones from 20, on one route, nothing limits them",
			Phases: []Phase{{Duration: 25 * s, Flows: []bench.Flow{{Path: "/wait?ms=2", Clients: 2}, {Path: "/wait?ms=200", Clients: 20}}}},
		},
		// Where users start: a service already at its peak when loomgate
		// is put beside it. Without the probe the advice cannot tell and
		// says so; with it, it finds the pool.
		{
			Name: "peak", Description: "a hidden pool of 37 at 80 ms behind 300 clients from the first second; the probe off",
			Stub: stub.Config{Pool: 37}, Sidecar: bench.Sidecar{Probe: "off"},
			Phases: []Phase{{Duration: 30 * s, Flows: []bench.Flow{{Path: "/wait?ms=80", Clients: 300}}}},
			Truth:  Truth{Unknown: true, Capacity: 37},
		},
		{
			Name: "peak-probed", Description: "a hidden pool of 37 at 80 ms behind 300 clients from the first second; the probe on",
			Stub:   stub.Config{Pool: 37},
			Phases: []Phase{{Duration: 30 * s, Flows: []bench.Flow{{Path: "/wait?ms=80", Clients: 300}}}},
			Truth:  pool(37),
		},
		{
			Name: "peak-healthy", Description: "nothing limits it, 650 ms, 300 clients from the first second; the probe on",
			Phases: []Phase{{Duration: 30 * s, Flows: []bench.Flow{{Path: "/wait?ms=650", Clients: 300}}}},
		},
		{
			Name: "peak-open", Description: "open arrivals at a hidden pool of 20, 100 ms (200 a second served): 240 a second from the first second; the probe on",
			Stub:           stub.Config{Pool: 20},
			Phases:         []Phase{{Duration: 40 * s, Rates: []Rate{{Path: "/wait?ms=100", PerSecond: 240}}}},
			Truth:          pool(20),
			ApplyFromEmpty: 55 * time.Second,
		},
		{
			Name: "rising", Description: "a hidden pool of 50, 100 ms: 10 clients, then 200 within the window",
			Stub:   stub.Config{Pool: 50},
			Phases: []Phase{{Duration: 8 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 10}}}, {Duration: 14 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 200}}}},
			Truth:  pool(50),
		},
		{
			Name: "pool+spread", Description: "a hidden pool of 50 behind service times spread 20-200 ms: 10 clients, then 150",
			Stub:   stub.Config{Pool: 50},
			Phases: []Phase{{Duration: 8 * s, Flows: []bench.Flow{{Path: "/wait?ms=20&to=200", Clients: 10}}}, {Duration: 14 * s, Flows: []bench.Flow{{Path: "/wait?ms=20&to=200", Clients: 150}}}},
			Truth:  pool(50),
		},
		{
			Name: "one-route-pool", Description: "a pool of 10 connections behind /db only, while /wait stays healthy: /db from 5 clients to 40",
			Stub: stub.Config{DBPool: 10},
			Phases: []Phase{
				{Duration: 8 * s, Flows: []bench.Flow{{Path: "/db?ms=100", Clients: 5}, {Path: "/wait?ms=50", Clients: 20}}},
				{Duration: 14 * s, Flows: []bench.Flow{{Path: "/db?ms=100", Clients: 40}, {Path: "/wait?ms=50", Clients: 20}}},
			},
			Truth: Truth{RouteLocal: "GET /db"},
		},
		{
			Name: "cpu", Description: "CPU work, about 1 ms a request: 1 client, then 32; the ceiling is the 2 cores, shared with the rig and the sidecar",
			// One client at first: two would already fill the two cores
			// the rig and the sidecar share, and leave no unloaded speed
			// to measure the stretch against.
			Phases: []Phase{{Duration: 8 * s, Flows: []bench.Flow{{Path: "/cpu?iters=300000", Clients: 1}}}, {Duration: 14 * s, Flows: []bench.Flow{{Path: "/cpu?iters=300000", Clients: 32}}}},
			// Two cores, shared with the rig and the sidecar; and a request
			// is not all CPU (its service time at low load has the network
			// and the scheduler in it too), so the knee of throughput lies
			// above the cores' count, by that share: one core's worth at
			// the least, twice the cores at the most.
			Truth:       Truth{Saturated: true, Capacity: 2, CapacityLo: 1, CapacityHi: 4},
			SharedCores: true,
		},
		{
			Name: "pinned", Description: "a 20 ms critical section every request takes: 1 client, then 20",
			Phases: []Phase{{Duration: 8 * s, Flows: []bench.Flow{{Path: "/pinned?ms=20", Clients: 1}}}, {Duration: 14 * s, Flows: []bench.Flow{{Path: "/pinned?ms=20", Clients: 20}}}},
			Truth:  pool(1),
		},
		{
			Name: "then-calm", Description: "a hidden pool of 50: 200 clients, then a calm minute of 20; the capacity seen stays known",
			Stub:   stub.Config{Pool: 50},
			Phases: []Phase{{Duration: 8 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 10}}}, {Duration: 20 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 200}}}, {Duration: 65 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 20}}}},
			Truth:  Truth{Capacity: 50, CapacityLo: 50 * (1 - CapacityMargin), CapacityHi: 50 * (1 + CapacityMargin), CapacityKnown: true},
		},
		{
			Name: "short-calm", Description: "a hidden pool of 50, 100 ms: 3 s of 10 clients, shorter than a bucket, then 200",
			Stub:   stub.Config{Pool: 50},
			Phases: []Phase{{Duration: 3 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 10}}}, {Duration: 16 * s, Flows: []bench.Flow{{Path: "/wait?ms=100", Clients: 200}}}},
			Truth:  pool(50),
		},
		{
			Name: "shared-pool", Description: "a hidden pool of 50 behind two routes of different cost, 200 ms /mixed and 10 ms /wait: 10+5 clients, then 150+20",
			Stub: stub.Config{Pool: 50},
			Phases: []Phase{
				{Duration: 8 * s, Flows: []bench.Flow{{Path: "/mixed", Clients: 10}, {Path: "/wait?ms=10", Clients: 5}}},
				{Duration: 14 * s, Flows: []bench.Flow{{Path: "/mixed", Clients: 150}, {Path: "/wait?ms=10", Clients: 20}}},
			},
			Truth: shared(pool(50), "GET /mixed", "GET /wait"),
		},
		{
			Name: "open", Description: "open arrivals at a hidden pool of 20, 100 ms (200 a second served): 60 a second, then 240",
			Stub: stub.Config{Pool: 20},
			Phases: []Phase{
				{Duration: 8 * s, Rates: []Rate{{Path: "/wait?ms=100", PerSecond: 60}}},
				// Longer than the 15 s over which outstanding requests
				// must keep growing for the demand to read as open.
				{Duration: 18 * s, Rates: []Rate{{Path: "/wait?ms=100", PerSecond: 240}}},
			},
			Truth: pool(20),
			// The prediction is of the first minute; the sidecar's p50 is
			// of its window, 12 buckets of 5 s from its start, so a run
			// read after a minute has lost its first bucket, the shortest
			// waits. 55 s is whole in it, whatever the launch took; its
			// p50 is some 8% below a minute's.
			ApplyFromEmpty: 55 * time.Second,
		},
		{
			// 20 s before the slowdown: the probe, 10 s in, is done by then.
			Name: "slower-dependency", Description: "nothing limits it, but its dependency slows from 50 ms to 150 ms under the same 40 clients",
			Phases: []Phase{{Duration: 20 * s, Flows: []bench.Flow{{Path: "/wait?ms=50", Clients: 40}}}, {Duration: 12 * s, Flows: []bench.Flow{{Path: "/wait?ms=150", Clients: 40}}}},
		},
		{
			Name: "tomcat-50", Description: "Apache Tomcat, maxThreads 50, a JSP that sleeps 100 ms: 20 clients, then 100",
			Phases:   []Phase{{Duration: 8 * s, Flows: []bench.Flow{{Path: "/sleep.jsp?ms=100", Clients: 20}}}, {Duration: 14 * s, Flows: []bench.Flow{{Path: "/sleep.jsp?ms=100", Clients: 100}}}},
			Truth:    pool(50),
			Upstream: tomcatUpstream(50), Needs: tomcat.Available,
		},
		{
			Name: "tomcat-200", Description: "Apache Tomcat, maxThreads 200, a JSP that calls the stub for 400 ms: 50 clients, then 400",
			Phases:   []Phase{{Duration: 8 * s, Flows: []bench.Flow{{Path: "/call.jsp?ms=400", Clients: 50}}}, {Duration: 14 * s, Flows: []bench.Flow{{Path: "/call.jsp?ms=400", Clients: 400}}}},
			Truth:    pool(200),
			Upstream: tomcatUpstream(200), Needs: tomcat.Available,
		},
		{
			Name: "peak-tomcat-40", Description: "Apache Tomcat, maxThreads 40, a JSP that sleeps 100 ms, 300 clients from the first second; the probe off",
			Sidecar:  bench.Sidecar{Probe: "off"},
			Phases:   []Phase{{Duration: 30 * s, Flows: []bench.Flow{{Path: "/sleep.jsp?ms=100", Clients: 300}}}},
			Truth:    Truth{Unknown: true, Capacity: 40},
			Upstream: tomcatUpstream(40), Needs: tomcat.Available,
		},
		{
			Name: "peak-tomcat-40-probed", Description: "Apache Tomcat, maxThreads 40, a JSP that sleeps 100 ms, 300 clients from the first second; the probe on",
			Phases:   []Phase{{Duration: 30 * s, Flows: []bench.Flow{{Path: "/sleep.jsp?ms=100", Clients: 300}}}},
			Truth:    pool(40),
			Upstream: tomcatUpstream(40), Needs: tomcat.Available,
		},
		{
			Name: "tomcat-shared", Description: "one Tomcat pool of 50 behind two routes, a 100 ms JSP and a trivial one: 10+5 clients, then 100+10",
			Phases: []Phase{
				{Duration: 8 * s, Flows: []bench.Flow{{Path: "/sleep.jsp?ms=100", Clients: 10}, {Path: "/hello.jsp", Clients: 5}}},
				{Duration: 14 * s, Flows: []bench.Flow{{Path: "/sleep.jsp?ms=100", Clients: 100}, {Path: "/hello.jsp", Clients: 10}}},
			},
			Truth:    shared(pool(50), "GET /hello.jsp", "GET /sleep.jsp"),
			Upstream: tomcatUpstream(50), Needs: tomcat.Available,
		},
	}
}

// shared names the routes that share t's bottleneck.
func shared(t Truth, routes ...string) Truth {
	t.Shared = routes
	return t
}

// tomcatUpstream starts an Apache Tomcat whose connector has maxThreads
// threads, its JSPs calling the stub the launcher started.
func tomcatUpstream(maxThreads int) func(context.Context, string) (string, func(), error) {
	return func(ctx context.Context, stubURL string) (string, func(), error) {
		s, err := tomcat.Start(ctx, tomcat.Config{MaxThreads: maxThreads, StubURL: stubURL})
		if err != nil {
			return "", nil, err
		}
		return s.URL, s.Stop, nil
	}
}

// Options tune Run.
type Options struct {
	// Scale multiplies every phase's duration: below 1 for a quicker,
	// rougher run. If zero, 1.
	Scale float64
	// Apply measures the recommended setting (or the one in force, when
	// the advice keeps it) for Measure after the case: a new sidecar with
	// the last phase's load.
	Apply bool
	// Measure is the warm-up and window of that measurement. If zero, 5 s
	// and 8 s.
	ApplyWarmup, ApplyWindow time.Duration
	// Progress receives a line per step. If nil, nothing is written.
	Progress io.Writer
}

// Run runs each case: launch, play the phases, read /advice,
// judge it against the truth, and with Apply run the recommended setting
// and compare what it does with what the advice predicted.
func Run(ctx context.Context, cases []Case, l bench.Launcher, opts Options) ([]Result, error) {
	if l == nil {
		return nil, bench.ErrNoLauncher
	}
	if opts.Scale == 0 {
		opts.Scale = 1
	}
	if opts.ApplyWarmup == 0 {
		opts.ApplyWarmup = 5 * time.Second
	}
	if opts.ApplyWindow == 0 {
		opts.ApplyWindow = 8 * time.Second
	}
	var results []Result
	for i, c := range cases {
		if c.Needs != nil {
			if err := c.Needs(); err != nil {
				say(opts.Progress, "[%d/%d] advice %s: skipped: %v", i+1, len(cases), c.Name, err)
				results = append(results, Result{Case: c, Truth: c.Truth, Skipped: err.Error()})
				continue
			}
		}
		say(opts.Progress, "[%d/%d] advice %s: %s", i+1, len(cases), c.Name, c.Description)
		r, err := runCase(ctx, c, l, opts)
		if err != nil {
			return results, fmt.Errorf("case %s: %w", c.Name, err)
		}
		verdict := "pass"
		if !r.Passed() {
			verdict = "FAIL: " + strings.Join(r.Problems, "; ")
		}
		say(opts.Progress, "[%d/%d] advice %s: %s", i+1, len(cases), c.Name, verdict)
		results = append(results, r)
	}
	return results, nil
}

// adviceDoc is the part of GET /advice the matrix reads.
type adviceDoc struct {
	Settings struct {
		Mode      string  `json:"mode"`
		Workers   int     `json:"workers"`
		QueueSize int     `json:"queue_size"`
		QueueTO   float64 `json:"queue_timeout_seconds"`
		Bulkhead  int     `json:"bulkhead"`
		BulkWait  float64 `json:"bulkhead_wait_seconds"`
	} `json:"settings"`
	Figures struct {
		LatencyP50 float64  `json:"latency_p50_seconds"`
		Capacity   *float64 `json:"upstream_capacity"`
		Unknown    string   `json:"upstream_capacity_unknown"`
		LowerBound float64  `json:"upstream_capacity_lower_bound"`
		InFlight   float64  `json:"in_flight"`
		Saturated  *bool    `json:"upstream_saturated"`
		Undecided  string   `json:"upstream_saturated_unknown"`
		RouteLocal []string `json:"saturated_routes_alone"`
		Shared     []string `json:"shared_routes"`
	} `json:"figures"`
	Recommendation struct {
		Mode        string          `json:"mode"`
		Workers     int             `json:"workers"`
		Bulkhead    int             `json:"bulkhead"`
		Probe       int             `json:"probe"`
		Summary     string          `json:"summary"`
		Predictions []predictionDoc `json:"predictions"`
	} `json:"recommendation"`
	Probe *struct {
		Probes int `json:"probes"`
		Last   *struct {
			Result   string  `json:"result"`
			Capacity float64 `json:"capacity"`
		} `json:"last"`
	} `json:"probe"`
}

// predictionDoc is one of /advice's predictions.
type predictionDoc struct {
	Name       string  `json:"name"`
	Setting    string  `json:"setting"`
	Mode       string  `json:"mode"`
	Limit      int     `json:"limit"`
	QueueSize  int     `json:"queue_size"`
	Wait       float64 `json:"wait_seconds"`
	Throughput float64 `json:"throughput_rps"`
	P50        float64 `json:"latency_p50_seconds"`
	Course     *struct {
		Points []struct {
			At      float64 `json:"at_seconds"`
			Latency float64 `json:"latency_seconds"`
		} `json:"points"`
	} `json:"course"`
}

// CourseCheck is one moment of an open overload's course: the median
// latency predicted for the requests arriving in the 5 s before it, and
// measured from an empty queue.
type CourseCheck struct {
	At                  time.Duration
	Predicted, Measured time.Duration
}

// courseWindow is the arrivals each moment of a course is of, as the
// advice has it.
const courseWindow = 5 * time.Second

func runCase(ctx context.Context, c Case, l bench.Launcher, opts Options) (Result, error) {
	r := Result{Case: c, Truth: c.Truth}
	sc := c.Sidecar
	if sc.Probe == "" {
		// The sidecar is judged with its probe on: where a calmer load was
		// seen it never runs (and a run there is a problem); where none
		// was, it finds what passive reading cannot. The peak cases say
		// off, to judge what is said without it.
		sc.Probe = "on"
	}
	t, stop, err := l.Launch(ctx, bench.Arm{Label: c.Name, Sidecar: sc, Stub: c.Stub, Upstream: c.Upstream})
	if err != nil {
		return r, fmt.Errorf("launch: %w", err)
	}
	var doc adviceDoc
	for i, p := range c.Phases {
		d := time.Duration(float64(p.Duration) * opts.Scale)
		if i < len(c.Phases)-1 {
			_, err = drive(ctx, t.URL, p, 0, d)
		} else {
			_, doc, err = driveAndRead(ctx, t, p, 0, d)
		}
		if err != nil {
			stop()
			return r, err
		}
	}
	stop()
	f, rec := doc.Figures, doc.Recommendation
	r.RouteLocal, r.Capacity, r.Unknown, r.LowerBound, r.InFlight = f.RouteLocal, f.Capacity, f.Unknown, f.LowerBound, f.InFlight
	switch {
	case f.Saturated != nil:
		r.Saturated = *f.Saturated
	default:
		r.SaturationUnknown = cmp.Or(f.Undecided, "unknown")
	}
	if p := doc.Probe; p != nil {
		r.Probes = p.Probes
		if p.Last != nil {
			r.ProbeResult = strings.ReplaceAll(p.Last.Result, "_", " ")
			if p.Last.Capacity > 0 {
				r.ProbeResult += fmt.Sprintf(", %.1f", p.Last.Capacity)
			}
		}
	}
	r.Summary, r.Workers, r.Bulkhead = rec.Summary, rec.Workers, rec.Bulkhead
	r.judge(c.Phases)
	r.Shared = f.Shared
	if len(c.Truth.Shared) > 0 && !slices.Equal(sorted(f.Shared), sorted(c.Truth.Shared)) {
		r.Problems = append(r.Problems, fmt.Sprintf("routes sharing the bottleneck %q; the truth is %q", f.Shared, c.Truth.Shared))
	}

	// The setting to check the predictions with: the recommended one, or
	// the one in force when the advice keeps it.
	applied := -1
	for i, p := range rec.Predictions {
		if p.Name == "recommended" || applied < 0 && p.Name == "in force" {
			applied = i
		}
	}
	if !opts.Apply || applied < 0 {
		return r, nil
	}
	p := rec.Predictions[applied]
	r.Recommended = p.Setting
	r.Predicted = Measure{Throughput: p.Throughput, P50: time.Duration(p.P50 * float64(time.Second))}
	sidecar := bench.Sidecar{Mode: p.Mode, Routes: c.Sidecar.Routes}
	if p.Mode == "fixed" {
		sidecar.Workers, sidecar.QueueSize, sidecar.QueueTimeout = p.Limit, p.QueueSize, time.Duration(p.Wait*float64(time.Second))
	} else {
		sidecar.Bulkhead = p.Limit
	}
	t, stop, err = l.Launch(ctx, bench.Arm{Label: c.Name + " applied", Sidecar: sidecar, Stub: c.Stub, Upstream: c.Upstream})
	if err != nil {
		return r, fmt.Errorf("launch the recommended setting: %w", err)
	}
	defer stop()
	last := c.Phases[len(c.Phases)-1]
	warmup, window := opts.ApplyWarmup, opts.ApplyWindow
	if c.ApplyFromEmpty > 0 {
		warmup, window = 0, c.ApplyFromEmpty
	}
	m, after, err := driveAndRead(ctx, t, last, warmup, window)
	if err != nil {
		return r, err
	}
	// Latency as the sidecar measured it, from the request read to the
	// response written, which is what the prediction models: the clients'
	// own clock would add the time they wait for a core, beside the stub
	// and the sidecar on the same machine.
	if after.Figures.LatencyP50 > 0 {
		r.ClientP50 = m.P50
		m.P50 = time.Duration(after.Figures.LatencyP50 * float64(time.Second))
	}
	r.Measured = m
	var reversal bool
	r.Once, reversal = once(sidecar, after)
	if reversal {
		r.Problems = append(r.Problems, fmt.Sprintf("once %s is applied, its advice reverses it: %s", p.Setting, r.Once))
	}
	if p.Course != nil && c.ApplyFromEmpty > 0 && len(last.Rates) == 1 && len(last.Flows) == 0 {
		if err := r.checkCourse(ctx, c, l, sidecar, last, p); err != nil {
			return r, err
		}
	}
	if c.SharedCores {
		return r, nil
	}
	if r.Predicted.Throughput > 0 && math.Abs(m.Throughput-r.Predicted.Throughput) > ThroughputMargin*r.Predicted.Throughput {
		r.Problems = append(r.Problems, fmt.Sprintf("measured %.0f rps under %s; predicted %.0f", m.Throughput, p.Setting, r.Predicted.Throughput))
	}
	if r.Predicted.P50 > 0 && math.Abs(float64(m.P50-r.Predicted.P50)) > LatencyMargin*float64(r.Predicted.P50) {
		r.Problems = append(r.Problems, fmt.Sprintf("measured p50 %s under %s; predicted %s", m.P50.Round(time.Millisecond), p.Setting, r.Predicted.P50.Round(time.Millisecond)))
	}
	return r, nil
}

// checkCourse measures, for each moment of the course predicted for the
// applied setting, the median latency of the requests that arrive in the
// 5 s before it, each on a sidecar of its own from an empty queue (so a
// course is what a new overload does, as predicted), and judges it within
// CourseMargin.
func (r *Result) checkCourse(ctx context.Context, c Case, l bench.Launcher, sidecar bench.Sidecar, last Phase, p predictionDoc) error {
	for _, pt := range p.Course.Points {
		at := time.Duration(pt.At * float64(time.Second))
		t, stop, err := l.Launch(ctx, bench.Arm{Label: fmt.Sprintf("%s course at %s", c.Name, at), Sidecar: sidecar, Stub: c.Stub, Upstream: c.Upstream})
		if err != nil {
			return fmt.Errorf("launch the course at %s: %w", at, err)
		}
		// Patient users, followed to their answers however long the
		// queue: the prediction is of the requests answered.
		rate := last.Rates[0]
		res, err := bench.RunOpen(ctx, bench.OpenConfig{
			URL: t.URL + rate.Path, Rate: rate.PerSecond, Warmup: at - courseWindow, Window: courseWindow,
			Timeout: 2 * at, Tail: 2 * at,
		})
		stop()
		if err != nil {
			return fmt.Errorf("course at %s: %w", at, err)
		}
		cc := CourseCheck{At: at, Predicted: time.Duration(pt.Latency * float64(time.Second)), Measured: res.P50}
		r.Course = append(r.Course, cc)
		if math.Abs(float64(cc.Measured-cc.Predicted)) > CourseMargin*float64(cc.Measured) {
			r.Problems = append(r.Problems, fmt.Sprintf("%s into the overload, measured latency p50 %s; predicted %s", at, cc.Measured.Round(time.Millisecond), cc.Predicted.Round(time.Millisecond)))
		}
	}
	return nil
}

// CourseMargin is how near an open overload's course must come, at each
// moment told, to the median latency measured.
const CourseMargin = 0.25

// once reads what the advice of a sidecar running the setting applied
// says of it: keep it (the same mode and a limit within the capacity's
// margin of it: a capacity estimated again under the cap moves a little),
// or try a bounded probe above it, or something else, a reversal: a cap
// dropped or added, or moved further.
func once(applied bench.Sidecar, doc adviceDoc) (said string, reversal bool) {
	rec := doc.Recommendation
	limit, now := applied.Bulkhead, rec.Bulkhead
	mode := cmp.Or(applied.Mode, "unbounded")
	if mode == "fixed" {
		limit, now = applied.Workers, rec.Workers
	}
	if len(rec.Predictions) == 0 {
		// Not enough traffic to advise: nothing is reversed.
		return "no advice", false
	}
	if rec.Probe > 0 && now == limit {
		// A step of 25%, as docs/advice.md promises, rounded up to two
		// significant figures.
		if float64(rec.Probe) <= math.Ceil(float64(limit)*1.25*1.1) {
			return fmt.Sprintf("keeps, or probe %d", rec.Probe), false
		}
		return fmt.Sprintf("probe %d, more than a step above %d", rec.Probe, limit), true
	}
	same := rec.Mode == mode && (now == limit || limit > 0 && now > 0 && math.Abs(float64(now-limit)) <= CapacityMargin*float64(limit))
	if same {
		if now != limit {
			return fmt.Sprintf("keeps (%d)", now), false
		}
		return "keeps", false
	}
	switch {
	case rec.Workers > 0 && rec.Mode == "fixed":
		return fmt.Sprintf("WORKERS=%d", rec.Workers), true
	case rec.Bulkhead > 0:
		return fmt.Sprintf("BULKHEAD=%d", rec.Bulkhead), true
	}
	return "no limit", true
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// judge compares what the sidecar said with the truth.
func (r *Result) judge(phases []Phase) {
	tr := r.Truth
	last := phases[len(phases)-1]
	if r.Probes > 0 && startsCalm(phases) {
		r.Problems = append(r.Problems, fmt.Sprintf("probed %d times, though a calmer load was seen", r.Probes))
	}
	if tr.Unknown {
		if r.SaturationUnknown == "" {
			r.Problems = append(r.Problems, fmt.Sprintf("saturated %v; the truth is that one load cannot tell", r.Saturated))
		}
		if tr.Capacity > 0 && r.LowerBound > tr.Capacity*(1+CapacityMargin) {
			r.Problems = append(r.Problems, fmt.Sprintf("at least %.0f; above the capacity %.0f", r.LowerBound, tr.Capacity))
		}
		if r.Workers > 0 || r.Bulkhead > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("recommends WORKERS=%d, BULKHEAD=%d on nothing known", r.Workers, r.Bulkhead))
		}
		return
	}
	switch {
	case r.SaturationUnknown != "":
		r.Problems = append(r.Problems, fmt.Sprintf("saturation %s; the truth is %v", r.SaturationUnknown, tr.Saturated))
	case r.Saturated != tr.Saturated:
		r.Problems = append(r.Problems, fmt.Sprintf("saturated %v; the truth is %v", r.Saturated, tr.Saturated))
	}
	if got := strings.Join(r.RouteLocal, ","); got != tr.RouteLocal {
		r.Problems = append(r.Problems, fmt.Sprintf("routes queueing alone %q; the truth is %q", got, tr.RouteLocal))
	}
	switch {
	case tr.Capacity > 0 && r.Capacity == nil:
		r.Problems = append(r.Problems, fmt.Sprintf("capacity %s; the truth is %.0f", r.Unknown, tr.Capacity))
	case tr.Capacity > 0 && (*r.Capacity < tr.CapacityLo || *r.Capacity > tr.CapacityHi):
		r.Problems = append(r.Problems, fmt.Sprintf("capacity %.1f; the truth is %.0f (%.1f to %.1f)", *r.Capacity, tr.Capacity, tr.CapacityLo, tr.CapacityHi))
	}
	// A healthy upstream is never capped below its demand: its closed
	// clients, and for open arrivals what they held, and no cap goes below
	// what the upstream served without slowing.
	if !tr.Saturated && (r.Workers > 0 || r.Bulkhead > 0) {
		demand := 0
		for _, f := range last.Flows {
			demand += f.Clients
		}
		if len(last.Rates) > 0 {
			// What the window held counts the clients too.
			demand = max(demand, int(math.Floor(r.InFlight)))
		}
		if limit := max(r.Workers, r.Bulkhead); limit < demand {
			r.Problems = append(r.Problems, fmt.Sprintf("recommends a limit of %d for a healthy upstream holding %d requests", limit, demand))
		}
	}
	if limit := max(r.Workers, r.Bulkhead); limit > 0 && float64(limit) < math.Floor(r.LowerBound) {
		r.Problems = append(r.Problems, fmt.Sprintf("recommends %d, below the %.0f served without slowing", limit, r.LowerBound))
	}
}

// startsCalm reports whether the first phase is calmer than the last:
// fewer clients or fewer arrivals a second. There the probe must never run.
func startsCalm(phases []Phase) bool {
	load := func(p Phase) float64 {
		n := 0.0
		for _, f := range p.Flows {
			n += float64(f.Clients)
		}
		for _, r := range p.Rates {
			n += r.PerSecond
		}
		return n
	}
	return load(phases[0]) < load(phases[len(phases)-1])
}

func readAdvice(ctx context.Context, admin string) (adviceDoc, error) {
	var doc adviceDoc
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(admin, "/")+"/advice", nil)
	if err != nil {
		return doc, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return doc, fmt.Errorf("%w: %v", bench.ErrAdmin, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("%w: /advice answered %s", bench.ErrAdmin, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return doc, fmt.Errorf("%w: /advice: %v", bench.ErrAdmin, err)
	}
	return doc, nil
}

// drive runs the phase's closed-loop clients and open arrivals side by
// side for warmup+window and returns the throughput of the 2xx answers in
// the window and their median latency (the clients' when there are any).
// A client whose answer failed comes back after a pause, not in a spin.
func drive(ctx context.Context, base string, p Phase, warmup, window time.Duration) (Measure, error) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		m      Measure
		errs   []error
		closed bool
	)
	add := func(rps float64, p50 time.Duration, isClosed bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		m.Throughput += rps
		if isClosed || !closed && m.P50 == 0 {
			m.P50 = p50
		}
		closed = closed || isClosed
	}
	if len(p.Flows) > 0 {
		wg.Go(func() {
			res, err := bench.Run(ctx, bench.Config{
				URL: base, Flows: p.Flows, Warmup: warmup, Window: window,
				// Cut only at the window's end.
				Timeout: warmup + window, ErrorPause: 10 * time.Millisecond,
			})
			add(res.RPS, res.P50, true, err)
		})
	}
	for _, rate := range p.Rates {
		wg.Go(func() {
			res, err := bench.RunOpen(ctx, bench.OpenConfig{
				URL: base + rate.Path, Rate: rate.PerSecond, Warmup: warmup, Window: window,
				// Patient users: a request waits for its answer however
				// long the queue, to the window's end, as the advice's
				// prediction of open demand assumes.
				Timeout: warmup + window,
			})
			add(res.Throughput, res.P50, false, err)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Measure{}, err
	}
	if m.Throughput == 0 {
		return Measure{}, errors.New("no answer in the window")
	}
	return m, nil
}

// driveAndRead drives the phase and reads the sidecar's /advice as its
// window closes: after open arrivals stop, their requests still waiting
// are followed for a few seconds more, and the advice read then would see
// the outstanding requests fall, not the growth that tells open demand.
func driveAndRead(ctx context.Context, t bench.Target, p Phase, warmup, window time.Duration) (Measure, adviceDoc, error) {
	var (
		m       Measure
		doc     adviceDoc
		readErr error
	)
	if len(p.Rates) == 0 {
		m, err := drive(ctx, t.URL, p, warmup, window)
		if err != nil {
			return m, doc, err
		}
		doc, err = readAdvice(ctx, t.AdminURL)
		return m, doc, err
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		select {
		case <-time.After(warmup + window):
		case <-ctx.Done():
		}
		doc, readErr = readAdvice(ctx, t.AdminURL)
	}()
	m, err := drive(ctx, t.URL, p, warmup, window)
	<-read
	return m, doc, errors.Join(err, readErr)
}

// WriteMarkdown writes the matrix as a table: per case the truth, the
// verdict, the estimate, the advice, predicted against measured, and pass
// or fail.
func WriteMarkdown(w io.Writer, results []Result) error {
	fmt.Fprintln(w, "| case | truth | verdict | capacity (estimate) | probe | advice | applied | predicted rps / p50 | measured rps / p50 | once applied | result |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --: | --: | --- | --- |")
	for _, r := range results {
		if r.Skipped != "" {
			if _, err := fmt.Fprintf(w, "| %s | | | | | | | | | | skipped: %s |\n", r.Case.Name, r.Skipped); err != nil {
				return err
			}
			continue
		}
		truth := "not saturated"
		switch {
		case r.Truth.Saturated && r.Truth.CapacityHi-r.Truth.CapacityLo > 2*CapacityMargin*r.Truth.Capacity+1e-9:
			truth = fmt.Sprintf("saturated, %.0f to %.0f", r.Truth.CapacityLo, r.Truth.CapacityHi)
		case r.Truth.Saturated:
			truth = fmt.Sprintf("saturated, %.0f", r.Truth.Capacity)
			if len(r.Truth.Shared) > 0 {
				truth += ", shared by " + strings.Join(r.Truth.Shared, " and ")
			}
		case r.Truth.RouteLocal != "":
			truth = "queues behind " + r.Truth.RouteLocal + " only"
		case r.Truth.CapacityKnown:
			truth = fmt.Sprintf("not saturated now, %.0f before", r.Truth.Capacity)
		}
		if r.Truth.Unknown {
			truth = "cannot be told at one load"
			if r.Truth.Capacity > 0 {
				truth += fmt.Sprintf(" (a pool of %.0f)", r.Truth.Capacity)
			}
		}
		verdict := "not saturated"
		switch {
		case r.SaturationUnknown != "":
			verdict = "unknown"
		case r.Saturated && len(r.Shared) > 1:
			verdict = "saturated, shared by " + strings.Join(r.Shared, " and ")
		case r.Saturated:
			verdict = "saturated"
		case len(r.RouteLocal) > 0:
			verdict = "behind " + strings.Join(r.RouteLocal, ", ") + " only"
		}
		capacity := r.Unknown
		if r.Capacity != nil {
			capacity = fmt.Sprintf("%.1f", *r.Capacity)
		}
		if r.LowerBound > 0 {
			capacity += fmt.Sprintf(", at least %.0f", r.LowerBound)
		}
		advice := "no limit"
		if r.Workers > 0 {
			advice = fmt.Sprintf("WORKERS=%d", r.Workers)
		} else if r.Bulkhead > 0 {
			advice = fmt.Sprintf("BULKHEAD=%d", r.Bulkhead)
		}
		result := "pass"
		if r.Case.SharedCores {
			result = "pass (prediction not checked: the clients share the cores with the work)"
		}
		if !r.Passed() {
			result = "FAIL: " + strings.Join(r.Problems, "; ")
		}
		pm := func(m Measure) string {
			if m.Throughput == 0 {
				return ""
			}
			return fmt.Sprintf("%.0f / %s", m.Throughput, m.P50.Round(time.Millisecond))
		}
		probe := "none"
		switch {
		case r.Case.Sidecar.Probe == "off":
			probe = "off"
		case r.Probes > 1:
			probe = fmt.Sprintf("%d, the last %s", r.Probes, r.ProbeResult)
		case r.Probes == 1:
			probe = r.ProbeResult
		}
		if _, err := fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Case.Name, truth, verdict, capacity, probe, advice,
			r.Recommended, pm(r.Predicted), pm(r.Measured), r.Once, result); err != nil {
			return err
		}
	}
	return writeCourses(w, results)
}

// writeCourses writes, below the table, each open overload's course:
// the latency predicted and measured at each moment told.
func writeCourses(w io.Writer, results []Result) error {
	var lines []string
	for _, r := range results {
		var parts []string
		for _, c := range r.Course {
			parts = append(parts, fmt.Sprintf("at %s, predicted %s, measured %s", c.At, c.Predicted.Round(10*time.Millisecond), c.Measured.Round(10*time.Millisecond)))
		}
		if len(parts) > 0 {
			lines = append(lines, fmt.Sprintf("- %s, %s: %s", r.Case.Name, r.Recommended, strings.Join(parts, "; ")))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "\nThe course of each open overload under the setting applied, from an empty queue: the median latency of the requests arriving in the 5 s before each moment (within %.0f%%):\n\n%s\n",
		100*CourseMargin, strings.Join(lines, "\n"))
	return err
}

func say(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
