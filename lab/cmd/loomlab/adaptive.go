package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/adaptivematrix"
	"github.com/loomgate/loomgate/lab/bench/adaptivematrix/reference"
	"github.com/loomgate/loomgate/sidecar"
)

// adaptiveScenario is the adaptive matrix's name for --scenario.
const adaptiveScenario = "adaptive"

// labController reads LOOMLAB_CONTROLLER from environ: the controller of
// the lab's that moves the limit in adaptive mode in place of loomgate's
// (bench.Sidecar.Controller), or nil for loomgate's.
func labController(environ []string) (func(sidecar.ControllerHooks) sidecar.Controller, error) {
	var name, upstream string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "LOOMLAB_CONTROLLER="); ok {
			name = v
		}
		if v, ok := strings.CutPrefix(kv, "LOOMGATE_UPSTREAM="); ok {
			upstream = v
		}
	}
	switch name {
	case "":
		return nil, nil
	case adaptivematrix.ControllerEnvoy:
		return func(h sidecar.ControllerHooks) sidecar.Controller {
			return classless{reference.NewEnvoy(reference.EnvoyConfig{SetLimit: h.SetLimit})}
		}, nil
	case adaptivematrix.ControllerGradient2:
		return func(h sidecar.ControllerHooks) sidecar.Controller {
			return classless{reference.NewGradient2(reference.Gradient2Config{
				SetLimit: h.SetLimit,
				InFlight: func() int64 { return h.State().InFlight },
			})}
		}, nil
	case adaptivematrix.ControllerPoolOracle:
		return func(h sidecar.ControllerHooks) sidecar.Controller {
			return classless{adaptivematrix.PoolOracle{SetLimit: h.SetLimit, UpstreamURL: upstream}}
		}, nil
	}
	return nil, fmt.Errorf("LOOMLAB_CONTROLLER=%q: want %s, %s or %s", name,
		adaptivematrix.ControllerEnvoy, adaptivematrix.ControllerGradient2, adaptivematrix.ControllerPoolOracle)
}

// classless plugs in a controller of the lab's, which takes every answer's
// service time alike, whatever its route class: as the algorithms it
// follows were published.
type classless struct {
	c interface {
		Record(service time.Duration)
		Run(ctx context.Context)
	}
}

func (c classless) Record(_ int, service time.Duration) { c.c.Record(service) }
func (c classless) Run(ctx context.Context)             { c.c.Run(ctx) }

// runAdaptiveMatrix is --scenario adaptive: every case of the matrix, or
// those --cases names, through every arm, --rounds times; the table to stdout, and with
// --out the report with a chart of the limit per case.
func runAdaptiveMatrix(ctx context.Context, launcher bench.Launcher, names, armNames string, rounds int, out string, stdout, stderr io.Writer) int {
	cases, ok := pickCases(adaptivematrix.Cases(), func(c adaptivematrix.Case) string { return c.Name }, names, stderr)
	if !ok {
		return 2
	}
	var arms []string
	if armNames != "" {
		for want := range strings.SplitSeq(armNames, ",") {
			want = strings.TrimSpace(want)
			if !slices.Contains(adaptivematrix.Arms(), want) {
				fmt.Fprintf(stderr, "loomgate bench: --arms %q: no arm %q; the arms are %s\n", armNames, want, strings.Join(adaptivematrix.Arms(), ", "))
				return 2
			}
			arms = append(arms, want)
		}
	}
	if launcher == nil {
		fmt.Fprintln(stderr, "loomgate bench: --scenario adaptive needs a launcher to start its stubs and sidecars, which this build lacks")
		return 1
	}
	began := time.Now()
	results, err := adaptivematrix.Run(ctx, cases, launcher, adaptivematrix.Options{Progress: stderr, Arms: arms, Rounds: rounds})
	if len(results) > 0 {
		adaptivematrix.WriteMarkdown(stdout, cases, results)
		runs := 0
		for _, r := range results {
			if r.SameAs == "" {
				runs += max(r.Rounds, 1)
			}
		}
		fmt.Fprintf(stdout, "\n%d runs in %s.\n", runs, time.Since(began).Round(time.Second))
		if out != "" {
			if werr := adaptivematrix.WriteDir(out, cases, results); werr != nil {
				fmt.Fprintf(stderr, "loomgate bench: --out %s: %v\n", out, werr)
				return 1
			}
			fmt.Fprintf(stderr, "loomgate bench: wrote %s\n", out)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "loomgate bench: %v\n", err)
		return 1
	}
	return 0
}
