// Command loomgate is a sidecar reverse proxy that enforces a concurrency
// policy in front of an HTTP service and measures what the policy does to
// every request. `loomgate -h` lists its commands and configuration.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/loomgate/loomgate/sidecar"
)

// Stamped at build time: -ldflags "-X main.version=v1.2.3 -X main.commit=abc".
var (
	version = "dev"
	commit  = ""
)

func main() {
	// The first SIGTERM or SIGINT starts a graceful drain; stop() restores
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
	cmd := "proxy"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "proxy":
		if len(args) > 0 {
			if isHelp(args[0]) {
				printUsage(stdout)
				return 0
			}
			fmt.Fprintf(stderr, "loomgate proxy takes no arguments, only LOOMGATE_* variables; got %q\n", args)
			return 2
		}
		return runProxy(ctx, environ, stdout, stderr)
	case "stub":
		return runStub(ctx, args, stdout, stderr)
	case "bench":
		return runBench(ctx, args, stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "advise":
		return runAdvise(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "-h", "-help", "--help", "help":
		printUsage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "loomgate: unknown command %q\n\n", cmd)
	printUsage(stderr)
	return 2
}

func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func versionLine() string {
	c := commit
	if c == "" {
		c = "unknown"
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, s := range info.Settings {
				if s.Key == "vcs.revision" {
					c = s.Value
				}
			}
		}
	}
	return fmt.Sprintf("loomgate %s (%s, commit %s)", version, runtime.Version(), c)
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `loomgate: a sidecar reverse proxy that enforces a concurrency policy and
measures what it does to every request.

Commands:
  loomgate [proxy]   run the sidecar, configured from LOOMGATE_* variables
  loomgate stub      an experiment upstream (loomgate stub -h)
  loomgate bench     load against any URL, closed or open loop, and scenarios (loomgate bench -h)
  loomgate demo      stub, sidecar in each mode and bench in one process
  loomgate advise    ask a running sidecar for its advice (loomgate advise -h)
  loomgate version   version, Go version, commit

Configuration (environment):
`)
	for _, v := range sidecar.Variables() {
		def := v.Default
		if def == "" {
			def = "empty"
		}
		fmt.Fprintf(w, "  %s (default %s)\n      %s; accepts %s\n", v.Name, def, v.Help, v.Accepts)
	}
	fmt.Fprint(w, strings.TrimLeft(`
Bad configuration is reported all at once and exits with status 2.
`, "\n"))
}
