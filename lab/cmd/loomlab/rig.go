package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loomgate/loomgate/internal/cli"
	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/adaptivematrix"
	"github.com/loomgate/loomgate/lab/bench/advicematrix"
	"github.com/loomgate/loomgate/lab/bench/fleet"
	"github.com/loomgate/loomgate/lab/bench/overhead"
	"github.com/loomgate/loomgate/lab/bench/priorities"
	"github.com/loomgate/loomgate/lab/bench/report"
	"github.com/loomgate/loomgate/lab/stub"
)

// scenarioLauncher starts a stub and a sidecar for each run of a scenario:
// processes of their own (processes, in launch.go), or with --in-process
// both in this one. Scenarios need it; without it, bench runs only against
// a URL.
var scenarioLauncher bench.Launcher

// stubDrainTimeout is how long the stub lets requests in flight finish once
// asked to stop.
const stubDrainTimeout = 10 * time.Second

// runStub runs the experiment upstream until ctx ends.
func runStub(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return stubCommand(ctx, args, os.LookupEnv, stdout, stderr)
}

// stubFlag is a flag of `loomgate stub` and the STUB_* variable that sets
// its default.
type stubFlag struct {
	name, env string
}

func stubCommand(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loomgate stub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":8081", "address to serve on (STUB_LISTEN)")
	pool := fs.Int("pool", 0, "serve every request through a hidden FIFO pool of this many workers, 0 = none (STUB_POOL)")
	dbPool := fs.Int("db-pool", 10, "connections /db requests share (STUB_DB_POOL)")
	forward := fs.String("forward", "", "host:port: instead of answering, forward every request there through fasthttp's HostClient alone, no limit and no measurement: the bare proxy the overhead scenario compares loomgate with (STUB_FORWARD)")
	forwardH2C := fs.String("forward-h2c", "", "host:port: instead of answering, take HTTP/2 with prior knowledge (h2c, gRPC) and forward it there as h2c through net/http's ReverseProxy alone: the bare HTTP/2 proxy the overhead scenario compares loomgate with (STUB_FORWARD_H2C)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: loomgate stub [flags]

An upstream for experiments. Each request runs on its own goroutine unless
--pool is set.

  /wait?ms=N        block N ms (&to=M: a delay drawn evenly from N to M)
  /cpu?iters=N      N rounds of CPU work (about 3 ns each)
  /db?ms=N          hold one of --db-pool connections N ms, waiting FIFO
  /mem?kb=N&ms=M    allocate and touch N KiB, hold it M ms
  /pinned?ms=N      N ms inside one global critical section
  /mixed            15 + 180 + 5 ms in sequence
  /ws?ms=N&iters=M  WebSocket echo, each message after N ms and M rounds
  /pool?size=N      resize the --pool to N workers from now on
  /metrics          Prometheus: process memory, in flight, pools

HTTP/2 with prior knowledge (h2c) on the same port serves the same paths,
and gRPC: the health service, and loomgate.stub.v1.Stub's Wait and CPU,
whose StringValue request is a query ("ms=200", "iters=1000").

Every flag's default can also be set by the STUB_* variable named after it.

Flags:
`)
		fs.PrintDefaults()
	}

	// Variables are applied first, as defaults, so that flags win.
	for _, f := range []stubFlag{{"listen", "STUB_LISTEN"}, {"pool", "STUB_POOL"}, {"db-pool", "STUB_DB_POOL"}, {"forward", "STUB_FORWARD"}, {"forward-h2c", "STUB_FORWARD_H2C"}} {
		v, ok := lookupEnv(f.env)
		if !ok {
			continue
		}
		// Only the numeric flags can refuse a value.
		if err := fs.Set(f.name, v); err != nil {
			fmt.Fprintf(stderr, "loomgate stub: %s=%q: want a whole number, as --%s takes\n", f.env, v, f.name)
			return 2
		}
	}
	if exit, ok := cli.Parse(fs, args, stderr); !ok {
		return exit
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loomgate stub: unexpected argument %q; it takes only flags (loomgate stub -h)\n", fs.Arg(0))
		return 2
	}
	var bad []string
	if *pool < 0 {
		bad = append(bad, fmt.Sprintf("--pool %d: want 0 (no hidden pool) or more workers", *pool))
	}
	if *dbPool < 1 {
		bad = append(bad, fmt.Sprintf("--db-pool %d: want at least 1 connection", *dbPool))
	}
	if *forward != "" {
		if _, _, err := net.SplitHostPort(*forward); err != nil {
			bad = append(bad, fmt.Sprintf("--forward %q (or STUB_FORWARD): want host:port, e.g. 127.0.0.1:8081", *forward))
		}
	}
	if *forwardH2C != "" {
		if _, _, err := net.SplitHostPort(*forwardH2C); err != nil {
			bad = append(bad, fmt.Sprintf("--forward-h2c %q (or STUB_FORWARD_H2C): want host:port, e.g. 127.0.0.1:8081", *forwardH2C))
		}
		if *forward != "" {
			bad = append(bad, "--forward and --forward-h2c: want one of them; one forwards HTTP/1.1, the other HTTP/2")
		}
	}
	if len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(stderr, "loomgate stub:", b)
		}
		return 2
	}
	if *forwardH2C != "" {
		return forwardH2CCommand(ctx, *listen, *forwardH2C, stderr)
	}

	s, err := stub.New(stub.Config{
		DBPool:   *dbPool,
		Pool:     *pool,
		Forward:  *forward,
		ErrorLog: log.New(stderr, "loomgate stub: ", log.LstdFlags),
	})
	if err != nil {
		fmt.Fprintf(stderr, "loomgate stub: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate stub: --listen %s: %v\n", *listen, err)
		return 1
	}
	// The line the demo shows first of the stub: each pool said with what
	// it is, since a run of /wait never touches the db pool and a reader
	// would otherwise take it for a limit on the run.
	hidden := "no hidden pool: every request is served at once"
	if *pool > 0 {
		hidden = fmt.Sprintf("hidden pool of %d: every request waits in turn for one of %d workers, unseen from outside", *pool, *pool)
	}
	if *forward != "" {
		fmt.Fprintf(stderr, "loomgate stub: listening on %s, forwarding to %s\n", ln.Addr(), *forward)
	} else {
		fmt.Fprintf(stderr, "loomgate stub: listening on %s (db pool %d: connections that only /db requests hold, waiting in turn for one; %s)\n",
			ln.Addr(), *dbPool, hidden)
	}
	return serveUntilDone(ctx, func() error { return s.Serve(ln) }, s.Shutdown, stderr)
}

// serveUntilDone runs serve until it fails or ctx ends, then shuts it
// down, giving what is in flight stubDrainTimeout, and returns the
// command's exit status.
func serveUntilDone(ctx context.Context, serve func() error, shutdown func(context.Context) error, stderr io.Writer) int {
	served := make(chan error, 1)
	go func() { served <- serve() }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "loomgate stub: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), stubDrainTimeout)
	defer cancel()
	if err := shutdown(shutdownCtx); err != nil {
		fmt.Fprintf(stderr, "loomgate stub: stopped with requests still in flight after %s\n", stubDrainTimeout)
		return 1
	}
	<-served
	fmt.Fprintln(stderr, "loomgate stub: stopped")
	return 0
}

// forwardH2CCommand serves `loomgate stub --forward-h2c` until ctx ends.
func forwardH2CCommand(ctx context.Context, listen, to string, stderr io.Writer) int {
	srv, err := stub.NewH2CForwarder(to)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate stub: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate stub: --listen %s: %v\n", listen, err)
		return 1
	}
	fmt.Fprintf(stderr, "loomgate stub: listening on %s for h2c, forwarding to %s\n", ln.Addr(), to)
	return serveUntilDone(ctx, func() error { return srv.Serve(ln) }, srv.Shutdown, stderr)
}

// Defaults of `loomgate bench --url`; scenarios bring their own.
const (
	benchLevels  = "10,50,100"
	benchWarmup  = 2 * time.Second
	benchWindow  = 10 * time.Second
	benchTimeout = 30 * time.Second

	// benchOpenTimeout is --timeout's default with --rate, counted from
	// each request's due time: long enough for a sidecar's queue timeout
	// of a few seconds to answer first, short enough that a run ends soon
	// after its window.
	benchOpenTimeout = 5 * time.Second
)

// runBench drives a URL, or runs a scenario, and prints the results.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return benchCommand(ctx, args, scenarioLauncher, stdout, stderr)
}

func benchCommand(ctx context.Context, args []string, launcher bench.Launcher, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loomgate bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "", "URL every virtual user GETs: your service, or your sidecar in front of it")
	admin := fs.String("admin", "", "a loomgate sidecar's admin URL, e.g. http://127.0.0.1:9090, to read its queue and service time")
	levelsFlag := fs.String("c", "", "concurrency levels, comma-separated, one separate run each (default "+benchLevels+", or the scenario's)")
	ratesFlag := fs.String("rate", "", "open loop instead of -c: arrival rates in requests per second, comma-separated, one separate run each (default the scenario's)")
	maxInFlight := fs.Int("max-in-flight", 0, fmt.Sprintf("with --rate: most requests in flight, and so connections; more are counted as not sent (default %d, a sixth of the open-file limit)", bench.DefaultMaxInFlight()))
	warmup := fs.Duration("warmup", 0, "warm-up before each window (default "+benchWarmup.String()+", or the scenario's)")
	window := fs.Duration("window", 0, "measurement window of each level (default "+benchWindow.String()+", or the scenario's)")
	timeout := fs.Duration("timeout", 0, "longest a request may take before it counts as a timeout (default "+benchTimeout.String()+"; with --rate "+benchOpenTimeout.String()+", counted from when the request was due)")
	out := fs.String("out", "", "directory to write results.csv, results.json and report.html into")
	inProc := fs.Bool("in-process", false, "run a scenario's stub and sidecar in this process instead of as processes of their own (memory figures are then the whole process's)")
	scenarioName := fs.String("scenario", "", "run a scenario, which starts its own stub and sidecar, instead of --url: "+strings.Join(allScenarioNames(), ", ")+"; list describes them")
	caseNames := fs.String("cases", "", "with --scenario advice, adaptive or priorities: the cases to run, comma-separated (default all)")
	armNames := fs.String("arms", "", "with --scenario adaptive: the arms to run, comma-separated, from "+strings.Join(adaptivematrix.Arms(), ", ")+" (default all; a goal judged against a missing arm is not judged)")
	protoFlag := fs.String("proto", "", "protocol: http1, h2c (HTTP/2 with prior knowledge, a GET per request) or grpc (a unary call per request: the URL's path is the method, or /wait and /cpu for the stub's, and its query the request); with a scenario it replaces the arms' (default http1, or the scenario's)")
	conns := fs.Int("conns", 0, fmt.Sprintf("with --proto h2c or grpc: the connections every user's or request's streams share, as HTTP/2 clients share few (default %d)", bench.DefaultConns))
	rounds := fs.Int("rounds", 0, "with --scenario adaptive: run each case this many times, the arms in turn, each round starting one arm further on, and judge adaptive mode on the rounds' means (default 1)")
	h2 := fs.Bool("h2", false, "with --scenario overhead: also compare the CPU per call of HTTP/2 (h2c GETs and unary gRPC calls, prior knowledge on both sides) through loomgate, a bare Go proxy and HAProxy")
	procs := fs.Bool("procs", false, "with --scenario overhead: also compare loomgate with GOMAXPROCS 1 and 2 on shared CPUs, and under a CPU quota when a cgroup can be made")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: loomgate bench --url URL [flags]
       loomgate bench --url URL --rate R[,R2,...] [flags]
       loomgate bench --scenario NAME [flags]

Closed-loop load: C virtual users, each on its own keep-alive connection, no
think time; one separate run per level, a warm-up, then a window in which
only completed requests count. Progress goes to stderr, a markdown table and
a few sentences to stdout. Every row is checked against X = C / R and, when
the limit is known, X <= N / S; rows more than 10% off are flagged.

With --proto h2c or grpc, each user's requests are streams on --conns
connections shared by all, not a connection of its own; a gRPC call's
RESOURCE_EXHAUSTED or UNAVAILABLE counts as a 503 does.

With --rate, open-loop load instead: each request is sent when it is due,
rate per second, whether or not earlier ones were answered, on as many
connections as it takes up to --max-in-flight (requests past that are
counted as not sent), and its latency counts from when it was due. The
window's requests are followed to their answer, at most 5 s past the
window. With --admin, the sidecar's queue over time, its rejections, and
when the LoomgateQueueTimeHigh expression crossed 250 ms.

Flags:
`)
		fs.PrintDefaults()
	}
	if exit, ok := cli.Parse(fs, args, stderr); !ok {
		return exit
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "loomgate bench: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q; flags come as --name value (loomgate bench -h)", fs.Arg(0))
	}

	proto, err := bench.ParseProto(*protoFlag)
	if err != nil {
		return fail("--proto %q: want http1, h2c or grpc", *protoFlag)
	}
	if !setFlags(fs)["proto"] {
		proto = "" // the scenario's arms say
	}
	switch {
	case *conns < 0 || setFlags(fs)["conns"] && *conns == 0:
		return fail("--conns %d: want at least 1 connection", *conns)
	case *conns > 0 && *scenarioName == "" && (proto == "" || proto == bench.HTTP1):
		return fail("--conns goes with --proto h2c or grpc: over HTTP/1.1 every user has a connection of its own")
	}

	if *inProc && launcher != nil {
		launcher = inProcess{}
	}
	open := *ratesFlag != ""
	if open && *levelsFlag != "" {
		return fail("-c and --rate are exclusive: -c is closed-loop users, --rate open-loop arrivals per second")
	}
	if *maxInFlight < 0 || setFlags(fs)["max-in-flight"] && *maxInFlight == 0 {
		return fail("--max-in-flight %d: want at least 1 request", *maxInFlight)
	}
	var rates []float64
	if open {
		var err error
		if rates, err = parseRates(*ratesFlag); err != nil {
			return fail("--rate %q: %v", *ratesFlag, err)
		}
	}
	if *timeout == 0 {
		*timeout = benchTimeout
		if open || isOpenScenario(*scenarioName) {
			*timeout = benchOpenTimeout
		}
	}

	var levels []int
	if *levelsFlag != "" {
		var err error
		if levels, err = parseLevels(*levelsFlag); err != nil {
			return fail("-c %q: %v", *levelsFlag, err)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--warmup", *warmup}, {"--window", *window}, {"--timeout", *timeout}} {
		if d.v < 0 {
			return fail("%s %s: want a duration that is not negative, e.g. 5s", d.name, d.v)
		}
	}

	if (proto != "" || *conns > 0) && slices.Contains([]string{adviceScenario, overheadScenario, fleetScenario, prioritiesScenario}, *scenarioName) {
		return fail("--scenario %s speaks HTTP/1.1; --proto and --conns go with --url and the other scenarios", *scenarioName)
	}
	switch {
	case *rounds < 0 || setFlags(fs)["rounds"] && *rounds == 0:
		return fail("--rounds %d: want at least 1 round", *rounds)
	case *rounds > 0 && *scenarioName != adaptiveScenario:
		return fail("--rounds goes with --scenario adaptive")
	}
	if *scenarioName == adviceScenario {
		return runAdviceMatrix(ctx, launcher, *caseNames, stdout, stderr)
	}
	if *scenarioName == adaptiveScenario {
		return runAdaptiveMatrix(ctx, launcher, *caseNames, *armNames, *rounds, *out, stdout, stderr)
	}
	if *scenarioName == prioritiesScenario {
		switch {
		case *target != "" || *admin != "":
			return fail("--scenario %s starts its own stub and sidecar; --url and --admin do not go with it", prioritiesScenario)
		case open || *levelsFlag != "":
			return fail("--scenario %s has its own clients per class; -c and --rate do not go with it", prioritiesScenario)
		}
		return runPriorities(ctx, launcher, *caseNames, *warmup, *window, *out, stdout, stderr)
	}
	if *caseNames != "" {
		return fail("--cases goes with --scenario advice, adaptive or priorities")
	}
	if *scenarioName == overheadScenario {
		switch {
		case *target != "" || *admin != "":
			return fail("--scenario %s starts its own upstream and proxies; --url and --admin do not go with it", overheadScenario)
		case open || *levelsFlag != "":
			return fail("--scenario %s has its own loads; -c and --rate do not go with it", overheadScenario)
		}
		return runOverhead(ctx, overhead.Config{Duration: *window, Procs: *procs, Protocols: *h2}, *out, stdout, stderr)
	}
	if *procs {
		return fail("--procs goes with --scenario %s", overheadScenario)
	}
	if *h2 {
		return fail("--h2 goes with --scenario %s", overheadScenario)
	}
	if *scenarioName == fleetScenario {
		switch {
		case *target != "" || *admin != "":
			return fail("--scenario %s starts its own replicas, HAProxy and Prometheus; --url and --admin do not go with it", fleetScenario)
		case open || *levelsFlag != "":
			return fail("--scenario %s has its own steps of demand; -c and --rate do not go with it", fleetScenario)
		}
		return runFleet(ctx, *window, *out, stdout, stderr)
	}

	openSc, found := bench.LookupScenario(*scenarioName)
	isOpen, isClosed := found && openSc.Open(), found && !openSc.Open()
	switch {
	case *scenarioName == "list":
		for _, sc := range bench.Scenarios() {
			if sc.Open() {
				fmt.Fprintf(stdout, "%-10s open loop: %s\n           path %s, rates %s rps, arms: %s\n",
					sc.Name, sc.Description, sc.Path, joinRates(sc.Rates), armLabels(sc.Arms))
				continue
			}
			fmt.Fprintf(stdout, "%-10s %s\n           path %s, levels %s, arms: %s\n",
				sc.Name, sc.Description, sc.Path, joinInts(sc.Levels), armLabels(sc.Arms))
		}
		fmt.Fprintf(stdout, "%-10s the advice matrix: cases with known truth, each judged and its recommendation measured; --cases picks some\n", adviceScenario)
		for _, c := range advicematrix.Cases() {
			fmt.Fprintf(stdout, "           %s: %s\n", c.Name, c.Description)
		}
		fmt.Fprintf(stdout, "%-10s adaptive mode side by side with a limit fixed at the truth, none, and Envoy's and Netflix's controllers; --cases picks some\n", adaptiveScenario)
		for _, c := range adaptivematrix.Cases() {
			fmt.Fprintf(stdout, "           %s: %s\n", c.Name, c.Description)
		}
		fmt.Fprintf(stdout, "%-10s %s\n", overheadScenario, overheadDescription)
		fmt.Fprintf(stdout, "%-10s %s\n", fleetScenario, fleetDescription)
		fmt.Fprintf(stdout, "%-10s %s; --cases picks some\n", prioritiesScenario, prioritiesDescription)
		for _, c := range priorities.Cases() {
			fmt.Fprintf(stdout, "           %s: %s\n", c.Name, c.Description)
		}
		return 0
	case *maxInFlight != 0 && !open && !isOpen:
		return fail("--max-in-flight goes with --rate or an open-loop scenario (%s)", strings.Join(openScenarioNames(), ", "))
	case isOpen && *target != "":
		return fail("--url and --scenario are exclusive: a scenario starts its own stub and sidecar")
	case isOpen && *admin != "":
		return fail("--admin goes with --url: a scenario reads the sidecar it starts")
	case isOpen && *levelsFlag != "":
		return fail("--scenario %s is open-loop: give it --rate, not -c", openSc.Name)
	case isOpen:
		if launcher == nil {
			fmt.Fprintf(stderr, "loomgate bench: --scenario %s needs a launcher to start its stub and sidecar, which this build lacks; run loomgate stub and loomgate proxy yourself and use --url, --admin and --rate\n", openSc.Name)
			return 1
		}
		results, err := bench.RunOpenScenario(ctx, openSc, launcher, bench.ScenarioOptions{
			Rates: rates, Warmup: *warmup, Window: *window, Timeout: *timeout, MaxInFlight: *maxInFlight, Progress: stderr,
			Proto: proto, Conns: *conns,
		})
		if errors.Is(err, bench.ErrConfig) && len(results) == 0 {
			return fail("%v", err)
		}
		rep := report.Report[bench.OpenResult]{Title: "loomgate bench: " + openSc.Name, Description: openSc.Description, Generated: time.Now(), Results: results}
		return finish(rep, err, *out, stdout, stderr)
	case isClosed && open:
		return fail("--scenario %s is closed-loop; --rate goes with --url or an open-loop scenario (%s)", *scenarioName, strings.Join(openScenarioNames(), ", "))
	case *scenarioName != "" && *target != "":
		return fail("--url and --scenario are exclusive: a scenario starts its own stub and sidecar")
	case *scenarioName != "" && *admin != "":
		return fail("--admin goes with --url: a scenario reads the sidecar it starts")
	case *scenarioName != "":
		sc, ok := bench.LookupScenario(*scenarioName)
		if !ok {
			return fail("--scenario %q: want one of %s, or list", *scenarioName, strings.Join(allScenarioNames(), ", "))
		}
		if launcher == nil {
			fmt.Fprintf(stderr, "loomgate bench: --scenario %s needs a launcher to start its stub and sidecar, which this build lacks; run loomgate stub and loomgate proxy yourself and use --url and --admin\n", sc.Name)
			return 1
		}
		results, err := bench.RunScenario(ctx, sc, launcher, bench.ScenarioOptions{
			Levels: levels, Warmup: *warmup, Window: *window, Timeout: *timeout, Progress: stderr,
			Proto: proto, Conns: *conns,
		})
		if errors.Is(err, bench.ErrConfig) && len(results) == 0 {
			return fail("%v", err)
		}
		rep := report.Report[bench.Result]{Title: "loomgate bench: " + sc.Name, Description: sc.Description, Generated: time.Now(), Results: results}
		return finish(rep, err, *out, stdout, stderr)
	case *target == "":
		return fail("give --url URL (your service, or its sidecar) or --scenario NAME (%s)", strings.Join(allScenarioNames(), ", "))
	}

	if err := checkURL(*target); err != nil {
		return fail("--url %q: %v", *target, err)
	}
	if *admin != "" {
		if err := checkURL(*admin); err != nil {
			return fail("--admin %q: %v", *admin, err)
		}
	}
	if *warmup == 0 {
		*warmup = benchWarmup
	}
	if *window == 0 {
		*window = benchWindow
	}
	if open {
		return benchOpen(ctx, *target, *admin, rates, *warmup, *window, *timeout, *maxInFlight, proto, *conns, *out, stdout, stderr)
	}
	if levels == nil {
		levels, _ = parseLevels(benchLevels)
	}
	var results []bench.Result
	for i, c := range levels {
		var res bench.Result
		res, err = bench.Run(ctx, bench.Config{
			URL: *target, AdminURL: *admin, Concurrency: c,
			Warmup: *warmup, Window: *window, Timeout: *timeout,
			Progress: stderr, Label: fmt.Sprintf("[%d/%d] c%d", i+1, len(levels), c),
			Proto: proto, Conns: *conns,
		})
		if err != nil {
			break
		}
		results = append(results, res)
	}
	if errors.Is(err, bench.ErrConfig) {
		return fail("%v", err)
	}
	rep := report.Report[bench.Result]{Title: "loomgate bench: " + *target + overProto(proto, *conns), Generated: time.Now(), Results: results}
	return finish(rep, err, *out, stdout, stderr)
}

// finish prints what was measured, even when a run failed or was
// interrupted part way, writes the files, and returns the exit status.
func finish[R report.Row](rep report.Report[R], runErr error, out string, stdout, stderr io.Writer) int {
	code := 0
	if runErr != nil {
		code = 1
		if errors.Is(runErr, context.Canceled) {
			fmt.Fprintln(stderr, "loomgate bench: interrupted")
		} else {
			fmt.Fprintf(stderr, "loomgate bench: %v\n", runErr)
		}
	}
	if len(rep.Results) == 0 {
		return max(code, 1)
	}
	if err := report.WriteMarkdown(stdout, rep.Results); err != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout)
	for _, s := range report.Summary(rep.Results) {
		fmt.Fprintf(stdout, "- %s\n", s)
	}
	if out != "" {
		if err := rep.WriteDir(out); err != nil {
			fmt.Fprintf(stderr, "loomgate bench: --out %s: %v\n", out, err)
			return 1
		}
		fmt.Fprintf(stderr, "loomgate bench: wrote %s, %s and %s\n",
			filepath.Join(out, report.FileCSV), filepath.Join(out, report.FileJSON), filepath.Join(out, report.FileHTML))
	}
	return code
}

// parseLevels reads "50,100,200".
func parseLevels(s string) ([]int, error) {
	var levels []int
	for part := range strings.SplitSeq(s, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || c < 1 {
			return nil, fmt.Errorf("%q is not a level; want whole numbers of at least 1, comma-separated, e.g. 50,100,200", part)
		}
		levels = append(levels, c)
	}
	return levels, nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080/wait?ms=200")
	}
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func armLabels(arms []bench.Arm) string {
	s := make([]string, len(arms))
	for i, a := range arms {
		s[i] = a.Label
		if a.Proto != "" {
			s[i] += " over " + a.Proto.String()
		}
	}
	return strings.Join(s, "; ")
}

// benchOpen drives a URL at each rate in turn and prints the results.
func benchOpen(ctx context.Context, target, admin string, rates []float64, warmup, window, timeout time.Duration, maxInFlight int,
	proto bench.Proto, conns int, out string, stdout, stderr io.Writer) int {
	var results []bench.OpenResult
	var err error
	for i, rate := range rates {
		var res bench.OpenResult
		res, err = bench.RunOpen(ctx, bench.OpenConfig{
			URL: target, AdminURL: admin, Rate: rate, Warmup: warmup, Window: window, Timeout: timeout,
			MaxInFlight: maxInFlight, Progress: stderr, Proto: proto, Conns: conns,
			Label: fmt.Sprintf("[%d/%d] %s rps", i+1, len(rates), strconv.FormatFloat(rate, 'f', -1, 64)),
		})
		if err != nil {
			break
		}
		results = append(results, res)
	}
	if errors.Is(err, bench.ErrConfig) {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", err)
		return 2
	}
	rep := report.Report[bench.OpenResult]{Title: "loomgate bench: " + target + overProto(proto, conns), Generated: time.Now(), Results: results}
	return finish(rep, err, out, stdout, stderr)
}

// overProto names the protocol of a --url run in its report's title, if
// it is not HTTP/1.1.
func overProto(p bench.Proto, conns int) string {
	if p == "" || p == bench.HTTP1 {
		return ""
	}
	return fmt.Sprintf(" over %s, %d connections", p, cmp.Or(conns, bench.DefaultConns))
}

// setFlags is the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// parseRates reads "800,1200,3000": requests per second, fractions allowed.
func parseRates(s string) ([]float64, error) {
	var rates []float64
	for part := range strings.SplitSeq(s, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || !(r > 0) || r > 1e6 {
			return nil, fmt.Errorf("%q is not a rate; want requests per second above 0 and at most 1000000, comma-separated, e.g. 800,1200,3000", part)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

func joinRates(v []float64) string {
	s := make([]string, len(v))
	for i, r := range v {
		s[i] = strconv.FormatFloat(r, 'f', -1, 64)
	}
	return strings.Join(s, ",")
}

// allScenarioNames lists the closed-loop scenarios, then the open-loop
// ones, then the advice matrix and overhead.
func allScenarioNames() []string {
	return append(bench.ScenarioNames(), adviceScenario, adaptiveScenario, overheadScenario, fleetScenario, prioritiesScenario)
}

// openScenarioNames lists the open-loop scenarios.
func openScenarioNames() []string {
	var names []string
	for _, sc := range bench.Scenarios() {
		if sc.Open() {
			names = append(names, sc.Name)
		}
	}
	return names
}

// adviceScenario is the advice matrix's name for --scenario.
const adviceScenario = "advice"

// pickCases is a matrix's cases that --cases names, in the order named, or
// all of them when names is empty; a name it lacks is said on stderr with
// the names it has.
func pickCases[C any](cases []C, name func(C) string, names string, stderr io.Writer) ([]C, bool) {
	if names == "" {
		return cases, true
	}
	var picked []C
	for want := range strings.SplitSeq(names, ",") {
		i := slices.IndexFunc(cases, func(c C) bool { return name(c) == strings.TrimSpace(want) })
		if i < 0 {
			var all []string
			for _, c := range cases {
				all = append(all, name(c))
			}
			fmt.Fprintf(stderr, "loomgate bench: --cases %q: no case %q; the cases are %s\n", names, want, strings.Join(all, ", "))
			return nil, false
		}
		picked = append(picked, cases[i])
	}
	return picked, true
}

// runAdviceMatrix is --scenario advice: every case of the matrix, or those
// --cases names, each judged against its truth, the recommended setting
// applied and measured against the prediction.
func runAdviceMatrix(ctx context.Context, launcher bench.Launcher, names string, stdout, stderr io.Writer) int {
	cases, ok := pickCases(advicematrix.Cases(), func(c advicematrix.Case) string { return c.Name }, names, stderr)
	if !ok {
		return 2
	}
	if launcher == nil {
		fmt.Fprintln(stderr, "loomgate bench: --scenario advice needs a launcher to start its stubs and sidecars, which this build lacks")
		return 1
	}
	results, err := advicematrix.Run(ctx, cases, launcher, advicematrix.Options{Apply: true, Progress: stderr})
	if len(results) > 0 {
		advicematrix.WriteMarkdown(stdout, results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", err)
		return 1
	}
	for _, r := range results {
		if !r.Passed() {
			return 1
		}
	}
	return 0

}

const (
	overheadScenario    = "overhead"
	overheadDescription = "what the sidecar costs per replica beside a bare fasthttp proxy, HAProxy and nginx (when installed), each its own process " +
		"in front of the same `loomgate stub`: CPU per request at c50 and at 5000 rps, memory with 4000 requests held in each mode, latency added at c50 and c1000; with --h2, CPU per call of h2c and gRPC beside a bare Go proxy and HAProxy"
)

// runOverhead runs the overhead scenario with this executable as the stub
// and the sidecar, and prints its table; cfg's Duration, if set, replaces
// the latency and memory measurements' window.
func runOverhead(ctx context.Context, cfg overhead.Config, out string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: cannot find this executable to run the stub and the sidecar: %v\n", err)
		return 1
	}
	cfg.Binary, cfg.Progress = exe, stderr
	res, err := overhead.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", err)
		if len(res.Rows) == 0 {
			return 1
		}
	}
	var md strings.Builder
	if werr := overhead.WriteMarkdown(&md, res); werr != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", werr)
		return 1
	}
	fmt.Fprint(stdout, md.String())
	if out != "" {
		if werr := writeOverhead(out, md.String(), res); werr != nil {
			fmt.Fprintf(stderr, "loomgate bench: --out %s: %v\n", out, werr)
			return 1
		}
		fmt.Fprintf(stderr, "loomgate bench: wrote %s and %s\n", filepath.Join(out, "overhead.md"), filepath.Join(out, "overhead.json"))
	}
	if err != nil {
		return 1
	}
	return 0
}

const (
	prioritiesScenario    = "priorities"
	prioritiesDescription = "classes of clients measured apart through one upstream, today's FIFO queue beside priorities, shares and fair queuing " +
		"in fixed and adaptive mode: a critical class through a sheddable flood, closed or open (arrivals that do not slow down, from the first second), and a noisy tenant among four; --warmup and --window set each arm's"
)

// runPriorities runs the priorities scenario's cases, or those names
// picks, and prints a table per case.
func runPriorities(ctx context.Context, launcher bench.Launcher, names string, warmup, window time.Duration, out string, stdout, stderr io.Writer) int {
	cases, ok := pickCases(priorities.Cases(), func(c priorities.Case) string { return c.Name }, names, stderr)
	if !ok {
		return 2
	}
	if launcher == nil {
		fmt.Fprintf(stderr, "loomgate bench: --scenario %s needs a launcher to start its stubs and sidecars, which this build lacks\n", prioritiesScenario)
		return 1
	}
	var results []priorities.Result
	var err error
	for _, c := range cases {
		var res []priorities.Result
		res, err = priorities.Run(ctx, c, launcher, priorities.Options{Warmup: warmup, Window: window, Progress: stderr})
		results = append(results, res...)
		if err != nil {
			fmt.Fprintf(stderr, "loomgate bench: %v\n", err)
			break
		}
	}
	var md strings.Builder
	if werr := priorities.WriteMarkdown(&md, results); werr != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", werr)
		return 1
	}
	if !printMarkdown(md.String(), out, "priorities.md", stdout, stderr) {
		return 1
	}
	if err != nil {
		return 1
	}
	return 0
}

const (
	fleetScenario    = "fleet"
	fleetDescription = "3 sidecars in fixed mode, each before its own `loomgate stub`, behind HAProxy round robin, scraped by a real Prometheus " +
		"with deploy/prometheus/rules.yml: per step of demand (30% to 130% of what they serve), each replica's and the fleet's utilisation " +
		"and the replicas an HPA targeting 0.7 would ask for; --window sets each step (default 12s). Needs haproxy and prometheus, and a checkout for the rules"
)

// runFleet runs the fleet scenario with this executable as the stubs and
// the sidecars and the checkout's rules, and prints its table; step, if
// set, replaces each step's length.
func runFleet(ctx context.Context, step time.Duration, out string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: cannot find this executable to run the stubs and the sidecars: %v\n", err)
		return 1
	}
	rules, err := findInCheckout(filepath.Join("deploy", "prometheus", "rules.yml"))
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: --scenario %s evaluates the checkout's Prometheus rules: %v; run it inside a checkout\n", fleetScenario, err)
		return 1
	}
	res, err := fleet.Run(ctx, fleet.Config{Binary: exe, Rules: rules, Step: step, Progress: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", err)
		if len(res.Steps) == 0 {
			return 1
		}
	}
	var md strings.Builder
	if werr := fleet.WriteMarkdown(&md, res); werr != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", werr)
		return 1
	}
	if !printMarkdown(md.String(), out, "fleet.md", stdout, stderr) {
		return 1
	}
	if err != nil {
		return 1
	}
	return 0
}

// printMarkdown prints a scenario's tables and, with --out, writes them
// to name in out; it reports whether both went well.
func printMarkdown(md, out, name string, stdout, stderr io.Writer) bool {
	fmt.Fprint(stdout, md)
	if out == "" {
		return true
	}
	err := os.MkdirAll(out, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(out, name), []byte(md), 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: --out %s: %v\n", out, err)
		return false
	}
	fmt.Fprintf(stderr, "loomgate bench: wrote %s\n", filepath.Join(out, name))
	return true
}

// findInCheckout looks for rel in the working directory and each of its
// parents.
func findInCheckout(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s in the working directory or above it", rel)
		}
		dir = parent
	}
}

func writeOverhead(dir, md string, res overhead.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "overhead.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "overhead.md"), []byte(md), 0o644)
}

func isOpenScenario(name string) bool {
	sc, ok := bench.LookupScenario(name)
	return ok && sc.Open()
}
