package bench

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"time"
)

// OpenScenario is an open-loop experiment: one path on the stub, driven at
// each arrival rate through each arm in turn.
type OpenScenario struct {
	Name        string
	Description string

	// Path is requested on the target, e.g. "/wait?ms=200".
	Path string

	// Rates are the arrival rates, requests per second, each a separate
	// run.
	Rates []float64

	// Arms are the configurations compared, run one after the other.
	Arms []Arm

	// Warmup and Window are the scenario's defaults.
	Warmup, Window time.Duration
}

// OpenScenarioOptions override an open scenario's defaults. Zero fields
// keep them.
type OpenScenarioOptions struct {
	// Rates replaces the scenario's rates. If nil, the scenario's.
	Rates []float64
	// Warmup and Window replace the scenario's. If zero, the scenario's.
	Warmup, Window time.Duration
	// Timeout bounds each request from its due time. If zero, 5 s.
	Timeout time.Duration
	// MaxInFlight caps the requests in flight. If zero,
	// DefaultMaxInFlight().
	MaxInFlight int
	// Progress receives progress lines. If nil, nothing is written.
	Progress io.Writer
}

// RunOpenScenario runs every rate of sc through every arm, launching a
// fresh target for each run, and returns a result per run in order: arms
// in turn, rates ascending within an arm. If a run fails it returns the
// results so far with the error.
func RunOpenScenario(ctx context.Context, sc OpenScenario, l Launcher, opts OpenScenarioOptions) ([]OpenResult, error) {
	if l == nil {
		return nil, ErrNoLauncher
	}
	rates := sc.Rates
	if opts.Rates != nil {
		rates = opts.Rates
	}
	warmup, window := sc.Warmup, sc.Window
	if opts.Warmup > 0 {
		warmup = opts.Warmup
	}
	if opts.Window > 0 {
		window = opts.Window
	}
	total := len(sc.Arms) * len(rates)
	var results []OpenResult
	for ai, arm := range sc.Arms {
		for ri, rate := range rates {
			// The previous run's memory would otherwise still be held
			// by this process when the next one starts.
			debug.FreeOSMemory()
			label := fmt.Sprintf("[%d/%d] %s %s %s rps", ai*len(rates)+ri+1, total, sc.Name, arm.Label, fmtRate(rate))
			res, err := runOpenArm(ctx, sc, arm, l, OpenConfig{
				Rate: rate, Warmup: warmup, Window: window, Timeout: opts.Timeout,
				MaxInFlight: opts.MaxInFlight, Progress: opts.Progress, Label: label,
			})
			if err != nil {
				return results, fmt.Errorf("%s: %w", label, err)
			}
			results = append(results, res)
		}
	}
	return results, nil
}

func runOpenArm(ctx context.Context, sc OpenScenario, arm Arm, l Launcher, cfg OpenConfig) (OpenResult, error) {
	t, stop, err := l.Launch(ctx, arm)
	if err != nil {
		return OpenResult{}, fmt.Errorf("launch: %w", err)
	}
	defer stop()
	cfg.URL = t.URL + sc.Path
	cfg.AdminURL = t.AdminURL
	res, err := RunOpen(ctx, cfg)
	if err != nil {
		return res, err
	}
	res.Scenario, res.Arm = sc.Name, arm.Label
	return res, nil
}

// OpenScenarios returns the open-loop experiments the rig knows, freshly
// built so callers may change them.
func OpenScenarios() []OpenScenario {
	return []OpenScenario{
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

// LookupOpenScenario returns the open-loop scenario called name.
func LookupOpenScenario(name string) (OpenScenario, bool) {
	for _, sc := range OpenScenarios() {
		if sc.Name == name {
			return sc, true
		}
	}
	return OpenScenario{}, false
}

// OpenScenarioNames lists the names LookupOpenScenario knows, in order.
func OpenScenarioNames() []string {
	var names []string
	for _, sc := range OpenScenarios() {
		names = append(names, sc.Name)
	}
	return names
}
