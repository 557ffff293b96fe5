package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/loomgate/loomgate/stub"
)

// Scenario is an experiment: one path on the stub, driven at each level of
// concurrency through each arm in turn.
type Scenario struct {
	Name        string
	Description string

	// Path is requested on the target, e.g. "/wait?ms=200".
	Path string

	// Levels are the concurrencies, each a separate run.
	Levels []int

	// Arms are the configurations compared, run one after the other.
	Arms []Arm

	// Warmup and Window are the scenario's defaults, sized so that the
	// slowest level reaches its steady state before the window opens.
	Warmup, Window time.Duration
}

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
}

// Sidecar is the part of a sidecar's configuration an arm varies. Zero
// fields leave the sidecar's defaults (the README lists them).
type Sidecar struct {
	// Mode is "fixed" or "unbounded".
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
	return env
}

// Target is where a launched arm answers.
type Target struct {
	// URL is the base URL traffic goes to (the sidecar's traffic
	// listener, or the stub itself), without a path.
	URL string
	// AdminURL is the sidecar's admin listener, empty without a sidecar.
	AdminURL string
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
	// Levels replaces the scenario's levels. If nil, the scenario's.
	Levels []int
	// Warmup and Window replace the scenario's. If zero, the scenario's.
	Warmup, Window time.Duration
	// Timeout bounds each request. If zero, 30 s.
	Timeout time.Duration
	// Progress receives progress lines. If nil, nothing is written.
	Progress io.Writer
}

// RunScenario runs every level of sc through every arm, launching a fresh
// target for each run, and returns a Result per run in order: arms in
// turn, levels ascending within an arm. If a run fails it returns the
// results so far with the error.
func RunScenario(ctx context.Context, sc Scenario, l Launcher, opts ScenarioOptions) ([]Result, error) {
	if l == nil {
		return nil, ErrNoLauncher
	}
	levels := sc.Levels
	if opts.Levels != nil {
		levels = opts.Levels
	}
	warmup, window := sc.Warmup, sc.Window
	if opts.Warmup > 0 {
		warmup = opts.Warmup
	}
	if opts.Window > 0 {
		window = opts.Window
	}
	total := len(sc.Arms) * len(levels)
	var results []Result
	for ai, arm := range sc.Arms {
		for li, c := range levels {
			// Launcher, sidecar and stub may share this process. Its
			// resident memory would keep the previous run's peak, and
			// the next run would read it as its own.
			debug.FreeOSMemory()

			label := fmt.Sprintf("[%d/%d] %s %s c%d", ai*len(levels)+li+1, total, sc.Name, arm.Label, c)
			res, err := runArm(ctx, sc, arm, l, Config{
				Concurrency: c, Warmup: warmup, Window: window, Timeout: opts.Timeout,
				Progress: opts.Progress, Label: label,
			})
			if err != nil {
				return results, fmt.Errorf("%s: %w", label, err)
			}
			results = append(results, res)
		}
	}
	return results, nil
}

func runArm(ctx context.Context, sc Scenario, arm Arm, l Launcher, cfg Config) (Result, error) {
	t, stop, err := l.Launch(ctx, arm)
	if err != nil {
		return Result{}, fmt.Errorf("launch: %w", err)
	}
	defer stop()
	cfg.URL = t.URL + sc.Path
	cfg.AdminURL = t.AdminURL
	cfg.UpstreamRSS = t.UpstreamRSS
	cfg.Capacity = arm.Capacity
	res, err := Run(ctx, cfg)
	if err != nil {
		return res, err
	}
	res.Scenario, res.Arm = sc.Name, arm.Label
	return res, nil
}

// Scenarios returns the experiments the rig knows, freshly built so callers
// may change them. Their defaults fit a 2-core machine with an open-file
// limit of 20000: at c2000 the rig, the sidecar and the stub together hold
// about 8000 descriptors.
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
