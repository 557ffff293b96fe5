// Command loomgate is a sidecar reverse proxy that enforces a concurrency
// policy in front of an HTTP service and measures what the policy does to
// every request. `loomgate -h` lists its commands and configuration.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/loomgate/loomgate/internal/cli"
	"github.com/loomgate/loomgate/sidecar"
)

// Stamped at build time: -ldflags "-X main.version=v1.2.3 -X main.commit=abc".
var (
	version = "dev"
	commit  = ""
)

func main() {
	// The first SIGTERM, SIGINT or SIGHUP starts a graceful drain; stop()
	// restores the default handling, so a second one ends the process at
	// once. SIGHUP is the hang-up of the terminal it was started from (or
	// a supervisor's): by default it would end the process mid-request.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
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
		return sidecar.Main(ctx, environ, stdout, stderr, version)
	case "stub", "bench", "demo":
		return runLab(cmd, args, stderr)
	case "advise":
		return runAdvise(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "-h", "-help", "--help", "help":
		printUsage(stdout)
		return 0
	}
	if strings.HasPrefix(cmd, "-") {
		// A flag where a command goes: the sidecar is configured by its
		// environment, and the name of the variable is usually guessable.
		name, value, _ := strings.Cut(strings.TrimLeft(cmd, "-"), "=")
		variable := sidecar.EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if value == "" && len(args) > 0 {
			value = args[0]
		}
		hint := ""
		for _, v := range sidecar.Variables() {
			if v.Name == variable {
				hint = fmt.Sprintf(": %s=%s loomgate", variable, cmp.Or(value, v.Default))
			}
		}
		fmt.Fprintf(stderr, "loomgate: %s is not a flag; the sidecar is configured by LOOMGATE_* variables%s (loomgate -h lists them)\n", cmd, hint)
		return 2
	}
	fmt.Fprintf(stderr, "loomgate: unknown command %q%s; the commands are %s (loomgate -h for more)\n", cmd, closest(cmd, commands), strings.Join(commands, ", "))
	return 2
}

// commands are loomgate's commands, for messages.
var commands = []string{"proxy", "advise", "version", "demo", "bench", "stub"}

// closest suggests the command nearest a misspelt one.
func closest(cmd string, names []string) string {
	if best := cli.Closest(cmd, names); best != "" {
		return " (did you mean " + best + "?)"
	}
	return ""
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
  loomgate advise    ask a running sidecar for its advice (loomgate advise -h)
  loomgate version   version, Go version, commit

The lab's commands, run from a checkout of the source (they build and run
./cmd/loomlab, which this binary does not carry):
  loomgate demo      stub, sidecar in each mode (processes of their own) and load; prints the table, writes a report
  loomgate bench     load against any URL, closed or open loop, and scenarios (loomgate bench -h)
  loomgate stub      an experiment upstream (loomgate stub -h)

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
