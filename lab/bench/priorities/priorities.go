// Package priorities is the rig's priorities scenario: classes of
// closed-loop clients that share one upstream, each measured apart, through
// a sidecar in each arm, today's one FIFO queue first as the baseline.
//
// Its two cases are the ones priorities and fairness exist for. In flood,
// a pool of 20 at 50 ms (400 answers a second) serves 10 clients of a
// critical class (a demand of 200 a second, half the capacity) beside 200
// of a sheddable batch; in one FIFO queue the critical requests wait
// behind the batch. In tenants, five tenants named by a header share the
// same pool, one with ten times each other's clients; in one FIFO queue it
// takes its clients' share, ten times each other's.
package priorities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/stub"
)

// Class is closed-loop clients on one path, with a header of their own,
// or, with Rate, open arrivals there: requests a second, each sent when
// due whatever became of the ones before.
type Class struct {
	Name    string
	Path    string
	Header  map[string]string
	Clients int
	Rate    float64
}

// Arm is one configuration of the sidecar in front of the case's stub.
type Arm struct {
	Label   string
	Sidecar bench.Sidecar
	// Warmup, if longer than the run's, replaces it: adaptive mode first
	// seen at a peak needs its probe's seconds before it has a limit to
	// order, whatever warm-up the other arms are given.
	Warmup time.Duration
	// Only, if set, names the classes this arm runs: the others' load is
	// left out, as a baseline of those alone.
	Only []string
}

// Case is one experiment: its classes run side by side through each arm.
type Case struct {
	Name, Description string
	Stub              stub.Config
	Classes           []Class
	Arms              []Arm
	// Fairness reports Jain's index over the classes' goodput: they are
	// tenants that ought to get equal shares.
	Fairness bool
	// Warmup, if set, is every arm's, whatever the run's and the arms'
	// say: a case whose load is at its peak from the first second is
	// measured from about then.
	Warmup time.Duration
}

// Options bound a run. Zero fields take the defaults given.
type Options struct {
	// Warmup and Window are each arm's. If zero, 5 s and 15 s.
	Warmup, Window time.Duration
	// Progress receives a line per arm. If nil, nothing.
	Progress io.Writer
}

// ClassResult is what one class got in one arm's window.
type ClassResult struct {
	Class    string
	RPS      float64
	P50, P99 time.Duration
	// Errors are answers other than 2xx (the sidecar's 503s for a shed
	// request) and requests that failed, in the window.
	Errors int64
}

// Result is one arm of one case.
type Result struct {
	Case, Arm string
	Classes   []ClassResult
	// Total is the classes' goodput together.
	Total float64
	// Jain is Jain's fairness index over the classes' goodput (1 when
	// equal, 1/n when one class takes all), for a case with Fairness; 0
	// otherwise.
	Jain float64
}

const (
	pool  = 20
	delay = 50 // ms
)

// Cases returns the scenario's cases, freshly built.
func Cases() []Case {
	// Both classes' paths are served by the same hidden pool of 20: /wait
	// and /db (its own pool too large to matter) take 50 ms each.
	st := stub.Config{Pool: pool, DBPool: 100_000}
	critical := Class{Name: "critical", Path: "/wait?ms=" + strconv.Itoa(delay), Clients: 10}
	batch := Class{Name: "batch", Path: "/db?ms=" + strconv.Itoa(delay), Clients: 200}
	routes := "critical=/wait,batch=/db"
	fixed := bench.Sidecar{Mode: "fixed", Workers: pool, Routes: routes}
	with := func(s bench.Sidecar, priorities, shares string) bench.Sidecar {
		s.Priorities, s.Shares = priorities, shares
		return s
	}
	const levels, share = "critical=critical,batch=sheddable", "critical=50"
	adaptive := bench.Sidecar{Mode: "adaptive", Routes: routes}

	tenants := []Class{{Name: "noisy", Path: "/wait?ms=" + strconv.Itoa(delay), Header: map[string]string{"X-Tenant": "noisy"}, Clients: 100}}
	for _, name := range []string{"a", "b", "c", "d"} {
		tenants = append(tenants, Class{Name: name, Path: tenants[0].Path, Header: map[string]string{"X-Tenant": name}, Clients: 10})
	}
	fair := func(s bench.Sidecar) bench.Sidecar {
		s.FlowKey = "header:X-Tenant"
		return s
	}
	// A flood of open arrivals, which do not slow down when answers do, at
	// 2.5 times what a pool of 30 at 50 ms serves (600 a second), from the
	// first second, beside closed clients of a critical route.
	const floodPool, floodRate = 30, 1500
	floodStub := stub.Config{Pool: floodPool, DBPool: 100_000}
	checkout := Class{Name: "critical", Path: "/wait?ms=" + strconv.Itoa(delay), Clients: 20}
	search := Class{Name: "flood", Path: "/db?ms=" + strconv.Itoa(delay), Rate: floodRate}
	withQueue := func(s bench.Sidecar) bench.Sidecar {
		s.QueueTimeout = time.Second
		return s
	}
	return []Case{
		{
			Name: "open-flood",
			Description: fmt.Sprintf("a pool of %d at %d ms (%d rps); %d critical clients beside an open flood of %d a second on a sheddable route from the first second, queue waits bounded at 1 s",
				floodPool, delay, floodPool*1000/delay, checkout.Clients, floodRate),
			Stub:    floodStub,
			Classes: []Class{checkout, search},
			Warmup:  time.Second,
			Arms: []Arm{
				{Label: "critical alone, adaptive, priorities", Sidecar: withQueue(with(adaptive, levels, "")), Only: []string{checkout.Name}},
				{Label: "fixed 30, priorities", Sidecar: withQueue(with(bench.Sidecar{Mode: "fixed", Workers: floodPool, Routes: routes}, levels, ""))},
				{Label: "adaptive, priorities", Sidecar: withQueue(with(adaptive, levels, ""))},
			},
		},
		{
			Name: "flood",
			Description: fmt.Sprintf("a pool of %d at %d ms (%d rps) behind the sidecar; %d critical clients (half the capacity) beside %d on a sheddable batch",
				pool, delay, pool*1000/delay, critical.Clients, batch.Clients),
			Stub:    st,
			Classes: []Class{critical, batch},
			Arms: []Arm{
				{Label: "fixed 20, one FIFO queue", Sidecar: fixed},
				{Label: "fixed 20, priorities", Sidecar: with(fixed, levels, "")},
				{Label: "fixed 20, priorities, critical share 50%", Sidecar: with(fixed, levels, share)},
				{Label: "adaptive, one FIFO queue", Sidecar: adaptive, Warmup: 25 * time.Second},
				{Label: "adaptive, priorities, critical share 50%", Sidecar: with(adaptive, levels, share), Warmup: 25 * time.Second},
			},
		},
		{
			Name: "tenants",
			Description: fmt.Sprintf("five tenants by X-Tenant on a pool of %d at %d ms, one with %d clients, the others %d each",
				pool, delay, tenants[0].Clients, tenants[1].Clients),
			Stub:    st,
			Classes: tenants,
			Arms: []Arm{
				{Label: "fixed 20, one FIFO queue", Sidecar: bench.Sidecar{Mode: "fixed", Workers: pool}},
				{Label: "fixed 20, flows by X-Tenant", Sidecar: fair(bench.Sidecar{Mode: "fixed", Workers: pool})},
				{Label: "adaptive, flows by X-Tenant", Sidecar: fair(bench.Sidecar{Mode: "adaptive"}), Warmup: 25 * time.Second},
			},
			Fairness: true,
		},
	}
}

// Lookup returns the case called name.
func Lookup(name string) (Case, bool) {
	for _, c := range Cases() {
		if c.Name == name {
			return c, true
		}
	}
	return Case{}, false
}

// Run runs every arm of c in turn, a fresh stub and sidecar from l for
// each, its classes side by side, and returns a result per arm. If an arm
// fails it returns the results so far with the error.
func Run(ctx context.Context, c Case, l bench.Launcher, opts Options) ([]Result, error) {
	if l == nil {
		return nil, bench.ErrNoLauncher
	}
	warmup, window := opts.Warmup, opts.Window
	if warmup == 0 {
		warmup = 5 * time.Second
	}
	if window == 0 {
		window = 15 * time.Second
	}
	var results []Result
	for i, arm := range c.Arms {
		label := fmt.Sprintf("[%d/%d] %s %s", i+1, len(c.Arms), c.Name, arm.Label)
		w := max(warmup, arm.Warmup)
		if c.Warmup > 0 {
			w = c.Warmup
		}
		res, err := runArm(ctx, c, arm, l, w, window)
		if err != nil {
			return results, fmt.Errorf("%s: %w", label, err)
		}
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "%s: %s\n", label, res.summary())
		}
		results = append(results, res)
	}
	return results, nil
}

// runArm launches arm and drives every class of c through it at once, each
// a closed loop of its own, measured over the same window.
func runArm(ctx context.Context, c Case, arm Arm, l bench.Launcher, warmup, window time.Duration) (Result, error) {
	t, stop, err := l.Launch(ctx, bench.Arm{Label: arm.Label, Sidecar: arm.Sidecar, Stub: c.Stub})
	if err != nil {
		return Result{}, fmt.Errorf("launch: %w", err)
	}
	defer stop()
	var classes []Class
	for _, cl := range c.Classes {
		if len(arm.Only) == 0 || slices.Contains(arm.Only, cl.Name) {
			classes = append(classes, cl)
		}
	}
	byClass := make([]ClassResult, len(classes))
	errs := make([]error, len(classes))
	var wg sync.WaitGroup
	for i, cl := range classes {
		wg.Go(func() {
			if cl.Rate > 0 {
				r, err := bench.RunOpen(ctx, bench.OpenConfig{
					URL: t.URL + cl.Path, Rate: cl.Rate, Warmup: warmup, Window: window, Label: cl.Name,
				})
				byClass[i], errs[i] = ClassResult{Class: cl.Name, RPS: r.Throughput, P50: r.P50, P99: r.P99, Errors: r.Counts.Total() - r.Counts.OK}, err
				return
			}
			r, err := bench.Run(ctx, bench.Config{
				URL: t.URL + cl.Path, Concurrency: cl.Clients, Header: cl.Header,
				Warmup: warmup, Window: window, Label: cl.Name,
			})
			byClass[i], errs[i] = ClassResult{Class: cl.Name, RPS: r.RPS, P50: r.P50, P99: r.P99, Errors: r.Errors.Total()}, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	res := Result{Case: c.Name, Arm: arm.Label}
	var sum, squares float64
	for _, r := range byClass {
		res.Classes = append(res.Classes, r)
		sum += r.RPS
		squares += r.RPS * r.RPS
	}
	res.Total = sum
	if c.Fairness && squares > 0 {
		res.Jain = sum * sum / (float64(len(byClass)) * squares)
	}
	return res, nil
}

func (r Result) summary() string {
	var parts []string
	for _, c := range r.Classes {
		parts = append(parts, fmt.Sprintf("%s %.0f rps p99 %s", c.Class, c.RPS, roundMs(c.P99)))
	}
	s := strings.Join(parts, "; ") + fmt.Sprintf("; total %.0f rps", r.Total)
	if r.Jain > 0 {
		s += fmt.Sprintf("; Jain %.3f", r.Jain)
	}
	return s
}

func roundMs(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// WriteMarkdown writes the results as a table per case, a row per arm and
// a column pair (goodput, p99) per class.
func WriteMarkdown(w io.Writer, results []Result) error {
	var b strings.Builder
	for i := 0; i < len(results); {
		c := results[i].Case
		j := i
		for j < len(results) && results[j].Case == c {
			j++
		}
		rows := results[i:j]
		// The columns are the classes of the arm that ran the most: an
		// arm that ran some alone leaves the others' blank.
		cols := rows[0].Classes
		for _, r := range rows {
			if len(r.Classes) > len(cols) {
				cols = r.Classes
			}
		}
		fmt.Fprintf(&b, "### %s\n\n| arm |", c)
		for _, cl := range cols {
			fmt.Fprintf(&b, " %s rps | %s p99 |", cl.Class, cl.Class)
		}
		b.WriteString(" total rps |")
		fair := rows[0].Jain > 0
		if fair {
			b.WriteString(" Jain's index |")
		}
		b.WriteString("\n|---|")
		b.WriteString(strings.Repeat("---:|", 2*len(cols)+1))
		if fair {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s |", r.Arm)
			for _, col := range cols {
				i := slices.IndexFunc(r.Classes, func(cl ClassResult) bool { return cl.Class == col.Class })
				if i < 0 {
					b.WriteString(" – | – |")
					continue
				}
				fmt.Fprintf(&b, " %.0f | %s |", r.Classes[i].RPS, roundMs(r.Classes[i].P99))
			}
			fmt.Fprintf(&b, " %.0f |", r.Total)
			if fair {
				fmt.Fprintf(&b, " %.3f |", r.Jain)
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
		i = j
	}
	_, err := io.WriteString(w, b.String())
	return err
}
