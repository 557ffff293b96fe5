// Package overhead is the rig's comparison with peers, the overhead
// scenario. It answers what a sidecar costs per replica: the CPU
// it spends per request, the memory it holds per request held, and the
// latency it adds, beside HAProxy and nginx in front of the same upstream.
// Every part is a process of its own (the upstream is `loomgate stub`,
// the sidecar `loomgate proxy`, both this binary), so that each one's CPU
// and resident memory are its own, read from /proc.
//
// How each proxy is started and configured (loomgate, the bare fasthttp
// proxy, HAProxy, nginx) is in peers.go; the table in output.go.
package overhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loomgate/loomgate/bench"
	"github.com/loomgate/loomgate/bench/scrape"
)

// Config describes a run of the overhead scenario. Zero fields
// take the defaults given.
type Config struct {
	// Binary is the loomgate executable that runs the stub and the
	// sidecar. Required.
	Binary string
	// HAProxy, Nginx and Wrk are the tools' paths. If empty, they are
	// looked up in PATH, and an arm whose tool is missing is skipped with a
	// note; without wrk the rig's own closed loop makes the load.
	HAProxy, Nginx, Wrk string
	// NoWrk makes the rig drive every measurement, even with wrk found.
	NoWrk bool

	// Duration is each measurement's window, after a warm-up of a quarter
	// of it (at least a second). If zero, 8 s.
	Duration time.Duration
	// CPUConcurrency drives the CPU measurement, a small GET answered at
	// once. If zero, 50.
	CPUConcurrency int
	// CPURate is the arrival rate of the second CPU measurement, open loop
	// from the rig, the same small GET: a load the machine carries with
	// room to spare, where a request finds its process asleep more often
	// than at saturation and pays for waking it. If zero, 5000 rps.
	CPURate float64
	// Rounds is how many times each CPU figure is measured, the arms in
	// turn, so that a slow spell of a shared machine lands on every arm
	// alike; the median is reported, with the range. If zero, 3.
	Rounds int
	// LatencyLevels are the concurrencies of the latency measurement, on
	// LatencyDelay. If nil, 50 and 1000.
	LatencyLevels []int
	// LatencyDelay is the upstream's delay in the latency measurement:
	// long enough that the highest level does not saturate the machine,
	// so that what is measured is what a proxy adds, not its queue. If
	// zero, 100 ms.
	LatencyDelay time.Duration
	// Held is how many requests the memory measurement holds, and
	// HoldDelay how long the upstream holds each. If zero, 4000 and 1 s:
	// at 200 ms, 4000 connections ask 20000 rps of two cores, and fewer
	// than 4000 are held at any instant.
	Held      int
	HoldDelay time.Duration
	// FixedWorkers is the fixed mode's pool in the memory measurement:
	// Held - FixedWorkers wait in the queue. If zero, 200.
	FixedWorkers int

	// Progress receives a line per measurement. If nil, nothing.
	Progress io.Writer
}

// Result is a run of the overhead scenario.
type Result struct {
	// Machine says where it ran: cores and CPU model.
	Machine string
	// Load says what drove it: wrk or the rig.
	Load string
	// Rows are direct, loomgate, bare fasthttp, HAProxy and nginx, those
	// that ran.
	Rows []Row
	// Skipped says which arms did not run, and why.
	Skipped []string
	// StubRSS is the upstream's resident memory after the run, bytes.
	StubRSS int64
	// RigRPS and WrkRPS are the rig's and wrk's throughput against the
	// upstream directly with CPUConcurrency users, so that a reader sees
	// whether the rig could be the bottleneck (WrkRPS 0 without wrk).
	RigRPS, WrkRPS float64

	Config Config
}

// Row is one arm's figures.
type Row struct {
	Name string
	// CPUPerRequest is the process's CPU time (user + system) per request
	// at CPUConcurrency, the median of the rounds, and CPURange their
	// lowest and highest; for direct, the upstream's own. RPS is the
	// median throughput it was measured at.
	CPUPerRequest time.Duration
	CPURange      [2]time.Duration
	RPS           float64
	// CPUAtRate and CPUAtRateRange are the same at CPURate.
	CPUAtRate      time.Duration
	CPUAtRateRange [2]time.Duration
	// Latency is p50 and p99 at each of LatencyLevels.
	Latency []LatencyPoint
	// RSSUnbounded and RSSFixed are the highest resident memory with Held
	// requests held: all in flight, and FixedWorkers in flight with the
	// rest queued (0: the arm has no such mode). HeldUnbounded and
	// HeldFixed are the requests held on average over that window
	// (throughput × HoldDelay).
	RSSUnbounded, RSSFixed   int64
	HeldUnbounded, HeldFixed float64
	// Idle is the resident memory before any load.
	Idle int64
}

// LatencyPoint is p50 and p99 at one concurrency.
type LatencyPoint struct {
	Concurrency int
	P50, P99    time.Duration
}

func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = 8 * time.Second
	}
	if c.CPUConcurrency == 0 {
		c.CPUConcurrency = 50
	}
	if c.CPURate == 0 {
		c.CPURate = 5000
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.LatencyLevels == nil {
		c.LatencyLevels = []int{50, 1000}
	}
	if c.LatencyDelay == 0 {
		c.LatencyDelay = 100 * time.Millisecond
	}
	if c.Held == 0 {
		c.Held = 4000
	}
	if c.HoldDelay == 0 {
		c.HoldDelay = time.Second
	}
	if c.FixedWorkers == 0 {
		c.FixedWorkers = 200
	}
	return c
}

func (c Config) warmup() time.Duration { return max(c.Duration/4, time.Second) }

// Run runs the overhead scenario.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	res := Result{Config: cfg, Machine: machine()}
	if runtime.GOOS != "linux" {
		return res, errors.New("bench: the overhead scenario reads each process's CPU and memory from /proc, which needs Linux")
	}
	if cfg.Binary == "" {
		return res, fmt.Errorf("%w: no loomgate binary to run the stub and the sidecar", bench.ErrConfig)
	}
	progress := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "overhead: "+format+"\n", a...)
		}
	}
	look := func(path, name string) string {
		if path != "" {
			return path
		}
		p, err := exec.LookPath(name)
		if err != nil {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s: not installed (Debian package %s)", name, name))
			return ""
		}
		return p
	}
	haproxy, nginx := look(cfg.HAProxy, "haproxy"), look(cfg.Nginx, "nginx")
	wrk := ""
	if !cfg.NoWrk {
		wrk = look(cfg.Wrk, "wrk")
	}
	load := &loader{wrk: wrk}
	res.Load = "the rig's closed loop"
	if wrk != "" {
		res.Load = "wrk"
	}
	dir, err := os.MkdirTemp("", "loomgate-overhead-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	stubAddr, err := bench.FreeAddr()
	if err != nil {
		return res, err
	}
	stub, err := startProc(dir, "stub", nil, cfg.Binary, "stub", "--listen", stubAddr)
	if err != nil {
		return res, err
	}
	defer stub.Stop()
	if err := bench.WaitListening(ctx, stubAddr, 10*time.Second); err != nil {
		return res, fmt.Errorf("stub: %w", err)
	}

	// The rig against wrk on the same target: is the load the bottleneck?
	direct := "http://" + stubAddr
	if wrk != "" {
		w, err := load.run(ctx, direct+"/wait?ms=0", cfg.CPUConcurrency, cfg.Duration)
		if err != nil {
			return res, err
		}
		r, err := (&loader{}).run(ctx, direct+"/wait?ms=0", cfg.CPUConcurrency, cfg.Duration)
		if err != nil {
			return res, err
		}
		res.WrkRPS, res.RigRPS = w.rps, r.rps
		progress("direct c%d: wrk %.0f rps, the rig %.0f rps", cfg.CPUConcurrency, w.rps, r.rps)
	}

	arms := []*arm{{name: "direct", upstreamOnly: true}}
	arms = append(arms, &arm{name: "loomgate", start: func(mode string) (*bench.Proc, string, error) {
		return startLoomgate(ctx, dir, cfg, stubAddr, mode)
	}})
	arms = append(arms, &arm{name: "bare fasthttp", noFixed: true, start: func(string) (*bench.Proc, string, error) {
		return startBare(ctx, dir, cfg, stubAddr)
	}})
	if haproxy != "" {
		arms = append(arms, &arm{name: "HAProxy", start: func(mode string) (*bench.Proc, string, error) {
			return startHAProxy(ctx, dir, haproxy, cfg, stubAddr, mode)
		}})
	}
	if nginx != "" {
		arms = append(arms, &arm{name: "nginx", noFixed: true, start: func(string) (*bench.Proc, string, error) {
			return startNginx(ctx, dir, nginx, cfg, stubAddr)
		}})
	}
	defer func() {
		for _, a := range arms {
			a.stop()
		}
	}()
	for _, a := range arms {
		if err := a.launch(stub, direct); err != nil {
			return res, fmt.Errorf("%s: %w", a.name, err)
		}
	}
	// CPU first, all arms running and taking turns, round after round.
	for round := range cfg.Rounds {
		for _, a := range arms {
			if err := a.measureCPU(ctx, cfg, load, round == 0, progress); err != nil {
				return res, fmt.Errorf("%s: %w", a.name, err)
			}
		}
	}
	for _, a := range arms {
		if err := a.measureRest(ctx, cfg, load, progress); err != nil {
			return res, fmt.Errorf("%s: %w", a.name, err)
		}
		a.stop()
		res.Rows = append(res.Rows, a.result())
	}
	res.StubRSS, _ = stub.RSS()
	return res, nil
}

// arm is one proxy in front of the stub, or the stub alone.
type arm struct {
	name         string
	upstreamOnly bool
	noFixed      bool
	// start launches the proxy in mode "unbounded" or "fixed" and returns
	// it and its base URL.
	start func(mode string) (*bench.Proc, string, error)

	// p serves target: the proxy, or for direct the stub.
	p      *bench.Proc
	target string
	row    Row
	// cpu and cpuAtRate are the rounds' figures, rps the throughputs.
	cpu, cpuAtRate []time.Duration
	rps            []float64
}

// launch starts the arm in unbounded mode, or for direct points it at the
// stub.
func (a *arm) launch(stub *bench.Proc, direct string) error {
	a.row = Row{Name: a.name}
	if a.upstreamOnly {
		a.p, a.target = stub, direct
	} else {
		var err error
		if a.p, a.target, err = a.start("unbounded"); err != nil {
			return err
		}
	}
	a.row.Idle, _ = a.p.RSS()
	return nil
}

// stop ends the arm's process; direct's is the stub, which is not its own.
func (a *arm) stop() {
	if !a.upstreamOnly && a.p != nil {
		a.p.Stop()
		a.p = nil
	}
}

// measureCPU takes one round of both CPU figures: closed loop at
// CPUConcurrency, and open loop at CPURate.
func (a *arm) measureCPU(ctx context.Context, cfg Config, load *loader, first bool, progress func(string, ...any)) error {
	url := a.target + "/wait?ms=0"
	if first {
		if _, err := load.run(ctx, url, cfg.CPUConcurrency, cfg.warmup()); err != nil {
			return err
		}
	}
	before, err := a.p.CPU()
	if err != nil {
		return err
	}
	out, err := load.run(ctx, url, cfg.CPUConcurrency, cfg.Duration)
	if err != nil {
		return err
	}
	after, err := a.p.CPU()
	if err != nil {
		return err
	}
	if out.requests == 0 {
		return fmt.Errorf("no request answered at c%d", cfg.CPUConcurrency)
	}
	perRequest := (after - before) / time.Duration(out.requests)
	a.cpu, a.rps = append(a.cpu, perRequest), append(a.rps, out.rps)

	atRate, err := cpuAtRate(ctx, a.p, url, cfg)
	if err != nil {
		return err
	}
	a.cpuAtRate = append(a.cpuAtRate, atRate)
	progress("%s: %v CPU per request at c%d (%.0f rps), %v at %.0f rps", a.name, perRequest, cfg.CPUConcurrency, out.rps, atRate, cfg.CPURate)
	return nil
}

// cpuAtRate is p's CPU per request with the rig sending to url at
// cfg.CPURate, open loop, over a window after a warm-up. The count is what
// was due in the window: the pacer keeps to its rate well above this one,
// and a run that fell behind is an error rather than a figure.
func cpuAtRate(ctx context.Context, p *bench.Proc, url string, cfg Config) (time.Duration, error) {
	type done struct {
		res bench.OpenResult
		err error
	}
	ch := make(chan done, 1)
	go func() {
		res, err := bench.RunOpen(ctx, bench.OpenConfig{URL: url, Rate: cfg.CPURate, Warmup: cfg.warmup(), Window: cfg.Duration})
		ch <- done{res, err}
	}()
	var r *done
	select {
	case <-time.After(cfg.warmup()):
	case d := <-ch:
		if d.err != nil {
			return 0, d.err
		}
		return 0, errors.New("the open-loop run ended before its window")
	}
	before, err := p.CPU()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	// The run ends with its window (plus the answers' tail): whichever
	// comes first closes the count.
	select {
	case <-time.After(cfg.Duration):
	case d := <-ch:
		r = &d
	}
	after, err := p.CPU()
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	if r == nil {
		d := <-ch
		r = &d
	}
	if r.err != nil {
		return 0, r.err
	}
	if r.res.Due == 0 || float64(r.res.Sent) < 0.99*float64(r.res.Due) {
		return 0, fmt.Errorf("at %.0f rps the rig sent %d of the %d requests due", cfg.CPURate, r.res.Sent, r.res.Due)
	}
	return (after - before) / time.Duration(cfg.CPURate*took.Seconds()), nil
}

// measureRest takes the latency and the memory figures.
func (a *arm) measureRest(ctx context.Context, cfg Config, load *loader, progress func(string, ...any)) error {
	for _, c := range cfg.LatencyLevels {
		url := fmt.Sprintf("%s/wait?ms=%d", a.target, cfg.LatencyDelay.Milliseconds())
		if _, err := load.run(ctx, url, c, cfg.warmup()); err != nil {
			return err
		}
		out, err := load.run(ctx, url, c, cfg.Duration)
		if err != nil {
			return err
		}
		a.row.Latency = append(a.row.Latency, LatencyPoint{Concurrency: c, P50: out.p50, P99: out.p99})
		progress("%s: c%d p50 %v, p99 %v", a.name, c, out.p50, out.p99)
	}
	if a.upstreamOnly {
		return nil
	}
	// Memory: a fresh process per mode, so that one's peak is not the
	// other's (nor the CPU rounds').
	hold := func(mode string) (int64, float64, error) {
		a.stop()
		var err error
		if a.p, a.target, err = a.start(mode); err != nil {
			return 0, 0, err
		}
		url := fmt.Sprintf("%s/wait?ms=%d", a.target, cfg.HoldDelay.Milliseconds())
		peak, out, err := holdAndSample(ctx, load, a.p, url, cfg.Held, cfg.warmup()+cfg.HoldDelay, cfg.Duration)
		// Little's law: what was held on average is throughput × time
		// held, in fixed mode only the pool's share (the rest waits).
		held := out.rps * cfg.HoldDelay.Seconds()
		progress("%s %s: %d requests held (%.0f on average), resident %.1f MiB", a.name, mode, cfg.Held, held, float64(peak)/(1<<20))
		return peak, held, err
	}
	var err error
	if a.row.RSSUnbounded, a.row.HeldUnbounded, err = hold("unbounded"); err != nil {
		return err
	}
	if !a.noFixed {
		if a.row.RSSFixed, a.row.HeldFixed, err = hold("fixed"); err != nil {
			return err
		}
	}
	return nil
}

// result is the arm's row, the CPU rounds reduced to their medians.
func (a *arm) result() Row {
	row := a.row
	row.CPUPerRequest, row.CPURange = medianAndRange(a.cpu)
	row.CPUAtRate, row.CPUAtRateRange = medianAndRange(a.cpuAtRate)
	if len(a.rps) > 0 {
		rps := slices.Clone(a.rps)
		slices.Sort(rps)
		row.RPS = rps[len(rps)/2]
	}
	return row
}

// medianAndRange is the median of ds (the upper one of an even count) and
// their lowest and highest.
func medianAndRange(ds []time.Duration) (time.Duration, [2]time.Duration) {
	if len(ds) == 0 {
		return 0, [2]time.Duration{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], [2]time.Duration{s[0], s[len(s)-1]}
}

// holdAndSample drives c users at url for warmup + length and returns the
// process's highest resident memory after the warm-up, read at the rig's
// usual cadence (scrape.PeakRSS).
func holdAndSample(ctx context.Context, load *loader, p *bench.Proc, url string, c int, warmup, length time.Duration) (int64, loadResult, error) {
	type done struct {
		out loadResult
		err error
	}
	ch := make(chan done, 1)
	start := time.Now()
	go func() {
		// One run throughout: a warm-up of its own would close its
		// connections and open as many again, and the process would be
		// measured after holding twice as many.
		out, err := load.run(ctx, url, c, warmup+length)
		ch <- done{out, err}
	}()
	from := start.Add(warmup)
	peak, _ := scrape.PeakRSS(ctx, from, scrape.Window{Start: from, End: from.Add(length)}, p.RSS)
	d := <-ch
	return peak, d.out, d.err
}

// loadResult is what one measurement's load saw.
type loadResult struct {
	requests int64
	rps      float64
	p50, p99 time.Duration
}

// loader drives closed-loop load with wrk when it has one, else the rig.
type loader struct{ wrk string }

func (l *loader) run(ctx context.Context, url string, c int, d time.Duration) (loadResult, error) {
	return l.runWarm(ctx, url, c, 0, d)
}

// runWarm loads url for warmup, not counted, then counts a window.
func (l *loader) runWarm(ctx context.Context, url string, c int, warmup, window time.Duration) (loadResult, error) {
	if l.wrk == "" {
		r, err := bench.Run(ctx, bench.Config{URL: url, Concurrency: c, Warmup: warmup, Window: window, Timeout: 30 * time.Second})
		if err != nil {
			return loadResult{}, err
		}
		return loadResult{requests: r.Requests, rps: r.RPS, p50: r.P50, p99: r.P99}, nil
	}
	if warmup > 0 {
		// wrk has no warm-up of its own: one run that is not counted,
		// then the measured one, on the same process, so that the
		// connections are the proxy's second.
		secs := int(max(warmup.Round(time.Second)/time.Second, 1))
		_ = exec.CommandContext(ctx, l.wrk, "-t2", fmt.Sprintf("-c%d", c), fmt.Sprintf("-d%ds", secs), "--timeout", "30s", url).Run()
	}
	secs := int(max(window.Round(time.Second)/time.Second, 1))
	cmd := exec.CommandContext(ctx, l.wrk, "-t2", fmt.Sprintf("-c%d", c), fmt.Sprintf("-d%ds", secs), "--timeout", "30s", "--latency", url)
	b, err := cmd.Output()
	if err != nil {
		return loadResult{}, fmt.Errorf("wrk: %w", err)
	}
	return parseWrk(b)
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m)`)
	wrkPercent  = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s|m)\s*$`)
)

// parseWrk reads wrk --latency's output.
func parseWrk(b []byte) (loadResult, error) {
	var r loadResult
	m := wrkRequests.FindSubmatch(b)
	if m == nil {
		return r, fmt.Errorf("wrk: no request count in its output: %q", b)
	}
	r.requests, _ = strconv.ParseInt(string(m[1]), 10, 64)
	secs := wrkDuration(m[2], m[3]).Seconds()
	if secs > 0 {
		r.rps = float64(r.requests) / secs
	}
	for _, p := range wrkPercent.FindAllSubmatch(b, -1) {
		d := wrkDuration(p[2], p[3])
		if string(p[1]) == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	return r, nil
}

func wrkDuration(num, unit []byte) time.Duration {
	f, _ := strconv.ParseFloat(string(num), 64)
	switch string(unit) {
	case "us":
		return time.Duration(f * float64(time.Microsecond))
	case "ms":
		return time.Duration(f * float64(time.Millisecond))
	case "m":
		return time.Duration(f * float64(time.Minute))
	}
	return time.Duration(f * float64(time.Second))
}

// machine says how many cores and which CPU, from /proc/cpuinfo.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s)", runtime.NumCPU(), model)
}
