// Command loomlab is loomgate's lab: an experiment upstream (stub), a load
// rig with the published experiments as scenarios (bench), and the demo
// that runs them against the sidecar in each mode. It is a command of its
// own so that the sidecar's binary, which runs in every pod, carries none
// of it; `loomgate demo`, `bench` and `stub` run it from a checkout.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/loomgate/loomgate/internal/cli"
	"github.com/loomgate/loomgate/sidecar"
)

// Stamped at build time, as loomgate's: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	// The first SIGTERM or SIGINT ends the run gracefully; stop() restores
	// the default handling, so a second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run dispatches to a command and returns the process's exit status.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "stub":
		return runStub(ctx, args, stdout, stderr)
	case "bench":
		return runBench(ctx, args, stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "proxy":
		// The sidecar, as `loomgate proxy` runs it: scenarios start their
		// arms with this binary, so that a run needs no second one.
		if len(args) > 0 {
			fmt.Fprintf(stderr, "loomlab proxy takes no arguments, only LOOMGATE_* variables; got %q\n", args)
			return 2
		}
		// The adaptive scenario's arms name a controller of the lab's to
		// run in place of loomgate's.
		controller, err := labController(environ)
		if err != nil {
			fmt.Fprintf(stderr, "loomlab proxy: %v\n", err)
			return 2
		}
		return sidecar.MainWithController(ctx, environ, stdout, stderr, version, controller)
	case "version":
		fmt.Fprintf(stdout, "loomlab %s (%s)\n", version, runtime.Version())
		return 0
	case "-h", "-help", "--help", "help":
		printUsage(stdout)
		return 0
	}
	suggestion := ""
	if best := cli.Closest(cmd, []string{"demo", "bench", "stub", "proxy", "version"}); best != "" {
		suggestion = " (did you mean " + best + "?)"
	}
	fmt.Fprintf(stderr, "loomlab: unknown command %q%s; the commands are demo, bench, stub, proxy, version (loomlab -h for more)\n", cmd, suggestion)
	return 2
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `loomlab: loomgate's lab. From a checkout, loomgate demo, bench and stub run it.

Commands:
  loomlab demo      stub, sidecar in each mode (processes of their own) and load; prints the table, writes a report
  loomlab bench     load against any URL, closed or open loop, and scenarios (loomlab bench -h)
  loomlab stub      an experiment upstream (loomlab stub -h)
  loomlab proxy     the sidecar, as loomgate runs it (LOOMGATE_* variables; loomgate -h lists them)
  loomlab version   version and Go version
`)
}
