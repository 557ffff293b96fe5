package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/loomgate/loomgate/internal/cli"
)

// The demo is the crossover scenario, cut to three levels and short
// windows so that it finishes in about a minute on two cores.
const (
	demoLevels = "50,200,1000"
	demoWarmup = 2 * time.Second
	demoWindow = 4 * time.Second
	demoOut    = "loomgate-report"
)

// runDemo is `loomgate demo`: a stub and a sidecar in each mode, each a
// process of its own, and the bench in this one; the table and what it
// shows on stdout, the report in ./loomgate-report/.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loomgate demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", demoOut, "directory for results.csv, results.json and report.html")
	levels := fs.String("c", demoLevels, "concurrency levels, comma-separated")
	warmup := fs.Duration("warmup", demoWarmup, "warm-up before each window")
	window := fs.Duration("window", demoWindow, "measurement window of each level")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: loomgate demo [flags]

Runs the crossover experiment: a stub that answers after 200 ms, loomgate
in front of it as a fixed pool of 200 and as unbounded admission (stub and
each sidecar a process of its own), and closed-loop load at each level.
Prints the table and what it shows, and writes the report. For the other
experiments: loomgate bench --scenario list.

Flags:
`)
		fs.PrintDefaults()
	}
	if exit, ok := cli.Parse(fs, args, stderr); !ok {
		return exit
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loomgate demo: unexpected argument %q (loomgate demo -h)\n", fs.Arg(0))
		return 2
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--warmup", *warmup}, {"--window", *window}} {
		if d.v < 0 || d.name == "--window" && d.v == 0 {
			fmt.Fprintf(stderr, "loomgate demo: %s %s: want a duration above 0, e.g. 4s\n", d.name, d.v)
			return 2
		}
	}
	fmt.Fprintln(stderr, "loomgate demo: fixed 200 against unbounded in front of a 200 ms upstream; about a minute")
	return benchCommand(ctx, []string{
		"--scenario", "crossover", "-c", *levels, "--warmup", warmup.String(), "--window", window.String(), "--out", *out,
	}, scenarioLauncher, stdout, stderr)
}
