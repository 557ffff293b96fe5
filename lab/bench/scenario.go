package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/loomgate/loomgate/lab/stub"
)

// Scenario is an experiment: one path on the stub, driven through each arm
// in turn at each level of concurrency (a closed loop) or at each arrival
// rate (an open loop).
type Scenario struct {
	Name        string
	Description string

	// Path is requested on the target, e.g. "/wait?ms=200".
	Path string

	// Levels are the concurrencies of a closed-loop scenario, each a
	// separate run.
	Levels []int

	// Rates are the arrival rates of an open-loop scenario, requests per
	// second, each a separate run. A scenario has levels or rates, not
	// both.
	Rates []float64

	// Arms are the configurations compared, run one after the other.
	Arms []Arm

	// Warmup and Window are the scenario's defaults, sized so that the
	// slowest level reaches its steady state before the window opens.
	Warmup, Window time.Duration
}

// Open reports whether the scenario is open-loop: it has rates.
func (sc Scenario) Open() bool { return len(sc.Rates) > 0 }

// Arm is one configuration of sidecar and stub.
type Arm struct {
	// Label names the arm in tables and charts, e.g. "fixed 200".
	Label string

	Sidecar Sidecar
	Stub    stub.Config

	// Capacity is a limit behind the sidecar that the sidecar cannot
	// see, such as the stub's db pool; the physics check and the narrative
	// use it as the ceiling. If zero, the sidecar's own limit is used.
	Capacity Capacity

	// Proto is what the rig speaks to the arm's sidecar; the sidecar
	// speaks it on to the stub. When set, the results' arm names it.
	// If empty, HTTP/1.1.
	Proto Proto
	// Upstream, if set, starts the service the sidecar forwards to in
	// place of the stub, given the stub's base URL for a service that
	// calls it (a servlet container whose pages call a downstream API);
	// the launcher starts the stub first and stops the upstream with the
	// rest. If nil, the sidecar forwards to the stub.
	Upstream func(ctx context.Context, stubURL string) (url string, stop func(), err error)
}

// Sidecar is the part of a sidecar's configuration an arm varies. Zero
// fields leave the sidecar's defaults (the README lists them).
type Sidecar struct {
	// Mode is "fixed", "unbounded" or "adaptive".
	// If empty, unbounded.
	Mode string
	// Workers is the fixed mode's limit. If zero, the sidecar's default.
	Workers int
	// QueueSize bounds the fixed mode's queue. If zero, the sidecar's
	// default.
	QueueSize int
	// QueueTimeout bounds a wait in the fixed mode's queue. If zero, the
	// sidecar's default.
	QueueTimeout time.Duration
	// Bulkhead caps the unbounded mode's concurrency. If zero, none.
	Bulkhead int
	// Routes is LOOMGATE_ROUTES. If empty, the automatic route classes.
	Routes string
	// Probe is LOOMGATE_PROBE: on, off or auto. If empty, the sidecar's
	// default (auto: on in adaptive mode only).
	Probe string
	// Priorities, Shares and FlowKey are LOOMGATE_PRIORITIES,
	// LOOMGATE_SHARES and LOOMGATE_FLOW_KEY. If empty, none: one FIFO
	// queue.
	Priorities, Shares, FlowKey string
	// Controller, in adaptive mode, names a controller of the lab's to
	// move the limit in place of loomgate's (LOOMLAB_CONTROLLER, which
	// `loomlab proxy` reads; see package adaptivematrix). If empty,
	// loomgate's.
	Controller string
}

// Environ returns the LOOMGATE_* variables that configure a sidecar as s
// says, for a launcher that configures it from the environment. Zero fields
// are left out so the sidecar's defaults apply.
func (s Sidecar) Environ() []string {
	mode := s.Mode
	if mode == "" {
		mode = "unbounded"
	}
	env := []string{"LOOMGATE_MODE=" + mode}
	if s.Workers > 0 {
		env = append(env, "LOOMGATE_WORKERS="+strconv.Itoa(s.Workers))
	}
	if s.QueueSize > 0 {
		env = append(env, "LOOMGATE_QUEUE_SIZE="+strconv.Itoa(s.QueueSize))
	}
	if s.QueueTimeout > 0 {
		env = append(env, "LOOMGATE_QUEUE_TIMEOUT="+s.QueueTimeout.String())
	}
	if s.Bulkhead > 0 {
		env = append(env, "LOOMGATE_BULKHEAD="+strconv.Itoa(s.Bulkhead))
	}
	if s.Routes != "" {
		env = append(env, "LOOMGATE_ROUTES="+s.Routes)
	}
	if s.Probe != "" {
		env = append(env, "LOOMGATE_PROBE="+s.Probe)
	}
	for _, v := range []struct{ name, value string }{
		{"LOOMGATE_PRIORITIES", s.Priorities}, {"LOOMGATE_SHARES", s.Shares}, {"LOOMGATE_FLOW_KEY", s.FlowKey},
	} {
		if v.value != "" {
			env = append(env, v.name+"="+v.value)
		}
	}
	if s.Controller != "" {
		env = append(env, "LOOMLAB_CONTROLLER="+s.Controller)
	}
	return env
}

// Target is where a launched arm answers.
type Target struct {
	// URL is the base URL traffic goes to (the sidecar's traffic
	// listener, or the stub itself), without a path.
	URL string
	// AdminURL is the sidecar's admin listener, empty without a sidecar.
	AdminURL string
	// UpstreamURL is the stub's base URL, for a scenario that changes it
	// mid-run (its /pool); empty when the launcher does not say.
	UpstreamURL string
	// UpstreamRSS, if set, reads the resident memory of the upstream's
	// process (the stub's), for Result.UpstreamMemoryBytes. Nil when it
	// is not known apart, e.g. when the upstream shares the rig's process.
	UpstreamRSS func() (int64, error)
}

// Launcher starts what an arm describes and returns where it answers and
// how to stop it. RunScenario launches a fresh target for every level and
// calls stop before the next one.
type Launcher interface {
	Launch(ctx context.Context, arm Arm) (t Target, stop func(), err error)
}

// LauncherFunc adapts a function to Launcher.
type LauncherFunc func(ctx context.Context, arm Arm) (Target, func(), error)

// Launch calls f.
func (f LauncherFunc) Launch(ctx context.Context, arm Arm) (Target, func(), error) {
	return f(ctx, arm)
}

// ErrNoLauncher is returned by RunScenario when it is given no Launcher.
var ErrNoLauncher = errors.New("bench: scenarios need a launcher to start the stub and the sidecar")

// ScenarioOptions override a scenario's defaults. Zero fields keep them.
type ScenarioOptions struct {
	// Levels replaces a closed-loop scenario's levels, Rates an open-loop
	// one's rates. If nil, the scenario's.
	Levels []int
	Rates  []float64
	// Warmup and Window replace the scenario's. If zero, the scenario's.
	Warmup, Window time.Duration
	// Timeout bounds each request: in a closed loop from when it was
	// sent, if zero 30 s; in an open loop from when it was due, if zero
	// 5 s.
	Timeout time.Duration
	// MaxInFlight caps an open loop's requests in flight. If zero,
	// DefaultMaxInFlight().
	MaxInFlight int
	// Proto, if set, replaces every arm's protocol. Conns is the
	// connections an h2c or gRPC run's streams share; if zero,
	// DefaultConns.
	Proto Proto
	Conns int
	// Progress receives progress lines. If nil, nothing is written.
	Progress io.Writer
}

// RunScenario runs every level of a closed-loop scenario through every
// arm, launching a fresh target for each run, and returns a Result per run
// in order: arms in turn, levels ascending within an arm. If a run fails
// it returns the results so far with the error.
func RunScenario(ctx context.Context, sc Scenario, l Launcher, opts ScenarioOptions) ([]Result, error) {
	levels := sc.Levels
	if opts.Levels != nil {
		levels = opts.Levels
	}
	if err := opts.checkProtos(sc); err != nil {
		return nil, err
	}
	return eachRun(ctx, sc, l, opts, len(levels), func(i int) string { return fmt.Sprintf("c%d", levels[i]) },
		func(ctx context.Context, t Target, arm Arm, i int, label string) (Result, error) {
			proto, conns, armLabel := opts.protoOf(arm)
			res, err := Run(ctx, Config{
				URL: t.URL + sc.Path, AdminURL: t.AdminURL, UpstreamRSS: t.UpstreamRSS, Capacity: arm.Capacity,
				Concurrency: levels[i], Warmup: cmp.Or(opts.Warmup, sc.Warmup), Window: cmp.Or(opts.Window, sc.Window),
				Timeout: opts.Timeout, Progress: opts.Progress, Label: label, Proto: proto, Conns: conns,
			})
			res.Scenario, res.Arm = sc.Name, armLabel
			return res, err
		})
}

// RunOpenScenario runs every rate of an open-loop scenario through every
// arm, launching a fresh target for each run, and returns a result per run
// in order: arms in turn, rates ascending within an arm. If a run fails it
// returns the results so far with the error.
func RunOpenScenario(ctx context.Context, sc Scenario, l Launcher, opts ScenarioOptions) ([]OpenResult, error) {
	rates := sc.Rates
	if opts.Rates != nil {
		rates = opts.Rates
	}
	if err := opts.checkProtos(sc); err != nil {
		return nil, err
	}
	return eachRun(ctx, sc, l, opts, len(rates), func(i int) string { return fmtRate(rates[i]) + " rps" },
		func(ctx context.Context, t Target, arm Arm, i int, label string) (OpenResult, error) {
			proto, conns, armLabel := opts.protoOf(arm)
			res, err := RunOpen(ctx, OpenConfig{
				URL: t.URL + sc.Path, AdminURL: t.AdminURL,
				Rate: rates[i], Warmup: cmp.Or(opts.Warmup, sc.Warmup), Window: cmp.Or(opts.Window, sc.Window),
				Timeout: opts.Timeout, MaxInFlight: opts.MaxInFlight, Progress: opts.Progress, Label: label,
				Proto: proto, Conns: conns,
			})
			res.Scenario, res.Arm = sc.Name, armLabel
			return res, err
		})
}

// protoOf is the protocol and connections an arm is driven with, and its
// name in the results: the arm's label, and the protocol when one was
// asked for ("fixed 50 over grpc, 4 connections").
func (opts ScenarioOptions) protoOf(arm Arm) (Proto, int, string) {
	p := cmp.Or(opts.Proto, arm.Proto)
	if p == "" {
		return p, 0, arm.Label
	}
	if !p.multiplexed() {
		return p, 0, arm.Label + " over " + p.String()
	}
	conns := cmp.Or(opts.Conns, DefaultConns)
	return p, conns, fmt.Sprintf("%s over %s, %d connections", arm.Label, p, conns)
}

// checkProtos reports, before anything is launched, an arm whose protocol
// cannot drive the scenario's path: gRPC calls only what the stub's
// service has, /wait and /cpu.
func (opts ScenarioOptions) checkProtos(sc Scenario) error {
	for _, arm := range sc.Arms {
		p, conns, _ := opts.protoOf(arm)
		if _, err := checkProto(p, conns); err != nil {
			return fmt.Errorf("%s: arm %q: %w", sc.Name, arm.Label, err)
		}
		if checkURIs(p, "http://127.0.0.1"+sc.Path) != nil {
			return fmt.Errorf("%w: scenario %s, arm %q: over grpc its path %s is no method of the stub's, whose Wait and CPU are /wait and /cpu",
				ErrConfig, sc.Name, arm.Label, sc.Path)
		}
	}
	return nil
}

// eachRun runs n loads (levels or rates, named by load) through every arm
// of sc, a fresh target for each run, stopped before the next.
func eachRun[R any](ctx context.Context, sc Scenario, l Launcher, opts ScenarioOptions, n int, load func(int) string,
	run func(ctx context.Context, t Target, arm Arm, i int, label string) (R, error)) ([]R, error) {
	if l == nil {
		return nil, ErrNoLauncher
	}
	var results []R
	for ai, arm := range sc.Arms {
		for i := range n {
			// Launcher, sidecar and stub may share this process. Its
			// resident memory would keep the previous run's peak, and
			// the next run would read it as its own.
			debug.FreeOSMemory()
			label := fmt.Sprintf("[%d/%d] %s %s %s", ai*n+i+1, len(sc.Arms)*n, sc.Name, arm.Label, load(i))
			res, err := func() (R, error) {
				t, stop, err := l.Launch(ctx, arm)
				if err != nil {
					var zero R
					return zero, fmt.Errorf("launch: %w", err)
				}
				defer stop()
				return run(ctx, t, arm, i, label)
			}()
			if err != nil {
				return results, fmt.Errorf("%s: %w", label, err)
			}
			results = append(results, res)
		}
	}
	return results, nil
}

// Scenarios returns the experiments the rig knows, closed-loop then
// open-loop, freshly built so callers may change them. Their defaults fit
// a 2-core machine with an open-file limit of 20000: at c2000 the rig, the
// sidecar and the stub together hold about 8000 descriptors.
func Scenarios() []Scenario {
	fixed := func(n int) Arm {
		return Arm{Label: fmt.Sprintf("fixed %d", n), Sidecar: Sidecar{Mode: "fixed", Workers: n}}
	}
	unbounded := Arm{Label: "unbounded", Sidecar: Sidecar{Mode: "unbounded"}}
	const hold = 200 * time.Millisecond
	return []Scenario{
		{
			Name: "crossover",
			Description: "a 200 ms downstream call behind a fixed pool of 200 and behind unbounded admission: " +
				"the fixed pool pins throughput at 200 / 0.2 s = 1000 rps while latency grows; unbounded keeps scaling",
			Path:   "/wait?ms=200",
			Levels: []int{50, 100, 200, 500, 1000, 2000},
			Arms:   []Arm{fixed(200), unbounded},
			// c2000 through 200 workers takes 2 s per request: the queue is
			// full and turning over before the window opens.
			Warmup: 3 * time.Second, Window: 5 * time.Second,
		},
		{
			Name:        "fairfight",
			Description: "a fixed pool sized to the load (1000) against unbounded admission: the gap is a tuning gap",
			Path:        "/wait?ms=200",
			Levels:      []int{1000, 2000},
			Arms:        []Arm{fixed(1000), unbounded},
			Warmup:      3 * time.Second, Window: 5 * time.Second,
		},
		{
			Name: "pool",
			Description: "every request holds one of a pool of db connections for 200 ms: the ceiling moves to the pool, " +
				"10 / 0.2 s = 50 rps or 100 / 0.2 s = 500 rps, whatever the admission policy",
			Path:   "/db?ms=200",
			Levels: []int{50, 100, 200},
			Arms: []Arm{
				{Label: "fixed 200, pool 10", Sidecar: Sidecar{Mode: "fixed", Workers: 200},
					Stub: stub.Config{DBPool: 10}, Capacity: Capacity{Limit: 10, Hold: hold}},
				{Label: "unbounded, pool 10", Sidecar: Sidecar{Mode: "unbounded"},
					Stub: stub.Config{DBPool: 10}, Capacity: Capacity{Limit: 10, Hold: hold}},
				{Label: "unbounded, pool 100", Sidecar: Sidecar{Mode: "unbounded"},
					Stub: stub.Config{DBPool: 100}, Capacity: Capacity{Limit: 100, Hold: hold}},
			},
			// Pool 10 at c200 takes 4 s per request.
			Warmup: 4 * time.Second, Window: 5 * time.Second,
		},
		{
			Name: "cpu",
			Description: "about a millisecond of pure CPU per request: both modes meet the same ceiling, " +
				"the cores, and cheaper concurrency changes nothing",
			Path:   "/cpu?iters=300000",
			Levels: []int{2, 8, 32, 128, 512},
			Arms:   []Arm{fixed(200), unbounded},
			Warmup: 2 * time.Second, Window: 5 * time.Second,
		},
		{
			Name: "memory",
			Description: "every request holds 256 KiB for a second: in unbounded mode memory grows with the " +
				"concurrency admitted, in fixed mode it stays at what 200 requests hold",
			Path:   "/mem?kb=256&ms=1000",
			Levels: []int{100, 250, 500, 1000},
			Arms:   []Arm{fixed(200), unbounded},
			// Fixed 200 at c1000 takes 5 s per request: the warm-up must
			// outlast one turn of the queue.
			Warmup: 6 * time.Second, Window: 5 * time.Second,
		},
		{
			Name: "hidden",
			Description: "an unbounded sidecar in front of an upstream with a hidden pool of 50 workers: throughput " +
				"stops at 50 / 0.2 s = 250 rps with no error, and the sidecar's service time shows where requests wait",
			Path:   "/wait?ms=200",
			Levels: []int{25, 50, 100, 200},
			Arms: []Arm{
				{Label: "unbounded, stub pool 50", Sidecar: Sidecar{Mode: "unbounded"},
					Stub: stub.Config{Pool: 50}, Capacity: Capacity{Limit: 50, Hold: hold}},
				{Label: "unbounded, no stub pool", Sidecar: Sidecar{Mode: "unbounded"}},
			},
			Warmup: 3 * time.Second, Window: 5 * time.Second,
		},
		hiddenPool(GRPC),
		hiddenPool(H2C),
		{
			Name: "protocols",
			Description: "what each protocol costs the sidecar: a 50 ms call through a fixed pool of 200 that never fills, " +
				"over HTTP/1.1 (a connection per user), h2c and gRPC (streams on 4 shared connections); " +
				"read the sidecar's CPU per request and memory across the arms at the same load",
			Path:   "/wait?ms=50",
			Levels: []int{50, 100},
			Arms: []Arm{
				{Label: "fixed 200", Sidecar: Sidecar{Mode: "fixed", Workers: 200}, Proto: HTTP1},
				{Label: "fixed 200", Sidecar: Sidecar{Mode: "fixed", Workers: 200}, Proto: H2C},
				{Label: "fixed 200", Sidecar: Sidecar{Mode: "fixed", Workers: 200}, Proto: GRPC},
			},
			// The CPU figure is read to 10 ms: a window of thousands of
			// requests reads it to about 1%.
			Warmup: 2 * time.Second, Window: 5 * time.Second,
		},
		{
			Name: "open",
			Description: "a 200 ms downstream call at a fixed arrival rate, behind a fixed pool of 200 " +
				"(queue of 2000, 1 s queue timeout) and behind unbounded admission: the fixed pool serves at most " +
				"200 / 0.2 s = 1000 rps, so at 1200 and 3000 rps its queue grows until requests time out in it or find it full; " +
				"unbounded holds about rate × 0.2 s in flight and serves the rate",
			Path:  "/wait?ms=200",
			Rates: []float64{800, 1200, 3000},
			Arms: []Arm{
				// The queue's bounds keep the rig's requests in flight at
				// about 2200 (2 descriptors each while queued, 4 in
				// service) under the default cap and the open-file limit.
				{Label: "fixed 200", Sidecar: Sidecar{Mode: "fixed", Workers: 200, QueueSize: 2000, QueueTimeout: time.Second}},
				{Label: "unbounded", Sidecar: Sidecar{Mode: "unbounded"}},
			},
			// At 1200 rps the fixed queue's wait grows by 1/6 s each second
			// and reaches the 1 s timeout 6 s into the load, inside the
			// window.
			Warmup: 3 * time.Second, Window: 5 * time.Second,
		},
	}
}

// hiddenPool is the pool scenario of an HTTP/2 protocol: an upstream with
// a hidden pool of 50 workers, 200 ms a call, behind a sidecar fixed at
// the pool and behind an unbounded one. Both serve 50 / 0.2 s = 250 rps
// once the users outnumber the pool; the fixed sidecar holds the excess
// in its own queue, where its metrics show the wait, the unbounded one
// passes it on to wait unseen inside the upstream, where only its service
// time grows. Over HTTP/2 every user is a stream on a few connections:
// what is measured is that loomgate queues streams, not connections.
func hiddenPool(p Proto) Scenario {
	const pool, hold = 50, 200 * time.Millisecond
	capacity := Capacity{Limit: pool, Hold: hold}
	what := map[Proto]string{GRPC: "unary gRPC calls", H2C: "plain HTTP/2 GETs (h2c)"}[p]
	return Scenario{
		Name: string(p),
		Description: fmt.Sprintf("%s to an upstream with a hidden pool of %d workers at 200 ms, streams on %d shared connections: "+
			"throughput stops at %d / 0.2 s = %d rps in both arms; fixed at the pool, the excess waits in loomgate's queue (its queue time); "+
			"unbounded, inside the upstream (loomgate's service time)", what, pool, DefaultConns, pool, pool*5),
		Path:   "/wait?ms=200",
		Levels: []int{25, 50, 100, 200},
		Arms: []Arm{
			{Label: "fixed 50, stub pool 50", Sidecar: Sidecar{Mode: "fixed", Workers: pool},
				Stub: stub.Config{Pool: pool}, Capacity: capacity, Proto: p},
			{Label: "unbounded, stub pool 50", Sidecar: Sidecar{Mode: "unbounded"},
				Stub: stub.Config{Pool: pool}, Capacity: capacity, Proto: p},
		},
		// c200 through 50 workers takes 0.8 s a call.
		Warmup: 3 * time.Second, Window: 5 * time.Second,
	}
}

// LookupScenario returns the scenario called name.
func LookupScenario(name string) (Scenario, bool) {
	for _, sc := range Scenarios() {
		if sc.Name == name {
			return sc, true
		}
	}
	return Scenario{}, false
}

// ScenarioNames lists the names LookupScenario knows, in order.
func ScenarioNames() []string {
	var names []string
	for _, sc := range Scenarios() {
		names = append(names, sc.Name)
	}
	return names
}
