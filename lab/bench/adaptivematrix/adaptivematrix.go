// Package adaptivematrix is the side-by-side proof of adaptive mode,
// `loomgate bench --scenario adaptive`: cases whose truth is known by
// construction (a hidden pool, one that changes size, none, a dependency
// that slows, at once or by steps, spread service times, two routes of
// different cost on one pool, CPU, open arrivals above capacity after a
// calm start or from the first second), each played through a real
// sidecar in front of a real stub for every arm: loomgate's adaptive
// controller, a limit fixed at the truth (the oracle), no limit, and the
// reference controllers of package reference. Per case and arm it measures
// goodput, latency, rejections, the limit over time and how soon it stood
// near the truth, and judges adaptive mode against its goals.
package adaptivematrix

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/stub"
)

// Arm names.
const (
	Adaptive  = "adaptive"
	Oracle    = "oracle"
	Unbounded = "unbounded"
	Envoy     = "envoy"
	Gradient2 = "gradient2"
)

// Arms lists every arm, in the tables' order.
func Arms() []string { return []string{Adaptive, Oracle, Unbounded, Envoy, Gradient2} }

// The controllers `loomlab proxy` plugs in by bench.Sidecar.Controller.
const (
	ControllerEnvoy     = "envoy"
	ControllerGradient2 = "gradient2"
	// ControllerPoolOracle sets the limit to the stub's pool, read from
	// its /metrics as it changes: the oracle of a case whose truth moves.
	ControllerPoolOracle = "pool-oracle"
)

// Options tune Run.
type Options struct {
	// Arms to run; if empty, all.
	Arms []string
	// Scale multiplies every phase's duration: below 1 for a quicker,
	// rougher run. If zero, 1.
	Scale float64
	// Rounds is how many times each case runs through its arms, each
	// round starting one arm further on; an arm's figures are then its
	// rounds' means (see merge). If zero, 1.
	Rounds int
	// Progress receives a line per run. If nil, nothing is written.
	Progress io.Writer
}

// Point is the limit and the requests in flight at one moment of a run,
// as the sidecar's metrics said.
type Point struct {
	At       time.Duration // since the case started
	Limit    float64       // 0 when none
	InFlight float64
}

// Result is one arm's run of one case.
type Result struct {
	Case, Arm string
	// SameAs names the arm whose run this one is: the oracle of a case
	// where no limit is right is the unbounded arm.
	SameAs string

	Duration time.Duration
	// Goodput is the 2xx answers per second of the run.
	Goodput  float64
	P50, P99 time.Duration
	// OK, Rejected (503) and Failed (other answers, timeouts, broken
	// connections) count the requests answered in the run.
	OK, Rejected, Failed int64

	// Converged is, per phase, how long after its start the limit stood
	// right for the rest of it; -1 if it never did.
	Converged []time.Duration
	// PhaseLengths are the phases' durations.
	PhaseLengths []time.Duration
	// Lowest is the lowest limit set after the first (0 if none), and
	// Collapsed whether a limit went below a phase's floor: one set in the
	// phase, not the limit the phase began with while it still stands
	// (the upstream changed under it; how long it stood is the phase's
	// Converged).
	Lowest    float64
	Collapsed bool

	// Series is the limit over time, of the first round when there were
	// several.
	Series []Point

	// Rounds is how many runs the figures above come from, and Goodputs
	// and P99s each one's, in the order they ran: with more than one, the
	// figures are their means, the counts their sums, Converged each
	// phase's longest, Lowest the lowest and Collapsed whether any did.
	Rounds   int             `json:",omitempty"`
	Goodputs []float64       `json:",omitempty"`
	P99s     []time.Duration `json:",omitempty"`
}

// Limited reports whether the arm ever set a limit.
func (r Result) Limited() bool {
	if r.Lowest > 0 {
		return true // in some round, when there were several
	}
	for _, p := range r.Series {
		if p.Limit > 0 {
			return true
		}
	}
	return false
}

// Run runs each case through each arm, one after the other, and returns
// the results in order: cases in turn, arms in Arms order within a case.
func Run(ctx context.Context, cases []Case, l bench.Launcher, opts Options) ([]Result, error) {
	if l == nil {
		return nil, bench.ErrNoLauncher
	}
	if opts.Scale == 0 {
		opts.Scale = 1
	}
	rounds := max(opts.Rounds, 1)
	arms := opts.Arms
	if len(arms) == 0 {
		arms = Arms()
	}
	var results []Result
	for i, c := range cases {
		c = scaled(c, opts.Scale)
		// Two runs of one arm minutes apart differ by a few percent on
		// shared cores, as much as two arms may: with several rounds each
		// arm runs in every position, and a slow spell of the machine
		// falls on each in turn rather than on one.
		order := runOrder(c, arms)
		each := map[string][]Result{}
		for round := range rounds {
			for k := range order {
				arm := order[(k+round)%len(order)]
				at := ""
				if rounds > 1 {
					at = fmt.Sprintf(", round %d/%d", round+1, rounds)
				}
				say(opts.Progress, "[%d/%d] adaptive %s, %s%s: %s", i+1, len(cases), c.Name, arm, at, c.Description)
				r, err := runArm(ctx, c, arm, l)
				if err != nil {
					return results, fmt.Errorf("case %s, arm %s: %w", c.Name, arm, err)
				}
				say(opts.Progress, "[%d/%d] adaptive %s, %s%s: %.0f rps, p50 %s, p99 %s, %d rejected, %d failed, limit right after %s",
					i+1, len(cases), c.Name, arm, at, r.Goodput, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Rejected, r.Failed, convergedText(r))
				each[arm] = append(each[arm], r)
			}
		}
		byArm := map[string]Result{}
		for arm, rs := range each {
			byArm[arm] = merge(rs)
		}
		if c.Oracle == 0 && contains(arms, Oracle) {
			// No limit is right: the oracle is no limit, run once.
			r := byArm[Unbounded]
			r.Arm, r.SameAs = Oracle, Unbounded
			if !contains(arms, Unbounded) {
				r.SameAs = ""
			}
			byArm[Oracle] = r
		}
		for _, arm := range arms {
			if r, ok := byArm[arm]; ok {
				results = append(results, r)
			}
		}
	}
	return results, nil
}

// merge makes one Result of one arm's rounds of a case: the goodput and
// latencies their means, the counts their sums, each phase's convergence
// the slowest (never, if one never converged), the lowest limit the
// lowest, collapsed if one collapsed, the chart the first round's. A
// single round is returned as it is, without Rounds.
func merge(rs []Result) Result {
	if len(rs) == 1 {
		return rs[0]
	}
	m := rs[0]
	m.Rounds = len(rs)
	m.Converged = slices.Clone(m.Converged)
	m.Goodputs, m.P99s = nil, nil
	var goodput float64
	var duration, p50, p99 time.Duration
	m.OK, m.Rejected, m.Failed, m.Lowest = 0, 0, 0, 0
	limited := false
	for _, r := range rs {
		m.Goodputs = append(m.Goodputs, r.Goodput)
		m.P99s = append(m.P99s, r.P99)
		goodput += r.Goodput
		duration += r.Duration
		p50 += r.P50
		p99 += r.P99
		m.OK += r.OK
		m.Rejected += r.Rejected
		m.Failed += r.Failed
		for i, c := range r.Converged {
			if i < len(m.Converged) && m.Converged[i] >= 0 && (c < 0 || c > m.Converged[i]) {
				m.Converged[i] = c
			}
		}
		if r.Limited() && (!limited || r.Lowest < m.Lowest) {
			m.Lowest, limited = r.Lowest, true
		}
		m.Collapsed = m.Collapsed || r.Collapsed
	}
	n := len(rs)
	m.Goodput = goodput / float64(n)
	m.Duration = duration / time.Duration(n)
	m.P50, m.P99 = p50/time.Duration(n), p99/time.Duration(n)
	return m
}

// runOrder is the arms to launch for c: the oracle of a case where no
// limit is right is the unbounded arm, run once.
func runOrder(c Case, arms []string) []string {
	var run []string
	for _, arm := range arms {
		if arm == Oracle && c.Oracle == 0 {
			arm = Unbounded
		}
		if !contains(run, arm) {
			run = append(run, arm)
		}
	}
	return run
}

func scaled(c Case, scale float64) Case {
	phases := make([]Phase, len(c.Phases))
	for i, p := range c.Phases {
		p.Duration = time.Duration(float64(p.Duration) * scale)
		phases[i] = p
	}
	c.Phases = phases
	return c
}

// armConfig is the sidecar and stub an arm of c runs.
func armConfig(c Case, arm string) bench.Arm {
	sc := bench.Sidecar{Mode: "adaptive", QueueTimeout: c.QueueTimeout}
	switch arm {
	case Oracle:
		if c.FollowPool {
			sc.Controller = ControllerPoolOracle
		} else {
			sc = bench.Sidecar{Mode: "fixed", Workers: c.Oracle, QueueTimeout: c.QueueTimeout}
		}
	case Unbounded:
		sc = bench.Sidecar{Mode: "unbounded"}
	case Envoy:
		sc.Controller = ControllerEnvoy
	case Gradient2:
		sc.Controller = ControllerGradient2
	}
	return bench.Arm{Label: c.Name + " " + arm, Sidecar: sc, Stub: stub.Config{Pool: c.Pool}}
}

func runArm(ctx context.Context, c Case, arm string, l bench.Launcher) (Result, error) {
	r := Result{Case: c.Name, Arm: arm}
	t, stop, err := l.Launch(ctx, armConfig(c, arm))
	if err != nil {
		return r, fmt.Errorf("launch: %w", err)
	}
	defer stop()
	if c.FollowPool && t.UpstreamURL == "" {
		return r, errors.New("the launcher gives no upstream URL to resize the pool through")
	}
	d := newDriver(t.URL)
	defer d.close()

	start := time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []Point, 1)
	go func() { sampled <- sampleLimit(sampleCtx, t.AdminURL, start) }()

	var wg sync.WaitGroup
	phaseStarts := make([]time.Duration, len(c.Phases))
	for i, p := range c.Phases {
		phaseStarts[i] = time.Since(start)
		if p.Pool > 0 {
			if err := resize(ctx, t.UpstreamURL, p.Pool); err != nil {
				stopSampling()
				wg.Wait()
				return r, err
			}
		}
		pctx, cancel := context.WithTimeout(ctx, p.Duration)
		if p.Rate > 0 {
			d.open(pctx, &wg, p.Rate, p.Path)
		} else {
			for _, f := range p.Flows {
				d.closed(pctx, &wg, f.Path, f.Clients)
			}
		}
		<-pctx.Done()
		cancel()
		if ctx.Err() != nil {
			stopSampling()
			wg.Wait()
			return r, ctx.Err()
		}
	}
	r.Duration = time.Since(start)
	d.end.Store(start.Add(r.Duration).UnixNano())
	// Requests still out when the last phase ends are answered and
	// counted (a client request is cut at its timeout).
	wg.Wait()
	stopSampling()
	r.Series = <-sampled

	r.OK, r.Rejected, r.Failed = d.ok.Load(), d.rejected.Load(), d.failed.Load()
	r.Goodput = float64(r.OK) / r.Duration.Seconds()
	r.P50, r.P99 = d.quantile(50), d.quantile(99)
	r.judge(c, phaseStarts)
	return r, nil
}

// judge finds, per phase, when the limit came to stand right, and its
// lowest after it was first set.
func (r *Result) judge(c Case, starts []time.Duration) {
	limited := r.Limited()
	first := true
	for i, p := range c.Phases {
		from, to := starts[i], starts[i]+p.Duration
		if i+1 < len(starts) {
			to = starts[i+1]
		}
		converged := time.Duration(-1)
		var last time.Duration
		// The limit in force when the phase began, until it moves.
		heldOver, moved := 0.0, false
		for _, pt := range r.Series {
			if pt.At < from {
				heldOver = pt.Limit
			}
			if pt.At < from || pt.At >= to {
				continue
			}
			moved = moved || pt.Limit != heldOver
			last = pt.At
			// Unlimited arms are judged by whether no limit is right.
			ok := p.Truth.within(pt.Limit)
			switch {
			case ok && converged < 0:
				converged = pt.At - from
			case !ok:
				converged = -1
			}
			if limited && pt.Limit > 0 {
				if first || pt.Limit < r.Lowest {
					r.Lowest = pt.Limit
				}
				first = false
				if pt.Limit < p.Truth.floor() && moved {
					r.Collapsed = true
				}
			}
		}
		if last == 0 {
			converged = -1
		}
		r.Converged = append(r.Converged, converged)
		r.PhaseLengths = append(r.PhaseLengths, to-from)
	}
}

// resize sets the stub's pool through its /pool endpoint, directly: not
// through the sidecar, whose queue would delay it.
func resize(ctx context.Context, upstream string, size int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(upstream, "/")+"/pool?size="+strconv.Itoa(size), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("resize the pool to %d: %w", size, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("resize the pool to %d: %s", size, resp.Status)
	}
	return nil
}

// sampleEvery is how often the sidecar's limit is read.
const sampleEvery = 250 * time.Millisecond

// sampleLimit reads loomgate_limit and loomgate_in_flight from the
// sidecar's /metrics every sampleEvery until ctx ends.
func sampleLimit(ctx context.Context, admin string, start time.Time) []Point {
	var points []Point
	client := &http.Client{Timeout: 2 * time.Second}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return points
		case <-t.C:
		}
		at := time.Since(start)
		resp, err := client.Get(strings.TrimSuffix(admin, "/") + "/metrics")
		if err != nil {
			continue
		}
		p := Point{At: at}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue
			}
			switch name {
			case "loomgate_limit":
				p.Limit, _ = strconv.ParseFloat(value, 64)
			case "loomgate_in_flight":
				p.InFlight, _ = strconv.ParseFloat(value, 64)
			}
		}
		resp.Body.Close()
		points = append(points, p)
	}
}

// clientTimeout bounds each request of a closed loop; an open loop's is
// openTimeout from when the request was due.
const (
	clientTimeout = 30 * time.Second
	openTimeout   = 5 * time.Second
)

// driver sends the load and counts what comes back, over all phases of
// a run: one histogram of latencies, so that the run's percentiles are
// exact whatever its phases.
type driver struct {
	hc                   *fasthttp.HostClient
	base                 string
	ok, rejected, failed atomic.Int64
	// end is when the run ended (Unix ns), 0 before: answers after it
	// are not counted, so that goodput is over the run's duration.
	end atomic.Int64

	mu   sync.Mutex
	hist *hdrhistogram.Histogram
}

func newDriver(base string) *driver {
	addr := strings.TrimPrefix(base, "http://")
	return &driver{
		hc:   &fasthttp.HostClient{Addr: addr, MaxConns: 20000, ReadTimeout: clientTimeout, MaxIdleConnDuration: time.Minute},
		base: base,
		// Microseconds, 1 µs to 10 min, 3 significant digits.
		hist: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3),
	}
}

func (d *driver) close() { d.hc.CloseIdleConnections() }

// send makes one request, due at due, and counts it; it reports whether
// it was answered 2xx.
func (d *driver) send(path string, due time.Time, deadline time.Time) bool {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(d.base + path)
	err := d.hc.DoDeadline(req, resp, deadline)
	if end := d.end.Load(); end != 0 && time.Now().UnixNano() > end {
		return false
	}
	switch {
	case err == nil && resp.StatusCode()/100 == 2:
		d.ok.Add(1)
		lat := time.Since(due)
		d.mu.Lock()
		d.hist.RecordValue(max(int64(lat/time.Microsecond), 1))
		d.mu.Unlock()
		return true
	case err == nil && resp.StatusCode() == fasthttp.StatusServiceUnavailable:
		d.rejected.Add(1)
	default:
		d.failed.Add(1)
	}
	return false
}

// closed runs n clients on path until ctx ends, each sending its next
// request when its answer arrives (10 ms after one that was not 2xx, so
// that a rejecting sidecar is not spun against).
func (d *driver) closed(ctx context.Context, wg *sync.WaitGroup, path string, n int) {
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				now := time.Now()
				if !d.send(path, now, now.Add(clientTimeout)) {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// open sends requests on path at rate a second until ctx ends, each when
// it is due whatever became of the ones before, its latency counted from
// then.
func (d *driver) open(ctx context.Context, wg *sync.WaitGroup, rate float64, path string) {
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			return
		}
		wg.Go(func() { d.send(path, due, due.Add(openTimeout)) })
	}
}

func (d *driver) quantile(q float64) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return time.Duration(d.hist.ValueAtQuantile(q)) * time.Microsecond
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func convergedText(r Result) string {
	var parts []string
	for _, c := range r.Converged {
		if c < 0 {
			parts = append(parts, "never")
		} else {
			parts = append(parts, fmt.Sprintf("%.0fs", c.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

func say(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
