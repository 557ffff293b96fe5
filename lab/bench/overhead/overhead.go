// Package overhead is the rig's comparison with peers, the overhead
// scenario. It answers what a sidecar costs per replica: the CPU
// it spends per request, the memory it holds per request held, and the
// latency it adds, beside HAProxy and nginx in front of the same upstream.
// Every part is a process of its own (the upstream is `loomgate stub`,
// the sidecar `loomgate proxy`, both this binary), so that each one's CPU
// and resident memory are its own, read from the kernel.
//
// How each proxy is started and configured (loomgate, the bare fasthttp
// proxy, HAProxy, nginx) is in peers.go; where each runs (CPU affinity, a
// CPU quota) in placement_linux.go; the tables in output.go.
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
	"sync"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/scrape"
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

	// CPUWindow is the window of each CPU measurement, closed loop and
	// open loop alike, after a warm-up of cpuWarmup. If zero, 1 s: the
	// CPU time is read in nanoseconds, so a short window costs no
	// precision, and on a shared machine the median of many short rounds
	// moved less from one run to the next than that of a few long ones
	// (12 rounds of 1 s against 6 of 2 s, at 5000 rps: 10% apart against
	// up to 30%).
	CPUWindow time.Duration
	// Duration is the window of the latency and memory measurements,
	// after a warm-up of a quarter of it (at least a second). If zero, 5 s.
	Duration time.Duration
	// CPUConcurrency drives the CPU measurement, a small GET answered at
	// once. If zero, 50.
	CPUConcurrency int
	// CPURate is the arrival rate of the second CPU measurement, open loop
	// from the rig, the same small GET: a load the machine carries with
	// room to spare, where a request finds its process asleep more often
	// than at saturation and pays for waking it. If zero, 5000 rps.
	CPURate float64
	// Rounds is how many rounds of the CPU figures are counted. In a
	// round every arm is measured in turn, each round starting one arm
	// further on, so that a slow spell of a shared machine lands on every
	// arm alike; a figure is the median of its rounds, with their range,
	// and a ratio the median of the rounds' own ratios, each taken
	// between two arms measured seconds apart. One more round runs first
	// and is not counted: it finds every process cold (its heap, its
	// connection pools, its pages not yet touched). If zero, 12.
	Rounds int
	// ProcessRounds is how many counted rounds one process of each proxy
	// serves before a fresh one takes over, with a turn of its own first
	// that is not counted. Two processes of the same binary differ by a
	// few percent for the whole of their lives (where their memory
	// landed), and one process a run made that a difference between
	// runs. If zero, 4: three processes in 12 rounds.
	ProcessRounds int
	// Shared lets the kernel place every process on any CPU. If false,
	// and this process may run on at least two CPUs, the proxy under test
	// runs alone on one CPU, and the load, the rig and the upstream on
	// another: every arm gets the same placement, none competes with the
	// load for its CPU, and each sizes itself for the one CPU it has (Go's
	// GOMAXPROCS, HAProxy's threads), as in a container given one CPU.
	// Left to the kernel, a proxy's threads and the load's move between
	// the CPUs differently from one run to the next, and so do the figures.
	Shared bool
	// Procs adds the GOMAXPROCS comparison: loomgate with 1 and 2 Ps, and
	// HAProxy, on CPUs shared with the load and the upstream as a
	// sidecar's are with its service, then loomgate with 1 and 2 Ps under
	// a CPU quota of Quota (when a cgroup can be made here).
	Procs bool
	// Protocols adds the HTTP/2 comparison: CPU per call of h2c GETs and
	// unary gRPC calls through loomgate, a bare Go proxy of HTTP/2
	// (net/http's ReverseProxy) and HAProxy, HTTP/2 on both sides of
	// each, placed as the HTTP/1.1 arms are.
	Protocols bool
	// Quota is the quota arms' CPU quota, in CPUs. If zero, 0.5: below 2
	// CPUs Go's default GOMAXPROCS is 2, above what the quota grants.
	Quota float64
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
	// Placement says which CPUs the processes ran on.
	Placement string
	// Rows are direct, loomgate, bare fasthttp, HAProxy and nginx, those
	// that ran.
	Rows []Row
	// Protocols is the HTTP/2 comparison (Config.Protocols), h2c then
	// gRPC.
	Protocols []ProtoRows
	// Procs are the GOMAXPROCS comparison's arms (Config.Procs), CPU and
	// p99 only, and ProcsNotes what it could not do.
	Procs      []Row
	ProcsNotes []string
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
	// median throughput it was measured at, P99 the median p99.
	CPUPerRequest time.Duration
	CPURange      [2]time.Duration
	RPS           float64
	P99           time.Duration
	// CPUAtRate, CPUAtRateRange and P99AtRate are the same at CPURate.
	CPUAtRate      time.Duration
	CPUAtRateRange [2]time.Duration
	P99AtRate      time.Duration
	// CPURounds and CPUAtRateRounds are the counted rounds' figures, in
	// the order the rounds ran, for the ratios between arms round by round;
	// 0 for a round without the figure: Lost rounds at CPUConcurrency,
	// where the load got no answer, and LostAtRate at CPURate, where the
	// rig could not keep to the rate (or had no turn), three turns in a row.
	CPURounds, CPUAtRateRounds []time.Duration
	Lost, LostAtRate           int
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
	if c.CPUWindow == 0 {
		c.CPUWindow = time.Second
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.CPUConcurrency == 0 {
		c.CPUConcurrency = 50
	}
	if c.CPURate == 0 {
		c.CPURate = 5000
	}
	if c.Rounds == 0 {
		c.Rounds = 12
	}
	if c.Quota == 0 {
		c.Quota = 0.5
	}
	if c.ProcessRounds == 0 {
		c.ProcessRounds = 4
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

// cpuWarmup precedes each CPU measurement: the arm sat idle while the
// others were measured, and its first requests after a pause pay for
// waking it and for pages given back in the meantime.
const cpuWarmup = 300 * time.Millisecond

// place is where a process runs: on one CPU if pinned, else wherever the
// kernel puts it; in a CPU quota's cgroup if group is set.
type place struct {
	pinned bool
	cpu    int
	group  *quotaGroup
}

// Run runs the overhead scenario.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	res := Result{Config: cfg, Machine: machine()}
	if runtime.GOOS != "linux" {
		return res, errors.New("bench: the overhead scenario reads each process's CPU and memory from the kernel, which needs Linux")
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
	dir, err := os.MkdirTemp("", "loomgate-overhead-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	// Where everything runs: see Config.Shared.
	var loadAt, proxyAt place
	cpus, _ := allowedCPUs()
	load := &loader{wrk: wrk, threads: max(len(cpus), 1)}
	res.Placement = fmt.Sprintf("every process on any of the %d CPUs", len(cpus))
	unpin := func() {}
	if !cfg.Shared {
		if len(cpus) < 2 {
			res.Placement += " (one CPU allowed: nothing to pin)"
		} else if restore, err := pinSelf(cpus[0]); err != nil {
			res.Placement += fmt.Sprintf(" (cannot pin: %v)", err)
		} else {
			unpin = sync.OnceFunc(restore)
			defer unpin()
			loadAt = place{pinned: true, cpu: cpus[0]}
			proxyAt = place{pinned: true, cpu: cpus[len(cpus)-1]}
			load.threads = 1
			res.Placement = fmt.Sprintf("each proxy alone on CPU %d; the load, the rig and the upstream on CPU %d", proxyAt.cpu, loadAt.cpu)
		}
	}
	res.Load = "the rig's closed loop"
	if wrk != "" {
		res.Load = fmt.Sprintf("wrk -t%d", load.threads)
	}
	progress("%s", res.Placement)

	stubAddr, err := bench.FreeAddr()
	if err != nil {
		return res, err
	}
	stub, err := startProc(dir, "stub", loadAt, nil, cfg.Binary, "stub", "--listen", stubAddr)
	if err != nil {
		return res, err
	}
	defer stub.Stop()
	if err := stub.WaitListening(ctx, stubAddr, 10*time.Second); err != nil {
		return res, fmt.Errorf("stub: %w", err)
	}

	// The rig against wrk on the same target: is the load the bottleneck?
	direct := "http://" + stubAddr
	if wrk != "" {
		w, err := load.run(ctx, direct+"/wait?ms=0", cfg.CPUConcurrency, cfg.CPUWindow)
		if err != nil {
			return res, err
		}
		r, err := (&loader{}).run(ctx, direct+"/wait?ms=0", cfg.CPUConcurrency, cfg.CPUWindow)
		if err != nil {
			return res, err
		}
		res.WrkRPS, res.RigRPS = w.rps, r.rps
		progress("direct c%d: wrk %.0f rps, the rig %.0f rps", cfg.CPUConcurrency, w.rps, r.rps)
	}

	arms := []*arm{{name: "direct", upstreamOnly: true}}
	arms = append(arms, &arm{name: "loomgate", start: func(mode string) (*bench.Proc, string, error) {
		return startLoomgate(ctx, dir, cfg, stubAddr, mode, proxyAt, nil)
	}})
	arms = append(arms, &arm{name: "bare fasthttp", noFixed: true, start: func(string) (*bench.Proc, string, error) {
		return startBare(ctx, dir, cfg, stubAddr, proxyAt)
	}})
	if haproxy != "" {
		arms = append(arms, &arm{name: "HAProxy", start: func(mode string) (*bench.Proc, string, error) {
			return startHAProxy(ctx, dir, haproxy, cfg, stubAddr, mode, proxyAt)
		}})
	}
	if nginx != "" {
		arms = append(arms, &arm{name: "nginx", noFixed: true, start: func(string) (*bench.Proc, string, error) {
			return startNginx(ctx, dir, nginx, cfg, stubAddr, proxyAt)
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
	if err := cpuRounds(ctx, arms, cfg, load, progress); err != nil {
		return res, err
	}
	for _, a := range arms {
		if err := a.measureRest(ctx, cfg, load, progress); err != nil {
			return res, fmt.Errorf("%s: %w", a.name, err)
		}
		a.stop()
		res.Rows = append(res.Rows, a.result())
	}
	progressRatios(progress, res.Rows, cfg)
	if cfg.Protocols {
		if res.Protocols, err = runProtocols(ctx, cfg, dir, haproxy, stubAddr, proxyAt, progress); err != nil {
			return res, fmt.Errorf("HTTP/2 comparison: %w", err)
		}
	}
	res.StubRSS, _ = stub.RSS()
	stub.Stop()

	if cfg.Procs {
		// The GOMAXPROCS comparison shares the CPUs, the rig's included.
		unpin()
		shared := &loader{wrk: wrk, threads: max(len(cpus), 1)}
		res.Procs, res.ProcsNotes, err = runProcs(ctx, cfg, dir, haproxy, shared, progress)
		if err != nil {
			return res, fmt.Errorf("GOMAXPROCS comparison: %w", err)
		}
	}
	return res, nil
}

// runProcs is the GOMAXPROCS comparison (Config.Procs), on a stub of its
// own: every process may run on any CPU, as a sidecar shares its node's
// with its service.
func runProcs(ctx context.Context, cfg Config, dir, haproxy string, load *loader, progress func(string, ...any)) ([]Row, []string, error) {
	var notes []string
	stubAddr, err := bench.FreeAddr()
	if err != nil {
		return nil, nil, err
	}
	stub, err := startProc(dir, "stub-shared", place{}, nil, cfg.Binary, "stub", "--listen", stubAddr)
	if err != nil {
		return nil, nil, err
	}
	defer stub.Stop()
	if err := stub.WaitListening(ctx, stubAddr, 10*time.Second); err != nil {
		return nil, nil, fmt.Errorf("stub: %w", err)
	}
	loomgate := func(name string, procs int, at place) *arm {
		env := []string{fmt.Sprintf("GOMAXPROCS=%d", procs)}
		return &arm{name: name, start: func(mode string) (*bench.Proc, string, error) {
			return startLoomgate(ctx, dir, cfg, stubAddr, mode, at, env)
		}}
	}
	arms := []*arm{loomgate("loomgate, GOMAXPROCS=1", 1, place{}), loomgate("loomgate, GOMAXPROCS=2", 2, place{})}
	if haproxy != "" {
		arms = append(arms, &arm{name: "HAProxy", start: func(mode string) (*bench.Proc, string, error) {
			return startHAProxy(ctx, dir, haproxy, cfg, stubAddr, mode, place{})
		}})
	}
	group, err := newQuotaGroup(cfg.Quota)
	if err != nil {
		notes = append(notes, fmt.Sprintf("no CPU quota arm: %v", err))
	} else {
		// Removed once its processes have ended, below.
		defer func() {
			if err := group.remove(); err != nil {
				progress("cannot remove the quota's cgroup: %v", err)
			}
		}()
		quota := fmt.Sprintf("%.0f%% CPU quota", 100*cfg.Quota)
		arms = append(arms,
			loomgate("loomgate, GOMAXPROCS=1, "+quota, 1, place{group: group}),
			loomgate("loomgate, GOMAXPROCS=2, "+quota, 2, place{group: group}))
	}
	// Deferred after the group's removal, so run before it.
	defer func() {
		for _, a := range arms {
			a.stop()
		}
	}()
	direct := "http://" + stubAddr
	for _, a := range arms {
		if err := a.launch(stub, direct); err != nil {
			return nil, notes, fmt.Errorf("%s: %w", a.name, err)
		}
	}
	if err := cpuRounds(ctx, arms, cfg, load, progress); err != nil {
		return nil, notes, err
	}
	rows := make([]Row, len(arms))
	for i, a := range arms {
		a.stop()
		rows[i] = a.result()
	}
	return rows, notes, nil
}

// cpuRounds measures the arms' CPU figures, Rounds counted after one that
// is not, the arms in turn (see Config.Rounds).
func cpuRounds(ctx context.Context, arms []*arm, cfg Config, load *loader, progress func(string, ...any)) error {
	for round := range cfg.Rounds + 1 {
		if round > 1 && (round-1)%cfg.ProcessRounds == 0 {
			if err := relaunch(ctx, arms, cfg, load, progress); err != nil {
				return err
			}
		}
		for i := range arms {
			a := arms[(round+i)%len(arms)]
			s, err := a.measureCPU(ctx, cfg, load)
			// The load and the rig share their CPU with the upstream, and
			// on a shared machine with whatever else runs there: a turn in
			// which the load got no answer, or the rig could not keep to
			// its rate, is taken again, not counted.
			for again := 0; busy(err) && again < 2; again++ {
				progress("%s: %v; again", a.name, err)
				s, err = a.measureCPU(ctx, cfg, load)
			}
			if busy(err) {
				// Three turns in a row: the machine is busy with more than
				// this run. The round goes without the figure rather than
				// the run without its figures; the table says so. Without
				// an answer at c50 there was no turn at the rate either.
				progress("%s: %v; round %d goes without the figure", a.name, err, round)
				if errors.Is(err, errNoAnswer) {
					s = sample{}
					if round > 0 {
						a.row.Lost++
					}
				}
				s.cpuAtRate, s.p99AtRate, err = 0, 0, nil
				if round > 0 {
					a.row.LostAtRate++
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
			counted := "round " + strconv.Itoa(round)
			if round == 0 {
				counted = "first round, not counted"
			} else {
				a.samples = append(a.samples, s)
			}
			progress("%s (%s): %v CPU per request at c%d (%.0f rps, p99 %v), %v at %.0f rps (p99 %v)", a.name, counted,
				s.cpu, cfg.CPUConcurrency, s.rps, s.p99, s.cpuAtRate, cfg.CPURate, s.p99AtRate)
		}
	}
	return nil
}

// relaunch replaces each proxy's process with a fresh one (see
// Config.ProcessRounds), and gives each a turn that is not counted: a new
// process is as cold as the first round found the first.
func relaunch(ctx context.Context, arms []*arm, cfg Config, load *loader, progress func(string, ...any)) error {
	for _, a := range arms {
		if a.upstreamOnly {
			continue
		}
		a.stop()
		var err error
		if a.p, a.target, err = a.begin("unbounded"); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	for _, a := range arms {
		if a.upstreamOnly {
			continue
		}
		// Only the warmth counts here; a busy turn is no reason to stop.
		if _, err := a.measureCPU(ctx, cfg, load); err != nil && !busy(err) {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	progress("a fresh process of each proxy, warmed by a turn not counted")
	return nil
}

// progressRatios prints each arm's CPU ratios to HAProxy's and the bare
// proxy's, with their ranges, as soon as they are known.
func progressRatios(progress func(string, ...any), rows []Row, cfg Config) {
	refs := map[string]*Row{}
	for i := range rows {
		refs[rows[i].Name] = &rows[i]
	}
	for _, r := range rows {
		for _, ref := range []string{"HAProxy", "bare fasthttp"} {
			h := refs[ref]
			if h == nil || r.Name == ref {
				continue
			}
			progress("%s × %s: %s at c%d, %s at %.0f rps", r.Name, ref,
				ratioRange(r.CPURounds, h.CPURounds), cfg.CPUConcurrency, ratioRange(r.CPUAtRateRounds, h.CPUAtRateRounds), cfg.CPURate)
		}
	}
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
	p       *bench.Proc
	target  string
	row     Row
	samples []sample
}

// sample is one counted round's CPU figures.
type sample struct {
	cpu, p99             time.Duration
	rps                  float64
	cpuAtRate, p99AtRate time.Duration
}

// begin starts the arm's proxy in mode, again on a new address if it ends
// before it listens (see retried).
func (a *arm) begin(mode string) (*bench.Proc, string, error) {
	return retried(func() (*bench.Proc, string, error) { return a.start(mode) })
}

// launch starts the arm in unbounded mode, or for direct points it at the
// stub.
func (a *arm) launch(stub *bench.Proc, direct string) error {
	a.row = Row{Name: a.name}
	if a.upstreamOnly {
		a.p, a.target = stub, direct
	} else {
		var err error
		if a.p, a.target, err = a.begin("unbounded"); err != nil {
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
func (a *arm) measureCPU(ctx context.Context, cfg Config, load *loader) (sample, error) {
	var s sample
	url := a.target + "/wait?ms=0"
	// The warm-up is the rig's: wrk counts whole seconds only.
	if _, err := bench.Run(ctx, bench.Config{URL: url, Concurrency: cfg.CPUConcurrency, Window: cpuWarmup, Timeout: 30 * time.Second}); err != nil {
		return s, err
	}
	before, err := processCPU(a.p.Pid())
	if err != nil {
		return s, err
	}
	out, err := load.run(ctx, url, cfg.CPUConcurrency, cfg.CPUWindow)
	if err != nil {
		return s, err
	}
	after, err := processCPU(a.p.Pid())
	if err != nil {
		return s, err
	}
	if out.requests == 0 {
		return s, fmt.Errorf("%w at c%d", errNoAnswer, cfg.CPUConcurrency)
	}
	s.cpu, s.rps, s.p99 = time.Duration((after-before)/out.requests), out.rps, out.p99
	s.cpuAtRate, s.p99AtRate, err = cpuAtRate(ctx, a.p.Pid(), url, cfg)
	return s, err
}

// errBehind is a rig that did not keep to its rate, errNoAnswer a closed
// loop that got no answer in its window: on a machine busy with more than
// this run, a turn worth taking again.
var (
	errBehind   = errors.New("the rig fell behind")
	errNoAnswer = errors.New("no request answered")
)

func busy(err error) bool { return errors.Is(err, errBehind) || errors.Is(err, errNoAnswer) }

// cpuAtRate is pid's CPU per request, and the p99, with the rig sending
// to url at cfg.CPURate, open loop, over a window after a warm-up. The
// count is what was due in the window: the pacer keeps to its rate well
// above this one, and a run that fell behind is an error rather than a
// figure.
func cpuAtRate(ctx context.Context, pid int, url string, cfg Config) (time.Duration, time.Duration, error) {
	type done struct {
		res bench.OpenResult
		err error
	}
	ch := make(chan done, 1)
	go func() {
		res, err := bench.RunOpen(ctx, bench.OpenConfig{URL: url, Rate: cfg.CPURate, Warmup: cpuWarmup, Window: cfg.CPUWindow})
		ch <- done{res, err}
	}()
	var r *done
	select {
	case <-time.After(cpuWarmup):
	case d := <-ch:
		if d.err != nil {
			return 0, 0, d.err
		}
		return 0, 0, errors.New("the open-loop run ended before its window")
	}
	before, err := processCPU(pid)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	// The run ends with its window (plus the answers' tail): whichever
	// comes first closes the count.
	select {
	case <-time.After(cfg.CPUWindow):
	case d := <-ch:
		r = &d
	}
	after, err := processCPU(pid)
	if err != nil {
		return 0, 0, err
	}
	took := time.Since(start)
	if r == nil {
		d := <-ch
		r = &d
	}
	if r.err != nil {
		return 0, 0, r.err
	}
	if r.res.Due == 0 || float64(r.res.Sent) < 0.99*float64(r.res.Due) {
		return 0, 0, fmt.Errorf("%w: at %.0f rps it sent %d of the %d requests due", errBehind, cfg.CPURate, r.res.Sent, r.res.Due)
	}
	return time.Duration(float64(after-before) / (cfg.CPURate * took.Seconds())), r.res.P99, nil
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
		// Held on average, by Little's law, when the load holds what it
		// asks: every request in unbounded mode (fewer, those on their
		// way), the pool in fixed mode.
		want := float64(cfg.Held)
		if mode == "fixed" {
			want = float64(cfg.FixedWorkers)
		}
		var peak int64
		var held float64
		for try := 1; ; try++ {
			a.stop()
			var err error
			if a.p, a.target, err = a.begin(mode); err != nil {
				return 0, 0, err
			}
			url := fmt.Sprintf("%s/wait?ms=%d", a.target, cfg.HoldDelay.Milliseconds())
			var out loadResult
			peak, out, err = holdAndSample(ctx, load, a.p, url, cfg.Held, cfg.warmup()+cfg.HoldDelay, cfg.Duration)
			if err != nil {
				return 0, 0, err
			}
			// Little's law: what was held on average is throughput × time
			// held, in fixed mode only the pool's share (the rest waits).
			held = out.rps * cfg.HoldDelay.Seconds()
			progress("%s %s: %d requests held (%.0f on average), resident %.1f MiB", a.name, mode, cfg.Held, held, float64(peak)/(1<<20))
			// A load that held less than half of it measured a process
			// that was not holding the requests (a machine too busy to
			// connect them all in time): taken again, twice at most; the
			// table shows what was held.
			if held >= want/2 || try == 3 {
				return peak, held, nil
			}
			progress("%s %s: fewer than half the requests held; again", a.name, mode)
		}
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
	var rps []float64
	var p99, p99AtRate []time.Duration
	for _, s := range a.samples {
		row.CPURounds = append(row.CPURounds, s.cpu)
		row.CPUAtRateRounds = append(row.CPUAtRateRounds, s.cpuAtRate)
		rps = append(rps, s.rps)
		p99, p99AtRate = append(p99, s.p99), append(p99AtRate, s.p99AtRate)
	}
	row.CPUPerRequest, row.CPURange = medianAndRange(row.CPURounds)
	row.CPUAtRate, row.CPUAtRateRange = medianAndRange(row.CPUAtRateRounds)
	row.P99, _ = medianAndRange(p99)
	row.P99AtRate, _ = medianAndRange(p99AtRate)
	if len(rps) > 0 {
		slices.Sort(rps)
		row.RPS = rps[len(rps)/2]
	}
	return row
}

// medianAndRange is the median of ds (the upper one of an even count) and
// their lowest and highest, lost rounds (0) left out.
func medianAndRange(ds []time.Duration) (time.Duration, [2]time.Duration) {
	s := slices.DeleteFunc(slices.Clone(ds), func(d time.Duration) bool { return d == 0 })
	if len(s) == 0 {
		return 0, [2]time.Duration{}
	}
	slices.Sort(s)
	return s[len(s)/2], [2]time.Duration{s[0], s[len(s)-1]}
}

// roundRatios are xs[i] / refs[i], round by round: two arms measured
// seconds apart share a slow spell that the medians of their rounds
// taken apart would not.
func roundRatios(xs, refs []time.Duration) []float64 {
	var r []float64
	for i := range min(len(xs), len(refs)) {
		// A round either arm lost pairs nothing.
		if xs[i] > 0 && refs[i] > 0 {
			r = append(r, float64(xs[i])/float64(refs[i]))
		}
	}
	return r
}

// ratioRange is the median of the rounds' ratios with their range,
// "1.38 (1.30–1.45)", the median alone when the range is one figure, or
// "" when there is none.
func ratioRange(xs, refs []time.Duration) string {
	r := roundRatios(xs, refs)
	if len(r) == 0 {
		return ""
	}
	slices.Sort(r)
	med := fmt.Sprintf("%.2f", r[len(r)/2])
	lo, hi := fmt.Sprintf("%.2f", r[0]), fmt.Sprintf("%.2f", r[len(r)-1])
	if lo == hi {
		return med
	}
	return fmt.Sprintf("%s (%s–%s)", med, lo, hi)
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
// threads is wrk's -t: one per CPU the load may use, more would only
// take turns on it. If zero, 2.
type loader struct {
	wrk     string
	threads int
}

func (l *loader) run(ctx context.Context, url string, c int, window time.Duration) (loadResult, error) {
	if l.wrk == "" {
		r, err := bench.Run(ctx, bench.Config{URL: url, Concurrency: c, Window: window, Timeout: 30 * time.Second})
		if err != nil {
			return loadResult{}, err
		}
		return loadResult{requests: r.Requests, rps: r.RPS, p50: r.P50, p99: r.P99}, nil
	}
	threads := 2
	if l.threads > 0 {
		threads = l.threads
	}
	// wrk will not run more threads than connections.
	threads = min(threads, c)
	secs := int(max(window.Round(time.Second)/time.Second, 1))
	cmd := exec.CommandContext(ctx, l.wrk, fmt.Sprintf("-t%d", threads), fmt.Sprintf("-c%d", c), fmt.Sprintf("-d%ds", secs), "--timeout", "30s", "--latency", url)
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
